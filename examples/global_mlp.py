"""The gated MLP of the sharding-in-types posts in global SPMD on ("dp", "tp"), with a
global-SPMD loss function.

The JAX version (``seeds/sharding_in_types_posts.md``) reshards the input to
``P(None, 'dp', None, reduced={'tp'})`` and the weights to ``P(None, 'tp',
reduced={'dp'})``, runs three einsums and asks for ``unreduced={'tp'}`` on the
last one.  Here the same program, with the per-axis types spelled out::

    x    f32[s, b@dp, h]  I:tp     --redistribute--> R:tp   (backward: all-reduce on tp)
    w1   f32[h, i@tp]     I:dp     --redistribute--> R:dp   (backward: all-reduce on dp)
    h1 = einsum("sbh,hi->sbi", x, w1)          f32[s, b@dp, i@tp]      no comms
    h3 = einsum("sbh,hi->sbi", x, w3)          f32[s, b@dp, i@tp]
    h  = einsum("sbi,sbi->sbi", silu(h1), h3)  f32[s, b@dp, i@tp]
    out = spmd.einsum("sbi,ih->sbh", h, w2, out_partial_axes="tp")
                                               f32[s, b@dp, h]  P:tp  (JAX's unreduced)
    out --redistribute--> I:tp                 one all-reduce on tp

Partial never appears implicitly: without ``out_partial_axes="tp"`` the last einsum
is an error (its contracted label ``i`` is sharded on tp).  The weights are I on
"dp" (one logical parameter) and R after the redistribute: that ``reinterpret(I,R)``
is JAX's ``reduced={'dp'}``, and its backward is the data-parallel gradient
all-reduce, so no ``finalize_grads`` is needed.

The loss (:func:`mse_loss`) is global SPMD too: the mean over the global tensor is a
sum over the dp-sharded batch dim, so it says ``out_partial_axes="dp"``: a loss that
is P on "dp" and I on "tp", what ``loss.backward()`` needs.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import PS, I, P, R, Tensor

SEQ, BATCH, HIDDEN, INTER = 4, 8, 16, 32

DATA_PARALLEL = True  # step() splits the batch over "dp" itself

# parameter name -> {mesh axis: the tensor dim sharded on it}
SHARDING: dict[str, dict[str, int]] = {"w1": {"tp": 1}, "w3": {"tp": 1}, "w2": {"tp": 0}}

Act = Tensor[PS[None, "dp", None], I["tp"]]  # [SEQ, BATCH@dp, HIDDEN]
ColW = Tensor[PS[None, "tp"], I["dp"]]  # [HIDDEN, INTER@tp]
RowW = Tensor[PS["tp", None], I["dp"]]  # [INTER@tp, HIDDEN]
Loss = Tensor[PS[()], P["dp"], I["tp"]]


class GatedMLP(nn.Module):
    w1: ColW
    w3: ColW
    w2: RowW

    def __init__(self, w1: ColW, w3: ColW, w2: RowW) -> None:
        super().__init__()
        self.w1 = nn.Parameter(w1)
        self.w3 = nn.Parameter(w3)
        self.w2 = nn.Parameter(w2)

    def forward(self, x: Act) -> Act:
        rx = spmd.redistribute(x, src=Act, dst=Tensor[PS[None, "dp", None], R["tp"]])
        rw1 = spmd.redistribute(self.w1, src=ColW, dst=Tensor[PS[None, "tp"], R["dp"]])
        rw3 = spmd.redistribute(self.w3, src=ColW, dst=Tensor[PS[None, "tp"], R["dp"]])
        rw2 = spmd.redistribute(self.w2, src=RowW, dst=Tensor[PS["tp", None], R["dp"]])
        h1 = torch.einsum("sbh,hi->sbi", rx, rw1)
        h3 = torch.einsum("sbh,hi->sbi", rx, rw3)
        h = torch.einsum("sbi,sbi->sbi", F.silu(h1), h3)
        out = spmd.einsum("sbi,ih->sbh", h, rw2, out_partial_axes="tp")
        return spmd.redistribute(out, src=Tensor[PS[None, "dp", None], P["tp"]], dst=Act)


def mse_loss(out: Act, y: Act) -> Loss:
    """The mean squared error over the global tensors: P on "dp" (each replica's share of
    the global sum), I on "tp"."""
    d = out - y
    return spmd.sum(d * d, (0, 1, 2), out_partial_axes="dp") / (SEQ * BATCH * HIDDEN)


def train_step(model: GatedMLP, x: Tensor[PS[None, None, None], I["dp", "tp"]],
               y: Tensor[PS[None, None, None], I["dp", "tp"]]) -> torch.Tensor:
    """The whole batch in, this replica's rows (a local chunk, no comms), forward, loss,
    backward; returns the global loss."""
    whole = Tensor[PS[None, None, None], I["dp", "tp"]]
    xs = spmd.redistribute(x, src=whole, dst=Act)
    ys = spmd.redistribute(y, src=whole, dst=Act)
    out = model.forward(xs)
    loss = mse_loss(out, ys)
    loss.backward()
    return spmd.redistribute(loss.detach(), src=Loss, dst=Tensor[PS[()], R["dp"], I["tp"]])


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "w1": torch.randn(HIDDEN, INTER, generator=g, dtype=f64) / HIDDEN**0.5,
        "w3": torch.randn(HIDDEN, INTER, generator=g, dtype=f64) / HIDDEN**0.5,
        "w2": torch.randn(INTER, HIDDEN, generator=g, dtype=f64) / INTER**0.5,
    }


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(SEQ, BATCH, HIDDEN, generator=g, dtype=torch.float64),
        "y": torch.randn(SEQ, BATCH, HIDDEN, generator=g, dtype=torch.float64),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> GatedMLP:
    """Each rank keeps its shard of the full weights (a local chunk: no comms)."""
    whole = Tensor[PS[None, None], I["dp", "tp"]]
    w1: Tensor[PS[None, None], I["dp", "tp"]] = weights["w1"]
    w3: Tensor[PS[None, None], I["dp", "tp"]] = weights["w3"]
    w2: Tensor[PS[None, None], I["dp", "tp"]] = weights["w2"]
    return GatedMLP(
        spmd.redistribute(w1, src=whole, dst=ColW).clone(),
        spmd.redistribute(w3, src=whole, dst=ColW).clone(),
        spmd.redistribute(w2, src=whole, dst=RowW).clone(),
    )


def step(model: GatedMLP, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["x"], batch["y"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    x = batch["x"]
    h = F.silu(x @ w["w1"]) * (x @ w["w3"])
    return F.mse_loss(h @ w["w2"], batch["y"])
