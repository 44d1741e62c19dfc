"""Dtypes through the typed collectives on gloo (checks run by test_dtypes_world.py on 2 and 4
ranks).

- A Partial float cast to an integer dtype: the truncation of each rank's summand does not sum
  to the truncation of the sum (measured here); the check mode refuses ``p.to(torch.int64)``
  as it refuses ``p.long()``, and keeps a floating cast.
- Complex tensors with the conjugate bit (``c.conj()``, the gradient autograd hands when the
  loss reads ``y.conj()``): sent resolved, forward and backward.
- ``op="avg"`` of an integer or bool tensor: one TypeError on every rank, before any
  communication (the ranks stay in step: the next collective works).
- Dtypes gloo does not take (int16, uint16/32/64, float8): all_gather and all_to_all move
  their bytes (lossless); the reductions raise naming the dtype and gloo.
- ``sizes=`` with a negative length: a ValueError on every rank before any communication.

Every failing call is followed by a collective that must work: a rank left inside an
exchange would hang it (the world's deadline reports that).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import PARTIAL, SpmdType

AXIS = "x"
EXOTIC = (torch.int16, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
          torch.float8_e5m2)


def _in_step(ctx: Ctx) -> None:
    """Every rank reaches the same collective after the last one (none was left behind)."""
    got = spmd.all_gather(torch.tensor([float(ctx.rank)]), AXIS, src=S(0), dst=R)
    assert_close(got, torch.arange(float(ctx.world)))


def _raises(exc: type[BaseException], call: Callable[[], Any], *words: str) -> str:
    try:
        call()
    except exc as e:
        message = str(e)
    else:
        raise AssertionError(f"no {exc.__name__}")
    for w in words:
        assert w in message, (w, message)
    return message


def check_integer_cast_of_a_partial(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        x = torch.tensor([0.6, 0.6], dtype=torch.float64)  # every rank's summand
        true = spmd.all_reduce(x, AXIS, src=P, dst=R)  # 0.6 * world
        summed_casts = spmd.all_reduce(x.to(torch.int64), AXIS, src=P, dst=R)
        assert summed_casts.tolist() == [0, 0]
        assert true.to(torch.int64).tolist() != [0, 0]  # the cast does not commute with the sum
        with spmd.typecheck():
            p = spmd.declare(x.clone(), Tensor[P[AXIS]])
            for cast in (lambda: p.to(torch.int64), lambda: p.to(dtype=torch.bool),
                         lambda: p.type(torch.LongTensor), lambda: p.type_as(summed_casts),
                         lambda: p.long()):
                _raises(SpmdTypeError, cast, "spmd-partial-nonlinear")
            h = p.to(torch.float32)  # a floating cast: linear
            assert spmd.typeof(h) == SpmdType.of({AXIS: PARTIAL}), spmd.typeof(h)
            got = spmd.all_reduce(h, AXIS, src=P, dst=R)
        assert_close(got, true.to(torch.float32))


def _complex(ctx: Ctx, rows: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(7 + ctx.rank)
    return torch.randn(rows * ctx.world, 2 * ctx.world, dtype=torch.complex128, generator=g)


def check_conjugate_bit_forward(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        c = _complex(ctx)
        lazy = c.conj()
        assert lazy.is_conj()
        assert_close(spmd.all_gather(lazy, AXIS, src=S(0), dst=R),
                     spmd.all_gather(lazy.resolve_conj(), AXIS, src=S(0), dst=R))
        assert_close(spmd.all_to_all(lazy, AXIS, src=V, dst=V),
                     spmd.all_to_all(lazy.resolve_conj(), AXIS, src=V, dst=V))
        assert_close(spmd.all_to_all(lazy, AXIS, src=S(0), dst=S(1)),
                     spmd.all_to_all(lazy.resolve_conj(), AXIS, src=S(0), dst=S(1)))
        assert_close(spmd.reduce_scatter(lazy, AXIS, src=P, dst=S(0)),
                     spmd.reduce_scatter(lazy.resolve_conj(), AXIS, src=P, dst=S(0)))
        neg = lazy.imag  # a negative-bit view
        assert neg.is_neg()
        assert_close(spmd.all_gather(neg, AXIS, src=S(0), dst=R),
                     spmd.all_gather(neg.resolve_neg(), AXIS, src=S(0), dst=R))
        assert_close(spmd.all_reduce(neg, AXIS, src=P, dst=R),
                     spmd.all_reduce(neg.resolve_neg(), AXIS, src=P, dst=R))


def _grad(ctx: Ctx, op: Callable[[torch.Tensor], torch.Tensor], conj: bool) -> torch.Tensor:
    x = _complex(ctx).requires_grad_(True)
    y = op(x)
    w = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(99))
    # Re<y, w>: with y.conj() autograd hands the collective's backward a conj-bit gradient
    loss = (y.conj() * w).real.sum() if conj else (y * w.conj()).real.sum()
    loss.backward()
    assert x.grad is not None
    return x.grad


def check_conjugate_bit_backward(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        for op in (lambda x: spmd.reduce_scatter(x, AXIS, src=P, dst=S(0)),
                   lambda x: spmd.all_to_all(x, AXIS, src=S(0), dst=S(1)),
                   lambda x: spmd.all_gather(x, AXIS, src=S(0), dst=R),
                   lambda x: spmd.all_reduce(x, AXIS, src=P, dst=R)):
            # the same loss written both ways: the same gradient
            assert_close(_grad(ctx, op, True), _grad(ctx, op, False))


def check_avg_of_integers_is_refused_before_any_exchange(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        counts = torch.arange(2 * ctx.world, dtype=torch.int64) + ctx.rank
        for call in (lambda: spmd.all_reduce(counts, AXIS, src=P, dst=R, op="avg"),
                     lambda: spmd.reduce_scatter(counts, AXIS, src=P, dst=S(0), op="avg"),
                     lambda: spmd.reduce_scatter(counts > 2, AXIS, src=P, dst=S(0), op="avg")):
            # the message names both fixes as code: the sum divided by the rank count, or
            # the call on a floating copy
            message = _raises(TypeError, call, 'op="avg"', 'op="sum" and divide the sum by the '
                              f'number of ranks on "{AXIS}" ({ctx.world})', '(x.float(), '
                              f'"{AXIS}", src=P, dst=')
            assert "torch.int64" in message or "torch.bool" in message, message
            _in_step(ctx)
        with spmd.typecheck():
            p = spmd.declare(counts.clone(), Tensor[P[AXIS]])
            _raises(TypeError, lambda: spmd.all_reduce(p, AXIS, src=P, dst=R, op="avg"),
                    "torch.int64")
        _in_step(ctx)
        # a floating tensor averages, its dtype kept
        f = counts.to(torch.float16)
        got = spmd.reduce_scatter(f, AXIS, src=P, dst=S(0), op="avg")
        assert got.dtype == torch.float16
        mean = sum(torch.arange(2 * ctx.world, dtype=torch.float64) + k
                   for k in range(ctx.world)) / ctx.world
        assert_close(got.double(), mean.chunk(ctx.world)[ctx.rank], rtol=1e-3, atol=1e-2)


def _exotic(ctx: Ctx, dt: torch.dtype, rank: int, rows: int) -> torch.Tensor:
    base = torch.arange(rows * 2).reshape(rows, 2) + 10 * rank
    return base.to(torch.float32).to(dt) if dt.is_floating_point else base.to(dt)


def _exact(t: torch.Tensor) -> torch.Tensor:
    """The bits, to compare without any arithmetic on the dtype."""
    return t.contiguous().view(-1).view(torch.uint8)


def check_exotic_dtypes_move_their_bytes(ctx: Ctx, name: str) -> None:
    me = ctx.rank
    for mesh in ("1d",) + (("2x2T",) if ctx.world == 4 else ()):
        axis = AXIS if mesh == "1d" else "tp"
        m = ctx.mesh(mesh)
        ranks = ctx.axis_ranks(m, axis)  # logical order (2x2T: not the global rank order)
        idx, size = ranks.index(me), len(ranks)
        with spmd.set_mesh(m):
            for dt in EXOTIC:
                x = _exotic(ctx, dt, idx, size)
                xs = [_exotic(ctx, dt, r, size) for r in range(size)]
                got = spmd.all_gather(x, axis, src=S(0), dst=R)
                assert got.dtype == dt
                assert torch.equal(_exact(got), _exact(torch.cat(xs)))
                got = spmd.all_gather(x, axis, src=S(1), dst=R)
                assert torch.equal(_exact(got), _exact(torch.cat(xs, 1)))
                sizes = [r + 1 for r in range(size)]
                mine = _exotic(ctx, dt, idx, sizes[idx])
                got = spmd.all_gather(mine, axis, src=S(0), dst=R, sizes=sizes)
                want = torch.cat([_exotic(ctx, dt, r, sizes[r]) for r in range(size)])
                assert torch.equal(_exact(got), _exact(want))
                got = spmd.all_to_all(x, axis, src=V, dst=V)
                want = torch.cat([xs[r][idx:idx + 1] for r in range(size)])
                assert torch.equal(_exact(got), _exact(want))
                wide = [torch.cat([t] * size, 1) for t in (x, *xs)]  # dim 1: 2 * size
                got = spmd.all_to_all(wide[0], axis, src=S(0), dst=S(1))
                want = torch.cat([w.chunk(size, 1)[idx] for w in wide[1:]], 0)
                assert torch.equal(_exact(got), _exact(want))
                # uneven: rank r sends r + 1 rows to logical rank 0, `other` rows to the rest
                for other in (1, 0):
                    def lengths(r: int) -> list[int]:
                        return [(r + 1) if j == 0 else other for j in range(size)]
                    u = _exotic(ctx, dt, idx, sum(lengths(idx)))
                    got = spmd.all_to_all(u, axis, src=V, dst=V, sizes=lengths(idx))
                    want = torch.cat([_exotic(ctx, dt, r, sum(lengths(r))).split(lengths(r))[idx]
                                      for r in range(size)])
                    assert got.dtype == dt and got.shape == want.shape
                    assert torch.equal(_exact(got), _exact(want))
    with spmd.set_mesh(ctx.mesh("1d")):
        _in_step(ctx)


def check_exotic_dtypes_refuse_reductions(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        for dt in EXOTIC:
            x = _exotic(ctx, dt, ctx.rank, ctx.world)
            for call in (lambda: spmd.all_reduce(x, AXIS, src=P, dst=R),
                         lambda: spmd.reduce_scatter(x, AXIS, src=P, dst=S(0)),
                         lambda: spmd.all_reduce(x, AXIS, src=V, dst=R, op="max")):
                _raises(TypeError, call, str(dt), "gloo")
                _in_step(ctx)


def check_negative_sizes_raise_on_every_rank(ctx: Ctx, name: str) -> None:
    n = ctx.world
    sizes = [2] + [-1] + [2] * (n - 2)  # rank 0's own entry is right
    with spmd.set_mesh(ctx.mesh("1d")):
        x = torch.zeros(2, 3)
        for typecheck in (False, True):
            with spmd.typecheck() if typecheck else _nothing():
                t = spmd.declare(x.clone(), Tensor[S[0, AXIS]]) if typecheck else x
                _raises(ValueError, lambda: spmd.all_gather(t, AXIS, src=S(0), dst=R, sizes=sizes),
                        "negative", str(sizes))
                _raises(ValueError, lambda: spmd.redistribute(t, AXIS, src=S(0), dst=R,
                                                             sizes=sizes), "negative")
            _in_step(ctx)
        p = torch.zeros(3, 3)
        _raises(ValueError, lambda: spmd.reduce_scatter(p, AXIS, src=P, dst=S(0),
                                                       sizes=[4, -1] + [0] * (n - 2)), "negative")
        _in_step(ctx)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "dtypes", (
        check_integer_cast_of_a_partial, check_conjugate_bit_forward,
        check_conjugate_bit_backward, check_avg_of_integers_is_refused_before_any_exchange,
        check_exotic_dtypes_move_their_bytes, check_exotic_dtypes_refuse_reductions,
        check_negative_sizes_raise_on_every_rank))
