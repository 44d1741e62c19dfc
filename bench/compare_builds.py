"""Two builds of the plugin compared in one window: per-module and whole-run time, interleaved.

    python bench/compare_builds.py --base DIR [--new DIR] [--rounds 12] [--workdir W]
    python bench/compare_builds.py --smoke --base ""      # 1 module, 1 round: does it run?

A build is a directory holding ``spmd_mypy`` (and ``spmd``, ``spmd-stubs``), e.g. what
``pip install --no-deps --target DIR <checkout>`` writes (compiled with mypyc, as users get
it); ``""`` is the plugin Python imports without one (the installed package, or the checkout
when run from it).  Build the base from a fresh clone of the base commit.

Why this and not two runs of bench/static_overhead.py: on a shared host the time ratios move
with the host's speed more than with a change to the plugin (the same build read per module
1.615 and, five minutes later on a faster host, 1.749; session 44).  Here every round runs
the base build, the new build and plain mypy on the same corpus one after the other (the
order reversed every other round), so a drift of the host hits all three alike.  Each run is
warm with every corpus module edited, as in static_overhead (its corpus, its per-module
--timing-stats sums, its CPU time of the mypy process).  Printed: per variant the median
per-round ratio to plain, and new / base per round (median, and the spread of the rounds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_corpus  # noqa: E402
import static_overhead as so  # noqa: E402


def _with_build(build: str, fn, *args):  # noqa: ANN001, ANN002, ANN202
    """``fn(*args)`` with ``build`` first on the PYTHONPATH mypy's subprocess gets."""
    saved = os.environ.get("PYTHONPATH")
    paths = [p for p in (build, saved) if p]
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        return fn(*args)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def module_sum(run: so.Run) -> float:
    """A run's --timing-stats sum over the corpus modules (seconds)."""
    return sum(run.modules.values())


