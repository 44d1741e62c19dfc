"""The ranks of an axis that disagree on a collective's call, dtype, shape or sizes= are
reported by the check mode on every rank, before the collective, on 2 and 4 gloo ranks
(checks in rt_agree.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "agree", timeout=150.0)
WORLD_4 = rt_world.World(4, "agree", timeout=180.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_agree_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_agree_four_ranks(name):
    WORLD_4.check(name)
