"""Where the code around a contraction declares its result a partial sum.

A matmul, linear or einsum that sums over a dim sharded on an axis in every operand that
varies there makes each rank's part of a sum: the engine's rule
(:func:`spmd_mypy.engine.contractions.partial_sum`) reports it unless the call says so
(``out_partial_axes``, in the engine) or the result goes straight to
``spmd.reinterpret(..., axis, src=V, dst=P)``, Megatron's row-parallel idiom::

    out = spmd.reinterpret(F.linear(h, w2), "tp", src=V, dst=P)     # the argument itself
    part = F.linear(h, w2)                                          # a local bound once,
    out = spmd.reinterpret(part, "tp", src=V, dst=P)                # read only there

    def part(h, w) -> Tensor[V["tp"]]:                              # returned, declared V:
        return F.linear(h, w2)                                      # its word to the callers

A typed reduction with src=P of the product (``spmd.all_reduce(F.linear(h, w2), "tp", src=P,
dst=R)``, ``spmd.reduce_scatter``, Megatron's ``reduce_from_tensor_model_parallel_region``;
engine ``collectives.takes_pending``) is a consumer too, whose value is then typed P on its
axes (``Contraction.pending``, ``Reduction.pending``), as the collective's src says.

Asked only when the rule fires (rarely), so the enclosing function's statements are read
lazily, once per function: the consumers (the reinterpret(V->P) calls' first arguments, the
returned values of a function declared V) and every read of each local, nested functions'
included.  A local bound once is exempt when every read of it is a consumer, however many
(one in each branch of an if, one in a loop: each declares the same partial sum), with the
axes all of them declare; a list or tuple display bound once, when every read is
``parts[k]`` in a consumer.  A local read anywhere else is not: that read sees a V that is a
partial sum.  The check mode marks the result a pending partial sum instead (runtime
``_checking``), which these forms also consume.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from mypy.plugin import FunctionContext, MethodContext
from mypy.types import CallableType
from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
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
    RefExpr,
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

from ..engine.collectives import pending_refusal, raw_collective, raw_reduce_op, takes_pending
from ..engine.megatron import TP_AXIS, TYPED_MAPPINGS
from ..engine.contractions import Contraction, may_sum
from ..engine.ops import (PENDING_JOIN, PENDING_KEEP, SHARD_SUMMING, Operand, Reduction,
                          keeps_pending_dtype, pending_kind, reduced_partial_sum, scales_pending)
from ..engine.types import LocalType
from ..engine.types import Kind
from .global_calls import current_function, value_bound_once
from .mypy_types import TypeBuilder
from .verdicts import first_summed_axis
from .rank_index import group_axis
from .statements import (Assignments, assignments_by_name, functions_of, nested_statements,
                         statement_blocks)

# per function (or module), by its id: (the node, the exempt expressions by id -> the axes of
# their reinterpret, "*" when the axis is not a literal)
_MEMO: dict[int, tuple[object, tuple[dict[int, tuple[str, ...]], dict[int, tuple[str, ...]]]]] = {}
_MEMO_MAX = 2000
# set by a scan that met a tensor factor of a pending sum whose local had no type yet (bound
# after the statement the scan was asked at, :func:`_same_factor`): its result is not memoized,
# the next lookup (a later statement, the local bound by then) scans again
_FACTOR_UNKNOWN: list[bool] = [False]
# Reads of a local's shape, dtype or device only, not of its values (``part.shape``,
# ``part.size(-1)``, ``torch.zeros_like(part)``, ``part.new_zeros(n)``): no read of the
# partial sum, so a local read there and by consumers elsewhere is still exempt.
_META_ATTRS: Final = frozenset("""size dim ndim numel nelement element_size shape dtype device
is_contiguous is_floating_point is_complex stride get_device nbytes itemsize
new_zeros new_ones new_empty new_full""".split())
_SHAPE_LIKE: Final = frozenset("""zeros_like ones_like empty_like full_like rand_like randn_like
randint_like""".split())
# Calls that show a local's type, not its values (``spmd.reveal(part)`` prints what the
# checker holds: adding one must not change it)
_REVEALS: Final = frozenset(("spmd.reveal", "spmd.typeof"))
_OPAQUE = "<an expression the scan does not enter>"
_OPAQUE_KINDS = (ListComprehension, SetComprehension, GeneratorExpr, DictionaryComprehension,
                 YieldExpr, YieldFromExpr, AwaitExpr, AssignmentExpr)


def reinterpreted_axes(func: FuncDef | None, tree: MypyFile | None, node: Expression,
                       types: TypeBuilder | None = None, summed: bool = False) -> tuple[str, ...]:
    """The axes on which ``node`` (a contraction's call or operator expression) is passed
    straight to ``spmd.reinterpret(..., src=V, dst=P)`` or returned from a function declared
    V there, itself or through a local bound to it once and read only there; () when it is
    not.  ``summed`` (a sum's call): also through + and -, a number's * or / and
    value-keeping methods (a sum of partial sums is one)."""
    owner: object = func if func is not None else tree
    if owner is None:
        return ()
    entry = _MEMO.get(id(owner))
    if entry is None or entry[0] is not owner:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _FACTOR_UNKNOWN[0] = False
        entry = (owner, _scan(func, tree, types))
        if not _FACTOR_UNKNOWN[0]:
            _MEMO[id(owner)] = entry
    return entry[1][1 if summed else 0].get(id(node), ())


def _declared_v_axes(func: FuncDef, types: TypeBuilder | None) -> tuple[str, ...]:
    """The axes on which ``func``'s declared return type is a plain V (no shard dim): its
    claim to its callers that each rank's result is a value of its own, which a partial
    sum is too (V describes it; the caller's reinterpret(V->P) then takes it on trust)."""
    sig = func.type
    if types is None or not isinstance(sig, CallableType) or func.is_generator:
        return ()
    declared = types.from_type(sig.ret_type)
    if not declared:
        return ()
    return tuple(a for a, lt in declared.axes
                 if lt.kind is Kind.V and lt.dim is None and lt.by_rank is None)


def _common(found: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The axes every consumer of a value declares ("*": any axis); with ``_MIXED`` when
    some of them average (``_AVG``) and some sum: no pending sum or mean is taken by both."""
    avg = [_AVG in f for f in found]
    mixed = (_MIXED,) if any(avg) and not all(avg) else ()
    named = [f for f in found if "*" not in f]
    if not named:
        return ("*",) + mixed
    return tuple(a for a in named[0] if all(a in f for f in named[1:])) + mixed


def _scan(func: FuncDef | None, tree: MypyFile | None, types: TypeBuilder | None = None
          ) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[str, ...]]]:
    if func is not None:
        stmts = nested_statements(func.body.body)
    elif tree is not None:
        stmts = [st for st in nested_statements(tree.defs) if not isinstance(st, FuncDef)]
    else:
        return {}, {}
    # the consumers of a partial sum: the reinterpret(V->P) calls' first arguments, and the
    # values returned from a function declared V (with the axes each declares)
    calls: list[tuple[Expression, tuple[str, ...]]] = []
    returns: list[tuple[Expression, tuple[str, ...]]] = []
    reads: dict[object, int] = {}
    returned: tuple[str, ...] | None = None
    for st in stmts:
        for e in _statement_exprs(st):
            _walk(e, calls, reads)
        if isinstance(st, ReturnStmt) and st.expr is not None and func is not None:
            if returned is None:
                returned = _declared_v_axes(func, types)
            if returned:
                returns.append((st.expr, returned))
        if func is not None:
            for inner in functions_of(st):  # a closure's reads of the function's locals
                _inner_reads(inner, reads)
    if func is not None:
        calls += _raw_reduced(func, stmts)
    # a sum's result is declared by the reinterprets only: a sum over a shard dim returned
    # from a function declared V stays an error (the declared V of a helper's contraction
    # is the row-parallel idiom; a sum's is most often a norm's square or a loss of its own)
    summed = _summed_marks(calls, reads, func, types)
    calls += returns
    marks: dict[int, tuple[str, ...]] = {}
    # per local: the axes of each consumer that reads it whole (``part``), and of each that
    # reads an item of it (``parts[0]``, for a list or tuple display bound to it)
    whole: dict[object, list[tuple[str, ...]]] = {}
    items: dict[object, list[tuple[str, ...]]] = {}
    # a local a raw reduction sums in place (or reduce-scatters): marked wherever else it
    # is read, as each read before the call, or on a path without it, sees the partial sum
    # (P: its own rules apply there) and each read after it sees what the call wrote
    raw: dict[object, list[tuple[str, ...]]] = {}
    for arg, axes in calls:
        found_raw = _raw_reduction(arg) if axes == (_RAW,) and isinstance(arg, CallExpr) else None
        if found_raw is not None:
            value, group = found_raw
            axes = _raw_axes(func, group)
            if isinstance(value, NameExpr) and value.node is not None:
                raw.setdefault(value.node, []).append(axes)
            else:
                marks[id(value)] = axes + (_PENDING,)  # all_reduce(a @ b): the argument itself
            continue
        marks[id(arg)] = axes
        if isinstance(arg, NameExpr) and arg.node is not None:
            whole.setdefault(arg.node, []).append(axes)
        elif isinstance(arg, IndexExpr) and isinstance(arg.base, NameExpr) and arg.base.node is not None:
            items.setdefault(arg.base.node, []).append(axes)
    assigned = assignments_by_name(func) if func is not None else {}
    for name, found in raw.items():
        bound = assigned.get(name)  # type: ignore[call-overload]
        if bound is not None and len(bound) == 1 and bound[0][2] == -1:
            named = [f for f in found if _ANY_PARTIAL not in f]
            axes = (tuple(a for a in named[0] if all(a in f for f in named[1:])) if named
                    else (_ANY_PARTIAL,))
            if axes:
                marks[id(bound[0][1])] = axes + (_PENDING,)
    if _OPAQUE in reads or not (whole or items):
        return marks, summed
    # a local bound once and read only by consumers (on every path: one in each branch of an
    # if, or in a loop, each reads the same partial sum and declares it): its value is
    # declared where it is bound; the axes every consumer declares
    for by, kind in ((whole, False), (items, True)):
        for name, found in by.items():
            if reads.get(name) != len(found):
                continue
            bound = assigned.get(name)  # type: ignore[call-overload]
            if bound is None or len(bound) != 1 or bound[0][2] != -1:
                continue
            axes = _common(found)
            if not axes:
                continue
            value = bound[0][1]
            if not kind:
                marks[id(value)] = axes
            elif isinstance(value, (ListExpr, TupleExpr)):
                for item in value.items:
                    marks[id(item)] = axes
    return marks, summed


def _raw_reduced(func: FuncDef, stmts: list[Statement]) -> list[tuple[Expression, tuple[str, ...]]]:
    """The values reduced in place by a raw sum all-reduce right after their binding
    (Megatron's ``se = ez.sum(-1)`` then ``dist.all_reduce(se)``): the local bound once, the
    next statement of its block ``torch.distributed.all_reduce(se)`` (op SUM, torch's
    default): the collective sums the ranks' parts before any read of the name (the check
    mode: a raw sum all-reduce of a pending partial sum consumes it).  Each value with the
    axes "*" (the group is not read).  A raw collective outside a custom Function is still
    reported (spmd-raw-collective)."""
    found: list[tuple[Expression, tuple[str, ...]]] = []
    blocks = [func.body.body] + [b for st in stmts for b in statement_blocks(st)]
    assigned: Assignments | None = None
    for block in blocks:
        for st, nxt in zip(block, block[1:]):
            if not (isinstance(st, AssignmentStmt) and len(st.lvalues) == 1
                    and isinstance(st.lvalues[0], NameExpr) and st.lvalues[0].node is not None
                    and isinstance(nxt, ExpressionStmt) and isinstance(nxt.expr, CallExpr)):
                continue
            call = nxt.expr
            callee = call.callee
            if not (isinstance(callee, RefExpr)
                    and raw_collective(callee.fullname) == ("torch.distributed", "all_reduce")
                    and call.args and call.arg_kinds[0] == ARG_POS
                    and isinstance(call.args[0], NameExpr)
                    and call.args[0].node is st.lvalues[0].node and _sum_op(call)):
                continue
            if assigned is None:
                assigned = assignments_by_name(func)
            bound = assigned.get(st.lvalues[0].node)  # type: ignore[call-overload]
            if bound is None or len(bound) != 1 or bound[0][2] != -1:
                continue
            found.append((st.rvalue, ("*",)))
    return found


def _sum_op(call: CallExpr) -> bool:
    """A raw all_reduce's op is SUM: not passed (torch's default) or ``ReduceOp.SUM``."""
    for i, (kind, name, arg) in enumerate(zip(call.arg_kinds, call.arg_names, call.args)):
        if name == "op" or (kind == ARG_POS and i == 1):
            return isinstance(arg, MemberExpr) and arg.name == "SUM"
    return True


def _summed_marks(calls: list[tuple[Expression, tuple[str, ...]]], reads: dict[object, int],
                  func: FuncDef | None, types: TypeBuilder | None = None) -> dict[int, tuple[str, ...]]:
    """The expressions whose value reaches a consumer as a sum's would (a sum of partial sums
    is one): the consumer's argument, and from it through the steps that keep a pending sum
    one (engine ``PENDING_ADD``, ``PENDING_SCALE``, ``PENDING_JOIN``, ``PENDING_KEEP``, the
    list the check mode reads too): + and -, a number's * or / (or a tensor's, the same on
    every rank of the axes: :func:`_same_factor`), a stack or cat display's
    items, an index, a value-keeping method, and a local every read of which is such a step
    (the axes every such read declares: one in each branch of an if, or in a loop), through
    each of its bindings (``s = losses.sum()``, ``s = s * 0.5`` under an if, ``s /= n``), or
    a list or tuple display bound once every read of which is ``parts[k]`` in one."""
    banned: set[object] = set()
    for _ in range(8):  # a local found not to be followed whole: again without it
        summed, failed = _summed_pass(calls, reads, func, banned, types)
        if not failed:
            return summed
        banned |= failed
    return {id(e): axes for e, axes in calls}  # pragma: no cover


def _self_reads(key: object, exprs: list[Expression]) -> int:
    counted: dict[object, int] = {}
    for e in exprs:
        _walk(e, [], counted)
    return counted.get(key, 0)


def _summed_pass(calls: list[tuple[Expression, tuple[str, ...]]], reads: dict[object, int],
                 func: FuncDef | None, banned: set[object], types: TypeBuilder | None = None
                 ) -> tuple[dict[int, tuple[str, ...]], set[object]]:
    summed: dict[int, tuple[str, ...]] = {}
    opaque = _OPAQUE in reads
    assigned: Assignments | None = None  # assignments_by_name, read once if needed
    updates: dict[object, list[OperatorAssignmentStmt]] | None = None
    whole: dict[object, list[tuple[str, ...]]] = {}
    items: dict[object, list[tuple[str, ...]]] = {}
    followed: dict[object, int] = {}  # a local followed -> its reads from its own bindings
    todo: list[tuple[Expression, tuple[str, ...]]] = list(calls)
    steps = 0
    while todo and steps < 256:
        e, axes = todo.pop()
        steps += 1
        summed[id(e)] = axes
        if isinstance(e, OpExpr) and e.op in ("+", "-"):
            if not (_number(e.left) or _number(e.right)):  # a number: added once per rank
                todo += [(e.left, axes), (e.right, axes)]
        elif isinstance(e, OpExpr) and e.op in ("*", "/") and _number(e.right):
            todo.append((e.left, axes))
        elif isinstance(e, OpExpr) and e.op == "*" and _number(e.left):
            todo.append((e.right, axes))
        elif isinstance(e, OpExpr) and e.op in ("*", "/") and _same_factor(
                e.right, "__mul__" if e.op == "*" else "__truediv__", True, axes, types):
            todo.append((e.left, axes))  # s / n_tok, n_tok all-reduced: R on the axes
        elif isinstance(e, OpExpr) and e.op == "*" and _same_factor(e.left, "__mul__", False, axes, types):
            todo.append((e.right, axes))
        elif isinstance(e, UnaryExpr) and e.op in ("-", "+"):
            todo.append((e.expr, axes))
        elif (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)
              and e.callee.name in _KEEPS_SUMS and _keeps_dtype(e)):
            todo.append((e.callee.expr, axes))  # lsum.detach(), s.float(), s.unsqueeze(-1)
        elif (isinstance(e, CallExpr) and isinstance(e.callee, RefExpr)
              and e.callee.fullname.startswith("torch.")
              and e.callee.fullname.rsplit(".", 1)[-1] in PENDING_JOIN
              and e.args and isinstance(e.args[0], (ListExpr, TupleExpr))):
            todo += [(item, axes) for item in e.args[0].items]  # torch.stack([a.sum(), b.sum()])
        elif isinstance(e, IndexExpr) and not isinstance(e.base, NameExpr):
            todo.append((e.base, axes))  # torch.stack([...])[0]
        elif opaque or func is None:
            continue
        else:
            # a local: followed to its values once every read of it is a step here
            key: object = None
            found: list[tuple[str, ...]] = []
            if isinstance(e, NameExpr) and e.node is not None:
                key = e.node
                found = whole.setdefault(key, [])
            elif (isinstance(e, IndexExpr) and isinstance(e.base, NameExpr)
                  and e.base.node is not None):
                key = e.base.node
                found = items.setdefault(key, [])
            if key is None or key in banned:
                continue
            found.append(axes)
            if key in followed:
                continue  # a read in its own binding (s = s * 0.5): counted at the end
            if assigned is None:
                assigned = assignments_by_name(func)
                updates = {}
                for st in nested_statements(func.body.body):
                    if isinstance(st, OperatorAssignmentStmt) and isinstance(st.lvalue, NameExpr):
                        updates.setdefault(st.lvalue.node, []).append(st)
            bound = assigned.get(key)  # type: ignore[call-overload]
            if bound is None or any(b[2] != -1 for b in bound):
                continue
            ups = (updates or {}).get(key, [])
            if ups and (isinstance(e, IndexExpr) or any(
                    (u.op not in ("+", "-") or _number(u.rvalue))
                    and not (u.op in ("*", "/") and _number(u.rvalue))
                    and not (u.op in ("*", "/") and _same_factor(
                        u.rvalue, "__imul__" if u.op == "*" else "__itruediv__", True, axes, types))
                    for u in ups)):
                continue
            own = _self_reads(key, [b[1] for b in bound] + [u.rvalue for u in ups]) + len(ups)
            if reads.get(key) != len(found) + own:
                continue
            common = _common(found)
            if not common:
                continue
            followed[key] = own
            for b in bound:
                value: Expression = b[1]
                if isinstance(e, NameExpr):
                    todo.append((value, common))
                elif len(bound) == 1 and isinstance(value, (ListExpr, TupleExpr)):
                    todo += [(item, common) for item in value.items]
                elif len(bound) == 1:
                    todo.append((value, common))  # parts[0] of a stacked tensor
            for u in ups:
                found.append(common)  # s /= n, s += t: the update's read of s is a step
                if u.op in ("+", "-"):
                    todo.append((u.rvalue, common))
    # every followed local: each of its reads, those in its own bindings too, was a step
    failed = {k for k in followed
              if reads.get(k) != len(whole.get(k, [])) + len(items.get(k, []))}
    return summed, failed


def _keeps_dtype(e: CallExpr) -> bool:
    """``s.to(torch.float64)``: yes; ``s.to(torch.int64)``, ``s.view(torch.int32)``: no
    (engine ``keeps_pending_dtype``); any other call of a value-keeping method: yes."""
    callee = e.callee
    if not isinstance(callee, MemberExpr) or callee.name not in ("to", "view"):
        return True
    for arg in e.args:
        if isinstance(arg, MemberExpr) and isinstance(arg.expr, NameExpr) and arg.expr.name == "torch":
            if not keeps_pending_dtype(callee.name, arg.name):
                return False
    return True


# methods whose result is a sum of the parts' results (the pending sum stays one)
_KEEPS_SUMS = frozenset(m for m in PENDING_KEEP if not m.startswith("__"))


def _same_factor(e: Expression, op: str, pending_left: bool, axes: tuple[str, ...],
                 types: TypeBuilder | None) -> bool:
    """``e`` a tensor factor of a pending sum on ``axes`` that keeps it pending (engine
    ``scales_pending``: R or I there, or a plain ``torch.Tensor``, the gradual rule): a
    local or parameter (a local not inferred yet when the scan runs: no, and the scan is
    not kept; any other expression, a raw reduction's group not read: no, as before)."""
    if types is None or not isinstance(e, NameExpr) or not isinstance(e.node, Var):
        return False
    typ = e.node.type
    named = [a for a in axes if a not in (_PENDING, _AVG, _MIXED)]
    if not named or "*" in named or _ANY_PARTIAL in named:
        return False
    if typ is None:  # a local not inferred yet: asked again later (reinterpreted_axes)
        _FACTOR_UNKNOWN[0] = True
        return False
    t = types.from_type(typ)
    if t is None:
        return False  # not known to be a tensor (a number is _number's)
    return scales_pending(op, pending_left, [t.get(a) for a in named])


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


def _inner_reads(inner: FuncDef, reads: dict[object, int]) -> None:
    """Count the reads in a nested function's body (a closure reads the locals it names)."""
    ignored: list[tuple[Expression, tuple[str, ...]]] = []
    for st in nested_statements(inner.body.body):
        for e in _statement_exprs(st):
            _walk(e, ignored, reads)
        for deeper in functions_of(st):
            _inner_reads(deeper, reads)


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
        else:
            taken = _typed_reduction(e)
            if taken is not None:
                calls.append(taken)
        if _raw_reduction(e) is not None:
            calls.append((e, (_RAW,)))  # the call itself: _scan reads its group
        _walk(e.callee, calls, reads)
        callee = e.callee
        like = (isinstance(callee, RefExpr) and callee.fullname.startswith("torch.")
                and callee.fullname.rsplit(".", 1)[-1] in _SHAPE_LIKE)
        revealed = isinstance(callee, RefExpr) and callee.fullname in _REVEALS
        for at, arg in enumerate(e.args):
            if (like and at == 0 or revealed) and isinstance(arg, NameExpr):
                continue  # torch.zeros_like(part): its shape only; spmd.reveal(part): its type
            _walk(arg, calls, reads)
    elif isinstance(e, MemberExpr):
        if e.name in _META_ATTRS and isinstance(e.expr, NameExpr):
            return  # part.shape, part.size(-1): no read of its values
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


# The raw torch.distributed reductions of a pending partial sum in a custom Function's
# backward (Megatron's dgrad ``handle = torch.distributed.all_reduce(grad_input, group=tp_group,
# async_op=True)``): the one argument each sums over the group, by position and by name.
_RAW_REDUCTIONS: Final = {"all_reduce": (0, "tensor"), "reduce_scatter_tensor": (1, "input")}
_RAW = "<raw>"  # the marker of a raw reduction among a consumer's axes
_PENDING = "<pending>"  # among a mark's axes: a raw reduction reads it (typed P)
_AVG = "<avg>"  # among a mark's axes: the typed reduction reading it averages (op="avg")
_MIXED = "<mixed>"  # among a mark's axes: read by averaging and by summing consumers
_ANY_PARTIAL = "+"  # a raw reduction's group not read: P on every axis the product sums over


def _raw_reduction(e: CallExpr) -> tuple[Expression, Expression | None] | None:
    """For a raw ``torch.distributed.all_reduce(x, group=g)`` (in place) or
    ``reduce_scatter_tensor(out, x, group=g)`` summing (no ``op=`` or ``ReduceOp.SUM``):
    ``(x, g)`` (g None when not passed); None for any other call."""
    callee = e.callee
    if not isinstance(callee, RefExpr) or not callee.fullname.startswith("torch.distributed."):
        return None
    found = raw_collective(callee.fullname)
    if found is None or found[0] != "torch.distributed" or found[1] not in _RAW_REDUCTIONS:
        return None
    position, keyword = _RAW_REDUCTIONS[found[1]]
    value: Expression | None = None
    group: Expression | None = None
    at = 0
    for kind, name, arg in zip(e.arg_kinds, e.arg_names, e.args):
        if kind == ARG_POS:
            if at == position:
                value = arg
            at += 1
        elif name == keyword:
            value = arg
        elif name == "group":
            group = arg
        elif name == "op":
            op = arg.name if isinstance(arg, (NameExpr, MemberExpr)) else None
            if op is None or raw_reduce_op(op) != "sum":
                return None
        elif kind != ARG_NAMED:
            return None  # *args, **kwargs: not read
    if value is None:
        return None
    return value, group


def _raw_axes(func: FuncDef | None, group: Expression | None) -> tuple[str, ...]:
    """The axes a raw reduction's group is (rank_index ``group_axis``: ``mesh.get_group("tp")``,
    a name bound once to one); (_ANY_PARTIAL,) for a group it cannot read (``ctx.tp_group``,
    torch's default): every axis the product is partial on, where it is then P (the
    check mode's pending sum, which that call resolves)."""
    if isinstance(group, NameExpr) and func is not None:
        group = value_bound_once(func, group.name) or group
    axis = group_axis(group)
    return (axis,) if axis else (_ANY_PARTIAL,)


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


def _typed_reduction(e: CallExpr) -> tuple[Expression, tuple[str, ...]] | None:
    """For a typed reduction of a pending partial sum (engine ``takes_pending``):
    ``spmd.all_reduce(x, axes, src=P, ...)`` / ``spmd.reduce_scatter(x, axes, src=P, ...)``
    (src omitted: P; op "sum" or "avg"), its argument and its axes (literal strings or
    Final names), or Megatron's ``reduce_from_tensor_model_parallel_region(input_)`` /
    ``reduce_scatter_to_sequence_parallel_region(input_)`` (the table's src=P on "tp"); the
    arguments matched by position or name, the axes with ``_PENDING`` (the value is typed P
    there, as the collective's src says); None for any other call."""
    callee = e.callee
    if not isinstance(callee, (NameExpr, MemberExpr)) or not e.args:
        return None
    fullname = callee.fullname or ""
    megatron = fullname.startswith("megatron.")
    if megatron:
        mapping = TYPED_MAPPINGS.get(callee.name)
        if mapping is None or not takes_pending(mapping.collective, mapping.src, mapping.dst):
            return None
    elif callee.name not in ("all_reduce", "reduce_scatter") or not fullname.startswith("spmd"):
        return None
    x: Expression | None = None
    src: Expression | None = None
    dst: Expression | None = None
    op = "sum"
    axis: Expression | None = None
    for k, (a, kind, name) in enumerate(zip(e.args, e.arg_kinds, e.arg_names)):
        if kind != ARG_POS and kind != ARG_NAMED:
            return None  # *args, **kwargs: not read
        if name == ("input_" if megatron else "x") or (name is None and k == 0):
            x = a
        elif name == "src":
            src = a
        elif name == "dst":
            dst = a
        elif name == "op":
            op = a.value if isinstance(a, StrExpr) else "?"
        elif name == "axis" or (name is None and k == 1):
            axis = a
    if x is None:
        return None
    if megatron:
        return x, (TP_AXIS, _PENDING)
    if (src is not None and not _marker(src, "P")) or dst is None or not takes_pending(
            callee.name, None, None, op):
        return None
    marks = (_PENDING, _AVG) if op == "avg" else (_PENDING,)
    one = _axis_name(axis)
    if one is not None:
        return x, (one,) + marks
    if isinstance(axis, (TupleExpr, ListExpr)) and axis.items:
        names = [_axis_name(i) for i in axis.items]
        if all(n is not None for n in names):
            return x, tuple(n for n in names if n is not None) + marks
    return None


def _axis_name(e: Expression | None) -> str | None:
    """A mesh axis written as a string literal or a Final name bound to one (``TP: Final =
    "tp"``), as the collectives' axis reader (calls ``literal_str``) takes it."""
    if isinstance(e, StrExpr):
        return e.value
    if isinstance(e, RefExpr) and isinstance(e.node, Var) and e.node.is_final \
            and isinstance(e.node.final_value, str):
        return e.node.final_value
    return None


_P = LocalType(Kind.P)


def _refusal(found: tuple[str, ...], kind: str) -> str:
    """Why the consumers ``found`` (a mark's axes and markers) do not take a pending value
    of ``kind`` (engine ``pending_refusal``): "" when they do."""
    if _MIXED in found:  # some average, some sum: the one that does not fit
        return "sum" if kind == "mean" else "avg" if kind == "sum" else ""
    if _PENDING not in found:  # reinterpret(V->P), a raw sum all-reduce
        return pending_refusal("reinterpret", LocalType(Kind.V), _P, "sum", kind)
    return pending_refusal("all_reduce", _P, None, "avg" if _AVG in found else "sum", kind)


def _marker(e: Expression | None, name: str) -> bool:
    return isinstance(e, (NameExpr, MemberExpr)) and e.name == name


def declared_partial(ctx: FunctionContext | MethodContext, move: Contraction, ops: list[Operand],
                     types: TypeBuilder | None = None) -> Contraction:
    """``move`` with the axes on which the code around the call declares its result a
    partial sum (:mod:`.declared_partials`): looked up only when the engine's rule would
    report an implicit Partial on some axis (:func:`~spmd_mypy.engine.contractions.partial_sum`)."""
    tensors = [o for o in ops if o.type is not None]
    # a partial sum on some axis, or one at some ranks of a static ``a @ b`` (its 1-d dot
    # reading): the first such axis (memoised: the engine's rule, interpreted, per axis)
    if first_summed_axis(move, tensors) is None:
        return move
    found = reinterpreted_axes(current_function(ctx.api),
                               getattr(ctx.api, "tree", None), ctx.context,  # type: ignore[arg-type]
                               types)
    pending = _PENDING in found  # read by a raw reduction: P, pending
    if _refusal(found, "product"):
        return move
    found = tuple(b for b in found if b not in (_PENDING, _AVG, _MIXED))
    if _ANY_PARTIAL in found:  # a raw reduction on a group not read: where partial
        axes: dict[str, None] = {}
        for o in tensors:
            for a, _ in o.type.axes:  # type: ignore[union-attr]
                axes[a] = None
        found = tuple(b for b in axes if may_sum(
            move, [(o.type.get(b), o.shape) for o in tensors]))  # type: ignore[union-attr]
    return replace(move, partial_axes=found, pending=pending) if found else move



def declared_reduction(ctx: FunctionContext | MethodContext, op: str, reduction: Reduction | None,
                       ops: list[Operand], types: TypeBuilder | None = None) -> Reduction | None:
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
                                       ctx.context, types, summed=True)  # type: ignore[arg-type]
            pending = _PENDING in found  # a typed reduction reads it: P, pending
            refused = _refusal(found, pending_kind([op])) if found else ""
            if refused:  # a mean reinterpreted or summed, a sum averaged: its own message
                return replace(reduction, refused=refused)
            found = tuple(b for b in found if b not in (_PENDING, _AVG, _MIXED))
            return replace(reduction, partial_axes=found, pending=pending) if found else reduction
    return reduction
