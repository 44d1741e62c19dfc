"""spmd-mypy installed, megatron-core not ([mypy-megatron.*] ignore_missing_imports = True).
Without the stub package mypy reports no error here; with it, none either: no blocking error
(mypy 2.4 stopped with "megatron: error: Cannot read file" before the package stubbed the
top-level __init__), and the names that megatron.core and megatron.core.tensor_parallel
re-export exist (the stub's mirrors of their __init__ files), Any where their source is missing;
the mapping functions are typed.
"""
import torch
import spmd
import megatron
import megatron.core.tensor_parallel
from megatron.core import parallel_state
from megatron.core.tensor_parallel import ColumnParallelLinear, copy_to_tensor_model_parallel_region
from megatron.core.tensor_parallel.layers import RowParallelLinear
from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region
from megatron.training import get_args


def f(x: torch.Tensor) -> None:
    spmd.reveal(copy_to_tensor_model_parallel_region(x))  # N: Revealed type is Tensor[R["tp"]]
    spmd.reveal(gather_from_sequence_parallel_region(x, False))  # N: Revealed type is Tensor[I["tp"]]
