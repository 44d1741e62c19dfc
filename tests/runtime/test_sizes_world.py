"""``sizes=`` that differs from rank to rank (each rank's own entry right) is reported by the
check mode on every rank, on 2 and 4 gloo ranks (checks in rt_sizes.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "sizes", timeout=120.0)
WORLD_4 = rt_world.World(4, "sizes", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_sizes_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_sizes_four_ranks(name):
    WORLD_4.check(name)
