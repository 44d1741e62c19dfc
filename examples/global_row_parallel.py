"""A column-parallel then row-parallel classifier in global SPMD, the row-parallel
linear written in local SPMD on "tp" (``spmd.local_map``) and declaring its partial
output, and a global-SPMD cross-entropy loss.

The seeds' recommendation: global annotations at the module boundary, local SPMD
inside where it is clearer.  ``row_parallel`` takes the activations sharded on their
feature dim and the weight sharded on its input dim; inside, on "tp", they are just
this rank's blocks (V), their product is this rank's share of the global matmul, and
``reinterpret(V,P)`` says so; ``out_types`` declares the P output at the boundary::

    h: f32[b@dp, f@tp]   w2: f32[f@tp, c]  R:dp
      local_map(axes=("tp",)):  h @ w2  is V on tp  --reinterpret(V,P)-->  P on tp
    y: f32[b@dp, c]  P:tp  --redistribute-->  I:tp   (one all-reduce)

The loss (:func:`cross_entropy`) is global: log_softmax over the unsharded class
dim, the one-hot pick, and the mean over the global batch, a sum over the
dp-sharded dim that says ``out_partial_axes="dp"``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import PS, I, P, R, S, Tensor

GLOBAL_BATCH, HIDDEN, FFN, CLASSES = 8, 8, 16, 6

DATA_PARALLEL = True  # step() splits the batch over "dp" itself

SHARDING: dict[str, dict[str, int]] = {"w1": {"tp": 1}, "w2": {"tp": 0}}

Rows = Tensor[PS["dp", None], I["tp"]]  # [GLOBAL_BATCH@dp, *]
Hidden = Tensor[PS["dp", "tp"]]  # [GLOBAL_BATCH@dp, FFN@tp]
W1 = Tensor[PS[None, "tp"], I["dp"]]  # [HIDDEN, FFN@tp]
W2 = Tensor[PS["tp", None], I["dp"]]  # [FFN@tp, CLASSES]
RowOut = Tensor[PS["dp", None], P["tp"]]
Loss = Tensor[PS[()], P["dp"], I["tp"]]


@spmd.local_map(in_types=(Hidden, Tensor[PS["tp", None], R["dp"]]), out_types=RowOut,
                axes=("tp",))
def row_parallel(h: Tensor[PS["dp", None], S[1, "tp"]],
                 w: Tensor[PS[None, None], S[0, "tp"], R["dp"]]) -> RowOut:
    """This rank's columns of ``h`` times its rows of ``w``: a share of the global
    product, declared Partial on "tp"."""
    return spmd.reinterpret(h @ w, "tp", src=spmd.V, dst=P)


class Classifier(nn.Module):
    w1: W1
    w2: W2

    def __init__(self, w1: W1, w2: W2) -> None:
        super().__init__()
        self.w1 = nn.Parameter(w1)
        self.w2 = nn.Parameter(w2)

    def forward(self, x: Rows) -> Rows:
        rx = spmd.redistribute(x, src=Rows, dst=Tensor[PS["dp", None], R["tp"]])
        rw1 = spmd.redistribute(self.w1, src=W1, dst=Tensor[PS[None, "tp"], R["dp"]])
        rw2 = spmd.redistribute(self.w2, src=W2, dst=Tensor[PS["tp", None], R["dp"]])
        h = F.gelu(rx @ rw1)  # column-parallel: no comms
        y = row_parallel(h, rw2)
        return spmd.redistribute(y, src=RowOut, dst=Rows)


def cross_entropy(logits: Rows, onehot: Rows) -> Loss:
    """The mean cross entropy over the global batch: P on "dp", I on "tp"."""
    logp = F.log_softmax(logits, dim=-1)
    return spmd.sum(-(logp * onehot), (0, 1), out_partial_axes="dp") / GLOBAL_BATCH


def train_step(model: Classifier, x: Tensor[PS[None, None], I["dp", "tp"]],
               onehot: Tensor[PS[None, None], I["dp", "tp"]]) -> torch.Tensor:
    whole = Tensor[PS[None, None], I["dp", "tp"]]
    logits = model.forward(spmd.redistribute(x, src=whole, dst=Rows))
    loss = cross_entropy(logits, spmd.redistribute(onehot, src=whole, dst=Rows))
    loss.backward()
    return spmd.redistribute(loss.detach(), src=Loss, dst=Tensor[PS[()], R["dp"], I["tp"]])


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "w1": torch.randn(HIDDEN, FFN, generator=g, dtype=f64) / HIDDEN**0.5,
        "w2": torch.randn(FFN, CLASSES, generator=g, dtype=f64) / FFN**0.5,
    }


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (GLOBAL_BATCH,), generator=g)
    return {
        "x": torch.randn(GLOBAL_BATCH, HIDDEN, generator=g, dtype=torch.float64),
        "onehot": F.one_hot(labels, CLASSES).to(torch.float64),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> Classifier:
    whole = Tensor[PS[None, None], I["dp", "tp"]]
    w1: Tensor[PS[None, None], I["dp", "tp"]] = weights["w1"]
    w2: Tensor[PS[None, None], I["dp", "tp"]] = weights["w2"]
    return Classifier(spmd.redistribute(w1, src=whole, dst=W1).clone(),
                      spmd.redistribute(w2, src=whole, dst=W2).clone())


def step(model: Classifier, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["onehot"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = F.gelu(batch["x"] @ w["w1"]) @ w["w2"]
    return F.cross_entropy(logits, batch["onehot"].argmax(-1))
