"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"]]) -> Tensor[S[1, "tp"]]:
        t0 = torch.add(x0, x0)
        t1 = F.softmax(t0, dim=-1)
        return t1
      global input shapes: x0: [4, 4]
      mypy plugin : accepted
      check mode  : line 4: return (result is Tensor[S[0, "tp"]])
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): shape (2, 8) != (4, 4)
      category    : disagreement
      DISAGREEMENT: plugin says accepted, check mode says line 4: return (result is Tensor[S[0, "tp"]])
Cause (issue 7, left open): the static checker types softmax(dim=-1) of an S(0) operand V
(without the rank, -1 may be dim 0), the check mode knows the rank and keeps S(0); a
declared S(i) accepts a V value unchecked (the user states the layout), so the plugin
accepts the wrong S(1) claim that the check mode rejects.  Closing it needs either the rank
in static types or checking declared S(i) claims on V values.
"""

import pytest

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t1"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], "out_type": {"tp": "S1"}, "stmts": [["t0", "op", "add", ["x0", "x0"], "", "", "", ""], ["t1", "op", "softmax", ["t0"], "", "", "", ""]]}'


@pytest.mark.xfail(strict=True, reason="a declared S(i) accepts a V value unchecked; the static checker types softmax(dim=-1) of S(0) V (rank unknown), the check mode S(0)")
def test_replay() -> None:
    replay(PROGRAM)
