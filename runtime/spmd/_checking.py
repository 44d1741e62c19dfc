"""The runtime check mode: ``with spmd.typecheck():`` tracks SPMD types on live tensors.

Inside the block every torch op, Tensor method, operator and
``torch.nn.functional`` call is typed by the same rule engine as the mypy
plugin (:mod:`spmd_mypy.engine`), and the first op or collective that breaks
the rules raises :class:`SpmdTypeError` -- before the op runs, so nothing is
mutated -- with the engine's code and message::

    with spmd.typecheck():
        h = spmd.declare(h, Tensor[P["tp"]])
        torch.relu(h)   # SpmdTypeError: Partial on "tp" (h: Tensor[P["tp"]]) cannot go
                        # through relu ...  [spmd-partial-nonlinear]

How types are tracked
    A tensor's type lives in a side table keyed by the tensor object (weakly:
    the entry goes when the tensor does), not in the tensor's ``__dict__`` --
    an attribute would be pickled with the tensor and break ``torch.load``
    with ``weights_only=True``.  Types stay on the tensors after the block
    (``spmd.typeof`` reads them) and are seen again by a later block.

What is typed
    ``spmd.declare(x, Tensor[...])`` stamps a type; factories (``torch.zeros``,
    ``randn``, ``*_like``, ``new_*``) make untyped tensors, gradual (unknown on
    every axis) unless ``typecheck(strict=True)``; every other op's result gets
    the engine's type, on each tensor output (``split``/``chunk``/``unbind``
    too).  The typed collectives (``spmd.all_reduce``...) call
    :func:`on_collective` after they ran, which checks ``src`` against the
    input's tracked type and the pair against the table, and stamps ``dst``;
    the ops on a collective's internal buffers are not the user's and never
    raise (``suspended()`` pauses checking altogether).

Operands
    Read from the call the way the plugin reads them from torch's stubs (see
    :mod:`._torch_ops`): tensors are operands; Python scalars where they are
    summands or factors (``x + 1``, ``x * 2``, ``where(c, x, 0.)``); dims,
    shapes, dtypes and ``alpha=`` never; index/mask/condition tensors are
    operands in a non-linear role that carry no gradient.

No-gradient relaxation (SPEC section 3)
    An operand can carry a gradient iff ``torch.is_grad_enabled() and
    t.requires_grad`` at the time of the op.  This covers ``torch.no_grad()``,
    ``torch.inference_mode()``, the body of a custom autograd Function's
    ``forward`` (autograd runs it with grad disabled), ``.detach()`` and
    ``.data`` (their results do not require grad) -- and, more generally than
    the static checker can see, any tensor that does not require grad (a
    buffer, a frozen parameter, a tensor made by a factory).  An Invariant
    operand that cannot carry a gradient mixes with R or V as if it were R.

In-place ops (``add_``, ``x += y``, ``x[i] = y``, ``out=``, ``F.relu(x, inplace=True)``)
    may not change the mutated tensor's type (engine ``check_inplace``); an
    untyped target learns the result's type on the axes it did not know.

``loss.backward()`` / ``torch.autograd.backward`` / ``torch.autograd.grad``
    without an explicit gradient check the loss (I or P on every known axis);
    ``torch.autograd.grad``'s results and ``x.grad`` get the dual type.

Inside autograd
    Autograd's engine runs gradient hooks and custom Functions' ``backward``
    with no torch function mode; hooks registered inside the block and every
    Function's backward run while a block is open push the mode again
    (:func:`_in_mode`), so the ops there are checked and typed like the rest.
    A typed Function's backward receives the duals of forward's declared
    output types; its declared signature (engine ``duality.check_signature``)
    and its results (``duality.check_returned``) are checked against the duals
    of forward's types, the static checker's rules.  What forward returns is
    checked at ``Fn.apply`` against its declared result
    (``duality.check_forward_result``) before the result is given that type.

Messages
    Operands are named after the caller's variables (``h``, ``self.weight``),
    found by identity in the calling frame when an error is raised.

Cost
    Outside the block nothing is installed: ``spmd.declare``/``spmd.reveal``
    are a global read.  Inside, each call costs a cached plan lookup, a side
    table lookup per tensor operand, and when an operand is typed a cached
    engine result; ops on untyped tensors only (library code, data loading)
    take the short path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import threading
import types
import weakref
import zlib
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from spmd_mypy.engine.collectives import (RAW_COLLECTIVES, RAW_OUTPUT_KWARGS, RAW_NN_COLLECTIVES as RAW_NN_NAMES,
                                          RAW_FUNCTIONAL_COLLECTIVES, declaration_conflict, declaration_error,
                                          COMPARE, IndexValue,
                                          RAW_OP_PARAMS,
                                          check_argument, check_collective,
                                          raw_collective_error, raw_reduce_op,
                                          RAW_BROADCASTS, raw_broadcast_error,
                                          mesh_moved_error, pending_left, pending_refusal,
                                          duplicated_operand_error, duplicates_harmless,
                                          summed_blocks_error, sums_blocks)
from spmd_mypy.engine import duality
from spmd_mypy.engine.contractions import Contraction, partial_sum
from spmd_mypy.engine.errors import SpmdError, SpmdTypeError
from spmd_mypy.engine.ops import (FILL_FACTORIES, PER_OPERAND_OPS, Operand,
                                  OpSpec, Reduction, Role, check_backward, check_data_assignment,
                                  check_inplace, check_send, check_value_read, implicit_partial_error,
                                  pending_left_error, pending_kind, MEAN_REDUCTIONS, loss_reduction, summing_name,
                                  AFFINE_TERMS, claimed_partial_error,
                                  optimizer_state_error, partial_op, propagate, reduced_partial_error,
                                  reduced_partial_sum, PENDING_ADD, PENDING_JOIN, PENDING_KEEP,
                                  PENDING_REDUCTIONS, PENDING_SCALE, PENDING_TENSOR_SCALE,
                                  keeps_pending_dtype, scales_pending,
                                  propagate_each, random_state_error)
from spmd_mypy.engine.types import Kind as TKind
from spmd_mypy.engine.types import VARYING, LocalType, SpmdType, format_axes, format_type, shard_dims_match
from spmd_mypy.engine.views import INPLACE_VIEWS, DimMove

from spmd_mypy.engine.global_spmd import propagate as global_propagate
from spmd_mypy.engine.megatron import BY_FUNCTION_CLASS as MEGATRON_BY_FUNCTION_CLASS
from spmd_mypy.engine.megatron import MEGATRON_DEFINING_MODULES, MappingTypes

from . import _dist_utils, _global_check, _torch_ops
from ._torch_ops import (Kind, Plan, build_plan, carries_no_gradient, extract, move_of,
                         random_draw_of, reduction_of, role_of, spec_of)
from ._types import local_type_of, unalias
from ._types import spmd_type_of_annotation as _declared_type_of

# True while a ``typecheck()`` block is open (the collectives read it before calling
# on_collective; declare/reveal read it to do nothing outside).
ACTIVE: bool = False

_T = TypeVar("_T")
_M = TypeVar("_M")

# --------------------------------------------------------------------------------------
# The side table: id(tensor) -> (weakref to it, its type).


_TYPES: dict[int, tuple[weakref.ref, SpmdType]] = {}

# Types are interned: every type in the side table is the canonical instance of its
# value, so the engine-result cache can key on ``id(type)`` (hashing an SpmdType walks
# dataclasses and enums: slow on the per-op path).  Canonical instances live forever;
# a program has few distinct types.
#
# Types are interned per mesh (the current binding of _mesh): the canonical instance tells
# the mesh a value's type was made under, at no cost on the per-op path (an operand whose
# type is not canonical under the current mesh takes the slow path, :func:`_moved`).  Two
# meshes can name their axes alike ("dp", "tp" of tp=2 and of tp=4, resharding in one
# program): a value typed on one's "tp" used under the other is an error (spmd-mesh), unless
# each of its axes means the same there (its V/S/P axes span the same ranks, its R/I axes
# ranks holding one value under the old mesh).
_CANON: dict[SpmdType, SpmdType] = {}  # of the current mesh
_CANON_IDS: set[int] = set()
_CANONS: dict[Any, tuple[dict[SpmdType, SpmdType], set[int]]] = {None: (_CANON, _CANON_IDS)}
_OWNER: dict[int, Any] = {}  # id(canonical type) -> the binding it was made under (None: none)
_MOVES: dict[tuple[int, int], Any] = {}  # (id(type), id(binding)) -> None or the moved axis


def _canon(t: SpmdType) -> SpmdType:
    if id(t) in _CANON_IDS:
        return t
    c = _CANON.get(t)
    if c is None:
        if id(t) in _OWNER:  # canonical under another mesh: a copy of its own here
            t = dataclasses.replace(t)
        c = _CANON[t] = t
        _CANON_IDS.add(id(t))
        _OWNER[id(t)] = _BINDING
    return c


def _switch_mesh(binding: Any) -> None:
    """``spmd.set_mesh``: the types made from now on are interned under ``binding``."""
    global _CANON, _CANON_IDS, _BINDING
    tables = _CANONS.get(binding)
    if tables is None:
        tables = _CANONS[binding] = ({}, set())
    _CANON, _CANON_IDS = tables
    _BINDING = binding


_BINDING: Any = None
_INVARIANT_KINDS = (TKind.R, TKind.I)


def _moved(x: torch.Tensor, t: SpmdType, op: str | None = None) -> SpmdType:
    """``x``'s type ``t`` is not canonical under the current mesh: made under another mesh
    (or before a mesh was set).  Raises spmd-mesh when an axis of ``t`` means other ranks
    here; else ``x`` is retyped under the current mesh (the next op takes the fast path)."""
    owner, cur = _OWNER.get(id(t)), _BINDING
    moved = None
    if owner is not None and cur is not None and owner is not cur:
        key = (id(t), id(cur))
        if key in _MOVES:
            moved = _MOVES[key]
        else:
            moved = _MOVES[key] = _moved_axis(t, owner, cur)
    if moved is not None:
        a, then, now = moved
        raise SpmdTypeError(mesh_moved_error(
            _texts([x], ["x"])[0], t, a, then, now, owner.names, cur.names, op=op))
    if moved is None:
        t = _canon(t)
        _set(x, t)
        if owner is not None and owner is not cur:
            _ORIGIN.setdefault(id(t), owner)
    return t


def _moved_axis(t: SpmdType, owner: Any, cur: Any) -> Any:
    """(axis, its ranks under ``owner``, under ``cur``) for the first axis of ``t`` whose
    meaning differs between the two meshes, else None."""
    invariant = [a for a, lt in t.axes if lt.kind in _INVARIANT_KINDS and a in owner.names]
    span: set[int] | None = None
    for a, lt in t.axes:
        if a not in owner.names or a not in cur.names:
            continue  # an axis one of them does not have: nothing to compare
        try:
            then, now = owner.ranks_of((a,)), cur.ranks_of((a,))
            if then == now:
                continue
            if lt.kind in _INVARIANT_KINDS:
                if span is None:
                    span = set(owner.ranks_of(tuple(invariant)))
                if set(now) <= span:
                    continue  # one value on every rank of the new axis
        except Exception:  # noqa: BLE001 - a mesh whose groups torch cannot give
            continue
        return a, then, now
    return None


# (id(type), id(current binding), collective axes, id(owner binding), number of meshes) ->
# the duplicates of :func:`_duplicates` (types and bindings live for the program)
_DUPLICATES: dict[tuple, list] = {}
# id(canonical type) -> the binding a value of that type came from when it was retyped under
# the current mesh (:func:`_moved`): the mesh its axes that the current mesh lacks belong to
_ORIGIN: dict[int, Any] = {}


def _foreign(a: str, lt: LocalType, names: tuple[str, ...], cur: Any) -> str | None:
    """"same" when ``lt`` says the ranks of ``a`` hold one value (R, I), "blocks" when they
    hold different blocks of one (S(i)), for an axis ``a`` that the current mesh lacks."""
    if a in cur.names or a in names:
        return None
    if lt.kind in _INVARIANT_KINDS:
        return "same"
    return "blocks" if lt.kind is TKind.V and lt.dim is not None else None


def _duplicates(t: SpmdType, names: tuple[str, ...], owner: Any) -> list:
    """A collective over ``names`` of the current mesh on a value of type ``t`` (interned;
    made under ``owner``), R, I or S(i) on axes another mesh has and the current one lacks:
    per such mesh and kind, ``(kind, that mesh, those axes, their group of ranks there, the
    group of names here)`` when the group here holds two or more of those ranks.  Kind
    "same" (R, I): they hold the same data, which the collective would take once per rank;
    "blocks" (S): different blocks of one value, which a sum would add (docs/meshes.md)."""
    cur = _BINDING
    if cur is None or not t.axes:
        return []
    if all(_foreign(a, lt, (), cur) is None for a, lt in t.axes):
        return []  # the common case: every R, I, S axis is the current mesh's
    from . import _mesh
    key = (id(t), id(cur), names, id(owner), len(_mesh._bindings))
    found = _DUPLICATES.get(key)
    if found is not None:
        return found
    found = []
    try:
        group = cur.ranks_of(names) if all(n in cur.names for n in names) else None
    except Exception:  # noqa: BLE001 - a mesh whose groups torch cannot give
        group = None
    if group is not None and len(group) > 1:
        meshes = ([owner] if owner is not None and owner is not cur else []) + [
            b for b in _mesh._live_bindings(cur.world) if b is not cur and b is not owner]
        by_mesh: dict[tuple[str, int], tuple[Any, list[str]]] = {}
        for a, lt in t.axes:
            kind = _foreign(a, lt, names, cur)
            if kind is None:
                continue
            having = [b for b in meshes if a in b.names]
            if not having:
                continue
            if having[0] is not owner and len(having) > 1:
                try:  # meshes naming an axis alike: whose it is is not known, unless all agree
                    if len({tuple(b.ranks_of((a,))) for b in having}) > 1:
                        continue
                except Exception:  # noqa: BLE001 - a dead mesh: nothing to compare
                    continue
            by_mesh.setdefault((kind, id(having[0])), (having[0], []))[1].append(a)
        for (kind, _), (b, axes) in by_mesh.items():
            try:
                holders = b.ranks_of(tuple(axes))
            except Exception:  # noqa: BLE001 - a dead mesh: nothing to compare
                continue
            if len(set(group) & set(holders)) > 1:
                found.append((kind, b, tuple(axes), holders, group))
    _DUPLICATES[key] = found
    return found


def _check_duplicates(x: torch.Tensor, t: SpmdType, op: str, names: tuple[str, ...],
                      owner: Any, reduce_op: str) -> list:
    """:func:`_duplicates`; raises spmd-mesh when ``op`` is not right on the duplicated data
    (or sums different blocks).  Returns the duplicates (kind "same")."""
    if owner is None or owner is _BINDING:
        owner = _ORIGIN.get(id(t))
    found = _duplicates(t, names, owner)
    if not found:
        return found
    for kind, b, axes, holders, group in found:
        if kind == "same" and not duplicates_harmless(op, reduce_op):
            raise SpmdTypeError(duplicated_operand_error(
                op, _texts([x], ["x"])[0], t, names, axes, holders, group, b.names,
                _BINDING.names, reduce_op=reduce_op))
        if kind == "blocks" and sums_blocks(op, reduce_op):
            raise SpmdTypeError(summed_blocks_error(
                op, _texts([x], ["x"])[0], t, names, axes, holders, group, b.names,
                _BINDING.names))
    return [f for f in found if f[0] == "same"]


def _no_longer_invariant(rtype: SpmdType, op: str, reduce_op: str, found: list) -> SpmdType:
    """The result of a collective (or convert) over an axis whose group held several ranks of
    one value: those ranks no longer hold one value (each cut its own block, or took its own
    group's max), so the result is V on those axes; a reinterpret moves no data, and a max
    (min) over a group holding every rank of the value gives them one value still."""
    if op == "reinterpret":
        return rtype
    for _kind, _b, same, holders, group in found:
        if op == "all_reduce" and set(holders) <= set(group):
            continue
        for a in same:
            lt = rtype.get(a)
            if lt is not None and lt.kind in _INVARIANT_KINDS:
                rtype = rtype.replace(a, VARYING)
    return rtype


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key",)
    key: int


def _forget(ref: _Ref) -> None:
    entry = _TYPES.get(ref.key)
    if entry is not None and entry[0] is ref:
        del _TYPES[ref.key]


# Zeros a factory made in the check mode (``torch.zeros_like(p)``: an optimizer's moments,
# a buffer to accumulate into; engine ZERO_FACTORIES), by id, with a weak reference.  An op
# that WRITES such a tensor (``exp_avg.lerp_(grad, w)``, ``out=``, a fused step's states)
# while it is still all zeros reads it as what it is, no term of any type (engine
# ``Operand.zero``): no untyped operand in a strict block, and the zeros take the result's
# type (``mutated_by``).  "Still all zeros" is asked of the values (one ``any()`` when such
# an op comes, then the tensor is typed or forgotten): writes that move no version counter
# (``.data``, numpy or DLPack views, torch.distributed's receives, a NaN from ``0 * inf``)
# cannot make a stale zero.  Read by any other op it stays an untyped operand.
_ZEROS: dict[int, Any] = {}


def _forget_zero(ref: _Ref) -> None:
    if _ZEROS.get(ref.key) is ref:
        del _ZEROS[ref.key]


def _all_zeros(v: torch.Tensor) -> bool:
    """Whether ``v`` is a factory's zeros made in the check mode and all zeros still (one
    reduction; a tensor found written is forgotten)."""
    ref = _ZEROS.get(id(v))
    if ref is None or ref() is not v:
        return False
    try:
        with torch.no_grad():
            zero = not bool(v.any())
    except Exception:  # noqa: BLE001 - a tensor without values (meta, fake): unknown
        zero = False
    if not zero:
        del _ZEROS[id(v)]
    return zero


def _note_zero(plan: Plan, out: Any, args: tuple, kwargs: dict) -> None:
    """A factory's result that is zero everywhere: zeros, or a fill with 0 (not one that
    requires a gradient: a parameter to be)."""
    if type(out) is not torch.Tensor or out.requires_grad:
        return
    if plan.name in FILL_FACTORIES:
        at = 2 if plan.name == "new_full" else 1  # (self, size, fill_value), (size|input, fill_value)
        fill = kwargs.get("fill_value", args[at] if len(args) > at else None)
        if not _is_zero(fill):
            return
    ref = _Ref(out, _forget_zero)
    ref.key = id(out)
    _ZEROS[id(out)] = ref


def _written_zeros(ops: list, types: list, written: Sequence[Any]) -> list:
    """``types`` with the factory zeros the op writes read as zeros (None: ``_is_zero``)."""
    out = types
    for i, (v, _) in enumerate(ops):
        if types[i] is _UNTYPED and any(v is w for w in written) and _all_zeros(v):
            if out is types:
                out = list(types)
            out[i] = None
    return out


# Tensors the user assigned to some ``x.grad`` (typed at the time), by id: their type is
# theirs.  Weak values: an entry goes with its tensor.
_ASSIGNED_GRADS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
# The gradient type a hook gave a tensor's gradient (``x.register_hook(lambda g:
# spmd.all_reduce(g, "dp", src=P, dst=R))``: R, not the dual P), by the tensor's id, with a
# weak reference to it: what ``x.grad`` reads are typed when autograd copied the hook's result.
_HOOKED_GRADS: dict[int, tuple[Any, SpmdType]] = {}
# The tensor whose ``.grad`` each assigned gradient was put in, by the gradient's id: (a weak
# reference to the gradient, one to its owner).  The type of what autograd accumulates into
# the gradient is the dual of the owner's.
_GRAD_OWNERS: dict[int, tuple[Any, Any]] = {}


def _assign_grad(owner: Any, g: torch.Tensor) -> None:
    """``owner.grad = g`` (by the user or by a hook) with ``g`` typed: ``g`` keeps its type."""
    key = id(g)
    _ASSIGNED_GRADS[key] = g
    _ZEROED.pop(key, None)
    if isinstance(owner, torch.Tensor):
        _note_grad_owner(g, owner)


def _note_grad_owner(g: torch.Tensor, owner: torch.Tensor) -> None:
    key = id(g)
    _GRAD_OWNERS[key] = (weakref.ref(g, lambda _r, k=key: _GRAD_OWNERS.pop(k, None)),
                         weakref.ref(owner))


def _note_hooked(x: torch.Tensor, t: SpmdType) -> None:
    """The gradient type a hook gave ``x``'s gradient (``_HOOKED_GRADS``)."""
    key = id(x)
    _HOOKED_GRADS[key] = (weakref.ref(x, lambda _r, k=key: _HOOKED_GRADS.pop(k, None)), t)


def _grad_owner(g: torch.Tensor) -> Any:
    """The tensor ``g`` was assigned to as its ``.grad`` and still is, or None."""
    entry = _GRAD_OWNERS.get(id(g))
    owner = entry[1]() if entry is not None and entry[0]() is g else None
    if owner is None:
        return None
    with suspended():
        return owner if owner.grad is g else None


def _accumulating(backward: Any, args: Any, kwargs: Any) -> Any:
    """Run a backward; a tensor the user assigned to some ``p.grad`` that autograd then
    accumulated into (its version moved) holds the sum of what it held and autograd's new
    gradient (the dual of ``p``'s type): typed by ``add_``'s rule (:func:`_accumulated_type`),
    which raises where the sum has no type (``p.grad = all_reduce(p.grad, "tp", src=P,
    dst=R)`` after every micro-batch without zeroing: the next backward adds a Partial
    summand to the R sum, the earlier micro-batches counted once per reduction; it passed).
    Zeroed in place (``zero_()``, ``zero_grad(set_to_none=False)``) before the backward, it
    holds autograd's gradient again: later reads give the dual, not the type it was assigned
    with (the stale R hid a forgotten reduction).  With ``create_graph=True`` autograd puts
    the sum in a new tensor (``p.grad + new``): typed by the same rule.  Read during the
    backward (a hook) it was
    typed there; an owner with a ``register_hook`` hook (what autograd adds is the hook's
    result, checked by the hook's wrapper) or a hook the check mode did not wrap: the
    dual, or the hook's type, at later reads, as before.  In-place ops the check mode runs
    on it (clipping, zeroing) are over before the backward starts; gradients autograd did
    not touch keep their type."""
    if not _ASSIGNED_GRADS:
        return backward(*args, **kwargs)
    versions = [(g, g._version, _still_zeroed(g)) for g in _ASSIGNED_GRADS.values()]
    # create_graph=True (Tensor.backward's and torch.autograd.backward's fourth parameter):
    # autograd accumulates out of place, ``p.grad = p.grad + new``: the owners whose grad is
    # an assigned tensor now, to find the new sums after
    create = args[3] if len(args) > 3 else kwargs.get("create_graph", False)
    owners = [(g, v, o) for g, v, zeroed in versions if not zeroed
              for o in (_grad_owner(g),) if o is not None] if create else []
    outer = dict(_BACKWARD_VERSIONS)
    _BACKWARD_VERSIONS.update((id(g), v) for g, v, _ in versions)
    ok = False
    try:
        result = backward(*args, **kwargs)
        ok = True
    finally:
        read = dict(_BACKWARD_VERSIONS)
        _BACKWARD_VERSIONS.clear()
        _BACKWARD_VERSIONS.update(outer)
        error: SpmdTypeError | None = None
        for g, version, owner in owners if ok else ():
            with suspended():
                now = owner.grad
            assigned = _get(g)
            if (g._version != version or now is g or not isinstance(now, torch.Tensor)
                    or not assigned or _ASSIGNED_GRADS.get(id(now)) is now
                    or _hooks_replace_accumulation(owner)):
                continue
            try:
                _set(now, _accumulated_type(owner, now, assigned))
                _assign_grad(owner, now)
            except SpmdTypeError as e:
                error = error or e
        for g, version, zeroed in versions:
            base = read.get(id(g), version)
            if g._version == base:
                # autograd did not accumulate into it since it was last accounted for: a
                # read in a hook typed the sum, in-place ops the check mode ran typed theirs
                continue
            owner = _grad_owner(g) if ok and not (zeroed and base == version) else None
            assigned = _get(g) if owner is not None else None
            if owner is None or not assigned or _hooks_replace_accumulation(owner):
                _ASSIGNED_GRADS.pop(id(g), None)
                continue
            try:
                _set(g, _accumulated_type(owner, g, assigned))
            except SpmdTypeError as e:
                _ASSIGNED_GRADS.pop(id(g), None)
                error = error or e
        if error is not None:
            raise error
    return result


def _hooks_replace_accumulation(x: Any) -> bool:
    """``x`` has a ``register_hook`` hook (autograd accumulates what it returns: the check
    mode's wrapper checks that sum) or a gradient hook the check mode did not wrap
    (registered before it started: it may have reduced the gradient)."""
    with suspended():
        pre = getattr(x, "_backward_hooks", None)
        post = getattr(x, "_post_accumulate_grad_hooks", None)
    return bool(pre) or any(not getattr(h, "_spmd_wrapped", False) for h in (post or {}).values())


# Assigned gradients zeroed in place (``p.grad.zero_()``, ``zero_grad(set_to_none=False)``):
# id -> the version the zeroing left.  A backward that starts from that version accumulates
# autograd's gradient into zeros: the sum is autograd's gradient (the dual), not the assigned
# type plus it.
_ZEROED: dict[int, int] = {}


def _zeroed(t: Any) -> None:
    if isinstance(t, torch.Tensor) and _ASSIGNED_GRADS.get(id(t)) is t:
        _ZEROED[id(t)] = t._version


def _zero_fill(args: Any, kwargs: Any) -> bool:
    """``fill_(0)``, ``fill_(0.0)``: an exact zero fill (a tensor value: not counted)."""
    value = args[1] if len(args) > 1 else kwargs.get("value")
    return type(value) in (int, float) and value == 0


