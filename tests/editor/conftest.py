"""Fixtures of the editor tests: a warm mypy cache (torch analysed once) shared by the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import editor_util  # noqa: E402
from run_once import locked, shared_dir  # noqa: E402


@pytest.fixture(scope="session")
def warm_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fine-grained mypy cache holding torch and spmd (not the modules under test).

    Kept across sessions in pytest's cache dir when there is one (else in the run's shared
    directory, tests/run_once.py); each test copies it, so daemons never write to it."""
    cache = getattr(request.config, "cache", None)
    root: Path | None = None
    if cache is not None:
        try:
            root = Path(cache.mkdir("spmd-mypy-editor-cache"))
        except OSError:
            root = None
    if root is None:  # (no pytest cache dir: one per run, for all its workers)
        root = shared_dir()
    # the xdist workers share the directory: one fills it while the other waits, then finds
    # it warm (a run over it re-validates it in a few seconds)
    with locked(root / "mypy.lock"):
        editor_util.build_warm_cache(root / "mypy", tmp_path_factory.mktemp("warm-project"))
    return root / "mypy"
