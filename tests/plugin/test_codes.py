"""The engine's error codes as mypy error codes.

- every code of ``spmd_mypy.engine.errors.CODES`` is a registered mypy error code, a sub-code of
  ``spmd`` (so ``# type: ignore[spmd]`` and ``--disable-error-code spmd`` cover all of them);
- mypy accepts the plugin's codes on the command line and in the config file
  (``--disable-error-code spmd-partial-nonlinear``), and disabling one silences exactly that kind;
- every code is exercised by at least one expected-output case (tests/plugin/cases).

The command-line runs check a module against a minimal stand-in for torch's stubs (a few lines
under ``mypy_path``) so they take a second instead of analysing torch: what is tested here is
mypy's handling of the codes, not the rules (the cases run against the real torch; their
``# mypy-module:`` cases disable codes through the config file with real torch).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import mypy.errorcodes
import pytest

import mypy_cases
from spmd_mypy.engine.errors import CODES
from spmd_mypy.plugin.codes import ERROR_CODES, SPMD

# Codes of features this suite does not cover (SPEC sections 5 and 6: autograd Function duality,
# global SPMD); a case using one makes the coverage test below see it.
NOT_IN_THESE_CASES = {"spmd-duality", "spmd-global", "spmd-internal",  # internal: test_guard.py
                      "spmd-setup",  # tests/static/test_setup_diagnostics.py
                      "spmd-random",  # the check mode's only (seeds): tests/runtime/rt_random.py
                      "spmd-mesh"}  # the check mode's only (meshes): tests/runtime/rt_bcast_mesh.py

FAKE_TORCH = {
    "torch/__init__.pyi": """
        from torch._tensor import Tensor as Tensor
        def relu(input: Tensor) -> Tensor: ...
        def exp(input: Tensor) -> Tensor: ...
    """,
    "torch/_tensor.pyi": """
        from typing import Union
        class Tensor:
            def __add__(self, other: Union[Tensor, float]) -> Tensor: ...
            def add(self, other: Union[Tensor, float]) -> Tensor: ...
    """,
    "torch/distributed/__init__.pyi": """
        class ProcessGroup: ...
    """,
    # every torch module the spmd stubs import: one left out is found in the real torch
    # (mypy completes a stub package from site-packages), which then analyses all of torch
    "torch/distributed/device_mesh.pyi": """
        class DeviceMesh: ...
    """,
}

USER_CODE = """\
import torch
import spmd
from spmd import Tensor, R, P

def f(a: Tensor[P["tp"]], b: Tensor[R["tp"]]) -> None:
    torch.relu(a)
    a.add(b)
