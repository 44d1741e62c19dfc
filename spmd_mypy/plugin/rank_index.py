"""Rank-derived indices: where a tensor op's argument is computed from the rank.

``r = dist.get_rank(); mine = full[r * b:(r + 1) * b]`` takes a different slice on each rank:
the result differs across the axes the rank query runs over, whatever ``full`` is (an R
``full`` gives a V ``mine``; its backward zero-pads each rank's gradient, a per-rank partial,
as ``convert(R->S(i))``'s backward does).  mypy types ``r`` as a plain ``int``, so the rule
reads the source: in the pre-pass (rewrite.prepare_file), only in the functions that call a
rank query (``dist.get_rank()``, ``mesh.get_local_rank("tp")``, ``mesh.get_coordinate()``,
``dist.get_group_rank(...)``, or one of the module's own functions that returns one), the
locals bound from one (through int arithmetic, ``int/min/max/abs/range/divmod``, tuple items,
loop variables over such a range) are rank-derived; each subscript whose index, operator or
comparison whose operand, and call whose argument mentions one is recorded by node, with the
axes it varies on.  The op hook asks only for a recorded node (by id, ``RegionIndex.rank_exprs``): code without
rank queries pays a dict truth test per op.

Axes (:func:`query_axes`, the one place that decides them for both rules):
``mesh.get_local_rank("tp")`` / ``mesh_dim="tp"`` / ``mesh["tp"].get_local_rank()``,
``get_rank(g)`` of a group :func:`group_axis` reads as "tp" (``mesh.get_group("tp")``, a local
or ``self`` attribute bound to one) and Megatron's ``get_tensor_model_parallel_rank()`` vary on
"tp"; ``os.environ["RANK"]`` and any other query (no group, a group or mesh dim the source
does not name) on every mesh axis (:data:`EVERY`); ``LOCAL_RANK`` and
``dist.get_node_local_rank()`` on the axes with ranks on one node (:data:`NODE_LOCAL`: every
axis for the rank-index rule, none the divergent-collective rule blames).  A comparison every rank passes
(``dist.get_rank() >= 0``, ``r < world_size``: :meth:`_Scan.uniform`) varies on none.
"""

from __future__ import annotations

from typing import Final, Optional, Sequence, cast

from mypy.nodes import (
    Argument,
    AssignmentStmt,
    Block,
    BreakStmt,
    CallExpr,
    ClassDef,
    ContinueStmt,
    ComparisonExpr,
    ConditionalExpr,
    Decorator,
    Expression,
    ExpressionStmt,
    ForStmt,
    FuncDef,
    IfStmt,
    FloatExpr,
    IntExpr,
    IndexExpr,
    ListExpr,
    MatchStmt,
    MemberExpr,
    MypyFile,
    NameExpr,
    OperatorAssignmentStmt,
    OpExpr,
    RaiseStmt,
    ReturnStmt,
    SliceExpr,
    StarExpr,
    Statement,
    StrExpr,
    TryStmt,
    TupleExpr,
    UnaryExpr,
    WhileStmt,
    WithStmt,
)
from mypy.patterns import AsPattern
from mypy.types import UnboundType
from mypy.server.subexpr import get_subexpressions

from .statements import functions_of, nested_statements
from ..engine.megatron import TYPED_MAPPINGS
from ..engine.collectives import (COLLECTIVES, DIVERGENCE_ONLY_COLLECTIVES, MEGATRON_PARALLEL_AXES,
                                  RAW_COLLECTIVES, RAW_FUNCTIONAL_COLLECTIVES, RAW_NN_COLLECTIVES)

# The axes a value varies on: a frozenset of axis names, or of EVERY (all mesh axes)
EVERY: Final = "*"
_ALL: Final = frozenset({EVERY})
# beside EVERY: a query of a group the source does not name (``dist.get_rank(tp_group)``, a
# local or a parameter): every axis for the rank-index rule (sound), but no condition the
# divergent-collective rule or the every-axis hint may blame (it may be any one axis)
UNNAMED_GROUP: Final = "?"
_UNNAMED: Final = frozenset({EVERY, UNNAMED_GROUP})
# a rank within the node (``LOCAL_RANK``, ``dist.get_node_local_rank()``): it differs between
# the ranks of an axis only where that axis has several ranks on one node, a placement the
# source does not say: every axis for the rank-index rule (sound), but no axis the
# divergent-collective rule blames (an inter-node dp under ``if local_rank == 0:`` is correct)
NODE_LOCAL: Final = "~"
_NODE: Final = frozenset({NODE_LOCAL})
# beside the axes of a condition: it may read a tensor's value (``if r.abs().max() < tol:``,
# ``if loss.item() > 3:``), whose axes only the types tell (the hook: a V or S(i) read on an
# axis makes the condition differ between that axis's ranks)
VALUE: Final = "<value>"
_VALUE: Final = frozenset({VALUE})

# Megatron's getters (``parallel_state.get_tensor_model_parallel_rank()``, ``mpu.*``), by name:
# the axis (the engine's one table)
MEGATRON_RANKS: Final = {f"get_{k}_rank": a for k, a in MEGATRON_PARALLEL_AXES.items()}
MEGATRON_GROUPS: Final = {f"get_{k}_group": a for k, a in MEGATRON_PARALLEL_AXES.items()}
MEGATRON_SIZES: Final = {f"get_{k}_world_size": a for k, a in MEGATRON_PARALLEL_AXES.items()}
RANK_QUERIES: Final = frozenset({"get_rank", "get_local_rank", "get_coordinate", "get_group_rank",
                                 "get_node_local_rank", *MEGATRON_RANKS})
# the environment variables torchrun sets: a rank (RANK read as dist.get_rank(): every mesh
# axis; LOCAL_RANK: NODE_LOCAL) and the matching count (``rank < world_size`` holds on every rank)
ENV_RANKS: Final = frozenset({"RANK", "LOCAL_RANK"})
_ENV_SIZES: Final = {"WORLD_SIZE": "RANK", "LOCAL_WORLD_SIZE": "LOCAL_RANK"}
# calls whose int result carries their arguments' rank dependence
_INT_CALLS: Final = frozenset({"int", "min", "max", "abs", "range", "divmod", "round"})

# mypy's node classes has_query dispatches on, bound once: mypy is compiled in its own mypyc
# group, so to this compiled module a bare imported name is a dict lookup at every use (a
# ``Final`` module attribute is a C static; as rewrite.py binds them).  has_query runs at
# every assignment in a function (the pre-pass): ~200k such lookups on the 20k-line corpus.
_CallExpr: Final = CallExpr
_ComparisonExpr: Final = ComparisonExpr
_ConditionalExpr: Final = ConditionalExpr
_IndexExpr: Final = IndexExpr
_ListExpr: Final = ListExpr
_MemberExpr: Final = MemberExpr
_NameExpr: Final = NameExpr
_OpExpr: Final = OpExpr
_SliceExpr: Final = SliceExpr
_TupleExpr: Final = TupleExpr
_UnaryExpr: Final = UnaryExpr
_AssignmentStmt: Final = AssignmentStmt
_ForStmt: Final = ForStmt
_OperatorAssignmentStmt: Final = OperatorAssignmentStmt
_WithStmt: Final = WithStmt
_Decorator: Final = Decorator
_FuncDef: Final = FuncDef
_ReturnStmt: Final = ReturnStmt
# calls whose int argument is a device or a seed, not an index: x.to(local_rank)
_DEVICE_CALLS: Final = frozenset({"to", "cuda", "device", "set_device", "manual_seed", "seed",
                                  "pin_memory"})


def _str_arg(call: CallExpr, name: str) -> Optional[str]:
    """The call's first positional or ``name=`` argument, if a string literal."""
    for a, kind_name in zip(call.args, call.arg_names):
        if kind_name is None or kind_name == name:
            return a.value if isinstance(a, StrExpr) else None
    return None


def _ref(e: Expression) -> Optional[str]:
    """A local or an attribute of one as written (``tp_group``, ``self.tp_group``)."""
    if isinstance(e, NameExpr):
        return e.name
    if isinstance(e, MemberExpr) and isinstance(e.expr, NameExpr):
        return e.expr.name + "." + e.name
    return None


def group_axis(e: Optional[Expression], groups: Optional[dict[str, str]] = None) -> Optional[str]:
    """The mesh axis a process group expression is: ``mesh.get_group("tp")`` (or
    ``mesh_dim="tp"``), ``mesh["tp"].get_group()``, Megatron's
    ``parallel_state.get_tensor_model_parallel_group()``, the functional collectives' ``(mesh,
    "tp")``, or a local or attribute ``groups`` binds to one (its function's or class's every
    assignment of it); "" for torch's default group (none, None, ``group.WORLD``); None for
    any other (a parameter, a group of several axes or of some ranks).  The one reading of a
    group for the rank queries and the raw collectives."""
    if e is None:
        return ""
    if isinstance(e, NameExpr):
        if e.name == "None" or e.name == "WORLD":
            return ""
    elif isinstance(e, MemberExpr):
        if e.name == "WORLD":  # dist.group.WORLD
            return ""
    elif isinstance(e, CallExpr):
        callee = e.callee
        if isinstance(callee, MemberExpr) and callee.name == "get_group":
            axis = _str_arg(e, "mesh_dim")
            if axis is not None:
                return axis
            inner = callee.expr
            if not e.args and isinstance(inner, IndexExpr) and isinstance(inner.index, StrExpr):
                return inner.index.value  # mesh["tp"].get_group()
            return None
        if isinstance(callee, (NameExpr, MemberExpr)) and callee.name in MEGATRON_GROUPS:
            # with_context_parallel=True and the like: a group of several axes
            return None if e.args else MEGATRON_GROUPS[callee.name]
        return None
    elif isinstance(e, TupleExpr):
        if len(e.items) == 2 and isinstance(e.items[1], StrExpr):
            return e.items[1].value  # the functional collectives' (mesh, "tp")
        return None
    if groups:
        ref = _ref(e)
        if ref is not None:
            return groups.get(ref)
    return None


def _group_arg(call: CallExpr) -> tuple[bool, Optional[Expression]]:
    """A query's group argument (its first positional or ``group=``): whether given, and it."""
    for a, n in zip(call.args, call.arg_names):
        if n is None or n == "group":
            return True, a
    return False, None


def _group_axes(call: CallExpr, groups: Optional[dict[str, str]]) -> frozenset:
    """``dist.get_rank(mesh.get_group("tp"))``, ``mesh["tp"].get_group()``, a local or
    attribute bound to one (:func:`group_axis`): "tp"; no group or the world: every axis; a
    group the source does not name here (a parameter, a group of several axes): every axis,
    marked UNNAMED_GROUP."""
    _, a = _group_arg(call)
    axis = group_axis(a, groups)
    if axis is None:
        return _UNNAMED
    return _ALL if axis == "" else frozenset({axis})


