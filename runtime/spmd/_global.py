"""Global SPMD at runtime: the partition-spec redistribute and ``local_map``.

``spmd.redistribute(x, src=PS[...], dst=PS[...])`` runs the plan of the engine's
planner (:mod:`spmd_mypy.engine.redistribute`): each step is one of the typed
collectives or conversions (:class:`._collectives._Collective`), on one mesh axis or
on a tuple of axes flattened into one group, so the backward is the table's, step
by step in reverse::

    x: f32[8@(dp,tp)]                      rank (d, t) holds chunk 2d + t
    y = spmd.redistribute(x, src=PS[("dp", "tp"),], dst=PS[("tp", "dp"),])
        all_gather(x, ("dp", "tp"), src=S(0), dst=I)   one collective over the 4 ranks
        convert(x, ("tp", "dp"), src=I, dst=S(0))      rank (d, t) keeps chunk 2t + d

(``PS[("dp", "tp"),]`` with the comma: ``PS[("dp", "tp")]`` is ``PS["dp", "tp"]`` in
Python, two dims.)

``src``/``dst`` are a bare ``PS[...]`` or a whole ``Tensor[PS[...], P["dp"], ...]``
(how the axes a side does not name are filled in: :func:`~spmd_mypy.engine.redistribute.resolve`).
The plan is made once per (src, dst, mesh) and cached.

``@spmd.local_map(in_types=..., out_types=..., axes=...)``: the body runs in local
SPMD on ``axes`` (default: every mesh axis).  On values it is the identity; in check
mode (``spmd.typecheck()``) each tensor argument must have its global type in
``in_types`` (then its tracked type forgets the partition spec on ``axes``: a
sharded axis becomes S(d)), and each tensor result must fit ``out_types`` on
exit (it is then given that global type)::

    @spmd.local_map(in_types=(Tensor[PS[None, "tp"]], Tensor[PS["tp", None]]),
                    out_types=Tensor[PS[None, None], P["tp"]], axes=("tp",))
    def row_parallel(h: Tensor[V["tp"]], w: Tensor[V["tp"]]) -> Tensor[P["tp"]]:
        return spmd.reinterpret(h @ w, "tp", src=V, dst=P)
"""

from __future__ import annotations

import contextlib
import functools
import typing
from typing import Any, Callable, Sequence, TypeVar

import torch

from spmd_mypy.engine import global_spmd
from spmd_mypy.engine import redistribute as planner
from spmd_mypy.engine.annotations import Entry, build
from spmd_mypy.engine.collectives import TRANSITIONS, form
from spmd_mypy.engine.errors import SpmdError, SpmdTypeError
from spmd_mypy.engine.ops import Operand
from spmd_mypy.engine.types import SpmdType, format_spec, format_type

from . import _mesh
from ._collectives import (SpmdCollectiveError, _agree_step, _Collective, _FuncCollective,
                           _Step, _transforming)
from ._types import spmd_type_of_annotation

_F = TypeVar("_F", bound=Callable[..., Any])


def global_type_of(value: Any, what: str) -> SpmdType:
    """A bare ``PS[...]``, a ``Tensor[...]`` annotation or an engine SpmdType -> SpmdType,
    the current mesh's flattened dims read as their components (``PS["dp", None]`` after
    ``_flatten("dp")`` is ``PS[("dp_replicate", "dp_shard"), None]``, as statically)."""
    if isinstance(value, SpmdType):
        return _expanded(value)
    if isinstance(value, Entry):
        t, errors = build([value], None)
        if errors:
            raise SpmdCollectiveError(errors[0])
        return _expanded(t)
    t = spmd_type_of_annotation(value)
    if t is not None:
        return _expanded(t)
    raise TypeError(f"redistribute's {what}= takes PS[...] or Tensor[PS[...], ...] (global SPMD) "
                    f"or, with an axis, one of R, I, V, P, S(i); not {value!r}")


def _expanded(t: SpmdType) -> SpmdType:
    t, errors = _mesh.expand_type(t)
    if errors:
        raise SpmdCollectiveError(errors[0])
    return t


