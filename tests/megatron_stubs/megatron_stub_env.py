"""An environment where megatron-core and spmd-mypy are installed the way users install them,
and a runner for mypy on user code checked against it.

megatron-core 0.19.2 (from the wheel the migrate test caches) and spmd-mypy's own wheel, built
from this checkout, are installed with pip into one directory: so the stubs come from what
pyproject.toml really ships, and ``megatron-stubs`` sits next to ``megatron`` as it does in
site-packages after ``pip install spmd-mypy megatron-core``.  mypy runs with that directory
first on ``PYTHONPATH``: mypy searches the directories of ``sys.path`` and site-packages alike
(its "package path"), so it resolves megatron there exactly as in a site-packages directory,
and finds torch and the rest wherever the running interpreter finds them (a virtualenv made for
the test could not see packages that the outer environment itself adds through ``.pth`` files).

Expected output is written in the case files, on the line it refers to, as trailing comments:
``# N: <note, exact>`` and ``# E: [code] <a part of the message>``; several may follow each
other.  Every line mypy reports for a case file must be expected, and every expectation met.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = HERE / "cases"
MYPY_TIMEOUT_S = 600
# What the project's wheel is built from (pyproject.toml names these).
PROJECT_FILES = ("pyproject.toml", "README.md", "spmd_mypy", "runtime", "stubs")


def load_megatron_core_test_module():
    """tests/migrate/test_megatron_core.py, for its cached megatron-core wheel fixture."""
    path = REPO / "tests" / "migrate" / "test_megatron_core.py"
    spec = importlib.util.spec_from_file_location("_spmd_megatron_core_wheel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------
# The environment


def build_project_wheel(workdir: Path) -> Path:
    """spmd-mypy's wheel, built from a copy of this checkout (the checkout is left untouched)."""
    src = workdir / "src"
    out = workdir / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", "*.egg-info", "build")
    for name in PROJECT_FILES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    out.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("setuptools") is not None:
        command = [sys.executable, "-c",
                   "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])",
                   str(out)]
    else:  # an isolated build fetches setuptools (pyproject's build-system)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)]
    done = subprocess.run(command, cwd=src, capture_output=True, text=True, timeout=600)
    wheels = sorted(out.glob("spmd_mypy-*.whl"))
    if done.returncode != 0 or not wheels:
        output = done.stdout + done.stderr
        if "setuptools" not in " ".join(command) and _is_network_error(output):
            pytest.skip(f"no network: building spmd-mypy's wheel needs setuptools ({output.strip().splitlines()[-1]})")
        pytest.fail(f"building spmd-mypy's wheel failed:\n{output[-3000:]}")
    return wheels[0]


def _is_network_error(output: str) -> bool:
    return any(marker in output for marker in load_megatron_core_test_module().NETWORK_ERRORS)


@dataclass
class StubEnv:
    site_dir: Path  # plays site-packages: megatron, megatron-stubs, spmd_mypy, spmd, spmd-stubs
    project_wheel: Path
    megatron_wheel: Path | None


def make_env(workdir: Path, megatron_wheel: Path | None, project_wheel: Path | None = None) -> StubEnv:
    """spmd-mypy's wheel (built here unless given) and, unless None, megatron-core's, installed
    by pip into one directory."""
    project_wheel = project_wheel or build_project_wheel(workdir / "build")
    site_dir = workdir / "site-packages"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
               "--target", str(site_dir)]
    if megatron_wheel is None:
        command.append(str(project_wheel))
    else:
        # megatron-core 0.19.2 is a cp312 wheel (requires Python >= 3.12): installed as files
        # for mypy to read, whatever the interpreter running the tests.
        python_tag, _, platform_tags = megatron_wheel.name[:-len(".whl")].split("-")[-3:]
        python_version = f"{python_tag[2]}.{python_tag[3:]}"  # cp312 -> 3.12
        command += ["--only-binary=:all:", "--python-version", python_version, "--ignore-requires-python",
                    *(a for p in platform_tags.split(".") for a in ("--platform", p)),
                    str(megatron_wheel), str(project_wheel)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"pip install into the test directory failed:\n{done.stdout}{done.stderr}")
    return StubEnv(site_dir, project_wheel, megatron_wheel)


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {name: z.read(name) for name in z.namelist()}


