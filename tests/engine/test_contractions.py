"""The contraction rule (engine: contractions.contracted_layout) against torch itself.

S(j) on a result claims: the locals, concatenated on dim j, are the op applied to the global
operands.  For einsum equations, matmul, mm, bmm, mv, outer, linear and
scaled_dot_product_attention, at small ranks, every operand R or S(d) (every d), global
operands are built (the sharded dim of size 4: two shards of 2), each rank runs the op on
its locals, and wherever the rule answers a dim the concatenation there must equal the op on
the global operands:

- the check mode's answer (every shape known), exactly;
- the static checker's answer (no shapes) at the result's rank, for the same operands: it
  must hold too (the static answer is one for every rank combination it allows), except
  for attention below rank 4 (statically its q, k, v are the documented (N, ..., H, L, E)):
  there a claim may only be too specific (the truth is not a shard at all), never another
  dim.

Where the rule answers V nothing is claimed; the last tests check that it is not V in the
cases the module docstring lists, and that check mode and static answers agree where the
ranks are fixed.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F

from spmd_mypy.engine.contractions import (
    UNREAD, Contraction, DimError, contracted_layout, diagonal_block, make_contraction, may_sum,
    parse_equation, partial_sum, summed_at_ranks,
)
from spmd_mypy.engine.ops import Operand, propagate
from spmd_mypy.engine.types import REPLICATE, VARYING, Kind, LocalType, SpmdType, shard

CLAIMS = [0]  # how many claims were checked against torch (each test: some)
SHARDED = 4  # the global size of the sharded label (two shards of 2)
_SIZES = [3, 5, 2, 6, 7, 9, 10, 11, 13]


def _types(rank: int) -> list[LocalType]:
    return [REPLICATE] + [shard(d) for d in range(-rank, rank)]


def _equation(c: Contraction, ranks: Sequence[int]) -> str | None:
    """The op as an einsum at these ranks, as torch documents it (the test's own reading,
    not the engine's: shapes are built from it, and torch runs the real op on them)."""
    n = len(ranks)
    if c.op == "einsum":
        return c.equation
    if c.op == "matmul":
        ra, rb = ranks
        return {(1, 1): "k,k->"}.get((ra, rb)) or (
            "k,...km->...m" if ra == 1 else "...nk,k->...n" if rb == 1 else "...nk,...km->...nm")
    if c.op in ("mm", "bmm", "mv", "outer"):
        return {"mm": "nk,km->nm", "bmm": "bnk,bkm->bnm", "mv": "nk,k->n", "outer": "i,j->ij"}[c.op]
    if c.op == "linear":
        x, w = ("...i,oi", "...o") if ranks[1] == 2 else ("...i,i", "...")
        bias = "" if n == 2 else ",..." if ranks[1] == 1 else ",...o" if ranks[2] >= 1 else ","
        return f"{x}{bias}->{w}"
    if c.op in ("dot", "vdot"):
        return "k,k->"
    if c.op == "linalg_vecdot":
        return "...k,...k->..."
    if c.op in ("inner", "tensordot"):
        ra, rb = ranks
        if c.op == "inner":
            if ra == 0 or rb == 0:
                return f"{'abc'[:ra]},{'xyz'[:rb]}->{'abc'[:ra]}{'xyz'[:rb]}"
            da, db = [ra - 1], [rb - 1]
        elif isinstance(c.dims, int):
            da, db = list(range(ra - c.dims, ra)), list(range(c.dims))
        else:
            da, db = [d % ra for d in c.dims[0]], [d % rb for d in c.dims[1]]  # type: ignore[index]
        a = ["ABCDEFG"[da.index(i)] if i in da else "abcdefg"[i] for i in range(ra)]
        b = ["ABCDEFG"[db.index(i)] if i in db else "tuvwxyz"[i] for i in range(rb)]
        out = [ch for ch in a + b if ch.islower()]
        return f"{''.join(a)},{''.join(b)}->{''.join(out)}"
    mask = "" if n == 3 else ",...ls"
    return f"...le,...se,...sv{mask}->...lv"


def _labels(c: Contraction, ranks: Sequence[int]) -> tuple[list[str], str] | None:
    eq = _equation(c, ranks)
    try:
        return parse_equation(eq, ranks) if eq is not None else None
    except DimError:
        return None


def _globals(labels: list[str], sharded: str | None, gen: torch.Generator) -> list[torch.Tensor]:
    size: dict[str, int] = {}
    for lab in labels:
        for ch in lab:
            if ch not in size:
                size[ch] = SHARDED if ch == sharded else _SIZES[len(size) % len(_SIZES)]
    return [torch.randn(tuple(size[ch] for ch in lab), generator=gen, dtype=torch.float64)
            for lab in labels]


def _concat_is_global(fn: Callable[..., torch.Tensor], gs: list[torch.Tensor],
                      dims: list[int | None], j: int) -> bool | None:
    """Whether the ranks' results, concatenated on j, are fn of the globals (None: the locals
    do not run)."""
    try:
        ref = fn(*gs)
    except (RuntimeError, IndexError):
        return None  # torch takes no operands of these ranks
    outs = []
    for k in range(2):
        locs = [g if d is None else g.chunk(2, d)[k] for g, d in zip(gs, dims)]
        try:
            outs.append(fn(*locs))
        except (RuntimeError, IndexError):
            return None
    CLAIMS[0] += 1
    try:
        cat = torch.cat(outs, j)
    except (RuntimeError, IndexError):
        return False
    return cat.shape == ref.shape and torch.allclose(cat, ref)


def _check(c: Contraction, fn: Callable[..., torch.Tensor], ranks: Sequence[int],
           types: Sequence[LocalType], gen: torch.Generator, strict_static: bool = True) -> None:
    parsed = _labels(c, ranks)
    if parsed is None:
        return
    labels, out = parsed
    dims = [None if t.kind is not Kind.V else t.dim % r  # type: ignore[operator]
            for t, r in zip(types, ranks)]
    shard_labels = {lab[d] for lab, d in zip(labels, dims) if d is not None}
    sharded = shard_labels.pop() if len(shard_labels) == 1 else None
    gs = _globals(labels, sharded, gen)
    shapes = [tuple(g.shape) for g in gs]
    exact = contracted_layout(c, [(t, s) for t, s in zip(types, shapes)])
    static = contracted_layout(c, [(t, None) for t in types])
    out_rank = len(out)
    if exact.dim is not None:
        ok = _concat_is_global(fn, gs, dims, exact.dim)
        assert ok is not False, (c, ranks, types, exact)
    if out_rank < 1:
        return
    possible, sd = static.at_rank(out_rank)
    if possible and sd is not None:
        ok = _concat_is_global(fn, gs, dims, sd)
        if strict_static:
            assert ok is not False, (c, ranks, types, static.describe())
        elif ok is False:  # too specific at most: no other dim is the global's either
            for j in range(out_rank):
                assert _concat_is_global(fn, gs, dims, j) is not True, (c, ranks, types, j)
        if ok and exact.dim is not None:
            assert sd % out_rank == exact.dim % out_rank


# --------------------------------------------------------------------------------------

_EQUATIONS = ["bsh,hd->bsd", "bsh,hd", "ij,jk", "ij,jk->ki", "bi,jb->bij", "bi,bj->bij",
              "ii->i", "ij->ji", "bij->b", "bhld,bhsd->bhls", "bhls,bhsd->bhld", "i,j->ij",
              "bi,i->bi", "...ij,jk->...ik", "...ij,...jk->...ik", "...i,...i->...",
              "...ij->...ji", "b...i,io->b...o"]


def _einsum_ranks(eq: str) -> list[list[int]]:
    terms = eq.split("->")[0].split(",")
    choices = [[len(t)] if "..." not in t else [len(t) - 3 + e for e in range(3)] for t in terms]
    return [list(p) for p in itertools.product(*choices)]


@pytest.mark.parametrize("eq", _EQUATIONS)
def test_einsum_against_torch(eq: str) -> None:
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(0)
    c = make_contraction("einsum", {"equation": eq})
    assert c is not None
    for ranks in _einsum_ranks(eq):
        if eq == "ii->i" and ranks != [2]:
            continue
        for types in itertools.product(*(_types(r) for r in ranks)):
            if not any(t.kind is Kind.V for t in types):
                continue
            _check(c, lambda *xs: torch.einsum(eq, *xs), ranks, types, gen)
    assert CLAIMS[0] > before or eq == "ii->i", "no claim was checked"


_MATMULS: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, int]]]] = {
    "matmul": (torch.matmul, [(a, b) for a in range(1, 5) for b in range(1, 5)]),
    "mm": (torch.mm, [(2, 2)]),
    "bmm": (torch.bmm, [(3, 3)]),
    "mv": (torch.mv, [(2, 1)]),
    "outer": (torch.outer, [(1, 1)]),
}


