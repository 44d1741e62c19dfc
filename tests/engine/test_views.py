"""The view/join rule (engine: views.moved_dim, views.squeezed_dim) against torch itself.

S(j) on a result claims: the locals, concatenated on dim j, are the op applied to the
global tensor.  For every op the rule knows, at ranks 1 to 4, every shard dim d and every
dims argument torch accepts, a global tensor is cut into two shards on d, the op runs on
each shard, and wherever the rule answers a dim j the concatenation on j must equal the op
on the global tensor (and the rule's rank must be the result's).  Where the rule answers V
nothing is claimed.  A last test checks that the rule is not V everywhere: it keeps the dim
in the cases the docstring of views lists.
"""

from __future__ import annotations

import itertools
from typing import Callable

import pytest
import torch

from spmd_mypy.engine.views import (
    ELLIPSIS, FULL, INT, NEW, SLICE, DimMove, make_move, moved_dim, squeezed_dim,
)

_INDEX_VALUES = {INT: 0, FULL: slice(None), SLICE: slice(0, 1), NEW: None, ELLIPSIS: Ellipsis}


def _global(rank: int, d: int, ones: tuple[int, ...] = ()) -> torch.Tensor:
    """A rank-``rank`` tensor, size 4 on dim d (two shards of 2), distinct sizes elsewhere
    (size 1 on the dims in ``ones``)."""
    dn = d % rank
    shape = [1 if k in ones else 4 if k == dn else 2 + k for k in range(rank)]
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape)


def _calls(rank: int) -> list[tuple[DimMove, Callable[..., torch.Tensor], int]]:
    """(move, the op on a list of operands, how many operands) for every dims argument."""
    dims = range(-rank, rank)
    out: list[tuple[DimMove, Callable[..., torch.Tensor], int]] = []

    def add(op: str, values: dict, fn: Callable[..., torch.Tensor], n: int = 1) -> None:
        m = make_move(op, values)
        assert m is not None, (op, values)
        out.append((m, fn, n))

    for a, b in itertools.product(dims, dims):
        add("transpose", {"dim0": a, "dim1": b}, lambda x, a=a, b=b: x.transpose(a, b))
        add("movedim", {"source": a, "destination": b}, lambda x, a=a, b=b: x.movedim(a, b))
    for p in itertools.permutations(range(rank)):
        add("permute", {"dims": p}, lambda x, p=p: x.permute(p))
    add("t", {}, lambda x: x.t())
    add("T", {}, lambda x: x.T if x.dim() == 2 else x.permute(*reversed(range(x.dim()))))
    add("mT", {}, lambda x: x.mT)
    for k in range(-rank - 1, rank + 1):
        add("unsqueeze", {"dim": k}, lambda x, k=k: x.unsqueeze(k))
        add("stack", {"dim": k}, lambda x, y, k=k: torch.stack([x, y], k), 2)
    for k in dims:
        add("select", {"dim": k}, lambda x, k=k: x.select(k, 0))
        add("narrow", {"dim": k}, lambda x, k=k: x.narrow(k, 0, 1))
        add("cat", {"dim": k}, lambda x, y, k=k: torch.cat([x, y], k), 2)
        add("chunk", {"dim": k}, lambda x, k=k: x.chunk(2, k)[0])
        add("unbind", {"dim": k}, lambda x, k=k: x.unbind(k)[-1])
    for a, b in itertools.product(dims, dims):
        add("flatten", {"start_dim": a, "end_dim": b}, lambda x, a=a, b=b: x.flatten(a, b))
    add("ravel", {}, lambda x: x.ravel())
    for k in dims:  # sizes the global and the local dims both take (see the unflatten test)
        for sizes in ((-1,), (-1, 1), (-1, 1, 1)):
            add("unflatten", {"dim": k, "sizes": sizes}, lambda x, k=k, s=sizes: x.unflatten(k, s))
    for n in range(1, 4):
        for items in itertools.product(list(_INDEX_VALUES), repeat=n):
            idx = tuple(_INDEX_VALUES[i] for i in items)
            add("__getitem__", {"index": items}, lambda x, idx=idx: x[idx])
    return out


