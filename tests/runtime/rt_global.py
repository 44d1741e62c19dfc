"""Global SPMD on gloo: ``spmd.redistribute(x, src=PS[...], dst=PS[...])`` and ``local_map``.

Each redistribute case starts from a global tensor ``X`` laid out as ``src`` on every
rank (a pending sum split unevenly over the P axes), runs the planner's plan, and
checks on every rank, from all ranks' locals gathered by plain torch.distributed:

- forward: the result is ``X`` laid out as ``dst`` (the P axes summed);
- backward: with the gradient ``G`` laid out as the dual of ``dst``, ``x.grad`` is
  ``G`` laid out as the dual of ``src`` (the redistribute is the identity on the
  global value, so its gradient is too);
- the plan issues exactly the collectives the engine's plan counts (a counter on
  the communication primitives), and under ``spmd.typecheck()`` the result has
  type ``dst``.

The layouts are computed here from the types alone (no runtime code), so a wrong
step, a wrong rank order of a flattened group or a wrong backward shows.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.testing import assert_close

import spmd
from spmd import I, P, PS, R, S, Tensor, V
from spmd_mypy.engine.redistribute import plan as engine_plan
from spmd_mypy.engine.types import Kind, SpmdType, dual

F64 = torch.float64

# (name, global shape, src, dst): src/dst as Tensor[...] annotations
CASES: list[tuple[str, tuple[int, ...], Any, Any]] = [
    ("(dp,tp)->(tp,dp)", (8,), Tensor[PS[("dp", "tp"),]], Tensor[PS[("tp", "dp"),]]),
    ("P(dp,tp)->R", (4, 8), Tensor[PS[None, None], P["dp", "tp"]],
     Tensor[PS[None, None], R["dp", "tp"]]),
    ("P(dp,tp)->I", (4, 8), Tensor[PS[None, None], P["dp", "tp"]],
     Tensor[PS[None, None], I["dp", "tp"]]),
    ("P->S((dp,tp),0)", (4, 8), Tensor[PS[None, None], P["dp", "tp"]], Tensor[PS[("dp", "tp"), None]]),
    ("dp:0->1", (4, 8), Tensor[PS["dp", None], R["tp"]], Tensor[PS[None, "dp"], R["tp"]]),
    ("(dp,tp)->(tp,dp) 2d", (4, 8), Tensor[PS["dp", "tp"]], Tensor[PS["tp", "dp"]]),
    ("S+P->I", (4, 8), Tensor[PS[None, "tp"], P["dp"]], Tensor[PS[None, None], I["dp", "tp"]]),
    ("tp:1->0", (4, 8), Tensor[PS[None, "tp"], R["dp"]], Tensor[PS["tp", None], R["dp"]]),
    ("gather tp", (4, 8), Tensor[PS[None, "tp"], R["dp"]], Tensor[PS[None, None], R["dp", "tp"]]),
    ("R->shard", (4, 8), Tensor[PS[None, None], R["dp", "tp"]], Tensor[PS["tp", "dp"]]),
    ("I->shard flat", (4, 8), Tensor[PS[None, None], I["dp", "tp"]], Tensor[PS[("dp", "tp"), None]]),
    ("flat 0->1", (4, 8), Tensor[PS[("dp", "tp"), None]], Tensor[PS[None, ("dp", "tp")]]),
    ("S->P", (4, 8), Tensor[PS["dp", "tp"]], Tensor[PS[None, None], P["dp", "tp"]]),
    ("identity", (4, 8), Tensor[PS[None, "tp"], R["dp"]], Tensor[PS[None, "tp"], R["dp"]]),
    ("3d", (4, 4, 4), Tensor[PS["dp", None, "tp"]], Tensor[PS[None, ("tp", "dp"), None]]),
    ("reduce-scatter tp", (4, 8), Tensor[PS["dp", None], P["tp"]], Tensor[PS["dp", "tp"]]),
    ("(tp,dp)->dp,tp", (4, 8), Tensor[PS[("tp", "dp"), None]], Tensor[PS["dp", "tp"]]),
    ("R,P mixed", (4, 8), Tensor[PS[None, None], R["dp"], P["tp"]],
     Tensor[PS["tp", None], I["dp"]]),
    ("bare PS", (4, 8), PS[None, "tp"], PS["tp", None]),
]


def _type(t: Any) -> SpmdType:
    from spmd._global import global_type_of

    return global_type_of(t, "src")


class Layout:
    """Where each rank sits on the mesh, and how a type lays a global tensor out."""

    def __init__(self, mesh: Any) -> None:
        self.mesh = mesh
        self.names = tuple(mesh.mesh_dim_names)
        self.sizes = tuple(mesh.mesh.shape)
        self.coords: dict[int, tuple[int, ...]] = {}
        table = mesh.mesh
        for flat in range(table.numel()):
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), table.shape))
            self.coords[int(table[idx])] = idx

    def size(self, a: str) -> int:
        return self.sizes[self.names.index(a)]

    def index(self, rank: int, axes: tuple[str, ...]) -> int:
        """Row-major index of ``rank`` over ``axes`` (in the order given)."""
        k = 0
        for a in axes:
            k = k * self.size(a) + self.coords[rank][self.names.index(a)]
        return k

    def chunk(self, X: torch.Tensor, t: SpmdType, rank: int) -> torch.Tensor:
        """``X`` cut as ``t``'s partition spec says, for ``rank`` (P axes ignored)."""
        out = X
        for d, entry in enumerate(t.spec or ()):
            if entry:
                n = math.prod(self.size(a) for a in entry)
                out = out.chunk(n, d)[self.index(rank, entry)]
        return out

    def partial_axes(self, t: SpmdType) -> tuple[str, ...]:
        return tuple(a for a in self.names if (lt := t.get(a)) is not None and lt.kind is Kind.P)

    def local(self, X: torch.Tensor, t: SpmdType, rank: int) -> torch.Tensor:
        """``rank``'s local tensor of ``X`` as ``t``: a pending sum split unevenly."""
        out = self.chunk(X, t, rank).clone()
        ps = self.partial_axes(t)
        if ps:
            n = math.prod(self.size(a) for a in ps)
            out = out * ((self.index(rank, ps) + 1) / (n * (n + 1) / 2))
        return out

    def check(self, locals_: dict[int, torch.Tensor], X: torch.Tensor, t: SpmdType, what: str
              ) -> None:
        """Every rank's local is ``X`` as ``t`` (summed over the P axes)."""
        ps = set(self.partial_axes(t))
        for r in locals_:
            group = [q for q in locals_
                     if all(self.coords[q][i] == self.coords[r][i]
                            for i, a in enumerate(self.names) if a not in ps)]
            total = functools.reduce(torch.add, [locals_[q] for q in group])
            assert_close(total, self.chunk(X, t, r), msg=lambda m: f"{what}, rank {r}: {m}")


