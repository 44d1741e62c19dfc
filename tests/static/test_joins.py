"""mypy's join of differently typed tensors keeps their kinds (spmd-stubs/_slots.pyi): a list
display of an R and a P tensor is a list of "R or P", read by the plugin as the union of the
two (TypeBuilder.members).  Checked for every combination of kinds, on a real mypy run, and
from mypy's cache."""

from __future__ import annotations

import ast
import itertools
import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import first_and_warm_runs, run_mypy, write_config  # noqa: E402

from spmd_mypy.plugin.mypy_types import MIXED_KINDS

REPO = Path(__file__).resolve().parents[2]
SLOTS = REPO / "stubs" / "spmd-stubs" / "_slots.pyi"
LEAVES = {"R": 'R["tp"]', "I": 'I["tp"]', "V": 'V["tp"]', "P": 'P["tp"]',
          "S0": 'S[0, "tp"]', "S1": 'S[1, "tp"]'}


def _ancestors(bases: dict[str, list[str]], name: str) -> set[str]:
    out: set[str] = set()
    todo = list(bases.get(name, []))
    while todo:
        b = todo.pop()
        if b not in out:
            out.add(b)
            todo.extend(bases.get(b, []))
    return out


def test_each_kind_is_under_every_set_that_holds_it() -> None:
    """The stub's lattice: R is a subclass of R_I, R_V, R_P, R_I_V, ... and of no set without
    R; the sets are exactly the plugin's MIXED_KINDS; S and V are siblings under V_S."""
    tree = ast.parse(SLOTS.read_text())
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [b.value.id for b in node.bases
                                if isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name)]
    sets = {n for n in bases if "_" in n and n != "V_S"}
    assert sets == set(MIXED_KINDS)
    for kind in ("R", "I", "V", "P"):
        above = _ancestors(bases, kind) & sets
        assert above == {n for n in sets if kind in MIXED_KINDS[n]}, kind
    assert "V" not in _ancestors(bases, "S") and {"V_S"} <= _ancestors(bases, "S")
    assert "V_S" in _ancestors(bases, "V")


def _expected(items: tuple[str, ...]) -> set[str]:
    """What the plugin reveals for an item of [items...]: each kind present; the S and V items
    together are one V, unless every item is an S of one dim (a set of kinds has no dims, so
    an S joined with another kind is a V)."""
    out = {f"Tensor[{LEAVES[k]}]" for k in items if k in ("R", "I", "P")}
    varying = {k for k in items if k in ("V", "S0", "S1")}
    if len(varying) == 1 and not out:
        out.add(f"Tensor[{LEAVES[varying.pop()]}]")
    elif varying:
        out.add('Tensor[V["tp"]]')
    return out


def test_every_join_of_kinds_is_their_set(tmp_path: Path) -> None:
    write_config(tmp_path)
    combos = [c for n in (2, 3, 4) for c in itertools.combinations(LEAVES, n)]
    params = ", ".join(f"{k.lower()}: Tensor[{v}]" for k, v in LEAVES.items())
    lines = ["import spmd", "from spmd import Tensor, R, I, V, P, S", "", f"def f({params}) -> None:"]
    for c in combos:
        lines.append(f"    spmd.reveal([{', '.join(k.lower() for k in c)}][0])")
    (tmp_path / "joins.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "joins.py")
    revealed: dict[int, set[str]] = {}
    for m in re.finditer(r"^joins\.py:(\d+): note: Revealed type is (.*)$", out, re.M):
        revealed[int(m.group(1))] = set(m.group(2).split(" | "))
    assert "error" not in out, out
    for i, c in enumerate(combos):
        assert revealed.get(5 + i) == _expected(c), (c, revealed.get(5 + i))


JOIN_A = '''
from typing import cast
import torch
from spmd import Tensor, P, R
p = cast(Tensor[P["tp"]], torch.zeros(4))
r = cast(Tensor[R["tp"]], torch.zeros(4))
XS = [p, r]
'''
JOIN_B = '''
import torch
from a import XS
torch.cat(XS)
'''


def test_a_join_from_a_cached_module(tmp_path: Path) -> None:
    """The join's kind set is a class of the stubs, so mypy's cache keeps it: a module that
    uses ``a.XS`` sees "R or P" in a warm run as in the first."""
    for out in first_and_warm_runs(tmp_path, textwrap.dedent(JOIN_A), textwrap.dedent(JOIN_B)):
        assert 'b.py:4: error: Partial on "tp" (XS[k]: Tensor[P["tp"]]) added to a Replicate value' in out, out
