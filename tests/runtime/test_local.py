"""Single-process runtime tests: argument errors, the einsum family, the check-mode hook.

Nothing here starts a process group (the gloo worlds are in test_collectives_world.py).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import spmd
from spmd import I, P, R, S, V
from spmd import _checking


@pytest.fixture(autouse=True)
def no_mesh():
    previous = spmd.get_mesh()
    spmd.set_mesh(None)
    yield
    spmd.set_mesh(previous)


X = torch.randn(3, 4, dtype=torch.float64)


def test_no_mesh_names_nothing():
    with pytest.raises(RuntimeError, match=r"no mesh is set.*spmd\.set_mesh"):
        spmd.all_reduce(X, "tp", src=P, dst=R)
    with pytest.raises(RuntimeError, match="ProcessGroup"):
        spmd.all_gather(X, ("dp", "tp"), src=S(0), dst=R)


@pytest.mark.parametrize("call, needle", [
    (lambda: spmd.all_reduce(X, "tp", src=V, dst=R), 'all_gather(x, "tp", src=V, dst=R)'),
    (lambda: spmd.all_reduce(X, "tp", src=P, dst=V), "reduce_scatter"),
    (lambda: spmd.all_gather(X, "tp", src=P, dst=R), "all_reduce"),
    (lambda: spmd.reduce_scatter(X, "tp", dst=R), "all_reduce"),
    (lambda: spmd.convert(X, "tp", src=P, dst=R), "all_reduce"),
    (lambda: spmd.reinterpret(X, "tp", src=R, dst=P), "expert_mode=True"),
    (lambda: spmd.reinterpret(X, "tp", src=I, dst=P), "expert_mode=True"),
    (lambda: spmd.reinterpret(X, "tp", src=R, dst=S(0)), "shard dim"),
    (lambda: spmd.all_to_all(X, "tp", src=R, dst=V), "not a valid transition"),
    (lambda: spmd.all_gather(X, "tp", src=V), "needs dst="),
    (lambda: spmd.all_to_all(X, "tp", dst=V), "needs src="),
    (lambda: spmd.all_reduce(X, "tp", src=P, dst=R, op="prod"), "not one of"),
    (lambda: spmd.all_reduce(X, "tp", src=R, dst=R, op="max"), "takes src=V"),
])
def test_invalid_pairs_are_type_errors_from_the_engine(call, needle):
    with pytest.raises(TypeError) as info:
        call()
    assert needle in str(info.value)
    assert "[spmd-" in str(info.value)  # the engine's error code


def test_errors_survive_pickling():
    """A check-mode or collective error raised in a spawned worker reaches the parent whole
    (torch.multiprocessing and process pools pickle it): same class, code and message."""
    import pickle

    from spmd_mypy.engine.errors import SpmdTypeError

    with pytest.raises(TypeError) as info:
        spmd.all_reduce(X, "tp", src=V, dst=R)
    x = torch.zeros(2, requires_grad=True)
    with pytest.raises(SpmdTypeError) as checked, spmd.typecheck():
        torch.relu(spmd.declare(x, spmd.Tensor[P["tp"]]))
    for raised in (info.value, checked.value):
        back = pickle.loads(pickle.dumps(raised))
        assert type(back) is type(raised)
        assert (back.code, back.error, str(back)) == (raised.code, raised.error, str(raised))


def test_import_spmd_leaves_dynamo_unloaded():
    """`import spmd` on a rank does not pay for torch._dynamo (~0.8 s: half of the import):
    the one torch.compile decorator it used is applied without importing Dynamo."""
    import os
    import subprocess
    import sys

    code = "import sys, spmd; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                         timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_constant_result_mark_is_the_compiler_decorator_s():
    """_assume_constant_result marks a function exactly as torch.compiler's decorator does
    (the attributes Dynamo reads), and the traced plan's name function carries the mark."""
    from spmd import _collectives

    def ours() -> None: ...

    def torchs() -> None: ...

    _collectives._assume_constant_result(ours)
    torch.compiler.assume_constant_result(torchs)
    assert vars(ours) == vars(torchs) and vars(ours)
    assert vars(_collectives._traced_plan_name) == vars(torchs)


def test_src_dst_must_be_types():
    with pytest.raises(TypeError, match="src= takes one of R, I, V, P, S"):
        spmd.all_gather(X, "tp", src="V", dst=R)


def test_set_mesh_refuses_what_is_not_a_named_device_mesh():
    with pytest.raises(TypeError, match="DeviceMesh"):
        spmd.set_mesh(object())
    assert spmd.get_mesh() is None


# -- the einsum family without a mesh: local ops, identity backward of the reinterpret ----

def _grads(fn, *tensors):
    leaves = [t.clone().requires_grad_(True) if t is not None else None for t in tensors]
    y = fn(*leaves)
    g = torch.randn_like(y)
    y.backward(g)
    return y.detach(), [t.grad for t in leaves if t is not None]


