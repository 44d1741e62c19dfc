"""The benchmarks still run: each in its smoke mode, checked for exit status and its tables.

No figure is checked (a smoke run's are meaningless): these catch a bench broken by a change
elsewhere (a renamed private function, a changed signature, a table that no longer prints).

- ``bench/runtime_overhead.py --smoke``: 2 gloo ranks on 127.0.0.1, every part and variant,
  two rounds of one call (~15 s); ``--only all_to_all``: the subset mode (~10 s).
- ``bench/compare_builds.py --smoke``: one module, one round, the importable plugin as both builds.
- ``bench/overhead_parts.py --smoke``: one module, one round, the plugin's stand-ins
  (bench/plugin_standins.py) and the plugin.
- ``bench/static_overhead.py --smoke``: corpora of 1 and 2 modules, one round, with this
  interpreter's mypy and the installed spmd_mypy (the mypy runs start in the corpus's
  directory, not in the checkout); the cold runs analyse torch (~10-30 s each).

The three static benches share one ``--seed-caches`` directory: a variant's cache is filled
cold once (the static bench's run, first in this file) and copied for the others.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

OPS = ("all_reduce(P,R)", "all_gather(S(0),R)", "reduce_scatter(P,S(0))", "all_to_all(V,V)")
PAIRS = ("typed vs raw", "typed+grad vs raw Function", "raw again vs raw")


def _run(script: str, *args: str, timeout: float) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout
    assert proc.returncode == 0, (f"{script} {' '.join(args)} exited {proc.returncode}\n"
                                  f"--- stdout\n{out[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return out


def _rows(out: str, section: str, end: str) -> list[str]:
    start = out.index(section)
    stop = out.index(end, start)
    return out[start:stop].splitlines()


@pytest.mark.timeout(240)
def test_runtime_overhead_smoke():
    pytest.importorskip("torch")
    out = _run("runtime_overhead.py", "--smoke", timeout=200)
    assert "smoke mode" in out
    part1 = _rows(out, "\n1. typed collective vs the raw", "\n2. MLP training step")
    for size in ("1KB", "1MB", "16MB"):
        for op in OPS:
            for pair in PAIRS:
                assert any(line.split()[:2] == [size, op] and pair in line for line in part1), \
                    (size, op, pair, "\n".join(part1))
    assert any("faults/call" in line for line in part1)
    part2 = _rows(out, "\n2. MLP training step", "\n3. pure per-call overhead")
    for shape in ("1 x 2", "2 x 1"):
        assert any(f"mesh dp x tp = {shape}" in line for line in part2), shape
    for label in ("typed API vs hand-rolled Megatron", "typed vs typed with the copying backward",
                  "check mode vs plain (typed)", "spmd-types 0.3.1 plain vs Megatron",
                  "spmd-types 0.3.1 typecheck() vs its plain"):
        assert sum(label in line for line in part2) == 2, (label, "\n".join(part2))
    part3 = _rows(out, "\n3. pure per-call overhead", "\ntotal ")
    for op in OPS + ("reinterpret(I,R) vs view_as",):
        for pair in PAIRS + ("typed+grad vs raw",):
            assert any(line.strip().startswith(op + " ") and pair in line for line in part3), \
                (op, pair, "\n".join(part3))


@pytest.mark.timeout(120)
def test_runtime_overhead_only():
    pytest.importorskip("torch")
    out = _run("runtime_overhead.py", "--smoke", "--only", "all_to_all", timeout=100)
    part1 = _rows(out, "\n1. typed collective vs the raw", "\n2. MLP training step")
    ops = {line.split()[1] for line in part1 if line.split()[:1] in (["1KB"], ["1MB"], ["16MB"])}
    assert ops == {"all_to_all(V,V)"}, ops
    assert "2. MLP training step: skipped (--only)" in out
    part3 = _rows(out, "\n3. pure per-call overhead", "\ntotal ")
    rows = [line for line in part3 if " vs " in line and not line.strip().startswith("op ")]
    assert rows and {line.split()[0] for line in rows} == {"all_to_all(V,V)"}, "\n".join(part3)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``--seed-caches`` directory for the static benches' smoke runs: the first fills a
    variant's cache cold (torch analysed, ~10-15 s), the later ones start from its copy."""
    return tmp_path_factory.mktemp("bench-seed-caches")