def _apply(fn: Callable[..., torch.Tensor], xs: list[torch.Tensor]) -> torch.Tensor | None:
    try:
        with torch.no_grad():
            return fn(*xs)
    except (RuntimeError, IndexError, ValueError):
        return None


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_every_kept_dim_is_the_concatenation_of_the_shards(rank: int) -> None:
    checked = kept = 0
    for move, fn, n in _calls(rank):
        for d in range(-rank, rank):
            at = moved_dim(move, d, rank)
            xs = [_global(rank, d) + 100 * i for i in range(n)]
            whole = _apply(fn, xs)
            if at is None:
                continue  # the rule says no operand of this rank (torch may still run it)
            assert whole is not None, (move, d, rank)
            assert whole.dim() == at[0], (move, d, rank)
            checked += 1
            j = at[1]
            if j is None:
                continue
            kept += 1
            shards = [[x.chunk(2, d)[s] for x in xs] for s in range(2)]
            locals_ = [fn(*sh) for sh in shards]
            assert torch.equal(torch.cat(locals_, j), whole), (move, d, rank, j)
    assert checked > 0 and kept > 0


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_squeeze_without_sizes_holds_whichever_dims_go(rank: int) -> None:
    """Statically the sizes are unknown: the dim answered must hold for every subset of
    the listed dims having size 1 (the shard dim's shards have size 2 here)."""
    dims = range(-rank, rank)
    listed_options = [(k,) for k in dims] + list(itertools.combinations(dims, 2))
    for listed, d in itertools.product(listed_options, dims):
        move = make_move("squeeze", {"dim": listed if len(listed) > 1 else listed[0]})
        assert move is not None
        j = squeezed_dim(move, d, None)
        if j is None:
            continue
        norm = {k % rank for k in listed}
        if len(norm) < len(listed):
            continue  # a dim listed twice: torch refuses it
        for ones in itertools.chain.from_iterable(
                itertools.combinations(sorted(norm - {d % rank}), m) for m in range(len(norm) + 1)):
            g = _global(rank, d, ones)
            whole = g.squeeze(listed)
            parts = [s.squeeze(listed) for s in g.chunk(2, d)]
            assert torch.equal(torch.cat(parts, j), whole), (listed, d, rank, ones, j)
            # and with the sizes known (check mode), the same dim
            known = squeezed_dim(move, d, tuple(g.chunk(2, d)[0].shape))
            assert known is not None and known % whole.dim() == j % whole.dim()


@pytest.mark.parametrize("sizes", [(-1, 2), (2, -1), (1, 2, -1)])
def test_unflatten_of_the_shard_dim_takes_the_locals_sizes(sizes: tuple[int, ...]) -> None:
    """``x.unflatten(d, sizes)`` on the shard dim states the locals' sizes: S(d) says the
    locals, concatenated on d, are the global unflattened with the outer size summed over the
    ranks (for (2, -1) on 2 ranks: (4, -1)), whatever the sizes are."""
    ranks = 2
    for rank, d in ((1, 0), (2, 0), (2, 1), (3, 1)):
        g = _global(rank, d)
        g = g.repeat_interleave(2, dim=d)  # size 8 on d: 4 per rank, unflattens into (2, 2)
        move = make_move("unflatten", {"dim": d, "sizes": sizes})
        assert move is not None
        at = moved_dim(move, d, rank)
        assert at is not None and at[1] is not None
        locals_ = [s.unflatten(d, sizes) for s in g.chunk(ranks, d)]
        outer = sum(loc.shape[at[1]] for loc in locals_)
        assert torch.equal(torch.cat(locals_, at[1]), g.unflatten(d, (outer, *locals_[0].shape[at[1] + 1:at[1] + len(sizes)])))


