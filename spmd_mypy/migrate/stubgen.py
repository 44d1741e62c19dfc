"""Generate the typed stub of Megatron's ``tensor_parallel/mappings.py`` from the mapping table.

``stubs/megatron-stubs`` is a *partial* PEP 561 stub package shipped with spmd-mypy (its
``py.typed`` says ``partial``): with megatron-core installed in the same environment, mypy reads
``megatron.core.tensor_parallel.mappings`` from this stub, and every other megatron module
(``megatron.core.tensor_parallel``'s ``__init__`` that re-exports the mapping functions
included) from the installed package.  Unchanged calls such as
``copy_to_tensor_model_parallel_region(x)`` are then typed by :data:`.table.MAPPINGS` on the
``tp`` axis, before any migration (``docs/megatron.md``).

The stub mirrors the real module of megatron-core 0.19.2: every top-level name it defines; the
mapping functions with their real parameter names, kinds and defaults (the table records them);
the other names as the source declares them (unannotated).  A test compares it with the wheel.

Regenerate after editing the table (a test keeps the committed file equal to this output)::

    python -m spmd_mypy.migrate.stubgen            # rewrites stubs/megatron-stubs/.../mappings.pyi
    python -m spmd_mypy.migrate.stubgen --check    # exit 1 if the committed file is stale
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
# symbolic (None: no symbolic), as the source declares them (unannotated).
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


def stub_path(root: Path | None = None) -> Path:
    """The stub in a source checkout (``stubs/`` next to ``spmd_mypy/``)."""
    root = root or Path(__file__).resolve().parents[2]
    return root / "stubs" / STUB_RELATIVE_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spmd_mypy.migrate.stubgen",
        description="Write the typed stub of megatron.core.tensor_parallel.mappings from the table.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the output")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"the file (default: stubs/{STUB_RELATIVE_PATH} of this checkout)")
    args = parser.parse_args(argv)
    path = args.output or stub_path()
    text = generate()
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is stale: run python -m spmd_mypy.migrate.stubgen", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
