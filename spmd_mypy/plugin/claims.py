"""``spmd.reinterpret(y, ax, src=V, dst=P)``: the expression ``y`` the claim is made of.

The claim says each rank's ``y`` is a partial sum.  When ``y`` is (or is a name bound once
to) an affine op, ``F.linear/conv*d(x, w, b)``, ``torch.addmm(b, h, w)``, ``h @ w + b``,
whose added term is R or I on ``ax`` beside a Varying one, that term is the same on every
rank and the reduction after the claim counts it once per rank: the engine's
``claimed_partial_error`` decides (which slots are affine, the message); this module only
reads the syntax.  The check mode sees the tensor, not the expression: it cannot do this.
"""

from __future__ import annotations

from typing import Callable, Sequence

from mypy.nodes import ARG_NAMED, ARG_POS, CallExpr, Expression, MemberExpr, MypyFile, NameExpr, OpExpr, RefExpr

from ..engine.errors import SpmdError
from ..engine.ops import AFFINE_TERMS, Operand, claimed_partial_error
from ..engine.types import LocalType, SpmdType
from . import global_calls
from .texts import code_text, expr_text

TypeOf = Callable[[Expression], "SpmdType | None"]
CanGrad = Callable[[Expression], bool]

_OPERATORS = {"+": "add", "-": "sub"}
# the product an addmm-like op adds its input to, as code (None: not offered)
_PRODUCT = {"addmm": "{} @ {}", "baddbmm": "torch.bmm({}, {})", "addmv": "torch.mv({}, {})"}


def _operand(e: Expression, type_of: TypeOf, can_grad: CanGrad) -> Operand | None:
    t = type_of(e)
    return Operand(t, expr_text(e), can_grad(e)) if t is not None else None


def _affine_call(e: CallExpr, type_of: TypeOf, can_grad: CanGrad) -> tuple[str, list[Operand], str | None] | None:
    callee = e.callee
    if not isinstance(callee, (MemberExpr, NameExpr)) or callee.name not in AFFINE_TERMS:
        return None
    op = callee.name
    pos, formal = AFFINE_TERMS[op]
    args: list[Expression] = []
    named: dict[str, Expression] = {}
    for a, kind, name in zip(e.args, e.arg_kinds, e.arg_names):
        if kind == ARG_POS:
            args.append(a)
        elif kind == ARG_NAMED and name is not None:
            named[name] = a
        else:
            return None  # *args, **kwargs: not read
    if "out_partial_axes" in named:
        return None  # spmd.linear(h, w, b, out_partial_axes=...): its own rule (partial_op)
    method = (isinstance(callee, MemberExpr) and not (
        isinstance(callee.expr, RefExpr) and isinstance(callee.expr.node, MypyFile)))
    if method:
        assert isinstance(callee, MemberExpr)
        args.insert(0, callee.expr)  # b.addmm(h, w): the receiver is the input
    if pos < len(args):
        term = args[pos]
        rest_args = args[:pos] + args[pos + 1:]
    elif formal in named:
        term = named[formal]
        rest_args = args
    else:
        return None
    t = _operand(term, type_of, can_grad)
    if t is None:
        return None
    others = [o for a in [*rest_args, *(v for k, v in named.items() if k != formal)]
              if (o := _operand(a, type_of, can_grad)) is not None and o.type is not None]
    ops = [*others]
    ops.insert(min(pos, len(ops)), t)
    rest: str | None = None
    if op in _PRODUCT and len(rest_args) >= 2 and not named:
        rest = _PRODUCT[op].format(expr_text(rest_args[0]), expr_text(rest_args[1]))
    elif op not in _PRODUCT and not method:
        kept = [expr_text(a) for a in rest_args] + [f"{k}={expr_text(v)}" for k, v in named.items()
                                                     if k != formal]
        rest = f"{expr_text(callee)}({', '.join(kept)})"
    return op, ops, rest


def _may_be_affine(e: Expression | None) -> bool:
    """What the test below reads as an affine op: an ``+``/``-`` or a call of an
    :data:`AFFINE_TERMS` name (the syntax :func:`_affine_call` requires first)."""
    if isinstance(e, OpExpr):
        return e.op in _OPERATORS
    return (isinstance(e, CallExpr) and isinstance(e.callee, (MemberExpr, NameExpr))
            and e.callee.name in AFFINE_TERMS)


def claimed_partial_errors(x_expr: Expression | None, axes: Sequence[str], type_of: TypeOf,
                           can_grad: CanGrad, api: object,
                           taken_by: tuple[str, str] | None = None,
                           taken_dst: LocalType | None = None,
                           taken_in: CallExpr | None = None) -> list[SpmdError]:
    """The spmd-partial-affine errors of ``reinterpret(x_expr, axes, src=V, dst=P)``, or
    (``taken_by``: the call's text around ``x_expr``, :func:`call_around`) of a typed
    reduction with src=P of ``x_expr``, which takes it as the same claim.  ``taken_in``:
    that reduction's call, its text read (``taken_by``) only where ``x_expr`` is affine
    (none for a call with ``*args`` or ``**kwargs``)."""
    if x_expr is None:
        return []
    e: Expression = x_expr
    if isinstance(e, NameExpr):
        func = global_calls.current_function(api)
        if func is None or not _may_be_affine(global_calls.plain_value(func, e.name)):
            # not bound to an affine op in its last plain assignment (a parameter, most
            # names): none read below, without value_bound_once's walk of the function
            return []
        bound = global_calls.value_bound_once(func, e.name)
        if bound is None:
            return []
        e = bound
    found: tuple[str, list[Operand], str | None] | None = None
    if isinstance(e, OpExpr) and e.op in _OPERATORS:
        left, right = _operand(e.left, type_of, can_grad), _operand(e.right, type_of, can_grad)
        if left is not None and right is not None:
            found = (_OPERATORS[e.op], [left, right], None)
    elif isinstance(e, CallExpr):
        found = _affine_call(e, type_of, can_grad)
    if found is None:
        return []
    op, operands, rest = found
    if taken_in is not None:
        taken_by = call_around(taken_in, x_expr)
        if taken_by is None:
            return []
    arg = expr_text(x_expr)
    errors: list[SpmdError] = []
    for a in axes:
        err = claimed_partial_error(op, operands, a, arg, rest, taken_by, taken_dst)
        if err is not None:
            errors.append(err)
    return errors


def call_around(call: CallExpr, x_expr: Expression) -> tuple[str, str] | None:
    """``call``'s text before and after its argument ``x_expr`` (``spmd.all_reduce(``,
    ``, "tp", src=P, dst=R)``); None for a call with ``*args`` or ``**kwargs``."""
    parts: list[str] = []
    mark = "\0"
    for a, kind, name in zip(call.args, call.arg_kinds, call.arg_names):
        text = mark if a is x_expr else code_text(a)
        if kind == ARG_NAMED and name is not None:
            parts.append(f"{name}={text}")
        elif kind == ARG_POS:
            parts.append(text)
        else:
            return None
    before, found, after = f"{code_text(call.callee)}({', '.join(parts)})".partition(mark)
    return (before, after) if found else None
