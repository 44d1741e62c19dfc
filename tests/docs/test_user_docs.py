"""What the user-facing docs (README.md, docs/*.md, examples/README.md) state, checked against
the code so that it cannot go stale:

- the README's table of the collectives' src/dst pairs is the engine's table
  (``spmd_mypy.engine.collectives.TRANSITIONS`` and its reduce ops), rendered by
  :func:`pairs_table`;
- the README's "Runtime API" section names every public name of the runtime package ``spmd``;
- the docs cite nothing a user cannot read (no "SPEC section N", no "issue N"), never tell a
  user to ``pip install spmd-mypy`` (it is not on PyPI), and a count of "all N examples"
  is the number of examples;
- examples/README.md shows the output of every example ``run_all.py`` runs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from spmd_mypy.engine import collectives as C

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
USER_DOCS = [README, ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TABLE_START = "<!-- generated: tests/docs/test_user_docs.py pairs_table() -->"
TABLE_END = "<!-- end of generated table -->"

sys.path.insert(0, str(ROOT / "examples"))
import _harness  # type: ignore[import-not-found]  # noqa: E402


def _section(text: str, heading: str) -> str:
    """The text of a ``## heading`` section, up to the next ``## `` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


# ---- the collectives' table -----------------------------------------------------------------


def _form(f: str, dim: str) -> str:
    return f"S({dim})" if f == "S" else f


def _row(t: C.Transition) -> str:
    # a forward S(i) -> S(j) (all_to_all) names two dims; every other S is one dim, S(i)
    src, dst = _form(t.src, "i"), _form(t.dst, "j" if t.swaps_dims else "i")
    steps = []
    for s in t.backward:
        if t.swaps_dims:  # the backward goes from the forward's dst dim back to its src dim
            steps.append(f"`{s.op}({_form(s.src, 'j')},{_form(s.dst, 'i')})`")
        else:
            steps.append(f"`{s.op}({_form(s.src, 'i')},{_form(s.dst, 'i')})`")
    notes = []
    if t.expert:
        notes.append("needs `expert_mode=True` (the value becomes N times itself)")
    if t.alias_of:
        notes.append(f"a spelling of `{t.alias_of}({src},{dst})`")
    return f"| `{t.op}` | {src} | {dst} | {' then '.join(steps)} | {'; '.join(notes)} |"


def pairs_table() -> str:
    """The README's table, from the engine's: one row per accepted (op, src, dst)."""
    order = {op: k for k, op in enumerate(C.COLLECTIVES + C.CONVERSIONS)}
    rows = sorted(C.TRANSITIONS.values(), key=lambda t: order[t.op])  # stable: table order
    def quoted(ops: tuple[str, ...], sep: str = ", ") -> str:
        return sep.join(f'`"{o}"`' for o in ops)

    lines = [
        "| op | src | dst | backward (run on the gradient) | note |",
        "|---|---|---|---|---|",
        *(_row(t) for t in rows),
        "",
        f"`op=` of `all_reduce`: {quoted(C.REDUCE_OPS)}; of `reduce_scatter`: "
        f"{quoted(C.SCATTER_REDUCE_OPS)} (default `\"sum\"`; `\"avg\"`: the sum divided by the "
        f"axis size, the same pairs). `all_reduce` with `op=` {quoted(C.NO_GRAD_REDUCE_OPS, ' / ')} "
        f"takes V or S(i) and gives R or I, with no gradient.",
        *(f"`{op}` {src} -> {dst} keeps the local data and has no gradient: only on a value "
          f"that carries none (under `torch.no_grad()`, detached, a `.grad`)."
          for op, src, dst in sorted(C.NO_GRAD_TRANSITIONS)),
    ]
    return "\n".join(lines)


def test_readme_collectives_table_is_the_engines() -> None:
    text = README.read_text()
    assert TABLE_START in text and TABLE_END in text, "README.md lost its collectives table"
    shown = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert shown == pairs_table(), (
        "README.md's table of the collectives differs from the engine's: paste the output of\n"
        "python -c 'import sys; sys.path[:0] = [\"tests/docs\", \"examples\"]; "
        "import test_user_docs as t; print(t.pairs_table())'\n\n" + pairs_table())


def test_table_rows_are_the_engines_pairs() -> None:
    """Each row read back (op, src, dst) is a pair the engine accepts, and every pair has a row."""
    rows = {tuple(cell.strip().strip("`") for cell in line.split("|")[1:4])
            for line in pairs_table().splitlines() if line.startswith("| `")}
    engine = {(t.op, _form(t.src, "i"), _form(t.dst, "j" if t.swaps_dims else "i"))
              for t in C.TRANSITIONS.values()}
    assert rows == engine
    assert len(rows) == len(C.TRANSITIONS)


# ---- the runtime API ------------------------------------------------------------------------


def test_runtime_api_section_names_every_public_name() -> None:
    import spmd

    section = _section(README.read_text(), "Runtime API")
    missing = [name for name in spmd.__all__
               if not re.search(rf"`(spmd\.)?{re.escape(name)}\b", section)]
    assert not missing, f"README.md's Runtime API section does not document {missing}"


# ---- references and commands a user can follow ----------------------------------------------


def test_docs_cite_no_spec_and_no_issue_numbers() -> None:
    bad = []
    for doc in USER_DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if re.search(r"\bSPEC\b|\b[Ii]ssue \d+", line):
                bad.append(f"{doc.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "references a user cannot follow:\n" + "\n".join(bad)


def test_docs_never_install_spmd_mypy_from_pypi() -> None:
    bad = [f"{doc.relative_to(ROOT)}:{n}" for doc in USER_DOCS
           for n, line in enumerate(doc.read_text().splitlines(), 1)
           if re.search(r"pip install spmd-mypy\b", line)]
    assert not bad, f"spmd-mypy is not on PyPI: install it from a checkout ({bad})"


_NUMBERS = {w: k for k, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def test_example_counts_in_docs() -> None:
    bad = []
    for doc in USER_DOCS:
        for m in re.finditer(r"\ball (\w+) examples\b", doc.read_text()):
            word = m.group(1)
            count = int(word) if word.isdigit() else _NUMBERS.get(word)
            if count is not None and count != len(_harness.EXAMPLES):
                bad.append(f"{doc.relative_to(ROOT)}: {m.group(0)!r}")
    assert not bad, f"there are {len(_harness.EXAMPLES)} examples: {bad}"


def test_examples_readme_shows_every_example_row() -> None:
    text = (ROOT / "examples" / "README.md").read_text()
    block = text.split("\n```\nexample ", 1)[1].split("```", 1)[0]
    rows = [line.split()[0] for line in block.splitlines()[1:]
            if line.strip() and not line.startswith("tolerance")]
    assert rows == list(_harness.EXAMPLES)
