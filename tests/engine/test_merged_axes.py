"""One mistake on several axes is one error with the tuple-axis fix (engine
``errors.merge_axis_errors``, applied by ``ops.propagate`` and ``ops.partial_op``), where the
fix's axes may be flattened in any order (an all_reduce, a reinterpret).  A value meeting a
declared type (``collectives.check_argument``) and ``loss.backward()`` (``ops.check_backward``)
give one error whatever the axes need."""

from __future__ import annotations

from spmd_mypy.engine.collectives import MadeBy, check_argument
from spmd_mypy.engine.errors import SpmdError, merge_axis_errors
from spmd_mypy.engine.ops import Operand, check_backward, partial_op, propagate
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


# boundaries (arguments, returns, assignments) and loss.backward(): one error per value,
# the axes of one conversion merged, different conversions listed and nested in one fix

def test_argument_mismatch_on_two_axes_is_one_error_with_the_tuple_axis() -> None:
    (err,) = check_argument(_t(dp=PARTIAL, tp=PARTIAL), _t(dp=REPLICATE, tp=REPLICATE),
                            x_text="p", where="argument p")
    assert err.code == "spmd-mismatch"
    assert err.message.endswith(
        'it is P on "dp" and "tp" where R is needed; P to R is a reduction: use '
        'all_reduce(p, ("dp", "tp"), src=P, dst=R)')


def test_argument_mismatch_needing_different_fixes_lists_each_axis() -> None:
    (err,) = check_argument(_t(dp=VARYING, tp=REPLICATE), _t(dp=REPLICATE, tp=INVARIANT),
                            x_text="m", where="the return value m")
    assert 'it is V on "dp" where R is needed, and R on "tp" where I is needed; on "dp": V to R' \
        in err.message
    assert '; on "tp": R to I is a reinterpretation: use reinterpret(m, "tp", src=R, dst=I)' \
        in err.message
    assert err.message.endswith(
        'together: reinterpret(all_gather(m, "dp", src=V, dst=R), "tp", src=R, dst=I)')


def test_argument_gathers_on_two_axes_are_not_flattened() -> None:
    (err,) = check_argument(_t(dp=VARYING, tp=VARYING), _t(dp=REPLICATE, tp=REPLICATE),
                            x_text="v", where="v")
    assert '("dp", "tp")' not in err.message
    assert 'it is V on "dp" and "tp" where R is needed; on "dp": V to R is a gather' in err.message
    assert err.message.endswith(
        'together: all_gather(all_gather(v, "dp", src=V, dst=R), "tp", src=V, dst=R)')


def test_argument_merged_fix_by_the_collective_written_in_place() -> None:
    made = MadeBy("all_reduce", ("dp", "tp"), PARTIAL, "p")
    (err,) = check_argument(_t(dp=REPLICATE, tp=REPLICATE), _t(dp=INVARIANT, tp=INVARIANT),
                            x_text="all_reduce(...)", where="x", made_by=made)
    assert err.message.endswith('it is R on "dp" and "tp" where I is needed; pass dst=I to the '
                                'all_reduce: all_reduce(p, ("dp", "tp"), src=P, dst=I)')


def test_backward_on_two_axes_is_one_error() -> None:
    (err,) = check_backward(Operand(_t(dp=REPLICATE, tp=REPLICATE), "loss"))
    assert err.message.startswith(
        'loss.backward() needs the loss Invariant or Partial on "dp" and "tp", but it is Replicate')
    assert err.message.endswith('reinterpret(loss, ("dp", "tp"), src=R, dst=I)')
    (err,) = check_backward(Operand(_t(dp=VARYING, tp=REPLICATE), "loss"))
    assert 'it is Varying on "dp" and Replicate on "tp"' in err.message
    assert 'reinterpret(reinterpret(loss, "dp", src=V, dst=P), "tp", src=R, dst=I)' in err.message
    assert check_backward(Operand(_t(dp=INVARIANT, tp=PARTIAL), "loss")) == []


