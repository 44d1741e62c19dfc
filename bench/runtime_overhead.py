"""What the typed runtime costs over raw torch.distributed, measured side by side.

    python bench/runtime_overhead.py            # ~2 minutes on 2 cores
    python bench/runtime_overhead.py --quick    # fewer rounds, for a smoke run

Spawns 2 gloo ranks on 127.0.0.1 and measures, interleaving the variants in every
round (shuffled the same way on both ranks) and taking medians over rounds:

1. each typed collective against the raw call it wraps, at 1 KB, 1 MB and 16 MB
   (float32): the raw side is the out-of-place form a differentiable op needs
   (``clone`` + ``dist.all_reduce``, ``new_empty`` + ``dist.all_gather_single``, ...).
   On a tensor that does not require grad the typed op is compared with the raw
   call; on one that does (the typed op records its autograd Function) with the raw
   call inside a hand-rolled autograd Function, as Megatron writes them (any
   Function around a gloo collective costs more than the bare call, typed or not).
   "extra us" is the median of the per-round paired differences (typed - baseline);
   "extra CPU us" the same on the calling thread's CPU time;
2. one training step of a Megatron-style MLP block (column-parallel linear, GELU,
   row-parallel linear, with the data-parallel gradient all-reduce done by the
   parameters' ``reinterpret(I,R)`` on "dp") written with the typed API, against
   the same step written with hand-rolled Megatron autograd Functions; on a 1x2
   (dp x tp) mesh and on a 2x1 mesh.

Then, in this process, the pure per-call overhead without any communication, on
torch's ``fake`` backend (collectives return at once), where the noise of a shared
machine does not hide a few microseconds.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "runtime"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "16MB": 1 << 24}


# ------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------

class Samples:
    """Per-call microseconds of each case, one sample per round: wall clock and the CPU
    time of the calling thread (what the Python wrapper, autograd and the local copies
    cost; not the wait for the other rank nor the time other processes had the core)."""

    def __init__(self, keys: list[str]) -> None:
        self.wall: dict[str, list[float]] = {k: [] for k in keys}
        self.cpu: dict[str, list[float]] = {k: [] for k in keys}

    def median(self, key: str, cpu: bool = False) -> float:
        return statistics.median((self.cpu if cpu else self.wall)[key])

    def extra(self, typed: str, raw: str, cpu: bool = False) -> float:
        """The median of the per-round paired differences typed - raw."""
        d = self.cpu if cpu else self.wall
        return statistics.median(t - r for t, r in zip(d[typed], d[raw]))


def interleaved(cases: dict[str, Callable[[], Any]], rounds: int, calls: int, seed: int
                ) -> Samples:
    """Time every case in every round, the order shuffled per round.

    Both ranks use the same seed, so they run the same sequence of collectives.
    """
    rng = random.Random(seed)
    keys = list(cases)
    out = Samples(keys)
    for fn in cases.values():  # warm-up
        fn()
    for _ in range(rounds):
        rng.shuffle(keys)
        for k in keys:
            fn = cases[k]
            c0, t0 = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                fn()
            t1, c1 = time.perf_counter(), time.thread_time()
            out.wall[k].append((t1 - t0) / calls * 1e6)
            out.cpu[k].append((c1 - c0) / calls * 1e6)
    return out


# ------------------------------------------------------------------------------------
# 1. Collectives
# ------------------------------------------------------------------------------------

class RawFunction(torch.autograd.Function):
    """A hand-rolled differentiable collective, Megatron style: the raw call in forward.

    (The backward is not timed.)  Any autograd Function around a collective costs more
    than the bare call when its input requires grad, so this is the baseline of the
    typed ops on such inputs."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, raw: Callable[[torch.Tensor], torch.Tensor]
                ) -> torch.Tensor:
        return raw(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def collective_cases(x: torch.Tensor, xg: torch.Tensor, group: Any, axis: str
                     ) -> dict[str, dict[str, Callable[[], Any]]]:
    import spmd
    from spmd import P, R, S, V

    n = dist.get_world_size(group)

    def raw_all_reduce(t: torch.Tensor = x) -> torch.Tensor:
        y = t.clone()
        dist.all_reduce(y, group=group)
        return y

    def raw_all_gather(t: torch.Tensor = x) -> torch.Tensor:
        out = t.new_empty(n * t.numel())
        dist.all_gather_single(out, t, group=group)
        return out

    def raw_reduce_scatter(t: torch.Tensor = x) -> torch.Tensor:
        out = t.new_empty(t.numel() // n)
        dist.reduce_scatter_single(out, t, group=group)
        return out

    def raw_all_to_all(t: torch.Tensor = x) -> torch.Tensor:
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=group)
        return out

    def megatron(raw: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], torch.Tensor]:
        return lambda: RawFunction.apply(xg, raw)

    return {
        "all_reduce(P,R)": {
            "raw": raw_all_reduce,
            "raw Function": megatron(raw_all_reduce),
            "typed": lambda: spmd.all_reduce(x, axis, src=P, dst=R),
            "typed+grad": lambda: spmd.all_reduce(xg, axis, src=P, dst=R),
        },
        "all_gather(S(0),R)": {
            "raw": raw_all_gather,
            "raw Function": megatron(raw_all_gather),
            "typed": lambda: spmd.all_gather(x, axis, src=S(0), dst=R),
            "typed+grad": lambda: spmd.all_gather(xg, axis, src=S(0), dst=R),
        },
        "reduce_scatter(P,S(0))": {
            "raw": raw_reduce_scatter,
            "raw Function": megatron(raw_reduce_scatter),
            "typed": lambda: spmd.reduce_scatter(x, axis, src=P, dst=S(0)),
            "typed+grad": lambda: spmd.reduce_scatter(xg, axis, src=P, dst=S(0)),
        },
        "all_to_all(V,V)": {
            "raw": raw_all_to_all,
            "raw Function": megatron(raw_all_to_all),
            "typed": lambda: spmd.all_to_all(x, axis, src=V, dst=V),
            "typed+grad": lambda: spmd.all_to_all(xg, axis, src=V, dst=V),
        },
    }


