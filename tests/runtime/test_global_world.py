"""Global SPMD on real gloo worlds of 2 and 4 ranks (checks in rt_global.py):
every redistribute plan against the target layout (forward and backward, collectives
counted), its check-mode type, its errors, and local_map."""

from __future__ import annotations

import pytest

import rt_global
import rt_world

_worlds: dict[int, dict[str, rt_world.CheckResult]] = {}


def _results(world: int) -> dict[str, rt_world.CheckResult]:
    if world not in _worlds:
        _worlds[world] = rt_world.run_world(world, "global", timeout=240.0)
    return _worlds[world]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", [n.split("/", 1)[1] for n, _ in rt_global.suite(4)])
def test_global_world(world, name):
    res = _results(world)[f"w{world}/{name}"]
    if not res.ok:
        pytest.fail(f"w{world}/{name} failed:\n{res.message}", pytrace=False)
