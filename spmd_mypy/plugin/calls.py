"""Call hooks: torch ops, the spmd collectives, and the spmd helpers.

Each hook reads the operands' SPMD types from mypy's inferred argument types,
asks the engine for the result and the violations, reports the violations with
their ``spmd-...`` codes at the call, and returns the typed result.  A hook
whose call has no typed operand returns mypy's own result untouched (gradual,
and cheap).
"""

from __future__ import annotations

from dataclasses import replace

import dataclasses
import re
import functools
from typing import TYPE_CHECKING, Any, Callable, Final, Literal, Sequence, cast
from mypy.errorcodes import ARG_TYPE
from mypy.messages import format_type as mypy_format_type

from mypy.nodes import (
    ARG_POS,
    ARG_STAR,
    ARG_STAR2,
    ArgKind,
    AssignmentExpr,
    AssignmentStmt,
    AwaitExpr,
    Block,
    CallExpr,
    CastExpr,
    ComparisonExpr,
    ConditionalExpr,
    Context,
    Decorator,
    DictExpr,
    DictionaryComprehension,
    EllipsisExpr,
    Expression,
    ExpressionStmt,
    ForStmt,
    IfStmt,
    TryStmt,
    WhileStmt,
    WithStmt,
    FakeInfo,
    FloatExpr,
    FuncBase,
    FuncDef,
    GDEF,
    GeneratorExpr,
    IndexExpr,
    IntExpr,
    LDEF,
    LITERAL_TYPE,
    LambdaExpr,
    MatchStmt,
    ListComprehension,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    OpExpr,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RefExpr,
    ReturnStmt,
    SetComprehension,
    SetExpr,
    StarExpr,
    Statement,
    SliceExpr,
    StrExpr,
    SuperExpr,
    SymbolNode,
    TempNode,
    TupleExpr,
    TypeAlias,
    TypeInfo,
    UnaryExpr,
    Var,
    YieldExpr,
)
from mypy.literals import literal
from mypy.maptype import map_instance_to_supertype
from mypy.meet import narrow_declared_type
from mypy.plugin import FunctionContext, MethodContext
from mypy.typeops import make_simplified_union
from mypy.server.subexpr import get_subexpressions
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    NoneType,
    Overloaded,
    ProperType,
    CallableType,
    TupleType,
    UnboundType,
    Type,
    TypeOfAny,
    TypeType,
    UnionType,
    UnpackType,
    get_proper_type,
)

from ..engine import collectives as coll
from ..engine.collectives import (RAW_OP_PARAMS, RankCondition, communicates, declaration_error,
                                  discarded_result_error, divergent_collective_error, hoist_name,
                                  raw_collective, raw_collective_error, raw_reduce_op,
                                  raw_writes_in_place)
from ..engine import duality
from ..engine.annotations import Entry, alias_note, build, expand_axes, unknown_axis_error
from ..engine.contractions import CONTRACTIONS, Contraction
from ..engine.errors import SpmdError
from ..engine.ops import (
    OpSpec, FACTORIES, GRADFREE_NAMES, NON_OPERAND_NAMES, NOT_OPS, OPERATORS, PER_OPERAND_OPS,
    VALUE_READS,
    SCALAR_OPERAND_NAMES, Operand, Role, call_spec, check_backward, check_inplace, loss_reduction,
    summing_name,
    check_send, check_value_read, classify, foreach_op, foreach_writes, variant_formals,
    FUSED_FIRST_STEP, send_call,
    is_index_formal, is_known, is_value_target, partial_op, propagate, propagate_each,
    Reduction, Result, rank_index_operand, source_operand,
    NORMALISING,
)
from ..engine.types import (
    LIST_ITEM, REPLICATE, Kind, LocalType, SpmdType, UNTYPED, bare, format_axis, format_type,
    repeated_axis_message,
)
from ..engine.views import DimMove, make_move
from .texts import code_text, expr_text, is_saved_read  # noqa: F401 (re-exported: from .calls import expr_text)
from . import global_calls
from .discarded import assign_target, errors_at, is_statement_call, narrowed_local
from .claims import claimed_partial_errors
from .buffers import BufferTypes, Stored, zero_buffers
from .fixed_lists import fixed_list
from .index_values import index_value
from .messages import fold_into_earlier
from .statements import Assignments, assignments_by_name, nested_statements, returns
from .declared_partials import declared_partial, declared_reduction
from .codes import ERROR_CODES
from .memo import FunctionMemo
from .verdicts import check_argument_memo, known_fit, partial_op_memo, propagate_memo
from .mypy_types import TENSOR, TORCH_TENSOR_BASES, TypeBuilder, lookup_type
from .reductions import (may_read_move, may_read_reduction, module_reduction, read_contraction,
                         read_move, read_reduction, read_variant)
from .torch_namespaces import DECOMPOSITIONS
from .match_patterns import value_comparisons
from .rank_index import (EVERY, UNNAMED_GROUP, VALUE, Condition, Divergent, axes_in,
                         every_query, group_axis)
from .rewrite import MatchCase, RegionIndex

_UNTYPED_CODE: Final = ERROR_CODES["spmd-untyped"]  # enabled for a module: strict there (CallTyper.strict)

if TYPE_CHECKING:
    from . import SpmdPlugin

AnyCtx = FunctionContext | MethodContext

DUNDERS: Final = OPERATORS  # method -> (op name, reflected), from the engine

SPMD_COLLECTIVES: Final = frozenset(coll.OPS)
_NO_ARG: Final[tuple[Expression | None, Type | None]] = (None, None)  # CallTyper._args: absent
# How messages name an item of a list variable (a _foreach op's, cat's): ``grads[k]``
_LIST_ITEM: Final = LIST_ITEM
_SEQUENCE_RESULTS: Final = frozenset("split split_with_sizes chunk unbind tensor_split".split())
PROCESS_GROUP: Final = "torch._C._distributed_c10d.ProcessGroup"
# builtins whose result holds their first argument's items (a list op's operand read through)
_ITEM_KEEPING: Final = frozenset(("builtins.list", "builtins.tuple", "builtins.sorted", "builtins.reversed"))
_TENSOR_CONTAINERS: Final = ("builtins.list", "builtins.tuple", "typing.Sequence", "typing.List",
                      "collections.abc.Sequence", "typing.Iterable", "typing.Iterator")
# The kinds the operand scan compares with, as C statics (a bare global is a dict lookup and
# an attribute read of the enum class at every use)
_KIND_I: Final = Kind.I
_KIND_V: Final = Kind.V
_KIND_R: Final = Kind.R
# bound once for the operand loop (CallTyper.operands, at every hooked call): a Final module
# attribute is a C static of this compiled module, an imported name a dict lookup at each use;
# TempNode (mypy's, never subclassed) told by its exact class
_TempNode: Final = TempNode
_NON_OPERAND_NAMES: Final = NON_OPERAND_NAMES
_GRADFREE_NAMES: Final = GRADFREE_NAMES
_SCALAR_OPERAND_NAMES: Final = SCALAR_OPERAND_NAMES
_source_operand: Final = source_operand
_expr_text: Final = expr_text
_ListExpr: Final = ListExpr
_TupleExpr: Final = TupleExpr
_ListComprehension: Final = ListComprehension
_CallExpr: Final = CallExpr
_OpExpr: Final = OpExpr
_MemberExpr: Final = MemberExpr
_TupleType: Final = TupleType
_Instance: Final = Instance
_get_proper_type: Final = get_proper_type
# the op hook's context and operand expressions, told by their exact classes (mypy's, never
# subclassed): an imported class is a dict lookup and a generic isinstance at each use
_ComparisonExpr: Final = ComparisonExpr
_OperatorAssignmentStmt: Final = OperatorAssignmentStmt
_IndexExpr: Final = IndexExpr
_UnaryExpr: Final = UnaryExpr
_NameExpr: Final = NameExpr
_IntExpr: Final = IntExpr
_FloatExpr: Final = FloatExpr


def _temp_text(e: Expression | None) -> str:
    """An operand mypy hands as a TempNode (no source): ``x``."""
    return "x"


def _temp_item_text(e: Expression | None) -> str:
    return "x" + _LIST_ITEM


def _item_text(e: Expression | None) -> str:
    """An item of the list operand ``e``: ``xs[k]``."""
    return expr_text(e) + _LIST_ITEM


def untyped_result(ctx: FunctionContext) -> Type:
    """``Any``: what a call of a torch builtin without a stub had (:mod:`.torch_namespaces`)."""
    return AnyType(TypeOfAny.special_form)


def item_name(container: Expression) -> NameExpr:
    """An item of ``container`` as messages name it: ``xs[k]`` (``gs[k]`` for ``[*gs]``)."""
    shown = container
    if (isinstance(container, (ListExpr, TupleExpr)) and len(container.items) == 1
            and isinstance(container.items[0], StarExpr)):
        shown = container.items[0].expr
    at_k = NameExpr(expr_text(shown) + _LIST_ITEM)
    at_k.set_line(container)
    return at_k


# id(type) -> (the type, kept alive; its I axes; its R axes): the operand hooks ask of every
# operand whether it is Invariant anywhere (an interpreted attribute read per axis)
_KIND_AXES: Final[dict[int, tuple[SpmdType, frozenset[str], frozenset[str]]]] = {}


def _kind_axes(t: SpmdType) -> tuple[SpmdType, frozenset[str], frozenset[str]]:
    """(``t``, the axes on which ``t`` is I, those on which it is R), memoised by identity
    (SpmdType is frozen; the TypeBuilder hands out the same objects again and again)."""
    hit = _KIND_AXES.get(id(t))
    if hit is not None and hit[0] is t:
        return hit
    axes = t.axes
    entry = (t, frozenset([a for a, lt in axes if lt.kind is _KIND_I]),
             frozenset([a for a, lt in axes if lt.kind is _KIND_R]))
    if len(_KIND_AXES) >= 20_000:
        _KIND_AXES.clear()
    _KIND_AXES[id(t)] = entry
    return entry


def _attribute_if_invariant(ctx: AnyCtx, e: Expression | None, t: SpmdType) -> bool:
    """An Invariant operand that is an object's attribute (``self.W1``, ``blk.A1``: a module's
    weight or buffer, which may be frozen), not a tensor's (``h.T``) nor a computed value:
    Operand.leaf, read by the invariant-mix rule only (the detach it offers)."""
    if type(e) is not _MemberExpr or not _kind_axes(t)[1]:
        return False  # (mypy's MemberExpr, never subclassed: told by its class)
    assert isinstance(e, MemberExpr)
    owner = lookup_type(ctx.api, e.expr)
    p = get_proper_type(owner) if owner is not None else None
    if not isinstance(p, Instance):
        return False
    info = p.type
    return info.fullname != TENSOR and not any(info.has_base(b) for b in TORCH_TENSOR_BASES)


def whole_index(index: Expression) -> bool:
    """Whether ``x[index]`` is all of ``x``: ``x[...]``, ``x[:]``, ``x[:, :]``, ``x[..., :]``."""
    if isinstance(index, TupleExpr):
        return bool(index.items) and all(whole_index(i) for i in index.items)
    if isinstance(index, SliceExpr):
        return index.begin_index is None and index.end_index is None and index.stride is None
    return isinstance(index, EllipsisExpr)


def _grad_targets(stmts: list[Statement]) -> list[MemberExpr]:
    """The targets ``x.grad`` of the ``x.grad = value`` statements in a function body."""
    return [lv for st in nested_statements(stmts) if isinstance(st, AssignmentStmt)
            for lv in st.lvalues if isinstance(lv, MemberExpr) and lv.name == "grad"]


def literal_str(e: Expression | None, t: Type | None) -> str | None:
    if isinstance(e, StrExpr):
        return e.value
    if isinstance(e, RefExpr) and isinstance(e.node, Var) and e.node.is_final:
        if isinstance(e.node.final_value, str):
            return e.node.final_value
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, LiteralType) and isinstance(p.value, str):
        return p.value
    if isinstance(p, Instance) and p.last_known_value is not None and isinstance(p.last_known_value.value, str):
        return p.last_known_value.value
    return None


def literal_strs(e: Expression | None, t: Type | None) -> list[str] | None:
    """Axis names from a literal, a Final constant, or a tuple of those; None if unreadable."""
    one = literal_str(e, t)
    if one is not None:
        return [one]
    if isinstance(e, TupleExpr):
        names = [literal_str(i, None) for i in e.items]
        return None if any(n is None for n in names) else names  # type: ignore[return-value]
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, TupleType):
        names = [literal_str(None, i) for i in p.items]
        return None if any(n is None for n in names) else names  # type: ignore[return-value]
    return None


def _ref_fullname(e: Expression) -> str:
    return e.fullname if isinstance(e, RefExpr) else ""


def _entry_from_expression(e: Expression) -> Entry | None:
    from .rewrite import axis_from_raw

    if not (isinstance(e, IndexExpr) and isinstance(e.base, RefExpr)):
        return None
    marker = {"spmd.R": "R", "spmd.I": "I", "spmd.V": "V", "spmd.P": "P", "spmd.S": "S",
              "spmd.Shard": "S", "spmd.PS": "PS"}.get(e.base.fullname or "")
    if marker is None:
        return None
    args = e.index.items if isinstance(e.index, TupleExpr) else [e.index]

    def axis(a: Expression) -> str | None:
        v = axis_from_raw(a.value) if isinstance(a, StrExpr) else None
        return v if isinstance(v, str) else None

    if marker == "PS":
        spec: list[tuple[str, ...]] = []
        for a in args:
            if isinstance(a, NameExpr) and a.name == "None":
                spec.append(())
            elif isinstance(a, (TupleExpr, ListExpr)):  # a list: rewrite._mark_strings
                names = [axis(i) for i in a.items]
                if any(n is None for n in names):
                    return None
                spec.append(tuple(names))  # type: ignore[arg-type]
            else:
                n = axis(a)
                if n is None:
                    return None
                spec.append((n,))
        return Entry("PS", spec=tuple(spec))
    if marker == "S":
        if not args:  # S[()] (found by the fuzzed annotations of python -m soundness)
            return None
        dim_e = args[0]
        dim = dim_e.value if isinstance(dim_e, IntExpr) else (
            -dim_e.expr.value if isinstance(dim_e, UnaryExpr) and dim_e.op == "-"
            and isinstance(dim_e.expr, IntExpr) else None)
        names = [axis(a) for a in args[1:]]
        if dim is None or not names or any(n is None for n in names):
            return None
        return Entry("S", tuple(names), dim=dim)  # type: ignore[arg-type]
    names = [axis(a) for a in args]
    if any(n is None for n in names):
        return None
    return Entry(marker, tuple(names))  # type: ignore[arg-type]


def _kind_on(t: SpmdType, axis: str) -> Kind | None:
    lt = t.get(axis)
    return lt.kind if lt is not None else None


def _is_scalar(t: Type) -> bool:
    p = get_proper_type(t)
    if isinstance(p, LiteralType):
        p = p.fallback
    return isinstance(p, Instance) and p.type.fullname in (
        "builtins.int", "builtins.float", "builtins.bool", "builtins.complex")


# checkpoint's own keywords (the rest of its arguments go to the function it runs)
_CHECKPOINT_OWN: Final = frozenset(
    {"use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state"})

# A ``match`` value pattern's comparison (``case 0:`` is ``subject == 0``)
_EQ: Final = classify("eq")

# Python's sum(xs): the items added one by one (elementwise add, named as the user wrote it)
_BUILTIN_SUM: Final = dataclasses.replace(classify("add"), name="sum")


def is_zero_literal(e: Expression | None, t: Type | None) -> bool:
    """``0``, ``0.0``, ``-0.0`` written in the source (or a name mypy knows is ``Literal[0]``,
    e.g. a ``Final``): the additive identity, which a Partial may take as a summand."""
    while isinstance(e, UnaryExpr) and e.op in ("-", "+"):
        e = e.expr
        t = None
    if isinstance(e, (IntExpr, FloatExpr)):
        return e.value == 0
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, Instance) and p.last_known_value is not None:
        p = p.last_known_value
    return isinstance(p, LiteralType) and p.value == 0 and not isinstance(p.value, bool)



def _no_path_after(block: Block, call: object) -> bool | None:
    """Where the statement ``call`` sits in ``block``: None if not in it; True if mypy checks
    no other path of the body after it (it is a statement of the body, or of an ``if`` without
    ``else``/``elif``, a ``with``, a loop without ``else``, nested so); False if a sibling path
    is checked after it (the ``else`` of an ``if`` it is in, a ``try``'s handlers) or it is
    in a nested function or lambda."""
    for st in block.body:
        if isinstance(st, ExpressionStmt):
            if st.expr is call:
                return True
        elif isinstance(st, IfStmt):
            for b in st.body:
                found = _no_path_after(b, call)
                if found is not None:
                    return found and st.else_body is None
            if st.else_body is not None:
                found = _no_path_after(st.else_body, call)
                if found is not None:
                    return found  # the last path: the if's body was checked before it
        elif isinstance(st, (ForStmt, WhileStmt)):
            found = _no_path_after(st.body, call)
            if found is not None:
                return found and st.else_body is None
            if st.else_body is not None:
                found = _no_path_after(st.else_body, call)
                if found is not None:
                    return found
        elif isinstance(st, WithStmt):
            found = _no_path_after(st.body, call)
            if found is not None:
                return found
        elif isinstance(st, TryStmt):
            blocks: list[Block | None] = [st.body, *st.handlers, st.else_body, st.finally_body]
            for part in blocks:
                if part is not None and _no_path_after(part, call) is not None:
                    return False
    return None


def _own_variable(func: FuncDef, var: Var) -> bool:
    """Whether ``var`` is a parameter of ``func`` or a name its body binds (not a variable
    of an enclosing function that ``func`` reads as a closure)."""
    if any(arg.variable is var for arg in func.arguments):
        return True
    return any(isinstance(sub, NameExpr) and sub.node is var and (sub.is_new_def or sub.is_inferred_def)
               for sub in get_subexpressions(func.body))



# The argument types spmd.declare_parameters can never declare anything of
_DECLARES_NOTHING: Final = frozenset({
    "NoneType", "builtins.int", "builtins.float", "builtins.complex", "builtins.bool",
    "builtins.str", "builtins.bytes", "builtins.list", "builtins.tuple", "builtins.dict",
    "builtins.set", "builtins.frozenset"})


