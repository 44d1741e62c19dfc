"""``model(x)`` on an ``nn.Module`` is typed as ``model.forward(x)``.

torch declares ``Module.__call__: Callable[..., Any]``, so a call of a module is untyped and
its arguments unchecked.  mypy asks for a method signature hook named after the receiver's
class (``pkg.MLP.__call__``); when the class inherits ``__call__`` from ``nn.Module`` and
defines (or inherits) an annotated ``forward``, the hook hands mypy ``forward``'s signature,
bound to the receiver: the call gets ``forward``'s return type, and its arguments are checked
like any typed call (typed tensor parameters through the plugin's spmd-mismatch check).

torch's own modules that apply one functional op (``nn.LayerNorm``, ``nn.GELU``, ``nn.Linear``,
``nn.Dropout``, the losses: :data:`TORCH_MODULE_OPS`) are typed by that op's rule.

An ``nn.ModuleList`` holds ``Module``s for torch, so ``for layer in self.layers: x = layer(x)``
was unchecked (every transformer stack is written so).  Where the list is built in sight, in
the class of the module being checked (``self.layers = nn.ModuleList([Block(cfg) for _ in
range(n)])``, a list or tuple display of such calls, a generator, a function returning a
module class), iterating it (``for``, comprehensions, ``enumerate``, a slice of it) and
indexing it with an int give that class, or the union of the classes listed::

    self.layers = nn.ModuleList([Block(c) for _ in range(n)])     for layer in self.layers:
                                                                      x = layer(x)   # Block.forward

The class's own ``append``/``insert``/``extend`` calls on the list are read too, and a
function without a return annotation builds the class its every ``return`` builds (Megatron's
``build_layer`` nested in ``__init__``); a list whose type is declared (``make_blocks(n) ->
list[Blk]``, a parameter ``blocks: list[Blk]``) holds its item class; a class-level
``layers: nn.ModuleList`` declaration is no value.  ``reversed`` and ``zip`` of the list give
the class too.  An ``nn.ModuleDict({"a": A(), ...})`` (and ``self.d["b"] = B()``) gives the
class under a literal key, or of any entry (``values()``, ``items()``); an
``nn.Sequential(a, b, ...)`` call runs its chain (:meth:`ModuleCallTyper.sequential_hook`).
A list built elsewhere (another module's class, which may come from mypy's cache without its
body), extended from an undeclared variable, or of items that are not constructor calls stays
``Module``.  A list of several classes is their union: a call on it is judged against the
classes whose forward takes its arguments, by the SPMD check only
(:meth:`ModuleCallTyper._union_member`).

Left as they were: modules whose ``forward`` is not annotated (or is a decorated function
mypy has not typed yet) or names no SPMD type (nor a type variable), classes that define their
own ``__call__``, and every module that does not use SPMD types (so unannotated code, torch
included, sees no new errors, and importing spmd does not start checking plain modules' calls).
Forward hooks that change the output are invisible to a static checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mypy.argmap import map_actuals_to_formals
from mypy.expandtype import expand_type_by_instance
from mypy.maptype import map_instance_to_supertype
from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    ARG_STAR,
    ARG_STAR2,
    CallExpr,
    AssignmentStmt,
    Decorator,
    DictExpr,
    Expression,
    ExpressionStmt,
    FuncDef,
    GeneratorExpr,
    IndexExpr,
    ListComprehension,
    ListExpr,
    MemberExpr,
    NameExpr,
    RefExpr,
    SliceExpr,
    StarExpr,
    Statement,
    StrExpr,
    TupleExpr,
    TypeInfo,
    Var,
)
from mypy.plugin import ClassDefContext, FunctionContext, MethodContext, MethodSigContext
from mypy.subtypes import is_same_type
from mypy.typeops import bind_self, make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    FunctionLike,
    Instance,
    TupleType,
    Type,
    TypeOfAny,
    TypeVarLikeType,
    UnionType,
    get_proper_type,
)
from mypy.typevars import fill_typevars_with_any

from ..engine import collectives as coll
from ..engine.ops import Operand, propagate, variant_formals
from ..engine.types import UNTYPED
from .global_calls import classes_in_sight, module_constructor
from .calls import expr_text
from .texts import ELIDED
from .depends import class_dependency, depend_on
from .mypy_types import lookup_type
from .statements import functions_of, returns, statement_blocks

if TYPE_CHECKING:
    from . import SpmdPlugin

MODULE = "torch.nn.modules.module.Module"
MODULE_LIST = "torch.nn.modules.container.ModuleList"
MODULE_DICT = "torch.nn.modules.container.ModuleDict"
SEQUENTIAL = "torch.nn.modules.container.Sequential"

# torch's own modules that are one functional op on their input: ``self.norm(x)`` with
# ``self.norm = nn.LayerNorm(d)`` is typed as ``F.layer_norm(x, ...)`` (torch's forward
# returns a plain Tensor, so a typed input was silently dropped and a Partial went through
# a LayerNorm unchecked).  The module's parameters are untyped (gradual: they join no axis).
# Its constructor's dims (LayerNorm's normalized_shape, Softmax's dim) are read for global
# tensors only (global_calls.module_params); locally a Shard(i) input gives V where the op's
# layout depends on them (conservative).
_TORCH_MODULE_OPS: dict[str, dict[str, str]] = {
    "activation": {
        "Threshold": "threshold", "ReLU": "relu", "RReLU": "rrelu", "Hardtanh": "hardtanh",
        "ReLU6": "relu6", "Sigmoid": "sigmoid", "Hardsigmoid": "hardsigmoid", "Tanh": "tanh",
        "SiLU": "silu", "Mish": "mish", "Hardswish": "hardswish", "ELU": "elu", "CELU": "celu",
        "SELU": "selu", "GLU": "glu", "GELU": "gelu", "Hardshrink": "hardshrink",
        "LeakyReLU": "leaky_relu", "LogSigmoid": "logsigmoid", "Softplus": "softplus",
        "Softshrink": "softshrink", "PReLU": "prelu", "Softsign": "softsign",
        "Tanhshrink": "tanhshrink", "Softmin": "softmin", "Softmax": "softmax",
        "LogSoftmax": "log_softmax",
    },
    "linear": {"Identity": "identity", "Linear": "linear", "LazyLinear": "linear",
               "Bilinear": "bilinear"},
    "normalization": {"LayerNorm": "layer_norm", "GroupNorm": "group_norm", "RMSNorm": "rms_norm",
                      "LocalResponseNorm": "local_response_norm"},
    "dropout": {"Dropout": "dropout", "Dropout1d": "dropout1d", "Dropout2d": "dropout2d",
                "Dropout3d": "dropout3d", "AlphaDropout": "alpha_dropout",
                "FeatureAlphaDropout": "feature_alpha_dropout"},
    "sparse": {"Embedding": "embedding", "EmbeddingBag": "embedding_bag"},
    "flatten": {"Flatten": "flatten", "Unflatten": "unflatten"},
    "fold": {"Fold": "fold", "Unfold": "unfold"},
    "batchnorm": {"BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm",
                  "BatchNorm3d": "batch_norm", "LazyBatchNorm1d": "batch_norm",
                  "LazyBatchNorm2d": "batch_norm", "LazyBatchNorm3d": "batch_norm",
                  "SyncBatchNorm": "batch_norm"},
    "instancenorm": {"InstanceNorm1d": "instance_norm", "InstanceNorm2d": "instance_norm",
                     "InstanceNorm3d": "instance_norm", "LazyInstanceNorm1d": "instance_norm",
                     "LazyInstanceNorm2d": "instance_norm", "LazyInstanceNorm3d": "instance_norm"},
    "pooling": {
        "MaxPool1d": "max_pool1d", "MaxPool2d": "max_pool2d", "MaxPool3d": "max_pool3d",
        "AvgPool1d": "avg_pool1d", "AvgPool2d": "avg_pool2d", "AvgPool3d": "avg_pool3d",
        "AdaptiveAvgPool1d": "adaptive_avg_pool1d", "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
        "AdaptiveAvgPool3d": "adaptive_avg_pool3d", "AdaptiveMaxPool1d": "adaptive_max_pool1d",
        "AdaptiveMaxPool2d": "adaptive_max_pool2d", "AdaptiveMaxPool3d": "adaptive_max_pool3d",
        "FractionalMaxPool2d": "fractional_max_pool2d",
        "FractionalMaxPool3d": "fractional_max_pool3d",
        "LPPool1d": "lp_pool1d", "LPPool2d": "lp_pool2d", "LPPool3d": "lp_pool3d",
        "MaxUnpool1d": "max_unpool1d", "MaxUnpool2d": "max_unpool2d", "MaxUnpool3d": "max_unpool3d",
    },
    "upsampling": {"Upsample": "interpolate", "UpsamplingNearest2d": "interpolate",
                   "UpsamplingBilinear2d": "interpolate"},
    # zero, reflection, replication and circular padding are linear maps; a constant pad's
    # value is in the constructor (a non-zero one would be summed once per rank): unknown op
    "padding": {
        **{f"{kind}Pad{n}d": "pad" for kind in ("Zero", "Reflection", "Replication", "Circular")
           for n in (1, 2, 3)},
        **{f"ConstantPad{n}d": f"ConstantPad{n}d" for n in (1, 2, 3)},
    },
    "conv": {**{f"{lazy}Conv{n}d": f"conv{n}d" for lazy in ("", "Lazy") for n in (1, 2, 3)},
             **{f"{lazy}ConvTranspose{n}d": f"conv_transpose{n}d" for lazy in ("", "Lazy")
                for n in (1, 2, 3)}},
    "rnn": {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh", "LSTMCell": "lstm_cell",
            "GRUCell": "gru_cell", "RNNCell": "rnn_tanh_cell"},
    "pixelshuffle": {"PixelShuffle": "pixel_shuffle", "PixelUnshuffle": "pixel_unshuffle"},
    "channelshuffle": {"ChannelShuffle": "channel_shuffle"},
    "distance": {"CosineSimilarity": "cosine_similarity", "PairwiseDistance": "pairwise_distance"},
    "loss": {"L1Loss": "l1_loss", "MSELoss": "mse_loss", "CrossEntropyLoss": "cross_entropy",
             "NLLLoss": "nll_loss", "BCELoss": "binary_cross_entropy",
             "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div",
             "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss"},
}
TORCH_MODULE_OPS: dict[str, str] = {
    f"torch.nn.modules.{module}.{cls}": op
    for module, classes in _TORCH_MODULE_OPS.items() for cls, op in classes.items()
}
# Modules whose result is not one tensor of the op's type: the recurrent ones return
# (output, h_n) or (output, (h_n, c_n)) (torch's forward is unannotated), and a max pool
# built with ``return_indices=True`` returns (values, indices).  Their input is checked by the
# op's rule; the result stays mypy's (the recurrent modules' always; a max pool's unless each
# constructor in sight leaves return_indices out or passes a literal False).
TUPLE_RESULT_MODULES: frozenset[str] = frozenset(
    f"torch.nn.modules.rnn.{cls}" for cls in ("LSTM", "GRU", "RNN"))
INDICES_RESULT_MODULES: frozenset[str] = frozenset(
    f"torch.nn.modules.pooling.{cls}" for cls in (
        "MaxPool1d", "MaxPool2d", "MaxPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d", "FractionalMaxPool2d", "FractionalMaxPool3d"))


def returns_one_tensor(ctx: MethodContext) -> bool:
    """Whether the call of one of torch's one-op modules (``self.pool(x)``) returns one
    tensor: not a recurrent module, and not a max pool that may return its indices too."""
    t = get_proper_type(ctx.type)
    cls = t.type.fullname if isinstance(t, Instance) else ""
    if cls in TUPLE_RESULT_MODULES:
        return False
    if cls not in INDICES_RESULT_MODULES:
        return True
    c = ctx.context
    if not isinstance(c, CallExpr):
        return False
    built = module_constructor(ctx, c.callee)
    if not built:
        return False
    for b in built:
        if not isinstance(b, CallExpr):
            return False
        for name, arg in zip(b.arg_names, b.args):
            if name == "return_indices" and not (
                    isinstance(arg, NameExpr) and arg.fullname == "builtins.False"):
                return False
        if any(k in (ARG_STAR, ARG_STAR2) for k in b.arg_kinds):
            return False
        # return_indices is the 5th positional parameter of MaxPool*d, the 2nd of
        # AdaptiveMaxPool*d, the 4th of FractionalMaxPool*d: any positional argument there
        at = 4 if cls.rsplit(".", 1)[-1].startswith("MaxPool") else (
            1 if "Adaptive" in cls else 3)
        positional = [a for a, k in zip(b.args, b.arg_kinds) if k == ARG_POS]
        if len(positional) > at:
            return False
    return True


def is_module_class(info: TypeInfo | None) -> bool:
    return info is not None and info.fullname != MODULE and info.has_base(MODULE)


class ModuleCallTyper:
    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin

    def call_signature_hook(self, ctx: MethodSigContext) -> FunctionLike:
        sig = ctx.default_signature
        in_union = False
        try:
            self.plugin.promotion.sync(ctx.api)
            bound = self.forward_signature(ctx) if self.plugin.promotion.wanted else None
            if bound is not None:
                members = _union_receiver(ctx)
                if members is not None:
                    bound, in_union = self._union_member(ctx.context, bound, members)
        except Exception:  # noqa: BLE001 - never crash mypy: the default signature
            bound = None
        if bound is None:
            return self.plugin.calls.relax_signature(sig, ctx.context)
        relaxed = self.plugin.calls.relax_signature(bound, ctx.context)
        if in_union:
            # one of several classes the receiver may be: only the SPMD check (recorded by
            # relax_signature) judges the arguments; mypy's own would judge a class the
            # code may never call with them
            anything = AnyType(TypeOfAny.implementation_artifact)
            relaxed = relaxed.copy_modified(arg_types=[anything] * len(relaxed.arg_types))
        return relaxed

    def _union_member(self, call: object, bound: CallableType,
                      members: list[Instance]) -> tuple[CallableType | None, bool]:
        """The call of one class of a union receiver (an item of a ModuleList of several
        classes, ``layer(x, mask) if layer.needs_mask else layer(x)``): a class whose forward
        cannot take the call's arguments is left unchecked (None) when another class can take
        them (the code calls only those with these arguments); the call of a class that takes
        them keeps its SPMD check only (True), and its result where every class that takes
        the call returns the same type or a tensor.  When no class takes them, each is
        checked as declared (whichever runs, the call fails)."""
        if not isinstance(call, CallExpr):
            return bound, False
        if any(k in (ARG_STAR, ARG_STAR2) for k in call.arg_kinds):
            return bound, False
        if not _takes(bound, call):
            others = [self._forward_of(m) for m in members]
            if any(o is None or _takes(o, call) for o in others):
                return None, False
            return bound, False
        rets: list[Type] = []
        for m in members:
            o = self._forward_of(m)
            if o is None:
                continue  # untyped: its result is Any
            if _takes(o, call):
                rets.append(o.ret_type)
        types = self.plugin.types
        if not all(is_same_type(r, bound.ret_type) for r in rets) and not all(
                types.from_type(r) is not None for r in rets):
            bound = bound.copy_modified(ret_type=AnyType(TypeOfAny.implementation_artifact))
        return bound, True

    def class_mro_hook(self, ctx: ClassDefContext) -> None:
        """Every module class: a change of the ``forward`` its calls are typed by is a change
        of the class's ``__call__`` for the daemon (dmypy), whose fine-grained dependencies
        know that ``model(x)`` depends on ``__call__`` (Module's), not that the plugin typed
        it as ``forward``.  Without this, an edit of ``forward``'s signature left the callers'
        diagnostics stale until they were edited themselves.  The forward may be inherited
        (``class Sub(Row): pass``, Row's forward edited in another module): the ``forward``
        of each module class of the MRO fires ``<C.__call__>`` (mypy's own base-to-subclass
        propagation of ``<Row.forward>`` is left out under ``--logical-deps``)."""
        info = ctx.cls.info
        if not is_module_class(info):
            return
        for base in info.mro:
            if base.fullname == MODULE:
                break
            class_dependency(ctx, f"{base.fullname}.forward", f"{info.fullname}.__call__")

    def forward_signature(self, ctx: MethodSigContext) -> CallableType | None:
        receiver = get_proper_type(ctx.type)
        if not isinstance(receiver, Instance) or not is_module_class(receiver.type):
            return None
        return self._forward_of(receiver)

    def _forward_of(self, receiver: Instance) -> CallableType | None:
        """The signature a call of module ``receiver`` is given (its forward, bound), or None
        (the call stays torch's ``Callable[..., Any]``)."""
        if not is_module_class(receiver.type):
            return None
        info = receiver.type
        call = info.get("__call__")
        owner = next((c for c in info.mro if "__call__" in c.names), None)
        if call is None or owner is None or owner.fullname != MODULE:
            return None  # the class (or a base of it) defines its own __call__
        fwd_owner = next((c for c in info.mro if "forward" in c.names), None)
        if fwd_owner is None or fwd_owner.fullname == MODULE:
            return None
        node = fwd_owner.names["forward"].node
        declared: Type | None = None
        if isinstance(node, FuncDef):
            declared = node.type
        elif isinstance(node, Decorator):
            declared = node.var.type
        typ = get_proper_type(declared) if declared is not None else None
        if not isinstance(typ, CallableType) or (isinstance(node, FuncDef) and node.is_dynamic()):
            return None
        if isinstance(node, FuncDef) and (node.is_static or node.is_class):
            return None
        mapped = map_instance_to_supertype(receiver, fwd_owner)
        bound = bind_self(typ, receiver)
        if not isinstance(bound, CallableType):
            return None
        expanded = expand_type_by_instance(bound, mapped)
        if not isinstance(expanded, CallableType):
            return None
        # a user's forward without SPMD types: the call stays torch's ``Callable[..., Any]``,
        # as without the plugin (gradual: no new [arg-type] or [call-arg] errors in a module
        # that only imports spmd).  torch's own modules keep their forward's parameters: the
        # one-op modules' rule reads the operands' roles from them (TORCH_MODULE_OPS); their
        # types are Any, as torch's ``__call__`` takes anything (``self.norm(o)`` with
        # ``o: Tensor | None`` is no [arg-type] error that plain mypy does not give).
        if fwd_owner.fullname.startswith("torch."):
            anything = AnyType(TypeOfAny.implementation_artifact)
            return expanded.copy_modified(arg_types=[anything] * len(expanded.arg_types))
        if self._mentions_spmd(typ, 0) or self._mentions_spmd(expanded, 0):
            return expanded
        return None

    def sequential_hook(self, ctx: MethodContext) -> Type:
        """``self.seq(x)`` with ``self.seq = nn.Sequential(col, nn.GELU(), row)`` built in
        sight: ``x`` runs through the chain as torch runs it.  A module with a typed forward
        checks its input (the SPMD check of an argument) and gives its declared result; one of
        torch's one-op modules (:data:`TORCH_MODULE_OPS`) is typed by its op's rule; the
        chain's result is the last one's.  A module of another kind (unknown, a forward
        without SPMD types, a recurrent one, an op whose rule reads the constructor's
        arguments) ends the check there and leaves the result torch's (Any); so does a
        ``Sequential`` built otherwise (an ``OrderedDict``, ``add_module``, a ``*`` list, a
        variable)."""
        default = ctx.default_return_type
        call = ctx.context
        if not (isinstance(call, CallExpr) and len(call.args) == 1 and call.arg_kinds[0] == ARG_POS):
            return default
        built = module_constructor(ctx, call.callee)
        b = built[0] if len(built) == 1 else None
        if not (isinstance(b, CallExpr) and _constructs(b, SEQUENTIAL)
                and b.args and all(k == ARG_POS for k in b.arg_kinds)):
            return default
        members = [_module_of(e) for e in b.args]
        for m in members:
            # read here, not named by the call (which mypy ties to Sequential's __call__): the
            # daemon re-checks the call when one of them changes (__call__ follows forward)
            if m is not None and not m.type.fullname.startswith("torch."):
                depend_on(ctx.api, f"{m.type.fullname}.__call__")
        arg = call.args[0]
        # the argument's type (a member of a union argument: the hook runs for each)
        arg_type = ctx.arg_types[0][0] if ctx.arg_types and ctx.arg_types[0] else None
        types = self.plugin.types
        calls = self.plugin.calls
        current = types.from_type(arg_type) if arg_type is not None else None
        if current is None or current.spec is not None:
            return default  # not a tensor, or a global tensor (its ops read the shapes)
        text = expr_text(arg)
        result: Type | None = None
        for e, m in zip(b.args, members):
            if m is None:
                return default
            op = TORCH_MODULE_OPS.get(m.type.fullname)
            if op is not None:
                if (variant_formals(op) or m.type.fullname in TUPLE_RESULT_MODULES
                        or m.type.fullname in INDICES_RESULT_MODULES):
                    return default
                res = propagate(op, [Operand(current, text)], strict=calls.strict(ctx))
                calls.report(ctx, res.errors)
                current = res.type
                result = None
            else:
                fwd = self._forward_of(m)
                if fwd is None or m.type.fullname.startswith("torch.") or not _takes_one(fwd):
                    return default
                relaxed = calls._relax(fwd.arg_types[0])
                if relaxed is not None and current:
                    name = fwd.arg_names[0]
                    where = (f'argument {text} (parameter "{name}" of forward of '
                             f'{m.type.name}, in {expr_text(call.callee)})')
                    calls.report(ctx, coll.check_argument_any(current, relaxed[1], x_text=text,
                                                              where=where))
                next_type = types.from_type(fwd.ret_type)
                if next_type is None or next_type.spec is not None:
                    return default  # a forward returning something else than one tensor
                current = next_type
                result = fwd.ret_type
            text = f"{expr_text(e)}({ELIDED})"  # its output, from the previous member's
        if result is not None:
            return result
        inst = types.to_instance(current) if current else None
        return inst if inst is not None else default

    def _mentions_spmd(self, t: Type, depth: int) -> bool:
        """Whether ``t`` holds a typed tensor or a type variable (a generic forward's result
        follows its argument, ``Id[int]``'s ``forward(x: T) -> T``) anywhere: containers,
        tuples, unions, callables."""
        if depth > 8:  # a recursive alias: assume it may
            return True
        p = get_proper_type(t)
        if isinstance(p, TypeVarLikeType):
            return True
        if isinstance(p, Instance):
            st = self.plugin.types.from_type(p)
            if st is not None:
                return st != UNTYPED
            return any(self._mentions_spmd(a, depth + 1) for a in p.args)
        if isinstance(p, (TupleType, UnionType)):
            return any(self._mentions_spmd(i, depth + 1) for i in p.items)
        if isinstance(p, CallableType):
            return bool(p.variables) or self._mentions_spmd(p.ret_type, depth + 1) or any(
                self._mentions_spmd(a, depth + 1) for a in p.arg_types)
        return False


def _module_of(e: Expression) -> Instance | None:
    """The module class an item of ``nn.Sequential(...)`` is: a module built there
    (``nn.GELU()``, ``Block(c)``), or a name declared a module class (a parameter)."""
    t = _built_module(e)
    if t is None and isinstance(e, NameExpr) and isinstance(e.node, Var) and not e.node.is_inferred:
        t = e.node.type
    p = get_proper_type(t) if t is not None else None
    return p if isinstance(p, Instance) and is_module_class(p.type) else None


def _takes_one(sig: CallableType) -> bool:
    """Whether a forward takes one positional argument (what Sequential passes it)."""
    kinds = sig.arg_kinds
    return bool(kinds) and kinds[0] == ARG_POS and all(not k.is_required() for k in kinds[1:])


def _union_receiver(ctx: MethodSigContext) -> list[Instance] | None:
    """The classes of a call's receiver when mypy checks the call once per member of a union
    (``layer(x)``, ``layer: Attn | Mlp``); None for any other call."""
    call = ctx.context
    if not isinstance(call, CallExpr):
        return None
    t = lookup_type(ctx.api, call.callee)
    p = get_proper_type(t) if t is not None else None
    if not isinstance(p, UnionType):
        return None
    members: list[Instance] = []
    for item in p.relevant_items():
        i = get_proper_type(item)
        if isinstance(i, Instance):
            members.append(i)
    return members if len(members) > 1 else None


def _takes(sig: CallableType, call: CallExpr) -> bool:
    """Whether ``sig`` takes the call's arguments (their number, names and kinds)."""
    anything = AnyType(TypeOfAny.special_form)
    mapping = map_actuals_to_formals(call.arg_kinds, call.arg_names, sig.arg_kinds,
                                     sig.arg_names, lambda i: anything)
    used: set[int] = set()
    for j, actuals in enumerate(mapping):
        kind = sig.arg_kinds[j]
        if kind.is_required() and not actuals:
            return False
        if not kind.is_star() and len(actuals) > 1:
            return False
        if kind.is_named() and actuals and call.arg_kinds[actuals[0]] != ARG_NAMED:
            return False
        used.update(actuals)
    return len(used) == len(call.args)


# -- nn.ModuleList ------------------------------------------------------------------------

def module_list_item(ctx: MethodContext | FunctionContext, lst: Expression) -> Type | None:
    """The class of the modules the ModuleList ``lst`` holds (``self.layers``, a slice of it),
    read from where it is built in sight (see the module docstring); None when unknown."""
    while isinstance(lst, IndexExpr) and isinstance(lst.index, SliceExpr):
        lst = lst.base  # self.layers[:n]
    if not isinstance(lst, (MemberExpr, NameExpr)):
        return None
    values = module_constructor(ctx, lst)
    elements: list[Expression] = []
    items: list[Type] = []
    for v in values:
        if not (isinstance(v, CallExpr) and _constructs(v, MODULE_LIST)):
            return None  # assigned something else too (or unreadable): unknown
        if not v.args:
            continue  # nn.ModuleList(), filled by append (read below)
        if len(v.args) != 1 or v.arg_kinds[0] != ARG_POS:
            return None
        if not _listed(v.args[0], elements, items):
            return None
    if values and isinstance(lst, MemberExpr):
        if not _methods_read(ctx, lst, lambda body, me: _adds_in(body, me, lst.name, elements,
                                                                  items)):
            return None
    return _union_of_built(elements, items)


def _constructs(call: CallExpr, fullname: str) -> bool:
    """Whether ``call`` calls the class ``fullname`` (``nn.ModuleList(...)``)."""
    return (isinstance(call.callee, RefExpr) and isinstance(call.callee.node, TypeInfo)
            and call.callee.node.fullname == fullname)


def _methods_read(ctx: MethodContext | FunctionContext, attr: MemberExpr,
                  read: Callable[[list[Statement], str], bool]) -> bool:
    """``read(body, self_name)`` over every method of the classes in sight of ``attr``
    (where module_constructor reads its constructor); False at the first it cannot read."""
    for info in classes_in_sight(ctx, attr):
        for st in info.defn.defs.body:
            for f in functions_of(st):
                if f.arguments and not read(f.body.body, f.arguments[0].variable.name):
                    return False
    return True


def _union_of_built(elements: list[Expression], items: list[Type]) -> Type | None:
    """The union of ``items`` and of the classes ``elements`` build (``Block(c)``); None
    when one builds no known module class, or there is none."""
    out = list(items)
    for e in elements:
        t = _built_module(e)
        if t is None:
            return None
        out.append(t)
    return make_simplified_union(out) if out else None


def _listed(arg: Expression, elements: list[Expression], items: list[Type]) -> bool:
    """The items of a list given to ``nn.ModuleList`` or ``extend``: the item expressions
    of a display (to ``elements``), or the module class of a list whose type is declared
    (``make_blocks(n)`` returning ``list[Blk]``, a parameter ``blocks: list[Blk]``: to
    ``items``); False when they cannot be read."""
    if isinstance(arg, (ListExpr, TupleExpr)):
        if any(isinstance(i, StarExpr) for i in arg.items):
            return False
        elements += arg.items
        return True
    if isinstance(arg, ListComprehension):
        elements.append(arg.generator.left_expr)
        return True
    if isinstance(arg, GeneratorExpr):
        elements.append(arg.left_expr)
        return True
    declared = _declared_item(arg)
    if declared is None:
        return False
    items.append(declared)
    return True


def _declared_item(e: Expression) -> Type | None:
    """The module class of the items of ``e`` where its type is declared: the call of a
    function with a return annotation, or a name annotated (a parameter)."""
    declared: Type | None = None
    if isinstance(e, CallExpr) and isinstance(e.callee, RefExpr):
        node = e.callee.node
        sig = node.type if isinstance(node, FuncDef) else node.var.type if isinstance(node, Decorator) else None
        sig = get_proper_type(sig) if sig is not None else None
        if isinstance(sig, CallableType) and not sig.variables:
            declared = sig.ret_type
    elif isinstance(e, NameExpr) and isinstance(e.node, Var) and not e.node.is_inferred:
        declared = e.node.type
    p = get_proper_type(declared) if declared is not None else None
    if not isinstance(p, Instance):
        return None
    iterable = next((b for b in p.type.mro if b.fullname == "typing.Iterable"), None)
    if iterable is None:
        return None
    args = map_instance_to_supertype(p, iterable).args
    item = get_proper_type(args[0]) if args else None
    members = item.items if isinstance(item, UnionType) else [item]
    for m in members:
        pm = get_proper_type(m)
        if not isinstance(pm, Instance) or not is_module_class(pm.type):
            return None
    return item


def _adds_in(stmts: list[Statement], self_name: str, attr: str, out: list[Expression],
             items: list[Type]) -> bool:
    """What these statements add to ``self.<attr>`` (``append(x)``, ``insert(i, x)``,
    ``extend([...])``: to ``out``/``items`` as :func:`_listed` reads them); False when
    something is added that cannot be read (``extend(blocks)`` of an unannotated list)."""
    for st in stmts:
        if isinstance(st, ExpressionStmt) and isinstance(st.expr, CallExpr):
            call = st.expr
            c = call.callee
            if (isinstance(c, MemberExpr) and isinstance(c.expr, MemberExpr) and c.expr.name == attr
                    and isinstance(c.expr.expr, NameExpr) and c.expr.expr.name == self_name):
                if c.name == "append" and len(call.args) == 1:
                    out.append(call.args[0])
                elif c.name == "insert" and len(call.args) == 2:
                    out.append(call.args[1])
                elif not (c.name == "extend" and len(call.args) == 1
                          and _listed(call.args[0], out, items)):
                    return False  # added in a way not read
        for block in statement_blocks(st):
            if not _adds_in(block, self_name, attr, out, items):
                return False
    return True


def _built_module(e: Expression, depth: int = 0) -> Type | None:
    """The module ``e`` builds: a call of a module class (``Block(cfg)``) or of a function
    declared to return one (``make_block(i)``), or of an unannotated function whose every
    ``return`` builds one (Megatron's ``build_layer`` nested in ``__init__``)."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, RefExpr) or depth > 3:
        return None
    node = e.callee.node
    if isinstance(node, TypeInfo):
        return fill_typevars_with_any(node) if is_module_class(node) else None
    sig = node.type if isinstance(node, FuncDef) else node.var.type if isinstance(node, Decorator) else None
    sig = get_proper_type(sig) if sig is not None else None
    implicit = sig is None  # no annotation: read the returns
    if isinstance(sig, CallableType):
        ret = get_proper_type(sig.ret_type)
        if isinstance(ret, Instance) and is_module_class(ret.type):
            return ret
        implicit = isinstance(ret, AnyType)
    if isinstance(node, FuncDef) and implicit:
        built = [_built_module(r.expr, depth + 1) if r.expr is not None else None
                 for r in returns(node.body.body)]
        if built and all(b is not None for b in built):
            return make_simplified_union([b for b in built if b is not None])
    return None


def module_list_method_hook(ctx: MethodContext) -> Type:
    """``ModuleList.__iter__`` (a ``for`` over it: the context is the iterable) and
    ``__getitem__`` with an int: the class the list holds, where it is known.
    ``ModuleDict.__getitem__`` with a key, ``values()`` and ``items()``: the class of the
    dict's module under that key (a string literal key), or of every module it holds."""
    default = ctx.default_return_type
    ret = get_proper_type(default)
    if not isinstance(ret, Instance):
        return default
    context = ctx.context
    receiver = get_proper_type(ctx.type)
    if isinstance(receiver, Instance) and receiver.type.fullname == MODULE_DICT:
        return _module_dict_method(ctx, ret)
    if ret.type.fullname == MODULE and isinstance(context, IndexExpr):  # self.layers[i]
        item = module_list_item(ctx, context.base)
        return item if item is not None else default
    if ret.args and ret.type.fullname == "typing.Iterator" and isinstance(context, Expression):
        item = module_list_item(ctx, context)
        return ret.copy_modified(args=[item]) if item is not None else default
    return default


def _module_dict_method(ctx: MethodContext, ret: Instance) -> Type:
    default = ctx.default_return_type
    context = ctx.context
    if ret.type.fullname == MODULE and isinstance(context, IndexExpr):  # self.named["a"]
        key = context.index.value if isinstance(context.index, StrExpr) else None
        item = module_dict_item(ctx, context.base, key)
        return item if item is not None else default
    if not (isinstance(context, CallExpr) and isinstance(context.callee, MemberExpr)
            and ret.args):
        return default
    item = module_dict_item(ctx, context.callee.expr, None)
    if item is None:
        return default
    if context.callee.name == "values":  # Iterable[Module]
        return ret.copy_modified(args=[item])
    pair = get_proper_type(ret.args[0])  # items(): Iterable[tuple[str, Module]]
    if context.callee.name == "items" and isinstance(pair, TupleType) and len(pair.items) == 2:
        return ret.copy_modified(args=[pair.copy_modified(items=[pair.items[0], item])])
    return default


def module_dict_item(ctx: MethodContext, dct: Expression, key: str | None) -> Type | None:
    """The class of the module the ModuleDict ``dct`` holds under ``key`` (None: of any of
    them), read where it is built in sight: ``nn.ModuleDict({"a": A(), ...})`` and the
    class's ``self.named["b"] = B()``; None when unknown (built otherwise, ``update``d,
    or no entry under a literal key)."""
    if not isinstance(dct, MemberExpr):
        return None
    values = module_constructor(ctx, dct)
    if not values:
        return None
    entries: list[tuple[Expression | None, Expression]] = []
    for v in values:
        if not (isinstance(v, CallExpr) and _constructs(v, MODULE_DICT)):
            return None
        if not v.args:
            continue
        if len(v.args) != 1 or v.arg_kinds[0] != ARG_POS or not isinstance(v.args[0], DictExpr):
            return None
        for k, e in v.args[0].items:
            if k is None:
                return None  # {**other}
            entries.append((k, e))
    if not _methods_read(ctx, dct, lambda body, me: _dict_sets_in(body, me, dct.name, entries)):
        return None
    if key is not None and all(isinstance(k, StrExpr) for k, _ in entries):
        entries = [(k, e) for k, e in entries if isinstance(k, StrExpr) and k.value == key]
    return _union_of_built([e for _, e in entries], [])


def _dict_sets_in(stmts: list[Statement], self_name: str, attr: str,
                  out: list[tuple[Expression | None, Expression]]) -> bool:
    """``self.<attr>[k] = m`` in these statements (to ``out``); False where the dict is
    filled otherwise (``update``, ``setdefault``)."""
    for st in stmts:
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                if (isinstance(lv, IndexExpr) and _is_self_attr(lv.base, self_name, attr)):
                    out.append((lv.index, st.rvalue))
        elif isinstance(st, ExpressionStmt) and isinstance(st.expr, CallExpr):
            c = st.expr.callee
            if (isinstance(c, MemberExpr) and c.name in ("update", "setdefault")
                    and _is_self_attr(c.expr, self_name, attr)):
                return False
        for block in statement_blocks(st):
            if not _dict_sets_in(block, self_name, attr, out):
                return False
    return True


def _is_self_attr(e: Expression, self_name: str, attr: str) -> bool:
    return (isinstance(e, MemberExpr) and e.name == attr and isinstance(e.expr, NameExpr)
            and e.expr.name == self_name)


def iteration_hook(ctx: FunctionContext) -> Type:
    """``enumerate(self.layers)``, ``reversed(self.layers)``, ``zip(self.layers, xs)``: the
    item type is inferred from the list's ``__iter__``/``__getitem__`` as a protocol, without
    the method hook; given here."""
    default = ctx.default_return_type
    ret = get_proper_type(default)
    if not isinstance(ret, Instance) or len(ret.args) != 1:
        return default
    zipped = get_proper_type(ret.args[0]) if ret.type.fullname == "builtins.zip" else None
    if isinstance(zipped, TupleType):
        pairs = [(t, a) for name, types, args in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args)
                 if name != "strict" for t, a in zip(types, args)]
        if len(pairs) != len(zipped.items):
            return default
        new = list(zipped.items)
        for k, (t, a) in enumerate(pairs):
            p = get_proper_type(t)
            if isinstance(p, Instance) and p.type.fullname == MODULE_LIST:
                item = module_list_item(ctx, a)
                if item is not None:
                    new[k] = item
        if new == list(zipped.items):
            return default
        return ret.copy_modified(args=[zipped.copy_modified(items=new)])
    if not ctx.args or not ctx.args[0]:
        return default
    arg_type = get_proper_type(ctx.arg_types[0][0])
    if not isinstance(arg_type, Instance) or arg_type.type.fullname != MODULE_LIST:
        return default
    item = module_list_item(ctx, ctx.args[0][0])
    return ret.copy_modified(args=[item]) if item is not None else default