def _gather_all(t: torch.Tensor, world: int) -> dict[int, torch.Tensor]:
    shape = torch.tensor(list(t.shape) + [0] * (4 - t.ndim), dtype=torch.int64)
    shapes = [torch.zeros_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    numel = max(int(torch.prod(s[s > 0])) if t.ndim else 1 for s in shapes)
    flat = torch.zeros(numel, dtype=t.dtype)
    flat[: t.numel()] = t.detach().reshape(-1)
    flats = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(flats, flat)
    out = {}
    for r, (s, f) in enumerate(zip(shapes, flats)):
        dims = [int(v) for v in s[: t.ndim]]
        out[r] = f[: math.prod(dims)].reshape(dims)
    return out


def _dual_type(t: SpmdType) -> SpmdType:
    return SpmdType(tuple((a, dual(lt)) for a, lt in t.axes), t.spec)


class _Counter:
    """Counts the communication primitives the runtime issues (spmd._dist_utils)."""

    NAMES = ("all_reduce", "all_reduce_", "all_gather", "reduce_scatter", "all_to_all")

    def __init__(self) -> None:
        from spmd import _dist_utils

        self.mod = _dist_utils
        self.count = 0
        self.saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> _Counter:
        for n in self.NAMES:
            fn = getattr(self.mod, n)
            self.saved[n] = fn

            def wrapped(*a: Any, _fn: Callable[..., Any] = fn, **k: Any) -> Any:
                self.count += 1
                return _fn(*a, **k)

            setattr(self.mod, n, wrapped)
        return self

    def __exit__(self, *exc: object) -> None:
        for n, fn in self.saved.items():
            setattr(self.mod, n, fn)


def mesh_for(ctx: Any) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    key = "global-mesh"
    m = ctx._meshes.get(key)
    if m is None:
        shape = (2, 2) if ctx.world == 4 else (1, 2)
        m = ctx._meshes[key] = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    return m


def check_redistribute(ctx: Any, name: str, case: str, shape: tuple[int, ...], src: Any,
                       dst: Any, checked: bool, declared: Any = None) -> None:
    """The plan's steps on gloo against the global tensor, forward and backward, with the
    collective counts the planner states.  ``declared``: the type x is declared with in
    check mode where not src itself (a local type src's spec describes)."""
    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    g = torch.Generator().manual_seed(hash(case) % 2**31)
    X = torch.randn(shape, generator=g, dtype=F64)
    G = torch.randn(shape, generator=g, dtype=F64)
    with spmd.set_mesh(mesh):
        p = engine_plan(_type(src), _type(dst), lay.names)
        assert not p.errors, p.errors
        src_t, dst_t = p.src, p.dst  # resolved: every axis named
        x = lay.local(X, src_t, ctx.rank).requires_grad_(True)
        with _Counter() as fwd:
            if checked:
                with spmd.typecheck():
                    spmd.declare(x, declared if declared is not None else _annotation(src_t))
                    y = spmd.redistribute(x, src=src, dst=dst)
                    got = spmd.typeof(y)
                    want = dst_t if declared is None else SpmdType.of(  # + axes only x names
                        {**_type(declared).as_dict(), **dst_t.as_dict()}, dst_t.spec)
                    assert got == want, f"typeof(y) = {got}, expected {want}"
            else:
                y = spmd.redistribute(x, src=src, dst=dst)
        assert fwd.count == p.collectives, (fwd.count, p.collectives, p.render())
        lay.check(_gather_all(y, ctx.world), X, dst_t, f"{case}: forward")
        gy = lay.local(G, _dual_type(dst_t), ctx.rank)
        with _Counter() as bwd:
            y.backward(gy)
        assert bwd.count == p.backward_collectives, (bwd.count, p.backward_collectives)
        assert x.grad is not None
        lay.check(_gather_all(x.grad, ctx.world), G, _dual_type(src_t), f"{case}: backward")


def _annotation(t: SpmdType) -> Any:
    import typing

    return typing.Annotated[torch.Tensor, t]


def check_redistribute_errors(ctx: Any, name: str) -> None:
    from spmd_mypy.engine.errors import SpmdTypeError

    mesh = mesh_for(ctx)
    with spmd.set_mesh(mesh):
        x = torch.zeros(4, 8, dtype=F64)
        for src, dst, needle in (
            (PS[None, "tp"], PS["tp"], "keeps the rank"),
            (Tensor[PS[None, None], V["tp"]], PS["tp", None], "outside its partition spec"),
            (PS["dp", "dp"], PS[None, None], "partition spec"),
            (PS["dp", "xx"], PS[None, None], "unknown mesh axis"),
        ):
            try:
                spmd.redistribute(x, src=src, dst=dst)
            except (SpmdTypeError, ValueError, TypeError) as e:
                assert needle in str(e), (needle, str(e))
            else:
                raise AssertionError(f"no error for {src} -> {dst}")
        # in check mode, src must describe x
        with spmd.typecheck():
            xt = spmd.declare(torch.zeros(4, 8, dtype=F64), Tensor[PS["tp", None], R["dp"]])
            try:
                spmd.redistribute(xt, src=PS[None, "tp"], dst=PS[None, None])
            except SpmdTypeError as e:
                assert e.code == "spmd-src-mismatch" and "pass src=" in str(e), str(e)
            else:
                raise AssertionError("src mismatch not caught")


def check_local_map(ctx: Any, name: str) -> None:
    """A row-parallel linear in local_map: values as plain torch; types switched in check mode."""
    from spmd_mypy.engine.errors import SpmdTypeError

    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    g = torch.Generator().manual_seed(7)
    H = torch.randn(3, 8, generator=g, dtype=F64)
    W = torch.randn(8, 5, generator=g, dtype=F64)
    tp = lay.size("tp")
    k = lay.index(ctx.rank, ("tp",))

    @spmd.local_map(in_types=(Tensor[PS[None, "tp"]], Tensor[PS["tp", None]]),
                    out_types=Tensor[PS[None, None], P["tp"]], axes=("tp",))
    def row_parallel(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return spmd.reinterpret(h @ w, "tp", src=V, dst=P)

    @spmd.local_map(in_types=(Tensor[PS[None, "tp"]], Tensor[PS["tp", None]]),
                    out_types=Tensor[PS[None, None], P["tp"]], axes=("tp",))
    def forgot_reinterpret(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return h @ w

    with spmd.set_mesh(mesh):
        h = H.chunk(tp, 1)[k].clone().requires_grad_(True)
        w = W.chunk(tp, 0)[k].clone()
        for checking in (False, True):
            with spmd.typecheck() if checking else _null():
                if checking:
                    spmd.declare(h, Tensor[PS[None, "tp"]])
                    spmd.declare(w, Tensor[PS["tp", None]])
                y = row_parallel(h, w)
                if checking:
                    t = spmd.typeof(y)
                    assert t is not None and t.spec == ((), ()) and str(t.get("tp")) == "P", t
                    assert spmd.typeof(h).spec == ((), ("tp",)), spmd.typeof(h)  # restored
                out = spmd.redistribute(y, src=Tensor[PS[None, None], P["tp"]],
                                        dst=Tensor[PS[None, None], R["tp"]])
            assert_close(out, H @ W)
        with spmd.typecheck():
            spmd.declare(h, Tensor[PS[None, "tp"]])
            spmd.declare(w, Tensor[PS["tp", None]])
            try:
                forgot_reinterpret(h, w)
            except SpmdTypeError as e:
                assert "out_types" in str(e) and "reinterpret" in str(e) and e.code == "spmd-mismatch", str(e)
            else:
                raise AssertionError("local_map exit mismatch not caught")


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def suite(world: int) -> list[tuple[str, Callable[[Any], None]]]:
    checks: list[tuple[str, Callable[[Any], None]]] = []
    for case, shape, src, dst in CASES:
        for checked in (False, True):
            n = f"w{world}/global/redistribute/{case}" + ("/typecheck" if checked else "")
            checks.append((n, functools.partial(check_redistribute, name=n, case=case, shape=shape,
                                                src=src, dst=dst, checked=checked)))
    # a local-typed x: its dims read at the rank src's spec states (S(-1) of a rank-2 tensor
    # is the S(1) that PS[None, "tp"] states; S(-2) of a rank-3 one is dim 1)
    for case, shape, src, dst, declared in (
            ("local-S(-1)-as-PS[None, tp]", (4, 8), PS[None, "tp"], PS[None, None],
             Tensor[S[-1, "tp"], R["dp"]]),
            ("local-S(0)-S(-2)-as-PS[dp, tp, None]", (4, 8, 2), PS["dp", "tp", None],
             PS[None, None, "dp"], Tensor[S[0, "dp"], S[-2, "tp"]])):
        n = f"w{world}/global/redistribute/{case}/typecheck"
        checks.append((n, functools.partial(
            check_redistribute, name=n, case=case, shape=shape, src=src, dst=dst, checked=True,
            declared=declared)))
    n = f"w{world}/global/redistribute-errors"
    checks.append((n, functools.partial(check_redistribute_errors, name=n)))
    n = f"w{world}/global/local_map"
    checks.append((n, functools.partial(check_local_map, name=n)))
    checks += prop_suite(world)
    n = f"w{world}/global/per-axis-collective"
    checks.append((n, functools.partial(check_per_axis_collective_on_global, name=n)))
    n = f"w{world}/global/broadcast fix"
    checks.append((n, functools.partial(check_broadcast_fix, name=n)))
    n = f"w{world}/global/torch-optimizers"
    checks.append((n, functools.partial(check_torch_optimizers, name=n)))
    return checks


def check_torch_optimizers(ctx: Any, name: str) -> None:
    """torch.optim's Adam, AdamW (foreach and single-tensor, amsgrad: addcmul_, addcdiv_,
    lerp_, maximum(out=), their _foreach forms) and SGD with momentum stepping each rank's
    shard of a parameter declared with a partition spec, under spmd.typecheck(): no error,
    the parameter keeps its type, and the shards reassemble to the unsharded optimizer's
    parameter after three steps."""
    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    makers: list[tuple[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]]] = [
        ("AdamW foreach", lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.01,
                                                       foreach=True)),
        ("AdamW single", lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.01,
                                                      foreach=False)),
        ("Adam foreach amsgrad", lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True,
                                                             foreach=True)),
        ("Adam single amsgrad", lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True,
                                                            foreach=False)),
        ("SGD momentum foreach", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                            nesterov=True, foreach=True)),
        ("SGD momentum single", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                           foreach=False)),
    ]
    g = torch.Generator().manual_seed(11)
    W = torch.randn(4, 8, generator=g, dtype=F64)
    Gs = [torch.randn(4, 8, generator=g, dtype=F64) for _ in range(3)]
    with spmd.set_mesh(mesh):
        for ann in (Tensor[PS["tp", None], R["dp"]], Tensor[PS[("dp", "tp"), None]],
                    Tensor[PS["dp", "tp"]]):
            t = _type(ann)
            for what, make in makers:
                want = torch.nn.Parameter(W.clone())
                ref = make([want])
                p = torch.nn.Parameter(lay.chunk(W, t, ctx.rank).clone())
                opt = make([p])
                with spmd.typecheck():
                    spmd.declare(p, ann)
                    for G in Gs:
                        want.grad = G.clone()
                        ref.step()
                        p.grad = spmd.declare(lay.chunk(G, t, ctx.rank).clone(), ann)
                        opt.step()
                    assert spmd.typeof(p) == t, (what, spmd.typeof(p), t)
                lay.check(_gather_all(p.detach(), ctx.world), want.detach(), t,
                          f"{what} on {t}")


