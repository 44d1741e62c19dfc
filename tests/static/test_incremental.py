"""Incremental runs: a module re-checked only because a dependency changed is re-parsed by
mypy without the plugin's get_additional_deps hook; its string axes must still not give
false ``Name "tp" is not defined`` errors (in signatures, aliases, Callable), and its
boundaries (returns, assignments) must still be spmd-mismatch errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import CONFIG, first_and_warm_runs, run_mypy, write_config  # noqa: E402

A = '''
from spmd import Tensor, R
def helper(x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
    return x
'''
B = '''
from typing import Callable
import torch
from spmd import Tensor, R, I, V, P, S
from a import helper
Act = Tensor[V["tp"]]
Fn = Callable[[Tensor[R["tp"]]], Tensor[S[0, "tp"]]]
def g(x: Tensor[R["tp"]], y: Act, f: Fn, p: Tensor[P["tp"]]) -> Tensor[R["tp"]] | None:
    torch.relu(p)
    return helper(x)
def h(v: Tensor[V["tp"]], w: Tensor[I["tp"]]) -> None:
    with torch.no_grad():  # an I operand without gradient mixes with V
        v * w
def k(p: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
    return p
'''
EXPECTED_B = 'b.py:9: error: Partial on "tp" (p: Tensor[P["tp"]]) cannot go through relu'
# a boundary (plugin/boundaries.py): the rewrite must happen on the re-parse too
EXPECTED_B_RETURN = ('b.py:15: error: the return value p of k is Tensor[P["tp"]] but Tensor[R["tp"]] '
                     'is expected')


def test_dependency_change_keeps_axis_strings_clean(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "a.py").write_text(textwrap.dedent(A))
    (tmp_path / "b.py").write_text(textwrap.dedent(B))
    outputs = [run_mypy(tmp_path, "a.py", "b.py")]
    # change a's interface: b is re-checked because of its dependency, not its own change
    (tmp_path / "a.py").write_text(textwrap.dedent(A) + "def extra() -> int:\n    return 1\n")
    outputs.append(run_mypy(tmp_path, "a.py", "b.py"))
    (tmp_path / "a.py").write_text(textwrap.dedent(A) + "def extra() -> str:\n    return ''\n")
    outputs.append(run_mypy(tmp_path, "a.py", "b.py"))
    for out in outputs:
        assert "name-defined" not in out, out
        assert EXPECTED_B in out, out
        assert EXPECTED_B_RETURN in out, out
        assert out.count("error:") == 2, out


ALIASES = '''
from spmd import R, S, Tensor, V
Sharded = Tensor[S[0, "tp"]]
Varying = Tensor[V["tp"]]
Replicated = Tensor[R["tp"]]
'''
ALIAS_ONLY = '''
from aliases import Replicated, Sharded, Varying
def f(x: Sharded) -> Varying:
    return x
def g(x: Replicated) -> Varying:
    return x
'''
EXPECTED_ALIAS_ONLY = ('user.py:6: error: the return value x of g is Tensor[R["tp"]] but '
                       'Tensor[V["tp"]] is expected')


def test_warm_run_of_an_alias_only_module(tmp_path: Path) -> None:
    """A warm run where the only re-checked module uses imported aliases and calls nothing:
    no hook of the plugin runs before its boundaries are checked, so the error watcher must
    already be on mypy's error store (found from the module table mypy hands the plugin).
    S(0) where V is declared is accepted and R where V is declared is spmd-mismatch, in the
    cold run and in the warm one alike."""
    write_config(tmp_path)
    (tmp_path / "aliases.py").write_text(textwrap.dedent(ALIASES))
    (tmp_path / "user.py").write_text(textwrap.dedent(ALIAS_ONLY))

    cold = run_mypy(tmp_path, "aliases.py", "user.py")
    (tmp_path / "user.py").write_text(textwrap.dedent(ALIAS_ONLY) + "# edited\n")
    warm = run_mypy(tmp_path, "aliases.py", "user.py")
    for out in (cold, warm):
        lines = [line for line in out.splitlines() if ": error:" in line]
        assert len(lines) == 1 and lines[0].startswith(EXPECTED_ALIAS_ONLY), out
        assert lines[0].endswith("[spmd-mismatch]"), out


PARTIAL_A = '''
from functools import partial
import torch.nn.functional as F
act = partial(F.gelu, approximate="tanh")
'''
PARTIAL_B = '''
import spmd
from spmd import Tensor, P, V
from a import act
def f(p: Tensor[P["tp"]], v: Tensor[V["tp"]]) -> None:
    act(p)
    spmd.reveal(act(v))
'''


def test_partial_of_a_torch_op_from_a_cached_module(tmp_path: Path) -> None:
    """``functools.partial(F.gelu, ...)`` made in a module loaded from the cache is typed as
    on the first run (the op's name lives in what mypy caches, not in the callable's
    definition, which the cache drops)."""
    for out in first_and_warm_runs(tmp_path, textwrap.dedent(PARTIAL_A), textwrap.dedent(PARTIAL_B)):
        assert 'b.py:6: error: Partial on "tp" (p: Tensor[P["tp"]]) cannot go through gelu' in out, out
        assert 'b.py:7: note: Revealed type is Tensor[V["tp"]]' in out, out


MODULE_BASE = '''
import torch.nn as nn
class Base(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(h)
'''
MODULE_SUB = '''
import spmd
from spmd import P, PS, Tensor
from a import Base
class Sub(Base):
    def f(self, z: Tensor[PS["dp", None, None]], p: Tensor[PS[None, None], P["tp"]]) -> None:
        spmd.reveal(self.ln(z))
        self.ln(p)
'''


def test_module_constructor_of_another_module_same_verdict_warm(tmp_path: Path) -> None:
    """self.ln(x) on a global tensor, ln built in a base class of another module: that
    class may come from the cache without its body, so its constructor is never read there
    (the layout unknown, the kinds still checked), on a first run and a warm one alike."""
    outputs = first_and_warm_runs(tmp_path, textwrap.dedent(MODULE_BASE), textwrap.dedent(MODULE_SUB))
    for out in outputs:
        assert "b.py:7: note: Revealed type is Tensor\n" in out, out
        assert 'b.py:8: error: Partial on "tp" (p: Tensor[PS[None, None], P["tp"]]) cannot go through layer_norm' in out, out
        assert out.count("error:") == 1, out
    assert outputs[0] == outputs[1]


UPGRADE_MESSAGE = "a non-linear op of a pending sum"


def _plugin_copy(root: Path, reason: str) -> Path:
    """A copy of the plugin package mypy would import here (compiled or not), with the
    reason of a non-linear Partial error reworded: another version of the plugin (the same
    version when ``reason`` is the installed one's)."""
    found = subprocess.run([sys.executable, "-c", "import spmd_mypy, os; print(os.path.dirname(spmd_mypy.__file__))"],
                           cwd=root, capture_output=True, text=True, timeout=120, check=True)
    copy = root.parent / f"plugin-{abs(hash(reason))}"
    shutil.copytree(found.stdout.strip(), copy / "spmd_mypy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    ops = copy / "spmd_mypy" / "engine" / "ops.py"
    assert UPGRADE_MESSAGE in ops.read_text()
    ops.write_text(ops.read_text().replace(UPGRADE_MESSAGE, reason))
    return copy


def test_a_plugin_upgrade_never_replays_an_older_result(tmp_path: Path) -> None:
    """mypy keeps one snapshot of the plugins' versions, rewritten by every run: after an
    upgrade, a run that leaves a module out marks the cache current, and a later run would
    replay that module's results from the older plugin.  The plugin's version is part of
    every module's cached config data, so the module is checked again."""
    project = tmp_path / "project"
    project.mkdir()
    write_config(project)  # the seed is the installed plugin's: the old version's cache
    (project / "a.py").write_text("import torch\nx: int = 1\n")
    (project / "b.py").write_text(textwrap.dedent('''
        import torch
        from spmd import Tensor, P
        def f(p: Tensor[P["tp"]]) -> None:
            torch.relu(p)
    '''))
    old = _plugin_copy(project, UPGRADE_MESSAGE)  # the installed plugin, unchanged
    new = _plugin_copy(project, "the new reason")

    def run(version: Path, *files: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "mypy", *files], cwd=project, capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(version)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
        assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc.stdout

    assert f"relu ({UPGRADE_MESSAGE})" in run(old, "a.py", "b.py")
    assert run(new, "a.py").startswith("Success")  # b left out: the snapshot says "new"
    upgraded = run(new, "a.py", "b.py")
    assert "relu (the new reason)" in upgraded, upgraded
    assert UPGRADE_MESSAGE not in upgraded, upgraded


COLLECTIVE_PARTIAL_A = '''
from functools import partial
import spmd
from spmd import P, R, S
reduce_tp = partial(spmd.all_reduce, axis="tp", src=P, dst=R)
gather_last = partial(spmd.all_gather, axis="tp", src=S(-1), dst=R)
'''
COLLECTIVE_PARTIAL_B = '''
import spmd
from spmd import Tensor, P, V
from a import reduce_tp, gather_last
def f(p: Tensor[P["tp"]], v: Tensor[V["tp"]]) -> None:
    reduce_tp(v)
    spmd.reveal(gather_last(v))
'''


def test_partial_of_a_collective_from_a_cached_module(tmp_path: Path) -> None:
    """``partial(spmd.all_reduce, axis="tp", src=P, dst=R)`` made in a module loaded from the
    cache checks its calls as on the first run (the bound literals live in what mypy caches)."""
    for out in first_and_warm_runs(tmp_path, textwrap.dedent(COLLECTIVE_PARTIAL_A),
                                   textwrap.dedent(COLLECTIVE_PARTIAL_B)):
        assert 'b.py:6: error: all_reduce(v, "tp", src=P, ...) but v is V on "tp"' in out, out
        assert 'b.py:7: note: Revealed type is Tensor[R["tp"]]' in out, out


TYPED_LIB = '''
import torch.nn.functional as F
import spmd
from spmd import P, R, S, Tensor, V
def col(x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
    return F.linear(x, w)
def row(h: Tensor[V["tp"]], w: Tensor[S[1, "tp"]]) -> Tensor[P["tp"]]:
    return spmd.reinterpret(F.linear(h, w), "tp", src=V, dst=P)
'''
PLAIN_LIB = '''
import torch
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2
'''
USES_LIBS = '''
import torch
import torch.nn.functional as F
import spmd
from plainlib import scale
from tplayers import col, row
def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> None:
    h = col(scale(x), w1)
    F.relu(row(h, w2))
    spmd.reveal(h)
'''
LIB_ERRORS = ('app.py:9: error: Partial on "tp"', 'app.py:10: note: Revealed type is Tensor[V["tp"]]')


def _run_with_libs(root: Path, libs: Path, axes: str) -> tuple[str, str]:
    (root / "mypy.ini").write_text(CONFIG.replace("dp, tp", axes))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(libs)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    proc = subprocess.run([sys.executable, "-m", "mypy", "-v", "app.py"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout, proc.stderr


@pytest.mark.parametrize("install_dir", ["site-packages", "dist-packages", "vendored"])
def test_mesh_axes_edit_reanalyses_an_installed_typed_library(tmp_path: Path, install_dir: str) -> None:
    """A team's typed library installed outside the project (site-packages, Debian's
    dist-packages, a directory on the interpreter's path) is read with the config's axes:
    after a mesh_axes edit it is analysed again (before, a site-packages library kept the
    types read with the old axes, and the app's errors were lost), while an installed module
    that never names spmd (torch, a plain library) stays cached (before, anything under
    dist-packages, torch included, was analysed again)."""
    root = tmp_path / "app"
    root.mkdir()
    write_config(root)
    libs = tmp_path / install_dir
    for name, source in (("tplayers", TYPED_LIB), ("plainlib", PLAIN_LIB)):
        (libs / name).mkdir(parents=True)
        (libs / name / "__init__.py").write_text(textwrap.dedent(source))
        (libs / name / "py.typed").write_text("")
    (root / "app.py").write_text(textwrap.dedent(USES_LIBS))
    first, _ = _run_with_libs(root, libs, "dp, model")  # "tp" is no axis: the library untyped
    assert "error:" not in first and 'Revealed type is Tensor\n' in first, first
    edited, log = _run_with_libs(root, libs, "dp, tp")
    for error in LIB_ERRORS:
        assert error in edited, edited
    assert "Metadata abandoned for tplayers: plugin configuration differs" in log, log
    for module in ("plainlib", "torch", "torch.nn.functional"):
        assert f"Metadata abandoned for {module}:" not in log, (module, log[-3000:])
    assert "Metadata fresh for torch:" in log
    again, _ = _run_with_libs(root, libs, "dp, model")
    assert again == first, again
