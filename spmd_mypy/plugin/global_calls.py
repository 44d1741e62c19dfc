"""Global SPMD in the plugin: shard propagation at op calls, ``spmd.local_map`` and
``spmd.redistribute(x, src=PS[...], dst=PS[...])``.

The rules are the engine's (:mod:`spmd_mypy.engine.global_spmd`,
:mod:`spmd_mypy.engine.redistribute`); this module reads the op's literal
parameters from the call (dims, shapes, the equation, the index), passing
:data:`~spmd_mypy.engine.global_spmd.UNKNOWN` for what is not a literal, so the
engine asks for a literal instead of guessing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Sequence

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    LDEF,
    AssertStmt,
    BreakStmt,
    ContinueStmt,
    ExpressionStmt,
    IfStmt,
    PassStmt,
    RaiseStmt,
    ReturnStmt,
    WhileStmt,
    AssignmentExpr,
    AssignmentStmt,
    CallExpr,
    ClassDef,
    Decorator,
    DelStmt,
    EllipsisExpr,
    Expression,
    FloatExpr,
    ForStmt,
    FuncDef,
    Import,
    ImportFrom,
    IndexExpr,
    IntExpr,
    ListExpr,
    MatchStmt,
    MemberExpr,
    MypyFile,
    NameExpr,
    OpExpr,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RefExpr,
    SliceExpr,
    StarExpr,
    Statement,
    StrExpr,
    TempNode,
    TryStmt,
    TupleExpr,
    TypeInfo,
    UnaryExpr,
    Var,
    WithStmt,
)
from mypy.checker_shared import CheckerScope
from mypy.server.subexpr import get_subexpressions
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    LiteralType,
    TupleType,
    Type,
    TypeOfAny,
    get_proper_type,
)

from ..engine.collectives import RAW_OUTPUT_KWARGS, RAW_ROOT, raw_collective
from ..engine.errors import SpmdError
from ..engine.ops import CAST_FORMAL, CAST_OPS, UNREAD_VALUE, Operand, Result
from ..engine.ops import propagate as local_propagate
from ..engine.types import SpmdType, format_type
from ..engine.views import ANY_SIZE, SameDim, SamePrefix
from .memo import FunctionMemo, TreeMemo
from .reductions import read_variant
from .mypy_types import lookup_type
from .statements import functions_of, nested_statements, statement_blocks
from .texts import expr_text


class _OnFirstUse:
    """An engine module imported when first used (then bound in its place): only code with
    partition specs needs the global-SPMD engine, ~12 ms of every run's start-up."""

    def __init__(self, module: str, alias: str) -> None:
        self._module, self._alias = module, alias

    def __getattr__(self, attr: str) -> Any:
        import importlib

        mod = importlib.import_module(self._module)
        globals()[self._alias] = mod
        return getattr(mod, attr)


# Typed Any (not a TYPE_CHECKING import): the plugin may be compiled with mypyc, which
# takes the TYPE_CHECKING branch for the code it compiles.
gs: Any = _OnFirstUse("spmd_mypy.engine.global_spmd", "gs")
rd: Any = _OnFirstUse("spmd_mypy.engine.redistribute", "rd")
# A local reshape's target (reshape_target) is written with the views' own size markers (the
# global engine's are the same objects): a local .view loads no global engine.
_SameDim: Final = SameDim
_SamePrefix: Final = SamePrefix
_ANY_SIZE: Final = ANY_SIZE

if TYPE_CHECKING:
    from .calls import AnyCtx, CallTyper


def any_global(ops: Sequence[Operand]) -> bool:
    # gs.is_global, without loading the global engine for local code
    for o in ops:
        t = o.type  # (an engine Operand's field: read once)
        if t is not None and t.spec is not None:
            return True
    return False


# -- literals ---------------------------------------------------------------------------


def lit_int(e: Expression | None) -> int | None:
    if isinstance(e, IntExpr):
        return e.value
    if isinstance(e, UnaryExpr) and e.op == "-" and isinstance(e.expr, IntExpr):
        return -e.expr.value
    if isinstance(e, RefExpr) and isinstance(e.node, Var) and e.node.is_final:
        v = e.node.final_value
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def lit_ints(exprs: Sequence[Expression]) -> tuple[int, ...] | Any:
    """``(1, 0)`` from ``permute(1, 0)`` (star args) or ``permute((1, 0))``; UNKNOWN else."""
    if len(exprs) == 1 and isinstance(exprs[0], (TupleExpr, ListExpr)):
        exprs = exprs[0].items
    vals = [lit_int(e) for e in exprs]
    if any(v is None for v in vals):
        return gs.UNKNOWN
    return tuple(vals)  # type: ignore[arg-type]


def is_none(e: Expression | None) -> bool:
    return isinstance(e, NameExpr) and e.fullname == "builtins.None"


def _by_formal(ctx: AnyCtx) -> dict[str, list[Expression]]:
    out: dict[str, list[Expression]] = {}
    for formal, exprs in zip(getattr(ctx, "callee_arg_names", ()), getattr(ctx, "args", ())):
        if formal and exprs:
            out.setdefault(formal, []).extend(exprs)
    return out


def _dim_param(exprs: list[Expression] | None, many: bool = True) -> Any:
    """A ``dim`` argument: an int, a tuple of ints, None; UNKNOWN when not literal."""
    if exprs is None:
        return None
    if len(exprs) == 1:
        e = exprs[0]
        if is_none(e):
            return None
        v = lit_int(e)
        if v is not None:
            return v
        if many and isinstance(e, (TupleExpr, ListExpr)):
            return lit_ints([e])
        return gs.UNKNOWN
    return lit_ints(exprs) if many else gs.UNKNOWN


def _bool_param(exprs: list[Expression] | None) -> Any:
    if not exprs:
        return False
    e = exprs[0]
    if isinstance(e, NameExpr) and e.fullname in ("builtins.True", "builtins.False"):
        return e.fullname == "builtins.True"
    return gs.UNKNOWN


def _index_items(typer: CallTyper, ctx: AnyCtx, e: Expression) -> Any:
    items = e.items if isinstance(e, TupleExpr) else [e]
    out: list[Any] = []
    for it in items:
        if isinstance(it, SliceExpr):
            full = it.begin_index is None and it.end_index is None and it.stride is None
            out.append(slice(None) if full else slice(0, 1))
        elif is_none(it):
            out.append(None)
        elif isinstance(it, EllipsisExpr):
            out.append(Ellipsis)
        elif lit_int(it) is not None:
            out.append(0)
        else:
            t = lookup_type(ctx.api, it)
            p = get_proper_type(t) if t is not None else None
            if isinstance(p, LiteralType):
                p = p.fallback
            if isinstance(p, Instance) and p.type.fullname in ("builtins.int", "builtins.bool"):
                out.append(0)
                continue
            st = typer.types.from_type(t) if t is not None else None
            if st is not None and st.spec is not None:
                out.append(gs.TensorIndex(len(st.spec), any(st.spec), st.spec))
                continue
            return gs.UNKNOWN
    return tuple(out)


def _same_dim(e: Expression, x_text: str | None, ctx: AnyCtx | None = None) -> int | None:
    """``i`` when ``e`` is ``x.shape[i]`` or ``x.size(i)`` of the reshaped tensor ``x``, or a
    local name bound once to one (:func:`size_names`: ``b, s, h = x.shape``)."""
    if x_text is None:
        return None
    if isinstance(e, NameExpr):
        return _named_same_dim(e, ctx) if ctx is not None else None
    sized = _one_dim_size(e)
    if sized is None:
        return None
    base, i = sized
    return i if expr_text(base) == x_text else None


def _shape_prefix(e: Expression, x_text: str | None) -> list[Any] | None:
    """The target entries of ``*x.shape[a:b]`` (starred, in a call or a tuple display; or
    an operand of a ``+`` of shapes) of the reshaped tensor ``x``: :class:`SameDim` for
    literal non-negative bounds, a rank-free :class:`SamePrefix` for ``x.shape[:-k]``,
    ``x.size()[:-k]`` and ``x.shape`` itself (all its dims)."""
    if isinstance(e, StarExpr):
        e = e.expr
    sliced = _shape_slice(e)
    if x_text is None or sliced is None:
        return None
    tensor, lo, hi = sliced
    if expr_text(tensor) != x_text:
        return None
    open_end = not (isinstance(e, IndexExpr) and isinstance(e.index, SliceExpr)
                    and e.index.end_index is not None)
    if open_end and lo == 0:
        return [_SamePrefix(0)]  # x.shape, x.shape[:], x.size()
    if hi is None:
        return None
    if hi < 0:
        return [_SamePrefix(-hi)] if lo == 0 else None
    if hi < lo:
        return None
    return [_SameDim(i) for i in range(lo, hi)]


