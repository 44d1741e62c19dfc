"""The differential fuzzer (soundness/fuzz.py, issue 7 item 2).

- the reference semantics on small hand-made cases (no gloo): how the global value of
  each type is made into rank values and read back, what the collectives mean;
- the three verdicts on hand-written programs (one accepted, one rejected with a
  counterexample, one where the plugin and check mode must name the same error);
- the CI slice: a bounded fuzz run with a fixed seed (a few dozen programs on a real
  4-rank gloo world): no disagreement, no crash, and the programs cover both verdicts.

The full bounded run: ``python -m soundness.fuzz --seconds 300 --seed 1``.
"""

from __future__ import annotations

import pytest
import torch

from soundness import fuzz_ref as fr
from soundness.fuzz_model import Program, Stmt

FORMS_2AX = [{"dp": a, "tp": b} for a in ("R", "I", "V", "P", "S0") for b in ("R", "V", "P", "S1")]


@pytest.mark.parametrize("t", FORMS_2AX, ids=lambda t: f"{t['dp']}-{t['tp']}")
def test_locals_denote_the_global_value(t: dict[str, str]) -> None:
    gen = torch.Generator().manual_seed(0)
    g = fr.make_global(t, (4, 4), gen, leaf=False)
    loc = fr.to_locals(g, t, gen)
    back = fr.from_locals(loc, t)
    fr.compare(back, g, "round trip")
    # one tensor along every axis that is not a list
    assert len(fr.distinct(g)) == 2 ** sum(f == "V" for f in t.values())


def test_replicate_must_agree_and_partial_sums() -> None:
    gen = torch.Generator().manual_seed(0)
    t = {"dp": "V", "tp": "P"}
    g = fr.make_global(t, (3,), gen, leaf=False)
    loc = fr.to_locals(g, t, gen)
    assert not torch.allclose(loc[(0, 0)], g[(0, 0)])  # a summand, not the value
    with pytest.raises(fr.Mismatch, match="ranks disagree"):
        fr.from_locals(loc, {"dp": "V", "tp": "R"})


def _val(fn) -> fr.Val:  # noqa: ANN001
    return {c: fn(c) for c in fr.COORDS}


def test_collective_meanings() -> None:
    x = torch.arange(8.0, dtype=torch.float64).reshape(2, 4)
    one = _val(lambda c: x)  # one tensor on every coordinate
    lst = {c: x + 10 * c[1] for c in fr.COORDS}  # a list along "tp"
    st = Stmt("t", "coll", "all_gather", ("x",), "tp", "V", "R")
    got = fr.collective_meaning(st, lst)
    assert torch.equal(got[(0, 0)], torch.stack([x, x + 10]))
    assert got[(0, 0)] is got[(0, 1)]
    rs = fr.collective_meaning(Stmt("t", "coll", "reduce_scatter", ("x",), "tp", "P", "V"), one)
    assert torch.equal(rs[(1, 1)], x[1]) and torch.equal(rs[(1, 0)], x[0])
    vp = fr.collective_meaning(Stmt("t", "coll", "reinterpret", ("x",), "tp", "V", "P"), lst)
    assert torch.equal(vp[(0, 0)], 2 * x + 10)
    rp = fr.collective_meaning(Stmt("t", "coll", "reinterpret", ("x",), "tp", "R", "P", "expert"), one)
    assert torch.equal(rp[(0, 1)], 2 * x)
    same = fr.collective_meaning(Stmt("t", "coll", "all_reduce", ("x",), "tp", "P", "R"), one)
    assert same is one
    with pytest.raises(fr.RefError):
        fr.collective_meaning(Stmt("t", "coll", "all_reduce", ("x",), "tp", "P", "V"), one)


def test_program_json_round_trip() -> None:
    p = Program(("dp", "tp"), [("x0", {"dp": "V", "tp": "S0"}, (4, 4))],
                [Stmt("t0", "op", "relu", ("x0",)),
                 Stmt("t1", "coll", "all_gather", ("t0",), "tp", "S0", "R")],
                ("return", "t1"), {"dp": "V", "tp": "R"})
    assert Program.from_json(p.to_json()) == p
    src = p.render()
    assert 'def prog(x0: Tensor[S[0, "tp"], V["dp"]]) -> Tensor[R["tp"], V["dp"]]:' in src
    assert 'spmd.all_gather(t0, "tp", src=S(0), dst=R)' in src


