"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.

Found as::

    def prog(x0: Tensor[R["tp"], R["dp"]], x1: Tensor[R["tp"], R["dp"]], x2: Tensor[R["tp"], I["dp"]]) -> Tensor[R["tp"], V["dp"]]:
        t0 = spmd.reduce_scatter(x2, "dp", src=R, dst=V)
        return t0
      global input shapes: x0: [4, 4], x1: [4, 4], x2: [4, 4]
      mypy plugin : line 2: spmd-src-mismatch (reduce_scatter(x2, "dp", src=R, ...) but x2 is I on "dp" (x2: Tensor[R["tp"], I["dp"]]); I to V is a local conversion: use convert(x2, "dp", src=I, dst=V) if each rank should keep only its slice of di)
      check mode  : line 2: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "dp", src=R, dst=V) if each rank should keep only its slice of dim 0 (x[rank], dim 0 of the axis si)
      numerics    : n/a the single-device program fails: no global meaning for reduce_scatter(R -> V)
      category    : disagreement
      DISAGREEMENT: plugin says line 2: spmd-src-mismatch (reduce_scatter(x2, "dp", src=R, ...) but x2 is I on "dp" (x2: Tensor[R["tp"], I["dp"]]); I to V is a local conversion: use convert(x2, "dp", src=I, dst=V) if each rank should keep only its slice of di), check mode says line 2: spmd-collective (reduce_scatter(src=R, dst=V) is not a valid transition; R to V is a local conversion: use convert(x, "dp", src=R, dst=V) if each rank should keep only its slice of dim 0 (x[rank], dim 0 of the axis si)
"""

from soundness.fuzz_replay import replay

PROGRAM = '{"axes": ["dp", "tp"], "ending": ["return", "t0"], "inputs": [["x0", {"dp": "R", "tp": "R"}, [4, 4]], ["x1", {"dp": "R", "tp": "R"}, [4, 4]], ["x2", {"dp": "I", "tp": "R"}, [4, 4]]], "out_type": {"dp": "V", "tp": "R"}, "stmts": [["t0", "coll", "reduce_scatter", ["x2"], "dp", "R", "V", ""]]}'


def test_replay() -> None:
    replay(PROGRAM)
