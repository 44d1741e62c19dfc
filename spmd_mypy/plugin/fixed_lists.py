"""Local lists whose items are known position by position (:func:`fixed_list`).

mypy gives a list one item type, the join of its items: ``[pn, pw]`` of a norm weight
``Tensor[I["tp"]]`` and a sharded one ``Tensor[S[0, "tp"]]`` is a list of either, so a loop
``for p, g in zip(params, grads)`` or ``torch._foreach_add_(params, grads)`` pairs every
kind of ``params`` with every kind of ``grads`` (errors of pairings no iteration makes).
Where the list is certain to hold its display, item ``k`` is the display's item ``k``.

Certain only where nothing can reorder, resize or replace it: the local is bound once (not a
parameter), to a list display without ``*`` in a plain assignment of one target
(``grads = [gn, gw]``, or in parallel: ``params, grads = [pn, pw], [gn, gw]``), and every
other mention of it reads it as it is::

    for x in grads                      [f(g) for g in grads]      (iterated)
    zip(params, grads, strict=True)     enumerate(grads)           len(grads)
    grads[0]   grads[k]                 (an item read, not a slice)
    torch._foreach_mul_(grads, 0.9)     (torch's multi-tensor ops write items, not the list)

Any other use makes it an ordinary list (one item type): a slice, ``reversed(grads)``, a
method call (``grads.reverse()``, ``.sort()``, ``.append(x)``), ``grads[0] = x``, ``del``,
``+=``, passing it to any other function (``random.shuffle(grads)``), an alias
(``gl = grads``), a mention in a nested function or lambda, a second binding; a function
with a ``match`` statement, or ``locals()`` / ``vars()`` / ``exec`` / ``eval``, has none.

Computed once per function body, only when asked (a loop over ``zip``/``enumerate``/a name
whose operands are unions, a ``_foreach`` call over a list variable)."""

from __future__ import annotations

from mypy.nodes import (
    ARG_POS,
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Decorator,
    DelStmt,
    DictionaryComprehension,
    Expression,
    ForStmt,
    FuncDef,
    GeneratorExpr,
    IndexExpr,
    LambdaExpr,
    ListExpr,
    NameExpr,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RefExpr,
    SliceExpr,
    StarExpr,
    Statement,
    TupleExpr,
    WithStmt,
)
from mypy.server.subexpr import get_subexpressions

from ..engine.ops import FOREACH_PREFIX, FUSED_OPS
from .global_calls import size_names
from .statements import statement_blocks

_FIXED: dict[int, tuple[FuncDef, Block, dict[str, ListExpr]]] = {}

# calls that read a list as it is (its items, its length) and keep no reference to it
# but an iterator's: the list's positional arguments (zip's columns, enumerate's and len's one)
_READERS = frozenset(("builtins.zip", "builtins.enumerate", "builtins.len"))
# calls through which a function's locals can be changed unseen
_LOCALS_ACCESS = frozenset(("builtins.locals", "builtins.vars", "builtins.exec", "builtins.eval"))


def fixed_list(func: FuncDef, name: str) -> ListExpr | None:
    """The display local ``name`` of ``func`` holds, where its items are certain to be that
    display's in order (module docstring), else None."""
    cached = _FIXED.get(id(func))
    if cached is None or cached[0] is not func or cached[1] is not func.body:
        try:
            found = _fixed_lists(func)
        except Exception:  # noqa: BLE001 - never crash mypy: no list is known
            found = {}
        if len(_FIXED) > 10_000:  # bound the memory of a long-lived daemon
            _FIXED.clear()
        _FIXED[id(func)] = (func, func.body, found)
        return found.get(name)
    return cached[2].get(name)


