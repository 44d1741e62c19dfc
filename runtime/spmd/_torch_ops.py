"""Which torch call is which engine op, and which of its arguments are operands.

The runtime check mode (:mod:`._checking`) sees every torch function, Tensor
method, operator and ``torch.nn.functional`` call through a
``TorchFunctionMode``.  This module turns the ``func`` it receives into a
:class:`Plan` (computed once per ``func`` and cached):

- the engine's op name (``Tensor.__rsub__`` is ``sub`` with its operands
  swapped, ``torch.rsub`` too; ``x += y`` arrives as ``add_``; ``x.T`` is ``T``;
  an OpOverload ``aten.add.Tensor`` is ``add``);
- what kind of call it is: an op the engine types, a factory (untyped result),
  ``backward``/``torch.autograd.grad`` (the loss check), ``.grad`` (the dual
  type), a read of the values out of the tensor world (``.item()``, ``float(x)``,
  ``if x:``: the Partial check), or a call that is not an op on tensor values
  (metadata, autograd bookkeeping, torch.distributed internals), which passes through;
- the formal name of each positional argument, from which the operands are
  read the way the mypy plugin reads them from torch's stubs, so that both
  modes agree:

  * a formal in :data:`NON_OPERAND_NAMES` (dims, shapes, dtypes, ``alpha``...)
    is never an operand;
  * a formal the engine calls an index (``index``, ``target``, embedding's
    ``input``...: engine ``is_index_formal``) holds index tensors: operands of
    role INDEX, never differentiated (a varying index makes a varying result, a
    partial one is an error);
  * a condition or mask (engine ``GRADFREE_NAMES``) is an operand in its op's
    position that carries no gradient;
  * a Python scalar is an operand only for a formal in
    :data:`SCALAR_OPERAND_NAMES` (``x + 1``, ``x * 2``, ``where(c, x, 0.)``,
    ``masked_fill(m, 0.)``, ``x[i] = 0.``);
  * every other tensor argument (and each tensor of a list/tuple argument,
    ``torch.cat([a, b])``) is an operand.

This module is data plus the plan builder; it does not track anything.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any, Callable

import torch

from spmd_mypy.engine import ops as _engine_ops
from spmd_mypy.engine.collectives import RAW_COLLECTIVES
from spmd_mypy.engine.contractions import CONTRACTIONS, Contraction, make_contraction
from spmd_mypy.engine.views import (
    ELLIPSIS, FORMAL_ALIASES, FULL, INT, MOVES, NEW, SLICE, UNREAD, DimMove, make_move,
)
from spmd_mypy.engine.ops import (
    FACTORIES, FILL_FACTORIES, GRADFREE_NAMES, NON_OPERAND_NAMES, NORMALISING, NOT_OPS, REDUCTIONS,
    SCALAR_OPERAND_NAMES, SCANS, SENDS, UNREAD_VALUE, VALUE_READS, CAST_FORMAL, CAST_OPS, DTYPE_VIEW_OPS, OpSpec, Reduction,
    Role, call_spec,
    FUSED_FIRST_STEP, ZERO_FACTORIES, classify, foreach_op, foreach_writes, is_index_formal,
    normalising_reduction, variant_formals, RANDOM_LIKE, RANDOM_OPS, random_draws,
)

# (Formal-name classes are the engine's: the mypy plugin reads the same names.)

# Operators: the engine's table, plus functions spelled differently from the engine's names.
OPERATORS: dict[str, tuple[str, bool]] = {
    **_engine_ops.OPERATORS,
    "rsub": ("sub", True),  # torch.rsub(input, other) = other - input
}

# Properties read through ``Tensor.<name>.__get__`` that are ops on the value.
PROPERTY_OPS: dict[str, str] = {
    "T": "T", "mT": "mT", "H": "H", "mH": "mH", "real": "real", "imag": "imag",
    "data": "detach",  # x.data: the same value, no gradient
}

# Tensor methods that are not ops on tensor values (besides the engine's NOT_OPS).
EXTRA_PASSTHROUGH = frozenset(
    """apply_ map_ map2_ share_memory_ resize_ resize_as_ set_ record_stream
    register_post_accumulate_grad_hook storage untyped_storage is_shared is_pinned
    is_set_to is_inference is_nonzero has_names align_to refine_names rename rename_
    __deepcopy__ __reduce_ex__ __setstate__ __getstate__ __dlpack__ __dlpack_device__
    __array_wrap__ __array_priority__ __sizeof__ __dir__ __reversed__ __repr__ __format__
    __get__ __set__ __delete__""".split()
)

# Factories the engine's FACTORIES does not list (a new tensor, unrelated to the operands'
# values): untyped results.
EXTRA_FACTORIES = frozenset(
    """new empty_strided empty_permuted new_empty_strided range tril_indices triu_indices
    hann_window hamming_window bartlett_window blackman_window kaiser_window frombuffer
    asarray sparse_coo_tensor sparse_csr_tensor""".split()
)

# torch.distributed namespaces of OpOverloads: the implementation of collectives, which
# the typed collectives type themselves (_checking.on_collective).
_DIST_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor"})
# The collective ops of torch.distributed._functional_collectives (all_gather_tensor,
# all_reduce, reduce_scatter_tensor, all_to_all_single, their *_autograd and *_inplace
# variants): a raw collective on a typed tensor (spmd-raw-collective, _checking names it by
# the functional collective the user called); wait_tensor and the wrappers stay PASS.
_FUNCOL_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd"})
FUNCOL_OPS = frozenset(
    """all_reduce all_reduce_ all_reduce_coalesced all_reduce_coalesced_ all_gather_into_tensor
    all_gather_into_tensor_out all_gather_into_tensor_coalesced reduce_scatter_tensor
    reduce_scatter_tensor_out reduce_scatter_tensor_coalesced all_to_all_single broadcast
    broadcast_""".split()
)


class Kind(enum.Enum):
    PASS = "pass"            # not an op on tensor values: run it, track nothing
    FACTORY = "factory"      # a new tensor: untyped until annotated
    OP = "op"                # typed by the engine
    BACKWARD = "backward"    # Tensor.backward: the loss check
    AUTOGRAD_BACKWARD = "autograd.backward"
    AUTOGRAD_GRAD = "autograd.grad"  # the loss check; results get the inputs' duals
    GRAD = "grad"            # x.grad: the dual of x's type
    SET_GRAD = "set grad"    # x.grad = g: g keeps its own type at later reads
    SET_DATA = "set data"    # x.data = v: x keeps its type; v sharded on another dim: an error
    GRAD_HOOK = "grad hook"  # x.register_hook / register_post_accumulate_grad_hook
    FOREACH = "foreach"      # torch._foreach_*: the op of ``Plan.each`` at every list position
    RAW = "raw collective"   # torch.distributed.all_reduce & co.: not on typed tensors
    SEND = "send"            # torch.distributed.send / isend: engine check_send
    VALUE_READ = "value read"  # x.item(), float(x), bool(x), ...: engine check_value_read


# Argument classes (per formal).  An operand's class is kept with it (see extract): INDEX
# and GRADFREE operands carry no gradient, and an INDEX one has the engine's role INDEX.
SKIP, OPERAND, SCALAR_OK, INDEX, OUT, GRADFREE = 0, 1, 2, 3, 4, 5


def _formal_class(name: str, op: str = "") -> int:
    if name == "out":
        return OUT
    if name in NON_OPERAND_NAMES:
        return SKIP
    if is_index_formal(op, name):
        return INDEX
    if name in GRADFREE_NAMES:
        return GRADFREE
    if name in SCALAR_OPERAND_NAMES:
        return SCALAR_OK
    return OPERAND


class Plan:
    """How the check mode handles one ``func`` (built once, cached)."""

    __slots__ = ("kind", "name", "spec", "swap", "inplace", "positional", "keyword",
                 "varargs", "canon", "inplace_kw", "params", "reduce_at", "each", "variant_at",
                 "writes", "first_step", "random")

    def __init__(self, kind: Kind, name: str = "", *, spec: OpSpec | None = None,
                 swap: bool = False, inplace: bool = False,
                 params: tuple[str, ...] | None = None, varargs: str | None = None,
                 canon: Callable[[tuple, dict], tuple[tuple, dict]] | None = None) -> None:
        self.kind = kind
        self.name = name
        self.spec = spec
        self.swap = swap
        self.inplace = inplace
        # argument classes by position, and by keyword
        self.positional: tuple[int, ...] | None = (
            tuple(_formal_class(p, name) for p in params) if params is not None else None)
        self.keyword: dict[str, int] = (
            {p: _formal_class(p, name) for p in params} if params is not None else {})
        self.varargs = varargs
        self.canon = canon
        self.inplace_kw = params is not None and "inplace" in params
        self.params = params  # the formal names (global SPMD reads dims and shapes by name)
        self.each: Plan | None = None  # FOREACH: the plan of the op at one list position
        # FOREACH: the positions of the lists it writes besides the first (a fused
        # optimizer's states; engine foreach_writes)
        self.writes: tuple[int, ...] = ()
        # FOREACH: the formal that, True, says the step overwrites those states unread
        # (engine FUSED_FIRST_STEP)
        self.first_step: str | None = None
        # the formals that choose the op's rule (engine VARIANTS), by name: their positions
        # (None: a formal the signature does not name, whose value is unknown)
        self.variant_at: dict[str, int | None] | None = None
        formals = variant_formals(name)
        if formals and kind is Kind.OP:
            ps = params or ()
            self.variant_at = {f: (ps.index(f) if f in ps else None) for f in formals}
        # a random op (engine RANDOM_OPS): the check mode compares its generator's state
        # across each axis its result is R or I on, before it draws
        self.random = kind is Kind.OP and name in RANDOM_OPS
        # a reduction or scan: the positions of its dim and keepdim arguments
        self.reduce_at: tuple[int, int | None] | None = None
        if name in REDUCTIONS or name in SCANS:
            ps = params or ()
            dim_at = ps.index("dim") if "dim" in ps else 1
            keep_at = ps.index("keepdim") if "keepdim" in ps else (
                None if name in _KEEPDIM_KEYWORD_ONLY
                else dim_at + 2 if name in _engine_ops.VARIANCE_REDUCTIONS else dim_at + 1)
            self.reduce_at = (dim_at, keep_at)
        elif name in NORMALISING:  # the normalised dims' formal; keep_at None: keeps every dim
            ps = params or ()
            formal = NORMALISING[name][0]
            self.reduce_at = (ps.index(formal) if formal in ps else 1, None)

    def __repr__(self) -> str:
        return f"Plan({self.kind.value}, {self.name!r}, swap={self.swap}, inplace={self.inplace})"


# Reductions whose third positional argument is not keepdim: keyword only, or (the variance
# ops, engine VARIANCE_REDUCTIONS: var(dim, unbiased, keepdim)) the fourth.
_KEEPDIM_KEYWORD_ONLY = frozenset({"norm", "count_nonzero"})


def spec_of(plan: Plan, args: tuple, kwargs: dict) -> OpSpec:
    """The spec of this call: the plan's, or for an op whose rule depends on a mode
    argument (engine ``VARIANTS``: embedding_bag's mode, scatter_reduce's reduce) the one its
    value chooses (engine ``call_spec``, which the static checker asks too)."""
    at = plan.variant_at
    assert plan.spec is not None
    if at is None:
        return plan.spec
    if plan.name in CAST_OPS:
        return call_spec(plan.name, {CAST_FORMAL: _cast_dtype(args, kwargs)})
    if plan.name in DTYPE_VIEW_OPS:  # x.view(dtype): a reinterpretation of the bits
        return call_spec(plan.name, {CAST_FORMAL: view_dtype(args, kwargs)})
    if plan.canon is not None:
        args, kwargs = plan.canon(args, kwargs)
    values: dict[str, object] = {}
    for formal, k in at.items():
        if formal in kwargs:
            values[formal] = kwargs[formal]
        elif k is None:
            values[formal] = UNREAD_VALUE
        elif k < len(args):
            values[formal] = args[k]
    return call_spec(plan.name, values)


def random_draw_of(plan: Plan, args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """(whether this call of a random op draws (engine ``random_draws``), its ``generator``
    argument or None)."""
    draw = RANDOM_OPS[plan.name]
    ps = plan.params or ()
    values: dict[str, object] = {}
    for formal in (draw.p, *draw.train, "generator"):
        if formal is None:
            continue
        if formal in kwargs:
            values[formal] = kwargs[formal]
        elif formal in ps:
            k = ps.index(formal)
            if k < len(args):
                values[formal] = args[k]
    return random_draws(plan.name, values), values.get("generator")


def view_dtype(args: tuple, kwargs: dict) -> str | None:
    """The dtype of ``x.view(dtype)`` (engine DTYPE_VIEW_OPS) as text (``torch.int32``), or
    None for a view by a shape."""
    v = kwargs.get("dtype", args[1] if len(args) > 1 else None)
    return str(v) if isinstance(v, torch.dtype) else None


def _cast_dtype(args: tuple, kwargs: dict) -> str | None:
    """The dtype a cast (``x.to(...)``, ``x.type(...)``, ``x.type_as(other)``: engine
    CAST_OPS) converts to, as text (``torch.int64``, ``torch.LongTensor``), or None (no
    dtype: ``x.to("cpu")``): a dtype or tensor type among the arguments, or the template
    tensor's dtype."""
    for v in (kwargs.get("dtype"), kwargs.get("other"), *args[1:]):
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.Tensor):
            return str(v.dtype)
        if isinstance(v, str) and v.startswith("torch."):  # x.type("torch.LongTensor")
            return v
        if isinstance(v, type):  # x.type(torch.LongTensor), x.to(int)
            return f"{v.__module__}.{v.__name__}"
    return None


