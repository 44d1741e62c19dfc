"""Random ops in the check mode: a random op typed R or I on an axis draws from a generator in
the same state on every rank of the axis, or spmd-random (checks in rt_random.py), on 2 and 4
gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "random", timeout=180.0)
WORLD_4 = rt_world.World(4, "random", timeout=180.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_random_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_random_four_ranks(name):
    WORLD_4.check(name)
