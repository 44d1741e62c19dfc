"""A configuration without a "tp" mesh axis (mesh_axes = dp, cp): the stub's tp types are
unknown there, so the mapping functions are untyped and nothing is reported (the last call's
result is kept: a dropped one is spmd-discarded-result, session 40)."""
import torch
import spmd
from spmd import Tensor, I, P
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
)


def f(x: Tensor[I["dp"]], p: Tensor[P["dp"]], t: torch.Tensor) -> None:
    spmd.reveal(copy_to_tensor_model_parallel_region(x))  # N: Revealed type is Tensor
    spmd.reveal(reduce_from_tensor_model_parallel_region(t))  # N: Revealed type is Tensor
    q = copy_to_tensor_model_parallel_region(p)
