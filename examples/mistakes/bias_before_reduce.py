"""Mistake: the row-parallel bias is added before the reduce-scatter.

Copy of the block in ``examples/sequence_parallel.py`` with ``+ self.b2`` moved
inside the reduction.  Every rank adds the (Replicate) bias to its partial sum,
so the reduce-scatter adds it once per rank: the output is off by
``(tp - 1) * b2``.  The checker: a Partial operand added to a Replicate value.
"""

import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import P, R, S, Tensor

HIDDEN = 8


class SequenceParallelMLPBlock(nn.Module):
    ln_w: Tensor[R["tp"]]  # [HIDDEN]; gradient Partial on "tp"
    ln_b: Tensor[R["tp"]]
    w1: Tensor[S[0, "tp"]]  # [FFN/tp, HIDDEN] column-parallel
    b1: Tensor[S[-1, "tp"]]
    w2: Tensor[S[1, "tp"]]  # [HIDDEN, FFN/tp] row-parallel
    b2: Tensor[R["tp"]]  # [HIDDEN]

    def __init__(self, ln_w: Tensor[R["tp"]], ln_b: Tensor[R["tp"]], w1: Tensor[S[0, "tp"]],
                 b1: Tensor[S[-1, "tp"]], w2: Tensor[S[1, "tp"]], b2: Tensor[R["tp"]]) -> None:
        super().__init__()
        self.ln_w = nn.Parameter(ln_w)
        self.ln_b = nn.Parameter(ln_b)
        self.w1 = nn.Parameter(w1)
        self.b1 = nn.Parameter(b1)
        self.w2 = nn.Parameter(w2)
        self.b2 = nn.Parameter(b2)

    def forward(self, x: Tensor[S[0, "tp"]]) -> Tensor[S[0, "tp"]]:
        h = F.layer_norm(x, (HIDDEN,), self.ln_w, self.ln_b)
        h_full = spmd.all_gather(h, "tp", src=S(0), dst=R)
        a = F.gelu(F.linear(h_full, self.w1, self.b1))
        partial = spmd.linear(a, self.w2, out_partial_axes="tp")
        y = spmd.reduce_scatter(partial + self.b2, "tp", src=P, dst=S(0))  # error: spmd-partial-affine
        return x + y
