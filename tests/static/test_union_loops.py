"""A loop over tensors of different types reports what the loop's iterations would report one
by one: no more (the plugin pairs each operand derived from the loop variable with the same
member: ``a`` with ``a.grad``, never with ``b.grad``), and no less.

For each pair of types, each update statement of an optimizer loop, with gradients off (an
optimizer step) and on, and with the gradient read directly (``p.grad``) or through a local
(``g = p.grad``), the errors on the statement in ``for p in (a, b): ...`` must be exactly the
union of those on the same statement in two functions taking ``p`` of one type each
(promotion.Correlated).  Before the correlated splitting, over half of these loops reported
pairings no iteration makes.
"""

from __future__ import annotations

import collections
import itertools
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

TYPES = {"R": 'Tensor[R["tp"]]', "I": 'Tensor[I["tp"]]', "V": 'Tensor[V["tp"]]',
         "P": 'Tensor[P["tp"]]', "S0": 'Tensor[S[0, "tp"]]', "RdVt": 'Tensor[R["dp"], V["tp"]]'}
# ``g`` is the gradient (``p.grad``, or a local assigned it); ``m`` and ``u`` are tensors of one
# type (the same in every iteration)
STATEMENTS = (
    "p.add_(g, alpha=-lr)",
    "p.sub_(g.detach() * lr)",
    "p.data.add_(g.data, alpha=-lr)",
    "p.addcmul_(g, g, value=-lr)",
    "p.add_(g.sign(), alpha=-lr)",
    "p.copy_(p - lr * g)",
    "g.add_(p, alpha=0.01)",
    "p.add_(g.mul(lr))",
    "p.add_(torch.sign(g))",
    "p.add_(g.clamp(-1.0, 1.0))",
    "p.add_(g.add(p, alpha=0.1))",
    "p.add_(g.view(4, 4))",
    "p.add_(g.sum(0, keepdim=True))",
    "p.add_(g.transpose(0, 1))",
    "p.add_(g.T)",
    "p.mul_(p)",
    "p.add_(-g)",
    "p.add_(g * g)",
    "p.add_(torch.exp(g) * lr)",
    "p.add_(F.gelu(g))",
    "torch.add(p, g)",
    "torch.matmul(g.T, p)",
    "p.add_(g.softmax(-1))",
    # with tensors of one type (m: R on "tp", u: untyped)
    "p.add_(g * m)",
    "p.add_(m * g)",
    "p.add_(m.mul(g), alpha=-lr)",
    "p.add_(torch.mul(g, m))",
    "p.addcmul_(g, m, value=-lr)",
    "p.add_(g * u)",
    "p.add_(torch.where(m > 0, g, p))",
)
OTHERS = 'm: Tensor[R["tp"]], u: torch.Tensor, lr: float'
PRELUDE = ("import torch", "import torch.nn.functional as F", "import spmd",
           "from spmd import Tensor, R, I, V, P, S", "")
REPORT = re.compile(r"^loops\.py:(\d+): (error|note): (.*)$")


def _source() -> tuple[str, dict[int, tuple]]:
    """The module, and what each checked line is: ("loop", case) or ("one", case)."""
    lines = list(PRELUDE)
    where: dict[int, tuple] = {}
    n = 0
    for direct, no_grad in itertools.product((False, True), (True, False)):
        for a, b in itertools.combinations(TYPES, 2):
            for statement in STATEMENTS:
                n += 1
                case = (direct, no_grad, a, b, statement)
                text = re.sub(r"\bg\b", "p.grad", statement) if direct else statement
                read = (["assert p.grad is not None"] if direct
                        else ["g = p.grad", "assert g is not None"])
                for name, params, loop in ((f"loop{n}", f"a: {TYPES[a]}, b: {TYPES[b]}", True),
                                           (f"one{n}_a", f"p: {TYPES[a]}", False),
                                           (f"one{n}_b", f"p: {TYPES[b]}", False)):
                    lines.append(f"def {name}({params}, {OTHERS}) -> None:")
                    indent = "    "
                    if no_grad:
                        lines.append(f"{indent}with torch.no_grad():")
                        indent += "    "
                    if loop:
                        lines.append(f"{indent}for p in (a, b):")
                        indent += "    "
                    lines.extend(indent + r for r in read)
                    lines.append(indent + text)
                    where[len(lines)] = ("loop" if loop else "one", case)
    return "\n".join(lines) + "\n", where


