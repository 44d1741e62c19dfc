"""Custom autograd Functions with SPMD-annotated forward/backward that compute with raw
torch.distributed calls inside (an uneven ``all_to_all_single``, which ``spmd.all_to_all``
cannot express): in check mode ``Fn.apply`` has forward's declared types, as the static
checker gives them (SPEC section 5); its tensor arguments are checked against forward's
parameters with the static checker's error; outside check mode nothing changes."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import REPLICATE, VARYING, SpmdType

F64 = torch.float64
AXIS = "x"


def _splits(rank: int, world: int) -> tuple[list[int], list[int]]:
    """(rows this rank sends to each rank, rows it receives from each): uneven."""
    send = [rank + j + 1 for j in range(world)]
    recv = [j + rank + 1 for j in range(world)]
    return send, recv


class _UnevenAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[V["x"]], send: list[int], recv: list[int]) -> Tensor[V["x"]]:
        ctx.splits = (send, recv)
        out = x.new_empty((sum(recv),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx: Any, g: Tensor[V["x"]]) -> tuple[Tensor[V["x"]], None, None]:
        send, recv = ctx.splits
        out = g.new_empty((sum(send),) + tuple(g.shape[1:]))
        dist.all_to_all_single(out, g.contiguous(), send, recv)
        return out, None, None


def _input(rank: int, world: int) -> torch.Tensor:
    send, _ = _splits(rank, world)
    rows = sum(send)
    return (torch.arange(rows * 3, dtype=F64).reshape(rows, 3) + 100 * rank).requires_grad_()


def _expected(rank: int, world: int) -> torch.Tensor:
    parts = []
    for j in range(world):
        send_j, _ = _splits(j, world)
        xj = _input(j, world).detach()
        start = sum(send_j[:rank])
        parts.append(xj[start:start + send_j[rank]])
    return torch.cat(parts)


def check_apply_typed(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(_input(ctx.rank, ctx.world), Tensor[V["x"]])
            y = _UnevenAllToAll.apply(x, send, recv)
            assert spmd.typeof(y) == SpmdType.of({AXIS: VARYING}), spmd.typeof(y)
            assert_close(y.detach(), _expected(ctx.rank, ctx.world))
            # the checks downstream of the dispatch are on: y is V, not P
            try:
                spmd.all_reduce(y.sum(0), AXIS, src=P, dst=R)
            except SpmdTypeError as e:
                assert e.code == "spmd-src-mismatch", e
            else:
                raise AssertionError("a V result passed as src=P was not caught")
            loss = spmd.reinterpret((y * y).sum(), AXIS, src=V, dst=P)
            loss.backward()
            assert spmd.typeof(x.grad) == SpmdType.of({AXIS: VARYING})
        assert_close(x.grad, 2 * x.detach())  # the backward sent each row's gradient home


def check_apply_argument_mismatch(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            r = spmd.declare(_input(ctx.rank, ctx.world), Tensor[R["x"]])
            try:
                _UnevenAllToAll.apply(r, send, recv)  # raises before forward: no collective
            except SpmdTypeError as e:
                assert e.code == "spmd-mismatch", e
                assert str(e).startswith(
                    'argument r (parameter "x" of _UnevenAllToAll.apply) is Tensor[R["x"]] but '
                    'Tensor[V["x"]] is expected: it is R on "x" where V is needed'), str(e)
            else:
                raise AssertionError("an R argument for a V parameter was not caught")
        dist.barrier()


def check_off_untouched(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    torch_apply = torch.autograd.Function.__dict__["apply"]
    x = _input(ctx.rank, ctx.world)
    y = _UnevenAllToAll.apply(x, send, recv)
    assert spmd.typeof(y) is None and spmd.typeof(x) is None
    assert torch.autograd.Function.__dict__["apply"] is torch_apply
    with spmd.typecheck():
        assert torch.autograd.Function.__dict__["apply"] is not torch_apply
    assert torch.autograd.Function.__dict__["apply"] is torch_apply  # put back
    z = _UnevenAllToAll.apply(x, send, recv)
    assert spmd.typeof(z) is None and spmd.typeof(x) is None
    assert_close(y.detach(), _expected(ctx.rank, ctx.world))
    (y * y).sum().backward()
    assert_close(x.grad, 2 * x.detach())


# ZeRO-3 prefetch, typed (README: "Overlap"): the next layer's all-gather is a raw async
# collective inside a custom Function whose forward/backward are annotated; the Function's
# annotations type the gathered parameter (R) and its gradient (reduce-scattered to S(0)).

class _Prefetch:
    """The next layer's all-gather in flight: its output buffer and work handle."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.buf: Optional[torch.Tensor] = None
        self.work: Any = None


