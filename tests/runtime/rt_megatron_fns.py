"""Custom autograd Functions as Megatron writes them (raw torch.distributed collectives in
forward and backward, inputs returned as they are), annotated with SPMD types.  The same
source is checked statically (tests/static/test_megatron_fns_static.py: only the seeded
mistake is reported) and run in the check mode on gloo ranks (rt_hooks.py,
check_megatron_functions: the values against float64 references).

- What a raw collective writes in place is untyped after the call, in both checkers: the
  gradient all-reduced into ``g`` and returned, a forward's in-place reductions.
- R and I hold the same values where no gradient flows: a Function's forward returns its I
  input as the declared R (``_CopyToModelParallelRegion``), its backward its I gradient where
  R is due (``_ReduceFromModelParallelRegion``).
- torch.func (grad, vjp) runs a setup_context Function's backward: its duality is checked
  there too.
- The column- and row-parallel linear layers' Functions compute their backward on what forward
  saved (``ctx.saved_tensors``, typed by both checkers as forward saved it): the saved I input
  meets the V gradient there, without grad (rt_autograd_fn.check_linear_saved_tensors).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import spmd
from spmd import I, P, R, S, Tensor, V


class CopyToRegion(torch.autograd.Function):
    """megatron.core.tensor_parallel.mappings._CopyToModelParallelRegion."""

    @staticmethod
    def forward(ctx: Any, input_: Tensor[I["x"]]) -> Tensor[R["x"]]:
        return input_

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor[P["x"]]) -> Tensor[I["x"]]:
        grad_output = grad_output.clone()
        dist.all_reduce(grad_output)
        return grad_output


class ReduceFromRegion(torch.autograd.Function):
    """megatron.core.tensor_parallel.mappings._ReduceFromModelParallelRegion."""

    @staticmethod
    def forward(ctx: Any, input_: Tensor[P["x"]]) -> Tensor[I["x"]]:
        out = input_.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor[I["x"]]) -> Tensor[R["x"]]:
        return grad_output


class VocabParallelCE(torch.autograd.Function):
    """A fused vocab-parallel cross entropy (the mean over tokens) reducing with raw in-place
    all-reduces, as Megatron's _VocabParallelCrossEntropy does."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor[S[-1, "x"]], target: Tensor[R["x"]]) -> Tensor[I["x"]]:
        vloc = logits.shape[-1]
        lo = dist.get_rank() * vloc
        m = logits.max(-1).values.detach().clone()
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        z = logits - m.unsqueeze(-1)
        ez = z.exp()
        se = ez.sum(-1)
        dist.all_reduce(se)
        inside = (target >= lo) & (target < lo + vloc)
        idx = (target - lo).clamp(0, vloc - 1)
        zt = z.gather(-1, idx.unsqueeze(-1)).squeeze(-1) * inside
        dist.all_reduce(zt)
        loss = (se.log() - zt).mean()
        ctx.save_for_backward(ez / se.unsqueeze(-1), idx, inside)
        return loss

    @staticmethod
    def backward(ctx: Any, g: Tensor[I["x"]]) -> tuple[Tensor[S[-1, "x"]], None]:
        sm, idx, inside = ctx.saved_tensors
        onehot = torch.zeros_like(sm).scatter_(-1, idx.unsqueeze(-1), 1.0) * inside.unsqueeze(-1)
        n = sm.numel() // sm.shape[-1]
        return g * (sm - onehot) / n, None


class ColumnLinear(torch.autograd.Function):
    """megatron.core.tensor_parallel.layers.LinearWithGradAccumulationAndAsyncCommunication
    without sequence parallelism: the input's gradient is a partial sum over the sharded output
    features, all-reduced raw into the name returned."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[I["x"]], w: Tensor[V["x"]]) -> Tensor[V["x"]]:
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx: Any, g: Tensor[V["x"]]) -> tuple[Tensor[I["x"]], Tensor[V["x"]]]:
        x, w = ctx.saved_tensors
        gx = g @ w
        dist.all_reduce(gx)
        return gx, g.t() @ x


class RowLinear(torch.autograd.Function):
    """The row-parallel layer: the partial products all-reduced in forward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[V["x"]], w: Tensor[V["x"]]) -> Tensor[I["x"]]:
        ctx.save_for_backward(x, w)
        y = x @ w.t()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: Tensor[I["x"]]) -> tuple[Tensor[V["x"]], Tensor[V["x"]]]:
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x


class CopyToRegionFunc(torch.autograd.Function):
    """The copy to the region in torch.func's form (setup_context)."""

    @staticmethod
    def forward(input_: Tensor[I["x"]]) -> Tensor[R["x"]]:
        return input_.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor[P["x"]]) -> Tensor[I["x"]]:
        return spmd.all_reduce(grad_output, "x", src=P, dst=I)


class CopyToRegionFuncForgot(torch.autograd.Function):
    """The same with the all-reduce forgotten: each rank's partial gradient."""

    @staticmethod
    def forward(input_: Tensor[I["x"]]) -> Tensor[R["x"]]:
        return input_.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor[P["x"]]) -> Tensor[I["x"]]:
        return grad_output  # seeded: spmd-duality