@pytest.mark.parametrize(("dp", "src", "dst", "kept_out"), [
    ("S0", "S0", "V", True),   # seed 5011's disagreement: V splits dim 0, which dp shards
    ("S0", "V", "V", True),
    ("S0", "S1", "S0", True),  # S(0) on dp and on tp after: _same_dim_twice sees this one too
    ("S0", "S1", "S1", False),  # the block exchange on dim 1 only
    ("V", "S0", "V", False),   # dp shards no dim
    ("S1", "S0", "V", False),
])
def test_an_all_to_all_on_a_dim_another_axis_shards_is_not_drawn(dp: str, src: str, dst: str,
                                                                   kept_out: bool) -> None:
    """The global value of such a result is not defined without a partition spec (which axis
    is major on the dim): the generator keeps out of it, as of two S(i) on one dim."""
    from soundness.fuzz import _collective_on_a_dim_another_axis_shards, check_mode

    x = {"dp": dp, "tp": "S1" if src == "S1" else "V"}
    prog = Program(("dp", "tp"), [("x0", x, (4, 4))], [Stmt("t0", "op", "neg", ("x0",))])
    probe = check_mode(prog, all_vars=True)
    s = Stmt("t1", "coll", "all_to_all", ("x0",), "tp", src, dst)
    assert _collective_on_a_dim_another_axis_shards(probe, s) is kept_out


@pytest.mark.parametrize(("name", "dp", "src", "kept_out"), [
    ("all_gather", "S0", "S0", True),   # seed 5208 of session 52: the tp blocks inside dp's
    ("convert", "S0", "S0", True),
    ("all_gather", "S1", "S0", False),  # dp shards another dim: one order
    ("all_gather", "S0", "V", False),   # a V gathers along a new dim
    ("all_gather", "S0", "P", False),
])
def test_a_gather_of_a_dim_another_axis_shards_is_not_drawn(name: str, dp: str, src: str,
                                                            kept_out: bool) -> None:
    """A gather from S(i) where another axis shards dim i concatenates each dp shard's tp
    blocks (dp-major), the reference the tp ranks' dp-global tensors (tp-major): no global
    value without a partition spec, as for the all_to_all above."""
    from soundness.fuzz import _collective_on_a_dim_another_axis_shards, check_mode

    prog = Program(("dp", "tp"), [("x0", {"dp": dp, "tp": "V"}, (4, 4))],
                   [Stmt("t0", "op", "neg", ("x0",))])
    probe = check_mode(prog, all_vars=True)
    s = Stmt("t1", "coll", name, ("x0",), "tp", src, "R")
    assert _collective_on_a_dim_another_axis_shards(probe, s) is kept_out


# --------------------------------------------------------------------------------------
# gloo: the three verdicts, and the CI slice (one shared world for the session)


@pytest.fixture(scope="module")
def fuzzer():  # noqa: ANN201
    from soundness.fuzz_replay import shared_fuzzer

    return shared_fuzzer()


TP_P_DP_V = {"dp": "V", "tp": "P"}
R2 = {"dp": "R", "tp": "R"}


def _prog(stmts: list[Stmt], out: dict[str, str] | None, inputs=None) -> Program:  # noqa: ANN001
    inputs = inputs or [("x0", TP_P_DP_V, (4, 4)), ("x1", R2, (4, 4))]
    return Program(("dp", "tp"), inputs, stmts, ("return", stmts[-1].target), out)


def test_accepted_program_is_numerically_right(fuzzer) -> None:  # noqa: ANN001
    p = _prog([Stmt("t0", "op", "matmul", ("x0", "x1")),
               Stmt("t1", "coll", "all_reduce", ("t0",), "tp", "P", "R"),
               Stmt("t2", "op", "tanh", ("t1",))], {"dp": "V", "tp": "R"})
    out = fuzzer.judge(p)
    assert out.category == "accepted-equal", out.report()


def test_rejected_program_has_a_counterexample(fuzzer) -> None:  # noqa: ANN001
    p = _prog([Stmt("t0", "op", "add", ("x0", "x1"))], None)
    out = fuzzer.judge(p)
    assert out.mypy.codes == ("spmd-partial-affine",) and out.check.codes == out.mypy.codes
    assert out.disagreement is None
    # the same program claiming P on "tp": the sum counts x1 once per rank
    p2 = _prog([Stmt("t0", "op", "add", ("x0", "x1"))], TP_P_DP_V)
    out2 = fuzzer.judge(p2)
    assert out2.num.status == "mismatch", out2.report()


