"""einops' ``rearrange``, ``repeat``, ``reduce`` and ``einsum`` typed by the engine's rule
(:mod:`spmd_mypy.engine.einops_rule`).

einops types them with an unbounded TypeVar (``rearrange(x: T, ...) -> T``): mypy alone gives
the result the operand's type, shard dim and all, or solves T from the type the call's context
expects (``return rearrange(q, ...)`` in a function declared to return S(1): q's S(2) was then
an arg-type error).  The signature hook takes the TypeVar out (Any); the call hook reads the call's pattern (a str
literal, or a Literal / Final type), reduce's reduction name and a list operand's items, and
types the result by the engine; a pattern it cannot read types the result by the op rule
alone (the layout unknown: V), never the operand's own type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy.expandtype import expand_type
from mypy.nodes import ARG_POS, CallExpr, Expression, ListExpr, RefExpr, StrExpr, TypeInfo
from mypy.plugin import FunctionContext, FunctionSigContext, MethodContext
from mypy.types import (
    AnyType, CallableType, Instance, TupleType, Type, TypeOfAny, get_proper_type,
)

from ..engine.einops_rule import einsum_contraction, propagate_einops, propagate_einsum
from ..engine.ops import OpClass, OpSpec, Operand, propagate
from ..engine.views import UNREAD
from . import global_calls
from .declared_partials import declared_partial
from .reductions import _literal

if TYPE_CHECKING:
    from .calls import CallTyper

# the functions by the fullname mypy gives them (einops re-exports einops.einops')
EINOPS_FUNCTIONS: dict[str, str] = {}
for _name in ("rearrange", "repeat", "reduce", "einsum"):
    EINOPS_FUNCTIONS[f"einops.einops.{_name}"] = _name
    EINOPS_FUNCTIONS[f"einops.{_name}"] = _name
# pack / unpack: a reshape and a cat / split, typed as one linear op whose layout is unknown
# (V: pack "* d" of S(0) tensors concatenates them on the shard dim)
for _name in ("pack", "unpack"):
    EINOPS_FUNCTIONS[f"einops.packing.{_name}"] = _name
    EINOPS_FUNCTIONS[f"einops.{_name}"] = _name


def einops_signature_hook(ctx: FunctionSigContext) -> CallableType:
    """einops' signature with its type variables replaced by Any: the call hook types the
    result (as the TypeVar would for an operand with no SPMD type)."""
    sig = ctx.default_signature
    if not sig.variables:
        return sig
    anys: dict = {v.id: AnyType(TypeOfAny.special_form) for v in sig.variables}
    relaxed = get_proper_type(expand_type(sig, anys))
    if not isinstance(relaxed, CallableType):
        return sig
    return relaxed.copy_modified(variables=[])


def _operand_type(ctx: FunctionContext) -> Type:
    """What einops' TypeVar would make the result: the (first) operand's type, a list's item
    type."""
    for types in ctx.arg_types:
        if types:
            p = get_proper_type(types[0])
            if isinstance(p, Instance) and p.type.fullname in ("builtins.list", "builtins.tuple") \
                    and p.args:
                return p.args[0]
            return types[0]
    return ctx.default_return_type


def _with_tensor(ctx: FunctionContext, op: str, tensor: Type) -> Type:
    """pack's ``(Tensor, shapes)`` / unpack's ``list[Tensor]`` with ``tensor`` for einops'
    TypeVar (Any in the relaxed signature)."""
    p = get_proper_type(ctx.default_return_type)
    if op == "pack" and isinstance(p, TupleType) and p.items:
        return p.copy_modified(items=[tensor, *p.items[1:]])
    if op == "unpack" and isinstance(p, Instance) and p.args:
        return p.copy_modified(args=[tensor])
    return ctx.default_return_type


def _pack_hook(typer: CallTyper, op: str, ctx: FunctionContext) -> Type:
    """einops.pack(tensors, pattern) / unpack(tensor, shapes, pattern): linear, the layout
    unknown (V); untyped operands keep what einops' TypeVar would give."""
    ops: list[Operand] = []
    item_type: Type | None = None
    exprs = ctx.args[0] if ctx.args else []
    types = ctx.arg_types[0] if ctx.arg_types else []
    if exprs and types:
        e, t = exprs[0], types[0]
        items = typer._container_items(t, e, ctx) if op == "pack" else [(t, e)]
        for it, ie in items:
            st = typer.types.from_type(it) if it is not None else None
            if st is None:
                ops = []
                break
            item_type = item_type or it
            ops.append(typer.operand(ctx, ie, st))
        if item_type is None:
            p = get_proper_type(t)
            item_type = p.args[0] if (op == "pack" and isinstance(p, Instance) and p.args) else t
    if not ops or not any(o.type for o in ops) or global_calls.any_global(ops):
        return _with_tensor(ctx, op, item_type) if item_type is not None else ctx.default_return_type
    result = propagate(OpSpec(op, OpClass.LINEAR), ops, strict=typer.strict(ctx))
    typer.report(ctx, result.errors)
    inst = typer.types.to_instance(result.type)
    return _with_tensor(ctx, op, inst if inst is not None else item_type)  # type: ignore[arg-type]


