"""One value per parsed file (:class:`TreeMemo`) or per function body (:class:`FunctionMemo`),
computed once: the plugin's per-file facts (gradient-free regions, whether the file imports
spmd, its renamed redefinitions, ...) and per-function ones (the sizes its locals hold, the
names a raw collective writes, ...).

Keyed by the tree's id and checked by identity, so a tree freed and its id reused by a new
tree is computed again; and by the identity of the tree's statement list, because the daemon
(dmypy) merges a re-parsed file into the same tree object (mypy/server/astmerge.py copies the
new tree's state into the old one): the same tree with new statements is computed again.
Bounded, for a long-lived daemon.  The entry keeps its tree alive.
"""

from __future__ import annotations

from typing import Callable, Final, Generic, TypeVar

from mypy.nodes import Block, FuncDef, MypyFile, Statement

T = TypeVar("T")

MISSING: Final = object()  # ValueMemo.get: no answer kept for the key


class TreeMemo(Generic[T]):
    def __init__(self, compute: Callable[[MypyFile], T], limit: int = 10_000) -> None:
        self.compute = compute
        self.limit = limit
        self._by_tree: dict[int, tuple[MypyFile, list[Statement], T]] = {}
        # the entry asked last (hooks ask for the file being checked again and again): the
        # same test, without the dict lookup
        self._last: tuple[MypyFile, list[Statement], T] | None = None

    def get(self, tree: MypyFile) -> T:
        last = self._last
        if last is not None and last[0] is tree and last[1] is tree.defs:
            return last[2]
        cached = self._by_tree.get(id(tree))
        if cached is None or cached[0] is not tree or cached[1] is not tree.defs:
            return self.put(tree, self.compute(tree))
        self._last = cached
        return cached[2]

    def put(self, tree: MypyFile, value: T) -> T:
        """Record ``value`` for ``tree`` as it is now (computed elsewhere, e.g. in one walk
        with another fact)."""
        if len(self._by_tree) > self.limit:
            self._by_tree.clear()
        entry = (tree, tree.defs, value)
        self._by_tree[id(tree)] = entry
        self._last = entry
        return value


class FunctionMemo(Generic[T]):
    """One value per function body: :class:`TreeMemo`'s keying for a ``FuncDef``.  Keyed by
    the function's id and checked by the identity of the function and of its body (the daemon
    merges a re-parsed function into the old object with the new body: computed again).
    Bounded, for a long-lived daemon; the entry keeps its function alive."""

    def __init__(self, compute: Callable[[FuncDef], T], limit: int = 10_000) -> None:
        self.compute = compute
        self.limit = limit
        self._by_func: dict[int, tuple[FuncDef, Block, T]] = {}

    def get(self, func: FuncDef) -> T:
        cached = self._by_func.get(id(func))
        if cached is not None and cached[0] is func and cached[1] is func.body:
            return cached[2]
        value = self.compute(func)
        if len(self._by_func) > self.limit:
            self._by_func.clear()
        self._by_func[id(func)] = (func, func.body, value)
        return value


class ValueMemo(Generic[T]):
    """Answers of a pure rule by a key of plain values (the literals a call states, engine
    types by their ids with the types kept in the answer): :meth:`get` gives :data:`MISSING`
    where none is kept.  A key with an unhashable part (a list read from a call) is never
    kept: the rule answers afresh.  Bounded (cleared when full), for a long-lived daemon."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._table: dict[object, T] = {}

    def get(self, key: object) -> object:
        try:
            return self._table.get(key, MISSING)
        except TypeError:  # an unhashable part
            return MISSING

    def put(self, key: object, value: T) -> T:
        table = self._table
        if len(table) >= self.limit:
            table.clear()
        try:
            table[key] = value
        except TypeError:  # an unhashable part: not kept
            pass
        return value
