"""Session-wide setup shared by every test folder.

An editable install (``pip install -e .``) makes ``spmd_mypy`` and ``spmd`` importable through
setuptools' import hook, which mypy's own module search does not follow: mypy run as a
subprocess (the editor, example and robustness tests) would then not find the ``spmd-stubs``
package.  When no directory on ``sys.path`` holds ``spmd-stubs``, the checkout's ``stubs/`` goes on
``PYTHONPATH`` for every subprocess.  An installed package (what CI runs) needs nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_STUBS = Path(__file__).resolve().parents[1] / "stubs"


def _stubs_on_sys_path() -> bool:
    return any((Path(p) / "spmd-stubs").is_dir() for p in sys.path if p)


if not _stubs_on_sys_path() and (_STUBS / "spmd-stubs").is_dir():
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_STUBS), os.environ.get("PYTHONPATH", "")) if p)
