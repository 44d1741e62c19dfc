"""The check mode at the boundary with torch DTensor (to_local, from_local, torch's local_map),
on a gloo world of 2 ranks (checks in rt_dtensor.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "dtensor", timeout=150.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_dtensor(name):
    WORLD.check(name)
