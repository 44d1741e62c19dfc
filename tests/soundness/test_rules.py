"""CI slice of the rule soundness suite (issue 7 item 1; the full run is ``python -m soundness``).

The denotations on their own (no ranks), then one real 4-rank gloo world running a sample of
every op class on one axis of 4 ranks and on a 2x2 mesh: every accepted combination must
compute what its type promises (forward and backward), every rejected one must come with a
counterexample or be a listed conservative rejection.
"""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, shard  # noqa: E402

from soundness import rules  # noqa: E402
from soundness.denote import Mesh, Mismatch, denote  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _locals(mesh: Mesh, f) -> dict:
    return {c: torch.tensor([[float(f(c))]], dtype=torch.float64) for c in mesh.coords()}


def test_denotations_on_one_axis() -> None:
    mesh = Mesh(("a",), (3,))
    vals = _locals(mesh, lambda c: c[0] + 1)  # [1] [2] [3]
    assert denote(vals, [PARTIAL])[(None,)].item() == 6
    assert [denote(vals, [VARYING])[(i,)].item() for i in range(3)] == [1, 2, 3]
    assert denote(vals, [shard(1)], frozenset({0}))[(None,)].tolist() == [[1, 2, 3]]
    # S(i) outside a concatenation reading is a V (the list)
    assert denote(vals, [shard(0)])[(2,)].item() == 3
    with pytest.raises(Mismatch, match="not the same on every rank"):
        denote(vals, [REPLICATE])
    same = _locals(mesh, lambda c: 7)
    assert denote(same, [INVARIANT])[(None,)].item() == 7


def test_denotations_on_a_2x2_mesh_are_taken_axis_by_axis() -> None:
    mesh = Mesh(("a", "b"), (2, 2))
    vals = _locals(mesh, lambda c: 10 * c[0] + c[1])  # (0,0)=0 (0,1)=1 (1,0)=10 (1,1)=11
    d = denote(vals, [VARYING, PARTIAL])  # a list over a of sums over b
    assert d == {(0, None): d[(0, None)], (1, None): d[(1, None)]}
    assert d[(0, None)].item() == 1 and d[(1, None)].item() == 21
    assert denote(vals, [PARTIAL, PARTIAL])[(None, None)].item() == 22
    # S(0) on both axes concatenates in mesh order (a outermost)
    cat = denote(vals, [shard(0), shard(0)], frozenset({0, 1}))[(None, None)]
    assert cat.reshape(-1).tolist() == [0, 1, 10, 11]


def test_verdicts_come_from_the_engine() -> None:
    mesh = rules.MESHES["a2"]
    mul = rules.CASES["mul"]
    ok, out, _ = rules.verdict(mul, mesh, [(PARTIAL,), (REPLICATE,)])
    assert ok and out == (PARTIAL,)
    ok, _, errors = rules.verdict(mul, mesh, [(PARTIAL,), (PARTIAL,)])
    assert not ok and errors[0].startswith("spmd-partial-product")
    ok, _, errors = rules.verdict(rules.CASES["spmd.matmul"], mesh,
                                  [(REPLICATE,), (REPLICATE,)], (0,))
    assert not ok


@pytest.fixture(scope="module")
def slice_results() -> list[dict]:
    # about 10 combinations per op case and mesh: a few seconds of a 4-rank world
    return rules.run(world_sizes=(4,), sample=10, seed=7, timeout=240)


def test_every_accepted_combination_matches_and_every_rejected_one_has_a_counterexample(
        slice_results: list[dict]) -> None:
    bad = [r for r in slice_results if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative",
                                                       "pending-sum-MISMATCH")]
    assert not bad, "\n".join(f"{r['task']}: {r.get('counterexample') or r.get('passing')}"
                              for r in bad[:20])
    status = collections.Counter(r["status"] for r in slice_results)
    assert status["accepted-match"] > 100 and status["rejected-counterexample"] > 100, status
    sections = {r["section"] for r in slice_results}
    assert sections == set(rules.SECTIONS)
    assert {r["mesh"] for r in slice_results} == {"a4", "a2xb2"}


