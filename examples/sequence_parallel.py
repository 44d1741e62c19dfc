"""Sequence-parallel transformer MLP blocks (Megatron's ``sequence_parallel=True``).

Activations are ``[seq, batch, hidden]`` and sharded on the sequence dim between
the tensor-parallel regions: ``S(0)`` on "tp".  LayerNorm runs on this rank's
chunk of the sequence with whole (Replicate) weights.  A block is
``x + post_norm(mlp(norm(x)))`` (the "sandwich" norm of Gemma 2)::

    x: S(0) --layer_norm(w: R)--> S(0) --all_gather(S(0),R)--> R --linear(w1: S(0))--> V
      --gelu--> V --linear(w2: S(1), out_partial_axes="tp")--> P
      --reduce_scatter(P,S(0))--> S(0) --+ b2: R--> S(0) --layer_norm(w: R)--> S(0) --+ x--> S(0)

(The layouts after ``+ b2`` and layer_norm are what the program computes; the checker types
those results plain V: the types carry no shapes, so it cannot prove that ``b2`` broadcasts
along dim 0 or that the norm leaves dim 0 whole.  ``src=S(0)`` and the ``S(0)`` annotations
state the layout where it is used.)

The model projects its input with an Invariant weight (whole activations),
enters the sequence-parallel region with ``convert(I,S(0))`` (Megatron's
``scatter_to_sequence_parallel_region``, whose backward all-gathers) and
normalises the embeddings there (BLOOM's ``word_embeddings_layernorm``).

The all_gather's backward is ``reduce_scatter(P,S(0))``, the reduce_scatter's is
``all_gather(S(0),R)``: Megatron's ``gather_from_sequence_parallel_region`` and
``reduce_scatter_to_sequence_parallel_region``.

The LayerNorm weights and the row-parallel bias are Replicate on "tp": each rank
uses them on its own chunk of the sequence, so their gradients are Partial
(``spmd.grad_type``) and must be all-reduced over "tp" before the optimizer
step (Megatron finds them by a parameter attribute; here their type says it).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import I, P, R, S, Tensor, V

SEQ, BATCH, HIDDEN, FFN = 8, 2, 8, 16
BLOCKS = ("block1", "block2")

DATA_PARALLEL = False

SHARDING: dict[str, dict[str, int]] = {
    "w_in": {}, "ln_emb_w": {}, "ln_emb_b": {}, "ln_f_w": {}, "ln_f_b": {}}
for _b in BLOCKS:
    SHARDING.update({f"{_b}.ln_w": {}, f"{_b}.ln_b": {}, f"{_b}.w1": {"tp": 0},
                     f"{_b}.b1": {"tp": 0}, f"{_b}.w2": {"tp": 1}, f"{_b}.b2": {},
                     f"{_b}.post_ln_w": {}, f"{_b}.post_ln_b": {}})


def allreduce_sequence_parallel_grad(param: Tensor[R["tp"]]) -> None:
    """A Replicate weight's gradient is Partial on "tp": sum it so every rank steps alike."""
    grad = param.grad
    assert grad is not None
    param.grad = spmd.all_reduce(grad, "tp", src=P, dst=R)


