"""A differential-fuzzer disagreement (soundness/fuzz.py, session 52's seed 5203); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"]], x1: Tensor[S[1, "tp"]], x2: Tensor[S[0, "tp"]]) -> torch.Tensor:
        t0 = x1.clone().add_(x2)
        return t0
      global input shapes: x0: [4, 4], x1: [4, 4], x2: [4, 4]
      mypy plugin : accepted
      check mode  : line 2: spmd-inplace (add_ would write x2 (Tensor[S[0, "tp"]]), Shard(0) on "tp", into x (Tensor[S[1, "tp"]]), Shard(1) there: each rank's block of dim 0 would be stored as its block of dim 1, ...)

The plugin's acceptance by design: it reads no rank, and an S(0) value written elementwise
into an S(1) tensor may be a lower-rank value broadcast from the back (a bias row: its dim 0
is the tensor's dim 1). The check mode, with the shapes, rejects the same-rank write
(fuzz.written_below_at_one_rank; docs/soundness.md).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": ['
           '["x0", {"tp": "R"}, [4, 4]], ["x1", {"tp": "S1"}, [4, 4]], '
           '["x2", {"tp": "S0"}, [4, 4]]], '
           '"out_type": null, "stmts": [["t0", "op", "add_", ["x1", "x2"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
