"""Generate the typed stub of Megatron's ``tensor_parallel/mappings.py`` from the mapping table.

``stubs/megatron-stubs`` is a *partial* PEP 561 stub package shipped with spmd-mypy (its
``py.typed`` says ``partial``): with megatron-core installed in the same environment, mypy reads
``megatron.core.tensor_parallel.mappings`` from this stub, and the other megatron modules from
the installed package (where mypy falls back to it: see docs/megatron.md).  Unchanged calls such as
``copy_to_tensor_model_parallel_region(x)`` are then typed by :data:`.table.MAPPINGS` on the
``tp`` axis, before any migration (``docs/megatron.md``).

The stub mirrors the real module of megatron-core 0.19.2: every top-level name it defines; the
mapping functions with their real parameter names, kinds and defaults (the table records them);
the other names as the source declares them (unannotated).  A test compares it with the wheel.

The package also stubs the ``__init__`` of ``megatron``, ``megatron.core`` and
``megatron.core.tensor_parallel``: empty for the first (a namespace package), and for the other
two a mirror of megatron-core 0.19.2's, which only re-export names.  Without them mypy 2.4 stops
with ``megatron: error: Cannot read file`` when megatron-core is not installed (its partial-stub
lookup takes a directory that does not exist for the top-level package); an empty top-level stub
alone would make the stub's directories win over megatron-core's real ``__init__.py`` files.

Regenerate after editing the table (a test keeps the committed files equal to this output)::

    python -m spmd_mypy.migrate.stubgen            # rewrites the .pyi files of stubs/megatron-stubs
    python -m spmd_mypy.migrate.stubgen --check    # exit 1 if a committed file is stale
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from spmd_mypy.engine.types import LocalType

from .table import DEFAULT_TP_AXIS, MAPPINGS, Mapping, Param, Role, entry_code, marker

MEGATRON_CORE_VERSION = "0.19.2"
STUB_RELATIVE_PATH = Path("megatron-stubs/core/tensor_parallel/mappings.pyi")

# megatron-core 0.19.2's package __init__ files, which only import and re-export: per package,
# its submodules imported as `import megatron.core.X`, its `from M import names`, its aliases,
# and its __all__.  A test compares them with the wheel.
PACKAGE_INITS: dict[str, dict[str, tuple]] = {
    "megatron.core": {
        "submodules": ("tensor_parallel", "utils"),
        "imports": (
            ("megatron.core", ("parallel_state",)),
            ("megatron.core.distributed", ("DistributedDataParallel",)),
            ("megatron.core.inference_params", ("InferenceParams",)),
            ("megatron.core.model_parallel_config", ("ModelParallelConfig",)),
            ("megatron.core.package_info", (
                "__contact_emails__", "__contact_names__", "__description__", "__download_url__",
                "__homepage__", "__keywords__", "__license__", "__package_name__",
                "__repository_url__", "__shortversion__", "__version__")),
            ("megatron.core.timers", ("Timers",)),
            ("megatron.core.utils", ("is_torch_min_version",)),
            (".safe_globals", ("register_safe_globals", "safe_load_from_bytes")),
        ),
        "aliases": (("mpu", "parallel_state"),),
        "all": (
            "parallel_state", "tensor_parallel", "utils", "DistributedDataParallel", "InferenceParams",
            "ModelParallelConfig", "Timers", "__contact_emails__", "__contact_names__",
            "__description__", "__download_url__", "__homepage__", "__keywords__", "__license__",
            "__package_name__", "__repository_url__", "__shortversion__", "__version__"),
    },
    "megatron.core.tensor_parallel": {
        "submodules": (),
        "imports": (
            (".cross_entropy", ("vocab_parallel_cross_entropy",)),
            (".data", ("broadcast_data",)),
            (".inference_layers", (
                "InferenceColumnParallelLinear", "InferenceLayerNormColumnParallelLinear",
                "InferenceRowParallelLinear")),
            (".layers", (
                "ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "copy_gtp_attributes",
                "copy_tensor_model_parallel_attributes", "linear_with_grad_accumulation_and_async_allreduce",
                "param_is_not_gtp_duplicate", "param_is_not_tensor_parallel_duplicate",
                "set_defaults_if_not_set_tensor_model_parallel_attributes",
                "set_tensor_model_parallel_attributes")),
            (".mappings", (
                "all_gather_last_dim_from_tensor_parallel_region", "all_to_all", "all_to_all_hp2sp",
                "all_to_all_sp2hp", "copy_to_tensor_model_parallel_region",
                "gather_from_sequence_parallel_region", "gather_from_tensor_model_parallel_region",
                "reduce_from_tensor_model_parallel_region", "reduce_scatter_last_dim_to_tensor_parallel_region",
                "reduce_scatter_to_sequence_parallel_region", "scatter_to_sequence_parallel_region",
                "scatter_to_tensor_model_parallel_region")),
            (".random", (
                "CheckpointWithoutOutput", "checkpoint", "convert_cuda_rng_state", "get_cuda_rng_tracker",
                "get_data_parallel_rng_tracker_name", "get_expert_parallel_rng_tracker_name",
                "is_graph_safe_cuda_rng_tracker", "model_parallel_cuda_manual_seed")),
            (".utils", ("gather_split_1d_tensor", "split_tensor_along_last_dim", "split_tensor_into_1d_equal_chunks")),
        ),
        "aliases": (),
        "all": (
            "vocab_parallel_cross_entropy", "broadcast_data", "ColumnParallelLinear", "RowParallelLinear",
            "VocabParallelEmbedding", "set_tensor_model_parallel_attributes",
            "set_defaults_if_not_set_tensor_model_parallel_attributes", "copy_tensor_model_parallel_attributes",
            "copy_gtp_attributes", "param_is_not_tensor_parallel_duplicate", "param_is_not_gtp_duplicate",
            "linear_with_grad_accumulation_and_async_allreduce", "copy_to_tensor_model_parallel_region",
            "gather_from_tensor_model_parallel_region", "gather_from_sequence_parallel_region",
            "reduce_from_tensor_model_parallel_region", "reduce_scatter_to_sequence_parallel_region",
            "scatter_to_tensor_model_parallel_region", "scatter_to_sequence_parallel_region", "checkpoint",
            "convert_cuda_rng_state", "get_cuda_rng_tracker", "model_parallel_cuda_manual_seed",
            "get_expert_parallel_rng_tracker_name", "is_graph_safe_cuda_rng_tracker",
            "CheckpointWithoutOutput", "split_tensor_along_last_dim", "split_tensor_into_1d_equal_chunks",
            "gather_split_1d_tensor"),
    },
}
TOP_INIT = """\
# Part of spmd-mypy's partial stub package for megatron-core (docs/megatron.md).  `megatron` is a
# namespace package in megatron-core (no __init__.py): this empty stub stands for it, so that
# mypy does not stop with "megatron: error: Cannot read file" when megatron-core is not installed.
"""

# Functions of the table declared untyped, and why.
UNTYPED_MAPPINGS: dict[str, str] = {
    "all_to_all": "its group is required and names the axis (usually expert-parallel, not tp), "
    "and a stub cannot tell which mesh axis a ProcessGroup value is",
}

# Functions of the real module outside the table: all-to-alls on the tp group that also
# reshape; the table gives no type for them.
UNTYPED_FUNCTIONS: dict[str, str] = {
    "all_to_all_sp2hp": "def all_to_all_sp2hp(input_: torch.Tensor, group: ProcessGroup | None = None) -> torch.Tensor: ...",
    "all_to_all_hp2sp": "def all_to_all_hp2sp(input_: torch.Tensor, group: ProcessGroup | None = None) -> torch.Tensor: ...",
}

# The module's private helpers, as the source declares them (unannotated).
PRIVATE_FUNCTIONS: dict[str, str] = {
    "_reduce": "input_, group",
    "_split_along_last_dim": "input_, group",
    "_split_along_first_dim": "input_, group",
    "_gather_along_last_dim": "input_, group",
    "_reduce_scatter_along_last_dim": "input_, group",
    "_gather_along_first_dim": "input_, group, output_split_sizes=None, use_global_buffer=False",
    "_reduce_scatter_along_first_dim": "input_, group, input_split_sizes=None, use_global_buffer=False",
}

# The module's autograd Functions: the parameters after ``ctx``/``graph`` of forward and
# symbolic, and whether it has a symbolic, as the source declares them (unannotated).
_GROUP_ONLY = "input_, group"
AUTOGRAD_FUNCTIONS: dict[str, tuple[str, bool]] = {
    "_CopyToModelParallelRegion": (_GROUP_ONLY, True),
    "_ReduceFromModelParallelRegion": (_GROUP_ONLY, True),
    "_ScatterToModelParallelRegion": (_GROUP_ONLY, True),
    "_GatherFromModelParallelRegion": (_GROUP_ONLY, True),
    "_ScatterToSequenceParallelRegion": (_GROUP_ONLY, True),
    "_GatherFromSequenceParallelRegion": (
        "input_, group, tensor_parallel_output_grad=True, output_split_sizes=None, use_global_buffer=False", True),
    "_ReduceScatterToSequenceParallelRegion": (
        "input_, group, input_split_sizes=None, use_global_buffer=False", True),
    "_AllGatherFromTensorParallelRegion": (_GROUP_ONLY, True),
    "_ReduceScatterToTensorParallelRegion": (_GROUP_ONLY, True),
    "_AllToAll": ("group, input, output_split_sizes, input_split_sizes, use_nccl_stream=False", False),
}
_BACKWARD_PARAMS = {"_AllToAll": "ctx, *grad_output"}

# Names the real module imports (importable from it: mypy re-exports a .py module's imports).
REEXPORTS = (
    ("megatron.core.parallel_state", "get_global_memory_buffer"),
    ("megatron.core.utils", "get_tensor_model_parallel_group_if_none"),
    ("megatron.core.utils", "is_torch_min_version"),
    (".utils", "split_tensor_along_last_dim"),
)
MODULE_VARIABLES = ("dist_all_gather_func", "dist_reduce_scatter_func")


def _tensor(local_type: LocalType, axis: str) -> str:
    return f"Tensor[{entry_code(local_type, axis)}]"


def _annotation(param: Param, mapping: Mapping, axis: str, flag_type: str | None) -> str:
    if param.role is Role.INPUT:
        if mapping.megatron_name in UNTYPED_MAPPINGS:
            return "torch.Tensor"
        # `| torch.Tensor`: an untyped tensor is accepted, also by mypy without the plugin (the
        # stub is installed for every mypy run in the environment); with the plugin a typed
        # argument is still checked against the table's type.
        return f"{_tensor(mapping.src, axis)} | torch.Tensor"
    if param.role is Role.GROUP:
        # Megatron asserts at run time that a required group is not None; an Optional group
        # attribute passed unchanged must still type-check.
        return "ProcessGroup | None"
    if param.role is Role.DST_FLAG:
        return flag_type or "bool"
    if param.default in ("True", "False"):
        return "bool"
    # Split sizes: megatron-core itself passes lists and numpy arrays.  As loose as the
    # unannotated source, so that no call accepted before is rejected.
    return "Any"


def _signature(mapping: Mapping, axis: str, ret: str, flag_type: str | None = None,
               keep_flag_default: bool = True) -> str:
    params = []
    for p in mapping.params:
        default = p.default
        if p.role is Role.DST_FLAG and not keep_flag_default:
            default = None
        text = f"{p.name}: {_annotation(p, mapping, axis, flag_type)}"
        params.append(text if default is None else f"{text} = {default}")
    return f"def {mapping.megatron_name}({', '.join(params)}) -> {ret}: ..."


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, 96, initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False)


def _function(mapping: Mapping, axis: str) -> list[str]:
    head = f"{mapping.megatron_name}: forward {mapping.forward}, backward {mapping.backward}"
    untyped = UNTYPED_MAPPINGS.get(mapping.megatron_name)
    if untyped is not None:
        return [*_comment(f"{head}. Untyped here: {untyped}."),
                _signature(mapping, axis, "torch.Tensor")]
    flag = mapping.param(Role.DST_FLAG)
    if flag is None:
        return [*_comment(f"{head}: {mapping.src} -> {mapping.dst} on {axis}."),
                _signature(mapping, axis, _tensor(mapping.dst, axis))]
    # One overload per literal value of the flag, then any bool: the result type is known only
    # for a literal flag, so a flag known only at run time gives an untyped tensor.
    index = mapping.params.index(flag)
    if any(p.default is None for p in mapping.params[index + 1:]):
        raise ValueError(f"{mapping.megatron_name}: a required parameter follows {flag.name}")
    lines = _comment(f"{head} (with the default flag).")
    for variant in flag.variants:
        lines += _comment(f"{flag.name}={variant.value}: {mapping.src} -> {variant.dst} on {axis}, "
                          f"backward {variant.backward}.")
    lines += _comment(f"{flag.name} not a literal: the result is untyped (R or I is only known at run time).")
    for variant in flag.variants:
        lines += ["@overload", _signature(mapping, axis, _tensor(variant.dst, axis),
                                          flag_type=f"Literal[{variant.value}]",
                                          keep_flag_default=variant.value == flag.default)]
    lines += ["@overload", _signature(mapping, axis, "torch.Tensor", flag_type="bool",
                                      keep_flag_default=False)]
    return lines


def _used_markers() -> list[str]:
    used = set()
    for m in MAPPINGS:
        if m.megatron_name in UNTYPED_MAPPINGS:
            continue
        flag = m.param(Role.DST_FLAG)
        dsts = [v.dst for v in flag.variants] if flag else [m.dst]
        used.update(marker(t) for t in (m.src, *dsts))
    return sorted(used)


def generate(axis: str = DEFAULT_TP_AXIS) -> str:
    """The text of ``megatron-stubs/core/tensor_parallel/mappings.pyi``."""
    out = [
        f"# The typed stub of megatron.core.tensor_parallel.mappings (megatron-core {MEGATRON_CORE_VERSION}),",
        "# shipped by spmd-mypy.  GENERATED by `python -m spmd_mypy.migrate.stubgen` from",
        "# spmd_mypy/migrate/table.py: do not edit (a test keeps the two equal).",
        "#",
        f'# The mapping functions take and return the table\'s types on the mesh axis "{axis}", which must',
        "# be a configured mesh axis ([tool.spmd_mypy] mesh_axes).  The group passed is assumed to be",
        "# the tensor-model-parallel group (None, the default, is).  The results are unknown",
        f'# (unchecked) on the axes other than "{axis}".  The module\'s other names are declared as its',
        "# source declares them.  See docs/megatron.md.",
        "from typing import Any, Literal, overload",
        "",
        "import torch",
        "from torch.distributed import ProcessGroup",
        "",
    ]
    for module, name in REEXPORTS:
        out.append(f"from {module} import {name} as {name}")
    out.append(f"from spmd import Tensor, {', '.join(_used_markers())}")
    out.append("")
    out += _comment("Names this stub does not declare (those of other megatron-core versions) are Any, as "
                    "every name of megatron-core is without the stub (it has no py.typed).")
    out.append("def __getattr__(name: str) -> Any: ...")
    out.append("")
    out += [f"{name}: Any" for name in MODULE_VARIABLES]
    out.append("")
    out += [f"def {name}({params}): ..." for name, params in PRIVATE_FUNCTIONS.items()]
    for name, (params, symbolic) in AUTOGRAD_FUNCTIONS.items():
        out += ["", f"class {name}(torch.autograd.Function):"]
        if symbolic:
            out += ["    @staticmethod", f"    def symbolic(graph, {params}): ..."]
        out += ["    @staticmethod", f"    def forward(ctx, {params}): ...",
                "    @staticmethod", f"    def backward({_BACKWARD_PARAMS.get(name, 'ctx, grad_output')}): ..."]
    for mapping in MAPPINGS:
        out += ["", *_function(mapping, axis)]
    out += ["", *_comment("Outside the table (all-to-alls on the tp group that also reshape): untyped.")]
    out += list(UNTYPED_FUNCTIONS.values())
    return "\n".join(out) + "\n"


def init_path(package: str) -> Path:
    """``megatron.core`` -> ``megatron-stubs/core/__init__.pyi``."""
    return Path("megatron-stubs", *package.split(".")[1:], "__init__.pyi")


def generate_init(package: str) -> str:
    """The mirror of one of megatron-core's package ``__init__`` files (names re-exported)."""
    spec = PACKAGE_INITS[package]
    out = [
        f"# The __init__ of {package} (megatron-core {MEGATRON_CORE_VERSION}), mirrored for spmd-mypy's",
        "# partial stub package: it only re-exports names, from the installed megatron-core (and the",
        "# typed mapping functions from the stub of .mappings).  GENERATED by",
        "# `python -m spmd_mypy.migrate.stubgen`: do not edit.  See docs/megatron.md.",
    ]
    out += [f"from . import {name} as {name}" for name in spec["submodules"]]
    for module, names in spec["imports"]:
        out += [f"from {module} import {name} as {name}" for name in names]
    out += [f"{alias} = {target}" for alias, target in spec["aliases"]]
    out.append("")
    out.append("__all__ = [")
    out += [f'    "{name}",' for name in spec["all"]]
    out.append("]")
    return "\n".join(out) + "\n"


