"""Gradual typing at check time: the promotion of plain ``torch.Tensor``, and the wrapper every
check-time hook runs through.

mypy's "alt promotion" (the mechanism behind ``int`` -> native ``i64``) makes ``torch.Tensor``
a subtype of the canonical ``spmd._slots.Tensor[...]`` with any arguments, so a plain tensor
flows into typed positions and unannotated code gets no new errors.  (A ``_promote`` would
recurse: the canonical class subclasses torch.Tensor.)  It has a side effect: ``isinstance``
does not narrow a declared ``torch.Tensor`` to a subclass.  So it is on only while mypy checks
a module that meets SPMD types and off elsewhere: every check-time hook syncs it first
(:class:`Synced`), and the subtype caches of the promoted classes are reset on each switch.
It is never on while torch itself is analysed or written to the cache.

"Meets SPMD types": the module imports spmd, or it imports, directly or through other modules
of the project, a module that does (:class:`TypedImports`).  An unannotated caller of an
annotated module gets typed values (``list[Tensor[R["tp"]]]`` from a typed function, a typed
attribute): without the promotion, ``list`` being invariant, passing that list where
``list[torch.Tensor]`` is declared, or re-assigning a plain tensor to the variable, would be
new errors in code without annotations.

This module is compiled with the rest of the plugin: the wrapper runs at every hook.
"""

from __future__ import annotations

from typing import Any, Callable

from mypy.nodes import Import, ImportAll, ImportFrom, MypyFile, TypeInfo
from mypy.typeops import make_simplified_union
from mypy.types import Type
from mypy.typestate import type_state
from mypy.util import correct_relative_import

from .guard import RESULT, recover
from ..engine.types import UNTYPED
from .memo import TreeMemo
from .mypy_types import TENSOR, TypeBuilder

_PROMOTED = ("torch._tensor.Tensor", "torch.nn.parameter.Parameter")
UNION_CASES_MAX = 16


