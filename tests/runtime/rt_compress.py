"""A Partial gradient compressed before its exchange on gloo (checks run by
test_compress_world.py on 2 and 4 ranks; the typed functions are rt_compress_fns.py).

- Each compression, run plainly and in the check mode, gives the numbers of a one-process run
  of the same compression over every rank's summand (the same codes, scales, top-k entries and
  residuals), and the check mode types its result as annotated.
- ``reinterpret(P,V)`` keeps the local data (no exchange) and is refused, plainly and in the
  check mode, on a value that carries a gradient (``spmd-no-grad``); under ``no_grad`` a
  non-linear op of the P value itself is refused with a message that offers it.

Every failing call is followed by a collective that must work: a rank left inside an
exchange would hang it (the world's deadline reports that).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.testing import assert_close

import rt_compress_fns as C
import spmd
from rt_checks import Ctx, named_checks
from spmd import P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import SpmdType, VARYING, REPLICATE, PARTIAL

AXIS = "x"


def _summand(rank: int, shape: tuple[int, ...] = (6, 4)) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(shape, generator=g) * (rank + 1)


def _in_step(ctx: Ctx) -> None:
    got = spmd.all_gather(torch.tensor([float(ctx.rank)]), AXIS, src=S(0), dst=R)
    assert_close(got, torch.arange(float(ctx.world)))


def _raises(call: Callable[[], Any], *words: str) -> str:
    try:
        call()
    except SpmdTypeError as e:
        message = str(e)
    else:
        raise AssertionError("no error")
    for w in words:
        assert w in message, (w, message)
    return message


def _int8_reference(world: int) -> torch.Tensor:
    out = torch.zeros(6, 4)
    for k in range(world):
        g = _summand(k)
        scale = g.abs().amax().clamp(min=1e-12) / 127.0
        out += (g / scale).round().clamp(-127, 127).to(torch.int8).float() * scale
    return out


def check_int8_all_reduce(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        want = _int8_reference(ctx.world)
        exact = sum(_summand(k) for k in range(ctx.world))
        assert not torch.equal(want, exact)  # lossy: the test tells the codes from the sum
        assert_close(C.int8_all_reduce(_summand(ctx.rank)), want, rtol=0, atol=1e-6)
        with spmd.typecheck():
            g = spmd.declare(_summand(ctx.rank), Tensor[P[AXIS]])
            got = spmd.checked(C.int8_all_reduce)(g)
            assert spmd.typeof(got) == SpmdType.of({AXIS: REPLICATE}), spmd.typeof(got)
        assert_close(got, want, rtol=0, atol=1e-6)


def check_int8_all_reduce_of_a_grad(ctx: Ctx, name: str) -> None:
    """A replicated weight's .grad after backward (each rank's summand: its own data)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        for typecheck in (False, True):
            w = torch.ones(6, 4, requires_grad=True)
            with spmd.typecheck() if typecheck else _nothing():
                wt = spmd.declare(w, Tensor[R[AXIS]]) if typecheck else w
                (wt * _summand(ctx.rank)).sum().backward()
                got = (spmd.checked(C.int8_all_reduce_of_grad) if typecheck
                       else C.int8_all_reduce_of_grad)(wt)
            assert_close(got, _int8_reference(ctx.world), rtol=0, atol=1e-6)


def check_topk_error_feedback(ctx: Ctx, name: str) -> None:
    k = 5
    with spmd.set_mesh(ctx.mesh("1d")):
        err = torch.linspace(-0.5, 0.5, 24).view(6, 4) * (ctx.rank - 0.5)
        # the reference: every rank's top-k of its summand plus residual, in one process
        dense = torch.zeros(24)
        residual = None
        for r in range(ctx.world):
            acc = (_summand(r) + torch.linspace(-0.5, 0.5, 24).view(6, 4) * (r - 0.5)).flatten()
            idx = acc.abs().topk(k).indices
            dense.index_add_(0, idx, acc[idx])
            if r == ctx.rank:
                residual = acc.index_fill(0, idx, 0.0).view(6, 4)
        assert residual is not None
        got, res = C.topk_error_feedback(_summand(ctx.rank), err, k)
        assert_close(got, dense.view(6, 4), rtol=0, atol=1e-6)
        assert_close(res, residual, rtol=0, atol=0)
        # the sum of what was sent and what is kept is every rank's input, nothing lost
        kept = spmd.all_reduce(res, AXIS, src=P, dst=R)
        whole = sum(_summand(r) + torch.linspace(-0.5, 0.5, 24).view(6, 4) * (r - 0.5)
                    for r in range(ctx.world))
        assert_close(got + kept, whole, rtol=0, atol=1e-5)
        with spmd.typecheck():
            g = spmd.declare(_summand(ctx.rank), Tensor[P[AXIS]])
            e = spmd.declare(err.clone(), Tensor[V[AXIS]])
            got2, res2 = spmd.checked(C.topk_error_feedback)(g, e, k)
            assert spmd.typeof(got2) == SpmdType.of({AXIS: REPLICATE}), spmd.typeof(got2)
            assert spmd.typeof(res2) == SpmdType.of({AXIS: VARYING}), spmd.typeof(res2)
        assert_close(got2, got, rtol=0, atol=0)


