"""The check mode at the boundary with torch DTensor, on gloo ranks (run by
test_dtensor_world.py): ``DTensor.to_local()`` results are typed from the placements
(Replicate I, Shard(d) S(d), Partial() P, on the axes the mesh names), ``DTensor.from_local``
and torch's ``local_map`` check a typed value against theirs.  Each wrong program raises in
the check mode, its fix (pasted from the message) runs without error and gives the float64
reference exactly, and the wrong program run unchecked is measured wrong: before, the
boundary was untyped and these programs ran to wrong numbers in the check mode too (the
dtensor probe).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import local_map
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64
AXIS = "x"


def _raises(code: str, fn: Callable[[], Any], *parts: str) -> str:
    try:
        fn()
    except SpmdTypeError as e:
        assert e.code == code, (e.code, str(e))
        for p in parts:
            assert p in str(e), (p, str(e))
        return str(e)
    raise AssertionError(f"expected {code}, no error")


def _fix(message: str, op: str) -> str:
    """The ``op(...)`` call the message suggests (one level of nested parentheses)."""
    m = re.search(rf"\b({op}\((?:[^()]|\([^()]*\))*\))", message)
    assert m is not None, (op, message)
    return m.group(1)


def _paste(fix: str, **names: Any) -> Any:
    return eval("spmd." + fix, {"spmd": spmd, "R": R, "I": I, "P": P, "V": V, "S": S, **names})


def _str(t: Any) -> str:
    return str(t) if t else "untyped"


def check_to_local_types(ctx: Ctx, name: str) -> None:
    """to_local()/full_tensor() results have the placements' types on the mesh's axes only,
    with and without grad; a placement without SPMD meaning, an unnamed mesh dim: unknown.
    The methods are torch's own again once the block closes."""
    mesh = ctx.mesh("1d")
    mesh2 = ctx.mesh("1xN")
    unnamed = init_device_mesh("cpu", (ctx.world,))
    own = (DTensor.to_local, DTensor.full_tensor, vars(DTensor)["from_local"])
    base = torch.arange(8, dtype=F64).reshape(4, 2)
    seen: dict[str, str] = {}
    with spmd.set_mesh(mesh), spmd.typecheck():
        for grad in (False, True):
            b = base.clone().requires_grad_(grad)
            for key, dt in (
                    ("Replicate", DTensor.from_local(b, mesh, [Replicate()])),
                    ("Shard(0)", DTensor.from_local(b, mesh, [Shard(0)])),
                    ("Shard(-1)", DTensor.from_local(b, mesh, [Shard(-1)])),
                    ("Partial", DTensor.from_local(b, mesh, [Partial()])),
                    ("Partial(avg)", DTensor.from_local(b, mesh, [Partial("avg")])),
                    ("sub-mesh", DTensor.from_local(b, mesh2["x"], [Replicate()])),
                    ("2-d mesh", DTensor.from_local(b, mesh2, [Replicate(), Shard(1)])),
                    ("unnamed", DTensor.from_local(b, unnamed, [Replicate()]))):
                seen[f"{key} grad={grad}"] = _str(spmd.typeof(dt.to_local()))
            rep = DTensor.from_local(b, mesh, [Replicate()])
            seen[f"grad_placements=Partial grad={grad}"] = _str(
                spmd.typeof(rep.to_local(grad_placements=[Partial()])))
            seen[f"full_tensor grad={grad}"] = _str(
                spmd.typeof(DTensor.from_local(b, mesh, [Shard(0)]).full_tensor()))
    want = {"Replicate": 'Tensor[I["x"]]', "Shard(0)": 'Tensor[S[0, "x"]]',
            "Shard(-1)": 'Tensor[S[1, "x"]]', "Partial": 'Tensor[P["x"]]',
            "Partial(avg)": "untyped", "sub-mesh": 'Tensor[I["x"]]',
            "2-d mesh": 'Tensor[I["one"], S[1, "x"]]', "unnamed": "untyped",
            "grad_placements=Partial": 'Tensor[R["x"]]', "full_tensor": 'Tensor[I["x"]]'}
    for grad in (False, True):
        for k, v in want.items():
            assert seen[f"{k} grad={grad}"] == v, (k, grad, seen[f"{k} grad={grad}"], v)
    assert (DTensor.to_local, DTensor.full_tensor, vars(DTensor)["from_local"]) == own


def _rep_weight_program(ctx: Ctx, wrap: Callable[[torch.Tensor], DTensor],
                        sharded: bool = True) -> torch.Tensor:
    """A replicated weight w (R: its gradient is summed over the ranks, spmd's convention)
    used through a DTensor: loss = sum(w * c) with c sharded; returns the sum over the ranks
    of w.grad (what the all-reduce of an R parameter's gradient makes)."""
    mesh = ctx.mesh("1d")
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=F64))
    w_t = spmd.declare(w, Tensor[R[AXIS]])
    c_full = torch.tensor([2.0, 3.0, -1.0, 4.0], dtype=F64)
    n = 4 // ctx.world
    c = (DTensor.from_local(c_full[ctx.rank * n:(ctx.rank + 1) * n].clone(), mesh, [Shard(0)])
         if sharded else DTensor.from_local(c_full, mesh, [Replicate()]))
    loss = (wrap(w_t) * c).sum().full_tensor()
    loss.backward()
    return spmd.all_reduce(w.grad, AXIS, src=P, dst=R)


