"""torch.compile(fullgraph=True) over every typed collective and conversion, on a gloo
world of 2 ranks (checks in rt_compile.py): the compiled program's loss and gradients
equal the eager program's."""

from __future__ import annotations

import pytest

import rt_world

WORLD = rt_world.World(2, "compile", timeout=400.0)


@pytest.mark.parametrize("name", WORLD.names())
def test_compiled_matches_eager(name):
    WORLD.check(name)