def _still_zeroed(g: torch.Tensor) -> bool:
    """``g`` (an assigned gradient) was zeroed in place and holds zeros still, when a
    backward starts.  Its version may have moved since the zeroing without a write to its
    own elements: views of one flat bucket (DDP-style, ``p.grad = flat[a:b].view_as(p)``)
    share one version counter, so zeroing the next parameter's gradient moves this one's.
    A moved version is then checked by value (all zeros: autograd's sum is its gradient),
    and the entry moved along."""
    zeroed_at = _ZEROED.get(id(g))
    if zeroed_at is None:
        return False
    if zeroed_at == g._version:
        return True
    with suspended(), torch.no_grad():
        zero = not bool(g.any())
    if zero:
        _ZEROED[id(g)] = g._version
    return zero


# While a backward runs: the versions the assigned gradients had when it started, by id (a
# hook that reads ``p.grad`` in the middle of the backward reads autograd's accumulation into
# the tensor it assigned in an earlier backward when the version moved).  A read that typed
# the sum, and an in-place op the check mode ran on it (a hook scaling another parameter's
# gradient), move the entry along: a version past it is autograd's accumulation.
_BACKWARD_VERSIONS: dict[int, int] = {}


def _versions_before(targets: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
    """The versions of the assigned gradients among an in-place op's targets (a backward
    running: :data:`_BACKWARD_VERSIONS`), before the op."""
    return [(t, t._version) for t in targets
            if id(t) in _BACKWARD_VERSIONS and _ASSIGNED_GRADS.get(id(t)) is t]


def _shift_versions(before: list[tuple[torch.Tensor, int]]) -> None:
    """The op's own version bumps are no accumulation by autograd."""
    for t, v in before:
        _BACKWARD_VERSIONS[id(t)] += t._version - v


def _accumulated_type(x: torch.Tensor, g: torch.Tensor, assigned: SpmdType) -> SpmdType:
    """``g``, the tensor the user assigned to ``x.grad`` (of type ``assigned``), into which
    this backward accumulated autograd's new gradient (the dual of ``x``'s type): the type
    of the sum, by ``add_``'s rule, which raises where the sum has none (a gradient
    all-reduced in a post-accumulate hook in the first micro-batch, R, plus the next
    micro-batch's Partial gradient: the hook's second all-reduce would sum the first
    micro-batch's twice, and without it the sum is wrong)."""
    t = _get(x)
    if not t:
        return assigned
    plan = _plan(torch.Tensor.add_)
    spec = plan.spec
    if spec is None:
        return assigned
    ops, _ = extract(plan, (g, g), {})

    def typed(g_text: str) -> Any:
        return propagate(spec, [
            Operand(typ, text, False, role_of(spec, i, cls), tuple(g.shape))
            for i, ((_, cls), typ, text) in enumerate(zip(
                ops, (assigned, t.dual()), (g_text, "autograd's new gradient")))])

    res = typed("x.grad")
    if res.errors:  # named for the message only (the caller's frame is searched for them)
        texts = _texts([g], ["x.grad"])
        res = typed(texts[0])
        err = res.errors[0]
        head, sep, _ = err.message.partition(" in add_: ")
        if err.code == "spmd-partial-affine" and sep:
            # add_'s own fix (reduce the Partial term first) is no step the user can take
            # here: the fix is where the reduction and the zeroing go
            g_text = texts[0]
            # optimizer.zero_grad() zeroes its own parameters only: a frozen weight left with
            # requires_grad=True outside the optimizer keeps accumulating
            x_text = g_text[:-len(".grad")] if g_text.endswith(".grad") else ""
            frozen = (f"if {x_text} is frozen, {x_text}.requires_grad_(False)" if x_text
                      else "a frozen weight: requires_grad_(False)")
            err = SpmdError(err.code, (
                f"{head} as this backward accumulates into {g_text}: the all-reduce the sum "
                f"needs would count what {g_text} held once per rank; reduce {g_text} once, "
                f"after the last micro-batch's backward, or set {g_text} = None before the "
                f"next backward (model.zero_grad() for all of a model's parameters; "
                f"optimizer.zero_grad() only for those it updates); {frozen} (no gradient at "
                f"all)"))
        raise SpmdTypeError(err)
    return _canon(res.type)


def _get(t: Any) -> SpmdType | None:
    entry = _TYPES.get(id(t))
    if entry is not None and entry[0]() is t:
        return entry[1]
    if _functorch_active() and isinstance(t, torch.Tensor) and _is_wrapped(t):
        # torch.func: a transform's wrapper of a typed tensor (grad's input, vmap's batch
        # read per example) has the type of the tensor it wraps
        return _get(_get_unwrapped(t))
    return None


_functorch_active = torch._C._are_functorch_transforms_active
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_get_unwrapped = torch._C._functorch.get_unwrapped


def _set(t: torch.Tensor, typ: SpmdType) -> None:
    if id(typ) not in _CANON_IDS:
        typ = _canon(typ)
    key = id(t)
    entry = _TYPES.get(key)
    if entry is not None and entry[0]() is t:
        _TYPES[key] = (entry[0], typ)
        return
    ref = _Ref(t, _forget)
    ref.key = key
    _TYPES[key] = (ref, typ)


def _stamp_outputs(result: Any, typ: SpmdType, skip: Sequence[Any] = ()) -> None:
    if isinstance(result, torch.Tensor):
        if not skip or not any(result is s for s in skip):
            _set(result, typ)
    elif isinstance(result, (tuple, list)):
        for r in result:
            if isinstance(r, torch.Tensor) and (not skip or not any(r is s for s in skip)):
                _set(r, typ)


def _gradient_free(ops: list, grad_on: bool) -> bool:
    """No operand of the op can carry a gradient (engine ops.check_inplace's relaxation)."""
    return not grad_on or not any(isinstance(v, torch.Tensor) and v.requires_grad for v, _ in ops)


# --------------------------------------------------------------------------------------
# Operand texts for messages: the caller's variable names (only computed on an error).

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_SKIP_DIRS = (_RUNTIME_DIR + os.sep, _TORCH_DIR + os.sep, os.path.dirname(contextlib.__file__) + os.sep)


# Megatron's mappings.py files (seen at a mapping Function's apply): its wrapper frames are
# skipped too, so a message names the user's tensor, not the wrapper's ``input_``
_SKIP_FILES: set[str] = set()


def _user_frame() -> Any:
    f: Any = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_SKIP_DIRS) and fn not in _SKIP_FILES:
            return f
        f = f.f_back
    return None


def _called_by_torch() -> bool:
    """Whether the op's caller (the first frame outside this package) is torch's own code."""
    f: Any = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_RUNTIME_DIR + os.sep):
            return fn.startswith(_TORCH_DIR + os.sep)
        f = f.f_back
    return False


def _texts(values: Sequence[Any], defaults: Sequence[str], written: bool = True) -> list[str]:
    """The names the caller gives ``values`` (for a message); ``defaults`` where none is
    found.  ``written``: else the operands the caller's expression writes (not when the
    values are not its operands: a module's parameters).  Never raises: a message must not
    turn into another exception."""
    try:
        return _named_texts(values, defaults, written)
    except Exception:  # noqa: BLE001 - an object of the caller's whose attributes raise
        return [d if isinstance(v, torch.Tensor) else repr(v) for v, d in zip(values, defaults)]


def _named_texts(values: Sequence[Any], defaults: Sequence[str], written: bool = True) -> list[str]:
    frame = _user_frame()
    names: dict[int, str] = {}
    named: list[tuple[str, torch.Tensor]] = []
    if frame is not None:
        # the caller's tensors by name; a module's parameters (self.weight, and those of a
        # module the caller holds: model.fc.weight); then their gradients (p.grad: the
        # operands of an optimizer's step or of clip_grad_norm_)
        modules: list[tuple[str, torch.nn.Module]] = []
        held: list[tuple[str, torch.Tensor]] = []  # named after the plain names
        for scope in (frame.f_locals, frame.f_globals):
            for k, v in scope.items():
                if k.startswith("_"):
                    continue
                if isinstance(v, torch.Tensor):
                    named.append((k, v))
                elif isinstance(v, torch.nn.Module) and k != "self":
                    modules.append((k, v))
                elif isinstance(v, dict) and scope is frame.f_locals:  # params["w"]
                    named.extend((f'{k}["{n}"]' if isinstance(n, str) else f"{k}[{n!r}]", t)
                                 for n, t in list(v.items())[:1000] if isinstance(t, torch.Tensor))
                elif scope is frame.f_locals and k != "self" and not isinstance(
                        v, (type, types.ModuleType, types.FunctionType)):
                    # a plain object's tensors: master.ln1 (an optimizer's master copy)
                    try:  # naming never raises: a proxy's __dict__ may
                        d = getattr(v, "__dict__", None)
                    except Exception:  # noqa: BLE001
                        d = None
                    if isinstance(d, dict):
                        held.extend((f"{k}.{n}", t) for n, t in list(d.items())[:1000]
                                    if isinstance(t, torch.Tensor))
        owner = frame.f_locals.get("self")
        if owner is not None:
            attrs: dict[str, Any] = {}
            for d in (getattr(owner, "_parameters", None), getattr(owner, "_buffers", None),
                      getattr(owner, "__dict__", None)):
                if isinstance(d, dict):
                    attrs.update(d)
            named.extend((f"self.{k}", v) for k, v in attrs.items() if isinstance(v, torch.Tensor))
            if isinstance(owner, torch.nn.Module):
                modules.append(("self", owner))
        named.extend(held)
        for k, m in modules:
            named.extend((f"{k}.{n}", p) for n, p in m.named_parameters())
        for k, m in modules:  # then its buffers: moe.e_bias (a router's bias, updated in place)
            named.extend((f"{k}.{n}", b) for n, b in m.named_buffers())
        for k, v in named:
            names.setdefault(id(v), k)
        # an optimizer's state (Adam's moments, written by torch's code): opt.state[m.w]["exp_avg"]
        for k, opt in _optimizers(frame):
            for p, st in list(opt.state.items())[:1000]:
                if isinstance(st, dict):
                    pname = names.get(id(p), "p")
                    for key, t in st.items():
                        if isinstance(t, torch.Tensor):
                            names.setdefault(id(t), f"{k}.state[{pname}][{key!r}]")
        with suspended():  # reading .grad in the check mode types it: not here
            for k, v in named:
                g = v.grad if v.is_leaf else None
                if g is not None:
                    names.setdefault(id(g), f"{k}.grad")
    # a tensor no variable holds (``F.gelu(x @ w)``'s operand): its expression in the call
    texts = _written_operands(frame, values, dict(named)) if written and frame is not None and any(
        isinstance(v, torch.Tensor) and id(v) not in names for v in values) else {}
    out = []
    for i, (v, d) in enumerate(zip(values, defaults)):
        if isinstance(v, torch.Tensor):
            out.append(names.get(id(v)) or texts.get(i, d))
        else:
            out.append(repr(v))
    return out


def _enclosing_all_reduce() -> str:
    """The source text of the ``all_reduce(...)`` call whose first argument is the expression
    the caller's frame is running (``spmd.all_reduce(self.shared(h) + routed, "tp", src=P,
    dst=I)`` while the add runs); "" when there is none, or the source cannot be read.  Read
    on an error only."""
    import ast
    import linecache

    try:
        frame = _user_frame()
        if frame is None:
            return ""
        code = frame.f_code
        pos = list(code.co_positions())[frame.f_lasti // 2]
        if None in pos:
            return ""
        source = "".join(linecache.getlines(code.co_filename, frame.f_globals))
        tree = ast.parse(source)
    except Exception:  # noqa: BLE001 - naming never raises
        return ""
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and n.args and getattr(n.func, "attr", getattr(
                n.func, "id", None)) == "all_reduce"):
            continue
        a = n.args[0]
        if (a.lineno, a.end_lineno, a.col_offset, a.end_col_offset) == tuple(pos):
            text = ast.get_source_segment(source, n)
            return " ".join(text.split()) if text else ""
    return ""


def _optimizers(frame: Any) -> list[tuple[str, Any]]:
    """The optimizers the caller's frame holds by name (its locals, then its globals), then
    one whose ``step`` is running (torch's frame's ``self``), named ``optimizer`` when the
    caller holds it by no name."""
    out: list[tuple[str, Any]] = []
    for scope in (frame.f_locals, frame.f_globals):
        for k, v in list(scope.items()):
            if not k.startswith("_") and isinstance(v, torch.optim.Optimizer):
                out.append((k, v))
    f: Any = sys._getframe(1)
    while f is not None and f is not frame:
        me = f.f_locals.get("self") if "self" in f.f_code.co_varnames else None
        if isinstance(me, torch.optim.Optimizer) and not any(o is me for _, o in out):
            out.append(("optimizer", me))
        f = f.f_back
    return out


def _state_owner(x: torch.Tensor) -> torch.Tensor | None:
    """The parameter whose optimizer state ``x`` is (``opt.state[p]["exp_avg"] is x``), for
    an optimizer the caller holds by name; None when none is found.  Only read for a
    message."""
    try:
        frame = _user_frame()
        if frame is None:
            return None
        for _, opt in _optimizers(frame):
            for p, st in list(opt.state.items())[:1000]:
                if isinstance(st, dict) and any(t is x for t in st.values()):
                    return p if isinstance(p, torch.Tensor) else None
    except Exception:  # noqa: BLE001 - naming never raises
        return None
    return None


def _written_operands(frame: Any, values: Sequence[Any], named: dict[str, torch.Tensor]) -> dict[int, str]:
    """The source text of each tensor operand, read from the expression ``frame`` is running
    (Python 3.11's instruction positions: ``F.gelu(x @ w)``, ``(a + b).sum()``, ``h[:, 0]``),
    by position in ``values``; {} whenever the match is not certain.

    The expression's operands are its receiver (``a`` in ``a.add_(b)``; not a module or a
    class: ``torch.add``) and its positional arguments, items of a list display spread
    (``torch.cat([a, b @ c])``); literals and names of non-tensors (dims, sizes, dtypes) are
    not operands.  They pair with the tensor values in order only when the counts agree and
    every operand that is a name or an attribute (``x``, ``self.w``: ``named`` holds the
    caller's tensors by such texts) holds the very tensor it pairs with (a reflected operator
    ``2 * x`` reaches the check mode as ``x.__rmul__(2)``, a module call ``self.fc(h + 1)``
    as ``linear(h + 1, weight)``: the source's operands are not those)."""
    import ast

    try:
        source = _source_at(frame.f_code, frame.f_lasti, frame.f_globals)
        if source is None:
            return {}
        source = source.strip()  # (its segments are read from this text below)
        node = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, IndexError, TypeError, UnicodeDecodeError):
        return {}
    if isinstance(node, ast.Call):
        items = list(node.args)
        if isinstance(node.func, ast.Attribute) and not _names_module_or_class(node.func.value, frame):
            items.insert(0, node.func.value)
    elif isinstance(node, ast.BinOp):
        items = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        items = [node.operand]
    elif isinstance(node, ast.Subscript):
        items = [node.value, node.slice]
    else:
        return {}
    spread: list[ast.expr] = []
    for it in items:
        spread.extend(it.elts if isinstance(it, (ast.List, ast.Tuple)) and not isinstance(
            node, ast.Subscript) else [it])
    operands = [it for it in spread if not _not_a_tensor(it, frame)]
    tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if len(operands) != len(tensors):
        return {}
    out: dict[int, str] = {}
    for i, expr in zip(tensors, operands):
        text = ast.get_source_segment(source, expr)
        if not text or "\n" in text:
            return {}
        if isinstance(expr, (ast.Name, ast.Attribute)) and named.get(text) is not values[i] and not (
                isinstance(expr, ast.Attribute) and expr.attr in ("data", "real", "imag")
                and _same_data(named.get(text[:-len(expr.attr) - 1]), values[i], expr.attr)) and not (
                isinstance(expr, ast.Attribute) and expr.attr in _TRANSPOSES
                and _transposed(named.get(text[:-len(expr.attr) - 1]), values[i], expr.attr)):
            return {}  # not the tensor it pairs with, or not known to be a tensor
        out[i] = text
    return out


# the transposing attributes (a new view at every read): ``fi @ ft.T`` names ``ft.T``
_TRANSPOSES = frozenset({"T", "mT", "H", "mH"})


def _transposed(base: Any, v: Any, attr: str) -> bool:
    """``v`` is ``base.T`` / ``.H`` (its dims reversed) or ``base.mT`` / ``.mH`` (its last two
    swapped): a view of base's storage with those sizes."""
    if not (isinstance(base, torch.Tensor) and isinstance(v, torch.Tensor)):
        return False
    shape = tuple(base.shape)
    want = shape[::-1] if attr in ("T", "H") else shape[:-2] + shape[:-3:-1]
    return tuple(v.shape) == want and v.data_ptr() == base.data_ptr()


def _same_data(base: Any, v: Any, attr: str = "data") -> bool:
    """``v`` is ``base.data`` (a new tensor at every read, sharing base's storage), or
    ``base.real`` / ``base.imag`` (of a complex base: a view of its real or imaginary parts,
    a new tensor at every read too; of a real one, ``.real`` is base itself)."""
    if not (isinstance(base, torch.Tensor) and isinstance(v, torch.Tensor) and v.shape == base.shape):
        return False
    if attr == "data" or not base.is_complex():
        return attr != "imag" and v.data_ptr() == base.data_ptr()
    return v.data_ptr() == base.data_ptr() + (v.element_size() if attr == "imag" else 0)


def _names_module_or_class(expr: Any, frame: Any) -> bool:
    """``torch`` / ``torch.nn.functional`` / ``F`` / ``Tensor``: a dotted name of a module or
    a class in ``frame`` (looked up without calling anything but module attributes)."""
    import ast
    import types

    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return False
    obj = _frame_value(frame, expr.id)
    for attr in reversed(parts):
        if not isinstance(obj, types.ModuleType):
            return False
        obj = getattr(obj, attr, None)
    return isinstance(obj, (types.ModuleType, type))


def _not_a_tensor(expr: Any, frame: Any) -> bool:
    """A literal (``2``, ``-1``, ``(0, 2, 1)``, ``None``, ``...``), a slice, or a name whose
    value is not a tensor: not an operand."""
    import ast

    if isinstance(expr, (ast.Constant, ast.Slice)):
        return True
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.operand, ast.Constant):
        return True
    if isinstance(expr, ast.Tuple):
        return all(_not_a_tensor(e, frame) for e in expr.elts)
    if isinstance(expr, ast.Name):
        return not isinstance(_frame_value(frame, expr.id), torch.Tensor)
    return False


def _frame_value(frame: Any, name: str) -> Any:
    """What ``name`` holds in ``frame`` (a local, a global, a builtin), or None."""
    for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
        if name in scope:
            return scope[name]
    return None


_DEFAULT_TEXTS = ("x", "y", "z", "w", "u", "v")


def _default_text(i: int) -> str:
    return _DEFAULT_TEXTS[i] if i < len(_DEFAULT_TEXTS) else f"arg{i}"


# The implementation of the typed collectives: the ops on their internal buffers are
# not the user's (on_collective types the collective as a whole), so an op issued from
# these files never raises (checked on the error path only, so free otherwise).
_INTERNAL_FILES = frozenset(os.path.join(_RUNTIME_DIR, f) for f in ("_collectives.py", "_dist_utils.py"))


def _in_collective_internals() -> bool:
    f: Any = sys._getframe(2)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn in _INTERNAL_FILES:
            return True
        if not fn.startswith(_SKIP_DIRS):
            return False  # reached user code
        f = f.f_back
    return False


_PAUSED = 0


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Pause checking (and tracking) inside the block: for the implementation of ops that
    type their result themselves (the collectives call on_collective afterwards)."""
    global _PAUSED
    _PAUSED += 1
    try:
        yield
    finally:
        _PAUSED -= 1


# --------------------------------------------------------------------------------------
# The mode.

_PLANS: dict[Any, Plan] = {}
# (op, strict, per operand: id of its interned type, cannot-grad) -> (result type, failed)
_RESULTS: dict[tuple, tuple[SpmdType, bool]] = {}
_RESULTS_MAX = 8192


def _plan(func: Any) -> Plan:
    try:
        plan = _PLANS.get(func)
    except TypeError:  # unhashable func
        return build_plan(func)
    if plan is None:
        plan = build_plan(func)
        _PLANS[func] = plan
    return plan


# Pending partial sums (engine contractions.partial_sum): a matmul, linear or einsum that sums
# over a dim sharded on an axis in every operand that varies there makes each rank's part of
# a sum, which local SPMD never makes implicitly (SPEC section 6).  The static checker exempts
# a result passed straight to ``reinterpret(..., src=V, dst=P)`` (Megatron's row-parallel
# idiom) by reading the code around the call; the check mode, which sees one call at a time,
# types the result V and marks it pending here, by id with a weak reference: the first op or
# collective that reads it is the error (the message the static checker gives at the call),
# except reinterpret(V->P) on those axes (and the collectives' own internals).  A local bound
# to it and read only by that reinterpret is accepted as statically.  Cost: a dict test per
# operand while a pending tensor is alive.
# An entry: (the weak reference, the pending axes, the payload its error is made of:
# (op name, its Contraction or Reduction, its operands' types and shapes, where), the payloads
# of the reductions it is made of, one per kind: a sum's and a mean's, added: its
# :func:`_pending_kind_of`).
_PENDING: dict[int, tuple[Any, tuple[str, ...], tuple, tuple]] = {}
_PENDING_AXES: dict[tuple, tuple[str, ...]] = {}  # by _local_check's key
_PENDING_SUMS = PENDING_REDUCTIONS


def _partial_axes(c: Contraction, ops: list, types: list, rtype: SpmdType,
                  declared: Sequence[str]) -> tuple[str, ...]:
    """The axes where contraction ``c``'s result (``rtype``) is a per-rank partial sum that
    its call does not declare (``declared``: out_partial_axes)."""
    tensors = [(t, tuple(v.shape)) for (v, _), t in zip(ops, types) if t is not None]
    out = []
    for a, lt in rtype.axes:
        if lt.kind is TKind.V and a not in declared and partial_sum(
                c, [(t.get(a), shape) for t, shape in tensors]):
            out.append(a)
    return tuple(out)


def _mark_pending(result: torch.Tensor, name: str, c: Contraction, axes: tuple[str, ...],
                  ops: list, types: list) -> None:
    frame = _user_frame()
    where = (frame.f_code, frame.f_lasti, frame.f_globals) if frame is not None else None
    shapes = [(t, tuple(v.shape) if isinstance(v, torch.Tensor) else None)
              for (v, _), t in zip(ops, types)]
    ref = _Ref(result, _forget_pending)
    ref.key = id(result)
    payload = (name, c, shapes, where)
    _PENDING[id(result)] = (ref, axes, payload, (payload,))


def _forget_pending(ref: _Ref) -> None:
    if not isinstance(_PENDING, dict):  # interpreter shutdown: the module is torn down
        return
    entry = _PENDING.get(ref.key)
    if entry is not None and entry[0] is ref:
        del _PENDING[ref.key]


def _pending_kind_of(entry: tuple) -> str:
    """The kind of a pending value (engine ``collectives.PENDING_REDUCE_OPS``): "product"
    (a contraction's), "sum", "mean" or "mixed" (engine ``ops.pending_kind``)."""
    if not isinstance(entry[2][1], Reduction):
        return "product"
    return pending_kind([p[0] for p in entry[3]])


def _check_pending(x: torch.Tensor, collective: tuple | None,
                   call: tuple[str, str] | None = None) -> bool:
    """``x`` is a pending partial sum (or mean) read by an op (``collective`` None) or a
    collective ((op, axes, src, dst, reduce_op)): the error, unless that takes the pending
    value on all its axes (engine ``pending_left``: reinterpret(V->P), an all_reduce or
    reduce_scatter with src=P, as its kind allows) or is the collectives' internals.  True
    when a collective takes it (its input is then P there: :func:`_pending_type`).  A
    reduction that takes it raises when its value adds an R term (F.linear(h, w, b):
    :func:`_check_taken_affine`; ``call``: the call's text around its argument, when not
    spmd.<op>'s)."""
    entry = _PENDING.get(id(x))
    if entry is None or entry[0]() is not x:
        return False
    _, axes, (name, c, shapes, where), parts = entry
    kind = _pending_kind_of(entry)
    left: tuple[str, ...] | None = None
    if collective is not None:
        op, on, src, dst, reduce_op = collective
        src_lt = src if isinstance(src, LocalType) else None
        dst_lt = dst if isinstance(dst, LocalType) else None
        left = pending_left(op, tuple(on), src_lt, dst_lt, axes, reduce_op, kind)
        if left == ():
            _check_taken_affine(axes, name, shapes, where, None if op == "reinterpret" else (
                call or _call_around(*collective)), dst_lt)
            return True
        if left:
            axes = left  # the error names an axis the call leaves pending
        refused = pending_refusal(op, src_lt, dst_lt, reduce_op, kind)
        if refused:  # a mean reinterpreted or summed, a sum averaged
            _raise_refused(axes, parts, refused, op)
    elif _in_collective_internals():
        return False
    try:
        _raise_pending(axes, name, c, shapes, where, kind, own=collective is None)
    except SpmdTypeError as e:
        if left and collective is not None:
            raise SpmdTypeError(pending_left_error(e.error, collective[1], left[0])) from None
        raise
    return False  # pragma: no cover (raised)


def _raise_refused(axes: tuple[str, ...], parts: tuple, refused: str, op: str) -> None:
    """The error of a pending value's reduction that the collective ``op`` it goes to does
    not take (engine ``pending_refusal``): a mean's when ``refused`` is "sum", a sum's when
    "avg"."""
    for name, red, shapes, where in parts:
        if (name in MEAN_REDUCTIONS) == (refused == "sum"):
            _check_pending_sum(axes, name, dataclasses.replace(red, refused=refused), shapes,
                               where, f" (raised at the {op} it goes to)")


def _call_around(op: str, on: Sequence[str], src: Any, dst: Any, reduce_op: str
                 ) -> tuple[str, str]:
    """A typed reduction's text before and after its argument, for a message."""
    how = f', op="{reduce_op}"' if reduce_op != "sum" else ""
    return f"spmd.{op}(", f", {format_axes(tuple(on))}, src=P, dst={dst}{how})"


def _check_taken_affine(axes: tuple[str, ...], name: str, shapes: list, where: tuple | None,
                        around: tuple[str, str] | None, dst: LocalType | None) -> None:
    """A pending partial sum that a typed reduction with src=P takes (``around``: its text
    before and after the argument; None: a reinterpret(V->P) claims it) made by an affine op (``F.linear(h, w, b)``, engine
    ``AFFINE_TERMS``) whose added term is R or I there: summed once per rank, the static
    checker's spmd-partial-affine (engine ``claimed_partial_error``, reinterpret(V->P)'s)."""
    if name not in AFFINE_TERMS:
        return
    texts = _affine_texts(where, name, len(shapes))
    arg, rest = (texts[0], texts[2]) if texts is not None else (f"{name}(...)", None)
    operands = [Operand(t, texts[1][k] if texts is not None else _default_text(k), True, None,
                        shape) for k, (t, shape) in enumerate(shapes)]
    for a in axes:
        err = claimed_partial_error(name, operands, a, arg, rest, around, dst)
        if err is not None:
            raise SpmdTypeError(err)


def _affine_texts(where: tuple | None, name: str, n: int
                  ) -> tuple[str, list[str], str | None] | None:
    """For an affine call ``F.linear(h, w, b)`` (its frame's expression, ``name`` its op):
    its text, its ``n`` tensor operands' texts in order, and its text without the added
    term (``F.linear(h, w)``; None for the addmm family, whose rest is no call); None
    when not certain."""
    import ast

    found = _expression_at(where)
    if found is None:
        return None
    source, node = found
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) \
            or any(k.arg is None for k in node.keywords):
        return None
    func = node.func
    if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) != name:
        return None
    pos, formal = AFFINE_TERMS[name]
    items = list(node.args)
    named = {k.arg: k.value for k in node.keywords}
    if formal in named and len(items) == pos:
        items.append(named.pop(formal))
    if len(items) != n or any(k in named for k in ("input", "weight")):
        return None
    seg = [ast.get_source_segment(source, it) for it in items]
    whole = ast.get_source_segment(source, node)
    callee = ast.get_source_segment(source, func)
    if not whole or not callee or any(not t or "\n" in t for t in seg):
        return None
    kept = [t for k, t in enumerate(seg) if k != pos] + [
        f"{k}={ast.get_source_segment(source, v)}" for k, v in named.items()]
    rest = f"{callee}({', '.join(kept)})" if name not in ("addmm", "addbmm", "baddbmm", "addmv",
                                                          "addr") else None
    return whole, seg, rest  # type: ignore[return-value]