def _reported(root: Path, source: str, where: dict[int, tuple]
              ) -> tuple[dict[tuple, set[str]], dict[tuple, set[str]]]:
    """mypy's reports on each checked statement: in the loops, and one by one."""
    write_config(root)
    (root / "loops.py").write_text(source)
    out = run_mypy(root, "loops.py")
    by_line: dict[int, set[str]] = collections.defaultdict(set)
    for raw in out.splitlines():
        m = REPORT.match(raw)
        if m:
            by_line[int(m.group(1))].add(m.group(3))
    assert set(by_line) <= set(where), "output on lines that are not checked statements"
    loops: dict[tuple, set[str]] = collections.defaultdict(set)
    ones: dict[tuple, set[str]] = collections.defaultdict(set)
    for line, (kind, case) in where.items():
        (loops if kind == "loop" else ones)[case] |= by_line.get(line, set())
    return loops, ones


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[tuple, set[str]], dict[tuple, set[str]]]:
    return _reported(tmp_path_factory.mktemp("union-loops"), *_source())


def _zip_source() -> tuple[str, dict[int, tuple]]:
    """Loops over two names iterated together (``for p, g in zip((a, b), (ga, gb))``, also
    under ``enumerate`` and from tuple variables), against one function per iteration taking
    ``p`` and ``g`` of that iteration's types.  For each pair of parameter types, two pairs of
    gradient types drawn with a fixed seed."""
    rng = random.Random(11)
    lines = list(PRELUDE)
    where: dict[int, tuple] = {}
    n = 0
    loops = ("for p, g in zip((a, b), (ga, gb)):",
             "for k, (p, g) in enumerate(zip((a, b), (ga, gb))):",
             "for p, g in zip(ps, gs):")
    for no_grad in (True, False):
        for a, b in itertools.combinations(TYPES, 2):
            for _ in range(2):
                ga, gb = rng.choice(list(TYPES)), rng.choice(list(TYPES))
                for statement in STATEMENTS:
                    n += 1
                    header = loops[n % len(loops)]
                    case = (no_grad, a, ga, b, gb, statement, header)
                    for name, params, loop in (
                            (f"loop{n}", f"a: {TYPES[a]}, b: {TYPES[b]}, ga: {TYPES[ga]}, gb: {TYPES[gb]}", True),
                            (f"one{n}_a", f"p: {TYPES[a]}, g: {TYPES[ga]}", False),
                            (f"one{n}_b", f"p: {TYPES[b]}, g: {TYPES[gb]}", False)):
                        lines.append(f"def {name}({params}, {OTHERS}) -> None:")
                        indent = "    "
                        if loop and header.endswith("zip(ps, gs):"):
                            lines += [f"{indent}ps = (a, b)", f"{indent}gs = (ga, gb)"]
                        if no_grad:
                            lines.append(f"{indent}with torch.no_grad():")
                            indent += "    "
                        if loop:
                            lines.append(indent + header)
                            indent += "    "
                        lines.append(indent + statement)
                        where[len(lines)] = ("loop" if loop else "one", case)
    return "\n".join(lines) + "\n", where


@pytest.fixture(scope="module")
def reported_zip(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[tuple, set[str]], dict[tuple, set[str]]]:
    return _reported(tmp_path_factory.mktemp("zip-loops"), *_zip_source())


def _same_as_the_iterations(loops: dict[tuple, set[str]], ones: dict[tuple, set[str]]) -> None:
    assert set(loops) == set(ones)
    wrong = {}
    for case in loops:
        if loops[case] != ones[case]:
            wrong[case] = {"only in the loop": sorted(loops[case] - ones[case]),
                           "only one by one": sorted(ones[case] - loops[case])}
    assert not wrong, "\n".join(f"{case}: {diff}" for case, diff in list(wrong.items())[:10])