class _GatherPrefetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, shard: Tensor[S[0, "x"]], nxt: Optional[Tensor[S[0, "x"]]],
                pf: _Prefetch) -> Tensor[R["x"]]:
        n = dist.get_world_size(pf.group)
        if pf.work is None:  # nothing in flight (the first layer)
            full = shard.new_empty((n * shard.shape[0],) + tuple(shard.shape[1:]))
            dist.all_gather_into_tensor(full, shard, group=pf.group)
        else:
            pf.work.wait()
            assert pf.buf is not None
            full = pf.buf
        pf.buf, pf.work = None, None
        if nxt is not None:  # the next layer's gather, overlapping this layer's compute
            pf.buf = nxt.new_empty((n * nxt.shape[0],) + tuple(nxt.shape[1:]))
            pf.work = dist.all_gather_into_tensor(pf.buf, nxt, group=pf.group, async_op=True)
        return full

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> tuple[Tensor[S[0, "x"]], None, None]:
        return spmd.reduce_scatter(g, "x", src=P, dst=S(0)), None, None


_LAYERS, _D = 3, 4


def _shards(ctx: Ctx) -> list[torch.Tensor]:
    rows = _D // ctx.world
    out = []
    for i in range(_LAYERS):
        full = torch.linspace(-1, 1, _D * _D, dtype=F64).reshape(_D, _D) * (i + 1) / _LAYERS
        out.append(full[ctx.rank * rows:(ctx.rank + 1) * rows].clone().requires_grad_())
    return out


