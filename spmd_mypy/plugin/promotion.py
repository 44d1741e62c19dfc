"""Gradual typing at check time: the promotion of plain ``torch.Tensor``, and the wrapper every
check-time hook runs through.

mypy's "alt promotion" (the mechanism behind ``int`` -> native ``i64``) makes ``torch.Tensor``
a subtype of the canonical ``spmd._slots.Tensor[...]`` with any arguments, so a plain tensor
flows into typed positions and unannotated code gets no new errors.  (A ``_promote`` would
recurse: the canonical class subclasses torch.Tensor.)  It has a side effect: ``isinstance``
does not narrow a declared ``torch.Tensor`` to a subclass.  So it is on only while mypy checks
a module that meets SPMD types and off elsewhere: every check-time hook syncs it first
(:class:`Synced`), and mypy's subtype caches are reset on each switch.
It is never on while torch itself is analysed or written to the cache.

"Meets SPMD types": the module imports spmd, or it imports, directly or through other modules
of the project, a module that does (:class:`TypedImports`).  An unannotated caller of an
annotated module gets typed values (``list[Tensor[R["tp"]]]`` from a typed function, a typed
attribute): without the promotion, ``list`` being invariant, passing that list where
``list[torch.Tensor]`` is declared, or re-assigning a plain tensor to the variable, would be
new errors in code without annotations.

This module is compiled with the rest of the plugin: the wrapper runs at every hook.
"""

from __future__ import annotations

from typing import Any, Callable, Final, cast

from mypy.argmap import map_actuals_to_formals
from mypy.literals import literal_hash
from mypy.nodes import (
    ArgKind,
    ARG_POS,
    LDEF,
    AssignmentStmt,
    CallExpr,
    Expression,
    ForStmt,
    FuncDef,
    Import,
    ImportAll,
    ImportFrom,
    IndexExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    OpExpr,
    OperatorAssignmentStmt,
    RefExpr,
    StarExpr,
    Statement,
    TempNode,
    TupleExpr,
    TypeInfo,
    UnaryExpr,
)
from mypy.operators import op_methods, reverse_op_methods
from mypy.plugin import AttributeContext, FunctionContext, MethodContext
from mypy.subtypes import find_member, is_subtype
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    LiteralType,
    NoneType,
    Overloaded,
    TupleType,
    Type,
    UnionType,
    UnpackType,
    get_proper_type,
)
from mypy.typestate import type_state
from mypy.util import correct_relative_import

from .guard import RESULT, recover
from ..engine.collectives import OPS as COLLECTIVE_OPS
from ..engine.types import UNTYPED, SpmdType
from .fixed_lists import fixed_list
from .global_calls import current_function, size_names
from .memo import TreeMemo
from .mypy_types import TENSOR, TypeBuilder, lookup_type
from .statements import statement_blocks

_PROMOTED: Final = ("torch._tensor.Tensor", "torch.nn.parameter.Parameter")
# spmd's collectives, followed by Correlated like torch's ops (their hooks type each member)
_SPMD_COLLECTIVES: Final = frozenset(f"spmd.{name}" for name in COLLECTIVE_OPS)
UNION_CASES_MAX: Final = 16


