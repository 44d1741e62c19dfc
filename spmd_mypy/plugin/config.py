"""The plugin's configuration: ``[tool.spmd_mypy]`` in pyproject.toml or
``[spmd_mypy]`` in mypy.ini / setup.cfg, next to mypy's own config file.

    [tool.spmd_mypy]
    mesh_axes = ["dp", "tp"]   # the mesh axis names, in mesh order
    strict = false             # untyped operands of typed ops are errors when true

    [tool.spmd_mypy.flattened_axes]   # mesh[...]._flatten("dp"): "dp" names these axes
    dp = ["dp_replicate", "dp_shard"]

    [[tool.spmd_mypy.overrides]]   # per module, as mypy's own overrides
    module = ["pkg.layers", "pkg.model.*"]
    strict = true

or in mypy.ini / setup.cfg ``[spmd_mypy]`` (``flattened_axes = dp: dp_replicate dp_shard``,
several separated by ``;`` or on lines of their own) and ``[spmd_mypy-pkg.layers,pkg.model.*]``
sections.
A module pattern is a module name, ``pkg.*`` for ``pkg`` and every module under it, or
``pkg.*.tests`` (a ``*`` component matches zero or more components); as in mypy, an exact
name wins, then an inner-``*`` pattern (the last in the file), then the longer ``pkg.*``
pattern.  Problems (an unknown option, a pattern mypy rejects, a value that is not a boolean)
are printed when mypy starts, as mypy prints its own, and the setting is ignored.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from dataclasses import dataclass, field

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_MESH_AXES: tuple[str, ...] = ("dp", "cp", "tp", "pp", "ep")


SECTION = "spmd_mypy"
PER_MODULE_OPTIONS = ("strict",)


@dataclass(frozen=True)
class Config:
    mesh_axes: tuple[str, ...] = DEFAULT_MESH_AXES
    strict: bool = False
    source: str = "default"
    problems: tuple[str, ...] = ()
    # (module pattern, strict) per override, most specific first (see strict_for)
    overrides: tuple[tuple[str, bool], ...] = ()
    axes_given: bool = False  # mesh_axes is set in the config (else the built-in defaults)
    ignored: str = ""  # a pyproject.toml with [tool.spmd_mypy] that mypy's config hides
    # flattened axes: "dp" -> ("dp_replicate", "dp_shard") (``mesh[...]._flatten("dp")``),
    # each a name for its component axes wherever an axis name stands
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def as_cache_key(self) -> dict[str, object]:
        return {"mesh_axes": list(self.mesh_axes), "strict": self.strict,
                "overrides": [list(o) for o in self.overrides],
                "flattened_axes": {k: list(v) for k, v in self.aliases.items()}}

    @property
    def axes_setting(self) -> str:
        """Where ``mesh_axes`` is set (or is to be set), as messages name it."""
        if self.source == "default":
            where = f"[tool.{SECTION}] mesh_axes in pyproject.toml"
        elif self.source.endswith(".toml"):
            where = f"[tool.{SECTION}] mesh_axes in {os.path.basename(self.source)}"
        else:
            where = f"[{SECTION}] mesh_axes in {os.path.basename(self.source)}"
        if self.axes_given:
            return where
        if self.ignored:
            return (f"the built-in defaults: mypy reads {os.path.basename(self.source)}, so "
                    f"[tool.{SECTION}] in {self.ignored} is ignored; set {where}")
        return f"the built-in defaults; set {where}"

    def strict_for(self, module: str) -> bool:
        """``strict`` for ``module``: its most specific override, else the global setting."""
        for pattern, strict in self.overrides:
            if _matches(pattern, module):
                return strict
        return self.strict


def _matches(pattern: str, module: str) -> bool:
    if "*" in pattern[:-1]:  # spam.*.eggs: '*' in an inner component
        return _glob_regex(pattern).match(module) is not None
    if pattern.endswith(".*"):
        prefix = pattern[:-2]
        return module == prefix or module.startswith(prefix + ".")
    return module == pattern


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """mypy's ``Options.compile_glob``: a ``*`` component matches zero or more components."""
    parts = pattern.split(".")
    expr = re.escape(parts[0]) if parts[0] != "*" else ".*"
    for part in parts[1:]:
        expr += re.escape("." + part) if part != "*" else r"(\..*)?"
    return re.compile(expr + "\\Z")


