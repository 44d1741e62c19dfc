"""Forward and backward (SPEC section 5): the plugin side of :mod:`spmd_mypy.engine.duality`.

- Custom ``torch.autograd.Function`` subclasses.  Their ``backward`` must take the duals of
  ``forward``'s outputs and return the duals of its inputs, in its signature and in what its
  ``return`` statements return.  That needs analysed signatures and the inferred types of the
  returned expressions, so the check runs at type-check time, right after mypy has checked
  backward's body.  mypy has no hook there (and since 2.x checks module top levels, class
  bodies included, before function bodies), so during semantic analysis (the customize-MRO
  hook, which sees every class with its MRO) backward's body in a module that uses SPMD types
  is wrapped as ``try: <body> finally: isinstance(object, object)``: mypy checks the
  ``finally`` block after the body, and the ``builtins.isinstance`` hook recognises the
  synthetic call by identity and checks the class.  The wrapper changes nothing mypy reports
  (a trivial body is left alone: mypy's empty-body check looks at it).  Hooks on
  ``Fn.apply`` alone would miss Functions never applied in their own module, and could not
  report in the defining module.
- ``ctx.saved_tensors`` in ``backward`` (``vjp``, ``jvp``) has the types of what ``forward``
  (or ``setup_context``) passed to ``ctx.save_for_backward(...)``: ``ctx`` is Any and mypy has
  no hook on an attribute of Any, so the same semantic-analysis hook rewrites each read into
  ``isinstance(ctx.saved_tensors, object)``, whose ``builtins.isinstance`` hook (recognised
  by identity) types it from forward's body (jvp: what ``ctx.save_for_forward`` got), checked before backward (a backward checked
  first is deferred once).  The rule for each saved value is the engine's
  (``duality.saved_slot``, ``duality.join_saved``), which the check mode applies too.
- ``Fn.apply(...)`` has ``forward``'s signature without ``ctx`` (arguments checked like any
  typed call) and its result type.
- ``torch.autograd.grad(outputs, inputs)`` returns the duals of the inputs' types, and like
  ``torch.autograd.backward`` checks the seed gradients (none: the outputs must be I or P;
  given: the duals of the outputs); ``x.register_hook(fn)`` checks that ``fn`` takes (and
  returns) the dual of ``x``'s type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from mypy.nodes import (
    ARG_POS,
    ARG_STAR,
    ARG_STAR2,
    AssertStmt,
    AssignmentExpr,
    AssignmentStmt,
    AwaitExpr,
    Block,
    BreakStmt,
    CallExpr,
    CastExpr,
    ClassDef,
    ComparisonExpr,
    ConditionalExpr,
    ContinueStmt,
    Decorator,
    DictExpr,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    GeneratorExpr,
    IfStmt,
    IndexExpr,
    IntExpr,
    LambdaExpr,
    ListComprehension,
    ListExpr,
    MatchStmt,
    MemberExpr,
    MypyFile,
    NameExpr,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    OpExpr,
    RaiseStmt,
    RefExpr,
    ReturnStmt,
    SetExpr,
    SliceExpr,
    StarExpr,
    Statement,
    TryStmt,
    TupleExpr,
    TypeInfo,
    UnaryExpr,
    Var,
    WhileStmt,
    WithStmt,
)
from mypy.semanal import is_trivial_body

from mypy.plugin import ClassDefContext, FunctionContext, MethodContext, MethodSigContext
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    TupleType,
    Type,
    TypeOfAny,
    TypeVarLikeType,
    UninhabitedType,
    UnionType,
    get_proper_type,
)

from ..engine import duality
from ..engine.duality import NONE, OTHER, TENSOR, UNKNOWN, FunctionTypes, Slot
from ..engine.errors import SpmdError
from ..engine.ops import Operand, check_backward
from ..engine.types import SpmdType
from .calls import collective_call, expr_text
from .depends import class_dependency
from .mypy_types import TypeBuilder, lookup_type
from .rewrite import isinstance_trigger
from .statements import nested_statements, returns, statement_blocks

if TYPE_CHECKING:
    from . import SpmdPlugin

FUNCTION = "torch.autograd.function.Function"
_TORCH_FUNCTION_BASES = (FUNCTION, "torch.autograd.function._SingleLevelFunction",
                         "torch.autograd.function.InplaceFunction",
                         "torch.autograd.function.NestedIOFunction")


def is_autograd_function(info: TypeInfo | None) -> bool:
    return info is not None and info.fullname not in _TORCH_FUNCTION_BASES and any(
        b.fullname == FUNCTION for b in info.mro)


def _own_method(info: TypeInfo, name: str) -> FuncDef | None:
    """``name`` defined by the class or a user base class (not by torch's Function)."""
    for base in info.mro:
        if base.fullname in _TORCH_FUNCTION_BASES or base.fullname == "builtins.object":
            return None
        sym = base.names.get(name)
        if sym is None:
            continue
        node = sym.node
        if isinstance(node, Decorator):
            return node.func
        if isinstance(node, FuncDef):
            return node
        return None  # an overload, a property, an attribute: not an annotated staticmethod
    return None



def _grad_of(t: SpmdType, batched: bool) -> SpmdType:
    """The type of a gradient of a ``t`` tensor (``batched``: a batch of them on a new dim 0,
    ``torch.autograd.grad(..., is_grads_batched=True)``)."""
    g = duality.gradient_type(t)
    return duality.batched_type(g) if batched else g

class AutogradTyper:
    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        # id(synthetic call) -> (the call, the Function class); per module, the tree the
        # triggers were made for and their ids (a re-parsed module drops its old ones)
        self._triggers: dict[int, tuple[CallExpr, ClassDef]] = {}
        self._module_triggers: dict[str, tuple[MypyFile, list[int]]] = {}
        # id(synthetic call) -> (the call, the Function class, the method that saves what it
        # reads): the reads of ctx.saved_tensors
        self._saved_reads: dict[int, tuple[CallExpr, ClassDef, str]] = {}

    @property
    def types(self) -> TypeBuilder:
        return self.plugin.types

    # -- reading types into slots ---------------------------------------------------------
    def slot(self, name: str, typ: Type | None) -> Slot:
        if typ is None:
            return Slot(name, UNKNOWN)
        p = get_proper_type(typ)
        t = self.types.from_type(p)
        if t is not None:
            return Slot.tensor(name, t)
        if isinstance(p, NoneType):
            return Slot(name, NONE)
        if isinstance(p, UnionType):
            items = [self.slot(name, i) for i in p.items]
            tensors = [s for s in items if s.kind == TENSOR]
            if tensors:  # Optional[Tensor[...]]: a tensor (or no gradient)
                typed = [s for s in tensors if s.typed]
                return typed[0] if len(typed) == 1 and len(tensors) == 1 else Slot(name, TENSOR)
            if any(s.kind == UNKNOWN for s in items):
                return Slot(name, UNKNOWN)
            return Slot(name, NONE if all(s.kind == NONE for s in items) else OTHER)
        if isinstance(p, (AnyType, TypeVarLikeType, UninhabitedType)):
            return Slot(name, UNKNOWN)
        if isinstance(p, Instance) and p.type.fullname == "builtins.object":
            return Slot(name, UNKNOWN)
        return Slot(name, OTHER)

    def result_slots(self, typ: Type | None, name: str = "") -> tuple[Slot, ...] | None:
        """One slot, or one per item of a tuple; None when the arity is unknown."""
        if typ is None:
            return None
        p = get_proper_type(typ)
        if isinstance(p, AnyType):
            return None
        if isinstance(p, TupleType):
            return tuple(self.slot(f"{name}[{i}]" if name else "", it) for i, it in enumerate(p.items))
        if isinstance(p, Instance) and p.type.fullname == "builtins.tuple":
            return None
        return (self.slot(name, p),)

    def _params(self, sig: CallableType, skip: int) -> tuple[Slot, ...] | None:
        if any(k in (ARG_STAR, ARG_STAR2) for k in sig.arg_kinds[skip:]):
            return None
        out = []
        for n, t, k in list(zip(sig.arg_names, sig.arg_types, sig.arg_kinds))[skip:]:
            s = self.slot(n or "", t)
            out.append(Slot(s.name, s.kind, s.type, default=k.is_optional()))
        return tuple(out)

    def function_types(self, info: TypeInfo) -> tuple[FunctionTypes, FuncDef | None] | None:
        fwd = _own_method(info, "forward")
        if fwd is None or not isinstance(fwd.type, CallableType):
            return None
        bwd = _own_method(info, "backward")
        fsig = fwd.type
        skip = 0 if _own_method(info, "setup_context") is not None else 1
        inputs = self._params(fsig, skip)
        outputs = None if fsig.implicit else self.result_slots(fsig.ret_type)
        grads = returns = None
        bsig = bwd.type if bwd is not None else None
        if isinstance(bsig, CallableType):
            grads = self._params(bsig, 1)
            returns = None if bsig.implicit else self.result_slots(bsig.ret_type)
        return FunctionTypes(info.name, inputs, outputs, grads, returns), bwd

    # -- classes: the synthetic trigger ------------------------------------------------------
    def class_mro_hook(self, ctx: ClassDefContext) -> None:
        """Wrap backward's body as ``try: <body> finally: isinstance(object, object)``.

        Runs during semantic analysis, before the method bodies are analysed (so the names of
        the synthetic call resolve normally).  mypy checks the ``finally`` block after the body,
        when the types of backward's ``return`` expressions are known: the
        ``builtins.isinstance`` hook recognises the call by identity and checks the class."""
        defn = ctx.cls
        if not is_autograd_function(defn.info):
            return
        self._apply_dependencies(ctx)
        tree = getattr(ctx.api, "cur_mod_node", None)
        module = getattr(ctx.api, "cur_mod_id", None)
        if tree is None or not self.plugin.promotion.uses_spmd_types(tree, module):
            return
        ids = self._module_ids(tree, module or "")
        self._rewrite_saved_reads(defn, ids)
        bwd = next((f for f in (_func(s) for s in defn.defs.body) if f is not None
                    and f.name == "backward"), None)
        if bwd is None or not bwd.body.body or self._wrapped(bwd) or is_trivial_body(bwd.body):
            # (semantic analysis may visit a class more than once; a trivial body - "...",
            # pass, a docstring - must stay trivial for mypy's empty-body check)
            return
        end = bwd.end_line or bwd.line
        call = isinstance_trigger(end, 0)
        finally_body = Block([ExpressionStmt(call)])
        body = Block(list(bwd.body.body))
        try_stmt = TryStmt(body, [], [], [], None, finally_body)
        for node in (finally_body, finally_body.body[0]):
            node.line, node.column, node.end_line = end, 0, end
        first = bwd.body.body[0]
        for node in (body, try_stmt):
            node.line, node.column, node.end_line = first.line, first.column, end
        bwd.body.body[:] = [try_stmt]
        self._triggers[id(call)] = (call, defn)
        ids.append(id(call))

    def _module_ids(self, tree: MypyFile, module: str) -> list[int]:
        """The ids of the synthetic calls made for this module's tree (a re-parsed module
        drops those made for its old tree)."""
        known = self._module_triggers.get(module)
        if known is None or known[0] is not tree:
            for i in known[1] if known is not None else ():
                self._triggers.pop(i, None)
                self._saved_reads.pop(i, None)
            known = (tree, [])
            self._module_triggers[module] = known
        return known[1]

    def _rewrite_saved_reads(self, defn: ClassDef, ids: list[int]) -> None:
        """``ctx.saved_tensors`` in backward (vjp, jvp) -> ``isinstance(ctx.saved_tensors,
        object)``, a call the ``builtins.isinstance`` hook types (see the module's docstring).
        A read already rewritten (semantic analysis may visit a class again) is left as is."""
        for f in (_func(st) for st in defn.defs.body):
            if f is None or f.name not in _SAVED_READERS or not f.arguments:
                continue
            rewriter = _SavedReads(f.arguments[0].variable.name, self._saved_reads, defn, ids,
                                   _SAVED_BY.get(f.name, "save_for_backward"))
            for st in nested_statements(f.body.body):
                _map_statement(st, rewriter.replace, targets=False)

    def _apply_dependencies(self, ctx: ClassDefContext) -> None:
        """``Fn.apply(x)`` is typed by ``forward`` (and whether ``setup_context`` is
        defined), but the daemon's (dmypy) dependencies tie its callers to ``<Fn.apply>``
        only: a change of those methods, in the class or a user base class (possibly in
        another module), is made a change of ``apply``, or the callers' diagnostics stay
        stale until they are edited themselves."""
        info = ctx.cls.info
        for base in info.mro:
            if base.fullname in _TORCH_FUNCTION_BASES or base.fullname == "builtins.object":
                break
            for name in ("forward", "setup_context"):
                class_dependency(ctx, f"{base.fullname}.{name}", f"{info.fullname}.apply")

    def _wrapped(self, bwd: FuncDef) -> bool:
        body = bwd.body.body
        if len(body) != 1 or not isinstance(body[0], TryStmt) or body[0].finally_body is None:
            return False
        fin = body[0].finally_body.body
        return (len(fin) == 1 and isinstance(fin[0], ExpressionStmt)
                and self._triggers.get(id(fin[0].expr), (None,))[0] is fin[0].expr)

    # -- ctx.saved_tensors -------------------------------------------------------------------
    def is_saved_read(self, ctx: FunctionContext) -> bool:
        entry = self._saved_reads.get(id(ctx.context))
        return entry is not None and entry[0] is ctx.context

    def saved_read_hook(self, ctx: FunctionContext) -> Type:
        """A read of ``ctx.saved_tensors`` (the rewritten call): a tuple of what forward saved,
        else Any (as without the plugin)."""
        _, defn, save = self._saved_reads[id(ctx.context)]
        unknown = AnyType(TypeOfAny.special_form)
        if getattr(ctx.api, "current_node_deferred", False):
            return unknown
        try:
            typ = self.saved_tensors_type(ctx.api, defn, save)
        except Exception:  # noqa: BLE001 - a checker problem must never crash mypy
            typ = None
        return typ if typ is not None else unknown

    def saved_tensors_type(self, api: Any, defn: ClassDef, save: str) -> Type | None:
        """``save``: the ctx method whose arguments the read returns (``save_for_backward``;
        in jvp ``save_for_forward``)."""
        info = defn.info
        read = self.function_types(info)
        if read is None or not read[0].typed:
            return None  # an unannotated Function: as before
        fn = read[0]
        setup = _own_method(info, "setup_context")
        source = setup if setup is not None else _own_method(info, "forward")
        if source is None or not source.arguments or source.info is not info:
            # (a base class's forward, maybe in another module, whose body mypy's cache does
            # not keep: a warm run would read no save where a cold one reads it)
            return None
        calls = _save_calls(source, save)
        if calls is None:
            return None
        calls = last_saves(source.body.body, calls)  # torch keeps the last call's values
        if any(lookup_type(api, c) is None for c in calls) and _defer(api, source, defn):
            return None  # forward is not checked yet: backward is checked again after it
        fwd = _own_method(info, "forward")
        fsig = fwd.type if fwd is not None and isinstance(fwd.type, CallableType) else None
        saver = _Saver(self, api, source, fsig if setup is not None else None, fn)
        joined = duality.join_saved([saver.slots(c) for c in calls])
        if joined is None or not any(s.typed for s in joined):
            return None
        unknown = AnyType(TypeOfAny.special_form)
        items: list[Type] = []
        for s in joined:
            inst = self.types.to_instance(s.type) if s.typed else None
            items.append(inst if inst is not None else NoneType() if s.kind == NONE else unknown)
        return TupleType(items, api.named_generic_type("builtins.tuple", [unknown]))

    def saved_value(self, name: str, typ: Type | None) -> Slot:
        """A saved value by its static type: a typed tensor, None, or unknown (a plain or
        Optional tensor, anything else)."""
        if typ is None:
            return Slot(name, UNKNOWN)
        p = get_proper_type(typ)
        if isinstance(p, NoneType):
            return Slot(name, NONE)
        t = self.types.from_type(p)
        return Slot.tensor(name, t) if t else Slot(name, UNKNOWN)

    def is_trigger(self, ctx: FunctionContext) -> bool:
        entry = self._triggers.get(id(ctx.context))
        return entry is not None and entry[0] is ctx.context

    def trigger_hook(self, ctx: FunctionContext) -> Type:
        defn = self._triggers[id(ctx.context)][1]
        if getattr(ctx.api, "current_node_deferred", False):
            return ctx.default_return_type  # checked again when mypy comes back to it
        try:
            self.check_class(ctx, defn)
        except Exception:  # noqa: BLE001 - a checker problem must never crash mypy
            pass
        return ctx.default_return_type

    def check_class(self, ctx: FunctionContext, defn: ClassDef) -> None:
        read = self.function_types(defn.info)
        if read is None:
            return
        fn, bwd = read
        if bwd is None or bwd.info is not defn.info or not fn.typed:
            return
        rets = returns(bwd.body.body)
        # A fix of the declared result names the returned expression (and the collective that
        # made it) when there is only one return.
        if fn.returns is not None and len(rets) == 1 and rets[0].expr is not None:
            value = rets[0].expr
            made = self._returned(ctx, value) if value is not None else None
            if made is not None and len(made) == len(fn.returns):
                fn = FunctionTypes(fn.name, fn.inputs, fn.outputs, fn.grads, tuple(
                    Slot(m.name, s.kind, s.type, s.default, m.made_by,
                         m.type if m.typed else None)
                    for m, s in zip(made, fn.returns)))
        report = self.plugin.calls.report
        report(ctx, duality.check_signature(fn), bwd)
        for r in rets:
            if r.expr is None:
                continue
            value = r.expr
            returned = self._returned(ctx, value) if value is not None else None
            if returned is not None:
                report(ctx, duality.check_returned(fn, returned), r)

    def _returned(self, ctx: FunctionContext, e: Expression) -> list[Slot] | None:
        if isinstance(e, TupleExpr):
            return [self._expr_slot(ctx, i) for i in e.items]
        typ = lookup_type(ctx.api, e)
        if typ is None:
            return None  # not checked (e.g. a deferred body)
        p = get_proper_type(typ)
        if isinstance(p, TupleType):
            return [self.slot(f"{expr_text(e)}[{i}]", it) for i, it in enumerate(p.items)]
        return [self._expr_slot(ctx, e)]

    def _expr_slot(self, ctx: FunctionContext, e: Expression) -> Slot:
        if isinstance(e, NameExpr) and e.fullname == "builtins.None":
            return Slot("None", NONE)
        s = self.slot(expr_text(e), lookup_type(ctx.api, e))
        made_by = collective_call(e)
        return Slot(s.name, s.kind, s.type, made_by=made_by) if made_by is not None else s

    # -- Fn.apply ------------------------------------------------------------------------------
    def apply_signature_hook(self, ctx: MethodSigContext) -> CallableType:
        sig = ctx.default_signature
        # Only in a module that uses SPMD types: elsewhere plain mypy's ``apply`` (any
        # arguments) stays, so unannotated code gets no new error (megatron-core once got an
        # arg-type error from forward's own, stricter, parameter types).
        self.plugin.promotion.sync(ctx.api)
        if not self.plugin.promotion.wanted:
            return sig
        p = get_proper_type(ctx.type)
        info = None
        if isinstance(p, CallableType) and p.is_type_obj():
            info = p.type_object()
        elif hasattr(p, "item") and isinstance(get_proper_type(p.item), Instance):  # type[Fn]
            info = get_proper_type(p.item).type  # type: ignore[union-attr]
        elif isinstance(p, Instance):
            info = p.type
        fwd = _own_method(info, "forward") if info is not None and is_autograd_function(info) else None
        if fwd is None or not isinstance(fwd.type, CallableType):
            return sig
        fsig = fwd.type
        skip = 0 if _own_method(info, "setup_context") is not None else 1  # type: ignore[arg-type]
        if len(fsig.arg_types) < skip or any(k == ARG_STAR2 for k in fsig.arg_kinds[:skip]):
            return sig
        new = fsig.copy_modified(
            arg_types=fsig.arg_types[skip:], arg_kinds=fsig.arg_kinds[skip:],
            arg_names=fsig.arg_names[skip:],
            ret_type=sig.ret_type if fsig.implicit else fsig.ret_type,
            name=f"{info.name}.apply")  # type: ignore[union-attr]
        return self.plugin.calls.relax_signature(new, ctx.context)

    # -- torch.autograd.grad -------------------------------------------------------------------
    def _tensor_items(self, ctx: FunctionContext, name: str) -> list[Slot] | None:
        """The tensors of a tensor-or-sequence argument, or None (unknown arity)."""
        calls = self.plugin.calls
        e, t = calls._arg(ctx, name)
        if e is None:
            return None
        if isinstance(e, (ListExpr, TupleExpr)):
            return [self._expr_slot(ctx, i) for i in e.items]
        s = self.slot(expr_text(e), t)
        if s.kind == TENSOR:
            return [s]
        p = get_proper_type(t)
        if isinstance(p, TupleType):
            return [self.slot(f"{expr_text(e)}[{i}]", it) for i, it in enumerate(p.items)]
        return None

    def _grads_batched(self, ctx: FunctionContext) -> bool | None:
        """``is_grads_batched=``: False when not given or False, True when True, None when
        not a literal (the gradients' and results' dims are then not known)."""
        e, _ = self.plugin.calls._arg(ctx, "is_grads_batched")
        if e is None:
            return False
        if isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False"):
            return e.fullname == "builtins.True"
        return None

    def _check_seed(self, ctx: FunctionContext, outputs_name: str, grads_name: str, what: str,
                    batched: bool | None = False) -> None:
        """The gradients seeding a backward pass: none given needs each output I or P (like
        ``loss.backward()``); given ones must be the duals of the outputs (``batched``:
        ``is_grads_batched=True``, a batch of them on a new dim 0; None: not known, not
        checked)."""
        calls = self.plugin.calls
        outputs = self._tensor_items(ctx, outputs_name)
        if outputs is None:
            return
        grad_e, _ = calls._arg(ctx, grads_name)
        if grad_e is None or (isinstance(grad_e, NameExpr) and grad_e.fullname == "builtins.None"):
            ins: list[Operand] = []
            if outputs_name == "outputs" and any(o.typed for o in outputs):  # autograd.grad
                ins = [Operand(i.type, i.name) for i in self._tensor_items(ctx, "inputs") or ()
                       if i.typed]
            for o in outputs:
                if o.typed:
                    errs = check_backward(Operand(o.type, o.name), inputs=ins)
                    calls.report(ctx, [SpmdError(e.code, e.message.replace(
                        f"{o.name}.backward()", f"{what}({o.name}, ...) without {grads_name}", 1))
                        for e in errs])
            return
        grads = self._tensor_items(ctx, grads_name)
        if grads is not None and batched is not None:
            calls.report(ctx, duality.check_grad_outputs(outputs, grads, what, batched))

    def autograd_backward_hook(self, ctx: FunctionContext) -> Type:
        """``torch.autograd.backward(tensors, grad_tensors)``."""
        self._check_seed(ctx, "tensors", "grad_tensors", "torch.autograd.backward")
        return ctx.default_return_type

    def autograd_grad_hook(self, ctx: FunctionContext) -> Type:
        default = ctx.default_return_type
        calls = self.plugin.calls
        batched = self._grads_batched(ctx)
        self._check_seed(ctx, "outputs", "grad_outputs", "torch.autograd.grad", batched)
        p = get_proper_type(default)
        if not (isinstance(p, Instance) and p.type.fullname == "builtins.tuple" and p.args):
            return default
        if batched is None:  # is_grads_batched not a literal: the results' dims not known
            return default

        base = p.args[0]
        inputs = self._tensor_items(ctx, "inputs")
        if inputs is not None:
            items: list[Type] = []
            for s in inputs:
                inst = self.types.to_instance(_grad_of(s.type, batched)) if s.typed else None
                items.append(inst if inst is not None else base)
            if not any(s.typed for s in inputs):
                return default
            return TupleType(items, p)
        e, t = calls._arg(ctx, "inputs")
        q = get_proper_type(t)
        if isinstance(q, Instance) and q.args and q.type.fullname in (
                "builtins.list", "typing.Sequence", "collections.abc.Sequence", "builtins.tuple"):
            st = self.types.from_type(q.args[0])
            if st:
                inst = self.types.to_instance(_grad_of(st, batched))
                if inst is not None:
                    return p.copy_modified(args=[inst])
        return default

    # -- x.register_hook(fn) -------------------------------------------------------------------
    def register_hook_signature_hook(self, ctx: MethodSigContext) -> CallableType:
        """``x.register_hook(lambda g: ...)``: the lambda's parameter is x's gradient, typed
        (the dual of x's type), so its body is checked like a def hook's (torch leaves the
        parameter unannotated: the lambda's ``g`` would be Any, its ops unchecked)."""
        sig = ctx.default_signature
        lam = ctx.args[0][0] if ctx.args and ctx.args[0] else None
        if not (isinstance(lam, LambdaExpr) and lam.arg_kinds == [ARG_POS] and sig.arg_types):
            return sig  # a lambda of another shape: torch's own (unannotated) signature
        x = self.types.from_type(ctx.type)
        grad = self.types.to_instance(duality.gradient_type(x)) if x else None
        if grad is None:
            return sig
        hook_t = CallableType([grad], [ARG_POS], [None], AnyType(TypeOfAny.special_form),
                              ctx.api.named_generic_type("builtins.function", []))
        return sig.copy_modified(arg_types=[hook_t, *sig.arg_types[1:]])

    def register_hook_hook(self, ctx: MethodContext) -> Type:
        x = self.types.from_type(ctx.type)
        if not x or not ctx.args or not ctx.args[0]:
            return ctx.default_return_type
        fn_e = ctx.args[0][0]
        fn_t = get_proper_type(ctx.arg_types[0][0])
        if not isinstance(fn_t, CallableType) or isinstance(fn_e, LambdaExpr):
            return ctx.default_return_type
        c = ctx.context
        receiver = c.callee.expr if isinstance(c, CallExpr) and hasattr(c.callee, "expr") else None
        param = None
        if fn_t.arg_types and fn_t.arg_kinds[0] == ARG_POS:
            param = self.slot(fn_t.arg_names[0] or "1", fn_t.arg_types[0])
        result = None if fn_t.implicit else self.slot("", fn_t.ret_type)
        hook_name = expr_text(fn_e) if isinstance(fn_e, RefExpr) else "fn"
        self.plugin.calls.report(ctx, duality.check_hook(
            expr_text(receiver), x, hook_name, param, result))
        return ctx.default_return_type


# The methods whose ``ctx.saved_tensors`` reads are typed, and what those return when not
# save_for_backward's arguments (jvp: save_for_forward's)
_SAVED_READERS = frozenset({"backward", "vjp", "jvp"})
_SAVED_BY = {"jvp": "save_for_forward"}


def _is_ctx(e: Expression, ctx: Var) -> bool:
    return isinstance(e, NameExpr) and e.node is ctx


def _save_calls(source: FuncDef, save: str) -> list[CallExpr] | None:
    """The ``ctx.<save>(...)`` statements of forward (setup_context), or None when
    what backward receives cannot be read from them: none, or ``ctx`` used otherwise than by
    its attributes (passed to a helper, aliased: a save there is not seen), or
    ``ctx.save_for_backward`` not called where it is read, or a nested function, class or
    lambda (not walked)."""
    ctx = source.arguments[0].variable
    stmts = nested_statements(source.body.body)
    calls = [st.expr for st in stmts if isinstance(st, ExpressionStmt)
             and isinstance(st.expr, CallExpr) and isinstance(st.expr.callee, MemberExpr)
             and st.expr.callee.name == save and _is_ctx(st.expr.callee.expr, ctx)]
    if not calls:
        return None
    if any(isinstance(st, (FuncDef, Decorator, ClassDef, OverloadedFuncDef)) for st in stmts):
        return None  # a nested definition may use ctx: not read
    seen = _Uses(ctx, save)
    for st in stmts:
        _map_statement(st, seen.visit, targets=True)
    if seen.names != seen.members or seen.saves != len(calls) or seen.lambdas:
        return None
    return calls


def last_saves(body: list[Statement], calls: list[CallExpr]) -> list[CallExpr]:
    """Those of ``calls`` (the save statements of a forward ``body``) that may be the last one
    run before forward returns: torch keeps the last call's values, so
    ``ctx.save_for_backward(x); ...; ctx.save_for_backward(x, w)`` gives backward ``(x, w)``.
    A call is dropped only where every path from it to the function's end meets another
    (a loop's body may run no time, a ``try`` block may stop anywhere, ``return``, ``raise``,
    ``break`` and ``continue`` are taken as leaving the function): the join of those kept is
    never narrower than torch's value (``join_saved``).  In source order."""
    ids = {id(c) for c in calls}
    kept: set[int] = set()
    _last_saves_in(body, False, ids, kept)
    return [c for c in calls if id(c) in kept]


def _last_saves_in(stmts: list[Statement], covered: bool, ids: set[int], kept: set[int]) -> bool:
    """Walk ``stmts`` backwards from their end, where ``covered`` says whether every path to
    the function's end meets a save; add the saves not covered to ``kept``; return whether
    every path from the start of ``stmts`` meets one."""
    for st in reversed(stmts):
        if isinstance(st, ExpressionStmt) and id(st.expr) in ids:
            if not covered:
                kept.add(id(st.expr))
            covered = True
        elif isinstance(st, (ReturnStmt, RaiseStmt, BreakStmt, ContinueStmt)):
            covered = False
        elif isinstance(st, IfStmt):
            branches = [_last_saves_in(branch.body, covered, ids, kept) for branch in st.body]
            if st.else_body is not None:
                branches.append(_last_saves_in(st.else_body.body, covered, ids, kept))
            else:
                branches.append(covered)
            covered = all(branches)
        elif isinstance(st, (ForStmt, WhileStmt)):  # the body may run no time
            _last_saves_in(st.body.body, covered, ids, kept)
            if st.else_body is not None:
                _last_saves_in(st.else_body.body, covered, ids, kept)
        elif isinstance(st, WithStmt):
            covered = _last_saves_in(st.body.body, covered, ids, kept)
        elif isinstance(st, TryStmt):
            # the finally block is followed by the rest or by a return: as the end
            after = _last_saves_in(st.finally_body.body, False, ids, kept) \
                if st.finally_body is not None else covered
            handlers = all([_last_saves_in(h.body, after, ids, kept) for h in st.handlers])
            tail = (_last_saves_in(st.else_body.body, after, ids, kept)
                    if st.else_body is not None else after)
            covered = _last_saves_in(st.body.body, tail, ids, kept) and handlers
            if not handlers:  # a handler may be entered after any save of the body
                kept.update(id(c.expr) for c in nested_statements(st.body.body)
                            if isinstance(c, ExpressionStmt) and id(c.expr) in ids)
        elif isinstance(st, MatchStmt):  # no case may match
            for case_body in st.bodies:
                _last_saves_in(case_body.body, covered, ids, kept)
        else:
            for block in statement_blocks(st):  # any other block: as a loop's body
                _last_saves_in(block, covered, ids, kept)
    return covered


def _defer(api: Any, source: FuncDef, defn: ClassDef) -> bool:
    """Defer the backward being checked when forward (setup_context) is not checked yet: mypy
    deferred it, or it comes after backward in the class.  Not in mypy's last pass."""
    pass_num, last_pass = getattr(api, "pass_num", None), getattr(api, "last_pass", None)
    scope = getattr(api, "scope", None)
    if not isinstance(pass_num, int) or not isinstance(last_pass, int) or pass_num >= last_pass \
            or scope is None:
        return False
    func = scope.top_level_function()
    if not isinstance(func, FuncDef):
        return False
    later = source.info is defn.info and source.line > func.line
    pending = any(d.node is source for d in getattr(api, "deferred_nodes", ()))
    if not (later or pending):
        return False
    api.defer_node(func, scope.enclosing_class(func))
    api.current_node_deferred = True
    return True


class _Uses:
    """How ``ctx`` is used in forward: by name, as an attribute's receiver, as the receiver of
    save_for_backward."""

    def __init__(self, ctx: Var, save: str) -> None:
        self.ctx = ctx
        self.save = save
        self.names = 0
        self.members = 0
        self.saves = 0
        self.lambdas = False  # a lambda (not walked) may use ctx

    def visit(self, e: Expression) -> Expression:
        if isinstance(e, LambdaExpr):
            self.lambdas = True
        elif isinstance(e, NameExpr) and e.node is self.ctx:
            self.names += 1
        elif isinstance(e, MemberExpr) and _is_ctx(e.expr, self.ctx):
            self.members += 1
            if e.name == self.save:
                self.saves += 1
        _map_children(e, self.visit)
        return e


class _SavedReads:
    """Rewrites the reads of ``<ctx>.saved_tensors`` of one method (see
    AutogradTyper._rewrite_saved_reads)."""

    def __init__(self, ctx: str, registry: dict[int, tuple[CallExpr, ClassDef, str]],
                 defn: ClassDef, ids: list[int], save: str) -> None:
        self.ctx = ctx
        self.save = save
        self.registry = registry
        self.defn = defn
        self.ids = ids

    def replace(self, e: Expression) -> Expression:
        if isinstance(e, CallExpr):
            known = self.registry.get(id(e))
            if known is not None and known[0] is e:
                return e
        if isinstance(e, MemberExpr) and e.name == "saved_tensors" and isinstance(e.expr, NameExpr) \
                and e.expr.name == self.ctx:
            obj = NameExpr("object")
            call = CallExpr(NameExpr("isinstance"), [e, obj], [ARG_POS, ARG_POS], [None, None])
            for node in (call, call.callee, obj):
                node.line, node.column = e.line, e.column
                node.end_line, node.end_column = e.end_line, e.end_column
            self.registry[id(call)] = (call, self.defn, self.save)
            self.ids.append(id(call))
            return call
        _map_children(e, self.replace)
        return e


class _Saver:
    """The slots of one ``ctx.save_for_backward(...)`` call (engine ``duality.saved_slot``):
    a parameter of forward by its declared type (setup_context: ``inputs[i]`` and the names
    unpacked from ``inputs``), an output of forward by forward's declared result (setup_context:
    ``output``, ``output[i]``), anything else by the type mypy gave it in forward."""

    def __init__(self, typer: AutogradTyper, api: Any, source: FuncDef,
                 setup: CallableType | None, fn: FunctionTypes) -> None:
        """``setup``: forward's signature when ``source`` is setup_context."""
        self.typer = typer
        self.api = api
        self.fn = fn
        self.params: dict[Var, Type | None] = {}
        self.inputs: dict[Var, int] = {}  # a name unpacked from setup_context's inputs
        self.outputs: dict[Var, int] = {}  # a returned name, one unpacked from output
        self.inputs_var: Var | None = None
        self.output_var: Var | None = None
        self.input_types: list[Type] = list(setup.arg_types) if setup is not None and not any(
            k in (ARG_STAR, ARG_STAR2) for k in setup.arg_kinds) else []
        sig = source.type if isinstance(source.type, CallableType) else None
        args = source.arguments
        if setup is not None:
            self.inputs_var = args[1].variable if len(args) > 1 else None
            self.output_var = args[2].variable if len(args) > 2 else None
            for st in nested_statements(source.body.body):
                if isinstance(st, AssignmentStmt) and len(st.lvalues) == 1:
                    self._unpacked(st.lvalues[0], st.rvalue)
        else:
            for i, a in enumerate(args[1:], 1):
                self.params[a.variable] = sig.arg_types[i] if sig is not None and i < len(sig.arg_types) else None
            for r in returns(source.body.body):
                items = r.expr.items if isinstance(r.expr, TupleExpr) else [r.expr] if r.expr is not None else []
                whole = not isinstance(r.expr, TupleExpr)
                for i, item in enumerate(items):
                    if isinstance(item, NameExpr) and isinstance(item.node, Var) \
                            and item.node not in self.params:
                        self._output(item.node, -1 if whole and self._many() else i)

    def _many(self) -> bool:
        return self.fn.outputs is None or len(self.fn.outputs) != 1

    def _output(self, var: Var, i: int) -> None:
        known = self.outputs.get(var)
        self.outputs[var] = i if known is None or known == i else -1  # returned at two places

    def _unpacked(self, target: Expression, value: Expression) -> None:
        """``a, b = inputs``, ``a = inputs[0]``, ``y = output``, ``y0, y1 = output``."""
        source = value.node if isinstance(value, NameExpr) else None
        index = None
        if isinstance(value, IndexExpr) and isinstance(value.base, NameExpr) \
                and isinstance(value.index, IntExpr):
            source, index = value.base.node, value.index.value
        if source is None or source not in (self.inputs_var, self.output_var):
            return
        into = self.inputs if source is self.inputs_var else self.outputs
        if isinstance(target, NameExpr) and isinstance(target.node, Var):
            if index is not None:
                into[target.node] = index
            elif source is self.output_var:
                into[target.node] = -1 if self._many() else 0
        elif isinstance(target, (TupleExpr, ListExpr)) and index is None:
            for i, item in enumerate(target.items):
                if isinstance(item, StarExpr):
                    break
                if isinstance(item, NameExpr) and isinstance(item.node, Var):
                    into[item.node] = i

    def _position(self, e: Expression, var: Var | None, by_name: dict[Var, int],
                  whole: int) -> int | None:
        if var is None:
            return None
        if isinstance(e, NameExpr):
            if e.node is var:
                return whole
            return by_name.get(e.node) if isinstance(e.node, Var) else None
        if isinstance(e, IndexExpr) and isinstance(e.base, NameExpr) and e.base.node is var \
                and isinstance(e.index, IntExpr):
            return e.index.value
        return None

    def slots(self, call: CallExpr) -> tuple[Slot, ...] | None:
        if any(k != ARG_POS for k in call.arg_kinds):
            return None  # ``*tensors``: how many is not known
        out = []
        for e in call.args:
            name = expr_text(e)
            if isinstance(e, NameExpr) and e.fullname == "builtins.None":
                out.append(Slot("None", NONE))
                continue
            i = self._position(e, self.inputs_var, self.inputs, -1)
            if i is not None:
                typ = self.input_types[i] if 0 <= i < len(self.input_types) else None
                out.append(duality.saved_slot(self.typer.saved_value(name, typ)))
                continue
            if isinstance(e, NameExpr) and isinstance(e.node, Var) and e.node in self.params:
                out.append(duality.saved_slot(self.typer.saved_value(name, self.params[e.node])))
                continue
            if isinstance(e, NameExpr) and isinstance(e.node, Var) and self.output_var is None:
                position = self.outputs.get(e.node)
            else:
                position = self._position(e, self.output_var, self.outputs,
                                          -1 if self._many() else 0)
            own = self.typer.saved_value(name, lookup_type(self.api, e))
            out.append(duality.saved_slot(own, position, self.fn.outputs))
        return tuple(out)


def _map_statement(st: Statement, f: Callable[[Expression], Expression], targets: bool) -> None:
    """Apply ``f`` to the expressions a statement holds directly (not those of its nested
    statements), replacing each by what ``f`` returns; assignment targets only if ``targets``."""
    if isinstance(st, AssignmentStmt):
        st.rvalue = f(st.rvalue)
        if targets:
            st.lvalues[:] = [f(lv) for lv in st.lvalues]
    elif isinstance(st, OperatorAssignmentStmt):
        st.rvalue = f(st.rvalue)
        if targets:
            st.lvalue = f(st.lvalue)
    elif isinstance(st, ExpressionStmt):
        st.expr = f(st.expr)
    elif isinstance(st, ReturnStmt):
        if st.expr is not None:
            st.expr = f(st.expr)
    elif isinstance(st, AssertStmt):
        st.expr = f(st.expr)
        if st.msg is not None:
            st.msg = f(st.msg)
    elif isinstance(st, IfStmt):
        st.expr[:] = [f(e) for e in st.expr]
    elif isinstance(st, WhileStmt):
        st.expr = f(st.expr)
    elif isinstance(st, ForStmt):
        st.expr = f(st.expr)
        if targets:
            st.index = f(st.index)
    elif isinstance(st, WithStmt):
        st.expr[:] = [f(e) for e in st.expr]
        if targets:
            st.target[:] = [f(t) if t is not None else None for t in st.target]


def _map_children(e: Expression, f: Callable[[Expression], Expression]) -> None:
    """Apply ``f`` to the subexpressions of ``e`` (not into lambdas), replacing each by what
    ``f`` returns."""
    if isinstance(e, CallExpr):
        e.callee = f(e.callee)
        e.args[:] = [f(a) for a in e.args]
    elif isinstance(e, MemberExpr):
        e.expr = f(e.expr)
    elif isinstance(e, IndexExpr):
        e.base = f(e.base)
        e.index = f(e.index)
    elif isinstance(e, (TupleExpr, ListExpr, SetExpr)):
        e.items[:] = [f(i) for i in e.items]
    elif isinstance(e, (StarExpr, UnaryExpr, CastExpr, AwaitExpr)):
        e.expr = f(e.expr)
    elif isinstance(e, OpExpr):
        e.left = f(e.left)
        e.right = f(e.right)
    elif isinstance(e, ComparisonExpr):
        e.operands[:] = [f(o) for o in e.operands]
    elif isinstance(e, ConditionalExpr):
        e.cond = f(e.cond)
        e.if_expr = f(e.if_expr)
        e.else_expr = f(e.else_expr)
    elif isinstance(e, AssignmentExpr):
        e.value = f(e.value)
    elif isinstance(e, DictExpr):
        e.items[:] = [(f(k) if k is not None else None, f(v)) for k, v in e.items]
    elif isinstance(e, SliceExpr):
        if e.begin_index is not None:
            e.begin_index = f(e.begin_index)
        if e.end_index is not None:
            e.end_index = f(e.end_index)
        if e.stride is not None:
            e.stride = f(e.stride)
    elif isinstance(e, ListComprehension):
        _map_children(e.generator, f)
    elif isinstance(e, GeneratorExpr):
        e.left_expr = f(e.left_expr)
        e.sequences[:] = [f(s) for s in e.sequences]
        e.condlists[:] = [[f(c) for c in cl] for cl in e.condlists]


def _func(s: Statement) -> FuncDef | None:
    if isinstance(s, Decorator):
        return s.func
    return s if isinstance(s, FuncDef) else None
