"""The statement lists a compound statement holds, for the plugin's walks over function
bodies (boundaries, returns, assignments, constructors)::

    if c: A elif d: B else: C        ->  [A, B, C]
    for/while ...: A else: B         ->  [A, B]
    with ...: A                      ->  [A]
    try: A except: B else: C finally: D  ->  [A, B, C, D]
    match x: case p: A case q: B     ->  [A, B]

Nested definitions (functions, classes) are not compound statements here: each walk decides
whether to enter them.
"""

from __future__ import annotations

from typing import Callable, Final

from mypy.nodes import (
    AssertStmt,
    AssignmentStmt,
    BreakStmt,
    ContinueStmt,
    DelStmt,
    GlobalDecl,
    Import,
    ImportAll,
    ImportFrom,
    NonlocalDecl,
    OperatorAssignmentStmt,
    PassStmt,
    RaiseStmt,
    ExpressionStmt,
    Block,
    ClassDef,
    Expression,
    NameExpr,
    SymbolNode,
    TupleExpr,
    Decorator,
    ForStmt,
    FuncDef,
    IfStmt,
    MatchStmt,
    OverloadedFuncDef,
    ReturnStmt,
    Statement,
    TryStmt,
    WhileStmt,
    WithStmt,
)

# mypy's classes of the common simple statements, bound once (a Final module attribute is a C
# static to this compiled module; an imported name, a dict lookup at each use)
_AssignmentStmt: Final = AssignmentStmt
_ExpressionStmt: Final = ExpressionStmt
_ReturnStmt: Final = ReturnStmt
_Block: Final = Block
_ForStmt: Final = ForStmt
_IfStmt: Final = IfStmt
_MatchStmt: Final = MatchStmt
_TryStmt: Final = TryStmt
_WhileStmt: Final = WhileStmt
_WithStmt: Final = WithStmt
# the other statements without nested blocks (nested definitions are not compound here)
_NO_BLOCKS: Final = frozenset({
    AssertStmt, BreakStmt, ContinueStmt, DelStmt, GlobalDecl, Import, ImportAll, ImportFrom,
    NonlocalDecl, OperatorAssignmentStmt, PassStmt, RaiseStmt, FuncDef, Decorator,
    OverloadedFuncDef, ClassDef})

# a name's assignments in a function: (line, value, the item of a tuple target it takes, or -1)
Assignments = dict[SymbolNode, list[tuple[int, Expression, int]]]


# assignments_by_name's results: (the function, its body, the result, its first assigned
# name and the node it was bound to), by the function's id
_ASSIGNED: Final[dict[int, tuple[FuncDef, Block, Assignments, "NameExpr | None", "SymbolNode | None"]]] = {}


def statement_blocks(st: Statement) -> list[list[Statement]]:
    """The statement lists nested in a compound statement (not in nested definitions)."""
    cls = type(st)
    if cls is _AssignmentStmt or cls is _ExpressionStmt or cls is _ReturnStmt:
        return []  # the common simple statements first, by exact class (mypy's, never subclassed)
    # the compound ones by exact class too (an isinstance of a mypy class is a generic call)
    if type(st) is _IfStmt:
        return [b.body for b in st.body] + ([st.else_body.body] if st.else_body else [])
    if type(st) is _ForStmt or type(st) is _WhileStmt:
        return [st.body.body] + ([st.else_body.body] if st.else_body else [])
    if type(st) is _WithStmt:
        return [st.body.body]
    if cls in _NO_BLOCKS:
        return []
    if isinstance(st, _IfStmt):
        return [b.body for b in st.body] + ([st.else_body.body] if st.else_body else [])
    if isinstance(st, (_ForStmt, _WhileStmt)):
        return [st.body.body] + ([st.else_body.body] if st.else_body else [])
    if isinstance(st, _WithStmt):
        return [st.body.body]
    if isinstance(st, _TryStmt):
        return ([st.body.body] + [h.body for h in st.handlers]
                + [b.body for b in (st.else_body, st.finally_body) if b is not None])
    if isinstance(st, _MatchStmt):
        return [b.body for b in st.bodies]
    if isinstance(st, _Block):
        return [st.body]
    return []


