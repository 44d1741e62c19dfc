"""Deterministic counters of the typed collectives vs the raw calls: page faults per call.

    python bench/collective_faults.py                 # every op, 1 MB and 16 MB
    python bench/collective_faults.py --ops all_to_all --sizes 16MB --calls 40

Two gloo ranks on 127.0.0.1 run each variant (the ones bench/runtime_overhead.py
compares) ``calls`` times in a row and report, per call and summed over both ranks,
the process's minor page faults (``ru_minflt``: every thread, gloo's too), and the
process's user and system CPU (``ru_utime``, ``ru_stime``) beside the calling
thread's CPU time.  Page faults are counted, not timed: they do not depend on the
load of a shared machine.  A large buffer (glibc: over the mmap threshold) that is
not reused from one call to the next costs one minor fault per 4 KB page touched,
taken by whichever thread first writes it (gloo's, for a collective's output).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "runtime", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "16MB": 1 << 24}
OPS = {"all_reduce": "all_reduce(P,R)", "all_gather": "all_gather(S(0),R)",
       "reduce_scatter": "reduce_scatter(P,S(0))", "all_to_all": "all_to_all(V,V)"}


def _counters() -> tuple[int, float, float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt, ru.ru_utime, ru.ru_stime, time.thread_time()


def _worker(rank: int, port: int, ops: list[str], sizes: list[str], calls: int,
            abba: bool, queue: Any) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        import runtime_overhead as rb
        import spmd

        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        spmd.set_mesh(mesh)
        group = mesh.get_group("tp")
        rows = []
        for label in sizes:
            x = torch.randn(SIZES[label] // 4)
            xg = x.clone().requires_grad_(True)
            cases = rb.collective_cases(x, xg, group, "tp")
            for op in ops:
                variants = cases[OPS[op]]
                for fn in variants.values():
                    for _ in range(3):  # warm-up: plans, calibration, the allocator's state
                        fn()
                dist.barrier()
                sums = {k: [0.0] * 4 for k in variants}
                if abba:  # the bench's order: each variant once per round, reversed every other
                    keys = list(variants)
                    for r in range(calls):
                        for k in (keys if r % 2 == 0 else keys[::-1]):
                            c0 = _counters()
                            variants[k]()
                            c1 = _counters()
                            sums[k] = [a + b - c for a, b, c in zip(sums[k], c1, c0)]
                else:  # each variant's calls in a row
                    for k, fn in variants.items():
                        c0 = _counters()
                        for _ in range(calls):
                            fn()
                        c1 = _counters()
                        sums[k] = [b - c for b, c in zip(c1, c0)]
                for k, (f, u, s, t) in sums.items():
                    rows.append((label, OPS[op], k, f / calls, u / calls * 1e6, s / calls * 1e6,
                                 t / calls * 1e6))
        spmd.set_mesh(None)
        queue.put((rank, rows))
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", nargs="+", choices=list(OPS), default=list(OPS))
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["1MB", "16MB"])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--abba", action="store_true",
                        help="interleave the variants as bench/runtime_overhead.py does (one call "
                             "each per round, ABBA), --calls rounds; default: each variant's calls "
                             "in a row")
    args = parser.parse_args()
    import runtime_overhead as rb  # the bench folder is on sys.path (above)

    results = rb.run_two_ranks(
        _worker, lambda port, queue: (args.ops, args.sizes, args.calls, args.abba, queue))
    print(f"torch {torch.__version__}, gloo, 2 ranks, {args.calls} calls per variant; per call, "
          "both ranks summed: minor page faults, process user / system CPU us, calling thread CPU us")
    print(f"{'size':>5}  {'op':<23} {'variant':<13} {'minflt':>8} {'user us':>9} {'sys us':>9} "
          f"{'thread us':>10}")
    for a, b in zip(results[0], results[1]):
        label, op, variant = a[:3]
        f, u, s, t = (a[i] + b[i] for i in range(3, 7))
        print(f"{label:>5}  {op:<23} {variant:<13} {f:8.1f} {u:9.0f} {s:9.0f} {t:10.0f}")


if __name__ == "__main__":
    main()