def check_reduce_scatter_fp32_accumulate(ctx: Ctx, name: str) -> None:
    n = ctx.world
    with spmd.set_mesh(ctx.mesh("1d")):
        g = _summand(ctx.rank, (2 * n, 3))
        chunks = [sum(_summand(r, (2 * n, 3)).to(torch.bfloat16).float()[2 * j:2 * j + 2]
                      for r in range(n)) for j in range(n)]
        got = C.reduce_scatter_fp32_accumulate(g, n)
        assert_close(got, chunks[ctx.rank], rtol=0, atol=1e-6)
        with spmd.typecheck():
            gt = spmd.declare(g.clone().requires_grad_(True), Tensor[P[AXIS]])
            got2 = spmd.checked(C.reduce_scatter_fp32_accumulate)(gt, n)
        assert_close(got2, chunks[ctx.rank], rtol=0, atol=1e-6)


def check_powersgd_residual_sums_to_the_difference(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        approx = torch.full((6, 4), 0.25)
        with spmd.typecheck():
            m = spmd.declare(_summand(ctx.rank).requires_grad_(True), Tensor[P[AXIS]])
            a = spmd.declare(approx.clone(), Tensor[R[AXIS]])
            n = ctx.world
            # the residual written per rank (each subtracts approx / n) is refused, and the
            # message names the typed spelling this function uses
            _raises(lambda: m - a / n, "spmd-partial-affine",
                    f'convert(a, "{AXIS}", src=R, dst=P) in its place')
            res = spmd.checked(C.powersgd_residual)(m, a)
            assert spmd.typeof(res) == SpmdType.of({AXIS: PARTIAL}), spmd.typeof(res)
            total = spmd.all_reduce(res, AXIS, src=P, dst=R)
        assert_close(total, sum(_summand(r) for r in range(ctx.world)) - approx,
                     rtol=0, atol=1e-5)


def check_reinterpret_P_V_needs_no_gradient(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        for typecheck in (False, True):
            with spmd.typecheck() if typecheck else _nothing():
                x = _summand(ctx.rank).requires_grad_(True)
                g = spmd.declare(x, Tensor[P[AXIS]]) if typecheck else x
                _raises(lambda: spmd.reinterpret(g, AXIS, src=P, dst=V), "spmd-no-grad",
                        "has no gradient", ".detach()")
                _in_step(ctx)
                with torch.no_grad():
                    mine = spmd.reinterpret(g, AXIS, src=P, dst=V)
                    assert mine is not g and torch.equal(mine, _summand(ctx.rank))
                    if typecheck:
                        assert spmd.typeof(mine) == SpmdType.of({AXIS: VARYING})
                        assert spmd.typeof(g) == SpmdType.of({AXIS: PARTIAL})
                        # the P value itself through a non-linear op: the reinterpret is
                        # not offered, even without a gradient (where a gradient all-reduce
                        # was forgotten it would compute per-rank results silently)
                        message = _raises(lambda: (g / 3).round(), "spmd-partial-nonlinear")
                        assert "src=P, dst=V" not in message, message
                codes = spmd.reinterpret(g.detach(), AXIS, src=P, dst=V).round().to(torch.int8)
                assert codes.dtype == torch.int8
                _in_step(ctx)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "compress", (
        check_int8_all_reduce, check_int8_all_reduce_of_a_grad, check_topk_error_feedback,
        check_reduce_scatter_fp32_accumulate, check_powersgd_residual_sums_to_the_difference,
        check_reinterpret_P_V_needs_no_gradient))
