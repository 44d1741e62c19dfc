from __future__ import annotations

import spmd
from spmd import I, R, Tensor
from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region


def already_typed(x: Tensor[I["tp"]]):
    return spmd.reinterpret(x, "tp", src=I, dst=spmd.R)


def not_yet(x):
    return spmd.reinterpret(x, "tp", src=I, dst=R)
