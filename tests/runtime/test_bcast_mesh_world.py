"""Raw in-place broadcasts of typed values, and two meshes naming their axes alike (checks in
rt_bcast_mesh.py), on 4 gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(4, "bcast-mesh", timeout=150.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_bcast_mesh(name):
    WORLD.check(name)
