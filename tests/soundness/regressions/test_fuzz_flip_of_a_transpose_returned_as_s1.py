"""A differential-fuzzer disagreement (soundness/fuzz.py, session 52's seed 5205); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"]], x1: Tensor[R["tp"]], x2: Tensor[S[0, "tp"]]) -> Tensor[S[1, "tp"]]:
        t0 = x2.abs()
        t1 = t0.t()
        t2 = torch.flip(t1, [0])
        return t2
      global input shapes: x0: [4, 4], x1: [4, 4], x2: [4, 4]
      mypy plugin : line 5: return (the return value t2 of prog is Tensor[V["tp"]] but Tensor[S[1, "tp"]] is expected: it is V (S(-1) at rank >= 2, V at rank 1) on "tp" where S(1) is needed; the shard dims differ; redistribute(t2, "tp", src=S(-1), dst=S(1)))
      check mode  : accepted
      numerics    : equal

The plugin's conservative rejection by design, as for ``x.t()`` returned as S(1)
(test_fuzz_t_returned_as_s1), through a rank-dependent layout: the flip along dim 0 cuts the
shard dim at rank 1 only. Its fix did not say that S(-1) and S(1) are one dim at rank 2 (engine
collectives.same_dim_at_one_rank read only a plain S(i)); it does now, and the fuzzer takes the
pair (fuzz.same_dim_at_one_rank).
"""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t2"], "inputs": ['
           '["x0", {"tp": "R"}, [4, 4]], ["x1", {"tp": "R"}, [4, 4]], '
           '["x2", {"tp": "S0"}, [4, 4]]], "out_type": {"tp": "S1"}, "stmts": ['
           '["t0", "op", "abs", ["x2"], "", "", "", ""], ["t1", "op", "t", ["t0"], "", "", "", ""], '
           '["t2", "op", "flip0", ["t1"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