"""
RELU_LINE = 'main.py:6: error: Partial on "tp" (a: Tensor[P["tp"]]) cannot go through relu'
ADD_LINE = 'main.py:7: error: Partial on "tp" (a: Tensor[P["tp"]]) added to a Replicate value'


def test_every_engine_code_is_a_registered_mypy_code() -> None:
    for code, description in CODES.items():
        registered = mypy.errorcodes.error_codes.get(code)
        assert registered is not None, f"{code} is not registered with mypy"
        assert registered is ERROR_CODES[code]
        assert registered.code == code
        assert registered.description == description
        assert registered.sub_code_of is SPMD, f"{code} is not a sub-code of spmd"


def test_plugin_registers_exactly_the_engine_codes() -> None:
    assert set(ERROR_CODES) == set(CODES)
    assert mypy.errorcodes.error_codes.get("spmd") is SPMD
    spmd_codes = {c for c, ec in mypy.errorcodes.error_codes.items() if ec.sub_code_of is SPMD}
    assert spmd_codes == set(CODES)


def test_every_code_is_named_spmd_something() -> None:
    for code in CODES:
        assert code.startswith("spmd-") and code == code.lower() and " " not in code


def test_every_code_is_exercised_by_a_case() -> None:
    used: set[str] = set()
    for case in mypy_cases.load_cases():
        for e in case.expected:
            if e.message.endswith("]") and "  [" in e.message:
                used.add(e.message.rsplit("  [", 1)[1][:-1])
        for line in case.source.splitlines():
            if "type: ignore[" in line:
                inner = line.split("type: ignore[", 1)[1].split("]", 1)[0]
                used.update(c.strip() for c in inner.split(","))
    missing = set(CODES) - used - NOT_IN_THESE_CASES
    assert not missing, f"codes no case exercises: {sorted(missing)}"


# -- mypy's command line and config file -----------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for rel, text in FAKE_TORCH.items():
        f = tmp_path / "fake_torch" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    (tmp_path / "main.py").write_text(USER_CODE)
    return tmp_path


def _run(project: Path, *flags: str, mypy_lines: tuple[str, ...] = ()) -> tuple[str, int]:
    from mypy import api

    ini = project / "mypy.ini"
    ini.write_text("\n".join([
        "[mypy]", "plugins = spmd_mypy.plugin", f"mypy_path = {project / 'fake_torch'}",
        f"cache_dir = {project / '.mypy_cache'}", *mypy_lines, "",
        "[spmd_mypy]", "mesh_axes = dp, tp", ""]))
    stdout, stderr, status = api.run(["--config-file", str(ini), "--no-error-summary", "--show-traceback",
                                      "--no-color-output", "--no-pretty", *flags, str(project / "main.py")])
    text = stdout + stderr
    assert "INTERNAL ERROR" not in text and "Traceback" not in text, text
    lines = [ln.replace(str(project) + "/", "") for ln in text.splitlines()]
    return "\n".join(lines), status


def test_both_errors_without_flags(project: Path) -> None:
    out, status = _run(project)
    assert RELU_LINE in out and ADD_LINE in out, out
    assert "[spmd-partial-nonlinear]" in out and "[spmd-partial-affine]" in out
    assert status == 1


def test_disable_error_code_on_the_command_line(project: Path) -> None:
    out, status = _run(project, "--disable-error-code", "spmd-partial-nonlinear")
    assert "Invalid error code" not in out, out
    assert RELU_LINE not in out and ADD_LINE in out, out


def test_disable_parent_code_on_the_command_line(project: Path) -> None:
    out, status = _run(project, "--disable-error-code", "spmd")
    assert out.strip() == "" and status == 0, out


def test_enable_one_code_after_disabling_all(project: Path) -> None:
    out, _ = _run(project, "--disable-error-code", "spmd", "--enable-error-code", "spmd-partial-affine")
    assert RELU_LINE not in out and ADD_LINE in out, out


def test_disable_error_code_in_the_config_file(project: Path) -> None:
    out, _ = _run(project, mypy_lines=("disable_error_code = spmd-partial-nonlinear",))
    assert "Invalid error code" not in out, out
    assert RELU_LINE not in out and ADD_LINE in out, out


def test_every_code_accepted_on_the_command_line(project: Path) -> None:
    flags = [arg for code in CODES for arg in ("--disable-error-code", code)]
    out, _ = _run(project, *flags)
    assert "Invalid error code" not in out, out
    assert out.strip() == "", out


def test_the_stand_in_for_torch_keeps_the_real_torch_out(project: Path) -> None:
    # these runs take a second only while mypy reads no module of the real torch
    from mypy import api

    (project / "mypy.ini").write_text(
        f"[mypy]\nplugins = spmd_mypy.plugin\nmypy_path = {project / 'fake_torch'}\n"
        f"incremental = False\n[spmd_mypy]\nmesh_axes = dp, tp\n")
    _, log, _ = api.run(["--config-file", str(project / "mypy.ini"), "-v", str(project / "main.py")])
    read = {ln.split("(", 1)[1].split(")", 1)[0] for ln in log.splitlines() if "Scheduling SCC" in ln}
    torch_modules = {m for scc in read for m in scc.split() if m.split(".")[0] == "torch"}
    fake = {rel.removesuffix("/__init__.pyi").removesuffix(".pyi").replace("/", ".") for rel in FAKE_TORCH}
    assert torch_modules and torch_modules <= fake, sorted(torch_modules - fake)


def test_unknown_spmd_code_rejected(project: Path) -> None:
    out, status = _run(project, "--disable-error-code", "spmd-bogus")
    assert "Invalid error code(s): spmd-bogus" in out, out
    assert status == 2


def test_python_m_spmd_mypy_lists_the_codes() -> None:
    """``python -m spmd_mypy`` is the ``spmd-mypy`` command."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "spmd_mypy", "codes"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {line.split()[0] for line in proc.stdout.splitlines() if line.strip()} >= set(CODES)