def _environ(e: Expression) -> bool:
    return ((isinstance(e, MemberExpr) or isinstance(e, NameExpr))
            and cast("MemberExpr | NameExpr", e).name == "environ")


def env_read(e: Expression) -> Optional[str]:
    """The environment variable ``e`` reads (``os.environ["RANK"]``, ``os.environ.get("RANK",
    "0")``, ``os.getenv("RANK")``), None for any other expression."""
    if isinstance(e, IndexExpr):
        if _environ(e.base) and isinstance(e.index, StrExpr):
            return e.index.value
    elif isinstance(e, CallExpr) and e.args and isinstance(e.args[0], StrExpr):
        callee = e.callee
        if isinstance(callee, MemberExpr) and (
                callee.name == "getenv" or (callee.name == "get" and _environ(callee.expr))):
            return e.args[0].value
        if isinstance(callee, NameExpr) and callee.name == "getenv":
            return e.args[0].value
    return None


def _env_axes(name: Optional[str]) -> Optional[frozenset]:
    """The axes torchrun's ``RANK`` (every axis) or ``LOCAL_RANK`` (NODE_LOCAL) varies on."""
    if name == "RANK":
        return _ALL
    return _NODE if name == "LOCAL_RANK" else None


def query_axes(e: Expression, helpers: dict[str, frozenset],
               groups: Optional[dict[str, str]] = None) -> Optional[frozenset]:
    """The axes the rank query ``e`` varies on; None when it is not one.  The one place that
    decides it, for the rank-index and the divergent-collective rules: ``dist.get_rank()``
    and ``os.environ["RANK"]`` (``LOCAL_RANK`` too): every axis; ``mesh.get_local_rank("tp")``,
    ``dist.get_rank(g)`` of a group :func:`group_axis` reads as "tp", Megatron's
    ``get_tensor_model_parallel_rank()``: "tp"; a group not read: every axis, UNNAMED_GROUP;
    a module function returning one (``helpers``): its axes."""
    if not isinstance(e, CallExpr):
        return _env_axes(env_read(e)) if isinstance(e, IndexExpr) else None
    call = e
    callee = call.callee
    if isinstance(callee, NameExpr):
        if callee.name in helpers:
            return helpers[callee.name]
        name = callee.name
    elif isinstance(callee, MemberExpr):
        name = callee.name
    else:
        return None
    if name not in RANK_QUERIES:
        if name == "get" or name == "getenv":
            return _env_axes(env_read(call))
        return None
    if name in MEGATRON_RANKS:
        if not call.args:
            return frozenset({MEGATRON_RANKS[name]})
        if name == "get_data_parallel_rank" and call.arg_names == ["with_context_parallel"] \
                and isinstance(call.args[0], NameExpr) and call.args[0].name in ("True", "False"):
            dp = MEGATRON_PARALLEL_AXES["data_parallel"]
            return (frozenset({dp, MEGATRON_PARALLEL_AXES["context_parallel"]})
                    if call.args[0].name == "True" else frozenset({dp}))
        return _UNNAMED  # a rank in a group of some other ranks
    if name == "get_local_rank":
        axis = _str_arg(call, "mesh_dim")
        if axis is not None:
            return frozenset({axis})
        if isinstance(callee, MemberExpr) and isinstance(callee.expr, IndexExpr) \
                and isinstance(callee.expr.index, StrExpr):  # mesh["tp"].get_local_rank()
            return frozenset({callee.expr.index.value})
        return _ALL
    if name == "get_rank" or name == "get_group_rank":
        return _group_axes(call, groups)
    if name == "get_coordinate":  # its items are the mesh dims' ranks, in an order not read here
        return _UNNAMED
    if name == "get_node_local_rank":
        return _NODE
    return _ALL


def has_query(e: Optional[Expression], helpers: dict[str, frozenset]) -> bool:
    """A rank query in an assigned value (shallow: calls, operators, tuples).  Run at every
    assignment in a function: exact-class dispatch, a name test before anything else."""
    cls = type(e)
    if cls is _CallExpr:
        call = cast(CallExpr, e)
        callee = call.callee
        ccls = type(callee)
        if ccls is _MemberExpr or ccls is _NameExpr:
            name = cast("MemberExpr | NameExpr", callee).name
            if name in RANK_QUERIES or name in helpers:
                return True
            if name == "get" or name == "getenv":  # os.environ.get("RANK")
                return env_read(call) in ENV_RANKS
        if ccls is _NameExpr and cast(NameExpr, callee).name in _INT_CALLS:  # int(get_rank())
            for a in call.args:
                if has_query(a, helpers):
                    return True
            return False
        # torch.save(full[dist.get_rank()].clone(), path): the arguments and the receiver
        for a in call.args:
            if has_query(a, helpers):
                return True
        return ccls is _MemberExpr and has_query(cast(MemberExpr, callee).expr, helpers)
    if cls is _IndexExpr:  # os.environ["RANK"], full[dist.get_rank()]
        index_e = cast(IndexExpr, e)
        if env_read(index_e) in ENV_RANKS:
            return True
        index = index_e.index
        if type(index) is _SliceExpr:
            s = cast(SliceExpr, index)
            return (has_query(s.begin_index, helpers) or has_query(s.end_index, helpers)
                    or has_query(s.stride, helpers))
        return has_query(index, helpers)
    if cls is _NameExpr:  # a module-level rank (rank_helpers: "=RANK")
        return bool(helpers) and "=" + cast(NameExpr, e).name in helpers
    if cls is _OpExpr:
        op = cast(OpExpr, e)
        return has_query(op.left, helpers) or has_query(op.right, helpers)
    if cls is _TupleExpr or cls is _ListExpr:
        for i in cast("TupleExpr | ListExpr", e).items:
            if has_query(i, helpers):
                return True
        return False
    if cls is _ComparisonExpr:  # if dist.get_rank() == 0:
        for o in cast(ComparisonExpr, e).operands:
            if has_query(o, helpers):
                return True
        return False
    if cls is _UnaryExpr:
        return has_query(cast(UnaryExpr, e).expr, helpers)
    if cls is _ConditionalExpr:
        c = cast(ConditionalExpr, e)
        return (has_query(c.cond, helpers) or has_query(c.if_expr, helpers)
                or has_query(c.else_expr, helpers))
    return False


def rank_helpers(file: MypyFile) -> dict[str, frozenset]:
    """The module-level functions that return a rank query (``def my_rank() -> int: return
    dist.get_rank()``) or a value computed from one alone (``def is_main() -> bool: return
    dist.get_rank() == 0``), with its axes; and, under ``"=" + name``, the module-level
    names every module-level binding of which is rank-derived (``RANK = dist.get_rank()``,
    ``LOCAL = RANK % 8``), read in a function that binds no local of that name."""
    out: dict[str, frozenset] = {}
    module_names(file, out)
    for d in file.defs:  # (exact classes: mypy does not subclass its nodes)
        f = cast(Decorator, d).func if type(d) is _Decorator else d
        if type(f) is not _FuncDef:
            continue
        func = cast(FuncDef, f)
        body = func.body.body
        if body:
            last = body[-1]
            if type(last) is _ReturnStmt and cast(ReturnStmt, last).expr is not None:
                # return dist.get_rank(); return dist.get_rank() == 0 (def is_main())
                value = cast(Expression, cast(ReturnStmt, last).expr)
                scan = _Scan(out)
                if len(body) == 1:  # return RANK == 0 of a module-level RANK
                    scan.locals = {a.variable.name for a in func.arguments}
                axes = (query_axes(cast(CallExpr, value), out) if type(value) is _CallExpr
                        else scan.taint(value))
                if axes is not None:
                    out[func.name] = axes
    return out


def module_names(file: MypyFile, out: dict[str, frozenset]) -> None:
    """The module-level rank-derived names into ``out`` (as ``"=" + name``): a name every
    module-level binding of which (nested blocks too: ``if``, ``try``) is a single-name
    assignment computed from a rank query or another such name; and, as ``"#" + name``, the
    names that are a rank or a count of ranks themselves (``WORLD = dist.get_world_size()``:
    ``{"size:RANK"}``, :meth:`_Scan.count`), for ``if RANK < WORLD:`` (every rank passes)."""
    bound: dict[str, Optional[frozenset]] = {}
    counted: dict[str, Optional[frozenset]] = {}
    scan = _Scan(out)
    scan.locals = set()
    for st in nested_statements(file.defs):
        cls = type(st)  # (exact classes: mypy does not subclass its statements)
        if cls is _AssignmentStmt:
            st = cast(AssignmentStmt, st)
            rank = has_query(st.rvalue, out)
            for lv in st.lvalues:
                for t in (lv.items if isinstance(lv, (_TupleExpr, _ListExpr)) else [lv]):
                    if isinstance(t, _NameExpr):
                        axes = scan.taint(st.rvalue) if rank and t is lv else None
                        old = bound.get(t.name, axes)
                        got = None if old is None or axes is None else old | axes
                        bound[t.name] = got
                        if got is not None:
                            out["=" + t.name] = got
                        else:
                            out.pop("=" + t.name, None)
                        c = scan.count(st.rvalue) if t is lv else None
                        kept = None if c is None else frozenset({c[0] + ":" + c[1]})
                        if counted.get(t.name, kept) != kept:
                            kept = None
                        counted[t.name] = kept
                        if kept is not None:
                            out["#" + t.name] = kept
                        else:
                            out.pop("#" + t.name, None)
        elif cls is _ForStmt or cls is _OperatorAssignmentStmt or cls is _WithStmt:
            targets: list[Expression] = (
                [cast(ForStmt, st).index] if cls is _ForStmt
                else [cast(OperatorAssignmentStmt, st).lvalue] if cls is _OperatorAssignmentStmt
                else [t for t in cast(WithStmt, st).target if t is not None])
            for t in targets:
                for n in (t.items if isinstance(t, (_TupleExpr, _ListExpr)) else [t]):
                    if isinstance(n, _NameExpr):
                        bound[n.name] = counted[n.name] = None
                        out.pop("=" + n.name, None)
                        out.pop("#" + n.name, None)


def _int_value(e: Expression) -> Optional[int]:
    """An int literal's value (``-1`` too)."""
    if isinstance(e, IntExpr):
        return e.value
    if isinstance(e, UnaryExpr) and e.op == "-" and isinstance(e.expr, IntExpr):
        return -e.expr.value
    return None


# A condition on one rank as the ranks it passes: (the rank's key, the int literals, whether
# it passes the ranks NOT among them): ``r == 0`` -> (r, {0}, False), ``r not in (-1, 0)``
# -> (r, {-1, 0}, True), ``not c`` flips c's
RankSet = tuple[str, frozenset, bool]


