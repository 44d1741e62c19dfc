"""The redistribute planner (engine/redistribute.py) against an independent brute force.

The brute force knows nothing of the planner's rules (which axes of a spec can move,
how a flattened group orders its ranks, where an axis lands in a spec): it simulates
the table's ops numerically on a small mesh (numpy, one local array per rank), and a
step is admitted when some partition spec describes its result, checked on the
numbers against the global tensor.  A shortest-path search over those steps gives
the fewest forward collectives, then the fewest backward collectives (the table's
backward of each step), from every layout to every other; the planner must match
both on every pair, and every plan the planner makes must replay correctly
in the simulator (each step admitted, the end layout the destination's).

The one rule both share is the planner's documented restriction: an axis becomes
P only where the destination is P (padding with zeros to reduce later is never a
saving in bytes).

Mesh ("dp", "tp") of sizes 2 and 3 (unequal, so a wrong rank order shows), a global
tensor of shape (6, 6).  ``SPMD_PLANNER_3AXES=1`` runs the same on ("pp", "dp", "tp")
of sizes 2, 3, 2 and a tensor of shape (12,) (every order of three axes on one dim;
about 25 s on this machine, so not in the default run).
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import math
import os
from typing import Iterator

import numpy as np
import pytest

from spmd_mypy.engine.collectives import TRANSITIONS
from spmd_mypy.engine.redistribute import plan, resolve
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, Kind, LocalType, SpmdType, shard

if os.environ.get("SPMD_PLANNER_3AXES") == "1":  # the long variant (not in the default run)
    NAMES: tuple[str, ...] = ("pp", "dp", "tp")
    SIZES = {"pp": 2, "dp": 3, "tp": 2}
    SHAPE: tuple[int, ...] = (12,)
else:
    NAMES = ("dp", "tp")
    SIZES = {"dp": 2, "tp": 3}
    SHAPE = (6, 6)
RANKS = list(itertools.product(*(range(SIZES[a]) for a in NAMES)))  # mesh coordinates

X = np.random.default_rng(0).standard_normal(SHAPE)

# A layout: per axis "R" / "I" / "P" or "S" (then in the spec), and the spec.
Layout = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, ...], ...]]


def coord(r: tuple[int, ...], a: str) -> int:
    return r[NAMES.index(a)]


def index(r: tuple[int, ...], axes: tuple[str, ...]) -> int:
    k = 0
    for a in axes:
        k = k * SIZES[a] + coord(r, a)
    return k


@functools.lru_cache(maxsize=None)
def group(r: tuple[int, ...], axes: tuple[str, ...]) -> list[tuple[int, ...]]:
    """The ranks of r's group over ``axes``, ordered row-major over ``axes`` as written."""
    members = [q for q in RANKS if all(coord(q, a) == coord(r, a) for a in NAMES if a not in axes)]
    return sorted(members, key=lambda q: index(q, axes))


def chunk(x: np.ndarray, spec: tuple[tuple[str, ...], ...], r: tuple[int, ...]) -> np.ndarray:
    for d, entry in enumerate(spec):
        if entry:
            n = math.prod(SIZES[a] for a in entry)
            x = np.split(x, n, axis=d)[index(r, entry)]
    return x


def describes(locals_: dict, layout: Layout) -> bool:
    """Whether the locals are X laid out as ``layout`` (summed over its P axes)."""
    kinds, spec = dict(layout[0]), layout[1]
    ps = tuple(a for a in NAMES if kinds.get(a) == "P")
    for r in RANKS:
        want = chunk(X, spec, r)
        total = sum(locals_[q] for q in group(r, ps)) if ps else locals_[r]
        if total.shape != want.shape or not np.allclose(total, want):
            return False
    return True


def materialize(layout: Layout) -> dict:
    kinds, spec = dict(layout[0]), layout[1]
    ps = tuple(a for a in NAMES if kinds.get(a) == "P")
    n = math.prod(SIZES[a] for a in ps)
    return {r: chunk(X, spec, r) * ((index(r, ps) + 1) / (n * (n + 1) / 2)) for r in RANKS}


