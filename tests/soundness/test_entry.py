"""``python -m soundness`` proves the checkout's code whatever PYTHONPATH says.

Run without ``make`` (which puts the checkout's plugin, runtime and stubs first on
PYTHONPATH), the package once took ``spmd`` and ``spmd-stubs`` from an installed copy: a
proof of the installed runtime and stubs beside the checkout's engine (session 46's note).
It now runs itself again with the checkout's paths first, and its summary records where each
came from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _proven(tmp_path: Path, pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    summary = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "soundness", "--skip", "rules", "fuzz", "robustness",
                           "--json", str(summary)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "proving: spmd from " in proc.stdout, proc.stdout
    return json.loads(summary.read_text())["code"]


@pytest.mark.parametrize("pythonpath", [None, "make"], ids=["no PYTHONPATH", "make's PYTHONPATH"])
def test_soundness_proves_the_checkouts_code(tmp_path: Path, pythonpath: str | None):
    if pythonpath == "make":
        pythonpath = os.pathsep.join(str(p) for p in (ROOT, ROOT / "runtime", ROOT / "stubs"))
    code = _proven(tmp_path, pythonpath)
    assert Path(code["spmd"]) == (ROOT / "runtime").resolve(), code
    assert Path(code["spmd_mypy"]) == ROOT.resolve(), code
    assert Path(code["spmd-stubs"]) == (ROOT / "stubs").resolve(), code


def test_the_fuzzer_runs_from_the_checkout_too(tmp_path: Path):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "soundness.fuzz", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: python -m soundness.fuzz" in proc.stdout, proc.stderr