@pytest.mark.parametrize("op", list(_MATMULS))
def test_matmul_family_against_torch(op: str) -> None:
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(1)
    fn, ranks_list = _MATMULS[op]
    c = make_contraction(op, {})
    assert c is not None
    for ranks in ranks_list:
        for types in itertools.product(*(_types(r) for r in ranks)):
            if any(t.kind is Kind.V for t in types):
                _check(c, fn, ranks, types, gen)
    assert CLAIMS[0] > before, "no claim was checked"


_VECTOR_PRODUCTS: dict[str, tuple[dict[str, object], Callable[..., torch.Tensor],
                                  list[tuple[int, int]]]] = {
    "dot": ({}, torch.dot, [(1, 1)]),
    "vdot": ({}, torch.vdot, [(1, 1)]),
    "inner": ({}, torch.inner, [(a, b) for a in range(0, 4) for b in range(0, 4)]),
    "tensordot-2": ({"dims": 2}, lambda a, b: torch.tensordot(a, b, dims=2),
                    [(a, b) for a in range(2, 5) for b in range(2, 5)]),
    "tensordot-0": ({"dims": 0}, lambda a, b: torch.tensordot(a, b, dims=0), [(1, 1), (2, 1)]),
    "tensordot-lists": ({"dims": ([1, 0], [0, -1])},
                        lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, -1])),
                        [(2, 2), (3, 2), (2, 3), (3, 3)]),
    "linalg_vecdot": ({}, torch.linalg.vecdot, [(a, b) for a in range(1, 4) for b in range(1, 4)]),
}


