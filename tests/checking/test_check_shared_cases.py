"""The shared case table (tests/cases/shared_cases.py) through the runtime check mode.

Each case builds its inputs, declares their types, and runs its lines under
``spmd.typecheck()``; an accepted case must leave ``out`` with the expected
type, a rejected one must raise SpmdTypeError with the expected code on its
last line.  Collective cases run on the ``fake`` process group (one process, a
2 x 2 ("dp", "tp") mesh): enough to trace types, not to check values.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

import spmd
from spmd import I, P, PS, R, S, Tensor, V
from spmd._types import spmd_type_of_annotation
from spmd_mypy.engine.errors import SpmdTypeError

_PATH = pathlib.Path(__file__).resolve().parents[1] / "cases" / "shared_cases.py"
_spec = importlib.util.spec_from_file_location("spmd_shared_cases", _PATH)
shared = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["spmd_shared_cases"] = shared
_spec.loader.exec_module(shared)  # type: ignore[union-attr]

NS = {"torch": torch, "F": F, "spmd": spmd, "Tensor": Tensor, "R": R, "I": I, "V": V, "P": P,
      "S": S, "PS": PS}


def test_table_size() -> None:
    assert len(shared.CASES) >= 60
    ids = [c.id for c in shared.CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"


@pytest.fixture(scope="module")
def mesh():
    """A fake 2 x 2 ("dp", "tp") world in this process, for the collective cases."""
    import torch.distributed as dist

    if not hasattr(spmd, "all_reduce"):
        pytest.skip("the collectives are not there yet")
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"no fake process group: {e}")
    created = False
    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=4, store=FakeStore())
        created = True
    elif dist.get_world_size() != 4:
        pytest.skip("another process group of a different size is initialized")
    m = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    scope = spmd.set_mesh(m)
    try:
        yield m
    finally:
        scope.__exit__(None, None, None)
        if created:
            dist.destroy_process_group()


def _error_line(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def run_case(c) -> tuple[dict, BaseException | None, str]:  # noqa: ANN001
    ns = dict(NS)
    for name, _ in c.inputs:
        ns[name] = eval(c.make.get(name, shared.DEFAULT_MAKE), ns)  # noqa: S307
    filename = f"<case {c.id}>"
    code = compile("\n".join(c.lines) + "\n", filename, "exec")
    err: BaseException | None = None
    with spmd.typecheck(strict=c.strict):
        for name, ann in c.inputs:
            t = spmd_type_of_annotation(eval(ann, ns))  # noqa: S307
            if t is not None:
                spmd.declare(ns[name], t)
        try:
            exec(code, ns)  # noqa: S102
        except Exception as e:  # noqa: BLE001
            err = e
    return ns, err, filename


def _params():
    out = []
    for c in shared.CASES:
        marks = []
        if c.xfail or c.static_only:
            marks.append(pytest.mark.xfail(reason=c.xfail or c.static_only, strict=True))
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.parametrize("c", _params())
def test_case(c, request) -> None:  # noqa: ANN001
    if c.collective:
        request.getfixturevalue("mesh")
    ns, err, filename = run_case(c)
    if c.error is not None:
        assert isinstance(err, SpmdTypeError), f"expected {c.error}, got {err!r}"
        assert err.code == c.error, str(err)
        assert _error_line(err, filename) == len(c.lines), "the error must be on the last line"
        assert f"[{c.error}]" in str(err)
    else:
        if err is not None:
            raise err
        want = spmd_type_of_annotation(eval(c.expect, ns))  # noqa: S307
        got = spmd.typeof(ns["out"])
        assert (got or None) == (want or None), (
            f"out is {got} but the case expects {c.expect}")


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in shared.CASES if c.collective
                               and not c.id.startswith("untyped-")  # the user's own untyped
                               and not c.static_only])
def test_collective_case_strict(c, mesh) -> None:  # noqa: ANN001
    """The same verdicts in strict mode: the collectives' internal buffers (untyped) never
    count as the user's untyped operands."""
    import dataclasses

    ns, err, _ = run_case(dataclasses.replace(c, strict=True))
    if c.error is not None:
        assert isinstance(err, SpmdTypeError) and err.code == c.error, repr(err)
    else:
        assert err is None, repr(err)
        want = spmd_type_of_annotation(eval(c.expect, ns))  # noqa: S307
        assert (spmd.typeof(ns["out"]) or None) == (want or None)


