"""A local bincount of an index sharded on an axis (engine ops.SEGMENT_SUMS, the pending rule of
ops.reduced_partial_error): each rank counts its own block, its part of the counts over the
ranks.  Session 45's GNN probe: node degrees from an edge list sharded over the ranks, never
summed, then rsqrt-normalised: 1.15 off on 2 gloo ranks (1.98 on 4), accepted by both checkers."""

from __future__ import annotations

from spmd_mypy.engine.ops import Operand, Reduction, propagate
from spmd_mypy.engine.types import Kind, LocalType, SpmdType

S0 = SpmdType.of({"dp": LocalType(Kind.V, 0)})
V = SpmdType.of({"dp": LocalType(Kind.V)})
R = SpmdType.of({"dp": LocalType(Kind.R)})


def test_a_count_of_a_sharded_index_is_pending() -> None:
    errs = propagate("bincount", [Operand(S0, "dst")]).errors
    assert [e.code for e in errs] == ["spmd-global"]
    msg = errs[0].message
    assert msg.startswith('bincount of dst (S(0) on "dp") counts this rank\'s block')
    assert ('spmd.all_reduce(spmd.reinterpret(torch.bincount(dst, minlength=n), "dp", src=V, '
            'dst=P), "dp", src=P, dst=R)') in msg
    assert 'spmd.declare(dst, Tensor[V["dp"]])' in msg
    assert [e.code for e in propagate("bincount", [Operand(S0, "dst", shape=(6,))]).errors] == [
        "spmd-global"]  # the check mode


def test_declared_or_unsharded_counts_are_accepted() -> None:
    declared = propagate("bincount", [Operand(S0, "dst")], reduction=Reduction(None, partial_axes=("dp",)))
    assert declared.errors == []
    assert propagate("bincount", [Operand(V, "ids")]).errors == []  # this rank's own (declared V)
    assert propagate("bincount", [Operand(R, "ids")]).type.get("dp") == LocalType(Kind.R)
