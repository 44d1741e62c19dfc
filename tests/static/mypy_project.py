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
