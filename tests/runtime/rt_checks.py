"""The numerical checks run inside gloo worlds (see rt_world.py).

Every check of a collective or conversion ``op(x, axis, src=A, dst=B)``:

1. builds every rank's input from a seed (the check's name and the rank's logical
   index on the axis), so each rank knows all ranks' inputs ``xs``;
2. forward: this rank's output equals ``spec(xs)[me]``, where ``spec`` is written
   here independently of the runtime, on the list of all ranks' tensors (the seeds'
   ``*_spec`` functions); for the ops that keep the meaning, the denotation of the
   spec's outputs equals the denotation of the inputs;
3. backward, by the adjoint identity with type-aware inner products:
   ``<g, F(dx)>_B == <backward(g), dx>_A`` where ``F(dx)`` is the spec on another
   input and the pairing of a value of type T with a gradient of type dual(T) is

       R: <sum of the ranks' gradients, the common value>
       I: <the common gradient, the common value>
       V, S(i): sum over ranks of <gradient_r, value_r>
       P: <the common gradient, the sum of the ranks' values>

   (a P value denotes the sum over ranks, R/I the common value, V/S the list); the
   backward's output is gathered from every rank of the axis, and an I or R gradient
   (of an I or P input) must be the same on every rank;
4. double backward: the gradient of ``<backward(g), v>`` with respect to ``g`` is
   ``F(v)`` on every rank (the backward of the backward is the forward).
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.testing import assert_close

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.collectives import TRANSITIONS, route
from spmd_mypy.engine.types import Kind, LocalType

F64 = torch.float64
DIMS = (0, 1, -1)


# ------------------------------------------------------------------------------------
# World context: meshes and axis membership, computed without the runtime
# ------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self._meshes: dict[str, DeviceMesh] = {}

    def mesh(self, key: str) -> DeviceMesh:
        """Meshes are made on first use; every rank runs the suite in the same order."""
        m = self._meshes.get(key)
        if m is None:
            if key == "1d":
                m = init_device_mesh("cpu", (self.world,), mesh_dim_names=("x",))
            elif key == "2x2":
                m = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
            elif key == "1xN":  # an axis of one rank (dp=1 runs)
                m = init_device_mesh("cpu", (1, self.world), mesh_dim_names=("one", "x"))
            elif key == "2x2T":  # transposed: rank order is not the flattened mesh order
                m = DeviceMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))
            else:
                raise KeyError(key)
            self._meshes[key] = m
        return m

    def axis_ranks(self, mesh: DeviceMesh, axis: Any) -> list[int]:
        """Global ranks of this rank's group on ``axis``, in logical order."""
        names = (axis,) if isinstance(axis, str) else tuple(axis)
        dims = [mesh.mesh_dim_names.index(n) for n in names]
        table = mesh.mesh
        coords = {int(table[idx]): idx for idx in itertools_product(table.shape)}
        mine = coords[self.rank]
        same = [r for r, c in coords.items()
                if all(c[d] == mine[d] for d in range(table.ndim) if d not in dims)]
        return sorted(same, key=lambda r: tuple(coords[r][d] for d in dims))

    def gather(self, t: torch.Tensor, ranks: list[int], shapes: list[tuple[int, ...]]
               ) -> list[torch.Tensor]:
        """Every rank's ``t``; those of ``ranks`` (logical order), of ``shapes``, are returned.

        ``shapes[k]`` is the shape on logical index ``k`` (every group of the axis has the
        same), so one world all_gather of buffers padded to the largest does it.
        """
        numels = [int(torch.Size(s).numel()) for s in shapes]
        flat = torch.zeros(max(1, max(numels)), dtype=t.dtype)
        flat[: t.numel()] = t.detach().reshape(-1)
        flats = [torch.zeros_like(flat) for _ in range(self.world)]
        dist.all_gather(flats, flat)
        return [flats[r][:numels[k]].reshape(shapes[k]) for k, r in enumerate(ranks)]


def itertools_product(shape: torch.Size) -> Iterator[tuple[int, ...]]:
    import itertools
    return itertools.product(*(range(n) for n in shape))


def warm_up() -> None:
    """Run, without any process group, the torch paths the checks use (lazy imports)."""
    x = torch.ones(2, 2, dtype=F64, requires_grad=True)
    g = torch.ones(2, 2, dtype=F64, requires_grad=True)
    y = spmd.matmul(x, x, out_partial_axes="w")
    (gx,) = torch.autograd.grad(y, x, g, create_graph=True)
    torch.autograd.grad(gx, g, torch.ones_like(gx))
    assert_close(gx, gx)
    torch.zeros(3).split([1, 2])


# ------------------------------------------------------------------------------------
# Types as strings: "R", "I", "V", "P", "S0", "S1", "S-1"
# ------------------------------------------------------------------------------------

def kind(t: str) -> str:
    return t[0]


def sdim(t: str) -> int:
    return int(t[1:])


def marker(t: str) -> Any:
    return {"R": R, "I": I, "V": V, "P": P}[t] if t[0] != "S" else S(sdim(t))


def dual(t: str) -> str:
    return {"R": "P", "P": "R"}.get(t, t)


def local_type(t: str) -> LocalType:
    return LocalType(Kind.V, sdim(t)) if t[0] == "S" else LocalType(Kind(t))