def test_wrong_declared_output_is_both_rejected_and_wrong(fuzzer) -> None:  # noqa: ANN001
    p = _prog([Stmt("t0", "op", "mul", ("x0", "x1"))], {"dp": "V", "tp": "R"})
    out = fuzzer.judge(p)
    assert out.mypy.codes == ("return",) and out.check.codes == ("return",), out.report()
    assert out.category == "rejected-counterexample", out.report()


def test_backward_of_a_replicated_loss_is_rejected_and_wrong(fuzzer) -> None:  # noqa: ANN001
    p = Program(("dp", "tp"), [("x0", R2, (4, 4))], [Stmt("t0", "op", "sum_all", ("x0",))],
                ("backward", "t0"))
    out = fuzzer.judge(p)
    assert "spmd-backward" in out.mypy.codes and out.check.codes == ("spmd-backward",)
    assert out.category == "rejected-counterexample", out.report()


def test_ci_slice(fuzzer) -> None:  # noqa: ANN001
    """A bounded run with a fixed seed: every program's three verdicts agree."""
    before, programs = dict(fuzzer.counts), fuzzer.programs
    result = fuzzer.run(200.0, seed=7, chunk=12, save=False, max_programs=24)
    reports = "\n\n".join(f.report() for f in fuzzer.failures)
    assert result["disagreements"] == 0, reports
    assert result["crashes"] == 0
    assert fuzzer.programs - programs >= 10, result  # the time bound only cuts a slow machine
    new = {k: fuzzer.counts[k] - before[k] for k in before}
    assert new["accepted-equal"] > 0 and new["rejected-counterexample"] > 0, new


def test_op_sweep_of_a_reduction_along_the_last_dim(fuzzer) -> None:  # noqa: ANN001
    """soundness.op_sweep: ``x.var(-1)`` over the six input forms on "tp": each returned, and
    summed and backpropagated where the check mode accepts it (R, I, V, S(0): 8 programs;
    a P into a variance and the S(1) form are rejected: 2). The S(1) form is the pair of
    ``fuzz.reduced_at_one_rank``; ``mean_last`` of S(1) is a statement the generator keeps
    out of (its result V where its operand is S(1))."""
    from soundness.op_sweep import one_statement_programs, sweep

    assert len(one_statement_programs("var_last")) == 6
    assert len(one_statement_programs("mul_colsum")) == 36
    result = sweep(["var_last", "mean_last"], fuzzer)
    assert result.disagreements == [], "\n".join(o.report() for o in result.disagreements)
    assert result.outside_the_model >= 1 and result.programs >= 10, result