def _zero3_forward(ctx: Ctx, check: bool, prefetch: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The loss and the shards' gradients of a small ZeRO-3 stack (x V on the axis)."""
    import contextlib
    shards = _shards(ctx)
    x0 = torch.linspace(-1, 1, 3 * _D, dtype=F64).reshape(3, _D) + ctx.rank
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck() if check else contextlib.nullcontext():
            typed = [spmd.declare(s, Tensor[S[0, AXIS]]) for s in shards]
            x = spmd.declare(x0, Tensor[V[AXIS]])
            pf = _Prefetch(ctx.mesh("1d").get_group(AXIS))
            for i, shard in enumerate(typed):
                if prefetch:
                    nxt = typed[i + 1] if i + 1 < len(typed) else None
                    w = _GatherPrefetch.apply(shard, nxt, pf)
                    if check:
                        assert spmd.typeof(w) == SpmdType.of({AXIS: REPLICATE}), spmd.typeof(w)
                else:
                    w = spmd.all_gather(shard, AXIS, src=S(0), dst=R)
                x = torch.tanh(x @ w.T)
            loss = spmd.reinterpret((x * x).sum(), AXIS, src=V, dst=P)
            loss.backward()
            if check:
                for s in shards:
                    assert spmd.typeof(s.grad) == spmd.typeof(s), spmd.typeof(s.grad)
    return loss.detach(), [s.grad for s in shards]


def check_prefetch_in_function(ctx: Ctx, name: str) -> None:
    """The prefetching Function, in the check mode and outside, computes what the
    synchronous typed all_gather computes (loss and every shard's gradient)."""
    ref_loss, ref_grads = _zero3_forward(ctx, check=False, prefetch=False)
    for check in (False, True):
        loss, grads = _zero3_forward(ctx, check=check, prefetch=True)
        assert_close(loss, ref_loss)
        for g, r in zip(grads, ref_grads):
            assert_close(g, r)


class _ColumnLinearForgot(torch.autograd.Function):
    """rt_megatron_fns.ColumnLinear with the backward all-reduce of the input's gradient
    forgotten (statically: tests/plugin/cases/saved_tensors.test)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[I["x"]], w: Tensor[V["x"]]) -> Tensor[V["x"]]:
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx: Any, g: Tensor[V["x"]]) -> tuple[Tensor[I["x"]], Tensor[V["x"]]]:
        x, w = ctx.saved_tensors
        gx = g @ w
        return gx, g.t() @ x


def _mlp(ctx: Ctx, column: Any, check: bool) -> tuple[torch.Tensor, ...]:
    """relu(x @ w1.T) @ w2.T through the column- then the row-parallel Function, w1 sharded by
    rows and w2 by columns over the ranks; (loss, x.grad, w1.grad, w2.grad)."""
    import rt_megatron_fns as fns

    n, r = ctx.world, ctx.rank
    gen = torch.Generator().manual_seed(11)
    x0, w10, w20 = (torch.randn(*s, generator=gen, dtype=F64) for s in ((3, 4), (2 * n, 4), (5, 2 * n)))
    c = torch.randn(3, 5, generator=gen, dtype=F64)
    x = x0.clone().requires_grad_()
    w1 = w10[2 * r:2 * r + 2].clone().requires_grad_()
    w2 = w20[:, 2 * r:2 * r + 2].clone().requires_grad_()
    with contextlib.ExitStack() as stack:
        if check:
            stack.enter_context(spmd.typecheck())
            spmd.declare(x, Tensor[I["x"]])
            spmd.declare(w1, Tensor[V["x"]])
            spmd.declare(w2, Tensor[V["x"]])
            c = spmd.declare(c, Tensor[I["x"]])
        z = fns.RowLinear.apply(torch.relu(column.apply(x, w1)), w2)
        loss = (z * c).sum()
        loss.backward()
    return loss.detach(), x.grad, w1.grad, w2.grad


def check_linear_saved_tensors(ctx: Ctx, name: str) -> None:
    """Megatron's column/row-parallel linear Functions, backward computed on ctx.saved_tensors
    (rt_megatron_fns.py; the static checker passes them, and reports the forgotten all-reduce):
    in the check mode and outside, the loss and every gradient are the unsharded float64
    reference's.  Forgotten, the input's gradient is each rank's partial sum (measured: off the
    reference), and the check mode raises spmd-duality at the backward."""
    n, r = ctx.world, ctx.rank
    gen = torch.Generator().manual_seed(11)
    x0, w10, w20 = (torch.randn(*s, generator=gen, dtype=F64) for s in ((3, 4), (2 * n, 4), (5, 2 * n)))
    c = torch.randn(3, 5, generator=gen, dtype=F64)
    x, w1, w2 = (t.clone().requires_grad_() for t in (x0, w10, w20))
    ref = ((torch.relu(x @ w1.t()) @ w2.t()) * c).sum()
    ref.backward()
    import rt_megatron_fns as fns

    with spmd.set_mesh(ctx.mesh("1d")):
        for check in (False, True):
            loss, gx, g1, g2 = _mlp(ctx, fns.ColumnLinear, check)
            with spmd._checking.suspended():
                assert_close(loss, ref.detach())
                assert_close(gx, x.grad)
                assert_close(g1, w1.grad[2 * r:2 * r + 2])
                assert_close(g2, w2.grad[:, 2 * r:2 * r + 2])
        _, gx, _, _ = _mlp(ctx, _ColumnLinearForgot, False)
        off = float((gx - x.grad).abs().max())
        assert off > 0.1, off
        try:
            _mlp(ctx, _ColumnLinearForgot, True)
        except SpmdTypeError as e:
            assert e.code == "spmd-duality", e
            assert str(e).startswith('_ColumnLinearForgot.backward returns gx (Tensor[V["x"]]) as '
                                     'the gradient of input x (Tensor[I["x"]])'), str(e)
        else:
            raise AssertionError("the forgotten backward all-reduce was not caught")
        dist.barrier()


# A Megatron-style fused vocab-parallel cross entropy with label smoothing (typed collectives,
# a hand-written backward): forward's result is checked against its declared type at
# Fn.apply.  The mistake: the smoothing term's mean of the log-probs taken over this rank's
# vocab shard only (a V on "x" returned where the declared I is) gives each rank another
# loss, off by a few hundredths; the check mode accepted it (it gave the result the declared
# type) where the static checker reports it.  Since session 39 the check mode stops it
# earlier, at the first use of the mean over the shard dim (a pending partial sum).  The
# logits are F.linear's S(-1) output, passed for forward's S(1) parameter: one dim of a 2-d
# tensor (Fn.apply rejected it).

def _ce_parts(logits: Tensor[S[1, "x"]], target: torch.Tensor, lo: int, hi: int) -> Any:
    m = spmd.all_reduce(logits.detach().amax(dim=-1), AXIS, src=V, dst=I, op="max")
    shifted = logits - m.unsqueeze(-1)
    outside = (target < lo) | (target >= hi)
    local_t = torch.where(outside, 0, target - lo)
    picked = shifted.gather(-1, local_t.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    tgt = spmd.all_reduce(spmd.reinterpret(picked, AXIS, src=V, dst=P), AXIS, src=P, dst=I)
    exp = shifted.exp()
    sum_exp = spmd.all_reduce(spmd.reinterpret(exp.sum(dim=-1), AXIS, src=V, dst=P), AXIS,
                              src=P, dst=I)
    probs = exp / sum_exp.unsqueeze(-1)
    return torch.log(sum_exp) - tgt, probs, local_t, outside


class _SmoothedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor[S[1, "x"]], target: torch.Tensor, lo: int, hi: int,
                vocab: int, eps: float) -> Tensor[I["x"]]:
        nll, probs, local_t, outside = _ce_parts(logits, target, lo, hi)
        lp = spmd.reinterpret(torch.log(probs).sum(dim=-1), AXIS, src=V, dst=P)
        mean_log_probs = spmd.all_reduce(lp, AXIS, src=P, dst=I) / vocab
        loss = (1.0 - eps) * nll - eps * mean_log_probs
        ctx.save_for_backward(probs, local_t, outside)
        ctx.eps, ctx.vocab = eps, vocab
        return loss

    @staticmethod
    def backward(ctx: Any, g: Tensor[I["x"]]
                 ) -> tuple[Tensor[S[1, "x"]], None, None, None, None, None]:
        probs, local_t, outside = ctx.saved_tensors
        onehot = torch.zeros_like(probs).scatter_(-1, local_t.unsqueeze(-1), 1.0)
        onehot = onehot * (~outside).unsqueeze(-1)
        grad = probs - (1.0 - ctx.eps) * onehot - ctx.eps / ctx.vocab
        return grad * g.unsqueeze(-1), None, None, None, None, None


class _SmoothedCELocalMean(_SmoothedCE):
    @staticmethod
    def forward(ctx: Any, logits: Tensor[S[1, "x"]], target: torch.Tensor, lo: int, hi: int,
                vocab: int, eps: float) -> Tensor[I["x"]]:
        nll, probs, local_t, outside = _ce_parts(logits, target, lo, hi)
        mean_log_probs = torch.log(probs).mean(dim=-1)  # this rank's vocab shard only
        loss = (1.0 - eps) * nll - eps * mean_log_probs
        ctx.save_for_backward(probs, local_t, outside)
        ctx.eps, ctx.vocab = eps, vocab
        return loss


def check_fused_ce_result_is_checked(ctx: Ctx, name: str) -> None:
    tokens, hidden, vloc, eps = 5, 3, 4, 0.1
    vocab = vloc * ctx.world
    gen = torch.Generator().manual_seed(7)
    h = torch.randn(tokens, hidden, dtype=F64, generator=gen)
    w_full = torch.randn(vocab, hidden, dtype=F64, generator=gen)
    target = torch.randint(0, vocab, (tokens,), generator=gen)
    lo, hi = ctx.rank * vloc, (ctx.rank + 1) * vloc
    # the reference: the whole vocab on one rank (float64)
    w_ref = w_full.clone().requires_grad_()
    ref = F.cross_entropy(F.linear(h, w_ref), target, label_smoothing=eps, reduction="none")
    ref.mean().backward()
    assert w_ref.grad is not None

    def run(fn: Any, check: bool) -> tuple[torch.Tensor, torch.Tensor]:
        w = w_full[lo:hi].clone().requires_grad_()
        with spmd.typecheck() if check else contextlib.nullcontext():
            hr = spmd.declare(h, Tensor[R["x"]]) if check else h
            ws = spmd.declare(w, Tensor[S[0, "x"]]) if check else w
            loss = fn.apply(F.linear(hr, ws), target, lo, hi, vocab, eps)
            loss.mean().backward()
        assert w.grad is not None
        return loss.detach(), w.grad

    with spmd.set_mesh(ctx.mesh("1d")):
        for check in (False, True):  # the correct Function: the reference's numbers, both ways
            loss, grad = run(_SmoothedCE, check)
            assert_close(loss, ref.detach())
            assert_close(grad, w_ref.grad[lo:hi])
        loss, _ = run(_SmoothedCELocalMean, False)  # outside the check mode: wrong numbers
        off = (loss - ref.detach()).abs().max().item()
        assert off > 1e-3, off
        try:
            run(_SmoothedCELocalMean, True)
        except SpmdTypeError as e:
            # the mean over the vocab shard is a pending partial sum (engine
            # ops.reduced_partial_error, session 39): stopped at its first use, the loss's
            # line, before forward returns (it was the return's spmd-mismatch until then)
            assert e.code == "spmd-global", e
            assert str(e).startswith(
                'mean over dim -1 of torch.log(probs) (S(1) on "x") reduces the dim sharded on '
                '"x": each rank\'s mean covers its block only'), str(e)
        else:
            raise AssertionError(f"the local-shard smoothing term (loss off by {off:.4f}) was "
                                 "accepted")
        dist.barrier()


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "autograd-fn", (
        check_apply_typed, check_apply_argument_mismatch, check_off_untouched,
        check_prefetch_in_function, check_linear_saved_tensors,
        check_fused_ce_result_is_checked))
