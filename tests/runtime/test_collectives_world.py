"""Every collective/conversion of the engine's table on real gloo worlds of 2 and 4 ranks.

The checks themselves are in rt_checks.py (forward against the spec on all ranks'
inputs, backward by the type-aware adjoint identity, double backward); each runs
in one world launch per world size and is reported here as its own test.
"""

from __future__ import annotations

import pytest

import rt_checks

NAMES_2 = [name for name, _ in rt_checks.suite("main", 2)]
NAMES_4 = [name for name, _ in rt_checks.suite("main", 4)]


def _assert_ok(results, name):
    res = results[name]
    if not res.ok:
        pytest.fail(f"{name} failed:\n{res.message}", pytrace=False)


@pytest.mark.parametrize("name", NAMES_2)
def test_two_ranks(world2, name):
    _assert_ok(world2, name)


@pytest.mark.parametrize("name", NAMES_4)
def test_four_ranks(world4, name):
    _assert_ok(world4, name)


def test_every_table_transition_is_checked():
    from spmd_mypy.engine.collectives import TRANSITIONS

    for op, s, d in TRANSITIONS:
        for names in (NAMES_2, NAMES_4):
            tag = f"{op}({s.replace('S', 'S0')},{d.replace('S', 'S0')})"
            assert any(n.endswith("/" + tag) for n in names), tag


def test_the_harness_reports_a_failing_rank_and_kills_a_hanging_world(selftest_world):
    import rt_world

    results, seconds = selftest_world
    # killed once no check had finished for SELFTEST_TIMEOUT s; the first stretch (import,
    # warm-up, the failing check) within STARTUP_ALLOWANCE
    assert seconds < rt_world.STARTUP_ALLOWANCE + rt_world.SELFTEST_TIMEOUT + 15
    failed = results["fails-on-rank-1"]
    assert not failed.ok and "rank 1" in failed.message and "deliberate failure" in failed.message
    hung = results["hangs"]
    assert not hung.ok and "timed out" in hung.message
    # results were written before the hang: the stall allowed was the world's deadline
    assert f"no check finished for {rt_world.SELFTEST_TIMEOUT:.0f} s" in hung.message, hung.message


def test_the_harness_lets_a_world_run_past_its_deadline_while_checks_finish():
    """The deadline is for a hang, not a slow machine: 3 checks of 2 s in a world whose
    deadline is 4 s all pass (the project CI once failed a world of 23 quick checks that
    took over its 120 s there)."""
    import rt_world

    results = rt_world.run_world(2, "selftest-slow", timeout=4.0)
    assert len(results) == 3 and all(r.ok for r in results.values()), results