def _raise_pending(axes: tuple[str, ...], name: str, c: Any, shapes: list, where: tuple | None,
                   kind: str = "sum", own: bool = True) -> None:
    """A pending partial sum's error; ``own`` False where a collective reads it (the value is
    meant as the sum: the engine's message then offers no per-rank reading, as statically)."""
    if isinstance(c, Reduction):
        _check_pending_sum(axes, name, c, shapes, where, _MEAN_RAISED if kind == "mean" else (
            " (raised at the first use of the result other than that reinterpret, an "
            "all_reduce/reduce_scatter with src=P of it, or + and - of other such sums)"))
        return
    texts = _contraction_texts(where, sum(1 for t, _ in shapes if t is not None))
    operands = []
    k = 0
    for t, shape in shapes:
        if t is None:
            continue
        text = texts[k] if texts is not None else _default_text(k)
        k += 1
        operands.append((Operand(t, text, True, None, shape), None))
    err = implicit_partial_error(name, c, axes[0], operands, own=own)  # type: ignore[arg-type]
    raise SpmdTypeError(SpmdError(err.code, err.message + (
        " (raised at the first use of the result other than that reinterpret or an "
        "all_reduce/reduce_scatter with src=P of it)")))


_MEAN_RAISED = (' (raised at the first use of the result other than an all_reduce/reduce_scatter '
                'with src=P, op="avg" of it, or + and - of other such means)')


def _check_pending_sum(axes: tuple[str, ...], name: str, red: Reduction, shapes: list,
                       where: tuple | None, raised: str) -> None:
    """A pending sum (engine ``reduced_partial_error``: a sum or mean over a dim sharded on
    ``axes``) read by an op or a collective other than its reinterpret (:func:`_check_pending`
    returned for those): as a contraction's, except that + and - of pending sums (and a
    number's * or /) stay pending (:func:`_carried_pending`)."""
    texts = _reduced_texts(where)
    t, shape = shapes[0]
    operand = Operand(t, texts[0] if texts is not None else _default_text(0), True, None, shape)
    err = reduced_partial_error(name, operand, axes[0], dataclasses.replace(red, partial_axes=()))
    if err is None:  # pragma: no cover (the mark says it is one)
        return
    raise SpmdTypeError(SpmdError(err.code, err.message + raised))


def _carried_pending(plan: Plan, ops: list, plan_args: tuple = (), plan_kwargs: dict | None = None
                     ) -> tuple | None:
    """For an op that keeps a sum pending (engine ``PENDING_ADD``, ``PENDING_SCALE``,
    ``PENDING_JOIN``, ``PENDING_KEEP``: the one list the static checker reads too) whose
    tensor operands are all pending sums (:func:`_check_pending_sum`), or V terms of a + or
    a stack: the entry to mark its result with (their axes, the first's payload); None
    otherwise (each operand is then checked)."""
    name = plan.name
    plan_kwargs = plan_kwargs or {}
    adds = name in PENDING_ADD or name in PENDING_JOIN
    if not adds and name not in PENDING_SCALE and name not in PENDING_KEEP:
        return None
    tensors = [v for v, _ in ops if isinstance(v, torch.Tensor)]
    if not adds and len(tensors) == 2 and name in PENDING_TENSOR_SCALE:
        tensors = _scaled_pending(name, tensors, plan_kwargs)  # s / n_tok, n_tok all-reduced
    if not tensors or (not adds and len(tensors) != 1):
        return None
    if adds and len(tensors) != len(ops):
        return None  # s + 1.0: a number added once per rank, no part of the sum
    if name in ("to", "view") and any(
            isinstance(a, torch.dtype) and not keeps_pending_dtype(name, str(a).rpartition(".")[2])
            for a in (*plan_args, *plan_kwargs.values())):
        return None  # s.to(torch.int64), s.view(torch.int32): no linear map
    axes: dict[str, None] = {}
    first = None
    parts: dict[bool, tuple] = {}  # a mean's payload and a sum's, the first of each
    others = []
    for v in tensors:
        entry = _PENDING.get(id(v))
        if entry is None or entry[0]() is not v:
            others.append(v)  # + another V term: the reinterpret claims it as part of the sum
            continue
        if not isinstance(entry[2][1], Reduction):
            return None
        if first is not None and set(entry[1]) != set(first[1]) and name in PENDING_JOIN:
            return None  # a stack of sums pending on different axes
        for a in entry[1]:
            axes[a] = None
        first = first or entry
        for p in entry[3]:
            parts.setdefault(p[0] in MEAN_REDUCTIONS, p)
    if first is None or (others and not adds):
        return None
    for v in others:
        t = _get(v)
        if not t or any((lt := t.get(a)) is None or lt.kind is not TKind.V for a in axes):
            return None  # an R, I or P term (added once per rank), or untyped: checked as such
    return tuple(axes), first[2], tuple(parts.values())


def _scaled_pending(name: str, tensors: list, kwargs: dict) -> list:
    """``s * c``, ``c * s``, ``s / c`` (engine ``scales_pending``) of a pending sum ``s`` and
    a tensor ``c`` the same on every rank of its pending axes: ``[s]``; ``tensors``
    otherwise (each operand is then checked)."""
    entries = [_PENDING.get(id(v)) for v in tensors]
    pending = [e is not None and e[0]() is v for e, v in zip(entries, tensors)]
    if pending.count(True) != 1 or kwargs.get("rounding_mode") is not None:
        return tensors  # two pending sums (a product of sums), or a floor division
    k = pending.index(True)
    t = _get(tensors[1 - k])
    factor = [t.get(a) if t else None for a in entries[k][1]]  # type: ignore[index]
    return [tensors[k]] if scales_pending(name, k == 0, factor) else tensors


def _reduced_pending(x: Any, have: SpmdType, op: str, on: Sequence[str], src: Any, dst: Any,
                     reduce_op: str) -> SpmdType:
    """``have`` with P where ``x`` is a pending partial sum that the reduction ``op`` with
    src=P takes on all its axes (engine ``pending_left``; :func:`_check_pending` has
    accepted it): the collective types its input as its src says.  ``have`` unchanged
    otherwise (reinterpret(V->P) reads the V it is)."""
    if not _PENDING or op == "reinterpret" or not isinstance(x, torch.Tensor):
        return have
    entry = _PENDING.get(id(x))
    if entry is None or entry[0]() is not x or not have:
        return have
    src_lt = src if isinstance(src, LocalType) else None
    if pending_left(op, tuple(on), src_lt, dst if isinstance(dst, LocalType) else None,
                    entry[1], reduce_op, _pending_kind_of(entry)) != ():
        return have
    return _pending_type(x, have)


def _pending_type(x: torch.Tensor, t: SpmdType) -> SpmdType:
    """``x``'s type with P on the axes where it is a pending partial sum (a contraction's
    result no op has read yet: what a custom Function's backward returns when its all-reduce
    is missing), so that a message names the reduction it lacks, as the static checker's
    does; ``t`` unchanged for any other tensor."""
    entry = _PENDING.get(id(x)) if _PENDING else None
    if entry is None or entry[0]() is not x:
        return t
    for a in entry[1]:
        if (lt := t.get(a)) is not None and lt.kind is TKind.V:
            t = t.replace(a, LocalType(TKind.P))
    return t


def _expression_at(where: tuple | None) -> tuple[str, Any] | None:
    """The source text of the expression a frame was running (``where``: its file and
    line) and its parsed ``ast`` node; None when it cannot be read or parsed alone."""
    import ast

    if where is None:
        return None
    try:
        source = _source_at(*where)
        if source is None:
            return None
        source = source.strip()
        return source, ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, IndexError, TypeError, UnicodeDecodeError):
        return None


def _contraction_texts(where: tuple | None, n: int) -> list[str] | None:
    """The source texts of a contraction's ``n`` tensor operands, read from the expression
    its frame was running (``q @ k.t()``: q, k.t(); ``F.linear(h, w)``: h, w;
    ``x.matmul(y)``: x, y; an einsum's equation left out); None when not certain."""
    import ast

    found = _expression_at(where)
    if found is None:
        return None
    source, node = found
    if isinstance(node, ast.BinOp):
        items = [node.left, node.right]
    elif isinstance(node, ast.Call):
        items = [a for a in node.args if not (isinstance(a, ast.Constant) and isinstance(a.value, str))]
        if len(items) < n and isinstance(node.func, ast.Attribute):
            items.insert(0, node.func.value)
    else:
        return None
    if len(items) != n:
        return None
    texts = [ast.get_source_segment(source, it) for it in items]
    return None if any(not t or "\n" in t for t in texts) else texts  # type: ignore[misc]