# The table's ops that keep the rank (no V forms, no expert reinterprets), simulated.
def apply(op: str, src: str, dst: str, axes: tuple[str, ...], sd: int | None, dd: int | None,
          locals_: dict) -> dict | None:
    out = {}
    for r in RANKS:
        g = group(r, axes)
        k = g.index(r)
        n = len(g)
        x = locals_[r]
        try:
            if op == "all_reduce":
                y = sum(locals_[q] for q in g)
            elif op == "all_gather":
                y = np.concatenate([locals_[q] for q in g], axis=sd)
            elif op == "reduce_scatter":
                y = np.split(sum(locals_[q] for q in g), n, axis=dd)[k]
            elif op == "all_to_all":
                y = np.concatenate([np.split(locals_[q], n, axis=dd)[k] for q in g], axis=sd)
            elif op in ("reinterpret",) or (op == "convert" and src in "RI" and dst in "RI"):
                y = x
            elif op == "convert" and dst == "S":
                y = np.split(x, n, axis=dd)[k]
            elif op == "convert" and dst == "P" and src in "RI":
                y = x if k == 0 else np.zeros_like(x)
            elif op == "convert" and src == "S" and dst == "P":
                parts = [np.zeros_like(x)] * n
                parts[k] = x
                y = np.concatenate(parts, axis=sd)
            else:
                raise AssertionError((op, src, dst))
        except ValueError:  # not divisible
            return None
        out[r] = y
    return out


OPS = [(op, s, d) for (op, s, d), t in TRANSITIONS.items()
       if "V" not in (s, d) and not t.expert and not (op == "convert" and s == d)]
COSTS = {key: int(TRANSITIONS[key].forward.communicates) for key in OPS}


def candidate_results(layout: Layout, axes: tuple[str, ...], s: str, d: str, sd: int | None,
                      dd: int | None) -> Iterator[Layout]:
    """Every layout the step could claim: the axes' new kind, and any place in the spec."""
    kinds, spec = dict(layout[0]), layout[1]
    if s == "S":
        spec = tuple(tuple(a for a in e if a not in axes) for e in spec)
    new = dict(kinds)
    for a in axes:
        new[a] = d
    if d != "S":
        yield tuple(sorted(new.items())), spec
        return
    base = spec[dd]  # type: ignore[index]
    for perm in itertools.permutations(axes):
        for pos in range(len(base) + 1):
            entry = base[:pos] + perm + base[pos:]
            yield tuple(sorted(new.items())), spec[:dd] + (entry,) + spec[dd + 1:]  # type: ignore[index,operator]


def steps_from(layout: Layout, locals_: dict, may_partial: frozenset[str]
               ) -> Iterator[tuple[int, Layout, dict, tuple]]:
    kinds, spec = dict(layout[0]), layout[1]
    where = {a: d for d, e in enumerate(spec) for a in e}
    for op, s, d in OPS:
        for k in range(1, len(NAMES) + 1):
            for axes in itertools.permutations(NAMES, k):
                if any(kinds[a] != s for a in axes):
                    continue
                if d == "P" and not may_partial.issuperset(axes):
                    continue
                sds = [where[axes[0]]] if s == "S" else [None]
                if s == "S" and any(where[a] != sds[0] for a in axes):
                    continue
                for sd in sds:
                    for dd in (range(len(SHAPE)) if d == "S" else [None]):
                        if op == "all_to_all" and sd == dd:
                            continue
                        res = apply(op, s, d, axes, sd, dd, locals_)
                        if res is None:
                            continue
                        for cand in candidate_results(layout, axes, s, d, sd, dd):
                            if describes(res, cand):
                                yield COSTS[(op, s, d)], cand, res, (op, axes, s, d, sd, dd)


