"""The local S(i) reshape/view rule (engine: views.reshaped_dim, the run rule global SPMD's
reshape shares) against torch itself.

S(j) on a result claims: the locals, concatenated on dim j, are the global tensor reshaped
(to the concatenated shape).  For ranks 1 to 4, every shard dim and many targets, a global
tensor is cut into two shards, each rank's local reshaped to the target, and wherever the
rule answers a dim j the claim must hold.  The check mode's answer comes from the local
sizes; the static one from the entries written as the input's own sizes (SameDim,
SamePrefix): it must hold for every size the other entries may take, and agree with the
check mode's where it is not V.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from spmd_mypy.engine.ops import Operand, propagate
from spmd_mypy.engine.types import Kind, LocalType, SpmdType, shard
from spmd_mypy.engine.views import (
    ANY_SIZE, SameDim, SamePrefix, expand_target, make_move, moved_dim, reshaped_dim,
)


def _factorings(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(k, *rest) for k in range(1, n + 1) if n % k == 0 for rest in _factorings(n // k, parts - 1)]


def _targets(local: tuple[int, ...]) -> list[tuple[int, ...]]:
    total = math.prod(local)
    out = []
    for parts in range(1, 4):
        for f in _factorings(total, parts):
            out.append(f)
            for k in range(parts):  # the same with -1 for one entry
                out.append(f[:k] + (-1,) + f[k + 1:])
    return out


def _claim_holds(g: torch.Tensor, d: int, target: tuple[int, ...], j: int) -> bool:
    locals_ = [s.reshape(target) for s in g.chunk(2, d)]
    cat = torch.cat(locals_, j)
    return torch.equal(cat, g.reshape(cat.shape))


_SHAPES = [(2,), (4,), (2, 3), (4, 3), (3, 4), (1, 4), (2, 1, 3), (2, 2, 3), (2, 3, 4), (1, 2, 2, 3), (2, 2, 1, 2)]


@pytest.mark.parametrize("local", _SHAPES)
def test_the_check_modes_answer_is_the_concatenation_of_the_reshaped_locals(local: tuple[int, ...]) -> None:
    rank = len(local)
    checked = kept = 0
    for d in range(rank):
        gshape = list(local)
        gshape[d] *= 2
        g = torch.arange(float(math.prod(gshape))).reshape(gshape)
        for target in _targets(local):
            at = reshaped_dim(target, d, rank, local)
            assert at is not None, (local, target)
            assert at[0] == len(target)
            checked += 1
            if at[1] is not None:
                kept += 1
                assert _claim_holds(g, d, target, at[1]), (local, d, target, at[1])
    assert checked and kept


def _static_targets(rank: int) -> list[tuple[int, ...]]:
    """Targets the plugin reads: the input's own sizes (SameDim, a SamePrefix), then
    literal, unread (ANY_SIZE) or -1 entries."""
    heads: list[tuple[int, ...]] = [()]
    for k in range(1, rank + 1):
        heads.append(tuple(SameDim(i) for i in range(k)))
        heads.append(tuple(SameDim(i - rank) if i % 2 else SameDim(i) for i in range(k)))
    heads += [(SamePrefix(m),) for m in range(rank + 1)]
    heads.append((SameDim(1),) if rank > 1 else ())  # not in place: kept nothing
    tails = [(), (-1,), (ANY_SIZE, -1), (-1, ANY_SIZE), (ANY_SIZE,), (ANY_SIZE, ANY_SIZE),
             (-1, 2), (2, -1)]
    return [h + t for h in heads for t in tails]


def _concrete(target: tuple[int, ...], local: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every concrete target the static one may stand for on ``local`` (ANY_SIZE: any size
    that fits)."""
    full = expand_target(target, len(local))
    assert full is not None
    fixed = [local[v.dim] if isinstance(v, SameDim) else v for v in full]
    free = [k for k, v in enumerate(full) if v is ANY_SIZE]
    total = math.prod(local)
    out = []
    for sizes in itertools.product(range(1, total + 1), repeat=len(free)):
        t = list(fixed)
        for k, s in zip(free, sizes):
            t[k] = s
        known = math.prod(v for v in t if v != -1)
        if -1 in t:
            if known == 0 or total % known:
                continue
        elif known != total:
            continue
        out.append(tuple(t))
    return out


