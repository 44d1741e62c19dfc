"""Check mode inside autograd: gradient hooks and custom Functions' ``backward`` run in the
check mode (autograd's engine runs them with an empty torch function mode stack: before, the
ops there were neither checked nor typed), and a custom Function's backward results are
checked against the duals of forward's input types (engine ``duality.check_returned``, the
static checker's rule).  Each check has its wrong-program counterpart measured: the value the
unchecked program computes is wrong."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64


def _raises(code: str, fn: Callable[[], Any], start: str = "") -> str:
    try:
        fn()
    except SpmdTypeError as e:
        assert e.code == code, (e.code, str(e))
        assert str(e).startswith(start), str(e)
        return str(e)
    raise AssertionError(f"expected {code}")


def _param(ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
    w = spmd.declare(torch.nn.Parameter(torch.ones(3, dtype=F64)), Tensor[R["x"]])
    x = spmd.declare(torch.full((3,), float(ctx.rank + 1), dtype=F64), Tensor[V["x"]])
    return w, x


def _backward(w: torch.Tensor, x: torch.Tensor) -> None:
    spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()


def check_hook_ops_checked(ctx: Ctx, name: str) -> None:
    """A non-linear op on the Partial gradient in a hook raises (tensor hook, post-accumulate
    hook); ops there are typed (``p.grad * 2`` is P); a raw collective on it is reported."""
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        for kind, hook in (("register_hook", lambda g: torch.relu(g)),
                           ("register_post_accumulate_grad_hook", lambda q: torch.relu(q.grad))):
            w, x = _param(ctx)
            getattr(w, kind)(hook)
            _raises("spmd-partial-nonlinear", lambda: _backward(w, x), "Partial on \"x\"")
        seen: list[Any] = []
        w, x = _param(ctx)
        w.register_post_accumulate_grad_hook(lambda q: seen.append(spmd.typeof(q.grad * 2)))
        _backward(w, x)
        assert [str(t) for t in seen] == ['Tensor[P["x"]]'], seen
        w, x = _param(ctx)
        w.register_post_accumulate_grad_hook(lambda q: dist.all_reduce(q.grad))
        # raises before the collective runs (on every rank: no rank is left waiting)
        _raises("spmd-raw-collective", lambda: _backward(w, x), "torch.distributed.all_reduce")


def check_hook_reduction_typed(ctx: Ctx, name: str) -> None:
    """DDP-style overlap: post-accumulate hooks reduce a bucket of two parameters once both
    gradients are ready (flatten, all_reduce, views back into each p.grad): every p.grad is R
    after backward, ``spmd.declare(p.grad, Tensor[R["x"]])`` passes (it raised "P to R is a
    reduction": the first parameter's hook had recorded its still-Partial gradient, the views
    assigned later were untyped) and the step matches the float64 reference; reducing again
    after backward raises (measured below: the double reduction is off by sum * (world - 1))."""
    n = ctx.world
    total = float(sum(range(1, n + 1)))

    def bucketed(params: list[torch.Tensor]) -> None:
        ready = [0]

        def hook(_: torch.Tensor) -> None:
            ready[0] += 1
            if ready[0] == len(params):
                ready[0] = 0
                flat = torch.cat([q.grad.reshape(-1) for q in params])
                flat = spmd.all_reduce(flat, "x", src=P, dst=R)
                for i, q in enumerate(params):
                    q.grad = flat[3 * i:3 * i + 3].view_as(q)
        for q in params:
            q.register_post_accumulate_grad_hook(hook)

    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        w, x = _param(ctx)
        v, _ = _param(ctx)
        bucketed([w, v])
        spmd.reinterpret((w * x + 2 * v * x).sum(), "x", src=V, dst=P).backward()
        for q in (w, v):
            spmd.declare(q.grad, Tensor[R["x"]])
        torch.optim.SGD([w, v], lr=0.1).step()
        with torch.no_grad(), spmd._checking.suspended():
            assert_close(w.detach(), torch.full((3,), 1.0 - 0.1 * total, dtype=F64))
            assert_close(v.detach(), torch.full((3,), 1.0 - 0.2 * total, dtype=F64))
        # the after-backward pass reduces again: the hooks already did
        w, x = _param(ctx)
        v, _ = _param(ctx)
        bucketed([w, v])
        spmd.reinterpret((w * x + v * x).sum(), "x", src=V, dst=P).backward()
        _raises("spmd-src-mismatch", lambda: spmd.all_reduce(
            torch.cat([w.grad, v.grad]), "x", src=P, dst=R), "all_reduce(")
    # the same program unchecked: the gradient is off
    w = torch.nn.Parameter(torch.ones(3, dtype=F64))
    w.register_post_accumulate_grad_hook(lambda q: dist.all_reduce(q.grad))
    (w * float(ctx.rank + 1)).sum().backward()
    dist.all_reduce(w.grad)
    assert float((w.grad - total).abs().max()) == total * (n - 1)


class _CopyToRegion(torch.autograd.Function):
    """Megatron's copy to the tensor-parallel region (I -> R); each subclass its backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[I["x"]]) -> Tensor[R["x"]]:
        return spmd.reinterpret(x, "x", src=I, dst=R)