def files() -> dict[Path, str]:
    """Every generated file of the stub package, by its path under ``stubs/``."""
    out = {Path("megatron-stubs/__init__.pyi"): TOP_INIT}
    out.update({init_path(package): generate_init(package) for package in PACKAGE_INITS})
    out[STUB_RELATIVE_PATH] = generate()
    return out


def signature_table(axis: str = DEFAULT_TP_AXIS) -> str:
    """The table of ``docs/megatron.md``: each function's argument and result type."""
    rows = ["| Megatron function | `input_` (typed tensors are checked) | result |", "|---|---|---|"]
    for m in MAPPINGS:
        if m.megatron_name in UNTYPED_MAPPINGS:
            rows.append(f"| `{m.megatron_name}` | any tensor | `torch.Tensor` (untyped) |")
            continue
        flag = m.param(Role.DST_FLAG)
        arg = f"`{_tensor(m.src, axis)}`"
        if flag is None:
            rows.append(f"| `{m.megatron_name}` | {arg} | `{_tensor(m.dst, axis)}` |")
            continue
        for v in flag.variants:
            default = ", the default" if v.value == flag.default else ""
            rows.append(f"| `{m.megatron_name}` (`{flag.name}={v.value}`{default}) | {arg} | "
                        f"`{_tensor(v.dst, axis)}` |")
        rows.append(f"| `{m.megatron_name}` (`{flag.name}` not a literal) | {arg} | "
                    f"`torch.Tensor` (untyped) |")
    for name in UNTYPED_FUNCTIONS:
        rows.append(f"| `{name}` | any tensor | `torch.Tensor` (untyped) |")
    return "\n".join(rows)


def stubs_root(root: Path | None = None) -> Path:
    """``stubs/`` of a source checkout (next to ``spmd_mypy/``)."""
    return (root or Path(__file__).resolve().parents[2]) / "stubs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spmd_mypy.migrate.stubgen",
        description="Write the typed stub package of megatron-core (stubs/megatron-stubs) from the table.")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from the output")
    parser.add_argument("--output", type=Path, default=None,
                        help="the directory holding megatron-stubs (default: stubs/ of this checkout)")
    args = parser.parse_args(argv)
    root = args.output or stubs_root()
    stale = []
    for relative, text in files().items():
        path = root / relative
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
    if stale:
        print(f"stale: {', '.join(stale)}: run python -m spmd_mypy.migrate.stubgen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