class Promotion:
    """Whether the module being checked uses SPMD types, and the promotion switched to match."""

    def __init__(self, types: TypeBuilder, lookup_info: Callable[[str], TypeInfo | None],
                 on_module: Callable[[object], None],
                 modules: Callable[[], dict[str, MypyFile] | None]) -> None:
        self.types = types
        self.lookup_info = lookup_info
        self.on_module = on_module  # called with mypy's error store when the module changes
        self.module: str | None = None  # the module the last sync saw
        # the checker that sync last read ``module`` from (kept alive: compared by identity):
        # a module's hooks all hand its one checker, so the module is read once a checker
        # (two attribute reads and a comparison at every hook were its cost); None: read it
        # at the next sync (set with ``module = None`` by forget, the daemon's re-parse)
        self._api: object | None = None
        self.wanted = False  # that module uses SPMD types
        self.promoted = False  # that module meets SPMD types (uses them or imports them)
        self.on = False
        self.typed_modules: set[str] = set()  # modules with a Tensor[...] annotation
        self._imports: TreeMemo[bool] = TreeMemo(uses_spmd)
        self.typed_imports = TypedImports(modules)
        self.correlated: Correlated | None = None  # set by the plugin (it needs the hooks)
        # the functions of the module being checked that narrow a tensor (isinstance, hasattr,
        # type(x) is C): the promotion stays off in their bodies (see narrowing_in)
        self._narrowing_functions: dict[FuncDef, bool] = {}

    def sync(self, api: object) -> None:
        if api is not self._api:
            tree = getattr(api, "tree", None)
            module = getattr(tree, "fullname", None)
            if module is not None and module != self.module:
                self.module = module
                self._narrowing_functions = {}
                msg = getattr(api, "msg", None)
                self.on_module(getattr(msg, "errors", None))
                self.wanted = module in self.typed_modules or (
                    isinstance(tree, MypyFile) and self.imports_spmd(tree))
                self.promoted = self.wanted or self.typed_imports.reaches_spmd(module)
            # (a checker's tree, and so its module, never changes)
            self._api = api if module is not None else None
        if self._narrowing_functions and self.promoted:
            func = current_function(api)
            if func is not None and func in self._narrowing_functions:
                parameters = self._narrowing_functions[func]
                if not parameters:  # Parameter's as in the rest of the module
                    self._switch(_PROMOTED[1], True)
                self._off(parameters)  # (a class already in that state: no cache reset)
                return
        self.set(self.promoted)

    def forget(self) -> None:
        """The next sync reads the module afresh, even from the same checker (a file was
        parsed again: dmypy, one file edited)."""
        self.module = None
        self._api = None

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        for name in _PROMOTED:
            if not self._switch(name, on):
                return
        self.on = on

    def narrowing_in(self, api: object, parameters: bool = False) -> None:
        """Off for ``isinstance``/``hasattr``/``type(x) is C`` narrowing, for the rest of the
        function it happens in: mypy does not narrow a declared type whose class has an alt
        promotion, and it narrows a name again at every read (``narrow_declared_type``), so a
        hook switching the promotion back on between ``isinstance(t, DTensor)`` and
        ``t.to_local()`` (``u.relu()`` on another line, the ``.grad`` hook of ``p.grad``
        itself) would undo the narrowing.  In such a function a plain tensor meets typed
        positions without the promotion: the boundary watcher accepts it there (the gradual
        rule), and ops type it as untyped.  (At module level: until the next hook.)

        For isinstance only torch.Tensor's is switched off: a value narrowed to Parameter
        stays promoted, so ``[p]`` or ``y: Tensor[...] = p`` right after ``isinstance(p,
        nn.Parameter)`` still type.  ``parameters``: Parameter's too, for a value declared
        as a Parameter (``hasattr(p, "main_grad")`` on Megatron's parameters)."""
        self._off(parameters)
        func = current_function(api)
        if func is not None:
            self._narrowing_functions[func] = parameters or self._narrowing_functions.get(func, False)

    def holds_promoted(self, api: object, left: Type, right: Type) -> bool:
        """``left`` is a subtype of ``right`` with the promotion on, where the module being
        checked meets SPMD types but the promotion was off for the check that failed: before
        the module's first hook (the state is the previous module's) or after a narrowing
        (an ``isinstance`` in this function, or in the function before until a hook runs).
        There the gradual rule holds as with the promotion on: ``xs: list[Tensor[R["tp"]]] =
        plain_list`` is no error.  The promotion is back as it was after the check."""
        infos = [info for info in map(self.lookup_info, _PROMOTED) if info is not None]
        if all(info.alt_promote is not None for info in infos):
            return False  # it was on for the check: the error is mypy's own
        self.sync(api)  # (the state the rest of this function is checked with)
        if not self.promoted:
            return False
        before = [info.alt_promote for info in infos]
        try:  # (a switch resets mypy's subtype caches: the failed check's negative entry goes)
            for name in _PROMOTED:
                self._switch(name, True)
            return is_subtype(left, right)
        finally:  # and the entries made with the promotion on must not outlive it
            for info, promote in zip(infos, before):
                info.alt_promote = promote
            type_state.reset_all_subtype_caches()

    def _off(self, parameters: bool) -> None:
        for name in _PROMOTED if parameters else _PROMOTED[:1]:
            if self._switch(name, False):
                self.on = False

    def _switch(self, name: str, on: bool) -> bool:
        """Set one class's promotion; False when the canonical class is not known yet."""
        info = self.lookup_info(name)
        if info is None:
            return True
        current = info.alt_promote
        if on and current is None:
            untyped = self.types.to_instance(UNTYPED)
            if untyped is None:
                return False
            info.alt_promote = untyped
        elif not on and current is not None and current.type.fullname == TENSOR:
            info.alt_promote = None
        else:
            return True
        # every class's caches: mypy keys a subtype check by the supertype's class, so a
        # negative ``list[torch.Tensor] <: list[Tensor[R["tp"]]]`` made while the promotion
        # was off sits under ``list`` and would fail the next function's check with it on
        type_state.reset_all_subtype_caches()
        return True

    def imports_spmd(self, tree: MypyFile) -> bool:
        return self._imports.get(tree)

    def uses_spmd_types(self, tree: MypyFile | None, module: str | None) -> bool:
        return module in self.typed_modules or (tree is not None and self.imports_spmd(tree))

    def union_cases(self, ctx: Any, drop_none: bool = True) -> list[Any] | None:
        """An argument whose type is a union of typed tensors (``h`` after ``if c: h = x + b``
        under mypy's flexible redefinition) is typed member by member, as mypy does for a
        union receiver: one context per combination (at most 16), the results joined.
        None when no argument is such a union (the common case, kept cheap).

        ``drop_none``: a union with None is split into its tensors (mypy reports the None);
        off for a caller that judges such a union whole (an argument check says "may be None").

        Operands derived from one name split together (:class:`Correlated`): in
        ``for p in (a, b): p.add_(p.grad)`` the receiver and ``p.grad`` are ``a`` and
        ``a.grad``, or ``b`` and ``b.grad``, never ``a`` with ``b.grad``."""
        if not self.wanted:
            return None  # a module without SPMD types: nothing is typed
        # a method's receiver (mypy may hand a union receiver to a reflected operator: ``b *
        # h`` checks ``h.__rmul__(b)``); read by the context's class first (a getattr with a
        # default of a field the context lacks raises inside: the common call's cost)
        arg_types: list[list[Type]]
        receiver: Type | None
        cls = type(ctx)
        if cls is _FunctionContext:
            arg_types = cast(FunctionContext, ctx).arg_types or []
            receiver = None
        elif cls is _MethodContext:
            arg_types = cast(MethodContext, ctx).arg_types or []
            receiver = cast(MethodContext, ctx).type
        else:
            arg_types = getattr(ctx, "arg_types", None) or []
            receiver = getattr(ctx, "type", None)
        if not self._has_alternatives(receiver, arg_types):
            return None
        slots: list[tuple[int, int, Type]] = [(-1, -1, receiver)] if receiver is not None else []
        slots += [(i, j, t) for i, group in enumerate(arg_types) for j, t in enumerate(group)]
        split: dict[tuple[int, int], list[Type]] = {}  # (-1, -1): the receiver
        for i, j, t in slots:
            items = self.types.alternatives(t)
            if items is not None:
                # ``g: Tensor[P["tp"]] | None`` (``p.grad``): mypy reports the None, the rule
                # checks the tensor (was unchecked: torch.relu(g) only mypy's [arg-type])
                if drop_none:
                    items = [m for m in items if type(get_proper_type(m)) is not NoneType]
                members = [self.types.from_type(m) for m in items]
                if members and all(m is not None for m in members) and any(members):
                    split[(i, j)] = items
        if not split:
            return None
        joint: dict[tuple[int, int], list[dict[tuple[int, int], Type]]] = {}
        if len(slots) > 1 and self.correlated is not None:
            joint = self.correlated.groups(ctx, slots, split)
        choices: list[list[dict[tuple[int, int], Type]]] = []
        for key, items in split.items():
            if key in joint:  # the first slot of a group of operands derived from one name
                choices.append(joint[key])
            elif not any(key in option for options in joint.values() for option in options):
                choices.append([{key: m} for m in items])
        combos: list[dict[tuple[int, int], Type]] = [{}]
        for options in choices:
            combos = [{**c, **o} for c in combos for o in options]
            if len(combos) > UNION_CASES_MAX:
                return None
        cases = []
        for combo in combos:  # an AttributeContext has a receiver and no arguments
            new = [list(group) for group in arg_types]
            fields: dict[str, object] = {"arg_types": new} if hasattr(ctx, "arg_types") else {}
            for (i, j), m in combo.items():
                if i < 0:
                    fields["type"] = m
                else:
                    new[i][j] = m
            cases.append(ctx._replace(**fields))
        return cases

    def _has_alternatives(self, receiver: Type | None, arg_types: list[list[Type]]) -> bool:
        """Whether any argument (or the receiver) is a union or a join of typed tensors
        (TypeBuilder.members tells an instance seen before by its identity)."""
        types = self.types
        if receiver is not None and types.has_alternatives(receiver):
            return True
        for group in arg_types:
            for t in group:
                if types.has_alternatives(t):
                    return True
        return False


# the hook contexts' classes, compared by identity (C statics in the compiled plugin)
_FunctionContext: Final = FunctionContext
_MethodContext: Final = MethodContext

