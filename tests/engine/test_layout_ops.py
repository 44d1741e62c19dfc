"""Ops on an (N, C, *spatial) input (engine: views.LAYOUT_OPS) against torch itself.

S(j) on a result claims: the locals, concatenated on dim j, are the op applied to the
global tensor.  For every op of the table (convolutions, pools, interpolation, pixel
shuffle, channel shuffle, pad, the batch / group / instance / local response norms), at
ranks 1 to 5 and every shard dim d, a global tensor is cut into two shards on d, the op
runs on each shard, and wherever the engine's rule (``ops.propagate`` with the move the
adapters build, ``views.make_move``) answers a dim j the concatenation on j must equal the
op on the global tensor: the check mode's answer (shapes and rank known) at every rank, the
static checker's (no shapes) at every rank it assumes (the op's documented batched shape:
an unbatched ``(C, *spatial)`` input is the one deliberate exception, checked below).
Where the rule answers V nothing is claimed.  The tables after it state which dims each op
keeps, so that a rule that kept nothing would fail.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from spmd_mypy.engine.ops import Operand, propagate
from spmd_mypy.engine.types import REPLICATE, VARYING, LocalType, SpmdType, shard
from spmd_mypy.engine.views import LAYOUT_OPS, UNREAD, DimMove, make_move

Fn = Callable[..., torch.Tensor]
Extra = Callable[[torch.Tensor], list[torch.Tensor]]


def _w(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape) * 31 + len(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _channels(x: torch.Tensor, k: int) -> int:
    """The channel count of a conv's input: dim 1 batched (k + 2 dims), else dim 0."""
    return x.shape[1] if x.dim() == k + 2 else x.shape[0]


def _c1(x: torch.Tensor) -> int:
    return x.shape[1] if x.dim() > 1 else 1


def _none(x: torch.Tensor) -> list[torch.Tensor]:
    return []


# (op, the values of its formals as an adapter reads them, the op on (x, *extra), the other
# operands (R tensors) built from the global input)
CASES: list[tuple[str, dict[str, object], Fn, Extra]] = []


def _case(op: str, values: dict[str, object], fn: Fn, extra: Extra = _none) -> None:
    CASES.append((op, values, fn, extra))


