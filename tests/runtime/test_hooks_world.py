"""The check mode inside gradient hooks and custom Functions' backward, on a gloo world of
2 ranks (checks in rt_hooks.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "hooks", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_hooks(name):
    WORLD.check(name)
