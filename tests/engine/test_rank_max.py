"""A V value that is (or is computed from) this rank's max, where R is needed: the fix the
engine offers is the max over the ranks (op="max"), never the sum (engine
collectives.suggest / max_reduction / RankMax; both checkers' collective check)."""

from __future__ import annotations

from spmd_mypy.engine.collectives import RankMax, check_collective, max_reduction, suggest
from spmd_mypy.engine.types import REPLICATE, VARYING, Kind, LocalType, SpmdType, shard


def test_max_reduction_reads_through_meaning_keeping_ops() -> None:
    assert max_reduction("w.detach().abs().amax()") == "max"
    assert max_reduction("torch.amax(x, 1).float()") == "max"
    assert max_reduction("x.min()") == "min"
    assert max_reduction("x.sum()") is None
    assert max_reduction("x.amax().sqrt()") is None
    assert max_reduction("scale") is None


def test_a_value_from_a_rank_max_is_not_summed() -> None:
    m = RankMax("amax", "max", "w.detach().abs().amax()", True)
    msg = suggest(VARYING, REPLICATE, "scale", "tp", m)
    assert "to sum them" not in msg
    assert 'amax = all_reduce(amax, "tp", src=V, dst=R, op="max")' in msg
    # without it the qualified sum stays
    assert "to sum them" in suggest(VARYING, REPLICATE, "scale", "tp")


def test_a_rank_max_with_a_gradient_is_detached() -> None:
    m = RankMax("a", "max", "w.abs().amax()", False)
    assert 'all_reduce(a.detach(), "tp", src=V, dst=R, op="max")' in suggest(VARYING, REPLICATE, "a", "tp", m)


def test_src_P_with_op_max_keeps_the_op() -> None:
    x = SpmdType((("tp", VARYING),))
    res = check_collective("all_reduce", x, ["tp"], LocalType(Kind.P), REPLICATE, reduce_op="max",
                           x_text="a", can_grad=False)
    mismatch = [e for e in res.errors if e.code == "spmd-src-mismatch"]
    assert len(mismatch) == 1
    assert 'pass src=V: all_reduce(a, "tp", src=V, dst=R, op="max")' in mismatch[0].message


def _mismatch(x: SpmdType, src: LocalType, dst: LocalType) -> str:
    res = check_collective("all_reduce", x, ["dp", "ep"], src, dst, reduce_op="max",
                           x_text="x", can_grad=False)
    (mismatch,) = [e.message for e in res.errors if e.code == "spmd-src-mismatch"]
    return mismatch


def test_dropping_an_axis_is_offered_only_where_the_kept_call_adds_no_error() -> None:
    """A flattened max all_reduce over an axis where x is not src: "drop the axis" is offered
    when the call over the other axes reports nothing new (collectives._adds_no_error)."""
    s0, p = shard(0), LocalType(Kind.P)
    # R on "dp": the max over "ep" alone is the fix
    assert 'drop "dp" from the axes (all_reduce(x, "ep", src=S(0), dst=R, op="max"))' in _mismatch(
        SpmdType.of({"dp": REPLICATE, "ep": s0}), s0, REPLICATE)
    # P on "dp": the max over "ep" alone takes the max of the dp summands (a new error)
    assert "drop" not in _mismatch(SpmdType.of({"dp": p, "ep": s0}), s0, REPLICATE)
    # P on "tp", outside the call: the kept call's error on "tp" is the whole call's, reported
    # already; the drop is still the fix for "dp"
    assert 'drop "dp" from the axes' in _mismatch(
        SpmdType.of({"dp": REPLICATE, "ep": s0, "tp": p}), s0, REPLICATE)
