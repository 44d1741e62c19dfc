"""Where mypy reads each megatron module from, with the stub package installed next to
megatron-core: the stubbed modules from the stub, the modules of the stubbed packages
(megatron/, megatron/core/, megatron/core/tensor_parallel/) from the installed source, and the
modules of deeper packages not at all, as without the stub: mypy 2.4 falls back from a partial
stub package to the installed package only where the stub package has the directory."""
from megatron.core import parallel_state
from megatron.core.tensor_parallel import ColumnParallelLinear, mappings
from megatron.core.tensor_parallel.layers import RowParallelLinear
from megatron.core.transformer.mlp import MLP  # E: [import-untyped] Skipping analyzing "megatron.core.transformer.mlp": module is installed, but missing library stubs or py.typed marker # N: See https://mypy.readthedocs.io/en/stable/running_mypy.html#missing-imports

reveal_type(parallel_state.get_tensor_model_parallel_world_size)  # N: Revealed type is "def () -> Any"
reveal_type(RowParallelLinear.forward)  # N: Revealed type is "def (self: megatron.core.tensor_parallel.layers.RowParallelLinear, input_: torch._tensor.Tensor) -> tuple[torch._tensor.Tensor, torch._tensor.Tensor]"
reveal_type(MLP)  # N: Revealed type is "Any"
