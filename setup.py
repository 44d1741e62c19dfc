"""The mypy plugin compiled with mypyc when the machine can (pyproject.toml holds the metadata).

mypy runs the plugin's hooks at every call site of the checked code, and the interpreted
plugin was most of what it adds to a mypy run (bench/static_overhead.py).  So a regular
install compiles ``spmd_mypy/plugin/`` with mypyc (mypy's own compiler, shipped with mypy,
which this package depends on anyway).  The ``.py`` sources are installed as well, and the
plugin behaves the same either way (the test suite runs against either).

Pure Python instead, never an install failure:
- ``SPMD_MYPY_PURE=1`` in the environment;
- an editable install (``pip install -e .``): the checkout's sources stay what runs;
- mypyc or the C compiler failing: a warning, then the pure package.

The rule engine (``spmd_mypy/engine/``) stays interpreted: the runtime (``spmd``) imports it too.
"""

from __future__ import annotations

import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext

PURE = os.environ.get("SPMD_MYPY_PURE", "") not in ("", "0")
EDITABLE = any(arg in ("editable_wheel", "develop") for arg in sys.argv) or "--editable" in sys.argv


def _warn(message: str) -> None:
    print(f"spmd-mypy: {message}; installing the pure-Python plugin", file=sys.stderr)


BUILDS = ("bdist_wheel", "build", "build_ext", "install")  # not egg_info / dist_info (metadata)


def _compiled_modules() -> list:
    if PURE or EDITABLE or not any(arg in BUILDS for arg in sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify

        # not __init__.py: SpmdPlugin stays a Python class, which spmd_mypy.report subclasses
        # (mypyc checks the exact class of self in the methods of a class it compiles)
        sources = sorted(p for p in glob.glob(os.path.join("spmd_mypy", "plugin", "*.py"))
                         if os.path.basename(p) != "__init__.py")
        # an empty mypy configuration: pyproject's [tool.mypy] (plugins = spmd_mypy.plugin,
        # files = examples) is for checking user code, not for compiling the plugin
        os.makedirs("build", exist_ok=True)
        config = os.path.join("build", "mypyc.ini")
        with open(config, "w") as f:
            f.write("[mypy]\n")
        # --follow-imports=silent: the engine is type-checked for the plugin's sake but neither
        # compiled nor held to mypyc's rules
        # multi_file: one C file per module instead of one of ~33 MB, so that build_extension
        # below compiles them side by side (the single file took ~3.5 min of one core)
        return mypycify(["--config-file", config, "--follow-imports=silent", *sources], opt_level="3",
                        multi_file=True)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure: the pure package
        _warn(f"mypyc could not compile the plugin ({type(e).__name__}: {e})")
        return []


def _in_parallel(compile_serially, compiler, build_temp: str):  # noqa: ANN001, ANN202
    """``compiler.compile`` over one source per job, on every CPU: distutils compiles an
    extension's sources one after another (mypyc's multi-file group is ~40 C files)."""
    jobs = os.cpu_count() or 1

    def compile_sources(sources, output_dir=None, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if jobs < 2 or len(sources) < 2:
            return compile_serially(sources, output_dir, *args, **kwargs)
        # the object directories first: distutils' mkpath is not safe to race
        for obj in compiler.object_filenames(sources, output_dir=output_dir or build_temp):
            os.makedirs(os.path.dirname(obj) or ".", exist_ok=True)
        # the largest first, so that no large file starts last
        order = sorted(sources, key=lambda s: -os.path.getsize(s) if os.path.exists(s) else 0)
        with ThreadPoolExecutor(jobs) as pool:
            done = dict(zip(order, pool.map(
                lambda source: compile_serially([source], output_dir, *args, **kwargs), order)))
        return [obj for source in sources for obj in done[source]]

    return compile_sources


class _BuildExtOrPure(build_ext):
    """build_ext that falls back to the pure package when the C build fails."""

    def run(self) -> None:
        if self.inplace:  # an in-tree build would shadow the checkout's sources
            return
        try:
            super().run()
        except Exception as e:  # noqa: BLE001
            _warn(f"compiling the plugin failed ({type(e).__name__}: {e})")
            self._remove_built()

    def build_extension(self, ext) -> None:  # noqa: ANN001
        compile_serially = self.compiler.compile
        self.compiler.compile = _in_parallel(compile_serially, self.compiler, self.build_temp)
        try:
            super().build_extension(ext)
        except Exception:
            self._remove_built()
            raise
        finally:
            self.compiler.compile = compile_serially

    def _remove_built(self) -> None:
        # a partly built group (one module's shim without the shared library) would not import
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                os.remove(path)
        self.extensions = []

    def get_outputs(self) -> list[str]:
        return [p for p in super().get_outputs() if os.path.exists(p)]


try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # pragma: no cover - setuptools < 64 has no PEP 660 editable installs
    editable_wheel = None


if editable_wheel is not None:
    class _EditableLinks(editable_wheel):
        """``pip install -e .`` as ``editable_mode=strict`` unless another mode is asked for:
        a tree of links to the checkout under build/, named by one ``.pth`` path.  The default
        mode maps ``spmd``, ``spmd-stubs`` (``runtime/``, ``stubs/``) with an import hook,
        which mypy does not run: it found no ``spmd`` (import-not-found).  Edits to existing
        files show at once; a new module needs the install again."""

        def finalize_options(self) -> None:
            if not self.mode:
                self.mode = "strict"
            super().finalize_options()


setup(ext_modules=_compiled_modules(),
      cmdclass={"build_ext": _BuildExtOrPure,
                **({"editable_wheel": _EditableLinks} if editable_wheel is not None else {})})
