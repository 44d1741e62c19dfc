"""The pre-commit hooks and the snippets of docs/ci.md are well-formed and call real commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from spmd_mypy.migrate import build_parser

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / ".pre-commit-hooks.yaml"
CI_DOC = ROOT / "docs" / "ci.md"


def test_pre_commit_hooks() -> None:
    hooks = {hook["id"]: hook for hook in yaml.safe_load(HOOKS.read_text())}
    assert hooks["spmd-mypy"]["entry"] == "spmd-mypy check"
    assert hooks["spmd-migrate"]["entry"].startswith("spmd-mypy migrate --diff")
    for hook in hooks.values():
        assert {"id", "name", "entry", "language"} <= hook.keys()
        command = shlex.split(hook["entry"])
        assert command[0] == "spmd-mypy" and command[1] in ("check", "migrate")
        if command[1] == "migrate":  # pre-commit appends the file names
            build_parser().parse_args([*command[2:], "staged.py"])


def test_ci_doc_snippets_parse() -> None:
    text = CI_DOC.read_text()
    snippets = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(snippets) >= 3
    workflow = yaml.safe_load(snippets[0])
    steps = workflow["jobs"]["spmd-types"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "torch==2.13.0" in runs
    # spmd-mypy is not on PyPI: the job checks out its source and installs that checkout
    assert "pip install spmd-mypy" not in runs
    source = [step["with"]["path"] for step in steps
              if step.get("uses", "").startswith("actions/checkout")
              and "repository" in step.get("with", {})]
    assert len(source) == 1, steps
    assert f"pip install ./{source[0]}" in runs
    assert "spmd-mypy check src/" in runs
    assert any(step.get("with", {}).get("python-version") == "3.11" for step in steps)
    hook_ids = {hook["id"] for hook in yaml.safe_load(HOOKS.read_text())}
    for snippet in snippets[1:]:
        config = yaml.safe_load(snippet)
        for hook in (config.get("repos", [{}])[0].get("hooks", []) if isinstance(config, dict) else config):
            assert hook["id"] in hook_ids
