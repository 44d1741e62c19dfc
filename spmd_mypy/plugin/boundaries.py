"""Boundaries: a value that meets a declared type at a ``return`` or an assignment.

mypy 2.4.1 has no plugin hook on return-value or assignment compatibility, so a mismatch
there would be mypy's own ``[return-value]`` / ``[assignment]`` error printing the canonical
form (``Tensor[Any, P[Literal['tp']]]``) without a fix.  Arguments are ``spmd-mismatch``
errors with the collective that fixes them; boundaries get the same::

    def f(x: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
        return x        # spmd-mismatch: ... use all_reduce(x, "tp", src=P, dst=R)

How.  mypy checks every boundary itself; the plugin only rewrites its verdict when it is a
rejection.  The canonical types are built so that mypy's subtyping is never looser than the
rule: per axis, mypy accepts equal slots or ``Any`` (an axis one side does not type), and the
rule (:func:`spmd_mypy.engine.collectives.check_argument`, the one arguments use) accepts
those too; it also accepts some pairs mypy rejects (``S(0)`` where ``V`` is declared, a
rank-dependent layout where one of its dims is declared).  So nothing is checked where mypy
accepts, and a rejection is read back:

    mypy: Incompatible return value type (got "...", expected "...")   [return-value]
      |  an error watcher at the bottom of mypy's watcher stack sees it before it is recorded
      v
    the value's expression (by position in the file), its type (mypy's type map), the
    declared type (the function's return type, the assignment target's type)
      |  rule per axis, through unions and tuples
      v
    spmd-mismatch with the fix  |  nothing (the rule accepts)  |  mypy's error (not an SPMD matter)

The same reading covers the places where mypy compares typed tensors itself and no plugin hook
sees the value: an ``[arg-type]`` of a call without the plugin's argument hook
(``super().forward(x)``, ``dataclasses.replace(d, x=v)``, a generic callee inferred from its
context, ``**kw: Unpack[TD]``, ``functools.partial(f, ...)(x)``: the formal's type as mypy
checks it, :func:`_formal_of`), a TypedDict's ``[typeddict-item]``, and an ``[override]``
(the override's return against the supertype's, the supertype's parameters against the
override's; mypy's error stands unless the signatures agree once those pairs are taken as
the supertype's).  Through unions and tuples, the rule also reads the covariant type arguments
of a declared type (``tuple[T, ...]``, ``Sequence[T]``, a Mapping's values) and a Callable's
result; an invariant one (``list[T]``) keeps mypy's check.  A shape it cannot map (a TypedDict
where a Mapping is declared, a generic function where a Callable is) keeps mypy's error.

"Not an SPMD matter": the value does not fit even with every typed tensor of the declared type
relaxed to ``torch.Tensor`` (``return 3`` where a tensor is declared): mypy's error stands.
The watcher is installed on mypy's error store by the first hook that sees it (annotation
analysis, class definitions, every check-time hook; and when mypy hands the plugin its
module table, before any module is checked) and checks ``return-value`` and ``assignment``
errors (a lambda's body included) and mypy's ``Incompatible types in "yield"`` (a generator's
item, wherever the yield stands): a run without errors never calls it.  It never keeps an error
from mypy without reporting why, except where the rule accepts the value.  Every other error
and note of mypy's it sees keeps its meaning, with its tensor types printed as users write
them (:mod:`.messages`).
"""

from __future__ import annotations

import gc
import re
from typing import TYPE_CHECKING, Any, Callable

from mypy.argmap import map_actuals_to_formals
from mypy.checker_state import checker_state
from mypy.errors import ErrorInfo, ErrorWatcher, Errors
from mypy.nodes import (
    COVARIANT,
    StrExpr,
    FakeInfo,
    ARG_NAMED,
    ARG_NAMED_OPT,
    ARG_OPT,
    ARG_POS,
    ARG_STAR,
    ARG_STAR2,
    ArgKind,
    RefExpr,
    TypeAlias,
    AssignmentStmt,
    AwaitExpr,
    CallExpr,
    ConditionalExpr,
    DictExpr,
    IndexExpr,
    GeneratorExpr,
    ListComprehension,
    OperatorAssignmentStmt,
    OpExpr,
    SetComprehension,
    SetExpr,
    ClassDef,
    Decorator,
    Expression,
    ExpressionStmt,
    FuncDef,
    LambdaExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    Node,
    OverloadedFuncDef,
    ReturnStmt,
    StarExpr,
    Statement,
    SuperExpr,
    TypeInfo,
    TupleExpr,
    Var,
    YieldFromExpr,
)
from mypy.subtypes import is_same_type, is_subtype
from mypy.traverser import YieldFromCollector, all_return_statements, all_yield_expressions
from mypy.maptype import map_instance_to_supertype
from mypy.typeops import bind_self
from mypy.types import (
    AnyType,
    CallableType,
    Overloaded,
    TypeVarType,
    UninhabitedType,
    NoneType,
    TypeOfAny,
    Instance,
    TupleType,
    Type,
    TypedDictType,
    UnionType,
    get_proper_type,
)

from ..engine import collectives as coll
from ..engine import duality
from ..engine.errors import SpmdError
from ..engine.ops import Operand, check_data_assignment
from ..engine.types import SpmdType, mismatched_axes, refines, refines_as_printed, stated_rank
from .autograd import is_autograd_function
from .calls import (expr_text, local_norm, made_by, made_by_binding, rank_every, rank_max,
                    slice_index)
from .index_values import index_value
from .texts import ELIDED
from .codes import ERROR_CODES
from .messages import user_form
from .statements import statement_blocks

if TYPE_CHECKING:
    from . import SpmdPlugin

_CHECKED_CODES = frozenset({"return-value", "assignment"})
# a TypedDict's item (a display, ``TD(x=v)``, ``td["x"] = v``) and a method's override
_STRUCTURAL_CODES = frozenset({"typeddict-item", "override"})
_TYPEDDICT_ITEM = re.compile(r'TypedDict item "([^"]+)" has type')
_SUPERTYPE = re.compile(r'supertype "([^"]+)"')
# an item put into a container of typed tensors: ``[a, b]``, ``{k: a}``, ``{a}`` displays
# with a declared item type, and ``xs.append(a)`` / ``insert`` / ``add`` on a builtin
# container (mypy's item check, where a call's argument check would judge by the rule)
_ITEM_CODES = frozenset({"list-item", "dict-item", "arg-type"})
_CONTAINER_MODULES = ("builtins.", "collections.", "typing.", "_collections_abc.")
# mypy's [misc] errors of a comprehension's element (``[p.grad for p in ps]``)
_COMPREHENSION_MESSAGES = ("List comprehension has incompatible type",
                           "Set comprehension has incompatible type")
_YIELD_MESSAGE = 'Incompatible types in "yield"'  # mypy's [misc] error of a yielded value
_YIELD_FROM_MESSAGE = 'Incompatible types in "yield from"'  # ... of the items of ``yield from xs``
# (value expression's line, column) -> (the return or assignment, the value)
_Index = dict[tuple[int, int], tuple[Statement, Expression]]



def build_manager_of(modules: dict[str, MypyFile]) -> object | None:
    """The build manager whose module table is ``modules`` (it refers to mypy's error store
    and options): mypy hands plugins the module table only.  One ``gc.get_referrers`` per
    table (each costs a walk of the heap)."""
    try:
        for holder in gc.get_referrers(modules):
            if isinstance(getattr(holder, "errors", None), Errors) \
                    and getattr(holder, "modules", None) is modules:
                return holder
    except Exception:  # noqa: BLE001 - never crash mypy: the hooks install the watcher
        pass
    return None


