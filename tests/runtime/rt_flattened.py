"""A flattened mesh dim is a name for its component axes (checks run by
test_flattened_world.py on 4 gloo ranks).

``mesh["dp_replicate", "dp_shard"]._flatten("dp")`` makes "dp" one group over both axes.  A
value reduced over ("dp_replicate", "dp_shard") and again over "dp" (the mesh-3d probe's
finalize_flat_twice: a gradient 4x too big) was accepted by both checkers, and correct code
reduced over "dp" was typed P on both axes still.  Now "dp" resolves to the tuple everywhere:
the group, the types, declarations.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, Tensor
from spmd._mesh import resolve_axis
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64
NAMES = ("dp_replicate", "dp_shard", "tp")
DATA = ("dp_replicate", "dp_shard")


def _mesh(ctx: Ctx, shape: tuple[int, int, int]) -> Any:
    key = "_flattened_mesh_" + "x".join(map(str, shape))
    m = getattr(ctx, key, None)
    if m is None:
        m = init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
        setattr(ctx, key, m)
    return m


def _raises(fn: Callable[[], Any], *words: str) -> str:
    try:
        fn()
    except (SpmdTypeError, ValueError, TypeError) as e:
        text = str(e)
    else:
        raise AssertionError("accepted")
    for w in words:
        assert w in text, text
    return text


def check_flattened_name_is_the_tuple(ctx: Ctx, name: str) -> None:
    """Under the root mesh, "dp" is ("dp_replicate", "dp_shard"): same group, same ranks,
    same names, and the sum over all four ranks."""
    mesh = _mesh(ctx, (2, 2, 1))
    flat = mesh[DATA]._flatten("dp")
    with spmd.set_mesh(mesh):
        g = resolve_axis("dp")
        assert g.axes == DATA, g.axes
        assert g.ranks == resolve_axis(DATA).ranks, (g.ranks, resolve_axis(DATA).ranks)
        assert g.pg is flat.get_group()
        assert spmd._mesh.axis_names("dp") == DATA
        out = spmd.all_reduce(torch.full((3,), float(ctx.rank), dtype=F64), "dp", src=P, dst=R)
    assert_close(out, torch.full((3,), 6.0, dtype=F64))
    with spmd.set_mesh(flat):  # the flattened mesh itself: its own name is the tuple too
        assert resolve_axis("dp").axes == DATA


def check_reduced_twice_through_the_flattened_mesh(ctx: Ctx, name: str) -> None:
    """The probe's finalize_flat_twice: rejected in check mode (the gradient was 4x)."""
    mesh = _mesh(ctx, (2, 2, 1))
    flat = mesh[DATA]._flatten("dp")
    with spmd.set_mesh(mesh), spmd.typecheck():
        gn = spmd.declare(torch.ones(3, dtype=F64), Tensor[I["tp"], P["dp_replicate", "dp_shard"]])
        r = spmd.all_reduce(gn, DATA, src=P, dst=R)
        with spmd.set_mesh(flat):
            _raises(lambda: spmd.all_reduce(r, "dp", src=P, dst=R), "spmd-src-mismatch",
                    "already R")
        _raises(lambda: spmd.all_reduce(r, "dp", src=P, dst=R), "already R")


def check_reduced_over_the_flattened_name_is_R_on_both(ctx: Ctx, name: str) -> None:
    """Correct code: one reduction over "dp", declared R on both components, or R["dp"]."""
    mesh = _mesh(ctx, (2, 2, 1))
    flat = mesh[DATA]._flatten("dp")
    with spmd.set_mesh(mesh), spmd.typecheck():
        gn = spmd.declare(torch.full((3,), float(ctx.rank), dtype=F64),
                          Tensor[I["tp"], P["dp_replicate", "dp_shard"]])
        with spmd.set_mesh(flat):
            r = spmd.all_reduce(gn, "dp", src=P, dst=R)
        t = spmd.typeof(r)
        assert str(t.get("dp_replicate")) == "R" and str(t.get("dp_shard")) == "R", t
        assert t.get("dp") is None, t
        r = spmd.declare(r, Tensor[I["tp"], R["dp_replicate", "dp_shard"]])
        r = spmd.declare(r, Tensor[I["tp"], R["dp"]])  # the alias in an annotation
        assert spmd.typeof(r).get("dp") is None, spmd.typeof(r)
        with spmd.set_mesh(mesh["tp"]):  # a type's "dp" under a slice: the components still
            r = spmd.declare(r, Tensor[R["dp"]])
        assert spmd.typeof(r).get("dp") is None, spmd.typeof(r)
        _raises(lambda: spmd.declare(r, Tensor[R["dp"], P["dp_shard"]]), "spmd-annotation",
                '"dp_shard" appears twice', '"dp" is the flattened "dp_replicate", "dp_shard"')
    assert_close(r, torch.full((3,), 6.0, dtype=F64))


def check_flattened_group_covers_size_one_axes(ctx: Ctx, name: str) -> None:
    """On a (1, 2, 2) mesh the flattened data group's ranks are dp_shard's: passed as a
    ProcessGroup it is reduced over dp_replicate too (a false error on the declaration was
    the probe's F2); a mesh dim's own group keeps its one name."""
    mesh = _mesh(ctx, (1, 2, 2))
    pg = mesh[DATA]._flatten().get_group()
    with spmd.set_mesh(mesh), spmd.typecheck():
        assert resolve_axis(pg).axes == DATA, resolve_axis(pg).axes
        assert resolve_axis(mesh.get_group("dp_shard")).axes == ("dp_shard",)
        gn = spmd.declare(torch.full((3,), float(ctx.rank), dtype=F64),
                          Tensor[I["tp"], P["dp_replicate", "dp_shard"]])
        r = spmd.all_reduce(gn, pg, src=P, dst=R)
        r = spmd.declare(r, Tensor[I["tp"], R["dp_replicate", "dp_shard"]])
    ranks = resolve_axis(pg).ranks
    assert_close(r, torch.full((3,), float(sum(ranks)), dtype=F64))


def check_declared_axis_not_on_the_mesh(ctx: Ctx, name: str) -> None:
    """spmd.declare naming an axis the mesh lacks ("cp" on the 3-D mesh): an error naming the
    mesh's axes and the closest one, as the static checker's (was accepted silently)."""
    mesh = _mesh(ctx, (2, 2, 1))
    with spmd.set_mesh(mesh), spmd.typecheck():
        x = spmd.declare(torch.ones(3, dtype=F64), Tensor[I["tp"]])
        _raises(lambda: spmd.declare(x, Tensor[I["tp"], R["cp"]]), "spmd-annotation",
                "unknown mesh axis 'cp'", "'dp_replicate', 'dp_shard', 'tp'",
                'did you mean', '"tp"?)')


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "flattened", (
        check_flattened_name_is_the_tuple, check_reduced_twice_through_the_flattened_mesh,
        check_reduced_over_the_flattened_name_is_R_on_both,
        check_flattened_group_covers_size_one_axes, check_declared_axis_not_on_the_mesh))
