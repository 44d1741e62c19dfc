"""A differential-fuzzer disagreement (soundness/fuzz.py, session 51's seed 5103); replayed here.

Found as::

    def prog(x0: Tensor[S[0, "tp"], R["dp"]]) -> Tensor[S[1, "tp"], R["dp"]]:
        t0 = x0.t()
        return t0
      global input shapes: x0: [4, 4]
      mypy plugin : line 3: return (the return value t0 of prog is Tensor[R["dp"], S[-1, "tp"]] but Tensor[R["dp"], S[1, "tp"]] is expected: ... (S(-1) and S(1) are the same dim only of a 2-dim tensor: if the value always has 2 dims, write S(-1) where S(1) is written instead))
      check mode  : accepted
      numerics    : equal

The plugin's conservative rejection by design (docs/soundness.md, "Conservative"): it reads no
rank, and S(-1) is S(1) only at rank 2 (fuzz.same_dim_at_one_rank).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": ['
           '["x0", {"dp": "R", "tp": "S0"}, [4, 4]]], "out_type": {"dp": "R", "tp": "S1"}, '
           '"stmts": [["t0", "op", "t", ["x0"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