class _CopyNoReduce(_CopyToRegion):
    """Megatron's copy-to-tensor-parallel-region whose backward forgets the all-reduce."""

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> Tensor[I["x"]]:
        return g  # the Partial gradient of an I input


class _CopyRawReduce(_CopyToRegion):
    """The same, correct: the user's own raw all-reduce in backward (Megatron's _reduce)."""

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> Tensor[I["x"]]:
        g = g.clone()
        dist.all_reduce(g)
        return g


class _CopyTyped(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[I["x"]], scale: float) -> Tensor[R["x"]]:
        ctx.scale = scale
        return spmd.reinterpret(x, "x", src=I, dst=R) * scale

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> tuple[Tensor[I["x"]], None]:
        seen.append(spmd.typeof(g))
        return spmd.all_reduce(g, "x", src=P, dst=I) * ctx.scale, None


class _NonLinearBackward(_CopyToRegion):
    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> Tensor[I["x"]]:
        return spmd.all_reduce(torch.tanh(g), "x", src=P, dst=I)


seen: list[Any] = []


def _fn_loss(cls: Any, x: torch.Tensor, *extra: Any) -> torch.Tensor:
    y = cls.apply(x, *extra)
    coef = spmd.declare(torch.arange(1.0, 4.0, dtype=F64) * (dist.get_rank() + 1), Tensor[V["x"]])
    return spmd.reinterpret((y * coef).sum(), "x", src=V, dst=P)


def check_function_backward(ctx: Ctx, name: str) -> None:
    """A custom Function's backward: returning the unreduced Partial gradient of an I input
    raises spmd-duality (the static checker's message); the gradient it receives is typed (the
    dual of forward's output); a non-linear op on it raises; a raw collective the user wrote
    there is allowed and leaves the tensor untyped (no false error); the correct Functions
    match the float64 reference."""
    n = ctx.world
    total = float(sum(range(1, n + 1)))
    want = torch.arange(1.0, 4.0, dtype=F64) * total
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
        _raises("spmd-duality", lambda: _fn_loss(_CopyNoReduce, x).backward(),
                '_CopyNoReduce.backward returns g (Tensor[P["x"]]) as the gradient of input x '
                '(Tensor[I["x"]]), which is Tensor[I["x"]] (P on "x" where I is needed)')
        x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
        _raises("spmd-partial-nonlinear", lambda: _fn_loss(_NonLinearBackward, x).backward())
        for cls, extra in ((_CopyRawReduce, ()), (_CopyTyped, (1.0,))):
            seen.clear()
            x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
            _fn_loss(cls, x, *extra).backward()
            assert str(spmd.typeof(x.grad)) == 'Tensor[I["x"]]', spmd.typeof(x.grad)
            with spmd._checking.suspended():
                assert_close(x.grad, want)
        assert [str(t) for t in seen] == ['Tensor[P["x"]]'], seen
    # unchecked, the wrong backward gives each rank its own partial gradient
    x = torch.zeros(3, dtype=F64, requires_grad=True)
    with spmd.set_mesh(ctx.mesh("1d")):
        _fn_loss(_CopyNoReduce, x).backward()
    assert float((x.grad - want).abs().max()) > 0.5


