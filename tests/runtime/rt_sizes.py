"""``sizes=`` must be the same list on every rank of the axis (checks run by
test_sizes_world.py on 2 and 4 gloo ranks).

Each rank checks only its own entry against its tensor (and the sum), so a list that differs
from rank to rank elsewhere (a rank's list shifted by one, the list of another layer) cuts and
joins the blocks at different offsets: wrong shards, silently (the zero3 probe's
MISTAKE=wrong_sizes_fwd / shift_sizes).  The check mode all-gathers the lists once per call
and raises, naming the axis, this rank's list and a differing rank's; every rank raises (no
rank is left waiting in the collective).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V

F64 = torch.float64
AXIS = "x"


def _lengths(n: int) -> list[int]:
    """The true per-rank lengths: uneven."""
    return [k + 1 for k in range(n)]


def _shifted(ctx: Ctx) -> list[int]:
    """This rank's list: its own entry right, the others off by one (differs by rank)."""
    true = _lengths(ctx.world)
    return [t if k == ctx.rank else t + 1 for k, t in enumerate(true)]


def _row(rank: int, length: int) -> torch.Tensor:
    return torch.arange(length, dtype=F64) + 10 * rank


def _raises_differing(ctx: Ctx, declared: Any, x: torch.Tensor,
                      call: Callable[[torch.Tensor], Any], mine: Any) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            t = spmd.declare(x, declared)
            try:
                call(t)
            except ValueError as e:
                message = str(e)
            else:
                raise AssertionError("sizes= differing from rank to rank was not reported")
    assert "sizes= differs from rank to rank on axis 'x'" in message, message
    mine_text = "no sizes=" if mine is None else f"sizes={mine}"
    assert f"this rank (index {ctx.rank} on the axis, global rank {ctx.rank}) passed {mine_text}," \
        in message, message
    # the differing rank's list, as that rank passed it
    other = int(message.split(", index ")[1].split(" ")[0])
    assert other != ctx.rank
    theirs = _shifted_of(other, ctx.world)
    assert f"passed sizes={theirs};" in message or "passed no sizes=;" in message, message


def _shifted_of(rank: int, n: int) -> list[int]:
    true = _lengths(n)
    return [t if k == rank else t + 1 for k, t in enumerate(true)]


def check_all_gather_shifted(ctx: Ctx, name: str) -> None:
    x = _row(ctx.rank, _lengths(ctx.world)[ctx.rank])
    _raises_differing(ctx, Tensor[S[0, AXIS]], x,
                      lambda t: spmd.all_gather(t, AXIS, src=S(0), dst=R, sizes=_shifted(ctx)),
                      _shifted(ctx))


def check_redistribute_shifted(ctx: Ctx, name: str) -> None:
    x = _row(ctx.rank, _lengths(ctx.world)[ctx.rank])
    _raises_differing(ctx, Tensor[S[0, AXIS]], x,
                      lambda t: spmd.redistribute(t, AXIS, src=S(0), dst=R, sizes=_shifted(ctx)),
                      _shifted(ctx))


def _same_sum(ctx: Ctx) -> list[int]:
    """A list whose sum is right on every rank but which differs by rank (the rows of rank
    0 and 1 swapped on odd ranks)."""
    true = _lengths(ctx.world)
    if ctx.rank % 2:
        true[0], true[1] = true[1], true[0]
    return true


def check_reduce_scatter_same_sum(ctx: Ctx, name: str) -> None:
    n = sum(_lengths(ctx.world))
    x = torch.arange(n, dtype=F64) * (ctx.rank + 1)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            t = spmd.declare(x, Tensor[P[AXIS]])
            try:
                spmd.reduce_scatter(t, AXIS, src=P, dst=S(0), sizes=_same_sum(ctx))
            except ValueError as e:
                message = str(e)
            else:
                raise AssertionError("sizes= differing from rank to rank was not reported")
    assert f"passed sizes={_same_sum(ctx)}, index" in message, message
    assert "reduce_scatter(x, 'x', src=P, dst=S(0))" in message, message


def check_convert_shifted(ctx: Ctx, name: str) -> None:
    n = sum(_lengths(ctx.world))
    sizes = _same_sum(ctx)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            t = spmd.declare(torch.arange(n, dtype=F64), Tensor[I[AXIS]])
            try:
                spmd.convert(t, AXIS, src=I, dst=S(0), sizes=sizes)
            except ValueError as e:
                message = str(e)
            else:
                raise AssertionError("sizes= differing from rank to rank was not reported")
    assert "sizes= differs from rank to rank on axis 'x'" in message, message


