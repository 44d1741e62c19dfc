"""What the plugin costs mypy: an annotated Megatron-style corpus checked with the plugin,
against the same code with plain ``torch.Tensor`` annotations checked without it.

    python bench/static_overhead.py [--rounds 7] [--workdir DIR] [--seed-caches DIR] [--instructions]
    python bench/static_overhead.py --smoke     # 1- and 2-module corpora, 1 round: every step
                                                # and table, in about a minute (figures meaningless)

The corpus (bench/gen_corpus.py) is generated at 40k lines; the 10k and 20k runs check its
first modules (imports only go to earlier modules, so a prefix is a closed program).

Warm runs, and why: one run per variant first fills mypy's cache (torch analysed once, ~12-30 s here).
Before every measured run each checked corpus file gets a new last line (a comment), so mypy
re-parses and re-checks every corpus module while torch, typeshed and the spmd stubs come from
the cache.  That is the plugin's worst realistic case: the work the plugin adds is proportional
to the user's code, so a cold run (torch re-analysed) would dilute it, and an unchanged warm run
(everything from the cache) would hide it.  A comment changes the file's hash but not its
interface, so the measured work is exactly "check all the user code once".

The plugin's bytecode: mypy runs with PYTHONDONTWRITEBYTECODE removed from its environment, so
an installed plugin's situation (pip compiles it) is measured rather than a recompile of the
plugin's sources on every run (~0.1 s a run on machines that set the variable).

``--instructions`` adds one more warm run of each variant at the main size under valgrind's
callgrind (both at once, ~3-5 min): the number of instructions each executes, and their ratio.
On a shared machine the times above swing by 10-30% from run to run; an instruction count does
not (PYTHONHASHSEED=0), so it is the figure to compare two versions of the plugin by.  It is not
the target's measure (the target is time; the plugin's code runs at fewer instructions per
cycle than mypy's, so the time ratio sits a few points above the instruction ratio).

Runs of the two variants are interleaved (the order flips every round) and each figure is the
median over the rounds.  A third variant, the plain corpus checked with the plugin, shows what
the plugin's hooks cost on code that has no SPMD annotations (main size only).  Wall time and
CPU time (user+sys of the mypy process) are both shown; on a shared machine CPU time is the
steadier of the two.  If the plugin's sources change during the bench (someone editing them),
mypy's cache for the plugin variants is invalidated: such runs are detected and repeated.

Per module: mypy's hidden ``--timing-stats FILE`` option (mypy 2.4.1) writes each module's
time spent reading, parsing and type-checking it (the plugin's call hooks run in type
checking; its annotation hooks run in semantic analysis, which that figure does not include).
The ``all passes`` figure adds semantic analysis: (run with every corpus file edited) minus
(run with no file edited), per variant, i.e. what checking the corpus adds to a run.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_corpus  # noqa: E402

SIZES = (10_000, 20_000, 40_000)
MAIN_SIZE = 20_000
SEED_HELP = ("start each empty cache from a copy of a cache a run of this or another bench left "
             "in DIR for the same config, plugin build and interpreter (torch's analysis is not "
             "redone: the first runs are then not cold); DIR is created and filled as needed")
TARGET_WHOLE = 1.10
TARGET_MODULE = 1.5
RUN_TIMEOUT_S = 600

ANNOTATED_INI = """\
[mypy]
plugins = spmd_mypy.plugin
cache_dir = {cache}

[spmd_mypy]
mesh_axes = dp, tp
"""
PLAIN_INI = """\
[mypy]
cache_dir = {cache}
"""


@dataclass
class Run:
    wall: float
    cpu: float
    modules: dict[str, float]  # corpus module -> seconds (--timing-stats)


@dataclass
class Variant:
    name: str
    root: Path
    config: Path
    runs: dict[tuple[int, str], list[Run]] = field(default_factory=dict)
    uses_plugin: bool = True
    fingerprint: str = ""  # the plugin's sources when this variant's cache was last written

    def files(self, n_modules: int) -> list[Path]:
        pkg = self.root / gen_corpus.PACKAGE
        return [pkg / "__init__.py"] + [pkg / f"mod_{i:03d}.py" for i in range(n_modules)]


def plugin_fingerprint() -> str:
    """A hash of the plugin's sources: if it changes mid-run (someone editing the plugin), the
    plugin's cache key changes too and the next run would silently be a cold one."""
    spec = importlib.util.find_spec("spmd_mypy")
    if spec is None or not spec.submodule_search_locations:
        return ""
    h = hashlib.sha256()
    for base in spec.submodule_search_locations:
        for path in sorted(Path(base).rglob("*.py")):
            h.update(path.read_bytes())
    return h.hexdigest()


