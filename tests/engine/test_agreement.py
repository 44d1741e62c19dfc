"""The engine's rule of what the ranks of an axis must agree on at a collective (the check
mode exchanges each rank's RankCall and raises ``disagreement``'s message; the gloo runs are
tests/runtime/test_agree_world.py)."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.collectives import RankCall, disagreement, free_dim

GATHER = "all_gather(x, 'tp', src=S(1), dst=R)"


def _gather(dtype: str, shape: tuple[int, ...], sizes: tuple[int, ...] | None = None) -> RankCall:
    return RankCall(GATHER, "all_gather", "S", "R", 1, dtype, shape, sizes=sizes)


@pytest.mark.parametrize("op, src, dst, dim, uneven, want", [
    ("all_gather", "S", "R", 1, True, 1),
    ("all_gather", "S", "I", 0, False, None),    # even: every dim agrees
    ("all_gather", "V", "R", None, True, None),  # a stack has no uneven form
    ("all_to_all", "V", "V", None, True, 0),
    ("all_to_all", "V", "V", None, False, None),
    ("reduce_scatter", "P", "S", None, True, None),  # a pending sum: the full shape everywhere
    ("all_reduce", "P", "R", None, False, None),
    ("convert", "S", "P", 2, True, 2),
])
def test_free_dim(op, src, dst, dim, uneven, want):
    assert free_dim(op, src, dst, dim, uneven) == want


def test_agreeing_ranks_give_nothing():
    calls = [_gather("float32", (2, 3), (3, 4)), _gather("float32", (2, 4), (3, 4))]
    assert disagreement(calls, [0, 1], "tp", 0) is None


def test_dtype_names_each_rank_grouped():
    calls = [_gather("float16", (4, 8)), _gather("bfloat16", (4, 8)),
             _gather("float16", (4, 8)), _gather("bfloat16", (4, 8))]
    m = disagreement(calls, [0, 1, 2, 3], "tp", 1)
    assert m is not None
    assert m.startswith(f"{GATHER}: the ranks of axis 'tp' disagree on the dtype: ranks 0 and 2 "
                        f"hold float16[4, 8], ranks 1 and 3 hold bfloat16[4, 8]; "), m
    assert "x.to(torch.float16)" in m


def test_global_ranks_named_with_their_index():
    calls = [_gather("float32", (2, 3)), _gather("float64", (2, 3))]
    m = disagreement(calls, [4, 6], "tp", 0)
    assert m is not None
    assert "rank 4 (index 0 on the axis) holds float32[2, 3], rank 6 (index 1 on the axis)" in m


def test_uneven_shards_without_sizes_get_the_sizes_fix():
    calls = [_gather("float32", (2, 3)), _gather("float32", (2, 5))]
    m = disagreement(calls, [0, 1], "tp", 0)
    assert m is not None and "disagree on the shape" in m
    assert m.endswith("for uneven shards pass sizes=[3, 5] (each rank's length of dim 1, the "
                      "same list on every rank)"), m


def test_sizes_free_only_their_dim():
    calls = [_gather("float32", (2, 3), (3, 4)), _gather("float32", (3, 4), (3, 4))]
    m = disagreement(calls, [0, 1], "tp", 0)
    assert m is not None and "same shape except on dim 1, the uneven dim of sizes=" in m
    assert "for uneven shards" not in m


def test_shard_against_its_entry():
    calls = [_gather("float32", (2, 3), (3, 3)), _gather("float32", (2, 4), (3, 3))]
    m = disagreement(calls, [0, 1], "tp", 0)
    assert m is not None
    assert "sizes=[3, 3] gives the rank of index 1 3 on dim 1, but rank 1 holds float32[2, 4]" in m


def test_sizes_given_on_some_ranks():
    calls = [_gather("float32", (2, 3), (3, 4)), _gather("float32", (2, 4))]
    m = disagreement(calls, [0, 1], "tp", 1)
    assert m is not None
    assert "disagree on sizes=: rank 0 passes sizes=, rank 1 passes none;" in m


def test_all_to_all_sizes_are_each_ranks_own():
    a2a = "all_to_all(x, 'ep', src=V, dst=V)"
    calls = [RankCall(a2a, "all_to_all", "V", "V", None, "float32", (3, 2), sizes=(1, 2)),
             RankCall(a2a, "all_to_all", "V", "V", None, "float32", (5, 2), sizes=(4, 1))]
    assert disagreement(calls, [0, 1], "ep", 0) is None
    calls[1] = RankCall(a2a, "all_to_all", "V", "V", None, "float32", (5, 3), sizes=(4, 1))
    m = disagreement(calls, [0, 1], "ep", 0)
    assert m is not None and "same shape except on dim 0" in m


def test_different_calls_come_first():
    other = RankCall("all_reduce(x, 'tp', src=P, dst=R)", "all_reduce", "P", "R", None,
                     "float64", (9,))
    m = disagreement([_gather("float32", (2, 3)), other], [0, 1], "tp", 0)
    assert m is not None
    assert m.startswith("the ranks of axis 'tp' make different collective calls here: rank 0 "
                        f"calls {GATHER}, rank 1 calls all_reduce(x, 'tp', src=P, dst=R); "), m


def test_shape_names_a_skipped_collective():
    # probe-vlm: a dp rank without images skipped a gradient's all_reduce (`if p.grad is not
    # None`), so its next all_reduce paired another parameter's gradient with the others'
    calls = [_gather("float32", (8, 8)), _gather("float32", (4, 8))]
    m = disagreement(calls, [0, 1], "dp", 0)
    assert m is not None and "disagree on the shape" in m
    assert ("or a rank skipped a collective the others issued (e.g. a parameter without a "
            "gradient on one rank, its all_reduce skipped by `if p.grad is not None`)") in m, m