class _Zero3Fn(torch.autograd.Function):
    """A ZeRO-3 layer as one Function (the zero3 probe's): gather in forward, re-gather and
    recompute in backward; ``how`` picks the (wrong) return under test."""

    how = "name"

    @staticmethod
    def forward(ctx: Any, x: Tensor[V["x"]], shard: Tensor[S[0, "x"]]) -> Tensor[V["x"]]:
        ctx.save_for_backward(x, shard)
        return x @ spmd.all_gather(shard, "x", src=S(0), dst=R)

    @staticmethod
    def backward(ctx: Any, gout: Tensor[V["x"]]) -> tuple[Tensor[V["x"]], Tensor[S[0, "x"]]]:
        x, shard = ctx.saved_tensors
        x = spmd.declare(x, Tensor[V["x"]])
        shard = spmd.declare(shard, Tensor[S[0, "x"]])
        with torch.enable_grad():
            full = spmd.all_gather(shard.detach(), "x", src=S(0), dst=R).requires_grad_()
            xr = x.detach().requires_grad_()
            gx, gfull = torch.autograd.grad(xr @ full, (xr, full), gout)
            if _Zero3Fn.how == "with":  # a return inside a with block
                return gx, gfull
        if _Zero3Fn.how == "call":
            return gx, spmd.all_reduce(gfull, "x", src=P, dst=R)
        return (gx,
                gfull)


def check_function_backward_names(ctx: Ctx, name: str) -> None:
    """The duality error of a Function's backward names the returned values by the return's
    expressions, as the static checker does (``gfull``, ``spmd.all_reduce(gfull, "x", src=P,
    dst=R)``: as written, arguments included), so its fix pastes; it said ``result[1]``, then
    ``spmd.all_reduce(...)``."""
    n = ctx.world
    start = "_Zero3Fn.backward returns {} (Tensor[{}]) as the gradient of input shard"
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        for how, text, t in (("name", "gfull", 'P["x"]'), ("with", "gfull", 'P["x"]'),
                             ("call", 'spmd.all_reduce(gfull, "x", src=P, dst=R)', 'R["x"]')):
            _Zero3Fn.how = how
            x = spmd.declare(torch.ones(2, 2 * n, dtype=F64) * (ctx.rank + 1), Tensor[V["x"]])
            shard = spmd.declare(torch.ones(2, 2 * n, dtype=F64, requires_grad=True),
                                 Tensor[S[0, "x"]])
            message = _raises("spmd-duality", lambda: spmd.reinterpret(
                _Zero3Fn.apply(x, shard).sum(), "x", src=V, dst=P).backward(),
                start.format(text, t))
            fix = "reduce_scatter(gfull," if t.startswith("P") else f"convert({text},"
            assert f"use {fix} " in message, message


def _reduced_to_i(g: Any) -> Any:
    return spmd.all_reduce(g, "x", src=P, dst=I)


def _no_wraps(fn: Any) -> Any:
    def inner(ctx: Any, *grads: Any) -> Any:
        return fn(ctx, *grads)
    return inner


def _one_tuple(ctx: Any, g: Any) -> Any:
    h = _reduced_to_i(g)
    return h,


def _plain(ctx: Any, g: Any) -> Any:
    h = _reduced_to_i(g)
    return h


def _function_of(backward: Any) -> Any:
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor[R["x"]]) -> Tensor[R["x"]]:
            return x * 2
    Fn.backward = staticmethod(backward)  # type: ignore[method-assign]
    return Fn


