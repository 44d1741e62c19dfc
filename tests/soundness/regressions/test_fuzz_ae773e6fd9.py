"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[P["tp"], R["dp"]], x1: Tensor[V["tp"], S[1, "dp"]]) -> Tensor[V["tp"], S[1, "dp"]]:
        t0 = spmd.all_reduce(x1.detach(), "tp", src=V, dst=I, op="max")
        t1 = torch.where(t0 > 0, x1, x1)
        t2 = spmd.reduce_scatter(t0, "tp", src=R, dst=V)
        return t2
      global input shapes: x0: [4, 4], x1: [4, 4]
      mypy plugin : line 3: spmd-invariant-mix
      check mode  : line 4: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "tp", src=R, dst=V) to keep this rank's slice of dim 0, or reinterpret(x, "tp", src=R, dst=V) to keep the whole local value (each rank's copy as its own value)  [spmd-collective])
      numerics    : n/a the single-device program fails: no global meaning for reduce_scatter(R -> V)
      category    : disagreement
      DISAGREEMENT: plugin says line 3: spmd-invariant-mix, check mode says line 4: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "tp", src=R, dst=V) to keep this rank's slice of dim 0, or reinterpret(x, "tp", src=R, dst=V) to keep the whole local value (each rank's copy as its own value)  [spmd-collective])
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["dp", "tp"], "ending": ["return", "t2"], "inputs": [["x0", {"dp": "R", "tp": "P"}, [4, 4]], ["x1", {"dp": "S1", "tp": "V"}, [4, 4]]], "out_type": {"dp": "S1", "tp": "V"}, "stmts": [["t0", "coll", "all_reduce", ["x1"], "tp", "V", "I", "max"], ["t1", "op", "where", ["t0", "x1", "x1"], "", "", "", ""], ["t2", "coll", "reduce_scatter", ["t0"], "tp", "R", "V", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
