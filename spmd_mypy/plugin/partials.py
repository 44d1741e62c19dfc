"""``functools.partial`` of a torch op: the call of the partial is typed by the op's rule.

mypy's functools plugin types ``partial(F.gelu, approximate="tanh")`` as a ``partial[Tensor]``
that remembers the callable with its bound arguments taken out, and a call of it by that
callable; no op hook runs, so ``act(p)`` with ``p`` Partial went unchecked and its result was
a plain tensor.  Here both steps run mypy's own callbacks first, then:

- at ``partial(op, ...)``: when ``op`` is a torch function and every bound argument is one the
  op rule does not read as an operand (a dim, a flag, a string: ``engine.ops.NON_OPERAND_NAMES``,
  or a value that is neither a tensor nor a scalar), the partial is marked;
- at ``act(x)``: a marked partial's call is typed by the op's hook, over the arguments of the
  call mapped to the op's formals.

A bound operand (``partial(torch.add, other=p)``) leaves the partial unmarked and its calls
untyped, as before: the rule would not see that operand.

The same holds for the spmd functions whose arguments the checker reads: the collectives
(``reduce = partial(spmd.all_reduce, axis="tp", src=P, dst=R)``, then ``reduce(x)`` checks
``src`` against ``x``) and the einsum family (``partial(spmd.linear, out_partial_axes="tp")``,
``partial(spmd.einsum, "bsh,hd->bsd")``).  Their bound axes, ``src``/``dst``, equation, ``op``
and flags are recorded as literals and handed back to the hook at each call, where a direct
call would have them; one the checker cannot read (an axis in a variable) is reported at the
partial, as at a direct call.  Dims bound in the partial
(``partial(F.softmax, dim=-1)``) are not read, so a Shard(i) result is V there (conservative).
The mark (the op's name) lives in the instance's extra attributes, which mypy's cache keeps
(the callable's definition it does not), so a partial made in a module loaded from the cache
is typed alike.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable
from urllib.parse import quote, unquote

from mypy.argmap import map_actuals_to_formals
from mypy.nodes import (
    ArgKind, CallExpr, Expression, IntExpr, ListExpr, NameExpr, StrExpr, TupleExpr, UnaryExpr,
)
from mypy.plugin import FunctionContext, MethodContext
from mypy.plugins.functools import partial_call_callback, partial_new_callback
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType, CallableType, Instance, LiteralType, Overloaded, TupleType, Type, TypeOfAny, UnionType,
    get_proper_type,
)

from ..engine.collectives import OPS as COLLECTIVE_OPS
from ..engine.ops import NON_OPERAND_NAMES
from ..engine.types import Kind, LocalType
from . import calls
from .mypy_types import is_proper_tensor, lookup_type
from .reductions import _dims

if TYPE_CHECKING:
    from . import SpmdPlugin

_MARK = "__spmd_partial_op"
_MYPY_PARTIAL = "__mypy_partial"
# The spmd functions a partial of is typed, and the formals a partial may bind (read by the
# hook as literals, as at a direct call); a bound formal not listed is an operand
_COLLECTIVE_FORMALS = frozenset(("axis", "src", "dst", "op", "expert_mode", "sizes", "out_sizes"))
_SPMD_BINDABLE: dict[str, frozenset[str]] = {
    **{f"spmd.{name}": _COLLECTIVE_FORMALS for name in COLLECTIVE_OPS},
    **{f"spmd.{name}": frozenset(("equation", "out_partial_axes", "dim", "keepdim"))
       for name in ("einsum", "matmul", "linear", "sum")},
}
_OPAQUE = "?"  # a bound value the hook does not read (sizes=): passed on as absent


def _may_be_operand(t: Type, depth: int = 0) -> bool:
    """Whether a bound value may be an operand: a tensor (or a container of them), a
    scalar, or a value of unknown type."""
    p = get_proper_type(t)
    if isinstance(p, AnyType) or calls._is_scalar(p) or is_proper_tensor(p):
        return True
    if depth > 3:
        return False
    if isinstance(p, (TupleType, UnionType)):
        return any(_may_be_operand(i, depth + 1) for i in p.items)
    if isinstance(p, Instance):
        return any(_may_be_operand(a, depth + 1) for a in p.args)
    return False


def _literal_text(e: Expression, t: Type) -> str:
    """A bound argument's value as the mark records it: an int, a tuple of ints, a bool;
    "?" for anything else."""
    if isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False"):
        return e.fullname[9:]
    dims = _dims(e, t)
    if dims is None:
        return "?"
    if isinstance(e, (TupleExpr, ListExpr)):
        return "(" + ",".join(str(d) for d in dims) + ")"
    return str(dims[0])


def _literal_expr(text: str, ctx: MethodContext) -> tuple[Expression, Type] | None:
    """The expression (and its type) a recorded literal stands for; None for "?"."""
    api = ctx.api
    if text in ("True", "False"):
        e = NameExpr(text)
        e.fullname = f"builtins.{text}"
        return e, api.named_generic_type("builtins.bool", [])  # type: ignore[attr-defined]
    int_type = api.named_generic_type("builtins.int", [])  # type: ignore[attr-defined]
    try:
        if text.startswith("("):
            items: list[Expression] = [IntExpr(int(x)) for x in text[1:-1].split(",") if x]
            return TupleExpr(items), api.named_generic_type("builtins.tuple", [int_type])  # type: ignore[attr-defined]
        return IntExpr(int(text)), int_type
    except ValueError:
        return None


def _bound_arguments(ctx: FunctionContext, callee: CallableType
                     ) -> list[tuple[str | None, Type, Expression]] | None:
    """The arguments ``partial(fn, ...)`` binds, each with the formal it fills (None past
    ``fn``'s positional ones); None when ``*args``/``**kwargs`` hide which formals they fill."""
    positional = [n for n, k in zip(callee.arg_names, callee.arg_kinds) if k.is_positional()]
    next_positional = 0
    out: list[tuple[str | None, Type, Expression]] = []
    for group in (1, 2):
        for typ, kind, name, expr in zip(ctx.arg_types[group], ctx.arg_kinds[group],
                                         ctx.arg_names[group], ctx.args[group]):
            if kind is ArgKind.ARG_STAR or kind is ArgKind.ARG_STAR2:
                return None
            if name is None:
                name = positional[next_positional] if next_positional < len(positional) else None
                next_positional += 1
            out.append((name, typ, expr))
    return out


def _spmd_expr(formal: str, text: str, ctx: MethodContext) -> tuple[Expression, Type] | None:
    """The expression (and its type) a recorded spmd argument stands for, as the hooks read
    a direct call's: ``"tp"``, ``("dp", "tp")``, ``P``, ``S(1)``, ``True``; None for a value
    not recorded (``?``) or not one of these."""
    if text == _OPAQUE:
        return None
    try:
        value = json.loads(unquote(text))
    except ValueError:
        return None
    api = ctx.api
    str_type = api.named_generic_type("builtins.str", [])  # type: ignore[attr-defined]
    if formal in ("axis", "out_partial_axes"):
        if value is None:
            return _name_expr("None", "builtins.None"), api.named_generic_type("builtins.object", [])  # type: ignore[attr-defined]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        if len(value) == 1:
            return StrExpr(value[0]), LiteralType(value[0], str_type)
        items: list[Expression] = [StrExpr(v) for v in value]
        return TupleExpr(items), TupleType([LiteralType(v, str_type) for v in value],
                                           api.named_generic_type("builtins.tuple", [str_type]))  # type: ignore[attr-defined]
    if formal in ("src", "dst"):
        if not (isinstance(value, list) and len(value) == 2 and value[0] in ("R", "I", "V", "P")):
            return None
        kind, dim = Kind(value[0]), value[1]
        any_type = AnyType(TypeOfAny.special_form)
        if dim is None:
            return _name_expr(kind.value, f"spmd.{kind.value}"), any_type
        if not isinstance(dim, int):
            return None
        arg: Expression = IntExpr(dim) if dim >= 0 else UnaryExpr("-", IntExpr(-dim))
        return CallExpr(_name_expr("S", "spmd.S"), [arg], [ArgKind.ARG_POS], [None]), any_type
    if isinstance(value, bool):
        return _name_expr(str(value), f"builtins.{value}"), api.named_generic_type("builtins.bool", [])  # type: ignore[attr-defined]
    if isinstance(value, str):
        return StrExpr(value), LiteralType(value, str_type)
    int_type = api.named_generic_type("builtins.int", [])  # type: ignore[attr-defined]
    if isinstance(value, int):
        return IntExpr(value), int_type
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        ints: list[Expression] = [IntExpr(v) for v in value]
        return TupleExpr(ints), api.named_generic_type("builtins.tuple", [int_type])  # type: ignore[attr-defined]
    return None


def _name_expr(name: str, fullname: str) -> NameExpr:
    e = NameExpr(name)
    e.fullname = fullname
    return e


Groups = tuple[list[list[Expression]], list[list[Type]], list[list[ArgKind]], list[list[str | None]]]


def regroup_by_formals(ctx: FunctionContext | MethodContext, callee: CallableType) -> Groups:
    """The arguments of a call mypy typed through ``(*args, **kwargs)`` (a partial's or a
    custom op's ``__call__``), regrouped by ``callee``'s own formals: (args, arg_types,
    arg_kinds, arg_names), one list per formal, as a context of a call of ``callee`` holds
    them."""
    kinds: list[ArgKind] = []
    names: list[str | None] = []
    types: list[Type] = []
    exprs: list[Expression] = []
    seen: set[int] = set()
    for group in range(len(ctx.args)):
        for e, k, n, t in zip(ctx.args[group], ctx.arg_kinds[group], ctx.arg_names[group],
                              ctx.arg_types[group]):
            if id(e) in seen:
                continue
            seen.add(id(e))
            exprs.append(e)
            kinds.append(k)
            names.append(n)
            types.append(t)
    formal_to_actual = map_actuals_to_formals(
        kinds, names, callee.arg_kinds, callee.arg_names, lambda i: types[i])
    return ([[exprs[i] for i in actuals] for actuals in formal_to_actual],
            [[types[i] for i in actuals] for actuals in formal_to_actual],
            [[kinds[i] for i in actuals] for actuals in formal_to_actual],
            [[names[i] for i in actuals] for actuals in formal_to_actual])


class PartialTyper:
    """The two hooks (see the module docstring)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin

    def new_hook(self, ctx: FunctionContext) -> Type:
        """``functools.partial(op, *bound, **bound)``: mypy's result, marked when every
        bound argument is a non-operand of torch op ``op``."""
        result = partial_new_callback(ctx)
        ret = get_proper_type(result)
        if not isinstance(ret, Instance) or ret.extra_attrs is None:
            return result
        if len(ctx.arg_types) != 3 or len(ctx.arg_types[0]) != 1:  # fn, *args, **kwargs
            return result
        callee = get_proper_type(ctx.arg_types[0][0])
        if not isinstance(callee, CallableType):
            return result
        fullname = calls.torch_function_name(callee)
        if fullname is None:
            definition = callee.definition
            spmd_name = definition.fullname if definition is not None else ""
            if spmd_name in _SPMD_BINDABLE:
                return self._mark_spmd(ctx, ret, result, callee, spmd_name)
            return result
        arguments = _bound_arguments(ctx, callee)
        if arguments is None:
            return result
        bound: list[str] = []
        for name, typ, expr in arguments:
            if name not in NON_OPERAND_NAMES and _may_be_operand(typ):
                return result  # a bound operand: the rule would not see it
            if name is not None:
                bound.append(f"{name}={_literal_text(expr, typ)}")
        # the op's name, and each bound formal with its literal value ("?" if not one), as
        # a literal: mypy's cache keeps the extra attributes, not the callable's definition
        mark = "|".join([fullname, *bound])
        name_type = LiteralType(mark, ctx.api.named_generic_type("builtins.str", []))  # type: ignore[attr-defined]
        return ret.copy_with_extra_attr(_MARK, name_type)

    def _mark_spmd(self, ctx: FunctionContext, ret: Instance, result: Type,
                   callee: CallableType, fullname: str) -> Type:
        """``partial(spmd.all_reduce, axis="tp", src=P, dst=R)``: marked with each bound
        formal's literal value (JSON), when none is an operand.  An axis or src/dst the checker
        cannot read is reported here, as at a direct call, and leaves the partial unmarked."""
        bindable = _SPMD_BINDABLE[fullname]
        arguments = _bound_arguments(ctx, callee)
        if arguments is None:
            return result
        bound: list[str] = []
        for name, typ, expr in arguments:
            if name is None or name not in bindable:
                return result  # an operand (or a formal the function has not)
            value = self._spmd_value(ctx, fullname, name, expr, typ)
            if value is None:
                return result
            bound.append(f"{name}={value}")
        mark = "|".join([fullname, *bound])
        name_type = LiteralType(mark, ctx.api.named_generic_type("builtins.str", []))  # type: ignore[attr-defined]
        return ret.copy_with_extra_attr(_MARK, name_type)

    def _spmd_value(self, ctx: FunctionContext, fullname: str, name: str, expr: Expression,
                    typ: Type) -> str | None:
        """A bound formal's value as the mark records it (quoted JSON, or ``?`` for a value
        the hook does not read); None after reporting one the checker cannot read."""
        typer = self.plugin.calls
        value: object
        if name in ("axis", "out_partial_axes"):
            if isinstance(expr, NameExpr) and expr.fullname == "builtins.None":
                value = None
            else:
                what = fullname[5:] if name == "axis" else f"{fullname} out_partial_axes"
                names = typer._axis_names(ctx, expr, typ, what)
                if names is None:
                    return None
                value = list(names)
        elif name in ("src", "dst"):
            lt = typer._local_type(ctx, expr, name)
            if not isinstance(lt, LocalType):
                return None
            value = [lt.kind.value, lt.dim]
        elif name in ("op", "equation"):
            text = calls.literal_str(expr, typ)
            if text is None:
                return _OPAQUE
            value = text
        elif name in ("expert_mode", "keepdim"):
            if not (isinstance(expr, NameExpr) and expr.fullname in ("builtins.True", "builtins.False")):
                return _OPAQUE
            value = expr.fullname == "builtins.True"
        elif name == "dim":
            dims = _dims(expr, typ)
            if dims is None:
                return _OPAQUE
            value = list(dims) if isinstance(expr, (TupleExpr, ListExpr)) else dims[0]
        else:
            return _OPAQUE
        return quote(json.dumps(value), safe="")

    def call_hook(self, ctx: MethodContext) -> Type:
        """``act(x)`` of a marked partial: typed by its op's hook."""
        result = partial_call_callback(ctx)
        typ = get_proper_type(ctx.type)
        if not isinstance(typ, Instance) or typ.extra_attrs is None \
                or _MARK not in typ.extra_attrs.attrs:
            return result
        callee = get_proper_type(typ.extra_attrs.attrs.get(_MYPY_PARTIAL))
        mark = get_proper_type(typ.extra_attrs.attrs[_MARK])
        if not isinstance(callee, CallableType) or not isinstance(mark, LiteralType) \
                or not isinstance(mark.value, str):
            return result
        fullname, *bound_items = mark.value.split("|")
        bound = dict(item.split("=", 1) for item in bound_items if "=" in item)
        hook: Callable[[FunctionContext], Type] | None = self.plugin.dispatch.get_function_hook(fullname)
        if hook is None:
            return result
        spmd = fullname in _SPMD_BINDABLE
        literals = {formal: (_spmd_expr(formal, text, ctx) if spmd else _literal_expr(text, ctx))
                    for formal, text in bound.items()}
        try:
            return hook(self._op_context(ctx, callee, result, literals, append_bound=spmd))
        except Exception:  # noqa: BLE001 - never crash mypy: mypy's own result for the partial
            return result

    @staticmethod
    def _op_context(ctx: MethodContext, callee: CallableType, result: Type,
                    bound: dict[str, tuple[Expression, Type] | None],
                    append_bound: bool = False) -> FunctionContext:
        """The partial's call as a call of its op: the arguments mapped to the formals the
        partial leaves (mypy's bound callable).  A formal bound in the partial with a literal
        value (``dim=1``) gets that literal as its argument; one bound to anything else is
        hidden, so the rule reads it as a dim it cannot know (never as the op's default).
        ``append_bound``: a formal bound positionally (which mypy's bound callable drops, as
        ``partial(spmd.einsum, "ij,jk->ik")``'s equation) is added with its literal, for the
        hooks that read their arguments by formal name."""
        args, arg_types, arg_kinds, arg_names = regroup_by_formals(ctx, callee)
        formals: list[str | None] = list(callee.arg_names)
        for at, formal in enumerate(formals):
            if formal is None or formal not in bound or args[at]:
                continue
            literal = bound[formal]
            if literal is None:
                formals[at] = None  # bound to a value the rule cannot read: hidden
            else:
                args[at], arg_types[at] = [literal[0]], [literal[1]]
                arg_kinds[at], arg_names[at] = [ArgKind.ARG_NAMED], [formal]
        if append_bound:
            for formal, literal in bound.items():
                if literal is not None and formal not in formals:
                    formals.append(formal)
                    args.append([literal[0]])
                    arg_types.append([literal[1]])
                    arg_kinds.append([ArgKind.ARG_NAMED])
                    arg_names.append([formal])
        return FunctionContext(
            arg_types=arg_types,
            arg_kinds=arg_kinds,
            callee_arg_names=formals,
            arg_names=arg_names,
            default_return_type=result,
            args=args,
            context=ctx.context,
            api=ctx.api,
        )