def test_only_a_pending_sum_may_be_reported_at_two_lines() -> None:
    """fuzz.agree: the plugin reports a sum over the shard dim at the sum, the check mode at
    its result's first use (pending); the pair agrees only for that error, the same sum,
    and the check mode's line after the plugin's."""
    from soundness.fuzz import Verdict, agree

    head = 'sum over every dim of t0 (S(0) on "tp") reduces the dim sharded on "tp": each'
    static = Verdict(3, ("spmd-global",), head)
    assert agree(static, Verdict(4, ("spmd-global",), head))
    assert not agree(static, Verdict(2, ("spmd-global",), head))  # before the sum
    assert not agree(static, Verdict(4, ("spmd-backward",), "t1.backward() needs"))
    assert agree(static, Verdict(4, ("spmd-global",), head.replace("of t0", "of x")))  # no source
    other = head.replace("every dim", "dim 0")
    assert not agree(static, Verdict(4, ("spmd-global",), other))  # another sum
    assert not agree(Verdict(3, ("spmd-global",), "a contraction"),
                     Verdict(4, ("spmd-global",), "a contraction"))
    # the plugin's layout of a softmax along dim -1 of S(0) depends on the tensor's rank, the
    # check mode's is the one at the real rank (session 50's seed 5012, regression 705409d1d2)
    by_rank = head.replace("(S(0) on", "(V (S(0) at rank >= 2, V at rank 1) on")
    assert agree(Verdict(3, ("spmd-global",), by_rank), Verdict(4, ("spmd-global",), head))
    assert not agree(Verdict(3, ("spmd-global",), by_rank),
                     Verdict(4, ("spmd-global",), head.replace("S(0)", "S(1)")))
    assert not agree(Verdict(3, ("spmd-global",), by_rank),
                     Verdict(4, ("spmd-global",), head.replace('on "tp"', 'on "dp"')))
    # the plugin's S(-1) of x.t() is the check mode's S(1) at rank 2 (session 51's seed 5105,
    # regression test_fuzz_sum_of_a_transpose); S(-1) is never S(-2), nor S(1) S(0)
    back = head.replace("S(0)", "S(-1)")
    assert agree(Verdict(3, ("spmd-global",), back),
                 Verdict(4, ("spmd-global",), head.replace("S(0)", "S(1)")))
    assert not agree(Verdict(3, ("spmd-global",), back),
                     Verdict(4, ("spmd-global",), head.replace("S(0)", "S(-2)")))
    assert not agree(Verdict(3, ("spmd-global",), head.replace("S(0)", "S(1)")),
                     Verdict(4, ("spmd-global",), head))
    # a V alternative at rank 2 stands for a shard dim the plugin cannot place: x0 @ x1 of an
    # R x0 and an S(1) x1 (session 53's op sweep); a V at rank 1 only is not one at rank 2
    v_at_2 = head.replace("(S(0) on", "(V (V at rank >= 2, S(0) at rank 1) on")
    assert agree(Verdict(3, ("spmd-global",), v_at_2),
                 Verdict(4, ("spmd-global",), head.replace("S(0)", "S(1)")))
    assert not agree(Verdict(3, ("spmd-global",), v_at_2.replace("rank >= 2", "rank >= 3")),
                     Verdict(4, ("spmd-global",), head.replace("S(0)", "S(1)")))


def test_only_a_scan_or_normalisation_along_the_shard_dim_is_check_mode_only() -> None:
    """fuzz.agree: ``F.softmax(x0, dim=-1)`` of an S(1) x0 is along the shard dim only at
    rank 2 (a 4-d S(1) is head-parallel attention's scores): the plugin, reading no rank,
    accepts; the check mode, at the real rank, rejects (session 46's fuzz run, seed 0,
    regression d584bec162). No other check-mode-only rejection agrees."""
    from soundness.fuzz import Verdict, agree

    accepted = Verdict()
    norm = ('softmax along dim -1 of x0 (Tensor[S[1, "tp"]]) normalises the dim sharded on '
            '"tp": each rank computes the max')
    scan = 'cumsum along dim -1 of x0 (Tensor[S[1, "tp"]]) scans the dim sharded on "tp"'
    assert agree(accepted, Verdict(2, ("spmd-global",), norm))
    assert agree(accepted, Verdict(2, ("spmd-global",), scan))
    assert not agree(accepted, Verdict(2, ("spmd-global",), "a contraction of x0"))
    assert not agree(accepted, Verdict(2, ("spmd-collective",), norm))
    assert not agree(Verdict(2, ("spmd-global",), norm), accepted)  # the plugin's alone
    # both reject the statement, the plugin for another error of it (a Partial into the
    # softmax: session 50's seed 5014, regression ca5c33d7e6); at another line they differ
    partial = Verdict(2, ("spmd-partial-nonlinear",), "Partial on \"tp\" cannot go through softmax")
    assert agree(partial, Verdict(2, ("spmd-global",), norm))
    assert not agree(partial, Verdict(3, ("spmd-global",), norm))
    assert not agree(partial, Verdict(2, ("spmd-global",), "a contraction of x0"))


