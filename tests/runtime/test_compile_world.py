"""torch.compile(fullgraph=True) over every typed collective and conversion, on a gloo
world of 2 ranks (checks in rt_compile.py): the compiled program's loss and gradients
equal the eager program's."""

from __future__ import annotations

import pytest

import rt_compile
import rt_world

_results: dict[str, rt_world.CheckResult] = {}


@pytest.mark.parametrize("name", [n.split("/", 1)[1] for n, _ in rt_compile.suite(2)])
def test_compiled_matches_eager(name):
    if not _results:
        _results.update(rt_world.run_world(2, "compile", timeout=400.0))
    res = _results[f"w2/{name}"]
    if not res.ok:
        pytest.fail(f"w2/{name} failed:\n{res.message}", pytrace=False)
