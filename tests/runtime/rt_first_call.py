"""The first typed collective of a process, under the user's autograd contexts.

The runtime does some work once per process, on the first collective under autograd:
it calibrates which tensors nobody else holds (``_collectives._calibrate_device``, which
runs small autograd graphs of its own).  That work must not depend on, nor disturb, the
context of the call that triggers it.  Before the fix it ran inside that context: under
``checkpoint(use_reentrant=False)`` checkpoint's saved-tensor hooks packed the
calibration's tensors as the function's, and the recomputation (no calibration) saved
fewer ("A different number of tensors was saved during the original forward and
recomputation", 11 vs 6, only on the first call of a process); and under checkpoint or
autocast the calibration came out empty, so no later call reduced anything in place.

Every check here runs in fresh ranks (rt_world.FRESH_SUITES: the launcher forks two new
processes per check) and asserts that nothing was calibrated before it, so its first
collective really is the process's first.  Each ``ckpt`` check computes
``loss = (f(x, w) * c).sum()`` through ``checkpoint`` (non-reentrant or reentrant) as the
process's first collective, then the same without checkpoint, then with checkpoint again:
the three values and gradients must agree, and a later plain ``all_reduce`` of a
temporary must still be reduced in place (the calibration was not spoiled).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, _count_in_place_reduces, tensor
from spmd import PS, I, P, R, S, Tensor

F64 = torch.float64
AXIS = "x"


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (8,), w)


# name -> f(x, w), x of shape (4, 8) and w of shape (8,) on every rank
FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # the user's report: all_gather(rms_norm(...)) * 2
    "all_gather(S0,R)": lambda x, w: spmd.all_gather(_rms(x, w), AXIS, src=S(0), dst=R) * 2,
    "all_gather(V,I)": lambda x, w: spmd.all_gather(x * w, AXIS, src=spmd.V, dst=I) * 2,
    # a temporary nobody holds: reduced in place in the forward
    "all_reduce(P,R)": lambda x, w: spmd.all_reduce(_rms(x, w), AXIS, src=P, dst=R) * 2,
    # exp saves its result: under checkpoint's hooks nobody holds it in the forward
    "all_reduce(P,R) of exp": lambda x, w: spmd.all_reduce((x * w).exp(), AXIS, src=P, dst=R) * 2,
    "reduce_scatter(P,S0)": lambda x, w: spmd.reduce_scatter(_rms(x, w), AXIS, src=P, dst=S(0)) * 2,
    "all_to_all(S0,S1)": lambda x, w: spmd.all_to_all(_rms(x, w), AXIS, src=S(0), dst=S(1)) * 2,
    "convert(R,S0)": lambda x, w: spmd.convert(_rms(x, w), AXIS, src=R, dst=S(0)) * 2,
    # the backward all-reduces the incoming gradient (in place when autograd owns it)
    "reinterpret(I,R)": lambda x, w: spmd.reinterpret(x * w, AXIS, src=I, dst=R).sin() * 2,
    # global SPMD: the planner's steps (their backward calibrates, if nothing did before)
    "redistribute(P->S0) global": lambda x, w: spmd.redistribute(
        _rms(x, w), src=Tensor[PS[None, None], P[AXIS]], dst=Tensor[PS[AXIS, None]]) * 2,
}


def _assert_fresh() -> None:
    from spmd import _collectives

    assert not _collectives._OWNED and not _collectives._OWNED_INPUTS, (
        "not a fresh process: the runtime was calibrated before this check")


def _inputs(ctx: Ctx, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = tensor(f"{name}/x{ctx.rank}", (4, 8))
    w = tensor(f"{name}/w", (8,))
    c = tensor(f"{name}/c{ctx.rank}", (8, 8)) + 1.5
    return x, w, c


def _loss_and_grads(f: Callable[..., torch.Tensor], x0: torch.Tensor, w0: torch.Tensor,
                    c: torch.Tensor, mode: str) -> tuple[torch.Tensor, ...]:
    x = x0.clone().requires_grad_(True)
    w = w0.clone().requires_grad_(True)
    if mode == "plain":
        y = f(x, w)
    else:
        y = cp.checkpoint(f, x, w, use_reentrant=(mode == "reentrant"))
    cc = c.reshape(-1)[:y.numel()].reshape(y.shape)
    (y * cc).sum().backward()
    assert x.grad is not None and w.grad is not None
    return y.detach(), x.grad, w.grad


def _assert_in_place_later(ctx: Ctx, name: str) -> None:
    """A later plain all_reduce of a temporary, and the backward all-reduce of a fresh
    gradient, are reduced in place: the first call's context did not spoil the calibration."""
    calls, restore = _count_in_place_reduces()
    try:
        x = tensor(f"{name}/later{ctx.rank}", (3, 3)).requires_grad_(True)
        out = spmd.all_reduce(x * 2, AXIS, src=P, dst=R)
        assert len(calls) == 1, "a later all_reduce of a temporary was not reduced in place"
        calls.clear()
        x = tensor(f"{name}/later{ctx.rank}", (3, 3)).requires_grad_(True)
        (spmd.reinterpret(x, AXIS, src=I, dst=R) * 3).sum().backward()
        assert len(calls) == 1, "a later fresh gradient was not all-reduced in place"
        assert_close(x.grad, torch.full((3, 3), 3.0 * ctx.world, dtype=F64))
    finally:
        restore()
    del out


