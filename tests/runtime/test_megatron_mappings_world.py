"""Megatron's mapping functions in the check mode, executed on 2 gloo ranks (checks in
rt_megatron_mappings.py, a fake megatron-core in fake_megatron/)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "megatron-mappings", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_megatron_mappings(name):
    WORLD.check(name)
