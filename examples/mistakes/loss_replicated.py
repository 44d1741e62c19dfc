"""Mistake: the logits are all-reduced to Replicate where Invariant was needed.

Copy of ``examples/dp_tp_train.py`` with ``dst=R`` in the "tp" all-reduce.  The
forward is the same, but the loss is then Replicate on "tp": every tp rank
seeds its own gradient of 1 and ``all_reduce(P,R)``'s backward sums them, so
every gradient comes out ``tp`` times too large.  The checker: ``.backward()``
needs the loss Invariant or Partial on every axis.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, P, R, S, Tensor, V

HIDDEN = 8


class DpTpClassifier(nn.Module):
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

    def forward(self, x: Tensor[I["tp"], S[0, "dp"]]) -> Tensor[R["tp"], V["dp"]]:
        h = F.rms_norm(x, (HIDDEN,), self.norm_w)
        h_r = spmd.reinterpret(h, "tp", src=I, dst=R)
        a = F.gelu(F.linear(h_r, self.w1))
        partial = spmd.linear(a, self.w2, out_partial_axes="tp")
        return spmd.all_reduce(partial, "tp", src=P, dst=R)

    def finalize_grads(self) -> None:
        for param in (self.norm_w, self.w1, self.w2):
            grad = param.grad
            assert grad is not None
            param.grad = spmd.all_reduce(grad, "dp", src=P, dst=R)


def train_step(model: DpTpClassifier, x: Tensor[I["tp"], I["dp"]],
               labels: torch.Tensor) -> torch.Tensor:
    x_local = spmd.convert(x, "dp", src=I, dst=S(0))
    labels_local = labels.tensor_split(model.dp_size)[model.dp_rank]
    logits: Tensor[R["tp"], V["dp"]] = model(x_local)
    share = F.cross_entropy(logits, labels_local, reduction="sum") / labels.numel()
    loss = spmd.reinterpret(share, "dp", src=V, dst=P)
    loss.backward()  # error: spmd-backward
    model.finalize_grads()
    return spmd.all_reduce(loss.detach(), "dp", src=P, dst=R)