def check_one_record_per_call(ctx: Ctx, name: str) -> None:
    """The check mode exchanges one small record per collective (the ranks' call, dtype,
    shape and sizes=: rt_agree.py), sizes= folded into it: a call given sizes= issues no
    second exchange of the lists (a regression probe measured an extra small all_gather, a
    host sync on NCCL, on every even call when the lists had their own)."""
    from spmd import _dist_utils as du
    calls: list[str] = []
    real_gather, real_exchange = du.all_gather, du.exchange

    def gather(*a: Any, **k: Any) -> Any:
        calls.append("all_gather")
        return real_gather(*a, **k)

    def exchange(*a: Any, **k: Any) -> Any:
        calls.append("exchange")
        return real_exchange(*a, **k)

    lengths = _lengths(ctx.world)
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            t = spmd.declare(_row(ctx.rank, 2), Tensor[S[0, AXIS]])
            u = spmd.declare(_row(ctx.rank, lengths[ctx.rank]), Tensor[S[0, AXIS]])
            du.all_gather, du.exchange = gather, exchange
            try:
                spmd.all_gather(t, AXIS, src=S(0), dst=R)
                spmd.all_gather(u, AXIS, src=S(0), dst=R, sizes=lengths)
            finally:
                du.all_gather, du.exchange = real_gather, real_exchange
    assert calls == ["exchange", "all_gather"] * 2, calls


def check_all_to_all_out_sizes_checked(ctx: Ctx, name: str) -> None:
    """Uneven all_to_all with out_sizes=sizes where the routing is uneven (the varlen probe's
    MoE: gloo aborted the process): the check mode compares every rank's out_sizes with what
    the others send and raises on every rank; the right out_sizes pass and match the
    exchange without out_sizes."""
    n = ctx.world
    sizes = [ctx.rank + 1 if k == 0 else 1 for k in range(n)]  # rank r sends r + 1 rows to 0
    x = torch.arange(sum(sizes), dtype=F64) + 100 * ctx.rank
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            v = spmd.declare(x.clone(), Tensor[V[AXIS]])
            try:
                spmd.all_to_all(v, AXIS, src=V, dst=V, sizes=sizes, out_sizes=sizes)
            except ValueError as e:
                message = str(e)
            else:
                raise AssertionError("out_sizes that differ from what the ranks send passed")
            assert "out_sizes[k] is what rank k sends to this rank" in message, message
            right = [k + 1 if ctx.rank == 0 else 1 for k in range(n)]  # rank k's sizes[this rank]
            got = spmd.all_to_all(v, AXIS, src=V, dst=V, sizes=sizes, out_sizes=right)
            want = spmd.all_to_all(v, AXIS, src=V, dst=V, sizes=sizes)
    assert_close(got, want, rtol=0, atol=0)


def check_all_to_all_out_sizes_on_some_ranks(ctx: Ctx, name: str) -> None:
    """out_sizes= on one rank only (right there), none on the others: in the check mode every
    rank runs the same exchange (the regression probe: the checking all_gather on one rank
    against the count exchange on the others hung); the result is the plain exchange's."""
    n = ctx.world
    sizes = [ctx.rank + 1 if k == 0 else 1 for k in range(n)]
    right = [k + 1 if ctx.rank == 0 else 1 for k in range(n)]
    x = torch.arange(sum(sizes), dtype=F64) + 100 * ctx.rank
    with spmd.set_mesh(ctx.mesh("1d")):
        want = spmd.all_to_all(x, AXIS, src=V, dst=V, sizes=sizes)
        with spmd.typecheck():
            v = spmd.declare(x.clone(), Tensor[V[AXIS]])
            got = spmd.all_to_all(v, AXIS, src=V, dst=V, sizes=sizes,
                                  out_sizes=right if ctx.rank == 0 else None)
    assert_close(got, want, rtol=0, atol=0)


def check_same_sizes_pass(ctx: Ctx, name: str) -> None:
    """The same list everywhere: no error, and the values are the concatenation and its
    reduce-scatter back, in the check mode (the verification changes nothing)."""
    lengths = _lengths(ctx.world)
    x = _row(ctx.rank, lengths[ctx.rank])
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            t = spmd.declare(x, Tensor[S[0, AXIS]])
            y = spmd.all_gather(t, AXIS, src=S(0), dst=R, sizes=lengths)
            assert_close(y, torch.cat([_row(k, lengths[k]) for k in range(ctx.world)]))
            p = spmd.convert(y, AXIS, src=R, dst=P)
            z = spmd.reduce_scatter(p, AXIS, src=P, dst=S(0), sizes=lengths)
            assert_close(z, x)


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "sizes", (
        check_all_gather_shifted, check_redistribute_shifted, check_reduce_scatter_same_sum,
        check_convert_shifted, check_one_record_per_call,
        check_all_to_all_out_sizes_checked, check_all_to_all_out_sizes_on_some_ranks,
        check_same_sizes_pass))
