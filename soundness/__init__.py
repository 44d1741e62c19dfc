"""Machine proof of the rules (issue 7): the rule soundness suite, the differential
fuzzer and the robustness runs. One command runs them all: ``python -m soundness``.

Not part of the installed package: it imports the engine, the runtime and mypy
side by side, runs real gloo ranks, and prints what it checked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what ``make soundness`` puts first on PYTHONPATH: the checkout's plugin and engine, its
# runtime (``spmd``) and its stubs (``spmd-stubs``, found by mypy on the path); the gloo
# worlds (world.run_world) start their ranks with the same paths
CHECKOUT_PATHS = (ROOT, ROOT / "runtime", ROOT / "stubs")


def run_from_checkout(module: str) -> None:
    """Run ``python -m <module>`` again with the checkout's paths first on PYTHONPATH, as
    ``make soundness`` does, unless they are already there.  Without them an installed
    ``spmd`` and ``spmd-stubs`` stand in for the checkout's: in this process, in mypy's
    search path and in the processes it starts.  (Returns when the paths are in place.)"""
    have = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    want = [str(p) for p in CHECKOUT_PATHS]
    if [os.path.realpath(p) for p in have[:len(want)]] == [os.path.realpath(p) for p in want]:
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(want + have))
    sys.stdout.flush()
    sys.stderr.flush()
    # (the interpreter's own options too: ``python -X dev -m soundness``)
    argv = sys.orig_argv[1:] if "-m" in sys.orig_argv else ["-m", module, *sys.argv[1:]]
    os.execve(sys.executable, [sys.executable, *argv], env)
