"""The fuzzer's own crash (session 46, seed 0): a program whose inferred output type is S2
(torch.stack of an S1 value) made ``fuzz_model.dual`` raise KeyError: 'S2' (its table knew
S0 and S1 only); replayed here, judged like any other."""

from soundness.fuzz_replay import replay

PROGRAM = ('{"axes": ["tp"], "ending": ["return", "t2"], "inputs": [["x0", {"tp": "S1"}, [4, 4]]], '
           '"out_type": {"tp": "S2"}, "stmts": [["t0", "op", "add", ["x0", "x0"], "", "", "", ""], '
           '["t1", "op", "add", ["t0", "t0"], "", "", "", ""], '
           '["t2", "op", "stack", ["t1", "t1"], "", "", "", ""]]}')


def test_replay() -> None:
    replay(PROGRAM)