def _shape_sum(e: Expression) -> list[Expression] | None:
    """The operands of a ``+`` of shapes and tuple displays (``x.shape[:-1] + (nh, hd)``),
    tuple displays opened; None when ``e`` is no such sum."""
    if not (isinstance(e, OpExpr) and e.op == "+"):
        return None
    out: list[Expression] = []
    for side in (e.left, e.right):
        if isinstance(side, OpExpr):
            inner = _shape_sum(side)
            if inner is None:
                return None
            out.extend(inner)
        elif isinstance(side, (TupleExpr, ListExpr)):
            out.extend(side.items)
        else:
            out.append(side)  # a shape slice, read by _shape_prefix (else not readable)
    return out


def _shape_slice(e: Expression) -> tuple[Expression, int, int | None] | None:
    """``(x, a, b)`` for ``x.shape[a:b]`` with a literal non-negative ``a`` (``b``: None when
    open or not literal), ``(x, 0, None)`` for ``x.shape`` and ``x.size()``."""
    begin, end = 0, None
    if isinstance(e, IndexExpr) and isinstance(e.index, SliceExpr):
        sl = e.index
        b = 0 if sl.begin_index is None else lit_int(sl.begin_index)
        if sl.stride is not None or b is None or b < 0:
            return None
        begin, e = b, e.base
        end = lit_int(sl.end_index) if sl.end_index is not None else None
    if isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr) and e.callee.name == "size" \
            and not e.args:
        return e.callee.expr, begin, end  # x.size() is x.shape
    if isinstance(e, MemberExpr) and e.name == "shape":
        return e.expr, begin, end
    return None


def _one_dim_size(e: Expression) -> tuple[Expression, int] | None:
    """``(x, i)`` for ``x.shape[i]``, ``x.size(i)`` and ``x.size()[i]`` with a literal ``i``."""
    if isinstance(e, IndexExpr) and isinstance(e.base, MemberExpr) and e.base.name == "shape":
        base, idx = e.base.expr, e.index
    elif (isinstance(e, IndexExpr) and isinstance(e.base, CallExpr) and not e.base.args
          and isinstance(e.base.callee, MemberExpr) and e.base.callee.name == "size"):
        base, idx = e.base.callee.expr, e.index
    elif (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr) and e.callee.name == "size"
          and len(e.args) == 1 and e.arg_names[0] in (None, "dim")):
        base, idx = e.callee.expr, e.args[0]
    else:
        return None
    i = lit_int(idx)
    return (base, i) if i is not None else None


def _reshaped_name(ctx: AnyCtx) -> NameExpr | None:
    """The reshaped tensor when it is a plain name: ``x`` of ``x.view(...)`` or
    ``torch.reshape(x, ...)``."""
    c = ctx.context
    x: Expression | None
    if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr) and not (
            isinstance(c.callee.expr, (NameExpr, MemberExpr)) and c.callee.expr.fullname == "torch"):
        x = c.callee.expr
    else:
        args = getattr(ctx, "args", ())
        x = args[0][0] if args and args[0] else None
    return x if isinstance(x, NameExpr) else None


def _named_same_dim(e: NameExpr, ctx: AnyCtx) -> int | None:
    """``i`` when ``e`` is a local of the enclosing function bound exactly once, to
    ``x.shape[i]`` (or an item of ``x.shape`` unpacked), where ``x`` is the reshaped tensor's
    own local, bound at most once (a parameter, or assigned before): so the size still is
    that of ``x``'s dim ``i`` wherever ``e`` is read."""
    x = _reshaped_name(ctx)
    if x is None or x.kind != LDEF:
        return None
    read = _size_local(e, ctx)
    if read is None or read[0] != x.name:
        return None
    return read[1]


def _size_local(e: NameExpr, ctx: AnyCtx) -> tuple[str, int, SizeNames] | None:
    """(the tensor's name, its dim, the function's size facts) when ``e`` is a local of the
    enclosing function bound exactly once to a size of a tensor (``x.shape[i]``, an item of
    ``x.shape`` unpacked) that is itself bound at most once, before that size is read."""
    if e.kind != LDEF:
        return None
    func = current_function(ctx.api)
    if func is None:
        return None
    facts = size_names(func)
    found = facts.sizes.get(e.name)
    if found is None or facts.bindings.get(e.name) != 1:
        return None
    tensor, dim, line = found
    if facts.bindings.get(tensor, 0) > 1 or facts.defined_at.get(tensor, line) > line:
        return None
    return tensor, dim, facts


def _named_rank(e: Expression, ctx: AnyCtx) -> int | None:
    """The reshaped tensor's rank when ``e`` names one of its sizes (:func:`_named_same_dim`)
    bound by unpacking its whole shape (``b, s, h = x.shape``: 3)."""
    func = current_function(ctx.api)
    if not isinstance(e, NameExpr) or func is None:
        return None
    return size_names(func).ranks.get(e.name)


# -- sizes of the tensor a reshaped tensor was made of (local S(i) through view/reshape) ------
#
#     b, n, _ = x.shape
#     q = F.linear(x, w).view(b, n, -1, 3, hd)      b, n: dims 0, 1 of F.linear(x, w) too
#     q = self.act(x).view(x.shape[0], x.shape[1], ...)   (self.act an nn.GELU)
#
# An op that keeps its input's dims in place, every one (elementwise with a number, unary
# activations, dropout, norms, casts, and torch's modules of those ops) or all but the last
# (F.linear, whose weight may be 1-d: the last dim changed or dropped), makes a tensor whose
# leading sizes are its input's.  (nn.Linear's result is V: its weight is untyped.)  Not
# followed: an elementwise op with another tensor (broadcasting may add or widen leading
# dims), matmul (the weight's rank is unknown: a 1-d or batched one moves the dims).  A chain of such ops (and locals bound once to one) is
# followed down from the reshaped tensor; a size read from a tensor met on the way (directly,
# or a local bound once to it, :func:`size_names`) is a SameDim of the reshaped tensor where the
# ops keep that dim.  Anything else stays an unknown size (V past it: the sound default).

# what an op keeps of its input's dims: every dim at the same rank; every dim but the last,
# the last changed or dropped (F.linear)
_KEEP_ALL: Final = "all"
_KEEP_DROP: Final = "drop"

# torch functions and tensor methods whose result has their first tensor operand's shape
_SAME_SHAPE_OPS: Final = frozenset({
    "relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "mish", "hardswish", "hardsigmoid",
    "elu", "selu", "celu", "leaky_relu", "softplus", "logsigmoid", "softsign", "tanhshrink",
    "hardtanh", "dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d",
    "dropout2d", "dropout3d", "layer_norm", "rms_norm", "identity", "softmax", "log_softmax",
    "exp", "log", "neg", "abs", "sqrt", "rsqrt", "square", "float", "half", "bfloat16",
    "double", "contiguous", "clone", "detach", "type_as", "to"})
_NUMBERS: Final = ("builtins.int", "builtins.float", "builtins.bool")


def _is_number(e: Expression, ctx: AnyCtx) -> bool:
    if isinstance(e, (IntExpr, FloatExpr)):
        return True
    t = lookup_type(ctx.api, e)
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, LiteralType):
        p = p.fallback
    return isinstance(p, Instance) and p.type.fullname in _NUMBERS


def _is_tensor(e: Expression, ctx: AnyCtx) -> bool:
    t = lookup_type(ctx.api, e)
    p = get_proper_type(t) if t is not None else None
    return isinstance(p, Instance) and p.type.has_base("torch._tensor.Tensor")


def _first_operand(call: CallExpr) -> Expression | None:
    for name, kind, arg in zip(call.arg_names, call.arg_kinds, call.args):
        if (name is None and kind == ARG_POS) or name == "input":
            return arg
    return None


def _lead_step(e: Expression, ctx: AnyCtx) -> tuple[Expression, str] | None:
    """The tensor ``e`` is made of by an op that keeps its leading dims, and what it keeps."""
    from .modules import TORCH_MODULE_OPS

    if isinstance(e, OpExpr) and e.op in ("+", "-", "*", "/", "**"):
        if _is_number(e.right, ctx):
            return e.left, _KEEP_ALL
        if _is_number(e.left, ctx):
            return e.right, _KEEP_ALL
        return None  # with another tensor: broadcasting may add or widen leading dims
    if isinstance(e, UnaryExpr) and e.op == "-":
        return e.expr, _KEEP_ALL
    if not isinstance(e, CallExpr):
        return None
    callee = e.callee
    fullname = callee.fullname if isinstance(callee, RefExpr) else ""
    if fullname.startswith("torch."):  # F.linear(x, w), torch.relu(x), F.dropout(x, p)
        name = fullname.rsplit(".", 1)[-1]
        inner = _first_operand(e)
        if inner is None:
            return None
        if name == "linear" and fullname in ("torch._C._nn.linear", "torch.nn.functional.linear"):
            return inner, _KEEP_DROP
        return (inner, _KEEP_ALL) if name in _SAME_SHAPE_OPS else None
    if isinstance(callee, MemberExpr) and callee.name in _SAME_SHAPE_OPS \
            and _is_tensor(callee.expr, ctx):
        return callee.expr, _KEEP_ALL  # x.float(), x.to(dtype), x.type_as(y)
    t = lookup_type(ctx.api, callee)  # a module call: self.qkv(x)
    p = get_proper_type(t) if t is not None else None
    inner = _first_operand(e)
    if not isinstance(p, Instance) or inner is None or len(e.args) != 1:
        return None
    op = TORCH_MODULE_OPS.get(p.type.fullname)
    return (inner, _KEEP_ALL) if op is not None and op in _SAME_SHAPE_OPS else None