def _reduced_texts(where: tuple | None) -> list[str] | None:
    """The source text of a sum's operand, read from the call its frame was running
    (``x.exp().sum(-1)``: x.exp(); ``torch.sum(g * g, 1)``: g * g); None when not certain
    (:func:`_contraction_texts` reads a contraction's, whose dims are no operands)."""
    import ast

    found = _expression_at(where)
    if found is None:
        return None
    source, node = found
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
        return None
    name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if name not in _PENDING_SUMS:
        return None
    base = node.func.value if isinstance(node.func, ast.Attribute) else None
    # torch.sum(x, ...), torch.mean(x, ...): the first argument; x.sum(...): the receiver
    function = base is None or (isinstance(base, ast.Name) and base.id in ("torch", "spmd"))
    if function:
        item = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "input"), None)
    else:
        item = base
    text = ast.get_source_segment(source, item) if item is not None else None
    if not text or "\n" in text:
        return None
    return [text if isinstance(item, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
            else f"({text})"]


def _operand_types(ops: list, carried: bool = False) -> list[SpmdType | None] | None:
    """The operands' types (untyped tensors: the empty type, scalars: None); None when
    no operand is typed (the short path).  ``carried``: the op keeps its pending sums
    pending (:func:`_carried_pending`), no check of them."""
    types: list[SpmdType | None] = []
    any_typed = False
    for v, _ in ops:
        if isinstance(v, torch.Tensor):
            if _PENDING and not carried and id(v) in _PENDING:
                _check_pending(v, None)
            t = _get(v)
            if t is None:
                t = _UNTYPED
            elif t:
                any_typed = True
                if id(t) not in _CANON_IDS:  # typed under another mesh
                    t = _moved(v, t)
            types.append(t)
        else:
            types.append(None)
    return types if any_typed else None


def _has_grad_hooks(x: Any) -> bool:
    """``x`` has gradient hooks the check mode did not wrap (registered before it started):
    its gradient is not read as the dual (a hook may have reduced it)."""
    with suspended():
        return bool(getattr(x, "_backward_hooks", None)) or bool(
            getattr(x, "_post_accumulate_grad_hooks", None))


@contextlib.contextmanager
def _in_mode() -> Iterator[None]:
    """Run the block with the check mode on: autograd's engine runs gradient hooks and custom
    Functions' ``backward`` with an empty torch function mode stack, so the ops there were
    neither checked nor typed (``torch.relu`` of a Partial gradient in a hook passed; a
    gradient reduced there and reshaped was read back untyped).  The innermost open block's
    mode is pushed for the block when it is not on the stack already; nothing is pushed once
    the last block closed (a backward run after it is not checked, as before)."""
    mode = _STACK[-1] if _STACK else None
    if mode is None or _PAUSED:
        yield
        return
    from torch.overrides import _get_current_function_mode_stack
    if any(m is mode for m in _get_current_function_mode_stack()):
        yield
        return
    with mode:
        yield


def _typed_grad_hook(name: str, x: torch.Tensor, hook: Any) -> Any:
    """``hook`` run in the check mode (:func:`_in_mode`), with the gradient typed on the way
    in (the dual of ``x``'s type, so a collective in the hook checks its src) and on the way
    out: the type of what the hook returns (``register_hook``) or puts in ``x.grad``
    (``register_post_accumulate_grad_hook``) is the gradient's type at later reads, as
    ``x.grad = all_reduce(...)`` is (a DDP-style reduction in a hook was read back as
    Partial: the optimizer step raised, and its fix would have reduced the gradient twice)."""
    ref = weakref.ref(x)

    def keep(out: Any) -> None:
        owner = ref()
        t = _get(out) if isinstance(out, torch.Tensor) else None
        if owner is not None and t is not None:
            _note_hooked(owner, t)
            _assign_grad(owner, out)

    def dual_of(g: Any) -> None:
        owner = ref()
        t = _get(owner) if owner is not None else None
        if isinstance(g, torch.Tensor) and t and _get(g) is None:
            _set(g, t.dual())

    if name == "register_post_accumulate_grad_hook":
        def post(p: torch.Tensor) -> None:
            with suspended():
                g = p.grad
            # autograd just accumulated into p.grad: what a hook gave it in an earlier
            # backward is gone; a tensor autograd owns holds the dual (a stale type from an
            # earlier step, on a tensor zeroed since, is not its type)
            _HOOKED_GRADS.pop(id(p), None)
            owner_t = _get(p)
            if isinstance(g, torch.Tensor) and owner_t and _ASSIGNED_GRADS.get(id(g)) is not g:
                _set(g, owner_t.dual())
            with _in_mode():
                hook(p)
            with suspended():
                g = p.grad
            keep(g)
        post._spmd_wrapped = True  # type: ignore[attr-defined]
        return post

    def pre(g: torch.Tensor) -> Any:
        dual_of(g)
        with _in_mode():
            r = hook(g)
            out = g if r is None else r
            owner = ref()
            if owner is not None and owner.is_leaf and isinstance(out, torch.Tensor) and _get(out):
                old = owner.grad  # (read in the mode: its type as a read of x.grad gives it)
                if old is not None:
                    _check_accumulation(old, out)
        keep(out)
        return r
    return pre


def _check_accumulation(old: torch.Tensor, new: torch.Tensor) -> None:
    """Autograd adds what a ``register_hook`` hook returns to the leaf's gradient so far: the
    rule of ``old.add_(new)`` (no-sync gradient accumulation whose last micro-batch's hook
    all-reduces only its own gradient: R added to the Partial sum of the earlier ones)."""
    mode = _STACK[-1] if _STACK else None
    if mode is None:
        return
    plan = _plan(torch.Tensor.add_)
    args = (old, new)
    ops, outs = extract(plan, args, {})
    types = _operand_types(ops)
    if types is not None and not _global_check.is_global(types):
        mode._local_check(plan, args, {}, ops, outs, types)


class _Mode(TorchFunctionMode):
    def __init__(self, strict: bool) -> None:
        super().__init__()
        self.strict = strict
        self.thread = threading.get_ident()
        # the contraction just checked whose result is a pending partial sum (_PENDING):
        # (op name, its Contraction, the axes, its operands and their types), marked on
        # the result once it ran
        self.pending: tuple | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if kwargs is None:
            kwargs = {}
        if len(_STACK) > 1 and self is not _STACK[-1] and _inside_an_inner_block(self):
            # nested blocks: the innermost one checked this op and runs it; torch hands the
            # call on to the outer modes, which would check it again under their own
            # strictness (an outer strict block overrode an inner non-strict one)
            return func(*args, **kwargs)
        if _RETURN_WANTED:
            _find_return_frames()
        if _PAUSED:
            return func(*args, **kwargs)
        plan = _plan(func)
        kind = plan.kind
        if kind is Kind.OP:
            if plan.name == "zero_" and _ASSIGNED_GRADS and args:
                out = self._op(plan, func, args, kwargs)
                _zeroed(args[0])
                return out
            if plan.name == "fill_" and _ASSIGNED_GRADS and args and _zero_fill(args, kwargs):
                out = self._op(plan, func, args, kwargs)
                _zeroed(args[0])
                return out
            return self._op(plan, func, args, kwargs)
        if kind is Kind.FOREACH:
            if plan.each is not None and plan.each.name == "zero_" and _ASSIGNED_GRADS and args:
                out = self._foreach(plan, func, args, kwargs)
                for t in args[0] if isinstance(args[0], (list, tuple)) else ():
                    _zeroed(t)
                return out
            return self._foreach(plan, func, args, kwargs)
        if kind is Kind.RAW:
            _check_raw_collective(func, plan.name, args, kwargs)
            return func(*args, **kwargs)
        if kind is Kind.SEND:
            _check_send(plan.name, args, kwargs)
            return func(*args, **kwargs)
        if func is _TENSOR_DEEPCOPY:
            return _typed_copy(args[0] if args else None, func(*args, **kwargs))
        if kind is Kind.PASS:
            return func(*args, **kwargs)
        if kind is Kind.FACTORY:
            if not plan.name:
                return func(*args, **kwargs)
            out = func(*args, **kwargs)
            _note_zero(plan, out, args, kwargs)
            return out
        if kind is Kind.VALUE_READ:
            if args and _PENDING and id(args[0]) in _PENDING:
                _check_pending(args[0], None)
            if args:
                _check_value_read(plan.name, args[0])
            return func(*args, **kwargs)
        if kind is Kind.GRAD:
            g = func(*args, **kwargs)
            if isinstance(g, torch.Tensor):
                _note_gradient(g)
            if (isinstance(g, torch.Tensor) and args and _BACKWARD_VERSIONS
                    and _ASSIGNED_GRADS.get(id(g)) is g
                    and _BACKWARD_VERSIONS.get(id(g), g._version) != g._version):
                assigned = _get(g)
                start = _BACKWARD_VERSIONS[id(g)]
                if _ZEROED.get(id(g)) == start or not assigned:
                    # accumulated into zeros, or into an untyped tensor: autograd's gradient
                    t = _get(args[0])
                    if t:
                        _set(g, t.dual())
                elif assigned:
                    _set(g, _accumulated_type(args[0], g, assigned))
                    _BACKWARD_VERSIONS[id(g)] = g._version
                return g
            if isinstance(g, torch.Tensor) and args and _ASSIGNED_GRADS.get(id(g)) is not g:
                # autograd's gradient: the dual of x's type, at every read (autograd may
                # have accumulated a new gradient into the same tensor since), or the type a
                # hook gave it
                hooked = _HOOKED_GRADS.get(id(args[0]))
                if hooked is not None and hooked[0]() is args[0]:
                    _set(g, hooked[1])
                elif _has_grad_hooks(args[0]):
                    # a hook registered before the check mode started (not wrapped) may have
                    # reduced it: what a collective in it typed, else unknown (gradual)
                    pass
                elif _reduced_by_ddp(args[0]):
                    # torch's DistributedDataParallel averages it in its C++ reducer (over its
                    # group, unless under no_sync), which the mode does not see: unknown
                    # (gradual; the dual made opt.step a false error whose fix reduced twice)
                    _untype(g)
                else:
                    t = _get(args[0])
                    if t and _fsdp1_sharded(args[0]):
                        # FSDP1's parameter typed before the wrapping: its gradient is a slice
                        # of FSDP's reduce-scattered flat gradient, unseen too: unknown
                        _untype(g)
                    elif t:
                        _set(g, t.dual())
            return g
        if kind is Kind.GRAD_HOOK:
            hook = args[1] if len(args) > 1 else kwargs.pop("hook", None)
            if args and isinstance(args[0], torch.Tensor) and callable(hook):
                # every hook registered in the check mode runs in it (a hook on an untyped
                # tensor too: torch.autograd.graph.register_multi_grad_hook registers one
                # per tensor, the user's function runs in the last one)
                hook = _typed_grad_hook(plan.name, args[0], hook)
            return func(args[0], hook, *args[2:], **kwargs)
        if kind is Kind.SET_DATA:
            # ``x.data = v``: x keeps its type (a parameter's storage swapped is unchecked),
            # but a v sharded on another dim misplaces every rank's block
            if len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
                _check_data_assignment(args[0], args[1])
            return func(*args, **kwargs)
        if kind is Kind.SET_GRAD:
            # ``p.grad = all_reduce(p.grad, "dp", src=P, dst=R)``: the tensor the user put
            # there keeps its own type at later reads (the optimizer's step sees R); an
            # untyped one (``p.grad = torch.zeros_like(p)``, priming an optimizer's state)
            # stays untyped, gradual, until declared or until autograd accumulates into it
            # (then it holds autograd's gradient: the dual); read as the dual it made Adam's
            # addcmul_ a false spmd-partial-nonlinear. An untyped view of a larger buffer
            # (``p.grad = flat[a:b].view_as(p)``, a DDP/ZeRO-style bucket the gradients were
            # copied into) holds autograd's gradient: read as the dual, as before (left
            # untyped, a forgotten all-reduce of the bucket passed the optimizer's step)
            if len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
                _check_grad_assignment(args[0], args[1])
            if len(args) > 1 and isinstance(args[1], torch.Tensor) and (
                    _get(args[1]) or args[1]._base is None):
                _assign_grad(args[0], args[1])
            return func(*args, **kwargs)
        if kind is Kind.BACKWARD:
            gradient = args[1] if len(args) > 1 else kwargs.get("gradient")
            if gradient is None and args:
                _check_loss(args[0])
            elif args:
                _check_losses(args[0], gradient, None)
            return _accumulating(func, args, kwargs)
        if kind is Kind.AUTOGRAD_BACKWARD:
            tensors = args[0] if args else kwargs.get("tensors")
            grads = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
            _check_losses(tensors, grads, "torch.autograd.backward")
            return _accumulating(func, args, kwargs)
        if kind is Kind.AUTOGRAD_GRAD:
            outputs = args[0] if args else kwargs.get("outputs")
            inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
            grads = args[2] if len(args) > 2 else kwargs.get("grad_outputs")
            # is_grads_batched=True: dim 0 of each grad_outputs tensor and result is the batch
            batched = bool(args[7] if len(args) > 7 else kwargs.get("is_grads_batched", False))
            _check_losses(outputs, grads, "torch.autograd.grad", batched, inputs)
            result = func(*args, **kwargs)
            ins = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs or ())
            if isinstance(result, (tuple, list)):
                for x, g in zip(ins, result):
                    t = _get(x) if isinstance(x, torch.Tensor) else None
                    if isinstance(g, torch.Tensor):
                        _note_gradient(g)
                    if t and isinstance(g, torch.Tensor):
                        gt = t.dual()
                        _set(g, duality.batched_type(gt) if batched else gt)
            return result
        return func(*args, **kwargs)  # pragma: no cover

    def _op(self, plan: Plan, func: Any, args: tuple, kwargs: dict) -> Any:
        ops, outs = extract(plan, args, kwargs)
        carried = _carried_pending(plan, ops, args, kwargs) if _PENDING and not outs else None
        types = _operand_types(ops, carried is not None)
        if types is not None and _ZEROS and ops and (plan.inplace or outs):
            types = _written_zeros(ops, types, [ops[0][0], *outs] if plan.inplace else outs)
        if types is None:
            # Nothing typed (gradual): a typed in-place/out= target keeps its type.
            return func(*args, **kwargs)
        if _global_check.is_global(types):
            checked = self._global_check(plan, args, kwargs, ops, types, outs)
        elif plan.name in PER_OPERAND_OPS:
            return self._per_operand_op(plan, func, args, kwargs, ops, types)
        else:
            checked = self._local_check(plan, args, kwargs, ops, outs, types)
        pending, self.pending = self.pending, None
        if checked is None:
            return func(*args, **kwargs)
        rtype, targets, new_types = checked
        if plan.random and rtype:
            _check_random_state(plan, args, kwargs, ops, types, rtype)
        # an assigned gradient written in place during a backward (a hook scaling another
        # parameter's gradient): the op's own version bump is no accumulation by autograd
        before = _versions_before(targets) if _BACKWARD_VERSIONS and targets else None
        result = func(*args, **kwargs)
        if before:
            _shift_versions(before)
        for tgt, t in zip(targets, new_types):
            if t:
                _set(tgt, t)
        if rtype:
            _stamp_outputs(result, rtype, targets)
        if pending is not None and isinstance(result, torch.Tensor):
            _mark_pending(result, *pending)
        elif carried is not None and isinstance(result, torch.Tensor):
            ref = _Ref(result, _forget_pending)
            ref.key = id(result)
            _PENDING[id(result)] = (ref, carried[0], carried[1], carried[2])
        return result

    def _local_check(self, plan: Plan, args: tuple, kwargs: dict, ops: list, outs: list,
                     types: list) -> tuple[SpmdType, list[torch.Tensor], list[SpmdType]] | None:
        """The local SPMD rule on one call, before it runs: (the result's type, the mutated
        tensors, their types after the op); raises the rule's error; None inside the typed
        collectives' implementation when the rule fails (on_collective types the result)."""
        inplace_target = None
        if plan.inplace or (plan.inplace_kw and kwargs.get("inplace")):
            first = ops[0][0] if ops else None
            inplace_target = first if isinstance(first, torch.Tensor) else None
        grad_on = torch.is_grad_enabled()
        spec = spec_of(plan, args, kwargs)
        key = _operand_key([spec.name, spec.keeps_shard_dims, spec.reduced_as, self.strict], ops,
                           types, grad_on)
        summing = summing_name(spec)  # a loss's reduction: the name the pending rule reads
        reduction = reduction_of(plan, args, kwargs) if plan.reduce_at is not None else None
        if reduction is None and args and isinstance(args[0], torch.Tensor):
            reduction = loss_reduction(spec, args[0].dim())  # a loss's own mean or sum
        if reduction is not None:
            key.append(reduction)
        move = move_of(plan, args, kwargs)
        if move is not None:
            key.append(move)
        declared = move  # the contraction as the call states it (the pending rule reads it)
        summed = None  # a sum over a sharded dim, as the call states it (the same rule)
        if reduction is not None and summing in _PENDING_SUMS and not reduction.partial_axes:
            summed = reduction
            reduction = dataclasses.replace(reduction, partial_axes=("*",))
        if isinstance(move, Contraction) and move.family != "attention":
            # a sum over a dim sharded in every varying operand is no error here: the result
            # is a pending partial sum that only reinterpret(V->P) may take (_PENDING)
            move = dataclasses.replace(move, partial_axes=("*",))
        partial_axes: tuple[str, ...] | None = None
        rec = _global_check.local_out_partial(plan.name)
        if rec is not None:  # spmd.einsum/matmul/linear/sum(..., out_partial_axes=...)
            from . import _mesh
            partial_axes = _mesh.axis_names(rec.axes)
            key.append(("out_partial_axes", partial_axes))
        key_t = tuple(key)
        cached = _RESULTS.get(key_t)
        if cached is None:
            res = self._propagate(plan, ops, types, grad_on, None, reduction=reduction,
                                  partial_axes=partial_axes, move=move, spec=spec)
            if len(_RESULTS) >= _RESULTS_MAX:
                _RESULTS.clear()
            cached = _RESULTS[key_t] = (_canon(res.type), bool(res.errors))
        rtype, failed = cached
        if failed:
            if _in_collective_internals():
                return None  # on_collective types the collective's result
            values = [v for v, _ in ops]
            texts = _texts(values, [_default_text(i) for i in range(len(values))])
            res = self._propagate(plan, ops, types, grad_on, texts, reduction=reduction,
                                  partial_axes=partial_axes, move=move, spec=spec)
            if res.errors and res.errors[0].code == "spmd-invariant-mix":
                # the op written as an all_reduce's argument: the fix that pastes there, as
                # the static checker's (engine Operand.reduced)
                reduced = _enclosing_all_reduce()
                if reduced:
                    again = self._propagate(plan, ops, types, grad_on, texts,
                                            reduction=reduction, partial_axes=partial_axes,
                                            move=move, spec=spec, reduced=reduced)
                    if again.errors:
                        res = again
            raise SpmdTypeError(res.errors[0])
        targets: list[torch.Tensor] = []
        if inplace_target is not None:
            targets.append(inplace_target)
        if outs:
            targets.extend(outs)
        whole = plan.name == "__setitem__" and len(args) > 1 and _whole_index(args[1])
        new_types = [self._check_target(plan, tgt, tgt is inplace_target, rtype, ops, grad_on,
                                        spec, whole)
                     for tgt in targets]
        if declared is not move and rtype and not targets:
            pending = _PENDING_AXES.get(key_t)
            if pending is None:
                pending = _partial_axes(declared, ops, types, rtype, partial_axes or ())  # type: ignore[arg-type]
                if len(_PENDING_AXES) >= _RESULTS_MAX:
                    _PENDING_AXES.clear()
                _PENDING_AXES[key_t] = pending
            if pending:
                self.pending = (spec.name, declared, pending, ops, types)
        elif summed is not None and rtype and not targets and ops and isinstance(ops[0][0], torch.Tensor):
            x_t = types[0]
            shape = tuple(ops[0][0].shape)
            pending = tuple(a for a, lt in rtype.axes
                            if lt.kind is TKind.V and a not in (partial_axes or ())
                            and x_t is not None
                            and reduced_partial_sum(summing, x_t.get(a), a, summed, shape))
            if pending:
                self.pending = (summing, summed, pending, ops, types)
        return rtype, targets, new_types

    def _foreach(self, plan: Plan, func: Any, args: tuple, kwargs: dict) -> Any:
        """``torch._foreach_add_(params, grads, alpha=-lr)`` (optimizers, clip_grad_norm_):
        the rule of the per-position op (``plan.each``) at each list position, checked before
        the call runs; the mutated tensors and the results typed position by position.
        A position with a global (partition spec) operand takes the global rule
        (:meth:`_global_check`)."""
        each = plan.each
        positions = _torch_ops.foreach_positions(args, kwargs)
        if each is None or positions is None:
            return func(*args, **kwargs)
        checks: list[tuple[SpmdType, list[torch.Tensor], list[SpmdType]] | None] = []
        for a, k in positions:
            read = a
            if plan.first_step is not None and k.get(plan.first_step) is True:
                # SGD's first fused step: the momentum buffers are overwritten, not read
                read = tuple([] if j in plan.writes else v for j, v in enumerate(a))
            ops, outs = extract(each, read, k)
            types = _operand_types(ops)
            if types is not None and _ZEROS and (each.inplace or outs or plan.writes):
                written = [*(read[:1] if each.inplace else ()), *outs,
                           *(read[j] for j in plan.writes if j < len(read))]
                types = _written_zeros(ops, types, written)
            if types is None:
                checks.append(None)
                continue
            if _global_check.is_global(types):
                # a partition spec at this position: the global rule, as for one tensor
                # (torch._foreach_addcmul_(exp_avg_sqs, grads, grads): addcmul_'s)
                checks.append(self._global_check(each, read, k, ops, types, outs))
                continue
            checked = self._local_check(each, read, k, ops, outs, types)
            if checked is not None and plan.writes:
                # a fused optimizer step: the states it writes at this position keep their
                # types (or take the step's), as the parameter does
                rtype, targets, new_types = checked
                grad_on = torch.is_grad_enabled()
                for j in plan.writes:
                    state = a[j] if j < len(a) else None
                    if isinstance(state, torch.Tensor) and all(state is not t for t in targets):
                        targets.append(state)
                        new_types.append(self._check_target(each, state, True, rtype, ops, grad_on))
            checks.append(checked)
        before = _versions_before([t for c in checks if c is not None for t in c[1]]) if (
            _BACKWARD_VERSIONS) else None
        result = func(*args, **kwargs)
        if before:
            _shift_versions(before)
        results = list(result) if isinstance(result, (list, tuple)) else None
        for i, checked in enumerate(checks):
            if checked is None:
                continue
            rtype, targets, new_types = checked
            for tgt, t in zip(targets, new_types):
                if t:
                    _set(tgt, t)
            if rtype and results is not None and i < len(results):
                _stamp_outputs(results[i], rtype, targets)
        return result

    def _per_operand_op(self, plan: Plan, func: Any, args: tuple, kwargs: dict, ops: list,
                        types: list) -> Any:
        """``torch.broadcast_tensors(a, b)``, ``torch.atleast_2d(a, b)``: each tensor output
        is its own argument's view, typed by the rule on that argument alone (engine
        ``propagate_each``)."""
        texts = _texts([v for v, _ in ops], [_default_text(i) for i in range(len(ops))])
        operands = [Operand(t, text, bool(getattr(v, "requires_grad", False)), None,
                            tuple(v.shape) if isinstance(v, torch.Tensor) else None)
                    for (v, _), t, text in zip(ops, types, texts)]
        results = propagate_each(plan.name, operands, strict=self.strict)
        for res in results:
            if res.errors:
                raise SpmdTypeError(res.errors[0])
        result = func(*args, **kwargs)
        outs = [result] if isinstance(result, torch.Tensor) else list(result)
        if len(outs) == len(results):  # one output per argument, in order
            for out, res in zip(outs, results):
                if isinstance(out, torch.Tensor) and res.type:
                    _set(out, _canon(res.type))
        return result

    def _global_check(self, plan: Plan, args: tuple, kwargs: dict, ops: list, types: list,
                      outs: Sequence[torch.Tensor] = ()
                      ) -> tuple[SpmdType, list[torch.Tensor], list[SpmdType]] | None:
        """The global rule on one call, before it runs: (the result's type, the mutated
        tensors (self of an in-place op, ``out=``), their types after the op); raises the
        rule's error, or the in-place error of a mutated tensor whose spec the result would
        change; None where the call is left untyped (an argument form the reader does not
        know, the collectives' internals)."""
        grad_on = torch.is_grad_enabled()
        pairs = [(v, t) for (v, _), t in zip(ops, types)]
        try:
            params = _global_check.params_for(plan, args, kwargs, pairs, _get)
        except Exception:  # an argument form the reader does not know: leave it untyped
            return None
        key = _operand_key(["global", plan.name, self.strict, _global_check.params_key(params)],
                           ops, types, grad_on)
        try:
            key_t: Any = tuple(key)
            cached = _RESULTS.get(key_t)
        except TypeError:  # an unhashable parameter: no caching
            key_t, cached = None, None
        if cached is not None:
            rtype, failed = cached
            res = None
        else:
            try:
                res = self._propagate(plan, ops, types, grad_on, None, params)
            except Exception:  # the rule could not read this call: the result stays untyped
                return None
            rtype, failed = _canon(res.type), bool(res.errors)
            if key_t is not None:
                if len(_RESULTS) >= _RESULTS_MAX:
                    _RESULTS.clear()
                _RESULTS[key_t] = (rtype, failed)
        if failed:
            if _in_collective_internals():
                return None
            values = [v for v, _ in ops]
            texts = _texts(values, [_default_text(i) for i in range(len(values))])
            res = self._propagate(plan, ops, types, grad_on, texts, params)
            raise SpmdTypeError(res.errors[0])
        targets: list[torch.Tensor] = []
        if plan.inplace or (plan.inplace_kw and kwargs.get("inplace")):
            first = ops[0][0] if ops else None
            if isinstance(first, torch.Tensor):
                targets.append(first)
        inplace = len(targets)
        targets.extend(outs)
        # an untyped target takes the result's type (the rule placed its dims already)
        new_types = [self._check_target(plan, tgt, i < inplace, rtype, ops, grad_on)
                     if _get(tgt) else rtype for i, tgt in enumerate(targets)]
        return rtype, targets, new_types

    def _propagate(self, plan: Plan, ops: list, types: list, grad_on: bool,
                   texts: list[str] | None, params: dict | None = None,
                   reduction: Reduction | None = None,
                   partial_axes: tuple[str, ...] | None = None,
                   move: DimMove | Contraction | None = None,
                   spec: OpSpec | None = None, reduced: str = "") -> Any:
        spec = spec or plan.spec
        assert spec is not None
        operands = []
        for i, ((v, cls), t) in enumerate(zip(ops, types)):
            text = texts[i] if texts is not None else _default_text(i)
            role = role_of(spec, i, cls)
            if t is None:
                operands.append(Operand(None, text, True, role, zero=_is_zero(v),
                                        reduced=reduced))
            else:
                can_grad = not carries_no_gradient(cls) and grad_on and bool(v.requires_grad)
                # a leaf (no grad_fn: a weight, an input) may be frozen; an activation is not
                leaf = isinstance(v, torch.nn.Parameter) or (bool(v.requires_grad) and v.grad_fn is None)
                operands.append(Operand(t, text, can_grad, role, tuple(v.shape), leaf=leaf,
                                        reduced=reduced))
        if params is not None:
            return global_propagate(plan.name, operands, **params)
        if partial_axes is not None:
            # the einsum family with out_partial_axes: the rule the plugin applies too
            core, bias = (operands[:2], operands[2]) if (
                plan.name == "linear" and len(operands) > 2) else (operands, None)
            return partial_op(plan.name, core, partial_axes, bias=bias, strict=self.strict,
                              reduction=reduction,
                              move=move if isinstance(move, Contraction) else None)
        return propagate(spec, operands, strict=self.strict, reduction=reduction, move=move)

    @staticmethod
    def _check_target(plan: Plan, tgt: torch.Tensor, inplace: bool, rtype: SpmdType,
                      ops: list, grad_on: bool, spec: OpSpec | None = None,
                      whole: bool = False) -> SpmdType:
        """The mutated tensor's type after the op (raises if the op would change it, or
        would write a value sharded on another dim into it: engine ``check_inplace``).
        ``whole``: ``x[...] = v``, every element written."""
        old = _get(tgt)
        if old:
            where = plan.name if inplace else f"{plan.name}(..., out=)"
            err = check_inplace(where, Operand(old, "x"), rtype)
            sharded = err is None and _other_shard_dims(old, ops, tgt)
            if err is not None or sharded:
                picked = [(i, v, cls) for i, (v, cls) in enumerate(ops)
                          if isinstance(v, torch.Tensor) and v is not tgt]
                free = _gradient_free(ops, grad_on)
                spec = spec or plan.spec

                def check(texts: Sequence[str]) -> SpmdError | None:
                    """The rule with the values' types, roles and shapes, named ``texts``."""
                    others = [Operand(_get(v) or None, text, True,
                                      role_of(spec, i, cls) if spec is not None else None,
                                      tuple(v.shape)) for (i, v, cls), text in zip(picked, texts[1:])]
                    return check_inplace(where, Operand(old, texts[0], shape=tuple(tgt.shape)),
                                         rtype, free, others=others, whole_store=whole)

                defaults = ["x", *("value" if i == 0 else f"value{i}" for i in range(len(picked)))]
                # (the shard dims compared first unnamed: naming reads the caller's frame)
                if sharded and check(["x"] + ["value"] * len(picked)) is None:
                    return (old or _UNTYPED).mutated_by(rtype)
                err = check(_texts([tgt, *(v for _, v, _ in picked)], defaults))
                if err is not None:
                    if inplace and plan.name in INPLACE_VIEWS and _called_by_torch():
                        # torch's own in-place view (unpad_sequence's transpose_, Adamax's
                        # unsqueeze_ of a temporary): the object's layout is the view's, and
                        # the user has no code to rewrite; the type follows the object
                        return rtype
                    owner = _state_owner(tgt)
                    owner_type = _get(owner) if owner is not None else None
                    if owner is not None and owner_type:
                        # the target is a parameter's optimizer state (Adam's moment) of
                        # another layout than its parameter: the state is wrong, not the value
                        state_text, owner_text = _texts([tgt, owner], ["x", "p"], written=False)
                        err = optimizer_state_error(
                            where, Operand(old, state_text, shape=tuple(tgt.shape)),
                            Operand(owner_type, owner_text, shape=tuple(owner.shape))) or err
                    raise SpmdTypeError(err)
            return old.mutated_by(rtype)
        if any(isinstance(v, torch.Tensor) and v is not tgt and v.ndim != tgt.ndim and _get(v)
               for v, _ in ops):
            # an untyped (or zeros) tensor takes the result's type, but a value of another
            # rank written into it (``torch.zeros(4, 6).add_(g)``, a 1-d S(0) g broadcast from
            # the back: its blocks lie along dim 1) has its shard dims counted in its own dims
            return rtype.forget_dims()
        return rtype


_UNTYPED = SpmdType()


def _generator_of(gen: Any, ops: list) -> tuple[Any, str]:
    """The generator a random op draws from (its ``generator`` argument, else the default
    one of its first tensor operand's device), and the message's words for it; (None, "")
    for a device whose default generator the check does not know."""
    if isinstance(gen, torch.Generator):
        return gen, f"its generator= argument ({gen.device.type})"
    device = next((v.device for v, _ in ops if isinstance(v, torch.Tensor)), torch.device("cpu"))
    if device.type == "cpu":
        return torch.default_generator, "the default CPU generator (torch.get_rng_state())"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return (torch.cuda.default_generators[index],
                f"the default generator of cuda:{index} (torch.cuda.get_rng_state())")
    return None, ""


def _check_random_state(plan: Plan, args: tuple, kwargs: dict, ops: list, types: list,
                        rtype: SpmdType) -> None:
    """A random op (engine RANDOM_OPS) whose result the rule types R or I on an axis: its
    generator must be in the same state on every rank of the axis, or the ranks draw different
    masks (spmd-random). One all_gather of the state's checksums per such axis, before the op
    draws; nothing cached (every draw moves the state); no check on an axis of one rank."""
    axes = [a for a, lt in rtype.axes if lt.kind is TKind.R or lt.kind is TKind.I]
    if not axes or _in_collective_internals():
        return
    from . import _mesh

    binding = _mesh._current
    if binding is None:
        return
    axes = [a for a in axes if a in binding.names]
    if not axes:
        return
    draws, gen = random_draw_of(plan, args, kwargs)
    if not draws:
        return
    gen, words = _generator_of(gen, ops)
    if gen is None:
        return
    device = next((v.device for v, _ in ops if isinstance(v, torch.Tensor)), torch.device("cpu"))
    sums: torch.Tensor | None = None
    for axis in axes:
        group = _mesh.resolve_axis(axis)
        if group.size == 1:
            continue
        with torch.no_grad(), suspended():
            if sums is None:
                data = gen.get_state().numpy().tobytes()
                sums = torch.tensor([zlib.crc32(data), zlib.adler32(data), len(data)],
                                    dtype=torch.int64, device=device)
            rows = _dist_utils.all_gather(sums, group).view(group.size, 3).cpu()
        differs = [k for k in range(group.size) if not torch.equal(rows[k], rows[0])]
        if not differs:
            continue
        values = [v for v, _ in ops]
        texts = _texts(values, [_default_text(i) for i in range(len(values))])
        at = 0
        for i, t in enumerate(types):
            lt = t.get(axis) if t is not None else None
            if lt is not None and (lt.kind is TKind.R or lt.kind is TKind.I):
                at = i
                break
        t = types[at] if at < len(types) and types[at] is not None else rtype
        ranks = group.ranks
        raise SpmdTypeError(random_state_error(plan.name, axis, texts[at] if texts else "x", t,
                                               words, (ranks[0], ranks[differs[0]])))


def _check_grad_assignment(x: torch.Tensor, value: torch.Tensor) -> None:
    """``x.grad = value``: engine ``duality.check_grad_assignment`` (raises): a typed value
    that is no gradient of ``x`` (a V view of a flat gradient bucket given to an I or R
    parameter) is reported here, not at the optimizer's step that reads it."""
    owner, typ = _get(x), _get(value)
    if not owner or not typ:
        return
    ndim = _ndim(x)
    if not duality.check_grad_assignment(owner, typ, target="x.grad", value_text="value",
                                         ndim=ndim):
        return
    tx, tv = _texts([x, value], ["x", "value"])
    errors = duality.check_grad_assignment(owner, typ, target=f"{tx}.grad", value_text=tv,
                                           ndim=ndim)
    if errors:
        raise SpmdTypeError(errors[0])


def _check_data_assignment(x: torch.Tensor, value: torch.Tensor) -> None:
    """``x.data = value``: engine ``check_data_assignment`` (raises)."""
    old, new = _get(x), _get(value)
    if not old or not new or not any(lt.dim is not None or lt.by_rank is not None
                                     for _, lt in old.axes):
        return
    err = check_data_assignment(Operand(old, "x.data", shape=tuple(x.shape)),
                                Operand(new, "value", shape=tuple(value.shape)))
    if err is not None:
        tx, tv = _texts([x, value], ["x", "value"])
        err = check_data_assignment(Operand(old, f"{tx}.data", shape=tuple(x.shape)),
                                    Operand(new, tv, shape=tuple(value.shape)))
        if err is not None:
            raise SpmdTypeError(err)


def _other_shard_dims(old: SpmdType, ops: list, tgt: torch.Tensor) -> bool:
    """Whether a value is sharded on an axis where ``old`` (the type of ``tgt``) is, with
    another layout written or another rank (broadcast): the cheap test before the engine's
    shard_dim_conflict, which reads the shapes; an optimizer's ``p.add_(g)`` with p and g
    both S(0) never builds the operands."""
    for axis, want in old.axes:
        if want.dim is None and want.by_rank is None:
            continue
        for v, _ in ops:
            if v is tgt or not isinstance(v, torch.Tensor):
                continue
            t = _get(v)
            have = t.get(axis) if t else None
            if have is not None and (have != want or v.ndim != tgt.ndim) and (
                    have.dim is not None or have.by_rank is not None):
                return True
    return False


def _whole_index(index: Any) -> bool:
    """Whether ``x[index]`` is all of ``x``: ``x[...]``, ``x[:]``, ``x[:, :]``."""
    if isinstance(index, tuple):
        return bool(index) and all(_whole_index(i) for i in index)
    if isinstance(index, slice):
        return index.start is None and index.stop is None and index.step is None
    return index is Ellipsis


def _loss_text(loss: torch.Tensor) -> str:
    return _texts([loss], ["loss"])[0]


def _check_loss(loss: Any, what: str | None = None, grads_name: str = "grad_outputs",
                inputs: Sequence[Any] = ()) -> None:
    """``loss.backward()``; ``what``: the call seeding it instead (``torch.autograd.grad``,
    given no ``grads_name``), named as the static checker names it: the call with the
    output's name, or ``(...)`` and "the output" when the caller holds it under none.
    ``inputs``: ``torch.autograd.grad``'s inputs (engine ``check_backward``'s)."""
    if not isinstance(loss, torch.Tensor):
        return
    if _PENDING and id(loss) in _PENDING:
        # a pending partial sum differentiated (``(g * g).sum().backward()`` of an S(0) g):
        # its first use other than reinterpret(V->P): the sum's own error (spmd-global, the
        # static checker's at the sum), whose fix (spmd.sum(..., out_partial_axes=), dst=I)
        # is the loss's, rather than spmd-backward's reinterpret of a V
        _check_pending(loss, None)
    t = _get(loss)
    if not t:
        return
    scalar = loss.dim() == 0
    errors = check_backward(Operand(t, "loss"), scalar)
    if errors:
        ins = [x for x in inputs if isinstance(x, torch.Tensor) and _get(x)]
        texts = _texts(ins, [f"input{k}" for k in range(len(ins))]) if ins else []
        in_ops = [Operand(_get(x), text) for x, text in zip(ins, texts)]
        if what is None:
            errors = check_backward(Operand(t, _loss_text(loss)), scalar, in_ops)
            raise SpmdTypeError(errors[0])
        name = _texts([loss], ["the output"])[0]
        call = f"{what}(...)" if name == "the output" else f"{what}({name}, ...)"
        e = check_backward(Operand(t, name), scalar, in_ops)[0]
        raise SpmdTypeError(SpmdError(e.code, e.message.replace(
            f"{name}.backward()", f"{call} without {grads_name}", 1)))


def _check_value_read(read: str, x: Any) -> None:
    """``x.item()``, ``float(x)``, ``if x:``, ``v in x``...: a Partial's local values are
    this rank's summand (engine ``check_value_read``); metadata reads pass through."""
    if not isinstance(x, torch.Tensor):
        return
    t = _get(x)
    if t and check_value_read(read, Operand(t, "x")) is not None:
        err = check_value_read(read, Operand(t, _texts([x], ["x"])[0]))
        assert err is not None
        raise SpmdTypeError(err)


def _check_losses(tensors: Any, grads: Any, what: str | None, batched: bool = False,
                  inputs: Any = ()) -> None:
    """The gradients seeding a backward pass: an output given none is a loss (I or P on
    every axis); a given one must be the dual of its output's type on every axis (engine
    ``duality.check_grad_outputs``, the static checker's rule: a Partial gradient given for
    an I output passed, and the I parameter's gradients differed per rank).  ``what`` names
    the call (None: ``out.backward(gradient)``, named by its receiver); ``batched``:
    ``is_grads_batched=True`` (each gradient a batch of them on a new dim 0)."""
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or ())
    if grads is None:
        gs: list[Any] = [None] * len(ts)
    elif isinstance(grads, torch.Tensor):
        gs = [grads]
    else:
        gs = list(grads)
    for i, t in enumerate(ts):
        if i >= len(gs) or gs[i] is None:
            _check_loss(t, what, "grad_tensors" if what == "torch.autograd.backward"
                        else "grad_outputs",
                        [inputs] if isinstance(inputs, torch.Tensor) else list(inputs or ()))
            continue
        g = gs[i]
        if not (isinstance(t, torch.Tensor) and isinstance(g, torch.Tensor)):
            continue
        out_t, g_t = _get(t), _get(g)
        want = duality.gradient_type(out_t) if out_t else out_t
        if batched and want:
            want = duality.batched_type(want)
        ndim = _ndim(g)
        if not (out_t and g_t) or not duality.mismatches(g_t, want, ndim=ndim):
            continue
        out_text, g_text = _texts([t, g], ["output", "gradient"])
        errors = duality.check_grad_outputs([duality.Slot.tensor(out_text, out_t)],
                                            [duality.Slot.tensor(g_text, g_t)],
                                            what or f"{out_text}.backward", batched, ndim)
        if errors:
            raise SpmdTypeError(errors[0])


# --------------------------------------------------------------------------------------
# The public API.

_STACK: list[_Mode] = []  # the open blocks' modes, innermost last


def _inside_an_inner_block(mode: _Mode) -> bool:
    """Whether ``mode`` is called from the handler of a block opened inside it on this
    thread (that block's mode is off torch's mode stack while its handler runs)."""
    me = threading.get_ident()
    try:
        inner = [m for m in _STACK[_STACK.index(mode) + 1:] if m.thread == me]
    except ValueError:
        return False
    if not inner:
        return False
    current = torch.overrides._get_current_function_mode_stack()
    return any(all(m is not c for c in current) for m in inner)


