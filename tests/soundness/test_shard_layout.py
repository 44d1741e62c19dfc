"""The S(i) layouts the rule soundness suite once found unsound in the engine (issue 7), now
sound: checked with the suite's own comparison on one combination each (the ranks' local
ops computed in process: they issue no communication).

S(i) claims that the concatenation of the ranks' results on dim i is the single-device op on
the concatenated inputs.  The engine keeps S(i) only where that is provable: an elementwise
op whose tensor operands are all S(i) (beside an R or I tensor it gives V), a normalising op
whose dims exclude i.  Each test also shows that the old S(i) claim was wrong, so it fails if
the check could not tell them apart.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spmd_mypy.engine.types import REPLICATE, VARYING, shard  # noqa: E402

from soundness import rules  # noqa: E402


def _verdict(case: str, mesh_name: str, in_types, static: bool = False):
    ok, out, errors = rules.verdict(rules.CASES[case], rules.MESHES[mesh_name], in_types,
                                    static=static)
    assert ok, errors
    return out


def _check(case: str, mesh_name: str, in_types, claim) -> str | None:
    """None if the ranks' results mean what ``claim`` (per axis) says."""
    mesh = rules.MESHES[mesh_name]
    task = rules.Task(mesh_name, case, tuple(in_types), (), True, tuple(claim), ())
    outs = {c: rules.run_forward(task, 0, c)[1].detach() for c in mesh.coords()}
    return rules.check_forward(task, 0, tuple(claim), outs)


def test_shard_beside_a_replicate_operand_is_varying() -> None:
    """``x: S(0)`` plus a full-size R ``y``: each rank adds all of ``y`` to its chunk, so
    cat(x_r + y) is not cat(x_r) + y; the result is V (each rank's value is right)."""
    ins = [(shard(0),), (REPLICATE,)]
    for static in (False, True):
        assert _verdict("add", "a2", ins, static) == (VARYING,)
        assert _verdict("mul", "a2", ins, static) == (VARYING,)
    assert _check("add", "a2", ins, (VARYING,)) is None
    msg = _check("add", "a2", ins, (shard(0),))
    assert msg is not None and msg.startswith(rules.S_LAYOUT), msg


def test_shard_with_shard_scalar_and_unary_keep_it() -> None:
    for case, ins in (("add", [(shard(0),), (shard(0),)]), ("mul", [(shard(1),), (shard(1),)]),
                      ("add scalar", [(shard(0),)]), ("div scalar", [(shard(1),)]),
                      ("exp", [(shard(0),)]), ("neg", [(shard(1),)])):
        out = _verdict(case, "a2", ins)
        assert out == ins[0] and _verdict(case, "a2", ins, static=True) == out, case
        assert _check(case, "a2", ins, out) is None, case


def test_broadcast_shard_operand() -> None:
    """S(0) [2, 3] + S(0) [1, 3]: the globals (4 rows, 2 rows) do not fit; the check mode
    (shapes known) gives V, the static checker keeps S(0) (an S(i) claim about a program
    that has no single-device form)."""
    ins = [(shard(0),), (shard(0),)]
    assert _verdict("add bcast", "a2", ins) == (VARYING,)
    assert _verdict("add bcast", "a2", ins, static=True) == (shard(0),)
    assert _check("add bcast", "a2", ins, (VARYING,)) is None
    msg = _check("add bcast", "a2", ins, (shard(0),))
    assert msg is not None and rules.NO_GLOBAL_PROGRAM in msg, msg
    # on the other dim the broadcast is along dim 0, and S(1) holds
    ins1 = [(shard(1),), (shard(1),)]
    assert _verdict("add bcast", "a2", ins1) == (shard(1),)
    assert _check("add bcast", "a2", ins1, (shard(1),)) is None


def test_softmax_over_the_sharded_dim_is_varying() -> None:
    """softmax(-1) of ``x: S(1)`` (columns sharded): each rank normalises its own columns.
    V describes that, the S(1) claim does not; since session 45 the check mode rejects the
    softmax itself (ops.normalised_along_shard_error: a typed V was claimed S(1) again)."""
    ins = [(shard(1),)]
    ok, _, errors = rules.verdict(rules.CASES["softmax(-1)"], rules.MESHES["a2"], ins)
    assert not ok and errors and all("normalises the dim sharded on" in e for e in errors), errors
    assert _check("softmax(-1)", "a2", ins, (VARYING,)) is None
    msg = _check("softmax(-1)", "a2", ins, (shard(1),))
    assert msg is not None and msg.startswith(rules.S_LAYOUT), msg


def test_softmax_and_layer_norm_off_the_sharded_dim_keep_it() -> None:
    """Rows sharded, normalised along the row: S(0) holds.  Statically -1 and 0 have
    different signs (equal for a 1-d tensor): S(0) from rank 2, V at rank 1 (the check mode
    knows the rank)."""
    for case in ("softmax(-1)", "layer_norm"):
        ins = [(shard(0),)]
        assert _verdict(case, "a2", ins) == (shard(0),), case
        (static,) = _verdict(case, "a2", ins, static=True)  # type: ignore[misc]
        assert static.by_rank == ((1, None), (2, 0)), case
        assert _check(case, "a2", ins, (shard(0),)) is None, case
    assert _verdict("log_softmax(1)", "a2", [(shard(0),)], static=True) == (shard(0),)
    assert _check("log_softmax(1)", "a2", [(shard(0),)], (shard(0),)) is None
    ins = [(shard(0),), (REPLICATE,), (REPLICATE,)]  # weight and bias along the normalised dim
    assert _verdict("layer_norm w b", "a2", ins) == (shard(0),)
    assert _check("layer_norm w b", "a2", ins, (shard(0),)) is None
