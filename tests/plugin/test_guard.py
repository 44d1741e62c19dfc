"""A hook that raises never crashes mypy (spmd_mypy/plugin/guard.py): the run goes on, the
expression gets ``spmd-internal`` with the exception, the rest of the file is checked.

The fault is injected into the plugin's sources (a wrapper plugin patches hook methods to
raise) in a mypy subprocess that imports the checkout's pure-Python plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAULTY_PLUGIN = """
import spmd_mypy.plugin as base
from spmd_mypy.plugin import annotation_hooks, calls, modules

def _boom(self, ctx):
    raise RuntimeError("injected fault")

calls.CallTyper.grad_attribute_hook = _boom          # a check-time attribute hook
calls.CallTyper.relax_signature_hook = _boom         # a signature hook
annotation_hooks.AnnotationHooks.analyze_grad_type = _boom  # an annotation hook

def plugin(version):
    return base.plugin(version)
"""

USER_CODE = """
import spmd
from spmd import Tensor, R, P

def helper(x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
    return x

def f(w: Tensor[R["tp"]], p: Tensor[P["tp"]], g: spmd.grad_type[Tensor[R["tp"]]]) -> None:
    grad = w.grad
    helper(w)
    y = p + w
    spmd.reveal(w)
"""


def test_a_failing_hook_is_an_error_at_its_line_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "faulty_plugin.py").write_text(FAULTY_PLUGIN)
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_CODE))
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nplugins = faulty_plugin\n[spmd_mypy]\nmesh_axes = dp, tp\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), str(ROOT / "stubs")])
    proc = subprocess.run([sys.executable, "-m", "mypy", "--show-traceback", "user.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert "INTERNAL ERROR" not in out and "Traceback" not in out, out
    assert proc.returncode == 1, out
    internal = [ln for ln in out.splitlines() if ln.endswith("[spmd-internal]")]
    lines = sorted(int(ln.split(":")[1]) for ln in internal)
    # the annotation (line 8), the attribute (9), the call of a user function (10)
    assert lines == [8, 9, 10], out
    assert all("RuntimeError: injected fault" in ln and "bug in spmd-mypy" in ln for ln in internal), out
    # the rest of the file is checked as usual: the P + R error and the reveal
    assert "user.py:11: error: Partial" in out and "[spmd-partial-affine]" in out, out
    assert 'user.py:12: note: Revealed type is Tensor[R["tp"]]' in out, out
    # and the code can be silenced like any other
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_CODE).replace(
        "    grad = w.grad\n", "    grad = w.grad  # type: ignore[spmd-internal]\n"))
    proc = subprocess.run([sys.executable, "-m", "mypy", "user.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "user.py:9:" not in proc.stdout, proc.stdout
