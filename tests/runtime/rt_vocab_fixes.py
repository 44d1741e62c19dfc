"""Vocab-parallel losses of an RL post-training step (the rl probe of session 38), run in the
check mode on a gloo world with the logits' last dim sharded on "x": README's entropy and KL
(the max all-reduced with op="max", the sum of exps all-reduced to R, then spmd.sum over the
shards) and the logsumexp over the ranks that the spmd-invariant-mix message offers for a
local logsumexp give the values and the gradients of a single-process float64 reference.
The wrong version the messages caution against (each rank's own log_softmax, summed over the
ranks) is rejected by the check mode since session 45; written through the per-rank escape
(declared V) it type-checks but does not match the reference: checked too, so the reference
is known to tell them apart."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64
AXIS = "x"
B, T, VOCAB = 2, 3, 8


def vp_log_softmax(x: Tensor[S[-1, "x"]]) -> Tensor[V["x"]]:
    with torch.no_grad():
        m = spmd.all_reduce(x.amax(dim=-1), "x", src=V, dst=R, op="max")
    s = x - m.unsqueeze(-1)
    z = spmd.all_reduce(spmd.reinterpret(s.exp().sum(-1), "x", src=V, dst=P), "x", src=P, dst=R)
    return s - z.log().unsqueeze(-1)


def vp_entropy(logits: Tensor[S[-1, "x"]]) -> Tensor[I["x"]]:
    lp = vp_log_softmax(logits)
    return spmd.all_reduce(spmd.sum(-lp.exp() * lp, -1, out_partial_axes="x"), "x", src=P, dst=I)


def vp_kl(logits: Tensor[S[-1, "x"]], ref_logits: Tensor[S[-1, "x"]]) -> Tensor[I["x"]]:
    lp, lr = vp_log_softmax(logits), vp_log_softmax(ref_logits)
    return spmd.all_reduce(spmd.sum(lp.exp() * (lp - lr), -1, out_partial_axes="x"), "x",
                           src=P, dst=I)


def vp_logsumexp(logits: Tensor[S[-1, "x"]]) -> Tensor[I["x"]]:
    # the fix of the spmd-invariant-mix message for lse = torch.logsumexp(logits, dim=-1)
    m = spmd.all_reduce(logits.detach().amax(-1), "x", src=V, dst=I, op="max")
    return spmd.all_reduce(spmd.reinterpret((logits - m.unsqueeze(-1)).exp().sum(-1), "x",
                                            src=V, dst=P), "x", src=P, dst=I).log() + m


def local_kl_summed(logits: Tensor[S[-1, "x"]], ref_logits: Tensor[S[-1, "x"]]) -> Tensor[I["x"]]:
    # the mistake: each rank's own log_softmax, its KL summed over the ranks (since session 45
    # the check mode rejects the local log_softmax itself: ops.normalised_along_shard_error)
    lp, lr = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    return spmd.all_reduce(spmd.sum(lp.exp() * (lp - lr), -1, out_partial_axes="x"), "x",
                           src=P, dst=I)


def local_kl_summed_declared(logits: Tensor[S[-1, "x"]], ref_logits: Tensor[S[-1, "x"]]) -> Tensor[I["x"]]:
    # the same mistake written through the per-rank escape (the operands declared V): it
    # type-checks in the check mode, which does not follow a value back to its normaliser
    lp = spmd.declare(logits, Tensor[V["x"]]).log_softmax(-1)
    lr = spmd.declare(ref_logits, Tensor[V["x"]]).log_softmax(-1)
    return spmd.all_reduce(spmd.sum(lp.exp() * (lp - lr), -1, out_partial_axes="x"), "x",
                           src=P, dst=I)


def _full(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(B, T, VOCAB, generator=g, dtype=F64)


def _run(ctx: Ctx, fn: Callable[..., Any], n_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fn on the shards of the logits (and the reference logits), in the check mode: its
    value, and the gradient of a weighted sum of it w.r.t. the whole logits."""
    full = _full(1).requires_grad_(True)
    w = _full(3)[..., 0]
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            args = [spmd.convert(spmd.declare(full if k == 0 else _full(2), Tensor[I[AXIS]]),
                                 AXIS, src=I, dst=S(-1)) for k in range(n_in)]
            out = fn(*args)
            loss = (out * spmd.declare(w, Tensor[I[AXIS]])).sum()
        loss.backward()
    assert full.grad is not None
    return out.detach(), full.grad


def _reference(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    full = _full(1).requires_grad_(True)
    lp = full.log_softmax(-1)
    if kind == "entropy":
        out = -(lp.exp() * lp).sum(-1)
    elif kind == "kl":
        out = (lp.exp() * (lp - _full(2).log_softmax(-1))).sum(-1)
    else:
        out = torch.logsumexp(full, -1)
    (out * _full(3)[..., 0]).sum().backward()
    assert full.grad is not None
    return out.detach(), full.grad


def check_entropy(ctx: Ctx, name: str) -> None:
    out, grad = _run(ctx, vp_entropy, 1)
    ref, ref_grad = _reference("entropy")
    assert_close(out, ref)
    assert_close(grad, ref_grad)


def check_kl(ctx: Ctx, name: str) -> None:
    out, grad = _run(ctx, vp_kl, 2)
    ref, ref_grad = _reference("kl")
    assert_close(out, ref)
    assert_close(grad, ref_grad)


def check_logsumexp_fix(ctx: Ctx, name: str) -> None:
    out, grad = _run(ctx, vp_logsumexp, 1)
    ref, ref_grad = _reference("lse")
    assert_close(out, ref)
    assert_close(grad, ref_grad)


def check_local_kl_summed_is_wrong(ctx: Ctx, name: str) -> None:
    try:
        _run(ctx, local_kl_summed, 2)
    except SpmdTypeError as e:
        assert "normalises the dim sharded on" in str(e), e
    else:
        raise AssertionError("the local log_softmax of an S(-1) shard was accepted")
    out, _ = _run(ctx, local_kl_summed_declared, 2)
    ref, _ = _reference("kl")
    assert (out - ref).abs().max() > 1e-3, "the sum of per-block KLs matched the KL"


def suite(world: int) -> list[tuple[str, Any]]:
    return named_checks(world, "vocab-fixes", (check_entropy, check_kl, check_logsumexp_fix,
                                               check_local_kl_summed_is_wrong))
