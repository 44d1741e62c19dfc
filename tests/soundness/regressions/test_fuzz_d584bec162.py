"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[S[1, "tp"]]) -> torch.Tensor:
        t0 = F.softmax(x0, dim=-1)
        return t0
      global input shapes: x0: [4, 4]
      mypy plugin : accepted
      check mode  : line 2: spmd-global (softmax along dim -1 of x0 (Tensor[S[1, "tp"]]) normalises the dim sharded on "tp": each rank computes the max and sum of exponentials over its own block only (per-rank statistics), so the result is n)
      numerics    : n/a no claimed output type
      category    : disagreement
      DISAGREEMENT: plugin says accepted, check mode says line 2: spmd-global (softmax along dim -1 of x0 (Tensor[S[1, "tp"]]) normalises the dim sharded on "tp": each rank computes the max and sum of exponentials over its own block only (per-rank statistics), so the result is n)
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "S1"}, [4, 4]]], "out_type": null, "stmts": [["t0", "op", "softmax", ["x0"], "", "", "", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
