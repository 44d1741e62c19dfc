"""The redistribute planner: the collectives from one partition spec to another.

``spmd.redistribute(x, src=..., dst=...)`` (SPEC section 6) goes from a global type
to another keeping the global value; this module plans the steps.  Each step is one
op of the engine's table (:data:`~.collectives.TRANSITIONS`) on one mesh axis or on
a tuple of axes flattened into one collective (the ranks row-major over the axes in
the order written, as ``PS[("dp", "tp"), None]`` orders them)::

    f32[8@(dp,tp)]  ->  f32[8@(tp,dp)]           (the two ranks (0,1) and (1,0) swap)

        all_gather(x, ("dp", "tp"), src=S(0), dst=I)     one collective over 4 ranks
        convert(x, ("tp", "dp"), src=I, dst=S(0))        each rank keeps its chunk, no comms
        (backward: all_gather(S(0),I) on (tp, dp), then convert(I,S(0)) on (dp, tp))

    f32[4, 8] P:{dp,tp}  ->  f32[4, 8] R:{dp,tp}

        all_reduce(x, ("dp", "tp"), src=P, dst=R)        one all-reduce, not two

The moves that keep the global value, on a tuple ``T`` of axes (``T`` a suffix of a
dim's spec where the move takes axes out of the spec: only the innermost axes
sharding a dim can be operated on)::

    all_reduce(P -> R | I)        T all P
    reduce_scatter(P -> S(d))     T all P; T appended (innermost) to dim d
    all_gather(S(d) -> R | I)     T the innermost axes of dim d
    all_to_all(S(i) -> S(j))      T the innermost axes of dim i, appended to dim j
    convert(R | I -> S(d))        take this rank's chunk (no comms); T appended to dim d
    convert(S(d) -> P)            pad with zeros (no comms); T the innermost axes of dim d
    convert(R | I -> P)           rank 0 keeps the value, the others zeros (no comms)
    reinterpret(I <-> R)          no comms forward (I -> R all-reduces in backward)

The plan is a cheapest path over these moves (Dijkstra over the layouts): fewest
forward collectives, then fewest backward collectives, then fewest steps (an I
intermediate can save a backward collective: ``I -> S(d)`` on two axes is cheaper as
one flattened ``reinterpret(I,R)``, whose backward is one all-reduce, than as two
``convert(I,S)``, whose backwards are two all-gathers).  An axis becomes P only
where ``dst`` is P: padding with zeros (``convert(S(d), P)``) to reduce-scatter later
would count one collective where two all-to-alls count two, but it reduces the whole
tensor instead of moving shards.  So a
flattened collective is used whenever it saves one, and an all-to-all beats an
all-gather followed by a chunk.  ``tests/engine/test_redistribute.py`` checks the
counts against a brute-force search written independently; the runtime tests run
every plan on gloo and compare with the target layout.

Endpoints (:func:`resolve`): ``src`` and ``dst`` are global types (``SpmdType``
with a ``spec``).  A mesh axis neither names is left alone.  An axis only ``src``
names keeps its type in ``dst`` unless it leaves the spec (then it is R, what a
gather gives); an axis only ``dst`` names is taken to be R in ``src`` (a bare
``PS[...]`` says nothing about the other axes: write ``Tensor[PS[...], P["dp"]]``
when ``x`` is partial there).  A Varying axis outside the spec has no global
meaning: an error (use the per-axis ``redistribute(x, axis, ...)`` or ``local_map``).

This module is pure (no mypy, no torch); both adapters call :func:`plan`.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from .collectives import TRANSITIONS, Transition
from .errors import SpmdError
from .types import (
    INVARIANT,
    PARTIAL,
    REPLICATE,
    Kind,
    LocalType,
    SpmdType,
    format_axis,
    format_spec,
    format_type,
    at_stated_rank,
    shard,
    shard_dims_match,
    stated_rank,
)

Spec = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class PlanStep:
    """One op of a plan: ``all_gather(x, ("dp", "tp"), src=S(0), dst=R)``.

    ``axes`` has one name, or several for one collective over the flattened axes;
    ``src``/``dst`` are the per-axis local types (S(i) carries the dim), the same on
    every axis of ``axes``; ``before``/``after`` the global types around the step.
    """

    op: str
    axes: tuple[str, ...]
    src: LocalType
    dst: LocalType
    before: SpmdType
    after: SpmdType

    @property
    def axis(self) -> str | tuple[str, ...]:
        """The ``axis`` argument of the public op: a name, or a tuple of names."""
        return self.axes[0] if len(self.axes) == 1 else self.axes

    @property
    def transition(self) -> Transition:
        from .collectives import form

        return TRANSITIONS[(self.op, form(self.src), form(self.dst))]

    @property
    def communicates(self) -> bool:
        """Whether the forward issues a collective."""
        return self.transition.forward.communicates

    @property
    def backward_collectives(self) -> int:
        return sum(1 for s in self.transition.backward if s.communicates)

    def render(self, x_text: str = "x") -> str:
        return f"{self.op}({x_text}, {format_axis(self.axis)}, src={self.src}, dst={self.dst})"

    def __str__(self) -> str:
        return self.render()


@dataclass
class Plan:
    """The steps from ``src`` to ``dst`` (both resolved), or the errors saying why none exists."""

    src: SpmdType
    dst: SpmdType
    steps: tuple[PlanStep, ...] = ()
    errors: list[SpmdError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def collectives(self) -> int:
        """Forward collectives issued (a flattened one counts once)."""
        return sum(1 for s in self.steps if s.communicates)

    @property
    def backward_collectives(self) -> int:
        return sum(s.backward_collectives for s in self.steps)

    def render(self, x_text: str = "x", axis_order: Sequence[str] | None = None) -> list[str]:
        """One line per step, with the layout after it; ``(no steps)`` for the identity."""
        if self.errors:
            return [str(e) for e in self.errors]
        if not self.steps:
            return ["(no steps: the layouts are the same)"]
        return [f"{s.render(x_text)}  # -> {format_type(s.after, axis_order)}" for s in self.steps]


# --------------------------------------------------------------------------------------
# Endpoints


def _spec_axes(spec: Spec | None) -> set[str]:
    return {a for entry in spec or () for a in entry}


def resolve(x_src: SpmdType, x_dst: SpmdType) -> tuple[SpmdType, SpmdType, list[SpmdError]]:
    """Fill in the axes one side leaves out (see the module docstring); validate both sides."""
    errors: list[SpmdError] = []
    for what, t in (("src", x_src), ("dst", x_dst)):
        if t.spec is None:
            errors.append(SpmdError(
                "spmd-global",
                f"redistribute's {what}={format_type(t)} has no partition spec; give one "
                f"(PS[...] with one entry per tensor dim), or call redistribute(x, axis, src=..., "
                f"dst=...) for one mesh axis"))
    if errors:
        return x_src, x_dst, errors
    assert x_src.spec is not None and x_dst.spec is not None
    if len(x_src.spec) != len(x_dst.spec):
        errors.append(SpmdError(
            "spmd-global",
            f"redistribute keeps the rank: src={format_type(x_src)} has {len(x_src.spec)} dims, "
            f"dst={format_type(x_dst)} has {len(x_dst.spec)}; reshape before or after"))
        return x_src, x_dst, errors
    for what, t in (("src", x_src), ("dst", x_dst)):
        assert t.spec is not None
        seen: set[str] = set()
        for entry in t.spec:
            for a in entry:
                if a in seen:
                    errors.append(SpmdError(
                        "spmd-global",
                        f'redistribute\'s {what}={format_type(t)} names mesh axis "{a}" twice in '
                        f"its partition spec; an axis shards at most one dim once"))
                seen.add(a)
        for a, lt in t.axes:
            if lt.kind is Kind.V and a not in seen:
                errors.append(SpmdError(
                    "spmd-global",
                    f'redistribute\'s {what}={format_type(t)} is Varying on "{a}" outside its '
                    f"partition spec, which has no global meaning; put \"{a}\" in the PS, or use "
                    f'redistribute(x, "{a}", src=..., dst=...) (local SPMD on that axis)'))
    if errors:
        return x_src, x_dst, errors
    src_in, dst_in = _spec_axes(x_src.spec), _spec_axes(x_dst.spec)
    src_d, dst_d = x_src.as_dict(), x_dst.as_dict()
    for a in set(src_d) - set(dst_d):
        dst_d[a] = REPLICATE if a in src_in else src_d[a]
    for a in set(dst_d) - set(src_d):
        src_d[a] = REPLICATE
    # spec axes carry S(dim) in the per-axis view
    for d, entry in enumerate(x_src.spec):
        for a in entry:
            src_d[a] = shard(d)
    for d, entry in enumerate(x_dst.spec):
        for a in entry:
            dst_d[a] = shard(d)
    del src_in, dst_in
    return SpmdType.of(src_d, x_src.spec), SpmdType.of(dst_d, x_dst.spec), errors


# --------------------------------------------------------------------------------------
# The search

# A layout: (per non-spec axis its kind "R"/"I"/"P", sorted by axis), spec.
_Layout = tuple[tuple[tuple[str, str], ...], Spec]


def _layout(t: SpmdType) -> _Layout:
    in_spec = _spec_axes(t.spec)
    kinds = tuple((a, lt.kind.value) for a, lt in t.axes if a not in in_spec)
    assert t.spec is not None
    return kinds, t.spec


def _to_type(layout: _Layout) -> SpmdType:
    kinds, spec = layout
    d: dict[str, LocalType] = {a: LocalType(Kind(k)) for a, k in kinds}
    for dim, entry in enumerate(spec):
        for a in entry:
            d[a] = shard(dim)
    return SpmdType.of(d, spec)


_KIND_LT = {"R": REPLICATE, "I": INVARIANT, "P": PARTIAL}


def _tuples(axes: Sequence[str], ordered: bool) -> Iterator[tuple[str, ...]]:
    for k in range(1, len(axes) + 1):
        if ordered:
            yield from itertools.permutations(axes, k)
        else:
            yield from itertools.combinations(axes, k)


def _moves(layout: _Layout, movable: tuple[str, ...], goal: tuple[tuple[str, str], ...],
           ) -> Iterator[tuple[str, tuple[str, ...], LocalType, LocalType, _Layout]]:
    """Every value-keeping step from ``layout`` on the axes ``movable`` (in mesh order).

    ``goal`` is each axis' kind in the destination ("R", "I", "P", or "S" in the spec).
    An axis leaving the spec or a pending sum becomes R or I (both are tried: which one
    decides the backward's collectives), and R and I reinterpret into each other freely;
    an axis becomes P only where the goal is P: padding with zeros to reduce later moves
    the whole tensor, however few collectives it counts.
    """
    kinds_t, spec = layout
    kinds = dict(kinds_t)
    rank = len(spec)
    want = dict(goal)

    def with_kinds(new: dict[str, str], new_spec: Spec) -> _Layout:
        return tuple(sorted(new.items())), new_spec

    def settle(t: tuple[str, ...]) -> tuple[str, ...]:
        """The kinds the axes of ``t`` may leave as (together, in one collective)."""
        return ("R", "I")

    by_kind: dict[str, list[str]] = {"R": [], "I": [], "P": []}
    for a in movable:
        if a in kinds:
            by_kind[kinds[a]].append(a)
    # all_reduce(P -> R|I); reinterpret(R <-> I); convert(R|I -> P) toward the goal
    for t in _tuples(by_kind["P"], ordered=False):
        for k in settle(t):
            new = dict(kinds)
            new.update((a, k) for a in t)
            yield "all_reduce", t, PARTIAL, _KIND_LT[k], with_kinds(new, spec)
    for src_k, other in (("R", "I"), ("I", "R")):
        for t in _tuples(by_kind[src_k], ordered=False):
            new = dict(kinds)
            new.update((a, other) for a in t)
            yield "reinterpret", t, _KIND_LT[src_k], _KIND_LT[other], with_kinds(new, spec)
            if all(want.get(a) == "P" for a in t):
                new = dict(kinds)
                new.update((a, "P") for a in t)
                yield "convert", t, _KIND_LT[src_k], PARTIAL, with_kinds(new, spec)
    # into the spec: reduce_scatter(P -> S(d)), convert(R|I -> S(d)); order matters
    for src_k, op in (("P", "reduce_scatter"), ("R", "convert"), ("I", "convert")):
        for t in _tuples(by_kind[src_k], ordered=True):
            for d in range(rank):
                new = {a: k for a, k in kinds.items() if a not in t}
                new_spec = spec[:d] + (spec[d] + t,) + spec[d + 1:]
                yield op, t, _KIND_LT[src_k], shard(d), with_kinds(new, new_spec)
    # out of the spec: the innermost axes of a dim (suffixes), if all movable
    for d, entry in enumerate(spec):
        for n in range(1, len(entry) + 1):
            t = entry[len(entry) - n:]
            if not all(a in movable for a in t):
                break
            rest = spec[:d] + (entry[: len(entry) - n],) + spec[d + 1:]
            for k in settle(t):
                new = dict(kinds)
                new.update((a, k) for a in t)
                yield "all_gather", t, shard(d), _KIND_LT[k], with_kinds(new, rest)
            if all(want.get(a) == "P" for a in t):
                new = dict(kinds)
                new.update((a, "P") for a in t)
                yield "convert", t, shard(d), PARTIAL, with_kinds(new, rest)
            for j in range(rank):
                if j == d:
                    continue
                new_spec = rest[:j] + (rest[j] + t,) + rest[j + 1:]
                yield "all_to_all", t, shard(d), shard(j), with_kinds(kinds, new_spec)


def _cost(op: str, src: LocalType, dst: LocalType) -> tuple[int, int, int]:
    from .collectives import form

    t = TRANSITIONS[(op, form(src), form(dst))]
    return (1 if t.forward.communicates else 0,
            sum(1 for s in t.backward if s.communicates), 1)


@functools.lru_cache(maxsize=4096)
def _search(start: _Layout, goal: _Layout, movable: tuple[str, ...]) -> tuple | None:
    """Dijkstra from ``start`` to ``goal``: the steps as (op, axes, src, dst, layout) tuples."""
    if start == goal:
        return ()
    goal_kinds = goal[0] + tuple((a, "S") for entry in goal[1] for a in entry)
    counter = itertools.count()
    best: dict[_Layout, tuple[int, int, int]] = {start: (0, 0, 0)}
    heap: list = [((0, 0, 0), next(counter), start, ())]
    while heap:
        cost, _, layout, path = heapq.heappop(heap)
        if layout == goal:
            return path
        if best.get(layout, cost) < cost:
            continue
        for op, axes, src, dst, nxt in _moves(layout, movable, goal_kinds):
            c = _cost(op, src, dst)
            ncost = (cost[0] + c[0], cost[1] + c[1], cost[2] + c[2])
            old = best.get(nxt)
            if old is not None and old <= ncost:
                continue
            best[nxt] = ncost
            heapq.heappush(heap, (ncost, next(counter), nxt, path + ((op, axes, src, dst, nxt),)))
    return None  # pragma: no cover - every layout is reachable


def plan(src: SpmdType, dst: SpmdType, mesh_axes: Sequence[str] | None = None,
         setting: str | None = None, flattened: Sequence[str] = ()) -> Plan:
    """The plan from ``src`` to ``dst`` (global types; see :func:`resolve` for missing axes).

    ``mesh_axes`` (the mesh's axis order) orders the axes of a flattened all-reduce and
    the search's tie-breaks; without it, axis names sort alphabetically.  ``setting`` and
    ``flattened``: where the axes come from and the flattened names, as an unknown axis's
    message names them (:func:`~spmd_mypy.engine.annotations.unknown_axis_error`).
    """
    rsrc, rdst, errors = resolve(src, dst)
    if errors:
        return Plan(src, dst, (), errors)
    order = {a: i for i, a in enumerate(mesh_axes or ())}
    names = sorted(set(a for a, _ in rsrc.axes) | set(a for a, _ in rdst.axes),
                   key=lambda a: (order.get(a, len(order)), a))
    if mesh_axes is not None:
        unknown = [a for a in names if a not in order]
        if unknown:
            from .annotations import MESH_AXES_SETTING, unknown_axis_error

            return Plan(rsrc, rdst, (), [unknown_axis_error(
                unknown[0], list(mesh_axes), "spmd-global", setting or MESH_AXES_SETTING,
                flattened)])
    # Axes of the same R/I/P type on both sides never need to move.
    movable = tuple(a for a in names
                    if not (rsrc.get(a) == rdst.get(a) and rsrc.get(a) is not None
                            and rsrc.get(a).kind is not Kind.V))  # type: ignore[union-attr]
    # they stay out of the search state too
    fixed = {a for a in names if a not in movable}
    start = _layout(_drop(rsrc, fixed))
    goal = _layout(_drop(rdst, fixed))
    path = _search(start, goal, movable)
    assert path is not None
    steps = []
    before = rsrc
    kept = {a: rsrc.get(a) for a in fixed}
    for op, axes, s, d, layout in path:
        t = _to_type(layout)
        after = SpmdType.of({**t.as_dict(), **kept}, t.spec)  # type: ignore[dict-item]
        steps.append(PlanStep(op, axes, s, d, before, after))
        before = after
    return Plan(rsrc, rdst, tuple(steps), [])


def _drop(t: SpmdType, axes: Iterable[str]) -> SpmdType:
    d = t.as_dict()
    for a in axes:
        d.pop(a, None)
    return SpmdType.of(d, t.spec)


def check_source(x: SpmdType, src: SpmdType, *, x_text: str = "x",
                 dst: SpmdType | None = None) -> list[SpmdError]:
    """``src`` must describe ``x`` (its static or tracked type): the same partition spec if
    ``x`` has one, and the same local type on every axis both name (V may be claimed S(i)).

    A local-typed ``x`` (no spec) is read at the rank ``src``'s spec states, as the check
    mode reads it at its tensor's rank: ``S(-1)`` is the last dim::

        x: Tensor[S[-1, "tp"]]     src=PS[None, "tp"]        yes (rank 2: S(-1) is S(1))
                                   src=PS["tp", None]        no  (S(1), not S(0))
                                   src=PS[None, None, "tp"]  yes (rank 3: S(-1) is S(2))

    With ``dst``, ``src`` is first resolved against it (:func:`resolve`) as the runtime
    resolves it -- the runtime sees only what the call writes -- so an axis ``src`` leaves
    unsaid but ``dst`` names is R: if ``x`` is P there, the call must say so.  Both
    adapters call this before :func:`plan`; the message gives the ``src`` to pass, a
    global type (the call is global): ``x``'s own, or its shard dims put in a spec of
    ``src``'s rank.
    """
    call = f"redistribute({x_text}, src={_format_endpoint(src)}, ...)"
    written = {a for a, _ in src.axes}
    if dst is not None:
        rsrc, _, errs = resolve(src, dst)
        if not errs:
            src = rsrc
    if x.spec is not None and src.spec is not None and x.spec != src.spec:
        return [SpmdError(
            "spmd-src-mismatch",
            f"{call} but {x_text} is {format_type(x)}: the partition specs differ; pass "
            f"src={_format_endpoint(x)}")]
    rank = stated_rank(src, x)
    for a, want in src.axes:
        have = x.get(a)
        if have is None or shard_dims_match(have, want, rank):
            continue
        implied = ("" if a in written else
                   f' (src does not name "{a}", which dst does: it is taken as {want}, as the '
                   f"runtime sees only what the call says)")
        fix = _source_of(x, src)
        if fix is not None:
            advice = f"pass src={_format_endpoint(fix)}"
        else:  # a dim of x beyond the rank src states
            advice = (f"give src {x_text}'s rank and its shard dims (PS[...] with one entry "
                      f"per dim of {x_text}, each mesh axis at the dim it shards)")
        return [SpmdError(
            "spmd-src-mismatch",
            f'{call} but {x_text} is {have.describe()} on "{a}"{at_stated_rank(have, rank, "src")}, not '
            f"{want}{implied} ({x_text}: {format_type(x.as_printed())}); {advice}")]
    return []


def _source_of(x: SpmdType, src: SpmdType) -> SpmdType | None:
    """The global type that describes ``x`` for a redistribute whose ``src`` was found not
    to: ``x`` itself if it has a spec; else ``x``'s shard dims read at the rank ``src``
    states and put in a spec of that rank (axes sharing a dim in ``src``'s order, the
    outermost first; a V of unknown dim where ``src`` places it, else left out, as the
    call then takes ``x``'s type there), its I and P axes as they are (R left out: a bare
    spec leaves it R, or ``x``'s type where ``dst`` does not name it).  None where no spec
    of that rank holds ``x`` (a dim beyond it)."""
    if x.spec is not None or src.spec is None:
        return x
    rank = len(src.spec)
    placed_by_src = {a: d for d, entry in enumerate(src.spec) for a in entry}
    entries: list[list[str]] = [[] for _ in range(rank)]
    rest: dict[str, LocalType] = {}
    for a, lt in x.axes:
        if lt.kind is Kind.R:
            continue  # a bare spec leaves it R, or x's type where dst does not name it
        if lt.kind is not Kind.V:
            rest[a] = lt
            continue
        possible, d = lt.at_rank(rank)
        if not possible:
            return None
        if d is None:
            d = placed_by_src.get(a)
            if d is None:
                continue  # x's V stays; outside a spec it has no global meaning (plan says so)
        entries[d % rank].append(a)
    order = {a: i for i, a in enumerate(a for e in src.spec for a in e)}
    for entry in entries:
        entry.sort(key=lambda a: (order.get(a, len(order)), a))
    spec = tuple(tuple(e) for e in entries)
    return SpmdType.of({**rest, **{a: shard(d) for d, e in enumerate(spec) for a in e}}, spec)


def _format_endpoint(t: SpmdType) -> str:
    """A redistribute endpoint as a call writes it: a bare ``PS[...]`` where the type is its
    spec alone, else ``Tensor[PS[...], P["dp"]]`` (``Tensor[...]`` for a local type)."""
    if t.spec is not None and all(lt.kind is Kind.V for _, lt in t.axes) \
            and {a for a, _ in t.axes} == {a for e in t.spec for a in e}:
        return format_spec(t.spec)
    return format_type(t)


__all__ = ["PlanStep", "Plan", "plan", "resolve", "check_source"]