def check_from_local_replicate_of_r(ctx: Ctx, name: str) -> None:
    """An R value wrapped as Replicate (its backward gives every rank the whole gradient):
    spmd-mismatch with reinterpret(R, I), which gives the reference gradient exactly, as
    grad_placements=[Partial()] (R) does; unchecked, the summed gradient is world-size times
    it."""
    mesh = ctx.mesh("1d")
    ref = torch.tensor([2.0, 3.0, -1.0, 4.0], dtype=F64)
    with spmd.set_mesh(mesh):
        wrong = _rep_weight_program(ctx, lambda w: DTensor.from_local(w, mesh, [Replicate()]))
    assert_close(wrong, ctx.world * ref, rtol=0, atol=0)  # measured wrong
    with spmd.set_mesh(mesh), spmd.typecheck():
        message = _raises("spmd-mismatch", lambda: _rep_weight_program(
            ctx, lambda w: DTensor.from_local(w, mesh, [Replicate()])),
            'w passed to DTensor.from_local with placements [Replicate()] is Tensor[R["x"]]')
        fix = _fix(message, "reinterpret")
        assert fix == 'reinterpret(w, "x", src=R, dst=I)', message
        fixed = _rep_weight_program(
            ctx, lambda w: DTensor.from_local(_paste(fix, w=w), mesh, [Replicate()]))
        # R is Replicate() with grad_placements=[Partial()] (not offered as a fix: torch
        # cannot redistribute a sharded gradient to Partial)
        other = _rep_weight_program(ctx, lambda w: DTensor.from_local(
            w, mesh, [Replicate()], grad_placements=[Partial()]), sharded=False)
    assert_close(fixed, ref, rtol=0, atol=0)
    assert_close(other, ref, rtol=0, atol=0)


def check_from_local_gradient_free_r(ctx: Ctx, name: str) -> None:
    """Where no gradient flows R and I hold the same values (only their backward differs): a
    detached R parameter, or one under torch.no_grad(), wrapped as Replicate() for a
    checkpoint is accepted (it raised spmd-mismatch "R on ... where I is needed"), as an I
    value wrapped with grad_placements=[Partial()] is; the DTensor holds the parameter's
    values.  With the gradient flowing it is still the error, and a Partial value is one
    under no_grad too."""
    mesh = ctx.mesh("1d")
    mesh2 = ctx.mesh("1xN")
    base = torch.arange(8, dtype=F64).reshape(4, 2) / 4 + ctx.rank
    with spmd.set_mesh(mesh2), spmd.typecheck():
        w = spmd.declare(torch.nn.Parameter(base.clone()), Tensor[R["one"], S[0, AXIS]])
        with torch.no_grad():
            dt = DTensor.from_local(w.detach(), mesh2, [Replicate(), Shard(0)], run_check=False)
            dt2 = DTensor.from_local(w, mesh2, [Replicate(), Shard(0)], run_check=False)
        dt3 = DTensor.from_local(w.detach(), mesh2, [Replicate(), Shard(0)], run_check=False)
        _raises("spmd-mismatch", lambda: DTensor.from_local(w, mesh2, [Replicate(), Shard(0)]),
                'it is R on "one" where I is needed')
    with spmd.set_mesh(mesh), spmd.typecheck():
        r = spmd.declare(torch.nn.Parameter(base.clone()), Tensor[R[AXIS]])
        i = spmd.declare(base.clone(), Tensor[I[AXIS]])
        with torch.no_grad():
            DTensor.from_local(r, mesh, [Replicate()], run_check=False)
            DTensor.from_local(i, mesh, [Replicate()], grad_placements=[Partial()], run_check=False)
            p = spmd.declare(base.clone(), Tensor[P[AXIS]])
            _raises("spmd-mismatch", lambda: DTensor.from_local(p, mesh, [Replicate()]),
                    'it is P on "x" where I is needed')
        _raises("spmd-mismatch", lambda: DTensor.from_local(r, mesh, [Replicate()]),
                'it is R on "x" where I is needed')
    full = torch.cat([torch.arange(8, dtype=F64).reshape(4, 2) / 4 + k for k in range(ctx.world)])
    for d in (dt, dt2, dt3):
        assert not d.requires_grad
        assert_close(d.full_tensor(), full, rtol=0, atol=0)


def _partial_program(ctx: Ctx, wrap: Callable[[torch.Tensor], DTensor]) -> torch.Tensor:
    """Each rank's part of a sum (P), wrapped, read back whole: the sum over the ranks."""
    part = torch.tensor([1.0, 2.0, -3.0], dtype=F64) * (ctx.rank + 1)
    h = spmd.declare(part, Tensor[P[AXIS]])
    return wrap(h).full_tensor()


