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
from typing import Mapping, Sequence

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
    (``tp`` with the axes ``dp``, ``mp``: one edit each, equally similar), or ''.  Case does
    not count (``TP`` is ``tp``), unless it is the only difference between known names."""
    low = name.lower()
    candidates = [(_edit_distance(low, k.lower()), _edit_distance(name, k),
                   -difflib.SequenceMatcher(None, low, k.lower()).ratio(), k) for k in known]
    candidates = [c for c in candidates if c[0] <= max(1, len(name) // 2)]
    if not candidates:
        return ""
    best = min(candidates)[:3]
    tied = sorted(k for *score, k in candidates if tuple(score) == best)
    names = " or ".join(f'"{k}"' for k in tied)
    return f" (did you mean {names}?)"


MESH_AXES_SETTING = "[tool.spmd_mypy] mesh_axes"  # where the axes are configured, by default


def unknown_axis_error(name: str, known: Sequence[str], code: str = "spmd-annotation",
                       setting: str = MESH_AXES_SETTING,
                       flattened: Sequence[str] = ()) -> SpmdError:
    """``setting``: where the axes come from, as the message names it (the plugin's config
    file: ``[spmd_mypy] mesh_axes in mypy.ini``); ``flattened``: the flattened axes' names."""
    known_text = ", ".join(f'"{a}"' for a in known) if known else "none configured"
    if flattened:
        known_text += " (and the flattened " + ", ".join(f'"{a}"' for a in flattened) + ")"
    return SpmdError(
        code,
        f'unknown mesh axis "{name}"{closest(name, list(known) + list(flattened))}; the mesh '
        f"axes are {known_text} ({setting})",
    )


def _entry_text(e: Entry) -> str:
    """An entry as written: ``R["dp", "tp"]``, ``S[0, "tp"]``."""
    args = ([str(e.dim)] if e.marker == "S" else []) + [f'"{a}"' for a in e.axes]
    return f"{e.marker}[{', '.join(args)}]"


Aliases = Mapping[str, tuple[str, ...]]  # a flattened axis name -> its component axes


def expand_axes(names: tuple[str, ...], aliases: Aliases | None) -> tuple[str, ...]:
    """``names`` with each flattened axis (``"dp"`` after ``mesh["dp_replicate", "dp_shard"]
    ._flatten("dp")``) replaced by its component axes, in place: the one place a flattened
    name is resolved (annotations, a collective's axes, the runtime's groups)."""
    if not aliases:
        return names
    out: list[str] = []
    for n in names:
        parts = aliases.get(n)
        if parts is None:
            out.append(n)
        else:
            out.extend(parts)
    return tuple(out)


def alias_note(names: Sequence[str], aliases: Aliases | None) -> str:
    """``' ("dp" is the flattened "dp_replicate", "dp_shard")'`` for the aliases among
    ``names``, or ''."""
    if not aliases:
        return ""
    used = [n for n in dict.fromkeys(names) if n in aliases]
    if not used:
        return ""
    return " (" + "; ".join(f'"{n}" is the flattened ' + ", ".join(f'"{a}"' for a in aliases[n])
                            for n in used) + ")"


def entries_of(t: SpmdType) -> list[Entry]:
    """The entries that build ``t`` again (one per axis, the spec as one PS entry)."""
    in_spec = {a for entry in t.spec or () for a in entry}
    out = [Entry("S" if lt.dim is not None else lt.kind.value, (a,), dim=lt.dim)
           for a, lt in t.axes if a not in in_spec]
    if t.spec is not None:
        out.append(Entry("PS", spec=t.spec))
    return out