def check_function_backward_names_odd_returns(ctx: Ctx, name: str) -> None:
    """``return h,`` (one gradient) is named ``h`` (was ``(h,)``, whose fix passed a tuple);
    a backward behind a decorator without functools.wraps is not named by the wrapper's
    ``return fn(...)`` (a name the user never wrote): ``result``."""
    start = "Fn.backward returns {} (Tensor[I[\"x\"]])"
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        for backward, text in ((_one_tuple, "h"), (_plain, "h"), (_no_wraps(_plain), "result")):
            x = spmd.declare(torch.ones(3, dtype=F64, requires_grad=True), Tensor[R["x"]])
            message = _raises("spmd-duality", lambda: spmd.reinterpret(
                _function_of(backward).apply(x).sum(), "x", src=R, dst=I).backward(),
                start.format(text))
            assert f"use convert({text}, " in message, message


def check_multi_grad_hook(ctx: Ctx, name: str) -> None:
    """torch.autograd.graph.register_multi_grad_hook: the user's function runs in the check
    mode, with the gradients typed."""
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        w, x = _param(ctx)
        v = spmd.declare(torch.nn.Parameter(torch.ones(3, dtype=F64)), Tensor[R["x"]])
        torch.autograd.graph.register_multi_grad_hook(
            (w, v), lambda grads: [torch.relu(g) for g in grads if g is not None])
        _raises("spmd-partial-nonlinear",
                lambda: spmd.reinterpret((w * x + v * x).sum(), "x", src=V, dst=P).backward())


def check_hook_accumulation(ctx: Ctx, name: str) -> None:
    """no_sync with a register_hook hook (runs before autograd accumulates): the last
    micro-batch's hook all-reduces only its own gradient, autograd adds that R to the Partial
    sum of the earlier micro-batches: raises (measured unchecked: the gradient is off).  A hook
    that reduces every micro-batch accumulates R into R: passes, and matches."""
    n = ctx.world
    total = float(sum(range(1, n + 1)))

    def run(sync_every: bool) -> torch.Tensor:
        w = torch.nn.Parameter(torch.ones(3, dtype=F64))
        sync = [sync_every]
        w.register_hook(lambda g: spmd.all_reduce(g, "x", src=P, dst=R) if sync[0] else None)
        if spmd._checking.ACTIVE:
            spmd.declare(w, Tensor[R["x"]])
        for i in range(2):
            sync[0] = sync_every or i == 1
            x = torch.full((3,), float(ctx.rank + 1), dtype=F64)
            if spmd._checking.ACTIVE:
                x = spmd.declare(x, Tensor[V["x"]])
            spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()
        return w

    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            _raises("spmd-partial-affine", lambda: run(False))
            w = run(True)
            assert str(spmd.typeof(w.grad)) == 'Tensor[R["x"]]', spmd.typeof(w.grad)
            with spmd._checking.suspended():
                assert_close(w.grad, torch.full((3,), 2 * total, dtype=F64))
        w = run(False)  # unchecked: the first micro-batch's gradient is this rank's only
        assert float((w.grad - 2 * total).abs().max()) == total - float(ctx.rank + 1)