class _Lead:
    """A tensor the reshaped tensor was made of (:func:`reshape_leads`): its expression and
    text, what the ops between keep of its dims, and whether a local's binding was followed
    to reach it (then its sizes count only when it is a local bound once)."""

    def __init__(self, expr: Expression, text: str, keep: str, followed: bool) -> None:
        self.expr = expr
        self.text = text
        self.keep = keep
        self.followed = followed


def reshape_leads(x: Expression, ctx: AnyCtx) -> list[_Lead]:
    """The tensors whose leading sizes the reshaped tensor ``x`` keeps (see above), nearest
    first; a few steps at most, locals followed only when bound once in the function."""
    out: list[_Lead] = []
    keep = _KEEP_ALL
    followed = False
    e = x
    facts: SizeNames | None = None
    for _ in range(8):
        step = _lead_step(e, ctx)
        if step is None:
            if not (isinstance(e, NameExpr) and e.kind == LDEF):
                break
            if facts is None:
                func = current_function(ctx.api)
                if func is None:
                    break
                facts = size_names(func)
            value = facts.values.get(e.name)
            if value is None or facts.bindings.get(e.name) != 1:
                break
            e, followed = value, True
            continue
        inner, m = step
        if keep == _KEEP_ALL:
            keep = m
        elif m != _KEEP_ALL:
            break  # two ops that may drop a dim: the leading dims are not followed
        out.append(_Lead(inner, expr_text(inner), keep, followed))
        e = inner
    return out


def _kept_size(dim: int, rank: int | None, keep: str, name: str | None) -> Any:
    """The target entry for a size of dim ``dim`` of a tensor of ``rank`` (when known) the
    reshaped tensor keeps by ``keep``: a SameDim, or ANY_SIZE where it is not kept."""
    if keep == _KEEP_ALL:
        return _SameDim(dim, name, rank)
    if rank is not None:
        if not -rank <= dim < rank or dim % rank == rank - 1:
            return _ANY_SIZE  # the last dim: not the reshaped tensor's
        # the result has that rank or one less, and the dim is before both lasts
        return _SameDim(dim % rank, name)
    if dim < 0:
        return _ANY_SIZE  # counted from a last dim that may be dropped
    return _SameDim(dim, name, None, True)


def _lead_sizes(e: Expression, leads: Sequence[_Lead], ctx: AnyCtx) -> list[Any] | None:
    """The target entries of ``e`` when it reads a size of a tensor of ``leads``:
    ``h.shape[i]``, ``h.size(i)``, ``*h.shape[a:b]`` (literal bounds), a local bound once to
    one (``b, n, _ = h.shape``); None when it reads none."""
    def lead_of(t: Expression) -> _Lead | None:
        text = expr_text(t)
        for lead in leads:
            if lead.text == text:
                if lead.followed and not _bound_once(t, ctx):
                    return None
                return lead
        return None

    if isinstance(e, NameExpr):
        read = _size_local(e, ctx)
        if read is None:
            return None
        tensor_name, dim, facts = read
        for named in leads:
            if isinstance(named.expr, NameExpr) and named.expr.name == tensor_name \
                    and named.expr.kind == LDEF:
                return [_kept_size(dim, facts.ranks.get(e.name), named.keep,
                                   e.name.rstrip("'"))]
        return None
    one = _one_dim_size(e)
    if one is not None:
        found_lead = lead_of(one[0])
        return None if found_lead is None else [_kept_size(one[1], None, found_lead.keep, None)]
    # *h.shape[a:b] (a call's star argument is the slice itself, as in _shape_prefix)
    sliced = _shape_slice(e.expr if isinstance(e, StarExpr) else e)
    if sliced is None or not isinstance(e.expr if isinstance(e, StarExpr) else e, IndexExpr):
        return None  # h.shape, h.size(): every dim, the last one too
    tensor, lo, hi = sliced
    sliced_lead = lead_of(tensor)
    if sliced_lead is None or hi is None or hi < lo:
        return None
    return [_kept_size(i, None, sliced_lead.keep, None) for i in range(lo, hi)]


def _bound_once(t: Expression, ctx: AnyCtx) -> bool:
    """``t`` is a local (or parameter) bound once in the enclosing function."""
    if not (isinstance(t, NameExpr) and t.kind == LDEF):
        return False
    func = current_function(ctx.api)
    return func is not None and size_names(func).bindings.get(t.name) == 1


class SizeNames:
    """A function's locals bound to one dim's size of a local tensor (:func:`size_names`)."""

    def __init__(self) -> None:
        self.sizes: dict[str, tuple[str, int, int]] = {}  # name -> (tensor, dim, line)
        self.bindings: dict[str, int] = {}  # every local name -> times bound (parameters: 1)
        self.defined_at: dict[str, int] = {}  # name -> the line of its first binding
        # name -> the rank of its tensor, when the name comes from unpacking its whole shape
        # without a star (``b, s, h = x.shape``: x has 3 dims)
        self.ranks: dict[str, int] = {}
        # name -> the value of its plain assignment ``name = value`` in the function's own
        # body (not a nested definition's); the last one if there are several
        self.values: dict[str, Expression] = {}
        # name -> the loop of the function's own body that binds it with other names
        # (``for p, g in ...``: promotion.Correlated splits those names together)
        self.joint_loops: dict[str, ForStmt] = {}


def current_function(api: object) -> FuncDef | None:
    """The function the checker is in (None at module or class level, in a lambda)."""
    scope = getattr(api, "scope", None)
    if scope is None:
        return None
    if type(scope) is _CheckerScope:  # mypy's checker: a method call, no bound method made
        func = scope.current_function()
        return func if type(func) is _FuncDef else None
    # (no default callable made at each call: a hook asks several times)
    get = getattr(scope, "current_function", None)
    func = get() if get is not None else None
    return func if isinstance(func, FuncDef) else None


_CheckerScope: Final = CheckerScope
_FuncDef: Final = FuncDef




def size_names(func: FuncDef) -> SizeNames:
    """The sizes a function reads into locals, computed once per function body (only asked
    for a global reshape whose target names a local)::

        n = x.shape[0]           n: dim 0 of x   (also x.size(0))
        b, s, h = x.shape        b, s, h: dims 0, 1, 2   (also x.size())
        b, s = x.shape[:2]       b, s: dims 0, 1
        *lead, h = x.shape       h: dim -1

    and how often each local is bound anywhere in the body (assignments, loop and ``with``
    targets, ``del``, imports, nested definitions, walrus), so that a name bound twice, or a
    tensor rebound, is not read as a size."""
    return _SIZE_NAMES.get(func)


def _size_names(func: FuncDef) -> SizeNames:
    facts = SizeNames()
    for arg in func.arguments:
        facts.bindings[arg.variable.name] = 1
        facts.defined_at[arg.variable.name] = func.line
    try:
        subs = get_subexpressions(func.body)
        # The walrus walk only binds (n := ...) targets, and gives up on an expression
        # nested deeper than 60: not needed where mypy's traverser, which reaches every
        # expression the walk does (and more: lambda bodies, decorators), finds no walrus, and
        # the body has too few expressions for such a nesting (a chain of 61 expressions
        # holds at least 60 that the traverser lists).
        walrus = len(subs) >= 60 or any(type(sub) is _AssignmentExpr for sub in subs)
        _SizeWalk(facts, walrus).block(func.body.body)
        for name in _raw_targets(subs):  # written in place: not its one value
            facts.bindings[name] = facts.bindings.get(name, 0) + 1
    except Exception:  # noqa: BLE001 - never crash mypy: nothing known
        facts = SizeNames()
    return facts


_SIZE_NAMES: Final = FunctionMemo(_size_names)


def raw_collective_targets(func: FuncDef) -> frozenset[str]:
    """The names a raw collective in ``func`` writes in place (``dist.all_reduce(out)``
    reduces ``out``: its static type is no longer a fact, and :func:`size_names` counts the
    call as one more binding of it; ``dist.get_world_size(g)``, ``distribute_tensor(q, ...)``
    write nothing)."""
    return _raw_targets(get_subexpressions(func.body))


def _raw_targets(subs: list[Expression]) -> frozenset[str]:
    """:func:`raw_collective_targets` of a body's sub-expressions."""
    names: set[str] = set()
    for sub in subs:
        if type(sub) is _CallExpr:
            callee = sub.callee
            # (every raw collective's name starts so: engine raw_collective, asked less)
            if (isinstance(callee, RefExpr) and callee.fullname.startswith(_RAW_ROOT)
                    and raw_collective(callee.fullname) is not None):
                written = raw_written_argument(sub)
                if isinstance(written, NameExpr):
                    names.add(written.name)
    return frozenset(names)