def _rank_set(e: Expression) -> Optional[RankSet]:
    if isinstance(e, UnaryExpr) and e.op == "not":
        inner = _rank_set(e.expr)
        return None if inner is None else (inner[0], inner[1], not inner[2])
    if not isinstance(e, ComparisonExpr) or len(e.operators) != 1:
        return None
    op = e.operators[0]
    left, right = e.operands
    if op in ("==", "!="):
        k = _int_value(right)
        subject = left
        if k is None:
            k, subject = _int_value(left), right
        if k is None or not isinstance(subject, (NameExpr, MemberExpr, CallExpr)):
            return None
        return (_key(subject), frozenset({k}), op == "!=")
    if op in ("in", "not in") and isinstance(right, (TupleExpr, ListExpr)) \
            and isinstance(left, (NameExpr, MemberExpr, CallExpr)):
        values = [_int_value(i) for i in right.items]
        if not values or any(v is None for v in values):
            return None
        return (_key(left), frozenset(cast(list, values)), op == "not in")
    return None


def _splits(a: RankSet, b: RankSet) -> bool:
    """Each rank (a non-negative int) passes exactly one of the two conditions."""
    if a[0] != b[0] or a[2] == b[2]:
        return False
    pos, neg = (a[1], b[1]) if b[2] else (b[1], a[1])
    # the ranks neg passes are those outside neg: exactly those outside pos
    return {v for v in pos if v >= 0} == {v for v in neg if v >= 0}


def _union(a: Optional[frozenset], b: Optional[frozenset]) -> Optional[frozenset]:
    if a is None:
        return b
    if b is None:
        return a
    return a | b


# the spmd calls that state a value's conversion: a rank-derived subscript as their operand
# keeps the type the checker gave it before the rank rule
_STATED_CALLS: Final = frozenset({"reinterpret", "convert", "declare"})


class _Scan:
    """One function's bindings and candidate nodes, then the rank-derived ones."""

    def __init__(self, helpers: dict[str, frozenset]) -> None:
        self.helpers = helpers
        self.binds: list[tuple[Expression, Expression]] = []  # (target, value)
        self.candidates: list[Expression] = []
        self.stated: set[int] = set()  # subscripts whose conversion the code states
        self.names: dict[str, frozenset] = {}
        # a method's first argument and the rank-derived attributes of its class
        # (rank_attributes): ``self.rank`` set from a rank query in ``__init__``
        self.self_name = ""
        self.attrs: dict[str, frozenset] = {}
        # the locals (and ``self.x`` attributes, :func:`group_attributes`) bound to a mesh
        # axis's process group (group_axis: "" the default group)
        self.groups: dict[str, str] = {}
        # the locals every binding of which is a rank or a size itself (``r =
        # dist.get_rank()``, ``n = dist.get_world_size()``): ("rank" or "size", what it counts);
        # None: bound otherwise too
        self.counts: dict[str, Optional[tuple[str, str]]] = {}
        # the function's parameters and bound locals (read_bindings): the names a module-level
        # rank (rank_helpers' "=RANK") does not reach; None: not read (no module name reached)
        self.locals: Optional[set[str]] = None

    def read_bindings(self, params: Optional[set[str]] = None) -> None:
        """:attr:`groups` and :attr:`counts` from the function's bindings (once, before the
        rank-derived names).  ``params``: the function's parameters, bound to any value by
        the caller (``def f(group=None): if group is None: group = mesh.get_group("tp")``;
        ``rank >= 0`` of a rank parameter is no range end)."""
        pairs: list[tuple[Expression, Optional[Expression]]] = []
        for p in params or ():
            pairs.append((NameExpr(p), None))
        for target, value in self.binds:
            if isinstance(target, (TupleExpr, ListExpr)):
                if isinstance(value, (TupleExpr, ListExpr)) and len(value.items) == len(target.items):
                    pairs.extend(zip(target.items, value.items))
                else:
                    pairs.extend((t, None) for t in target.items)
            else:
                pairs.append((target, value))
        self.locals = {n.name for n, _ in pairs if isinstance(n, NameExpr)}
        groups: dict[str, Optional[str]] = {}
        for name_e, bound in pairs:
            if isinstance(name_e, NameExpr):
                axis = group_axis(bound) if bound is not None else None
                if name_e.name in groups and groups[name_e.name] != axis:
                    axis = None
                groups[name_e.name] = axis
        for n, a in groups.items():
            if a is not None:
                self.groups[n] = a
        for name_e, bound in pairs:  # after the groups: r = dist.get_rank(tp_group)
            if isinstance(name_e, NameExpr):
                got = self.count(bound) if bound is not None else None
                if name_e.name in self.counts and self.counts[name_e.name] != got:
                    got = None
                self.counts[name_e.name] = got

    def count(self, e: Expression) -> Optional[tuple[str, str]]:
        """("rank", what) when ``e`` is a rank itself, ("size", what) when it is the number of
        ranks the same ``what`` counts (``dist.get_world_size()`` for ``dist.get_rank()``,
        ``mesh["tp"].size()`` for ``mesh.get_local_rank("tp")``); None for anything else."""
        if isinstance(e, NameExpr):
            if e.name in self.counts or self.locals is None or not self.helpers \
                    or e.name in self.locals:
                return self.counts.get(e.name)
            kept = self.helpers.get("#" + e.name)  # WORLD = dist.get_world_size() at module level
            if kept is None:
                return None
            kind, _, what = next(iter(kept)).partition(":")
            return (kind, what)
        if isinstance(e, ConditionalExpr):
            # ``dist.get_world_size() if dist.is_initialized() else 1`` (``get_rank() ... else
            # 0``): the branch taken is the same on every rank; a literal is the one-process
            # world's (size >= 1, rank 0), or both branches count the same
            branches: list[object] = [self.count(b) if not isinstance(b, IntExpr) else b.value
                                      for b in (e.if_expr, e.else_expr)]
            counts: list[tuple[str, str]] = [b for b in branches if isinstance(b, tuple)]
            if not counts or any(c != counts[0] for c in counts):
                return None
            for b in branches:
                if isinstance(b, tuple):
                    continue
                if not isinstance(b, int) or (b != 0 if counts[0][0] == "rank" else b < 1):
                    return None
            return counts[0]
        env = env_read(e)
        if env is not None:
            if env in ENV_RANKS:
                return ("rank", env)
            return ("size", _ENV_SIZES[env]) if env in _ENV_SIZES else None
        if not isinstance(e, CallExpr):
            return None
        callee = e.callee
        if not isinstance(callee, (NameExpr, MemberExpr)):
            return None
        name = callee.name
        if name == "int" and len(e.args) == 1 and isinstance(callee, NameExpr):
            return self.count(e.args[0])
        if name in MEGATRON_RANKS or name in MEGATRON_SIZES:
            if e.args:
                return None
            return (("rank", MEGATRON_RANKS[name]) if name in MEGATRON_RANKS
                    else ("size", MEGATRON_SIZES[name]))
        if name == "get_rank" or name == "get_world_size":
            given, g = _group_arg(e)
            axis = group_axis(g, self.groups)
            what = ("RANK" if axis == "" else axis if axis is not None
                    else "group " + _key(g))
            return ("rank" if name == "get_rank" else "size", what)
        if name == "get_local_rank":
            got = query_axes(e, {})
            if got is None or len(got) != 1 or EVERY in got or UNNAMED_GROUP in got:
                return None
            return ("rank", next(iter(got)))
        if name == "size" and not e.args and isinstance(callee, MemberExpr):
            inner = callee.expr  # mesh["tp"].size(), mesh.get_group("tp").size()
            if isinstance(inner, IndexExpr) and isinstance(inner.index, StrExpr):
                return ("size", inner.index.value)
            axis = group_axis(inner, self.groups) if isinstance(inner, CallExpr) else None
            if axis:
                return ("size", axis)
        return None

    def uniform(self, e: ComparisonExpr) -> bool:
        """Whether every rank passes ``e``: a rank compared with its range's ends
        (``dist.get_rank() >= 0``, ``r > -1``, ``r < world_size``, ``r <= n - 1``, ``0 <= r <
        n``), each link of a chain so."""
        for i, op in enumerate(e.operators):
            left, right = e.operands[i], e.operands[i + 1]
            if op in (">", ">="):
                op, left, right = ("<" if op == ">" else "<="), right, left
            if op not in ("<", "<="):
                return False
            low = self.count(right)
            high = self.count(left)
            if low is not None and low[0] == "rank":  # 0 <= r, -1 < r
                bound = _int_value(left)
                if bound is not None and (bound <= 0 if op == "<=" else bound < 0):
                    continue
            if high is not None and high[0] == "rank":  # r < n, r <= n - 1
                if op == "<":
                    size = self.count(right)
                elif isinstance(right, OpExpr) and right.op == "-" and _int_value(right.right) == 1:
                    size = self.count(right.left)
                else:
                    size = None
                if size is not None and size[0] == "size" and size[1] == high[1]:
                    continue
            return False
        return True

    # -- the int expressions a rank dependence flows through
    def taint(self, e: Optional[Expression]) -> Optional[frozenset]:
        if isinstance(e, NameExpr):
            got = self.names.get(e.name)
            if got is None and self.locals is not None and self.helpers \
                    and e.name not in self.locals:  # RANK = dist.get_rank() at module level
                return self.helpers.get("=" + e.name)
            return got
        if isinstance(e, OpExpr):
            return _union(self.taint(e.left), self.taint(e.right))
        if isinstance(e, ComparisonExpr):
            if self.uniform(e):  # dist.get_rank() >= 0: true on every rank
                return None
            out: Optional[frozenset] = None
            for o in e.operands:
                out = _union(out, self.taint(o))
            return out
        if isinstance(e, CallExpr):
            axes = query_axes(e, self.helpers, self.groups)
            if axes is not None:
                return axes
            callee = e.callee
            if isinstance(callee, NameExpr) and callee.name in _INT_CALLS:
                out = None
                for a in e.args:
                    out = _union(out, self.taint(a))
                return out
            return None
        if isinstance(e, UnaryExpr):
            return self.taint(e.expr)
        if isinstance(e, (TupleExpr, ListExpr)):
            out = None
            for i in e.items:
                out = _union(out, self.taint(i))
            return out
        if isinstance(e, SliceExpr):
            return _union(_union(self.taint(e.begin_index), self.taint(e.end_index)),
                          self.taint(e.stride))
        if isinstance(e, ConditionalExpr):
            return _union(self.taint(e.if_expr), self.taint(e.else_expr))
        if isinstance(e, MemberExpr):  # self.rank of a rank-derived attribute
            if self.attrs and isinstance(e.expr, NameExpr) and e.expr.name == self.self_name:
                return self.attrs.get(e.name)
            return None
        if isinstance(e, IndexExpr):  # coords[0] of coords = mesh.get_coordinate()
            env = _env_axes(env_read(e))  # os.environ["RANK"]
            if env is not None:
                return env
            return self.taint(e.base) if isinstance(e.base, (NameExpr, MemberExpr)) else None
        return None

    def _bind(self, target: Expression, value: Expression, item: bool = False) -> bool:
        """Bind ``target`` to ``value`` (``item``: an element of it); whether a name's axes grew."""
        if isinstance(target, NameExpr):
            axes = self.taint(value)
            if axes is None:
                return False
            old = self.names.get(target.name)
            new = axes if old is None else old | axes
            if new != old:
                self.names[target.name] = new
                return True
            return False
        if isinstance(target, (TupleExpr, ListExpr)):
            if isinstance(value, (TupleExpr, ListExpr)) and len(value.items) == len(target.items):
                grew = False
                for t, v in zip(target.items, value.items):
                    grew = self._bind(t, v) or grew
                return grew
            grew = False
            for t in target.items:
                grew = self._bind(t, value) or grew
            return grew
        return False

    # -- the walk over statements (nested functions and classes are their own scans)
    def block(self, stmts: list[Statement]) -> None:
        for st in stmts:
            self.stmt(st)

    def stmt(self, st: Statement) -> None:
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                self.binds.append((lv, st.rvalue))
                self.expr(lv)
            self.expr(st.rvalue)
        elif isinstance(st, OperatorAssignmentStmt):
            self.binds.append((st.lvalue, OpExpr(st.op, st.lvalue, st.rvalue)))
            self.expr(st.lvalue)
            self.expr(st.rvalue)
        elif isinstance(st, (ExpressionStmt, ReturnStmt)):
            self.expr(st.expr)
        elif isinstance(st, ForStmt):
            self.binds.append((st.index, st.expr))
            self.expr(st.expr)
            self.block(st.body.body)
            if st.else_body is not None:
                self.block(st.else_body.body)
        elif isinstance(st, WhileStmt):
            self.expr(st.expr)
            self.block(st.body.body)
        elif isinstance(st, IfStmt):
            for e in st.expr:
                self.expr(e)
            for b in st.body:
                self.block(b.body)
            if st.else_body is not None:
                self.block(st.else_body.body)
        elif isinstance(st, WithStmt):
            for e in st.expr:
                self.expr(e)
            self.block(st.body.body)
        elif isinstance(st, TryStmt):
            self.block(st.body.body)
            for h in st.handlers:
                self.block(h.body)
            for extra in (st.else_body, st.finally_body):
                if extra is not None:
                    self.block(extra.body)
        elif isinstance(st, Block):
            self.block(st.body)

    def expr(self, e: Optional[Expression]) -> None:
        """Collect the nodes an op hook may run at (subscripts, operators, comparisons,
        calls) inside ``e``."""
        if e is None:
            return
        if isinstance(e, IndexExpr):
            self.candidates.append(e)
            self.expr(e.base)
            self.expr(e.index)
        elif isinstance(e, CallExpr):
            if e.args:
                self.candidates.append(e)
                callee = e.callee
                if (isinstance(e.args[0], IndexExpr) and isinstance(callee, (NameExpr, MemberExpr))
                        and callee.name in _STATED_CALLS):
                    # spmd.reinterpret(full[r * b:(r + 1) * b], "dp", src=R, dst=V): the code
                    # says what the rank's slice is (its src as the checker typed it before this
                    # rule; the check mode sees the rank as a plain int and agrees)
                    self.stated.add(id(e.args[0]))
            self.expr(e.callee)
            for a in e.args:
                self.expr(a)
        elif isinstance(e, OpExpr):
            self.candidates.append(e)
            self.expr(e.left)
            self.expr(e.right)
        elif isinstance(e, ComparisonExpr):
            self.candidates.append(e)
            for o in e.operands:
                self.expr(o)
        elif isinstance(e, MemberExpr):
            self.expr(e.expr)
        elif isinstance(e, UnaryExpr):
            self.expr(e.expr)
        elif isinstance(e, (TupleExpr, ListExpr)):
            for i in e.items:
                self.expr(i)
        elif isinstance(e, SliceExpr):
            self.expr(e.begin_index)
            self.expr(e.end_index)
            self.expr(e.stride)
        elif isinstance(e, ConditionalExpr):
            self.expr(e.cond)
            self.expr(e.if_expr)
            self.expr(e.else_expr)

    def run(self, func: FuncDef, out: dict[int, tuple[Expression, frozenset, Expression]]) -> None:
        self.block(func.body.body)
        self.read_bindings({arg.variable.name for arg in func.arguments})
        for _ in range(len(self.binds) + 1):  # a fixed point: each pass binds one more name at least
            grew = False
            for target, value in self.binds:
                grew = self._bind(target, value) or grew
            if not grew:
                break
        for c in self.candidates:
            if id(c) in self.stated:
                continue
            axes: Optional[frozenset] = None
            by: Optional[Expression] = None
            if isinstance(c, IndexExpr):
                axes, by = self.taint(c.index), c.index
            else:
                if isinstance(c, CallExpr):
                    callee = c.callee
                    if query_axes(c, self.helpers, self.groups) is not None or (
                            isinstance(callee, (NameExpr, MemberExpr))
                            and callee.name in _DEVICE_CALLS):
                        continue
                    # a device (x.to(rank), device=local_rank) picks no values
                    parts = [a for a, n in zip(c.args, c.arg_names) if n != "device"]
                elif isinstance(c, OpExpr):
                    parts = [c.left, c.right]
                elif isinstance(c, ComparisonExpr):
                    parts = c.operands
                else:
                    continue
                for a in parts:
                    t = self.taint(a)
                    if t is not None:
                        axes = _union(axes, t)
                        if by is None:
                            by = a
            if axes is not None and by is not None:
                out[id(c)] = (c, axes, by)


