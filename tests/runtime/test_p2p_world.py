"""Point-to-point between pipeline stages and a group that is no mesh axis's, executed on 4
gloo ranks (pp x tp; checks in rt_p2p.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(4, "p2p", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_p2p(name):
    WORLD.check(name)