def test_a_varying_loss_and_a_pending_sum_at_the_backward_agree() -> None:
    """fuzz.agree: ``torch.add(torch.stack([x, x]), x)`` of an S(0) x, summed, then
    backpropagated. The plugin, reading no rank, cannot align the 3-d S(1) with the 2-d
    S(0), decays the sum to V and reports the backward of a Varying loss; the check mode
    has the sum of an S(1) and reports the pending partial sum at its first use, the same
    backward (session 50's seed 5014, regression test_fuzz_varying_loss_of_a_broadcast).
    Only that pair: the same line, the same axis, a sharded operand, a Varying loss."""
    from soundness.fuzz import Verdict, agree

    pending = Verdict(5, ("spmd-global",), 'sum over every dim of x (S(1) on "tp") reduces the '
                      'dim sharded on "tp": each rank\'s result is its part of a sum')
    loss = ('t2.backward() needs the loss Invariant or Partial on "tp", but it is Varying '
            '(Tensor[V["tp"]]): each rank holds a different loss')
    assert agree(Verdict(5, ("spmd-backward",), loss), pending)
    assert not agree(Verdict(4, ("spmd-backward",), loss), pending)  # another line
    assert not agree(Verdict(5, ("spmd-backward",), loss.replace('"tp"', '"dp"')), pending)
    assert not agree(Verdict(5, ("spmd-backward",), loss.replace(  # the loss Replicate
        "Varying (", "Replicate (")), pending)
    assert not agree(Verdict(5, ("spmd-backward",), loss), Verdict(  # a V operand: the plugin
        5, ("spmd-global",), pending.note.replace("(S(1) on", "(V on")))  # would see the sum
    assert not agree(Verdict(5, ("spmd-backward",), loss), Verdict(5, ("spmd-global",),
                                                                   "a contraction of x"))
    # a loss Varying on tp and Replicate on dp: its Varying axes are named
    mixed = ('t2.backward() needs the loss Invariant or Partial on "dp" and "tp", but it is '
             'Varying on "tp" and Replicate on "dp" (Tensor[R["dp"], V["tp"]]): on "tp"')
    assert agree(Verdict(5, ("spmd-backward",), mixed), pending)
    assert not agree(Verdict(5, ("spmd-backward",), mixed), Verdict(
        5, ("spmd-global",), pending.note.replace('on "tp")', 'on "dp")')))


def test_a_matmuls_diagonal_block_is_check_mode_only() -> None:
    """fuzz.agree: ``x2 @ x0`` of an S(0) x2 and an S(1) x0 on one axis is a diagonal block
    when both are 2-d and a batch-sharded matmul at other ranks: the plugin, reading no rank,
    types V; the check mode, at the real ranks, rejects (session 51's seed 5101, regression
    test_fuzz_matmul_diagonal_block). An einsum states its ranks: both checkers report it."""
    from soundness.fuzz import Verdict, agree

    block = ('matmul(x2, x0): mesh axis "dp" shards dim 0 of x2 (x2: Tensor[S[0, "dp"]]) and '
             'dim 1 of x0 (x0: Tensor[S[1, "dp"]]), two dims that both stay in the result: '
             'each rank holds one diagon')
    assert agree(Verdict(), Verdict(2, ("spmd-global",), block))
    assert not agree(Verdict(), Verdict(2, ("spmd-global",), block.replace("matmul(", "einsum(")))
    assert not agree(Verdict(), Verdict(2, ("spmd-global",), block.split(",")[0]))
    assert not agree(Verdict(2, ("spmd-global",), block), Verdict())  # the plugin's alone


def test_a_negative_dim_claimed_positive_is_the_plugins_conservative_rejection() -> None:
    """fuzz.agree: ``x.t()`` of an S(0) x is S(-1) to the plugin (S(0) at rank 1, S(1) at
    rank 2); returned as S(1) it is the same layout only at rank 2, which the plugin cannot
    read: it rejects and says so, the check mode accepts (session 51's seed 5103, regression
    test_fuzz_t_returned_as_s1). Only with that hint, and only where the check mode accepts."""
    from soundness.fuzz import Verdict, agree

    note = ('the return value t0 of prog is Tensor[S[-1, "tp"]] but Tensor[S[1, "tp"]] is '
            'expected: it is S(-1) on "tp" where S(1) is needed; the shard dims differ; '
            'redistribute(t0, "tp", src=S(-1), dst=S(1)) (S(-1) and S(1) are the same dim only '
            'of a 2-dim tensor: if the value always has 2 dims, write S(-1) where S(1) is written')
    assert agree(Verdict(3, ("return",), note), Verdict())
    assert not agree(Verdict(3, ("return",), note.split(" (S(-1)")[0]), Verdict())
    assert not agree(Verdict(3, ("spmd-global",), note), Verdict())
    assert not agree(Verdict(3, ("return",), note), Verdict(2, ("spmd-global",), "another"))
    assert "same dim only" not in str(Verdict(3, ("return",), note))  # reports keep 200 chars


