"""Check mode says what the static checker says where the suggested fix decides the numbers
(the probes' losses: a vocab-parallel logsumexp, a z-loss, a MoE token count).  Each fix
named first here was pasted into the probe and measured on 4 gloo ranks (dp x tp = 2 x 2)
against a single-process reference: loss and gradients match (see tests/plugin/cases:
boundaries.test, messages.test, ops_multilinear.test for the static side).

Single process, no process group: only local ops run.
"""

from __future__ import annotations

import pytest
import torch

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

from check_values import mk, typed  # noqa: E402


def _message(fn) -> str:  # noqa: ANN001
    with pytest.raises(SpmdTypeError) as e:
        fn()
    return str(e.value)


def test_local_max_shift_is_named_first() -> None:
    # the max shift of a logsumexp never all-reduced: the V shift is the mistake, not the I log
    with spmd.typecheck():
        logits = typed(mk(3, 4), Tensor[S[1, "tp"]])
        lse_i = typed(mk(3), Tensor[I["tp"]])
        with torch.no_grad():
            m = logits.amax(dim=-1)
        msg = _message(lambda: lse_i + m)
    assert "spmd-invariant-mix" in msg
    # m is gradient-free here (the static checker, which does not see no_grad's scope for a
    # name, writes m.detach())
    assert 'all_reduce(m, "tp", src=V, dst=I, op="max") for a max' in msg
    assert msg.index("all_reduce(m") < msg.index('reinterpret(lse_i, "tp", src=I, dst=R)')


def test_a_non_linear_op_of_a_local_logsumexp_is_not_summed() -> None:
    # the message is the engine's (collectives.suggest): check mode names a value by its text
    # where it has one; a function's result is named by the call, z_loss(...), whose text
    # shows no reduction, so that message keeps the qualified "sum them"
    from spmd_mypy.engine.collectives import suggest
    from spmd_mypy.engine.types import INVARIANT, VARYING

    msg = suggest(VARYING, INVARIANT, "torch.logsumexp(logits, dim=-1).square()", "tp")
    assert "to sum them" not in msg
    assert "covers this rank's shard only" in msg and "then take the square" in msg
    summed = suggest(VARYING, INVARIANT, "torch.logsumexp(x, -1).square().sum()", "tp")
    assert ('spmd.all_reduce(spmd.sum(torch.logsumexp(x, -1).square(), out_partial_axes="tp"), '
            '"tp", src=P, dst=I)' in summed) and "all_gather" not in summed


def test_divisor_never_reduced_is_named_first() -> None:
    with spmd.typecheck():
        num = typed(mk(4), Tensor[P["dp"]])
        ntok = typed(torch.tensor(6.0), Tensor[V["dp"]])
        msg = _message(lambda: num / ntok)
    assert "spmd-partial-varying" in msg
    assert ('all_reduce(reinterpret(ntok, "dp", src=V, dst=P), "dp", src=P, dst=R) first if '
            "ntok is this rank's part of a count or a sum") in msg


def test_an_index_of_a_shard_is_not_gathered_or_summed() -> None:
    # probe-infer b8b: a greedy decode's argmax of this rank's vocab shard, declared R at the
    # vocab-parallel embedding.  The check mode sees an integer tensor (not the argmax that
    # made it): the ranks' indices stacked or summed are no token, and the fix named is the
    # engine's for an index (collectives.IndexValue), as the static checker's
    with spmd.typecheck():
        logits = typed(mk(3, 8), Tensor[S[1, "tp"]])
        with torch.no_grad():
            tok = logits.argmax(-1) + 4
        msg = _message(lambda: spmd.declare(tok, Tensor[R["tp"]]))
        assert "spmd-annotation" in msg
        assert "all_gather(tok," not in msg and "to sum them" not in msg
        assert "gather or reduce logits before the index op" in msg
        assert 'all_reduce(m, "tp", src=V, dst=R, op="max")' in msg
        # a mask: any (or every) rank's, not a sum of the ranks' masks
        done = tok == 3
        msg = _message(lambda: spmd.declare(done, Tensor[R["tp"]]))
        assert "all_gather(done," not in msg and "to sum them" not in msg
        assert 'all_reduce(done.int(), "tp", src=V, dst=R, op="max")' in msg


