"""``spmd-mypy report PATH...``: each function's forward and backward collectives.

For every function of the given files that has typed tensors or a call site (unannotated
functions included: their bodies are checked in a second run when they call one), the
report lists each call site of a collective or conversion (``spmd.all_reduce``, ``all_gather``,
``reduce_scatter``, ``all_to_all``, ``reinterpret``, ``convert``, ``redistribute``)
and of the einsum family with ``out_partial_axes`` (``spmd.einsum/matmul/linear/sum``:
a local op, then ``reinterpret(V,P)``), with the collectives its forward issues and
the ones its backward will issue, read from the engine's table
(:data:`spmd_mypy.engine.collectives.TRANSITIONS`), and per function the totals.

How: mypy runs in-process with :class:`ReportPlugin`, a subclass of the checker's
plugin whose collective and partial-op hooks also record each call (its module,
enclosing function, line, op, axes, src, dst, reduce op).  The user's modules are
always re-checked (their cache entries are keyed on a per-run nonce), so every hook
fires; everything else (torch) comes from a cache of its own,
``<mypy cache dir>/spmd-report``, which never touches the cache ``spmd-mypy check``
uses.

Raw ``torch.distributed`` calls in those files are listed too (they communicate
forward, have no backward; their axis is read from ``group=mesh.get_group("dp")``).

A function's own call sites only: a call to a helper that issues collectives is not
expanded (the helper is listed on its own).  See ``docs/report.md`` for the output
and the JSON schema.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from mypy.nodes import (
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Decorator,
    Expression,
    FuncDef,
    FloatExpr,
    FuncItem,
    IntExpr,
    LambdaExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    OverloadedFuncDef,
    Statement,
    StrExpr,
    TypeInfo,
)
from mypy.options import Options
from mypy.plugin import FunctionContext, MethodContext, ReportConfigContext
from mypy.types import (
    CallableType,
    Instance,
    TupleType,
    Type,
    TypeType,
    UnionType,
    get_proper_type,
)

from .cli import _is_spmd_plugin
from .engine import collectives as coll
from .engine import megatron as meg
from .engine import redistribute as rd
from .engine.types import Kind, LocalType, SpmdType, format_entries
from .plugin import SpmdPlugin
from .plugin.autograd import is_autograd_function
from .plugin.calls import literal_strs, read_local_type
from .plugin.mypy_types import TENSOR
from .plugin import __version__ as _PLUGIN_VERSION

SCHEMA_VERSION = 1
COLLECTIVE_CALLS = {f"spmd.{op}": op for op in coll.OPS}
PARTIAL_CALLS = {"spmd.einsum": "einsum", "spmd.matmul": "matmul", "spmd.linear": "linear",
                 "spmd.sum": "sum"}
MODULE_SCOPE = "<module>"
# raw torch.distributed (c10d) calls: not differentiable, the group read from group=
# Megatron's mapping functions typed by the stub (megatron-stubs): each listed as the typed
# collective of the engine's table (engine.megatron), on the tensor-parallel axis as the stub
# types it
MEGATRON_CALLS = {f"{module}.{name}": m for module in meg.MEGATRON_DEFINING_MODULES
                  for name, m in meg.TYPED_MAPPINGS.items()}
RAW_CALLS = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather", "_all_gather_base": "all_gather",
    "all_gather_coalesced": "all_gather", "all_gather_object": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "broadcast_object_list": "broadcast", "reduce": "reduce",
    "gather": "gather", "scatter": "scatter", "send": "send", "recv": "recv",
    "isend": "send", "irecv": "recv", "barrier": "barrier",
    "batch_isend_irecv": "send/recv",  # the group is in each P2POp: listed on world
}
WORLD = "world"  # the default process group of a raw call without group=


def raw_call(fullname: str) -> str | None:
    """The op of a raw ``torch.distributed.<name>`` call (any submodule), else None."""
    if not fullname.startswith("torch.distributed.") or "._functional" in fullname:
        return None
    module, _, name = fullname.rpartition(".")
    if module not in ("torch.distributed", "torch.distributed.distributed_c10d"):
        return None
    return RAW_CALLS.get(name)


# ---------------------------------------------------------------------------------------
# The data: steps, call sites, functions
# ---------------------------------------------------------------------------------------

def axes_text(axes: Sequence[str]) -> str:
    """``tp``, or ``(dp, tp)`` for one collective over the flattened axes."""
    return axes[0] if len(axes) == 1 else "(" + ", ".join(axes) + ")"


@dataclass(frozen=True)
class Step:
    """One op of a forward or a backward at a call site: ``all_reduce(P,I)`` on ``tp``."""

    op: str
    src: str  # R, I, V, P or S(i)
    dst: str
    axes: tuple[str, ...]
    note: str = ""  # "avg" (scaled by 1/size), "max", "min"

    @property
    def comms(self) -> bool:
        return self.op in coll.COLLECTIVES or not self.src  # a raw call always communicates

    def text(self) -> str:
        note = f" {self.note}" if self.note else ""
        types = f"({self.src},{self.dst})" if self.src else ""
        return f"{self.op}{types}{note} on {axes_text(self.axes)}"

    def as_json(self) -> dict[str, Any]:
        return {"op": self.op, "src": self.src or None, "dst": self.dst or None,
                "axes": list(self.axes), "note": self.note or None, "comms": self.comms}


@dataclass
class Site:
    """One call of a collective, conversion or partial op in the user's code."""

    path: str
    line: int
    column: int
    module: str
    function: str  # the enclosing function's qualname, "<module>" at top level
    call: str  # "spmd.all_reduce", "spmd.linear", ...
    axes: tuple[str, ...] | None  # None: not readable statically
    src: str | None
    dst: str | None
    reduce_op: str | None  # all_reduce and reduce_scatter only
    transition: str | None  # the table row used: "reinterpret(I,R)"; None if none applies
    forward: list[Step]
    backward: list[Step]
    gradient: bool  # False when no gradient can flow back through the call
    no_gradient: str | None  # why not: "detached", "no_grad", ".grad", 'op="max"'
    in_loop: bool
    in_branch: bool
    source: str
    problem: str | None = None  # why the comms are unknown (unreadable or invalid call)
    # "<Fn>.apply" sites: the Function's qualname in this module (its forward's and backward's
    # sites fill the columns once every site is recorded)
    applies: str | None = None

    @property
    def op_text(self) -> str:
        if self.applies is not None:
            return f"{self.applies}.apply"
        op = self.call.removeprefix("spmd.")
        ax = axes_text(self.axes) if self.axes else "?"
        if self.call in MEGATRON_CALLS:
            m = MEGATRON_CALLS[self.call]
            return f"{m.collective}({self.src or '?'},{self.dst or '?'}) on {ax} (megatron)"
        if not self.call.startswith("spmd."):
            return f"{self.call.rsplit('.', 1)[-1]} (raw) on {ax}"
        if self.call in PARTIAL_CALLS:
            return f"{op} + reinterpret(V,P) on {ax}"
        if self.transition == PLAN:
            return f"{op}({self.src} -> {self.dst})"
        note = f" {self.reduce_op}" if self.reduce_op not in (None, "sum") else ""
        if self.src is None or self.dst is None:
            return f"{op}(?) on {ax}"
        return f"{op}({self.src},{self.dst}){note} on {ax}"

    def forward_comms(self) -> list[Step]:
        return [s for s in self.forward if s.comms]

    def backward_comms(self) -> list[Step]:
        return [s for s in self.backward if s.comms] if self.gradient else []

    def as_json(self) -> dict[str, Any]:
        return {
            "line": self.line, "column": self.column, "source": self.source,
            "call": self.call, "axes": list(self.axes) if self.axes is not None else None,
            "src": self.src, "dst": self.dst, "reduce_op": self.reduce_op,
            "transition": self.transition,
            "forward": [s.as_json() for s in self.forward],
            "backward": [s.as_json() for s in self.backward],
            "gradient": self.gradient, "no_gradient": self.no_gradient,
            "in_loop": self.in_loop, "in_branch": self.in_branch, "problem": self.problem,
        }


