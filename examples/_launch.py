"""Starting and ending a world of rank processes without hanging (no torch import at load)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import NoReturn


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


def leave_world(code: int) -> NoReturn:
    """End this rank: barrier, destroy the process groups, exit without Python's finalization.

    The barrier lets every peer finish its last collective first.  ``os._exit`` then skips
    interpreter finalization on purpose: the mesh's gloo groups outlive
    ``destroy_process_group`` (the mesh still references them), and one of their worker
    threads may drop its last finished work, whose tensors hold Python references, only
    after finalization has begun; taking the GIL of a finalizing interpreter then aborts the
    rank ("terminate called without an active exception").  Measured with torch 2.13: 11 of
    100 runs of tests/report/_agreement_worker.py lost a rank that way, 1 of 80 with the
    barrier alone; the core dump shows ProcessGroupGloo::runLoop destroying an
    AsyncAllreduceWork in take_gil.
    """
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