def tensor(seed_text: str, shape: tuple[int, ...], dtype: torch.dtype = F64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(zlib.crc32(seed_text.encode()))
    return torch.randn(shape, generator=gen, dtype=F64).to(dtype)


def values(t: str, shapes: list[tuple[int, ...]], tag: str, dtype: torch.dtype = F64
           ) -> list[torch.Tensor]:
    """One tensor per rank; R and I values are the same tensor on every rank."""
    if kind(t) in "RI":
        one = tensor(f"{tag}/common", shapes[0], dtype)
        return [one.clone() for _ in shapes]
    return [tensor(f"{tag}/{k}", s, dtype) for k, s in enumerate(shapes)]


# ------------------------------------------------------------------------------------
# Specifications, on the list of every rank's local tensor
# ------------------------------------------------------------------------------------

def spec(op: str, src: str, dst: str, xs: list[torch.Tensor], *, sizes: list[int] | None = None,
         reduce_op: str = "sum") -> list[torch.Tensor]:
    n = len(xs)
    s, d = kind(src), kind(dst)
    if op == "redistribute":
        routed = route(local_type(src), local_type(dst))
        if routed is None or (routed[0] == "all_to_all" and {s, d} == {"V", "S"}
                              and (sdim(src) if s == "S" else sdim(dst)) == 0):
            return [x.clone() for x in xs]
        op = routed[0]
    if op == "all_reduce":
        if reduce_op == "max":
            total = torch.stack(xs).amax(0)
        elif reduce_op == "min":
            total = torch.stack(xs).amin(0)
        else:
            total = functools.reduce(torch.add, xs)
            if reduce_op == "avg":
                total = total / n
        return [total.clone() for _ in xs]
    if op == "all_gather":
        whole = torch.stack(xs) if s == "V" else torch.cat(xs, sdim(src))
        return [whole.clone() for _ in xs]
    if op == "reduce_scatter":
        total = functools.reduce(torch.add, xs)
        if reduce_op == "avg":
            total = total / n
        if d == "V":
            return list(total.unbind(0))
        parts = total.split(sizes, sdim(dst)) if sizes else total.chunk(n, sdim(dst))
        return list(parts)
    if op == "all_to_all":
        split = sdim(dst) if d == "S" else 0
        concat = sdim(src) if s == "S" else 0
        return [torch.cat([xs[k].chunk(n, split)[r] for k in range(n)], concat) for r in range(n)]
    if op == "reinterpret" or (op == "convert" and {s, d} == {"R", "I"}):
        return [x.clone() for x in xs]
    if op == "convert":
        if s in "RI" and d == "V":
            return [xs[r][r].clone() for r in range(n)]
        if s in "RI" and d == "S":
            parts = xs[0].split(sizes, sdim(dst)) if sizes else xs[0].chunk(n, sdim(dst))
            return [p.clone() for p in parts]
        if s in "RI" and d == "P":
            return [xs[0].clone()] + [torch.zeros_like(xs[0]) for _ in range(n - 1)]
        if s == "V" and d == "P":
            return [torch.stack([xs[r] if k == r else torch.zeros_like(xs[r]) for k in range(n)])
                    for r in range(n)]
        if s == "S" and d == "P":
            return [torch.cat([xs[r] if k == r else torch.zeros_like(xs[k]) for k in range(n)],
                              sdim(src)) for r in range(n)]
    raise AssertionError(f"no spec for {op}({src},{dst})")


def denote(t: str, ys: list[torch.Tensor], v_as: str = "stack") -> torch.Tensor:
    k = kind(t)
    if k in "RI":
        for y in ys[1:]:
            assert_close(y, ys[0])
        return ys[0]
    if k == "P":
        return functools.reduce(torch.add, ys)
    if k == "S":
        return torch.cat(ys, sdim(t))
    return torch.stack(ys) if v_as == "stack" else torch.cat(ys, 0)


def keeps_meaning(op: str, src: str, dst: str, reduce_op: str) -> str | None:
    """How V is read when op(src, dst) keeps the meaning ("stack"/"cat0"), None if it does not."""
    s, d = kind(src), kind(dst)
    if op in ("reinterpret",) or reduce_op in ("max", "min"):
        return None
    if op in ("all_reduce", "reduce_scatter") and reduce_op != "sum":
        return None  # the average is not the sum the P input means
    if op == "all_reduce":
        return "stack"
    if op in ("all_gather", "reduce_scatter", "convert"):
        return "stack"
    if op == "all_to_all":  # on 3-dim tensors; V concatenates on dim 0 there
        concat = sdim(src) % 3 if s == "S" else 0
        split = sdim(dst) % 3 if d == "S" else 0
        return None if concat == split else "cat0"  # the block exchanges do not
    if op == "redistribute":
        return "cat0" if {s, d} <= {"V", "S"} else "stack"
    return None


def pair(t: str, vals: list[torch.Tensor], grads: list[torch.Tensor]) -> torch.Tensor:
    """The pairing of a value of type ``t`` (per rank) with its gradient (type dual(t))."""
    k = kind(t)
    if k == "R":
        for v in vals[1:]:
            assert_close(v, vals[0])
        return (functools.reduce(torch.add, grads) * vals[0]).sum()
    if k == "I":
        for v in vals[1:]:
            assert_close(v, vals[0])
        for g in grads[1:]:
            assert_close(g, grads[0], msg=lambda m: f"an I gradient differs across ranks: {m}")
        return (grads[0] * vals[0]).sum()
    if k == "P":
        for g in grads[1:]:
            assert_close(g, grads[0], msg=lambda m: f"an R gradient differs across ranks: {m}")
        return (grads[0] * functools.reduce(torch.add, vals)).sum()
    return functools.reduce(torch.add, [(g * v).sum() for g, v in zip(grads, vals)])


# ------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------

def _with(shape: list[int], i: int, size: int) -> tuple[int, ...]:
    out = list(shape)
    out[i] = size
    return tuple(out)


def input_shapes(op: str, src: str, dst: str, n: int, sizes: list[int] | None
                 ) -> list[tuple[int, ...]]:
    s, d = kind(src), kind(dst)
    base = [2, 3, 2]
    if op == "redistribute":
        routed = route(local_type(src), local_type(dst))
        op = routed[0] if routed else "reinterpret"
    if op == "all_to_all":
        shape: tuple[int, ...] = (n, 2 * n, n)
    elif op == "all_gather" and s == "S":
        if sizes:
            return [_with(base, sdim(src), sz) for sz in sizes]
        shape = tuple(base)
    elif op == "all_gather":
        shape = (3, 2)
    elif op == "reduce_scatter" and d == "V":
        shape = (n, 3, 2)
    elif op in ("reduce_scatter", "convert") and d == "S":
        shape = _with(base, sdim(dst), sum(sizes) if sizes else n * base[sdim(dst)])
    elif op == "convert" and d == "V":
        shape = (n, 3)
    elif op == "convert" and s == "S" and sizes:
        return [_with(base, sdim(src), sz) for sz in sizes]
    elif s == "S" or d == "S":
        shape = tuple(base)
    else:
        shape = (3, 2 * n)
    return [shape] * n


# ------------------------------------------------------------------------------------
# The checks
# ------------------------------------------------------------------------------------


def collective_kwargs(op: str, src: str, dst: str, *, reduce_op: str = "sum",
                      expert: bool = False, sizes: list[int] | None = None) -> dict[str, Any]:
    """The keyword arguments of a typed collective call for one table row."""
    kwargs: dict[str, Any] = {"src": marker(src), "dst": marker(dst)}
    if op in ("all_reduce", "reduce_scatter") and reduce_op != "sum":
        kwargs["op"] = reduce_op
    if expert:
        kwargs["expert_mode"] = True
    if sizes is not None:
        kwargs["sizes"] = sizes
    return kwargs

def check_op(ctx: Ctx, name: str, mesh_key: str, axis: Any, op: str, src: str, dst: str, *,
             reduce_op: str = "sum", expert: bool = False, sizes: list[int] | None = None,
             pass_group: bool = False, dtype: torch.dtype = F64, double: bool = True) -> None:
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    with spmd.set_mesh(mesh):
        call_axis = mesh.get_group(axis) if pass_group else axis
        shapes = input_shapes(op, src, dst, n, sizes)
        xs = values(src, shapes, f"{name}/x", dtype)
        kwargs = collective_kwargs(op, src, dst, reduce_op=reduce_op, expert=expert, sizes=sizes)
        fn = getattr(spmd, op)
        x = xs[me].clone().requires_grad_(True)
        out = fn(x, call_axis, **kwargs)
        expected = spec(op, src, dst, xs, sizes=sizes, reduce_op=reduce_op)
        assert out.dtype == dtype and out.device == x.device
        assert_close(out, expected[me])
        v_as = keeps_meaning(op, src, dst, reduce_op)
        if v_as is not None:
            assert_close(denote(dst, expected, v_as), denote(src, xs, v_as),
                         msg=lambda m: f"the spec does not keep the meaning: {m}")
        # backward: <g, F(dx)> == <backward(g), dx>, type-aware
        gs = values(dual(dst), [tuple(e.shape) for e in expected], f"{name}/g", dtype)
        g = gs[me].clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(out, x, g, create_graph=double)
        assert gx.dtype == dtype and gx.shape == x.shape
        grads = ctx.gather(gx, ranks, shapes)
        dxs = values(src, shapes, f"{name}/dx", dtype)
        lhs = pair(dst, spec(op, src, dst, dxs, sizes=sizes, reduce_op=reduce_op), gs)
        rhs = pair(src, dxs, grads)
        tol = 1e-10 if dtype == F64 else 1e-4
        assert_close(rhs, lhs, rtol=tol, atol=tol,
                     msg=lambda m: f"adjoint identity fails: <B(g), dx> != <g, F(dx)>: {m}")
        # double backward: d<B(g), v>/dg == F(v)
        if double:
            vs = values(src, shapes, f"{name}/v", dtype)
            (gg,) = torch.autograd.grad(gx, g, vs[me])
            assert_close(gg, spec(op, src, dst, vs, sizes=sizes, reduce_op=reduce_op)[me])


def uneven_all_to_all_sizes(n: int) -> tuple[list[list[int]], list[tuple[int, int]],
                                             list[tuple[int, int]]]:
    """Per-rank block sizes of an uneven all_to_all over ``n`` ranks (rank r sends
    ``sizes[r][k]`` rows to rank k; zeros included), the inputs' and the outputs' shapes."""
    sizes = [[(r + 2 * k) % 3 for k in range(n)] for r in range(n)]
    shapes = [(sum(sizes[r]), 2) for r in range(n)]
    out_shapes = [(sum(sizes[k][r] for k in range(n)), 2) for r in range(n)]
    return sizes, shapes, out_shapes


def check_all_to_all_uneven(ctx: Ctx, name: str, mesh_key: str, axis: Any, given_out: bool) -> None:
    """all_to_all(V,V) with per-rank block sizes (dropless MoE dispatch): rank ``r`` sends
    ``sizes_r[k]`` rows to rank ``k``.  Forward against the spec, backward by the adjoint
    identity (V pairs with V: the sum over ranks), double backward is the forward again;
    ``given_out``: out_sizes passed, else exchanged by the op."""
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    sizes, shapes, out_shapes = uneven_all_to_all_sizes(n)

    def forward_spec(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        blocks = [xs[k].split(sizes[k], 0) for k in range(n)]
        return [torch.cat([blocks[k][r] for k in range(n)]) for r in range(n)]

    with spmd.set_mesh(mesh):
        out_sizes = [sizes[k][me] for k in range(n)] if given_out else None
        xs = values("V", shapes, f"{name}/x")
        x = xs[me].clone().requires_grad_(True)
        out = spmd.all_to_all(x, axis, src=V, dst=V, sizes=sizes[me], out_sizes=out_sizes)
        assert_close(out, forward_spec(xs)[me])
        gs = values("V", out_shapes, f"{name}/g")
        g = gs[me].clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(out, x, g, create_graph=True)
        assert gx.shape == x.shape
        grads = ctx.gather(gx, ranks, shapes)
        dxs = values("V", shapes, f"{name}/dx")
        lhs = pair("V", forward_spec(dxs), gs)
        rhs = pair("V", dxs, grads)
        assert_close(rhs, lhs, rtol=1e-10, atol=1e-10,
                     msg=lambda m: f"adjoint identity fails: <B(g), dx> != <g, F(dx)>: {m}")
        vs = values("V", shapes, f"{name}/v")
        (gg,) = torch.autograd.grad(gx, g, vs[me])
        assert_close(gg, forward_spec(vs)[me])
        with spmd.typecheck():  # the check mode types it V -> V, and rejects another src
            y = spmd.all_to_all(spmd.declare(xs[me].clone(), Tensor[V[axis if isinstance(axis, str) else tuple(axis)]]),
                                axis, src=V, dst=V, sizes=sizes[me])
            assert_close(y, forward_spec(xs)[me])
        try:
            spmd.all_to_all(xs[me], axis, src=S(0), dst=S(1), sizes=sizes[me])
        except ValueError as e:
            assert "src=V, dst=V" in str(e), e
        else:
            raise AssertionError("all_to_all(S(0), S(1), sizes=) accepted")
        try:  # wrong on every rank (each raises before it communicates)
            spmd.all_to_all(xs[me], axis, src=V, dst=V, sizes=[shapes[me][0] + 1] + [0] * (n - 1))
        except ValueError as e:
            assert "sum to" in str(e), e
        else:
            raise AssertionError("sizes= that do not sum to the rows accepted")


def check_no_grad_reduce(ctx: Ctx, name: str, mesh_key: str, axis: Any, src: str, dst: str,
                         reduce_op: str) -> None:
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    with spmd.set_mesh(mesh):
        xs = values(src, input_shapes("all_reduce", src, dst, n, None), f"{name}/x")
        expected = spec("all_reduce", src, dst, xs, reduce_op=reduce_op)[me]
        x = xs[me].clone().requires_grad_(True)
        with torch.no_grad():
            out = spmd.all_reduce(x, axis, src=marker(src), dst=marker(dst), op=reduce_op)
        assert_close(out, expected)
        out = spmd.all_reduce(x.detach(), axis, src=marker(src), dst=marker(dst), op=reduce_op)
        assert_close(out, expected)
        assert not out.requires_grad
        try:
            spmd.all_reduce(x, axis, src=marker(src), dst=marker(dst), op=reduce_op)
        except TypeError as e:
            assert "no gradient" in str(e) and "detach" in str(e), e
        else:
            raise AssertionError(f'all_reduce op="{reduce_op}" accepted a tensor that requires grad')


# The no-grad forms that issue their torch.distributed call themselves over a direct group
# (_collectives._FAST_PATHS): (op, src, dst)
FAST_FORMS = (("all_reduce", "P", "R"), ("all_reduce", "P", "I"), ("all_gather", "S0", "R"),
              ("all_gather", "S0", "I"), ("reduce_scatter", "P", "S0"), ("all_to_all", "V", "V"))


def check_no_grad_fast_path(ctx: Ctx, name: str, mesh_key: str, axis: Any, op: str, src: str,
                            dst: str, expect_direct: bool) -> None:
    """``op(src, dst)`` on inputs that need no graph, called repeatedly: the first call takes
    the general path (and finds the group), the later ones the fast path where the group is
    direct (several ranks in logical order; the general path otherwise): the spec every
    time, every input form, the input kept, no alias, and the errors of the general path."""
    from spmd import _mesh

    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    call = getattr(spmd, op)
    with spmd.set_mesh(mesh):
        xs = values(src, input_shapes(op, src, dst, n, None), f"{name}/x")
        expected = spec(op, src, dst, xs)[me]
        x = xs[me].clone()
        strided = torch.stack([x, torch.zeros_like(x)], -1)[..., 0]  # every other element
        assert not strided.is_contiguous()
        leaf = x.clone().requires_grad_(True)
        for _ in range(2):  # the first call fills the direct groups, the second uses them
            for form, t in (("plain", x), ("non-contiguous", strided), ("detached", leaf.detach())):
                out = call(t, axis, src=marker(src), dst=marker(dst))
                assert_close(out, expected, msg=lambda m: f"{form}: {m}")
                assert out.is_contiguous() and not out.requires_grad, form
                assert out.data_ptr() != t.data_ptr(), f"{form}: the result aliases the input"
            with torch.no_grad():
                out = call(leaf, axis, src=marker(src), dst=marker(dst))
            assert_close(out, expected)
            assert not out.requires_grad
            assert_close(x, xs[me])  # the input is kept
        direct = _mesh.direct_groups.get(axis)
        assert (direct is not None) == expect_direct, (axis, direct)
        if direct is not None:  # a direct group numbers its ranks in logical order
            assert direct.size > 1 and direct.logical is None and direct.physical is None, direct
        out = call(leaf, axis, src=marker(src), dst=marker(dst))  # grad mode: the Function
        assert_close(out, expected)
        assert out.requires_grad
        if op == "all_to_all" and n > 1:
            _raises(ValueError, "not a multiple", lambda: spmd.all_to_all(
                torch.ones(n + 1, 2, dtype=F64), axis, src=V, dst=V))
        if op == "reduce_scatter" and n > 1:
            _raises(ValueError, "not a multiple", lambda: spmd.reduce_scatter(
                torch.ones(n + 1, 2, dtype=F64), axis, src=P, dst=S(0)))
        if op in ("all_to_all", "all_gather", "reduce_scatter"):  # a 0-d input
            _raises(ValueError, "at least one dim" if op == "all_to_all" else "dim 0 is out of range",
                    lambda: call(torch.tensor(1.0, dtype=F64), axis, src=marker(src), dst=marker(dst)))


# The fast forms' raw twins: the torch.distributed function the typed op's fast path stands
# for, on the same group and input (out-of-place, as the typed op returns a new tensor).
def _raw_fast(op: str, x: torch.Tensor, pg: Any) -> torch.Tensor:
    n = dist.get_world_size(pg)
    x = x.contiguous()
    if op == "all_reduce":
        out = x.clone()
        dist.all_reduce(out, group=pg)
    elif op == "all_gather":
        out = x.new_empty(n * x.shape[0], *x.shape[1:])
        dist.all_gather_single(out, x, group=pg)
    elif op == "reduce_scatter":
        out = x.new_empty(x.shape[0] // n, *x.shape[1:])
        dist.reduce_scatter_single(out, x, group=pg)
    else:
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=pg)
    return out


# the ProcessGroup method each fast form calls, and torch.distributed's Python wrapper of it
_DIRECT_CALLS = {"all_reduce": ("allreduce", "all_reduce"),
                 "all_gather": ("all_gather_single", "all_gather_single"),
                 "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_single"),
                 "all_to_all": ("all_to_all_single", "all_to_all_single")}


def _calls_made(fn: Callable[[], Any]) -> tuple[list[str], list[str]]:
    """(the Python functions of torch.distributed.distributed_c10d called, the names of the C
    functions called: a ProcessGroup's methods among them) while ``fn`` runs on this thread."""
    import sys

    py: list[str] = []
    c_calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("distributed_c10d.py"):
            py.append(frame.f_code.co_name)
        elif event == "c_call":
            c_calls.append(getattr(arg, "__name__", ""))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return py, c_calls


def check_fast_path_direct_call(ctx: Ctx, name: str, op: str, src: str, dst: str) -> None:
    """The no-grad fast path of ``op(src, dst)`` calls the ProcessGroup itself, not
    torch.distributed's Python wrapper (_dist_utils' direct forms), with the raw call's
    result, real and complex; a tensor under a user's TorchFunctionMode still goes through
    torch.distributed, so the mode sees the collective (and the result is the same)."""
    from torch.overrides import TorchFunctionMode

    mesh = ctx.mesh("1d")
    n, me = ctx.world, ctx.rank
    pg = mesh.get_group("x")
    method, wrapper = _DIRECT_CALLS[op]
    call = getattr(spmd, op)
    kw = {"src": marker(src), "dst": marker(dst)}
    with spmd.set_mesh(mesh):
        x = values(src, input_shapes(op, src, dst, n, None), f"{name}/x")[me]
        z = torch.complex(x, 2.0 * x)  # complex128: sent as its real view
        call(x, "x", **kw)  # the first call finds the group (the general path)
        for t in (x, z) if op != "reduce_scatter" else (x,):
            out = None

            def typed() -> None:
                nonlocal out
                out = call(t, "x", **kw)

            py, c_calls = _calls_made(typed)
            assert wrapper not in py, f"{op} {t.dtype}: the fast path called dist.{wrapper} ({py})"
            assert c_calls.count(method) == 1, (op, t.dtype, method, c_calls)
            assert out is not None and out.dtype == t.dtype
            raw = _raw_fast(op, t, pg)
            assert torch.equal(out, raw), f"{op} {t.dtype}: {out} != the raw call's {raw}"

        class Seen(TorchFunctionMode):
            def __init__(self) -> None:
                super().__init__()
                self.funcs: list[str] = []

            def __torch_function__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                self.funcs.append(getattr(func, "__name__", str(func)))
                return func(*args, **(kwargs or {}))

        with Seen() as mode:
            out = call(x, "x", **kw)
        assert wrapper in mode.funcs, f"{op}: the mode did not see dist.{wrapper}: {mode.funcs}"
        assert torch.equal(out, _raw_fast(op, x, pg)), op


# ------------------------------------------------------------------------------------
# Mesh behaviour and errors (in a world)
# ------------------------------------------------------------------------------------

def _raises(exc: type, needle: str, fn: Callable[[], Any]) -> None:
    try:
        fn()
    except exc as e:
        assert needle in str(e), f"{needle!r} not in {str(e)!r}"
    else:
        raise AssertionError(f"expected {exc.__name__} with {needle!r}")


def check_mesh_errors(ctx: Ctx, name: str) -> None:
    mesh = ctx.mesh("2x2" if ctx.world == 4 else "1d")
    axis = "tp" if ctx.world == 4 else "x"
    x = torch.ones(4, dtype=F64)
    prev = spmd.get_mesh()
    spmd.set_mesh(None)
    try:
        _raises(RuntimeError, "spmd.set_mesh", lambda: spmd.all_reduce(x, axis, src=P, dst=R))
        spmd.set_mesh(mesh)
        assert spmd.get_mesh() is mesh
        with spmd.set_mesh(None):
            assert spmd.get_mesh() is None
            _raises(RuntimeError, "no mesh is set", lambda: spmd.all_gather(x, axis, src=V, dst=R))
        assert spmd.get_mesh() is mesh  # restored on exit
        _raises(ValueError, "did you mean", lambda: spmd.all_reduce(x, axis + "p", src=P, dst=R))
        _raises(ValueError, repr(axis), lambda: spmd.all_reduce(x, "nope", src=P, dst=R))
        # invalid pairs and expert mode: TypeErrors whose text comes from the engine
        _raises(TypeError, "all_gather", lambda: spmd.all_reduce(x, axis, src=V, dst=R))
        _raises(TypeError, "expert_mode=True",
                lambda: spmd.reinterpret(x, axis, src=R, dst=P))
        _raises(TypeError, "convert", lambda: spmd.reinterpret(x, axis, src=I, dst=S(0)))
        _raises(TypeError, "needs dst", lambda: spmd.all_gather(x, axis, src=V))
        _raises(TypeError, "src=", lambda: spmd.all_gather(x, axis, src="V", dst=R))
        _raises(ValueError, "sizes", lambda: spmd.all_gather(
            x, axis, src=S(0), dst=R, sizes=[1] * (ctx.world + 1)))
        _raises(ValueError, "multiple of the axis size",
                lambda: spmd.convert(torch.ones(3), axis, src=R, dst=S(0)))
        _raises(ValueError, "has no shard",
                lambda: spmd.redistribute(x, axis, src=P, dst=R, sizes=[2] * ctx.world))
        sq = torch.ones(ctx.world, ctx.world)
        _raises(ValueError, "takes no sizes",  # all_to_all has no uneven form
                lambda: spmd.redistribute(sq, axis, src=S(0), dst=S(1), sizes=[1] * ctx.world))
        # a ProcessGroup of the mesh is accepted and known by its axis name
        pg = mesh.get_group(axis)
        y = spmd.all_reduce(x, pg, src=P, dst=R)
        n = len(ctx.axis_ranks(mesh, axis))
        assert_close(y, x * n)
        if ctx.world == 4:
            # a group that is not on the mesh: refused, the message says what to do
            g03 = dist.new_group([0, 3])
            g12 = dist.new_group([1, 2])
            mine = g03 if ctx.rank in (0, 3) else g12
            _raises(ValueError, "not a group of the current mesh",
                    lambda: spmd.all_reduce(x, mine, src=P, dst=R))
            # ... but usable without a mesh
            with spmd.set_mesh(None):
                assert_close(spmd.all_reduce(x, mine, src=P, dst=R), x * 2)
            # a tuple of axes out of mesh order still works (ranks in the order written)
            assert_close(spmd.all_reduce(x, ("tp", "dp"), src=P, dst=R), x * 4)
        _raises(TypeError, "DeviceMesh", lambda: spmd.set_mesh("tp"))
        assert spmd.get_mesh() is mesh  # a failed set_mesh changes nothing
    finally:
        spmd.set_mesh(prev)


def check_redistribute_routes(ctx: Ctx, name: str) -> None:
    """redistribute calls what route() says: compare with the direct call."""
    mesh = ctx.mesh("1d")
    with spmd.set_mesh(mesh):
        x = tensor(f"{name}/{ctx.rank}", (ctx.world, 2 * ctx.world))
        assert_close(spmd.redistribute(x, "x", src=P, dst=R), spmd.all_reduce(x, "x", src=P, dst=R))
        assert spmd.redistribute(x, "x", src=V, dst=V) is x
        assert spmd.redistribute(x, "x", src=S(1), dst=S(1)) is x
        # one layout written two ways (a 2-d x): nothing moves, as for the same type
        assert spmd.redistribute(x, "x", src=S(-1), dst=S(1)) is x
        assert spmd.redistribute(x, "x", src=S(0), dst=S(-2)) is x
        assert_close(spmd.redistribute(x, "x", src=V, dst=S(0)), x)


def check_dtype_kept(ctx: Ctx, name: str) -> None:
    mesh = ctx.mesh("1d")
    with spmd.set_mesh(mesh):
        for dt in (torch.float32, torch.bfloat16):
            x = torch.ones(2 * ctx.world, 2 * ctx.world, dtype=dt, requires_grad=True)
            for out in (spmd.all_reduce(x, "x", src=P, dst=R),
                        spmd.all_gather(x, "x", src=S(0), dst=R),
                        spmd.reduce_scatter(x, "x", src=P, dst=S(0)),
                        spmd.all_to_all(x, "x", src=S(0), dst=S(1)) if dt == torch.float32 else x,
                        spmd.convert(x, "x", src=R, dst=P),
                        spmd.reinterpret(x, "x", src=V, dst=P)):
                assert out.dtype == dt, (out.dtype, dt)
                out.sum().backward()
                assert x.grad is not None and x.grad.dtype == dt
                x.grad = None


def check_declare_parameters(ctx: Ctx, name: str) -> None:
    """``spmd.declare_parameters(model)`` types every parameter and buffer its class annotates
    (submodules too), in check mode only; an unannotated one stays untyped; the forgotten
    gradient all-reduce is then caught at the optimizer step (a probe: without declaring,
    check mode ran the wrong step silently)."""
    mesh = ctx.mesh("1d")

    class Inner(torch.nn.Module):
        w: Tensor[S[0, "x"]]

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3, dtype=F64))

    class Outer(torch.nn.Module):
        b: Tensor[R["x"]]
        scale: Tensor[I["x"]]

        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.b = torch.nn.Parameter(torch.ones(3, dtype=F64))
            self.free = torch.nn.Parameter(torch.ones(3, dtype=F64))
            self.register_buffer("scale", torch.ones(3, dtype=F64))

    model = Outer()
    assert spmd.declare_parameters(model) is model  # outside the check mode: nothing
    with spmd.set_mesh(mesh), spmd.typecheck():
        assert spmd.typeof(model.b) is None, spmd.typeof(model.b)
        spmd.declare_parameters(model)
        assert str(spmd.typeof(model.b)) == 'Tensor[R["x"]]', spmd.typeof(model.b)
        assert str(spmd.typeof(model.inner.w)) == 'Tensor[S[0, "x"]]', spmd.typeof(model.inner.w)
        assert str(spmd.typeof(model.scale)) == 'Tensor[I["x"]]', spmd.typeof(model.scale)
        assert spmd.typeof(model.free) is None, spmd.typeof(model.free)
        x = spmd.declare(torch.full((3,), float(ctx.rank + 1), dtype=F64), Tensor[V["x"]])
        spmd.reinterpret((model.b * x).sum(), "x", src=V, dst=P).backward()
        try:
            torch.optim.SGD([model.b], lr=0.1).step()  # b.grad is P: never all-reduced
        except SpmdTypeError as e:
            assert "spmd-" in str(e), e
        else:
            raise AssertionError("a Partial gradient stepped into a declared R parameter")


