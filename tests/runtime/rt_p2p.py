"""Point-to-point between pipeline stages on 4 gloo ranks (checks run by test_p2p_world.py).

A Partial sent with a raw ``dist.send`` / ``dist.isend`` / ``dist.P2POp(dist.isend, ...)``
once passed the check mode: the receiver got one rank's summand, not the sum (the probe of
session 36: error 4.8 on a row-parallel output).  The check mode now raises on the sender
before anything is sent (engine ``check_send``, spmd-partial-nonlinear); each check then
sends what the message says (the all_reduce first) and the receiver compares the value.

The tied embedding's gradient summed over a group that is no mesh axis's (Megatron's
embedding group of the first and last stage when pp > 2) through an annotated autograd
Function around the raw all_reduce, the form README documents: the raw call with a
``# type: ignore`` raises spmd-raw-collective in the check mode, and spmd.all_reduce takes
mesh axes only.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.testing import assert_close

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64
_MESHES: dict[str, Any] = {}


def _pp_tp() -> DeviceMesh:
    """pp=2 x tp=2, made once (every rank runs the checks in the same order)."""
    if "pp_tp" not in _MESHES:
        _MESHES["pp_tp"] = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    return _MESHES["pp_tp"]


def _full() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 8, generator=g, dtype=F64), torch.randn(8, 8, generator=g, dtype=F64))


def _row_parallel(x: torch.Tensor, w: torch.Tensor, tpr: int) -> Any:
    """Stage 0's row-parallel linear: P on "tp" (each rank holds its summand)."""
    xt = spmd.declare(x, Tensor[I["tp"], V["pp"]])
    wt = spmd.declare(w.chunk(2, 1)[tpr].clone(), Tensor[S[1, "tp"], V["pp"]])
    return spmd.linear(spmd.convert(xt, "tp", src=I, dst=S(1)), wt, out_partial_axes="tp")


def _send_and_receive(send: Callable[[torch.Tensor, int], None]) -> None:
    """Stage 0 sends a Partial with ``send`` (an error before anything is sent), then the
    fix's value; stage 1 receives it and finds the full product."""
    mesh = _pp_tp()
    stage, tpr = mesh.get_local_rank("pp"), mesh.get_local_rank("tp")
    peer = int(mesh.mesh[1 - stage][tpr])
    x, w = _full()
    with spmd.set_mesh(mesh), spmd.typecheck():
        if stage == 0:
            out = _row_parallel(x, w, tpr)
            try:
                send(out.detach().contiguous(), peer)
            except SpmdTypeError as e:
                assert e.code == "spmd-partial-nonlinear", e
                message = e.error.message
                assert "cannot be sent as a value" in message, message
                assert 'all_reduce(t, "tp", src=P, dst=R) before the send' in message, message
            else:
                raise AssertionError("a Partial sent to the next stage passed the check mode")
            out = spmd.all_reduce(out, "tp", src=P, dst=R)  # the message's fix
            send(out.detach().contiguous(), peer)
        else:
            buf = torch.empty(4, 8, dtype=F64)
            dist.recv(buf, src=peer)
            y = spmd.declare(buf, Tensor[R["tp"], V["pp"]])
            assert_close(y, F.linear(x, w))


def check_send_partial(ctx: Ctx, name: str) -> None:
    _send_and_receive(lambda t, peer: dist.send(t, dst=peer))


def check_isend_partial(ctx: Ctx, name: str) -> None:
    _send_and_receive(lambda t, peer: dist.isend(t, peer).wait())


def check_batch_isend_partial(ctx: Ctx, name: str) -> None:
    def send(t: torch.Tensor, peer: int) -> None:
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer)]):
            req.wait()

    _send_and_receive(send)


class _SendPartial(torch.autograd.Function):
    """A send in an annotated Function's forward: its annotations type what it sends, as
    for a raw collective there (a Partial whose receiver continues the sum)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[P["tp"], V["pp"]], peer: int) -> Tensor[P["tp"], V["pp"]]:
        dist.send(x.detach().contiguous(), dst=peer)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: Tensor[R["tp"], V["pp"]]) -> tuple[Tensor[R["tp"], V["pp"]], None]:
        return g, None


def check_send_in_function_allowed(ctx: Ctx, name: str) -> None:
    """The receiver declares the summands it gets Partial and completes the sum itself."""
    mesh = _pp_tp()
    stage, tpr = mesh.get_local_rank("pp"), mesh.get_local_rank("tp")
    peer = int(mesh.mesh[1 - stage][tpr])
    x, w = _full()
    with spmd.set_mesh(mesh), spmd.typecheck():
        if stage == 0:
            _SendPartial.apply(_row_parallel(x, w, tpr), peer)
        else:
            buf = torch.empty(4, 8, dtype=F64)
            dist.recv(buf, src=peer)
            y = spmd.all_reduce(spmd.declare(buf, Tensor[P["tp"], V["pp"]]), "tp", src=P, dst=R)
            assert_close(y, F.linear(x, w))


class _EmbGroupSum(torch.autograd.Function):
    """The tied embedding's gradient summed over the embedding group (no mesh axis's)."""

    @staticmethod
    def forward(ctx: Any, g: Tensor[P["pp"]], group: dist.ProcessGroup) -> Tensor[R["pp"]]:
        out = g.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, d: Tensor[P["pp"]]) -> tuple[Tensor[R["pp"]], None]:
        raise NotImplementedError  # a gradient's reduction is never differentiated


def check_embedding_group_function(ctx: Ctx, name: str) -> None:
    """pp=4: the first and last stage sum the tied weight's gradient over {0, 3} only."""
    if "pp4" not in _MESHES:
        _MESHES["pp4"] = init_device_mesh("cpu", (4,), mesh_dim_names=("pp",))
        _MESHES["emb"] = dist.new_group([0, 3])
    mesh, emb_group = _MESHES["pp4"], _MESHES["emb"]
    r = dist.get_rank()
    with spmd.set_mesh(mesh), spmd.typecheck():
        if r in (0, 3):
            g = spmd.declare(torch.full((2,), float(r + 1), dtype=F64), Tensor[P["pp"]])
            out = _EmbGroupSum.apply(g, emb_group)
            assert spmd.typeof(out) == spmd.typeof(spmd.declare(out.detach(), Tensor[R["pp"]]))
            assert out.tolist() == [5.0, 5.0], out
            # the raw call outside a Function raises on every rank of the group, before any
            # communication (README: the Function is the way)
            try:
                dist.all_reduce(g, group=emb_group)
            except SpmdTypeError as e:
                assert e.code == "spmd-raw-collective", e
            else:
                raise AssertionError("a raw all_reduce of a typed tensor passed the check mode")


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    assert world == 4
    return named_checks(world, "p2p", (
        check_send_partial, check_isend_partial, check_batch_isend_partial,
        check_send_in_function_allowed, check_embedding_group_function))
