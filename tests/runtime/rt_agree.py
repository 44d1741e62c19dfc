"""The ranks of an axis must agree on a collective: its call, the input's dtype and shape
(but the dim an uneven call lets differ) and ``sizes=`` (checks run by test_agree_world.py on
2 and 4 gloo ranks).

Outside the check mode a mismatch gives garbage (float16 on one rank, bfloat16 on another:
the same element size), an abort of every gloo rank (different element or message sizes) or
a wait until the timeout, far from the call.  In the check mode the ranks exchange one small
record before the collective and every rank raises the same ValueError, naming the call, the
axis, the field and each rank's value; the ranks stay in step (the next check runs).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, PS, R, S, Tensor, V

AXIS = "x"
F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def _raises(ctx: Ctx, make: Callable[[], Any], *parts: str) -> str:
    """``make()`` in the check mode on the 1-d mesh raises a ValueError holding ``parts``."""
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            try:
                make()
            except ValueError as e:
                message = str(e)
            else:
                raise AssertionError("the ranks' disagreement was not reported")
    for part in parts:
        assert part in message, (part, message)
    return message


def _by_parity(ctx: Ctx, even: Any, odd: Any) -> Any:
    return even if ctx.rank % 2 == 0 else odd


def _held(ctx: Ctx, even: str, odd: str) -> list[str]:
    """The message's words for ranks holding ``even`` on even ranks and ``odd`` on odd ones."""
    if ctx.world == 2:
        return [f"rank 0 holds {even}, rank 1 holds {odd};"]
    return [f"ranks 0 and 2 hold {even}, ranks 1 and 3 hold {odd};"]


def check_all_gather_fp16_bf16(ctx: Ctx, name: str) -> None:
    """float16 and bfloat16 have one element size: the gather runs and mixes their bits."""
    x = torch.ones(4, 8, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.all_gather(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0),
                                         dst=R),
            "all_gather(x, 'x', src=S(0), dst=R): the ranks of axis 'x' disagree on the dtype: ",
            *_held(ctx, "float16[4, 8]", "bfloat16[4, 8]"),
            "every rank of the axis must pass the same dtype", "x.to(torch.")


def check_all_reduce_fp32_fp64(ctx: Ctx, name: str) -> None:
    """Element sizes that differ: gloo aborts every rank without the check."""
    x = torch.ones(4, dtype=_by_parity(ctx, F32, F64))
    _raises(ctx, lambda: spmd.all_reduce(spmd.declare(x, Tensor[P[AXIS]]), AXIS, src=P, dst=R),
            "all_reduce(x, 'x', src=P, dst=R): the ranks of axis 'x' disagree on the dtype",
            *_held(ctx, "float32[4]", "float64[4]"))


def check_all_reduce_max_dtype(ctx: Ctx, name: str) -> None:
    x = torch.ones(3, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.all_reduce(spmd.declare(x, Tensor[V[AXIS]]), AXIS, src=V, dst=R,
                                         op="max"),
            "all_reduce(x, 'x', src=V, dst=R, op='max'): the ranks of axis 'x' disagree on the "
            "dtype", *_held(ctx, "float16[3]", "bfloat16[3]"))


def check_untyped_input_checked(ctx: Ctx, name: str) -> None:
    """An input the check mode does not type is compared all the same."""
    x = torch.ones(2, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.all_reduce(x, AXIS, src=P, dst=I), "disagree on the dtype",
            *_held(ctx, "float16[2]", "bfloat16[2]"))


def check_all_reduce_shape(ctx: Ctx, name: str) -> None:
    x = torch.ones(_by_parity(ctx, 4, 5), dtype=F64)
    message = _raises(ctx, lambda: spmd.all_reduce(spmd.declare(x, Tensor[P[AXIS]]), AXIS,
                                                   src=P, dst=R),
                      "disagree on the shape", *_held(ctx, "float64[4]", "float64[5]"),
                      "every rank of the axis must pass the same shape (")
    assert "sizes=" not in message, message  # a pending sum has no uneven form


def check_all_gather_uneven_without_sizes(ctx: Ctx, name: str) -> None:
    """Shards of different lengths on the gathered dim: the fix is sizes= with those lengths."""
    lengths = [3 + k % 2 for k in range(ctx.world)]
    x = torch.ones(2, lengths[ctx.rank], dtype=F64)
    _raises(ctx, lambda: spmd.all_gather(spmd.declare(x, Tensor[S[1, AXIS]]), AXIS, src=S(1),
                                         dst=R),
            "all_gather(x, 'x', src=S(1), dst=R): the ranks of axis 'x' disagree on the shape",
            *_held(ctx, "float64[2, 3]", "float64[2, 4]"),
            f"for uneven shards pass sizes={lengths} (each rank's length of dim 1")


