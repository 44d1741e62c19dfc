"""Migrate one file's source: parse, rewrite, optionally annotate, add the imports it needs."""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst

from .annotate import Annotator
from .bindings import BindingCollector, ModuleBindings
from .imports import add_spmd_imports
from .locate import Locator
from .rewrite import ERROR, NOTE, Finding, MappingCallRewriter, MarkerStyle, Options
from .table import MAPPINGS

_MAPPING_NAME = re.compile(r"\b(" + "|".join(m.megatron_name for m in MAPPINGS) + r")\b")
_SPMD_NAME = re.compile(r"\bspmd\b")
SPMD_NAMES = ("Tensor", "R", "I", "V", "P", "S")


@dataclass
class FileResult:
    path: Path
    original: str = ""
    migrated: str | None = None  # None when not parsed (filtered out, or a parse error)
    encoding: str = "utf-8"
    findings: list[Finding] = field(default_factory=list)
    rewritten: int = 0
    annotated: int = 0
    parse_error: Finding | None = None

    @property
    def changed(self) -> bool:
        return self.migrated is not None and self.migrated != self.original

    def findings_after_write(self) -> list[Finding]:
        """The findings with lines moved to where they are in the migrated file."""
        if not self.changed:
            return list(self.findings)
        assert self.migrated is not None
        matcher = difflib.SequenceMatcher(
            None, self.original.splitlines(), self.migrated.splitlines(), autojunk=False
        )
        opcodes = matcher.get_opcodes()

        def moved(line: int) -> int:
            index = line - 1
            for _tag, i1, i2, j1, j2 in opcodes:
                if i1 <= index < i2:
                    return j1 + min(index - i1, max(j2 - j1 - 1, 0)) + 1
            return line

        return [replace(f, line=moved(f.line)) for f in self.findings]


def might_need_migration(code: str, options: Options) -> bool:
    """A cheap filter: a file that names no mapping function (nor spmd, with --annotate) is skipped."""
    return bool(_MAPPING_NAME.search(code) or (options.annotate and _SPMD_NAME.search(code)))


def marker_style(bindings: ModuleBindings) -> MarkerStyle:
    """Spell ``I`` bare unless the file binds the name to something else (then ``spmd.I``)."""
    taken = {name for name in SPMD_NAMES if bindings.binds_other_than(name, f"spmd.{name}")}
    return MarkerStyle(frozenset(taken))


def _spmd_is_taken(bindings: ModuleBindings) -> str:
    if bindings.binds_other_than("spmd", "spmd", star_imports_may_bind=False):
        return "the name `spmd` is already bound in this file to something other than the spmd package"
    return ""


def _names_in_use(code: str) -> set[str] | None:
    """Names read outside import statements, and string constants (``__all__``); by ast (fast)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None  # syntax newer than this Python: no notes
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)
    return used


def _unused_import_notes(code: str, bindings: ModuleBindings, locator: Locator, heads: set[str]) -> list[Finding]:
    """One note per import statement whose names the rewritten calls used and nothing uses now."""
    used = _names_in_use(code)
    if used is None:
        return []
    unused: dict[tuple[int, int], list[str]] = {}
    for head in sorted(heads - used):
        for imp in bindings.imports.get(head, ()):
            unused.setdefault(locator.position(imp.statement), []).append(f"`{head}`")
    return [
        Finding(
            line, column, NOTE,
            f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} no longer used; the import is left in place",
        )
        for (line, column), names in sorted(unused.items())
    ]


def _decode(code: bytes | str) -> tuple[str, str]:
    """The text and encoding of a source (PEP 263 cookie or BOM, else UTF-8); raises on bad bytes."""
    if isinstance(code, str):
        return code, "utf-8"
    encoding = tokenize.detect_encoding(io.BytesIO(code).readline)[0]
    return code.decode(encoding), encoding  # "utf-8-sig" drops the BOM here and writes it back


def migrate_source(code: bytes | str, path: Path, options: Options) -> FileResult:
    """Files that name no mapping function (and no ``spmd``, with --annotate) are not parsed."""
    result = FileResult(path)
    try:
        result.original, result.encoding = _decode(code)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        result.parse_error = Finding(1, 1, ERROR, f"cannot decode: {error}")
        return result
    if not might_need_migration(result.original, options):
        return result
    try:
        module = cst.parse_module(result.original)
    except cst.ParserSyntaxError as error:
        message = " ".join(error.message.split())
        result.parse_error = Finding(error.editor_line, error.editor_column, ERROR, f"cannot parse: {message}")
        return result

    locator = Locator(module, result.original)
    collector = BindingCollector(path, locator)
    module.visit(collector)
    bindings = collector.bindings
    style = marker_style(bindings)
    rewriter = MappingCallRewriter(bindings, locator, options, style, blocked=_spmd_is_taken(bindings))
    new_module = module.visit(rewriter)
    result.findings.extend(rewriter.findings)
    result.rewritten = rewriter.stats.rewritten
    needed = set(rewriter.stats.markers)

    if options.annotate and not _spmd_is_taken(bindings):
        annotator = Annotator(bindings, style)
        new_module = new_module.visit(annotator)
        result.annotated = annotator.stats.annotated
        needed |= annotator.stats.markers

    if result.rewritten or result.annotated:
        new_module = add_spmd_imports(
            new_module,
            need_module=bool(result.rewritten or style.qualified & needed),
            names=style.imports_for(needed),
        )
        result.migrated = new_module.code
    else:
        result.migrated = result.original
    if result.rewritten:
        notes = _unused_import_notes(result.migrated, bindings, locator, rewriter.stats.used_heads)
        result.findings.extend(notes)
    result.findings.sort(key=lambda f: (f.line, f.column))
    return result