def _dims_of(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return (v,)
    if isinstance(v, (tuple, list, torch.Size)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in v):
        return tuple(v)
    return None


def reduction_of(plan: Plan, args: tuple, kwargs: dict) -> Reduction | None:
    """The dims a reduction or scan call states (for the engine's Shard(d) rule), or None."""
    at = plan.reduce_at
    if at is None or not args or not isinstance(args[0], torch.Tensor):
        return None
    dim_at, keep_at = at
    norm = NORMALISING.get(plan.name)
    if norm is not None:
        value = kwargs.get(norm[0], args[dim_at] if dim_at < len(args)
                           else _engine_ops.NORMALISING_DEFAULTS.get(plan.name))
        if isinstance(value, torch.Size):
            value = tuple(value)
        return normalising_reduction(plan.name, value, args[0].dim())
    dim = kwargs.get("dim", args[dim_at] if dim_at < len(args) else None)
    if isinstance(dim, bool) and plan.name in _engine_ops.VARIANCE_REDUCTIONS:
        dim = None  # x.var(True): the unbiased flag, every dim
    dims = _dims_of(dim)
    if dims is None and not (dim is None and plan.name in _engine_ops.SHARD_SUMMING):
        return None  # (no dim: a full reduction, for the sums the engine's pending rule reads)
    keep = kwargs.get("keepdim", args[keep_at] if keep_at is not None and keep_at < len(args) else False)
    if not isinstance(keep, bool):
        return None
    return Reduction(dims, keep, args[0].dim())


def _move_value(v: Any) -> object:
    if v is None or isinstance(v, int):  # an int dim, or a bool: batch_norm's training
        return v
    if isinstance(v, (tuple, list, torch.Size)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in v):
        return tuple(v)
    return UNREAD


def _index_item(v: Any) -> str | None:
    if v is None:
        return NEW
    if v is Ellipsis:
        return ELLIPSIS
    if isinstance(v, slice):
        return FULL if v == slice(None) else SLICE
    if isinstance(v, int) and not isinstance(v, bool):
        return INT
    return None  # a tensor, a list, a bool: not a view the rule reads


def move_of(plan: Plan, args: tuple, kwargs: dict) -> DimMove | Contraction | None:
    """The dims a view or join call moves (for the engine's Shard(d) rule), or None; for a
    contraction (einsum, matmul, linear, attention) what :func:`contraction_of` reads."""
    entry = MOVES.get(plan.name)
    if entry is None:
        return contraction_of(plan, args, kwargs) if plan.name in CONTRACTIONS else None
    if not args:
        return None
    family, formals, _ = entry
    first = args[0]
    if family in ("cat", "stack") and isinstance(first, (list, tuple)) and first:
        first = first[0]
    if not isinstance(first, torch.Tensor):
        return None
    values: dict[str, object] = {}
    rest = args[1:]
    if family == "index":
        idx = kwargs.get("indices", rest[0] if rest else None)
        items = tuple(_index_item(i) for i in (idx if isinstance(idx, tuple) else (idx,)))
        values["index"] = UNREAD if None in items else items
    elif family == "reshape":  # x.view(2, -1), x.view((2, -1)), torch.reshape(x, shape)
        shape = kwargs.get("shape", kwargs.get("size"))
        if shape is None:
            shape = rest[0] if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)) else rest
        values["shape"] = _move_value(shape)
    elif (family in ("permute", "squeeze") or plan.name == "flip") and (
            len(rest) > 1 or family == "permute" and rest and isinstance(rest[0], int)):
        values[formals[0]] = _move_value(rest)  # x.permute(1, 0), x.squeeze(0, 1), x.flip(0, 1)
    else:
        params = plan.params
        for formal in formals:
            names = FORMAL_ALIASES.get(formal, (formal,))
            at = next((params.index(n) for n in names if params is not None and n in params), None)
            given = next((n for n in names if n in kwargs), None)
            if given is not None:
                values[formal] = _move_value(kwargs[given])
            elif at is None:
                values[formal] = UNREAD  # a signature that does not name it
            elif at < len(args):
                values[formal] = _move_value(args[at])
    return make_move(plan.name, values, first.dim())


