"""S, P and Tensor are taken in this module: the migrated code spells spmd.S, spmd.P, spmd.Tensor."""
from torch import Tensor
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
import spmd
from spmd import I, R

S = 4096  # sequence length
for P in range(2):
    pass


def reduce_scatter(x: spmd.Tensor[spmd.P["tp"]]) -> spmd.Tensor[spmd.S[0, "tp"]]:
    return spmd.reduce_scatter(x, "tp", src=spmd.P, dst=spmd.S(0))


def copy(x: spmd.Tensor[I["tp"]]) -> spmd.Tensor[R["tp"]]:
    return spmd.reinterpret(x, "tp", src=I, dst=R)
