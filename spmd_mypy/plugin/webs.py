"""Independent bindings of a local are variables of their own (``rewrite.rename_redefinitions``,
section 2).

mypy's renamer makes a name assigned again *in the same block* a new variable; bindings in
different blocks stay one variable, typed by the first, even where no value flows from one
to the other::

    if how == "index_copy":
        flat = txt.reshape(-1, H)            # S(0)
        return flat.index_copy(0, idx, img).view_as(txt)
    if how == "scatter":
        flat = txt.reshape(-1, H).scatter(0, idx, img)   # V: [assignment] on correct code
        return flat.view_as(txt)

    x = a * 2                                # S(0)
    if c:
        x = b + 1                            # V: [assignment]; x is rebound before any read
        return x
    return x

Here a function's bindings of a name are split into *webs*, as a register allocator does: a
read joins every binding that may reach it (reaching definitions over the function's
structured control flow: branches, loops with ``break``/``continue``, ``return``/``raise``,
``with`` and ``try`` as if any statement of their body may be the last one run), and each
web of bindings and reads joined so gets a name of its own (``x'``, as mypy's renamer spells
a new variable).  No read can see two webs, so each is typed on its own; a read that two
bindings may reach keeps them one variable (mypy's ``[assignment]`` error where their types
differ: an ``S(0)`` binding joined by a ``V`` one is such a case, the name would be read as
``S(0)`` where it may hold a ``V``).  The web with a parameter, else the one bound first,
keeps the name.

Not split (one variable, as mypy has it): a name a nested function, class, lambda or
comprehension mentions, one an annotation declares, one bound by a walrus, ``global``,
``nonlocal``, an import, ``del`` or an ``except ... as``; one a ``finally`` body binds;
``self`` and ``cls``; any name of a function with a ``match`` statement or a call of
``locals``/``vars``/``eval``/``exec``.  Only for modules that leave redefinition to the plugin
(mypy's renamer applies there).  A local read only inside a type (a local alias in a
``cast``) is not seen as read: as with mypy's renamer, such a name may be split.
"""

from __future__ import annotations

from typing import Final

from mypy.nodes import (
    AssertStmt,
    AssignmentExpr,
    AssignmentStmt,
    Block,
    BreakStmt,
    CallExpr,
    ClassDef,
    ContinueStmt,
    Decorator,
    DelStmt,
    DictionaryComprehension,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    GeneratorExpr,
    GlobalDecl,
    IfStmt,
    Import,
    ImportAll,
    ImportFrom,
    LambdaExpr,
    ListComprehension,
    SetComprehension,
    ListExpr,
    MemberExpr,
    IndexExpr,
    NameExpr,
    Node,
    NonlocalDecl,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    PassStmt,
    RaiseStmt,
    ReturnStmt,
    StarExpr,
    Statement,
    TempNode,
    TryStmt,
    TupleExpr,
    WhileStmt,
    WithStmt,
)
from mypy.server.subexpr import get_subexpressions

from .statements import each_function, rename_fresh, statement_blocks

# calls that read a function's locals by name: its names are left alone
_INTROSPECTION: Final = frozenset({"locals", "vars", "eval", "exec"})

# expressions with a scope of their own (their targets; a lambda's or generator's reads run later)
_SCOPES: Final = (LambdaExpr, GeneratorExpr, ListComprehension, SetComprehension,
                  DictionaryComprehension)

_SCOPE_CLASSES: Final = frozenset(_SCOPES)
_NameExpr: Final = NameExpr
_MemberExpr: Final = MemberExpr
_AssignmentExpr: Final = AssignmentExpr
_CallExpr: Final = CallExpr

# name -> the binding nodes (ids) that may hold its value here; None: this point is not
# reached (after return, raise, break, continue)
State = dict[str, set[int]]


def own_webs(defs: list[Statement]) -> None:
    """Split the independent bindings of the functions of ``defs`` (methods and nested
    functions included), as the module docstring says."""
    each_function(defs, _function)


def _function(f: FuncDef) -> None:
    walk = _Walk()
    counts: dict[str, int] = {a.variable.name: 1 for a in f.arguments}
    _count_bindings(f.body.body, counts, walk.nested)
    walk.names = {n for n, k in counts.items() if k > 1}
    walk.all_bound = set(counts)
    if not walk.names:  # no name bound twice (mypy's renamer took those of one block)
        each_function(walk.nested, _function)
        return
    walk.nested.clear()  # found again by the walk
    try:
        state: State = {}
        for a in f.arguments:
            node = a.variable
            walk.parent[id(node)] = id(node)
            walk.params[a.variable.name] = id(node)
            state[a.variable.name] = {id(node)}
        walk.block(f.body.body, state)
    except _NotKnown:
        pass
    else:
        walk.rename()
    each_function(walk.nested, _function)  # each nested function is a scope of its own


