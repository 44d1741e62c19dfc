"""Call hooks: torch ops, the spmd collectives, and the spmd helpers.

Each hook reads the operands' SPMD types from mypy's inferred argument types,
asks the engine for the result and the violations, reports the violations with
their ``spmd-...`` codes at the call, and returns the typed result.  A hook
whose call has no typed operand returns mypy's own result untouched (gradual,
and cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from mypy.nodes import (
    CallExpr,
    Context,
    Expression,
    FloatExpr,
    IndexExpr,
    IntExpr,
    ListExpr,
    MemberExpr,
    NameExpr,
    OpExpr,
    RefExpr,
    StrExpr,
    TupleExpr,
    UnaryExpr,
)
from mypy.plugin import FunctionContext, MethodContext
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    TupleType,
    Type,
    TypeOfAny,
    TypeType,
    UnionType,
    get_proper_type,
)

from ..engine import collectives as coll
from ..engine.errors import SpmdError
from ..engine.ops import FACTORIES, NOT_OPS, Operand, Role, check_backward, check_inplace, classify, propagate
from ..engine.types import Kind, LocalType, SpmdType, UNTYPED, format_type
from .codes import ERROR_CODES

if TYPE_CHECKING:
    from . import SpmdPlugin

AnyCtx = FunctionContext | MethodContext

# Formal parameter names whose values are never operands (dims, shapes, dtypes, ...).
NON_OPERAND_NAMES = frozenset(
    """dim dims dim0 dim1 dimension size sizes shape dtype device layout memory_format
    requires_grad pin_memory non_blocking copy keepdim alpha beta eps momentum training
    inplace reduction ignore_index label_smoothing p approximate negative_slope start end
    step chunks split_size split_size_or_sections sections indices_or_sections source
    destination repeats diagonal offset min max lambd threshold generator correction unbiased
    normalized_shape num_classes padding_idx max_norm norm_type scale_grad_by_freq sparse
    mode value_or_none descending stable sorted largest k q interpolation names""".split()
)
# Formal names whose tensors are indices/masks/conditions: they are not differentiated,
# but a varying index makes a varying result.
INDEX_NAMES = frozenset("index indices mask condition target labels idx".split())
# Formal names where a Python scalar is an operand (``x + 1``, ``x * 2``, ``where(c, x, 0.)``).
SCALAR_OPERAND_NAMES = frozenset("other input self value exponent scalar tensor1 tensor2".split())

DUNDERS: dict[str, tuple[str, bool]] = {  # method -> (op name, reflected)
    "__add__": ("add", False), "__radd__": ("add", True), "__iadd__": ("add_", False),
    "__sub__": ("sub", False), "__rsub__": ("sub", True), "__isub__": ("sub_", False),
    "__mul__": ("mul", False), "__rmul__": ("mul", True), "__imul__": ("mul_", False),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True), "__itruediv__": ("div_", False),
    "__div__": ("div", False), "__rdiv__": ("div", True), "__idiv__": ("div_", False),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__pow__": ("pow", False), "__rpow__": ("pow", True), "__ipow__": ("pow_", False),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True),
    "__neg__": ("neg", False), "__pos__": ("positive", False), "__abs__": ("abs", False),
    "__invert__": ("bitwise_not", False),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True),
    "__or__": ("bitwise_or", False), "__ror__": ("bitwise_or", True),
    "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True),
    "__eq__": ("eq", False), "__ne__": ("ne", False), "__lt__": ("lt", False),
    "__le__": ("le", False), "__gt__": ("gt", False), "__ge__": ("ge", False),
    "__getitem__": ("__getitem__", False), "__setitem__": ("__setitem__", False),
}

SPMD_COLLECTIVES = frozenset(coll.OPS)
_TENSOR_CONTAINERS = ("builtins.list", "builtins.tuple", "typing.Sequence", "typing.List",
                      "collections.abc.Sequence", "typing.Iterable", "typing.Iterator")
RAW_COLLECTIVES = frozenset(
    """all_reduce all_gather all_gather_into_tensor reduce_scatter reduce_scatter_tensor
    all_to_all all_to_all_single broadcast reduce all_reduce_coalesced""".split()
)


def expr_text(e: Expression | None) -> str:
    """Short source text of an operand for messages."""
    if e is None:
        return "x"
    if isinstance(e, NameExpr):
        return e.name
    if isinstance(e, MemberExpr):
        return f"{expr_text(e.expr)}.{e.name}"
    if isinstance(e, CallExpr):
        return f"{expr_text(e.callee)}(...)"
    if isinstance(e, IndexExpr):
        return f"{expr_text(e.base)}[...]"
    if isinstance(e, (IntExpr, FloatExpr)):
        return repr(e.value)
    if isinstance(e, StrExpr):
        return repr(e.value)
    if isinstance(e, OpExpr):
        return f"({expr_text(e.left)} {e.op} {expr_text(e.right)})"
    if isinstance(e, UnaryExpr):
        return f"{e.op}{expr_text(e.expr)}"
    return "x"


def _is_detached(e: Expression | None) -> bool:
    while isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr):
        if e.callee.name == "detach":
            return True
        e = e.callee.expr
    return False


def _is_scalar(t: Type) -> bool:
    p = get_proper_type(t)
    if isinstance(p, LiteralType):
        p = p.fallback
    return isinstance(p, Instance) and p.type.fullname in (
        "builtins.int", "builtins.float", "builtins.bool", "builtins.complex")


class CallTyper:
    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin

    # -- helpers ---------------------------------------------------------------------
    @property
    def types(self):  # noqa: ANN201
        return self.plugin.types

    def report(self, ctx: AnyCtx, errors: Sequence[SpmdError], context: Context | None = None) -> None:
        """Report past mypy's error watchers: for ``1 + x`` mypy tries ``int.__add__`` and
        ``x.__radd__`` with errors filtered, and an error inside the hook would make it
        drop the variant ("Unsupported operand types") and lose the SPMD message."""
        if not errors:
            return
        store = ctx.api.msg.errors  # type: ignore[attr-defined]
        watchers = getattr(store, "_watchers", None)
        if watchers:
            store._watchers = []
        try:
            for err in errors:
                ctx.api.fail(err.message, context or ctx.context, code=ERROR_CODES[err.code])
        finally:
            if watchers:
                store._watchers = watchers

    def can_grad(self, ctx: AnyCtx, expr: Expression | None) -> bool:
        if _is_detached(expr):
            return False
        return not self.plugin.in_no_grad(ctx.api, ctx.context.line)

    def _lookup_expr_type(self, ctx: AnyCtx, e: Expression) -> Type | None:
        try:
            return ctx.api.lookup_type(e)  # type: ignore[attr-defined]
        except (KeyError, AttributeError):
            return None

    def typed_result(self, default: Type, t: SpmdType) -> Type:
        """mypy's result type with every tensor in it given the type ``t``."""
        p = get_proper_type(default)
        inst = self.types.to_instance(t)
        if inst is None:
            return default
        if isinstance(p, Instance):
            if self.types.from_type(p) is not None:
                return inst
            if p.type.fullname in _TENSOR_CONTAINERS and p.args:
                if self.types.from_type(p.args[0]) is not None:
                    return p.copy_modified(args=[inst])
            return default
        if isinstance(p, TupleType):
            items = [inst if self.types.from_type(i) is not None else i for i in p.items]
            return p.copy_modified(items=items)
        return default

    # -- operands --------------------------------------------------------------------
    def operands(self, ctx: AnyCtx, receiver: Expression | None, receiver_type: Type | None,
                 dunder: bool = False) -> tuple[list[Operand], Operand | None, bool]:
        """(operands in formal order, the out= target, whether any operand is typed)."""
        ops: list[Operand] = []
        out: Operand | None = None
        any_typed = False
        if receiver_type is not None:
            t = self.types.from_type(receiver_type)
            if t is not None:
                any_typed = any_typed or bool(t)
                ops.append(Operand(t, expr_text(receiver), self.can_grad(ctx, receiver)))
        for formal, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args):
            name = formal or ""
            if name in NON_OPERAND_NAMES:
                continue
            for typ, expr in zip(types, exprs):
                if isinstance(expr, (ListExpr, TupleExpr)) and not self.types.from_type(typ):
                    items = [(self._lookup_expr_type(ctx, i), i) for i in expr.items]
                else:
                    items = [(typ, expr)]
                for it, ie in items:
                    t = self.types.from_type(it)
                    if t is None:
                        if it is not None and _is_scalar(it) and (
                                name in SCALAR_OPERAND_NAMES or (formal is None and dunder)):
                            ops.append(Operand(None, expr_text(ie)))
                        continue
                    any_typed = any_typed or bool(t)
                    is_index = name in INDEX_NAMES
                    o = Operand(t, expr_text(ie), False if is_index else self.can_grad(ctx, ie),
                                Role.NONLINEAR if is_index else None)
                    if name == "out":
                        out = o
                    else:
                        ops.append(o)
        return ops, out, any_typed

    # -- torch ops ---------------------------------------------------------------------
    def op_hook(self, op: str, *, method: bool, reflected: bool = False) -> Callable[[AnyCtx], Type]:
        spec = classify(op)
        dunder = method and (op in ("__getitem__", "__setitem__") or any(
            op == v[0] for v in DUNDERS.values()))
        inplace = op.endswith("_") and not op.startswith("__") or op == "__setitem__"

        def hook(ctx: AnyCtx) -> Type:
            receiver = None
            receiver_type = None
            if method:
                receiver_type = ctx.type  # type: ignore[union-attr]
                c = ctx.context
                if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr):
                    receiver = c.callee.expr
                elif isinstance(c, OpExpr):
                    receiver = c.right if reflected else c.left
                elif isinstance(c, IndexExpr):
                    receiver = c.base
                elif isinstance(c, UnaryExpr):
                    receiver = c.expr
            ops, out, any_typed = self.operands(ctx, receiver, receiver_type, dunder)
            if not any_typed:
                return ctx.default_return_type
            if reflected and len(ops) == 2:
                ops = [ops[1], ops[0]]
            result = propagate(spec, ops, strict=self.plugin.config.strict)
            self.report(ctx, result.errors)
            target = ops[0] if (inplace and method and ops) else out
            if target is not None and target.type:
                err = check_inplace(spec.name if out is None else f"{spec.name}(..., out=)", target, result.type)
                if err is not None:
                    self.report(ctx, [err])
                    return self.typed_result(ctx.default_return_type, target.type)
            if op == "__setitem__":
                return ctx.default_return_type
            return self.typed_result(ctx.default_return_type, result.type)

        return hook

    def backward_hook(self, ctx: MethodContext) -> Type:
        t = self.types.from_type(ctx.type)
        gradient_given = any(ctx.args) and bool(ctx.args[0])
        if t and not gradient_given:
            c = ctx.context
            receiver = c.callee.expr if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr) else None
            self.report(ctx, check_backward(Operand(t, expr_text(receiver))))
        return ctx.default_return_type

    def grad_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - AttributeContext
        t = self.types.from_type(ctx.type)
        if not t or ctx.is_lvalue:  # writing .grad (a finalised gradient) is unchecked
            return ctx.default_attr_type
        inst = self.types.to_instance(t.dual())
        if inst is None:
            return ctx.default_attr_type
        p = get_proper_type(ctx.default_attr_type)
        if isinstance(p, UnionType):
            return UnionType([inst if self.types.from_type(i) is not None else i for i in p.items])
        return inst

    def transpose_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - .T / .mT / .H
        t = self.types.from_type(ctx.type)
        if not t:
            return ctx.default_attr_type
        res = propagate("transpose", [Operand(t)])
        inst = self.types.to_instance(res.type)
        return inst if inst is not None else ctx.default_attr_type

    # -- spmd collectives --------------------------------------------------------------
    def _arg(self, ctx: AnyCtx, name: str) -> tuple[Expression | None, Type | None]:
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if formal == name and exprs:
                return exprs[0], types[0]
        return None, None

    def _axis_names(self, ctx: AnyCtx, expr: Expression | None, typ: Type | None,
                    what: str) -> tuple[str, ...] | None:
        """The literal axis names, or None after reporting what to write."""
        names: list[str] = []
        p = get_proper_type(typ) if typ is not None else None
        if isinstance(expr, StrExpr):
            names = [expr.value]
        elif isinstance(expr, TupleExpr) and all(isinstance(i, StrExpr) for i in expr.items):
            names = [i.value for i in expr.items]  # type: ignore[attr-defined]
        elif isinstance(p, LiteralType) and isinstance(p.value, str):
            names = [p.value]
        elif isinstance(p, Instance) and p.last_known_value is not None and isinstance(p.last_known_value.value, str):
            names = [p.last_known_value.value]
        elif isinstance(p, TupleType) and all(isinstance(get_proper_type(i), LiteralType) for i in p.items):
            names = [get_proper_type(i).value for i in p.items]  # type: ignore[union-attr]
        else:
            shown = expr_text(expr)
            self.report(ctx, [SpmdError(
                "spmd-axis",
                f"the mesh axis of {what} must be a literal the checker can read: write "
                f'{what}(..., "tp", ...) or a tuple ("dp", "tp"), or use a Final constant '
                f"(AXIS: Final = \"tp\"), not {shown}",
            )])
            return None
        known = self.plugin.config.mesh_axes
        bad = [n for n in names if n not in known]
        if bad:
            from ..engine.annotations import unknown_axis_error
            self.report(ctx, [unknown_axis_error(bad[0], known)])
            return None
        if len(set(names)) != len(names):
            self.report(ctx, [SpmdError("spmd-axis", f"the axes {tuple(names)} repeat an axis")])
            return None
        return tuple(names)

    def _local_type(self, ctx: AnyCtx, expr: Expression | None, which: str) -> LocalType | None | bool:
        """R/I/V/P/S(i) from a src/dst expression; None if absent; False if unreadable."""
        if expr is None:
            return None
        if isinstance(expr, RefExpr) and expr.fullname in ("spmd.R", "spmd.I", "spmd.V", "spmd.P"):
            return LocalType(Kind(expr.fullname[-1]))
        if (isinstance(expr, CallExpr) and isinstance(expr.callee, RefExpr)
                and expr.callee.fullname in ("spmd.S", "spmd.Shard") and len(expr.args) == 1):
            a = expr.args[0]
            if isinstance(a, IntExpr):
                return LocalType(Kind.V, a.value)
            if isinstance(a, UnaryExpr) and a.op == "-" and isinstance(a.expr, IntExpr):
                return LocalType(Kind.V, -a.expr.value)
        self.report(ctx, [SpmdError(
            "spmd-collective",
            f"{which}= must be written literally as one of R, I, V, P or S(<int>) (from spmd), "
            f"not {expr_text(expr)}: the checker reads the backward from it",
        )])
        return False

    def collective_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        def hook(ctx: FunctionContext) -> Type:
            x_expr, x_type = self._arg(ctx, "x")
            x = self.types.from_type(x_type)
            if not x:
                return ctx.default_return_type
            axis_expr, axis_type = self._arg(ctx, "axis")
            src = self._local_type(ctx, self._arg(ctx, "src")[0], "src")
            dst = self._local_type(ctx, self._arg(ctx, "dst")[0], "dst")
            if src is False or dst is False:
                return self.typed_result(ctx.default_return_type, UNTYPED)
            axes = self._axis_names(ctx, axis_expr, axis_type, op)
            if axes is None:
                return self.typed_result(ctx.default_return_type, UNTYPED)
            expert_expr = self._arg(ctx, "expert_mode")[0]
            expert = isinstance(expert_expr, NameExpr) and expert_expr.fullname == "builtins.True"
            op_expr = self._arg(ctx, "op")[0]
            reduce_op = op_expr.value if isinstance(op_expr, StrExpr) else "sum"
            res = coll.check_collective(
                op, x, axes, src or None, dst or None, expert_mode=expert, reduce_op=reduce_op,
                x_text=expr_text(x_expr), can_grad=self.can_grad(ctx, x_expr))
            self.report(ctx, res.errors)
            return self.typed_result(ctx.default_return_type, res.type)

        return hook

    def raw_collective_hook(self, name: str) -> Callable[[FunctionContext], Type]:
        typed_name = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
                      "all_to_all_single": "all_to_all"}.get(name, name)

        def hook(ctx: FunctionContext) -> Type:
            for types, exprs in zip(ctx.arg_types, ctx.args):
                for t, e in zip(types, exprs):
                    st = self.types.from_type(t)
                    if st:
                        replacement = (f"spmd.{typed_name}({expr_text(e)}, \"<axis>\", src=..., dst=...)"
                                       if typed_name in SPMD_COLLECTIVES else "a typed spmd collective")
                        self.report(ctx, [SpmdError(
                            "spmd-raw-collective",
                            f"torch.distributed.{name} on the typed tensor {expr_text(e)} "
                            f"({format_type(st)}): a raw collective is not differentiable (or has a "
                            f"fixed backward) and its result's type is unknown; use {replacement}",
                        )])
                        return ctx.default_return_type
            return ctx.default_return_type

        return hook

    # -- spmd helpers ------------------------------------------------------------------
    def reveal_hook(self, ctx: FunctionContext) -> Type:
        x_expr, x_type = self._arg(ctx, "x")
        t = self.types.from_type(x_type)
        shown = format_type(t, self.plugin.config.mesh_axes) if t is not None else "not a tensor"
        ctx.api.msg.note(f"Revealed type is {shown}", ctx.context)  # type: ignore[attr-defined]
        return ctx.default_return_type if x_type is None else x_type

    def declare_hook(self, ctx: FunctionContext) -> Type:
        _, t_type = self._arg(ctx, "t")
        p = get_proper_type(t_type) if t_type is not None else None
        target = None
        if isinstance(p, TypeType):
            target = p.item
        elif p is not None and hasattr(p, "ret_type") and getattr(p, "is_type_obj", lambda: False)():
            target = p.ret_type  # type: ignore[union-attr]
        if target is not None and self.types.from_type(target) is not None:
            return target
        return ctx.default_return_type

    def partial_op_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        """spmd.einsum / matmul / linear / sum: the local op, then reinterpret to P on
        ``out_partial_axes``."""
        spec_name = {"einsum": "einsum", "matmul": "matmul", "linear": "linear", "sum": "sum"}[op]

        def hook(ctx: FunctionContext) -> Type:
            ops, _, any_typed = self.operands(ctx, None, None)
            if not any_typed:
                return ctx.default_return_type
            res = propagate(spec_name, ops, strict=self.plugin.config.strict)
            self.report(ctx, res.errors)
            t = res.type
            pa_expr, pa_type = self._arg(ctx, "out_partial_axes")
            if pa_expr is not None and not (isinstance(pa_expr, NameExpr) and pa_expr.name == "None"):
                axes = self._axis_names(ctx, pa_expr, pa_type, f"spmd.{op} out_partial_axes")
                if axes is None:
                    return self.typed_result(ctx.default_return_type, UNTYPED)
                if op == "linear":
                    b_expr, b_type = self._arg(ctx, "bias")
                    bt = self.types.from_type(b_type)
                    for a in axes:
                        lt = bt.get(a) if bt else None
                        if lt is not None and lt.kind is not Kind.P:
                            self.report(ctx, [SpmdError(
                                "spmd-partial-affine",
                                f'the bias of spmd.linear(..., out_partial_axes="{a}") is {lt} on '
                                f'"{a}", so it would be summed once per rank; add an R bias after '
                                f"the reduction, or pass a bias that is P on \"{a}\"",
                            )])
                            return self.typed_result(ctx.default_return_type, t)
                    # the bias enters after the local op: drop it before the reinterpret check
                    if bt:
                        ops_nb = [o for o in ops if o.text != expr_text(b_expr)]
                        t = propagate(spec_name, ops_nb).type
                for a in axes:
                    lt = t.get(a)
                    if lt is None:
                        t = t.replace(a, LocalType(Kind.P))
                        continue
                    src = lt.forget_dim() if lt.kind is Kind.V else lt
                    r = coll.check_collective("reinterpret", t, (a,), src, LocalType(Kind.P),
                                              x_text=f"spmd.{op}(...)")
                    if r.errors:
                        self.report(ctx, [SpmdError(
                            e.code, f'out_partial_axes="{a}": the local result is {lt} on "{a}"; '
                            + e.message) for e in r.errors])
                    t = r.type
            return self.typed_result(ctx.default_return_type, t)

        return hook

    def factory_hook(self, ctx: AnyCtx) -> Type:
        return ctx.default_return_type


def is_tensor_method_class(cls: str) -> bool:
    return cls in ("spmd.Tensor", "torch._tensor.Tensor", "torch._C.TensorBase",
                   "torch.nn.parameter.Parameter")


def method_op_name(method: str) -> tuple[str, bool] | None:
    if method in DUNDERS:
        return DUNDERS[method]
    if method.startswith("_") or method in NOT_OPS or method in FACTORIES:
        return None
    return method, False


def unused(*_: object) -> AnyType:
    return AnyType(TypeOfAny.special_form)
