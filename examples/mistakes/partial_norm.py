"""Mistake: the post-MLP LayerNorm runs on the row-parallel output before the reduction.

Copy of the block in ``examples/sequence_parallel.py`` with the post-norm moved
before the reduce-scatter (to normalise the smaller tensor).  Each rank
normalises its own partial sum: LayerNorm of the parts is not the LayerNorm of
the sum.  The checker: a Partial operand cannot go through a non-linear op.
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
        normed = F.layer_norm(partial, (HIDDEN,), self.post_ln_w, self.post_ln_b)  # error: spmd-partial-nonlinear
        y = spmd.reduce_scatter(normed, "tp", src=P, dst=S(0)) + self.b2
        return x + y
