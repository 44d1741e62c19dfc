"""Raw in-place broadcasts of typed values, and two meshes naming their axes alike (checks run
by test_bcast_mesh_world.py on 4 gloo ranks).

``dist.broadcast(p.data, src, group=dp_group)`` (Megatron's DDP and torchtitan's init: the
replicas of a parameter R on "dp" made truly equal) changes no type: accepted; on a value V,
S(i) or P on an axis its group spans it would make the value R in place: spmd-inplace, whose
typed fix (an all_gather indexed at rank src, an all_reduce) runs and equals the raw call.
The probe once got spmd-raw-collective ("use a typed spmd collective": spmd has no broadcast)
naming the operand ``x``.

Resharding tp=2 -> tp=4 in one program needs two meshes both named ("dp", "tp") (the model
class annotates "tp"): a value typed under mesh A's "tp" (2 ranks) used under mesh B's (4
ranks) was accepted (a Partial reduced over 4 ranks: 4.0 for 2.0; an S(0) shard gathered
to twice the rows).  The check mode records the mesh a type was made under: spmd-mesh.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64


class Col(torch.nn.Module):
    w: Tensor[S[0, "tp"], R["dp"]]

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w)


def _two_by_two(ctx: Ctx) -> Any:
    return ctx.mesh("2x2")


def _model(ctx: Ctx) -> Col:
    """Each rank's block of w, different on the two dp ranks of a tp index (not yet synced)."""
    mesh = _two_by_two(ctx)
    tp = mesh.get_local_rank("tp")
    return Col(torch.arange(8, dtype=F64).reshape(2, 4) + 10 * tp + 100 * ctx.rank)


def _dp_src(ctx: Ctx) -> tuple[Any, int]:
    group = _two_by_two(ctx).get_group("dp")
    return group, dist.get_global_rank(group, 0)


def _raises(fn: Callable[[], Any], code: str) -> str:
    try:
        fn()
    except SpmdTypeError as e:
        assert e.code == code, e
        return e.error.message
    raise AssertionError(f"no {code} error")


def check_broadcast_of_param_data_over_dp_accepted(ctx: Ctx, name: str) -> None:
    mesh = _two_by_two(ctx)
    group, src = _dp_src(ctx)
    model = _model(ctx)
    want = torch.arange(8, dtype=F64).reshape(2, 4) + 10 * mesh.get_local_rank("tp") + 100 * src
    with spmd.set_mesh(mesh), spmd.typecheck():
        spmd.declare_parameters(model)
        before = spmd.typeof(model.w)
        for p in model.parameters():
            dist.broadcast(p.data, src=src, group=group)
        dist.broadcast(model.w.data, src=src, group=group)
        dist.broadcast(model.w.data, group=group, group_src=0)
        assert spmd.typeof(model.w) == before, spmd.typeof(model.w)
    assert_close(model.w.detach(), want)


def check_broadcast_under_no_grad_accepted(ctx: Ctx, name: str) -> None:
    mesh = _two_by_two(ctx)
    group, src = _dp_src(ctx)
    model = _model(ctx)
    with spmd.set_mesh(mesh), spmd.typecheck():
        spmd.declare_parameters(model)
        with torch.no_grad():
            dist.broadcast(model.w, src=src, group=group)
        r = spmd.declare(torch.full((3,), float(ctx.rank), dtype=F64), Tensor[R["dp"], R["tp"]])
        dist.broadcast(r, src=0)  # the world: R on every axis
    assert_close(r, torch.zeros(3, dtype=F64))


def check_broadcast_with_a_gradient_rejected(ctx: Ctx, name: str) -> None:
    mesh = _two_by_two(ctx)
    group, src = _dp_src(ctx)
    model = _model(ctx)
    with spmd.set_mesh(mesh), spmd.typecheck():
        spmd.declare_parameters(model)
        message = _raises(lambda: dist.broadcast(model.w, src=src, group=group), "spmd-no-grad")
    assert "model.w.data" in message and "torch.no_grad()" in message, message


def check_broadcast_of_varying_rejected_and_its_fix_runs(ctx: Ctx, name: str) -> None:
    mesh = _two_by_two(ctx)
    group, src = _dp_src(ctx)
    values = torch.arange(3, dtype=F64) + ctx.rank
    with spmd.set_mesh(mesh), spmd.typecheck():
        v = spmd.declare(values.clone(), Tensor[V["dp"], R["tp"]])
        for p in [v]:
            message = _raises(lambda: dist.broadcast(p.data, src=src, group=group), "spmd-inplace")
        assert "every rank's p.data with rank src's" in message, message
        fix = 'spmd.all_gather(p, "dp", src=V, dst=R)[0]'
        assert fix in message, message
        fixed = eval(fix, {"spmd": spmd, "V": V, "R": R, "p": v})
        assert spmd.typeof(fixed) == spmd.typeof(spmd.declare(values.clone(), Tensor[R["dp"], R["tp"]]))
    raw = values.clone()
    dist.broadcast(raw, src=src, group=group)
    assert_close(fixed, raw)