class Promotion:
    """Whether the module being checked uses SPMD types, and the promotion switched to match."""

    def __init__(self, types: TypeBuilder, lookup_info: Callable[[str], TypeInfo | None],
                 on_module: Callable[[object], None],
                 modules: Callable[[], dict[str, MypyFile] | None]) -> None:
        self.types = types
        self.lookup_info = lookup_info
        self.on_module = on_module  # called with mypy's error store when the module changes
        self.module: str | None = None  # the module the last sync saw
        self.wanted = False  # that module uses SPMD types
        self.promoted = False  # that module meets SPMD types (uses them or imports them)
        self.on = False
        self.typed_modules: set[str] = set()  # modules with a Tensor[...] annotation
        self._imports: TreeMemo[bool] = TreeMemo(uses_spmd)
        self.typed_imports = TypedImports(modules)

    def sync(self, api: object) -> None:
        tree = getattr(api, "tree", None)
        module = getattr(tree, "fullname", None)
        if module is not None and module != self.module:
            self.module = module
            msg = getattr(api, "msg", None)
            self.on_module(getattr(msg, "errors", None))
            self.wanted = module in self.typed_modules or (
                isinstance(tree, MypyFile) and self.imports_spmd(tree))
            self.promoted = self.wanted or self.typed_imports.reaches_spmd(module)
        self.set(self.promoted)

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        for name in _PROMOTED:
            if not self._switch(name, on):
                return
        self.on = on

    def narrowing(self, parameters: bool = False) -> None:
        """Off for ``isinstance``/``hasattr``/``type(x) is C`` narrowing, until the next hook:
        mypy does not narrow a declared type whose class has an alt promotion.  For
        isinstance only torch.Tensor's is switched off: a value narrowed to Parameter stays
        promoted, so ``[p]`` or ``y: Tensor[...] = p`` right after ``isinstance(p,
        nn.Parameter)`` still type without a hook in between.  ``parameters``: Parameter's
        too, for a value declared as a Parameter (``hasattr(p, "main_grad")`` on Megatron's
        parameters)."""
        for name in _PROMOTED if parameters else _PROMOTED[:1]:
            if self._switch(name, False):
                self.on = False

    def _switch(self, name: str, on: bool) -> bool:
        """Set one class's promotion; False when the canonical class is not known yet."""
        info = self.lookup_info(name)
        if info is None:
            return True
        current = info.alt_promote
        if on and current is None:
            untyped = self.types.to_instance(UNTYPED)
            if untyped is None:
                return False
            info.alt_promote = untyped
        elif not on and current is not None and current.type.fullname == TENSOR:
            info.alt_promote = None
        else:
            return True
        type_state.reset_all_subtype_caches_for(info)
        return True

    def imports_spmd(self, tree: MypyFile) -> bool:
        return self._imports.get(tree)

    def uses_spmd_types(self, tree: MypyFile | None, module: str | None) -> bool:
        return module in self.typed_modules or (tree is not None and self.imports_spmd(tree))

    def union_cases(self, ctx: Any) -> list[Any] | None:
        """An argument whose type is a union of typed tensors (``h`` after ``if c: h = x + b``
        under mypy's flexible redefinition) is typed member by member, as mypy does for a
        union receiver: one context per combination (at most 16), the results joined.
        None when no argument is such a union (the common case, kept cheap)."""
        if not self.wanted:
            return None  # a module without SPMD types: nothing is typed
        arg_types: list[list[Type]] = getattr(ctx, "arg_types", None) or []
        receiver: Type | None = getattr(ctx, "type", None)  # a method's receiver (mypy may
        # hand a union receiver to a reflected operator: ``b * h`` checks ``h.__rmul__(b)``)
        if not self._has_alternatives(receiver, arg_types):
            return None
        choices: list[tuple[int, int, list[Type]]] = []  # (-1, -1): the receiver
        slots: list[tuple[int, int, Type]] = [(-1, -1, receiver)] if receiver is not None else []
        slots += [(i, j, t) for i, group in enumerate(arg_types) for j, t in enumerate(group)]
        for i, j, t in slots:
            items = self.types.alternatives(t)
            if items is not None:
                members = [self.types.from_type(m) for m in items]
                if all(m is not None for m in members) and any(members):
                    choices.append((i, j, items))
        if not choices:
            return None
        combos: list[dict[tuple[int, int], Type]] = [{}]
        for i, j, items in choices:
            combos = [{**c, (i, j): m} for c in combos for m in items]
            if len(combos) > UNION_CASES_MAX:
                return None
        cases = []
        for combo in combos:  # an AttributeContext has a receiver and no arguments
            new = [list(group) for group in arg_types]
            fields: dict[str, object] = {"arg_types": new} if hasattr(ctx, "arg_types") else {}
            for (i, j), m in combo.items():
                if i < 0:
                    fields["type"] = m
                else:
                    new[i][j] = m
            cases.append(ctx._replace(**fields))
        return cases

    def _has_alternatives(self, receiver: Type | None, arg_types: list[list[Type]]) -> bool:
        """Whether any argument (or the receiver) is a union or a join of typed tensors."""
        types = self.types
        if receiver is not None and types.has_alternatives(receiver):
            return True
        for group in arg_types:
            for t in group:
                if types.has_alternatives(t):
                    return True
        return False


