"""A differential-fuzzer disagreement (session 39, the CI slice at seed 7); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"]]) -> None:
        t0 = torch.add(x0, x0)
        t1 = t0.sum()
        t1.backward()
      mypy plugin : line 3: spmd-global
      check mode  : line 4: spmd-backward (t1.backward() needs the loss Invariant or Partial ...)
      category    : disagreement

Cause: a sum over the shard dim is a pending partial sum (engine ops.reduced_partial_error).
The plugin reports it at the sum; the check mode cannot (a reinterpret(V->P) after it would
make it right) and reported the backward of the V it had typed.  Fixed: the check mode
reports the pending sum's own error (spmd-global) at its first use, backward() included
(runtime _check_loss), and the harness accepts that pair (fuzz.pending_sum_pair: the same
code and sum, the check mode's line after the plugin's) and no other line difference.
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["backward", "t1"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], "out_type": null, "stmts": [["t0", "op", "add", ["x0", "x0"], "", "", "", ""], ["t1", "op", "sum_all", ["t0"], "", "", "", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
