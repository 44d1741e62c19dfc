"""Zero buffers: a local bound once to a factory's zeros and then filled by typed stores.

    final = torch.zeros(b, s, h)      # plain torch.Tensor for mypy: zeros are no term of any type
    final[~is_img] = txt[~is_img]     # a typed store: final is I from here on
    final[is_img] = img               # img P: the store into an I buffer is rejected
    y = torch.zeros_like(x)
    for i in experts:
        y[idx] += expert(x[idx]) * w  # V stored: y is V after the loop

mypy fixes a local's type at its first assignment (plain ``torch.Tensor`` for a factory's
result), so what a store writes would be lost and every later read gradual.  The check mode
types such a buffer by what is written into it (engine ``ZERO_FACTORIES``: the zeros read as
zeros by an op that writes them, then the result's type, ``SpmdType.mutated_by``).  This is
the static side of that rule:

* the buffers of a function (:func:`zero_buffers`, once per function body): a local bound
  exactly once, by ``name = torch.zeros(...)`` / ``torch.zeros_like(x)`` / ``x.new_zeros(...)``
  or a fill with a literal 0 (``torch.full(shape, 0.0)``, ``full_like``, ``new_full``; engine
  ``FILL_FACTORIES``).  Not ``torch.empty``: its values are garbage until written, and a
  partial store leaves garbage that is no term of any type (the check mode does not take it
  either);
* a store (an in-place op whose receiver is the buffer: ``x[...] = v``, ``x[...] += v``,
  ``index_put_``, ``masked_scatter_``, ``index_add_``, ``index_copy_``, ``copy_``,
  ``scatter_``, ``add_``, ...) with a typed operand reads the buffer as its type so far, or
  as a zero where no store comes before it; the type the buffer has after it is recorded at
  the store's position (:class:`BufferTypes`);
* a read of the buffer (an op's operand, a call's argument, a collective's, ``spmd.reveal``)
  where mypy has plain ``torch.Tensor`` takes the type of the last store before it in the
  source.  Before the first store the buffer is still zeros: untyped, as before.

Positions, not the order hooks run in, decide: mypy checks a loop body more than once and
a deferred function twice, and a store is judged the same each time.  A read in a loop before
the loop's store stays untyped (gradual), and a read after a store in a branch or a loop
takes the store's type: where the store did not run the buffer holds zeros, which are a value
of every type.  Stores in exclusive branches are read in source order (the later one is
judged against the earlier one's type).  Code without annotations stores nothing typed:
nothing changes there.

A buffer that escapes the function's own statements is not a buffer (:func:`_escaping`):
passed to a call that is not torch's or spmd's (``scatter_into(out, idx, v)`` may store
into it where no hook sees), bound to another name or put in a container (``h = out``,
``bufs = [out]``: stores through the alias), or read in a nested function or lambda (a
store there runs whenever it is called).  Its type would be a confident guess: it stays
plain, as before.
"""

from __future__ import annotations

from typing import Final

from mypy.nodes import (
    ARG_NAMED,
    AssertStmt,
    AssignmentExpr,
    AssignmentStmt,
    CallExpr,
    CastExpr,
    ClassDef,
    ComparisonExpr,
    ConditionalExpr,
    DelStmt,
    DictExpr,
    ExpressionStmt,
    ForStmt,
    IfStmt,
    IndexExpr,
    MatchStmt,
    OperatorAssignmentStmt,
    OpExpr,
    RaiseStmt,
    ReturnStmt,
    SliceExpr,
    StarExpr,
    Statement,
    WhileStmt,
    WithStmt,
    Expression,
    FloatExpr,
    FuncDef,
    IntExpr,
    LambdaExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    RefExpr,
    SetExpr,
    TupleExpr,
    UnaryExpr,
)
from mypy.traverser import all_name_and_member_expressions

from ..engine.ops import FILL_FACTORIES, ZERO_FACTORIES
from ..engine.types import SpmdType
from .global_calls import size_names
from .statements import functions_of, nested_statements

_BUFFERS: Final[dict[int, tuple[FuncDef, object, frozenset[str]]]] = {}
# a buffer after a store: its type, and whether it may carry a gradient
Stored = tuple[SpmdType, bool]


def _zero_literal(e: Expression | None) -> bool:
    while isinstance(e, UnaryExpr) and e.op in ("-", "+"):
        e = e.expr
    return isinstance(e, (IntExpr, FloatExpr)) and e.value == 0