class TypedImports:
    """Which modules meet SPMD types through their imports: a module reaches spmd when it
    imports spmd, or imports a module of the project that reaches spmd::

        c.py (no annotations) -> lib.py (Tensor[...] from mytypes) -> mytypes.py -> spmd

    The import edges of a module are read from its symbol table (imported names, also for a
    module loaded from mypy's cache) and, for a parsed module, its import statements (those
    inside functions too).  Installed packages, typeshed and stub files are not followed:
    torch never counts, and megatron-core's stubs keep their own gradual rule.  Answers are
    kept until a file is parsed again (:meth:`reset`); a search that finds nothing marks
    every module it saw, so a whole build costs one pass over the project's import graph."""

    def __init__(self, modules: Callable[[], dict[str, MypyFile] | None]) -> None:
        self.modules = modules
        self._reaches: dict[str, bool] = {}

    def reset(self) -> None:
        self._reaches.clear()

    def reaches_spmd(self, start: str) -> bool:
        known = self._reaches.get(start)
        if known is not None:
            return known
        modules = self.modules()
        if modules is None:
            return False
        seen = {start}
        todo = [start]
        found = False
        while todo and not found:
            tree = modules.get(todo.pop())
            if tree is None or _is_installed(tree):
                continue
            for dep in _imported_modules(tree, modules):
                if _is_spmd(dep) or self._reaches.get(dep, False):
                    found = True
                    break
                if dep not in seen and dep not in self._reaches:  # a known False: nothing there
                    seen.add(dep)
                    todo.append(dep)
        if found:
            self._reaches[start] = True
        else:  # every module seen reaches only modules seen: none of them reaches spmd
            for module in seen:
                self._reaches[module] = False
        return found


def _is_installed(tree: MypyFile) -> bool:
    """An installed package, typeshed, or a stub file (a library's interface, as the Megatron
    stubs, which import spmd: megatron-core's own modules do not count as typed because
    of them, wherever the stubs are found)."""
    path = tree.path.replace("\\", "/")
    return tree.is_stub or "-packages/" in path or "/typeshed/" in path


def _imported_modules(tree: MypyFile, modules: dict[str, MypyFile]) -> set[str]:
    """The modules ``tree`` imports from (those mypy has loaded, and spmd's)."""
    own = tree.fullname
    found: set[str] = set()
    for sym in tree.names.values():
        node = sym.node
        name = node.fullname if node is not None else (sym.cross_ref or "")
        if not name or name == own or name.startswith(own + "."):
            continue  # defined here
        if isinstance(node, MypyFile) or name in modules:
            found.add(name)
            continue
        module = name.rpartition(".")[0]
        while module and module not in modules and not _is_spmd(module):
            module = module.rpartition(".")[0]
        if module:
            found.add(module)
    for imp in tree.imports:
        if isinstance(imp, Import):
            found.update(i for i, _ in imp.ids)
        elif isinstance(imp, (ImportFrom, ImportAll)):
            base, _ = correct_relative_import(own, imp.relative, imp.id, tree.is_package_init_file())
            found.add(base)
            if isinstance(imp, ImportFrom):
                found.update(sub for n, _ in imp.names if (sub := f"{base}.{n}") in modules)
    found.discard(own)
    return found


class Synced:
    """A check-time hook run after syncing the promotion, a union operand typed member by
    member (unless ``split_unions`` is off: a boundary compares the whole value)."""

    def __init__(self, promotion: Promotion, hook: Callable[[Any], Type], split_unions: bool = True) -> None:
        self.promotion = promotion
        self.hook = hook
        self.split_unions = split_unions

    def __call__(self, ctx: Any) -> Type:
        try:
            self.promotion.sync(ctx.api)
            cases: list[Any] | None = None
            if self.split_unions:
                try:
                    cases = self.promotion.union_cases(ctx)
                except Exception:  # noqa: BLE001 - never crash mypy: type the union as a whole
                    cases = None
            if cases is None:
                return self.hook(ctx)
            return make_simplified_union([self.hook(c) for c in cases])
        except Exception as e:  # noqa: BLE001 - never crash mypy (guard.py)
            return recover(ctx, RESULT, e)


def _is_spmd(module: str) -> bool:
    return module == "spmd" or module.startswith("spmd.")


def uses_spmd(file: MypyFile) -> bool:
    """Whether the file imports spmd."""
    for imp in file.imports:
        if isinstance(imp, Import):
            if any(_is_spmd(i) for i, _ in imp.ids):
                return True
        elif isinstance(imp, (ImportFrom, ImportAll)):
            if _is_spmd(imp.id):
                return True
    return False