def test_the_rule_keeps_the_dim_where_views_says_so() -> None:
    def at(op: str, values: dict, d: int, rank: int) -> int | None:
        m = make_move(op, values)
        assert m is not None
        r = moved_dim(m, d, rank)
        return None if r is None else r[1]

    assert at("transpose", {"dim0": 0, "dim1": 1}, 0, 2) == 1
    assert at("unsqueeze", {"dim": 0}, 1, 3) == 2
    assert at("__getitem__", {"index": (INT,)}, 1, 3) == 0
    assert at("__getitem__", {"index": (FULL, INT)}, 0, 2) == 0
    assert at("__getitem__", {"index": (SLICE,)}, 0, 2) is None
    assert at("cat", {"dim": 1}, 0, 2) == 0 and at("cat", {"dim": 0}, 0, 2) is None
    assert at("stack", {"dim": 0}, 0, 2) == 1
    assert at("chunk", {"dim": 1}, 0, 2) == 0 and at("chunk", {}, 0, 2) is None
    assert at("flatten", {"start_dim": 0, "end_dim": 1}, 0, 3) == 0
    assert at("flatten", {"start_dim": 0, "end_dim": 1}, 1, 3) is None
    assert at("flatten", {"start_dim": 1}, 0, 3) == 0
    assert at("unflatten", {"dim": 0, "sizes": (None, None)}, 0, 2) == 0
    assert at("unflatten", {"dim": 0, "sizes": (None, None)}, 1, 2) == 2
    sq = make_move("squeeze", {"dim": -1})
    assert sq is not None and squeezed_dim(sq, 0, None) == 0


def test_dims_the_adapter_could_not_read_make_no_move() -> None:
    from spmd_mypy.engine.views import UNREAD
    assert make_move("transpose", {"dim0": 0, "dim1": UNREAD}) is None
    assert make_move("transpose", {"dim0": 0}) is None  # no default
    assert make_move("cat", {}) == DimMove("cat", (0,))  # dim defaults to 0
    assert make_move("__getitem__", {"index": ("tensor",)}) is None
    assert make_move("permute", {"dims": (0, True)}) is None
    assert make_move("relu", {}) is None


