"""Helpers for the tests that run mypy over a small project of files in its own process: the
plugin's config, and a run that never lets an internal error pass.

A project starts with mypy's cache of the modules it does not write (torch, typeshed, the
spmd stubs) already filled: analysing torch takes ~15 s of CPU, once per test process
instead of once per test.  The tests are about the project's own modules, which are new to
that cache: their first run checks them as a cold run does (torch from a cache, as in any
run after a user's first)."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG = "[mypy]\nplugins = spmd_mypy.plugin\n[spmd_mypy]\nmesh_axes = dp, tp\n"
# what the seed run imports: the modules the tests' projects use
_SEED_SOURCE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport spmd\n"
_seed: Path | None = None


def write_config(root: Path, seed: bool = True) -> None:
    """The plugin's config in ``root``, and (``seed``) mypy's cache of torch in it."""
    (root / "mypy.ini").write_text(CONFIG)
    if seed and not (root / ".mypy_cache").exists():
        shutil.copytree(_seed_cache(), root / ".mypy_cache")


def _seed_cache() -> Path:
    """A cache with torch, typeshed and the spmd stubs analysed under CONFIG (built once)."""
    global _seed
    if _seed is None:
        root = Path(tempfile.mkdtemp(prefix="spmd-mypy-seed-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        (root / "mypy.ini").write_text(CONFIG)
        (root / "seed.py").write_text(_SEED_SOURCE)
        out = run_mypy(root, "seed.py")
        assert out.startswith("Success"), out
        _seed = root / ".mypy_cache"
    return _seed


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
