"""Helpers for the tests that run mypy over a small project of files in its own process: the
plugin's config, and a run that never lets an internal error pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFIG = "[mypy]\nplugins = spmd_mypy.plugin\n[spmd_mypy]\nmesh_axes = dp, tp\n"


def write_config(root: Path) -> None:
    (root / "mypy.ini").write_text(CONFIG)


def run_mypy(root: Path, *files: str) -> str:
    """mypy over ``files`` in ``root`` (its cache there too); its standard output."""
    proc = subprocess.run([sys.executable, "-m", "mypy", *files], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def first_and_warm_runs(root: Path, a_source: str, b_source: str) -> list[str]:
    """mypy's output over ``a.py`` and ``b.py`` (b imports a) on a first run, and on a warm
    run where a comes from the cache and only b (edited) is re-checked."""
    write_config(root)
    (root / "a.py").write_text(a_source)
    (root / "b.py").write_text(b_source)
    outputs = [run_mypy(root, "a.py", "b.py")]
    (root / "b.py").write_text(b_source + "x = 1\n")  # b alone re-checked
    outputs.append(run_mypy(root, "a.py", "b.py"))
    return outputs
