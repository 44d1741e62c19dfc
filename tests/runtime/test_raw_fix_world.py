"""The spmd-raw-collective fix, executed on 2 gloo ranks, equals the raw call it replaces,
reduce op included (checks in rt_raw_fix.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "raw-fix", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_raw_fix(name):
    WORLD.check(name)
