"""Megatron's tensor-parallel mapping functions as the typed collectives they stand for.

The one table of their types, read by every side: ``spmd_mypy.migrate.table`` (the migrate
tool, the generated stub ``stubs/megatron-stubs``, hence the static checker), the report
(``spmd-mypy report`` lists a mapping call as its collective) and the runtime's check mode
(``spmd.typecheck()`` checks a mapping call at its ``Function.apply``: docs/megatron.md).
Pure data: no mypy, no torch.

The types were measured by running Megatron's own ``mappings.py`` (megatron-core 0.19.2) on
two ranks with rank-dependent inputs and gradients; where Megatron's docstrings disagree with
its code, the table follows the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collectives import MEGATRON_PARALLEL_AXES
from .types import INVARIANT, PARTIAL, REPLICATE, VARYING, LocalType, shard

R, I, V, P = REPLICATE, INVARIANT, VARYING, PARTIAL  # noqa: E741
S = shard

# The axis a mapping call runs on: the tensor-model-parallel group's ("tp").  The static side
# assumes it for every call (a stub cannot read a group); the check mode reads the group.
TP_AXIS = MEGATRON_PARALLEL_AXES["tensor_model_parallel"]


@dataclass(frozen=True)
class MappingTypes:
    """``name(input_, ...)`` is ``spmd.<collective>(input_, "tp", src=src, dst=dst)``."""

    name: str  # the module-level function of megatron.core.tensor_parallel.mappings
    collective: str
    src: LocalType
    dst: LocalType  # with a flag, the dst for the flag's default
    # the autograd Function the function applies (the check mode hooks its .apply):
    # its forward takes (input_, group, *flags) in that order, in every megatron-core release
    function_class: str
    # a bool parameter selecting the dst: (its name, {value: dst}); its default is True
    flag: tuple[str, tuple[tuple[bool, LocalType], ...]] | None = None

    def dst_for(self, flag_value: object) -> LocalType | None:
        """The dst for the flag's value (None: not a bool, so the type is unknown)."""
        if self.flag is None:
            return self.dst
        if not isinstance(flag_value, bool):
            return None
        return dict(self.flag[1])[flag_value]


MAPPING_TYPES: tuple[MappingTypes, ...] = (
    MappingTypes("copy_to_tensor_model_parallel_region", "reinterpret", I, R,
                 "_CopyToModelParallelRegion"),
    MappingTypes("reduce_from_tensor_model_parallel_region", "all_reduce", P, I,
                 "_ReduceFromModelParallelRegion"),
    MappingTypes("scatter_to_tensor_model_parallel_region", "convert", I, S(-1),
                 "_ScatterToModelParallelRegion"),
    MappingTypes("gather_from_tensor_model_parallel_region", "all_gather", S(-1), I,
                 "_GatherFromModelParallelRegion"),
    MappingTypes("scatter_to_sequence_parallel_region", "convert", I, S(0),
                 "_ScatterToSequenceParallelRegion"),
    MappingTypes("gather_from_sequence_parallel_region", "all_gather", S(0), R,
                 "_GatherFromSequenceParallelRegion",
                 flag=("tensor_parallel_output_grad", ((True, R), (False, I)))),
    MappingTypes("reduce_scatter_to_sequence_parallel_region", "reduce_scatter", P, S(0),
                 "_ReduceScatterToSequenceParallelRegion"),
    MappingTypes("all_gather_last_dim_from_tensor_parallel_region", "all_gather", S(-1), R,
                 "_AllGatherFromTensorParallelRegion"),
    MappingTypes("reduce_scatter_last_dim_to_tensor_parallel_region", "reduce_scatter", P, S(-1),
                 "_ReduceScatterToTensorParallelRegion"),
    # untyped by the stub and the check mode (its group is required and usually
    # expert-parallel); the migrate tool rewrites it with the axis the user names
    MappingTypes("all_to_all", "all_to_all", V, V, "_AllToAll"),
)
MAPPING_TYPES_BY_NAME: dict[str, MappingTypes] = {m.name: m for m in MAPPING_TYPES}
# the mappings typed without an axis given by the user (all but all_to_all)
TYPED_MAPPINGS: dict[str, MappingTypes] = {
    m.name: m for m in MAPPING_TYPES if m.name != "all_to_all"}
BY_FUNCTION_CLASS: dict[str, MappingTypes] = {m.function_class: m for m in TYPED_MAPPINGS.values()}

# Modules whose attributes of these names are Megatron's mapping functions.
MEGATRON_MAPPING_MODULES: tuple[str, ...] = (
    "megatron.core.tensor_parallel",
    "megatron.core.tensor_parallel.mappings",
    "megatron.mpu",  # Megatron-LM before megatron.core
    "megatron.mpu.mappings",
)
# The modules defining the functions (and their autograd Function classes).
MEGATRON_DEFINING_MODULES: tuple[str, ...] = (
    "megatron.core.tensor_parallel.mappings",
    "megatron.mpu.mappings",
)