_CallExpr: Final = CallExpr
_RAW_ROOT: Final = RAW_ROOT


def raw_written_argument(call: CallExpr) -> Expression | None:
    """What a raw collective writes in place: its first argument (the tensor of all_reduce,
    broadcast; the output of all_gather_into_tensor, reduce_scatter_tensor,
    all_to_all_single; the output list of all_gather), or the output keyword (engine
    ``RAW_OUTPUT_KWARGS``, the check mode's ``_raw_written``)."""
    for kind, name, arg in zip(call.arg_kinds, call.arg_names, call.args):
        if kind == ARG_POS or name in RAW_OUTPUT_KWARGS:
            return arg
    return None


def value_bound_once(func: FuncDef, name: str) -> Expression | None:
    """The value of ``name = value`` when that is the name's only binding in ``func`` (not
    a parameter, a loop target, a second assignment...), else None."""
    facts = size_names(func)
    return facts.values.get(name) if facts.bindings.get(name, 0) == 1 else None


def plain_value(func: FuncDef, name: str) -> Expression | None:
    """The value of the last plain ``name = value`` of ``func``'s own body (not a nested
    definition's), however often ``name`` is bound: what :func:`size_names` records for
    it when its walk succeeds, read from the statements alone (no walk of their
    expressions).  A cheap test before :func:`value_bound_once`, whose answer is this
    value or None.  Computed once per body (keyed as :func:`size_names`)."""
    return _PLAIN_VALUES.get(func).get(name)


def _plain_values(func: FuncDef) -> dict[str, Expression]:
    values: dict[str, Expression] = {}
    for st in nested_statements(func.body.body):
        if type(st) is _AssignmentStmt and len(st.lvalues) == 1:
            target = st.lvalues[0]
            if isinstance(target, NameExpr):
                values[target.name] = st.rvalue
    return values


_AssignmentStmt: Final = AssignmentStmt
_PLAIN_VALUES: Final = FunctionMemo(_plain_values)


def _tuple_names(target: Expression) -> list[str]:
    """The names a (nested) tuple target binds: ``p, (g, m)`` -> p, g, m."""
    if isinstance(target, NameExpr):
        return [target.name]
    if isinstance(target, TupleExpr):
        return [n for item in target.items for n in _tuple_names(item)]
    return []


class _SizeWalk:
    """The walk behind :func:`size_names` (mypy's compiled visitors cannot be subclassed)."""

    def __init__(self, facts: SizeNames, walrus: bool = True) -> None:
        self.facts = facts
        self.depth = 0  # nested definitions entered
        self.walrus_walk = walrus  # False: the body has no walrus, nor a deep expression

    def bind(self, target: Expression | None, line: int) -> None:
        if isinstance(target, NameExpr):
            self.facts.bindings[target.name] = self.facts.bindings.get(target.name, 0) + 1
            self.facts.defined_at.setdefault(target.name, line)
        elif isinstance(target, (TupleExpr, ListExpr)):
            for it in target.items:
                self.bind(it, line)
        elif isinstance(target, StarExpr):
            self.bind(target.expr, line)

    def bind_name(self, name: str, line: int) -> None:
        self.bind(NameExpr(name), line)

    def block(self, stmts: Sequence[Statement] | None) -> None:
        for st in stmts or ():
            self.stmt(st)

    def stmt(self, st: Statement) -> None:
        line = st.line
        if self.walrus_walk:
            self.walrus(st)
        cls = type(st)
        if cls in _BINDING_FREE:  # the common statements that bind nothing themselves
            for block in statement_blocks(st):
                self.block(block)
            return
        if isinstance(st, AssignmentStmt):
            for lv in st.lvalues:
                self.bind(lv, line)
            if len(st.lvalues) == 1:
                self.record(st.lvalues[0], st.rvalue, line)
        elif isinstance(st, OperatorAssignmentStmt):
            self.bind(st.lvalue, line)
        elif isinstance(st, ForStmt):
            self.bind(st.index, line)
            if isinstance(st.index, TupleExpr) and not self.depth:
                for name in _tuple_names(st.index):
                    self.facts.joint_loops[name] = st
        elif isinstance(st, WithStmt):
            for t in st.target:
                self.bind(t, line)
        elif isinstance(st, TryStmt):
            for v in st.vars:
                self.bind(v, line)
        elif isinstance(st, DelStmt):
            self.bind(st.expr, line)
        elif isinstance(st, (FuncDef, Decorator, OverloadedFuncDef, ClassDef)):
            self.bind_name(st.name, line)
            # a nested body may rebind the enclosing function's locals (nonlocal)
            self.depth += 1
            for body in ([st.defs.body] if isinstance(st, ClassDef)
                         else [f.body.body for f in functions_of(st)]):
                self.block(body)
            self.depth -= 1
        elif isinstance(st, (Import, ImportFrom)):
            for name, alias in (st.ids if isinstance(st, Import) else st.names):
                self.bind_name(alias or name.split(".")[0], line)
        elif isinstance(st, MatchStmt):
            raise ValueError("match statements bind names in patterns: nothing is known")
        for block in statement_blocks(st):
            self.block(block)

    def walrus(self, node: object, depth: int = 0) -> None:
        """Bind every ``(n := ...)`` target in ``node``'s expressions (a generic walk over
        the attributes that hold sub-expressions)."""
        if depth > 60:
            raise ValueError("expression too deep")
        if isinstance(node, _AssignmentExpr):
            self.bind(node.target, node.line)
        for attr in _child_attrs(type(node)):
            child = getattr(node, attr, None)
            if isinstance(child, _Expression):
                self.walrus(child, depth + 1)
            elif isinstance(child, (list, tuple)):
                for c in child:
                    if isinstance(c, (list, tuple)):
                        for cc in c:
                            if isinstance(cc, _Expression):
                                self.walrus(cc, depth + 1)
                    elif isinstance(c, _Expression):
                        self.walrus(c, depth + 1)

    def record(self, target: Expression, value: Expression, line: int) -> None:
        sized = _one_dim_size(value)
        if isinstance(target, NameExpr):
            if not self.depth:
                self.facts.values[target.name] = value
            if sized is not None and isinstance(sized[0], NameExpr):
                self.facts.sizes[target.name] = (sized[0].name, sized[1], line)
            return
        if not isinstance(target, (TupleExpr, ListExpr)):
            return
        sliced = _shape_slice(value)
        if sliced is None or not isinstance(sliced[0], NameExpr):
            return
        tensor, start = sliced[0].name, sliced[1]
        items = target.items
        stars = [k for k, it in enumerate(items) if isinstance(it, StarExpr)]
        for k, it in enumerate(items):
            if not isinstance(it, NameExpr):
                continue
            if not stars or k < stars[0]:
                self.facts.sizes[it.name] = (tensor, start + k, line)
                if not stars and not isinstance(value, IndexExpr):  # b, s, h = x.shape: rank 3
                    self.facts.ranks[it.name] = len(items)
            elif start == 0 and k > stars[0]:
                self.facts.sizes[it.name] = (tensor, k - len(items), line)


# The attributes of mypy's expression nodes that hold sub-expressions (for the walrus walk);
# statements' own expressions too (``return``, ``if`` conditions, assignment values, ...).
_CHILD_ATTRS: Final = ("expr", "rvalue", "lvalues", "callee", "args", "left", "right", "operands",
                "base", "index", "items", "cond", "if_expr", "else_expr", "value", "left_expr",
                "right_expr", "sequences", "condlists", "begin_index", "end_index", "stride",
                "key", "generator", "indices", "msg", "from_expr", "analyzed")
_CHILD_ATTRS_OF: Final[dict[type, tuple[str, ...]]] = {}
# statements that bind no name themselves (their blocks may), by exact class (mypy's
# statement classes are not subclassed): the size walk skips its isinstance tests for them
_BINDING_FREE: Final = frozenset({ExpressionStmt, ReturnStmt, IfStmt, WhileStmt, PassStmt,
                                  AssertStmt, RaiseStmt, BreakStmt, ContinueStmt})
# bound once (a Final module attribute is a C static to this compiled module; an imported
# name, a dict lookup at each use): the walrus walk tests every sub-expression
_AssignmentExpr: Final = AssignmentExpr
_Expression: Final = Expression


def _child_attrs(cls: type) -> tuple[str, ...]:
    """Those of :data:`_CHILD_ATTRS` a node class has (its slots): asking a node for an
    attribute its class lacks raises and catches an AttributeError, ~30 times per node."""
    attrs = _CHILD_ATTRS_OF.get(cls)
    if attrs is None:
        attrs = _CHILD_ATTRS_OF[cls] = tuple(a for a in _CHILD_ATTRS if hasattr(cls, a))
    return attrs


