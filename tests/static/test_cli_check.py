"""``spmd-mypy check`` keeps the user's whole mypy config when it adds the plugin.

Each form (mypy.ini, setup.cfg, pyproject.toml) without the plugin in it: the command's output
is mypy's own over the same config with ``spmd_mypy.plugin`` written into it, per-module
sections (``disable_error_code``, ``warn_unused_ignores``) and ``[spmd_mypy-m2] strict``
included.  The settings differ per module only, so torch's seeded cache stays valid."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spmd_mypy.cli import _config_with_plugin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy  # noqa: E402
from run_once import seed_mypy_cache  # noqa: E402

M1 = '''import torch
from spmd import Tensor, R, P


def f(p: Tensor[P["tp"]], r: Tensor[R["tp"]]) -> None:
    a = p + r
    b = torch.relu(p)
    c = r + r  # type: ignore[spmd-partial-affine]
'''
M2 = '''import torch
from spmd import Tensor, R, P


def f(p: Tensor[P["tp"]], r: Tensor[R["tp"]], x: torch.Tensor) -> None:
    a = p + r
    h = r * x
'''
INI = '''[mypy]
{plugins}
[mypy-m1]
disable_error_code = spmd-partial-affine
warn_unused_ignores = True
[spmd_mypy]
mesh_axes = dp, tp
[spmd_mypy-m2]
strict = true
'''
TOML = '''[build-system]
requires = ["setuptools"]

[tool.mypy]
{plugins}

[[tool.mypy.overrides]]
module = "m1"
disable_error_code = ["spmd-partial-affine"]
warn_unused_ignores = true

[tool.spmd_mypy]
mesh_axes = ["dp", "tp"]

[[tool.spmd_mypy.overrides]]
module = ["m2"]
strict = true
'''
FORMS = {"mypy.ini": (INI, "plugins = spmd_mypy.plugin"),
         "setup.cfg": (INI, "plugins = spmd_mypy.plugin"),
         "pyproject.toml": (TOML, 'plugins = ["spmd_mypy.plugin"]')}


def _project(root: Path, name: str, with_plugin: bool) -> None:
    root.mkdir()
    template, plugins = FORMS[name]
    (root / name).write_text(template.format(plugins=plugins if with_plugin else ""))
    (root / "m1.py").write_text(M1)
    (root / "m2.py").write_text(M2)
    seed_mypy_cache(root / ".mypy_cache")


def _check(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "spmd_mypy", "check", *args], cwd=root,
                          capture_output=True, text=True, timeout=600, env=env)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("name", sorted(FORMS))
def test_check_keeps_the_whole_config(tmp_path: Path, name: str) -> None:
    _project(tmp_path / "with", name, with_plugin=True)
    expected = run_mypy(tmp_path / "with", "m1.py", "m2.py")
    _project(tmp_path / "without", name, with_plugin=False)
    proc = _check(tmp_path / "without", "m1.py", "m2.py")
    assert proc.stdout == expected, proc.stderr
    # what the config says, measured on the user's code
    assert "m1.py:6:" not in expected  # p + r: spmd-partial-affine disabled in m1
    assert "m1.py:7: error:" in expected and "[spmd-partial-nonlinear]" in expected
    assert 'm1.py:8: error: Unused "type: ignore" comment' in expected  # warn_unused_ignores
    assert "m2.py:6: error:" in expected  # p + r: affine is only disabled in m1
    assert "m2.py:7: error:" in expected and "[spmd-untyped]" in expected  # strict in m2
    assert proc.returncode == 1
    assert (tmp_path / "without" / name).read_text() == FORMS[name][0].format(plugins="")


def test_check_names_the_users_config_in_config_problems(tmp_path: Path) -> None:
    """mypy's and the plugin's complaints about the config name the user's file, not the copy."""
    _project(tmp_path / "p", "mypy.ini", with_plugin=False)
    (tmp_path / "p" / "mypy.ini").write_text(
        INI.format(plugins="") + "[spmd_mypy-m1]\nbogus = 1\n[mypy-m2]\nno_such_flag = 1\n")
    proc = _check(tmp_path / "p", "m2.py")
    assert "mypy.ini: [mypy-m2]:Unrecognized option: no_such_flag = 1" in proc.stderr
    assert "mypy.ini: [spmd_mypy-m1]: unknown per-module option 'bogus'" in proc.stderr
    assert "spmd-mypy-" not in proc.stdout + proc.stderr  # the temp copy's path
    for line in proc.stderr.splitlines():
        assert line.startswith("mypy.ini: "), line


