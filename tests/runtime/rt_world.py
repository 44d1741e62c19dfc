"""Run a suite of checks on a real gloo world of N processes, without ever hanging.

The parent (pytest) calls :func:`run_world`; it starts one ``python rt_world.py``
launcher (in its own session), which imports torch once and forks N ranks; each
initialises gloo on 127.0.0.1 and a free port, runs every check of the suite in
order and appends one JSON line per check to its result file.  The parent waits while the
world makes progress: a world in which no check has finished for ``timeout`` seconds (a
hang, not a slow machine: a world of 23 checks takes 40 s on a quiet host and over 120 s on
a slow CI machine) is killed, and every check without a result on every rank fails with the
ranks' stderr tails.  A check passes when it passed on every rank.

A suite of :data:`FRESH_SUITES` runs each check in fresh ranks: the launcher forks N new
ranks per check (a new process group, met through a file store in the world's directory:
no port picked per check while other worlds run), so every check is the first thing its
processes do after the import (what the runtime does once per process, lazily, is then
done inside each check).

Inside a world a failing check raises on its rank only; gloo's own timeout
(``COLLECTIVE_TIMEOUT``) turns a rank left waiting in a collective into an error
instead of a hang.  A rank leaves only when every rank has run its last check: rank 0 hosts
the store that groups made late on other ranks still read.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported inside the worker only
    from torch.distributed import Store

HERE = Path(__file__).resolve().parent
COLLECTIVE_TIMEOUT = 30.0  # seconds a rank waits in one collective before gloo gives up
SELFTEST_TIMEOUT = 20.0  # the stall deadline of the harness's own test world (it has a
# hang); below COLLECTIVE_TIMEOUT, so that the hung barrier's own error is no progress
STARTUP_ALLOWANCE = 60.0  # the least time a world has for its first result: the launcher's
# torch import and warm-up come first (a 10 s deadline for the whole selftest world was missed
# twice on 2 shared cores at load 7, no rank having started a check)
FRESH_SUITES = frozenset({"first-call"})  # suites whose every check runs in fresh ranks


@dataclass
class CheckResult:
    ok: bool
    message: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class World:
    """A suite run once on ``world_size`` ranks, when a test first asks for one of its
    checks; a test module parametrizes over :meth:`names` and calls :meth:`check`."""

    def __init__(self, world_size: int, suite: str, timeout: float) -> None:
        self.world_size, self.suite, self.timeout = world_size, suite, timeout
        self._results: dict[str, CheckResult] = {}

    def names(self) -> list[str]:
        """The suite's check names without the ``w2/`` prefix."""
        import rt_checks

        return [n.split("/", 1)[1] for n, _ in rt_checks.suite(self.suite, self.world_size)]

    def check(self, name: str) -> None:
        import pytest

        if not self._results:
            self._results.update(run_world(self.world_size, self.suite, self.timeout))
        key = f"w{self.world_size}/{name}"
        res = self._results[key]
        if not res.ok:
            pytest.fail(f"{key} failed:\n{res.message}", pytrace=False)


def run_world(world_size: int, suite: str, timeout: float = 150.0) -> dict[str, CheckResult]:
    """Run ``rt_checks.SUITES[suite]`` on ``world_size`` gloo ranks; results per check name."""
    import rt_checks

    names = [name for name, _ in rt_checks.suite(suite, world_size)]
    for attempt in range(2):
        results, stderr, retry = _launch(world_size, suite, timeout)
        if not retry:
            break
    final: dict[str, CheckResult] = {}
    waited = allowed_stall(timeout, any(results))  # the stall the wait allowed
    for name in names:
        per_rank = [results[r].get(name) for r in range(world_size)]
        failures = [f"rank {r}:\n{res['error']}" for r, res in enumerate(per_rank)
                    if res is not None and not res["ok"]]
        missing = [r for r, res in enumerate(per_rank) if res is None]
        if failures:
            final[name] = CheckResult(False, "\n".join(failures))
        elif missing:
            tails = "\n".join(f"--- rank {r} stderr (tail) ---\n{stderr[r][-3000:]}" for r in missing)
            final[name] = CheckResult(False, f"no result from ranks {missing} (crashed, or timed "
                                             f"out: no check finished for {waited:.0f} s)"
                                             f"\n{tails}")
        else:
            final[name] = CheckResult(True)
    return final


