"""A persistent gloo world of 4 rank processes (a 2 x 2 ("dp", "tp") mesh) that runs
programs sent to it, so that one program costs milliseconds, not a process start.

The parent writes one pickled job per rank on the rank's stdin (the function's source,
its name, this rank's input tensors, this rank's cotangent or None) and reads one
pickled reply per rank from its stdout.  A rank never blocks forever: gloo's own
timeout turns a rank left waiting in a collective into an error, and the parent gives
up on a reply after ``reply_timeout`` seconds and restarts the world.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORLD = 4
COLLECTIVE_TIMEOUT = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pool:
    def __init__(self, reply_timeout: float = 60.0, start_timeout: float = 240.0) -> None:
        self.reply_timeout = reply_timeout
        self.start_timeout = start_timeout
        self.procs: list[subprocess.Popen] = []
        self.logdir = tempfile.mkdtemp(prefix="spmd-fuzz-pool-")
        self.restarts = 0

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        port = _free_port()
        env = dict(os.environ)
        paths = [str(ROOT), str(ROOT / "runtime"), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["OMP_NUM_THREADS"] = "1"
        env["PYTHONWARNINGS"] = "ignore"
        self.procs = []
        for rank in range(WORLD):
            err = open(os.path.join(self.logdir, f"rank{rank}.err"), "ab")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "soundness.fuzz_pool", str(rank), str(WORLD), str(port)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                cwd=str(ROOT), start_new_session=True))
            err.close()
        replies = self._read_all(self.start_timeout)
        if any(r is None or r.get("ready") is not True for r in replies):
            tails = self.stderr_tails()
            self.close()
            raise RuntimeError(f"the gloo world did not start:\n{tails}")

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []

    def __enter__(self) -> Pool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stderr_tails(self) -> str:
        out = []
        for rank in range(WORLD):
            p = Path(self.logdir) / f"rank{rank}.err"
            text = p.read_text(errors="replace") if p.exists() else ""
            out.append(f"--- rank {rank} ---\n{text[-1500:]}")
        return "\n".join(out)

    # -- jobs -------------------------------------------------------------------------
    def run(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One job per rank; the replies, rank by rank.  A dead or stuck world is restarted
        and the replies are ``{"ok": False, "error": "world lost: ..."}``."""
        if not self.procs:
            self.start()
        try:
            for p, job in zip(self.procs, jobs):
                assert p.stdin is not None
                p.stdin.write(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
                p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            return self._lost(f"write failed: {e}")
        replies = self._read_all(self.reply_timeout)
        if any(r is None for r in replies):
            return self._lost("no reply in time")
        return replies  # type: ignore[return-value]

    def _lost(self, why: str) -> list[dict[str, Any]]:
        tails = self.stderr_tails()
        self.close()
        self.restarts += 1
        self.start()
        return [{"ok": False, "error": f"world lost ({why})\n{tails}"} for _ in range(WORLD)]

    def _read_all(self, timeout: float) -> list[dict[str, Any] | None]:
        deadline = time.monotonic() + timeout
        out: list[dict[str, Any] | None] = []
        for p in self.procs:
            assert p.stdout is not None
            left = deadline - time.monotonic()
            ready, _, _ = select.select([p.stdout], [], [], max(left, 0.0))
            if not ready:
                out.append(None)
                continue
            try:
                out.append(pickle.load(p.stdout))
            except (EOFError, pickle.UnpicklingError, OSError):
                out.append(None)
        return out


# ------------------------------------------------------------------------------------
# the rank side


def _worker(rank: int, world: int, port: int) -> None:
    import datetime
    import traceback
    import warnings

    warnings.filterwarnings("ignore")
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the protocol
    proto_in = sys.stdin.buffer

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    spmd.set_mesh(mesh)
    # touch both axis groups once (creating groups is collective)
    for axis in ("dp", "tp"):
        spmd.all_reduce(torch.zeros(1, dtype=torch.float64), axis, src=spmd.P, dst=spmd.R)

    def send(obj: dict) -> None:
        pickle.dump(obj, proto_out, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.flush()

    send({"ready": True})
    compiled: dict[str, Any] = {}
    base_ns = {"torch": torch, "F": F, "spmd": spmd, "Tensor": spmd.Tensor, "R": spmd.R,
               "I": spmd.I, "V": spmd.V, "P": spmd.P, "S": spmd.S}
    while True:
        try:
            job = pickle.load(proto_in)
        except EOFError:
            break
        try:
            fn = compiled.get(job["src"])
            if fn is None:
                ns = dict(base_ns)
                exec(compile(job["src"], "<fuzz>", "exec"), ns)  # noqa: S102
                fn = compiled[job["src"]] = ns[job["fn"]]
            xs = [x.detach().clone().requires_grad_(True) for x in job["inputs"]]
            out = fn(*xs)
            reply: dict[str, Any] = {"ok": True, "out": None, "grads": None, "bwd_error": None}
            if isinstance(out, torch.Tensor):
                reply["out"] = out.detach().clone()
                cot = job.get("cot")
                if cot is not None and out.requires_grad:
                    try:
                        out.backward(cot)
                    except Exception as e:  # noqa: BLE001
                        reply["bwd_error"] = f"{type(e).__name__}: {e}"
            reply["grads"] = [None if x.grad is None else x.grad.detach().clone() for x in xs]
        except Exception as e:  # noqa: BLE001
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}",
                     "trace": traceback.format_exc(limit=4)}
        send(reply)
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
