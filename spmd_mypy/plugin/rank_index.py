"""Rank-derived indices: where a tensor op's argument is computed from the rank.

``r = dist.get_rank(); mine = full[r * b:(r + 1) * b]`` takes a different slice on each rank:
the result differs across the axes the rank query runs over, whatever ``full`` is (an R
``full`` gives a V ``mine``; its backward zero-pads each rank's gradient, a per-rank partial,
as ``convert(R->S(i))``'s backward does).  mypy types ``r`` as a plain ``int``, so the rule
reads the source: in the pre-pass (rewrite.prepare_file), only in the functions that call a
rank query (``dist.get_rank()``, ``mesh.get_local_rank("tp")``, ``mesh.get_coordinate()``,
``dist.get_group_rank(...)``, or one of the module's own functions that returns one), the
locals bound from one (through int arithmetic, ``int/min/max/abs/range/divmod``, tuple items,
loop variables over such a range) are rank-derived; each subscript whose index, operator or
comparison whose operand, and call whose argument mentions one is recorded by node, with the
axes it varies on.  The op hook asks only for a recorded node (by id, ``RegionIndex.rank_exprs``): code without
rank queries pays a dict truth test per op.

Axes: ``mesh.get_local_rank("tp")`` / ``mesh_dim="tp"`` / ``mesh["tp"].get_local_rank()`` and
``get_rank(mesh.get_group("tp"))`` vary on "tp"; any other query (no group, a group or mesh dim
the source does not name) on every mesh axis (:data:`EVERY`).
"""

from __future__ import annotations

from typing import Final, Optional, cast

from mypy.nodes import (
    AssignmentStmt,
    Block,
    CallExpr,
    ComparisonExpr,
    ConditionalExpr,
    Decorator,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    IfStmt,
    IndexExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    OperatorAssignmentStmt,
    OpExpr,
    ReturnStmt,
    SliceExpr,
    Statement,
    StrExpr,
    TryStmt,
    TupleExpr,
    UnaryExpr,
    WhileStmt,
    WithStmt,
)
from mypy.server.subexpr import get_subexpressions

# The axes a value varies on: a frozenset of axis names, or of EVERY (all mesh axes)
EVERY: Final = "*"
_ALL: Final = frozenset({EVERY})

RANK_QUERIES: Final = frozenset({"get_rank", "get_local_rank", "get_coordinate", "get_group_rank"})
# calls whose int result carries their arguments' rank dependence
_INT_CALLS: Final = frozenset({"int", "min", "max", "abs", "range", "divmod", "round"})
# calls whose int argument is a device or a seed, not an index: x.to(local_rank)
_DEVICE_CALLS: Final = frozenset({"to", "cuda", "device", "set_device", "manual_seed", "seed",
                                  "pin_memory"})


def _str_arg(call: CallExpr, name: str) -> Optional[str]:
    """The call's first positional or ``name=`` argument, if a string literal."""
    for a, kind_name in zip(call.args, call.arg_names):
        if kind_name is None or kind_name == name:
            return a.value if isinstance(a, StrExpr) else None
    return None


def _group_axes(call: CallExpr) -> frozenset:
    """``dist.get_rank(mesh.get_group("tp"))``: "tp"; any other group: every axis."""
    for a, n in zip(call.args, call.arg_names):
        if n is None or n == "group":
            if isinstance(a, CallExpr) and isinstance(a.callee, MemberExpr) \
                    and a.callee.name == "get_group":
                axis = _str_arg(a, "mesh_dim")
                if axis is not None:
                    return frozenset({axis})
            return _ALL
    return _ALL


