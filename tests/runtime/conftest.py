"""Runtime tests: multi-process gloo worlds, one launch per world size, many checks each.

The worlds are started once per session (rt_world.run_world) and each check is
reported as its own test.  A world that does not finish within its deadline is
killed; its missing checks fail with the ranks' stderr tails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import rt_world  # noqa: E402

_worlds: dict[int, dict[str, rt_world.CheckResult]] = {}


def world_results(world_size: int) -> dict[str, rt_world.CheckResult]:
    if world_size not in _worlds:
        _worlds[world_size] = rt_world.run_world(world_size, "main")
    return _worlds[world_size]


@pytest.fixture(scope="session")
def world2() -> dict[str, rt_world.CheckResult]:
    return world_results(2)


@pytest.fixture(scope="session")
def world4() -> dict[str, rt_world.CheckResult]:
    return world_results(4)