def check_from_local_partial_as_replicate(ctx: Ctx, name: str) -> None:
    """A P value wrapped as Replicate: spmd-mismatch with all_reduce(P, I), or
    placements=[Partial()]; both give the reference exactly; unchecked, each rank reads its
    own part."""
    mesh = ctx.mesh("1d")
    ref = torch.tensor([1.0, 2.0, -3.0], dtype=F64) * sum(range(1, ctx.world + 1))
    wrong = _partial_program(ctx, lambda h: DTensor.from_local(h, mesh, [Replicate()]))
    assert not torch.equal(wrong, ref)
    with spmd.set_mesh(mesh), spmd.typecheck():
        message = _raises("spmd-mismatch", lambda: _partial_program(
            ctx, lambda h: DTensor.from_local(h, mesh, [Replicate()])),
            'h passed to DTensor.from_local with placements [Replicate()] is Tensor[P["x"]]',
            "placements=[Partial()]")
        fix = _fix(message, "all_reduce")
        assert fix == 'all_reduce(h, "x", src=P, dst=I)', message
        fixed = _partial_program(ctx, lambda h: DTensor.from_local(_paste(fix, h=h), mesh,
                                                                   [Replicate()]))
        other = _partial_program(ctx, lambda h: DTensor.from_local(h, mesh, [Partial()]))
    assert_close(fixed, ref, rtol=0, atol=0)
    assert_close(other, ref, rtol=0, atol=0)


def check_from_local_invariant_as_partial(ctx: Ctx, name: str) -> None:
    """An I value wrapped as Partial() (counted once per rank) or as Shard(0): spmd-mismatch
    naming the placements that hold it ([Replicate()]); with those, the reference exactly."""
    mesh = ctx.mesh("1d")
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64)
    wrong = DTensor.from_local(x.clone(), mesh, [Partial()]).full_tensor()
    assert_close(wrong, ctx.world * x, rtol=0, atol=0)
    with spmd.set_mesh(mesh), spmd.typecheck():
        xi = spmd.declare(x.clone(), Tensor[I[AXIS]])
        _raises("spmd-mismatch", lambda: DTensor.from_local(xi, mesh, [Partial()]),
                "is Tensor[I[\"x\"]] but Tensor[P[\"x\"]] is expected",
                "placements=[Replicate()]")
        _raises("spmd-mismatch", lambda: DTensor.from_local(xi, mesh, [Shard(0)]),
                "placements=[Replicate()]")
        # a value no variable holds is named by its expression in the call
        _raises("spmd-mismatch", lambda: DTensor.from_local(xi * 2, mesh, [Partial()]),
                "xi * 2 passed to DTensor.from_local", 'convert(xi * 2, "x", src=I, dst=P)')
        xs = spmd.declare(x.clone(), Tensor[S[1, AXIS]])
        _raises("spmd-mismatch", lambda: DTensor.from_local(xs, mesh, [Shard(0)]),
                "S(1) on \"x\" where S(0) is needed", "placements=[Shard(1)]")
        ok = DTensor.from_local(xi, mesh, [Replicate()]).full_tensor()
        DTensor.from_local(spmd.declare(x.clone(), Tensor[V[AXIS]]), mesh, [Shard(0)])  # V fits
    assert_close(ok, x, rtol=0, atol=0)


def _tp_program(ctx: Ctx, fixed: bool) -> torch.Tensor:
    """A Replicate DTensor's local value (I) into a hand-written column-parallel linear;
    returns the gradient of the (untyped) leaf behind the DTensor."""
    mesh = ctx.mesh("1d")
    x = torch.tensor([[1.0, -1.0, 2.0], [0.5, 3.0, -2.0]], dtype=F64, requires_grad=True)
    w_full = torch.arange(12, dtype=F64).reshape(4, 3) - 5
    n = 4 // ctx.world
    w = spmd.declare(w_full[ctx.rank * n:(ctx.rank + 1) * n].clone().requires_grad_(True),
                     Tensor[S[0, AXIS]])
    x_dt = DTensor.from_local(x, mesh, [Replicate()])  # DTensor code: x is untyped
    xl = x_dt.to_local()
    if fixed:
        xl = spmd.reinterpret(xl, AXIS, src=I, dst=R)
    y = F.linear(xl, w)  # [2, FF/world], S(1)
    part = spmd.reinterpret((y * y).sum(), AXIS, src=V, dst=P)
    loss = spmd.all_reduce(part, AXIS, src=P, dst=I)
    loss.backward()
    return x.grad


def check_to_local_is_invariant(ctx: Ctx, name: str) -> None:
    """to_local() of a Replicate DTensor is I: fed to a column-parallel linear without
    reinterpret(I, R) it raises spmd-invariant-mix (before: untyped, the gradient summed on
    one rank only); with it, the reference gradient exactly."""
    mesh = ctx.mesh("1d")
    x = torch.tensor([[1.0, -1.0, 2.0], [0.5, 3.0, -2.0]], dtype=F64, requires_grad=True)
    w_full = torch.arange(12, dtype=F64).reshape(4, 3) - 5
    (F.linear(x, w_full) ** 2).sum().backward()
    ref = x.grad
    with spmd.set_mesh(mesh):
        wrong = _tp_program(ctx, fixed=False)
    assert not torch.equal(wrong, ref)
    with spmd.set_mesh(mesh), spmd.typecheck():
        _raises("spmd-invariant-mix", lambda: _tp_program(ctx, fixed=False),
                'Invariant on "x"', 'reinterpret(xl, "x", src=I, dst=R)')
        got = _tp_program(ctx, fixed=True)
    assert_close(got, ref, rtol=0, atol=0)