def query_axes(call: CallExpr, helpers: dict[str, frozenset]) -> Optional[frozenset]:
    """The axes the rank query ``call`` varies on; None when it is not one."""
    callee = call.callee
    if isinstance(callee, NameExpr):
        if callee.name in helpers:
            return helpers[callee.name]
        name = callee.name
    elif isinstance(callee, MemberExpr):
        name = callee.name
    else:
        return None
    if name not in RANK_QUERIES:
        return None
    if name == "get_local_rank":
        axis = _str_arg(call, "mesh_dim")
        if axis is not None:
            return frozenset({axis})
        if isinstance(callee, MemberExpr) and isinstance(callee.expr, IndexExpr) \
                and isinstance(callee.expr.index, StrExpr):  # mesh["tp"].get_local_rank()
            return frozenset({callee.expr.index.value})
        return _ALL
    if name == "get_rank" or name == "get_group_rank":
        return _group_axes(call)
    return _ALL


def has_query(e: Optional[Expression], helpers: dict[str, frozenset]) -> bool:
    """A rank query in an assigned value (shallow: calls, operators, tuples).  Run at every
    assignment in a function: exact-class dispatch, a name test before anything else."""
    cls = type(e)
    if cls is CallExpr:
        call = cast(CallExpr, e)
        callee = call.callee
        ccls = type(callee)
        if (ccls is MemberExpr or ccls is NameExpr) and (
                cast("MemberExpr | NameExpr", callee).name in RANK_QUERIES
                or cast("MemberExpr | NameExpr", callee).name in helpers):
            return True
        if ccls is NameExpr and cast(NameExpr, callee).name in _INT_CALLS:  # int(get_rank())
            for a in call.args:
                if has_query(a, helpers):
                    return True
        return False
    if cls is OpExpr:
        op = cast(OpExpr, e)
        return has_query(op.left, helpers) or has_query(op.right, helpers)
    if cls is TupleExpr or cls is ListExpr:
        for i in cast("TupleExpr | ListExpr", e).items:
            if has_query(i, helpers):
                return True
    return False


def rank_helpers(file: MypyFile) -> dict[str, frozenset]:
    """The module-level functions that return a rank query (``def my_rank() -> int: return
    dist.get_rank()``), with its axes."""
    out: dict[str, frozenset] = {}
    for d in file.defs:
        f = d.func if isinstance(d, Decorator) else d
        if isinstance(f, FuncDef) and f.body.body:
            last = f.body.body[-1]
            if isinstance(last, ReturnStmt) and isinstance(last.expr, CallExpr):
                axes = query_axes(last.expr, out)
                if axes is not None:
                    out[f.name] = axes
    return out


def _union(a: Optional[frozenset], b: Optional[frozenset]) -> Optional[frozenset]:
    if a is None:
        return b
    if b is None:
        return a
    return a | b


# the spmd calls that state a value's conversion: a rank-derived subscript as their operand
# keeps the type the checker gave it before the rank rule
_STATED_CALLS: Final = frozenset({"reinterpret", "convert", "declare"})