@spmd.checked
def _attend(q: Tensor[V["tp"]], k: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
    return (q @ k.mT).softmax(-1)


def test_r_passed_as_v_says_when_convert_and_when_reinterpret() -> None:
    # gathered keys (R) passed to a helper that computes on the whole value (its parameter V):
    # reinterpret is right there, convert would cut dim 0 (the batch); the message says when
    # each is right, in the static checker's words (collectives.suggest)
    with spmd.typecheck():
        q = typed(mk(3, 4), Tensor[V["tp"]])
        kf = typed(mk(6, 4), Tensor[spmd.R["tp"]])
        msg = _message(lambda: _attend(q, kf))
    assert "[spmd-annotation]" in msg and "but kf is R on \"tp\", not V" in msg, msg
    assert ('use convert(kf, "tp", src=R, dst=V) if each rank should keep only its slice of '
            "dim 0 (x[rank]") in msg, msg
    assert ('or reinterpret(kf, "tp", src=R, dst=V) if the whole value is this rank\'s own '
            "input (unchanged)") in msg, msg


# -- pipeline parallelism (a probe of pp x tp; the static side: pipeline_messages.test) ----------

def test_an_r_gradient_where_p_is_needed_leads_with_its_declaration() -> None:
    # a gradient received from the next stage declared with the activation's type (R on tp):
    # each tp rank holds its share (P); the pasted convert(R->P) kept tp rank 0's share only
    # (a weight's gradient off by 21.7), so the message leads with the declared type
    from spmd import R
    with spmd.typecheck():
        out = typed(mk(2, 4), Tensor[R["tp"], V["pp"]])
        g = typed(torch.ones(2, 4), Tensor[R["tp"], V["pp"]])
        msg = _message(lambda: out.backward(g))
    assert "spmd-duality" in msg
    assert ("if g holds this rank's share of the gradient (received from another stage, or "
            "computed by a backward), its declared type is wrong: declare it "
            'Tensor[V["pp"], P["tp"]] (spmd.grad_type of out\'s type) where it is made') in msg
    assert msg.index("its declared type is wrong") < msg.index('convert(g, "tp", src=R, dst=P)')


def test_a_partial_loss_read_names_the_hang_and_the_summand() -> None:
    # float(loss) on a pipeline's last stage (loss P on pp): all_reduce there hangs (stage 0
    # never calls it); this rank's summand is the reinterpret(P->V) of the detached loss
    with spmd.typecheck():
        loss = typed(mk(), Tensor[I["tp"], P["pp"]]).sum()
        msg = _message(lambda: float(loss))
    assert "spmd-partial-nonlinear" in msg
    assert 'all_reduce(loss, "pp", src=P, dst=R) first' in msg
    assert "a pipeline's last stage, hangs" in msg
    assert 'read reinterpret(loss.detach(), "pp", src=P, dst=V) instead' in msg


def test_a_varying_loss_held_by_one_rank_is_not_divided() -> None:
    # a loss V on pp computed by the last stage only (the others none): the sum of the
    # per-rank losses is that loss, dividing by the axis size would be wrong
    with spmd.typecheck():
        loss = typed(mk(), Tensor[I["tp"], V["pp"]]).sum()
        msg = _message(lambda: loss.backward())
    assert "spmd-backward" in msg
    assert ("where one rank holds the whole loss and the others none (a pipeline's last "
            "stage), reinterpret it as it is") in msg


# -- parameters and their optimizer state (the probe of checkpoints; docs/checkpoints.md) -------

class _Col(torch.nn.Module):
    w1: Tensor[S[0, "tp"]]

    def __init__(self, w1: torch.Tensor) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(w1)


def test_a_parameter_cut_by_hand_is_named_not_its_module() -> None:
    # declare_parameters(Col(shard_rows(...).clone())): the operand of the caller's call is the
    # module, not the parameter; the message named the module's constructor as the tensor to
    # convert (convert(Col(shard_rows(...).clone()), ...))
    with spmd.typecheck():
        full = typed(torch.randn(4, 3), Tensor[R["tp"]])
        msg = _message(lambda: spmd.declare_parameters(_Col(full[0:2].clone())))
        assert "spmd-annotation" in msg
        assert "but _Col.w1 is R on \"tp\"" in msg, msg
        assert "_Col(" not in msg, msg
        assert 'which this checker does not see, cut it with convert(whole, "tp", src=R, dst=S(0)) instead' in msg
        model = _Col(full[0:2].clone())
        msg = _message(lambda: spmd.declare_parameters(model))
        assert "but model.w1 is R on \"tp\"" in msg, msg


class _TwoSquare(torch.nn.Module):
    w1: Tensor[S[0, "tp"]]
    w2: Tensor[S[1, "tp"]]

    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(4, 4))
        self.w2 = torch.nn.Parameter(torch.randn(4, 4))