def check_first_under_checkpoint(ctx: Ctx, name: str, function: str, reentrant: bool) -> None:
    _assert_fresh()
    mode = "reentrant" if reentrant else "non-reentrant"
    fn = function
    f = FUNCTIONS[fn]
    x, w, c = _inputs(ctx, name)
    with spmd.set_mesh(ctx.mesh("1d")):
        first = _loss_and_grads(f, x, w, c, mode)  # the process's first collective
        plain = _loss_and_grads(f, x, w, c, "plain")
        again = _loss_and_grads(f, x, w, c, mode)
        for what, got in (("first call", first), ("second call", again)):
            for part, a, b in zip(("value", "x.grad", "w.grad"), got, plain):
                assert_close(a, b, msg=lambda m: f"{fn} under {mode} checkpoint, {what}, {part}: {m}")
        _assert_in_place_later(ctx, name)


def check_first_under_context(ctx: Ctx, name: str, context: str) -> None:
    """The first collective under autocast, saved-tensor hooks, no_grad or inference_mode:
    its value is the plain one and later calls still reduce in place."""
    _assert_fresh()

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # (ops autocast leaves alone)
        return spmd.all_reduce(x * w, AXIS, src=P, dst=R) * 2

    x, w, c = _inputs(ctx, name)
    contexts: dict[str, Callable[[], Any]] = {
        "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        "save_on_cpu": torch.autograd.graph.save_on_cpu,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
    }
    with spmd.set_mesh(ctx.mesh("1d")):
        with contexts[context]():
            xg = x.clone().requires_grad_(context not in ("no_grad", "inference_mode"))
            y = f(xg, w)
            if y.requires_grad:
                (y * c[:4]).sum().backward()
        plain = _loss_and_grads(f, x, w, c, "plain")
        assert_close(y.detach().clone(), plain[0], msg=lambda m: f"under {context}: {m}")
        if xg.grad is not None:
            assert_close(xg.grad, plain[1], msg=lambda m: f"under {context} (x.grad): {m}")
        _assert_in_place_later(ctx, name)


def check_first_under_modes(ctx: Ctx, name: str) -> None:
    """A user's TorchFunctionMode and TorchDispatchMode see the same ops on the first call
    as on the second (the calibration's own ops are not the user's)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    _assert_fresh()
    seen: list[str] = []

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(f"function {getattr(func, '__name__', func)}")
            return func(*args, **(kwargs or {}))

    class Dispatches(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(f"dispatch {func}")
            return func(*args, **(kwargs or {}))

    x0, w, c = _inputs(ctx, name)
    calls = []
    with spmd.set_mesh(ctx.mesh("1d")):
        for _ in range(2):
            x = x0.clone().requires_grad_(True)
            seen.clear()
            with Functions(), Dispatches():
                y = spmd.all_reduce(x * 2, AXIS, src=P, dst=R)
                (y * c[:4]).sum().backward()
            calls.append(list(seen))
    assert calls[0] == calls[1], ("the first call's ops differ from the second's:\n"
                                  f"first:  {calls[0]}\nsecond: {calls[1]}")


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    checks: list[tuple[str, Callable[[Ctx], None]]] = []

    def add(check_name: str, fn: Callable[..., None], **kw: Any) -> None:
        checks.append((check_name, functools.partial(fn, name=check_name, **kw)))

    p = f"w{world}/first-call"
    for fn in FUNCTIONS:
        for reentrant in (False, True):
            mode = "reentrant" if reentrant else "non-reentrant"
            add(f"{p}/checkpoint-{mode}/{fn}", check_first_under_checkpoint, function=fn,
                reentrant=reentrant)
    for context in ("autocast", "save_on_cpu", "no_grad", "inference_mode"):
        add(f"{p}/{context}", check_first_under_context, context=context)
    add(f"{p}/torch-modes", check_first_under_modes)
    return checks
