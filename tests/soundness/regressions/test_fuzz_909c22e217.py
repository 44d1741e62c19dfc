"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"]], x1: Tensor[S[0, "tp"]]) -> Tensor[S[0, "tp"]]:
        t0 = torch.add(x1, x0)
        return t0
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): shape (4, 4) != (2, 4)
      category    : disagreement
      DISAGREEMENT: accepted but numerically wrong: the output at mesh coordinate (dp, tp) = (0, 0): shape (4, 4) != (2, 4)
"""

import pytest

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t0"], "inputs": [["x0", {"tp": "R"}, [2, 4]], ["x1", {"tp": "S0"}, [2, 4]]], "out_type": {"tp": "S0"}, "stmts": [["t0", "op", "add", ["x1", "x0"], "", "", "", ""]]}'


@pytest.mark.xfail(strict=True, reason='types carry no shapes: an elementwise op of an S(i) operand with one that spans dim i (here S(0) local [1, 4] broadcast against R [2, 4]) is typed S(i) by both checkers, but the concatenation of the results is not the single-device result')
def test_replay() -> None:
    replay(PROGRAM)
