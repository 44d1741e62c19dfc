"""pyright (and Pylance, which is pyright) sees ``Tensor[...]`` as ``torch.Tensor``: no false errors.

pyright has no plugin API, so the stubs make the public ``spmd.Tensor`` a generic alias of
``torch.Tensor`` (``TypeAliasType``); only mypy with the plugin turns ``Tensor[R["tp"]]`` into
an SPMD type.  Two pyright runs, with the version pinned in the ``test`` extra:

- ``pyright`` at the repository root, as configured by ``[tool.pyright]`` in pyproject.toml:
  zero errors over ``examples/``;
- a small project that sees spmd-mypy laid out as the wheel installs it (the package-dir
  mapping of pyproject.toml, linked into a site directory): ``assert_type(x, torch.Tensor)``
  holds for ``Tensor[R["tp"], V["dp"]]``, ``S[...]``, ``PS[...]`` and an alias, a plain tensor
  is assignable to a typed one and torch methods work on it; one deliberate error (a str
  assigned to an int) proves pyright ran and reports errors.

Skips only when node is not available (the pyright package runs the npm pyright with node; its
first run downloads that npm package, later runs use the cached copy).  Both runs take ~35 s
here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]
PYRIGHT_VERSION = "1.1.414"  # keep equal to the pin in pyproject.toml's `test` extra
TIMEOUT_S = 240

PROBE = '''\
from typing_extensions import assert_type, reveal_type

import torch
import spmd
from spmd import Tensor, R, I, V, P, S, PS

Act = Tensor[V["tp"]]


def f(x: Tensor[R["tp"], V["dp"]], w: Tensor[S[0, "tp"]], g: Tensor[PS[None, "tp"], R["dp"]],
      a: Act, plain: torch.Tensor) -> Tensor[P["tp"]]:
    assert_type(x, torch.Tensor)
    assert_type(w, torch.Tensor)
    assert_type(g, torch.Tensor)
    assert_type(a, torch.Tensor)
    reveal_type(x)
    y: Tensor[I["tp"]] = torch.randn(3)
    typed: Tensor[R["dp", "tp"]] = plain
    z = y.matmul(x).relu() + w.T.sum() + typed.mean(dim=0)
    back: torch.Tensor = z
    spmd.reveal(back)
    return torch.relu(spmd.all_reduce(z, "tp", src=P, dst=R))


DELIBERATE: int = "not an int"
'''


def _node_or_skip() -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not available: the pyright package runs the npm pyright with node")


def _pyright(args: list[str], cwd: Path) -> dict:
    """One pyright run with the pinned version; the parsed --outputjson report."""
    _node_or_skip()
    env = dict(os.environ)
    env["PYRIGHT_PYTHON_FORCE_VERSION"] = PYRIGHT_VERSION
    env.pop("PYRIGHT_PYTHON_PYLANCE_VERSION", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, *args],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError as e:  # pragma: no cover - no python?
        pytest.fail(f"cannot run pyright: {e}")
    if "No module named pyright" in proc.stderr:
        pytest.fail("pyright is not installed: pip install -e '.[test]' (it pins pyright)")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright gave no JSON report (exit {proc.returncode})\n"
                    f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    assert report.get("version") == PYRIGHT_VERSION, report.get("version")
    return report


def _show(diags: list[dict]) -> str:
    return "\n".join(
        f"{Path(d.get('file', '?')).name}:{d['range']['start']['line'] + 1}: {d['severity']}: "
        f"{d['message']}" for d in diags)


def test_pinned_version_matches_the_test_extra() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"pyright=={PYRIGHT_VERSION}" in deps["test"]


def test_examples_have_no_pyright_errors() -> None:
    report = _pyright([], cwd=REPO)  # [tool.pyright] in pyproject.toml: include = ["examples"]
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert errors == [], f"{len(errors)} pyright errors over examples/:\n{_show(errors)}"
    checked = report["summary"]["filesAnalyzed"]
    expected = len(list((REPO / "examples").rglob("*.py")))
    assert checked == expected, (checked, expected)


def _wheel_layout(site: Path) -> None:
    """Link the distribution's packages into ``site`` the way the wheel installs them."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in tool["package-dir"].items():
        (site / package).symlink_to(REPO / folder, target_is_directory=True)


def test_pyright_sees_spmd_tensor_as_torch_tensor(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _wheel_layout(site)
    project = tmp_path / "project"
    project.mkdir()
    (project / "probe.py").write_text(PROBE)
    (project / "pyrightconfig.json").write_text(json.dumps(
        {"extraPaths": [str(site)], "pythonVersion": "3.11"}))
    report = _pyright(["probe.py"], cwd=project)
    diags = report["generalDiagnostics"]
    errors = [d for d in diags if d["severity"] == "error"]
    deliberate = PROBE.splitlines().index('DELIBERATE: int = "not an int"') + 1
    assert [d["range"]["start"]["line"] + 1 for d in errors] == [deliberate], _show(diags)
    revealed = [d["message"] for d in diags if d["severity"] == "information"]
    assert len(revealed) == 1 and re.fullmatch(r'Type of "x" is "Tensor"', revealed[0]), revealed
    assert report["summary"]["filesAnalyzed"] == 1
