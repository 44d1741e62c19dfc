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
from spmd import PS, I, P, R, Tensor
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


def check_redistribute_specs_read_the_flattened_name(ctx: Ctx, name: str) -> None:
    """redistribute(x, src=PS["dp", None], dst=PS[None, None]) is over the components, as the
    static checker reads it (the planner said "unknown mesh axis" naming pyproject.toml)."""
    mesh = _mesh(ctx, (2, 2, 1))
    mesh[DATA]._flatten("dp")
    x = torch.full((1, 3), float(ctx.rank), dtype=F64)
    with spmd.set_mesh(mesh):
        y = spmd.redistribute(x, src=PS["dp", None], dst=PS[None, None])
        assert_close(y, torch.arange(4, dtype=F64)[:, None].expand(4, 3))
        with spmd.typecheck():
            x = spmd.declare(x, Tensor[PS["dp", None], R["tp"]])
            y = spmd.redistribute(x, src=PS["dp", None], dst=PS[None, None])
            t = spmd.typeof(y)
            assert str(t.get("dp_replicate")) == "R" and t.get("dp") is None, t
        _raises(lambda: spmd.redistribute(x, src=PS["dq", None], dst=PS[None, None]),
                "unknown mesh axis", "the current mesh")


def check_declared_before_the_mesh_is_read_when_it_is_set(ctx: Ctx, name: str) -> None:
    """P["dp"] declared with no mesh set (and what was computed from it) reads "dp" as its
    components once the mesh is set (it stayed "dp": an axis no collective names)."""
    mesh = _mesh(ctx, (2, 2, 1))
    mesh[DATA]._flatten("dp")
    with spmd.set_mesh(None), spmd.typecheck():
        gn = spmd.declare(torch.full((3,), float(ctx.rank), dtype=F64), Tensor[I["tp"], P["dp"]])
        g2 = gn * 2
        with spmd.set_mesh(mesh):
            for v in (gn, g2):
                t = spmd.typeof(v)
                assert t.get("dp") is None and str(t.get("dp_shard")) == "P", t
            r = spmd.all_reduce(g2, DATA, src=P, dst=R)
            _raises(lambda: spmd.all_reduce(r, "dp", src=P, dst=R), "already R")
    assert_close(r, torch.full((3,), 12.0, dtype=F64))


def check_declared_before_a_flattening_made_after_set_mesh(ctx: Ctx, name: str) -> None:
    """The same when the dim is flattened after the mesh was set: read at its first use."""
    mesh = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=NAMES)  # no flattened dims yet
    with spmd.set_mesh(None), spmd.typecheck():
        gn = spmd.declare(torch.full((3,), float(ctx.rank), dtype=F64), Tensor[I["tp"], P["dpf"]])
        with spmd.set_mesh(mesh):
            mesh[DATA]._flatten("dpf")
            r = spmd.all_reduce(gn, "dpf", src=P, dst=R)
            t = spmd.typeof(gn)
            assert t.get("dpf") is None and str(t.get("dp_replicate")) == "P", t
            _raises(lambda: spmd.all_reduce(r, DATA, src=P, dst=R), "already R")
    assert_close(r, torch.full((3,), 6.0, dtype=F64))


class _Annotated(torch.nn.Module):
    w: Tensor[I["tp"], R["cp"]]

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3, dtype=F64))


def check_declare_parameters_checks_the_axes(ctx: Ctx, name: str) -> None:
    """declare_parameters checks a parameter's axes as declare does ("cp" on a mesh without it
    was carried silently)."""
    mesh = _mesh(ctx, (2, 2, 1))
    with spmd.set_mesh(mesh), spmd.typecheck():
        _raises(lambda: spmd.declare_parameters(_Annotated()), "spmd-annotation",
                "_Annotated.w", "unknown mesh axis 'cp'", 'did you mean')


def check_messages_list_the_names_one_can_write(ctx: Ctx, name: str) -> None:
    """An unknown axis's message lists the mesh's dims and the flattened names the user made,
    not the one spmd made for a tuple axis (torch's default name, "dp_shard_tp")."""
    mesh = _mesh(ctx, (2, 2, 1))
    mesh[DATA]._flatten("dp")
    with spmd.set_mesh(mesh):
        spmd.all_reduce(torch.ones(2, dtype=F64), ("dp_shard", "tp"), src=P, dst=R)
        for fn in (lambda: resolve_axis("dq"),
                   lambda: spmd.all_reduce(torch.ones(2, dtype=F64), ("dq", "tp"), src=P, dst=R)):
            text = _raises(fn, "unknown mesh axis 'dq'", "'dp'")
            assert "dp_shard_tp" not in text, text
        with spmd.typecheck():
            text = _raises(lambda: spmd.declare(torch.ones(2), Tensor[R["dq"]]), "'dp'")
            assert "dp_shard_tp" not in text, text


def check_a_group_made_late_on_half_the_ranks(ctx: Ctx, name: str) -> None:
    """The world's last check: ranks 2 and 3 make their flattened group a second after ranks 0
    and 1 have made theirs and finished (``new_group`` has no barrier).  Rank 0 hosts the
    store the late ranks still read, so it must not leave before them (rt_world waits for
    every rank); it left first now and then on a loaded host, and the late ranks failed with
    "DistNetworkError: Connection reset by peer"."""
    import time

    mesh = _mesh(ctx, (2, 1, 2))
    if ctx.rank >= 2:
        time.sleep(1.0)
    with spmd.set_mesh(mesh):
        r = spmd.all_reduce(torch.ones(2, dtype=F64), ("dp_shard", "tp"), src=P, dst=R)
    assert_close(r, torch.full((2,), 2.0, dtype=F64))


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "flattened", (
        check_flattened_name_is_the_tuple, check_reduced_twice_through_the_flattened_mesh,
        check_reduced_over_the_flattened_name_is_R_on_both,
        check_flattened_group_covers_size_one_axes, check_declared_axis_not_on_the_mesh,
        check_redistribute_specs_read_the_flattened_name,
        check_declared_before_the_mesh_is_read_when_it_is_set,
        check_declared_before_a_flattening_made_after_set_mesh,
        check_declare_parameters_checks_the_axes, check_messages_list_the_names_one_can_write,
        check_a_group_made_late_on_half_the_ranks))
