"""``types.refines``: every value of one type is a value of the other (an inferred variable
accepts such a value; plugin boundaries)."""

from __future__ import annotations

import itertools

from spmd_mypy.engine.types import (VARYING, Kind, LocalType, SpmdType, from_ranks, refines,
                                    refines_as_printed, shard)

LOCALS = [LocalType(Kind.R), LocalType(Kind.I), LocalType(Kind.P), VARYING, shard(0), shard(1),
          shard(-1), from_ranks({1: None, 2: 0})]


def _values(lt: LocalType) -> set[str]:
    """What a local type says of the value, as a set of facts: kind and, for S(i), the dim."""
    return {lt.kind.name} | ({f"dim{lt.dim}"} if lt.dim is not None else set())


def test_a_type_refines_another_exactly_when_it_states_more():
    for h, w in itertools.product(LOCALS, LOCALS):
        have, want = SpmdType.of({"tp": h}), SpmdType.of({"tp": w})
        expected = h == w or (w == VARYING and h.kind is Kind.V)
        assert refines(have, want) is expected, (h, w)
        if expected:
            assert _values(w) <= _values(h)


def test_every_axis_must_refine_and_the_axes_agree():
    s0v = SpmdType.of({"dp": shard(0), "tp": LocalType(Kind.I)})
    vv = SpmdType.of({"dp": VARYING, "tp": LocalType(Kind.I)})
    vr = SpmdType.of({"dp": VARYING, "tp": LocalType(Kind.R)})
    assert refines(s0v, vv) and not refines(vv, s0v)
    assert not refines(s0v, vr)
    assert not refines(SpmdType.of({"dp": shard(0)}), vv)  # an axis missing
    assert not refines(s0v, SpmdType.of({"dp": VARYING, "cp": LocalType(Kind.I)}))
    assert not refines(SpmdType.of({"dp": shard(0)}, failed=("tp",)), SpmdType.of({"dp": VARYING}))


def test_as_printed_a_rank_dependent_layout_takes_any_v_and_nothing_else():
    """A variable inferred with a rank-dependent layout prints V: a V of any layout fits it as
    printed (a probe's ``tok = torch.where(done, 3, tok)``); another kind does not, and a type
    without such a layout is left to ``refines``."""
    ranked = from_ranks({1: None, 2: 1})
    want = SpmdType.of({"tp": ranked, "dp": LocalType(Kind.R)})
    assert want.as_printed() == SpmdType.of({"tp": VARYING, "dp": LocalType(Kind.R)})
    for h in LOCALS:
        have = SpmdType.of({"tp": h, "dp": LocalType(Kind.R)})
        assert refines_as_printed(have, want) is (h.kind is Kind.V), h
    assert not refines_as_printed(SpmdType.of({"tp": VARYING, "dp": LocalType(Kind.I)}), want)
    plain = SpmdType.of({"tp": shard(0)})
    assert plain.as_printed() is plain
    assert not refines_as_printed(SpmdType.of({"tp": VARYING}), plain)  # a claim stays mypy's