# how an operand is derived from a name (Correlated.derivation)
_NAME: Final = 0  # the name itself
_ATTRIBUTE: Final = 1  # x.grad, x.data, x.T, x.mT, x.H, x.mH
_CALL: Final = 2  # x.detach(), x.mul(lr), torch.sign(x): a tensor method or torch function
_UNARY: Final = 3  # -x, +x
_BINARY: Final = 4  # x * lr, lr * x, x - lr * x.grad, x * w: an operator of derived operands,
# scalars and tensors of one type
_DERIVED_ATTRIBUTES: Final = frozenset(("grad", "data", "T", "mT", "H", "mH"))
_UNARY_METHODS: Final = {"-": "__neg__", "+": "__pos__"}
_BEHIND_ANY_DEPTH: Final = 8  # operators and locals followed by Correlated.type_behind_any
# torch functions whose hooks are no op rules (checkpoint types the function it runs, a list
# of tensors is no derived operand): not followed
_NOT_OPS: Final = ("torch.distributed.", "torch.autograd.", "torch.utils.", "torch._foreach_")
_ALIAS_DEPTH: Final = 3  # g = p.grad; h = g * lr: locals followed to what they were assigned

Slot = tuple[int, int]  # (-1, -1): the receiver; else (formal, actual)


class Derived:
    """An operand as computed from a name: the name itself, or one step (an attribute, a
    method or torch function, a sign, an operator) on operands so computed (``left``: the
    receiver; ``right``: an operator's other side; ``args``: a call's arguments; None for a
    part whose type is the same whatever the name's member: a scalar, a dim, a tensor of one
    type)."""

    def __init__(self, kind: int, node: Expression, name: str = "",
                 left: Derived | None = None, right: Derived | None = None,
                 args: list[Derived | None] | None = None, reflected: bool = False) -> None:
        self.kind = kind
        self.node = node
        self.name = name  # the attribute, method, or function the hooks know the step by
        self.left = left
        self.right = right
        self.args = args
        self.reflected = reflected  # an operator typed by the right side's method (lr * x)


