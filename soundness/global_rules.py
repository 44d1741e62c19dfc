"""The einsum rule in global mode (partition specs, SPEC section 6), checked on real ranks.

For a few einsum equations (matmul-like, batched, a broadcast one where an operand lacks a
label, a full contraction) and every assignment of partition specs (each operand dim
unsharded or sharded on one mesh axis; no axis twice in one spec) times the local types of
the other axes (R, I, P), on one mesh axis (2 and 4 ranks) and on a 2x2 mesh, with and
without ``out_partial_axes`` (each set of mesh axes):

1. the verdict comes from the engine itself (:func:`spmd_mypy.engine.global_spmd.propagate`
   with ``equation`` and ``out_partial_axes``, as both adapters call it);
2. every rank builds its local inputs from seeded float64 global values by their types
   (a sharded dim: this rank's chunk; P: random summands of the value; R, I: the value)
   and runs the einsum locally (``torch.einsum``: in global mode the runtime's
   ``spmd.einsum`` runs the local einsum and only types the result);
3. the locals are all-gathered and each rank checks its share: the result's locals,
   assembled by the result type (a sharded dim concatenated over its axis' ranks, P summed,
   R and I checked the same on every rank), must equal the single-device einsum of the
   global inputs; backward, a cotangent of the dual type (R <-> P, I, a sharded dim
   self-dual) gives local input gradients that, assembled by the inputs' dual types, must
   equal the single-device gradients.

An accepted combination must match with the engine's result type; a rejected one is tried
against every candidate result type (every spec of the result's rank times R, I, P on the
other axes; on an ``out_partial_axes`` axis P): each must fail, or the rejection is
conservative and must be listed here with the reason.

Not enumerated: a V axis outside the spec (a local axis: only inside ``spmd.local_map``),
one dim sharded on two axes.
"""

from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass
from typing import Any, Sequence

from spmd_mypy.engine import global_spmd
from spmd_mypy.engine.ops import Operand
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, Kind, SpmdType, dual, shard

from .denote import Mesh, Mismatch, close, fmt

SECTION = "einsum-global"
SIZE = 4  # every label's global size (divisible by every axis size and by 2 x 2)
EQUATIONS = {
    "matmul": "ij,jk->ik",
    "batched": "bij,bjk->bik",
    "broadcast": "bij,jk->bik",  # the second operand lacks the batch label
    "contract": "i,i->",
}


def _meshes() -> dict[str, Mesh]:
    from .rules import MESHES

    return MESHES


def operand_types(ndim: int, axes: Sequence[str]) -> list[SpmdType]:
    """Every global type of a tensor of ``ndim`` dims on ``axes``: a spec (each dim
    unsharded or sharded on one axis, no axis twice) and R, I or P on the other axes."""
    out = []
    for spec in itertools.product([None, *axes], repeat=ndim):
        used = [a for a in spec if a is not None]
        if len(used) != len(set(used)):
            continue
        others = [a for a in axes if a not in used]
        for lts in itertools.product([REPLICATE, INVARIANT, PARTIAL], repeat=len(others)):
            d = {a: shard(k) for k, a in enumerate(spec) if a is not None}
            d.update(zip(others, lts))
            out.append(SpmdType.of(d, tuple((a,) if a else () for a in spec)))
    return out


def type_text(t: SpmdType) -> str:
    from spmd_mypy.engine.types import format_type

    return format_type(t).replace("Tensor", "", 1)


@dataclass
class GTask:
    mesh: str
    eq: str  # a key of EQUATIONS
    in_types: tuple[SpmdType, ...]
    partial_axes: tuple[str, ...] = ()
    accepted: bool = False
    out_type: SpmdType | None = None
    errors: tuple[str, ...] = ()

    def label(self) -> str:
        pa = f", out_partial_axes={','.join(self.partial_axes)}" if self.partial_axes else ""
        ins = ", ".join(type_text(t) for t in self.in_types)
        return f"[{self.mesh}] einsum {EQUATIONS[self.eq]!r}({ins}{pa})"


def verdict(eq: str, in_types: Sequence[SpmdType], partial_axes: Sequence[str]):
    ops = [Operand(t, f"x{j}") for j, t in enumerate(in_types)]
    res = global_spmd.propagate("einsum", ops, equation=EQUATIONS[eq],
                                out_partial_axes=tuple(partial_axes) or None)
    errors = tuple(f"{e.code}: {e.message}" for e in res.errors)
    if errors:
        return False, None, errors
    return True, res.type, ()


