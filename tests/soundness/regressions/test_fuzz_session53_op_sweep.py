"""Disagreements of session 53's one-statement sweep of the fuzzer's new ops (every input
form on "tp", returned or summed and backpropagated); replayed here.

- ``x0.var(-1)`` and ``x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6)`` of an
  S(1) x0: dim -1 is the shard dim only at rank 2. The plugin reads no rank and keeps V,
  the check mode rejects at the real rank (fuzz.reduced_at_one_rank).
- ``(x0 @ x1).sum()`` of an R x0 and an S(1) x1, backpropagated (found by the sweep of the
  older ops): the plugin types the matmul ``V (V at rank >= 2, S(0) at rank 1)`` and reports
  the pending sum at the sum, the check mode has S(1) at rank 2 and reports it at the
  backward (fuzz.pending_sum_pair, fuzz._one_layout: a V alternative at rank 2).
- ``x0 * x1.sum(0)`` of an I x0 and an S(0) x1: the plugin reports the pending sum and types
  it unknown after the error; the check mode reports the use first, an I beside the pending
  V (fuzz.pending_sum_used_in_its_statement).
"""

import pytest

from soundness.fuzz_replay import replay

PROGRAMS = {
    "var-along-minus-1-of-s1": (
        '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "S1"}, [4, 4]]], '
        '"out_type": null, "stmts": [["t0", "op", "var_last", ["x0"], "", "", "", ""]]}'),
    "rms-norm-of-s1": (
        '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "S1"}, [4, 4]]], '
        '"out_type": null, "stmts": [["t0", "op", "rms_norm", ["x0"], "", "", "", ""]]}'),
    "invariant-times-a-pending-sum": (
        '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "I"}, [4, 4]], '
        '["x1", {"tp": "S0"}, [4, 4]]], "out_type": null, '
        '"stmts": [["t0", "op", "mul_colsum", ["x0", "x1"], "", "", "", ""]]}'),
    "sum-of-a-matmul-by-an-s1": (
        '{"axes": ["tp"], "ending": ["backward", "t1"], "inputs": [["x0", {"tp": "R"}, [4, 4]], '
        '["x1", {"tp": "S1"}, [4, 4]]], "out_type": null, '
        '"stmts": [["t0", "op", "matmul", ["x0", "x1"], "", "", "", ""], '
        '["t1", "op", "sum_all", ["t0"], "", "", "", ""]]}'),
}


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_replay(program: str) -> None:
    replay(program)
