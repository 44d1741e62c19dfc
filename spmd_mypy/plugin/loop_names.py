"""Each ``for`` loop's variables are its own (``rewrite.rename_redefinitions``, section 2).

mypy's renamer makes a name assigned again *in the same block* a new variable; a loop
variable reused by a later loop in another block (the usual shape of an optimizer step)
stays one variable, typed by its first binding::

    for p in (model.ln, model.w):            # p: the union of these
        g = p.grad
        ...
    with torch.no_grad():
        for mp, g in zip(masters, g_sh):     # [assignment]: g keeps p.grad's type
            ...
        for p, mp in zip(params, masters):   # [assignment], and p's pairing with mp lost
            p.copy_(mp)

Here a loop's target names get a name of their own (``p'``, as mypy's renamer spells a new
variable) over the loop's target and body when no value the loop binds can be read
elsewhere: every other occurrence of the name in the function is

- in the target or body of another ``for`` loop binding it that does not hold this loop
  (that loop's binding comes first), or
- before this loop, with no loop around both (so it never runs after this loop).

Not renamed: a name read after the loop (it may read the last item), in the loop's
``else``, in the iterable, or anywhere in a loop around it before this loop; a name a
nested function, class or lambda mentions, or ``global``/``nonlocal``/an import binds;
any name of a function with a ``match`` statement.  The renamed variable is the one the
loop binds, so its types are mypy's for that loop alone (with ``allow_redefinition`` the
loop narrows the name to the same types: renaming changes nothing there but the names the
plugin counts, which then say the name is bound once).  Costs one statement walk per
function that defines a name twice (only those reach here), and an expression walk only
when a loop variable is also bound elsewhere.
"""

from __future__ import annotations

from typing import Final, cast

from mypy.nodes import (
    AssignmentStmt,
    Block,
    ClassDef,
    Decorator,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    GlobalDecl,
    IfStmt,
    Import,
    ImportAll,
    ImportFrom,
    LambdaExpr,
    ListExpr,
    MatchStmt,
    NameExpr,
    Node,
    NonlocalDecl,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    ReturnStmt,
    StarExpr,
    Statement,
    TryStmt,
    TupleExpr,
    WhileStmt,
    WithStmt,
)
from mypy.server.subexpr import get_subexpressions

from .statements import each_function, rename_fresh, statement_blocks


# mypy's classes bound once (a C static in the compiled plugin: see rewrite.py)
_AssignmentStmt: Final = AssignmentStmt
_ClassDef: Final = ClassDef
_Decorator: Final = Decorator
_ExpressionStmt: Final = ExpressionStmt
_ForStmt: Final = ForStmt
_FuncDef: Final = FuncDef
_OperatorAssignmentStmt: Final = OperatorAssignmentStmt
_OverloadedFuncDef: Final = OverloadedFuncDef
_ReturnStmt: Final = ReturnStmt
_WithStmt: Final = WithStmt


def own_loop_variables(defs: list[Statement]) -> None:
    """Give each loop's variables their own names in the functions of ``defs`` (methods
    and nested functions included), as the module docstring says."""
    each_function(defs, _function)


def _function(f: FuncDef) -> None:
    body = f.body.body
    nested: list[Statement] = []
    if _reused_loop_names(body, nested):
        try:
            walk = _Walk()
            walk.block(body, (), ())
        except _NotKnown:
            walk = None
        if walk is not None:
            walk.rename({a.variable.name for a in f.arguments})
    each_function(nested, _function)  # each nested function is a scope of its own


def _reused_loop_names(stmts: list[Statement], nested: list[Statement]) -> bool:
    """Whether a name some ``for`` loop binds is bound twice in the function (a cheap walk
    over the statements; ``nested``: the nested definitions met, for their own pass)."""
    loop_names: set[str] = set()
    bound: set[str] = set()
    twice: set[str] = set()
    todo = list(stmts)
    while todo:
        st = todo.pop()
        cls = type(st)  # the exact class: mypy does not subclass its statements
        if cls is _ExpressionStmt or cls is _ReturnStmt:
            continue  # the most common statements: nothing bound, no block
        if cls is _FuncDef or cls is _Decorator or cls is _OverloadedFuncDef or cls is _ClassDef:
            nested.append(st)
            continue
        targets: list[Expression] = []
        if cls is _AssignmentStmt:
            targets = cast(AssignmentStmt, st).lvalues
        elif cls is _ForStmt:
            index = cast(ForStmt, st).index
            targets = [index]
            loop_names.update(_target_names(index))
        elif cls is _WithStmt:
            targets = [t for t in cast(WithStmt, st).target if t is not None]
        elif cls is _OperatorAssignmentStmt:
            targets = [cast(OperatorAssignmentStmt, st).lvalue]
        for t in targets:
            for name in _target_names(t):
                if name in bound:
                    twice.add(name)
                bound.add(name)
        for b in statement_blocks(st):
            todo.extend(b)
    return not loop_names.isdisjoint(twice)


def _target_names(target: Expression) -> list[str]:
    if isinstance(target, NameExpr):
        return [target.name]
    if isinstance(target, (TupleExpr, ListExpr)):
        return [n for item in target.items for n in _target_names(item)]
    if isinstance(target, StarExpr):
        return _target_names(target.expr)
    return []


class _NotKnown(Exception):
    """A function whose names this pass does not follow (a ``match`` statement)."""


class _Occurrence:
    def __init__(self, seq: int, expr: NameExpr, loops: tuple[int, ...],
                 bodies: tuple[int, ...]) -> None:
        self.seq = seq  # where in the function's text order
        self.expr = expr
        self.loops = loops  # the loops (for, while) it is in, any part
        self.bodies = bodies  # the for loops whose target or body it is in


