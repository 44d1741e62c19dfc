"""torch DTensor placements as local SPMD types: the boundary between DTensor code and
spmd-typed code (``DTensor.to_local()``, ``DTensor.from_local(x, mesh, placements)``, torch's
``local_map``).

A DTensor's local tensor on one mesh dim, by its placement and the placement its gradient
is given (``grad_placements=``; by default Replicate for a Partial, else the placement
itself), measured on gloo ranks (the dtensor probe; tests/runtime/rt_dtensor.py)::

    placement     gradient placement   local type   why
    Replicate()   Replicate()          I            the backward gives every rank the whole
                                                    gradient, identical: I's dual
    Replicate()   Partial()            R            each rank's gradient is a part of the sum
    Shard(d)      Shard(d)             S(d)
    Partial()     Replicate()          P            (sum) its gradient is the same everywhere

Any other placement (``Partial("avg")``, a strided shard) or pair has no SPMD meaning: the
axis stays unknown.  The mesh dim names the axis (a sub-mesh ``mesh["tp"]`` names "tp"); an
unnamed mesh dim is unknown too.

Placements are written here as users write them: ``"Replicate()"``, ``"Shard(0)"``,
``"Partial()"`` (the adapter turns torch's objects into these texts; anything else is
passed as None).  Pure: no torch.
"""

from __future__ import annotations

from typing import Sequence

from .collectives import check_argument
from .errors import SpmdError
from .types import (INVARIANT, PARTIAL, REPLICATE, Kind, LocalType, SpmdType, bare, format_type,
                    same_values, shard)

REPLICATE_PLACEMENT = "Replicate()"
PARTIAL_PLACEMENT = "Partial()"


def _shard_dim(placement: str) -> int | None:
    if placement.startswith("Shard(") and placement.endswith(")"):
        try:
            return int(placement[len("Shard("):-1])
        except ValueError:
            return None
    return None


def default_grad_placement(placement: str | None) -> str | None:
    """The gradient's placement when ``grad_placements`` is not given (torch's
    ``_normalize_placements_for_grad``: a Partial's gradient is Replicate)."""
    if placement is not None and placement.startswith("Partial("):
        return REPLICATE_PLACEMENT
    return placement


def placement_type(placement: str | None, grad: str | None = None) -> LocalType | None:
    """The local type of a DTensor's local tensor on one mesh dim (the table above); None
    where the pair has no SPMD meaning."""
    if placement is None:
        return None
    if grad is None:
        grad = default_grad_placement(placement)
    if placement == REPLICATE_PLACEMENT:
        return {REPLICATE_PLACEMENT: INVARIANT, PARTIAL_PLACEMENT: REPLICATE}.get(grad or "")
    if placement == PARTIAL_PLACEMENT:
        return PARTIAL if grad == REPLICATE_PLACEMENT else None
    d = _shard_dim(placement)
    if d is not None and grad == placement:
        return shard(d)
    return None


def placements_type(axes: Sequence[str | None], placements: Sequence[str | None],
                    grads: Sequence[str | None] | None = None) -> SpmdType:
    """The type of a DTensor's local tensor: per mesh dim (``axes``: its names, None for an
    unnamed one) the type of its placement; the axes not on the mesh, and those whose
    placement has no meaning, unknown."""
    d: dict[str, LocalType] = {}
    for k, (axis, placement) in enumerate(zip(axes, placements)):
        grad = grads[k] if grads is not None and k < len(grads) else None
        t = placement_type(placement, grad)
        if axis is not None and t is not None:
            d[axis] = t
    return SpmdType.of(d)


def placement_of(t: LocalType) -> tuple[str, str | None] | None:
    """The placement (and gradient placement, None for the default) that holds a value of
    local type ``t``; None for a V without a shard dim (no placement holds it)."""
    if t.kind is Kind.I:
        return REPLICATE_PLACEMENT, None
    if t.kind is Kind.R:
        return REPLICATE_PLACEMENT, PARTIAL_PLACEMENT
    if t.kind is Kind.P:
        return PARTIAL_PLACEMENT, None
    if t.dim is not None and t.by_rank is None:
        return f"Shard({t.dim})", None
    return None


def _list(items: Sequence[str | None]) -> str:
    return "[" + ", ".join(i or "?" for i in items) + "]"


def _grads_of(placements: Sequence[str | None], grads: Sequence[str | None] | None) -> list[str | None]:
    """Each placement's gradient placement as given (None: the default)."""
    return [grads[k] if grads is not None and k < len(grads) else None for k in range(len(placements))]