class Correlated:
    """Operands of one call derived from the same name are split together.

    mypy types the loop variable of ``for p in (self.a, self.b)`` by the union of the items,
    and ``p.grad`` by the union of their gradients' types; split independently, the call
    ``p.add_(p.grad, alpha=-lr)`` would be typed for ``a`` with ``b``'s gradient too, a
    pairing no iteration makes.  Each operand computed from the name and from values whose
    type does not depend on it (attributes ``.grad``/``.data``/``.T``, tensor methods and
    torch functions, signs and operators, with scalars, dims or tensors of one type beside:
    ``p.grad.detach() * lr``, ``p - lr * p.grad``, ``torch.sign(p.grad)``, ``g`` after
    ``g = p.grad`` in the same pass) takes, for each member of the name's union, the type it
    has when the name has that member's type, typed by the plugin's own hooks (``.grad`` is
    the engine's dual, as for a name of one type), run quietly: their errors are reported
    where mypy typed the operand.  A member whose derived types are not among those mypy
    gave the operands is left out (mypy split a union receiver itself, or narrowed an
    operand); when an operand cannot be derived, or no member is left, the operands split
    independently, as before.  Asked only when an operand is a union
    (:meth:`Promotion.union_cases`).  Names iterated together over tuples are one group::

        for p, g in zip((a, b), (ga, gb)):      iterations  {p: a, g: ga}  {p: b, g: gb}
        for i, (p, g) in enumerate(zip(ps, gs))   (ps, gs of tuple types: by position)

    each operand computed from them takes, per iteration, the type it has with that
    iteration's items (never ``a`` with ``gb``); a value holding no tensor read off one of
    them (``mp.to(p.dtype)``, ``g.view(p.shape)``) is one value whatever the iteration.
    spmd's collectives are followed as torch's ops are (``g = spmd.all_reduce(p.grad, "dp",
    src=P, dst=R)`` then ``p.add_(g)``).  Not followed: subscripts, lists (their items have
    one type)."""

    def __init__(self, types: TypeBuilder, hooks: Any) -> None:
        self.types = types
        self.hooks = hooks  # the plugin's HookDispatch: the hooks of attributes and methods

    def groups(self, ctx: Any, slots: list[tuple[int, int, Type]],
               split: dict[Slot, list[Type]]) -> dict[Slot, list[dict[Slot, Type]]]:
        """For each group of operands derived from one name (at least one of them a union to
        split), keyed by its first union operand: one assignment of the group's union
        operands per member of the name."""
        try:
            with _Quiet(ctx.api):
                return self._groups(ctx, slots, split)
        except Exception:  # noqa: BLE001 - never crash mypy: split independently
            return {}

    def _groups(self, ctx: Any, slots: list[tuple[int, int, Type]],
                split: dict[Slot, list[Type]]) -> dict[Slot, list[dict[Slot, Type]]]:
        api = ctx.api
        receiver, other = self._receiver(ctx)
        by_root: dict[object, list[tuple[Slot, Expression, Derived, Type]]] = {}
        for i, j, t in slots:
            key = (i, j)
            if key not in split and self.types.from_type(t) is None:
                continue  # neither a union to split nor a typed tensor (a scalar, a list)
            if i < 0:
                e = receiver
            else:
                e = ctx.args[i][j] if i < len(ctx.args) and j < len(ctx.args[i]) else None
                if isinstance(e, TempNode):  # an operator's other side
                    e = other
            if e is None:
                continue
            found = self.derivation(e, ctx)
            if found is not None:
                by_root.setdefault(found[0], []).append((key, found[1], found[2], t))
        out: dict[Slot, list[dict[Slot, Type]]] = {}
        for root, members in by_root.items():
            keys = [m[0] for m in members if m[0] in split]
            # one operand alone splits by the members of its join, unless it is computed from
            # names iterated together: then by iteration, each the iteration's own type (the
            # join of S(0) and P forgot the dim: g.sum(0) in the S(0) iteration reduces it)
            if (len(members) < 2 and not isinstance(root, ForStmt)) or not keys:
                continue
            options = self._joint(ctx, root, members, split)
            if options is not None:
                out[keys[0]] = options
        return out

    def _joint(self, ctx: Any, root: object, members: list[tuple[Slot, Expression, Derived, Type]],
               split: dict[Slot, list[Type]]) -> list[dict[Slot, Type]] | None:
        """One assignment of the union operands per member of the name (the name's members
        are those of an operand that is the name itself: its type at this call, as mypy splits
        a union receiver itself; else of the name's type), or per iteration of a loop over
        names iterated together."""
        types = self.types
        bindings: list[dict[object, Type]]
        if isinstance(root, ForStmt):
            iterations = self._iterations(ctx, root)
            if iterations is None:
                return None
            bindings = iterations
        else:
            base: Type | None = None
            for member in members:
                if member[2].kind == _NAME:
                    base = member[3]
                    break
            if base is None:
                base = lookup_type(ctx.api, members[0][1])
                if base is None:
                    return None
            candidates = types.alternatives(base) or [base]
            if any(types.from_type(c) is None for c in candidates):
                return None
            bindings = [{root: c} for c in candidates]
        allowed: list[dict[SpmdType, Type]] = []  # each operand's possible types, by SPMD type
        for member in members:
            table: dict[SpmdType, Type] = {}
            for item in split.get(member[0]) or [member[3]]:
                st = types.from_type(item)
                if st is not None and st not in table:
                    table[st] = item
            allowed.append(table)
        options: list[dict[Slot, Type]] = []
        for binding in bindings:
            option: dict[Slot, Type] = {}
            for member, table in zip(members, allowed):
                key = member[0]
                typed = self.derive(ctx, binding, member[2])
                if typed is None:
                    return None  # not derivable: independent splitting
                derived, derived_type = typed
                chosen = table.get(derived)
                if chosen is None and any(_refines(derived, st) for st in table):
                    # mypy's join forgot shard dims or axes: the iteration's own type
                    option[key] = derived_type
                    continue
                if chosen is None:
                    option = {}  # not this member (mypy says the operand is something else)
                    break
                if key in split:
                    option[key] = chosen
            if option and option not in options:
                options.append(option)
        return options or None

    def derivation(self, e: Expression, ctx: Any) -> tuple[object, Expression, Derived] | None:
        """The name ``e`` is computed from (its ``literal_hash``, as mypy's binder keys a
        narrowed expression, and one occurrence), and how; None for an operand computed
        otherwise (from two names of several types, through a subscript or a user call)."""
        roots: list[tuple[object, Expression]] = []
        plan = self._plan(e, ctx, roots, 0, ctx.context.line)
        if plan is None or not roots:
            return None
        keys = [self._loop_of(ctx, r[1]) or r[0] for r in roots]
        if any(k != keys[0] for k in keys):
            return None
        return keys[0], roots[0][1], plan

    def _loop_of(self, ctx: Any, name: Expression) -> ForStmt | None:
        """The loop that binds local ``name`` (bound nowhere else in the function) together
        with other names: ``for p, g in ...`` (the names' group), else None."""
        if not isinstance(name, NameExpr) or name.kind != LDEF:
            return None
        func = current_function(ctx.api)
        if func is None:
            return None
        facts = size_names(func)
        return facts.joint_loops.get(name.name) if facts.bindings.get(name.name) == 1 else None

    def _iterations(self, ctx: Any, loop: ForStmt) -> list[dict[object, Type]] | None:
        """The names a loop binds, by ``literal_hash``, with their types in each iteration;
        None when the iterations are not known one by one (a list, a generator)."""
        values = self._iteration_values(ctx, loop.expr)
        if values is None:
            return None
        out: list[dict[object, Type]] = []
        for value in values:
            binding: dict[object, Type] = {}
            if not _bind(loop.index, value, binding):
                return None
            out.append(binding)
        return out

    def _iteration_values(self, ctx: Any, e: Expression) -> list[_Value] | None:
        """What ``for ... in e`` binds in each iteration: ``zip`` of tuples item by item,
        ``enumerate`` of those with a counter (None: no tensor), a tuple's items, a list
        display's, those of a local list certain to hold its display (:func:`fixed_list`:
        mypy gives a list one item type, the join)."""
        if isinstance(e, CallExpr) and isinstance(e.callee, RefExpr) and e.args:
            callee = e.callee.fullname
            if callee == "builtins.zip":
                if any(k != ARG_POS and name != "strict" for k, name in zip(e.arg_kinds, e.arg_names)):
                    return None  # zip(*xs): the columns are not known one by one
                columns = [self._iteration_values(ctx, a) for a, k in zip(e.args, e.arg_kinds)
                           if k == ARG_POS]
                if any(c is None for c in columns):
                    return None
                return [tuple(c[i] for c in columns if c is not None)
                        for i in range(min(len(c) for c in columns if c is not None))]
            if callee == "builtins.enumerate" and e.arg_kinds[0] == ARG_POS:
                inner = self._iteration_values(ctx, e.args[0])
                return None if inner is None else [(None, v) for v in inner]
            return None
        p = get_proper_type(lookup_type(ctx.api, e))
        if isinstance(p, TupleType) and not any(isinstance(get_proper_type(i), UnpackType) for i in p.items):
            return list(p.items)
        display: ListExpr | None = None
        if isinstance(e, ListExpr):
            display = e  # ``zip([a, b], [ga, gb])``: the display's items
        elif isinstance(e, NameExpr) and e.kind == LDEF:
            # a local list certain to hold its display (fixed_lists): the display's items
            func = current_function(ctx.api)
            display = fixed_list(func, e.name) if func is not None else None
        if display is None or any(isinstance(i, StarExpr) for i in display.items):
            return None
        items: list[_Value] = []
        for item in display.items:
            t = lookup_type(ctx.api, item)
            if t is None:
                return None
            items.append(t)
        return items

    def _plan(self, e: Expression, ctx: Any, roots: list[tuple[object, Expression]],
              depth: int, line: int) -> Derived | None:
        """How ``e`` is computed (``line``: where it is read), the names it is computed from
        appended to ``roots``."""
        api = ctx.api
        if isinstance(e, MemberExpr) and e.name in _DERIVED_ATTRIBUTES:
            inner = self._plan(e.expr, ctx, roots, depth, line)
            return Derived(_ATTRIBUTE, e, e.name, inner) if inner is not None else None
        if isinstance(e, CallExpr):
            return self._call_plan(e, ctx, roots, depth, line)
        if isinstance(e, UnaryExpr):
            method = _UNARY_METHODS.get(e.op)
            if method is None:
                return None
            inner = self._plan(e.expr, ctx, roots, depth, line)
            return Derived(_UNARY, e, method, inner) if inner is not None else None
        if isinstance(e, OpExpr):
            method = op_methods.get(e.op)
            if method is None:
                return None
            ok_left, left = self._operand(e.left, ctx, roots, depth, line)
            ok_right, right = self._operand(e.right, ctx, roots, depth, line)
            if not ok_left or not ok_right or (left is None and right is None):
                return None
            reflected = left is None and self.types.from_type(lookup_type(api, e.left)) is None
            if reflected:  # lr * x is x.__rmul__(lr)
                method = reverse_op_methods.get(method, "")
                if not method:
                    return None
            return Derived(_BINARY, e, method, left, right, reflected=reflected)
        if isinstance(e, NameExpr) and e.kind == LDEF and depth < _ALIAS_DEPTH:
            aliased = self._alias(ctx, e, depth, line)
            if aliased is not None:
                roots.extend(aliased[0])
                return aliased[1]
        h = literal_hash(e)
        if h is None:
            return None
        roots.append((h, e))
        return Derived(_NAME, e)

    def _call_plan(self, e: CallExpr, ctx: Any, roots: list[tuple[object, Expression]],
                   depth: int, line: int) -> Derived | None:
        """A tensor method called on a derived operand, or a torch function; its arguments
        derived too, or of one type whatever the name's member (dims, scalars, dtypes, a
        tensor of one type)."""
        callee = e.callee
        receiver: Derived | None = None
        if isinstance(callee, RefExpr) and callee.fullname.startswith("torch."):
            name = callee.fullname  # torch.sign(x), F.normalize(x): a torch op by its name
            if name.startswith(_NOT_OPS):
                return None
        elif isinstance(callee, RefExpr) and callee.fullname in _SPMD_COLLECTIVES:
            name = callee.fullname  # g = spmd.all_reduce(p.grad, "dp", src=P, dst=R)
        elif isinstance(callee, MemberExpr):  # x.mul(lr): a tensor method
            ok, receiver = self._operand(callee.expr, ctx, roots, depth, line)
            if not ok or (receiver is None
                          and self.types.from_type(lookup_type(ctx.api, callee.expr)) is None):
                return None
            name = f"{TENSOR}.{callee.name}"
        else:
            return None
        args: list[Derived | None] = []
        for a in e.args:
            ok, plan = self._operand(a, ctx, roots, depth, line)
            if not ok:
                return None
            args.append(plan)
        if receiver is None and not any(a is not None for a in args):
            return None  # nothing derived: not an operand of the name
        return Derived(_CALL, e, name, receiver, None, args)

    def _operand(self, e: Expression, ctx: Any, roots: list[tuple[object, Expression]],
                 depth: int, line: int) -> tuple[bool, Derived | None]:
        """A side of an operator, an argument or a receiver in a derived operand: (True, None)
        when its type is the same whatever the name's member (a scalar, a dim, a tensor mypy
        gave one type), (True, how) when derived from the name, (False, None) for neither."""
        t = lookup_type(ctx.api, e)
        if t is not None and not self._varies(t) and (
                self._tensor_free(t) or not self._reads_joint_loop(ctx, e)):
            return True, None  # a value of one type; a dtype, shape or size read off a
            # loop variable (``mp.to(p.dtype)``) holds no SPMD type, whatever the iteration
        plan = self._plan(e, ctx, roots, depth, line)
        return plan is not None, plan

    def _reads_joint_loop(self, ctx: Any, e: Expression) -> bool:
        """Whether ``e`` reads a name of a loop over names iterated together (its type,
        mypy's join of the iterations' items, may be less precise than each iteration's)."""
        if isinstance(e, NameExpr):
            return self._loop_of(ctx, e) is not None
        if isinstance(e, MemberExpr):
            return self._reads_joint_loop(ctx, e.expr)
        if isinstance(e, UnaryExpr):
            return self._reads_joint_loop(ctx, e.expr)
        if isinstance(e, OpExpr):
            return self._reads_joint_loop(ctx, e.left) or self._reads_joint_loop(ctx, e.right)
        if isinstance(e, CallExpr):
            return (self._reads_joint_loop(ctx, e.callee)
                    or any(self._reads_joint_loop(ctx, a) for a in e.args))
        return False

    def _tensor_free(self, t: Type, depth: int = 0) -> bool:
        """Whether no value of type ``t`` holds a tensor (a dtype, a device, an int, a
        ``torch.Size``, a tuple or union of those); False for Any, a callable, anything
        not known."""
        p = get_proper_type(t)
        if isinstance(p, Instance):
            return self.types.from_type(p) is None and (not p.args or depth < 4 and all(
                self._tensor_free(a, depth + 1) for a in p.args))
        if isinstance(p, (NoneType, LiteralType)):
            return True
        if isinstance(p, (TupleType, UnionType)) and depth < 4:
            return all(self._tensor_free(i, depth + 1) for i in p.items)
        return False

    def _varies(self, t: Type) -> bool:
        """Whether a value of type ``t`` may be typed tensors of different types (a union or a
        join of them, also as a container's items)."""
        p = get_proper_type(t)
        if isinstance(p, UnionType):
            seen: set[SpmdType] = set()
            for item in p.items:
                if self._varies(item):
                    return True
                st = self.types.from_type(item)
                if st is not None:
                    seen.add(st)
            return len(seen) > 1
        if isinstance(p, Instance):
            if self.types.from_type(p) is not None:
                return self.types.members(p) is not None
            return any(self._varies(a) for a in p.args)
        if isinstance(p, TupleType):
            return any(self._varies(i) for i in p.items)
        return False

    def _alias(self, ctx: Any, name: NameExpr, depth: int, line: int
               ) -> tuple[list[tuple[object, Expression]], Derived] | None:
        """A local assigned once, from an operand derived from another local, as that
        operand (``g = p.grad`` ... ``p.add_(g)``: ``g`` is ``p.grad``), when the value read is
        the one assigned in the same pass as the call's: the assignment is a statement of the
        block that holds the call's statement, before it, and the local it is derived from is
        bound once in the function (a parameter, a loop variable), not between the two; a
        name bound more than once, also in a nested definition, or the function's ``match``
        statements, leave it a name (mypy's redefinition renaming makes a same-block re-
        assignment another name)."""
        func = current_function(ctx.api)
        if func is None:
            return None
        facts = size_names(func)
        if facts.bindings.get(name.name) != 1:
            return None
        value = facts.values.get(name.name)
        if value is None:
            return None
        where = _statement_assigning(func.body.body, value)
        if where is None:
            return None
        block, k = where
        first = block[k].line
        last = block[k].end_line or first
        later: Statement | None = None
        for st in block:
            if st.line <= line <= (st.end_line or st.line):
                later = st
                break
        if later is None or later.line <= last:
            return None  # the call is not in a later statement of the assignment's block
        roots: list[tuple[object, Expression]] = []
        plan = self._plan(value, ctx, roots, depth + 1, first)
        if plan is None:
            return None
        end = later.end_line or later.line
        for _, root in roots:
            if not isinstance(root, NameExpr) or root.kind != LDEF:
                return None  # an attribute (self.w) may be assigned in between
            if facts.bindings.get(root.name) != 1 or first <= facts.defined_at.get(root.name, end + 1) <= end:
                return None
        return roots, plan

    def type_behind_any(self, ctx: Any, e: Expression, depth: int = 0) -> Type | None:
        """The type of an operator mypy typed Any because one side is Any, computed by the
        operator's hook on the typed side (the Any side an untyped operand, as a call's Any
        argument is)::

            p * self.scale          self.scale: Any (set in an unannotated __init__)
            y = p * self.scale      y: Any; a later torch.relu(y) reads y's value

        mypy punts on an Any operand before any hook runs (check_op_reversible), so
        without this the typed side's type is lost.  None when nothing typed is found.
        The operator's own error (``p ** self.k``: P through pow) is reported at the
        operator, once however often its value is read (mypy drops a repeated message on a
        line)."""
        try:
            return self._behind_any(ctx, e, depth)
        except Exception:  # noqa: BLE001 - never crash mypy: the operand stays untyped
            return None

    def _behind_any(self, ctx: Any, e: Expression, depth: int) -> Type | None:
        api = ctx.api
        t = lookup_type(api, e)
        if t is not None and self.types.from_type(t) is not None:
            return t
        if depth > _BEHIND_ANY_DEPTH or t is None or not isinstance(get_proper_type(t), AnyType):
            return None
        if isinstance(e, OpExpr):
            method = op_methods.get(e.op)
            if method is None:
                return None
            left = self._behind_any(ctx, e.left, depth + 1)
            if left is not None:  # x * any
                hook = _unwrap(self.hooks.get_method_hook(f"{TENSOR}.{method}"))
                right = self._behind_any(ctx, e.right, depth + 1) or lookup_type(api, e.right)
                if hook is None or right is None:
                    return None
                return self._typed(_operator(hook, api, e, left, e.right, right))
            right = self._behind_any(ctx, e.right, depth + 1)
            reflected = reverse_op_methods.get(method)
            if right is None or reflected is None:
                return None
            hook = _unwrap(self.hooks.get_method_hook(f"{TENSOR}.{reflected}"))
            left_any = lookup_type(api, e.left)
            if hook is None or left_any is None:
                return None
            return self._typed(_operator(hook, api, e, right, e.left, left_any))  # any * x
        if isinstance(e, UnaryExpr):
            method = _UNARY_METHODS.get(e.op)
            inner = self._behind_any(ctx, e.expr, depth + 1) if method is not None else None
            hook = _unwrap(self.hooks.get_method_hook(f"{TENSOR}.{method}")) if inner is not None else None
            if hook is None or inner is None:
                return None
            return self._typed(_unary(hook, api, e, inner))
        if isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr):
            return self._method_behind_any(ctx, e, e.callee, depth)
        if isinstance(e, NameExpr) and e.kind == LDEF:
            # a local bound once in the function, from such an operator: its only value
            func = current_function(api)
            if func is None:
                return None
            facts = size_names(func)
            value = facts.values.get(e.name)
            if facts.bindings.get(e.name) != 1 or value is None or value.line >= e.line:
                return None
            return self._behind_any(ctx, value, depth + 1)
        return None

    def _method_behind_any(self, ctx: Any, e: CallExpr, callee: MemberExpr, depth: int) -> Type | None:
        """A tensor method called on such an operator (``(p * self.scale).softmax(-1)``, or on
        a local assigned one): mypy calls no hook for a method of an ``Any``, so the method's
        hook runs here on the typed side's type (its error reported at the call), with the
        arguments as mypy typed them and mapped to the method's parameters."""
        api = ctx.api
        receiver = self._behind_any(ctx, callee.expr, depth + 1)
        if receiver is None:
            return None
        instance = get_proper_type(receiver)
        if not isinstance(instance, Instance):
            return None
        hook = _unwrap(self.hooks.get_method_hook(f"{TENSOR}.{callee.name}"))
        if hook is None:
            return None
        actual: list[Type] = []
        for a in e.args:
            t = lookup_type(api, a)
            if t is None:
                return None
            actual.append(t)
        formals = _formals(find_member(callee.name, instance, instance), e, actual)
        if formals is None:
            return None
        names, mapping = formals
        arg_types, arg_kinds, arg_names, args = _by_formal(e, actual, mapping)
        return self._typed(hook(MethodContext(instance, arg_types, arg_kinds, names, arg_names,
                                              receiver, args, e, api)))

    def derive(self, ctx: Any, member: dict[object, Type], plan: Derived) -> tuple[SpmdType, Type] | None:
        """The SPMD type (and mypy type) of the operand ``plan`` computes when its names
        have the types of ``member`` (by ``literal_hash``); None when a step has no typed
        result."""
        t = self._derive(ctx, member, plan)
        st = self.types.from_type(t) if t is not None else None
        return (st, t) if st is not None and t is not None else None

    def _derive(self, ctx: Any, member: dict[object, Type], plan: Derived) -> Type | None:
        kind = plan.kind
        if kind == _NAME:
            return member.get(literal_hash(plan.node))
        api = ctx.api
        node = plan.node
        if kind == _CALL:
            return self._derive_call(ctx, member, plan)
        left = self._derive(ctx, member, plan.left) if plan.left is not None else None
        if kind == _ATTRIBUTE:
            hook = _unwrap(self.hooks.get_attribute_hook(f"{TENSOR}.{plan.name}"))
            if hook is None or left is None:
                return None
            default = lookup_type(api, node) or left
            return self._typed(hook(AttributeContext(get_proper_type(left), default, False, node, api)))
        hook = _unwrap(self.hooks.get_method_hook(f"{TENSOR}.{plan.name}"))
        if hook is None:
            return None
        if kind == _BINARY and isinstance(node, OpExpr):
            right = self._derive(ctx, member, plan.right) if plan.right is not None else None
            if plan.right is not None and right is None or plan.left is not None and left is None:
                return None
            receiver: Type | None
            other_type: Type | None
            if plan.reflected:  # lr * x: x.__rmul__(lr)
                receiver, other, other_type = right, node.left, None
            else:  # x * y, x * lr, w * x: the left side's method
                receiver, other, other_type = left or lookup_type(api, node.left), node.right, right
            if other_type is None:
                other_type = lookup_type(api, other)
            if receiver is None or other_type is None:
                return None
            return self._typed(_operator(hook, api, node, receiver, other, other_type))
        if left is None:
            return None
        return self._typed(_unary(hook, api, node, left))

    def _derive_call(self, ctx: Any, member: dict[object, Type], plan: Derived) -> Type | None:
        """A derived call typed by its hook, given the arguments as mypy would (by formal)."""
        node = plan.node
        if not isinstance(node, CallExpr):
            return None
        api = ctx.api
        method = plan.name.startswith(TENSOR + ".")
        receiver: Type | None = None
        if plan.left is not None:
            receiver = self._derive(ctx, member, plan.left)
            if receiver is None:
                return None
        elif method and isinstance(node.callee, MemberExpr):  # a receiver of one type
            receiver = lookup_type(api, node.callee.expr)
        actual: list[Type] = []
        for a, sub in zip(node.args, plan.args or []):
            t = self._derive(ctx, member, sub) if sub is not None else lookup_type(api, a)
            if t is None:
                return None
            actual.append(t)
        if len(actual) != len(node.args):
            return None
        formals = _formals(lookup_type(api, node.callee), node, actual)
        if formals is None:
            return None
        names, mapping = formals
        arg_types, arg_kinds, arg_names, args = _by_formal(node, actual, mapping)
        typed = [t for t in [receiver] + actual if t is not None and self.types.from_type(t) is not None]
        if not typed:
            return None
        default = typed[0]  # a typed tensor: the hook gives it the op's type (typed_result)
        if method:
            if receiver is None:
                return None
            hook = _unwrap(self.hooks.get_method_hook(plan.name))
            if hook is None:
                return None
            return self._typed(hook(MethodContext(get_proper_type(receiver), arg_types, arg_kinds, names,
                                                  arg_names, default, args, node, api)))
        hook = _unwrap(self.hooks.get_function_hook(plan.name))
        if hook is None or not (plan.name.startswith("torch.") or plan.name in _SPMD_COLLECTIVES):
            return None
        return self._typed(hook(FunctionContext(arg_types, arg_kinds, names, arg_names, default, args,
                                                node, api)))

    def _typed(self, t: Type) -> Type | None:
        """The typed tensor a hook's result holds (``Tensor[P["tp"]] | None`` for ``.grad``)."""
        if self.types.from_type(t) is not None:
            return t
        p = get_proper_type(t)
        if not isinstance(p, UnionType):
            return None
        found: Type | None = None
        seen: SpmdType | None = None
        for item in p.items:
            st = self.types.from_type(item)
            if st is None:
                continue
            if found is not None and st != seen:
                return None  # two types: not one derived operand
            found, seen = item, st
        return found

    def _receiver(self, ctx: Any) -> tuple[Expression | None, Expression | None]:
        """A method call's receiver expression, and an operator's other side (which mypy hands
        as a TempNode when it split a union itself), as the op hooks read them; None where it
        cannot be told."""
        if not hasattr(ctx, "type") or not hasattr(ctx, "args"):
            return None, None
        c = ctx.context
        args = ctx.args
        first = args[0][0] if args and args[0] else None
        if isinstance(c, CallExpr):
            return (c.callee.expr if isinstance(c.callee, MemberExpr) else None), None
        if isinstance(c, OpExpr):
            if first is c.right:
                return c.left, c.right
            if first is c.left:  # a reflected operator: ``lr * x`` is ``x.__rmul__(lr)``
                return c.right, c.left
            if isinstance(first, TempNode):
                # mypy hands the left side as a TempNode to the reflected method (``t * t``
                # checks ``t.__rmul__`` with the left side split), and a split right side to
                # the forward one (when splitting the left alone failed): their types decide,
                # the reflected method where both fit
                left = self._kinds(lookup_type(ctx.api, c.left))
                right = self._kinds(lookup_type(ctx.api, c.right))
                mine = self._kinds(ctx.type)
                its = self._kinds(first.type)
                if left is not None and right is not None and mine and its:
                    if mine <= right and its <= left:
                        return c.right, c.left
                    if mine <= left and its <= right:
                        return c.left, c.right
            return None, None
        if isinstance(c, OperatorAssignmentStmt):
            return c.lvalue, c.rvalue
        if isinstance(c, IndexExpr):
            return c.base, None
        if isinstance(c, UnaryExpr):
            return c.expr, None
        return None, None

    def _kinds(self, t: Type | None) -> set[SpmdType] | None:
        """The SPMD types a value of type ``t`` may have."""
        if t is None:
            return None
        out: set[SpmdType] = set()
        for item in self.types.alternatives(t) or [t]:
            st = self.types.from_type(item)
            if st is not None:
                out.add(st)
        return out