# ``operator``'s functions of two tensors, as the torch function whose rule they follow
# (typeshed defines them in ``_operator``; ``operator`` re-exports them)
_OPERATOR_OPS = {f"{module}.{name}": f"torch.{op}" for module in ("operator", "_operator")
                 for name, op in (("add", "add"), ("sub", "sub"), ("mul", "mul"),
                                  ("truediv", "div"), ("matmul", "matmul"), ("pow", "pow"))}
_APPLIED_MAX = 16  # item combinations an op is checked over (the rest are not: conservative)


class AppliedOps:
    """An op passed as a value to ``functools.reduce`` or ``map``: each application is
    checked by the op's rule, as a direct call would be::

        reduce(operator.mul, ps)    ->  mul(ps[k], ps[k]): two Partial factors, an error
        map(torch.relu, ps)         ->  relu(ps[k])
        reduce(torch.add, xs, r)    ->  add(r, xs[k]) and add(xs[k], xs[k])

    mypy types the calls by their generic signatures (``reduce`` returns the item type: a
    product of Partials revealed as Partial) and runs no op hook.  Only a reference to a torch
    function or one of ``operator``'s arithmetic functions is read; a lambda is checked by
    mypy itself (its parameters take the items' types)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin

    def _op(self, ctx: FunctionContext) -> tuple[Callable[[FunctionContext], Type], list[str | None], Type] | None:
        """The op hook of the function passed first, its formals and its plain result."""
        if not ctx.args or len(ctx.args[0]) != 1:
            return None
        return self.op_of(ctx, ctx.args[0][0])

    def op_of(self, ctx: FunctionContext, fn: Expression
              ) -> tuple[Callable[[FunctionContext], Type], list[str | None], Type] | None:
        """The op hook of the function ``fn`` refers to, its formals and its plain result."""
        fullname = getattr(fn, "fullname", None)
        if not isinstance(fullname, str):
            return None
        torch_name = _OPERATOR_OPS.get(fullname, fullname)
        if not torch_name.startswith("torch."):
            return None
        hook = self.plugin.dispatch.get_function_hook(torch_name)
        if hook is None:
            return None
        signature = get_proper_type(lookup_type(ctx.api, fn)) if torch_name == fullname else None
        if isinstance(signature, Overloaded):
            signature = signature.items[0]
        if isinstance(signature, CallableType):
            formals = list(signature.arg_names)
            plain = signature.ret_type
        else:
            info = self.plugin.dispatch.lookup_info("torch._tensor.Tensor")
            if info is None:
                return None
            formals = ["input", "other"]
            plain = Instance(info, [])
        return hook, formals, plain

    def _items(self, ctx: FunctionContext, group: int) -> list[tuple[Type, Expression]]:
        """The typed items of the iterable argument ``group``, named as messages name them."""
        if group >= len(ctx.args) or len(ctx.args[group]) != 1:
            return []
        expr, typ = ctx.args[group][0], ctx.arg_types[group][0]
        at_k = calls.item_name(expr)
        types = self.plugin.types
        return [(t, at_k if e is expr else e)
                for t, e in self.plugin.calls._container_items(typ, expr, ctx)
                if t is not None and types.from_type(t) is not None]

    def apply_each(self, ctx: FunctionContext, fn: Expression, items: list[tuple[Type, Expression]]) -> None:
        """``fn`` applied to each item by its rule (``max(ps, key=torch.norm)``)."""
        op = self.op_of(ctx, fn)
        if op is not None:
            for item in items[:_APPLIED_MAX]:
                self._apply(ctx, op, [item])

    def _apply(self, ctx: FunctionContext, op: tuple[Callable[[FunctionContext], Type], list[str | None], Type],
               operands: list[tuple[Type, Expression]]) -> Type:
        hook, formals, plain = op
        n = len(operands)
        return hook(FunctionContext(
            arg_types=[[t] for t, _ in operands], arg_kinds=[[ArgKind.ARG_POS]] * n,
            callee_arg_names=formals[:n], arg_names=[[None]] * n,
            default_return_type=plain, args=[[e] for _, e in operands],
            context=ctx.context, api=ctx.api))

    def reduce_hook(self, ctx: FunctionContext) -> Type:
        """``functools.reduce(op, xs[, initial])``: op(acc, item) for the accumulator (the
        initial value, else an item) and each item; the result is theirs joined."""
        result = ctx.default_return_type
        op = self._op(ctx)
        items = self._items(ctx, 1) if op is not None else []
        if op is None or not items:
            return result
        accumulators = items
        if len(ctx.args) > 2 and len(ctx.args[2]) == 1:
            initial = (ctx.arg_types[2][0], ctx.args[2][0])
            accumulators = [initial] if self.plugin.types.from_type(initial[0]) is not None else []
        if not accumulators or len(accumulators) * len(items) > _APPLIED_MAX:
            return result
        outs = [self._apply(ctx, op, [acc, item]) for acc in accumulators for item in items]
        if any(self.plugin.types.from_type(o) is None for o in outs):
            return result
        return make_simplified_union(outs)

    def map_hook(self, ctx: FunctionContext) -> Type:
        """``map(op, xs[, ys...])``: op of the items at each position; a ``map`` of the
        results."""
        result = ctx.default_return_type
        op = self._op(ctx)
        if op is None or len(ctx.args) < 2:
            return result
        columns = [self._items(ctx, g) for g in range(1, len(ctx.args))]
        if not all(columns):
            return result
        combos: list[list[tuple[Type, Expression]]] = [[]]
        for column in columns:
            combos = [c + [item] for c in combos for item in column]
            if len(combos) > _APPLIED_MAX:
                return result
        outs = [self._apply(ctx, op, combo) for combo in combos]
        typed = [o for o in outs if self.plugin.types.from_type(o) is not None]
        p = get_proper_type(result)
        if len(typed) != len(outs) or not isinstance(p, Instance) or p.type.fullname != "builtins.map":
            return result
        return ctx.api.named_generic_type("builtins.map", [make_simplified_union(typed)])  # type: ignore[attr-defined]