class BoundaryChecker:
    """Reads mypy's return-value and assignment errors back as SPMD checks (module docstring)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        self._store: object | None = None  # mypy's error store the watcher is on
        self._watcher: ErrorWatcher | None = None
        self._replaced: tuple[str, int, int] | None = None  # the last error replaced: its notes go too
        self._reporting = False  # reporting in place of an error of mypy's
        # several targets checked at one position (``a = b = x``, ``out, bias = layer(x)``):
        # mypy reports one error per failing target, in order; the last position and count
        self._position: tuple[str, int, int, int] | None = None
        self._occurrence = 0
        # the return statements of lambdas judged by the rule (ids; the tree is alive while
        # its module is checked, and the few kept are only compared, never dereferenced)
        self._judged_lambda_returns: set[int] = set()
        # the method whose override errors are being judged (file, line, id, supertype):
        # mypy reports them one after the other; any other error ends them
        self._judged_override: tuple[str, int, int, str] | None = None
        # judging the return of a custom Function's forward (run without grad: R for I)
        self._forward_result = False
        # the function of the value _compare judges (the assignments a fix may read), or None,
        # and the checker's types of its expressions
        self._func: FuncDef | None = None
        self._chk: Any = None
        # the values of the checked files' return statements (rewrite.RegionIndex.returned:
        # the same dict, set by the plugin)
        self.returned: dict[int, Expression] = {}

    # -- the watcher ----------------------------------------------------------------------
    def watch(self, store: object | None) -> None:
        """Put the watcher at the bottom of ``store``'s watcher stack (mypy's error store;
        again after a reset, as dmypy does between runs)."""
        if store is None:
            return
        watchers = getattr(store, "_watchers", None)
        if not isinstance(watchers, list):
            return
        if store is self._store and watchers and watchers[0] is self._watcher:
            return
        try:
            watcher = ErrorWatcher(store, filter_errors=self._on_error)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - never crash mypy: mypy's messages stay
            return
        # at the bottom: mypy pushes and pops its own watchers above it, and an error
        # filtered by one of them (an overload attempt) never reaches this one
        watchers.insert(0, watcher)
        self._store, self._watcher = store, watcher

    def find_store(self, manager: object | None) -> None:
        """Put the watcher on the error store of the build (``manager``: build_manager_of).

        Without this, a warm run's first checked module might meet a boundary error before
        any hook ran (a module that uses only imported aliases).
        """
        if self._store is not None:
            self.rewatch()
            return
        store = getattr(manager, "errors", None)
        if isinstance(store, Errors):
            self.watch(store)

    def has_store(self) -> bool:
        """Whether the watcher found mypy's error store (find_store or a hook)."""
        return self._store is not None

    def rewatch(self) -> None:
        """The watcher back on the store it was on (mypy's ``Errors.reset`` empties the stack)."""
        if self._store is not None:
            self.watch(self._store)

    def _on_error(self, file: str, info: ErrorInfo) -> bool:
        """True: drop mypy's error (it is replaced by spmd-mismatch errors, or the rule
        accepts the value).  An error or note kept has its tensor types in the user's form."""
        if self._reporting:
            return False  # the errors this watcher reports in place of mypy's
        try:
            if info.severity == "note":
                if self._replaced == (file, info.line, info.column):
                    return True
                self._restyle(info)
                return False
            self._replaced = None
            code = info.code.code if info.code is not None else None
            if code != "override":
                self._judged_override = None
            yielded = code == "misc" and info.message.startswith(_YIELD_MESSAGE)
            item = code in _ITEM_CODES or (
                code == "misc" and info.message.startswith(_COMPREHENSION_MESSAGES))
            yielded_from = code == "misc" and info.message.startswith(_YIELD_FROM_MESSAGE)
            structural = code in _STRUCTURAL_CODES
            if structural or code in _CHECKED_CODES or yielded or item or yielded_from:
                self._reporting = True
                try:
                    if structural:
                        replaced = (self._replace_typeddict_item(file, info)
                                    if code == "typeddict-item" else self._replace_override(file, info))
                    else:
                        replaced = (self._replace_yield_from(file, info) if yielded_from
                                    else self._replace_item(file, info) if item
                                    else self._replace(file, info, yielded))
                        if not replaced and code == "arg-type":
                            replaced = (self._plain_argument(file, info)
                                        or self._replace_argument(file, info))
                finally:
                    self._reporting = False
                if replaced:
                    self._replaced = (file, info.line, info.column)
                    return True
            self._restyle(info)
            return False
        except _Unjudged:  # a shape the rule does not read: mypy's error stands
            self._restyle(info)
            return False
        except Exception:  # noqa: BLE001 - never crash mypy: its own error stands
            return False

    def _restyle(self, info: ErrorInfo) -> None:
        """mypy's message with canonical tensor types printed as users write them (messages.py)."""
        if info.code is not None and info.code.code.startswith("spmd-"):
            return
        shown = user_form(info.message, self.plugin.types)
        if shown is not None:
            info.message = shown

    def _replace(self, file: str, info: ErrorInfo, yielded: bool) -> bool:
        chk, tree = _checker_of(file)
        if tree is None:
            return False
        found = _boundary_at(tree, info.line, info.column, yielded)
        value_type = chk.lookup_type_or_none(found[1]) if found is not None else None
        if found is None or value_type is None:
            return False
        stmt, value = found
        if isinstance(value, LambdaExpr):
            # ``f: Callable[..., Tensor[V["tp"]]] = lambda t: x``: mypy first reports the
            # lambda's return (judged by the rule just before, at the body), then the whole
            # lambda against the Callable; the second is the same fact
            body = value.body.body
            return bool(body) and id(body[-1]) in self._judged_lambda_returns
        site = self._site(chk, file, info, stmt, value, value_type)
        if site is None:
            return False
        actual, target_expr, text = site
        if isinstance(target_expr, MemberExpr) and target_expr.name == "data":
            return self._data_assignment(chk, target_expr, value, actual,
                                         expr_text(value) if text is None else text)
        target = self._target(chk, stmt, target_expr)
        if target is None:
            return False
        declared, is_declared = target
        if is_declared and self.plugin.promotion.holds_promoted(chk, actual, declared):
            return True  # plain tensors met without the promotion (gradual: accepted)
        if not is_declared and self._widened_inferred(chk, target_expr, actual, declared):
            return True
        relaxed, typed = self._relax(declared)
        if not typed:
            return False
        if (not is_declared and self.plugin.promotion.promoted and is_subtype(actual, relaxed)
                and not self.plugin.types.from_type(actual)):
            # a plain tensor into a variable that first held a typed one: what the promotion
            # accepts, met while an isinstance/hasattr narrowing has it off (until the next
            # hook: ``if hasattr(m, "s"): ...`` then ``w = torch.zeros_like(w)``)
            return True
        if not is_declared and self._accepted_into_inferred(actual, declared, relaxed):
            return True
        if not is_declared or not is_subtype(actual, relaxed):
            # mypy's error stands (an inferred variable keeps its first type; a value that is
            # no tensor at all); _on_error prints its types as users write them
            if not is_declared and isinstance(target_expr, NameExpr):
                name = target_expr.name.rstrip("'")  # as written (the renamer makes x')
                hint = (f"; {name} keeps the type of its first assignment: assign to a new "
                        f"name, or annotate {name} where it is first assigned"
                        f"{self._mixed_shard_dims(chk, value)}")
                if not info.message.endswith(hint):  # mypy reports a loop body's error again
                    info.message += hint
            return False
        # a custom Function's forward runs without grad: its result may be R for I and back
        forward_result = isinstance(stmt, ReturnStmt) and self._in_function_forward(chk)
        if not forward_result and self._fits(actual, declared):
            errors: list[tuple[SpmdError, Expression | None]] = []  # (no text rendered)
        else:
            self._forward_result = forward_result
            fn = chk.scope.current_function()
            self._func = fn if isinstance(fn, FuncDef) else None
            self._chk = chk
            try:
                errors = self._compare(actual, declared, value if text is None else None,
                                       expr_text(value) if text is None else text,
                                       self._where(chk, stmt, target_expr))
            finally:
                self._forward_result = False
                self._func = self._chk = None
        if errors and not self._duality_reports(chk):
            for err, at in errors:
                chk.msg.fail(err.message, at if at is not None else value, code=ERROR_CODES[err.code])
        if isinstance(stmt, ReturnStmt) and getattr(chk.scope.current_function(), "name", None) == "<lambda>":
            if len(self._judged_lambda_returns) > 64:
                self._judged_lambda_returns.clear()
            self._judged_lambda_returns.add(id(stmt))
        return True

    def _fits(self, actual: Type, declared: Type) -> bool:
        """Whether :meth:`_compare` finds no error for a value of type ``actual`` where the
        typed tensor ``declared`` is expected, told without the texts its messages read (most
        errors mypy reports at a boundary are values the rule accepts, ``S(0)`` where ``V``
        is declared): both one local tensor type, and no axis mismatched (engine
        ``check_argument`` answers [] exactly then).  False: ask _compare."""
        types = self.plugin.types
        a = get_proper_type(actual)
        d = get_proper_type(declared)
        if not isinstance(d, Instance) or not types.is_tensor_info(d.type):
            return False
        if types.alternatives(a) is not None:
            return False
        have, want = types.from_type(a), types.from_type(d)
        if want is None or have is None:
            return False
        if have.spec is not None and want.spec is not None:
            return False  # global: the engine's own check
        return not have or not mismatched_axes(have, want, False, stated_rank(have, want))

    def settled_return(self, ctx: Any, result: Type) -> Type:
        """A call's result where the call is the value of its function's ``return``: the
        declared return type instead when the value does not fit it by mypy's rules but
        fits it by the rule with no error (``return F.linear(x, w)``, an ``S(-1)`` result
        where ``V`` is declared), else ``result``.

        The same verdict as :meth:`_replace` reaches for the error mypy would report there
        (dropped without a word), reached before mypy builds it: mypy formats both types of
        every such error (``format_type_distinctly``), and the watcher then finds its
        statement: ~50 us an error (a file of 300 such returns checked in 15% less time).  The
        call's own type stays what the rule said for everything read before; a returned
        value is read by nothing after its return (a custom Function's backward is left to
        the watcher: its duality check reads the returned gradients' types).  Asked after
        every hooked call: one lookup in the pre-pass's return values tells most calls apart,
        then identities (mypy checks a ``return``'s value with the declared return type as
        its type context, the very object)."""
        context = ctx.context
        if self.returned.get(id(context)) is not context:
            return result  # (most calls: one lookup) not the value of a return statement
        chk = ctx.api
        checker = getattr(chk, "expr_checker", None)
        if checker is None:
            return result
        contexts = checker.type_context
        if not contexts:
            return result
        declared = contexts[-1]
        if declared is None or declared is result:
            return result
        returns = getattr(chk, "return_types", None)
        if not returns or returns[-1] is not declared:
            return result  # the value of something else than a return (an argument's context)
        fn = chk.scope.current_function()  # (the function whose return this is: mypy checks
        # a return's value inside its own function, with its return type as the context)
        if type(fn) is not FuncDef or fn.is_generator or fn.is_coroutine:
            return result
        if not isinstance(fn.info, FakeInfo) and is_autograd_function(fn.info):
            # a custom Function's forward (run without grad: R for I) and backward (the
            # duality check reads the types of the gradients it returns)
            return result
        if is_subtype(result, declared):
            return result
        relaxed, typed = self._relax(declared)
        if not typed or not is_subtype(result, relaxed) or not self._fits(result, declared):
            return result  # mypy's error, judged by _replace (an spmd error, or mypy's own)
        return declared

    def _mixed_shard_dims(self, chk: Any, value: Expression) -> str:
        """The hint of an elementwise ``h + bias`` of an S(-1) and an S(0) operand (V to the
        static checker, which sees no ranks): the same dim where the bias is 1-d."""
        if not isinstance(value, OpExpr) or value.op not in ("+", "-", "*", "/"):
            return ""
        types = self.plugin.types
        left = types.from_type(chk.lookup_type_or_none(value.left))
        right = types.from_type(chk.lookup_type_or_none(value.right))
        if left is None or right is None:
            return ""
        for axis, lt in left.axes:
            other = right.get(axis)
            if other is not None:
                hint = coll.mixed_shard_dims_hint(axis, [(expr_text(value.left), lt),
                                                         (expr_text(value.right), other)])
                if hint:
                    return hint
        return ""

    def _data_assignment(self, chk: Any, target: MemberExpr, value: Expression,
                         actual: Type, text: str) -> bool:
        """``x.data = v`` with ``x`` sharded on a known dim (calls.data_attribute_hook gives
        the setter ``x``'s type): only a ``v`` sharded on another dim is an error (engine
        ``check_data_assignment``); any other tensor stays unchecked, as before.  A value that
        is no tensor keeps mypy's error."""
        owner = chk.lookup_type_or_none(target.expr)
        p = get_proper_type(owner) if owner is not None else None
        if not isinstance(p, Instance) or not self.plugin.types.is_tensor_info(p.type):
            return False
        relaxed, typed = self._relax(p)
        if not typed or not is_subtype(actual, relaxed):
            return False
        have, want = self.plugin.types.from_type(actual), self.plugin.types.from_type(p)
        if have and want:
            err = check_data_assignment(Operand(want, expr_text(target)), Operand(have, text))
            if err is not None:
                chk.msg.fail(err.message, value, code=ERROR_CODES[err.code])
        return True

    def _replace_item(self, file: str, info: ErrorInfo) -> bool:
        """An item put into a container whose item type is a typed tensor (``_ITEM_CODES``):
        judged by the rule like an argument; True when mypy's error is replaced (by
        spmd-mismatch errors, or by nothing when the rule accepts the item)."""
        chk, tree = _checker_of(file)
        if tree is None:
            return False
        found = _item_at(tree, info.line, info.column)
        if found is None:
            return False
        value, declared, key, where = _item_site(chk, found)
        if declared is None:
            return False  # no item type: mypy's error
        if key is not None:  # a dict entry: the key must fit as it is
            key_type, key_declared = (chk.lookup_type_or_none(key[0]), key[1])
            if key_type is None and isinstance(key[0], StrExpr):  # dict(a=x)'s keys
                key_type = chk.named_type("builtins.str")
            if key_type is None or not is_subtype(key_type, key_declared):
                return False
        return self._judge(chk, value, declared, lambda x: where.format(x))

    def _replace_yield_from(self, file: str, info: ErrorInfo) -> bool:
        """``yield from xs`` in a generator of typed tensors: each item of ``xs`` judged by the
        rule like a yielded value (spmd-mismatch with the fix), plain items accepted where the
        promotion was off for mypy's check (the gradual rule); True when mypy's error is
        replaced."""
        chk, tree = _checker_of(file)
        if tree is None:
            return False
        found = _yield_from_at(tree, info.line, info.column)
        returns = getattr(chk, "return_types", None)
        fn = chk.scope.current_function()
        iterable = chk.lookup_type_or_none(found.expr) if found is not None else None
        if found is None or iterable is None or not returns or fn is None or not fn.is_generator:
            return False
        with chk.msg.filter_errors():
            item = chk.analyze_iterable_item_type_without_expression(iterable, found)[1]
        declared = chk.get_generator_yield_type(returns[-1], False)  # as mypy's check
        if self.plugin.promotion.holds_promoted(chk, item, declared):
            return True
        if not self._judges(item, declared):
            return False  # not an SPMD matter: mypy's error stands
        source = expr_text(found.expr)
        where = f"each item {{}} of {source} (yield from in {fn.name})"
        for err, _ in self._compare(item, declared, None, "x", where.format):
            chk.msg.fail(err.message, found, code=ERROR_CODES[err.code])
        return True

    def _plain_argument(self, file: str, info: ErrorInfo) -> bool:
        """An argument holding plain tensors (``take(xs)`` of a ``list[torch.Tensor]`` where
        ``list[Tensor[R["tp"]]]`` is declared) met where the promotion was off for mypy's
        check (after a narrowing): True, the gradual rule accepts it as with the promotion
        on (:meth:`Promotion.holds_promoted`)."""
        site = _argument_site(file, info)
        if site is None:
            return False
        chk, call, arg, i = site
        actual = chk.lookup_type_or_none(arg)
        formal = _argument_context(chk, call, i)
        return (actual is not None and formal is not None
                and self.plugin.promotion.holds_promoted(chk, actual, formal))

    def _replace_argument(self, file: str, info: ErrorInfo) -> bool:
        """An argument of a call the plugin's argument hook does not see (``super().forward(x)``,
        ``dataclasses.replace(d, x=v)``, a generic ``Box(x)`` inferred from its context, a
        ``**kw: Unpack[TD]`` parameter, a ``functools.partial``): judged by the rule against
        the formal's declared type as mypy checked it; True when mypy's error is replaced."""
        if "Tensor" not in info.message:
            return False  # no tensor in the types mypy prints (cheap: torch's own errors)
        site = _argument_site(file, info)
        if site is None:
            return False
        chk, call, arg, i = site
        return self._judge_argument(chk, call, arg, i)

    def _judge_argument(self, chk: Any, call: CallExpr, arg: Expression, i: int) -> bool:
        if call.arg_kinds[i] not in (ARG_POS, ARG_NAMED):
            return False  # f(*xs), f(**d): mypy's error stands
        formal = _formal_of(chk, call, i)
        if formal is None:
            return False
        declared, param, index, callee = formal
        text = expr_text(arg)
        where = (f'argument {text} (parameter "{param}" of {callee})' if param
                 else f"argument {index + 1} ({text}) of {callee}")
        return self._judge(chk, arg, declared, lambda x: where)

    def _replace_typeddict_item(self, file: str, info: ErrorInfo) -> bool:
        """A TypedDict's item of a typed tensor type given a value: ``td["x"] = v`` (as an
        assignment), ``{"x": v}`` where the TypedDict is the context, ``TD(x=v)``; judged by
        the rule; True when mypy's error is replaced."""
        if info.message.startswith("Value of "):  # td["x"] = v
            return self._replace(file, info, False)
        named = _TYPEDDICT_ITEM.search(info.message)
        chk, tree = _checker_of(file)
        if named is None or tree is None:
            return False
        found = _item_at(tree, info.line, info.column, any_call=True, at_value=True)
        if found is None:
            return False
        container, item, i, returned, arg_of = found
        td: Type | None = None
        if isinstance(container, CallExpr):  # TD(x=v)
            node = container.callee.node if isinstance(container.callee, RefExpr) else None
            td = node.typeddict_type if isinstance(node, TypeInfo) else None
            value = item
            of = node.name if isinstance(node, TypeInfo) else ""
        elif isinstance(container, DictExpr):
            td = _display_context(chk, returned, arg_of)
            value = container.items[i][1]
            of = ""
        else:
            return False
        td = get_proper_type(td) if td is not None else None
        name = named.group(1)
        if not isinstance(td, TypedDictType) or name not in td.items:
            return False
        where = f'the value {{}} of item "{name}" of {of or td.fallback.type.name}'
        return self._judge(chk, value, td.items[name], lambda x: where.format(x))

    def _replace_override(self, file: str, info: ErrorInfo) -> bool:
        """A method whose return or parameter types differ from its supertype's in SPMD
        types only: each pair judged by the rule (the override's return must fit the
        supertype's; the supertype's parameter must fit the override's), spmd-mismatch
        errors at the method where it rejects one.  mypy's error stands unless the
        signatures agree once the pairs the rule judges are taken as the supertype's (its
        own override check, run again).  mypy reports one error per mismatching part: the
        method is judged once, its other errors dropped."""
        super_name = _SUPERTYPE.search(info.message)
        chk, tree = _checker_of(file)
        if super_name is None or tree is None or "Tensor" not in info.message:
            return False
        defn = _method_at(tree, info.line)
        if defn is None or defn.info is None or defn.is_static or defn.is_class:
            return False
        key = (file, defn.line, id(defn), super_name.group(1))
        if self._judged_override == key:
            return True  # the same method's next error: judged with the first
        base = next((b for b in defn.info.mro[1:] if b.name == super_name.group(1)), None)
        sym = base.names.get(defn.name) if base is not None else None
        original = sym.node if sym is not None else None
        if isinstance(original, Decorator) and _only_abstract(original):
            original = original.func  # @abc.abstractmethod: the method's own signature
        if (base is None or not isinstance(original, FuncDef) or original.is_static
                or original.is_class or base.defn.type_vars):
            return False  # a generic base, a decorated or overloaded method: mypy's check
        ov, og = get_proper_type(defn.type), get_proper_type(original.type)
        if not isinstance(ov, CallableType) or not isinstance(og, CallableType):
            return False
        ov, og = bind_self(ov), bind_self(og)
        if ov.variables or og.variables:
            return False
        errors: list[SpmdError] = []
        ret = ov.ret_type
        method, overridden = f"{defn.info.name}.{defn.name}", f"{base.name}.{defn.name}"
        if self._judges(ov.ret_type, og.ret_type):
            errors += [e for e, _ in self._compare(
                ov.ret_type, og.ret_type, None, "<returned value>",
                lambda x: f"the return value of {method} (overriding {overridden})")]
            ret = og.ret_type
        arg_types = list(ov.arg_types)
        for j, (kind, name, t) in enumerate(zip(og.arg_kinds, og.arg_names, og.arg_types)):
            k = _matching_parameter(ov, j, kind, name)
            if k is None or not self._judges(t, ov.arg_types[k]):
                continue
            shown = ov.arg_names[k] or f"<argument {k + 1}>"
            errors += [e for e, _ in self._compare(
                t, ov.arg_types[k], None, shown,
                lambda x: f"an argument {x} passed to {method} as to {overridden}")]
            arg_types[k] = t
        if not is_subtype(ov.copy_modified(arg_types=arg_types, ret_type=ret), og,
                          ignore_pos_arg_names=True):
            return False  # another difference: mypy's error stands
        self._judged_override = key
        for err in errors:
            chk.msg.fail(err.message, defn, code=ERROR_CODES[err.code])
        return True

    def _judges(self, actual: Type, declared: Type) -> bool:
        """The rule judges ``actual`` where ``declared`` is (a typed tensor where one is
        declared, through unions, tuples and covariant containers)."""
        relaxed, typed = self._relax(declared)
        return typed and is_subtype(actual, relaxed)

    def _judge(self, chk: Any, value: Expression, declared: Type, where: Callable[[str], str]) -> bool:
        """``value`` where ``declared`` is: spmd-mismatch errors where the rule rejects it;
        False (mypy's error stands) where it is no SPMD matter."""
        if self.plugin.types.alternatives(get_proper_type(declared)) is not None:
            return False  # an inferred join of kinds ("R or P"): mypy's error stands
        actual = chk.lookup_type_or_none(value)
        if actual is None and isinstance(value, (NameExpr, MemberExpr)):
            # a returned display's or call's types are dropped with mypy's first attempt (see
            # _display_context): a name or attribute is inferred again, its errors dropped
            with chk.msg.filter_errors(), chk.local_type_map:
                actual = chk.expr_checker.accept(value)
        if actual is None or not self._judges(actual, declared):
            return False
        fn = chk.scope.current_function()
        self._func = fn if isinstance(fn, FuncDef) else None
        self._chk = chk
        try:
            errors = self._compare(actual, declared, value, expr_text(value), where)
        finally:
            self._func = self._chk = None
        for err, at in errors:
            chk.msg.fail(err.message, at if at is not None else value, code=ERROR_CODES[err.code])
        return True

    def _site(self, chk: Any, file: str, info: ErrorInfo, stmt: Statement, value: Expression,
              value_type: Type) -> tuple[Type, Expression | None, str | None] | None:
        """Which value met which target for this error: (the value's type, the target (None:
        the return type), the value's text when it is not ``value``'s own).

        One target per position for a return and a plain assignment.  Several for
        ``a = b = x`` (mypy checks the last target against the value, at the value; the
        others against its type, at the statement) and for ``out, bias = layer(x)`` (each
        target against its item of the tuple, at the value): mypy reports one error per
        target the value does not fit, in order, so the n-th error at a position is the
        n-th such target."""
        if isinstance(stmt, (ReturnStmt, ExpressionStmt)):  # a return, a yield
            return value_type, None, None
        if not isinstance(stmt, AssignmentStmt):
            return None
        last = stmt.lvalues[-1]
        rvalue = stmt.rvalue
        if value is not rvalue:  # an item of a displayed tuple: ``c, d = x, y``
            if not isinstance(last, (TupleExpr, ListExpr)) or not isinstance(rvalue, (TupleExpr, ListExpr)):
                return None
            i = next((k for k, item in enumerate(rvalue.items) if item is value), -1)
            return (value_type, last.items[i], None) if 0 <= i < len(last.items) else None
        sites: list[tuple[Type, Expression, str | None]]
        if (info.line, info.column) == (stmt.line, stmt.column) and len(stmt.lvalues) > 1:
            sites = [(value_type, lv, None) for lv in stmt.lvalues[:-1]]
        elif isinstance(last, (TupleExpr, ListExpr)):
            items = get_proper_type(value_type)
            if not isinstance(items, TupleType) or len(items.items) != len(last.items):
                return None
            text = expr_text(rvalue)
            sites = [(t, lv, f"{text}[{k}]") for k, (t, lv) in enumerate(zip(items.items, last.items))]
        else:
            sites = [(value_type, last, None)]
        if len(sites) == 1:
            return sites[0]
        failing = []
        for site in sites:
            target = self._target(chk, stmt, site[1])
            if target is None or isinstance(site[1], StarExpr):
                return None  # a target the sites cannot be matched with: mypy's error stands
            if not is_subtype(site[0], target[0]):
                failing.append(site)
        position = (file, info.line, info.column, id(stmt))
        self._occurrence = self._occurrence + 1 if position == self._position else 0
        self._position = position
        return failing[self._occurrence % len(failing)] if failing else None

    def _target(self, chk: Any, stmt: Statement, lvalue: Expression | None) -> tuple[Type, bool] | None:
        """The type the value must fit (the return type; ``lvalue``'s type), and whether the
        user declared it (a return type, an annotated name or attribute) rather than mypy
        inferring it from a first assignment."""
        if isinstance(stmt, (ReturnStmt, ExpressionStmt)):
            returns = getattr(chk, "return_types", None)
            fn = chk.scope.current_function()
            if not returns or fn is None:
                return None
            if isinstance(stmt, ExpressionStmt):  # ``yield v``: the generator's item type
                if not fn.is_generator:
                    return None
                return chk.get_generator_yield_type(returns[-1], fn.is_coroutine), True
            if fn.is_generator:
                return chk.get_generator_return_type(returns[-1], fn.is_coroutine), True
            if fn.is_coroutine:
                return chk.get_coroutine_return_type(returns[-1]), True
            return returns[-1], True
        if not isinstance(stmt, AssignmentStmt) or lvalue is None:
            return None
        if isinstance(lvalue, IndexExpr):
            base = get_proper_type(chk.lookup_type_or_none(lvalue.base))
            if isinstance(base, TypedDictType):  # ``td["x"] = v``: the item's declared type
                key = lvalue.index
                found = base.items.get(key.value) if isinstance(key, StrExpr) else None
                return (found, True) if found is not None else None
            # ``d[k] = v`` / ``xs[i] = v``: the container's declared item type
            item = _container_item(chk.lookup_type_or_none(lvalue.base))
            return (item, True) if item is not None else None
        t = chk.lookup_type_or_none(lvalue)
        var = lvalue.node if isinstance(lvalue, (NameExpr, MemberExpr)) else None
        if isinstance(lvalue, MemberExpr) and not isinstance(var, Var):
            owner = get_proper_type(chk.lookup_type_or_none(lvalue.expr))
            sym = owner.type.get(lvalue.name) if isinstance(owner, Instance) else None
            var = sym.node if sym is not None else None
        if not isinstance(var, Var):
            return None
        if t is None:
            t = var.type
        if t is None:
            return None
        # declared: annotated here, a name or class attribute annotated where it was defined,
        # or ``self.w: T = ...`` (mypy marks that Var explicit_self_type, not is_inferred)
        return t, stmt.type is not None or not var.is_inferred or var.explicit_self_type

    def _duality_reports(self, chk: Any) -> bool:
        """In ``backward`` of a typed custom autograd Function the duality check reports a
        returned gradient of the wrong type (spmd-duality): one error per mistake."""
        try:
            fn = chk.scope.current_function()
            if not isinstance(fn, FuncDef) or fn.name != "backward" or fn.info is None:
                return False
            read = self.plugin.autograd.function_types(fn.info)
            return read is not None and read[0].typed and read[1] is not None
        except Exception:  # noqa: BLE001
            return False

    def _in_function_forward(self, chk: Any) -> bool:
        """The current function is the ``forward`` of a custom autograd Function."""
        try:
            fn = chk.scope.current_function()
            return (isinstance(fn, FuncDef) and fn.name == "forward"
                    and is_autograd_function(fn.info))
        except Exception:  # noqa: BLE001
            return False

    def _where(self, chk: Any, stmt: Statement, lvalue: Expression | None) -> Callable[[str], str]:
        if isinstance(stmt, AssignmentStmt) and lvalue is not None:
            target = expr_text(lvalue)
            return lambda x: f"the value {x} assigned to {target}"
        fn = None
        try:
            fn = chk.scope.current_function()
        except Exception:  # noqa: BLE001
            pass
        name = getattr(fn, "name", None)
        if isinstance(stmt, ExpressionStmt):
            by = f" by {name}" if name else ""
            return lambda x: f"the value {x} yielded{by}"
        if name == "<lambda>":
            return lambda x: f"the value {x} returned by the lambda"
        of = f" of {name}" if name else ""
        return lambda x: f"the return value {x}{of}"

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
        if isinstance(p, Instance) and p.args:
            # the covariant type arguments (``Sequence[T]``, ``tuple[T, ...]``, a Mapping's
            # values): an invariant one (``list[T]``) keeps mypy's check
            slots = self._typed_slots(p)
            if slots:
                args = list(p.args)
                for k in slots:
                    args[k] = self._relax(args[k])[0]
                return p.copy_modified(args=args), True
        if isinstance(p, CallableType) and not p.variables:
            ret, typed = self._relax(p.ret_type)  # the result (covariant); parameters as declared
            if typed:
                return p.copy_modified(ret_type=ret), True
        return t, False

    def _typed_slots(self, p: Instance) -> list[int]:
        """The indices of ``p``'s covariant type arguments that hold typed tensors."""
        tvars = p.type.defn.type_vars
        if len(tvars) != len(p.args) or self.plugin.types.is_tensor_info(p.type):
            return []
        return [k for k, (tv, arg) in enumerate(zip(tvars, p.args))
                if isinstance(tv, TypeVarType) and tv.variance == COVARIANT and self._relax(arg)[1]]

    def _accepted_into_inferred(self, actual: Type, declared: Type, relaxed: Type) -> bool:
        """An inferred variable keeps its first type; a typed value of that type (an S(0)
        value into a variable first assigned a V one: the dim forgotten) is accepted, not
        mypy's [assignment] error.  A claim (V into an inferred S(0)) keeps mypy's rule."""
        if not is_subtype(actual, relaxed):
            return False
        have, want = self.plugin.types.from_type(actual), self.plugin.types.from_type(declared)
        return have is not None and bool(have) and want is not None and refines(have, want)

    def _widened_inferred(self, chk: Any, lvalue: Expression | None, actual: Type,
                          declared: Type) -> bool:
        """A value into an inferred variable whose type prints as the value's does but knows
        a layout by rank only (``tok = logits.argmax(-1) + 3`` of an S(1) ``logits``, then
        ``tok = torch.where(done, 3, tok)``: V into "V (S(1) at rank >= 2, V at rank 1)";
        ``ys = [x.softmax(-1)]`` then ``ys = zs``, a ``list[Tensor[V["tp"]]]``): accepted, as
        the type printed (engine ``refines_as_printed``; a V of any layout is a V), not mypy's
        [assignment] error between two types that print the same.  The target takes the
        value's type from here on, as mypy narrows an assignment it accepts (where branches
        meet, the variable's type stands again: a rank-dependent layout accepts fewer claims
        than a V, never more).  A variable whose type prints S(i) keeps mypy's rule (V there
        is a claim)."""
        if not isinstance(lvalue, (NameExpr, MemberExpr)):
            return False
        types = self.plugin.types
        d = get_proper_type(declared)
        if isinstance(d, Instance) and types.is_tensor_info(d.type):
            if not is_subtype(actual, self._relax(declared)[0]):
                return False
            have, want = types.from_type(actual), types.from_type(d)
            if not have or want is None or not refines_as_printed(have, want):
                return False
        else:  # a container, a tuple: the value must fit the type as printed, as it is
            printed = self._as_printed(declared, 0)
            if printed is declared or not is_subtype(actual, printed):
                return False
        chk.binder.put(lvalue, actual)
        return True

    def _as_printed(self, t: Type, depth: int) -> Type:
        """``t`` with each typed tensor's rank-dependent layouts forgotten (V, as printed);
        ``t`` itself when it has none."""
        p = get_proper_type(t)
        types = self.plugin.types
        if depth > 8:
            return t
        if isinstance(p, Instance) and types.is_tensor_info(p.type):
            st = types.from_type(p)
            shown = st.as_printed() if st else None
            if shown is None or shown is st:
                return t
            inst = types.to_instance(shown)
            return inst if inst is not None else t
        if isinstance(p, Instance) and p.args:
            args = [self._as_printed(a, depth + 1) for a in p.args]
            if all(a is b for a, b in zip(args, p.args)):
                return t
            return p.copy_modified(args=args)
        if isinstance(p, TupleType):
            items = [self._as_printed(a, depth + 1) for a in p.items]
            if all(a is b for a, b in zip(items, p.items)):
                return t
            return p.copy_modified(items=items)
        if isinstance(p, UnionType):
            items = [self._as_printed(a, depth + 1) for a in p.items]
            if all(a is b for a, b in zip(items, p.items)):
                return t
            return UnionType(items, p.line, p.column)
        return t

    def _integer_valued(self, e: Expression | None) -> bool:
        """Whether the value ``e`` is known to be an integer or bool tensor (rewrite
        ``is_integer_valued``, with the enclosing function's integer locals)."""
        if e is None or self._chk is None:
            return False
        tree: MypyFile | None = getattr(self._chk, "tree", None)
        return self.plugin.regions.integer_valued(tree, e.line, e)

    def _no_grad(self, e: Expression | None) -> bool:
        """Whether ``e`` is computed where no gradient is recorded (a torch.no_grad() block,
        a no_grad function)."""
        if e is None or self._chk is None:
            return False
        tree: MypyFile | None = getattr(self._chk, "tree", None)
        return self.plugin.regions.in_no_grad(tree, e.line)

    def _type_of(self, e: Expression) -> SpmdType | None:
        """The SPMD type the checker inferred for ``e`` (None: unknown, or no checker)."""
        t = self._chk.lookup_type_or_none(e) if self._chk is not None else None
        return self.plugin.types.from_type(t) if t is not None else None

    def _compare(self, actual: Type, declared: Type, expr: Expression | None, text: str,
                 where: Callable[[str], str]) -> list[tuple[SpmdError, Expression | None]]:
        """The spmd-mismatch errors of a value of type ``actual`` (written ``text``) where
        ``declared`` is expected, through unions and tuples; each with the expression it is
        reported at (an item of a displayed tuple: ``return x, y`` points at the wrong one;
        None: the value as a whole)."""
        types = self.plugin.types
        a = get_proper_type(actual)
        d = get_proper_type(declared)
        alternatives = types.alternatives(a)
        if alternatives is not None:
            out: list[tuple[SpmdError, Expression | None]] = []
            for item in alternatives:
                out.extend(self._compare(item, declared, expr, text, where))
            if any(isinstance(get_proper_type(m), NoneType) for m in alternatives):
                # ``o: Tensor[V["tp"]] | None``
                out = [(coll.may_be_none([e], text)[0], at) for e, at in out]
            return out
        if isinstance(d, Instance) and types.is_tensor_info(d.type):
            have, want = types.from_type(a), types.from_type(d)
            if want is None:
                raise _Unjudged  # an inferred join of kinds ("R or P"): mypy's error stands
            if not have:
                return []
            if self._forward_result:
                return [(e, expr) for e in duality.check_forward_result(
                    have, want, x_text=text, where=where(text), made_by=made_by(expr))]
            by = made_by(expr) or made_by_binding(expr, self._func)
            errors = coll.check_argument(have, want, x_text=text, where=where(text), made_by=by)
            free = bool(errors) and self._integer_valued(expr)
            if free:
                # an integer or bool value (a token id, a mask) never carries a gradient: its
                # R and I agree (engine check_argument's gradient_free)
                errors = coll.check_argument(have, want, x_text=text, where=where(text),
                                             made_by=by, gradient_free=True)
            if errors:  # the fix of a value computed from this rank's max (read for an error)
                at_max = rank_max(expr, self._func, self._type_of)
                if at_max is not None:
                    errors = coll.check_argument(have, want, x_text=text, where=where(text),
                                                 made_by=by, rank_max=at_max, gradient_free=free)
                index = index_value(expr, self._func, self._type_of, expr_text)
                # a V made by a rank query over every axis where one axis's rank was meant
                every = rank_every(expr, self._func, self.plugin.regions, self._type_of,
                                   self.plugin.config.mesh_axes)
                # a softmax of this rank's block of a sharded dim: its normaliser first
                norm = local_norm(expr, self._func, self._type_of)
                # a slice: what its index holds (no rank, another axis's rank)
                sl = slice_index(expr, self._func, self.plugin.regions,
                                 self.plugin.config.mesh_axes)
                if index is not None or every is not None or norm is not None or sl is not None:
                    # an argmax of this rank's shard: no gather of it
                    errors = coll.check_argument(have, want, x_text=text, where=where(text),
                                                 made_by=by, rank_max=at_max, index=index,
                                                 gradient_free=free, rank_every=every,
                                                 norm=norm, slice_index=sl)
                if errors and self._no_grad(expr):
                    # an R where I is needed may come of a mask declared R (engine no_grad)
                    errors = coll.check_argument(have, want, x_text=text, where=where(text),
                                                 made_by=by, rank_max=at_max, index=index,
                                                 gradient_free=free, rank_every=every,
                                                 norm=norm, no_grad=True, slice_index=sl)
            return [(e, expr) for e in errors]
        if isinstance(d, TupleType):
            if isinstance(a, TupleType) and len(a.items) == len(d.items):
                displayed = isinstance(expr, TupleExpr) and len(expr.items) == len(a.items)
                out = []
                for i, (ai, di) in enumerate(zip(a.items, d.items)):
                    ei = expr.items[i] if displayed else None  # type: ignore[union-attr]
                    out.extend(self._compare(ai, di, ei, expr_text(ei) if displayed else f"{text}[{i}]", where))
                return out
            return []
        if isinstance(a, (AnyType, UninhabitedType)):
            return []
        if isinstance(d, Instance) and not types.is_tensor_info(d.type):
            slots = self._typed_slots(d)
            if slots:
                return self._compare_items(a, d, slots, expr, text, where)
        if isinstance(d, CallableType) and self._relax(d.ret_type)[1]:
            if isinstance(expr, LambdaExpr):
                return []  # its return is judged at the lambda's body (one error, not two)
            if not isinstance(a, CallableType) or a.variables:
                raise _Unjudged  # a generic function, a callable object: mypy's error stands
            result = f"{text}({ELIDED})"
            return [(e, expr) for e, _ in self._compare(
                a.ret_type, d.ret_type, None, result, lambda x: f"the result {x} of {where(text)}")]
        if isinstance(d, UnionType):
            candidates = [m for m in d.items if self._fits_shape(a, get_proper_type(m))]
            if not candidates:
                if not any(is_subtype(a, m) for m in d.items):
                    raise _Unjudged  # a shape the rule does not read: mypy's error stands
                return []
            first: list[tuple[SpmdError, Expression | None]] | None = None
            for m in candidates:
                errs = self._compare(a, m, expr, text, where)
                if not errs:
                    return []
                first = errs if first is None else first
            return first or []
        return []

    def _compare_items(self, a: Type, d: Instance, slots: list[int], expr: Expression | None,
                       text: str, where: Callable[[str], str]
                       ) -> list[tuple[SpmdError, Expression | None]]:
        """A value of type ``a`` where the covariant container ``d`` is declared: its items
        (a Mapping's values) judged against ``d``'s at the ``slots`` (see _typed_slots); the
        other type arguments passed mypy's check (the gate of the callers)."""
        out: list[tuple[SpmdError, Expression | None]] = []
        if isinstance(a, TupleType):  # ``(s,)`` where ``tuple[T, ...]`` / ``Sequence[T]`` is declared
            if slots != [0] or len(d.args) != 1:
                raise _Unjudged
            displayed = isinstance(expr, TupleExpr) and len(expr.items) == len(a.items)
            for i, ai in enumerate(a.items):
                ei = expr.items[i] if displayed else None  # type: ignore[union-attr]
                out.extend(self._compare(ai, d.args[0], ei, expr_text(ei) if ei is not None
                                         else f"{text}[{i}]", where))
            return out
        if not isinstance(a, Instance) or not a.type.has_base(d.type.fullname):
            raise _Unjudged  # a TypedDict, a protocol's implementation: mypy's error stands
        mapped = map_instance_to_supertype(a, d.type)
        mapping = d.type.has_base("typing.Mapping")
        whole = where(text)
        for k in slots:
            noun = "value" if mapping and k == len(d.args) - 1 else "item"
            item = "v" if noun == "value" else "t"
            out.extend((e, expr) for e, _ in self._compare(
                mapped.args[k], d.args[k], None, item, _each(noun, whole)))
        return out

    def _fits_shape(self, a: Type, d: Type) -> bool:
        if isinstance(d, Instance) and self.plugin.types.is_tensor_info(d.type):
            return self.plugin.types.from_type(a) is not None
        if isinstance(d, Instance) and self._typed_slots(d):
            return ((isinstance(a, Instance) and a.type.has_base(d.type.fullname))
                    or (isinstance(a, TupleType) and len(d.args) == 1))
        if isinstance(d, CallableType):
            return isinstance(a, CallableType)
        if isinstance(d, TupleType):
            return isinstance(a, TupleType) and len(a.items) == len(d.items)
        return False