def _replicas_differ(t: torch.Tensor, world: int) -> bool:
    """Whether the ranks hold different values in ``t`` (read unchecked)."""
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.detach().contiguous())
    return any(not torch.equal(parts[0], q) for q in parts[1:])


def check_parameter_keeps_type(ctx: Ctx, name: str) -> None:
    """``nn.Parameter(x)`` keeps ``x``'s type, so ``declare_parameters`` reports an
    annotation its data contradicts: a rank's S(0) chunk put in an I-annotated parameter
    (``m.b = nn.Parameter(chunk.clone())``), or loaded into it by ``load_state_dict(sd,
    assign=True)``.  Unchecked (and in the check mode before, which stamped I over the
    untyped parameter) the ranks hold different values of the "replicated" parameter; the
    message's all_gather fix, pasted, gives every rank the whole tensor."""
    mesh = ctx.mesh("1d")
    n = 2 * ctx.world

    class Block(torch.nn.Module):
        b: Tensor[I["x"]]

        def __init__(self) -> None:
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(2, dtype=F64))

    full = torch.arange(n, dtype=F64)  # the same on every rank
    m = Block()
    with spmd.set_mesh(mesh):
        m.b = torch.nn.Parameter(spmd.convert(full, "x", src=I, dst=S(0)))
        assert _replicas_differ(m.b, ctx.world)  # measured: the "replicated" b differs
    for how in ("wrapped", "assign"):
        with spmd.set_mesh(mesh), spmd.typecheck():
            f = spmd.declare(full.clone(), Tensor[I["x"]])
            chunk = spmd.convert(f, "x", src=I, dst=S(0))  # b's shape, a different chunk per rank
            m.b = torch.nn.Parameter(torch.zeros(2, dtype=F64))
            if how == "wrapped":
                m.b = torch.nn.Parameter(chunk.clone())
            else:
                m.load_state_dict({"b": chunk.clone()}, assign=True)
            assert str(spmd.typeof(m.b)) == 'Tensor[S[0, "x"]]', spmd.typeof(m.b)
            try:
                spmd.declare_parameters(m)
            except SpmdTypeError as e:
                msg = str(e)
                assert e.code == "spmd-annotation", msg
                assert 'spmd.declare(Block.b, Tensor[I["x"]]) but m.b is S(0) on "x", not I' in msg, msg
                fix = msg[msg.index("all_gather("):].split(" to ")[0]
                assert fix == 'all_gather(m.b, "x", src=S(0), dst=I)', msg
            else:
                raise AssertionError(f"{how}: an S(0) value declared as the I parameter b")
            # the fix, pasted on the value before it is wrapped
            fixed = spmd.all_gather(chunk.clone(), "x", src=S(0), dst=I)
            m.b = torch.nn.Parameter(fixed)
            spmd.declare_parameters(m)
        assert not _replicas_differ(m.b, ctx.world)
        assert_close(m.b.detach(), full, rtol=0, atol=0)


