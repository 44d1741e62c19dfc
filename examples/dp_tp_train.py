"""A training step on a 2-D mesh ("dp", "tp"): data parallel x tensor parallel.

Types on the two axes:

- data: the global batch is loaded whole on every rank (``I`` on both axes);
  ``convert(I, S(0))`` on "dp" keeps this replica's rows: ``S(0)`` on "dp", ``I`` on "tp";
- parameters: ``R`` on "dp" (every replica holds them and uses them on its own rows,
  so their gradients are Partial on "dp": ``spmd.grad_type``) and, on "tp", the RMSNorm
  weight ``I`` and the MLP weights sharded (``S(0)`` column-parallel, ``S(1)`` row-parallel);
- loss: ``I`` on "tp" (the logits are all-reduced to Invariant), Varying on "dp"
  (each replica's share of the global mean); ``reinterpret(V,P)`` on "dp" makes
  it the global loss, ``I`` or ``P`` on every axis as ``.backward()`` needs.

After ``backward`` the weights' gradients are Partial on "dp" and are summed with
``all_reduce(P,R)`` (what DistributedDataParallel does), so every replica takes
the same optimizer step.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import I, P, R, S, Tensor, V

GLOBAL_BATCH, HIDDEN, FFN, CLASSES = 8, 8, 16, 6

DATA_PARALLEL = True  # step() splits the global batch over "dp" itself

SHARDING: dict[str, dict[str, int]] = {"norm_w": {}, "w1": {"tp": 0}, "w2": {"tp": 1}}


class DpTpClassifier(nn.Module):
    """rms_norm -> column-parallel linear -> gelu -> row-parallel linear -> logits (no biases)."""

    norm_w: Tensor[I["tp"], R["dp"]]  # [HIDDEN]
    w1: Tensor[S[0, "tp"], R["dp"]]  # [FFN/tp, HIDDEN]
    w2: Tensor[S[1, "tp"], R["dp"]]  # [CLASSES, FFN/tp]

    def __init__(self, norm_w: Tensor[I["tp"], R["dp"]], w1: Tensor[S[0, "tp"], R["dp"]],
                 w2: Tensor[S[1, "tp"], R["dp"]], dp_rank: int, dp_size: int) -> None:
        super().__init__()
        self.norm_w = nn.Parameter(norm_w)
        self.w1 = nn.Parameter(w1)
        self.w2 = nn.Parameter(w2)
        self.dp_rank = dp_rank
        self.dp_size = dp_size

    def forward(self, x: Tensor[I["tp"], S[0, "dp"]]) -> Tensor[I["tp"], V["dp"]]:
        h = F.rms_norm(x, (HIDDEN,), self.norm_w)
        h_r = spmd.reinterpret(h, "tp", src=I, dst=R)
        a = F.gelu(F.linear(h_r, self.w1))
        partial = spmd.linear(a, self.w2, out_partial_axes="tp")
        return spmd.all_reduce(partial, "tp", src=P, dst=I)

    def finalize_grads(self) -> None:
        """Sum the gradients over the data-parallel replicas (Partial -> Replicate on "dp")."""
        for param in (self.norm_w, self.w1, self.w2):
            grad = param.grad
            assert grad is not None
            param.grad = spmd.all_reduce(grad, "dp", src=P, dst=R)


def train_step(model: DpTpClassifier, x: Tensor[I["tp"], I["dp"]],
               labels: torch.Tensor) -> torch.Tensor:
    """Forward on this replica's rows, backward, the "dp" gradient all-reduce; the global loss."""
    x_local = spmd.convert(x, "dp", src=I, dst=S(0))  # this replica's rows of the batch
    labels_local = labels.tensor_split(model.dp_size)[model.dp_rank]
    logits: Tensor[I["tp"], V["dp"]] = model(x_local)
    share = F.cross_entropy(logits, labels_local, reduction="sum") / labels.numel()
    loss = spmd.reinterpret(share, "dp", src=V, dst=P)  # the global mean: I on tp, P on dp
    loss.backward()
    model.finalize_grads()
    return spmd.all_reduce(loss.detach(), "dp", src=P, dst=R)


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "norm_w": 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
        "w1": torch.randn(FFN, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5,
        "w2": torch.randn(CLASSES, FFN, generator=g, dtype=f64) / FFN**0.5,
    }


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(GLOBAL_BATCH, HIDDEN, generator=g, dtype=torch.float64),
        "labels": torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=g),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> DpTpClassifier:
    norm_w: Tensor[I["tp"], R["dp"]] = weights["norm_w"]
    w1: Tensor[I["tp"], R["dp"]] = weights["w1"]
    w2: Tensor[I["tp"], R["dp"]] = weights["w2"]
    return DpTpClassifier(
        norm_w.clone(),
        spmd.convert(w1, "tp", src=I, dst=S(0)).clone(),
        spmd.convert(w2, "tp", src=I, dst=S(1)).clone(),
        mesh.get_local_rank("dp"), mesh["dp"].size(),
    )


def step(model: DpTpClassifier, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["labels"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    h = F.rms_norm(batch["x"], (HIDDEN,), w["norm_w"])
    logits = F.linear(F.gelu(F.linear(h, w["w1"])), w["w2"])
    return F.cross_entropy(logits, batch["labels"])
