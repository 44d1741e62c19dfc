"""Fixtures of the editor tests: a warm mypy cache (torch analysed once) shared by the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import editor_util  # noqa: E402


@pytest.fixture(scope="session")
def warm_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fine-grained mypy cache holding torch and spmd (not the modules under test).

    Kept across sessions in pytest's cache dir when there is one; each test copies it, so
    daemons never write to it."""
    cache = getattr(request.config, "cache", None)
    root: Path | None = None
    if cache is not None:
        try:
            root = Path(cache.mkdir("spmd-mypy-editor-cache"))
        except OSError:
            root = None
    if root is None:
        root = tmp_path_factory.mktemp("editor-cache")
    editor_util.build_warm_cache(root / "mypy", tmp_path_factory.mktemp("warm-project"))
    return root / "mypy"