def check_gradients_reduced_in_hooks(ctx: Ctx, name: str) -> None:
    """DDP-style: a replicated parameter's gradient all-reduced in a hook (register_hook, or
    register_post_accumulate_grad_hook setting p.grad) is R at later reads in the check mode,
    as after ``p.grad = all_reduce(...)``: the optimizer step passes (a probe: it was read back
    as P, the step raised, and its fix would have reduced the gradient twice).  Without a
    hook the gradient is still P, and the step still raises."""
    mesh = ctx.mesh("1d")
    n = ctx.world
    for how in ("register_hook", "register_hook_before", "post_accumulate", "none"):
        w = torch.nn.Parameter(torch.ones(3, dtype=F64))
        if how == "register_hook_before":  # at model construction, before the check mode
            w.register_hook(lambda g: spmd.all_reduce(g, "x", src=P, dst=R))
        with spmd.set_mesh(mesh), spmd.typecheck():
            w = spmd.declare(w, Tensor[R["x"]])
            if how == "register_hook":
                w.register_hook(lambda g: spmd.all_reduce(g, "x", src=P, dst=R))
            elif how == "post_accumulate":
                w.register_post_accumulate_grad_hook(
                    lambda q: setattr(q, "grad", spmd.all_reduce(q.grad, "x", src=P, dst=R)))
            x = spmd.declare(torch.full((3,), float(ctx.rank + 1), dtype=F64), Tensor[V["x"]])
            # register_hook reduces each microbatch's gradient before it is accumulated: two
            # microbatches (a post-accumulate hook would reduce the sum again: one)
            steps = 2 if how.startswith("register_hook") else 1
            for _ in range(steps):
                spmd.reinterpret((w * x).sum(), "x", src=V, dst=P).backward()
            expected = steps * sum(range(1, n + 1))
            if how == "none":
                assert str(spmd.typeof(w.grad)) == 'Tensor[P["x"]]', spmd.typeof(w.grad)
                try:
                    torch.optim.SGD([w], lr=0.1).step()
                except SpmdTypeError:
                    continue
                raise AssertionError("a Partial gradient added to an R parameter was accepted")
            from spmd import _checking
            with _checking.suspended():  # comparing is no op of the program
                assert_close(w.grad, torch.full((3,), float(expected), dtype=F64))
            if how == "register_hook_before":  # not wrapped: R if typed, else unknown, never P
                assert "P[" not in str(spmd.typeof(w.grad)), spmd.typeof(w.grad)
            else:
                assert str(spmd.typeof(w.grad)) == 'Tensor[R["x"]]', (how, spmd.typeof(w.grad))
            torch.optim.SGD([w], lr=0.1).step()