def test_check_paths_relative_to_the_config(tmp_path: Path) -> None:
    """``$MYPY_CONFIG_FILE_DIR`` (mypy sets it to the config's directory) still means the
    user's config directory when the config is copied; mypy_path relative to the working
    directory stays so."""
    root = tmp_path / "p"
    _project(root, "mypy.ini", with_plugin=False)
    (root / "conf").mkdir()
    (root / "conf" / "mypy.ini").write_text(
        "[mypy]\nmypy_path = $MYPY_CONFIG_FILE_DIR/../lib1, lib2\n"
        "[spmd_mypy]\nmesh_axes = dp, tp\n")
    for lib, name in (("lib1", "one"), ("lib2", "two")):
        (root / lib).mkdir()
        (root / lib / f"{name}.py").write_text("def f() -> int:\n    return 1\n")
    (root / "m.py").write_text("import one\nimport two\n\na: str = one.f()\nb: str = two.f()\n")
    proc = _check(root, "--config-file", "conf/mypy.ini", "m.py")
    assert "m.py:4: error: Incompatible types in assignment" in proc.stdout, proc.stdout + proc.stderr
    assert "m.py:5: error: Incompatible types in assignment" in proc.stdout
    assert "import-not-found" not in proc.stdout


def _read_copy(config: Path) -> tuple[str, str]:
    path, temp = _config_with_plugin(str(config))
    assert path is not None and temp is not None and path != str(config)
    try:
        assert os.path.basename(path) == config.name  # the same name: the same form for mypy
        return path, Path(path).read_text()
    finally:
        shutil.rmtree(temp)


def test_copy_appends_to_the_users_plugins(tmp_path: Path) -> None:
    ini = tmp_path / "mypy.ini"
    ini.write_text("[mypy]\nplugins = pydantic.mypy, ./plug.py, sub/other.py:entry\n"
                   "cache_dir = $MYPY_CONFIG_FILE_DIR/.cache\n[mypy-a.*]\nignore_missing_imports = True\n")
    _, text = _read_copy(ini)
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    assert [p.strip() for p in parser.get("mypy", "plugins").split(",")] == [
        "pydantic.mypy", os.path.join(str(tmp_path), "./plug.py"),
        os.path.join(str(tmp_path), "sub/other.py") + ":entry", "spmd_mypy.plugin"]
    assert parser.get("mypy", "cache_dir") == f"{tmp_path}/.cache"
    assert parser.get("mypy-a.*", "ignore_missing_imports") == "True"

    toml = tmp_path / "pyproject.toml"
    toml.write_text('[tool.mypy]\nplugins = ["pydantic.mypy"]\nmypy_path = "${MYPY_CONFIG_FILE_DIR}/src"\n'
                    'exclude = ["a/", "b/"]\n[[tool.mypy.overrides]]\nmodule = ["x.*", "y"]\n'
                    'ignore_errors = true\n[tool.spmd_mypy]\nmesh_axes = ["tp"]\n'
                    '[[tool.spmd_mypy.overrides]]\nmodule = "y"\nstrict = true\n')
    _, text = _read_copy(toml)
    import tomllib

    data = tomllib.loads(text)["tool"]
    assert data["mypy"] == {"plugins": ["pydantic.mypy", "spmd_mypy.plugin"],
                            "mypy_path": f"{tmp_path}/src", "exclude": ["a/", "b/"],
                            "overrides": [{"module": ["x.*", "y"], "ignore_errors": True}]}
    assert data["spmd_mypy"] == {"mesh_axes": ["tp"], "overrides": [{"module": "y", "strict": True}]}