def contraction_of(plan: Plan, args: tuple, kwargs: dict) -> Contraction | None:
    """What a contraction call states (engine :mod:`~spmd_mypy.engine.contractions`), read
    by formal name as the plugin reads it: einsum's equation (torch.einsum's first
    positional argument), attention's ``is_causal``."""
    values: dict[str, object] = {}
    params = plan.params or ()
    for formal in CONTRACTIONS[plan.name][1]:
        if formal in kwargs:
            values[formal] = kwargs[formal]
        elif formal in params and params.index(formal) < len(args):
            values[formal] = args[params.index(formal)]
        elif formal == "equation" and args and isinstance(args[0], str):
            values[formal] = args[0]  # torch.einsum(*args)
    dim = values.get("dim")
    if (plan.name == "linalg_vecdot" and isinstance(dim, int) and not isinstance(dim, bool)
            and dim >= 0 and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2])):
        # vecdot's dim counted from the front of the broadcast shape: the rule reads it
        # from the back
        values["dim"] = dim - max(args[0].dim(), args[1].dim())
    return make_contraction(plan.name, values)


PASS_PLAN = Plan(Kind.PASS)
FACTORY_PLAN = Plan(Kind.FACTORY)

# --------------------------------------------------------------------------------------
# Signatures: the formal names torch's stubs give (what the mypy plugin reads).