class typecheck(contextlib.ContextDecorator):
    """``with spmd.typecheck():`` -- check SPMD types on live tensors inside the block.

    ``strict=True`` makes an untyped tensor used with typed ones an error
    (``spmd-untyped``), like ``strict = true`` in the plugin's config.  Blocks
    nest (the innermost one's ``strict`` applies); usable as a decorator
    (``@spmd.typecheck()``).  Leaving the last block uninstalls the mode.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._modes: list[_Mode] = []

    def __enter__(self) -> typecheck:
        global ACTIVE
        mode = _Mode(self.strict)
        mode.__enter__()
        if not _STACK:
            _install_apply()
            _install_swap()
            _enter_eager_stance()
        _STACK.append(mode)
        self._modes.append(mode)
        ACTIVE = True
        return self

    def __exit__(self, *exc: object) -> None:
        global ACTIVE
        mode = self._modes.pop()
        try:
            mode.__exit__(*exc)
        finally:
            if mode in _STACK:
                _STACK.remove(mode)
            ACTIVE = bool(_STACK)
            if not _STACK:
                _uninstall_apply()
                _exit_eager_stance()


# torch.compile inside the check mode: the compiled functions run eagerly (torch's
# "force_eager" stance), so every op is checked as written; tracing the mode's bookkeeping
# took Dynamo ~50 s of recompiles on a small model (a probe) and fullgraph=True failed on it
_STANCE: list[Any] = []


def _enter_eager_stance() -> None:
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None or _STANCE:
        return
    stance = set_stance("force_eager")
    stance.__enter__()
    _STANCE.append(stance)


def _exit_eager_stance() -> None:
    if _STANCE:
        _STANCE.pop().__exit__(None, None, None)


def spmd_type_of_annotation(annotation: Any) -> SpmdType | None:
    """The type ``Tensor[...]`` carries, with the current mesh's flattened dims read as their
    component axes (``R["dp"]`` after ``_flatten("dp")`` is ``R["dp_replicate", "dp_shard"]``,
    as ``flattened_axes`` makes the static checker read it); a component typed twice is an
    spmd-annotation error."""
    t = _declared_type_of(annotation)
    if t is None:
        return None
    from . import _mesh

    if _mesh._current is None:
        return t
    t, errors = _mesh.expand_type(t)
    if errors:
        raise SpmdTypeError(SpmdError("spmd-annotation", f"{format_type(_declared_type_of(annotation))}: "
                                      f"{errors[0].message}"))
    return t


def _declared_here(want: SpmdType, what: Callable[[], str]) -> SpmdType:
    """A declared type (``spmd.declare``, ``declare_parameters``, a checked function's
    annotations) as the current mesh reads it: the one place the check mode resolves a
    declaration's axes.  Flattened dims are read as their components (``P["dp"]``); an axis
    the current mesh (its family: root, flattened dims) does not have is an error, as the
    static checker's unknown axis (``R["cp"]`` on a (dp, tp) mesh declares nothing about any
    group and would be carried silently); an axis of another mesh set before (an expert
    mesh's "ep" while the dense mesh is current) is kept, as the static checker's one list of
    axes has it.  With no mesh set, the names are kept for the first mesh that has them
    (``_mesh._bind_declared``: ``P["dp"]`` declared before ``set_mesh`` is read then).
    ``what``: the declaration as the message starts (``spmd.declare(x, Tensor[...])``)."""
    from . import _mesh

    binding = _mesh._current
    if not want.axes:
        return want
    if binding is None:
        _mesh.unbound_names.update(a for a, _ in want.axes)
        return want
    t, errors = _mesh.expand_type(want)
    if errors:
        raise SpmdTypeError(SpmdError("spmd-annotation", f"{what()}: {errors[0].message}"))
    if all(a in binding.names for a, _ in t.axes):  # the commonest: the mesh's own dims
        return t
    names = _mesh.family_axis_names() or frozenset()
    for axis, _ in t.axes:
        if axis not in names and not _mesh.is_axis_of_another_mesh(axis):
            raise SpmdTypeError(SpmdError(
                "spmd-annotation",
                f"{what()}: " + _mesh.unknown_axis_message(axis, binding.names,
                                                          _mesh.flattened_names())))
    return t


def expand_tracked(aliases: dict[str, tuple[str, ...]]) -> None:
    """Every tracked type naming one of ``aliases`` (flattened dims, declared before the mesh
    was set) names its components instead (``_mesh._bind_declared``).  A component typed
    twice through the name is the declaration's spmd-annotation error, raised once all are
    read (the axis is left unknown, as a declaration's error leaves it)."""
    from spmd_mypy.engine.annotations import build, entries_of

    done: dict[int, SpmdType] = {}
    first: SpmdError | None = None
    for key, (ref, typ) in list(_TYPES.items()):
        if not any(a in aliases for a, _ in typ.axes):
            continue
        new = done.get(id(typ))
        if new is None:
            t, errors = build(entries_of(typ), None, aliases=aliases)
            if errors and first is None:
                first = SpmdError("spmd-annotation", f"{format_type(typ)} (declared before "
                                  f"spmd.set_mesh): {errors[0].message}")
            new = done[id(typ)] = _canon(t)
        _TYPES[key] = (ref, new)
    if first is not None:
        raise SpmdTypeError(first)


def _as_spmd_type(t: Any) -> SpmdType:
    if isinstance(t, SpmdType):
        return t
    st = spmd_type_of_annotation(t)
    if st is None:
        if t is torch.Tensor or getattr(t, "__name__", None) == "Tensor":
            return _UNTYPED
        raise TypeError(f'spmd.declare takes a type like Tensor[R["tp"]], not {t!r}')
    return st


def _index_value(x: object) -> IndexValue | None:
    """An integer or bool tensor (indices, a mask, counts: the check mode sees the dtype, not
    the op that made it), whose fix is no gather or sum of its values where R is needed
    (engine ``IndexValue``); None for any other value."""
    dtype = getattr(x, "dtype", None)
    if not isinstance(dtype, torch.dtype) or dtype.is_floating_point or dtype.is_complex:
        return None
    return IndexValue(COMPARE if dtype is torch.bool else "")


def _is_integer(x: torch.Tensor) -> bool:
    """An integer or bool tensor (a token id, a mask): torch gives it no gradient."""
    return not (x.is_floating_point() or x.is_complex())


def _stamp_declared(x: torch.Tensor, want: SpmdType, what: str,
                    name: str | Callable[[], str] | None = None,
                    may_be_cut: bool | None = None, unnamed: str | None = None,
                    widen: bool = False) -> None:
    """Give ``x`` the declared type ``want``.

    ``widen`` (``spmd.declare``): a plain V declared of an S(i) drops the known dim (the
    code means this rank's block as a value of its own: a per-rank BatchNorm's ``x.mean(0)``),
    as the static checker reads the declaration; else knowledge only grows.

    ``what`` is the start of the message with ``{x}`` for the tensor's name, e.g.
    ``"spmd.declare({x}, Tensor[R["tp"]])"``; ``name``: that name when the caller knows it
    (a function's return value has none in the caller's frame).  ``may_be_cut``: ``x`` may
    be a part cut by hand from a replicated whole (a parameter: Megatron's init), which the
    check mode types as the whole, R or I, as the static checker does: the message says how
    to cut it so that both checkers follow (None: judged from the name).  ``unnamed``: ``x``
    is no operand of the caller's expression (a parameter of the module passed): its name
    where the caller holds none (else the expression's operand would name it).
    """
    def text_of() -> str:
        if callable(name):  # read on an error only (a function's returned expression)
            return name()
        if name:
            return name
        if unnamed is not None:
            return _texts([x], [unnamed], written=False)[0]
        return _texts([x], ["x"])[0]

    want = _declared_here(want, lambda: what.format(x=text_of()))
    spec = want.spec
    if spec is not None and len(spec) != x.ndim:
        text = text_of()
        # PS[("dp", "tp")] is PS["dp", "tp"] in Python (JAX's spelling of one dim on two axes)
        one = (' (PS[("dp", "tp")] is PS["dp", "tp"] in Python: two dims; one dim sharded on '
               'both axes is PS[("dp", "tp"),])') if x.ndim == 1 and len(spec) > 1 else ""
        raise SpmdTypeError(SpmdError(
            "spmd-annotation",
            f"{what.format(x=text)} but {text} has {x.ndim} dims and the partition spec "
            f"{len(spec)} entries{one}: a partition spec has one entry per dim",
        ))
    have = _get(x)
    if not have:
        _set(x, want)
        return
    have, want = _types_at_rank(x, have, want)
    # an integer or bool tensor never carries a gradient: its R and I agree (engine
    # check_argument's gradient_free; the static checker reads argmax, a comparison, .long())
    integer = _is_integer(x)
    if declaration_conflict(have, want, integer) is not None:
        text = text_of()
        raise SpmdTypeError(declaration_error(  # type: ignore[arg-type]
            have, want, x_text=text, what=what.format(x=text), order=_axis_order(),
            # the check mode sees values, not how they were cut: an unnamed one may be
            may_be_cut=True if may_be_cut or text == "x" else None, index=_index_value(x),
            gradient_free=integer))
    # Knowledge only grows: the declared axes (refining V to S(i)), plus what x already knew
    # on the current mesh's axes (and its root mesh's: under mesh["tp"] a value's "dp" type
    # still holds). Axes of another mesh are dropped: a value back from an expert mesh (ep,
    # edp) is declared on the dense one (dp, tp), and its "ep" types say nothing there (the
    # two meshes split the same ranks differently; docs/meshes.md).
    d = have.as_dict()
    from . import _mesh
    names = _mesh.family_axis_names()
    if names is not None:
        declared = want.as_dict()
        d = {a: lt for a, lt in d.items() if a in names or a in declared}
    for axis, lt in want.axes:
        known = d.get(axis)
        if known is None or known.dim is None or (widen and _widens(known, lt)):
            d[axis] = lt
    # a local type declared on a global value: from here the value is local (the static
    # checker reads the declaration so), each sharded axis its S(i), as inside local_map
    _set(x, SpmdType.of(d, want.spec))


def declare(x: _T, t: Any) -> _T:
    """``spmd.declare(x, Tensor[R["tp"]])``: ``x``, given that type in check mode.

    Outside ``spmd.typecheck()`` it returns ``x`` and does nothing.  Inside, it
    stamps the type on ``x``; if ``x`` is already tracked, the declared type
    must agree with it on the axes both know (``V`` may be declared ``S(i)``):
    a declaration states a fact, it does not convert (use ``spmd.reinterpret``
    / ``spmd.convert`` for that).  Axes ``x`` knows and the declaration does
    not mention are kept if they are axes of the current mesh, dropped if not
    (a value back from another mesh: see docs/meshes.md).
    """
    if not ACTIVE:
        return x
    want = _as_spmd_type(t)
    if not isinstance(x, torch.Tensor):  # (a tensor's is checked where it is stamped)
        _declared_here(want, lambda: f"spmd.declare(x, {format_type(want)})")
    if isinstance(x, torch.Tensor):
        what = "spmd.declare({x}, " + format_type(want, _axis_order()) + ")"
        have = _get(x)
        if have and any(_widens(k, lt) for a, lt in want.axes if (k := have.get(a)) is not None):
            # a widening of S(i) to V: the result is a new alias typed V (the static checker
            # types the result V); x itself keeps its S(i), and what else it learns
            name = _texts([x], ["x"])[0]
            _stamp_declared(x, want, what, name=name)
            with torch._C.DisableTorchFunction():
                y = x.view_as(x)
            _set(y, have)
            _stamp_declared(y, want, what, name=name, widen=True)
            return y  # type: ignore[return-value]
        _stamp_declared(x, want, what)
    return x


def _widens(known: LocalType, lt: LocalType) -> bool:
    """A plain V declared of a V with a known layout (S(i), or one by rank)."""
    return (lt.kind is TKind.V and lt.dim is None and lt.by_rank is None
            and known.kind is TKind.V and (known.dim is not None or known.by_rank is not None))


def declare_parameters(module: _M) -> _M:
    """``spmd.declare_parameters(model)``: in check mode, every parameter and buffer of
    ``model`` and its submodules whose class annotates it (``w1: Tensor[S[0, "tp"]]`` in the
    class body, as the static checker reads it) is declared that type, as ``spmd.declare``
    would.  Any other object (an optimizer holding its state in annotated attributes): each
    annotated tensor attribute, and the tensors of one annotated ``list[Tensor[...]]``.  Without it a parameter is untyped in check mode (its errors go unseen).  Outside
    ``spmd.typecheck()`` it does nothing; it returns ``model``::

        with spmd.set_mesh(mesh), spmd.typecheck():
            spmd.declare_parameters(model)
            loss = model(batch)

    A DTensor parameter is not declared (the annotation is the type of the local value the
    forward computes with, not of a DTensor).  Under FSDP2 (``fully_shard``) the parameters
    are DTensor shards between forwards and the forward uses new, unsharded tensors: each
    FSDP module of ``model`` gets a forward pre-hook, run after FSDP's own (which unshards),
    that declares the unsharded parameters at every forward in check mode (it does nothing
    outside; registered once per module).
    """
    if not isinstance(module, torch.nn.Module):
        _check_declares_attributes(module)
        if ACTIVE:
            _declare_attributes(module)
        return module
    if not ACTIVE:
        return module
    _declare_module_tree(module)
    _follow_fsdp(module)
    return module


def _check_declares_attributes(obj: Any) -> None:
    """``declare_parameters(obj)`` of an object that is no module: a TypeError (in check mode
    and outside) when its class annotates no attribute with a typed tensor (``w: Tensor[...]``,
    a list, tuple or dict of them), which :func:`_declare_attributes` reads: a number, a string,
    None, a list of modules would declare nothing without a word.  Annotations that do not
    evaluate are given the benefit of the doubt."""
    import typing

    hints = _type_hints(type(obj))
    if hints is None:
        return
    for name, ann in hints.items():
        stripped = _strip_optional(ann)
        if _tensor_type_of(ann) is not None or any(
                _tensor_type_of(a) is not None for a in typing.get_args(stripped)):
            return
    what = type(obj).__name__
    raise TypeError(
        f"declare_parameters() takes a torch.nn.Module (its parameters and buffers annotated in "
        f"its class) or an object whose class annotates tensor attributes (w: Tensor[...], "
        f"list[Tensor[...]]), not {what}: nothing would be declared; pass the model (each "
        f"module of a list), or declare a tensor with spmd.declare(x, Tensor[...])")


def _declare_attributes(obj: Any) -> None:
    """An object that is no module (an optimizer's state holder): each attribute its class
    annotates ``Tensor[...]`` whose value is a tensor is declared that type, as the static
    checker reads the class body; so are the items of one annotated ``list[Tensor[...]]`` /
    ``tuple[Tensor[...], ...]``, the values of a ``dict[..., Tensor[...]]`` and the positions of
    a ``tuple[Tensor[A], Tensor[B]]``."""
    import typing

    cls = type(obj)
    hints = _type_hints(cls) or {}
    items = _annotated_item_types(hints)
    for name, ann in hints.items():
        value = getattr(obj, name, None)
        parts: list[tuple[str, Any, SpmdType | None]]
        stripped = _strip_optional(ann)
        origin, args = typing.get_origin(stripped), typing.get_args(stripped)
        if isinstance(value, torch.Tensor):
            parts = [("", value, _tensor_type_of(ann))]
        elif name in items and isinstance(value, (list, tuple)):
            parts = [(f"[{k}]", v, items[name]) for k, v in enumerate(value)]
        elif isinstance(value, dict) and origin is not None and len(args) == 2:
            parts = [(f"[{k!r}]", v, _tensor_type_of(args[1])) for k, v in value.items()]
        elif isinstance(value, tuple) and origin is tuple and len(args) == len(value):
            parts = [(f"[{k}]", v, _tensor_type_of(a)) for k, (v, a) in enumerate(zip(value, args))]
        else:
            continue
        for where, v, want in parts:
            if want is not None and isinstance(v, torch.Tensor) and not _is_dtensor(v):
                _stamp_declared(v, want, f"spmd.declare({cls.__name__}.{name}{where}, "
                                + format_type(want, _axis_order()) + ")", may_be_cut=True,
                                unnamed=f"{cls.__name__}.{name}{where}")


_CLASS_HINTS: weakref.WeakKeyDictionary[type, dict[str, SpmdType]] = weakref.WeakKeyDictionary()


def _class_parameter_types(cls: type) -> dict[str, SpmdType]:
    """A class's ``Tensor[...]`` attribute annotations (``Optional[Tensor[...]]`` and
    ``Tensor[...] | None`` read as ``Tensor[...]``), once per class: a module's parameters, a
    NamedTuple's, a dataclass's or a TypedDict's fields."""
    try:
        return _CLASS_HINTS[cls]
    except (KeyError, TypeError):
        pass
    import typing

    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - a class whose hints do not evaluate: its own dict
        hints = {}
        for klass in reversed(cls.__mro__):
            hints.update(getattr(klass, "__annotations__", {}))
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        hints = {**_init_annotations(cls), **hints}  # the class body's first
    out = {}
    for name, ann in hints.items():
        st = _tensor_type_of(ann)  # Optional[Tensor[...]]: Megatron's optional bias
        if st is not None:
            out[name] = st
    try:
        _CLASS_HINTS[cls] = out
    except TypeError:
        pass
    return out


def _init_annotations(cls: type) -> dict[str, Any]:
    """The attributes a module's ``__init__`` (its classes', the subclass's last) annotates
    where it assigns them, ``self.w: Tensor[S[0, "tp"]] = nn.Parameter(...)`` (Python keeps
    no such annotation; the static checker reads them as it reads the class body's), each
    evaluated in the module of its ``__init__``; one that does not evaluate is skipped."""
    import ast
    import inspect
    import textwrap

    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        code = getattr(init, "__code__", None)
        if code is None or os.path.abspath(code.co_filename).startswith(_TORCH_DIR + os.sep):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):  # no source (a REPL, a zip): none read
            continue
        fn = tree.body[0] if tree.body else None
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
            continue
        me = fn.args.args[0].arg
        for node in ast.walk(fn):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute)
                    and isinstance(node.target.value, ast.Name) and node.target.value.id == me):
                try:
                    ann = eval(compile(ast.Expression(node.annotation), "<annotation>", "eval"),
                               init.__globals__)
                    if isinstance(ann, str):  # a quoted annotation
                        ann = eval(ann, init.__globals__)
                except Exception:  # noqa: BLE001 - a name only the type checker sees
                    continue
                out[node.target.attr] = ann
    return out


def _is_dtensor(t: Any) -> bool:
    dtensor = sys.modules.get("torch.distributed.tensor")
    cls = getattr(dtensor, "DTensor", None) if dtensor is not None else None
    return cls is not None and isinstance(t, cls)


def _fsdp1_sharded(t: Any) -> bool:
    """A parameter of torch's FullyShardedDataParallel (FSDP1, ``use_orig_params=True``)
    between forwards: a flat 1-d slice of this rank's shard of the module's flattened
    parameters (torch marks it ``_fsdp_flattened``), of no SPMD type its annotation states."""
    return type(t) is torch.nn.Parameter and getattr(t, "_fsdp_flattened", False) is True


def annotated_tensors(module: torch.nn.Module
                      ) -> Iterator[tuple[str, torch.nn.Module, str, torch.Tensor, SpmdType]]:
    """``(submodule path, submodule, name, tensor, type)`` of every parameter and buffer of
    ``module`` and its submodules whose class annotates it (DTensors and FSDP1's sharded
    parameters skipped)."""
    for prefix, sub in module.named_modules():
        types_ = _class_parameter_types(type(sub))
        if not types_:
            continue
        for name, value in [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]:
            want = types_.get(name)
            if want is not None and not _is_dtensor(value) and not _fsdp1_sharded(value):
                yield prefix, sub, name, value, want


def _declare_module_tree(module: torch.nn.Module) -> None:
    for prefix, sub, name, value, want in annotated_tensors(module):
        # named by the caller's name for it (model.fc.w1), else by its class and path
        # (Col.w1): never by the expression the caller passed, the module (the call's
        # operand is not the parameter)
        path = f"{type(module).__name__}.{prefix + '.' if prefix else ''}{name}"
        _stamp_declared(value, want, f"spmd.declare({type(sub).__name__}.{name}, "
                        + format_type(want, _axis_order()) + ")",
                        may_be_cut=True, unnamed=path)


# FSDP2 modules given the re-declaring pre-hook (weakly: a module may go)
_FSDP_FOLLOWED: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()


def _follow_fsdp(module: torch.nn.Module) -> None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:  # noqa: BLE001 - torch without distributed
        return
    for sub in module.modules():
        if sub in _FSDP_FOLLOWED:
            continue
        # FSDP2's modules; a module holding FSDP1 parameters (its unsharded views are put in
        # place by the FullyShardedDataParallel module around it, before this module's forward)
        fsdp1 = [p for p in sub.parameters(recurse=False) if _fsdp1_sharded(p)]
        for p in fsdp1:
            _untype(p)  # a type declared before FSDP1 flattened it: no longer its value's
        if isinstance(sub, FSDPModule) or (fsdp1 and _class_parameter_types(type(sub))):
            _FSDP_FOLLOWED[sub] = sub.register_forward_pre_hook(_declare_unsharded)


def _declare_unsharded(module: torch.nn.Module, args: Any) -> None:
    """FSDP's unsharded parameters, at each forward (after FSDP unsharded them)."""
    if ACTIVE and not _PAUSED:
        _declare_module_tree(module)


def _fmt(t: SpmdType) -> str:
    return format_type(t, _axis_order()).replace("{", "{{").replace("}", "}}")


def _axis_order() -> tuple[str, ...] | None:
    try:
        from . import _mesh
    except ImportError:  # pragma: no cover
        return None
    binding = getattr(_mesh, "_current", None)
    return tuple(binding.names) if binding is not None else None


def _revealed(x: Any, depth: int = 0) -> str:
    """A tensor's type as users write it; a tuple or list item by item (``x.chunk(2)``)."""
    if isinstance(x, torch.Tensor):
        shown = format_type(_get(x) or _UNTYPED, _axis_order())
        entry = _PENDING.get(id(x)) if _PENDING else None
        if entry is not None and entry[0]() is x:  # a read here would be its error: say so
            what = "mean" if _pending_kind_of(entry) == "mean" else "sum"
            axes = format_axes(entry[1])
            shown += (f" (pending: this rank's part of a {what} over {axes}, until "
                      f"spmd.reinterpret(..., {axes}, src=V, dst=P) or a reduction with src=P "
                      f"takes it)")
        return shown
    if isinstance(x, (tuple, list)) and x and depth < 4:
        inner = ", ".join(_revealed(i, depth + 1) for i in x)
        return f"{type(x).__name__}[{inner}]"
    return f"not a tensor ({type(x).__name__})"


def reveal(x: _T) -> _T:
    """``spmd.reveal(x)``: ``x``; in check mode, prints its live type to stderr.

    The line reads ``file:line: spmd.reveal: Tensor[R["tp"], V["dp"]]`` (the
    caller's location; ``Tensor`` for an untyped tensor).  Printed with
    ``print(..., file=sys.stderr)`` so that it shows under ``torchrun`` next to
    tracebacks; capture it with pytest's ``capsys`` or redirect stderr.
    """
    if not ACTIVE:
        return x
    shown = _revealed(x)
    frame = sys._getframe(1)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    print(f"{where}: spmd.reveal: {shown}", file=sys.stderr)
    return x


def typeof(x: Any) -> SpmdType | None:
    """The type check mode tracks on ``x`` (an engine ``SpmdType``), or None if untracked."""
    if not isinstance(x, torch.Tensor):
        return None
    return _get(x)


# --------------------------------------------------------------------------------------
# Collectives.


def _resolve_axes(axes: Any) -> tuple[str, ...] | None:
    if isinstance(axes, str):
        return (axes,)
    if isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes):
        return tuple(axes)
    try:  # a ProcessGroup: known by the names of its mesh dims (spmd.set_mesh)
        from . import _mesh

        names = tuple(_mesh.axis_names(axes))
    except Exception:
        return None
    return names or None


def _lt(value: Any) -> LocalType | None:
    if value is None:
        return None
    if isinstance(value, LocalType):
        return value
    return local_type_of(value)


def _grad_flows(x: torch.Tensor) -> bool:
    """Whether a gradient can flow into ``x`` here (grad mode on and ``x`` requiring one),
    read with torch functions off: what decides whether an I read as R is a wrong src (the
    engine's SAME_VALUES relaxation), as the static checker reads it of an annotated value."""
    with torch._C.DisableTorchFunction():
        return torch.is_grad_enabled() and x.requires_grad


def on_collective(op: str, x: Any, axes: Any, src: Any, dst: Any, out: Any,
                  expert_mode: bool = False, reduce_op: str = "sum") -> Any:
    """Type a typed collective/conversion that ran in check mode; returns ``out``.

    ``axes``: a tuple of mesh axis names, or the ProcessGroup passed; ``src``/
    ``dst``: the user's R/I/V/P/S(i) (``src`` None takes the op's default);
    ``out``: the result tensor(s).  Raises SpmdTypeError when ``src`` does not
    match ``x``'s tracked type, the pair is not in the table, or a reinterpret
    needs ``expert_mode``; else stamps the result type on ``out``.
    """
    names = _resolve_axes(axes)
    if names is None or not isinstance(x, torch.Tensor):
        return out  # an axis the checker cannot name: the result stays untyped
    can_grad = _grad_flows(x)
    src_lt, dst_lt = _lt(src), _lt(dst)
    have = _get(x) or _UNTYPED
    owner = _OWNER.get(id(have))
    if have and id(have) not in _CANON_IDS:  # typed under another mesh
        have = _moved(x, have, op)
    found = _check_duplicates(x, have, op, names, owner, reduce_op) if have else []
    have = _reduced_pending(x, have, op, names, src_lt, dst_lt, reduce_op)
    have, src_lt = _at_rank(x, have, src_lt)
    res = check_collective(op, have, names, src_lt, dst_lt, expert_mode=expert_mode,
                           reduce_op=reduce_op, x_text="x", can_grad=can_grad)
    if res.errors:
        text = _texts([x], ["x"])[0]
        res = check_collective(op, have, names, src_lt, dst_lt, expert_mode=expert_mode,
                               reduce_op=reduce_op, x_text=text, can_grad=can_grad)
        raise SpmdTypeError(res.errors[0])
    rtype = res.type  # a global x: check_collective moved the axes in the partition spec
    if rtype and found:
        rtype = _no_longer_invariant(rtype, op, reduce_op, found)
    if rtype:
        _stamp_outputs(out, rtype)
    if _PENDING and isinstance(out, torch.Tensor) and id(out) in _PENDING:
        # x itself declared Partial (out_partial_axes' reinterpret), or the result of a
        # reduction that took a pending value, scaled by its internals (op="avg": the pending
        # mark carried by the scale): typed by the collective, no longer pending
        entry = _PENDING[id(out)]
        if entry[0]() is out:
            del _PENDING[id(out)]
    return out


