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
untyped, as before: the rule would not see that operand.  Dims bound in the partial
(``partial(F.softmax, dim=-1)``) are not read, so a Shard(i) result is V there (conservative).
The mark (the op's name) lives in the instance's extra attributes, which mypy's cache keeps
(the callable's definition it does not), so a partial made in a module loaded from the cache
is typed alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mypy.argmap import map_actuals_to_formals
from mypy.nodes import ArgKind, Expression, IntExpr, ListExpr, NameExpr, TupleExpr
from mypy.plugin import FunctionContext, MethodContext
from mypy.plugins.functools import partial_call_callback, partial_new_callback
from mypy.types import (
    AnyType, CallableType, Instance, LiteralType, TupleType, Type, UnionType, get_proper_type,
)

from ..engine.ops import NON_OPERAND_NAMES
from . import calls
from .mypy_types import is_proper_tensor
from .reductions import _dims

if TYPE_CHECKING:
    from . import SpmdPlugin

_MARK = "__spmd_partial_op"
_MYPY_PARTIAL = "__mypy_partial"


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
            return result
        positional = [n for n, k in zip(callee.arg_names, callee.arg_kinds) if k.is_positional()]
        next_positional = 0
        bound: list[str] = []
        for group in (1, 2):
            for typ, kind, name, expr in zip(ctx.arg_types[group], ctx.arg_kinds[group],
                                             ctx.arg_names[group], ctx.args[group]):
                if kind is ArgKind.ARG_STAR or kind is ArgKind.ARG_STAR2:
                    return result  # *args / **kwargs: which formals they fill is unknown
                if name is None:
                    name = positional[next_positional] if next_positional < len(positional) else None
                    next_positional += 1
                if name not in NON_OPERAND_NAMES and _may_be_operand(typ):
                    return result  # a bound operand: the rule would not see it
                if name is not None:
                    bound.append(f"{name}={_literal_text(expr, typ)}")
        # the op's name, and each bound formal with its literal value ("?" if not one), as
        # a literal: mypy's cache keeps the extra attributes, not the callable's definition
        mark = "|".join([fullname, *bound])
        name_type = LiteralType(mark, ctx.api.named_generic_type("builtins.str", []))  # type: ignore[attr-defined]
        return ret.copy_with_extra_attr(_MARK, name_type)

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
        try:
            return hook(self._op_context(ctx, callee, result, bound))
        except Exception:  # noqa: BLE001 - never crash mypy: mypy's own result for the partial
            return result

    @staticmethod
    def _op_context(ctx: MethodContext, callee: CallableType, result: Type,
                    bound: dict[str, str]) -> FunctionContext:
        """The partial's call as a call of its op: the arguments mapped to the formals the
        partial leaves (mypy's bound callable).  A formal bound in the partial with a literal
        value (``dim=1``) gets that literal as its argument; one bound to anything else is
        hidden, so the rule reads it as a dim it cannot know (never as the op's default)."""
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
        arg_types = [[types[i] for i in actuals] for actuals in formal_to_actual]
        arg_kinds = [[kinds[i] for i in actuals] for actuals in formal_to_actual]
        arg_names = [[names[i] for i in actuals] for actuals in formal_to_actual]
        args = [[exprs[i] for i in actuals] for actuals in formal_to_actual]
        formals: list[str | None] = list(callee.arg_names)
        for at, formal in enumerate(formals):
            if formal is None or formal not in bound or args[at]:
                continue
            literal = _literal_expr(bound[formal], ctx)
            if literal is None:
                formals[at] = None  # bound to a value the rule cannot read: hidden
            else:
                args[at], arg_types[at] = [literal[0]], [literal[1]]
                arg_kinds[at], arg_names[at] = [ArgKind.ARG_NAMED], [formal]
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


