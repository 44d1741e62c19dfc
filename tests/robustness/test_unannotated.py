"""The plugin on code that never heard of it: torch's own ``torch.distributed`` package.

``mypy -p torch.distributed`` (the installed sources, checked in place, each run with a fresh
cache so every module is really type-checked) once without and once with the plugin: the
plugin must add no error, remove none, and never crash.  About 20 s a run here (torch's
analysis included), so the whole package is checked, not a subset.

Twice with the plugin: alone (its torch op and method hooks run over all of torch.distributed),
and with a probe module that uses spmd in the same run (the plugin fully active: its Tensor[...]
types loaded; the probe's one spmd error must then be the only difference).  The second once
failed: the gradual promotion of torch.Tensor stopped isinstance narrowing everywhere; it is now
switched on only in modules that use SPMD types.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(400)

RUN_TIMEOUT_S = 300

PROBE = '''\
import torch
from spmd import P, Tensor


def f(h: Tensor[P["tp"]]) -> None:
    torch.relu(h)
'''

LINE = re.compile(r"^(?P<loc>.+?:\d+): (?P<sev>error|note): (?P<msg>.*)$")


def _mypy(cwd: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    argv = [sys.executable, "-m", "mypy", "--config-file", config, "--no-error-summary",
            "--show-traceback", *args]
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mypy timed out after {RUN_TIMEOUT_S} s: {argv}\n{(e.stdout or '')[-3000:]!r}")
    out = proc.stdout + proc.stderr
    assert "INTERNAL ERROR" not in out and "Traceback" not in out, out[-6000:]
    assert "[spmd-internal]" not in out, out[-6000:]  # a hook that raised (plugin/guard.py)
    assert proc.returncode in (0, 1), f"exit code {proc.returncode}\n{out[-6000:]}"
    return proc


def _diagnostics(output: str) -> set[str]:
    return {line for line in output.splitlines() if LINE.match(line)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch.distributed")
    root = tmp_path_factory.mktemp("robustness")
    (root / "plain.ini").write_text(f"[mypy]\ncache_dir = {root / 'cache-plain'}\n")
    for name in ("plugin", "plugin-probe"):
        (root / f"{name}.ini").write_text(
            f"[mypy]\nplugins = spmd_mypy.plugin\ncache_dir = {root / ('cache-' + name)}\n\n"
            "[spmd_mypy]\nmesh_axes = dp, tp\n")
    (root / "probe.py").write_text(PROBE)
    return root


@pytest.fixture(scope="module")
def plain(workdir: Path) -> set[str]:
    found = _diagnostics(_mypy(workdir, "plain.ini", "-p", "torch.distributed").stdout)
    assert len(found) > 50, "expected torch.distributed's own (pre-existing) mypy errors"
    return found


def _compare(plain: set[str], with_plugin: set[str]) -> None:
    added = sorted(with_plugin - plain)
    removed = sorted(plain - with_plugin)
    assert not added, f"{len(added)} diagnostics only with the plugin:\n" + "\n".join(added[:40])
    assert not removed, f"{len(removed)} diagnostics gone with the plugin:\n" + "\n".join(removed[:40])


def test_plugin_adds_no_error_to_torch_distributed(workdir: Path, plain: set[str]) -> None:
    """Every torch op/method hook runs over torch.distributed's code: same diagnostics."""
    with_plugin = _diagnostics(_mypy(workdir, "plugin.ini", "-p", "torch.distributed").stdout)
    _compare(plain, with_plugin)


def test_plugin_adds_no_error_to_torch_distributed_in_a_run_that_uses_spmd(
        workdir: Path, plain: set[str]) -> None:
    """The same with a module that uses spmd in the run (the plugin fully active)."""
    with_plugin = _diagnostics(_mypy(workdir, "plugin-probe.ini", "-p", "torch.distributed",
                                     "-m", "probe").stdout)
    probe = {d for d in with_plugin if d.startswith("probe.py:")}
    assert len(probe) == 1 and "[spmd-partial-nonlinear]" in next(iter(probe)), probe
    _compare(plain, with_plugin - probe)
