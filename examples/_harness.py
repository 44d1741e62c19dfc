"""Run-equivalence of the examples: each sharded module against its unsharded reference.

Every example module provides::

    full_weights(seed) -> {name: tensor}      the unsharded weights, float64
    make_batch(seed) -> {name: tensor}        one batch (whole, as loaded)
    build(weights, mesh) -> nn.Module         this rank's shards, parameter names = weight names
    step(model, batch) -> loss                forward, backward, gradient finalisation
    reference(weights, batch) -> loss         the same network on one process, plain torch
    SHARDING = {name: {axis: dim}}            how a parameter is sharded (absent axis: whole)
    DATA_PARALLEL                             whether step() splits the batch over "dp" itself

On every rank of a ("dp", "tp") mesh, :func:`check_example` builds the model,
runs one step, gathers each sharded gradient over its axes (concatenating the
shards on their dim) and compares loss and gradients with the reference run on
the same batch.  Examples that ignore "dp" get a different batch on each dp
replica, so both replicas are checked.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
import traceback
import typing
from dataclasses import dataclass, field
from types import FunctionType, ModuleType
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

EXAMPLES = ("tp_mlp", "sequence_parallel", "tp_attention", "vocab_parallel", "dp_tp_train",
            "global_mlp", "global_row_parallel")
SEED = 1234
TOLERANCE = 1e-10


@dataclass
class Result:
    name: str
    loss_diff: float = float("nan")
    grad_diff: float = float("nan")
    params: int = 0
    loss: float = float("nan")
    seconds: float = 0.0
    worst: str = ""  # the parameter with the largest gradient difference on this rank
    errors: list[str] = field(default_factory=list)
    # the same step under ``spmd.typecheck()`` (the runtime check mode): the errors it raised
    check_errors: list[str] = field(default_factory=list)
    # whether that step ran: "ran", "skipped" (run_all(typecheck=False), run_all.py's
    # --no-typecheck) or "not run" (the example failed first: nothing to check)
    check_status: str = "not run"

    @property
    def passed(self) -> bool:
        return (not self.errors and self.loss_diff <= TOLERANCE and self.grad_diff <= TOLERANCE
                and self.params > 0)


def gather_full(t: torch.Tensor, sharding: dict[str, int], mesh: DeviceMesh) -> torch.Tensor:
    """The whole tensor from its shards: all-gather over each sharding axis, concat on its dim."""
    for axis, dim in sharding.items():
        group = mesh.get_group(axis)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, t.contiguous(), group=group)
        t = torch.cat(parts, dim=dim)
    return t


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        raise ValueError(f"shape {tuple(a.shape)} != reference {tuple(b.shape)}")
    d = float((a.detach() - b.detach()).abs().max())
    return float("inf") if d != d else d  # a NaN is a failure, never a small difference


def _all_ok(ok: bool) -> bool:
    """Whether every rank is ok: the ranks agree before collectives that must pair up."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag[0])


def _fail(result: Result, error: str) -> None:
    """Record an error and print it now: a later collective may not return."""
    result.errors.append(error)
    rank = dist.get_rank() if dist.is_initialized() else 0
    print(f"[rank {rank}] {result.name}: {error}", file=sys.stderr, flush=True)


