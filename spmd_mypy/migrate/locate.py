"""Line and column of calls and imports, for the report, without a full libcst position pass.

libcst's ``PositionProvider`` regenerates the whole file with position tracking, which costs
more than the rest of a migration.  The standard ``ast`` module gives the same positions
for a fraction of that: the k-th call of ``f`` (or the k-th import statement) in source order
is the same node in both trees.  Each libcst node is registered in source order (pre-order) as
it is visited; when the two trees disagree on how many nodes of a key there are, or ``ast``
cannot parse the file (syntax newer than this Python), the locator falls back to libcst.
"""

from __future__ import annotations

import ast
from collections import defaultdict

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .bindings import dotted_name

IMPORT_KEY = "import"


def _call_key(dotted: str | None) -> str | None:
    return None if dotted is None else f"call:{dotted}"


def _ast_dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _ast_dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _ast_positions(code: str) -> dict[str, list[tuple[int, int]]] | None:
    """Byte positions ``(line, byte column)`` per key, in source order; None if ast cannot parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    positions: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            key = _call_key(_ast_dotted(node.func))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            key = IMPORT_KEY
        else:
            continue
        if key is not None:
            positions[key].append((node.lineno, node.col_offset))
    for found in positions.values():
        found.sort()
    return positions


class Locator:
    def __init__(self, module: cst.Module, code: str) -> None:
        self._module = module
        self._lines = code.splitlines()
        self._ast = _ast_positions(code)
        self._registered: dict[int, tuple[str, int]] = {}  # id(node) -> (key, index)
        self._counts: dict[str, int] = defaultdict(int)
        self._libcst_positions: object | None = None

    def register(self, node: cst.CSTNode) -> None:
        """Call for every Call, Import and ImportFrom, in the order a visitor meets them."""
        if isinstance(node, cst.Call):
            key = _call_key(dotted_name(node.func))
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            key = IMPORT_KEY
        else:
            return
        if key is None:
            return
        self._registered[id(node)] = (key, self._counts[key])
        self._counts[key] += 1

    def _ast_agrees(self) -> bool:
        if self._ast is None:
            return False
        return all(len(self._ast.get(key, ())) == n for key, n in self._counts.items())

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based line and column (in characters) of where the node starts."""
        registered = self._registered.get(id(node))
        if registered is not None and self._ast_agrees():
            assert self._ast is not None
            key, index = registered
            line, byte_column = self._ast[key][index]
            text = self._lines[line - 1] if line <= len(self._lines) else ""
            return line, len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace")) + 1
        if self._libcst_positions is None:
            wrapper = MetadataWrapper(self._module, unsafe_skip_copy=True)
            self._libcst_positions = wrapper.resolve(PositionProvider)
        start = self._libcst_positions[node].start  # type: ignore[index]
        return start.line, start.column + 1