class Interleaved:
    """Warm runs of several variants (each with its build: a directory first on PYTHONPATH,
    or ""), every corpus module edited before each run: the caches filled (two runs each),
    then ``rounds`` rounds of one run per variant, the order reversed every other round."""

    def __init__(self, n_modules: int, stats: Path, seeds: Path | None = None) -> None:
        self.n_modules = n_modules
        self.stats = stats
        self.seeds = seeds  # --seed-caches (static_overhead.restore_seed)
        self.stamp = 0
        self.clean: dict[str, bool] = {}  # variant -> its last run type-checked clean

    def run(self, v: so.Variant, build: str) -> so.Run | None:
        """One run with every corpus module edited; None (said why) when it failed or mypy
        wrote no module times."""
        self.stamp += 1
        so.edit_all(v, v.files(self.n_modules), self.stamp)
        run, out, valid = _with_build(build, so.run_mypy, v, v.files(self.n_modules), self.stats)
        if not valid or not run.modules:
            why = "mypy failed" if not valid else "no module times in mypy's --timing-stats output"
            print(f"\n  ! {v.name}: {why}:\n" + so._indent(out[-2000:]))
            return None
        self.clean[v.name] = "Success" in out
        return run

    def measure(self, variants: list[tuple[so.Variant, str]], rounds: int) -> dict[str, list[so.Run]] | None:
        seeded = []
        for v, build in variants:
            if so.restore_seed(self.seeds, v, build):  # (a variant may seed the next one)
                seeded.append(v.name)
            for i in range(2):
                if self.run(v, build) is None:
                    return None
                if i == 0:
                    so.keep_seed(self.seeds, v, build)
        if seeded:
            print(f"  (from --seed-caches, not cold: {', '.join(seeded)})")
        runs: dict[str, list[so.Run]] = {v.name: [] for v, _ in variants}
        print(f"measuring: {rounds} rounds, the {len(variants)} variants interleaved", end="", flush=True)
        t0 = time.perf_counter()
        for r in range(rounds):
            for v, build in (variants if r % 2 == 0 else variants[::-1]):
                run = self.run(v, build)
                if run is None:
                    return None
                runs[v.name].append(run)
            print(".", end="", flush=True)
        print(f" {time.perf_counter() - t0:.0f} s; load average now {os.getloadavg()[0]:.1f}")
        return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help='the base build\'s directory ("" = the importable plugin)')
    ap.add_argument("--new", default="", help='the new build\'s directory (default "": the importable plugin)')
    ap.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    ap.add_argument("--workdir", type=Path, help="keep the corpus and caches here (default: a temp dir)")
    ap.add_argument("--seed-caches", type=Path, metavar="DIR", help=so.SEED_HELP)
    ap.add_argument("--smoke", action="store_true", help="1 module, 1 round: every step, figures meaningless")
    args = ap.parse_args()
    for build in (args.base, args.new):
        if build and not (Path(build) / "spmd_mypy").is_dir():
            ap.error(f"{build}: no spmd_mypy package there (pip install --no-deps --target {build} <checkout>)")
    n_modules = 1 if args.smoke else so.gen_corpus.modules_for(so.MAIN_SIZE)
    rounds = 1 if args.smoke and "--rounds" not in sys.argv else args.rounds
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spmd-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _compare(workdir, args.base, args.new, n_modules, rounds, args.smoke, args.seed_caches)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _compare(workdir: Path, base: str, new: str, n_modules: int, rounds: int, smoke: bool,
             seeds: Path | None = None) -> int:
    corpus = workdir / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    annotated_root, plain_root, _ = gen_corpus.write_corpus(corpus, n_modules)
    variants: list[tuple[so.Variant, str]] = []
    for name, root, ini, build in (("base build", annotated_root, so.ANNOTATED_INI, base),
                                   ("new build", annotated_root, so.ANNOTATED_INI, new),
                                   ("plain, no plugin", plain_root, so.PLAIN_INI, "")):
        tag = name.split()[0].rstrip(",")
        config = root / f"mypy-{tag}.ini"
        config.write_text(ini.format(cache=(workdir / f"cache-{tag}").as_posix()))
        variants.append((so.Variant(name, root, config, uses_plugin="plugins" in ini), build))
    print("spmd-mypy: two plugin builds compared" + (" (smoke run: the figures mean nothing)" if smoke else ""))
    print(f"  base: {base or '(the importable plugin)'}\n  new:  {new or '(the importable plugin)'}")
    print(f"  corpus: {n_modules} modules of bench/gen_corpus.py; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("filling the caches (cold, then one warm run each) ...", flush=True)
    runs = Interleaved(n_modules, workdir / "timing-stats.txt", seeds).measure(variants, rounds)
    if runs is None:
        return 1

    plain = runs["plain, no plugin"]
    print("\nper round, ratio to plain mypy (median over the rounds; the rounds' range):")
    for name in ("base build", "new build"):
        per_module = [module_sum(a) / module_sum(p) for a, p in zip(runs[name], plain)]
        whole = [a.cpu / p.cpu for a, p in zip(runs[name], plain)]
        print(f"  {name:10s} per module {statistics.median(per_module):.3f} "
              f"[{min(per_module):.3f}, {max(per_module):.3f}]   whole run CPU "
              f"{statistics.median(whole):.3f} [{min(whole):.3f}, {max(whole):.3f}]")
    modules = [module_sum(n) / module_sum(b) for n, b in zip(runs["new build"], runs["base build"])]
    cpu = [n.cpu / b.cpu for n, b in zip(runs["new build"], runs["base build"])]
    print(f"new / base, per round: module time {statistics.median(modules):.3f} "
          f"[{min(modules):.3f}, {max(modules):.3f}], whole-run CPU {statistics.median(cpu):.3f} "
          f"[{min(cpu):.3f}, {max(cpu):.3f}]")
    print(f"  mean module time: base {1e3 * statistics.median(map(module_sum, runs['base build'])) / n_modules:.1f} ms, "
          f"new {1e3 * statistics.median(map(module_sum, runs['new build'])) / n_modules:.1f} ms, "
          f"plain {1e3 * statistics.median(map(module_sum, plain)) / n_modules:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