def check_example(name: str, mesh: DeviceMesh) -> Result:
    """Run one example on this rank; the result holds this rank's differences."""
    result = Result(name)
    start = time.perf_counter()
    mod: ModuleType | None = None
    params: dict[str, torch.nn.Parameter] = {}
    ref_w: dict[str, torch.Tensor] = {}
    try:
        mod = importlib.import_module(name)
        weights: dict[str, torch.Tensor] = mod.full_weights(SEED)
        dp_rank = mesh.get_local_rank("dp")
        batch_seed = SEED + 1 if mod.DATA_PARALLEL else SEED + 1 + 100 * (dp_rank + 1)
        batch: dict[str, torch.Tensor] = mod.make_batch(batch_seed)

        model: torch.nn.Module = mod.build(weights, mesh)
        loss = mod.step(model, batch)

        ref_w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
        ref_loss = mod.reference(ref_w, batch)
        ref_loss.backward()

        result.loss = float(loss)
        result.loss_diff = _max_diff(loss.reshape(()), ref_loss.reshape(()))
        params = dict(model.named_parameters())
        if set(params) != set(weights):
            _fail(result, f"parameters {sorted(params)} != weights {sorted(weights)}")
        result.params = len(params)
    except Exception:  # reported, and the other examples still run
        _fail(result, traceback.format_exc())
    if _all_ok(not result.errors):
        try:
            assert mod is not None  # no error: the example was imported and run
            sharding: dict[str, dict[str, int]] = mod.SHARDING
            grad_diff = -1.0
            for pname in sorted(params):  # the same order on every rank: the gathers pair up
                p = params[pname]
                grad = p.grad
                if grad is None:
                    _fail(result, f"{pname}: no gradient")
                    grad = torch.full_like(p, float("nan"))
                full = gather_full(grad.detach(), sharding[pname], mesh)
                ref_grad = ref_w[pname].grad
                assert ref_grad is not None
                diff = _max_diff(full, ref_grad)
                if diff > grad_diff:
                    grad_diff, result.worst = diff, pname
            result.grad_diff = grad_diff
        except Exception:
            _fail(result, traceback.format_exc())
    result.seconds = time.perf_counter() - start
    return result


def _is_spmd_annotation(ann: Any) -> bool:
    # the runtime's private module (not in the typed stubs): looked up at run time
    spmd_types = importlib.import_module("spmd._types")
    return spmd_types.spmd_type_of_annotation(ann) is not None


def _has_spmd_annotations(fn: Any) -> bool:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return False
    return any(_is_spmd_annotation(a) or any(_is_spmd_annotation(x) for x in typing.get_args(a))
               for a in hints.values())


def _checked(fn: Any) -> Any:
    """``spmd.checked(fn)`` (runtime check mode: declare the annotated arguments and result)."""
    import spmd

    return getattr(spmd, "checked")(fn)  # looked up: not in the stubs (runtime-only helper)


def _declare_parameters(model: torch.nn.Module) -> None:
    """Give every parameter the type its class annotates (``w1: Tensor[S[0, "tp"]]``), and
    check every annotated ``forward``'s arguments and result."""
    import spmd

    spmd.declare_parameters(model)
    for sub in model.modules():
        if _has_spmd_annotations(sub.forward):
            setattr(sub, "forward", _checked(sub.forward))


class _CheckedFunctions:
    """Wrap the example module's annotated functions in ``spmd.checked`` while in use."""

    def __init__(self, mod: ModuleType) -> None:
        self.mod = mod
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        for fname, fn in list(vars(self.mod).items()):
            if (isinstance(fn, FunctionType) and fn.__module__ == self.mod.__name__
                    and fname not in ("build", "step", "reference") and _has_spmd_annotations(fn)
                    and not hasattr(fn, "__spmd_local_map__")):  # local_map checks its boundary
                self.saved[fname] = fn
                setattr(self.mod, fname, _checked(fn))

    def __exit__(self, *exc: object) -> None:
        for fname, fn in self.saved.items():
            setattr(self.mod, fname, fn)


