"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"]], x1: Tensor[P["tp"]]) -> Tensor[S[1, "tp"]]:
        t0 = x0 + 1.0
        t1 = spmd.reduce_scatter(x1, "tp", src=P, dst=V)
        return t1
      global input shapes: x0: [4, 4], x1: [2, 4]
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output cannot have the declared type: Dimension out of range (expected to be in range of [-1, 0], but got 1)
      category    : disagreement
      DISAGREEMENT: accepted but numerically wrong: the output cannot have the declared type: Dimension out of range (expected to be in range of [-1, 0], but got 1)
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t1"], "inputs": [["x0", {"tp": "R"}, [4, 4]], ["x1", {"tp": "P"}, [2, 4]]], "out_type": {"tp": "S1"}, "stmts": [["t0", "op", "add1", ["x0"], "", "", "", ""], ["t1", "coll", "reduce_scatter", ["x1"], "tp", "P", "V", ""]]}'


def test_replay() -> None:
    """Session 46 (seed 1): a by-design acceptance, not a disagreement: the reduce_scatter's
    V (1-d here) returned where S(1) is declared is taken on trust by both checkers (a V
    may be claimed S(i)); the fuzzer counts it as accepted-shard-claim."""
    from soundness.fuzz_model import Program
    from soundness.fuzz_replay import shared_fuzzer

    out = shared_fuzzer().judge(Program.from_json(PROGRAM))
    assert out.category == "accepted-shard-claim", out.report()
    assert out.disagreement is None
    replay(PROGRAM)