def check_to_local_partial_not_rechecked_in_backward(ctx: Ctx, name: str) -> None:
    """A Partial DTensor's local value (P) reduced by the user, the gradient run through
    torch's own from_local in to_local's backward (not the user's call: not checked); the
    same value read as plain I raises instead of running with the partial sums."""
    mesh = ctx.mesh("1d")
    a = torch.tensor([1.0, 2.0], dtype=F64, requires_grad=True)
    with spmd.set_mesh(mesh), spmd.typecheck():
        dt = DTensor.from_local(a * (ctx.rank + 1), mesh, [Partial()])  # untyped DTensor code
        local = dt.to_local()
        assert str(spmd.typeof(local)) == 'Tensor[P["x"]]'
        _raises("spmd-annotation", lambda: spmd.declare(dt.to_local(), Tensor[I[AXIS]]),
                "P to I is a reduction")
        total = spmd.all_reduce(local, AXIS, src=P, dst=I)
        (total * total).sum().backward()
    s = sum(range(1, ctx.world + 1))
    # d/da of sum((s a)^2) through this rank's part (r+1) a: 2 s a (r+1)
    assert_close(a.grad, 2 * s * torch.tensor([1.0, 2.0], dtype=F64) * (ctx.rank + 1),
                 rtol=0, atol=0)


def typed_ffn(x: Tensor[I["x"]], w3: Tensor[S[0, "x"]], w4: Tensor[S[1, "x"]]) -> Tensor[I["x"]]:
    x_r = spmd.reinterpret(x, "x", src=I, dst=R)
    h = torch.tanh(F.linear(x_r, w3))
    return spmd.all_reduce(spmd.linear(h, w4, out_partial_axes="x"), "x", src=P, dst=I)


def ones_of(x: Tensor[I["x"]]) -> Tensor[I["x"]]:
    return torch.ones_like(x)  # a factory: untyped in the check mode, its annotation says I


def _untyped_result_program(ctx: Ctx, out_placements: Any) -> torch.Tensor:
    mesh = ctx.mesh("1d")
    fn = local_map(ones_of, out_placements=out_placements, in_placements=([Replicate()],),
                   device_mesh=mesh)
    return fn(DTensor.from_local(torch.zeros(2, 3, dtype=F64), mesh, [Replicate()])).full_tensor()


def _local_map_program(ctx: Ctx, out_placements: Any, w3_placements: Any) -> torch.Tensor:
    mesh = ctx.mesh("1d")
    x = torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, -0.5]], dtype=F64)
    w3 = torch.arange(12, dtype=F64).reshape(4, 3) / 8
    w4 = torch.arange(12, dtype=F64).reshape(3, 4) / 16 - 0.25
    fn = local_map(typed_ffn, out_placements=out_placements,
                   in_placements=([Replicate()], w3_placements, [Shard(1)]),
                   device_mesh=mesh, redistribute_inputs=True)
    n = 4 // ctx.world
    x_dt = DTensor.from_local(x, mesh, [Replicate()])
    w3_dt = DTensor.from_local(w3[ctx.rank * n:(ctx.rank + 1) * n].clone(), mesh, [Shard(0)])
    w4_dt = DTensor.from_local(w4[:, ctx.rank * n:(ctx.rank + 1) * n].clone(), mesh, [Shard(1)])
    return fn(x_dt, w3_dt, w4_dt).full_tensor()