def check_broadcast_of_a_shard_or_a_partial_rejected(ctx: Ctx, name: str) -> None:
    mesh = _two_by_two(ctx)
    tp = mesh.get_group("tp")
    group, src = _dp_src(ctx)
    with spmd.set_mesh(mesh), spmd.typecheck():
        model = spmd.declare_parameters(_model(ctx))
        message = _raises(lambda: dist.broadcast(model.w.data, src=dist.get_global_rank(tp, 0),
                                                 group=tp), "spmd-inplace")
        assert 'S(0) on "tp"' in message and 'spmd.all_gather(model.w, "tp", src=S(0), dst=R)' in message, message
        part = spmd.declare(torch.ones(2, dtype=F64), Tensor[P["dp"], R["tp"]])
        message = _raises(lambda: dist.broadcast(part.detach(), src=src, group=group), "spmd-inplace")
        assert 'spmd.all_reduce(part, "dp", src=P, dst=R)' in message, message


# --------------------------------------------------------------------------------------
# Two meshes with the same axis names

def _meshes_ab(ctx: Ctx) -> tuple[Any, Any]:
    """A: (dp=2, tp=2); B: (dp=1, tp=4); both named ("dp", "tp") (made once)."""
    key = "_meshes_ab"
    pair = getattr(ctx, key, None)
    if pair is None:
        pair = (_two_by_two(ctx), init_device_mesh("cpu", (1, 4), mesh_dim_names=("dp", "tp")))
        setattr(ctx, key, pair)
    return pair


def check_partial_of_one_mesh_reduced_under_another_rejected(ctx: Ctx, name: str) -> None:
    a, b = _meshes_ab(ctx)
    with spmd.set_mesh(a), spmd.typecheck():
        ones = spmd.declare(torch.ones(3, dtype=F64), Tensor[V["tp"], R["dp"]])
        part = spmd.reinterpret(ones, "tp", src=V, dst=P)  # a sum over A's 2 tp ranks: 2
        with spmd.set_mesh(b):
            message = _raises(lambda: spmd.all_reduce(part, "tp", src=P, dst=R), "spmd-mesh")
        total = spmd.all_reduce(part, "tp", src=P, dst=R)  # back under A: right
    assert "part (" in message and "spmd.all_reduce(part" in message and "spmd.declare(part," in message, message
    assert_close(total, torch.full((3,), 2.0, dtype=F64))


def check_shard_gathered_under_another_mesh_rejected(ctx: Ctx, name: str) -> None:
    a, b = _meshes_ab(ctx)
    with spmd.set_mesh(a), spmd.typecheck():
        w_full = spmd.declare(torch.arange(16.0, dtype=F64).reshape(8, 2), Tensor[I["tp"], R["dp"]])
        shard_a = spmd.convert(w_full, "tp", src=I, dst=S(0))
        with spmd.set_mesh(b):
            message = _raises(lambda: spmd.all_gather(shard_a, "tp", src=S(0), dst=I), "spmd-mesh")
            assert 'spmd.all_gather(shard_a, "tp", src=S(0), dst=R)' in message, message
            # an op on it (and a value of B) is rejected too
            x_b = spmd.declare(torch.ones(4, 2, dtype=F64), Tensor[S[0, "tp"], R["dp"]])
            message = _raises(lambda: shard_a + x_b, "spmd-mesh")
            assert "shard_a (" in message, message
            # local work (an optimizer step) is told to run under the mesh it was typed on
            assert "with spmd.set_mesh(<that mesh>): around it" in message, message


def check_full_value_moves_between_meshes(ctx: Ctx, name: str) -> None:
    a, b = _meshes_ab(ctx)
    whole = torch.arange(16.0, dtype=F64).reshape(8, 2)
    with spmd.set_mesh(a), spmd.typecheck():
        shard_a = spmd.convert(spmd.declare(whole.clone(), Tensor[I["tp"], R["dp"]]), "tp", src=I, dst=S(0))
        full = spmd.all_gather(shard_a, "tp", src=S(0), dst=I)  # under A: the full value
        keep = shard_a.clone()
        with spmd.set_mesh(b):
            shard_b = spmd.convert(full, "tp", src=I, dst=S(0))  # I/R on every axis of A
            again = spmd.all_gather(shard_b * 1, "tp", src=S(0), dst=I)
            # a value re-declared under B is B's
            mine = spmd.declare(keep, Tensor[S[0, "tp"], R["dp"]])
            stacked = spmd.all_gather(mine * 1, "tp", src=S(0), dst=R)
        # a slice of A, and back under A: A's values as before
        with spmd.set_mesh(a["tp"]):
            spmd.all_gather(shard_a, "tp", src=S(0), dst=I)
    assert_close(shard_b, whole[2 * ctx.rank:2 * ctx.rank + 2])
    assert_close(again, whole)
    assert tuple(stacked.shape) == (16, 2), stacked.shape  # what the declaration stated


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "bcast-mesh", (
        check_broadcast_of_param_data_over_dp_accepted, check_broadcast_under_no_grad_accepted,
        check_broadcast_with_a_gradient_rejected,
        check_broadcast_of_varying_rejected_and_its_fix_runs,
        check_broadcast_of_a_shard_or_a_partial_rejected,
        check_partial_of_one_mesh_reduced_under_another_rejected,
        check_shard_gathered_under_another_mesh_rejected, check_full_value_moves_between_meshes))
