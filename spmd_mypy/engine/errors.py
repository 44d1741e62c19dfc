"""Error kinds of the type system, one code per kind of mistake.

The codes are the mypy error codes users enable, disable and ignore
(``# type: ignore[spmd-partial-nonlinear]``); the runtime checker raises
:class:`SpmdTypeError` carrying the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .types import axis_words, format_axes

# code -> one-line description (shown by ``spmd-mypy codes`` and in the README)
CODES: dict[str, str] = {
    "spmd-annotation": "malformed SPMD annotation (unknown or repeated axis, bad entry)",
    "spmd-invariant-mix": "an Invariant operand mixed with R, V or P in one op",
    "spmd-partial-varying": "a Partial operand mixed with a Varying one",
    "spmd-partial-affine": "a Partial operand added to a Replicate value or a scalar",
    "spmd-partial-product": "two Partial factors in one multilinear op",
    "spmd-partial-nonlinear": "a Partial operand through a non-linear op, or its value read out (.item(), if p:)",
    "spmd-inplace": "an in-place op or out= that would change the mutated tensor's type",
    "spmd-backward": "loss.backward() on a loss that is not I or P on every axis",
    "spmd-collective": "a collective or conversion with a src/dst pair outside the table",
    "spmd-src-mismatch": "a collective's src does not match the input's type",
    "spmd-expert-mode": "a reinterpret that needs expert_mode=True",
    "spmd-axis": "a collective's axis is not a literal mesh axis name",
    "spmd-untyped": "an untyped tensor as an operand of a typed op (strict mode only)",
    "spmd-no-grad": "a collective without a gradient on a tensor that carries one",
    "spmd-duality": "an autograd Function whose backward types are not the duals of forward's",
    "spmd-raw-collective": "a raw torch.distributed collective on a typed tensor",
    "spmd-discarded-result": "a typed collective as a statement of its own: its result (the only thing it changes) is dropped",
    "spmd-divergent-collective": "a collective under a condition that differs between the ranks of its axis (some never join: a hang)",
    "spmd-random": "a random op typed R or I on an axis whose generator differs between its ranks (check mode only)",
    "spmd-mesh": "a value typed under one mesh used under another whose axis of that name spans other ranks, or a collective whose group holds ranks of another mesh's value that are alike or different blocks (check mode only)",
    "spmd-global": "a global SPMD rule violation (a partition spec, or the global layout a local S(i) states)",
    "spmd-mismatch": "a tensor passed where a different SPMD type is expected",
    "spmd-setup": "mypy cannot see the types the checks need (torch missing or skipped, spmd's runtime package in place of its stubs)",
    "spmd-internal": "spmd-mypy itself failed on this line (a bug to report); the rest is checked",
}


@dataclass(frozen=True)
class SpmdError:
    """One violation: the code, and the message users read (axis, types, reason, fix)."""

    code: str
    message: str

    def __post_init__(self) -> None:
        assert self.code in CODES, self.code

    def __str__(self) -> str:
        return f"{self.message}  [{self.code}]"


class SpmdTypeError(Exception):
    """Raised by the runtime check mode; carries the same code as the static error.

    Deliberately not a TypeError: torch's binary operators turn a TypeError raised
    inside them into NotImplemented ("unsupported operand"), hiding the message."""

    def __init__(self, error: SpmdError) -> None:
        super().__init__(str(error))
        self.error = error
        self.code = error.code

    def __reduce__(self) -> tuple[type[SpmdTypeError], tuple[SpmdError]]:
        """Pickled as its error (the constructor's argument, not the message ``Exception``
        would pass): an error raised in a worker of ``torch.multiprocessing.spawn`` or a
        ``concurrent.futures`` process pool reaches the parent with its code and message."""
        return (type(self), (self.error,))


# Where a per-axis message names its axis outside the operands' type texts: the reason
# (``Partial on "tp" (p: ...)``) and the fix's axis argument (``all_reduce(p, "tp", src=P``).
_AXIS_SPOT = re.compile(r'(?<= on )"([^"]+)"|(?<=, )"([^"]+)"(?=, src=)')
# Fixes whose tuple axis would order the blocks (a gather, a scatter, a slice): a message
# naming one is never merged (all_reduce and reinterpret take the axes in any order)
_ORDERED_FIXES = re.compile(r"\b(?:all_gather|reduce_scatter|all_to_all|convert|redistribute)\(")


def merge_axis_errors(errors: list[SpmdError]) -> list[SpmdError]:
    """One mistake on several axes as one error with the tuple-axis fix (one flattened
    collective), in place of one error per axis that differ only in the axis named::

        Partial on "dp" (p: ...) ... all_reduce(p, "dp", src=P, dst=R) first
        Partial on "tp" (p: ...) ... all_reduce(p, "tp", src=P, dst=R) first
            => Partial on "dp" and "tp" (p: ...) ... all_reduce(p, ("dp", "tp"), src=P, dst=R) first

    Only where the fix is an all_reduce or a reinterpret (the flattened axes' order does not
    matter); the merged error stands where the first of them stood."""
    if len(errors) < 2:
        return errors
    keyed: list[tuple[str, str] | None] = []  # (template, axis) per error
    for e in errors:
        axes = {m.group(1) or m.group(2) for m in _AXIS_SPOT.finditer(e.message)}
        if len(axes) != 1 or _ORDERED_FIXES.search(e.message):
            keyed.append(None)
            continue
        (axis,) = axes
        template = _AXIS_SPOT.sub("\x00", e.message)
        keyed.append((template, axis))
    groups: dict[tuple[str, str], list[str]] = {}
    for e, k in zip(errors, keyed):
        if k is not None and k[1] not in groups.setdefault((e.code, k[0]), []):
            groups[(e.code, k[0])].append(k[1])
    out: list[SpmdError] = []
    done: set[tuple[str, str]] = set()
    for e, k in zip(errors, keyed):
        if k is None or len(groups[(e.code, k[0])]) < 2:
            out.append(e)
            continue
        key = (e.code, k[0])
        if key in done:
            continue
        done.add(key)
        axes = groups[key]
        words = axis_words(axes)
        pieces = k[0].split("\x00")
        spots = _AXIS_SPOT.finditer(e.message)
        text = pieces[0]
        for spot, piece in zip(spots, pieces[1:]):
            text += (words if spot.group(1) else format_axes(axes)) + piece
        out.append(SpmdError(e.code, text))
    return out