def bench_collectives(quick: bool) -> list[tuple]:
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    spmd.set_mesh(mesh)
    group = mesh.get_group("tp")
    plan = {"1KB": (60, 40), "1MB": (40, 6), "16MB": (10, 1)}
    rows = []
    for label, nbytes in SIZES.items():
        rounds, calls = plan[label]
        if quick:
            rounds = max(3, rounds // 4)
        x = torch.randn(nbytes // 4, dtype=torch.float32)
        xg = x.clone().requires_grad_(True)
        for op, cases in collective_cases(x, xg, group, "tp").items():
            s = interleaved(cases, rounds, calls, seed=len(rows))
            for variant, base in (("typed", "raw"), ("typed+grad", "raw Function")):
                rows.append((label, op, f"{variant} vs {base}", s.median(base), s.median(variant),
                             s.extra(variant, base), s.extra(variant, base, cpu=True)))
    spmd.set_mesh(None)
    return rows


# ------------------------------------------------------------------------------------
# 2. A Megatron-style MLP training step
# ------------------------------------------------------------------------------------

class CopyToRegion(torch.autograd.Function):
    """Megatron's copy_to_..._region: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if dist.get_world_size(ctx.group) > 1:
            grad = grad.contiguous()
            dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromRegion(torch.autograd.Function):
    """Megatron's reduce_from_..._region: all-reduce forward (in place), identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        if dist.get_world_size(group) > 1:
            dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def mlp_params(tp: int, tp_rank: int, hidden: int, ffn: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w1 = torch.randn(ffn, hidden, generator=gen) / hidden ** 0.5
    b1 = torch.zeros(ffn)
    w2 = torch.randn(hidden, ffn, generator=gen) / ffn ** 0.5
    b2 = torch.zeros(hidden)
    rows = slice(tp_rank * ffn // tp, (tp_rank + 1) * ffn // tp)
    return [t.clone().requires_grad_(True) for t in (w1[rows], b1[rows], w2[:, rows], b2)]


def typed_step(x: torch.Tensor, target: torch.Tensor, params: list[torch.Tensor],
               lr: float) -> torch.Tensor:
    import spmd
    from spmd import I, P, R

    # parameters: I on dp (one logical value); used as R, the backward all-reduces on dp
    w1, b1, w2, b2 = (spmd.reinterpret(p, "dp", src=I, dst=R) for p in params)
    h = spmd.reinterpret(x, "tp", src=I, dst=R)                 # column-parallel input
    a = F.gelu(F.linear(h, w1, b1))                             # V on tp
    y = spmd.linear(a, w2, out_partial_axes="tp")               # row-parallel: P on tp
    y = spmd.all_reduce(y, "tp", src=P, dst=I) + b2
    loss = F.mse_loss(y, target)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss.detach()


def megatron_step(x: torch.Tensor, target: torch.Tensor, params: list[torch.Tensor],
                  lr: float, dp_group: Any, tp_group: Any) -> torch.Tensor:
    w1, b1, w2, b2 = (CopyToRegion.apply(p, dp_group) for p in params)
    h = CopyToRegion.apply(x, tp_group)
    a = F.gelu(F.linear(h, w1, b1))
    y = ReduceFromRegion.apply(F.linear(a, w2), tp_group) + b2
    loss = F.mse_loss(y, target)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss.detach()


def bench_mlp(shape: tuple[int, int], quick: bool) -> tuple[float, ...]:
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    dp_group, tp_group = mesh.get_group("dp"), mesh.get_group("tp")
    tp, tp_rank = mesh.size(1), mesh.get_local_rank("tp")
    tokens, hidden, ffn = 256, 512, 2048
    gen = torch.Generator().manual_seed(1 + mesh.get_local_rank("dp"))
    x = torch.randn(tokens, hidden, generator=gen)
    target = torch.randn(tokens, hidden, generator=gen)
    p_typed = mlp_params(tp, tp_rank, hidden, ffn)
    p_mega = mlp_params(tp, tp_rank, hidden, ffn)
    with spmd.set_mesh(mesh):
        # the two steps compute the same thing
        l1 = typed_step(x, target, p_typed, 1e-3)
        l2 = megatron_step(x, target, p_mega, 1e-3, dp_group, tp_group)
        torch.testing.assert_close(l1, l2)
        for a, b in zip(p_typed, p_mega):
            torch.testing.assert_close(a, b)
        rounds = 6 if quick else 40
        s = interleaved({
            "typed": lambda: typed_step(x, target, p_typed, 1e-3),
            "megatron": lambda: megatron_step(x, target, p_mega, 1e-3, dp_group, tp_group),
        }, rounds, 3, seed=7)
    return (s.median("megatron"), s.median("typed"), s.extra("typed", "megatron"),
            s.median("megatron", cpu=True), s.median("typed", cpu=True))


# ------------------------------------------------------------------------------------
# 3. Pure overhead, fake backend, in this process
# ------------------------------------------------------------------------------------

def bench_fake(quick: bool) -> list[tuple]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import spmd
    from spmd import I, R

    dist.init_process_group(backend="fake", rank=0, world_size=2, store=FakeStore())
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    spmd.set_mesh(mesh)
    x = torch.randn(256)
    xg = x.clone().requires_grad_(True)
    rows = []
    cases = collective_cases(x, xg, mesh.get_group("tp"), "tp")
    cases["reinterpret(I,R) vs view_as"] = {
        "raw": lambda: x.view_as(x),
        "raw Function": lambda: RawFunction.apply(xg, lambda t: t.view_as(t)),
        "typed": lambda: spmd.reinterpret(x, "tp", src=I, dst=R),
        "typed+grad": lambda: spmd.reinterpret(xg, "tp", src=I, dst=R)}
    for op, variants in cases.items():
        s = interleaved(variants, 10 if quick else 40, 200, seed=len(rows))
        for variant, base in (("typed", "raw"), ("typed+grad", "raw"),
                              ("typed+grad", "raw Function")):  # CPU time: no waiting here
            rows.append(("fake", op, f"{variant} vs {base}", s.median(base, cpu=True),
                         s.median(variant, cpu=True), s.extra(variant, base, cpu=True), None))
    dist.destroy_process_group()
    return rows


# ------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------

def _worker(rank: int, world: int, port: int, quick: bool, queue: Any) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        out: dict[str, Any] = {"collectives": bench_collectives(quick)}
        out["mlp"] = {shape: bench_mlp(shape, quick) for shape in ((1, 2), (2, 1))}
        if rank == 0:
            queue.put(out)
    finally:
        dist.destroy_process_group()


def _print_rows(rows: list[tuple], title: str) -> None:
    print(f"\n{title}")
    print(f"{'size':>5}  {'op':<28} {'typed vs baseline':<27} {'base us':>9} {'typed us':>9} "
          f"{'ratio':>6} {'extra us':>9} {'extra CPU us':>12}")
    for size, op, variant, raw, typed, extra, extra_cpu in rows:
        cpu = f"{extra_cpu:12.1f}" if extra_cpu is not None else f"{'':12}"
        print(f"{size:>5}  {op:<28} {variant:<27} {raw:9.1f} {typed:9.1f} "
              f"{typed / raw:6.3f} {extra:9.1f} {cpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    start = time.time()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, args.quick, queue)) for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.time() + 600
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.time()))
    if any(p.exitcode != 0 for p in procs):
        for p in procs:
            if p.is_alive():
                p.kill()
        sys.exit("a benchmark rank failed or timed out")
    out = queue.get()
    print(f"torch {torch.__version__}, gloo, 2 ranks on 127.0.0.1, float32, medians of "
          f"interleaved rounds; ratio = typed / raw")
    _print_rows(out["collectives"], "1. typed collective vs the raw torch.distributed call")
    print("\n2. MLP training step (tokens 256, hidden 512, ffn 2048), typed vs hand-rolled "
          "Megatron Functions")
    for shape, (mega, typed, extra, mega_cpu, typed_cpu) in out["mlp"].items():
        print(f"   mesh dp x tp = {shape[0]} x {shape[1]}: wall: megatron {mega / 1e3:7.2f} ms, "
              f"typed {typed / 1e3:7.2f} ms, ratio {typed / mega:.3f} (paired extra "
              f"{extra:+.0f} us); CPU: ratio {typed_cpu / mega_cpu:.3f} "
              f"({mega_cpu / 1e3:.2f} vs {typed_cpu / 1e3:.2f} ms)")
    torch.set_num_threads(1)
    _print_rows(bench_fake(args.quick),
                "3. pure per-call overhead, fake backend (no communication), 1 KB, this "
                "process, CPU time")
    print(f"\ntotal {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