def check_post_hook_accumulation(ctx: Ctx, name: str) -> None:
    """A post-accumulate hook that all-reduces p.grad on every micro-batch: the second
    backward accumulates its Partial gradient into the R tensor the first hook assigned, and
    the hook reads that sum (before, it read R: "already R: drop the call", and dropping it
    left the sum wrong and typed R).  Raises spmd-partial-affine at the read (measured
    unchecked: off by sum * (world - 1)); one micro-batch passes and matches."""
    n = ctx.world
    total = float(sum(range(1, n + 1)))

    def run(micro: int, checked: bool) -> torch.Tensor:
        w = torch.nn.Parameter(torch.ones(3, dtype=F64))
        if checked:
            spmd.declare(w, Tensor[R["x"]])
            w.register_post_accumulate_grad_hook(
                lambda q: setattr(q, "grad", spmd.all_reduce(q.grad, "x", src=P, dst=R)))
        else:
            w.register_post_accumulate_grad_hook(lambda q: dist.all_reduce(q.grad))
        for _ in range(micro):
            x = torch.full((3,), float(ctx.rank + 1), dtype=F64)
            if checked:
                x = spmd.declare(x, Tensor[V["x"]])
            spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()
        return w

    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            _raises("spmd-partial-affine", lambda: run(2, True), 'Partial on "x" (autograd')
            w = run(1, True)
            assert str(spmd.typeof(w.grad)) == 'Tensor[R["x"]]', spmd.typeof(w.grad)
            with spmd._checking.suspended():
                assert_close(w.grad, torch.full((3,), total, dtype=F64))
            # zeroed between steps (zero_grad(set_to_none=False)): the next backward's
            # gradient goes into zeros, the hook reduces it once: passes, and matches
            for zero in (lambda: w.grad.zero_(),
                         lambda: torch.optim.SGD([w], lr=0.1).zero_grad(set_to_none=False)):
                zero()
                x = spmd.declare(torch.full((3,), float(ctx.rank + 1), dtype=F64), Tensor[V["x"]])
                spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()
                assert str(spmd.typeof(w.grad)) == 'Tensor[R["x"]]', spmd.typeof(w.grad)
                with spmd._checking.suspended():
                    assert_close(w.grad, torch.full((3,), total, dtype=F64))
        w = run(2, False)
        assert float((w.grad - 2 * total).abs().max()) == total * (n - 1)


def check_grad_reduced_every_micro_batch(ctx: Ctx, name: str) -> None:
    """Gradient accumulation with ``p.grad = all_reduce(p.grad, "x", src=P, dst=R)`` after every
    micro-batch and no zeroing: the next backward accumulates a Partial summand into the R sum,
    so the earlier micro-batches are summed once per reduction (measured unchecked below: off
    by sum * (world - 1)); raises spmd-partial-affine at that backward, naming ``w.grad`` (it
    passed: the accumulated gradient was read as P).  The correct patterns pass and match the
    reference: one reduction after the last micro-batch; a reduction per micro-batch into a
    separate accumulator, the gradient set to None or zeroed in place (``zero_()``,
    ``zero_grad(set_to_none=False)``) before the next backward."""
    n = ctx.world
    want = float(sum(ctx_rank + 1 + m for m in range(2) for ctx_rank in range(n)))

    def micro(w: torch.Tensor, m: int, checked: bool) -> None:
        x = torch.full((3,), float(ctx.rank + 1 + m), dtype=F64)
        if checked:
            x = spmd.declare(x, Tensor[V["x"]])
        spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()

    def run(how: str, checked: bool) -> torch.Tensor:
        w = torch.nn.Parameter(torch.ones(3, dtype=F64))
        if checked:
            spmd.declare(w, Tensor[R["x"]])
        acc = None
        for m in range(2):
            micro(w, m, checked)
            if how == "every":  # the mistake: no zeroing between the reductions
                w.grad = spmd.all_reduce(w.grad, "x", src=P, dst=R)
            elif how != "once":
                g = spmd.all_reduce(w.grad, "x", src=P, dst=R)
                acc = g if acc is None else acc + g
                if how == "none":
                    w.grad = None
                elif how == "zero_":
                    w.grad.zero_()
                else:
                    torch.optim.SGD([w], lr=0.1).zero_grad(set_to_none=False)
        if how == "once":
            w.grad = spmd.all_reduce(w.grad, "x", src=P, dst=R)
        elif acc is not None:
            w.grad = acc
        return w

    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            _raises("spmd-partial-affine", lambda: run("every", True),
                    'Partial on "x" (autograd\'s new gradient: Tensor[P["x"]]) added to a Replicate '
                    'value (w.grad: Tensor[R["x"]])')
            for how in ("once", "none", "zero_", "zero_grad"):
                w = run(how, True)
                assert str(spmd.typeof(w.grad)) == 'Tensor[R["x"]]', (how, spmd.typeof(w.grad))
                torch.optim.SGD([w], lr=0.1).step()
                with spmd._checking.suspended():
                    assert_close(w.grad, torch.full((3,), want, dtype=F64))
                    assert_close(w.detach(), torch.full((3,), 1.0 - 0.1 * want, dtype=F64))
        w = run("every", False)  # unchecked: the first micro-batch's sum is counted n times
        first = float(sum(range(1, n + 1)))
        assert float((w.grad - want).abs().max()) == first * (n - 1), (w.grad, want)


