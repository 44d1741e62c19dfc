"""Megatron-core style code: annotated with torch.Tensor, no SPMD types, mapping calls unchanged.

Layers are torch.nn modules (their calls return untyped tensors), groups are Optional
attributes or parallel_state getters, split sizes are lists or numpy arrays, flags are
attributes.  Expected: no error at all.
"""
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.tensor_parallel import (
    all_gather_last_dim_from_tensor_parallel_region,
    all_to_all,
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_last_dim_to_tensor_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_sequence_parallel_region,
    scatter_to_tensor_model_parallel_region,
)
from megatron.core.tensor_parallel import mappings
from megatron.core.tensor_parallel.mappings import (
    _gather_along_first_dim,
    _reduce_scatter_along_first_dim,
    all_to_all_hp2sp,
    all_to_all_sp2hp,
    gather_from_sequence_parallel_region_to_moe,  # of megatron-core 0.7-0.9, not 0.19.2: Any
    split_tensor_along_last_dim,
)


class ParallelMLP(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, tp_group: Optional[torch.distributed.ProcessGroup],
                 sequence_parallel: bool) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(hidden, ffn)
        self.fc2 = torch.nn.Linear(ffn, hidden)
        self.tp_group = tp_group
        self.sequence_parallel = sequence_parallel

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.sequence_parallel:
            total_input = gather_from_sequence_parallel_region(hidden_states, group=self.tp_group)
        else:
            total_input = copy_to_tensor_model_parallel_region(hidden_states, group=self.tp_group)
        intermediate = F.gelu(self.fc1(total_input))
        output = self.fc2(intermediate)
        if self.sequence_parallel:
            return reduce_scatter_to_sequence_parallel_region(output, group=self.tp_group)
        return reduce_from_tensor_model_parallel_region(output, group=self.tp_group)


class Embedding(torch.nn.Module):
    def __init__(self, vocab: int, hidden: int, reduce_scatter_embeddings: bool) -> None:
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab, hidden)
        self.reduce_scatter_embeddings = reduce_scatter_embeddings

    def forward(self, input_ids: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)
        if self.reduce_scatter_embeddings:
            embeddings = embeddings.transpose(0, 1).contiguous()
            return reduce_scatter_to_sequence_parallel_region(embeddings) + residual
        return reduce_from_tensor_model_parallel_region(embeddings) + residual


class Head(torch.nn.Module):
    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden, vocab)
        self.tp_output_grad = True

    def forward(self, hidden: torch.Tensor, parallel_output: bool) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.proj(copy_to_tensor_model_parallel_region(hidden))
        if not parallel_output:
            logits = gather_from_tensor_model_parallel_region(logits)
        full = gather_from_sequence_parallel_region(
            hidden, tensor_parallel_output_grad=self.tp_output_grad,
            group=parallel_state.get_tensor_model_parallel_group())
        return logits, full


def token_dispatch(tokens: torch.Tensor, probs: torch.Tensor, expert_output: torch.Tensor,
                   ep_group: Optional[torch.distributed.ProcessGroup],
                   tp_group: torch.distributed.ProcessGroup, output_splits: np.ndarray,
                   input_splits: np.ndarray, output_splits_tp: np.ndarray) -> torch.Tensor:
    global_tokens = all_to_all(ep_group, tokens, output_splits, input_splits)
    global_probs = gather_from_sequence_parallel_region(
        probs, group=tp_group, output_split_sizes=output_splits_tp.tolist())
    gathered = _gather_along_first_dim(global_tokens, tp_group)
    scattered = _reduce_scatter_along_first_dim(gathered, tp_group, input_split_sizes=[1, 2])
    reduced = reduce_scatter_to_sequence_parallel_region(
        expert_output, group=tp_group, input_split_sizes=[1, 2], use_global_buffer=True)
    return scattered * reduced.sum() * global_probs


def layouts(x: torch.Tensor) -> list[torch.Tensor]:
    hp = all_to_all_sp2hp(x)
    sp = all_to_all_hp2sp(hp)
    chunks = split_tensor_along_last_dim(sp, 2)
    last = all_gather_last_dim_from_tensor_parallel_region(scatter_to_tensor_model_parallel_region(x))
    pieces = reduce_scatter_last_dim_to_tensor_parallel_region(x)
    seq = scatter_to_sequence_parallel_region(x)
    buffer_fn = mappings.dist_all_gather_func
    return [*chunks, last, pieces, seq, mappings.copy_to_tensor_model_parallel_region(x)]
