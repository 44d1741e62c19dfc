"""Run each example's training step on a 2 x 2 ("dp", "tp") gloo mesh and count what it does.

    python tests/report/_agreement_worker.py OUT_DIR [--timeout S] [--only NAME ...]

Without ``RANK`` in the environment this launches the 4 ranks itself (torchrun's
environment, one process per rank) and kills them after ``--timeout`` seconds.  Each rank
writes ``OUT_DIR/rank<r>.json``::

    {example: {
        "comms": [[op, axes, phase, count], ...]      torch.distributed calls made during
                                                      step(); phase "forward" | "backward"
                                                      (inside the autograd engine)
        "sites": [[path, line, call, calls, with_grad], ...]
                                                      each spmd collective / conversion /
                                                      out_partial_axes op (and raw
                                                      torch.distributed call in the example)
                                                      called during step(), by its caller's
                                                      file and line; with_grad: the calls
                                                      whose input carried a gradient
        "functions": [[path, qualname, calls], ...]   the example file's functions run
        "loss": float}}

Only ``step(model, batch)`` is measured (not ``build``, nor the harness's own gathers).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORLD = 4
MESH_SHAPE, MESH_AXES = (2, 2), ("dp", "tp")

# torch.distributed functions that communicate -> the op name the report uses
DIST_OPS = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather", "_all_gather_base": "all_gather",
    "all_gather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "isend": "send", "irecv": "recv",
}
# spmd._dist_utils' direct forms (the ProcessGroup's own call, no torch.distributed wrapper:
# the typed ops' fast paths and the general path's sums, gathers and all_to_all), the group
# their last argument
DIRECT_OPS = {"all_to_all_single": "all_to_all", "all_reduce_sum": "all_reduce",
              "all_gather_single": "all_gather", "reduce_scatter_sum": "reduce_scatter"}
SPMD_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret",
                    "convert", "redistribute")
SPMD_PARTIAL = ("einsum", "matmul", "linear", "sum")


class Counters:
    """Patches torch.distributed and the spmd entry points while ``active``."""

    def __init__(self, groups: dict[int, str]) -> None:
        self.groups = groups  # id(process group) -> axes ("dp", "tp", "dp,tp")
        self.active = False
        self.comms: Counter[tuple[str, str, str]] = Counter()
        self.sites: Counter[tuple[str, int, str]] = Counter()
        self.grad_sites: Counter[tuple[str, int, str]] = Counter()
        self.functions: Counter[tuple[str, str]] = Counter()
        self._undo: list[Callable[[], None]] = []
        self._direct = 0  # inside a direct form (its torch.distributed fallback: counted once)

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def install(self) -> None:
        import torch
        import torch.distributed as dist

        import spmd
        import spmd._dist_utils as du

        def comm(op: str, name: str, direct: bool = False) -> Callable[[Any], Any]:
            def make(original: Any) -> Any:
                def counted(*args: Any, **kwargs: Any) -> Any:
                    if direct:
                        self._direct += 1
                        try:
                            return counted_call(args, kwargs, args[-1])
                        finally:
                            self._direct -= 1
                    if self._direct:
                        return original(*args, **kwargs)
                    return counted_call(args, kwargs, kwargs.get("group"))

                def counted_call(args: tuple, kwargs: dict, group: Any) -> Any:
                    if self.active:
                        axes = self.groups.get(id(group), "world" if group is None else "?")
                        phase = "backward" if torch._C._current_autograd_node() is not None else "forward"
                        self.comms[(op, axes, phase)] += 1
                        frame = sys._getframe(2)  # counted's caller
                        caller = frame.f_code.co_filename
                        if Path(caller).parent == EXAMPLES:  # a raw call in the example itself
                            key = (caller, frame.f_lineno, f"torch.distributed.{name}")
                            self.sites[key] += 1
                    return original(*args, **kwargs)

                return counted

            return make

        wrapped: dict[int, Any] = {}
        for name, op in DIST_OPS.items():
            if hasattr(dist, name):
                original = getattr(dist, name)
                self._patch(dist, name, comm(op, name))
                wrapped[id(original)] = getattr(dist, name)
        # _dist_utils bound these at import: patch its own references too
        for name in ("_all_gather_flat", "_reduce_scatter_flat"):
            original = getattr(du, name)
            replacement = wrapped.get(id(original))
            assert replacement is not None, f"spmd._dist_utils.{name} is not a torch.distributed function"
            setattr(du, name, replacement)
            self._undo.append(functools.partial(setattr, du, name, original))
        for name, op in DIRECT_OPS.items():
            self._patch(du, name, comm(op, name, direct=True))

        def site(call: str, partial: bool) -> Callable[[Any], Any]:
            def make(original: Any) -> Any:
                def counted(*args: Any, **kwargs: Any) -> Any:
                    if self.active and (not partial or kwargs.get("out_partial_axes") is not None):
                        frame = sys._getframe(1)
                        key = (frame.f_code.co_filename, frame.f_lineno, call)
                        self.sites[key] += 1
                        tensors = [a for a in list(args) + list(kwargs.values())
                                   if isinstance(a, torch.Tensor)]
                        if partial:
                            grad = any(t.requires_grad for t in tensors)
                        else:
                            grad = bool(tensors) and tensors[0].requires_grad
                        if grad and torch.is_grad_enabled():
                            self.grad_sites[key] += 1
                    return original(*args, **kwargs)

                return counted

            return make

        for name in SPMD_COLLECTIVES:
            self._patch(spmd, name, site(f"spmd.{name}", False))
        for name in SPMD_PARTIAL:
            self._patch(spmd, name, site(f"spmd.{name}", True))

    def profile(self, filename: str) -> Callable[..., Any]:
        def prof(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and self.active and frame.f_code.co_filename == filename:
                self.functions[(filename, frame.f_code.co_qualname)] += 1

        return prof

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def take(self) -> dict[str, Any]:
        out = {
            "comms": [[op, axes, phase, n] for (op, axes, phase), n in sorted(self.comms.items())],
            "sites": [[path, line, call, n, self.grad_sites.get((path, line, call), 0)]
                      for (path, line, call), n in sorted(self.sites.items())],
            "functions": [[path, q, n] for (path, q), n in sorted(self.functions.items())],
        }
        self.comms.clear()
        self.sites.clear()
        self.grad_sites.clear()
        self.functions.clear()
        return out


def worker(out_dir: Path, only: list[str] | None) -> int:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import spmd
    from spmd import _mesh

    sys.path.insert(0, str(EXAMPLES))
    import _harness  # type: ignore[import-not-found]

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    results: dict[str, Any] = {}
    try:
        mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_AXES)
        spmd.set_mesh(mesh)
        groups = {}
        for axes in (("dp",), ("tp",), ("dp", "tp")):
            groups[id(_mesh.resolve_axis(axes if len(axes) > 1 else axes[0]).pg)] = ",".join(axes)
        counters = Counters(groups)
        counters.install()
        try:
            for name in only or _harness.EXAMPLES:
                mod = importlib.import_module(name)
                weights = mod.full_weights(_harness.SEED)
                dp_rank = mesh.get_local_rank("dp")
                seed = _harness.SEED + 1 if mod.DATA_PARALLEL else _harness.SEED + 1 + 100 * (dp_rank + 1)
                batch = mod.make_batch(seed)
                model = mod.build(weights, mesh)
                dist.barrier()
                sys.setprofile(counters.profile(str(Path(str(mod.__file__)).resolve())))
                counters.active = True
                try:
                    loss = mod.step(model, batch)
                finally:
                    counters.active = False
                    sys.setprofile(None)
                results[name] = dict(counters.take(), loss=float(loss))
        finally:
            counters.uninstall()
        (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # a peer may be stuck in a collective: no teardown
    from _launch import leave_world  # type: ignore[import-not-found]

    leave_world(0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(argv: list[str], timeout: float) -> int:
    """Start WORLD ranks of this script; kill them all on timeout or soon after one fails."""
    env_base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                    WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1",
                    PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for rank in range(WORLD):
            err = Path(tmp, f"{rank}.err")
            logs.append(err)
            with err.open("wb") as fe:
                procs.append(subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), *argv],
                    env=dict(env_base, RANK=str(rank), LOCAL_RANK=str(rank)),
                    stdout=subprocess.DEVNULL, stderr=fe))
        sys.path.insert(0, str(EXAMPLES))
        from _launch import wait_for_ranks  # type: ignore[import-not-found]

        codes, timed_out = wait_for_ranks(procs, timeout, grace=10)
        if timed_out:
            print(f"TIMEOUT after {timeout:.0f} s: ranks killed", file=sys.stderr)
        for rank, code in enumerate(codes):
            text = logs[rank].read_text()
            if (code != 0 or timed_out) and text.strip():
                print(f"---- rank {rank} (exit {code}) ----\n{text[-6000:]}", file=sys.stderr)
        return 1 if timed_out or any(codes) else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--only", action="append")
    args = ap.parse_args(argv)
    if "RANK" in os.environ:
        return worker(Path(args.out_dir), args.only)
    return launch(argv, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
