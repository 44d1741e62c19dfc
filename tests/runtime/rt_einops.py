"""einops in check mode on a gloo world of 2 ranks: the layout the pattern rule gives is what
the ranks hold, and the probe's mistakes (rt_eo.py) are caught.

Every rank builds the same global q, k, v ``[b, s, (h d)]`` and keeps its heads (S(2));
under ``spmd.typecheck()`` einops splits the heads (S(1)), attention runs per head, einops
merges them back (S(2)) and ``all_gather(src=S(2))`` must give attention on the global
inputs (and the gradients, of a loss summed over the ranks, the shards of the global ones).
The mistakes: gathering the merged output on dim 1 (its old heads dim) or the heads view on
dim 2 (its old dim) run without the check mode and give wrong numbers (measured here: the
loss is off); the check mode refuses both before the collective runs.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from einops import einsum, rearrange, reduce
from einops.layers.torch import Rearrange
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import VARYING, SpmdType, shard

F64 = torch.float64
AXIS = "x"
B, SQ, H, DH = 2, 4, 4, 3


def _qkv() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [torch.randn(B, SQ, H * DH, generator=g, dtype=F64) for _ in range(4)]


def _attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    qh, kh, vh = (rearrange(t, "b s (h d) -> b h s d", h=heads) for t in (q, k, v))
    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)


def _run(ctx: Ctx, gather: Callable[[torch.Tensor], torch.Tensor], check: bool
         ) -> tuple[float, float, list[torch.Tensor], list[torch.Tensor]]:
    """(the loss, the global loss, this rank's input gradients, the global ones' shards)."""
    *qkv, cw = _qkv()
    ps = [t.clone().requires_grad_() for t in qkv]
    ref = (rearrange(_attn(*ps, H), "b h s d -> b s (h d)") * cw).sum()
    ref.backward()
    c = H * DH // ctx.world
    loc = [t[:, :, ctx.rank * c:(ctx.rank + 1) * c].clone().requires_grad_() for t in qkv]
    with spmd.set_mesh(ctx.mesh("1d")):
        if check:
            with spmd.typecheck():
                ts = [spmd.declare(t, Tensor[S[2, "x"]]) for t in loc]
                o = _attn(*ts, H // ctx.world)
                out = gather(o)
                loss = (out * cw).sum()
                loss.backward()
        else:
            o = _attn(*loc, H // ctx.world)
            out = gather(o)
            loss = (out * cw).sum()
            loss.backward()
    mine = [p.grad[:, :, ctx.rank * c:(ctx.rank + 1) * c] for p in ps]
    return loss.item(), ref.item(), [t.grad for t in loc], mine


def _merged_on(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def gather(o: torch.Tensor) -> torch.Tensor:
        om = rearrange(o, "b h s d -> b s (h d)")
        return spmd.all_gather(om, AXIS, src=S(dim), dst=I).reshape(B, SQ, H * DH)
    return gather


def _heads_view_on(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def gather(o: torch.Tensor) -> torch.Tensor:
        g = spmd.all_gather(o, AXIS, src=S(dim), dst=I)
        return rearrange(g, "b h s d -> b s (h d)").reshape(B, SQ, H * DH)
    return gather


def check_heads_split_merge_gather(ctx: Ctx, name: str) -> None:
    """Correct code passes the check mode and gives the global numbers."""
    for gather in (_merged_on(2), _heads_view_on(1)):
        loss, ref, grads, want = _run(ctx, gather, check=True)
        assert abs(loss - ref) < 1e-12, (loss, ref)
        for g, w in zip(grads, want):
            assert_close(g, w)


def check_types_of_the_steps(ctx: Ctx, name: str) -> None:
    *qkv, _ = _qkv()
    c = H * DH // ctx.world
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        q = spmd.declare(qkv[0][:, :, ctx.rank * c:(ctx.rank + 1) * c].clone(), Tensor[S[2, "x"]])
        qh = rearrange(q, "b s (h d) -> b h s d", h=H // ctx.world)
        assert spmd.typeof(qh) == SpmdType.of({AXIS: shard(1)}), spmd.typeof(qh)
        om = Rearrange("b h s d -> b s (h d)")(qh)
        assert spmd.typeof(om) == SpmdType.of({AXIS: shard(2)}), spmd.typeof(om)
        gathered = spmd.all_gather(om, AXIS, src=S(2), dst=R)
        m = reduce(q, "b s hd -> b hd", "mean")
        assert spmd.typeof(m) == SpmdType.of({AXIS: shard(1)})
        assert spmd.typeof(reduce(q, "b s hd -> b s", "sum")) == SpmdType.of({AXIS: VARYING})
        w = spmd.declare(torch.randn(c, 5, dtype=F64, generator=torch.Generator().manual_seed(1)),
                         Tensor[S[0, "x"]])
        y = einsum(q, w, "b s h, h o -> b s o")  # the sharded h contracted: per-rank sums
        assert spmd.typeof(y) == SpmdType.of({AXIS: VARYING})
        total = spmd.all_reduce(spmd.reinterpret(y, AXIS, src=V, dst=P), AXIS, src=P, dst=R)
    assert_close(gathered, qkv[0])
    w_all = torch.randn(c, 5, dtype=F64, generator=torch.Generator().manual_seed(1)).repeat(ctx.world, 1)
    assert_close(total, torch.einsum("bsh,ho->bso", qkv[0], w_all))


def _caught(ctx: Ctx, gather: Callable[[torch.Tensor], torch.Tensor], have: int) -> None:
    loss, ref, _, _ = _run(ctx, gather, check=False)
    assert abs(loss - ref) > 1e-3, (loss, ref)  # the mistake gives wrong numbers unchecked
    try:
        _run(ctx, gather, check=True)
    except SpmdTypeError as e:
        assert e.code == "spmd-src-mismatch", e
        assert f"pass src=S({have})" in str(e), str(e)
    else:
        raise AssertionError("the check mode accepted a gather on the shard's old dim")


def check_merged_gathered_on_the_old_heads_dim_caught(ctx: Ctx, name: str) -> None:
    _caught(ctx, _merged_on(1), 2)


def check_heads_view_gathered_on_the_old_dim_caught(ctx: Ctx, name: str) -> None:
    _caught(ctx, _heads_view_on(2), 1)


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "einops", (
        check_heads_split_merge_gather, check_types_of_the_steps,
        check_merged_gathered_on_the_old_heads_dim_caught,
        check_heads_view_gathered_on_the_old_dim_caught,
    ))
