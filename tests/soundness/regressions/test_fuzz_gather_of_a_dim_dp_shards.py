"""A differential-fuzzer disagreement (soundness/fuzz.py, session 52's seed 5208); replayed here.

Found as::

    def prog(x0: Tensor[V["tp"], S[0, "dp"]]) -> Tensor[R["tp"], S[0, "dp"]]:
        t0 = x0.abs()
        t1 = t0.abs()
        t2 = spmd.all_gather(t1, "tp", src=S(0), dst=R)
        t3 = t2.abs()
        return t3
      global input shapes: x0: [4, 4]
      mypy plugin : accepted
      check mode  : accepted
      numerics    : mismatch the output at mesh coordinate (dp, tp) = (0, 0): max |diff| 1.57

Not a wrong verdict: the gather concatenates the tp blocks inside each dp shard (dp-major),
the reference the tp ranks' dp-global tensors (tp-major); with dp sharding dim 1 instead the
numbers agree. Local types do not say which axis is major on a dim two axes shard, so the
generator keeps out of such a gather (fuzz._collective_on_a_dim_another_axis_shards), as of the
all_to_all of seed 5011. The replay judges the program as the generator now sees it: the
statement is outside the model.
"""

from soundness.fuzz import _collective_on_a_dim_another_axis_shards, check_mode
from soundness.fuzz_model import Program

PROGRAM = ('{"axes": ["dp", "tp"], "ending": ["return", "t3"], "inputs": ['
           '["x0", {"dp": "S0", "tp": "V"}, [4, 4]]], "out_type": {"dp": "S0", "tp": "R"}, '
           '"stmts": [["t0", "op", "abs", ["x0"], "", "", "", ""], '
           '["t1", "op", "abs", ["t0"], "", "", "", ""], '
           '["t2", "coll", "all_gather", ["t1"], "tp", "S0", "R", ""], '
           '["t3", "op", "abs", ["t2"], "", "", "", ""]]}')


def test_the_gather_is_outside_the_model() -> None:
    prog = Program.from_json(PROGRAM)
    before = check_mode(Program(prog.axes, prog.inputs, prog.stmts[:2]), all_vars=True)
    assert _collective_on_a_dim_another_axis_shards(before, prog.stmts[2])
