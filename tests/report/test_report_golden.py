"""Golden reports: ``spmd-mypy report examples/<name>.py`` (plain and ``--json``) for every
example, checked against ``tests/report/golden/<name>.txt`` / ``.json``.

The golden files were reviewed by hand against the table (SPEC section 4); the review
notes are in ``tests/report/golden/REVIEW.md``.  After an intended change (an example
edited, the report's format changed) regenerate them with::

    SPMD_REPORT_UPDATE_GOLDEN=1 pytest tests/report/test_report_golden.py

and review the diff.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
MakeReport = Callable[..., Any]

sys.path.insert(0, str(ROOT / "examples"))
import _harness  # type: ignore[import-not-found]  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SPMD_REPORT_UPDATE_GOLDEN") == "1"


def _check(path: Path, actual: str) -> None:
    if UPDATE:
        path.write_text(actual)
    assert path.exists(), f"no golden file {path}: run with SPMD_REPORT_UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert actual == expected, f"{path.name} differs from the golden file (regenerate and review)"


def test_every_example_has_golden_files() -> None:
    files = {p.stem for p in (ROOT / "examples").glob("*.py")
             if not p.stem.startswith("_") and p.stem != "run_all"}
    assert files == set(_harness.EXAMPLES)
    for name in files:
        assert (GOLDEN / f"{name}.txt").exists() or UPDATE, name
        assert (GOLDEN / f"{name}.json").exists() or UPDATE, name


@pytest.mark.parametrize("name", _harness.EXAMPLES)
def test_golden_report(make_report: MakeReport, name: str) -> None:
    report = make_report([f"examples/{name}.py"])
    assert report.errors == []
    _check(GOLDEN / f"{name}.txt", report.format_table())
    text = report.to_json()
    _check(GOLDEN / f"{name}.json", text)
    data = json.loads(text)
    assert data["paths"] == [f"examples/{name}.py"]
    assert all(f["path"] == f"examples/{name}.py" for f in data["functions"])


def test_docs_example_is_the_real_output() -> None:
    """The excerpt in docs/report.md is copied from the golden report (no drift)."""
    doc = (ROOT / "docs" / "report.md").read_text()
    block = doc.split("$ spmd-mypy report examples/tp_mlp.py\n", 1)[1].split("```", 1)[0]
    golden = (GOLDEN / "tp_mlp.txt").read_text().splitlines()
    shown = [line for line in block.splitlines() if line.strip() and line.strip() != "..."]
    assert len(shown) > 10
    for line in shown:
        assert line in golden, line