def check_local_map_placements(ctx: Ctx, name: str) -> None:
    """torch's local_map around a typed function (no @spmd.checked): an in_placements entry
    whose type is not the parameter's annotation raises before the function runs, naming the
    entry to write; out_placements=[Partial()] for its I result raises naming
    out_placements=[Replicate()]; the right placements give the reference exactly, and the
    wrong out_placements run unchecked give world-size times it."""
    x = torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, -0.5]], dtype=F64)
    w3 = torch.arange(12, dtype=F64).reshape(4, 3) / 8
    w4 = torch.arange(12, dtype=F64).reshape(3, 4) / 16 - 0.25
    ref = F.linear(torch.tanh(F.linear(x, w3)), w4)
    with spmd.set_mesh(ctx.mesh("1d")):
        wrong = _local_map_program(ctx, [Partial()], [Shard(0)])
    assert_close(wrong, ctx.world * ref)
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        _raises("spmd-mismatch", lambda: _local_map_program(ctx, [Partial()], [Shard(0)]),
                "the result of typed_ffn under local_map (out_placements=[Partial()])",
                "out_placements=[Replicate()]")
        _raises("spmd-mismatch", lambda: _local_map_program(ctx, [Replicate()], [Shard(1)]),
                "parameter 'w3' of typed_ffn under local_map is Tensor[S[0, \"x\"]]",
                "write in_placements[1] as [Shard(0)]")
        got = _local_map_program(ctx, [Replicate()], [Shard(0)])
        # a result the body left untyped: its annotation against out_placements
        _raises("spmd-mismatch", lambda: _untyped_result_program(ctx, [Partial()]),
                "the result of ones_of under local_map is Tensor[I[\"x\"]] but "
                "out_placements=[Partial()] gives it Tensor[P[\"x\"]]",
                "write out_placements as [Replicate()]")
        ones = _untyped_result_program(ctx, [Replicate()])
    assert_close(got, ref, rtol=0, atol=1e-15)
    assert_close(ones, torch.ones(2, 3, dtype=F64), rtol=0, atol=0)
    with spmd.set_mesh(ctx.mesh("1d")):
        assert_close(_untyped_result_program(ctx, [Partial()]),
                     ctx.world * torch.ones(2, 3, dtype=F64), rtol=0, atol=0)  # wrong unchecked


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(3, 4, bias=False, dtype=F64)
        self.down = torch.nn.Linear(4, 3, bias=False, dtype=F64)
        with torch.no_grad():
            self.up.weight.copy_(torch.arange(12, dtype=F64).reshape(4, 3) / 4 - 1)
            self.down.weight.copy_(torch.arange(12, dtype=F64).reshape(3, 4) / 8 - 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _styled_mlp(ctx: Ctx, colwise: Any) -> torch.nn.Module:
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    model = _Mlp()
    parallelize_module(model, ctx.mesh("1d"), {"up": colwise, "down": RowwiseParallel()})
    return model


def check_parallel_style_boundary(ctx: Ctx, name: str) -> None:
    """parallelize_module's styles wrap a module's input with from_local and unwrap its
    output with to_local: a sequence-sharded S(1) activation passed to ColwiseParallel()
    (which reads it as Replicate) raises, offering all_gather(S(1), I) or
    input_layouts=Shard(1), both exact against the float64 reference (unchecked, the wrong
    program's output is off); RowwiseParallel's local output is I."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    mesh = ctx.mesh("1d")
    xg = torch.arange(24, dtype=F64).reshape(2, 4, 3) / 4 - 1.5
    ref = _Mlp()(xg).detach()
    n = 4 // ctx.world
    x_local = xg[:, ctx.rank * n:(ctx.rank + 1) * n].clone()
    with spmd.set_mesh(mesh):
        wrong = _styled_mlp(ctx, ColwiseParallel())(x_local)
    assert not torch.equal(wrong, ref[:, ctx.rank * n:(ctx.rank + 1) * n])
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(xg.clone(), Tensor[I[AXIS]])
        x_s = spmd.convert(x, AXIS, src=I, dst=S(1))
        model = _styled_mlp(ctx, ColwiseParallel())
        message = _raises("spmd-mismatch", lambda: model(x_s),
                          "x passed to ColwiseParallel (which wraps it as [Replicate()]) is "
                          'Tensor[S[1, "x"]] but Tensor[I["x"]] is expected',
                          "or pass input_layouts=Shard(1) if x is meant as it is")
        # named as _Mlp.forward calls self.up(...) with it
        fixed = model(_paste(_fix(message, "all_gather"), x=x_s))
        assert str(spmd.typeof(fixed)) == 'Tensor[I["x"]]', spmd.typeof(fixed)
        other = _styled_mlp(ctx, ColwiseParallel(input_layouts=Shard(1)))(x_s)
    assert_close(fixed.detach(), ref, rtol=0, atol=0)
    assert_close(other.detach(), ref, rtol=0, atol=0)


class _FsdpLinear(torch.nn.Module):
    w: Tensor[R["x"]]  # the unsharded weight the forward uses: replicated over dp ("x")

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(8, dtype=F64).reshape(4, 2) / 4 - 0.5)
        self.seen = seen

    def forward(self, x: Tensor[S[0, "x"]]) -> Tensor[S[0, "x"]]:
        self.seen.append(_str(spmd.typeof(self.w)))
        return F.linear(x, self.w)


def _fsdp_step(ctx: Ctx, strict: bool) -> tuple[torch.Tensor, list[str]]:
    """FSDP2 over "x" (dp), local-mean loss, one SGD step in the check mode (foreach and
    single-tensor); returns the updated full weight and the weight's type in each forward."""
    from torch.distributed.fsdp import fully_shard

    mesh = ctx.mesh("1d")
    seen: list[str] = []
    model = _FsdpLinear(seen)
    fully_shard(model, mesh=mesh)
    xg = torch.arange(8, dtype=F64).reshape(4, 2) / 2 - 1
    yg = torch.arange(16, dtype=F64).reshape(4, 4) / 8
    n = 4 // ctx.world
    rows = slice(ctx.rank * n, (ctx.rank + 1) * n)
    with spmd.set_mesh(mesh), spmd.typecheck(strict=strict):
        spmd.declare_parameters(model)
        for foreach in (True, False):
            # this rank's own rows, typed V (docs/dtensor.md): its mean is this rank's loss,
            # FSDP averages the gradients (typed S(0), the mean would be a pending mean: an
            # error in both checkers since sessions 40/42)
            x = spmd.declare(xg[rows].clone(), Tensor[V[AXIS]])
            y = spmd.declare(yg[rows].clone(), Tensor[V[AXIS]])
            loss = F.mse_loss(model(x), y)  # this rank's mean: FSDP averages the gradients
            spmd.reinterpret(loss, AXIS, src=V, dst=P).backward()
            opt = torch.optim.SGD(model.parameters(), lr=0.5, foreach=foreach)
            opt.step()
            opt.zero_grad()
    w = model.w.full_tensor().detach()
    return w, seen


def check_fsdp2_declare_parameters(ctx: Ctx, name: str) -> None:
    """spmd.declare_parameters on an FSDP2 model: the unsharded weight each forward uses is
    declared (before: untyped, a false spmd-untyped in strict mode, and the sharded DTensor
    declared R gave opt.step a false spmd-partial-affine); two SGD steps give the float64
    reference (global-mean loss, one process)."""
    w = (torch.arange(8, dtype=F64).reshape(4, 2) / 4 - 0.5).requires_grad_(True)
    xg = torch.arange(8, dtype=F64).reshape(4, 2) / 2 - 1
    yg = torch.arange(16, dtype=F64).reshape(4, 4) / 8
    for _ in range(2):
        F.mse_loss(F.linear(xg, w), yg).backward()
        with torch.no_grad():
            w -= 0.5 * w.grad
        w.grad = None
    for strict in (False, True):
        got, seen = _fsdp_step(ctx, strict)
        assert seen == ['Tensor[R["x"]]'] * 2, seen
        assert_close(got, w.detach(), rtol=0, atol=1e-15)


def check_fsdp2_fused_adam(ctx: Ctx, name: str) -> None:
    """FSDP2 with Adam(fused=True), whose ``torch._fused_adam_`` the check mode now checks per
    parameter: the sharded DTensor parameters and FSDP's averaged gradients pass (no false
    error), and two steps in the check mode equal two fused=False steps outside it."""
    from torch.distributed.fsdp import fully_shard

    mesh = ctx.mesh("1d")
    xg = torch.arange(8, dtype=F64).reshape(4, 2) / 2 - 1
    yg = torch.arange(16, dtype=F64).reshape(4, 4) / 8
    n = 4 // ctx.world
    rows = slice(ctx.rank * n, (ctx.rank + 1) * n)
    weights = []
    for check, fused in ((False, False), (True, True)):
        seen: list[str] = []
        model = _FsdpLinear(seen)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=fused)
        with spmd.set_mesh(mesh), (spmd.typecheck() if check else contextlib.nullcontext()):
            if check:
                spmd.declare_parameters(model)
            for _ in range(2):
                x = spmd.declare(xg[rows].clone(), Tensor[V[AXIS]])  # this rank's rows: V
                y = spmd.declare(yg[rows].clone(), Tensor[V[AXIS]])
                loss = F.mse_loss(model(x), y)
                (spmd.reinterpret(loss, AXIS, src=V, dst=P) if check else loss).backward()
                opt.step()
                opt.zero_grad()
        if check:
            assert seen == ['Tensor[R["x"]]'] * 2, seen
        weights.append(model.w.full_tensor().detach())
    assert_close(weights[1], weights[0], rtol=0, atol=1e-15)