def test_a_gathers_src_counted_from_the_other_end_is_the_plugins_conservative_rejection() -> None:
    """fuzz.agree: ``all_gather(x.t(), "tp", src=S(1), dst=R)`` of an S(0) x: the plugin's
    S(-1) is S(1) only at rank 2, so it refuses the src and says why; the check mode accepts
    the gather and reports the program's next error, if any (session 53's seed 5302,
    regression test_fuzz_gather_of_a_transpose_with_src_s1). Not with the check mode's error
    at the gather's line or before it."""
    from soundness.fuzz import Verdict, agree

    note = ('all_gather(t0, "tp", src=S(1), ...) but t0 is S(-1) on "tp" (t0: Tensor[S[-1, '
            '"tp"]]); pass src=S(-1) (S(-1) and S(1) are the same dim only of a 2-dim tensor: '
            'if the value always has 2 dims, write S(-1) where S(1) is written instead)')
    later = Verdict(4, ("spmd-partial-nonlinear",), 'Partial on "dp" (t1: ...) cannot go')
    assert agree(Verdict(3, ("spmd-src-mismatch",), note), Verdict())
    assert agree(Verdict(3, ("spmd-src-mismatch",), note), later)
    assert not agree(Verdict(3, ("spmd-src-mismatch",), note), Verdict(3, ("spmd-global",), "x"))
    assert not agree(Verdict(3, ("spmd-src-mismatch",), note), Verdict(2, ("spmd-global",), "x"))
    assert not agree(Verdict(3, ("spmd-src-mismatch",), note.split(" (S(-1)")[0]), later)
    assert not agree(Verdict(3, ("return",), note), later)  # a return is the last line


def test_a_reduction_along_a_dim_counted_from_the_other_end_is_check_mode_only() -> None:
    """fuzz.agree: ``x.var(-1)`` of an S(1) x reduces the shard dim only at rank 2: the
    plugin, reading no rank, keeps V; the check mode, at the real rank, rejects (session 53's
    one-statement sweep of its new ops). A reduction whose dim and shard dim are counted from
    one end is the plugin's error too: no such pair."""
    from soundness.fuzz import Verdict, agree

    def var(dim: int, shard: int) -> str:
        return (f'var over dim {dim} of x0 (S({shard}) on "tp") reduces the dim sharded on "tp": '
                f"each rank's var is its own block's variance")
    assert agree(Verdict(), Verdict(2, ("spmd-global",), var(-1, 1)))
    assert agree(Verdict(), Verdict(2, ("spmd-global",), var(0, -2)))
    assert not agree(Verdict(), Verdict(2, ("spmd-global",), var(1, 1)))
    assert not agree(Verdict(), Verdict(2, ("spmd-global",), var(-1, -1)))
    assert not agree(Verdict(), Verdict(2, ("spmd-inplace",), var(-1, 1)))
    assert not agree(Verdict(2, ("spmd-global",), var(-1, 1)), Verdict())  # the plugin's alone


def test_a_pending_sum_used_in_its_statement_may_break_the_uses_rule_first() -> None:
    """fuzz.agree: ``x0 * x1.sum(0)`` of an I x0 and an S(0) x1: the plugin reports the sum
    and types its result unknown after the error; the check mode reports the pending sum's
    use by the use's rule, an I beside a V (session 53's one-statement sweep, mul_colsum).
    Only on that line, and only where the check mode finds a V on the sum's axis."""
    from soundness.fuzz import Verdict, agree

    pending = Verdict(2, ("spmd-global",), 'sum over dim 0 of x1 (S(0) on "tp") reduces the dim '
                      'sharded on "tp": each rank\'s result is its part of a sum')
    mix = ('Invariant on "tp" (x0: Tensor[I["tp"]]) cannot mix with Varying (y: Tensor[V["tp"]])'
           " in mul: its gradient would need an all-reduce that mul never issues")
    assert agree(pending, Verdict(2, ("spmd-invariant-mix",), mix))
    assert not agree(pending, Verdict(3, ("spmd-invariant-mix",), mix))  # another line
    assert not agree(pending, Verdict(2, ("spmd-invariant-mix",), mix.replace('"tp"', '"dp"')))
    assert not agree(Verdict(2, ("spmd-global",), "a contraction of x1"),
                     Verdict(2, ("spmd-invariant-mix",), mix))


