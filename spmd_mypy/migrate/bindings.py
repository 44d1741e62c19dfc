"""Which names a module binds, and to what: enough to tell Megatron's mapping functions apart.

A deliberately small analysis, file-wide rather than per scope: a name bound by an import from a
Megatron module *and* bound some other way anywhere in the file is ambiguous, and calls through it
are reported rather than migrated.  Relative imports are resolved against the directory names of
the file, so ``from .mappings import X`` in ``.../megatron/core/tensor_parallel/layers.py`` is
``megatron.core.tensor_parallel.mappings.X`` whether or not the directories are packages.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from .table import MAPPINGS_BY_NAME, MEGATRON_MAPPING_MODULES, Mapping


if TYPE_CHECKING:
    from .locate import Locator

def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def module_of_path(path: Path) -> list[str]:
    """The dotted parts a file's directories and name give it: ``[..., "tensor_parallel", "layers"]``.

    The whole absolute path counts (matching is by suffix), so no package root is needed.
    """
    parts = list(path.resolve().parent.parts[1:])  # drop the root ("/")
    if path.stem != "__init__":
        parts.append(path.stem)
    return parts


def is_megatron_mapping_module(module: str) -> bool:
    return any(module == m or module.endswith("." + m) for m in MEGATRON_MAPPING_MODULES)


def target_names(node: cst.CSTNode) -> list[str]:
    """The names an assignment target binds (``a``, ``a, (b, *c)``; not ``a.x`` or ``a[0]``)."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [n for element in node.elements for n in target_names(element.value)]
    if isinstance(node, cst.StarredElement):
        return target_names(node.value)
    return []


@dataclass
class Import:
    local_name: str
    qualified: str  # what the local name refers to: "megatron.core.tensor_parallel.X"
    statement: cst.Import | cst.ImportFrom  # locate it with the Locator


@dataclass
class ModuleBindings:
    """File-wide: every import (anywhere, with where it is) and every other binding of a name."""

    module_parts: list[str]
    is_package: bool = False  # an __init__.py: its "." is itself
    imports: dict[str, list[Import]] = field(default_factory=lambda: defaultdict(list))
    other: set[str] = field(default_factory=set)
    top_level_functions: set[str] = field(default_factory=set)
    star_modules: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        return ".".join(self.module_parts)

    def qualified_names(self, expr: cst.BaseExpression) -> set[str]:
        """What a name or attribute chain may refer to (empty when unknown)."""
        dotted = dotted_name(expr)
        if dotted is None:
            return set()
        head, _, rest = dotted.partition(".")
        suffix = f".{rest}" if rest else ""
        found = {imp.qualified + suffix for imp in self.imports.get(head, ())}
        if head in self.top_level_functions:
            found.add(f"{self.module}.{head}{suffix}")
        if not found and head not in self.other:
            found = {f"{m}.{head}{suffix}" for m in self.star_modules}
        return found

    def describe(self, qualified: str) -> str:
        """A qualified name for messages: this file's and its package's names relative."""
        if qualified.startswith(self.module + "."):
            return f"this file's `{qualified[len(self.module) + 1:]}`"
        package = ".".join(self.module_parts if self.is_package else self.module_parts[:-1])
        if package and qualified.startswith(package + "."):
            return f"`.{qualified[len(package) + 1:]}`"
        return f"`{qualified}`"

    def is_rebound(self, expr: cst.BaseExpression) -> bool:
        """True when the head name is also bound other than by one import (so it is ambiguous)."""
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        head = dotted.partition(".")[0]
        bound_as_function = head in self.top_level_functions
        n_imports = len({imp.qualified for imp in self.imports.get(head, ())})
        others = head in self.other and not bound_as_function
        return n_imports + bound_as_function + others > 1

    def head_name(self, expr: cst.BaseExpression) -> str | None:
        dotted = dotted_name(expr)
        return None if dotted is None else dotted.partition(".")[0]

    def binds_other_than(self, name: str, qualified: str, *, star_imports_may_bind: bool = True) -> bool:
        """Is ``name`` bound in the file to anything but ``qualified`` (``S`` but not to spmd.S)?"""
        if name in self.other or name in self.top_level_functions:
            return True
        if any(imp.qualified != qualified for imp in self.imports.get(name, ())):
            return True
        if not star_imports_may_bind:
            return False
        # A star import may bind it; only `from spmd import *` is known to bind it right.
        return any(m != qualified.rpartition(".")[0] for m in self.star_modules)