def is_zero_factory(e: Expression | None) -> bool:
    """``torch.zeros(...)``, ``torch.zeros_like(x)``, ``x.new_zeros(...)``, or a fill with a
    literal 0 (``torch.full(s, 0.0)``, ``torch.full_like(x, 0)``, ``x.new_full(s, 0)``)."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, (NameExpr, MemberExpr)):
        return False
    callee = e.callee
    name = callee.name
    if name not in ZERO_FACTORIES and name not in FILL_FACTORIES:
        return False
    method = name.startswith("new_")
    if method:
        # x.new_zeros(...): a method of a tensor (not of a module: mypy names those)
        if not isinstance(callee, MemberExpr) or (isinstance(callee.expr, RefExpr)
                                                   and isinstance(callee.expr.node, MypyFile)):
            return False
    elif not (callee.fullname.startswith("torch.") and callee.fullname.endswith(f".{name}")):
        return False  # torch.zeros is torch._C._VariableFunctions.zeros for mypy
    if name in ZERO_FACTORIES:
        return True
    # a fill: fill_value by keyword, or at position 1 (full(size, v), full_like(x, v),
    # x.new_full(size, v))
    for arg, kind, arg_name in zip(e.args, e.arg_kinds, e.arg_names):
        if kind == ARG_NAMED and arg_name == "fill_value":
            return _zero_literal(arg)
    return len(e.args) > 1 and e.arg_names[1] is None and _zero_literal(e.args[1])


def zero_buffers(func: FuncDef) -> frozenset[str]:
    """The locals ``func`` binds exactly once, to a factory's zeros (:func:`is_zero_factory`),
    computed once per function body (from ``size_names``, itself computed once)."""
    cached = _BUFFERS.get(id(func))
    if cached is not None and cached[0] is func and cached[1] is func.body:
        return cached[2]
    facts = size_names(func)
    found = frozenset(name for name, value in facts.values.items()
                      if facts.bindings.get(name) == 1 and is_zero_factory(value))
    if found:
        found = found - _escaping(func, found)
    if len(_BUFFERS) > 10_000:  # bound the memory of a long-lived daemon
        _BUFFERS.clear()
    _BUFFERS[id(func)] = (func, func.body, found)
    return found


class BufferTypes:
    """The type each zero buffer has after each of its typed stores, by the store's position
    (line, column) in its function, with whether it may carry a gradient then (a stored
    value that does: the factory's zeros carry none, rewrite.is_gradient_free): filled as
    mypy checks the stores, read at the buffer's later reads."""

    def __init__(self) -> None:
        # function id -> (the function, its body, name -> {store position: (type, gradient)})
        self._stores: dict[int, tuple[FuncDef, object, dict[str, dict[tuple[int, int], Stored]]]] = {}

    def _of(self, func: FuncDef) -> dict[str, dict[tuple[int, int], Stored]]:
        entry = self._stores.get(id(func))
        if entry is None or entry[0] is not func or entry[1] is not func.body:
            if len(self._stores) > 10_000:
                self._stores.clear()
            entry = (func, func.body, {})
            self._stores[id(func)] = entry
        return entry[2]

    def record(self, func: FuncDef, name: str, at: tuple[int, int], t: SpmdType,
               can_grad: bool) -> None:
        self._of(func).setdefault(name, {})[at] = (t, can_grad)

    def before(self, func: FuncDef, name: str, at: tuple[int, int]) -> Stored | None:
        """The buffer's type after the last store before ``at`` (None: no store before it,
        the buffer is still zeros)."""
        entry = self._stores.get(id(func))
        if entry is None or entry[0] is not func:
            return None
        stores = entry[2].get(name)
        if not stores:
            return None
        best: tuple[int, int] | None = None
        for pos in stores:
            if pos < at and (best is None or pos > best):
                best = pos
        return stores[best] if best is not None else None



# Callees a buffer may be passed to without escaping: they neither keep it nor store into it
# where no hook sees (an out= target is an in-place op the hooks see)
_OWN_CALLEES: Final = ("torch.", "spmd.", "builtins.")


def _escaping(func: FuncDef, names: frozenset[str]) -> frozenset[str]:
    """The buffers of ``names`` that leave the function's own statements: passed to a call
    that is not torch's or spmd's, bound to another name or put in a container, or read in a
    nested function, class or lambda.  Only for functions with a buffer; an expression
    without a buffer's name is not walked further."""
    esc: set[str] = set()
    passed: list[tuple[str, int]] = []  # (buffer, line) of a call argument
    lines: dict[str, list[int]] = {}  # the lines a buffer is named on
    loops: list[tuple[int, int]] = []
    for st in nested_statements(func.body.body):
        nested = functions_of(st)
        if nested or isinstance(st, ClassDef):
            _all_in(_definition_exprs(st, nested), names, esc)
            continue
        if isinstance(st, (ForStmt, WhileStmt)):
            loops.append((st.line, st.end_line or st.line))
        for e in _statement_exprs(st):
            if e is None:
                continue
            found, _ = all_name_and_member_expressions(e)
            mentioned = [n for n in found if n.name in names]
            if mentioned:
                for n in mentioned:
                    lines.setdefault(n.name, []).append(n.line)
                _scan(e, names, esc, passed)
        alias = _buffer_name(st.rvalue, names) if isinstance(st, AssignmentStmt) else None
        if alias is not None:
            esc.add(alias)  # h = out: an alias
    for name, line in passed:
        # passed to a call that may store into it: its type after the call is unknown, so
        # it is no buffer unless nothing reads it afterwards (``return block(final)``): no
        # later line, and no loop around the call that names it again
        named = lines.get(name, [])
        if max(named, default=0) > line or any(
                a <= line <= b and any(a <= n <= b for n in named) for a, b in loops):
            esc.add(name)
    return frozenset(esc)


def _statement_exprs(st: Statement) -> list[Expression | None]:
    if isinstance(st, AssignmentStmt):
        return [*st.lvalues, st.rvalue]
    if isinstance(st, OperatorAssignmentStmt):
        return [st.lvalue, st.rvalue]
    if isinstance(st, (ExpressionStmt, ReturnStmt, WhileStmt, DelStmt)):
        return [st.expr]
    if isinstance(st, IfStmt):
        return list(st.expr)
    if isinstance(st, ForStmt):
        return [st.index, st.expr]
    if isinstance(st, WithStmt):
        return [*st.expr, *st.target]
    if isinstance(st, AssertStmt):
        return [st.expr, st.msg]
    if isinstance(st, RaiseStmt):
        return [st.expr, st.from_expr]
    if isinstance(st, MatchStmt):
        return [st.subject, *st.guards]
    return []


def _definition_exprs(st: Statement, funcs: list[FuncDef]) -> list[Expression]:
    """Every expression of a nested definition's statements (a class's too)."""
    out: list[Expression] = []
    bodies = [f.body.body for f in funcs] or ([st.defs.body] if isinstance(st, ClassDef) else [])
    for body in bodies:
        for inner in nested_statements(body):
            inner_funcs = functions_of(inner)
            if inner_funcs or isinstance(inner, ClassDef):
                out.extend(_definition_exprs(inner, inner_funcs))
            else:
                out.extend(e for e in _statement_exprs(inner) if e is not None)
    return out


def _all_in(exprs: list[Expression], names: frozenset[str], esc: set[str]) -> None:
    for e in exprs:
        found, _ = all_name_and_member_expressions(e)
        esc.update(n.name for n in found if n.name in names)


def _buffer_name(e: Expression | None, names: frozenset[str]) -> str | None:
    return e.name if isinstance(e, NameExpr) and e.name in names else None


def _scan(e: Expression | None, names: frozenset[str], esc: set[str],
          passed: list[tuple[str, int]]) -> None:
    """Where the buffers ``e`` mentions go: a read as an operand stays; an argument of a
    call that is not torch's or spmd's, an item of a container, a walrus's value or a name
    in a lambda escapes; an expression of another kind escapes whatever buffer it names."""
    if e is None or isinstance(e, NameExpr):
        return
    if isinstance(e, CallExpr):
        callee = e.callee
        full = callee.fullname if isinstance(callee, RefExpr) else ""
        if not (full and full.startswith(_OWN_CALLEES)):
            passed.extend((a.name, e.line) for a in e.args
                          if isinstance(a, NameExpr) and a.name in names)
        _scan(callee, names, esc, passed)
        for a in e.args:
            _scan(a, names, esc, passed)
    elif isinstance(e, (ListExpr, TupleExpr, SetExpr)):
        esc.update(i.name for i in e.items if isinstance(i, NameExpr) and i.name in names)
        for i in e.items:
            _scan(i, names, esc, passed)
    elif isinstance(e, DictExpr):
        for k, v in e.items:
            item = _buffer_name(v, names)
            if item is not None:
                esc.add(item)
            _scan(k, names, esc, passed)
            _scan(v, names, esc, passed)
    elif isinstance(e, MemberExpr):
        _scan(e.expr, names, esc, passed)
    elif isinstance(e, IndexExpr):
        _scan(e.base, names, esc, passed)
        _scan(e.index, names, esc, passed)
    elif isinstance(e, OpExpr):
        _scan(e.left, names, esc, passed)
        _scan(e.right, names, esc, passed)
    elif isinstance(e, ComparisonExpr):
        for o in e.operands:
            _scan(o, names, esc, passed)
    elif isinstance(e, (UnaryExpr, CastExpr, StarExpr)):
        _scan(e.expr, names, esc, passed)
    elif isinstance(e, ConditionalExpr):
        _scan(e.cond, names, esc, passed)
        _scan(e.if_expr, names, esc, passed)
        _scan(e.else_expr, names, esc, passed)
    elif isinstance(e, SliceExpr):
        _scan(e.begin_index, names, esc, passed)
        _scan(e.end_index, names, esc, passed)
        _scan(e.stride, names, esc, passed)
    elif isinstance(e, AssignmentExpr):
        walrus = _buffer_name(e.value, names)
        if walrus is not None:
            esc.add(walrus)
        _scan(e.value, names, esc, passed)
    else:  # a lambda, a comprehension, ...: conservative
        _all_in([e], names, esc)
