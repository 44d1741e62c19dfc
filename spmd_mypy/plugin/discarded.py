"""Calls whose result the code drops, and locals a value was narrowed into (for fixes).

- :func:`is_statement_call`: the call is a statement of its own (``spmd.all_reduce(g, ...)``
  on its line: its result dropped; ``dist.all_reduce(g)``: the raw op writes ``g`` in place,
  so its typed fix must assign, ``g = spmd.all_reduce(g, ...)``).  The expression statements
  of the function being checked are collected once per function body.
- :func:`assign_target`: the text a fix may assign to (a name, an attribute, an item).
- :func:`narrowed_local`: the local of an assignment's value that holds what the target
  holds, narrowed (``g = p.grad; assert g is not None``: ``g``, not the Optional ``p.grad``).
"""

from __future__ import annotations

from typing import Any

from mypy.nodes import (
    AssignmentStmt,
    CallExpr,
    Expression,
    ExpressionStmt,
    IndexExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    Statement,
    TupleExpr,
)
from mypy.server.subexpr import get_subexpressions
from mypy.types import NoneType, Type, UnionType, get_proper_type

from .global_calls import current_function, size_names
from .mypy_types import lookup_type
from .statements import nested_statements
from .texts import code_text

# id(owner) -> (owner, its statement list, the ids of its expression statements' expressions)
_STATEMENT_CALLS: dict[int, tuple[object, list[Statement], frozenset[int]]] = {}


def _statement_exprs(owner: object, body: list[Statement]) -> frozenset[int]:
    cached = _STATEMENT_CALLS.get(id(owner))
    if cached is not None and cached[0] is owner and cached[1] is body:
        return cached[2]
    ids = frozenset(id(st.expr) for st in nested_statements(body)
                    if isinstance(st, ExpressionStmt) and isinstance(st.expr, CallExpr))
    if len(_STATEMENT_CALLS) > 10_000:
        _STATEMENT_CALLS.clear()
    _STATEMENT_CALLS[id(owner)] = (owner, body, ids)
    return ids


def is_statement_call(api: Any, call: object) -> bool:
    """``call`` is the whole expression of a statement (its result is dropped), in the
    function being checked, or at the module level."""
    if not isinstance(call, CallExpr):
        return False
    func = current_function(api)
    if func is not None:
        return id(call) in _statement_exprs(func, func.body.body)
    tree = getattr(api, "tree", None)
    if isinstance(tree, MypyFile):
        return id(call) in _statement_exprs(tree, tree.defs)
    return False


def errors_at(api: Any, call: object) -> bool:
    """An error was reported on ``call``'s lines (mypy's own, an argument's, the plugin's):
    a dropped result is reported only for a call that is otherwise right (its own error's
    fix rewrites the call: a missing argument, a wrong src=, "drop the call")."""
    if not isinstance(call, CallExpr):
        return False
    store = getattr(getattr(api, "msg", None), "errors", None)
    infos = getattr(store, "error_info_map", {}).get(getattr(store, "file", None)) or []
    last = call.end_line if call.end_line is not None else call.line
    return any(call.line <= i.line <= last and i.severity == "error" for i in infos)


def assign_target(e: Expression | None) -> str | None:
    """``e``'s text where an assignment can bind it (``g``, ``p.grad``, ``bufs[i]``)."""
    if isinstance(e, (NameExpr, MemberExpr, IndexExpr)):
        return code_text(e)
    return None


def _optional(typ: Type) -> bool:
    proper = get_proper_type(typ)
    if isinstance(proper, NoneType):
        return True
    return isinstance(proper, UnionType) and any(
        isinstance(get_proper_type(t), NoneType) for t in proper.items)


def narrowed_local(api: Any, target: Expression, value: Expression) -> str | None:
    """The name in ``value`` (an assignment's value, ``target = value``) of a local bound
    once to what ``target`` is (``g = m.w.grad``, or ``g1, g2 = m.w1.grad, m.w2.grad``) and
    not Optional where ``value`` reads it (narrowed: ``assert g is not None``); else None."""
    func = current_function(api)
    if func is None:
        return None
    want = code_text(target)
    found = [e for e in get_subexpressions(value) if isinstance(e, NameExpr)]
    if not found:
        return None
    facts = size_names(func)
    for n in found:
        name = n.name
        if facts.bindings.get(name, 0) != 1:
            continue
        bound = _bound_value(func.body.body, name)
        if bound is None or code_text(bound) != want:
            continue
        typ = lookup_type(api, n)
        if typ is None or _optional(typ):
            continue
        return name.rstrip("'")
    return None


def _bound_value(body: list[Statement], name: str) -> Expression | None:
    """The value ``name`` is bound to by an assignment of ``body`` (``name = v`` or an item of
    ``a, name = u, v``), the first such one."""
    for st in nested_statements(body):
        if not isinstance(st, AssignmentStmt) or len(st.lvalues) != 1:
            continue
        lv, rv = st.lvalues[0], st.rvalue
        if isinstance(lv, NameExpr) and lv.name == name:
            return rv
        if isinstance(lv, TupleExpr) and isinstance(rv, TupleExpr) and len(lv.items) == len(rv.items):
            for item, v in zip(lv.items, rv.items):
                if isinstance(item, NameExpr) and item.name == name:
                    return v
    return None
