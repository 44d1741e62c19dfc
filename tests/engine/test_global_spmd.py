"""Shard propagation (engine/global_spmd.py) against a numeric simulation of the mesh.

For every accepted propagation the test lays random global inputs out on a 2 x 3 mesh
(dp=2, tp=3: a non-square mesh catches swapped axes) as their types say, runs the op on
each rank's locals (numpy), reassembles the locals as the result type says (summing over
its Partial axes, checking its Replicate axes agree) and compares with the op on the
global inputs.  The inputs' specs are enumerated exhaustively (every placement and order
of the two axes over the dims, with R or P on the axes left out), so every accepted
propagation is checked, not a chosen few; rejected ones must carry a fix.  Runs in a few
seconds, no torch.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Callable, Sequence

import numpy as np
import pytest

from spmd_mypy.engine import global_spmd as gs
from spmd_mypy.engine.ops import Operand, Role
from spmd_mypy.engine.redistribute import check_source
from spmd_mypy.engine.types import (PARTIAL, REPLICATE, VARYING, Kind, LocalType, SpmdType, format_type,
                                   shard)

MESH = {"dp": 2, "tp": 3}
AXES = tuple(MESH)
COORDS = [dict(zip(AXES, c)) for c in itertools.product(*(range(MESH[a]) for a in AXES))]
RNG = np.random.default_rng(0)


# -- the mesh simulation -------------------------------------------------------------------


def specs(rank: int) -> list[tuple[tuple[str, ...], ...]]:
    """Every placement of the mesh axes over ``rank`` dims (or none), in every order."""
    out = set()
    for place in itertools.product(range(-1, rank), repeat=len(AXES)):
        for order in itertools.permutations(AXES):
            spec = [[] for _ in range(rank)]
            for a in order:
                d = place[AXES.index(a)]
                if d >= 0:
                    spec[d].append(a)
            out.add(tuple(tuple(e) for e in spec))
    return sorted(out)


def types(rank: int, partial: bool = True) -> list[SpmdType]:
    """Global types of this rank: each spec, with R or P on the axes it leaves out."""
    out = []
    for spec in specs(rank):
        inside = {a: d for d, e in enumerate(spec) for a in e}
        rest = [a for a in AXES if a not in inside]
        for kinds in itertools.product((REPLICATE, PARTIAL) if partial else (REPLICATE,),
                                       repeat=len(rest)):
            m = {a: shard(d) for a, d in inside.items()}
            m.update(zip(rest, kinds))
            out.append(SpmdType.of(m, spec))
    return out


def _block(entry: Sequence[str], coord: dict[str, int], size: int) -> slice:
    n = math.prod(MESH[a] for a in entry)
    idx = 0
    for a in entry:  # outermost first: mixed radix
        idx = idx * MESH[a] + coord[a]
    b = size // n
    return slice(idx * b, (idx + 1) * b)


def lay_out(x: np.ndarray, t: SpmdType) -> list[np.ndarray]:
    """The local of each rank (in COORDS order); P axes split into random summands."""
    locs = []
    p_axes = [a for a, lt in t.axes if lt.kind is Kind.P]
    # a zero-sum noise per P axis: the locals sum to x over each P axis
    noise = {a: [RNG.standard_normal(x.shape) for _ in range(MESH[a])] for a in p_axes}
    for a in p_axes:
        mean = sum(noise[a]) / MESH[a]
        noise[a] = [n - mean for n in noise[a]]
    for c in COORDS:
        idx = tuple(_block(e, c, x.shape[d]) for d, e in enumerate(t.spec))
        local = np.array(x[idx], dtype=float)
        if p_axes:
            full = np.array(x, dtype=float)
            for a in p_axes:
                full = full / MESH[a] + noise[a][c[a]]
            local = full[idx]
        locs.append(local)
    return locs


def assemble(locs: list[np.ndarray], t: SpmdType, shape: tuple[int, ...]) -> np.ndarray:
    """The global value the locals denote under ``t`` (checks R axes agree)."""
    spec = t.spec
    assert spec is not None and len(spec) == len(shape)
    out = np.zeros(shape)
    in_spec = {a for e in spec for a in e}
    for a, lt in t.axes:
        assert a in in_spec or lt.kind in (Kind.R, Kind.P, Kind.I), (a, lt)
    for c, local in zip(COORDS, locs):
        rep = [a for a in AXES if a not in in_spec and (t.get(a) or REPLICATE).kind is not Kind.P]
        if any(c[a] for a in rep):
            base = dict(c, **{a: 0 for a in rep})
            np.testing.assert_allclose(local, locs[COORDS.index(base)], atol=1e-9)
            continue
        idx = tuple(_block(e, c, shape[d]) for d, e in enumerate(spec))
        out[idx] += local
    return out


def check(op: Callable[..., np.ndarray], xs: list[np.ndarray], ts: list[SpmdType],
          result: SpmdType, local_op: Callable[..., np.ndarray] | None = None) -> None:
    want = op(*xs)
    laid = [lay_out(x, t) for x, t in zip(xs, ts)]
    locs = [(local_op or op)(*(lay[i] for lay in laid)) for i in range(len(COORDS))]
    got = assemble(locs, result, want.shape)
    np.testing.assert_allclose(got, want, atol=1e-8)


def _ops(ts: Sequence[SpmdType]) -> list[Operand]:
    return [Operand(t, "ab"[i] if i < 2 else f"x{i}") for i, t in enumerate(ts)]


def _run(name: str, ts: list[SpmdType], params: dict, np_op, shapes, *, local_op=None,
         counts: dict) -> None:
    r = gs.propagate(name, _ops(ts), **params)
    if r.errors:
        counts["rejected"] += 1
        for e in r.errors:
            assert_no_noop_redistribute(e.message)
            # every rejection names a fix (a call to write or a communication)
            assert any(w in e.message for w in ("spmd.", "all_reduce", "all_gather", "reduce_scatter",
                                                 "redistribute", "drop", "literal", "local_map",
                                                 "reinterpret", "permutation")), e.message
        return
    counts["accepted"] += 1
    xs = [RNG.standard_normal(s) for s in shapes]
    check(np_op, xs, ts, r.type, local_op)


def assert_no_noop_redistribute(message: str) -> None:
    """A suggested fix is never a redistribute from a spec to itself, nor to a spec that is
    not one (a mesh axis on two dims: x @ w with both sharded on "dp")."""
    for src, dst in re.findall(r"src=(PS\[[^\]]*\]), dst=(PS\[[^\]]*\])", message):
        assert src != dst, message
        axes = re.findall(r'"(\w+)"', dst)
        assert len(axes) == len(set(axes)), message


# -- the ops ---------------------------------------------------------------------------------


EINSUMS = [
    ("ij,jk->ik", (6, 12), (12, 6)),
    ("bi,i->bi", (6, 12), (12,)),
    ("bij,bjk->bik", (6, 6, 12), (6, 12, 6)),
    ("ij,ij->i", (6, 12), (6, 12)),
    ("i,j->ij", (12,), (6,)),
]


@pytest.mark.parametrize("eq,sa,sb", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_accepted_propagations_compute_the_global_result(eq: str, sa, sb) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(len(sa)), types(len(sb))):
        axes_sets = [None, "tp", "dp", ("dp", "tp")]
        for opa in axes_sets:
            _run("einsum", [ta, tb], {"equation": eq, "out_partial_axes": opa},
                 lambda a, b: np.einsum(eq, a, b), [sa, sb], counts=counts)
    assert counts["accepted"] > 20 and counts["rejected"] > 20, counts


def test_einsum_rule_examples() -> None:
    t = lambda spec, **kinds: SpmdType.of(  # noqa: E731
        {**{a: shard(d) for d, e in enumerate(spec) for a in e},
         **{a: LocalType(Kind(k)) for a, k in kinds.items()}}, spec)
    x = t((("dp",), ()), tp="R")
    w1 = t(((), ("tp",)), dp="R")
    h = gs.einsum("bi,ih->bh", _ops([x, w1]))
    assert not h.errors and h.type.spec == (("dp",), ("tp",))
    w2 = t((("tp",), ()), dp="R")
    bad = gs.einsum("bh,ho->bo", _ops([h.type, w2]))
    assert bad.errors and 'out_partial_axes="tp"' in bad.errors[0].message
    ok = gs.einsum("bh,ho->bo", _ops([h.type, w2]), out_partial_axes="tp")
    assert not ok.errors and ok.type.spec == (("dp",), ()) and ok.type.get("tp") == PARTIAL


def test_matmul_and_linear() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(3, partial=False), types(2, partial=False)):
        for opa in (None, "tp"):
            _run("matmul", [ta, tb], {"out_partial_axes": opa}, np.matmul, [(6, 6, 12), (12, 6)],
                 counts=counts)
            _run("linear", [ta, tb], {"out_partial_axes": opa}, lambda x, w: x @ w.T,
                 [(6, 6, 12), (6, 12)], counts=counts)
    assert counts["accepted"] > 20, counts


def test_elementwise_with_broadcasting() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(2), types(1)):
        _run("add", [ta, tb], {}, np.add, [(6, 12), (12,)], counts=counts)
        _run("mul", [ta, tb], {}, np.multiply, [(6, 12), (12,)], counts=counts)
    for ta, tb in itertools.product(types(2), types(2)):
        _run("sub", [ta, tb], {}, np.subtract, [(6, 12), (6, 12)], counts=counts)
    for ta in types(2):
        _run("relu", [ta], {}, lambda a: np.maximum(a, 0), [(6, 12)], counts=counts)
    assert counts["accepted"] > 20 and counts["rejected"] > 20, counts


class _PS:
    """``PS[...]`` of a message, read back as a spec."""

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in items)


def _redistributed(t: SpmdType, dst: tuple[tuple[str, ...], ...]) -> SpmdType:
    """``t`` after ``spmd.redistribute(x, src=PS[t's spec], dst=PS[dst])``: the axes of
    ``dst`` shard their dims, an axis leaving the spec is R, the others keep their kind."""
    m = {a: lt for a, lt in t.axes if not any(a in e for e in t.spec or ())}
    for a in gs.global_axes(t):
        m[a] = REPLICATE
    for d, e in enumerate(dst):
        for a in e:
            m[a] = shard(d)
    return SpmdType.of(m, dst)


def test_elementwise_layout_mismatch_is_one_error_whose_fix_works() -> None:
    """Operands laid out differently: one error per op, and its fix (redistributes of
    operands to one layout), applied literally, makes the op compute the global result."""
    fixed = 0
    pairs = [*itertools.product(types(2, partial=False), types(2, partial=False)),
             *itertools.product(types(2, partial=False), types(1, partial=False)),
             *itertools.product(types(1, partial=False), types(2, partial=False))]
    for ta, tb in pairs:
        r = gs.propagate("add", _ops([ta, tb]))
        layout = [e for e in r.errors if "need the same layout" in e.message]
        if not layout:
            continue
        assert len(r.errors) == 1, r.errors
        msg = layout[0].message
        calls = re.findall(r"spmd\.redistribute\((\w+), src=(PS\[.*?\]), dst=(PS\[.*?\])\)"
                           r"(?= and |$)", msg)
        assert calls, msg
        ts = {"a": ta, "b": tb}
        for text, src, dst in calls:
            assert eval(src, {"PS": _PS()}) == ts[text].spec, msg
            ts[text] = _redistributed(ts[text], eval(dst, {"PS": _PS()}))
        after = gs.propagate("add", _ops([ts["a"], ts["b"]]))
        assert not after.errors, (msg, after.errors)
        shapes = [(6, 12)[-len(t.spec):] for t in (ts["a"], ts["b"])]  # type: ignore[arg-type]
        check(np.add, [RNG.standard_normal(s) for s in shapes], [ts["a"], ts["b"]], after.type)
        if len(calls) == 1:
            fixed += 1
    assert fixed > 50, fixed


def test_elementwise_layout_fix_moves_the_cheaper_operand() -> None:
    t = lambda spec, **kinds: SpmdType.of(  # noqa: E731
        {**{a: shard(d) for d, e in enumerate(spec) for a in e},
         **{a: LocalType(Kind(k)) for a, k in kinds.items()}}, spec)
    # the two layouts cost the same (a gather and a shard each): the second moves
    r = gs.propagate("add", _ops([t(((), ("tp",)), dp="R"), t((("tp",), ()), dp="R")]))
    assert [e.message for e in r.errors] == [
        'add: dim 0 of the result is unsharded in a but sharded on "tp" in b, and dim 1 is sharded '
        'on "tp" in a but unsharded in b (a: Tensor[PS[None, "tp"], R["dp"]], b: Tensor[PS["tp", '
        'None], R["dp"]]); elementwise ops need the same layout: spmd.redistribute(b, '
        'src=PS["tp", None], dst=PS[None, "tp"])']
    # sharding an unsharded operand gathers nothing: it moves, though it comes first
    r = gs.propagate("mul", _ops([t(((), ()), dp="R", tp="R"), t((("dp",), ()), tp="R")]))
    assert r.errors[0].message.endswith('spmd.redistribute(a, src=PS[None, None], dst=PS["dp", None])')


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), ((0, 1), False), (None, False)])
def test_sum_and_amax(dim, keepdim) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        for opa in (None, "tp", "dp", ("dp", "tp")):
            _run("sum", [ta], {"dim": dim, "keepdim": keepdim, "out_partial_axes": opa},
                 lambda a: np.sum(a, axis=dim, keepdims=keepdim), [(6, 12)], counts=counts)
    for ta in types(2, partial=False):
        _run("amax", [ta], {"dim": dim, "keepdim": keepdim},
             lambda a: np.amax(a, axis=dim, keepdims=keepdim), [(6, 12)], counts=counts)
    assert counts["accepted"] > 5, counts


def _softmax(a: np.ndarray, dim: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def test_softmax_along_dim() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2, partial=False):
        for dim in (0, 1, -1):
            _run("softmax", [ta], {"dim": dim}, lambda a: _softmax(a, dim), [(6, 12)], counts=counts)
    assert counts["accepted"] and counts["rejected"], counts


def test_picking_and_ordering_along_a_dim() -> None:
    """topk/sort/argsort/cummax/multinomial (SELECT_ALONG_DIM) and kthvalue/mode: the dim
    whole on each rank, the other dims' sharding kept (torch's default dim when none)."""
    counts = {"accepted": 0, "rejected": 0}
    top3 = lambda a, d: np.take(-np.sort(-a, axis=d), range(3), axis=d)  # noqa: E731
    for ta in types(2, partial=False):
        for dim in (0, 1, -1, None):
            d = -1 if dim is None else dim
            params = {} if dim is None else {"dim": dim}
            _run("topk", [ta], params, lambda a: top3(a, d), [(6, 12)], counts=counts)
            _run("sort", [ta], params, lambda a: np.sort(a, axis=d), [(6, 12)], counts=counts)
            _run("argsort", [ta], params, lambda a: np.argsort(a, axis=d), [(6, 12)],
                 counts=counts)
            _run("kthvalue", [ta], params, lambda a: np.take(np.sort(a, axis=d), 1, axis=d),
                 [(6, 12)], counts=counts)
        _run("cummax", [ta], {"dim": 0}, lambda a: np.maximum.accumulate(a, axis=0), [(6, 12)],
             counts=counts)
        r = gs.propagate("multinomial", _ops([ta]))
        assert bool(r.errors) == bool(ta.spec and ta.spec[-1]), (ta, r)
    assert counts["accepted"] > 10 and counts["rejected"] > 10, counts
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    assert gs.propagate("topk", _ops([x])).type.spec == (("dp",), ())
    assert gs.propagate("kthvalue", _ops([x])).type.spec == (("dp",),)
    assert gs.propagate("kthvalue", _ops([x]), dim=1, keepdim=True).type.spec == (("dp",), ())
    assert gs.propagate("cummax", _ops([x]), dim=gs.UNKNOWN).errors


def test_repeat_interleave() -> None:
    """An int repeat keeps every spec (each block its rank's); per-element repeats need the
    dim whole; dim=None is flatten's rule."""
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2, partial=False):
        for dim in (0, 1, -1):
            _run("repeat_interleave", [ta], {"dim": dim, "int_repeats": True},
                 lambda a: np.repeat(a, 2, axis=dim), [(6, 12)], counts=counts)
        _run("repeat_interleave", [ta], {"dim": None, "int_repeats": True},
             lambda a: np.repeat(a, 2), [(6, 12)], counts=counts)
        r = gs.propagate("repeat_interleave", _ops([ta]), dim=1, int_repeats=False)
        assert bool(r.errors) == bool(ta.spec and ta.spec[1]), (ta, r)
    assert counts["accepted"] > 10 and counts["rejected"], counts


def test_scatter_along_a_dim() -> None:
    """scatter: gather's conditions, src laid out as the index, the input's spec kept."""
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    ok = gs.propagate("scatter", _ops([x, x, x]), dim=1)
    assert not ok.errors and ok.type.spec == (("dp",), ())
    assert gs.propagate("scatter_add", _ops([x, x, x]), dim=0).errors  # dim 0 sharded
    other = SpmdType.of({"dp": REPLICATE, "tp": REPLICATE}, ((), ()))
    bad = gs.propagate("scatter", _ops([x, x, other]), dim=1)
    assert bad.errors and "laid out unlike the index" in bad.errors[0].message
    assert not gs.propagate("scatter", _ops([x, x]), dim=1).errors  # a scalar value


def _sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, *,
          causal: bool = False) -> np.ndarray:
    """torch's scaled_dot_product_attention on one rank's arrays (the causal mask is the
    top-left one of the arrays it is given, as torch builds it)."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if mask is not None:
        s = s + mask
    return _softmax(s, -1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_attention_accepted_layouts_compute_the_global_result(causal: bool) -> None:
    """Every accepted layout of q, k, v (rank 3: [heads, L or S, E]) is the global attention;
    sharded keys, head dims and (causal) queries are rejected with the gather to write."""
    counts = {"accepted": 0, "rejected": 0}
    ts = types(3, partial=False)
    for tq, tk, tv in itertools.product(ts, ts, ts):
        _run("scaled_dot_product_attention", [tq, tk, tv], {"is_causal": causal},
             lambda q, k, v: _sdpa(q, k, v, causal=causal), [(6, 6, 6)] * 3, counts=counts)
    assert counts["accepted"] > 10 and counts["rejected"] > 1000, counts


def test_attention_with_a_mask_computes_the_global_result() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for tq, tm in itertools.product(types(3, partial=False), types(2, partial=False)):
        tk = SpmdType.of({a: shard(d) for d, e in enumerate(tq.spec) if d == 0 for a in e},
                         (tq.spec[0], (), ()))  # k, v: the heads sharded like q's, rest whole
        _run("scaled_dot_product_attention", [tq, tk, tk, tm], {},
             lambda q, k, v, m: _sdpa(q, k, v, m), [(6, 6, 6)] * 3 + [(6, 6)], counts=counts)
    assert counts["accepted"] > 5 and counts["rejected"] > 5, counts


def test_attention_messages() -> None:
    t = lambda *spec: SpmdType.of(  # noqa: E731
        {a: shard(d) for d, e in enumerate(spec) for a in e}, tuple(spec))
    heads = t(("tp",), (), ())
    ok = gs.propagate("scaled_dot_product_attention", _ops([heads, heads, heads]), is_causal=True)
    assert not ok.errors and ok.type.spec == (("tp",), (), ())
    queries = t((), ("tp",), ())
    whole = t((), (), ())
    ok = gs.propagate("scaled_dot_product_attention", _ops([queries, whole, whole]))
    assert not ok.errors and ok.type.spec == ((), ("tp",), ())
    bad = gs.propagate("scaled_dot_product_attention", _ops([queries, whole, whole]), is_causal=True)
    assert [e.message for e in bad.errors] == [
        'scaled_dot_product_attention with is_causal=True: the query dim 1 of a is sharded on "tp" '
        '(a: Tensor[PS[None, "tp", None]]), and the causal mask counts positions from each rank\'s '
        "first query, which is the global position only on the first rank; pass an attn_mask "
        "sharded like the queries instead, or gather the queries first (spmd.redistribute(a, "
        'src=PS[None, "tp", None], dst=PS[None, None, None]))']
    keys = t((), ("tp",), ())
    bad = gs.propagate("scaled_dot_product_attention", _ops([whole, keys, keys]))
    assert [e.message for e in bad.errors] == [
        "scaled_dot_product_attention needs the key sequence dim S (the softmax runs over every "
        'key) whole on each rank, but dim 1 of b is sharded on "tp" (b: Tensor[PS[None, "tp", '
        'None]]); gather it first: spmd.redistribute(b, src=PS[None, "tp", None], dst=PS[None, '
        "None, None]) (attention over sharded keys, ring attention, is explicit communication: "
        "write it in spmd.local_map)"]
    assert bad.type == SpmdType()  # one mistake, one error: the result is unknown
    # an untyped value (its layout unknown: it may shard Ev): the result is unknown too
    r = gs.propagate("scaled_dot_product_attention", _ops([heads, heads, SpmdType()]))
    assert not r.errors and r.type.spec is None
    # a key that is not a tensor, or a missing value: the caller's error, no second one here
    for ops in (_ops([heads, heads]), [Operand(heads, "q"), Operand(None, "3"), Operand(heads, "v")]):
        r = gs.propagate("scaled_dot_product_attention", ops)
        assert not r.errors and r.type == SpmdType()
    # an is_causal the caller cannot read may be True: fine unless the queries are sharded
    unread = gs.propagate("scaled_dot_product_attention", _ops([heads, heads, heads]),
                          is_causal=gs.UNKNOWN)
    assert not unread.errors and unread.type.spec == (("tp",), (), ())
    unread = gs.propagate("scaled_dot_product_attention", _ops([queries, whole, whole]),
                          is_causal=gs.UNKNOWN)
    assert "with an is_causal that may be True" in unread.errors[0].message


def test_permutations() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(3):
        _run("permute", [ta], {"dims": (2, 0, 1)}, lambda a: a.transpose(2, 0, 1), [(6, 12, 6)], counts=counts)
        _run("transpose", [ta], {"dim0": 0, "dim1": -1}, lambda a: a.swapaxes(0, -1), [(6, 12, 6)], counts=counts)
        _run("movedim", [ta], {"source": 0, "destination": 2}, lambda a: np.moveaxis(a, 0, 2),
             [(6, 12, 6)], counts=counts)
        _run("mT", [ta], {}, lambda a: a.swapaxes(-1, -2), [(6, 12, 6)], counts=counts)
    assert counts["rejected"] == 0 and counts["accepted"] > 50, counts


def _factorizations(n: int, rank: int) -> list[tuple[int, ...]]:
    if rank == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0
            for rest in _factorizations(n // d, rank - 1)]


def _global_of(local: Sequence[int], spec) -> tuple[int, ...]:
    return tuple(s * math.prod(MESH[a] for a in e) for s, e in zip(local, spec))


@pytest.mark.parametrize("in_shape", [(6, 12), (12, 6), (6, 12, 6), (12, 1, 6), (6, 6, 6)])
def test_reshape_with_local_shapes_is_the_global_reshape(in_shape) -> None:
    """Runtime form: the literal target is the local shape torch receives; every
    accepted (type, target) pair over all factorizations of the local size into 1 to 3
    dims equals the global reshape of the global tensor."""
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(len(in_shape)):
        if any(e and in_shape[d] == 1 for d, e in enumerate(ta.spec)):
            continue  # a size-1 dim is never sharded
        g_in = in_shape
        try:
            loc_in = gs.local_shape(g_in, ta.spec, MESH)
        except ZeroDivisionError:  # pragma: no cover
            continue
        if any(g % math.prod(MESH[a] for a in e) for g, e in zip(g_in, ta.spec)):
            continue
        n = math.prod(loc_in)
        for rank_out in (1, 2, 3):
            for tgt in _factorizations(n, rank_out):
                r = gs.propagate("reshape", _ops([ta]), shape=tgt, in_shape=loc_in, mesh_sizes=MESH)
                if r.errors:
                    counts["rejected"] += 1
                    assert any(w in r.errors[0].message for w in ("redistribute", "outermost")), r.errors
                    continue
                counts["accepted"] += 1
                x = RNG.standard_normal(g_in)
                g_out = _global_of(tgt, r.type.spec)
                check(lambda a: a.reshape(g_out), [x], [ta], r.type, local_op=lambda a: a.reshape(tgt))
    assert counts["accepted"] > 50 and counts["rejected"] > 10, counts


def test_static_reshape_agrees_with_the_known_shape_rule() -> None:
    """Statically (no input shape) a tensor sharded only on dim 0 takes any target, and a
    target that keeps a prefix (x.shape[i]) takes the first dim after it sharded; every
    static verdict that accepts gives the spec the runtime rule gives on every shape."""
    counts = {"accepted": 0, "rejected": 0, "runtime_more": 0}
    for in_shape in [(6, 12, 6), (12, 1, 6), (6, 6, 6)]:
        for ta in types(3):
            if any(e and in_shape[d] == 1 for d, e in enumerate(ta.spec)):
                continue
            loc_in = gs.local_shape(in_shape, ta.spec, MESH)
            n = math.prod(loc_in)
            for keep in range(0, 3):
                rest = math.prod(loc_in[keep:])
                for rank_rest in (0, 1, 2):
                    tails = [()] if rank_rest == 0 else _factorizations(rest, rank_rest)
                    if rank_rest == 0 and rest != 1:
                        continue
                    for tail in tails:
                        static_shape = tuple(gs.SameDim(i) for i in range(keep)) + tuple(
                            -1 if k == 0 else gs.ANY_SIZE for k in range(len(tail)))
                        tgt = tuple(loc_in[:keep]) + tuple(tail)
                        st = gs.propagate("reshape", _ops([ta]), shape=static_shape)
                        rt = gs.propagate("reshape", _ops([ta]), shape=tgt, in_shape=loc_in)
                        if st.errors:
                            counts["rejected"] += 1
                            counts["runtime_more"] += not rt.errors
                            assert "unflatten(dim, sizes)" in st.errors[0].message or "scalar" in st.errors[0].message, st.errors
                            continue
                        counts["accepted"] += 1
                        assert not rt.errors and rt.type.spec == st.type.spec, (ta, tgt, st, rt)
    assert counts["accepted"] > 50 and counts["rejected"] > 10, counts


def test_flatten_unflatten() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(3):
        r = gs.propagate("flatten", _ops([ta]), start_dim=0, end_dim=1)
        if r.errors:
            counts["rejected"] += 1
        else:
            counts["accepted"] += 1
            x = RNG.standard_normal((6, 12, 6))
            check(lambda a: a.reshape(72, 6), [x], [ta], r.type,
                  local_op=lambda a: a.reshape(-1, a.shape[-1]))
    for ta in types(2):
        loc = gs.local_shape((6, 12), ta.spec, MESH)
        for sizes in ((-1, 2), (2, -1), (1, -1)):
            r = gs.propagate("unflatten", _ops([ta]), dim=1, sizes=sizes, mesh_sizes=MESH)
            assert not r.errors
            counts["accepted"] += 1
            x = RNG.standard_normal((6, 12))
            local_out = np.empty(loc).reshape(loc[0], *sizes).shape
            g_out = _global_of(local_out, r.type.spec)
            check(lambda a: a.reshape(g_out), [x], [ta], r.type,
                  local_op=lambda a: a.reshape(local_out))
    assert counts["accepted"] and counts["rejected"], counts


def test_cat_stack() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(2, partial=False), repeat=2):
        for dim in (0, 1):
            _run("cat", [ta, tb], {"dim": dim}, lambda a, b: np.concatenate([a, b], axis=dim),
                 [(6, 12), (6, 12)], counts=counts)
        _run("stack", [ta, tb], {"dim": 1}, lambda a, b: np.stack([a, b], axis=1),
             [(6, 12), (6, 12)], counts=counts)
    assert counts["accepted"] and counts["rejected"], counts


@pytest.mark.parametrize("index", [
    (slice(None), 0), (0,), (Ellipsis, 1), (None, slice(None)), (slice(None), slice(2, 8)),
    (slice(None), slice(None), None),
], ids=str)
def test_indexing(index) -> None:
    counts = {"accepted": 0, "rejected": 0}
    np_index = tuple(slice(2, 8) if isinstance(i, slice) and i != slice(None) else i for i in index)
    for ta in types(2):
        _run("__getitem__", [ta], {"index": index}, lambda a: a[np_index], [(6, 12)], counts=counts)
    assert counts["accepted"], counts


def test_non_literal_parameters_are_errors_not_guesses() -> None:
    x = _ops([types(2, partial=False)[5]])
    for op, params in [("sum", {"dim": gs.UNKNOWN}), ("softmax", {"dim": gs.UNKNOWN}),
                       ("permute", {"dims": gs.UNKNOWN}), ("reshape", {"shape": gs.UNKNOWN}),
                       ("__getitem__", {"index": gs.UNKNOWN}), ("transpose", {"dim0": 0, "dim1": gs.UNKNOWN})]:
        r = gs.propagate(op, x, **params)
        assert any("literal" in e.message for e in r.errors), (op, r)


def test_local_operands_keep_the_local_rule() -> None:
    t = SpmdType.of({"tp": REPLICATE})
    assert gs.propagate("add", _ops([t, t])).type == t


def test_localize_and_boundary() -> None:
    g = SpmdType.of({"tp": shard(1), "dp": REPLICATE}, ((), ("tp",)))
    assert gs.localize(g, ("tp",)).spec == ((), ())
    assert gs.localize(g, None).spec is None
    local = SpmdType.of({"tp": LocalType(Kind.V), "dp": REPLICATE})
    assert gs.check_local_map_boundary(local, g, ("tp",)) == []
    wrong = SpmdType.of({"tp": REPLICATE})
    assert gs.check_local_map_boundary(wrong, g, ("tp",))


def test_per_axis_collectives_on_global_types_move_the_spec() -> None:
    """collectives.check_collective (both adapters) moves the axis in the spec."""
    from spmd_mypy.engine.collectives import check_collective

    y = SpmdType.of({"dp": shard(0), "tp": shard(0)}, (("dp", "tp"), ()))
    r = check_collective("all_gather", y, ("tp",), shard(0), REPLICATE)
    assert not r.errors and r.type.spec == (("dp",), ()) and r.type.get("tp") == REPLICATE
    r = check_collective("all_gather", y, ("dp",), shard(0), REPLICATE)
    assert r.errors and "innermost" in r.errors[0].message
    p = SpmdType.of({"dp": REPLICATE, "tp": PARTIAL}, ((), ()))
    r = check_collective("reduce_scatter", p, ("tp",), PARTIAL, shard(1))
    assert not r.errors and r.type.spec == ((), ("tp",)) and r.type.get("tp") == shard(1)
    x = SpmdType.of({"dp": shard(0), "tp": shard(1)}, (("dp",), ("tp",)))
    r = check_collective("all_to_all", x, ("tp",), shard(1), shard(0))
    assert not r.errors and r.type.spec == (("dp", "tp"), ())
    r = check_collective("convert", p.replace("tp", REPLICATE), ("tp",), REPLICATE, VARYING)
    assert r.errors and "dst=S(i)" in r.errors[0].message


# -- split / chunk / unbind, expand, roll, cross_entropy (issue 5, session 3) ---------------


@pytest.mark.parametrize("op,params,np_op", [
    ("chunk", {"dim": 1}, lambda a: np.array_split(a, 2, axis=1)[1]),
    ("chunk", {"dim": 0}, lambda a: np.array_split(a, 2, axis=0)[0]),
    ("split", {"dim": -1}, lambda a: np.split(a, [4], axis=-1)[1]),
    ("tensor_split", {}, lambda a: np.split(a, [2], axis=0)[1]),
    ("unbind", {"dim": 1}, lambda a: np.take(a, 3, axis=1)),
    ("unbind", {}, lambda a: np.take(a, 1, axis=0)),
], ids=lambda v: str(v) if isinstance(v, (str, dict)) else "")
def test_split_chunk_unbind_pieces_are_the_global_pieces(op, params, np_op) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        _run(op, [ta], params, np_op, [(6, 12)], counts=counts)
    assert counts["accepted"] and counts["rejected"], counts


def test_split_along_sharded_dim_names_the_redistribute() -> None:
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    r = gs.propagate("chunk", _ops([x]), dim=0)
    assert r.errors and "spmd.redistribute(a, src=PS[\"dp\", None], dst=PS[None, None])" in r.errors[0].message
    assert gs.propagate("split", _ops([x]), dim=gs.UNKNOWN).errors[0].message.count("literal")
    ok = gs.propagate("unbind", _ops([x]), dim=1)
    assert not ok.errors and ok.type.spec == (("dp",),) and ok.type.get("dp") == shard(0)


def test_expand_new_leading_dims_and_kept_sharded_dims() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        _run("expand", [ta], {"shape": (3, -1, -1)}, lambda a: np.broadcast_to(a, (3, *a.shape)),
             [(6, 12)], counts=counts)
        _run("broadcast_to", [ta], {"shape": (2, 3, -1, -1)},
             lambda a: np.broadcast_to(a, (2, 3, *a.shape)), [(6, 12)], counts=counts)
    assert counts["accepted"] > 20 and counts["rejected"] == 0, counts
    # a size-1 unsharded dim expanded (its literal size is the global one)
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        if ta.spec[1]:
            continue  # a size-1 dim is never sharded
        _run("expand", [ta], {"shape": (-1, 12)}, lambda a: np.broadcast_to(a, (a.shape[0], 12)),
             [(6, 1)], counts=counts)
    assert counts["accepted"] and counts["rejected"] == 0, counts
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    r = gs.propagate("expand", _ops([x]), shape=(8, 4))
    assert r.errors and "write -1 there (a.expand(-1, 4))" in r.errors[0].message


def test_expand_as_takes_the_broadcast_layout() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(1), types(2)):
        _run("expand_as", [ta, tb], {}, lambda a, b: np.broadcast_to(a, b.shape), [(12,), (6, 12)],
             counts=counts)
    assert counts["accepted"] and counts["rejected"], counts


@pytest.mark.parametrize("op", ["view_as", "reshape_as"])
@pytest.mark.parametrize("sa,sb", [((12, 12), (6, 2, 12)), ((6, 2, 12), (12, 12))])
def test_view_as_accepted_layouts_compute_the_global_result(op: str, sa, sb) -> None:
    """x.view_as(other): x's values in other's local shape; every accepted pair of layouts
    (both shard dim 0 alone on the same axes, or neither is sharded) is the global reshape."""
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(len(sa)), types(len(sb))):
        _run(op, [ta, tb], {}, lambda a, b: a.reshape(b.shape), [sa, sb], counts=counts)
    assert counts["accepted"] > 10 and counts["rejected"] > 10, counts


@pytest.mark.parametrize("dims", [1, (0, 1), 0, None, -1])
def test_roll_along_unsharded_dims(dims) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        _run("roll", [ta], {"dims": dims}, lambda a: np.roll(a, 2, axis=dims), [(6, 12)],
             counts=counts)
    assert counts["accepted"] and counts["rejected"], counts


FOURIER_CASES = [
    ("fft_fft", {"dim": 1}, lambda a: np.fft.fft(a, axis=1)),
    ("fft_fft", {}, lambda a: np.fft.fft(a, axis=-1)),
    ("fft_rfft", {"dim": 0}, lambda a: np.fft.rfft(a, axis=0)),
    ("fft_irfft", {"dim": 1}, lambda a: np.fft.irfft(a, axis=1)),
    ("fft_fft2", {}, lambda a: np.fft.fft2(a)),
    ("fft_rfftn", {"s": 1}, lambda a: np.fft.rfftn(a, s=(12,), axes=(1,))),
    ("fft_ifftn", {"dim": (0,)}, lambda a: np.fft.ifftn(a, axes=(0,))),
    ("fft_fftshift", {"dim": 1}, lambda a: np.fft.fftshift(a, axes=1)),
    ("fft_ifftshift", {}, lambda a: np.fft.ifftshift(a)),
]


@pytest.mark.parametrize("op,params,np_op", FOURIER_CASES, ids=[f"{c[0]}-{c[1]}" for c in FOURIER_CASES])
def test_fourier_along_unsharded_dims(op: str, params: dict, np_op) -> None:
    """torch.fft along unsharded dims is each rank's transform of whole lines: the spec is kept
    (rfft's halved last dim, s= sizes: the same on every rank); along a sharded dim an error."""
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(2):
        for part in (np.real, np.imag):  # the layouts are assembled as real arrays
            _run(op, [ta], params, lambda a, part=part: part(np_op(a)), [(6, 12)], counts=counts)
    assert counts["rejected"], counts
    assert counts["accepted"] or op in ("fft_fft2", "fft_ifftshift"), counts


def test_fourier_fix_moves_the_shard_to_a_dim_not_transformed() -> None:
    u = SpmdType.of({"tp": shard(0)}, (("tp",), ()))
    bad = gs.propagate("fft_fft", _ops([u]), dim=0)
    assert bad.errors and "dst=PS[None, \"tp\"]" in bad.errors[0].message, bad.errors
    assert "all_to_all" in bad.errors[0].message
    moved = gs.propagate("fft_fft", _ops([SpmdType.of({"tp": shard(1)}, ((), ("tp",)))]), dim=0)
    assert not moved.errors and moved.type.spec == ((), ("tp",))
    ok = gs.propagate("fft_rfft", _ops([u]))
    assert not ok.errors and ok.type.spec == (("tp",), ())


def _ce(logits: np.ndarray, target: np.ndarray, reduction: str) -> np.ndarray:
    """cross_entropy over dim 1 (numpy): target class indices (floats holding ints) or
    probabilities shaped like logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    if target.shape == logits.shape:
        loss = -(target * logp).sum(axis=1)
    else:
        idx = np.rint(target).astype(int)[:, None]
        loss = -np.take_along_axis(logp, idx, axis=1)[:, 0]
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("probs", [False, True], ids=["indices", "probabilities"])
def test_cross_entropy_is_the_global_loss_or_an_error(reduction, probs) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for tx in types(2, partial=False):
        for tt in types(2 if probs else 1, partial=False):
            r = gs.propagate("cross_entropy", _ops([tx, tt]), reduction=reduction)
            if r.errors:
                counts["rejected"] += 1
                for e in r.errors:
                    assert "redistribute" in e.message or "spmd.sum" in e.message, e.message
                continue
            counts["accepted"] += 1
            x = RNG.standard_normal((6, 12))
            t = RNG.random((6, 12)) if probs else RNG.integers(0, 12, (6,)).astype(float)
            want = _ce(x, t, reduction)
            lx, lt = lay_out(x, tx), lay_out(t, tt)
            locs = [_ce(a, b, reduction) for a, b in zip(lx, lt)]
            got = assemble([np.asarray(v) for v in locs], r.type, np.shape(want))
            np.testing.assert_allclose(got, want, atol=1e-8)
    assert counts["accepted"] and counts["rejected"], counts


def test_cross_entropy_messages() -> None:
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    t = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",),))
    mean = gs.propagate("cross_entropy", _ops([x, t]))
    assert mean.errors and "global mean is not the mean of the local means" in mean.errors[0].message
    assert 'spmd.sum(losses, 0, out_partial_axes="dp")' in mean.errors[0].message
    none = gs.propagate("nll_loss", _ops([x, t]), reduction="none")
    assert not none.errors and none.type.spec == (("dp",),)
    cls = SpmdType.of({"tp": shard(1), "dp": REPLICATE}, ((), ("tp",)))
    r = gs.propagate("cross_entropy", _ops([cls, SpmdType.of({"dp": REPLICATE, "tp": REPLICATE}, ((),))]),
                     reduction="none")
    assert r.errors and "class dim 1" in r.errors[0].message
    w = SpmdType.of({"tp": shard(0), "dp": REPLICATE}, (("tp",),))
    r = gs.propagate("cross_entropy", _ops([x, t, w]), reduction="none")
    assert r.errors and "class weights" in r.errors[0].message
    assert gs.propagate("cross_entropy", _ops([x, t]), reduction=gs.UNKNOWN).errors[0].message.count("literal")


def test_elementwise_broadcast_operand_varying_on_the_sharding_axis_is_rejected() -> None:
    """``PS["dp", None] + PS[None] V["dp"]``: the vector differs per dp rank, so each rank
    would broadcast its own values along the dp-sharded dim (no global meaning)."""
    a = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    c = SpmdType.of({"dp": VARYING, "tp": REPLICATE}, ((),))
    for op in ("add", "mul", "where"):
        r = gs.propagate(op, _ops([a, c]))
        assert r.errors and 'all_gather(b, "dp", src=V, dst=R)' in r.errors[0].message, (op, r)
        r = gs.propagate(op, _ops([c, a]))
        assert r.errors, op
    # size 1 on the sharded dim (runtime: sizes known) is a broadcast too
    c2 = SpmdType.of({"dp": VARYING, "tp": REPLICATE}, ((), ()))
    r = gs.propagate("add", _ops([a, c2]), sizes_one=((False, False), (True, False)))
    assert r.errors and "has size 1" in r.errors[0].message
    # Replicate on "dp" broadcasts the same values on every rank: accepted
    ok = gs.propagate("add", _ops([a, c.replace("dp", REPLICATE)]))
    assert not ok.errors and ok.type.spec == (("dp",), ())
    # a local axis outside every spec stays a local axis (V), as before
    v = SpmdType.of({"tp": VARYING, "dp": REPLICATE}, ((),))
    b = SpmdType.of({"dp": shard(0), "tp": VARYING}, (("dp",), ()))
    ok = gs.propagate("add", _ops([b, v]))
    assert not ok.errors and ok.type.get("tp") == VARYING


def test_untyped_target_is_gradual_and_expand_as_untyped_is_unknown() -> None:
    x = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    u = SpmdType()
    r = gs.propagate("cross_entropy", _ops([x, u]), reduction="none")
    assert not r.errors and r.type.spec == (("dp",),)
    assert gs.propagate("cross_entropy", _ops([x, u])).errors  # the mean over dp still is not
    r = gs.propagate("expand_as", _ops([x, u]))
    assert not r.errors and r.type.spec is None


# -- lookups: embedding, index_select, x[ids] ------------------------------------------------


def _check_lookup(name: str, ti: SpmdType, tw: SpmdType, params: dict, ids_shape, w_shape,
                  np_op, counts: dict, n_rows: int) -> None:
    ids_op = Operand(ti, "ids", can_grad=False, role=Role.INDEX)
    w_op = Operand(tw, "w")
    if name == "embedding":
        operands = [ids_op, w_op]
    elif name == "__getitem__":
        operands = [w_op, ids_op]
        params = {"index": tuple(gs.TensorIndex(len(ti.spec), any(ti.spec), ti.spec)
                                 if it == "ids" else it for it in params["index"])}
    else:
        operands = [w_op, ids_op]
    r = gs.propagate(name, operands, **params)
    if r.errors:
        counts["rejected"] += 1
        for e in r.errors:
            assert_no_noop_redistribute(e.message)
            assert "redistribute" in e.message, e.message
        return
    counts["accepted"] += 1
    ids = RNG.integers(0, n_rows, size=ids_shape)
    w = RNG.standard_normal(w_shape)
    want = np_op(ids, w)
    li, lw = lay_out(ids, ti), lay_out(w, tw)
    locs = [np_op(i.astype(int), x) for i, x in zip(li, lw)]
    np.testing.assert_allclose(assemble(locs, r.type, want.shape), want, atol=1e-12)


def test_embedding_lookup_computes_the_global_lookup() -> None:
    """Every layout of the ids (rank 2) and the table: an accepted lookup, run on each rank's
    locals, is the global lookup (ids' dims with their sharding, then the table's embedding
    dim); a table sharded on its vocab dim, or an axis on two dims, is rejected."""
    counts = {"accepted": 0, "rejected": 0}
    for ti, tw in itertools.product(types(2, partial=False), types(2, partial=False)):
        _check_lookup("embedding", ti, tw, {}, (6, 12), (12, 6), lambda i, w: w[i], counts, 12)
    assert counts["accepted"] > 10 and counts["rejected"] > 10, counts
    ids = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    table = SpmdType.of({"dp": REPLICATE, "tp": REPLICATE}, ((), ()))
    r = gs.propagate("embedding", [Operand(ids, "ids", role=Role.INDEX), Operand(table, "w")])
    assert not r.errors and r.type.spec == (("dp",), (), ())
    vocab = SpmdType.of({"dp": REPLICATE, "tp": shard(0)}, (("tp",), ()))
    r = gs.propagate("embedding", [Operand(ids, "ids", role=Role.INDEX), Operand(vocab, "w")])
    assert r.errors and "vocab" in r.errors[0].message and "local_map" in r.errors[0].message \
        and "dst=PS[None, None]" in r.errors[0].message


def test_index_select_and_tensor_index_compute_the_global_lookup() -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ti, tw in itertools.product(types(1, partial=False), types(2, partial=False)):
        _check_lookup("index_select", ti, tw, {"dim": 1}, (6,), (6, 12),
                      lambda i, w: np.take(w, i, axis=1), counts, 12)
    for ti, tw in itertools.product(types(2, partial=False), types(2, partial=False)):
        _check_lookup("__getitem__", ti, tw, {"index": (slice(None), "ids")}, (6, 6), (6, 12),
                      lambda i, w: w[:, i], counts, 12)
    assert counts["accepted"] > 10 and counts["rejected"] > 10, counts


def test_lookup_with_an_untyped_side_is_unknown() -> None:
    ids = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    r = gs.propagate("embedding", [Operand(ids, "ids", role=Role.INDEX)])  # nn.Embedding's weight
    assert not r.errors and not r.type
    r = gs.propagate("embedding", [Operand(ids, "ids", role=Role.INDEX), Operand(SpmdType(), "w")])
    assert not r.errors and not r.type


# -- bitwise/logical operators, triu/tril, pad, group_norm -----------------------------------


@pytest.mark.parametrize("op", ["bitwise_or", "bitwise_and", "bitwise_xor", "bitwise_or_"])
def test_bitwise_ops_are_elementwise(op: str) -> None:
    np_op = {"bitwise_or": np.logical_or, "bitwise_or_": np.logical_or,
             "bitwise_and": np.logical_and, "bitwise_xor": np.logical_xor}[op]
    counts = {"accepted": 0, "rejected": 0}
    for ta, tb in itertools.product(types(2, partial=False), types(2, partial=False)):
        want = gs.propagate("logical_or", _ops([ta, tb]))
        got = gs.propagate(op, _ops([ta, tb]))
        assert bool(got.errors) == bool(want.errors) and (got.errors or got.type == want.type)
        _run(op, [ta, tb], {}, lambda a, b: np_op(a > 0, b > 0).astype(float), [(6, 12), (6, 12)],
             counts=counts)
    for ta in types(2, partial=False):
        _run("bitwise_not", [ta], {}, lambda a: (~(a > 0)).astype(float), [(6, 12)], counts=counts)
    assert counts["accepted"] > 10 and counts["rejected"] > 10, counts


def _group_norm(x: np.ndarray, groups: int) -> np.ndarray:
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    return g.reshape(x.shape)


@pytest.mark.parametrize("name,params,np_op", [
    ("triu", {}, lambda a: np.triu(a)),
    ("tril", {}, lambda a: np.tril(a, -1)),
    ("pad", {"pad": (1, 2)}, lambda a: np.pad(a, ((0, 0), (0, 0), (1, 2)))),
    ("pad", {"pad": (0, 0, 2, 1)}, lambda a: np.pad(a, ((0, 0), (2, 1), (0, 0)))),
    ("group_norm", {}, lambda a: _group_norm(a, 2)),
], ids=["triu", "tril", "pad-last", "pad-middle", "group_norm"])
def test_per_position_ops_keep_the_spec_on_whole_dims(name, params, np_op) -> None:
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(3, partial=False):
        _run(name, [ta], params, np_op, [(6, 6, 12)], counts=counts)
    assert counts["accepted"] > 3 and counts["rejected"] > 3, counts
    r = gs.propagate("pad", _ops([types(3, partial=False)[0]]), pad=gs.UNKNOWN)
    assert r.errors and "literal pad" in r.errors[0].message


def test_no_rule_error_never_suggests_a_noop_redistribute() -> None:
    for t in types(2, partial=False):
        r = gs.propagate("unique_consecutive", _ops([t]))
        assert r.errors and "no shard propagation rule" in r.errors[-1].message
        assert_no_noop_redistribute(r.errors[-1].message)
        assert ("spmd.redistribute" in r.errors[-1].message) == any(t.spec), r.errors[-1].message


def test_localize_on_every_mesh_axis_drops_the_spec() -> None:
    g = SpmdType.of({"dp": shard(0), "tp": REPLICATE}, (("dp",), ()))
    assert gs.localize(g, ("dp", "tp"), ("dp", "tp")).spec is None
    assert gs.localize(g, ("dp", "tp"), ("dp", "tp")).get("dp") == shard(0)
    assert gs.localize(g, ("dp",), ("dp", "tp")).spec == ((), ())
    # the local rule applies inside: a bitwise op of fully local values is the local one
    loc = gs.localize(g, ("dp", "tp"), ("dp", "tp"))
    assert not gs.propagate("bitwise_or", _ops([loc, loc])).errors


def test_view_as_complex_and_real() -> None:
    """view_as_complex drops the trailing (real, imaginary) dim, which must be whole on each
    rank; view_as_real appends one; the other dims keep their sharding (and P stays P)."""
    counts = {"accepted": 0, "rejected": 0}
    for ta in types(3):
        # (the simulation holds real arrays: re + 2 im stands for re + i im, the same layout)
        _run("view_as_complex", [ta], {}, lambda a: a[..., 0] + 2 * a[..., 1], [(6, 12, 2)],
             counts=counts)
    rejected = counts["rejected"]
    assert counts["accepted"] and rejected, counts
    for ta in types(2):
        _run("view_as_real", [ta], {}, lambda a: np.stack([a.real, a.imag], -1), [(6, 12)],
             counts=counts)
    assert counts["rejected"] == rejected, "view_as_real takes every layout"
    x = Operand(SpmdType((("tp", VARYING),), ((), ("tp",))), "x")
    r = gs.propagate("view_as_complex", [x])
    assert r.errors and "gather it first" in r.errors[0].message
    y = Operand(SpmdType((("tp", VARYING),), (("tp",), (), ())), "y")
    assert gs.propagate("view_as_complex", [y]).type.spec == (("tp",), ())


def test_a_cast_to_an_integer_dtype_of_a_global_partial_is_nonlinear() -> None:
    """x.to(dtype) of a global value Partial on an axis: the dtype (as ops.call_spec reads it)
    chooses the rule, an integer or bool one non-linear as x.long(); the spec is kept."""
    t = SpmdType((("dp", VARYING), ("tp", PARTIAL)), (("dp",), ()))
    for dtype in ("torch.int64", "torch.bool", "torch.LongTensor"):
        r = gs.propagate("to", [Operand(t, "x")], dtype=dtype)
        assert [e.code for e in r.errors] == ["spmd-partial-nonlinear"], dtype
        assert r.type.spec == (("dp",), ()) and r.type.get("tp") is None
    for params in ({"dtype": "torch.float16"}, {"dtype": None}, {}):
        r = gs.propagate("to", [Operand(t, "x")], **params)
        assert not r.errors and r.type.get("tp") == PARTIAL and r.type.spec == (("dp",), ())


# -- in-place ops: the out-of-place op's rule, written into self ------------------------------

# the in-place ops torch's optimizers (Adam, AdamW, SGD, single-tensor and foreach: the
# _foreach ops run these at each list position) and clip_grad_norm_ run, with their operand
# count and the op on values (numpy)
INPLACE_OPS: list[tuple[str, int, Callable[..., np.ndarray]]] = [
    ("addcmul_", 3, lambda a, b, c: a + 0.1 * b * c),
    ("addcdiv_", 3, lambda a, b, c: a - 0.1 * b / (np.abs(c) + 1)),
    ("lerp_", 2, lambda a, b: a + 0.1 * (b - a)),
    ("sqrt_", 1, lambda a: np.sqrt(np.abs(a))),
    ("div_", 2, lambda a, b: a / (np.abs(b) + 1)),
    ("mul_", 2, np.multiply),
    ("add_", 2, np.add),
    ("sub_", 2, np.subtract),
    ("clamp_", 1, lambda a: np.clip(a, -0.5, 0.5)),
    ("clamp_min_", 1, lambda a: np.maximum(a, 0.0)),
    ("clamp_max_", 1, lambda a: np.minimum(a, 0.0)),
    ("copy_", 2, lambda a, b: np.broadcast_to(b, a.shape) + 0 * a),
    ("zero_", 1, lambda a: 0 * a),
    ("neg_", 1, np.negative),
    ("sign_", 1, np.sign),
    ("pow_", 1, np.square),
    ("exp_", 1, np.exp),
    ("abs_", 1, np.abs),
    ("reciprocal_", 1, np.reciprocal),
]


@pytest.mark.parametrize("name,n,np_op", INPLACE_OPS, ids=[o[0] for o in INPLACE_OPS])
def test_inplace_ops_take_the_out_of_place_rule_and_keep_self_s_spec(name, n, np_op) -> None:
    """Every layout of self and the other operands (the same type for both of a ternary
    op's, a matrix or a broadcast vector): an accepted op computes the global result, and
    its result has self's spec or is the in-place error; a rejected one never redistributes
    self (a copy would take the update), and its fix, applied, makes the op accepted with
    self's spec."""
    from spmd_mypy.engine.ops import check_inplace

    counts = {"accepted": 0, "rejected": 0}
    kept = 0
    others: list[tuple[SpmdType, tuple[int, ...]]] = [(t, (6, 12)) for t in types(2)]
    others += [(t, (12,)) for t in types(1)]
    for ta in types(2):
        for tb, shape in (others if n > 1 else [(None, None)]):
            ts = [ta] if tb is None else [ta] + [tb] * (n - 1)
            shapes = [(6, 12)] + [shape] * (n - 1)
            r = gs.propagate(name, _ops(ts))
            if r.errors:
                counts["rejected"] += 1
                for e in r.errors:
                    assert "redistribute(a," not in e.message, e.message
                layout = [e.message for e in r.errors if "need the same layout" in e.message]
                if layout:
                    msg = layout[0]
                    calls = re.findall(r"spmd\.redistribute\((\w+), src=(PS\[.*?\]|Tensor\[PS\[.*?\]"
                                       r"(?:, [RIP]\[[^\]]*\])*\]), dst=(PS\[.*?\])\)", msg)
                    assert calls and "writes into it in place" in msg, msg
                    fixed = dict(zip(("b", "x2"), ts[1:]))
                    for text, src, dst in calls:
                        # the operand's whole type where a bare spec would not describe it
                        # (P or I on an axis dst shards: test_pasted_fixes.py)
                        if src.startswith("Tensor["):
                            assert src == format_type(fixed[text]), msg
                        else:
                            assert eval(src, {"PS": _PS()}) == fixed[text].spec, msg
                            # pasted, the bare spec is the operand's type (no src-mismatch)
                            assert not check_source(fixed[text], gs._spec_type(fixed[text].spec),
                                                    dst=gs._spec_type(eval(dst, {"PS": _PS()}))), msg
                        fixed[text] = _redistributed(fixed[text], eval(dst, {"PS": _PS()}))
                    after = gs.propagate(name, _ops([ta, *fixed.values()]))
                    if not after.errors:  # (an error left: the kinds' own, R beside P)
                        assert after.type.spec == ta.spec, (msg, after.type)
                        kept += 1
                continue
            counts["accepted"] += 1
            check(np_op, [RNG.standard_normal(s) for s in shapes], ts, r.type)
            if r.type.spec != ta.spec:
                err = check_inplace(name, Operand(ta, "a"), r.type)
                assert err is not None and err.code == "spmd-inplace", (ts, r.type)
    assert counts["accepted"] > 3, counts
    if n > 1:
        assert counts["rejected"] > 3 and kept > 3, (counts, kept)


def test_inplace_no_rule_error_never_redistributes_self() -> None:
    """An in-place op with no global rule on a sharded self: a redistributed self is a new
    tensor (the update would go to it, the tensor itself keeping its old values), so the fix
    is local_map, never ``spmd.redistribute(self, ...)``; an unsharded self beside a sharded
    operand: that operand is the one to redistribute."""
    row = SpmdType.of({"tp": shard(0), "dp": REPLICATE}, (("tp",), ()))
    whole = SpmdType.of({"tp": REPLICATE, "dp": REPLICATE}, ((), ()))
    r = gs.propagate("renorm_", _ops([row]))
    assert r.errors and "spmd.redistribute" not in r.errors[0].message, r.errors
    assert "local_map" in r.errors[0].message and "writes into a in place" in r.errors[0].message
    out_of_place = gs.propagate("renorm", _ops([row]))
    assert "spmd.redistribute(a, " in out_of_place.errors[0].message
    r = gs.propagate("index_reduce_", _ops([whole, row]))
    assert r.errors and "spmd.redistribute(b, " in r.errors[0].message, r.errors
    assert "redistribute(a," not in r.errors[0].message


def test_inplace_spec_change_is_the_inplace_error() -> None:
    """The result of an in-place op (or out=) with another spec than the tensor written
    into, the kinds the same on every axis (a view moving the sharded dim; one dim's axes in
    another order): its type would name the old layout, so it is the in-place error."""
    from spmd_mypy.engine.ops import check_inplace

    row = SpmdType.of({"tp": shard(0), "dp": REPLICATE}, (("tp",), ()))
    col = SpmdType.of({"tp": shard(1), "dp": REPLICATE}, ((), ("tp",)))
    t = gs.propagate("transpose_", _ops([row]), dim0=0, dim1=1).type
    assert t.spec == col.spec
    err = check_inplace("transpose_", Operand(row, "w"), t)
    assert err is not None and err.code == "spmd-inplace"
    assert 'from PS["tp", None] to PS[None, "tp"]' in err.message, err.message
    dp_tp = SpmdType.of({"dp": shard(0), "tp": shard(0)}, (("dp", "tp"), ()))
    tp_dp = SpmdType.of({"dp": shard(0), "tp": shard(0)}, (("tp", "dp"), ()))
    err = check_inplace("add(..., out=)", Operand(dp_tp, "o"), tp_dp)
    assert err is not None and "drop out=" in err.message, err
    assert check_inplace("add_", Operand(row, "w"), row) is None


def _stack_over(locs: list[np.ndarray], axis: str, op: str) -> list[np.ndarray]:
    """The local effect of all_gather(V, R|I) (stack the axis' ranks' locals on a new dim 0)
    or convert(V, P) (a new dim 0 of the axis size, this rank's slot filled) on every rank."""
    out = []
    for c, local in zip(COORDS, locs):
        peers = [locs[COORDS.index(dict(c, **{axis: k}))] for k in range(MESH[axis])]
        if op == "all_gather":
            out.append(np.stack(peers))
        else:
            padded = np.zeros((MESH[axis],) + local.shape)
            padded[c[axis]] = local
            out.append(padded)
    return out


@pytest.mark.parametrize("op,dst", [("all_gather", REPLICATE), ("all_gather", LocalType(Kind.I)),
                                    ("convert", PARTIAL)], ids=str)
def test_collectives_adding_dim_0_give_the_global_spec_a_new_dim(op: str, dst: LocalType) -> None:
    """all_gather(V, R|I) stacks the ranks' values on a new dim 0 and convert(V, P) pads one:
    on a global x the result's spec has that new dim (unsharded), so its locals are blocks of
    the stacked values.  Both an axis the spec leaves out (V: each rank its own global value,
    the broadcast fix the docs once gave) and an axis sharding a dim (S(d) passed as src=V)."""
    from spmd_mypy.engine.collectives import check_collective

    shape = (6, 12)
    checked = 0
    for t in types(2, partial=False):
        for a in AXES:
            inside = any(a in e for e in t.spec)
            if inside:
                x = RNG.standard_normal(shape)
                locs = lay_out(x, t)
                d = next(i for i, e in enumerate(t.spec) if a in e)
                entry = t.spec[d]
                if entry[-1] != a:
                    assert check_collective(op, t, (a,), VARYING, dst).errors
                    continue
                n_pre = math.prod(MESH[b] for b in entry[:-1])
                b_len = shape[d] // (n_pre * MESH[a])
                split = x.reshape(shape[:d] + (n_pre, MESH[a], b_len) + shape[d + 1:])
                want = np.moveaxis(split, d + 1, 0).reshape(
                    (MESH[a],) + shape[:d] + (n_pre * b_len,) + shape[d + 1:])
                xt = t
            else:  # V on a, no dim: rank k of a holds its own global value xs[k]
                xs = [RNG.standard_normal(shape) for _ in range(MESH[a])]
                per = [lay_out(v, t) for v in xs]
                locs = [per[c[a]][i] for i, c in enumerate(COORDS)]
                want = np.stack(xs)
                xt = t.replace(a, VARYING)
            r = check_collective(op, xt, (a,), VARYING, dst)
            assert not r.errors, (format_type(xt), a, r.errors)
            assert r.type.spec is not None and len(r.type.spec) == want.ndim, format_type(r.type)
            np.testing.assert_allclose(assemble(_stack_over(locs, a, op), r.type, want.shape), want,
                                       atol=1e-9)
            checked += 1
    assert checked > 15, checked


def test_a_local_value_at_a_local_map_boundary_is_read_at_the_rank_the_spec_states() -> None:
    """S(-1) where PS["tp", None] is declared is S(1) at the spec's rank 2: refused, and the
    message says which dim it is there; a dim beyond the spec's rank says so; S(-1) where
    PS[None, "tp"] is declared is the same dim and fits."""
    declared = SpmdType.of({"tp": shard(0)}, (("tp",), ()))
    back = SpmdType.of({"tp": shard(-1)})
    errs = gs.check_local_map_boundary(back, declared, ("tp",))
    assert len(errs) == 1 and "(S(1) at the rank 2 the spec states)" in errs[0].message, errs
    beyond = SpmdType.of({"tp": shard(3)})
    errs = gs.check_local_map_boundary(beyond, declared, ("tp",))
    assert len(errs) == 1 and "(beyond the rank 2 the spec states)" in errs[0].message, errs
    last = SpmdType.of({"tp": shard(1)}, ((), ("tp",)))
    assert gs.check_local_map_boundary(back, last, ("tp",)) == []
