"""Which values hold indices or integer/bool values, read from the source: the fix of such a
V value where R is needed is no gather or sum of it but of what it indexes (engine
``collectives.IndexValue``)::

    tok = logits.argmax(-1) + vocab_start     # an index into this rank's vocab shard
    return tok                                # R declared: gather logits before the argmax

Read only for an error's fix (the walk over the function's assignments)."""

from __future__ import annotations

from typing import Callable, Optional

from mypy.nodes import (
    CallExpr,
    ComparisonExpr,
    Expression,
    FuncDef,
    IndexExpr,
    IntExpr,
    MemberExpr,
    NameExpr,
    OpExpr,
    SymbolNode,
    UnaryExpr,
)

from ..engine import collectives as coll
from ..engine.ops import INTEGER_RESULTS, WITH_INDICES, cast_is_integral
from ..engine.types import SpmdType
from .statements import Assignments, assignments_by_name

TypeOf = Callable[[Expression], Optional[SpmdType]]
TextOf = Callable[[Expression], str]

# integer results summed over the ranks that are the whole's (a count of this rank's part):
# the sum the V fix offers stays right for them
_COUNTS = frozenset("bincount histc count_nonzero".split())
_COMPARES = frozenset("""eq ne lt le gt ge isnan isinf isfinite isclose isin logical_and
logical_or logical_xor logical_not""".split())
_INTEGER_CASTS = frozenset("long int short byte bool".split())
# ops that keep the values of an index tensor (views, copies, a gather of indices by indices)
_KEEPS = frozenset("""squeeze unsqueeze view reshape flatten unflatten clone contiguous detach
cpu cuda gather t transpose permute expand masked_fill clamp clamp_min clamp_max""".split())
_MODULES = frozenset("torch F functional nn linalg special".split())
# ops that normalize over a dim (each rank's shard by itself when that dim is sharded): the
# fix gathers their input, not them (all_gather of logits.softmax(-1): each shard sums to 1)
_NORMALIZING = frozenset("softmax log_softmax softmin normalize gumbel_softmax".split())


def index_value(e: Expression | None, func: FuncDef | None, type_of: TypeOf,
                text: TextOf) -> coll.IndexValue | None:
    """What ``e`` holds when it is an index (an argmax, the indices of a topk or of a max over
    a dim, a sample), a bool mask (a comparison) or an integer cast, and its index op's input
    (``logits``) where the source shows it, through the assignments of ``func`` before it;
    None for any other value (a count, a float)."""
    if e is None:
        return None
    assigned: Assignments = assignments_by_name(func) if func is not None else {}
    return _walk(e, e.line, assigned, type_of, text, 0)


def _is_function(callee: MemberExpr, type_of: TypeOf) -> bool:
    """``torch.argmax(x)`` (a module's function: its first argument is the input), not
    ``x.argmax()``."""
    base = callee.expr
    return isinstance(base, (NameExpr, MemberExpr)) and base.name in _MODULES


def _input(call: CallExpr, type_of: TypeOf) -> Expression | None:
    """The tensor an op reads: the receiver of a method, the first argument of a function."""
    callee = call.callee
    if isinstance(callee, MemberExpr) and not _is_function(callee, type_of):
        return callee.expr
    return call.args[0] if call.args and call.arg_names[0] is None else None


def _before_normalizing(src: Expression, line: int,
                        assigned: dict[SymbolNode, list[tuple[int, Expression, int]]],
                        type_of: TypeOf) -> tuple[Expression, str]:
    """The input of the softmax (any op of :data:`_NORMALIZING`) ``src`` is, directly or
    through a name assigned one (``probs = logits.softmax(-1)``), repeatedly; else ``src``:
    what the index fix gathers (``logits``: gathered, then the softmax over the whole), and
    the outermost normalizing op's name ("" when none)."""
    name = ""
    for _ in range(6):
        e = src
        if isinstance(e, NameExpr) and e.node is not None:
            defs = [d for d in assigned.get(e.node, []) if d[0] <= line and d[2] < 0]
            if not defs:
                return src, name
            line, e = defs[-1][0], defs[-1][1]
        if not (isinstance(e, CallExpr) and isinstance(e.callee, (MemberExpr, NameExpr))
                and e.callee.name in _NORMALIZING):
            return src, name
        inner = _input(e, type_of)
        if inner is None:
            return src, name
        name = name or e.callee.name
        src = inner
    return src, name