def test_an_inplace_write_of_a_lower_shard_dim_is_check_mode_only() -> None:
    """fuzz.agree: ``b.add_(x)`` of an S(1) b and an S(0) x may be a lower-rank x broadcast
    from the back (its dim 0 is b's dim 1), so the plugin, reading no rank, accepts; the check
    mode rejects the same-rank write (session 52's seed 5203, regression
    test_fuzz_inplace_write_of_a_lower_dim). A higher dim written into a lower one is the
    plugin's error too (broadcasting only moves a value's dims right): no such pair."""
    from soundness.fuzz import Verdict, agree

    def stored(value: int, target: int) -> str:
        return (f'add_ would write x2 (Tensor[R["dp"], S[{value}, "tp"]]), Shard({value}) on "tp", '
                f'into x (Tensor[R["dp"], S[{target}, "tp"]]), Shard({target}) there: each '
                f"rank's block of dim {value} would be stored as its block of dim {target}, "
                f"which no shape check catches when the two dims have one size (a square weight)")
    assert agree(Verdict(), Verdict(2, ("spmd-inplace",), stored(0, 1)))
    assert not agree(Verdict(), Verdict(2, ("spmd-inplace",), stored(1, 0)))
    assert not agree(Verdict(), Verdict(2, ("spmd-global",), stored(0, 1)))
    assert not agree(Verdict(), Verdict(2, ("spmd-inplace",), "add_ would change x on \"tp\""))


def test_the_check_modes_line_is_read_whole() -> None:
    """fuzz.check_mode keeps the error's first line whole (it was cut at 200 characters, past
    which the in-place write's dims fall when both axes are typed)."""
    from soundness.fuzz import Verdict, agree, check_mode

    xs = [("x1", {"dp": "R", "tp": "S1"}, (4, 4)), ("x2", {"dp": "R", "tp": "S0"}, (4, 4))]
    probe = check_mode(Program(("dp", "tp"), xs, [Stmt("t0", "op", "add_", ("x1", "x2"))],
                               ("return", "t0")))
    assert probe.verdict.codes == ("spmd-inplace",)
    assert len(probe.verdict.note) > 200 and "stored as its block of dim 1" in probe.verdict.note
    assert agree(Verdict(), probe.verdict)


def test_every_collective_beside_every_type_on_the_other_axis(fuzzer) -> None:  # noqa: ANN001
    """Each collective of the fuzzer's table (every src/dst pair it draws, op="avg"/"max",
    expert_mode) on one axis of the 2 x 2 mesh, with each type on the other axis: what the
    check mode accepts must be numerically right on the 4 gloo ranks. (Both adapters type a
    collective with the one engine call, check_collective; the fuzzer found a max over tp of
    a value P on dp accepted, seed 5112 of session 51: this sweep found it and its three
    twins.) Statements whose result the reference cannot denote are left out, as the
    generator leaves them out."""
    import itertools

    from soundness.fuzz import check_mode, numerics, outside_the_model, value_seed
    from soundness.fuzz_model import COLLECTIVES, FORMS, collective_extras

    judged, wrong = 0, []
    for name, (srcs, dsts) in sorted(COLLECTIVES.items()):
        cases = ((src, dst, extra, axis, other)
                 for src, dst, axis, other in itertools.product(srcs, dsts, ("tp", "dp"), FORMS)
                 for extra in ("", *collective_extras(name, src)))
        for src, dst, extra, axis, other in cases:
            if src.startswith("S") and src == other:
                continue  # two axes on one dim: no global value
            x = ("x0", {axis: src, "dp" if axis == "tp" else "tp": other}, (4, 4))
            s = Stmt("t0", "coll", name, ("x0",), axis, src, dst, extra)
            after = check_mode(Program(("dp", "tp"), [x], [s]), all_vars=True)
            if after.runtime_error is not None or not after.verdict.accepted:
                continue
            if outside_the_model(check_mode(Program(("dp", "tp"), [x]), all_vars=True), after, s):
                continue
            prog = Program(("dp", "tp"), [x], [s], ("return", "t0"), after.types.get("t0"))
            judged += 1
            num = numerics(prog, fuzzer.pool, value_seed(prog))
            if check_mode(prog).verdict.accepted and num.status == "mismatch":
                wrong.append(f"{prog.render()}  {num.detail}")
    assert judged >= 400, judged
    assert not wrong, "\n".join(wrong)
