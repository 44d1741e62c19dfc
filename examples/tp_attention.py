"""Self-attention with the heads sharded on "tp" (Megatron's ParallelAttention).

A pre-LayerNorm block: the LayerNorm runs on the whole activation with Invariant
weights, the fused QKV projection is column-parallel (each rank holds the q, k, v
rows of ``HEADS / tp`` heads), softmax attention runs per head on the local heads
(Varying), the output projection is row-parallel::

    x: I --layer_norm(w: I)--> I --reinterpret(I,R)--> R --linear(w_qkv: S(0))--> V
      --per-head softmax(q k^T) v--> V --linear(w_o: S(1), out_partial_axes="tp")--> P
      --all_reduce(P,I)--> I --+ b_o: I--> I --+ x--> I

The backward all-reduce of ``reinterpret(I,R)`` gives the LayerNorm weights (and
the input) their whole gradient on every rank.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import I, P, R, S, Tensor, V

BATCH, SEQ, HIDDEN, HEADS = 2, 4, 8, 4
HEAD_DIM = HIDDEN // HEADS

DATA_PARALLEL = False

SHARDING: dict[str, dict[str, int]] = {
    "ln_w": {}, "ln_b": {}, "w_qkv": {"tp": 0}, "b_qkv": {"tp": 0}, "w_o": {"tp": 1}, "b_o": {},
}


def causal_mask(seq: int) -> torch.Tensor:
    """True above the diagonal: the positions a query may not attend to."""
    return torch.ones(seq, seq, dtype=torch.bool).triu(1)


def local_attention(q: Tensor[V["tp"]], k: Tensor[V["tp"]], v: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
    """Causal softmax attention on this rank's heads: ``[batch, heads/tp, seq, head_dim]``."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(causal_mask(q.shape[-2]), float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class ParallelAttention(nn.Module):
    ln_w: Tensor[I["tp"]]  # [HIDDEN]
    ln_b: Tensor[I["tp"]]
    w_qkv: Tensor[S[0, "tp"]]  # [(HEADS/tp) * 3 * HEAD_DIM, HIDDEN]: rows per head are q, k, v
    b_qkv: Tensor[S[0, "tp"]]
    w_o: Tensor[S[1, "tp"]]  # [HIDDEN, (HEADS/tp) * HEAD_DIM]
    b_o: Tensor[I["tp"]]  # [HIDDEN], added after the all-reduce

    def __init__(self, ln_w: Tensor[I["tp"]], ln_b: Tensor[I["tp"]], w_qkv: Tensor[S[0, "tp"]],
                 b_qkv: Tensor[S[0, "tp"]], w_o: Tensor[S[1, "tp"]], b_o: Tensor[I["tp"]]) -> None:
        super().__init__()
        self.ln_w = nn.Parameter(ln_w)
        self.ln_b = nn.Parameter(ln_b)
        self.w_qkv = nn.Parameter(w_qkv)
        self.b_qkv = nn.Parameter(b_qkv)
        self.w_o = nn.Parameter(w_o)
        self.b_o = nn.Parameter(b_o)

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        batch, seq, _ = x.shape
        h = F.layer_norm(x, (HIDDEN,), self.ln_w, self.ln_b)
        h_r = spmd.reinterpret(h, "tp", src=I, dst=R)
        qkv = F.linear(h_r, self.w_qkv, self.b_qkv)  # [batch, seq, local heads * 3 * HEAD_DIM]
        qkv = qkv.view(batch, seq, -1, 3, HEAD_DIM).transpose(1, 2)  # [b, local heads, s, 3, d]
        ctx = local_attention(qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2])
        ctx = ctx.transpose(1, 2).reshape(batch, seq, -1)  # [b, s, local heads * d]
        partial = spmd.linear(ctx, self.w_o, out_partial_axes="tp")
        return x + (spmd.all_reduce(partial, "tp", src=P, dst=I) + self.b_o)


def train_step(model: ParallelAttention, x: Tensor[I["tp"]], y: Tensor[I["tp"]]) -> torch.Tensor:
    out: Tensor[I["tp"]] = model(x)
    loss = F.mse_loss(out, y)
    loss.backward()
    return loss.detach()


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "ln_w": 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
        "ln_b": 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
        "w_qkv": torch.randn(HEADS * 3 * HEAD_DIM, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5,
        "b_qkv": 0.1 * torch.randn(HEADS * 3 * HEAD_DIM, generator=g, dtype=f64),
        "w_o": torch.randn(HIDDEN, HEADS * HEAD_DIM, generator=g, dtype=f64) / HIDDEN**0.5,
        "b_o": 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
    }


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(BATCH, SEQ, HIDDEN, generator=g, dtype=torch.float64),
        "y": torch.randn(BATCH, SEQ, HIDDEN, generator=g, dtype=torch.float64),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> ParallelAttention:
    ln_w: Tensor[I["tp"]] = weights["ln_w"]
    ln_b: Tensor[I["tp"]] = weights["ln_b"]
    w_qkv: Tensor[I["tp"]] = weights["w_qkv"]
    b_qkv: Tensor[I["tp"]] = weights["b_qkv"]
    w_o: Tensor[I["tp"]] = weights["w_o"]
    b_o: Tensor[I["tp"]] = weights["b_o"]
    return ParallelAttention(
        ln_w.clone(),
        ln_b.clone(),
        spmd.convert(w_qkv, "tp", src=I, dst=S(0)).clone(),  # whole heads per rank
        spmd.convert(b_qkv, "tp", src=I, dst=S(0)).clone(),
        spmd.convert(w_o, "tp", src=I, dst=S(1)).clone(),
        b_o.clone(),
    )


def step(model: ParallelAttention, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["y"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    x = batch["x"]
    batch_size, seq, _ = x.shape
    h = F.layer_norm(x, (HIDDEN,), w["ln_w"], w["ln_b"])
    qkv = F.linear(h, w["w_qkv"], w["b_qkv"]).view(batch_size, seq, HEADS, 3, HEAD_DIM)
    qkv = qkv.transpose(1, 2)
    q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(causal_mask(seq), float("-inf"))
    ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(batch_size, seq, -1)
    out = x + F.linear(ctx, w["w_o"], w["b_o"])
    return F.mse_loss(out, batch["y"])