def scan_functions(funcs: list[FuncDef], helpers: dict[str, frozenset],
                   divergent: Optional[dict[int, Divergent]] = None,
                   attrs: Optional[dict[int, tuple[str, dict[str, frozenset]]]] = None,
                   groups: Optional[dict[int, dict[str, str]]] = None,
                   runners: Optional[dict[str, list[RunnerCall]]] = None,
                   owners: Optional[dict[int, tuple[str, str]]] = None
                   ) -> dict[int, tuple[Expression, frozenset, Expression]]:
    """The rank-derived op nodes of ``funcs`` (the functions that call a rank query): by id,
    the node, the axes, and its first rank-derived index or operand.  ``divergent``: where
    the collectives under a rank-dependent condition go too (:class:`_Divergence`).
    ``attrs``: by a method's id, its first argument and its class's rank-derived attributes
    (:func:`rank_attributes`; such methods are in ``funcs``).  ``groups``: by a method's id,
    the group attributes it reads (:func:`group_attributes`).  ``runners``: the module's
    functions and methods whose body runs a collective, ``owners``: a method's first argument
    and class by its id (:func:`collective_runners`)."""
    out: dict[int, tuple[Expression, frozenset, Expression]] = {}
    for f in funcs:
        scan = _Scan(helpers)
        if attrs:
            got = attrs.get(id(f))
            if got is not None:
                scan.self_name, scan.attrs = got
        if groups:
            kept = groups.get(id(f))
            if kept is not None:
                scan.groups.update(kept)
        scan.run(f, out)
        if divergent is not None:
            owner = owners.get(id(f), ("", "")) if owners else ("", "")
            _Divergence(scan, divergent, runners or {}, owner,
                        params=f.arguments).block(f.body.body, ())
    return out


def scan_values(funcs: list[FuncDef], helpers: dict[str, frozenset],
                divergent: dict[int, Divergent], file: MypyFile,
                runners: Optional[dict[str, list[RunnerCall]]] = None,
                owners: Optional[dict[int, tuple[str, str]]] = None) -> None:
    """The collectives of ``funcs`` (functions that call no rank query, with a condition that
    may read a tensor's value: the rewrite walk's flag) under such a condition (VALUE; ``if
    r.abs().max() < tol: break``), into ``divergent`` as :func:`scan_functions` records
    them: the hooks read the condition's types.  ``runners`` (the module's functions whose
    body runs a collective, :func:`collective_runners`, a walk of every function) are read
    only where such a condition controls a call of a function of the module (its name among
    :func:`runner_names`): that function's walk is then done again with them."""
    names: Optional[tuple[frozenset, dict[int, tuple[str, str]]]] = None
    for f in funcs:
        if runners is None:
            if names is None:
                names = runner_names(file)
            walk = _Divergence(_Scan(helpers), divergent, {}, names[1].get(id(f), ("", "")),
                               names[0], f.arguments)
            walk.block(f.body.body, ())
            if not walk.wants_runners:
                continue
            runners, owners = collective_runners(file)
        owner = owners.get(id(f), ("", "")) if owners else ("", "")
        _Divergence(_Scan(helpers), divergent, runners, owner,
                    params=f.arguments).block(f.body.body, ())


def runner_names(file: MypyFile) -> tuple[frozenset, dict[int, tuple[str, str]]]:
    """What a call of a function of the module is named as (``sync``, ``"C.sync"`` for
    ``self.sync()`` in a method of class ``C``), and the methods' first argument and class,
    by id: from the module's top level only (the cheap test before
    :func:`collective_runners`, which walks the bodies)."""
    names: set[str] = set()
    owners: dict[int, tuple[str, str]] = {}
    for d in file.defs:
        if isinstance(d, FuncDef):
            names.add(d.name)
        elif isinstance(d, Decorator):
            names.add(d.func.name)
        elif isinstance(d, ClassDef):
            for st in d.defs.body:
                m = st.func if isinstance(st, Decorator) else st
                if isinstance(m, FuncDef):
                    names.add(d.name + "." + m.name)
                    if m.arguments and not m.is_static and not m.is_class:
                        owners[id(m)] = (m.arguments[0].variable.name, d.name)
    return frozenset(names), owners


# -- rank-derived attributes ------------------------------------------------------------------
#
# ``self.rank = mesh.get_local_rank("sp")`` in ``__init__``, then ``full[:, :, self.rank * h:]``
# in ``forward``: the attribute holds this rank's value in every method.  Read only for the
# top-level classes whose ``__init__`` calls a rank query (the pre-pass flags it): an attribute
# every assignment of which in ``__init__`` is rank-derived (from a query, a rank-derived local
# or another such attribute) and which no other method of the class, nor any method of a
# subclass in the file, assigns.  One assigned elsewhere (``self.rank = 0`` in ``reset``) is not
# rank-derived (as a parameter is not).  Subclasses in the file that assign none inherit them.

