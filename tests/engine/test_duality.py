"""The duality rule of custom autograd Functions (engine/duality.py), without mypy.

A Function of forward type ``S -> D`` needs a backward of type ``dual(D) -> dual(S)``; every
Megatron mapping of notes/megatron-mapping.md is such a pair, and a backward that forgets its
all-reduce (returns P where I is needed) is the classic bug.
"""

from __future__ import annotations

import itertools

import pytest

from spmd_mypy.engine.duality import NONE, OTHER, FunctionTypes, Slot, check_returned, check_signature
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, LocalType, SpmdType, dual, shard

KINDS = [REPLICATE, INVARIANT, VARYING, PARTIAL, shard(0), shard(-1)]


def t(lt: LocalType) -> SpmdType:
    return SpmdType.of({"tp": lt})


def fn(src: LocalType, dst: LocalType, grad: LocalType, ret: LocalType) -> FunctionTypes:
    return FunctionTypes("Fn", (Slot.tensor("x", t(src)),), (Slot.tensor("out", t(dst)),),
                         (Slot.tensor("g", t(grad)),), (Slot.tensor("gx", t(ret)),))


@pytest.mark.parametrize("src,dst", list(itertools.product(KINDS, KINDS)))
def test_the_dual_signature_is_accepted(src: LocalType, dst: LocalType) -> None:
    assert check_signature(fn(src, dst, dual(dst), dual(src))) == []


@pytest.mark.parametrize("src,dst,bad", [
    (INVARIANT, REPLICATE, INVARIANT),   # copy_to: grad of R is P, not I
    (PARTIAL, INVARIANT, PARTIAL),       # reduce_from: grad of I is I
    (shard(-1), INVARIANT, REPLICATE),   # gather_from: grad of I is I
])
def test_a_wrong_gradient_parameter_is_an_error(src: LocalType, dst: LocalType, bad: LocalType) -> None:
    errors = check_signature(fn(src, dst, bad, dual(src)))
    assert [e.code for e in errors] == ["spmd-duality"]
    assert "Fn" in errors[0].message


def test_a_backward_that_forgets_the_all_reduce_is_an_error() -> None:
    """copy_to: forward I -> R, backward P -> I; returning the P gradient as is is the bug."""
    f = fn(INVARIANT, REPLICATE, PARTIAL, INVARIANT)
    assert check_signature(f) == []
    errors = check_returned(f, (Slot.tensor("g", t(PARTIAL)),))
    assert [e.code for e in errors] == ["spmd-duality"]
    assert 'all_reduce(g, "tp", src=P, dst=I)' in errors[0].message
    assert check_returned(f, (Slot.tensor("g2", t(INVARIANT)),)) == []


def test_none_for_a_non_tensor_input() -> None:
    f = FunctionTypes("Fn", (Slot.tensor("x", t(INVARIANT)), Slot("flag", OTHER)),
                      (Slot.tensor("out", t(REPLICATE)),), (Slot.tensor("g", t(PARTIAL)),),
                      (Slot.tensor("gx", t(INVARIANT)), Slot("none", NONE)))
    assert check_signature(f) == []
