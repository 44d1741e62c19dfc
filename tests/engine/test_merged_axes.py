"""One mistake on several axes is one error with the tuple-axis fix (engine
``errors.merge_axis_errors``, applied by ``ops.propagate`` and ``ops.partial_op``), where the
fix's axes may be flattened in any order (an all_reduce, a reinterpret)."""

from __future__ import annotations

from spmd_mypy.engine.errors import SpmdError, merge_axis_errors
from spmd_mypy.engine.ops import Operand, partial_op, propagate
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, SpmdType


def _t(**axes: object) -> SpmdType:
    return SpmdType.of(axes)  # type: ignore[arg-type]


def test_partial_through_a_nonlinear_op_on_two_axes_is_one_error() -> None:
    res = propagate("gelu", [Operand(_t(dp=PARTIAL, tp=PARTIAL), "p")])
    assert [str(e) for e in res.errors] == [
        'Partial on "dp" and "tp" (p: Tensor[P["dp", "tp"]]) cannot go through gelu (a '
        'non-linear op of a pending sum); all_reduce(p, ("dp", "tp"), src=P, dst=R) first  '
        '[spmd-partial-nonlinear]']
    assert res.type.failed == ("dp", "tp")


def test_invariant_mixed_on_three_axes() -> None:
    i = Operand(_t(a=INVARIANT, b=INVARIANT, c=INVARIANT), "i")
    v = Operand(_t(a=VARYING, b=VARYING, c=VARYING), "v")
    (err,) = propagate("add", [v, i]).errors
    assert err.code == "spmd-invariant-mix"
    assert err.message.startswith('Invariant on "a", "b" and "c" (i: ')
    assert 'reinterpret(i, ("a", "b", "c"), src=I, dst=R)' in err.message


def test_a_fix_whose_axis_order_matters_is_not_merged() -> None:
    # P beside V: all_reduce ... or reduce_scatter (a scatter's tuple axis orders the blocks)
    res = propagate("add", [Operand(_t(dp=PARTIAL, tp=PARTIAL), "p"),
                            Operand(_t(dp=VARYING, tp=VARYING), "v")])
    assert len(res.errors) == 2
    assert {e.code for e in res.errors} == {"spmd-partial-varying"}
    assert all("reduce_scatter(" in e.message for e in res.errors)


def test_partial_op_merges_too() -> None:
    res = partial_op("matmul", [Operand(_t(dp=PARTIAL, tp=PARTIAL), "a"),
                                Operand(_t(dp=PARTIAL, tp=PARTIAL), "b")], ("cp",))
    assert [str(e) for e in res.errors] == [
        'Partial * Partial on "dp" and "tp" in matmul (a: Tensor[P["dp", "tp"]], b: '
        'Tensor[P["dp", "tp"]]): the product of two pending sums is not the sum of the '
        'products; all_reduce one operand first: all_reduce(a, ("dp", "tp"), src=P, dst=R)  '
        '[spmd-partial-product]']


def test_messages_naming_the_axis_elsewhere_are_kept_apart() -> None:
    # the bias errors name the axis in out_partial_axes="dp" too: not one template
    res = partial_op("linear", [Operand(_t(dp=VARYING, tp=VARYING), "a"),
                                Operand(_t(dp=REPLICATE, tp=REPLICATE), "w")], ("dp", "tp"),
                     bias=Operand(_t(dp=REPLICATE, tp=REPLICATE), "bias"))
    assert [e.code for e in res.errors] == ["spmd-partial-affine"] * 2


def test_messages_that_differ_elsewhere_are_kept_apart() -> None:
    a = SpmdError("spmd-partial-nonlinear",
                  'Partial on "dp" (p: T) cannot go through gelu; all_reduce(p, "dp", src=P, dst=R) first')
    b = SpmdError("spmd-partial-nonlinear",
                  'Partial on "tp" (q: T) cannot go through gelu; all_reduce(q, "tp", src=P, dst=R) first')
    assert merge_axis_errors([a, b]) == [a, b]
    assert merge_axis_errors([a]) == [a]
    c = SpmdError("spmd-partial-nonlinear",
                  'Partial on "tp" (p: T) cannot go through gelu; all_reduce(p, "tp", src=P, dst=R) first')
    other = SpmdError("spmd-backward", "loss.backward() needs I or P")
    merged = merge_axis_errors([other, a, c])
    assert merged[0] is other and len(merged) == 2
    assert merged[1].message == ('Partial on "dp" and "tp" (p: T) cannot go through gelu; '
                                 'all_reduce(p, ("dp", "tp"), src=P, dst=R) first')
