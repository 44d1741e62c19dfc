"""Megatron-style code annotated with torch.Tensor (no SPMD types) where the typed results of
unchanged mapping calls give errors on correct code.  Measured, not wanted: each expected error
below says why it happens (docs/megatron.md, "What it does not do").  When the plugin stops
reporting one, this test fails: delete the expectation.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)


# 1. An untyped operand takes the typed operand's type: F.linear(R, w) is R, although the
#    column-parallel weight w is sharded (the product is V) and the row-parallel one makes it P.
def hand_written_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = copy_to_tensor_model_parallel_region(x)
    y = F.linear(F.gelu(F.linear(h, w1)), w2)
    return reduce_from_tensor_model_parallel_region(y)  # E: [spmd-mismatch] is Tensor[R["tp"]] but Tensor[P["tp"]] is expected


def vocab_parallel_logits(x: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    logits = F.linear(copy_to_tensor_model_parallel_region(x), embedding)
    return gather_from_tensor_model_parallel_region(logits)  # E: [spmd-mismatch] is Tensor[R["tp"]] but Tensor[S[-1, "tp"]] is expected


# 2. A local variable has the type of its first assignment (mypy): a later assignment of
#    another SPMD type, or of a plain tensor in a module that does not import spmd, is an error.
def sequence_parallel_or_not(y: torch.Tensor, sequence_parallel: bool) -> torch.Tensor:
    if sequence_parallel:
        output = reduce_scatter_to_sequence_parallel_region(y)
    else:
        output = reduce_from_tensor_model_parallel_region(y)  # E: [assignment] Incompatible types in assignment
    return output


def maybe_gather(output_parallel: torch.Tensor, gather_output: bool,
                 tp_group: Optional[torch.distributed.ProcessGroup]) -> torch.Tensor:
    if gather_output:
        output = gather_from_tensor_model_parallel_region(output_parallel, group=tp_group)
    else:
        output = output_parallel  # E: [assignment] Incompatible types in assignment
    return output


# 3. A result is a torch.Tensor instead of Any (megatron-core has no py.typed): torch's stubs
#    apply, and they do not know numpy's `axis=` spelling that torch accepts at run time.
def tokens_per_rank(counts: torch.Tensor, tp_group: torch.distributed.ProcessGroup) -> torch.Tensor:
    gathered = gather_from_sequence_parallel_region(counts, group=tp_group)
    return gathered.sum(axis=1)  # E: [call-overload] Unexpected keyword argument "axis"
