"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"]]) -> None:
        t0 = torch.add(x0, x0)
        t1 = F.softmax(t0, dim=-1)
        t2 = t1.sum()
        t2.backward()
      global input shapes: x0: [4, 4]
      mypy plugin : line 4: spmd-global (sum over every dim of t1 (V (S(0) at rank >= 2, V at rank 1) on "tp") reduces the dim sharded on "tp": each rank's result is its part of a sum over the ranks (a Partial), not a value of its own (V), s)
      check mode  : line 5: spmd-global (sum over every dim of x (S(0) on "tp") reduces the dim sharded on "tp": each rank's result is its part of a sum over the ranks (a Partial), not a value of its own (V), so a sqrt, a division or a norm )
      numerics    : equal
      category    : disagreement
      DISAGREEMENT: plugin says line 4: spmd-global (sum over every dim of t1 (V (S(0) at rank >= 2, V at rank 1) on "tp") reduces the dim sharded on "tp": each rank's result is its part of a sum over the ranks (a Partial), not a value of its own (V), s), check mode says line 5: spmd-global (sum over every dim of x (S(0) on "tp") reduces the dim sharded on "tp": each rank's result is its part of a sum over the ranks (a Partial), not a value of its own (V), so a sqrt, a division or a norm )
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["backward", "t2"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], "out_type": null, "stmts": [["t0", "op", "add", ["x0", "x0"], "", "", "", ""], ["t1", "op", "softmax", ["t0"], "", "", "", ""], ["t2", "op", "sum_all", ["t1"], "", "", "", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
