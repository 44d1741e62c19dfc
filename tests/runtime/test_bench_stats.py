"""The statistics of bench/runtime_overhead.py: ABBA order, bootstrap interval, verdicts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "runtime_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("runtime_overhead", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rounds_alternate_abba_over_fresh_orders():
    b = _bench()
    order: list[str] = []
    cases = {k: (lambda k=k: order.append(k)) for k in "ABC"}
    s = b.interleaved(cases, rounds=4, calls=1)
    assert order[:3] == list("ABC")  # one warm-up call each
    rounds = [order[3 + 3 * r: 6 + 3 * r] for r in range(4)]
    assert rounds == b.round_orders(list("ABC"), 4)  # the same on every rank: seeded
    for r in range(0, 4, 2):
        assert sorted(rounds[r]) == list("ABC") and rounds[r + 1] == rounds[r][::-1]
    assert all(len(v) == 4 for v in (*s.wall.values(), *s.cpu.values(), *s.thread.values()))


def test_no_variant_keeps_the_same_neighbour():
    """A fixed ABBA order made the variants at its ends follow themselves across every
    round boundary (their caches warm) and the middle ones never: over many rounds
    every variant follows itself about as often as any other does, and each of the
    others about equally often."""
    b = _bench()
    keys = ["raw", "raw again", "raw Function", "typed", "typed+grad"]
    seq = [k for order in b.round_orders(keys, 400) for k in order]
    follows = {(a, c): 0 for a in keys for c in keys}
    for a, c in zip(seq, seq[1:]):
        follows[(a, c)] += 1
    selves = [follows[(c, c)] for c in keys]
    assert min(selves) > 0.6 * max(selves), selves
    for c in keys:  # what precedes c, itself aside: each of the 4 others ~1/4 of the time
        row = [follows[(a, c)] for a in keys if a != c]
        assert min(row) > 0.6 * max(row), (c, row)


def test_interval_contains_the_median_and_shrinks_with_more_rounds():
    b = _bench()
    import random

    rng = random.Random(1)
    few = [1.0 + rng.gauss(0, 0.05) for _ in range(10)]
    many = [1.0 + rng.gauss(0, 0.05) for _ in range(400)]
    m, lo, hi = b.median_ci(few)
    assert lo <= m <= hi
    m2, lo2, hi2 = b.median_ci(many)
    assert hi2 - lo2 < hi - lo


def test_verdicts():
    b = _bench()
    assert b.verdict((1.00, 0.99, 1.02), 1.03) == "met"
    assert b.verdict((1.05, 1.04, 1.06), 1.03) == "MISSED"
    assert b.verdict((1.02, 0.98, 1.07), 1.03) == "undecidable"
    assert b.ratios({"a": [2.0, 3.0], "b": [1.0, 2.0]}, "a", "b") == [2.0, 1.5]
    assert b.diffs({"a": [2.0, 3.0], "b": [1.0, 2.0]}, "a", "b") == [1.0, 1.0]
