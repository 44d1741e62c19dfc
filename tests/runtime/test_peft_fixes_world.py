"""The spmd fixes of the peft probe, pasted from the messages and run on 2 gloo ranks, give the
reference values and gradients (checks in rt_peft_fixes.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "peft-fixes", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_peft_fixes(name):
    WORLD.check(name)
