"""The vocab-parallel idioms README gives for entropy and KL (the normaliser all-reduced to R,
then spmd.sum over the shards) and the logsumexp fix of the spmd-invariant-mix message, run on
2 gloo ranks: values and gradients equal a single-process reference (rt_vocab_fixes.py)."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "vocab-fixes", timeout=120.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_vocab_fixes(name):
    WORLD.check(name)
