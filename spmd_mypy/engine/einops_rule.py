"""einops' ``rearrange``, ``repeat``, ``reduce`` and ``einsum`` (local SPMD), read from the
pattern string.

einops runs a pattern as a chain of torch views: split each composite input group
(``unflatten``), drop or reduce the axes the output does not name (``select``; the
reduction), order the rest as the output names them (``permute``), add the output's new
axes (``unsqueeze`` and ``expand``) and merge each composite output group (``flatten``).
The rule follows a Shard(i) operand's dim through that chain with :mod:`.views`' rule for
each step, so it puts the shard dim where the views would::

    q: S(2)    rearrange(q, "b s (h d) -> b h s d", h=2)  ->  S(1)  (the outer member of a
                                                                     split group: the heads)
    o: S(1)    rearrange(o, "b h s d -> b s (h d)")       ->  S(2)  (the outer member of a
                                                                     merged group)
    o: S(2)    rearrange(o, "b h s d -> b h (s d)")       ->  S(2)
    o: S(3)    rearrange(o, "b h s d -> b h (s d)")       ->  V     (an inner member: each
                                                                     rank's rows interleave)
    x: S(0)    rearrange(x, "b ... d -> d b ...")         ->  S(1)
    x: S(0)    repeat(x, "s d -> b s d", b=3)             ->  S(1)  (a new broadcast axis)
    x: S(0)    repeat(x, "s d -> (s 2) d")                ->  S(0)  (each row twice, in place)
    x: S(0)    repeat(x, "s d -> (2 s) d")                ->  V     (the local block tiled:
                                                                     [x0 x0], [x1 x1] is not
                                                                     [x0 x1 x0 x1])
    x: S(1)    reduce(x, "b s d -> b s", "mean")          ->  S(1)
    x: S(1)    reduce(x, "b s d -> b d", "mean")          ->  V     (the shard axis reduced:
                                                                     per-rank means)
    p: P       reduce(p, "a b -> a", "sum")               ->  P     (linear)
    p: P       reduce(p, "a b -> a", "max")               ->  error (a non-linear op of a
                                                                     pending sum)

The kinds (R, I, V, P and their mixes) are the op rule's (:func:`.ops.propagate`):
``rearrange`` and ``repeat`` are linear views, ``reduce`` is the torch reduction it names
(``sum``, ``mean``: linear; ``max``, ``min``, ``prod``, ``any``, ``all``: non-linear; a
callable: unknown, checked as non-linear).  A list operand is stacked on a new dim 0 first,
as einops does (``torch.stack``: every item S(i) with the same i gives S(i + 1)).

``einops.einsum(x, w, "b s h, h o -> b s o")`` is torch's einsum with the axis names
written as letters (:func:`einsum_equation`): the contraction rule (:mod:`.contractions`).

A pattern that is not a literal, or that einops refuses, makes no :class:`Pattern`: the
adapters then type the call by the op rule alone (the shard dim unknown: V).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from typing import TYPE_CHECKING

from .types import RANKS, VARYING, Kind, LocalType, from_ranks_signed
from .views import DimMove, moved_dim

if TYPE_CHECKING:
    from .contractions import Contraction
    from .ops import Operand, Result

EINOPS_OPS = ("rearrange", "repeat", "reduce")
# einops' reduction names -> torch's reduction (its class in the op table: linear or not)
REDUCTIONS = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin", "prod": "prod",
              "any": "any", "all": "all"}
ELLIPSIS = "..."
_GROUPED_ELLIPSIS = "(...)"  # the ellipsis inside a group: its axes merged
_TOKEN = re.compile(r"\.\.\.|[()]|[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S")


class PatternError(Exception):
    """A pattern einops refuses (the message says why)."""


Groups = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Pattern:
    """An einops call's pattern, parsed: each side's groups of axis names (an anonymous
    axis, a number or ``()``, has a name of its own starting with ``#``; ``...`` stands for
    the ellipsis axes).  ``op``: rearrange, repeat or reduce; ``stacked``: the operand is a
    list, stacked on a new dim 0 first."""

    op: str
    left: Groups
    right: Groups
    stacked: bool = False


def _side(text: str, start: int) -> tuple[Groups, int]:
    groups: list[tuple[str, ...]] = []
    group: list[str] | None = None
    n = start
    for tok in _TOKEN.findall(text):
        if tok == "(":
            if group is not None:
                raise PatternError("nested parentheses")
            group = []
        elif tok == ")":
            if group is None:
                raise PatternError("an unmatched ')'")
            if not group:  # "()": a unit axis
                group.append(f"#{n}")
                n += 1
            groups.append(tuple(group))
            group = None
        else:
            if tok[0].isdigit():
                name = f"#{n}"
                n += 1
            elif tok == ELLIPSIS:
                name = ELLIPSIS if group is None else _GROUPED_ELLIPSIS
            elif tok[0].isalpha() or tok[0] == "_":
                name = tok
            else:
                raise PatternError(f"'{tok}' is no axis")
            if group is None:
                groups.append((name,))
            else:
                group.append(name)
    if group is not None:
        raise PatternError("an unmatched '('")
    return tuple(groups), n


def parse_pattern(op: str, pattern: str, stacked: bool = False) -> Pattern:
    """The :class:`Pattern` of an einops ``op`` call; raises :class:`PatternError` for one
    einops refuses (no ``->``, a name twice on a side, ``...`` twice or inside a group on
    the left, an output name the input lacks where ``op`` adds no axes)."""
    if op not in EINOPS_OPS:
        raise PatternError(f"{op} is no einops op")
    if pattern.count("->") != 1:
        raise PatternError("a pattern has one '->'")
    lhs, rhs = pattern.split("->")
    left, n = _side(lhs, 0)
    right, _ = _side(rhs, n)
    for side in (left, right):
        names = [a for g in side for a in g]
        if len(set(names)) != len(names):
            raise PatternError("an axis named twice on one side")
    left_names = {a for g in left for a in g}
    right_names = {a for g in right for a in g}
    if _GROUPED_ELLIPSIS in left_names:
        raise PatternError("'...' inside a group on the left")
    right_ellipsis = bool({ELLIPSIS, _GROUPED_ELLIPSIS} & right_names)
    if right_ellipsis and ELLIPSIS not in left_names:
        raise PatternError("'...' in the output only")
    if ELLIPSIS in left_names and not right_ellipsis and op != "reduce":
        raise PatternError("'...' in the input only (reduce's alone reduces it)")
    for a in right_names - left_names - {_GROUPED_ELLIPSIS}:
        if op != "repeat" and not a.startswith("#"):
            raise PatternError(f"the output axis {a} is not in the input")
    return Pattern(op, left, right, stacked)


def _expand(groups: Groups, k: int) -> list[tuple[str, ...]]:
    ell = tuple(f"...{j}" for j in range(k))
    out: list[tuple[str, ...]] = []
    for g in groups:
        if g == (ELLIPSIS,):
            out.extend((a,) for a in ell)
        else:
            out.append(tuple(x for a in g for x in (ell if a == _GROUPED_ELLIPSIS else (a,))))
    return out


def _fits(p: Pattern, rank: int) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]] | None:
    """Both sides' groups at operand ``rank`` (the ellipsis expanded); None when the pattern
    takes no operand of that rank."""
    named = len(p.left) - (1 if (ELLIPSIS,) in p.left else 0)
    k = rank - named
    if (ELLIPSIS,) in p.left:
        if k < 0:
            return None
    elif k != 0:
        return None
    return _expand(p.left, k), _expand(p.right, max(k, 0))


class _NoStep(Exception):
    """A step the views' rule takes no operand of that rank for (a scalar left)."""


