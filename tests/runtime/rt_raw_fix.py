"""The spmd-raw-collective fix, executed, computes what the raw call computed, on a gloo world
(checks run by test_raw_fix_world.py).

Each check calls a raw collective on a typed tensor under ``spmd.typecheck()``, takes the
typed call the error suggests, runs it (the text eval'd with the tensor's name bound), and
compares it with the raw call on the same values outside the check mode.  The functional
collectives are not seen by the check mode (their ops pass through torch's dispatcher, not its
function protocol): for them the message is the engine's, the text the plugin prints.  The fix
once dropped the reduce op (op=ReduceOp.AVG suggested a plain spmd.all_reduce: a sum, n times
the average).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.testing import assert_close

import spmd
from rt_checks import Ctx
from spmd import P, R, S, Tensor, V
from spmd_mypy.engine.collectives import raw_collective_error
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import SpmdType

F64 = torch.float64
AXIS = "x"
_CALL = re.compile(r"; use (spmd\.\w+\((?:[^()]|\([^()]*\))*\))")


def _values(ctx: Ctx) -> torch.Tensor:
    """This rank's values, different on every rank (4 per rank: chunks on 2 or 4 ranks)."""
    return torch.arange(4 * ctx.world, dtype=F64) * (ctx.rank + 1) + ctx.rank


def _fix(message: str) -> str:
    m = _CALL.search(message)
    assert m is not None, f"no typed call in the message: {message}"
    return m.group(1)


def _run_fix(message: str, name: str, x: torch.Tensor) -> torch.Tensor:
    return eval(_fix(message), {"spmd": spmd, "P": P, "R": R, "V": V, "S": S, name: x})


def _check_mode_fix(ctx: Ctx, declared: Any, raw: Callable[[torch.Tensor], torch.Tensor],
                    *, says: str = "") -> None:
    """``raw(x)`` on a typed x raises spmd-raw-collective; its fix run on x equals raw(x) on
    the same values, untyped."""
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(_values(ctx), declared)
            try:
                raw(x)
            except SpmdTypeError as e:
                assert e.code == "spmd-raw-collective", e
                message = str(e)
            else:
                raise AssertionError("the raw collective on a typed tensor was not reported")
            assert says in message, message
            fixed = _run_fix(message, "x", x)
    assert_close(fixed, raw(_values(ctx)))


def _group(ctx: Ctx) -> Any:
    return ctx.mesh("1d").get_group(AXIS)


def check_all_reduce_avg(ctx: Ctx, name: str) -> None:
    def raw(x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, op=dist.ReduceOp.AVG, group=_group(ctx))
        return x
    _check_mode_fix(ctx, Tensor[P["x"]], raw)


def check_all_reduce_avg_async(ctx: Ctx, name: str) -> None:
    def raw(x: torch.Tensor) -> torch.Tensor:
        work = dist.all_reduce(x, dist.ReduceOp.AVG, _group(ctx), True)
        work.wait()
        return x
    _check_mode_fix(ctx, Tensor[P["x"]], raw, says="spmd.all_reduce is synchronous")


def check_all_reduce_max_of_varying(ctx: Ctx, name: str) -> None:
    def raw(x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, op=dist.ReduceOp.MAX, group=_group(ctx))
        return x
    _check_mode_fix(ctx, Tensor[V["x"]], raw)


def check_reduce_scatter_tensor_avg(ctx: Ctx, name: str) -> None:
    def raw(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(4, dtype=F64)
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.AVG, group=_group(ctx))
        return out
    _check_mode_fix(ctx, Tensor[P["x"]], raw)


def _engine_fix(ctx: Ctx, fn: str, declared: Any, raw: Callable[[torch.Tensor], torch.Tensor],
                reduce_op: str) -> None:
    """A functional collective: the engine's message (the plugin's) for ``fn`` with reduceOp=
    ``reduce_op``, its fix run on a typed x, against raw(x) untyped."""
    message = raw_collective_error("torch.distributed._functional_collectives", fn, "x",
                                   SpmdType.of({AXIS: declared}), reduce_op=reduce_op).message
    assert "is synchronous" in message, message
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            fixed = _run_fix(message, "x", spmd.declare(_values(ctx), Tensor[P["x"]]))
    assert_close(fixed, raw(_values(ctx)))


def check_funcol_all_reduce_avg(ctx: Ctx, name: str) -> None:
    from spmd_mypy.engine.types import PARTIAL
    _engine_fix(ctx, "all_reduce", PARTIAL,
                lambda x: funcol.all_reduce(x, "avg", _group(ctx)) * 1, "avg")


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    out = []
    for check in (check_all_reduce_avg, check_all_reduce_avg_async,
                  check_all_reduce_max_of_varying, check_reduce_scatter_tensor_avg,
                  check_funcol_all_reduce_avg):
        n = f"w{world}/raw-fix/{check.__name__[len('check_'):]}"
        out.append((n, functools.partial(check, name=n)))
    return out