class CallTyper:
    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        # the plugin's TypeBuilder (made before this typer, never replaced): read at every
        # operand, a native attribute here where the plugin's (a Python class) is a
        # generic attribute lookup
        self._types: TypeBuilder = plugin.types
        # the plugin's RegionIndex.rank_exprs (set once it exists): tested at every op
        self.rank_exprs: dict[int, tuple[Expression, frozenset, Expression]] = {}
        # the plugin's RegionIndex.divergent: tested at every collective
        self.divergent: dict[int, Divergent] = {}
        # call context id -> (context, declared signature, typed parameters by index)
        self._pending: dict[int, tuple[object, CallableType, dict[int, tuple[SpmdType, ...]]]] = {}
        # call context id -> (context, the hook of the torch op it calls through a name)
        self._pending_ops: dict[int, tuple[object, Callable[[AnyCtx], Type]]] = {}
        # spmd-divergent-collective checks waiting for a condition that reads a tensor's value
        # to be typed, by the id of the node whose hook comes once it is: a loop's ``if c:
        # break`` after the collective (``c``: the trigger in its body), a call of a function
        # of the module whose body runs the collective, checked before the caller (the call)
        self.waiting: dict[int, list[Callable[[], None]]] = {}
        self._collectives: dict[tuple, coll.CollectiveResult] = {}
        # strict's last answer: (the checker, its Options, strict there)
        self._last_strict: tuple[object, object, bool] | None = None
        # typed_result's answers that are the default type or the tensor type itself (not a
        # new container type), by the ids of (default, t) as one int: mypy hands the same declared result
        # types again and again (the corpus: 67 pairs behind 4,131 calls).  The entry holds
        # both, so their ids are not reused while it lives
        self._typed_results: dict[int, tuple[Type, SpmdType, Type]] = {}
        # the answers without errors, by the ids of the engine types and without the operand's
        # text (the entry holds those types)
        self._collectives_by_id: dict[tuple, tuple[SpmdType, LocalType | None, LocalType | None,
                                                   coll.CollectiveResult]] = {}
        # the same, by (op, x, axes, src, dst, expert_mode, op=) alone: the answer where it
        # has no errors whether a gradient flows or not; None where it has some for either
        self._collectives_any_grad: dict[tuple, tuple[SpmdType, LocalType | None, LocalType | None,
                                                      coll.CollectiveResult | None]] = {}
        # each function's ``x.grad = value`` targets (_assigns_grad), read once
        self._grad_assignments: dict[FuncDef, list[MemberExpr]] = {}
        # overloaded function id -> (it, do its variants declare different SPMD types?)
        self._overloads: dict[int, tuple[OverloadedFuncDef, bool]] = {}
        # signature id -> (signature, its relaxed form or None, typed parameters by index):
        # mypy hands the same signature object for every call of a non-generic callee
        # and the indices of its plain list[Tensor] parameters
        self._relaxed: dict[int, tuple[CallableType, CallableType | None, dict[int, tuple[SpmdType, ...]],
                                       tuple[int, ...]]] = {}
        # parameter type id -> (the type, _relax's answer): a generic callee's signature is
        # a new object at every call, its parameters' types the same ones (its declared
        # types), and the one answer makes the wanted types one tuple (known_fit by identity)
        self._relaxed_types: dict[int, tuple[Instance, tuple[Type, tuple[SpmdType, ...]] | None]] = {}
        # the axis names a collective or spmd op writes -> (the config read, the axes they
        # name): _axis_names' answer where they name known axes once each (no error)
        self._axis_tuples: dict[tuple[str, ...], tuple[object, tuple[str, ...]]] = {}
        # signature id -> (signature, the same with a plain result): see plain_result
        self._plain_results: dict[int, tuple[CallableType, CallableType]] = {}
        # op -> formal name -> (an index, a loss's value target): asked of every argument of
        # every typed op (the engine's answer is an interpreted call each); two lookups by
        # str, no key tuple to build and hash (the first position is told apart after)
        self._formals: dict[str, dict[str, tuple[bool, bool]]] = {}
        # how many reports were made (report_at): a hook compares it before and after a
        # call's own checks (a dropped result is reported only for a call without an error)
        self.reported = 0
        # the types typed stores gave zero buffers (buffers.py), by store position
        self.buffer_types = BufferTypes()

    # -- helpers ---------------------------------------------------------------------
    @property
    def types(self) -> TypeBuilder:
        return self._types

    def report(self, ctx: AnyCtx, errors: Sequence[SpmdError], context: Context | None = None) -> None:
        """Report past mypy's error watchers: for ``1 + x`` mypy tries ``int.__add__`` and
        ``x.__radd__`` with errors filtered, and an error inside the hook would make it
        drop the variant ("Unsupported operand types") and lose the SPMD message."""
        if errors:
            self.report_at(ctx.api, self._declared_operands(ctx, errors), context or ctx.context)

    def _declared_operands(self, ctx: AnyCtx, errors: Sequence[SpmdError]) -> Sequence[SpmdError]:
        """An operand whose type is the user's ``spmd.declare`` of an untyped value (what a
        ``recv`` wrote, a buffer) may be declared wrong; the fix then converts a correct value
        into a wrong one (a probe: a received gradient declared P where the sender had I,
        the pasted all_reduce doubled every gradient).  Such an error says so."""
        func = global_calls.current_function(ctx.api)
        if func is None:
            return errors
        c = ctx.context
        exprs: list[Expression] = [e for group in getattr(ctx, "args", ()) for e in group]
        if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr):
            exprs.append(c.callee.expr)
        elif isinstance(c, OpExpr):
            exprs += [c.left, c.right]
        names = {e.name for e in exprs if isinstance(e, NameExpr)}
        if not names:
            return errors
        declared: dict[str, int] = {}
        # a name bound to a call of a function with a declared return type (a recv helper
        # returning the activation's type where its gradient's is meant): that function
        returned: dict[str, str] = {}
        module = getattr(getattr(ctx.api, "tree", None), "fullname", "")
        for name in names:
            v = global_calls.value_bound_once(func, name)
            if not (isinstance(v, CallExpr) and isinstance(v.callee, RefExpr)):
                continue
            if v.callee.fullname == "spmd.declare":
                declared[name] = v.line
                continue
            node = v.callee.node
            if isinstance(node, FuncDef) and node.unanalyzed_type is not None:
                where = f"line {node.line}"
                home = node.fullname.rsplit(".", 1)[0] if "." in node.fullname else ""
                if home and home != module and not home.startswith(module + "."):
                    where += f" of {home}"
                returned[name] = f"{node.name} ({where})"
        if not declared and not returned:
            return errors
        out: list[SpmdError] = []
        for err in errors:
            hit = next((n for n in sorted(declared) if err.code != "spmd-annotation"
                        and re.search(rf"(?<![\w.]){re.escape(n)}(?![\w(])", err.message)), None)
            if hit is not None:
                err = SpmdError(err.code, f"{err.message}; {hit}'s type is its spmd.declare at "
                                          f"line {declared[hit]}: if that declaration is wrong, "
                                          f"correct it instead")
            elif err.code == "spmd-duality":
                # a gradient's type from a function's declared return type
                hit = next((n for n in sorted(returned) if re.search(
                    rf"the gradient {re.escape(n)} \(", err.message)), None)
                if hit is not None:
                    err = SpmdError(err.code, f"{err.message}; {hit}'s type is the return type "
                                              f"of {returned[hit]}: if that is wrong, correct it "
                                              f"(a gradient received from elsewhere is usually "
                                              f"spmd.grad_type[...] of its value's type)")
            out.append(err)
        return out

    def report_at(self, api: Any, errors: Sequence[SpmdError], at: Context) -> None:
        """:meth:`report` through the checker ``api``, at ``at``."""
        self.reported += 1
        store = api.msg.errors
        watchers = getattr(store, "_watchers", None)
        if watchers:
            store._watchers = []
        infos = getattr(store, "error_info_map", {}).get(getattr(store, "file", None))
        try:
            for err in errors:
                if not fold_into_earlier(infos, at.line, at.column, err.code, err.message):
                    api.fail(err.message, at, code=ERROR_CODES[err.code])
        finally:
            if watchers:
                store._watchers = watchers

    def operand(self, ctx: AnyCtx, expr: Expression | None, t: SpmdType) -> Operand:
        """A tensor operand ``expr`` of type ``t``: named as the code writes it, its gradient
        read where the rule needs it (can_grad_if_invariant)."""
        can_grad = self.can_grad_if_invariant(ctx, expr, t)
        return _source_operand(t, expr, _expr_text, can_grad, None, False,
                               can_grad and _attribute_if_invariant(ctx, expr, t))

    def can_grad_if_invariant(self, ctx: AnyCtx, expr: Expression | None, t: SpmdType) -> bool:
        """The rule reads can_grad only for Invariant operands: skip the region lookup else."""
        if not _kind_axes(t)[1]:
            return True
        return self.can_grad(ctx, expr)

    def can_grad(self, ctx: AnyCtx, expr: Expression | None) -> bool:
        tree: MypyFile | None = getattr(ctx.api, "tree", None)
        regions = self.plugin.regions
        stored = self._buffer_gradient(ctx, expr) if isinstance(expr, NameExpr) else None
        if stored is not None:  # a zero buffer: what was stored into it, not the factory
            return stored and not regions.in_no_grad(tree, ctx.context.line)
        if regions.gradient_free(tree, ctx.context.line, expr):
            return False
        return not regions.in_no_grad(tree, ctx.context.line)

    def integer_valued(self, ctx: AnyCtx, expr: Expression | None) -> bool:
        """Whether ``expr`` is known to be an integer or bool value (rewrite
        ``is_integer_valued``: ``argmax``, a comparison, ``.long()``, a local assigned one)."""
        tree: MypyFile | None = getattr(ctx.api, "tree", None)
        return self.plugin.regions.integer_valued(tree, ctx.context.line, expr)

    def typed_result(self, default: Type, t: SpmdType) -> Type:
        """mypy's result type with every tensor in it given the type ``t``."""
        # one int for the pair (a collision is told by the identities below): a tuple key
        # hashes and compares two ints and is allocated at each call
        key = id(default) * 31 + id(t)
        same = self._typed_results.get(key)
        if same is not None and same[0] is default and same[1] is t:
            return same[2]
        p = get_proper_type(default)
        inst = self.types.to_instance(t)
        if inst is None:
            return default
        if isinstance(p, Instance):
            # (kept where ``default`` is the instance itself, not an alias of one)
            if self.types.from_type(p) is not None:
                return self._typed_result_kept(key, default, t, inst) if p is default else inst
            if p.type.fullname in _TENSOR_CONTAINERS and p.args:
                if self.types.from_type(p.args[0]) is not None:
                    return p.copy_modified(args=[inst])
            return self._typed_result_kept(key, default, t, default) if p is default else default
        if isinstance(p, TupleType):
            items = [inst if self.types.from_type(i) is not None else i for i in p.items]
            return p.copy_modified(items=items)
        return default

    def _typed_result_kept(self, key: int, default: Type, t: SpmdType,
                           result: Type) -> Type:
        """``result``, typed_result's answer for (default, t), remembered by their ids."""
        if len(self._typed_results) > 10_000:  # bound the memory of a long-lived daemon
            self._typed_results.clear()
        self._typed_results[key] = (default, t, result)
        return result

    # -- zero buffers (buffers.py) ------------------------------------------------------
    def zero_buffer(self, ctx: AnyCtx, expr: Expression | None) -> tuple[FuncDef, str] | None:
        """(the function, the name) when ``expr`` names a local the current function binds
        once to a factory's zeros (buffers.zero_buffers)."""
        if not isinstance(expr, NameExpr) or expr.kind != LDEF:
            return None
        func = global_calls.current_function(ctx.api)
        if func is None or expr.name not in zero_buffers(func):
            return None
        return func, expr.name

    def buffer_read(self, ctx: AnyCtx, expr: Expression | None, t: SpmdType) -> SpmdType:
        """``t`` (a plain tensor's: untyped), or the type of the zero buffer ``expr`` names
        after its last typed store before this read."""
        if not isinstance(expr, NameExpr) or t.axes or t.failed:
            return t
        stored = self._buffer_store(ctx, expr)
        return stored[0] if stored is not None else t

    def _buffer_gradient(self, ctx: AnyCtx, expr: NameExpr) -> bool | None:
        """Whether the zero buffer ``expr`` may carry a gradient at this read (a value that
        does was stored into it), or None when ``expr`` is no buffer read after a store."""
        stored = self._buffer_store(ctx, expr)
        return stored[1] if stored is not None else None

    def _buffer_store(self, ctx: AnyCtx, expr: NameExpr) -> Stored | None:
        """The last store before this read into the zero buffer ``expr`` names, None when it
        names no buffer or none was stored before.  The stores are looked up first: most
        reads follow none, and then the function's buffers (a walk of its body, once per
        function) are not needed (a store is only ever recorded for a buffer)."""
        if expr.kind != LDEF:
            return None
        func = global_calls.current_function(ctx.api)
        if func is None:
            return None
        stored = self.buffer_types.before(func, expr.name, (expr.line, expr.column))
        if stored is None or expr.name not in zero_buffers(func):
            return None
        return stored

    # -- operands --------------------------------------------------------------------
    def operands(self, ctx: AnyCtx, receiver: Expression | None, receiver_type: Type | None,
                 op: str = "", dunder: bool = False, other: Expression | None = None,
                 operand_exprs: list[Expression | None] | None = None,
                 ) -> tuple[list[Operand], Operand | None, bool]:
        """(operands in formal order, the out= target, whether any operand is typed).

        Dims, shapes, dtypes are not operands; Python scalars are, where they are
        summands or factors (``x + 1``); index tensors are operands of role INDEX.
        ``operand_exprs``, when given, receives each operand's expression (in their order).
        """
        typer = self.types
        ops: list[Operand] = []
        sources: list[Expression | None] = []  # each operand's expression
        out: Operand | None = None
        any_typed = False
        any_invariant = False  # an operand Invariant on some axis (_gradient_free_replicates)
        if receiver_type is not None:
            t = typer.from_type(receiver_type)
            if t is not None:
                if not t.axes and isinstance(receiver, NameExpr):
                    t = self.buffer_read(ctx, receiver, t)
                any_typed = any_typed or bool(t.axes) or bool(t.failed)
                any_invariant = bool(_kind_axes(t)[1])
                ops.append(self.operand(ctx, receiver, t))
                sources.append(receiver)
                if operand_exprs is not None:
                    operand_exprs.append(receiver)
        position = 0
        wholes: list[Expression] = []  # containers standing for their items (_container_items)
        for formal, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args):
            name = formal or ""
            this_position = position
            position += 1
            if name in _NON_OPERAND_NAMES:
                continue
            is_index, value_target = self._formal_roles(op, name, this_position == 0)
            for typ, expr in zip(types, exprs):
                # a tensor argument stands for itself (_container_items' first answer, told
                # here without the call and its list)
                typ_items = ([(typ, expr)] if typer.from_type(typ) is not None
                             else self._container_items(typ, expr, ctx, wholes))
                for it, ie in typ_items:
                    if type(ie) is _TempNode and other is not None:
                        ie = other  # an operator's other side, which mypy hands as a TempNode
                    # the text (rendered when a message reads it): an item of the list xs
                    # is xs[k]; mypy's TempNode, x
                    is_item = bool(wholes) and any(w is ie for w in wholes)
                    render: Callable[[Any], str]
                    if type(ie) is _TempNode:
                        render = _temp_item_text if is_item else _temp_text
                    else:
                        render = _item_text if is_item else _expr_text
                    t = typer.from_type(it)
                    if (t is None and it is not None and not is_index and name != "out"
                            and isinstance(get_proper_type(it), AnyType)):
                        # Any: an operator with an Any side (p * self.scale: mypy gives up
                        # before any hook) is typed from its typed side; anything else (an
                        # attribute set in an unannotated __init__) may be a tensor of any
                        # type, so it is an untyped operand (gradual)
                        t = typer.from_type(self._behind_any(ctx, ie)) or UNTYPED
                    elif t is not None and not t.axes and isinstance(ie, NameExpr):
                        t = self.buffer_read(ctx, ie, t)  # a zero buffer's stored type
                    if t is None:
                        if (it is not None and not is_index and _is_scalar(it) and (
                                name in _SCALAR_OPERAND_NAMES or (formal is None and dunder))):
                            # (positional: an interpreted call matches no keyword names)
                            ops.append(_source_operand(None, ie, render, True, None,
                                                       is_zero_literal(ie, it)))
                            sources.append(None)
                            if operand_exprs is not None:
                                operand_exprs.append(ie)
                        continue
                    any_typed = any_typed or bool(t.axes) or bool(t.failed)
                    # a loss's value target is taken as data: no gradient (the check mode
                    # reads requires_grad)
                    no_grad = is_index or name in _GRADFREE_NAMES or value_target
                    # can_grad_if_invariant and _attribute_if_invariant, the I axes read once
                    invariant = bool(_kind_axes(t)[1])
                    can_grad = (False if no_grad else
                                self.can_grad(ctx, ie) if invariant else True)
                    o = _source_operand(t, ie, render, can_grad, Role.INDEX if is_index else None,
                                       False, can_grad and invariant
                                       and _attribute_if_invariant(ctx, ie, t))
                    if name == "out":
                        out = o
                    else:
                        any_invariant = any_invariant or invariant
                        ops.append(o)
                        sources.append(None if no_grad else ie)
                        if operand_exprs is not None:
                            operand_exprs.append(ie)
        if any_typed and any_invariant and len(ops) > 1:  # (else the replicates' gradients
            self._gradient_free_replicates(ctx, ops, sources)  # are never read)
        return ops, out, any_typed

    def _behind_any(self, ctx: AnyCtx, e: Expression | None) -> Type | None:
        """The type of an operator expression mypy typed Any (Correlated.type_behind_any)."""
        if not isinstance(e, (OpExpr, UnaryExpr, NameExpr)) and not (
                isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)):
            return None
        correlated = self.plugin.promotion.correlated
        return correlated.type_behind_any(ctx, e) if correlated is not None else None

    def _formal_roles(self, op: str, name: str, first: bool) -> tuple[bool, bool]:
        """Whether parameter ``name`` of ``op`` holds an index (x[i] / x[i] = v: the
        subscript is an index, never a scalar operand) and whether it is a loss's value
        target (engine ``is_index_formal`` / ``is_value_target``)."""
        by_name = self._formals.get(op)
        if by_name is None:
            by_name = self._formals[op] = {}
        known = by_name.get(name)
        if known is None:
            known = (is_index_formal(op, name), is_value_target(op, name))
            by_name[name] = known
        if first and not known[0] and op in ("__getitem__", "__setitem__"):
            return True, known[1]
        return known

    def _gradient_free_replicates(self, ctx: AnyCtx, ops: list[Operand],
                                  sources: list[Expression | None]) -> None:
        """Beside an I operand, whether each R operand carries a gradient (a detached one acts
        as I there: engine ``_rule_on_axis``); elsewhere the rule never asks, so neither does
        this (the region lookups cost a hooked call)."""
        kinds: list[tuple[SpmdType, frozenset[str], frozenset[str]] | None] = []
        i_axes: set[str] = set()
        for o in ops:
            t = o.type
            entry = _kind_axes(t) if t is not None else None
            kinds.append(entry)
            if entry is not None:
                i_axes.update(entry[1])
        if not i_axes:
            return
        for k, o in enumerate(ops):
            e = sources[k]
            entry = kinds[k]
            if (e is not None and entry is not None and not entry[2].isdisjoint(i_axes)
                    and o.can_grad and not self.can_grad(ctx, e)):
                ops[k] = dataclasses.replace(o, can_grad=False)

    def _container_items(self, typ: Type, expr: Expression, ctx: AnyCtx,
                         wholes: list[Expression] | None = None) -> list[tuple[Type | None, Expression]]:
        """A list/tuple argument (``torch.cat([a, b])``, ``torch.cat(xs)``) as its items.

        ``wholes``: where the container expressions that stand for their items (``xs`` of
        ``torch.cat(xs)``, ``list(xs)``, a tuple variable) are collected: messages name their
        items ``xs[k]``, and a fix applies to each (``[all_reduce(t, ...) for t in xs]``)."""
        if self.types.from_type(typ) is not None:
            return [(typ, expr)]
        cls = type(expr)  # mypy's expression classes, never subclassed: told by class
        if cls is _ListExpr or cls is _TupleExpr:
            assert isinstance(expr, (ListExpr, TupleExpr))
            shown: list[tuple[Type | None, Expression]] = []
            for i in expr.items:
                if isinstance(i, StarExpr):  # ``[*xs, a]``: the starred container's items
                    inner = lookup_type(ctx.api, i.expr)
                    shown.extend(self._container_items(inner, i.expr, ctx, wholes) if inner is not None
                                 else [(None, i)])
                else:
                    shown.append((lookup_type(ctx.api, i), i))
            return shown
        if cls is _ListComprehension:
            assert isinstance(expr, ListComprehension)
            # ``torch.cat([f(c) for c in chunks])``: mypy typed the list in the parameter's
            # context (list[torch.Tensor]); the element expression keeps its own type
            left = expr.generator.left_expr
            left_type = lookup_type(ctx.api, left)
            if left_type is not None and self.types.from_type(left_type) is not None:
                return [(left_type, left)]
        if (cls is _CallExpr and isinstance(expr, CallExpr) and isinstance(expr.callee, RefExpr)
                and expr.callee.fullname in _ITEM_KEEPING and expr.args
                and expr.arg_kinds[0] == ARG_POS):
            # ``torch.stack(list(xs))``, ``tuple(l)``, ``sorted(l, key=...)``, ``reversed(l)``:
            # mypy typed the call in the parameter's context (list[torch.Tensor]); the items
            # are its first argument's, whose own type says what they are
            wrapped = expr.args[0]
            wrapped_type = lookup_type(ctx.api, wrapped)
            if wrapped_type is not None:
                wrapped_items = self._container_items(wrapped_type, wrapped, ctx, wholes)
                if any(t is not None and self.types.from_type(t) for t, _ in wrapped_items):
                    if wholes is not None and any(w is wrapped for w in wholes):
                        wholes.append(expr)
                    return [(t, expr if e is wrapped else e) for t, e in wrapped_items]
        p = _get_proper_type(typ)
        if type(p) is _Instance and not cast(Instance, p).args and cls is not _OpExpr:
            # a scalar's int, float, bool (no type arguments: no items, whatever its class;
            # told before the container tests below read its class twice)
            return [(typ, expr)]
        is_container = isinstance(p, _TupleType) or (
            isinstance(p, _Instance) and p.type.fullname in _TENSOR_CONTAINERS)
        if cls is _OpExpr and isinstance(expr, OpExpr) and expr.op == "+" and is_container:
            # ``torch.cat(xs + [a])``: mypy typed the sum in the parameter's context
            # (list[torch.Tensor]); its two sides still have their own types
            items: list[tuple[Type | None, Expression]] = []
            for side in (expr.left, expr.right):
                side_type = lookup_type(ctx.api, side)
                if side_type is None:
                    return [(typ, expr)]
                items.extend(self._container_items(side_type, side, ctx, wholes))
            return items
        if isinstance(p, _TupleType):
            if wholes is not None:
                wholes.append(expr)
            return [(i, expr) for i in p.items]
        if isinstance(p, _Instance) and p.type.fullname in _TENSOR_CONTAINERS and p.args:
            if wholes is not None:
                wholes.append(expr)
            if self.types.is_spec_join(p.args[0]):
                self.report(ctx, [SpmdError("spmd-global", (
                    f"the items of {expr_text(expr)} are global tensors with different partition "
                    f"specs: mypy gives a list one item type, the join of theirs, which has no "
                    f"layout, so this op cannot be checked; redistribute the items to one spec "
                    f"before building the list, or pass the tensors directly (torch.cat([a, b]))"))])
            alternatives = self.types.alternatives(p.args[0])
            if alternatives is not None:
                # list[Tensor[P] | Tensor[R]] (``ys = xs + [a]``) or list[Tensor[R_P]] (the join
                # mypy gives ``ys = [p, r]``): the list holds both kinds, so each is an operand
                # (a homogeneous list typed so is checked as if mixed)
                return [(i, expr) for i in alternatives]
            return [(p.args[0], expr)]
        if isinstance(p, _Instance) and p.args and p.type.fullname not in _TENSOR_CONTAINERS:
            # any other iterable of typed tensors (``reversed(l)`` as list()'s argument, a
            # user's Sequence subclass): the item type of its Iterable base
            iterable = next((b for b in p.type.mro if b.fullname == "typing.Iterable"), None)
            if iterable is not None:
                item = map_instance_to_supertype(p, iterable).args
                if item and self.types.from_type(item[0]) is not None:
                    # a generator's items are named by its element (``q`` of ``(q for q in ps)``)
                    if isinstance(expr, GeneratorExpr):
                        return [(item[0], expr.left_expr)]
                    if wholes is not None:
                        wholes.append(expr)
                    return [(item[0], expr)]
        return [(typ, expr)]

    def _with_use(self, ctx: AnyCtx, ops: list[Operand]) -> list[Operand] | None:
        """``ops`` with where the op's result goes (``Operand.reduced``: the all_reduce call
        it is the first argument of; ``Operand.meets``: the axes on which it meets an
        Invariant value, the other side of the operator it feeds or the function's declared
        result it is returned as); None when neither is known."""
        func = global_calls.current_function(ctx.api)
        here = ctx.context
        if func is None or not isinstance(here, Expression):
            return None
        parent: Expression | None = None
        returned = False
        for st in nested_statements(func.body.body):
            root: Expression | None = None
            if isinstance(st, ReturnStmt):
                root = st.expr
            elif isinstance(st, AssignmentStmt):
                root = st.rvalue
            elif isinstance(st, (ExpressionStmt, OperatorAssignmentStmt)):
                root = st.expr if isinstance(st, ExpressionStmt) else st.rvalue
            if root is None or st.line > here.line or (
                    st.end_line is not None and st.end_line < here.line):
                continue
            for sub in get_subexpressions(root):
                if sub is here:
                    returned = returned or (isinstance(st, ReturnStmt) and root is here)
                elif (isinstance(sub, OpExpr) and (sub.left is here or sub.right is here)) or (
                        isinstance(sub, CallExpr) and any(a is here for a in sub.args)):
                    parent = sub
                    returned = isinstance(st, ReturnStmt) and root is sub
            if parent is not None or returned:
                break
        reduced = ""
        meets: list[tuple[str, str]] = []
        if isinstance(parent, CallExpr) and parent.args and parent.args[0] is here:
            callee = parent.callee
            name = callee.name if isinstance(callee, (NameExpr, MemberExpr)) else ""
            if name == "all_reduce":
                reduced = code_text(parent)
        elif isinstance(parent, OpExpr):
            other = parent.right if parent.left is here else parent.left
            found = lookup_type(ctx.api, other)
            if found is None and isinstance(other, NameExpr) and isinstance(other.node, Var):
                found = other.node.type  # the right side, not typed yet when the left is
            t = self.types.from_type(found) if found is not None else None
            if t:
                meets.extend((a, expr_text(other)) for a, lt in t.axes if lt.kind is Kind.I)
        if returned and not meets:
            ftype = func.type
            if isinstance(ftype, CallableType):
                declared = self.types.from_type(ftype.ret_type)
                if declared:
                    meets.extend((a, f"the declared result of {func.name}")
                                 for a, lt in declared.axes if lt.kind is Kind.I)
        if not reduced and not meets:
            return None
        return [dataclasses.replace(o, reduced=reduced, meets=tuple(meets)) if o.type else o
                for o in ops]

    # -- torch ops ---------------------------------------------------------------------
    def op_hook(self, op: str, *, method: bool, reflected: bool = False,
                module: bool = False) -> Callable[[AnyCtx], Type]:
        """The hook of a call of torch op ``op`` (``module``: the call of one of torch's
        one-op modules, modules.TORCH_MODULE_OPS)."""
        own_spec = classify(op)
        variant = bool(variant_formals(op))  # the rule depends on a mode argument
        dunder = method and (op in ("__getitem__", "__setitem__") or any(
            op == v[0] for v in DUNDERS.values()))
        inplace = op.endswith("_") and not op.startswith("__") or op == "__setitem__"
        # what the op may read from its call, told once (read_move and read_reduction answer
        # None for any other op; loss_reduction of the op's own spec is one answer)
        may_move = may_read_move(op)
        may_reduce = may_read_reduction(op)
        own_loss = loss_reduction(own_spec) is not None
        per_operand = op in PER_OPERAND_OPS

        def hook(ctx: AnyCtx) -> Type:
            receiver = None
            receiver_type = None
            other: Expression | None = None  # an operator's other side
            if method:
                receiver_type = ctx.type  # type: ignore[union-attr]
                c = ctx.context
                cls = type(c)
                if cls is _CallExpr:
                    callee = cast(CallExpr, c).callee
                    if type(callee) is _MemberExpr:
                        receiver = cast(MemberExpr, callee).expr
                elif cls is _OpExpr:
                    receiver = cast(OpExpr, c).right if reflected else cast(OpExpr, c).left
                    other = cast(OpExpr, c).left if reflected else cast(OpExpr, c).right
                elif cls is _ComparisonExpr and len(cast(ComparisonExpr, c).operands) == 2:
                    # ``p > 0``; ``0 < p`` is p's ``__gt__`` (int's own comparison fails)
                    left, right = cast(ComparisonExpr, c).operands
                    lc, rc = type(left), type(right)
                    swapped = (lc is _IntExpr or lc is _FloatExpr) and not (
                        rc is _IntExpr or rc is _FloatExpr)
                    receiver, other = (right, left) if swapped else (left, right)
                elif cls is _OperatorAssignmentStmt:
                    receiver = cast(OperatorAssignmentStmt, c).lvalue
                    other = cast(OperatorAssignmentStmt, c).rvalue
                elif cls is _IndexExpr:
                    receiver = cast(IndexExpr, c).base
                elif cls is _UnaryExpr:
                    receiver = cast(UnaryExpr, c).expr
            exprs: list[Expression | None] = []
            ops, out, any_typed = self.operands(ctx, receiver, receiver_type, op, dunder, other,
                                                exprs)
            if not any_typed:
                return ctx.default_return_type
            # a typed store into a zero buffer (buffers.py): before its first store the
            # buffer is zeros, no term of any type (engine Operand.zero, as the check mode)
            buffer: tuple[FuncDef, str] | None = None
            stored_name: Expression | None = None
            if inplace and method and ops:
                stored_name = receiver if type(receiver) is _NameExpr else (
                    cast(IndexExpr, receiver).base if type(receiver) is _IndexExpr  # x[i] += v:
                    and isinstance(ctx.context, OperatorAssignmentStmt)
                    and ctx.context.lvalue is receiver else None)  # (x's __setitem__)
                if stored_name is not None:
                    buffer = self.zero_buffer(ctx, stored_name)
            if buffer is not None:
                first = ops[0].type
                if first is not None and not first.axes and not first.failed:
                    if global_calls.any_global(ops):
                        buffer = None  # a partition spec stored: left to the global rule
                    else:
                        ops[0] = source_operand(None, receiver, expr_text, zero=True)
            if reflected and len(ops) == 2:
                ops = [ops[1], ops[0]]
            if per_operand and not global_calls.any_global(ops):
                return self.per_operand_result(ctx, op, ops)
            spec = call_spec(op, read_variant(ctx, op, module)) if variant else own_spec
            if global_calls.any_global(ops):  # global SPMD: shard propagation
                c = ctx.context  # an operator's sides: the dims they make size 1 broadcast
                exprs = [c.left, c.right] if isinstance(c, OpExpr) and len(ops) == 2 else []
                result = global_calls.propagate(self, ctx, op, ops, exprs)
            else:
                move = read_move(ctx, op) if may_move else None
                if isinstance(move, Contraction):
                    move = declared_partial(ctx, move, ops, self.types)
                reduction = read_reduction(ctx, op) if may_reduce else None
                if reduction is None and module and op in NORMALISING:
                    # self.norm(x) of an nn.LayerNorm / nn.Softmax: the dims its constructor states
                    reduction = module_reduction(ctx, op)
                summing = op
                if reduction is None and (own_loss or spec is not own_spec):
                    # a loss's own mean or sum (engine loss_reduction)
                    reduction = loss_reduction(spec)
                    if reduction is not None:
                        summing = summing_name(spec)
                if reduction is not None and out is not None:
                    # a sum written into out=: not read as pending (as the check mode, which
                    # marks no written tensor)
                    reduction = replace(reduction, partial_axes=("*",))
                reduction = declared_reduction(ctx, summing, reduction, ops, self.types)
                if (spec.keeps_shard_dims and move is None and reduction is None
                        and len(ops) > 1 and len(exprs) == len(ops)):
                    self._zero_dim_operands(ctx, ops, exprs, reflected)
                strict = self.strict(ctx)
                # an index, bound, mask or scalar computed from a rank query (rank_index):
                # every propagation below keeps it (the re-propagations with a binding's or a
                # use's fix once dropped it, and its error with them: a local's logits)
                ranked = (self._rank_derived(ctx, ops) if self.rank_exprs  # files with a query
                          else None)
                result = self._propagate_ranked(ctx, spec, ops, strict, reduction, move, ranked)
                if any(e.code == "spmd-invariant-mix" for e in result.errors):
                    # a V name's binding may show this rank's statistic (a local logsumexp):
                    # the fix completes that reduction first (engine varying_statistic_fix)
                    bound = _with_bindings(ctx, ops)
                    if bound is not None:
                        ops = bound
                        result = self._propagate_ranked(ctx, spec, bound, strict, reduction,
                                                        move, ranked)
                if any(e.code in ("spmd-invariant-mix", "spmd-partial-nonlinear")
                       for e in result.errors):
                    # where the result goes (an all_reduce's argument, an I value it meets):
                    # the fix that pastes there (engine Operand.reduced, Operand.meets)
                    used = self._with_use(ctx, ops)
                    if used is not None:
                        result = self._propagate_ranked(ctx, spec, used, strict, reduction,
                                                        move, ranked)
            errors = result.errors
            if inplace and method and errors:
                errors = self._reduced_gradient_hint(ctx, errors, ops)
            self.report(ctx, errors)
            target = ops[0] if (inplace and method and ops) else out
            if target is not None and target.type:
                where = spec.name if out is None else f"{spec.name}(..., out=)"
                whole = op == "__setitem__" and isinstance(ctx.context, IndexExpr) and (
                    whole_index(ctx.context.index))
                err = self._inplace_error(ctx, where, target, result.type, ops, whole)
                if err is not None:
                    self.report(ctx, [err])
                    return self.typed_result(ctx.default_return_type, target.type)
            if buffer is not None and stored_name is not None and not result.errors:
                held = ops[0].type
                stored = held.mutated_by(result.type) if held else result.type
                if stored:
                    # it may carry a gradient once a value that may is stored (the zeros
                    # carry none; an operand's is read for an I one, else taken as may); the
                    # buffer itself (ops[0], a declared one typed) carries what its last store
                    # did, none before one (AMP's ``found_inf.fill_(1.0)`` of a declared
                    # ``torch.zeros(1)``, then all-reduced with op="max": no spmd-no-grad)
                    grad = (isinstance(stored_name, NameExpr)
                            and bool(self._buffer_gradient(ctx, stored_name))) or any(
                        o.type is not None and o.role is not Role.INDEX and o.can_grad
                        for o in ops[1:])
                    self.buffer_types.record(buffer[0], buffer[1],
                                             (stored_name.line, stored_name.column), stored, grad)
            if op == "__setitem__":
                return ctx.default_return_type
            # x.add_(b), x += b, torch.add(a, b, out=o): the value is the target, its type kept
            rtype = result.type
            if target is not None and target.type is not None and not result.errors:
                rtype = target.type.mutated_by(result.type)
            default = ctx.default_return_type
            if isinstance(get_proper_type(default), AnyType) and is_known(op):
                # torch/_tensor.py defines some methods without annotations (split, unflatten,
                # norm, ...): their result is a tensor, or a tuple of tensors
                inst = self.types.to_instance(rtype)
                if inst is not None:
                    if op in _SEQUENCE_RESULTS:
                        return ctx.api.named_generic_type("builtins.tuple", [inst])  # type: ignore[attr-defined]
                    return inst
            return self.typed_result(default, rtype)

        return hook

    def _zero_dim_operands(self, ctx: AnyCtx, ops: list[Operand], exprs: list[Expression | None],
                           reflected: bool) -> None:
        """Beside an operand sharded on an axis (S(i), or a rank-dependent layout), each
        operand that does not vary there gets the rank 0 where its expression is evidently
        0-d (rewrite ``is_zero_dim``: ``alpha`` of ``alpha = rs / all_reduce(spmd.sum(p *
        ap, ...), ...)``): the engine's broadcast alignment keeps S(i) beside it (engine
        ``Operand.ndim``).  ``ops`` is in the op's order (``reflected``: ``exprs`` is not)."""
        placed: list[str] = []
        for o in ops:
            t = o.type
            if t is not None:
                for a, lt in t.axes:
                    if lt.kind is _KIND_V and (lt.dim is not None or lt.by_rank is not None):
                        placed.append(a)
        if not placed:
            return
        if reflected and len(exprs) == 2:
            exprs = [exprs[1], exprs[0]]
        tree: MypyFile | None = getattr(ctx.api, "tree", None)
        regions = self.plugin.regions
        for k, o in enumerate(ops):
            t = o.type
            if t is None or o.role is Role.INDEX:
                continue
            if all((here := t.get(a)) is not None and here.kind is _KIND_V for a in placed):
                continue  # varies wherever another operand is placed: its rank is not read
            if regions.zero_dim(tree, ctx.context.line, exprs[k]):
                ops[k] = replace(o, ndim=0)

    def _rank_derived(self, ctx: AnyCtx, ops: list[Operand]
                      ) -> tuple[Operand, list[str], str, Expression, bool] | None:
        """An op whose index, bound, mask or scalar is computed from a rank query (the
        pre-pass found it: rank_index): that value as a Varying index operand on the axes the
        query runs over that an operand mentions (engine ``rank_index_operand``), its text,
        the expression, and whether the query runs over every mesh axis; None for any other
        op (:meth:`_propagate_ranked` types the op with it)."""
        found = self.plugin.regions.rank_axes(ctx.context)
        if found is None:
            return None
        axes, by = found
        typed = {a for o in ops if o.type for a, _ in o.type.axes}
        mesh = [a for a in axes_in(axes, self.plugin.config.mesh_axes) if a in typed]
        if not mesh:
            return None
        cut = _cut_dim(ctx.context, by)
        if isinstance(by, TupleExpr) and cut is not None:  # [:, r * b:(r + 1) * b]
            by = by.items[cut]
        if isinstance(by, SliceExpr):  # r * b:(r + 1) * b
            text = ":".join("" if p is None else bare(expr_text(p))
                            for p in (by.begin_index, by.end_index, by.stride)[:3 if by.stride else 2])
        else:
            text = expr_text(by)
        every = EVERY in axes and UNNAMED_GROUP not in axes
        return rank_index_operand(mesh, text, cut), mesh, text, by, every

    def _propagate_ranked(self, ctx: AnyCtx, spec: OpSpec, ops: list[Operand], strict: bool,
                          reduction: Reduction | None, move: DimMove | Contraction | None,
                          ranked: tuple[Operand, list[str], str, Expression, bool] | None
                          ) -> Result:
        """The op typed with operands ``ops``, and with the rank-derived index ``ranked``
        (:meth:`_rank_derived`) beside them; the errors that index adds first say, where the
        query runs over every mesh axis but the operands vary on some only, that it counts
        axes it should not (``dist.get_rank()`` where ``mesh.get_local_rank("dp")`` is meant)."""
        result = propagate_memo(spec, ops, strict, reduction, move)
        if ranked is None:
            return result
        operand, mesh, text, by, every_axis = ranked
        typed_result = propagate_memo(spec, [*ops, operand], strict, reduction, move)
        if every_axis and typed_result.errors != result.errors:
            # the errors the query's V made: first, whether the query counts axes it should not
            every = _rank_every(ops, mesh, text, by, global_calls.current_function(ctx.api))
            if every is not None:
                new = [e for e in typed_result.errors if e not in result.errors]
                hinted = every.prefixed(new)
                return Result(typed_result.type, [hinted[new.index(e)] if e in new else e
                                                  for e in typed_result.errors])
        return typed_result

    def _reduced_gradient_hint(self, ctx: AnyCtx, errors: list[SpmdError],
                               ops: list[Operand]) -> list[SpmdError]:
        """An optimizer step (an in-place update where gradients are off) that adds a Partial
        into a Replicate parameter: the checker reads ``p.grad`` as backward() leaves it (the
        dual type), whatever a gradient hook or a ``p.grad = all_reduce(...)`` elsewhere did to
        it.  The engine's fix (all_reduce it first) would then sum the gradient twice: the
        message also says how to tell the checker it is reduced already."""
        if not self.plugin.regions.in_no_grad(getattr(ctx.api, "tree", None), ctx.context.line):
            return errors
        target = ops[0].type
        out = []
        for err in errors:
            if err.code == "spmd-partial-affine" and target:
                for o in ops[1:]:
                    t = o.type
                    if t is None:
                        continue
                    axes = [a for a, lt in t.axes if lt.kind is Kind.P
                            and _kind_on(target, a) is Kind.R]
                    if axes:
                        declared = t
                        for a in axes:
                            declared = declared.replace(a, REPLICATE)
                        typ = format_type(declared, self.plugin.config.mesh_axes)
                        listed = o.text[:-len(_LIST_ITEM)] if o.text.endswith(_LIST_ITEM) else None
                        if listed is None:
                            text = bare(o.text)  # spmd.declare(g * lr, ...), not ((g * lr), ...)
                            what, fix = f"{text} is a gradient", f"spmd.declare({text}, {typ})"
                        else:  # a _foreach op's list variable: declare its items
                            what = f"{listed} holds gradients"
                            fix = f"[spmd.declare(g, {typ}) for g in {listed}]"
                        err = SpmdError(err.code, (
                            f"{err.message}; if {what} reduced already (a hook or p.grad = "
                            f"all_reduce(...) elsewhere: the checker reads .grad as backward() "
                            f"leaves it), say so: {fix} (trusted here; spmd.typecheck() checks "
                            f"it at run time)"))
                        break
            out.append(err)
        return out

    def foreach_hook(self, name: str) -> Callable[[FunctionContext], Type]:
        """``torch._foreach_<op>(xs, ys, ...)`` (optimizers' and ``clip_grad_norm_``'s
        multi-tensor ops): ``<op>`` at each list position, item ``k`` of every list with the
        other arguments as they are (engine ``foreach_op``, as the check mode runs it)::

            torch._foreach_add_(params, grads, alpha=-lr)  ==  params[k].add_(grads[k], alpha=-lr)

        A list variable holds one item type (its positions agree), a display ``[a, b]`` one
        per position, as does a local list certain to hold its display (``bufs = [a, b]``
        only read: :mod:`.fixed_lists`); an in-place op may not change a list's item type, an
        out-of-place one returns ``tuple[T, ...]`` (T: the join of every position's result)."""
        each = foreach_op(name) or name
        spec = classify(each)
        inplace, writes = foreach_writes(name)
        first_step = FUSED_FIRST_STEP.get(name)

        def hook(ctx: FunctionContext) -> Type:
            groups = self._foreach_positions(ctx)
            if groups is None:
                return ctx.default_return_type
            # SGD's first fused step (is_first_step=True): the states are overwritten unread
            fresh = first_step is not None and any(
                f == first_step and len(es) == 1 and isinstance(es[0], NameExpr)
                and es[0].fullname == "builtins.True"
                for f, es in zip(ctx.callee_arg_names, ctx.args))
            errors: list[SpmdError] = []
            results: list[list[SpmdType]] = []  # per group (a position, or all of them)
            for group in groups:
                group_results: list[SpmdType] = []
                for arg_types, args in group:
                    found = self._foreach_position(ctx, each, spec, inplace, writes, fresh,
                                                   arg_types, args)
                    if found is not None:
                        errors.extend(e for e in found[0] if e not in errors)
                        group_results.append(found[1])
                results.append(group_results)
            self.report(ctx, errors)
            if inplace or not any(results) or errors:
                return ctx.default_return_type
            insts_at: list[Type] = []
            for group_results in results:
                insts = [self.types.to_instance(t) for t in group_results]
                if not insts or any(i is None for i in insts):
                    return ctx.default_return_type
                insts_at.append(make_simplified_union(insts))  # type: ignore[arg-type]
            tuple_of = ctx.api.named_generic_type(  # type: ignore[attr-defined]
                "builtins.tuple", [make_simplified_union(insts_at)])
            # not one type per position even where the lists' items are known by position:
            # a name bound to the result and rebound from another list (or in another branch)
            # would be mypy's [assignment] error (tuple[A, B] vs tuple[C, ...]): the regression
            # probe of session 35
            return tuple_of

        return hook

    def _foreach_position(self, ctx: FunctionContext, each: str, spec: Any, inplace: bool,
                          writes: Any, fresh: bool, arg_types: list[list[Type]],
                          args: list[list[Expression]]) -> tuple[list[SpmdError], SpmdType] | None:
        """The op at one list position (one pairing of the lists' items): its errors and
        result type, None when nothing there is typed."""
        if fresh:
            pctx = ctx._replace(
                arg_types=[[] if j in writes else t for j, t in enumerate(arg_types)],
                args=[[] if j in writes else e for j, e in enumerate(args)])
        else:
            pctx = ctx._replace(arg_types=arg_types, args=args)
        ops, _, any_typed = self.operands(pctx, None, None, each)
        if not any_typed:
            return None
        if global_calls.any_global(ops):  # a partition spec: the global rule
            result = global_calls.propagate(self, pctx, each, ops)
        else:
            result = propagate(spec, ops, strict=self.strict(ctx))
        found = list(result.errors)
        if inplace and found:
            found = self._reduced_gradient_hint(pctx, found, ops)
        if inplace and ops and ops[0].type:
            err = self._inplace_error(ctx, each, ops[0], result.type, ops)
            if err is not None:
                found.append(err)
        for j in writes:  # a fused optimizer's states, written as the parameter is
            if j < len(arg_types) and arg_types[j] and args[j]:
                written: Type = arg_types[j][0]  # typed: get_proper_type's overloads on Any
                state = self.types.from_type(get_proper_type(written))  # picked None in mypyc
                if state:
                    err = self._inplace_error(
                        ctx, each, Operand(state, expr_text(args[j][0])), result.type, ops)
                    if err is not None:
                        found.append(err)
        return found, result.type

    def _foreach_positions(self, ctx: FunctionContext
                           ) -> list[list[tuple[list[list[Type]], list[list[Expression]]]]] | None:
        """The arguments of a ``_foreach`` call at each list position, or None (no list of
        tensors): a list display's items by position, a tuple's, those of a local list certain
        to hold its display (:func:`fixed_lists.fixed_list`); a list variable's item type (each
        of its kinds, for a join such as ``list[Tensor[R_P]]``) at every position.

        Returned grouped by position where some list's items are known by position (a group:
        that position's items with each kind of the list variables); else one group of every
        pairing of the variables' kinds."""
        lists: dict[tuple[int, int], list[tuple[Type, Expression]]] = {}
        by_position: set[tuple[int, int]] = set()  # the lists known item by item
        length = None
        for i, (types, exprs) in enumerate(zip(ctx.arg_types, ctx.args)):
            for j, (t, e) in enumerate(zip(types, exprs)):
                p = get_proper_type(t)
                if self.types.from_type(p) is not None or not (
                        isinstance(p, TupleType) or (isinstance(p, Instance) and p.type.fullname in _TENSOR_CONTAINERS)):
                    continue
                items = self._container_items(t, e, ctx)
                if not items or any(self.types.from_type(it) is None for it, _ in items if it is not None):
                    continue  # a list of numbers (scalars=), or nothing typed
                shown = self._fixed_items(e, items, ctx)
                if shown is not None or (
                        isinstance(e, (ListExpr, TupleExpr)) and not any(isinstance(it, StarExpr) for it in e.items)
                        or isinstance(p, TupleType)):
                    if shown is None and isinstance(e, (ListExpr, TupleExpr)):
                        shown = [(it, ie) for it, ie in items if it is not None]
                    elif shown is None:  # a tuple's items, named as its items (``upd[k]``)
                        at_k = item_name(e)
                        shown = [(it, at_k) for it, _ in items if it is not None]
                    if length is not None and length != len(shown):
                        return None  # torch rejects lists of different lengths
                    length = len(shown)
                    lists[(i, j)] = shown
                    by_position.add((i, j))
                else:  # a list variable: each kind it may hold, at every position
                    at_k = item_name(e)
                    lists[(i, j)] = [(it, at_k) for it, _ in items if it is not None]
        if not lists:
            return None
        groups: list[list[dict[tuple[int, int], tuple[Type, Expression]]]] = [[{}]]
        if length is not None:  # position k of each list known by position
            groups = [[{key: lists[key][k] for key in by_position}] for k in range(length)]
        count = len(groups)
        for key, options in lists.items():
            if key in by_position:
                continue
            groups = [[{**c, key: o} for c in group for o in options] for group in groups]
            count *= len(options)
            if count > 64:
                return None
        out = []
        for group in groups:
            positions = []
            for combo in group:
                arg_types = [list(g) for g in ctx.arg_types]
                args = [list(g) for g in ctx.args]
                for (i, j), (t, e) in combo.items():
                    arg_types[i][j] = t
                    args[i][j] = e
                positions.append((arg_types, args))
            out.append(positions)
        return out

    def _fixed_items(self, e: Expression, items: list[tuple[Type | None, Expression]],
                     ctx: FunctionContext) -> list[tuple[Type, Expression]] | None:
        """A local list variable of several kinds certain to hold its display
        (:func:`fixed_lists.fixed_list`): the display's items' types by position, named as the
        list's items (``bufs[k]``); None otherwise."""
        if not isinstance(e, NameExpr) or e.kind != LDEF or len(items) < 2:
            return None
        func = global_calls.current_function(ctx.api)
        display = fixed_list(func, e.name) if func is not None else None
        if display is None:
            return None
        at_k = item_name(e)
        shown: list[tuple[Type, Expression]] = []
        for item in display.items:
            t = lookup_type(ctx.api, item)
            if t is None or self.types.from_type(t) is None:
                return None
            shown.append((t, at_k))
        return shown

    def bound_builtin_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        """A torch.linalg / special / fft builtin given its docstring's signature
        (:mod:`.torch_namespaces`): the op torch names it (``linalg_vector_norm``) where an
        operand is typed; else ``Any``, its type without the plugin (gradual)."""
        hook = self.op_hook(op, method=False)
        decomposition = DECOMPOSITIONS.get(op)

        def typed(ctx: FunctionContext) -> Type:
            if decomposition is not None:
                # a tuple of results (torch_namespaces.DECOMPOSITIONS): each typed by the op
                default = self._decomposition_tuple(*decomposition)
                if default is not None:
                    result = hook(ctx._replace(default_return_type=default))
                    return untyped_result(ctx) if result is default else result
            result = hook(ctx)
            return untyped_result(ctx) if result is ctx.default_return_type else result

        return typed

    def type_of_expr(self, ctx: AnyCtx) -> Callable[[Expression], SpmdType | None]:
        """The SPMD type mypy inferred for an expression already checked (None: unknown)."""
        lookup = getattr(ctx.api, "lookup_type_or_none", None)

        def type_of(e: Expression) -> SpmdType | None:
            t = lookup(e) if lookup is not None else None
            return self.types.from_type(t) if t is not None else None

        return type_of

    def _decomposition_tuple(self, n: int, cls: str) -> TupleType | None:
        """``tuple[Tensor, ...]`` of ``n`` items as torch's named tuple ``cls``, or None when
        torch's classes are not at hand."""
        lookup = self.plugin.dispatch.lookup_info
        info, tensor = lookup(cls), lookup("torch._tensor.Tensor")
        if info is None or tensor is None:
            return None
        return TupleType([Instance(tensor, [])] * n, Instance(info, []))

    def _inplace_error(self, ctx: AnyCtx, where: str, target: Operand, result: SpmdType,
                       ops: list[Operand], whole: bool = False) -> SpmdError | None:
        """The in-place op (or ``out=``) changing ``target``'s type, if it does (engine
        ``check_inplace``); where no gradient flows an I target may take an R result (and
        stays I).  ``whole``: ``x[...] = v`` / ``x[:] = v``, every element written."""
        err = check_inplace(where, target, result, others=ops, whole_store=whole)
        if err is not None and self.plugin.regions.in_no_grad(
                getattr(ctx.api, "tree", None), ctx.context.line):
            err = check_inplace(where, target, result, gradient_free=True, others=ops,
                                whole_store=whole)
        return err

    def per_operand_result(self, ctx: AnyCtx, op: str, ops: list[Operand]) -> Type:
        """``torch.broadcast_tensors(a, b)``, ``torch.atleast_2d(a, b)``: each tensor argument
        is viewed by itself (engine ``propagate_each``), so the result is a tuple of one type
        per argument (``atleast_*`` of one tensor: that tensor); a list or ``*xs`` argument
        gives ``tuple[T, ...]`` when its items share one type.  torch leaves these functions
        unannotated (Any)."""
        default = ctx.default_return_type
        insts: list[Type] = []
        for r in propagate_each(op, ops, strict=self.strict(ctx)):
            self.report(ctx, r.errors)
            inst = self.types.to_instance(r.type)
            if inst is None:
                return default
            insts.append(inst)
        actuals = [t for types in ctx.arg_types for t in types]
        kinds = [k for ks in ctx.arg_kinds for k in ks]
        separate = (len(actuals) == len(insts) and all(k == ARG_POS for k in kinds)
                    and all(self.types.from_type(t) is not None for t in actuals))
        if separate and len(insts) == 1 and op != "broadcast_tensors":
            return insts[0]
        union = make_simplified_union(insts) if insts else AnyType(TypeOfAny.special_form)
        tuple_of = ctx.api.named_generic_type("builtins.tuple", [union])  # type: ignore[attr-defined]
        if separate:
            return TupleType(insts, tuple_of)
        if insts and all(i == insts[0] for i in insts) and not any(_is_scalar(t) for t in actuals):
            return tuple_of
        return default

    def parameter_hook(self, ctx: FunctionContext) -> Type:
        """``nn.Parameter(w)`` where a typed tensor is expected (``self.w = nn.Parameter(w)``
        with ``w: Tensor[R["tp"]]`` declared in the class): the parameter has ``w``'s type, so
        the assignment is checked as ``self.w = w`` is.  Elsewhere it stays mypy's
        ``Parameter`` (``register_parameter``, a ``Parameter`` annotation)."""
        ret = ctx.default_return_type
        contexts = getattr(getattr(ctx.api, "expr_checker", None), "type_context", None)
        expected = get_proper_type(contexts[-1]) if contexts else None
        # the canonical class only: a Parameter, a plain tensor or a type variable (a generic
        # callee's first inference pass) keeps mypy's Parameter
        if not (isinstance(expected, Instance) and expected.type.fullname == TENSOR):
            return ret
        data_expr, data_type = self._arg(ctx, "data")
        if data_type is None:
            return ret
        if get_proper_type(data_type) == expected:  # the declared type itself (the usual case)
            return expected
        data = self.types.from_type(data_type)
        if not data:  # an untyped tensor (torch.empty(...)): a Parameter, gradual
            return ret
        want = self.types.from_type(expected)
        if want is not None:
            # checked here, on the data: the fix goes inside (nn.Parameter(reinterpret(w, ...))
            # is a leaf of the declared type; a conversion of the Parameter would not be one)
            text = expr_text(data_expr)
            errors = coll.check_argument(data, want, x_text=text,
                                         where=f"the data {text} of nn.Parameter(...)")
            if errors:
                self.report(ctx, errors)
                return expected
        inst = self.types.to_instance(data)
        return inst if inst is not None else ret

    def builtin_sum_hook(self, ctx: FunctionContext) -> Type:
        """``sum(xs)`` / ``sum(xs, start)`` of tensors: one add of the items and the start.

        mypy's result is the items' type (their join for a display) ``| Literal[0]`` (an
        empty iterable; Python starts from 0, a zero summand) or ``| start``'s type: each
        tensor kind in it is an operand, as the items of ``torch.cat`` are::

            sum([p, r])  ->  Tensor[R_P] | Literal[0]  ->  add(P, R): spmd-partial-affine"""
        ret = ctx.default_return_type
        p = get_proper_type(ret)
        members: list[Type] = []
        for m in p.items if isinstance(p, UnionType) else [ret]:
            members.extend(self.types.members(m) or [m])
        items = ctx.args[0][0] if ctx.args and ctx.args[0] else None
        ops: list[Operand] = []
        if items is not None and ctx.arg_types[0]:  # a display: each item with its own text
            for it, ie in self._container_items(ctx.arg_types[0][0], items, ctx):
                t = self.types.from_type(it)
                if t is not None:
                    ops.append(self.operand(ctx, ie, t))
        if not any(o.type for o in ops):  # a generator, an iterable of another class
            # the result is the items' type joined with the start's: the start's own type is
            # its operand below (an item of that type adds nothing the rule could reject)
            starts = {self.types.from_type(t) for t in ctx.arg_types[1]} if len(ctx.arg_types) > 1 else set()
            typed = [t for t in (self.types.from_type(m) for m in members) if t is not None and t not in starts]
            # (inside torch.no_grad() the items carry no gradient: SPEC section 3's relaxation)
            grad = self.can_grad(ctx, None) if typed else True
            # a generator's items are named by its element (``q`` of ``(q for q in ps)``)
            shown = items.left_expr if isinstance(items, GeneratorExpr) else items
            ops = [Operand(t, expr_text(shown), grad) for t in dict.fromkeys(typed)]
        if not any(o.type for o in ops):
            return ret
        if len(ctx.args) > 1:  # the start
            for start, start_type in zip(ctx.args[1], ctx.arg_types[1]):
                st = self.types.from_type(start_type)
                if st is not None:
                    ops.append(self.operand(ctx, start, st))
                elif _is_scalar(start_type):
                    ops.append(Operand(None, expr_text(start), zero=is_zero_literal(start, start_type)))
        if global_calls.any_global(ops):  # global SPMD: an elementwise add's shard propagation
            result = global_calls.propagate(self, ctx, "add", ops)
        else:
            result = propagate(_BUILTIN_SUM, ops, strict=self.strict(ctx))
        self.report(ctx, result.errors)
        inst = self.types.to_instance(result.type)
        if inst is None:
            return ret
        out = [inst if self.types.from_type(m) is not None else m for m in members]
        return make_simplified_union(out) if len(out) > 1 else out[0]

    def builtin_minmax_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        """Python's ``max(a, b, ...)`` / ``min(...)`` (and ``max(xs)``) of tensors compares
        them (``a > b``, a non-linear op): checked as torch's ``maximum`` / ``minimum`` of the
        items, so ``max(p, r)`` of a Partial is the non-linear error (comparing pending sums
        means nothing), and so is ``max(loss_p, 1e-6)``.  The result is mypy's (one of the
        items: their union), not the rule's: a narrower result would become the type
        context of an enclosing generic call, against which mypy re-checks the items
        (``reveal(max(v, r))`` would reject r).  ``key=`` / ``default=`` are not items."""

        def hook(ctx: FunctionContext) -> Type:
            ret = ctx.default_return_type
            items: list[tuple[Type, Expression]] = []
            key: Expression | None = None
            for formal, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args):
                if formal == "key" and exprs:
                    key = exprs[0]
                elif formal != "default":
                    items.extend(zip(types, exprs))
            if len(items) == 1:  # max(xs): the iterable's items (max(t): t's rows), which
                # it compares with each other: one item type stands for two operands
                whole = items[0][1]
                at_k = item_name(whole)
                items = [(t, at_k if e is whole else e)
                         for t, e in self._container_items(items[0][0], whole, ctx) if t is not None]
                if len(items) == 1 and key is None:
                    items = items * 2
            if key is not None:
                # ``max(ps, key=len)``: the keys are compared, not the items; a torch function
                # as the key is applied to each item (a lambda's body mypy checks itself)
                self.plugin.applied.apply_each(ctx, key, [(t, e) for t, e in items if self.types.from_type(t)])
                return ret
            ops: list[Operand] = []
            for t, e in items:
                st = self.types.from_type(t)
                if st is not None:
                    ops.append(source_operand(st, e, expr_text))
                elif _is_scalar(t):
                    ops.append(source_operand(None, e, expr_text))
            if (len(ops) > 1 and any(o.type for o in ops if o.type is not None)
                    and not global_calls.any_global(ops)):
                self.report(ctx, propagate(op, ops, strict=self.strict(ctx)).errors)
            return ret

        return hook

    def checkpoint_hook(self, ctx: FunctionContext) -> Type:
        """``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=..., **kwargs)`` runs
        ``fn(*args, **kwargs)`` (twice: forward, and again in backward): typed as that call,
        which mypy checks like any other (its hooks, its arguments), at the checkpoint's line.
        torch leaves checkpoint unannotated, so its result was Any and ``fn``'s parameters
        went unchecked.  Only when an argument is a typed tensor (gradual, and cheap)."""
        default = ctx.default_return_type
        c = ctx.context
        if not isinstance(c, CallExpr) or not c.args or c.arg_kinds[0] != ARG_POS:
            return default
        if not any(self.types.from_type(t) for group in ctx.arg_types[1:] for t in group):
            return default
        keep = [k for k in range(1, len(c.args)) if c.arg_names[k] not in _CHECKPOINT_OWN]
        call = CallExpr(c.args[0], [c.args[k] for k in keep], [c.arg_kinds[k] for k in keep],
                        [c.arg_names[k] for k in keep])
        call.set_line(c)
        checker = getattr(ctx.api, "expr_checker", None)
        if checker is None:
            return default
        try:
            return checker.accept(call)
        except Exception:  # noqa: BLE001 - never crash mypy: the call stays untyped
            return default

    def backward_hook(self, ctx: MethodContext) -> Type:
        """``y.backward()`` needs y I or P on every axis; ``y.backward(g)`` needs g the dual of y."""
        t = self.types.from_type(ctx.type)
        if not t:
            return ctx.default_return_type
        c = ctx.context
        receiver = c.callee.expr if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr) else None
        g_expr, g_type = self._arg(ctx, "gradient")
        if g_expr is None or (isinstance(g_expr, NameExpr) and g_expr.fullname == "builtins.None"):
            self.report(ctx, check_backward(Operand(t, expr_text(receiver))))
            return ctx.default_return_type
        g = self.types.from_type(g_type)
        if g:
            self.report(ctx, duality.check_grad_outputs(
                [duality.Slot.tensor(expr_text(receiver), t)], [duality.Slot.tensor(expr_text(g_expr), g)],
                f"{expr_text(receiver)}.backward"))
        return ctx.default_return_type

    def value_read_hook(self, read: str, *, method: bool) -> Callable[[AnyCtx], Type]:
        """A read of a tensor's values out of the tensor world (engine ``VALUE_READS``):
        ``x.item()`` / ``x.tolist()`` / ``x.numpy()`` / ``x.__bool__()`` ... (``method``: the
        receiver; for ``v in x`` mypy calls ``x.__contains__(v)``), or ``float(x)`` /
        ``int(x)`` / ``bool(x)`` / ``complex(x)`` (the argument): a Partial gives this rank's
        summand (engine ``check_value_read``).  mypy's result is kept."""

        def hook(ctx: AnyCtx) -> Type:
            if method:
                typ: Type = ctx.type  # type: ignore[union-attr]
                c = ctx.context
                if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr):
                    x: Expression | None = c.callee.expr
                elif isinstance(c, ComparisonExpr) and len(c.operands) == 2:
                    x = c.operands[1]  # v in x
                else:
                    x = None
            else:
                if not ctx.arg_types or len(ctx.arg_types[0]) != 1:
                    return ctx.default_return_type
                typ, x = ctx.arg_types[0][0], ctx.args[0][0]
            self.check_value_read(ctx.api, read, typ, x, ctx.context)
            return ctx.default_return_type

        return hook

    def check_condition(self, api: Any, conditions: Sequence[Expression]) -> None:
        """``if x:`` / ``while x:`` / ``assert x`` (and the operands of ``not``, ``and``,
        ``or`` there): Python reads ``x``'s truth value (``x.__bool__()``), which mypy types
        without a hook; the pre-pass puts a trigger at the start of the body (rewrite
        section 3), by then mypy has typed the condition."""
        for e in conditions:
            typ = lookup_type(api, e)
            if typ is not None:
                self.check_value_read(api, "__bool__", typ, e, e)

    def check_grad_assignment(self, api: Any, stmt: AssignmentStmt) -> None:
        """``p.grad = value``, at the trigger after the statement (rewrite section 3): the
        value against ``p``'s gradient type (engine ``duality.check_grad_assignment``; the
        getter reads ``p.grad`` as the dual, the setter takes any tensor).  A plain value,
        an owner or value of several types (a union: a loop over differently typed
        parameters) stay unchecked (gradual)."""
        if len(stmt.lvalues) != 1 or not isinstance(stmt.lvalues[0], MemberExpr):
            return
        target = stmt.lvalues[0]
        if target.name != "grad":
            return
        owner_type = lookup_type(api, target.expr)
        value_type = lookup_type(api, stmt.rvalue)
        if owner_type is None or value_type is None:
            return
        owner = self.types.from_type(owner_type)
        value = self.types.from_type(value_type)
        if not owner or not value:
            return
        # the verdict first: the texts and the narrowed local (a walk of the function) only
        # shape the messages of a mismatch
        if not duality.check_grad_assignment(owner, value, target="", value_text=""):
            return
        errors = duality.check_grad_assignment(owner, value, target=expr_text(target),
                                               value_text=expr_text(stmt.rvalue),
                                               narrowed=narrowed_local(api, target, stmt.rvalue))
        if errors:
            self.report_at(api, errors, stmt.rvalue)

    def check_value_patterns(self, ctx: FunctionContext, case: MatchCase) -> None:
        """A ``match`` case's value patterns: ``case 0:`` is ``subject == 0`` (nested, of the
        subject's item, value or attribute: match_patterns), the op ``eq`` as ``p == 0`` is;
        checked where the case's body starts (rewrite section 3), with the subject as this
        case can see it (narrowed by the earlier cases and this pattern)."""
        api = ctx.api
        match, pattern = case
        subject = self._match_subject_type(api, match)
        if subject is None:
            return
        target = match.subject.target if isinstance(match.subject, AssignmentExpr) else match.subject
        for typ, text, vp in value_comparisons(subject, expr_text(target), target, pattern,
                                               expr_text):
            value_type = lookup_type(api, vp.expr)
            if value_type is None:
                continue
            value_t = self.types.from_type(value_type)
            if value_t is not None:
                value = Operand(value_t, expr_text(vp.expr))
            elif _is_scalar(value_type):
                value = Operand(None, expr_text(vp.expr), zero=is_zero_literal(vp.expr, value_type))
            else:
                continue  # a string, an enum member, ...: a tensor compares unequal, reads nothing
            members = self.types.alternatives(typ)
            for m in (members if members is not None else [typ]):
                t = self.types.from_type(m)
                if t is None and value.type is None:
                    continue
                if t is None and not _is_scalar(m):
                    continue
                ops = [Operand(t, text) if t is not None else Operand(None, text), value]
                if not any(o.type is not None and (bool(o.type) or bool(o.type.failed))
                           for o in ops) or global_calls.any_global(ops):
                    continue  # no typed tensor (as the op hook: strict mode asks nothing)
                errors = propagate(_EQ, ops, strict=self.strict(ctx)).errors
                if errors:
                    self.report_at(api, errors, vp)

    def _match_subject_type(self, api: Any, match: MatchStmt) -> Type | None:
        """The type of a ``match``'s subject where a case's body starts: as the binder has
        narrowed it (the subject, or mypy's stand-in for a subject that is no name), else
        as mypy typed the subject."""
        subject = match.subject
        declared = lookup_type(api, subject)
        binder = getattr(api, "binder", None)
        if declared is None or binder is None:
            return declared
        target = subject.target if isinstance(subject, AssignmentExpr) else subject
        for e in (target, match.subject_dummy):
            if e is not None and literal(e) == LITERAL_TYPE:
                restriction = binder.get(e)
                if restriction is not None:  # as mypy's narrow_type_from_binder
                    return narrow_declared_type(declared, restriction)
        return declared

    def check_value_read(self, api: Any, read: str, typ: Type, x: Expression | None,
                         at: Context) -> None:
        """Engine ``check_value_read`` of a value of type ``typ`` (expression ``x``), reported
        at ``at``: a union by each of its tensor members (None dropped; errors that differ
        only in the member's type are one, fold_into_earlier)."""
        members = self.types.alternatives(typ)
        for m in (members if members is not None else [typ]):
            t = self.types.from_type(m)
            if not t:
                continue
            err = check_value_read(read, Operand(t, expr_text(x)))
            if err is not None:
                self.report_at(api, [err], at)

    def strict(self, ctx: AnyCtx) -> bool:
        """``strict`` for the module being checked (its override in the config, if any); or
        the code ``spmd-untyped`` enabled for it as mypy enables codes (``--enable-error-code
        spmd-untyped``, ``enable_error_code`` in the config, an inline ``# mypy:`` comment):
        the code is on by default, so enabling it can only mean asking for strict mode."""
        api = ctx.api
        options = getattr(api, "options", None)
        # the module being checked has one checker and one Options: its answer, kept for the
        # calls that follow in it (the objects held, so never another module's by a reused id)
        last = self._last_strict
        if last is not None and last[0] is api and last[1] is options:
            return last[2]
        found = self._strict_of(ctx, options)
        self._last_strict = (api, options, found)
        return found

    def _strict_of(self, ctx: AnyCtx, options: object) -> bool:
        """:meth:`strict`'s answer, made."""
        config = self.plugin.config
        if config.overrides:
            tree = getattr(ctx.api, "tree", None)
            if config.strict_for(tree.fullname if isinstance(tree, MypyFile) else ""):
                return True
        elif config.strict:
            return True
        return options is not None and _UNTYPED_CODE in options.enabled_error_codes  # type: ignore[attr-defined]

    def _augmented(self, ctx) -> bool:  # noqa: ANN001 - AttributeContext
        """``p.grad += g``: mypy reads the target as an assignment target, but the in-place op
        takes it as an operand (checked like ``p.grad.add_(g)``)."""
        return self.plugin.regions.is_augmented_attribute(getattr(ctx.api, "tree", None), ctx.context)

    def grad_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - AttributeContext
        t = self.types.from_type(ctx.type)
        if not t or ctx.is_lvalue and not self._augmented(ctx):
            return ctx.default_attr_type  # writing .grad (a finalised gradient) is unchecked
        if self._assigns_grad(ctx):
            return ctx.default_attr_type
        inst = self.types.to_instance(t.dual())
        if inst is None:
            return ctx.default_attr_type
        p = get_proper_type(ctx.default_attr_type)
        if isinstance(p, UnionType):
            return UnionType([inst if self.types.from_type(i) is not None else i for i in p.items])
        return inst

    def _assigns_grad(self, ctx: Any) -> bool:
        """Whether this ``x.grad`` is the target of ``x.grad = value``: mypy asks the getter's
        type there and narrows the attribute to it after the assignment (a property), so the
        dual would stand for the assigned value at every later read (``p.grad =
        all_reduce(...)`` then ``p.grad`` read as P, and ``| None``).  mypy's declared type
        there lets it narrow to the value assigned, as without the plugin."""
        target = ctx.context
        if not isinstance(target, MemberExpr):
            return False
        func = global_calls.current_function(ctx.api)
        if func is None:
            return False
        targets = self._grad_assignments.get(func)
        if targets is None:
            targets = _grad_targets(func.body.body)
            if len(self._grad_assignments) > 1_000:
                self._grad_assignments.clear()
            self._grad_assignments[func] = targets
        return any(t is target for t in targets)

    def identity_hook(self, ctx: AnyCtx) -> Type:
        """``nn.Identity()(x)``: x's type (torch's forward takes and returns Any)."""
        if ctx.arg_types and ctx.arg_types[0] and self.types.from_type(ctx.arg_types[0][0]):
            return ctx.arg_types[0][0]
        return ctx.default_return_type

    def iter_hook(self, ctx: MethodContext) -> Type:
        """``for row in x``: the rows are ``x.select(0, i)`` (torch's ``__iter__`` is
        unannotated: mypy's items were Any, the type silently dropped)."""
        t = self.types.from_type(ctx.type)
        if not t or t.spec is not None:  # a global tensor's rows: left to mypy (plain), as before
            return ctx.default_return_type
        row = propagate("select", [Operand(t)], move=make_move("select", {"dim": 0})).type
        inst = self.types.to_instance(row)
        if inst is None:
            return ctx.default_return_type
        return ctx.api.named_generic_type("typing.Iterator", [inst])  # type: ignore[attr-defined]

    def data_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - AttributeContext
        """``x.data``: the same values as ``x``, without the gradient: ``x``'s type.

        The target of ``x.data = v`` is unchecked (a parameter's storage swapped), except
        for ``x`` sharded on a known dim: there the setter takes ``x``'s type, so that mypy
        compares ``v`` with it and the boundary check judges the shard dims alone
        (engine ``check_data_assignment``)."""
        t = self.types.from_type(ctx.type)
        if not t:
            return ctx.default_attr_type
        if ctx.is_lvalue and not self._augmented(ctx):
            if not any(lt.dim is not None for _, lt in t.axes) or t.spec is not None:
                return ctx.default_attr_type
        inst = self.types.to_instance(t)
        return inst if inst is not None else ctx.default_attr_type

    def structseq_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - AttributeContext
        """``x.max(dim=0).values``: a field of a ``torch.return_types`` result (a tuple
        whose items the op hook typed; torch's stubs give each field a property returning a
        plain Tensor, in the order of the items)."""
        p = get_proper_type(ctx.type)
        c = ctx.context
        if not isinstance(p, TupleType) or ctx.is_lvalue or not isinstance(c, MemberExpr):
            return ctx.default_attr_type
        fields = [name for name, sym in p.partial_fallback.type.names.items()
                  if (isinstance(sym.node, Decorator) and sym.node.func.is_property)
                  or (isinstance(sym.node, FuncBase) and sym.node.is_property)]
        if c.name not in fields:
            return ctx.default_attr_type
        k = fields.index(c.name)
        if k >= len(p.items) or self.types.from_type(p.items[k]) is None:
            return ctx.default_attr_type
        return p.items[k]

    def transpose_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - .T / .mT / .H
        t = self.types.from_type(ctx.type)
        if not t:
            return ctx.default_attr_type
        if t.spec is not None:
            c = ctx.context
            name = c.name if isinstance(c, MemberExpr) else "T"
            res = global_calls.propagate(self, ctx, {"H": "T", "mH": "mT"}.get(name, name), [Operand(t, expr_text(
                c.expr) if isinstance(c, MemberExpr) else "x")])
            self.report(ctx, res.errors)
        else:
            name = ctx.context.name if isinstance(ctx.context, MemberExpr) else "T"
            res = propagate(name, [Operand(t)], move=make_move(name, {}))
        inst = self.types.to_instance(res.type)
        return inst if inst is not None else ctx.default_attr_type

    def complex_part_attribute_hook(self, ctx) -> Type:  # noqa: ANN001 - .real / .imag
        """``x.real`` / ``x.imag``: the linear ops torch.real / torch.imag (a view of each
        element's part: the layout kept, a Partial stays one), as the check mode types them."""
        t = self.types.from_type(ctx.type)
        if not t:
            return ctx.default_attr_type
        c = ctx.context
        name = c.name if isinstance(c, MemberExpr) and c.name in ("real", "imag") else "real"
        operand = Operand(t, expr_text(c.expr) if isinstance(c, MemberExpr) else "x")
        if t.spec is not None:
            res = global_calls.propagate(self, ctx, name, [operand])
            self.report(ctx, res.errors)
        else:
            res = propagate(name, [operand])
        inst = self.types.to_instance(res.type)
        return inst if inst is not None else ctx.default_attr_type

    # -- spmd collectives --------------------------------------------------------------
    def _arg(self, ctx: AnyCtx, name: str) -> tuple[Expression | None, Type | None]:
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if formal == name and exprs:
                return exprs[0], types[0]
        return None, None

    def _args(self, ctx: AnyCtx) -> dict[str, tuple[Expression | None, Type | None]]:
        """Every formal's first argument and its type (:meth:`_arg` of each, read at once)."""
        found: dict[str, tuple[Expression | None, Type | None]] = {}
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if formal is not None and exprs and formal not in found:
                found[formal] = (exprs[0], types[0])
        return found

    def _axis_names(self, ctx: AnyCtx, expr: Expression | None, typ: Type | None,
                    what: str, candidates: Sequence[str] = ()) -> tuple[str, ...] | None:
        """The literal axis names, or None after reporting what to write (``candidates``:
        the axes the operand's type suggests, e.g. where it is P for ``src=P``)."""
        names: list[str] | None = literal_strs(expr, typ)
        if names is not None and not names:
            self.report(ctx, [SpmdError(
                "spmd-axis", f"the axes of {what} are an empty tuple: name at least one mesh axis")])
            return None
        if names is None:
            shown = expr_text(expr)
            held = self._names_held(ctx, expr)  # DATA = ("dp", "tp") in sight: what it holds
            quoted = [f'"{a}"' for a in (held[0] if held else candidates)] or ['"tp"']
            written = quoted[0] if len(quoted) == 1 else "(" + ", ".join(quoted) + ")"
            if held and held[1] and len(quoted) == 1:
                written = f"({quoted[0]},)"  # AXES = ("tp",): the tuple it holds
            group = get_proper_type(typ) if typ is not None else None
            why = (f"; {shown} is a ProcessGroup, which names no mesh axis the checker can see "
                   f"(at runtime a group of the mesh's axes is accepted)"
                   if isinstance(group, Instance) and group.type.has_base(PROCESS_GROUP) else "")
            self.report(ctx, [SpmdError(
                "spmd-axis",
                f"the mesh axis of {what} must be a literal the checker can read: write "
                f'{what}(..., {written}, ...)'
                + ("" if candidates or held else ' or a tuple ("dp", "tp")')
                + (f", or make it a Final constant ({shown}: Final = {written}), "
                   if held else f", or use a Final constant (AXIS: Final = {quoted[0]}), ")
                + f"not {shown}{why}",
            )])
            return None
        config = self.plugin.config
        names_key = tuple(names)
        same = self._axis_tuples.get(names_key)
        if same is not None and same[0] is config:
            return same[1]  # (read before without an error)
        known = config.mesh_axes
        aliases = config.aliases
        expanded = expand_axes(names_key, aliases)
        bad = [n for n in expanded if n not in known]
        if bad:
            self.report(ctx, [unknown_axis_error(bad[0], known, "spmd-axis",
                                                 self.plugin.config.axes_setting, tuple(aliases))])
            return None
        repeated = repeated_axis_message(expanded)
        if repeated is not None:
            self.report(ctx, [SpmdError("spmd-axis", repeated + alias_note(names, aliases))])
            return None
        if len(self._axis_tuples) > 10_000:  # bound the memory of a long-lived daemon
            self._axis_tuples.clear()
        self._axis_tuples[names_key] = (config, expanded)
        return expanded

    def _names_held(self, ctx: AnyCtx, expr: Expression | None) -> tuple[list[str], bool] | None:
        """The axis names a module-level variable that is not Final holds (``DATA = ("dp",
        "tp")``, assigned once in its module) and whether as a tuple, for the message to write
        them; else None."""
        if not isinstance(expr, NameExpr) or not isinstance(expr.node, Var):
            return None
        var = expr.node
        module_name = var.fullname.rsplit(".", 1)[0] if "." in var.fullname else ""
        modules = getattr(ctx.api, "modules", None)
        tree = modules.get(module_name) if isinstance(modules, dict) else None
        if tree is None:
            return None
        found: tuple[list[str], bool] | None = None
        for d in tree.defs:
            if isinstance(d, AssignmentStmt) and any(
                    isinstance(lv, NameExpr) and lv.name == var.name for lv in d.lvalues):
                if found is not None:
                    return None  # assigned twice: no one value
                items = d.rvalue.items if isinstance(d.rvalue, TupleExpr) else [d.rvalue]
                if not items or not all(isinstance(i, StrExpr) for i in items):
                    return None
                found = ([i.value for i in items if isinstance(i, StrExpr)],
                         isinstance(d.rvalue, TupleExpr))
        return found

    def _local_type(self, ctx: AnyCtx, expr: Expression | None, which: str) -> LocalType | None | Literal[False]:
        """R/I/V/P/S(i) from a src/dst expression; None if absent; False if unreadable."""
        if expr is None:
            return None
        lt = read_local_type(expr)
        if lt is not None:
            return lt
        self.report(ctx, [SpmdError(
            "spmd-collective",
            f"{which}= must be written literally as one of R, I, V, P or S(<int>) (from spmd), "
            f"not {expr_text(expr)}: the checker reads the backward from it",
        )])
        return False

    def collective_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        def hook(ctx: FunctionContext) -> Type:
            if not is_statement_call(ctx.api, ctx.context):
                return check(ctx)
            # a statement of its own: its result dropped (typed or not), reported where the
            # call itself is right (its own error first: its fix rewrites the call)
            before = self.reported
            result = check(ctx)
            if self.reported == before and not errors_at(ctx.api, ctx.context):
                x_expr, x_type = self._arg(ctx, "x")
                self.report_discarded(ctx, x_expr, self.types.from_type(x_type))
            return result

        def check(ctx: FunctionContext) -> Type:
            args = self._args(ctx)  # (each formal's argument: the ctx's fields read once)
            x_expr, x_type = args.get("x", _NO_ARG)
            x = self.types.from_type(x_type)
            if x is not None and not x.axes and isinstance(x_expr, NameExpr):
                x = self.buffer_read(ctx, x_expr, x)  # a zero buffer's stored type
            if self.divergent:  # only files with a rank query in a condition (rank_index)
                self._typed_divergence(ctx, op, x)
            if x is None and isinstance(get_proper_type(x_type), AnyType):
                x = self.types.from_type(self._behind_any(ctx, x_expr))  # all_reduce(p * s, ...)
            if x is None:
                return ctx.default_return_type
            axis_expr, axis_type = args.get("axis", _NO_ARG)
            if op == "redistribute" and axis_expr is None:  # the partition-spec form
                return global_calls.redistribute_hook(self, ctx)
            dst_expr = args.get("dst", _NO_ARG)[0]
            if axis_expr is None or (dst_expr is None and op != "redistribute"):
                return ctx.default_return_type  # mypy already reports the missing argument
            src_expr = args.get("src", _NO_ARG)[0]
            if src_expr is dst_expr and dst_expr is not None:  # both from one **kwargs
                self.report(ctx, [SpmdError(
                    "spmd-collective",
                    f"src= and dst= must be written literally as R, I, V, P or S(<int>) (from "
                    f"spmd), not passed in **{expr_text(dst_expr)}: the checker reads the "
                    f"backward from them")])
                return self.typed_result(ctx.default_return_type, UNTYPED)
            src = self._local_type(ctx, src_expr, "src")
            dst = self._local_type(ctx, dst_expr, "dst")
            if src is False or dst is False:
                return self.typed_result(ctx.default_return_type, UNTYPED)
            axes = self._axis_names(ctx, axis_expr, axis_type, op, [
                a for a, t in x.axes if src and t.kind is src.kind])
            if axes is None:
                return self.typed_result(ctx.default_return_type, UNTYPED)
            expert_expr = args.get("expert_mode", _NO_ARG)[0]
            expert = isinstance(expert_expr, NameExpr) and expert_expr.fullname == "builtins.True"
            op_expr = args.get("op", _NO_ARG)[0]
            reduce_op = op_expr.value if isinstance(op_expr, StrExpr) else "sum"
            if reduce_op not in (coll.SCATTER_REDUCE_OPS if op == "reduce_scatter" else coll.REDUCE_OPS):
                return ctx.default_return_type  # mypy reports the op against the stub's Literal
            # the engine's answer depends on these values only, and the same few collectives
            # recur all over a code base: remembered (its result is only read)
            src_key = src or None
            dst_key = dst or None
            # looked up by the identity of the engine's types first (the same few objects
            # recur: from_type's, the markers'); hashing them by value runs their
            # interpreted __hash__ (~8k instructions a lookup).  The entries hold them, so
            # their ids are not reused while they are there.  Keyed without the operand's
            # text: only the errors read it (check_collective: whether there are any, the
            # result type and the transition do not), so an answer without errors serves
            # every operand (each module names its own); one with errors is looked up (or
            # made) with the text, its messages naming this operand.  Whether a gradient
            # flows (can_grad) changes the errors only, too: where neither value gives an
            # error the answer is one and the same, and can_grad is not read at all.
            any_grad_key = (op, id(x), axes, id(src_key), id(dst_key), expert, reduce_op)
            any_grad = self._collectives_any_grad.get(any_grad_key)
            if (any_grad is not None and any_grad[3] is not None and any_grad[0] is x
                    and any_grad[1] is src_key and any_grad[2] is dst_key):
                res = any_grad[3]
            else:
                can_grad = self.can_grad(ctx, x_expr)
                res = self._collective_answer(op, x, axes, src_key, dst_key, expert, reduce_op,
                                              x_expr, can_grad)
                if (any_grad is None or any_grad[0] is not x or any_grad[1] is not src_key
                        or any_grad[2] is not dst_key):
                    both = (not res.errors and not self._collective_answer(
                        op, x, axes, src_key, dst_key, expert, reduce_op, x_expr,
                        not can_grad).errors)
                    if len(self._collectives_any_grad) > 10_000:  # bound a daemon's memory
                        self._collectives_any_grad.clear()
                    self._collectives_any_grad[any_grad_key] = (
                        x, src_key, dst_key, res if both else None)
            self.report(ctx, res.errors)
            if (op == "reinterpret" and not res.errors and src and dst and src.kind is Kind.V
                    and dst.kind is Kind.P):
                # the claim that each rank's value is a partial sum, of an affine expression
                # with an R bias (row-parallel F.conv2d(x, w, b)): the engine decides
                self.report(ctx, claimed_partial_errors(
                    x_expr, axes, self.type_of_expr(ctx), lambda e: self.can_grad(ctx, e), ctx.api))
                self._normalised_parts(ctx, x_expr, axes, "reinterpret")
            elif (op in ("all_reduce", "reduce_scatter") and not res.errors
                  and isinstance(ctx.context, CallExpr) and x_expr is not None
                  and coll.takes_pending(op, src or None, dst or None, reduce_op)):
                # a reduction of F.linear(h, w, b) summing each rank's part: the same claim
                # as reinterpret(V->P)'s, an R bias summed once per rank (engine decides)
                self.report_taken_partial(ctx, ctx.context, x_expr, axes, dst or None)
            return self.typed_result(ctx.default_return_type, res.type)

        return hook

    def _collective_answer(self, op: str, x: SpmdType, axes: tuple[str, ...],
                           src: LocalType | None, dst: LocalType | None, expert: bool,
                           reduce_op: str, x_expr: Expression | None,
                           can_grad: bool) -> coll.CollectiveResult:
        """The engine's check_collective of a typed collective, remembered (its result is
        only read): by the identity of its engine types without the operand's text for an
        answer without errors (see collective_hook), else by value with the text."""
        by_id = (op, id(x), axes, id(src), id(dst), expert, reduce_op, can_grad)
        same = self._collectives_by_id.get(by_id)
        if same is not None and same[0] is x and same[1] is src and same[2] is dst:
            return same[3]  # (an answer without errors: only those are kept here)
        x_text = expr_text(x_expr)
        key = (op, x, axes, src, dst, expert, reduce_op, x_text, can_grad)
        found = self._collectives.get(key)
        if found is None:
            found = coll.check_collective(
                op, x, axes, src, dst, expert_mode=expert, reduce_op=reduce_op,
                x_text=x_text, can_grad=can_grad)
            if len(self._collectives) > 10_000:
                self._collectives.clear()
            self._collectives[key] = found
        if not found.errors:
            if len(self._collectives_by_id) > 10_000:  # bound a long-lived daemon's memory
                self._collectives_by_id.clear()
            self._collectives_by_id[by_id] = (x, src, dst, found)
        return found

    def report_taken_partial(self, ctx: FunctionContext, call: CallExpr, x_expr: Expression,
                             axes: Sequence[str], dst: LocalType | None) -> None:
        """A typed reduction with src=P (``call``: spmd.all_reduce/reduce_scatter, a Megatron
        mapping) of an affine expression: its R bias summed once per rank (engine
        ``claimed_partial_error``, as for reinterpret(V->P))."""
        self.report(ctx, claimed_partial_errors(
            x_expr, axes, self.type_of_expr(ctx), lambda e: self.can_grad(ctx, e), ctx.api,
            taken_dst=dst, taken_in=call))

    def report_discarded(self, ctx: FunctionContext, x_expr: Expression | None,
                         x: SpmdType | None, mapping: bool = False) -> None:
        """A typed collective (``mapping``: a Megatron mapping function) as a statement of
        its own: its result is dropped (engine ``discarded_result_error``)."""
        call = ctx.context
        if not isinstance(call, CallExpr):
            return
        self.report(ctx, [discarded_result_error(
            code_text(call),
            expr_text(x_expr) if x_expr is not None else None, x, assign_target(x_expr),
            mapping=mapping)])

    def _typed_divergence(self, ctx: FunctionContext, op: str, x: SpmdType | None) -> None:
        """``spmd.all_gather(w, "tp", ...)`` under a condition that differs between the ranks
        of "tp" (engine ``divergent_collective_error``): where it communicates."""
        entry = self.plugin.regions.divergent_call(ctx.context)
        if entry is None:
            return
        axis_expr, axis_type = self._arg(ctx, "axis")
        axes = literal_strs(axis_expr, axis_type)
        if not axes:
            return
        src_expr, dst_expr = self._arg(ctx, "src")[0], self._arg(ctx, "dst")[0]
        src = read_local_type(src_expr) if src_expr is not None else None
        dst = read_local_type(dst_expr) if dst_expr is not None else None
        if src is None and src_expr is None and x is not None and len(axes) == 1:
            src = next((t for a, t in x.axes if a == axes[0]), None)  # redistribute's default
        if not communicates(op, src, dst):
            return
        self._report_divergence(ctx, entry, f"spmd.{op}" if op != "redistribute" else op,
                                op, tuple(axes), None, True)

    def _raw_divergence(self, ctx: FunctionContext, name: str, module: str) -> None:
        """``dist.barrier()``, ``dist.all_reduce(t, group=mesh.get_group("tp"))`` under a
        condition that differs between the ranks of its group: the default group (every
        rank: every mesh axis) or a mesh axis's; another group is not read (a pipeline's
        embedding group joins some ranks only, as its condition says)."""
        entry = self.plugin.regions.divergent_call(ctx.context)
        if entry is None:
            return
        group = self._group_axis(ctx)
        if group is None:
            group = entry[4]  # group=self.tp_group of self.tp_group = mesh.get_group("tp")
            if group is None:
                return
        mesh = tuple(self.plugin.config.mesh_axes)
        axes = mesh if group == "" else (group,)
        over = "over the default group: every rank" if group == "" else None
        self._report_divergence(ctx, entry, name, name, axes, over,
                                module != "torch.distributed")

    def mapping_divergence(self, ctx: FunctionContext) -> None:
        """A Megatron mapping call that communicates forward (engine ``TYPED_MAPPINGS``:
        ``reduce_from_tensor_model_parallel_region`` is an all-reduce) under a condition that
        differs between the ranks of its group's axis: "tp" by default, or the mesh axis of
        the group= the source names (one it does not name: not read)."""
        from ..engine.megatron import TP_AXIS, TYPED_MAPPINGS
        entry = self.plugin.regions.divergent_call(ctx.context)
        call = ctx.context
        if entry is None or not isinstance(call, CallExpr) \
                or not isinstance(call.callee, (NameExpr, MemberExpr)):
            return
        m = TYPED_MAPPINGS.get(call.callee.name)
        if m is None or not communicates(m.collective, m.src, m.dst):
            return
        group = self._arg(ctx, "group")[0]
        axis = TP_AXIS if group is None or (isinstance(group, NameExpr)
                                            and group.fullname == "builtins.None") \
            else self._group_axis(ctx)
        if not axis or axis not in self.plugin.config.mesh_axes:
            return
        self._report_divergence(ctx, entry, m.name, m.collective, (axis,), None, True)

    def check_mapping_group(self, ctx: FunctionContext) -> None:
        """A Megatron mapping call (megatron-stubs: typed for the tensor-model-parallel
        group) whose group= is seen to be another mesh axis's (rank_index ``group_axis``:
        ``mesh.get_group("dp")``, a name bound once to one): reported (engine
        ``mapping_group_error``); tp's group, the default and a group not read are accepted."""
        from ..migrate.table import DEFAULT_TP_AXIS, MAPPINGS_BY_NAME, typed_call_code
        group = self._arg(ctx, "group")[0]
        if group is None or self._group_axis(ctx) in (None, "", DEFAULT_TP_AXIS):
            return
        axis = self._group_axis(ctx)
        assert axis is not None
        call = ctx.context
        if not isinstance(call, CallExpr):
            return
        callee = call.callee
        name = callee.name if isinstance(callee, (NameExpr, MemberExpr)) else ""
        x = self._arg(ctx, "input_")[0]
        x_text = bare(expr_text(x)) if x is not None else "x"
        mapping = MAPPINGS_BY_NAME.get(name)
        typed = None
        if mapping is not None:
            typed = typed_call_code(mapping, format_axis(axis)).replace("(x, ", f"({x_text}, ", 1)
        shown = f"{name}({x_text}, group={expr_text(group)})" if name else code_text(call)
        self.report(ctx, [coll.mapping_group_error(shown, axis, DEFAULT_TP_AXIS, typed)])

    def _group_expr(self, ctx: FunctionContext) -> Expression | None:
        """A raw collective's group= expression, a name bound once read as its value."""
        e = self._arg(ctx, "group")[0]
        func = global_calls.current_function(ctx.api)
        if isinstance(e, NameExpr) and func is not None:
            bound = global_calls.value_bound_once(func, e.name)
            if bound is not None:
                e = bound
        return e

    def _group_axis(self, ctx: FunctionContext) -> str | None:
        """The mesh axis a raw collective's group= is (rank_index ``group_axis``:
        ``mesh.get_group("tp")``, ``mesh["tp"].get_group()``, ``(mesh, "tp")``, Megatron's
        ``get_tensor_model_parallel_group()``; a name bound once to one), "" for the default
        group (none, None, ``group.WORLD``), None for any other."""
        e = self._group_expr(ctx)
        return "" if _default_group(e) else group_axis(e)

    def _report_divergence(self, ctx: FunctionContext, entry: Divergent, shown: str, op: str,
                           axes: tuple[str, ...], over: str | None, returns: bool) -> None:
        """Under the entry's conditions, and where a call of the function whose body runs
        the collective is under some (the error at that call, which the fix hoists)."""
        _, conds, bound, vias, _ = entry
        call = ctx.context
        if not isinstance(call, CallExpr):
            return
        if conds:
            call_text = code_text(call)
            self._divergence_job(ctx, conds, call, call_text, hoist_name(op, bound), axes,
                                 lambda conditions: divergent_collective_error(
                                     call_text, op, axes, conditions, over=over, result=bound,
                                     returns=returns), None)
        if not vias:
            return
        func = global_calls.current_function(ctx.api)
        for outer, outer_conds, outer_bound, mid in vias:
            if func is None or not _calls(outer if mid is None else mid, func):
                continue  # the name is not (or no longer) that function
            outer_text = code_text(outer)
            inner = code_text(call)
            if mid is not None:  # two levels down
                inner = f"{code_text(mid)} (line {mid.line}), whose body runs {inner}"
            self._divergence_job(
                ctx, outer_conds, outer, outer_text, hoist_name("", outer_bound), axes,
                functools.partial(divergent_collective_error, outer_text, "", axes, over=over,
                                  result=outer_bound, inner=(inner, call.line)), outer)

    def _divergence_job(self, ctx: FunctionContext, conds: Sequence[Condition], at: CallExpr,
                        call_text: str, name: str, axes: tuple[str, ...],
                        error: Callable[[list[RankCondition]], SpmdError | None],
                        outer: CallExpr | None) -> None:
        """Report ``error`` of the conditions ``conds`` at ``at``.  A condition reading a
        tensor's value that mypy has not typed yet (a loop's ``if c: break`` after the
        collective, the caller's condition when the body of the function that runs the
        collective is checked first): without an error from the others, the check waits
        for the hook that comes once it is typed (:attr:`waiting`)."""
        mesh = tuple(self.plugin.config.mesh_axes)

        def run() -> None:
            conditions: list[RankCondition] = []
            untyped: Condition | None = None
            for c in conds:
                rc = self._rank_condition(ctx.api, c, call_text, name, mesh, axes)
                if rc is None:
                    untyped = untyped or c
                else:
                    conditions.append(rc)
            err = error(conditions)
            if err is not None:
                self.report(ctx, [err], at)
            elif untyped is not None:
                key = untyped[2] if untyped[1].startswith("loop-") else outer
                if key is not None:
                    self.waiting.setdefault(id(key), []).append(run)

        run()

    def condition_typed(self, api: Any, node: Context) -> None:
        """mypy typed the condition (or reached the call) ``node`` some divergence checks
        wait for (:attr:`waiting`): run them."""
        jobs = self.waiting.pop(id(node), None)
        for job in jobs or ():
            job()

    def _rank_condition(self, api: Any, c: Condition, call_text: str, name: str,
                        mesh: tuple[str, ...], over: tuple[str, ...]) -> RankCondition | None:
        """The condition as the engine reads it; None while it reads a tensor's value
        mypy has not typed yet."""
        axes, kind, cond, line, anchor_kind, anchor, _ = c
        t = code_text(cond)
        loop = kind.startswith("loop-")
        if kind in ("if", "elif", "while", "match"):
            code = f"{kind} {t}:"
            written = f"`{code}`"
        elif kind == "else":
            code = f"if {t}:"
            written = f"the else branch of `{code}`"
        elif kind == "case":
            code = f"case ... if {t}:"
            written = f"`{code}`"
        elif kind == "ternary":
            code = f"... if {t} else ..."
            written = f"`{code}`"
        else:  # an early exit: the code after it runs where the condition is false
            code = f"if {t}: {kind[5:] if loop else kind}"
            written = f"`{code}`"
        if anchor_kind == "ternary":
            before = code_text(anchor).replace(call_text, name, 1)
        elif anchor_kind in ("if", "while", "match"):
            before = f"{anchor_kind} {code_text(anchor)}:"
        else:
            before = code
        # a group the source does not name may be any one axis, a rank within the node
        # (LOCAL_RANK) splits the axes with ranks on one node, which the source does not say:
        # no axis to blame
        blamed = () if UNNAMED_GROUP in axes else tuple(axes_in(axes, mesh, False))
        if VALUE not in axes:
            return RankCondition(blamed, written, line, before, code=code, loop=loop)
        reads = self._value_reads(api, cond)
        if reads is None:
            return None
        value_axes: list[str] = []
        shown: tuple[str, str] | None = None
        srcs: tuple[tuple[str, str], ...] = ()
        detach = False
        for e, st in reads:
            varying = [(a, lt) for a, lt in st.axes if lt.kind is Kind.V and a in mesh]
            for a, _ in varying:
                if a not in value_axes:
                    value_axes.append(a)
            if shown is None and any(a in over for a, _ in varying):
                shown = (code_text(e), format_type(st, mesh))
                srcs = tuple((a, str(lt.at_high_ranks())) for a, lt in varying)
                # the fix's max all_reduce has no gradient: a value that may carry one is
                # detached there (spmd-no-grad)
                tree: MypyFile | None = getattr(api, "tree", None)
                regions = self.plugin.regions
                detach = not (regions.in_no_grad(tree, e.line)
                              or regions.gradient_free(tree, e.line, e))
        value_only = tuple(a for a in value_axes if a not in blamed)
        return RankCondition(blamed + value_only, written, line, before, value_only, shown,
                             srcs, code, loop, detach)

    def _value_reads(self, api: Any, cond: Expression
                     ) -> list[tuple[Expression, SpmdType]] | None:
        """The tensors a condition reads the values of that differ between the ranks of some
        axis (V or S(i) there; a P is an error of its own), outermost first; None when mypy
        has not typed ``cond`` yet.  Read through operators, comparisons, value reads
        (``x.item()``, ``float(x)``, ``bool(x)``), tensor methods, torch's, math's and the
        builtins' functions, and a local bound once; not through a call of another function
        (its result may be reduced over the ranks: ``if global_norm(g) > c:``) nor metadata
        (``x.shape``, ``x.dim()``, ``x is None``)."""
        if lookup_type(api, cond) is None:
            return None
        func = global_calls.current_function(api)
        if func is not None and not func.line <= cond.line <= (func.end_line or func.line):
            func = None  # a caller's condition, read in the body of the function it calls
        found: list[tuple[Expression, SpmdType]] = []
        seen: set[str] = set()
        todo: list[Expression] = [cond]
        while todo:
            x = todo.pop(0)
            if isinstance(x, ComparisonExpr):  # r.abs().max() < tol: the value compared
                if not all(o in ("is", "is not") for o in x.operators):
                    todo.extend(x.operands)
                continue
            t = lookup_type(api, x)
            st = self.types.from_type(t) if t is not None else None
            if st is not None and (st.axes or st.failed):
                # a typed tensor: what it holds decides, not its parts (one an error left
                # unknown somewhere: reported already)
                if not st.failed and any(lt.kind is Kind.V for _, lt in st.axes):
                    found.append((x, st))
                continue
            if isinstance(x, NameExpr):
                if func is not None and x.name not in seen:
                    seen.add(x.name)
                    bound = global_calls.value_bound_once(func, x.name)
                    if bound is not None:
                        todo.append(bound)
            elif isinstance(x, CallExpr):
                callee = x.callee
                if isinstance(callee, MemberExpr):
                    if callee.name in _METADATA:
                        continue
                    if not (isinstance(callee.expr, RefExpr) and isinstance(callee.expr.node,
                                                                            MypyFile)):
                        todo.append(callee.expr)  # x.item(): the receiver's values
                        todo.extend(x.args)
                        continue
                if isinstance(callee, (NameExpr, MemberExpr)) \
                        and callee.fullname.startswith(_VALUE_MODULES) \
                        and callee.name not in _METADATA \
                        and callee.fullname not in _NO_VALUE_FUNCTIONS:
                    todo.extend(x.args)
            elif isinstance(x, OpExpr):
                todo.extend((x.left, x.right))
            elif isinstance(x, UnaryExpr):
                todo.append(x.expr)
            elif isinstance(x, IndexExpr):
                todo.append(x.base)
            elif isinstance(x, ConditionalExpr):
                todo.extend((x.cond, x.if_expr, x.else_expr))
            elif isinstance(x, (TupleExpr, ListExpr)):
                todo.extend(x.items)
        return found

    def divergence_hook(self, name: str) -> Callable[[FunctionContext], Type]:
        """``dist.barrier()``, ``dist.gather(...)``: collectives the checker types nothing
        of; only under a rank-dependent condition (spmd-divergent-collective)."""
        def hook(ctx: FunctionContext) -> Type:
            if self.divergent:
                self._raw_divergence(ctx, name, "torch.distributed")
            return ctx.default_return_type

        return hook

    def raw_collective_hook(self, name: str, module: str = "torch.distributed") -> Callable[[FunctionContext], Type]:
        def hook(ctx: FunctionContext) -> Type:
            if self.divergent:  # only files with a rank query in a condition (rank_index)
                self._raw_divergence(ctx, name, module)
            if self.plugin.regions.in_autograd_function(getattr(ctx.api, "tree", None),
                                                        ctx.context.line):
                # forward/backward of a custom autograd Function: the user implements a
                # collective there (an uneven all_to_all_single, Megatron's mappings); the
                # Function's annotations type it (SPEC section 5)
                if raw_writes_in_place(module, name):
                    self._untype_written(ctx)
                return ctx.default_return_type
            for types, exprs in zip(ctx.arg_types, ctx.args):
                for t, e in (item for te in zip(types, exprs)
                             for item in self._container_items(te[0], te[1], ctx)):
                    st = self.types.from_type(t)
                    if st and module == "torch.distributed" and name == "broadcast":
                        checked = self._raw_broadcast(ctx, e, st)
                        if checked is not False:
                            if checked is not None:
                                self.report(ctx, [checked])
                            return ctx.default_return_type
                    if st:
                        reduce_op, async_op = self._raw_op(ctx)
                        self.report(ctx, [raw_collective_error(module, name, expr_text(e), st,
                                                               reduce_op=reduce_op,
                                                               async_op=async_op,
                                                               group=self._raw_group(ctx),
                                                               assign_to=self._raw_written(ctx, module, name),
                                                               gathered_into=self._raw_list(ctx, module, name))])
                        if raw_writes_in_place(module, name):
                            # one mistake, one error: what the raw call wrote is untyped
                            # after it (engine raw_writes_in_place), so its reads (AMP's
                            # ``if found_inf.item() > 0``) add none of their own
                            self._untype_written(ctx)
                        return ctx.default_return_type
            return ctx.default_return_type

        return hook

    def _raw_list(self, ctx: FunctionContext, module: str, name: str) -> str | None:
        """The list ``dist.all_gather(tensor_list, x)`` fills, as written (a name: the
        typed fix replaces it, its re-insertion and its torch.cat); None elsewhere."""
        if module != "torch.distributed" or name != "all_gather" or not ctx.args:
            return None
        first = ctx.args[0]
        return first[0].name if len(first) == 1 and isinstance(first[0], NameExpr) else None

    def _raw_written(self, ctx: FunctionContext, module: str, name: str) -> str | None:
        """A raw collective that is a statement of its own and writes its first argument in
        place (torch.distributed's, the functional ``*_inplace`` ones): that tensor's text,
        where it can be assigned, the typed fix's target (``g = spmd.all_reduce(g, ...)``);
        None elsewhere (a list it writes: the typed fix's result is one tensor)."""
        if not raw_writes_in_place(module, name):
            return None
        if not ctx.args or len(ctx.args[0]) != 1 or not is_statement_call(ctx.api, ctx.context):
            return None
        written: Type = ctx.arg_types[0][0]
        proper = get_proper_type(written)
        if not (self.types.from_type(written) or (
                isinstance(proper, Instance) and proper.type.fullname in TORCH_TENSOR_BASES)):
            return None
        return assign_target(ctx.args[0][0])

    def send_hook(self, call: str) -> Callable[[FunctionContext], Type]:
        """``dist.send(x, dst)``, ``dist.isend(x, dst)``, ``dist.P2POp(dist.isend, x, peer)``
        (``call``: engine SENDS): a Partial ``x`` sends this rank's summand (engine
        ``check_send``), outside a custom autograd Function's forward/backward (whose
        annotations type what it sends).  mypy's result is kept."""

        def hook(ctx: FunctionContext) -> Type:
            if self.plugin.regions.in_autograd_function(getattr(ctx.api, "tree", None),
                                                        ctx.context.line):
                return ctx.default_return_type
            position = 0
            if call == "P2POp":  # P2POp(op, tensor, ...): a send when op is isend
                ops = ctx.args[0] if ctx.args else []
                op = ops[0] if len(ops) == 1 else None
                if not (isinstance(op, RefExpr) and send_call(op.fullname or "") == "isend"):
                    return ctx.default_return_type
                position = 1
            if len(ctx.args) <= position or len(ctx.args[position]) != 1:
                return ctx.default_return_type
            e = ctx.args[position][0]
            typ: Type = ctx.arg_types[position][0]
            members = self.types.alternatives(typ)
            for m in (members if members is not None else [typ]):
                st = self.types.from_type(m)
                if not st:
                    continue
                err = check_send(call, Operand(st, expr_text(e)),
                                 gradient=self._is_gradient(ctx, e))
                if err is not None:
                    self.report(ctx, [err])
                    break
            return ctx.default_return_type

        return hook

    def _is_gradient(self, ctx: FunctionContext, e: Expression) -> bool:
        """Whether the sent ``e`` is a gradient (engine ``check_send``'s ``gradient``):
        ``a.grad``, an item of ``torch.autograd.grad(...)``, a call of ``spmd.declare(...,
        spmd.grad_type[...])``, a parameter annotated ``spmd.grad_type[...]``, a local bound
        once to one of these; under ``.detach()``, ``.contiguous()``, ``.clone()``."""
        func = global_calls.current_function(ctx.api)
        return self._gradient_in(func, e, 0)

    def _gradient_in(self, func: FuncDef | None, e: Expression, depth: int) -> bool:
        if depth > 4:
            return False
        while (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr) and not e.args
               and e.callee.name in ("detach", "contiguous", "clone")):
            e = e.callee.expr
        if isinstance(e, MemberExpr) and e.name == "grad":
            return True
        if isinstance(e, IndexExpr) and isinstance(e.base, CallExpr) and isinstance(
                e.base.callee, RefExpr) and e.base.callee.fullname == "torch.autograd.grad":
            return True
        if isinstance(e, CallExpr) and isinstance(e.callee, RefExpr) and (
                e.callee.fullname == "spmd.declare") and len(e.args) == 2:
            t = e.args[1]
            return (isinstance(t, (IndexExpr, CallExpr))
                    and isinstance(t.base if isinstance(t, IndexExpr) else t.callee, RefExpr)
                    and _ref_fullname(t.base if isinstance(t, IndexExpr) else t.callee)
                    == "spmd.grad_type")
        if isinstance(e, NameExpr) and e.kind == LDEF and func is not None:
            for i, arg in enumerate(func.arguments):
                if arg.variable is e.node:
                    ut = func.unanalyzed_type
                    if isinstance(ut, CallableType) and i < len(ut.arg_types):
                        a = ut.arg_types[i]
                        return isinstance(a, UnboundType) and a.name.split(".")[-1] == "grad_type"
                    return False
            v = global_calls.value_bound_once(func, e.name)
            return v is not None and self._gradient_in(func, v, depth + 1)
        return False

    def _untype_written(self, ctx: FunctionContext) -> None:
        """A raw collective in a custom Function's forward or backward writes its first
        argument in place (the tensor of all_reduce, broadcast, reduce; the output of
        all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single; the output list of
        all_gather, all_to_all; the check mode's ``_raw_written``): its static type is no
        longer a fact.  Its reads after the call are untyped (``Any``: mypy's binder narrows
        the name, as after an assignment, through branches and loops, until it is assigned
        again), as the check mode leaves the written tensor untyped."""
        try:
            self._untype_arguments(ctx)
        except Exception:  # noqa: BLE001 - never crash mypy: the written tensor keeps its type
            pass

    def _untype_arguments(self, ctx: FunctionContext) -> None:
        binder = getattr(ctx.api, "binder", None)
        if binder is None:
            return
        call = ctx.context
        written = global_calls.raw_written_argument(call) if isinstance(call, CallExpr) else None
        items = written.items if isinstance(written, (ListExpr, TupleExpr)) else [written]
        func = global_calls.current_function(ctx.api)
        top_level = func is not None and _no_path_after(func.body, ctx.context) is True
        for e in items:
            if isinstance(e, (NameExpr, MemberExpr, IndexExpr)) and literal(e) >= LITERAL_TYPE:
                binder.put(e, AnyType(TypeOfAny.special_form))
                var = e.node if isinstance(e, NameExpr) and e.kind == LDEF else None
                if (top_level and func is not None and isinstance(var, Var)
                        and not isinstance(get_proper_type(var.type), AnyType)
                        and _own_variable(func, var)):
                    # the local itself too, so that the reads after it stay untyped where the
                    # binder's narrowing is joined away (mypy keeps the declared type after
                    # ``if n > 1: dist.all_reduce(y)``); its next assignment types it again.
                    # Only for the body's own variable, written where no other path of the
                    # body is checked after the write (_no_path_after): an ``else`` or an
                    # ``except`` would read Any too, and an enclosing function's variable
                    # would be Any for the rest of that function
                    var.type = AnyType(TypeOfAny.special_form)
                    widened = getattr(ctx.api, "widened_vars", None)
                    if isinstance(widened, list):  # a loop's next pass reads it: one more pass
                        widened.append(var.name)

    def _raw_broadcast(self, ctx: FunctionContext, e: Expression, st: SpmdType) -> Any:
        """``dist.broadcast(x, src, group=g)`` on a typed ``x`` (engine
        ``raw_broadcast_error``): None when accepted, the error, or False when ``g`` is not
        seen to be a mesh axis's group (the raw collective's message then), unless ``x`` is
        R or I on every axis (the same value on every rank of any group)."""
        axes: tuple[str, ...] | None = None
        g = self._arg(ctx, "group")[0]
        func = global_calls.current_function(ctx.api)
        if isinstance(g, NameExpr) and func is not None:
            g = global_calls.value_bound_once(func, g.name) or g
        if g is None or (isinstance(g, NameExpr) and g.fullname == "builtins.None") or (
                isinstance(g, MemberExpr) and g.name == "WORLD"):
            axes = None
        elif (isinstance(g, CallExpr) and isinstance(g.callee, MemberExpr)
              and g.callee.name == "get_group"):
            mesh_dim = g.args[0] if g.args else None
            if mesh_dim is None and isinstance(g.callee.expr, IndexExpr):
                mesh_dim = g.callee.expr.index  # mesh["dp"].get_group()
            names = literal_strs(mesh_dim, None) if mesh_dim is not None else None
            if not names:
                return False
            axes = tuple(names)
        elif not all(t.kind in (Kind.R, Kind.I) for _, t in st.axes):
            return False
        src_index: int | None = None
        gs = self._arg(ctx, "group_src")[0]
        src = self._arg(ctx, "src")[0]
        if isinstance(src, NameExpr) and func is not None:  # src = dist.get_global_rank(g, 0)
            src = global_calls.value_bound_once(func, src.name) or src
        if isinstance(gs, IntExpr):
            src_index = gs.value
        elif (isinstance(src, CallExpr) and isinstance(src.callee, (NameExpr, MemberExpr))
              and src.callee.name == "get_global_rank" and len(src.args) == 2
              and isinstance(src.args[1], IntExpr)):
            src_index = src.args[1].value
        detached = ((isinstance(e, MemberExpr) and e.name == "data")
                    or (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)
                        and e.callee.name == "detach")
                    or self.plugin.regions.in_no_grad(getattr(ctx.api, "tree", None),
                                                      ctx.context.line))
        return coll.raw_broadcast_error(expr_text(e), st, axes, detached, src_index=src_index)

    def _raw_group(self, ctx: FunctionContext) -> str | None:
        """The text of a raw collective's group= when the checker cannot see it is a mesh
        axis's group (``mesh.get_group("pp")``, a name bound once to one), else None (no group,
        torch's default; ``group.WORLD``)."""
        e = self._group_expr(ctx)
        if _default_group(e):
            return None
        if (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)
                and e.callee.name == "get_group"):
            return None
        return expr_text(self._arg(ctx, "group")[0])

    def _raw_op(self, ctx: FunctionContext) -> tuple[str | None, bool]:
        """The reduce op a raw collective's call states (op=ReduceOp.AVG, reduceOp="avg":
        "avg"; "sum" when not passed, torch's default; None for an expression not read) and
        whether it passes async_op= other than False."""
        reduce_op: str | None = "sum"
        async_op = False
        for formal, exprs, types in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types):
            if not exprs:
                continue
            if formal in RAW_OP_PARAMS:
                e = exprs[0]
                text = literal_str(e, types[0])
                if text is None and isinstance(e, MemberExpr):
                    text = e.name
                reduce_op = raw_reduce_op(text) if text is not None else None
            elif formal == "async_op":
                e = exprs[0]
                async_op = not (isinstance(e, NameExpr) and e.fullname == "builtins.False")
        return reduce_op, async_op

    # -- spmd helpers ------------------------------------------------------------------
    def reveal_hook(self, ctx: FunctionContext) -> Type:
        x_expr, x_type = self._arg(ctx, "x")
        if x_type is None:
            return ctx.default_return_type  # mypy reports the missing argument
        if isinstance(get_proper_type(x_type), AnyType):
            behind = self._behind_any(ctx, x_expr)  # p * self.scale, mypy's Any
            if behind is not None:
                ctx.api.msg.note(f"Revealed type is {self._revealed(behind)} (mypy: Any)", ctx.context)  # type: ignore[attr-defined]
                return x_type
        if isinstance(x_expr, NameExpr):
            plain = self.types.from_type(x_type)
            stored = self.buffer_read(ctx, x_expr, plain) if plain is not None and not plain.axes else None
            inst = self.types.to_instance(stored) if stored else None
            if inst is not None:  # a zero buffer typed by its stores (buffers.py)
                ctx.api.msg.note(f"Revealed type is {self._revealed(inst)} (stored; mypy: Tensor)", ctx.context)  # type: ignore[attr-defined]
                return x_type
        ctx.api.msg.note(f"Revealed type is {self._revealed(x_type)}", ctx.context)  # type: ignore[attr-defined]
        return x_type

    def _revealed(self, x_type: Type, depth: int = 0) -> str:
        """What ``spmd.reveal`` prints: each member of a union, tensors as users write them,
        tuples and lists item by item, ``Any (unchecked)`` for what mypy does not know (a
        module called through a list of ``Module``s, an attribute set without a type), ``not
        a tensor`` for anything else."""
        members = self.types.alternatives(x_type) or [x_type]
        shown = []
        for m in members:
            t = self.types.from_type(m)
            p = get_proper_type(m)
            if t is not None:
                ranked = "; ".join(f'on "{a}": {lt.layouts()}' for a, lt in t.axes if lt.by_rank)
                unknown = ", ".join(f'"{a}"' for a in t.failed)
                shown.append(format_type(t, self.plugin.config.mesh_axes)
                             + (f" ({ranked})" if ranked else "")
                             + (f" (unknown on {unknown} after an error)" if unknown else ""))
            elif isinstance(p, NoneType):
                shown.append("None")
            elif isinstance(p, TupleType) and depth < 4 and p.items:
                shown.append(f"tuple[{', '.join(self._revealed(i, depth + 1) for i in p.items)}]")
            elif (isinstance(p, Instance) and p.type.fullname == "builtins.list" and p.args
                  and depth < 4):
                shown.append(f"list[{self._revealed(p.args[0], depth + 1)}]")
            elif (isinstance(p, Instance) and p.type.fullname == "builtins.tuple" and p.args
                  and depth < 4):  # x.chunk(2), x.split(k): tuple[Tensor[...], ...]
                shown.append(f"tuple[{self._revealed(p.args[0], depth + 1)}, ...]")
            elif isinstance(p, Instance):
                shown.append(f"not a tensor ({p.type.name})")  # as the check mode prints it
            elif isinstance(p, AnyType):  # what mypy does not know is not checked either
                shown.append("Any (unchecked)")
            else:
                shown.append("not a tensor")
        return " | ".join(dict.fromkeys(shown))

    def declare_parameters_hook(self, ctx: FunctionContext) -> Type:
        """``spmd.declare_parameters(3)``: a value of a builtin type (a number, a string, None, a
        list, tuple, dict or set) declares nothing: the check mode raises a TypeError, and the
        argument is mypy's ``arg-type`` here.  An object of any other class is left to the
        check mode, which reads its class's annotations."""
        if ctx.arg_types and len(ctx.arg_types[0]) == 1:
            t = get_proper_type(ctx.arg_types[0][0])
            if isinstance(t, LiteralType):
                t = t.fallback
            elif isinstance(t, TupleType):
                t = t.partial_fallback
            name = ("NoneType" if isinstance(t, NoneType) else
                    t.type.fullname if isinstance(t, Instance) else "")
            if name in _DECLARES_NOTHING:
                shown = mypy_format_type(ctx.arg_types[0][0], ctx.api.options)  # type: ignore[attr-defined]
                ctx.api.fail(
                    f'Argument 1 to "declare_parameters" has incompatible type {shown}; '
                    "expected a torch.nn.Module (its parameters and buffers annotated in its "
                    "class) or an object whose class annotates tensor attributes (w: Tensor[...]): "
                    "nothing would be declared (the check mode raises a TypeError); pass the "
                    "model (each module of a list)", ctx.context, code=ARG_TYPE)
        return ctx.default_return_type

    def declare_hook(self, ctx: FunctionContext) -> Type:
        """``spmd.declare(x, Tensor[I["tp"]])`` (or an alias of a tensor type) has that type.

        Where the checker is sure of ``x``'s type it must agree (a declaration states a type,
        it never changes one: engine ``declaration_error``, as the check mode does)."""
        t_expr, _ = self._arg(ctx, "t")
        t = self.type_from_expression(ctx, t_expr)
        if t is None:
            return ctx.default_return_type
        x_expr, x_type = self._arg(ctx, "x")
        if x_expr is not None and x_type is not None and self._known_for_certain(ctx, x_expr):
            have = self.types.from_type(x_type) if not self._union_typed(ctx, x_expr) else None
            if have and not have.failed:
                text = expr_text(x_expr)
                order = self.plugin.config.mesh_axes
                what = f"spmd.declare({text}, {format_type(t, order)})"
                err = declaration_error(have, t, x_text=text, order=order, what=what)
                if err is not None:
                    # an integer value's R and I agree; an argmax of this rank's shard: no
                    # gather of it (asked only once there is an error)
                    free = self.integer_valued(ctx, x_expr)
                    index = index_value(x_expr, global_calls.current_function(ctx.api),
                                        self.type_of_expr(ctx), expr_text)
                    if free or index is not None:
                        err = declaration_error(have, t, x_text=text, order=order, what=what,
                                                index=index, gradient_free=free)
                if err is not None:
                    self.report(ctx, [err])
        inst = self.types.to_instance(t)
        return inst if inst is not None else ctx.default_return_type

    def _union_typed(self, ctx: AnyCtx, e: Expression) -> bool:
        """Whether the argument ``e`` is of a union type (the hook may be asked once per
        member: the type it gets is then one of them, not a fact about ``e``)."""
        try:
            t = ctx.api.lookup_type(e)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - not in the type map: read as not a union
            return False
        return isinstance(get_proper_type(t), UnionType)

    def _known_for_certain(self, ctx: AnyCtx, e: Expression) -> bool:
        """Whether ``e``'s static type is a fact rather than the checker's best reading.
        Not: anything read off a gradient (``p.grad`` reads as backward() leaves it, while a
        hook or an assignment elsewhere may have reduced it: declaring it is the documented
        way to say so), an item of a container or a choice between values (their type is a
        join: ``out["loss"]``, ``a if c else b``), a comprehension's or a lambda's variable,
        a local bound twice or bound to such a reading, a local a raw torch.distributed call
        may have reduced in place.  (A union type is no fact either: the caller's test.)"""
        func = global_calls.current_function(ctx.api)
        return func is not None and self._certain_in(func, e, 0)

    def _certain_in(self, func: FuncDef, e: Expression, depth: int) -> bool:
        if depth > 4:
            return False
        for sub in get_subexpressions(e):  # e itself first
            if isinstance(sub, MemberExpr) and sub.name == "grad":
                return False
            if isinstance(sub, (IndexExpr, ConditionalExpr, LambdaExpr, ListComprehension,
                                SetComprehension, DictionaryComprehension, GeneratorExpr,
                                ListExpr, TupleExpr, DictExpr, SetExpr, StarExpr)):
                return False
            if isinstance(sub, OpExpr) and sub.op in ("and", "or"):
                return False
            if isinstance(sub, NameExpr) and sub.kind == LDEF:
                facts = global_calls.size_names(func)  # a raw collective's target: bound twice
                if facts.bindings.get(sub.name, 0) != 1:
                    return False
                if any(arg.variable is sub.node for arg in func.arguments):
                    continue  # a parameter bound once: its annotation
                value = global_calls.value_bound_once(func, sub.name)
                if value is None or not self._certain_in(func, value, depth + 1):
                    return False
        return True

    def grad_type_hook(self, ctx: FunctionContext) -> Type:
        """``spmd.grad_type(T)`` as a value: the type object of the gradient's type."""
        t_expr = ctx.args[0][0] if ctx.args and ctx.args[0] else None
        t = self.type_from_expression(ctx, t_expr)
        inst = self.types.to_instance(t.dual()) if t is not None else None
        return TypeType.make_normalized(inst) if inst is not None else ctx.default_return_type

    def type_from_expression(self, ctx: AnyCtx, e: Expression | None) -> SpmdType | None:
        """Read ``Tensor[R["tp"], S[0, "dp"]]`` written as a value expression (also an alias
        of one, and ``spmd.grad_type(T)`` / ``spmd.grad_type[T]``: its dual)."""
        if isinstance(e, RefExpr) and isinstance(e.node, TypeAlias):
            return self.types.from_type(e.node.target)
        if isinstance(e, CallExpr) and isinstance(e.callee, RefExpr) and (
                e.callee.fullname == "spmd.grad_type") and len(e.args) == 1:
            inner = self.type_from_expression(ctx, e.args[0])
            return inner.dual() if inner is not None else None
        if isinstance(e, IndexExpr) and isinstance(e.base, RefExpr) and (
                e.base.fullname == "spmd.grad_type"):
            inner = self.type_from_expression(ctx, e.index)
            return inner.dual() if inner is not None else None
        if not (isinstance(e, IndexExpr) and isinstance(e.base, RefExpr)
                and e.base.fullname == "spmd.Tensor"):
            return None
        items = e.index.items if isinstance(e.index, TupleExpr) else [e.index]
        entries: list[Entry] = []
        for item in items:
            entry = _entry_from_expression(item)
            if entry is None:
                self.report(ctx, [SpmdError(
                    "spmd-annotation", f'Tensor[...] takes entries like R["tp"], not {expr_text(item)}')])
                return None
            entries.append(entry)
        t, errors = build(entries, self.plugin.config.mesh_axes, self.plugin.config.axes_setting,
                          self.plugin.config.aliases)
        self.report(ctx, errors)
        return t

    def partial_op_hook(self, op: str) -> Callable[[FunctionContext], Type]:
        """spmd.einsum / matmul / linear / sum: the local op, then reinterpret to P on
        ``out_partial_axes``; a bias is added after, and must itself be P there."""

        def hook(ctx: FunctionContext) -> Type:
            ops, _, any_typed = self.operands(ctx, None, None, op)
            b_expr, b_type = self._arg(ctx, "bias") if op == "linear" else (None, None)
            bias = self.types.from_type(b_type) if b_expr is not None else None
            pa_expr, pa_type = self._arg(ctx, "out_partial_axes")
            no_partial = pa_expr is None or (isinstance(pa_expr, NameExpr) and pa_expr.name == "None")
            if not any_typed and no_partial:
                return ctx.default_return_type
            # (untyped operands with out_partial_axes: P there all the same, the declaration
            # the check mode makes too)
            if global_calls.any_global(ops) or (bias is not None and bias.spec is not None):
                return self._global_partial_op(ctx, op, ops, pa_expr, pa_type, b_expr)
            move = read_contraction(ctx, op) if op in CONTRACTIONS else None  # spmd.einsum's equation
            reduction = read_reduction(ctx, op) if op == "sum" else None  # spmd.sum's dims
            if no_partial:
                if isinstance(move, Contraction):
                    move = declared_partial(ctx, move, ops, self.types)
                reduction = declared_reduction(ctx, op, reduction, ops, self.types)
                res = propagate_memo(classify(op), ops, self.strict(ctx), reduction, move)
                self.report(ctx, res.errors)
                return self.typed_result(ctx.default_return_type, res.type)
            axes = self._axis_names(ctx, pa_expr, pa_type, f"spmd.{op} out_partial_axes")
            if axes is None:
                return self.typed_result(ctx.default_return_type, UNTYPED)
            b_text = expr_text(b_expr) if b_expr is not None else None
            core = [o for o in ops if b_text is None or o.text != b_text]
            res = partial_op_memo(op, core, axes, bias, b_text or "", self.strict(ctx),
                                  reduction, move)
            self.report(ctx, res.errors)
            if not res.errors and op == "sum" and ctx.args and ctx.args[0]:
                self._normalised_parts(ctx, ctx.args[0][0], axes, "sum")
            elif not res.errors and op in ("matmul", "einsum", "linear"):
                # an operand normalised per rank's block (split-KV attention's local softmax)
                for formal, exprs in zip(ctx.callee_arg_names, ctx.args):
                    if formal in ("equation", "bias", "out_partial_axes"):
                        continue
                    for e in exprs:
                        if not isinstance(e, StrExpr):
                            self._normalised_parts(ctx, e, axes, op)
            return self.typed_result(ctx.default_return_type, res.type)

        return hook

    def _normalised_parts(self, ctx: FunctionContext, x_expr: Expression | None,
                          axes: Sequence[str], call: str) -> None:
        """The claim that ``x_expr``'s values are the ranks' parts of a sum over ``axes``
        (``call``) when it is normalised per rank's block of a dim sharded there (engine
        normalised_parts_error)."""
        if x_expr is None:
            return
        func = global_calls.current_function(ctx.api)
        if not _may_normalise(func, x_expr):
            return  # no normaliser where unfinished_norm reads, on any axis (asked once)
        for a in axes:
            norm = unfinished_norm(x_expr, func, self.type_of_expr(ctx), a)
            if norm is None:
                continue
            err = coll.normalised_parts_error(norm, a, call, expr_text(x_expr))
            if err is not None:
                self.report(ctx, [err])

    def _global_partial_op(self, ctx: FunctionContext, op: str, ops: list[Operand],
                           pa_expr: Expression | None, pa_type: Type | None,
                           b_expr: Expression | None) -> Type:
        """spmd.einsum / matmul / linear / sum on global operands: the einsum rule with
        ``out_partial_axes`` in one step (global_spmd)."""
        axes: tuple[str, ...] | None = ()
        if pa_expr is not None and not (isinstance(pa_expr, NameExpr) and pa_expr.name == "None"):
            axes = self._axis_names(ctx, pa_expr, pa_type, f"spmd.{op} out_partial_axes")
            if axes is None:
                return self.typed_result(ctx.default_return_type, UNTYPED)
        params = global_calls.op_params(self, ctx, op)
        if b_expr is not None:
            b_text = expr_text(b_expr)
            core = [o for o in ops if o.text != b_text]
            bias = [o for o in ops if o.text == b_text]
            ops = core[:2] + bias[:1]
        try:
            res = global_calls.gs.propagate(op, ops, out_partial_axes=axes or None, **params)
        except Exception:  # noqa: BLE001 - never crash mypy: the result is unknown
            return self.typed_result(ctx.default_return_type, UNTYPED)
        self.report(ctx, res.errors)
        return self.typed_result(ctx.default_return_type, res.type)

    # -- user functions: arguments checked by the engine, with a fix -----------------------
    def relax_signature_hook(self, ctx) -> Type:  # noqa: ANN001 - FunctionSigContext/MethodSigContext
        """A callee with typed tensor parameters: hand mypy a signature whose typed
        parameters accept any tensor, and remember the declared types, so the call hook
        reports a mismatch as ``spmd-mismatch`` with the collective that fixes it (and an
        S(i) argument fits a V parameter)."""
        # a hook of its own: the promotion may still be off after an isinstance narrowing
        promotion = self.plugin.promotion
        promotion.sync(ctx.api)
        narrowed = getattr(ctx.default_signature, "type_is", None)
        if narrowed is not None:
            # ``def is_dtensor(x) -> TypeIs[DTensor]``: mypy narrows like isinstance after
            # the call, which needs the promotion off (see dispatch.isinstance_hook)
            cls = get_proper_type(narrowed)
            if isinstance(cls, Instance) and cls.type.has_base("torch._tensor.Tensor"):
                promotion.narrowing_in(
                    ctx.api, parameters=cls.type.has_base("torch.nn.parameter.Parameter"))
        op = self.torch_op_called_by_name(ctx.default_signature)
        if op is not None:
            if len(self._pending_ops) > 10_000:  # bound the memory of a long-lived daemon
                self._pending_ops.clear()
            self._pending_ops[id(ctx.context)] = (ctx.context, op)
            return ctx.default_signature
        sig = self.relax_signature(ctx.default_signature, ctx.context, ctx.args)
        return sig if promotion.wanted else self.plain_result(sig)

    def torch_op_called_by_name(self, sig: Type) -> Callable[[AnyCtx], Type] | None:
        """The op hook of a torch function called through a name of the user's: a variable,
        an attribute or an alias holding it (``self.activation_func = F.gelu`` ...
        ``self.activation_func(h)``).  mypy asks for the hooks by the name called, not by
        the function's; the signature still knows its definition.  None for anything else
        (a tensor method bound to its tensor, a function of the user's)."""
        if not isinstance(sig, CallableType):
            return None
        fullname = torch_function_name(sig)
        if fullname is None:
            return None
        definition = sig.definition
        # the function's own signature (or one of its overloads): mypy's join of two
        # functions keeps one's definition, and a join that is neither one's signature is
        # left untyped.  A join equal to one of them (``[torch.neg, torch.relu]``, or
        # ``torch.add if c else torch.mul``, which mypy joins to mul's signature) is typed
        # by that one's rule: the other op's call may go unchecked (a missed error, as
        # before), and for two elementwise ops that both accept the operands the type is
        # the same.
        own: ProperType | None = None
        if isinstance(definition, FuncBase) and definition.type is not None:
            own = get_proper_type(definition.type)
        items: list[CallableType] = []
        if isinstance(own, Overloaded):
            items = own.items
        elif isinstance(own, CallableType):
            items = [own]
        if not any(_same_signature(item, sig) for item in items):
            return None
        hook: Callable[[AnyCtx], Type] | None = self.plugin.dispatch.get_function_hook(fullname)  # type: ignore[assignment]
        return hook

    def plain_result(self, sig: CallableType) -> CallableType:
        """``sig`` with plain ``torch.Tensor`` for every typed tensor in its result: what a
        typed callee returns into a module that uses no SPMD types.  Gradual: such a module
        sees the values as it would if the callee were annotated with ``torch.Tensor``, so
        ``h = column(x); h = row(h)`` (V, then P) is no re-assignment error there, and no
        SPMD rule is applied to code its author has not annotated (as the Megatron mappings
        of the shipped stubs, whose results are untyped there)."""
        if not isinstance(sig, CallableType):
            return sig
        hit = self._plain_results.get(id(sig))
        if hit is None or hit[0] is not sig:
            ret = erase_typed_tensors(sig.ret_type)
            if len(self._plain_results) > 50_000:  # bound the memory of a long-lived daemon
                self._plain_results.clear()
            hit = (sig, sig.copy_modified(ret_type=ret) if ret is not None else sig)
            self._plain_results[id(sig)] = hit
        return hit[1]

    def widen_tensor_lists_hook(self, ctx) -> Type:  # noqa: ANN001 - FunctionSigContext
        """A torch function's ``list[Tensor]`` parameter given a variable that holds a list
        of typed tensors (``outs.append(y)`` ... ``torch.cat(outs)``): see widened_lists."""
        sig = ctx.default_signature
        if not isinstance(sig, CallableType):
            return sig
        return _with_arg_types(sig, self.widened_lists(sig, ctx.args, range(len(sig.arg_types))))

    def widened_lists(self, sig: CallableType, args: list[list[Expression]],
                      params: Sequence[int]) -> dict[int, Type]:
        """The ``list[Tensor]`` parameters of ``sig`` among ``params`` widened to
        ``Sequence[item]`` where the argument is a variable holding a list of typed tensors,
        for this call, by index.  A typed tensor is a tensor to torch, but ``list`` is invariant to mypy.
        The item is the variable's own: a list of a typed and a plain tensor (``[y, x]``) has
        torch's ``TensorBase`` as its item (mypy's join under the gradual promotion), which is
        no ``Tensor`` either.  Only for such a variable: a list display already takes the
        parameter's type as its context, and anything else (a tuple) keeps mypy's check.  The
        op's own hook still reads the list's item type."""
        widened: dict[int, Type] = {}
        for i in params:
            if i >= len(args) or not _takes_list(sig.arg_types[i]):
                continue
            for a in args[i]:
                item = self._tensor_list_item(a)
                if item is None:
                    continue
                sequence = self.plugin.dispatch.lookup_info("typing.Sequence")
                if sequence is None:
                    return {}
                widened[i] = _widen_tensor_list(sig.arg_types[i], sequence, item)
                break
        return widened

    def _tensor_list_item(self, e: Expression) -> Type | None:
        """The item type of a name or attribute whose declared or inferred type is a list of
        typed tensors (or of their join with a plain one); None for anything else."""
        node = e.node if isinstance(e, RefExpr) else None
        t = get_proper_type(node.type) if isinstance(node, Var) and node.type is not None else None
        if not (isinstance(t, Instance) and t.type.fullname == "builtins.list" and t.args):
            return None
        item = get_proper_type(t.args[0])
        typed = False
        for i in item.items if isinstance(item, UnionType) else [item]:
            p = get_proper_type(i)
            if not isinstance(p, Instance):
                return None
            name = p.type.fullname
            if name == TENSOR or name == "torch._C.TensorBase":
                typed = True
            elif name not in TORCH_TENSOR_BASES and name != "torch.nn.parameter.Parameter":
                return None
        return t.args[0] if typed else None

    def relax_signature(self, sig: CallableType, context: Context,
                        args: list[list[Expression]] | None = None) -> CallableType:
        """The relaxed signature for a call at ``context`` (see relax_signature_hook)."""
        if not isinstance(sig, CallableType):
            return sig
        hit = self._relaxed.get(id(sig))
        if hit is None or hit[0] is not sig:
            expected: dict[int, tuple[SpmdType, ...]] = {}
            new_types = list(sig.arg_types)
            list_params: list[int] = []
            for i, t in enumerate(sig.arg_types):
                r = self._relax(t)
                if r is not None:
                    new_types[i], expected[i] = r
                elif _takes_list(t):
                    list_params.append(i)
            if len(self._relaxed) > 50_000:  # bound the memory of a long-lived daemon
                self._relaxed.clear()
            relax = bool(expected) and not self.overload_chosen_by_spmd_types(sig)
            hit = (sig, sig.copy_modified(arg_types=new_types) if relax else None, expected,
                   tuple(list_params))
            self._relaxed[id(sig)] = hit
        _, relaxed, expected, lists = hit
        if lists and args is not None:  # a plain list[torch.Tensor] parameter: see widened_lists
            widened = self.widened_lists(sig, args, lists)  # never a relaxed parameter
            sig = _with_arg_types(sig, widened)
            if relaxed is not None:
                relaxed = _with_arg_types(relaxed, widened)
        if relaxed is None:
            return sig
        self._pending[id(context)] = (context, sig, expected)
        return relaxed

    def overload_chosen_by_spmd_types(self, sig: CallableType) -> bool:
        """``sig`` is a variant of an ``@overload``-ed function whose variants declare
        different SPMD types for a parameter (``g(x: Tensor[R["tp"]]) -> ...`` and
        ``g(x: Tensor[V["tp"]]) -> ...``).  mypy picks the first variant the arguments fit,
        so such a variant is kept as declared: relaxed, every variant would take any tensor,
        the first one's result would win whatever the argument's type, and the argument
        would be judged against another variant.  Variants that agree on their typed
        parameters (megatron's ``tensor_parallel_output_grad: Literal[True]`` /
        ``Literal[False]``) stay relaxed: the check is the same whichever mypy picks.  An
        overload whose definition cannot be found is kept as declared (mypy's own check,
        never a wrong variant)."""
        d = sig.definition
        if not (isinstance(d, (FuncDef, Decorator)) and d.is_overload):
            return False
        func = d.func if isinstance(d, Decorator) else d
        info = None if isinstance(func.info, FakeInfo) else func.info
        if info is not None:
            sym = info.names.get(func.name)
            node = sym.node if sym is not None else None
        else:
            node = self.plugin.dispatch.lookup_node(func.fullname)
        if not isinstance(node, OverloadedFuncDef) or not isinstance(node.type, Overloaded):
            return True
        hit = self._overloads.get(id(node))
        if hit is None or hit[0] is not node:
            declared = []
            for item in node.type.items:
                typed = {}
                for i, (name, t) in enumerate(zip(item.arg_names, item.arg_types)):
                    r = self._relax(t)
                    typed[name if name is not None else i] = r[1] if r is not None else None
                declared.append(typed)
            keys = set().union(*declared)
            differ = any(len({typed.get(k) for typed in declared}) > 1 for k in keys
                         if any(typed.get(k) is not None for typed in declared))
            if len(self._overloads) > 10_000:  # bound the memory of a long-lived daemon
                self._overloads.clear()
            hit = self._overloads[id(node)] = (node, differ)
        return hit[1]

    def _relax(self, t: Type) -> tuple[Type, tuple[SpmdType, ...]] | None:
        """``t`` with each typed tensor (at the top or in a union) replaced by plain
        ``torch.Tensor``, and the SPMD types an argument may have: one, or one per typed
        member of a union (``Tensor[R["tp"]] | Tensor[V["tp"]]``: either fits).  An instance
        is remembered by its identity (kept in the entry); a union or an alias, which the
        daemon may point at other types in place, is relaxed afresh."""
        if type(t) is not _Instance:
            return self._relax_type(t)
        same = self._relaxed_types.get(id(t))
        if same is not None and same[0] is t:
            return same[1]
        found = self._relax_type(t)
        if len(self._relaxed_types) > 10_000:  # bound the memory of a long-lived daemon
            self._relaxed_types.clear()
        self._relaxed_types[id(t)] = (t, found)
        return found

    def _relax_type(self, t: Type) -> tuple[Type, tuple[SpmdType, ...]] | None:
        """:meth:`_relax`'s answer, made."""
        p = get_proper_type(t)
        if isinstance(p, Instance) and p.type.fullname == TENSOR:
            st = self.types.from_type(p)
            # plain torch.Tensor: accepts typed and untyped tensors in any module
            base = p.type.bases[0] if p.type.bases else None
            if st and base is not None:
                return base, (st,)
        elif isinstance(p, UnionType):
            items = list(p.items)
            wanted: list[SpmdType] = []
            for i, item in enumerate(p.items):
                r = self._relax(item)
                if r is not None:
                    items[i] = r[0]
                    wanted.extend(w for w in r[1] if w not in wanted)
            if wanted:
                return UnionType(items, p.line, p.column), tuple(wanted)
        return None

    def has_pending(self) -> bool:
        """A call with a relaxed signature is being checked (its arguments to be judged), or a
        torch op called through a name (to be typed by its rule)."""
        return bool(self._pending) or bool(self._pending_ops) or bool(self.waiting)

    def forget_pending(self) -> None:
        self._pending.clear()
        self._pending_ops.clear()
        self.waiting.clear()

    def check_arguments_hook(self, ctx: AnyCtx) -> Type:
        """The call of a relaxed signature: each typed argument judged against its declared
        type; or the call of a torch op through a name: the op's hook.  Given the whole call
        (dispatch runs it without splitting unions): a union argument is judged member by
        member here, and the op's hook splits it itself."""
        if self.waiting:  # sync(x) under ``if r.max() > 0:``, sync's body checked first
            self.condition_typed(ctx.api, ctx.context)
        op = self._pending_ops.pop(id(ctx.context), None)
        if op is not None and op[0] is ctx.context:
            return op[1](ctx)
        entry = self._pending.pop(id(ctx.context), None)
        if entry is None or entry[0] is not ctx.context:
            return ctx.default_return_type
        _, sig, expected = entry
        c = ctx.context
        callee = ""  # the callee's name, made for the first argument not known to fit
        try:
            cases = self.plugin.promotion.union_cases(ctx, drop_none=False) or [ctx]
        except Exception:  # noqa: BLE001 - never crash mypy: judge the union as a whole
            cases = [ctx]
        sig_kinds = sig.arg_kinds
        for case in cases:
            # (the context's fields read once a case, not once a parameter)
            case_types, case_kinds, case_args = case.arg_types, case.arg_kinds, case.args
            for i, wanted in expected.items():
                if i >= len(case_types):
                    continue
                kinds = case_kinds[i] if i < len(case_kinds) else []
                star_formal = i < len(sig_kinds) and sig_kinds[i] == ARG_STAR
                for k, (typ, expr) in enumerate(zip(case_types[i], case_args[i])):
                    kind = kinds[k] if k < len(kinds) else ARG_POS
                    written = ""  # the argument's text, made for its first typed tensor
                    text = ""
                    offset = 0  # f(*t), t a fixed tuple: the items before this formal's
                    if kind == ARG_STAR and isinstance(get_proper_type(typ), TupleType):
                        offset = sum(1 for j in range(i) if j < len(case_args)
                                     and any(e is expr for e in case_args[j]))
                    for item, index, optional in self._tensor_members(
                            _unpacked_types(typ, kind, offset, star_formal)):
                        have = self.types.from_type(item)
                        if have is not None and not have.axes and index is None:
                            have = self.buffer_read(ctx, expr, have)  # a zero buffer's
                        if have is None or not have.axes:  # (SpmdType.__bool__, inlined)
                            continue
                        if known_fit(have, wanted):
                            continue  # fitted before: no error, whatever the texts
                        if not text:
                            written = expr_text(expr)
                            text = written
                            if kind in (ARG_STAR, ARG_STAR2):  # f(*xs), f(**d): each item is an argument
                                text = ("*" if kind == ARG_STAR else "**") + written
                        x_text = written
                        if index is not None:  # the tuple's item: t[1], or (a, b)'s b
                            x_text = (expr_text(expr.items[index]) if isinstance(expr, TupleExpr)
                                      and index < len(expr.items) else f"{written}[{index}]")
                        param = sig.arg_names[i] if i < len(sig.arg_names) else None
                        if not callee:
                            callee = (sig.name or "").split(" of ", 1)[0] or (
                                expr_text(c.callee) if isinstance(c, CallExpr) else "the callee")
                        shown = text if index is None else f"{x_text} (from {text})"
                        where = (f'argument {shown} (parameter "{param}" of {callee})' if param
                                 else f"argument {i + 1} ({shown}) of {callee}")
                        # at the argument, as mypy's own [arg-type] (its line in a call
                        # written over several lines)
                        by = made_by(expr) if index is None and kind == ARG_POS else None
                        errors = check_argument_memo(have, wanted, x_text=x_text,
                                                         where=where, made_by=by)
                        free = bool(errors) and index is None and self.integer_valued(ctx, expr)
                        if free:
                            # an integer or bool value (a token id, a mask): no gradient, so
                            # its R and I agree (engine check_argument's gradient_free)
                            errors = check_argument_memo(have, wanted, x_text=x_text,
                                                             where=where, made_by=by,
                                                             gradient_free=True)
                        at_max = ix = every = norm = None
                        if errors and index is None:
                            # the fix of a value computed from this rank's max (read only
                            # for an error: the walk over the function's assignments)
                            at_max = rank_max(expr, global_calls.current_function(ctx.api),
                                              self.type_of_expr(ctx))
                            ix = index_value(expr, global_calls.current_function(ctx.api),
                                             self.type_of_expr(ctx), expr_text)
                            every = rank_every(expr, global_calls.current_function(ctx.api),
                                               self.plugin.regions, self.type_of_expr(ctx),
                                               self.plugin.config.mesh_axes)
                            norm = local_norm(expr, global_calls.current_function(ctx.api),
                                              self.type_of_expr(ctx))
                            if (at_max is not None or ix is not None or every is not None
                                    or norm is not None):
                                errors = check_argument_memo(
                                    have, wanted, x_text=x_text, where=where, made_by=by,
                                    rank_max=at_max, index=ix, gradient_free=free,
                                    rank_every=every, norm=norm)
                        if errors and not self.can_grad(ctx, expr):
                            # under no_grad: an R where I is needed may come of a mask
                            # declared R (engine check_argument's no_grad)
                            errors = check_argument_memo(
                                have, wanted, x_text=x_text, where=where, made_by=by,
                                rank_max=at_max, index=ix, gradient_free=free,
                                rank_every=every, norm=norm, no_grad=True)
                        if optional:
                            errors = coll.may_be_none(errors, x_text)
                        self.report(ctx, errors, context=expr if expr.line > 0 else None)
        return ctx.default_return_type

    def _tensor_members(self, items: list[tuple[Type, int | None]]
                        ) -> list[tuple[Type, int | None, bool]]:
        """The tensors an argument may be, and whether it may be None: a union left whole by
        union_cases (an Optional one, ``o: Tensor[V["tp"]] | None``, ``v if c else None``)
        gives its tensor members, each judged (None fits the parameter's own None, or mypy
        reports it)."""
        out: list[tuple[Type, int | None, bool]] = []
        for t, index in items:
            # only a union: union_cases has split the joins (and unions of tensors alone)
            members = self.types.alternatives(t) if isinstance(get_proper_type(t), UnionType) else None
            if members is None:
                out.append((t, index, False))
                continue
            optional = any(isinstance(get_proper_type(m), NoneType) for m in members)
            out.extend((m, index, optional) for m in members if self.types.from_type(m) is not None)
        return out