class SequenceParallelMLPBlock(nn.Module):
    """``x + post_norm(mlp(norm(x)))`` with the sequence sharded outside the MLP."""

    ln_w: Tensor[R["tp"]]  # [HIDDEN]; gradient Partial on "tp"
    ln_b: Tensor[R["tp"]]
    w1: Tensor[S[0, "tp"]]  # [FFN/tp, HIDDEN] column-parallel
    b1: Tensor[S[-1, "tp"]]
    w2: Tensor[S[1, "tp"]]  # [HIDDEN, FFN/tp] row-parallel
    b2: Tensor[R["tp"]]  # [HIDDEN], added to the reduce-scattered output; gradient Partial
    post_ln_w: Tensor[R["tp"]]
    post_ln_b: Tensor[R["tp"]]

    def __init__(self, ln_w: Tensor[R["tp"]], ln_b: Tensor[R["tp"]], w1: Tensor[S[0, "tp"]],
                 b1: Tensor[S[-1, "tp"]], w2: Tensor[S[1, "tp"]], b2: Tensor[R["tp"]],
                 post_ln_w: Tensor[R["tp"]], post_ln_b: Tensor[R["tp"]]) -> None:
        super().__init__()
        self.ln_w = nn.Parameter(ln_w)
        self.ln_b = nn.Parameter(ln_b)
        self.w1 = nn.Parameter(w1)
        self.b1 = nn.Parameter(b1)
        self.w2 = nn.Parameter(w2)
        self.b2 = nn.Parameter(b2)
        self.post_ln_w = nn.Parameter(post_ln_w)
        self.post_ln_b = nn.Parameter(post_ln_b)

    def forward(self, x: Tensor[S[0, "tp"]]) -> Tensor[S[0, "tp"]]:
        h = F.layer_norm(x, (HIDDEN,), self.ln_w, self.ln_b)  # this rank's sequence chunk
        h_full = spmd.all_gather(h, "tp", src=S(0), dst=R)  # the whole sequence
        a = F.gelu(F.linear(h_full, self.w1, self.b1))
        partial = spmd.linear(a, self.w2, out_partial_axes="tp")
        y = spmd.reduce_scatter(partial, "tp", src=P, dst=S(0)) + self.b2
        y = F.layer_norm(y, (HIDDEN,), self.post_ln_w, self.post_ln_b)
        return x + y

    def finalize_grads(self) -> None:
        for param in (self.ln_w, self.ln_b, self.b2, self.post_ln_w, self.post_ln_b):
            allreduce_sequence_parallel_grad(param)


class SequenceParallelModel(nn.Module):
    """Project, scatter the sequence, two blocks, a final LayerNorm (still sequence-parallel)."""

    w_in: Tensor[I["tp"]]  # [HIDDEN, HIDDEN], whole on every rank
    ln_emb_w: Tensor[R["tp"]]
    ln_emb_b: Tensor[R["tp"]]
    ln_f_w: Tensor[R["tp"]]
    ln_f_b: Tensor[R["tp"]]

    def __init__(self, w_in: Tensor[I["tp"]], ln_emb_w: Tensor[R["tp"]],
                 ln_emb_b: Tensor[R["tp"]], block1: SequenceParallelMLPBlock,
                 block2: SequenceParallelMLPBlock, ln_f_w: Tensor[R["tp"]],
                 ln_f_b: Tensor[R["tp"]]) -> None:
        super().__init__()
        self.w_in = nn.Parameter(w_in)
        self.ln_emb_w = nn.Parameter(ln_emb_w)
        self.ln_emb_b = nn.Parameter(ln_emb_b)
        self.block1 = block1
        self.block2 = block2
        self.ln_f_w = nn.Parameter(ln_f_w)
        self.ln_f_b = nn.Parameter(ln_f_b)

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[S[0, "tp"]]:
        emb = F.linear(x, self.w_in)
        s = spmd.convert(emb, "tp", src=I, dst=S(0))  # scatter_to_sequence_parallel_region
        # layer_norm over the last dim keeps whole rows, so the S(0) layout holds; the checker
        # cannot prove it without the rank (for a 1-d tensor dim 0 is the last), so say it
        h: Tensor[S[0, "tp"]] = F.layer_norm(s, (HIDDEN,), self.ln_emb_w, self.ln_emb_b)
        h1: Tensor[S[0, "tp"]] = self.block1(h)
        h2: Tensor[S[0, "tp"]] = self.block2(h1)
        return F.layer_norm(h2, (HIDDEN,), self.ln_f_w, self.ln_f_b)

    def finalize_grads(self) -> None:
        self.block1.finalize_grads()
        self.block2.finalize_grads()
        for param in (self.ln_emb_w, self.ln_emb_b, self.ln_f_w, self.ln_f_b):
            allreduce_sequence_parallel_grad(param)


