"""Replay a saved fuzzer program (tests/soundness/regressions/): the three verdicts must
agree.  One gloo world and one mypy work directory serve every replay of a session."""

from __future__ import annotations

import atexit
from typing import Any

from .fuzz_model import Program

_SHARED: dict[str, Any] = {}


def shared_fuzzer() -> Any:
    from .fuzz import Fuzzer

    fz = _SHARED.get("fuzzer")
    if fz is None:
        fz = _SHARED["fuzzer"] = Fuzzer(verbose=False).__enter__()
        atexit.register(fz.__exit__, None, None, None)
    return fz


def replay(program_json: str) -> None:
    prog = Program.from_json(program_json)
    out = shared_fuzzer().judge(prog)
    assert out.disagreement is None, "\n" + out.report()
