"""Megatron's ParallelMLP: a column-parallel linear, gelu, a row-parallel linear.

Local SPMD on the mesh axis "tp" (the weights are sharded, the activations are
whole on every rank)::

    x: I --reinterpret(I,R)--> R --linear(w1: S(0))--> V --gelu--> V
      --linear(w2: S(1))--> V --reinterpret(V,P)--> P --all_reduce(P,I)--> I --+ b2: I--> I

Forward comms: one all-reduce per block.  Backward comms: the gradient of
``reinterpret(I,R)`` (Megatron's ``copy_to_tensor_model_parallel_region``) is
``all_reduce(P,I)``; the gradient of ``all_reduce(P,I)`` is ``reinterpret(I,R)``,
which moves nothing.  ``b2`` is Invariant and added after the reduction: added
before it, it would be summed once per rank.

Two residual blocks, so the first block's weights get their gradient through the
second block's backward all-reduce.  ``reference`` is the same network on one
process with the full weights; ``tests/examples`` checks the loss and every
gradient against it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import I, P, R, S, Tensor, V

HIDDEN = 8
FFN = 16
BLOCKS = ("block1", "block2")
BATCH, SEQ = 2, 3

# Whether step() splits the batch over "dp" itself (else every dp replica is given its own batch).
DATA_PARALLEL = False

# parameter name -> {mesh axis: the tensor dim sharded on it}; absent axes hold whole copies.
SHARDING: dict[str, dict[str, int]] = {}
for _b in BLOCKS:
    SHARDING.update({f"{_b}.w1": {"tp": 0}, f"{_b}.b1": {"tp": 0}, f"{_b}.w2": {"tp": 1},
                     f"{_b}.b2": {}})


class ParallelMLP(nn.Module):
    """One MLP block, its weights sharded on "tp" (``FFN / tp`` hidden features per rank)."""

    w1: Tensor[S[0, "tp"]]  # [FFN/tp, HIDDEN]: column-parallel, output features sharded
    b1: Tensor[S[-1, "tp"]]  # [FFN/tp]: 1-d, so S(-1), the dim F.linear adds it to
    w2: Tensor[S[1, "tp"]]  # [HIDDEN, FFN/tp]: row-parallel, input features sharded
    b2: Tensor[I["tp"]]  # [HIDDEN]: whole on every rank, its gradient too

    def __init__(self, w1: Tensor[S[0, "tp"]], b1: Tensor[S[-1, "tp"]],
                 w2: Tensor[S[1, "tp"]], b2: Tensor[I["tp"]]) -> None:
        super().__init__()
        self.w1 = nn.Parameter(w1)
        self.b1 = nn.Parameter(b1)
        self.w2 = nn.Parameter(w2)
        self.b2 = nn.Parameter(b2)

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        x_r = spmd.reinterpret(x, "tp", src=I, dst=R)  # copy_to: backward all-reduces
        h = F.gelu(F.linear(x_r, self.w1, self.b1))  # this rank's FFN features
        partial = spmd.reinterpret(F.linear(h, self.w2), "tp", src=V, dst=P)  # a global matmul
        return spmd.all_reduce(partial, "tp", src=P, dst=I) + self.b2


class TensorParallelMLP(nn.Module):
    """Two residual MLP blocks: ``x + mlp(x)`` twice."""

    def __init__(self, block1: ParallelMLP, block2: ParallelMLP) -> None:
        super().__init__()
        self.block1 = block1
        self.block2 = block2

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        h: Tensor[I["tp"]] = x + self.block1(x)
        out: Tensor[I["tp"]] = h + self.block2(h)
        return out


def train_step(model: TensorParallelMLP, x: Tensor[I["tp"]], y: Tensor[I["tp"]]) -> torch.Tensor:
    """Forward, loss, backward; returns the loss (the same on every rank)."""
    out: Tensor[I["tp"]] = model(x)
    loss: Tensor[I["tp"]] = F.mse_loss(out, y)  # I: one logical loss, computed on every rank
    loss.backward()
    return loss.detach()


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    """The unsharded weights, deterministic in ``seed`` (float64)."""
    g = torch.Generator().manual_seed(seed)
    w: dict[str, torch.Tensor] = {}
    for b in BLOCKS:
        w[f"{b}.w1"] = torch.randn(FFN, HIDDEN, generator=g, dtype=torch.float64) / HIDDEN**0.5
        w[f"{b}.b1"] = torch.randn(FFN, generator=g, dtype=torch.float64) * 0.1
        w[f"{b}.w2"] = torch.randn(HIDDEN, FFN, generator=g, dtype=torch.float64) / FFN**0.5
        w[f"{b}.b2"] = torch.randn(HIDDEN, generator=g, dtype=torch.float64) * 0.1
    return w


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(BATCH, SEQ, HIDDEN, generator=g, dtype=torch.float64),
        "y": torch.randn(BATCH, SEQ, HIDDEN, generator=g, dtype=torch.float64),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> TensorParallelMLP:
    """Each rank keeps its shard of the full weights: ``convert(I, S(i))`` takes this rank's chunk."""

    def block(b: str) -> ParallelMLP:
        w1: Tensor[I["tp"]] = weights[f"{b}.w1"]
        b1: Tensor[I["tp"]] = weights[f"{b}.b1"]
        w2: Tensor[I["tp"]] = weights[f"{b}.w2"]
        b2: Tensor[I["tp"]] = weights[f"{b}.b2"]
        return ParallelMLP(
            spmd.convert(w1, "tp", src=I, dst=S(0)).clone(),
            spmd.convert(b1, "tp", src=I, dst=S(-1)).clone(),
            spmd.convert(w2, "tp", src=I, dst=S(1)).clone(),
            b2.clone(),
        )

    return TensorParallelMLP(block("block1"), block("block2"))


def step(model: TensorParallelMLP, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["y"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The same network, unsharded, on one process: the loss."""
    x = batch["x"]
    for b in BLOCKS:
        h = F.gelu(F.linear(x, w[f"{b}.w1"], w[f"{b}.b1"]))
        x = x + F.linear(h, w[f"{b}.w2"], w[f"{b}.b2"])
    return F.mse_loss(x, batch["y"])