def train_step(model: SequenceParallelModel, x: Tensor[I["tp"]], y: Tensor[I["tp"]]) -> torch.Tensor:
    """Forward, loss, backward, the "tp" all-reduce of the Replicate weights' gradients."""
    out: Tensor[S[0, "tp"]] = model(x)
    y_local = spmd.convert(y, "tp", src=I, dst=S(0))
    sq: Tensor[S[0, "tp"]] = (out - y_local) ** 2
    local_loss = sq.sum() / y.numel()  # Varying: this rank's share of the mean
    loss = spmd.reinterpret(local_loss, "tp", src=V, dst=P)  # the sum of the shares
    loss.backward()
    model.finalize_grads()
    return spmd.all_reduce(loss.detach(), "tp", src=P, dst=R)


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    w: dict[str, torch.Tensor] = {
        "w_in": torch.randn(HIDDEN, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5,
        "ln_emb_w": 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
        "ln_emb_b": 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)}
    for b in BLOCKS:
        w[f"{b}.ln_w"] = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
        w[f"{b}.ln_b"] = 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
        w[f"{b}.w1"] = torch.randn(FFN, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5
        w[f"{b}.b1"] = 0.1 * torch.randn(FFN, generator=g, dtype=f64)
        w[f"{b}.w2"] = torch.randn(HIDDEN, FFN, generator=g, dtype=f64) / FFN**0.5
        w[f"{b}.b2"] = 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
        w[f"{b}.post_ln_w"] = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
        w[f"{b}.post_ln_b"] = 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
    w["ln_f_w"] = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
    w["ln_f_b"] = 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64)
    return w


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(SEQ, BATCH, HIDDEN, generator=g, dtype=torch.float64),
        "y": torch.randn(SEQ, BATCH, HIDDEN, generator=g, dtype=torch.float64),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> SequenceParallelModel:
    def whole(name: str) -> Tensor[R["tp"]]:
        t: Tensor[R["tp"]] = weights[name].clone()
        return t

    def rows(name: str) -> Tensor[S[0, "tp"]]:  # this rank's chunk of dim 0
        t: Tensor[I["tp"]] = weights[name]
        return spmd.convert(t, "tp", src=I, dst=S(0)).clone()

    def last(name: str) -> Tensor[S[-1, "tp"]]:  # a 1-d bias: this rank's chunk of its dim
        t: Tensor[I["tp"]] = weights[name]
        return spmd.convert(t, "tp", src=I, dst=S(-1)).clone()

    def cols(name: str) -> Tensor[S[1, "tp"]]:  # this rank's chunk of dim 1
        t: Tensor[I["tp"]] = weights[name]
        return spmd.convert(t, "tp", src=I, dst=S(1)).clone()

    def block(b: str) -> SequenceParallelMLPBlock:
        return SequenceParallelMLPBlock(
            whole(f"{b}.ln_w"), whole(f"{b}.ln_b"), rows(f"{b}.w1"), last(f"{b}.b1"),
            cols(f"{b}.w2"), whole(f"{b}.b2"), whole(f"{b}.post_ln_w"), whole(f"{b}.post_ln_b"),
        )

    w_in: Tensor[I["tp"]] = weights["w_in"].clone()
    return SequenceParallelModel(w_in, whole("ln_emb_w"), whole("ln_emb_b"), block("block1"),
                                 block("block2"), whole("ln_f_w"), whole("ln_f_b"))


def step(model: SequenceParallelModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["y"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    x = F.layer_norm(F.linear(batch["x"], w["w_in"]), (HIDDEN,), w["ln_emb_w"], w["ln_emb_b"])
    for b in BLOCKS:
        h = F.layer_norm(x, (HIDDEN,), w[f"{b}.ln_w"], w[f"{b}.ln_b"])
        a = F.gelu(F.linear(h, w[f"{b}.w1"], w[f"{b}.b1"]))
        y = F.linear(a, w[f"{b}.w2"], w[f"{b}.b2"])
        x = x + F.layer_norm(y, (HIDDEN,), w[f"{b}.post_ln_w"], w[f"{b}.post_ln_b"])
    out = F.layer_norm(x, (HIDDEN,), w["ln_f_w"], w["ln_f_b"])
    return ((out - batch["y"]) ** 2).sum() / batch["y"].numel()
