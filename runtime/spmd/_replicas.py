"""``spmd.check_replicas(model)``: are the values typed R or I the same on every rank?

A type is a claim: ``b2: Tensor[I["tp"], R["dp"]]`` says every rank of "tp" and of "dp" holds
the same ``b2``. Neither checker can see a claim broken by data (a replicated parameter drawn
from a generator seeded per rank, dp replicas seeded with the global rank, a checkpoint loaded
differently on some ranks): the numbers are wrong and every op's rule is satisfied. This
collective measures it, once, where it is cheap: after initialising or loading a model.

Per axis, one all_gather of two int64 checksums of the bits (their sum, and their sum
weighted by position; exact and independent of the order of the sum) per tensor typed R or
I on that axis::

    rank 0: [s(b2), w(b2), s(ln_w), w(ln_w)]        every rank compares the rows:
    rank 1: [s(b2), w(b2), s(ln_w), w(ln_w)]   =>   a tensor whose checksums differ
                                                    between two ranks is not replicated

Equal checksums do not prove equal values; different ones prove different bits. Every rank of every axis must call it (it is a collective); every
rank raises the same error, so none is left waiting.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from spmd_mypy.engine.types import Kind

from . import _dist_utils as du
from . import _mesh
from ._checking import _fsdp1_sharded, _is_dtensor, annotated_tensors, suspended


def check_replicas(module: torch.nn.Module, *, prefix: str = "model",
                   untyped_replicated_on: Sequence[str] = ()) -> list[str]:
    """Raise ``ValueError`` on every rank if a parameter or buffer that ``module``'s classes
    annotate R or I on an axis of the current mesh differs between the ranks of that axis (a
    collective: every rank of the mesh calls it, with the same module structure).  Axes of
    another mesh are skipped (call it again under that mesh).  Works with or without
    ``spmd.typecheck()``.

    A parameter or buffer no class annotates (an ``nn.LayerNorm`` child of a typed block) has
    no claim to check: it is checked as replicated on the axes ``untyped_replicated_on`` names
    (``("tp",)``: a tensor-parallel model's norms, replicated on "tp"), else left unchecked.
    Returns the names of those left unchecked (empty when every tensor was checked)."""
    binding = _mesh._current
    if binding is None:
        raise ValueError("spmd.check_replicas needs a mesh: call it under spmd.set_mesh(mesh)")
    by_axis: dict[str, list[tuple[str, torch.Tensor]]] = {}
    typed: set[tuple[str, str]] = set()
    typed_names: set[str] = set()
    for path, _, name, value, t in annotated_tensors(module):
        typed.add((path, name))
        name = f"{path}.{name}" if path else name
        typed_names.add(name)
        for axis, lt in t.axes:
            if lt.kind in (Kind.R, Kind.I) and axis in binding.names:
                by_axis.setdefault(axis, []).append((name, value))
    unchecked: list[str] = []
    seen: set[int] = set()
    extra = [a for a in untyped_replicated_on if a in binding.names]
    for path, sub in module.named_modules():
        for name, value in [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]:
            if (path, name) in typed or id(value) in seen or _is_dtensor(value) or _fsdp1_sharded(value):
                continue
            seen.add(id(value))
            full = f"{path}.{name}" if path else name
            if not extra:
                unchecked.append(f"{prefix}.{full}")
            for axis in extra:
                by_axis.setdefault(axis, []).append((full, value))
    for axis in sorted(by_axis):
        group = _mesh.resolve_axis(axis)
        if group.size == 1:
            continue
        items = by_axis[axis]
        with torch.no_grad(), suspended():  # the checksums are no typed program
            sums = torch.stack([_checksums(v) for _, v in items]).reshape(-1)
            # row k: the rank of index k on the axis (the typed collectives' primitive)
            rows = du.all_gather(sums, group).view(group.size, len(items), 2).cpu()
        ranks = group.ranks  # their global ranks
        for j, (name, _) in enumerate(items):
            col = rows[:, j]
            differs = [k for k in range(group.size) if not torch.equal(col[k], col[0])]
            if differs:
                k = differs[0]
                raise ValueError(_message(f"{prefix}.{name}", axis, ranks[0], ranks[k],
                                          col[0].tolist(), col[k].tolist(),
                                          typed=name in typed_names))
    return unchecked


# the integer type of each element size: a tensor's bits, summed as integers, give the same
# checksum whatever the order of the sum (a float sum depends on the threads that add it and
# on the layout: the regression probe's bitwise-equal 4096 x 4096 weight differed in its
# 17th digit between a rank with one thread and one with four)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _checksums(v: torch.Tensor) -> torch.Tensor:
    """Two int64 checksums of ``v``'s elements in logical order (bitwise equal tensors give
    equal ones, whatever their layout): the sum of the elements' bits, and their sum
    weighted by position (so that values swapped between two places differ)."""
    x = v.detach().contiguous().reshape(-1)
    if x.is_complex():
        x = torch.view_as_real(x).reshape(-1)
    if x.dtype is torch.bool:
        x = x.to(torch.uint8)
    bits = x.view(_BITS[x.element_size()]).to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
    return torch.stack([bits.sum(), (bits * weights).sum()])


def _message(name: str, axis: str, r0: int, rk: int, c0: Any, ck: Any, typed: bool = True) -> str:
    claim = (f"is typed R or I on {axis!r}" if typed else
             f"has no type (checked as replicated on {axis!r}: untyped_replicated_on)")
    return (f"{name} {claim} (the same on every rank of the axis) but its "
            f"values differ: global rank {r0} has checksums {c0[0]} and {c0[1]} of its bits, "
            f"global rank {rk} {ck[0]} and {ck[1]}. A replicated "
            f"value drawn from a generator seeded per rank, loaded from a per-rank file, or "
            f"trained after a random op drawn per rank on a replicated activation (dropout "
            f"inside the RNG tracker's per-rank fork: the check mode reports it, spmd-random) is "
            f"not replicated: draw it with a seed that is the same on every rank of {axis!r} "
            f"(docs/checkpoints.md), or type it V / S(i) if each rank's is its own")


__all__ = ["check_replicas"]
