"""Directories that one test run builds once for all its pytest-xdist workers.

A mypy cache with torch analysed takes ~10-15 s of CPU to fill: built by each worker process,
it was filled once per worker.  ``built_once(name, build)`` builds it in the first worker that
asks (the others wait on a file lock) in a directory every worker of the run shares: pytest's
base temporary directory of the run (its workers' parent), which pytest's own retention
removes.  Outside a pytest session (a helper imported by a script), a temporary directory of
the process.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock (each worker may build its own)
    fcntl = None  # type: ignore[assignment]

# set by tests/conftest.py for the session: the run's directory shared by its workers
SHARED_DIR_VAR = "SPMD_MYPY_TESTS_SHARED_DIR"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created) while the block runs."""
    with open(path, "a") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)


def shared_dir() -> Path:
    root = os.environ.get(SHARED_DIR_VAR)
    if root:
        return Path(root)
    root = tempfile.mkdtemp(prefix="spmd-mypy-tests-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    os.environ[SHARED_DIR_VAR] = root
    return Path(root)


def built_once(name: str, build: Callable[[Path], None]) -> Path:
    """``shared_dir()/name``, made by ``build(directory)`` in the first process that asks."""
    root = shared_dir()
    done = root / name
    with locked(root / f"{name}.lock"):
        if not done.is_dir():
            partial = root / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            build(partial)
            partial.rename(done)
    return done


# The plugin's config with no global mypy flag: torch's cached analysis depends on the global
# flags and the plugin's version, not on the [spmd_mypy] section (the plugin's
# report_config_data keys installed modules without spmd on its version only), so a cache
# filled under it serves any mesh and any plugin option.
SEED_CONFIG = "[mypy]\nplugins = spmd_mypy.plugin\n[spmd_mypy]\nmesh_axes = dp, tp\n"
# what the seed run imports: the modules the tests' projects use
SEED_SOURCE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport spmd\n"


def mypy_seed_cache() -> Path:
    """A mypy cache with torch, typeshed and the spmd stubs analysed under SEED_CONFIG, built
    once per test run (copied into a project's cache by :func:`seed_mypy_cache`)."""
    return built_once("mypy-seed", _fill_seed) / ".mypy_cache"


def seed_mypy_cache(cache_dir: Path) -> None:
    """``cache_dir``, unless it exists, starts as a copy of the run's seed (mypy_seed_cache)."""
    if not cache_dir.exists():
        shutil.copytree(mypy_seed_cache(), cache_dir)


def _fill_seed(root: Path) -> None:
    (root / "mypy.ini").write_text(SEED_CONFIG)
    (root / "seed.py").write_text(SEED_SOURCE)
    proc = subprocess.run([sys.executable, "-m", "mypy", "seed.py"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.stdout.startswith("Success"), proc.stdout + proc.stderr