def _tensor_where_canon(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``x.where(condition, y)`` is ``torch.where(condition, x, y)``."""
    if len(args) >= 2:
        return (args[1], args[0]) + tuple(args[2:]), kwargs
    kwargs = dict(kwargs)
    cond = kwargs.pop("condition", None)
    return (cond, args[0]) + tuple(args[1:]), kwargs


def _signature_overrides() -> dict[Any, tuple[tuple[str, ...], Callable | None]]:
    import torch.nn.functional as F

    where_params = ("condition", "input", "other")
    table: dict[Any, tuple[tuple[str, ...], Callable | None]] = {
        torch.where: (where_params, None),
        torch.Tensor.where: (where_params, _tensor_where_canon),
        torch.Tensor.__getitem__: (("self", "indices"), None),
        torch.Tensor.__setitem__: (("self", "indices", "value"), None),
        # torch.embedding(weight, indices) vs F.embedding(input=indices, weight)
        torch.embedding: (("weight", "indices", "padding_idx", "scale_grad_by_freq", "sparse"), None),
        F.embedding: (("indices", "weight", "padding_idx", "max_norm", "norm_type",
                       "scale_grad_by_freq", "sparse"), None),
        torch.Tensor.to: (("self", "dtype", "non_blocking", "copy", "memory_format"), None),
        # torch's testing override stops at dropout_p
        F.scaled_dot_product_attention: (("query", "key", "value", "attn_mask", "dropout_p",
                                          "is_causal", "scale", "enable_gqa"), None),
    }
    return table


_OVERRIDES: dict[Any, tuple[tuple[str, ...], Callable | None]] | None = None
_TESTING: dict[Any, Callable] | None = None


def _params_of(func: Any) -> tuple[tuple[str, ...] | None, str | None]:
    """(positional formal names, the *varargs name) of ``func``, or (None, None)."""
    global _TESTING
    if isinstance(func, torch._ops.OpOverload):
        try:
            return tuple(a.name for a in func._schema.arguments), None
        except Exception:  # pragma: no cover - schema always there in practice
            return None, None
    target = func
    if not inspect.isfunction(func):
        if _TESTING is None:
            _TESTING = torch.overrides.get_testing_overrides()
        target = _TESTING.get(func)
        if target is None:
            return None, None
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None, None
    names: list[str] = []
    varargs = None
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            varargs = p.name
        elif p.kind is not p.VAR_KEYWORD:
            names.append(p.name)
    return tuple(names), varargs


def _name_of(func: Any) -> tuple[str, str | None]:
    """(name, the property name for ``__get__``/``__set__``)."""
    if isinstance(func, torch._ops.OpOverload):
        return func._schema.name.split("::")[-1], None
    if isinstance(func, torch._ops.OpOverloadPacket):
        return func._qualified_op_name.split("::")[-1], None
    name = getattr(func, "__name__", "") or ""
    if name in ("__get__", "__set__", "__delete__"):
        owner = getattr(func, "__self__", None)
        return name, getattr(owner, "__name__", None)
    return name, None


def build_plan(func: Any) -> Plan:
    """The plan of ``func`` (what the check mode does with it)."""
    global _OVERRIDES
    # torch.distributed internals: the typed collectives type their own result.
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        ns = getattr(func, "namespace", None) or getattr(func, "_qualified_op_name", "").split("::")[0]
        if ns in _DIST_NAMESPACES:
            op = _name_of(func)[0]
            if ns in _FUNCOL_NAMESPACES and op in FUNCOL_OPS:
                return Plan(Kind.RAW, op)
            return PASS_PLAN
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.distributed"):
        # torch.distributed.all_reduce & co. hand a tensor argument with a torch function
        # to the mode: the raw collectives on typed tensors (spmd-raw-collective)
        name = getattr(func, "__name__", "")
        if name in SENDS and name != "P2POp":  # dist.send / isend (batch_isend_irecv's too)
            return Plan(Kind.SEND, name)
        return Plan(Kind.RAW, name) if name in RAW_COLLECTIVES else PASS_PLAN

    name, prop = _name_of(func)
    if name == "custom_function_call" and isinstance(func, torch._ops.HigherOrderOperator):
        # torch.func applying a custom autograd Function (setup_context style): Fn.apply
        # in check mode (_checking._apply) checks its arguments and types its result
        return PASS_PLAN
    each = foreach_op(name)
    if each is not None:
        return _foreach_plan(name, each)
    if func is torch.Tensor.backward:
        return Plan(Kind.BACKWARD, "backward")
    if func is torch.autograd.backward:
        return Plan(Kind.AUTOGRAD_BACKWARD, "backward")
    if func is torch.autograd.grad:
        return Plan(Kind.AUTOGRAD_GRAD, "grad")
    if name == "__set__" and prop == "grad":
        return Plan(Kind.SET_GRAD, "grad")
    if name == "__set__" and prop == "data":
        return Plan(Kind.SET_DATA, "data")
    if func is torch.Tensor.register_hook or func is torch.Tensor.register_post_accumulate_grad_hook:
        return Plan(Kind.GRAD_HOOK, name)
    if name == "__get__":
        if prop == "grad":
            return Plan(Kind.GRAD, "grad")
        op = PROPERTY_OPS.get(prop or "")
        if op is None:
            return PASS_PLAN
        return Plan(Kind.OP, op, spec=classify(op), params=("self",))
    if (name in FACTORIES and name not in RANDOM_LIKE) or name in EXTRA_FACTORIES:
        # the check mode takes the zeros these make for zeros (``fill_value`` of a fill)
        return Plan(Kind.FACTORY, name) if name in ZERO_FACTORIES or name in FILL_FACTORIES else (
            FACTORY_PLAN)
    if func is getattr(torch.Tensor, "module_load", None):
        # ``param.module_load(value, assign)``: the value load_state_dict swaps into the
        # parameter under torch.__future__.set_swap_module_params_on_conversion(True), in
        # place of ``param.copy_(value)``: checked and typed as that copy (the parameter keeps
        # its type; a value of another type was typed V, unreported)
        return Plan(Kind.OP, "copy_", spec=classify("copy_"), inplace=True,
                    params=("self", "src", "non_blocking"))
    if name in VALUE_READS:  # the values read out of the tensor world (Partial: an error)
        return Plan(Kind.VALUE_READ, name)
    swap = False
    if name in OPERATORS:
        name, swap = OPERATORS[name]
    elif name in NOT_OPS or name in EXTRA_PASSTHROUGH or name.startswith("_") or not name:
        # dunders not listed above, private helpers, metadata: not ops on values
        return PASS_PLAN

    if _OVERRIDES is None:
        _OVERRIDES = _signature_overrides()
    try:
        override = _OVERRIDES.get(func)
    except TypeError:  # unhashable
        override = None
    canon = None
    params: tuple[str, ...] | None
    varargs: str | None = None
    if override is not None:
        params, canon = override
    else:
        params, varargs = _params_of(func)
    inplace = (name.endswith("_") and not name.startswith("_")) or name == "__setitem__"
    return Plan(Kind.OP, name, spec=classify(name), swap=swap, inplace=inplace,
                params=params, varargs=varargs, canon=canon)


def _foreach_plan(name: str, each: str) -> Plan:
    """``torch._foreach_add_`` -> the plan of ``Tensor.add_`` (its formal names read the
    arguments at each list position; engine ``foreach_op``), kind FOREACH; a fused optimizer
    step (``torch._fused_adam_``) too, with the state lists it writes (``Plan.writes``)."""
    inplace, writes = foreach_writes(name)
    # (a fused step: its states are operands too, which add_'s signature would not read)
    func = None if writes else (getattr(torch.Tensor, each, None) or getattr(torch, each, None))
    inner = build_plan(func) if func is not None else None
    if inner is None or inner.kind is not Kind.OP:
        # not a Tensor method or torch function of that name, or a fused optimizer step:
        # the engine's op, every tensor argument an operand (a fused step's formals read
        # from its schema once, not per call)
        inner = Plan(Kind.OP, each, spec=classify(each), inplace=inplace,
                     params=_schema_formals(name) if writes else None)
    plan = Plan(Kind.FOREACH, name)
    plan.each = inner
    plan.writes = writes
    plan.first_step = FUSED_FIRST_STEP.get(name)
    return plan


def _schema_formals(name: str) -> tuple[str, ...] | None:
    """The formal names of ``torch.ops.aten.<name>`` (None if it has no such op)."""
    try:
        return tuple(a.name for a in getattr(torch.ops.aten, name).default._schema.arguments)
    except (AttributeError, RuntimeError):
        return None


def foreach_positions(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]] | None:
    """The arguments of a ``_foreach`` call at each list position: item i of every list or
    tuple argument (a list shorter than the first, a scalar list of another length: the
    same value everywhere), every other argument as it is; None if the first argument
    is not a list."""
    first = args[0] if args else kwargs.get("self")
    if not isinstance(first, (list, tuple)):
        return None
    n = len(first)

    def at(v: Any, i: int) -> Any:
        return v[i] if isinstance(v, (list, tuple)) and len(v) == n else v

    return [(tuple(at(a, i) for a in args), {k: at(v, i) for k, v in kwargs.items()})
            for i in range(n)]


# --------------------------------------------------------------------------------------
# Operand extraction.

_SCALARS = (int, float, complex)  # bool is an int


def extract(plan: Plan, args: tuple, kwargs: dict) -> tuple[list[tuple[Any, int]], list[torch.Tensor]]:
    """(operands in engine order as ``(value, argument class)``, the ``out=`` tensors).

    A value is a tensor or a Python scalar (scalars only where they are operands).
    """
    if plan.canon is not None:
        args, kwargs = plan.canon(args, kwargs)
    if plan.swap and len(args) >= 2:
        args = (args[1], args[0]) + tuple(args[2:])
    ops: list[tuple[Any, int]] = []
    outs: list[torch.Tensor] = []
    positional = plan.positional
    n_formal = len(positional) if positional is not None else 0
    for i, a in enumerate(args):
        if positional is None:
            # no signature known: every tensor is an operand, scalars are not
            cls = OPERAND
        elif i < n_formal:
            cls = positional[i]
        else:
            cls = OPERAND  # *varargs (einsum's operands) or unknown extras
        _add(ops, outs, a, cls)
    if kwargs:
        keyword = plan.keyword
        for k, v in kwargs.items():
            kcls = keyword.get(k)
            _add(ops, outs, v, _formal_class(k, plan.name) if kcls is None else kcls)
    return ops, outs


def _add(ops: list, outs: list, a: Any, cls: int) -> None:
    if cls == SKIP or a is None:
        return
    if isinstance(a, torch.Tensor):
        if cls == OUT:
            outs.append(a)
        else:
            ops.append((a, cls))
        return
    if isinstance(a, (list, tuple)):
        for item in a:
            if isinstance(item, torch.Tensor):
                if cls == OUT:
                    outs.append(item)
                else:
                    ops.append((item, cls))
        return
    if cls == SCALAR_OK and isinstance(a, _SCALARS):
        ops.append((a, cls))


def role_of(spec: OpSpec, position: int, cls: int) -> Role:
    """The engine role of the operand at ``position`` of argument class ``cls``."""
    return Role.INDEX if cls == INDEX else spec.role(position)


def carries_no_gradient(cls: int) -> bool:
    """An index, a condition or a mask is never differentiated."""
    return cls == INDEX or cls == GRADFREE


__all__ = ["Plan", "Kind", "build_plan", "extract", "role_of", "carries_no_gradient",
           "OPERATORS", "PROPERTY_OPS", "NON_OPERAND_NAMES", "SCALAR_OPERAND_NAMES"]
