"""Layouts that depend on the rank the static checker does not know (engine ``_result_layout``).

The static checker works a layout out at every rank and keeps the table; the check mode
sees the rank.  Exhaustively over small dims, the table at each rank must be exactly the
check mode's layout at that rank, and a claim is refused only when every rank it allows
contradicts the table.
"""

from __future__ import annotations

import itertools

import pytest

from spmd_mypy.engine.ops import Operand, Reduction, normalising_reduction, propagate
from spmd_mypy.engine.types import (
    VARYING, Kind, LocalType, SpmdType, decode_by_rank, encode_by_rank, from_ranks, shard,
    shard_dims_match,
)

DIMS = range(-3, 3)
# the ops that are an error along the shard dim (the scans', the normalisations' rule)
_ALONG_SHARD_ERRORS = ("cumsum", "softmax", "log_softmax")


def _one(lt: LocalType) -> SpmdType:
    return SpmdType.of({"tp": lt})


def _ops() -> list[tuple[str, tuple[int, ...], bool]]:
    out = []
    for k in (1, 2):
        for dims in itertools.combinations(DIMS, k):
            for keep in (False, True):
                out += [("sum", dims, keep), ("amax", dims, keep)]
    for d in DIMS:
        out += [("softmax", (d,), True), ("cumsum", (d,), True), ("log_softmax", (d,), True)]
    return out


def _reduction(name: str, dims: tuple[int, ...], keep: bool, ndim: int | None) -> Reduction:
    if name in ("softmax", "log_softmax"):
        r = normalising_reduction(name, dims[0], ndim)
        assert r is not None
        return r
    # the layout only: a sum over the shard dim is a pending partial sum (an error unless
    # declared, ops.reduced_partial_error, tested in tests/engine/test_reduced_sums.py):
    # declared here, as spmd.sum(..., out_partial_axes=) does
    return Reduction(dims, keep, ndim, partial_axes=("*",))


@pytest.mark.parametrize("name,dims,keep", _ops())
@pytest.mark.parametrize("shard_dim", DIMS)
def test_static_table_is_the_check_modes_layout_at_every_rank(name, dims, keep, shard_dim) -> None:
    static = propagate(name, [Operand(_one(shard(shard_dim)), "x")],
                       reduction=_reduction(name, dims, keep, None))
    if name in _ALONG_SHARD_ERRORS and static.errors:
        # a scan along the shard dim at every rank (ops.scan_along_shard_error, its own tests in
        # tests/engine/test_scans_along_shard.py), a softmax's (ops.normalised_along_shard_error,
        # tests/engine/test_normalising_along_shard.py): the check mode reports it at every rank too
        assert [e.code for e in static.errors] == ["spmd-global"]
        for rank in range(1, 7):
            if -rank <= shard_dim < rank and -rank <= dims[0] < rank:
                checked = propagate(name, [Operand(_one(shard(shard_dim)), "x", shape=(3,) * rank)],
                                    reduction=_reduction(name, dims, keep, rank))
                assert [e.code for e in checked.errors] == ["spmd-global"], rank
        return
    assert not static.errors
    st = static.type.get("tp")
    assert st is not None and st.kind is Kind.V
    for rank in range(1, 7):
        if not -rank <= shard_dim < rank or any(not -rank <= d < rank for d in dims):
            continue
        if len({d % rank for d in dims}) < len(dims):
            continue  # the same dim twice: torch refuses the call
        checked = propagate(name, [Operand(_one(shard(shard_dim)), "x", shape=(3,) * rank)],
                            reduction=_reduction(name, dims, keep, rank))
        if name in _ALONG_SHARD_ERRORS and checked.errors:
            # along the shard dim at this rank only: the static table says V there
            assert st.at_rank(rank) == (True, None), (dims, shard_dim, rank, st.layouts())
            continue
        ct = checked.type.get("tp")
        assert ct is not None
        reduces = name in ("sum", "amax") and not keep
        out_rank = rank - len({d % rank for d in dims}) if reduces else rank
        if out_rank == 0:
            continue  # a scalar has no shard dim to claim
        possible, d = st.at_rank(out_rank)
        assert possible, (st, out_rank)
        assert d == ct.dim, (name, dims, keep, shard_dim, rank, st.layouts(), ct)