class _Loop:
    def __init__(self, names: list[str], start: int, outer: tuple[int, ...]) -> None:
        self.names = names
        self.start = start  # the seq of its target
        self.outer = outer  # the loops around it


class _Walk:
    """A function's own names (not those of nested scopes), in text order, with the loops
    each is in."""

    def __init__(self) -> None:
        self.seq = 0
        self.names: dict[str, list[_Occurrence]] = {}
        self.loops: list[_Loop] = []
        self.blocked: set[str] = set()  # names of nested scopes, global, nonlocal, imports

    def block(self, stmts: list[Statement], loops: tuple[int, ...], bodies: tuple[int, ...]) -> None:
        for st in stmts:
            self.stmt(st, loops, bodies)

    def stmt(self, st: Statement, loops: tuple[int, ...], bodies: tuple[int, ...]) -> None:
        if isinstance(st, ForStmt):
            self.expr(st.expr, loops, bodies)
            k = len(self.loops)
            inner = loops + (k,)
            self.loops.append(_Loop(_target_names(st.index), self.seq + 1, loops))
            self.expr(st.index, inner, bodies + (k,))
            self.block(st.body.body, inner, bodies + (k,))
            if st.else_body is not None:
                self.block(st.else_body.body, inner, bodies)
        elif isinstance(st, WhileStmt):
            inner = loops + (len(self.loops),)
            self.loops.append(_Loop([], self.seq + 1, loops))
            self.expr(st.expr, inner, bodies)
            self.block(st.body.body, inner, bodies)
            if st.else_body is not None:
                self.block(st.else_body.body, inner, bodies)
        elif isinstance(st, IfStmt):
            for e, b in zip(st.expr, st.body):
                self.expr(e, loops, bodies)
                self.block(b.body, loops, bodies)
            if st.else_body is not None:
                self.block(st.else_body.body, loops, bodies)
        elif isinstance(st, WithStmt):
            for e in st.expr:
                self.expr(e, loops, bodies)
            for t in st.target:
                self.expr(t, loops, bodies)
            self.block(st.body.body, loops, bodies)
        elif isinstance(st, TryStmt):
            self.block(st.body.body, loops, bodies)
            for tp, var, handler in zip(st.types, st.vars, st.handlers):
                self.expr(tp, loops, bodies)
                self.expr(var, loops, bodies)
                self.block(handler.body, loops, bodies)
            for extra in (st.else_body, st.finally_body):
                if extra is not None:
                    self.block(extra.body, loops, bodies)
        elif isinstance(st, Block):
            self.block(st.body, loops, bodies)
        elif isinstance(st, (FuncDef, Decorator, OverloadedFuncDef, ClassDef)):
            # a nested scope: every name it mentions may be this function's (a closure)
            self.blocked.add(st.name)
            self.blocked.update(e.name for e in get_subexpressions(st) if isinstance(e, NameExpr))
        elif isinstance(st, (GlobalDecl, NonlocalDecl)):
            self.blocked.update(st.names)
        elif isinstance(st, Import):
            self.blocked.update((alias or name).split(".")[0] for name, alias in st.ids)
        elif isinstance(st, ImportFrom):
            self.blocked.update(alias or name for name, alias in st.names)
        elif isinstance(st, (MatchStmt, ImportAll)):
            raise _NotKnown()
        else:  # a simple statement: its expressions, lvalues included
            self.expr(st, loops, bodies)

    def expr(self, e: Node | None, loops: tuple[int, ...], bodies: tuple[int, ...]) -> None:
        if e is None:
            return
        self.seq += 1
        found = get_subexpressions(e)
        lambdas: set[int] = set()  # a lambda's names (its body's, its parameters') are a
        # nested scope's
        for sub in found:
            if isinstance(sub, LambdaExpr):
                self.blocked.update(a.variable.name for a in sub.arguments)
                for inner in get_subexpressions(sub.body):
                    if isinstance(inner, NameExpr):
                        self.blocked.add(inner.name)
                        lambdas.add(id(inner))
        for sub in found:
            if isinstance(sub, NameExpr) and (not lambdas or id(sub) not in lambdas):
                self.name(sub, loops, bodies)

    def name(self, e: NameExpr, loops: tuple[int, ...], bodies: tuple[int, ...]) -> None:
        self.names.setdefault(e.name, []).append(_Occurrence(self.seq, e, loops, bodies))

    def rename(self, parameters: set[str]) -> None:
        """Rename the names each loop owns (all decided before any is renamed)."""
        plan: list[tuple[list[NameExpr], str]] = []
        for k, loop in enumerate(self.loops):
            for n in dict.fromkeys(loop.names):
                if n in self.blocked:
                    continue
                own = self._owned(k, loop, n)
                if own:
                    plan.append((own, n))
        if not plan:
            return
        used = set(self.names) | self.blocked | parameters
        rename_fresh(plan, used)

    def _owned(self, k: int, loop: _Loop, n: str) -> list[NameExpr]:
        """The occurrences of ``n`` loop ``k`` binds, when no other occurrence can read
        its value (empty when one may, or when there is no other occurrence)."""
        inside: list[NameExpr] = []
        outside = False
        for o in self.names.get(n, ()):
            if k in o.bodies:
                inside.append(o.expr)
                continue
            outside = True
            # in the target or body of another loop binding n, not around this one
            if any(b != k and b not in loop.outer and n in self.loops[b].names for b in o.bodies):
                continue
            # before this loop, never after it (no loop around both)
            if o.seq < loop.start and not any(b in loop.outer for b in o.loops):
                continue
            return []
        return inside if outside else []
