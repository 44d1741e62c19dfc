"""S, P and Tensor are taken in this module: the migrated code spells spmd.S, spmd.P, spmd.Tensor."""
from torch import Tensor
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)

S = 4096  # sequence length
for P in range(2):
    pass


def reduce_scatter(x: Tensor) -> Tensor:
    return reduce_scatter_to_sequence_parallel_region(x)


def copy(x):
    return copy_to_tensor_model_parallel_region(x)
