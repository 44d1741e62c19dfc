"""Run a job on a real gloo world of N ranks, with a deadline.

The parent starts one launcher process (``python -m soundness.world``, in its own
session) that imports torch once and forks the ranks; each rank initialises gloo on
127.0.0.1, runs ``job(rank, world_size, arg)`` and rank 0 pickles the job's return value
to a file.  A world that has not finished by the deadline is killed with every rank
(the process group), and the parent raises :class:`WorldFailed` with the ranks' stderr.
(The pattern of ``tests/runtime/rt_world.py``, for a job that returns data.)

Not one launcher with ``rt_world``: what they share is the spawn-with-deadline-and-killpg
and the fork loop (some 35 lines), while the rest differs (rt_world streams one JSON line
per check per rank, so that a hang keeps the results before it, and needs every rank's;
here rank 0 returns one pickled value, the collectives wait an hour, not 30 s).  And there
is no clean home for the shared part: the runtime tests would import the soundness tool,
or the tool ``tests/``, or the installed ``spmd`` package would ship a test harness.
"""

from __future__ import annotations

import datetime
import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from soundness import CHECKOUT_PATHS, ROOT

COLLECTIVE_TIMEOUT = 3600.0  # the world deadline (run_world) is what bounds a run


class WorldFailed(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world_size: int, job: str, arg: object, timeout: float) -> object:
    """``job`` is ``"module:function"``; ``arg`` is pickled to every rank."""
    with tempfile.TemporaryDirectory(prefix="spmd-soundness-") as tmp:
        (Path(tmp) / "arg.pkl").write_bytes(pickle.dumps(arg))
        env = dict(os.environ)
        paths = [str(p) for p in CHECKOUT_PATHS]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONWARNINGS"] = "ignore"
        for attempt in range(2):
            port = _free_port()
            with open(Path(tmp) / "launcher.err", "w+") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "soundness.world", str(world_size), str(port), job, tmp],
                    stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(ROOT),
                    start_new_session=True)
                timed_out = False
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
                err.seek(0)
                launcher_err = err.read()
            result = Path(tmp) / "result.pkl"
            if result.exists():
                return pickle.loads(result.read_bytes())
            tails = [launcher_err[-2000:]]
            for r in range(world_size):
                p = Path(tmp) / f"stderr{r}"
                if p.exists():
                    tails.append(f"--- rank {r} ---\n" + p.read_text()[-3000:])
            text = "\n".join(tails)
            if "address already in use" in text.lower() and attempt == 0:
                continue
            why = f"timed out after {timeout:.0f} s" if timed_out else "failed"
            raise WorldFailed(f"world of {world_size} ranks ({job}) {why}\n{text}")
    raise WorldFailed("unreachable")


def _launcher(world_size: int, port: int, job: str, tmp: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    arg = pickle.loads((Path(tmp) / "arg.pkl").read_bytes())
    mod_name, fn_name = job.split(":")
    fn = getattr(importlib.import_module(mod_name), fn_name)
    # the first autograd call costs seconds: warm it up once before the fork
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    torch.autograd.grad((x * x).sum(), x)
    children = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(os.path.join(tmp, f"stderr{rank}"), os.O_WRONLY | os.O_CREAT)
                os.dup2(fd, 2)
                import torch.distributed as dist

                dist.init_process_group(
                    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                    world_size=world_size,
                    timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT))
                out = fn(rank, world_size, arg)
                if rank == 0:
                    part = Path(tmp) / "result.part"
                    part.write_bytes(pickle.dumps(out))
                    part.rename(Path(tmp) / "result.pkl")
                dist.barrier()
                dist.destroy_process_group()
                code = 0
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    failed = False
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed = failed or status != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    _launcher(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
