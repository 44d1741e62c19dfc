"""Dtypes through the typed collectives and the check mode on 2 and 4 gloo ranks (checks in
rt_dtypes.py): integer casts of a Partial, conjugate bits, op="avg" of integers, the dtypes gloo
does not take, negative sizes=."""

from __future__ import annotations

import pytest

import rt_world

WORLD_2 = rt_world.World(2, "dtypes", timeout=120.0)
WORLD_4 = rt_world.World(4, "dtypes", timeout=150.0)


@pytest.mark.parametrize("name", WORLD_2.names())
def test_dtypes_two_ranks(name):
    WORLD_2.check(name)


@pytest.mark.parametrize("name", WORLD_4.names())
def test_dtypes_four_ranks(name):
    WORLD_4.check(name)
