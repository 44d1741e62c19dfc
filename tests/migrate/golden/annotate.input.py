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


def returns_the_call(x):
    return reduce_from_tensor_model_parallel_region(x)


def returns_a_variable(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = reduce_from_tensor_model_parallel_region(x @ weight)
    return out


def shard_types(x):
    return gather_from_tensor_model_parallel_region(scatter_to_tensor_model_parallel_region(x))


def both_branches(x, sequence_parallel: bool):  # x reaches calls in branches only: only the return
    if sequence_parallel:
        return reduce_scatter_to_sequence_parallel_region(x)
    else:
        return reduce_scatter_to_sequence_parallel_region(x * 2)


def guarded(x, weight):
    if weight is None:
        raise ValueError("no weight")
    with torch.no_grad():
        pass
    return reduce_from_tensor_model_parallel_region(x)


def early_return(x, skip: bool):  # x may skip the call: left alone
    if skip:
        return x
    return copy_to_tensor_model_parallel_region(x)


def conditional_call(x, flag: bool):  # x may skip the call: left alone
    y = copy_to_tensor_model_parallel_region(x) if flag else x
    z = flag and copy_to_tensor_model_parallel_region(x)
    return y, z


class Linear(torch.nn.Module):
    def forward(self, input_: torch.Tensor):
        return copy_to_tensor_model_parallel_region(input_) @ self.weight


# Partly annotated or left alone:
def reassigned_parameter(x):  # x is rebound: only the return is annotated
    x = x * 2
    return copy_to_tensor_model_parallel_region(x)


def reassigned_result(x):  # y is rebound: only x is annotated
    y = copy_to_tensor_model_parallel_region(x)
    y = y * 2
    return y


def returns_differ(x, flag):  # R or I, and x is I and P
    if flag:
        return copy_to_tensor_model_parallel_region(x)
    return reduce_from_tensor_model_parallel_region(x)


def may_return_none(x, flag):  # can fall off the end, x is used in a branch only: left alone
    if flag:
        return copy_to_tensor_model_parallel_region(x)


def default_none(x=None):  # a parameter with a default is left alone
    return copy_to_tensor_model_parallel_region(x)


def typed_already(x: Optional[torch.Tensor]) -> "torch.Tensor":  # not plain Tensor annotations
    return copy_to_tensor_model_parallel_region(x)


def generator(x):  # a generator's return is not the yielded type
    yield copy_to_tensor_model_parallel_region(x)


def two_types_for_one_parameter(x):  # I and P for x; a tuple returned
    a = copy_to_tensor_model_parallel_region(x)
    b = reduce_from_tensor_model_parallel_region(x)
    return a, b


def outer(x):  # inner is annotated on its own; outer returns what inner returns
    def inner(y):
        return copy_to_tensor_model_parallel_region(y)

    return inner(x)