def build_tasks(mesh_name: str, sample: int | None = None, seed: int = 0,
                equations: Sequence[str] | None = None,
                rejected_sample: int | None = None) -> list[GTask]:
    """Every combination (or ``sample`` per equation and out_partial_axes set); with
    ``rejected_sample`` every accepted one and that many rejected ones (the CI slice)."""
    mesh = _meshes()[mesh_name]
    rng = random.Random(f"global:{seed}:{mesh_name}")
    out = []
    for eq, text in EQUATIONS.items():
        if equations and eq not in equations:
            continue
        ins = text.split("->")[0].split(",")
        per = [operand_types(len(s), mesh.axes) for s in ins]
        combos = list(itertools.product(*per))
        for n in range(len(mesh.axes) + 1):
            for pa in itertools.combinations(mesh.axes, n):
                chosen = combos
                if sample is not None and len(combos) > sample:
                    chosen = rng.sample(combos, sample)
                tasks = []
                for combo in chosen:
                    acc, ot, errs = verdict(eq, combo, pa)
                    tasks.append(GTask(mesh_name, eq, tuple(combo), pa, acc, ot, errs))
                if rejected_sample is not None:
                    rej = [t for t in tasks if not t.accepted]
                    keep = rng.sample(rej, min(rejected_sample, len(rej)))
                    tasks = [t for t in tasks if t.accepted] + keep
                out += tasks
    return out


# --------------------------------------------------------------------------------------
# Values


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def global_value(salt: object, ndim: int):
    import torch

    g = torch.Generator().manual_seed(_seed("g", salt))
    return torch.randn((SIZE,) * ndim, generator=g, dtype=torch.float64)


def _spec_axes(t: SpmdType) -> dict[str, int]:
    """axis -> the dim it shards."""
    return {a: d for d, entry in enumerate(t.spec or ()) for a in entry}


def make_local(gval, t: SpmdType, mesh: Mesh, coord: Sequence[int], salt: object):
    """This rank's local value of a tensor of global type ``t`` whose global value is
    ``gval``: its chunk on the sharded dims; on P axes the chunk divided among the ranks
    plus random terms that cancel in the sum (so each rank's local differs)."""
    import torch

    x = gval
    sh = _spec_axes(t)
    for k, a in enumerate(mesh.axes):
        if a in sh:
            x = torch.chunk(x, mesh.shape[k], dim=sh[a])[coord[k]]
    p_axes = [k for k, a in enumerate(mesh.axes) if (lt := t.get(a)) is not None
              and lt.kind is Kind.P]
    if not p_axes:
        return x.clone()
    n = 1
    for k in p_axes:
        n *= mesh.shape[k]

    def noise(c: Sequence[int]):
        key = tuple(c[k] if (k in p_axes or mesh.axes[k] in sh) else 0 for k in range(len(c)))
        g = torch.Generator().manual_seed(_seed("p", salt, key))
        return torch.randn(x.shape, generator=g, dtype=torch.float64)

    mean = torch.zeros_like(x)
    for pc in itertools.product(*[range(mesh.shape[k]) for k in p_axes]):
        c = list(coord)
        for k, v in zip(p_axes, pc):
            c[k] = v
        mean = mean + noise(c)
    return x / n + noise(coord) - mean / n


def assemble(vals: dict, t: SpmdType, mesh: Mesh, what: str):
    """The global value the locals ``vals`` (by coordinate) denote under ``t``; raises
    Mismatch when they have no such meaning (R or I not the same on every rank)."""
    import torch

    sh = _spec_axes(t)
    cur = dict(vals)
    for k, a in enumerate(mesh.axes):
        if a in sh:
            continue
        lt = t.get(a)
        new = {}
        for key in cur:
            if key[k] != 0:
                continue
            group = [cur[key[:k] + (j,) + key[k + 1:]] for j in range(mesh.shape[k])]
            if lt is None or lt.kind is Kind.V:
                raise Mismatch(f"{what}: V on {a} outside the spec")
            if lt.kind is Kind.P:
                new[key] = sum(group[1:], group[0])
            else:
                for g in group[1:]:
                    if not close(g, group[0]):
                        raise Mismatch(f"{what} is {lt} on {a} but not the same on every rank")
                new[key] = group[0]
        cur = new
    for k, a in enumerate(mesh.axes):
        if a not in sh:
            continue
        new = {}
        for key in cur:
            if key[k] != 0:
                continue
            parts = [cur[key[:k] + (j,) + key[k + 1:]] for j in range(mesh.shape[k])]
            try:
                new[key] = torch.cat(parts, dim=sh[a])
            except RuntimeError as e:
                raise Mismatch(f"{what}: the shards do not concatenate: {e}") from None
        cur = new
    (only,) = cur.values()
    return only


