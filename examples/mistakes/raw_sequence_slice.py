"""Mistake: the sequence is split by hand to enter the sequence-parallel region.

Copy of the model in ``examples/sequence_parallel.py`` with
``spmd.convert(emb, "tp", src=I, dst=S(0))`` written as a slice of this rank's
rows.  The forward values are the same, but a slice of an Invariant tensor is
still Invariant: its backward gives each rank the gradient of its own rows
only, where ``convert``'s backward all-gathers them, so ``w_in`` gets a wrong
gradient.  The checker cannot see that the slice depends on the rank; it sees
an Invariant tensor where the sequence-parallel region needs ``S(0)``: at the
first op that mixes it with the region's Replicate LayerNorm weights.
"""

import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, R, S, Tensor

HIDDEN = 8


class SequenceParallelModel(nn.Module):
    w_in: Tensor[I["tp"]]  # [HIDDEN, HIDDEN], whole on every rank
    ln_emb_w: Tensor[R["tp"]]
    ln_emb_b: Tensor[R["tp"]]

    def __init__(self, w_in: Tensor[I["tp"]], ln_emb_w: Tensor[R["tp"]],
                 ln_emb_b: Tensor[R["tp"]], block1: nn.Module, tp_rank: int, tp_size: int) -> None:
        super().__init__()
        self.w_in = nn.Parameter(w_in)
        self.ln_emb_w = nn.Parameter(ln_emb_w)
        self.ln_emb_b = nn.Parameter(ln_emb_b)
        self.block1 = block1
        self.tp_rank = tp_rank
        self.tp_size = tp_size

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[S[0, "tp"]]:
        emb = F.linear(x, self.w_in)
        chunk = emb.shape[0] // self.tp_size
        h = emb[self.tp_rank * chunk:(self.tp_rank + 1) * chunk]  # this rank's rows, by hand
        h = F.layer_norm(h, (HIDDEN,), self.ln_emb_w, self.ln_emb_b)  # error: spmd-invariant-mix
        h1: Tensor[S[0, "tp"]] = self.block1(h)
        return h1
