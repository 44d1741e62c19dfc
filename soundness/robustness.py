"""Robustness: the plugin never crashes, and adds nothing to code that does not use it.

Two checks, both through real mypy runs (subprocesses with a deadline):

* :func:`unannotated`: mypy over real unannotated code (megatron-core's sources from the
  PyPI wheel, ``torch.distributed``, ``torch.nn``), once plain and once with the plugin and
  a probe module that uses spmd in the same run (so the plugin is fully active): the
  diagnostics must be identical (the probe's own one error aside) and no run may crash.
  No run sees the project's installed stub packages (:func:`python_without_project_stubs`):
  the stubs a run has are this checkout's, as its ``stubs`` argument says.
* :func:`fuzz_annotations`: random and malformed annotation strings drawn with hypothesis
  (``Tensor[...]``, ``R[...]``, ``S[...]``, ``PS[...]`` and collective ``src``/``dst``/axis
  arguments, in parameter, return, variable, class attribute, ``cast`` and
  ``spmd.declare`` positions), hundreds per mypy run: never an internal error.  A crash is
  narrowed to the one annotation that causes it (the counterexample).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEGATRON_VERSION = "0.19.2"
CACHE = Path(os.environ.get("SPMD_MYPY_TEST_CACHE", Path.home() / ".cache" / "spmd-mypy-tests"))
LINE = re.compile(r"^(?P<loc>.+?:\d+): (?P<sev>error|note): (?P<msg>.*)$")
# a hook that raised is reported as spmd-internal (plugin/guard.py) instead of crashing mypy
CRASH_MARKERS = ("INTERNAL ERROR", "Traceback (most recent call last)", "[spmd-internal]")

PROBE = '''\
import torch
from spmd import P, Tensor


def f(h: Tensor[P["tp"]]) -> None:
    torch.relu(h)
'''


# The project's stub packages: pip-installed, they sit in site-packages, where every mypy run
# would find them whatever ``stubs`` says.
STUB_PACKAGES = ("megatron-stubs", "spmd-stubs")


def _holds_stubs(directory: str | Path) -> bool:
    return any((Path(directory) / name).is_dir() for name in STUB_PACKAGES)


def _env(stubs: str = "spmd") -> dict[str, str]:
    """The environment of a mypy run: ``stubs`` is ``"spmd"`` (this checkout's spmd stubs
    only), ``"all"`` (also its megatron stubs, those the package installs) or ``"none"``.

    The stubs come from this checkout's ``stubs/`` via PYTHONPATH, and only those:
    PYTHONPATH entries that hold a project stub package (another checkout's ``stubs/``) are
    dropped, and the installed ones are hidden by :func:`python_without_project_stubs`.
    """
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    paths = [str(ROOT), str(ROOT / "runtime")]
    if stubs == "all":
        paths.append(str(ROOT / "stubs"))
    elif stubs == "spmd":
        # one folder per checkout: a link left by another checkout would give this plugin
        # another checkout's stubs
        tag = hashlib.sha1(str(ROOT.resolve()).encode()).hexdigest()[:12]
        only = Path(tempfile.gettempdir()) / f"spmd-soundness-stubs-{os.getuid()}-{tag}"
        only.mkdir(exist_ok=True)
        link = only / "spmd-stubs"
        if not link.exists():
            try:
                link.symlink_to(ROOT / "stubs" / "spmd-stubs")
            except FileExistsError:
                pass
        paths.append(str(only))
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not _holds_stubs(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + rest)
    return env


_STUBLESS_PYTHON: list[str] = []


def python_without_project_stubs() -> str:
    """A Python executable (for mypy's ``--python-executable``) that sees this interpreter's
    site-packages without the project's stub packages (``megatron-stubs``, ``spmd-stubs``).

    When spmd-mypy is pip-installed, its stub packages sit in site-packages, and mypy, which
    takes its package search path from the Python executable's ``sys.path`` and
    site-packages, found them in every run, "plain" (stubs="none") included.  On
    megatron-core, ``-p megatron.core`` then resolved to the stub package (mypy checked 3
    source files, and only what they import: 2516 plain diagnostics instead of 4849), and
    the plugin's run differed from that baseline by the stubs' effect, not the plugin's
    (1 added / 2 removed).  So every run gets a virtual environment without system
    site-packages whose own site-packages mirrors this interpreter's (user site first, then
    each site-packages directory; one symbolic link a name, ``.pth`` files too, so that
    their path entries are the same) except the stub packages.  Made once a process (a
    fraction of a second), removed at exit.  From an uninstalled checkout it sees what this
    interpreter sees.
    """
    if _STUBLESS_PYTHON:
        return _STUBLESS_PYTHON[0]
    import atexit
    import shutil
    import site
    import venv

    tmp = tempfile.mkdtemp(prefix="spmd-robust-python-")
    atexit.register(shutil.rmtree, tmp, True)
    home = Path(tmp) / "env"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=os.name != "nt",
                    clear=True).create(home)
    python = home / ("Scripts" if os.name == "nt" else "bin") / Path(sys.executable).name
    if not python.exists():
        python = next(p for p in (home / ("Scripts" if os.name == "nt" else "bin")).iterdir()
                      if p.name.startswith("python"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    where = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                           env=clean, capture_output=True, text=True, check=True, timeout=60)
    mirror = Path(where.stdout.strip())
    sources = site.getsitepackages() if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        sources.insert(0, site.getusersitepackages())
    for src in sources:
        if not os.path.isdir(src) or Path(src).resolve() == mirror.resolve():
            continue
        for entry in sorted(os.listdir(src)):
            target = mirror / entry
            if entry in STUB_PACKAGES or target.exists() or target.is_symlink():
                continue
            target.symlink_to(Path(src) / entry)
    # what mypy will see (its pyinfo's view): no project stub package anywhere on the path
    seen = subprocess.run([str(python), "-c", "import sys; print(repr(sys.path))"],
                          env=clean, capture_output=True, text=True, check=True, timeout=60)
    leaks = [p for p in ast.literal_eval(seen.stdout.strip()) if p and _holds_stubs(p)]
    if leaks:
        raise RuntimeError(f"the project's stub packages are still visible in {leaks}")
    _STUBLESS_PYTHON.append(str(python))
    return str(python)


class MypyRun:
    def __init__(self, returncode: int, output: str, seconds: float, timed_out: bool) -> None:
        self.returncode = returncode
        self.output = output
        self.seconds = seconds
        self.timed_out = timed_out

    @property
    def crashed(self) -> bool:
        """An internal error, a traceback, a timeout, or an exit status mypy never gives
        for errors in the code (2 without its "blocking error" line is a crash too)."""
        return (self.timed_out or self.returncode not in (0, 1, 2)
                or (self.returncode == 2 and not self.blocked)
                or any(m in self.output for m in CRASH_MARKERS))

    @property
    def blocked(self) -> bool:
        """mypy stopped at a blocking error in the code (plain mypy's own, e.g. a call
        inside a list in a type: an "argument constructor"): not a crash, but the rest of
        the module went unchecked."""
        return (self.returncode == 2 and "errors prevented further checking" in self.output
                and not any(m in self.output for m in CRASH_MARKERS))

    def diagnostics(self) -> set[str]:
        return {ln for ln in self.output.splitlines() if LINE.match(ln)}


def mypy(cwd: Path, config_text: str, args: list[str], timeout: float = 900,
         stubs: str = "spmd") -> MypyRun:
    cfg = cwd / f"mypy-{abs(hash(config_text)) % 10**8}.ini"
    cfg.write_text(config_text)
    # mypy itself (and the plugin) run in this interpreter; the code it checks is resolved
    # against site-packages without the installed stub packages
    # (python_without_project_stubs)
    argv = [sys.executable, "-m", "mypy", "--config-file", str(cfg),
            "--python-executable", python_without_project_stubs(), "--show-traceback",
            *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=_env(stubs), capture_output=True, text=True,
                              timeout=timeout)
        return MypyRun(proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0, False)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")
        text = out.decode() if isinstance(out, bytes) else out
        return MypyRun(-1, text, time.perf_counter() - t0, True)


def _config(cache: Path, plugin: bool) -> str:
    text = f"[mypy]\ncache_dir = {cache}\n"
    if plugin:
        text = f"[mypy]\nplugins = spmd_mypy.plugin\ncache_dir = {cache}\n\n[spmd_mypy]\nmesh_axes = dp, tp\n"
    return text


# --------------------------------------------------------------------------------------
# Unannotated code


def megatron_wheel() -> Path:
    """The megatron-core wheel, downloaded once with pip into the test cache (as
    tests/migrate/test_megatron_core.py does)."""
    found = sorted(CACHE.glob(f"megatron_core-{MEGATRON_VERSION}-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", f"megatron-core=={MEGATRON_VERSION}",
                    "-d", str(CACHE), "--retries", "1", "--timeout", "30"],
                   capture_output=True, text=True, timeout=600)
    found = sorted(CACHE.glob(f"megatron_core-{MEGATRON_VERSION}-*.whl"))
    if not found:
        raise FileNotFoundError(f"could not download megatron-core=={MEGATRON_VERSION}")
    return found[0]


def extract_megatron(dest: Path, packages: tuple[str, ...] = ("megatron/core/",)) -> int:
    with zipfile.ZipFile(megatron_wheel()) as wheel:
        members = [n for n in wheel.namelist() if n.startswith(packages) and n.endswith(".py")]
        wheel.extractall(dest, members)
    return len(members)


TARGETS = {
    "torch.distributed": ["-p", "torch.distributed"],
    "torch.nn": ["-p", "torch.nn"],
    "megatron-core": ["-p", "megatron.core"],
    "megatron-core tensor_parallel": ["-p", "megatron.core.tensor_parallel"],
}


def unannotated(target: str, timeout: float = 900) -> dict:
    """Plain mypy vs mypy with the plugin and a spmd probe module: same diagnostics on the
    checked code (diagnostics in the stub files themselves are left out: an installed stub
    package's are never shown).

    For megatron-core a third run adds the megatron stubs the package installs (its mapping
    functions are typed for modules that use SPMD types): what that adds must be nothing too
    (``added_with_megatron_stubs``); what it removes is reported.
    """
    with tempfile.TemporaryDirectory(prefix="spmd-robust-") as tmp:
        root = Path(tmp)
        files = None
        megatron = target.startswith("megatron-core")
        if megatron:
            files = extract_megatron(root)
        (root / "probe.py").write_text(PROBE)
        args = TARGETS[target]
        plain = mypy(root, _config(root / "cache-plain", False), args, timeout, stubs="none")
        plug = mypy(root, _config(root / "cache-plugin", True), [*args, "-m", "probe"], timeout)
        runs = [plain, plug]
        rec: dict = {"target": target, "files": files}
        a, b = _mine(plain.diagnostics()), _mine(plug.diagnostics())
        probe = {d for d in b if d.startswith("probe.py:")}
        rec["plain_diagnostics"] = len(a)
        rec["added"] = sorted(b - probe - a)[:50]
        rec["removed"] = sorted(a - b)[:50]
        rec["probe_ok"] = len(probe) == 1 and "[spmd-partial-nonlinear]" in next(iter(probe))
        if megatron:
            full = mypy(root, _config(root / "cache-full", True), [*args, "-m", "probe"],
                        timeout, stubs="all")
            runs.append(full)
            c = _mine(full.diagnostics())
            # errors only: mypy's install-types hints are notes attached to whichever missing
            # stub package it meets first, which the stub package's resolution reorders
            rec["added_with_megatron_stubs"] = sorted(d for d in c - probe - a if ": error:" in d)[:50]
            rec["removed_with_megatron_stubs"] = sorted(a - c)[:50]
        rec["seconds"] = [round(r.seconds, 1) for r in runs]
        rec["crashes"] = sum(int(r.crashed) for r in runs)
        for r in runs:
            if r.crashed:
                rec["crash_output"] = r.output[-4000:]
        # The megatron stubs may add no error either (unannotated code sees the mapping calls'
        # results untyped); what they remove (megatron's own errors that mypy stops reporting
        # once the stub package is on the path) is printed, not a failure.
        rec["ok"] = (not rec["crashes"] and not rec["added"] and not rec["removed"]
                     and not rec.get("added_with_megatron_stubs") and rec["probe_ok"])
        return rec


def _mine(diags: set[str]) -> set[str]:
    """Leave out diagnostics located in the stub packages (absolute paths into stubs/)."""
    stubs = str(ROOT / "stubs")
    return {d for d in diags if not d.startswith(stubs) and "-stubs/" not in d.split(":")[0]
            # mypy gives this hint once per run, on the first missing import it meets: where
            # depends on the order modules are processed, not on what is reported
            and "running_mypy.html#missing-imports" not in d}


# --------------------------------------------------------------------------------------
# Fuzzed annotations


def _strategy():
    from hypothesis import strategies as st

    names = st.sampled_from([
        "R", "I", "V", "P", "S", "PS", "Shard", "Tensor", "Any", "None", "int", "str", "torch",
        "spmd.R", "spmd.S", "spmd.PS", "spmd.Tensor", "Literal", "Ellipsis", "...", "x", "tp",
        "torch.Tensor", "grad_type", "R.tp", "__class__",
    ])
    atoms = st.one_of(
        names,
        st.sampled_from(['"tp"', '"dp"', '"cp"', '""', '"t p"', "'ep'", '"R"', '"tp,dp"',
                         'b"tp"', 'f"tp"', '"\\u00e9"', '"S(0)"', '"Tensor[R]"']),
        st.integers(-3, 1 << 70).map(str),
        st.sampled_from(["True", "1.5", "-0", "1j", "0x10", "1e400"]),
        st.text(alphabet="RIVPS tdp\"'[](),.:0123456789-*|", min_size=1, max_size=8)
          .map(lambda s: repr(s)),
    )

    def extend(inner):
        args = st.lists(inner, min_size=0, max_size=4)
        return st.one_of(
            st.tuples(names, args).map(lambda t: f"{t[0]}[{', '.join(t[1]) or '()'}]"),
            st.tuples(names, args).map(lambda t: f"{t[0]}[{', '.join(t[1]) or '()'}]"),
            args.map(lambda a: "(" + ", ".join(a) + ("," if len(a) == 1 else "") + ")"),
            args.map(lambda a: "[" + ", ".join(a) + "]"),
            st.tuples(names, args).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]} | {t[1]}"),
            st.tuples(names, inner, inner).map(lambda t: f"{t[0]}[{t[1]}:{t[2]}]"),
        )

    # near-valid entries, so that the analysis gets deep before it meets the fault
    axis = st.sampled_from(['"tp"', '"dp"', '"cp"', '"zz"', '""', "tp", "0", '("dp", "tp")',
                            '("tp",)', "()", "None", '"tp", "tp"'])
    kind = st.sampled_from(["R", "I", "V", "P", "S", "Shard", "PS", "spmd.R", "Tensor", "x"])
    entry = st.one_of(
        st.tuples(kind, st.lists(axis, max_size=3)).map(
            lambda t: f"{t[0]}[{', '.join(t[1]) or '()'}]"),
        st.tuples(st.integers(-2, 5), st.lists(axis, max_size=2)).map(
            lambda t: f"S[{', '.join([str(t[0]), *t[1]])}]"),
        st.lists(axis, min_size=0, max_size=4).map(lambda a: f"PS[{', '.join(a) or '()'}]"),
        st.sampled_from(["S(0)", "S(-1)", "S('tp')", "R()", "Literal['tp']", "R['tp'][0]"]),
    )
    near = st.lists(entry, min_size=1, max_size=4).map(", ".join)
    atoms = st.one_of(atoms, near, near, near)

    return st.recursive(atoms, extend, max_leaves=8)


def _wrap(kind: int, fuzz: str) -> str:
    return [
        f"Tensor[{fuzz}]", f"Tensor[R[{fuzz}]]", f"Tensor[PS[{fuzz}]]", f"Tensor[S[{fuzz}]]",
        f"Tensor[V[{fuzz}], PS[{fuzz}]]", f"R[{fuzz}]", f"PS[{fuzz}]", f"Tensor[I[{fuzz}], {fuzz}]",
        f"spmd.Tensor[P[{fuzz}]]", f"grad_type[Tensor[{fuzz}]]",
    ][kind % 10]


HEADER = """\
from typing import Any, Literal, cast
import torch
import spmd
from spmd import I, P, PS, R, S, Shard, Tensor, V, grad_type
x = torch.zeros(2)
"""


def _snippet(i: int, fuzz: str) -> list[str]:
    """One fuzzed string in several positions; each snippet parses on its own."""
    ann = _wrap(i, fuzz)
    k = i % 6
    if k == 0:
        return [f"def f{i}(a: {ann}) -> {ann}:", "    return a"]
    if k == 1:
        return [f"v{i}: {ann} = x"]
    if k == 2:
        return [f"c{i} = cast({ann}, x)", f"d{i} = spmd.declare(x, {ann})"]
    if k == 3:
        return [f"class K{i}:", f"    a: {ann}", f"    def m(self, b: {ann}) -> None:",
                "        self.a = b + b"]
    if k == 4:
        return [f"r{i} = spmd.all_reduce(x, {fuzz}, src={fuzz}, dst={fuzz})",
                f"q{i} = spmd.convert(x, \"tp\", src=R, dst={fuzz})"]
    return [f"def g{i}(a: {ann}, b: Tensor[R[\"tp\"]]) -> None:",
            f"    y: {ann} = a * b", "    spmd.reveal(y)", "    y.sum().backward()"]


def _parses(lines: list[str]) -> bool:
    try:
        ast.parse("\n".join(lines))
        return True
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        return False


def draw(n: int, seed: int) -> list[str]:
    """``n`` fuzzed annotation strings from hypothesis (deterministic for a seed)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    out: list[str] = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(_strategy())
    def collect(s: str) -> None:
        out.append(s)

    collect()
    return out


def _module(fuzzes: list[tuple[int, str]]) -> tuple[str, int, dict[int, tuple[int, int]]]:
    """The module of a batch, how many snippets it holds, and each one's line span."""
    lines = HEADER.splitlines()
    used = 0
    spans: dict[int, tuple[int, int]] = {}
    for i, fz in fuzzes:
        snip = _snippet(i, fz)
        if _parses(HEADER.splitlines() + snip):
            spans[i] = (len(lines) + 1, len(lines) + len(snip))
            lines += snip
            used += 1
    return "\n".join(lines) + "\n", used, spans


BLOCKING = re.compile(r"^fz\.py:(\d+): error:")


def fuzz_annotations(n: int = 400, seed: int = 0, per_run: int = 400, timeout: float = 600,
                     cache: Path | None = None) -> dict:
    """Never an internal error: ``n`` fuzzed annotations, ``per_run`` per mypy run.

    A run that stops at a blocking error of plain mypy (not the plugin's: checked with plain
    mypy too) drops the snippets on the reported lines and runs again, so that every other
    snippet is really checked; those snippets are counted as ``blocked``.
    """
    fuzzes = draw(n, seed)
    rec: dict = {"drawn": len(fuzzes), "checked": 0, "runs": 0, "crashes": 0, "blocked": 0,
                 "blocked_by_plugin": 0, "counterexamples": [], "seconds": 0.0}
    with tempfile.TemporaryDirectory(prefix="spmd-fuzz-ann-") as tmp:
        root = Path(tmp)
        cache_dir = cache or (root / "cache")
        cfg = _config(cache_dir, True)
        plain_cfg = _config(Path(str(cache_dir) + "-plain"), False)
        for start in range(0, len(fuzzes), per_run):
            batch = list(enumerate(fuzzes[start:start + per_run], start))
            for _ in range(20):
                text, used, spans = _module(batch)
                (root / "fz.py").write_text(text)
                run = mypy(root, cfg, ["fz.py"], timeout)
                rec["runs"] += 1
                rec["seconds"] += run.seconds
                if not run.blocked:
                    break
                lines = {int(m.group(1)) for ln in run.output.splitlines()
                         if (m := BLOCKING.match(ln))}
                bad = {i for i, (a, b) in spans.items() if any(a <= ln <= b for ln in lines)}
                if not bad:
                    break
                # the same snippets alone, without the plugin: plain mypy must block too
                (root / "fz.py").write_text(_module([b for b in batch if b[0] in bad])[0])
                plain = mypy(root, plain_cfg, ["fz.py"], timeout, stubs="spmd")
                if not plain.blocked:
                    rec["blocked_by_plugin"] += len(bad)
                    rec["counterexamples"].append(
                        {"module": _module([b for b in batch if b[0] in bad])[0],
                         "output_tail": ["blocking error with the plugin only:"]
                         + run.output.splitlines()[-8:]})
                rec["blocked"] += len(bad)
                batch = [b for b in batch if b[0] not in bad]
            rec["checked"] += used if not run.blocked else 0
            if run.crashed:
                rec["crashes"] += 1
                rec["counterexamples"].append(_narrow(root, cfg, batch, timeout, run.output))
    rec["seconds"] = round(rec["seconds"], 1)
    return rec


def _narrow(root: Path, cfg: str, batch: list[tuple[int, str]], timeout: float,
            output: str) -> dict:
    """Bisect a crashing batch down to one snippet (the counterexample)."""
    cur = batch
    while len(cur) > 1:
        half = cur[: len(cur) // 2]
        text = _module(half)[0]
        (root / "fz.py").write_text(text)
        if mypy(root, cfg, ["fz.py"], timeout).crashed:
            cur = half
            continue
        rest = cur[len(cur) // 2:]
        text = _module(rest)[0]
        (root / "fz.py").write_text(text)
        if mypy(root, cfg, ["fz.py"], timeout).crashed:
            cur = rest
            continue
        break  # needs snippets from both halves
    text = _module(cur)[0]
    (root / "fz.py").write_text(text)
    output = mypy(root, cfg, ["fz.py"], timeout).output if len(cur) == 1 else output
    tail = [ln for ln in output.splitlines() if ln.strip()][-25:]
    return {"module": text if len(cur) == 1 else f"{len(cur)} snippets", "output_tail": tail}
