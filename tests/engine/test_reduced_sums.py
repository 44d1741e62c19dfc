"""Sums over a sharded dim (engine ops.reduced_partial_error): each rank's sum is its part of a
sum over the ranks, the same pending rule as a contraction's (session 38: SAM's gradient norm
``sqrt((g1 * g1).sum() + (g2 * g2).sum())`` of tp-sharded gradients and DP-SGD's per-sample
norms passed both checkers with wrong numbers)."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.ops import (Operand, Reduction, check_backward, partial_op, propagate,
                                  removes_shard_dim)
from spmd_mypy.engine.types import Kind, LocalType, SpmdType

S0 = SpmdType.of({"tp": LocalType(Kind.V, 0)})
S1 = SpmdType.of({"tp": LocalType(Kind.V, 1)})
SM1 = SpmdType.of({"tp": LocalType(Kind.V, -1)})
V = SpmdType.of({"tp": LocalType(Kind.V)})
FULL = Reduction(None)


def _codes(name: str, t: SpmdType, red: Reduction, text: str = "g", shape=None) -> list[str]:
    return [e.code for e in propagate(name, [Operand(t, text, shape=shape)], reduction=red).errors]


@pytest.mark.parametrize("name", ["sum", "nansum", "mean", "nanmean", "norm", "linalg_vector_norm"])
def test_a_full_reduction_of_a_shard_is_an_error(name: str) -> None:
    assert _codes(name, S0, FULL) == ["spmd-global"]
    assert _codes(name, S0, FULL, shape=(4, 3)) == ["spmd-global"]  # the check mode


@pytest.mark.parametrize("t,dims,expected", [
    (S1, (1,), True), (SM1, (-1,), True), (S0, (1,), False), (S1, (0,), False),
    (SM1, (1,), False),  # rank 2 only: not at every rank the operand can have
    (S0, (0, 1), True), (V, (0,), False),
])
def test_which_dims_remove_the_shard(t: SpmdType, dims: tuple[int, ...], expected: bool) -> None:
    assert removes_shard_dim(t.get("tp"), Reduction(dims)) is expected
    assert (_codes("sum", t, Reduction(dims)) == ["spmd-global"]) is expected


def test_scans_and_max_are_not_concerned() -> None:
    # (a scan along the shard dim has its own rule: tests/engine/test_scans_along_shard.py)
    assert _codes("cumsum", S1, Reduction((0,))) == []
    assert _codes("amax", S1, Reduction((1,))) == []
    assert _codes("logsumexp", S1, Reduction((1,))) == []
    assert _codes("sum", V, FULL) == []  # a plain V: this rank's own value (gradual)


def test_declared_sums_are_accepted_but_never_a_norm() -> None:
    declared = Reduction(None, partial_axes=("tp",))
    assert _codes("sum", S0, declared) == []
    assert _codes("mean", S0, Reduction(None, partial_axes=("*",))) == []
    assert _codes("norm", S0, declared) == ["spmd-global"]
    res = partial_op("sum", [Operand(S0, "g * g")], ["tp"], reduction=FULL)
    assert res.errors == [] and res.type.get("tp") == LocalType(Kind.P)


def test_the_messages_give_the_fix_pasted() -> None:
    err = propagate("sum", [Operand(S0, "(g1 * g1)")], reduction=FULL).errors[0]
    assert ('spmd.all_reduce(spmd.sum(g1 * g1, out_partial_axes="tp"), "tp", src=P, dst=R)'
            in err.message)
    err = propagate("norm", [Operand(S1, "g")], reduction=Reduction((1,))).errors[0]
    assert ('torch.sqrt(spmd.all_reduce(spmd.sum(g * g, 1, out_partial_axes="tp"), "tp", '
            'src=P, dst=R))' in err.message)
    assert "norm of this rank's block" in err.message
    err = propagate("mean", [Operand(SM1, "x")], reduction=Reduction((-1,))).errors[0]
    assert "/ n" in err.message and "reinterpret" not in err.message


def test_autograd_grad_of_a_varying_loss_offers_the_replica_copy_first() -> None:
    # MAML over dp: differentiating each rank's own loss w.r.t. its own copy of an R weight
    loss = Operand(SpmdType.of({"dp": LocalType(Kind.V), "tp": LocalType(Kind.I)}), "inner")
    w1 = Operand(SpmdType.of({"dp": LocalType(Kind.R), "tp": LocalType(Kind.V, 0)}), "w1")
    (err,) = check_backward(loss, inputs=[w1])
    msg = err.message
    first = msg.index('w1_v = spmd.reinterpret(w1, "dp", src=R, dst=V)')
    assert first < msg.index('reinterpret(inner, "dp", src=V, dst=P)')
    (plain,) = check_backward(loss)  # loss.backward(): no inputs, the message as before
    assert "w1_v" not in plain.message
