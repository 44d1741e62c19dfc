"""Boundaries: a value that meets a declared type at a ``return`` or an assignment.

mypy 2.4.1 has no plugin hook on return-value or assignment compatibility, so a mismatch
there used to be mypy's own ``[return-value]`` / ``[assignment]`` error printing the
canonical form (``Tensor[Any, P[Literal['tp']]]``) without a fix.  Arguments already are
``spmd-mismatch`` errors with the collective that fixes them; boundaries get the same::

    def f(x: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
        return x        # spmd-mismatch: ... use all_reduce(x, "tp", src=P, dst=R)

How.  Before mypy checks a function body, the value at each boundary is wrapped in a
synthetic call the plugin owns::

    return x            ->  return isinstance(__spmd_boundary__=x)
    y: T = x            ->  y: T = isinstance(__spmd_boundary__=x)
    self.w = x          ->  self.w = isinstance(__spmd_boundary__=x)   (w declared in the class)

``isinstance`` is a builtin, so the name resolves in every module without an import; the
keyword ``__spmd_boundary__`` (no real call has it) marks the call structurally, so the mark
survives incremental runs and dmypy re-analysis, and a re-run of the rewrite is a no-op.
The call keeps the value's line and column.  At check time mypy evaluates the call in the
boundary's type context (the declared type): the signature hook hands mypy
``(x: <declared with typed tensors relaxed to torch.Tensor>) -> <declared>``, so the value is
inferred in its usual context; the call hook compares the value's SPMD type with the declared
one per axis (:func:`spmd_mypy.engine.collectives.check_argument`, the rule arguments use)
and reports ``spmd-mismatch``; it then returns the declared type, so mypy reports nothing
more for the same mistake.  Anything that is not an SPMD mismatch (``return 3`` where a
tensor is declared, a wrong non-tensor tuple item) makes the call return the value's own
type, and mypy reports its usual error; the synthetic call's own argument errors are
filtered out (they name ``__spmd_boundary__``), so no message shows the call.

Where.  Only in modules that import spmd, only inside functions, and only where the
declared type may hold a tensor (an annotation naming something other than builtins and
typing constructs): returns of functions with such a return annotation, annotated
assignments, later plain assignments to such annotated locals, and ``self.<attr> = ...``
to attributes annotated in the class.  Values that cannot be tensors (literals, displays,
``None``) are left alone; so are lambdas, ``-> None`` and ``-> Any`` functions (mypy lets
them ``return f()`` of a None-returning ``f``), and module or class level assignments
(aliases, dataclass fields).

The rewrite runs on each parsed file (``get_additional_deps``) and again during semantic
analysis (the first annotation ``Tensor[...]`` of a module, and each class), because mypy
re-parses a module re-checked only for a changed dependency without that hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mypy.errors import ErrorInfo, ErrorWatcher
from mypy.nodes import (
    ARG_NAMED,
    GDEF,
    AssignmentStmt,
    Block,
    BytesExpr,
    CallExpr,
    ClassDef,
    ComplexExpr,
    Decorator,
    DictExpr,
    DictionaryComprehension,
    EllipsisExpr,
    Expression,
    FloatExpr,
    ForStmt,
    FuncDef,
    GeneratorExpr,
    IfStmt,
    IntExpr,
    LambdaExpr,
    ListComprehension,
    ListExpr,
    MatchStmt,
    MemberExpr,
    MypyFile,
    NameExpr,
    OverloadedFuncDef,
    ReturnStmt,
    SetComprehension,
    SetExpr,
    Statement,
    StrExpr,
    TempNode,
    TryStmt,
    TupleExpr,
    WhileStmt,
    WithStmt,
    YieldExpr,
    YieldFromExpr,
)
from mypy.plugin import FunctionContext, FunctionSigContext
from mypy.subtypes import is_subtype
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    TupleType,
    Type,
    TypeOfAny,
    UnboundType,
    UnionType,
    get_proper_type,
)

from ..engine import collectives as coll
from ..engine.errors import SpmdError
from .calls import expr_text
from .rewrite import rename_redefinitions

if TYPE_CHECKING:
    from . import SpmdPlugin

MARK = "__spmd_boundary__"
_RETURN = MARK  # the keyword of a wrapped return value
_ASSIGN = MARK + " "  # + the target's text: the keyword of a wrapped assigned value

# Names in an annotation that never make it hold a tensor: builtins and typing constructs.
_PLAIN_NAMES = frozenset(
    """None Any int float str bool bytes bytearray complex object list dict set frozenset
    tuple List Dict Set FrozenSet Tuple DefaultDict OrderedDict Counter Deque deque defaultdict
    Optional Union Sequence MutableSequence Mapping MutableMapping Iterable Iterator
    Generator AsyncIterator AsyncIterable AsyncGenerator Awaitable Coroutine Callable Literal
    type Type NoReturn Never Self TypeGuard TypeIs range slice LiteralString Annotated
    Hashable Sized Container Collection AbstractSet KeysView ValuesView ItemsView""".split())
_NO_WRAP_HEADS = frozenset({"Final", "ClassVar", "TypeAlias", "InitVar"})
_NOT_VALUES = (IntExpr, StrExpr, BytesExpr, FloatExpr, ComplexExpr, EllipsisExpr, TempNode,
               ListExpr, DictExpr, SetExpr, ListComprehension, SetComprehension,
               DictionaryComprehension, GeneratorExpr, LambdaExpr, YieldExpr, YieldFromExpr)
_CONSTANTS = frozenset({"None", "True", "False", "NotImplemented", "Ellipsis", "__debug__"})


# --- the rewrite ------------------------------------------------------------------------------


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def may_hold_tensor(t: object) -> bool:
    """An unanalysed annotation that names something beyond builtins and typing constructs
    (``Tensor[...]``, an alias such as ``Act``, a class)."""
    if isinstance(t, CallableType):
        return any(may_hold_tensor(a) for a in t.arg_types) or may_hold_tensor(t.ret_type)
    if isinstance(t, UnboundType):
        if t.original_str_expr is not None and not t.args:
            return False  # an axis string
        if _short(t.name) not in _PLAIN_NAMES:
            return True
        return any(may_hold_tensor(a) for a in t.args)
    items = getattr(t, "items", None)
    if isinstance(items, list):
        return any(may_hold_tensor(i) for i in items)
    return False


def _head(t: object) -> str:
    return _short(t.name) if isinstance(t, UnboundType) else ""


def is_wrapped(e: Expression | None) -> bool:
    return (isinstance(e, CallExpr) and len(e.arg_names) == 1
            and (e.arg_names[0] or "").startswith(MARK))


def unwrap(e: Expression | None) -> Expression | None:
    """The user's expression inside a synthetic boundary call (or ``e`` itself)."""
    return e.args[0] if is_wrapped(e) else e  # type: ignore[union-attr]


