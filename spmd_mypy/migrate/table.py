"""Megatron's tensor-parallel mapping functions and their typed equivalents, as data.

Types are the rule engine's (:class:`spmd_mypy.engine.types.LocalType`; ``S(i)`` is V with a
dim).  Each function's collective, src and dst come from the engine's table
(:mod:`spmd_mypy.engine.megatron`, which the report and the runtime's check mode read too);
this module adds what the migrate tool needs: the signatures and the texts.  The rewriter (:mod:`.rewrite`) reads the signatures to match call arguments,
the annotate pass (:mod:`.annotate`) reads the types, and ``docs/migrate.md`` embeds
:func:`markdown_table` (a test keeps the two equal).

Print the docs table with
``python -c "from spmd_mypy.migrate.table import markdown_table; print(markdown_table())"``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from spmd_mypy.engine.collectives import MEGATRON_PARALLEL_AXES
from spmd_mypy.engine.megatron import MAPPING_TYPES_BY_NAME
from spmd_mypy.engine.megatron import MEGATRON_MAPPING_MODULES as MEGATRON_MAPPING_MODULES
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, LocalType, shard


R, I, V, P = REPLICATE, INVARIANT, VARYING, PARTIAL  # noqa: E741
S = shard


def marker(local_type: LocalType) -> str:
    """The name imported from ``spmd`` to write a type: ``R``, ``I``, ``V``, ``P`` or ``S``."""
    return "S" if local_type.is_shard else local_type.kind.value


def value_code(local_type: LocalType, prefix: str = "") -> str:
    """As a ``src=``/``dst=`` value: ``I``, ``S(-1)`` (``spmd.S(-1)`` with the prefix)."""
    return f"{prefix}{local_type}"


def entry_code(local_type: LocalType, axis: str, prefix: str = "") -> str:
    """As an entry of ``Tensor[...]``: ``I["tp"]``, ``S[-1, "tp"]``."""
    if local_type.is_shard:
        return f'{prefix}S[{local_type.dim}, "{axis}"]'
    return f'{prefix}{local_type.kind.value}["{axis}"]'


class Role(enum.Enum):
    INPUT = "input"  # the tensor: becomes the typed call's first argument
    GROUP = "group"  # the process group: becomes the axis name
    DST_FLAG = "dst_flag"  # a literal bool that selects the dst type
    DEFAULT_ONLY = "default_only"  # only its default value can be migrated


@dataclass(frozen=True)
class FlagVariant:
    value: str  # source text of the literal: "True"
    dst: LocalType
    backward: str


@dataclass(frozen=True)
class Param:
    name: str
    role: Role
    # Source text of the default; None means required.
    default: str | None = None
    # DST_FLAG: the dst (and the backward it implies) for each literal value.
    variants: tuple[FlagVariant, ...] = ()
    # DEFAULT_ONLY: why another value cannot be migrated.
    reason: str = ""
    # DEFAULT_ONLY split sizes: the typed call's keyword taking them (sizes=, out_sizes=);
    # another value is reported with the typed call to write by hand.
    sizes_keyword: str = ""


@dataclass(frozen=True)
class Mapping:
    megatron_name: str
    collective: str  # the spmd function: spmd.<collective>(x, axis, src=..., dst=...)
    src: LocalType
    dst: LocalType  # with a DST_FLAG param, the dst for the flag's default
    forward: str
    backward: str
    params: tuple[Param, ...]  # Megatron's signature, in order
    note: str = ""

    def param(self, role: Role) -> Param | None:
        return next((p for p in self.params if p.role is role), None)

    @property
    def group_required(self) -> bool:
        group = self.param(Role.GROUP)
        return group is not None and group.default is None


INPUT = Param("input_", Role.INPUT)
OPTIONAL_GROUP = Param("group", Role.GROUP, default="None")

_GLOBAL_BUFFER_REASON = (
    "use_global_buffer=... writes the result into Megatron's global memory buffer; "
    "the typed call allocates its own output"
)


def _split_sizes(name: str, keyword: str = "sizes") -> Param:
    """Megatron's uneven split sizes: the typed call takes them as ``keyword`` (the tool
    reports the call to write rather than migrating it)."""
    return Param(name, Role.DEFAULT_ONLY, default="None", sizes_keyword=keyword)


USE_GLOBAL_BUFFER = Param(
    "use_global_buffer", Role.DEFAULT_ONLY, default="False", reason=_GLOBAL_BUFFER_REASON
)


def _types(name: str) -> tuple[str, LocalType, LocalType]:
    """The engine's collective, src and dst of ``name``."""
    t = MAPPING_TYPES_BY_NAME[name]
    return t.collective, t.src, t.dst


def _flag_dst(name: str, value: bool) -> LocalType:
    dst = MAPPING_TYPES_BY_NAME[name].dst_for(value)
    assert dst is not None
    return dst


