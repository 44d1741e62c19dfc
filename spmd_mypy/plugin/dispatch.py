"""Which hook mypy gets for a name: the plugin's hook getters, compiled.

mypy asks a plugin for a hook at every call site, method call, attribute access and
annotation (``get_function_hook("torch.matmul")``, ~66k questions on a 20k-line
Megatron-style corpus).  Answered by the Python class :class:`~spmd_mypy.plugin.SpmdPlugin`,
each question was an interpreted frame.  :class:`HookDispatch` answers them in compiled code,
and ``SpmdPlugin`` binds its methods as instance attributes, so mypy's (compiled) calls reach
them without a Python frame.  The hooks returned live with their typers (:mod:`.calls`,
:mod:`.autograd`, :mod:`.modules`, :mod:`.annotation_hooks`); the answers for a name are kept
where they do not depend on the class.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Final, cast

from mypy.checker_state import checker_state
from mypy.nodes import CallExpr, MemberExpr, NameExpr, SymbolNode, TypeInfo, Var
from mypy.plugin import AttributeContext, ClassDefContext, FunctionContext, MethodContext
from mypy.types import AnyType, Instance, Type, TypeOfAny, UninhabitedType, get_proper_type

from . import calls, global_calls, torch_namespaces
from .discarded import errors_at, is_statement_call
from .custom_ops import CUSTOM_OP_CALL, custom_op_hook
from .einops_calls import (
    EINOPS_FUNCTIONS, EINOPS_LAYERS, einops_hook, einops_layer_hook, einops_signature_hook,
)
from ..engine.collectives import DIVERGENCE_ONLY_COLLECTIVES, takes_pending
from ..engine.megatron import TP_AXIS, TYPED_MAPPINGS
from ..engine.ops import FOREACH_PREFIX, FUSED_OPS, RANDOM_LIKE, VALUE_READS, send_call
from .autograd import is_autograd_function
from .modules import (
    INDICES_RESULT_MODULES, MODULE_DICT, MODULE_LIST, SEQUENTIAL, TORCH_MODULE_OPS, TUPLE_RESULT_MODULES,
    is_module_class, iteration_hook, module_list_method_hook, returns_one_tensor,
)
from .mypy_types import MARKER_FULLNAMES, TENSOR, TENSOR_ALIAS, TORCH_TENSOR_BASES
from .guard import ANNOTATION, NOTHING, RESULT, SIGNATURE, Guarded
from .promotion import Promotion, Synced
from .rewrite import TRIGGER_FULLNAME
from .scalar_powers import POWERS, REFLECTED_POWERS, power_hook, reflected_power_hook

if TYPE_CHECKING:
    from . import SpmdPlugin

# mypy's shared checker state, read at every hook question (_follow_module): a Final module
# attribute is a C static to this compiled module, an imported name a dict lookup at each use
_checker_state: Final = checker_state
_MEGATRON_MAPPINGS: Final = "megatron.core.tensor_parallel.mappings."
# Python builtins typed as torch ops on tensors (only in modules that meet SPMD types)
_BUILTIN_OPS: Final = frozenset(("builtins.abs", "builtins.sum", "builtins.max", "builtins.min"))
# Python's conversions of a tensor's value, by the dunder they call (engine VALUE_READS)
_BUILTIN_READS: Final = {"builtins.float": "__float__", "builtins.int": "__int__",
                  "builtins.bool": "__bool__", "builtins.complex": "__complex__"}
# builtins hooked only in modules that meet SPMD types (with the ops above)
_BUILTIN_HOOKED: Final = (_BUILTIN_OPS | frozenset(_BUILTIN_READS)
                   | {"builtins.enumerate", "builtins.reversed", "builtins.zip", "builtins.map",
                      "functools.reduce"})
_TENSOR_CLASSES: Final = ("torch._C.TensorBase", "torch._tensor.Tensor", TENSOR)
_GRAD_ATTRS: Final = frozenset(f"{c}.grad" for c in _TENSOR_CLASSES)
_TRANSPOSE_ATTRS: Final = frozenset(f"{c}.{a}" for c in _TENSOR_CLASSES for a in ("T", "mT", "H", "mH"))
_DATA_ATTRS: Final = frozenset(f"{c}.data" for c in _TENSOR_CLASSES)
_COMPLEX_PART_ATTRS: Final = frozenset(f"{c}.{a}" for c in _TENSOR_CLASSES for a in ("real", "imag"))
# the hooked tensor attributes by kind (one dict lookup per attribute question)
_NOT_HOOKED: Final = 0
_GRAD: Final = 1
_TRANSPOSE: Final = 2
_DATA: Final = 3
_COMPLEX_PART: Final = 4
_ATTRIBUTE_KINDS: Final[dict[str, int]] = {
    **{n: _COMPLEX_PART for n in _COMPLEX_PART_ATTRS}, **{n: _DATA for n in _DATA_ATTRS},
    **{n: _TRANSPOSE for n in _TRANSPOSE_ATTRS}, **{n: _GRAD for n in _GRAD_ATTRS}}
# a hook cache's answer not known yet (a hook may be None)
_UNSET: Final = object()
# Callees whose parameters are not user annotations: no argument check there (nor a hook:
# mypy builds a context for each).  The standard library modules training code calls most.
NO_SIGNATURE_CHECK: Final = ("torch.", "spmd.", "builtins.", "typing.", "typing_extensions.",
                      "collections.", "functools.", "itertools.", "abc.", "enum.", "_typeshed.",
                      "math.", "dataclasses.", "os.", "sys.", "re.", "json.", "logging.",
                      "warnings.", "time.", "random.", "copy.", "inspect.", "operator.",
                      "contextlib.", "pathlib.", "argparse.", "datetime.", "pickle.",
                      "threading.", "weakref.", "statistics.")
# NO_SIGNATURE_CHECK by the first part of a name (each prefix is a top-level module and a dot):
# one set lookup where the prefixes' startswith tested each in turn (first questions of a name)
_NO_SIGNATURE_ROOTS: Final = frozenset(p[:-1] for p in NO_SIGNATURE_CHECK)


def _unchecked_callee(fullname: str) -> bool:
    """``fullname.startswith(NO_SIGNATURE_CHECK)``."""
    root, dot, _ = fullname.partition(".")
    return bool(dot) and root in _NO_SIGNATURE_ROOTS


_PARTIAL_OPS: Final = {"spmd.einsum": "einsum", "spmd.matmul": "matmul", "spmd.linear": "linear",
                "spmd.sum": "sum"}
# torch._utils' flatten/unflatten of a list of tensors (the bucketing DDP code calls): torch
# does not annotate them (Any); the hook types them as the engine's ops of those names
_DENSE_FLATTENING: Final = {"torch._utils._flatten_dense_tensors": "flatten_dense_tensors",
                     "torch._utils._unflatten_dense_tensors": "unflatten_dense_tensors"}
_NOT_TORCH_OPS: Final = ("torch.distributed.", "torch.autograd.", "torch.cuda.", "torch.utils.",
                  "torch.jit.", "torch.compile", "torch.fx.", "torch.onnx.", "torch.backends.",
                  "torch.testing.", "torch.multiprocessing.", "torch.optim.")


def compiled_module_hook(ctx: FunctionContext) -> Type:
    """``torch.compile(module)``: the module as far as its calls go (the compiled module
    forwards ``__call__`` to it), so its forward's types are checked (torch's stubs give
    ``Callable[..., Any]``: every call of it was unchecked).  A function keeps its stubs'
    type (its own signature)."""
    t = get_proper_type(ctx.arg_types[0][0]) if ctx.arg_types and ctx.arg_types[0] else None
    if isinstance(t, Instance) and is_module_class(t.type):
        return t
    return ctx.default_return_type


def _tuple_of_result(hook: Callable[[FunctionContext], Type], typer: calls.CallTyper,
                     ctx: FunctionContext) -> Type:
    """_unflatten_dense_tensors's result: a tuple of tensors of the op's type (torch returns
    them as a tuple of views of the flat tensor)."""
    t = hook(ctx)
    if typer.types.from_type(t) is not None:
        return ctx.api.named_generic_type("builtins.tuple", [t])
    return t


class HookDispatch:
    """The answers to mypy's ``get_*_hook(fullname)`` questions (see the module docstring)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        self._function_cache: dict[str, Callable | None] = {}
        self._method_cache: dict[str, Callable | None] = {}
        self._method_sig_cache: dict[str, Callable | None] = {}
        self._function_sig_cache: dict[str, Callable | None] = {}
        self._tensor_list_cache: dict[str, Callable | None] = {}
        self._module_checker: object | None = None  # mypy's TypeChecker the promotion follows
        self._checker: Synced | None = None  # the argument check of user callees (shared)
        self._promotion: Promotion | None = None  # the plugin's, read at each hook question
        self._typer: calls.CallTyper | None = None  # the plugin's call typer, alike
        self._guards: dict[str, Guarded] = {}  # the guarded hooks that are not Synced, by name
        # torch.linalg/special/fft functions given a signature from their docstring
        # (torch_namespaces): their result stays Any where no SPMD type is met
        self._bound_builtins: set[str] = set()
        # the hooks of int ** float (scalar_powers), compared by identity in get_method_hook
        self._power_hooks: tuple[Guarded, Guarded] = (Guarded(power_hook, RESULT),
                                                      Guarded(reflected_power_hook, RESULT))

    def lookup_node(self, fullname: str) -> SymbolNode | None:
        """The module-level definition named ``fullname`` among the modules mypy has loaded."""
        modules = self.plugin._modules
        if modules is None:
            return None
        module, _, name = fullname.rpartition(".")
        mod = modules.get(module)
        if mod is None:
            return None
        sym = mod.names.get(name)
        return sym.node if sym is not None else None

    def lookup_info(self, fullname: str) -> TypeInfo | None:
        """The class named ``fullname`` among the modules mypy has loaded, if any."""
        node = self.lookup_node(fullname)
        return node if isinstance(node, TypeInfo) else None

    def is_tensor_class(self, cls: str) -> bool:
        """Tensor methods are called on ``cls``: torch's tensor classes, or a module-level
        ``NewType`` of a tensor (``Grad = NewType("Grad", Tensor[P["tp"]])``: mypy names its
        methods ``mod.Grad.__add__``)."""
        if calls.is_tensor_method_class(cls):
            return True
        info = self.lookup_info(cls)
        return info is not None and info.is_newtype and any(
            info.has_base(b) for b in (TENSOR, *TORCH_TENSOR_BASES))

    def _guard(self, name: str, hook: Callable, kind: int) -> Guarded:
        """``hook`` under the guard (guard.py), made once per name."""
        g = self._guards.get(name)
        if g is None:
            g = self._guards[name] = Guarded(hook, kind)
        return g

    def _synced(self, hook: Callable, split_unions: bool = True) -> Callable:
        return Synced(self.plugin.promotion, hook, split_unions, self.plugin.boundaries.settled_return)

    def _check_arguments(self) -> Synced:
        checker = self._checker
        if checker is None:
            checker = self._checker = Synced(self.plugin.promotion, self.plugin.calls.check_arguments_hook,
                                             False,  # it splits them itself
                                             self.plugin.boundaries.settled_return)
        return checker

    def _when_pending(self, hook: Callable | None) -> Callable | None:
        """A user callee's argument check only for a call whose signature was relaxed.

        mypy asks for the call hook after the signature hook and the arguments, and builds a
        context for every hook it gets (~1 us a call).  Most calls of user functions and
        methods (of classes without typed tensor parameters, ``[a, b]`` displays, ``math``)
        have nothing pending: the check would do nothing, so mypy gets no hook."""
        if hook is not None and hook is self._checker:
            typer = self._typer
            if typer is None:  # (made after this dispatch, with the plugin; never replaced)
                typer = self._typer = self.plugin.calls
            if not typer.has_pending():
                return None
        return hook

    def on_module(self, store: object | None) -> None:
        """mypy moved to another module: the boundary watcher on its error store, and no
        relaxed call left pending from the last module (a deferred function's)."""
        self.plugin.boundaries.watch(store)
        self.plugin.calls.forget_pending()

    # -- annotations and classes ---------------------------------------------------------
    def get_type_analyze_hook(self, fullname: str) -> Callable | None:
        annotations = self.plugin.annotations
        if fullname == TENSOR_ALIAS:  # the alias, before mypy expands it to torch.Tensor
            return self._guard("tensor", annotations.analyze_tensor, ANNOTATION)
        if fullname in MARKER_FULLNAMES:
            return self._guard("marker", annotations.analyze_lone_marker, ANNOTATION)
        if fullname == "spmd.grad_type":
            return self._guard("grad_type", annotations.analyze_grad_type, ANNOTATION)
        return None

    def get_customize_class_mro_hook(self, fullname: str) -> Callable[[ClassDefContext], None] | None:
        # Called for every class, with its MRO, before its body is analysed: the backward of a
        # custom autograd Function gets the synthetic trigger that checks the Function once
        # mypy has checked backward's body (see autograd.py).
        return self._guard("class_mro", self.class_mro_hook, NOTHING)

    def class_mro_hook(self, ctx: ClassDefContext) -> None:
        plugin = self.plugin
        api = ctx.api
        tree = getattr(api, "cur_mod_node", None)
        if tree is not None and plugin.promotion.uses_spmd_types(tree, getattr(api, "cur_mod_id", None)):
            # a module re-parsed without get_additional_deps: rename its redefinitions now
            plugin.renamer.ensure(tree)
        plugin.boundaries.watch(getattr(api, "errors", None))
        plugin.autograd.class_mro_hook(ctx)
        plugin.modules.class_mro_hook(ctx)

    # -- calls ---------------------------------------------------------------------------
    def _meets_spmd(self) -> bool:
        """The module being checked meets SPMD types (see :class:`~.promotion.Promotion`).
        One that does not has no typed tensor to type (its imports reach no annotated module):
        its torch calls, tensor methods and attributes get no hook, as without the plugin
        (mypy builds a context for every hook it gets, and the hook would find nothing typed)."""
        self._follow_module()
        promotion = self._promotion
        if promotion is None:  # (made after this dispatch, with the plugin; never replaced)
            promotion = self._promotion = self.plugin.promotion
        return promotion.promoted

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        cache = self._function_cache
        known = cache.get(fullname, _UNSET)  # one lookup (mypy asks at every call)
        if known is _UNSET:
            cache[fullname] = self._new_function_hook(fullname)
            known = cache[fullname]
        hook = cast("Callable[[FunctionContext], Type] | None", known)
        if hook is None or hook is self._checker:
            return self._when_pending(hook)
        if (fullname.startswith("torch.") or fullname in _BUILTIN_HOOKED) \
                and not self._meets_spmd():
            if fullname == torch_namespaces.ADD_DOCSTR:  # while mypy checks torch itself
                return hook
            return self._guard("untyped", calls.untyped_result, RESULT) \
                if fullname in self._bound_builtins else None
        return hook

    def _new_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        """The hook of a call of ``fullname`` (kept per name by get_function_hook)."""
        hook = self._function_hook(fullname)
        if hook is not None and hook == self.plugin.calls.check_arguments_hook:
            return self._check_arguments()
        if fullname == torch_namespaces.ADD_DOCSTR:
            return self._guard("bound_builtin", torch_namespaces.bound_builtin_hook, RESULT)
        if fullname == "builtins.isinstance":
            hook = self.isinstance_hook
        elif fullname == TRIGGER_FULLNAME:  # a condition's trigger: nothing to sync or split
            return self._guard("condition", self.condition_trigger_hook, RESULT)
        elif hook is None and fullname == "builtins.issubclass":
            hook = _default_return
        elif fullname in ("builtins.hasattr", "builtins.type"):  # type(x) is C narrows too
            hook = NarrowingHook(self.plugin, hook)
        # isinstance narrows the whole value (and an autograd trigger reads the whole
        # Function); reveal prints every member itself; a mapping's argument check splits
        # a union itself (check_arguments_hook)
        split = (fullname not in ("builtins.isinstance", "spmd.reveal", "functools.partial", "builtins.enumerate",
                                 "builtins.reversed", "builtins.zip")
                 and fullname not in _BUILTIN_READS and not fullname.startswith(_MEGATRON_MAPPINGS))
        return self._synced(hook, split_unions=split) if hook is not None else None

    def _follow_module(self) -> None:
        """The promotion switched for the module being checked before mypy checks a call's
        arguments: mypy asks for a call's signature hook first, and a module whose first
        calls run no hook (``outs.append(a)`` ... ``torch.cat(outs)``) would otherwise be
        checked with the previous module's setting (results depended on the order of files)."""
        chk = _checker_state.type_checker
        if chk is not self._module_checker:
            self._module_checker = chk
            if chk is not None:
                self.plugin.promotion.sync(chk)

    def forget_module(self) -> None:
        """A file was parsed (again): the next hook finds out afresh what the module being
        checked meets, even if it is the same module as last time (dmypy, one file edited)."""
        self._module_checker = None
        self.plugin.promotion.forget()

    def get_function_signature_hook(self, fullname: str) -> Callable | None:
        # mypy asks at every call: the answer for a name is kept (each is made once)
        self._follow_module()
        cache = self._function_sig_cache
        known = cache.get(fullname, _UNSET)  # one lookup
        if known is not _UNSET:
            return cast("Callable | None", known)
        hook: Callable | None
        if fullname in EINOPS_FUNCTIONS:
            hook = self._guard("einops_signature", einops_signature_hook, SIGNATURE)
        elif _unchecked_callee(fullname):
            hook = self._tensor_list_hook(fullname) if fullname.startswith("torch.") else None
        else:
            hook = self._relax_signature()
        cache[fullname] = hook
        return hook

    def _relax_signature(self) -> Guarded:
        return self._guard("relax", self.plugin.calls.relax_signature_hook, SIGNATURE)

    def _tensor_list_hook(self, fullname: str) -> Callable | None:
        """A torch function with a ``list[Tensor]`` parameter (``torch.cat``, ``torch.stack``,
        the ``_foreach`` ops): the hook that lets it take a list of typed tensors.  Asked once
        per name: only the calls of such functions get a hook (mypy builds a context each)."""
        cache = self._tensor_list_cache
        if fullname in cache:
            return cache[fullname]
        hook: Callable | None = None
        if calls.takes_tensor_list(self.lookup_node(fullname)):
            hook = self._guard("tensor_list", self.plugin.calls.widen_tensor_lists_hook, SIGNATURE)
        cache[fullname] = hook
        return hook

    def _function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        typer = self.plugin.calls
        if fullname.startswith(_MEGATRON_MAPPINGS):
            return self.megatron_mapping_hook
        if fullname in EINOPS_FUNCTIONS:  # typed by the pattern, not einops' TypeVar
            return functools.partial(einops_hook, typer, EINOPS_FUNCTIONS[fullname])
        if not _unchecked_callee(fullname):
            return typer.check_arguments_hook
        if fullname.startswith("spmd."):
            name = fullname[5:]
            if fullname == "spmd.grad_type":
                return typer.grad_type_hook
            if name in calls.SPMD_COLLECTIVES:
                return typer.collective_hook(name)
            if fullname == "spmd.reveal":
                return typer.reveal_hook
            if fullname == "spmd.declare":
                return typer.declare_hook
            if fullname == "spmd.declare_parameters":
                return typer.declare_parameters_hook
            if fullname == "spmd.local_map":
                return functools.partial(global_calls.local_map_hook, typer)
            if fullname in _PARTIAL_OPS:
                return typer.partial_op_hook(_PARTIAL_OPS[fullname])
            return None
        if fullname == "functools.partial":
            return self.plugin.partials.new_hook
        if fullname == "functools.reduce":  # reduce(operator.mul, ps): op(acc, item)
            return self.plugin.applied.reduce_hook
        if fullname == "builtins.map":  # map(torch.relu, ps): op(item)
            return self.plugin.applied.map_hook
        if fullname in ("builtins.enumerate", "builtins.reversed", "builtins.zip"):
            return iteration_hook  # enumerate(self.layers): the modules' class
        if fullname == "builtins.abs":  # abs(x) is x.__abs__(): torch's abs
            return typer.op_hook("abs", method=False)
        if fullname in _BUILTIN_READS:  # float(x), int(x), bool(x): x's value read out
            return typer.value_read_hook(_BUILTIN_READS[fullname], method=False)
        if fullname == "builtins.sum":  # sum(xs): one add of the items (and the start)
            return typer.builtin_sum_hook
        if fullname in ("builtins.max", "builtins.min"):  # compares the items: maximum/minimum
            return typer.builtin_minmax_hook("maximum" if fullname == "builtins.max" else "minimum")
        if not fullname.startswith("torch."):
            return None
        name = fullname.rsplit(".", 1)[-1]
        if fullname.startswith("torch.distributed."):
            raw = calls.raw_collective(fullname)
            if raw is not None:
                return typer.raw_collective_hook(raw[1], raw[0])
            send = send_call(fullname)
            if send is not None:  # dist.send(x), dist.P2POp(dist.isend, x, peer)
                return typer.send_hook(send)
            if name in DIVERGENCE_ONLY_COLLECTIVES:
                return typer.divergence_hook(name)  # dist.barrier(): under a rank condition
            return None
        if fullname == "torch.utils.checkpoint.checkpoint":  # runs fn(*args): typed as it
            return typer.checkpoint_hook
        if fullname == "torch.compile":
            return compiled_module_hook
        if fullname in _DENSE_FLATTENING:  # untyped in torch (no annotations): typed as the op
            hook = typer.op_hook(_DENSE_FLATTENING[fullname], method=False)
            if fullname.endswith("_unflatten_dense_tensors"):
                return functools.partial(_tuple_of_result, hook, typer)
            return hook
        if fullname == "torch.autograd.grad":
            return self.plugin.autograd.autograd_grad_hook
        if fullname == "torch.autograd.backward":
            return self.plugin.autograd.autograd_backward_hook
        bound = torch_namespaces.op_name(fullname)
        if bound is not None and isinstance(self.lookup_node(fullname), Var):
            # a builtin typed from its docstring: the op torch names it (linalg_vector_norm)
            self._bound_builtins.add(fullname)
            return typer.bound_builtin_hook(bound)
        if fullname == "torch.nn.parameter.Parameter":
            return typer.parameter_hook
        if name.startswith(FOREACH_PREFIX) or name in FUSED_OPS:
            # torch._foreach_add_: add_ at each list position (a fused optimizer step alike)
            return typer.foreach_hook(name)
        if fullname.startswith(_NOT_TORCH_OPS) or not name or name[0].isupper() or name.startswith("_"):
            return None
        if (name in calls.FACTORIES and name not in RANDOM_LIKE) or name in calls.NOT_OPS:
            return None  # a factory's result is untyped; randn_like(x)'s is x's (engine RANDOM_LIKE)
        return typer.op_hook(name, method=False)

    def megatron_mapping_hook(self, ctx: FunctionContext) -> Type:
        """A Megatron mapping function typed by the shipped stubs (megatron-stubs).  In a module
        that uses SPMD types it has the table's types (and its arguments are checked); in a
        module that uses none its result is untyped, as megatron-core's own functions are
        without the stubs (it has no py.typed): gradual, such code gets no new error (a
        variable joining a mapping call's result and a plain tensor, a tuple returned as a
        tensor, torch's stubs on the result)."""
        typer = self.plugin.calls
        before = typer.reported
        result = typer.check_arguments_hook(ctx)
        if typer.divergent:  # under a condition that differs between the ranks of "tp"
            typer.mapping_divergence(ctx)
        if self.plugin.promotion.wanted:
            if typer.reported == before:
                self._taken_partial(ctx)
            typer.check_mapping_group(ctx)
            if (typer.reported == before and is_statement_call(ctx.api, ctx.context)
                    and not errors_at(ctx.api, ctx.context)):
                # its result dropped (reported where the call itself is right)
                x_expr = ctx.args[0][0] if ctx.args and len(ctx.args[0]) == 1 else None
                x_type: Type | None = ctx.arg_types[0][0] if x_expr is not None else None
                typer.report_discarded(
                    ctx, x_expr, self.plugin.types.from_type(x_type) if x_type is not None else None,
                    mapping=True)
            return result
        ret = get_proper_type(ctx.default_return_type)  # the stubs' typed result, which
        # the signature hook has made plain torch.Tensor here (CallTyper.plain_result)
        if isinstance(ret, Instance) and ret.type.fullname in (TENSOR, "torch._tensor.Tensor"):
            return AnyType(TypeOfAny.special_form)
        return result

    def _taken_partial(self, ctx: FunctionContext) -> None:
        """A mapping that reduces its P input on tp (engine ``TYPED_MAPPINGS``, ``takes_pending``:
        reduce_from_..., reduce_scatter_to_...) of F.linear(h, w, b): an R bias summed once per
        rank, as in spmd.all_reduce (CallTyper.report_taken_partial)."""
        call = ctx.context
        callee = call.callee if isinstance(call, CallExpr) else None
        if not isinstance(call, CallExpr) or not isinstance(callee, (NameExpr, MemberExpr)):
            return
        mapping = TYPED_MAPPINGS.get(callee.name)
        x_expr = ctx.args[0][0] if ctx.args and len(ctx.args[0]) == 1 else None
        if mapping is None or x_expr is None or not takes_pending(
                mapping.collective, mapping.src, mapping.dst):
            return
        self.plugin.calls.report_taken_partial(ctx, call, x_expr, (TP_AXIS,), mapping.dst)

    def condition_trigger_hook(self, ctx: FunctionContext) -> Type:
        """``globals()``: a condition's trigger (rewrite section 3) reads the condition's
        operands; any other call of it is mypy's."""
        api = ctx.api
        entry = self.plugin.regions.condition(ctx.context)
        if entry is None:
            return ctx.default_return_type
        if getattr(api, "binder", None) is not None and api.binder.is_unreachable():  # type: ignore[attr-defined]
            # an unreachable body: mypy asks whether its first statement is a no-op before it
            # warns (--warn-unreachable); NoReturn says so, and the warning stays on the
            # user's first statement
            return UninhabitedType()
        if self._meets_spmd() and not getattr(api, "current_node_deferred", False):
            _, operands, case, exit_of = entry
            calls = self.plugin.calls
            calls.check_condition(api, operands)
            if exit_of is not None and calls.waiting:  # if c: break, c typed now
                calls.condition_typed(api, exit_of)
            if case is not None:
                calls.check_value_patterns(ctx, case)
            grad_set = self.plugin.regions.grad_set(ctx.context)
            if grad_set is not None:
                calls.check_grad_assignment(api, grad_set)
        return ctx.default_return_type

    def isinstance_hook(self, ctx: FunctionContext) -> Type:
        autograd = self.plugin.autograd
        if autograd.is_trigger(ctx):
            return autograd.trigger_hook(ctx)
        if autograd.is_saved_read(ctx):
            return autograd.saved_read_hook(ctx)
        # A real isinstance: mypy narrows right after typing this call, and it will not
        # narrow a declared torch.Tensor while the gradual promotion is on (narrow_declared_type
        # keeps any class with an alt promotion).  Off for the rest of the function; a return,
        # an assignment or an argument there is judged by the boundary watcher, which accepts a
        # plain tensor (see Promotion.narrowing_in).
        arg = get_proper_type(ctx.arg_types[0][0]) if ctx.arg_types and ctx.arg_types[0] else None
        # a Parameter narrowed to a subclass (isinstance(p, MyParam)) needs Parameter's off too
        self.plugin.promotion.narrowing_in(
            ctx.api, parameters=isinstance(arg, Instance) and arg.type.has_base("torch.nn.parameter.Parameter"))
        return ctx.default_return_type

    def get_method_signature_hook(self, fullname: str) -> Callable | None:
        # mypy asks at every method call: the answer for a name is kept, except for
        # __call__ and apply, which depend on the class (a module, an autograd Function)
        self._follow_module()
        cache = self._method_sig_cache
        known = cache.get(fullname, _UNSET)  # one lookup
        if known is not _UNSET:
            return cast("Callable | None", known)
        cls, _, method = fullname.rpartition(".")
        if method == "__call__" and is_module_class(self.lookup_info(cls)):
            return self._guard("module_call", self.plugin.modules.call_signature_hook, SIGNATURE)  # torch's too
        hook: Callable | None
        tensor_class = self.is_tensor_class(cls)
        if method == "register_hook" and tensor_class:
            hook = self._guard("register_hook", self.plugin.autograd.register_hook_signature_hook, SIGNATURE)
        elif tensor_class or _unchecked_callee(fullname):
            hook = None
        elif method == "apply" and is_autograd_function(self.lookup_info(cls)):
            return self._guard("apply", self.plugin.autograd.apply_signature_hook, SIGNATURE)
        else:
            hook = self._relax_signature()
        if method not in ("__call__", "apply"):
            cache[fullname] = hook
        return hook

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        cache = self._method_cache
        known = cache.get(fullname, _UNSET)  # one lookup (mypy asks at every method call)
        if known is _UNSET:
            cache[fullname] = self._method_hook(fullname)
            known = cache[fullname]
        hook = cast("Callable[[MethodContext], Type] | None", known)
        if hook is None or hook is self._checker:
            return self._when_pending(hook)
        if not self._meets_spmd():
            return None
        if hook is self._power_hooks[0] or hook is self._power_hooks[1]:
            # int ** float: a float only where the module uses SPMD types (scalar_powers)
            return hook if self.plugin.promotion.wanted else None
        return hook  # a tensor method's hook

    def _method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        """The hook of a method call: the argument check of a user method, a tensor method's."""
        cls, _, method = fullname.rpartition(".")
        if " of " in fullname:  # mypy names a reflected operator on a union "__rmul__ of TensorBase"
            method, _, short = fullname.partition(" of ")
            cls = calls.TENSOR if short in ("TensorBase", "Tensor", "Parameter") else fullname
        typer = self.plugin.calls
        hook: Callable | None = None
        if fullname == "functools.partial.__call__":
            return self._synced(self.plugin.partials.call_hook, split_unions=False)
        if (cls == MODULE_LIST and method in ("__iter__", "__getitem__")
                or cls == MODULE_DICT and method in ("__getitem__", "values", "items")):
            return self._synced(module_list_method_hook, split_unions=False)  # the modules' class
        if method == "__call__" and cls in EINOPS_LAYERS:  # typed by its constructor's pattern
            return self._synced(functools.partial(einops_layer_hook, typer, cls))
        if method == "__call__" and cls == SEQUENTIAL:  # the chain built in sight
            return self._synced(self.plugin.modules.sequential_hook)
        if method == "__call__" and cls in TORCH_MODULE_OPS:  # self.norm(x): F.layer_norm
            # the op's own hook; on a global tensor the dims only the module's constructor
            # states are read from it (global_calls.module_params)
            module_op = TORCH_MODULE_OPS[cls]
            if module_op == "identity":
                return self._synced(typer.identity_hook)
            op_hook = typer.op_hook(module_op, method=False, module=True)
            if cls not in TUPLE_RESULT_MODULES and cls not in INDICES_RESULT_MODULES:
                return self._synced(op_hook)

            def checked_only(ctx: MethodContext) -> Type:
                # the input checked by the op's rule; a tuple result stays mypy's
                typed = op_hook(ctx)
                return typed if returns_one_tensor(ctx) else ctx.default_return_type
            return self._synced(checked_only)
        if fullname in POWERS or fullname in REFLECTED_POWERS:  # int ** float: Any -> float
            return self._power_hooks[0 if fullname in POWERS else 1]
        if fullname == CUSTOM_OP_CALL:  # a torch.library.custom_op's call: the op rule
            return self._synced(custom_op_hook(typer))
        tensor_class = self.is_tensor_class(cls)
        if not tensor_class and not _unchecked_callee(fullname):
            return self._check_arguments()
        elif tensor_class:
            if method == "backward":
                hook = typer.backward_hook
            elif method == "register_hook":
                hook = self.plugin.autograd.register_hook_hook
            elif method == "__iter__":
                hook = typer.iter_hook
            elif method in VALUE_READS:  # x.item(), x.tolist(), v in x: the value read out
                # (a union receiver split by the hook itself: it only reads it)
                return self._synced(typer.value_read_hook(method, method=True), split_unions=False)
            else:
                op = calls.method_op_name(method)
                if op is not None:
                    hook = typer.op_hook(op[0], method=True, reflected=op[1])
        return self._synced(hook) if hook is not None else None

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        # mypy asks at every attribute access: one lookup (of the name's hash) for the kinds
        kind = _ATTRIBUTE_KINDS.get(fullname, _NOT_HOOKED)
        if kind == _NOT_HOOKED:
            if not fullname.startswith("torch.return_types."):
                return None
            hook = self.plugin.calls.structseq_attribute_hook
        elif kind == _GRAD:
            hook = self.plugin.calls.grad_attribute_hook
        elif kind == _TRANSPOSE:
            hook = self.plugin.calls.transpose_attribute_hook
        elif kind == _DATA:
            hook = self.plugin.calls.data_attribute_hook
        else:
            hook = self.plugin.calls.complex_part_attribute_hook
        return self._synced(hook) if self._meets_spmd() else None


class NarrowingHook:
    """``hasattr(x, "full_tensor")`` and ``type(x) is DTensor`` narrow like isinstance: the
    promotion is off for them (see :meth:`HookDispatch.isinstance_hook`)."""

    def __init__(self, plugin: SpmdPlugin, hook: Callable[[FunctionContext], Type] | None) -> None:
        self.plugin = plugin
        self.hook = hook

    def __call__(self, ctx: FunctionContext) -> Type:
        result = self.hook(ctx) if self.hook is not None else ctx.default_return_type
        self.plugin.promotion.narrowing_in(ctx.api, parameters=True)
        return result


def _default_return(ctx: FunctionContext) -> Type:
    return ctx.default_return_type
