"""torch.func (grad, vjp, jacrev, vmap, vmap(grad), functional_call) over every typed
collective and conversion, on 2 and 4 gloo ranks, against plain autograd and the
per-example loop (checks in rt_func.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "func", timeout=300.0)
WORLD_4 = rt_world.World(4, "func", timeout=400.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_func_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_func_four_ranks(name):
    WORLD_4.check(name)