def _each(noun: str, whole: str) -> Callable[[str], str]:
    return lambda x: f"each {noun} {x} of {whole}"


class _Unjudged(Exception):
    """A value whose shape the rule does not read (a TypedDict where a Mapping of typed tensors
    is declared, a generic function where a Callable is): mypy's error stands."""


def _argument_site(file: str, info: ErrorInfo) -> tuple[Any, CallExpr, Expression, int] | None:
    """The checker, call, argument and its index an ``[arg-type]`` error of ``file`` is at."""
    chk, tree = _checker_of(file)
    if tree is None:
        return None
    found = _item_at(tree, info.line, info.column, any_call=True)
    if found is None or not isinstance(found[0], CallExpr):
        return None
    return chk, found[0], found[1], found[2]


def _checker_of(file: str) -> tuple[Any, MypyFile | None]:
    """The TypeChecker of the module being checked and its tree, when that module is
    ``file`` (the error's); else (the checker, None)."""
    chk: Any = checker_state.type_checker
    tree = getattr(chk, "tree", None)
    if chk is None or not isinstance(tree, MypyFile) or getattr(chk, "path", None) != file:
        return chk, None
    return chk, tree


def _boundary_at(tree: MypyFile, line: int, column: int,
                 yielded: bool) -> tuple[Statement, Expression] | None:
    """The return or assignment whose value is at (line, column) (or, for ``a = b = x``, the
    statement itself); with ``yielded``, the ``yield v`` at (line, column) (as an expression
    statement of the yield, wherever it stands: ``yield v``, ``y = yield v``).  Only the
    statements whose lines hold ``line`` are walked: a file's errors are few, and indexing
    whole files showed under perf."""
    index: _Index = {}
    leaves: list[Statement] = []
    _collect(tree.defs, index, line, leaves)
    if yielded:
        for leaf in leaves:
            for y, _ in all_yield_expressions(leaf):
                if (y.line, y.column) == (line, column) and y.expr is not None:
                    # mypy reports the item at the yield, not at the value
                    st = ExpressionStmt(y)
                    st.set_line(y)
                    return st, y.expr
        return None
    found = index.get((line, column))
    if found is None:
        # a lambda's body: ``f: Callable[[A], B] = lambda t: v``, ``return lambda: v``
        # (mypy's collector of returns stops at a return: its value is searched in turn)
        todo: list[Node] = []
        for leaf in leaves:
            if not isinstance(leaf, ReturnStmt):
                todo.append(leaf)
            elif leaf.expr is not None:
                todo.append(leaf.expr)
        while todo:
            for ret in all_return_statements(todo.pop()):
                if ret.expr is not None:
                    if (ret.expr.line, ret.expr.column) == (line, column):
                        return ret, ret.expr
                    todo.append(ret.expr)
    return found


