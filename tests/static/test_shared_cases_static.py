"""The shared case table (tests/cases/shared_cases.py) through the mypy plugin.

The runtime check mode runs the same table (tests/checking/test_check_shared_cases.py):
both modes must give the same verdict, case by case (issue 3: one rule engine, two
adapters that agree).  mypy runs once per configuration (strict or not) for all cases.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cases"))
import shared_cases  # noqa: E402
from run_once import seed_mypy_cache  # noqa: E402

ERROR = re.compile(r"^cases_(?P<strict>\w+)\.py:(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


@lru_cache(maxsize=None)
def _run(strict: bool, workdir: str) -> tuple[dict[str, tuple[int, int]], dict[int, list[str]]]:
    """Render every case of this config into one module; mypy once; errors by line."""
    lines = [shared_cases.PRELUDE]
    spans: dict[str, tuple[int, int]] = {}
    for c in shared_cases.CASES:
        if c.strict != strict:
            continue
        start = sum(part.count("\n") for part in lines) + 2
        text = "\n" + shared_cases.render_function(c)
        lines.append(text)
        end = start + text.count("\n") - 2
        spans[c.id] = (start, end)
    name = f"cases_{'strict' if strict else 'gradual'}"
    root = Path(workdir)
    (root / f"{name}.py").write_text("".join(lines))
    (root / f"{name}.ini").write_text(
        "[mypy]\nplugins = spmd_mypy.plugin\n[spmd_mypy]\nmesh_axes = dp, tp\n"
        f"strict = {'true' if strict else 'false'}\n")
    seed_mypy_cache(root / f".cache-{name}")  # torch's analysis from the run's seed
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", f"{name}.ini", "--cache-dir",
         f".cache-{name}", "--no-error-summary", f"{name}.py"],
        cwd=root, capture_output=True, text=True, timeout=600)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    by_line: dict[int, list[str]] = {}
    for out in proc.stdout.splitlines():
        m = ERROR.match(out)
        if m:
            by_line.setdefault(int(m.group("line")), []).append(m.group("code"))
        elif ": error:" in out:
            by_line.setdefault(int(out.split(":")[1]), []).append(out)
    return spans, by_line


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("shared-cases"))


@pytest.mark.parametrize("case", shared_cases.CASES, ids=[c.id for c in shared_cases.CASES])
def test_static_verdict_matches_the_table(case: shared_cases.Case, workdir: str) -> None:
    spans, by_line = _run(case.strict, workdir)
    start, end = spans[case.id]
    errors = {line: codes for line, codes in by_line.items() if start <= line <= end}
    if case.error is None:
        assert not errors, f"{case.id}: expected {case.expect}, got errors {errors}"
    else:
        line = end if case.static_line is None else start + case.static_line
        assert errors == {line: [case.error]}, (
            f"{case.id}: expected [{case.error}] on line {line}, got {errors}")