def dual_type(t: SpmdType) -> SpmdType:
    return SpmdType.of({a: dual(lt) for a, lt in t.axes}, t.spec)


def _ins(task: GTask, index: int):
    text = EQUATIONS[task.eq]
    return [global_value(("in", index, j), len(s))
            for j, s in enumerate(text.split("->")[0].split(","))]


def run_forward(task: GTask, index: int, coord):
    import torch

    mesh = _meshes()[task.mesh]
    xs = [make_local(g, t, mesh, coord, ("in", index, j)).requires_grad_()
          for j, (g, t) in enumerate(zip(_ins(task, index), task.in_types))]
    try:
        return xs, torch.einsum(EQUATIONS[task.eq], *xs)
    except RuntimeError as e:  # shards whose sizes do not fit: no local computation
        return xs, "the local einsum fails: " + str(e).splitlines()[0]


def _cot(index: int, cand: SpmdType, out_ndim: int):
    return global_value(("cot", index, type_text(cand)), out_ndim)


def candidates(task: GTask, out_ndim: int) -> list[SpmdType]:
    mesh = _meshes()[task.mesh]
    out = []
    for t in operand_types(out_ndim, mesh.axes):
        if all((lt := t.get(a)) is not None and lt.kind is Kind.P for a in task.partial_axes):
            out.append(t)
    return out


def check_forward(task: GTask, index: int, cand: SpmdType, outs: dict) -> str | None:
    import torch

    mesh = _meshes()[task.mesh]
    try:
        got = assemble(outs, cand, mesh, "the result")
        want = torch.einsum(EQUATIONS[task.eq], *_ins(task, index))
        if not close(got, want):
            raise Mismatch(f"forward: single-device {fmt(want)}, ranks give {fmt(got)}")
    except Mismatch as e:
        return str(e)
    return None


def check_backward(task: GTask, index: int, cand: SpmdType, grads: dict, out_ndim: int) -> str | None:
    import torch

    mesh = _meshes()[task.mesh]
    try:
        leaves = [g.clone().requires_grad_() for g in _ins(task, index)]
        y = torch.einsum(EQUATIONS[task.eq], *leaves)
        want = torch.autograd.grad((y * _cot(index, cand, out_ndim)).sum(), leaves)
        for j, t in enumerate(task.in_types):
            got = assemble({c: g[j] for c, g in grads.items()}, dual_type(t), mesh,
                           f"the gradient of x{j} (dual type {type_text(dual_type(t))})")
            if not close(got, want[j]):
                raise Mismatch(f"backward: gradient of x{j}: single-device {fmt(want[j])}, "
                               f"ranks give {fmt(got)}")
    except Mismatch as e:
        return str(e)
    return None


# --------------------------------------------------------------------------------------
# Conservative rejections, with the reason

IMPLICIT_PARTIAL = (
    "a contracted label is sharded on an axis and the call does not name it in "
    "out_partial_axes: the local einsum is the partial sum (P there is right), but global "
    "SPMD never makes Partial implicitly (README, Global SPMD): the checker asks for "
    "out_partial_axes, so that every pending sum is written in the program")
REDUNDANT_PARTIAL = (
    "out_partial_axes names an axis where no contracted label is sharded but an operand is "
    "already P: the local result is P there without the declaration (so P is right), but "
    "the checker asks to drop the axis (the declaration claims a contraction that is not "
    "there)")


def conservative_reason(task: GTask, passing: list[SpmdType]) -> str | None:
    """Why a rejection that some result type survives is deliberate (None: not listed)."""
    kinds = set()
    for e in task.errors:
        if "never makes Partial implicitly" in e:
            kinds.add(IMPLICIT_PARTIAL)
        elif "no contracted label is sharded" in e:
            axis = e.split('out_partial_axes names "', 1)[1].split('"', 1)[0]
            if not any((lt := t.get(axis)) is not None and lt.kind is Kind.P
                       for t in task.in_types):
                return None
            kinds.add(REDUNDANT_PARTIAL)
        else:
            return None
    return " / ".join(sorted(kinds)) if kinds else None