def _cache_dir(variant: Variant) -> Path:
    for line in variant.config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cache_dir":
            return Path(value.strip())
    raise ValueError(f"{variant.config}: no cache_dir line")


def _seed_key(variant: Variant, build: str) -> str:
    """What torch's cached analysis depends on: the config without its cache_dir line, the
    plugin build and its sources, the interpreter (mypy checks the rest itself: a seed from
    another mypy or plugin version is re-analysed, as any stale cache)."""
    text = "\n".join(line for line in variant.config.read_text().splitlines()
                     if line.partition("=")[0].strip() != "cache_dir")
    h = hashlib.sha256("\0".join((text, build, sys.executable)).encode())
    if variant.uses_plugin:
        h.update(plugin_fingerprint().encode())
    return h.hexdigest()[:16]


def restore_seed(seeds: Path | None, variant: Variant, build: str = "") -> bool:
    """``--seed-caches``: an empty cache of ``variant`` starts as a copy of the one a run
    with the same key left in ``seeds`` (torch's analysis, ~10-30 s a variant, not redone)."""
    cache = _cache_dir(variant)
    seed = seeds / _seed_key(variant, build) if seeds else None
    if seed is None or not seed.is_dir() or cache.exists():
        return False
    shutil.copytree(seed, cache)
    return True


def keep_seed(seeds: Path | None, variant: Variant, build: str = "") -> None:
    """``--seed-caches``: a copy of ``variant``'s cache, after its first run, for later runs."""
    if seeds is None:
        return
    seed = seeds / _seed_key(variant, build)
    if not seed.exists():
        partial = seeds / f"{seed.name}.partial-{os.getpid()}"
        shutil.copytree(_cache_dir(variant), partial)
        try:
            partial.rename(seed)
        except OSError:  # another run kept one meanwhile
            shutil.rmtree(partial, ignore_errors=True)


def run_mypy(variant: Variant, files: list[Path], stats: Path) -> tuple[Run, str, bool]:
    """One mypy run; the bool says whether it is a valid measurement (mypy ran to the end)."""
    argv = [sys.executable, "-m", "mypy", "--config-file", str(variant.config),
            "--timing-stats", str(stats), *[str(f.relative_to(variant.root)) for f in files]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=variant.root, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=_env())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = proc.stdout + proc.stderr
    valid = proc.returncode in (0, 1) and "INTERNAL ERROR" not in out
    if proc.returncode == 1 and variant.name not in _WARNED:
        _WARNED.add(variant.name)
        print(f"\n  ! {variant.name}: the corpus is not clean (timings still count):\n"
              + _indent(out[-2000:]))
    modules: dict[str, float] = {}
    try:
        for line in stats.read_text().splitlines():
            name, _, us = line.rpartition(" ")
            if name.startswith(gen_corpus.PACKAGE + ".mod_"):
                modules[name] = int(us) / 1e6
    except OSError:
        pass
    return Run(wall, cpu, modules), out, valid


_WARNED: set[str] = set()
_BASE_TEXTS: dict[Path, str] = {}  # each corpus file as generated (the plain corpus serves two variants)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    # PYTHONDONTWRITEBYTECODE (set on some machines and CI images) would make every plugin
    # run recompile the plugin's ~7k lines of Python (~0.1 s a run, ~5% of a 20k-line run):
    # an installed plugin has its bytecode (pip compiles it), so the bench lets Python write
    # it once.  mypy itself is compiled: the plain variant is not affected.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


_LAST_MTIME = [0]  # the whole second the last edit_all stamped on its files