def _yield_from_at(tree: MypyFile, line: int, column: int) -> YieldFromExpr | None:
    """The ``yield from`` at (line, column), where mypy reports its items' error."""
    leaves: list[Statement] = []
    _collect(tree.defs, {}, line, leaves)
    for leaf in leaves:
        collector = YieldFromCollector()
        leaf.accept(collector)
        for y, _ in collector.yield_from_expressions:
            if (y.line, y.column) == (line, column):
                return y
    return None


# what _item_at finds: the item's container (a display or a call), the item (a dict
# display's key), its index among the call's arguments, whether the display is returned as is,
# and where its declared type is when mypy reports it after its context is gone: the call (and
# argument index) it is an argument of, or the annotation of the assignment it is the value of
_ItemAt = tuple[Expression, Expression, int, bool, "tuple[CallExpr, int] | Type | None"]
# what _item_site reads from it: (the item, its declared type, a dict entry's (key, declared
# key type), the message's subject with {} for the item's text)
_ItemSite = tuple[Expression, "Type | None", "tuple[Expression, Type] | None", str]


def _container_item(t: Type | None) -> Type | None:
    """The item type of a builtin container type (``list[T]``, ``set[T]``, ``dict[K, T]``'s
    T), else None."""
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, Instance) and p.args and p.type.fullname.startswith(_CONTAINER_MODULES):
        return p.args[-1]
    return None


