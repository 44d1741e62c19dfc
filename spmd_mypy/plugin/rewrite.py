"""A pre-semantic-analysis pass over each parsed file.

1. Axis strings.  In ``R["tp"]`` mypy parses ``"tp"`` as a forward reference,
   and the pass that collects a signature's or alias's type variables looks it
   up before any plugin hook runs: ``Name "tp" is not defined``.  We rewrite
   every string inside ``R/I/V/P/S/PS[...]`` into a raw literal that pass skips
   (the type-analyze hook reads it back).  ``R[Literal["tp"]]`` needs nothing.

2. Redefinitions.  A tensor's SPMD type changes along a function (``h = all_reduce(h, ...)``
   turns P into R), so inside function bodies a name assigned again in the same block is a
   new variable with its own inferred type: mypy's own ``allow_redefinition_old`` renaming
   (``h = x @ w; h = all_reduce(h)`` checks as ``h' = ...; h = ...``), applied to the
   functions of modules that use SPMD types unless the module already allows redefinition.
   Without it mypy reports ``Incompatible types in assignment`` for every such line.  A
   ``for`` loop's variables reused by a later loop in another block are made the loop's own
   (:mod:`.loop_names`) under any redefinition option.

3. Conditions.  ``if x:`` / ``while x:`` / ``assert x`` read ``x``'s truth value
   (``x.__bool__()``), which mypy types without any plugin hook.  In function bodies and at
   a module's top level (not directly in a class body: a NamedTuple's takes fields only), a
   condition whose operands (through ``not``, ``and``, ``or``) may be tensors gets a
   synthetic ``globals()`` (:func:`condition_trigger`) as the first statement of its body
   (after an ``assert``): by then mypy has typed the condition, and the trigger's hook reads
   its operands' types (a Partial's truth value is this rank's summand's).  Only such
   conditions: a comparison (already an op), a literal, a known ``bool`` call get none, so
   code pays one cheap call per such condition (no arguments: a third of what mypy spends
   on ``isinstance(object, object)``), nothing per expression.  The same trigger serves a
   ``match`` case (at the start of its body): its guard, and its value patterns, which
   compare the subject (``case 0:`` is ``subject == 0``; :mod:`.match_patterns`); and the
   truth values read outside a condition (``a if p else b``, a comprehension's ``if p``,
   ``x = p or q``, ``not p``): after an assignment, expression statement or ``assert``, at
   the start of the body of the ``if``/``while``/``for``/``with``/``match`` whose header
   reads them; a ``return`` or ``raise`` that reads some (a trigger after it would be
   unreached) is wrapped as ``try: return ... finally: <trigger>``, whose finally block mypy
   checks after the statement (as ``autograd`` wraps a backward's body).

4. Gradient-free regions.  The line ranges of ``with torch.no_grad():`` /
   ``inference_mode()`` blocks, ``@torch.no_grad()`` functions and the
   ``forward`` and ``backward`` of custom autograd Functions, where an Invariant operand relaxes
   to Replicate (SPEC section 3).  Stored per file for the op hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Container, Final, Optional, TypeVar, cast

from mypy.literals import literal_hash
from mypy.options import Options
from mypy.renaming import VariableRenameVisitor

from ..engine import collectives as coll
from ..engine.ops import (FACTORIES, GRADIENT_FREE_RESULTS, INTEGER_DTYPES, INTEGER_KEEPING,
                          INTEGER_RESULTS, WEIGHTED_RESULTS, REDUCTIONS,
                          WITH_INDICES)
from ..engine.views import ALONG, KEEP, MOVES
from .loop_names import own_loop_variables
from .webs import own_webs
from .frozen import frozen_attributes
from .statements import functions_of
from .rank_index import (Divergent, RunnerCall, collective_runners, group_attributes, has_query,
                         rank_attributes, rank_helpers, scan_functions, scan_values,
                         may_read_value, ternary_may_diverge)
from .memo import TreeMemo

from mypy.nodes import (
    Argument,
    AssertStmt,
    BreakStmt,
    AssignmentExpr,
    Context,
    AssignmentStmt,
    ConditionalExpr,
    DictExpr,
    DictionaryComprehension,
    GeneratorExpr,
    LambdaExpr,
    ListComprehension,
    OpExpr,
    SetComprehension,
    SetExpr,
    StarExpr,
    Block,
    ForStmt,
    IfStmt,
    Statement,
    TryStmt,
    WhileStmt,
    CallExpr,
    ClassDef,
    ComparisonExpr,
    Decorator,
    Expression,
    ExpressionStmt,
    FuncDef,
    FloatExpr,
    IndexExpr,
    IntExpr,
    ListExpr,
    ARG_POS,
    Import,
    ImportFrom,
    MatchStmt,
    MemberExpr,
    MypyFile,
    NameExpr,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    RaiseStmt,
    ReturnStmt,
    StrExpr,
    TupleExpr,
    UnaryExpr,
    WithStmt,
    AwaitExpr,
    YieldExpr,
    YieldFromExpr,
    DelStmt,
    GlobalDecl,
    NonlocalDecl,
    PassStmt,
)
from mypy.patterns import (
    AsPattern,
    ClassPattern,
    MappingPattern,
    OrPattern,
    Pattern,
    SequencePattern,
    StarredPattern,
    ValuePattern,
)
from mypy.types import (
    CallableArgument,
    CallableType,
    RawExpressionType,
    TupleType,
    Type,
    TypeList,
    UnboundType,
    UnionType,
)

MARKER_NAMES: Final = frozenset({"R", "I", "V", "P", "S", "PS", "Shard"})
# the statements that leave a loop's body for good (an ``if c: <one>`` in a loop gets a
# trigger; a ``raise`` on a value is not followed: rank_index ``loop_exits``)
_LOOP_EXITS: Final = (BreakStmt, ReturnStmt)
NO_GRAD_CALLS: Final = frozenset({"no_grad", "inference_mode"})
# A condition's trigger (section 3): a call of this builtin, recognised by identity; the
# builtins a trigger calls (a local binding of one keeps the triggers out of its scope)
TRIGGER_NAME: Final = "globals"
TRIGGER_FULLNAME: Final = "builtins.globals"
_TRIGGER_NAMES: Final = frozenset({"isinstance", TRIGGER_NAME})

# mypy's node and type classes, bound once.  mypy is compiled in its own mypyc group, so to
# this compiled module they are plain Python classes: a bare imported name is a dict lookup at
# every use and ``isinstance`` walks the class's MRO, which made this pass (every statement of
# every file, before semantic analysis) cost a sixth of what the plugin adds to a warm run.  A
# ``Final`` module attribute is a C static, and ``type(x) is _C`` a pointer comparison: the walk
# dispatches on the exact class (mypy does not subclass these; a ``cast`` narrows for free).
_AssertStmt: Final = AssertStmt
_AssignmentExpr: Final = AssignmentExpr
_AssignmentStmt: Final = AssignmentStmt
_Block: Final = Block
_CallableArgument: Final = CallableArgument
_CallableType: Final = CallableType
_CallExpr: Final = CallExpr
_ClassDef: Final = ClassDef
_ComparisonExpr: Final = ComparisonExpr
_ConditionalExpr: Final = ConditionalExpr
_Decorator: Final = Decorator
_DictExpr: Final = DictExpr
_DictionaryComprehension: Final = DictionaryComprehension
_ExpressionStmt: Final = ExpressionStmt
_FloatExpr: Final = FloatExpr
_ForStmt: Final = ForStmt
_FuncDef: Final = FuncDef
_GeneratorExpr: Final = GeneratorExpr
_IfStmt: Final = IfStmt
_IndexExpr: Final = IndexExpr
_IntExpr: Final = IntExpr
_LambdaExpr: Final = LambdaExpr
_ListComprehension: Final = ListComprehension
_ListExpr: Final = ListExpr
_MatchStmt: Final = MatchStmt
_MemberExpr: Final = MemberExpr
_NameExpr: Final = NameExpr
_OpExpr: Final = OpExpr
_OperatorAssignmentStmt: Final = OperatorAssignmentStmt
_OverloadedFuncDef: Final = OverloadedFuncDef
_RaiseStmt: Final = RaiseStmt
_ReturnStmt: Final = ReturnStmt
_SetComprehension: Final = SetComprehension
_SetExpr: Final = SetExpr
_StarExpr: Final = StarExpr
_StrExpr: Final = StrExpr
_TryStmt: Final = TryStmt
_TupleExpr: Final = TupleExpr
_TupleType: Final = TupleType
_TypeList: Final = TypeList
_UnaryExpr: Final = UnaryExpr
_UnboundType: Final = UnboundType
_UnionType: Final = UnionType
_RawExpressionType: Final = RawExpressionType
_WhileStmt: Final = WhileStmt
_WithStmt: Final = WithStmt
_YieldExpr: Final = YieldExpr
_YieldFromExpr: Final = YieldFromExpr
_AwaitExpr: Final = AwaitExpr


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# A function's record for the integer reading (GradRegions.integer_pending): its lines, its
# locals' assigned values, the module-level ints it does not assign
_IntRecord = tuple[int, int, dict[str, list[Expression]], set[str]]
_E = TypeVar("_E")  # an entry of a walk's per-definition lists (_outside), of its maps (_renew)

def _append(values: dict[str, list[Expression]], name: str, value: Expression) -> None:
    """``values.setdefault(name, []).append(value)``, without the KeyError a compiled
    ``setdefault`` raises and clears for each new name."""
    known = values.get(name)
    if known is None:
        values[name] = [value]
    else:
        known.append(value)


# Which of a function's assignment records a binding goes to (_Walker._bind): the gradient-free
# reading's, the integer reading's, or both
_GRAD: Final = 1
_INT: Final = 2
_BOTH: Final = 3


# --- 1. types (function signatures, variable annotations) ---------------------------


def rewrite_type(t: Type | None) -> None:
    """In place: UnboundType("tp", original_str_expr="tp") under a marker -> raw literal,
    anywhere in a type (Callable arguments, unions, tuples, nested generics)."""
    cls = type(t)
    if cls is _UnboundType:
        u = cast(UnboundType, t)
        args = u.args
        if not args:  # int, LayerConfig: most of a signature
            return
        name = u.name
        if name in MARKER_NAMES or ("." in name and _short(name) in MARKER_NAMES):
            new_args = []
            changed = False
            for a in args:
                raw = _raw_axis(a)
                if raw is not a:
                    changed = True
                rewrite_type(raw)
                new_args.append(raw)
            if changed:  # (a list or tuple of axes is rewritten in place)
                u.args = tuple(new_args)
        else:
            for a in args:
                rewrite_type(a)
    elif cls is _CallableType:
        c = cast(CallableType, t)
        for a in c.arg_types:
            rewrite_type(a)
        rewrite_type(c.ret_type)
    elif cls is _TypeList or cls is _UnionType or cls is _TupleType:
        for item in cast("TypeList | UnionType | TupleType", t).items:
            rewrite_type(item)
    elif cls is _CallableArgument:
        rewrite_type(cast(CallableArgument, t).typ)


def _rewrite_annotation(typ: Type | None, unanalyzed: Type | None) -> None:
    """A signature's or an assignment's type and its unanalysed copy (a copy that shares its
    parts with the type is rewritten with it)."""
    rewrite_type(typ)
    if not _shares_parts(unanalyzed, typ):
        rewrite_type(unanalyzed)


def _shares_parts(a: Type | None, b: Type | None) -> bool:
    """Whether rewrite_type(a) would only revisit what rewrite_type(b) rewrote: the same
    object, or (a parsed signature's unanalyzed copy) the same argument list and return."""
    if a is b:
        return True
    if type(a) is not _CallableType or type(b) is not _CallableType:
        return False
    ca, cb = cast(CallableType, a), cast(CallableType, b)
    return (ca.ret_type is cb.ret_type and len(ca.arg_types) == len(cb.arg_types)
            and all(x is y for x, y in zip(ca.arg_types, cb.arg_types)))


def _raw_axis(a: Type) -> Type:
    cls = type(a)
    if cls is _UnboundType:
        u = cast(UnboundType, a)
        raw = u.original_str_expr
        if raw is not None and not u.args:
            return _RawExpressionType(raw, "builtins.str", u.line, u.column)
    elif cls is _TypeList or cls is _TupleType:  # PS[("dp", "tp"), None]
        items = cast("TypeList | TupleType", a).items
        for i, item in enumerate(items):
            items[i] = _raw_axis(item)
    return a


# --- alias right-hand sides are expressions --------------------------------------------

_RAW_PREFIX: Final = "\x00spmd-axis:"  # not a valid expression: mypy keeps it as a raw literal


def _rewrite_index_expr(e: Expression) -> None:
    cls = type(e)
    if cls is _IndexExpr:
        ie = cast(IndexExpr, e)
        base = ie.base
        base_cls = type(base)
        name = cast("NameExpr | MemberExpr", base).name if base_cls is _NameExpr or base_cls is _MemberExpr else ""
        if name in MARKER_NAMES:
            _mark_strings(ie.index)
        _rewrite_index_expr(base)
        _rewrite_index_expr(ie.index)
    elif cls is _TupleExpr or cls is _ListExpr:
        for item in cast("TupleExpr | ListExpr", e).items:
            _rewrite_index_expr(item)


# the conditional expressions (``a if c else b``) the rewrite walk met in
# statements (_rewrite_call_args with ``reads``): a function with one that may read a tensor's
# value is flagged for rank_index.scan_values (_Walker._function); emptied per module
_TERNARY_TESTS: Final[list[ConditionalExpr]] = []


def _rewrite_call_args(e: Expression | None, reads: list[Expression] | None = None) -> None:
    """A type as an argument of a call anywhere in an expression (``y = spmd.declare(x,
    Tensor[PS[("dp", "tp"), None]])``, ``f(spmd.declare(x, Tensor[...]))``, ``[spmd.declare(..)]``,
    ``lambda t: spmd.declare(t, ...)``) is a type application to mypy: the same rewrite as an
    alias's right-hand side.  Only expression kinds that can hold a call are entered; names,
    literals and the like end the walk at once.  Dispatch is by exact class (the classes bound
    above).

    ``reads``: where the walk also collects the operands whose truth value the expression
    reads outside a statement's condition (section 3): a conditional expression's condition
    (``a if p else b``), a comprehension's ``if p``, the left operand of ``and`` / ``or``
    (``x = p or q``) and the operand of ``not`` (through ``not`` / ``and`` / ``or``, as
    :func:`truth_operands` reads a condition)."""
    cls = type(e)
    if cls is _NameExpr or cls is _IntExpr or cls is _StrExpr or cls is _FloatExpr or e is None:
        return
    if cls is _CallExpr:
        call = cast(CallExpr, e)
        for a in call.args:
            if type(a) is _IndexExpr:
                _rewrite_index_expr(a)
            _rewrite_call_args(a, reads)
        _rewrite_call_args(call.callee, reads)
    elif cls is _MemberExpr:  # spmd.declare(x, T).float()
        _rewrite_call_args(cast(MemberExpr, e).expr, reads)
    elif cls is _OpExpr:
        op = cast(OpExpr, e)
        if reads is not None and (op.op == "and" or op.op == "or"):
            reads.extend(truth_operands(op.left))
        _rewrite_call_args(op.left, reads)
        _rewrite_call_args(op.right, reads)
    elif cls is _IndexExpr:
        ie = cast(IndexExpr, e)
        _rewrite_call_args(ie.base, reads)
        _rewrite_call_args(ie.index, reads)
    elif cls is _TupleExpr or cls is _ListExpr or cls is _SetExpr:
        for item in cast("TupleExpr | ListExpr | SetExpr", e).items:
            _rewrite_call_args(item, reads)
    elif cls is _UnaryExpr or cls is _StarExpr:
        inner = cast("UnaryExpr | StarExpr", e).expr
        if reads is not None and cls is _UnaryExpr and cast(UnaryExpr, e).op == "not":
            reads.extend(truth_operands(inner))
        _rewrite_call_args(inner, reads)
    elif cls is _ComparisonExpr:
        for operand in cast(ComparisonExpr, e).operands:
            _rewrite_call_args(operand, reads)
    elif cls is _ConditionalExpr:
        ce = cast(ConditionalExpr, e)
        if reads is not None:
            reads.extend(truth_operands(ce.cond))
            _TERNARY_TESTS.append(ce)
        _rewrite_call_args(ce.cond, reads)
        _rewrite_call_args(ce.if_expr, reads)
        _rewrite_call_args(ce.else_expr, reads)
    elif cls is _DictExpr:
        for k, v in cast(DictExpr, e).items:
            _rewrite_call_args(k, reads)
            _rewrite_call_args(v, reads)
    elif cls is _AssignmentExpr:
        _rewrite_call_args(cast(AssignmentExpr, e).value, reads)
    elif cls is _YieldExpr or cls is _YieldFromExpr or cls is _AwaitExpr:
        _rewrite_call_args(cast("YieldExpr | YieldFromExpr | AwaitExpr", e).expr, reads)
    elif cls is _LambdaExpr:
        _rewrite_call_args(cast(LambdaExpr, e).expr(), reads)
    elif cls is _ListComprehension or cls is _SetComprehension:
        _rewrite_call_args(cast("ListComprehension | SetComprehension", e).generator, reads)
    elif cls is _GeneratorExpr:
        g = cast(GeneratorExpr, e)
        _rewrite_call_args(g.left_expr, reads)
        _rewrite_clauses(g.sequences, g.condlists, reads)
    elif cls is _DictionaryComprehension:
        d = cast(DictionaryComprehension, e)
        _rewrite_call_args(d.key, reads)
        _rewrite_call_args(d.value, reads)
        _rewrite_clauses(d.sequences, d.condlists, reads)


def _rewrite_clauses(sequences: list[Expression], condlists: list[list[Expression]],
                     reads: list[Expression] | None) -> None:
    """A comprehension's ``for ... in <seq>`` and ``if <cond>`` clauses (a generator's, a
    dict comprehension's): each walked, each condition's truth operands read."""
    for seq in sequences:
        _rewrite_call_args(seq, reads)
    for conds in condlists:
        for c in conds:
            if reads is not None:
                reads.extend(truth_operands(c))
            _rewrite_call_args(c, reads)


def _mark_strings(e: Expression, nested: bool = False) -> None:
    if isinstance(e, StrExpr):
        if not e.value.startswith(_RAW_PREFIX):
            e.value = _RAW_PREFIX + e.value
    elif isinstance(e, (TupleExpr, ListExpr)):
        for i, item in enumerate(e.items):
            _mark_strings(item, True)
            if isinstance(item, TupleExpr) and not nested:
                # PS[("dp", "tp"), None]: mypy reads an alias's right-hand side as a type and
                # has no type for a tuple inside [...] ("Type expected within [...]"); a list
                # is a TypeList to it, which the annotation hook reads as the same entry
                lst = ListExpr(item.items)
                lst.set_line(item)
                e.items[i] = lst


def axis_from_raw(value: object) -> object:
    if isinstance(value, str) and value.startswith(_RAW_PREFIX):
        return value[len(_RAW_PREFIX):]
    return value


# --- 2. gradient-free regions -------------------------------------------------------------


def _grad_mode(e: Expression) -> bool | None:
    """What a context manager or decorator does to gradients: False (``torch.no_grad()``,
    ``inference_mode()``, ``set_grad_enabled(False)``), True (``torch.enable_grad()``,
    ``set_grad_enabled(True)``), None (anything else, or a mode not written literally)."""
    callee = e.callee if isinstance(e, CallExpr) else e
    if not isinstance(callee, (NameExpr, MemberExpr)):
        return None
    if callee.name in NO_GRAD_CALLS:
        return False
    if callee.name == "enable_grad":
        return True
    if callee.name == "set_grad_enabled" and isinstance(e, CallExpr) and len(e.args) == 1:
        arg = e.args[0]
        if isinstance(arg, NameExpr) and arg.name in ("True", "False"):
            return arg.name == "True"
    return None


# The methods of a custom autograd Function that implement its forward and backward.
AUTOGRAD_FUNCTION_METHODS: Final = frozenset({"forward", "backward", "jvp", "vjp"})
# Those that run without grad: forward always, backward (vjp, its other name) unless the caller
# asks for create_graph=True (the check mode reads torch.is_grad_enabled() there; the static
# checker takes the usual case, as the duality rule does: engine.duality)
GRADIENT_FREE_METHODS: Final = frozenset({"forward", "backward", "vjp"})


def is_no_grad_function(d: Decorator) -> bool:
    """``@torch.no_grad()`` / ``@torch.inference_mode()`` (the innermost grad-mode decorator
    decides): the function runs with gradients off, its result carries no gradient."""
    mode = None
    for e in d.original_decorators:
        m = _grad_mode(e)
        if m is not None:
            mode = m
    return mode is False


def no_grad_functions(file: MypyFile) -> frozenset[str]:
    """The names of the file's module-level functions that run with gradients off."""
    return frozenset(cast(Decorator, d).func.name for d in file.defs
                     if type(d) is _Decorator and is_no_grad_function(cast(Decorator, d)))


def _is_autograd_function(c: ClassDef) -> bool:
    for b in c.base_type_exprs:
        if isinstance(b, (NameExpr, MemberExpr)) and b.name == "Function":
            return True
    return False


# A condition trigger's entry (section 3): the trigger call, the operands whose truth value
# the condition reads, for a ``match`` case (MatchCase) the statement and the case's pattern,
# and for the body of an ``if c: break`` (``return``, ``raise``) in a loop its condition ``c``
# (typed by then: the collectives before it in the loop wait for it, spmd-divergent-collective)
MatchCase = tuple[MatchStmt, Pattern]
ConditionEntry = tuple[CallExpr, tuple[Expression, ...], Optional[MatchCase], Optional[Expression]]


@dataclass
class GradRegions:
    """Where operands cannot carry a gradient, per file."""

    ranges: list[tuple[int, int]] = field(default_factory=list)  # no_grad blocks, Function.forward
    # enable_grad / set_grad_enabled(True) blocks and functions: gradients flow again inside
    # an enclosing no_grad region (the innermost region decides)
    enabled: list[tuple[int, int]] = field(default_factory=list)
    detached_names: list[tuple[int, int, str]] = field(default_factory=list)  # (function lines, name)
    # the locals only ever assigned integer or bool values (is_integer_valued), as detached_names
    integer_names: list[tuple[int, int, str]] = field(default_factory=list)
    # what integer_names is read from, per function, until the first question: its
    # assignments as the integer reading takes them, and the module-level ints it does not
    # assign (:func:`_integer_names` runs only once an error asks: the plugin reads integer
    # values only to relax a reported R/I mismatch)
    integer_pending: list[_IntRecord] = field(default_factory=list)
    # the same records, kept for the 0-d reading (:func:`is_zero_dim`), and what it found
    # per record, read once an elementwise op asks (RegionIndex.zero_dim)
    value_records: list[_IntRecord] = field(default_factory=list)
    zero_dim_names: dict[int, frozenset[str]] = field(default_factory=dict)
    # the module-level names only ever assigned a number (``VOCAB = 32``, ``EPS: Final = 1e-6``):
    # gradient-free as the literal is (the int ones integer too), in a function that does not
    # assign the name itself (``shadowed``: (function lines, name) of those that do)
    module_numbers: frozenset[str] = frozenset()
    module_ints: frozenset[str] = frozenset()
    shadowed: list[tuple[int, int, str]] = field(default_factory=list)
    # the module-level functions that run with gradients off (``@torch.no_grad()``), by name
    no_grad_functions: frozenset[str] = frozenset()
    # forward/backward (jvp, vjp) of torch.autograd.Function subclasses: where users implement
    # their own collectives with raw torch.distributed calls (no spmd-raw-collective there)
    function_bodies: list[tuple[int, int]] = field(default_factory=list)
    # ``p.grad += g``, ``x.data -= d``: (line, column) of the attribute, which mypy reads as an
    # assignment target there (the attribute hooks give targets no SPMD type) and which is an
    # operand of the in-place op all the same
    augmented_attributes: set[tuple[int, int]] = field(default_factory=set)
    # the condition triggers (section 3), by the trigger call's id: (the call, the operands
    # whose truth value the condition reads, and for a ``match`` case the statement and the
    # case's pattern, whose value patterns compare the subject)
    conditions: dict[int, ConditionEntry] = field(default_factory=dict)
    # the ``x.grad = value`` statements (section 3: a trigger after each), by the trigger
    # call's id: checked once mypy has typed the value (``calls.check_grad_assignment``)
    grad_sets: dict[int, AssignmentStmt] = field(default_factory=dict)
    # the values of the file's return statements (nested functions' too), by id: a hook asks
    # whether its call is one (boundaries.BoundaryChecker.settled_return) before anything else
    returned: dict[int, Expression] = field(default_factory=dict)
    # the ops whose argument is computed from a rank query (rank_index), by the node's id:
    # (the node, the axes its result varies on)
    rank_exprs: dict[int, tuple[Expression, frozenset, Expression]] = field(default_factory=dict)
    # the calls named as collectives under a rank-dependent condition (rank_index), by the
    # call's id: (the call, the conditions, the name its statement binds the result to)
    divergent: dict[int, Divergent] = field(default_factory=dict)


# Attributes whose reads the plugin types (attribute hooks): as ``x.attr += y`` targets they
# are read too
AUGMENTED_ATTRIBUTES: Final = frozenset({"grad", "data"})


class _Walker:
    """A plain walk over statements (mypy's compiled visitors cannot be subclassed).

    ``rewrite``: rewrite axis strings where mypy's type-variable pass looks them up (function
    signatures, and module- or class-level assignments, where aliases live; annotations of
    locals and ``cast()`` are not looked up).  Always: find the gradient-free regions.
    """

    def __init__(self, *, rewrite: bool, no_grad_functions: frozenset[str] = frozenset(),
                 module_numbers: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
                 ) -> None:
        self.rewrite = rewrite
        self.no_grad: list[tuple[int, int]] = []
        self.detached: list[tuple[int, int, str]] = []
        self.integers: list[_IntRecord] = []  # read lazily: GradRegions.integer_pending
        self.shadowed: list[tuple[int, int, str]] = []
        # (the module-level number names, the int ones among them): module_numbers
        self.module_numbers, self.module_ints = module_numbers
        # per enclosing function, its locals' values as the integer reading takes them (the
        # value itself, also where gradients are off: is_integer_valued)
        self._int_assigns: list[dict[str, list[Expression]]] = []
        self.enabled: list[tuple[int, int]] = []
        self.function_bodies: list[tuple[int, int]] = []
        self.augmented: set[tuple[int, int]] = set()
        self._assigns: list[dict[str, list[Expression]]] = []
        self._depth = 0  # function nesting
        # the grad modes of the enclosing with-blocks in this function (innermost last), and
        # the mode a decorator (or Function.forward) gives the body of the next function:
        # a local assigned where gradients are off holds a value without one
        self._modes: list[bool] = []
        self._body_mode: bool | None = None
        # Definitions per function or class-body scope, as mypy's renamer counts them
        # (parameters, assignment / for / with targets, except-as names): a scope that
        # defines a name twice may be renamed (section 2); ``rebinds`` says whether the
        # walk has met one (or a ``match``, whose captures it does not read) since reset.
        self._defined: list[set[str]] = []
        self.rebinds = False
        # since reset too: the names defined twice in a scope, and those for loops bind (a
        # loop variable reused elsewhere: loop_names may give the loop its own)
        self.rebound: set[str] = set()
        self.loop_targets: set[str] = set()
        # whether the class body being walked defines a name twice in its own scope (not in
        # its methods'), and the classes whose body does (by id): the others are renamed
        # method by method (prepare_file)
        self._class_rebinds = False
        self.rebinding_classes: set[int] = set()
        # the file's module-level functions that run with gradients off, by name: a local
        # assigned one's result holds no gradient
        self.no_grad_functions = no_grad_functions
        # ``match`` statements with a class pattern, each with the statement list holding it
        # (rewrite walk only): each gets a narrowing trigger before it (see isinstance_trigger)
        self.class_matches: list[tuple[list[Statement], MatchStmt]] = []
        # conditions read for their truth value (section 3; rewrite walk, function bodies):
        # (the statement list the trigger goes in, the statement it follows or None for the
        # list's start, the operands read, a match case whose value patterns it checks)
        self.conditions: list[tuple[list[Statement], Statement | None, list[Expression],
                                    MatchCase | None, bool, Expression | None]] = []
        # the ids of the ``x.grad = value`` statements among the conditions' ``after``
        self.grad_sets: set[int] = set()
        # whether the module's top level gets triggers too (not a stub's); per scope of
        # _defined, whether it is a class body (which gets none)
        self.module_level = True
        self._class_bodies: list[bool] = []
        # the truth values the statement being walked reads outside a condition (section 3;
        # rewrite walk): _rewrite_call_args collects them
        self.reads: list[Expression] = []
        # the module's own functions returning a rank query (rank_index), and per enclosing
        # function whether it assigns one; the functions that do
        self.rank_helpers: dict[str, frozenset] = {}
        self._rank_flags: list[bool] = []
        self.rank_functions: list[FuncDef] = []
        # the functions with a condition that may read a tensor's value (rank_index
        # may_read_value: the collectives under it, rank_index.scan_values), a flag per
        # function being walked, its parameters (a flag such as ``training`` is no value),
        # and how many loops enclose the statement being walked
        self.value_functions: list[FuncDef] = []
        self._value_flags: list[bool] = []
        self._params: list[list[Argument]] = []
        self._loops = 0
        # (rewrite walk) the records of each function that defines no name twice, nested
        # ones included (what it added to detached, integers, shadowed), by the FuncDef's id;
        # and (the walk again after the renaming, prepare_file) those records to take for
        # such a function instead of walking it: the renamer changed nothing in it
        self.kept: dict[int, tuple[FuncDef, list[tuple[int, int, str]], list[_IntRecord],
                                   list[tuple[int, int, str]]]] = {}
        self.reuse: dict[int, tuple[FuncDef, list[tuple[int, int, str]], list[_IntRecord],
                                    list[tuple[int, int, str]]]] | None = None
        # the values of the file's return statements, by id (RegionIndex.returned)
        self.returned: dict[int, Expression] = {}

    def regions(self, detached: list[tuple[int, int, str]],
                integers: list[_IntRecord] | None = None,
                shadowed: list[tuple[int, int, str]] | None = None) -> GradRegions:
        """What the walk found, with the gradient-free locals ``detached`` (the integer ones
        ``integers``, the functions' locals named as a module-level number ``shadowed``)."""
        return GradRegions(ranges=self.no_grad, enabled=self.enabled, detached_names=detached,
                           integer_pending=self.integers if integers is None else integers,
                           value_records=self.integers if integers is None else integers,
                           module_numbers=self.module_numbers, module_ints=self.module_ints,
                           shadowed=self.shadowed if shadowed is None else shadowed,
                           function_bodies=self.function_bodies,
                           augmented_attributes=self.augmented,
                           no_grad_functions=self.no_grad_functions, returned=self.returned)

    def _bind(self, target: Expression, value: Expression, which: int = _BOTH) -> None:
        """Each local named in ``target`` (inside a function) is assigned ``value``: what
        :func:`_gradient_free_names` (``which``: _GRAD) and :func:`_integer_names` (_INT)
        read (``_OPAQUE``: never gradient-free, never integer)."""
        if self._assigns:
            names = ([cast(NameExpr, target).name] if type(target) is _NameExpr
                     else _names_in(target))
            if which & _GRAD:
                assigns = self._assigns[-1]
                for n in names:
                    _append(assigns, n, value)
            if which & _INT:
                assigns = self._int_assigns[-1]
                for n in names:
                    _append(assigns, n, value)

    def _bind_items(self, target: Expression, value: Expression, which: int = _BOTH) -> None:
        """``target = value``: a tuple target takes a tuple display item by item (``c, s =
        t.detach(), u``), and any other value whole: every item of a gradient-free value is
        (``cos, sin = rope_table(n)`` of an ``@torch.no_grad()`` function, or assigned
        where gradients are off).  A starred item never is."""
        cls = type(target)
        if cls is _NameExpr:
            self._bind(target, value, which)
            return
        if cls is not _TupleExpr and cls is not _ListExpr:
            self._bind(target, _OPAQUE, which)
            return
        items = cast("TupleExpr | ListExpr", target).items
        if len(items) == 2 and _indices_item(value):  # ``vals, idx = logits.max(dim=-1)``
            self._bind_items(items[0], _OPAQUE, which)
            self._bind_items(items[1], _NO_GRADIENT, which)
            return
        vcls = type(value)
        if vcls is _TupleExpr or vcls is _ListExpr:
            values = cast("TupleExpr | ListExpr", value).items
            if len(values) == len(items) and not any(type(v) is _StarExpr for v in values):
                for t, v in zip(items, values):
                    self._bind_items(t, v, which)
                return
            value = _OPAQUE
        for t in items:
            self._bind_items(t, _OPAQUE if type(t) is _StarExpr else value, which)

    def _define(self, target: Expression | None) -> None:
        """``target`` defines its names in the current function or class-body scope."""
        if not self._defined or target is None:
            return
        cls = type(target)
        if cls is _NameExpr:
            scope = self._defined[-1]
            name = cast(NameExpr, target).name
            if name in scope:
                self.rebinds = True
                self.rebound.add(name)
                if self._class_bodies[-1]:
                    self._class_rebinds = True
            else:
                scope.add(name)
        elif cls is _TupleExpr or cls is _ListExpr:
            for item in cast("TupleExpr | ListExpr", target).items:
                self._define(item)
        elif cls is _StarExpr:
            self._define(cast(StarExpr, target).expr)

    def _mode_region(self, managers: list[Expression], first: int, last: int) -> bool | None:
        """``with a(), b():`` and ``@a @b def``: the last one is the innermost, it decides."""
        mode = None
        for e in managers:
            m = _grad_mode(e)
            if m is not None:
                mode = m
        if mode is not None:
            (self.enabled if mode else self.no_grad).append((first, last))
        return mode

    def block(self, stmts: list[Statement] | None, in_function_class: bool = False) -> None:
        for st in stmts or ():
            self.statement_in(stmts, st, in_function_class)

    def statement_in(self, stmts: list[Statement] | None, st: Statement,
                     in_function_class: bool = False) -> None:
        """Walk statement ``st`` of the list ``stmts`` (a body, or the module's top level),
        recording the truth values it reads for a trigger after it (section 3)."""
        self.reads = []
        self.stmt(st, in_function_class)
        cls = type(st)
        if cls is _MatchStmt:
            self.match_in(stmts, cast(MatchStmt, st))
        elif stmts is None:
            pass
        elif cls is _AssertStmt:
            self._condition(stmts, st, cast(AssertStmt, st).expr, extra=self.reads)
        elif cls is _AssignmentStmt and _sets_grad(cast(AssignmentStmt, st)):
            # ``p.grad = value``: the value against p's gradient type once mypy typed it
            self._condition(stmts, st, None, extra=self.reads, grad_set=True)
        elif self.reads and (cls is _AssignmentStmt or cls is _ExpressionStmt
                             or cls is _OperatorAssignmentStmt):
            # read when the statement runs: checked once it has
            self._condition(stmts, st, None, extra=self.reads)
        elif self.reads and (cls is _ReturnStmt or (cls is _RaiseStmt and not _not_implemented(
                cast(RaiseStmt, st)))):
            # a trigger after it would be unreached: the statement is wrapped as ``try:
            # return ... finally: <trigger>`` (mypy checks the finally block after it)
            self._condition(stmts, st, None, extra=self.reads, wrap=True)

    def _condition(self, stmts: list[Statement], after: Statement | None, e: Expression | None,
                   case: MatchCase | None = None, extra: list[Expression] | None = None,
                   wrap: bool = False, grad_set: bool = False,
                   exit_of: Expression | None = None) -> None:
        """Record condition ``e`` (a ``match`` case's guard, or None) for a trigger in
        ``stmts`` (section 3), where the trigger calls the builtin: in a function body or at
        a module's top level (not a stub's), not directly in a class body (a NamedTuple's or
        TypedDict's takes fields only), ``globals`` not bound in a scope here.  ``case``: a
        ``match`` case whose pattern compares the subject with a value (``case 0:`` is
        ``subject == 0``).  ``extra``: the truth values read inside the expressions
        evaluated before (``a if p else b``).  ``wrap``: ``after`` (a return or raise) is
        wrapped in ``try: ... finally:`` with the trigger in the finally block.  ``exit_of``:
        the condition of an ``if`` in a loop whose body ``stmts`` leaves it (a trigger even
        where ``e`` reads no truth value: ``if r.abs().max() < tol: break``)."""
        if not self.rewrite or (not stmts and after is None) \
                or (not self._depth and not self.module_level) \
                or (self._class_bodies and self._class_bodies[-1]) \
                or any(TRIGGER_NAME in scope for scope in self._defined):
            return
        operands = truth_operands(e) if e is not None else []
        for x in extra or ():
            if not any(x is o for o in operands):
                operands.append(x)
        if case is not None and not has_value_pattern(case[1]):
            case = None
        if grad_set and after is not None:
            self.grad_sets.add(id(after))
        if operands or case is not None or grad_set or exit_of is not None:
            self.conditions.append((stmts, after, operands, case, wrap, exit_of))

    def match_in(self, stmts: list[Statement] | None, st: MatchStmt) -> None:
        """Record a ``match`` with a class pattern for its trigger, unless ``isinstance`` is
        bound in an enclosing function or class body here (the trigger would call that)."""
        if self.rewrite and stmts is not None and _has_class_pattern(st) \
                and not any("isinstance" in scope for scope in self._defined):
            self.class_matches.append((stmts, st))

    def stmt(self, st: Statement, in_function_class: bool = False) -> None:
        cls = type(st)  # the common statements first (see the classes bound above)
        if cls is _AssignmentStmt:
            self._assignment(cast(AssignmentStmt, st))
        elif cls is _ExpressionStmt or cls is _ReturnStmt:
            if cls is _ReturnStmt:
                returned = cast(ReturnStmt, st).expr
                if returned is not None:
                    self.returned[id(returned)] = returned
            if self._rank_flags and not self._rank_flags[-1]:  # f(a if dist.get_rank() else b)
                self._rank_condition(cast("ExpressionStmt | ReturnStmt", st).expr)
            if self.rewrite:
                _rewrite_call_args(cast("ExpressionStmt | ReturnStmt", st).expr, self.reads)
        elif cls is _AssertStmt:
            if self.rewrite:
                _rewrite_call_args(cast(AssertStmt, st).expr, self.reads)
        elif cls is _RaiseStmt:
            if self.rewrite:
                raise_stmt = cast(RaiseStmt, st)
                _rewrite_call_args(raise_stmt.expr, self.reads)
                _rewrite_call_args(raise_stmt.from_expr, self.reads)
        elif cls is _FuncDef:
            self._func_def(cast(FuncDef, st), in_function_class)
        elif cls is _Decorator:
            d = cast(Decorator, st)
            self._body_mode = self._mode_region(d.original_decorators, d.func.line,
                                                d.func.end_line or d.func.line)
            self._func_def(d.func, in_function_class)
        elif cls is _IfStmt:
            ifs = cast(IfStmt, st)
            reads: list[list[Expression]] = [[] for _ in ifs.expr]
            if self.rewrite:
                for e, r in zip(ifs.expr, reads):
                    _rewrite_call_args(e, r)
            for e in ifs.expr:
                self._rank_condition(e)
            for e, b, r in zip(ifs.expr, ifs.body, reads):
                self.block(b.body)
                value = self._value_condition(e)
                self._condition(b.body, None, e, extra=r, exit_of=e if value and self._loops
                                and b.body and type(b.body[-1]) in _LOOP_EXITS else None)
            if ifs.else_body is not None:
                self.block(ifs.else_body.body)
        elif cls is _ForStmt or cls is _WhileStmt:
            loop = cast("ForStmt | WhileStmt", st)
            loop_reads: list[Expression] = []
            if self.rewrite:
                _rewrite_call_args(loop.expr, loop_reads)
            if cls is _WhileStmt:
                self._rank_condition(loop.expr)
                self._value_condition(loop.expr)
            if cls is _ForStmt:  # a loop variable: never "only detached"
                index = cast(ForStmt, st).index
                self._bind(index, _OPAQUE)
                self._define(index)
                self.loop_targets.update(_names_in(index))
            self._loops += 1
            self.block(loop.body.body)
            self._loops -= 1
            self._condition(loop.body.body, None, loop.expr if cls is _WhileStmt else None,
                            extra=loop_reads)
            if loop.else_body is not None:
                self.block(loop.else_body.body)
        elif cls is _WithStmt:
            self._with(cast(WithStmt, st))
        elif cls is _OperatorAssignmentStmt:
            op = cast(OperatorAssignmentStmt, st)
            lvalue = op.lvalue
            if type(lvalue) is _NameExpr:  # d += g: gradient-free only if g is too
                self._bind(lvalue, op.rvalue, _GRAD)
                # n //= 2 keeps an integer, n /= 2 does not
                self._bind(lvalue, _OPAQUE if op.op == "/" else op.rvalue, _INT)
            elif type(lvalue) is _MemberExpr and cast(MemberExpr, lvalue).name in AUGMENTED_ATTRIBUTES:
                self.augmented.add((lvalue.line, lvalue.column))
            if self.rewrite:
                _rewrite_call_args(op.rvalue, self.reads)
        elif cls is _ClassDef:
            c = cast(ClassDef, st)
            self._defined.append(set())
            self._class_bodies.append(True)
            outer_class_rebinds, self._class_rebinds = self._class_rebinds, False
            self.block(c.defs.body, _is_autograd_function(c))
            if self._class_rebinds:
                self.rebinding_classes.add(id(c))
            self._class_rebinds = outer_class_rebinds
            self._class_bodies.pop()
            self._defined.pop()
        elif cls is _OverloadedFuncDef:
            for item in cast(OverloadedFuncDef, st).items:
                self.stmt(item, in_function_class)
        elif cls is _Block:
            self.block(cast(Block, st).body)
        elif cls is _TryStmt:
            t = cast(TryStmt, st)
            self.block(t.body.body)
            for var in t.vars:  # ``except E as e``
                self._define(var)
            for h in t.handlers:
                self.block(h.body)
            for extra in (t.else_body, t.finally_body):
                if extra is not None:
                    self.block(extra.body)
        elif cls is _MatchStmt:
            self.rebinds = True  # its capture patterns define names this walk does not read
            if self._class_bodies and self._class_bodies[-1]:
                self._class_rebinds = True
            m = cast(MatchStmt, st)
            self._rank_condition(m.subject)
            for g in m.guards:
                self._rank_condition(g)
            subject_reads: list[Expression] = []
            if self.rewrite:
                _rewrite_call_args(m.subject, subject_reads)
            for p, g, b in zip(m.patterns, m.guards, m.bodies):
                for name in pattern_captures(p):  # a capture holds the subject's value
                    self._bind(name, _OPAQUE)
                case_reads = list(subject_reads)
                if self.rewrite and g is not None:
                    _rewrite_call_args(g, case_reads)
                self.block(b.body)
                # the guard's truth value, and the values the pattern compares the subject
                # with, read when the case is tried (checked where the body starts)
                self._condition(b.body, None, g, (m, p), case_reads)

    def _assignment(self, st: AssignmentStmt) -> None:
        # a value computed where gradients are off has none (``with torch.no_grad(): c =
        # cos[pos]``, the body of an ``@torch.no_grad()`` function), wherever it is used
        value = (_NO_GRADIENT if self._modes and not self._modes[-1]
                 and not _asks_for_gradient(st.rvalue) and not _saved_tensors(st.rvalue)
                 else st.rvalue)
        if self._assigns:
            for lv in st.lvalues:
                if value is st.rvalue:  # both readings take the value (one walk of the target)
                    self._bind_items(lv, value, _BOTH)
                else:
                    self._bind_items(lv, value, _GRAD)
                    self._bind_items(lv, st.rvalue, _INT)
        for lv in st.lvalues:
            self._define(lv)
        if (self.rewrite and self._rank_flags and not self._rank_flags[-1]  # (read of the rewrite walk)
                and has_query(st.rvalue, self.rank_helpers)):
            self._rank_flags[-1] = True
        if self.rewrite:
            if not self._depth:
                _rewrite_annotation(st.type, st.unanalyzed_type)
                _rewrite_index_expr(st.rvalue)
            _rewrite_call_args(st.rvalue, self.reads)

    def _rank_condition(self, e: Expression | None) -> None:
        """A condition calling a rank query (``if dist.get_rank() == 0:``) makes the function
        one the rank scan reads (rank_index: its collectives under such a condition)."""
        if self._rank_flags and not self._rank_flags[-1] and e is not None \
                and has_query(e, self.rank_helpers):
            self._rank_flags[-1] = True

    def _value_condition(self, e: Expression) -> bool:
        """Whether condition ``e`` may read a tensor's value (syntax only: rank_index
        may_read_value); such a condition flags the function for rank_index.scan_values."""
        if not self._value_flags or not self.rewrite:
            return False
        if not may_read_value(e, self._params[-1]):
            return False
        self._value_flags[-1] = True
        return True

    def _func_def(self, st: FuncDef, in_function_class: bool) -> None:
        reuse = self.reuse
        if reuse is not None:
            kept = reuse.get(id(st))
            if kept is not None and kept[0] is st:
                self._body_mode = None
                self.detached.extend(kept[1])
                self.integers.extend(kept[2])
                self.shadowed.extend(kept[3])
                return
        starts = (len(self.detached), len(self.integers), len(self.shadowed))
        outer_rebinds = self.rebinds
        self.rebinds = False
        self._function(st, in_function_class)
        if self.rewrite and not self.rebinds:
            self.kept[id(st)] = (st, self.detached[starts[0]:], self.integers[starts[1]:],
                                 self.shadowed[starts[2]:])
        self.rebinds = self.rebinds or outer_rebinds

    def _function(self, st: FuncDef, in_function_class: bool) -> None:
        if self.rewrite:
            _rewrite_annotation(st.type, st.unanalyzed_type)
        body_mode = self._body_mode
        self._body_mode = None
        line = st.line
        lines = (line, st.end_line or line)
        name = st.name
        if in_function_class and name in GRADIENT_FREE_METHODS:
            self.no_grad.append(lines)
            body_mode = False
        if in_function_class and name in AUTOGRAD_FUNCTION_METHODS:
            self.function_bodies.append(lines)
        if body_mode is None and self._modes and not self._modes[-1]:
            # a function defined where gradients are off runs wherever it is called,
            # maybe with them on: its body is not part of the enclosing region
            self.enabled.append(lines)
        if name in _TRIGGER_NAMES and self._defined:  # a local def binds it (see match_in)
            self._defined[-1].add(name)
        arguments = st.arguments
        assigns: dict[str, list[Expression]] = {}
        int_assigns: dict[str, list[Expression]] = {}
        defined: set[str] = set()
        for arg in arguments:
            arg_name = arg.variable.name
            # a parameter holds the caller's value: never "only detached", unless declared a
            # number (``vocab_start: int``: ``argmax + vocab_start`` carries no gradient)
            assigns[arg_name] = [_NO_GRADIENT if _is_number_annotation(arg.type_annotation)
                                 else _OPAQUE]
            # (the integer reading's: an int one an integer, a float one a number, both of
            # which the 0-d reading takes as 0-d; a ``*args: int`` holds integers in a tuple:
            # not 0-d)
            int_assigns[arg_name] = [_parameter_value(arg)]
            defined.add(arg_name)
        self._assigns.append(assigns)
        self._int_assigns.append(int_assigns)
        self._defined.append(defined)
        self._class_bodies.append(False)
        self._depth += 1
        outer_modes, self._modes = self._modes, ([] if body_mode is None else [body_mode])
        self._rank_flags.append(False)
        self._value_flags.append(False)
        self._params.append(arguments)
        outer_loops, self._loops = self._loops, 0
        ternaries = len(_TERNARY_TESTS)
        body = st.body.body
        self.block(body)
        self._loops = outer_loops
        self._params.pop()
        if self._value_flags.pop() or (len(_TERNARY_TESTS) > ternaries and any(
                ternary_may_diverge(t, arguments) for t in _TERNARY_TESTS[ternaries:])):
            self.value_functions.append(st)
        if self._rank_flags.pop():
            self.rank_functions.append(st)
        self._modes = outer_modes
        self._depth -= 1
        self._class_bodies.pop()
        self._defined.pop()
        self._assigns.pop()  # (assigns and int_assigns: the dicts the body's walk filled)
        self._int_assigns.pop()
        # the bindings the walk does not read (a walrus, a comprehension target, a nonlocal
        # rebinding, ...): never gradient-free, never integer, never a module-level number
        # (a walrus of the function itself is assigned its value)
        hidden: set[str] = set()
        walrus: list[tuple[str, Expression]] = []
        _bindings_in_stmts(body, hidden, False, walrus)
        for n in hidden:
            _append(assigns, n, _OPAQUE)
            _append(int_assigns, n, _OPAQUE)
        for n, value in walrus:
            _append(assigns, n, value)
            _append(int_assigns, n, value)
        # a module-level number the function does not assign is read as the literal
        numbers = {n for n in self.module_numbers if n not in assigns}
        ints = {n for n in self.module_ints if n not in assigns}
        shadowing = [n for n in self.module_numbers if n in assigns]  # (most: none)
        if shadowing:
            self.shadowed.extend((lines[0], lines[1], n) for n in sorted(shadowing))
        free = [n for n in _gradient_free_names(assigns, self.no_grad_functions, numbers)
                if n not in numbers]
        if free:
            for name in sorted(free):
                self.detached.append((lines[0], lines[1], name))
        self.integers.append((lines[0], lines[1], int_assigns, ints))

    def _with(self, st: WithStmt) -> None:
        with_reads: list[Expression] = []
        if self.rewrite:
            for e in st.expr:
                _rewrite_call_args(e, with_reads)
        mode = self._mode_region(st.expr, st.body.line, st.body.end_line or st.end_line or st.line)
        for target in st.target:  # ``as`` targets: never "only detached"
            if target is not None:
                self._bind(target, _OPAQUE)
                self._define(target)
        if mode is not None:
            self._modes.append(mode)
        self.block(st.body.body)
        if mode is not None:
            self._modes.pop()
        self._condition(st.body.body, None, None, extra=with_reads)


# What a local is bound to when assigned where gradients are off: a value
# :func:`is_gradient_free` takes as such (a literal number).
_NO_GRADIENT: Final = IntExpr(0)
# What a parameter declared a number is bound to in the integer reading (which the 0-d reading,
# :func:`is_zero_dim`, shares): an int one is an integer (and 0-d), a float one 0-d only
_INT_PARAMETER: Final = IntExpr(0)
_NUMBER_PARAMETER: Final = FloatExpr(0.0)
# What a local is bound to where its value is unknown to the walk (a parameter, a loop or
# ``with ... as`` variable, a tuple target's item): never gradient-free.
_OPAQUE: Final[Expression] = TupleExpr([])


# Collectives by name (spmd's, and torch.distributed's functional ones): the result carries a
# gradient only if the input does; all_reduce with op="max"/"min" never carries one.
_COLLECTIVE_NAMES: Final = frozenset(coll.OPS)
_NO_GRAD_REDUCE_OPS: Final = frozenset(coll.NO_GRAD_REDUCE_OPS)


def is_gradient_free(e: Expression | None, names: Container[str] = (),
                     no_grad_functions: Container[str] = ()) -> bool:
    """A value that carries no gradient, read from the source: ``x.detach()``, ``x.data`` and
    methods called on them (``x.detach().clone()``), a name in ``names`` (a local only ever
    assigned such values), a collective of one (``spmd.all_reduce(m, "tp", ...)`` with ``m``
    gradient-free), and an ``all_reduce(..., op="max")``, which has no gradient::

        lmax = logits.max(-1, keepdim=True)[0].detach()
        gmax = spmd.all_reduce(lmax, "tp", src=V, dst=I, op="max")   # gradient-free
        logits - gmax                # an I without a gradient: mixes with V

    ``no_grad_functions``: the names of the module's own ``@torch.no_grad()`` functions, whose
    results carry no gradient (an imported one is not known: mypy's cache keeps no
    decorators, so a warm run could not tell what a cold run saw)."""
    while True:
        cls = type(e)
        if cls is _NameExpr:
            return cast(NameExpr, e).name in names
        if cls is _MemberExpr:
            member = cast(MemberExpr, e)
            name = member.name
            if name == "data" or name == "indices":  # x.topk(k).indices
                return True
            # a frozen weight of the method's own module: "self.w" (frozen.py)
            owner = member.expr
            return type(owner) is _NameExpr and f"{cast(NameExpr, owner).name}.{name}" in names
        if cls is _IntExpr or cls is _FloatExpr or cls is _ComparisonExpr:  # d += 1.0; a bool tensor
            return True
        if cls is _OpExpr:  # ``am + vocab_start``: each operand gradient-free
            op = cast(OpExpr, e)
            if not is_gradient_free(op.left, names, no_grad_functions):
                return False
            e = op.right
            continue
        if cls is _UnaryExpr:
            e = cast(UnaryExpr, e).expr
            continue
        if cls is _IndexExpr:
            ie = cast(IndexExpr, e)
            if _is_indices_item(ie, names):  # x.topk(k)[1], x.max(-1)[1], mx[1]
                return True
            e = ie.base
            continue
        if cls is not _CallExpr:
            return False
        call = cast(CallExpr, e)
        callee = call.callee
        callee_cls = type(callee)
        if callee_cls is not _NameExpr and callee_cls is not _MemberExpr:
            return False
        name = cast("NameExpr | MemberExpr", callee).name
        if _asks_for_gradient(call):
            return False
        if name == "detach" and callee_cls is _MemberExpr:
            return True
        if name in GRADIENT_FREE_RESULTS:
            return not _weighted(call, name)
        if name in FACTORIES and name not in _SHARING_FACTORIES:
            # ``torch.full_like(am, 16)``: a new tensor, unless asked for a gradient
            return not any(n == "requires_grad" and not (type(a) is _NameExpr and cast(
                NameExpr, a).name == "False") for n, a in zip(call.arg_names, call.args))
        if name == "where" and len(call.args) == 3 and call.arg_names[1:] == [None, None]:
            # ``torch.where(cond, a, b)``: the condition never carries one
            if not is_gradient_free(call.args[1], names, no_grad_functions):
                return False
            e = call.args[2]
            continue
        if callee_cls is _NameExpr and name in no_grad_functions:
            return True
        if name in _COLLECTIVE_NAMES:
            for n, a in zip(call.arg_names, call.args):
                if n == "op" and type(a) is _StrExpr and cast(StrExpr, a).value in _NO_GRAD_REDUCE_OPS:
                    return True
            if not call.args or call.arg_names[0] is not None:
                return False
            e = call.args[0]
            continue
        if callee_cls is not _MemberExpr:
            return False
        if name not in _ONE_TENSOR_METHODS and not all(_is_literal(a) for a in call.args):
            return False  # d.mul(w), d.add(w): w may carry a gradient
        e = cast(MemberExpr, callee).expr


def _weighted(call: CallExpr, name: str) -> bool:
    """``torch.bincount(ids, weights=w)``, ``ids.bincount(w)``: an op of engine WEIGHTED_RESULTS
    given its weights, whose result is float and carries their gradient.  A receiver other
    than ``torch`` is the first operand, so the weights are one place earlier."""
    if name not in WEIGHTED_RESULTS:
        return False
    formal, position = WEIGHTED_RESULTS[name]
    callee = call.callee
    if type(callee) is _MemberExpr and not (type(cast(MemberExpr, callee).expr) is _NameExpr
                                            and cast(NameExpr, cast(MemberExpr, callee).expr).name == "torch"):
        position -= 1
    positional = [a for n, a in zip(call.arg_names, call.args) if n is None]
    if len(positional) > position or formal in call.arg_names:
        return True
    # ``**kwargs`` or ``*args`` may hold them
    return any(k != ARG_POS and n is None for n, k in zip(call.arg_names, call.arg_kinds))


def _asks_for_gradient(e: Expression) -> bool:
    """``x.detach().requires_grad_()`` (a literal False aside), ``nn.Parameter(t)``: a leaf
    that carries a gradient from here on, even made where gradients are off (a backward that
    recomputes under ``torch.enable_grad()``, activation checkpointing's pattern)."""
    if type(e) is not _CallExpr:
        return False
    call = cast(CallExpr, e)
    callee = call.callee
    if type(callee) is _MemberExpr and cast(MemberExpr, callee).name == "requires_grad_":
        return not (call.args and type(call.args[0]) is _NameExpr
                    and cast(NameExpr, call.args[0]).name == "False")
    if type(callee) in (_NameExpr, _MemberExpr) and cast(
            "NameExpr | MemberExpr", callee).name == "Parameter":
        return not any((n == "requires_grad" or (n is None and k == 1)) and type(a) is _NameExpr
                       and cast(NameExpr, a).name == "False"
                       for k, (n, a) in enumerate(zip(call.arg_names, call.args)))
    return False


def _saved_tensors(e: Expression) -> bool:
    """``ctx.saved_tensors`` (``[i]``): what forward saved, not computed where the backward
    turned gradients off: an input or activation that may carry a gradient (inside an
    ``enable_grad()`` block of the backward it does)."""
    while type(e) is _IndexExpr:
        e = cast(IndexExpr, e).base
    return type(e) is _MemberExpr and cast(MemberExpr, e).name in ("saved_tensors", "saved_variables")


# Factories that return their tensor argument itself (with its gradient)
_SHARING_FACTORIES: Final = frozenset({"as_tensor", "asarray"})


def _indices_item(value: Expression) -> bool:
    """``value`` returns (values, indices): ``x.topk(k)``, ``torch.sort(x)``, and ``max`` /
    ``min`` / ``median`` ... given a dim (without one they return a single tensor)."""
    if type(value) is not _CallExpr:
        return False
    call = cast(CallExpr, value)
    callee = call.callee
    if type(callee) is not _MemberExpr and type(callee) is not _NameExpr:
        return False
    name = cast("MemberExpr | NameExpr", callee).name
    if name not in WITH_INDICES:
        return False
    if name in ("topk", "sort", "kthvalue", "cummax", "cummin"):
        return True
    return any(n == "dim" or (n is None and (type(a) is _IntExpr or type(a) is _UnaryExpr))
               for n, a in zip(call.arg_names, call.args))


# Methods whose only tensor is their receiver (views, reductions, casts): their other arguments
# (dims, sizes, dtypes) never bring a gradient in, so ``d.view(b, s, -1)`` of a gradient-free ``d``
# is gradient-free.  Any other method is followed only with literal arguments (``d.add(w)`` is
# not, ``d.max(-1)`` is).
_ONE_TENSOR_METHODS: Final = frozenset(op for op, m in MOVES.items() if m[0] != KEEP and m[0] != ALONG) | (REDUCTIONS - {"max", "min"}) | frozenset("""view reshape expand repeat
contiguous clone float half double bfloat16 to type cpu cuda detach""".split())


def _is_indices_item(e: IndexExpr, names: Container[str] = ()) -> bool:
    """``x.topk(k)[1]``, ``torch.max(x, -1)[1]``: the indices of a (values, indices) pair, not
    ``torch.max(a, b)[1]`` (a row of the elementwise maximum); ``mx[1]`` of a local whose
    entry ``mx[1]`` is among the gradient-free ``names`` (``mx = torch.max(x, -1)``)."""
    index = e.index
    if type(index) is not _IntExpr or cast(IntExpr, index).value != 1:
        return False
    base = e.base
    if type(base) is _NameExpr:
        return cast(NameExpr, base).name + _INDICES_OF in names
    return _indices_item(base)


# A parameter annotated so holds a Python number: no gradient
_NUMBER_ANNOTATIONS: Final = frozenset({"int", "float", "bool", "builtins.int", "builtins.float",
                                 "builtins.bool"})


def _is_number_annotation(t: object) -> bool:
    return type(t) is _UnboundType and cast(UnboundType, t).name in _NUMBER_ANNOTATIONS


def _is_literal(e: Expression) -> bool:
    cls = type(e)
    if cls is _IntExpr or cls is _FloatExpr or cls is _StrExpr:
        return True
    if cls is _NameExpr:
        return cast(NameExpr, e).name in ("None", "True", "False")
    if cls is _UnaryExpr:
        return _is_literal(cast(UnaryExpr, e).expr)
    if cls is _TupleExpr or cls is _ListExpr:
        return all(_is_literal(i) for i in cast("TupleExpr | ListExpr", e).items)
    return False


def _parameter_value(arg: Argument) -> Expression:
    """What parameter ``arg`` is bound to in the integer reading (``_INT_PARAMETER``,
    ``_NUMBER_PARAMETER``; ``_NO_GRADIENT`` for ``*args: int``, integers no 0-d reading takes;
    else ``_OPAQUE``)."""
    t = arg.type_annotation
    if _is_int_annotation(t):
        return _NO_GRADIENT if arg.kind.is_star() else _INT_PARAMETER
    if _is_number_annotation(t) and not arg.kind.is_star():
        return _NUMBER_PARAMETER
    return _OPAQUE


def _is_int_annotation(t: object) -> bool:
    return type(t) is _UnboundType and cast(UnboundType, t).name in _INT_ANNOTATIONS


_INT_ANNOTATIONS: Final = frozenset({"int", "bool", "builtins.int", "builtins.bool"})


def _is_integer_dtype(e: Expression) -> bool:
    """``torch.long``, ``torch.int64``, ``torch.bool`` (engine INTEGER_DTYPES)."""
    return (type(e) is _MemberExpr and cast(MemberExpr, e).name in INTEGER_DTYPES
            and type(cast(MemberExpr, e).expr) is _NameExpr)


def _names_a_dtype(e: Expression) -> bool:
    """``torch.float32``, ``torch.long``: a dtype given to a cast (``x.to(torch.float16)``)."""
    return type(e) is _MemberExpr and type(cast(MemberExpr, e).expr) is _NameExpr and cast(
        NameExpr, cast(MemberExpr, e).expr).name == "torch" and cast(MemberExpr, e).name not in (
        "device",)


def is_integer_valued(e: Expression | None, names: Container[str] = ()) -> bool:
    """A value known to be an integer or bool tensor (or number), read from the source: a
    result of engine INTEGER_RESULTS (``argmax``, ``multinomial``, a comparison, ``.long()``),
    the indices of a (values, indices) pair, a cast to an integer dtype (``.to(torch.long)``,
    ``dtype=torch.int64``), an int literal, a name in ``names`` (a local only ever assigned
    such values, a module-level int), and what INTEGER_KEEPING ops, integer arithmetic (not
    ``/``), ``torch.where`` and collectives make of them.  Such a value never carries a
    gradient, so its R and I agree at a boundary (engine ``check_argument``'s gradient_free)."""
    while True:
        cls = type(e)
        if cls is _NameExpr:
            name = cast(NameExpr, e).name
            return name in names or name == "True" or name == "False"
        if cls is _IntExpr or cls is _ComparisonExpr:
            return True
        if cls is _MemberExpr:
            m = cast(MemberExpr, e)
            if m.name == "indices":  # x.topk(k).indices
                return True
            if m.name not in ("data", "T", "mT"):
                return False
            e = m.expr
            continue
        if cls is _OpExpr:
            op = cast(OpExpr, e)
            if op.op == "/" or not is_integer_valued(op.left, names):
                return False
            e = op.right
            continue
        if cls is _UnaryExpr:
            e = cast(UnaryExpr, e).expr
            continue
        if cls is _IndexExpr:
            ie = cast(IndexExpr, e)
            if _is_indices_item(ie, names):
                return True
            e = ie.base
            continue
        if cls is _ListExpr or cls is _TupleExpr:  # torch.cat([a, b])
            items = cast("ListExpr | TupleExpr", e).items
            return bool(items) and all(is_integer_valued(i, names) for i in items)
        if cls is not _CallExpr:
            return False
        call = cast(CallExpr, e)
        callee = call.callee
        callee_cls = type(callee)
        if callee_cls is not _NameExpr and callee_cls is not _MemberExpr:
            return False
        name = cast("NameExpr | MemberExpr", callee).name
        dtypes = [a for n, a in zip(call.arg_names, call.args) if n == "dtype" or (
            n is None and _names_a_dtype(a))]
        if dtypes:  # x.to(torch.long), torch.zeros(n, dtype=torch.bool), x.type(torch.int32)
            return all(_is_integer_dtype(a) for a in dtypes)
        if name in INTEGER_RESULTS:
            return not _weighted(call, name)
        if name == "where" and len(call.args) == 3 and call.arg_names[1:] == [None, None]:
            if not is_integer_valued(call.args[1], names):
                return False
            e = call.args[2]
            continue
        if name in ("arange", "full", "full_like", "new_full", "zeros_like", "ones_like",
                    "empty_like", "new_zeros", "new_ones", "new_empty"):
            # torch.arange(n), torch.full(s, 3): an integer without a dtype when the numbers
            # given are integers; a ``*_like`` / ``new_*`` of an integer tensor keeps its dtype
            like = name.endswith("_like") or name.startswith("new_")
            if like and callee_cls is _MemberExpr and name.startswith("new_"):
                if name == "new_full" and not (len(call.args) > 1 and is_integer_valued(call.args[1], names)):
                    return False
                e = cast(MemberExpr, callee).expr
                continue
            if like:
                if not call.args:
                    return False
                if name == "full_like" and not (len(call.args) > 1 and is_integer_valued(call.args[1], names)):
                    return False
                e = call.args[0]
                continue
            numbers = [a for n, a in zip(call.arg_names, call.args) if n is None or n in (
                "start", "end", "step", "fill_value")]
            if name == "full":
                numbers = numbers[1:]
            return bool(numbers) and all(is_integer_valued(a, names) for a in numbers)
        if name in _COLLECTIVE_NAMES and call.args and call.arg_names[0] is None:
            e = call.args[0]  # a collective of an integer value
            continue
        if name in ("to", "cpu", "cuda", "type") and callee_cls is _MemberExpr:
            # ``.to(x.device)``, ``.to("cpu")``: the dtype kept (a tensor given to ``.to``
            # brings its own: not followed)
            if not all(type(a) is _StrExpr or (type(a) is _MemberExpr and cast(
                    MemberExpr, a).name == "device") or n in ("device", "non_blocking", "copy")
                       for n, a in zip(call.arg_names, call.args)):
                return False
            e = cast(MemberExpr, callee).expr
            continue
        if name not in INTEGER_KEEPING:
            return False
        # every tensor or number it is given is an integer: dims, sizes, literal ints are
        if callee_cls is _MemberExpr:
            receiver = cast(MemberExpr, callee).expr
            if type(receiver) is _NameExpr and cast(NameExpr, receiver).name == "torch":
                if not call.args or call.arg_names[0] is not None:
                    return False
                e, rest = call.args[0], call.args[1:]
            else:
                e, rest = receiver, call.args
        else:
            return False
        if not all(is_integer_valued(a, names) or type(a) is _StrExpr or (
                type(a) is _TupleExpr and all(type(i) is _IntExpr or type(i) is _UnaryExpr
                                              for i in cast(TupleExpr, a).items))
                   or (type(a) is _NameExpr and cast(NameExpr, a).name == "None") for a in rest):
            return False


def _resolve_integers(regions: GradRegions) -> None:
    """Fill ``regions.integer_names`` from its pending records (the first question)."""
    for a, b, assigns, ints in regions.integer_pending:
        for name in sorted(_integer_names(assigns, ints) - ints):
            regions.integer_names.append((a, b, name))
    regions.integer_pending = []


def _integer_names(assigns: dict[str, list[Expression]], ints: set[str]) -> set[str]:
    """The locals every assignment of which is an integer value (:func:`is_integer_valued`),
    given the others and the module-level ints ``ints`` (the least fixpoint, as
    :func:`_gradient_free_names`)."""
    names: set[str] = {n + _INDICES_OF for n, rvalues in assigns.items()
                       if rvalues and all(_indices_item(r) for r in rvalues)} | ints
    while True:
        found = {n for n, rvalues in assigns.items()
                 if n not in names and all(is_integer_valued(r, names) for r in rvalues)}
        if not found:
            return names
        names |= found


# The 0-d reading (engine ``Operand.ndim``): a value evidently 0-d, read from the source.
# Reductions over every dim when called without one (``x.sum()``, ``torch.mean(x)``,
# ``x.norm()``, ``torch.linalg.vector_norm(x)``, ``spmd.sum(x, out_partial_axes=...)``)
_FULL_REDUCTIONS: Final = frozenset("""
sum nansum mean nanmean max min amax amin prod norm vector_norm std var all any count_nonzero
median nanmedian argmax argmin
""".split())
# ... the first positional argument of which (after the input) is the norm's order, no dim
_ORDER_FIRST: Final = frozenset(("norm", "vector_norm"))
# always 0-d (1-d or 2-d inputs only); ``.item()`` is a Python number
_ALWAYS_0D: Final = frozenset(("dot", "vdot", "trace", "item", "numel", "dim", "ndimension",
                               "nelement", "element_size"))
# elementwise: as many dims as the widest tensor given (every tensor given 0-d: 0-d)
_RANK_KEEPING: Final = frozenset("""
add sub subtract rsub mul multiply div divide true_divide floor_divide neg negative positive
abs sqrt rsqrt exp exp2 log log2 log10 log1p expm1 square pow float_power reciprocal sign sgn
clamp clip clamp_min clamp_max maximum minimum fmax fmin where tanh sigmoid relu sin cos
atan2 eq ne lt le gt ge logical_and logical_or logical_not floor ceil round trunc remainder
fmod nan_to_num lerp addcmul addcdiv
""".split())
# the receiver's (the input's) shape kept whatever else is given (a dtype, a device, a template)
_RECEIVER_SHAPE: Final = frozenset("""
to type type_as float double half bfloat16 long int bool cpu cuda detach clone contiguous
real imag conj resolve_conj resolve_neg requires_grad_ detach_
""".split())
# collectives that keep the local shape (spmd's, and the functional all_reduce)
_SHAPE_KEEPING_COLLECTIVES: Final = frozenset(("all_reduce", "reinterpret", "declare"))
# non-tensor keywords of the calls read above
_NON_TENSOR_KEYWORDS: Final = frozenset((
    "dtype", "device", "non_blocking", "copy", "memory_format", "out_partial_axes", "p", "ord",
    "correction", "unbiased", "rounding_mode", "src", "dst", "op", "group", "axis_name",
    "requires_grad", "async_op"))


def _non_tensor(e: Expression) -> bool:
    """An argument that is no tensor: a string, ``None``, a dtype, ``x.device``."""
    cls = type(e)
    return cls is _StrExpr or (cls is _NameExpr and cast(NameExpr, e).name == "None") or (
        cls is _MemberExpr and (_names_a_dtype(e) or cast(MemberExpr, e).name == "device"))


def _module_name(e: Expression) -> str | None:
    """The module ``e`` names (``torch``, ``torch.linalg``, ``spmd``, ``math``: a function's
    receiver), or None for any other receiver (a tensor, an object)."""
    if isinstance(e, (NameExpr, MemberExpr)):
        node = e.node
        if isinstance(node, MypyFile):
            return node.fullname
    return None


# The modules whose functions the 0-d reading knows by name (a user's own ``dot`` is not read)
_TORCH_MODULES: Final = frozenset(("torch", "torch.linalg", "torch.special", "spmd",
                                   "torch.distributed._functional_collectives"))


def _one_dim(e: Expression) -> bool:
    """A tensor evidently 1-d by its call (the static contraction rule's reading, reductions
    ``_flat``, without the receiver's type): ``x.flatten()``, ``x.ravel()``, ``x.view(-1)``,
    ``x.reshape(-1)``, ``torch.flatten(x)``, ``torch.ravel(x)``."""
    if type(e) is not _CallExpr:
        return False
    call = cast(CallExpr, e)
    callee = call.callee
    if type(callee) is not _MemberExpr or any(k != ARG_POS for k in call.arg_kinds):
        return False
    name = cast(MemberExpr, callee).name
    if name not in ("flatten", "ravel", "view", "reshape"):
        return False
    module = _module_name(cast(MemberExpr, callee).expr)
    if module is not None:
        return module == "torch" and name in ("flatten", "ravel") and len(call.args) == 1
    if name in ("flatten", "ravel"):
        return not call.args
    arg = call.args[0] if len(call.args) == 1 else None
    if type(arg) is _IntExpr:
        return cast(IntExpr, arg).value == -1
    return (type(arg) is _UnaryExpr and cast(UnaryExpr, arg).op == "-"
            and type(cast(UnaryExpr, arg).expr) is _IntExpr
            and cast(IntExpr, cast(UnaryExpr, arg).expr).value == 1)


def _zero_dim_product(module: str | None, a: Expression, b: Expression,
                      keywords: list[tuple[str, Expression]]) -> bool:
    """``matmul(a, b)`` (``a @ b``, ``torch.matmul``, ``spmd.matmul``) is 0-d: both operands
    evidently 1-d (:func:`_one_dim`), or ``spmd.matmul(r, r, out_partial_axes=...)``, the
    same tensor twice declared a partial sum (torch.dot's fix, written with a matmul): a sum
    over a dim sharded in both operands, which one tensor's two roles contract alike only at
    rank 1 (at rank >= 2 the left operand contracts its last dim, the right its dim -2)."""
    if _one_dim(a) and _one_dim(b):
        return True
    if module != "spmd" or not any(n == "out_partial_axes" for n, _ in keywords):
        return False
    key = literal_hash(a)
    return key is not None and key == literal_hash(b)


def _zero_dim_equation(e: Expression) -> bool:
    """An einsum equation with an empty output (``"k,k->"``, ``"ij,ij->"``): 0-d."""
    if type(e) is not _StrExpr:
        return False
    lhs, arrow, out = cast(StrExpr, e).value.replace(" ", "").partition("->")
    return bool(arrow) and bool(lhs) and not out


def is_zero_dim(e: Expression | None, names: Container[str] = (), depth: int = 0) -> bool:
    """A value evidently 0-d (a 0-d tensor or a Python number), read from the source: a
    number literal, a name in ``names`` (a local every binding of which is such a value, a
    module-level number), a reduction over every dim (``x.sum()``, ``torch.mean(x)``,
    ``x.norm()``, ``spmd.sum(x, out_partial_axes="tp")``, no dim given), ``torch.dot`` /
    ``vdot``, ``.item()``, ``torch.tensor(<such a value>)``, a shape-keeping collective
    (``all_reduce``, ``reinterpret``, ``declare``) or an elementwise op (operators,
    ``sqrt``, ``where``, ``clamp``, casts) of such values.  False where unknown (a call of
    a function, a parameter, ``torch.inner``, ``matmul``: their operands' ranks are not
    known statically)."""
    if e is None or e is _NO_GRADIENT or depth > 40:
        return False
    cls = type(e)
    if cls is _NameExpr:
        name = cast(NameExpr, e).name
        return name in names or name == "True" or name == "False"
    if cls is _IntExpr or cls is _FloatExpr:
        return True
    if cls is _UnaryExpr:
        return is_zero_dim(cast(UnaryExpr, e).expr, names, depth + 1)
    if cls is _OpExpr:
        op = cast(OpExpr, e)
        if op.op == "@":
            return _zero_dim_product(None, op.left, op.right, [])
        return is_zero_dim(op.left, names, depth + 1) and is_zero_dim(op.right, names, depth + 1)
    if cls is _ComparisonExpr:
        return all(is_zero_dim(x, names, depth + 1) for x in cast(ComparisonExpr, e).operands)
    if cls is _ConditionalExpr:
        c = cast(ConditionalExpr, e)
        return is_zero_dim(c.if_expr, names, depth + 1) and is_zero_dim(c.else_expr, names, depth + 1)
    if cls is _MemberExpr:
        m = cast(MemberExpr, e)
        return m.name in ("data", "real", "imag") and is_zero_dim(m.expr, names, depth + 1)
    if cls is not _CallExpr:
        return False
    call = cast(CallExpr, e)
    callee = call.callee
    args, kinds, arg_names = call.args, call.arg_kinds, call.arg_names
    if any(k != ARG_POS and n is None for k, n in zip(kinds, arg_names)):
        return False  # *args / **kwargs
    positional = [a for a, n in zip(args, arg_names) if n is None]
    keywords = [(n, a) for a, n in zip(args, arg_names) if n is not None]
    if type(callee) is _NameExpr:  # builtins
        name = cast(NameExpr, callee).name
        if name in ("float", "int", "bool", "len"):
            return True
        if name in ("abs", "max", "min") and positional and not keywords:
            return all(is_zero_dim(a, names, depth + 1) for a in positional)
        return False
    if type(callee) is not _MemberExpr:
        return False
    m = cast(MemberExpr, callee)
    name = m.name
    module = _module_name(m.expr)
    if module is not None:  # torch.sum(x), spmd.all_reduce(x, ...), math.sqrt(x)
        if module == "math":
            return True  # a Python number
        if module not in _TORCH_MODULES or not positional:
            return False
        receiver: Expression = positional[0]
        rest = positional[1:]
    else:
        receiver, rest = m.expr, positional
        if type(receiver) is _NameExpr and cast(NameExpr, receiver).name in ("self", "cls"):
            return False  # the object's own method (``self.dot(a, b)``, ``self.norm()``)
    if name == "matmul":
        # torch.matmul(a, b), spmd.matmul(a, b, out_partial_axes=...), a.matmul(b)
        return (len(rest) == 1 and all(n in _NON_TENSOR_KEYWORDS for n, _ in keywords)
                and _zero_dim_product(module, receiver, rest[0], keywords))
    if name == "einsum":
        # torch.einsum("k,k->", a, b), spmd.einsum(..., out_partial_axes=...): the equation
        return module is not None and _zero_dim_equation(receiver)
    if name in _ALWAYS_0D:
        # x.dot(y), torch.dot(x, y), x.item(), torch.trace(x): the operands and nothing else
        return len(rest) == (1 if name in ("dot", "vdot") else 0) and not keywords
    if name in ("tensor", "as_tensor", "scalar_tensor"):
        return module is not None and is_zero_dim(receiver, names, depth + 1)
    if name == "new_tensor":
        return module is None and len(positional) == 1 and is_zero_dim(positional[0], names, depth + 1)
    if name in _SHAPE_KEEPING_COLLECTIVES:
        return module is not None and is_zero_dim(receiver, names, depth + 1)
    if name in _FULL_REDUCTIONS:
        if name in ("max", "min") and rest:
            # torch.max(a, b): elementwise; x.max(1): a dim
            return module is not None and len(rest) == 1 and not keywords and is_zero_dim(
                receiver, names, depth + 1) and is_zero_dim(rest[0], names, depth + 1)
        if rest and not (name in _ORDER_FIRST and len(rest) == 1 and (
                type(rest[0]) in (_IntExpr, _FloatExpr, _StrExpr))):
            return False  # a dim given
        return all(n in _NON_TENSOR_KEYWORDS or (n == "keepdim" and type(a) is _NameExpr
                                                 and cast(NameExpr, a).name == "False")
                   for n, a in keywords)
    if name in _RECEIVER_SHAPE:
        return is_zero_dim(receiver, names, depth + 1)
    if name in _RANK_KEEPING:
        return is_zero_dim(receiver, names, depth + 1) and all(
            is_zero_dim(a, names, depth + 1) or _non_tensor(a) for a in rest) and all(
            n in _NON_TENSOR_KEYWORDS or is_zero_dim(a, names, depth + 1) for n, a in keywords)
    return False


def _zero_dim_locals(assigns: dict[str, list[Expression]], numbers: set[str]) -> frozenset[str]:
    """The locals every binding of which is 0-d (:func:`is_zero_dim`), given the module-level
    numbers ``numbers`` the function does not assign: the greatest such set (``rs = rs_new``,
    ``s = s * 0.5``: a local read is bound, so by induction over the run each value is)."""
    names = {n for n, values in assigns.items() if values}
    while True:
        within = names | numbers
        drop = {n for n in names if not all(is_zero_dim(v, within) for v in assigns[n])}
        if not drop:
            return frozenset(names)
        names -= drop


def module_numbers(file: MypyFile) -> tuple[frozenset[str], frozenset[str]]:
    """The file's module-level names only ever assigned a number there (``VOCAB = 32``,
    ``EPS: Final = 1e-6``, ``HALF = VOCAB // 2``), and the int ones among them: a scalar
    operand named so is the literal it holds (gradient-free; an int is an integer value)."""
    values: dict[str, list[Expression]] = {}
    # bound otherwise (a ``for`` target, an import, a walrus, a name a function declares
    # ``global``, a comprehension target or lambda parameter read at module level): no number
    other: set[str] = set()
    _global_names(file.defs, other)
    for d in file.defs:
        cls = type(d)
        if cls is _AssignmentStmt:
            st = cast(AssignmentStmt, d)
            for lv in st.lvalues:
                _module_target(lv, st.rvalue, values, other)
            _bindings_in(st.rvalue, other)
        elif cls is _FuncDef or cls is _ClassDef:
            other.add(cast("FuncDef | ClassDef", d).name)
        elif cls is _Decorator:
            other.add(cast(Decorator, d).func.name)
        elif cls is _OverloadedFuncDef:
            other.add(cast(OverloadedFuncDef, d).name)
        else:
            _bindings_in_stmts([d], other, True)
    numbers: set[str] = set()
    ints: set[str] = set()
    while True:
        found = False
        for n, rvalues in values.items():
            if n in other or n in numbers:
                continue
            if all(_is_number(r, numbers) for r in rvalues):
                numbers.add(n)
                found = True
        if not found:
            break
    while True:
        more = {n for n in numbers if n not in ints
                and all(is_integer_valued(r, ints) for r in values[n])}
        if not more:
            return frozenset(numbers), frozenset(ints)
        ints |= more


def _module_target(lv: Expression, rv: Expression, values: dict[str, list[Expression]],
                   other: set[str]) -> None:
    """Record what module-level target ``lv`` is assigned from ``rv``: a name its value; a
    tuple or list target of a tuple or list display of the same length, neither starred
    (``B, C = 8, 9``, ``(H, (W, D)) = 4, (8, 2)``), each item its own; else (``a, b = f()``,
    ``a, *b = 1, 2, 3``, ``x.y = 1``, ``t[0] = 1``) its names are bound otherwise."""
    cls = type(lv)
    if cls is _NameExpr:
        _append(values, cast(NameExpr, lv).name, rv)
        return
    rcls = type(rv)
    if (cls is _TupleExpr or cls is _ListExpr) and (rcls is _TupleExpr or rcls is _ListExpr):
        targets = cast("TupleExpr | ListExpr", lv).items
        items = cast("TupleExpr | ListExpr", rv).items
        if len(targets) == len(items) and not any(
                type(t) is _StarExpr for t in targets) and not any(
                type(i) is _StarExpr for i in items):
            for t, i in zip(targets, items):
                _module_target(t, i, values, other)
            return
    other.update(_target_names(lv))
    _bindings_in(lv, other)


def _is_number(e: Expression, numbers: Container[str]) -> bool:
    """An expression of number literals and module-level numbers (``4 * 1024``, ``-1e9``)."""
    cls = type(e)
    if cls is _IntExpr or cls is _FloatExpr:
        return True
    if cls is _NameExpr:
        return cast(NameExpr, e).name in numbers
    if cls is _UnaryExpr:
        return _is_number(cast(UnaryExpr, e).expr, numbers)
    if cls is _OpExpr:
        op = cast(OpExpr, e)
        return op.op in ("+", "-", "*", "/", "//", "%", "**") and _is_number(
            op.left, numbers) and _is_number(op.right, numbers)
    return False


# The suffix of a pair local's entry among the gradient-free names: ``mx[1]`` (never an identifier)
_INDICES_OF: Final = "[1]"


def _gradient_free_names(assigns: dict[str, list[Expression]],
                         no_grad_functions: Container[str] = (),
                         numbers: set[str] | None = None) -> set[str]:
    """The locals every assignment of which is gradient-free, given the others (the least
    fixpoint: ``a = x.detach()`` then ``b = all_reduce(a, ...)`` makes both).  A local only
    ever assigned a (values, indices) pair (``mx = torch.max(x, -1)``) gives the entry
    ``mx[1]``: its indices item."""
    names: set[str] = {n + _INDICES_OF for n, rvalues in assigns.items()
                       if rvalues and all(_indices_item(r) for r in rvalues)}
    if numbers:
        names |= numbers
    while True:
        found = {n for n, rvalues in assigns.items()
                 if n not in names
                 and all(is_gradient_free(r, names, no_grad_functions) for r in rvalues)}
        if not found:
            return names
        names |= found


def _bindings_in(e: Expression | None, out: set[str],
                 walrus: list[tuple[str, Expression]] | None = None) -> None:
    """The names expression ``e`` binds anywhere in it: walrus targets (``(t := x * 2)``),
    comprehension and generator targets (``[i * N for N in ns]``), lambda parameters and
    what the lambda's body binds (each a binding the statement walk does not read).
    ``walrus``: where the walrus targets of the scope itself go with their values (those in a
    lambda go to ``out``)."""
    cls = type(e)
    if e is None or cls is _NameExpr or cls is _IntExpr or cls is _StrExpr or cls is _FloatExpr:
        return
    if cls is _AssignmentExpr:
        a = cast(AssignmentExpr, e)
        if walrus is not None:
            walrus.append((a.target.name, a.value))
        else:
            out.add(a.target.name)
        _bindings_in(a.value, out, walrus)
    elif cls is _CallExpr:
        call = cast(CallExpr, e)
        _bindings_in(call.callee, out, walrus)
        for arg in call.args:
            _bindings_in(arg, out, walrus)
    elif cls is _MemberExpr:
        _bindings_in(cast(MemberExpr, e).expr, out, walrus)
    elif cls is _OpExpr:
        _bindings_in(cast(OpExpr, e).left, out, walrus)
        _bindings_in(cast(OpExpr, e).right, out, walrus)
    elif cls is _IndexExpr:
        _bindings_in(cast(IndexExpr, e).base, out, walrus)
        _bindings_in(cast(IndexExpr, e).index, out, walrus)
    elif cls is _TupleExpr or cls is _ListExpr or cls is _SetExpr:
        for item in cast("TupleExpr | ListExpr | SetExpr", e).items:
            _bindings_in(item, out, walrus)
    elif cls is _UnaryExpr or cls is _StarExpr:
        _bindings_in(cast("UnaryExpr | StarExpr", e).expr, out, walrus)
    elif cls is _ComparisonExpr:
        for operand in cast(ComparisonExpr, e).operands:
            _bindings_in(operand, out, walrus)
    elif cls is _ConditionalExpr:
        ce = cast(ConditionalExpr, e)
        _bindings_in(ce.cond, out, walrus)
        _bindings_in(ce.if_expr, out, walrus)
        _bindings_in(ce.else_expr, out, walrus)
    elif cls is _DictExpr:
        for k, v in cast(DictExpr, e).items:
            _bindings_in(k, out, walrus)
            _bindings_in(v, out, walrus)
    elif cls is _YieldExpr or cls is _YieldFromExpr or cls is _AwaitExpr:
        _bindings_in(cast("YieldExpr | YieldFromExpr | AwaitExpr", e).expr, out, walrus)
    elif cls is _LambdaExpr:
        lam = cast(LambdaExpr, e)
        out.update(arg.variable.name for arg in lam.arguments)
        _bindings_in_stmts(lam.body.body, out, True)
    elif cls is _ListComprehension or cls is _SetComprehension:
        _bindings_in(cast("ListComprehension | SetComprehension", e).generator, out, walrus)
    elif cls is _GeneratorExpr or cls is _DictionaryComprehension:
        g = cast("GeneratorExpr | DictionaryComprehension", e)
        if cls is _GeneratorExpr:
            _bindings_in(cast(GeneratorExpr, e).left_expr, out, walrus)
        else:
            _bindings_in(cast(DictionaryComprehension, e).key, out, walrus)
            _bindings_in(cast(DictionaryComprehension, e).value, out, walrus)
        for index in g.indices:
            out.update(_target_names(index))
        for seq in g.sequences:
            _bindings_in(seq, out, walrus)
        for conds in g.condlists:
            for c in conds:
                _bindings_in(c, out, walrus)


def _target_names(e: Expression) -> list[str]:
    """The names an assignment target binds (``a``, ``a, *b``, ``[a, (b, c)]``)."""
    cls = type(e)
    if cls is _StarExpr:
        return _target_names(cast(StarExpr, e).expr)
    if cls is _TupleExpr or cls is _ListExpr:
        return [n for i in cast("TupleExpr | ListExpr", e).items for n in _target_names(i)]
    return _names_in(e)


def _bindings_in_stmts(stmts: list[Statement], out: set[str], all_forms: bool,
                       walrus: list[tuple[str, Expression]] | None = None) -> None:
    """The names statements ``stmts`` (a function's body) bind in ways the walk's per-function
    assignments do not read: walrus, comprehension and lambda targets (:func:`_bindings_in`),
    ``except ... as``, imports, ``del``, ``global`` / ``nonlocal`` declarations, the names of
    nested functions and classes, and every name a nested function or class binds (a
    ``nonlocal`` rebinding there, or a nested local of the same name: the walk's entries span
    the whole enclosing function).  ``all_forms``: also assignment, ``for``, ``with`` and
    ``match`` targets (inside a nested scope).  ``walrus``: as :func:`_bindings_in`."""
    for st in stmts:
        cls = type(st)
        if cls is _AssignmentStmt:
            a = cast(AssignmentStmt, st)
            if all_forms:
                for lv in a.lvalues:
                    out.update(_target_names(lv))
            for lv in a.lvalues:
                _bindings_in(lv, out, walrus)
            _bindings_in(a.rvalue, out, walrus)
        elif cls is _OperatorAssignmentStmt:
            op = cast(OperatorAssignmentStmt, st)
            if all_forms:
                out.update(_target_names(op.lvalue))
            _bindings_in(op.rvalue, out, walrus)
        elif cls is _ExpressionStmt or cls is _ReturnStmt:
            _bindings_in(cast("ExpressionStmt | ReturnStmt", st).expr, out, walrus)
        elif cls is _AssertStmt:
            _bindings_in(cast(AssertStmt, st).expr, out, walrus)
            _bindings_in(cast(AssertStmt, st).msg, out, walrus)
        elif cls is _RaiseStmt:
            _bindings_in(cast(RaiseStmt, st).expr, out, walrus)
            _bindings_in(cast(RaiseStmt, st).from_expr, out, walrus)
        elif cls is _IfStmt:
            ifs = cast(IfStmt, st)
            for e in ifs.expr:
                _bindings_in(e, out, walrus)
            for b in ifs.body:
                _bindings_in_stmts(b.body, out, all_forms, walrus)
            if ifs.else_body is not None:
                _bindings_in_stmts(ifs.else_body.body, out, all_forms, walrus)
        elif cls is _ForStmt or cls is _WhileStmt:
            loop = cast("ForStmt | WhileStmt", st)
            if cls is _ForStmt:
                index = cast(ForStmt, st).index
                _bindings_in(index, out, walrus)
                if all_forms:
                    out.update(_target_names(index))
            _bindings_in(loop.expr, out, walrus)
            _bindings_in_stmts(loop.body.body, out, all_forms, walrus)
            if loop.else_body is not None:
                _bindings_in_stmts(loop.else_body.body, out, all_forms, walrus)
        elif cls is _WithStmt:
            w = cast(WithStmt, st)
            for e in w.expr:
                _bindings_in(e, out, walrus)
            for target in w.target:
                if target is not None:
                    _bindings_in(target, out, walrus)
                    if all_forms:
                        out.update(_target_names(target))
            _bindings_in_stmts(w.body.body, out, all_forms, walrus)
        elif cls is _TryStmt:
            t = cast(TryStmt, st)
            _bindings_in_stmts(t.body.body, out, all_forms, walrus)
            for var in t.vars:
                if var is not None:
                    out.add(var.name)
            for typ in t.types:
                _bindings_in(typ, out, walrus)
            for h in t.handlers:
                _bindings_in_stmts(h.body, out, all_forms, walrus)
            for extra in (t.else_body, t.finally_body):
                if extra is not None:
                    _bindings_in_stmts(extra.body, out, all_forms, walrus)
        elif cls is _MatchStmt:
            m = cast(MatchStmt, st)
            _bindings_in(m.subject, out, walrus)
            for p, g, b in zip(m.patterns, m.guards, m.bodies):
                if all_forms:
                    out.update(n.name for n in pattern_captures(p))
                _bindings_in(g, out, walrus)
                _bindings_in_stmts(b.body, out, all_forms, walrus)
        elif cls is _Block:
            _bindings_in_stmts(cast(Block, st).body, out, all_forms, walrus)
        elif cls is _FuncDef or cls is _Decorator or cls is _OverloadedFuncDef:
            funcs = ([cast(FuncDef, st)] if cls is _FuncDef else [cast(Decorator, st).func]
                     if cls is _Decorator else [cast(FuncDef, i) if type(i) is _FuncDef
                                                else cast(Decorator, i).func
                                                for i in cast(OverloadedFuncDef, st).items])
            if cls is _Decorator:
                for dec in cast(Decorator, st).original_decorators:
                    _bindings_in(dec, out)
            for f in funcs:
                out.add(f.name)
                out.update(arg.variable.name for arg in f.arguments)
                for arg in f.arguments:
                    _bindings_in(arg.initializer, out)
                _bindings_in_stmts(f.body.body, out, True)
        elif cls is _ClassDef:
            c = cast(ClassDef, st)
            out.add(c.name)
            _bindings_in_stmts(c.defs.body, out, True)
        elif cls is Import:
            for mod, alias in cast(Import, st).ids:
                out.add(alias if alias is not None else mod.split(".")[0])
        elif cls is ImportFrom:
            for name, alias in cast(ImportFrom, st).names:
                out.add(alias if alias is not None else name)
        elif cls is DelStmt:
            out.update(_target_names(cast(DelStmt, st).expr))
        elif cls is GlobalDecl or cls is NonlocalDecl:
            out.update(cast("GlobalDecl | NonlocalDecl", st).names)


def _global_names(stmts: list[Statement], out: set[str]) -> None:
    """The names declared ``global`` anywhere in the functions of ``stmts`` (a module's)."""
    for st in stmts:
        cls = type(st)
        if cls is GlobalDecl:
            out.update(cast(GlobalDecl, st).names)
        elif cls is _FuncDef:
            _global_names(cast(FuncDef, st).body.body, out)
        elif cls is _Decorator:
            _global_names(cast(Decorator, st).func.body.body, out)
        elif cls is _OverloadedFuncDef:
            for i in cast(OverloadedFuncDef, st).items:
                _global_names([i], out)
        elif cls is _ClassDef:
            _global_names(cast(ClassDef, st).defs.body, out)
        elif cls is _IfStmt:
            for b in cast(IfStmt, st).body:
                _global_names(b.body, out)
            eb = cast(IfStmt, st).else_body
            if eb is not None:
                _global_names(eb.body, out)
        elif cls is _ForStmt or cls is _WhileStmt:
            loop = cast("ForStmt | WhileStmt", st)
            _global_names(loop.body.body, out)
            if loop.else_body is not None:
                _global_names(loop.else_body.body, out)
        elif cls is _WithStmt:
            _global_names(cast(WithStmt, st).body.body, out)
        elif cls is _TryStmt:
            t = cast(TryStmt, st)
            _global_names(t.body.body, out)
            for h in t.handlers:
                _global_names(h.body, out)
            for extra in (t.else_body, t.finally_body):
                if extra is not None:
                    _global_names(extra.body, out)
        elif cls is _Block:
            _global_names(cast(Block, st).body, out)
        elif cls is _MatchStmt:
            for b in cast(MatchStmt, st).bodies:
                _global_names(b.body, out)


def _names_in(e: Expression) -> list[str]:
    cls = type(e)
    if cls is _NameExpr:
        return [cast(NameExpr, e).name]
    if cls is _TupleExpr or cls is _ListExpr:
        return [n for i in cast("TupleExpr | ListExpr", e).items for n in _names_in(i)]
    return []


# The top-level statements mypy's renamer enters (rename_redefinitions)
_DEFINITIONS: Final = frozenset({FuncDef, OverloadedFuncDef, Decorator, ClassDef})


def rename_redefinitions(file: MypyFile, options: Options,
                         defs: list[Statement] | None = None,
                         loops: list[Statement] | None = None) -> None:
    """Section 2 of the module docstring, in function and method bodies only: module-level
    statements keep their names (another module may import them, and in a module re-parsed
    without ``get_additional_deps`` the top level may be analysed already; function bodies
    never are before every top level is).  Nothing when the module's options already allow
    redefinition (mypy does it, or does it its own way), except for loop variables
    (:mod:`.loop_names`: a loop's names its own).  ``defs``: only these top-level
    definitions (:func:`prepare_file` knows which define a name twice); else all.
    ``loops``: those of them where a loop variable is bound twice (else ``defs``)."""
    if file.is_stub:
        return
    if defs is None:
        defs = [d for d in file.defs if type(d) in _DEFINITIONS]
    if not defs:
        return
    if not options.allow_redefinition and not options.allow_redefinition_old:
        # mypy's visitor is compiled (no subclassing): hand it a file of the definitions
        # (each top-level definition is renamed on its own: the visitor records no name
        # at the file's level for them)
        VariableRenameVisitor().visit_mypy_file(MypyFile(defs, []))
    # then a loop variable reused by a later loop in another block (mypy renames in one
    # block only): each loop's variables its own, under any redefinition option
    own_loop_variables(defs if loops is None else loops)
    if not options.allow_redefinition and not options.allow_redefinition_old:
        # and bindings in other blocks that no read joins (.webs): each its own variable
        own_webs(defs)


def prepare_file(file: MypyFile, options: Options) -> GradRegions:
    """Before semantic analysis, in one walk: rewrite the file's axis strings in place, find
    its gradient-free regions (by name: they need no analysis), and the top-level
    definitions that define a name twice in one scope, the only ones mypy's renamer
    changes (section 2).  Those are renamed after the walk and walked again for their
    gradient-free names, which are then the names the checker sees (``h'``).  Renaming only
    them saves the renamer's walk over the others (most functions define each name once).
    A walk that fails renames every definition, as a file never walked would be."""
    _TERNARY_TESTS.clear()
    w = _Walker(rewrite=True, no_grad_functions=no_grad_functions(file),
                module_numbers=module_numbers(file))
    w.module_level = not file.is_stub
    w.rank_helpers = rank_helpers(file)
    rebinding: list[Statement] = []
    looping: list[Statement] = []  # of those, the ones where a loop variable is bound twice
    spans: list[tuple[int, int, int, int, int, int]] = []  # each one's slices of w.detached,
    # w.integers, w.shadowed
    try:
        for d in file.defs:
            if type(d) in _DEFINITIONS:
                w.rebinds = False
                w.rebound.clear()
                w.loop_targets.clear()
                first = (len(w.detached), len(w.integers), len(w.shadowed))
                w.stmt(d)
                if w.rebinds:
                    rebinding.append(d)
                    if not w.rebound.isdisjoint(w.loop_targets):
                        looping.append(d)
                    spans.append((first[0], len(w.detached), first[1], len(w.integers),
                                  first[2], len(w.shadowed)))
            else:
                w.statement_in(file.defs, d)
    except Exception:
        _rename_quietly(file, options, None)
        raise
    if w.class_matches and not _rebinds(file, "isinstance"):
        for stmts, match in w.class_matches:
            for i, st in enumerate(stmts):
                if st is match:
                    stmts.insert(i, ExpressionStmt(isinstance_trigger(match.line, match.column)))
                    stmts[i].set_line(match.line, match.column, match.line)
                    break
    conditions: dict[int, ConditionEntry] = {}
    grad_sets: dict[int, AssignmentStmt] = {}
    if w.conditions and not _rebinds(file, TRIGGER_NAME):
        for stmts, after, operands, case, wrap, exit_of in w.conditions:
            at = after if after is not None else stmts[0]
            i = 0 if after is None else next(k for k, st in enumerate(stmts) if st is after) + 1
            call = condition_trigger(at.line, at.column)
            trigger = ExpressionStmt(call)
            trigger.set_line(at.line, at.column, at.line)
            if wrap and after is not None:  # try: return ... finally: <trigger>
                end = after.end_line or after.line
                body, finally_body = Block([after]), Block([trigger])
                wrapped = TryStmt(body, [], [], [], None, finally_body)
                for node in (body, wrapped):
                    node.set_line(after.line, after.column, end)
                finally_body.set_line(at.line, at.column, at.line)
                stmts[i - 1] = wrapped
            else:
                stmts.insert(i, trigger)
            conditions[id(call)] = (call, tuple(operands), case, exit_of)
            if after is not None and id(after) in w.grad_sets:
                grad_sets[id(call)] = cast(AssignmentStmt, after)
    detached, integers, shadowed = w.detached, w.integers, w.shadowed
    if rebinding:
        _rename_quietly(file, options, _rebinding_parts(rebinding, w),
                        _rebinding_parts(looping, w))
        again = _Walker(rewrite=False, no_grad_functions=w.no_grad_functions,
                        module_numbers=(w.module_numbers, w.module_ints))
        again.reuse = w.kept  # a function the renamer did not change keeps its records
        again.block(rebinding)
        detached = _outside(detached, [(a, b) for a, b, _, _, _, _ in spans]) + again.detached
        integers = _outside(integers, [(a, b) for _, _, a, b, _, _ in spans]) + again.integers
        shadowed = _outside(shadowed, [(a, b) for _, _, _, _, a, b in spans]) + again.shadowed
    # a frozen weight (nn.Parameter(w, requires_grad=False), a buffer): "self.w" in its
    # class's methods, after the renaming (which never renames an attribute)
    detached = detached + frozen_attributes(file, is_gradient_free)
    regions = w.regions(detached, integers, shadowed)
    regions.conditions = conditions
    regions.grad_sets = grad_sets
    funcs: list[FuncDef] = []
    runners: dict[str, list[RunnerCall]] | None = None
    owners: dict[int, tuple[str, str]] = {}
    if w.rank_functions:  # after the renaming: a local assigned twice is two names
        funcs = w.rank_functions
        attrs: dict[int, tuple[str, dict[str, frozenset]]] = {}
        if any(f.name == "__init__" for f in funcs):  # self.rank = dist.get_rank() (rank_index)
            attrs = rank_attributes(file, {id(f) for f in funcs}, w.rank_helpers)
            if attrs:
                scanned = {id(f) for f in funcs}
                funcs = funcs + [f for d in file.defs if isinstance(d, ClassDef)
                                 for st in d.defs.body for f in functions_of(st)
                                 if id(f) in attrs and id(f) not in scanned]
        # self.tp_group = mesh.get_group("tp"), then dist.get_rank(self.tp_group)
        groups = group_attributes(file, {id(f) for f in funcs}) if any(
            isinstance(d, ClassDef) for d in file.defs) else None
        runners, owners = collective_runners(file)
        regions.rank_exprs = scan_functions(funcs, w.rank_helpers, regions.divergent, attrs,
                                            groups, runners, owners)
    if w.value_functions and w.rewrite:
        # conditions that may read a tensor's value (``if r.abs().max() < tol: break``): the
        # hooks read their types; the rank functions' walk above recorded theirs
        scanned = {id(f) for f in funcs}
        rest = [f for f in w.value_functions if id(f) not in scanned]
        if rest:
            scan_values(rest, w.rank_helpers, regions.divergent, file, runners, owners)
    _TERNARY_TESTS.clear()
    return regions


# The statements of a class body that need no renaming of their own: mypy's renamer changes
# nothing at the class's level unless a name is defined twice there (_Walker.rebinding_classes)
_CLASS_MEMBERS: Final = frozenset({FuncDef, Decorator, OverloadedFuncDef, AssignmentStmt,
                                   ExpressionStmt, PassStmt})


def _rebinding_parts(defs: list[Statement], w: _Walker) -> list[Statement]:
    """What of the top-level definitions ``defs`` the renamer is given: a class whose body
    defines no name twice in its own scope, and holds only functions and simple statements,
    gives its methods that define a name twice (each function is a scope of its own to
    mypy's renamer, to .webs and to .loop_names: a method is renamed alone as it is in its
    class); anything else whole.  Saves the renamer's walk over the class's other methods."""
    parts: list[Statement] = []
    kept = w.kept
    for d in defs:
        if type(d) is not _ClassDef or id(d) in w.rebinding_classes \
                or not all(type(st) in _CLASS_MEMBERS for st in cast(ClassDef, d).defs.body):
            parts.append(d)
            continue
        for st in cast(ClassDef, d).defs.body:
            for f in functions_of(st):
                k = kept.get(id(f))
                if k is None or k[0] is not f:  # defines a name twice (or was not walked)
                    parts.append(st)
                    break
    return parts


def _outside(entries: list[_E], spans: list[tuple[int, int]]) -> list[_E]:
    """``entries`` without the slices ``spans`` (ascending, disjoint): a renamed
    definition's, which its second walk replaces."""
    kept: list[_E] = []
    start = 0
    for first, end in spans:
        kept.extend(entries[start:first])
        start = end
    kept.extend(entries[start:])
    return kept


# Names a condition reads that are never tensors, and calls that return a bool of their own
_NOT_TENSOR_NAMES: Final = frozenset({"True", "False", "None", "TYPE_CHECKING", "__debug__"})
_BOOL_CALLS: Final = frozenset({"isinstance", "issubclass", "hasattr", "callable", "bool", "len",
                         "all", "any"})


def truth_operands(e: Expression) -> list[Expression]:
    """The operands of condition ``e`` whose truth value Python reads and that may be
    tensors: ``e`` itself, or through ``not``, ``and``, ``or`` their operands (a conditional
    expression's: its branches').  Not a
    comparison (``p > 0`` is an op, checked as one), a literal, a lambda, a display, a
    ``bool``-returning builtin call."""
    cls = type(e)
    if cls is _UnaryExpr:
        u = cast(UnaryExpr, e)
        return truth_operands(u.expr) if u.op == "not" else [e]
    if cls is _OpExpr:
        o = cast(OpExpr, e)
        if o.op == "and" or o.op == "or":
            return truth_operands(o.left) + truth_operands(o.right)
        return [e]
    if cls is _ConditionalExpr:  # the value read is one branch's (its condition: a read of its own)
        ce = cast(ConditionalExpr, e)
        return truth_operands(ce.if_expr) + truth_operands(ce.else_expr)
    if cls is _NameExpr:
        return [] if cast(NameExpr, e).name in _NOT_TENSOR_NAMES else [e]
    if cls is _MemberExpr or cls is _IndexExpr or cls is _AssignmentExpr:
        return [e]
    if cls is _CallExpr:
        callee = cast(CallExpr, e).callee
        return [] if type(callee) is _NameExpr and cast(NameExpr, callee).name in _BOOL_CALLS else [e]
    return []


def _sub_patterns(p: Pattern) -> list[Pattern]:
    """The patterns nested in ``p``: an as-pattern's, the alternatives of an or, the items of
    a sequence, the values of a mapping, the arguments of a class pattern."""
    cls = type(p)
    if cls is AsPattern:
        inner = cast(AsPattern, p).pattern
        return [inner] if inner is not None else []
    if cls is OrPattern:
        return list(cast(OrPattern, p).patterns)
    if cls is SequencePattern:
        return list(cast(SequencePattern, p).patterns)
    if cls is MappingPattern:
        return list(cast(MappingPattern, p).values)
    if cls is ClassPattern:
        c = cast(ClassPattern, p)
        return [*c.positionals, *c.keyword_values]
    return []


def has_value_pattern(p: Pattern) -> bool:
    """Whether pattern ``p`` compares (a part of) the subject with a value anywhere: a value
    pattern (``0``, ``Color.RED``), alone or nested in an or, as, sequence, mapping or class
    pattern.  A capture, a wildcard, ``None``/``True``/``False`` (``is``) and a class test
    compare nothing."""
    return type(p) is ValuePattern or any(has_value_pattern(q) for q in _sub_patterns(p))


def pattern_captures(p: Pattern) -> list[NameExpr]:
    """The names pattern ``p`` binds (``case x``, ``[a, *rest]``, ``{**kw}``, ``0 as z``)."""
    cls = type(p)
    own: list[NameExpr] = []
    rest: list[NameExpr] = []
    if cls is AsPattern and cast(AsPattern, p).name is not None:
        own = [cast(NameExpr, cast(AsPattern, p).name)]
    elif cls is StarredPattern and cast(StarredPattern, p).capture is not None:
        own = [cast(NameExpr, cast(StarredPattern, p).capture)]
    elif cls is MappingPattern and cast(MappingPattern, p).rest is not None:
        rest = [cast(NameExpr, cast(MappingPattern, p).rest)]
    return own + [n for q in _sub_patterns(p) for n in pattern_captures(q)] + rest


def _has_class_pattern(match: MatchStmt) -> bool:
    def has(p: Pattern) -> bool:
        cls = type(p)
        if cls is ClassPattern:
            return True
        if cls is AsPattern:
            inner = cast(AsPattern, p).pattern
            return inner is not None and has(inner)
        if cls is OrPattern:
            return any(has(q) for q in cast(OrPattern, p).patterns)
        return False
    return any(has(p) for p in match.patterns)


def _not_implemented(st: RaiseStmt) -> bool:
    """``raise NotImplementedError(...)``: alone, mypy takes the function's body as trivial
    (an abstract or protocol method's), which a ``try`` around it would not be."""
    e = st.expr
    if type(e) is _CallExpr:
        e = cast(CallExpr, e).callee
    return type(e) is _NameExpr and cast(NameExpr, e).name == "NotImplementedError"


def _rebinds(file: MypyFile, builtin: str) -> bool:
    """The module's top level binds the name ``builtin`` (a trigger would call it)."""
    for d in file.defs:
        cls = type(d)
        if cls is _FuncDef and cast(FuncDef, d).name == builtin:
            return True
        if cls is _Decorator and cast(Decorator, d).func.name == builtin:
            return True
        if cls is _AssignmentStmt and any(
                builtin in _names_in(lv) for lv in cast(AssignmentStmt, d).lvalues):
            return True
        if cls is Import and any((alias or name) == builtin for name, alias in cast(Import, d).ids):
            return True
        if cls is ImportFrom and any((alias or name) == builtin
                                     for name, alias in cast(ImportFrom, d).names):
            return True
    return False


def _sets_grad(st: AssignmentStmt) -> bool:
    """``x.grad = value`` (a target among chained ones too; not a tuple target)."""
    return any(type(lv) is _MemberExpr and cast(MemberExpr, lv).name == "grad" for lv in st.lvalues)


def condition_trigger(line: int, column: int) -> CallExpr:
    """A synthetic ``globals()`` at (line, column), before semantic analysis (so the name
    resolves to the builtin): a call that reaches the ``builtins.globals`` hook
    (``dispatch.condition_trigger_hook``) at that point of the check.  No arguments: the
    cheapest call for mypy to check."""
    call = CallExpr(NameExpr(TRIGGER_NAME), [], [], [])
    for node in (call, call.callee):
        node.line, node.column, node.end_line = line, column, line
    return call


def isinstance_trigger(line: int, column: int) -> CallExpr:
    """A synthetic ``isinstance(object, object)`` at (line, column), before semantic
    analysis, so its names resolve to the builtins: a call that reaches the
    ``builtins.isinstance`` hook (``dispatch.isinstance_hook``) at that point of the check
    and types as bool.  Put before a ``match`` with a class pattern (a pattern narrows like
    ``isinstance``, which needs the gradual promotion off, and runs no hook), and at the
    end of a custom Function's backward (``autograd``, which recognises it by identity)."""
    args: list[Expression] = [NameExpr("object"), NameExpr("object")]
    call = CallExpr(NameExpr("isinstance"), args, [ARG_POS, ARG_POS], [None, None])
    for node in (call, call.callee, *args):
        node.line, node.column, node.end_line = line, column, line
    return call


def _rename_quietly(file: MypyFile, options: Options, defs: list[Statement] | None,
                    loops: list[Statement] | None = None) -> None:
    try:
        rename_redefinitions(file, options, defs, loops)
    except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
        pass


def grad_regions(file: MypyFile) -> GradRegions:
    """The file's gradient-free regions, at check time, for a tree :func:`prepare_file` did
    not see (a module re-parsed without get_additional_deps, a tree the daemon merged)."""
    return _walk(file, rewrite=False)


def _walk(file: MypyFile, rewrite: bool) -> GradRegions:
    w = _Walker(rewrite=rewrite, no_grad_functions=no_grad_functions(file),
                module_numbers=module_numbers(file))
    w.block(file.defs)
    return w.regions(w.detached)


def _regions_or_none(tree: MypyFile) -> GradRegions:
    try:
        return grad_regions(tree)
    except Exception:  # noqa: BLE001 - never crash mypy: no regions
        return GradRegions()


def _renew(store: dict[int, _E], ids: dict[str, list[int]], module: str,
           found: dict[int, _E]) -> None:
    """``store``'s entries of ``module`` (their keys kept in ``ids``, by module) replaced by
    ``found``, what the module's pre-pass found (RegionIndex.record)."""
    for old in ids.pop(module, ()):
        store.pop(old, None)
    if found:
        store.update(found)
        ids[module] = list(found)


class RegionIndex:
    """Each checked file's gradient-free regions, computed once per tree (hooks ask for the
    file being checked at every Invariant operand)."""

    def __init__(self) -> None:
        self._memo: TreeMemo[GradRegions] = TreeMemo(_regions_or_none)
        # is_zero_dim per expression node (RegionIndex.zero_dim), keeping the node
        self._zero_memo: dict[int, tuple[Expression, bool]] = {}
        # the condition triggers (section 3) of the files prepared last, by the call's id, and
        # their ids by module: not per tree, since the daemon merges a re-parsed file into
        # the old tree object (its statements, triggers included, then are the new tree's)
        self._conditions: dict[int, ConditionEntry] = {}
        self._condition_ids: dict[str, list[int]] = {}
        self._grad_sets: dict[int, AssignmentStmt] = {}
        self._grad_set_ids: dict[str, list[int]] = {}
        # the same for the ops computed from a rank query (rank_index): an op hook asks
        # ``if rank_exprs`` first, so code without rank queries pays a truth test
        self.rank_exprs: dict[int, tuple[Expression, frozenset, Expression]] = {}
        self._rank_ids: dict[str, list[int]] = {}
        # and the collectives under a rank-dependent condition (rank_index): a collective's
        # hook asks ``if divergent`` first
        self.divergent: dict[int, Divergent] = {}
        self._divergent_ids: dict[str, list[int]] = {}
        # and the values returned by the functions of those files (GradRegions.returned)
        self.returned: dict[int, Expression] = {}
        self._returned_ids: dict[str, list[int]] = {}

    def regions(self, tree: MypyFile | None) -> GradRegions | None:
        return self._memo.get(tree) if tree is not None else None

    def record(self, tree: MypyFile, regions: GradRegions) -> None:
        """The regions found by :func:`prepare_file` (so the check does not walk the file
        again; a tree the daemon merged or mypy re-parsed without it is walked then)."""
        self._memo.put(tree, regions)
        module = tree.fullname
        _renew(self._conditions, self._condition_ids, module, regions.conditions)
        _renew(self._grad_sets, self._grad_set_ids, module, regions.grad_sets)
        _renew(self.rank_exprs, self._rank_ids, module, regions.rank_exprs)
        _renew(self.divergent, self._divergent_ids, module, regions.divergent)
        _renew(self.returned, self._returned_ids, module, regions.returned)

    def rank_axes(self, e: Context) -> tuple[frozenset, Expression] | None:
        """The axes op node ``e`` varies on because an index or operand is computed from a
        rank query (rank_index), and that index or operand; None for any other node.
        Callers test ``rank_exprs`` first."""
        entry = self.rank_exprs.get(id(e))
        return (entry[1], entry[2]) if entry is not None and entry[0] is e else None

    def divergent_call(self, call: Context) -> Divergent | None:
        """The rank-dependent conditions collective ``call`` runs under (rank_index), or
        None.  Callers test ``divergent`` first."""
        entry = self.divergent.get(id(call))
        return entry if entry is not None and entry[0] is call else None

    def condition(self, call: Context) -> ConditionEntry | None:
        """What a condition trigger (section 3) reads, when ``call`` is one; None for any
        other call."""
        entry = self._conditions.get(id(call))
        return entry if entry is not None and entry[0] is call else None

    def grad_set(self, call: Context) -> AssignmentStmt | None:
        """The ``x.grad = value`` statement a condition trigger follows, if any."""
        return self._grad_sets.get(id(call)) if self._grad_sets else None

    def in_no_grad(self, tree: MypyFile | None, line: int) -> bool:
        regions = self.regions(tree)
        if regions is None:
            return False
        inner = 0  # the start of the innermost gradient-free region holding the line
        for a, b in regions.ranges:
            if a <= line <= b and a > inner:
                inner = a
        if not inner:
            return False
        for a, b in regions.enabled:  # an enable_grad block (or a def) inside it
            # ``<=``: a def that is the first statement of a ``with torch.no_grad():`` block
            # starts on the block's first line
            if inner <= a <= line <= b:
                return False
        return True

    def in_autograd_function(self, tree: MypyFile | None, line: int) -> bool:
        """The line is in the forward or backward (jvp, vjp) of a torch.autograd.Function."""
        regions = self.regions(tree)
        if regions is None:
            return False
        return any(a <= line <= b for a, b in regions.function_bodies)

    def is_augmented_attribute(self, tree: MypyFile | None, e: Context) -> bool:
        """``e`` is the target of an augmented assignment, ``p.grad += g``: read as well."""
        regions = self.regions(tree)
        return regions is not None and (e.line, e.column) in regions.augmented_attributes

    def gradient_free(self, tree: MypyFile | None, line: int, e: Expression | None) -> bool:
        """:func:`is_gradient_free` of ``e`` at ``line``: the gradient-free locals of the
        enclosing function, and the file's own ``@torch.no_grad()`` functions."""
        regions = self.regions(tree)
        return is_gradient_free(e, _DetachedNames(self, tree, line),
                                regions.no_grad_functions if regions is not None else ())

    def is_detached_name(self, tree: MypyFile | None, line: int, name: str,
                         integer: bool = False) -> bool:
        """A local only ever assigned gradient-free values (:func:`is_gradient_free`: ``<expr>.detach()``,
        a collective of such a local) in the enclosing function, or a module-level number
        the function does not assign (``integer``: integer values, :func:`is_integer_valued`;
        a module-level int)."""
        regions = self.regions(tree)
        if regions is None:
            return False
        if integer and regions.integer_pending:
            _resolve_integers(regions)
        for a, b, n in (regions.integer_names if integer else regions.detached_names):
            if a <= line <= b and n == name:
                return True
        if name in (regions.module_ints if integer else regions.module_numbers):
            return not any(a <= line <= b and n == name for a, b, n in regions.shadowed)
        return False

    def zero_dim(self, tree: MypyFile | None, line: int, e: Expression | None) -> bool:
        """:func:`is_zero_dim` of ``e`` at ``line``: with the 0-d locals of the innermost
        function holding the line, and the module-level numbers it does not assign;
        memoised per expression node."""
        if e is None:
            return False
        key = id(e)
        known = self._zero_memo.get(key)
        if known is not None and known[0] is e:
            return known[1]
        regions = self.regions(tree)
        found = is_zero_dim(e, _ZeroDimNames(regions, line) if regions is not None else ())
        if len(self._zero_memo) > 100_000:
            self._zero_memo.clear()
        self._zero_memo[key] = (e, found)
        return found

    def integer_valued(self, tree: MypyFile | None, line: int, e: Expression | None) -> bool:
        """:func:`is_integer_valued` of ``e`` at ``line``: the integer locals of the enclosing
        function, and the module-level ints."""
        return is_integer_valued(e, _DetachedNames(self, tree, line, True))


class _ZeroDimNames:
    """The 0-d locals at a line (:func:`_zero_dim_locals` of the innermost function record
    holding it, computed once per record), as a container for :func:`is_zero_dim`."""

    def __init__(self, regions: GradRegions, line: int) -> None:
        self.regions = regions
        self.line = line
        self._names: frozenset[str] | None = None
        self._assigned: dict[str, list[Expression]] | None = None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if self._names is None:
            self._resolve()
        assert self._names is not None
        if name in self._names:
            return True
        if self._assigned is not None and name in self._assigned:
            return False
        regions = self.regions
        return name in regions.module_numbers and not any(
            a <= self.line <= b and n == name for a, b, n in regions.shadowed)

    def _resolve(self) -> None:
        regions = self.regions
        inner: tuple[int, int] | None = None
        index = -1
        for k, (a, b, _, _) in enumerate(regions.value_records):
            if a <= self.line <= b and (inner is None or b - a < inner[1] - inner[0]):
                inner, index = (a, b), k
        if index < 0:
            self._names = frozenset()
            return
        assigns = regions.value_records[index][2]
        self._assigned = assigns
        known = regions.zero_dim_names.get(index)
        if known is None:
            numbers = {n for n in regions.module_numbers if n not in assigns}
            known = _zero_dim_locals(assigns, numbers)
            regions.zero_dim_names[index] = known
        self._names = known


class _DetachedNames:
    """The gradient-free (``integer``: integer) locals at a line, as a container for
    :func:`is_gradient_free` (:func:`is_integer_valued`)."""

    def __init__(self, regions: RegionIndex, tree: MypyFile | None, line: int,
                 integer: bool = False) -> None:
        self.regions = regions
        self.tree = tree
        self.line = line
        self.integer = integer

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.regions.is_detached_name(
            self.tree, self.line, name, self.integer)


class Renamer:
    """Section 2 of the module docstring, once per parsed tree: at ``get_additional_deps``,
    or late (the first ``Tensor[...]`` annotation or class of a module mypy re-parsed
    without that hook)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._done: TreeMemo[bool] = TreeMemo(self._rename)  # trees already renamed

    def ensure(self, tree: MypyFile | None) -> None:
        if tree is not None:
            self._done.get(tree)

    def prepare(self, tree: MypyFile) -> GradRegions:
        """:func:`prepare_file` with this module's options, which renames the tree."""
        self._done.put(tree, True)
        return prepare_file(tree, self.options.clone_for_module(tree.fullname))

    def _rename(self, tree: MypyFile) -> bool:
        try:
            _rename_quietly(tree, self.options.clone_for_module(tree.fullname), None)
        except Exception:  # noqa: BLE001 - a rewrite problem must never crash mypy
            pass
        return True
