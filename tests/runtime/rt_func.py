"""torch.func over the typed collectives, on real gloo ranks: torch.func.grad, vjp (and its
vjp: double backward), jvp and jacfwd (forward mode), jacrev, vmap (batch dim first and last), vmap(grad) per-example
gradients, grad(vmap), torch.autograd.grad(is_grads_batched=True) (torch's legacy vmap over
the backward, create_graph both ways), and functional_call + grad over the einsum family, for every
(op, src, dst) of the engine's table (S forms on dims 0, 1, -1), the avg/max/min forms,
the uneven ``sizes=`` forms, redistribute's routes and the uneven all_to_all.

Each torch.func result is compared with what plain autograd (``torch.autograd.grad`` on
the same function) or the per-example loop (stacking ``f(x)`` per ``x``) gives, exactly:
both run the same collectives on the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

import torch
import torch.autograd.forward_ad as fwAD
from torch.func import functional_call, grad, jacfwd, jacrev, jvp, vjp, vmap

import spmd
from spmd import P, R, Tensor, V

from rt_checks import (DIMS, Ctx, collective_kwargs, dual, input_shapes, named_checks, spec,
                       transition_cases, uneven_all_to_all_sizes, values)
from spmd_mypy.engine.collectives import route
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import LocalType

B = 3  # the vmap batch: the same on every rank


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")


def _batch(t: str, shapes: list[tuple[int, ...]], tag: str, me: int) -> torch.Tensor:
    return torch.stack([values(t, shapes, f"{tag}/{b}")[me] for b in range(B)])


def check_func_op(ctx: Ctx, name: str, mesh_key: str, axis: Any, op: str, src: str, dst: str, *,
                  expert: bool = False, sizes: list[int] | None = None,
                  reduce_op: str = "sum") -> None:
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    kwargs = collective_kwargs(op, src, dst, reduce_op=reduce_op, expert=expert, sizes=sizes)
    call = getattr(spmd, op)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return call(t, axis, **kwargs)

    with spmd.set_mesh(mesh):
        shapes = input_shapes(op, src, dst, n, sizes)
        xs = values(src, shapes, f"{name}/x")
        out_shapes = [tuple(e.shape) for e in spec(op, src, dst, xs, sizes=sizes,
                                                   reduce_op=reduce_op)]
        x = xs[me]
        # vmap: one batched collective == the per-example loop, batch dim first and last
        xb = _batch(src, shapes, f"{name}/xb", me)
        want = torch.stack([fn(xb[b]) for b in range(B)])
        _same(vmap(fn)(xb), want, "vmap, batch dim 0")
        _same(vmap(fn, in_dims=-1, out_dims=-1)(xb.movedim(0, -1)), want.movedim(0, -1),
              "vmap, batch dim last")
        if reduce_op in ("max", "min"):  # no gradient
            return
        # the reference: plain autograd, double backward included
        xl = x.clone().requires_grad_(True)
        out = fn(xl)
        g = values(dual(dst), out_shapes, f"{name}/g")[me]
        gl = g.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(out, xl, gl, create_graph=True)
        v = values(src, shapes, f"{name}/v")[me]
        (ref2,) = torch.autograd.grad(ref, gl, v)
        # grad, vjp, the vjp of the vjp
        _same(grad(lambda t: (fn(t) * g).sum())(x), ref.detach(), "torch.func.grad")
        y, pullback = vjp(fn, x)
        _same(y, out.detach(), "torch.func.vjp forward")
        _same(pullback(g)[0], ref.detach(), "torch.func.vjp")
        _same(vjp(lambda gg: vjp(fn, x)[1](gg)[0], g)[1](v)[0], ref2,
              "torch.func.vjp of the vjp (double backward)")
        # forward mode: every op is linear, the output's tangent is the op on the tangent
        y, tangent = jvp(fn, (x,), (v,))
        _same(y, out.detach(), "torch.func.jvp forward")
        _same(tangent, fn(v), "torch.func.jvp")
        # eager forward mode (torch.autograd.forward_ad), with and without a gradient
        # tracked beside it: the tangent went through the c10d call's no-grad fast path
        # untouched (a wrong tangent, silently) or the Function had no jvp
        for x0 in (x, x.clone().requires_grad_(True)):
            with fwAD.dual_level():
                primal, tangent = fwAD.unpack_dual(fn(fwAD.make_dual(x0, v)))
            _same(primal.detach(), out.detach(), "forward_ad forward")
            assert tangent is not None, "forward_ad: no tangent"
            _same(tangent.detach(), fn(v), "torch.autograd.forward_ad")
        # jacrev (vmap over the vjp: every rank the same output size) against autograd's rows
        if len(set(out_shapes)) == 1:
            jac = jacrev(fn)(x)
            rows = []
            for i in range(out.numel()):
                e = torch.zeros(out.numel(), dtype=out.dtype)
                e[i] = 1
                rows.append(torch.autograd.grad(out, xl, e.view(out.shape), retain_graph=True)[0])
            _same(jac, torch.stack(rows).view(*out.shape, *x.shape), "torch.func.jacrev")
            if len(set(shapes)) == 1:  # forward mode: vmap over the jvp, batch = x.numel()
                # the op is linear: column j is the op on the basis vector e_j (on every rank;
                # jacrev's row i is the backward of e_i on every rank: another cross-rank sum)
                cols = []
                for j in range(x.numel()):
                    e = torch.zeros(x.numel(), dtype=x.dtype)
                    e[j] = 1
                    cols.append(fn(e.view(x.shape)))
                _same(jacfwd(fn)(x), torch.stack(cols, -1).view(*out.shape, *x.shape),
                      "torch.func.jacfwd")
        # per-example gradients: vmap(grad) and grad(vmap) against the loop
        gb = _batch(dual(dst), out_shapes, f"{name}/gb", me)
        loop = []
        for b in range(B):
            xi = xb[b].clone().requires_grad_(True)
            loop.append(torch.autograd.grad(fn(xi), xi, gb[b])[0])
        want = torch.stack(loop)
        _same(vmap(grad(lambda t, gg: (fn(t) * gg).sum()))(xb, gb), want, "vmap(grad)")
        _same(grad(lambda t: (vmap(fn)(t) * gb).sum())(xb), want, "grad(vmap)")
        check_grads_batched(fn, x, gb, _batch(src, shapes, f"{name}/vb", me))


def check_grads_batched(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                        gb: torch.Tensor, vb: torch.Tensor) -> None:
    """``torch.autograd.grad(..., is_grads_batched=True)`` (torch's legacy vmap over the
    backward: B gradients of ``fn(x)`` at once, ``gb``) against the loop over the batch, and
    with create_graph: the double backward, batched (``vb``: B gradients of the gradient) and
    plain (the batched backward's own backward), against their loops."""
    xl = x.clone().requires_grad_(True)
    out = fn(xl)
    loop = [torch.autograd.grad(out, xl, gb[b], retain_graph=True)[0] for b in range(B)]
    (got,) = torch.autograd.grad(out, xl, gb, retain_graph=True, is_grads_batched=True)
    _same(got, torch.stack(loop), "autograd.grad(is_grads_batched=True)")
    # create_graph: the first backward plain, the second batched
    gl = gb[0].clone().requires_grad_(True)
    (first,) = torch.autograd.grad(out, xl, gl, create_graph=True)
    loop = [torch.autograd.grad(first, gl, vb[b], retain_graph=True)[0] for b in range(B)]
    (got,) = torch.autograd.grad(first, gl, vb, retain_graph=True, is_grads_batched=True)
    _same(got, torch.stack(loop), "autograd.grad(is_grads_batched=True) of a create_graph grad")
    # create_graph: the first backward batched, the second plain (through the batched steps)
    gbl = gb.clone().requires_grad_(True)
    (firsts,) = torch.autograd.grad(out, xl, gbl, create_graph=True, is_grads_batched=True)
    (got,) = torch.autograd.grad(firsts, gbl, vb)
    loop = []
    for b in range(B):
        gi = gb[b].clone().requires_grad_(True)
        (fi,) = torch.autograd.grad(out, xl, gi, create_graph=True)
        loop.append(torch.autograd.grad(fi, gi, vb[b])[0])
    _same(got, torch.stack(loop), "the backward of autograd.grad(is_grads_batched=True, "
                                  "create_graph=True)")


def check_func_all_to_all_uneven(ctx: Ctx, name: str, mesh_key: str, axis: Any) -> None:
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    sizes, shapes, out_shapes = uneven_all_to_all_sizes(n)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return spmd.all_to_all(t, axis, src=V, dst=V, sizes=sizes[me])

    with spmd.set_mesh(mesh):
        xb = _batch("V", shapes, f"{name}/xb", me)
        want = torch.stack([fn(xb[b]) for b in range(B)])
        _same(vmap(fn)(xb), want, "vmap")
        _same(vmap(fn, in_dims=-1, out_dims=-1)(xb.movedim(0, -1)), want.movedim(0, -1),
              "vmap, batch dim last")
        x = values("V", shapes, f"{name}/x")[me]
        g = values("V", out_shapes, f"{name}/g")[me]
        xl = x.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(fn(xl), xl, g)
        _same(grad(lambda t: (fn(t) * g).sum())(x), ref, "torch.func.grad")
        _same(vjp(fn, x)[1](g)[0], ref, "torch.func.vjp")
        _same(jvp(fn, (x,), (xb[0],))[1], fn(xb[0]), "torch.func.jvp")
        gb = _batch("V", out_shapes, f"{name}/gb", me)
        loop = []
        for b in range(B):
            xi = xb[b].clone().requires_grad_(True)
            loop.append(torch.autograd.grad(fn(xi), xi, gb[b])[0])
        _same(vmap(grad(lambda t, gg: (fn(t) * gg).sum()))(xb, gb), torch.stack(loop),
              "vmap(grad)")
        check_grads_batched(fn, x, gb, xb)


class _Block(torch.nn.Module):
    """A tensor-parallel block over the einsum family: the input reinterpreted I -> R
    (Megatron's copy-to-region), column-parallel einsum, row-parallel linear and matmul with
    out_partial_axes, the pending sums all-reduced, a sum with out_partial_axes."""

    def __init__(self, axis: Any, name: str, me: int, n: int) -> None:
        super().__init__()
        self.axis = axis
        self.w1 = torch.nn.Parameter(values("V", [(4, 2)] * n, f"{name}/w1")[me])
        self.w2 = torch.nn.Parameter(values("V", [(3, 2)] * n, f"{name}/w2")[me])
        self.w3 = torch.nn.Parameter(values("V", [(2, 3)] * n, f"{name}/w3")[me])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.axis
        h = torch.tanh(spmd.einsum("bi,ih->bh", spmd.reinterpret(x, a, src=spmd.I, dst=R),
                                   self.w1))  # V: this rank's columns
        y = spmd.all_reduce(spmd.linear(h, self.w2, out_partial_axes=a), a, src=P, dst=R)
        z = spmd.all_reduce(spmd.matmul(h, self.w3, out_partial_axes=a), a, src=P, dst=R)
        s = spmd.all_reduce(spmd.sum(h * h, out_partial_axes=a), a, src=P, dst=R)
        return (y * z).sum() + s


def check_functional_call_grad(ctx: Ctx, name: str) -> None:
    mesh = ctx.mesh("1d")
    n, me = ctx.world, ctx.rank
    with spmd.set_mesh(mesh):
        m = _Block("x", name, me, n)
        params = {k: p.detach() for k, p in m.named_parameters()}
        x = values("I", [(2, 4)] * n, f"{name}/x")[me]

        def loss(ps: dict, t: torch.Tensor) -> torch.Tensor:
            return functional_call(m, ps, (t,))

        got = grad(loss)(params, x)
        ref = torch.autograd.grad(m(x), list(m.parameters()))
        for (k, gk), r in zip(got.items(), ref):
            _same(gk, r, f"functional_call + grad, {k}")
        xb = torch.stack([values("I", [(2, 4)] * n, f"{name}/xb{b}")[me] for b in range(B)])
        per = vmap(grad(loss), in_dims=(None, 0))(params, xb)
        for b in range(B):
            ref = torch.autograd.grad(m(xb[b]), list(m.parameters()))
            for (k, gk), r in zip(per.items(), ref):
                _same(gk[b], r, f"per-example functional_call + grad, {k}, example {b}")


def check_vmap_refuses_scalar_examples(ctx: Ctx, name: str) -> None:
    """A per-example tensor of no dims where the op reads dim 0: refused by the vmap rule,
    which says it is about each example (batched, dim 0 would be the batch dim)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        xb = torch.ones(ctx.world, dtype=torch.float64)
        for f in (lambda t: spmd.reduce_scatter(t, "x", src=P, dst=V),
                  lambda t: spmd.convert(t, "x", src=R, dst=V),
                  lambda t: spmd.all_to_all(t, "x", src=V, dst=V)):
            try:
                vmap(f)(xb)
            except ValueError as e:
                assert "at least one dim (under torch.func.vmap: each example)" in str(e), e
            else:
                raise AssertionError("a batch of scalars accepted by an op that reads dim 0")


def check_check_mode_grad(ctx: Ctx, name: str) -> None:
    """torch.func.grad and vmap inside ``spmd.typecheck()``: the same gradients, and the types
    declared outside the transform are checked inside it (a wrong src is reported)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        x = values("V", [(3, 2)] * ctx.world, f"{name}/x")[ctx.rank]
        g = values("I", [(3, 2)] * ctx.world, f"{name}/g")[ctx.rank]

        def f(t: torch.Tensor) -> torch.Tensor:
            y = spmd.reinterpret(t * t, "x", src=V, dst=P)
            return (spmd.all_reduce(y, "x", src=P, dst=spmd.I) * g).sum()

        xl = x.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(f(xl), xl)
        with spmd.typecheck():
            got = grad(f)(spmd.declare(x.clone(), Tensor[V["x"]]))
            _same(got, ref, "torch.func.grad in check mode")
            for label, run in (
                    ("grad", lambda t: grad(lambda u: spmd.all_reduce(u, "x", src=P, dst=spmd.I)
                                            .sum())(t)),
                    ("vmap", lambda t: vmap(lambda u: spmd.all_reduce(u, "x", src=P, dst=R))(t))):
                try:
                    run(spmd.declare(x.clone(), Tensor[R["x"]]))
                except SpmdTypeError as e:
                    assert "spmd-src-mismatch" in str(e) and 'R["x"]' in str(e), e
                else:
                    raise AssertionError(f"check mode under torch.func.{label} accepted src=P on "
                                         f"an R tensor")


def check_global_redistribute(ctx: Ctx, name: str) -> None:
    """``spmd.redistribute(x, src=PS[...], dst=PS[...])`` (global SPMD, the planner's steps)
    under torch.func.grad, vjp, vmap and vmap(grad), for every case of rt_global."""
    import rt_global
    from spmd import PS

    with spmd.set_mesh(ctx.mesh("2x2")):
        for label, shape, src, dst in rt_global.CASES:
            def fn(t: torch.Tensor, src: Any = src, dst: Any = dst) -> torch.Tensor:
                return spmd.redistribute(t, src=src, dst=dst)

            whole = Tensor[PS[(None,) * len(shape)], R["dp", "tp"]]
            local = spmd.redistribute(torch.zeros(shape, dtype=torch.float64), src=whole, dst=src)
            seed = f"{name}/{label}/{ctx.rank}"
            x = values("V", [tuple(local.shape)], seed)[0]
            out = fn(x)
            g = values("V", [tuple(out.shape)], f"{seed}/g")[0]
            xl = x.clone().requires_grad_(True)
            (ref,) = torch.autograd.grad(fn(xl), xl, g)
            _same(grad(lambda t: (fn(t) * g).sum())(x), ref, f"{label}: torch.func.grad")
            _same(vjp(fn, x)[1](g)[0], ref, f"{label}: torch.func.vjp")
            xb = torch.stack([values("V", [tuple(x.shape)], f"{seed}/b{b}")[0] for b in range(B)])
            gb = torch.stack([values("V", [tuple(out.shape)], f"{seed}/gb{b}")[0]
                              for b in range(B)])
            _same(vmap(fn)(xb), torch.stack([fn(xb[b]) for b in range(B)]), f"{label}: vmap")
            loop = []
            for b in range(B):
                xi = xb[b].clone().requires_grad_(True)
                loop.append(torch.autograd.grad(fn(xi), xi, gb[b])[0])
            _same(vmap(grad(lambda t, gg: (fn(t) * gg).sum()))(xb, gb), torch.stack(loop),
                  f"{label}: vmap(grad)")


def check_grads_batched_model(ctx: Ctx, name: str) -> None:
    """Hutchinson's K probes at once on a tensor-parallel MLP (w1 S(0), w2 S(1) on the axis):
    ``torch.autograd.grad(g1, w1, grad_outputs=vs, is_grads_batched=True)`` over the
    create_graph gradient, plain and under ``spmd.typecheck()`` (the result is S(1): dim 0 is
    the batch), and ``torch.autograd.functional.jacobian`` / ``hessian`` with vectorize=True
    (legacy vmap inside), against a float64 single-process reference of the whole model."""
    import contextlib

    import torch.nn.functional as F
    from spmd import S

    f64 = torch.float64
    n, me = ctx.world, ctx.rank
    gen = torch.Generator().manual_seed(7)
    W1, W2 = torch.randn(8, 4, dtype=f64, generator=gen), torch.randn(4, 8, dtype=f64, generator=gen)
    VS = torch.randn(3, 8, 4, dtype=f64, generator=gen)
    X = torch.linspace(-1, 1, 8, dtype=f64).reshape(2, 4)
    w = W1.clone().requires_grad_(True)
    (g,) = torch.autograd.grad((F.linear(torch.tanh(F.linear(X, w)), W2) ** 2).sum(), w,
                               create_graph=True)
    (want,) = torch.autograd.grad(g, w, grad_outputs=VS, is_grads_batched=True)
    rows = slice(me * 8 // n, (me + 1) * 8 // n)

    def loss_of(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        x = spmd.declare(X.clone(), Tensor[R["x"]])
        a = torch.tanh(F.linear(x, w1))
        return (spmd.all_reduce(spmd.linear(a, w2, out_partial_axes="x"), "x", src=P,
                                dst=spmd.I) ** 2).sum()

    with spmd.set_mesh(ctx.mesh("1d")):
        for mode in ("plain", "check"):
            with spmd.typecheck() if mode == "check" else contextlib.nullcontext():
                w1 = spmd.declare(W1[rows].clone(), Tensor[S[0, "x"]]).requires_grad_(True)
                w2 = spmd.declare(W2[:, rows].clone(), Tensor[S[1, "x"]]).requires_grad_(True)
                vs = spmd.declare(VS[:, rows].clone(), Tensor[S[1, "x"]])
                (g1,) = torch.autograd.grad(loss_of(w1, w2), (w1,), create_graph=True)
                (hv,) = torch.autograd.grad(g1, (w1,), grad_outputs=(vs,), is_grads_batched=True)
                if mode == "check":
                    assert spmd.typeof(hv) == spmd.typeof(vs), spmd.typeof(hv)
                full = spmd.all_gather(hv, "x", src=S(1), dst=spmd.I)
            torch.testing.assert_close(full, want, msg=lambda m: f"{mode}: {m}")

        # jacobian / hessian, vectorized (the backward under torch's legacy vmap)
        XS = torch.randn(8, dtype=f64, generator=gen)

        def f(t: torch.Tensor) -> torch.Tensor:
            shard = spmd.convert(t, "x", src=spmd.I, dst=S(0))
            return spmd.all_gather(torch.sin(shard) * shard, "x", src=S(0), dst=spmd.I)

        def h(t: torch.Tensor) -> torch.Tensor:
            return spmd.all_reduce(spmd.sum(torch.sin(spmd.convert(t, "x", src=spmd.I,
                                                                   dst=S(0))) ** 2,
                                            out_partial_axes="x"), "x", src=P, dst=spmd.I)

        want_j = torch.autograd.functional.jacobian(lambda t: torch.sin(t) * t, XS)
        want_h = torch.autograd.functional.hessian(lambda t: (torch.sin(t) ** 2).sum(), XS)
        for vec in (False, True):
            torch.testing.assert_close(torch.autograd.functional.jacobian(f, XS, vectorize=vec),
                                       want_j, msg=lambda m: f"jacobian vectorize={vec}: {m}")
            torch.testing.assert_close(torch.autograd.functional.hessian(h, XS, vectorize=vec),
                                       want_h, msg=lambda m: f"hessian vectorize={vec}: {m}")


def _cases(n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    for op, src, dst, expert in transition_cases():
        yield f"{op}({src},{dst})", dict(op=op, src=src, dst=dst, expert=expert)
    for dst in ("R", "I"):
        yield f"all_reduce(P,{dst},avg)", dict(op="all_reduce", src="P", dst=dst, reduce_op="avg")
    for dst in ("V", *(f"S{i}" for i in DIMS)):
        yield (f"reduce_scatter(P,{dst},avg)",
               dict(op="reduce_scatter", src="P", dst=dst, reduce_op="avg"))
    for reduce_op in ("max", "min"):
        for src, dst in (("V", "R"), ("S0", "I")):
            yield (f"all_reduce({src},{dst},{reduce_op})",
                   dict(op="all_reduce", src=src, dst=dst, reduce_op=reduce_op))
    sizes = {1: [3], 2: [1, 3], 4: [1, 3, 0, 2]}[n]  # n: the axis size
    uneven = [("all_gather", f"S{i}", d) for i in DIMS for d in ("R", "I")]
    uneven += [("reduce_scatter", "P", f"S{i}") for i in DIMS]
    uneven += [("convert", s, f"S{i}") for i in DIMS for s in ("R", "I")]
    uneven += [("convert", f"S{i}", "P") for i in DIMS]
    for op, src, dst in uneven:
        yield f"{op}({src},{dst},sizes)", dict(op=op, src=src, dst=dst, sizes=sizes)
    forms = ["R", "I", "V", "P", "S0", "S1"]
    for src in forms:
        for dst in forms:
            if src != dst and route(_lt(src), _lt(dst)) is not None:
                yield f"redistribute({src},{dst})", dict(op="redistribute", src=src, dst=dst)


def _lt(t: str) -> LocalType:
    from rt_checks import local_type
    return local_type(t)


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    checks: list[tuple[str, Callable[[Ctx], None]]] = []
    # world 2: the 2-rank axis, and an axis of one rank (dp=1: the backward all-reduce returns
    # its input). world 4: the 4-rank group once, as the flattened (dp, tp) axis of a 2 x 2
    # mesh (the same group and numbers as a 1-d mesh of 4, plus the tuple axis). A gloo
    # collective over 3-4 ranks takes ~2.5-6 ms on a 2-core host (2 ranks: ~0.3 ms; session
    # 49), so the per-op table on a 1-d mesh of 4 as well doubled the suite's slowest world
    # (~80 s) for no new case.
    axes = ([("1d", "x", world), ("1xN", "one", 1)] if world == 2
            else [("2x2T", ("dp", "tp"), 4)])
    for mesh_key, axis, size in axes:
        where = mesh_key if isinstance(axis, str) else f"{mesh_key}/({','.join(axis)})"
        for label, kw in _cases(size):
            n = f"w{world}/func/{where}/{label}"
            checks.append((n, functools.partial(check_func_op, name=n, mesh_key=mesh_key,
                                                axis=axis, **kw)))
        n = f"w{world}/func/{where}/all_to_all(V,V,sizes,out_sizes)"
        checks.append((n, functools.partial(check_func_all_to_all_uneven, name=n,
                                            mesh_key=mesh_key, axis=axis)))
    checks += named_checks(world, "func", (check_functional_call_grad,
                                           check_vmap_refuses_scalar_examples,
                                           check_check_mode_grad, check_grads_batched_model))
    if world == 4:
        checks += named_checks(world, "func", (check_global_redistribute,))
    names = [c[0] for c in checks]
    assert len(names) == len(set(names)), "duplicate check names"
    return checks