def _unpacked_types(t: Type, kind: ArgKind, offset: int = 0,
                    star_formal: bool = False) -> list[tuple[Type, int | None]]:
    """The types an actual passes to one formal, each with its index in a fixed tuple (else
    None): the actual itself; for ``*xs`` a list's (any iterable's) item type, for ``**d`` a
    mapping's value type.  A fixed tuple's items are spread over the formals in order (mypy
    gives each of them the whole tuple): this formal takes the item after the ``offset`` ones
    earlier formals took, or all the rest for a ``*args`` formal."""
    if kind not in (ARG_STAR, ARG_STAR2):
        return [(t, None)]
    p = get_proper_type(t)
    if isinstance(p, TupleType) and kind == ARG_STAR:
        if any(isinstance(get_proper_type(i), UnpackType) for i in p.items):
            return []  # tuple[int, *Ts]: positions unknown
        last = len(p.items) if star_formal else offset + 1
        return [(p.items[k], k) for k in range(offset, min(last, len(p.items)))]
    if isinstance(p, Instance) and p.args:  # tuple[T, ...] too (one item type)
        if kind == ARG_STAR2:
            return [(p.args[-1], None)] if len(p.args) == 2 else []
        return [(p.args[0], None)] if len(p.args) == 1 else []
    return []


