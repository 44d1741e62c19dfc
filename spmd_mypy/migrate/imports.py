"""Add ``import spmd`` and ``from spmd import I, R, ...`` to a module, once.

New imports go right after the module's leading block of imports (after the docstring and
``from __future__`` imports when there are no others); names are merged into an existing
top-level ``from spmd import ...``; nothing already imported is imported again.
"""

from __future__ import annotations

import libcst as cst

from .bindings import dotted_name


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _imports_spmd_module(statement: cst.CSTNode) -> bool:
    return _is_import_line(statement) and any(
        isinstance(s, cst.Import)
        and any(dotted_name(a.name) == "spmd" and a.asname is None for a in s.names)
        for s in statement.body  # type: ignore[attr-defined]
    )


def _from_spmd(statement: cst.CSTNode) -> cst.ImportFrom | None:
    if not _is_import_line(statement):
        return None
    for s in statement.body:  # type: ignore[attr-defined]
        if (
            isinstance(s, cst.ImportFrom)
            and not s.relative
            and s.module is not None
            and dotted_name(s.module) == "spmd"
            and not isinstance(s.names, cst.ImportStar)
        ):
            return s
    return None


def _imported_names(node: cst.ImportFrom) -> list[str]:
    assert not isinstance(node.names, cst.ImportStar)
    return [(dotted_name(a.asname.name) if a.asname else dotted_name(a.name)) or "" for a in node.names]


def _merge_names(node: cst.ImportFrom, new: list[str]) -> cst.ImportFrom:
    assert not isinstance(node.names, cst.ImportStar)
    aliases = list(node.names)
    separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if len(aliases) > 1 and isinstance(aliases[0].comma, cst.Comma):
        separator = aliases[0].comma
        if isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace):
            ws = separator.whitespace_after
            separator = separator.with_changes(
                whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace(newline=ws.first_line.newline), empty_lines=[])
            )
    last_comma = aliases[-1].comma
    added = [cst.ImportAlias(name=cst.Name(name)) for name in new]
    existing = _imported_names(node)
    simple = all(a.asname is None for a in aliases)
    if simple and existing == sorted(existing):
        merged = sorted(aliases + added, key=lambda a: dotted_name(a.name) or "")
    else:
        merged = aliases + added
    laid_out = []
    for i, alias in enumerate(merged):
        if i == len(merged) - 1:
            laid_out.append(alias.with_changes(comma=last_comma))
        elif any(alias is a for a in added) or alias is aliases[-1] or not isinstance(alias.comma, cst.Comma):
            laid_out.append(alias.with_changes(comma=separator))
        else:
            laid_out.append(alias)
    return node.with_changes(names=laid_out)


def add_spmd_imports(module: cst.Module, *, need_module: bool, names: set[str]) -> cst.Module:
    body: list[cst.BaseStatement] = list(module.body)
    has_module = any(_imports_spmd_module(s) for s in body)
    from_index = next((i for i, s in enumerate(body) if _from_spmd(s) is not None), None)
    imported = set()
    for statement in body:
        node = _from_spmd(statement)
        if node is not None:
            imported.update(_imported_names(node))
    missing = sorted(names - imported)

    if missing and from_index is not None:
        statement = body[from_index]
        assert isinstance(statement, cst.SimpleStatementLine)
        node = _from_spmd(statement)
        assert node is not None
        merged = [_merge_names(s, missing) if s is node else s for s in statement.body]
        body[from_index] = statement.with_changes(body=merged)
        missing = []

    new_statements: list[cst.BaseStatement] = []
    if need_module and not has_module:
        new_statements.append(cst.parse_statement("import spmd"))
    if missing:
        new_statements.append(cst.parse_statement(f"from spmd import {', '.join(missing)}"))
    if not new_statements:
        return module.with_changes(body=body)

    # After the leading imports; else after the docstring and __future__ imports; else first.
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    while index < len(body) and _is_import_line(body[index]):
        index += 1
    after_imports = index > 0 and _is_import_line(body[index - 1])
    if not after_imports and index < len(body):
        following = body[index]
        assert isinstance(following, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        new_statements[0] = new_statements[0].with_changes(leading_lines=following.leading_lines)
        body[index] = following.with_changes(leading_lines=[cst.EmptyLine()])
    body[index:index] = new_statements
    # An empty file has no trailing newline to keep; the added lines need one.
    return module.with_changes(body=body, has_trailing_newline=module.has_trailing_newline or not module.body)
