"""``spmd-mypy``: the command line.

    spmd-mypy check PATH...     mypy with the plugin (your whole mypy config; the
                                plugin added to a copy of it when it lacks it)
    spmd-mypy report PATH...    each function's forward and backward collectives
                                (--json for the schema in docs/report.md)
    spmd-mypy migrate PATH...   rewrite Megatron mapping calls to the typed API
    spmd-mypy codes             list the spmd-... error codes
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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


def _is_spmd_plugin(entry: str) -> bool:
    """``spmd_mypy.plugin`` as a mypy ``plugins`` entry names it (a module or a file)."""
    e = entry.strip().replace(os.sep, "/")
    if ":" in e.rsplit("/", 1)[-1]:  # file.py:entry_point
        e = e.rsplit(":", 1)[0]
    return e == PLUGIN or e.endswith("spmd_mypy/plugin/__init__.py") or e.endswith(
        "spmd_mypy/plugin")


def _plugin_list(value: object) -> list[str]:
    """A ``plugins`` value (comma-separated string, or a TOML list) as mypy splits it."""
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(p).strip() for p in items if str(p).strip()]


def _rebase(value: object, config_dir: str) -> object:
    """``$MYPY_CONFIG_FILE_DIR`` (which mypy sets to the directory of the config it reads)
    spelled out as the user's config directory, in every string of a value."""
    if isinstance(value, str):
        return re.sub(r"\$(\{MYPY_CONFIG_FILE_DIR\}|MYPY_CONFIG_FILE_DIR\b)",
                      lambda _: config_dir.replace("\\", "\\\\"), value)
    if isinstance(value, list):
        return [_rebase(v, config_dir) for v in value]
    if isinstance(value, dict):
        return {k: _rebase(v, config_dir) for k, v in value.items()}
    return value


def _with_plugin(plugins: list[str], config_dir: str) -> list[str]:
    """The user's plugins, then ours.  A plugin file (``x.py``) is relative to the config's
    directory for mypy: spelled out absolute, as the copy lives elsewhere."""
    out = []
    for entry in plugins:
        path, sep, func = entry.rpartition(":") if ":" in os.path.basename(entry) else (entry, "", "")
        if path.endswith(".py") and not os.path.isabs(path):
            entry = os.path.join(config_dir, path) + sep + func
        out.append(entry)
    return [*out, PLUGIN]


