"""``spmd-mypy migrate``: options, walking the paths, writing or diffing, reporting."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from types import MappingProxyType
from typing import TextIO

from .rewrite import NOT_MIGRATED, Options
from .source import FileResult, migrate_source
from .table import DEFAULT_GROUP_GETTERS, DEFAULT_TP_AXIS

EXIT_OK = 0
EXIT_FAILED = 1  # a file failed to parse or to be read (or, with --check, a file would change)
EXIT_USAGE = 2  # argparse's


def build_parser(prog: str = "spmd-mypy migrate") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Rewrite calls of Megatron's tensor-parallel mapping functions "
            "(copy_to_tensor_model_parallel_region, ...) to typed spmd collectives. "
            "Calls that cannot be mapped exactly are left alone and reported."
        ),
        epilog="The mapping table and the rules are in docs/migrate.md.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for *.py)")
    parser.add_argument("--diff", action="store_true", help="print a unified diff and write nothing")
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 when a file would be changed (with --diff: print the diff too, "
        "for CI and pre-commit)",
    )
    parser.add_argument(
        "--annotate", action="store_true",
        help="also annotate parameters and returns whose types the typed calls fix",
    )
    parser.add_argument(
        "--tp-axis", default=DEFAULT_TP_AXIS, metavar="NAME",
        help=f"the mesh axis of the tensor-parallel group (default: {DEFAULT_TP_AXIS})",
    )
    parser.add_argument(
        "--group-getter", action="append", default=[], metavar="NAME[=AXIS]",
        help="a function whose call returns the process group of AXIS (default axis: --tp-axis); "
        f"repeatable; always included: {', '.join(DEFAULT_GROUP_GETTERS)}",
    )
    parser.add_argument(
        "--group-expr", action="append", default=[], metavar="EXPR[=AXIS]",
        help="an expression that is the process group of AXIS (default axis: --tp-axis), "
        "e.g. 'self.tp_group'; compared ignoring whitespace; repeatable",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print no summary line")
    return parser


def _split_axis(value: str, default_axis: str) -> tuple[str, str]:
    name, sep, axis = value.rpartition("=")
    if not sep:
        return value, default_axis
    # ``=`` may occur inside an expression (``f(a=b)``): take the last one only if an axis follows.
    if axis.strip().isidentifier():
        return name.strip(), axis.strip()
    return value, default_axis


def options_from_args(args: argparse.Namespace) -> Options:
    getters = dict(_split_axis(v, args.tp_axis) for v in args.group_getter)
    exprs = dict(_split_axis(v, args.tp_axis) for v in args.group_expr)
    return Options(
        tp_axis=args.tp_axis,
        group_getters=MappingProxyType(getters),
        group_exprs=MappingProxyType(exprs),
        annotate=args.annotate,
    )


def python_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    """The *.py files under the paths (sorted, skipping hidden and __pycache__ directories)."""
    files: list[Path] = []
    missing: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(path.rglob("*.py")):
                relative = found.relative_to(path).parts
                if any(part.startswith(".") or part == "__pycache__" for part in relative[:-1]):
                    continue
                files.append(found)
        elif path.is_file():
            files.append(path)
        else:
            missing.append(raw)
    unique = list(dict.fromkeys(files))
    return unique, missing


def unified_diff(result: FileResult) -> str:
    assert result.migrated is not None
    name = result.path.as_posix().lstrip("/")
    lines = difflib.unified_diff(
        result.original.splitlines(keepends=True),
        result.migrated.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    # A last line without a newline gets the marker `patch` and `git apply` expect.
    return "".join(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines)


def run(argv: list[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Diffs go to stdout, report lines (``path:line:col: not migrated: reason``) to stderr."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error (argparse printed it)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    options = options_from_args(args)
    files, missing = python_files(args.paths)
    failed = len(missing)
    for raw in missing:
        print(f"{raw}: error: no such file or directory", file=err)

    changed_files = rewritten = not_migrated = annotated = 0
    for path in files:
        try:
            code = path.read_bytes()
        except OSError as error:
            print(f"{path}: error: cannot read: {error}", file=err)
            failed += 1
            continue
        result = migrate_source(code, path, options)
        if result.parse_error is not None:
            failure = result.parse_error
            print(f"{path}:{failure.line}:{failure.column}: {failure.kind}: {failure.message}", file=err)
            failed += 1
            continue
        findings = result.findings
        if result.changed:
            changed_files += 1
            if args.diff:
                out.write(unified_diff(result))
            elif args.check:  # a dry run, as black --check: name the file, write nothing
                print(f"{path}: would change", file=err)
            else:
                assert result.migrated is not None
                path.write_bytes(result.migrated.encode(result.encoding))
                findings = result.findings_after_write()
        rewritten += result.rewritten
        annotated += result.annotated
        for finding in findings:
            not_migrated += finding.kind == NOT_MIGRATED
            print(f"{path}:{finding.line}:{finding.column}: {finding.kind}: {finding.message}", file=err)

    if not args.quiet:
        verb = "would change" if args.diff or args.check else "changed"
        parts = [
            f"{len(files)} files scanned",
            f"{changed_files} {verb}",
            f"{rewritten} calls rewritten",
            f"{not_migrated} not migrated",
        ]
        if args.annotate:
            parts.append(f"{annotated} annotations")
        if failed:
            parts.append(f"{failed} failed")
        print("migrate: " + ", ".join(parts), file=err)
    if failed or (args.check and changed_files):
        return EXIT_FAILED
    return EXIT_OK