def einops_hook(typer: CallTyper, op: str, ctx: FunctionContext) -> Type:
    """The hook of a call of einops ``op``."""
    if op in ("pack", "unpack"):
        return _pack_hook(typer, op, ctx)
    if not isinstance(get_proper_type(ctx.default_return_type), AnyType):
        return ctx.default_return_type  # not einops' own signature (a redefinition)
    ops: list[Operand] = []
    any_typed = False
    stacked = False
    pattern: object = UNREAD
    reduction: object = UNREAD
    if op == "einsum":  # einsum(*tensors, pattern): the pattern is the last argument
        flat = [(e, t) for es, ts in zip(ctx.args, ctx.arg_types) for e, t in zip(es, ts)]
        if flat:
            pattern = _literal(flat[-1][0], flat[-1][1])
            flat = flat[:-1]
        for e, t in flat:
            st = typer.types.from_type(t)
            if st is None:
                return _operand_type(ctx)  # not a tensor: not a call einops takes
            any_typed = any_typed or bool(st) or bool(st.failed)
            ops.append(typer.operand(ctx, e, st))
    else:
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if not exprs:
                continue
            if formal == "pattern":
                pattern = _literal(exprs[0], types[0])
            elif formal == "reduction":
                reduction = _literal(exprs[0], types[0])
            elif formal == "tensor":
                e, t = exprs[0], types[0]
                st = typer.types.from_type(t)
                items: list[tuple[Type | None, Expression]]
                if st is not None:
                    items = [(t, e)]
                elif isinstance(e, ListExpr):  # einops stacks a list (not a tuple)
                    stacked = True
                    items = typer._container_items(t, e, ctx)
                else:
                    # a list variable: every item has its item type (stacking n of one type
                    # lays them out as one does)
                    p = get_proper_type(t)
                    if not (isinstance(p, Instance) and p.type.fullname == "builtins.list"
                            and p.args and typer.types.from_type(p.args[0]) is not None):
                        return _operand_type(ctx)
                    stacked = True
                    items = [(p.args[0], e)]
                for it, ie in items:
                    ist = typer.types.from_type(it) if it is not None else None
                    if ist is None:
                        return _operand_type(ctx)
                    any_typed = any_typed or bool(ist) or bool(ist.failed)
                    ops.append(typer.operand(ctx, ie, ist))
    if not any_typed or not ops or global_calls.any_global(ops):
        return _operand_type(ctx)
    strict = typer.strict(ctx)
    if op == "einsum":
        move = einsum_contraction(pattern)
        if move is not None:
            move = declared_partial(ctx, move, ops, typer.types)
        result = propagate_einsum(ops, pattern, strict=strict, move=move)
    else:
        result = propagate_einops(op, ops, pattern, reduction if op == "reduce" else None,
                                  stacked=stacked, strict=strict)
    typer.report(ctx, result.errors)
    inst = typer.types.to_instance(result.type)
    return inst if inst is not None else _operand_type(ctx)


# einops.layers.torch's modules: a call ``self.split(x)`` is typed by the pattern its
# constructor states (``self.split = Rearrange("b s (h d) -> b h s d", h=nh)``)
EINOPS_LAYERS: dict[str, str] = {"einops.layers.torch.Rearrange": "rearrange",
                                 "einops.layers.torch.Reduce": "reduce"}


def _constructor_args(value: Expression, cls: str) -> tuple[object, object] | None:
    """(pattern, reduction) a constructor call of ``cls`` states as literals (UNREAD where
    not); None when ``value`` is no call of it."""
    if not (isinstance(value, CallExpr) and isinstance(value.callee, RefExpr)
            and isinstance(value.callee.node, TypeInfo) and value.callee.node.fullname == cls):
        return None
    pattern: object = UNREAD
    reduction: object = UNREAD
    positional = [a for a, k in zip(value.args, value.arg_kinds) if k == ARG_POS]
    named = {n: a for a, n in zip(value.args, value.arg_names) if n is not None}
    p = named.get("pattern", positional[0] if positional else None)
    r = named.get("reduction", positional[1] if len(positional) > 1 else None)
    if isinstance(p, StrExpr):
        pattern = p.value
    if isinstance(r, StrExpr):
        reduction = r.value
    return pattern, reduction


def einops_layer_hook(typer: CallTyper, cls: str, ctx: MethodContext) -> Type:
    """``m(x)`` of an einops Rearrange / Reduce module built in sight (an attribute assigned
    in its class, a local, the constructor call itself): typed by its pattern; a module whose
    construction is not read gives V (the layout unknown)."""
    call = ctx.context
    flat = [(e, t) for es, ts in zip(ctx.args, ctx.arg_types) for e, t in zip(es, ts)]
    if not isinstance(call, CallExpr) or len(flat) != 1:
        return ctx.default_return_type
    e, t = flat[0]
    st = typer.types.from_type(t)
    if st is None or not (st or st.failed):
        return ctx.default_return_type
    ops = [typer.operand(ctx, e, st)]
    if global_calls.any_global(ops):
        return ctx.default_return_type
    stated = {_constructor_args(v, cls) for v in global_calls.module_constructor(ctx, call.callee)}
    pattern: object = UNREAD  # no constructor in sight, or several: the layout unknown
    reduction: object = UNREAD
    one = stated.pop() if len(stated) == 1 else None
    if one is not None:
        pattern, reduction = one
    op = EINOPS_LAYERS[cls]
    result = propagate_einops(op, ops, pattern, reduction if op == "reduce" else None,
                              strict=typer.strict(ctx))
    typer.report(ctx, result.errors)
    inst = typer.types.to_instance(result.type)
    return inst if inst is not None else ctx.default_return_type