@pytest.mark.parametrize("local", _SHAPES)
def test_the_static_answer_holds_for_every_size_the_target_may_have(local: tuple[int, ...]) -> None:
    rank = len(local)
    kept = 0
    for d in range(rank):
        gshape = list(local)
        gshape[d] *= 2
        g = torch.arange(float(math.prod(gshape))).reshape(gshape)
        for target in _static_targets(rank):
            if expand_target(target, rank) in (None, []):
                continue
            at = reshaped_dim(target, d, rank)
            if at is None or at[1] is None:
                continue
            for concrete in _concrete(target, local):
                assert _claim_holds(g, d, concrete, at[1]), (local, d, target, concrete, at[1])
                known = reshaped_dim(concrete, d, rank, local)
                assert known == at, (local, d, target, concrete, known, at)  # the two checkers agree
                kept += 1
    assert kept


def _dim(d: int, values: dict, shape: tuple[int, ...] | None, out_rank: int | None = None) -> int | None:
    """The result's shard dim on ``tp`` for ``x: S(d)`` viewed (None: V), as the static
    checker (no ``shape``) or the check mode asks the engine; counted from the front at
    ``out_rank`` when given."""
    ops = [Operand(SpmdType.of({"tp": shard(d)}), "x", shape=shape)]
    res = propagate("view", ops, move=make_move("view", values, None if shape is None else len(shape)))
    assert not res.errors
    lt = res.type.get("tp")
    assert lt is not None
    if lt.dim is None or out_rank is None:
        return lt.dim
    return lt.dim % out_rank


def test_megatron_forms_keep_the_shard_rank_free_and_in_check_mode() -> None:
    # qkv: S(-1) (column parallel) viewed (*qkv.shape[:-1], nh, 3 * hd): the heads, dim -2
    assert _dim(-1, {"shape": (SamePrefix(1), ANY_SIZE, ANY_SIZE)}, None) == -2
    assert _dim(-1, {"shape": (2, 3, 4, 6)}, (2, 3, 24), 4) == 2
    # ctx: S(-2) (the heads after the transpose back) merged: x.reshape(*x.shape[:-2], -1)
    assert _dim(-2, {"shape": (SamePrefix(2), -1)}, None) == -1
    assert _dim(2, {"shape": (2, 3, -1)}, (2, 3, 4, 6), 3) == 2
    # b, s, _ = x.shape; x.view(b, s, -1, hd)
    assert _dim(2, {"shape": (SameDim(0, "b"), SameDim(1, "s"), -1, ANY_SIZE)}, None, 4) == 2
    # a kept dim before the shard: S(0) through x.view(x.shape[0], -1) and any other target
    assert _dim(0, {"shape": (SameDim(0), -1)}, None) == 0
    assert _dim(0, {"shape": (ANY_SIZE, -1)}, None) == 0


