"""What a set of per-rank local tensors *means* under a type: the denotations.

Per mesh axis, the local values on the ranks of that axis denote one global value::

    R, I   the common value (every rank must hold the same)      [a] [a] [a]  =>  a
    P      the sum (a pending all-reduce)                        [a] [b] [c]  =>  a+b+c
    V      the list: one value per rank, the op applied per rank [a] [b] [c]  =>  (a, b, c)
    S(i)   a V (the list), and its concatenation on dim i is the global tensor:
                                                                 [a] [b] [c]  =>  cat(a,b,c)

On several axes the denotation is taken axis by axis (innermost first, so an S(i) on
two axes concatenates in mesh order).  A denotation is a dict from a *key* (one entry
per mesh axis: the rank's coordinate on a V axis that is kept as a list, ``None`` on an
axis that was summed, checked common, or concatenated) to a tensor.

Nothing here knows the rules: it only says what a type claims about the locals.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from spmd_mypy.engine.types import Kind, LocalType, dual

RTOL = 1e-9
ATOL = 1e-9

Key = tuple  # tuple[int | None, ...], one entry per mesh axis
Denotation = dict  # dict[Key, torch.Tensor]


class Mismatch(Exception):
    """The locals do not have the meaning the type claims, or the meanings differ."""


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL))


def fmt(t: torch.Tensor) -> str:
    """A short printing of a small tensor for counterexamples."""
    flat = [f"{v:.4g}" for v in t.detach().reshape(-1).tolist()[:6]]
    more = ", ..." if t.numel() > 6 else ""
    return f"{list(t.shape)}[{', '.join(flat)}{more}]"


@dataclass(frozen=True)
class Mesh:
    """A mesh of ``shape`` over ``axes`` (outermost first); rank = row-major coordinate."""

    axes: tuple[str, ...]
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def coords(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*[range(s) for s in self.shape]))

    def coord(self, rank: int) -> tuple[int, ...]:
        return self.coords()[rank]

    def name(self) -> str:
        return "x".join(f"{a}{s}" for a, s in zip(self.axes, self.shape))


def denote(locals_: dict[tuple[int, ...], torch.Tensor], types: Sequence[LocalType],
           concat_axes: frozenset[int] = frozenset(), what: str = "value",
           names: Sequence[str] | None = None) -> Denotation:
    """The denotation of per-rank locals (keyed by mesh coordinate) under per-axis types.

    ``concat_axes``: the axes (by position) on which an S(i) is read as its concatenation;
    elsewhere an S(i) is read as the list (it is a V).  Raises :class:`Mismatch` when an R
    or I axis does not hold one common value.
    """
    cur: dict[tuple, torch.Tensor] = dict(locals_)
    for k in reversed(range(len(types))):
        lt = types[k]
        if lt.kind is Kind.V and not (lt.dim is not None and k in concat_axes):
            continue  # kept as a list: the key keeps this coordinate
        groups: dict[tuple, list[tuple[int, torch.Tensor]]] = {}
        for key, val in cur.items():
            rest = key[:k] + (None,) + key[k + 1:]
            groups.setdefault(rest, []).append((key[k], val))
        nxt: dict[tuple, torch.Tensor] = {}
        for rest, members in groups.items():
            members.sort(key=lambda m: m[0])
            vals = [v for _, v in members]
            if lt.kind in (Kind.R, Kind.I):
                for (c, v) in members[1:]:
                    if not close(v, vals[0]):
                        raise Mismatch(
                            f"{what} is {lt} on {names[k] if names else k} but not the same on "
                            f"every rank: "
                            f"coord {members[0][0]}: {fmt(vals[0])}, coord {c}: {fmt(v)}")
                nxt[rest] = vals[0]
            elif lt.kind is Kind.P:
                nxt[rest] = torch.stack(vals).sum(0) if vals[0].ndim >= 0 else sum(vals)
            else:  # S(i) read as the concatenation
                assert lt.dim is not None
                if vals[0].ndim <= lt.dim:
                    raise Mismatch(f"{what} is {lt} but has only {vals[0].ndim} dims")
                nxt[rest] = torch.cat(vals, dim=lt.dim)
        cur = nxt
    return cur


def project(key: Key, types: Sequence[LocalType], concat_axes: frozenset[int]) -> Key:
    """The key of a value of ``types`` seen from a full key (its non-list axes set to None)."""
    return tuple(c if (t.kind is Kind.V and not (t.dim is not None and i in concat_axes)) else None
                 for i, (c, t) in enumerate(zip(key, types)))


def list_axes(types: Sequence[LocalType], concat_axes: frozenset[int]) -> set[int]:
    return {i for i, t in enumerate(types)
            if t.kind is Kind.V and not (t.dim is not None and i in concat_axes)}


def full_keys(mesh: Mesh, axes: set[int]) -> list[Key]:
    ranges = [range(s) if i in axes else [None] for i, s in enumerate(mesh.shape)]
    return list(itertools.product(*ranges))


def dual_types(types: Sequence[LocalType]) -> list[LocalType]:
    return [dual(t) for t in types]


def reference_forward(
    fn: Callable[..., torch.Tensor], inputs: Sequence[tuple[Denotation, Sequence[LocalType]]],
    mesh: Mesh, extra_axes: set[int], concat_axes: frozenset[int],
) -> dict[Key, torch.Tensor]:
    """The single-device computation on the global values, once per list coordinate.

    A V input contributes one value per rank (the op applied per element, the other
    inputs broadcast); the result is keyed by the full key over every list axis of the
    inputs and ``extra_axes`` (the result's own list axes).
    """
    axes = set(extra_axes)
    for _, types in inputs:
        axes |= list_axes(types, concat_axes)
    out: dict[Key, torch.Tensor] = {}
    for key in full_keys(mesh, axes):
        args = [den[project(key, types, concat_axes)] for den, types in inputs]
        out[key] = fn(*args)
    return out
