"""A flattened mesh dim is its component axes (checks in rt_flattened.py), on 4 gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD_4 = rt_world.World(4, "flattened", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_flattened_four_ranks(name):
    WORLD_4.check(name)