def edit_all(variant: Variant, files: list[Path], stamp: int) -> None:
    """Every file gets a new last line, and a whole-second mtime no earlier edit had: mypy takes
    a file whose size and whole-second mtime match its cache entry as unchanged without hashing
    it, and a variant can run twice in a row (the rounds' order flips) within one second (a
    plain run takes under a second here), with edits of one size ("# bench edit 37" then
    "38"): every module was then fresh, no module time (compare_builds' ZeroDivisionError)."""
    mtime = _LAST_MTIME[0] = max(int(time.time()), _LAST_MTIME[0] + 1)
    for f in files:
        base = _BASE_TEXTS.setdefault(f, f.read_text())
        f.write_text(base + f"# bench edit {stamp}\n")
        os.utime(f, (mtime, mtime))


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="measured rounds per size (default 7)")
    ap.add_argument("--workdir", type=Path, help="keep the corpus and caches here (default: a temp dir)")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each variant's instructions in one warm run at the main size "
                         "(valgrind's callgrind; deterministic where times are noisy)")
    ap.add_argument("--seed-caches", type=Path, metavar="DIR",
                    help=SEED_HELP)
    ap.add_argument("--smoke", action="store_true",
                    help="a smoke run: corpora of 1 and 2 modules, 1 round (unless --rounds): "
                         "every step (cold caches, edited and unedited runs, per-module stats, "
                         "the scaling table) with figures that mean nothing")
    args = ap.parse_args()
    if args.smoke:
        one = gen_corpus.LINES_PER_MODULE
        sizes, main_size = (one, 2 * one), 2 * one
        rounds = args.rounds if "--rounds" in sys.argv else 1
    else:
        sizes, main_size, rounds = SIZES, MAIN_SIZE, args.rounds

    t_start = time.perf_counter()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spmd-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _bench(workdir, rounds, t_start, sizes, main_size, args.smoke, args.instructions,
                      args.seed_caches)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _bench(workdir: Path, rounds: int, t_start: float, all_sizes: tuple[int, ...] = SIZES,
           main_size: int = MAIN_SIZE, smoke: bool = False, instructions: bool = False,
           seeds: Path | None = None) -> int:
    n_max = gen_corpus.modules_for(max(all_sizes))
    corpus = workdir / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    annotated_root, plain_root, _ = gen_corpus.write_corpus(corpus, n_max)
    variants = []
    for name, root, ini in (("annotated+plugin", annotated_root, ANNOTATED_INI),
                            ("plain, no plugin", plain_root, PLAIN_INI)):
        config = root / "mypy.ini"
        config.write_text(ini.format(cache=(workdir / f"cache-{root.name}").as_posix()))
        variants.append(Variant(name, root, config, uses_plugin="plugins" in ini))
    annotated, plain = variants
    # The plain corpus checked WITH the plugin: what the plugin's hooks cost on unannotated code
    # (gradual adoption). Measured at the main size only; it starts from a copy of the
    # annotated variant's cache (same plugin, so torch's analysis is reusable).
    untyped = Variant("plain+plugin", plain_root, plain_root / "mypy-plugin.ini")
    untyped.config.write_text(ANNOTATED_INI.format(cache=(workdir / "cache-plain-plugin").as_posix()))
    sizes = {size: gen_corpus.modules_for(size) for size in all_sizes}
    lines = {size: sum(f.read_text().count("\n") for f in annotated.files(n)) for size, n in sizes.items()}

    print("spmd-mypy static overhead" + (" (smoke run: the figures mean nothing)" if smoke else ""))
    print(f"  python {sys.version.split()[0]}, mypy {_version('mypy')}, torch {_version('torch')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"  corpus: {n_max} modules x ~{gen_corpus.LINES_PER_MODULE} lines (Megatron-style: column/row "
          f"parallel linears, sequence parallel, attention einsums, vocab-parallel CE, dp grads)")
    print("  sizes: " + ", ".join(f"{lines[s]} lines ({n} modules)" for s, n in sizes.items()))
    print()

    # Fill the caches (cold: torch analysed) with the whole corpus, once per variant.
    kept = [v.name for v in variants if _cache_dir(v).exists()]
    seeded = [v.name for v in variants if restore_seed(seeds, v)]
    was_cold = not kept and not seeded
    sources = ([f"{', '.join(kept)} kept from an earlier run in --workdir"] if kept else []) + (
        [f"{', '.join(seeded)} from --seed-caches"] if seeded else [])
    print("filling the caches" + (" (cold runs: torch analysed too; one sample each, for information):"
                                  if was_cold else f" (first runs: {'; '.join(sources)}):"))
    cold: dict[str, Run] = {}
    for v in variants:
        files = v.files(n_max)
        edit_all(v, files, 0)
        v.fingerprint = plugin_fingerprint() if v.uses_plugin else ""
        run, out, valid = run_mypy(v, files, workdir / "stats.txt")
        if not valid:
            print(f"  {v.name}: mypy failed; nothing to measure")
            return 2
        keep_seed(seeds, v)
        cold[v.name] = run
        status = "clean" if "Success" in out else "NOT CLEAN"
        print(f"  {v.name:18s} {run.wall:7.2f} s wall {run.cpu:7.2f} s cpu  ({status})")
    shutil.rmtree(workdir / "cache-plain-plugin", ignore_errors=True)
    shutil.copytree(workdir / f"cache-{annotated.root.name}", workdir / "cache-plain-plugin")
    untyped.fingerprint = plugin_fingerprint()
    run, out, valid = run_mypy(untyped, untyped.files(n_max), workdir / "stats.txt")
    print(f"  {untyped.name:18s} {run.wall:7.2f} s wall {run.cpu:7.2f} s cpu  (torch from the copied cache; "
          f"{'clean' if 'Success' in out else 'NOT CLEAN'})")
    print(f"  {'cold' if was_cold else 'first-run'} ratio: {cold[annotated.name].wall / cold[plain.name].wall:.3f} wall, "
          f"{cold[annotated.name].cpu / cold[plain.name].cpu:.3f} cpu")
    print()

    stamp = 0
    stats = workdir / "stats.txt"
    print(f"measuring: {rounds} rounds, variants interleaved", end="", flush=True)
    def measure(v: Variant, n: int, edit: bool) -> Run | None:
        """One measured run; repeated if the plugin's sources changed (someone editing them):
        mypy's cache for a plugin variant is keyed by the plugin's version, so a run with a
        new version re-analyses torch.  Then one unmeasured run first rebuilds the cache."""
        nonlocal stamp
        files = v.files(n)
        out = ""
        for attempt in range(8):
            before = plugin_fingerprint() if v.uses_plugin else ""
            if before != v.fingerprint:
                print("\n  (the plugin's sources changed: rebuilding the cache, then repeating)", end="")
                run_mypy(v, files, stats)
                v.fingerprint = before
                continue
            if edit:
                stamp += 1
                edit_all(v, files, stamp)
            run, out, valid = run_mypy(v, files, stats)
            after = plugin_fingerprint() if v.uses_plugin else ""
            if valid and after == before:
                return run
            if not valid:
                print("\n  (mypy failed: repeating the run)", end="")
                time.sleep(5)
        print("\n  giving up: mypy keeps failing or the plugin keeps changing\n" + _indent(out[-3000:]))
        return None

    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for size, n in sizes.items():
            for v in order:
                measured = measure(v, n, edit=True)
                if measured is None:
                    return 2
                v.runs.setdefault((size, "edited"), []).append(measured)
            if size == main_size:
                for v in order:  # nothing edited: what a run costs without checking the corpus
                    measured = measure(v, n, edit=False)
                    if measured is None:
                        return 2
                    v.runs.setdefault((size, "unedited"), []).append(measured)
                # last: it edits the plain corpus too (its own cache), so it must not come
                # between the plain variant's edited and unedited runs
                measured = measure(untyped, n, edit=True)
                if measured is None:
                    return 2
                untyped.runs.setdefault((size, "edited"), []).append(measured)
        print(".", end="", flush=True)
    print("\n")

    ok = True

    # ---- whole run at the main size ------------------------------------------------------
    def med(v: Variant, size: int, kind: str, what: str) -> float:
        return median([getattr(run, what) for run in v.runs[(size, kind)]])

    print(f"whole run, {lines[main_size]} lines, every corpus module re-checked (median of {rounds}):")
    for what in ("wall", "cpu"):
        a, p = med(annotated, main_size, "edited", what), med(plain, main_size, "edited", what)
        print(f"  {what:4s}: annotated+plugin {a:6.2f} s   plain {p:6.2f} s   ratio {a / p:.3f}")
    for what in ("wall", "cpu"):
        pairs = [a.__dict__[what] / p.__dict__[what] for a, p in
                 zip(annotated.runs[(main_size, "edited")], plain.runs[(main_size, "edited")])]
        best = (min(r.__dict__[what] for r in annotated.runs[(main_size, "edited")])
                / min(r.__dict__[what] for r in plain.runs[(main_size, "edited")]))
        print(f"  {what:4s}: per-round paired ratios {' '.join(f'{x:.2f}' for x in pairs)} "
              f"(median {median(pairs):.3f}); fastest-run ratio {best:.3f}")
    whole = med(annotated, main_size, "edited", "cpu") / med(plain, main_size, "edited", "cpu")
    whole_wall = med(annotated, main_size, "edited", "wall") / med(plain, main_size, "edited", "wall")
    u = med(untyped, main_size, "edited", "cpu")
    print(f"  the plugin on the unannotated (plain) corpus: {u:.2f} s cpu, ratio {u / med(plain, main_size, 'edited', 'cpu'):.3f} "
          "to plain without the plugin (its hooks on untyped torch calls)")
    verdict = "meets" if max(whole, whole_wall) <= TARGET_WHOLE else "MISSES"
    ok &= verdict == "meets"
    print(f"  -> {verdict} the target <= {TARGET_WHOLE:.2f} (cpu {whole:.3f}, wall {whole_wall:.3f})")
    print()

    # ---- per module ----------------------------------------------------------------------------
    n_main = sizes[main_size]
    names = [f"{gen_corpus.PACKAGE}.mod_{i:03d}" for i in range(n_main)]

    def per_module(v: Variant) -> dict[str, float]:
        runs = v.runs[(main_size, "edited")]
        return {m: median([run.modules.get(m, float("nan")) for run in runs]) for m in names}

    pa, pp = per_module(annotated), per_module(plain)
    ratios = sorted(pa[m] / pp[m] for m in names if pp.get(m))
    total_ratio = sum(pa.values()) / sum(pp.values())
    print(f"per module (--timing-stats: read+parse+type check, median of {rounds} per module):")
    print(f"  mean module: annotated+plugin {1000 * sum(pa.values()) / n_main:6.1f} ms   "
          f"plain {1000 * sum(pp.values()) / n_main:6.1f} ms   ratio {total_ratio:.3f}")
    print(f"  per-module ratios over {len(ratios)} modules: median {median(ratios):.3f}, "
          f"p90 {ratios[int(0.9 * (len(ratios) - 1))]:.3f}, max {ratios[-1]:.3f}")
    attributable = {}
    for v in variants:
        attributable[v.name] = (med(v, main_size, "edited", "cpu") - med(v, main_size, "unedited", "cpu"))
    # (a smoke run's tiny corpus can make the plain difference vanish into the noise)
    all_passes = (attributable[annotated.name] / attributable[plain.name]
                  if attributable[plain.name] > 0 else float("nan"))
    print(f"  all passes (edited run - unedited run, cpu): annotated+plugin "
          f"{1000 * attributable[annotated.name] / n_main:6.1f} ms/module   plain "
          f"{1000 * attributable[plain.name] / n_main:6.1f} ms/module   ratio {all_passes:.3f}")
    worst = max(total_ratio, median(ratios), all_passes)
    verdict = "meets" if worst <= TARGET_MODULE else "MISSES"
    ok &= verdict == "meets"
    print(f"  -> {verdict} the target <= {TARGET_MODULE:.1f} (worst of the three: {worst:.3f})")
    print()

    # ---- scaling -------------------------------------------------------------------------------
    print("scaling (median cpu s; per 1k lines; the module column is the --timing-stats sum):")
    print(f"  {'lines':>6}  {'annotated':>9}  {'plain':>7}  {'ratio':>6}  {'ann/1k':>7}  {'plain/1k':>8}"
          f"  {'ann modules/1k':>14}  {'plain modules/1k':>16}")
    per_k_modules = []
    prev: tuple[int, float, float] | None = None
    increments = []
    for size in all_sizes:
        a, p = med(annotated, size, "edited", "cpu"), med(plain, size, "edited", "cpu")
        k = lines[size] / 1000
        am = median([sum(run.modules.values()) for run in annotated.runs[(size, "edited")]])
        pm = median([sum(run.modules.values()) for run in plain.runs[(size, "edited")]])
        per_k_modules.append((am / k, pm / k))
        print(f"  {lines[size]:>6}  {a:9.2f}  {p:7.2f}  {a / p:6.3f}  {a / k:7.3f}  {p / k:8.3f}"
              f"  {am / k:14.3f}  {pm / k:16.3f}")
        if prev is not None:
            dl = (lines[size] - prev[0]) / 1000
            increments.append(((a - prev[1]) / dl, (p - prev[2]) / dl))
        prev = (lines[size], a, p)
    for (lo, hi), (ia, ip) in zip(zip(all_sizes, all_sizes[1:]), increments):
        print(f"  marginal cost {_k(lo)} -> {_k(hi)} lines: annotated+plugin {ia:.3f} s/1k lines, "
              f"plain {ip:.3f} s/1k lines")
    slopes = {}
    for v in variants:
        xs = [lines[size] / 1000 for size in all_sizes]
        ys = [med(v, size, "edited", "cpu") for size in all_sizes]
        slope, intercept = _fit(xs, ys)
        worst = max(abs(y - (intercept + slope * x)) / y for x, y in zip(xs, ys))
        print(f"  least squares, {v.name}: {intercept:.2f} s + {slope:.4f} s per 1k lines "
              f"(largest residual {100 * worst:.1f}% of a run)")
        slopes[v.name] = slope
    print(f"  per-line cost ratio (slopes): {slopes[annotated.name] / slopes[plain.name]:.3f}")
    spread_a = max(x for x, _ in per_k_modules) / min(x for x, _ in per_k_modules)
    spread_p = max(y for _, y in per_k_modules) / min(y for _, y in per_k_modules)
    print(f"  module time per 1k lines (--timing-stats) spans {100 * (spread_a - 1):.0f}% (annotated) and "
          f"{100 * (spread_p - 1):.0f}% (plain) over {_k(min(all_sizes))}..{_k(max(all_sizes))} lines")
    print("  (whole-run time per 1k lines falls with size: a run has a fixed cost, loading torch's "
          "cache, of about the unedited run's time)")
    print(f"  unedited {lines[main_size]}-line run: annotated+plugin "
          f"{med(annotated, main_size, 'unedited', 'cpu'):.2f} s, plain {med(plain, main_size, 'unedited', 'cpu'):.2f} s cpu")
    print()
    if instructions:
        stamp += 1
        count_instructions((annotated, plain), sizes[main_size], lines[main_size], workdir, stamp)
        print()
    print(f"total bench time {time.perf_counter() - t_start:.0f} s; load average now {os.getloadavg()[0]:.1f}")
    print("summary: both targets met" if ok else "summary: a target is missed (see above)")
    return 0


def count_instructions(variants: tuple[Variant, Variant], n: int, n_lines: int, workdir: Path,
                       stamp: int) -> None:
    """One warm run of each variant (every module edited) under callgrind, side by side."""
    print(f"instructions (callgrind, one warm run each, {n_lines} lines, every corpus module edited):")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("  valgrind is not installed: no count")
        return
    # the interpreter itself (a pyenv shim or a venv's wrapper script would be what valgrind runs)
    python = os.path.realpath(sys.executable)
    env = _env() | {"PYTHONHASHSEED": "0"}
    procs = []
    for v in variants:
        files = v.files(n)
        edit_all(v, files, stamp)
        argv = [valgrind, "--tool=callgrind", f"--callgrind-out-file={workdir / 'callgrind.out'}.%p",
                python, "-m", "mypy", "--config-file", str(v.config),
                *[str(f.relative_to(v.root)) for f in files]]
        procs.append(subprocess.Popen(argv, cwd=v.root, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    counts = []
    for v, proc in zip(variants, procs):
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S * 10)
        count = collected_instructions(err)
        counts.append(count)
        print(f"  {v.name:18s} " + (f"{count / 1e9:.4f}G instructions" if count else
                                    "no count (valgrind: " + err.strip()[-200:] + ")"))
    for f in workdir.glob("callgrind.out.*"):
        f.unlink()
    if all(counts):
        print(f"  ratio {counts[0] / counts[1]:.3f}")


def collected_instructions(valgrind_stderr: str) -> int | None:
    """The instruction count in callgrind's summary (``==123== Collected : 7777779147``)."""
    for line in valgrind_stderr.splitlines():
        head, _, count = line.partition("Collected :")
        if count and head.startswith("=="):
            return int(count.strip().replace(",", ""))
    return None


def _k(lines: int) -> str:
    return f"{lines // 1000}k" if lines % 1000 == 0 else str(lines)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
