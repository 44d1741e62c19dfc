"""Measure what the typed stub changes for real Megatron code: megatron-core's own modules that
call the mapping functions, checked as user code with and without ``megatron-stubs``.

    python tests/megatron_stubs/measure_megatron_core.py [WORKDIR]

Not a test (two cold mypy runs over most of megatron-core, 15 to 60 s in parallel here).  Both
installations hold megatron-core 0.19.2 and spmd-mypy's wheel (megatron_stub_env.py); in the
second the ``megatron-stubs`` package is deleted.  Both runs use the plugin and
``follow_untyped_imports = True`` for megatron, so that megatron-core is analysed from its
source in both (without the stub package and that option it is ``import-untyped``, every name
Any).  The user code is a copy of each module
of megatron-core that calls a mapping function, with its relative imports made absolute, so it
imports megatron from the installed package.  Prints the errors only one of the two runs reports.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_stub_env as stub_env  # noqa: E402

from spmd_mypy.migrate.table import MAPPINGS_BY_NAME  # noqa: E402

_REPORT = re.compile(r"^(.*?):(\d+): (error|note): (.*)$")


def calls_mappings(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            count += name in MAPPINGS_BY_NAME
    return count


def absolute_imports(source: str, package: list[str]) -> str:
    """``from .x import y`` in megatron/core/<pkg> -> ``from megatron.core.<pkg>.x import y``."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
            line = lines[node.lineno - 1]
            lines[node.lineno - 1] = re.sub(r"from\s+\.+[\w.]*\s+import", f"from {module} import", line, count=1)
    return "".join(lines)


def make_corpus(site_packages: Path, out: Path) -> tuple[int, int]:
    files = calls = 0
    core = site_packages / "megatron" / "core"
    for path in sorted(core.rglob("*.py")):
        relative = path.relative_to(site_packages)
        if relative.as_posix() == "megatron/core/tensor_parallel/mappings.py":
            continue
        source = path.read_text()
        n = calls_mappings(ast.parse(source))
        if not n:
            continue
        target = out / ("_".join(relative.parts[2:]))
        target.write_text(absolute_imports(source, list(relative.parts[:-1])))
        files, calls = files + 1, calls + n
    return files, calls


def isolated_python(work: Path) -> Path:
    """A virtualenv seeing this interpreter's site-packages but not the directories that .pth
    files there add (a development checkout's stubs/, which holds megatron-stubs)."""
    root = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    outer = [p for p in dict.fromkeys([*site.getsitepackages(), site.getusersitepackages()]) if os.path.isdir(p)]
    (Path(purelib) / "zz_outer.pth").write_text("".join(f"{p}\n" for p in outer))
    return python


def run(env: stub_env.StubEnv, project: Path, name: str, python: Path) -> subprocess.Popen:
    return stub_env.start_mypy(env, project, ["corpus"], "dp, tp", project / f".cache-{name}",
                               f"{name}.ini", extra=("[mypy-megatron.*]", "follow_untyped_imports = True"),
                               python_executable=python)


def reported(stdout: str) -> set[tuple[str, str, str]]:
    found = set()
    for line in stdout.splitlines():
        m = _REPORT.match(line)
        if m:
            found.add((f"{Path(m.group(1)).name}:{m.group(2)}", m.group(3), m.group(4)))
    return found


def main() -> int:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="megatron-stubs-measure-"))
    wheel = stub_env.load_megatron_core_test_module().cached_wheel()
    if wheel is None:
        print("run tests/migrate/test_megatron_core.py once first: it downloads the megatron-core wheel")
        return 2
    with_stub = stub_env.make_env(work / "with", wheel)
    without_stub = stub_env.make_env(work / "without", wheel, with_stub.project_wheel)
    shutil.rmtree(without_stub.site_dir / "megatron-stubs")
    python = isolated_python(work)
    seen = subprocess.run([str(python), "-c", "import sys; print('\\n'.join(sys.path))"],
                          capture_output=True, text=True, check=True).stdout.split()
    elsewhere = [p for p in seen if (Path(p) / "megatron-stubs").exists()]
    if elsewhere:
        print(f"warning: megatron-stubs is installed in {elsewhere} too: mypy puts every stub package "
              "first, so the run without it is not clean (use an environment without spmd-mypy installed)")
    project = work / "project"
    (project / "corpus").mkdir(parents=True, exist_ok=True)
    files, calls = make_corpus(with_stub.site_dir, project / "corpus")
    started = time.monotonic()
    procs = {"with": run(with_stub, project, "with", python), "without": run(without_stub, project, "without", python)}
    runs = {k: stub_env.finish(p) for k, p in procs.items()}
    for name, done in runs.items():
        if done.returncode not in (0, 1):
            print(f"mypy failed ({name}):\n{done.stdout}{done.stderr}")
            return 1
    outs = {k: done.stdout for k, done in runs.items()}
    elapsed = time.monotonic() - started
    a, b = reported(outs["with"]), reported(outs["without"])
    print(f"corpus: {files} modules of megatron-core {stub_env.load_megatron_core_test_module().VERSION} "
          f"with {calls} mapping calls; mypy {elapsed:.0f} s (two runs in parallel)")
    print(f"errors and notes: {len(a)} with the stub, {len(b)} without")
    for label, only in (("only with the stub", sorted(a - b)), ("only without the stub", sorted(b - a))):
        print(f"\n{label}: {len(only)}")
        for where, severity, message in only:
            print(f"  {where}: {severity}: {message}")
    print(f"\nwork directory: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