def test_the_seeds_partial_product_counterexample_is_found() -> None:
    """+[a] * +[b] is not the product of the sums: checked on a 2-rank world."""
    res = rules.run(world_sizes=(2,), cases=["mul"], timeout=240)
    pp = next(r for r in res if r["task"] == "[a2] mul({a:P}, {a:P})")
    assert pp["status"] == "rejected-counterexample"
    assert "no result type is correct" in pp["counterexample"]
    ir = next(r for r in res if r["task"] == "[a2] mul({a:I}, {a:R})")
    assert ir["status"] == "rejected-counterexample" and "gradient" in ir["counterexample"]
    rp = next(r for r in res if r["task"] == "[a2] mul({a:R}, {a:P})")
    assert rp["status"] == "accepted-match"


def test_a_zero_summand_keeps_a_partial() -> None:
    """p + 0 and where(c, p, 0.0) are P (each rank's zeros sum to zero), checked numerically
    on a 2-rank world; p + 1.5 is not (the scalar would be summed once per rank)."""
    res = rules.run(world_sizes=(2,), cases=["add zero", "where zero", "add scalar"], timeout=240)
    status = {r["task"]: r["status"] for r in res}
    assert status["[a2] add zero({a:P})"] == "accepted-match"
    assert status["[a2] where zero({a:R}, {a:P})"] == "accepted-match"
    assert status["[a2] add scalar({a:P})"] == "rejected-counterexample"
    assert not [t for t, s in status.items()
                if s in ("accepted-MISMATCH", "UNLISTED-conservative", "pending-sum-MISMATCH")]


def test_a_convolution_is_multilinear_with_a_bias_summand() -> None:
    """conv1d(x, w, b): a Partial input with a Replicate bias adds the bias once per rank (a
    counterexample), with a Partial bias it is P; every combination on a 2-rank world either
    matches or has a counterexample (the rule of F.linear, which bilinear shares)."""
    res = rules.run(world_sizes=(2,), cases=["conv1d"], timeout=240)
    status = {r["task"]: r["status"] for r in res}
    assert status["[a2] conv1d({a:P}, {a:R}, {a:R})"] == "rejected-counterexample"
    assert status["[a2] conv1d({a:P}, {a:R}, {a:P})"] == "accepted-match"
    assert status["[a2] conv1d({a:R}, {a:P}, {a:P})"] == "accepted-match"
    assert not [t for t, s in status.items()
                if s in ("accepted-MISMATCH", "UNLISTED-conservative", "pending-sum-MISMATCH")]


