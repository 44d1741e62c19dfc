"""A Partial gradient compressed before its exchange, as a DDP communication hook does it,
annotated with SPMD types.  The same source is checked statically (tests/static/
test_compress_static.py: no error) and run on gloo ranks, plain and in the check mode
(rt_compress.py: the values against a one-process run of the same compression).

Each reads the P gradient's local tensor, this rank's summand, as its own value with
``spmd.reinterpret(g, "x", src=P, dst=V)``, which has no backward and is accepted on a value
that carries no gradient only (under ``torch.no_grad()``, a ``.grad``, a detached value); the
non-linear steps (amax, round, an int8 cast, top-k of ``abs()``) then act on a V value.
"""

from __future__ import annotations

import torch

import spmd
from spmd import P, R, S, Tensor, V


@torch.no_grad()
def int8_all_reduce(g: Tensor[P["x"]]) -> Tensor[R["x"]]:
    """Quantized all-reduce: each rank's int8 codes and its scale all-gathered, every rank
    dequantizes and sums them (lossy: the sum of the ranks' rounded summands)."""
    mine = spmd.reinterpret(g, "x", src=P, dst=V)
    scale = mine.abs().amax().clamp(min=1e-12) / 127.0
    q = (mine / scale).round().clamp(-127, 127).to(torch.int8)
    codes = spmd.all_gather(q, "x", src=V, dst=R)
    scales = spmd.all_gather(scale, "x", src=V, dst=R)
    return (codes.float() * scales.view(-1, *([1] * q.dim()))).sum(0)


def int8_all_reduce_of_grad(w: Tensor[R["x"]]) -> Tensor[R["x"]]:
    """The same on a replicated weight's ``.grad`` (its type P: backward() leaves each rank's
    summand), written in place of the weight's gradient."""
    g = w.grad
    assert g is not None
    with torch.no_grad():
        mine = spmd.reinterpret(g, "x", src=P, dst=V)
        scale = mine.abs().amax().clamp(min=1e-12) / 127.0
        q = (mine / scale).round().clamp(-127, 127).to(torch.int8)
        codes = spmd.all_gather(q, "x", src=V, dst=R)
        scales = spmd.all_gather(scale, "x", src=V, dst=R)
        return (codes.float() * scales.view(-1, *([1] * q.dim()))).sum(0)


def topk_error_feedback(g: Tensor[P["x"]], err: Tensor[V["x"]], k: int
                        ) -> tuple[Tensor[R["x"]], Tensor[V["x"]]]:
    """Top-k with error feedback: this rank's summand plus its residual, its k largest
    entries (values and indices) all-gathered and summed into a dense R; the rest is the
    next step's residual (V)."""
    with torch.no_grad():
        acc = spmd.reinterpret(g, "x", src=P, dst=V) + err
        flat = acc.flatten()
        idx = flat.abs().topk(k).indices
        sel = flat[idx]
        allv = spmd.all_gather(sel, "x", src=V, dst=R)
        alli = spmd.all_gather(idx, "x", src=V, dst=R)
        dense = torch.zeros_like(flat).scatter_add(0, alli.flatten(), allv.flatten())
        residual = flat.index_fill(0, idx, 0.0)
    return dense.view_as(g), residual.view_as(g)


def reduce_scatter_fp32_accumulate(g: Tensor[P["x"]], n: int) -> Tensor[S[0, "x"]]:
    """A reduce-scatter as an all_to_all of bf16 blocks summed in fp32 on the receiver."""
    blocks = spmd.reinterpret(g.detach(), "x", src=P, dst=V).to(torch.bfloat16)
    received = spmd.all_to_all(blocks, "x", src=V, dst=V)
    return received.float().unflatten(0, (n, -1)).sum(0)


def powersgd_residual(m: Tensor[P["x"]], approx: Tensor[R["x"]]) -> Tensor[P["x"]]:
    """PowerSGD's error feedback: the pending sum minus its rank-r approximation, which the
    sum holds once (on one rank)."""
    return m - spmd.convert(approx, "x", src=R, dst=P)