def _shape_param(ctx: AnyCtx, exprs: list[Expression] | None,
                 x_text: str | None, x: Expression | None = None) -> Any:
    """A reshape/view target: literal ints, ``x.shape[i]`` (SameDim), other int expressions
    (ANY_SIZE); UNKNOWN when the shape itself is not written out (``x.view(shape)``).
    ``x``: the reshaped tensor (a local reshape), whose makers' sizes count too
    (:func:`reshape_leads`, read only for an entry nothing else reads)."""
    items = _shape_items(ctx, exprs, x_text, x)
    return gs.UNKNOWN if items is None else items


def _shape_items(ctx: AnyCtx, exprs: list[Expression] | None,
                 x_text: str | None, x: Expression | None = None) -> tuple[Any, ...] | None:
    """:func:`_shape_param`'s target, None where it is UNKNOWN: written with the views' size
    markers only, so that a local reshape (:func:`reshape_target`) loads no global engine."""
    if not exprs:
        return None
    items = list(exprs)
    summed = _shape_sum(items[0]) if len(items) == 1 else None
    if summed is not None:  # x.view(x.shape[:-1] + (nh, hd))
        items = summed
    elif len(items) == 1 and isinstance(items[0], (TupleExpr, ListExpr)):
        items = list(items[0].items)
    elif len(items) == 1 and _shape_prefix(items[0], x_text) is not None:
        items = [StarExpr(items[0])]  # x.view(x.shape), x.view(x.size()[:2])
    elif len(items) == 1 and lit_int(items[0]) is None and _same_dim(items[0], x_text, ctx) is None:
        t = lookup_type(ctx.api, items[0])
        p = get_proper_type(t) if t is not None else None
        if isinstance(p, LiteralType):
            p = p.fallback
        if not (isinstance(p, Instance) and p.type.fullname == "builtins.int"):
            return None  # a tuple/Size/list variable: its length is unknown
    out: list[Any] = []
    leads: list[_Lead] | None = None
    for it in items:
        v = lit_int(it)
        if v is not None:
            out.append(v)
            continue
        kept = _shape_prefix(it, x_text)
        if kept is not None:  # x.view(*x.shape[:2], heads, -1), x.view(*x.shape[:-1], nh, hd)
            out.extend(kept)
            continue
        d = _same_dim(it, x_text, ctx)
        if d is not None:
            out.append(_SameDim(d, it.name.rstrip("'") if isinstance(it, NameExpr) else None,
                                _named_rank(it, ctx)))
            continue
        if x is not None and leads is None:
            leads = reshape_leads(x, ctx)
        kept = _lead_sizes(it, leads, ctx) if leads else None
        if kept is not None:  # F.linear(x, w).view(b, n, -1, 3, hd) with b, n, _ = x.shape
            out.extend(kept)
            continue
        t = lookup_type(ctx.api, it)
        p = get_proper_type(t) if t is not None else None
        if isinstance(p, LiteralType):
            p = p.fallback
        if isinstance(p, Instance) and p.type.fullname == "builtins.int":
            out.append(_ANY_SIZE)
            continue
        return None
    return tuple(out)


def reshape_target(ctx: AnyCtx) -> tuple[Any, ...] | None:
    """A local ``x.view(...)`` / ``x.reshape(...)`` / ``torch.reshape(x, ...)`` target for
    the engine's S(i) rule (engine ``views.reshaped_dim``), read as for global SPMD
    (:func:`_shape_param`); None for ``x.view(dtype)`` or a target not written out."""
    c = ctx.context
    x: Expression | None = None
    if isinstance(c, CallExpr) and isinstance(c.callee, MemberExpr) and not (
            isinstance(c.callee.expr, (NameExpr, MemberExpr)) and c.callee.expr.fullname == "torch"):
        x = c.callee.expr
    else:
        args = getattr(ctx, "args", ())
        x = args[0][0] if args and args[0] else None
    f = _by_formal(ctx)
    if "dtype" in f or x is None:
        return None
    return _shape_items(ctx, f.get("shape") or f.get("size"), expr_text(x), x)


# -- torch modules whose constructor states the op's dims ---------------------------------

# op -> (engine parameter, constructor formal, its position, its default); nn.Flatten's
# defaults differ from torch.flatten's (start_dim=1).
_MODULE_DIMS: dict[str, tuple[tuple[str, str, int, Any], ...]] = {
    "layer_norm": (("normalized_ndim", "normalized_shape", 0, None),),
    "rms_norm": (("normalized_ndim", "normalized_shape", 0, None),),
    "softmax": (("dim", "dim", 0, None),),
    "log_softmax": (("dim", "dim", 0, None),),
    "softmin": (("dim", "dim", 0, None),),
    "flatten": (("start_dim", "start_dim", 0, 1), ("end_dim", "end_dim", 1, -1)),
    "unflatten": (("dim", "dim", 0, None), ("sizes", "unflattened_size", 1, None)),
}


def _is_torch_module_call(ctx: AnyCtx) -> Expression | None:
    """The module expression of ``self.norm(x)`` when it is one of torch's one-op modules."""
    from .modules import TORCH_MODULE_OPS

    c = ctx.context
    if not isinstance(c, CallExpr):
        return None
    t = getattr(ctx, "type", None)  # the receiver of the module's __call__ (a method hook)
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, Instance) and p.type.fullname in TORCH_MODULE_OPS:
        return c.callee
    return None


def module_constructor(ctx: AnyCtx, module: Expression) -> list[Expression]:
    """The values ``module`` was assigned: the assignments to the attribute in its class's
    methods or body (``self.norm = nn.LayerNorm(h)``) and its bases', a local's in the
    enclosing function (``norm = nn.LayerNorm(h)``), or the call itself
    (``nn.LayerNorm(h)(x)``).  Only classes of the module being checked are read: another
    module's class may come from mypy's cache, without its body, and the verdict must not
    depend on the cache."""
    values: list[Expression] = []
    if isinstance(module, CallExpr):  # nn.LayerNorm(h)(x)
        return [module]
    if isinstance(module, MemberExpr):
        for info in classes_in_sight(ctx, module):
            _attribute_values(info.defn.defs.body, module.name, None, values)
    elif isinstance(module, NameExpr) and module.kind == LDEF:
        func = current_function(ctx.api)
        facts = size_names(func) if func is not None else None
        value = facts.values.get(module.name) if facts is not None else None
        if facts is not None and value is not None:
            values.append(value)
            if facts.bindings.get(module.name) != 1:
                values.append(module)  # bound otherwise too (a loop, a with): unreadable
    return values


def classes_in_sight(ctx: AnyCtx, member: MemberExpr) -> list[TypeInfo]:
    """The classes whose bodies say how ``self.attr`` was built: the owner's class and bases
    defined in the module being checked (another module's may come from mypy's cache without
    its body, and the verdict must not depend on the cache)."""
    owner = lookup_type(ctx.api, member.expr)
    p = get_proper_type(owner) if owner is not None else None
    tree = getattr(ctx.api, "tree", None)
    if not isinstance(p, Instance) or not isinstance(tree, MypyFile):
        return []
    return [info for info in p.type.mro if info.module_name == tree.fullname]


def _attribute_values(stmts: Sequence[Statement], attr: str, self_name: str | None,
                      out: list[Expression]) -> None:
    """Every value assigned to ``<self>.attr`` in these statements (a class body: its
    methods, ``self`` being each one's first parameter; and ``attr = ...`` in the body)."""
    for st in stmts:
        if isinstance(st, AssignmentStmt):
            if isinstance(st.rvalue, TempNode) and st.rvalue.no_rhs:
                continue  # ``layers: nn.ModuleList``: a declaration, no value (Megatron, HF)
            for lv in st.lvalues:
                if self_name is None and isinstance(lv, NameExpr) and lv.name == attr:
                    out.append(st.rvalue)
                elif (self_name is not None and isinstance(lv, MemberExpr) and lv.name == attr
                      and isinstance(lv.expr, NameExpr) and lv.expr.name == self_name):
                    out.append(st.rvalue)
                elif isinstance(lv, (TupleExpr, ListExpr)):
                    for it in lv.items:  # self.a, self.b = ...: a value that cannot be read
                        if isinstance(it, MemberExpr) and it.name == attr:
                            out.append(it)
            continue
        funcs = functions_of(st)
        if funcs and self_name is None:
            for f in funcs:
                if f.arguments:
                    _attribute_values(f.body.body, attr, f.arguments[0].variable.name, out)
            continue
        for block in statement_blocks(st):
            _attribute_values(block, attr, self_name, out)


def _constructor_arg(call: CallExpr, formal: str, position: int) -> Expression | None:
    for k, (name, kind, arg) in enumerate(zip(call.arg_names, call.arg_kinds, call.args)):
        if name == formal:
            return arg
        if name is None and kind == ARG_POS and k == position:
            return arg
    return None


# Where torch's loss modules take ``reduction`` positionally (after the deprecated
# size_average / reduce, and CrossEntropyLoss's weight and ignore_index); 2 for the others
_LOSS_REDUCTION_AT: Final = {"HuberLoss": 0, "CrossEntropyLoss": 4, "NLLLoss": 4, "BCELoss": 3,
                             "BCEWithLogitsLoss": 3}