@pytest.mark.parametrize("name", list(_VECTOR_PRODUCTS))
def test_vector_products_against_torch(name: str) -> None:
    """dot, vdot, inner, tensordot, linalg.vecdot (session 41): S(j) claims hold, statically
    and in the check mode."""
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(6)
    values, fn, ranks_list = _VECTOR_PRODUCTS[name]
    c = make_contraction(name.split("-")[0], values)
    assert c is not None
    for ranks in ranks_list:
        for types in itertools.product(*(_types(r) for r in ranks)):
            if any(t.kind is Kind.V for t in types):
                _check(c, fn, ranks, types, gen)
    assert CLAIMS[0] > before or name in ("dot", "vdot"), "no claim was checked"


def test_linear_against_torch() -> None:
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(2)
    c = make_contraction("linear", {})
    assert c is not None
    for rx in range(1, 5):
        for rw in (1, 2):
            for rb in (None, 0, 1, 2):
                if rb is not None and rw == 1 and rb > 0 and rb > rx - 1:
                    continue
                ranks = [rx, rw] + ([] if rb is None else [rb])
                for types in itertools.product(*(_types(r) for r in ranks)):
                    if any(t.kind is Kind.V for t in types):
                        _check(c, lambda *xs: F.linear(*xs), ranks, types, gen)
    assert CLAIMS[0] > before, "no claim was checked"


def _attention(causal: bool) -> Callable[..., torch.Tensor]:
    def run(q, k, v, m=None):  # noqa: ANN001, ANN202
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
    return run


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_attention_against_torch(rank: int, causal: bool) -> None:
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(3)
    c = make_contraction("scaled_dot_product_attention", {"is_causal": causal})
    assert c is not None
    for types in itertools.product(*(_types(rank) for _ in range(3))):
        if any(t.kind is Kind.V for t in types):
            _check(c, _attention(causal), [rank] * 3, types, gen, strict_static=rank >= 4)
    assert CLAIMS[0] > before, "no claim was checked"


@pytest.mark.parametrize("mask_rank", [2, 3, 4])
def test_attention_with_a_mask_against_torch(mask_rank: int) -> None:
    before = CLAIMS[0]
    gen = torch.Generator().manual_seed(4)
    c = make_contraction("scaled_dot_product_attention", {})
    assert c is not None
    q_types = [REPLICATE, shard(1), shard(-2), shard(0)]
    for tq, tm in itertools.product(q_types, _types(mask_rank)):
        types = [tq, tq if tq.dim in (0, 1) else REPLICATE, tq if tq.dim in (0, 1) else REPLICATE,
                 tm]
        if any(t.kind is Kind.V for t in types):
            _check(c, _attention(False), [4, 4, 4, mask_rank], types, gen)
    assert CLAIMS[0] > before, "no claim was checked"


