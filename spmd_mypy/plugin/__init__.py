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
from .boundaries import BoundaryChecker
from .config import Config, load
from .dispatch import HookDispatch
from .modules import ModuleCallTyper
from .mypy_types import TypeBuilder
from .partials import AppliedOps, PartialTyper
from .promotion import Correlated, Promotion, uses_spmd
from .rewrite import RegionIndex, Renamer

def _source_hash() -> str:
    """The plugin's version for mypy's cache key: a hash of every plugin and engine file,
    so any change to the rules invalidates cached results (mypy and dmypy)."""
    h = hashlib.sha256()
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
            # Under dmypy, mypy compares the plugin's __version__ (read after this __init__) on
            # each `dmypy run`: folding the config in makes a changed [tool.spmd_mypy] section
            # restart the daemon by itself.  Not for plain mypy, where the version keys every
            # cached module (torch included) and a config edit would discard them all.
            config_key = json.dumps(self.config.as_cache_key(), sort_keys=True).encode()
            setattr(sys.modules[__name__], "__version__",
                    f"{_SOURCE_VERSION}+{hashlib.sha256(config_key).hexdigest()[:8]}")
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
        self.promotion = Promotion(self.types, self.dispatch.lookup_info, self.dispatch.on_module,
                                   lambda: self._modules)
        self.promotion.correlated = Correlated(self.types, self.dispatch)
        self.annotations = AnnotationHooks(self)
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
        if self._parsed:  # else nothing is checked in this build
            self.boundaries.find_store(modules)

    # -- configuration and caches --------------------------------------------------
    def report_config_data(self, ctx: ReportConfigContext) -> object:
        # Every cached module records the plugin's version: mypy's own plugin check compares
        # one snapshot that any run rewrites, so a module a run left out would otherwise be
        # replayed from an older plugin's cache later.  Only modules with SPMD annotations
        # depend on the mesh axes: the user's, and the shipped stubs that carry Tensor[...]
        # types (megatron-stubs).  Keying every module (torch included) on the config would
        # throw the whole cache away on each config edit.
        path = ctx.path.replace("\\", "/")
        if ("site-packages" in path or "typeshed" in path) and "/megatron-stubs/" not in path:
            return _SOURCE_VERSION
        return [_SOURCE_VERSION, self.config.as_cache_key()]

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


def plugin(version: str) -> type[SpmdPlugin]:
    return SpmdPlugin


__all__ = ["SpmdPlugin", "plugin", "SpmdError"]
