"""Where the per-module overhead of bench/static_overhead.py comes from, in three parts.

    python bench/overhead_parts.py [--build DIR] [--rounds 12] [--workdir W]
    python bench/overhead_parts.py --smoke        # 1 module, 1 round: does it run?

The annotated corpus of static_overhead (its main size) is checked four ways, interleaved
round by round (the order reversed every other round), each run warm with every corpus
module edited; each figure is the median per-round ratio of the --timing-stats module sum
to plain mypy's on the plain corpus:

    plain mypy                  1.00
    annotations only            the canonical types: the plugin's annotation hooks and
                                pre-pass, no check-time hook (bench/plugin_standins.py)
    + mypy's hook calls         every name the plugin hooks gets a hook that returns mypy's
                                own answer: the contexts mypy builds, no rule run
    + the rules (the plugin)    the plugin itself

so the differences are what each layer adds: the types, mypy calling hooks at all, and the
plugin's rules.  The target of issue 2 (per module <= 1.5) is on the last line; what the
rules may cost is that target less the line above it.

``--build DIR``: the plugin from a build directory (``pip install --no-deps --target DIR
<checkout>``, compiled as users get it) for all three plugin variants; default: the
importable plugin.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_builds as cb  # noqa: E402
import gen_corpus  # noqa: E402
import static_overhead as so  # noqa: E402

STANDINS = Path(__file__).resolve().parent / "plugin_standins.py"
STANDIN_INI = """\
[mypy]
plugins = {plugin}
cache_dir = {cache}

[spmd_mypy]
mesh_axes = dp, tp
"""
PARTS = (  # name, the plugins line (None: the real plugin; "": none)
    ("plain mypy", ""),
    ("annotations only", f"{STANDINS.as_posix()}:annotations_only"),
    ("+ mypy's hook calls", f"{STANDINS.as_posix()}:mypy_answers"),
    ("+ the rules (the plugin)", None),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="", help='a build directory holding spmd_mypy ("": the importable plugin)')
    ap.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    ap.add_argument("--workdir", type=Path, help="keep the corpus and caches here (default: a temp dir)")
    ap.add_argument("--seed-caches", type=Path, metavar="DIR", help=so.SEED_HELP)
    ap.add_argument("--smoke", action="store_true", help="1 module, 1 round: every step, figures meaningless")
    args = ap.parse_args()
    if args.build and not (Path(args.build) / "spmd_mypy").is_dir():
        ap.error(f"{args.build}: no spmd_mypy package there (pip install --no-deps --target {args.build} <checkout>)")
    n_modules = 1 if args.smoke else gen_corpus.modules_for(so.MAIN_SIZE)
    rounds = 1 if args.smoke and "--rounds" not in sys.argv else args.rounds
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spmd-parts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _parts(workdir, args.build, n_modules, rounds, args.smoke, args.seed_caches)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _parts(workdir: Path, build: str, n_modules: int, rounds: int, smoke: bool,
           seeds: Path | None = None) -> int:
    corpus = workdir / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    annotated_root, plain_root, _ = gen_corpus.write_corpus(corpus, n_modules)
    variants: list[so.Variant] = []
    for i, (name, plugin) in enumerate(PARTS):
        cache = (workdir / f"cache-{i}").as_posix()
        if plugin == "":
            root, ini = plain_root, so.PLAIN_INI.format(cache=cache)
        elif plugin is None:
            root, ini = annotated_root, so.ANNOTATED_INI.format(cache=cache)
        else:
            root, ini = annotated_root, STANDIN_INI.format(plugin=plugin, cache=cache)
        config = root / f"mypy-part{i}.ini"
        config.write_text(ini)
        variants.append(so.Variant(name, root, config, uses_plugin=plugin != ""))
    print("spmd-mypy: the per-module overhead in parts" + (" (smoke run: the figures mean nothing)" if smoke else ""))
    print(f"  plugin: {build or '(the importable plugin)'}")
    print(f"  corpus: {n_modules} modules of bench/gen_corpus.py; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("filling the caches (cold, then one warm run each) ...", flush=True)
    interleaved = cb.Interleaved(n_modules, workdir / "timing-stats.txt", seeds)
    runs = interleaved.measure([(v, build) for v in variants], rounds)
    if runs is None:
        return 1
    module_sum, clean = cb.module_sum, interleaved.clean

    plain = runs[PARTS[0][0]]
    print("\nper module (--timing-stats sum), per round ratio to plain mypy: median [the rounds' range]")
    previous = 1.0
    for name, _ in PARTS[1:]:
        ratios = [module_sum(a) / module_sum(p) for a, p in zip(runs[name], plain)]
        mid = statistics.median(ratios)
        note = "" if clean[name] else "   (the corpus is NOT clean under this variant)"
        print(f"  {name:26s} {mid:.3f} [{min(ratios):.3f}, {max(ratios):.3f}]   adds {mid - previous:+.3f}{note}")
        previous = mid
    print(f"  mean module time: plain {1e3 * statistics.median(map(module_sum, plain)) / n_modules:.1f} ms; "
          + ", ".join(f"{name} {1e3 * statistics.median(map(module_sum, runs[name])) / n_modules:.1f} ms"
                      for name, _ in PARTS[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
