"""The fixes a pasted result must not be dropped from (session 40's paste probe):

- a raw in-place collective that is a statement of its own: the typed fix assigns the result
  to the tensor the raw op wrote (``g = spmd.all_reduce(g, ...)``, not the bare call, whose
  result a statement drops);
- a typed collective as a statement: spmd-discarded-result, the fix the assignment;
- spmd-duality's "reduce it alone" fix names the local the code narrowed the gradient into,
  else asserts the Optional ``p.grad`` first (pasted bare it failed mypy's arg-type)."""

from __future__ import annotations

from spmd_mypy.engine.collectives import discarded_result_error, raw_collective_error
from spmd_mypy.engine.duality import check_grad_assignment
from spmd_mypy.engine.types import LocalType, Kind, SpmdType

P_DP = SpmdType((("dp", LocalType(Kind.P)),))
R_DP = SpmdType((("dp", LocalType(Kind.R)),))
V_DP = SpmdType((("dp", LocalType(Kind.V)),))


def test_raw_statement_fix_assigns_the_written_tensor() -> None:
    err = raw_collective_error("torch.distributed", "all_reduce", "g", P_DP, assign_to="g")
    assert ('use g = spmd.all_reduce(g, "dp", src=P, dst=R) (the typed call returns the result, '
            "which the raw op wrote into g; as a statement of its own it would be dropped)"
            in err.message), err.message


def test_raw_call_not_a_statement_keeps_the_returned_form() -> None:
    err = raw_collective_error("torch.distributed", "all_reduce", "g", P_DP)
    assert ('use spmd.all_reduce(g, "dp", src=P, dst=R), which returns the result' in err.message)


def test_raw_functional_call_is_not_in_place() -> None:
    # a functional collective returns its result: no assignment is invented for it
    err = raw_collective_error("torch.distributed._functional_collectives", "all_reduce", "g",
                               P_DP, assign_to="g")
    assert 'use spmd.all_reduce(g, "dp", src=P, dst=R)' in err.message
    assert "g = spmd" not in err.message


def test_discarded_typed_collective() -> None:
    call = 'spmd.all_reduce(g, "dp", src=P, dst=R)'
    err = discarded_result_error(call, "g", P_DP, "g")
    assert err.code == "spmd-discarded-result"
    assert err.message.endswith(f"assign the result: g = {call}"), err.message
    assert 'leave g (Tensor[P["dp"]]) as it was' in err.message
    # an input no assignment can bind, untyped: a new name
    err = discarded_result_error('spmd.all_reduce(a + b, "dp", src=P, dst=R)', "(a + b)", None, None)
    assert err.message.endswith('assign the result and use it: y = spmd.all_reduce(a + b, "dp", '
                                'src=P, dst=R)'), err.message


def test_duality_fix_names_the_narrowed_local() -> None:
    (err,) = check_grad_assignment(R_DP, V_DP, target="self.w.grad", value_text="v", narrowed="g")
    assert err.message.endswith('reduce it alone: self.w.grad = spmd.all_reduce(g, "dp", src=P, '
                                'dst=R)'), err.message
    (err,) = check_grad_assignment(R_DP, V_DP, target="self.w.grad", value_text="v")
    assert err.message.endswith('reduce it alone: assert self.w.grad is not None; self.w.grad = '
                                'spmd.all_reduce(self.w.grad, "dp", src=P, dst=R)'), err.message