def _wrappable(e: Expression | None) -> bool:
    if e is None or isinstance(e, _NOT_VALUES) or is_wrapped(e):
        return False
    return not (isinstance(e, NameExpr) and e.name in _CONSTANTS)


class _Rewriter:
    def __init__(self, isinstance_node: object | None) -> None:
        self.node = isinstance_node
        self.count = 0

    def wrap(self, e: Expression, keyword: str) -> CallExpr:
        callee = NameExpr("isinstance")
        if self.node is not None:  # bound already: a body semantic analysis has passed
            callee.node = self.node  # type: ignore[assignment]
            callee.fullname = "builtins.isinstance"
            callee.kind = GDEF
        call = CallExpr(callee, [e], [ARG_NAMED], [keyword])
        for n in (call, callee):
            n.line, n.column = e.line, e.column
            n.end_line, n.end_column = e.end_line, e.end_column
        self.count += 1
        return call

    # module and classes
    def block(self, stmts: list[Statement], attrs: frozenset[str] = frozenset()) -> None:
        for st in stmts:
            self.toplevel(st, attrs)

    def toplevel(self, st: Statement, attrs: frozenset[str]) -> None:
        if isinstance(st, FuncDef):
            self.function(st, attrs)
        elif isinstance(st, Decorator):
            self.function(st.func, attrs)
        elif isinstance(st, OverloadedFuncDef):
            for item in st.items:
                self.toplevel(item, attrs)
            if st.impl is not None:
                self.toplevel(st.impl, attrs)
        elif isinstance(st, ClassDef):
            self.block(st.defs.body, _class_attributes(st))
        elif isinstance(st, (IfStmt, WhileStmt, ForStmt, TryStmt, WithStmt, Block, MatchStmt)):
            for b in _blocks(st):
                self.block(b.body, attrs)

    # functions
    def function(self, fn: FuncDef, attrs: frozenset[str]) -> None:
        sig = fn.unanalyzed_type if fn.unanalyzed_type is not None else fn.type
        ret = sig.ret_type if isinstance(sig, CallableType) else None
        wrap_returns = (ret is not None and _head(ret) not in ("None", "Any")
                        and may_hold_tensor(ret))
        self_name = fn.arg_names[0] if fn.arg_names and attrs and not fn.is_static else None
        self.body(fn.body.body, wrap_returns, set(), attrs, self_name)

    def body(self, stmts: list[Statement], wrap_returns: bool, declared: set[str],
             attrs: frozenset[str], self_name: str | None) -> None:
        for st in stmts:
            if isinstance(st, ReturnStmt):
                if wrap_returns and _wrappable(st.expr):
                    st.expr = self.wrap(st.expr, _RETURN)  # type: ignore[arg-type]
            elif isinstance(st, AssignmentStmt):
                self.assignment(st, declared, attrs, self_name)
            elif isinstance(st, (FuncDef, Decorator, OverloadedFuncDef, ClassDef)):
                self.toplevel(st, frozenset())
            elif isinstance(st, _COMPOUND):
                for b in _blocks(st):
                    self.body(b.body, wrap_returns, declared, attrs, self_name)

    def assignment(self, st: AssignmentStmt, declared: set[str], attrs: frozenset[str],
                   self_name: str | None) -> None:
        if len(st.lvalues) != 1:
            return
        target = st.lvalues[0]
        ann = st.unanalyzed_type
        if ann is not None:
            if _head(ann) in _NO_WRAP_HEADS or not may_hold_tensor(ann):
                return
            if isinstance(target, NameExpr):
                declared.add(target.name)
        elif isinstance(target, NameExpr):
            if target.name not in declared:
                return
        elif isinstance(target, MemberExpr):
            if not (self_name and isinstance(target.expr, NameExpr)
                    and target.expr.name == self_name and target.name in attrs):
                return
        else:
            return
        if _wrappable(st.rvalue):
            st.rvalue = self.wrap(st.rvalue, _ASSIGN + expr_text(target))