def torch_function_name(sig: CallableType) -> str | None:
    """The fullname of the torch function a callable's signature is defined by (kept by a
    variable, an attribute, a partial holding it); None for anything else (a tensor method,
    a function of the user's)."""
    definition = sig.definition
    fullname = definition.fullname if definition is not None else ""
    if not fullname.startswith("torch.") or is_tensor_method_class(fullname.rpartition(".")[0]):
        return None
    return fullname


def _same_signature(a: CallableType, b: CallableType) -> bool:
    """The same parameters and result (mypy's own ``==`` also compares the name, which a
    function's type loses when a variable holds it)."""
    return (a.arg_kinds == b.arg_kinds and a.arg_names == b.arg_names
            and a.arg_types == b.arg_types and a.ret_type == b.ret_type)


# src=R and the like, read at every collective call: one (immutable) LocalType each
_MARKER_TYPES: Final = {f"spmd.{k}": LocalType(Kind(k)) for k in ("R", "I", "V", "P")}
# S(i) by its dim, made once (an immutable value, as the markers): a collective's answer is
# remembered by the identity of its src and dst (collective_hook), which a fresh S(1) per
# call defeated (its by-value lookup hashes the types: ~9k instructions a call)
_SHARD_TYPES: Final[dict[int, LocalType]] = {}