def _moved(move: DimMove, d: int | None, rank: int) -> tuple[int, int | None]:
    """One step of the chain: views' rule for ``move`` on a shard at ``d`` (None: none)."""
    if d is None:
        if rank == 0 and move.family == "unsqueeze":
            return 1, None  # a unit axis on a scalar (every input axis reduced)
        at = moved_dim(move, 0, rank)
        if at is None:
            raise _NoStep
        return at[0], None
    at = moved_dim(move, d, rank)
    if at is None:
        raise _NoStep
    return at


def pattern_dim(p: Pattern, d: int | None, rank: int) -> tuple[int, int | None] | None:
    """(the result's rank, its shard dim or None) for an operand of ``rank`` (each item of a
    stacked list) sharded on ``d`` (non-negative; None: no layout); None when the pattern
    takes no operand of that rank."""
    try:
        return _chain(p, d, rank)
    except _NoStep:
        return None


def _chain(p: Pattern, d: int | None, rank: int) -> tuple[int, int | None] | None:
    if p.stacked:
        rank, d = _moved(DimMove("stack", (0,)), d, rank)
    sides = _fits(p, rank)
    if sides is None:
        return None
    left, right = sides
    # 1. split every composite input group: views' unflatten (the shard goes to the outer
    #    member)
    pos = 0
    for g in left:
        if len(g) > 1:
            rank, d = _moved(DimMove("unflatten", (pos, len(g))), d, rank)
        pos += len(g)
    axes = [a for g in left for a in g]
    out_axes = [a for g in right for a in g]
    # 2. the input axes the output does not name: reduced (reduce) or unit axes dropped
    for k in reversed(range(len(axes))):
        if axes[k] not in out_axes:
            rank, d = _moved(DimMove("select", (k,)), d, rank)
            del axes[k]
    # 3. the kept axes in the output's order
    if rank:
        order = tuple(axes.index(a) for a in out_axes if a in axes)
        rank, d = _moved(DimMove("permute", (order,)), d, rank)
    # 4. the output's new axes (repeat's, a unit axis): unsqueeze (and expand, no move)
    for k, a in enumerate(out_axes):
        if a not in axes:
            rank, d = _moved(DimMove("unsqueeze", (k,)), d, rank)
    # 5. merge every composite output group: views' flatten (a shard stays on the outer
    #    member only)
    starts = []
    pos = 0
    for g in right:
        starts.append((pos, len(g)))
        pos += len(g)
    for start, n in reversed(starts):
        if n > 1:
            rank, d = _moved(DimMove("flatten", (start, start + n - 1)), d, rank)
    return rank, d


