"""Megatron-style code annotated with torch.Tensor (no SPMD types) where the typed results of
unchanged mapping calls used to give errors on correct code.  With the plugin a module that
uses no SPMD types sees the mapping calls' results untyped (gradual), so none of these is an
error; without the plugin the stubs alone make the results plain torch.Tensor, and the only
error left is torch's own (3).  docs/megatron.md, "What it does not do".
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


# 1. Were the results typed here, an untyped weight beside R makes the product unknown on the
#    axis (it used to make it R although the column-parallel weight w is sharded, the product
#    V, and the row-parallel one makes it P): no error, nothing checked past the product.
def hand_written_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = copy_to_tensor_model_parallel_region(x)
    y = F.linear(F.gelu(F.linear(h, w1)), w2)
    return reduce_from_tensor_model_parallel_region(y)


def vocab_parallel_logits(x: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    logits = F.linear(copy_to_tensor_model_parallel_region(x), embedding)
    return gather_from_tensor_model_parallel_region(logits)


# 2. Were the results typed here, a local variable would have the type of its first
#    assignment (mypy): a later assignment of another SPMD type or of a plain tensor would be
#    an error.
def sequence_parallel_or_not(y: torch.Tensor, sequence_parallel: bool) -> torch.Tensor:
    if sequence_parallel:
        output = reduce_scatter_to_sequence_parallel_region(y)
    else:
        output = reduce_from_tensor_model_parallel_region(y)
    return output


def maybe_gather(output_parallel: torch.Tensor, gather_output: bool,
                 tp_group: Optional[torch.distributed.ProcessGroup]) -> torch.Tensor:
    if gather_output:
        output = gather_from_tensor_model_parallel_region(output_parallel, group=tp_group)
    else:
        output = output_parallel
    return output


# 3. Without the plugin a result is a torch.Tensor instead of Any (megatron-core has no
#    py.typed): torch's stubs apply, and they do not know numpy's `axis=` spelling that torch
#    accepts at run time.
def tokens_per_rank(counts: torch.Tensor, tp_group: torch.distributed.ProcessGroup) -> torch.Tensor:
    gathered = gather_from_sequence_parallel_region(counts, group=tp_group)
    return gathered.sum(axis=1)  # E: [call-overload] Unexpected keyword argument "axis"