def check_all_gather_sizes_other_dim(ctx: Ctx, name: str) -> None:
    """sizes= lets the gathered dim differ, not another."""
    x = torch.ones(_by_parity(ctx, 2, 3), 1 + ctx.rank, dtype=F64)
    sizes = [1 + k for k in range(ctx.world)]
    _raises(ctx, lambda: spmd.all_gather(spmd.declare(x, Tensor[S[1, AXIS]]), AXIS, src=S(-1),
                                         dst=R, sizes=sizes),
            "all_gather(x, 'x', src=S(1), dst=R): the ranks of axis 'x' disagree on the shape",
            "must pass the same shape except on dim 1, the uneven dim of sizes=")


def check_sizes_on_some_ranks(ctx: Ctx, name: str) -> None:
    """sizes= on rank 0 only (the right lengths there): gloo aborted every rank."""
    lengths = [1 + k for k in range(ctx.world)]
    x = torch.ones(lengths[ctx.rank], dtype=F64)
    _raises(ctx, lambda: spmd.all_gather(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0),
                                         dst=R, sizes=lengths if ctx.rank == 0 else None),
            "the ranks of axis 'x' disagree on sizes=: rank 0 passes sizes=, rank",
            "every rank of the axis must pass sizes= or none")


def check_shard_against_sizes(ctx: Ctx, name: str) -> None:
    """One list everywhere, but the last rank's shard is not its entry: that rank alone
    raised, the others waited in the gather; now every rank raises."""
    sizes = [2] * ctx.world
    last = ctx.world - 1
    x = torch.ones(3 if ctx.rank == last else 2, dtype=F64)
    _raises(ctx, lambda: spmd.all_gather(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0),
                                         dst=R, sizes=sizes),
            f"on axis 'x', sizes={sizes} gives the rank of index {last} 2 on dim 0, but rank "
            f"{last} holds float64[3] (3 on dim 0)")


def check_reduce_scatter_shape(ctx: Ctx, name: str) -> None:
    x = torch.ones(2 * ctx.world + 2 * (ctx.rank % 2), dtype=F64)
    w = 2 * ctx.world
    _raises(ctx, lambda: spmd.reduce_scatter(spmd.declare(x, Tensor[P[AXIS]]), AXIS, src=P,
                                             dst=S(0)),
            "reduce_scatter(x, 'x', src=P, dst=S(0)): the ranks of axis 'x' disagree on the shape",
            *_held(ctx, f"float64[{w}]", f"float64[{w + 2}]"))


def check_all_to_all_even_shape(ctx: Ctx, name: str) -> None:
    """Rows that differ on dim 0 of an even all_to_all: the fix is the uneven form."""
    n = ctx.world
    x = torch.ones(n * (1 + ctx.rank % 2), 3, dtype=F64)
    _raises(ctx, lambda: spmd.all_to_all(spmd.declare(x, Tensor[V[AXIS]]), AXIS, src=V, dst=V),
            "all_to_all(x, 'x', src=V, dst=V): the ranks of axis 'x' disagree on the shape",
            *_held(ctx, f"float64[{n}, 3]", f"float64[{2 * n}, 3]"),
            "for uneven blocks pass sizes= (the rows of dim 0 this rank sends to each rank")


def check_all_to_all_uneven_mismatch(ctx: Ctx, name: str) -> None:
    """Uneven all_to_all: dim 0 may differ, the dtype and the other dims may not."""
    n = ctx.world
    sizes = [1 + ctx.rank] * n
    rows = sum(sizes)
    x = torch.ones(rows, 2, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.all_to_all(spmd.declare(x, Tensor[V[AXIS]]), AXIS, src=V, dst=V,
                                         sizes=sizes),
            "all_to_all(x, 'x', src=V, dst=V): the ranks of axis 'x' disagree on the dtype")
    y = torch.ones(rows, 2 + ctx.rank % 2, dtype=F64)
    _raises(ctx, lambda: spmd.all_to_all(spmd.declare(y, Tensor[V[AXIS]]), AXIS, src=V, dst=V,
                                         sizes=sizes),
            "disagree on the shape", "must pass the same shape except on dim 0")


def check_different_calls(ctx: Ctx, name: str) -> None:
    """A branch on the rank: an all_gather on one rank, an all_reduce on the other."""
    x = torch.ones(4, dtype=F64)

    def call() -> Any:
        if ctx.rank % 2:
            return spmd.all_reduce(spmd.declare(x, Tensor[P[AXIS]]), AXIS, src=P, dst=R)
        return spmd.all_gather(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0), dst=R)

    want = ("rank 0 calls all_gather(x, 'x', src=S(0), dst=R), rank 1 calls all_reduce(x, 'x', "
            "src=P, dst=R);" if ctx.world == 2 else
            "ranks 0 and 2 call all_gather(x, 'x', src=S(0), dst=R), ranks 1 and 3 call "
            "all_reduce(x, 'x', src=P, dst=R);")
    _raises(ctx, call, "the ranks of axis 'x' make different collective calls here: " + want)


