"""Where the code around a contraction declares its result a partial sum.

A matmul, linear or einsum that sums over a dim sharded on an axis in every operand that
varies there makes each rank's part of a sum: the engine's rule
(:func:`spmd_mypy.engine.contractions.partial_sum`) reports it unless the call says so
(``out_partial_axes``, in the engine) or the result goes straight to
``spmd.reinterpret(..., axis, src=V, dst=P)``, Megatron's row-parallel idiom::

    out = spmd.reinterpret(F.linear(h, w2), "tp", src=V, dst=P)     # the argument itself
    part = F.linear(h, w2)                                          # a local bound once,
    out = spmd.reinterpret(part, "tp", src=V, dst=P)                # read only there

Asked only when the rule fires (rarely), so the enclosing function's statements are read
lazily, once per function: the reinterpret(V->P) calls' first arguments, and the names read
in it (a local read anywhere else is not exempt: its other reads see a V that is a partial
sum).  The check mode marks the result a pending partial sum instead (runtime
``_checking``), which these forms also consume.
"""

from __future__ import annotations

from dataclasses import replace

from mypy.plugin import FunctionContext, MethodContext
from mypy.nodes import (
    AssertStmt,
    AssignmentExpr,
    AwaitExpr,
    DictionaryComprehension,
    GeneratorExpr,
    ListComprehension,
    SetComprehension,
    YieldExpr,
    YieldFromExpr,
    AssignmentStmt,
    CallExpr,
    ComparisonExpr,
    ConditionalExpr,
    DictExpr,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    IfStmt,
    IndexExpr,
    LambdaExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    OperatorAssignmentStmt,
    OpExpr,
    ReturnStmt,
    SetExpr,
    SliceExpr,
    StarExpr,
    Statement,
    StrExpr,
    TupleExpr,
    UnaryExpr,
    FloatExpr,
    IntExpr,
    Var,
    WhileStmt,
    WithStmt,
)
from mypy.types import Instance, get_proper_type

from ..engine.contractions import Contraction, partial_sum
from ..engine.ops import SHARD_SUMMING, Operand, Reduction, reduced_partial_sum
from .global_calls import current_function
from .statements import Assignments, assignments_by_name, nested_statements

# per function (or module), by its id: (the node, the exempt expressions by id -> the axes of
# their reinterpret, "*" when the axis is not a literal)
_MEMO: dict[int, tuple[object, tuple[dict[int, tuple[str, ...]], dict[int, tuple[str, ...]]]]] = {}
_MEMO_MAX = 2000
_OPAQUE = "<an expression the scan does not enter>"
_OPAQUE_KINDS = (ListComprehension, SetComprehension, GeneratorExpr, DictionaryComprehension,
                 YieldExpr, YieldFromExpr, AwaitExpr, AssignmentExpr)


def reinterpreted_axes(func: FuncDef | None, tree: MypyFile | None,
                       node: Expression, summed: bool = False) -> tuple[str, ...]:
    """The axes on which ``node`` (a contraction's call or operator expression) is passed
    straight to ``spmd.reinterpret(..., src=V, dst=P)``, itself or through a local bound to
    it once and read only there; () when it is not.  ``summed`` (a sum's call): also
    through + and -, and a number's * or / (a sum of partial sums is one)."""
    owner: object = func if func is not None else tree
    if owner is None:
        return ()
    entry = _MEMO.get(id(owner))
    if entry is None or entry[0] is not owner:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        entry = (owner, _scan(func, tree))
        _MEMO[id(owner)] = entry
    return entry[1][1 if summed else 0].get(id(node), ())