def _self_assigns(stmts: list[Statement], self_name: str,
                  out: list[tuple[str, Optional[Expression]]]) -> None:
    """The assignments to ``self_name.X`` in ``stmts`` (nested blocks and functions too): the
    attribute and its value as the rank scan binds it (None: a value it cannot read)."""
    for st in nested_statements(stmts):
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                _self_targets(lv, st.rvalue, self_name, out)
        elif isinstance(st, OperatorAssignmentStmt):
            _self_targets(st.lvalue, OpExpr(st.op, st.lvalue, st.rvalue), self_name, out)
        elif isinstance(st, ForStmt):
            _self_targets(st.index, None, self_name, out)
        elif isinstance(st, WithStmt):
            for t in st.target:
                if t is not None:
                    _self_targets(t, None, self_name, out)
        else:
            for f in functions_of(st):  # a nested function's self.x = ...
                _self_assigns(f.body.body, self_name, out)


def _self_targets(target: Expression, value: Optional[Expression], self_name: str,
                  out: list[tuple[str, Optional[Expression]]]) -> None:
    if isinstance(target, MemberExpr):
        if isinstance(target.expr, NameExpr) and target.expr.name == self_name:
            out.append((target.name, value))
    elif isinstance(target, (TupleExpr, ListExpr)):
        if isinstance(value, (TupleExpr, ListExpr)) and len(value.items) == len(target.items):
            for t, v in zip(target.items, value.items):
                _self_targets(t, v, self_name, out)
        else:
            for t in target.items:
                _self_targets(t, None if isinstance(t, StarExpr) else value, self_name, out)
    elif isinstance(target, StarExpr):
        _self_targets(target.expr, None, self_name, out)


def _methods(c: ClassDef) -> list[tuple[FuncDef, str]]:
    """The class's methods with their first argument (not static or class methods)."""
    out: list[tuple[FuncDef, str]] = []
    for st in c.defs.body:
        if isinstance(st, Decorator) and any(
                isinstance(d, (NameExpr, MemberExpr)) and d.name in ("staticmethod", "classmethod")
                for d in st.decorators):
            continue
        for f in functions_of(st):
            if f.arguments and not f.is_static and not f.is_class:
                out.append((f, f.arguments[0].variable.name))
    return out


def _init_attributes(init: FuncDef, self_name: str,
                     helpers: dict[str, frozenset]) -> dict[str, frozenset]:
    """The attributes every assignment of which in ``init`` is rank-derived, with their axes."""
    assigns: list[tuple[str, Optional[Expression]]] = []
    _self_assigns(init.body.body, self_name, assigns)
    if not assigns:
        return {}
    scan = _Scan(helpers)
    scan.self_name = self_name
    scan.block(init.body.body)
    scan.read_bindings()
    attrs: dict[str, frozenset] = {}
    for _ in range(len(assigns) + 1):  # a least fixed point: self.end = self.start + b
        scan.attrs = attrs
        for _ in range(len(scan.binds) + 1):
            grew = False
            for target, value in scan.binds:
                grew = scan._bind(target, value) or grew
            if not grew:
                break
        found: dict[str, Optional[frozenset]] = {}
        for name, assigned in assigns:
            if name in found and found[name] is None:
                continue
            axes = scan.taint(assigned) if assigned is not None else None
            found[name] = None if axes is None else _union(found.get(name), axes)
        new = {n: a for n, a in found.items() if a is not None}
        if new == attrs:
            break
        attrs = new
    return attrs


def rank_attributes(file: MypyFile, inits: set[int], helpers: dict[str, frozenset]
                    ) -> dict[int, tuple[str, dict[str, frozenset]]]:
    """The methods of the file's top-level classes with rank-derived attributes, by id: the
    method's first argument and the attributes with their axes.  ``inits``: the ids of the
    functions that call a rank query (only their classes' ``__init__`` are read)."""
    by_class: dict[str, dict[str, frozenset]] = {}
    parents: dict[str, list[str]] = {}
    methods_of: dict[str, list[tuple[FuncDef, str]]] = {}
    for d in file.defs:
        if not isinstance(d, ClassDef):
            continue
        bases = [b.name for b in d.base_type_exprs
                 if isinstance(b, NameExpr) and b.name in by_class]
        own: dict[str, frozenset] = {}
        methods: Optional[list[tuple[FuncDef, str]]] = None
        if bases or any(isinstance(st, FuncDef) and st.name == "__init__" and id(st) in inits
                        for st in d.defs.body):
            methods = _methods(d)
            for f, s in methods:
                if f.name == "__init__" and id(f) in inits:
                    own = _init_attributes(f, s, helpers)
        if methods is None:
            continue
        attrs: dict[str, frozenset] = {}
        for b in bases:
            for n, a in by_class[b].items():
                attrs[n] = _union(attrs.get(n), a) or a
        for n, a in own.items():
            attrs[n] = _union(attrs.get(n), a) or a
        # assigned anywhere else in the class (a subclass's __init__ too): not rank-derived
        elsewhere: set[str] = set()
        for f, s in methods:
            assigns: list[tuple[str, Optional[Expression]]] = []
            _self_assigns(f.body.body, s, assigns)
            own_init = f.name == "__init__" and id(f) in inits
            elsewhere.update(n for n, _ in assigns if not (own_init and n in own))
        for n in elsewhere:
            attrs.pop(n, None)
        # ... and in the classes it derives from, whose methods run on its instances
        todo = list(bases)
        while todo:
            b = todo.pop()
            for n in elsewhere:
                by_class[b].pop(n, None)
            todo.extend(parents.get(b, ()))
        by_class[d.name] = attrs
        parents[d.name] = bases
        methods_of[d.name] = methods
    out: dict[int, tuple[str, dict[str, frozenset]]] = {}
    for name, attrs in by_class.items():
        if attrs:
            for f, s in methods_of[name]:
                out[id(f)] = (s, attrs)
    return out


def group_attributes(file: MypyFile, funcs: set[int]) -> dict[int, dict[str, str]]:
    """The methods in ``funcs`` (by id) of the file's top-level classes that keep a mesh
    axis's process group on ``self`` (``self.tp_group = mesh.get_group("tp")``, in any method,
    every assignment of it in the class and in its subclasses in the file reading as that
    axis: :func:`group_axis`), with those attributes as the method reads them
    (``{"self.tp_group": "tp"}``)."""
    classes = [d for d in file.defs if isinstance(d, ClassDef)]
    out: dict[int, dict[str, str]] = {}
    assigned: dict[str, dict[str, Optional[str]]] = {}
    for c in classes:
        methods = _methods(c)
        if not any(id(f) in funcs for f, _ in methods):
            continue
        for d in [c] + [d for d in classes if any(
                isinstance(b, NameExpr) and b.name == c.name for b in d.base_type_exprs)]:
            if d.name in assigned:
                continue
            got: dict[str, Optional[str]] = {}
            for f, self_name in (methods if d is c else _methods(d)):
                assigns: list[tuple[str, Optional[Expression]]] = []
                _self_assigns(f.body.body, self_name, assigns)
                for name, value in assigns:
                    axis = group_axis(value) if value is not None else None
                    if name in got and got[name] != axis:
                        axis = None
                    got[name] = axis
            assigned[d.name] = got
        own = {n: a for n, a in assigned[c.name].items() if a is not None}
        for d in classes:  # a subclass in the file that assigns one otherwise
            if d is not c and d.name in assigned and any(
                    isinstance(b, NameExpr) and b.name == c.name for b in d.base_type_exprs):
                for n, a in assigned[d.name].items():
                    if own.get(n, a) != a:
                        del own[n]
        if own:
            for f, self_name in methods:
                if id(f) in funcs:
                    out[id(f)] = {self_name + "." + n: a for n, a in own.items()}
    return out


# -- collectives under a rank-dependent condition (spmd-divergent-collective) -----------------
#
# (And under a condition that may read a tensor's value, VALUE in its axes: ``if
# r.abs().max() < tol: break`` with r V on "tp"; the hook reads which axes from the types.)
#
# ``if dist.get_rank() == 0: full = spmd.all_gather(w, "tp", ...)``: the other ranks of "tp"
# never join.  The same scan's rank-derived names give each condition's axes (``if``/``elif``
# and its ``else``, ``while``, ``match`` subjects and guards, ``a if c else b``, and ``if c:
# return`` / ``continue`` / ``break`` / ``raise`` before the call in the same block); each call
# named as a collective under one or more is recorded by id, with them.  The hooks decide from
# the resolved callee whether it is one and over which axes (the engine: whether a condition
# varies on them).

# A condition: (its axes, how it is written: "if", "elif", "else" (the else branch of the if
# ``expr``), "while", "match", "case" (a guard), "ternary", or the exit of ``if expr: <exit>``
# ("return", "continue", "break", "raise"), or an exit of an enclosing loop's body ("loop-break",
# "loop-return", "loop-raise": the ranks that take it leave, the others run the body again);
# the condition; its line; the fix's anchor: the kind of the statement to hoist the
# collective before ("if", "while", "match", "ternary", or an exit's "return" ..., "loop" for
# a loop's exit) and its condition (the chain's first for an elif or else, the
# ConditionalExpr for "ternary"); the signatures of the collectives every path of the
# statement runs: not divergent (if/else both all_reduce over "tp"))
Condition = tuple[frozenset, str, Expression, int, str, Expression, frozenset]
# A call of a function of the module whose body runs a collective, under conditions: (the
# call, its conditions outermost first, the name its statement binds the result to, as below;
# the call in that function's body of the function that runs the collective, two levels down,
# else None)
Via = tuple[CallExpr, tuple[Condition, ...], Optional[str], Optional[CallExpr]]
# A collective a function's body runs on every path (collective_runners): (the collective, the
# call of the function that runs it two levels down or None, its group= as a mesh axis the
# pre-pass reads from the class's group attributes, or None)
RunnerCall = tuple[CallExpr, Optional[CallExpr], Optional[str]]
# A recorded call: (the call, its conditions outermost first (none: only called under some),
# the name its statement binds the call's result to, "" for a statement of the call alone,
# None otherwise; the calls of its function under conditions, when it runs in a function's
# body: ``def sync(x): dist.all_reduce(x)`` and ``if rank == 0: sync(x)``; its ``group=``
# as a mesh axis the pre-pass reads (``self.tp_group`` of ``self.tp_group =
# mesh.get_group("tp")``: group_attributes), "" the default group, None not read)
Divergent = tuple[CallExpr, tuple[Condition, ...], Optional[str], tuple[Via, ...], Optional[str]]

COLLECTIVE_NAMES: Final = (frozenset(COLLECTIVES) | {"redistribute"} | RAW_COLLECTIVES
                           | RAW_NN_COLLECTIVES | RAW_FUNCTIONAL_COLLECTIVES
                           | DIVERGENCE_ONLY_COLLECTIVES | frozenset(TYPED_MAPPINGS))
_EXITS: Final = {ReturnStmt: "return", ContinueStmt: "continue", BreakStmt: "break",
                 RaiseStmt: "raise"}


def _callee_name(call: CallExpr) -> Optional[str]:
    callee = call.callee
    if isinstance(callee, (NameExpr, MemberExpr)):
        return callee.name
    return None


