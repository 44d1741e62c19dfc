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


def test_saved_slot_is_the_value_or_the_declared_output() -> None:
    """What ctx.saved_tensors hands backward (both checkers apply this rule)."""
    from spmd_mypy.engine.duality import UNKNOWN, saved_slot
    from spmd_mypy.engine.types import UNTYPED

    i = SpmdType.of({"tp": INVARIANT})
    v = SpmdType.of({"tp": VARYING})
    assert saved_slot(Slot.tensor("x", i)).type == i  # a parameter, a local: its own type
    assert saved_slot(Slot("n", NONE)).kind == NONE
    assert saved_slot(Slot("k", OTHER)).kind == UNKNOWN  # torch saves tensors and None only
    assert saved_slot(Slot.tensor("u", UNTYPED)).kind == UNKNOWN  # a plain tensor: unknown
    outputs = (Slot.tensor("", v), Slot(""))
    # an output: forward's declared type at its position, whatever it was computed as
    assert saved_slot(Slot.tensor("y", i), 0, outputs).type == v
    assert saved_slot(Slot.tensor("y", i), 1, outputs).kind == UNKNOWN  # not declared
    assert saved_slot(Slot.tensor("y", i), -1, outputs).kind == UNKNOWN  # position unknown
    assert saved_slot(Slot.tensor("y", i), 0, None).kind == UNKNOWN


def test_join_saved_keeps_what_every_save_agrees_on() -> None:
    from spmd_mypy.engine.duality import UNKNOWN, join_saved

    i = Slot.tensor("x", SpmdType.of({"tp": INVARIANT}))
    v = Slot.tensor("w", SpmdType.of({"tp": VARYING}))
    joined = join_saved([(i, v), (Slot.tensor("x2", i.type), i)])
    assert joined is not None and joined[0].type == i.type and joined[1].kind == UNKNOWN
    assert join_saved([(i, v), (i,)]) is None  # different counts
    assert join_saved([(i,), None]) is None  # a save not read (``*args``)
    assert join_saved([]) is None
