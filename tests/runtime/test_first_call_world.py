"""The first typed collective of a fresh process under checkpoint (non-reentrant and
reentrant), autocast, saved-tensor hooks, no_grad, inference_mode and the user's torch
modes (checks in rt_first_call.py; each runs in two freshly forked ranks)."""

from __future__ import annotations

import pytest

import rt_first_call
import rt_world

_results: dict[str, rt_world.CheckResult] = {}


@pytest.mark.parametrize("name", [n.split("/", 1)[1] for n, _ in rt_first_call.suite(2)])
def test_first_call(name):
    if not _results:
        _results.update(rt_world.run_world(2, "first-call", timeout=120.0))
    res = _results[f"w2/{name}"]
    if not res.ok:
        pytest.fail(f"w2/{name} failed:\n{res.message}", pytrace=False)