def before_collective(op: str, x: Any, axes: tuple[str, ...], src: LocalType, dst: LocalType,
                      expert_mode: bool = False, reduce_op: str = "sum") -> None:
    """Before a collective runs: when ``src`` is not ``x``'s tracked type on an axis of the
    call, raise the error :func:`on_collective` would raise after it (the src mismatch).
    The op would run on a layout the input does not have (``src=S(1)`` of a 1-d input, the
    blocks cut on the wrong dim), and its shape error would hide the type error.  Only the
    src is compared here (a few axes, no engine call): the rest is checked after the op."""
    if _PENDING and isinstance(x, torch.Tensor) and id(x) in _PENDING:
        _check_pending(x, (op, axes, src, dst, reduce_op))
    have = _get(x) if isinstance(x, torch.Tensor) else None
    if not have:
        return
    owner = _OWNER.get(id(have))
    if id(have) not in _CANON_IDS:  # typed under another mesh
        have = _moved(x, have, op)
    _check_duplicates(x, have, op, axes, owner, reduce_op)
    have = _reduced_pending(x, have, op, axes, src, dst, reduce_op)
    have, src_at = _at_rank(x, have, src)
    assert src_at is not None
    if all(t is None or shard_dims_match(t, src_at) for t in map(have.get, axes)):
        return
    can_grad = _grad_flows(x)
    res = check_collective(op, have, axes, src_at, dst, expert_mode=expert_mode,
                           reduce_op=reduce_op, x_text=_texts([x], ["x"])[0], can_grad=can_grad)
    if res.errors:
        raise SpmdTypeError(res.errors[0])


def _types_at_rank(x: torch.Tensor, have: SpmdType, want: SpmdType) -> tuple[SpmdType, SpmdType]:
    """``x``'s type and the type declared for it at ``x``'s rank: S(-1) and S(2) of a 3-d
    tensor are one layout, compared as such (``spmd.declare``, ``spmd.checked``, a custom
    Function's arguments and result)."""
    with torch._C.DisableTorchFunction():
        ndim = x.ndim
    return have.at_ndim(ndim), want.at_ndim(ndim)


def _at_rank(x: torch.Tensor, have: SpmdType, src: LocalType | None
             ) -> tuple[SpmdType, LocalType | None]:
    """``x``'s type and a collective's ``src`` at ``x``'s rank: S(-1) and S(2) of a 3-d
    input are one layout, compared as such."""
    with torch._C.DisableTorchFunction():
        ndim = x.ndim
    return have.at_ndim(ndim), (src.at_ndim(ndim) if src is not None else None)


def src_mismatch(op: str, x: Any, axes: Any, src: Any, dst: Any, expert_mode: bool = False,
                 reduce_op: str = "sum") -> SpmdError | None:
    """The spmd-src-mismatch of a collective whose src/dst the table rejects, when ``src``
    is not ``x``'s tracked type (the engine then reports only the mismatch: its fix starts
    from the real type); None otherwise.  The collectives ask before raising the pair's
    error, which they find without the input."""
    names = _resolve_axes(axes)
    have = _get(x) if isinstance(x, torch.Tensor) else None
    if names is None or have is None:
        return None
    try:
        src_lt, dst_lt = _lt(src), _lt(dst)
    except TypeError:
        return None
    have, src_lt = _at_rank(x, have, src_lt)
    can_grad = _grad_flows(x)  # as before_collective reads it
    res = check_collective(op, have, names, src_lt, dst_lt, expert_mode=expert_mode,
                           reduce_op=reduce_op, x_text=_texts([x], ["x"])[0], can_grad=can_grad)
    if res.errors and res.errors[0].code == "spmd-src-mismatch":
        return res.errors[0]
    return None


# --------------------------------------------------------------------------------------
# Function boundaries (optional): @spmd.checked


def _returned_pending(x: torch.Tensor, declared: SpmdType) -> None:
    """A ``@spmd.checked`` function's result that is a pending partial sum (``_PENDING``: a
    sum, mean or contraction over a sharded dim, never declared) returned where the whole is
    declared (R or I on a pending axis): the pending value's own error, as the static checker
    reports it at the reduction (session 45's Mamba probe: a gate's mean over the tp-sharded
    channels returned as I got the generic "V to I is a gather" there).  A declared V keeps
    the mark (raised at the caller's first use)."""
    entry = _PENDING.get(id(x)) if _PENDING else None
    if entry is None or entry[0]() is not x:
        return
    if any((lt := declared.get(a)) is not None and lt.kind in (TKind.R, TKind.I) for a in entry[1]):
        _check_pending(x, None)


def _is_zero(v: Any) -> bool:
    """A Python scalar equal to 0, or a factory's zeros still zero (``_ZEROS``): as a summand
    it adds nothing (engine: ops.Operand.zero)."""
    if isinstance(v, torch.Tensor):
        return bool(_ZEROS) and _all_zeros(v)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0


def _operand_key(key: list[Any], ops: list, types: list, grad_on: bool) -> list[Any]:
    """A result cache key: per operand, its (interned) type's id, its argument class (index,
    condition/mask or value: roles follow from it, the plan and the position), whether it
    requires a gradient, its shape."""
    for (v, cls), t in zip(ops, types):
        if t is None:
            key.append(-1 if _is_zero(v) else 0)  # a zero summand is no scalar (ops.Operand)
        else:
            key.append(id(t))
            key.append(cls)  # (the role and whether a gradient is possible follow from it)
            key.append(grad_on and v.requires_grad)
            key.append(v.shape)  # the S(i) layout rule reads the shapes
    return key


def _annotated_types(fn: Any) -> tuple[dict[str, SpmdType], Any]:
    """A function's ``Tensor[...]`` annotations, evaluated (once per caller's cache):
    (parameter name -> type, the result's type or a tuple of types and Nones, or None).
    ``Tensor[...] | None`` counts as ``Tensor[...]`` (a None argument is not checked)."""
    return _types_from_hints(fn, _type_hints(fn))


def _type_hints(fn: Any) -> dict[str, Any] | None:
    """``typing.get_type_hints(fn)``, or None where an annotation does not evaluate."""
    import typing

    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return None


def _types_from_hints(fn: Any, hints: dict[str, Any] | None) -> tuple[dict[str, SpmdType], Any]:
    """:func:`_annotated_types` from ``fn``'s evaluated hints (None: its raw annotations)."""
    import typing

    h = hints if hints is not None else dict(getattr(fn, "__annotations__", {}))
    params = {}
    for name, ann in h.items():
        if name == "return":
            continue
        st = _tensor_type_of(ann)
        if st is not None:
            params[name] = st
    ret = _strip_optional(h.get("return"))
    rets: Any = None
    st = spmd_type_of_annotation(ret)
    if st is not None:
        rets = st
    elif typing.get_origin(ret) is tuple:
        items = [_tensor_type_of(a) for a in typing.get_args(ret)]
        if any(i is not None for i in items):
            rets = tuple(items)
    return params, rets


def _strip_optional(ann: Any) -> Any:
    """``X`` of ``Optional[X]`` / ``X | None`` (strings evaluated by ``get_type_hints``);
    any other annotation as it is.  A union of two tensor types (``Tensor[P["tp"]] |
    Tensor[R["tp"]]``) stays a union: no one type is read from it (the static checker accepts
    either, so the check mode checks neither: no error)."""
    import typing

    ann = unalias(ann)
    if typing.get_origin(ann) not in (typing.Union, types.UnionType):
        return ann
    args = typing.get_args(ann)
    items = [a for a in args if a is not type(None)]
    return unalias(items[0]) if len(items) == 1 and len(args) > 1 else ann


def _tensor_type_of(ann: Any) -> SpmdType | None:
    """The type of ``Tensor[...]``, ``Optional[Tensor[...]]`` or ``Tensor[...] | None``
    (a None value is not checked), else None."""
    return spmd_type_of_annotation(_strip_optional(ann))


_SEQUENCE_ORIGINS = ("list", "tuple", "Sequence", "MutableSequence", "Iterable", "Collection")


def _annotated_item_types(hints: dict[str, Any] | None) -> dict[str, SpmdType]:
    """A function's parameters annotated as a sequence of one typed tensor type
    (``list[Tensor[V["tp"]]]``, ``Sequence[...]``, ``tuple[Tensor[...], ...]``), from its
    evaluated hints (:func:`_type_hints`): name -> item type (the static checker judges each
    item of a display passed there)."""
    import typing

    out: dict[str, SpmdType] = {}
    for name, ann in (hints or {}).items():
        ann = _strip_optional(ann)
        origin = typing.get_origin(ann)
        args = typing.get_args(ann)
        if name == "return" or origin is None or getattr(origin, "__name__", "") not in _SEQUENCE_ORIGINS:
            continue
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            continue
        st = _tensor_type_of(args[0]) if args else None
        if st is not None:
            out[name] = st
    return out


def _record_fields(ann: Any) -> tuple[type, str, bool, tuple[tuple[str, SpmdType], ...]] | None:
    """A NamedTuple, dataclass or TypedDict class annotation's ``Tensor[...]`` fields (one
    level: a field that is itself such a class is not followed), or None: (the class to check
    the value against, its name, by_key, ((field, type), ...)).  ``Optional[...]`` of one is
    read as it (a None value is not checked); ``Unpack[TD]`` (``**kw: Unpack[TD]``) as TD."""
    import dataclasses
    import typing

    ann = _strip_optional(ann)
    origin = typing.get_origin(ann)
    if origin is not None and origin in (getattr(typing, "Unpack", None),  # 3.11+
                                         getattr(sys.modules.get("typing_extensions"), "Unpack", None)):
        ann = typing.get_args(ann)[0]
    if not isinstance(ann, type) or ann is torch.Tensor:
        return None
    if typing.is_typeddict(ann):
        names: Sequence[str] | None = None
        by_key = True
    elif issubclass(ann, tuple) and isinstance(getattr(ann, "_fields", None), tuple):
        names, by_key = ann._fields, False  # type: ignore[attr-defined]
    elif dataclasses.is_dataclass(ann):
        names, by_key = [f.name for f in dataclasses.fields(ann)], False
    else:
        return None
    typed = _class_parameter_types(ann)
    fields = tuple((n, t) for n, t in typed.items() if names is None or n in names)
    return (ann, ann.__name__, by_key, fields) if fields else None


def _annotated_record_types(hints: dict[str, Any] | None) -> dict[str, Any]:
    """A function's parameters (and ``"return"``) annotated with a NamedTuple, dataclass or
    TypedDict class that has ``Tensor[...]`` fields (:func:`_record_fields`), from its
    evaluated hints: name -> fields (the static checker types ``out.loss``, ``b["x"]`` by
    the field's annotation)."""
    out: dict[str, Any] = {}
    for name, ann in (hints or {}).items():
        fields = _record_fields(ann)
        if fields is not None:
            out[name] = fields
    return out


def _declare_fields(value: Any, fields: Any, what: str, text: str) -> None:
    """Declare each ``Tensor[...]`` field of ``value`` (a NamedTuple, dataclass or TypedDict
    of the annotation ``fields``): ``what`` ends the message (``of argument 'b' of f``),
    ``text`` names the value (``b``, ``forward(...)``)."""
    cls, cname, by_key, typed = fields
    if by_key:
        if not isinstance(value, dict):
            return
        for key, st in typed:
            v = value.get(key)
            if isinstance(v, torch.Tensor):
                k = key.replace("{", "{{").replace("}", "}}")  # the message is a format string
                _stamp_declared(v, st, f'item {cname}["{k}"] {what} is annotated {_fmt(st)}',
                                f'{text}["{key}"]')
    elif isinstance(value, cls):
        for attr, st in typed:
            v = getattr(value, attr, None)
            if isinstance(v, torch.Tensor):
                _stamp_declared(v, st, f"field {cname}.{attr} {what} is annotated {_fmt(st)}",
                                f"{text}.{attr}")


def checked(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Check a function's ``Tensor[...]`` annotations at its boundary in check mode.

    On each call inside ``spmd.typecheck()``, every argument annotated
    ``Tensor[...]`` (or ``Optional[Tensor[...]]``, ``Tensor[...] | None``) is declared with
    its annotation (an argument whose tracked type disagrees is an error,
    ``spmd-annotation``), and a result annotated ``Tensor[...]`` (or a tuple of them) must
    agree with its annotation and is given it; so is each item of a list or tuple argument
    annotated ``list[Tensor[...]]`` (``Sequence[...]``, ``tuple[Tensor[...], ...]``), each
    item of ``*args: Tensor[...]`` and each value of ``**kwargs: Tensor[...]``, and each
    ``Tensor[...]`` field of an argument or result annotated with a NamedTuple, a dataclass
    or a TypedDict class (``**kwargs: Unpack[TD]`` too; one level: a field holding another
    such class is not followed).  A union of two tensor types is not checked (the static
    checker accepts either).  The annotations are read once, at the first call in check
    mode.  Outside check mode the wrapper only forwards the call.
    """
    sig = inspect.signature(fn)
    # (whether an argument is annotated, params, rets, sequence items, NamedTuple/dataclass/
    #  TypedDict fields of the arguments, of the result, *args name, **kwargs name) once, at
    #  the first call in check mode
    cache: list[tuple[bool, dict[str, SpmdType], Any, dict[str, SpmdType], dict[str, Any], Any,
                      str | None, str | None]] = []

    def hints() -> tuple[bool, dict[str, SpmdType], Any, dict[str, SpmdType], dict[str, Any], Any,
                         str | None, str | None]:
        if not cache:
            h = _type_hints(fn)  # evaluated once for all
            params, rets = _types_from_hints(fn, h)
            star = dstar = None
            for p in sig.parameters.values():
                if p.kind is p.VAR_POSITIONAL and p.name in params:
                    star = p.name
                elif p.kind is p.VAR_KEYWORD and p.name in params:
                    dstar = p.name
            items, records = _annotated_item_types(h), _annotated_record_types(h)
            ret_fields = records.pop("return", None)
            cache.append((bool(params or items or records), params, rets, items, records,
                          ret_fields, star, dstar))
        return cache[0]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not ACTIVE:
            return fn(*args, **kwargs)
        any_args, params, rets, items, records, ret_fields, star, dstar = hints()
        if any_args:
            qual = fn.__qualname__
            bound = sig.bind(*args, **kwargs)
            widened: dict[str, Any] = {}  # the arguments passed on as a widened alias
            for name, value in bound.arguments.items():
                st = params.get(name)
                if st is not None:
                    if name == star:  # *args: Tensor[...]: each item
                        out = list(value)
                        for k, item in enumerate(value):
                            if isinstance(item, torch.Tensor):
                                what = (f"item {k} of argument '*{name}' of {qual} is "
                                        f"annotated {_fmt(st)}")
                                _stamp_declared(item, st, what)
                                out[k] = _widened_argument(item, st, what)
                        if any(a is not b for a, b in zip(out, value)):
                            widened[name] = tuple(out)
                    elif name == dstar:  # **kwargs: Tensor[...]: each value, by its keyword
                        kw = dict(value)
                        for key, item in value.items():
                            if isinstance(item, torch.Tensor):
                                what = (f"argument {key!r} (in '**{name}') of {qual} is "
                                        f"annotated {_fmt(st)}")
                                _stamp_declared(item, st, what)
                                kw[key] = _widened_argument(item, st, what)
                        if any(kw[key] is not item for key, item in value.items()):
                            widened[name] = kw
                    elif isinstance(value, torch.Tensor):
                        what = f"argument {name!r} of {qual} is annotated {_fmt(st)}"
                        _stamp_declared(value, st, what)
                        alias = _widened_argument(value, st, what)
                        if alias is not value:
                            widened[name] = alias
                st = items.get(name)
                if st is not None and isinstance(value, (list, tuple)):
                    for k, item in enumerate(value):
                        if isinstance(item, torch.Tensor):
                            _stamp_declared(item, st, f"item {k} of argument {name!r} of "
                                            f"{qual} is annotated {_fmt(st)}")
                fields = records.get(name)
                if fields is not None:
                    _declare_fields(value, fields, f"of argument {name!r} of {qual}", name)
            if widened:
                bound.arguments.update(widened)
                args, kwargs = bound.args, bound.kwargs
        result = fn(*args, **kwargs)
        if rets is not None:
            what = f"the result of {fn.__qualname__} is annotated "
            if isinstance(rets, SpmdType):
                if isinstance(result, torch.Tensor):
                    _returned_pending(result, rets)
                    # named as the call, so that the fix can be pasted where it is called
                    _stamp_declared(result, rets, what + _fmt(rets),
                                    lambda: _returned_text(fn, None, f"{fn.__name__}(<...>)"))
            elif isinstance(result, (tuple, list)):
                for k, (st, r) in enumerate(zip(rets, result)):
                    if st is not None and isinstance(r, torch.Tensor):
                        _returned_pending(r, st)
                        _stamp_declared(r, st, what + _fmt(st),
                                        lambda k=k: _returned_text(  # type: ignore[misc]
                                            fn, k, f"{fn.__name__}(<...>)[{k}]"))
        if ret_fields is not None:
            _declare_fields(result, ret_fields, f"of the result of {fn.__qualname__}",
                            f"{fn.__name__}(<...>)")
        return result

    return wrapper


def _widened_argument(x: torch.Tensor, want: SpmdType, what: str) -> torch.Tensor:
    """What a ``@spmd.checked`` function receives for the argument ``x`` declared ``want``:
    where ``want`` is a plain V on an axis ``x`` is S(i) on (or V of a layout by rank), an
    alias typed V there, as the static checker types the parameter (the declared type, to
    which the argument widens: ``ft: Tensor[V["dp"]]`` given this rank's S(0) block is each
    rank's own value inside, SigLIP's diagonal chunk); ``x`` itself keeps its S(i), as
    ``spmd.declare`` widens.  A declared type never narrows: else ``x`` itself.  A leaf that
    requires grad (a parameter) is passed as is: the function may read or set its ``.grad``,
    which a view does not hold (its S(i) stays inside: declare it V there if needed)."""
    have = _get(x)
    if not have or not any(_widens(k, lt) for a, lt in want.axes if (k := have.get(a)) is not None):
        return x
    with torch._C.DisableTorchFunction():
        if x.is_leaf and x.requires_grad:
            return x
        y = x.view_as(x)
    _set(y, have)
    _stamp_declared(y, want, what, widen=True)
    return y


def _returned_text(fn: Any, k: int | None, default: str) -> str:
    """The expression ``fn`` returns (item ``k`` of a returned tuple display), as the static
    checker names a return value (``aux`` of ``return shared + routed, aux, counts``): the
    fix can then be pasted at the return.  Read on an error only; ``default`` (the call,
    ``forward(<...>)[1]``) where the source is not available or the function's returns
    write the value differently."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError, SyntaxError, ValueError):
        return default
    top = tree.body[0] if tree.body else None
    if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return default
    rets: list[ast.Return] = []
    todo: list[ast.AST] = list(top.body)
    while todo:  # the function's own returns: not those of a nested def, lambda or class
        n = todo.pop()
        if isinstance(n, ast.Return):
            rets.append(n)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    texts: set[str] = set()
    for r in rets:
        v = r.value
        if v is None:
            continue
        if k is not None:
            if not isinstance(v, ast.Tuple) or k >= len(v.elts) or any(
                    isinstance(e, ast.Starred) for e in v.elts):
                return default
            v = v.elts[k]
        texts.add(_expr_text(v))
    return texts.pop() if len(texts) == 1 else default


# --------------------------------------------------------------------------------------
# Custom autograd Functions: ``Fn.apply(...)`` has forward's declared types (SPEC section 5)
#
# The static checker types ``Fn.apply(x, ...)`` by forward's annotations (its arguments are
# checked against forward's parameters, its result is forward's declared return type),
# whatever forward computes inside (raw torch.distributed calls, as Megatron's mappings
# and uneven all-to-alls are written).  The check mode follows the same contract: while a
# ``typecheck()`` block is open, ``torch.autograd.Function.apply`` is replaced by
# :func:`_apply` (the TorchFunctionMode never sees ``apply``); outside, torch's own
# ``apply`` is in place (nothing installed, nothing read).  Forward's annotations are
# evaluated once per Function class; a Function without ``Tensor[...]`` annotations is
# applied as before.  Backward (run by autograd through ``BackwardCFunction.apply``, replaced
# by :func:`_checked_backward` while a block is open) runs in the mode; a typed Function's
# gradients are typed and its results checked by the duality rule (see there).

# Function class -> (forward's signature without ctx, parameter types, result types) or
# None (no Tensor[...] annotation).  Weak keys: a class defined in a function may go.
_FN_TYPES: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()
_TORCH_APPLY: Any = None  # torch's Function.apply (the classmethod) while _apply is installed


def _function_types(cls: type) -> Any:
    forward = inspect.getattr_static(cls, "forward", None)
    forward = getattr(forward, "__func__", forward)  # the staticmethod's function
    if not callable(forward):
        return None
    hints = _type_hints(forward)
    try:
        params, rets = _types_from_hints(forward, hints)
    except Exception:  # an annotation that does not evaluate: typed as before
        return None
    if not params and rets is None:
        return None
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        return None
    from torch.autograd.function import _is_setup_context_defined

    if not _is_setup_context_defined(getattr(cls, "setup_context", None)):
        ps = list(sig.parameters.values())  # forward(ctx, *args): apply passes args
        sig = sig.replace(parameters=ps[1:])
    return sig, params, rets, f"{cls.__name__}.apply", _result_slots(hints), forward


def _result_slots(hints: dict[str, Any] | None) -> tuple[duality.Slot, ...] | None:
    """A function's declared result as the duality rule reads it (the plugin's
    ``AutogradTyper.result_slots``): one slot, or one per item of a tuple; None when the
    arity is not known (no annotation, ``Any``, ``tuple[X, ...]``)."""
    import typing

    if hints is None or "return" not in hints:
        return None
    ret = unalias(hints["return"])
    if ret is Any:
        return None
    if typing.get_origin(ret) is tuple:
        items = typing.get_args(ret)
        if not items or Ellipsis in items:
            return None
        return tuple(_annotation_slot(a) for a in items)
    return (_annotation_slot(ret),)


def _annotation_slot(ann: Any) -> duality.Slot:
    """One annotated position: a typed tensor, None (no gradient), a plain tensor, or
    unknown (anything else: only the typed ones are checked)."""
    st = _tensor_type_of(ann)
    if st is not None:
        return duality.Slot.tensor("", st)
    if ann is None or ann is type(None):
        return duality.Slot("", duality.NONE)
    if _strip_optional(ann) is torch.Tensor:
        return duality.Slot("", duality.TENSOR)
    return duality.Slot("", duality.UNKNOWN)


def _ndim(x: torch.Tensor) -> int:
    with torch._C.DisableTorchFunction():
        return x.ndim


def _check_forward_result(forward: Any, cls_name: str, declared: Any, result: Any) -> None:
    """What a typed Function's ``forward`` returned against its declared result, by the
    static checker's rule (engine ``duality.check_forward_result``, ``spmd-mismatch``;
    forward runs without grad, so an I returned as the declared R is accepted, Megatron's
    ``_CopyToModelParallelRegion``), compared at each result's rank.  A result the body left
    untyped (raw collectives) is not checked: it gets the declared type."""
    if isinstance(declared, SpmdType):
        pairs = [(declared, result)] if isinstance(result, torch.Tensor) else []
        many = False
    elif declared is not None and isinstance(result, (tuple, list)):
        pairs = list(zip(declared, result))
        many = True
    else:
        return
    for k, (want, r) in enumerate(pairs):
        have = _get(r) if want is not None and isinstance(r, torch.Tensor) else None
        if not have:
            continue
        if not duality.check_forward_result(*_types_at_rank(r, have, want), x_text="x", where="x"):
            continue
        # named as the static checker names it: the expression forward returns, the
        # declared result as written (S(-1), not S(2))
        texts = _sole_return_texts(forward, len(pairs) if many else 1, many)
        text = texts[k] if texts else (f"result[{k}]" if many else "result")
        ndim = _ndim(r)
        where = f"the return value {text} of {cls_name}.forward"
        errors = (duality.check_forward_result(have.written_as(want, ndim), want, x_text=text,
                                               where=where, ndim=ndim)
                  or duality.check_forward_result(*_types_at_rank(r, have, want), x_text=text,
                                                  where=where))
        raise SpmdTypeError(errors[0])


def _sole_return_texts(fn: Any, n: int, many: bool) -> list[str]:
    """The texts of the values ``fn``'s one ``return`` statement returns (``n`` of them for a
    tuple result), [] when the source is not there or ``fn`` has more than one return."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    body = tree.body[0] if tree.body else None
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    rets: list[ast.Return] = []
    todo: list[ast.AST] = list(body.body)
    while todo:  # the function's own returns, not those of a def or lambda inside it
        node = todo.pop()
        if isinstance(node, ast.Return):
            rets.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                   ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    if len(rets) != 1 or rets[0].value is None:
        return []
    value = rets[0].value
    items = value.elts if many and isinstance(value, ast.Tuple) else [value]
    if len(items) != n or any(isinstance(i, ast.Starred) for i in items):
        return []
    return [_expr_text(i) for i in items]


def _check_apply_argument(value: torch.Tensor, want: SpmdType, param: str, callee: str,
                          stamp: bool = True, have: SpmdType | None = None) -> None:
    """The static checker's rule for an argument (engine ``check_argument``, ``spmd-mismatch``);
    then the argument has its declared type (forward's body sees it, like ``spmd.checked``).
    ``have``: the argument's type when not its tracked one (a pending partial sum a mapping
    reduces: P there)."""
    if have is None:
        have = _get(value)
    if have:
        have_r, at_rank = _types_at_rank(value, have, want)
        integer = _is_integer(value)  # no gradient: R and I agree (as in _stamp_declared)
        errors = check_argument(have_r, at_rank, x_text="x", where="x", gradient_free=integer)
        if errors:
            # compared at the rank, printed as declared (S(-1), not S(2)), as the static
            # checker prints it
            text = _texts([value], ["x"])[0]
            where = f'argument {text} (parameter "{param}" of {callee})'
            ndim = _ndim(value)
            index = _index_value(value)
            errors = (check_argument(have.written_as(want, ndim), want, x_text=text, where=where,
                                     ndim=ndim, index=index, gradient_free=integer)
                      or check_argument(have_r, at_rank, x_text=text, where=where, index=index,
                                        gradient_free=integer))
            raise SpmdTypeError(errors[0])
    if not stamp:
        return
    _stamp_declared(value, want, f"argument {{x}} (parameter {param!r} of {callee}) is "
                    f"annotated {_fmt(want)}")


def _apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """``Fn.apply`` in check mode: forward's declared types at the call (see above)."""
    torch_apply = _TORCH_APPLY.__get__(None, cls)
    if not ACTIVE or _PAUSED:
        return torch_apply(*args, **kwargs)
    mapping = _megatron_mapping(cls)
    if mapping is not None:
        return _megatron_apply(cls, mapping, torch_apply, args, kwargs)
    try:
        info = _FN_TYPES[cls]
    except KeyError:
        info = _FN_TYPES[cls] = _function_types(cls)
    except TypeError:  # not weakly referenceable
        info = None
    if info is None:
        return torch_apply(*args, **kwargs)
    sig, params, rets, callee, outputs, forward = info
    if params:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return torch_apply(*args, **kwargs)  # torch reports the call
        for name, value in bound.arguments.items():
            want = params.get(name)
            if want is None:
                continue
            values = value if sig.parameters[name].kind is sig.parameters[name].VAR_POSITIONAL else (value,)
            for v in values:
                if isinstance(v, torch.Tensor):
                    _check_apply_argument(v, want, name, callee)
    result = torch_apply(*args, **kwargs)
    _check_forward_result(forward, cls.__name__, rets, result)
    # The result has forward's declared type, as the static checker gives it, whatever the
    # body computed (raw collectives leave it untyped).
    if isinstance(rets, SpmdType):
        if isinstance(result, torch.Tensor):
            _set(result, rets)
    elif rets is not None and isinstance(result, (tuple, list)):
        for st, r in zip(rets, result):
            if st is not None and isinstance(r, torch.Tensor):
                _set(r, st)
    _remember_backward(cls, sig, params, rets, outputs, args, kwargs, result)
    return result


# Megatron's mapping functions (``copy_to_tensor_model_parallel_region`` and the others of
# ``megatron.core.tensor_parallel.mappings``) in check mode: each applies an autograd Function
# of that module (``_CopyToModelParallelRegion.apply(input_, group)``), which the check mode
# sees at :func:`_apply` however the function was imported (the module attribute, a name
# bound by ``from ... import`` before the block opened, Megatron's own layers).  The call is
# checked and typed as the typed collective it stands for, by the engine's table
# (:mod:`spmd_mypy.engine.megatron`, the one the stubs are generated from): ``input_``
# against the table's src on the group's mesh axes (the static checker's message, naming the
# function), then the result typed as the collective's (the other axes kept).  The forward
# runs unchecked (its raw collectives implement the table's entry); a group that is no mesh
# axis, or a ``tensor_parallel_output_grad`` that is not a bool, leaves the result untyped.
_MEGATRON_SIGS: dict[type, inspect.Signature | None] = {}


def _megatron_mapping(cls: Any) -> MappingTypes | None:
    module = getattr(cls, "__module__", None)
    if module not in MEGATRON_DEFINING_MODULES:
        return None
    return MEGATRON_BY_FUNCTION_CLASS.get(getattr(cls, "__name__", ""))


def _megatron_signature(cls: Any) -> inspect.Signature | None:
    try:
        return _MEGATRON_SIGS[cls]
    except KeyError:
        pass
    sig: inspect.Signature | None
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]  # without ctx
        sig = inspect.Signature(params) if len(params) >= 2 else None
        mod = sys.modules.get(cls.__module__)
        path = getattr(mod, "__file__", None)
        if path:
            _SKIP_FILES.add(os.path.abspath(path))
    except (TypeError, ValueError):
        sig = None
    _MEGATRON_SIGS[cls] = sig
    return sig


