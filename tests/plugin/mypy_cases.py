"""Expected-output cases for the mypy plugin: the file format, and a fast runner.

The format is modelled on mypy's ``test-data/unit/*.test``::

    -- A comment line (ignored).  Lines before the first [case] may hold file-wide
    -- directives (see below) and a [prelude] block prepended to every case.
    [prelude]
    import torch
    import spmd
    from spmd import Tensor, R, I, V, P, S, PS

    [case add_p_r_rejected]
    def f(a: Tensor[P["tp"]], b: Tensor[R["tp"]]) -> None:
        a + b  # E: Partial on "tp" ... in add: ...  [spmd-partial-affine]
        spmd.reveal(a)  # N: Revealed type is Tensor[P["tp"]]

Expected output is written on the line it refers to, as trailing comments: ``# E: message
[code]`` for an error, ``# N: note`` for a note, ``# W: warning`` for a warning; several may
follow each other on one line.  A long message may instead go on its own comment line below
the code line, with a caret: ``# ^E: message  [code]`` (stackable; the caret refers to the
nearest line above that is not such a caret line).  An optional ``[out]`` block at the end of a
case lists further lines as ``LINE: error: message`` (for output that cannot carry a comment),
LINE counted from the case's first code line.  Each case is checked as its own module, the
file's prelude first, so reported line numbers count the prelude.

Directives, as comment lines at the top of a case (or of the file, for every case in it):

    # flags: --warn-unused-ignores        extra mypy command line flags
    # mesh: dp, cp, tp                    [spmd_mypy] mesh_axes (default: dp, tp)
    # spmd: strict = true                 any other [spmd_mypy] option
    # mypy-module: disable_error_code = x a line of this case's own [mypy-<module>] section
    # xfail: reason                       the case is expected to fail (strict)
    # prelude: none                       do not prepend the file's prelude
    # group: NAME                         run in a mypy run of its own (e.g. a syntax error,
                                          which stops mypy before it checks other modules)
    # requires: einops                    the case is skipped (and left out of its group's
                                          run) when that module is not installed

Per-case mypy options go in ``# mypy: ...`` inline comments or ``# mypy-module:``; prefer them to
``# flags:``, which changes torch's cached analysis and so needs a cache (and a cold run, about
half a minute) of its own.

Matching is exact: every reported line (line number, severity, message with its code) must be
expected and every expected line reported.  Lines reported on one source line may come in any
order.

The runner does not spawn one mypy per case.  Cases are grouped by their configuration; each
case becomes its own module in one temporary directory per group, mypy runs once per group (one
subprocess, ``python -m mypy``) with an incremental cache kept across sessions, and the output is
split by module.  If a group run crashes, the group is bisected to find the crashing cases, so
one crash does not hide the other cases' results.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES_DIR = HERE / "cases"

DEFAULT_MESH = "dp, tp"

_CASE_RE = re.compile(r"^\[case ([A-Za-z0-9_]+)\]\s*$")
_SECTION_RE = re.compile(r"^\[(prelude|out)\]\s*$")
_DIRECTIVE_RE = re.compile(r"^#\s*(flags|mesh|spmd|mypy-module|xfail|prelude|group|requires):\s*(.*?)\s*$")
_MARK_RE = re.compile(r"#\s*(\^?)([ENW]):\s?")
_OUT_RE = re.compile(r"^(\d+):\s*(error|note|warning):\s?(.*)$")
_REPORT_RE = re.compile(r"^(.*?):(\d+): (error|note|warning): (.*)$")
_SEVERITY = {"E": "error", "N": "note", "W": "warning"}


# --------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class Config:
    """What a group of cases shares: mypy flags and the [spmd_mypy] section.

    A case's own mypy options go in a ``[mypy-<module>]`` section of the group's config file
    (``# mypy-module:``), so they neither split the group nor touch torch's cached analysis.
    """

    flags: tuple[str, ...] = ()
    mesh: str = DEFAULT_MESH
    spmd: tuple[str, ...] = ()  # extra "key = value" lines of [spmd_mypy]
    group: str = ""  # a separate mypy run with the same options

    def ini(self, cache_dir: str, module_sections: dict[str, tuple[str, ...]]) -> str:
        lines = ["[mypy]", "plugins = spmd_mypy.plugin", f"cache_dir = {cache_dir}", "",
                 "[spmd_mypy]", f"mesh_axes = {self.mesh}", *self.spmd, ""]
        for module, options in module_sections.items():
            lines += [f"[mypy-{module}]", *options, ""]
        return "\n".join(lines)

    def label(self) -> str:
        return "; ".join([f"mesh={self.mesh}", *self.spmd, *self.flags] + ([f"group {self.group}"] if self.group else []))

    def cache_key(self) -> str:
        # The [spmd_mypy] section only invalidates the user's modules (the plugin's
        # report_config_data), so groups that differ only there share a cache; global mypy
        # flags change torch's cached options, so they get a cache of their own.
        text = "\0".join(self.flags)
        return hashlib.sha256(text.encode()).hexdigest()[:12] if text else "default"


@dataclass(frozen=True)
class Expected:
    line: int
    severity: str
    message: str

    def render(self) -> str:
        return f"{self.line}: {self.severity}: {self.message}"


@dataclass
class Case:
    name: str
    file: Path
    first_line: int  # line of the [case] header in the .test file
    source: str  # the module text mypy checks
    expected: list[Expected]
    config: Config
    xfail: str | None = None
    module_options: tuple[str, ...] = ()  # lines of the case's [mypy-<module>] section
    requires: tuple[str, ...] = ()  # modules that must be installed (else skipped)

    @property
    def missing(self) -> str | None:
        """The first required module that is not installed, or None."""
        import importlib
        for m in self.requires:
            try:
                importlib.import_module(m)
            except ImportError:
                return m
        return None

    @property
    def module(self) -> str:
        return f"{self.file.stem}__{self.name}"

    @property
    def id(self) -> str:
        return f"{self.file.stem}::{self.name}"

    def numbered_source(self) -> str:
        return "\n".join(f"{i:3d}  {line}" for i, line in enumerate(self.source.splitlines(), 1))


class CaseFileError(Exception):
    pass


@dataclass
class _Directives:
    flags: list[str] = field(default_factory=list)
    mesh: str | None = None
    spmd: list[str] = field(default_factory=list)
    mypy_module: list[str] = field(default_factory=list)
    xfail: str | None = None
    prelude: bool = True
    group: str = ""
    requires: list[str] = field(default_factory=list)

    def apply(self, key: str, value: str, where: str) -> None:
        if key == "flags":
            self.flags += shlex.split(value)
        elif key == "mesh":
            self.mesh = value
        elif key == "spmd":
            self.spmd.append(value)
        elif key == "mypy-module":
            self.mypy_module.append(value)
        elif key == "xfail":
            self.xfail = value or "expected to fail"
        elif key == "group":
            self.group = value
        elif key == "requires":
            self.requires += value.replace(",", " ").split()
        elif key == "prelude":
            if value not in ("none", "yes"):
                raise CaseFileError(f"{where}: '# prelude:' takes none or yes")
            self.prelude = value == "yes"

    def merged(self, base: _Directives) -> _Directives:
        return _Directives(base.flags + self.flags, self.mesh or base.mesh, base.spmd + self.spmd,
                           base.mypy_module + self.mypy_module, self.xfail or base.xfail,
                           self.prelude and base.prelude, self.group or base.group,
                           base.requires + self.requires)


def _expectations(source: str) -> list[Expected]:
    """The inline ``# E:`` / ``# N:`` / ``# W:`` expectations of a module text."""
    out: list[Expected] = []
    anchor = 0
    for lineno, line in enumerate(source.splitlines(), 1):
        code, comment = _split_comment(line)
        stripped = line.strip()
        caret_line = stripped.startswith("#") and re.match(r"#\s*\^[ENW]:", stripped) is not None
        if not caret_line:
            anchor = lineno
        if comment is None:
            continue
        marks = list(_MARK_RE.finditer(comment))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(comment)
            message = comment[m.end():end].rstrip()
            caret = bool(m.group(1))
            if caret and not caret_line:
                raise CaseFileError(f"line {lineno}: '# ^{m.group(2)}:' must be on a comment line of its own")
            out.append(Expected(anchor if caret else lineno, _SEVERITY[m.group(2)], message))
    return out


def _split_comment(line: str) -> tuple[str, str | None]:
    """(code, the comment from the first expectation marker on) of one source line."""
    m = re.search(r"#\s*\^?[ENW]:", line)
    if m is None:
        return line, None
    return line[: m.start()], line[m.start():]


def parse_file(path: Path) -> list[Case]:
    lines = path.read_text().splitlines()
    file_directives = _Directives()
    prelude: list[str] = []
    cases: list[Case] = []
    i = 0
    # header: comments, directives and an optional [prelude]
    while i < len(lines) and not _CASE_RE.match(lines[i]):
        line = lines[i]
        if _SECTION_RE.match(line) and line.strip() == "[prelude]":
            i += 1
            while i < len(lines) and not _CASE_RE.match(lines[i]) and not lines[i].startswith("--"):
                prelude.append(lines[i])
                i += 1
            continue
        m = _DIRECTIVE_RE.match(line)
        if m:
            file_directives.apply(m.group(1), m.group(2), f"{path.name}:{i + 1}")
        elif line.strip() and not line.startswith("--"):
            raise CaseFileError(f"{path.name}:{i + 1}: text before the first [case]: {line!r}")
        i += 1
    while prelude and not prelude[-1].strip():
        prelude.pop()

    while i < len(lines):
        m = _CASE_RE.match(lines[i])
        if not m:
            raise CaseFileError(f"{path.name}:{i + 1}: expected a [case name] header")
        name, header_line = m.group(1), i + 1
        i += 1
        body: list[str] = []
        out_block: list[str] | None = None
        while i < len(lines) and not _CASE_RE.match(lines[i]):
            if lines[i].strip() == "[out]":
                out_block = []
            elif out_block is not None:
                out_block.append(lines[i])
            elif not lines[i].startswith("--"):
                body.append(lines[i])
            i += 1
        cases.append(_make_case(path, name, header_line, body, out_block, prelude, file_directives))
    return cases


def _make_case(path: Path, name: str, header_line: int, body: list[str], out_block: list[str] | None,
               prelude: list[str], file_directives: _Directives) -> Case:
    directives = _Directives()
    k = 0
    while k < len(body) and (m := _DIRECTIVE_RE.match(body[k])):
        directives.apply(m.group(1), m.group(2), f"{path.name}:{header_line + 1 + k}")
        k += 1
    d = directives.merged(file_directives)
    code = body[k:]
    while code and not code[-1].strip():
        code.pop()
    while code and not code[0].strip():
        code.pop(0)
    if not code:
        raise CaseFileError(f"{path.name}:{header_line}: case {name} has no code")
    # `from __future__` must stay first: put it before the prelude
    future = [c for c in code if c.startswith("from __future__ import")]
    rest = [c for c in code if not c.startswith("from __future__ import")]
    module_lines = future + (prelude if d.prelude else []) + [""] + rest
    source = "\n".join(module_lines) + "\n"
    try:
        expected = _expectations(source)
    except CaseFileError as e:
        raise CaseFileError(f"{path.name}: case {name}: {e}") from None
    for raw in out_block or ():
        if not raw.strip():
            continue
        om = _OUT_RE.match(raw.strip())
        if om is None:
            raise CaseFileError(f"{path.name}: case {name}: bad [out] line {raw!r}")
        # [out] line numbers are relative to the case's code (line 1 = first code line)
        offset = len(future) + (len(prelude) if d.prelude else 0) + 1
        n = int(om.group(1))
        line = n if n <= len(future) else n + offset - len(future)
        expected.append(Expected(line, om.group(2), om.group(3).rstrip()))
    config = Config(tuple(d.flags), d.mesh or DEFAULT_MESH, tuple(d.spmd), d.group)
    return Case(name, path, header_line, source, expected, config, d.xfail, tuple(d.mypy_module),
                tuple(d.requires))


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    cases: list[Case] = []
    for path in sorted(directory.glob("*.test")):
        seen: set[str] = set()
        for case in parse_file(path):
            if case.name in seen:
                raise CaseFileError(f"{path.name}: two cases named {case.name}")
            seen.add(case.name)
            cases.append(case)
    return cases


# --------------------------------------------------------------------------------------
# Running


@dataclass
class Reported:
    line: int
    severity: str
    message: str

    def render(self) -> str:
        return f"{self.line}: {self.severity}: {self.message}"


@dataclass
class GroupResult:
    config: Config
    by_module: dict[str, list[Reported]]
    stray: list[str]  # output that belongs to no case (crashes, errors in other files)
    crashed: dict[str, str]  # module -> crash output, for cases that crash mypy on their own
    exit_status: int
    seconds: float


MYPY_TIMEOUT_S = 600


def _run_mypy(config: Config, files: Sequence[Path], workdir: Path, cache_dir: Path,
              module_sections: dict[str, tuple[str, ...]] | None = None) -> tuple[str, str, int]:
    """One mypy run in a subprocess: mypy exits without tearing down its (large) heap, and a
    crash cannot take the test session with it."""
    ini = workdir / "mypy.ini"
    ini.write_text(config.ini(str(cache_dir), module_sections or {}))
    args = ["--config-file", str(ini), "--no-error-summary", "--show-error-codes", "--no-pretty",
            "--no-color-output", "--show-traceback", "--hide-error-context",
            *config.flags, *map(str, files)]
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "mypy", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=MYPY_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return "", f"mypy timed out after {MYPY_TIMEOUT_S} s\n{e.stdout!r}\n{e.stderr!r}", -1
    return proc.stdout, proc.stderr, proc.returncode


def _crashed(stdout: str, stderr: str, status: int) -> bool:
    text = stdout + stderr
    return "INTERNAL ERROR" in text or "Traceback (most recent call last)" in text or status not in (0, 1, 2)


def _needs_split(stdout: str, stderr: str, status: int) -> bool:
    # status 2: a crash, or a blocking error (a syntax error) that stopped mypy before the other
    # modules were checked; either way the group is run again in halves
    return status == 2 or _crashed(stdout, stderr, status)


def _split(stdout: str, stderr: str, modules: Iterable[str]) -> tuple[dict[str, list[Reported]], list[str]]:
    known = set(modules)
    by_module: dict[str, list[Reported]] = {m: [] for m in known}
    stray: list[str] = []
    for raw in stdout.splitlines() + stderr.splitlines():
        m = _REPORT_RE.match(raw)
        module = Path(m.group(1)).stem if m else None
        if m and module in known:
            by_module[module].append(Reported(int(m.group(2)), m.group(3), m.group(4).rstrip()))
        elif raw.strip():
            stray.append(raw)
    return by_module, stray


def run_group(config: Config, cases: Sequence[Case], workdir: Path, cache_root: Path) -> GroupResult:
    import time

    start = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    cache_dir = cache_root / config.cache_key()
    cache_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for case in cases:
        f = workdir / f"{case.module}.py"
        f.write_text(case.source)
        files[case.module] = f
    sections = {c.module: c.module_options for c in cases if c.module_options}
    stdout, stderr, status = _run_mypy(config, list(files.values()), workdir, cache_dir, sections)
    crashed: dict[str, str] = {}
    if _needs_split(stdout, stderr, status):
        by_module, stray = {}, []
        _bisect(config, list(files), files, workdir, cache_dir, sections, by_module, crashed)
    else:
        by_module, stray = _split(stdout, stderr, files)
    return GroupResult(config, by_module, stray, crashed, status, time.perf_counter() - start)


def _bisect(config: Config, modules: list[str], files: dict[str, Path], workdir: Path, cache_dir: Path,
            sections: dict[str, tuple[str, ...]], by_module: dict[str, list[Reported]],
            crashed: dict[str, str]) -> None:
    stdout, stderr, status = _run_mypy(config, [files[m] for m in modules], workdir, cache_dir, sections)
    if not _needs_split(stdout, stderr, status) or (len(modules) == 1 and not _crashed(stdout, stderr, status)):
        found, _ = _split(stdout, stderr, modules)
        by_module.update(found)
        return
    if len(modules) == 1:
        crashed[modules[0]] = stdout + stderr
        return
    mid = len(modules) // 2
    _bisect(config, modules[:mid], files, workdir, cache_dir, sections, by_module, crashed)
    _bisect(config, modules[mid:], files, workdir, cache_dir, sections, by_module, crashed)


# --------------------------------------------------------------------------------------
# Comparing


def compare(case: Case, result: GroupResult) -> str | None:
    """None if the case's output is exactly as expected, else a readable report."""
    if case.module in result.crashed:
        return (f"mypy CRASHED on case {case.id} ({case.file.name}:{case.first_line})\n\n"
                f"{case.numbered_source()}\n\n{result.crashed[case.module]}")
    actual = result.by_module.get(case.module, [])

    def key(x: Expected | Reported) -> tuple[int, str, str]:
        return (x.line, x.severity, x.message)

    exp_lines = [e.render() for e in sorted(case.expected, key=key)]
    act_lines = [a.render() for a in sorted(actual, key=key)]
    if exp_lines == act_lines:
        return None
    missing = [x for x in exp_lines if x not in act_lines]
    extra = [x for x in act_lines if x not in exp_lines]
    parts = [f"case {case.id} ({case.file.name}:{case.first_line}), config: {result.config.label()}",
             "", case.numbered_source(), ""]
    if missing:
        parts += ["expected but not reported:", *("  - " + x for x in missing), ""]
    if extra:
        parts += ["reported but not expected:", *("  + " + x for x in extra), ""]
    parts += ["diff (expected -> actual):",
              *difflib.unified_diff(exp_lines, act_lines, "expected", "actual", lineterm="", n=2)]
    return "\n".join(parts)


def group_cases(cases: Iterable[Case]) -> dict[Config, list[Case]]:
    groups: dict[Config, list[Case]] = {}
    for c in cases:
        if c.missing is not None:
            continue  # skipped (test_case says why)
        groups.setdefault(c.config, []).append(c)
    return groups