class _Scan:
    """One function's bindings and candidate nodes, then the rank-derived ones."""

    def __init__(self, helpers: dict[str, frozenset]) -> None:
        self.helpers = helpers
        self.binds: list[tuple[Expression, Expression]] = []  # (target, value)
        self.candidates: list[Expression] = []
        self.stated: set[int] = set()  # subscripts whose conversion the code states
        self.names: dict[str, frozenset] = {}

    # -- the int expressions a rank dependence flows through
    def taint(self, e: Optional[Expression]) -> Optional[frozenset]:
        if isinstance(e, NameExpr):
            return self.names.get(e.name)
        if isinstance(e, OpExpr):
            return _union(self.taint(e.left), self.taint(e.right))
        if isinstance(e, ComparisonExpr):
            out: Optional[frozenset] = None
            for o in e.operands:
                out = _union(out, self.taint(o))
            return out
        if isinstance(e, CallExpr):
            axes = query_axes(e, self.helpers)
            if axes is not None:
                return axes
            callee = e.callee
            if isinstance(callee, NameExpr) and callee.name in _INT_CALLS:
                out = None
                for a in e.args:
                    out = _union(out, self.taint(a))
                return out
            return None
        if isinstance(e, UnaryExpr):
            return self.taint(e.expr)
        if isinstance(e, (TupleExpr, ListExpr)):
            out = None
            for i in e.items:
                out = _union(out, self.taint(i))
            return out
        if isinstance(e, SliceExpr):
            return _union(_union(self.taint(e.begin_index), self.taint(e.end_index)),
                          self.taint(e.stride))
        if isinstance(e, ConditionalExpr):
            return _union(self.taint(e.if_expr), self.taint(e.else_expr))
        if isinstance(e, IndexExpr):  # coords[0] of coords = mesh.get_coordinate()
            return self.taint(e.base) if isinstance(e.base, NameExpr) else None
        return None

    def _bind(self, target: Expression, value: Expression, item: bool = False) -> bool:
        """Bind ``target`` to ``value`` (``item``: an element of it); whether a name's axes grew."""
        if isinstance(target, NameExpr):
            axes = self.taint(value)
            if axes is None:
                return False
            old = self.names.get(target.name)
            new = axes if old is None else old | axes
            if new != old:
                self.names[target.name] = new
                return True
            return False
        if isinstance(target, (TupleExpr, ListExpr)):
            if isinstance(value, (TupleExpr, ListExpr)) and len(value.items) == len(target.items):
                grew = False
                for t, v in zip(target.items, value.items):
                    grew = self._bind(t, v) or grew
                return grew
            grew = False
            for t in target.items:
                grew = self._bind(t, value) or grew
            return grew
        return False

    # -- the walk over statements (nested functions and classes are their own scans)
    def block(self, stmts: list[Statement]) -> None:
        for st in stmts:
            self.stmt(st)

    def stmt(self, st: Statement) -> None:
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                self.binds.append((lv, st.rvalue))
                self.expr(lv)
            self.expr(st.rvalue)
        elif isinstance(st, OperatorAssignmentStmt):
            self.binds.append((st.lvalue, OpExpr(st.op, st.lvalue, st.rvalue)))
            self.expr(st.lvalue)
            self.expr(st.rvalue)
        elif isinstance(st, (ExpressionStmt, ReturnStmt)):
            self.expr(st.expr)
        elif isinstance(st, ForStmt):
            self.binds.append((st.index, st.expr))
            self.expr(st.expr)
            self.block(st.body.body)
            if st.else_body is not None:
                self.block(st.else_body.body)
        elif isinstance(st, WhileStmt):
            self.expr(st.expr)
            self.block(st.body.body)
        elif isinstance(st, IfStmt):
            for e in st.expr:
                self.expr(e)
            for b in st.body:
                self.block(b.body)
            if st.else_body is not None:
                self.block(st.else_body.body)
        elif isinstance(st, WithStmt):
            for e in st.expr:
                self.expr(e)
            self.block(st.body.body)
        elif isinstance(st, TryStmt):
            self.block(st.body.body)
            for h in st.handlers:
                self.block(h.body)
            for extra in (st.else_body, st.finally_body):
                if extra is not None:
                    self.block(extra.body)
        elif isinstance(st, Block):
            self.block(st.body)

    def expr(self, e: Optional[Expression]) -> None:
        """Collect the nodes an op hook may run at (subscripts, operators, comparisons,
        calls) inside ``e``."""
        if e is None:
            return
        if isinstance(e, IndexExpr):
            self.candidates.append(e)
            self.expr(e.base)
            self.expr(e.index)
        elif isinstance(e, CallExpr):
            if e.args:
                self.candidates.append(e)
                callee = e.callee
                if (isinstance(e.args[0], IndexExpr) and isinstance(callee, (NameExpr, MemberExpr))
                        and callee.name in _STATED_CALLS):
                    # spmd.reinterpret(full[r * b:(r + 1) * b], "dp", src=R, dst=V): the code
                    # says what the rank's slice is (its src as the checker typed it before this
                    # rule; the check mode sees the rank as a plain int and agrees)
                    self.stated.add(id(e.args[0]))
            self.expr(e.callee)
            for a in e.args:
                self.expr(a)
        elif isinstance(e, OpExpr):
            self.candidates.append(e)
            self.expr(e.left)
            self.expr(e.right)
        elif isinstance(e, ComparisonExpr):
            self.candidates.append(e)
            for o in e.operands:
                self.expr(o)
        elif isinstance(e, MemberExpr):
            self.expr(e.expr)
        elif isinstance(e, UnaryExpr):
            self.expr(e.expr)
        elif isinstance(e, (TupleExpr, ListExpr)):
            for i in e.items:
                self.expr(i)
        elif isinstance(e, SliceExpr):
            self.expr(e.begin_index)
            self.expr(e.end_index)
            self.expr(e.stride)
        elif isinstance(e, ConditionalExpr):
            self.expr(e.cond)
            self.expr(e.if_expr)
            self.expr(e.else_expr)

    def run(self, func: FuncDef, out: dict[int, tuple[Expression, frozenset, Expression]]) -> None:
        self.block(func.body.body)
        for _ in range(len(self.binds) + 1):  # a fixed point: each pass binds one more name at least
            grew = False
            for target, value in self.binds:
                grew = self._bind(target, value) or grew
            if not grew:
                break
        for c in self.candidates:
            if id(c) in self.stated:
                continue
            axes: Optional[frozenset] = None
            by: Optional[Expression] = None
            if isinstance(c, IndexExpr):
                axes, by = self.taint(c.index), c.index
            else:
                if isinstance(c, CallExpr):
                    callee = c.callee
                    if query_axes(c, self.helpers) is not None or (
                            isinstance(callee, (NameExpr, MemberExpr))
                            and callee.name in _DEVICE_CALLS):
                        continue
                    # a device (x.to(rank), device=local_rank) picks no values
                    parts = [a for a, n in zip(c.args, c.arg_names) if n != "device"]
                elif isinstance(c, OpExpr):
                    parts = [c.left, c.right]
                elif isinstance(c, ComparisonExpr):
                    parts = c.operands
                else:
                    continue
                for a in parts:
                    t = self.taint(a)
                    if t is not None:
                        axes = _union(axes, t)
                        if by is None:
                            by = a
            if axes is not None and by is not None:
                out[id(c)] = (c, axes, by)