def test_attention_grouped_query_heads() -> None:
    """Heads sharded with fewer key/value heads (grouped-query attention): the locals keep
    the ratio, so the concatenation is the global grouped attention."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 8, 3, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 4, 5, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 4, 5, 4, generator=gen, dtype=torch.float64)
    c = make_contraction("scaled_dot_product_attention", {})
    assert c is not None
    shapes = [(2, 4, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4)]  # the locals
    got = contracted_layout(c, [(shard(1), s) for s in shapes])
    assert got == shard(1)

    def fn(q, k, v):  # noqa: ANN001, ANN202
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert _concat_is_global(fn, [q, k, v], [1, 1, 1], 1)
    # a size-1 shard beside a larger one (a broadcast) is no shard of a global
    assert contracted_layout(make_contraction("einsum", {"equation": "bi,bi->bi"}),  # type: ignore[arg-type]
                             [(shard(0), (2, 3)), (shard(0), (1, 3))]) == VARYING


# --------------------------------------------------------------------------------------
# Not V everywhere: the module docstring's table.

_R = REPLICATE


@pytest.mark.parametrize("op,values,types,static,checked", [
    ("einsum", {"equation": "bsh,hd->bsd"}, [shard(1), _R], "S(1)", ((2, 3, 4), (4, 5))),
    ("einsum", {"equation": "bsh,hd"}, [shard(1), _R], "S(2)", ((2, 3, 4), (4, 5))),
    ("einsum", {"equation": "...sh,hd->...sd"}, [shard(-2), _R], "S(-2)", ((2, 3, 4), (4, 5))),
    ("einsum", {"equation": "bsh,hd->bsd"}, [shard(2), _R], "V", ((2, 3, 4), (4, 5))),
    ("einsum", {"equation": "bi,jb->bij"}, [shard(0), shard(1)], "S(0)", ((2, 3), (4, 2))),
    ("einsum", {"equation": "bi,bj->bij"}, [shard(0), shard(1)], "V", ((2, 3), (2, 4))),
    ("einsum", {"equation": "bi,bj->bij"}, [shard(0), _R], "V", ((2, 3), (2, 4))),
    ("einsum", {"equation": "ii->i"}, [shard(0)], "V", ((2, 4),)),
    ("mm", {}, [shard(0), _R], "S(0)", ((2, 3), (3, 4))),
    ("mm", {}, [_R, shard(1)], "S(1)", ((2, 3), (3, 4))),
    ("bmm", {}, [shard(0), shard(0)], "S(0)", ((2, 3, 4), (2, 4, 5))),
    ("bmm", {}, [shard(0), _R], "V", ((2, 3, 4), (2, 4, 5))),
    ("matmul", {}, [shard(-2), _R], "V (V at rank >= 2, S(-1) at rank 1)", ((2, 3, 4), (4, 5))),
    ("matmul", {}, [shard(1), _R], "V", ((2, 3, 4), (4, 5))),
    ("linear", {}, [shard(1), _R], "V (S(1) at rank >= 3, V at rank 1, 2)", ((2, 3, 4), (5, 4))),
    ("linear", {}, [_R, shard(0)], "S(-1)", ((2, 3, 4), (5, 4))),
    ("scaled_dot_product_attention", {}, [shard(1)] * 3, "S(1)", ((2, 2, 3, 4),) * 3),
    ("scaled_dot_product_attention", {}, [shard(-2), _R, _R], "S(-2)",
     ((2, 2, 3, 4), (2, 4, 5, 4), (2, 4, 5, 4))),
    ("scaled_dot_product_attention", {"is_causal": True}, [shard(-2), _R, _R], "V",
     ((2, 2, 3, 4), (2, 4, 5, 4), (2, 4, 5, 4))),
    ("scaled_dot_product_attention", {"is_causal": object()}, [shard(-2), _R, _R], "V",
     ((2, 2, 3, 4), (2, 4, 5, 4), (2, 4, 5, 4))),
    ("scaled_dot_product_attention", {}, [shard(-2)] * 3, "V", ((2, 4, 2, 4),) * 3),
    ("scaled_dot_product_attention", {}, [_R, _R, shard(-1)], "S(-1)",
     ((2, 4, 3, 4), (2, 4, 5, 4), (2, 4, 5, 2))),
])
def test_the_docstring_table(op, values, types, static, checked) -> None:  # noqa: ANN001
    c = make_contraction(op, values)
    assert c is not None
    assert contracted_layout(c, [(t, None) for t in types]).describe() == static
    exact = contracted_layout(c, list(zip(types, checked)))
    if static.startswith("S("):
        assert str(exact) == static  # fixed ranks: the check mode says the same
    want = {"linear": "S(1)" if types[0].kind is Kind.V else "S(-1)",
            "matmul": "S(-2)" if types[0].dim == -2 else "S(1)"}.get(op)
    if want is not None:  # the check mode knows the ranks
        assert str(exact) == want


def test_check_mode_column_parallel_is_the_last_dim() -> None:
    c = make_contraction("linear", {})
    assert c is not None
    assert contracted_layout(c, [(_R, (2, 3, 4)), (shard(0), (5, 4))]) == shard(-1)
    assert contracted_layout(c, [(_R, (2, 3, 4)), (shard(0), (5, 4)), (shard(0), (5,))]) == shard(-1)
    # an R bias of the local out size has no global meaning; a 1-d weight: dim 0 is contracted
    assert contracted_layout(c, [(_R, (2, 3, 4)), (shard(0), (5, 4)), (_R, (5,))]) == VARYING
    assert contracted_layout(c, [(_R, (2, 3, 4)), (shard(0), (4,))]) == VARYING


def test_untyped_or_unknown_layout_operands_give_V() -> None:
    c = make_contraction("einsum", {"equation": "bsh,hd->bsd"})
    assert c is not None
    assert contracted_layout(c, [(shard(1), None), (None, None)]) == VARYING
    assert contracted_layout(c, [(shard(1), None), (VARYING, None)]) == VARYING
    assert make_contraction("einsum", {}) is None  # the equation not a literal: no rule


def test_through_propagate() -> None:
    """The op rule hands a Varying result's layout to the contraction rule; R, I and P
    results are untouched, and a contraction of two R operands stays R."""
    t = lambda lt: SpmdType.of({"tp": lt})  # noqa: E731
    c = make_contraction("einsum", {"equation": "bsh,hd->bsd"})
    res = propagate("einsum", [Operand(t(shard(1)), "x"), Operand(t(REPLICATE), "w")], move=c)
    assert not res.errors and res.type == t(shard(1))
    res = propagate("einsum", [Operand(t(REPLICATE), "x"), Operand(t(REPLICATE), "w")], move=c)
    assert res.type == t(REPLICATE)
    lin = make_contraction("linear", {})
    res = propagate("linear", [Operand(t(shard(0)), "x", shape=(4, 3)),
                               Operand(t(REPLICATE), "w", shape=(5, 3))], move=lin)
    assert res.type == t(shard(0))


# --------------------------------------------------------------------------------------
# Sums over a sharded dim (partial_sum) of the vector products (session 41: a CG step size
# from torch.dot of two row-sharded fields, 0.82 off, typed V by both checkers)

_S0, _SL = shard(0), shard(-1)


@pytest.mark.parametrize("op,values,ranks,types,static,checked,exact", [
    ("dot", {}, (), [_S0, _S0], True, ((4,), (4,)), True),
    ("vdot", {}, (), [_SL, _SL], True, ((4,), (4,)), True),
    ("dot", {}, (), [_S0, _R], False, ((4,), (4,)), False),  # R holds the whole k: no sum's part
    ("inner", {}, (), [_SL, _SL], True, ((2, 4), (3, 4)), True),  # the last dims, any rank
    ("inner", {}, (), [_S0, _S0], False, ((2, 4), (3, 4)), False),  # rows kept unless 1-d
    ("inner", {}, (), [_S0, _S0], False, ((4,), (4,)), True),  # the check mode sees 1-d
    ("inner", {}, (1, 1), [_S0, _S0], True, ((4,), (4,)), True),  # x.flatten(): 1-d
    ("tensordot", {"dims": 2}, (), [_S0, _S0], True, ((2, 4), (2, 4)), True),
    ("tensordot", {"dims": ([0], [0])}, (), [_S0, _S0], True, ((2, 4), (2, 3)), True),
    ("tensordot", {"dims": ([1], [1])}, (), [_S0, _R], False, ((2, 4), (3, 4)), False),
    ("tensordot", {"dims": 1}, (), [_S0, _S0], False, ((2, 4), (4, 3)), False),  # rows kept
    ("linalg_vecdot", {}, (), [_SL, _SL], True, ((2, 4), (2, 4)), True),
    ("linalg_vecdot", {"dim": -2}, (), [_S0, _S0], False, ((2, 4, 3), (2, 4, 3)), False),
    ("linalg_vecdot", {"dim": -2}, (), [shard(-2), shard(-2)], True, ((2, 4, 3), (2, 4, 3)), True),
    ("matmul", {}, (), [_S0, _S0], False, ((4,), (4,)), True),  # statically maybe 2-d
    ("matmul", {}, (1, 1), [_S0, _S0], True, ((4,), (4,)), True),  # a.flatten() @ b.flatten()
])
def test_vector_products_sum_over_the_shard(op, values, ranks, types, static, checked,  # noqa: ANN001
                                            exact) -> None:  # noqa: ANN001
    from dataclasses import replace

    from spmd_mypy.engine.contractions import partial_sum

    c = make_contraction(op, values)
    assert c is not None
    c = replace(c, ranks=ranks)
    assert partial_sum(c, [(t, None) for t in types]) is static
    assert partial_sum(c, list(zip(types, checked))) is exact


def test_vector_products_not_read() -> None:
    """dims / dim the rule cannot read: no contraction (a plain V, as before)."""
    assert make_contraction("tensordot", {"dims": UNREAD}) is None
    assert make_contraction("tensordot", {"dims": ([0, 1], [0])}) is None
    assert make_contraction("tensordot", {"dims": -1}) is None
    assert make_contraction("linalg_vecdot", {"dim": 0}) is None  # from the front: unknown
    assert make_contraction("linalg_vecdot", {"dim": UNREAD}) is None
    assert make_contraction("tensordot", {}) == make_contraction("tensordot", {"dims": 2})


def test_vector_product_errors_name_a_fix() -> None:
    """The error's fix: spmd.einsum("k,k->") for dot (vdot's first operand conjugated; read
    0-d statically whatever the operands, as spmd.matmul of two is not), spmd.einsum at known
    ranks for the others, else the reinterpret of the result."""
    from spmd_mypy.engine.contractions import equation_at

    t = lambda lt: SpmdType.of({"tp": lt})  # noqa: E731

    def message(op: str, values: dict, shapes: Sequence | None, ranks: tuple = ()) -> str:  # type: ignore[type-arg]
        from dataclasses import replace

        c = make_contraction(op, values)
        assert c is not None
        c = replace(c, ranks=ranks)
        ops = [Operand(t(_S0 if op in ("dot", "vdot", "tensordot") else _SL), n,
                       shape=None if shapes is None else shapes[i]) for i, n in enumerate("ab")]
        res = propagate(op, ops, move=c)
        assert [e.code for e in res.errors] == ["spmd-global"], (op, res)
        return res.errors[0].message

    assert 'spmd.einsum("k,k->", a, b, out_partial_axes="tp")' in message("dot", {}, None)
    assert 'spmd.einsum("k,k->", a.conj(), b, out_partial_axes="tp")' in message("vdot", {}, None)
    assert 'spmd.einsum("ij,ij->", a, b, out_partial_axes="tp")' in message(
        "tensordot", {"dims": 2}, [(2, 4), (2, 4)])
    assert 'spmd.einsum("ai,qi->aq", a, b, out_partial_axes="tp")' in message(
        "inner", {}, [(2, 4), (3, 4)])
    assert 'spmd.einsum("i,i->", a, b, out_partial_axes="tp")' in message("inner", {}, None, (1, 1))
    assert 'spmd.einsum("...i,...i->...", a.conj(), b, out_partial_axes="tp")' in message(
        "linalg_vecdot", {}, None)
    unknown = message("tensordot", {"dims": 2}, None)
    assert 'pass the contraction\'s result straight to spmd.reinterpret(..., "tp", src=V, dst=P)' in unknown
    # the equations are torch's: each runs
    for op, values, ranks in [("inner", {}, (2, 3)), ("tensordot", {"dims": ([1], [0])}, (3, 2))]:
        c = make_contraction(op, values)
        eq = equation_at(c, ranks)  # type: ignore[arg-type]
        assert eq is not None
        a, b = torch.randn(*[2] * ranks[0]), torch.randn(*[2] * ranks[1])
        fn = torch.inner if op == "inner" else lambda x, y: torch.tensordot(x, y, dims=([1], [0]))
        assert torch.allclose(torch.einsum(eq, a, b), fn(a, b))


# Two operands sharded on one axis on two different dims that stay in the result
# (contractions.diagonal_block): each rank holds one diagonal block, no shard of the whole.
# Typed V, F.linear(enc_s: S(1), wk: S(0)) (a cross-attention K projection of the
# sequence-parallel encoder output, the all_gather forgotten) passed both checkers with wrong
# numbers; now an error (spmd-global, as global SPMD's "a mesh axis shards one dim").

_BLOCKS_CHECKED = [0]


def _check_block(c: Contraction, fn: Callable[..., torch.Tensor], ranks: Sequence[int],
                 types: Sequence[LocalType], gen: torch.Generator, static_too: bool = True) -> None:
    """Where the rule sees a block (check mode: the shapes known) no dim of the ranks'
    concatenated results is the global result; where the static checker sees one, the check
    mode sees one too at any ranks whose locals run."""
    parsed = _labels(c, ranks)
    if parsed is None:
        return
    labels, _ = parsed
    dims = [None if t.kind is not Kind.V else t.dim % r  # type: ignore[operator]
            for t, r in zip(types, ranks)]
    sharded = {lab[d] for lab, d in zip(labels, dims) if d is not None}
    size: dict[str, int] = {}
    for lab in labels:
        for ch in lab:
            if ch not in size:
                size[ch] = SHARDED if ch in sharded else _SIZES[len(size) % len(_SIZES)]
    gs = [torch.randn(tuple(size[ch] for ch in lab), generator=gen, dtype=torch.float64)
          for lab in labels]
    exact = diagonal_block(c, [(t, tuple(g.shape)) for t, g in zip(types, gs)])
    static = diagonal_block(c, [(t, None) for t in types]) if static_too else None
    if exact is None and static is None:
        return
    try:
        ref = fn(*gs)
        outs = [fn(*[g if d is None else g.chunk(2, d)[k] for g, d in zip(gs, dims)])
                for k in range(2)]
    except (RuntimeError, IndexError):
        return  # torch takes no operands (or locals) of these ranks
    assert exact is not None, (c, ranks, types, "static block, none at these ranks")
    _BLOCKS_CHECKED[0] += 1
    for j in range(ref.dim()):
        try:
            cat = torch.cat(outs, j)
        except RuntimeError:
            continue
        assert not (cat.shape == ref.shape and torch.allclose(cat, ref)), (c, ranks, types, j)


def test_diagonal_blocks_against_torch() -> None:
    gen = torch.Generator().manual_seed(6)
    for eq in _EQUATIONS:
        c = make_contraction("einsum", {"equation": eq})
        assert c is not None
        for ranks in _einsum_ranks(eq):
            for types in itertools.product(*(_types(r) for r in ranks)):
                if sum(t.kind is Kind.V for t in types) >= 2:
                    _check_block(c, lambda *xs, eq=eq: torch.einsum(eq, *xs), ranks, types, gen)
    for op, (fn, ranks_list) in _MATMULS.items():
        c = make_contraction(op, {})
        assert c is not None
        for ranks in ranks_list:
            for types in itertools.product(*(_types(r) for r in ranks)):
                if all(t.kind is Kind.V for t in types):
                    _check_block(c, fn, ranks, types, gen)
    c = make_contraction("linear", {})
    assert c is not None
    for rx in range(1, 5):
        for rw in (1, 2):
            for types in itertools.product(_types(rx), _types(rw)):
                if all(t.kind is Kind.V for t in types):
                    # statically a sharded weight is read 2-d (a 1-d one's only dim is the
                    # contracted one, no layout a tensor-parallel weight has)
                    _check_block(c, lambda *xs: F.linear(*xs), [rx, rw], types, gen,
                                 static_too=rw == 2)
    for rank in (2, 3, 4):
        c = make_contraction("scaled_dot_product_attention", {})
        assert c is not None
        for types in itertools.product(*(_types(rank) for _ in range(3))):
            if sum(t.kind is Kind.V for t in types) >= 2:
                _check_block(c, _attention(False), [rank] * 3, types, gen, static_too=rank >= 4)
    assert _BLOCKS_CHECKED[0] > 50


_LIN = make_contraction("linear", {})
_MM = make_contraction("matmul", {})
_SDPA = make_contraction("scaled_dot_product_attention", {"is_causal": True})


@pytest.mark.parametrize("c,types,shapes,want", [
    # the probe's cross-attention K projection: sequence-parallel enc_s, column-parallel wk
    (_LIN, [shard(1), shard(0)], ((2, 6, 4), (2, 4)), ((0, 1), (1, 0))),
    (make_contraction("einsum", {"equation": "bsh,oh->bso"}), [shard(1), shard(0)],
     ((2, 6, 4), (2, 4)), ((0, 1), (1, 0))),
    (make_contraction("einsum", {"equation": "bi,bj->bij"}), [shard(0), shard(1)],
     ((2, 3), (2, 4)), ((0, 0), (1, 1))),
    # ring attention's first block of scores, q and k sharded on the sequence
    (_MM, [shard(-2), shard(-1)], ((2, 2, 3, 4), (2, 2, 4, 3)), ((0, -2), (1, -1))),
    # not blocks: one label; a contracted label (a partial sum); the keys summed over
    (make_contraction("einsum", {"equation": "bi,jb->bij"}), [shard(0), shard(1)],
     ((2, 3), (4, 2)), None),
    (_MM, [shard(1), shard(1)], ((2, 2, 3, 4), (2, 2, 4, 3)), None),
    (_MM, [shard(-1), shard(-2)], ((2, 3, 4), (2, 4, 3)), None),
    (_SDPA, [shard(-2)] * 3, ((2, 2, 3, 4),) * 3, None),
    (_LIN, [shard(1), _R], ((2, 6, 4), (4, 4)), None),
    (_LIN, [shard(1), VARYING], ((2, 6, 4), (4, 4)), None),  # plain V: declared on purpose
])
def test_diagonal_block_cases(c, types, shapes, want) -> None:  # noqa: ANN001
    assert c is not None
    assert diagonal_block(c, list(zip(types, shapes))) == want
    assert diagonal_block(c, [(t, None) for t in types]) == want  # the static checker alike


def test_diagonal_block_static_rank_ambiguity() -> None:
    """Statically x: S(1) of F.linear is in_features at rank 2: against a column-parallel
    w: S(0) that reading contracts x's chunk of in_features with w's whole rows, which torch
    refuses, so every reading torch takes is a block.  x @ w of x: S(1), w: S(0) is no block
    at every rank (a 2-d x, a 3-d w: the same label k, a partial sum), so it stays V
    statically; the check mode sees it."""
    assert diagonal_block(_LIN, [(shard(1), None), (shard(0), None)]) == ((0, 1), (1, 0))  # type: ignore[arg-type]
    assert diagonal_block(_MM, [(shard(1), None), (shard(0), None)]) is None  # type: ignore[arg-type]
    assert diagonal_block(_MM, [(shard(1), (2, 6, 4)), (shard(1), (4, 2))]) == ((0, 1), (1, 1))  # type: ignore[arg-type]


def test_matmul_of_unknown_ranks_wrong_at_every_rank() -> None:
    """CLIP's logits with the gather forgotten, ``fi: S(0) @ ft.T: S(-1)`` (probe-contrast,
    session 42): statically a block read 2-d or batched, refused by torch with one side 1-d,
    a dot product over the shard read 1-d.  Undeclared (partial_ok False) that dot product is
    wrong too: a block; declared, it is what the call means: None.  may_sum says the dot
    reading exists, so the adapters look for the declaration."""
    ops = [(shard(0), None), (shard(-1), None)]
    assert diagonal_block(_MM, ops) is None  # type: ignore[arg-type]
    assert diagonal_block(_MM, ops, partial_ok=False) == ((0, 0), (1, -1))  # type: ignore[arg-type]
    assert may_sum(_MM, ops) and not partial_sum(_MM, ops)  # type: ignore[arg-type]
    assert summed_at_ranks(_MM, ops, [1, 1]) and not summed_at_ranks(_MM, ops, [2, 2])  # type: ignore[arg-type]
    # a reading that is right (a batch dim of both: fi 3-d against ft.transpose(0, 1) 4-d)
    assert diagonal_block(_MM, [(shard(0), None), (shard(1), None)], partial_ok=False) is None  # type: ignore[arg-type]
    # the check mode, at 1-d: a dot product (partial_sum's error), no block
    assert diagonal_block(_MM, [(shard(0), (4,)), (shard(-1), (4,))], partial_ok=False) is None  # type: ignore[arg-type]
    assert partial_sum(_MM, [(shard(0), (4,)), (shard(-1), (4,))])  # type: ignore[arg-type]
    t = lambda lt: SpmdType.of({"dp": lt})  # noqa: E731
    res = propagate("matmul", [Operand(t(shard(0)), "fi"), Operand(t(shard(-1)), "ft.T")], move=_MM)
    assert [e.code for e in res.errors] == ["spmd-global"]
    assert "diagonal block" in res.errors[0].message and "read 1-d" in res.errors[0].message
    declared = replace(_MM, partial_axes=("dp",))  # type: ignore[arg-type]
    res = propagate("matmul", [Operand(t(shard(0)), "fi"), Operand(t(shard(-1)), "ft.T")],
                    move=declared)
    assert not res.errors and res.type == t(VARYING)


def test_diagonal_block_error_through_propagate() -> None:
    """Both checkers report the block (spmd-global) with both operands' shard dims, the
    gather of the activation (F.linear's input) and the declared-V form of a block on
    purpose; a plain V operand (so declared) passes as V."""
    t = lambda lt: SpmdType.of({"tp": lt})  # noqa: E731
    for shape_x, shape_w in ((None, None), ((2, 6, 4), (2, 4))):
        res = propagate("linear", [Operand(t(shard(1)), "enc_s", shape=shape_x),
                                   Operand(t(shard(0)), "wk", shape=shape_w)], move=_LIN)
        assert [e.code for e in res.errors] == ["spmd-global"]
        msg = res.errors[0].message
        assert 'shards dim 1 of enc_s (enc_s: Tensor[S[1, "tp"]]) and dim 0 of wk' in msg
        assert 'all_gather(enc_s, "tp", src=S(1), dst=R)' in msg
        assert 'spmd.declare(wk, Tensor[V["tp"]])' in msg
        res = propagate("linear", [Operand(t(shard(1)), "enc_s", shape=shape_x),
                                   Operand(t(VARYING), "wk", shape=shape_w)], move=_LIN)
        assert not res.errors and res.type == t(VARYING)
    # the weight first in an einsum: the leaf (a module's attribute) is not the one gathered
    c = make_contraction("einsum", {"equation": "oh,bsh->bso"})
    res = propagate("einsum", [Operand(t(shard(0)), "self.wk", leaf=True),
                               Operand(t(shard(1)), "enc_s")], move=c)
    assert 'all_gather(enc_s, "tp", src=S(1), dst=R)' in res.errors[0].message


def test_a_partial_contraction_offers_this_ranks_own_value_last() -> None:
    """Session 45: a chunked linear attention's per-rank state, ``einsum("btd,bte->bde", fk,
    v)`` over the cp-sharded sequence, passed to the later ranks (an exclusive scan of the
    ranks' totals) is this rank's own value: the fixes offered (out_partial_axes, then the
    all_reduce) pasted would give every rank the whole's state.  The message ends with the
    operand declared V (which both checkers accept: the probe then matched float64); not
    where the result goes to a typed reduction (move.pending: the sum is meant)."""
    from dataclasses import replace

    t = lambda lt: SpmdType.of({"cp": lt})  # noqa: E731
    c = make_contraction("einsum", {"equation": "btd,bte->bde"})
    ops = [Operand(t(shard(1)), "fk"), Operand(t(shard(1)), "v")]
    msg = propagate("einsum", ops, move=c).errors[0].message
    assert msg.endswith("if this rank's own contraction is meant (a per-rank state or total, as a "
                        "chunked scan passes to the later ranks), declare an operand V first: "
                        'spmd.declare(fk, Tensor[V["cp"]])')
    declared = [Operand(t(LocalType(Kind.V)), "fk"), ops[1]]
    res = propagate("einsum", declared, move=c)
    assert not res.errors and res.type == t(LocalType(Kind.V))
    taken = propagate("einsum", ops, move=replace(c, pending=True, partial_axes=("dp",)))
    assert "this rank's own" not in taken.errors[0].message
