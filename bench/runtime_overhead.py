"""What the typed runtime costs over raw torch.distributed, measured side by side.

    python bench/runtime_overhead.py            # ~1 minute on 2 cores
    python bench/runtime_overhead.py --quick    # fewer rounds
    python bench/runtime_overhead.py --smoke    # 2 rounds of few calls: does every variant run?
    python bench/runtime_overhead.py --scale 4  # 4x the rounds: narrower intervals
    python bench/runtime_overhead.py --only all_to_all   # part 1 and 3 for these ops only

Spawns 2 gloo ranks on 127.0.0.1.  Method (the same for every comparison):

- Variants are interleaved: every round runs each variant ``calls`` times, in the
  same order on both ranks: a fresh (seeded) random order on even rounds and the same
  order reversed on the odd round after it (ABBA), so slow drifts of the machine's load
  hit both sides of a pair alike, and no variant always follows the same neighbour (a
  fixed order favoured the variants at its ends, which follow themselves across the
  round boundary: a variant's first call then runs with its own code and data still in
  the caches; measured at 1 MB, session 30: ~5-10 us of calling-thread time).
- An A/A control in part 1: "raw again", the raw call under a second name, timed like
  the others and compared with "raw": what the method reads when nothing differs.
- Per round and pair, the ratio typed / baseline of the per-call time; the figure is
  the median of the per-round ratios with a 95% bootstrap confidence interval of
  that median (2000 resamples of the rounds).  "extra us" is the same on the
  per-round differences typed - baseline.
- Three estimates: wall (rank 0's perf_counter); CPU, the process CPU time of BOTH
  ranks summed (every thread, gloo's too: the work done, not the waiting; far less
  disturbed by other processes taking the cores); and "model", 1 + the calling
  thread's extra CPU time per call (mean of the two ranks) / the baseline's fastest
  round of wall time: both sides issue the same communication on the same buffers,
  so what the typed side adds is work on the calling thread (Python, autograd,
  copies), and the fastest round is the closest this run gets to an idle machine.
  The model is an estimate under that assumption, not a measurement of wall time.
- A counter beside the times: minor page faults per call (``ru_minflt``, both ranks
  summed, every thread).  A large buffer that the allocator hands out fresh instead of
  reusing a freed one costs one fault per 4 KB page, taken by whichever thread first
  writes it (gloo's, for a collective's output): work a time on the calling thread
  misses.  Counted, not timed, so the load of the machine does not blur it.
- Verdict per target: "met" when the whole interval is within the target, "MISSED"
  when the whole interval is beyond it, "undecidable" when the interval straddles it
  (the noise measured in this run is larger than the distance to the target).

Parts:

1. each typed collective against the raw call it wraps, at 1 KB, 1 MB and 16 MB
   (float32).  The raw side is the out-of-place form a differentiable op needs
   (``clone`` + ``dist.all_reduce``, ``new_empty`` + ``dist.all_gather_single``, ...);
   on a tensor that requires grad the typed op is compared with the raw call inside
   a hand-rolled autograd Function, as Megatron writes them.  Targets: ratio <= 1.03
   at 1 MB and 16 MB, <= 15 us extra per call at 1 KB.  The "raw again vs raw" rows
   (the A/A control, also in part 3) hold the same targets: a verdict other than met
   there is the method's own error at this load.
2. one training step of a Megatron-style MLP block (column-parallel linear, GELU,
   row-parallel linear, the data-parallel gradient all-reduce done by the parameters'
   ``reinterpret(I,R)`` on "dp"), on a 1x2 and a 2x1 (dp x tp) mesh, six ways: the
   typed API (the row-parallel partial sum passed straight to ``all_reduce``, as the
   Megatron step passes it to its Function: nothing else holds it, so the all-reduce
   runs in place; a name bound to it would make it a copy); hand-rolled Megatron autograd Functions (target: typed <= 1.02x); the
   typed API with the backward all-reduce copying the gradient (before the in-place
   change);
   the typed step under ``spmd.typecheck()`` (check mode vs plain: reported); the
   same step written with spmd-types 0.3.1, plain and under its ``typecheck()``
   (the peer's check-mode figure).  The check modes are entered once around each
   block of ``calls`` steps, as around a training loop.
3. in this process, the pure per-call overhead without any communication, on torch's
   ``fake`` backend (collectives return at once), CPU time: where a few microseconds
   are not hidden by the noise of a shared machine (target <= 15 us).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import socket
import statistics
import sys
import time
import types
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
RATIO_TARGET = 1.03     # typed collective / raw call, at 1 MB and up
EXTRA_US_TARGET = 15.0  # typed collective - raw call, per call
STEP_TARGET = 1.02      # typed MLP step / hand-rolled Megatron step


# ------------------------------------------------------------------------------------
# Timing and statistics
# ------------------------------------------------------------------------------------

class Samples:
    """Per-call microseconds of each variant, one sample per round: wall clock, the
    process CPU time (every thread of this rank, gloo's too) and the calling thread's
    CPU time (where the wrapper's own work happens); ``merge`` sums the two ranks' CPU
    times (thread: averages them, a per-rank figure); ``faults``: minor page faults per
    call of the process (summed by ``merge`` too)."""

    def __init__(self, keys: list[str]) -> None:
        self.wall: dict[str, list[float]] = {k: [] for k in keys}
        self.cpu: dict[str, list[float]] = {k: [] for k in keys}
        self.thread: dict[str, list[float]] = {k: [] for k in keys}
        self.faults: dict[str, list[float]] = {k: [] for k in keys}

    def merge(self, other: "Samples") -> "Samples":
        """Rank 0's wall clock, both ranks' CPU time summed, their thread time averaged."""
        out = Samples(list(self.wall))
        out.wall = self.wall
        out.cpu = {k: [a + b for a, b in zip(self.cpu[k], other.cpu[k])] for k in self.cpu}
        out.thread = {k: [(a + b) / 2 for a, b in zip(self.thread[k], other.thread[k])]
                      for k in self.thread}
        out.faults = {k: [a + b for a, b in zip(self.faults[k], other.faults[k])]
                      for k in self.faults}
        return out

    def as_dict(self) -> dict:
        return {"wall": self.wall, "cpu": self.cpu, "thread": self.thread, "faults": self.faults}


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def round_orders(keys: list[str], rounds: int, seed: int = 0) -> list[list[str]]:
    """The order of the variants in each round: a random permutation on even rounds
    (``random.Random(seed)``: the same on every rank), reversed on the odd round after it.

        round 0: C A B    round 1: B A C    round 2: A B C    round 3: C B A   ...

    Reversal pairs the rounds (ABBA: a drift in the load hits both sides of a pair
    alike); the fresh permutation gives every variant every neighbour."""
    rng = random.Random(seed)
    orders: list[list[str]] = []
    for r in range(rounds):
        if r % 2 == 0:
            order = list(keys)
            rng.shuffle(order)
            orders.append(order)
        else:
            orders.append(orders[-1][::-1])
    return orders


def interleaved(cases: dict[str, Callable[[], Any]], rounds: int, calls: int,
                scopes: dict[str, Callable[[], Any]] | None = None) -> Samples:
    """Time every variant in every round, in the orders of :func:`round_orders`.

    ``scopes[k]`` (optional) is a context manager factory entered around variant
    ``k``'s block of calls (a check mode).  Both ranks run the same sequence.
    """
    keys = list(cases)
    out = Samples(keys)
    scopes = scopes or {}
    for k, fn in cases.items():  # warm-up
        with scopes.get(k, contextlib.nullcontext)():
            fn()
    for order in round_orders(keys, rounds):
        for k in order:
            fn = cases[k]
            with scopes.get(k, contextlib.nullcontext)():
                f0 = _minor_faults()
                h0, c0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
                for _ in range(calls):
                    fn()
                t1, c1, h1 = time.perf_counter(), time.process_time(), time.thread_time()
                f1 = _minor_faults()
            out.wall[k].append((t1 - t0) / calls * 1e6)
            out.cpu[k].append((c1 - c0) / calls * 1e6)
            out.thread[k].append((h1 - h0) / calls * 1e6)
            out.faults[k].append((f1 - f0) / calls)
    return out


def median_ci(values: list[float], seed: int = 0, resamples: int = 2000) -> tuple[float, float, float]:
    """The median and a 95% percentile-bootstrap confidence interval of it."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    return statistics.median(values), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def ratios(d: dict[str, list[float]], a: str, b: str) -> list[float]:
    return [x / y for x, y in zip(d[a], d[b])]


def diffs(d: dict[str, list[float]], a: str, b: str) -> list[float]:
    return [x - y for x, y in zip(d[a], d[b])]


def verdict(ci: tuple[float, float, float], target: float) -> str:
    _, lo, hi = ci
    if hi <= target:
        return "met"
    if lo > target:
        return "MISSED"
    return "undecidable"


def fmt_ci(ci: tuple[float, float, float], spec: str = ".3f") -> str:
    m, lo, hi = ci
    return f"{m:{spec}} [{lo:{spec}}, {hi:{spec}}]"


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


def _again(raw: Callable[..., Any]) -> Callable[..., Any]:
    """The raw call under a second name (the same code, a new function): the A/A control."""
    return types.FunctionType(raw.__code__, raw.__globals__, raw.__name__ + "_again",
                              raw.__defaults__, raw.__closure__)


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
            "raw again": _again(raw_all_reduce),
            "raw Function": megatron(raw_all_reduce),
            "typed": lambda: spmd.all_reduce(x, axis, src=P, dst=R),
            "typed+grad": lambda: spmd.all_reduce(xg, axis, src=P, dst=R),
        },
        "all_gather(S(0),R)": {
            "raw": raw_all_gather,
            "raw again": _again(raw_all_gather),
            "raw Function": megatron(raw_all_gather),
            "typed": lambda: spmd.all_gather(x, axis, src=S(0), dst=R),
            "typed+grad": lambda: spmd.all_gather(xg, axis, src=S(0), dst=R),
        },
        "reduce_scatter(P,S(0))": {
            "raw": raw_reduce_scatter,
            "raw again": _again(raw_reduce_scatter),
            "raw Function": megatron(raw_reduce_scatter),
            "typed": lambda: spmd.reduce_scatter(x, axis, src=P, dst=S(0)),
            "typed+grad": lambda: spmd.reduce_scatter(xg, axis, src=P, dst=S(0)),
        },
        "all_to_all(V,V)": {
            "raw": raw_all_to_all,
            "raw again": _again(raw_all_to_all),
            "raw Function": megatron(raw_all_to_all),
            "typed": lambda: spmd.all_to_all(x, axis, src=V, dst=V),
            "typed+grad": lambda: spmd.all_to_all(xg, axis, src=V, dst=V),
        },
    }


