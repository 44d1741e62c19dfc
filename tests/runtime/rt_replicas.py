"""``spmd.check_replicas(model)``: parameters typed R or I are the same on every rank of the
axis (checks run by test_replicas_world.py on 2 and 4 gloo ranks; the ckpt probe's replicated
bias drawn from a per-tp-rank generator, declared I: accepted by both checkers, wrong numbers).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, R, S, Tensor

F64 = torch.float64


class Block(nn.Module):
    w1: Tensor[S[0, "x"], R["one"]]
    b2: Tensor[I["x"], R["one"]]
    ln: Tensor[R["x"]]

    def __init__(self, seed_b2: int, seed_ln: int, seed_w1: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(seed_w1)))
        self.b2 = nn.Parameter(torch.randn(3, dtype=F64, generator=torch.Generator().manual_seed(seed_b2)))
        self.register_buffer("ln", torch.randn(3, dtype=F64, generator=torch.Generator().manual_seed(seed_ln)))


class Outer(nn.Module):
    def __init__(self, block: Block) -> None:
        super().__init__()
        self.block = block


def _raises(ctx: Ctx, model: nn.Module, needle: str) -> None:
    try:
        spmd.check_replicas(model)
    except ValueError as e:
        message = str(e)
    else:
        raise AssertionError("values typed I/R that differ across ranks were accepted")
    assert needle in message, message
    assert "values differ: global rank 0 has checksums" in message, message
    assert "trained after a random op drawn per rank on a replicated activation" in message, message


def check_replicated_pass(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1xN")):
        # w1 (S(0)) differs per rank, as a shard may; b2 and ln are the same on every rank
        spmd.check_replicas(Outer(Block(seed_b2=1, seed_ln=2, seed_w1=10 + ctx.rank)))
        with spmd.typecheck():
            spmd.check_replicas(spmd.declare_parameters(Block(1, 2, ctx.rank)))


def check_per_rank_seed_raises(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1xN")):
        _raises(ctx, Outer(Block(seed_b2=1 + ctx.rank, seed_ln=2, seed_w1=0)),
                "model.block.b2 is typed R or I on 'x'")
        _raises(ctx, Block(seed_b2=1, seed_ln=2 + (ctx.rank == ctx.world - 1), seed_w1=0),
                "model.ln is typed R or I on 'x'")


def check_equal_bits_pass_whatever_the_threads_and_layout(ctx: Ctx, name: str) -> None:
    """Bitwise-equal values on every rank, summed by different thread counts, one rank's
    stored transposed: equal (float sums differed in the last digit: a false error)."""
    w = torch.randn(4096, 4096, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1 + ctx.rank % 2)
    try:
        if ctx.rank % 2:
            w = w.t().contiguous().t()  # the same values, column-major
        with spmd.set_mesh(ctx.mesh("1xN")):
            spmd.check_replicas(_Big(Block(1, 2, 0), w))
    finally:
        torch.set_num_threads(threads)


class _Big(nn.Module):
    big: Tensor[I["x"]]

    def __init__(self, block: Block, w: torch.Tensor) -> None:
        super().__init__()
        self.block = block
        self.register_buffer("big", w)


def check_axis_of_another_mesh_skipped(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):  # axis "x" only: "one" is skipped, "x" checked
        spmd.check_replicas(Block(1, 2, ctx.rank))
        _raises(ctx, Block(1 + ctx.rank, 2, 0), "model.b2 is typed R or I on 'x'")


class WithNorm(nn.Module):
    """The rng probe's finding: a typed block with an unannotated nn.LayerNorm child."""
    b: Tensor[I["x"]]

    def __init__(self, noise_seed: int | None) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.zeros(3, dtype=F64))
        self.norm = nn.LayerNorm(3, dtype=F64)
        if noise_seed is not None:  # a noisy init from a generator seeded per rank
            with torch.no_grad():
                self.norm.weight.add_(0.01 * torch.randn(
                    3, dtype=F64, generator=torch.Generator().manual_seed(noise_seed)))


def check_untyped_parameters_reported_or_checked(ctx: Ctx, name: str) -> None:
    """An unannotated child's parameters have no claim: returned as unchecked (they passed
    silently before); checked as replicated on the axes untyped_replicated_on names."""
    with spmd.set_mesh(ctx.mesh("1xN")):
        bad = Outer(WithNorm(noise_seed=ctx.rank))  # type: ignore[arg-type]
        assert spmd.check_replicas(bad) == ["model.block.norm.weight", "model.block.norm.bias"]
        assert spmd.check_replicas(Outer(WithNorm(0)), untyped_replicated_on=("x",)) == []  # type: ignore[arg-type]
        try:
            spmd.check_replicas(bad, untyped_replicated_on=("x", "not-an-axis"))
        except ValueError as e:
            message = str(e)
        else:
            raise AssertionError("an untyped LayerNorm weight that differs per rank passed")
        assert message.startswith("model.block.norm.weight has no type (checked as replicated on "
                                  "'x': untyped_replicated_on)"), message
        assert spmd.check_replicas(Block(1, 2, ctx.rank)) == []  # all typed


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "replicas", (
        check_replicated_pass, check_per_rank_seed_raises,
        check_equal_bits_pass_whatever_the_threads_and_layout,
        check_axis_of_another_mesh_skipped, check_untyped_parameters_reported_or_checked))
