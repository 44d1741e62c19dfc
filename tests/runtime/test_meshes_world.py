"""Several meshes over the same ranks: a value back from another mesh, an axis of another
mesh, an equal submesh sliced again (checks in rt_meshes.py), on 2 and 4 gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "meshes", timeout=120.0)
WORLD_4 = rt_world.World(4, "meshes", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_meshes_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_meshes_four_ranks(name):
    WORLD_4.check(name)