def check_redistribute_dtype(ctx: Ctx, name: str) -> None:
    """redistribute: the op it routes to (S(0) -> R: an all_gather)."""
    x = torch.ones(2, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.redistribute(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0),
                                           dst=R),
            "all_gather(x, 'x', src=S(0), dst=R): the ranks of axis 'x' disagree on the dtype")


def check_global_redistribute_dtype(ctx: Ctx, name: str) -> None:
    """Global SPMD: each planned step compares its input."""
    x = torch.ones(2, dtype=_by_parity(ctx, F16, BF16))
    _raises(ctx, lambda: spmd.redistribute(spmd.declare(x, Tensor[PS[AXIS]]), src=Tensor[PS[AXIS]],
                                           dst=Tensor[PS[None]]),
            "the ranks of axis 'x' disagree on the dtype", *_held(ctx, "float16[2]", "bfloat16[2]"))


def check_allowed_differences_pass(ctx: Ctx, name: str) -> None:
    """What the calls let differ passes, with the plain mode's values: an uneven all_gather
    given sizes=, an uneven all_to_all, an even call of one shape."""
    n = ctx.world
    lengths = [1 + k for k in range(n)]
    shard = torch.arange(lengths[ctx.rank] * 2, dtype=F64).view(2, -1) + 10 * ctx.rank
    sizes = [1 + (ctx.rank + k) % 2 for k in range(n)]  # rows this rank sends to rank k
    rows = torch.arange(sum(sizes) * 3, dtype=F64).view(-1, 3) + 100 * ctx.rank
    even = torch.arange(4, dtype=F32) * (ctx.rank + 1)
    with spmd.set_mesh(ctx.mesh("1d")):
        want = (spmd.all_gather(shard, AXIS, src=S(1), dst=R, sizes=lengths),
                spmd.all_to_all(rows, AXIS, src=V, dst=V, sizes=sizes),
                spmd.all_reduce(even, AXIS, src=P, dst=R))
        with spmd.typecheck():
            got = (spmd.all_gather(spmd.declare(shard.clone(), Tensor[S[1, AXIS]]), AXIS,
                                   src=S(1), dst=R, sizes=lengths),
                   spmd.all_to_all(spmd.declare(rows.clone(), Tensor[V[AXIS]]), AXIS, src=V,
                                   dst=V, sizes=sizes),
                   spmd.all_reduce(spmd.declare(even.clone(), Tensor[P[AXIS]]), AXIS, src=P,
                                   dst=R))
    for g, w in zip(got, want):
        assert_close(g, w, rtol=0, atol=0)
    assert got[0].shape == (2, sum(lengths)), got[0].shape
    # the gathered dim past the record's own dims (9 dims, dim 8): left out of the checksum
    # of the dims past them (the regression probe: a false shape disagreement)
    deep = torch.ones(*[1] * 8, lengths[ctx.rank], dtype=F32) * ctx.rank
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        out = spmd.all_gather(spmd.declare(deep, Tensor[S[8, AXIS]]), AXIS, src=S(8), dst=R,
                              sizes=lengths)
    assert out.shape[8] == sum(lengths), out.shape


def check_one_record_in_check_mode_only(ctx: Ctx, name: str) -> None:
    """The check mode exchanges one small record per collective (``_dist_utils.exchange``,
    before the real all_gather); the plain mode exchanges nothing more."""
    from spmd import _dist_utils as du
    calls: list[str] = []
    real_gather, real_exchange = du.all_gather, du.exchange

    def gather(*a: Any, **k: Any) -> Any:
        calls.append("all_gather")
        return real_gather(*a, **k)

    def exchange(*a: Any, **k: Any) -> Any:
        calls.append("exchange")
        return real_exchange(*a, **k)

    x = torch.ones(4, 2, dtype=F32)
    with spmd.set_mesh(ctx.mesh("1d")):
        du.all_gather, du.exchange = gather, exchange
        try:
            spmd.all_gather(x, AXIS, src=S(0), dst=R)
            spmd.all_gather(x, AXIS, src=S(1), dst=R)
            plain = list(calls)
            calls.clear()
            with spmd.typecheck():
                spmd.all_gather(spmd.declare(x, Tensor[S[0, AXIS]]), AXIS, src=S(0), dst=R)
        finally:
            du.all_gather, du.exchange = real_gather, real_exchange
    assert plain == ["all_gather", "all_gather"], plain
    assert calls == ["exchange", "all_gather"], calls


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "agree", (
        check_all_gather_fp16_bf16, check_all_reduce_fp32_fp64, check_all_reduce_max_dtype,
        check_untyped_input_checked, check_all_reduce_shape,
        check_all_gather_uneven_without_sizes, check_all_gather_sizes_other_dim,
        check_sizes_on_some_ranks, check_shard_against_sizes, check_reduce_scatter_shape,
        check_all_to_all_even_shape, check_all_to_all_uneven_mismatch, check_different_calls,
        check_redistribute_dtype, check_global_redistribute_dtype,
        check_allowed_differences_pass, check_one_record_in_check_mode_only))