class _Quiet:
    """Errors reported inside the block are dropped: the derivations re-run hooks that have
    reported on the same operands already (where mypy typed them).  The hooks report past
    mypy's error watchers (CallTyper.report), so the error store itself is rolled back."""

    def __init__(self, api: Any) -> None:
        store = getattr(getattr(api, "msg", None), "errors", None)
        self.infos: dict[str, list[Any]] | None = getattr(store, "error_info_map", None)
        self.file: str | None = getattr(store, "file", None)
        self.count = -1  # -1: the file had no entry (one made in the block is removed)

    def __enter__(self) -> None:
        if self.infos is not None and self.file is not None and self.file in self.infos:
            self.count = len(self.infos[self.file])

    def __exit__(self, *_: object) -> None:
        if self.infos is None or self.file is None:
            return
        infos = self.infos.get(self.file)
        if infos is None:
            return
        if self.count < 0:
            del self.infos[self.file]
        elif len(infos) > self.count:
            del infos[self.count:]


def _statement_assigning(stmts: list[Statement], value: Expression
                         ) -> tuple[list[Statement], int] | None:
    """The block and index of the assignment ``name = value`` (not in nested definitions)."""
    for k, st in enumerate(stmts):
        if isinstance(st, AssignmentStmt) and st.rvalue is value:
            return stmts, k
        for block in statement_blocks(st):
            found = _statement_assigning(block, value)
            if found is not None:
                return found
    return None


