"""``p.grad = value`` checked against p's gradient type (checks run by test_grads_world.py on
4 gloo ranks, a 2 x 2 ("dp", "tp") mesh).

A Megatron-style flat gradient bucket: the gradients of an S(0), an S(1) and an I parameter
concatenated into one buffer, all-reduced over "dp", split back with ``p.grad =
chunk.view_as(g)``.  The views are V on "tp" (the bucket mixes layouts): the I parameter's
was accepted as its gradient, and the optimizer's ``p.sub_(lr * p.grad)`` raised later
(spmd-inplace, a fix that did not help).  Now the assignment raises, with the fixes
(a bucket per layout, or the gradient reduced alone) as the fix; both run the SGD step.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError


class _Layer(nn.Module):
    def __init__(self, w1: torch.Tensor, w2: torch.Tensor, norm: torch.Tensor) -> None:
        super().__init__()
        self.w1 = nn.Parameter(w1)
        self.w2 = nn.Parameter(w2)
        self.norm = nn.Parameter(norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xr = spmd.reinterpret(x * self.norm, "tp", src=I, dst=R)
        h = F.gelu(F.linear(xr, self.w1))
        return spmd.all_reduce(spmd.reinterpret(F.linear(h, self.w2), "tp", src=V, dst=P),
                               "tp", src=P, dst=I)


def _model_and_loss(ctx: Ctx) -> tuple[_Layer, Any]:
    mesh = ctx.mesh("2x2")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 4, generator=g, dtype=torch.float64)
    b = torch.randn(4, 8, generator=g, dtype=torch.float64)
    tp = mesh.get_local_rank("tp")
    m = _Layer(a.chunk(2, 0)[tp].clone(), b.chunk(2, 1)[tp].clone(),
               torch.ones(4, dtype=torch.float64))
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1 + mesh.get_local_rank("dp")),
                    dtype=torch.float64)
    return m, x


def _backward(m: _Layer, x: torch.Tensor) -> None:
    spmd.declare(m.w1, Tensor[S[0, "tp"], R["dp"]])
    spmd.declare(m.w2, Tensor[S[1, "tp"], R["dp"]])
    spmd.declare(m.norm, Tensor[I["tp"], R["dp"]])
    xx = spmd.declare(x, Tensor[I["tp"], V["dp"]])
    loss = spmd.reinterpret(m(xx).pow(2).mean(), "dp", src=V, dst=P)
    loss.backward()


def _raises(fn: Callable[[], Any], *words: str) -> str:
    try:
        fn()
    except SpmdTypeError as e:
        text = str(e)
    else:
        raise AssertionError("accepted")
    for w in words:
        assert w in text, text
    return text


def check_bucket_view_of_another_layout_raises_at_the_assignment(ctx: Ctx, name: str) -> None:
    """The I parameter's bucket view (V on "tp") raises where it is assigned, with the fixes
    (a bucket per layout, the gradient reduced alone); the sharded parameters' views (V
    claimed S(i)) are accepted."""
    m, x = _model_and_loss(ctx)
    with spmd.set_mesh(ctx.mesh("2x2")), spmd.typecheck():
        _backward(m, x)
        with torch.no_grad():
            g1, g2, gn = m.w1.grad, m.w2.grad, m.norm.grad
            assert g1 is not None and g2 is not None and gn is not None
            flat = torch.cat([g1.flatten(), g2.flatten(), gn.flatten()])
            red = spmd.all_reduce(flat, "dp", src=P, dst=R, op="avg")
            a, b, c = red.split([g1.numel(), g2.numel(), gn.numel()])
            m.w1.grad = a.view_as(g1)
            m.w2.grad = b.view_as(g2)

            def assign() -> None:
                m.norm.grad = c.view_as(gn)

            _raises(assign, "spmd-duality", "V on \"tp\" where I is needed",
                    "one bucket per layout",
                    'm.norm.grad = spmd.all_reduce(m.norm.grad, "dp", src=P, dst=R)')


def check_bucket_per_layout_runs_the_step(ctx: Ctx, name: str) -> None:
    """The fix: a bucket per layout on "tp" (the sharded parameters', V, whose views are
    claimed S(i); the I parameter's, I); the SGD step then runs, and the I parameter stays
    equal on the "tp" ranks.  So does the other fix, the I parameter's gradient reduced
    alone."""
    mesh = ctx.mesh("2x2")
    for alone in (False, True):
        m, x = _model_and_loss(ctx)
        with spmd.set_mesh(mesh), spmd.typecheck():
            _backward(m, x)
            with torch.no_grad():
                g1, g2, gn = m.w1.grad, m.w2.grad, m.norm.grad
                assert g1 is not None and g2 is not None and gn is not None
                flat = torch.cat([g1.flatten(), g2.flatten()])
                red = spmd.all_reduce(flat, "dp", src=P, dst=R, op="avg")
                a, b = red.split([g1.numel(), g2.numel()])
                m.w1.grad = a.view_as(g1)
                m.w2.grad = b.view_as(g2)
                if alone:
                    m.norm.grad = spmd.all_reduce(m.norm.grad, "dp", src=P, dst=R, op="avg")
                else:
                    (c,) = spmd.all_reduce(torch.cat([gn.flatten()]), "dp", src=P, dst=R,
                                           op="avg").split([gn.numel()])
                    m.norm.grad = c.view_as(gn)
                for p in (m.w1, m.w2, m.norm):
                    p.sub_(0.1 * p.grad)
        out = [torch.zeros_like(m.norm) for _ in range(2)]
        torch.distributed.all_gather(out, m.norm.detach(), group=mesh.get_group("tp"))
        torch.testing.assert_close(out[0], out[1])


def check_reduced_and_unreduced_gradients_accepted(ctx: Ctx, name: str) -> None:
    """P (autograd's) and R or I after the all-reduce are the gradient of an R parameter."""
    with spmd.set_mesh(ctx.mesh("2x2")), spmd.typecheck():
        w = spmd.declare(torch.ones(3, dtype=torch.float64, requires_grad=True),
                         Tensor[R["dp"], I["tp"]])
        g = spmd.declare(torch.ones(3, dtype=torch.float64), Tensor[P["dp"], I["tp"]])
        w.grad = g
        w.grad = spmd.all_reduce(g, "dp", src=P, dst=R)
        w.grad = spmd.all_reduce(g, "dp", src=P, dst=I)
        w.grad = torch.zeros(3, dtype=torch.float64)  # untyped: gradual
        w.grad = None


def check_partial_gradient_of_an_invariant_parameter_raises(ctx: Ctx, name: str) -> None:
    """P on "tp" is no gradient of an I parameter: the fix is the all-reduce."""
    with spmd.set_mesh(ctx.mesh("2x2")), spmd.typecheck():
        w = spmd.declare(torch.ones(3, dtype=torch.float64, requires_grad=True),
                         Tensor[R["dp"], I["tp"]])
        g = spmd.declare(torch.ones(3, dtype=torch.float64), Tensor[P["dp", "tp"]])

        def assign() -> None:
            w.grad = g

        _raises(assign, "spmd-duality", "P on \"tp\" where I is needed",
                'all_reduce(g, "tp", src=P, dst=I)')


def check_reduced_gradient_of_an_s_minus1_bias_runs_the_step(ctx: Ctx, name: str) -> None:
    """A 1-d bias declared ``S[-1, "tp"]`` (examples/sequence_parallel.py's b1): its gradient
    all-reduced over "dp" comes back S(0) (the collectives count a negative shard dim from the
    front), the same layout at rank 1.  ``p.grad = all_reduce(g, ...)`` raised a false
    spmd-duality "S(0) on tp where S(-1) is needed"; now it and the SGD step run."""
    mesh = ctx.mesh("2x2")
    tp = mesh.get_local_rank("tp")
    g0 = torch.Generator().manual_seed(0)
    w = nn.Parameter(torch.randn(8, 4, generator=g0, dtype=torch.float64).chunk(2, 0)[tp].clone())
    b = nn.Parameter(torch.randn(8, generator=g0, dtype=torch.float64).chunk(2, 0)[tp].clone())
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1 + mesh.get_local_rank("dp")),
                    dtype=torch.float64)
    opt = torch.optim.SGD([w, b], lr=0.1)
    with spmd.set_mesh(mesh), spmd.typecheck():
        spmd.declare(w, Tensor[S[0, "tp"], R["dp"]])
        spmd.declare(b, Tensor[S[-1, "tp"], R["dp"]])
        xx = spmd.declare(x, Tensor[R["tp"], V["dp"]])
        y = F.linear(xx, w, b)  # S(-1) on tp
        loss = spmd.reinterpret(y.pow(2).sum(), ("dp", "tp"), src=V, dst=P)
        loss.backward()
        for p in (w, b):
            g = p.grad
            assert g is not None
            p.grad = spmd.all_reduce(g, "dp", src=P, dst=R)
        assert spmd.typeof(b.grad) is not None
        opt.step()


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    if world != 4:
        return []
    return named_checks(world, "grads", (
        check_bucket_view_of_another_layout_raises_at_the_assignment,
        check_bucket_per_layout_runs_the_step,
        check_reduced_and_unreduced_gradients_accepted,
        check_partial_gradient_of_an_invariant_parameter_raises,
        check_reduced_gradient_of_an_s_minus1_bias_runs_the_step))