class _GlobalPlan:
    """An engine plan bound to this mesh: one _Step per step (groups resolved)."""

    __slots__ = ("plan", "steps")

    def __init__(self, plan: planner.Plan) -> None:
        self.plan = plan
        self.steps: list[_Step] = []
        for s in plan.steps:
            transition = TRANSITIONS[(s.op, form(s.src), form(s.dst))]
            group = _mesh.resolve_axis(s.axis)
            self.steps.append(_Step(transition, s.src.dim, s.dst.dim, group))


def _mesh_names() -> tuple[str, ...] | None:
    binding = _mesh._current
    return binding.names if binding is not None else None


def plan_for(src: SpmdType, dst: SpmdType) -> planner.Plan:
    """The engine's plan on the current mesh (raises SpmdCollectiveError if there is none)."""
    binding = _mesh._current
    p = planner.plan(src, dst, _mesh_names(), "the current mesh's dims",
                     binding.written_aliases() if binding is not None else ())
    if p.errors:
        raise SpmdCollectiveError(p.errors[0])
    return p


def _bound_plan(src: SpmdType, dst: SpmdType) -> _GlobalPlan:
    binding = _mesh._current
    cache = binding.plans if binding is not None else _mesh._bare_plans
    key = ("global-redistribute", src, dst)
    bound = cache.get(key)
    if bound is None:
        bound = cache[key] = _GlobalPlan(plan_for(src, dst))
    return bound


def redistribute_global(x: torch.Tensor, src: Any, dst: Any) -> torch.Tensor:
    """``spmd.redistribute(x, src=PS[...], dst=PS[...])``: run the planner's steps."""
    from . import _checking

    src_t, dst_t = global_type_of(src, "src"), global_type_of(dst, "dst")
    bound = _bound_plan(src_t, dst_t)
    rank = len(bound.plan.src.spec or ())
    if x.ndim != rank:  # a local tensor has the global rank: else the steps move wrong dims
        raise SpmdCollectiveError(SpmdError(
            "spmd-global",
            f"spmd.redistribute(x, src={format_spec(bound.plan.src.spec or ())}, ...): src "
            f"states rank {rank} but x has {x.ndim} dims; give src one entry per dim of x"))
    if _checking.ACTIVE:
        have = _checking.typeof(x)
        if have:
            text = _checking._texts([x], ["x"])[0]
            errors = planner.check_source(have, src_t, x_text=text, dst=dst_t)
            if errors:
                raise SpmdTypeError(errors[0])
    y = x
    checking = _checking.ACTIVE
    ctx = _checking.suspended() if checking else contextlib.nullcontext()
    with ctx:
        for step in bound.steps:
            if checking:  # the ranks' dtypes and shapes agree (each step, its input)
                _agree_step(step, y, None)
            if _transforming():  # torch.func: its Function, batched by its vmap rule
                y = _FuncCollective.apply(y, step, None)
            elif y.requires_grad and torch.is_grad_enabled():
                y = _Collective.apply(y, step, None)
            else:
                y = step.impl(step, y, None)
        if y is x:
            y = x.view_as(x)  # a new tensor: its type is dst, x's stays src
    if _checking.ACTIVE:
        have = _checking.typeof(x) or SpmdType()
        out = bound.plan.dst.as_dict()
        for a, lt in have.axes:  # axes neither side names keep x's type
            out.setdefault(a, lt)
        _checking._set(y, SpmdType.of(out, bound.plan.dst.spec))
    return y


# --------------------------------------------------------------------------------------
# local_map


def _types_tuple(types: Any, what: str) -> tuple[SpmdType | None, ...]:
    items = types if isinstance(types, (tuple, list)) else (types,)
    out: list[SpmdType | None] = []
    for t in items:
        if t is None:
            out.append(None)
            continue
        st = spmd_type_of_annotation(t)
        if st is not None:
            st = _expanded(st)
        else:
            if isinstance(t, Entry) and t.marker == "PS":
                st = global_type_of(t, what)
            else:
                raise TypeError(f"local_map's {what} takes Tensor[PS[...], ...] types (or None for a "
                                f"non-tensor), not {t!r}")
        out.append(st)
    return tuple(out)


def to_local(t: SpmdType, axes: Sequence[str] | None) -> SpmdType:
    """``t`` seen inside a local_map on ``axes`` (the engine's rule, as the plugin sees it).
    When ``axes`` names every axis of the current mesh (without a mesh: every axis the
    type names) the value is fully local (no spec): the local rules apply to it inside
    the body, as they do statically."""
    from . import _mesh

    b = _mesh._current
    names = tuple(b.names) if b is not None else tuple(a for a, _ in t.axes)
    return global_spmd.localize(t, axes, names)