class _FsdpBlock(torch.nn.Module):
    w: Tensor[R["x"]]

    def __init__(self, a: int, b: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(b, a, dtype=F64, generator=g) * 0.3)

    def forward(self, x: Any) -> Any:
        return x @ self.w.t()


class _FsdpNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.c = _FsdpBlock(6, 8, 0), _FsdpBlock(8, 4, 1)

    def forward(self, x: Any) -> Any:
        return self.c(F.relu(self.a(x)))


def _reference_steps(ctx: Ctx) -> tuple[torch.Tensor, _FsdpNet]:
    """The whole batch and the net after two SGD steps on it in one process (float64)."""
    torch.manual_seed(5)
    xg = torch.randn(2 * ctx.world, 6, dtype=F64)
    ref = _FsdpNet()
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        ropt.zero_grad()
        ref(xg).pow(2).mean().backward()
        ropt.step()
    return xg, ref


def _two_checked_steps(ctx: Ctx, mesh: Any, model: torch.nn.Module, net: torch.nn.Module,
                       xg: torch.Tensor, declare: bool = True) -> None:
    """Two SGD steps of ``model`` (``net`` wrapped by FSDP2 or DDP, or ``net`` itself) on this
    rank's rows of ``xg``, the local-mean loss reinterpreted V -> P, in the check mode with
    ``net``'s parameters declared (as _reference_steps takes them on the whole batch)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = xg.chunk(ctx.world)[ctx.rank]
    with spmd.set_mesh(mesh), spmd.typecheck():
        if declare:
            spmd.declare_parameters(net)
        for _ in range(2):
            opt.zero_grad()
            loss = model(spmd.declare(x, Tensor[V[AXIS]])).pow(2).mean()
            spmd.reinterpret(loss, AXIS, src=V, dst=P).backward()
            opt.step()


def check_fsdp2_nested(ctx: Ctx, name: str) -> None:
    """FSDP2 applied per block, then to the root (the usual nesting): the check mode does not
    run FSDP's own post-backward Function (its chunk_cat of the unsharded parameters' P
    gradients raised a false spmd-partial-nonlinear naming the loss); two SGD steps give the
    float64 reference."""
    from torch.distributed.fsdp import fully_shard

    xg, ref = _reference_steps(ctx)
    net = _FsdpNet()
    mesh = ctx.mesh("1d")
    for block in (net.a, net.c):
        fully_shard(block, mesh=mesh)
    fully_shard(net, mesh=mesh)
    _two_checked_steps(ctx, mesh, net, net, xg)
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach(), q.detach(), rtol=0, atol=1e-15)


def check_ddp_step(ctx: Ctx, name: str) -> None:
    """torch DDP over "x" with declared parameters: DDP's reducer averages the gradients
    unseen by the check mode, so p.grad is not read as the dual P (opt.step raised a false
    spmd-partial-affine whose fix, pasted, reduced the gradients twice: regression probe 2);
    two SGD steps in the check mode give the float64 reference."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    xg, ref = _reference_steps(ctx)
    net = _FsdpNet()
    mesh = ctx.mesh("1d")
    _two_checked_steps(ctx, mesh, DDP(net, process_group=mesh.get_group(AXIS)), net, xg)
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.detach(), q.detach(), rtol=0, atol=1e-15)