def _specificity(pattern: str) -> tuple[int, int]:
    """mypy's order for its own sections: exact names first, then patterns with an inner
    ``*`` (``spam.*.eggs``), then ``pkg.*`` patterns, longer ones first."""
    if "*" in pattern[:-1]:
        return (1, 0)
    return (0 if not pattern.endswith(".*") else 2, -len(pattern))


def _bad_pattern(pattern: str) -> bool:
    """A section name mypy rejects for its own ``[mypy-...]`` sections."""
    return any(c in pattern for c in "?[]!") or any(
        "*" in x and x != "*" for x in pattern.split("."))


BAD_PATTERN = ("Patterns must be fully-qualified module names, optionally with '*' in some "
               "components (e.g spam.*.eggs.*)")
_BOOLEAN_STATES = configparser.RawConfigParser.BOOLEAN_STATES  # as mypy reads its own flags


def _parse_bool(value: object) -> bool | None:
    """A boolean as mypy reads one (true/false, yes/no, on/off, 1/0); None if it is not."""
    if isinstance(value, bool):
        return value
    return _BOOLEAN_STATES.get(str(value).strip().lower())


def _parse_names(value: object) -> tuple[str, ...]:
    """A list of names: a TOML list, or a comma- or line-separated ini value."""
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    text = str(value).strip().strip("[]")
    return tuple(p.strip().strip("'\"") for p in text.replace("\n", ",").split(",") if p.strip())


def load(config_file: str | None) -> Config:
    """Read the section from mypy's config file (whichever mypy itself used)."""
    if not config_file or not os.path.exists(config_file):
        return Config()
    ignored = _hidden_pyproject(config_file)
    raw: dict[str, object] | None = None
    raw_overrides: list[tuple[str, object, dict[str, object]]] = []  # (where, modules, options)
    try:
        if config_file.endswith(".toml"):
            with open(config_file, "rb") as f:
                data = tomllib.load(f)
            raw = data.get("tool", {}).get(SECTION)
            if isinstance(raw, dict):
                raw = dict(raw)
                listed = raw.pop("overrides", [])
                for i, o in enumerate(listed if isinstance(listed, list) else [listed]):
                    o = dict(o) if isinstance(o, dict) else {}
                    raw_overrides.append((f"[[tool.{SECTION}.overrides]] #{i + 1}",
                                          o.pop("module", None), o))
        else:
            parser = configparser.ConfigParser()
            parser.read(config_file)
            if parser.has_section(SECTION):
                raw = dict(parser.items(SECTION))
            for name in parser.sections():
                if name.startswith(SECTION + "-"):
                    raw_overrides.append((f"[{name}]", name[len(SECTION) + 1:],
                                          dict(parser.items(name))))
    except (OSError, ValueError, configparser.Error) as e:
        return Config(source=config_file, problems=(f"could not read {config_file}: {e}",))
    if raw is None and not raw_overrides:
        return Config(source=config_file, ignored=ignored)
    raw = raw if isinstance(raw, dict) else {}
    main = f"[tool.{SECTION}]" if config_file.endswith(".toml") else f"[{SECTION}]"
    problems = []
    axes = DEFAULT_MESH_AXES
    if "mesh_axes" in raw:
        axes = _parse_names(raw["mesh_axes"])
        spaced = [a for a in axes if len(a.split()) > 1]
        if spaced:  # "mesh_axes = dp tp" in an ini file: one name "dp tp"
            problems.append(f"{main}: mesh_axes names {spaced[0]!r}, a name with a space: "
                            f"separate the axis names with commas (mesh_axes = "
                            f"{', '.join(spaced[0].split())}); read as {spaced[0].split()}")
            axes = tuple(n for a in axes for n in a.split())
        if len(set(axes)) != len(axes) or not axes:
            problems.append(f"{main}: mesh_axes {list(axes)} must be non-empty and distinct")
            axes = tuple(dict.fromkeys(axes)) or DEFAULT_MESH_AXES
    aliases = _parse_aliases(raw["flattened_axes"], axes, main, problems) \
        if "flattened_axes" in raw else {}
    for key in raw:
        if key not in ("mesh_axes", "strict", "flattened_axes"):
            problems.append(f"{main}: unknown option {key!r} (known: mesh_axes, strict, "
                            f"flattened_axes, and per-module overrides)")
    overrides: dict[str, bool] = {}
    for where, modules, options in raw_overrides:
        patterns = _parse_names(modules) if modules is not None else ()
        if not patterns:
            problems.append(f"{where}: which modules? (module = \"pkg.mod\" or [\"pkg.*\", ...])"
                            if where.startswith("[[") else f"{where}: no module in the section name")
        for key in options:
            if key not in PER_MODULE_OPTIONS:
                problems.append(f"{where}: unknown per-module option {key!r} "
                                f"(per module: {', '.join(PER_MODULE_OPTIONS)})")
        good = []
        for pattern in patterns:
            if _bad_pattern(pattern.replace(os.sep, ".")):
                problems.append(f"{where}: {BAD_PATTERN}; {pattern!r} is ignored")
            else:
                good.append(pattern.replace(os.sep, "."))
        if "strict" in options:
            value = _parse_bool(options["strict"])
            if value is None:
                problems.append(f"{where}: strict: Not a boolean: {options['strict']}")
            else:
                for pattern in good:
                    overrides[pattern] = value
    # patterns with an inner '*' in reverse file order: the last one wins, as in mypy
    inner = [p for p in overrides if "*" in p[:-1]][::-1]
    ordered = tuple(sorted(overrides.items(), key=lambda o: (
        _specificity(o[0]), inner.index(o[0]) if o[0] in inner else 0)))
    strict = _parse_bool(raw.get("strict", False))
    if strict is None:
        problems.append(f"{main}: strict: Not a boolean: {raw['strict']}")
    return Config(axes, bool(strict), config_file, tuple(problems), ordered,
                  axes_given="mesh_axes" in raw, ignored="" if "mesh_axes" in raw else ignored,
                  aliases=aliases)


