"""A scan along the dim an operand is sharded on (engine ops.scan_along_shard_error): each rank
scans its own block, the carry from the ranks before it missing.  Typed V and claimed S(i) again,
a sequence-parallel ``x.cumsum(1)`` of an S(1) shard passed both checkers as the global prefix
sum (session 45's scans probe: 1.8 off the float64 reference on 2 ranks, 2.9 on 4)."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.ops import Operand, Reduction, propagate
from spmd_mypy.engine.types import Kind, LocalType, SpmdType

S1 = SpmdType.of({"cp": LocalType(Kind.V, 1)})
SM1 = SpmdType.of({"cp": LocalType(Kind.V, -1)})
V = SpmdType.of({"cp": LocalType(Kind.V)})


def _res(name: str, t: SpmdType, dims: tuple[int, ...], shape=None):
    return propagate(name, [Operand(t, "x", shape=shape)], reduction=Reduction(dims))


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin",
                                  "cumsum_", "cumprod_"])
def test_a_scan_along_the_shard_dim_is_an_error(name: str) -> None:
    errs = _res(name, S1, (1,)).errors
    assert [e.code for e in errs] == ["spmd-global"]
    assert f'{name} along dim 1 of x (S(1) on "cp") scans the dim sharded on "cp"' in errs[0].message
    assert 'spmd.declare(x, Tensor[V["cp"]])' in errs[0].message
    assert [e.code for e in _res(name, S1, (-2,), shape=(2, 8, 3)).errors] == ["spmd-global"]


@pytest.mark.parametrize("t,dims,shape", [
    (S1, (2,), None),          # along an unsharded dim: keeps S(1)
    (S1, (0,), None),
    (V, (1,), None),           # a plain V (declared so: this rank's own scan)
    (SM1, (1,), None),         # the shard dim only at rank 2: the static checker cannot say
    (S1, (-1,), (2, 8, 3)),    # the check mode: dim -1 is dim 2
])
def test_other_scans_are_accepted(t: SpmdType, dims: tuple[int, ...], shape) -> None:
    assert _res("cumsum", t, dims, shape).errors == []


def test_a_scan_along_another_dim_keeps_the_shard() -> None:
    assert _res("cumsum", S1, (2,)).type.get("cp") == LocalType(Kind.V, 1)


def test_the_in_place_scans_keep_the_target_elsewhere() -> None:
    # x.cumsum_(1) of S(1) kept S(1) silently in both checkers until session 45 (cumsum_ was
    # an unknown op, its V result accepted into the S(1) target)
    assert _res("cumsum_", S1, (2,)).type.get("cp") == LocalType(Kind.V, 1)
    assert _res("cumprod_", V, (1,)).errors == []
