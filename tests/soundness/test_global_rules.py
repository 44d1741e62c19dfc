"""CI slice of the einsum rule in global mode (soundness/global_rules.py; the full run is
``python -m soundness``): one 4-rank gloo world, every accepted combination of four einsum
equations on one axis of 4 ranks and on a 2x2 mesh (with and without out_partial_axes) and
a sample of the rejected ones."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

from spmd_mypy.engine.types import PARTIAL, REPLICATE, SpmdType, shard  # noqa: E402

from soundness import global_rules as g  # noqa: E402
from soundness.denote import Mismatch  # noqa: E402

pytestmark = pytest.mark.timeout(300)

COL = SpmdType.of({"a": shard(1)}, ((), ("a",)))  # PS[None, "a"]
ROW = SpmdType.of({"a": shard(0)}, (("a",), ()))  # PS["a", None]


def test_verdicts_come_from_the_global_engine() -> None:
    ok, out, _ = g.verdict("matmul", [COL, ROW], ("a",))
    assert ok and out.get("a") == PARTIAL and out.spec == ((), ())
    ok, _, errors = g.verdict("matmul", [COL, ROW], ())
    assert not ok and "never makes Partial implicitly" in errors[0]


def test_assembly_reads_the_types() -> None:
    mesh = g._meshes()["a2"]
    x = g.global_value("t", 2)
    for t in (COL, ROW, SpmdType.of({"a": PARTIAL}, ((), ())),
              SpmdType.of({"a": REPLICATE}, ((), ()))):
        locs = {c: g.make_local(x, t, mesh, c, "s") for c in mesh.coords()}
        assert torch.allclose(g.assemble(locs, t, mesh, "x"), x)
    parts = {c: g.make_local(x, SpmdType.of({"a": PARTIAL}, ((), ())), mesh, c, "s")
             for c in mesh.coords()}
    with pytest.raises(Mismatch, match="not the same on every rank"):
        g.assemble(parts, SpmdType.of({"a": REPLICATE}, ((), ())), mesh, "x")


def test_a_wrong_claim_fails() -> None:
    """The contraction over a sharded label computed locally is a partial sum: claimed R
    (every rank holding the full value) it must fail the forward."""
    mesh = g._meshes()["a2"]
    task = g.GTask("a2", "matmul", (COL, ROW), ("a",), True,
                   SpmdType.of({"a": REPLICATE}, ((), ())))
    outs = {c: g.run_forward(task, 0, c)[1].detach() for c in mesh.coords()}
    assert g.check_forward(task, 0, task.out_type, outs) is not None
    right = SpmdType.of({"a": PARTIAL}, ((), ()))
    assert g.check_forward(task, 0, right, outs) is None


def test_global_einsum_slice_on_real_ranks() -> None:
    res = g.run(world_sizes=(4,), seed=7, rejected_sample=8, timeout=240)
    bad = [r for r in res if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative")]
    assert not bad, "\n".join(f"{r['task']}: {r.get('counterexample') or r.get('passing')}"
                              for r in bad[:20])
    status = collections.Counter(r["status"] for r in res)
    assert status["accepted-match"] > 100 and status["rejected-counterexample"] > 50, status
    assert {r["case"] for r in res} == set(g.EQUATIONS)
    assert {r["mesh"] for r in res} == {"a4", "a2xb2"}
