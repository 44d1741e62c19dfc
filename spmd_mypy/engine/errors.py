"""Error kinds of the type system, one code per kind of mistake.

The codes are the mypy error codes users enable, disable and ignore
(``# type: ignore[spmd-partial-nonlinear]``); the runtime checker raises
:class:`SpmdTypeError` carrying the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

# code -> one-line description (shown by ``spmd-mypy codes`` and in the README)
CODES: dict[str, str] = {
    "spmd-annotation": "malformed SPMD annotation (unknown or repeated axis, bad entry)",
    "spmd-invariant-mix": "an Invariant operand mixed with R, V or P in one op",
    "spmd-partial-varying": "a Partial operand mixed with a Varying one",
    "spmd-partial-affine": "a Partial operand added to a Replicate value or a scalar",
    "spmd-partial-product": "two Partial factors in one multilinear op",
    "spmd-partial-nonlinear": "a Partial operand through a non-linear op",
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
    "spmd-global": "a global SPMD (partition spec) rule violation",
    "spmd-mismatch": "a tensor passed where a different SPMD type is expected",
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
