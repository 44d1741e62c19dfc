"""The fixes the spmd messages offer in LoRA fine-tuning on a tensor-parallel frozen base (the
peft probe), pasted from the check mode's message and run on a gloo world: the values and
gradients equal a single-process reference (checks run by test_peft_fixes_world.py).

- P + R (a row-parallel base's partial output plus a replicated LoRA delta): the first fix,
  ``convert(lora2, "x", src=R, dst=P)``, counts the delta once; the reduction after the sum
  stays (the delta's gradient summed over the ranks is the reference, not world times it).
- P + S(-1) (a partial LoRA delta beside a column-parallel base's output): the fix
  ``reduce_scatter(d, "x", src=P, dst=S(-1))`` (dst=V would split dim 0, the all_reduce's
  result is the whole width).
- I activation into a frozen column-parallel weight: the fix ``reinterpret(h_i, "x", src=I,
  dst=R)`` gives the activation's gradient; no .detach() is offered (it would cut it).
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64
AXIS = "x"


def _mine(ctx: Ctx, seed: int, *shape: int) -> torch.Tensor:
    """This rank's values (different on every rank)."""
    g = torch.Generator().manual_seed(seed * 100 + ctx.rank)
    return torch.randn(*shape, generator=g, dtype=F64)


def _every(ctx: Ctx, seed: int, *shape: int) -> list[torch.Tensor]:
    """Every rank's values of _mine, known to each rank."""
    out = []
    for r in range(ctx.world):
        g = torch.Generator().manual_seed(seed * 100 + r)
        out.append(torch.randn(*shape, generator=g, dtype=F64))
    return out


def _same(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64)


def _message(fn: Any) -> str:
    try:
        fn()
    except SpmdTypeError as e:
        return e.error.message
    raise AssertionError("no error")


def _fix(message: str, pattern: str) -> str:
    m = re.search(pattern, message)
    assert m is not None, f"no {pattern} in the message: {message}"
    return m.group(0)


def _run(text: str, **names: Any) -> Any:
    ns = {k: getattr(spmd, k) for k in ("convert", "reduce_scatter", "reinterpret", "all_reduce")}
    return eval(text, {**ns, "P": P, "R": R, "I": I, "V": V, "S": S, **names})


def check_convert_counts_a_replicate_term_once(ctx: Ctx, name: str) -> None:
    c = _same(3, 2, 4)  # the loss weights, the same on every rank
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            base2 = spmd.declare(_mine(ctx, 1, 2, 4), Tensor[P[AXIS]])
            lora2 = spmd.declare(_same(2, 2, 4).requires_grad_(True), Tensor[R[AXIS]])
            message = _message(lambda: base2 + lora2)
            fix = _fix(message, r'convert\(lora2, "x", src=R, dst=P\)')
            assert message.index(fix) < message.index("all_reduce(base2"), message
            y = spmd.all_reduce(base2 + _run(fix, lora2=lora2), AXIS, src=P, dst=I)
        (y * c).sum().backward()
        total = spmd.all_reduce(lora2.grad, AXIS, src=P, dst=R)  # the gradient's sum
    assert_close(y, sum(_every(ctx, 1, 2, 4)) + _same(2, 2, 4))
    assert_close(total, c)  # once, not world times (a reinterpret R -> P counts it per rank)


def check_reduce_scatter_on_the_shard_dim(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            base = spmd.declare(_mine(ctx, 4, 3, 2), Tensor[S[-1, AXIS]])  # [b, FF/world]
            d = spmd.declare(_mine(ctx, 5, 3, 2 * ctx.world), Tensor[P[AXIS]])  # [b, FF]
            message = _message(lambda: base + d)
            fix = _fix(message, r'reduce_scatter\(d, "x", src=P, dst=S\(-1\)\)')
            assert "dst=V" not in message and "all_reduce" not in message, message
            y = base + _run(fix, d=d)
            assert spmd.typeof(y) == spmd.typeof(base)
    whole = sum(_every(ctx, 5, 3, 2 * ctx.world))
    assert_close(y, _mine(ctx, 4, 3, 2) + whole.chunk(ctx.world, dim=-1)[ctx.rank])


def check_reinterpret_keeps_an_activation_gradient(ctx: Ctx, name: str) -> None:
    h = _same(6, 3, 4).requires_grad_(True)  # the input, the same on every rank
    w_all = _every(ctx, 7, 2, 4)  # W1's row blocks: [FF/world, H] on each rank
    c = _mine(ctx, 8, 3, 2)  # this rank's loss weights on its columns
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            w1 = spmd.declare(nn.Parameter(w_all[ctx.rank].clone(), requires_grad=False),
                              Tensor[S[0, AXIS]])
            h_i = spmd.declare(h, Tensor[I[AXIS]]) * 1  # an activation (it has a grad_fn)
            message = _message(lambda: F.linear(h_i, w1))
            assert ".detach()" not in message and "statistic" not in message, message
            fix = _fix(message, r'reinterpret\(h_i, "x", src=I, dst=R\)')
            y = F.linear(_run(fix, h_i=h_i), w1)
        # the loss: each rank's columns weighted by its c, summed over the ranks
        loss = spmd.all_reduce(spmd.reinterpret((y * c).sum(), AXIS, src=V, dst=P), AXIS,
                               src=P, dst=I)
        loss.backward()
    assert_close(h.grad, sum(cr @ wr for cr, wr in zip(_every(ctx, 8, 3, 2), w_all)))


def suite(world: int) -> list[tuple[str, Any]]:
    return named_checks(world, "peft-fixes", (
        check_convert_counts_a_replicate_term_once, check_reduce_scatter_on_the_shard_dim,
        check_reinterpret_keeps_an_activation_gradient))
