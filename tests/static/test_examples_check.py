"""The main job: the checker over examples/ (clean) and examples/mistakes/ (each classic bug
reported exactly: the marked line, the marked code, and the golden message text)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from mypy import api

from run_once import seed_mypy_cache

ROOT = Path(__file__).resolve().parents[2]
MISTAKES = ROOT / "examples" / "mistakes"
GOLDEN = MISTAKES / "expected_errors.txt"


def _mypy(*args: str) -> tuple[str, int]:
    # the checkout's cache, as the README's command uses it; when there is none yet, torch's
    # analysis comes from the test run's seed (what the command's first run would write)
    seed_mypy_cache(ROOT / ".mypy_cache")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        out, err, status = api.run(["--config-file", "pyproject.toml", "--cache-dir",
                                    str(ROOT / ".mypy_cache"), *args])
    finally:
        os.chdir(cwd)
    assert "INTERNAL ERROR" not in out + err, out + err
    return out, status


def test_examples_type_check_clean() -> None:
    out, status = _mypy("examples")
    assert status == 0, out
    assert "Success" in out


def _marked() -> set[tuple[str, int, str]]:
    marks = set()
    for f in sorted(MISTAKES.glob("*.py")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            m = re.search(r"# error: (spmd-[a-z-]+)", line)
            if m:
                marks.add((f"examples/mistakes/{f.name}", i, m.group(1)))
    return marks


def test_each_mistake_is_reported_on_its_line_with_its_code() -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in MISTAKES.glob("*.py"))
    out, status = _mypy(*files)
    assert status == 1
    got = set()
    for line in out.splitlines():
        m = re.match(r"(.+?):(\d+): error: .*\[(spmd-[a-z-]+)\]$", line)
        if m:
            got.add((m.group(1), int(m.group(2)), m.group(3)))
    assert got == _marked()
    assert len(got) == len(files)
    errors = sorted(line for line in out.splitlines() if ": error: " in line)
    if os.environ.get("SPMD_UPDATE_GOLDEN"):
        GOLDEN.write_text("\n".join(errors) + "\n")
    assert errors == GOLDEN.read_text().splitlines()
