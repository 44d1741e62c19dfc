"""Helpers for the tests that run mypy over a small project of files in its own process: the
plugin's config, and a run that never lets an internal error pass.

A project starts with mypy's cache of the modules it does not write (torch, typeshed, the
spmd stubs) already filled: analysing torch takes ~15 s of CPU, once per test run (shared by
its xdist workers: tests/run_once.py) instead of once per test.  The tests are about the
project's own modules, which are new to that cache: their first run checks them as a cold run
does (torch from a cache, as in any run after a user's first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from run_once import SEED_CONFIG, seed_mypy_cache

CONFIG = SEED_CONFIG


def write_config(root: Path, seed: bool = True) -> None:
    """The plugin's config in ``root``, and (``seed``) mypy's cache of torch in it."""
    (root / "mypy.ini").write_text(CONFIG)
    if seed:
        seed_mypy_cache(root / ".mypy_cache")


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