# ------------------------------------------------------------------------------------
# Shard propagation in check mode: each accepted op on the locals is the global op
# ------------------------------------------------------------------------------------

import torch.nn.functional as F  # noqa: E402

# name -> (inputs: [(global shape, type)], fn over the inputs, its single-device reference)
def _seg(a: torch.Tensor) -> torch.Tensor:
    """Segment ids (0..2) of a's positions, from its values (the same on every layout)."""
    return (a.detach().abs() * 7).long() % 3


def _prop_cases() -> list[tuple[str, list[tuple[tuple[int, ...], Any]], Callable[..., Any],
                               Callable[..., Any]]]:
    X3 = Tensor[PS[None, "dp", None], R["tp"]]
    W1 = Tensor[PS[None, "tp"], R["dp"]]
    W2 = Tensor[PS["tp", None], R["dp"]]
    H3 = Tensor[PS[None, "dp", "tp"]]
    A = Tensor[PS["dp", "tp"]]
    Arow = Tensor[PS["dp", None], R["tp"]]
    Acol = Tensor[PS[None, "tp"], R["dp"]]
    B1 = Tensor[PS["tp"], R["dp"]]
    return [
        ("einsum column-parallel", [((4, 4, 8), X3), ((8, 12), W1)],
         lambda x, w: torch.einsum("sbh,hi->sbi", x, w), lambda x, w: torch.einsum("sbh,hi->sbi", x, w)),
        ("einsum out_partial_axes", [((4, 4, 12), H3), ((12, 8), W2)],
         lambda h, w: spmd.einsum("sbi,ih->sbh", h, w, out_partial_axes="tp"),
         lambda h, w: torch.einsum("sbi,ih->sbh", h, w)),
        ("einsum gated product", [((4, 4, 12), H3), ((4, 4, 12), H3)],
         lambda a, b: torch.einsum("sbi,sbi->sbi", F.silu(a), b), lambda a, b: F.silu(a) * b),
        ("einsum broadcast operand", [((4, 8), Arow), ((8,), Tensor[PS[None], R["dp", "tp"]])],
         lambda a, v: torch.einsum("ij,j->ij", a, v), lambda a, v: a * v),
        ("matmul", [((4, 8), Arow), ((8, 6), Acol)], lambda a, b: a @ b, lambda a, b: a @ b),
        ("bmm", [((2, 4, 8), Tensor[PS["dp", None, None], R["tp"]]),
                 ((2, 8, 6), Tensor[PS["dp", None, "tp"]])],
         lambda a, b: torch.bmm(a, b), lambda a, b: torch.bmm(a, b)),
        ("linear out_partial_axes", [((4, 8), Acol), ((6, 8), Acol)],
         lambda x, w: spmd.linear(x, w, out_partial_axes="tp"), lambda x, w: F.linear(x, w)),
        ("linear column", [((4, 8), Arow), ((6, 8), Tensor[PS["tp", None], R["dp"]])],
         lambda x, w: F.linear(x, w), lambda x, w: F.linear(x, w)),
        ("matmul out_partial_axes", [((4, 8), Acol), ((8, 6), Tensor[PS["tp", None], R["dp"]])],
         lambda a, b: spmd.matmul(a, b, out_partial_axes="tp"), lambda a, b: a @ b),
        ("add broadcast", [((4, 8), A), ((8,), B1)], lambda a, b: a + b, lambda a, b: a + b),
        ("mul scalar, silu", [((4, 8), A)], lambda a: F.silu(a) * 2.0 - a, lambda a: F.silu(a) * 2.0 - a),
        ("where", [((4, 8), A), ((4, 8), A)], lambda a, b: torch.where(a > 0, a, b),
         lambda a, b: torch.where(a > 0, a, b)),
        ("sum unsharded dim", [((4, 8), Acol)], lambda a: a.sum(0), lambda a: a.sum(0)),
        ("sum keepdim", [((4, 8), Arow)], lambda a: a.sum(-1, keepdim=True),
         lambda a: a.sum(-1, keepdim=True)),
        ("spmd.sum out_partial_axes", [((4, 8), A)],
         lambda a: spmd.sum(a, 1, out_partial_axes="tp"), lambda a: a.sum(1)),
        ("mean unsharded", [((4, 8), Arow)], lambda a: a.mean(1), lambda a: a.mean(1)),
        ("amax unsharded", [((4, 8), Arow)], lambda a: a.amax(-1), lambda a: a.amax(-1)),
        ("softmax", [((4, 8), Arow)], lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
        ("log_softmax", [((4, 8), Acol)], lambda a: F.log_softmax(a, dim=0),
         lambda a: F.log_softmax(a, dim=0)),
        ("transpose", [((4, 8), A)], lambda a: a.transpose(0, 1), lambda a: a.transpose(0, 1)),
        (".T", [((4, 8), A)], lambda a: a.T, lambda a: a.T),
        (".mT", [((2, 4, 8), Tensor[PS[None, "dp", "tp"]])], lambda a: a.mT, lambda a: a.mT),
        ("permute", [((4, 4, 8), H3)], lambda a: a.permute(2, 0, 1), lambda a: a.permute(2, 0, 1)),
        ("movedim", [((4, 4, 8), H3)], lambda a: a.movedim(0, 2), lambda a: a.movedim(0, 2)),
        ("flatten outermost", [((4, 2, 8), Tensor[PS["dp", None, "tp"]])],
         lambda a: a.flatten(0, 1), lambda a: a.flatten(0, 1)),
        ("reshape -1 outermost", [((4, 2, 8), Tensor[PS["dp", None, None], R["tp"]])],
         lambda a: a.reshape(-1, 8), lambda a: a.reshape(-1, 8)),
        ("cat unsharded dim", [((4, 8), Acol), ((4, 8), Acol)], lambda a, b: torch.cat([a, b], 0),
         lambda a, b: torch.cat([a, b], 0)),
        ("stack", [((4, 8), A), ((4, 8), A)], lambda a, b: torch.stack([a, b], 1),
         lambda a, b: torch.stack([a, b], 1)),
        ("index int unsharded", [((4, 8), Acol)], lambda a: a[1], lambda a: a[1]),
        ("slice unsharded", [((4, 8), Arow)], lambda a: a[:, 2:6], lambda a: a[:, 2:6]),
        ("index None and ...", [((4, 8), A)], lambda a: a[None, ...], lambda a: a[None, ...]),
        ("unsqueeze/squeeze", [((4, 8), A)], lambda a: a.unsqueeze(1).squeeze(1),
         lambda a: a.unsqueeze(1).squeeze(1)),
        ("unflatten outermost -1", [((8, 6), Arow)], lambda a: a.unflatten(0, (-1, 2)),
         lambda a: a.unflatten(0, (-1, 2))),
        ("view -1", [((4, 2, 8), Tensor[PS["dp", None, None], R["tp"]])], lambda a: a.view(-1, 8),
         lambda a: a.view(-1, 8)),
        ("select unsharded", [((4, 8), Acol)], lambda a: a.select(0, 2), lambda a: a.select(0, 2)),
        ("narrow unsharded", [((4, 8), Arow)], lambda a: a.narrow(1, 2, 3),
         lambda a: a.narrow(1, 2, 3)),
        ("layer_norm unsharded", [((4, 8), Arow)], lambda a: F.layer_norm(a, (8,)),
         lambda a: F.layer_norm(a, (8,))),
        ("spmd.sum over (dp, tp)", [((4, 8), A)],
         lambda a: spmd.sum(a, (0, 1), out_partial_axes=("dp", "tp")), lambda a: a.sum((0, 1))),
        # session 3: split/chunk/unbind, expand, roll, losses
        ("chunk unsharded dim", [((4, 8), Arow)], lambda a: a.chunk(2, dim=1)[1],
         lambda a: a.chunk(2, dim=1)[1]),
        ("split unsharded dim", [((4, 8), Acol)], lambda a: torch.split(a, 1, 0)[2],
         lambda a: torch.split(a, 1, 0)[2]),
        ("unbind unsharded dim", [((4, 8), Arow)], lambda a: a.unbind(1)[3], lambda a: a.unbind(1)[3]),
        ("expand new dim", [((4, 8), A)], lambda a: a.expand(3, -1, -1), lambda a: a.expand(3, -1, -1)),
        ("broadcast_to size-1 dim", [((4, 1), Arow)], lambda a: torch.broadcast_to(a, (-1, 8)),
         lambda a: torch.broadcast_to(a, (-1, 8))),
        ("expand_as", [((8,), B1), ((4, 8), A)], lambda v, a: v.expand_as(a) * a,
         lambda v, a: v.expand_as(a) * a),
        ("roll unsharded dim", [((4, 8), Arow)], lambda a: a.roll(3, 1), lambda a: a.roll(3, 1)),
        ("roll dims tuple", [((4, 4, 8), X3)], lambda a: torch.roll(a, (1, 2), (0, 2)),
         lambda a: torch.roll(a, (1, 2), (0, 2))),
        ("flip unsharded dim", [((4, 8), Arow)], lambda a: a.flip(1), lambda a: a.flip(1)),
        ("gather along an unsharded dim", [((4, 8), Arow)],
         lambda a: torch.gather(a, 1, (a.detach().abs() * 7).long() % 8),
         lambda a: torch.gather(a, 1, (a.detach().abs() * 7).long() % 8)),
        # picking and ordering along a whole dim (engine SELECT_ALONG_DIM, kthvalue)
        ("topk values, unsharded dim", [((4, 8), Arow)], lambda a: a.topk(3, dim=-1).values,
         lambda a: a.topk(3, dim=-1).values),
        ("topk indices, gathered", [((4, 8), Arow)],
         lambda a: torch.gather(a, 1, a.detach().topk(3).indices),
         lambda a: torch.gather(a, 1, a.detach().topk(3).indices)),
        ("sort along unsharded dim 0", [((4, 8), Acol)], lambda a: a.sort(0)[0],
         lambda a: a.sort(0)[0]),
        ("argsort, gathered", [((4, 8), Acol)],
         lambda a: torch.gather(a, 0, a.detach().argsort(0, descending=True)),
         lambda a: torch.gather(a, 0, a.detach().argsort(0, descending=True))),
        ("kthvalue, unsharded dim", [((4, 8), Arow)], lambda a: a.kthvalue(2, 1).values,
         lambda a: a.kthvalue(2, 1).values),
        ("cummax, unsharded dim", [((4, 8), Arow)], lambda a: a.cummax(1).values,
         lambda a: a.cummax(1).values),
        ("repeat_interleave int, sharded dims", [((4, 8), A)],
         lambda a: a.repeat_interleave(2, dim=1), lambda a: a.repeat_interleave(2, dim=1)),
        ("repeat_interleave int, dim 0 sharded", [((4, 8), A)],
         lambda a: torch.repeat_interleave(a, 3, 0), lambda a: torch.repeat_interleave(a, 3, 0)),
        ("repeat_interleave tensor, unsharded dim", [((4, 8), Arow)],
         lambda a: a.repeat_interleave(torch.arange(8) % 3, dim=1),
         lambda a: a.repeat_interleave(torch.arange(8) % 3, dim=1)),
        ("repeat_interleave flattened, dim 0 sharded", [((4, 8), Arow)],
         lambda a: a.repeat_interleave(2), lambda a: a.repeat_interleave(2)),
        ("scatter along an unsharded dim", [((4, 8), Arow)],
         lambda a: a.scatter(1, a.detach().topk(3).indices, a[:, :3] * 2),
         lambda a: a.scatter(1, a.detach().topk(3).indices, a[:, :3] * 2)),
        ("scatter_add along an unsharded dim", [((4, 8), Acol)],
         lambda a: a.scatter_add(0, a.detach().argsort(0)[:2], a[:2] * 3),
         lambda a: a.scatter_add(0, a.detach().argsort(0)[:2], a[:2] * 3)),
        # segment sums (packed sequences): ids of the sharded positions pick a segment; each
        # rank adds its own positions, so the result is P on the positions' axis
        ("index_add + bincount over sharded positions (P)", [((8,), B1)],
         lambda a: (torch.zeros(3, dtype=a.dtype).index_add(0, _seg(a), a)
                    + torch.bincount(_seg(a), minlength=3).to(a.dtype)),
         lambda a: (torch.zeros(3, dtype=a.dtype).index_add(0, _seg(a), a)
                    + torch.bincount(_seg(a), minlength=3).to(a.dtype))),
        ("index_add rows over sharded positions (P)", [((8, 4), Tensor[PS["tp", None], R["dp"]])],
         lambda a: torch.zeros(3, 4, dtype=a.dtype).index_add(0, _seg(a[:, 0]), a * 2),
         lambda a: torch.zeros(3, 4, dtype=a.dtype).index_add(0, _seg(a[:, 0]), a * 2)),
        ("scatter_add, scatter_reduce sum, index_put accumulate (P)", [((8,), B1)],
         lambda a: (torch.zeros(3, dtype=a.dtype).scatter_add(0, _seg(a), a)
                    + torch.zeros(3, dtype=a.dtype).scatter_reduce(0, _seg(a), a * 3, "sum")
                    + torch.zeros(3, dtype=a.dtype).index_put((_seg(a),), a * 5, accumulate=True)),
         lambda a: (torch.zeros(3, dtype=a.dtype).scatter_add(0, _seg(a), a)
                    + torch.zeros(3, dtype=a.dtype).scatter_reduce(0, _seg(a), a * 3, "sum")
                    + torch.zeros(3, dtype=a.dtype).index_put((_seg(a),), a * 5, accumulate=True))),
        ("flip dims tuple", [((4, 4, 8), X3)], lambda a: torch.flip(a, (0, 2)),
         lambda a: torch.flip(a, (0, 2))),
        ("cross_entropy none, probabilities", [((4, 8), Arow), ((4, 8), Arow)],
         lambda x, p: F.cross_entropy(x, F.softmax(p, 1), reduction="none"),
         lambda x, p: F.cross_entropy(x, F.softmax(p, 1), reduction="none")),
        ("nll_loss none, indices", [((4, 8), Arow)],
         lambda x: F.nll_loss(F.log_softmax(x, 1), x.detach().argmax(1), reduction="none"),
         lambda x: F.nll_loss(F.log_softmax(x, 1), x.detach().argmax(1), reduction="none")),
        ("cross_entropy mean, unsharded batch", [((4, 8), Tensor[PS[None, None], R["dp", "tp"]])],
         lambda x: F.cross_entropy(x, x.detach().argmin(1)),
         lambda x: F.cross_entropy(x, x.detach().argmin(1))),
        ("cross_entropy sharded batch, P sum", [((4, 8), Arow)],
         lambda x: spmd.sum(F.cross_entropy(x, x.detach().argmin(1), reduction="none"), 0,
                            out_partial_axes="dp"),
         lambda x: F.cross_entropy(x, x.detach().argmin(1), reduction="sum")),
        # reshape/view: the literal sizes are the local ones torch receives
        ("reshape kept prefix", [((4, 4, 8), Tensor[PS[None, "tp", None], R["dp"]])],
         lambda a: a.reshape(a.shape[0], a.shape[1], 2, -1),
         lambda a: a.reshape(a.shape[0], a.shape[1], 2, -1)),
        ("view kept dim, rest merged", [((4, 4, 8), Tensor[PS[None, "tp", None], R["dp"]])],
         lambda a: a.view(a.size(0), -1), lambda a: a.view(a.size(0), -1)),
        ("reshape dim 0 sharded, literal sizes", [((4, 8), Arow)], lambda a: a.reshape(-1, 2, 4),
         lambda a: a.reshape(-1, 2, 4)),
        ("view_as, dim 0 sharded on both", [((4, 2, 8), Tensor[PS["dp", None, None], R["tp"]]),
                                             ((8, 8), Arow)],
         lambda a, b: a.view_as(b) * b, lambda a, b: a.reshape(b.shape) * b),
        ("reshape_as, dim 0 sharded on both", [((8, 8), Arow),
                                                ((4, 2, 8), Tensor[PS["dp", None, None], R["tp"]])],
         lambda a, b: a.reshape_as(b) * b, lambda a, b: a.reshape(b.shape) * b),
        # scaled_dot_product_attention: heads sharded (causal), queries sharded with a mask
        ("attention heads sharded, causal",
         [((4, 6, 8), Tensor[PS["tp", None, None], R["dp"]])] * 3,
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("attention queries sharded, mask",
         [((2, 4, 8), Tensor[PS[None, "tp", None], R["dp"]]),
          ((2, 6, 8), Tensor[PS[None, None, None], R["dp", "tp"]]),
          ((2, 6, 8), Tensor[PS[None, None, None], R["dp", "tp"]]),
          ((4, 6), Tensor[PS["tp", None], R["dp"]])],
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, 0.0, False),
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, 0.0, False)),
        # a depthwise convolution (groups = the channels; groups is a local count, as a
        # literal size is local) with the input's channels and the weight's out-channels
        # sharded alike: each rank holds whole groups, exactly local (no sum across ranks)
        ("depthwise conv2d, channels sharded", [
            ((2, 4, 5, 5), Tensor[PS[None, "tp", None, None], R["dp"]]),
            ((4, 1, 3, 3), Tensor[PS["tp", None, None, None], R["dp"]])],
         lambda x, w: F.conv2d(x, w, padding=1, groups=x.shape[1]),
         lambda x, w: F.conv2d(x, w, padding=1, groups=x.shape[1])),
        ("grouped conv1d, channels sharded", [
            ((2, 8, 7), Tensor[PS["dp", "tp", None]]),
            ((4, 2, 3), Tensor[PS["tp", None, None], R["dp"]])],
         lambda x, w: F.conv1d(x, w, groups=x.shape[1] // 2),
         lambda x, w: F.conv1d(x, w, groups=x.shape[1] // 2)),
        # a grouped conv_transpose: its weight is [in, out/groups, *k], dim 0 the in-channels,
        # sharded like the input's channels: each rank holds whole groups, exactly local
        ("depthwise conv_transpose2d, channels sharded", [
            ((2, 4, 5, 5), Tensor[PS[None, "tp", None, None], R["dp"]]),
            ((4, 1, 3, 3), Tensor[PS["tp", None, None, None], R["dp"]]),
            ((4,), Tensor[PS["tp"], R["dp"]])],
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=x.shape[1]),
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=x.shape[1])),
        ("grouped conv_transpose1d, channels sharded", [
            ((2, 8, 7), Tensor[PS["dp", "tp", None]]),
            ((8, 3, 3), Tensor[PS["tp", None, None], R["dp"]])],
         lambda x, w: F.conv_transpose1d(x, w, groups=x.shape[1] // 2),
         lambda x, w: F.conv_transpose1d(x, w, groups=x.shape[1] // 2)),
        ("einsum out_partial (dp,tp)", [((4, 8), Tensor[PS[None, ("dp", "tp")]]),
                                         ((8, 6), Tensor[PS[("dp", "tp"), None]])],
         lambda a, b: spmd.einsum("ij,jk->ik", a, b, out_partial_axes=("dp", "tp")),
         lambda a, b: a @ b),
    ]


PROP_CASES = _prop_cases()


def check_propagation(ctx: Any, name: str, index: int) -> None:
    case, inputs, fn, ref = PROP_CASES[index]
    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    g = torch.Generator().manual_seed(1000 + index)
    fulls = [torch.randn(shape, generator=g, dtype=F64) for shape, _ in inputs]
    with spmd.set_mesh(mesh):
        locs = []
        for full, (_, ann) in zip(fulls, inputs):
            t = _type(ann)
            locs.append(lay.local(full, t, ctx.rank).requires_grad_(True))
        with spmd.typecheck():
            for v, (_, ann) in zip(locs, inputs):
                spmd.declare(v, ann)
            y = fn(*locs)
            t = spmd.typeof(y)
        assert t is not None and t.spec is not None, f"{case}: result type {t}"
        assert len(t.spec) == y.ndim, (case, t, tuple(y.shape))
        leaves = [f.clone().requires_grad_(True) for f in fulls]
        want = ref(*leaves)
        lay.check(_gather_all(y, ctx.world), want.detach(), t, f"{case} ({t})")
        # backward: the gradient of the global result, laid out as the dual of its type,
        # gives each input's gradient laid out as the dual of the input's type
        G = torch.randn(tuple(want.shape), generator=g, dtype=F64)
        want.backward(G)
        y.backward(lay.local(G, _dual_type(t), ctx.rank))
        for k, (v, leaf, (_, ann)) in enumerate(zip(locs, leaves, inputs)):
            assert v.grad is not None and leaf.grad is not None, (case, k)
            lay.check(_gather_all(v.grad, ctx.world), leaf.grad, _dual_type(_type(ann)),
                      f"{case}: gradient of input {k}")


def prop_suite(world: int) -> list[tuple[str, Callable[[Any], None]]]:
    out = []
    for i, (case, *_rest) in enumerate(PROP_CASES):
        n = f"w{world}/global/propagation/{case}"
        out.append((n, functools.partial(check_propagation, name=n, index=i)))
    return out


def check_per_axis_collective_on_global(ctx: Any, name: str) -> None:
    """A per-axis collective on a global tensor in check mode: the axis moves in the spec
    (the innermost one only), and the values are the new layout's."""
    from spmd import S as Shard
    from spmd_mypy.engine.errors import SpmdTypeError

    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    X = torch.randn(8, 4, generator=torch.Generator().manual_seed(5), dtype=F64)
    src = _type(Tensor[PS[("dp", "tp"), None]])
    with spmd.set_mesh(mesh):
        x = lay.local(X, src, ctx.rank)
        with spmd.typecheck():
            spmd.declare(x, Tensor[PS[("dp", "tp"), None]])
            y = spmd.all_gather(x, "tp", src=Shard(0), dst=R)
            t = spmd.typeof(y)
            assert t is not None and t.spec == (("dp",), ()) and str(t.get("tp")) == "R", t
            z = spmd.all_to_all(y.contiguous(), "dp", src=Shard(0), dst=Shard(1))
            tz = spmd.typeof(z)
            assert tz is not None and tz.spec == ((), ("dp",)), tz
            try:
                spmd.all_gather(x, "dp", src=Shard(0), dst=R)
            except SpmdTypeError as e:
                assert "innermost" in str(e), str(e)
            else:
                raise AssertionError("a collective on an outer axis of a dim was not caught")
        lay.check(_gather_all(y, ctx.world), X, t, "all_gather on tp")
        lay.check(_gather_all(z, ctx.world), X, tz, "all_to_all on dp")


def check_broadcast_fix(ctx: Any, name: str) -> None:
    """docs/global.md's broadcast error in check mode: x sharded on "tp" plus c varying on
    "tp" with no dim.  The first fix the message offers, pasted (c's per-rank parts summed),
    is typed as x and its locals are x + sum of the ranks' c (the float64 global value).
    The gather the message once offered stacks the ranks' values on a new dim 0: its type
    has that dim (the spec's rank is the local's), and x + the gather is an error."""
    from spmd import all_gather, all_reduce, reinterpret
    from spmd_mypy.engine.errors import SpmdTypeError

    mesh = mesh_for(ctx)
    lay = Layout(mesh)
    xt = Tensor[PS["tp", None], R["dp"]]
    ct = Tensor[PS[None], V["tp"], R["dp"]]
    X = torch.randn(4, 3, generator=torch.Generator().manual_seed(7), dtype=F64)
    n = lay.size("tp")
    cs = [torch.randn(3, generator=torch.Generator().manual_seed(100 + k), dtype=F64) for k in range(n)]
    want = X + functools.reduce(torch.add, cs)
    with spmd.set_mesh(mesh):
        x = lay.local(X, _type(xt), ctx.rank)
        c = cs[lay.index(ctx.rank, ("tp",))].clone()
        with spmd.typecheck():
            spmd.declare(x, xt)
            spmd.declare(c, ct)
            try:
                x + c
            except SpmdTypeError as e:
                msg = str(e)
                assert 'all_reduce(reinterpret(c, "tp", src=V, dst=P), "tp", src=P, dst=R)' in msg, msg
                assert 'all_gather(c, "tp", src=V, dst=R) is no fix' in msg, msg
            else:
                raise AssertionError("x + c (c varying on the axis sharding x's dim 0) was accepted")
            y = x + all_reduce(reinterpret(c, "tp", src=V, dst=P), "tp", src=P, dst=R)
            t = spmd.typeof(y)
            assert t == _type(xt), t
            cg = all_gather(c, "tp", src=V, dst=R)
            tg = spmd.typeof(cg)
            assert tg is not None and tg.spec is not None and len(tg.spec) == cg.ndim == 2, (tg, cg.shape)
            try:
                x + cg
            except SpmdTypeError:
                pass
            else:
                raise AssertionError(f"x + all_gather(c) ({tg}) was accepted")
        lay.check(_gather_all(y, ctx.world), want, t, "x + the pasted broadcast fix")