def _shard_type(dim: int) -> LocalType:
    """``LocalType(Kind.V, dim)``, the same object for the same dim."""
    found = _SHARD_TYPES.get(dim)
    if found is None:
        if len(_SHARD_TYPES) > 1_000:  # (bounded: a dim is a literal of the source)
            _SHARD_TYPES.clear()
        found = _SHARD_TYPES[dim] = LocalType(Kind.V, dim)
    return found


def read_local_type(expr: Expression) -> LocalType | None:
    """R/I/V/P/S(i) written as a src=/dst= argument, or None when not literal."""
    if isinstance(expr, RefExpr):
        marker = _MARKER_TYPES.get(expr.fullname)
        if marker is not None:
            return marker
    if (isinstance(expr, CallExpr) and isinstance(expr.callee, RefExpr)
            and expr.callee.fullname in ("spmd.S", "spmd.Shard") and len(expr.args) == 1):
        a = expr.args[0]
        if isinstance(a, IntExpr):
            return _shard_type(a.value)
        if isinstance(a, UnaryExpr) and a.op == "-" and isinstance(a.expr, IntExpr):
            return _shard_type(-a.expr.value)
    return None


def collective_call(e: Expression | None) -> tuple[str, tuple[str, ...], LocalType | None, str] | None:
    """``spmd.all_gather(x, "tp", src=S(0), dst=I)`` -> ("all_gather", ("tp",), S(0), "x"): the
    op, its literal axes, its src (None when left to the default) and its input, or None."""
    if not (isinstance(e, CallExpr) and isinstance(e.callee, RefExpr)
            and (e.callee.fullname or "").startswith("spmd.")):
        return None
    op = e.callee.fullname[5:]
    if op not in SPMD_COLLECTIVES:
        return None
    axis: Expression | None = None
    x: Expression | None = None
    src: LocalType | None = None
    positional = 0
    for arg, kind, name in zip(e.args, e.arg_kinds, e.arg_names):
        if name is None and kind == ARG_POS:
            positional += 1
            if positional == 1:
                x = arg
            elif positional == 2:
                axis = arg
        elif name == "x":
            x = arg
        elif name == "axis":
            axis = arg
        elif name == "src":
            src = read_local_type(arg)
            if src is None:
                return None
    axes = literal_strs(axis, None) if axis is not None else None
    if not axes or x is None:
        return None
    return op, tuple(axes), src, expr_text(x)


