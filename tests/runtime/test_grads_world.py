"""``p.grad = value`` against p's gradient type in the check mode (checks in rt_grads.py),
on 4 gloo ranks."""

from __future__ import annotations

import pytest

import rt_world

WORLD_4 = rt_world.World(4, "grads", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_grads_four_ranks(name):
    WORLD_4.check(name)
