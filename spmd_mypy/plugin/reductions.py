"""The dims a reduction or scan states at a call (``x.sum(dim=0, keepdim=True)``), read as
literals for the engine's rule (:func:`spmd_mypy.engine.ops.shard_dim_after`): a Shard(d)
operand keeps its layout on the dims the reduction does not reduce.  The same for the dims a
normalising op (softmax, layer_norm, ...: ``ops.NORMALISING``) normalises over, the dims
a view or join moves (``x.transpose(0, 1)``, ``x[:, 0]``: :func:`read_move`), and what a
contraction states (einsum's equation, attention's ``is_causal``: :func:`read_contraction`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final, cast

from mypy.nodes import (
    ARG_POS, CallExpr, EllipsisExpr, Expression, FloatExpr, IndexExpr, IntExpr, ListExpr, MemberExpr,
    NameExpr, OpExpr, RefExpr, SliceExpr, StrExpr, TupleExpr, UnaryExpr,
)
from mypy.types import Instance, LiteralType, NoneType, TupleType, Type, get_proper_type

from ..engine.contractions import CONTRACTIONS, Contraction, make_contraction
from ..engine.ops import (
    CAST_OPS, DTYPE_VIEW_OPS, NORMALISING, REDUCED_LOSSES, REDUCTIONS, SCANS, SHARD_SUMMING, UNREAD_VALUE,
    NORMALISING_DEFAULTS,
    VARIANCE_REDUCTIONS, Reduction,
    normalising_reduction,
    variant_formals,
)
from ..engine.views import (
    ELLIPSIS, FORMAL_ALIASES, FULL, INT, MOVES, NEW, SLICE, UNREAD, DimMove, make_move,
)
from .mypy_types import TENSOR, TORCH_TENSOR_BASES, lookup_type
from .memo import MISSING, ValueMemo

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


def may_read_move(op: str) -> bool:
    """Whether :func:`read_move` can answer anything but None for ``op`` (a view, a join, a
    contraction): told once per op hook, which asks it of no other op."""
    return op in MOVES or op in CONTRACTIONS


def may_read_reduction(op: str) -> bool:
    """Whether :func:`read_reduction` can answer anything but None for ``op`` (a normalising
    op, a reduction, a scan): told once per op hook, which asks it of no other op."""
    return op in NORMALISING or op in REDUCTIONS or op in SCANS


def read_reduction(ctx: FunctionContext | MethodContext, op: str) -> Reduction | None:
    """The literal dims (and keepdim) of reduction ``op``'s call; None if the op is not a
    reduction, states no dim, or states one the checker cannot read.  For a normalising op,
    the dims it normalises over (:func:`~spmd_mypy.engine.ops.normalising_reduction`)."""
    norm = NORMALISING.get(op)
    if norm is not None:
        has_formal = False
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if formal == norm[0]:
                has_formal = True
                if exprs:
                    value = _normalised_value(exprs[0], types[0] if types else None, norm[1])
                    return _reduction(op, value, False, True)
        if has_formal and op in NORMALISING_DEFAULTS:  # F.normalize(x): its default dim=1
            return _reduction(op, NORMALISING_DEFAULTS[op], False, True)
        return None
    if op not in REDUCTIONS and op not in SCANS:
        return None
    dims: tuple[int, ...] | None = None
    keepdim = False
    for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
        if not exprs:
            continue
        if formal in _DIM_NAMES:
            if isinstance(exprs[0], NameExpr) and exprs[0].fullname == "builtins.None":
                continue  # dim=None: every dim
            if (op in VARIANCE_REDUCTIONS and isinstance(exprs[0], NameExpr)
                    and exprs[0].fullname in ("builtins.True", "builtins.False")):
                continue  # x.var(True): the unbiased flag (a bool is an int to mypy), every dim
            dims = _dims(exprs[0], types[0] if types else None)
            if dims is None:
                return None
        elif formal == "keepdim":
            e = exprs[0]
            if not (isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False")):
                return None
            keepdim = e.fullname == "builtins.True"
    if dims is None:
        # no dim stated: a full reduction, for the sums the engine's pending rule reads
        # (ops.SHARD_SUMMING); the other reductions keep their reading (no dims known)
        return _reduction(op, None, keepdim, False) if op in SHARD_SUMMING else None
    return _reduction(op, dims, keepdim, False)


def module_reduction(ctx: FunctionContext | MethodContext, op: str) -> Reduction | None:
    """The dims the call of one of torch's normalising modules (``self.norm(x)`` of an
    ``nn.LayerNorm(h)``, ``nn.Softmax(dim=-1)``) normalises over, read from its constructor
    (global_calls.module_params); None where the constructor is not in sight or unread."""
    from .global_calls import module_params  # imports this module
    from ..engine import global_spmd as gs

    p = module_params(ctx, op)
    if not p or p.get("_not_found"):
        return None
    if "normalized_ndim" in p:
        n = p["normalized_ndim"]
        if not isinstance(n, int) or isinstance(n, bool) or n is gs.UNKNOWN:
            return None
        return _reduction(op, (None,) * n, False, True)
    d = p.get("dim")
    if not isinstance(d, int) or isinstance(d, bool) or d is gs.UNKNOWN:
        return None
    return _reduction(op, d, False, True)


# (op, the value read, typed; keepdim; normalising) -> the Reduction (frozen, shared)
_REDUCTIONS_MADE: Final[ValueMemo[Reduction | None]] = ValueMemo()


def _reduction(op: str, value: object, keepdim: bool, normalising: bool) -> Reduction | None:
    """``normalising_reduction(op, value)`` where ``normalising``, else ``Reduction(value,
    keepdim)``: made once per value (a frozen dataclass's interpreted ``__init__`` sets each
    field through ``object.__setattr__``; every reduction's call asks)."""
    k = (op if normalising else "", _typed(value), keepdim, normalising)
    hit = _REDUCTIONS_MADE.get(k)
    if hit is not MISSING:
        return cast("Reduction | None", hit)
    return _REDUCTIONS_MADE.put(k, normalising_reduction(op, value) if normalising
                                else Reduction(value, keepdim))  # type: ignore[arg-type]


def read_move(ctx: FunctionContext | MethodContext, op: str) -> DimMove | Contraction | None:
    """The literal dims a view or join moves (``x.transpose(0, 1)``, ``x[:, 0]``,
    ``torch.cat(xs, dim=1)``) for the engine's rule (:mod:`spmd_mypy.engine.views`); None
    when ``op`` moves no dims or states one the checker cannot read.  For a contraction
    (einsum, matmul, linear, attention) what :func:`read_contraction` reads."""
    entry = MOVES.get(op)
    if entry is None:
        return read_contraction(ctx, op) if op in CONTRACTIONS else None
    family, formals, _ = entry
    values: dict[str, object] = {}
    if family == "reshape":  # x.view(b, s, -1, hd): the target as global SPMD reads it
        from .global_calls import reshape_target

        target = reshape_target(ctx)
        return None if target is None else _made_move(op, {"shape": target})
    if family == "index":
        c = ctx.context
        if isinstance(c, IndexExpr):
            values["index"] = _index_items(c.index, ctx.arg_types[0][0] if ctx.arg_types
                                           and ctx.arg_types[0] else None)
        return _made_move(op, values)
    for formal in formals:
        names = [n for n in FORMAL_ALIASES.get(formal, (formal,)) if n in ctx.callee_arg_names]
        if not names:
            values[formal] = UNREAD  # a signature that does not name it: not a default to trust
            continue
        k = ctx.callee_arg_names.index(names[0])
        exprs, types = ctx.args[k], ctx.arg_types[k]
        if not exprs:
            continue  # left out: the op's default
        if formal == "sizes":  # unflatten: only how many sizes (names or literals)
            sizes = _normalised_value(exprs[0], types[0] if types else None, "shape")
            values[formal] = sizes if isinstance(sizes, tuple) else UNREAD
            continue
        if formal == "training":  # batch_norm's mode (a bool literal)
            flag = _literal(exprs[0], types[0] if types else None)
            values[formal] = flag if isinstance(flag, bool) else UNREAD
            continue
        if len(exprs) > 1:  # permute(1, 0), squeeze(0, 1): *dims
            ints = [_int(e, t) for e, t in zip(exprs, types)]
            values[formal] = UNREAD if None in ints else tuple(ints)  # type: ignore[arg-type]
        elif family == "squeeze" and isinstance(exprs[0], NameExpr) \
                and exprs[0].fullname == "builtins.None":
            values[formal] = None
        else:
            dims = _dims(exprs[0], types[0] if types else None)
            if dims is None:
                values[formal] = UNREAD
            elif len(dims) == 1 and not isinstance(exprs[0], (TupleExpr, ListExpr)):
                values[formal] = dims[0]
            else:
                values[formal] = dims
    return _made_move(op, values)


def read_contraction(ctx: FunctionContext | MethodContext, op: str) -> Contraction | None:
    """What a contraction's call states for the engine's rule
    (:mod:`spmd_mypy.engine.contractions`): einsum's equation (a string literal: the
    ``equation`` formal, or torch.einsum's first positional argument), attention's
    ``is_causal`` (a bool literal; anything else may be True).  None when the op is no
    contraction, or the equation is not a literal."""
    values: dict[str, object] = {}
    for formal in CONTRACTIONS[op][1]:
        if formal in ctx.callee_arg_names:
            k = ctx.callee_arg_names.index(formal)
        elif formal == "equation" and ctx.args and ctx.callee_arg_names[0] not in (
                None, "equation") and ctx.args[0]:
            k = 0  # torch.einsum(*args): the equation is the first positional argument
        else:
            continue
        exprs, types = ctx.args[k], ctx.arg_types[k]
        if not exprs:
            continue  # left out: the default
        t = types[0] if types else None
        if formal in ("dims", "dim"):  # tensordot's dims, vecdot's dim
            values[formal] = _contraction_dims(exprs[0], t)
        else:
            values[formal] = _literal(exprs[0], t)
    c, ranked = _made_contraction(op, values)
    if ranked and c is not None:
        ranks = tuple(1 if e is not None and _flat(ctx, e) else None for e in _operand_exprs(ctx))
        if any(r is not None for r in ranks):
            c = replace(c, ranks=ranks)
    return c


def _typed(value: object) -> object:
    """A key of a value an adapter read, equal only for values of the same classes (the
    engine tells True from 1, in a tuple too): a tuple's items each with theirs."""
    if isinstance(value, tuple):
        return (tuple, tuple([_typed(v) for v in value]))
    return (type(value), value)


def _values_key(op: str, values: dict[str, object]) -> tuple[object, ...]:
    key: list[object] = [op]
    for name, value in values.items():
        key.append(name)
        key.append(_typed(value))
    return tuple(key)


# (op, then each formal read: its name, the value, typed) -> make_move's
# DimMove (frozen, shared)
_MOVES_MADE: Final[ValueMemo[DimMove | None]] = ValueMemo()


def _made_move(op: str, values: dict[str, object]) -> DimMove | None:
    """``make_move(op, values)`` (the engine's, interpreted: a pure rule of the literals a
    call states, asked by every view's and join's call), memoised."""
    k = _values_key(op, values)
    hit = _MOVES_MADE.get(k)  # one lookup (the key, nested tuples, is hashed and compared once)
    if hit is not MISSING:
        return cast("DimMove | None", hit)
    return _MOVES_MADE.put(k, make_move(op, values))


# (op, then each formal read: its name, the value, typed) -> (make_contraction's
# Contraction, frozen, shared; whether its family reads the operands' ranks)
_MADE: Final[ValueMemo[tuple[Contraction | None, bool]]] = ValueMemo()


def _made_contraction(op: str, values: dict[str, object]) -> tuple[Contraction | None, bool]:
    """``make_contraction(op, values)`` (the engine's, interpreted: a pure rule of the
    literals a call states, asked by every contraction's call), memoised; and whether the
    Contraction's family (matmul, inner, tensordot) reads its operands' ranks."""
    k = _values_key(op, values)
    hit = _MADE.get(k)
    if hit is not MISSING:
        return cast("tuple[Contraction | None, bool]", hit)
    c = make_contraction(op, values)
    return _MADE.put(k, (c, c is not None and c.family in ("matmul", "inner", "tensordot")))


def _contraction_dims(e: Expression, t: Type | None) -> object:
    """tensordot's dims (an int literal, or a pair of lists of int literals) or vecdot's dim
    (an int literal); UNREAD for anything else."""
    one = _int(e, t)
    if one is not None:
        return one
    if isinstance(e, (TupleExpr, ListExpr)) and len(e.items) == 2:
        a, b = _dims(e.items[0], None), _dims(e.items[1], None)
        if a is not None and b is not None:
            return a, b
    return UNREAD


def _operand_exprs(ctx: FunctionContext | MethodContext) -> list[Expression | None]:
    """The expressions of a two-operand contraction's tensors in order (``a @ b``,
    ``a.dot(b)``, ``torch.inner(a, b)``: positional); [] where they cannot be told."""
    c = ctx.context
    if isinstance(c, OpExpr):
        return [c.left, c.right]
    if not isinstance(c, CallExpr):
        return []
    positional: list[Expression | None] = []
    for kind, arg in zip(c.arg_kinds, c.args):
        if kind != ARG_POS:
            break
        positional.append(arg)
    if hasattr(ctx, "type") and isinstance(c.callee, MemberExpr):  # a method: self first
        positional.insert(0, c.callee.expr)
    return positional[:2]


def _flat(ctx: FunctionContext | MethodContext, e: Expression) -> bool:
    """Whether ``e`` is a tensor made 1-d by its call: ``x.flatten()``, ``x.ravel()``,
    ``x.view(-1)``, ``x.reshape(-1)`` (no other arguments), ``torch.flatten(x)``,
    ``torch.ravel(x)``."""
    if not isinstance(e, CallExpr):
        return False
    callee = e.callee
    if isinstance(callee, RefExpr) and callee.fullname in ("torch.flatten", "torch.ravel"):
        return len(e.args) == 1 and e.arg_kinds[0] == ARG_POS
    if not isinstance(callee, MemberExpr):
        return False
    if callee.name in ("flatten", "ravel"):
        if e.args:
            return False
    elif callee.name in ("view", "reshape"):
        if len(e.args) != 1 or e.arg_kinds[0] != ARG_POS or _dims(e.args[0], None) != (-1,):
            return False
    else:
        return False
    t = lookup_type(ctx.api, callee.expr)
    p = get_proper_type(t) if t is not None else None
    return isinstance(p, Instance) and (p.type.fullname == TENSOR or any(
        p.type.has_base(b) for b in TORCH_TENSOR_BASES))


def read_variant(ctx: FunctionContext | MethodContext, op: str, module: bool = False) -> dict[str, object]:
    """The values of the formals that choose ``op``'s rule (engine ``variant_formals``:
    embedding_bag's mode, scatter_reduce's reduce, ...) for engine ``call_spec``: a str, bool,
    number or None literal, else ``UNREAD_VALUE``; a formal the call leaves out (or the
    overload mypy picked does not name) is absent (its default).  ``module``: the call of one
    of torch's modules (``nn.EmbeddingBag(..., mode="max")(ids)``), whose constructor holds
    those values: each is UNREAD_VALUE."""
    values: dict[str, object] = {}
    for formal in variant_formals(op):
        if module and op in REDUCED_LOSSES:  # a loss module: its constructor's reduction
            from .global_calls import module_reduction

            stated, value = module_reduction(ctx)
            if stated:
                values[formal] = value
            continue
        if module:
            values[formal] = UNREAD_VALUE
            continue
        if formal not in ctx.callee_arg_names:
            continue
        k = ctx.callee_arg_names.index(formal)
        exprs, types = ctx.args[k], ctx.arg_types[k]
        if not exprs:
            continue  # left out: the default
        e = exprs[0]
        if op in DTYPE_VIEW_OPS:
            # x.view(dtype): a dtype argument (``x.view(-1)`` tried on this overload is none)
            pt = get_proper_type(types[0]) if types else None
            if isinstance(pt, Instance) and pt.type.fullname in ("torch.dtype", "torch._C.dtype"):
                values[formal] = e.fullname if isinstance(e, RefExpr) and e.fullname.startswith(
                    "torch.") else UNREAD_VALUE
            continue
        if op in CAST_OPS and isinstance(e, RefExpr) and e.fullname.startswith(("torch.", "builtins.")):
            # a cast's dtype as written (``torch.int64``, ``torch.LongTensor``, ``bool``): its
            # full name for engine cast_is_integral (a variable's name reads as no dtype)
            values[formal] = e.fullname
            continue
        if isinstance(e, NameExpr) and e.fullname == "builtins.None":
            values[formal] = None
            continue
        if isinstance(e, (IntExpr, FloatExpr)):
            values[formal] = e.value
            continue
        value = _literal(e, types[0] if types else None)
        values[formal] = UNREAD_VALUE if value is UNREAD else value
    return values


def _literal(e: Expression, t: Type | None) -> object:
    """A str or bool literal (an expression, or a Literal / Final type), else UNREAD."""
    if isinstance(e, StrExpr):
        return e.value
    if isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False"):
        return e.fullname == "builtins.True"
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, Instance) and p.last_known_value is not None:
        p = p.last_known_value
    if isinstance(p, LiteralType) and isinstance(p.value, (str, bool)):
        return p.value
    return UNREAD