_WEIGHT_FIRST: Final = frozenset({"CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"})


def module_reduction(ctx: AnyCtx) -> tuple[bool, object]:
    """The ``reduction`` of a loss module's call (``self.crit(x, y)``, ``crit =
    nn.CrossEntropyLoss(reduction="sum")``) read from its constructor, for engine
    ``call_spec``: (False, None) when the constructor leaves it out (its default, "mean"),
    (True, value) when it states it, (True, UNREAD_VALUE) when it cannot be read (no
    constructor in sight, a value not a literal, the deprecated size_average / reduce)."""
    unread = (True, UNREAD_VALUE)
    module = _is_torch_module_call(ctx)
    t = getattr(ctx, "type", None)
    p = get_proper_type(t) if t is not None else None
    if module is None or not isinstance(p, Instance):
        return unread
    values = module_constructor(ctx, module)
    call = values[0] if len(values) == 1 and isinstance(values[0], CallExpr) else None
    if call is None or any(k not in (ARG_POS, ARG_NAMED) for k in call.arg_kinds):
        return unread
    cls = p.type.name
    e = _constructor_arg(call, "reduction", _LOSS_REDUCTION_AT.get(cls, 2))
    if e is not None:
        return (True, e.value) if isinstance(e, StrExpr) else unread
    if any(n in ("size_average", "reduce") for n in call.arg_names):
        return unread
    positional = sum(1 for n in call.arg_names if n is None)
    return (False, None) if positional <= (1 if cls in _WEIGHT_FIRST else 0) else unread


def module_params(ctx: AnyCtx, op: str) -> dict[str, Any] | None:
    """The dims of ``self.norm(x)`` read from the module's constructor (``nn.LayerNorm(h)``:
    one normalized dim; ``nn.LayerNorm((s, h))``: two; ``nn.Softmax(dim=-1)``): None when
    the call is not one of those modules'; UNKNOWN entries when the constructor cannot be
    read (then the caller reports :func:`module_unread_error`); ``_not_found`` when no
    assignment is in sight (then only the local rule applies: the layout is unknown)."""
    dims = _MODULE_DIMS.get(op)
    module = _is_torch_module_call(ctx) if dims else None
    if module is None or dims is None:
        return None
    values = module_constructor(ctx, module)
    if not values:  # built where this module cannot see (a base class of another module)
        return {"_not_found": True}
    call = values[0] if len(values) == 1 and isinstance(values[0], CallExpr) else None
    p: dict[str, Any] = {}
    for param, formal, position, default in dims:
        e = _constructor_arg(call, formal, position) if call is not None else None
        if call is not None and e is None and default is not None:
            p[param] = default
        elif e is None:
            p[param] = gs.UNKNOWN
        elif param == "normalized_ndim":
            p[param] = _normalized_ndim(ctx, e)
        elif param == "sizes":
            p[param] = lit_ints([e]) if isinstance(e, (TupleExpr, ListExpr)) else gs.UNKNOWN
        else:
            v = lit_int(e)
            p[param] = v if v is not None else gs.UNKNOWN
    return p


def _normalized_ndim(ctx: AnyCtx, e: Expression) -> Any:
    """How many trailing dims ``normalized_shape`` names: an int is one, a tuple or list
    of n items n (also read from the expression's type: ``nn.LayerNorm(config.hidden)``)."""
    if isinstance(e, (TupleExpr, ListExpr)):
        return len(e.items)
    if lit_int(e) is not None:
        return 1
    t = lookup_type(ctx.api, e)
    p = get_proper_type(t) if t is not None else None
    if isinstance(p, LiteralType):
        p = p.fallback
    if isinstance(p, Instance) and p.type.fullname == "builtins.int":
        return 1
    if isinstance(p, TupleType):
        return len(p.items)
    return gs.UNKNOWN


def module_unread_error(ctx: AnyCtx, op: str, ops: Sequence[Operand], params: dict[str, Any]) -> SpmdError:
    c = ctx.context
    module = expr_text(c.callee) if isinstance(c, CallExpr) else "the module"
    what = next(formal for param, formal, _, _ in _MODULE_DIMS[op] if params.get(param) is gs.UNKNOWN)
    g = next((o for o in ops if o.type is not None and o.type.spec is not None), ops[0])
    return SpmdError(
        "spmd-global",
        f"{module}(...) of the global tensor {g.text}: {format_type(g.type) if g.type else ''}: "
        f"the layout of {op} depends on the module's {what}, which the checker reads "
        f"from the one assignment that builds the module ({module} = nn.{_MODULE_CLASS.get(op, op)}"
        f"(...) with {what} {_READABLE.get(what, 'a literal int')}); build it that way, call F.{op} "
        f"with literal dims, or do it inside spmd.local_map",
    )


_READABLE = {"normalized_shape": "an int or a tuple of ints",
             "unflattened_size": "a literal tuple of ints"}
_MODULE_CLASS = {"layer_norm": "LayerNorm", "rms_norm": "RMSNorm", "softmax": "Softmax",
                 "log_softmax": "LogSoftmax", "softmin": "Softmin", "flatten": "Flatten",
                 "unflatten": "Unflatten"}