def _launch(world_size: int, suite: str, timeout: float
            ) -> tuple[list[dict[str, dict]], list[str], bool]:
    """One launcher process imports torch once and forks the ranks (saves N-1 imports)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="spmd-world-") as tmp:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONWARNINGS"] = "ignore"
        with open(Path(tmp) / "launcher.err", "w+") as err:
            proc = subprocess.Popen(
                [sys.executable, str(HERE / "rt_world.py"), str(world_size), str(port), suite, tmp],
                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(HERE),
                start_new_session=True)
            try:
                _wait_while_progressing(proc, Path(tmp), timeout)
            finally:
                try:  # the launcher and every rank it forked (a rank may outlive a crash)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            err.seek(0)
            launcher_err = err.read()
        stderr = []
        results: list[dict[str, dict]] = []
        for rank in range(world_size):
            path = Path(tmp) / f"stderr{rank}"
            stderr.append((path.read_text() if path.exists() else "") + launcher_err)
            path = Path(tmp) / f"rank{rank}.jsonl"
            rank_results = {}
            if path.exists():
                for line in path.read_text().splitlines():
                    rec = json.loads(line)
                    rank_results[rec["name"]] = rec
            results.append(rank_results)
    retry = (all(not r for r in results) and any("address already in use" in s.lower()
                                                  for s in stderr))
    return results, stderr, retry


def allowed_stall(stall: float, started: bool) -> float:
    """How long a world may write no result: ``stall`` seconds once a check has finished,
    before that at least STARTUP_ALLOWANCE (the launcher's torch import and warm-up)."""
    return stall if started else max(stall, STARTUP_ALLOWANCE)


def _wait_while_progressing(proc: subprocess.Popen, tmp: Path, stall: float) -> None:
    """Wait for the launcher until it exits or no result line has been written for as long
    as :func:`allowed_stall` allows."""
    written, last_progress = 0, time.monotonic()
    while proc.poll() is None:
        now = time.monotonic()
        size = sum(p.stat().st_size for p in tmp.glob("rank*.jsonl"))
        allowed = allowed_stall(stall, written > 0)
        if size != written:
            written, last_progress = size, now
        elif now - last_progress > allowed:
            return
        time.sleep(0.2)


def _launcher_main(world_size: int, port: int, suite_name: str, tmp: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch  # imported once, before the fork

    import rt_checks

    # Warm up once here what torch imports lazily on first use (the first autograd.grad
    # costs seconds), single-threaded so that no thread pool exists at the fork.
    torch.set_num_threads(1)
    rt_checks.warm_up()

    if suite_name in FRESH_SUITES:  # N new ranks per check, one check each
        for index in range(len(rt_checks.suite(suite_name, world_size))):
            store = os.path.join(tmp, f"store{index}")
            _fork_ranks(world_size, f"file://{store}", suite_name, tmp, index)
    else:
        _fork_ranks(world_size, f"tcp://127.0.0.1:{port}", suite_name, tmp, None)


def _fork_ranks(world_size: int, init_method: str, suite_name: str, tmp: str,
                only: int | None) -> None:
    """Fork the ranks of one world and wait for them; ``only``: run that check alone."""
    children = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(os.path.join(tmp, f"stderr{rank}"),
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(fd, 2)
                _worker_main(rank, world_size, init_method, suite_name,
                             os.path.join(tmp, f"rank{rank}.jsonl"), only)
                code = 0
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def _worker_main(rank: int, world_size: int, init_method: str, suite_name: str, out_path: str,
                 only: int | None = None) -> None:
    import datetime
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT)
    store, _, _ = next(dist.rendezvous(init_method, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timeout)
    import rt_checks

    checks = rt_checks.suite(suite_name, world_size)
    with open(out_path, "a") as out:
        ctx = rt_checks.Ctx(rank, world_size)
        start = time.perf_counter()
        for name, fn in checks if only is None else checks[only:only + 1]:
            try:
                fn(ctx)
                rec: dict = {"name": name, "ok": True}
            except BaseException:  # noqa: BLE001 - report everything
                rec = {"name": name, "ok": False, "error": traceback.format_exc()}
            now = time.perf_counter()
            rec["seconds"] = round(now - start, 4)
            start = now
            out.write(json.dumps(rec) + "\n")
            out.flush()
    _wait_for_every_rank(store, world_size)
    dist.destroy_process_group()


def _wait_for_every_rank(store: Store, world_size: int) -> None:
    """Leave only when every rank has run its last check (or after ``COLLECTIVE_TIMEOUT``).

    Rank 0 hosts the TCP store, and a group is made without a barrier
    (``DeviceMesh._flatten``'s ``new_group`` on ranks 0 and 1 does not wait for ranks 2 and
    3): a rank 0 that left after its last check took the store with it, and ranks still
    making their group read "DistNetworkError: Connection reset by peer" or "Broken pipe"
    (the flattened world's CI failures of sessions 38-51).
    """
    store.add("spmd-world/finished", 1)
    deadline = time.monotonic() + COLLECTIVE_TIMEOUT
    while store.add("spmd-world/finished", 0) < world_size and time.monotonic() < deadline:
        time.sleep(0.01)


if __name__ == "__main__":
    _launcher_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