def _index_items(e: Expression, t: Type | None) -> tuple[str, ...] | None:
    """``x[...]``'s index as the items :mod:`spmd_mypy.engine.views` reads (None: an item
    it cannot read, a tensor or a list index)."""
    if isinstance(e, TupleExpr):
        p = get_proper_type(t) if t is not None else None
        types = p.items if isinstance(p, TupleType) and len(p.items) == len(e.items) else [None] * len(e.items)
        items = [_index_item(i, it) for i, it in zip(e.items, types)]
        return None if None in items else tuple(items)  # type: ignore[arg-type]
    p = get_proper_type(t) if t is not None else None
    if not isinstance(e, (SliceExpr, EllipsisExpr)) and isinstance(p, TupleType):
        items = [_index_item(None, it) for it in p.items]  # x[idx], idx a tuple variable
        return None if None in items else tuple(items)  # type: ignore[arg-type]
    one = _index_item(e, t)
    return None if one is None else (one,)


def _index_item(e: Expression | None, t: Type | None) -> str | None:
    if isinstance(e, SliceExpr):
        return FULL if e.begin_index is None and e.end_index is None and e.stride is None else SLICE
    if isinstance(e, EllipsisExpr):
        return ELLIPSIS
    if isinstance(e, NameExpr) and e.fullname == "builtins.None":
        return NEW
    if isinstance(e, (IntExpr, UnaryExpr)) and _int(e, None) is not None:
        return INT
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, LiteralType):
        p = p.fallback
    if isinstance(p, NoneType):
        return NEW
    if isinstance(p, Instance):
        if p.type.fullname == "builtins.int":
            return INT
        if p.type.fullname == "builtins.slice":
            return SLICE
        if p.type.fullname in ("builtins.ellipsis", "types.EllipsisType"):
            return ELLIPSIS
    return None
