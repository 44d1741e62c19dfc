"""Custom autograd Functions with SPMD-annotated forward/backward that compute with raw
torch.distributed calls inside (an uneven ``all_to_all_single``, which ``spmd.all_to_all``
cannot express): in check mode ``Fn.apply`` has forward's declared types, as the static
checker gives them (SPEC section 5); its tensor arguments are checked against forward's
parameters with the static checker's error; outside check mode nothing changes."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.testing import assert_close

import spmd
from rt_checks import Ctx
from spmd import P, R, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import VARYING, SpmdType

F64 = torch.float64
AXIS = "x"


def _splits(rank: int, world: int) -> tuple[list[int], list[int]]:
    """(rows this rank sends to each rank, rows it receives from each): uneven."""
    send = [rank + j + 1 for j in range(world)]
    recv = [j + rank + 1 for j in range(world)]
    return send, recv


class _UnevenAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[V["x"]], send: list[int], recv: list[int]) -> Tensor[V["x"]]:
        ctx.splits = (send, recv)
        out = x.new_empty((sum(recv),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx: Any, g: Tensor[V["x"]]) -> tuple[Tensor[V["x"]], None, None]:
        send, recv = ctx.splits
        out = g.new_empty((sum(send),) + tuple(g.shape[1:]))
        dist.all_to_all_single(out, g.contiguous(), send, recv)
        return out, None, None


def _input(rank: int, world: int) -> torch.Tensor:
    send, _ = _splits(rank, world)
    rows = sum(send)
    return (torch.arange(rows * 3, dtype=F64).reshape(rows, 3) + 100 * rank).requires_grad_()


def _expected(rank: int, world: int) -> torch.Tensor:
    parts = []
    for j in range(world):
        send_j, _ = _splits(j, world)
        xj = _input(j, world).detach()
        start = sum(send_j[:rank])
        parts.append(xj[start:start + send_j[rank]])
    return torch.cat(parts)


def check_apply_typed(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(_input(ctx.rank, ctx.world), Tensor[V["x"]])
            y = _UnevenAllToAll.apply(x, send, recv)
            assert spmd.typeof(y) == SpmdType.of({AXIS: VARYING}), spmd.typeof(y)
            assert_close(y.detach(), _expected(ctx.rank, ctx.world))
            # the checks downstream of the dispatch are on: y is V, not P
            try:
                spmd.all_reduce(y.sum(0), AXIS, src=P, dst=R)
            except SpmdTypeError as e:
                assert e.code == "spmd-src-mismatch", e
            else:
                raise AssertionError("a V result passed as src=P was not caught")
            loss = spmd.reinterpret((y * y).sum(), AXIS, src=V, dst=P)
            loss.backward()
            assert spmd.typeof(x.grad) == SpmdType.of({AXIS: VARYING})
        assert_close(x.grad, 2 * x.detach())  # the backward sent each row's gradient home


def check_apply_argument_mismatch(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            r = spmd.declare(_input(ctx.rank, ctx.world), Tensor[R["x"]])
            try:
                _UnevenAllToAll.apply(r, send, recv)  # raises before forward: no collective
            except SpmdTypeError as e:
                assert e.code == "spmd-mismatch", e
                assert str(e).startswith(
                    'argument r (parameter "x" of _UnevenAllToAll.apply) is Tensor[R["x"]] but '
                    'Tensor[V["x"]] is expected: it is R on "x" where V is needed'), str(e)
            else:
                raise AssertionError("an R argument for a V parameter was not caught")
        dist.barrier()


def check_off_untouched(ctx: Ctx, name: str) -> None:
    send, recv = _splits(ctx.rank, ctx.world)
    torch_apply = torch.autograd.Function.__dict__["apply"]
    x = _input(ctx.rank, ctx.world)
    y = _UnevenAllToAll.apply(x, send, recv)
    assert spmd.typeof(y) is None and spmd.typeof(x) is None
    assert torch.autograd.Function.__dict__["apply"] is torch_apply
    with spmd.typecheck():
        assert torch.autograd.Function.__dict__["apply"] is not torch_apply
    assert torch.autograd.Function.__dict__["apply"] is torch_apply  # put back
    z = _UnevenAllToAll.apply(x, send, recv)
    assert spmd.typeof(z) is None and spmd.typeof(x) is None
    assert_close(y.detach(), _expected(ctx.rank, ctx.world))
    (y * y).sum().backward()
    assert_close(x.grad, 2 * x.detach())


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    out = []
    for check in (check_apply_typed, check_apply_argument_mismatch, check_off_untouched):
        n = f"w{world}/autograd-fn/{check.__name__[len('check_'):]}"
        out.append((n, functools.partial(check, name=n)))
    return out
