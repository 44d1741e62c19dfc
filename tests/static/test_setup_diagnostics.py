"""spmd-setup: a checked file uses spmd but mypy cannot see the types the checks read (torch
followed with ``follow_imports = skip``, torch missing from the environment mypy runs in, or
``spmd`` resolved to the runtime package instead of its stubs).  Every tensor is then Any
and the mistakes pass without a word; one error says why, once per run, at the first
``import spmd`` / ``from spmd import`` line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import CONFIG, write_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MISTAKES = '''
import torch
import spmd
from spmd import P, R, Tensor
def f(p: Tensor[P["tp"]], r: Tensor[R["tp"]]) -> None:
    torch.relu(p)
    p + r
'''
OTHER = '''
from spmd import P, Tensor
def g(p: Tensor[P["tp"]]) -> Tensor[P["tp"]]:
    return p.relu()
'''


def _project(root: Path, config: str) -> None:
    root.mkdir(exist_ok=True)
    (root / "mypy.ini").write_text(config)
    (root / "a.py").write_text(textwrap.dedent(MISTAKES))
    (root / "b.py").write_text(textwrap.dedent(OTHER))


def _mypy(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "mypy", *args, "a.py", "b.py"], cwd=root,
                          capture_output=True, text=True, timeout=600, env=env)
    out = proc.stdout + proc.stderr
    assert "INTERNAL ERROR" not in out, out
    return proc.stdout


def _setup_errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.endswith("[spmd-setup]")]


def test_torch_followed_with_skip(tmp_path: Path) -> None:
    _project(tmp_path, CONFIG + "[mypy-torch.*]\nfollow_imports = skip\n")
    out = _mypy(tmp_path)
    errors = _setup_errors(out)
    assert len(errors) == 1, out
    assert errors[0].startswith('a.py:3: error: torch is imported with follow_imports = "skip"'), out
    assert 'use follow_imports = "silent" for torch' in errors[0], out
    # silent keeps torch's types: the mistakes are caught, no setup error
    (tmp_path / "mypy.ini").write_text(CONFIG + "[mypy-torch.*]\nfollow_imports = silent\n")
    write_config(tmp_path)  # the seeded cache of torch
    (tmp_path / "mypy.ini").write_text(CONFIG + "[mypy-torch.*]\nfollow_imports = silent\n")
    out = _mypy(tmp_path)
    assert not _setup_errors(out) and "[spmd-partial-nonlinear]" in out, out


_PYPROJECT = """[tool.mypy]
plugins = ["spmd_mypy.plugin"]

[tool.spmd_mypy]
mesh_axes = ["dp", "tp"]
"""
# (config file, its text with torch followed, the same with torch hidden, follow_imports)
_HIDDEN = {
    "ini-skip": ("mypy.ini", CONFIG, CONFIG + "[mypy-torch.*]\nfollow_imports = skip\n", "skip"),
    "ini-error": ("mypy.ini", CONFIG, CONFIG + "[mypy-torch]\nfollow_imports = error\n", "error"),
    "pyproject-skip": ("pyproject.toml", _PYPROJECT, _PYPROJECT + '[[tool.mypy.overrides]]\n'
                       'module = "torch.*"\nfollow_imports = "skip"\n', "skip"),
}


@pytest.mark.parametrize("form", sorted(_HIDDEN))
def test_torch_hidden_on_a_warm_cache(tmp_path: Path, form: str) -> None:
    """torch's follow_imports changed between two runs in one cache: mypy keeps the modules
    that import torch fresh (only torch's section changed), so the second run replayed the
    first one's checks ("Success", nothing checked) instead of the spmd-setup error; and the
    reverse kept the setup error after torch's types came back."""
    name, seen, hidden, follow = _HIDDEN[form]
    _project(tmp_path, CONFIG)
    write_config(tmp_path)  # the seeded cache of torch
    (tmp_path / "mypy.ini").unlink()
    config = tmp_path / name
    config.write_text(seen)
    out = _mypy(tmp_path)
    assert not _setup_errors(out) and "[spmd-partial-nonlinear]" in out, out
    for _ in range(2):  # the change (a.py, b.py from the cache), then a run with no change
        config.write_text(hidden)
        out = _mypy(tmp_path)
        errors = _setup_errors(out)
        assert len(errors) == 1, out
        assert errors[0].startswith(f'a.py:3: error: torch is imported with follow_imports = '
                                    f'"{follow}"'), out
        assert "[spmd-partial" not in out, out
    config.write_text(seen)  # torch's types back: the mistakes again, no setup error
    out = _mypy(tmp_path)
    assert not _setup_errors(out) and "[spmd-partial-nonlinear]" in out, out


def test_torch_missing_with_ignore_missing_imports(tmp_path: Path) -> None:
    """pre-commit's mirrors-mypy runs mypy with --ignore-missing-imports in an environment
    that has no torch unless additional_dependencies names it: the interpreter mypy reads
    packages from here is a fresh venv without torch."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    project = tmp_path / "project"
    _project(project, CONFIG)
    out = _mypy(project, "--ignore-missing-imports", "--python-executable", str(python))
    errors = _setup_errors(out)
    assert len(errors) == 1, out
    assert errors[0].startswith("a.py:3: error: mypy cannot find torch"), out
    assert "additional_dependencies" in errors[0], out


def test_spmd_resolved_to_the_runtime_package(tmp_path: Path) -> None:
    """MYPYPATH names the runtime's directory (or a vendored copy sits on the path): mypy
    reads spmd's runtime package, whose Tensor takes no SPMD arguments."""
    _project(tmp_path, CONFIG)
    write_config(tmp_path)
    out = _mypy(tmp_path, env={**os.environ, "MYPYPATH": str(REPO / "runtime")})
    errors = _setup_errors(out)
    assert len(errors) == 1, out
    assert errors[0].startswith("a.py:3: error: mypy reads spmd from "), out
    assert "the runtime package, not its stubs" in errors[0], out
    # the stubs found: no setup error, the mistakes caught
    out = _mypy(tmp_path)
    assert not _setup_errors(out) and "[spmd-partial-nonlinear]" in out, out


def test_spmd_stubs_not_found() -> None:
    """mypy reads packages from another interpreter (``--python-executable``) that has torch
    but not spmd-mypy: ``import spmd`` is import-not-found (hidden by
    ``--ignore-missing-imports``) and every annotation Any; the spmd-setup error said
    nothing.  (An environment with torch but without spmd-stubs cannot be built here
    without copying torch: the diagnostic is asked with mypy's answers as they come.)"""
    from types import SimpleNamespace

    from mypy.modulefinder import ModuleNotFoundReason
    from mypy.options import Options

    from spmd_mypy.plugin import _setup_problem

    def manager(spmd: object, missing: dict[str, object]) -> object:
        finder = SimpleNamespace(find_module=lambda name: spmd if name == "spmd" else None)
        return SimpleNamespace(find_module_cache=finder, missing_modules=missing)

    no_stubs = _setup_problem(manager(ModuleNotFoundReason.NOT_FOUND, {}), Options())
    assert no_stubs is not None and no_stubs.startswith("mypy cannot find spmd's stubs"), no_stubs
    assert "--python-executable" in no_stubs
    both = _setup_problem(manager(ModuleNotFoundReason.NOT_FOUND, {"torch": 1}), Options())
    assert both is not None and both.startswith("mypy cannot find torch") and "spmd-mypy beside it" in both
    assert _setup_problem(manager("/x/spmd-stubs/__init__.pyi", {}), Options()) is None