_FUSED_OPTIMIZERS = (("Adam", {}), ("Adam", {"amsgrad": True}), ("AdamW", {}), ("SGD", {}),
                     ("SGD", {"momentum": 0.9, "weight_decay": 0.01}), ("Adagrad", {}))


def check_fused_optimizer_steps(ctx: Ctx, name: str) -> None:
    """Optimizers with fused=True (``torch._fused_adam_`` & co., one op for every parameter):
    stepping a replicated weight's gradient that was never all-reduced (Partial) raises, as the
    foreach and single-tensor steps do (it passed, and the weights drifted from the
    reference); with the gradient all-reduced two steps pass and equal the one-process
    fused=False steps on the global batch, the weight still R."""
    mesh = ctx.mesh("1d")
    n = ctx.world
    xs = [torch.arange(3, dtype=F64) / 4 + r for r in range(n)]  # each rank's data
    for cls, kw in _FUSED_OPTIMIZERS:
        ref = torch.nn.Parameter(torch.linspace(-1, 1, 3, dtype=F64))
        ropt = getattr(torch.optim, cls)([ref], lr=0.1, fused=False, **kw)
        for _ in range(2):
            sum((ref * x).sum() ** 2 / 2 for x in xs).backward()
            ropt.step()
            ropt.zero_grad()
        for reduce in (False, True):
            w = torch.nn.Parameter(torch.linspace(-1, 1, 3, dtype=F64))
            opt = getattr(torch.optim, cls)([w], lr=0.1, fused=True, **kw)
            with spmd.set_mesh(mesh), spmd.typecheck():
                spmd.declare(w, Tensor[R["x"]])
                x = spmd.declare(xs[ctx.rank].clone(), Tensor[V["x"]])
                for _ in range(2):
                    loss = spmd.reinterpret((w * x).sum() ** 2 / 2, "x", src=V, dst=P)
                    loss.backward()
                    if not reduce:
                        try:
                            opt.step()
                        except SpmdTypeError as e:
                            assert e.code == "spmd-partial-" + (
                                "affine" if cls == "SGD" else "nonlinear"), (cls, e)
                            assert '(w.grad: Tensor[P["x"]])' in str(e), e
                            break
                        raise AssertionError(f"{cls}(fused=True) stepped a Partial gradient")
                    w.grad = spmd.all_reduce(w.grad, "x", src=P, dst=R)
                    opt.step()
                    opt.zero_grad()
                    assert str(spmd.typeof(w)) == 'Tensor[R["x"]]', (cls, spmd.typeof(w))
            if reduce:
                assert_close(w.detach(), ref.detach(), rtol=0, atol=1e-12, msg=f"{cls} {kw}")


def check_hook(ctx: Ctx, name: str) -> None:
    """With the check mode active every public op reports itself after running."""
    from spmd import _checking

    seen: list[tuple] = []

    def on_collective(op, x, axes, src, dst, out, *, expert_mode, reduce_op):  # noqa: ANN001
        seen.append((op, axes, str(src), str(dst), expert_mode, reduce_op, out is not None))
        return out + 0 if op == "all_reduce" else None

    saved = (_checking.ACTIVE, _checking.on_collective)
    _checking.ACTIVE, _checking.on_collective = True, on_collective
    try:
        mesh = ctx.mesh("1d")
        with spmd.set_mesh(mesh):
            x = torch.ones(ctx.world, 2, dtype=F64)
            out = spmd.all_reduce(x, "x", src=P, dst=R, op="avg")
            assert_close(out, x)
            spmd.reinterpret(x, "x", src=R, dst=P, expert_mode=True)
            spmd.all_gather(x, "x", src=S(-1), dst=I)
            spmd.redistribute(x, "x", src=R, dst=S(0))
            spmd.all_reduce(x, mesh.get_group("x"), src=V, dst=R, op="max")
    finally:
        _checking.ACTIVE, _checking.on_collective = saved
    assert seen == [
        ("all_reduce", ("x",), "P", "R", False, "avg", True),
        ("reinterpret", ("x",), "R", "P", True, "sum", True),
        ("all_gather", ("x",), "S(-1)", "I", False, "sum", True),
        ("redistribute", ("x",), "R", "S(0)", False, "sum", True),
        ("all_reduce", ("x",), "V", "R", False, "max", True),
    ], seen


def _count_in_place_reduces() -> tuple[list[int], Callable[[], None]]:
    """Count the buffers the runtime all-reduces in place (``_dist_utils.all_reduce_``), by
    data pointer: (the list it fills, the call that puts the real function back)."""
    from spmd import _dist_utils

    calls: list[int] = []
    real = _dist_utils.all_reduce_

    def counting(x: torch.Tensor, group: Any, *a: Any) -> torch.Tensor:
        calls.append(x.data_ptr())
        return real(x, group, *a)

    def restore() -> None:
        _dist_utils.all_reduce_ = real

    _dist_utils.all_reduce_ = counting
    return calls, restore