def _key(e: Optional[Expression]) -> str:
    """A text of ``e`` that two spellings of one call share (the signature's parts)."""
    if e is None:
        return ""
    if isinstance(e, StrExpr):
        return repr(e.value)
    if isinstance(e, NameExpr):
        return e.name
    if isinstance(e, MemberExpr):
        return _key(e.expr) + "." + e.name
    if isinstance(e, CallExpr):
        return _key(e.callee) + "(" + ",".join(_key(a) for a in e.args) + ")"
    if isinstance(e, (TupleExpr, ListExpr)):
        return "(" + ",".join(_key(i) for i in e.items) + ")"
    return type(e).__name__ + str(getattr(e, "value", ""))


def _signature(call: CallExpr) -> str:
    """The collective and its axis or group as written: ``spmd.all_reduce|'tp'``."""
    parts = [_key(call.callee)]
    for i, (a, n) in enumerate(zip(call.args, call.arg_names)):
        if n == "axis" or n == "group" or (n is None and i == 1):
            parts.append(_key(a))
    return "|".join(parts)


def _exit(body: Block) -> Optional[str]:
    """How ``body`` ends when its last statement leaves it (``return``, ``continue``, ...;
    a ``return`` the pre-pass wrapped as ``try: return ... finally: <trigger>`` too)."""
    if not body.body:
        return None
    last = body.body[-1]
    if isinstance(last, TryStmt) and last.finally_body is not None and not last.handlers \
            and len(last.body.body) == 1:
        last = last.body.body[0]
    return _EXITS.get(type(last))


def _may_leave(stmts: list[Statement]) -> bool:
    """Whether ``stmts`` hold a ``return``/``raise``/``break``/``continue`` (nested
    statements too; nested functions not)."""
    for st in nested_statements(stmts):
        if type(st) in _EXITS:
            return True
    return False


def _runs(e: Optional[Expression], out: list[CallExpr],
          runners: Optional[dict[str, list[RunnerCall]]] = None, self_name: str = "",
          cls: str = "") -> None:
    """The calls named as collectives (or of a function in ``runners``) that evaluating ``e``
    always makes (not the branches of ``a if c else b`` nor the right operand of
    ``and``/``or``)."""
    out.extend(_calls_in(e, runners, True, self_name, cls))


def runner_key(call: CallExpr, runners: dict[str, list[RunnerCall]], self_name: str,
               cls: str) -> Optional[str]:
    """The key in ``runners`` of the function ``call`` calls: a module function by its name,
    a method of the class ``cls`` called on ``self_name`` (``self.sync()``) as ``"C.sync"``."""
    callee = call.callee
    if isinstance(callee, NameExpr):
        return callee.name if callee.name in runners else None
    if self_name and isinstance(callee, MemberExpr) and isinstance(callee.expr, NameExpr) \
            and callee.expr.name == self_name:
        key = cls + "." + callee.name
        return key if key in runners else None
    return None


def _calls_in(e: Optional[Expression], runners: Optional[dict[str, list[RunnerCall]]],
              always: bool, self_name: str = "", cls: str = "") -> list[CallExpr]:
    """The calls in ``e`` named as collectives, or of a function in ``runners`` (the module's
    functions and the class's methods whose body runs one: :func:`runner_key`); ``always``:
    only those evaluating ``e`` always makes (not the branches of ``a if c else b`` nor the
    right operand of ``and``/``or``)."""
    found: list[CallExpr] = []
    stack: list[Optional[Expression]] = [e]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        if isinstance(x, CallExpr):
            if _callee_name(x) in COLLECTIVE_NAMES or (
                    runners and runner_key(x, runners, self_name, cls) is not None):
                found.append(x)
            stack.append(x.callee)
            stack.extend(x.args)
        elif isinstance(x, MemberExpr):
            stack.append(x.expr)
        elif isinstance(x, OpExpr):
            stack.append(x.left)
            if not always or (x.op != "and" and x.op != "or"):
                stack.append(x.right)
        elif isinstance(x, ComparisonExpr):
            stack.extend(x.operands)
        elif isinstance(x, (UnaryExpr, StarExpr)):
            stack.append(x.expr)
        elif isinstance(x, (TupleExpr, ListExpr)):
            stack.extend(x.items)
        elif isinstance(x, IndexExpr):
            stack.extend((x.base, x.index))
        elif isinstance(x, ConditionalExpr):
            stack.append(x.cond)
            if not always:
                stack.extend((x.if_expr, x.else_expr))
    return found


def _body_runs(stmts: list[Statement], out: list[CallExpr],
               runners: Optional[dict[str, list[RunnerCall]]] = None, self_name: str = "",
               cls: str = "") -> bool:
    """The collectives (and calls of ``runners``) ``stmts`` run on every path (their
    statements' own calls and the bodies of ``with``, up to the first statement that may
    leave): whether one may leave."""
    for st in stmts:
        if isinstance(st, AssignmentStmt):
            _runs(st.rvalue, out, runners, self_name, cls)
        elif isinstance(st, OperatorAssignmentStmt):
            _runs(st.rvalue, out, runners, self_name, cls)
        elif isinstance(st, ExpressionStmt):
            _runs(st.expr, out, runners, self_name, cls)
        elif isinstance(st, ReturnStmt):
            _runs(st.expr, out, runners, self_name, cls)
            return True
        elif isinstance(st, WithStmt):
            for e in st.expr:
                _runs(e, out, runners, self_name, cls)
            if _body_runs(st.body.body, out, runners, self_name, cls):
                return True
        elif type(st) in _EXITS or _may_leave([st]):
            return True
    return False


# the decorators that run the function they wrap once per call, on every call: torch's grad
# modes (``@torch.no_grad()``, ``@torch.inference_mode()``, bare ``@torch.no_grad`` too)
_GRAD_MODES: Final = frozenset({"no_grad", "inference_mode", "enable_grad"})


def _wrapping_decorators(file: MypyFile) -> set[str]:
    """The module's decorators that call the function they wrap on every call: ``def
    deco(fn)`` defining ``@functools.wraps(fn) def wrapper(...)`` whose body calls ``fn`` on
    every path (before any statement that may leave) and returning ``wrapper``."""
    out: set[str] = set()
    for d in file.defs:
        if not isinstance(d, FuncDef) or len(d.arguments) != 1 or len(d.body.body) < 2:
            continue
        fn = d.arguments[0].variable.name
        last = d.body.body[-1]
        if not isinstance(last, ReturnStmt) or not isinstance(last.expr, NameExpr):
            continue
        for st in d.body.body[:-1]:
            if isinstance(st, Decorator) and st.func.name == last.expr.name and any(
                    isinstance(w, CallExpr) and isinstance(w.callee, (NameExpr, MemberExpr))
                    and w.callee.name == "wraps" and len(w.args) == 1
                    and isinstance(w.args[0], NameExpr) and w.args[0].name == fn
                    for w in st.decorators):
                calls: list[CallExpr] = []
                _body_runs(st.func.body.body, calls, {fn: []})
                if any(isinstance(c.callee, NameExpr) and c.callee.name == fn for c in calls):
                    out.add(d.name)
    return out


def _transparent(d: Expression, wrapping: set[str]) -> bool:
    """Whether the decorator ``d`` runs its function's body on every call (:data:`_GRAD_MODES`,
    one of the module's ``wrapping`` decorators)."""
    if isinstance(d, CallExpr):
        return not d.args and isinstance(d.callee, (NameExpr, MemberExpr)) \
            and d.callee.name in _GRAD_MODES
    if isinstance(d, NameExpr):
        return d.name in _GRAD_MODES or d.name in wrapping
    return isinstance(d, MemberExpr) and d.name in _GRAD_MODES


def collective_runners(file: MypyFile
                       ) -> tuple[dict[str, list[RunnerCall]], dict[int, tuple[str, str]]]:
    """The module-level functions and the top-level classes' methods (``"C.sync"``, one no
    subclass in the file overrides) whose body runs a collective on every path, by name:
    those calls (:data:`RunnerCall`).  Decorated ones only with decorators that run the body
    on every call (``@torch.no_grad()``, a ``functools.wraps`` decorator of the module that
    always calls the function: ``@rank_zero_only`` runs it on some ranks only).  Two levels:
    a function whose body calls such a function on every path runs its collectives too; a
    third level is not followed.  And the methods of the classes with such methods, by id:
    their first argument and class (what ``self.sync()`` in them calls)."""
    wrapping: Optional[set[str]] = None
    funcs: list[tuple[str, FuncDef, str, str]] = []  # key, function, self name, class
    owners: dict[int, tuple[str, str]] = {}
    # the methods the subclasses in the file define, by class (self.sync() may run one)
    defined: dict[str, set[str]] = {}
    children: dict[str, list[str]] = {}
    for cdef in file.defs:
        if isinstance(cdef, ClassDef):
            defined[cdef.name] = {f.name for st in cdef.defs.body for f in functions_of(st)}
            for b in cdef.base_type_exprs:
                if isinstance(b, NameExpr):
                    children.setdefault(b.name, []).append(cdef.name)
    for d in file.defs:
        if isinstance(d, (FuncDef, Decorator)):
            if isinstance(d, Decorator):
                if wrapping is None:
                    wrapping = _wrapping_decorators(file)
                if not all(_transparent(x, wrapping) for x in d.decorators):
                    continue
                f = d.func
            else:
                f = d
            funcs.append((f.name, f, "", ""))
        elif isinstance(d, ClassDef):
            overridden: set[str] = set()
            todo, seen = list(children.get(d.name, ())), {d.name}
            while todo:
                sub = todo.pop()
                if sub not in seen:
                    seen.add(sub)
                    overridden |= defined.get(sub, set())
                    todo.extend(children.get(sub, ()))
            for st in d.defs.body:
                if isinstance(st, Decorator):
                    if wrapping is None:
                        wrapping = _wrapping_decorators(file)
                    if not all(_transparent(x, wrapping) for x in st.decorators):
                        continue
                    m = st.func
                elif isinstance(st, FuncDef):
                    m = st
                else:
                    continue
                if not m.arguments or m.is_static or m.is_class:
                    continue
                self_name = m.arguments[0].variable.name
                owners[id(m)] = (self_name, d.name)
                if m.name not in overridden:
                    funcs.append((d.name + "." + m.name, m, self_name, d.name))
    out: dict[str, list[RunnerCall]] = {}
    for key, f, self_name, cls in funcs:
        calls: list[CallExpr] = []
        _body_runs(f.body.body, calls)
        if calls:
            out[key] = [(c, None, None) for c in calls]
    if not out:
        return out, {}
    second: dict[str, list[RunnerCall]] = {}
    for key, f, self_name, cls in funcs:
        if key in out:
            continue
        calls = []
        _body_runs(f.body.body, calls, out, self_name, cls)
        got: list[RunnerCall] = []
        for c in calls:
            k = runner_key(c, out, self_name, cls)
            if k is not None:
                got.extend((inner, c, g) for inner, mid, g in out[k] if mid is None)
        if got:
            second[key] = got
    out.update(second)
    # group=self.tp_group in a method's collective: its class's group attributes
    methods = {id(f): f for key, f, self_name, _ in funcs if self_name and key in out}
    kept = group_attributes(file, set(methods)) if methods else {}
    if kept:
        for key, f, self_name, _ in funcs:
            attrs = kept.get(id(f))
            if attrs is None:
                continue
            out[key] = [(c, mid, g if g is not None or mid is not None
                         else _group_of(c, attrs)) for c, mid, g in out[key]]
    return out, owners


