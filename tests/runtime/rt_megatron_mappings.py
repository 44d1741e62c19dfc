"""Megatron's mapping functions, called unchanged, in the check mode (checks run by
test_megatron_mappings_world.py on 2 gloo ranks).

A fake megatron-core on ``sys.path`` (``fake_megatron/``: 0.16.1's mapping Functions as its
``mappings.py`` writes them, raw torch.distributed inside) stands for the real one.  The check
mode types each call as the typed collective of the engine's table (spmd_mypy.engine.megatron,
the table the stub is generated from): before, a result was untyped (``spmd.typeof`` None), a
Partial passed to ``copy_to_...`` ran, and a sequence-parallel MLP gathering with
``tensor_parallel_output_grad=False`` before a column-parallel linear gave a wrong ``x.grad``
with no error (the probe of session 39, f4 and f6).  The functions are bound here by a
``from ... import`` before any block opens: the check mode sees them at their Function's
``apply``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_megatron"))

import megatron.core.tensor_parallel as tensor_parallel  # noqa: E402
from megatron.core.tensor_parallel import mappings  # noqa: E402
from megatron.core.tensor_parallel.mappings import (  # noqa: E402
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)

F64 = torch.float64
_MESHES: dict[str, DeviceMesh] = {}


def _mesh() -> DeviceMesh:
    """dp=1 x tp=2, made once; the fake's tensor-model-parallel group is its tp group."""
    if "dp_tp" not in _MESHES:
        _MESHES["dp_tp"] = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        mappings.TP_GROUP = _MESHES["dp_tp"].get_group("tp")
    return _MESHES["dp_tp"]