def test_claims_are_refused_only_where_every_allowed_rank_contradicts() -> None:
    table = LocalType(Kind.V, by_rank=((1, None), (2, 0)))  # S(0) from rank 2, V at rank 1
    assert shard_dims_match(table, shard(0))
    assert shard_dims_match(table, VARYING)
    assert shard_dims_match(table, shard(-1))  # rank 1 allows it (V there)
    assert not shard_dims_match(table, shard(1))  # S(1) needs rank >= 2: S(0) there
    assert not shard_dims_match(table, shard(-2))  # likewise (raw dims, as for S(0) vs S(-2))
    assert not shard_dims_match(table, LocalType(Kind.R))
    gap = LocalType(Kind.V, by_rank=((2, 1), (3, None), (4, 1)))
    assert shard_dims_match(gap, shard(2))  # rank 3 is V
    assert shard_dims_match(gap, shard(0)) and shard_dims_match(gap, shard(1))
    mixed = LocalType(Kind.V, by_rank=((2, 1), (3, 0), (4, 1)))
    assert shard_dims_match(mixed, shard(0))  # rank 3
    assert not shard_dims_match(mixed, shard(2))  # ranks 3 and up: S(0) or S(1)


def test_from_ranks_folds_agreeing_ranks_and_trailing_repeats() -> None:
    assert from_ranks({}) == VARYING
    assert from_ranks({2: 0, 3: 0}) == shard(0)
    assert from_ranks({1: None, 2: None}) == VARYING
    t = from_ranks({1: None, 2: 0, 3: 0, 4: 0})
    assert t.by_rank == ((1, None), (2, 0))
    assert t.forget_dim() == VARYING and str(t) == "V"
    assert t.describe() == "V (S(0) at rank >= 2, V at rank 1)"


def test_the_table_round_trips_as_text() -> None:
    t = from_ranks({2: 1, 3: None, 4: 1, 5: 1})
    text = encode_by_rank(t.by_rank)  # type: ignore[arg-type]
    assert text == "2:1,3:-,4:1"
    assert decode_by_rank(text) == t
    for bad in ("", "x", "1:0,1:0", "2:0,1:-", "0:1", "1:a"):
        assert decode_by_rank(bad) is None


def test_elementwise_ops_carry_the_table_rank_by_rank() -> None:
    soft = propagate("softmax", [Operand(_one(shard(0)), "x")],
                     reduction=normalising_reduction("softmax", -1)).type
    both = propagate("mul", [Operand(soft, "a"), Operand(_one(shard(0)), "b")]).type.get("tp")
    assert both is not None and both.by_rank == ((1, None), (2, 0))
    other = propagate("mul", [Operand(soft, "a"), Operand(_one(shard(1)), "b")]).type.get("tp")
    assert other == VARYING  # S(0) beside S(1) at every rank >= 2


def test_a_rank_dependent_layout_gets_the_one_rank_hint_where_it_holds() -> None:
    """collectives.same_dim_at_one_rank: ``V (S(-1) at rank >= 2, V at rank 1)`` (a flip along
    dim 0 of ``x.t()``) where S(1) is needed is S(1) at rank 2, as a plain S(-1) is; a table
    whose layout at that rank is another one gets no hint."""
    from spmd_mypy.engine.collectives import same_dim_at_one_rank

    plain = same_dim_at_one_rank(shard(-1), shard(1))
    assert "same dim only of a 2-dim tensor" in plain
    flipped = LocalType(Kind.V, by_rank=((1, None), (2, -1)))
    assert same_dim_at_one_rank(flipped, shard(1)) == plain
    # S(-1) from rank 3 only (V at ranks 1 and 2): at rank 2 it is not S(1)
    late = LocalType(Kind.V, by_rank=((1, None), (2, None), (3, -1)))
    assert same_dim_at_one_rank(late, shard(1)) == ""
    assert same_dim_at_one_rank(LocalType(Kind.V, by_rank=((1, None), (2, 0))), shard(1)) == ""


def test_the_stated_rank_is_the_first_global_types_and_reads_a_layout_at_it() -> None:
    from spmd_mypy.engine.types import at_stated_rank, stated_rank

    local = SpmdType.of({"tp": shard(-1)})
    two = SpmdType.of({"tp": shard(1)}, ((), ("tp",)))
    three = SpmdType.of({"tp": shard(2)}, ((), (), ("tp",)))
    assert stated_rank(local) is None
    assert stated_rank(local, two) == 2
    assert stated_rank(three, two) == 3
    assert at_stated_rank(shard(-1), 2) == " (S(1) at the rank 2 the spec states)"
    assert at_stated_rank(shard(-1), 3, "src") == " (S(2) at the rank 3 src states)"
    assert at_stated_rank(shard(1), 2) == ""  # reads as written
    assert at_stated_rank(shard(2), 2) == " (beyond the rank 2 the spec states)"
    assert at_stated_rank(VARYING, 2) == "" and at_stated_rank(shard(-1), None) == ""
    by_rank = from_ranks({1: None, 2: 0, 3: 0})
    assert at_stated_rank(by_rank, 1) == " (V at the rank 1 the spec states)"
