"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[P["tp"], S[1, "dp"]]) -> torch.Tensor:
        t0 = F.softmax(x0, dim=-1)
        return t0
      global input shapes: x0: [4, 4]
      mypy plugin : line 2: spmd-partial-nonlinear (Partial on "tp" (x0: Tensor[P["tp"], S[1, "dp"]]) cannot go through softmax (a non-linear op of a pending sum); all_reduce(x0, "tp", src=P, dst=R) first)
      check mode  : line 2: spmd-global (softmax along dim -1 of x0 (Tensor[P["tp"], S[1, "dp"]]) normalises the dim sharded on "dp": each rank computes the max and sum of exponentials over its own block only (per-rank statistics), so the re)
      numerics    : n/a no claimed output type
      category    : disagreement
      DISAGREEMENT: plugin says line 2: spmd-partial-nonlinear (Partial on "tp" (x0: Tensor[P["tp"], S[1, "dp"]]) cannot go through softmax (a non-linear op of a pending sum); all_reduce(x0, "tp", src=P, dst=R) first), check mode says line 2: spmd-global (softmax along dim -1 of x0 (Tensor[P["tp"], S[1, "dp"]]) normalises the dim sharded on "dp": each rank computes the max and sum of exponentials over its own block only (per-rank statistics), so the re)
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": [["x0", {"dp": "S1", "tp": "P"}, [4, 4]]], "out_type": null, "stmts": [["t0", "op", "softmax", ["x0"], "", "", "", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
