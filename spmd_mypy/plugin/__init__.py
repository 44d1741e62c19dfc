"""The mypy plugin: ``plugins = spmd_mypy.plugin``.

A thin adapter between mypy and the rule engine (:mod:`spmd_mypy.engine`):

- annotations: ``Tensor[R["tp"], V["dp"]]`` is analysed into a canonical
  instance (:mod:`.mypy_types`), with errors at the annotation;
- calls: torch ops, operators, the spmd collectives and helpers are typed by
  the engine (:mod:`.calls`);
- gradual typing: a plain ``torch.Tensor`` is accepted wherever a typed tensor
  is expected (mypy "promotes" it to ``Tensor[Any, ...]``), so unannotated code
  gets no new errors.

Imports only mypy and the stdlib (plus the pure engine): no torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from typing import Callable

from mypy_extensions import mypyc_attr
from mypy.nodes import MypyFile, TypeInfo
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
from mypy.types import (
    AnyType,
    Instance,
    TupleType,
    Type,
    TypeList,
    TypeOfAny,
    UnboundType,
    UnionType,
    get_proper_type,
)

from ..engine.annotations import Entry, build
from ..engine.errors import SpmdError
from ..engine.types import SpmdType
from . import calls, global_calls
from .autograd import AutogradTyper, is_autograd_function
from .boundaries import BoundaryChecker
from .modules import ModuleCallTyper, is_module_class
from .codes import ERROR_CODES
from .config import Config, load
from .mypy_types import MARKER_FULLNAMES, MARKER_NAME_TO_FULLNAME, TENSOR, TENSOR_ALIAS, show_unanalyzed, AnnotationError, TypeBuilder, read_entry
from .promotion import Promotion, Synced, uses_spmd
from .rewrite import RegionIndex, Renamer, prepare_file


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

_MEGATRON_MAPPINGS = "megatron.core.tensor_parallel.mappings."
_GRAD_ATTRS = {f"{c}.grad" for c in ("torch._C.TensorBase", "torch._tensor.Tensor", TENSOR)}
_TRANSPOSE_ATTRS = {f"{c}.{a}" for c in ("torch._C.TensorBase", "torch._tensor.Tensor", TENSOR)
                    for a in ("T", "mT", "H", "mH")}
_SPMD_HELPERS = {"spmd.reveal", "spmd.declare"}
# Callees whose parameters are not user annotations: no argument check there.
_NO_SIGNATURE_CHECK = ("torch.", "spmd.", "builtins.", "typing.", "typing_extensions.",
                       "collections.", "functools.", "itertools.", "abc.", "enum.", "_typeshed.")
_PARTIAL_OPS = {"spmd.einsum": "einsum", "spmd.matmul": "matmul", "spmd.linear": "linear",
                "spmd.sum": "sum"}
_NOT_TORCH_OPS = ("torch.distributed.", "torch.autograd.", "torch.cuda.", "torch.utils.",
                  "torch.jit.", "torch.compile", "torch.fx.", "torch.onnx.", "torch.backends.",
                  "torch.testing.", "torch.multiprocessing.", "torch.optim.")


# A Python class even when the plugin is compiled with mypyc: its base, mypy's own (compiled)
# Plugin, is a native class of another compilation unit.
@mypyc_attr(native_class=False)
class SpmdPlugin(Plugin):
    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.config: Config = load(options.config_file)
        if "mypy.dmypy_server" in sys.modules:
            # Under dmypy, mypy compares the plugin's __version__ (read after this __init__) on
            # each `dmypy run`: folding the config in makes a changed [tool.spmd_mypy] section
            # restart the daemon by itself.  Not for plain mypy, where the version keys every
            # cached module (torch included) and a config edit would discard them all.
            config_key = json.dumps(self.config.as_cache_key(), sort_keys=True).encode()
            setattr(sys.modules[__name__], "__version__",
                    f"{_SOURCE_VERSION}+{hashlib.sha256(config_key).hexdigest()[:8]}")
        self.types = TypeBuilder(self.config.mesh_axes, self._lookup_info)
        self.calls = calls.CallTyper(self)
        self.autograd = AutogradTyper(self)
        self.boundaries = BoundaryChecker(self)
        self.renamer = Renamer(options)  # same-block redefinitions in function bodies
        self.modules = ModuleCallTyper(self)
        self.regions = RegionIndex()  # the gradient-free regions of each checked file
        self.promotion = Promotion(self.types, self._lookup_info, self.boundaries.watch)
        self._hook_cache: dict[str, Callable | None] = {}
        self._method_cache: dict[str, Callable | None] = {}
        self._method_sig_cache: dict[str, Callable | None] = {}
        self._built: dict[tuple[Entry, ...], tuple[SpmdType, list[SpmdError]]] = {}

    # -- plumbing --------------------------------------------------------------------
    def _lookup_info(self, fullname: str) -> TypeInfo | None:
        module, _, name = fullname.rpartition(".")
        mod = self._modules.get(module) if self._modules is not None else None
        if mod is None:
            return None
        sym = mod.names.get(name)
        node = sym.node if sym is not None else None
        return node if isinstance(node, TypeInfo) else None

    def _synced(self, hook: Callable, split_unions: bool = True) -> Callable:
        return Synced(self.promotion, hook, split_unions)

    def in_no_grad(self, api: object, line: int) -> bool:
        return self.regions.in_no_grad(getattr(api, "tree", None), line)

    def is_detached_name(self, api: object, line: int, name: str) -> bool:
        """A local only ever assigned ``<expr>.detach()`` in the enclosing function."""
        return self.regions.is_detached_name(getattr(api, "tree", None), line, name)

    # -- configuration and caches --------------------------------------------------
    def report_config_data(self, ctx: ReportConfigContext) -> object:
        # Only modules with SPMD annotations depend on the mesh axes: the user's, and the
        # shipped stubs that carry Tensor[...] types (megatron-stubs).  Answering for every
        # module (torch included) would throw the whole cache away on each config edit.
        path = ctx.path.replace("\\", "/")
        if ("site-packages" in path or "typeshed" in path) and "/megatron-stubs/" not in path:
            return None
        return self.config.as_cache_key()

    def get_additional_deps(self, file: MypyFile) -> list[tuple[int, str, int]]:
        if uses_spmd(file):
            try:
                prepare_file(file)
            except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
                pass
            self.renamer.ensure(file)
        return []

    # -- annotations -------------------------------------------------------------------
    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        if fullname == TENSOR_ALIAS:  # the alias, before mypy expands it to torch.Tensor
            return self._analyze_tensor
        if fullname in MARKER_FULLNAMES:
            return self._analyze_lone_marker
        if fullname == "spmd.grad_type":
            return self._analyze_grad_type
        return None

    def _marker_of(self, ctx: AnalyzeTypeContext, t: UnboundType) -> str | None:
        api = ctx.api
        try:
            sym = api.lookup_qualified(t.name, ctx.context, suppress_errors=True)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - never crash mypy on a lookup
            sym = None
        if sym is not None and sym.node is not None:
            return MARKER_FULLNAMES.get(sym.node.fullname)
        return None

    def _fail(self, ctx: AnalyzeTypeContext, message: str) -> None:
        ctx.api.fail(message, ctx.context, code=ERROR_CODES["spmd-annotation"])

    def _drop_false_name_errors(self, ctx: AnalyzeTypeContext) -> None:
        """Undo ``Name "tp" is not defined`` for the axis strings of this annotation.

        The rewrite in get_additional_deps prevents them, but mypy re-parses a module
        that is re-checked only because a dependency changed without calling that hook
        (build.parse_all(post_parse=False)); then the signature's type-variable pass has
        just reported them, before this hook runs.  Only errors on the exact line of an
        axis string of this annotation, naming that string, are removed.
        """
        # the errors first: most files have none, and then the annotation need not be walked
        sem = getattr(ctx.api, "api", None)
        store = getattr(sem, "errors", None)
        infos = store.error_info_map.get(store.file) if store is not None else None
        if not infos:
            return
        found: set[tuple[int, str]] = set()
        for arg in ctx.type.args:
            _axis_strings(arg, found)
        if not found:
            return
        keep = [i for i in infos if not (
            i.code is not None and i.code.code == "name-defined"
            and (i.line, i.message.split(";")[0]) in found)]
        if len(keep) != len(infos):
            infos[:] = keep

    def _analyze_tensor(self, ctx: AnalyzeTypeContext) -> Type:
        sem = getattr(ctx.api, "api", None)
        module = getattr(sem, "cur_mod_id", None)
        if module:
            self.promotion.typed_modules.add(module)
        # a module re-parsed without get_additional_deps: rename its redefinitions now
        self.renamer.ensure(getattr(sem, "cur_mod_node", None))
        self.boundaries.watch(getattr(sem, "errors", None))
        try:
            self._drop_false_name_errors(ctx)
        except Exception:  # noqa: BLE001 - never crash mypy over a cosmetic fix
            pass
        entries: list[Entry] = []
        for arg in ctx.type.args:
            marker = self._marker_of(ctx, arg) if isinstance(arg, UnboundType) else None
            if marker is None:
                shown = show_unanalyzed(arg)
                self._fail(ctx, f'Tensor[...] takes entries R["axis"], I[...], V[...], P[...], '
                                f'S[dim, "axis"] or PS[...], not {shown}')
                continue
            try:
                entries.append(read_entry(marker, arg))  # type: ignore[arg-type]
            except AnnotationError as e:
                self._fail(ctx, str(e))
        key = tuple(entries)  # the same few annotations recur all over a code base
        built = self._built.get(key)
        if built is None:
            built = build(entries, self.config.mesh_axes)
            if len(self._built) > 10_000:
                self._built.clear()
            self._built[key] = built
        t, errors = built
        for err in errors:
            self._fail(ctx, err.message)
        inst = self.types.to_instance(t)
        return inst if inst is not None else AnyType(TypeOfAny.from_error)

    def _analyze_lone_marker(self, ctx: AnalyzeTypeContext) -> Type:
        name = ctx.type.name.rsplit(".", 1)[-1]
        if not ctx.type.args:  # `src: type[R]` and the like in stubs
            info = self._lookup_info(MARKER_NAME_TO_FULLNAME.get(name, ""))
            return Instance(info, []) if info is not None else AnyType(TypeOfAny.special_form)
        api = ctx.api
        if getattr(api, "allow_unbound_tvars", False) or (
                getattr(api, "allow_placeholder", False) and not getattr(api, "defining_alias", False)):
            # `Act = Tensor[V["tp"]]` is also analysed as a value expression (a type
            # application of Tensor); the alias itself goes through _analyze_tensor.
            return AnyType(TypeOfAny.special_form)
        example = 'S[0, "tp"]' if name in ("S", "Shard") else f'{name}["tp"]'
        self._fail(ctx, f"{name}[...] is an entry of a tensor type: write Tensor[{example}]")
        return AnyType(TypeOfAny.from_error)

    def _analyze_grad_type(self, ctx: AnalyzeTypeContext) -> Type:
        """``spmd.grad_type[Tensor[R["tp"]]]``: the gradient's type, ``Tensor[P["tp"]]``."""
        args = ctx.type.args
        if len(args) != 1:
            self._fail(ctx, 'grad_type[...] takes one tensor type: grad_type[Tensor[R["tp"]]]'
                       if args else 'grad_type needs the tensor type whose gradient it names: '
                       'grad_type[Tensor[R["tp"]]]')
            return AnyType(TypeOfAny.from_error)
        analyzed = ctx.api.analyze_type(args[0])
        t = self.types.from_type(analyzed)
        if t is None:
            p = get_proper_type(analyzed)
            if not isinstance(p, AnyType):
                self._fail(ctx, f'grad_type[...] takes a tensor type such as Tensor[R["tp"]], '
                                f'not {show_unanalyzed(args[0])}')
            return AnyType(TypeOfAny.from_error)
        inst = self.types.to_instance(t.dual())
        return inst if inst is not None else AnyType(TypeOfAny.from_error)

    # -- classes -----------------------------------------------------------------------
    def get_customize_class_mro_hook(self, fullname: str) -> Callable[[ClassDefContext], None] | None:
        # Called for every class, with its MRO, before its body is analysed: the backward of a
        # custom autograd Function gets the synthetic trigger that checks the Function once
        # mypy has checked backward's body (see autograd.py).
        return self._class_mro_hook

    def _class_mro_hook(self, ctx: ClassDefContext) -> None:
        tree = getattr(ctx.api, "cur_mod_node", None)
        if tree is not None and self.promotion.uses_spmd_types(tree, getattr(ctx.api, "cur_mod_id", None)):
            # a module re-parsed without get_additional_deps: rename its redefinitions now
            self.renamer.ensure(tree)
        self.boundaries.watch(getattr(ctx.api, "errors", None))
        self.autograd.class_mro_hook(ctx)

    # -- calls -------------------------------------------------------------------------
    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        if fullname in self._hook_cache:
            return self._hook_cache[fullname]
        hook = self._function_hook(fullname)
        if fullname == "builtins.isinstance":
            hook = self._isinstance_hook
        elif hook is None and fullname == "builtins.issubclass":
            hook = _default_return
        elif fullname == "builtins.hasattr":
            hook = self._narrowing_hook(hook)
        # isinstance narrows the whole value (and an autograd trigger reads the whole
        # Function); reveal prints every member itself
        split = fullname not in ("builtins.isinstance", "spmd.reveal")
        hook = self._synced(hook, split_unions=split) if hook is not None else None
        self._hook_cache[fullname] = hook
        return hook

    def get_function_signature_hook(self, fullname: str) -> Callable | None:
        if fullname.startswith(_NO_SIGNATURE_CHECK):
            return None
        return self.calls.relax_signature_hook

    def _megatron_mapping_hook(self, ctx: FunctionContext) -> Type:
        """A Megatron mapping function typed by the shipped stubs (megatron-stubs).  In a module
        that uses SPMD types it has the table's types (and its arguments are checked); in a
        module that uses none its result is untyped, as megatron-core's own functions are
        without the stubs (it has no py.typed): gradual, such code gets no new error (a
        variable joining a mapping call's result and a plain tensor, a tuple returned as a
        tensor, torch's stubs on the result)."""
        result = self.calls.check_arguments_hook(ctx)
        if self.promotion.wanted:
            return result
        ret = get_proper_type(ctx.default_return_type)
        if isinstance(ret, Instance) and ret.type.fullname == TENSOR:
            return AnyType(TypeOfAny.special_form)
        return result

    def _narrowing_hook(self, hook: Callable | None) -> Callable[[FunctionContext], Type]:
        """``hasattr(x, "full_tensor")`` narrows like isinstance: the promotion is off for it
        (see :meth:`_isinstance_hook`)."""
        def run(ctx: FunctionContext) -> Type:
            result = hook(ctx) if hook is not None else ctx.default_return_type
            self.promotion.narrowing()
            return result

        return run

    def _isinstance_hook(self, ctx: FunctionContext) -> Type:
        if self.autograd.is_trigger(ctx):
            return self.autograd.trigger_hook(ctx)
        # A real isinstance: mypy narrows right after typing this call, and it will not
        # narrow a declared torch.Tensor while the gradual promotion is on (narrow_declared_type
        # keeps any class with an alt promotion).  Off until the next hook syncs it again, which
        # every call's hooks do first; a return or an assignment in between is judged by the
        # boundary watcher, which accepts a plain tensor (see Promotion.narrowing).
        self.promotion.narrowing()
        return ctx.default_return_type

    def get_method_signature_hook(self, fullname: str) -> Callable | None:
        # mypy asks at every method call: the answer for a name is kept, except for
        # __call__ and apply, which depend on the class (a module, an autograd Function)
        if fullname in self._method_sig_cache:
            return self._method_sig_cache[fullname]
        cls, _, method = fullname.rpartition(".")
        if method == "__call__" and is_module_class(self._lookup_info(cls)):
            return self.modules.call_signature_hook  # torch's own modules too
        if calls.is_tensor_method_class(cls) or fullname.startswith(_NO_SIGNATURE_CHECK):
            hook = None
        elif method == "apply" and is_autograd_function(self._lookup_info(cls)):
            return self.autograd.apply_signature_hook
        else:
            hook = self.calls.relax_signature_hook
        if method not in ("__call__", "apply"):
            self._method_sig_cache[fullname] = hook
        return hook

    def _function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        if fullname.startswith(_MEGATRON_MAPPINGS):
            return self._megatron_mapping_hook
        if not fullname.startswith(_NO_SIGNATURE_CHECK):
            return self.calls.check_arguments_hook
        if fullname.startswith("spmd."):
            name = fullname[5:]
            if fullname == "spmd.grad_type":
                return self.calls.grad_type_hook
            if name in calls.SPMD_COLLECTIVES:
                return self.calls.collective_hook(name)
            if fullname == "spmd.reveal":
                return self.calls.reveal_hook
            if fullname == "spmd.declare":
                return self.calls.declare_hook
            if fullname == "spmd.local_map":
                return functools.partial(global_calls.local_map_hook, self.calls)
            if fullname in _PARTIAL_OPS:
                return self.calls.partial_op_hook(_PARTIAL_OPS[fullname])
            return None
        if not fullname.startswith("torch."):
            return None
        name = fullname.rsplit(".", 1)[-1]
        if fullname.startswith("torch.distributed."):
            raw = calls.raw_collective(fullname)
            if raw is not None:
                return self.calls.raw_collective_hook(raw[1], raw[0])
            return None
        if fullname == "torch.autograd.grad":
            return self.autograd.autograd_grad_hook
        if fullname == "torch.autograd.backward":
            return self.autograd.autograd_backward_hook
        if fullname.startswith(_NOT_TORCH_OPS) or not name or name[0].isupper() or name.startswith("_"):
            return None
        if name in calls.FACTORIES or name in calls.NOT_OPS:
            return None
        return self.calls.op_hook(name, method=False)

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname in self._method_cache:
            return self._method_cache[fullname]
        cls, _, method = fullname.rpartition(".")
        if " of " in fullname:  # mypy names a reflected operator on a union "__rmul__ of TensorBase"
            method, _, short = fullname.partition(" of ")
            cls = calls.TENSOR if short in ("TensorBase", "Tensor", "Parameter") else fullname
        hook: Callable | None = None
        if not calls.is_tensor_method_class(cls) and not fullname.startswith(_NO_SIGNATURE_CHECK):
            hook = self.calls.check_arguments_hook
        elif calls.is_tensor_method_class(cls):
            if method == "backward":
                hook = self.calls.backward_hook
            elif method == "register_hook":
                hook = self.autograd.register_hook_hook
            else:
                op = calls.method_op_name(method)
                if op is not None:
                    hook = self.calls.op_hook(op[0], method=True, reflected=op[1])
        hook = self._synced(hook) if hook is not None else None
        self._method_cache[fullname] = hook
        return hook

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        if fullname in _GRAD_ATTRS:
            return self._synced(self.calls.grad_attribute_hook)
        if fullname in _TRANSPOSE_ATTRS:
            return self._synced(self.calls.transpose_attribute_hook)
        return None


def _axis_strings(t: object, found: set[tuple[int, str]]) -> None:
    """The axis strings (forward references) of an unanalysed annotation, with their line."""
    if isinstance(t, UnboundType):
        if t.original_str_expr is not None and not t.args:
            found.add((t.line, f'Name "{t.original_str_expr}" is not defined'))
        for a in t.args:
            _axis_strings(a, found)
    elif isinstance(t, (TypeList, UnionType, TupleType)):
        # isinstance, not getattr(t, "items", None): a missing attribute raises (and
        # discards) an AttributeError, ~4k instructions, once per entry of every annotation
        for item in t.items:
            _axis_strings(item, found)


def _default_return(ctx: FunctionContext) -> Type:
    return ctx.default_return_type


def plugin(version: str) -> type[SpmdPlugin]:
    return SpmdPlugin


__all__ = ["SpmdPlugin", "plugin", "SpmdError"]