CONSERVATIVE: list[tuple[str, str]] = [
    ("einsum contracting a label sharded on an axis not named in out_partial_axes",
     IMPLICIT_PARTIAL),
    ("out_partial_axes naming an axis with no sharded contracted label, an operand P there",
     REDUNDANT_PARTIAL),
]


# --------------------------------------------------------------------------------------
# The job: the task protocol of soundness.protocol, with the einsum in global mode


def run_backward(task: GTask, index: int, xs, y, cand: SpmdType, coord) -> list:
    import torch

    mesh = _meshes()[task.mesh]
    cot = make_local(_cot(index, cand, y.ndim), dual_type(cand), mesh, coord,
                     ("cot", index, type_text(cand)))
    gs = torch.autograd.grad(y, xs, cot, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(xs, gs)]


def _out_ndim(task: GTask) -> int:
    return len(EQUATIONS[task.eq].split("->")[1])


def _check_forward_or_failed(task: GTask, index: int, cand: SpmdType, outs: dict) -> str | None:
    """A rank whose local einsum fails fails every candidate (its message)."""
    failed = next((v for v in outs.values() if isinstance(v, str)), None)
    return failed or check_forward(task, index, cand, outs)


def job(rank: int, world_size: int, arg: dict) -> dict | None:
    """Each rank's part of the task protocol (:func:`soundness.protocol.run_tasks`)."""
    from .protocol import Suite, run_tasks

    suite = Suite(
        mesh=_meshes().__getitem__,
        forward=run_forward,
        candidates=lambda task, i, out: (
            [task.out_type] if task.accepted else candidates(task, _out_ndim(task))),
        check_forward=_check_forward_or_failed,
        backward=run_backward,
        check_backward=lambda task, i, cand, grads, out: check_backward(
            task, i, cand, grads, _out_ndim(task)),
        evaluate=lambda task, i, fwd, bwd: evaluate(task, fwd, bwd))
    return run_tasks(rank, world_size, arg["tasks"], suite)


def evaluate(task: GTask, fwd: dict, bwd: dict) -> dict:
    rec: dict[str, Any] = {"task": task.label(), "section": SECTION, "case": task.eq,
                           "mesh": task.mesh}
    if task.accepted:
        cand = task.out_type
        msg = fwd[cand] or bwd.get(cand)
        rec["engine"] = type_text(cand)  # type: ignore[arg-type]
        rec["status"] = "accepted-match" if msg is None else "accepted-MISMATCH"
        if msg:
            rec["counterexample"] = msg
        return rec
    rec["errors"] = list(task.errors)
    passing = [c for c in fwd if fwd[c] is None and bwd.get(c) is None]
    if not passing:
        rec["status"] = "rejected-counterexample"
        notes = [f"as {type_text(c)}: {m}" for c, m in bwd.items() if m is not None]
        notes += [f"as {type_text(c)}: {m}" for c, m in fwd.items() if m is not None][:3]
        rec["counterexample"] = (f"no result type is correct ({len(fwd)} tried; "
                                 f"{sum(m is None for m in fwd.values())} pass the forward); "
                                 + " | ".join(notes[:3]))
        rec["inputs"] = "global values seeded per task; types " + task.label()
        return rec
    reason = conservative_reason(task, passing)
    rec["passing"] = [type_text(c) for c in passing]
    rec["status"] = "conservative" if reason else "UNLISTED-conservative"
    if reason:
        rec["reason"] = reason
    return rec


def run(world_sizes: Sequence[int] = (2, 4), sample: int | None = None, seed: int = 0,
        equations: Sequence[str] | None = None, timeout: float = 1800.0,
        rejected_sample: int | None = None) -> list[dict]:
    from .rules import WORLDS
    from .world import run_world

    results: list[dict] = []
    for n in world_sizes:
        tasks = [t for m in WORLDS[n]
                 for t in build_tasks(m, sample, seed, equations, rejected_sample)]
        if not tasks:
            continue
        out = run_world(n, "soundness.global_rules:job", {"tasks": tasks}, timeout)
        results += out["results"]  # type: ignore[index]
    return results