def test_ops_on_an_nchw_input_keep_the_shard_dims_they_act_along() -> None:
    """conv2d keeps the batch (S(1), the contracted channels, is V), max_pool2d and
    adaptive_avg_pool2d the batch and the channels, pixel_shuffle and pad (of the last dim)
    both, the norms the batch, batch_norm in training nothing (engine views.LAYOUT_OPS): each
    S(i) result checked forward and backward on a 2-rank world, every combination matching or
    with a counterexample."""
    cases = ["conv2d", "max_pool2d", "adaptive_avg_pool2d", "pixel_shuffle", "pixel_unshuffle",
             "pad", "pad reflect", "channel_shuffle", "local_response_norm", "group_norm",
             "instance_norm", "batch_norm eval", "batch_norm train"]
    res = rules.run(world_sizes=(2,), cases=cases, timeout=240)
    got = {r["task"]: (r["status"], r.get("engine")) for r in res}
    match = "accepted-match"
    for task, engine in [
            ("conv2d({a:S(0)}, {a:R}, {a:R})", "{a:S(0)}"), ("conv2d({a:S(1)}, {a:R}, {a:R})", "{a:V}"),
            ("max_pool2d({a:S(0)})", "{a:S(0)}"), ("max_pool2d({a:S(1)})", "{a:S(1)}"),
            ("adaptive_avg_pool2d({a:S(1)})", "{a:S(1)}"), ("pixel_shuffle({a:S(1)})", "{a:S(1)}"),
            ("pixel_unshuffle({a:S(0)})", "{a:S(0)}"), ("pad({a:S(1)})", "{a:S(1)}"),
            ("pad reflect({a:S(0)})", "{a:S(0)}"), ("channel_shuffle({a:S(1)})", "{a:V}"),
            ("local_response_norm({a:S(0)})", "{a:S(0)}"), ("group_norm({a:S(1)})", "{a:V}"),
            ("instance_norm({a:S(0)})", "{a:S(0)}"),
            ("batch_norm eval({a:S(0)}, {a:R}, {a:R})", "{a:S(0)}"),
            ("batch_norm train({a:S(0)})", "{a:V}")]:
        assert got[f"[a2] {task}"] == (match, engine), (task, got[f"[a2] {task}"])
    bad = [r for r in res if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative")]
    assert not bad, [(r["task"], r.get("counterexample") or r.get("passing")) for r in bad]


def test_a_sum_over_the_shard_dim_is_checked_against_the_pending_sum_model() -> None:
    """A sum over the shard dim (engine ops.reduced_partial_error, session 39) is rejected
    by the rule (pending until the code says P), and the harness checks its model on the
    ranks, not a conservative listing: the local sums read as P (spmd.sum's
    out_partial_axes) are the global sum, a mean's or a norm's read as P are not the whole's."""
    res = rules.run(world_sizes=(2,), cases=["sum", "sum(-1)", "mean(0)", "linalg.vector_norm"],
                    timeout=240)
    status = {r["task"]: r for r in res}
    for task in ("[a2] sum({a:S(0)})", "[a2] sum(-1)({a:S(1)})", "[a2] mean(0)({a:S(0)})",
                 "[a2] linalg.vector_norm({a:S(1)})"):
        assert status[task]["status"] == "pending-sum", status[task]
    assert "is the global sum" in status["[a2] sum({a:S(0)})"]["model"]
    assert not [t for t, r in status.items()
                if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative", "pending-sum-MISMATCH")]


def test_a_variance_over_the_shard_dim_is_checked_against_its_model() -> None:
    """A variance or standard deviation over the shard dim (engine ops.VARIANCE_REDUCTIONS,
    session 40; typed V, no error, before) is rejected by the rule, and the harness checks
    the model on the ranks: each rank's is its own block's (its V reading passes), read as
    P it is no variance of the whole; over a dim not sharded the shard dim stays."""
    res = rules.run(world_sizes=(2,), cases=["var(1)", "std"], timeout=240)
    status = {r["task"]: r for r in res}
    for task in ("[a2] var(1)({a:S(1)})", "[a2] std({a:S(0)})", "[a2] std({a:S(1)})"):
        assert status[task]["status"] == "pending-sum", status[task]
        assert "it is no" in status[task]["model"], status[task]
    assert status["[a2] var(1)({a:S(0)})"]["status"] == "accepted-match"
    assert not [t for t, r in status.items()
                if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative", "pending-sum-MISMATCH")]


def test_an_implicit_partial_sum_is_checked_against_the_reductions_that_take_it() -> None:
    """A contraction's implicit partial sum (spmd-global) passed to a typed reduction with
    src=P (spmd.all_reduce / reduce_scatter, Megatron's reduce_from_... and
    reduce_scatter_to_...: engine collectives.takes_pending) is taken as P: the harness checks
    the engine's verdict for each reduction on the ranks (session 40): matmul's is taken and
    read as P is the sum; F.linear(h, w, b) with an R bias is rejected (spmd-partial-affine,
    ops.claimed_partial_error) and read as P is not the sum (the bias once per rank)."""
    res = rules.run(world_sizes=(2,), cases=["linear", "matmul"], timeout=240)
    status = {r["task"]: r for r in res}
    biased = status["[a2] linear({a:S(1)}, {a:S(1)}, {a:R})"]
    assert biased["status"] == "conservative", biased
    assert "reject it (spmd-partial-affine)" in biased["taken"], biased
    assert "reduce_from_tensor_model_parallel_region" in biased["taken"], biased
    assert "reduce_scatter_to_sequence_parallel_region" in biased["taken"], biased
    product = status["[a2] matmul({a:S(1)}, {a:S(0)})"]
    assert "take it: read as P on a it is the sum" in product["taken"], product
    assert not [t for t, r in status.items()
                if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative", "pending-sum-MISMATCH")]


def test_a_diagonal_block_beside_a_redundant_partial_is_listed() -> None:
    """The quick run's one unlisted rejection (sessions 44-45): spmd.matmul({a:P, b:S(0)},
    {a:R, b:S(1)}, out_partial_axes=a,b) gets the diagonal-block error on b and the redundant
    out_partial_axes error on a, each a listed deliberate rejection: listed together too."""
    from types import SimpleNamespace

    from soundness import rules

    errors = ['spmd-global: matmul(x0, x1): mesh axis "b" shards dim 0 of x0 (x0: Tensor[P["a"], '
              'S[0, "b"]]) and dim 1 of x1 (x1: Tensor[R["a"], S[1, "b"]]), two dims that both '
              "stay in the result: each rank holds one diagonal block (its own part of each), no "
              "shard of the whole result nor anything a later op can use as one",
              'spmd-collective: spmd.matmul(..., out_partial_axes="a"): the local result is '
              'already P on "a" (an operand is Partial); drop "a" from out_partial_axes']
    assert rules._DIAGONAL_BLOCK in errors[0]
    task = SimpleNamespace(errors=errors, partial_axes=("a", "b"))
    assert rules._conservative_reason(task, []) == rules.DIAGONAL_BLOCK
    # the redundant declaration alone is not the diagonal block's
    alone = SimpleNamespace(errors=errors[1:], partial_axes=("a", "b"), case=None)
    assert rules._conservative_reason(alone, []) != rules.DIAGONAL_BLOCK


def test_a_diagonal_block_does_not_make_the_other_axis_a_redundant_partial() -> None:
    """The full run's task building stopped on spmd.matmul({a:R, b:S(0)}, {a:S(1), b:S(1)},
    out_partial_axes=a) (session 46, 8 combinations on a2xb2): the check mode's diagonal
    block on b made partial_op read the ranked layout on a (S(1): a redundant-partial error)
    while the static checker, with no error, reads a rank-free V there and accepts the claim.
    A second error must not come from what only the ranks tell: the check mode now gives the
    diagonal block alone, which the harness lists as a check-mode-only rejection."""
    from soundness import rules

    tasks = rules.build_tasks("a2xb2", cases=["spmd.matmul"])
    assert tasks
    pair = [t for t in tasks
            if [[str(lt) for lt in op] for op in t.in_types] == [["R", "S(0)"], ["S(1)", "S(1)"]]]
    assert pair, [t.in_types for t in tasks[:3]]
    for t in pair:
        assert t.errors and all(rules._DIAGONAL_BLOCK in e for e in t.errors), t.errors


def test_a_diagonal_block_beside_a_free_shard_partial_is_listed() -> None:
    """Session 46's full run: spmd.einsum("ij,jk->ik", {a:R, b:S(0)}, {a:S(1), b:S(1)},
    out_partial_axes=a) gets the diagonal block on b and, in both checkers (the equation
    gives the ranks), the free-shard declaration on a (the local result is S(1) there): each
    a listed rejection alone, 12 such pairs (spmd.einsum, spmd.linear) were unlisted."""
    from types import SimpleNamespace

    from soundness import rules

    tasks = rules.build_tasks("a2xb2", cases=["spmd.einsum", "spmd.linear"])
    pairs = [t for t in tasks if len(t.errors) == 2
             and any(rules._DIAGONAL_BLOCK in e for e in t.errors)
             and any("another block of its dim" in e for e in t.errors)]
    assert len(pairs) >= 12, len(pairs)
    for t in pairs:
        assert rules._conservative_reason(t, []) == rules.DIAGONAL_BLOCK, t
    # the free-shard declaration alone stays its own listing
    alone = SimpleNamespace(errors=[e for e in pairs[0].errors if "another block" in e],
                            partial_axes=pairs[0].partial_axes, case=pairs[0].case)
    assert rules._conservative_reason(alone, []) == rules.FREE_SHARD_PARTIAL
