"""The check mode at the boundary with torch DTensor (to_local, from_local, torch's local_map,
the tensor parallel styles, FSDP2's parameters), on gloo worlds of 2 and 4 ranks (checks in
rt_dtensor.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLDS = {n: rt_world.World(n, "dtensor", timeout=180.0) for n in (2, 4)}


@pytest.mark.parametrize("name", WORLDS[2].names())
def test_dtensor(name):
    WORLDS[2].check(name)


@pytest.mark.parametrize("name", WORLDS[4].names())
def test_dtensor_4(name):
    WORLDS[4].check(name)