class _NotKnown(Exception):
    """A function whose names this pass does not follow."""


def _copy(s: State | None) -> State | None:
    if s is None:
        return None
    return {k: set(v) for k, v in s.items()}


def _join(a: State | None, b: State | None) -> State | None:
    """The state where paths with states ``a`` and ``b`` meet (``a`` not changed)."""
    if a is None:
        return _copy(b)
    if b is None:
        return _copy(a)
    out: State = {k: set(v) for k, v in a.items()}
    _add(out, b)
    return out


def _add(into: State, s: State) -> None:
    """Every binding of ``s`` into ``into``, by name (``s`` not changed)."""
    for k, v in s.items():
        got = into.get(k)
        if got is None:
            into[k] = set(v)
        else:
            got.update(v)


class _Loop:
    def __init__(self) -> None:
        self.breaks: State | None = None
        self.continues: State | None = None


class _Walk:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}  # union-find over binding and read nodes (ids)
        self.nodes: dict[int, NameExpr] = {}  # the NameExpr nodes, by id
        self.order: dict[int, int] = {}  # a binding's place in the text (first visit)
        self.params: dict[str, int] = {}
        self.bound: dict[str, list[int]] = {}  # a name's binding nodes, in text order
        self.blocked: set[str] = {"self", "cls"}  # binding a method's receiver: left alone
        self.nested: list[Statement] = []
        self.loops: list[_Loop] = []
        self.catchers: list[State] = []  # with / try bodies: every state met inside
        self.names: set[str] = set()  # the names bound twice: the only ones followed
        self.all_bound: set[str] = set()  # every name bound (a fresh name is none of them)

    # --- union-find ---
    def _find(self, k: int) -> int:
        root = k
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[k] != root:
            nxt = self.parent[k]
            self.parent[k] = root
            k = nxt
        return root

    def _union(self, a: int, b: int) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self.parent[ra] = rb

    def _node(self, e: NameExpr) -> int:
        k = id(e)
        if k not in self.parent:
            self.parent[k] = k
            self.nodes[k] = e
        return k

    # --- reads and bindings ---
    def _caught(self, state: State | None) -> None:
        if state is None:
            return
        for c in self.catchers:
            _add(c, state)

    def read(self, e: Node | None, state: State) -> None:
        """The names ``e`` reads join the bindings that reach them."""
        if e is None:
            return
        found = get_subexpressions(e)
        scoped = False
        for sub in found:
            # by exact class (mypy's expression classes are not subclassed; an isinstance of
            # one is a generic call): the common names and attributes fall through at once
            cls = type(sub)
            if cls is _NameExpr or cls is _MemberExpr:
                continue
            if cls in _SCOPE_CLASSES:
                scoped = True
            elif type(sub) is _AssignmentExpr:
                self.blocked.update(_target_names(sub.target))
            elif type(sub) is _CallExpr and type(sub.callee) is _NameExpr and (
                    sub.callee.name in _INTROSPECTION):
                raise _NotKnown()
        if scoped:  # a nested scope's names (its targets, lazy reads): one variable each
            for sub in found:
                if isinstance(sub, _SCOPES):
                    self.blocked.update(n.name for n in get_subexpressions(sub)
                                        if isinstance(n, NameExpr))
                    if isinstance(sub, LambdaExpr):
                        self.blocked.update(a.variable.name for a in sub.arguments)
        for sub in found:
            if type(sub) is _NameExpr:
                self._use(sub, state)

    def _use(self, e: NameExpr, state: State) -> None:
        if e.name not in self.names:
            return
        reaching = state.get(e.name)
        if reaching:
            k = self._node(e)
            for d in reaching:
                self._union(k, d)

    def bind(self, target: Expression, state: State) -> None:
        """``target`` binds its names (and reads the bases of its items and attributes)."""
        if isinstance(target, NameExpr):
            if target.name not in self.names:
                return
            k = self._node(target)
            if k not in self.order:
                self.order[k] = len(self.order)
                self.bound.setdefault(target.name, []).append(k)
            state[target.name] = {k}
        elif isinstance(target, (TupleExpr, ListExpr)):
            for item in target.items:
                self.bind(item, state)
        elif isinstance(target, StarExpr):
            self.bind(target.expr, state)
        elif isinstance(target, (MemberExpr, IndexExpr)):
            self.read(target, state)
        else:
            raise _NotKnown()

    # --- statements ---
    def block(self, stmts: list[Statement], state: State | None) -> State | None:
        self._caught(state)
        for st in stmts:
            if state is None:
                break  # unreached: mypy does not check it either
            state = self.stmt(st, state)
            self._caught(state)
        return state

    def stmt(self, st: Statement, state: State) -> State | None:
        if type(st) is AssignmentStmt:
            self.read(st.rvalue, state)
            if st.type is not None or st.unanalyzed_type is not None or isinstance(
                    st.rvalue, TempNode):
                for lv in st.lvalues:
                    self.blocked.update(_target_names(lv))
            for lv in st.lvalues:
                self.bind(lv, state)
            return state
        if type(st) is OperatorAssignmentStmt:
            self.read(st.rvalue, state)
            self.read(st.lvalue, state)  # the name read and bound is one node: one web
            if isinstance(st.lvalue, NameExpr):
                self.bind(st.lvalue, state)
            return state
        if (type(st) is ExpressionStmt or type(st) is AssertStmt):
            self.read(st.expr, state)
            if type(st) is AssertStmt:
                self.read(st.msg, state)
            return state
        if type(st) is ReturnStmt:
            self.read(st.expr, state)
            self._caught(state)
            return None
        if type(st) is RaiseStmt:
            self.read(st.expr, state)
            self.read(st.from_expr, state)
            self._caught(state)
            return None
        if (type(st) is BreakStmt or type(st) is ContinueStmt):
            if not self.loops:
                raise _NotKnown()
            loop = self.loops[-1]
            if type(st) is BreakStmt:
                loop.breaks = _join(loop.breaks, state)
            else:
                loop.continues = _join(loop.continues, state)
            return None
        if type(st) is PassStmt:
            return state
        if type(st) is IfStmt:
            out: State | None = None
            for e, b in zip(st.expr, st.body):
                self.read(e, state)
                out = _join(out, self.block(b.body, _copy(state)))
            if st.else_body is not None:
                out = _join(out, self.block(st.else_body.body, _copy(state)))
            else:
                out = _join(out, state)
            return out
        if (type(st) is ForStmt or type(st) is WhileStmt):
            return self._loop(st, state)
        if type(st) is WithStmt:
            for e in st.expr:
                self.read(e, state)
            for t in st.target:
                if t is not None:
                    self.bind(t, state)
            # a manager may swallow an exception: any point inside
            end, catcher = self._guarded(st.body, state)
            return _join(end, catcher)
        if type(st) is TryStmt:
            return self._try(st, state)
        if type(st) is Block:
            return self.block(st.body, state)
        if (type(st) is FuncDef or type(st) is Decorator or type(st) is OverloadedFuncDef
                or type(st) is ClassDef):
            # a nested scope: every name it mentions may be this function's (a closure)
            self.nested.append(st)
            self.blocked.add(st.name)
            self.blocked.update(e.name for e in get_subexpressions(st) if isinstance(e, NameExpr))
            if type(st) is FuncDef:
                self.blocked.update(a.variable.name for a in st.arguments)
            return state
        if (type(st) is GlobalDecl or type(st) is NonlocalDecl):
            self.blocked.update(st.names)
            return state
        if type(st) is Import:
            self.blocked.update((alias or name).split(".")[0] for name, alias in st.ids)
            return state
        if type(st) is ImportFrom:
            self.blocked.update(alias or name for name, alias in st.names)
            return state
        if type(st) is DelStmt:
            self.blocked.update(_target_names(st.expr))
            self.read(st.expr, state)
            return state
        raise _NotKnown()  # match, import *, type aliases, anything new

    def _loop(self, st: ForStmt | WhileStmt, state: State) -> State | None:
        if isinstance(st, ForStmt):
            self.read(st.expr, state)
        entry: State = state
        for _ in range(100):
            loop = _Loop()
            self.loops.append(loop)
            try:
                head = _copy(entry)
                assert head is not None
                if isinstance(st, WhileStmt):
                    self.read(st.expr, head)
                else:
                    self.bind(st.index, head)
                end = self.block(st.body.body, head)
            finally:
                self.loops.pop()
            again = _join(_join(entry, end), loop.continues)
            assert again is not None
            if again == entry:
                break
            entry = again
        else:
            raise _NotKnown()
        if isinstance(st, WhileStmt):
            self.read(st.expr, entry)
        out = entry
        if st.else_body is not None:
            after = self.block(st.else_body.body, _copy(entry))
            return _join(after, loop.breaks)
        return _join(out, loop.breaks)

    def _guarded(self, body: Block, state: State) -> tuple[State | None, State]:
        """``body`` walked from ``state`` with a catcher that collects the state at every
        point an exception may leave it (:meth:`_caught`; a ``with`` manager's swallow, a
        ``try``'s handlers): (the state at its end, the catcher)."""
        catcher = _copy(state)
        assert catcher is not None
        self.catchers.append(catcher)
        try:
            end = self.block(body.body, _copy(state))
        finally:
            self.catchers.pop()
        return end, catcher

    def _try(self, st: TryStmt, state: State) -> State | None:
        for v in st.vars:
            if v is not None:
                self.blocked.add(v.name)
        end, catcher = self._guarded(st.body, state)
        # the handlers and ``finally`` may start from any point of the body; ``else`` and
        # the handlers may raise too, and every path (a return's, a break's) runs ``finally``
        everywhere = _copy(catcher)
        assert everywhere is not None
        self.catchers.append(everywhere)
        try:
            if st.else_body is not None:
                end = self.block(st.else_body.body, end)
            for tp, handler in zip(st.types, st.handlers):
                self.read(tp, catcher)
                end = _join(end, self.block(handler.body, _copy(catcher)))
        finally:
            self.catchers.pop()
        if st.finally_body is None:
            return end
        self.blocked.update(_bound_names(st.finally_body.body))
        start = _join(everywhere, end)
        assert start is not None
        after = self.block(st.finally_body.body, start)
        return None if end is None else after

    # --- renaming ---
    def rename(self) -> None:
        plan: list[tuple[list[NameExpr], str]] = []
        for name, binds in self.bound.items():
            if name in self.blocked:
                continue
            webs: dict[int, list[int]] = {}  # root -> its binding nodes, in text order
            for k in binds:
                webs.setdefault(self._find(k), []).append(k)
            param = self.params.get(name)
            if param is not None:
                webs.setdefault(self._find(param), [])
            if len(webs) < 2:
                continue
            keep = self._find(param) if param is not None else self._find(binds[0])
            members: dict[int, list[NameExpr]] = {r: [] for r in webs if r != keep}
            for k, e in self.nodes.items():
                if e.name != name:
                    continue
                got = members.get(self._find(k))
                if got is not None:
                    got.append(e)
            for exprs in members.values():
                plan.append((exprs, name))
        if not plan:
            return
        used = self.all_bound | self.blocked | set(self.params)
        rename_fresh(plan, used)