@pytest.mark.parametrize("foreach", [False, True])
def test_an_optimizer_state_of_another_parameters_layout_is_named(foreach: bool) -> None:
    # Adam's moments of w1 (S(0)) and w2 (S(1)) swapped on a reload (square weights: the
    # shapes agree): Adam's exp_avg.lerp_(grad) was reported on an unnamed "x" with a
    # redistribute of m.w1.grad, which is right; the moment is wrong (weights off by 0.016
    # after the step on 2 ranks without the check mode)
    with spmd.typecheck():
        m = spmd.declare_parameters(_TwoSquare())
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, foreach=foreach)
        m.w1.grad = typed(torch.ones(4, 4), Tensor[S[0, "tp"]])
        m.w2.grad = typed(torch.ones(4, 4), Tensor[S[1, "tp"]])
        layouts = {"w1": Tensor[S[0, "tp"]], "w2": Tensor[S[1, "tp"]]}
        for name, p in zip(["w2", "w1"], m.parameters()):  # the wrong order
            opt.state[p] = {"step": torch.tensor(1.0),
                            "exp_avg": typed(torch.zeros(4, 4), layouts[name]),
                            "exp_avg_sq": typed(torch.zeros(4, 4), layouts[name])}
        with pytest.raises(SpmdTypeError) as e:
            opt.step()  # torch's code writes the moment: named from the caller's frame
        msg = str(e.value)
    assert "spmd-inplace" in msg
    assert ("would update opt.state[m.w1]['exp_avg'] (Tensor[S[1, \"tp\"]]), an optimizer state "
            "of m.w1 (Tensor[S[0, \"tp\"]]), but the state is S(1) on \"tp\" where its parameter "
            "is S(0): a state tensor of another parameter's layout") in msg, msg
    assert "redistribute(" not in msg and "the gradient is not what is wrong" in msg, msg


def test_a_forgotten_dgrad_all_reduce_leads_with_the_all_reduce() -> None:
    # Megatron's LinearWithGradAccumulationAndAsyncCommunication.backward without its
    # all-reduce of grad_input (the probe's f8): the returned matmul is a pending partial
    # product on "tp", so the message calls it P and names the all-reduce, as the static
    # checker does, not "V to I is a gather"
    class Lin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input: Tensor[I["tp"]], weight: Tensor[S[0, "tp"]]) -> Tensor[S[-1, "tp"]]:  # noqa: ANN001
            ctx.save_for_backward(input, weight)
            return torch.matmul(input, weight.t())

        @staticmethod
        def backward(ctx, grad_output: Tensor[S[-1, "tp"]]) -> tuple[Tensor[I["tp"]], Tensor[S[0, "tp"]]]:  # noqa: ANN001
            input, weight = ctx.saved_tensors
            grad_input = grad_output.matmul(weight)  # the all-reduce of it forgotten
            grad_weight = grad_output.t().matmul(input)
            return grad_input, grad_weight

    with spmd.typecheck():
        x = typed(mk(2, 3).requires_grad_(), Tensor[I["tp"]])
        w = typed(mk(4, 3).requires_grad_(), Tensor[S[0, "tp"]])
        out = Lin.apply(x, w)
        g = typed(torch.ones(2, 4), Tensor[S[-1, "tp"]])
        msg = _message(lambda: out.backward(g))
    assert "spmd-duality" in msg, msg
    assert 'returns grad_input (Tensor[P["tp"]])' in msg, msg
    assert 'P to I is a reduction: use all_reduce(grad_input, "tp", src=P, dst=I)' in msg, msg
    assert "all_gather" not in msg, msg


