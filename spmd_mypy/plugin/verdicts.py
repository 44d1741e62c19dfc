"""Compiled memos in front of the interpreted engine's pure rules, for the call hooks.

The engine (:mod:`spmd_mypy.engine`) stays interpreted, and its own memos hash its frozen
dataclasses (``SpmdType.__hash__``, ~9k instructions each): the hooks ask the same rule about
the same types thousands of times.  The TypeBuilder hands out the same ``SpmdType`` objects
again and again, so these memos key the types by identity (the entry keeps them alive, so an
id is never reused while its entry lives) and everything else by value, and answer a repeat
without entering the engine.  Only an answer without errors is kept (an error's message names
the operands' texts, which the keys leave out), as the engine's own verdict memo does.
Bounded, for a long-lived daemon.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Sequence, cast

from ..engine import collectives as coll
from ..engine.contractions import Contraction, may_sum
from ..engine.errors import SpmdError
from ..engine.ops import OP_SPECS, Operand, OpSpec, Reduction, Result, partial_op, propagate
from ..engine.types import SpmdType
from .memo import MISSING, ValueMemo

_LIMIT: Final = 20_000

# a dataclass -> the names of the fields its ``==`` compares
_FIELDS: Final[dict[type, tuple[str, ...]]] = {}


def value_key(x: object) -> object:
    """A key equal for two engine values (a Reduction, a DimMove, a Contraction, an OpSpec)
    exactly when they are ``==`` (a dataclass compares its class and its compared fields),
    read without running the dataclass's interpreted ``__hash__`` and ``__eq__`` (an adapter
    makes a fresh one per call).  Anything else (None, a str) is its own key."""
    if x is None or isinstance(x, str):
        return x
    cls = type(x)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls):
            return x
        names = tuple(f.name for f in dataclasses.fields(cls) if f.compare)
        _FIELDS[cls] = names
    return (cls, tuple([getattr(x, n) for n in names]))

# (spec, strict, reduction, move, then per operand (id(type), can_grad, id(role), shape,
# zero, ndim)): the fields engine ops.propagate keys its own verdicts by (its ``key``; keep
# the two in step), the type by identity -> (the operands' types, kept alive; the Result,
# without errors: handed to every repeat, read only)
_VERDICTS: Final[ValueMemo[tuple[list[object], Result]]] = ValueMemo(_LIMIT)


def _operands_key(key: list[object], ops: Sequence[Operand]) -> None:
    """Each operand's fields a verdict reads (ops.propagate's key), the type by identity:
    one tuple an operand (read once, on every lookup: a hit builds nothing else)."""
    for o in ops:
        key.append((id(o.type), o.can_grad, id(o.role), o.shape, o.zero, o.ndim))


def _kept(keep: list[object], ops: Sequence[Operand]) -> list[object]:
    """``keep`` with the objects :func:`_operands_key` keys by identity (an entry holds them,
    so their ids are not reused while it lives): made for a new entry only."""
    for o in ops:
        keep.append(o.type)
        keep.append(o.role)
    return keep


def propagate_memo(spec: OpSpec, ops: Sequence[Operand], strict: bool,
                   reduction: Reduction | None, move: object) -> Result:
    """``engine.ops.propagate(spec, ops, strict=strict, reduction=reduction, move=move)``,
    answered from the memo where the same op met the same operands without an error: the
    one Result made then (no error), shared by every repeat, so a caller never changes it
    (each makes its own Result where it needs another)."""
    name = spec.name
    key: list[object] = [name if OP_SPECS.get(name) is spec else value_key(spec), strict,
                         value_key(reduction), value_key(move)]
    _operands_key(key, ops)
    k = tuple(key)
    hit = _VERDICTS.get(k)
    if hit is not MISSING:
        return cast("tuple[list[object], Result]", hit)[1]
    result = propagate(spec, ops, strict=strict, reduction=reduction, move=move)  # type: ignore[arg-type]
    if not result.errors:
        _VERDICTS.put(k, (_kept([], ops), result))
    return result


# (id(actual), gradient_free, then the ids of the wanted types) -> (the types, kept alive):
# check_argument_any found no error.  Its other arguments (the texts, made_by, rank_max,
# index, rank_every, norm, no_grad) only shape an error's message: a local check_argument
# returns [] exactly where mismatched_axes(actual, expected, gradient_free) finds nothing,
# else one error.  A global type (a partition spec) is left to the engine.
_FITS: Final[ValueMemo[list[object]]] = ValueMemo(_LIMIT)


def _fit_key(actual: SpmdType, wanted: Sequence[SpmdType], gradient_free: bool,
             keep: list[object] | None) -> tuple[object, ...] | None:
    if actual.spec is not None:
        return None
    key: list[object] = [id(actual), gradient_free]
    for w in wanted:
        if w.spec is not None:
            return None
        key.append(id(w))
        if keep is not None:
            keep.append(w)
    return tuple(key)


# id(actual) * 31 + id(wanted) -> (actual, wanted): known_fit's yes for these very objects (a
# relaxed signature hands the same tuple of wanted types at every call), told without reading
# each wanted type's spec; only a tuple is kept (never changed).  Bounded, for a daemon.
_FIT_BY_ID: Final[dict[int, tuple[SpmdType, tuple[SpmdType, ...]]]] = {}


def known_fit(actual: SpmdType, wanted: Sequence[SpmdType]) -> bool:
    """Whether ``check_argument_any(actual, wanted, ...)`` (gradient_free=False) found no
    error before: then it finds none again, whatever the texts (the caller need not build
    them)."""
    by_id = id(actual) * 31 + id(wanted)  # (one int: a collision is told by identity)
    same = _FIT_BY_ID.get(by_id)
    if same is not None and same[0] is actual and same[1] is wanted:
        return True
    k = _fit_key(actual, wanted, False, None)
    if k is None or _FITS.get(k) is MISSING:
        return False
    if isinstance(wanted, tuple):
        if len(_FIT_BY_ID) >= _LIMIT:
            _FIT_BY_ID.clear()
        _FIT_BY_ID[by_id] = (actual, wanted)
    return True


def check_argument_memo(actual: SpmdType, wanted: Sequence[SpmdType], *, x_text: str,
                        where: str, made_by: object = None, rank_max: object = None,
                        index: object = None, gradient_free: bool = False,
                        rank_every: object = None, norm: object = None,
                        no_grad: bool = False) -> list[SpmdError]:
    """``engine.collectives.check_argument_any`` with these arguments, answered from the
    memo where the same types fitted before."""
    keep: list[object] = [actual]
    k = _fit_key(actual, wanted, gradient_free, keep)
    if k is not None and _FITS.get(k) is not MISSING:
        return []
    errors = coll.check_argument_any(
        actual, wanted, x_text=x_text, where=where, made_by=made_by,  # type: ignore[arg-type]
        rank_max=rank_max, index=index, gradient_free=gradient_free,  # type: ignore[arg-type]
        rank_every=rank_every, norm=norm, no_grad=no_grad)  # type: ignore[arg-type]
    if not errors and k is not None:
        _FITS.put(k, keep)
    return errors


# ("partial", op, strict, reduction, move, axes, id(bias type), then the core operands' key)
# -> (the types, kept alive; the result type): partial_op found no error
_PARTIALS: Final[ValueMemo[tuple[list[object], SpmdType]]] = ValueMemo(_LIMIT)


def partial_op_memo(op: str, operands: Sequence[Operand], axes: Sequence[str],
                    bias: SpmdType | None, bias_text: str, strict: bool,
                    reduction: Reduction | None, move: Contraction | None) -> Result:
    """``engine.ops.partial_op(op, operands, axes, bias=Operand(bias, bias_text), ...)``
    (no bias where ``bias`` is None), answered from the memo where the same call met the same
    types without an error (the texts only name things in its messages)."""
    key: list[object] = [op, strict, value_key(reduction), value_key(move), tuple(axes),
                         id(bias)]
    _operands_key(key, operands)
    k = tuple(key)
    hit = _PARTIALS.get(k)
    if hit is not MISSING:
        return Result(cast("tuple[list[object], SpmdType]", hit)[1])
    result = partial_op(op, operands, axes,
                        bias=Operand(bias, bias_text) if bias is not None else None,
                        strict=strict, reduction=reduction, move=move)
    if not result.errors:
        _PARTIALS.put(k, (_kept([bias], operands), result.type))
    return result


# (move, then per tensor operand: id(type), shape) -> (the types, kept alive; the axis)
_SUMMED: Final[ValueMemo[tuple[list[object], str | None]]] = ValueMemo(_LIMIT)


def first_summed_axis(move: Contraction, tensors: Sequence[Operand]) -> str | None:
    """The first mesh axis (in the order the operands name them) on which
    ``engine.contractions.may_sum(move, ...)`` holds for ``tensors`` (operands with a type),
    None where it holds on none; a pure rule of the call and the types, memoised."""
    key: list[object] = [value_key(move)]
    keep: list[object] = []
    for o in tensors:
        t = o.type
        keep.append(t)
        key.append(id(t))
        key.append(o.shape)
    k = tuple(key)
    hit = _SUMMED.get(k)
    if hit is not MISSING:
        return cast("tuple[list[object], str | None]", hit)[1]
    axes: dict[str, None] = {}
    for o in tensors:
        for a, _ in o.type.axes:  # type: ignore[union-attr]
            axes[a] = None
    found: str | None = None
    for a in axes:
        if may_sum(move, [(o.type.get(a), o.shape) for o in tensors]):  # type: ignore[union-attr]
            found = a
            break
    _SUMMED.put(k, (keep, found))
    return found