def _inplace_calls(rank: int) -> list[tuple[str, dict, Callable[[torch.Tensor], object]]]:
    """(op, its dims' values, the in-place call) for every dims argument of the in-place
    views (views.MOVES: transpose_, swapdims_, swapaxes_, t_, unsqueeze_, squeeze_)."""
    dims = range(-rank, rank)
    out: list[tuple[str, dict, Callable[[torch.Tensor], object]]] = []
    for a, b in itertools.product(dims, dims):
        out.append(("transpose_", {"dim0": a, "dim1": b}, lambda x, a=a, b=b: x.transpose_(a, b)))
        out.append(("swapdims_", {"dim0": a, "dim1": b}, lambda x, a=a, b=b: x.swapdims_(a, b)))
        out.append(("swapaxes_", {"axis0": a, "axis1": b}, lambda x, a=a, b=b: x.swapaxes_(a, b)))
    out.append(("t_", {}, lambda x: x.t_()))
    for k in range(-rank - 1, rank + 1):
        out.append(("unsqueeze_", {"dim": k}, lambda x, k=k: x.unsqueeze_(k)))
    for k in dims:
        out.append(("squeeze_", {"dim": k}, lambda x, k=k: x.squeeze_(k)))
    out.append(("squeeze_", {"dim": None}, lambda x: x.squeeze_()))
    return out


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_inplace_views_are_rejected_exactly_where_the_type_stops_holding(rank: int) -> None:
    """An in-place view keeps the tensor's declared S(d); it still holds when the shards,
    viewed in place, concatenated on d, are the global tensor viewed in place (d counted at the
    new rank).  The check mode (shapes known: ops.check_inplace with the target's shape)
    rejects exactly the calls where it stops holding and the rule knows the new dim; the
    static checker (no shapes) rejects only calls where it stops holding, at every rank."""
    from spmd_mypy.engine.ops import Operand, check_inplace, propagate
    from spmd_mypy.engine.types import SpmdType, shard

    static_errors = checked = 0
    for op, values, fn in _inplace_calls(rank):
        for d in range(-rank, rank):
            ones_options: tuple[tuple[int, ...], ...] = ((),)
            if op == "squeeze_":  # a listed dim of size 1 goes, of size > 1 stays
                ones_options = ((), tuple(k for k in range(rank) if k != d % rank))
            for ones in ones_options:
                g = _global(rank, d, ones)
                shards = [s.clone() for s in g.chunk(2, d)]
                whole = g.clone()
                if _apply(fn, [whole]) is None:
                    continue  # torch refuses these dims at this rank
                for s in shards:
                    fn(s)
                new_rank = whole.dim()
                holds = -new_rank <= d < new_rank and torch.equal(torch.cat(shards, d), whole)
                declared = SpmdType.of({"tp": shard(d)})
                target = Operand(declared, "x", shape=tuple(g.chunk(2, d)[0].shape))
                move = make_move(op, values, rank)
                assert move is not None, (op, values)
                result = propagate(op, [target], move=move).type
                seen = check_inplace(op, target, result, others=[target]) is not None
                known = result.get("tp") is not None and result.get("tp").dim is not None  # type: ignore[union-attr]
                assert not (seen and holds), (op, values, d, rank, ones)
                assert seen or holds or not known, (op, values, d, rank, ones)
                bare = Operand(declared, "x")
                static = check_inplace(op, bare, propagate(op, [bare], move=make_move(op, values)).type,
                                       others=[bare]) is not None
                assert not (static and holds), (op, values, d, rank, ones)
                static_errors += static
                checked += 1
    assert checked > 0 and (rank == 1 or static_errors > 0)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_complex_views_keep_the_shard_dims_but_the_trailing_pair(rank: int) -> None:
    """view_as_complex drops the trailing dim of size 2 (a shard of it: V), view_as_real
    appends one: every other shard dim stays where it is, the locals concatenated on it
    being the op on the global tensor."""
    kept = 0
    for d in range(-rank, rank):
        g = _global(rank, d)
        if d % rank != rank - 1:
            g = g.narrow(-1, 0, 2).contiguous()  # the trailing (re, im) pair, not sharded
        elif rank == 1:
            g = g.narrow(-1, 0, 2).contiguous()  # view_as_real of a complex vector (size 2)
        for op, fn, x in (("view_as_complex", torch.view_as_complex, g),
                          ("view_as_real", torch.view_as_real, torch.view_as_complex(
                              torch.stack([g, -g], -1)))):
            move = make_move(op, {})
            assert move is not None
            at = moved_dim(move, d, rank if op == "view_as_complex" else x.dim())
            assert at is not None
            if at[1] is None:  # a shard of the (re, im) pair: no complex view of the global
                assert op == "view_as_complex" and d % rank == rank - 1
                continue
            whole = fn(x)
            assert whole.dim() == at[0]
            kept += 1
            parts = [fn(s.contiguous()) for s in x.chunk(2, d)]
            assert torch.equal(torch.cat(parts, at[1]), whole), (op, d, rank)
    assert kept >= 2 * rank - 1


