"""The report agrees with the runtime: what each example's training step actually sends.

One 4-rank gloo launch (a 2 x 2 ("dp", "tp") mesh, ``_agreement_worker.py``) runs every
example's ``step(model, batch)`` (forward, loss, backward, gradient finalisation) while
counting, on every rank:

- each torch.distributed call (the primitives under ``runtime/spmd/_collectives.py``:
  ``all_reduce``, ``all_gather_single``, ``reduce_scatter_single``, ``all_to_all_single``,
  and every other communicating function of torch.distributed), by op, mesh axis (its
  process group) and phase (forward, or backward: inside the autograd engine);
- each call of an spmd collective / conversion / ``out_partial_axes`` op by its call site
  (caller's file and line), and how many of those calls had an input carrying a gradient;
- each call of the example file's functions.

Against the static report of the example (``build_report``), per example:

1. every call site executed is a site of the report (nothing communicates unreported);
2. a straight-line site (not in a loop or branch) runs exactly once per call of its
   function: the report's per-function totals times the function's calls are its comms;
3. a site the report says carries no gradient (``.detach()``, ``no_grad``, ``.grad``,
   ``op="max"``) never had an input with one;
4. forward comms per (op, axis) == sum over sites of (calls x the site's forward comms);
5. backward comms per (op, axis) == sum over sites of (calls with a gradient x the site's
   backward comms).

The runtime observations used in the prediction are only how many times each site ran
(function calls, loop trips) and whether its input required grad: a static report cannot
know those (an input batch needs no gradient; a weight does).  What is sent is the
report's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "_agreement_worker.py"
# the 4-rank launch takes ~25 s on 2 idle cores and over 90 s at load ~8 (the full suite
# beside other work); a hang is still caught, and the outer limit (+30 s) stays under
# pytest's 300 s per test (pyproject.toml), as in tests/examples
LAUNCH_TIMEOUT_S = 240
sys.path.insert(0, str(ROOT / "examples"))
import _harness  # type: ignore[import-not-found]  # noqa: E402

MakeReport = Callable[..., Any]
Key = tuple[str, str]  # (op, axes joined by ",")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("agreement")
    try:
        proc = subprocess.run([sys.executable, str(WORKER), str(out), "--timeout",
                               str(LAUNCH_TIMEOUT_S)], capture_output=True, text=True,
                              timeout=LAUNCH_TIMEOUT_S + 30, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the agreement launch hung\n{e.stderr!r}")
    ranks = []
    for r in range(4):
        f = out / f"rank{r}.json"
        if not f.exists():
            pytest.fail(f"rank {r} wrote no results (exit {proc.returncode})\n{proc.stderr}")
        ranks.append(json.loads(f.read_text()))
    assert proc.returncode == 0, proc.stderr
    return ranks


@pytest.fixture(scope="module")
def reports(make_report: MakeReport) -> dict[str, dict[str, Any]]:
    return {name: make_report([f"examples/{name}.py"]).as_json() for name in _harness.EXAMPLES}


def _comm_counter(steps: list[dict[str, Any]], times: int) -> Counter[Key]:
    c: Counter[Key] = Counter()
    for s in steps:
        if s["comms"]:
            c[(s["op"], ",".join(s["axes"]))] += times
    return c


def _fmt(c: Counter[Key]) -> str:
    return ", ".join(f"{op} on {ax} x{n}" for (op, ax), n in sorted(c.items()) if n) or "-"


def test_every_rank_measured_every_example(measured: list[dict[str, Any]]) -> None:
    for r, rank in enumerate(measured):
        assert set(rank) == set(_harness.EXAMPLES), r
    # SPMD: every rank issues the same collectives
    for name in _harness.EXAMPLES:
        assert all(rank[name]["comms"] == measured[0][name]["comms"] for rank in measured), name


@pytest.mark.parametrize("name", _harness.EXAMPLES)
def test_report_predicts_runtime_comms(measured: list[dict[str, Any]],
                                       reports: dict[str, dict[str, Any]], name: str) -> None:
    report = reports[name]
    path = str((ROOT / "examples" / f"{name}.py").resolve())
    sites = {(site["line"], site["call"]): (f, site)
             for f in report["functions"] for site in f["sites"]}
    for r, rank in enumerate(measured):
        m = rank[name]
        fn_calls = {q: n for p, q, n in m["functions"] if p == path}
        predicted = {"forward": Counter[Key](), "backward": Counter[Key]()}
        by_function: dict[str, Counter[Key]] = {}
        lines = []
        for site_path, line, call, calls, with_grad in m["sites"]:
            # 1. nothing communicates unreported
            assert site_path == path, f"{name}: a call from {site_path}:{line} (not the example)"
            entry = sites.get((line, call))
            assert entry is not None, f"{name}:{line} {call} ran {calls}x but is not in the report"
            f, site = entry
            # 2. straight-line sites run once per call of their function
            runs = fn_calls.get(f["qualname"], 0)
            if not site["in_loop"] and not site["in_branch"]:
                assert calls == runs, (f"{name}:{line} ran {calls}x, its function "
                                       f"{f['qualname']} {runs}x")
            else:
                assert runs and calls % runs == 0, (name, line, calls, runs)
            # 3. "no gradient" is never wrong
            if not site["gradient"]:
                assert with_grad == 0, (f"{name}:{line}: the report says no gradient "
                                        f"({site['no_gradient']}) but {with_grad} calls had one")
            fwd = _comm_counter(site["forward"], calls)
            bwd = _comm_counter(site["backward"], with_grad) if site["gradient"] else Counter()
            predicted["forward"] += fwd
            predicted["backward"] += bwd
            by_function.setdefault(f["qualname"], Counter()).update(fwd)
            lines.append(f"  {line:>4} {call:<20} x{calls} (grad x{with_grad})  "
                         f"fwd {_fmt(fwd)}; bwd {_fmt(bwd)}")
        # the per-function totals of the report, times the function's calls
        for f in report["functions"]:
            straight = all(not s["in_loop"] and not s["in_branch"] for s in f["sites"])
            if not straight or not f["sites"]:
                continue
            runs = fn_calls.get(f["qualname"], 0)
            totals = Counter({(t["op"], ",".join(t["axes"])): t["count"] * runs
                              for t in f["totals"]["forward"]})
            assert +totals == +by_function.get(f["qualname"], Counter()), (name, f["qualname"])
        actual = {"forward": Counter[Key](), "backward": Counter[Key]()}
        for op, axes, phase, n in m["comms"]:
            actual[phase][(op, axes)] += n
        detail = (f"{name} (rank {r}):\n" + "\n".join(lines)
                  + f"\n  predicted forward {_fmt(predicted['forward'])}; backward "
                    f"{_fmt(predicted['backward'])}\n  measured  forward {_fmt(actual['forward'])}; "
                    f"backward {_fmt(actual['backward'])}")
        # 4. and 5.
        assert +predicted["forward"] == +actual["forward"], detail
        assert +predicted["backward"] == +actual["backward"], detail
