"""Custom autograd Functions with SPMD-annotated forward/backward and raw torch.distributed
calls inside, in check mode, on a gloo world of 2 ranks (checks in rt_autograd_fn.py)."""

from __future__ import annotations

import pytest

import rt_autograd_fn
import rt_world

_results: dict[str, rt_world.CheckResult] = {}


@pytest.mark.parametrize("name", [n.split("/", 1)[1] for n, _ in rt_autograd_fn.suite(2)])
def test_autograd_function(name):
    if not _results:
        _results.update(rt_world.run_world(2, "autograd-fn", timeout=120.0))
    res = _results[f"w2/{name}"]
    if not res.ok:
        pytest.fail(f"w2/{name} failed:\n{res.message}", pytrace=False)