def _item_site(chk: Any, at: _ItemAt) -> _ItemSite:
    """The declared type an item found by :func:`_item_at` must fit."""
    container, item, i, returned, arg_of = at
    if isinstance(container, CallExpr):
        return _method_site(chk, container, i)
    if isinstance(container, DictExpr):
        k, v = container.items[i]
        assert k is not None
        return _dict_site(chk, k, v, returned, arg_of)
    kind = "list" if isinstance(container, (ListExpr, ListComprehension)) else "set"
    if isinstance(container, (ListComprehension, SetComprehension)):
        kind += " comprehension's"
    return (item, _container_item(_display_context(chk, returned, arg_of)), None,
            f"the {kind} item {{}}")


def _item_at(tree: MypyFile, line: int, column: int, any_call: bool = False,
             at_value: bool = False) -> _ItemAt | None:
    """The container item at (line, column) of a statement holding ``line``: an item of a
    list or set display, the value of a dict display's entry (mypy reports it at the key;
    with ``at_value``, at the value, as it does a TypedDict's), or an argument of a method
    call on a builtin container (``xs.append(a)``); with ``any_call``, an argument of any
    call."""
    index: _Index = {}
    leaves: list[Statement] = []
    _collect(tree.defs, index, line, leaves)
    todo: list[Expression] = []
    returned: set[int] = set()  # the displays returned as they are (ids)
    # the displays passed as arguments or annotated (ids): see _ItemAt
    arg_of: dict[int, "tuple[CallExpr, int] | Type"] = {}
    for leaf in leaves:
        if isinstance(leaf, (AssignmentStmt, OperatorAssignmentStmt)):
            todo.append(leaf.rvalue)
            if isinstance(leaf, AssignmentStmt) and leaf.type is not None:
                arg_of[id(leaf.rvalue)] = leaf.type
        elif isinstance(leaf, ExpressionStmt):
            todo.append(leaf.expr)
        elif isinstance(leaf, ReturnStmt) and leaf.expr is not None:
            todo.append(leaf.expr)
            returned.add(id(leaf.expr))
    while todo:
        e = todo.pop()
        if isinstance(e, (ListExpr, SetExpr)):
            for item in e.items:
                if (item.line, item.column) == (line, column) and not isinstance(item, StarExpr):
                    return e, item, 0, id(e) in returned, arg_of.get(id(e))
            todo.extend(e.items)
        elif isinstance(e, DictExpr):
            for i, (k, v) in enumerate(e.items):
                # mypy reports an entry at its key, or at its value where the key has no
                # position (the keys dict(a=x) is turned into)
                at = ((k.line, k.column) if k is not None and k.line >= 0 and not at_value
                      else (v.line, v.column))
                if k is not None and at == (line, column):
                    return e, k, i, id(e) in returned, arg_of.get(id(e))
                todo.extend(x for x in (k, v) if x is not None)
        elif isinstance(e, CallExpr):
            if isinstance(e.analyzed, DictExpr):  # dict(a=x): mypy checks the display
                if id(e) in returned:             # semantic analysis made of it
                    returned.add(id(e.analyzed))
                todo.append(e.analyzed)
                continue
            for i, arg in enumerate(e.args):
                if (arg.line, arg.column) == (line, column) and (
                        any_call or isinstance(e.callee, MemberExpr)):
                    return e, arg, i, False, None
                arg_of[id(arg)] = (e, i)
            todo.append(e.callee)
            todo.extend(e.args)
        elif isinstance(e, (ListComprehension, SetComprehension)):
            left = e.generator.left_expr
            if (left.line, left.column) == (line, column) and not isinstance(left, StarExpr):
                return e, left, 0, id(e) in returned, arg_of.get(id(e))
            todo.append(left)
            todo.extend(e.generator.sequences)
        elif isinstance(e, GeneratorExpr):
            todo.append(e.left_expr)
            todo.extend(e.sequences)
        elif isinstance(e, (TupleExpr,)):
            todo.extend(e.items)
        elif isinstance(e, MemberExpr):
            todo.append(e.expr)
        elif isinstance(e, OpExpr):
            todo.extend((e.left, e.right))
        elif isinstance(e, (StarExpr, AwaitExpr)):
            todo.append(e.expr)
        elif isinstance(e, ConditionalExpr):
            todo.extend((e.cond, e.if_expr, e.else_expr))
    return None