def _along_calls(rank: int) -> list[tuple[DimMove, Callable[[torch.Tensor], torch.Tensor]]]:
    """(move, the op) of views.ALONG_OPS for every dims argument at ``rank``."""
    dims = range(-rank, rank)
    pairs = [p for p in itertools.permutations(range(rank), 2)] + [(-1, 0)] * (rank > 1)
    out: list[tuple[DimMove, Callable[[torch.Tensor], torch.Tensor]]] = []

    def add(op: str, values: dict, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        m = make_move(op, values)
        assert m is not None, (op, values)
        out.append((m, fn))

    fft = torch.fft
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        one, two, n_d = (getattr(fft, name + k) for k in ("", "2", "n"))
        add(f"fft_{name}", {}, one)
        add(f"fft_{name}2", {}, two)
        add(f"fft_{name}n", {}, n_d)
        for k in dims:
            add(f"fft_{name}", {"dim": k}, lambda x, f=one, k=k: f(x, n=6, dim=k))
        for p in pairs:
            add(f"fft_{name}2", {"dim": p}, lambda x, f=two, p=p: f(x, dim=p))
            add(f"fft_{name}n", {"dim": p}, lambda x, f=n_d, p=p: f(x, dim=p))
        for m in range(1, rank + 1):  # s without dim: the last m dims, at their sizes (+1)
            add(f"fft_{name}n", {"s": (None,) * m},
                lambda x, f=n_d, m=m: f(x, s=tuple(n + 1 for n in x.shape[-m:])))
    for shift in ("fftshift", "ifftshift"):
        add(f"fft_{shift}", {}, getattr(fft, shift))
        for k in dims:
            add(f"fft_{shift}", {"dim": k}, lambda x, f=getattr(fft, shift), k=k: f(x, dim=k))
    add("roll", {}, lambda x: torch.roll(x, 1))
    add("fliplr", {}, torch.fliplr)
    add("flipud", {}, torch.flipud)
    add("rot90", {}, torch.rot90)
    add("diff", {}, torch.diff)
    for k in dims:
        add("roll", {"dims": k}, lambda x, k=k: x.roll(1, k))
        add("flip", {"dims": k}, lambda x, k=k: x.flip(k))
        add("diff", {"dim": k}, lambda x, k=k: x.diff(n=2, dim=k))
    for p in pairs:
        add("roll", {"dims": p}, lambda x, p=p: x.roll((1, 2), p))
        add("flip", {"dims": p}, lambda x, p=p: x.flip(p))
        add("rot90", {"dims": p}, lambda x, p=p: x.rot90(1, p))
    return out


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_along_ops_keep_every_other_dim(rank: int) -> None:
    """torch.fft's transforms and shifts, roll, flip, fliplr/flipud, rot90, diff (views.ALONG_OPS):
    wherever the rule keeps the shard dim the op on the shards, concatenated, is the op on the
    whole (sizes changed along the other dims: n=, s=, rfft, diff); along the shard dim it is V,
    and there the shards' results are not the whole's (each block transformed alone)."""
    kept = along = 0
    for move, fn in _along_calls(rank):
        for d in range(-rank, rank):
            at = moved_dim(move, d, rank)
            g = _global(rank, d).double() + 1.0
            whole = _apply(fn, [g])
            if at is None:
                continue
            assert whole is not None and whole.dim() == at[0] == rank, (move, d, rank)
            parts = [_apply(fn, [s]) for s in g.chunk(2, d)]
            if at[1] is None:
                along += 1
                continue
            kept += 1
            assert at[1] == d % rank
            assert all(p is not None for p in parts), (move, d, rank)
            torch.testing.assert_close(torch.cat(parts, at[1]), whole, msg=str((move, d, rank)))  # type: ignore[arg-type]
    assert (kept > 0 or rank == 1) and along > 0


def test_along_ops_lose_the_shard_dim_where_views_says_so() -> None:
    def at(op: str, values: dict, d: int, rank: int) -> int | None:
        m = make_move(op, values)
        assert m is not None
        r = moved_dim(m, d, rank)
        return None if r is None else r[1]

    assert at("fft_fft", {"dim": 1}, 0, 2) == 0 and at("fft_fft", {"dim": 0}, 0, 2) is None
    assert at("fft_fft", {}, 0, 2) == 0 and at("fft_fft", {}, 0, 1) is None
    assert at("fft_rfft2", {}, 0, 3) == 0 and at("fft_rfft2", {}, 0, 2) is None
    assert at("fft_fftn", {}, 0, 3) is None and at("fft_fftn", {"s": (4, 4)}, 0, 3) == 0
    assert at("fft_fftshift", {}, 0, 2) is None and at("fft_fftshift", {"dim": -1}, 0, 2) == 0
    assert at("roll", {}, 0, 2) is None and at("roll", {"dims": ()}, 0, 2) is None
    assert at("roll", {"dims": 1}, 0, 2) == 0 and at("diff", {"dim": 0}, 0, 2) is None
    assert at("fliplr", {}, 0, 2) == 0 and at("flipud", {}, 0, 2) is None
    assert at("rot90", {}, 2, 3) == 2 and at("rot90", {}, 1, 3) is None
    assert make_move("flip", {}) is None  # flip has no default dims