def _scan(func: FuncDef | None, tree: MypyFile | None
          ) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[str, ...]]]:
    if func is not None:
        stmts = nested_statements(func.body.body)
    elif tree is not None:
        stmts = [st for st in nested_statements(tree.defs) if not isinstance(st, FuncDef)]
    else:
        return {}, {}
    calls: list[tuple[Expression, tuple[str, ...]]] = []
    reads: dict[object, int] = {}
    for st in stmts:
        for e in _statement_exprs(st):
            _walk(e, calls, reads)
    marks: dict[int, tuple[str, ...]] = {}
    summed: dict[int, tuple[str, ...]] = {}
    opaque = _OPAQUE in reads
    cache: list[Assignments] = []  # assignments_by_name, read once if needed
    for arg, axes in calls:
        marks[id(arg)] = axes
        value = _bound_once(arg, reads, opaque, func, cache)
        if value is not None:
            marks[id(value)] = axes
        # a sum's result may also reach it through + and - (and a number's * or /): a sum
        # of partial sums is one (sam: reinterpret((g1 * g1).sum() + (g2 * g2).sum(), ...))
        todo = [arg]
        seen = 0
        while todo and seen < 64:
            e = todo.pop()
            seen += 1
            summed[id(e)] = axes
            if isinstance(e, OpExpr) and e.op in ("+", "-"):
                todo += [e.left, e.right]
            elif isinstance(e, OpExpr) and e.op in ("*", "/") and _number(e.right):
                todo.append(e.left)
            elif isinstance(e, OpExpr) and e.op == "*" and _number(e.left):
                todo.append(e.right)
            elif isinstance(e, UnaryExpr) and e.op in ("-", "+"):
                todo.append(e.expr)
            elif (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)
                  and e.callee.name in _KEEPS_SUMS):
                todo.append(e.callee.expr)  # lsum.detach(), s.float(), s.unsqueeze(-1)
            else:
                value = _bound_once(e, reads, opaque, func, cache)
                if value is not None:
                    todo.append(value)
    return marks, summed


def _bound_once(e: Expression, reads: dict[object, int], opaque: bool, func: FuncDef | None,
                cache: list[Assignments]) -> Expression | None:
    """The value of local ``e`` bound once (at the top of the function) and read only once,
    else None."""
    if opaque or not isinstance(e, NameExpr) or e.node is None or reads.get(e.node) != 1:
        return None
    if not cache:
        cache.append(assignments_by_name(func) if func is not None else {})
    bound = cache[0].get(e.node)  # type: ignore[call-overload]
    if bound is not None and len(bound) == 1 and bound[0][2] == -1:
        return bound[0][1]  # type: ignore[no-any-return]
    return None


# methods whose result is a sum of the parts' results (the pending sum stays one)
_KEEPS_SUMS = frozenset("detach float double half bfloat16 clone contiguous to unsqueeze "
                        "squeeze reshape view flatten".split())


def _number(e: Expression) -> bool:
    """A Python number: a literal, or a name typed int or float (``/ nglobal``)."""
    if isinstance(e, (IntExpr, FloatExpr)):
        return True
    if isinstance(e, UnaryExpr) and e.op == "-":
        return _number(e.expr)
    if isinstance(e, OpExpr) and e.op in ("+", "-", "*", "/", "//", "**"):
        return _number(e.left) and _number(e.right)
    if isinstance(e, CallExpr):  # x.numel(), x.size(0), len(xs), math.sqrt(d), float(n)
        c = e.callee
        if isinstance(c, MemberExpr) and c.name in ("numel", "size", "dim", "nelement"):
            return True
        return isinstance(c, (NameExpr, MemberExpr)) and (
            c.fullname in ("builtins.len", "builtins.float", "builtins.int")
            or (c.fullname or "").startswith("math."))
    if isinstance(e, NameExpr) and isinstance(e.node, Var) and e.node.type is not None:
        t = get_proper_type(e.node.type)
        return isinstance(t, Instance) and t.type.fullname in ("builtins.int", "builtins.float")
    return False


def _statement_exprs(st: Statement) -> list[Expression]:
    """The expressions a statement reads itself (not those of its nested blocks)."""
    if isinstance(st, AssignmentStmt):
        return [st.rvalue, *(lv for lv in st.lvalues if not isinstance(lv, NameExpr))]
    if isinstance(st, (ExpressionStmt, ReturnStmt)):
        return [st.expr] if st.expr is not None else []
    if isinstance(st, OperatorAssignmentStmt):
        return [st.lvalue, st.rvalue]
    if isinstance(st, IfStmt):
        return list(st.expr)
    if isinstance(st, WhileStmt):
        return [st.expr]
    if isinstance(st, ForStmt):
        return [st.expr]
    if isinstance(st, AssertStmt):
        return [st.expr] + ([st.msg] if st.msg is not None else [])
    if isinstance(st, WithStmt):
        return list(st.expr)
    return []


