"""A differential-fuzzer disagreement (soundness/fuzz.py, session 53's seed 5302); replayed here.

Found as (shrunk by hand to the one input it reads)::

    def prog(x1: Tensor[S[0, "tp"], P["dp"]]) -> torch.Tensor:
        t0 = x1.t()
        t1 = spmd.all_gather(t0, "tp", src=S(1), dst=R)
        t2 = t1.abs()
        return t2
      global input shapes: x1: [4, 4]
      mypy plugin : line 3: spmd-src-mismatch (all_gather(t0, "tp", src=S(1), ...) but t0 is S(-1) on "tp" (...); pass src=S(-1))
      check mode  : line 4: spmd-partial-nonlinear (Partial on "dp" (t1: Tensor[R["tp"], P["dp"]]) cannot go through abs ...)

The plugin's conservative rejection by design (docs/soundness.md, "Conservative"): it reads no
rank, and S(-1) is S(1) only at rank 2, so it refuses src=S(1) for the transposed S(0); the
check mode, at rank 2, accepts the gather and reports the program's next error, which the
plugin reports too.  The plugin's message now says why (the same-dim clause of a return's
mismatch), and the fuzzer takes the pair (fuzz.same_dim_at_one_rank).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t2"], "inputs": ['
           '["x1", {"dp": "P", "tp": "S0"}, [4, 4]]], "out_type": null, '
           '"stmts": [["t0", "op", "t", ["x1"], "", "", "", ""], '
           '["t1", "coll", "all_gather", ["t0"], "tp", "S1", "R", ""], '
           '["t2", "op", "abs", ["t1"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