def scan_functions(funcs: list[FuncDef], helpers: dict[str, frozenset]
                   ) -> dict[int, tuple[Expression, frozenset, Expression]]:
    """The rank-derived op nodes of ``funcs`` (the functions that call a rank query): by id,
    the node, the axes, and its first rank-derived index or operand."""
    out: dict[int, tuple[Expression, frozenset, Expression]] = {}
    for f in funcs:
        _Scan(helpers).run(f, out)
    return out


def axes_in(axes: frozenset, mesh_axes: tuple[str, ...]) -> list[str]:
    """The mesh axes a recorded node varies on (EVERY: all of them)."""
    if EVERY in axes:
        return list(mesh_axes)
    return [a for a in mesh_axes if a in axes]


def every_query(e: Expression, func: FuncDef) -> Optional[CallExpr]:
    """The rank query over every mesh axis (``dist.get_rank()``) that ``e`` is computed from,
    through the assignments of ``func``; None when there is none (a helper that returns
    one: not followed).  Read on the error path only (an error's hint names it)."""
    scan = _Scan({})
    scan.block(func.body.body)
    binds: dict[str, list[Expression]] = {}
    for target, value in scan.binds:
        for t in (target.items if isinstance(target, (TupleExpr, ListExpr)) else [target]):
            if isinstance(t, NameExpr):
                binds.setdefault(t.name, []).append(value)
    todo: list[Expression] = [e]
    seen: set[str] = set()
    while todo:
        x = todo.pop(0)
        for sub in get_subexpressions(x):  # x itself first
            if isinstance(sub, CallExpr):
                axes = query_axes(sub, {})
                if axes is not None and EVERY in axes:
                    return sub
            elif isinstance(sub, NameExpr) and sub.name not in seen:
                seen.add(sub.name)
                todo.extend(binds.get(sub.name, ()))
    return None


__all__ = ["EVERY", "RANK_QUERIES", "has_query", "rank_helpers", "scan_functions", "axes_in",
           "query_axes", "every_query"]
