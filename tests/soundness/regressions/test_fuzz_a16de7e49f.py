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
Cause: the static checker typed softmax(dim=-1) of an S(0) operand plain V (without the
rank, -1 may be dim 0) while the check mode knows the rank and keeps S(0); a declared S(i)
accepts a V value, so the plugin accepted the wrong S(1) claim.  Fixed: the static layout is
worked out at every rank ("S(0) at rank >= 2, V at rank 1") and a claim is checked at the
ranks it allows (S(1) needs rank >= 2, where the value is S(0)): both reject it now.
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t1"], "inputs": [["x0", {"tp": "S0"}, [4, 4]]], "out_type": {"tp": "S1"}, "stmts": [["t0", "op", "add", ["x0", "x0"], "", "", "", ""], ["t1", "op", "softmax", ["t0"], "", "", "", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