def test_collective_src_mismatch_on_several_axes_is_one_error() -> None:
    # one wrong src on each axis of a flattened collective: one error, the axes in the
    # call's order, one fix (was one error per axis, identical but for the axis)
    from spmd_mypy.engine.collectives import check_collective
    from spmd_mypy.engine.types import shard

    res = check_collective("all_gather", _t(row=shard(0), col=shard(0)), ("row", "col"),
                           shard(1), REPLICATE, x_text="x")
    assert [str(e) for e in res.errors] == [
        'all_gather(x, ("row", "col"), src=S(1), ...) but x is S(0) on "row" and "col" (x: '
        'Tensor[S[0, "col", "row"]]); pass src=S(0)  [spmd-src-mismatch]']
    res = check_collective("all_reduce", _t(dp=REPLICATE, cp=REPLICATE, tp=PARTIAL),
                           ("dp", "cp", "tp"), PARTIAL, REPLICATE, x_text="loss")
    assert [e.message for e in res.errors] == [
        'all_reduce(loss, ("dp", "cp", "tp"), src=P, ...) but loss is R on "dp" and "cp" '
        '(loss: Tensor[R["cp", "dp"], P["tp"]]); drop "dp" and "cp" from the axes '
        '(all_reduce(loss, "tp", src=P, dst=R)) if loss is meant to stay R there']


def test_collective_on_the_wrong_axis_names_the_axis_src_is_on() -> None:
    from spmd_mypy.engine.collectives import check_collective
    from spmd_mypy.engine.types import shard

    k = _t(dp=shard(0), cp=shard(2), tp=VARYING)
    (err,) = check_collective("all_gather", k, ("dp",), shard(2), REPLICATE, x_text="k").errors
    # S(2) exactly on "cp"; "tp" (V, dim unknown) is left out when an exact match exists
    assert err.message.endswith('; pass src=S(0); or did you mean axis "cp"? (k is S(2) on "cp")')
    (err,) = check_collective("all_gather", _t(dp=shard(0), tp=VARYING), ("dp",), shard(2),
                              REPLICATE, x_text="k").errors
    assert err.message.endswith('; or did you mean axis "tp"? (k is V on "tp")')
    (err,) = check_collective("all_reduce", _t(dp=PARTIAL, cp=PARTIAL, tp=REPLICATE), ("tp",),
                              PARTIAL, REPLICATE, x_text="g").errors
    assert err.message.endswith('; or did you mean axis "cp" or "dp"? (g is P on "cp" and "dp")')
    # no axis outside the call has src: no hint
    (err,) = check_collective("all_reduce", _t(dp=REPLICATE, tp=VARYING), ("tp",), PARTIAL,
                              REPLICATE, x_text="g").errors
    assert "did you mean" not in err.message


def test_argument_shard_scatter_on_two_axes_is_one_flattened_call() -> None:
    # was reduce_scatter(reduce_scatter(g, "col", ...), "row", ...): nested, col innermost;
    # one flattened call now, its axes sorted by name (the declared order is not kept: the
    # types below are equal whatever order the axes were given in)
    from spmd_mypy.engine.types import shard

    g = SpmdType.of([("row", PARTIAL), ("col", PARTIAL)])
    want = SpmdType.of([("row", shard(0)), ("col", shard(0))])
    assert want == SpmdType.of([("col", shard(0)), ("row", shard(0))])
    (err,) = check_argument(g, want, x_text="g", where="g")
    assert err.message.endswith(
        'it is P on "col" and "row" where S(0) is needed; P to S(0) is a reduce-scatter: use '
        'reduce_scatter(g, ("col", "row"), src=P, dst=S(0))')
    (err,) = check_argument(_t(b=shard(1), a=shard(1), c=REPLICATE),
                            _t(a=REPLICATE, b=REPLICATE, c=REPLICATE), x_text="x", where="x")
    assert err.message.endswith('use all_gather(x, ("a", "b"), src=S(1), dst=R) to concatenate '
                                "the ranks' values on dim 1")
    # V (no dim) stays nested: flattened, the gathers would stack on one new dim, not two
    (err,) = check_argument(_t(a=VARYING, b=VARYING), _t(a=REPLICATE, b=REPLICATE),
                            x_text="v", where="v")
    assert "together: all_gather(all_gather(v" in err.message


def test_backward_of_a_varying_loss_with_dims_is_summed() -> None:
    # the check mode sees loss.dim() > 0: a V loss's reinterpret V->P is no scalar to seed
    (err,) = check_backward(Operand(_t(dp=VARYING, tp=REPLICATE), "loss"), scalar=False)
    assert 'reinterpret(spmd.sum(loss, out_partial_axes="dp"), "tp", src=R, dst=I)' in err.message
    assert "src=V, dst=P" not in err.message
    (err,) = check_backward(Operand(_t(tp=VARYING), "loss"), scalar=False)
    assert 'spmd.sum(loss, out_partial_axes="tp") to mean the sum of every rank\'s elements' in err.message
    assert "not a scalar" in err.message
