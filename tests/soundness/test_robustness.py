"""CI slice of the robustness runs (issue 7 item 3; the full run is ``python -m soundness``).

Fuzzed annotation strings (hypothesis) in Tensor[...], R[...], S[...], PS[...] and collective
arguments, in many positions, one mypy run: never an internal error.  (torch.distributed is
covered by tests/robustness/test_unannotated.py; megatron-core and torch.nn by the full run.)
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from soundness import robustness

pytestmark = pytest.mark.timeout(600)

CACHE = Path(os.environ.get("SPMD_MYPY_TEST_CACHE", Path.home() / ".cache" / "spmd-mypy-tests"))


def test_crash_detection() -> None:
    ok = robustness.MypyRun(1, "a.py:1: error: x  [misc]\n", 1.0, False)
    assert not ok.crashed and ok.diagnostics() == {"a.py:1: error: x  [misc]"}
    assert robustness.MypyRun(2, "a.py: error: INTERNAL ERROR -- x\nTraceback (most recent call last):",
                              1.0, False).crashed
    assert robustness.MypyRun(-1, "", 1.0, True).crashed


def test_fuzzed_annotations_never_crash_mypy() -> None:
    pytest.importorskip("hypothesis")
    rec = robustness.fuzz_annotations(n=160, seed=11, per_run=160,
                                      cache=CACHE / "mypy-cache-fuzzed-annotations")
    assert rec["crashes"] == 0, rec["counterexamples"]
    assert rec["checked"] >= 120, rec  # the strings that make a parseable module


MEGATRON_BRANCH_JOIN = '''\
import torch
from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region


def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
    if flag:
        y = reduce_from_tensor_model_parallel_region(x)
    else:
        y = x * 2
    return y
'''


def test_megatron_stubs_add_no_error_to_unannotated_code(tmp_path: Path) -> None:
    """Found by the robustness run over megatron-core (moe_utils.py:280, token_dispatcher.py:592,
    shared_experts.py:557, transformer_engine.py:1639): a variable first assigned from a mapping
    function got its precise spmd type, and the other branch's plain tensor was then an
    [assignment] error in a module that has no SPMD annotation at all.  In such a module the
    mapping calls' results are untyped now."""
    (tmp_path / "m.py").write_text(MEGATRON_BRANCH_JOIN)
    cfg = textwrap.dedent(f"""\
        [mypy]
        plugins = spmd_mypy.plugin
        cache_dir = {CACHE / 'mypy-cache-megatron-join'}

        [spmd_mypy]
        mesh_axes = dp, tp
        """)
    run = robustness.mypy(tmp_path, cfg, ["m.py"], timeout=300, stubs="all")
    assert not run.crashed, run.output
    assert not run.diagnostics(), run.output