def made_by(e: Expression | None) -> coll.MadeBy | None:
    """The collective ``e`` calls, when it is one with literal axes (:class:`coll.MadeBy`)."""
    c = collective_call(e)
    return coll.MadeBy(c[0], c[1], c[2], c[3], part=_v_part(e)) if c is not None else None


def _v_part(e: Expression | None) -> str:
    """``aux_local`` of ``spmd.all_reduce(spmd.reinterpret(aux_local, "dp", src=V, dst=P),
    ...)``: the V value whose sum the all_reduce takes (MadeBy.part); "" else."""
    if not isinstance(e, CallExpr) or not e.args:
        return ""
    x = next((a for a, n in zip(e.args, e.arg_names) if n is None or n == "x"), None)
    c = collective_call(x)
    if c is None or c[0] != "reinterpret" or c[2] is None or c[2].kind is not Kind.V:
        return ""
    assert isinstance(x, CallExpr)
    dst = next((read_local_type(a) for a, n in zip(x.args, x.arg_names) if n == "dst"), None)
    if dst is None or dst.kind is not Kind.P:
        return ""
    inner = next((a for a, n in zip(x.args, x.arg_names) if n is None or n == "x"), None)
    return expr_text(inner) if inner is not None else ""


def made_by_binding(e: Expression | None, func: FuncDef | None) -> coll.MadeBy | None:
    """:func:`made_by` of the one binding of the local name ``e`` in ``func`` (``aux =
    spmd.all_reduce(...)``, then ``return aux``), its name in ``MadeBy.bound``; None when ``e``
    is no such name or the name is bound more than once."""
    if not isinstance(e, NameExpr) or e.node is None or func is None:
        return None
    defs = assignments_by_name(func).get(e.node, [])
    if len(defs) != 1 or defs[0][2] >= 0 or defs[0][0] > e.line:
        return None
    c = collective_call(defs[0][1])
    return coll.MadeBy(c[0], c[1], c[2], c[3], e.name, _v_part(defs[0][1])) if c is not None else None


