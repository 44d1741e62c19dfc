"""The plugin's configuration: ``[tool.spmd_mypy]`` in pyproject.toml or
``[spmd_mypy]`` in mypy.ini / setup.cfg, next to mypy's own config file.

    [tool.spmd_mypy]
    mesh_axes = ["dp", "tp"]   # the mesh axis names, in mesh order
    strict = false             # untyped operands of typed ops are errors when true
"""

from __future__ import annotations

import configparser
import os
import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_MESH_AXES: tuple[str, ...] = ("dp", "cp", "tp", "pp", "ep")


@dataclass(frozen=True)
class Config:
    mesh_axes: tuple[str, ...] = DEFAULT_MESH_AXES
    strict: bool = False
    source: str = "default"
    problems: tuple[str, ...] = ()

    def as_cache_key(self) -> dict[str, object]:
        return {"mesh_axes": list(self.mesh_axes), "strict": self.strict}


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _parse_axes(value: object) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    text = str(value).strip().strip("[]")
    return tuple(p.strip().strip("'\"") for p in text.replace("\n", ",").split(",") if p.strip())


def load(config_file: str | None) -> Config:
    """Read the section from mypy's config file (whichever mypy itself used)."""
    if not config_file or not os.path.exists(config_file):
        return Config()
    raw: dict[str, object] | None = None
    try:
        if config_file.endswith(".toml"):
            with open(config_file, "rb") as f:
                data = tomllib.load(f)
            raw = data.get("tool", {}).get("spmd_mypy")
        else:
            parser = configparser.ConfigParser()
            parser.read(config_file)
            if parser.has_section("spmd_mypy"):
                raw = dict(parser.items("spmd_mypy"))
    except (OSError, ValueError, configparser.Error) as e:
        return Config(problems=(f"could not read {config_file}: {e}",))
    if raw is None:
        return Config(source=config_file)
    problems = []
    axes = DEFAULT_MESH_AXES
    if "mesh_axes" in raw:
        axes = _parse_axes(raw["mesh_axes"])
        if len(set(axes)) != len(axes) or not axes:
            problems.append(f"mesh_axes {list(axes)} must be non-empty and distinct")
            axes = tuple(dict.fromkeys(axes)) or DEFAULT_MESH_AXES
    for key in raw:
        if key not in ("mesh_axes", "strict"):
            problems.append(f"unknown option {key!r} in the spmd_mypy section")
    return Config(axes, _parse_bool(raw.get("strict", False)), config_file, tuple(problems))