def test_an_inner_factor_or_an_unknown_prefix_is_V() -> None:
    assert _dim(-1, {"shape": (SamePrefix(2), -1)}, None) is None  # S(-1) merged under dim -2
    assert _dim(1, {"shape": (2, 3, -1)}, (2, 3, 4, 6)) == 1  # dims 1..3 merged, 1 outermost
    assert _dim(2, {"shape": (6, -1)}, (2, 3, 4, 6)) == 1  # dims 0, 1 -> 6; dim 2 leads the rest
    assert _dim(2, {"shape": (3, -1)}, (2, 3, 4, 6)) is None  # one run: dim 2 an inner factor
    assert _dim(2, {"shape": (2, -1)}, (2, 3, 4, 6)) is None  # S(2) merged under dim 1
    # b, s not the input's own sizes (h's shape viewing qkv): the prefix is not proved
    assert _dim(-1, {"shape": (ANY_SIZE, ANY_SIZE, -1, ANY_SIZE)}, None) is None
    assert _dim(-1, {"shape": (SameDim(1), SameDim(0), -1)}, None) is None  # not in place
    # S(-1) split as (..., hd, nh): the shard goes on the OUTER factor (hd), never on nh
    assert _dim(-1, {"shape": (SamePrefix(1), ANY_SIZE, ANY_SIZE)}, None) == -2
    assert _dim(2, {"shape": (2, 3, 6, 4)}, (2, 3, 24), 4) == 2
    # a view(dtype), or a shape the adapter could not read: no move
    assert make_move("view", {"shape": "torch.float16"}) is None


def test_every_dim_kept_and_sizes_after_them_is_no_input_of_that_rank() -> None:
    # x.view(x.shape[0], x.shape[1], -1, 3, hd): a 2-d x cannot hold 3 * hd times its elements
    assert reshaped_dim((SameDim(0), SameDim(1), -1, 3, 4), 1, 2) is None
    assert reshaped_dim((SameDim(0), SameDim(1), -1, 3, 4), 1, 3) == (5, 1)
    assert reshaped_dim((SameDim(0), SameDim(1), -1), 1, 2) == (3, 1)  # -1 may be 1
    assert reshaped_dim((SameDim(0), SameDim(1), ANY_SIZE), 1, 2) == (3, 1)
    # so F.linear(x, w) of an x: S(1) (V at rank 1, 2: a 2-d x's dim 1 is contracted) viewed
    # so keeps S(1): the ranks where it is V give no result of rank 5
    lin = LocalType(Kind.V, by_rank=((1, None), (2, None), (3, 1)))
    ops = [Operand(SpmdType.of({"tp": lin}), "qkv")]
    target = (SameDim(0), SameDim(1), -1, 3, 4)
    res = propagate("view", ops, move=make_move("view", {"shape": target}))
    assert res.type.get("tp") == shard(1)
    res = propagate("view", ops, move=make_move("view", {"shape": (SameDim(0), SameDim(1), -1, ANY_SIZE)}))
    assert res.type.get("tp") == LocalType(Kind.V)  # rank 2 (V) and 3 (S(1)) both give rank 4


def test_a_size_of_the_tensor_the_input_was_made_of_counts_before_its_last_dim() -> None:
    # F.linear(h, w).view(h.shape[0], h.shape[1], ...): h's dim i is the input's where i comes
    # before the input's last dim (F.linear changes or drops the last), an unknown size else
    lf = [SameDim(i, None, None, True) for i in range(3)]
    assert reshaped_dim((lf[0], lf[1], -1, ANY_SIZE), 1, 3) == (4, 1)
    assert reshaped_dim((lf[0], lf[1], -1, ANY_SIZE), 2, 3) is not None
    assert reshaped_dim((lf[0], lf[1], -1, ANY_SIZE), 1, 2) == (4, 1)  # dim 1 leads the rest
    assert reshaped_dim((lf[1], lf[0], -1, ANY_SIZE), 1, 3) == (4, None)  # not in place
    # at rank 2, h.shape[1] is not the input's dim 1 (F.linear's out features): the input may
    # be 2-d, so unlike the input's own sizes this rank stays possible
    assert reshaped_dim((lf[0], lf[1], -1, 3, 4), 1, 2) == (5, 1)
    assert reshaped_dim((lf[0], lf[2], -1), 2, 3) == (3, None)  # the last: unknown
    assert reshaped_dim((lf[2], -1), 1, 2) == (2, None)  # beyond the rank: unknown, not None
    assert SameDim(1, None, None, True) != SameDim(1)