def test_a_declared_gradient_fix_is_written_from_the_returned_value() -> None:
    # probe-paste F2: Megatron's column-parallel backward with x's gradient declared R.  The
    # fix is written from the returned g @ w's own type, V (from the declared R, its
    # convert(g @ w, "tp", src=R, dst=P) was refused when pasted), the reinterpret first in
    # a backward; the static checker's words (duality.test:
    # duality_declared_result_fix_from_the_returned_expression)
    import torch.nn.functional as F

    class ColLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:  # noqa: ANN001
            ctx.save_for_backward(x, w)
            return F.linear(x, w)

        @staticmethod
        def backward(ctx, g: Tensor[V["tp"]]) -> tuple[Tensor[R["tp"]], Tensor[S[0, "tp"]]]:  # noqa: ANN001
            x, w = ctx.saved_tensors
            return g @ w, g.flatten(0, -2).t() @ x.flatten(0, -2)

    with spmd.typecheck():
        x = typed(mk(3, 4).requires_grad_(), Tensor[R["tp"]])
        w = typed(mk(6, 4).requires_grad_(), Tensor[S[0, "tp"]])
        y = ColLinear.apply(x, w)
        msg = _message(lambda: y.backward(typed(torch.ones(3, 6), Tensor[V["tp"]])))
    assert msg == (
        'ColLinear.backward returns Tensor[R["tp"]] for input x (Tensor[R["tp"]]), whose '
        'gradient is Tensor[P["tp"]] (R on "tp" where P is needed); g @ w is Tensor[V["tp"]] '
        '(V on "tp" where P is needed): V to P: use reinterpret(g @ w, "tp", src=V, dst=P) to '
        "mean the sum of the ranks' values (a gradient: each rank's g @ w is its part of the "
        'sum), or convert(g @ w, "tp", src=V, dst=P) to keep each rank\'s values apart, and '
        'declare the result Tensor[P["tp"]]  [spmd-duality]'), msg


def test_the_real_and_imag_attributes_are_named_as_written() -> None:
    # session 41 probe (a channel-parallel FNO's |spectrum|^2 of a Partial): the message named
    # the operand x, no name of the caller's; it names oh.real / oh.imag as the static checker
    # does (tests/plugin/cases/casts_complex.test), and S(i) goes through them
    with spmd.typecheck():
        oh = typed(torch.randn(2, 5, 3, dtype=torch.complex128), Tensor[P["tp"]])
        msg = _message(lambda: oh.real ** 2)
        assert '(oh.real: Tensor[P["tp"]]) cannot go through pow' in msg
        assert 'all_reduce(oh.real, "tp", src=P, dst=R) first' in msg
        msg = _message(lambda: oh.imag.exp())
        assert '(oh.imag: Tensor[P["tp"]]) cannot go through exp' in msg
        xs = typed(torch.randn(4, 3, dtype=torch.complex64), Tensor[S[0, "tp"]])
        assert str(spmd.typeof(xs.real)) == str(spmd.typeof(xs.imag)) == str(spmd.typeof(xs))


