"""A differential-fuzzer disagreement (soundness/fuzz.py, session 50's seed 5014); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"]]) -> None:
        t0 = torch.stack([x0, x0])
        t1 = torch.add(t0, x0)
        t2 = t1.sum()
        t2.backward()
      global input shapes: x0: [4, 4]
      mypy plugin : line 5: spmd-backward (t2.backward() needs the loss Invariant or Partial on "tp", but it is Varying (Tensor[V["tp"]]): each rank holds a different loss, ...)
      check mode  : line 5: spmd-global (sum over every dim of x (S(1) on "tp") reduces the dim sharded on "tp": each rank's result is its part of a sum over the ranks (a Partial), ...)
      numerics    : equal

Both reject the backward: the plugin reads no rank, so the broadcast of the 3-d S(1) stack
and the 2-d S(0) x0 is V to it (the safe side) and the loss is Varying; the check mode has
the sum of an S(1), a pending partial sum first used by the backward (fuzz.varying_loss_pair).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["tp"], "ending": ["backward", "t2"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], '
           '"out_type": null, "stmts": [["t0", "op", "stack", ["x0", "x0"], "", "", "", ""], '
           '["t1", "op", "add", ["t0", "x0"], "", "", "", ""], '
           '["t2", "op", "sum_all", ["t1"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