@pytest.mark.timeout(240)
def test_static_overhead_smoke(seeds: Path):
    pytest.importorskip("torch")  # the corpus imports torch: mypy analyses it
    out = _run("static_overhead.py", "--smoke", "--seed-caches", str(seeds), timeout=220)
    for needle in ("spmd-mypy static overhead (smoke run", "filling the caches",
                   "measuring: 1 rounds", "whole run,", "the plugin on the unannotated (plain) corpus",
                   "per module (--timing-stats", "per-module ratios over 2 modules",
                   "all passes (edited run - unedited run, cpu)", "scaling (median cpu s",
                   "marginal cost", "least squares, annotated+plugin", "least squares, plain, no plugin",
                   "per-line cost ratio", "unedited", "total bench time", "summary:"):
        assert needle in out, (needle, out)
    # the corpus type-checks clean with the plugin and without it (a regression in the plugin
    # or the stubs that reports errors on it shows here)
    cold = _rows(out, "filling the caches", "ratio:")
    for variant in ("annotated+plugin", "plain, no plugin", "plain+plugin"):
        line = next(line for line in cold if line.strip().startswith(variant))
        assert "clean" in line and "NOT CLEAN" not in line, line
    assert "the corpus is not clean" not in out, out


def test_static_overhead_reads_callgrinds_count():
    """``--instructions`` reads each run's count from callgrind's summary on stderr (the mode
    itself takes minutes under valgrind: it is not run here)."""
    sys.path.insert(0, str(BENCH))
    try:
        import static_overhead
    finally:
        sys.path.remove(str(BENCH))
    err = ("==2201== Callgrind, a call-graph generating cache profiler\n"
           "==2201== Events    : Ir\n==2201== Collected : 7777779147\n==2201== \n"
           "==2201== I   refs:      7,777,779,147\n")
    assert static_overhead.collected_instructions(err) == 7_777_779_147
    assert static_overhead.collected_instructions("valgrind: command not found\n") is None


def test_edits_in_one_second_are_seen_by_mypy(tmp_path):
    """Two edits of one size within one second: each leaves a whole-second mtime of its own
    (mypy trusts size + whole-second mtime without hashing: the second run would check nothing)."""
    sys.path.insert(0, str(BENCH))
    try:
        import static_overhead
    finally:
        sys.path.remove(str(BENCH))
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    seen = []
    for stamp in (37, 38, 39):
        static_overhead.edit_all(None, [f], stamp)  # type: ignore[arg-type]
        seen.append((f.stat().st_size, int(f.stat().st_mtime)))
    assert len({size for size, _ in seen}) == 1  # the same size each time
    assert len({mtime for _, mtime in seen}) == 3, seen


@pytest.mark.timeout(240)
def test_compare_builds_smoke(seeds: Path):
    """``bench/compare_builds.py --smoke``: one module, one round, the importable plugin as both
    builds (its caches filled, then warm): every step and line of its table.  Its caches
    start from the seeds the static bench's smoke run left (when it ran first: one file)."""
    pytest.importorskip("torch")  # the corpus imports torch: mypy analyses it
    # the new build's cache starts from the base build's (one build: one key), and every
    # cache from the static bench's seeds when it ran first
    seeded = "base build, new build, plain, no plugin" if len(list(seeds.iterdir())) >= 2 \
        else "new build"
    out = _run("compare_builds.py", "--smoke", "--base", "", "--seed-caches", str(seeds), timeout=220)
    assert f"(from --seed-caches, not cold: {seeded})" in out, out
    for needle in ("two plugin builds compared (smoke run", "filling the caches",
                   "measuring: 1 rounds", "per round, ratio to plain mypy", "base build per module",
                   "new build  per module", "new / base, per round: module time",
                   "mean module time: base"):
        assert needle in out, (needle, out)


def test_compare_builds_refuses_a_directory_without_a_build(tmp_path: Path):
    proc = subprocess.run([sys.executable, str(BENCH / "compare_builds.py"), "--base", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no spmd_mypy package there" in proc.stderr, proc.stderr


@pytest.mark.timeout(300)
def test_overhead_parts_smoke(seeds: Path):
    """``bench/overhead_parts.py --smoke``: one module, one round; the stand-ins of
    bench/plugin_standins.py load in mypy (as a path:entry plugin), and the corpus is clean
    under each (a stand-in that leaves mypy's own errors would time error reporting)."""
    pytest.importorskip("torch")  # the corpus imports torch: mypy analyses it
    out = _run("overhead_parts.py", "--smoke", "--seed-caches", str(seeds), timeout=280)
    for needle in ("the per-module overhead in parts (smoke run", "filling the caches",
                   "measuring: 1 rounds", "per module (--timing-stats sum), per round ratio to plain",
                   "mean module time: plain"):
        assert needle in out, (needle, out)
    parts = _rows(out, "per module (--timing-stats sum)", "mean module time")
    for name in ("annotations only", "+ mypy's hook calls", "+ the rules (the plugin)"):
        line = next((line for line in parts if line.strip().startswith(name)), None)
        assert line is not None and " adds " in line, (name, out)
    assert "NOT clean" not in out, out


def test_overhead_parts_refuses_a_directory_without_a_build(tmp_path: Path):
    proc = subprocess.run([sys.executable, str(BENCH / "overhead_parts.py"), "--build", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no spmd_mypy package there" in proc.stderr, proc.stderr