def _target_names(target: Expression) -> list[str]:
    if isinstance(target, NameExpr):
        return [target.name]
    if isinstance(target, (TupleExpr, ListExpr)):
        return [n for item in target.items for n in _target_names(item)]
    if isinstance(target, StarExpr):
        return _target_names(target.expr)
    return []


def _count_bindings(stmts: list[Statement], counts: dict[str, int],
                    nested: list[Statement]) -> None:
    """How many times each name is bound by an assignment, loop or ``with`` of ``stmts``
    (nested blocks included; ``nested``: the nested definitions met)."""
    for st in stmts:
        names: list[str] = []
        if type(st) is AssignmentStmt:
            for lv in st.lvalues:
                names.extend(_target_names(lv))
        elif type(st) is ForStmt:
            names = _target_names(st.index)
        elif type(st) is WithStmt:
            for t in st.target:
                if t is not None:
                    names.extend(_target_names(t))
        elif type(st) is OperatorAssignmentStmt:
            names = _target_names(st.lvalue)
        elif (type(st) is FuncDef or type(st) is Decorator or type(st) is OverloadedFuncDef
              or type(st) is ClassDef):
            nested.append(st)
            continue
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        for b in statement_blocks(st):
            _count_bindings(b, counts, nested)


def _bound_names(stmts: list[Statement]) -> list[str]:
    """Every name an assignment, loop or ``with`` of ``stmts`` (nested blocks included)
    binds."""
    out: list[str] = []
    for st in stmts:
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                out.extend(_target_names(lv))
        elif isinstance(st, OperatorAssignmentStmt):
            out.extend(_target_names(st.lvalue))
        elif isinstance(st, ForStmt):
            out.extend(_target_names(st.index))
        elif isinstance(st, WithStmt):
            for t in st.target:
                if t is not None:
                    out.extend(_target_names(t))
        for b in statement_blocks(st):
            out.extend(_bound_names(b))
    return out
