"""The spmd-raw-collective fix, executed, computes what the raw call computed, on a gloo world
(checks run by test_raw_fix_world.py).

Each check calls a raw collective on a typed tensor under ``spmd.typecheck()``, takes the
typed call the error suggests, runs it (the text eval'd with the tensor's name bound), and
compares it with the raw call on the same values outside the check mode.  The functional
collectives (torch.distributed._functional_collectives, *_autograd variants included) reach
the check mode as their ops and are reported too, with the engine's message (the text the
plugin prints); they once passed unchecked and returned untyped results.  The fix once dropped
the reduce op (op=ReduceOp.AVG suggested a plain spmd.all_reduce: a sum, n times the average).
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
from rt_checks import Ctx, named_checks
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


def _check_mode_error(ctx: Ctx, declared: Any, raw: Callable[[torch.Tensor], Any]) -> str:
    """The spmd-raw-collective message ``raw(x)`` raises on a typed x (the mode's text)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(_values(ctx), declared)
            try:
                raw(x)
            except SpmdTypeError as e:
                assert e.code == "spmd-raw-collective", e
                return e.error.message
            raise AssertionError("the raw collective on a typed tensor was not reported")


def _check_mode_fix(ctx: Ctx, declared: Any, raw: Callable[[torch.Tensor], torch.Tensor],
                    *, says: str = "") -> str:
    """``raw(x)`` on a typed x raises spmd-raw-collective; its fix run on x equals raw(x) on
    the same values, untyped.  Returns the message."""
    message = _check_mode_error(ctx, declared, raw)
    assert says in message, message
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            fixed = _run_fix(message, "x", spmd.declare(_values(ctx), declared))
    assert_close(fixed, raw(_values(ctx)))
    return message


def check_all_reduce_statement_fix_assigns(ctx: Ctx, name: str) -> None:
    """``dist.all_reduce(x)`` as a statement: the static fix (the plugin's message) assigns
    the typed call's result, ``x = spmd.all_reduce(x, ...)``; run as that statement, x holds
    the raw call's sum.  The bare call pasted over the statement (session 40's probe) left x
    each rank's summand: run so, x is unchanged (spmd-discarded-result reports it)."""
    from spmd_mypy.engine.types import PARTIAL
    message = raw_collective_error("torch.distributed", "all_reduce", "x",
                                   SpmdType.of({AXIS: PARTIAL}), assign_to="x").message
    m = re.search(r"; use (x = spmd\.\w+\((?:[^()]|\([^()]*\))*\))", message)
    assert m is not None, message
    expected = _values(ctx)
    dist.all_reduce(expected, group=_group(ctx))
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            ns = {"spmd": spmd, "P": P, "R": R, "V": V, "S": S,
                  "x": spmd.declare(_values(ctx), Tensor[P["x"]])}
            exec(m.group(1), ns)
            bare = {**ns, "x": spmd.declare(_values(ctx), Tensor[P["x"]])}
            exec(m.group(1).split(" = ", 1)[1], bare)
    assert_close(ns["x"], expected)
    assert_close(bare["x"], _values(ctx))  # the dropped result: x as it was
    assert not torch.equal(bare["x"], expected)


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


def _funcol_checked(ctx: Ctx, fn: str, declared: Any, raw: Callable[[torch.Tensor], Any],
                    *, runs: bool = True, says: str = "is synchronous") -> None:
    """The functional collective ``fn`` on a typed x raises in the check mode with the engine's
    message for it (the one the plugin prints: one rule); its fix, when concrete (``runs``),
    computes what the raw call computes."""
    message = (_check_mode_fix(ctx, declared, raw, says=says) if runs
               else _check_mode_error(ctx, declared, raw))
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            st = spmd.typeof(spmd.declare(_values(ctx), declared))
    assert st is not None
    reduce_op = "avg" if "avg" in fn else "sum"
    fn = fn.split(":")[0]
    assert message == raw_collective_error("torch.distributed._functional_collectives", fn, "x",
                                           st, reduce_op=reduce_op).message, message


def check_funcol_all_reduce_avg_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_reduce:avg", Tensor[P["x"]],
                    lambda x: funcol.all_reduce(x, "avg", _group(ctx)) * 1)


def check_funcol_all_gather_tensor_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_gather_tensor", Tensor[S[0, "x"]],
                    lambda x: funcol.all_gather_tensor(x, 0, _group(ctx)) * 1)


def check_funcol_all_gather_tensor_autograd_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_gather_tensor_autograd", Tensor[S[0, "x"]],
                    lambda x: funcol.all_gather_tensor_autograd(x, 0, _group(ctx)) * 1)


def check_funcol_reduce_scatter_tensor_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "reduce_scatter_tensor", Tensor[P["x"]],
                    lambda x: funcol.reduce_scatter_tensor(x, "sum", 0, _group(ctx)) * 1,
                    runs=False)


