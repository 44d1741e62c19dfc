"""Run every example on a 2 x 2 ("dp", "tp") mesh of gloo ranks and compare with the references.

    torchrun --nproc-per-node 4 examples/run_all.py     # under torchrun
    python examples/run_all.py                          # spawns the 4 ranks itself

Prints, per example, the largest difference of the loss and of the gradients
(sharded gradients gathered) to the single-process unsharded reference, and
PASS or FAIL (tolerance 1e-10, float64).  Each example then runs once more
under ``spmd.typecheck()`` (the runtime check mode, parameters declared with
their annotated types); the "typecheck" column shows "ok" or the first error's
code ("skipped" with --no-typecheck, "not run" for an example that failed first).  ``--json PATH`` also writes the results; the exit status is 0 when every
example passes and type-checks.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import leave_world, wait_for_ranks  # noqa: E402
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
MESH_SHAPE = (2, 2)
MESH_AXES = ("dp", "tp")
WORLD = MESH_SHAPE[0] * MESH_SHAPE[1]
GLOO_TIMEOUT_S = 60  # a collective left waiting by a failed peer errors instead of hanging


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (rank 0)")
    ap.add_argument("--only", metavar="NAME", action="append",
                    help="run only this example (repeatable; an unknown name lists the known ones)")
    ap.add_argument("--timeout", type=float, default=240.0,
                    help="seconds before the spawned ranks are killed (default 240)")
    ap.add_argument("--gloo-timeout", type=float, default=GLOO_TIMEOUT_S,
                    help=f"seconds a collective waits for a peer (default {GLOO_TIMEOUT_S})")
    ap.add_argument("--no-typecheck", action="store_true",
                    help="skip the second run of each example under spmd.typecheck()")
    ap.add_argument("--path", metavar="DIR", action="append", default=[],
                    help="also import examples from DIR (repeatable)")
    return ap.parse_args(argv)


# ---- one rank ------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    sys.path[:0] = [str(HERE), *args.path]
    import _harness

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != WORLD:
        print(f"run_all.py needs {WORLD} ranks (a {MESH_SHAPE} mesh {MESH_AXES}), got {world}",
              file=sys.stderr)
        return 2
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.gloo_timeout))
    try:
        mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_AXES)
        spmd.set_mesh(mesh)
        names = tuple(args.only) if args.only else _harness.EXAMPLES
        results = _harness.run_all(mesh, names, typecheck=not args.no_typecheck)
        if rank == 0:
            print(_harness.format_table(results), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(_harness.as_json(results), indent=1))
        ok = all(r.passed and not r.check_errors for r in results)
    except BaseException:
        # a collective failed (a peer died or timed out): the process group is unusable and
        # tearing it down would wait on the peers again; report and leave at once
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    leave_world(0 if ok else 1)


# ---- the launcher (torchrun's job when run without it) -------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(argv: list[str], timeout: float) -> int:
    """Start WORLD ranks of this script with torchrun's environment; wait, or kill on timeout."""
    port = free_port()
    env_base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                    WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1",
                    PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        for rank in range(WORLD):
            out, err = Path(tmp, f"{rank}.out"), Path(tmp, f"{rank}.err")
            logs.append((out, err))
            env = dict(env_base, RANK=str(rank), LOCAL_RANK=str(rank))
            with out.open("wb") as fo, err.open("wb") as fe:
                procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv],
                                              env=env, stdout=fo, stderr=fe))
        codes, timed_out = wait_for_ranks(procs, timeout, grace=20)
        sys.stdout.write(logs[0][0].read_text())
        failed = [r for r, c in enumerate(codes) if c != 0]
        if timed_out:
            print(f"TIMEOUT after {timeout:.0f} s: ranks killed", file=sys.stderr)
        for rank in range(WORLD):
            err_text = logs[rank][1].read_text()
            if (rank in failed or timed_out) and err_text.strip():
                status = "killed" if codes[rank] < 0 else f"exit code {codes[rank]}"
                print(f"---- rank {rank} ({status}) stderr ----", file=sys.stderr)
                print(err_text[-8000:], file=sys.stderr)
        return 1 if failed or timed_out else 0


def known_examples(paths: list[str]) -> list[str]:
    """The names ``--only`` accepts: the examples, and the modules of the ``--path`` dirs."""
    sys.path.insert(0, str(HERE))
    import _harness

    names: list[str] = list(_harness.EXAMPLES)
    for d in paths:
        for f in sorted(Path(d).glob("*.py")):
            if not f.stem.startswith("_") and f.stem not in names:
                names.append(f.stem)
    return names


def unknown_examples(args: argparse.Namespace) -> str | None:
    """The error for ``--only`` names that are no example (None: all known), checked before
    any rank starts: each rank would otherwise fail on the import with a traceback."""
    if not args.only:
        return None
    known = known_examples(args.path)
    unknown = [n for n in args.only if n not in known]
    if not unknown:
        return None
    return (f"run_all.py: no example named {', '.join(unknown)}; --only takes one of: "
            f"{', '.join(known)}" + ("" if args.path else " (or a module of a --path DIR)"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    error = unknown_examples(args)
    if error is not None:
        if os.environ.get("RANK", "0") == "0":  # under torchrun: said once, by rank 0
            print(error, file=sys.stderr)
        return 2
    if "RANK" in os.environ:  # under torchrun, or one of the ranks launch() started
        return worker(args)
    return launch(argv, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
