"""A differential-fuzzer soundness bug (soundness/fuzz.py, session 51's seed 5112), shrunk by hand
to its first statement; replayed here.

Found as (both checkers accepted; the numbers were off)::

    def prog(x0: Tensor[V["tp"], P["dp"]]) -> Tensor[R["tp"], P["dp"]]:
        t0 = spmd.all_reduce(x0.detach(), "tp", src=V, dst=R, op="max")
        t1 = t0.chunk(2)[0]
        t2 = t1.chunk(2)[0]
        return t2
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): max |diff| 2.08

Each rank takes the max over tp of its own summand of the dp sum; the sum over dp of those
maxes is not the max of the sum. Both checkers now reject it (engine
collectives._extreme_of_summands, spmd-partial-nonlinear), and the fuzzer's numbers are the
counterexample.
"""

from soundness.fuzz_replay import replay, shared_fuzzer
from soundness.fuzz_model import Program

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": ['
           '["x0", {"dp": "P", "tp": "V"}, [4, 4]]], "out_type": {"dp": "P", "tp": "R"}, '
           '"stmts": [["t0", "coll", "all_reduce", ["x0"], "tp", "V", "R", "max"]]}')


def test_replay() -> None:
    replay(PROGRAM)


def test_both_checkers_reject_it_and_the_numbers_show_why() -> None:
    out = shared_fuzzer().judge(Program.from_json(PROGRAM))
    assert out.mypy.codes == ("spmd-partial-nonlinear",) and out.check.codes == out.mypy.codes
    assert out.category == "rejected-counterexample", out.report()
