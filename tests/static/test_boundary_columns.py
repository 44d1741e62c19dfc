"""Where boundary errors point: an argument's spmd-mismatch at the argument (its line and
column, as mypy's own [arg-type]; it pointed at the call), an item of a displayed tuple
returned at that item (``return x, x`` with the second one wrong pointed at the first).
The case files do not show columns: one mypy run with ``--show-column-numbers``."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

SOURCE = '''
import spmd
from spmd import I, P, R, Tensor, V

def two(a: Tensor[R["tp"]], b: Tensor[R["dp", "tp"]]) -> None: ...

def f(v: Tensor[V["tp"]], p: Tensor[P["dp", "tp"]]) -> None:
    two(v,
        p)
    two(b=p, a=v)

def pair(x: Tensor[V["tp"]]) -> tuple[Tensor[V["tp"]], Tensor[R["tp"]]]:
    return x, x
'''


def test_columns(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "m.py").write_text(textwrap.dedent(SOURCE).lstrip())
    out = run_mypy(tmp_path, "--show-column-numbers", "--no-error-summary", "m.py")
    where = [(int(m[1]), int(m[2]), m[3]) for m in re.finditer(
        r"^m\.py:(\d+):(\d+): error: (argument \w+|the return value \w+)", out, re.M)]
    assert where == [
        (7, 9, "argument v"),           # two(v, ...): at v, not at two
        (8, 9, "argument p"),           # the call's second line
        (9, 11, "argument p"),          # b=p: at p
        (9, 16, "argument v"),
        (12, 15, "the return value x"),  # return x, x: the second x
    ], out