def test_an_invariant_slice_beside_varying_heads_leads_with_the_per_head_fix() -> None:
    # probe-heads 2: a per-head lambda declared I and sliced the same on every rank, beside
    # this rank's heads; the static message led with a softmax recipe over the key dim
    with spmd.typecheck():
        s2 = typed(mk(1, 2, 3, 3), Tensor[V["tp"]])
        lam = typed(mk(4), Tensor[I["tp"]])
        a2 = torch.softmax(s2, dim=-1)
        msg = _message(lambda: lam[:2].view(1, 2, 1, 1) * a2)
    assert "spmd-invariant-mix" in msg
    assert ('if lam holds a value per index of a dim sharded on "tp" (a per-head weight beside '
            "this rank's heads), lam[:2] takes the same rows on every rank: declare lam S(0)"
            ) in msg, msg


def test_a_dot_product_over_the_shard_names_the_zero_dim_einsum() -> None:
    # torch.dot / vdot of S(0) vectors: the fix is spmd.einsum("k,k->", ...) (the engine's
    # implicit_partial_error, as statically: an einsum with an empty output is read 0-d there,
    # so its all-reduced R keeps an S(0) vector it scales S(0), where spmd.matmul(r, p, ...)
    # of two tensors of unknown rank was not); raised at the product's first use
    with spmd.typecheck():
        r = typed(mk(4), Tensor[S[0, "tp"]])
        p = typed(mk(4), Tensor[S[0, "tp"]])
        d = torch.dot(r, p)
        msg = _message(lambda: d.exp())
        assert 'spmd.einsum("k,k->", r, p, out_partial_axes="tp")' in msg, msg
        dv = torch.vdot(r, p)
        msg = _message(lambda: dv.exp())
        assert 'spmd.einsum("k,k->", r.conj(), p, out_partial_axes="tp")' in msg, msg


def test_a_partial_contraction_offers_this_ranks_own_value() -> None:
    # session 45: a chunked linear attention's per-rank state (fk, v: S(1) on the sequence)
    # passed to the later ranks is this rank's own value; the message ends with the operand
    # declared V, which then passes (the probe matched float64 on 2 and 4 gloo ranks)
    with spmd.typecheck():
        fk = typed(mk(2, 4, 3), Tensor[S[1, "tp"]])
        v = typed(mk(2, 4, 3), Tensor[S[1, "tp"]])
        msg = _message(lambda: torch.einsum("btd,bte->bde", fk, v).exp())
        assert ("if this rank's own contraction is meant (a per-rank state or total, as a "
                "chunked scan passes to the later ranks), declare an operand V first: "
                'spmd.declare(fk, Tensor[V["tp"]])') in msg, msg
        own = torch.einsum("btd,bte->bde", spmd.declare(fk, Tensor[V["tp"]]), v)
        assert spmd.typeof(own) == spmd.typeof(typed(mk(2, 3, 3), Tensor[V["tp"]]))


@spmd.checked
def _gated(z: Tensor[S[-1, "tp"]], out: Tensor[R["tp"]]) -> Tensor[I["tp"]]:
    return out * z.mean(-1, keepdim=True)  # the mean over the tp-sharded channels: pending


@spmd.checked
def _row_parallel(h: Tensor[S[-1, "tp"]], w: Tensor[S[1, "tp"]]) -> Tensor[I["tp"]]:
    return torch.nn.functional.linear(h, w)


def test_a_pending_sum_returned_as_whole_names_its_reduction() -> None:
    # session 45 (a Mamba block's gate): the static checker reports the mean at the mean; the
    # check mode said "V to I is a gather" at the return, whose fix (an all_gather) is wrong
    with spmd.typecheck():
        msg = _message(lambda: _gated(mk(2, 4), mk(2, 1)))
        assert 'mean over dim -1 of z (S(-1) on "tp") reduces the dim sharded on "tp"' in msg, msg
        assert "all_gather" not in msg
        msg = _message(lambda: _row_parallel(mk(2, 4), mk(3, 4)))
        assert 'sums over a dim sharded on "tp"' in msg and "all_gather" not in msg, msg
