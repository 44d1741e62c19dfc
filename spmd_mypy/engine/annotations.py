"""Building a type from the entries of an annotation, with its validation.

Both adapters read ``Tensor[R["tp"], V["dp"]]`` in their own way (mypy's
unanalyzed types, runtime objects) into a list of :class:`Entry`, then call
:func:`build`, so the rules about annotations live here once:

- every axis must be a configured mesh axis (else an error naming the known
  ones and the closest match);
- an axis may appear once in the whole annotation;
- a partition spec ``PS[...]`` names only Varying axes: an axis in it may not
  also be typed R, I or P.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

from .errors import SpmdError
from .types import Kind, LocalType, SpmdType, VARYING

MARKERS = ("R", "I", "V", "P", "S", "PS")


@dataclass(frozen=True)
class Entry:
    """One entry: ``R["tp", "dp"]`` is ``Entry("R", ("tp", "dp"))``; ``S[0, "tp"]`` has dim 0;
    ``PS[None, ("dp", "tp")]`` is ``Entry("PS", spec=((), ("dp", "tp")))``."""

    marker: str
    axes: tuple[str, ...] = ()
    dim: int | None = None
    spec: tuple[tuple[str, ...], ...] | None = None


def _edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (a transposition costs 1: "pc" is one step from "cp")."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def closest(name: str, known: Sequence[str]) -> str:
    """' (did you mean "tp"?)', ' (did you mean "dp" or "mp"?)' when several are as close
    (``tp`` with the axes ``dp``, ``mp``: one edit each, equally similar), or ''."""
    candidates = [(_edit_distance(name, k), -difflib.SequenceMatcher(None, name, k).ratio(), k)
                  for k in known]
    candidates = [c for c in candidates if c[0] <= max(1, len(name) // 2)]
    if not candidates:
        return ""
    best = min(candidates)[:2]
    tied = sorted(k for *score, k in candidates if tuple(score) == best)
    names = " or ".join(f'"{k}"' for k in tied)
    return f" (did you mean {names}?)"


MESH_AXES_SETTING = "[tool.spmd_mypy] mesh_axes"  # where the axes are configured, by default


def unknown_axis_error(name: str, known: Sequence[str], code: str = "spmd-annotation",
                       setting: str = MESH_AXES_SETTING) -> SpmdError:
    """``setting``: where the axes come from, as the message names it (the plugin's config
    file: ``[spmd_mypy] mesh_axes in mypy.ini``)."""
    known_text = ", ".join(f'"{a}"' for a in known) if known else "none configured"
    return SpmdError(
        code,
        f'unknown mesh axis "{name}"{closest(name, known)}; the mesh axes are {known_text} '
        f"({setting})",
    )


def build(entries: Sequence[Entry], mesh_axes: Sequence[str] | None,
          setting: str = MESH_AXES_SETTING) -> tuple[SpmdType, list[SpmdError]]:
    """The type the entries denote, and the annotation errors (the type drops bad parts).

    ``mesh_axes=None`` accepts any axis name (no configuration, e.g. at runtime
    before a mesh is set).
    """
    errors: list[SpmdError] = []
    seen: dict[str, str] = {}
    types: dict[str, LocalType] = {}
    spec: tuple[tuple[str, ...], ...] | None = None

    def claim(axis: str, where: str) -> bool:
        if mesh_axes is not None and axis not in mesh_axes:
            errors.append(unknown_axis_error(axis, mesh_axes, setting=setting))
            return False
        if axis in seen and where.startswith("PS") and seen[axis].startswith("PS"):
            errors.append(SpmdError(
                "spmd-annotation",
                f'mesh axis "{axis}" appears twice in the partition spec ({seen[axis][3:]} and '
                f"{where[3:]}); a mesh axis shards at most one dim, once",
            ))
            return False
        if axis in seen and (where.startswith("PS") or seen[axis].startswith("PS")):
            marker = (seen[axis] if where.startswith("PS") else where).split("[")[0]
            errors.append(SpmdError(
                "spmd-annotation",
                f'mesh axis "{axis}" is in the partition spec (so Varying) and also typed '
                f"{marker}; a partition spec names only Varying axes: drop it from PS or "
                f"from {marker}[...]",
            ))
            return False
        if axis in seen:
            errors.append(SpmdError(
                "spmd-annotation",
                f'mesh axis "{axis}" appears twice ({seen[axis]} and {where}); give each axis '
                f"one type",
            ))
            return False
        seen[axis] = where
        return True

    for e in entries:
        if e.marker == "PS":
            if spec is not None:
                errors.append(SpmdError("spmd-annotation", "only one PS[...] entry per type"))
                continue
            kept: list[tuple[str, ...]] = []
            for dim, axes in enumerate(e.spec or ()):
                ok = tuple(a for a in axes if claim(a, f"PS dim {dim}"))
                for a in ok:
                    types[a] = LocalType(Kind.V, dim)
                kept.append(ok)
            spec = tuple(kept)
            continue
        for axis in e.axes:
            where = f"S[{e.dim}]" if e.marker == "S" else f"{e.marker}[...]"
            if not claim(axis, where):
                continue
            if e.marker == "S":
                types[axis] = LocalType(Kind.V, e.dim)
            else:
                types[axis] = LocalType(Kind(e.marker)) if e.marker != "V" else VARYING
    return SpmdType.of(types, spec), errors