def _toml(value: object) -> str:
    """``value`` (as ``tomllib`` reads it) written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)  # a JSON string or number is a TOML one
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot copy the TOML value {value!r} ({type(value).__name__})")


def _toml_table(name: str, table: dict[str, object]) -> str:
    lines = [f"[{name}]"] + [f"{json.dumps(str(k))} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _config_with_plugin(config: str | None) -> tuple[str | None, str | None]:
    """(config file to pass to mypy, temp directory to delete).

    A config that loads the plugin is used as is.  Otherwise a copy of the whole config,
    under the same file name, with ``spmd_mypy.plugin`` appended to its ``plugins``: every
    section (``[mypy-pkg.*]``, ``[spmd_mypy-...]``, ``[[tool.mypy.overrides]]``, ...) kept.
    mypy reads ``mypy_path``, ``files``, ``cache_dir``... relative to the working directory,
    which does not change; what it reads relative to the config's own directory (plugin
    files, ``$MYPY_CONFIG_FILE_DIR``) is spelled out.  With no config, a ``pyproject.toml``
    that loads the plugin (``[tool.spmd_mypy]`` in it is where mesh_axes would go).
    """
    name = "pyproject.toml"
    text: str | None = None
    if config is not None:
        config_dir = os.path.dirname(os.path.abspath(config))
        name = os.path.basename(config)
        try:
            text = _copy_config(config, config_dir)
        except (OSError, ValueError, configparser.Error) as e:  # as mypy: say so, go on without
            print(f"{config}: {e}", file=sys.stderr)
            name = "pyproject.toml"
        else:
            if text is None:  # loads the plugin already
                return config, None
    if text is None:
        text = _toml_table("tool.mypy", {"plugins": [PLUGIN]})
    directory = tempfile.mkdtemp(prefix="spmd-mypy-")
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path, directory


def _copy_config(config: str, config_dir: str) -> str | None:
    """The text of the copy of ``config`` that loads the plugin; None if it loads it."""
    if config.lower().endswith(".toml"):
        with open(config, "rb") as f:
            data = tomllib.load(f)
        tool = data.get("tool", {})
        mypy = dict(tool.get("mypy", {}))
        plugins = _plugin_list(mypy.get("plugins", []))
        if any(_is_spmd_plugin(p) for p in plugins):
            return None
        mypy = _rebase(mypy, config_dir)
        mypy["plugins"] = _with_plugin(plugins, config_dir)
        text = _toml_table("tool.mypy", mypy)
        if "spmd_mypy" in tool:
            text += _toml_table("tool.spmd_mypy", tool["spmd_mypy"])
        return text
    parser = configparser.RawConfigParser()  # as mypy reads it
    parser.read(config)
    plugins = _plugin_list(parser.get("mypy", "plugins", fallback=""))
    if any(_is_spmd_plugin(p) for p in plugins):
        return None
    for section in parser.sections():
        for key, value in parser.items(section):
            parser.set(section, key, _rebase(value, config_dir))
    if not parser.has_section("mypy"):
        parser.add_section("mypy")
    parser.set("mypy", "plugins", ", ".join(_with_plugin(plugins, config_dir)))
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


def cmd_check(args: argparse.Namespace, extra: list[str]) -> int:
    from mypy import api

    # The plugin's error codes known before mypy reads the config: with -p/-m, mypy applies
    # per-module sections (``disable_error_code = spmd-...``) while it looks for the modules,
    # before it loads any plugin (a KeyError in mypy 2.4.1's options otherwise)
    from .plugin import codes  # noqa: F401

    config = args.config_file or _find_config(os.getcwd())
    config_file, temp = _config_with_plugin(config)
    plugin_err = io.StringIO()  # the plugin prints its config problems to sys.stderr
    try:
        argv = [*extra, *args.paths]
        if config_file:
            argv = ["--config-file", config_file, *argv]
        with contextlib.redirect_stderr(plugin_err):
            out, err, status = api.run(argv)
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    err = plugin_err.getvalue() + err
    if temp and config is not None and config_file is not None:
        # messages about the config name the user's file, not the copy
        shown = os.path.relpath(config) if not args.config_file else config
        out, err = out.replace(config_file, shown), err.replace(config_file, shown)
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
    check = sub.add_parser("check", help="run mypy with the spmd plugin (extra args go to mypy)",
                           allow_abbrev=False)
    check.add_argument("paths", nargs="*")
    check.add_argument("--config-file", default=None)
    check.set_defaults(func=cmd_check)
    report = sub.add_parser("report", help="each function's forward and backward collectives "
                                           "(extra args go to mypy)", allow_abbrev=False)
    report.add_argument("paths", nargs="*")
    report.add_argument("--json", action="store_true", help="print JSON (schema: docs/report.md)")
    report.add_argument("--config-file", default=None)
    report.set_defaults(func=cmd_report)
    sub.add_parser("migrate", help="rewrite Megatron mapping calls (see spmd-mypy migrate --help)")
    codes = sub.add_parser("codes", help="list the error codes")
    codes.set_defaults(func=cmd_codes)
    args, extra = parser.parse_known_args(argv)
    if args.command in _OWN_OPTIONS:
        # mypy's arguments in the order given: argparse would take the value of an option it
        # does not know (``--python-executable X``, ``--cache-dir D``) for a path
        args.paths, extra = [], _mypy_args(argv[1:], _OWN_OPTIONS[args.command])
    return int(args.func(args, extra))


# each command's own options (the rest goes to mypy): name -> takes a value
_OWN_OPTIONS = {"check": {"--config-file": True},
                "report": {"--config-file": True, "--json": False}}


def _mypy_args(argv: list[str], own: dict[str, bool]) -> list[str]:
    """``argv`` (after the command) without the command's own options, in order."""
    out: list[str] = []
    skip = False
    for k, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--":
            return out + argv[k:]
        name, eq, _ = a.partition("=")
        if name in own:
            skip = own[name] and not eq
            continue
        out.append(a)
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
