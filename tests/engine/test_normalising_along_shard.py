"""A normalising op along the dim an operand is sharded on (engine
ops.normalised_along_shard_error): softmax, log_softmax, softmin, normalize along ``dim``,
layer_norm and rms_norm over the trailing ``normalized_shape`` compute their statistics (a
softmax's max and sum of exponentials, a layer norm's mean and variance) over this rank's block
only.  Typed V and claimed S(i) again, a softmax over a vocab- or sequence-sharded last dim passed
both checkers; along an unsharded dim (Megatron's LayerNorm over the hidden dim of a
sequence-parallel S(0) activation) nothing changes."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.ops import (
    NORMALISING_DEFAULTS, Operand, Reduction, normalising_reduction, propagate,
)
from spmd_mypy.engine.types import Kind, LocalType, SpmdType

S0 = SpmdType.of({"tp": LocalType(Kind.V, 0)})
S1 = SpmdType.of({"tp": LocalType(Kind.V, 1)})
SM1 = SpmdType.of({"tp": LocalType(Kind.V, -1)})
SM2 = SpmdType.of({"tp": LocalType(Kind.V, -2)})
V = SpmdType.of({"tp": LocalType(Kind.V)})
R = SpmdType.of({"tp": LocalType(Kind.R)})


def _res(name: str, t: SpmdType, value: object, shape=None, extra=()):
    ndim = len(shape) if shape is not None else None
    r = normalising_reduction(name, value, ndim)
    assert r is not None
    return propagate(name, [Operand(t, "x", shape=shape), *extra], reduction=r)


@pytest.mark.parametrize("name,t,value", [
    ("softmax", S1, 1), ("log_softmax", SM1, -1), ("softmin", S1, 1), ("normalize", S1, 1),
    ("layer_norm", SM1, (4,)), ("rms_norm", SM1, [4]), ("layer_norm", SM2, (3, 4)),
    ("softmax", S1, (1,)),
])
def test_normalising_the_shard_dim_is_an_error(name: str, t: SpmdType, value: object) -> None:
    errs = _res(name, t, value).errors
    assert [e.code for e in errs] == ["spmd-global"]
    m = errs[0].message
    assert f"{name} " in m and 'of x (Tensor[S[' in m and 'normalises the dim sharded on "tp"' in m
    assert "per-rank statistics" in m
    assert 'spmd.all_gather(x, "tp", src=S(' in m and "spmd.all_to_all(x" in m
    assert 'spmd.declare(x, Tensor[V["tp"]])' in m


def test_the_softmax_offers_the_vocab_parallel_form() -> None:
    m = _res("log_softmax", SM1, -1).errors[0].message
    assert 'm = spmd.all_reduce(x.detach().amax(-1), "tp", src=V, dst=R, op="max")' in m
    assert "then s - z.log().unsqueeze(-1)" in m


def test_the_check_mode_reads_the_rank() -> None:
    # softmax(-1) of S(1): the shard dim at rank 2 only; statically left to the check mode
    assert _res("softmax", S1, -1).errors == []
    assert [e.code for e in _res("softmax", S1, -1, shape=(4, 8)).errors] == ["spmd-global"]
    assert _res("softmax", S1, -1, shape=(2, 4, 8)).errors == []
    assert [e.code for e in _res("layer_norm", S0, (4,), shape=(4,)).errors] == ["spmd-global"]


@pytest.mark.parametrize("name,t,value,shape", [
    ("softmax", S1, 2, None),                  # another dim: keeps S(1)
    ("softmax", S0, 1, None),
    ("layer_norm", S0, (4,), None),            # Megatron's sequence-parallel LayerNorm
    ("layer_norm", S0, (4,), (8, 2, 4)),
    ("rms_norm", SM2, (4,), None),
    ("normalize", S0, 1, None),
    ("softmax", V, 1, None),                   # a plain V (declared so: this rank's own)
    ("layer_norm", V, (4,), None),
])
def test_other_dims_are_accepted(name: str, t: SpmdType, value: object, shape) -> None:
    assert _res(name, t, value, shape).errors == []


def test_an_unsharded_dim_keeps_the_layout() -> None:
    assert _res("softmax", S1, 2).type.get("tp") == LocalType(Kind.V, 1)
    w = Operand(R, "w")
    assert _res("layer_norm", S0, (4,), shape=(8, 2, 4), extra=(w,)).type.get("tp") == LocalType(Kind.V, 0)


def test_normalize_defaults_to_dim_1() -> None:
    assert NORMALISING_DEFAULTS["normalize"] == 1
    assert [e.code for e in _res("normalize", S1, NORMALISING_DEFAULTS["normalize"]).errors] == ["spmd-global"]


def test_group_norm_and_batch_norm_are_left_alone() -> None:
    # their statistics' dims are not read by this rule (V, as before)
    for name in ("group_norm", "batch_norm"):
        assert propagate(name, [Operand(S1, "x")], reduction=Reduction((1,), True)).errors == []