def all_layouts() -> list[Layout]:
    out = []
    rank = len(SHAPE)
    for choice in itertools.product(("R", "I", "P", *range(rank)), repeat=len(NAMES)):
        kinds = tuple(sorted((a, c if isinstance(c, str) else "S") for a, c in zip(NAMES, choice)))
        dims: dict[int, list[str]] = collections.defaultdict(list)
        for a, c in zip(NAMES, choice):
            if not isinstance(c, str):
                dims[c].append(a)
        for orders in itertools.product(*(itertools.permutations(dims[d]) for d in range(rank))):
            out.append((kinds, tuple(orders)))
    return out


LAYOUTS = all_layouts()


@functools.lru_cache(maxsize=None)
def edges(layout: Layout) -> tuple[tuple[tuple[int, int], Layout, frozenset[str]], ...]:
    """The admitted steps from ``layout`` (simulated on its materialized locals; the ops are
    linear, so a step that keeps the value for one random pending-sum split keeps it for
    any): ((forward, backward collectives), the next layout, the axes the step makes P)."""
    every = frozenset(NAMES)
    out = set()
    for cost, nxt, _, (op, axes, s, d, sd, dd) in steps_from(layout, materialize(layout), every):
        bwd = sum(1 for st in TRANSITIONS[(op, s, d)].backward if st.communicates)
        out.add(((cost, bwd), nxt, frozenset(axes) if d == "P" else frozenset()))
    return tuple(sorted(out, key=repr))


def brute_force(start: Layout, may_partial: frozenset[str]) -> dict[Layout, tuple[int, int]]:
    """The fewest (forward, then backward) collectives from ``start`` to every layout."""
    best = {start: (0, 0)}
    heap = [((0, 0), 0, start)]
    tie = itertools.count(1)
    while heap:
        cost, _, lay = heapq.heappop(heap)
        if best[lay] < cost:
            continue
        for (f, b), nxt, made_partial in edges(lay):
            if not may_partial.issuperset(made_partial):
                continue
            c = (cost[0] + f, cost[1] + b)
            if nxt not in best or c < best[nxt]:
                best[nxt] = c
                heapq.heappush(heap, (c, next(tie), nxt))
    return best


def to_type(layout: Layout) -> SpmdType:
    kinds, spec = dict(layout[0]), layout[1]
    d: dict[str, LocalType] = {}
    for a, k in kinds.items():
        if k != "S":
            d[a] = {"R": REPLICATE, "I": INVARIANT, "P": PARTIAL}[k]
    for dim, e in enumerate(spec):
        for a in e:
            d[a] = shard(dim)
    return SpmdType.of(d, spec)


@pytest.fixture(scope="module")
def minima() -> dict[tuple[Layout, frozenset[str]], dict[Layout, tuple[int, int]]]:
    subsets = [frozenset(c) for k in range(len(NAMES) + 1) for c in itertools.combinations(NAMES, k)]
    return {(s, m): brute_force(s, m) for s in LAYOUTS for m in subsets}


def test_layout_space() -> None:
    if len(NAMES) == 2:  # R/I/P/dim0/dim1 per axis, both axes on one dim in two orders
        assert len(LAYOUTS) == 5 * 5 + 2
    else:  # k axes in the spec of the one dim, in k! orders, the others R/I/P
        assert len(LAYOUTS) == sum(math.comb(3, k) * math.factorial(k) * 3 ** (3 - k)
                                   for k in range(4))


def test_every_pair_has_the_fewest_collectives(minima) -> None:
    """The planner's forward collectives, then backward collectives, equal the brute force's
    minimum on every pair
    (729 on the default 2x3 mesh; 6084 with SPMD_PLANNER_3AXES=1, a 2x3x2 mesh, rank 1)."""
    bad = []
    pairs = 0
    for src in LAYOUTS:
        for dst in LAYOUTS:
            p = plan(to_type(src), to_type(dst), NAMES)
            assert p.ok, p.errors
            may_partial = frozenset(a for a, k in dst[0] if k == "P")
            want = minima[(src, may_partial)].get(dst)
            assert want is not None, (src, dst)
            pairs += 1
            if (p.collectives, p.backward_collectives) != want:
                bad.append((to_type(src), to_type(dst), p.collectives, p.backward_collectives,
                            want, p.render()))
    assert pairs == len(LAYOUTS) ** 2
    assert not bad, "\n".join(map(str, bad[:10]))


