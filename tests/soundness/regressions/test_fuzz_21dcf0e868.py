"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"]]) -> Tensor[R["tp"]]:
        t0 = spmd.all_gather(x0, "tp", src=V, dst=R)
        return t0
      global input shapes: x0: [4, 4]
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): shape (2, 2, 4) != (2, 4, 4)
      category    : disagreement
      DISAGREEMENT: accepted but numerically wrong: the output at mesh coordinate (dp, tp) = (0, 0): shape (2, 2, 4) != (2, 4, 4)

Cause: the fuzzer's reference held the S(0) input as one global tensor and read it as a
list of copies for src=V; an S(i) claimed as V (both checkers allow it) is the list of
its chunks. Fixed in soundness/fuzz_ref.py (read_as); the verdicts now agree.
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], "out_type": {"tp": "R"}, "stmts": [["t0", "coll", "all_gather", ["x0"], "tp", "V", "R", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
