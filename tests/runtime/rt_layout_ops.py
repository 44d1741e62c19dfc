"""Ops on an (N, C, *spatial) input in check mode on a gloo world of 2 ranks: the S(i) the
check mode gives their results (engine views.LAYOUT_OPS) is what the ranks hold.

Every rank builds the same global input and keeps its shard; under ``spmd.typecheck()`` the
ops run on the shard, the result's type is read, and ``all_gather(..., src=<that S(i)>,
dst=R)`` must give the ops on the global input (and the input's gradient, for a loss summed
over the ranks, the shard of the global gradient).  A src naming another dim is the type error
the static checker reports.  batch_norm in training is V: the gathered result is not the
global batch_norm (each rank normalised with its own batch's statistics).  The ops along some
dims (views.ALONG_OPS: torch.fft, roll, flip, diff) keep the shard of the other dims: a slab
fft2 (fft, typed all_to_all, fft), local and global, forward and backward, is torch.fft.fft2.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import PS, I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import VARYING, SpmdType, shard

F64 = torch.float64
AXIS = "x"


def _global(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=g, dtype=F64)


def _cnn() -> nn.Module:
    """A small CNN of torch's modules, the same parameters on every rank."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"), nn.GroupNorm(2, 8),
        nn.Upsample(scale_factor=2.0, mode="bilinear"), nn.AdaptiveAvgPool2d(4),
        nn.PixelShuffle(2), nn.InstanceNorm2d(2)).to(F64)
    with torch.no_grad():  # running statistics that are not the identity
        net[1].running_mean.uniform_(-1.0, 1.0)
        net[1].running_var.uniform_(0.5, 2.0)
    return net.eval()  # batch_norm with its running statistics: per sample


def _src_rejected(y: torch.Tensor, dim: int, have: int) -> None:
    try:
        spmd.all_gather(y, AXIS, src=S(dim), dst=R)
    except SpmdTypeError as e:
        assert e.code == "spmd-src-mismatch", e
        assert f"pass src=S({have})" in str(e), str(e)
    else:
        raise AssertionError(f"all_gather with src=S({dim}) of an S({have}) value was accepted")


def check_cnn_batch_shard(ctx: Ctx, name: str) -> None:
    """A CNN on this rank's part of the batch: S(0) through every layer."""
    net = _cnn()
    whole = _global(4, 3, 8, 8).requires_grad_()
    expected = net(whole)
    (expected * expected).sum().backward()
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(whole.detach().chunk(ctx.world)[ctx.rank].clone().requires_grad_(),
                             Tensor[S[0, "x"]])
            y = net(x)
            assert spmd.typeof(y) == SpmdType.of({AXIS: shard(0)}), spmd.typeof(y)
            _src_rejected(y, 1, 0)
            gathered = spmd.all_gather(y, AXIS, src=S(0), dst=R)
            loss = spmd.reinterpret((y * y).sum(), AXIS, src=V, dst=P)
            loss.backward()
    assert_close(gathered.detach(), expected.detach())
    assert_close(x.grad, whole.grad.chunk(ctx.world)[ctx.rank])


