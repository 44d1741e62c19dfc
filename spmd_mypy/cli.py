"""``spmd-mypy``: the command line.

    spmd-mypy check PATH...     mypy with the plugin (uses your mypy config when it
                                already loads spmd_mypy.plugin, else adds it)
    spmd-mypy report PATH...    each function's forward and backward collectives
                                (--json for the schema in docs/report.md)
    spmd-mypy migrate PATH...   rewrite Megatron mapping calls to the typed API
    spmd-mypy codes             list the spmd-... error codes
"""

from __future__ import annotations

import argparse
import configparser
import os
import sys
import tempfile

from .engine.errors import CODES

PLUGIN = "spmd_mypy.plugin"
_CONFIG_FILES = ("mypy.ini", ".mypy.ini", "pyproject.toml", "setup.cfg")


def _find_config(start: str) -> str | None:
    d = os.path.abspath(start)
    while True:
        for name in _CONFIG_FILES:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if name == "pyproject.toml" and "[tool.mypy" not in text and "[tool.spmd_mypy" not in text:
                    continue
                if name == "setup.cfg" and "[mypy" not in text and "[spmd_mypy" not in text:
                    continue
                return path
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _config_with_plugin(config: str | None) -> tuple[str | None, str | None]:
    """(config file to pass to mypy, temp file to delete).  If the user's config already
    loads the plugin, use it as is; otherwise write a mypy.ini that adds the plugin and
    keeps the user's spmd_mypy section."""
    if config is not None:
        with open(config, encoding="utf-8", errors="replace") as f:
            if PLUGIN in f.read():
                return config, None
    from .plugin.config import load

    cfg = load(config)
    parser = configparser.ConfigParser()
    parser["mypy"] = {"plugins": PLUGIN}
    parser["spmd_mypy"] = {"mesh_axes": ", ".join(cfg.mesh_axes), "strict": str(cfg.strict).lower()}
    fd, path = tempfile.mkstemp(prefix="spmd-mypy-", suffix=".ini")
    with os.fdopen(fd, "w") as f:
        parser.write(f)
    return path, path


def cmd_check(args: argparse.Namespace, extra: list[str]) -> int:
    from mypy import api

    config = args.config_file or _find_config(os.getcwd())
    config_file, temp = _config_with_plugin(config)
    try:
        argv = [*extra, *args.paths]
        if config_file:
            argv = ["--config-file", config_file, *argv]
        out, err, status = api.run(argv)
    finally:
        if temp:
            os.unlink(temp)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


def cmd_report(args: argparse.Namespace, extra: list[str]) -> int:
    from .report import main as report_main

    config = args.config_file or _find_config(os.getcwd())
    # run as a command (not cli.main() in-process): end without the slow teardown, as mypy does
    command = sys.argv[1:2] == ["report"]
    return report_main(args.paths, as_json=args.json, config_file=config, mypy_args=extra,
                       clean_exit=not command)


def cmd_codes(_: argparse.Namespace, __: list[str]) -> int:
    width = max(len(c) for c in CODES)
    for code, description in CODES.items():
        print(f"{code.ljust(width)}  {description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "migrate":
        from .migrate import main as migrate_main

        return migrate_main(argv[1:])
    parser = argparse.ArgumentParser(prog="spmd-mypy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run mypy with the spmd plugin (extra args go to mypy)")
    check.add_argument("paths", nargs="*")
    check.add_argument("--config-file", default=None)
    check.set_defaults(func=cmd_check)
    report = sub.add_parser("report", help="each function's forward and backward collectives "
                                           "(extra args go to mypy)")
    report.add_argument("paths", nargs="*")
    report.add_argument("--json", action="store_true", help="print JSON (schema: docs/report.md)")
    report.add_argument("--config-file", default=None)
    report.set_defaults(func=cmd_report)
    sub.add_parser("migrate", help="rewrite Megatron mapping calls (see spmd-mypy migrate --help)")
    codes = sub.add_parser("codes", help="list the error codes")
    codes.set_defaults(func=cmd_codes)
    args, extra = parser.parse_known_args(argv)
    if args.command == "check" and not args.paths:
        args.paths = []
    return int(args.func(args, extra))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
