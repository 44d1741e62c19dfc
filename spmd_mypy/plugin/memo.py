"""One value per parsed file, computed once: the plugin's per-file facts (gradient-free
regions, whether the file imports spmd, its renamed redefinitions, ...).

Keyed by the tree's id and checked by identity, so a tree freed and its id reused by a new
tree is computed again; bounded, for a long-lived daemon.  The entry keeps its tree alive.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from mypy.nodes import MypyFile

T = TypeVar("T")


class TreeMemo(Generic[T]):
    def __init__(self, compute: Callable[[MypyFile], T], limit: int = 10_000) -> None:
        self.compute = compute
        self.limit = limit
        self._by_tree: dict[int, tuple[MypyFile, T]] = {}

    def get(self, tree: MypyFile) -> T:
        cached = self._by_tree.get(id(tree))
        if cached is None or cached[0] is not tree:
            return self.refresh(tree)
        return cached[1]

    def refresh(self, tree: MypyFile) -> T:
        """Compute again (the daemon merges a re-parsed file into the same tree object)."""
        value = self.compute(tree)
        if len(self._by_tree) > self.limit:
            self._by_tree.clear()
        self._by_tree[id(tree)] = (tree, value)
        return value
