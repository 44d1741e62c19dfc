"""``spmd.set_mesh`` warns when an axis name of a mesh set before spans other ranks in the new
one; not against a mesh of a process group since destroyed (the regression probe: after
destroy/init_process_group a new ("dp",) mesh was warned against the dead (dp, tp) one).
One process, torch's fake backend."""

from __future__ import annotations

import warnings

import torch.distributed as dist

import spmd


def _init() -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group(backend="fake", rank=0, world_size=2, store=FakeStore())


def _warnings_of(fn) -> list[str]:  # noqa: ANN001
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen if "spmd.set_mesh" in str(w.message)]


def _fresh(body) -> None:  # noqa: ANN001
    """``body`` in a new interpreter: it makes and destroys its own process groups, which
    another test of this worker may hold already (a skip then hid the test in CI)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(body).result(timeout=300)


def test_a_name_for_other_ranks_warns_but_not_against_a_dead_mesh() -> None:
    _fresh(_warns_but_not_against_a_dead_mesh)


def _warns_but_not_against_a_dead_mesh() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    _init()
    try:
        with spmd.set_mesh(init_device_mesh("cpu", (2,), mesh_dim_names=("x",))):
            pass
        other = init_device_mesh("cpu", (2, 1), mesh_dim_names=("e", "x"))  # "x": rank 0 alone
        assert len(_warnings_of(lambda: spmd.set_mesh(other).__exit__())) == 1
    finally:
        spmd.set_mesh(None)
        dist.destroy_process_group()
    _init()  # a new process group: the meshes above are dead
    try:
        again = init_device_mesh("cpu", (2, 1), mesh_dim_names=("e2", "x"))
        assert _warnings_of(lambda: spmd.set_mesh(again).__exit__()) == []
    finally:
        spmd.set_mesh(None)
        dist.destroy_process_group()


def test_an_unknown_axis_names_a_live_mesh_only() -> None:
    """The unknown-axis message says which earlier mesh has the name, but not a mesh of a
    process group since destroyed (it cannot be set again; the name is a misspelling or a
    mesh to make anew)."""
    _fresh(_names_a_live_mesh_only)


def _names_a_live_mesh_only() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from spmd._mesh import unknown_axis_message

    _init()
    try:
        with spmd.set_mesh(init_device_mesh("cpu", (2,), mesh_dim_names=("ep",))):
            pass
        assert "is an axis of the mesh with axes 'ep'" in unknown_axis_message("ep", ("dp",))
    finally:
        spmd.set_mesh(None)
        dist.destroy_process_group()
    _init()  # a new process group: the "ep" mesh above is dead
    try:
        with spmd.set_mesh(init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))):
            message = unknown_axis_message("ep", ("dp",))
        assert "is an axis of the mesh" not in message, message
        assert message.startswith("unknown mesh axis 'ep'"), message
    finally:
        spmd.set_mesh(None)
        dist.destroy_process_group()