def check_exit(actual: SpmdType, declared: SpmdType, axes: Sequence[str] | None,
               *, what: str) -> list[SpmdError]:
    """A body's local result against its ``out_types`` entry: the plugin's check and message."""
    return global_spmd.check_local_map_boundary(actual, declared, axes, what=what,
                                                where="out_types")


def check_entry(actual: SpmdType, declared: SpmdType, *, what: str,
                x_text: str = "x") -> list[SpmdError]:
    """An argument's tracked (global) type against its ``in_types`` entry (``x_text``: the
    argument as the caller wrote it, for the fix)."""
    if actual.spec is not None and declared.spec is not None and actual.spec != declared.spec:
        return [SpmdError(
            "spmd-mismatch",
            f"local_map: {what} is {format_type(actual)} but in_types declares "
            f"{format_type(declared)}; "
            + global_spmd.redistribute_fix(Operand(actual, x_text), actual.spec, declared.spec))]
    return global_spmd.check_local_map_boundary(actual, declared, None, what=what,
                                                where="in_types") if actual.spec is None else []


def local_map(*, in_types: Any, out_types: Any, axes: Sequence[str] | None = None
              ) -> Callable[[_F], _F]:
    """Run the decorated function in local SPMD on ``axes`` (default: all mesh axes).

    ``in_types``/``out_types``: the global types at the boundary (a type, or a tuple
    of types, one per argument / result; ``None`` for a non-tensor).  No effect on
    values; in check mode the arguments are checked against ``in_types`` and switched
    to local types, the results checked against ``out_types`` and given those.
    """
    ins = _types_tuple(in_types, "in_types")
    outs = _types_tuple(out_types, "out_types")
    single_out = not isinstance(out_types, (tuple, list))
    local_axes = tuple(axes) if axes is not None else None

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from . import _checking

            if not _checking.ACTIVE:
                return fn(*args, **kwargs)
            name = fn.__qualname__
            saved = []
            for i, (v, t) in enumerate(zip(args, ins)):  # in_types: one entry per argument
                if t is None or not isinstance(v, torch.Tensor):
                    continue
                have = _checking.typeof(v)
                if have and check_entry(have, t, what=f"argument {i} of {name}"):
                    # named for the message only (the caller's frame is searched for it)
                    text = _checking._texts([v], ["x"])[0]
                    raise SpmdTypeError(check_entry(
                        have, t, what=f"argument {i} ({text}) of {name}", x_text=text)[0])
                _checking._stamp_declared(
                    v, t, f"argument {i} ({{x}}) of local_map {name} has in_types "
                    + format_type(t).replace("{", "{{").replace("}", "}}"))
                saved.append((v, _checking.typeof(v)))
                _checking._set(v, to_local(_checking.typeof(v) or t, local_axes))
            try:
                result = fn(*args, **kwargs)
            finally:
                for v, t0 in saved:  # the caller's tensors keep their global types
                    if t0 is not None:
                        _checking._set(v, t0)
            results = (result,) if single_out else tuple(result)
            if len(results) != len(outs):
                raise TypeError(f"local_map {name} returned {len(results)} values, out_types "
                                f"declares {len(outs)}")
            for k, (r, t) in enumerate(zip(results, outs)):
                if t is None or not isinstance(r, torch.Tensor):
                    continue
                have = _checking.typeof(r) or SpmdType()
                errs = check_exit(have, t, local_axes,
                                  what=f"result {k} of local_map {name}" if not single_out
                                  else f"the result of local_map {name}")
                if errs:
                    raise SpmdTypeError(errs[0])
                merged = t.as_dict()
                for a, lt in have.axes:
                    if local_axes is not None and a not in local_axes:
                        merged.setdefault(a, lt)
                _checking._set(r, SpmdType.of(merged, t.spec))
            return result

        wrapper.__spmd_local_map__ = (ins, outs, local_axes)  # type: ignore[attr-defined]
        return typing.cast(_F, wrapper)

    return decorate


__all__ = ["redistribute_global", "local_map", "global_type_of", "plan_for", "to_local",
           "check_exit"]
