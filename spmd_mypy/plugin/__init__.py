"""The mypy plugin: ``plugins = spmd_mypy.plugin``.

A thin adapter between mypy and the rule engine (:mod:`spmd_mypy.engine`):

- annotations: ``Tensor[R["tp"], V["dp"]]`` is analysed into a canonical
  instance (:mod:`.annotation_hooks`, :mod:`.mypy_types`), with errors at the annotation;
- calls: torch ops, operators, the spmd collectives and helpers are typed by
  the engine (:mod:`.calls`; the dims a call states: :mod:`.reductions`; torch modules and
  user modules: :mod:`.modules`; ``functools.partial`` of an op: :mod:`.partials`;
  ``torch.linalg`` / ``special`` / ``fft``, builtins without stubs: :mod:`.torch_namespaces`);
- which hook answers which name: :mod:`.dispatch` (compiled, as every module here but
  this one);
- gradual typing: a plain ``torch.Tensor`` is accepted wherever a typed tensor
  is expected (mypy "promotes" it to ``Tensor[Any, ...]``), so unannotated code
  gets no new errors.

Imports only mypy and the stdlib (plus the pure engine): no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Callable

from mypy_extensions import mypyc_attr
from mypy.nodes import MypyFile
from mypy.plugin import (
    AnalyzeTypeContext,
    AttributeContext,
    ClassDefContext,
    FunctionContext,
    MethodContext,
    Plugin,
    ReportConfigContext,
)
from mypy.options import Options
from mypy.types import Type

from ..engine.errors import SpmdError
from . import calls
from .annotation_hooks import AnnotationHooks
from .autograd import AutogradTyper
from .boundaries import BoundaryChecker, build_manager_of
from .config import Config, load
from .dispatch import HookDispatch
from .modules import ModuleCallTyper
from .mypy_types import TypeBuilder
from .partials import AppliedOps, PartialTyper
from .promotion import Correlated, Promotion, spmd_import_line, uses_spmd
from .rewrite import RegionIndex, Renamer
from .sources import _INSTALL_ROOTS, _SOURCES_FILE, _SPMD_NAME, InstalledSources  # noqa: F401

def _source_hash() -> str:
    """The plugin's version for mypy's cache key: a hash of every plugin and engine file,
    so any change to the rules invalidates cached results (mypy and dmypy).  MD5, a cache key
    and not a signature: it costs a third of SHA-256's instructions over the ~1.4 MB of
    sources, on every run (19M of the warm 51-module bench run)."""
    h = hashlib.md5(usedforsecurity=False)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for sub in ("plugin", "engine"):
        folder = os.path.join(root, sub)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


_SOURCE_VERSION = _source_hash()
__version__ = _SOURCE_VERSION

# the [spmd_mypy] config a daemon process started with (_daemon_version)
_DAEMON_START_CONFIG: list[bytes] = []


def _daemon_version(config: Config) -> str:
    """The plugin's version under dmypy: the plain version for the config the daemon started
    with, the config folded in for any other.

    mypy reads a plugin's ``__version__`` after its ``__init__`` twice: into the snapshot that
    keys every cached module, and, on each ``dmypy run``, from a new instance built with the
    current config, to restart the daemon when it differs from the start's.  So a daemon
    loads the cache plain mypy wrote (torch's analysis does not depend on the section: the
    modules that name spmd are keyed on it by report_config_data), and an edited
    ``[tool.spmd_mypy]`` section makes the next ``dmypy run`` restart it ("plugins changed")
    into a new process, whose start config is the new one."""
    key = json.dumps(config.as_cache_key(), sort_keys=True).encode()
    if not _DAEMON_START_CONFIG:
        _DAEMON_START_CONFIG.append(key)
    if key == _DAEMON_START_CONFIG[0]:
        return _SOURCE_VERSION
    return f"{_SOURCE_VERSION}+{hashlib.sha256(key).hexdigest()[:8]}"


# mypy's hook questions answered in compiled code (dispatch.py): instance attributes bound
# in SpmdPlugin.__init__ shadow these methods unless a subclass overrides them (report.py)
_DISPATCHED = ("get_type_analyze_hook", "get_customize_class_mro_hook", "get_function_hook",
               "get_function_signature_hook", "get_method_signature_hook", "get_method_hook",
               "get_attribute_hook")


# A Python class even when the plugin is compiled with mypyc: its base, mypy's own (compiled)
# Plugin, is a native class of another compilation unit.
@mypyc_attr(native_class=False)
class SpmdPlugin(Plugin):
    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.config: Config = load(options.config_file)
        for problem in self.config.problems:  # as mypy prints the problems of its own sections
            print(f"{self.config.source}: {problem}", file=sys.stderr)
        if "mypy.dmypy_server" in sys.modules:
            setattr(sys.modules[__name__], "__version__", _daemon_version(self.config))
        self.dispatch = HookDispatch(self)
        self.types = TypeBuilder(self.config.mesh_axes, self.dispatch.lookup_info)
        self.calls = calls.CallTyper(self)
        self.autograd = AutogradTyper(self)
        self.partials = PartialTyper(self)  # functools.partial of a torch op
        self.applied = AppliedOps(self)  # a torch op passed to functools.reduce / map
        self.boundaries = BoundaryChecker(self)
        self.renamer = Renamer(options)  # same-block redefinitions in function bodies
        self.modules = ModuleCallTyper(self)
        self.regions = RegionIndex()  # the gradient-free regions of each checked file
        self.calls.rank_exprs = self.regions.rank_exprs  # the same dict, updated in place
        self.calls.divergent = self.regions.divergent  # the same dict, updated in place
        self.boundaries.returned = self.regions.returned  # the same dict, updated in place
        self.promotion = Promotion(self.types, self.dispatch.lookup_info, self.dispatch.on_module,
                                   lambda: self._modules)
        self.promotion.correlated = Correlated(self.types, self.dispatch)
        self.annotations = AnnotationHooks(self)
        self.sources = InstalledSources(options)  # which installed modules name spmd
        self._setup_told = False  # the spmd-setup error was given (once per run)
        # what the modules that may name spmd are keyed on (report_config_data), built once
        self._config_data: list[object] = [_SOURCE_VERSION, self.config.as_cache_key()]
        hidden = _torch_hidden(options)
        if hidden:  # only then: a cache written while torch is seen stays valid
            self._config_data.append({"torch": hidden})
        self._parsed = False  # a file was parsed (get_additional_deps): it will be checked
        cls = type(self)
        for name in _DISPATCHED:
            if getattr(cls, name) is getattr(SpmdPlugin, name):  # not overridden by a subclass
                setattr(self, name, getattr(self.dispatch, name))

    # -- plumbing --------------------------------------------------------------------
    def in_no_grad(self, api: object, line: int) -> bool:
        return self.regions.in_no_grad(getattr(api, "tree", None), line)

    def is_detached_name(self, api: object, line: int, name: str) -> bool:
        """A local only ever assigned gradient-free values in the enclosing function."""
        return self.regions.is_detached_name(getattr(api, "tree", None), line, name)

    def set_modules(self, modules: dict[str, MypyFile]) -> None:
        super().set_modules(modules)
        # the build's graph is loaded (its changed files parsed), no module checked yet: the
        # watcher goes on now, so a warm run's first boundary error does not wait for a hook
        self.sources.save()  # every cached module's key was asked for by now
        if not self._parsed:  # nothing is checked in this build
            return
        manager = None if self.boundaries.has_store() else build_manager_of(modules)
        self.boundaries.find_store(manager)
        if not self._setup_told:
            self._tell_setup(modules, manager)

    # -- configuration and caches --------------------------------------------------
    def report_config_data(self, ctx: ReportConfigContext) -> object:
        # Every cached module records the plugin's version: mypy's own plugin check compares
        # one snapshot that any run rewrites, so a module a run left out would otherwise be
        # replayed from an older plugin's cache later.  Only modules with SPMD annotations
        # depend on the mesh axes: the user's, the shipped stubs, and an installed library
        # typed with spmd (its ``Tensor[R["tp"]]`` types are read with the axes of the
        # config).  Keying every module (torch included) on the config would throw the whole
        # cache away on each config edit: an installed module that never names ``spmd`` keys
        # on the version only (a module re-checked because of it is re-checked by mypy
        # itself when its interface changes).
        if self.sources.installed_without_spmd(ctx.path):
            return _SOURCE_VERSION
        # Whether the config hides torch (follow_imports = "skip" / "error") is part of the
        # key: mypy keeps a module that imports torch fresh when only torch's section changes,
        # so a warm run would replay checks made with torch's types (a cached "Success")
        # instead of giving the spmd-setup error, and the reverse.  Built once (__init__).
        return self._config_data

    def _tell_setup(self, modules: dict[str, MypyFile], manager: object | None) -> None:
        """One spmd-setup error when a checked file uses spmd but mypy cannot see the types
        the checks read (every tensor would be Any: the mistakes pass without a word), at the
        first ``import spmd`` / ``from spmd import`` line of the first such file this run
        parses (a file from the cache replays its own)."""
        try:
            for name in sorted(modules):
                tree = modules[name]
                line = spmd_import_line(tree)
                if line is not None and tree.path and not self.sources.installed(tree.path) \
                        and name != "spmd" and not name.startswith("spmd."):
                    if manager is None:
                        manager = build_manager_of(modules)
                    if _report_setup(manager, tree, line):
                        self._setup_told = True
                    return
        except Exception:  # noqa: BLE001 - a diagnostic must never crash mypy
            pass

    def get_additional_deps(self, file: MypyFile) -> list[tuple[int, str, int]]:
        self._parsed = True
        self.promotion.typed_imports.reset()  # the import graph may have changed
        self.dispatch.forget_module()  # and this module's imports (dmypy re-parses an edit)
        self.boundaries.rewatch()  # dmypy resets the error store before re-parsing an edit
        if uses_spmd(file):
            try:  # renamed in the walk: the regions keep the names the checker will see
                self.regions.record(file, self.renamer.prepare(file))
            except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
                pass
        return []

    # -- hooks (answered by dispatch.HookDispatch; these methods serve subclasses' super()) --
    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        return self.dispatch.get_type_analyze_hook(fullname)

    def get_customize_class_mro_hook(self, fullname: str) -> Callable[[ClassDefContext], None] | None:
        return self.dispatch.get_customize_class_mro_hook(fullname)

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        return self.dispatch.get_function_hook(fullname)

    def get_function_signature_hook(self, fullname: str) -> Callable | None:
        return self.dispatch.get_function_signature_hook(fullname)

    def get_method_signature_hook(self, fullname: str) -> Callable | None:
        return self.dispatch.get_method_signature_hook(fullname)

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        return self.dispatch.get_method_hook(fullname)

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        return self.dispatch.get_attribute_hook(fullname)


def _torch_hidden(options: Options) -> str:
    """torch's ``follow_imports`` when the config keeps mypy from reading torch ("skip", or
    "error"); else ``""``.  Read from mypy's options once per run."""
    try:
        follow = options.clone_for_module("torch").follow_imports
    except Exception:  # noqa: BLE001 - mypy's internals moved: no key, as before
        return ""
    return follow if follow in ("skip", "error") else ""


