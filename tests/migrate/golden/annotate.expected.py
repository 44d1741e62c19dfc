"""--annotate: the types the mapping calls fix at function boundaries."""
from typing import Optional

import torch
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_tensor_model_parallel_region,
)
import spmd
from spmd import I, P, R, S, Tensor


def returns_the_call(x: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
    return spmd.all_reduce(x, "tp", src=P, dst=I)


def returns_a_variable(x: torch.Tensor, weight: torch.Tensor) -> Tensor[I["tp"]]:
    out = spmd.all_reduce(x @ weight, "tp", src=P, dst=I)
    return out


def shard_types(x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
    return spmd.all_gather(spmd.convert(x, "tp", src=I, dst=S(-1)), "tp", src=S(-1), dst=I)


def both_branches(x, sequence_parallel: bool) -> Tensor[S[0, "tp"]]:  # x reaches calls in branches only: only the return
    if sequence_parallel:
        return spmd.reduce_scatter(x, "tp", src=P, dst=S(0))
    else:
        return spmd.reduce_scatter(x * 2, "tp", src=P, dst=S(0))


def guarded(x: Tensor[P["tp"]], weight) -> Tensor[I["tp"]]:
    if weight is None:
        raise ValueError("no weight")
    with torch.no_grad():
        pass
    return spmd.all_reduce(x, "tp", src=P, dst=I)


def early_return(x, skip: bool):  # x may skip the call: left alone
    if skip:
        return x
    return spmd.reinterpret(x, "tp", src=I, dst=R)


def conditional_call(x, flag: bool):  # x may skip the call: left alone
    y = spmd.reinterpret(x, "tp", src=I, dst=R) if flag else x
    z = flag and spmd.reinterpret(x, "tp", src=I, dst=R)
    return y, z


class Linear(torch.nn.Module):
    def forward(self, input_: Tensor[I["tp"]]):
        return spmd.reinterpret(input_, "tp", src=I, dst=R) @ self.weight


# Partly annotated or left alone:
def reassigned_parameter(x) -> Tensor[R["tp"]]:  # x is rebound: only the return is annotated
    x = x * 2
    return spmd.reinterpret(x, "tp", src=I, dst=R)


def reassigned_result(x: Tensor[I["tp"]]):  # y is rebound: only x is annotated
    y = spmd.reinterpret(x, "tp", src=I, dst=R)
    y = y * 2
    return y


def returns_differ(x, flag):  # R or I, and x is I and P
    if flag:
        return spmd.reinterpret(x, "tp", src=I, dst=R)
    return spmd.all_reduce(x, "tp", src=P, dst=I)


def may_return_none(x, flag):  # can fall off the end, x is used in a branch only: left alone
    if flag:
        return spmd.reinterpret(x, "tp", src=I, dst=R)


def default_none(x=None) -> Tensor[R["tp"]]:  # a parameter with a default is left alone
    return spmd.reinterpret(x, "tp", src=I, dst=R)


def typed_already(x: Optional[torch.Tensor]) -> "torch.Tensor":  # not plain Tensor annotations
    return spmd.reinterpret(x, "tp", src=I, dst=R)


def generator(x: Tensor[I["tp"]]):  # a generator's return is not the yielded type
    yield spmd.reinterpret(x, "tp", src=I, dst=R)


def two_types_for_one_parameter(x):  # I and P for x; a tuple returned
    a = spmd.reinterpret(x, "tp", src=I, dst=R)
    b = spmd.all_reduce(x, "tp", src=P, dst=I)
    return a, b


def outer(x):  # inner is annotated on its own; outer returns what inner returns
    def inner(y: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return spmd.reinterpret(y, "tp", src=I, dst=R)

    return inner(x)
