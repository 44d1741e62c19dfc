"""Classic tensor-parallel bugs written with the raw Megatron calls, in code that declares the
SPMD types of its inputs: each is an spmd error on the line of the mistake."""
import torch
import spmd
from spmd import Tensor, I, P, R, S, V
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_sequence_parallel_region,
)


def partial_into_copy(h: Tensor[V["tp"]], w_row: Tensor[V["tp"]]) -> Tensor[R["tp"]]:
    # The row-parallel matmul's output is a pending sum: it must be reduced, not copied.
    y = spmd.linear(h, w_row, out_partial_axes="tp")
    return copy_to_tensor_model_parallel_region(y)  # E: [spmd-mismatch] it is P on "tp" where I is needed; P to I is a reduction


def reduced_plus_copied(p: Tensor[P["tp"]], x: Tensor[I["tp"]]) -> None:
    out = reduce_from_tensor_model_parallel_region(p)
    h = copy_to_tensor_model_parallel_region(x)
    spmd.reveal(out + h)  # E: [spmd-invariant-mix] Invariant on "tp" (out: Tensor[I["tp"]]) cannot mix with Replicate (h: Tensor[R["tp"]]) # N: Revealed type is Tensor (unknown on "tp" after an error)


def reduced_twice(p: Tensor[P["tp"]]) -> None:
    out = reduce_from_tensor_model_parallel_region(p)
    reduce_scatter_to_sequence_parallel_region(out)  # E: [spmd-mismatch] it is I on "tp" where P is needed


def gathered_on_the_wrong_dim(h: Tensor[S[-1, "tp"]], s: Tensor[S[0, "tp"], V["dp"]]) -> None:
    gather_from_sequence_parallel_region(h)  # E: [spmd-mismatch] it is S(-1) on "tp" where S(0) is needed
    gather_from_tensor_model_parallel_region(s)  # E: [spmd-mismatch] it is S(0) on "tp" where S(-1) is needed


def relu_of_a_partial_sum(p: Tensor[P["tp"]]) -> None:
    scattered = reduce_scatter_to_sequence_parallel_region(p)
    torch.relu(p)  # E: [spmd-partial-nonlinear] Partial on "tp" (p: Tensor[P["tp"]]) cannot go through relu
    torch.relu(scattered)


def correct_block(x: Tensor[I["tp"]], w1: Tensor[S[0, "tp"]], w2: Tensor[S[1, "tp"]]) -> Tensor[I["tp"]]:
    # The same calls used correctly: no error, the table's types.
    h = copy_to_tensor_model_parallel_region(x)
    a = torch.relu(torch.nn.functional.linear(h, w1))
    y = spmd.linear(a, w2, out_partial_axes="tp")
    out = reduce_from_tensor_model_parallel_region(y)
    spmd.reveal(out)  # N: Revealed type is Tensor[I["tp"]]
    seq = scatter_to_sequence_parallel_region(out)
    spmd.reveal(gather_from_sequence_parallel_region(seq, tensor_parallel_output_grad=False))  # N: Revealed type is Tensor[I["tp"]]
    return out