def _megatron_apply(cls: Any, mapping: MappingTypes, torch_apply: Any, args: tuple,
                    kwargs: dict) -> Any:
    sig = _megatron_signature(cls)
    try:
        bound = sig.bind(*args, **kwargs) if sig is not None else None
    except TypeError:
        bound = None  # torch reports the call
    if bound is None:
        return torch_apply(*args, **kwargs)
    names = list(sig.parameters)  # type: ignore[union-attr]
    x, group = bound.arguments.get(names[0]), bound.arguments.get(names[1])
    flag = (bound.arguments.get(mapping.flag[0], True) if mapping.flag is not None else None)
    dst = mapping.dst_for(flag)
    axes = _resolve_axes(group) if group is not None else None
    if not isinstance(x, torch.Tensor) or dst is None or axes is None:
        with suspended():
            return torch_apply(*args, **kwargs)
    src = mapping.src
    want = SpmdType.of({a: src for a in axes})
    if _PENDING and id(x) in _PENDING:  # an undeclared partial sum: its own message
        _check_pending(x, (mapping.collective, axes, src, dst, "sum"), (f"{mapping.name}(", ")"))
    have = _get(x) or _UNTYPED
    if have and id(have) not in _CANON_IDS:  # typed under another mesh
        have = _moved(x, have, mapping.collective)
    have = _reduced_pending(x, have, mapping.collective, axes, src, dst, "sum")
    _check_apply_argument(x, want, "input_", mapping.name, stamp=False, have=have or None)
    have, src_at = _at_rank(x, have, src)
    can_grad = _grad_flows(x)
    with suspended():
        out = torch_apply(*args, **kwargs)
    res = check_collective(mapping.collective, have, axes, src_at, dst, x_text=_texts([x], ["x"])[0],
                           can_grad=can_grad)
    if res.errors:
        raise SpmdTypeError(res.errors[0])
    if res.type:
        _stamp_outputs(out, res.type)
    if _PENDING and id(x) in _PENDING:
        del _PENDING[id(x)]
    return out


# The backward of a typed Function's call (its ctx is the autograd node that runs it): the
# types of the gradients it receives (the duals of forward's declared outputs, else backward's
# annotations) and forward's inputs as the duality rule reads them (engine ``duality``).
_BACKWARD_INFO = "_spmd_backward_types"


_BACKWARD_NAMES: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def _backward_types(cls: type) -> tuple[tuple[str, ...], tuple[SpmdType | None, ...],
                                         tuple[duality.Slot, ...] | None,
                                         tuple[duality.Slot, ...] | None]:
    """backward's parameter names after ctx and their ``Tensor[...]`` annotations, and its
    declared signature as the duality rule reads it (its parameters after ctx, its result;
    None where not known), once per class."""
    try:
        return _BACKWARD_NAMES[cls]
    except (KeyError, TypeError):
        pass
    names: tuple[str, ...] = ()
    types: tuple[SpmdType | None, ...] = ()
    grads: tuple[duality.Slot, ...] | None = None
    returns: tuple[duality.Slot, ...] | None = None
    bwd = inspect.getattr_static(cls, "backward", None)
    bwd = getattr(bwd, "__func__", bwd)
    if callable(bwd):
        try:
            ps = list(inspect.signature(bwd).parameters.values())[1:]
            hints = _type_hints(bwd)
            ann, _ = _types_from_hints(bwd, hints)
            if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps):
                names = tuple(p.name for p in ps)
                types = tuple(ann.get(n) for n in names)
                grads = tuple(duality.Slot(p.name, duality.TENSOR, t, p.default is not p.empty)
                              if t is not None else
                              duality.Slot(p.name, duality.UNKNOWN, default=p.default is not p.empty)
                              for p, t in zip(ps, types))
            returns = _result_slots(hints)
        except Exception:  # an annotation that does not evaluate: names only, untyped
            pass
    try:
        _BACKWARD_NAMES[cls] = (names, types, grads, returns)
    except TypeError:
        pass
    return names, types, grads, returns


def _remember_backward(cls: Any, sig: Any, params: dict[str, SpmdType], rets: Any,
                       outputs: tuple[duality.Slot, ...] | None, args: tuple, kwargs: dict,
                       result: Any) -> None:
    """Record on the call's autograd node (forward's ctx) what :func:`_checked_backward`
    needs: the Function's signatures as the duality rule reads them (forward's inputs in
    apply's order: backward returns one gradient per argument; each typed one at the rank of
    its argument, as its gradient is compared) and the type of the gradient of each output."""
    outs = [result] if isinstance(result, torch.Tensor) else (
        list(result) if isinstance(result, (tuple, list)) else [])
    node = None
    for r in outs:
        fn = r.grad_fn if isinstance(r, torch.Tensor) else None
        if fn is not None and _runs_backward_of(getattr(fn, "_forward_cls", None), cls):
            node = fn
            break
    if node is None:
        return  # no gradient flows back through this call
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return
    inputs: list[duality.Slot] = []
    shown_inputs: list[duality.Slot] = []
    ndims: list[int | None] = []
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            return  # apply passes its arguments by position: not read
        for v in (value if param.kind is param.VAR_POSITIONAL else (value,)):
            if isinstance(v, torch.Tensor):
                ndims.append(_ndim(v))
                inputs.append(duality.Slot.tensor(
                    name, (params.get(name) or _UNTYPED).at_ndim(ndims[-1])))
                shown_inputs.append(duality.Slot.tensor(name, params.get(name) or _UNTYPED))
            else:
                ndims.append(None)
                inputs.append(duality.Slot(name, duality.NONE if v is None else duality.OTHER))
                shown_inputs.append(inputs[-1])
    names, annotated, grad_slots, declared_returns = _backward_types(cls)
    returns = shown_returns = declared_returns
    if declared_returns is not None:  # backward's declared gradient of each input, at its rank
        at = ndims + [None] * len(declared_returns)
        returns = tuple(duality.Slot(r.name, r.kind, r.type.at_ndim(d), r.default)
                        if r.typed and d is not None else r
                        for r, d in zip(declared_returns, at))
        # as messages print it: as declared, a dim that is its input's at the rank written
        # as the input's is (:func:`_shown_gradient`)
        shown_returns = tuple(_shown_gradient(r, shown_inputs[i] if i < len(shown_inputs) else None, at[i])
                              for i, r in enumerate(declared_returns))
    function = duality.FunctionTypes(cls.__name__, tuple(inputs), outputs, grad_slots, returns)
    # the same signature as declared (S(-1), not S(2)): what messages print, as the static
    # checker prints it; the rule compares at the rank (``function``)
    shown = duality.FunctionTypes(cls.__name__, tuple(shown_inputs), outputs, grad_slots,
                                  shown_returns)
    declared = [rets] if isinstance(rets, SpmdType) else list(rets or ())
    grads: list[SpmdType | None] = []
    for i in range(max(len(declared), len(annotated))):
        out = declared[i] if i < len(declared) else None
        grads.append(duality.gradient_type(out) if out else (
            annotated[i] if i < len(annotated) else None))
    # forward's declared outputs, what a saved output is typed by (_checked_saved_tensors)
    saved_outputs = tuple(duality.Slot.tensor("", t) if t else duality.Slot("") for t in declared)
    try:
        setattr(node, _BACKWARD_INFO, (function, tuple(grads), names, cls, saved_outputs, shown))
    except (AttributeError, TypeError):
        pass


def _shown_gradient(slot: duality.Slot, inp: duality.Slot | None, ndim: int | None) -> duality.Slot:
    """A gradient (declared or returned) as the check mode's messages print it: its type
    with each shard dim that is its input's gradient's at the rank ``ndim`` written as the
    input is declared (``S(2)`` of a 3-d gradient of an input declared ``S(-1)`` is
    ``S(-1)``), so a message names the layouts as the user wrote them."""
    if not slot.typed or inp is None or not inp.typed or ndim is None:
        return slot
    return duality.Slot(slot.name, slot.kind,
                        slot.type.written_as(duality.gradient_type(inp.type), ndim), slot.default,
                        slot.made_by)


def _runs_backward_of(node_cls: Any, cls: type) -> bool:
    """Whether the autograd node of Function class ``node_cls`` runs ``cls``'s backward: ``cls``
    itself, or under torch.func (grad, vjp: a transform applies a setup_context Function
    through a class it generates per call, ``<cls>Generated``, whose backward calls
    ``cls.backward``, torch._functorch.autograd_function.generate_single_level_function)."""
    if node_cls is cls:
        return True
    if node_cls is None or getattr(node_cls, "__name__", None) != f"{cls.__name__}Generated":
        return False
    backward = inspect.getattr_static(node_cls, "backward", None)
    cells = getattr(getattr(backward, "__func__", backward), "__closure__", None) or ()
    for c in cells:
        try:
            if c.cell_contents is cls:
                return True
        except ValueError:  # an empty cell
            pass
    return False


_TORCH_BACKWARD_APPLY: Any = None  # torch's BackwardCFunction.apply while ours is installed


def _torch_distributed_function(node: Any) -> bool:
    cls = getattr(node, "_forward_cls", None)
    return getattr(cls, "__module__", "").startswith("torch.distributed.")


def _checked_backward(node: Any, *grads: Any) -> Any:
    """A custom Function's backward, run by autograd, in check mode: the mode is on in its body
    (:func:`_in_mode`), the gradients it receives have the duals of forward's declared output
    types, and what it returns is checked against the duals of forward's declared input types
    by the static checker's rule (engine ``duality.check_returned``, ``spmd-duality``): a
    backward that returns the incoming Partial gradient where the input was I or R ("forgot
    the all-reduce") raises instead of giving each rank its partial gradient."""
    info = getattr(node, _BACKWARD_INFO, None) if _STACK else None
    if info is None:
        if _torch_distributed_function(node):
            # torch.distributed's own Functions (FSDP's post-backward gradient reduce-scatter,
            # DTensor's conversions): their bodies run torch's bookkeeping on the typed
            # gradients (FSDP's chunk_cat of P gradients), not the user's code
            return _TORCH_BACKWARD_APPLY(node, *grads)
        with _in_mode():
            return _TORCH_BACKWARD_APPLY(node, *grads)
    function, types, names, cls, _, shown = info
    for g, t in zip(grads, types):
        if t and isinstance(g, torch.Tensor) and not _get(g):
            _set(g, t)
    # backward runs without grad unless create_graph=True: then an R stands for an I and
    # back in what it returns (engine duality.check_returned)
    gradient_free = not torch.is_grad_enabled()
    returns = _ReturnCapture(getattr(cls, "backward", None))
    with _in_mode(), returns:
        result = _TORCH_BACKWARD_APPLY(node, *grads)
    many = isinstance(result, tuple)
    results = result if many else (result,)

    def slots(texts: Sequence[str | None], as_shown: bool = False) -> list[duality.Slot]:
        returned: list[duality.Slot] = []
        inputs = shown.inputs or ()
        for i, r in enumerate(results):
            if r is None:
                returned.append(duality.Slot("None", duality.NONE))
            elif isinstance(r, torch.Tensor):
                text = (texts[i] if i < len(texts) else None) or next(
                    (n for n, g in zip(names, grads) if g is r), None) or (
                    f"result[{i}]" if many else "result")
                have = _pending_type(r, _get(r) or _UNTYPED)
                returned.append(
                    _shown_gradient(duality.Slot.tensor(text, have),
                                    inputs[i] if i < len(inputs) else None, _ndim(r))
                    if as_shown else duality.Slot.tensor(text, have.at_ndim(_ndim(r))))
            else:
                returned.append(duality.Slot(repr(r), duality.UNKNOWN))
        return returned

    def signature(fn: duality.FunctionTypes, texts: Sequence[str | None],
                  as_shown: bool = False) -> duality.FunctionTypes:
        # the declared results named by the returned expressions, with the types those have
        # (a fix is written from them), as the static checker names them where backward has
        # one return
        if fn.returns is None or len(texts) != len(fn.returns):
            return fn
        got = slots(texts, as_shown)
        return duality.FunctionTypes(fn.name, fn.inputs, fn.outputs, fn.grads, tuple(
            duality.Slot(t or s.name, s.kind, s.type, s.default, None,
                         g.type if t and g.typed else None)
            for t, s, g in zip(texts, fn.returns, got)))

    # the declared signature first (the static checker reports it on backward's def), then
    # what the body returned
    in_signature = duality.check_signature(function, gradient_free)
    errors = in_signature or duality.check_returned(function, slots(()), gradient_free)
    if errors:
        # named as the static checker names them: the return's expressions, and the types as
        # declared (S(-1), not the S(2) the rule compared at the rank); the error found at the
        # rank where the types as declared do not show it
        try:
            texts = returns.texts(results)
            if in_signature:
                errors = (duality.check_signature(signature(shown, texts, True), gradient_free)
                          or duality.check_signature(signature(function, texts), gradient_free)
                          or errors)
            else:
                errors = (duality.check_returned(shown, slots(texts, True), gradient_free)
                          or duality.check_returned(function, slots(texts), gradient_free)
                          or errors)
        except Exception:  # noqa: BLE001 - naming never hides the error
            pass
        raise SpmdTypeError(errors[0])
    return result


# ``ctx.saved_tensors`` while a block is open (``BackwardCFunction.saved_tensors``, a property
# over torch's): a saved tensor forward made and returned comes back as a new tensor (torch
# saves an output without its node, to break the cycle), which the mode has never seen; it
# has forward's declared type there (engine ``duality.saved_slot``, the static checker's rule).
# The other saved tensors are the objects forward saved, with their own types.
_TORCH_SAVED_TENSORS: Any = None  # torch's descriptor (torch._C._FunctionBase.saved_tensors)


def _checked_saved_tensors(node: Any) -> Any:
    saved = _TORCH_SAVED_TENSORS.__get__(node)
    info = getattr(node, _BACKWARD_INFO, None) if ACTIVE else None
    if info is None:
        return saved
    outputs = info[4]
    for t in saved:
        if isinstance(t, torch.Tensor) and t.grad_fn is node and not _get(t):
            slot = duality.saved_slot(duality.Slot.tensor("", _UNTYPED), t.output_nr, outputs)
            if slot.typed:
                _set(t, slot.type)
    return saved


class _ReturnCapture:
    """Where a custom Function's ``backward`` returned (the check mode's duality message names
    the returned values by the expressions of that ``return``, as the static checker does:
    ``gfull``, ``spmd.all_reduce(...)``, not ``result[1]``).  The first op the body runs in
    the mode finds the body's frame (:func:`_find_return_frames`); once the body has returned,
    that frame's last instruction is its return.  A body that runs no op is not read (its
    values are then named by the gradients' names, else ``result[i]``)."""

    __slots__ = ("code", "frame", "frame_info")

    def __init__(self, fn: Any) -> None:
        try:
            fn = inspect.unwrap(fn) if fn is not None else None
        except ValueError:
            fn = None
        self.code = getattr(fn, "__code__", None)
        self.frame: Any = None
        self.frame_info: tuple[Any, int, dict] | None = None

    def __enter__(self) -> None:
        if self.code is not None:
            _RETURN_WANTED.append(self)

    def __exit__(self, *exc: Any) -> None:
        if self in _RETURN_WANTED:
            _RETURN_WANTED.remove(self)
        f, self.frame = self.frame, None
        if f is not None and exc[0] is None:
            self.frame_info = (f.f_code, f.f_lasti, f.f_globals)

    def texts(self, results: Sequence[Any]) -> list[str | None]:
        """The text of each returned value (by position), [] when the return is not read."""
        import ast
        import textwrap

        if self.frame_info is None:
            return []
        code, lasti, f_globals = self.frame_info
        # the statement the return instruction belongs to (a with block's, for a return in
        # it): parsed dedented, its one return read
        source = _source_at(code, lasti, f_globals)
        if source is None:
            return []
        try:
            tree = ast.parse(textwrap.dedent(source))
        except SyntaxError:
            return []
        rets = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
        if len(rets) != 1 or rets[0].value is None:
            return []
        value = rets[0].value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in code.co_freevars):
            # a decorator's wrapper without functools.wraps (``return fn(ctx, *grads)``, fn
            # from its closure): the user's body is elsewhere
            return []
        items = value.elts if isinstance(value, ast.Tuple) else [value]  # ``return h,`` too
        if len(items) != len(results) or any(isinstance(i, ast.Starred) for i in items):
            return []
        return [_expr_text(i) for i in items]


def _source_at(code: Any, lasti: int, f_globals: dict) -> str | None:
    """The source text of the instruction at ``lasti`` of ``code`` (its position span: the
    call a frame is running, the statement a return belongs to), its first line indented as
    in the file so that the lines after it keep their relative indentation; None where the
    source is not available."""
    import linecache

    try:
        line, end_line, col, end_col = list(code.co_positions())[lasti // 2]
    except IndexError:
        return None
    if line is None or end_line is None or col is None or end_col is None:
        return None
    lines = linecache.getlines(code.co_filename, f_globals)
    if end_line > len(lines):
        return None
    chunk = [ln.encode() for ln in lines[line - 1:end_line]]
    chunk[-1] = chunk[-1][:end_col]
    chunk[0] = b" " * col + chunk[0][col:]
    try:
        return b"".join(chunk).decode()
    except UnicodeDecodeError:
        return None


_RETURN_WANTED: list[_ReturnCapture] = []  # backward bodies running, their frame not found yet


def _find_return_frames() -> None:
    """Called by the mode's first op while a backward body is running: its frame."""
    f: Any = sys._getframe(2)
    while f is not None and _RETURN_WANTED:
        for c in _RETURN_WANTED:
            if f.f_code is c.code:
                c.frame = f
                _RETURN_WANTED.remove(c)
                break
        f = f.f_back


def _expr_text(e: Any) -> str:
    """Short source text of an expression, as the static checker writes it (plugin
    ``texts.expr_text``): as written (``gs[0]``, ``x.view(b, s, -1)``, ``spmd.all_reduce(g,
    "tp", src=P, dst=R)``), a call's arguments and a subscript's index cut as ``<...>`` past
    48 characters; an operator parenthesized, ``(a + b)``."""
    import ast
    import copy

    e = _DoubleQuoted().visit(copy.deepcopy(e))
    text = ast.unparse(_cut(e, _TEXT_LIMIT - 2 if _loose(e) else _TEXT_LIMIT))
    return f"({text})" if _loose(e) else text


def _double_quoted_class() -> Any:
    import ast

    class DoubleQuoted(ast.NodeTransformer):
        """A string constant written "x", as the static checker writes it (ast.unparse
        writes 'x'); an f-string as unparse writes it."""

        def visit_Constant(self, node: Any) -> Any:
            v = node.value
            if isinstance(v, str) and '"' not in v and "\\" not in v and v.isprintable():
                return ast.Name(id=f'"{v}"')
            return node

        def visit_JoinedStr(self, node: Any) -> Any:
            return node

    return DoubleQuoted


_DoubleQuoted = _double_quoted_class()


_TEXT_LIMIT = 48  # the static checker's (plugin texts.TEXT_LIMIT)
_ELIDED = "<...>"


def _loose(e: Any) -> bool:
    import ast
    return isinstance(e, (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda)) or (
        isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not))


def _cut(e: Any, budget: int) -> Any:
    """``e`` with the arguments of its calls and the indices of its subscripts replaced by
    ``<...>`` where its text would pass ``budget`` characters (the callee chain kept)."""
    import ast

    if len(ast.unparse(e)) <= budget:
        return e
    elided = ast.Name(id=_ELIDED)
    if isinstance(e, ast.Call):
        func = _cut(e.func, budget)
        room = budget - len(ast.unparse(func)) - 2
        args = ast.unparse(ast.Call(func=ast.Name(id=""), args=e.args, keywords=e.keywords))[1:-1]
        if len(args) <= room:
            return ast.Call(func=func, args=e.args, keywords=e.keywords)
        return ast.Call(func=func, args=[elided], keywords=[])
    if isinstance(e, ast.Subscript):
        value = _cut(e.value, budget)
        room = budget - len(ast.unparse(value)) - 2
        index = e.slice if len(ast.unparse(e.slice)) <= room else elided
        return ast.Subscript(value=value, slice=index, ctx=e.ctx)
    if isinstance(e, ast.Attribute):
        return ast.Attribute(value=_cut(e.value, budget - len(e.attr) - 1), attr=e.attr, ctx=e.ctx)
    if isinstance(e, ast.BinOp):
        left = _cut(e.left, budget)
        right = _cut(e.right, budget - len(ast.unparse(left)) - 3)
        return ast.BinOp(left=left, op=e.op, right=right)
    if isinstance(e, ast.UnaryOp):
        return ast.UnaryOp(op=e.op, operand=_cut(e.operand, budget - 1))
    return e


_apply.__name__ = "apply"  # torch.compile recognises an aliased Function.apply by its name


_TORCH_CHECKPOINT_GENERATOR: Any = None
_TORCH_PARAMETER_DEEPCOPY: Any = None
_TORCH_PARAMETER_NEW: Any = None  # Parameter's own __new__ (a staticmethod) while installed
_TENSOR_DEEPCOPY = torch.Tensor.__deepcopy__