_COMPOUND = (Block, IfStmt, ForStmt, WhileStmt, WithStmt, TryStmt, MatchStmt)


def _blocks(st: Statement) -> list[Block]:
    if isinstance(st, Block):
        return [st]
    if isinstance(st, IfStmt):
        return list(st.body) + ([st.else_body] if st.else_body is not None else [])
    if isinstance(st, (ForStmt, WhileStmt)):
        return [st.body] + ([st.else_body] if st.else_body is not None else [])
    if isinstance(st, WithStmt):
        return [st.body]
    if isinstance(st, TryStmt):
        return [st.body, *st.handlers] + [b for b in (st.else_body, st.finally_body) if b is not None]
    if isinstance(st, MatchStmt):
        return list(st.bodies)
    return []


def _class_attributes(cls: ClassDef) -> frozenset[str]:
    """Attributes annotated with a type that may hold a tensor: ``w: Tensor[...]`` in the class
    body, ``self.w: Tensor[...] = ...`` in a method."""
    names: set[str] = set()

    def annotated(st: AssignmentStmt) -> bool:
        ann = st.unanalyzed_type
        return ann is not None and _head(ann) not in _NO_WRAP_HEADS and may_hold_tensor(ann)

    def scan(stmts: list[Statement], self_name: str | None) -> None:
        for st in stmts:
            if isinstance(st, AssignmentStmt) and len(st.lvalues) == 1 and annotated(st):
                t = st.lvalues[0]
                if self_name is None and isinstance(t, NameExpr):
                    names.add(t.name)
                elif (self_name is not None and isinstance(t, MemberExpr)
                      and isinstance(t.expr, NameExpr) and t.expr.name == self_name):
                    names.add(t.name)
            elif self_name is not None:
                for b in _blocks(st):
                    scan(b.body, self_name)

    for st in cls.defs.body:
        fn = st.func if isinstance(st, Decorator) else st
        if isinstance(fn, FuncDef):
            if fn.arg_names and not fn.is_static:
                scan(fn.body.body, fn.arg_names[0])
        elif isinstance(st, AssignmentStmt):
            scan([st], None)
    return frozenset(names)