def test_every_plan_replays_in_the_simulator() -> None:
    """Each step of each plan is a value-keeping op on the numbers; the end is dst."""
    for src in LAYOUTS:
        for dst in LAYOUTS:
            p = plan(to_type(src), to_type(dst), NAMES)
            locs = materialize(src)
            for step in p.steps:
                s = "S" if step.src.dim is not None else step.src.kind.value
                d = "S" if step.dst.dim is not None else step.dst.kind.value
                locs = apply(step.op, s, d, step.axes, step.src.dim, step.dst.dim, locs)
                assert locs is not None
                after = step.after
                lay = (tuple(sorted((a, "S" if lt.dim is not None else lt.kind.value)
                                    for a, lt in after.axes)), after.spec)
                assert describes(locs, lay), (str(step), to_type(src), to_type(dst))
            assert p.steps == () or p.steps[-1].after == p.dst


def test_flattened_collectives() -> None:
    def T(spec, **kinds):
        d = {a: {"R": REPLICATE, "I": INVARIANT, "P": PARTIAL}[k] for a, k in kinds.items()}
        return SpmdType.of(d, spec)

    # all-reduce over dp and tp at once
    p = plan(T(((), ()), dp="P", tp="P"), T(((), ()), dp="R", tp="R"), NAMES)
    assert [str(s) for s in p.steps] == ['all_reduce(x, ("dp", "tp"), src=P, dst=R)']
    # f32[8@(dp,tp)] -> f32[8@(tp,dp)]: one all-gather over the flattened axes, then a chunk
    p = plan(T((("dp", "tp"),)), T((("tp", "dp"),)), NAMES)
    # (through I: the backward of convert(I,S) is an all-gather of the shards, where that of
    # convert(R,S) would pad with zeros and reduce-scatter the whole tensor; one each)
    assert [str(s) for s in p.steps] == ['all_gather(x, ("dp", "tp"), src=S(0), dst=I)',
                                         'convert(x, ("tp", "dp"), src=I, dst=S(0))']
    assert (p.collectives, p.backward_collectives) == (1, 1)
    # all-gather of a dim sharded (dp, tp) at once
    p = plan(T((("dp", "tp"), ())), T(((), ()), dp="R", tp="R"), NAMES)
    assert [str(s) for s in p.steps] == ['all_gather(x, ("dp", "tp"), src=S(0), dst=R)']
    # reduce-scatter onto (dp, tp) at once
    p = plan(T(((), ()), dp="P", tp="P"), T(((), ("dp", "tp"))), NAMES)
    assert [str(s) for s in p.steps] == ['reduce_scatter(x, ("dp", "tp"), src=P, dst=S(1))']


def test_errors() -> None:
    two = SpmdType.of({}, ((), ()))
    for src, dst, needle in (
        (SpmdType.of({}), two, "has no partition spec"),
        (SpmdType.of({}, ((),)), two, "keeps the rank"),
        (SpmdType.of({"tp": LocalType(Kind.V)}, ((), ())), two, "outside its partition spec"),
        (SpmdType.of({"dp": shard(0)}, (("dp",), ("dp",))), two, "twice"),
    ):
        p = plan(src, dst, NAMES)
        assert not p.ok and needle in p.errors[0].message, p.errors
    p = plan(SpmdType.of({"xx": shard(0)}, (("xx",), ())), two, NAMES)
    assert "unknown mesh axis" in p.errors[0].message
    # the message names where the axes come from as the caller says (a mypy.ini project's
    # section, the run time's mesh), not always pyproject.toml's
    p = plan(SpmdType.of({"xx": shard(0)}, (("xx",), ())), two, NAMES,
             "[spmd_mypy] mesh_axes in mypy.ini", ("dq",))
    assert p.errors[0].message.endswith(
        '(and the flattened "dq") ([spmd_mypy] mesh_axes in mypy.ini)'), p.errors[0].message