def check_grad_in_place(ctx: Ctx, name: str) -> None:
    """The backward all-reduce runs in place on a gradient autograd owns alone, and only then.

    Gradient of rank r's ``(out * c_r).sum()`` is ``c_r`` (a P value); the all-reduce gives
    ``sum_r c_r``.  Fresh gradients must be reduced in place (the copy is what Megatron does
    not pay); a gradient the user, a hook, ``retain_grad`` or another node can still see
    must keep its value.
    """
    mesh = ctx.mesh("1d")
    n = ctx.world
    me = mesh.get_local_rank("x")
    cs = [tensor(f"{name}/c{k}", (3, 3)) for k in range(n)]
    c, total = cs[me], sum(cs)
    calls, restore = _count_in_place_reduces()

    def leaf() -> torch.Tensor:
        return tensor(f"{name}/x", (3, 3)).requires_grad_(True)

    try:
        with spmd.set_mesh(mesh):
            # fresh gradients: in place, right values
            for op in ("reinterpret(I,R)", "all_reduce(P,R)", "all_reduce(P,I,avg)",
                       "reinterpret(I,V)"):
                x = leaf()
                if op == "reinterpret(I,R)":
                    out = spmd.reinterpret(x, "x", src=I, dst=R)
                elif op == "all_reduce(P,R)":
                    out = spmd.all_reduce(x, "x", src=P, dst=R)
                elif op == "all_reduce(P,I,avg)":
                    out = spmd.all_reduce(x, "x", src=P, dst=I, op="avg")
                else:  # backward: reinterpret(V,P) (a view) then all_reduce(P,I)
                    out = spmd.reinterpret(x, "x", src=I, dst=V)
                calls.clear()
                (out * c).sum().backward()
                if op == "all_reduce(P,I,avg)":  # backward: reinterpret(I,R) / n, no comms
                    assert_close(x.grad, c / n)
                    assert calls == [], (op, calls)
                    continue
                assert_close(x.grad, total, msg=lambda m: f"{op}: {m}")
                assert len(calls) == 1, f"{op}: the fresh gradient was not reduced in place"
            # one gradient tensor reaching two nodes (add passes it to both)
            x1, x2 = leaf(), leaf()
            o1 = spmd.reinterpret(x1, "x", src=I, dst=R)
            o2 = spmd.reinterpret(x2, "x", src=I, dst=R)
            ((o1 + o2) * c).sum().backward()
            assert_close(x1.grad, total)
            assert_close(x2.grad, total)
            # the user's grad_outputs: kept as given
            x = leaf()
            g = c.clone()
            spmd.reinterpret(x, "x", src=I, dst=R).backward(g)
            assert_close(g, c)
            assert_close(x.grad, total)
            # a hook that keeps the gradient, and retain_grad
            x = leaf()
            out = spmd.reinterpret(x, "x", src=I, dst=R)
            kept: list[torch.Tensor] = []
            out.register_hook(kept.append)
            out.retain_grad()
            calls.clear()
            (out * c).sum().backward()
            assert_close(kept[0], c)
            assert_close(out.grad, c)
            assert_close(x.grad, total)
            assert calls == [], "a gradient a hook keeps was reduced in place"
            # a view of a gradient another node still reads (y's nodes are older, so they
            # run after this one): y's branch must see c
            for transpose in (False, True):
                x, y = leaf(), leaf()
                yb = y.reshape(9) * 2
                out = spmd.reinterpret(x, "x", src=I, dst=R)
                calls.clear()
                ov = out.t() if transpose else out
                ((yb + ov.reshape(9)) * c.reshape(9)).sum().backward()
                assert_close(y.grad, 2 * c)
                assert_close(x.grad, total.t() if transpose else total)
                assert calls == [], "a view of a shared gradient was reduced in place"
            # create_graph with a gradient that is part of the graph: never in place, and
            # the double backward still sees the gradient's own value
            x = leaf()
            cc = c.clone().requires_grad_(True)
            out = spmd.reinterpret(x, "x", src=I, dst=R)
            calls.clear()
            (gx,) = torch.autograd.grad((out * cc).sum(), x, create_graph=True)
            assert_close(gx, total)
            assert calls == []
            (gc,) = torch.autograd.grad((gx * x).sum(), cc)  # d<sum_r cc_r, x>/dcc = x . out
            assert_close(gc, x.detach())
            assert_close(cc, c)
    finally:
        restore()


class _SavesOutput(torch.autograd.Function):
    """A user Function that saves its own result for backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * y


class _SquaresSavingInput(torch.autograd.Function):
    """``t * t``, saving its input (a C++ holder of the tensor: no Python reference)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(t)
        return t * t

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (t,) = ctx.saved_tensors
        return 2 * grad * t


def check_forward_in_place(ctx: Ctx, name: str) -> None:
    """The forward all-reduce runs in place on an input nobody else holds, and only then.

    Rank r's input is ``f(x_r)``; the result must be ``sum_r f(x_r)`` and the gradient of
    ``(out * c).sum()`` w.r.t. ``x`` the table's (P -> R: ``f'(x) * sum_r c_r``; P -> I:
    ``f'(x) * c``).  A temporary nobody else sees is reduced in place (one ``all_reduce_``
    call, no copy); an input the user holds (a local, a list, a detached alias, its untyped
    storage, a weak reference, a view of it, a numpy array or a DLPack capsule of it), one autograd saved (``exp``, ``relu``,
    ``sigmoid``, a Function's ``save_for_backward``) or a view must keep its value, and the
    backward must not raise a version-counter error.
    """
    import weakref

    mesh = ctx.mesh("1d")
    n = ctx.world
    me = mesh.get_local_rank("x")
    xs = [tensor(f"{name}/x{k}", (3, 3)) for k in range(n)]
    cs = [tensor(f"{name}/c{k}", (3, 3)) for k in range(n)]
    c, ctotal = cs[me], sum(cs)
    calls, restore = _count_in_place_reduces()

    def leaf() -> torch.Tensor:
        return xs[me].clone().requires_grad_(True)

    def expect(out: torch.Tensor, x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor],
               what: str, dst: Any = R, scale: float = 1.0) -> None:
        assert_close(out, scale * sum(f(t) for t in xs), msg=lambda m: f"{what}: {m}")
        shaped = [ck.reshape(-1)[:out.numel()].reshape(out.shape) for ck in cs]
        (out * shaped[me]).sum().backward()
        g = sum(shaped) if dst is R else shaped[me]
        xd = xs[me].clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(f(xd), xd, scale * g)
        assert_close(x.grad, gx, msg=lambda m: f"{what} (gradient): {m}")

    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    try:
        with spmd.set_mesh(mesh):
            # temporaries nobody else holds: in place, right values and gradients
            for dst, op, scale in ((R, "sum", 1.0), (I, "sum", 1.0), (R, "avg", 1.0 / n)):
                what = f"all_reduce(P,{dst},{op})"
                x = leaf()
                calls.clear()
                out = spmd.all_reduce(x * 2, "x", src=P, dst=dst, op=op)
                assert len(calls) == 1, f"{what}: a temporary was not reduced in place"
                assert calls[0] == out.data_ptr(), what
                expect(out, x, double, what, dst, scale)
            x = leaf()
            calls.clear()
            wt = tensor(f"{name}/w", (3, 3)).requires_grad_(True)  # the same on every rank
            out = spmd.all_reduce(torch.nn.functional.linear(x, wt), "x", src=P, dst=R)
            assert len(calls) == 1, "linear's result (it saves x and w) was not reduced in place"
            expect(out, x, lambda t: torch.nn.functional.linear(t, wt), "linear")
            # Each case below: values first, then the forward's call count (so that a wrong proof
            # shows as the corruption it causes); every case runs, the failures are listed.
            problems: list[str] = []
            # the user holds the input: it keeps its value, no in-place call
            x = leaf()
            t = x * 2
            calls.clear()
            try:
                out = spmd.all_reduce(t, "x", src=P, dst=R)
                fwd = list(calls)
                assert_close(t, xs[me] * 2)
                expect(out, x, double, "held in a local")
                assert fwd == [], "reduced in place"
            except (AssertionError, RuntimeError) as e:
                problems.append(f"held in a local: {e}")
            for how in ("list", "detach", "storage", "weakref", "view", "numpy", "dlpack"):
                x = leaf()
                keep: list = [x * 2]
                t0 = keep[0].detach().clone()
                if how == "detach":
                    keep.append(keep[0].detach())
                elif how == "storage":
                    keep.append(keep[0].untyped_storage())
                elif how == "weakref":
                    keep.append(weakref.ref(keep[0]))
                elif how == "view":
                    keep.append(keep[0].view(9))
                elif how == "numpy":
                    keep.append(keep[0].detach().numpy())
                elif how == "dlpack":  # a C++ holder of the tensor itself
                    keep.append(torch.utils.dlpack.to_dlpack(keep[0].detach()))
                calls.clear()
                try:
                    out = spmd.all_reduce(keep[0] if how == "list" else keep.pop(0), "x",
                                          src=P, dst=R)
                    fwd = list(calls)
                    if how in ("list", "detach"):
                        assert_close(keep[0], t0)
                    elif how == "storage":
                        held = torch.empty(0, dtype=F64).set_(keep[0]).view(3, 3)
                        assert_close(held, t0)
                    elif how == "weakref":
                        assert keep[0]() is None or keep[0]() is not out, "the weakref sees out"
                    elif how == "view":
                        assert_close(keep[0].view(3, 3), t0)
                    elif how == "dlpack":
                        assert_close(torch.utils.dlpack.from_dlpack(keep[0]), t0)
                    else:
                        assert_close(torch.from_numpy(keep[0]), t0)
                    expect(out, x, double, f"held ({how})")
                    assert fwd == [], "reduced in place"
                except (AssertionError, RuntimeError) as e:
                    problems.append(f"held ({how}): {e}")
            # saved by autograd for backward (unchanged, no version-counter error), and views
            # of a temporary (a base another view may read), non-contiguous: copied
            for label, f in (("saved by exp", torch.exp), ("saved by relu", torch.relu),
                             ("saved by sigmoid", torch.sigmoid),
                             ("saved by Function", _SavesOutput.apply),
                             ("view (rows)", lambda t: (t * 2)[1:]),
                             ("view (t)", lambda t: (t * 2).t()),
                             ("view (view)", lambda t: (t * 2).view(9))):
                x = leaf()
                calls.clear()
                try:
                    out = spmd.all_reduce(f(x), "x", src=P, dst=R)
                    fwd = list(calls)
                    expect(out, x, f, label)
                    assert fwd == [], "reduced in place"
                except (AssertionError, RuntimeError) as e:
                    problems.append(f"{label}: {e}")
            # saved as the input of a node (held in C++ only): its backward reads it
            x = leaf()
            keep = [x * 2]
            sq = _SquaresSavingInput.apply(keep[0])
            calls.clear()
            try:
                out = spmd.all_reduce(keep.pop(0), "x", src=P, dst=R)
                fwd = list(calls)
                sq.sum().backward()
                assert_close(x.grad, 8 * xs[me])
                assert fwd == [], "reduced in place"
            except (AssertionError, RuntimeError) as e:
                problems.append(f"saved as an input: {e}")
            # a base the user holds, its view reduced: the base keeps its value
            x = leaf()
            base = x * 2
            try:
                out = spmd.all_reduce(base[1:], "x", src=P, dst=R)
                assert_close(base, xs[me] * 2)
            except (AssertionError, RuntimeError) as e:
                problems.append(f"a view of a held base: {e}")
            # a one-rank axis: an owned input is the result itself (the data is kept forward
            # and backward); a held one is copied and keeps its value
            one = ctx.mesh("1xN")
            with spmd.set_mesh(one):
                x = leaf()
                calls.clear()
                out = spmd.all_reduce(x * 2, "one", src=P, dst=R)
                assert_close(out, xs[me] * 2)
                (out * c).sum().backward()
                assert_close(x.grad, 2 * c)
                x = leaf()
                t = x * 2
                out = spmd.all_reduce(t, "one", src=P, dst=I, op="avg")
                assert out is not t
                with torch.no_grad():
                    out.mul_(3)
                assert_close(t, xs[me] * 2)
                (out * c).sum().backward()
                assert_close(x.grad, 2 * c)
            assert not problems, "\n".join(problems)
            # a leaf: never in place, never modified
            x = leaf()
            calls.clear()
            out = spmd.all_reduce(x, "x", src=P, dst=R)
            assert calls == []
            assert_close(x, xs[me])
            # the in-place result used twice downstream and a double backward
            x = leaf()
            out = spmd.all_reduce(x * 2, "x", src=P, dst=R)
            (gx,) = torch.autograd.grad(((out * c) + out.sin()).sum(), x, create_graph=True)
            assert_close(gx.detach(), 2 * ctotal + 2 * spmd.all_reduce(out.detach().cos(), "x",
                                                                       src=P, dst=R))
    finally:
        restore()


