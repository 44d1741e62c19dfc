"""``spmd-mypy migrate`` on real code: megatron-core's tensor_parallel and transformer packages.

The wheel is fetched once with pip into ``~/.cache/spmd-mypy-tests`` (``SPMD_MYPY_TEST_CACHE``
overrides it).  The test is skipped only when pip cannot reach the network; any other failure to
get the wheel fails it.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from spmd_mypy.migrate import run
from spmd_mypy.migrate.table import MAPPINGS_BY_NAME

VERSION = "0.19.2"
CACHE = Path(os.environ.get("SPMD_MYPY_TEST_CACHE", Path.home() / ".cache" / "spmd-mypy-tests"))
PACKAGES = ("megatron/core/tensor_parallel/", "megatron/core/transformer/")
NETWORK_ERRORS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
)
# The megatron-core setting: every group is passed explicitly (self.tp_group, tp_group, ...).
GROUP_EXPRESSIONS = ["self.tp_group", "tp_group", "self.pg_collection.tp", "cp_group=cp", "self.ep_group=ep"]


def cached_wheel() -> Path | None:
    found = sorted(CACHE.glob(f"megatron_core-{VERSION}-*.whl"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def megatron_wheel() -> Path:
    wheel = cached_wheel()
    if wheel is not None:
        return wheel
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.12", f"megatron-core=={VERSION}", "-d", str(CACHE),
        "--retries", "1", "--timeout", "30",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    wheel = cached_wheel()
    if wheel is not None:
        return wheel
    output = done.stdout + done.stderr
    last = output.strip().splitlines()[-1] if output.strip() else f"exit code {done.returncode}"
    if any(marker in output for marker in NETWORK_ERRORS):
        pytest.skip(f"no network: pip download megatron-core=={VERSION} failed ({last})")
    pytest.fail(f"pip download megatron-core=={VERSION} failed: {last}")


@pytest.fixture()
def megatron_sources(megatron_wheel: Path, tmp_path: Path) -> Path:
    """A copy of the two packages, at megatron/core/... under a temporary directory."""
    with zipfile.ZipFile(megatron_wheel) as wheel:
        members = [n for n in wheel.namelist() if n.startswith(PACKAGES) and n.endswith(".py")]
        wheel.extractall(tmp_path, members)
    assert members, "the wheel has no tensor_parallel/transformer sources"
    return tmp_path / "megatron" / "core"


def mapping_calls(root: Path) -> int:
    """Calls of a function named like a mapping function (``f(...)`` or ``a.b.f(...)``): by ast."""
    found = 0
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                found += name in MAPPINGS_BY_NAME
    return found


def migrate(*args: str) -> tuple[int, str, list[str], dict[str, int]]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(args), stdout=out, stderr=err)
    lines = err.getvalue().splitlines()
    summary = dict((name, int(n)) for n, name in re.findall(r"(\d+) (calls rewritten|not migrated|annotations)", lines[-1]))
    return code, out.getvalue(), lines[:-1], summary


def all_parse(root: Path) -> None:
    for path in root.rglob("*.py"):
        ast.parse(path.read_bytes(), filename=str(path))


@pytest.mark.parametrize(
    "options",
    [[], ["--annotate", *(a for e in GROUP_EXPRESSIONS for a in ("--group-expr", e))]],
    ids=["defaults", "group-exprs-and-annotate"],
)
def test_megatron_core_migrates_every_call_or_reports_it(megatron_sources: Path, options: list[str]) -> None:
    started = time.monotonic()
    found = mapping_calls(megatron_sources)
    assert found > 40  # 61 in 0.19.2

    code, stdout, lines, summary = migrate(*options, str(megatron_sources))
    assert code == 0 and stdout == ""
    not_migrated = [line for line in lines if ": not migrated: " in line]
    assert len(not_migrated) == summary["not migrated"]
    assert summary["calls rewritten"] > 0
    assert summary["calls rewritten"] + summary["not migrated"] == found, "\n".join(lines)
    all_parse(megatron_sources)

    # Idempotent: nothing more to do, the same calls reported again.
    code, stdout, lines_again, summary_again = migrate("--diff", *options, str(megatron_sources))
    assert code == 0 and stdout == ""
    assert summary_again["calls rewritten"] == 0
    assert summary_again["not migrated"] == summary["not migrated"]

    print(
        f"\nmegatron-core {VERSION} {options or 'defaults'}: {found} mapping calls, "
        f"{summary['calls rewritten']} rewritten, {summary['not migrated']} reported, "
        f"{summary.get('annotations', 0)} annotations, {time.monotonic() - started:.1f} s"
    )