def test_resolve_fills_the_unnamed_axes() -> None:
    # an axis only src names keeps its type, or is R once out of the spec; only dst: R in src
    src = SpmdType.of({"dp": PARTIAL, "tp": shard(1)}, ((), ("tp",)))
    dst = SpmdType.of({"pp": shard(0)}, (("pp",), ()))
    rs, rd, errors = resolve(src, dst)
    assert not errors
    assert rd.get("dp") == PARTIAL and rd.get("tp") == REPLICATE
    assert rs.get("pp") == REPLICATE


def test_check_source() -> None:
    from spmd_mypy.engine.redistribute import check_source

    x = SpmdType.of({"dp": PARTIAL}, ((), ()))
    bare = SpmdType.of({}, ((), ()))
    dst = SpmdType.of({"dp": shard(0)}, (("dp",), ()))
    # a bare src says nothing about "dp"; alone it fits x
    assert check_source(x, bare) == []
    # ... but against a dst that names "dp" it is taken as R, as the runtime takes it
    errs = check_source(x, bare, dst=dst)
    assert errs and errs[0].code == "spmd-src-mismatch"
    assert 'src does not name "dp"' in errs[0].message
    assert 'pass src=Tensor[PS[None, None], P["dp"]]' in errs[0].message
    assert check_source(x, SpmdType.of({"dp": PARTIAL}, ((), ())), dst=dst) == []
    # the spec must be x's
    errs = check_source(SpmdType.of({"tp": shard(1)}, ((), ("tp",))),
                        SpmdType.of({"tp": shard(0)}, (("tp",), ())))
    assert errs and "partition specs differ" in errs[0].message


def test_check_source_reads_a_local_type_at_the_rank_src_states() -> None:
    """A local-typed x (no spec) is read at the rank of src's spec: S(-1) is S(1) at rank
    2; a rank-dependent layout is read at that rank; the fix is a global src."""
    from spmd_mypy.engine.redistribute import check_source
    from spmd_mypy.engine.types import LocalType, Kind

    def spec_type(*spec: tuple[str, ...]) -> SpmdType:
        return SpmdType.of({a: shard(d) for d, e in enumerate(spec) for a in e}, tuple(spec))

    last = SpmdType.of({"tp": shard(-1), "dp": REPLICATE})
    assert check_source(last, spec_type((), ("tp",))) == []
    assert check_source(last, spec_type((), (), ("tp",))) == []
    errs = check_source(last, spec_type(("tp",), ()))
    assert errs and errs[0].code == "spmd-src-mismatch"
    assert errs[0].message.endswith('pass src=PS[None, "tp"]'), errs[0].message
    # S(0) at rank >= 2, V at rank 1 (a softmax over the last dim of an S(0) value)
    ranked = SpmdType.of({"tp": LocalType(Kind.V, by_rank=((1, None), (2, 0)))})
    assert check_source(ranked, spec_type(("tp",), ())) == []
    assert check_source(ranked, spec_type(("tp",))) == []
    errs = check_source(ranked, spec_type((), ("tp",)))
    assert errs and '(S(0) at the rank 2 src states), not S(1)' in errs[0].message, errs
    assert errs[0].message.endswith('pass src=PS["tp", None]'), errs[0].message
    # beyond the rank: no spec of that rank holds x
    errs = check_source(SpmdType.of({"tp": shard(2)}), spec_type(("tp",), ()))
    assert errs and "(beyond the rank 2 src states)" in errs[0].message
    assert "pass src=" not in errs[0].message and "give src x's rank" in errs[0].message
    # a P axis stays in the fix; an I one too; R is left to the bare spec
    errs = check_source(SpmdType.of({"tp": shard(0), "dp": PARTIAL, "cp": INVARIANT}),
                        spec_type((), ("tp",)))
    assert errs[0].message.endswith('pass src=Tensor[PS["tp", None], I["cp"], P["dp"]]'), errs