def _refines(derived: SpmdType, joined: SpmdType) -> bool:
    """``derived`` is ``joined`` made more precise: mypy's join of differently typed tensors
    (the items of ``zip((a, b), ...)``) keeps V for S(i), and leaves out an axis only some
    of them are typed on."""
    if derived.spec != joined.spec or derived.failed != joined.failed:
        return False
    mine = derived.as_dict()
    return all(axis in mine and (mine[axis] == lt or mine[axis].forget_dim() == lt)
               for axis, lt in joined.axes)


# One iteration's value: a type, a tuple of values (zip, enumerate), None (a counter)
_Value = Any


def _bind(target: Expression, value: _Value, binding: dict[object, Type]) -> bool:
    """Bind a loop target to one iteration's value (False: they do not fit)."""
    if isinstance(target, NameExpr):
        if value is not None and not isinstance(value, tuple):
            h = literal_hash(target)
            if h is None:
                return False
            binding[h] = value
        return True
    if isinstance(target, TupleExpr):
        p = get_proper_type(value) if isinstance(value, Type) else None
        if isinstance(p, TupleType):  # for p, g in ((a, ga), (b, gb)): a tuple of pairs
            value = tuple(p.items)
        if not isinstance(value, tuple) or len(value) != len(target.items):
            return False
        return all(_bind(t, v, binding) for t, v in zip(target.items, value))
    return False


