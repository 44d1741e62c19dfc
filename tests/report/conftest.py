"""Shared fixtures of the report tests: one fresh mypy cache for the whole run.

The first report of the run analyses torch from scratch (15-40 s on this machine);
every later one reuses that cache and re-checks only the files it reports on (the report
plugin keys their cache entries on a per-run nonce, so every hook fires anyway).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pytest

from run_once import built_once
from spmd_mypy.report import Report, build_report

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"

MakeReport = Callable[..., Report]


def _fill_report_cache(cache: Path) -> None:
    """One ``spmd-mypy report`` command (a separate process: it ends without tearing down
    the first analysis of torch, which takes longer than it)."""
    proc = subprocess.run([sys.executable, "-m", "spmd_mypy.cli", "report", "examples/tp_mlp.py",
                           "--config-file", str(CONFIG), "--cache-dir", str(cache)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tp_mlp.ParallelMLP.forward" in proc.stdout


@pytest.fixture(scope="session")
def report_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this worker's own, a copy of the one the run fills once for all its workers
    (tests/run_once.py): torch analysed under the report's plugin and the repository's config.
    Every config the tests pass keeps torch's options the same (no global flag that mypy's
    cache depends on): one that did would re-analyse torch, and the next test again."""
    cache = tmp_path_factory.mktemp("report") / "mypy-cache"
    shutil.copytree(built_once("report-cache", _fill_report_cache), cache)
    return cache


@pytest.fixture(scope="session")
def make_report(report_cache: Path) -> MakeReport:
    """``make_report(paths, config_file=..., mypy_args=...)`` run from the repository root."""

    def run(paths: Sequence[str | Path], *, config_file: str | Path | None = CONFIG,
            mypy_args: Sequence[str] = (), cwd: Path = ROOT) -> Report:
        old = os.getcwd()
        os.chdir(cwd)
        try:
            return build_report([str(p) for p in paths],
                                config_file=str(config_file) if config_file else None,
                                mypy_args=["--cache-dir", str(report_cache), *mypy_args])
        finally:
            os.chdir(old)

    return run


@pytest.fixture
def in_root() -> Iterator[None]:
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(old)