def _display_context(chk: Any, returned: bool,
                     arg_of: tuple[CallExpr, int] | Type | None = None) -> Type | None:
    """The declared type of the display being checked: mypy reports an item while it infers
    the display (before the display's type is stored), with the display's context on top of
    the expression checker's context stack.  A display returned as it is is inferred with the
    return type, its errors held back, and reported again after a retry without a context:
    then the return type."""
    contexts = getattr(getattr(chk, "expr_checker", None), "type_context", None)
    context = contexts[-1] if contexts else None
    if context is None and returned:
        returns = getattr(chk, "return_types", None)
        fn = chk.scope.current_function()
        if returns and fn is not None and not fn.is_generator and not fn.is_coroutine:
            context = returns[-1]
    if context is None and isinstance(arg_of, tuple):
        # a display passed to a call whose errors mypy held back and reported after the
        # inference (``norm = f([a, b])``, inferred twice for the assignment): the formal's type
        context = _argument_context(chk, *arg_of)
    elif context is None and arg_of is not None:
        context = arg_of  # ``d: dict[str, T] | None = {...}``: the same, the annotation
    return _without_none(context)


def _argument_context(chk: Any, call: CallExpr, index: int) -> Type | None:
    """The declared type of the formal the call's argument ``index`` is passed to (a plain
    callee: a function or a bound method, not overloaded)."""
    if not isinstance(call.callee, (NameExpr, MemberExpr)):
        return None
    ct = chk.lookup_type_or_none(call.callee)
    if ct is None:
        with chk.msg.filter_errors(), chk.local_type_map:
            ct = chk.expr_checker.accept(call.callee)
    ct = get_proper_type(ct)
    if not isinstance(ct, CallableType):
        return None
    formals = map_actuals_to_formals(call.arg_kinds, call.arg_names, ct.arg_kinds, ct.arg_names,
                                     lambda j: AnyType(TypeOfAny.special_form))
    for f, actuals in enumerate(formals):
        if index in actuals and ct.arg_kinds[f] in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT):
            return ct.arg_types[f]
    return None