def build(entries: Sequence[Entry], mesh_axes: Sequence[str] | None,
          setting: str = MESH_AXES_SETTING,
          aliases: Aliases | None = None) -> tuple[SpmdType, list[SpmdError]]:
    """The type the entries denote, and the annotation errors.

    ``mesh_axes=None`` accepts any axis name (no configuration, e.g. at runtime
    before a mesh is set).

    What an error leaves is unknown, never a guess, so that the annotation's error is the
    only one: an unknown axis in ``R[...]`` (or another local entry) is left out (unchecked);
    an axis typed twice in different ways (``R["tp"], V["tp"]``) is left out; a partition
    spec with an entry it cannot take (an unknown or repeated axis, an axis also typed
    R/I/P) is unknown as a whole: the type has no spec, and the axes of the spec are left
    out.  (A declared type left out on an axis is unchecked there, as an axis not
    annotated; ``SpmdType.failed`` would make mypy reject every tensor passed to it.)  (Reading ``PS[None, "dpp"]`` as ``PS[None, None]``
    would report every use of a tensor sharded on dim 1 as a layout mismatch.)

    ``aliases``: the flattened axes (``"dp"`` for ``("dp_replicate", "dp_shard")``), each
    read as its components (``R["dp"]`` is ``R["dp_replicate", "dp_shard"]``).
    """
    note = ""
    if aliases:
        written = [a for e in entries for a in e.axes + tuple(x for d in e.spec or () for x in d)]
        note = alias_note(written, aliases)
        if note:
            entries = [Entry(e.marker, expand_axes(e.axes, aliases), e.dim,
                             None if e.spec is None else
                             tuple(expand_axes(d, aliases) for d in e.spec)) for e in entries]
    errors: list[SpmdError] = []
    seen: dict[str, str] = {}
    # the entry each axis was first claimed by (a local entry's text; PS entries: None)
    seen_entry: dict[str, Entry | None] = {}
    types: dict[str, LocalType] = {}
    spec: tuple[tuple[str, ...], ...] | None = None
    spec_ok = True
    ambiguous: set[str] = set()

    def claim(axis: str, where: str, entry: Entry | None) -> bool:
        if mesh_axes is not None and axis not in mesh_axes:
            errors.append(unknown_axis_error(axis, mesh_axes, setting=setting,
                                             flattened=tuple(aliases or ())))
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
            if marker != "V":  # V["tp"] with "tp" in the spec says no more than the spec
                ambiguous.add(axis)
            return False
        if axis in seen:
            first = seen_entry.get(axis)
            if first is entry and entry is not None:
                once = Entry(entry.marker, tuple(dict.fromkeys(entry.axes)), entry.dim)
                errors.append(SpmdError(
                    "spmd-annotation",
                    f'mesh axis "{axis}" appears twice in {_entry_text(entry)}; name it once: '
                    f"{_entry_text(once)}",
                ))
            else:
                errors.append(SpmdError(
                    "spmd-annotation",
                    f'mesh axis "{axis}" appears twice '
                    f"({_entry_text(first) if first is not None else seen[axis]} and "
                    f"{_entry_text(entry) if entry is not None else where}); give each axis "
                    f"one type",
                ))
            if where != seen[axis]:
                ambiguous.add(axis)
            return False
        seen[axis] = where
        seen_entry[axis] = entry
        return True

    for e in entries:
        if e.marker == "PS":
            if spec is not None:
                errors.append(SpmdError("spmd-annotation", "only one PS[...] entry per type"))
                continue
            kept: list[tuple[str, ...]] = []
            for dim, axes in enumerate(e.spec or ()):
                ok = tuple(a for a in axes if claim(a, f"PS dim {dim}", None))
                spec_ok = spec_ok and len(ok) == len(axes)
                for a in ok:
                    types[a] = LocalType(Kind.V, dim)
                kept.append(ok)
            spec = tuple(kept)
            continue
        for axis in e.axes:
            where = f"S[{e.dim}]" if e.marker == "S" else f"{e.marker}[...]"
            if not claim(axis, where, e):
                continue
            if e.marker == "S":
                types[axis] = LocalType(Kind.V, e.dim)
            else:
                types[axis] = LocalType(Kind(e.marker)) if e.marker != "V" else VARYING
    unknown = set(ambiguous)
    if spec is not None and (not spec_ok or ambiguous & {a for entry in spec for a in entry}):
        unknown |= {a for entry in spec for a in entry}
        spec = None
    for a in unknown:
        types.pop(a, None)
    if note and errors:
        errors = [SpmdError(err.code, err.message + note) for err in errors]
    return SpmdType.of(types, spec), errors
