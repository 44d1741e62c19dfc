"""Ops on an (N, C, *spatial) input keep their shard dims in check mode, on a gloo world of 2
ranks (checks in rt_layout_ops.py): the gathered S(i) result is the op on the global input."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "layout-ops", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_layout_op(name):
    WORLD.check(name)
