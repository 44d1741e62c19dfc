"""A differential-fuzzer disagreement (soundness/fuzz.py, session 51's seed 5104); replayed here.

Found as (the fuzzer's ``mse`` op then passed the target as it was)::

    def prog(x0: Tensor[R["tp"], R["dp"]], x1: Tensor[I["tp"], R["dp"]]) -> torch.Tensor:
        t0 = F.mse_loss(x1, x0)
        return t0
      mypy plugin : accepted
      check mode  : line 2: spmd-invariant-mix (Invariant on "tp" (x1: Tensor[R["dp"], I["tp"]]) cannot mix with Replicate (x0: Tensor[R["dp", "tp"]]) in mse_loss: ...)

The static checker reads a value-target loss's target as data without a gradient (engine
ops.VALUE_TARGET_OPS; README), the check mode reads requires_grad, and the fuzzer's inputs
all carry a gradient. The ``mse`` op now detaches its target: both checkers accept.
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": ['
           '["x0", {"dp": "R", "tp": "R"}, [4, 4]], ["x1", {"dp": "R", "tp": "I"}, [4, 4]]], '
           '"out_type": null, "stmts": [["t0", "op", "mse", ["x1", "x0"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
