"""``model(x)`` on an ``nn.Module`` is typed as ``model.forward(x)``.

torch declares ``Module.__call__: Callable[..., Any]``, so a call of a module is untyped and
its arguments unchecked.  mypy asks for a method signature hook named after the receiver's
class (``pkg.MLP.__call__``); when the class inherits ``__call__`` from ``nn.Module`` and
defines (or inherits) an annotated ``forward``, the hook hands mypy ``forward``'s signature,
bound to the receiver: the call gets ``forward``'s return type, and its arguments are checked
like any typed call (typed tensor parameters through the plugin's spmd-mismatch check).

torch's own modules that apply one functional op (``nn.LayerNorm``, ``nn.GELU``, ``nn.Linear``,
``nn.Dropout``, the losses: :data:`TORCH_MODULE_OPS`) are typed by that op's rule.

Left as they were: modules whose ``forward`` is not annotated (or is a decorated function
mypy has not typed yet), classes that define their own ``__call__``, and every module that
does not use SPMD types (so unannotated code, torch included, sees no new errors).
Forward hooks that change the output are invisible to a static checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy.expandtype import expand_type_by_instance
from mypy.maptype import map_instance_to_supertype
from mypy.nodes import Decorator, FuncDef, TypeInfo
from mypy.plugin import MethodSigContext
from mypy.typeops import bind_self
from mypy.types import CallableType, FunctionLike, Instance, Type, get_proper_type

if TYPE_CHECKING:
    from . import SpmdPlugin

MODULE = "torch.nn.modules.module.Module"

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
    "sparse": {"Embedding": "embedding"},
    "flatten": {"Flatten": "flatten", "Unflatten": "unflatten"},
    "loss": {"L1Loss": "l1_loss", "MSELoss": "mse_loss", "CrossEntropyLoss": "cross_entropy",
             "NLLLoss": "nll_loss", "BCELoss": "binary_cross_entropy",
             "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div",
             "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss"},
}
TORCH_MODULE_OPS: dict[str, str] = {
    f"torch.nn.modules.{module}.{cls}": op
    for module, classes in _TORCH_MODULE_OPS.items() for cls, op in classes.items()
}


def is_module_class(info: TypeInfo | None) -> bool:
    return info is not None and info.fullname != MODULE and info.has_base(MODULE)


class ModuleCallTyper:
    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin

    def call_signature_hook(self, ctx: MethodSigContext) -> FunctionLike:
        sig = ctx.default_signature
        try:
            self.plugin.promotion.sync(ctx.api)
            bound = self.forward_signature(ctx) if self.plugin.promotion.wanted else None
        except Exception:  # noqa: BLE001 - never crash mypy: the default signature
            bound = None
        if bound is None:
            return self.plugin.calls.relax_signature(sig, ctx.context)
        return self.plugin.calls.relax_signature(bound, ctx.context)

    def forward_signature(self, ctx: MethodSigContext) -> CallableType | None:
        receiver = get_proper_type(ctx.type)
        if not isinstance(receiver, Instance) or not is_module_class(receiver.type):
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
        return expanded if isinstance(expanded, CallableType) else None