def check_from_local(have: SpmdType, axes: Sequence[str | None],
                     placements: Sequence[str | None], grads: Sequence[str | None] | None, *,
                     x_text: str, where: str, placements_arg: str | None = "placements",
                     one: bool = False, can_grad: bool = True) -> list[SpmdError]:
    """A local value of type ``have`` wrapped as a DTensor with ``placements`` (on a mesh
    whose dims name ``axes``): ``DTensor.from_local(x, mesh, placements)``, or the result of
    a function under torch's ``local_map`` and its ``out_placements``.  The value must have
    the placements' type (:func:`placements_type`) on every axis both know, by the argument
    rule (:func:`.collectives.check_argument`, ``spmd-mismatch``): its fix makes the value
    fit; a second fix names the placements that hold the value as it is (``placements_arg``
    as written; None: not offered; ``one``: the argument takes one placement, a parallel
    style's ``input_layouts=Shard(1)``).  ``where``: the value as the message names it (``x
    passed to DTensor.from_local``).  ``can_grad``: the value can carry a gradient; where it
    cannot (``torch.no_grad()``, a detached value) an R value fits Replicate() and an I value
    Replicate() with grad_placements=[Partial()] (types.SAME_VALUES: they differ only in the
    backward, as for a collective's src)."""
    want = placements_type(axes, placements, grads)
    if not can_grad:
        want = _same_values_as(want, have)
    errors = check_argument(have.local(), want, x_text=x_text, where=where)
    if not errors:
        return []
    # the placements (and gradient placements) that hold the value as it is
    fitted = list(placements)
    fitted_grads = _grads_of(placements, grads)
    fits = True
    for k, axis in enumerate(axes):
        if axis is None or k >= len(fitted):
            continue
        old, new = have.get(axis), want.get(axis)
        if old is None or new is None or check_argument(
                SpmdType.of({axis: old}), SpmdType.of({axis: new}), x_text="x", where="x") == []:
            continue
        p = placement_of(old)
        if p is None:
            fits = False
            break
        fitted[k], fitted_grads[k] = p
    e = errors[0]
    reason = (" (a DTensor's Replicate() is I: its backward gives every rank the whole "
              "gradient; Partial() is P; Shard(d) is S(d))")
    alt = ""
    # an R value is held by Replicate() with grad_placements=[Partial()] only where the
    # gradient arriving can be redistributed to Partial (not from a Shard: torch raises), so
    # that is not offered as a fix
    if fits and placements_arg and fitted != list(placements) and not any(fitted_grads):
        shown = (fitted[0] or "?") if one and len(fitted) == 1 else _list(fitted)
        alt = f"; or pass {placements_arg}={shown} if {bare(x_text)} is meant as it is"
    return [SpmdError(e.code, e.message + alt + reason)]


def _same_values_as(want: SpmdType, have: SpmdType) -> SpmdType:
    """``want`` with each R or I axis where the value's type ``have`` has the other of the
    two taken as ``have``'s (a gradient-free value: R and I hold the same values on every
    rank, and a message names the value's type as it is)."""
    for axis, lt in want.axes:
        new = have.get(axis)
        if new is not None and same_values(new, lt):
            want = want.replace(axis, new)
    return want


def check_placements_for(want: SpmdType, axes: Sequence[str | None],
                         placements: Sequence[str | None], grads: Sequence[str | None] | None, *,
                         where: str, placements_arg: str) -> list[SpmdError]:
    """A function under torch's ``local_map`` whose parameter is annotated ``want``, given the
    local value of ``placements`` (its ``in_placements`` entry, ``placements_arg`` as written,
    ``in_placements[1]``): the placements' type (:func:`placements_type`) must be the
    annotation on every axis both know (S(i) where V is annotated).  The fix names the
    placements that give the annotated type."""
    have = placements_type(axes, placements, grads)
    bad: list[tuple[str, LocalType, LocalType]] = []
    for axis, new in want.axes:
        old = have.get(axis)
        if old is not None and check_argument(SpmdType.of({axis: old}), SpmdType.of({axis: new}),
                                              x_text="x", where="x"):
            bad.append((axis, old, new))
    if not bad:
        return []
    fitted = list(placements)
    fitted_grads = _grads_of(placements, grads)
    fits = True
    for axis, _, new in bad:
        p = placement_of(new)
        if p is None or axis not in axes:
            fits = False
            break
        k = list(axes).index(axis)
        fitted[k], fitted_grads[k] = p
    what = ", and ".join(f'{old} on "{axis}" where {new} is annotated' for axis, old, new in bad)
    fix = ""
    if fits:
        fix = f"; write {placements_arg} as {_list(fitted)}"
        if any(fitted_grads):
            given = [g or default_grad_placement(p) for g, p in zip(fitted_grads, fitted)]
            fix += f" and its in_grad_placements entry as {_list(given)}"
    else:
        fix = "; no placement holds a Varying value without a shard dim: annotate it S(i)"
    return [SpmdError(
        "spmd-mismatch",
        f"{where} is {format_type(want)} but {placements_arg}={_list(placements)} gives it "
        f"{format_type(have)}: it is {what}{fix} (a DTensor's Replicate() is I, Partial() is "
        f"P, Shard(d) is S(d))",
    )]
