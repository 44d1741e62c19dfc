"""A differential-fuzzer disagreement (soundness/fuzz.py, session 51's seed 5101); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"], S[1, "dp"]], x1: Tensor[R["tp"], R["dp"]], x2: Tensor[R["tp"], S[0, "dp"]]) -> torch.Tensor:
        t0 = x2 @ x0
        return t0
      global input shapes: x0: [4, 4], x1: [4, 4], x2: [4, 4]
      mypy plugin : accepted
      check mode  : line 2: spmd-global (matmul(x2, x0): mesh axis "dp" shards dim 0 of x2 (x2: Tensor[R["tp"], S[0, "dp"]]) and dim 1 of x0 (x0: Tensor[R["tp"], S[1, "dp"]]), two dims that both stay in the result: each rank holds one diagon)

Both 2-d, each rank holds one diagonal block; the plugin reads no rank (a 3-d x2 against a
4-d x0 is one batch dim sharded by both), so it types the result V: a check-mode-only
rejection by design, as in the rules suite (fuzz.along_shard_at_rank).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": ['
           '["x0", {"dp": "S1", "tp": "R"}, [4, 4]], ["x1", {"dp": "R", "tp": "R"}, [4, 4]], '
           '["x2", {"dp": "S0", "tp": "R"}, [4, 4]]], "out_type": null, '
           '"stmts": [["t0", "op", "matmul", ["x2", "x0"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