# --------------------------------------------------------------------------------------
# Running mypy


_REPORT_RE = re.compile(r"^(.*?):(\d+): (error|note): (.*)$")
_CODE_RE = re.compile(r"\s+\[([a-z0-9-]+)\]$")
_MARK_RE = re.compile(r"#\s*([EN]):\s?")


def mypy_config(mesh_axes: str | None, cache_dir: Path, extra: tuple[str, ...] = ()) -> str:
    """A mypy.ini; ``extra`` lines go at the end (``[mypy-<module>]`` sections)."""
    lines = ["[mypy]", f"cache_dir = {cache_dir}"]
    if mesh_axes is not None:
        lines += ["plugins = spmd_mypy.plugin", "", "[spmd_mypy]", f"mesh_axes = {mesh_axes}"]
    return "\n".join([*lines, "", *extra]) + "\n"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def lines_for(self, filename: str) -> list[tuple[int, str, str]]:
        """(line, severity, message) reported for one checked file."""
        found = []
        for line in self.stdout.splitlines():
            m = _REPORT_RE.match(line)
            if m and Path(m.group(1)).name == filename:
                found.append((int(m.group(2)), m.group(3), m.group(4)))
        return found


def start_mypy(env: StubEnv, project: Path, files: list[str], mesh_axes: str | None,
               cache_dir: Path, config_name: str = "mypy.ini", extra: tuple[str, ...] = (),
               python_executable: Path | None = None) -> subprocess.Popen:
    """mypy as users run it, with the test's installation directory first on its path."""
    (project / config_name).write_text(mypy_config(mesh_axes, cache_dir, extra))
    command = [sys.executable, "-m", "mypy", "--config-file", config_name, "--show-traceback", *files]
    if python_executable is not None:
        command[3:3] = ["--python-executable", str(python_executable)]
    environment = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(env.site_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment)


def finish(proc: subprocess.Popen) -> Run:
    stdout, stderr = proc.communicate(timeout=MYPY_TIMEOUT_S)
    run = Run(proc.returncode, stdout, stderr)
    assert "INTERNAL ERROR" not in stdout + stderr and "Traceback" not in stderr, stdout + stderr
    return run


@dataclass(frozen=True)
class Expectation:
    line: int
    severity: str
    code: str | None  # errors: the error code
    text: str  # notes: the exact message; errors: a part of it

    def matches(self, line: int, severity: str, message: str) -> bool:
        if line != self.line or severity != self.severity:
            return False
        if severity == "note":
            return message == self.text
        m = _CODE_RE.search(message)
        return m is not None and m.group(1) == self.code and self.text in message[:m.start()]

    def __str__(self) -> str:
        code = f"[{self.code}] " if self.code else ""
        return f"{self.line}: {self.severity}: {code}{self.text}"


def expectations(source: str) -> list[Expectation]:
    found = []
    for number, line in enumerate(source.splitlines(), start=1):
        marks = list(_MARK_RE.finditer(line))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
            body = line[m.end():end].strip()
            if m.group(1) == "N":
                found.append(Expectation(number, "note", None, body))
            else:
                code_match = re.match(r"\[([a-z0-9-]+)\]\s*(.*)$", body)
                assert code_match, f"line {number}: an error expectation starts with its [code]: {line}"
                found.append(Expectation(number, "error", code_match.group(1), code_match.group(2)))
    return found


def compare(reported: list[tuple[int, str, str]], expected: list[Expectation]) -> list[str]:
    """Differences between what mypy reported and what the file expects ([] when equal)."""
    problems = []
    left = list(expected)
    for line, severity, message in reported:
        hit = next((e for e in left if e.matches(line, severity, message)), None)
        if hit is None:
            problems.append(f"unexpected  {line}: {severity}: {message}")
        else:
            left.remove(hit)
    problems += [f"missing     {e}" for e in left]
    return problems
