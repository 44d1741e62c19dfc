"""``python -m soundness``: prove the rules by machine (docs/soundness.md), one command.

Runs, in order:

1. the rule soundness suite (:mod:`soundness.rules`, and the einsum rule in global mode:
   :mod:`soundness.global_rules`) on gloo worlds of 2 and 4 ranks;
2. the differential fuzzer (``soundness.fuzz.run``) for ``--fuzz-seconds``, when present;
3. robustness (:mod:`soundness.robustness`): the plugin over megatron-core, torch.distributed
   and torch.nn (no crash, no added or removed diagnostic) and fuzzed annotations (no
   internal error).

Prints the figures, writes a machine-readable summary (``--json``, default
``build/soundness/summary.json``) and every counterexample (``counterexamples.txt`` next to
it), and exits non-zero on any failure: an accepted combination that does not match, a
rejected one that some result type computes correctly without being listed as conservative,
a fuzz disagreement, a crash, a diagnostic the plugin adds or removes (``--strict``: also
a diagnostic the megatron stubs add to unannotated code).

``--quick`` is the CI-sized run (a sample of each op class, 2 ranks and the 2x2 mesh,
torch.distributed only, a few fuzzed annotations, a 20 s fuzz).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path


def _print(*a: object) -> None:
    print(*a, flush=True)


def run_rules(args: argparse.Namespace, out_dir: Path) -> tuple[dict, bool]:
    from . import global_rules, rules

    t0 = time.perf_counter()
    results = rules.run(world_sizes=args.world_sizes, sample=args.sample, seed=args.seed,
                        timeout=args.world_timeout)
    # the einsum rule in global mode (partition specs): soundness/global_rules.py
    results += global_rules.run(world_sizes=args.world_sizes, sample=args.sample,
                                seed=args.seed, timeout=args.world_timeout)
    seconds = time.perf_counter() - t0
    status = collections.Counter(r["status"] for r in results)
    by_mesh = collections.Counter(r["mesh"] for r in results)
    by_section: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_section[r["section"]][r["status"]] += 1
    failures = [r for r in results if r["status"] in ("accepted-MISMATCH", "UNLISTED-conservative",
                                                    "pending-sum-MISMATCH")]
    static = collections.Counter(r["static_status"] for r in results if "static_status" in r)
    conservative = [r for r in results if r["status"] == "conservative"]
    with open(out_dir / "counterexamples.txt", "w") as f:
        for r in results:
            if "counterexample" in r or r["status"] != "accepted-match":
                rec = dict(r)
                if rec["status"] == "rejected-counterexample":  # keep the file a few MB
                    rec["counterexample"] = rec["counterexample"][:500]
                    rec["inputs"] = rec["inputs"][:300]
                    rec["errors"] = [e[:200] for e in rec["errors"]]
                f.write(json.dumps(rec) + "\n")
    _print(f"rule soundness suite ({seconds:.0f} s): {len(results)} combinations checked "
           f"({', '.join(f'{m}: {n}' for m, n in sorted(by_mesh.items()))})")
    _print(f"  accepted and matching:            {status['accepted-match']}")
    _print(f"  accepted and NOT matching:        {status['accepted-MISMATCH']}")
    _print(f"  rejected with counterexample:     {status['rejected-counterexample']}")
    _print(f"  rejected, conservative (listed):  {status['conservative']}")
    _print(f"  rejected, conservative UNLISTED:  {status['UNLISTED-conservative']}")
    _print(f"  pending sums (a sum, mean or norm over the shard dim), model holds: "
           f"{status['pending-sum']}, model FAILS: {status['pending-sum-MISMATCH']}")
    _print(f"  the static checker's type where it differs from the check mode's (no shapes, "
           f"no rank): {sum(static.values())} ({static['match']} matching, "
           f"{static['no-global-program']} S(i) over inputs with no global program, "
           f"{static['MISMATCH']} NOT matching)")
    if static["no-global-program"]:
        _print(f"    ({rules.STATIC_NOTE})")
    _print("  per op class (match / mismatch / counterexample / conservative):")
    for sec in (*rules.SECTIONS, global_rules.SECTION):
        c = by_section.get(sec)
        if c:
            _print(f"    {sec:13s} {c['accepted-match']:6d} {c['accepted-MISMATCH']:3d} "
                   f"{c['rejected-counterexample']:7d} "
                   f"{c['conservative'] + c['UNLISTED-conservative']:5d}")
    if conservative:
        _print("  conservative rejections, with the reason:")
        reasons = collections.Counter(r["reason"] for r in conservative)
        for reason, n in reasons.items():
            _print(f"    {n} x: {reason}")
    shown: collections.Counter = collections.Counter()
    _print("  sample counterexamples of rejected combinations (all in counterexamples.txt):")
    for r in results:
        if r["status"] == "rejected-counterexample" and shown[r["section"]] < args.show:
            shown[r["section"]] += 1
            code = r["errors"][0].split(":")[0]
            _print(f"    {r['task']} [{code}]: {r['counterexample'][:400]}")
            _print(f"      inputs: {r['inputs'][:300]}")
    for r in failures[:50]:
        _print(f"  FAILURE {r['status']}: {r['task']}: "
               f"{r.get('counterexample') or 'correct as ' + ', '.join(r.get('passing', []))}")
        if r.get("inputs"):
            _print(f"    inputs: {r['inputs'][:600]}")
    summary = {
        "seconds": round(seconds, 1),
        "combinations": len(results),
        "by_mesh": dict(by_mesh),
        "accepted_matching": status["accepted-match"],
        "accepted_mismatching": status["accepted-MISMATCH"],
        "static_differs": dict(static),
        "rejected_counterexample": status["rejected-counterexample"],
        "conservative": status["conservative"],
        "conservative_unlisted": status["UNLISTED-conservative"],
        "conservative_reasons": sorted({r["reason"] for r in conservative}),
        "by_section": {k: dict(v) for k, v in by_section.items()},
        "failures": failures[:200],
    }
    ok = not failures
    return summary, ok


def run_fuzzer(args: argparse.Namespace) -> tuple[dict, bool]:
    try:
        from . import fuzz  # type: ignore[attr-defined]
    except ImportError:
        _print("fuzzer: not present")
        return {"present": False}, True
    t0 = time.perf_counter()
    res = fuzz.run(args.fuzz_seconds, seed=args.seed)
    seconds = time.perf_counter() - t0
    _print(f"fuzzer ({seconds:.0f} s): {res.get('programs')} programs run, "
           f"{res.get('disagreements')} disagreements, {res.get('crashes')} crashes")
    out = {"present": True, "seconds": round(seconds, 1), **res}
    ok = res.get("disagreements", 1) == 0 and res.get("crashes", 1) == 0
    return out, ok


def run_robustness(args: argparse.Namespace) -> tuple[dict, bool]:
    from . import robustness

    ok = True
    out: dict = {"unannotated": [], "annotations": None}
    for target in args.targets:
        try:
            rec = robustness.unannotated(target, timeout=args.mypy_timeout)
        except Exception as e:  # noqa: BLE001 - e.g. no network for the wheel
            rec = {"target": target, "ok": False, "crashes": 0, "error": f"{type(e).__name__}: {e}"}
        out["unannotated"].append(rec)
        ok = ok and rec["ok"]
        if "error" in rec:
            _print(f"robustness {target}: NOT RUN ({rec['error']})")
            continue
        _print(f"robustness {target}: {'ok' if rec['ok'] else 'FAILED'} "
               f"({rec['files'] or 'package'} files; {rec['plain_diagnostics']} plain mypy "
               f"diagnostics, {len(rec['added'])} added and {len(rec['removed'])} removed by the "
               f"plugin; {rec['crashes']} crashes; {rec['seconds'][0]} s / {rec['seconds'][1]} s)")
        if "added_with_megatron_stubs" in rec:
            extra = rec["added_with_megatron_stubs"]
            gone = rec["removed_with_megatron_stubs"]
            _print(f"  with the megatron stubs the package installs: {len(extra)} errors added, "
                   f"{len(gone)} diagnostics removed (megatron's own, no longer reported once "
                   f"the stub package is on the path)")
            for d in extra[:10]:
                _print(f"    added with the stubs: {d}")
            for d in gone[:10]:
                _print(f"    removed with the stubs: {d}")
            if args.strict and (extra or gone):
                ok = False
        for d in rec["added"][:10]:
            _print(f"    added: {d}")
        for d in rec["removed"][:10]:
            _print(f"    removed: {d}")
        if rec.get("crash_output"):
            _print("    crash: " + rec["crash_output"][-1500:])
    if args.annotations:
        fz = robustness.fuzz_annotations(n=args.annotations, seed=args.seed,
                                         per_run=args.annotations_per_run,
                                         timeout=args.mypy_timeout)
        out["annotations"] = fz
        ok = ok and fz["crashes"] == 0 and fz["blocked_by_plugin"] == 0
        _print(f"robustness fuzzed annotations: {fz['checked']} fuzzed strings (of "
               f"{fz['drawn']} drawn) in {fz['runs']} mypy runs ({fz['seconds']} s): "
               f"{fz['crashes']} internal errors; {fz['blocked']} left out for a blocking "
               f"error of plain mypy itself ({fz['blocked_by_plugin']} blocking only with the "
               f"plugin)")
        for c in fz["counterexamples"]:
            _print("    crash on:\n" + c["module"][-1500:] + "\n    " + "\n    ".join(c["output_tail"]))
    return out, ok


def code_proven() -> dict[str, str]:
    """Where the runtime, the plugin and the stubs under proof come from (a directory), as
    this process and mypy's search path find them."""
    import importlib.util

    found = {}
    for name in ("spmd", "spmd_mypy"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        found[name] = str(Path(origin).resolve().parent.parent) if origin else "(not found)"
    stubs = next((Path(p) for p in sys.path if p and (Path(p) / "spmd-stubs").is_dir()), None)
    found["spmd-stubs"] = str(stubs.resolve()) if stubs is not None else "(not found)"
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m soundness", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the CI-sized run")
    p.add_argument("--fuzz-seconds", type=float, default=180.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", type=int, default=1500,
                   help="at most this many combinations per op case, mesh and out_partial_axes "
                        "(default 1500: every combination of the one- and two-operand ops; "
                        "a sample of the three-operand ones on the 2x2 mesh)")
    p.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    p.add_argument("--world-timeout", type=float, default=1800.0)
    p.add_argument("--targets", nargs="*",
                   default=["megatron-core", "torch.distributed", "torch.nn"])
    p.add_argument("--annotations", type=int, default=5000,
                   help="fuzzed annotation strings (0: skip)")
    p.add_argument("--annotations-per-run", type=int, default=500)
    p.add_argument("--mypy-timeout", type=float, default=900.0)
    p.add_argument("--skip", nargs="*", default=[], choices=["rules", "fuzz", "robustness"])
    p.add_argument("--strict", action="store_true", help="fail on the megatron stubs' known gap too")
    p.add_argument("--show", type=int, default=2, help="sample counterexamples per op class")
    p.add_argument("--json", type=Path, default=Path("build/soundness/summary.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sample = min(args.sample, 40)
        args.world_sizes = [4]
        args.fuzz_seconds = min(args.fuzz_seconds, 20.0)
        args.targets = ["torch.distributed"]
        args.annotations = min(args.annotations, 200)
    out_dir = args.json.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict = {"args": {k: (str(v) if isinstance(v, Path) else v)
                              for k, v in vars(args).items()}, "code": code_proven()}
    _print("proving: " + ", ".join(f"{k} from {v}" for k, v in summary["code"].items()))
    ok = True
    t0 = time.perf_counter()
    crashes = 0
    if "rules" not in args.skip:
        try:
            summary["rules"], good = run_rules(args, out_dir)
        except Exception as e:  # noqa: BLE001 - a world that failed is a failure, reported
            _print(f"rule soundness suite: FAILED to run: {type(e).__name__}: {str(e)[-3000:]}")
            summary["rules"], good = {"error": str(e)[-5000:]}, False
            crashes += 1
        ok = ok and good
    if "fuzz" not in args.skip:
        summary["fuzz"], good = run_fuzzer(args)
        crashes += int(summary["fuzz"].get("crashes", 0) or 0)
        ok = ok and good
    if "robustness" not in args.skip:
        summary["robustness"], good = run_robustness(args)
        crashes += sum(r.get("crashes", 0) for r in summary["robustness"]["unannotated"])
        if summary["robustness"]["annotations"]:
            crashes += summary["robustness"]["annotations"]["crashes"]
        ok = ok and good
    summary["crashes"] = crashes
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["ok"] = ok
    args.json.write_text(json.dumps(summary, indent=1, default=str))
    fz = summary.get("fuzz", {})
    _print(f"\nsummary: {summary.get('rules', {}).get('combinations', 0)} combinations checked; "
           f"fuzz programs {fz.get('programs', '-')}, disagreements "
           f"{fz.get('disagreements', '-')}; crashes {crashes}; "
           f"{'OK' if ok else 'FAILED'} in {summary['seconds']:.0f} s (summary: {args.json})")
    return 0 if ok else 1


if __name__ == "__main__":
    from soundness import run_from_checkout

    run_from_checkout("soundness")
    sys.exit(main())
