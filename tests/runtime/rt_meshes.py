"""Several meshes over the same ranks (checks run by test_meshes_world.py on 2 and 4 gloo ranks).

Megatron-Core's MoE "parallel folding" runs the dense layers on one mesh (dp, tp) and the
experts on another over the same ranks (ep, edp), switching with ``spmd.set_mesh``. A value
that went through the expert mesh comes back typed on "ep" too: declaring it on the dense
mesh drops the axes that are not the current mesh's (they say nothing there), as the static
checker's declaration does. The meshes probe's case A: the round trip, then an all_gather to
I and ``loss.backward()``, was rejected by the check mode ("Varying on 'ep'") with no way out.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd import _mesh
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64


def _meshes(ctx: Ctx) -> tuple[Any, Any]:
    """A dense mesh ("tp",) and an expert mesh ("ep",) over the same ranks (made once)."""
    key = "_meshes_pair"
    pair = getattr(ctx, key, None)
    if pair is None:
        pair = (init_device_mesh("cpu", (ctx.world,), mesh_dim_names=("tp",)),
                init_device_mesh("cpu", (ctx.world,), mesh_dim_names=("ep",)))
        setattr(ctx, key, pair)
    return pair


def check_value_back_from_another_mesh(ctx: Ctx, name: str) -> None:
    dense, expert = _meshes(ctx)
    rows = torch.arange(2 * ctx.world * 3, dtype=F64).reshape(2 * ctx.world, 3) / 7 + ctx.rank
    with spmd.set_mesh(dense), spmd.typecheck():
        x = spmd.declare(rows.clone().requires_grad_(True), Tensor[S[0, "tp"]])
        with spmd.set_mesh(expert):
            y = spmd.all_to_all(x * 2, "ep", src=V, dst=V)   # dispatch ...
            y = spmd.all_to_all(y, "ep", src=V, dst=V)       # ... and combine: x * 2 again
        assert spmd.typeof(y).get("ep") is not None, spmd.typeof(y)
        y = spmd.declare(y, Tensor[S[0, "tp"]])              # back on the dense mesh
        assert spmd.typeof(y).get("ep") is None, spmd.typeof(y)
        full = spmd.all_gather(y, "tp", src=S(0), dst=I)
        loss = (full * full).sum()
        loss.backward()
    assert_close(y.detach(), 2 * rows)
    assert_close(x.grad, 8 * rows)  # d/dx of the sum of (2x)^2 over every rank's rows


def check_declare_keeps_the_current_meshs_axes(ctx: Ctx, name: str) -> None:
    dense, _ = _meshes(ctx)
    with spmd.set_mesh(dense), spmd.typecheck():
        x = spmd.declare(torch.ones(ctx.world, dtype=F64), Tensor[R["tp"]])
        # "dp": on no current mesh: an error, as the static checker's unknown axis (it was
        # kept silently, and a type on an axis the mesh lacks checks nothing: the mesh-3d probe)
        try:
            spmd.declare(x, Tensor[I["dp"]])
        except SpmdTypeError as e:
            message = str(e)
        else:
            raise AssertionError("an axis the mesh lacks was declared")
        t = spmd.typeof(x)
    assert "unknown mesh axis 'dp': the current mesh has axes 'tp'" in message, message
    assert str(t.get("tp")) == "R" and t.get("dp") is None, t


def check_declare_under_a_submesh_keeps_the_root_meshs_axes(ctx: Ctx, name: str) -> None:
    """``mesh["x"]`` is part of the ("one", "x") mesh: a value's "one" type still holds under
    it (the regression probe: a tp-only helper declaring a gradient under mesh["tp"] dropped
    its P on "dp", and a forgotten dp all-reduce passed the optimizer step)."""
    mesh = ctx.mesh("1xN")
    with spmd.set_mesh(mesh), spmd.typecheck():
        g = spmd.declare(torch.ones(ctx.world, dtype=F64), Tensor[P["one"], R["x"]])
        with spmd.set_mesh(mesh["x"]):
            g = spmd.declare(g, Tensor[R["x"]])
        t = spmd.typeof(g)
        flat = mesh._flatten("one_x_flat") if "one_x_flat" not in (
            getattr(mesh, "_flatten_mapping", None) or {}) else mesh["one_x_flat"]
        with spmd.set_mesh(flat):
            g = spmd.declare(g, Tensor[R["x"]])
        t2 = spmd.typeof(g)
    assert str(t.get("one")) == "P" and str(t.get("x")) == "R", t
    assert str(t2.get("one")) == "P", t2


def check_unknown_axis_of_another_mesh(ctx: Ctx, name: str) -> None:
    dense, expert = _meshes(ctx)
    with spmd.set_mesh(expert):
        pass  # the expert mesh was set once
    with spmd.set_mesh(dense):
        try:
            spmd.all_reduce(torch.ones(2, dtype=F64), "ep", src=P, dst=R)
        except ValueError as e:
            message = str(e)
        else:
            raise AssertionError("an axis of another mesh was accepted")
    assert "unknown mesh axis 'ep': the current mesh has axes 'tp'" in message, message
    assert "'ep' is an axis of the mesh with axes 'ep'" in message, message
    assert "spmd.set_mesh(" in message, message


def check_declare_on_another_meshs_axis_is_kept(ctx: Ctx, name: str) -> None:
    """An axis of another mesh set before is an axis the static checker's one list has: a
    declaration on it is kept, not an unknown axis; a name of no mesh set yet is unknown, and
    its message says another mesh's axis needs that mesh current (the docs probe: it only
    said "did you mean", the mistake docs/meshes.md warns of)."""
    dense, expert = _meshes(ctx)
    with spmd.set_mesh(expert):
        pass  # the expert mesh was set once
    with spmd.set_mesh(dense), spmd.typecheck():
        x = spmd.declare(torch.ones(ctx.world, dtype=F64), Tensor[R["tp"], V["ep"]])
        t = spmd.typeof(x)
        try:
            spmd.all_reduce(torch.ones(2, dtype=F64), "tq", src=P, dst=R)
        except ValueError as e:
            message = str(e)
        else:
            raise AssertionError("an axis of no mesh was accepted")
    assert str(t.get("tp")) == "R" and str(t.get("ep")) == "V", t
    assert "unknown mesh axis 'tq': the current mesh has axes 'tp' (did you mean \"tp\"?)" in message, message
    assert "an axis of another mesh needs that mesh current: `with spmd.set_mesh(that_mesh):`" in message, message


def check_equal_submesh_shares_its_binding(ctx: Ctx, name: str) -> None:
    mesh = ctx.mesh("1xN")
    bindings = []
    for _ in range(4):
        with spmd.set_mesh(mesh["x"]):  # a new DeviceMesh object at every slicing
            spmd.all_reduce(torch.ones(2, dtype=F64), "x", src=P, dst=R)
            bindings.append(_mesh._current)
    assert all(b is bindings[0] for b in bindings), bindings
    assert sum(1 for m in _mesh._bindings if m == mesh["x"]) == 1


def check_a_name_for_other_ranks_warns(ctx: Ctx, name: str) -> None:
    import warnings

    dense = ctx.mesh("1d")  # "x" spans every rank
    with spmd.set_mesh(dense):
        pass
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        # "x" here spans this rank alone (same name, other ranks): warned
        # (no process groups made: set_mesh needs none, and making world + 1 of them here
        # under load lost the store's connection now and then)
        other = DeviceMesh("cpu", torch.arange(ctx.world).reshape(ctx.world, 1),
                           mesh_dim_names=("e", "x"), _init_backend=False)
        with spmd.set_mesh(other):
            pass
        # a slice of the first mesh: "x" spans the same ranks, no warning
        with spmd.set_mesh(ctx.mesh("1xN")["x"]):
            pass
    texts = [str(w.message) for w in seen if "spmd.set_mesh" in str(w.message)]
    assert len(texts) == 1, texts
    assert f"axis 'x' of the mesh with axes 'e', 'x' spans ranks [{ctx.rank}] here" in texts[0], texts
    assert "Give the axes different names" in texts[0], texts


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "meshes", (
        check_value_back_from_another_mesh, check_declare_keeps_the_current_meshs_axes,
        check_declare_under_a_submesh_keeps_the_root_meshs_axes,
        check_unknown_axis_of_another_mesh, check_declare_on_another_meshs_axis_is_kept,
        check_equal_submesh_shares_its_binding,
        check_a_name_for_other_ranks_warns))