def rewrite_file(file: MypyFile, isinstance_node: object | None) -> int:
    """Wrap the file's boundary values in place; returns how many were wrapped now."""
    if file.is_stub or any(
            isinstance(d, (FuncDef, Decorator)) and getattr(d, "name", "") == "isinstance"
            for d in file.defs):
        return 0
    r = _Rewriter(isinstance_node)
    r.block(file.defs)
    return r.count


# --- check time ------------------------------------------------------------------------------


class BoundaryChecker:
    """The synthetic call's signature and result (see the module docstring)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        self._done: dict[int, MypyFile] = {}  # trees already rewritten, by id
        # call id -> (call, watcher, declared type, whether it holds typed tensors)
        self._active: dict[int, tuple[CallExpr, ErrorWatcher, Type | None, bool, list[bool]]] = {}

    # rewrite entry points
    def ensure_rewritten(self, tree: MypyFile | None, bound: bool) -> None:
        """Rewrite ``tree`` once.  ``bound``: semantic analysis may have passed some bodies,
        so the synthetic callee is bound to builtins.isinstance right away (or not done)."""
        if tree is None:
            return
        seen = self._done.get(id(tree))
        if seen is tree:
            return
        node = self._isinstance_node()
        if bound and node is None:
            return
        try:
            rename_redefinitions(tree, self.plugin.options.clone_for_module(tree.fullname))
        except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
            pass
        try:
            rewrite_file(tree, node)
        except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
            pass
        if len(self._done) > 10_000:
            self._done.clear()
        self._done[id(tree)] = tree

    def _isinstance_node(self) -> object | None:
        mods = self.plugin._modules
        builtins = mods.get("builtins") if mods is not None else None
        sym = builtins.names.get("isinstance") if builtins is not None else None
        return sym.node if sym is not None else None

    # the signature: (x: relaxed declared) -> declared
    def signature_hook(self, ctx: FunctionSigContext) -> CallableType:
        call = ctx.context
        sig = ctx.default_signature
        if not (isinstance(call, CallExpr) and is_wrapped(call)):
            return sig
        try:
            self.plugin.promotion.sync(ctx.api)
            store = ctx.api.msg.errors  # type: ignore[attr-defined]
            self._drop_watcher(store, id(call))
            contexts = ctx.api.expr_checker.type_context  # type: ignore[attr-defined]
            declared = contexts[-1] if contexts else None
            relaxed, typed = self._relax(declared) if declared is not None else (None, False)
            param = relaxed if relaxed is not None else AnyType(TypeOfAny.special_form)
            ret = declared if declared is not None else AnyType(TypeOfAny.special_form)
            caught = [False]
            notes_of: list[int] = []

            def filter_synthetic(_file: str, info: ErrorInfo) -> bool:
                # the synthetic call's own argument errors (they name it) and their notes
                if MARK in info.message:
                    caught[0] = True
                    notes_of[:] = [info.line]
                    return True
                return info.severity == "note" and bool(notes_of) and info.line == notes_of[0]

            watcher = ErrorWatcher(store, filter_errors=filter_synthetic)
            store._watchers.append(watcher)
            self._active[id(call)] = (call, watcher, declared, typed, caught)
            return CallableType([param], [ARG_NAMED], [call.arg_names[0]], ret, sig.fallback,
                                name=MARK)
        except Exception:  # noqa: BLE001 - never crash mypy
            return sig

    def _drop_watcher(self, store: object, key: int) -> ErrorWatcher | None:
        entry = self._active.pop(key, None)
        if entry is None:
            return None
        watchers = store._watchers  # type: ignore[attr-defined]
        for i in range(len(watchers) - 1, -1, -1):
            if watchers[i] is entry[1]:
                del watchers[i]
                break
        return entry[1]

    def _relax(self, t: Type) -> tuple[Type, bool]:
        """The declared type with each typed tensor (at the top, in a union or a tuple)
        replaced by plain torch.Tensor; whether there was one."""
        p = get_proper_type(t)
        if isinstance(p, Instance) and self.plugin.types.is_tensor_info(p.type):
            base = p.type.bases[0] if p.type.bases else None
            return (base, True) if base is not None else (t, False)
        if isinstance(p, UnionType):
            items = [self._relax(i) for i in p.items]
            if any(typed for _, typed in items):
                return UnionType([i for i, _ in items], p.line, p.column), True
        if isinstance(p, TupleType):
            items = [self._relax(i) for i in p.items]
            if any(typed for _, typed in items):
                return p.copy_modified(items=[i for i, _ in items]), True
        return t, False

    # the result
    def is_boundary(self, ctx: FunctionContext) -> bool:
        return isinstance(ctx.context, CallExpr) and is_wrapped(ctx.context)

    def hook(self, ctx: FunctionContext) -> Type:
        call = ctx.context
        entry = self._active.get(id(call))
        store = ctx.api.msg.errors  # type: ignore[attr-defined]
        self._drop_watcher(store, id(call))
        actual = ctx.arg_types[0][0] if ctx.arg_types and ctx.arg_types[0] else None
        if entry is None or entry[0] is not call or actual is None:
            return actual if actual is not None else AnyType(TypeOfAny.from_error)
        _, _, declared, typed, caught = entry
        if caught[0] or declared is None or not typed:
            return actual  # not an SPMD matter: mypy reports (or accepts) the value itself
        if actual == declared:
            return actual  # the declared type itself: no mismatch, and a subtype of it
        try:
            value = unwrap(call)
            errors = self._compare(actual, declared, value, expr_text(value), self._where(ctx, call))
        except Exception:  # noqa: BLE001 - never crash mypy
            return actual
        if errors and not self._duality_reports(ctx):
            self.plugin.calls.report(ctx, errors)
        if not errors and is_subtype(actual, declared):
            return actual  # as without the wrapper (assignments narrow to it)
        return declared

    def _duality_reports(self, ctx: FunctionContext) -> bool:
        """In ``backward`` of a typed custom autograd Function the duality check reports a
        returned gradient of the wrong type (spmd-duality): one error per mistake."""
        try:
            fn = ctx.api.scope.current_function()  # type: ignore[attr-defined]
            if not isinstance(fn, FuncDef) or fn.name != "backward" or fn.info is None:
                return False
            read = self.plugin.autograd.function_types(fn.info)
            return read is not None and read[0].typed and read[1] is not None
        except Exception:  # noqa: BLE001
            return False

    def _where(self, ctx: FunctionContext, call: CallExpr) -> Callable[[str], str]:
        keyword = call.arg_names[0] or ""
        if keyword.startswith(_ASSIGN):
            target = keyword[len(_ASSIGN):]
            return lambda x: f"the value {x} assigned to {target}"
        fn = None
        try:
            fn = ctx.api.scope.current_function()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            pass
        name = getattr(fn, "name", None)
        of = f" of {name}" if name and name != "<lambda>" else ""
        return lambda x: f"the return value {x}{of}"

    def _compare(self, actual: Type, declared: Type, expr: Expression | None, text: str,
                 where: Callable[[str], str]) -> list[SpmdError]:
        """The spmd-mismatch errors of a value of type ``actual`` (written ``text``) where
        ``declared`` is expected, through unions and tuples."""
        types = self.plugin.types
        a = get_proper_type(actual)
        d = get_proper_type(declared)
        if isinstance(a, UnionType):
            out: list[SpmdError] = []
            for item in a.items:
                out.extend(self._compare(item, declared, expr, text, where))
            return out
        if isinstance(d, Instance) and types.is_tensor_info(d.type):
            have, want = types.from_type(a), types.from_type(d)
            if not have or want is None:
                return []
            return coll.check_argument(have, want, x_text=text, where=where(text))
        if isinstance(d, TupleType):
            if isinstance(a, TupleType) and len(a.items) == len(d.items):
                displayed = isinstance(expr, TupleExpr) and len(expr.items) == len(a.items)
                out = []
                for i, (ai, di) in enumerate(zip(a.items, d.items)):
                    ei = expr.items[i] if displayed else None  # type: ignore[union-attr]
                    out.extend(self._compare(ai, di, ei, expr_text(ei) if displayed else f"{text}[{i}]", where))
                return out
            return []
        if isinstance(d, UnionType):
            candidates = [m for m in d.items if self._fits_shape(a, get_proper_type(m))]
            if not candidates:
                return []
            first: list[SpmdError] | None = None
            for m in candidates:
                errs = self._compare(a, m, expr, text, where)
                if not errs:
                    return []
                first = errs if first is None else first
            return first or []
        return []

    def _fits_shape(self, a: Type, d: Type) -> bool:
        if isinstance(d, Instance) and self.plugin.types.is_tensor_info(d.type):
            return self.plugin.types.from_type(a) is not None
        if isinstance(d, TupleType):
            return isinstance(a, TupleType) and len(a.items) == len(d.items)
        return False