class _ReadBeforeReduce(_CopyToRegion):
    """A backward that logs the gradient's value before reducing it: this rank's summand."""

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> Tensor[I["x"]]:
        read.append(g.tolist())
        return spmd.all_reduce(g, "x", src=P, dst=I)


class _ReadAfterRawReduce(_CopyToRegion):
    """The same after the user's own raw all-reduce (untyped from there): the sum."""

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> Tensor[I["x"]]:
        g = g.clone()
        dist.all_reduce(g)
        read.append(g.tolist())
        return g


read: list[Any] = []


def check_value_reads_in_backward(ctx: Ctx, name: str) -> None:
    """Reading a value out of the Partial gradient a Function's backward receives
    (``g.tolist()``) raises spmd-partial-nonlinear: it is this rank's summand (measured below:
    off from the sum on every rank); after the user's raw all-reduce there the tensor is
    untyped and the read is allowed: the sum, as the float64 reference."""
    n = ctx.world
    want = (torch.arange(1.0, 4.0, dtype=F64) * float(sum(range(1, n + 1)))).tolist()
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
        _raises("spmd-partial-nonlinear", lambda: _fn_loss(_ReadBeforeReduce, x).backward(),
                'Partial on "x" (g: Tensor[P["x"]]) cannot be read out as a value: g.tolist()')
        read.clear()
        x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
        _fn_loss(_ReadAfterRawReduce, x).backward()
        assert read == [want], (read, want)
    # unchecked, the read before the reduction is this rank's own gradient, not the sum
    read.clear()
    x = torch.zeros(3, dtype=F64, requires_grad=True)
    with spmd.set_mesh(ctx.mesh("1d")):
        _fn_loss(_ReadBeforeReduce, x).backward()
    mine = (torch.arange(1.0, 4.0, dtype=F64) * float(ctx.rank + 1)).tolist()
    assert read == [mine] and mine != want, (read, mine, want)


def _coef(ctx: Ctx) -> torch.Tensor:
    """This rank's own coefficients (V): the gradient of an I input sums them over ranks."""
    return torch.arange(1.0, 4.0, dtype=F64) * (ctx.rank + 1)