# ------------------------------------------------------------------------------------
# The einsum family with out_partial_axes, against one process computing it all
# ------------------------------------------------------------------------------------

def check_einsum_family(ctx: Ctx, name: str, mesh_key: str, axis: Any) -> None:
    mesh = ctx.mesh(mesh_key)
    ranks = ctx.axis_ranks(mesh, axis)
    n, me = len(ranks), ranks.index(ctx.rank)
    b, h, d = 3, 2 * n, 5
    X = tensor(f"{name}/X", (b, h))
    W = tensor(f"{name}/W", (d, h))
    bias = tensor(f"{name}/b", (d,))
    G = tensor(f"{name}/G", (b, d))
    cols = slice(me * 2, me * 2 + 2)

    def reference(f: Callable[..., torch.Tensor], *full: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = [t.clone().requires_grad_(True) for t in full]
        y = f(*leaves)
        y.backward(G if y.shape == G.shape else tensor(f"{name}/G{y.ndim}", tuple(y.shape)))
        return (y.detach(),) + tuple(t.grad for t in leaves)

    with spmd.set_mesh(mesh):
        cases: list[tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = [
            ("linear", lambda x, w: spmd.linear(x, w, out_partial_axes=axis),
             lambda x, w: torch.nn.functional.linear(x, w)),
            ("matmul", lambda x, w: spmd.matmul(x, w.t(), out_partial_axes=axis),
             lambda x, w: x @ w.t()),
            ("einsum", lambda x, w: spmd.einsum("bh,dh->bd", x, w, out_partial_axes=axis),
             lambda x, w: torch.einsum("bh,dh->bd", x, w)),
        ]
        for label, sharded, full in cases:
            y_ref, gx_ref, gw_ref = reference(full, X, W)
            x = X[:, cols].clone().requires_grad_(True)
            w = W[:, cols].clone().requires_grad_(True)
            y = spmd.all_reduce(sharded(x, w), axis, src=P, dst=I)
            assert_close(y, y_ref, msg=lambda m: f"{label} forward: {m}")
            y.backward(G)  # an I gradient: the loss's gradient, the same on every rank
            assert_close(x.grad, gx_ref[:, cols], msg=lambda m: f"{label} grad x: {m}")
            assert_close(w.grad, gw_ref[:, cols], msg=lambda m: f"{label} grad w: {m}")
        # a bias with out_partial_axes must be P there: convert(R,P) keeps it on one rank
        y_ref, gx_ref, gw_ref, gb_ref = reference(
            lambda x, w, bb: torch.nn.functional.linear(x, w, bb), X, W, bias)
        x = X[:, cols].clone().requires_grad_(True)
        w = W[:, cols].clone().requires_grad_(True)
        bb = bias.clone().requires_grad_(True)
        b_p = spmd.convert(bb, axis, src=R, dst=P)
        y = spmd.all_reduce(spmd.linear(x, w, b_p, out_partial_axes=axis), axis, src=P, dst=I)
        assert_close(y, y_ref)
        y.backward(G)
        assert_close(x.grad, gx_ref[:, cols])
        # bb is R: its gradient is P, the sum over ranks is the full gradient
        assert_close(functools.reduce(torch.add, ctx.gather(bb.grad, ranks, [(d,)] * n)), gb_ref)
        # sum over a sharded dim
        x = X[:, cols].clone().requires_grad_(True)
        y = spmd.all_reduce(spmd.sum(x, 1, out_partial_axes=axis), axis, src=P, dst=I)
        assert_close(y, X.sum(1))
        y.backward(G[:, 0])
        assert_close(x.grad, G[:, :1].expand(b, 2))


# ------------------------------------------------------------------------------------
# Suites
# ------------------------------------------------------------------------------------

def transition_cases() -> Iterator[tuple[str, str, str, bool]]:
    """Every (op, src, dst) of the engine's table, S forms expanded to dims 0, 1, -1."""
    for (op, s, d), t in TRANSITIONS.items():
        srcs = [f"S{i}" for i in DIMS] if s == "S" else [s]
        dsts = [f"S{j}" for j in DIMS] if d == "S" else [d]
        for src in srcs:
            for dst in dsts:
                yield op, src, dst, t.expert


def _op_checks(prefix: str, mesh_key: str, axis: Any, *, full: bool = True
               ) -> Iterator[tuple[str, Callable[[Ctx], None]]]:
    for op, src, dst, expert in transition_cases():
        if not full and "S1" in (src, dst):
            continue
        name = f"{prefix}/{op}({src},{dst})"
        yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis, op=op,
                                      src=src, dst=dst, expert=expert)


def _extra_checks(prefix: str, mesh_key: str, axis: Any, n: int
                  ) -> Iterator[tuple[str, Callable[[Ctx], None]]]:
    for dst in ("R", "I"):
        name = f"{prefix}/all_reduce(P,{dst},avg)"
        yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis,
                                      op="all_reduce", src="P", dst=dst, reduce_op="avg")
    for dst in ("V", *(f"S{i}" for i in DIMS)):
        name = f"{prefix}/reduce_scatter(P,{dst},avg)"
        yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis,
                                      op="reduce_scatter", src="P", dst=dst, reduce_op="avg")
    for reduce_op in ("max", "min"):
        for src, dst in (("V", "R"), ("V", "I"), ("S0", "R")):
            name = f"{prefix}/all_reduce({src},{dst},{reduce_op})"
            yield name, functools.partial(check_no_grad_reduce, name=name, mesh_key=mesh_key,
                                          axis=axis, src=src, dst=dst, reduce_op=reduce_op)
    for given_out in (True, False):
        name = f"{prefix}/all_to_all(V,V,sizes{',out_sizes' if given_out else ''})"
        yield name, functools.partial(check_all_to_all_uneven, name=name, mesh_key=mesh_key,
                                      axis=axis, given_out=given_out)
    sizes = [1, 3] if n == 2 else [1, 3, 0, 2]
    uneven = [("all_gather", f"S{i}", d) for i in DIMS for d in ("R", "I")]
    uneven += [("reduce_scatter", "P", f"S{i}") for i in DIMS]
    uneven += [("convert", s, f"S{i}") for i in DIMS for s in ("R", "I")]
    uneven += [("convert", f"S{i}", "P") for i in DIMS]
    for op, src, dst in uneven:
        name = f"{prefix}/{op}({src},{dst},sizes={sizes})"
        yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis, op=op,
                                      src=src, dst=dst, sizes=sizes)
    name = f"{prefix}/reduce_scatter(P,S0,avg,sizes={sizes})"
    yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis,
                                  op="reduce_scatter", src="P", dst="S0", reduce_op="avg",
                                  sizes=sizes)
    forms = ["R", "I", "V", "P", "S0", "S1"]
    for src in forms:
        for dst in forms:
            if src == dst or route(local_type(src), local_type(dst)) is None:
                continue
            name = f"{prefix}/redistribute({src},{dst})"
            yield name, functools.partial(check_op, name=name, mesh_key=mesh_key, axis=axis,
                                          op="redistribute", src=src, dst=dst)