for _k in (1, 2, 3):
    _case(f"conv{_k}d", {}, lambda x, w, b, k=_k: getattr(F, f"conv{k}d")(x, w, b),
          lambda x, k=_k: [_w(3, _channels(x, k), *[3] * k), _w(3)])
    _case(f"conv_transpose{_k}d", {}, lambda x, w, k=_k: getattr(F, f"conv_transpose{k}d")(x, w),
          lambda x, k=_k: [_w(_channels(x, k), 3, *[3] * k)])
    _case(f"avg_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"avg_pool{k}d")(x, 3, 1))
    _case(f"max_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"max_pool{k}d")(x, 3, 2))
    _case(f"max_pool{_k}d_with_indices", {},
          lambda x, k=_k: getattr(F, f"max_pool{k}d")(x, 3, 2, return_indices=True)[1].double())
    _case(f"adaptive_avg_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"adaptive_avg_pool{k}d")(x, 3))
    _case(f"adaptive_max_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"adaptive_max_pool{k}d")(x, 3))
    _case(f"lp_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"lp_pool{k}d")(x, 2, 3, 1))
for _k in (2, 3):
    # the random samples drawn per sample and channel, fixed here (the same for every one)
    _case(f"fractional_max_pool{_k}d", {}, lambda x, k=_k: getattr(F, f"fractional_max_pool{k}d")(
        x, 2, output_size=2, _random_samples=torch.full(
            (x.shape[0] if x.dim() == k + 2 else 1, _channels(x, k), k), 0.5, dtype=x.dtype)))
_case("convolution", {}, lambda x, w: torch.convolution(
    x, w, None, [1] * (x.dim() - 2), [0] * (x.dim() - 2), [1] * (x.dim() - 2), False,
    [0] * (x.dim() - 2), 1), lambda x: [_w(3, _c1(x), *[3] * max(x.dim() - 2, 1))])
for _mode in ("nearest", "linear", "bilinear", "trilinear", "bicubic", "area", "nearest-exact"):
    _case("interpolate", {}, lambda x, m=_mode: F.interpolate(x, scale_factor=2.0, mode=m))
_case("interpolate", {}, lambda x: F.interpolate(x, size=(5,) * (x.dim() - 2)))
_case("upsample_nearest", {}, lambda x: F.upsample_nearest(x, scale_factor=2))
_case("upsample_bilinear", {}, lambda x: F.upsample_bilinear(x, scale_factor=2))
_case("pixel_shuffle", {}, lambda x: F.pixel_shuffle(x, 2))
_case("pixel_unshuffle", {}, lambda x: F.pixel_unshuffle(x, 2))
_case("channel_shuffle", {}, lambda x: F.channel_shuffle(x, 2))
_case("native_channel_shuffle", {}, lambda x: F.native_channel_shuffle(x, 2))
_case("local_response_norm", {}, lambda x: F.local_response_norm(x, 3))
_case("group_norm", {}, lambda x, w, b: F.group_norm(x, 2, w, b), lambda x: [_w(_c1(x)), _w(_c1(x))])
_case("instance_norm", {}, lambda x: F.instance_norm(x))
_case("instance_norm", {}, lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
      lambda x: [_w(_c1(x)), _w(_c1(x))])
# (in training nothing is kept: test_the_dims_each_op_keeps, and rt_layout_ops.py on 2 ranks)
_case("batch_norm", {"training": False},
      lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
      lambda x: [_w(_c1(x)), _w(_c1(x)).abs() + 0.5, _w(_c1(x)), _w(_c1(x))])
for _amounts in ((1, 1), (0, 0, 1, 2), (1, 0, 0, 0), (0, 0, 0, 0, 2, 1), (-1, -1),
                 (0, 0, 0, 0, 0, 0, 1, 1)):
    # (torch pads at most the last 3 dims other than with a constant)
    for _mode in ("constant", "reflect", "replicate", "circular")[:1 if len(_amounts) > 6 else 4]:
        _case("pad", {"pad": _amounts}, lambda x, a=_amounts, m=_mode: F.pad(x, a, mode=m))
    _case("constant_pad_nd", {"pad": _amounts},
          lambda x, a=_amounts: torch.constant_pad_nd(x, a, 1.5))


def _global(rank: int, d: int) -> torch.Tensor:
    """A rank-``rank`` tensor, size 8 on dim d (two shards of 4), 4 elsewhere: the sizes every
    op of the table takes (pixel_shuffle's 4 channels a shard, windows of 3)."""
    g = torch.Generator().manual_seed(100 * rank + d)
    shape = [8 if k == d % rank else 4 for k in range(rank)]
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _apply(fn: Fn, x: torch.Tensor, extra: list[torch.Tensor]) -> torch.Tensor | None:
    try:
        with torch.no_grad():
            return fn(x, *extra)
    except (RuntimeError, ValueError, NotImplementedError, IndexError):
        return None


def _axis(t: SpmdType) -> LocalType:
    lt = t.get("a")
    assert lt is not None
    return lt


def claims(op: str, values: dict[str, object], d: int, local: tuple[int, ...],
           extra: list[torch.Tensor]) -> tuple[LocalType, LocalType]:
    """(the check mode's result on the axis, the static checker's) for ``x: S(d)`` beside
    the R tensors ``extra``, as the adapters ask the engine."""
    ops = [Operand(SpmdType.of({"a": shard(d)}), "x", shape=local)] + [
        Operand(SpmdType.of({"a": REPLICATE}), f"w{i}", shape=tuple(e.shape))
        for i, e in enumerate(extra)]
    check = propagate(op, ops, move=make_move(op, values, len(local)))
    static = propagate(op, [Operand(o.type, o.text) for o in ops], move=make_move(op, values))
    assert not check.errors and not static.errors
    return _axis(check.type), _axis(static.type)


def _unbatched(op: str, rank: int) -> bool:
    """An unbatched (C, *spatial) input, which the static checker does not assume."""
    _, most, unbatched, _ = LAYOUT_OPS[op]
    return unbatched and most is not None and rank == most + 1


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_kept_dim_is_the_concatenation_of_the_shards(case) -> None:  # noqa: ANN001
    op, values, fn, extra_of = case
    kept = 0
    for rank in range(1, 6):
        for d in range(-rank, rank):
            g = _global(rank, d)
            extra = extra_of(g)
            whole = _apply(fn, g, extra)
            if whole is None:
                continue  # torch takes no input of this rank (or these sizes)
            shards = g.chunk(2, d)
            check, static = claims(op, values, d, tuple(shards[0].shape), extra)
            answers = {check.at_ndim(rank).dim}
            possible, j = static.at_rank(rank)
            if possible and not _unbatched(op, rank):
                answers.add(None if j is None else j % rank)
            for j in answers - {None}:
                locals_ = [_apply(fn, s, extra) for s in shards]
                assert all(t is not None for t in locals_), (op, values, rank, d, j)
                got = torch.cat(locals_, j)  # type: ignore[arg-type]
                assert got.shape == whole.shape and torch.allclose(got, whole), (
                    op, values, rank, d, j)
                kept += 1
    assert kept > 0, (op, values)


def _kept(op: str, values: dict[str, object], rank: int) -> set[int]:
    """The dims the check mode keeps on an input of ``rank``."""
    out = set()
    for d in range(rank):
        check, _ = claims(op, values, d, (4,) * rank, [])
        if check.dim is not None:
            out.add(check.dim % rank)
    return out


# op -> (the values of its formals, the input's rank, the dims the check mode keeps)
KEPT: dict[str, list[tuple[dict[str, object], int, set[int]]]] = {
    # the channels contracted, the spatial dims a halo; unbatched (C, H, W): dim 0 is C
    "conv2d": [({}, 4, {0}), ({}, 3, set())],
    "conv_transpose1d": [({}, 3, {0})],
    "convolution": [({}, 5, {0})],
    "max_pool2d": [({}, 4, {0, 1}), ({}, 3, {0})],  # channel-wise; unbatched: the channels
    "adaptive_avg_pool3d": [({}, 5, {0, 1})],
    "lp_pool1d": [({}, 3, {0, 1})],
    "interpolate": [({}, 3, {0, 1}), ({}, 5, {0, 1})],
    "pixel_shuffle": [({}, 4, {0, 1, 2, 3})],  # blocks of channels <-> blocks of pixels
    "pixel_unshuffle": [({}, 5, {0, 1, 2, 3, 4})],
    "channel_shuffle": [({}, 4, {0, 2, 3})],  # the channels mixed
    "local_response_norm": [({}, 3, {0, 2})],
    "group_norm": [({}, 4, {0})],
    "instance_norm": [({}, 3, {0})],
    # eval (F.batch_norm's default): per channel; training: statistics over the batch
    "batch_norm": [({}, 4, {0, 2, 3}), ({"training": False}, 2, {0}),
                   ({"training": True}, 4, set())],
    # the amounts from the last dim to the first
    "pad": [({"pad": (1, 1)}, 3, {0, 1}), ({"pad": (0, 0, 1, 1)}, 3, {0, 2}),
            ({"pad": (0, 0, 0, 0, 1, 0)}, 3, {1, 2}), ({"pad": (0, 0, 0, 0)}, 2, {0, 1})],
    "constant_pad_nd": [({"pad": (1, 0, 0, 0, 0, 2)}, 4, {0, 2})],
}


@pytest.mark.parametrize("op", list(KEPT))
def test_the_dims_each_op_keeps(op: str) -> None:
    for values, rank, kept in KEPT[op]:
        assert _kept(op, values, rank) == kept, (values, rank)


def _static(op: str, values: dict[str, object], d: int, *others: LocalType | None) -> LocalType:
    ops = [Operand(SpmdType.of({"a": shard(d)}), "x")] + [
        Operand(SpmdType.of({"a": t}) if t is not None else SpmdType(), f"w{i}")
        for i, t in enumerate(others)]
    res = propagate(op, ops, move=make_move(op, values))
    assert not res.errors
    return _axis(res.type)


def test_static_layouts_without_the_rank() -> None:
    """The static checker: the batched shape of the op (conv2d's 4 dims), or every rank it
    takes (interpolate's 3 to 5, pad's any) folded into S(j), V or a rank-dependent layout."""
    assert _static("conv2d", {}, 0, REPLICATE, REPLICATE) == shard(0)
    assert _static("conv2d", {}, -4, REPLICATE) == shard(-4)  # dim 0 of a 4-d input
    assert _static("conv2d", {}, 1, REPLICATE) == VARYING
    assert _static("conv2d", {}, -1, REPLICATE) == VARYING
    assert _static("max_pool2d", {}, 1) == shard(1)
    assert _static("max_pool2d", {}, -3) == shard(-3)  # the channels of (N, C, H, W)
    assert _static("max_pool2d", {}, 2) == VARYING
    assert _static("interpolate", {}, 1) == shard(1)
    assert _static("interpolate", {}, -3).layouts() == "V at rank >= 5, S(-3) at rank 3, 4"
    assert _static("pixel_shuffle", {}, -1) == shard(-1)
    assert _static("pad", {"pad": (0, 0, 1, 1)}, -1) == shard(-1)  # the last dim not padded
    assert _static("pad", {"pad": (1, 1)}, -1) == VARYING
    assert _static("pad", {"pad": (1, 1)}, 0).layouts() == "S(0) at rank >= 2, V at rank 1"
    assert _static("group_norm", {}, 0) == shard(0)
    assert _static("batch_norm", {}, 0, REPLICATE, REPLICATE) == shard(0)
    assert _static("batch_norm", {"training": True}, 0, REPLICATE, REPLICATE) == VARYING


def test_another_operand_that_varies_gives_V() -> None:
    """A varying weight (conv's output channels sharded on the same axis) or running
    statistic is not followed: V.  An untyped one joins no axis (gradual), as the module's
    parameters of ``nn.Conv2d`` do."""
    assert _static("conv2d", {}, 0, VARYING) == VARYING
    assert _static("conv2d", {}, 0, REPLICATE, shard(0)) == VARYING
    assert _static("batch_norm", {}, 0, shard(0), REPLICATE) == VARYING
    assert _static("conv2d", {}, 0, None) == shard(0)


def test_an_unbatched_input_is_read_at_its_rank_in_check_mode() -> None:
    """The static checker assumes the documented batched shape; the check mode, which sees
    an unbatched (C, H, W) input, keeps what that layout keeps: for conv2d nothing (dim 0 is
    the contracted channels), for max_pool2d dim 0 (the channels)."""
    check, static = claims("conv2d", {}, 0, (2, 5, 5), [_w(3, 4, 3, 3)])
    assert check == VARYING and static == shard(0)
    check, static = claims("max_pool2d", {}, 0, (2, 5, 5), [])
    assert check == shard(0) and static == shard(0)
    check, static = claims("max_pool2d", {}, 1, (2, 5, 5), [])
    assert check == VARYING and static == shard(1)


def test_values_the_adapter_could_not_read_make_no_move() -> None:
    assert make_move("conv2d", {}) == DimMove("conv2d", ())
    assert make_move("batch_norm", {}) == DimMove("batch_norm", (False,))  # F.batch_norm's default
    assert make_move("batch_norm", {"training": UNREAD}) is None  # nn.BatchNorm2d: its mode
    assert make_move("batch_norm", {"training": 1}) is None
    assert make_move("pad", {}) is None
    assert make_move("pad", {"pad": UNREAD}) is None
    assert make_move("pad", {"pad": 1}) is None
    assert make_move("pad", {"pad": (1, 1, 1)}) is None  # odd: torch refuses it
    assert make_move("pad", {"pad": [1, 2]}) == DimMove("pad", ((1, 2),))
    assert make_move("pad", {"pad": (1, True)}) is None
