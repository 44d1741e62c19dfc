"""The first typed collective of a fresh process under checkpoint (non-reentrant and
reentrant), autocast, saved-tensor hooks, no_grad, inference_mode and the user's torch
modes (checks in rt_first_call.py; each runs in two freshly forked ranks)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "first-call", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_first_call(name):
    WORLD.check(name)