MAPPINGS: tuple[Mapping, ...] = (
    Mapping(
        "copy_to_tensor_model_parallel_region",
        *_types("copy_to_tensor_model_parallel_region"),
        forward="identity", backward="all-reduce",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "reduce_from_tensor_model_parallel_region",
        *_types("reduce_from_tensor_model_parallel_region"),
        forward="all-reduce", backward="identity",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "scatter_to_tensor_model_parallel_region",
        *_types("scatter_to_tensor_model_parallel_region"),
        forward="split last dim", backward="all-gather last dim",
        params=(INPUT, OPTIONAL_GROUP),
        note="Megatron's docstring says reduce-scatter; the code splits without communication.",
    ),
    Mapping(
        "gather_from_tensor_model_parallel_region",
        *_types("gather_from_tensor_model_parallel_region"),
        forward="all-gather last dim", backward="split last dim",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "scatter_to_sequence_parallel_region",
        *_types("scatter_to_sequence_parallel_region"),
        forward="split dim 0", backward="all-gather dim 0",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "gather_from_sequence_parallel_region",
        *_types("gather_from_sequence_parallel_region"),
        forward="all-gather dim 0", backward="reduce-scatter dim 0",
        params=(
            INPUT,
            Param(
                "tensor_parallel_output_grad", Role.DST_FLAG, default="True",
                variants=(
                    FlagVariant("True", _flag_dst("gather_from_sequence_parallel_region", True),
                                backward="reduce-scatter dim 0"),
                    FlagVariant("False", _flag_dst("gather_from_sequence_parallel_region", False),
                                backward="split dim 0"),
                ),
            ),
            OPTIONAL_GROUP,
            _split_sizes("output_split_sizes"),
            USE_GLOBAL_BUFFER,
        ),
        note="tensor_parallel_output_grad=True (the default) gives dst=R, False gives dst=I; "
        "any other value is not migrated.",
    ),
    Mapping(
        "reduce_scatter_to_sequence_parallel_region",
        *_types("reduce_scatter_to_sequence_parallel_region"),
        forward="reduce-scatter dim 0", backward="all-gather dim 0",
        params=(INPUT, OPTIONAL_GROUP, _split_sizes("input_split_sizes"), USE_GLOBAL_BUFFER),
    ),
    Mapping(
        "all_gather_last_dim_from_tensor_parallel_region",
        *_types("all_gather_last_dim_from_tensor_parallel_region"),
        forward="all-gather last dim", backward="reduce-scatter last dim",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "reduce_scatter_last_dim_to_tensor_parallel_region",
        *_types("reduce_scatter_last_dim_to_tensor_parallel_region"),
        forward="reduce-scatter last dim", backward="all-gather last dim",
        params=(INPUT, OPTIONAL_GROUP),
    ),
    Mapping(
        "all_to_all",
        *_types("all_to_all"),
        forward="all-to-all dim 0", backward="all-to-all, splits swapped",
        params=(
            Param("group", Role.GROUP),  # required, and first
            INPUT,
            _split_sizes("output_split_sizes_", "out_sizes"),  # torch's output_split_sizes
            _split_sizes("input_split_sizes", "sizes"),
            Param(
                "use_nccl_stream", Role.DEFAULT_ONLY, default="False",
                reason="use_nccl_stream=... picks Megatron's NCCL stream handling; "
                "the typed call has no such option",
            ),
        ),
        note="The group is required; its axis comes from --group-getter / --group-expr.",
    ),
)

MAPPINGS_BY_NAME: dict[str, Mapping] = {m.megatron_name: m for m in MAPPINGS}

# (MEGATRON_MAPPING_MODULES, imported above: the modules whose attributes of these names are
# Megatron's mapping functions.  A relative import is resolved against the directory names of
# the file it is in, and matches by suffix.)

# Names so specific that a call of one not traced to a Megatron module is still reported.
# ``all_to_all`` is too common (torch.distributed has one) and is migrated only when traced.
DISTINCTIVE_NAMES: frozenset[str] = frozenset(m.megatron_name for m in MAPPINGS) - {"all_to_all"}

DEFAULT_TP_AXIS = MEGATRON_PARALLEL_AXES["tensor_model_parallel"]  # one table with the plugin's
DEFAULT_GROUP_GETTERS: tuple[str, ...] = ("get_tensor_model_parallel_group",)

# The typed collectives and their ``src`` default (used when reading typed calls back).
TYPED_COLLECTIVE_SRC_DEFAULTS: dict[str, LocalType | None] = {
    "all_reduce": P,
    "all_gather": None,
    "reduce_scatter": P,
    "all_to_all": None,
    "reinterpret": None,
    "convert": None,
}


def typed_call_code(mapping: Mapping, axis_code: str, dst: LocalType | None = None) -> str:
    """``spmd.all_reduce(x, "tp", src=P, dst=I)``: how a call reads after migration."""
    dst = dst or mapping.dst
    return f"spmd.{mapping.collective}(x, {axis_code}, src={mapping.src}, dst={dst})"


def markdown_table(axis: str = DEFAULT_TP_AXIS) -> str:
    """The table of ``docs/migrate.md``, generated from :data:`MAPPINGS`."""
    rows = [
        "| Megatron function | forward | backward | type | typed call |",
        "|---|---|---|---|---|",
    ]
    for m in MAPPINGS:
        # A required group names its own axis (an all_to_all is usually over "ep").
        axis_code = "axis" if m.group_required else f'"{axis}"'
        flag = m.param(Role.DST_FLAG)
        variants = flag.variants if flag else (FlagVariant("", m.dst, m.backward),)
        for variant in variants:
            name = f"`{m.megatron_name}`"
            if flag is not None:
                default = ", the default" if variant.value == flag.default else ""
                name += f" (`{flag.name}={variant.value}`{default})"
            call = typed_call_code(m, axis_code, variant.dst)
            rows.append(
                f"| {name} | {m.forward} | {variant.backward} | {m.src} -> {variant.dst} | `{call}` |"
            )
    return "\n".join(rows)

