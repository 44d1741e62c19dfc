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
import spmd
from spmd import I, P, R, S, V


def column_parallel(x, weight):
    x = spmd.reinterpret(x, "tp", src=I, dst=R)  # I -> R
    return x @ weight


def row_parallel(x, weight):
    partial = x @ weight
    return spmd.all_reduce(partial, "tp", src=P, dst=I)  # P -> I


def every_other_mapping(x):
    a = spmd.convert(x, "tp", src=I, dst=S(-1))
    b = spmd.all_gather(a, "tp", src=S(-1), dst=I)
    c = spmd.convert(x, "tp", src=I, dst=S(0))
    d = spmd.all_gather(c, "tp", src=S(0), dst=R)
    e = spmd.all_gather(c, "tp", src=S(0), dst=R)
    f = spmd.all_gather(c, "tp", src=S(0), dst=I)
    g = spmd.reduce_scatter(x, "tp", src=P, dst=S(0))
    h = spmd.all_gather(a, "tp", src=S(-1), dst=R)
    i = spmd.reduce_scatter(x, "tp", src=P, dst=S(-1))
    j = spmd.all_to_all(x, "tp", src=V, dst=V)
    return torch.stack([b, d, e, f, g, h, i, j])


def explicit_default_groups(x):
    y = spmd.reinterpret(x, "tp", src=I, dst=R)
    return spmd.all_reduce(y, "tp", src=P, dst=I)