def pattern_layout(p: Pattern, operands: Sequence[tuple[LocalType | None, tuple[int, ...] | None]]
                   ) -> LocalType:
    """The layout of a Varying result of einops call ``p`` on one mesh axis: ``operands``
    (the operand, or the items of a stacked list) as (the type on the axis, None when
    unknown; the shape, None when unknown: the static checker)."""
    if not operands:
        return VARYING
    first = operands[0][0]
    if first is None or first.kind is not Kind.V:
        return VARYING
    shape = operands[0][1]
    ranks = range(1, RANKS + 1) if shape is None else (len(shape),)
    layouts: dict[int, int | None] = {}
    for rank in ranks:
        dims: set[int | None] = set()
        possible = True
        for lt, _ in operands:
            if lt is None or lt.kind is not Kind.V:
                dims.add(None)  # beside a stacked item that is not V: V
                continue
            ok, d = lt.at_rank(rank)
            if not ok:
                possible = False
                break
            dims.add(None if d is None else d % rank)
        if not possible:
            continue
        d = dims.pop() if len(dims) == 1 else None
        at = pattern_dim(p, d, rank)
        if at is None or at[0] < 1:
            continue  # the pattern takes no operand of this rank, or leaves a scalar
        if at[0] in layouts and layouts[at[0]] != at[1]:
            layouts[at[0]] = None  # operands of two ranks give this rank (``... -> (...)``)
        else:
            layouts[at[0]] = at[1]
    negative = (first.at_high_ranks().dim or 0) < 0
    if shape is not None and len(layouts) == 1:
        # check mode: written as the static checker writes it where it states the same dim
        ((out_rank, d),) = layouts.items()
        static = pattern_layout(p, [(lt, None) for lt, _ in operands])
        possible, written = static.at_rank(out_rank)
        if d is not None and possible and written is not None and written % out_rank == d:
            return LocalType(Kind.V, written)
    return from_ranks_signed(layouts, negative)


