"""The plugin's configuration (spmd_mypy/plugin/config.py): the global section, per-module
overrides as mypy's own (``[spmd_mypy-pkg.*]`` in mypy.ini / setup.cfg,
``[[tool.spmd_mypy.overrides]]`` in pyproject.toml), and problems printed when mypy starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

from spmd_mypy.plugin.config import load
from test_codes import FAKE_TORCH

INI = """\
[mypy]
plugins = spmd_mypy.plugin
[spmd_mypy]
mesh_axes = dp, tp
{extra}
[spmd_mypy-pkg.a, pkg.sub.*]
strict = true
[spmd_mypy-pkg.sub.c]
strict = false
"""

TOML = """\
[tool.mypy]
plugins = ["spmd_mypy.plugin"]
[tool.spmd_mypy]
mesh_axes = ["dp", "tp"]
strict = true
[[tool.spmd_mypy.overrides]]
module = ["pkg.sub.*", "pkg.b"]
strict = false
[[tool.spmd_mypy.overrides]]
module = "pkg.sub.deep.*"
strict = true
"""


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_ini_overrides_most_specific_wins(tmp_path: Path) -> None:
    c = load(_write(tmp_path / "mypy.ini", INI.format(extra="")))
    assert c.problems == ()
    assert c.mesh_axes == ("dp", "tp") and c.strict is False
    assert c.strict_for("pkg.a") is True
    assert c.strict_for("pkg.sub") is True          # pkg.sub.* covers pkg.sub itself
    assert c.strict_for("pkg.sub.x.y") is True
    assert c.strict_for("pkg.sub.c") is False       # the exact name wins over the pattern
    assert c.strict_for("pkg.b") is False           # no override: the global setting
    assert c.strict_for("pkg.ab") is False and c.strict_for("pkg") is False


def test_toml_overrides_longer_pattern_wins(tmp_path: Path) -> None:
    c = load(_write(tmp_path / "pyproject.toml", TOML))
    assert c.problems == ()
    assert c.strict is True and c.strict_for("other") is True
    assert c.strict_for("pkg.b") is False and c.strict_for("pkg.sub.x") is False
    assert c.strict_for("pkg.sub.deep.x") is True   # pkg.sub.deep.* is longer than pkg.sub.*


def test_overrides_are_part_of_the_cache_key(tmp_path: Path) -> None:
    a = load(_write(tmp_path / "mypy.ini", INI.format(extra="")))
    b = load(_write(tmp_path / "other.ini", INI.format(extra="").replace("strict = true", "strict = false")))
    assert a.as_cache_key() != b.as_cache_key()


def test_problems_name_the_section_and_the_option(tmp_path: Path) -> None:
    c = load(_write(tmp_path / "mypy.ini", INI.format(extra="strictt = true") + "bogus = 1\n"))
    assert c.problems == (
        "[spmd_mypy]: unknown option 'strictt' (known: mesh_axes, strict, flattened_axes, and per-module overrides)",
        "[spmd_mypy-pkg.sub.c]: unknown per-module option 'bogus' (per module: strict)")
    t = load(_write(tmp_path / "pyproject.toml", TOML + '[[tool.spmd_mypy.overrides]]\nmodules = "x"\n'))
    assert t.problems == (
        '[[tool.spmd_mypy.overrides]] #3: which modules? (module = "pkg.mod" or ["pkg.*", ...])',
        "[[tool.spmd_mypy.overrides]] #3: unknown per-module option 'modules' (per module: strict)")


def test_axis_names_separated_by_spaces_are_a_problem(tmp_path: Path) -> None:
    """``mesh_axes = dp tp`` in an ini file was one axis named "dp tp", silently."""
    c = load(_write(tmp_path / "mypy.ini", "[mypy]\n[spmd_mypy]\nmesh_axes = dp tp\n"))
    assert c.mesh_axes == ("dp", "tp")
    assert c.problems == ("[spmd_mypy]: mesh_axes names 'dp tp', a name with a space: separate "
                          "the axis names with commas (mesh_axes = dp, tp); read as ['dp', 'tp']",)
    t = load(_write(tmp_path / "pyproject.toml", '[tool.spmd_mypy]\nmesh_axes = ["dp", "cp tp"]\n'))
    assert t.mesh_axes == ("dp", "cp", "tp") and len(t.problems) == 1, t.problems


USER_CODE = """\
import torch
from spmd import Tensor, R

def f(x: Tensor[R["tp"]], u: torch.Tensor) -> None:
    x.add(u)
