"""einops in check mode on a gloo world of 2 ranks (checks in rt_einops.py): the layouts the
pattern rule gives are what the ranks hold, and the probe's gathers on a shard's old dim (wrong
numbers unchecked) are refused."""

from __future__ import annotations

import pytest

pytest.importorskip("einops")

import rt_world  # noqa: E402

WORLD = rt_world.World(2, "einops", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_einops(name):
    WORLD.check(name)