def _formal_of(chk: Any, call: CallExpr, index: int) -> tuple[Type, str | None, int, str] | None:
    """The declared type of the formal the call's argument ``index`` is passed to, as mypy
    checks it (a plugin's signature hook applied, type variables inferred from the call's
    context, ``**kw: Unpack[TD]`` expanded, a ``functools.partial(f, ...)``'s remaining
    parameters), with the formal's name, its index and the callee's name; None where it
    cannot be found (an overloaded callee, type variables left to the arguments).

    The callee is inferred again (its errors dropped, its types kept out of the type map):
    the type map holds the callable an earlier check of the call inferred, if any."""
    callee = call.callee
    ec = chk.expr_checker
    partial = (isinstance(callee, CallExpr) and isinstance(callee.callee, RefExpr)
               and callee.callee.fullname == "functools.partial")
    if not isinstance(callee, (RefExpr, SuperExpr)) and not partial:
        return None
    with chk.msg.filter_errors(), chk.local_type_map:
        ct = get_proper_type(ec.accept(callee, None, always_allow_any=True, is_callee=True))
        extra = ct.extra_attrs if isinstance(ct, Instance) else None
        if partial or (extra is not None and "__mypy_partial" in extra.attrs):
            # a partial's remaining parameters, called where it is made or kept in a
            # variable (``s = functools.partial(f, k=2.0); s(x)``)
            ct = get_proper_type(extra.attrs.get("__mypy_partial")) if extra is not None else None
        elif isinstance(ct, CallableType) and isinstance(callee, RefExpr):
            # the signature hook mypy applies (dataclasses.replace's), found as mypy finds it
            fullname = callee.fullname or None
            object_type: Type | None = None
            if isinstance(callee.node, TypeAlias):
                target = get_proper_type(callee.node.target)
                if isinstance(target, Instance):
                    fullname = target.type.fullname
            if not fullname and isinstance(callee, MemberExpr) and chk.has_type(callee.expr):
                object_type = chk.lookup_type(callee.expr)
                fullname = ec.method_fullname(object_type, callee.name)
            if fullname:
                ct = get_proper_type(ec.transform_callee_type(
                    fullname, ct, call.args, call.arg_kinds, call, call.arg_names, object_type))
    context = _return_context(chk, call)
    if isinstance(ct, Overloaded) and context is not None:
        # a generic overloaded callee in return position (``return max(xs, key=f)``): the
        # items the call's arguments fit by arity, when they agree on the formal
        found: tuple[Type, str | None, int, str] | None = None
        arg_types: list[Type] = []
        for a in call.args:
            t = chk.lookup_type_or_none(a)
            arg_types.append(t if t is not None else AnyType(TypeOfAny.special_form))
        for item in ec.plausible_overload_call_targets(arg_types, call.arg_kinds, call.arg_names, ct):
            one = _formal_in(chk, call, index, item, context)
            if one is None:
                continue
            if found is not None and not is_same_type(one[0], found[0]):
                return None  # the items disagree: mypy's error stands
            if found is None:
                found = one
        return found
    if not isinstance(ct, CallableType):
        return None
    return _formal_in(chk, call, index, ct, context)


