"""``spmd.check_replicas``: parameters typed R or I equal on every rank of the axis (checks in
rt_replicas.py), on 2 and 4 gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "replicas", timeout=120.0)
WORLD_4 = rt_world.World(4, "replicas", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_replicas_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_replicas_four_ranks(name):
    WORLD_4.check(name)
