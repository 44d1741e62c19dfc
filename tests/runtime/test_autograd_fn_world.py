"""Custom autograd Functions with SPMD-annotated forward/backward and raw torch.distributed
calls inside, in check mode, on a gloo world of 2 ranks (checks in rt_autograd_fn.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "autograd-fn", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_autograd_function(name):
    WORLD.check(name)