def _by_formal(call: CallExpr, actual: list[Type], mapping: list[list[int]]
               ) -> tuple[list[list[Type]], list[list[ArgKind]], list[list[str | None]],
                          list[list[Expression]]]:
    """The call's argument types, kinds, names and expressions grouped by parameter (the
    ``mapping`` of :func:`_formals`), as a hook's context holds them."""
    return ([[actual[i] for i in m] for m in mapping],
            [[call.arg_kinds[i] for i in m] for m in mapping],
            [[call.arg_names[i] for i in m] for m in mapping],
            [[call.args[i] for i in m] for m in mapping])


def _formals(callee: Type | None, call: CallExpr, actual: list[Type]
             ) -> tuple[list[str | None], list[list[int]]] | None:
    """The callee's parameter names and the call's arguments by parameter, as mypy hands them
    to a hook (``read_reduction`` and ``read_move`` find dims by name); for an overloaded
    callee, the first variant that takes every argument."""
    p = get_proper_type(callee)
    if isinstance(p, UnionType) and p.items:  # a method of a union receiver: one per member
        p = get_proper_type(p.items[0])
    variants: list[CallableType] = []
    if isinstance(p, CallableType):
        variants = [p]
    elif isinstance(p, Overloaded):
        variants = list(p.items)
    n = len(call.args)
    for sig in variants:
        try:
            mapping = map_actuals_to_formals(call.arg_kinds, call.arg_names, sig.arg_kinds, sig.arg_names,
                                             lambda i: actual[i])
        except Exception:  # noqa: BLE001 - an argument list mypy would reject: try the next
            continue
        used = sorted(i for m in mapping for i in m)
        required = all(m or not k.is_required() for m, k in zip(mapping, sig.arg_kinds))
        if used == list(range(n)) and required:
            return list(sig.arg_names), mapping
    return None


