"""Golden files: ``golden/<case>.input.py`` migrates to ``<case>.expected.py``, reporting ``<case>.report``.

``<case>.args`` (optional) holds extra command-line arguments, one per line.  Every case is run
from ``<tmp>/megatron/core/tensor_parallel/<case>.py`` (so relative imports resolve as in
Megatron).  Regenerate the expected files after a deliberate change with
``SPMD_MIGRATE_UPDATE_GOLDEN=1 pytest tests/migrate`` and review the diff.
"""

from __future__ import annotations

import ast
import io
import os
from pathlib import Path

import pytest

from run_once import seed_mypy_cache
from spmd_mypy.migrate import run

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name.removesuffix(".input.py") for p in GOLDEN.glob("*.input.py"))
UPDATE = os.environ.get("SPMD_MIGRATE_UPDATE_GOLDEN") == "1"


def case_args(case: str) -> list[str]:
    args_file = GOLDEN / f"{case}.args"
    return args_file.read_text().splitlines() if args_file.exists() else []


def place(case: str, root: Path) -> Path:
    target = root / "megatron" / "core" / "tensor_parallel" / f"{case}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((GOLDEN / f"{case}.input.py").read_bytes())
    return target


def migrate(args: list[str]) -> tuple[int, str, list[str]]:
    """Exit code, stdout, and the stderr report lines (the summary line dropped)."""
    out, err = io.StringIO(), io.StringIO()
    code = run(args, stdout=out, stderr=err)
    lines = [line for line in err.getvalue().splitlines() if not line.startswith("migrate: ")]
    return code, out.getvalue(), lines


def without_path(lines: list[str], path: Path) -> list[str]:
    prefix = f"{path}:"
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix):] for line in lines]


def check_golden(expected_file: Path, actual: str) -> None:
    if UPDATE:
        expected_file.write_text(actual)
    assert expected_file.exists(), f"missing {expected_file.name}: run with SPMD_MIGRATE_UPDATE_GOLDEN=1"
    assert actual == expected_file.read_text()


@pytest.mark.parametrize("case", CASES)
def test_golden_rewrite(case: str, tmp_path: Path) -> None:
    path = place(case, tmp_path)
    code, stdout, report = migrate([*case_args(case), str(path)])
    assert code == 0
    assert stdout == ""
    migrated = path.read_text()
    ast.parse(migrated)
    check_golden(GOLDEN / f"{case}.expected.py", migrated)
    check_golden(GOLDEN / f"{case}.report", "".join(f"{line}\n" for line in without_path(report, path)))


@pytest.mark.parametrize("case", CASES)
def test_golden_is_idempotent(case: str, tmp_path: Path) -> None:
    path = place(case, tmp_path)
    path.write_bytes((GOLDEN / f"{case}.expected.py").read_bytes())
    code, stdout, report = migrate(["--diff", *case_args(case), str(path)])
    assert code == 0
    assert stdout == "", "a second run would change the file"
    # What is still reported the first time (calls left alone) is reported again, nothing new.
    first = [line for line in (GOLDEN / f"{case}.report").read_text().splitlines() if "not migrated" in line]
    again = [line for line in without_path(report, path) if "not migrated" in line]
    assert len(again) == len(first)


@pytest.mark.parametrize("case", CASES)
def test_golden_diff_writes_nothing(case: str, tmp_path: Path) -> None:
    path = place(case, tmp_path)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    code, stdout, _ = migrate(["--diff", *case_args(case), str(path)])
    assert code == 0
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    expected = (GOLDEN / f"{case}.expected.py").read_text()
    if expected == before.decode():
        assert stdout == ""
        return
    assert stdout.startswith(f"--- a/{path.as_posix().lstrip('/')}\n+++ b/")
    # The diff's new side, read back hunk by hunk, is exactly the migrated text's lines.
    added = [line[1:] for line in stdout.splitlines(keepends=True) if line.startswith("+") and not line.startswith("+++")]
    for line in added:
        assert line in expected.splitlines(keepends=True) or line.rstrip("\n") in expected


def test_every_case_has_its_files() -> None:
    for case in CASES:
        assert (GOLDEN / f"{case}.expected.py").exists(), case
        assert (GOLDEN / f"{case}.report").exists(), case
    known = {f"{c}.{suffix}" for c in CASES for suffix in ("input.py", "expected.py", "report", "args")}
    stray = {p.name for p in GOLDEN.iterdir()} - known
    assert not stray, f"golden files without a case: {stray}"


def test_migrated_code_passes_the_checker(tmp_path: Path) -> None:
    """What migrate writes, the plugin accepts: no spmd-... error in any expected output."""
    import subprocess
    import sys

    package = tmp_path / "migrated" / "tensor_parallel"  # for the relative imports of a case
    package.mkdir(parents=True)
    for directory in (package, package.parent):
        (directory / "__init__.py").write_text("")
    for case in CASES:
        (package / f"{case}.py").write_bytes((GOLDEN / f"{case}.expected.py").read_bytes())
    # A control: the plugin is running, and reports what it should.
    (package / "control.py").write_text(
        "import torch\nfrom spmd import P, Tensor\n\n\n"
        'def f(x: Tensor[P["tp"]]) -> None:\n    torch.relu(x)\n'
    )
    # megatron-core and the cases' own project are not installed: their imports are ignored
    # per module (a global ignore_missing_imports would re-analyse torch, seeded below)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nplugins = spmd_mypy.plugin\nshow_error_codes = True\n"
        f"cache_dir = {tmp_path / '.mypy_cache'}\n"
        "[mypy-megatron.*,myproject.*]\nignore_missing_imports = True\n"
        "[spmd_mypy]\nmesh_axes = tp, model, cp, ep\n"
    )
    seed_mypy_cache(tmp_path / ".mypy_cache")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "migrated"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert "error: INTERNAL ERROR" not in done.stderr + done.stdout
    spmd_errors = [line for line in done.stdout.splitlines() if "[spmd-" in line]
    control = [line for line in spmd_errors if "control.py:6:" in line]
    assert control, f"the plugin did not run: {done.stdout}"
    assert spmd_errors == control, "\n".join(spmd_errors)
    assert "checked" in done.stdout or "Success" in done.stdout, done.stdout + done.stderr
