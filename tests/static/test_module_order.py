"""A module's results must not depend on which modules mypy checked before it.

The plugin's promotion of plain ``torch.Tensor`` (gradual typing) is switched per module.  It
used to follow the module only when a hook of the plugin ran, so a module whose first calls
run none (builtin methods, ``torch.cat`` of a list) was checked with the previous module's
setting: false errors when it came first or alone, none after a typed module.  The case files
of tests/plugin run in one mypy process in alphabetical order and could not see this; here
each order is its own process.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

TYPED = '''
import torch
from spmd import Tensor, R
def h(x: Tensor[R["tp"]]) -> None:
    torch.relu(x)
'''
FIRST_CALLS_RUN_NO_HOOK = '''
import torch
import spmd
from spmd import Tensor, R, V
def f(plain: torch.Tensor, a: Tensor[V["tp"]]) -> None:
    d: dict[str, Tensor[R["tp"]]] = {}
    d.update({"a": plain})
    d.setdefault("b", plain)
    outs = []
    outs.append(a)
    spmd.reveal(torch.cat(outs))
'''
REVEALED = 'm.py:11: note: Revealed type is Tensor[V["tp"]]'


@pytest.mark.parametrize("files", [["m.py"], ["a.py", "m.py"], ["m.py", "a.py"]])
def test_results_do_not_depend_on_the_order_of_modules(tmp_path: Path, files: list[str]) -> None:
    write_config(tmp_path)
    (tmp_path / "a.py").write_text(textwrap.dedent(TYPED))
    (tmp_path / "m.py").write_text(textwrap.dedent(FIRST_CALLS_RUN_NO_HOOK))
    out = run_mypy(tmp_path, *files)
    lines = [line for line in out.splitlines() if line.startswith("m.py")]
    assert lines == [REVEALED], out