def test_a_repeated_axis_is_named_as_the_static_checker_names_it(mesh) -> None:  # noqa: ANN001
    """The runtime's mesh lookup says which axis repeats, in the plugin's words."""
    with pytest.raises(ValueError) as e:
        spmd.all_reduce(torch.ones(2), ("dp", "dp"), src=P, dst=R)
    assert str(e.value) == 'the axes ("dp", "dp") name "dp" twice; name each axis once'


def test_a_src_mismatch_is_raised_before_the_op_runs(mesh) -> None:  # noqa: ANN001
    """A src the input is not: the op would run on a layout the input does not have (a dim
    out of range, sizes that do not fit); the check mode raises the type error, as the
    static checker reports it, never the op's own error."""
    with spmd.typecheck():
        x = spmd.declare(torch.randn(4), Tensor[S[0, "dp", "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            spmd.all_gather(x, ("dp", "tp"), src=S(1), dst=R)
        assert e.value.code == "spmd-src-mismatch"
        assert str(e.value) == (
            'all_gather(x, ("dp", "tp"), src=S(1), ...) but x is S(0) on "dp" and "tp" (x: '
            'Tensor[S[0, "dp", "tp"]]); pass src=S(0)  [spmd-src-mismatch]')
        p = spmd.declare(torch.randn(3), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:  # an uneven all_to_all: before its sizes' check
            spmd.all_to_all(p, "tp", src=V, dst=V, sizes=[1, 1])
        assert e.value.code == "spmd-src-mismatch"
        assert str(e.value).startswith('all_to_all(p, "tp", src=V, ...) but p is P on "tp"')



def test_an_all_reduce_to_r_met_by_an_invariant_offers_dst_i(mesh) -> None:  # noqa: ANN001
    """probe-paste F4/F5, in the static checker's words (messages.test:
    fix_dst_i_on_an_all_reduce_that_meets_an_invariant, fix_bias_inside_the_all_reduce_is_added_after_it):
    an all_reduce(..., dst=R) met by an I bias offers dst=I on that all_reduce first (pasted,
    it runs); a P + I (the check mode does not see the all_reduce the sum is the argument of)
    offers to add the bias after the reduction, as the R version does."""
    with spmd.typecheck():
        partial = spmd.declare(torch.randn(3, 4, requires_grad=True), Tensor[P["tp"]])
        b2 = spmd.declare(torch.randn(4, requires_grad=True), Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            spmd.all_reduce(partial, "tp", src=P, dst=R) + b2
        # (b2, a tensor without a grad_fn, is a leaf here: the check mode adds its detach)
        assert str(e.value).startswith(
            'Invariant on "tp" (b2: Tensor[I["tp"]]) cannot mix with Replicate '
            '(spmd.all_reduce(partial, "tp", src=P, dst=R): Tensor[R["tp"]]) in add: its gradient '
            "would need an all-reduce that add never issues; pass dst=I to the all_reduce: "
            'spmd.all_reduce(partial, "tp", src=P, dst=I) (its sum is then I, as b2 is: no '
            'conversion, no all-reduce added to the backward); or reinterpret(b2, "tp", src=I, '
            'dst=R) first, so the backward all-reduces its gradient'), str(e.value)
        out = spmd.all_reduce(partial, "tp", src=P, dst=I) + b2  # the fix, pasted
        assert spmd.typeof(out) == spmd.typeof(b2)
        with pytest.raises(SpmdTypeError) as e:
            partial + b2
        assert ('all_reduce(partial, "tp", src=P, dst=I) first, or add it after the reduction, '
                'or convert(b2, "tp", src=I, dst=P) to add it into the pending sum') in str(e.value)


def _pasted_fix(msg: str, text: str, scope: dict) -> object:  # noqa: ANN001
    """The ``spmd.redistribute(text, ...)`` call a message offers, run as pasted."""
    import re

    fix = re.search(rf"spmd\.redistribute\({text}, [^()]*(\([^()]*\)[^()]*)*\)", msg)
    assert fix is not None, msg
    return fix.group(0), eval(fix.group(0), {"spmd": spmd, "Tensor": Tensor, "PS": PS, "P": P,
                                             "I": I, "R": R, **scope})


def test_a_layout_fix_names_an_invariant_operand_on_the_axis_it_shards(mesh) -> None:  # noqa: ANN001
    """The layout fix that shards an operand on an axis where it is I (or P): a bare
    ``src=PS[...]`` would take that axis as R (spmd-src-mismatch when pasted), so the fix
    writes the operand's whole type, as the static checker does (tests/static/
    test_pasted_fixes.py); pasted, it runs and gives the layout the op wanted."""
    with spmd.typecheck(), torch.no_grad():  # no_grad: I beside V is no invariant-mix
        a = spmd.declare(torch.randn(2, 6), Tensor[PS["tp", None]])
        w = spmd.declare(torch.randn(4, 6), Tensor[PS[None, None], I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.cat([a, w], 1)
        assert e.value.code == "spmd-global"
        text, moved = _pasted_fix(str(e.value), "w", {"w": w})
        assert 'src=Tensor[PS[None, None], I["tp"]]' in text
        assert spmd.typeof(moved) == spmd.typeof(a)
        torch.cat([a, moved], 1)


def test_a_local_typed_source_is_read_at_the_rank_src_states(mesh) -> None:  # noqa: ANN001
    """A global redistribute of a local-typed value (no spec): its shard dims are read at
    the rank ``src``'s PS states, as the static checker reads them (tests/plugin/cases/
    global_redistribute.test): ``S(-1)`` of a 2-d tensor is claimed ``PS[None, "tp"]``.  A
    wrong claim offers a global src, which pasted runs; a src whose rank is not the
    tensor's is refused with or without the check mode (the steps would move other dims)."""
    with spmd.typecheck():
        x = spmd.declare(torch.randn(4, 6), Tensor[S[-1, "tp"], R["dp"]])
        y = spmd.redistribute(x, src=PS[None, "tp"], dst=PS[None, None])
        assert spmd.typeof(y) == spmd_type_of_annotation(Tensor[PS[None, None], R["dp", "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            spmd.redistribute(x, src=PS["tp", None], dst=PS[None, None])
        assert e.value.code == "spmd-src-mismatch"
        assert '(S(1) at the rank 2 src states), not S(0)' in str(e.value), str(e.value)
        assert "; pass src=PS[None, \"tp\"]  [spmd-src-mismatch]" in str(e.value), str(e.value)
        z = spmd.declare(torch.randn(4, 6), Tensor[S[-2, "tp"], P["dp"]])
        with pytest.raises(SpmdTypeError) as e:
            spmd.redistribute(z, src=PS["tp", None], dst=PS["dp", None])
        assert 'src does not name "dp"' in str(e.value), str(e.value)
        text, moved = _pasted_fix(str(e.value).replace("pass src=", "spmd.redistribute(z, src=")
                                  .replace("  [spmd-src-mismatch]", ", dst=PS[\"dp\", None])"),
                                  "z", {"z": z})
        assert 'src=Tensor[PS["tp", None], P["dp"]]' in text
        assert spmd.typeof(moved) == spmd_type_of_annotation(Tensor[PS["dp", None], R["tp"]])

    @spmd.local_map(in_types=(Tensor[PS[None, "tp"], R["dp"]],), out_types=Tensor[PS[None, "tp"], R["dp"]],
                    axes=("tp",))
    def body(v):  # noqa: ANN001, ANN202
        return v * 2

    with spmd.typecheck():  # a local_map boundary reads the local S(-1) at the spec's rank too
        x = spmd.declare(torch.randn(4, 6), Tensor[S[-1, "tp"], R["dp"]])
        assert spmd.typeof(body(x)) == spmd_type_of_annotation(Tensor[PS[None, "tp"], R["dp"]])
        with pytest.raises(SpmdTypeError) as e:
            body(spmd.declare(torch.randn(4, 6), Tensor[S[0, "tp"], R["dp"]]))
        assert e.value.code == "spmd-mismatch"
    for check in (spmd.typecheck, contextlib.nullcontext):
        with check():
            w = spmd.declare(torch.randn(4, 6, 2), Tensor[S[-1, "tp"], R["dp"]])
            with pytest.raises(SpmdTypeError) as e:
                spmd.redistribute(w, src=PS[None, "tp"], dst=PS[None, None])
            assert e.value.code == "spmd-global"
            assert "src states rank 2 but x has 3 dims" in str(e.value), str(e.value)


def test_a_local_map_entry_fix_names_a_partial_argument(mesh) -> None:  # noqa: ANN001
    """The same for a ``local_map`` argument whose layout is not its ``in_types``: the P on
    "tp" is written in src (a reduce-scatter), so the pasted call is accepted."""

    @spmd.local_map(in_types=(Tensor[PS["tp", None]],), out_types=Tensor[PS["tp", None]])
    def body(x):  # noqa: ANN001, ANN202
        return x * 2

    with spmd.typecheck():
        w = spmd.declare(torch.randn(4, 6), Tensor[PS[None, None], P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            body(w)
        text, moved = _pasted_fix(str(e.value), "w", {"w": w})
        assert 'src=Tensor[PS[None, None], P["tp"]]' in text
        assert spmd.typeof(moved) == spmd_type_of_annotation(Tensor[PS["tp", None]])
        body(moved)


def test_a_raw_sum_all_reduce_in_a_function_resolves_a_pending_sum(mesh) -> None:  # noqa: ANN001
    """Megatron's vocab-parallel cross entropy sums over its vocab shard, then all-reduces
    the sum in place with a raw ``dist.all_reduce`` in its Function's forward: the sum over
    the ranks, the pending sum's resolution (the static checker's declared_partials
    ``_raw_reduced``; the check mode raised at ``se.log()`` until session 39).  A MAX
    all-reduce is no sum of the parts, and a read before the all-reduce reads this rank's
    part: both still raise, at the read (tests/plugin/cases/reduced_sums.test: statically
    at the sum)."""
    import torch.distributed as dist

    def fn(op: object, read_first: bool) -> type:
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x: Tensor[S[-1, "tp"]]) -> Tensor[I["tp"]]:  # noqa: ANN001
                se = x.exp().sum(-1)
                early = se.log() if read_first else None
                if op is None:
                    dist.all_reduce(se)
                else:
                    dist.all_reduce(se, op=op)
                return se.log() if early is None else early

            @staticmethod
            def backward(ctx, g: Tensor[I["tp"]]) -> None:  # noqa: ANN001
                return None
        return Fn

    with spmd.typecheck():
        x = spmd.declare(torch.randn(3, 4), Tensor[S[-1, "tp"]])
        for op in (None, dist.ReduceOp.SUM):
            assert spmd.typeof(fn(op, False).apply(x)) == spmd.typeof(
                spmd.declare(torch.zeros(3), Tensor[I["tp"]]))
        for op, read_first in ((dist.ReduceOp.MAX, False), (None, True)):
            with pytest.raises(SpmdTypeError) as e:
                fn(op, read_first).apply(x)
            assert e.value.code == "spmd-global"
            # the operand as written (not the dim: "of -1" until session 39), its dim at its rank
            assert str(e.value).startswith('sum over dim -1 of x.exp() (S(1) on "tp") reduces')
