"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[V["tp"]], x1: Tensor[R["tp"]]) -> Tensor[S[0, "tp"]]:
        t0 = torch.add(x1, x1)
        t1 = torch.add(x0, t0)
        t2 = spmd.all_to_all(t1, "tp", src=V, dst=S(0))
        return t2
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): max |diff| 4
      category    : disagreement
      DISAGREEMENT: accepted but numerically wrong: the output at mesh coordinate (dp, tp) = (0, 0): max |diff| 4

Cause: the fuzzer's own reference read all_to_all(V -> S(0)) as keeping the
concatenation on dim 0; as documented (runtime/spmd/_collectives.py) a one-dim exchange
permutes the blocks. Fixed in soundness/fuzz_ref.py; the three verdicts now agree.
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t2"], "inputs": [["x0", {"tp": "V"}, [4, 4]], ["x1", {"tp": "R"}, [4, 4]]], "out_type": {"tp": "S0"}, "stmts": [["t0", "op", "add", ["x1", "x1"], "", "", "", ""], ["t1", "op", "add", ["x0", "t0"], "", "", "", ""], ["t2", "coll", "all_to_all", ["t1"], "tp", "V", "S0", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
