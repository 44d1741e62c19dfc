"""torch.compile over the typed collectives, in gloo worlds (see rt_world.py).

For each op of the engine's table, one program runs every (src, dst) pair of that op
(``S`` forms on dims 0 and -1) and sums the results into a scalar; it is compiled with
``fullgraph=True`` (a graph break is a failure) and its loss and the gradient of every
input must equal the eager program's, which rt_checks.py proves against the spec.
``aot_eager`` traces forward and backward through Dynamo and AOTAutograd without
generating code; one program also goes through ``inductor`` (C++ code) when the machine
has a C++ compiler.
"""

from __future__ import annotations

import functools
import shutil
from typing import Any, Callable

import torch
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, input_shapes, local_type, marker, tensor, transition_cases, values
from spmd_mypy.engine.collectives import route

F64 = torch.float64


def _pairs(op: str) -> list[tuple[str, str, bool]]:
    if op == "redistribute":  # every route between the forms
        forms = ["R", "I", "V", "P", "S0", "S-1"]
        return [(s, d, False) for s in forms for d in forms
                if s != d and route(local_type(s), local_type(d)) is not None]
    return [(src, dst, expert) for o, src, dst, expert in transition_cases()
            if o == op and "S1" not in (src, dst)]


def check_compiled_op(ctx: Ctx, name: str, op: str, backend: str = "aot_eager") -> None:
    mesh = ctx.mesh("1d")
    n, me = ctx.world, ctx.rank
    pairs = _pairs(op)
    assert pairs, op
    fn = getattr(spmd, op)
    with spmd.set_mesh(mesh):
        xs = [values(src, input_shapes(op, src, dst, n, None), f"{name}/{src}{dst}")[me]
              for src, dst, _ in pairs]

        def outputs(*inputs: torch.Tensor) -> list[torch.Tensor]:
            outs = []
            for (src, dst, expert), x in zip(pairs, inputs):
                kwargs: dict[str, Any] = {"src": marker(src), "dst": marker(dst)}
                if expert:
                    kwargs["expert_mode"] = True
                outs.append(fn(x, "x", **kwargs))
            return outs

        shapes = [o.shape for o in outputs(*xs)]
        ws = [tensor(f"{name}/w{k}", tuple(sh)) for k, sh in enumerate(shapes)]

        def program(*inputs: torch.Tensor) -> torch.Tensor:
            total = inputs[0].new_zeros(())
            for y, w in zip(outputs(*inputs), ws):
                total = total + (y * w).sum() + 0.5 * (y * y).sum()
            return total

        _compare(program, xs, backend, name)


