"""Run-equivalence of examples/: every example on 4 gloo ranks (a 2 x 2 ("dp", "tp") mesh, float64)
against its single-process unsharded reference: the loss and every parameter gradient (sharded
gradients gathered) within 1e-10.

All examples run in one 4-rank launch (``python examples/run_all.py``, which starts the ranks with
torchrun's environment); the launch is killed after a timeout instead of hanging, and a failing
rank's traceback is in the assertion message.  The same launch runs each example once more under
``spmd.typecheck()`` (the runtime check mode, parameters declared with their annotated types): a
correct example raises no type error there either.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = ROOT / "examples"
RUN_ALL = EXAMPLES_DIR / "run_all.py"
TOLERANCE = 1e-10
LAUNCH_TIMEOUT_S = 240  # run_all.py kills its ranks after this
OUTER_TIMEOUT_S = LAUNCH_TIMEOUT_S + 30  # and this test kills run_all.py itself

sys.path.insert(0, str(EXAMPLES_DIR))
import _harness  # noqa: E402


def _run(*args: str, timeout: float = OUTER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, str(RUN_ALL), *args], capture_output=True,
                              text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:  # the launcher's own timeout failed to fire
        pytest.fail(f"run_all.py hung for {timeout} s\nstdout:\n{e.stdout!r}\nstderr:\n{e.stderr!r}")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("examples") / "results.json"
    proc = _run("--json", str(out), "--timeout", str(LAUNCH_TIMEOUT_S))
    report = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    if not out.exists():
        pytest.fail("run_all.py wrote no results\n" + report)
    rows = {r["name"]: r for r in json.loads(out.read_text())}
    return {"rows": rows, "report": report, "returncode": proc.returncode}


def test_every_example_file_is_run() -> None:
    files = {p.stem for p in EXAMPLES_DIR.glob("*.py")
             if not p.stem.startswith("_") and p.stem != "run_all"}
    assert files == set(_harness.EXAMPLES)


@pytest.mark.parametrize("name", _harness.EXAMPLES)
def test_example_matches_reference(results: dict[str, Any], name: str) -> None:
    row = results["rows"].get(name)
    assert row is not None, f"{name} did not run\n{results['report']}"
    detail = f"{name}: {row}\n{results['report']}"
    assert not row["errors"], detail
    assert row["params"] > 0, detail
    assert row["loss_diff"] <= TOLERANCE, detail
    assert row["grad_diff"] <= TOLERANCE, detail
    assert row["passed"], detail


@pytest.mark.parametrize("name", _harness.EXAMPLES)
def test_example_passes_runtime_check_mode(results: dict[str, Any], name: str) -> None:
    row = results["rows"].get(name)
    assert row is not None, f"{name} did not run\n{results['report']}"
    assert not row["check_errors"], "\n".join(row["check_errors"])


def test_launch_exit_status(results: dict[str, Any]) -> None:
    expected = 0 if all(r["passed"] and not r["check_errors"]
                        for r in results["rows"].values()) else 1
    assert results["returncode"] == expected, results["report"]


def test_failing_rank_reports_instead_of_hanging() -> None:
    """Rank 1 raises while rank 0 waits for it in a collective: the run fails fast and shows why."""
    start = time.monotonic()
    proc = _run("--only", "broken_example", "--path", str(Path(__file__).parent),
                "--gloo-timeout", "5", "--timeout", str(LAUNCH_TIMEOUT_S))
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "deliberate failure on rank 1" in proc.stderr, proc.stderr
    # ended by the failure (the peers stop at the 5 s gloo timeout, or are killed 20 s after
    # it), not by the launch's deadline
    assert "TIMEOUT after" not in proc.stderr, proc.stderr
    assert elapsed < LAUNCH_TIMEOUT_S, elapsed


def test_check_mode_error_is_that_examples_failure(tmp_path: Path) -> None:
    """The check mode's SpmdTypeError (not a TypeError) in one example is that example's
    typecheck failure, with its message: the next example still runs and the table is
    printed (before, it killed every rank and no table was printed)."""
    out = tmp_path / "results.json"
    proc = _run("--only", "check_error_example", "--only", "tp_mlp", "--path",
                str(Path(__file__).parent), "--json", str(out), "--timeout", str(LAUNCH_TIMEOUT_S))
    report = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 1, report
    assert out.exists(), report
    rows = {r["name"]: r for r in json.loads(out.read_text())}
    bad = rows["check_error_example"]
    assert bad["passed"] and not bad["errors"], report  # it matches its reference
    assert len(bad["check_errors"]) == 1, report
    assert bad["check_errors"][0].startswith("spmd-partial-nonlinear: "), bad["check_errors"]
    assert "through exp" in bad["check_errors"][0], bad["check_errors"]
    assert rows["tp_mlp"]["passed"] and not rows["tp_mlp"]["check_errors"], report
    table = [line.split() for line in proc.stdout.splitlines()]
    assert any(r[:1] == ["check_error_example"] and "spmd-partial-nonlinear" in r
               and r[-1] == "PASS" for r in table), report



def test_no_typecheck_says_skipped_not_ok(tmp_path: Path) -> None:
    """With ``--no-typecheck`` the check mode does not run: the typecheck column says so
    (it printed "ok" before, as if the check mode had passed)."""
    out = tmp_path / "results.json"
    proc = _run("--only", "tp_mlp", "--no-typecheck", "--json", str(out),
                "--timeout", str(LAUNCH_TIMEOUT_S))
    report = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("tp_mlp ")]
    assert len(rows) == 1, report
    assert rows[0][-2:] == ["skipped", "PASS"], report
    (row,) = json.loads(out.read_text())
    assert row["check_status"] == "skipped" and not row["check_errors"], row


def test_only_unknown_name_lists_the_examples() -> None:
    """``--only nosuch`` is refused before any rank starts, naming the valid examples (it
    printed a ModuleNotFoundError traceback from every rank before)."""
    proc = _run("--only", "nosuch", "--only", "tp_mlp", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr, proc.stderr
    assert "no example named nosuch;" in proc.stderr, proc.stderr
    for name in _harness.EXAMPLES:
        assert name in proc.stderr, (name, proc.stderr)
    assert proc.stdout == "", proc.stdout