def _parse_aliases(value: object, axes: tuple[str, ...], main: str,
                   problems: list[str]) -> dict[str, tuple[str, ...]]:
    """``flattened_axes``: a TOML table ``{dp = ["dp_replicate", "dp_shard"]}``, or ini text
    ``dp: dp_replicate dp_shard`` (``=`` for ``:``; commas or spaces between the axes; several
    flattened axes separated by ``;`` or newlines).  A name that is itself a mesh axis, or
    components that are not distinct mesh axes: a problem, and that entry is ignored."""
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    else:
        for part in str(value).replace(";", "\n").split("\n"):
            part = part.strip()
            if not part:
                continue
            sep = min((i for i in (part.find(":"), part.find("=")) if i >= 0), default=-1)
            if sep < 0:
                problems.append(f"{main}: flattened_axes entry {part!r}: write "
                                f"NAME: AXIS AXIS ..., e.g. dp: dp_replicate dp_shard")
                continue
            items.append((part[:sep].strip(), part[sep + 1:]))
    out: dict[str, tuple[str, ...]] = {}
    for name, raw_parts in items:
        parts = tuple(n for p in _parse_names(raw_parts) for n in p.split())
        where = f"{main}: flattened_axes {name!r}"
        if name in axes:
            problems.append(f"{where} is a mesh axis: a flattened axis needs a name of its own "
                            f"(mesh_axes lists {', '.join(axes)})")
            continue
        unknown = [p for p in parts if p not in axes]
        if not parts or unknown or len(set(parts)) != len(parts):
            from ..engine.annotations import closest

            why = (f"names the unknown mesh axis {unknown[0]!r}{closest(unknown[0], axes)}"
                   if unknown else "must name distinct mesh axes" if parts else "names no axes")
            problems.append(f"{where} {why}: it flattens some of the mesh axes "
                            f"({', '.join(axes)}), e.g. {name}: {' '.join(axes[:2])}; ignored")
            continue
        out[name] = tuple(sorted(parts, key=axes.index))  # flattened in mesh order
    return out


def _hidden_pyproject(config_file: str) -> str:
    """``pyproject.toml`` beside an ini config when it holds a ``[tool.spmd_mypy]`` section:
    mypy reads the ini file first, and the plugin reads mypy's config only."""
    if config_file.endswith(".toml"):
        return ""
    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), "pyproject.toml")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "pyproject.toml" if f"[tool.{SECTION}" in f.read() else ""
    except OSError:
        return ""