def nested_statements(stmts: list[Statement]) -> list[Statement]:
    """Every statement of a body, those in its compound statements' blocks included (not
    those of nested functions or classes), in order."""
    out: list[Statement] = []
    for st in stmts:
        out.append(st)
        for body in statement_blocks(st):
            out.extend(nested_statements(body))
    return out


def returns(stmts: list[Statement]) -> list[ReturnStmt]:
    """The return statements of a function body (not of nested functions or classes)."""
    return [st for st in nested_statements(stmts) if isinstance(st, ReturnStmt)]


def functions_of(st: Statement) -> list[FuncDef]:
    """The functions a definition statement holds (a decorated one's, an overload's items)."""
    if isinstance(st, FuncDef):
        return [st]
    if isinstance(st, Decorator):
        return [st.func]
    if isinstance(st, OverloadedFuncDef):
        return [i.func if isinstance(i, Decorator) else i for i in st.items
                if isinstance(i, (FuncDef, Decorator))]
    return []


def each_function(defs: list[Statement], visit: Callable[[FuncDef], None]) -> None:
    """``visit`` each function ``defs`` define: module-level functions, the methods of their
    classes (nested classes too), a decorated function's and an overload's items."""
    for d in defs:
        if isinstance(d, ClassDef):
            each_function(d.defs.body, visit)
        else:
            for f in functions_of(d):
                visit(f)


def assignments_by_name(func: FuncDef) -> Assignments:
    """The single-target assignments of ``func``'s body and its compound statements, by the
    bound name's node, in source order: ``h = x.argmax(-1)`` as (line, value, -1), and each
    name of a tuple target, ``vals, idx = x.max(-1)``, as (line, value, its position).

    Computed once per function body (the hooks of one function ask again and again; callers
    only read it): kept by the function's id, checked by the identity of the function, of its
    body, and of the node its first assigned name is bound to (the daemon re-analyses a
    function in place, binding its locals to new nodes: then computed again)."""
    cached = _ASSIGNED.get(id(func))
    if cached is not None and cached[0] is func and cached[1] is func.body and (
            cached[3] is None or cached[3].node is cached[4]):
        return cached[2]
    assigned: Assignments = {}
    first: NameExpr | None = None
    for st in nested_statements(func.body.body):
        if isinstance(st, AssignmentStmt) and len(st.lvalues) == 1:
            lv = st.lvalues[0]
            if isinstance(lv, NameExpr) and lv.node is not None:
                assigned.setdefault(lv.node, []).append((st.line, st.rvalue, -1))
                if first is None:
                    first = lv
            elif isinstance(lv, TupleExpr):
                for k, item in enumerate(lv.items):
                    if isinstance(item, NameExpr) and item.node is not None:
                        assigned.setdefault(item.node, []).append((st.line, st.rvalue, k))
                        if first is None:
                            first = item
    if len(_ASSIGNED) > 10_000:
        _ASSIGNED.clear()
    _ASSIGNED[id(func)] = (func, func.body, assigned, first, first.node if first is not None else None)
    return assigned


# how many quotes a fresh name may take before a rename is given up (a name taken that often)
_MAX_QUOTES: Final = 50


def rename_fresh(plan: list[tuple[list[NameExpr], str]], used: set[str]) -> None:
    """Give each group of occurrences in ``plan`` (occurrences, their name) a fresh name: the
    name with quotes added (``x'``, ``x''``) until one is not in ``used``; each name given is
    added to ``used``.  A group that finds none within ``_MAX_QUOTES`` keeps its name.  Shared
    by the loop renamer (loop_names) and the independent-bindings renamer (webs)."""
    for exprs, n in plan:
        fresh = n
        for _ in range(_MAX_QUOTES):
            fresh += "'"
            if fresh not in used:
                break
        else:
            continue
        used.add(fresh)
        for e in exprs:
            e.name = fresh