def _row_parallel(tpr: int) -> tuple[Any, torch.Tensor]:
    """A row-parallel product, P on tp (V on dp), and its full value."""
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(4, 8, generator=g, dtype=F64), torch.randn(3, 8, generator=g, dtype=F64)
    ht = spmd.declare(h.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"], V["dp"]])
    wt = spmd.declare(w.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"], V["dp"]])
    return spmd.linear(ht, wt, out_partial_axes="tp"), F.linear(h, w)


def _reduce_from(call: Callable[..., Any], name: str) -> None:
    mesh = _mesh()
    with spmd.set_mesh(mesh), spmd.typecheck():
        y, full = _row_parallel(mesh.get_local_rank("tp"))
        z = call(y)
        assert spmd.typeof(z) == spmd.typeof(spmd.declare(full.clone(), Tensor[I["tp"], V["dp"]])), (
            name, spmd.typeof(z))
        assert_close(z, full)


def check_reduce_from_typed(ctx: Ctx, name: str) -> None:
    """reduce_from_... is all_reduce(P, I) on tp: its result is I on tp, dp kept, whether the
    function is a name bound before the block, the module's attribute or the package's, and
    whether the group is given or defaults to the tensor-model-parallel group."""
    _reduce_from(reduce_from_tensor_model_parallel_region, "from-import")
    _reduce_from(lambda y: mappings.reduce_from_tensor_model_parallel_region(y), "module")
    _reduce_from(lambda y: tensor_parallel.reduce_from_tensor_model_parallel_region(
        y, group=_mesh().get_group("tp")), "package, group=")


def check_partial_into_copy_to_raises(ctx: Ctx, name: str) -> None:
    """A Partial passed to copy_to_... (I expected) is the static checker's spmd-mismatch, at
    the call, naming the function and the fix."""
    mesh = _mesh()
    with spmd.set_mesh(mesh), spmd.typecheck():
        y, _ = _row_parallel(mesh.get_local_rank("tp"))
        try:
            copy_to_tensor_model_parallel_region(y)
        except SpmdTypeError as e:
            assert e.code == "spmd-mismatch", e
            message = e.error.message
            assert 'argument y (parameter "input_" of copy_to_tensor_model_parallel_region)' in message, message
            assert 'all_reduce(y, "tp", src=P, dst=I)' in message, message
        else:
            raise AssertionError("a Partial passed to copy_to_... ran in the check mode")
        # the fix: reduce first; copy_to then gives R (its backward all-reduces)
        r = copy_to_tensor_model_parallel_region(reduce_from_tensor_model_parallel_region(y))
        t = spmd.typeof(r)
        assert t is not None and (str(t.get("tp")), str(t.get("dp"))) == ("R", "V"), t


def check_undeclared_partial_into_reduce_from(ctx: Ctx, name: str) -> None:
    """Megatron's row-parallel layer as written: a product not declared Partial (F.linear of
    an S(1) input and an S(1) weight, no out_partial_axes) passed to reduce_from_... (all_reduce
    src=P on tp), to spmd.all_reduce(..., src=P) and to reduce_scatter_to_sequence_parallel_region
    is taken as what it is, each rank's part of the sum (session 40: it raised spmd-global):
    typed as the collective says, its values and the input's gradient those of a
    single-process float64 reference."""
    mesh = _mesh()
    tpr = mesh.get_local_rank("tp")
    g = torch.Generator().manual_seed(3)
    H, W = torch.randn(4, 8, generator=g, dtype=F64), torch.randn(6, 8, generator=g, dtype=F64)
    href = H.clone().requires_grad_()
    (F.linear(href, W) ** 2).sum().backward()
    assert href.grad is not None
    with spmd.set_mesh(mesh), spmd.typecheck():
        h = spmd.declare(H.chunk(2, 1)[tpr].clone().requires_grad_(), Tensor[S[1, "tp"]])
        w = spmd.declare(W.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        z = reduce_from_tensor_model_parallel_region(F.linear(h, w))
        assert str(spmd.typeof(z)) == 'Tensor[I["tp"]]', spmd.typeof(z)
        assert_close(z, F.linear(H, W))
        (z ** 2).sum().backward()
        assert h.grad is not None
        assert_close(h.grad, href.grad.chunk(2, 1)[tpr])
        r = spmd.all_reduce(F.linear(h, w), "tp", src=P, dst=R)
        assert str(spmd.typeof(r)) == 'Tensor[R["tp"]]', spmd.typeof(r)
        assert_close(r, F.linear(H, W))
        s = reduce_scatter_to_sequence_parallel_region(F.linear(h, w))
        assert str(spmd.typeof(s)) == 'Tensor[S[0, "tp"]]', spmd.typeof(s)
        assert_close(s, F.linear(H, W).chunk(2, 0)[tpr])


def check_undeclared_partial_read_beside_its_reduction(ctx: Ctx, name: str) -> None:
    """Another read of the pending product than its reduction by spmd.all_reduce(..., src=P)
    (which returns a new tensor) stays the check mode's message for an undeclared partial sum
    (spmd-global), as statically.  (Megatron's reduce_from_... sums its input in place: after
    it the input holds the sum, no longer pending, and the check mode reads it so.)"""
    mesh = _mesh()
    tpr = mesh.get_local_rank("tp")
    with spmd.set_mesh(mesh), spmd.typecheck():
        h = spmd.declare(torch.ones(4, 8, dtype=F64).chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        w = spmd.declare(torch.ones(3, 8, dtype=F64).chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        y = F.linear(h, w)
        spmd.all_reduce(y, "tp", src=P, dst=R)
        try:
            y.softmax(-1)
        except SpmdTypeError as e:
            assert e.code == "spmd-global", e
            assert 'out_partial_axes="tp"' in e.error.message, e.error.message
        else:
            raise AssertionError("a softmax of an undeclared partial sum passed")


def check_pending_mean_averaged(ctx: Ctx, name: str) -> None:
    """A mean over the shard dim is each rank's block mean (session 40): spmd.all_reduce(...,
    src=P, op="avg") of it (blocks of one size: torch.chunk of a divisible dim) is the whole's
    mean, forward and backward, against a single-process float64 reference; so is a mean
    scaled and added to another, and torch.mean over a tuple of dims with keepdim."""
    mesh = _mesh()
    tpr = mesh.get_local_rank("tp")
    g = torch.Generator().manual_seed(5)
    X, Y = torch.randn(4, 8, generator=g, dtype=F64), torch.randn(6, 4, generator=g, dtype=F64)
    xref, yref = X.clone().requires_grad_(), Y.clone().requires_grad_()
    ref = xref.mean(1)
    ref2 = torch.mean(xref, (0, 1), keepdim=True) * 2 - yref.mean()
    ((ref ** 2).sum() + (ref2 ** 2).sum()).backward()
    assert xref.grad is not None and yref.grad is not None
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(X.chunk(2, 1)[tpr].clone().requires_grad_(), Tensor[S[1, "tp"]])
        y = spmd.declare(Y.chunk(2, 0)[tpr].clone().requires_grad_(), Tensor[S[0, "tp"]])
        m = spmd.all_reduce(x.mean(1), "tp", src=P, dst=I, op="avg")
        assert str(spmd.typeof(m)) == 'Tensor[I["tp"]]', spmd.typeof(m)
        assert_close(m, X.mean(1))
        m2 = spmd.all_reduce(torch.mean(x, (0, 1), keepdim=True) * 2 - y.mean(), "tp", src=P,
                             dst=I, op="avg")
        assert_close(m2, ref2.detach())
        ((m ** 2).sum() + (m2 ** 2).sum()).backward()
        assert x.grad is not None and y.grad is not None
        assert_close(x.grad, xref.grad.chunk(2, 1)[tpr])
        assert_close(y.grad, yref.grad.chunk(2, 0)[tpr])
        r = spmd.all_reduce(spmd.sum(x.detach(), 1, out_partial_axes="tp"), "tp", src=P, dst=R) / 8
        assert_close(r, X.mean(1))  # the fix for unequal blocks: the sum over the global count


def _raises(f: Callable[[], Any], what: str, words: str) -> None:
    try:
        f()
    except SpmdTypeError as e:
        assert e.code == "spmd-global", e
        assert words in e.error.message, e.error.message
    else:
        raise AssertionError(f"{what} passed")


class _RawMeanSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[S[-1, "tp"]]) -> Tensor[I["tp"]]:
        se = x.exp().mean(-1)
        torch.distributed.all_reduce(se, group=mappings.TP_GROUP)
        return se.log()

    @staticmethod
    def backward(ctx: Any, g: Tensor[I["tp"]]) -> None:
        return None


def check_pending_mean_summed_raises(ctx: Ctx, name: str) -> None:
    """A mean over the shard dim summed over the ranks is tp x the whole's mean (session 40):
    spmd.all_reduce(..., src=P) (op="sum"), reinterpret(V->P), Megatron's reduce_from_... and a
    raw SUM all-reduce in a Function raise spmd-global, the message offering op="avg"; an
    op="avg" reduction of a pending SUM (the sum / tp) raises too."""
    mesh = _mesh()
    tpr = mesh.get_local_rank("tp")
    X = torch.arange(32, dtype=F64).reshape(4, 8)
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(X.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        avg = 'op="avg"'
        _raises(lambda: spmd.all_reduce(x.mean(1), "tp", src=P, dst=R), "a summed mean", avg)
        _raises(lambda: spmd.reinterpret(x.mean(1) * 2, "tp", src=V, dst=P), "a reinterpreted mean",
                avg)
        _raises(lambda: reduce_from_tensor_model_parallel_region(x.mean(-1)),
                "reduce_from_ of a mean", avg)
        _raises(lambda: _RawMeanSum.apply(x), "a raw SUM all-reduce of a mean", avg)
        _raises(lambda: spmd.all_reduce(x.sum(1), "tp", src=P, dst=R, op="avg"),
                "an averaged sum", "divides their sum")
        assert_close(spmd.all_reduce(x.sum(1), "tp", src=P, dst=R), X.sum(1))


def check_biased_product_into_reductions_raises(ctx: Ctx, name: str) -> None:
    """F.linear(h, w, b) with an R bias (the row-parallel product with the bias added on every
    rank) passed to reduce_from_..., reduce_scatter_to_... or spmd.all_reduce(..., src=P):
    the reduction would count the bias once per rank (session 40 probe: accepted, 1.34 off on
    2 ranks); the static checker's spmd-partial-affine, raised before the collective runs,
    naming the call and the fix; the fix (the bias added after) matches a float64 reference."""
    mesh = _mesh()
    tpr = mesh.get_local_rank("tp")
    g = torch.Generator().manual_seed(0)
    H, W, B = (torch.randn(4, 8, generator=g, dtype=F64), torch.randn(3, 8, generator=g, dtype=F64),
               torch.randn(3, generator=g, dtype=F64))
    calls: list[tuple[str, Callable[[Any], Any]]] = [
        ("reduce_from_tensor_model_parallel_region(F.linear(h, w, b))",
         reduce_from_tensor_model_parallel_region),
        ("reduce_scatter_to_sequence_parallel_region(F.linear(h, w, b))",
         reduce_scatter_to_sequence_parallel_region),
        ('spmd.all_reduce(F.linear(h, w, b), "tp", src=P, dst=R)',
         lambda y: spmd.all_reduce(y, "tp", src=P, dst=R))]
    with spmd.set_mesh(mesh), spmd.typecheck():
        h = spmd.declare(H.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        w = spmd.declare(W.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"]])
        b = spmd.declare(B.clone(), Tensor[R["tp"]])
        for text, call in calls:
            try:
                call(F.linear(h, w, b))
            except SpmdTypeError as e:
                assert e.code == "spmd-partial-affine", e
                message = e.error.message
                assert "its bias b is R on \"tp\"" in message, message
                assert "summed once per rank" in message, message
                assert "add it after the reduction" in message, message
            else:
                raise AssertionError(f"{text} with an R bias passed the check mode")
        out = spmd.reinterpret(reduce_from_tensor_model_parallel_region(F.linear(h, w)), "tp",
                               src=I, dst=R) + b
        assert_close(out, F.linear(H, W, B))
        out = spmd.all_reduce(F.linear(h, w), "tp", src=P, dst=R) + b
        assert_close(out, F.linear(H, W, B))


def _sp_mlp(output_grad: bool) -> None:
    """Megatron's sequence-parallel MLP: gather (dim 0), column-parallel, row-parallel,
    reduce-scatter; x.grad compared with a float64 reference."""
    mesh = _mesh()
    r = mesh.get_local_rank("tp")
    g = torch.Generator().manual_seed(1)
    X, W1, W2 = (torch.randn(8, 4, generator=g, dtype=F64), torch.randn(6, 4, generator=g, dtype=F64),
                 torch.randn(4, 6, generator=g, dtype=F64))
    xr = X.clone().requires_grad_()
    (F.linear(F.gelu(F.linear(xr, W1)), W2) ** 2).sum().backward()
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(X.chunk(2, 0)[r].clone().requires_grad_(), Tensor[S[0, "tp"]])
        w1 = spmd.declare(W1.chunk(2, 0)[r].clone(), Tensor[S[0, "tp"]])
        w2 = spmd.declare(W2.chunk(2, 1)[r].clone(), Tensor[S[1, "tp"]])
        h = gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=output_grad)
        a = F.gelu(F.linear(h, w1))
        y = spmd.linear(a, w2, out_partial_axes="tp")
        out = reduce_scatter_to_sequence_parallel_region(y)
        assert str(spmd.typeof(out)) == 'Tensor[S[0, "tp"]]', spmd.typeof(out)
        loss = spmd.reinterpret((out * out).sum(), "tp", src=V, dst=P)
        loss.backward()
    assert x.grad is not None and xr.grad is not None
    assert_close(x.grad, xr.grad.chunk(2, 0)[r])


def check_sequence_parallel_mlp(ctx: Ctx, name: str) -> None:
    _sp_mlp(True)


def check_sequence_parallel_output_grad_false_raises(ctx: Ctx, name: str) -> None:
    """tensor_parallel_output_grad=False gives I (its backward only splits): the
    column-parallel linear then raises spmd-invariant-mix, as the static checker reports it,
    before a wrong x.grad is computed."""
    try:
        _sp_mlp(False)
    except SpmdTypeError as e:
        assert e.code == "spmd-invariant-mix", e
        assert 'reinterpret(h, "tp", src=I, dst=R)' in e.error.message, e.error.message
    else:
        raise AssertionError("tensor_parallel_output_grad=False before a column-parallel "
                             "linear passed the check mode")


def check_untyped_outside_the_block(ctx: Ctx, name: str) -> None:
    """Outside a typecheck() block a mapping call is Megatron's own, untouched."""
    mesh = _mesh()
    with spmd.set_mesh(mesh):
        y, full = _row_parallel(mesh.get_local_rank("tp"))
        z = reduce_from_tensor_model_parallel_region(y.detach().clone())
        assert spmd.typeof(z) is None, spmd.typeof(z)
        assert_close(z, full)


def check_group_names_the_axis(ctx: Ctx, name: str) -> None:
    """The check mode reads the group's mesh axis (the static checker assumes tp for every
    call): copy_to_... on the dp group is reinterpret(I, R) on dp, tp kept."""
    mesh = _mesh()
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(torch.ones(2, 3, dtype=F64), Tensor[I["tp"], I["dp"]])
        z = copy_to_tensor_model_parallel_region(x, group=mesh.get_group("dp"))
        t = spmd.typeof(z)
        assert t is not None and (str(t.get("dp")), str(t.get("tp"))) == ("R", "I"), t


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    assert world == 2
    return named_checks(world, "megatron-mappings", (
        check_reduce_from_typed, check_partial_into_copy_to_raises,
        check_undeclared_partial_into_reduce_from,
        check_undeclared_partial_read_beside_its_reduction,
        check_biased_product_into_reductions_raises, check_sequence_parallel_mlp,
        check_sequence_parallel_output_grad_false_raises, check_untyped_outside_the_block,
        check_group_names_the_axis, check_pending_mean_averaged,
        check_pending_mean_summed_raises))