def op_params(typer: CallTyper, ctx: AnyCtx, op: str, x_text: str | None = None) -> dict[str, Any]:
    """The op's literal parameters for :func:`global_spmd.propagate` (``x_text``: the
    source text of the tensor operated on, for ``x.reshape(x.shape[0], -1)``)."""
    f = _by_formal(ctx)
    p: dict[str, Any] = {}
    base = op.rstrip("_") if not op.startswith("__") else op
    if base in ("permute",):
        p["dims"] = lit_ints(f.get("dims", []))
    elif base in ("transpose", "swapaxes", "swapdims"):
        for k, alt in (("dim0", "axis0"), ("dim1", "axis1")):
            given = f.get(k) or f.get(alt)
            v = lit_int(given[0] if given else None)
            p[k] = v if v is not None else gs.UNKNOWN
    elif base in ("movedim", "moveaxis"):
        for k in ("source", "destination"):
            p[k] = _dim_param(f.get(k))
    elif base in ("reshape", "view"):
        if "dtype" in f:
            e = f["dtype"][0]
            t = lookup_type(ctx.api, e)
            pt = get_proper_type(t) if t is not None else None
            if isinstance(pt, LiteralType):
                pt = pt.fallback
            if lit_int(e) is not None or (isinstance(pt, Instance) and pt.type.fullname == "builtins.int"):
                # mypy trying the view(dtype) overload on x.view(-1): it rejects it, and the
                # view(*size) overload reports
                return {"_not_this_overload": True}
            return {"dtype_view": True, "dtype": e.fullname if isinstance(e, RefExpr)
                    and e.fullname.startswith("torch.") else UNREAD_VALUE}
        p["shape"] = _shape_param(ctx, f.get("shape") or f.get("size"), x_text)
    elif base == "flatten":
        for k, default in (("start_dim", 0), ("end_dim", -1)):
            exprs = f.get(k)
            p[k] = default if exprs is None else (lit_int(exprs[0]) if lit_int(exprs[0]) is not None else gs.UNKNOWN)
    elif base == "unflatten":
        p["dim"] = _dim_param(f.get("dim"), many=False)
        # only how many: a sharding goes to the outermost new dim whatever the sizes
        sizes = _shape_param(ctx, f.get("sizes"), x_text)
        p["sizes"] = gs.UNKNOWN if isinstance(sizes, tuple) and any(
            isinstance(v, gs.SamePrefix) for v in sizes) else sizes
    elif base in ("layer_norm", "rms_norm"):
        ns = f.get("normalized_shape")
        if ns and isinstance(ns[0], (TupleExpr, ListExpr)):
            p["normalized_ndim"] = len(ns[0].items)
        elif ns and lit_int(ns[0]) is not None:
            p["normalized_ndim"] = 1
        else:
            p["normalized_ndim"] = gs.UNKNOWN
    elif base == "tensordot":  # an int, or a pair of dim lists
        # (names of their own: mypyc types a local by its first assignment, and the other
        # branches' ``d`` holds what _dim_param returns)
        summed = f.get("dims")
        if summed is None:
            p["dims"] = 2
        elif lit_int(summed[0]) is not None:
            p["dims"] = lit_int(summed[0])
        elif isinstance(summed[0], (TupleExpr, ListExpr)) and len(summed[0].items) == 2:
            p["dims"] = tuple(lit_ints([i]) for i in summed[0].items)
        else:
            p["dims"] = gs.UNKNOWN
    elif base == "linalg_vecdot":
        along = f.get("dim")
        p["dim"] = -1 if along is None else (lit_int(along[0]) if lit_int(along[0]) is not None
                                             else gs.UNKNOWN)
    elif base == "einsum":
        eq = f.get("equation") or f.get("args") or []
        p["equation"] = eq[0].value if eq and isinstance(eq[0], StrExpr) else gs.UNKNOWN
    elif op in ("__getitem__", "__setitem__"):  # x[index], x[index] = value
        c = ctx.context
        p["index"] = _index_items(typer, ctx, c.index) if isinstance(c, IndexExpr) else gs.UNKNOWN
    elif base in ("cat", "concat", "concatenate", "stack"):
        d = _dim_param(f.get("dim") or f.get("axis"), many=False)
        p["dim"] = 0 if d is None else d
    elif base in gs.SPLITS:
        d = _dim_param(f.get("dim") or f.get("axis"), many=False)
        p["dim"] = 0 if d is None else d
    elif base in ("expand", "broadcast_to"):
        exprs = f.get("size") or f.get("shape") or f.get("sizes")
        p["shape"] = lit_ints(exprs) if exprs else gs.UNKNOWN
    elif base in ("roll", "flip", "rot90"):
        p["dims"] = _dim_param(f.get("dims"))
    elif base == "diff":
        p["dim"] = _dim_param(f.get("dim"), many=False)
    elif base in gs.FOURIER:
        p["dim"] = _dim_param(f.get("dim"))
        sizes = f.get("s")
        if sizes and not is_none(sizes[0]):  # an n-d transform's sizes: only how many
            p["s"] = len(sizes[0].items) if isinstance(sizes[0], (TupleExpr, ListExpr)) else gs.UNKNOWN
    elif base == "repeat_interleave":
        p["dim"] = _dim_param(f.get("dim"), many=False)
        for formal, types in zip(ctx.callee_arg_names, ctx.arg_types):
            if formal == "repeats" and types:
                reps = get_proper_type(types[0])
                p["int_repeats"] = isinstance(reps, LiteralType) or (
                    isinstance(reps, Instance)
                    and reps.type.fullname in ("builtins.int", "builtins.bool"))
    elif base == "pad":
        pads = f.get("pad")
        pad_e = pads[0] if pads else None
        p["pad"] = (lit_ints(pad_e.items) if isinstance(pad_e, (TupleExpr, ListExpr))
                    else gs.UNKNOWN)
    elif base in gs.LAYOUT_OPS:
        # batch_norm's mode, a convolution's groups: a module call (nn.BatchNorm2d,
        # nn.Conv2d) names neither, and is unread (batch_norm then counts as training)
        names = ctx.callee_arg_names
        if base == "batch_norm":
            p["training"] = _bool_param(f.get("training")) if "training" in names else gs.UNKNOWN
        if "groups" in names:
            g = f.get("groups")
            p["groups"] = 1 if not g else (lit_int(g[0]) if lit_int(g[0]) is not None else gs.UNKNOWN)
        else:
            p["groups"] = gs.UNKNOWN
    elif base in gs.ATTENTION:
        p["is_causal"] = _bool_param(f.get("is_causal"))
    elif base in gs.CLASS_LOSSES:
        r = f.get("reduction")
        if r:
            p["reduction"] = r[0].value if isinstance(r[0], StrExpr) else gs.UNKNOWN
    elif base in ("select", "narrow", "unsqueeze", "index_select", "gather", "take_along_dim",
                  "scatter", "scatter_add", "scatter_reduce", "index_add"):
        p["dim"] = _dim_param(f.get("dim"), many=False)
        if base == "scatter_reduce":
            r = f.get("reduce")
            p["reduce"] = r[0].value if r and isinstance(r[0], StrExpr) else gs.UNKNOWN
    elif base == "index_put":
        acc = f.get("accumulate")
        p["accumulate"] = False if not acc else _bool_param(acc)
    elif base == "squeeze":
        p["dim"] = _dim_param(f.get("dim"))
    elif base in ("max", "min") and "other" in f:
        # torch.max(x, other): elementwise (mypy also tries this overload for x.max(1))
        p["binary"] = True
    elif base in gs.REDUCTIONS or base in gs.ALONG_DIM or base in gs.SELECT_ALONG_DIM:
        if "dim" in f:
            p["dim"] = _dim_param(f.get("dim"))
        elif (base in gs.ALONG_DIM and base != "normalize"
              or gs.SELECT_ALONG_DIM.get(base, 0) is None):  # no default dim (cummax)
            p["dim"] = gs.UNKNOWN
        p["keepdim"] = _bool_param(f.get("keepdim"))
    return p


def size_one_dims(e: Expression | None, rank: int, func: FuncDef | None = None,
                  depth: int = 0) -> tuple[bool, ...]:
    """The dims of ``e`` (a value of ``rank`` dims) that its own expression makes size 1:
    ``x.unsqueeze(k)`` (literal k) and ``x[:, None]`` (None items, before or after one
    ``...``), also through a local of ``func`` bound once to such an expression.  An
    elementwise op broadcasts those, as the check mode does from the sizes::

        q: PS["dp", "tp", None, None] * cos.unsqueeze(0).unsqueeze(0)   (cos: PS[None, None])
        c = cos[None, None];  q * c                                      (the same)
    """
    if isinstance(e, NameExpr):
        if func is None or e.kind != LDEF or depth > 3:
            return ()
        value = value_bound_once(func, e.name)
        return size_one_dims(value, rank, func, depth + 1) if value is not None else ()
    ones = [False] * rank
    if (isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr)
            and e.callee.name == "unsqueeze" and len(e.args) == 1):
        k = lit_int(e.args[0])
        if k is not None and -rank <= k < rank:
            ones[k % rank] = True
    elif isinstance(e, IndexExpr):
        items = e.index.items if isinstance(e.index, TupleExpr) else [e.index]
        if any(not (is_none(i) or isinstance(i, (SliceExpr, EllipsisExpr))) for i in items):
            return ()  # an int or tensor index: the dims move; not read
        split = next((k for k, i in enumerate(items) if isinstance(i, EllipsisExpr)), len(items))
        for k, i in enumerate(items[:split]):
            if is_none(i) and k < rank:
                ones[k] = True
        for k, i in enumerate(reversed(items[split + 1:])):
            if is_none(i) and k < rank:
                ones[rank - 1 - k] = True
    return tuple(ones) if any(ones) else ()


def propagate(typer: CallTyper, ctx: AnyCtx, op: str, ops: list[Operand],
              exprs: Sequence[Expression | None] = ()):  # noqa: ANN201
    """Shard propagation of a torch op or operator with a global operand (``exprs``: the
    operands' expressions, where known, for the dims they make size 1)."""
    try:
        params = op_params(typer, ctx, op, ops[0].text if ops else None)
        if gs.is_elementwise(op):
            params["sizes_exact"] = False  # only what an operand's expression shows is known
            func = current_function(ctx.api)
            ones = [size_one_dims(e, len(o.type.spec), func) if o.type is not None and o.type.spec
                    is not None else () for o, e in zip(ops, exprs)]
            if any(ones):
                params["sizes_one"] = tuple(ones)
        if params.get("_not_this_overload"):
            return Result(SpmdType(), [])
        if op in CAST_OPS:  # a cast's dtype (an integer one is non-linear)
            params["dtype"] = read_variant(ctx, op).get(CAST_FORMAL)
        from_module = module_params(ctx, op)
        if from_module is not None and from_module.get("_not_found"):
            # the kinds still checked (a Partial through a norm), the layout unknown
            return Result(SpmdType(), list(local_propagate(op, ops).errors))
        if from_module is not None:
            if any(v is gs.UNKNOWN for v in from_module.values()):
                return Result(SpmdType(), [module_unread_error(ctx, op, ops, from_module)])
            params.update(from_module)
        return gs.propagate(op, ops, **params)
    except Exception:  # noqa: BLE001 - never crash mypy: the result is unknown
        return Result(SpmdType(), [])


def guarded(hook):  # noqa: ANN001, ANN201
    """A hook that falls back to mypy's own result on an unexpected failure."""

    def run(typer: CallTyper, ctx: AnyCtx) -> Type:
        try:
            return hook(typer, ctx)
        except Exception:  # noqa: BLE001 - never crash mypy
            return ctx.default_return_type

    run.__doc__ = hook.__doc__
    return run


# -- spmd.local_map -----------------------------------------------------------------------


def _find_decorators(stmts: Sequence[object], found: dict[int, FuncDef]) -> None:
    """Decorator call -> the function it decorates, over every nested block (a plain
    walk: mypy's compiled visitors cannot be subclassed)."""
    for st in stmts:
        if isinstance(st, Decorator):
            for d in st.decorators:
                found[id(d)] = st.func
            _find_decorators(st.func.body.body, found)
            continue
        for attr in ("body", "else_body", "finally_body", "defs"):
            block = getattr(st, attr, None)
            if block is None:
                continue
            blocks = block if isinstance(block, list) else [block]
            for b in blocks:
                inner = getattr(b, "body", None)
                if isinstance(inner, list):
                    _find_decorators(inner, found)
        for h in getattr(st, "handlers", None) or ():
            _find_decorators(getattr(h, "body", []), found)


def _decorated_functions(tree: MypyFile) -> dict[int, FuncDef]:
    found: dict[int, FuncDef] = {}
    try:
        _find_decorators(tree.defs, found)
    except Exception:  # noqa: BLE001 - never crash mypy: no function found
        pass
    return found


