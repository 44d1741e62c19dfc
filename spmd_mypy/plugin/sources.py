"""Which modules mypy finds in an installed-package directory and whether their source names
``spmd`` (the key of ``SpmdPlugin.report_config_data``).  mypy asks for every module of the
build (torch's ~1800 included) on every run: compiled with the rest of the plugin (the
plugin's ``__init__`` stays a Python class, see setup.py)."""

from __future__ import annotations

import json
import os
import re

from mypy.options import Options

_SPMD_NAME = re.compile(rb"(?<![\w.])spmd(?![\w-])")  # spmd, spmd.x; not torch_xla.distributed.spmd
_INSTALL_ROOTS = ("/site-packages/", "/dist-packages/", "/typeshed/")
_SOURCES_FILE = "spmd_mypy_sources.json"


class InstalledSources:
    """Which modules mypy finds in an installed-package directory (mypy's own package path:
    the interpreter's site directories and its other ``sys.path`` entries, such as a Debian
    ``dist-packages`` or a ``.pth`` path, outside the current directory; typeshed) and whether
    their source names ``spmd``.  The answers are kept in mypy's cache directory by path,
    mtime and size, so a warm run reads no source it read before."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._roots: tuple[str, ...] | None = None
        self._known: dict[str, list[object]] | None = None  # path -> [mtime_ns, size, names]
        self._dirty = False

    def roots(self) -> tuple[str, ...]:
        if self._roots is None:
            roots: list[str] = []
            try:
                from mypy.modulefinder import get_search_dirs

                sys_path, site_dirs = get_search_dirs(self.options.python_executable)
                here = os.path.abspath(os.getcwd())
                roots = [d for d in site_dirs] + [
                    d for d in sys_path if not (here + os.sep).startswith(d + os.sep)
                    and not (d + os.sep).startswith(here + os.sep)]
            except Exception:  # noqa: BLE001 - mypy's internals moved: the path test below
                pass
            self._roots = tuple(os.path.abspath(r).replace("\\", "/").rstrip("/") + "/"
                                for r in roots if r)
        return self._roots

    def installed(self, path: str) -> bool:
        p = path.replace("\\", "/")
        if any(root in p for root in _INSTALL_ROOTS):
            return True
        full = os.path.abspath(path).replace("\\", "/")
        return any(full.startswith(root) for root in self.roots())

    def installed_without_spmd(self, path: str) -> bool:
        if "/megatron-stubs/" in path.replace("\\", "/") or not self.installed(path):
            return False
        return not self.names_spmd(path)

    def names_spmd(self, path: str) -> bool:
        known = self._load()
        try:
            st = os.stat(path)
        except OSError:
            return True  # unreadable: keyed on the config, never stale
        entry = known.get(path)
        if entry is not None and entry[0] == st.st_mtime_ns and entry[1] == st.st_size:
            return bool(entry[2])
        try:
            with open(path, "rb") as f:
                data = f.read()
            # the plain search first (fast); the pattern only where "spmd" occurs at all
            found = b"spmd" in data and _SPMD_NAME.search(data) is not None
        except OSError:
            return True
        known[path] = [st.st_mtime_ns, st.st_size, found]
        self._dirty = True
        return found

    def _file(self) -> str | None:
        cache_dir = self.options.cache_dir
        if not self.options.incremental or not cache_dir or cache_dir == os.devnull:
            return None
        return os.path.join(cache_dir, _SOURCES_FILE)

    def _load(self) -> dict[str, list[object]]:
        if self._known is None:
            self._known = {}
            name = self._file()
            if name is not None and os.path.exists(name):
                try:
                    with open(name, encoding="utf-8") as f:
                        data = json.load(f)
                    if isinstance(data, dict):
                        self._known = {k: v for k, v in data.items()
                                       if isinstance(v, list) and len(v) == 3}
                except (OSError, ValueError):
                    pass
        return self._known

    def save(self) -> None:
        name = self._file()
        if not self._dirty or name is None or self._known is None:
            return
        try:  # atomically: mypy's parallel workers may save at once
            os.makedirs(os.path.dirname(name), exist_ok=True)
            tmp = f"{name}.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._known, f)
            os.replace(tmp, name)
            self._dirty = False
        except OSError:
            pass
