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


def _fold_data(ctx: Ctx) -> tuple[Any, Any, torch.Tensor, torch.Tensor, int]:
    """Parallel folding (the dsv3 probe's f1): the dense mesh dp x tp = 2 x 2, the expert mesh
    "ep" over the 4 ranks (it spans both ranks of each tp group); each dp rank's 8 tokens of
    width 4, one expert (a 4 x 4 weight) per ep rank."""
    dense, expert = ctx.mesh("2x2"), _meshes(ctx)[1]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(2, 8, 4, generator=g, dtype=F64)
    weights = torch.randn(4, 4, 4, generator=g, dtype=F64)
    return dense, expert, tokens, weights, dense.get_local_rank("dp")


def check_fold_dispatch_of_a_tp_invariant_value_is_rejected(ctx: Ctx, name: str) -> None:
    """Tokens I on the dense "tp" (the same on both tp ranks) dispatched over "ep", whose group
    holds both: every token was sent twice, each expert saw it twice, the expert gradients
    came out 2x, and both checkers accepted (the dsv3 probe's f1).  The check mode knows the
    two meshes' layouts: spmd-mesh, with the split-first fix."""
    if ctx.world != 4:
        return
    dense, expert, tokens, _, dp = _fold_data(ctx)
    messages = []
    with spmd.set_mesh(dense), spmd.typecheck():
        h = spmd.declare(tokens[dp].clone(), Tensor[I["tp"], V["dp"]])
        with spmd.set_mesh(expert):
            for call in (lambda: spmd.all_to_all(h, "ep", src=V, dst=V),
                         lambda: spmd.all_reduce(h.sum(), "ep", src=P, dst=R),
                         lambda: spmd.all_gather(h, "ep", src=S(0), dst=R)):
                try:
                    call()
                except SpmdTypeError as e:
                    messages.append(str(e))
                else:
                    raise AssertionError("a collective over 'ep' of a tp-invariant value was accepted")
            # a max of one value on both tp ranks is that value: fine, and one value on "tp"
            # still (the ep group holds every rank); a convert cuts each rank's own block: the
            # tp ranks hold different blocks after it, V on "tp"
            m = spmd.all_reduce(torch.amax(h), "ep", src=V, dst=R, op="max")
            c = spmd.convert(h, "ep", src=I, dst=S(0))
            types = spmd.typeof(m), spmd.typeof(c)
    tp_ranks = [2 * dp, 2 * dp + 1]
    a2a = messages[0]
    assert a2a.startswith('all_to_all over "ep" on duplicated data: h (Tensor[I["tp"], V["dp"]]) '
                          'is I on "tp" of the mesh with axes "dp" and "tp": '
                          f'ranks {tp_ranks} hold the same value'), a2a
    assert "ranks [0, 1, 2, 3], holds ranks " + str(tp_ranks) in a2a, a2a
    assert 'h = spmd.convert(h, "tp", src=I, dst=S(0)) (or dst=V)' in a2a, a2a
    assert a2a.endswith("[spmd-mesh]"), a2a
    assert messages[1].startswith('all_reduce over "ep" on duplicated data: h.sum()'), messages[1]
    assert "reduce over an axis whose group holds one rank of each such group" in messages[1], messages[1]
    assert messages[2].startswith('all_gather over "ep" on duplicated data'), messages[2]
    assert str(types[0].get("tp")) == "I", types[0]
    assert str(types[1].get("tp")) == "V", types[1]


def check_fold_dispatch_split_over_tp_first(ctx: Ctx, name: str) -> None:
    """The fix: split the tokens over "tp" first, dispatch, combine, gather over "tp": each
    expert sees each token once (its gradient matches a single-process reference)."""
    if ctx.world != 4:
        return
    dense, expert, tokens, weights, dp = _fold_data(ctx)
    w = weights[ctx.rank:ctx.rank + 1].clone().requires_grad_(True)
    with spmd.set_mesh(dense), spmd.typecheck():
        with spmd.set_mesh(expert):
            w_t = spmd.declare(w, Tensor[S[0, "ep"]])
        h = spmd.declare(tokens[dp].clone(), Tensor[I["tp"], V["dp"]])
        h_tp = spmd.convert(h, "tp", src=I, dst=S(0))
        with spmd.set_mesh(expert):
            routed = spmd.all_to_all(h_tp, "ep", src=V, dst=V)   # block e -> expert e
            out = spmd.all_to_all(routed @ w_t[0], "ep", src=V, dst=V)
        out = spmd.declare(out, Tensor[S[0, "tp"], V["dp"]])
        y = spmd.all_gather(out, "tp", src=S(0), dst=I)
        loss = spmd.reinterpret(y.pow(2).sum() / 2, "dp", src=V, dst=P)
        loss.backward()
    ref_w = weights.clone().requires_grad_(True)  # rank (d, t) sends block e of its half to e
    ref = torch.stack([(tokens[d].chunk(2)[t].chunk(4)[e] @ ref_w[e]).pow(2).sum() / 2
                       for d in range(2) for t in range(2) for e in range(4)]).sum()
    ref.backward()
    assert w.grad is not None and ref_w.grad is not None
    assert_close(w.grad[0], ref_w.grad[ctx.rank])
    full = torch.cat([tokens[dp].chunk(2)[t].chunk(4)[e] @ weights[e] for t in range(2)
                      for e in range(4)])
    assert_close(y.detach(), full)


def check_fold_expert_gradient_reduced_over_dense_dp_is_rejected(ctx: Ctx, name: str) -> None:
    """An expert gradient (S(0) on the expert mesh's "ep", one expert per rank) all-reduced
    over the dense "dp" by mistake: the sum adds other experts' gradients (docs/meshes.md,
    "Gradients of expert parameters"; the dsv3 probe's e1).  It has no type on "dp" (unknown,
    unchecked), and both checkers accepted it; the check mode knows "dp"'s group holds two
    ranks of one "ep" group, which hold different blocks."""
    if ctx.world != 4:
        return
    dense, expert, _, weights, dp = _fold_data(ctx)
    with spmd.set_mesh(dense), spmd.typecheck():
        with spmd.set_mesh(expert):
            grad = spmd.declare(weights[ctx.rank:ctx.rank + 1].clone(), Tensor[S[0, "ep"]])
        try:
            spmd.all_reduce(grad, "dp", src=P, dst=R)
        except SpmdTypeError as e:
            message = str(e)
        else:
            raise AssertionError("an expert gradient all-reduced over the dense 'dp' was accepted")
    dp_ranks = [ctx.rank % 2, ctx.rank % 2 + 2]
    assert message.startswith('all_reduce over "dp" sums different blocks: grad '
                              '(Tensor[S[0, "ep"]]) is S(0) on "ep" of the mesh with axes "ep": '
                              'ranks [0, 1, 2, 3] hold different blocks of it'), message
    assert f"ranks {dp_ranks}, holds ranks {dp_ranks} of them" in message, message
    assert "it needs no reduction" in message and message.endswith("[spmd-mesh]"), message


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "meshes", (
        check_value_back_from_another_mesh, check_declare_keeps_the_current_meshs_axes,
        check_declare_under_a_submesh_keeps_the_root_meshs_axes,
        check_unknown_axis_of_another_mesh, check_declare_on_another_meshs_axis_is_kept,
        check_equal_submesh_shares_its_binding,
        check_a_name_for_other_ranks_warns,
        check_fold_dispatch_of_a_tp_invariant_value_is_rejected,
        check_fold_dispatch_split_over_tp_first,
        check_fold_expert_gradient_reduced_over_dense_dp_is_rejected))