def _typed_copy(source: Any, copied: Any) -> Any:
    """``copy.deepcopy`` of a typed tensor holds the same values: the copy gets the type (a
    master-weight or EMA copy, ``copy.deepcopy(model).float()``, was untyped, so every check
    on it was skipped)."""
    t = _get(source) if isinstance(source, torch.Tensor) else None
    if t and isinstance(copied, torch.Tensor) and copied is not source:
        _set(copied, t)
    return copied


def _checked_parameter_deepcopy(self: torch.nn.Parameter, memo: dict) -> Any:
    # Parameter.__deepcopy__ builds the copy with _make_subclass, which no mode sees
    return _typed_copy(self, _TORCH_PARAMETER_DEEPCOPY(self, memo))


def _checked_parameter_new(cls: Any, data: Any = None, requires_grad: bool = True) -> Any:
    """``nn.Parameter(x)`` is ``x``'s data (``_make_subclass``, which no mode sees): it keeps
    ``x``'s type, so ``declare_parameters`` checks the annotation against it (an S(0) chunk
    put in an I parameter, ``load_state_dict(sd, assign=True)`` of typed values, were
    untyped and stamped with the annotation: the ranks held different "replicated"
    values)."""
    own = _TORCH_PARAMETER_NEW or vars(torch.nn.Parameter)["__new__"]  # (put back meanwhile)
    return _typed_copy(data, own.__func__(cls, data, requires_grad))


def _checked_checkpoint_generator(fn: Any, preserve_rng_state: bool, context_fn: Any,
                                  *args: Any, **kwargs: Any) -> Any:
    """torch.utils.checkpoint's non-reentrant form, its recomputation in the check mode:
    torch recomputes the region inside a saved tensor's unpack hook during the backward,
    where the mode stack is empty (a recomputation that differs from the forward, e.g. a
    collective skipped on recompute, passed unchecked).  The user's own ``context_fn``
    contexts are kept, the mode entered inside the recomputation's."""
    def with_mode() -> tuple[Any, Any]:
        forward_ctx, recompute_ctx = context_fn()
        return forward_ctx, _recompute_in_mode(recompute_ctx)
    return _TORCH_CHECKPOINT_GENERATOR(fn, preserve_rng_state, with_mode, *args, **kwargs)


@contextlib.contextmanager
def _recompute_in_mode(recompute_ctx: Any) -> Iterator[None]:
    with recompute_ctx, _in_mode():
        yield


def _install_apply() -> None:
    global _TORCH_APPLY, _TORCH_BACKWARD_APPLY, _TORCH_CHECKPOINT_GENERATOR, _TORCH_SAVED_TENSORS
    global _TORCH_PARAMETER_DEEPCOPY, _TORCH_PARAMETER_NEW
    import torch.utils.checkpoint as checkpoint_module
    if _TORCH_PARAMETER_DEEPCOPY is None and "__deepcopy__" in vars(torch.nn.Parameter):
        _TORCH_PARAMETER_DEEPCOPY = vars(torch.nn.Parameter)["__deepcopy__"]
        torch.nn.Parameter.__deepcopy__ = _checked_parameter_deepcopy  # type: ignore[method-assign]
    if _TORCH_PARAMETER_NEW is None and isinstance(vars(torch.nn.Parameter).get("__new__"),
                                                   staticmethod):
        _TORCH_PARAMETER_NEW = vars(torch.nn.Parameter)["__new__"]
        torch.nn.Parameter.__new__ = staticmethod(_checked_parameter_new)  # type: ignore[assignment]
    if _TORCH_CHECKPOINT_GENERATOR is None and hasattr(
            checkpoint_module, "_checkpoint_without_reentrant_generator"):
        _TORCH_CHECKPOINT_GENERATOR = checkpoint_module._checkpoint_without_reentrant_generator
        checkpoint_module._checkpoint_without_reentrant_generator = (  # type: ignore[assignment]
            _checked_checkpoint_generator)
    if _TORCH_BACKWARD_APPLY is None:
        node_cls = torch.autograd.function.BackwardCFunction
        _TORCH_BACKWARD_APPLY = node_cls.__dict__["apply"]
        node_cls.apply = _checked_backward  # type: ignore[method-assign]
    if _TORCH_SAVED_TENSORS is None:
        _TORCH_SAVED_TENSORS = torch._C._FunctionBase.__dict__["saved_tensors"]
        torch.autograd.function.BackwardCFunction.saved_tensors = property(  # type: ignore[attr-defined]
            _checked_saved_tensors)
    from . import _dtensor
    _dtensor.install()  # DTensor.to_local/from_local at the boundary with DTensor code
    from . import _einops
    _einops.install()  # einops' rearrange/repeat/reduce typed by their pattern
    _install_ddp()
    if _TORCH_APPLY is None:
        fn_cls = torch.autograd.Function
        _TORCH_APPLY = fn_cls.__dict__["apply"]
        # torch.compile: a graph being traced calls Fn.apply by name (it traces forward
        # itself, never this); after a graph break the eager call must not be compiled as
        # a frame of its own (the frame of torch's apply is skipped as torch's code)
        fn_cls.apply = classmethod(  # type: ignore[method-assign,assignment]
            torch.compiler.disable(_apply, recursive=False))


# Parameters of a torch DistributedDataParallel module whose forward ran in the check mode:
# id -> weakref (their gradients are reduced by DDP's reducer, unseen by the mode), noted at
# each DDP module's first forward (not every step's).
_DDP_PARAMS: dict[int, Any] = {}
_DDP_SEEN: weakref.WeakSet[Any] = weakref.WeakSet()
_TORCH_DDP_FORWARD: Any = None


def _reduced_by_ddp(p: Any) -> bool:
    entry = _DDP_PARAMS.get(id(p)) if _DDP_PARAMS else None
    return entry is not None and entry() is p


def _checked_ddp_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    if self not in _DDP_SEEN:
        if len(_DDP_PARAMS) > 100_000:  # bound the memory of a long run
            _DDP_PARAMS.clear()
            _DDP_SEEN.clear()
        _DDP_PARAMS.update((id(p), weakref.ref(p)) for p in self.module.parameters()
                           if p.requires_grad)
        _DDP_SEEN.add(self)
    return _TORCH_DDP_FORWARD(self, *args, **kwargs)


def _install_ddp() -> None:
    global _TORCH_DDP_FORWARD
    ddp = sys.modules.get("torch.nn.parallel.distributed")
    cls = getattr(ddp, "DistributedDataParallel", None)
    if _TORCH_DDP_FORWARD is None and cls is not None and "forward" in vars(cls):
        _TORCH_DDP_FORWARD = vars(cls)["forward"]
        cls.forward = _checked_ddp_forward


def _uninstall_ddp() -> None:
    global _TORCH_DDP_FORWARD
    if _TORCH_DDP_FORWARD is not None:
        from torch.nn.parallel import DistributedDataParallel
        DistributedDataParallel.forward = _TORCH_DDP_FORWARD  # type: ignore[method-assign]
        _TORCH_DDP_FORWARD = None


def _uninstall_apply() -> None:
    global _TORCH_APPLY, _TORCH_BACKWARD_APPLY, _TORCH_CHECKPOINT_GENERATOR, _TORCH_SAVED_TENSORS
    global _TORCH_PARAMETER_DEEPCOPY, _TORCH_PARAMETER_NEW
    from . import _dtensor
    _dtensor.uninstall()
    from . import _einops
    _einops.uninstall()
    _uninstall_ddp()
    if _TORCH_PARAMETER_DEEPCOPY is not None:
        torch.nn.Parameter.__deepcopy__ = _TORCH_PARAMETER_DEEPCOPY  # type: ignore[method-assign]
        _TORCH_PARAMETER_DEEPCOPY = None
    if _TORCH_PARAMETER_NEW is not None:
        torch.nn.Parameter.__new__ = _TORCH_PARAMETER_NEW  # type: ignore[assignment]
        _TORCH_PARAMETER_NEW = None
    if _TORCH_CHECKPOINT_GENERATOR is not None:
        import torch.utils.checkpoint as checkpoint_module
        checkpoint_module._checkpoint_without_reentrant_generator = (  # type: ignore[assignment]
            _TORCH_CHECKPOINT_GENERATOR)
        _TORCH_CHECKPOINT_GENERATOR = None
    if _TORCH_BACKWARD_APPLY is not None:
        torch.autograd.function.BackwardCFunction.apply = _TORCH_BACKWARD_APPLY  # type: ignore[method-assign]
        _TORCH_BACKWARD_APPLY = None
    if _TORCH_SAVED_TENSORS is not None:
        del torch.autograd.function.BackwardCFunction.saved_tensors  # type: ignore[attr-defined]
        _TORCH_SAVED_TENSORS = None
    if _TORCH_APPLY is not None:
        torch.autograd.Function.apply = _TORCH_APPLY  # type: ignore[method-assign]
        _TORCH_APPLY = None


# --------------------------------------------------------------------------------------
# torch.utils.swap_tensors refuses a tensor any weak reference points to ("Cannot swap t1
# because it has weakref associated with it"), and the check mode's tables hold weak
# references to the typed tensors (the side table; assigned, hooked and DDP-reduced
# gradients' owners).  torch swaps a module's parameters in place of ``p.data = ...`` in
# ``Module._apply`` (``m.float()``, ``m.to(...)``, ``m.to_empty(...)``, ``m.share_memory()``)
# under ``torch.__future__.set_swap_module_params_on_conversion(True)`` and, without the
# flag, for a wrapper-subclass result (FSDP2's DTensor parameters, FakeTensor); in
# ``load_state_dict`` and parametrize's ``remove_parametrizations`` under the flag; in FSDP2's
# move of DTensor parameters to the device.  A typed parameter could not be converted there,
# inside a block or after it.  Installed by the first block and kept (the types outlive the
# blocks); a tensor none of whose weak references is the check mode's is torch's own case.

_TORCH_SWAP_TENSORS: Any = None


def _release(t: Any) -> list[Any]:
    """Drop the check mode's weak references to ``t``: what :func:`_retake` needs to take
    them again (no weak reference kept meanwhile)."""
    key = id(t)
    held: list[Any] = [_get(t), _ASSIGNED_GRADS.get(key) is t, None, None, [], False]
    if held[0] is not None:
        del _TYPES[key]
    if held[1]:
        del _ASSIGNED_GRADS[key]
    _ZEROED.pop(key, None)  # its version counter is swapped too
    _ZEROS.pop(key, None)  # and its values: no factory's zeros any more
    entry = _GRAD_OWNERS.get(key)
    if entry is not None and entry[0]() is t:
        held[2] = entry[1]()  # the tensor whose .grad t was assigned to
        del _GRAD_OWNERS[key]
    entry = _HOOKED_GRADS.get(key)
    if entry is not None and entry[0]() is t:
        held[3] = entry[1]
        del _HOOKED_GRADS[key]
    if _GRAD_OWNERS:  # the gradients assigned to t's .grad
        for k, (g_ref, o_ref) in list(_GRAD_OWNERS.items()):
            if o_ref() is t:
                held[4].append(g_ref())
                del _GRAD_OWNERS[k]
    entry = _DDP_PARAMS.get(key) if _DDP_PARAMS else None
    if entry is not None and entry() is t:
        held[5] = True
        del _DDP_PARAMS[key]
    del entry
    gradient = False
    for k in [k for k, g in list(_GRADIENTS.items()) if g is t]:
        del _GRADIENTS[k]
        gradient = True
    held.append(gradient)
    return held


def _retake(t: Any, held: list[Any]) -> None:
    typ, assigned, owner, hooked, grads, ddp, gradient = held
    if gradient:
        _note_gradient(t)
    if typ is not None:
        _set(t, typ)
    if assigned:
        _ASSIGNED_GRADS[id(t)] = t
    if owner is not None:
        _assign_grad(owner, t)
    if hooked is not None:
        _note_hooked(t, hooked)
    for g in grads:
        if g is not None:
            _note_grad_owner(g, t)
    if ddp:
        _DDP_PARAMS[id(t)] = weakref.ref(t)


def _swap_tensors(t1: Any, t2: Any) -> None:
    """torch.utils.swap_tensors with the check mode's weak references dropped meanwhile.
    ``t1`` (the module's parameter, which keeps its identity) keeps its type, as ``p.data =
    v`` leaves it, or takes ``t2``'s when it had none; in a block the pair is checked as
    ``t1.data = t2`` is (a value sharded on another dim).  ``t2`` (dropped by torch) holds
    ``t1``'s old value and gets its old type.  The other tables follow the objects."""
    swap = _TORCH_SWAP_TENSORS
    if not (weakref.getweakrefcount(t1) or weakref.getweakrefcount(t2)):
        return swap(t1, t2)
    if ACTIVE and not _PAUSED and isinstance(t1, torch.Tensor) and isinstance(t2, torch.Tensor):
        _check_data_assignment(t1, t2)
    held1, held2 = _release(t1), _release(t2)
    try:
        swap(t1, t2)
    except BaseException:
        _retake(t1, held1)
        _retake(t2, held2)
        raise
    type1 = held1[0]
    held1[0] = type1 if type1 else held2[0]
    held2[0] = type1
    _retake(t1, held1)
    _retake(t2, held2)
    return None


def _install_swap() -> None:
    global _TORCH_SWAP_TENSORS
    if _TORCH_SWAP_TENSORS is None:
        import torch.utils
        _TORCH_SWAP_TENSORS = torch.utils.swap_tensors
        torch.utils.swap_tensors = _swap_tensors


# --------------------------------------------------------------------------------------
# Raw torch.distributed collectives on typed tensors (spmd-raw-collective, as the plugin
# reports them).  ``torch.distributed.all_reduce`` and the other raw collectives hand their
# tensor arguments to the mode (the torch function protocol); called from user code with a
# typed tensor, they raise before any communication, unless they run inside a custom
# autograd Function's forward or backward (where users implement their own collectives; the
# Function's annotations type it).  Calls from the typed collectives' implementation are not
# the user's; one made by torch.distributed.nn.functional is reported under that name.  The
# functional collectives (torch.distributed._functional_collectives: all_gather_tensor,
# all_reduce, ..., their *_autograd variants) reach the mode as their ops
# (torch.ops._c10d_functional.*) and are reported under the function the user called.

_NN_FUNCTIONAL = os.path.join(_TORCH_DIR, "distributed", "nn", "functional.py")
_FUNCOL = os.path.join(_TORCH_DIR, "distributed", "_functional_collectives.py")
_FUNCOL_MODULE = "torch.distributed._functional_collectives"
_C10D = os.path.join(_TORCH_DIR, "distributed", "distributed_c10d.py")
_FUNCTION_METHODS = frozenset({"forward", "backward", "jvp", "vjp", "apply"})
# Torch's own users of collectives: a collective called from their code is torch's (a
# DTensor's redistribute, FSDP's gradient reduce-scatter, DDP's buckets), issued on a local
# tensor the user typed, not the user's raw call.  Any other torch frame between the user and
# the collective (``tree_map(partial(dist.all_reduce, group=g), grads)``: torch's pytree
# calls the user's collective) keeps it the user's.
_TORCH_COLLECTIVE_USERS = tuple(os.path.join(_TORCH_DIR, *d) + os.sep for d in (
    ("distributed", "tensor"), ("distributed", "fsdp"), ("distributed", "_composable"),
    ("distributed", "algorithms"), ("distributed", "pipelining"), ("distributed", "optim"),
    ("distributed", "checkpoint"), ("distributed", "_tools"), ("nn", "parallel")))


def _raw_tensors(args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _in_autograd_function(f: Any) -> bool:
    """Whether frame ``f`` or a caller runs a custom autograd Function's forward (called
    through :func:`_apply`) or backward (called by autograd with its ctx)."""
    ctx_cls = torch.autograd.function.FunctionCtx
    while f is not None:
        code = f.f_code
        if code is _apply.__code__:
            return True
        if code.co_name in _FUNCTION_METHODS and isinstance(
                f.f_locals.get("ctx", f.f_locals.get("self")), ctx_cls):
            return True
        f = f.f_back
    return False




def _raw_written(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors a raw torch.distributed collective writes: its first argument (the tensor
    of all_reduce, broadcast, reduce; the output of all_gather_into_tensor,
    reduce_scatter_tensor, all_to_all_single; the output list of all_gather, all_to_all)."""
    first = args[0] if args else next((kwargs[k] for k in RAW_OUTPUT_KWARGS if k in kwargs), None)
    if isinstance(first, torch.Tensor):
        return [first]
    if isinstance(first, (list, tuple)):
        return [t for t in first if isinstance(t, torch.Tensor)]
    return []


def _untype(t: torch.Tensor) -> None:
    entry = _TYPES.get(id(t))
    if entry is not None and entry[0]() is t:
        del _TYPES[id(t)]


def _check_raw_collective(func: Any, name: str, args: tuple, kwargs: dict) -> None:
    typed = [(t, st) for t in _raw_tensors(args, kwargs) if (st := _get(t))]
    if not typed or torch.compiler.is_compiling():
        return
    op = isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
    module = "torch.ops._c10d_functional" if op else "torch.distributed"
    funcol: Any = None  # the frame of the functional collective the user called
    f: Any = sys._getframe(1)
    while f is not None:  # up to the user's frame
        fn = os.path.abspath(f.f_code.co_filename)
        if fn in _INTERNAL_FILES or fn.startswith(_TORCH_COLLECTIVE_USERS):
            return  # the typed collectives; torch's own use of a collective
        if not fn.startswith(_SKIP_DIRS):
            break
        if fn == _NN_FUNCTIONAL and f.f_code.co_name in RAW_NN_NAMES:
            module, name = "torch.distributed.nn.functional", f.f_code.co_name
        elif fn == _C10D and f.f_code.co_name in RAW_COLLECTIVES:
            name = f.f_code.co_name  # reduce_scatter_tensor, which calls reduce_scatter_single
        elif op and fn == _FUNCOL and f.f_code.co_name in RAW_FUNCTIONAL_COLLECTIVES:
            # all_gather_tensor (all_gather_single's caller), all_reduce_inplace, ...
            module, name, funcol = _FUNCOL_MODULE, f.f_code.co_name, f
        f = f.f_back
    if f is None:
        return
    if _in_autograd_function(f):
        # the user's own collective in a Function's forward or backward: what it wrote is no
        # longer of the type it had (``dist.all_reduce(g)`` on a Partial gradient, then
        # ``return g`` or ``spmd.declare(g, Tensor[I["tp"]])``): untyped (the Function's
        # annotations type its result); a functional collective writes a new tensor, but
        # its *_inplace form then copies that into its first argument
        if not op:
            written = _raw_written(args, kwargs)
        elif funcol is not None and name.endswith("_inplace"):
            written = _raw_written((funcol.f_locals.get(funcol.f_code.co_varnames[0]),), {})
        else:
            written = []
        if (_PENDING and not op and name == "all_reduce"
                and _raw_op(func, args, kwargs)[0] == "sum"):
            # a pending partial sum (a contraction's, a sum over its shard dim) all-reduced
            # in place with SUM: the sum over the ranks, its resolution (Megatron's vocab-
            # parallel cross entropy: ``se = ez.sum(-1); dist.all_reduce(se)``); the
            # static checker's declared_partials._raw_reduced
            for w in written:
                entry = _PENDING.get(id(w))
                if entry is not None and entry[0]() is w:
                    if _pending_kind_of(entry) in ("mean", "mixed"):  # the ranks' means summed
                        _raise_refused(entry[1], entry[3], "sum", "all_reduce")
                    del _PENDING[id(w)]
        for w in written:
            _untype(w)
        return
    t, st = typed[0]
    if not op and name == "broadcast" and f"{module}.{name}" in RAW_BROADCASTS:
        checked = _check_raw_broadcast(func, args, kwargs, t, st)
        if checked is None:
            return  # a replicated value made equal on its ranks: no type changes
        if checked is not False:
            raise SpmdTypeError(checked)
    if op:  # the reduce op the functional collective was called with (reduceOp="avg")
        reduce_op, async_op = (_raw_op(None, (), funcol.f_locals) if funcol is not None
                               else (None, False))  # the op called directly: not read
    else:
        reduce_op, async_op = _raw_op(func, args, kwargs)
    group = None
    if funcol is not None:
        group = funcol.f_locals.get("group")
    elif not op:
        try:
            group = inspect.signature(func).bind_partial(*args, **kwargs).arguments.get("group")
        except (TypeError, ValueError):
            group = kwargs.get("group")
    raise SpmdTypeError(raw_collective_error(module, name, _texts([t], ["x"])[0], st,
                                             reduce_op=reduce_op, async_op=async_op,
                                             **_raw_group(group)))


def _check_raw_broadcast(func: Any, args: tuple, kwargs: dict, t: torch.Tensor,
                         st: SpmdType) -> Any:
    """``dist.broadcast(x, src, group)`` on a typed ``x`` (engine ``raw_broadcast_error``):
    None when accepted, the error, or False when the group is no mesh axis's (the raw
    collective's message then)."""
    import torch.distributed as dist

    from . import _mesh
    try:
        bound = inspect.signature(func).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = kwargs
    group = bound.get("group")
    axes: tuple[str, ...] | None = None
    ranks: list[int] | None = None
    if group is not None and group is not dist.group.WORLD:
        try:
            resolved = _mesh.resolve_axis(group)
        except (ValueError, RuntimeError):
            return False  # a group that is no mesh axis's (or no mesh set)
        axes, ranks = resolved.axes or None, list(resolved.ranks)
        if axes is not None and _mesh.get_mesh() is None:
            axes = None
    src_index: int | None = None
    src = bound.get("src")
    try:
        if src is None and bound.get("group_src") is not None:
            src_index = int(bound["group_src"])
        elif ranks is not None and src is not None:
            src_index = ranks.index(int(src))
        elif ranks is None and src is not None and axes is None:
            src_index = int(src)
    except (ValueError, TypeError):
        src_index = None
    detached = not torch.is_grad_enabled() or not t.requires_grad
    return raw_broadcast_error(_texts([t], ["x"])[0], st, axes, detached, src_index=src_index)


def _raw_group(group: Any) -> dict[str, Any]:
    """What a raw collective's message says of its group= (engine ``raw_collective_error``):
    nothing for none (torch's default group) or a mesh axis's group; a ProcessGroup that is
    no group of the current mesh's axes (a pipeline's tied-embedding group, ranks 0 and 3
    of pp=4) is named by its ranks, for which no typed collective over an axis stands."""
    import torch.distributed as dist

    from . import _mesh
    if not isinstance(group, dist.ProcessGroup) or _mesh.get_mesh() is None:
        return {}
    try:
        if group is dist.group.WORLD:
            return {}
        ranks = list(dist.get_process_group_ranks(group))
        try:
            _mesh.resolve_axis(group)
        except ValueError:
            return {"group": f"the group passed (ranks {ranks})", "group_is_axis": False}
    except Exception:  # noqa: BLE001 - a message must not turn into another exception
        return {}
    return {}


# Gradients read in the check mode (``x.grad``, ``torch.autograd.grad``'s results), by their
# data pointer (a ``.detach()`` or ``.contiguous()`` of one shares it), with a weak reference:
# a send of one is no error (engine ``check_send``'s ``gradient``, the plugin's ``.grad``).
_GRADIENTS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


def _note_gradient(g: torch.Tensor) -> None:
    try:
        _GRADIENTS[g.data_ptr()] = g
    except (RuntimeError, TypeError):  # pragma: no cover - a tensor without storage
        pass


def _is_gradient(x: torch.Tensor) -> bool:
    try:
        g = _GRADIENTS.get(x.data_ptr())
    except (RuntimeError, TypeError):  # pragma: no cover
        return False
    return g is not None and g.shape == x.shape


def _check_send(name: str, args: tuple, kwargs: dict) -> None:
    """``dist.send(x, dst)``, ``dist.isend(x, dst)`` and the isends of
    ``batch_isend_irecv([dist.P2POp(dist.isend, x, peer), ...])``: a Partial ``x`` sends
    this rank's summand (engine ``check_send``, the plugin's rule), raised on the sender
    before it sends (the receiver's recv then fails when the sender's process ends).  Not
    inside a custom autograd Function's forward or backward (its annotations type what it
    sends), nor from the typed collectives or torch's own users of point-to-point."""
    x = args[0] if args else kwargs.get("tensor")
    if not isinstance(x, torch.Tensor) or torch.compiler.is_compiling():
        return
    st = _get(x)
    if not st or check_send(name, Operand(st, "x"), gradient=_is_gradient(x)) is None:
        return
    f: Any = sys._getframe(1)
    while f is not None:  # up to the user's frame
        fn = os.path.abspath(f.f_code.co_filename)
        if fn in _INTERNAL_FILES or fn.startswith(_TORCH_COLLECTIVE_USERS):
            return
        if not fn.startswith(_SKIP_DIRS):
            break
        if fn == _C10D and f.f_code.co_name == "batch_isend_irecv":
            name = "P2POp"
        f = f.f_back
    if f is None or _in_autograd_function(f):
        return
    err = check_send(name, Operand(st, _texts([x], ["x"])[0]))
    assert err is not None
    raise SpmdTypeError(err)


def _raw_op(func: Any, args: tuple, kwargs: dict) -> tuple[str | None, bool]:
    """The reduce op a raw collective's call states (ReduceOp.AVG: "avg"; "sum" when not
    passed, torch's default; None for one not read) and whether async_op is true, as the
    plugin reads them from the source."""
    try:
        bound = inspect.signature(func).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = kwargs
    reduce_op: str | None = "sum"
    for param in RAW_OP_PARAMS:
        if param in bound:
            op = bound[param]
            reduce_op = raw_reduce_op(op if isinstance(op, str) else str(getattr(op, "name", op)))
    return reduce_op, bool(bound.get("async_op", False))


def _reset_caches() -> None:
    """Forget cached plans and engine results (tests; after the engine tables change)."""
    _PLANS.clear()
    _RESULTS.clear()
    _torch_ops._OVERRIDES = None


def _install_mesh_switch() -> None:
    from . import _mesh
    _mesh.on_switch = _switch_mesh
    _switch_mesh(_mesh._current)


_install_mesh_switch()

__all__ = ["ACTIVE", "typecheck", "declare", "reveal", "typeof", "checked", "on_collective",
           "suspended"]