def _count(steps: Iterable[Step]) -> Counter[tuple[str, tuple[str, ...]]]:
    return Counter((s.op, s.axes) for s in steps)


def _counts_json(c: Counter[tuple[str, tuple[str, ...]]]) -> list[dict[str, Any]]:
    return [{"op": op, "axes": list(axes), "count": n} for (op, axes), n in sorted(c.items())]


def _counts_text(c: Counter[tuple[str, tuple[str, ...]]]) -> str:
    if not c:
        return "-"
    return ", ".join(f"{op} on {axes_text(axes)} x{n}" for (op, axes), n in sorted(c.items()))


@dataclass
class Function:
    module: str
    qualname: str
    path: str
    line: int
    typed: bool  # its signature or a local annotation mentions a typed tensor
    sites: list[Site] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"

    # (an ``Fn.apply`` site is not counted: its collectives are the sites of Fn.forward and
    # Fn.backward, counted there, as a helper's are)
    def forward_totals(self) -> Counter[tuple[str, tuple[str, ...]]]:
        return _count(s for site in self.sites if site.applies is None for s in site.forward_comms())

    def backward_totals(self) -> Counter[tuple[str, tuple[str, ...]]]:
        return _count(s for site in self.sites if site.applies is None for s in site.backward_comms())

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "module": self.module, "qualname": self.qualname,
            "path": self.path, "line": self.line, "typed": self.typed,
            "sites": [s.as_json() for s in self.sites],
            "totals": {"forward": _counts_json(self.forward_totals()),
                       "backward": _counts_json(self.backward_totals())},
        }


@dataclass
class Report:
    paths: list[str]
    functions: list[Function]
    errors: list[str]  # mypy's error lines (the report may be incomplete where they are)
    messages: list[str] = field(default_factory=list)  # everything mypy printed (with notes)

    def forward_totals(self) -> Counter[tuple[str, tuple[str, ...]]]:
        return sum((f.forward_totals() for f in self.functions), Counter())

    def backward_totals(self) -> Counter[tuple[str, tuple[str, ...]]]:
        return sum((f.backward_totals() for f in self.functions), Counter())

    def as_json(self) -> dict[str, Any]:
        return {
            "version": SCHEMA_VERSION,
            "paths": self.paths,
            "functions": [f.as_json() for f in self.functions],
            "totals": {"functions": len(self.functions),
                       "sites": sum(len(f.sites) for f in self.functions),
                       "forward": _counts_json(self.forward_totals()),
                       "backward": _counts_json(self.backward_totals())},
            "errors": self.errors,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_json(), indent=2) + "\n"

    def format_table(self) -> str:
        return format_table(self)


# ---------------------------------------------------------------------------------------
# The plain table
# ---------------------------------------------------------------------------------------

def _backward_cell(site: Site) -> str:
    if site.problem is not None:
        return "?"
    if not site.gradient:
        return f"- (no gradient: {site.no_gradient})"
    comms = site.backward_comms()
    if comms:
        return ", ".join(s.text() for s in comms)
    # no comms: the table's backward steps, to check by eye
    return "- (" + ", ".join(s.text().rsplit(" on ", 1)[0] for s in site.backward) + ")" \
        if site.backward else "-"


def _forward_cell(site: Site) -> str:
    if site.problem is not None:
        return "?"
    if site.transition == PLAN:
        # a partition-spec redistribute: its whole plan, the steps without comms too
        return "; ".join(s.text() for s in site.forward) if site.forward else "- (no steps)"
    comms = site.forward_comms()
    return ", ".join(s.text() for s in comms) if comms else "-"