_DECORATED: TreeMemo[dict[int, FuncDef]] = TreeMemo(_decorated_functions)


def decorated_function(api: object, call: Expression) -> FuncDef | None:
    """The function a ``@spmd.local_map(...)`` decorator call decorates."""
    tree = getattr(api, "tree", None)
    if not isinstance(tree, MypyFile):
        return None
    return _DECORATED.get(tree).get(id(call))


def _types_arg(typer: CallTyper, ctx: AnyCtx, e: Expression | None) -> list[SpmdType | None] | None:
    """``in_types``/``out_types``: a tensor type or a tuple of them (None: not a tensor type)."""
    if e is None:
        return None
    items = e.items if isinstance(e, TupleExpr) else [e]
    return [None if is_none(i) else typer.type_from_expression(ctx, i) for i in items]


@guarded
def local_map_hook(typer: CallTyper, ctx: AnyCtx) -> Type:
    """``@spmd.local_map(in_types=..., out_types=..., axes=...)``: the body is checked in
    local SPMD with its own annotations; its parameters and declared result must be the
    local view (on ``axes``) of ``in_types``/``out_types``; the decorated function gets
    the global signature."""
    f = {n: (e, t) for n, e, t in ((n, es[0], ts[0]) for n, es, ts in
                                    zip(ctx.callee_arg_names, ctx.args, ctx.arg_types) if es)}
    in_e = f.get("in_types", (None, None))[0]
    out_e = f.get("out_types", (None, None))[0]
    axes_e, axes_t = f.get("axes", (None, None))
    axes: tuple[str, ...] | None = None
    if axes_e is not None and not is_none(axes_e):
        axes = typer._axis_names(ctx, axes_e, axes_t, "spmd.local_map axes")
        if axes is None:
            return ctx.default_return_type
    ins = _types_arg(typer, ctx, in_e)
    outs = _types_arg(typer, ctx, out_e)
    func = decorated_function(ctx.api, ctx.context)  # type: ignore[arg-type]
    sig = func.type if func is not None else None
    if not isinstance(sig, CallableType) or ins is None or outs is None:
        return ctx.default_return_type
    errors: list[SpmdError] = []
    # in_types pairs with the parameters one to one (None for a non-tensor), as at runtime
    params = [i for i, k in enumerate(sig.arg_kinds) if k.is_positional()]
    tensor_params = [i for i in params if typer.types.from_type(sig.arg_types[i]) is not None]
    name_of = func.name  # type: ignore[union-attr]
    if len(ins) > len(params) or (tensor_params and tensor_params[-1] >= len(ins)):
        errors.append(SpmdError(
            "spmd-global",
            f"local_map: in_types gives {len(ins)} type(s) but {name_of} has {len(params)} "
            f"parameter(s) ({len(tensor_params)} tensor(s)); give one global type per parameter, "
            f"None for a non-tensor"))
    new_args = list(sig.arg_types)
    for i, want in zip(params, ins):
        t = sig.arg_types[i]
        have = typer.types.from_type(t)
        if want is None or have is None:
            continue
        name = sig.arg_names[i] or f"#{i + 1}"
        if have:
            errors += gs.check_local_map_boundary(have, want, axes, what=f'parameter "{name}"',
                                                  where="in_types")
        inst = typer.types.to_instance(want)
        if inst is not None:
            new_args[i] = inst
    ret = sig.ret_type
    rp = get_proper_type(ret)
    ret_items = list(rp.items) if isinstance(rp, TupleType) else [ret]
    if len(outs) != len(ret_items) and not (len(outs) == 1 and not isinstance(rp, TupleType)):
        errors.append(SpmdError(
            "spmd-global", f"local_map: out_types gives {len(outs)} type(s) but {func.name} "  # type: ignore[union-attr]
                           f"returns {len(ret_items)}"))
    new_items = list(ret_items)
    for k, (item, want) in enumerate(zip(ret_items, outs)):
        if want is None:
            continue
        have = typer.types.from_type(item)
        if have:
            what = "the result" if len(outs) == 1 else f"result #{k + 1}"
            errors += gs.check_local_map_boundary(have, want, axes, what=what)
        inst = typer.types.to_instance(want)
        if inst is not None and have is not None:
            new_items[k] = inst
    typer.report(ctx, errors)
    new_ret: Type = (rp.copy_modified(items=new_items) if isinstance(rp, TupleType)
                     else new_items[0])
    global_sig = sig.copy_modified(arg_types=new_args, ret_type=new_ret)
    dflt = get_proper_type(ctx.default_return_type)
    if isinstance(dflt, CallableType):
        return dflt.copy_modified(arg_types=[AnyType(TypeOfAny.special_form)], ret_type=global_sig,
                                  variables=[])
    return ctx.default_return_type


# -- spmd.redistribute(x, src=PS[...], dst=PS[...]) --------------------------------------


def spec_from_expression(e: Expression | None) -> tuple[tuple[str, ...], ...] | None:
    from .calls import _entry_from_expression

    if isinstance(e, IndexExpr) and isinstance(e.base, RefExpr) and e.base.fullname == "spmd.PS":
        entry = _entry_from_expression(e)
        return entry.spec if entry is not None else None
    return None


def is_global_redistribute(ctx: AnyCtx) -> bool:
    """``redistribute(x, src=..., dst=...)`` without an axis, or with a PS/Tensor src."""
    f = _by_formal(ctx)
    if f.get("axis"):
        return False
    return True


def _endpoint(typer: CallTyper, ctx: AnyCtx, e: Expression | None, x: SpmdType,
              which: str) -> SpmdType | None:
    """src/dst as a global type: a bare ``PS[...]`` (the other axes: see redistribute.resolve)
    or a full ``Tensor[PS[...], ...]`` type (or an alias)."""
    spec = spec_from_expression(e)
    if spec is not None:
        built, errors = gs_build_spec(typer, spec)  # flattened axes read as their components
        typer.report(ctx, errors)
        if errors:
            return None
        return built
    t = typer.type_from_expression(ctx, e)
    if t is None or t.spec is None:
        typer.report(ctx, [SpmdError(
            "spmd-global",
            f"spmd.redistribute({which}={expr_text(e)}): {which} is a partition spec PS[...] or a "
            f"global tensor type Tensor[PS[...], ...] (for one mesh axis, pass the axis: "
            f'redistribute(x, "tp", src=S(0), dst=R))')])
        return None
    return t


def gs_build_spec(typer: CallTyper, spec: tuple[tuple[str, ...], ...]):  # noqa: ANN201
    from ..engine.annotations import Entry, build

    return build([Entry("PS", spec=spec)], typer.plugin.config.mesh_axes, typer.plugin.config.axes_setting,
                 typer.plugin.config.aliases)


@guarded
def redistribute_hook(typer: CallTyper, ctx: AnyCtx) -> Type:
    """Statically: ``src`` must describe ``x``; the planner must find a plan (else its
    reason); the result is ``dst`` (resolved: the axes ``dst`` leaves unsaid keep
    ``x``'s type, see :func:`spmd_mypy.engine.redistribute.resolve`)."""
    f = {n: (es[0], ts[0]) for n, es, ts in zip(ctx.callee_arg_names, ctx.args, ctx.arg_types) if es}
    x_e, x_t = f.get("x", (None, None))
    x = typer.types.from_type(x_t) if x_t is not None else None
    if x is None:
        return ctx.default_return_type
    if f.get("src") is None or f.get("dst") is None:
        return ctx.default_return_type  # mypy reports the missing argument
    src = _endpoint(typer, ctx, f.get("src", (None, None))[0], x, "src")
    dst = _endpoint(typer, ctx, f.get("dst", (None, None))[0], x, "dst")
    if src is None or dst is None:
        return typer.typed_result(ctx.default_return_type, SpmdType())
    text = expr_text(x_e)
    if x:
        errs = rd.check_source(x, src, x_text=text, dst=dst)
        if errs:
            typer.report(ctx, errs)
            return typer.typed_result(ctx.default_return_type, SpmdType())
        # axes x types but src leaves unsaid: src takes x's type there
        src = SpmdType.of({**x.as_dict(), **src.as_dict()}, src.spec)
    if len(src.spec or ()) != len(dst.spec or ()):
        typer.report(ctx, [SpmdError(
            "spmd-global",
            f"spmd.redistribute({text}, ...): src has rank {len(src.spec or ())} "
            f"({format_type(src)}) but dst has rank {len(dst.spec or ())} ({format_type(dst)}); "
            f"a redistribute keeps the global shape")])
        return typer.typed_result(ctx.default_return_type, SpmdType())
    config = typer.plugin.config
    plan = rd.plan(src, dst, config.mesh_axes, config.axes_setting, tuple(config.aliases))
    if plan.errors:
        typer.report(ctx, plan.errors)
        return typer.typed_result(ctx.default_return_type, SpmdType())
    return typer.typed_result(ctx.default_return_type, plan.dst)