def _fixed_lists(func: FuncDef) -> dict[str, ListExpr]:
    bindings = size_names(func).bindings  # empty for a function with a match statement
    displays: dict[str, ListExpr] = {}
    allowed: set[int] = set()  # the mentions that read a candidate as it is
    stores: set[int] = set()  # subscripts written (assignment, augmented, del, loop targets)
    nested: list[Statement] = []
    _statements(func.body.body, displays, allowed, stores, nested)
    candidates = {n: d for n, d in displays.items() if bindings.get(n) == 1}
    if not candidates:
        return {}
    subs = get_subexpressions(func.body)
    hidden: set[int] = set()  # mentions inside nested functions and lambdas
    for st in nested:
        hidden.update(id(e) for e in get_subexpressions(st))
    for sub in subs:  # comprehensions' targets first: ``[... for xs[0] in ys]`` writes xs[0]
        if isinstance(sub, (GeneratorExpr, DictionaryComprehension)):
            for index in sub.indices:
                _stored(index, stores)
    for sub in subs:
        if isinstance(sub, CallExpr) and isinstance(sub.callee, RefExpr):
            callee = sub.callee.fullname or ""
            if callee in _LOCALS_ACCESS:
                return {}
            last = callee.rsplit(".", 1)[-1]
            if callee in _READERS:
                if callee == "builtins.zip":
                    allowed.update(id(a) for a, k in zip(sub.args, sub.arg_kinds) if k == ARG_POS)
                elif sub.args and sub.arg_kinds[0] == ARG_POS and (
                        len(sub.args) == 1 or callee == "builtins.enumerate"):
                    allowed.add(id(sub.args[0]))  # enumerate(xs, 1): xs, not the start
            elif callee.startswith("torch.") and (last.startswith(FOREACH_PREFIX) or last in FUSED_OPS):
                allowed.update(id(a) for a in sub.args)
        elif isinstance(sub, (GeneratorExpr, DictionaryComprehension)):
            allowed.update(id(s) for s in sub.sequences)
        elif isinstance(sub, IndexExpr) and id(sub) not in stores and not isinstance(sub.index, SliceExpr):
            allowed.add(id(sub.base))  # an item read: the list as it is
        elif isinstance(sub, LambdaExpr):
            hidden.update(id(e) for e in get_subexpressions(sub.body))
    for sub in subs:
        if (isinstance(sub, NameExpr) and sub.name in candidates
                and (id(sub) not in allowed or id(sub) in hidden)):
            del candidates[sub.name]
    return candidates


def _statements(stmts: list[Statement], displays: dict[str, ListExpr], allowed: set[int],
                stores: set[int], nested: list[Statement]) -> None:
    """The walk of a function's own statements: its displays bound to a name (the target
    allowed), loop iterables (allowed), subscripts written, nested definitions."""
    for st in stmts:
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                _stored(lv, stores)
            if len(st.lvalues) == 1:  # ``a = b = [x]``: two names of one list, not known
                _displays(st.lvalues[0], st.rvalue, displays, allowed)
        elif isinstance(st, OperatorAssignmentStmt):
            _stored(st.lvalue, stores)
        elif isinstance(st, DelStmt):
            _stored(st.expr, stores)
        elif isinstance(st, ForStmt):
            _stored(st.index, stores)
            allowed.add(id(st.expr))
        elif isinstance(st, WithStmt):
            for t in st.target:
                _stored(t, stores)
        elif isinstance(st, (FuncDef, Decorator, OverloadedFuncDef, ClassDef)):
            nested.append(st)
        for block in statement_blocks(st):
            _statements(block, displays, allowed, stores, nested)


def _displays(target: Expression, value: Expression, displays: dict[str, ListExpr],
              allowed: set[int]) -> None:
    """``name = [a, b]``, or such names assigned in parallel (``ps, gs = [a], [g]``)."""
    if isinstance(target, NameExpr) and isinstance(value, ListExpr):
        if not any(isinstance(i, StarExpr) for i in value.items):
            displays[target.name] = value
            allowed.add(id(target))
    elif (isinstance(target, (TupleExpr, ListExpr)) and isinstance(value, (TupleExpr, ListExpr))
            and len(target.items) == len(value.items)
            and not any(isinstance(i, StarExpr) for i in target.items + value.items)):
        for t, v in zip(target.items, value.items):
            _displays(t, v, displays, allowed)


def _stored(target: Expression | None, stores: set[int]) -> None:
    """The subscripts an assignment/``del``/loop target writes."""
    if isinstance(target, IndexExpr):
        stores.add(id(target))
    elif isinstance(target, (TupleExpr, ListExpr)):
        for item in target.items:
            _stored(item, stores)
    elif isinstance(target, StarExpr):
        _stored(target.expr, stores)