def _operator(hook: Any, api: Any, node: Expression, receiver: Type, other: Expression,
              other_type: Type) -> Type:
    """What the hook of an operator's method gives ``receiver <op> other`` (mypy's call)."""
    return hook(MethodContext(get_proper_type(receiver), [[other_type]], [[ARG_POS]], ["other"],
                              [[None]], receiver, [[other]], node, api))


def _unary(hook: Any, api: Any, node: Expression, receiver: Type) -> Type:
    """What the hook of a method without arguments gives (``-x`` is ``x.__neg__()``)."""
    return hook(MethodContext(get_proper_type(receiver), [], [], [], [], receiver, [], node, api))


def _unwrap(hook: Any) -> Any:
    return hook.hook if isinstance(hook, Synced) else hook


class TypedImports:
    """Which modules meet SPMD types through their imports: a module reaches spmd when it
    imports spmd, or imports a module of the project that reaches spmd::

        c.py (no annotations) -> lib.py (Tensor[...] from mytypes) -> mytypes.py -> spmd

    The import edges of a module are read from its symbol table (imported names, also for a
    module loaded from mypy's cache) and, for a parsed module, its import statements (those
    inside functions too).  Installed packages, typeshed and stub files are not followed:
    torch never counts, and megatron-core's stubs keep their own gradual rule.  Answers are
    kept until a file is parsed again (:meth:`reset`); a search that finds nothing marks
    every module it saw, so a whole build costs one pass over the project's import graph."""

    def __init__(self, modules: Callable[[], dict[str, MypyFile] | None]) -> None:
        self.modules = modules
        self._reaches: dict[str, bool] = {}

    def reset(self) -> None:
        self._reaches.clear()

    def reaches_spmd(self, start: str) -> bool:
        known = self._reaches.get(start)
        if known is not None:
            return known
        modules = self.modules()
        if modules is None:
            return False
        seen = {start}
        todo = [start]
        found = False
        while todo and not found:
            tree = modules.get(todo.pop())
            if tree is None or _is_installed(tree):
                continue
            for dep in _imported_modules(tree, modules):
                if _is_spmd(dep) or self._reaches.get(dep, False):
                    found = True
                    break
                if dep not in seen and dep not in self._reaches:  # a known False: nothing there
                    seen.add(dep)
                    todo.append(dep)
        if found:
            self._reaches[start] = True
        else:  # every module seen reaches only modules seen: none of them reaches spmd
            for module in seen:
                self._reaches[module] = False
        return found


def _is_installed(tree: MypyFile) -> bool:
    """An installed package, typeshed, or a stub file (a library's interface, as the Megatron
    stubs, which import spmd: megatron-core's own modules do not count as typed because
    of them, wherever the stubs are found)."""
    path = tree.path.replace("\\", "/")
    return tree.is_stub or "-packages/" in path or "/typeshed/" in path


def _imported_modules(tree: MypyFile, modules: dict[str, MypyFile]) -> set[str]:
    """The modules ``tree`` imports from (those mypy has loaded, and spmd's)."""
    own = tree.fullname
    found: set[str] = set()
    for sym in tree.names.values():
        node = sym.node
        name = node.fullname if node is not None else (sym.cross_ref or "")
        if not name or name == own or name.startswith(own + "."):
            continue  # defined here
        if isinstance(node, MypyFile) or name in modules:
            found.add(name)
            continue
        module = name.rpartition(".")[0]
        while module and module not in modules and not _is_spmd(module):
            module = module.rpartition(".")[0]
        if module:
            found.add(module)
    for imp in tree.imports:
        if isinstance(imp, Import):
            found.update(i for i, _ in imp.ids)
        elif isinstance(imp, (ImportFrom, ImportAll)):
            base, _ = correct_relative_import(own, imp.relative, imp.id, tree.is_package_init_file())
            found.add(base)
            if isinstance(imp, ImportFrom):
                found.update(sub for n, _ in imp.names if (sub := f"{base}.{n}") in modules)
    found.discard(own)
    return found


class Synced:
    """A check-time hook run after syncing the promotion, a union operand typed member by
    member (unless ``split_unions`` is off: a boundary compares the whole value)."""

    def __init__(self, promotion: Promotion, hook: Callable[[Any], Type], split_unions: bool = True,
                 settle: Callable[[Any, Type], Type] | None = None) -> None:
        self.promotion = promotion
        self.hook = hook
        self.split_unions = split_unions
        # the result of a call returned by its function, settled against the declared
        # return type (boundaries.BoundaryChecker.settled_return)
        self.settle = settle

    def __call__(self, ctx: Any) -> Type:
        try:
            self.promotion.sync(ctx.api)
            cases: list[Any] | None = None
            if self.split_unions:
                try:
                    cases = self.promotion.union_cases(ctx)
                except Exception:  # noqa: BLE001 - never crash mypy: type the union as a whole
                    cases = None
            result = (self.hook(ctx) if cases is None
                      else make_simplified_union([self.hook(c) for c in cases]))
        except Exception as e:  # noqa: BLE001 - never crash mypy (guard.py)
            return recover(ctx, RESULT, e)
        settle = self.settle
        if settle is None:
            return result
        try:
            return settle(ctx, result)
        except Exception:  # noqa: BLE001 - never crash mypy: the result as the rule gave it
            return result


def _is_spmd(module: str) -> bool:
    return module == "spmd" or module.startswith("spmd.")


def uses_spmd(file: MypyFile) -> bool:
    """Whether the file imports spmd."""
    return spmd_import_line(file, absolute_only=False) is not None


def spmd_import_line(file: MypyFile, absolute_only: bool = True) -> int | None:
    """The line of the file's first ``import spmd`` / ``from spmd[...] import`` (a relative
    ``from .spmd import`` counted unless ``absolute_only``), None if none (a file loaded from
    the cache lists no imports)."""
    for imp in file.imports:
        if isinstance(imp, Import):
            if any(_is_spmd(i) for i, _ in imp.ids):
                return imp.line
        elif isinstance(imp, (ImportFrom, ImportAll)):
            if _is_spmd(imp.id) and not (absolute_only and imp.relative):
                return imp.line
    return None
