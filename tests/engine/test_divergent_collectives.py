"""The rule of spmd-divergent-collective (engine ``divergent_collective_error``): a collective
under a condition that differs between the ranks of one of its axes; ``communicates``: which
typed calls issue a collective forward (the plugin's cases: tests/plugin/cases/
divergent_collectives.test)."""

from __future__ import annotations

import dataclasses

from spmd_mypy.engine.collectives import (RankCondition, agreed_condition, communicates,
                                         divergent_collective_error)
from spmd_mypy.engine.types import Kind, LocalType, shard

R, I, P = LocalType(Kind.R), LocalType(Kind.I), LocalType(Kind.P)
S0 = shard(0)

CALL = 'spmd.all_gather(w, "tp", src=S(0), dst=I)'
RANK0 = RankCondition(("dp", "tp", "pp"), "`if dist.get_rank() == 0:`", 9,
                      "if dist.get_rank() == 0:")


def test_condition_on_the_axis_is_an_error_with_the_pasted_fix() -> None:
    e = divergent_collective_error(CALL, "all_gather", ("tp",), [RANK0], result="full")
    assert e is not None and e.code == "spmd-divergent-collective"
    assert e.message.startswith(f'{CALL} (over "tp") runs only on the ranks where '
                                "`if dist.get_rank() == 0:` (line 9)")
    assert 'differs between the ranks of "tp"' in e.message and "hangs" in e.message
    assert e.message.endswith(f"`full = {CALL}` then `if dist.get_rank() == 0:`")


def test_condition_on_other_axes_only_is_not() -> None:
    last_stage = RankCondition(("pp",), "`if pp_rank == 3:`", 4, "if pp_rank == 3:")
    assert divergent_collective_error(CALL, "all_gather", ("tp",), [last_stage]) is None
    # the first condition that varies on the collective's axes is named
    e = divergent_collective_error(CALL, "all_gather", ("tp",), [last_stage, RANK0])
    assert e is not None and "(line 9)" in e.message


def test_result_naming() -> None:
    e = divergent_collective_error(CALL, "all_gather", ("tp",), [RANK0])  # bound to nothing
    assert e is not None and e.message.endswith(
        f"`gathered = {CALL}` then `if dist.get_rank() == 0:`, and use gathered in its place "
        "inside the branch")
    e = divergent_collective_error("dist.barrier()", "barrier", ("dp", "tp", "pp"), [RANK0],
                                   over="over the default group: every rank", returns=False)
    assert e is not None and e.message.endswith("`dist.barrier()` then `if dist.get_rank() == 0:`")


def test_which_typed_calls_communicate() -> None:
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert communicates(op, None, None)
    assert communicates("redistribute", P, R) and communicates("redistribute", S0, I)
    assert not communicates("redistribute", R, S0)  # a local chunk
    assert not communicates("redistribute", None, R)  # src unknown: not read
    assert not communicates("convert", I, S0) and not communicates("reinterpret", I, R)


def test_call_of_a_function_that_runs_the_collective() -> None:
    """``sync(w)`` under the condition, ``sync``'s body running the collective: the error
    names both, and the fix hoists the call."""
    e = divergent_collective_error("sync(w)", "", ("tp",), [RANK0], result="",
                                   inner=(CALL, 3))
    assert e is not None and e.message.startswith(
        f'sync(w), whose body runs {CALL} (line 3, over "tp"), runs only on the ranks where '
        "`if dist.get_rank() == 0:` (line 9)")
    assert "Run the call on every rank" in e.message
    assert e.message.endswith("`sync(w)` then `if dist.get_rank() == 0:`")
    last_stage = RankCondition(("pp",), "`if pp_rank == 3:`", 4, "if pp_rank == 3:")
    assert divergent_collective_error("sync(w)", "", ("tp",), [last_stage],
                                      inner=(CALL, 3)) is None


def test_condition_reading_a_varying_value() -> None:
    """``if r.abs().max() < tol: break`` with r V on "tp": the fix makes the value the same on
    every rank (its maximum over the axis), pasted into the condition as written."""
    cond = RankCondition(("tp",), "`if r.abs().max() < tol: break`", 21,
                         "if r.abs().max() < tol: break", value_axes=("tp",),
                         reads=("r.abs().max()", 'Tensor[V["tp"]]'), reads_src=(("tp", "V"),),
                         code="if r.abs().max() < tol: break")
    e = divergent_collective_error("dot(r, r)", "", ("tp",), [cond], result="rr_new")
    assert e is not None and e.code == "spmd-divergent-collective"
    assert 'reads r.abs().max() (Tensor[V["tp"]]), whose value differs between the ranks of "tp"' \
        in e.message
    assert e.message.endswith(
        '`if spmd.all_reduce(r.abs().max(), "tp", src=V, dst=R, op="max") < tol: break` (or '
        'test a value all-reduced over "tp", such as a norm)')
    # a loop's exit after the collective: it runs again on the ranks that stayed
    loop = dataclasses.replace(cond, loop=True)
    e = divergent_collective_error("dot(p, ap)", "", ("tp",), [loop])
    assert e is not None and "runs again in the loop's next iteration only on the ranks where " \
        "`if r.abs().max() < tol: break` (line 21) did not leave the loop" in e.message
    # varying on "tp" only: a collective over "dp" is run by all of its group or none
    assert divergent_collective_error("spmd.all_reduce(h, \"dp\", src=P, dst=R)", "all_reduce",
                                      ("dp",), [cond]) is None
    # the value bound to a local the condition tests: the fix computes it reduced
    done = dataclasses.replace(cond, written="`if done: break`", code="if done: break",
                               reads=("r.norm()", 'Tensor[S[0, "tp"]]'),
                               reads_src=(("tp", "S(0)"),))
    e = divergent_collective_error("dist.barrier()", "barrier", ("dp", "tp"), [done],
                                   returns=False)
    assert e is not None and e.message.endswith(
        'compute r.norm() as `spmd.all_reduce(r.norm(), "tp", src=S(0), dst=R, op="max")` (or '
        'test a value all-reduced over "tp", such as a norm)')


def test_agreed_condition() -> None:
    assert agreed_condition("while float(y.max()) > 1.0:", "y.max()", ("dp", "tp"),
                            (("dp", "V"), ("tp", "S(0)"))) == \
        'while float(spmd.all_reduce(y.max(), ("dp", "tp"), src=V, dst=R, op="max")) > 1.0:'
    assert agreed_condition("if done:", "r.norm()", ("tp",), (("tp", "V"),)) is None


def test_agreed_value_detached_where_it_may_carry_a_gradient() -> None:
    """A max all-reduce has no gradient (spmd-no-grad): the fix detaches a value that may
    carry one (an operator's text parenthesized first)."""
    assert agreed_condition("if r.abs().max() < tol: break", "r.abs().max()", ("tp",),
                            (("tp", "V"),), detach=True) == \
        'if spmd.all_reduce(r.abs().max().detach(), "tp", src=V, dst=R, op="max") < tol: break'
    cond = RankCondition(("tp",), "`if done: break`", 5, "if done: break", value_axes=("tp",),
                         reads=("a - b", 'Tensor[V["tp"]]'), reads_src=(("tp", "V"),),
                         code="if done: break", detach=True)
    e = divergent_collective_error("dist.barrier()", "barrier", ("tp",), [cond], returns=False)
    assert e is not None and 'compute a - b as `spmd.all_reduce((a - b).detach(), "tp", ' \
        'src=V, dst=R, op="max")`' in e.message
