"""Zero buffers: a local bound once to a factory's zeros and then filled by typed stores.

    final = torch.zeros(b, s, h)      # plain torch.Tensor for mypy: zeros are no term of any type
    final[~is_img] = txt[~is_img]     # a typed store: final is I from here on
    final[is_img] = img               # img P: the store into an I buffer is rejected
    y = torch.zeros_like(x)
    for i in experts:
        y[idx] += expert(x[idx]) * w  # V stored: y is V after the loop

mypy fixes a local's type at its first assignment (plain ``torch.Tensor`` for a factory's
result), so what a store writes would be lost and every later read gradual.  The check mode
types such a buffer by what is written into it (engine ``ZERO_FACTORIES``: the zeros read as
zeros by an op that writes them, then the result's type, ``SpmdType.mutated_by``).  This is
the static side of that rule:

* the buffers of a function (:func:`zero_buffers`, once per function body): a local bound
  exactly once, by ``name = torch.zeros(...)`` / ``torch.zeros_like(x)`` / ``x.new_zeros(...)``
  or a fill with a literal 0 (``torch.full(shape, 0.0)``, ``full_like``, ``new_full``; engine
  ``FILL_FACTORIES``).  Not ``torch.empty``: its values are garbage until written, and a
  partial store leaves garbage that is no term of any type (the check mode does not take it
  either);
* a store (an in-place op whose receiver is the buffer: ``x[...] = v``, ``x[...] += v``,
  ``index_put_``, ``masked_scatter_``, ``index_add_``, ``index_copy_``, ``copy_``,
  ``scatter_``, ``add_``, ...) with a typed operand reads the buffer as its type so far, or
  as a zero where no store comes before it; the type the buffer has after it is recorded at
  the store's position (:class:`BufferTypes`);
* a read of the buffer (an op's operand, a call's argument, a collective's, ``spmd.reveal``)
  where mypy has plain ``torch.Tensor`` takes the type of the last store before it in the
  source.  Before the first store the buffer is still zeros: untyped, as before.

Positions, not the order hooks run in, decide: mypy checks a loop body more than once and
a deferred function twice, and a store is judged the same each time.  A read in a loop before
the loop's store stays untyped (gradual), and a read after a store in a branch or a loop
takes the store's type: where the store did not run the buffer holds zeros, which are a value
of every type.  Stores in exclusive branches are read in source order (the later one is
judged against the earlier one's type).  Code without annotations stores nothing typed:
nothing changes there.
"""

from __future__ import annotations

from typing import Final

from mypy.nodes import (
    ARG_NAMED,
    CallExpr,
    Expression,
    FloatExpr,
    FuncDef,
    IntExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    RefExpr,
    UnaryExpr,
)

from ..engine.ops import FILL_FACTORIES, ZERO_FACTORIES
from ..engine.types import SpmdType
from .global_calls import size_names

_BUFFERS: Final[dict[int, tuple[FuncDef, object, frozenset[str]]]] = {}
# a buffer after a store: its type, and whether it may carry a gradient
Stored = tuple[SpmdType, bool]


def _zero_literal(e: Expression | None) -> bool:
    while isinstance(e, UnaryExpr) and e.op in ("-", "+"):
        e = e.expr
    return isinstance(e, (IntExpr, FloatExpr)) and e.value == 0


def is_zero_factory(e: Expression | None) -> bool:
    """``torch.zeros(...)``, ``torch.zeros_like(x)``, ``x.new_zeros(...)``, or a fill with a
    literal 0 (``torch.full(s, 0.0)``, ``torch.full_like(x, 0)``, ``x.new_full(s, 0)``)."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, (NameExpr, MemberExpr)):
        return False
    callee = e.callee
    name = callee.name
    if name not in ZERO_FACTORIES and name not in FILL_FACTORIES:
        return False
    method = name.startswith("new_")
    if method:
        # x.new_zeros(...): a method of a tensor (not of a module: mypy names those)
        if not isinstance(callee, MemberExpr) or (isinstance(callee.expr, RefExpr)
                                                   and isinstance(callee.expr.node, MypyFile)):
            return False
    elif not (callee.fullname.startswith("torch.") and callee.fullname.endswith(f".{name}")):
        return False  # torch.zeros is torch._C._VariableFunctions.zeros for mypy
    if name in ZERO_FACTORIES:
        return True
    # a fill: fill_value by keyword, or at position 1 (full(size, v), full_like(x, v),
    # x.new_full(size, v))
    for arg, kind, arg_name in zip(e.args, e.arg_kinds, e.arg_names):
        if kind == ARG_NAMED and arg_name == "fill_value":
            return _zero_literal(arg)
    return len(e.args) > 1 and e.arg_names[1] is None and _zero_literal(e.args[1])


def zero_buffers(func: FuncDef) -> frozenset[str]:
    """The locals ``func`` binds exactly once, to a factory's zeros (:func:`is_zero_factory`),
    computed once per function body (from ``size_names``, itself computed once)."""
    cached = _BUFFERS.get(id(func))
    if cached is not None and cached[0] is func and cached[1] is func.body:
        return cached[2]
    facts = size_names(func)
    found = frozenset(name for name, value in facts.values.items()
                      if facts.bindings.get(name) == 1 and is_zero_factory(value))
    if len(_BUFFERS) > 10_000:  # bound the memory of a long-lived daemon
        _BUFFERS.clear()
    _BUFFERS[id(func)] = (func, func.body, found)
    return found


class BufferTypes:
    """The type each zero buffer has after each of its typed stores, by the store's position
    (line, column) in its function, with whether it may carry a gradient then (a stored
    value that does: the factory's zeros carry none, rewrite.is_gradient_free): filled as
    mypy checks the stores, read at the buffer's later reads."""

    def __init__(self) -> None:
        # function id -> (the function, its body, name -> {store position: (type, gradient)})
        self._stores: dict[int, tuple[FuncDef, object, dict[str, dict[tuple[int, int], Stored]]]] = {}

    def _of(self, func: FuncDef) -> dict[str, dict[tuple[int, int], Stored]]:
        entry = self._stores.get(id(func))
        if entry is None or entry[0] is not func or entry[1] is not func.body:
            if len(self._stores) > 10_000:
                self._stores.clear()
            entry = (func, func.body, {})
            self._stores[id(func)] = entry
        return entry[2]

    def record(self, func: FuncDef, name: str, at: tuple[int, int], t: SpmdType,
               can_grad: bool) -> None:
        self._of(func).setdefault(name, {})[at] = (t, can_grad)

    def before(self, func: FuncDef, name: str, at: tuple[int, int]) -> Stored | None:
        """The buffer's type after the last store before ``at`` (None: no store before it,
        the buffer is still zeros)."""
        entry = self._stores.get(id(func))
        if entry is None or entry[0] is not func:
            return None
        stores = entry[2].get(name)
        if not stores:
            return None
        best: tuple[int, int] | None = None
        for pos in stores:
            if pos < at and (best is None or pos > best):
                best = pos
        return stores[best] if best is not None else None
