"""Waiting for a world of rank processes without hanging (no torch import here)."""

from __future__ import annotations

import subprocess
import time


def wait_for_ranks(procs: list[subprocess.Popen], timeout: float, grace: float) -> tuple[list[int], bool]:
    """Wait for every rank; (exit codes, whether the deadline was hit).

    A rank that died leaves its peers waiting in a collective: they get ``grace`` seconds to
    report (gloo's own timeout), then every rank still running is killed; so is everyone at
    the deadline.
    """
    deadline = time.monotonic() + timeout
    first_failure: float | None = None
    timed_out = False
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if first_failure is None and any(p.poll() not in (None, 0) for p in procs):
            first_failure = now
        if now > deadline or (first_failure is not None and now > first_failure + grace):
            timed_out = now > deadline
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.05)
    return [p.wait() for p in procs], timed_out