def _group_of(call: CallExpr, groups: dict[str, str]) -> Optional[str]:
    """The mesh axis of a raw collective's ``group=`` as ``groups`` read it (a local or
    ``self`` attribute: :func:`group_axis`), None when not given or not read."""
    for a, n in zip(call.args, call.arg_names):
        if n == "group":
            return group_axis(a, groups) if _ref(a) is not None else None
    return None


def _irrefutable(st: MatchStmt) -> bool:
    """Whether the last case catches every subject (``case _:``, ``case x:``, no guard)."""
    if not st.patterns:
        return False
    p = st.patterns[-1]
    return isinstance(p, AsPattern) and p.pattern is None and st.guards[-1] is None


# what a condition reads that holds no tensor's value: a literal, ``x is None``, isinstance ...
_NO_VALUE_CALLS: Final = frozenset({"isinstance", "issubclass", "hasattr", "callable", "len",
                                    "is_initialized", "is_available", "get_world_size"})


def may_read_value(e: Expression, params: Optional[Sequence[Argument]] = None) -> bool:
    """Whether condition ``e`` may read a tensor's value (the hook reads the types): a
    comparison of an operand that may be a tensor (:func:`_may_hold_tensor`), a call
    (``x.item()``, ``bool(x)``, ``torch.isnan(x).any()``), a name (a local bound once:
    ``done = bool(r.norm() < tol)``; not one of ``params``, the function's parameters, when
    given: a flag such as ``training``), an index or an arithmetic operation; not a literal,
    a ``x is None`` test, an attribute (``self.training``), an ``isinstance``/``hasattr``/
    ``len`` call.  Syntax only: cheap enough for every condition of every function (the
    rewrite walk flags the functions it scans, scan_values)."""
    if isinstance(e, (IntExpr, StrExpr, FloatExpr, MemberExpr)):
        return False
    if isinstance(e, NameExpr):
        if e.name in ("True", "False", "None", "__debug__", "TYPE_CHECKING"):
            return False
        return params is None or not any(a.variable.name == e.name for a in params)
    if isinstance(e, UnaryExpr):
        return may_read_value(e.expr, params)
    if isinstance(e, OpExpr) and e.op in ("and", "or"):
        return may_read_value(e.left, params) or may_read_value(e.right, params)
    if isinstance(e, ComparisonExpr):
        if all(op in ("is", "is not") for op in e.operators):
            return False
        return any(_may_hold_tensor(o, params) for o in e.operands)
    if isinstance(e, CallExpr):
        name = _callee_name(e)
        return name not in _NO_VALUE_CALLS
    return True


# the annotations of a parameter that holds no tensor (``step: int``, ``p: float``)
_NUMBER_ANNOTATIONS: Final = frozenset({"int", "float", "bool", "builtins.int", "builtins.float",
                                        "builtins.bool"})


def _may_hold_tensor(e: Expression, params: Optional[Sequence[Argument]]) -> bool:
    """Whether a comparison's operand may be a tensor: not a literal, an attribute, a
    parameter annotated as a number (``step < warmup`` with ``step: int``)."""
    if isinstance(e, (IntExpr, StrExpr, FloatExpr, MemberExpr)):
        return False
    if isinstance(e, NameExpr):
        if e.name in ("True", "False", "None"):
            return False
        if params is not None:
            for a in params:
                if a.variable.name == e.name:
                    t = a.type_annotation
                    return not (isinstance(t, UnboundType) and t.name in _NUMBER_ANNOTATIONS)
        return True
    if isinstance(e, UnaryExpr):
        return _may_hold_tensor(e.expr, params)
    return True


def ternary_may_diverge(e: ConditionalExpr, params: Optional[Sequence[Argument]]) -> bool:
    """Whether ``a if c else b`` may choose a collective by a value: ``c`` may read one
    (:func:`may_read_value`) and a branch is more than a literal or a name (``1 if rank <
    extra else 0`` runs no call)."""
    return any(not isinstance(b, (IntExpr, StrExpr, FloatExpr, NameExpr, MemberExpr))
               for b in (e.if_expr, e.else_expr)) and may_read_value(e.cond, params)


def _shown(conds: tuple[Condition, ...]) -> tuple[Condition, ...]:
    """``conds`` without a loop's exit (kind "loop-break" ...) whose condition is an exit of
    the collective's own block too (``if c: break`` before it: that one is named)."""
    if not any(c[1].startswith("loop-") for c in conds):
        return conds
    exits = {id(c[2]) for c in conds if not c[1].startswith("loop-")}
    return tuple(c for c in conds if not (c[1].startswith("loop-") and id(c[2]) in exits))


