"""Collectives across folded meshes (the check mode's rank layouts; docs/meshes.md): the
messages of a collective on data several ranks of its group hold alike (R/I on another
mesh's axis) and of a sum of different blocks (S on another mesh's axis), and which ops are
right on such data."""

from __future__ import annotations

from spmd_mypy.engine.collectives import (duplicated_operand_error, duplicates_harmless,
                                          summed_blocks_error, sums_blocks)
from spmd_mypy.engine.types import INVARIANT, VARYING, LocalType, Kind, SpmdType


def _t(**axes: LocalType) -> SpmdType:
    return SpmdType.of(axes)


def test_which_ops_are_right_on_duplicates() -> None:
    assert duplicates_harmless("convert") and duplicates_harmless("reinterpret")
    assert duplicates_harmless("all_reduce", "max") and duplicates_harmless("all_reduce", "min")
    for op in ("all_to_all", "all_gather", "reduce_scatter"):
        assert not duplicates_harmless(op)
    assert not duplicates_harmless("all_reduce", "sum") and not duplicates_harmless("all_reduce", "avg")
    assert sums_blocks("all_reduce") and sums_blocks("reduce_scatter", "avg")
    assert not sums_blocks("all_reduce", "max") and not sums_blocks("all_to_all")


def test_dispatch_of_a_tp_invariant_value() -> None:
    t = _t(tp=INVARIANT, dp=VARYING)
    e = duplicated_operand_error("all_to_all", "h", t, ("ep",), ("tp",), [2, 3], [0, 1, 2, 3],
                                 ("dp", "tp"), ("ep",))
    assert e.code == "spmd-mesh"
    assert e.message.startswith(
        'all_to_all over "ep" on duplicated data: h (Tensor[I["tp"], V["dp"]]) is I on "tp" of the '
        'mesh with axes "dp" and "tp": ranks [2, 3] hold the same value; but "ep"\'s group here '
        '(the mesh with axes "ep"), ranks [0, 1, 2, 3], holds ranks [2, 3] of them'), e.message
    assert 'h = spmd.convert(h, "tp", src=I, dst=S(0)) (or dst=V)' in e.message
    assert "reduce over an axis" not in e.message  # not a sum
    s = duplicated_operand_error("all_reduce", "loss", t, ("ep",), ("tp",), [0, 1], [0, 1, 2, 3],
                                 ("dp", "tp"), ("ep",))
    assert "sums it once per such rank" in s.message
    assert "reduce over an axis whose group holds one rank of each such group" in s.message


def test_summed_blocks_names_the_expert_data_parallel_axis() -> None:
    t = _t(ep=LocalType(Kind.V, 0))
    e = summed_blocks_error("all_reduce", "g", t, ("dp",), ("ep",), [0, 2], [0, 2],
                            ("ep", "edp"), ("dp", "tp"))
    assert e.code == "spmd-mesh"
    assert e.message.startswith('all_reduce over "dp" sums different blocks: g (Tensor[S[0, "ep"]]) '
                                'is S(0) on "ep" of the mesh with axes "ep" and "edp"'), e.message
    assert 'under the mesh with axes "ep" and "edp" (with spmd.set_mesh(<that mesh>):), over "edp"' in e.message
    whole = summed_blocks_error("all_reduce", "g", t, ("dp",), ("ep",), [0, 1, 2, 3], [0, 2],
                                ("ep",), ("dp", "tp"))
    assert "it needs no reduction" in whole.message
