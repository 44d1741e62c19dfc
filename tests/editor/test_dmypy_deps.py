"""The daemon (dmypy) re-checks a caller when a definition the plugin read for it changes in
another module (plugin/depends.py).

mypy ties ``m(x)`` to ``<Sub.__call__>``, ``Fn.apply(x)`` to ``<Fn.apply>`` and
``self.seq(x)`` to ``<Sequential.__call__>``; the plugin types them from ``forward`` (an
inherited one), ``Fn.forward`` and the forwards of the chain's classes.  Each test starts a
daemon on a two-module project, edits the other module, and expects ``dmypy check`` to report
what a fresh mypy reports (before the fix: "Success", until the caller was touched).

Every edit changes the file's size (a trailing comment when needed): mypy's file watcher
compares the size and the whole second of the mtime, and edits here are faster than a second.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editor_util import Dmypy, diagnostic_lines, mypy  # noqa: E402
from test_dmypy import DAEMON_ARGS, daemon, project  # noqa: E402,F401 - fixtures

pytestmark = pytest.mark.timeout(600)


def edit(path: Path, text: str) -> None:
    """Write ``text``; a same-size edit gets a trailing comment, so the watcher sees it."""
    if path.exists() and len(path.read_bytes()) == len(text.encode()):
        text += "# edited\n"
    path.write_text(text)


def checks_clean(daemon: Dmypy, files: list[str]) -> None:
    got = daemon("check", *files)
    assert got.returncode == 0 and "error" not in got.stdout, got.stdout + daemon.log()


def checks_like_plain(project: Path, daemon: Dmypy, files: list[str]) -> str:
    """``dmypy check`` of ``files``: the diagnostics of plain mypy (its own cache)."""
    got = daemon("check", *files)
    plain = mypy(project, "--cache-dir", str(project / "plain-cache"), *files).stdout
    assert diagnostic_lines(got.stdout) == diagnostic_lines(plain), (
        f"dmypy:\n{got.stdout}\nfresh mypy:\n{plain}" + daemon.log())
    return got.stdout


ROW = '''\
import torch.nn as nn
import spmd
from spmd import I, V, Tensor


class Row(nn.Module):
    def forward(self, h: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        return h
'''
ROW_TAKES_I = ROW.replace('h: Tensor[V["tp"]]', 'h: Tensor[I["tp"]]').replace(
    "return h", 'return spmd.reinterpret(h, "tp", src=I, dst=V)')
ROW_RETURNS_P = ROW.replace('-> Tensor[V["tp"]]', '-> Tensor[P["tp"]]').replace(
    "return h", 'return spmd.reinterpret(h, "tp", src=V, dst=P)').replace("import I,", "import I, P,")
SUB_USER = '''\
from spmd import V, Tensor
from base import Row


class Sub(Row):
    pass


def f(m: Sub, x: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
    return m(x)
'''


def test_dmypy_inherited_forward_edited_in_another_module(project: Path, daemon: Dmypy) -> None:
    """``class Sub(Row): pass`` in use.py, Row.forward edited in base.py: ``m(x)`` with
    ``m: Sub`` is re-checked (each module class's ``<B.forward>`` of its MRO fires its
    ``<C.__call__>``, modules.ModuleCallTyper.class_mro_hook)."""
    files = ["base.py", "use.py"]
    (project / "base.py").write_text(ROW)
    (project / "use.py").write_text(SUB_USER)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    checks_clean(daemon, files)
    edit(project / "base.py", ROW_TAKES_I)  # the parameter: the argument x no longer fits
    out = checks_like_plain(project, daemon, files)
    assert 'use.py:10: error: argument x (parameter "h" of forward)' in out, out
    edit(project / "base.py", ROW)  # back: the error goes
    checks_clean(daemon, files)
    edit(project / "base.py", ROW_RETURNS_P)  # the result only: f's return
    out = checks_like_plain(project, daemon, files)
    assert "use.py:10: error: the return value m(x) of f is" in out, out


FUNCTION = '''\
from typing import Any
import torch
import spmd
from spmd import I, P, R, Tensor


class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return spmd.reinterpret(x, "tp", src=I, dst=R).clone()

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        return spmd.all_reduce(g, "tp", src=P, dst=I)


class Copy2(CopyToTP):
    pass
'''
FUNCTION_RETURNS_I = FUNCTION.replace(
    '-> Tensor[R["tp"]]:\n        return spmd.reinterpret(x, "tp", src=I, dst=R).clone()',
    '-> Tensor[I["tp"]]:\n        return x.clone()').replace(
    'g: Tensor[P["tp"]]', 'g: Tensor[I["tp"]]').replace('spmd.all_reduce(g, "tp", src=P, dst=I)', "g")
APPLY_USER = '''\
import spmd
from spmd import I, R, Tensor
from fn import Copy2, CopyToTP


def f(x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
    r = CopyToTP.apply(x)
    return spmd.reinterpret(r, "tp", src=R, dst=I)


def g(x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
    r = Copy2.apply(x)
    return spmd.reinterpret(r, "tp", src=R, dst=I)
'''


def test_dmypy_autograd_function_forward_edited_in_another_module(project: Path,
                                                                   daemon: Dmypy) -> None:
    """``CopyToTP.apply(x)`` (and a subclass's) is typed by forward: forward's edit in fn.py
    re-checks the callers in use.py (``<B.forward>`` -> ``<Fn.apply>``,
    autograd.AutogradTyper._apply_dependencies)."""
    files = ["fn.py", "use.py"]
    FUNCTION_RETURNS_I.index("return x.clone()")  # the edit applies
    (project / "fn.py").write_text(FUNCTION)
    (project / "use.py").write_text(APPLY_USER)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    checks_clean(daemon, files)
    edit(project / "fn.py", FUNCTION_RETURNS_I)
    out = checks_like_plain(project, daemon, files)
    assert "use.py:8: error: reinterpret(r" in out and "use.py:13: error: reinterpret(r" in out, out


LAYERS = '''\
import torch.nn as nn
import spmd
from spmd import I, R, V, Tensor


class Col(nn.Module):
    def forward(self, x: Tensor[R["tp"]]) -> Tensor[V["tp"]]:
        return spmd.convert(x, "tp", src=R, dst=V)


class Keep(nn.Module):
    def forward(self, x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
        return x


def make_block() -> Col:
    return Col()
'''
LAYERS_COL_RETURNS_I = LAYERS.replace(
    '-> Tensor[V["tp"]]:\n        return spmd.convert(x, "tp", src=R, dst=V)',
    '-> Tensor[I["tp"]]:\n        return spmd.convert(x, "tp", src=R, dst=I)')
LAYERS_BUILDS_KEEP = LAYERS.replace("def make_block() -> Col:\n    return Col()",
                                    "def make_block() -> Keep:\n    return Keep()")
MODEL = '''\
import torch.nn as nn
import layers
from spmd import R, V, Tensor
from layers import Col


class M(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(Col(), nn.GELU())
        self.blocks = nn.ModuleList([layers.make_block() for _ in range(2)])

    def forward(self, x: Tensor[R["tp"]]) -> Tensor[V["tp"]]:
        return self.seq(x)

    def each(self, x: Tensor[R["tp"]]) -> Tensor[V["tp"]]:
        for b in self.blocks:
            y = b(x)
        return y
'''


def test_dmypy_sequential_and_module_list_builders_edited_in_another_module(
        project: Path, daemon: Dmypy) -> None:
    """``self.seq(x)`` runs through the forwards of the classes ``nn.Sequential`` was built
    from, and a ModuleList's item class is make_block's declared result: edits of those in
    layers.py re-check model.py's callers.  The Sequential step failed before
    (modules.sequential_hook now records each member class's ``__call__``,
    depends.depend_on); the ModuleList step held already (mypy re-checks the methods that
    iterate ``self.blocks`` when the builder's signature changes) and stays as a guard."""
    files = ["layers.py", "model.py"]
    (project / "layers.py").write_text(LAYERS)
    (project / "model.py").write_text(MODEL)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    checks_clean(daemon, files)
    edit(project / "layers.py", LAYERS_COL_RETURNS_I)  # Col's result: the chain's result
    out = checks_like_plain(project, daemon, files)
    assert "model.py:14: error: the return value self.seq(x) of forward is" in out, out
    edit(project / "layers.py", LAYERS)
    checks_clean(daemon, files)
    # the items are Keep: R where V is due (make_block is read as layers.make_block: a name
    # imported by `from layers import` would re-check the whole class, mypy's own doing)
    edit(project / "layers.py", LAYERS_BUILDS_KEEP)
    out = checks_like_plain(project, daemon, files)
    assert "model.py:19: error: the return value y of each is" in out, out
