"""Session-wide setup shared by every test folder: the checkout importable by the tests and
by the mypy they run as subprocesses.

- A bare checkout (nothing installed): the repository root goes on ``sys.path`` and
  ``PYTHONPATH`` for ``spmd_mypy``.
- An editable install (``pip install -e .``) makes ``spmd_mypy`` and ``spmd`` importable through
  setuptools' import hook, which mypy's own module search does not follow; so whenever no
  directory on ``sys.path`` holds ``spmd-stubs``, the checkout's ``stubs/`` goes on ``PYTHONPATH``
  for every subprocess.

An installed package (what CI runs) needs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_STUBS = _ROOT / "stubs"


def _on_pythonpath(path: Path) -> None:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(path), os.environ.get("PYTHONPATH", "")) if p)


if importlib.util.find_spec("spmd_mypy") is None:
    sys.path.insert(0, str(_ROOT))
    _on_pythonpath(_ROOT)
if not any((Path(p) / "spmd-stubs").is_dir() for p in sys.path if p) and (_STUBS / "spmd-stubs").is_dir():
    _on_pythonpath(_STUBS)


import pytest  # noqa: E402

import run_once  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """run_once's directory: the run's base temporary directory, the parent of each xdist
    worker's own (``pytest-N/popen-gwK``); a run without workers uses its own."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ[run_once.SHARED_DIR_VAR] = str(shared / "run-once")
    (shared / "run-once").mkdir(exist_ok=True)

