"""mypy for the fuzzer: a worker process that runs ``mypy.api.run`` on request.

mypy leaks about 85 MB per ``mypy.api.run`` call made in one process (measured here,
with and without the plugin: the parsed torch stubs are kept), so the fuzzer runs
mypy in this worker and replaces it every ``RECYCLE`` programs; its cache keeps torch
analysed, so a program costs ~0.5 s and a new worker ~1-2 s more.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECYCLE = 12


class MypyWorker:
    def __init__(self, timeout: float = 300.0) -> None:
        self.proc: subprocess.Popen | None = None
        self.served = 0
        self.timeout = timeout

    def _start(self) -> None:
        env = dict(os.environ)
        paths = [str(ROOT), str(ROOT / "runtime"), str(ROOT / "stubs"), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "soundness.fuzz_mypy"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(ROOT))
        self.served = 0

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None

    def run(self, args: list[str]) -> tuple[str, str, int]:
        if self.proc is None or self.served >= RECYCLE:
            self.close()
            self._start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.served += 1
        try:
            self.proc.stdin.write(pickle.dumps(args))
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"mypy gave no answer in {self.timeout:.0f} s")
            return pickle.load(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError, TimeoutError) as e:
            self.close()
            return "", f"INTERNAL ERROR: the mypy worker failed: {e!r}", 2


def _main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from mypy import api

    while True:
        try:
            args: Any = pickle.load(sys.stdin.buffer)
        except EOFError:
            break
        result = api.run(args)
        out.write(pickle.dumps(result))
        out.flush()


if __name__ == "__main__":
    _main()