def _walk(e: Expression | None, calls: list[tuple[Expression, tuple[str, ...]]],
          reads: dict[object, int]) -> None:
    if e is None:
        return
    if isinstance(e, NameExpr):
        if e.node is not None:
            reads[e.node] = reads.get(e.node, 0) + 1
        return
    if isinstance(e, CallExpr):
        axes = _reinterpret_to_partial(e)
        if axes is not None:
            calls.append((e.args[0], axes))
        _walk(e.callee, calls, reads)
        for a in e.args:
            _walk(a, calls, reads)
    elif isinstance(e, MemberExpr):
        _walk(e.expr, calls, reads)
    elif isinstance(e, OpExpr):
        _walk(e.left, calls, reads)
        _walk(e.right, calls, reads)
    elif isinstance(e, IndexExpr):
        _walk(e.base, calls, reads)
        _walk(e.index, calls, reads)
    elif isinstance(e, (TupleExpr, ListExpr, SetExpr)):
        for item in e.items:
            _walk(item, calls, reads)
    elif isinstance(e, (UnaryExpr, StarExpr)):
        _walk(e.expr, calls, reads)
    elif isinstance(e, ComparisonExpr):
        for o in e.operands:
            _walk(o, calls, reads)
    elif isinstance(e, ConditionalExpr):
        _walk(e.cond, calls, reads)
        _walk(e.if_expr, calls, reads)
        _walk(e.else_expr, calls, reads)
    elif isinstance(e, DictExpr):
        for k, v in e.items:
            _walk(k, calls, reads)
            _walk(v, calls, reads)
    elif isinstance(e, SliceExpr):
        _walk(e.begin_index, calls, reads)
        _walk(e.end_index, calls, reads)
        _walk(e.stride, calls, reads)
    elif isinstance(e, LambdaExpr):
        _walk(e.expr(), calls, reads)
    elif isinstance(e, _OPAQUE_KINDS):
        # a comprehension, a yield, an await, a walrus: its reads are not counted, so a
        # local read there would look read once: no exemption through a local in this
        # function (the direct argument still counts)
        reads[_OPAQUE] = 1


def _reinterpret_to_partial(e: CallExpr) -> tuple[str, ...] | None:
    """For ``spmd.reinterpret(x, axis, src=V, dst=P)``: the axes (("*",) when not literal
    strings); None for any other call."""
    callee = e.callee
    if not isinstance(callee, (NameExpr, MemberExpr)) or callee.name != "reinterpret" or not e.args:
        return None
    if callee.fullname and not callee.fullname.startswith("spmd"):
        return None
    src = dst = None
    axis: Expression | None = None
    for k, (a, name) in enumerate(zip(e.args, e.arg_names)):
        if name == "src":
            src = a
        elif name == "dst":
            dst = a
        elif name == "axis" or (name is None and k == 1):
            axis = a
    if not (_marker(src, "V") and _marker(dst, "P")):
        return None
    if isinstance(axis, StrExpr):
        return (axis.value,)
    if isinstance(axis, (TupleExpr, ListExpr)) and axis.items and all(
            isinstance(i, StrExpr) for i in axis.items):
        return tuple(i.value for i in axis.items if isinstance(i, StrExpr))
    return ("*",)


def _marker(e: Expression | None, name: str) -> bool:
    return isinstance(e, (NameExpr, MemberExpr)) and e.name == name


def declared_partial(ctx: FunctionContext | MethodContext, move: Contraction, ops: list[Operand]) -> Contraction:
    """``move`` with the axes on which the code around the call declares its result a
    partial sum (:mod:`.declared_partials`): looked up only when the engine's rule would
    report an implicit Partial on some axis (:func:`~spmd_mypy.engine.contractions.partial_sum`)."""
    tensors = [o for o in ops if o.type is not None]
    axes: dict[str, None] = {}
    for o in tensors:
        for a, _ in o.type.axes:  # type: ignore[union-attr]
            axes[a] = None
    for a in axes:
        if partial_sum(move, [(o.type.get(a), o.shape) for o in tensors]):  # type: ignore[union-attr]
            found = reinterpreted_axes(current_function(ctx.api),
                                       getattr(ctx.api, "tree", None), ctx.context)  # type: ignore[arg-type]
            return replace(move, partial_axes=found) if found else move
    return move



def declared_reduction(ctx: FunctionContext | MethodContext, op: str, reduction: Reduction | None,
                       ops: list[Operand]) -> Reduction | None:
    """``reduction`` with the axes on which the code around a sum's call declares its result
    a partial sum (passed to ``spmd.reinterpret(..., src=V, dst=P)``, alone or added to
    others): looked up only when the engine's rule would report one
    (:func:`~spmd_mypy.engine.ops.reduced_partial_sum`)."""
    if reduction is None or op not in SHARD_SUMMING or not ops or ops[0].type is None:
        return reduction
    x = ops[0]
    for a, lt in x.type.axes:  # type: ignore[union-attr]
        if reduced_partial_sum(op, lt, a, reduction, x.shape):
            found = reinterpreted_axes(current_function(ctx.api), getattr(ctx.api, "tree", None),
                                       ctx.context, summed=True)  # type: ignore[arg-type]
            return replace(reduction, partial_axes=found) if found else reduction
    return reduction
