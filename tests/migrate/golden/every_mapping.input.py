"""One call of every mapping function, imported by name (the common Megatron style)."""

import torch

# The mapping functions, one import per line.
from megatron.core.parallel_state import get_tensor_model_parallel_group
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


def column_parallel(x, weight):
    x = copy_to_tensor_model_parallel_region(x)  # I -> R
    return x @ weight


def row_parallel(x, weight):
    partial = x @ weight
    return reduce_from_tensor_model_parallel_region(partial)  # P -> I


def every_other_mapping(x):
    a = scatter_to_tensor_model_parallel_region(x)
    b = gather_from_tensor_model_parallel_region(a)
    c = scatter_to_sequence_parallel_region(x)
    d = gather_from_sequence_parallel_region(c)
    e = gather_from_sequence_parallel_region(c, True)
    f = gather_from_sequence_parallel_region(c, tensor_parallel_output_grad=False)
    g = reduce_scatter_to_sequence_parallel_region(x)
    h = all_gather_last_dim_from_tensor_parallel_region(a)
    i = reduce_scatter_last_dim_to_tensor_parallel_region(x)
    j = all_to_all(get_tensor_model_parallel_group(), x)
    return torch.stack([b, d, e, f, g, h, i, j])


def explicit_default_groups(x):
    y = copy_to_tensor_model_parallel_region(x, group=None)
    return reduce_from_tensor_model_parallel_region(y, get_tensor_model_parallel_group())