def check_types(name: str, mesh: DeviceMesh) -> list[str]:
    """One more step of the example under ``spmd.typecheck()``, its parameters and annotated
    functions declared with their annotations; the errors that run raised.

    The check mode's ``SpmdTypeError`` is deliberately not a TypeError (see
    ``spmd_mypy.engine.errors``), and an example may fail under the check mode in other
    ways: every exception is this example's check failure, ``"code: message"`` (the
    error's code, else the exception's class), and the other examples still run."""
    import spmd

    try:
        mod = importlib.import_module(name)
        weights: dict[str, torch.Tensor] = mod.full_weights(SEED)
        dp_rank = mesh.get_local_rank("dp")
        batch = mod.make_batch(SEED + 1 if mod.DATA_PARALLEL else SEED + 1 + 100 * (dp_rank + 1))
        model: torch.nn.Module = mod.build(weights, mesh)
        with spmd.typecheck(), _CheckedFunctions(mod):
            _declare_parameters(model)
            mod.step(model, batch)
    except Exception as e:  # noqa: BLE001 - reported as this example's check failure
        code = getattr(e, "code", None) or type(e).__name__
        return [f"{code}: {e}\n{traceback.format_exc(limit=-4)}"]
    return []


def combine(result: Result) -> Result:
    """The worst result over all ranks (max of the differences; errors stay per rank)."""
    worst = torch.tensor(
        [_nan_to_inf(result.loss_diff), _nan_to_inf(result.grad_diff), float(bool(result.errors)),
         result.seconds, float(bool(result.check_errors))],
        dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    params = torch.tensor([result.params], dtype=torch.int64)
    dist.all_reduce(params, op=dist.ReduceOp.MIN)
    out = Result(result.name, float(worst[0]), float(worst[1]), int(params[0]), result.loss,
                 float(worst[3]), result.worst, list(result.errors), list(result.check_errors),
                 result.check_status)
    if worst[2] > 0 and not out.errors:
        out.errors.append("failed on another rank (see that rank's output)")
    if worst[4] > 0 and not out.check_errors:
        out.check_errors.append("on another rank: the check mode run failed there (see that "
                                "rank's output)")
    return out


def _nan_to_inf(x: float) -> float:
    return float("inf") if x != x else x


def run_all(mesh: DeviceMesh, names: tuple[str, ...] = EXAMPLES, *,
            typecheck: bool = True) -> list[Result]:
    """Every example on this rank, each combined over all ranks; with ``typecheck`` each is run
    once more under the runtime check mode."""
    results = []
    for name in names:
        result = check_example(name, mesh)
        if not typecheck:
            result.check_status = "skipped"
        elif not result.errors:
            result.check_status = "ran"
            result.check_errors = check_types(name, mesh)
            for err in result.check_errors:
                print(f"[rank {dist.get_rank()}] {name} (spmd.typecheck): {err}", file=sys.stderr,
                      flush=True)
        results.append(combine(result))
    return results


def format_table(results: list[Result]) -> str:
    lines = [f"{'example':<20} {'loss':>12} {'loss diff':>10} {'grad diff':>10} {'params':>6} "
             f"{'s':>5}  {'typecheck':<22} result"]
    for r in results:
        if r.check_errors:
            check = r.check_errors[0].split(":")[0]
        else:  # "ok" only for a check-mode run that raised nothing
            check = "ok" if r.check_status == "ran" else r.check_status
        lines.append(f"{r.name:<20} {r.loss:>12.6f} {r.loss_diff:>10.1e} {r.grad_diff:>10.1e} "
                     f"{r.params:>6} {r.seconds:>5.2f}  {check:<22} {'PASS' if r.passed else 'FAIL'}"
                     + ("" if r.passed or not r.worst else f" (worst on rank 0: {r.worst})"))
    lines.append(f"tolerance {TOLERANCE:.0e} (float64); loss diff and grad diff are the max abs "
                 f"difference to the unsharded reference over all ranks")
    return "\n".join(lines)


def as_json(results: list[Result]) -> list[dict[str, Any]]:
    return [dict(name=r.name, loss=r.loss, loss_diff=r.loss_diff, grad_diff=r.grad_diff,
                 params=r.params, seconds=r.seconds, worst=r.worst, passed=r.passed, errors=r.errors,
                check_errors=r.check_errors, check_status=r.check_status)
            for r in results]