# modes: "full"; "quick", fewer rounds; "smoke", two rounds of one call (does every variant
# run, does every table print: the figures mean nothing)
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret")  # for --only
_SCALE = 1  # --scale: the full mode's rounds in parts 1 and 2 multiplied (set in each rank)


def _selected(op: str, only: list[str] | None) -> bool:
    return only is None or op.split("(")[0] in only


def bench_collectives(mode: str, only: list[str] | None = None) -> list[tuple[str, str, dict]]:
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    spmd.set_mesh(mesh)
    group = mesh.get_group("tp")
    plan = {"1KB": (60, 20), "1MB": (60, 3), "16MB": (30, 1)}  # rounds, calls per round
    out = []
    for label, nbytes in SIZES.items():
        rounds, calls = plan[label]
        rounds *= _SCALE
        if mode == "quick":
            rounds = max(4, rounds // 6)
        elif mode == "smoke":
            rounds, calls = 2, 1
        x = torch.randn(nbytes // 4, dtype=torch.float32)
        xg = x.clone().requires_grad_(True)
        for op, cases in collective_cases(x, xg, group, "tp").items():
            if not _selected(op, only):
                continue
            s = interleaved(cases, rounds, calls)
            out.append((label, op, s.as_dict()))
    spmd.set_mesh(None)
    return out


# ------------------------------------------------------------------------------------
# 2. A Megatron-style MLP training step
# ------------------------------------------------------------------------------------

class CopyToRegion(torch.autograd.Function):
    """Megatron's copy_to_..._region: identity forward, all-reduce backward (in place)."""

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


def _sgd(params: list[torch.Tensor], lr: float) -> None:
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


_TYPES: dict[str, Any] = {}


def _types() -> dict[str, Any]:
    """The step's annotations, built once (as a module's annotations are)."""
    if not _TYPES:
        from spmd import I, Tensor, V
        _TYPES.update(sharded=Tensor[I["dp"], V["tp"]], bias=Tensor[I["dp"], I["tp"]],
                      data=Tensor[V["dp"], I["tp"]])
    return _TYPES


def typed_step(x: torch.Tensor, target: torch.Tensor, params: list[torch.Tensor],
               lr: float) -> torch.Tensor:
    import spmd
    from spmd import I, P, R, V

    # the types check mode tracks (a global read each outside the check mode)
    t = _types()
    for p, ty in zip(params, (t["sharded"], t["sharded"], t["sharded"], t["bias"])):
        spmd.declare(p, ty)
    spmd.declare(x, t["data"])
    spmd.declare(target, t["data"])
    # parameters: I on dp (one logical value); used as R, the backward all-reduces on dp
    w1, b1, w2, b2 = (spmd.reinterpret(p, "dp", src=I, dst=R) for p in params)
    h = spmd.reinterpret(x, "tp", src=I, dst=R)                 # column-parallel input
    a = F.gelu(F.linear(h, w1, b1))                             # V on tp
    # row-parallel: P on tp, summed; the partial sum passed straight on (as Megatron's step
    # does), so the all-reduce runs in place (a name holding it would make it a copy)
    y = spmd.all_reduce(spmd.linear(a, w2, out_partial_axes="tp"), "tp", src=P, dst=I) + b2
    # each dp rank's loss is one term of the sum the dp gradient all-reduce differentiates
    loss = spmd.reinterpret(F.mse_loss(y, target), "dp", src=V, dst=P)
    loss.backward()
    _sgd(params, lr)
    return loss.detach()


def megatron_step(x: torch.Tensor, target: torch.Tensor, params: list[torch.Tensor],
                  lr: float, dp_group: Any, tp_group: Any) -> torch.Tensor:
    w1, b1, w2, b2 = (CopyToRegion.apply(p, dp_group) for p in params)
    h = CopyToRegion.apply(x, tp_group)
    a = F.gelu(F.linear(h, w1, b1))
    y = ReduceFromRegion.apply(F.linear(a, w2), tp_group) + b2
    loss = F.mse_loss(y, target)
    loss.backward()
    _sgd(params, lr)
    return loss.detach()


def peer_step(x: torch.Tensor, target: torch.Tensor, params: list[torch.Tensor],
              lr: float) -> torch.Tensor:
    """The same step written with spmd-types 0.3.1 (the peer), under its current mesh."""
    import spmd_types as st

    for p in params[:3]:
        st.assert_type(p, {"dp": st.I, "tp": st.V})
    st.assert_type(params[3], {"dp": st.I, "tp": st.I})
    st.assert_type(x, {"dp": st.V, "tp": st.I})
    st.assert_type(target, {"dp": st.V, "tp": st.I})
    # spmd-types spells I -> R convert (its reinterpret(I,R) needs expert_mode)
    w1, b1, w2, b2 = (st.convert(p, "dp", src=st.I, dst=st.R) for p in params)
    h = st.convert(x, "tp", src=st.I, dst=st.R)
    a = F.gelu(F.linear(h, w1, b1))
    y = st.reinterpret(F.linear(a, w2), "tp", src=st.V, dst=st.P)
    y = st.all_reduce(y, "tp", src=st.P, dst=st.I) + b2
    loss = st.reinterpret(F.mse_loss(y, target), "dp", src=st.V, dst=st.P)
    loss.backward()
    with st.no_typecheck():  # spmd-types leaves .grad untyped: the update is not checked
        _sgd(params, lr)
    return loss.detach()


def _peer_available() -> bool:
    try:
        import spmd_types  # noqa: F401
        from spmd_types._checker import typecheck  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _copying_backward() -> Any:
    """The runtime as it was: the backward all-reduce copies every gradient."""
    from spmd import _collectives

    _collectives._signatures(_collectives._OWNED, torch.empty(0))  # calibrated first (cpu)
    saved = dict(_collectives._OWNED)
    _collectives._OWNED["cpu"] = frozenset()
    try:
        yield
    finally:
        _collectives._OWNED.clear()
        _collectives._OWNED.update(saved)


def bench_mlp(shape: tuple[int, int], mode: str) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    import spmd

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    dp_group, tp_group = mesh.get_group("dp"), mesh.get_group("tp")
    tp, tp_rank = mesh.size(1), mesh.get_local_rank("tp")
    tokens, hidden, ffn = 256, 512, 2048
    gen = torch.Generator().manual_seed(1 + mesh.get_local_rank("dp"))
    x = torch.randn(tokens, hidden, generator=gen)
    target = torch.randn(tokens, hidden, generator=gen)
    lr = 1e-3
    peer = _peer_available()
    names = (["megatron", "typed", "typed copying", "typed check"]
             + (["peer", "peer check"] if peer else []))
    params = {k: mlp_params(tp, tp_rank, hidden, ffn) for k in names}
    cases: dict[str, Callable[[], Any]] = {
        "megatron": lambda: megatron_step(x, target, params["megatron"], lr, dp_group, tp_group),
        "typed": lambda: typed_step(x, target, params["typed"], lr),
        "typed copying": lambda: typed_step(x, target, params["typed copying"], lr),
        "typed check": lambda: typed_step(x, target, params["typed check"], lr),
    }
    scopes: dict[str, Callable[[], Any]] = {"typed check": spmd.typecheck,
                                            "typed copying": _copying_backward}
    with contextlib.ExitStack() as stack:
        stack.enter_context(spmd.set_mesh(mesh))
        if peer:
            import spmd_types as st
            from spmd_types._checker import typecheck as peer_typecheck

            stack.enter_context(st.set_current_mesh(mesh))
            cases["peer"] = lambda: peer_step(x, target, params["peer"], lr)
            cases["peer check"] = lambda: peer_step(x, target, params["peer check"], lr)
            scopes["peer check"] = peer_typecheck
        # every way computes the same step (loss and updated parameters)
        losses = {}
        for k, fn in cases.items():
            with scopes.get(k, contextlib.nullcontext)():
                losses[k] = fn()
        for k in names[1:]:
            torch.testing.assert_close(losses[k], losses["megatron"])
            for a, b in zip(params[k], params["megatron"]):
                torch.testing.assert_close(a, b)
        rounds = {"full": 50 * _SCALE, "quick": 6, "smoke": 2}[mode]
        s = interleaved(cases, rounds, 2, scopes)
    return {**s.as_dict(), "peer": peer}


# ------------------------------------------------------------------------------------
# 3. Pure overhead, fake backend, in this process
# ------------------------------------------------------------------------------------

def bench_fake(mode: str, only: list[str] | None = None) -> list[tuple]:
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
    view_as = lambda: x.view_as(x)  # noqa: E731
    cases["reinterpret(I,R) vs view_as"] = {
        "raw": view_as,
        "raw again": _again(view_as),
        "raw Function": lambda: RawFunction.apply(xg, lambda t: t.view_as(t)),
        "typed": lambda: spmd.reinterpret(x, "tp", src=I, dst=R),
        "typed+grad": lambda: spmd.reinterpret(xg, "tp", src=I, dst=R)}
    rounds, calls = {"full": (40, 200), "quick": (10, 200), "smoke": (2, 20)}[mode]
    for op, variants in cases.items():
        if not _selected(op, only):
            continue
        s = interleaved(variants, rounds, calls)
        for variant, base in (("typed", "raw"), ("typed+grad", "raw"),
                              ("typed+grad", "raw Function"), ("raw again", "raw")):
            ci = median_ci(diffs(s.cpu, variant, base), seed=len(rows))
            rows.append((op, f"{variant} vs {base}", statistics.median(s.cpu[base]),
                         statistics.median(s.cpu[variant]), ci))
    spmd.set_mesh(None)
    dist.destroy_process_group()
    return rows


# ------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------

def _worker(rank: int, world: int, port: int, mode: str, only: list[str] | None,
            queue: Any, scale: int = 1) -> None:
    global _SCALE
    _SCALE = scale
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        out: dict[str, Any] = {"collectives": bench_collectives(mode, only)}
        if only is None:
            out["mlp"] = {shape: bench_mlp(shape, mode) for shape in ((1, 2), (2, 1))}
        queue.put((rank, out))
    finally:
        dist.destroy_process_group()


def _merge(a: dict, b: dict) -> Samples:
    s0, s1 = Samples(list(a["wall"])), Samples(list(b["wall"]))
    s0.wall, s0.cpu, s0.thread, s0.faults = a["wall"], a["cpu"], a["thread"], a["faults"]
    s1.wall, s1.cpu, s1.thread, s1.faults = b["wall"], b["cpu"], b["thread"], b["faults"]
    return s0.merge(s1)


def print_collectives(r0: list, r1: list) -> None:
    print("\n1. typed collective vs the raw torch.distributed call (targets: ratio <= "
          f"{RATIO_TARGET} at 1 MB and up; extra <= {EXTRA_US_TARGET:.0f} us per call)")
    print("   wall: rank 0's per-call time; CPU: both ranks' process CPU; model: 1 + the calling "
          "thread's extra CPU / the raw call's fastest round (wall)\n   (the two sides issue the same "
          "communication on the same buffers; what the typed op adds runs on the calling thread);\n"
          "   faults/call: minor page faults per call, both ranks, typed / baseline (mean of the rounds)")
    print(f"{'size':>5}  {'op':<23} {'typed vs baseline':<26} {'base us':>8} "
          f"{'wall ratio [95% CI]':>23} {'CPU ratio [95% CI]':>23} {'extra thread us [CI]':>21} "
          f"{'model ratio':>11} {'faults/call':>14}  verdict wall / CPU / model")
    for k, ((size, op, a), (_, _, b)) in enumerate(zip(r0, r1)):
        s = _merge(a, b)
        for variant, base in (("typed", "raw"), ("typed+grad", "raw Function"),
                              ("raw again", "raw")):
            wr = median_ci(ratios(s.wall, variant, base), seed=k)
            cr = median_ci(ratios(s.cpu, variant, base), seed=k)
            te = median_ci(diffs(s.thread, variant, base), seed=k)
            base_wall = statistics.median(s.wall[base])
            mr = tuple(1 + e / min(s.wall[base]) for e in te)
            if size == "1KB":  # the per-call target: the calling thread's extra work
                v = verdict(te, EXTRA_US_TARGET)
                verdicts = f"extra <= {EXTRA_US_TARGET:.0f} us: {v}"
            else:
                verdicts = " / ".join(verdict(x, RATIO_TARGET) for x in (wr, cr, mr))
            faults = f"{statistics.mean(s.faults[variant]):.0f} / {statistics.mean(s.faults[base]):.0f}"
            print(f"{size:>5}  {op:<23} {variant + ' vs ' + base:<26} {base_wall:8.0f} "
                  f"{fmt_ci(wr):>23} {fmt_ci(cr):>23} {fmt_ci(te, '.1f'):>21} {mr[0]:11.4f} "
                  f"{faults:>14}  {verdicts}")


def print_mlp(r0: dict, r1: dict) -> None:
    print(f"\n2. MLP training step (tokens 256, hidden 512, ffn 2048, float32), {len(next(iter(r0[(1, 2)]['wall'].values())))} "
          "rounds x 2 steps per variant")
    pairs = [("typed", "megatron", STEP_TARGET, "typed API vs hand-rolled Megatron"),
             ("typed", "typed copying", None, "typed vs typed with the copying backward"),
             ("typed check", "typed", None, "check mode vs plain (typed)"),
             ("peer", "megatron", None, "spmd-types 0.3.1 plain vs Megatron"),
             ("peer check", "peer", None, "spmd-types 0.3.1 typecheck() vs its plain")]
    for shape in ((1, 2), (2, 1)):
        s = _merge(r0[shape], r1[shape])
        print(f"   mesh dp x tp = {shape[0]} x {shape[1]}: per step (medians): " + ", ".join(
            f"{k} {statistics.median(s.wall[k]) / 1e3:.1f} ms wall / "
            f"{statistics.median(s.cpu[k]) / 1e3:.1f} ms CPU" for k in s.wall))
        for k, (a, b, target, label) in enumerate(pairs):
            if a not in s.wall or b not in s.wall:
                print(f"     {label}: spmd-types not installed")
                continue
            wr = median_ci(ratios(s.wall, a, b), seed=k)
            cr = median_ci(ratios(s.cpu, a, b), seed=k)
            mr = tuple(1 + e / min(s.wall[b]) for e in median_ci(diffs(s.thread, a, b), seed=k))
            v = (f"  target <= {target}: " + " / ".join(verdict(x, target) for x in (wr, cr, mr))
                 + " (wall / CPU / model)" if target else "")
            print(f"     {label:<42} wall {fmt_ci(wr)}   CPU {fmt_ci(cr)}   model {fmt_ci(mr)}{v}")


def run_two_ranks(worker: Callable[..., None], worker_args: Callable[[int, Any], tuple],
                  world_first: bool = False, timeout_s: float = 900) -> dict[int, Any]:
    """Spawn 2 gloo ranks on 127.0.0.1 and a free port: ``worker(rank, [2,] port, *args)``,
    each rank putting ``(rank, result)`` on the queue; {rank: result}.  Exits with a message
    when a rank fails or the ranks take longer than ``timeout_s`` (a hung collective)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=((r, 2) if world_first else (r,)) + (port,)
                         + worker_args(port, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.time() + timeout_s
    while len(results) < 2 and time.time() < deadline:
        if not queue.empty():
            rank, out = queue.get()
            results[rank] = out
        elif any(p.exitcode not in (None, 0) for p in procs):
            break
        else:
            time.sleep(0.2)
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    if len(results) < 2:
        sys.exit("a benchmark rank failed or timed out")
    return results



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--quick", action="store_true", help="fewer rounds")
    how.add_argument("--smoke", action="store_true",
                     help="two rounds of few calls: checks that every variant runs and every "
                          "table prints (the figures mean nothing)")
    parser.add_argument("--only", nargs="+", choices=OPS, metavar="OP",
                        help=f"only these collectives ({', '.join(OPS)}), in parts 1 and 3 (reinterpret: part 3 "
                             "only); part 2 (the MLP step) is skipped")
    parser.add_argument("--scale", type=int, default=1, metavar="N",
                        help="N times the rounds of parts 1 and 2 (full mode): narrower intervals, "
                             "where a verdict is undecidable at the default")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    start = time.time()
    load0 = os.getloadavg()
    results = run_two_ranks(_worker, lambda port, queue: (mode, args.only, queue, max(1, args.scale)),
                            world_first=True)
    print(f"torch {torch.__version__}, gloo, 2 ranks on 127.0.0.1, float32; interleaved ABBA "
          f"rounds, median of per-round ratios [95% bootstrap CI]; wall = rank 0, CPU = process "
          f"CPU time of both ranks; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}"
          + ("" if mode == "full" else f"; {mode} mode (fewer rounds)")
          + (f"; --scale {args.scale}: {args.scale}x the rounds" if mode == "full" and args.scale > 1 else ""))
    print_collectives(results[0]["collectives"], results[1]["collectives"])
    if "mlp" in results[0]:
        print_mlp(results[0]["mlp"], results[1]["mlp"])
    else:
        print("\n2. MLP training step: skipped (--only)")
    torch.set_num_threads(1)
    rows = bench_fake(mode, args.only)
    print("\n3. pure per-call overhead, fake backend (no communication), 1 KB, this process, "
          f"CPU time (target <= {EXTRA_US_TARGET:.0f} us)")
    print(f"   {'op':<28} {'typed vs baseline':<27} {'base us':>8} {'typed us':>9} "
          f"{'extra us [95% CI]':>22}  verdict")
    for op, variant, base, typed, ci in rows:
        print(f"   {op:<28} {variant:<27} {base:8.1f} {typed:9.1f} {fmt_ci(ci, '.1f'):>22}  "
              f"{verdict(ci, EXTRA_US_TARGET)}")
    load1 = os.getloadavg()
    print(f"\ntotal {time.time() - start:.0f} s; load average at end {load1[0]:.2f} {load1[1]:.2f} "
          f"{load1[2]:.2f}")


if __name__ == "__main__":
    main()
