"""``pip install -e .`` of spmd-mypy: mypy must find ``spmd`` (its stubs, ``stubs/spmd-stubs``).

setuptools' default editable mode maps packages whose directory differs from their name
(``spmd`` in ``runtime/``, ``spmd-stubs`` in ``stubs/``) with an import hook, which mypy
never runs (it follows only the paths of ``.pth`` files): ``import-not-found`` for spmd.
setup.py makes an editable install a tree of links named by one ``.pth`` path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import write_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP = '''
import torch
from spmd import P, Tensor
def f(p: Tensor[P["tp"]]) -> None:
    torch.relu(p)
'''


def test_editable_install_is_seen_by_mypy(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".mypy_cache", "tests", "bench", "soundness"))
    venv = tmp_path / "venv"  # torch, mypy and setuptools from this interpreter
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=300)
    python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the install gives
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e",
                    str(source)], check=True, timeout=600, env=env, cwd=tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    write_config(project)
    (project / "app.py").write_text(textwrap.dedent(APP))
    proc = subprocess.run([python, "-m", "mypy", "-v", "app.py"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "import-not-found" not in proc.stdout, proc.stdout
    assert "[spmd-partial-nonlinear]" in proc.stdout, proc.stdout
    # spmd read from the checkout's stubs (this interpreter may have another spmd-mypy installed)
    pattern = r"(?:Metadata \w+|Updating mtime) for spmd: file ([^\s,]+)|Parsing (\S+) \(spmd\)"
    read = [a or b for a, b in re.findall(pattern, proc.stderr)]
    assert read and all(os.path.realpath(p) == str((source / "stubs" / "spmd-stubs" / "__init__.pyi").resolve())
                        for p in read), (read, [x for x in proc.stderr.splitlines() if "spmd-stubs" in x])
    # the checkout's sources are what runs: an edit shows without installing again
    found = subprocess.run([python, "-c", "import spmd_mypy.plugin, os; print(os.path.realpath("
                            "spmd_mypy.plugin.__file__))"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=True)
    assert found.stdout.strip() == str((source / "spmd_mypy" / "plugin" / "__init__.py").resolve())