def _return_context(chk: Any, call: CallExpr) -> Type | None:
    """The declared return type when ``call`` is a returned value itself (``return f(x)``) and
    the type context is gone: mypy infers a returned call's type variables from the return type
    (``checker.infer_context_dependent``) and, when that fails and the call without context is
    no fit either, reports the errors of the first try after it has left that context."""
    ctx = chk.expr_checker.type_context
    if ctx and ctx[-1] is not None:
        return None  # the context is there (an annotated assignment)
    fn = chk.scope.current_function()
    returns = getattr(chk, "return_types", None)
    if not isinstance(fn, FuncDef) or fn.is_generator or fn.is_coroutine or not returns:
        return None
    tree = getattr(chk, "tree", None)
    if not isinstance(tree, MypyFile):
        return None
    index: _Index = {}
    leaves: list[Statement] = []
    _collect(tree.defs, index, call.line, leaves)
    if not any(isinstance(leaf, ReturnStmt) and leaf.expr is call for leaf in leaves):
        return None
    declared: Type = returns[-1]
    return declared


def _formal_in(chk: Any, call: CallExpr, index: int, ct: CallableType,
               context: Type | None) -> tuple[Type, str | None, int, str] | None:
    """:func:`_formal_of` in the signature ``ct`` (``context``: the type context to infer its
    type variables from, when mypy's is gone)."""
    ec = chk.expr_checker
    if ct.unpack_kwargs:
        ct = ct.with_unpacked_kwargs()
    formals = map_actuals_to_formals(call.arg_kinds, call.arg_names, ct.arg_kinds, ct.arg_names,
                                     lambda j: AnyType(TypeOfAny.special_form))
    if ct.variables:
        if context is not None:
            ec.type_context.append(context)
        try:
            ct = ec.infer_function_type_arguments_using_context(ct, call)
        finally:
            if context is not None:
                ec.type_context.pop()
        if ct.variables:
            return None  # inferred from the arguments: mypy's error stands
    for f, actuals in enumerate(formals):
        if index in actuals and ct.arg_kinds[f] in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT,
                                                   ARG_STAR, ARG_STAR2):
            name = (ct.name or "").split(" of ", 1)[0] or expr_text(call.callee)
            return ct.arg_types[f], ct.arg_names[f], f, name
    return None


def _method_at(tree: MypyFile, line: int) -> FuncDef | None:
    """The method defined at ``line`` (its ``def``, or one of its parameters' lines, where
    mypy reports an incompatible parameter), in a class of the module."""
    todo: list[tuple[Statement, bool]] = [(st, False) for st in tree.defs]  # (statement, in a class body)
    while todo:
        st, in_class = todo.pop()
        end = st.end_line
        if end is not None and (st.line > line or end < line):
            continue
        if isinstance(st, ClassDef):
            todo.extend((b, True) for b in st.defs.body)
        elif isinstance(st, FuncDef):
            if in_class and (st.line == line or any(a.line == line for a in st.arguments)):
                return st
            todo.extend((b, False) for b in st.body.body)
        elif not isinstance(st, (Decorator, OverloadedFuncDef)):
            for body in statement_blocks(st):
                todo.extend((b, in_class) for b in body)
    return None


def _matching_parameter(ov: CallableType, j: int, kind: ArgKind, name: str | None) -> int | None:
    """The override's parameter that takes what the supertype's ``j``-th (``kind``,
    ``name``) does: the same position, or the same keyword-only name; None for ``*args``,
    ``**kwargs`` and where none matches (mypy's check decides)."""
    if kind in (ARG_POS, ARG_OPT):
        if j < len(ov.arg_kinds) and ov.arg_kinds[j] in (ARG_POS, ARG_OPT):
            return j
        return None
    if kind in (ARG_NAMED, ARG_NAMED_OPT) and name is not None:
        for k, (kk, nn) in enumerate(zip(ov.arg_kinds, ov.arg_names)):
            if nn == name and kk in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT):
                return k
    return None


def _without_none(t: Type | None) -> Type | None:
    """``dict[str, T] | None`` (an optional parameter or variable): the container type."""
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, UnionType):
        items = [m for m in p.items if not isinstance(get_proper_type(m), NoneType)]
        return items[0] if len(items) == 1 else t
    return t


def _dict_site(chk: Any, k: Expression, v: Expression, returned: bool,
               arg_of: tuple[CallExpr, int] | Type | None = None
               ) -> tuple[Expression, Type | None, tuple[Expression, Type] | None, str]:
    p = get_proper_type(_display_context(chk, returned, arg_of))
    if not isinstance(p, Instance) or len(p.args) != 2 or not p.type.fullname.startswith(_CONTAINER_MODULES):
        return v, None, None, ""
    return v, p.args[1], (k, p.args[0]), f"the dict value {{}} (key {expr_text(k)})"


def _method_site(chk: Any, call: CallExpr, i: int
                 ) -> tuple[Expression, Type | None, tuple[Expression, Type] | None, str]:
    """An argument of a method of a builtin container (``xs.append(a)``): the formal's type
    after mypy bound the container's type arguments."""
    arg = call.args[i]
    callee = call.callee
    assert isinstance(callee, MemberExpr)
    if _container_item(chk.lookup_type_or_none(callee.expr)) is None:
        return arg, None, None, ""  # not a builtin container's method: mypy's error stands
    ft = get_proper_type(chk.lookup_type_or_none(callee))
    if not isinstance(ft, CallableType) or any(k not in (ARG_POS, ARG_OPT) for k in call.arg_kinds):
        return arg, None, None, ""
    if i >= len(ft.arg_types) or ft.arg_kinds[i] not in (ARG_POS, ARG_OPT):
        return arg, None, None, ""
    return arg, ft.arg_types[i], None, f"the argument {{}} of {callee.name}"


def _collect(stmts: list[Statement], index: _Index, line: int, leaves: list[Statement]) -> None:
    for st in stmts:
        end = st.end_line
        if end is not None and (st.line > line or end < line):
            continue  # the line is not in this statement
        if isinstance(st, (ReturnStmt, ExpressionStmt, AssignmentStmt, OperatorAssignmentStmt)):
            leaves.append(st)
        if isinstance(st, ReturnStmt):
            if st.expr is not None:
                index.setdefault((st.expr.line, st.expr.column), (st, st.expr))
        elif isinstance(st, AssignmentStmt):
            rvalue, last = st.rvalue, st.lvalues[-1]
            if (isinstance(last, (TupleExpr, ListExpr)) and isinstance(rvalue, (TupleExpr, ListExpr))
                    and len(last.items) == len(rvalue.items)):
                # ``c, d = x, y``: mypy checks each item against its target, at the item
                for value in rvalue.items:
                    index.setdefault((value.line, value.column), (st, value))
            index.setdefault((rvalue.line, rvalue.column), (st, rvalue))
            if len(st.lvalues) > 1:
                # ``a = b = x``: the targets but the last are checked at the statement
                index.setdefault((st.line, st.column), (st, rvalue))
        elif isinstance(st, FuncDef):
            _collect(st.body.body, index, line, leaves)
        elif isinstance(st, Decorator):
            _collect(st.func.body.body, index, line, leaves)
        elif isinstance(st, OverloadedFuncDef):
            for item in st.items:
                _collect([item], index, line, leaves)
            if st.impl is not None:
                _collect([st.impl], index, line, leaves)
        elif isinstance(st, ClassDef):
            _collect(st.defs.body, index, line, leaves)
        else:
            for body in statement_blocks(st):
                _collect(body, index, line, leaves)


def _only_abstract(d: Decorator) -> bool:
    """A method whose decorators mypy removed as changing nothing of its type
    (``@abc.abstractmethod``, ``@typing.final``, ``@override``): its type is the function's."""
    return not d.decorators and not d.var.is_property