def test_config_that_loads_the_plugin_is_used_as_is(tmp_path: Path) -> None:
    ini = tmp_path / "setup.cfg"
    ini.write_text("[mypy]\nplugins =\n    other.plugin,\n    spmd_mypy.plugin\n")
    assert _config_with_plugin(str(ini)) == (str(ini), None)
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[tool.mypy]\nplugins = ["spmd_mypy.plugin"]\n')
    assert _config_with_plugin(str(toml)) == (str(toml), None)
    # a mention in a comment is not a plugins entry
    ini.write_text("[mypy]\n# plugins = spmd_mypy.plugin\n")
    path, temp = _config_with_plugin(str(ini))
    assert temp is not None and "plugins = spmd_mypy.plugin" in Path(path).read_text()
    shutil.rmtree(temp)


def test_check_a_package_with_per_module_codes(tmp_path: Path) -> None:
    """``spmd-mypy check -p pkg`` with a per-module section that disables an spmd code: mypy
    reads per-module sections while it looks for the package's modules, before it loads any
    plugin, so plain ``mypy -p`` fails on the plugin's code names (KeyError in mypy's
    options, mypy 2.4.1); the command registers them first and checks as ``mypy pkg`` does."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "mypy.ini").write_text(INI.format(plugins="").replace("[mypy-m1]", "[mypy-pkg.*]")
                                   .replace("[spmd_mypy-m2]", "[spmd_mypy-pkg.m2]"))
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "m1.py").write_text(M1)
    (root / "pkg" / "m2.py").write_text(M2)
    seed_mypy_cache(root / ".mypy_cache")
    # the package importable (installed, or on PYTHONPATH): where mypy's search reads the
    # per-module options
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    by_package = _check(root, "-p", "pkg", env=env)
    by_path = _check(root, "pkg", env=env)
    assert "KeyError" not in by_package.stderr, by_package.stderr
    assert by_package.stdout == by_path.stdout, by_package.stdout + by_package.stderr
    assert "m1.py:6:" not in by_package.stdout and "m2.py:6:" not in by_package.stdout  # pkg.*
    assert "m1.py:7: error:" in by_package.stdout and "m2.py:7: error:" in by_package.stdout


def test_check_passes_mypy_options_with_separate_values(tmp_path: Path) -> None:
    """``--cache-dir D`` / ``--python-executable X`` (the value a separate argument): argparse
    took the value for a path, so mypy got ``--cache-dir m1.py`` ("expected one argument");
    the arguments go to mypy in the order given."""
    _project(tmp_path / "p", "mypy.ini", with_plugin=False)
    spaced = _check(tmp_path / "p", "--cache-dir", ".mypy_cache", "--python-executable",
                    sys.executable, "m1.py", "--config-file", "mypy.ini", "m2.py")
    joined = _check(tmp_path / "p", "--cache-dir=.mypy_cache", f"--python-executable={sys.executable}",
                    "--config-file=mypy.ini", "m1.py", "m2.py")
    assert "m1.py:7: error:" in spaced.stdout and "[spmd-partial-nonlinear]" in spaced.stdout, \
        spaced.stdout + spaced.stderr
    assert spaced.stdout == joined.stdout and spaced.returncode == joined.returncode == 1


def test_own_options_are_taken_out_of_mypys_arguments() -> None:
    from spmd_mypy.cli import _OWN_OPTIONS, _mypy_args

    argv = ["--json", "-p", "pkg", "--config-file", "c.ini", "--cache-dir", "D", "--", "--json"]
    assert _mypy_args(argv, _OWN_OPTIONS["report"]) == ["-p", "pkg", "--cache-dir", "D", "--", "--json"]
    assert _mypy_args(["--config-file=c.ini", "a.py"], _OWN_OPTIONS["check"]) == ["a.py"]