class _Divergence:
    """One function's walk for the collectives under a rank-dependent condition."""

    def __init__(self, scan: _Scan, out: dict[int, Divergent],
                 runners: dict[str, list[RunnerCall]], owner: tuple[str, str] = ("", ""),
                 names: Optional[frozenset] = None, params: Sequence[Argument] = ()) -> None:
        self.scan = scan
        self.params = params  # the function's: a flag tested alone is no value (may_read_value)
        self.out = out
        self.runners = runners
        self.self_name, self.cls = owner  # a method's first argument and class
        # (a walk without the runners, scan_values) the names of the module's functions
        # (runner_names), and whether a call of one runs under a condition: the walk is
        # then done again with the runners
        self.names = names
        self.wants_runners = False

    def axes(self, e: Optional[Expression]) -> Optional[frozenset]:
        """The axes condition ``e`` varies on as read from the source (``scan.taint``); a
        condition derived from no rank query, VALUE when it may read a tensor's value (the
        hook decides from the types)."""
        axes = self.scan.taint(e)
        if axes is None and e is not None and may_read_value(e, self.params):
            return _VALUE
        return axes

    def runner(self, call: CallExpr) -> Optional[str]:
        """The module's function (or the class's method) ``call`` calls when its body runs a
        collective: its key in the runners."""
        if not self.runners:
            return None
        return runner_key(call, self.runners, self.self_name, self.cls)

    def signature(self, call: CallExpr) -> str:
        name = self.runner(call)
        return _signature(call) if name is None else "def " + name

    # -- the signatures of the collectives a statement runs on every path
    def calls_in(self, e: Optional[Expression], sigs: set[str]) -> None:
        for call in self.collectives(e):
            sigs.add(self.signature(call))

    def collectives(self, e: Optional[Expression]) -> list[CallExpr]:
        return _calls_in(e, self.runners, False, self.self_name, self.cls)

    def always(self, stmts: list[Statement]) -> set[str]:
        sigs: set[str] = set()
        for st in stmts:
            if isinstance(st, AssignmentStmt):
                self.calls_in(st.rvalue, sigs)
            elif isinstance(st, OperatorAssignmentStmt):
                self.calls_in(st.rvalue, sigs)
            elif isinstance(st, (ExpressionStmt, ReturnStmt)):
                self.calls_in(st.expr, sigs)
            elif isinstance(st, IfStmt) and st.else_body is not None:
                both = self.always(st.body[0].body)
                sigs |= both & self.always(st.else_body.body)
            elif isinstance(st, WithStmt):
                sigs |= self.always(st.body.body)
            elif isinstance(st, TryStmt):
                sigs |= self.always(st.body.body)
            elif isinstance(st, Block):
                sigs |= self.always(st.body)
            elif isinstance(st, MatchStmt) and _irrefutable(st):
                common: Optional[set[str]] = None
                for b in st.bodies:
                    got = self.always(b.body)
                    common = got if common is None else common & got
                sigs |= common or set()
            if type(st) in _EXITS:
                break
        return sigs

    def loop_exits(self, body: list[Statement]) -> tuple[Condition, ...]:
        """The loop body's ``if c: break`` (``return``, a rank-derived ``raise``; nested in
        its ``if``s, ``with``s and ``try``s, not in an inner loop): where ``c`` differs
        between the ranks of an axis, some of them leave the loop while the others run its
        body again, every collective in it included (kind "loop-break" ...: the collectives
        after the exit in its block have it as an exit of their block too, which their
        message names)."""
        out: list[Condition] = []
        stack: list[Statement] = list(body)
        while stack:
            st = stack.pop()
            if isinstance(st, IfStmt):
                for e, b in zip(st.expr, st.body):
                    how = _exit(b)
                    if how is not None and how != "continue":
                        axes = self.axes(e)
                        if axes is not None and not (how == "raise" and axes is _VALUE):
                            out.append((axes, "loop-" + how, e, e.line, "loop", e, frozenset()))
                    stack.extend(b.body)
                if st.else_body is not None:
                    stack.extend(st.else_body.body)
            elif isinstance(st, (WithStmt, Block)):
                stack.extend(st.body.body if isinstance(st, WithStmt) else st.body)
            elif isinstance(st, TryStmt):
                blocks: list[Optional[Block]] = [st.body, *st.handlers, st.else_body,
                                                 st.finally_body]
                for tb in blocks:
                    if tb is not None:
                        stack.extend(tb.body)
        out.sort(key=lambda c: c[3])
        return tuple(out)

    # -- the walk
    def record(self, call: CallExpr, conds: tuple[Condition, ...], bound: Optional[str]) -> None:
        sig = _signature(call)
        kept = _shown(tuple(c for c in conds if sig not in c[6]))
        if kept:
            old = self.out.get(id(call))
            group = _group_of(call, self.scan.groups) if self.scan.groups else None
            self.out[id(call)] = (call, kept, bound, old[3] if old is not None else (),
                                  group if group is not None or old is None else old[4])

    def record_via(self, call: CallExpr, name: str, conds: tuple[Condition, ...],
                   bound: Optional[str]) -> None:
        """``call`` of the module's function ``name``, whose body runs collectives: each of
        them keeps the call and its conditions (the hook of the collective decides)."""
        sig = "def " + name
        kept = _shown(tuple(c for c in conds if sig not in c[6]))
        if not kept:
            return
        for inner, mid, group in self.runners[name]:
            old = self.out.get(id(inner))
            via: Via = (call, kept, bound, mid)
            if old is None:
                self.out[id(inner)] = (inner, (), None, (via,), group)
            else:
                self.out[id(inner)] = (inner, old[1], old[2], old[3] + (via,),
                                       old[4] if old[4] is not None else group)

    def expr(self, e: Optional[Expression], conds: tuple[Condition, ...],
             bound: Optional[str] = None) -> None:
        """``bound``: the name the statement binds ``e`` to ("" for a statement of ``e``
        alone)."""
        if e is None:
            return
        if isinstance(e, ConditionalExpr):
            self.expr(e.cond, conds)
            axes = self.axes(e.cond)
            if axes is not None:
                both: set[str] = set()
                self.calls_in(e.if_expr, both)
                other: set[str] = set()
                self.calls_in(e.else_expr, other)
                conds = conds + ((axes, "ternary", e.cond, e.line, "ternary", e,
                                  frozenset(both & other)),)
            self.expr(e.if_expr, conds)
            self.expr(e.else_expr, conds)
            return
        if isinstance(e, CallExpr):
            if conds and _callee_name(e) in COLLECTIVE_NAMES:
                self.record(e, conds, bound)
            if conds and self.runners:
                name = self.runner(e)
                if name is not None:
                    self.record_via(e, name, conds, bound)
            elif conds and self.names is not None and not self.wants_runners:
                callee = e.callee
                if isinstance(callee, NameExpr):
                    self.wants_runners = callee.name in self.names
                elif self.self_name and isinstance(callee, MemberExpr) \
                        and isinstance(callee.expr, NameExpr) \
                        and callee.expr.name == self.self_name:
                    self.wants_runners = self.cls + "." + callee.name in self.names
            self.expr(e.callee, conds)
            for a in e.args:
                self.expr(a, conds)
        elif isinstance(e, MemberExpr):
            self.expr(e.expr, conds)
        elif isinstance(e, OpExpr):
            self.expr(e.left, conds)
            self.expr(e.right, conds)
        elif isinstance(e, ComparisonExpr):
            for o in e.operands:
                self.expr(o, conds)
        elif isinstance(e, (UnaryExpr, StarExpr)):
            self.expr(e.expr, conds)
        elif isinstance(e, (TupleExpr, ListExpr)):
            for i in e.items:
                self.expr(i, conds)
        elif isinstance(e, IndexExpr):
            self.expr(e.base, conds)
            self.expr(e.index, conds)

    def partitioned(self, stmts: list[Statement]) -> dict[int, frozenset]:
        """The collectives two sibling ``if``s (no ``else``, neither leaving) both run where
        their conditions split the ranks in two, each rank passing exactly one (the
        "zero first" pattern: ``if rank != 0: dist.barrier()`` ... ``if rank == 0:
        dist.barrier()``): every rank runs each once, by id of either ``if``."""
        ifs = [(st, _rank_set(st.expr[0])) for st in stmts
               if isinstance(st, IfStmt) and st.else_body is None and len(st.expr) == 1
               and len(st.body) == 1 and _exit(st.body[0]) is None]
        ifs = [(st, rs) for st, rs in ifs if rs is not None]
        out: dict[int, frozenset] = {}
        for i, (a, ra) in enumerate(ifs):
            for b, rb in ifs[i + 1:]:
                assert ra is not None and rb is not None
                if not _splits(ra, rb) or self.scan.taint(a.expr[0]) is None:
                    continue
                common = frozenset(self.always(a.body[0].body) & self.always(b.body[0].body))
                if common:
                    out[id(a)] = out.get(id(a), frozenset()) | common
                    out[id(b)] = out.get(id(b), frozenset()) | common
        return out

    def block(self, stmts: list[Statement], conds: tuple[Condition, ...]) -> None:
        split = self.partitioned(stmts) if sum(isinstance(st, IfStmt) for st in stmts) > 1 \
            else {}
        for i, st in enumerate(stmts):
            if isinstance(st, IfStmt):
                self.if_stmt(st, conds, st, rest=stmts[i + 1:], split=split.get(id(st)))
                conds = conds + self.exits(st)  # if r != 0: return  -- the rest: rank 0 only
            else:
                self.stmt(st, conds)

    def exits(self, st: IfStmt) -> tuple[Condition, ...]:
        axes = self.axes(st.expr[0]) if len(st.expr) == 1 else None
        if axes is None:
            return ()
        out: tuple[Condition, ...] = ()
        for body in (st.body[0], st.else_body):
            if body is None:
                continue
            how = _exit(body)
            if how == "raise" and axes is _VALUE:
                # a sanity check (``if torch.isnan(loss).any(): raise``): the launcher
                # (torchrun) ends the other ranks when one fails
                break
            if how is not None:
                # a call the exiting branch runs too, before it leaves, is on every path
                out += ((axes, how, st.expr[0], st.line, how, st.expr[0],
                         frozenset(self.always(body.body))),)
                break
        return out

    def stmt(self, st: Statement, conds: tuple[Condition, ...]) -> None:
        if isinstance(st, AssignmentStmt):
            lv = st.lvalues[0] if len(st.lvalues) == 1 else None
            self.expr(st.rvalue, conds, lv.name if isinstance(lv, NameExpr) else None)
        elif isinstance(st, OperatorAssignmentStmt):
            self.expr(st.rvalue, conds)
        elif isinstance(st, ExpressionStmt):
            self.expr(st.expr, conds, "")
        elif isinstance(st, ReturnStmt):
            self.expr(st.expr, conds)
        elif isinstance(st, IfStmt):
            self.if_stmt(st, conds, st, [])
        elif isinstance(st, WhileStmt):
            self.expr(st.expr, conds)
            axes = self.axes(st.expr)
            inner = conds if axes is None else conds + (
                (axes, "while", st.expr, st.line, "while", st.expr, frozenset()),)
            self.block(st.body.body, inner + self.loop_exits(st.body.body))
            if st.else_body is not None:
                self.block(st.else_body.body, conds)
        elif isinstance(st, ForStmt):
            self.expr(st.expr, conds)
            self.block(st.body.body, conds + self.loop_exits(st.body.body))
            if st.else_body is not None:
                self.block(st.else_body.body, conds)
        elif isinstance(st, WithStmt):
            for e in st.expr:
                self.expr(e, conds)
            self.block(st.body.body, conds)
        elif isinstance(st, TryStmt):
            self.block(st.body.body, conds)
            for h in st.handlers:
                self.block(h.body, conds)
            for extra in (st.else_body, st.finally_body):
                if extra is not None:
                    self.block(extra.body, conds)
        elif isinstance(st, MatchStmt):
            self.match_stmt(st, conds)
        elif isinstance(st, Block):
            self.block(st.body, conds)

    def if_stmt(self, st: IfStmt, conds: tuple[Condition, ...], top: IfStmt,
                rest: list[Statement], elif_: bool = False,
                split: Optional[frozenset] = None) -> None:
        """``rest``: the statements after ``st`` in its block, the other path of an ``if``
        without ``else`` whose body leaves the block (``if r == 0: dist.barrier(); return``
        then ``dist.barrier()``: every rank runs one)."""
        for e in st.expr:
            self.expr(e, conds)
        axes = self.axes(st.expr[0]) if len(st.expr) == 1 else None
        if axes is None:
            inner = conds
            outer_else = conds
        else:
            same: frozenset = frozenset()
            if st.else_body is not None:
                same = frozenset(self.always(st.body[0].body) & self.always(st.else_body.body))
            elif rest and _exit(st.body[0]) is not None:
                same = frozenset(self.always(st.body[0].body) & self.always(rest))
            if split:  # a sibling if on the other ranks runs them too (block: partitioned)
                same = same | split
            anchor = top.expr[0]
            inner = conds + ((axes, "elif" if elif_ else "if", st.expr[0], st.line, "if", anchor,
                              same),)
            outer_else = conds + ((axes, "else", st.expr[0], st.line, "if", anchor, same),)
        for b in st.body:
            self.block(b.body, inner)
        if st.else_body is not None:
            body = st.else_body.body
            nested = body[0] if len(body) == 1 else None
            if isinstance(nested, IfStmt) and len(nested.expr) == 1 \
                    and nested.column == nested.expr[0].column:  # elif: the If node starts at its test
                self.if_stmt(nested, outer_else, top, rest, True)
            else:
                self.block(body, outer_else)

    def match_stmt(self, st: MatchStmt, conds: tuple[Condition, ...]) -> None:
        self.expr(st.subject, conds)
        axes = self.axes(st.subject)
        same: frozenset = frozenset()
        if _irrefutable(st):
            common: Optional[set[str]] = None
            for b in st.bodies:
                got = self.always(b.body)
                common = got if common is None else common & got
            same = frozenset(common or ())
        outer = conds if axes is None else conds + (
            (axes, "match", st.subject, st.line, "match", st.subject, same),)
        for g, b in zip(st.guards, st.bodies):
            inner = outer
            if g is not None:
                self.expr(g, outer)
                gaxes = self.axes(g)
                if gaxes is not None:
                    inner = outer + ((gaxes, "case", g, g.line, "match", st.subject, same),)
            self.block(b.body, inner)


def axes_in(axes: frozenset, mesh_axes: tuple[str, ...], node_local: bool = True) -> list[str]:
    """The mesh axes a recorded node varies on (EVERY: all of them; NODE_LOCAL: all of them
    too, or none when ``node_local`` is false: the axes a condition is known to split)."""
    if EVERY in axes or (node_local and NODE_LOCAL in axes):
        return list(mesh_axes)
    return [a for a in mesh_axes if a in axes]


def every_query(e: Expression, func: FuncDef) -> Optional[Expression]:
    """The rank query over every mesh axis (``dist.get_rank()``) that ``e`` is computed from,
    through the assignments of ``func``; None when there is none (a helper that returns
    one: not followed).  Read on the error path only (an error's hint names it)."""
    scan = _Scan({})
    scan.block(func.body.body)
    binds: dict[str, list[Expression]] = {}
    for target, value in scan.binds:
        for t in (target.items if isinstance(target, (TupleExpr, ListExpr)) else [target]):
            if isinstance(t, NameExpr):
                binds.setdefault(t.name, []).append(value)
    todo: list[Expression] = [e]
    seen: set[str] = set()
    while todo:
        x = todo.pop(0)
        for sub in get_subexpressions(x):  # x itself first
            if isinstance(sub, (CallExpr, IndexExpr)):  # os.environ["RANK"] too
                axes = query_axes(sub, {})
                if axes is not None and EVERY in axes:
                    return sub
            elif isinstance(sub, NameExpr) and sub.name not in seen:
                seen.add(sub.name)
                todo.extend(binds.get(sub.name, ()))
    return None


__all__ = ["EVERY", "UNNAMED_GROUP", "NODE_LOCAL", "RANK_QUERIES", "has_query", "rank_helpers", "scan_functions",
           "rank_attributes", "axes_in", "group_axis", "group_attributes", "collective_runners",
           "env_read", "Via", "RunnerCall", "runner_key",
           "query_axes", "Condition", "Divergent", "COLLECTIVE_NAMES", "every_query"]