_MAX_COLLECTIVES: Final = ("spmd.all_reduce", "spmd._collectives.all_reduce")


_Bindings = dict[SymbolNode, list[tuple[int, Expression]]]


def _plain_bindings(func: FuncDef) -> _Bindings:
    """``func``'s plain assignments of each local (no item or attribute target): (line,
    value), in order (statements.assignments_by_name).  Made once per result of that
    (kept while it is: callers only read it)."""
    assigned = assignments_by_name(func)
    cached = _PLAIN_BINDINGS.get(id(func))
    if cached is not None and cached[0] is assigned:
        return cached[1]
    plain = {node: [(line, value) for line, value, k in defs if k < 0]
             for node, defs in assigned.items()}
    if len(_PLAIN_BINDINGS) > 10_000:
        _PLAIN_BINDINGS.clear()
    _PLAIN_BINDINGS[id(func)] = (assigned, plain)
    return plain


_PLAIN_BINDINGS: Final[dict[int, tuple[Assignments, _Bindings]]] = {}


def _binding_before(assigned: _Bindings, seen: set[SymbolNode], sub: Expression, line: int,
                    x: Expression) -> tuple[int, Expression, str] | None:
    """The last binding before ``line`` of the local ``sub`` names (not ``x`` itself, the
    value being read), when ``sub`` is a name not followed yet (then marked in ``seen``):
    the step of the walks that follow a value's names back to where they were made; with the
    name as written (the redefinition renamer's quote dropped)."""
    if not isinstance(sub, NameExpr) or sub.node is None or sub.node in seen:
        return None
    defs = [d for d in assigned.get(sub.node, []) if d[0] <= line and d[1] is not x]
    if not defs:
        return None
    seen.add(sub.node)
    at, value = defs[-1]
    return at, value, sub.name.rstrip("'")


def rank_max(e: Expression | None, func: FuncDef | None,
             type_of: Callable[[Expression], SpmdType | None]) -> coll.RankMax | None:
    """The local name ``e``'s value is computed from (through the assignments of ``func``
    before it) that holds this rank's max or min (:class:`coll.RankMax`): assigned a max
    reduction (``amax = w.detach().abs().amax()``: engine ``max_reduction``) or an
    ``all_reduce(..., op="max")`` over some axes (V on the others), or assigned an expression
    with such a reduction in it.  Only a max whose type (``type_of``) is V with no shard dim
    on some axis: a max over a dim not sharded (``w.amax(dim=1)`` of an S(0) weight, each
    rank's own rows) is no statistic of the ranks.  None when there is none."""
    if e is None or func is None:
        return None

    def per_rank(x: Expression) -> bool:
        t = type_of(x)
        return t is not None and any(lt.kind is Kind.V and lt.dim is None and lt.by_rank is None
                                     for _, lt in t.axes)

    assigned = _plain_bindings(func)
    seen: set[SymbolNode] = set()
    todo: list[tuple[Expression, int]] = [(e, e.line)]
    while todo and len(seen) < 16:
        x, line = todo.pop(0)
        for sub in get_subexpressions(x):
            binding = _binding_before(assigned, seen, sub, line, x)
            if binding is None:
                continue
            at, value, local = binding
            text = expr_text(value)
            op: str | None = None
            detached = ".detach()" in text
            if (isinstance(value, CallExpr) and isinstance(value.callee, RefExpr)
                    and value.callee.fullname in _MAX_COLLECTIVES):
                for name, arg in zip(value.arg_names, value.args):
                    if name == "op" and isinstance(arg, StrExpr) and arg.value in ("max", "min"):
                        op, detached = arg.value, True
            else:
                op = coll.max_reduction(text)
            if op is not None and per_rank(sub):
                return coll.RankMax(local, op, text, detached)
            if _is_max_collective(value):
                # m = all_reduce(x.amax(-1), "tp", src=V, dst=R, op="max"): the max over the
                # ranks already, R there; the per-rank max in its argument reaches no further
                continue
            inner = _max_call(value)
            if inner is not None and per_rank(inner):  # scale = 127 / w.abs().amax().clamp(...)
                call = expr_text(inner)
                return coll.RankMax(call, coll.max_reduction(call) or "max", call,
                                    ".detach()" in call, local)
            todo.append((value, at))
    return None