def check_fsdp1_step(ctx: Ctx, name: str) -> None:
    """torch's FullyShardedDataParallel (FSDP1, ``use_orig_params=True``) over "x": its
    parameters between forwards are flat 1-d slices of this rank's shard (declared R by
    declare_parameters, their reduce-scattered gradients were read as the dual P: opt.step
    raised a false spmd-partial-affine, the probes).  Now the sharded parameters and their
    gradients are unknown (gradual), the unsharded weights each forward uses are declared
    from the annotations (R), and two SGD steps in the check mode give the float64
    reference."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    xg, ref = _reference_steps(ctx)
    mesh = ctx.mesh("1d")
    # declared after wrapping; before it too; before it only (the forward's weights are not
    # declared then, the sharded parameters keep the type: their gradients are still unknown);
    # use_orig_params=False (the modules' weights are plain tensors, not parameters, which
    # declare_parameters does not see: the forward is untyped, gradual)
    for early, orig, after in ((False, True, True), (True, True, True), (True, True, False),
                               (False, False, True)):
        net = _FsdpNet()
        if early:
            with spmd.set_mesh(mesh), spmd.typecheck():
                spmd.declare_parameters(net)
        seen: list[str] = []
        for block in (net.a, net.c):
            block.register_forward_hook(lambda m, args, out: seen.append(_str(spmd.typeof(m.w))))
        model = FSDP(net, process_group=mesh.get_group(AXIS), use_orig_params=orig,
                     device_id=torch.device("cpu"))
        _two_checked_steps(ctx, mesh, model, net, xg, declare=after)
        typed = orig and after
        assert seen == (['Tensor[R["x"]]'] if typed else ["untyped"]) * 4, seen
        with spmd.set_mesh(mesh), spmd.typecheck(strict=typed):  # no operand left untyped
            x = spmd.declare(xg.chunk(ctx.world)[ctx.rank].clone(), Tensor[V[AXIS]])
            spmd.reinterpret(model(x).pow(2).mean(), AXIS, src=V, dst=P).backward()
            torch.optim.SGD(model.parameters(), lr=0.0).step()
        with FSDP.summon_full_params(model):
            for p, q in zip(net.parameters(), ref.parameters()):
                assert_close(p.detach(), q.detach(), rtol=0, atol=1e-15)


class _RowShard(torch.nn.Module):
    w: Tensor[S[0, "x"]]  # this rank's rows of a global weight

    def __init__(self, ctx: Ctx, full: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(full.chunk(ctx.world)[ctx.rank].clone())


def check_swap_conversions(ctx: Ctx, name: str) -> None:
    """With torch's ``set_swap_module_params_on_conversion(True)``, ``m.double()`` /
    ``m.to(...)`` of a module whose parameter is typed (declared by declare_parameters, its
    gradient read in the check mode) swap the parameter with torch.utils.swap_tensors, which
    raised "Cannot swap t1 because it has weakref associated with it" (the check mode's side
    table), after the block and inside one.  Now the conversions run; the parameter and its
    gradient keep their S(0) type into the next block, where a wrong collective on the
    parameter still raises and the right one gives the float64 global weight.  FSDP2's
    DTensor parameters are swapped by ``_apply`` without the flag: ``model.to(...)`` after a
    checked step, then a second step, gives the float64 reference."""
    mesh = ctx.mesh("1d")
    full = torch.arange(6 * ctx.world, dtype=torch.float32).reshape(2 * ctx.world, 3) / 8
    flag = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m = _RowShard(ctx, full)
        with spmd.set_mesh(mesh), spmd.typecheck():
            spmd.declare_parameters(m)
            spmd.reinterpret((m.w * m.w).sum(), AXIS, src=V, dst=P).backward()  # w.grad: S(0)
            g = m.w.grad
            assert str(spmd.typeof(g)) == 'Tensor[S[0, "x"]]', spmd.typeof(g)
        w_id = id(m.w)
        m.double()  # after the block
        assert id(m.w) == w_id and m.w.dtype == F64 and m.w.grad.dtype == F64
        with spmd.set_mesh(mesh), spmd.typecheck():
            assert str(spmd.typeof(m.w)) == 'Tensor[S[0, "x"]]', spmd.typeof(m.w)
            assert str(spmd.typeof(m.w.grad)) == 'Tensor[S[0, "x"]]', spmd.typeof(m.w.grad)
            # inside the block (before any collective on the gradient: gloo may hold it a
            # moment after the call returns, and swap_tensors wants no other holder)
            m.to(torch.float32).to(F64)
            assert str(spmd.typeof(m.w)) == 'Tensor[S[0, "x"]]', spmd.typeof(m.w)
            assert str(spmd.typeof(m.w.grad)) == 'Tensor[S[0, "x"]]', spmd.typeof(m.w.grad)
            _raises("spmd-src-mismatch", lambda: spmd.all_reduce(m.w, AXIS, src=P, dst=R),
                    "m.w is S(0)")
            got = spmd.all_gather(m.w.detach(), AXIS, src=S(0), dst=I)
            grad = spmd.all_gather(m.w.grad, AXIS, src=S(0), dst=I)
        assert_close(got, full.to(F64), rtol=0, atol=0)
        assert_close(grad, 2 * full.to(F64), rtol=0, atol=0)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(flag)
    # FSDP2: one checked step, model.to(...) (swap_tensors of the DTensors), a second step
    from torch.distributed.fsdp import fully_shard

    xg, ref = _reference_steps(ctx)
    net = _FsdpNet()
    for block in (net.a, net.c):
        fully_shard(block, mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = xg.chunk(ctx.world)[ctx.rank]
    for step in range(2):
        with spmd.set_mesh(mesh), spmd.typecheck():
            spmd.declare_parameters(net)
            opt.zero_grad()
            loss = net(spmd.declare(x, Tensor[V[AXIS]])).pow(2).mean()
            spmd.reinterpret(loss, AXIS, src=V, dst=P).backward()
            opt.step()
        if step == 0:
            net.to(F64)
    for p, q in zip(net.parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach(), q.detach(), rtol=0, atol=1e-15)


def check_two_axes(ctx: Ctx, name: str) -> None:
    """A 2 x 2 (dp, tp) mesh: each placement types its own axis (a 2-d DTensor and a
    sub-mesh's); from_local checks each axis, the fix names the one that differs; the fixed
    value's gradient, summed over tp as an R gradient is, is the reference exactly."""
    mesh = ctx.mesh("2x2")
    base = torch.arange(8, dtype=F64).reshape(4, 2) / 4
    with spmd.set_mesh(mesh), spmd.typecheck():
        dt = DTensor.from_local(base.clone(), mesh, [Shard(0), Replicate()])
        assert str(spmd.typeof(dt.to_local())) == 'Tensor[I["tp"], S[0, "dp"]]', spmd.typeof(
            dt.to_local())
        sub = DTensor.from_local(base.clone(), mesh["tp"], [Partial()])
        assert str(spmd.typeof(sub.to_local())) == 'Tensor[P["tp"]]', spmd.typeof(sub.to_local())
        w = spmd.declare(torch.nn.Parameter(base.clone()), Tensor[S[0, "dp"], R["tp"]])
        message = _raises("spmd-mismatch",
                          lambda: DTensor.from_local(w, mesh, [Shard(0), Replicate()]),
                          'it is R on "tp" where I is needed')
        fix = _fix(message, "reinterpret")
        assert fix == 'reinterpret(w, "tp", src=R, dst=I)', message
        ok = DTensor.from_local(_paste(fix, w=w), mesh, [Shard(0), Replicate()])
        (ok * ok).sum().full_tensor().backward()
        g = spmd.all_reduce(w.grad, "tp", src=P, dst=R)
    assert_close(g, 2 * base, rtol=0, atol=0)


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    out = named_checks(world, "dtensor", (
        check_to_local_types, check_from_local_replicate_of_r,
        check_from_local_gradient_free_r, check_from_local_partial_as_replicate,
        check_from_local_invariant_as_partial, check_to_local_is_invariant,
        check_to_local_partial_not_rechecked_in_backward, check_local_map_placements,
        check_parallel_style_boundary, check_fsdp2_declare_parameters, check_fsdp2_fused_adam,
        check_fsdp2_nested, check_ddp_step, check_swap_conversions,
        check_fsdp1_step))
    if world == 4:
        out += named_checks(world, "dtensor", (check_two_axes,))
    return out
