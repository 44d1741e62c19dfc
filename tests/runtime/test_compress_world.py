"""A Partial gradient compressed before its exchange (a DDP communication hook: int8 codes and
per-rank scales all-gathered, top-k with error feedback, a reduce-scatter as an all_to_all
summed in fp32, PowerSGD's residual) on 2 and 4 gloo ranks, plainly and in the check mode,
against a one-process run of the same compression (checks in rt_compress.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "compress", timeout=120.0)
WORLD_4 = rt_world.World(4, "compress", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_compress_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_compress_four_ranks(name):
    WORLD_4.check(name)
