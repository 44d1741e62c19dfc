"""Unsound S(i) layouts the rule soundness suite found in the engine (issue 7).

The local SPMD rule is sound for these (the result is Varying, and each rank computes its
own element correctly), but the engine also claims the result is S(i): that the
concatenation of the ranks' results is the single-device op on the concatenated inputs.
These tests run the suite's own check on one counterexample each (the ranks' local ops
computed in process: they issue no communication) and fail while the engine keeps the
wrong S(i).  ``strict``: fixing the engine makes them pass, and then the xfail must go.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spmd_mypy.engine.types import REPLICATE, shard  # noqa: E402

from soundness import rules  # noqa: E402


def _check(case: str, mesh_name: str, in_types) -> str | None:
    mesh = rules.MESHES[mesh_name]
    ok, out, errors = rules.verdict(rules.CASES[case], mesh, in_types)
    assert ok, errors
    task = rules.Task(mesh_name, case, tuple(in_types), (), ok, out, ())
    outs = {c: rules.run_forward(task, 0, c)[1].detach() for c in mesh.coords()}
    return rules.check_forward(task, 0, out, outs)


@pytest.mark.xfail(strict=True, reason="engine keeps S(i) beside an R operand (no shapes)")
def test_shard_kept_beside_a_replicate_operand() -> None:
    """``x: S(0)`` (rows sharded) plus a full-size R ``y``: each rank adds all of ``y`` to
    its chunk; the engine types the result S(0), but cat(x_r + y) is not cat(x_r) + y
    (which has no meaning: 4 rows plus 2).  With a broadcast ``y`` of one row it is."""
    msg = _check("add", "a2", [(shard(0),), (REPLICATE,)])
    assert msg is None, msg


@pytest.mark.xfail(strict=True, reason="engine keeps S(i) through softmax on the sharded dim")
def test_shard_kept_through_softmax_on_the_sharded_dim() -> None:
    """softmax(-1) of ``x: S(1)`` (columns sharded): each rank normalises its own columns,
    so the concatenation is not the softmax of the global rows; the engine says S(1)."""
    msg = _check("softmax(-1)", "a2", [(shard(1),)])
    assert msg is None, msg


def test_the_same_ops_are_right_where_the_layout_allows_it() -> None:
    """The controls: a broadcast R row beside S(0), softmax(-1) of a row-sharded S(0)."""
    assert _check("add bcast", "a2", [(shard(0),), (REPLICATE,)]) is None
    assert _check("softmax(-1)", "a2", [(shard(0),)]) is None
