"""Calls of ``torch.library.custom_op`` operators, typed by the op rule as the check mode types them.

``@torch.library.custom_op("mylib::bias_gelu", mutates_args=())`` turns a function into a
``CustomOpDef``, whose ``__call__(*args, **kwargs)`` torch leaves unannotated: mypy types
``bias_gelu(x, b)`` as ``Any`` and a typed input's type was silently dropped.  The check mode
sees the call as one op named by the schema (``bias_gelu``) and types it by the engine's rule
(an op the classification does not know: the generic rule, as a non-linear op).  Here the
same: the call's arguments are regrouped by the decorated function's own parameters (so
their names play their roles: ``dim`` is no operand), the op's name is the registered one,
and the result is the function's declared return type with its tensors typed.

Gradual: a call without a typed operand keeps mypy's ``Any``.  Calls through
``torch.ops.mylib.bias_gelu(...)`` stay ``Any`` (torch's ``__getattr__`` namespaces).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mypy.nodes import ARG_STAR, ARG_STAR2, CallExpr, Decorator, RefExpr, StrExpr
from mypy.plugin import MethodContext
from mypy.types import CallableType, Type, get_proper_type

from .partials import regroup_by_formals

if TYPE_CHECKING:
    from .calls import CallTyper

CUSTOM_OP_CALL = "torch._library.custom_ops.CustomOpDef.__call__"
_CUSTOM_OP_DECORATORS = ("torch._library.custom_ops.custom_op", "torch.library.custom_op")


def custom_op_definition(call: object) -> tuple[CallableType, str] | None:
    """(the decorated function's signature, the op's registered name) of a call of a
    ``@custom_op`` function referred to by name; None for anything else."""
    if not isinstance(call, CallExpr) or not isinstance(call.callee, RefExpr):
        return None
    node = call.callee.node
    if not isinstance(node, Decorator):
        return None
    sig = get_proper_type(node.func.type)
    if not isinstance(sig, CallableType) or sig.variables:
        return None
    for d in node.decorators:
        if (isinstance(d, CallExpr) and isinstance(d.callee, RefExpr)
                and d.callee.fullname in _CUSTOM_OP_DECORATORS):
            name = node.func.name
            if d.args and isinstance(d.args[0], StrExpr):
                name = d.args[0].value.split("::")[-1].split(".")[0] or name
            return sig, name
    return None


def custom_op_hook(typer: CallTyper) -> Callable[[MethodContext], Type]:
    op_hooks: dict[str, Callable] = {}  # the op rule's hook, by op name

    def hook(ctx: MethodContext) -> Type:
        found = custom_op_definition(ctx.context)
        if found is None:
            return ctx.default_return_type
        sig, name = found
        if any(k in (ARG_STAR, ARG_STAR2) for kinds in ctx.arg_kinds for k in kinds):
            return ctx.default_return_type  # ``*xs`` / ``**kw``: operands not in sight
        args, arg_types, arg_kinds, arg_names = regroup_by_formals(ctx, sig)
        regrouped = ctx._replace(args=args, arg_types=arg_types, arg_kinds=arg_kinds,
                                 arg_names=arg_names, callee_arg_names=list(sig.arg_names),
                                 default_return_type=sig.ret_type)
        op_hook = op_hooks.get(name)
        if op_hook is None:
            op_hook = op_hooks[name] = typer.op_hook(name, method=False)
        typed = op_hook(regrouped)
        if typed is sig.ret_type:  # no typed operand: mypy's Any, as before (gradual)
            return ctx.default_return_type
        return typed

    return hook