def named_checks(world: int, group: str, checks: Sequence[Callable[..., None]]
                 ) -> list[tuple[str, Callable[[Ctx], None]]]:
    """Each check as ``w{world}/{group}/{its name without check_}``, called with that name
    (the suites of the rt_*.py files)."""
    out: list[tuple[str, Callable[[Ctx], None]]] = []
    for check in checks:
        n = f"w{world}/{group}/{check.__name__[len('check_'):]}"
        out.append((n, functools.partial(check, name=n)))
    return out


def suite(name: str, world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    """The checks of a world, in the order every rank runs them."""
    checks: list[tuple[str, Callable[[Ctx], None]]] = []

    def add(check_name: str, fn: Callable[..., None], **kw: Any) -> None:
        checks.append((check_name, functools.partial(fn, name=check_name, **kw)))

    if name == "selftest":  # the harness itself: a failure on one rank, then a hang
        def fails_on_rank_1(ctx: Ctx) -> None:
            assert ctx.rank != 1, "deliberate failure on rank 1"

        def hangs(ctx: Ctx) -> None:
            if ctx.rank == 0:
                dist.barrier()  # rank 1 never joins: only the deadline ends this
            else:
                import time
                time.sleep(3600)

        return [("fails-on-rank-1", fails_on_rank_1), ("hangs", hangs)]
    if name == "selftest-slow":  # the harness itself: a world slower than its deadline
        def takes_two_seconds(ctx: Ctx) -> None:
            import time
            time.sleep(2.0)

        return [(f"takes-two-seconds-{i}", takes_two_seconds) for i in range(3)]
    if name == "global":  # global SPMD: redistribute plans, local_map (rt_global.py)
        import rt_global
        return rt_global.suite(world)
    if name == "first-call":  # each check in fresh ranks (rt_first_call.py)
        import rt_first_call
        return rt_first_call.suite(world)
    if name == "autograd-fn":  # custom autograd Functions with raw collectives (rt_autograd_fn.py)
        import rt_autograd_fn
        return rt_autograd_fn.suite(world)
    if name == "hooks":  # the check mode in gradient hooks and Function backward (rt_hooks.py)
        import rt_hooks
        return rt_hooks.suite(world)
    if name == "layout-ops":  # convolutions, pools, norms keep shard dims (rt_layout_ops.py)
        import rt_layout_ops
        return rt_layout_ops.suite(world)
    if name == "dtypes":  # casts, conj bits, op="avg" and gloo's dtypes (rt_dtypes.py)
        import rt_dtypes
        return rt_dtypes.suite(world)
    if name == "compress":  # a Partial gradient compressed before its exchange (rt_compress.py)
        import rt_compress
        return rt_compress.suite(world)
    if name == "einops":  # einops typed by its pattern (rt_einops.py)
        import rt_einops
        return rt_einops.suite(world)
    if name == "sizes":  # sizes= the same list on every rank, verified in check mode (rt_sizes.py)
        import rt_sizes
        return rt_sizes.suite(world)
    if name == "agree":  # the ranks agree on each collective's dtype, shape, sizes= (rt_agree.py)
        import rt_agree
        return rt_agree.suite(world)
    if name == "raw-fix":  # the spmd-raw-collective fix, run, equals the raw call (rt_raw_fix.py)
        import rt_raw_fix
        return rt_raw_fix.suite(world)
    if name == "p2p":  # sends of a Partial between pipeline stages (rt_p2p.py)
        import rt_p2p
        return rt_p2p.suite(world)
    if name == "megatron-mappings":  # Megatron's mapping calls typed (rt_megatron_mappings.py)
        import rt_megatron_mappings
        return rt_megatron_mappings.suite(world)
    if name == "peft-fixes":  # the peft probe's message fixes, run (rt_peft_fixes.py)
        import rt_peft_fixes
        return rt_peft_fixes.suite(world)
    if name == "vocab-fixes":  # vocab-parallel entropy, KL, logsumexp fixes (rt_vocab_fixes.py)
        import rt_vocab_fixes
        return rt_vocab_fixes.suite(world)
    if name == "replicas":  # spmd.check_replicas (rt_replicas.py)
        import rt_replicas
        return rt_replicas.suite(world)
    if name == "random":  # random ops' generators compared across the axis (rt_random.py)
        import rt_random
        return rt_random.suite(world)
    if name == "grads":  # p.grad = value against p's gradient type (rt_grads.py)
        import rt_grads
        return rt_grads.suite(world)
    if name == "flattened":  # a flattened mesh dim is its component axes (rt_flattened.py)
        import rt_flattened
        return rt_flattened.suite(world)
    if name == "bcast-mesh":  # raw broadcasts; meshes naming their axes alike (rt_bcast_mesh.py)
        import rt_bcast_mesh
        return rt_bcast_mesh.suite(world)
    if name == "meshes":  # several meshes over the same ranks (rt_meshes.py)
        import rt_meshes
        return rt_meshes.suite(world)
    if name == "dtensor":  # the DTensor boundary: to_local/from_local/local_map (rt_dtensor.py)
        import rt_dtensor
        return rt_dtensor.suite(world)
    if name == "func":  # torch.func over the typed collectives (rt_func.py)
        import rt_func
        return rt_func.suite(world)
    if name == "compile":  # torch.compile over the typed collectives (rt_compile.py)
        import rt_compile
        return rt_compile.suite(world)
    if name != "main":
        raise KeyError(name)
    p = f"w{world}"
    checks += list(_op_checks(f"{p}/x", "1d", "x"))
    checks += list(_extra_checks(f"{p}/x", "1d", "x", world))
    for op, src, dst in (("all_reduce", "P", "R"), ("all_gather", "S1", "R"),
                         ("reinterpret", "I", "R"), ("convert", "I", "S0")):
        n = f"{p}/x/pg/{op}({src},{dst})"
        checks.append((n, functools.partial(check_op, name=n, mesh_key="1d", axis="x", op=op,
                                            src=src, dst=dst, pass_group=True)))
    add(f"{p}/mesh-errors", check_mesh_errors)
    add(f"{p}/redistribute-routes", check_redistribute_routes)
    add(f"{p}/dtype-kept", check_dtype_kept)
    add(f"{p}/check-mode-hook", check_hook)
    add(f"{p}/check-mode-gradients-reduced-in-hooks", check_gradients_reduced_in_hooks)
    add(f"{p}/check-mode-declare-parameters", check_declare_parameters)
    add(f"{p}/check-mode-parameter-keeps-type", check_parameter_keeps_type)
    add(f"{p}/check-mode-fused-optimizer-steps", check_fused_optimizer_steps)
    add(f"{p}/grad-in-place", check_grad_in_place)
    add(f"{p}/forward-in-place", check_forward_in_place)
    add(f"{p}/einsum-family/x", check_einsum_family, mesh_key="1d", axis="x")
    # the no-grad fast paths: (mesh, axis, whether its group is direct: several ranks in
    # logical order); a flattened group in another rank order takes the general path
    fast_axes = [("1d", "x", True)]
    if world == 2:
        fast_axes.append(("1xN", "one", False))  # one rank
    if world == 4:
        fast_axes += [("2x2", "tp", True), ("2x2", ("dp", "tp"), True),
                      ("2x2", ("tp", "dp"), False), ("2x2T", ("dp", "tp"), False),
                      ("2x2T", "dp", True)]
    for op, src, dst in FAST_FORMS:  # ... issue the ProcessGroup's call themselves
        add(f"{p}/1d/x/{op}({src},{dst})-no-grad-direct-call".replace("'", ""),
            check_fast_path_direct_call, op=op, src=src, dst=dst)
    for key, axis, direct in fast_axes:
        for op, src, dst in FAST_FORMS:
            add(f"{p}/{key}/{axis}/{op}({src},{dst})-no-grad".replace("'", "").replace(" ", ""),
                check_no_grad_fast_path, mesh_key=key, axis=axis, op=op, src=src, dst=dst,
                expect_direct=direct)
    if world == 2:
        checks += list(_op_checks(f"{p}/1x2/one", "1xN", "one", full=False))
    if world == 4:
        checks += list(_op_checks(f"{p}/2x2/tp", "2x2", "tp", full=False))
        checks += list(_op_checks(f"{p}/2x2/(dp,tp)", "2x2", ("dp", "tp")))
        checks += list(_op_checks(f"{p}/2x2/(tp,dp)", "2x2", ("tp", "dp"), full=False))
        checks += list(_op_checks(f"{p}/2x2T/(dp,tp)", "2x2T", ("dp", "tp"), full=False))
        checks += list(_op_checks(f"{p}/2x2T/dp", "2x2T", "dp", full=False))
        checks += list(_extra_checks(f"{p}/2x2/(dp,tp)", "2x2", ("dp", "tp"), 4))
        add(f"{p}/2x2T/(dp,tp)/all_to_all(V,V,sizes)", check_all_to_all_uneven, mesh_key="2x2T",
            axis=("dp", "tp"), given_out=False)  # a flattened group in another rank order
        add(f"{p}/einsum-family/(dp,tp)", check_einsum_family, mesh_key="2x2", axis=("dp", "tp"))
        add(f"{p}/einsum-family/tp", check_einsum_family, mesh_key="2x2", axis="tp")
    names = [c[0] for c in checks]
    assert len(names) == len(set(names)), "duplicate check names"
    return checks