def _pair_indices(value: Expression, type_of: TypeOf, text: TextOf,
                  assigned: dict[SymbolNode, list[tuple[int, Expression, int]]] | None = None
                  ) -> coll.IndexValue | None:
    """The indices of ``value``'s (values, indices) pair: ``x.topk(k)``, ``x.max(dim=-1)``."""
    if not isinstance(value, CallExpr):
        return None
    callee = value.callee
    if not isinstance(callee, (MemberExpr, NameExpr)) or callee.name not in WITH_INDICES:
        return None
    name = callee.name
    if name not in ("topk", "sort", "kthvalue", "cummax", "cummin") and not any(
            n == "dim" or (n is None and isinstance(a, (IntExpr, UnaryExpr)))
            for n, a in zip(value.arg_names, value.args)):
        return None  # max(x) is a value; max(a, b) an elementwise maximum
    src = _input(value, type_of)
    if src is None:
        return coll.IndexValue(name)
    src, norm = _before_normalizing(src, value.line, assigned or {}, type_of)
    return coll.IndexValue(name, text(src), type_of(src), norm)


def _walk(e: Expression, line: int, assigned: dict[SymbolNode, list[tuple[int, Expression, int]]],
          type_of: TypeOf, text: TextOf, depth: int) -> coll.IndexValue | None:
    if depth > 12:
        return None
    if isinstance(e, ComparisonExpr):
        src = next((o for o in e.operands if type_of(o) is not None), None)
        if src is None:
            return coll.IndexValue(coll.COMPARE)
        return coll.IndexValue(coll.COMPARE, text(src), type_of(src))
    if isinstance(e, UnaryExpr):
        return _walk(e.expr, line, assigned, type_of, text, depth + 1)
    if isinstance(e, OpExpr):
        if e.op in ("and", "or"):
            return None
        left = _walk(e.left, line, assigned, type_of, text, depth + 1)
        right = _walk(e.right, line, assigned, type_of, text, depth + 1)
        if left is not None and right is not None:
            return left if left.op else right
        if e.op in ("&", "|", "^"):
            return left or right
        if left is not None and (isinstance(e.right, IntExpr) or type_of(e.right) is None):
            return left  # ``logits.argmax(-1) + vocab_start``
        if right is not None and (isinstance(e.left, IntExpr) or type_of(e.left) is None):
            return right
        return None
    if isinstance(e, NameExpr):
        node = e.node
        if node is None:
            return None
        defs = [d for d in assigned.get(node, []) if d[0] <= line and d[1] is not e]
        if not defs:
            return None
        at, value, item = defs[-1]
        if item == 1:  # ``vals, idx = logits.max(dim=-1)``
            return _pair_indices(value, type_of, text, assigned)
        if item >= 0:
            return None
        return _walk(value, at, assigned, type_of, text, depth + 1)
    if isinstance(e, MemberExpr):
        if e.name == "indices":  # ``x.topk(k).indices``
            return _pair_indices(e.expr, type_of, text, assigned)
        return None
    if isinstance(e, IndexExpr):
        if isinstance(e.index, IntExpr) and e.index.value == 1:  # ``x.topk(k)[1]``
            pair = _pair_indices(e.base, type_of, text, assigned)
            if pair is not None:
                return pair
        return _walk(e.base, line, assigned, type_of, text, depth + 1)  # ``tok[:, None]``
    if not isinstance(e, CallExpr) or not isinstance(e.callee, (MemberExpr, NameExpr)):
        return None
    name = e.callee.name
    src = _input(e, type_of)
    if name in ("argmax", "argmin", "argsort", "multinomial"):
        if src is None:
            return coll.IndexValue(name)
        src, norm = _before_normalizing(src, line, assigned, type_of)
        return coll.IndexValue(name, text(src), type_of(src), norm)
    if name in _COMPARES:
        if src is None:
            return coll.IndexValue(coll.COMPARE)
        return coll.IndexValue(coll.COMPARE, text(src), type_of(src))
    if name == "where" and len(e.args) == 3:  # ``torch.where(done, EOS, tok)``
        a = _walk(e.args[1], line, assigned, type_of, text, depth + 1)
        b = _walk(e.args[2], line, assigned, type_of, text, depth + 1)
        if a is not None and (b is not None or type_of(e.args[2]) is None):
            return a
        if b is not None and type_of(e.args[1]) is None:
            return b
        return None
    integral = name in _INTEGER_CASTS or (name in ("to", "type") and any(
        cast_is_integral(text(a)) for a in e.args))
    if integral or name in _KEEPS:
        inner = _walk(src, line, assigned, type_of, text, depth + 1) if src is not None else None
        if inner is not None or not integral:
            return inner
        return coll.IndexValue()  # an integer cast of a float: integer values
    if name in INTEGER_RESULTS and name not in _COUNTS:
        return coll.IndexValue()
    return None