def check_megatron_functions(ctx: Ctx, name: str) -> None:
    """Megatron's Functions as Megatron writes them (rt_megatron_fns.py, which the static
    checker passes: tests/static/test_megatron_fns_static.py) run in the check mode without
    error and match float64 references: the copy to the region (its input returned as R, its
    gradient all-reduced raw into the returned name), the reduce from it (a raw all-reduce in
    forward, its I gradient returned where R is due: backward runs without grad; it raised
    spmd-duality), the fused vocab-parallel cross entropy (raw in-place all-reduces; the
    static checker's old fix, reducing the loss once more, measured: twice the loss)."""
    import rt_megatron_fns as fns

    n = ctx.world
    want = sum(torch.arange(1.0, 4.0, dtype=F64) * (r + 1) for r in range(n))
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(5, 4 * n, generator=gen, dtype=F64)
    target = torch.randint(0, 4 * n, (5,), generator=gen)
    ref_logits = logits.clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(ref_logits, target)
    ref.backward()
    mine = slice(4 * ctx.rank, 4 * ctx.rank + 4)
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        x = spmd.declare(torch.zeros(3, dtype=F64, requires_grad=True), Tensor[I["x"]])
        y = fns.CopyToRegion.apply(x)
        assert str(spmd.typeof(y)) == 'Tensor[R["x"]]', spmd.typeof(y)
        coef = spmd.declare(_coef(ctx), Tensor[V["x"]])
        spmd.reinterpret((y * coef).sum(), "x", src=V, dst=P).backward()
        x_part = spmd.declare(torch.full((3,), float(ctx.rank + 1), dtype=F64,
                                         requires_grad=True), Tensor[P["x"]])
        out = fns.ReduceFromRegion.apply(x_part)
        assert str(spmd.typeof(out)) == 'Tensor[I["x"]]', spmd.typeof(out)
        w = spmd.declare(torch.arange(1.0, 4.0, dtype=F64), Tensor[I["x"]])
        (out * w).sum().backward()
        part = spmd.declare(logits[:, mine].clone().requires_grad_(), Tensor[S[-1, "x"]])
        loss = fns.VocabParallelCE.apply(part, spmd.declare(target, Tensor[R["x"]]))
        assert str(spmd.typeof(loss)) == 'Tensor[I["x"]]', spmd.typeof(loss)
        loss.backward()
        with spmd._checking.suspended():
            assert_close(x.grad, want)
            assert_close(out, torch.full((3,), float(sum(range(1, n + 1))), dtype=F64))
            assert_close(x_part.grad, torch.arange(1.0, 4.0, dtype=F64))
            assert_close(loss, ref.detach())
            assert_close(part.grad, ref_logits.grad[:, mine])
            doubled = spmd.all_reduce(spmd.reinterpret(loss.detach(), "x", src=V, dst=P),
                                      "x", src=P, dst=I)
    assert_close(doubled, n * ref.detach())


def check_function_backward_under_torch_func(ctx: Ctx, name: str) -> None:
    """torch.func.grad and vjp run a setup_context Function's backward through a class they
    generate per call: its duality is checked there as in eager (the forgotten all-reduce
    raises spmd-duality; it came back untyped, each rank's partial gradient), the correct
    Function matches the reference.  Unchecked, the forgotten one is off."""
    import rt_megatron_fns as fns

    n = ctx.world
    want = sum(torch.arange(1.0, 4.0, dtype=F64) * (r + 1) for r in range(n))
    message = ('CopyToRegionFuncForgot.backward returns grad_output (Tensor[P["x"]]) as the '
               'gradient of input input_ (Tensor[I["x"]]), which is Tensor[I["x"]] (P on "x" '
               'where I is needed)')
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        coef = spmd.declare(_coef(ctx), Tensor[V["x"]])

        def loss_of(cls: Any) -> Callable[[torch.Tensor], torch.Tensor]:
            return lambda x: spmd.reinterpret((cls.apply(x) * coef).sum(), "x", src=V, dst=P)

        x = spmd.declare(torch.zeros(3, dtype=F64), Tensor[I["x"]])
        gx = torch.func.grad(loss_of(fns.CopyToRegionFunc))(x)
        _, pull = torch.func.vjp(fns.CopyToRegionFunc.apply, x)
        (vx,) = pull(spmd.declare(_coef(ctx), Tensor[P["x"]]))
        with spmd._checking.suspended():
            assert_close(gx, want)
            assert_close(vx, want)
        _raises("spmd-duality", lambda: torch.func.grad(loss_of(fns.CopyToRegionFuncForgot))(x),
                message)
        _, pull = torch.func.vjp(fns.CopyToRegionFuncForgot.apply, x)
        _raises("spmd-duality", lambda: pull(spmd.declare(_coef(ctx), Tensor[P["x"]])), message)
    wrong = torch.func.grad(lambda x: (fns.CopyToRegionFuncForgot.apply(x) * _coef(ctx)).sum())(
        torch.zeros(3, dtype=F64))
    assert float((wrong - want).abs().max()) > 0.5


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "hooks", (
        check_hook_ops_checked, check_hook_reduction_typed, check_function_backward,
        check_function_backward_names, check_function_backward_names_odd_returns,
        check_multi_grad_hook, check_hook_accumulation, check_post_hook_accumulation,
        check_grad_reduced_every_micro_batch, check_value_reads_in_backward,
        check_megatron_functions, check_function_backward_under_torch_func))
