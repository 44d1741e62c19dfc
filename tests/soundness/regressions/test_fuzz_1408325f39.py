"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        t0 = spmd.all_gather(x0, "tp", src=V, dst=I)
        t1 = spmd.reduce_scatter(t0, "tp", src=R, dst=V)
        return t1
      global input shapes: x0: [4, 4]
      mypy plugin : line 3: spmd-src-mismatch (reduce_scatter(t0, "tp", src=R, ...) but t0 is I on "tp" (t0: Tensor[I["tp"]]); I to V is a local conversion: use convert(t0, "tp", src=I, dst=V) if each rank should keep only its slice of dim 0 (x[ra)
      check mode  : line 3: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "tp", src=R, dst=V) if each rank should keep only its slice of dim 0 (x[rank], dim 0 of the axis si)
      numerics    : n/a the single-device program fails: no global meaning for reduce_scatter(R -> V)
      category    : disagreement
      DISAGREEMENT: plugin says line 3: spmd-src-mismatch (reduce_scatter(t0, "tp", src=R, ...) but t0 is I on "tp" (t0: Tensor[I["tp"]]); I to V is a local conversion: use convert(t0, "tp", src=I, dst=V) if each rank should keep only its slice of dim 0 (x[ra), check mode says line 3: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "tp", src=R, dst=V) if each rank should keep only its slice of dim 0 (x[rank], dim 0 of the axis si)
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["tp"], "ending": ["return", "t1"], "inputs": [["x0", {"tp": "V"}, [4, 4]]], "out_type": {"tp": "V"}, "stmts": [["t0", "coll", "all_gather", ["x0"], "tp", "V", "I", ""], ["t1", "coll", "reduce_scatter", ["t0"], "tp", "R", "V", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