def megatron_mapping(bindings: ModuleBindings, func: cst.BaseExpression) -> tuple[Mapping | None, str]:
    """The mapping a call's function is; else (None, why not) when it has a mapping's name.

    The name is the one the function is imported as (``reduce_from`` in ``from ... import
    reduce_from_tensor_model_parallel_region as reduce_from``) or the one written at the call.
    The second item is "" when the function has no mapping's name at all.
    """
    dotted = dotted_name(func)
    if dotted is None:
        return None, ""
    qualified = bindings.qualified_names(func)
    megatron: set[str] = set()
    for name in qualified:
        module, _, attribute = name.rpartition(".")
        if attribute in MAPPINGS_BY_NAME and is_megatron_mapping_module(module):
            megatron.add(attribute)
    named = {q.rpartition(".")[2] for q in qualified} | {dotted.rpartition(".")[2]}
    if not megatron and not (named & MAPPINGS_BY_NAME.keys()):
        return None, ""
    if len(megatron) == 1 and not bindings.is_rebound(func):
        return MAPPINGS_BY_NAME[megatron.pop()], ""
    if megatron:
        head = bindings.head_name(func)
        return None, f"`{head}` is bound more than once in this file; cannot tell which `{dotted}` this is"
    if qualified:
        where = ", ".join(sorted(bindings.describe(q) for q in qualified))
        return None, f"`{dotted}` is {where}, not Megatron's"
    return None, f"cannot tell where `{dotted}` comes from (not imported from a Megatron tensor_parallel module)"


class BindingCollector(cst.CSTVisitor):
    """Fills a :class:`ModuleBindings` for one module, registering calls and imports to locate."""

    def __init__(self, path: Path, locator: Locator) -> None:
        super().__init__()
        self.bindings = ModuleBindings(module_parts=module_of_path(path), is_package=path.stem == "__init__")
        self.locator = locator
        self._function_depth = 0
        self._class_depth = 0

    def _absolute_module(self, node: cst.ImportFrom) -> str:
        module = dotted_name(node.module) if node.module is not None else None
        level = len(node.relative)
        if level == 0:
            return module or ""
        package = self.bindings.module_parts
        if not self.bindings.is_package:
            package = package[:-1]  # a module's "." is its package
        package = package[: len(package) - (level - 1)]
        return ".".join(package + ([module] if module else []))

    def visit_Call(self, node: cst.Call) -> None:
        self.locator.register(node)

    def visit_Import(self, node: cst.Import) -> bool:
        self.locator.register(node)
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None:
                local = target_names(alias.asname.name)
                for name in local:
                    self.bindings.imports[name].append(Import(name, full, node))
            else:
                head = full.partition(".")[0]
                self.bindings.imports[head].append(Import(head, head, node))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.locator.register(node)
        module = self._absolute_module(node)
        if isinstance(node.names, cst.ImportStar):
            self.bindings.star_modules.append(module)
            return False
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            local = target_names(alias.asname.name) if alias.asname is not None else [name]
            for local_name in local:
                self.bindings.imports[local_name].append(Import(local_name, f"{module}.{name}", node))
        return False

    def _bind(self, node: cst.CSTNode) -> None:
        self.bindings.other.update(target_names(node))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:  # with ... as x, except E as x
        self._bind(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        self._bind(node.name)

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._bind(item.name)

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self._bind(node.name)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self._bind(node.name)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name)
        self._class_depth += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class_depth -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._function_depth == 0 and self._class_depth == 0:
            self.bindings.top_level_functions.add(node.name.value)
        else:
            self._bind(node.name)
        self._function_depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._function_depth -= 1