def check_channel_shard(ctx: Ctx, name: str) -> None:
    """Channel-wise ops on this rank's channels: S(1) through pools, interpolation, pixel
    shuffle (4 channels a rank: whole blocks of 2 x 2) and a pad of the spatial dims."""
    def ops(t: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(t, 2)
        h = F.interpolate(h, scale_factor=2.0, mode="bilinear")
        h = F.pixel_shuffle(F.avg_pool2d(h, 3, 1, padding=1), 2)
        return F.pad(h, (1, 1, 2, 0), mode="reflect")

    whole = _global(2, 4 * ctx.world, 6, 6)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(whole.chunk(ctx.world, 1)[ctx.rank].clone(), Tensor[S[1, "x"]])
            y = ops(x)
            assert spmd.typeof(y) == SpmdType.of({AXIS: shard(1)}), spmd.typeof(y)
            _src_rejected(y, 0, 1)
            gathered = spmd.all_gather(y, AXIS, src=S(1), dst=R)
    assert_close(gathered, ops(whole))


def check_batch_norm_training_is_not_a_batch_shard(ctx: Ctx, name: str) -> None:
    """batch_norm in training: each rank's statistics are its own part of the batch's, so its
    result is V (a claim src=S(0) is the user's, and here it is wrong)."""
    whole = _global(4, 3, 5)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(whole.chunk(ctx.world)[ctx.rank].clone(), Tensor[S[0, "x"]])
            y = F.batch_norm(x, None, None, training=True)
            assert spmd.typeof(y) == SpmdType.of({AXIS: VARYING}), spmd.typeof(y)
            gathered = spmd.all_gather(y, AXIS, src=S(0), dst=R)
            ev = F.batch_norm(x, torch.zeros(3, dtype=F64), torch.ones(3, dtype=F64))
            assert spmd.typeof(ev) == SpmdType.of({AXIS: shard(0)}), spmd.typeof(ev)
    assert not torch.allclose(gathered, F.batch_norm(whole, None, None, training=True))


def _attention(h: torch.Tensor, w_qkv: torch.Tensor, w_o: torch.Tensor, b: int, s: int, hd: int,
               rank_free: bool) -> torch.Tensor:
    """Megatron's attention block: fused qkv heads split, SDPA per head, heads merged back."""
    qkv = F.linear(h, w_qkv)
    if rank_free:
        q, k, v = qkv.view(*qkv.shape[:-1], -1, 3 * hd).transpose(-3, -2).chunk(3, dim=-1)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(-3, -2)
        return F.linear(ctx.reshape(ctx.shape[:-2] + (-1,)), w_o)
    q, k, v = qkv.view(b, s, -1, 3 * hd).transpose(1, 2).chunk(3, dim=-1)
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(ctx.transpose(1, 2).reshape(b, s, -1), w_o)


def check_megatron_attention_heads_through_view_and_reshape(ctx: Ctx, name: str) -> None:
    """Tensor-parallel attention with F.linear: qkv column parallel (S(-1)), its view into
    heads S on the heads (engine views.reshaped_dim, from the local sizes), the merge back S
    on the last dim, the row-parallel output a partial sum the typed all_reduce(src=P) sums:
    the unsharded block's output and the weights' gradients, on each rank's shard."""
    b, s, nh, hd, hidden = 2, 5, 4, 3, 8
    h = _global(b, s, hidden)
    # fused per head: [q_h k_h v_h] rows for each head h, so a shard of whole heads
    w_qkv = _global(nh * 3 * hd, hidden).requires_grad_()
    w_o = _global(hidden, nh * hd).requires_grad_()
    for rank_free in (False, True):
        expected = _attention(h, w_qkv, w_o, b, s, hd, rank_free)
        (expected * expected).sum().backward()
        want_qkv, want_o = w_qkv.grad.clone(), w_o.grad.clone()
        w_qkv.grad = w_o.grad = None
        with spmd.set_mesh(ctx.mesh("1d")):
            with spmd.typecheck():
                hl = spmd.declare(h.clone(), Tensor[R["x"]])
                wq = spmd.declare(w_qkv.detach().chunk(ctx.world)[ctx.rank].clone().requires_grad_(),
                                  Tensor[S[0, "x"]])
                wo = spmd.declare(w_o.detach().chunk(ctx.world, dim=1)[ctx.rank].clone().requires_grad_(),
                                  Tensor[S[1, "x"]])
                partial = _attention(hl, wq, wo, b, s, hd, rank_free)
                # a pending partial sum (V until a reduction reads it: ops.Contraction.pending)
                out = spmd.all_reduce(partial, AXIS, src=P, dst=I)
                (out * out).sum().backward()
        assert_close(out.detach(), expected.detach())
        assert_close(wq.grad, want_qkv.chunk(ctx.world)[ctx.rank])
        assert_close(wo.grad, want_o.chunk(ctx.world, dim=1)[ctx.rank])


def _whole_fft2(whole: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.fft.fft2 of the whole field and the gradient of sum |fft2|^2 by the field."""
    w = whole.clone().requires_grad_()
    out = torch.fft.fft2(w)
    (out.abs() ** 2).sum().backward()
    assert w.grad is not None
    return out.detach(), w.grad


def check_slab_fft2(ctx: Ctx, name: str) -> None:
    """A slab fft2 (engine views.ALONG_OPS): the fft along the unsharded dim keeps S(0), the
    typed all_to_all moves the shard to dim 1, the fft along dim 0 keeps S(1); the gathered
    result is torch.fft.fft2 of the whole, and the field's gradient (the backward all_to_all)
    the shard of the whole's.  The transpose with src and dst swapped is the type error."""
    whole = _global(4 * ctx.world, 6 * ctx.world)
    expected, grad = _whole_fft2(whole)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            u = spmd.declare(whole.chunk(ctx.world)[ctx.rank].clone().requires_grad_(),
                             Tensor[S[0, "x"]])
            uh = torch.fft.fft(u, dim=1)
            assert spmd.typeof(uh) == SpmdType.of({AXIS: shard(0)}), spmd.typeof(uh)
            try:
                spmd.all_to_all(uh, AXIS, src=S(1), dst=S(0))
            except SpmdTypeError as e:
                assert e.code == "spmd-src-mismatch" and "pass src=S(0)" in str(e), e
            else:
                raise AssertionError("all_to_all with src=S(1) of the S(0) uh was accepted")
            y = torch.fft.fft(spmd.all_to_all(uh, AXIS, src=S(0), dst=S(1)), dim=0)
            assert spmd.typeof(y) == SpmdType.of({AXIS: shard(1)}), spmd.typeof(y)
            along = torch.fft.fft(u, dim=0)  # each block's own transform
            assert spmd.typeof(along) == SpmdType.of({AXIS: VARYING}), spmd.typeof(along)
            gathered = spmd.all_gather(y, AXIS, src=S(1), dst=R)
            loss = spmd.reinterpret((y.abs() ** 2).sum(), AXIS, src=V, dst=P)
            loss.backward()
    assert_close(gathered.detach(), expected)
    assert_close(u.grad, grad.chunk(ctx.world)[ctx.rank])


def check_global_slab_fft2(ctx: Ctx, name: str) -> None:
    """The same slab fft2 in global SPMD: the ffts along unsharded dims keep the spec, the
    redistribute is the all_to_all; along the sharded dim the fft is rejected."""
    whole = _global(4 * ctx.world, 6 * ctx.world)
    expected, grad = _whole_fft2(whole)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            u = spmd.declare(whole.chunk(ctx.world)[ctx.rank].clone().requires_grad_(),
                             Tensor[PS["x", None]])
            try:
                torch.fft.fft(u, dim=0)
            except SpmdTypeError as e:
                assert 'dst=PS[None, "x"]' in str(e), e
            else:
                raise AssertionError("fft along the sharded dim 0 was accepted")
            uh = torch.fft.fft(u, dim=1)
            assert spmd.typeof(uh) == SpmdType.of({AXIS: shard(0)}, ((AXIS,), ())), spmd.typeof(uh)
            y = torch.fft.fft(spmd.redistribute(uh, src=PS["x", None], dst=PS[None, "x"]), dim=0)
            full = spmd.redistribute(y, src=PS[None, "x"], dst=PS[None, None])
            loss = spmd.reinterpret((full.abs() ** 2).sum(), AXIS, src=R, dst=I)
            loss.backward()
    assert_close(full.detach(), expected)
    assert_close(u.grad, grad.chunk(ctx.world)[ctx.rank])


def check_roll_flip_diff_keep_the_other_dims(ctx: Ctx, name: str) -> None:
    """roll, flip, diff, rfft along a dim other than the shard dim keep S(i): gathered, the
    ops on the whole."""
    def ops(t: torch.Tensor) -> torch.Tensor:
        h = torch.roll(t, 2, 2).flip(1).diff(dim=2)
        return torch.fft.irfft(torch.fft.rfft(h, dim=1), n=5, dim=1)

    whole = _global(2, 5, 7 * ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(whole.chunk(ctx.world, 0)[ctx.rank].clone(), Tensor[S[0, "x"]])
            y = ops(x)
            assert spmd.typeof(y) == SpmdType.of({AXIS: shard(0)}), spmd.typeof(y)
            _src_rejected(y, 1, 0)
            gathered = spmd.all_gather(y, AXIS, src=S(0), dst=R)
    assert_close(gathered, ops(whole))


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "layout-ops", (
        check_cnn_batch_shard, check_channel_shard,
        check_batch_norm_training_is_not_a_batch_shard,
        check_megatron_attention_heads_through_view_and_reshape, check_slab_fft2,
        check_global_slab_fft2, check_roll_flip_diff_keep_the_other_dims))