@pytest.mark.parametrize("axes", [None, "tp", ("dp", "tp")])
def test_einsum_family_is_the_local_op(axes):
    a = torch.randn(2, 3, 4, dtype=torch.float64)
    b = torch.randn(4, 5, dtype=torch.float64)
    w = torch.randn(5, 4, dtype=torch.float64)
    bias = torch.randn(5, dtype=torch.float64)
    pairs = [
        (lambda x, y: spmd.einsum("bsh,hd->bsd", x, y, out_partial_axes=axes),
         lambda x, y: torch.einsum("bsh,hd->bsd", x, y), (a, b)),
        (lambda x, y: spmd.matmul(x, y, out_partial_axes=axes), torch.matmul, (a, b)),
        (lambda x, y, z: spmd.linear(x, y, z, out_partial_axes=axes), F.linear, (a, w, bias)),
        (lambda x, y: spmd.linear(x, y, out_partial_axes=axes), F.linear, (a, w)),
        (lambda x: spmd.sum(x, -1, out_partial_axes=axes), lambda x: x.sum(-1), (a,)),
        (lambda x: spmd.sum(x, (0, 2), keepdim=True, out_partial_axes=axes),
         lambda x: x.sum((0, 2), keepdim=True), (a,)),
        (lambda x: spmd.sum(x, out_partial_axes=axes), torch.sum, (a,)),
    ]
    for ours, theirs, args in pairs:
        torch.manual_seed(0)
        y1, g1 = _grads(ours, *args)
        torch.manual_seed(0)
        y2, g2 = _grads(theirs, *args)
        assert_close(y1, y2)
        for u, v in zip(g1, g2):
            assert_close(u, v)


def test_einsum_result_can_be_modified_in_place():
    a = torch.randn(3, 4, requires_grad=True)
    y = spmd.matmul(a, a.t(), out_partial_axes="tp")
    y += 1  # no view: the reinterpret adds nothing to the autograd graph
    y.sum().backward()


def test_einsum_takes_operands_as_a_list_too():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    assert_close(spmd.einsum("ij,jk->ik", [a, b], out_partial_axes="tp"), a @ b)


def test_out_partial_axes_must_be_names():
    with pytest.raises(TypeError, match="out_partial_axes"):
        spmd.matmul(X, X.t(), out_partial_axes=(1, 2))


def test_check_mode_hook_sees_the_partial_reinterpret(monkeypatch):
    seen = []

    def on_collective(op, x, axes, src, dst, out, *, expert_mode, reduce_op):
        seen.append((op, axes, str(src), str(dst), expert_mode, reduce_op))
        return out * 1  # a replacement result is returned to the caller

    monkeypatch.setattr(_checking, "ACTIVE", True)
    monkeypatch.setattr(_checking, "on_collective", on_collective)
    y = spmd.linear(X, torch.ones(2, 4, dtype=torch.float64), out_partial_axes=("dp", "tp"))
    assert seen == [("reinterpret", ("dp", "tp"), "V", "P", False, "sum")]
    assert_close(y, F.linear(X, torch.ones(2, 4, dtype=torch.float64)))


def test_markers_and_shards_are_one_instance_each():
    """R/I/V/P and S(i) hash by identity (the plan cache's key): equal must be identical,
    through copies and pickles too, and S keeps rejecting what is not an int."""
    import copy
    import pickle

    for m in (R, I, V, P):
        assert copy.copy(m) is m and copy.deepcopy(m) is m and pickle.loads(pickle.dumps(m)) is m
    assert R != P and R == R and len({R, I, V, P, R}) == 4
    for d in (0, 1, -1, 7):
        s = S(d)
        assert S(d) is s and s.dim == d and repr(s) == f"S({d})"
        assert copy.copy(s) is s and copy.deepcopy(s) is s and pickle.loads(pickle.dumps(s)) is s
    assert S(True) is S(1) and S(0) != S(1) and hash(S(2)) == hash(S(2))
    assert {S(0): "a"}[S(0)] == "a"
    for bad in (1.0, 0.0, "0", [0], None):
        with pytest.raises(TypeError, match="int dim"):
            S(bad)  # type: ignore[arg-type]


def test_forward_in_place_calibration(monkeypatch):
    """The forward all-reduce's calibration finds one signature for an input nobody else
    holds on this torch, and refuses (never in place) under a call mechanism other than
    the import's (a PEP 523 evaluator holds more references per frame)."""
    from spmd import _collectives

    cpu = torch.device("cpu")
    sigs = _collectives._calibrate_inputs(cpu)
    assert len(sigs) == 1 and None not in sigs
    monkeypatch.setattr(_collectives, "_TEMPORARY_REFS", _collectives._TEMPORARY_REFS + 1)
    assert _collectives._calibrate_inputs(cpu) == frozenset()


def test_shard_value_subscripted_says_the_entry():
    """``S(0)["dp_shard"]`` (the src=/dst= value subscripted) was a bare "'S' object is not
    subscriptable": the message says the entry to write, as the static checker does."""
    from spmd import Tensor

    with pytest.raises(TypeError, match=re.escape(
            'S(0)["dp_shard"] is not an entry: write S[0, "dp_shard"]')):
        Tensor[R["tp"], S(0)["dp_shard"]]
