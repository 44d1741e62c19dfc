"""Mistake: the column-parallel linear takes the Invariant input directly.

Copy of ``examples/tp_mlp.py`` without ``reinterpret(x, "tp", src=I, dst=R)``
(Megatron's ``copy_to_tensor_model_parallel_region``).  Forward values are the
same, but each rank's gradient of ``x`` only covers its own FFN features: the
backward all-reduce that sums them is missing, and every layer below gets a
wrong gradient.  The checker: an Invariant operand cannot mix with the Varying
weight in linear.
"""

import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, P, S, Tensor, V


class ParallelMLP(nn.Module):
    w1: Tensor[S[0, "tp"]]  # [FFN/tp, HIDDEN]: column-parallel, output features sharded
    b1: Tensor[S[-1, "tp"]]  # [FFN/tp]
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
        h = F.gelu(F.linear(x, self.w1, self.b1))  # error: spmd-invariant-mix
        partial = spmd.reinterpret(F.linear(h, self.w2), "tp", src=V, dst=P)
        return spmd.all_reduce(partial, "tp", src=P, dst=I) + self.b2
