"""A differential-fuzzer disagreement (soundness/fuzz.py, session 51's seed 5105), shortened by
hand (the found program had four abs() before the transpose); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"]], x1: Tensor[S[0, "tp"]]) -> None:
        t0 = x1.abs()
        ...
        t4 = t3.t()
        t5 = t4.sum()
        t5.backward()
      mypy plugin : line 7: spmd-global (sum over every dim of t4 (S(-1) on "tp") reduces the dim sharded on "tp": ...)
      check mode  : line 8: spmd-global (sum over every dim of x (S(1) on "tp") reduces the dim sharded on "tp": ...)

The known pending-sum pair (the plugin at the sum, the check mode at its first use), with the
operand's layout written from the back by the plugin (no rank read) and from the front by the
check mode (rank 2): one layout (fuzz._one_layout).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["tp"], "ending": ["backward", "t2"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], '
           '"out_type": null, "stmts": [["t0", "op", "abs", ["x0"], "", "", "", ""], '
           '["t1", "op", "t", ["t0"], "", "", "", ""], ["t2", "op", "sum_all", ["t1"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