def check_funcol_reduce_scatter_tensor_autograd_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "reduce_scatter_tensor_autograd", Tensor[P["x"]],
                    lambda x: funcol.reduce_scatter_tensor_autograd(x, "sum", 0, _group(ctx)) * 1,
                    runs=False)


def check_funcol_all_to_all_single_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_to_all_single", Tensor[V["x"]],
                    lambda x: funcol.all_to_all_single(x, None, None, _group(ctx)) * 1,
                    runs=False)


def check_funcol_all_to_all_single_autograd_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_to_all_single_autograd", Tensor[V["x"]],
                    lambda x: funcol.all_to_all_single_autograd(x, None, None, _group(ctx)) * 1,
                    runs=False)


def check_funcol_all_reduce_inplace_checked(ctx: Ctx, name: str) -> None:
    _funcol_checked(ctx, "all_reduce_inplace", Tensor[P["x"]],
                    lambda x: funcol.all_reduce_inplace(x, "sum", _group(ctx)),
                    says="which returns the result")


def check_nn_functional_all_reduce_checked(ctx: Ctx, name: str) -> None:
    """torch.distributed.nn.functional's collectives are reported under that name."""
    import torch.distributed.nn.functional as nnf
    message = _check_mode_fix(ctx, Tensor[P["x"]], lambda x: nnf.all_reduce(x, group=_group(ctx)))
    assert message.startswith("torch.distributed.nn.functional.all_reduce "), message


def check_raw_collective_through_a_torch_helper_checked(ctx: Ctx, name: str) -> None:
    """The user's collective called through a torch helper (pytree's tree_map_ over a dict of
    gradients) is the user's raw call, not torch's own: it raises (a regression probe: the
    in-place sum kept the stale P type and the next all_reduce summed twice)."""
    from torch.utils._pytree import tree_map_
    for raw in (functools.partial(dist.all_reduce, group=_group(ctx)),
                lambda x: funcol.all_reduce(x, "sum", _group(ctx))):
        with spmd.set_mesh(ctx.mesh("1d")):
            with spmd.typecheck():
                grads = {"w": spmd.declare(_values(ctx), Tensor[P["x"]])}
                try:
                    tree_map_(raw, grads)
                except SpmdTypeError as e:
                    assert e.code == "spmd-raw-collective", e
                else:
                    raise AssertionError("a raw collective through tree_map_ passed the check mode")


def check_all_reduce_group_of_no_axis(ctx: Ctx, name: str) -> None:
    """A raw collective over a group that is no mesh axis's (a pipeline's tied-embedding group:
    the first and last stages, ranks 0 and 3 of pp=4) has no typed call over an axis: the
    message says so and points to the README, not spmd.all_reduce over the axis (which would
    take every rank of the axis: the pasted fix hung where the others never call it)."""
    group = dist.new_group([0])  # every rank calls new_group; rank 0 is its only member
    if ctx.rank != 0:
        return
    message = _check_mode_error(ctx, Tensor[P["x"]],
                                lambda x: dist.all_reduce(x, group=group))
    assert "the group passed (ranks [0]) is the group of no mesh axis" in message, message
    assert 'README "Pipeline parallelism"' in message, message
    assert "; use spmd." not in message, message


class _FuncolSum(torch.autograd.Function):
    """The user's own functional collective in an annotated Function: the Function's types
    type it (no spmd-raw-collective inside forward or backward)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor[P["x"]], group: Any) -> Tensor[R["x"]]:
        return funcol.all_reduce(x, "sum", group) * 1

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["x"]]) -> tuple[Tensor[R["x"]], None]:
        return g, None


def check_funcol_in_function_allowed(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")):
        with spmd.typecheck():
            x = spmd.declare(_values(ctx), Tensor[P["x"]])
            y = _FuncolSum.apply(x, _group(ctx))
            assert spmd.typeof(y) == spmd.typeof(spmd.declare(_values(ctx), Tensor[R["x"]]))
            # the typed collectives (which call the functional ones) are not reported
            z = spmd.all_reduce(x, AXIS, src=P, dst=R)
    assert_close(y, z)


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    return named_checks(world, "raw-fix", (
        check_all_reduce_avg, check_all_reduce_avg_async, check_all_reduce_max_of_varying,
        check_reduce_scatter_tensor_avg, check_funcol_all_reduce_avg,
        check_funcol_all_reduce_avg_checked, check_funcol_all_gather_tensor_checked,
        check_funcol_all_gather_tensor_autograd_checked,
        check_funcol_reduce_scatter_tensor_checked,
        check_funcol_reduce_scatter_tensor_autograd_checked,
        check_funcol_all_to_all_single_checked,
        check_funcol_all_to_all_single_autograd_checked,
        check_funcol_all_reduce_inplace_checked, check_nn_functional_all_reduce_checked,
        check_funcol_in_function_allowed, check_raw_collective_through_a_torch_helper_checked,
        check_all_reduce_group_of_no_axis, check_all_reduce_statement_fix_assigns))
