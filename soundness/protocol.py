"""The distributed task protocol shared by the rule suites (:mod:`soundness.rules`, local
op classes, and :mod:`soundness.global_rules`, einsum in global mode).

Phase 1: every rank runs the forward of every task on its own coordinate; the local
outputs are all-gathered and each rank checks its share of the tasks (task i on rank
i mod n) against every candidate result type, and plans the candidates to run backward
(those that pass forward; all of them for an accepted task).  Phase 2: every rank runs the
planned backwards (a cotangent of the candidate's dual type), the gradients are
all-gathered, each rank checks its share; rank 0 collects the outcomes.

What differs between the suites comes in as a :class:`Suite`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class Suite:
    """The suite-specific parts of the protocol (``out`` is this rank's gathered output
    of the task: a detached tensor, or a message when the local op fails)."""

    mesh: Callable[[str], Any]  # task.mesh -> the mesh (``coord(rank)``, ``coords()``)
    forward: Callable[[Any, int, Any], tuple]  # (task, i, coord) -> (inputs, output)
    candidates: Callable[[Any, int, Any], list]  # (task, i, out) -> result types to try
    check_forward: Callable[[Any, int, Any, dict], "str | None"]  # (task, i, cand, per coord)
    backward: Callable[[Any, int, Sequence, Any, Any, Any], list]  # (task, i, xs, y, cand, coord)
    check_backward: Callable[[Any, int, Any, dict, Any], "str | None"]  # (..., per coord, out)
    evaluate: Callable[[Any, int, dict, dict], dict]  # (task, i, fwd, bwd) -> the record


def run_tasks(rank: int, world_size: int, tasks: Sequence[Any], suite: Suite) -> dict | None:
    """Run the protocol on this rank; rank 0 returns ``{"results": [record per task]}``."""
    import torch.distributed as dist

    coords = {m: suite.mesh(m).coord(rank) for m in {t.mesh for t in tasks}}
    kept, outs = [], []
    for i, task in enumerate(tasks):
        xs, y = suite.forward(task, i, coords[task.mesh])
        kept.append((xs, y))
        outs.append(y if isinstance(y, str) else y.detach())
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, outs)
    mine = [i for i in range(len(tasks)) if i % world_size == rank]
    fwd: dict[int, dict] = {}
    my_plan = []
    for i in mine:
        task = tasks[i]
        per_coord = {c: everyone[r][i] for r, c in enumerate(suite.mesh(task.mesh).coords())}
        res = {cand: suite.check_forward(task, i, cand, per_coord)
               for cand in suite.candidates(task, i, outs[i])}
        fwd[i] = res
        my_plan.append((i, [c for c, msg in res.items() if msg is None or task.accepted]))
    plans: list[Any] = [None] * world_size
    dist.all_gather_object(plans, my_plan)
    todo = sorted((item for p in plans for item in p), key=lambda it: it[0])
    grads_out = {}
    for i, cands in todo:
        xs, y = kept[i]
        coord = coords[tasks[i].mesh]
        grads_out[i] = [suite.backward(tasks[i], i, xs, y, c, coord) for c in cands]
    del kept
    g2: list[Any] = [None] * world_size
    dist.all_gather_object(g2, grads_out)
    results = []
    for i, cands in my_plan:
        task = tasks[i]
        mesh = suite.mesh(task.mesh)
        bwd: dict = {}
        for ci, cand in enumerate(cands):
            per_coord = {c: g2[r][i][ci] for r, c in enumerate(mesh.coords())}
            bwd[cand] = suite.check_backward(task, i, cand, per_coord, outs[i])
        results.append((i, suite.evaluate(task, i, fwd[i], bwd)))
    collected: list[Any] = [None] * world_size if rank == 0 else None  # type: ignore[assignment]
    dist.gather_object(results, collected, dst=0)
    if rank != 0:
        return None
    return {"results": [rec for _, rec in sorted(it for part in collected for it in part)]}
