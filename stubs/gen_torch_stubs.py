"""Write the partial stub package ``torch-stubs``: the signatures torch's wheel does not ship.

``torch.linalg``, ``torch.special`` and ``torch.fft`` bind their functions from the extension
modules ``torch._C._linalg``, ``torch._C._special`` and ``torch._C._fft``
(``vector_norm = _add_docstr(_linalg.linalg_vector_norm, ...)``), for which torch 2.13 ships no
``.pyi``: to mypy every such function is ``Any``, so ``torch.linalg.vector_norm(g)`` of a Partial
gradient passed unchecked (the runtime check mode rejects it).  This script reads each public
function's signature line from its docstring (``linalg.vector_norm(x, ord=2, dim=None,
keepdim=False, *, dtype=None, out=None) -> Tensor``) and writes one stub per extension module:

- a tensor argument (``input``, ``x``, ``A``, ``B``, ``other``, ...) is ``Tensor``, a list of
  them ``Sequence[Tensor]``; every other parameter is ``Any`` (no false error on an ``ord="fro"``);
- the result is ``Tensor`` where the docstring says ``-> Tensor``, else ``Any`` (named tuples);
- names of the module no public function binds are ``(*args: Any, **kwargs: Any) -> Any``.

The package is partial (``py.typed``: ``partial``): mypy takes every other torch module from
torch itself.  Run with the pinned torch; tests/static/test_torch_stubs.py checks the files
are what this script writes::

    python stubs/gen_torch_stubs.py          # rewrites stubs/torch-stubs/_C/_*.pyi
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "torch-stubs"
MODULES = (("linalg", "_linalg"), ("special", "_special"), ("fft", "_fft"))
TENSOR_PARAMS = frozenset("input x y A B other LD pivots LU tau self".split())
TENSOR_LIST_PARAMS = frozenset({"tensors"})
_BIND = re.compile(r"^(\w+)\s*=\s*_add_docstr\(\s*_(\w+)\.(\w+)", re.M)
_NAME = re.compile(r"^(torch\.)?[\w.]*\w\($")


def _param(text: str) -> tuple[str, bool] | None:
    """``ord=2`` -> ("ord", True); ``bool pivot=True`` -> ("pivot", True); ``*`` -> None."""
    name, has_default = text.split("=", 1)[0].strip(), "=" in text
    name = name.split()[-1]  # a type word before the name (lu_factor's "bool pivot")
    return (name, has_default) if name.isidentifier() else None


def _split_params(params: str) -> list[str]:
    """Top-level commas only (``dim=(-2, -1)``)."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def _signature(first: str) -> tuple[str, str] | None:
    """``name(params) -> ret``: the parameters (up to the matching parenthesis) and the result."""
    open_at = first.find("(")
    if open_at < 0 or not _NAME.match(first[:open_at + 1]):
        return None
    depth = 0
    for i in range(open_at, len(first)):
        depth += {"(": 1, ")": -1}.get(first[i], 0)
        if depth == 0:
            rest = first[i + 1:].strip()
            return first[open_at + 1:i], rest[2:].strip() if rest.startswith("->") else ""
    return None


def stub_line(c_name: str, doc: str | None) -> str | None:
    first = (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""
    sig = _signature(first.strip())
    if sig is None:
        return None
    params, ret = sig
    parts, keyword_only = [], False
    for p in _split_params(params):
        if p == "*":
            keyword_only = True
            parts.append("*")
            continue
        parsed = _param(p)
        if parsed is None:
            return None
        name, has_default = parsed
        typ = ("Tensor" if name in TENSOR_PARAMS else
               "Sequence[Tensor]" if name in TENSOR_LIST_PARAMS else "Any")
        parts.append(f"{name}: {typ}" + (" = ..." if has_default or keyword_only and name == "out" else ""))
    return f"def {c_name}({', '.join(parts)}) -> {'Tensor' if ret == 'Tensor' else 'Any'}: ..."


def render(public: str, c_module: str) -> str:
    import torch

    pub = getattr(torch, public)
    ext = getattr(torch._C, c_module)
    lines = [f'"""torch._C.{c_module}: written by stubs/gen_torch_stubs.py from torch {torch.__version__}'
             f' (torch.{public}\'s docstrings)."""', "",
             "from typing import Any, Sequence", "", "from torch import Tensor", ""]
    bound: dict[str, str] = {}
    for name, module, c_name in _BIND.findall(inspect.getsource(pub)):
        if module == c_module[1:] and c_name not in bound:
            line = stub_line(c_name, getattr(pub, name).__doc__)
            if line is not None:
                bound[c_name] = line
    for c_name in sorted(n for n in dir(ext) if not n.startswith("__")):
        lines.append(bound.get(c_name, f"def {c_name}(*args: Any, **kwargs: Any) -> Any: ..."))
    return "\n".join(lines) + "\n"


def files() -> dict[Path, str]:
    out = {OUT / "py.typed": "partial\n"}
    for public, c_module in MODULES:
        out[OUT / "_C" / f"{c_module}.pyi"] = render(public, c_module)
    return out


def main() -> int:
    for path, text in files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
