"""The installed plugin is the mypyc-compiled one (setup.py), so a change mypyc cannot compile
fails here instead of silently installing the slower pure-Python plugin.

Skipped where the pure plugin is expected: the tests import the checkout's sources (no
regular install), an editable install, or ``SPMD_MYPY_PURE=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _installed_module_file(module: str) -> str:
    # a fresh interpreter outside the checkout: what mypy imports as the plugin
    out = subprocess.run([sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
                         cwd="/", capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return out.stdout.strip() if out.returncode == 0 else ""


def test_the_installed_plugin_is_compiled() -> None:
    if os.environ.get("SPMD_MYPY_PURE", "") not in ("", "0"):
        pytest.skip("SPMD_MYPY_PURE is set: the pure plugin is expected")
    path = _installed_module_file("spmd_mypy.plugin.calls")
    if "site-packages" not in path:
        pytest.skip(f"spmd_mypy is not installed as a regular package here ({path or 'absent'})")
    for module in ("calls", "boundaries", "rewrite", "mypy_types"):
        f = _installed_module_file(f"spmd_mypy.plugin.{module}")
        assert f.endswith(".so"), f"spmd_mypy.plugin.{module} is not compiled: {f}"
    assert _installed_module_file("spmd_mypy.plugin").endswith(".py")  # SpmdPlugin stays Python
