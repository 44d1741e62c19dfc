"""The einsum family with ``out_partial_axes``: local compute, then a declared pending sum.

In local SPMD a matmul is a matmul of the local tensors: with the contracted dim
sharded on "tp" (both operands V on "tp") each rank holds only its share of the
result.  ``out_partial_axes="tp"`` says the global result is the sum of those
shares: the op runs locally and the result is ``reinterpret(V,P)`` on those axes::

    h: V["tp"] (the local columns of the hidden state), w: V["tp"] (the local rows)
    y = spmd.matmul(h, w, out_partial_axes="tp")      # y: P["tp"], no comms yet
    y = spmd.all_reduce(y, "tp", src=P, dst=R)        # the row-parallel all-reduce

Forward: the local result as is.  Backward: the table's backward of
``reinterpret(V,P)``, ``reinterpret(R,V)``: the R gradient of the pending sum is each
rank's gradient as is.  So at runtime nothing is added to the autograd graph (and
the result can be modified in place); the runtime check mode sees the reinterpret.

``out_partial_axes`` takes a mesh axis name or a tuple of names; ``None`` (the default)
is the plain local op.  Without a mesh set the names are not checked (single-process
runs of annotated code).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import _checking
from ._collectives import _declare_partial
from ._global_check import out_partial


def _run(fn: Any, out_partial_axes: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``fn(*args)``, then Partial on ``out_partial_axes``.

    In check mode the axes reach the rule that types the torch call: the global rule (a
    global operand: the rule makes the result P there itself) or the local one
    (:func:`spmd_mypy.engine.ops.partial_op`, the plugin's rule too: the local op, then P
    on those axes, a bias P there).  With no typed operand the result is reinterpreted
    V -> P (untyped stays unknown elsewhere).
    """
    if not _checking.ACTIVE or out_partial_axes is None:
        y = fn(*args, **kwargs)
        return y if out_partial_axes is None else _declare_partial(y, out_partial_axes)
    with out_partial(out_partial_axes) as rec:
        y = fn(*args, **kwargs)
    if rec.handled:
        return y  # typed by the local rule, P on out_partial_axes already
    t = _checking.typeof(y)
    if t is not None and t.spec is not None:
        return y  # typed by the global rule, P on out_partial_axes already
    return _declare_partial(y, out_partial_axes)


def einsum(equation: str, *operands: Any, out_partial_axes: Any = None) -> torch.Tensor:
    """``torch.einsum(equation, *operands)``, Partial on ``out_partial_axes``.

    Use it when a contracted label is sharded on those axes (every operand that has
    it is V there), e.g. ``spmd.einsum("bsh,hd->bsd", x, w, out_partial_axes="tp")``
    with the ``h`` label sharded on "tp".
    """
    return _run(torch.einsum, out_partial_axes, equation, *operands)


def matmul(a: torch.Tensor, b: torch.Tensor, *, out_partial_axes: Any = None) -> torch.Tensor:
    """``torch.matmul(a, b)``, Partial on ``out_partial_axes`` (the contracted dim sharded there)."""
    return _run(torch.matmul, out_partial_axes, a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           out_partial_axes: Any = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, Partial on ``out_partial_axes`` (in-features sharded there).

    A bias given here is added on every rank before the pending sum, so it must itself
    be P on ``out_partial_axes`` (its value is the sum over ranks, e.g. the bias on one
    rank and zeros elsewhere: ``convert(b, "tp", src=R, dst=P)``).  An R bias (the usual
    case, Megatron's RowParallelLinear) belongs after the reduction::

        y = spmd.linear(h, w, out_partial_axes="tp")
        y = spmd.all_reduce(y, "tp", src=P, dst=R) + b
    """
    return _run(F.linear, out_partial_axes, x, weight, bias)


def sum(x: torch.Tensor, dim: Any = None, *, keepdim: bool = False,
        out_partial_axes: Any = None) -> torch.Tensor:
    """``torch.sum(x, dim)``, Partial on ``out_partial_axes`` (``dim`` sharded there).

    ``dim`` is an int, a tuple of ints, or None for all dims.  Each rank sums its shard;
    the global sum is the pending sum of those.
    """
    if dim is None and not keepdim:
        return _run(torch.sum, out_partial_axes, x)
    return _run(torch.sum, out_partial_axes, x,
                dim=tuple(range(x.ndim)) if dim is None else dim, keepdim=keepdim)


__all__ = ["einsum", "matmul", "linear", "sum"]