def test_a_loop_reports_what_its_iterations_report(reported) -> None:  # noqa: ANN001
    _same_as_the_iterations(*reported)


# mypy types ``g`` in ``for p, g in zip((a, b), (ga, gb))`` by the join of ``ga`` and ``gb``,
# which keeps V for S(i) and drops an axis only one of them is typed on; where no operand is a
# union the plugin is not asked to split, and the message shows the join: the same error, its
# operand's type less precise.  Compared with those details of the types left out (and the
# fix a Partial beside a shard gets, which names the shard's dim: reduce_scatter(..., dst=S(0))
# one by one, the generic reduce_scatter(..., dst=V) beside the join's V).
_JOIN_DETAILS = ((re.compile(r'S\[-?\d+, ("\w+")\]'), r"V[\1]"), (re.compile(r"Shard\(-?\d+\)"), "Varying"),
                 (re.compile(r'R\["dp"\], '), ""),
                 (re.compile(r"(a pending sum combined with per-rank values has no meaning);.*"
                             r"(  \[spmd-partial-varying\])$"), r"\1\2"))


def _as_joined(messages: set[str]) -> set[str]:
    out = set()
    for m in messages:
        for pattern, repl in _JOIN_DETAILS:
            m = pattern.sub(repl, m)
        out.add(m)
    return out


# Known misses (session 39): ``g.sum(0)`` in the S(0) iteration is a pending partial sum (engine
# ops.reduced_partial_error), but where the other iteration's gradient is ``R["dp"], V["tp"]``
# mypy joins the two to a plain ``V["tp"]``: no union, so promotion.Correlated is never asked
# to split the loop by iteration (as it does for the join of S(0) with P or R, a union), and
# the sum's shard dim is unknown in the loop.  Splitting a non-union join by iteration would
# ask every call whose operand is a loop variable: not done.  Exactly these rows are excused
# (the count is checked: a fix makes the test say so).
_KNOWN_ZIP_MISSES = 4


def _known_zip_miss(case: tuple, loop: set[str], ones: set[str]) -> bool:
    _, _, ga, _, gb, statement, _ = case
    missing = ones - loop
    return (statement == "p.add_(g.sum(0, keepdim=True))" and {ga, gb} == {"RdVt", "S0"}
            and not loop - ones and bool(missing)
            and all(m.startswith("sum over dim 0 of g (S(0) on") for m in missing))


def test_a_zip_loop_reports_what_its_iterations_report(reported_zip) -> None:  # noqa: ANN001
    """``for p, g in zip((a, b), (ga, gb))`` pairs ``a`` with ``ga`` and ``b`` with ``gb`` only
    (before the loop's names were split together, 660 of these 1800 loops reported a pairing
    no iteration makes; none missed an iteration's error).  The pending sums of a join that
    forgot the shard dim are known misses (``_KNOWN_ZIP_MISSES``)."""
    loops, ones = reported_zip
    joined_loops = {c: _as_joined(m) for c, m in loops.items()}
    joined_ones = {c: _as_joined(m) for c, m in ones.items()}
    known = [c for c in joined_loops if c in joined_ones
             and _known_zip_miss(c, joined_loops[c], joined_ones[c])]
    assert len(known) == _KNOWN_ZIP_MISSES, (
        f"{len(known)} known misses, not {_KNOWN_ZIP_MISSES}: update _KNOWN_ZIP_MISSES "
        f"(fewer: the join is split now; remove the excuse when none is left)")
    for c in known:
        joined_loops[c] = joined_ones[c]
    _same_as_the_iterations(joined_loops, joined_ones)


def test_the_iterations_report_errors(reported, reported_zip) -> None:  # noqa: ANN001
    """The comparison is not empty: many of the statements are errors for some type."""
    for loops, _ in (reported, reported_zip):
        assert sum(1 for found in loops.values() if found) > len(loops) // 4