def _setup_problem(manager: object, options: Options) -> str | None:
    """What keeps the checks blind, with what to do; None when torch and spmd's stubs are seen."""
    finder = getattr(manager, "find_module_cache", None)
    found = finder.find_module("spmd") if finder is not None else None
    if isinstance(found, str) and not found.endswith(".pyi"):
        return (f"mypy reads spmd from {found}, the runtime package, not its stubs "
                f"(spmd-stubs, shipped with spmd-mypy): the SPMD annotations cannot be read "
                f"and nothing here is SPMD-checked; install spmd-mypy in the environment mypy "
                f"runs in, and take the runtime's directory (or a copy of the spmd package) "
                f"off mypy's path (MYPYPATH, mypy_path, the checked directory)")
    # not found: mypy reads packages from another environment (--python-executable) that
    # lacks spmd-mypy, and --ignore-missing-imports (or the import-not-found error) hides it
    no_stubs = not isinstance(found, str) and finder is not None
    missing = getattr(manager, "missing_modules", None)
    if not isinstance(missing, dict) or "torch" not in missing:
        if no_stubs:
            return ("mypy cannot find spmd's stubs (spmd-stubs, installed with spmd-mypy): the "
                    "SPMD annotations cannot be read and nothing here is SPMD-checked; install "
                    "spmd-mypy in the environment mypy reads packages from (with "
                    "--python-executable, that interpreter's environment, beside torch)")
        return None
    follow = _torch_hidden(options)
    if follow:
        return (f'torch is imported with follow_imports = "{follow}": every tensor here is Any '
                f'and nothing is SPMD-checked; use follow_imports = "silent" for torch (its '
                f'errors stay hidden, its types are read; a warm cache makes it as fast)')
    return ("mypy cannot find torch: every tensor here is Any and nothing is SPMD-checked; "
            "install torch in the environment mypy runs in (pre-commit: add torch to the mypy "
            "hook's additional_dependencies; or point mypy at it with --python-executable)"
            + (", and spmd-mypy beside it (spmd's stubs are not found either)" if no_stubs else ""))


def _report_setup(manager: object | None, tree: MypyFile, line: int) -> bool:
    """The spmd-setup error, if any, in ``tree``'s file, on mypy's error store (``manager``:
    boundaries.build_manager_of).  True when the question was answered."""
    from mypy.errors import Errors

    from .codes import ERROR_CODES

    store = getattr(manager, "errors", None)
    options = getattr(manager, "options", None)
    if not isinstance(store, Errors) or not isinstance(options, Options):
        return False
    problem = _setup_problem(manager, options)
    if problem is not None:
        previous = (store.file, store.target_module, store.scope, store.options)
        store.set_file(tree.path, tree.fullname, options.clone_for_module(tree.fullname))
        store.report(line, 0, problem, code=ERROR_CODES["spmd-setup"])
        store.set_file(previous[0], previous[1], previous[3], previous[2])
    return True


def plugin(version: str) -> type[SpmdPlugin]:
    return SpmdPlugin


__all__ = ["SpmdPlugin", "plugin", "SpmdError"]
