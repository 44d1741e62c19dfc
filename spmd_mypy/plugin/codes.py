"""The engine's error kinds as mypy error codes.

Every code is a sub-code of ``spmd``, so ``# type: ignore[spmd]`` silences all
of them and ``# type: ignore[spmd-partial-nonlinear]`` one kind.
"""

from __future__ import annotations

from mypy.errorcodes import ErrorCode, error_codes

from ..engine.errors import CODES

SPMD = error_codes.get("spmd") or ErrorCode("spmd", "SPMD type errors (spmd-mypy)", "spmd-mypy")

ERROR_CODES: dict[str, ErrorCode] = {
    code: error_codes.get(code) or ErrorCode(code, description, "spmd-mypy", sub_code_of=SPMD)
    for code, description in CODES.items()
}