def einsum_equation(pattern: str) -> str | None:
    """einops.einsum's pattern (axis names, ``...``, spaces between) as torch's equation
    (one letter an axis, as einops passes it to torch.einsum); None for one einops
    refuses (no ``->``, a group, an axis name that is no identifier, too many names)."""
    if pattern.count("->") != 1 or "(" in pattern or ")" in pattern:
        return None
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    names: dict[str, str] = {}

    def term(t: str) -> str | None:
        out = ""
        for tok in t.split():
            if tok == ELLIPSIS:
                out += ELLIPSIS
                continue
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
                return None
            if tok not in names:
                if len(names) >= len(letters):
                    return None
                names[tok] = letters[len(names)]
            out += names[tok]
        return out

    lhs, rhs = pattern.split("->")
    terms = [term(t) for t in lhs.split(",")]
    out = term(rhs)
    if out is None or any(t is None for t in terms):
        return None
    return ",".join(terms) + "->" + out  # type: ignore[arg-type]


def reduction_op(op: str, reduction: object) -> str | None:
    """The op name whose class (:data:`.ops.OP_SPECS`) types einops call ``op``: a view for
    rearrange and repeat, reduce's torch reduction (None: a callable or a name einops does
    not take, checked as an unknown op)."""
    if op == "rearrange":
        return "permute"
    if op == "repeat":
        return "expand"
    if isinstance(reduction, str):
        return REDUCTIONS.get(reduction)
    return None


def propagate_einops(op: str, operands: Sequence[Operand], pattern: object,
                     reduction: object = None, stacked: bool = False,
                     strict: bool = False) -> Result:
    """Type one einops call ``op`` (rearrange, repeat, reduce) of ``operands`` (the tensor,
    or a list's items with ``stacked``) by the op rule (:func:`.ops.propagate`) with the
    pattern's layout (:func:`pattern_layout`); ``pattern``: the pattern string, anything
    else when not a literal (then the layout is unknown: V)."""
    from .ops import OpClass, OpSpec, classify, propagate
    name = reduction_op(op, reduction)
    base = classify(name) if name is not None else None
    if op == "reduce":
        label = f'reduce(..., "{reduction}")' if isinstance(reduction, str) else "reduce"
        spec = OpSpec(label, base.op_class if base is not None else OpClass.NONLINEAR,
                      known=base is not None)
    else:
        spec = OpSpec(op, OpClass.LINEAR)
    move: Pattern | None = None
    if isinstance(pattern, str):
        try:
            move = parse_pattern(op, pattern, stacked)
        except PatternError:
            move = None
    return propagate(spec, operands, strict=strict, move=move)


def einsum_contraction(pattern: object) -> Contraction | None:
    """The torch einsum an einops.einsum pattern states (None: not a literal einops takes)."""
    from .contractions import Contraction
    eq = einsum_equation(pattern) if isinstance(pattern, str) else None
    return Contraction("einsum", equation=eq) if eq is not None else None


def propagate_einsum(operands: Sequence[Operand], pattern: object,
                     strict: bool = False, move: Contraction | None = None) -> Result:
    """einops.einsum(*operands, pattern): torch's einsum rule on the translated equation
    (the layout unknown, V, when the pattern is not a literal einops takes); ``move``: that
    contraction as the adapter amended it (the axes its result is declared Partial on)."""
    from .ops import propagate
    return propagate("einsum", operands, strict=strict,
                     move=move if move is not None else einsum_contraction(pattern))