def _rank_every(ops: Sequence[Operand], mesh: Sequence[str], text: str, by: Expression,
                func: FuncDef | None) -> coll.RankEvery | None:
    """The op with operands ``ops`` has an int computed from a rank query over every mesh axis
    (``by``, written ``text``) making it vary on ``mesh``: a :class:`coll.RankEvery` when the
    operands vary on some of those axes (S(i) or V: the rank was meant there) and not on
    others (varying there only because of the query).  Read on an error path only."""
    varying = {a for o in ops if o.type for a, lt in o.type.axes if lt.kind is Kind.V}
    meant = tuple(a for a in mesh if a in varying)
    blamed = tuple(a for a in mesh if a not in varying)
    if not meant or not blamed:
        return None
    query = every_query(by, func) if func is not None else None
    return coll.RankEvery(text, expr_text(query) if query is not None else None, blamed, meant)


# a condition's reads (CallTyper._value_reads): the metadata of a tensor (the engine's
# non-ops that read no value: ``x.dim()``, ``x.size(0)``), the modules whose functions compute
# from their arguments' values, and their functions that read none
_METADATA: Final = frozenset(NOT_OPS - frozenset(VALUE_READS))
_VALUE_MODULES: Final = ("torch.", "builtins.", "math.", "numpy.", "operator.")
_NO_VALUE_FUNCTIONS: Final = frozenset({
    "builtins.len", "builtins.isinstance", "builtins.issubclass", "builtins.hasattr",
    "builtins.callable", "builtins.type", "builtins.id", "builtins.getattr",
    "torch.is_tensor", "torch.is_floating_point", "torch.is_complex", "torch.numel",
    "torch.distributed.is_initialized", "torch.distributed.get_world_size"})


def _calls(call: CallExpr, func: FuncDef) -> bool:
    """Whether ``call`` calls ``func`` (its name bound to it, a decorated one's too), or is
    ``self.m()`` of a method ``m`` of that name (the pre-pass read the class)."""
    callee = call.callee
    if isinstance(callee, NameExpr):
        node = callee.node
        return node is func or (isinstance(node, Decorator) and node.func is func)
    return isinstance(callee, MemberExpr) and callee.name == func.name


def _default_group(e: Expression | None) -> bool:
    """A group= that is torch's default: none given, None, ``group.WORLD``."""
    return (e is None or (isinstance(e, NameExpr) and e.fullname == "builtins.None")
            or (isinstance(e, MemberExpr) and e.name == "WORLD"))


def rank_every(e: Expression | None, func: FuncDef | None, regions: RegionIndex,
               type_of: Callable[[Expression], SpmdType | None],
               mesh_axes: Sequence[str]) -> coll.RankEvery | None:
    """The op ``e``'s value is computed from (through the assignments of ``func`` before it)
    that has an int computed from a rank query over every mesh axis where its operands vary
    on some axes only (:func:`_rank_every`): ``labels = torch.arange(b) + dist.get_rank() * b``
    then ``F.cross_entropy(li, labels)`` with ``li`` S(0) on "dp" and R on "tp".  None when
    there is none.  Read on an error path only, in files with a rank query."""
    if e is None or func is None or not regions.rank_exprs:
        return None
    assigned = _plain_bindings(func)
    seen: set[SymbolNode] = set()
    todo: list[tuple[Expression, int]] = [(e, e.line)]
    while todo and len(seen) < 16:
        x, line = todo.pop(0)
        for sub in get_subexpressions(x):
            found = regions.rank_axes(sub)
            if found is not None and EVERY in found[0] and UNNAMED_GROUP not in found[0]:
                axes, by = found
                if isinstance(sub, CallExpr):
                    parts = [a for a in sub.args if a is not by]
                elif isinstance(sub, OpExpr):
                    parts = [a for a in (sub.left, sub.right) if a is not by]
                else:
                    parts = []
                ops = [Operand(t, expr_text(a)) for a in parts for t in [type_of(a)] if t]
                typed = {a for o in ops if o.type for a, _ in o.type.axes}
                mesh = [a for a in axes_in(axes, tuple(mesh_axes)) if a in typed]
                every = _rank_every(ops, mesh, expr_text(by), by, func)
                if every is not None:
                    return every
            binding = _binding_before(assigned, seen, sub, line, x)
            if binding is not None:
                todo.append((binding[1], binding[0]))  # (value, its line)
    return None


# Calls whose result is the same on every rank (a size, a count): an index built of them
# holds no rank
_SIZE_CALLS: Final = frozenset({"size", "numel", "dim", "len", "get_world_size", "int", "min",
                                "max", "abs", "ndimension"})
_SIZE_ATTRS: Final = frozenset({"shape", "ndim"})


def slice_index(e: Expression | None, func: FuncDef | None, regions: RegionIndex,
                mesh_axes: Sequence[str]) -> coll.SliceIndex | None:
    """What the checker knows of the index of the subscript ``e`` (engine
    :class:`~..engine.collectives.SliceIndex`): the axes of a rank query it is computed from
    (rank_index recorded it), or none at all when every name in it is known to hold no rank
    (:func:`_rankless`); None when it is not a subscript or its index may hold a rank the
    checker does not see (a parameter, an attribute set outside ``__init__``).  Read on an
    error path only."""
    if not isinstance(e, IndexExpr) or func is None:
        return None
    if regions.rank_exprs:
        found = regions.rank_axes(e)
        if found is not None:
            axes = found[0]
            if UNNAMED_GROUP in axes or EVERY in axes:
                return None  # the rank over every axis: rank_every's hint
            named = tuple(axes_in(axes, tuple(mesh_axes), False))
            return coll.SliceIndex(named) if named else None
    return coll.SliceIndex() if _rankless(e.index, func, 0) else None


def _rankless(e: Expression, func: FuncDef, depth: int) -> bool:
    """Whether ``e`` (an index, in ``func``) is known to hold no rank: literals, sizes
    (``x.size(0)``, ``len(xs)``, ``x.shape[0]``, ``mesh["tp"].size()``), module names, locals
    whose every binding holds none, ``self`` attributes bound in the class's ``__init__``
    to a value that holds none."""
    if depth > 6:
        return False
    if isinstance(e, (IntExpr, FloatExpr, StrExpr)):
        return True
    if isinstance(e, SliceExpr):
        return all(_rankless(p, func, depth) for p in (e.begin_index, e.end_index, e.stride)
                   if p is not None)
    if isinstance(e, OpExpr):
        return _rankless(e.left, func, depth) and _rankless(e.right, func, depth)
    if isinstance(e, UnaryExpr):
        return _rankless(e.expr, func, depth)
    if isinstance(e, TupleExpr):
        return all(_rankless(i, func, depth) for i in e.items)
    if isinstance(e, CallExpr):
        callee = e.callee
        name = callee.name if isinstance(callee, (NameExpr, MemberExpr)) else None
        if name not in _SIZE_CALLS:
            return False
        if name in ("size", "numel", "dim", "len", "get_world_size", "ndimension"):
            return True  # the same on every rank (a size), whatever it is of
        return all(_rankless(a, func, depth + 1) for a in e.args)
    if isinstance(e, IndexExpr):
        base = e.base
        return (isinstance(base, MemberExpr) and base.name in _SIZE_ATTRS
                and _rankless(e.index, func, depth + 1))
    if isinstance(e, MemberExpr):
        if e.name in _SIZE_ATTRS:
            return True
        return _self_attribute_rankless(e, func, depth)
    if isinstance(e, NameExpr):
        if e.kind == GDEF:
            return isinstance(e.node, Var)  # a module constant (a rank bound there is recorded)
        if e.kind != LDEF:
            return False
        if e.node is None or any(a.variable is e.node for a in func.arguments):
            return False  # a parameter: any value
        defs = assignments_by_name(func).get(e.node, [])
        if not defs or any(k >= 0 for _, _, k in defs) or _augmented(func, e.name):
            return False
        return all(_rankless(v, func, depth + 1) for _, v, _ in defs)
    return False


def _augmented(func: FuncDef, name: str) -> bool:
    """``name += ...`` (or a for loop's target ``name``) somewhere in ``func``."""
    for st in nested_statements(func.body.body):
        if isinstance(st, OperatorAssignmentStmt) and isinstance(st.lvalue, NameExpr) and (
                st.lvalue.name == name):
            return True
        if isinstance(st, ForStmt) and isinstance(st.index, NameExpr) and st.index.name == name:
            return True
    return False


def _self_attribute_rankless(e: MemberExpr, func: FuncDef, depth: int) -> bool:
    """``self.hl`` bound in the class's ``__init__`` (every binding there) to values that
    hold no rank (an attribute bound elsewhere may hold a rank the checker does not see)."""
    if not (isinstance(e.expr, NameExpr) and func.arguments and not func.is_static
            and not func.is_class and e.expr.node is func.arguments[0].variable
            and func.info is not None):
        return False  # (a static method's first parameter, a Function's ctx, is no self)
    init = func.info.get_method("__init__")
    if not isinstance(init, FuncDef):
        return False
    # an __init__ of a module loaded from mypy's cache (a base class in torch: Function's)
    # has no parameters or body: nothing to read (reading them raised: the boundary's
    # error stood as mypy's [return-value] on a warm run only)
    params = getattr(init, "arguments", None)
    if not params:
        return False
    me = params[0].variable
    values = [st.rvalue for st in nested_statements(init.body.body)
              if isinstance(st, AssignmentStmt) and len(st.lvalues) == 1
              and isinstance(st.lvalues[0], MemberExpr) and st.lvalues[0].name == e.name
              and isinstance(st.lvalues[0].expr, NameExpr) and st.lvalues[0].expr.node is me]
    return bool(values) and all(_rankless(v, init, depth + 1) for v in values)


def _returned_all_reduce(e: Expression) -> tuple[Expression, str] | None:
    """(the call, the function's name) when ``e`` calls a function whose one return is an
    ``spmd.all_reduce(...)`` written in place (``img = project(f, w)``): the dst=I fix of its
    result beside an I value is written there (engine ``Operand.made_in``)."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, RefExpr):
        return None
    node = e.callee.node
    fn = node.func if isinstance(node, Decorator) else node
    if not isinstance(fn, FuncDef):
        return None
    rets = returns(fn.body.body)
    if len(rets) != 1 or rets[0].expr is None:
        return None
    c = collective_call(rets[0].expr)
    if c is None or c[0] != "all_reduce":
        return None
    return rets[0].expr, fn.name


def _with_bindings(ctx: AnyCtx, ops: list[Operand]) -> list[Operand] | None:
    """``ops`` with each local name's binding before the op (``Operand.made``), for the
    invariant-mix rule's fix of a V statistic; None when no operand is such a name."""
    func = global_calls.current_function(ctx.api)
    if func is None:
        return None
    here = ctx.context
    if not isinstance(here, Expression):
        return None
    nodes: dict[str, SymbolNode] = {}
    for sub in get_subexpressions(here):
        if isinstance(sub, NameExpr) and sub.node is not None:
            nodes.setdefault(sub.name, sub.node)
    assigned = assignments_by_name(func)
    line = here.line
    out: list[Operand] = []
    changed = False
    for o in ops:
        node = nodes.get(o.text) if o.type else None
        defs = [v for at, v, k in assigned.get(node, []) if k < 0 and at <= line] if node else []
        if defs:
            returned = _returned_all_reduce(defs[-1])
            o = (dataclasses.replace(o, made=code_text(returned[0]), made_in=returned[1])
                 if returned is not None else dataclasses.replace(o, made=code_text(defs[-1])))
            changed = True
        out.append(o)
    return out if changed else None


_NORMALISERS: Final = ("softmax", "log_softmax", "logsumexp")


def _normaliser(e: Expression, type_of: Callable[[Expression], SpmdType | None]
                ) -> tuple[Expression, str, str] | None:
    """(input, op, dim text) of ``e`` when it is a softmax, log_softmax or logsumexp along a
    literal dim (``F.log_softmax(x, -1)``, ``x.softmax(dim=-1)``, ``torch.logsumexp(x, 1)``)."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, MemberExpr):
        return None
    op = e.callee.name
    if op not in _NORMALISERS:
        return None
    args = [a for a, n in zip(e.args, e.arg_names) if n is None]
    named = {n: a for a, n in zip(e.args, e.arg_names) if n is not None}
    base = e.callee.expr
    method = type_of(base) is not None
    if not method:  # torch.softmax(x, d), F.log_softmax(x, d)
        if not args and "input" not in named:
            return None
        x: Expression = args[0] if args else named["input"]
        args = args[1:]
    else:
        x = base
    dim_e = named.get("dim", args[0] if args else None)
    dim: int | None = None
    if isinstance(dim_e, IntExpr):
        dim = dim_e.value
    elif isinstance(dim_e, UnaryExpr) and dim_e.op == "-" and isinstance(dim_e.expr, IntExpr):
        dim = -dim_e.expr.value
    if dim is None:
        return None
    return x, op, str(dim)


def local_norm(e: Expression | None, func: FuncDef | None,
               type_of: Callable[[Expression], SpmdType | None]) -> coll.LocalNorm | None:
    """A softmax, log_softmax or logsumexp along a literal dim that ``e`` is computed from
    (in its text, or in the binding before it of a name it reads, through names bound once
    in ``func``) whose input is V on some axis (:class:`coll.LocalNorm`): S(dim) there, each
    rank normalises its own block of the dim; V, it may.  Read for an error only."""
    if e is None:
        return None
    assigned = _plain_bindings(func) if func is not None else {}
    seen: set[SymbolNode] = set()
    todo: list[tuple[Expression, int, str | None]] = [(e, e.line, None)]
    while todo and len(seen) < 16:
        x, line, bound = todo.pop(0)
        for sub in get_subexpressions(x):
            found = _normaliser(sub, type_of)
            if found is not None:
                inp, op, dim = found
                t = type_of(inp)
                if t is not None:
                    # (a softmax, log_softmax of an S(dim) input is an error at the call itself,
                    # ops.normalised_along_shard_error: reported once, there)
                    sharded = tuple(a for a, lt in t.axes
                                    if lt.kind is Kind.V and lt.dim is not None
                                    and str(lt.dim) == dim and op not in NORMALISING)
                    varying = tuple(a for a, lt in t.axes if lt.kind is Kind.V and lt.dim is None)
                    if sharded or varying:
                        src = expr_text(sub)
                        name = bound if bound is not None and sub is x else src
                        return coll.LocalNorm(name, src, op, expr_text(inp), dim, sharded, varying)
            binding = _binding_before(assigned, seen, sub, line, x)
            if binding is None:
                continue
            at, value, local = binding
            todo.append((value, at, local))
    return None


_SUMMING_COLLECTIVES: Final = frozenset(
    f"{m}.{n}" for m in ("spmd", "spmd._collectives", "torch.distributed",
                          "torch.distributed.distributed_c10d")
    for n in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "redistribute",
              "all_gather_into_tensor", "reduce_scatter_tensor"))


def unfinished_norm(e: Expression | None, func: FuncDef | None,
                    type_of: Callable[[Expression], SpmdType | None],
                    axis: str) -> coll.LocalNorm | None:
    """A softmax, log_softmax or logsumexp along a literal dim whose input is S(dim) on
    ``axis`` that ``e`` is computed from (its text, and the bindings of the names it reads,
    as :func:`local_norm` follows them), when no collective appears on the way: a value
    normalised per rank's block, its normaliser not completed over the ranks (a collective
    anywhere on the way may be that completion: a ring-attention merge of the blocks'
    logsumexps with the all-reduced one; then None).  Read for the claim of a sum of parts."""
    if e is None:
        return None
    if not _may_normalise(func, e):
        return None  # no normaliser written where the walk below reads: nothing found
    assigned = _plain_bindings(func) if func is not None else {}
    seen: set[SymbolNode] = set()
    todo: list[tuple[Expression, int, str | None]] = [(e, e.line, None)]
    found: coll.LocalNorm | None = None
    while todo and len(seen) < 32:
        x, line, bound = todo.pop(0)
        for sub in get_subexpressions(x):
            if (isinstance(sub, CallExpr) and isinstance(sub.callee, RefExpr)
                    and sub.callee.fullname in _SUMMING_COLLECTIVES):
                return None
            if found is None:
                norm = _normaliser(sub, type_of)
                if norm is not None:
                    inp, op, dim = norm
                    t = type_of(inp)
                    lt = t.get(axis) if t is not None else None
                    if (lt is not None and lt.kind is Kind.V and lt.dim is not None
                            and str(lt.dim) == dim and op not in NORMALISING):
                        # (a softmax's is reported at the call: ops.normalised_along_shard_error)
                        src = expr_text(sub)
                        name = bound if bound is not None and sub is x else src
                        found = coll.LocalNorm(name, src, op, expr_text(inp), dim, (axis,), ())
            binding = _binding_before(assigned, seen, sub, line, x)
            if binding is not None:
                at, value, local = binding
                todo.append((value, at, local))
    return found


def _is_normaliser_call(e: Expression) -> bool:
    """A call :func:`_normaliser` may read (it reads no other expression); mypy's classes,
    never subclassed, told by class (asked of every sub-expression of a function)."""
    if type(e) is not _CallExpr:
        return False
    callee = cast(CallExpr, e).callee
    return type(callee) is _MemberExpr and cast(MemberExpr, callee).name in _NORMALISERS


def _may_normalise(func: FuncDef | None, e: Expression) -> bool:
    """Whether a softmax, log_softmax or logsumexp call is written in ``e`` or anywhere in
    ``func``'s body (nested definitions too): where :func:`unfinished_norm`'s walk (``e``,
    then the values of ``func``'s assignments) can find one; when not, that walk finds
    nothing.  The body's answer is computed once per body (a :class:`~.memo.FunctionMemo`)."""
    if any(_is_normaliser_call(sub) for sub in get_subexpressions(e)):
        return True
    return func is not None and _NORMALISER_CALLS.get(func)


def _body_normalises(func: FuncDef) -> bool:
    return any(_is_normaliser_call(sub) for sub in get_subexpressions(func.body))


_NORMALISER_CALLS: Final = FunctionMemo(_body_normalises)


def _is_max_collective(e: Expression) -> bool:
    """``e`` is an ``all_reduce(..., op="max")`` (or "min"): a max over the ranks."""
    if not (isinstance(e, CallExpr) and isinstance(e.callee, RefExpr)
            and e.callee.fullname in _MAX_COLLECTIVES):
        return False
    return any(name == "op" and isinstance(arg, StrExpr) and arg.value in ("max", "min")
               for name, arg in zip(e.arg_names, e.args))


def _max_call(e: Expression) -> Expression | None:
    """The outermost call in ``e`` that is this rank's max or min (engine max_reduction),
    other than ``e`` itself (``127 / w.detach().abs().amax().clamp(min=eps)``); none inside
    an ``all_reduce(..., op="max")``, which takes the max over the ranks."""
    inside: set[int] = set()
    for sub in get_subexpressions(e):
        if id(sub) in inside:
            continue
        if sub is not e and _is_max_collective(sub):
            inside.update(id(x) for x in get_subexpressions(sub))
            continue
        if sub is not e and isinstance(sub, CallExpr) and coll.max_reduction(expr_text(sub)):
            return sub
    return None


def _is_tensor_list(t: Type) -> bool:
    p = get_proper_type(t)
    if isinstance(p, Instance) and p.type.fullname == "builtins.list" and len(p.args) == 1:
        item = get_proper_type(p.args[0])
        return isinstance(item, Instance) and item.type.fullname in TORCH_TENSOR_BASES
    return False


def _with_arg_types(sig: CallableType, changes: dict[int, Type]) -> CallableType:
    """``sig`` with the parameter types in ``changes`` (by index) replaced."""
    if not changes:
        return sig
    arg_types = list(sig.arg_types)
    for i, t in changes.items():
        arg_types[i] = t
    return sig.copy_modified(arg_types=arg_types)


def _widen_tensor_list(t: Type, sequence: TypeInfo, item: Type) -> Type:
    """``list[Tensor]`` (alone or in a union) as ``Sequence[item]``; anything else as is."""
    p = get_proper_type(t)
    if _is_tensor_list(p):
        return Instance(sequence, [item], line=p.line, column=p.column)
    if isinstance(p, UnionType) and _takes_list(p):
        return UnionType([_widen_tensor_list(i, sequence, item) for i in p.items], p.line, p.column)
    return t


def erase_typed_tensors(t: Type, depth: int = 0) -> Type | None:
    """``t`` with plain ``torch.Tensor`` (the canonical class's base, as in ``_relax``) for
    every typed tensor in it (through containers, tuples, unions and callables); None when
    there is none."""
    if depth > 8:  # a recursive alias: leave it
        return None
    p = get_proper_type(t)
    if isinstance(p, Instance):
        if p.type.fullname == TENSOR:
            return p.type.bases[0] if p.type.bases else None
        args = _erase_all(p.args, depth)
        return p.copy_modified(args=args) if args is not None else None
    if isinstance(p, TupleType):
        items = _erase_all(p.items, depth)
        return p.copy_modified(items=items) if items is not None else None
    if isinstance(p, UnionType):
        items = _erase_all(p.items, depth)
        return UnionType(items, p.line, p.column) if items is not None else None
    if isinstance(p, CallableType):
        ret = erase_typed_tensors(p.ret_type, depth + 1)
        args = _erase_all(p.arg_types, depth)
        if ret is None and args is None:
            return None
        return p.copy_modified(ret_type=ret if ret is not None else p.ret_type,
                               arg_types=args if args is not None else p.arg_types)
    return None


def _erase_all(types: Sequence[Type], depth: int) -> list[Type] | None:
    new: list[Type] | None = None
    for i, t in enumerate(types):
        e = erase_typed_tensors(t, depth + 1)
        if e is not None:
            if new is None:
                new = list(types)
            new[i] = e
    return new


def _takes_list(t: Type) -> bool:
    """``list[Tensor]``, alone or in a union: a parameter type to widen."""
    p = get_proper_type(t)
    return _is_tensor_list(p) or (isinstance(p, UnionType) and any(_is_tensor_list(i) for i in p.items))


def takes_tensor_list(node: SymbolNode | None) -> bool:
    """Whether the function ``node`` (any overload of it) has a ``list[Tensor]`` parameter."""
    items: list[SymbolNode] = []
    if isinstance(node, OverloadedFuncDef):
        items.extend(node.items)
    elif node is not None:
        items.append(node)
    for item in items:
        t = item.func.type if isinstance(item, Decorator) else getattr(item, "type", None)
        p = get_proper_type(t) if t is not None else None
        if isinstance(p, CallableType) and any(_takes_list(a) for a in p.arg_types):
            return True
    return False


def is_tensor_method_class(cls: str) -> bool:
    return cls in (TENSOR, "torch._tensor.Tensor", "torch._C.TensorBase",
                   "torch.nn.parameter.Parameter")


def method_op_name(method: str) -> tuple[str, bool] | None:
    if method in DUNDERS:
        return DUNDERS[method]
    if method.startswith("_") or method in NOT_OPS or method in FACTORIES:
        return None
    return method, False


def unused(*_: object) -> AnyType:
    return AnyType(TypeOfAny.special_form)


def _cut_dim(node: Context, by: Expression) -> int | None:
    """The dim a rank-derived slice cuts: ``full[r * k:(r + 1) * k]`` 0,
    ``full[:, r * k:(r + 1) * k]`` 1 (one cut, the other items whole ``:``; ``by`` is the
    rank-derived index, the tuple there), ``full.narrow(1, r * k, k)`` 1; None for anything
    else (an int index, ``...``, a computed dim)."""
    if isinstance(node, IndexExpr):
        if node.index is not by:
            return None
        if isinstance(by, SliceExpr):
            return 0
        if isinstance(by, TupleExpr):  # the one cut after whole dims only
            for i, item in enumerate(by.items):
                if not isinstance(item, SliceExpr):
                    return None
                if not (item.begin_index is None and item.end_index is None
                        and item.stride is None):
                    rest = by.items[i + 1:]
                    return i if all(isinstance(x, SliceExpr) and x.begin_index is None
                                    and x.end_index is None and x.stride is None
                                    for x in rest) else None
        return None
    if (isinstance(node, CallExpr) and isinstance(node.callee, MemberExpr)
            and node.callee.name == "narrow" and len(node.args) == 3
            and all(k == ARG_POS for k in node.arg_kinds) and node.args[1] is by):
        dim = node.args[0]
        return dim.value if isinstance(dim, IntExpr) else None
    return None