"""


def test_strict_per_module_and_problems_printed(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for rel, text in FAKE_TORCH.items():
        f = tmp_path / "fake_torch" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    for mod in ("pkg/__init__.py", "pkg/sub/__init__.py"):
        (tmp_path / mod).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / mod).write_text("")
    for mod in ("a", "b", "sub/c", "sub/d"):
        (tmp_path / "pkg" / f"{mod}.py").write_text(USER_CODE)
    ini = INI.format(extra="strictt = true").replace(
        "[mypy]\n", f"[mypy]\nmypy_path = {tmp_path / 'fake_torch'}\ncache_dir = {tmp_path / '.cache'}\n")
    _write(tmp_path / "mypy.ini", ini)
    stdout, stderr, status = api.run(["--config-file", str(tmp_path / "mypy.ini"), "--no-error-summary",
                                      "--show-traceback", str(tmp_path / "pkg")])
    assert "Traceback" not in stdout + stderr, stdout + stderr
    untyped = sorted(ln.split(str(tmp_path) + "/", 1)[-1].split(":")[0]
                     for ln in stdout.splitlines() if ln.endswith("[spmd-untyped]"))
    assert untyped == ["pkg/a.py", "pkg/sub/d.py"], stdout   # pkg.sub.c: its exact override
    assert (f"{tmp_path / 'mypy.ini'}: [spmd_mypy]: unknown option 'strictt' "
            f"(known: mesh_axes, strict, flattened_axes, and per-module overrides)") in capsys.readouterr().err


def test_bad_patterns_and_booleans_are_problems(tmp_path: Path) -> None:
    """A section pattern mypy rejects for its own sections, and a strict value that is not a
    boolean, were silently ignored (``strict = maybe`` read as false)."""
    c = load(_write(tmp_path / "mypy.ini", "[mypy]\n[spmd_mypy]\nstrict = maybe\n"
                    "[spmd_mypy-c*]\nstrict = true\n[spmd_mypy-ok, p?q]\nstrict = on\n"
                    "[spmd_mypy-d]\nstrict = sometimes\n"))
    pattern = ("Patterns must be fully-qualified module names, optionally with '*' in some "
               "components (e.g spam.*.eggs.*)")
    assert c.problems == (
        f"[spmd_mypy-c*]: {pattern}; 'c*' is ignored",
        f"[spmd_mypy-ok, p?q]: {pattern}; 'p?q' is ignored",
        "[spmd_mypy-d]: strict: Not a boolean: sometimes",
        "[spmd_mypy]: strict: Not a boolean: maybe")
    assert c.strict is False and c.overrides == (("ok", True),)  # yes/no, on/off as mypy reads them
    t = load(_write(tmp_path / "pyproject.toml",
                    '[tool.spmd_mypy]\nstrict = "maybe"\n[[tool.spmd_mypy.overrides]]\n'
                    'module = ["a.b*", "ok"]\nstrict = [1]\n'))
    assert t.problems == (
        f"[[tool.spmd_mypy.overrides]] #1: {pattern}; 'a.b*' is ignored",
        "[[tool.spmd_mypy.overrides]] #1: strict: Not a boolean: [1]",
        "[tool.spmd_mypy]: strict: Not a boolean: maybe")
    assert t.strict is False and t.overrides == ()


def test_inner_wildcard_patterns_match_as_in_mypy(tmp_path: Path) -> None:
    """``spam.*.eggs`` (a pattern mypy accepts) matched no module: compared as a name."""
    c = load(_write(tmp_path / "mypy.ini", "[mypy]\n[spmd_mypy-pkg.*]\nstrict = true\n"
                    "[spmd_mypy-pkg.*.tests]\nstrict = false\n[spmd_mypy-pkg.a.tests]\nstrict = true\n"))
    assert c.problems == ()
    assert c.strict_for("pkg.x.tests") is False and c.strict_for("pkg.x.y.tests") is False
    assert c.strict_for("pkg.tests") is False  # '*' matches zero components too, as in mypy
    assert c.strict_for("pkg.x") is True and c.strict_for("pkg.x.tests.y") is True
    assert c.strict_for("pkg.a.tests") is True  # the exact name wins


def test_config_problems_printed_as_mypy_prints_its_own(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "m.py").write_text("x = 1\n")
    _write(tmp_path / "mypy.ini", f"[mypy]\nplugins = spmd_mypy.plugin\ncache_dir = {tmp_path / '.c'}\n"
           "[mypy-c*]\nstrict_optional = True\n[spmd_mypy-c*]\nstrict = maybe\n")
    stdout, stderr, status = api.run(["--config-file", str(tmp_path / "mypy.ini"), str(tmp_path / "m.py")])
    err = capsys.readouterr().err + stderr
    assert "Traceback" not in stdout + err and status == 0, stdout + err
    assert f"{tmp_path / 'mypy.ini'}: [mypy-c*]: Patterns must be" in err  # mypy's own
    assert f"{tmp_path / 'mypy.ini'}: [spmd_mypy-c*]: Patterns must be" in err
    assert f"{tmp_path / 'mypy.ini'}: [spmd_mypy-c*]: strict: Not a boolean: maybe" in err


def test_default_axes_are_named_as_defaults(tmp_path: Path) -> None:
    """No mesh_axes in the config (or no config at all, as ``spmd-mypy check`` runs then):
    messages say the axes are the built-in defaults, not that a setting was read."""
    assert load(None).axes_setting == \
        "the built-in defaults; set [tool.spmd_mypy] mesh_axes in pyproject.toml"
    bare = load(_write(tmp_path / "pyproject.toml", '[tool.mypy]\nplugins = ["spmd_mypy.plugin"]\n'))
    assert bare.mesh_axes == ("dp", "cp", "tp", "pp", "ep")
    assert bare.axes_setting == "the built-in defaults; set [tool.spmd_mypy] mesh_axes in pyproject.toml"
    strict_only = load(_write(tmp_path / "pyproject.toml", TOML.replace('mesh_axes = ["dp", "tp"]\n', "")))
    assert strict_only.axes_setting.startswith("the built-in defaults; "), strict_only.axes_setting
    given = load(_write(tmp_path / "pyproject.toml", TOML))
    assert given.axes_setting == "[tool.spmd_mypy] mesh_axes in pyproject.toml"


def test_a_pyproject_section_hidden_by_mypy_ini_is_named(tmp_path: Path) -> None:
    """mypy reads mypy.ini before pyproject.toml: a [tool.spmd_mypy] there is never read."""
    for rel, text in FAKE_TORCH.items():
        f = tmp_path / "fake_torch" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    _write(tmp_path / "pyproject.toml", '[tool.spmd_mypy]\nmesh_axes = ["dp", "tp"]\n')
    c = load(_write(tmp_path / "mypy.ini", f"[mypy]\nplugins = spmd_mypy.plugin\n"
                    f"mypy_path = {tmp_path / 'fake_torch'}\n"))
    assert c.mesh_axes == ("dp", "cp", "tp", "pp", "ep")
    assert c.axes_setting == ("the built-in defaults: mypy reads mypy.ini, so [tool.spmd_mypy] in "
                              "pyproject.toml is ignored; set [spmd_mypy] mesh_axes in mypy.ini")
    out, _, _ = api.run(["--config-file", str(tmp_path / "mypy.ini"), "--no-incremental", "-c",
                         'from spmd import R, Tensor\ndef f(x: Tensor[R["mp"]]) -> None: ...\n'])
    assert "[tool.spmd_mypy] in pyproject.toml is ignored" in out, out


def test_flattened_axes_ini_and_toml(tmp_path: Path) -> None:
    """A flattened mesh dim (mesh["dp_replicate", "dp_shard"]._flatten("dp")) is declared as a
    name for its component axes, in mesh order whatever order they are written in."""
    ini = ("[mypy]\n[spmd_mypy]\nmesh_axes = dp_replicate, dp_shard, tp\n"
           "flattened_axes =\n    dp: dp_shard dp_replicate\n    all = dp_replicate, dp_shard, tp\n")
    c = load(_write(tmp_path / "mypy.ini", ini))
    assert c.problems == ()
    assert c.aliases == {"dp": ("dp_replicate", "dp_shard"),
                         "all": ("dp_replicate", "dp_shard", "tp")}
    toml = ('[tool.spmd_mypy]\nmesh_axes = ["dp_replicate", "dp_shard", "tp"]\n'
            '[tool.spmd_mypy.flattened_axes]\ndp = ["dp_replicate", "dp_shard"]\n')
    c = load(_write(tmp_path / "pyproject.toml", toml))
    assert c.problems == () and c.aliases == {"dp": ("dp_replicate", "dp_shard")}
    assert c.as_cache_key()["flattened_axes"] == {"dp": ["dp_replicate", "dp_shard"]}


def test_flattened_axes_problems(tmp_path: Path) -> None:
    """A flattened name that is a mesh axis, or components that are unknown or repeated: a
    problem printed when mypy starts, and that entry ignored."""
    ini = ("[mypy]\n[spmd_mypy]\nmesh_axes = dp_replicate, dp_shard, tp\n"
           "flattened_axes = dp: dp_replicate dp_shrd; tp: dp_shard; x: tp tp; ok: dp_shard tp\n")
    c = load(_write(tmp_path / "mypy.ini", ini))
    assert c.aliases == {"ok": ("dp_shard", "tp")}
    assert c.problems == (
        "[spmd_mypy]: flattened_axes 'dp' names the unknown mesh axis 'dp_shrd' (did you mean "
        "\"dp_shard\"?): it flattens some of the mesh axes (dp_replicate, dp_shard, tp), e.g. "
        "dp: dp_replicate dp_shard; ignored",
        "[spmd_mypy]: flattened_axes 'tp' is a mesh axis: a flattened axis needs a name of its "
        "own (mesh_axes lists dp_replicate, dp_shard, tp)",
        "[spmd_mypy]: flattened_axes 'x' must name distinct mesh axes: it flattens some of the "
        "mesh axes (dp_replicate, dp_shard, tp), e.g. x: dp_replicate dp_shard; ignored",
    )