def check_compiled_einsum_family(ctx: Ctx, name: str, backend: str = "aot_eager") -> None:
    """spmd.einsum/matmul/linear/sum with out_partial_axes, then the all_reduce, and a
    redistribute: the einsum family's reinterpret inside a compiled step."""
    mesh = ctx.mesh("1d")
    with spmd.set_mesh(mesh):
        g = torch.Generator().manual_seed(7 + ctx.rank)
        h, w = torch.randn(3, 4, generator=g, dtype=F64), torch.randn(4, 5, generator=g, dtype=F64)

        def program(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            a = spmd.einsum("ij,jk->ik", h, w, out_partial_axes="x")
            b = spmd.matmul(h, w, out_partial_axes="x")
            c = spmd.linear(h, w.t(), out_partial_axes="x")
            d = spmd.sum(h, 0, out_partial_axes="x")
            r = spmd.all_reduce(a + b + c, "x", src=spmd.P, dst=spmd.R)
            s = spmd.redistribute(d, "x", src=spmd.P, dst=spmd.I)
            return (r * r).sum() + s.sum()

        _compare(program, [h, w], backend, name)


def check_compiled_follows_the_mesh(ctx: Ctx, name: str) -> None:
    """A function compiled under one mesh, called under another whose axis orders the
    ranks the other way: traced again (the gather's order follows the new mesh)."""
    from torch.distributed.device_mesh import DeviceMesh

    forward = DeviceMesh("cpu", torch.arange(ctx.world), mesh_dim_names=("x",))
    backward = DeviceMesh("cpu", torch.arange(ctx.world).flip(0), mesh_dim_names=("x",))
    x = torch.full((2,), float(ctx.rank), dtype=F64)

    def gather(x: torch.Tensor) -> torch.Tensor:
        return spmd.all_gather(x, "x", src=spmd.V, dst=spmd.R) * 1.0

    torch._dynamo.reset()
    compiled = torch.compile(gather, backend="aot_eager", fullgraph=True)
    for mesh in (forward, backward, forward):
        with spmd.set_mesh(mesh):
            assert_close(compiled(x), gather(x), msg=lambda m: f"{name}: {m}")
    with spmd.set_mesh(backward):
        assert gather(x)[0, 0].item() == ctx.world - 1  # the orders do differ


def check_compiled_under_typecheck(ctx: Ctx, name: str) -> None:
    """A compiled function called inside spmd.typecheck() is checked as in eager: its
    result has the type, and a Partial through relu raises.  The check mode runs compiled
    functions eagerly (torch's force_eager stance), so fullgraph=True works there too (it
    raised torch._dynamo.exc.Unsupported on the mode's bookkeeping)."""
    from spmd import R, Tensor, V
    from spmd_mypy.engine.errors import SpmdTypeError

    x = torch.randn(4, 8, dtype=F64)
    w = torch.randn(8, 4, dtype=F64, requires_grad=True)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = spmd.reinterpret(x @ w, "x", src=spmd.V, dst=spmd.P)
        return spmd.all_reduce(y, "x", src=spmd.P, dst=spmd.R).relu()

    def bad(a: torch.Tensor) -> torch.Tensor:
        return spmd.reinterpret(a, "x", src=spmd.V, dst=spmd.P).relu()

    torch._dynamo.reset()
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        spmd.declare(x, Tensor[R["x"]])
        spmd.declare(w, Tensor[V["x"]])
        out = torch.compile(f, backend="aot_eager")(x, w)
        assert str(spmd.typeof(out)) == 'Tensor[R["x"]]', spmd.typeof(out)
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
        assert str(spmd.typeof(out)) == 'Tensor[R["x"]]', spmd.typeof(out)
        try:
            torch.compile(bad, backend="aot_eager", fullgraph=True)(x @ w)
        except SpmdTypeError as e:
            assert "cannot go through relu" in str(e), e
        else:
            raise AssertionError(f"{name}: a Partial through relu passed under typecheck")
    # leaving the check mode gives torch.compile back its stance: it compiles again
    import torch._dynamo.eval_frame as eval_frame
    assert eval_frame._stance.stance == "default", eval_frame._stance


def check_compiled_fast_paths(ctx: Ctx, name: str) -> None:
    """The no-grad fast paths (which call the ProcessGroup itself in eager mode: Dynamo cannot
    trace that call) compile with fullgraph=True to a graph of functional collectives (the
    torch.distributed twin each direct call names in _torchdynamo_inline) and give the raw
    call's numbers."""
    from rt_checks import FAST_FORMS, _raw_fast

    from spmd import _dist_utils

    for fn in (_dist_utils.all_to_all_single, _dist_utils.all_reduce_sum,
               _dist_utils.all_gather_single, _dist_utils.reduce_scatter_sum):
        assert fn._torchdynamo_inline is not fn, fn  # the eager body is not what is traced
    mesh = ctx.mesh("1d")
    pg = mesh.get_group("x")
    n, me = ctx.world, ctx.rank
    with spmd.set_mesh(mesh), torch.no_grad():
        for op, src, dst in FAST_FORMS:
            call = getattr(spmd, op)
            kw = {"src": marker(src), "dst": marker(dst)}
            x = values(src, input_shapes(op, src, dst, n, None), f"{name}/{op}{src}{dst}")[me]
            call(x, "x", **kw)  # eager first: the fast path's group is found
            # complex: not all_to_all (torch's functional all_to_all_single hands gloo the
            # complex tensor, which it refuses: "Invalid scalar type", before the direct calls
            # too) nor reduce_scatter (torch's wrapper takes no real view of it either)
            complex_ok = op in ("all_reduce", "all_gather")
            for t in (x, x.float()) + ((torch.complex(x, -x),) if complex_ok else ()):
                graphs: list[torch.fx.GraphModule] = []

                def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
                    graphs.append(gm)
                    return gm.forward

                torch._dynamo.reset()
                out = torch.compile(lambda y: call(y, "x", **kw) * 2, backend=backend,
                                    fullgraph=True)(t)
                assert len(graphs) == 1, (op, len(graphs))
                targets = {str(node.target) for node in graphs[0].graph.nodes}
                assert any("_c10d_functional" in t_ for t_ in targets), (op, targets)
                assert_close(out, _raw_fast(op, t, pg) * 2, msg=lambda m: f"{op} {t.dtype}: {m}")


def _compare(program: Callable[..., torch.Tensor], xs: list[torch.Tensor], backend: str,
             name: str) -> None:
    torch._dynamo.reset()
    eager_in = [x.clone().requires_grad_(True) for x in xs]
    eager = program(*eager_in)
    eager.backward()
    compiled = torch.compile(program, backend=backend, fullgraph=True)
    comp_in = [x.clone().requires_grad_(True) for x in xs]
    out = compiled(*comp_in)
    out.backward()
    assert_close(out, eager, msg=lambda m: f"{name}: compiled loss differs: {m}")
    for k, (a, b) in enumerate(zip(comp_in, eager_in)):
        assert a.grad is not None and b.grad is not None, (name, k)
        assert_close(a.grad, b.grad, msg=lambda m: f"{name}: gradient of input {k} differs: {m}")
    # a second call reuses the graph (same shapes): still the same numbers
    again = compiled(*[x.clone() for x in xs])
    assert_close(again, eager.detach())
    # inference: no autograd (the runtime's eager fast paths are not traced)
    torch._dynamo.reset()
    with torch.no_grad():
        plain = torch.compile(program, backend=backend, fullgraph=True)(*[x.clone() for x in xs])
    assert_close(plain, eager.detach(), msg=lambda m: f"{name}: compiled under no_grad: {m}")


OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret", "convert",
       "redistribute")


def has_cxx() -> bool:
    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    out = []
    for op in OPS:
        n = f"w{world}/compile/{op}"
        out.append((n, functools.partial(check_compiled_op, name=n, op=op)))
    n = f"w{world}/compile/no-grad-fast-paths"
    out.append((n, functools.partial(check_compiled_fast_paths, name=n)))
    n = f"w{world}/compile/mesh-change-traces-again"
    out.append((n, functools.partial(check_compiled_follows_the_mesh, name=n)))
    n = f"w{world}/compile/under-typecheck"
    out.append((n, functools.partial(check_compiled_under_typecheck, name=n)))
    n = f"w{world}/compile/einsum-family"
    out.append((n, functools.partial(check_compiled_einsum_family, name=n)))
    if has_cxx():
        n = f"w{world}/compile/inductor/einsum-family"
        out.append((n, functools.partial(check_compiled_einsum_family, name=n, backend="inductor")))
    return out
