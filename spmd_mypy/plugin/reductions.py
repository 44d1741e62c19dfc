"""The dims a reduction or scan states at a call (``x.sum(dim=0, keepdim=True)``), read as
literals for the engine's rule (:func:`spmd_mypy.engine.ops.shard_dim_after`): a Shard(d)
operand keeps its layout on the dims the reduction does not reduce.  The same for the dims a
normalising op (softmax, layer_norm, ...: ``ops.NORMALISING``) normalises over."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy.nodes import Expression, IntExpr, ListExpr, NameExpr, TupleExpr, UnaryExpr
from mypy.types import Instance, LiteralType, TupleType, Type, get_proper_type

from ..engine.ops import NORMALISING, REDUCTIONS, SCANS, Reduction, normalising_reduction

if TYPE_CHECKING:
    from mypy.plugin import FunctionContext, MethodContext

_DIM_NAMES = ("dim", "axis")


def _int(e: Expression | None, t: Type | None) -> int | None:
    if isinstance(e, IntExpr):
        return e.value
    if isinstance(e, UnaryExpr) and e.op == "-" and isinstance(e.expr, IntExpr):
        return -e.expr.value
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, Instance) and p.last_known_value is not None:
        p = p.last_known_value
    if isinstance(p, LiteralType) and isinstance(p.value, int) and not isinstance(p.value, bool):
        return p.value
    return None


def _dims(e: Expression, t: Type | None) -> tuple[int, ...] | None:
    if isinstance(e, (TupleExpr, ListExpr)):
        items = [_int(i, None) for i in e.items]
        return None if any(i is None for i in items) else tuple(items)  # type: ignore[arg-type]
    one = _int(e, t)
    return (one,) if one is not None else None


def _normalised_value(e: Expression, t: Type | None, kind: str) -> object:
    """The value of a normalising op's dims formal as the engine reads it (None: unknown):
    for ``dim`` the literal ints, for ``normalized_shape`` a tuple of its length."""
    if kind == "dim":
        return _dims(e, t)
    if isinstance(e, (TupleExpr, ListExpr)):
        return (None,) * len(e.items)
    if _int(e, t) is not None:
        return 1
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, TupleType):
        return (None,) * len(p.items)
    return None


def read_reduction(ctx: FunctionContext | MethodContext, op: str) -> Reduction | None:
    """The literal dims (and keepdim) of reduction ``op``'s call; None if the op is not a
    reduction, states no dim, or states one the checker cannot read.  For a normalising op,
    the dims it normalises over (:func:`~spmd_mypy.engine.ops.normalising_reduction`)."""
    norm = NORMALISING.get(op)
    if norm is not None:
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if formal == norm[0] and exprs:
                value = _normalised_value(exprs[0], types[0] if types else None, norm[1])
                return normalising_reduction(op, value)
        return None
    if op not in REDUCTIONS and op not in SCANS:
        return None
    dims: tuple[int, ...] | None = None
    keepdim = False
    for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
        if not exprs:
            continue
        if formal in _DIM_NAMES:
            dims = _dims(exprs[0], types[0] if types else None)
            if dims is None:
                return None
        elif formal == "keepdim":
            e = exprs[0]
            if not (isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False")):
                return None
            keepdim = e.fullname == "builtins.True"
    return Reduction(dims, keepdim) if dims is not None else None
