"""Runtime tests: multi-process gloo worlds, one launch per world size, many checks each.

The worlds are started once per session (rt_world.run_world) and each check is
reported as its own test.  A world in which no check finishes within its deadline is
killed; its missing checks fail with the ranks' stderr tails.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import rt_world  # noqa: E402

WORLD_TEST_TIMEOUT = 1500  # pytest-timeout's limit for a test here (the suite's is 300 s): the
# first test of a world runs the whole world, which only its stall deadline bounds (the
# torch.compile world took 248 s in a project CI run on a slow machine)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(WORLD_TEST_TIMEOUT))


_worlds: dict[int, dict[str, rt_world.CheckResult]] = {}
_selftest: list[Future] = []


def world_results(world_size: int) -> dict[str, rt_world.CheckResult]:
    if world_size not in _worlds:
        _worlds[world_size] = rt_world.run_world(world_size, "main")
    return _worlds[world_size]


def selftest_results() -> Future:
    """The harness's own test world (a failing rank, a hanging rank), started once in the
    background: it mostly waits for its deadline, so it overlaps the real worlds."""
    if not _selftest:
        pool = ThreadPoolExecutor(max_workers=1)
        started = time.monotonic()
        future = pool.submit(lambda: (rt_world.run_world(2, "selftest", rt_world.SELFTEST_TIMEOUT),
                                      time.monotonic() - started))
        pool.shutdown(wait=False)
        _selftest.append(future)
    return _selftest[0]


@pytest.fixture(scope="session")
def world2() -> dict[str, rt_world.CheckResult]:
    selftest_results()
    return world_results(2)


@pytest.fixture(scope="session")
def world4() -> dict[str, rt_world.CheckResult]:
    return world_results(4)


@pytest.fixture(scope="session")
def selftest_world() -> tuple[dict[str, rt_world.CheckResult], float]:
    return selftest_results().result()