def format_table(report: Report) -> str:
    """The report as aligned text: per function a header, one row per call site, the totals."""
    rows: list[tuple[str, str, str, str, str]] = []
    out_blocks: list[tuple[Function, list[tuple[str, str, str, str, str]]]] = []
    for f in report.functions:
        block = []
        for s in f.sites:
            mark = ("*" if s.in_loop else "") + ("?" if s.in_branch else "")
            block.append((f"{s.line}{mark}", s.op_text, _forward_cell(s), _backward_cell(s),
                          s.source if s.problem is None else f"{s.source}  [{s.problem}]"))
        out_blocks.append((f, block))
        rows.extend(block)
    head = ("line", "op", "forward", "backward", "source")
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(4)]

    def fmt(r: Sequence[str]) -> str:
        cells = [r[0].rjust(widths[0])] + [r[i].ljust(widths[i]) for i in (1, 2, 3)] + [r[4]]
        return ("  " + "  ".join(cells)).rstrip()

    lines: list[str] = []
    for f, block in out_blocks:
        if not block:
            lines.append(f"{f.name}  {f.path}:{f.line}  (no collectives)")
            continue
        if lines and lines[-1]:
            lines.append("")
        lines.append(f"{f.name}  {f.path}:{f.line}")
        lines.append(fmt(head))
        lines.extend(fmt(r) for r in block)
        lines.append(f"  total forward: {_counts_text(f.forward_totals())}; "
                     f"backward: {_counts_text(f.backward_totals())}")
        lines.append("")
    if lines and lines[-1]:
        lines.append("")
    n_sites = sum(len(f.sites) for f in report.functions)
    lines.append(f"{len(report.functions)} functions, {n_sites} call sites; "
                 f"forward: {_counts_text(report.forward_totals())}; "
                 f"backward: {_counts_text(report.backward_totals())}")
    if any(s.in_loop or s.in_branch for f in report.functions for s in f.sites):
        lines.append("line* in a loop (once per iteration); line? in a branch (when taken); "
                     "totals count each site once")
    if report.errors:
        lines.append(f"mypy reported {len(report.errors)} error(s) in these files: the report may "
                     f"be incomplete (see stderr or run spmd-mypy check)")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Reading a call (no errors reported here: the checker's own hook reports them)
# ---------------------------------------------------------------------------------------

def _arg(ctx: FunctionContext, name: str) -> tuple[Expression | None, Type | None]:
    for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
        if formal == name and exprs:
            return exprs[0], types[0]
    return None, None


def _local_type(expr: Expression | None) -> LocalType | None | bool:
    """R/I/V/P/S(i) written literally; None if absent; False if not readable."""
    if expr is None:
        return None
    lt = read_local_type(expr)
    return lt if lt is not None else False


def _form_text(form: str, dim: int | None) -> str:
    return f"S({dim})" if form == "S" and dim is not None else form


def _transition_steps(t: coll.Transition, src: LocalType, dst: LocalType, axes: tuple[str, ...],
                      note: str = "") -> tuple[list[Step], list[Step]]:
    """The forward step and the backward steps, dims carried as the runtime carries them."""
    f = t.forward
    forward = [Step(f.op, _form_text(f.src, src.dim), _form_text(f.dst, dst.dim), axes, note)]
    dim = src.dim if src.dim is not None else dst.dim
    backward = []
    for n, s in enumerate(t.backward):
        if t.swaps_dims:
            sd, dd = dst.dim, src.dim
        else:
            sd = dim if s.src == "S" else None
            dd = dim if s.dst == "S" else None
        backward.append(Step(s.op, _form_text(s.src, sd), _form_text(s.dst, dd), axes,
                             note if n == 0 else ""))
    return forward, backward


@dataclass
class _Call:
    axes: tuple[str, ...] | None
    src: LocalType | None
    dst: LocalType | None
    reduce_op: str | None
    transition: str | None
    forward: list[Step]
    backward: list[Step]
    has_gradient_op: bool  # False for all_reduce(op="max"/"min")
    problem: str | None
    src_text: str | None = None  # a partition-spec redistribute's endpoints, as written
    dst_text: str | None = None


def read_collective(op: str, axes: tuple[str, ...] | None, src: LocalType | None | bool,
                    dst: LocalType | None | bool, reduce_op: str) -> _Call:
    """What ``spmd.<op>(x, axes, src=src, dst=dst, op=reduce_op)`` runs forward and backward."""
    r_op = reduce_op if op in ("all_reduce", "reduce_scatter") else None
    if src is None and op in ("all_reduce", "reduce_scatter"):
        src = LocalType(Kind.P)
    if axes is None or src is False or dst is False or src is None or dst is None:
        what = "axis" if axes is None else "src/dst"
        return _Call(axes, src if isinstance(src, LocalType) else None,
                     dst if isinstance(dst, LocalType) else None, r_op, None, [], [], True,
                     f"{what} not readable statically")
    assert isinstance(src, LocalType) and isinstance(dst, LocalType)
    if op == "all_reduce" and reduce_op in coll.NO_GRAD_REDUCE_OPS:
        step = Step("all_reduce", str(src), str(dst), axes, reduce_op)
        return _Call(axes, src, dst, r_op, f"all_reduce({src},{dst}) {reduce_op}", [step], [],
                     False, None)
    if (op, coll.form(src), coll.form(dst)) in coll.NO_GRAD_TRANSITIONS:
        # reinterpret(P,V): the local data kept, no comms, no backward (a gradient-free value)
        return _Call(axes, src, dst, r_op, f"{op}({src},{dst})", [], [], False, None)
    if op == "redistribute":
        if src == dst:
            return _Call(axes, src, dst, r_op, None, [], [], True, None)  # the identity
        if {src.dim, dst.dim} == {None, 0} and src.kind is dst.kind is Kind.V:
            # V <-> S(0): V read as a concatenation on dim 0 is S(0); the runtime moves nothing
            return _Call(axes, src, dst, r_op, None, [], [], True, None)
    t = coll.lookup(op, src, dst)
    if t is None:
        return _Call(axes, src, dst, r_op, None, [], [], True,
                     f"{op}({src},{dst}) is not a valid transition")
    note = "avg" if op in ("all_reduce", "reduce_scatter") and reduce_op == "avg" else ""
    forward, backward = _transition_steps(t, src, dst, axes, note)
    row = f"{t.op}({_form_text(t.src, src.dim)},{_form_text(t.dst, dst.dim)})"
    return _Call(axes, src, dst, r_op, row, forward, backward, True, None)


PLAN = "plan"  # Site.transition of a partition-spec redistribute (several steps)


def read_global_redistribute(x: SpmdType | None, src: SpmdType | None, dst: SpmdType | None,
                             mesh_axes: Sequence[str] | None) -> _Call:
    """``spmd.redistribute(x, src=PS[...], dst=PS[...])``: the planner's steps forward
    (:func:`spmd_mypy.engine.redistribute.plan`), each step's table backward in reverse."""
    if src is None or dst is None or src.spec is None or dst.spec is None:
        return _Call(None, None, None, None, None, [], [], True,
                      "src/dst not readable statically as PS[...] or Tensor[PS[...], ...]")
    if x:
        src = SpmdType.of({**x.as_dict(), **src.as_dict()}, src.spec)
    p = rd.plan(src, dst, mesh_axes)
    if p.errors:
        return _Call(None, None, None, None, None, [], [], True, p.errors[0].message)
    forward: list[Step] = []
    backward: list[Step] = []
    touched: list[str] = []
    for st in p.steps:
        f, b = _transition_steps(st.transition, st.src, st.dst, st.axes)
        forward.extend(f)
        backward[:0] = b
        touched.extend(a for a in st.axes if a not in touched)
    order = {a: i for i, a in enumerate(mesh_axes or ())}
    axes = tuple(sorted(touched, key=lambda a: (order.get(a, len(order)), a)))
    return _Call(axes, None, None, None, PLAN, forward, backward, True, None,
                 src_text=format_entries_text(p.src, mesh_axes),
                 dst_text=format_entries_text(p.dst, mesh_axes))


def format_entries_text(t: SpmdType, mesh_axes: Sequence[str] | None) -> str:
    return ", ".join(format_entries(t, mesh_axes))


def read_raw(op: str, group: Expression | None, group_type: Type | None) -> _Call:
    """A raw ``torch.distributed`` call: it communicates forward, has no backward; its
    axis is read from ``group=mesh.get_group("dp")`` (none given: the world)."""
    axes: tuple[str, ...] | None
    if group is None or (isinstance(group, NameExpr) and group.fullname == "builtins.None"):
        axes = (WORLD,)
    else:
        axes = None
        if isinstance(group, CallExpr) and isinstance(group.callee, MemberExpr) \
                and group.callee.name == "get_group" and len(group.args) == 1:
            name = literal_strs(group.args[0], None)
            axes = tuple(name) if name else None
    step = Step(op, "", "", axes or ("?",))
    return _Call(axes, None, None, None, None, [step], [], False, None)


def read_partial(axes: tuple[str, ...] | None) -> _Call:
    """``spmd.linear(..., out_partial_axes=axes)``: the local op, then reinterpret(V,P)."""
    if axes is None:
        return _Call(None, None, None, None, None, [], [], True, "axis not readable statically")
    v, p = LocalType(Kind.V), LocalType(Kind.P)
    t = coll.TRANSITIONS[("reinterpret", "V", "P")]
    forward, backward = _transition_steps(t, v, p, axes)
    return _Call(axes, v, p, None, "reinterpret(V,P)", forward, backward, True, None)


# ---------------------------------------------------------------------------------------
# Scopes: the enclosing function's qualname, loops and branches, .grad names
# ---------------------------------------------------------------------------------------

def qualname_of(stack: Sequence[object]) -> str:
    """Python's ``__qualname__`` from mypy's checker scope stack (module, classes, functions)."""
    parts: list[str] = []
    prev_func = False
    for e in stack:
        if isinstance(e, MypyFile):
            continue
        if prev_func:
            parts.append("<locals>")
        if isinstance(e, LambdaExpr):
            parts.append("<lambda>")
        elif isinstance(e, TypeInfo):
            parts.append(e.name)
        elif isinstance(e, FuncItem):
            parts.append(e.name)
        prev_func = isinstance(e, FuncItem)
    return ".".join(parts) if parts else MODULE_SCOPE


def _in_function_backward(stack: Sequence[object]) -> bool:
    """Whether the innermost function of a scope stack is ``backward`` of an autograd
    Function class."""
    funcs = [i for i, e in enumerate(stack) if isinstance(e, FuncItem)]
    if not funcs:
        return False
    k = funcs[-1]
    fn, owner = stack[k], stack[k - 1] if k > 0 else None
    return (isinstance(fn, FuncItem) and fn.name == "backward" and isinstance(owner, TypeInfo)
            and is_autograd_function(owner))


def _fill_applies(functions: Sequence[Function]) -> None:
    """Each ``Fn.apply`` site: the collectives of ``Fn.forward``'s sites forward, of
    ``Fn.backward``'s backward (the same module's; their own rows stay in those methods)."""
    by_name = {(f.module, f.qualname): f for f in functions}
    for f in functions:
        for site in f.sites:
            if site.applies is None:
                continue
            fwd = by_name.get((f.module, f"{site.applies}.forward"))
            bwd = by_name.get((f.module, f"{site.applies}.backward"))
            site.forward = [s for x in (fwd.sites if fwd else []) for s in x.forward_comms()]
            site.backward = [s for x in (bwd.sites if bwd else []) for s in x.backward_comms()]
            axes = sorted({a for s in site.forward + site.backward for a in s.axes})
            site.axes = tuple(axes) if axes else None


def _end_line(n: ast.AST) -> int:
    end: int | None = getattr(n, "end_lineno", None)
    return end if end is not None else int(getattr(n, "lineno", 0))


class _Regions:
    """Loops and branches of one file (from Python's ``ast``), each with the function
    (def or lambda) it is directly in; and per function the names assigned ``<expr>.grad``.

    A call is in a loop when a loop body of its own function (not of an enclosing one:
    a def inside a loop is called, not looped) contains its line.
    """

    _FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def __init__(self, source: str) -> None:
        self.funcs: list[tuple[int, int, int]] = []  # (start, end, id) of every def/lambda
        self.loops: list[tuple[int, int, int]] = []  # (start, end, enclosing def id or 0)
        self.branches: list[tuple[int, int, int]] = []
        self.grad_names: dict[tuple[int, str], bool] = {}  # (def id, name) -> only ever .grad
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return
        self._visit(tree, 0)

    @staticmethod
    def _span(nodes: Sequence[ast.AST]) -> tuple[int, int] | None:
        if not nodes:
            return None
        start: int = min(getattr(n, "lineno", 0) for n in nodes)
        for d in getattr(nodes[0], "decorator_list", ()):
            start = min(start, d.lineno)
        end = max(_end_line(n) for n in nodes)
        return start, end

    def _add(self, where: list[tuple[int, int, int]], nodes: Sequence[ast.AST], func: int) -> None:
        span = self._span(nodes)
        if span is not None:
            where.append((span[0], span[1], func))

    def _visit(self, node: ast.AST, func: int) -> None:
        if isinstance(node, self._FUNCS):
            inner = len(self.funcs) + 1
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
            self.funcs.append((start, node.end_lineno or node.lineno, inner))
            for d in getattr(node, "decorator_list", ()):
                self._visit(d, func)
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                self._visit(d, func)
            body: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
            for child in body:
                self._visit(child, inner)
            return
        if isinstance(node, (ast.For, ast.AsyncFor)):
            self._add(self.loops, node.body, func)
            self._add(self.branches, node.orelse, func)
        elif isinstance(node, ast.While):
            self._add(self.loops, [node], func)  # the condition runs once per iteration too
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self._add(self.loops, [node], func)
        elif isinstance(node, ast.If):
            self._add(self.branches, node.body, func)
            self._add(self.branches, node.orelse, func)
        elif isinstance(node, ast.IfExp):
            self._add(self.branches, [node.body], func)
            self._add(self.branches, [node.orelse], func)
        elif isinstance(node, ast.ExceptHandler):
            self._add(self.branches, node.body, func)
        elif isinstance(node, ast.match_case):
            self._add(self.branches, node.body, func)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            is_grad = isinstance(node.value, ast.Attribute) and node.value.attr == "grad"
            for t in targets:
                if isinstance(t, ast.Name):
                    key = (func, t.id)
                    self.grad_names[key] = self.grad_names.get(key, True) and is_grad
        for child in ast.iter_child_nodes(node):
            self._visit(child, func)

    def func_at(self, line: int) -> int:
        """The innermost def or lambda containing ``line`` (0: module level)."""
        best, size = 0, None
        for start, end, fid in self.funcs:
            if start <= line <= end and (size is None or end - start <= size):
                best, size = fid, end - start
        return best

    def in_loop(self, line: int) -> bool:
        f = self.func_at(line)
        return any(a <= line <= b and fid == f for a, b, fid in self.loops)

    def in_branch(self, line: int) -> bool:
        f = self.func_at(line)
        return any(a <= line <= b and fid == f for a, b, fid in self.branches)

    def only_grad(self, line: int, name: str) -> bool:
        return self.grad_names.get((self.func_at(line), name), False)


def _is_grad(e: Expression | None) -> bool:
    return isinstance(e, MemberExpr) and e.name == "grad"


# ---------------------------------------------------------------------------------------
# The plugin
# ---------------------------------------------------------------------------------------

class ReportPlugin(SpmdPlugin):
    """The checker's plugin, recording each collective / partial-op call it types."""

    def __init__(self, options: Options, user_paths: Iterable[str] = ()) -> None:
        super().__init__(options)
        self.user_paths = {os.path.abspath(p) for p in user_paths}
        self.nonce = uuid.uuid4().hex
        self.sites: dict[tuple[str, int, int, str], Site] = {}
        self.problems: list[str] = []  # internal errors of the recorder (never raised in mypy)
        self._wrapped: dict[str, Callable | None] = {}
        self._files: dict[str, tuple[list[str], _Regions]] = {}
        self.parsed: dict[str, list[_FunctionNodes]] = {}  # user file -> its functions

    # -- cache: the user's modules are always re-checked, so every hook fires ---------------
    def report_config_data(self, ctx: ReportConfigContext) -> object:
        data = super().report_config_data(ctx)
        if os.path.abspath(ctx.path) in self.user_paths:
            return {"spmd": data, "report": self.nonce}
        if data is not None:
            # the report's cache is not guarded by mypy's plugin snapshot (the plugin is
            # passed to mypy directly): key the project's modules on the rules' version
            return {"spmd": data, "version": _PLUGIN_VERSION}
        return data

    # -- the user's modules as parsed ------------------------------------------------------
    def get_additional_deps(self, file: MypyFile) -> list[tuple[int, str, int]]:
        deps = super().get_additional_deps(file)
        path = os.path.abspath(file.path)
        if path in self.user_paths:
            self.parsed[path] = parsed_functions(file)
        return deps

    # -- hooks -----------------------------------------------------------------------------
    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        if fullname in self._wrapped:
            return self._wrapped[fullname]
        hook = super().get_function_hook(fullname)
        if (fullname in COLLECTIVE_CALLS or fullname in PARTIAL_CALLS or raw_call(fullname)
                or fullname in MEGATRON_CALLS):
            hook = self._recording(fullname, hook)
        self._wrapped[fullname] = hook
        return hook

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        hook = super().get_method_hook(fullname)
        cls, _, method = fullname.rpartition(".")
        if method != "apply" or not is_autograd_function(self.dispatch.lookup_info(cls)):
            return hook
        return self._guarded(hook, lambda ctx: self._record_apply(cls, ctx))

    def _record_apply(self, cls: str, ctx: MethodContext) -> None:
        """A ``Fn.apply(...)`` call of a Function defined in a reported file: a site whose
        columns are the Function's forward and backward sites (filled in build_report)."""
        api: Any = ctx.api
        path = getattr(api, "path", None)
        info = self.dispatch.lookup_info(cls)
        if path is None or info is None or os.path.abspath(path) not in self.user_paths:
            return
        module = info.module_name
        if module != api.tree.fullname:  # defined elsewhere: its sites are not recorded
            return
        qualname = info.fullname[len(module) + 1:] if info.fullname.startswith(module + ".") else info.name
        line, column = ctx.context.line, ctx.context.column
        lines, regions = self._file(path)
        no_grad = "no_grad" if self.in_no_grad(api, line) else None
        self.sites[(os.path.abspath(path), line, column, f"{info.fullname}.apply")] = Site(
            path=path, line=line, column=column, module=api.tree.fullname,
            function=qualname_of(api.scope.stack), call=f"{info.fullname}.apply", axes=None,
            src=None, dst=None, reduce_op=None, transition=None, forward=[], backward=[],
            gradient=no_grad is None, no_gradient=no_grad,
            in_loop=regions.in_loop(line), in_branch=regions.in_branch(line),
            source=lines[line - 1].strip() if 0 < line <= len(lines) else "",
            applies=qualname)

    def _recording(self, fullname: str, hook: Callable | None) -> Callable[[FunctionContext], Type]:
        return self._guarded(hook, lambda ctx: self._record(fullname, ctx))

    def _guarded(self, hook: Callable | None, record: Callable[[Any], None]) -> Callable[[Any], Type]:
        """``hook`` (the plugin's, or mypy's default type when None) followed by ``record`` of
        the call; a recording problem is kept in ``problems``, never raised into mypy."""
        def run(ctx: Any) -> Type:
            result = hook(ctx) if hook is not None else ctx.default_return_type
            try:
                record(ctx)
            except Exception as e:  # noqa: BLE001 - a report problem must never crash mypy
                self.problems.append(f"{getattr(ctx.api, 'path', '?')}:{ctx.context.line}: "
                                     f"{type(e).__name__}: {e}")
            return result

        return run

    def _record(self, fullname: str, ctx: FunctionContext) -> None:
        api: Any = ctx.api
        path = getattr(api, "path", None)
        if path is None or os.path.abspath(path) not in self.user_paths:
            return
        line, column = ctx.context.line, ctx.context.column
        raw_op = raw_call(fullname)
        if raw_op is not None:
            call = read_raw(raw_op, *_arg(ctx, "group"))
            operands: list[Expression] = []
            fullname = "torch.distributed." + fullname.rsplit(".", 1)[-1]
        elif fullname in PARTIAL_CALLS:
            pa_expr, pa_type = _arg(ctx, "out_partial_axes")
            if pa_expr is None or (isinstance(pa_expr, NameExpr) and pa_expr.fullname == "builtins.None"):
                return  # the plain local op
            names = literal_strs(pa_expr, pa_type)
            call = read_partial(tuple(names) if names else None)
            operands = [e for formal, exprs in zip(ctx.callee_arg_names, ctx.args)
                        if formal != "out_partial_axes" and formal != "equation" for e in exprs]
        elif fullname in MEGATRON_CALLS:
            mapping = MEGATRON_CALLS[fullname]
            x_expr = _arg(ctx, "input_")[0]
            if x_expr is None or meg.TP_AXIS not in self.config.mesh_axes:
                return  # mypy reports the call; without a tp axis the stub is untyped
            dst: LocalType | None | bool = mapping.dst
            if mapping.flag is not None:
                flag_expr = _arg(ctx, mapping.flag[0])[0]
                if flag_expr is not None:
                    value = {"builtins.True": True, "builtins.False": False}.get(
                        flag_expr.fullname if isinstance(flag_expr, NameExpr) else "")
                    dst = mapping.dst_for(value) if value is not None else False
            call = read_collective(mapping.collective, (meg.TP_AXIS,), mapping.src, dst, "sum")
            operands = [x_expr]
        elif fullname == "spmd.redistribute" and _arg(ctx, "axis")[0] is None:
            x_expr, x_type = _arg(ctx, "x")
            if x_expr is None:
                return
            x_t = self.types.from_type(x_type) if x_type is not None else None
            call = read_global_redistribute(
                x_t, self._global_endpoint(_arg(ctx, "src")[0]),
                self._global_endpoint(_arg(ctx, "dst")[0]), self.config.mesh_axes)
            operands = [x_expr]
        else:
            op = COLLECTIVE_CALLS[fullname]
            x_expr = _arg(ctx, "x")[0]
            if x_expr is None:
                return  # mypy reports the missing argument
            axis_expr, axis_type = _arg(ctx, "axis")
            names = literal_strs(axis_expr, axis_type) if axis_expr is not None else None
            op_expr = _arg(ctx, "op")[0]
            reduce_op = op_expr.value if isinstance(op_expr, StrExpr) else "sum"
            call = read_collective(op, tuple(names) if names else None,
                                   _local_type(_arg(ctx, "src")[0]),
                                   _local_type(_arg(ctx, "dst")[0]), reduce_op)
            operands = [x_expr]
        lines, regions = self._file(path)
        if raw_op is not None:
            no_gradient: str | None = "raw collective"
        elif not call.has_gradient_op and call.reduce_op is not None:
            no_gradient = f'op="{call.reduce_op}"'
        elif not call.has_gradient_op:  # reinterpret(P,V): accepted on a gradient-free value
            no_gradient = (self._no_gradient(api, line, operands, regions)
                           or f"{call.transition} (no backward)")
        else:
            no_gradient = self._no_gradient(api, line, operands, regions)
        site = Site(
            path=path, line=line, column=column, module=api.tree.fullname,
            function=qualname_of(api.scope.stack), call=fullname, axes=call.axes,
            src=call.src_text or (str(call.src) if call.src is not None else None),
            dst=call.dst_text or (str(call.dst) if call.dst is not None else None),
            reduce_op=call.reduce_op, transition=call.transition, forward=call.forward,
            backward=call.backward, gradient=no_gradient is None, no_gradient=no_gradient,
            in_loop=regions.in_loop(line), in_branch=regions.in_branch(line),
            source=lines[line - 1].strip() if 0 < line <= len(lines) else "",
            problem=call.problem)
        if _in_function_backward(api.scope.stack):
            # a custom Function's backward: what the call issues runs in the backward pass
            site.backward, site.forward = site.forward, []
            site.gradient, site.no_gradient = True, None
        # mypy may type one call more than once (deferred functions, overload inference):
        # the last reading wins
        self.sites[(os.path.abspath(path), line, column, fullname)] = site

    def _global_endpoint(self, e: Expression | None) -> SpmdType | None:
        """A partition-spec redistribute's src/dst: ``PS[...]``, ``Tensor[PS[...], ...]``
        or an alias of one (None when not readable)."""
        from mypy.nodes import IndexExpr, RefExpr, TupleExpr, TypeAlias

        from .engine.annotations import build
        from .plugin.calls import _entry_from_expression

        if isinstance(e, RefExpr) and isinstance(e.node, TypeAlias):
            return self.types.from_type(e.node.target)
        if not (isinstance(e, IndexExpr) and isinstance(e.base, RefExpr)):
            return None
        if e.base.fullname == "spmd.PS":
            items: list[Expression] = [e]
        elif e.base.fullname == "spmd.Tensor":
            items = list(e.index.items) if isinstance(e.index, TupleExpr) else [e.index]
        else:
            return None
        entries = [_entry_from_expression(i) for i in items]
        if any(en is None for en in entries):
            return None
        t, errors = build(entries, self.config.mesh_axes,  # type: ignore[arg-type]
                          aliases=self.config.aliases)  # "dp": its components, as mypy reads it
        return None if errors else t

    def _no_gradient(self, api: Any, line: int, operands: list[Expression],
                     regions: _Regions) -> str | None:
        """Why no gradient can flow back through this call (None: one may)."""
        if self.in_no_grad(api, line):
            return "no_grad"
        reasons = [self._no_gradient_operand(api, line, e, regions) for e in operands]
        tensors = [r for r in reasons if r != "not a tensor"]
        if tensors and all(r is not None for r in tensors):
            return tensors[0]
        return None

    def _no_gradient_operand(self, api: Any, line: int, e: Expression, regions: _Regions) -> str | None:
        # (is_gradient_free counts a number literal too: here it is no tensor, read below);
        # the locals only ever assigned gradient-free values count, also inside an inline
        # collective (spmd.all_reduce(lmax, ...) as an argument), as they do for the checker
        if not isinstance(e, (IntExpr, FloatExpr)) and self.regions.gradient_free(
                getattr(api, "tree", None), line, e):
            return "detached"
        if _is_grad(e):
            return ".grad"
        if isinstance(e, NameExpr):
            if regions.only_grad(line, e.name):
                return ".grad"
        if isinstance(e, (StrExpr, IntExpr)) or (isinstance(e, NameExpr) and e.fullname == "builtins.None"):
            return "not a tensor"
        return None

    def _file(self, path: str) -> tuple[list[str], _Regions]:
        entry = self._files.get(path)
        if entry is None:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                text = ""
            entry = self._files[path] = (text.splitlines(), _Regions(text))
        return entry

    # -- after the build: the functions with typed tensors ------------------------------------
    def mentions_typed(self, t: Type | None) -> bool:
        if t is None:
            return False
        p = get_proper_type(t)
        if isinstance(p, Instance):
            if p.type.fullname == TENSOR:
                return bool(self.types.from_type(p))
            return any(self.mentions_typed(a) for a in p.args)
        if isinstance(p, (UnionType, TupleType)):
            return any(self.mentions_typed(i) for i in p.items)
        if isinstance(p, CallableType):
            return any(self.mentions_typed(a) for a in p.arg_types) or self.mentions_typed(p.ret_type)
        if isinstance(p, TypeType):
            return self.mentions_typed(p.item)
        return False


def _blocks(s: Statement) -> list[Block]:
    """The blocks of a compound statement (if/for/while/with/try/match)."""
    out: list[Block] = []
    for name in ("body", "else_body", "finally_body"):
        b = getattr(s, name, None)
        if isinstance(b, Block):
            out.append(b)
        elif isinstance(b, list):
            out.extend(x for x in b if isinstance(x, Block))
    for name in ("handlers", "bodies"):
        out.extend(x for x in getattr(s, name, None) or () if isinstance(x, Block))
    return out


@dataclass
class _FunctionNodes:
    """A function as parsed: its def, and the annotated assignments of its own body.

    Taken right after parsing (mypy frees a module's statements once it is checked);
    semantic analysis fills in the types of these same nodes.
    """

    qualname: str
    node: FuncDef
    annotated: list[AssignmentStmt]

    def typed(self, plugin: ReportPlugin) -> bool:
        return plugin.mentions_typed(self.node.type) or any(
            plugin.mentions_typed(a.type) for a in self.annotated)


def parsed_functions(tree: MypyFile) -> list[_FunctionNodes]:
    """Every function of a parsed module with its Python qualname."""
    found: list[_FunctionNodes] = []

    def func(f: FuncDef, prefix: str) -> None:
        entry = _FunctionNodes(prefix + f.name, f, [])
        found.append(entry)
        walk(f.body.body, prefix + f.name + ".<locals>.", entry)

    def walk(stmts: Sequence[Statement], prefix: str, owner: _FunctionNodes | None) -> None:
        for s in stmts:
            if isinstance(s, ClassDef):
                walk(s.defs.body, prefix + s.name + ".", None)
            elif isinstance(s, Decorator):
                func(s.func, prefix)
            elif isinstance(s, OverloadedFuncDef):
                impl = s.impl or (s.items[0] if s.items else None)
                if isinstance(impl, Decorator):
                    func(impl.func, prefix)
                elif isinstance(impl, FuncDef):
                    func(impl, prefix)
            elif isinstance(s, FuncDef):
                func(s, prefix)
            else:
                if owner is not None and isinstance(s, AssignmentStmt) and s.unanalyzed_type is not None:
                    owner.annotated.append(s)
                for b in _blocks(s):
                    walk(b.body, prefix, owner)

    walk(tree.defs, "", None)
    return found


# ---------------------------------------------------------------------------------------
# Running mypy
# ---------------------------------------------------------------------------------------

class ReportError(Exception):
    """mypy could not analyse the files (a blocking error, e.g. a syntax error)."""


def _display_path(path: str) -> str:
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    rel = os.path.relpath(absolute, cwd)
    return rel if not rel.startswith("..") else absolute


def build_report(paths: Sequence[str], *, config_file: str | None = None,
                 mypy_args: Sequence[str] = ()) -> Report:
    """Run mypy on ``paths`` with :class:`ReportPlugin` and collect the report.

    ``config_file`` is the user's mypy config (its ``[tool.spmd_mypy]`` / ``[spmd_mypy]``
    section gives the mesh axes); ``mypy_args`` are more mypy flags.
    """
    from mypy.main import process_options

    argv = [*mypy_args, *paths]
    if config_file:
        argv = ["--config-file", config_file, *argv]
    sources, options = process_options(argv, require_targets=True)
    # our plugin replaces the checker's (both would type every call); others stay
    options.plugins = [p for p in options.plugins if not _is_spmd_plugin(p)]
    options.num_workers = 0  # the hooks record in this process
    if options.cache_dir != os.devnull:
        options.cache_dir = os.path.join(options.cache_dir, "spmd-report")
    user_paths = [s.path for s in sources if s.path is not None]
    untyped_options = copy.deepcopy(options)  # before a clone_for_module fixes its sections
    plugin = ReportPlugin(options, user_paths)
    messages = _build(sources, options, plugin)
    # The bodies of unannotated functions (def forward(self, input_): ...) are not checked
    # under mypy's default, so their calls fired no hook.  If one has a call the report may
    # list, a second run checks them (check_untyped_defs in the reported modules only) for
    # the sites in those bodies; everything else, mypy's messages included, is the first
    # run's, under the user's config.
    unchecked: dict[str, list[tuple[int, int]]] = {}  # user file -> unchecked line ranges
    rerun = False
    for src in sources:
        if src.path is None or options.clone_for_module(src.module).check_untyped_defs:
            continue
        ranges, calls = _unchecked_lines(src.path)
        unchecked[os.path.abspath(src.path)] = ranges
        rerun = rerun or calls
        section = dict(untyped_options.per_module_options.get(src.module, {}))
        untyped_options.per_module_options[src.module] = {**section, "check_untyped_defs": True}
    if rerun:
        second = ReportPlugin(untyped_options, user_paths)
        _build(sources, untyped_options, second)
        for key, site in second.sites.items():
            if any(first <= key[1] <= last for first, last in unchecked.get(key[0], ())):
                plugin.sites.setdefault(key, site)
    functions: list[Function] = []
    for src in sources:
        if src.path is None:
            continue
        parsed = plugin.parsed.get(os.path.abspath(src.path))
        if parsed is None:
            raise RuntimeError(f"spmd-mypy report: {src.path} was not parsed in this run")
        path = _display_path(src.path)
        by_name: dict[str, Function] = {}
        for fn in parsed:
            by_name.setdefault(fn.qualname, Function(src.module, fn.qualname, path, fn.node.line,
                                                     fn.typed(plugin)))
        for key, site in plugin.sites.items():
            if key[0] != os.path.abspath(src.path):
                continue
            site.path = path
            f = by_name.get(site.function)
            if f is None:  # top level, or a scope the finder does not list (a lambda)
                f = by_name[site.function] = Function(src.module, site.function, path,
                                                      1 if site.function == MODULE_SCOPE else site.line,
                                                      False)
            f.sites.append(site)
        for f in by_name.values():
            f.sites.sort(key=lambda s: (s.line, s.column))
        functions.extend(sorted((f for f in by_name.values() if f.typed or f.sites),
                                key=lambda f: (f.line, f.qualname)))
    _fill_applies(functions)
    errors = [m for m in messages if ": error:" in m]
    return Report([_display_path(p) for p in user_paths], functions, errors, messages)


def _build(sources: list[Any], options: Options, plugin: ReportPlugin) -> list[str]:
    """One mypy run with ``plugin`` recording; mypy's messages."""
    from mypy import build
    from mypy.errors import CompileError

    messages: list[str] = []

    def flush(_: str | None, new: list[str], __: bool) -> None:
        messages.extend(new)

    try:
        build.build(sources, options, extra_plugins=[plugin], flush_errors=flush)
    except CompileError as e:
        raise ReportError("\n".join(e.messages or messages)) from None
    if plugin.problems:
        raise RuntimeError("spmd-mypy report: internal error while recording:\n"
                           + "\n".join(plugin.problems))
    return messages


def _unchecked_lines(path: str) -> tuple[list[tuple[int, int]], bool]:
    """The line ranges of the bodies mypy does not check without ``check_untyped_defs`` (the
    functions without any annotation, mypy's ``is_dynamic``, less the annotated functions
    nested in them), and whether a call there may be a site of the report (by its name)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path, type_comments=True)
    except (OSError, SyntaxError, ValueError):
        return [], False  # mypy reports it
    checked: dict[int, bool] = {}
    calls: list[int] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.body:
                a = child.args
                annotated = (child.returns is not None or child.type_comment is not None or any(
                    arg.annotation is not None
                    for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                    if arg is not None))
                for line in range(child.body[0].lineno, (child.end_lineno or 0) + 1):
                    checked[line] = annotated
            elif isinstance(child, ast.Call) and _may_be_site(child):
                calls.append(child.lineno)
            visit(child)

    visit(tree)
    ranges: list[tuple[int, int]] = []
    for line in sorted(n for n, ok in checked.items() if not ok):
        if ranges and ranges[-1][1] == line - 1:
            ranges[-1] = (ranges[-1][0], line)
        else:
            ranges.append((line, line))
    return ranges, any(checked.get(line) is False for line in calls)


def _may_be_site(call: ast.Call) -> bool:
    """A call the report could list, by the name called (``spmd.all_reduce``, ``dist.send``,
    an einsum-family call with ``out_partial_axes``)."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name in PARTIAL_CALLS.values():
        return any(k.arg == "out_partial_axes" for k in call.keywords)
    return name in coll.OPS or name in RAW_CALLS or name in meg.TYPED_MAPPINGS


def main(paths: Sequence[str], *, as_json: bool = False, config_file: str | None = None,
         mypy_args: Sequence[str] = (), clean_exit: bool = True) -> int:
    """The ``report`` subcommand: 0 if mypy found no errors, 1 if it did (the report is
    printed either way; the errors go to stderr), 2 if the files could not be analysed.

    ``clean_exit=False`` ends the process right after printing, as mypy's own command
    does: tearing down the objects of a first analysis of torch takes longer than it.
    """
    try:
        report = build_report(paths, config_file=config_file, mypy_args=mypy_args)
    except ReportError as e:
        print(str(e), file=sys.stderr)
        status = 2
    else:
        sys.stdout.write(report.to_json() if as_json else report.format_table())
        for m in report.messages:
            print(m, file=sys.stderr)
        status = 1 if report.errors else 0
    if not clean_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
