"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[V["tp"], S[0, "dp"]], x1: Tensor[R["tp"], R["dp"]]) -> Tensor[R["tp"], S[0, "dp"]]:
        t0 = spmd.all_gather(x0, "tp", src=V, dst=R)
        return t0
      global input shapes: x0: [4, 4], x1: [4, 4]
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): shape (4, 2, 4) != (2, 4, 4)
      category    : disagreement
      DISAGREEMENT: accepted but numerically wrong: the output at mesh coordinate (dp, tp) = (0, 0): shape (4, 2, 4) != (2, 4, 4)

Cause (engine bug, fixed): all_gather(V -> R) stacks on a new dim 0 but the result
kept S[0, "dp"]; the "dp" shards are on dim 1 now. spmd_mypy/engine/collectives.py
now moves the other axes' shard dims for the ops that add or remove dim 0, so both
checkers reject the declared S[0, "dp"] (the result is S[1, "dp"]).
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": [["x0", {"dp": "S0", "tp": "V"}, [4, 4]], ["x1", {"dp": "R", "tp": "R"}, [4, 4]]], "out_type": {"dp": "S0", "tp": "R"}, "stmts": [["t0", "coll", "all_gather", ["x0"], "tp", "V", "R", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
