"""Typed collectives and conversions: differentiable ops whose backward is the table's.

Communication layer: raw c10d calls (``dist.all_reduce``, ``dist.all_gather_single``,
``dist.reduce_scatter_single``, ``dist.all_to_all_single``, the sums and the equal-block
all_to_all made by the ProcessGroup's own call without torch.distributed's Python wrapper,
see :mod:`._dist_utils`) on contiguous buffers split on dim 0, not the functional collectives
(``torch.distributed._functional_collectives`` + ``wait_tensor``).  Measured on this
machine (2 shared cores), gloo, 2 ranks, float64, medians of 200 (1 KB) / 40 (1 MB)
interleaved calls, microseconds per call:

    op               raw c10d 1KB   functional 1KB   raw c10d 1MB   functional 1MB
    all_reduce          775            1332             2979           2925
    all_gather          815            1207             2949           4740
    reduce_scatter      927            1444             3242           4289
    all_to_all          612            1054             1136           2499

The raw calls win everywhere except all_reduce at 1 MB (a tie within the noise); the
functional form would be the one to use under torch.compile.  Both run on gloo and NCCL:
buffers are made like the input (dtype, device), nothing assumes a CPU tensor.

The ops (``x`` on each rank, ``N`` ranks on the axis, ``k`` this rank's index)::

    all_reduce(P -> R | I)      op="sum" | "avg"; op="max" | "min": V -> R | I, no gradient
    all_gather(V -> R | I)      stack on a new dim 0        [A] [B] [C]  =>  [[A], [B], [C]]
    all_gather(S(i) -> R | I)   concatenate on dim i        [A] [B] [C]  =>  [A, B, C]
    reduce_scatter(P -> V)      sum, then unbind dim 0      (x.shape[0] == N)
    reduce_scatter(P -> S(i))   sum, then chunk dim i; op="avg": the sum divided by N
    all_to_all(V|S(i) -> V|S(j))  split on dst's dim, concatenate on src's dim (V = dim 0)
    reinterpret(...)            the local data as is, the meaning changes
    convert(...)                the meaning as is, the local data changes (no comms)
    redistribute(...)           the meaning-preserving one of the above (the engine's route())

Each is a :class:`torch.autograd.Function` (:class:`_Collective`) whose backward is
the list of steps the engine's :data:`TRANSITIONS` table gives for the transition,
each step run through the same Function: the backward is differentiable in turn,
so double backward works (backward of backward is the forward).
"""

from __future__ import annotations

import sys
import weakref
import zlib
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from spmd_mypy.engine.collectives import (AGREEING_OPS, NO_GRAD_TRANSITIONS, TRANSITIONS,
                                          RankCall, Transition, check_collective,
                                          disagreement, form, free_dim, route)
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import PARTIAL, REPLICATE, UNTYPED, LocalType

from . import _context
from . import _dist_utils as du
from . import _mesh
from ._types import I, P, R, S, V, _Marker, local_type_of

_MARKERS = {"R": R, "I": I, "V": V, "P": P}


class SpmdCollectiveError(SpmdTypeError, TypeError):
    """A collective called with a src/dst pair outside the table, without expert_mode, ...

    A TypeError (a wrong argument) and an :class:`SpmdTypeError` (the engine's code and
    message: ``e.code``, ``e.error``), so the check mode's handlers catch it too.
    """


# ------------------------------------------------------------------------------------
# Steps: one op bound to an axis group, with its local effect and its backward
# ------------------------------------------------------------------------------------

Impl = Callable[["_Step", torch.Tensor, "tuple[int, ...] | None"], torch.Tensor]


class _Step:
    """``op(src, dst)`` on one axis group; S forms carry their dims (as written, maybe < 0).

    ``scale`` multiplies the result (``op="avg"`` and its backward).  ``in_backward``: a
    step of a backward, whose result is only ever a gradient (so it may alias its input).
    ``dirties``: a forward all-reduce that reduces its input in place (only ever used on
    an input nobody else holds, see ``_Plan.in_place``).
    """

    __slots__ = ("op", "src", "dst", "src_dim", "dst_dim", "group", "scale", "in_backward",
                 "transition", "impl", "dirties", "traced", "_backward", "_reduces")

    def __init__(self, transition: Transition, src_dim: int | None, dst_dim: int | None,
                 group: du.AxisGroup | None, scale: float | None = None,
                 in_backward: bool = False) -> None:
        self.transition = transition
        self.op, self.src, self.dst = transition.forward.op, transition.src, transition.dst
        self.src_dim, self.dst_dim = src_dim, dst_dim
        self.group = group
        self.scale = scale
        self.in_backward = in_backward
        impl = _IMPLS[(self.op, self.src, self.dst)]
        if scale is not None and impl is not _identity and impl is not _all_reduce_sum:
            impl = _scaled(impl)  # reduce_scatter(op="avg") and its backward all_gather
        self.impl: Impl = impl
        self.dirties = False
        self.traced = False  # made for torch.compile's tracing (see _traced_plan_name)
        self._backward: tuple[_Step, ...] | None = None
        self._reduces: bool | None = None

    def reduces_in_backward(self) -> bool:
        """Whether the backward all-reduces over more than one rank (where reducing the
        gradient in place saves a copy; on one rank the all-reduce returns it as is)."""
        r = self._reduces
        if r is None:
            r = self._reduces = any(s.impl is _all_reduce_sum and s.group is not None
                                    and s.group.size > 1 for s in self.backward_steps())
        return r

    def backward_steps(self) -> tuple[_Step, ...]:
        """The table's backward for this step, with dims, group and scale carried through."""
        steps = self._backward
        if steps is None:
            t = self.transition
            dim = self.src_dim if self.src_dim is not None else self.dst_dim
            out = []
            for n, s in enumerate(t.backward):
                if t.swaps_dims:
                    sd, dd = self.dst_dim, self.src_dim
                else:
                    sd = dim if s.src == "S" else None
                    dd = dim if s.dst == "S" else None
                scale = self.scale if n == 0 else None
                out.append(_Step(TRANSITIONS[(s.op, s.src, s.dst)], sd, dd, self.group, scale,
                                 in_backward=True))
            steps = self._backward = tuple(out)
        return steps

    def describe(self) -> str:
        s = f"S({self.src_dim})" if self.src == "S" else self.src
        d = f"S({self.dst_dim})" if self.dst == "S" else self.dst
        axes = self.group.axes if self.group is not None else ()
        ax = repr(axes[0]) if len(axes) == 1 else repr(axes)
        return f"{self.op}(x, {ax}, src={s}, dst={d})"


class _Collective(torch.autograd.Function):
    """One step forward; the table's backward steps, each through this Function again."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, step: _Step, sizes: tuple[int, ...] | None) -> torch.Tensor:
        ctx.step = step
        ctx.sizes = sizes
        if step.dirties:  # an input nobody else holds (_run): the result is the input,
            ctx.mark_dirty(x)  # rebased on this node, and nobody can see that it changed
            return _all_reduce_sum_(step, x)
        return step.impl(step, x, sizes)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        step = ctx.step
        if _legacy_batched_grad(grad):  # autograd.grad(..., is_grads_batched=True)
            return _legacy_batched(grad, lambda g: _backward_steps_on(step, g, ctx.sizes)), None, None
        steps = step.backward_steps()
        # Only a backward that all-reduces can reduce in place.  The signature is taken
        # here, on backward's own argument: the counts it compares were calibrated on a
        # Function's backward argument (see _signatures; empty: never in place).
        owned = False
        compiling = step.traced  # traced by torch.compile: never in place
        if not compiling and step.reduces_in_backward() and not _transforming():
            sigs = _signatures(_OWNED, grad)
            owned = bool(sigs) and _grad_signature(grad) in sigs
        sizes = ctx.sizes
        for step in steps:
            if grad.requires_grad and torch.is_grad_enabled():  # create_graph: differentiable
                grad = _Collective.apply(grad, step, sizes)
                owned = False
            elif owned and step.impl is _all_reduce_sum:
                grad = _all_reduce_sum_(step, grad)  # still ours alone
            else:
                out = step.impl(step, grad, sizes)
                # a new buffer is ours alone; a view of the input is as owned as the input
                owned = not compiling and (owned or not _same_storage(out, grad))
                grad = out
        return grad, None, None


# ``torch.autograd.grad(..., is_grads_batched=True)`` (and autograd.functional's jacobian,
# hessian with vectorize=True) runs the backward under torch's legacy vmap
# (torch._vmap_internals): the incoming gradient is a legacy BatchedTensor, with no storage
# (no signature to take) and no batching rule for the c10d calls; its requires_grad says
# False even under create_graph (the graph is the physical tensor's).  The backward unwraps
# it (the batch dim moved last, as the torch.func vmap rule does: one collective moves every
# probe at once; every rank must batch the same number of grad_outputs), runs the table's
# backward steps on the physical tensor (through the Function again when that tensor is
# differentiable: create_graph), and wraps the result back at the same level.

_is_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def _legacy_batched_grad(grad: torch.Tensor) -> bool:
    """``grad`` is batched by torch's legacy vmap; never while torch.compile traces (dynamo
    cannot trace the C check, and a traced backward sees no legacy batching)."""
    return not _compiling() and _is_legacy_batched(grad)


def _legacy_level() -> int:
    """The innermost legacy vmap level open on this thread (0: none)."""
    level = torch._C._vmapmode_increment_nesting()
    torch._C._vmapmode_decrement_nesting()
    return level - 1


def _legacy_batched(grad: torch.Tensor, run: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``run`` on the physical tensor of a legacy-batched ``grad`` (the batch dim last),
    the result batched again at ``grad``'s level."""
    # The level: the innermost one open on this thread (the engine runs a CPU backward on
    # the caller's thread); else (a device thread of the engine) the first level that
    # batches grad.  A batch_size of -1 makes _remove_batch_dim refuse a level that does
    # not batch grad (it would expand grad to a new batch dim).
    here = _legacy_level()
    for level in (here, *(k for k in range(1, 65) if k != here)):
        if level < 1:
            continue
        try:
            physical = torch._remove_batch_dim(grad, level, -1, 0)
        except RuntimeError:
            continue
        break
    else:
        raise NotImplementedError("a typed collective's backward got a gradient batched by "
                                  "torch's legacy vmap at no level it could find")
    if _is_legacy_batched(physical):
        raise NotImplementedError("a typed collective's backward under nested "
                                  "is_grads_batched=True (two legacy vmap levels) is not "
                                  "supported; batch the probes in one level")
    out = run(physical.movedim(0, -1))
    return torch._add_batch_dim(out.movedim(-1, 0), 0, level)


def _backward_steps_on(step: "_Step", grad: torch.Tensor, sizes: tuple[int, ...] | None
                       ) -> torch.Tensor:
    """The table's backward of ``step`` on ``grad``, a batch of gradients with the batch dim
    last (never in place: the physical tensor is legacy vmap's)."""
    ndim = grad.ndim - 1
    for s in step.backward_steps():
        s = _batched_step(s, ndim)
        if grad.requires_grad and torch.is_grad_enabled():  # create_graph: differentiable
            grad = _Collective.apply(grad, s, sizes)
        else:
            grad = s.impl(s, grad, sizes)
        ndim = grad.ndim - 1
    return grad


# What ``_Collective.apply`` does for these arguments, without its generic Python layer
# (binding defaults for setup_context, a generator over the arguments): the C apply on
# x unwrapped if it is a dead functorch wrapper; under functorch transforms, the real one.
_C_APPLY = super(torch.autograd.Function, _Collective).apply  # type: ignore[misc]
_functorch_active = torch._C._are_functorch_transforms_active
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
_fwad = torch.autograd.forward_ad


def _transforming() -> bool:
    """A torch.func transform, or eager forward-mode AD (a dual level open: a dual tensor
    says requires_grad=False, and the c10d call of a no-grad path reduces its primal and
    leaves its tangent as it is, silently): the ops take the Functions with a jvp."""
    return _functorch_active() or _fwad._current_level >= 0


# True while Dynamo traces (it replaces the call by a constant); in eager mode a call that
# returns False, the cheapest of torch's checks (torch.compiler.is_compiling() also asks
# TorchScript).  Called once per collective, in _plan; the ops' fast paths have none
# (there such a call cost 2-4 us at 1 MB in an A/B, with the caches cold after the exchange).
_compiling = torch.compiler.is_dynamo_compiling


# ------------------------------------------------------------------------------------
# torch.func (grad, vjp, jacrev, vmap, functional_call): the same steps, another Function
# ------------------------------------------------------------------------------------
#
# functorch's transforms accept only Functions written in the setup_context style
# (forward without ctx) and need a vmap rule for ops they cannot batch (the c10d calls
# have none).  _Collective keeps the eager form (its ctx-forward is what _C_APPLY calls:
# no setup_context call per op, and the forward all-reduce in place via mark_dirty);
# under a transform the ops go through _FuncCollective instead: the same step, the same
# table's backward (each backward step through _FuncCollective again, so jacrev and
# higher derivatives work), never in place (functorch's wrappers have no storage to
# sign, and what holds them is functorch's business), and a vmap rule.
#
# The vmap rule moves the batch dim LAST and writes the step's S dims as non-negative dims
# of the per-example tensor: every local effect only adds or removes dim 0 (V's stacking
# dim) or works on the dims it names, so the batch stays the last dim of the result and
# one collective moves every example at once.  All ranks must vmap over the same batch
# size (they exchange batch * per-example sizes; different sizes mismatch the messages).
# A transform is detected by _transforming() (a C call, ~26 ns, and an attribute): once on the
# differentiable path (as _apply asked it before), and on the no-grad paths, the public ops'
# fast paths included: there a tensor of a transform may say requires_grad=False and
# still need the Function: vmap's batched tensors (c10d has no batching rule), jvp's duals
# (a c10d call on one reduces the primal and leaves the tangent as is: a wrong jacfwd,
# silently), and a tensor batched inside grad (grad(vmap(f))), whose gradient would be the
# local effect's derivative, not the table's backward.

class _FuncCollective(torch.autograd.Function):
    """:class:`_Collective` in torch.func's form: forward, setup_context, backward, vmap."""

    @staticmethod
    def forward(x: torch.Tensor, step: _Step, sizes: tuple[int, ...] | None) -> torch.Tensor:
        return step.impl(step, x, sizes)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.step, ctx.sizes = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        sizes = ctx.sizes
        for step in ctx.step.backward_steps():
            grad = _FuncCollective.apply(grad, step, sizes)
        return grad, None, None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, *_: Any) -> torch.Tensor:
        # every step is linear: the tangent goes through the step itself (jacfwd, hessian)
        return _FuncCollective.apply(tangent, ctx.step, ctx.sizes)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, step: _Step,
             sizes: tuple[int, ...] | None) -> tuple[torch.Tensor, int | None]:
        bdim = in_dims[0]
        if bdim is None:  # the same tensor for every example: one result for all
            return _FuncCollective.apply(x, step, sizes), None
        out = _FuncCollective.apply(x.movedim(bdim, -1), _batched_step(step, x.ndim - 1), sizes)
        return out, out.ndim - 1


# The local effects that read dim 0 of the tensor (V's stacking dim, a block split): a
# per-example tensor of no dims is refused as the effect refuses it unbatched (batched, dim
# 0 would be the batch dim).
_NEEDS_DIM_0: frozenset = frozenset()  # filled after _IMPLS


def _batched_step(step: _Step, ndim: int) -> _Step:
    """``step`` for a batch of per-example tensors of ``ndim`` dims, the batch dim last:
    its S dims non-negative (a negative dim would count the batch dim)."""
    src_dim, dst_dim = step.src_dim, step.dst_dim
    if src_dim is not None:
        src_dim = _dim(step, src_dim, ndim)
    if dst_dim is not None:
        dst_dim = _dim(step, dst_dim, ndim)
    if ndim == 0 and _IMPLS[(step.op, step.src, step.dst)] in _NEEDS_DIM_0:
        raise ValueError(f"{step.describe()} needs a tensor with at least one dim (under "
                         f"torch.func.vmap: each example)")
    return _Step(step.transition, src_dim, dst_dim, step.group, step.scale, step.in_backward)


class _FuncReduce(torch.autograd.Function):
    """all_reduce(op="max" | "min") under torch.func (no gradient; elementwise: vmap
    reduces the batch as is)."""

    @staticmethod
    def forward(x: torch.Tensor, group: du.AxisGroup, op: Any) -> torch.Tensor:
        return du.all_reduce(x, group, op)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        raise RuntimeError("all_reduce(op='max' | 'min') has no gradient")

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, group: du.AxisGroup,
             op: Any) -> tuple[torch.Tensor, int | None]:
        return _FuncReduce.apply(x, group, op), in_dims[0]


# ------------------------------------------------------------------------------------
# Gradients autograd owns alone: all-reduced in place, as Megatron's backward does
# ------------------------------------------------------------------------------------
#
# The backward of all_reduce(P,R) and of reinterpret(I,R) (every parameter's dp
# gradient) is an all-reduce of the incoming gradient.  Megatron reduces that gradient
# in place; the out-of-place form costs a copy of every gradient.  In place is right
# only when nothing else can see the buffer: the same gradient tensor can reach several
# backward nodes (``a + b`` passes one tensor to both), the user may hold it (a
# ``grad_outputs`` tensor, a hook that keeps it), or it may be a view of a buffer
# another node still reads (``y + z.t()``).  So the backward reduces in place only a
# contiguous, strided, non-differentiable plain tensor whose reference counts (C++
# holders of the tensor, Python references, tensors sharing its storage, and those of
# its base for a view) are exactly those of a gradient the engine produced for this
# node alone.  Those counts are calibrated once per device type on a probe Function in
# known cases, fresh gradients (owned) and shared, user-held, hooked and
# base-shared ones (not owned); if any of the latter looks like the former, or the
# torch in use lacks a counter, nothing is reduced in place.

def _counts(t: torch.Tensor) -> tuple | None:
    """The holders of ``t``: C++ holders of the tensor, Python references (this frame's
    included, so the call path to here must be the calibrated one) and tensors sharing
    its storage, Python references to the storage (one Python object per storage, the
    user's if the user holds it); None unless the storage is one torch allocated (not numpy's, DLPack's,
    a buffer's memory, which another object may hold without any of these counts)."""
    s = t.untyped_storage()
    if not s.resizable():
        return None
    return (t._use_count(), sys.getrefcount(t), torch._C._storage_Use_Count(s._cdata),
            sys.getrefcount(s))


def _grad_signature(g: torch.Tensor) -> tuple | None:
    if (type(g) is not torch.Tensor or g.requires_grad or g.layout != torch.strided
            or not g.is_contiguous()):
        return None
    counts = _counts(g)
    b = g._base
    return None if counts is None else (
        counts, None if b is None else (b._use_count(), sys.getrefcount(b)))


def _input_signature(x: torch.Tensor) -> tuple | None:
    """The forward's input: a contiguous non-leaf, not a view, no weak reference (a
    weakref.ref or the check mode's side table can reach it without any count)."""
    if (type(x) is not torch.Tensor or x.is_leaf or x._base is not None
            or x.layout != torch.strided or not x.is_contiguous()
            or weakref.getweakrefcount(x)):
        return None
    return _counts(x)


class _Probe(torch.autograd.Function):
    """Records the signature of its incoming gradient (calibration only)."""

    seen: list = []

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        _Probe.seen.append(_grad_signature(grad))
        return grad


def _probe_op(x: torch.Tensor) -> torch.Tensor:
    """The calibration's public op: the same frames as ``all_reduce`` down to ``_run``
    (one local ``x`` here), which records the signature where it takes it."""
    plan = _PROBE_PLAN
    out = _run(plan, x, None)
    return out


def _refs_of_a_temporary(x: object) -> int:
    return sys.getrefcount(x)


# How many references a temporary passed to a Python function has, at import: a call
# made through another mechanism (a PEP 523 frame evaluator: a debugger, torch.compile's
# dynamo) can hold one more per frame; calibrating under one and running under the other
# would shift every count, so the calibration runs only under the import's mechanism.
_TEMPORARY_REFS = _refs_of_a_temporary(object())


# Per device type: signatures of gradients the backward owns alone (_OWNED) and of
# forward inputs nobody else holds (_OWNED_INPUTS).
_OWNED: dict[str, frozenset] = {}
_OWNED_INPUTS: dict[str, frozenset] = {}


def _observe(run: Callable[[list], list], owned_cases: list, shared_cases: list
             ) -> tuple[list, list, set] | None:
    """The signatures a calibration's probe saw per case (owned, shared) and the set seen in
    the owned cases; None when the counters are missing (a torch without them: never in place)."""
    try:
        owned = run(owned_cases)
        shared = run(shared_cases)
    except Exception:  # noqa: BLE001
        return None
    return owned, shared, {sig for seen in owned for sig in seen}


def _calibrate(device: torch.device) -> frozenset:
    probe = _Probe.apply
    w = torch.ones(4, 3, device=device, requires_grad=True)
    a = torch.ones(5, 3, device=device)
    sq = torch.ones(4, 4, device=device, requires_grad=True)
    older: list = []
    held = torch.ones(4, 3, device=device)
    kept: list = []

    def hooked() -> None:
        y = probe(w)
        y.register_hook(kept.append)
        torch.nn.functional.linear(a, y).sum().backward()

    def storage_kept() -> None:
        y = probe(w)
        y.register_hook(lambda g: kept.append(g.untyped_storage()))
        torch.nn.functional.linear(a, y).sum().backward()

    def shared_base() -> None:
        older.append(sq.reshape(16) * 2)  # older nodes: they run after the probe's
        (older.pop() + probe(sq).reshape(16)).mul(2).sum().backward()

    owned_cases = [
        lambda: (probe(w) * a[:4]).sum().backward(),                      # a new buffer
        lambda: torch.nn.functional.linear(a, probe(w)).sum().backward(),  # a view of one
    ]
    shared_cases = [
        lambda: (probe(w) + probe(w)).mul(a[:4]).sum().backward(),  # one tensor, two nodes
        lambda: probe(w).backward(held),                            # the user's grad_outputs
        hooked,                                                     # a hook keeps it
        storage_kept,                                               # or its storage
        shared_base,                                                # its base shared
    ]

    def run(cases: list) -> list:
        out = []
        for case in cases:
            _Probe.seen = []
            with torch.enable_grad():
                case()
            out.append(_Probe.seen)
        _Probe.seen = []
        return out

    observed = _observe(run, owned_cases, shared_cases)
    if observed is None:
        return frozenset()
    owned, shared, good = observed
    if len(good) != 2 or None in good:
        return frozenset()
    # every shared case: its first gradient (the one seen while another holder exists)
    if any(not seen or seen[0] in good for seen in shared):
        return frozenset()
    return frozenset(good)


class _SavesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def _calibrate_inputs(device: torch.device) -> frozenset:
    """Signatures of a forward input nobody but the call holds: the inputs ``_probe_op``
    sees as temporaries of ops that save nothing of their result (owned), against the same
    results held by the user (a local, a list, a detached alias, an untyped storage) or
    saved by autograd (``exp``, ``relu``, a Function's ``save_for_backward``).  Empty (never
    in place) if any of the latter looks like the former or anything is unexpected."""
    if _refs_of_a_temporary(object()) != _TEMPORARY_REFS:
        return frozenset()
    w = torch.ones(4, 3, device=device, requires_grad=True)
    a = torch.ones(5, 3, device=device)
    keep: list = []

    def held_local() -> None:
        y = w * 2
        _probe_op(y)

    def held_in_list() -> None:
        keep.append(w * 2)
        _probe_op(keep[-1])

    def detached_alias() -> Any:
        y = w * 2
        keep.append(y.detach())
        return y

    def storage_held() -> Any:
        y = w * 2
        keep.append(y.untyped_storage())
        return y

    owned_cases = [
        lambda: _probe_op(w * 2),                                  # saves nothing of it
        lambda: _probe_op(torch.nn.functional.linear(a, w)),       # saves a and w
        lambda: _probe_op(w.sum(0) + 1),
    ]
    shared_cases = [
        held_local,
        held_in_list,
        lambda: _probe_op(detached_alias()),
        lambda: _probe_op(storage_held()),
        lambda: _probe_op(w.exp()),                                # exp saves its result
        lambda: _probe_op(torch.relu(w - 0.5)),                    # relu too
        lambda: _probe_op(_SavesOutput.apply(w)),
    ]

    def run(cases: list) -> list:
        out = []
        for case in cases:
            _PROBE_SEEN.clear()
            with torch.enable_grad():
                case()
            out.append(list(_PROBE_SEEN))
        _PROBE_SEEN.clear()
        keep.clear()
        return out

    observed = _observe(run, owned_cases, shared_cases)
    if observed is None:
        return frozenset()
    owned, shared, good = observed
    if len(good) != 1 or None in good or any(len(seen) != 1 for seen in owned + shared):
        return frozenset()
    if any(seen[0] in good for seen in shared):
        return frozenset()
    return frozenset(good)


def _calibrate_device(device: torch.device) -> None:
    """Calibrate ``device``'s type once, in :func:`._context.own_autograd_context`.

    The first collective under autograd calibrates, wherever it is.  Run in the caller's
    context, the calibration's graphs went through checkpoint's saved-tensor hooks (a
    first call under ``checkpoint(use_reentrant=False)`` failed: its recomputation, with
    no calibration, saved fewer tensors), and under checkpoint or autocast it came out
    empty (nothing reduced in place for the rest of the process).  In its own context the
    sets are the same whatever the first call's context (top level, a forward under hooks,
    modes or autocast, inside a backward).  Under functorch's transforms (whose state
    cannot be set aside) nothing is calibrated: that call reduces nothing in place and a
    later call calibrates."""
    if _transforming():
        return
    key = device.type
    _OWNED[key] = _OWNED_INPUTS[key] = frozenset()  # while calibrating (and if it raises)
    with _context.own_autograd_context():
        owned = _calibrate(device)
        inputs = _calibrate_inputs(device)
    _OWNED[key], _OWNED_INPUTS[key] = owned, inputs


def _signatures(table: dict[str, frozenset], t: torch.Tensor) -> frozenset:
    """``table``'s signatures (_OWNED or _OWNED_INPUTS) for ``t``'s device type, calibrating
    that device type first if it has not been (``is_cpu``: reading ``t.device`` costs more)."""
    key = "cpu" if t.is_cpu else t.device.type
    sigs = table.get(key)
    if sigs is None:  # (on CPU, no more reads of t than a later call makes)
        _calibrate_device(_CPU if key == "cpu" else t.device)
        sigs = table.get(key, _NONE)
    return sigs


_NONE: frozenset = frozenset()
_CPU = torch.device("cpu")


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _all_reduce_sum_(step: _Step, x: torch.Tensor) -> torch.Tensor:
    """``_all_reduce_sum`` in place on a gradient buffer the backward owns alone."""
    y = du.all_reduce_(x, _group(step))
    if step.scale is not None:
        y.mul_(step.scale)
    return y


# ------------------------------------------------------------------------------------
# Local effects
# ------------------------------------------------------------------------------------

def _dim(step: _Step, d: int, ndim: int) -> int:
    if not -ndim <= d < ndim:
        raise ValueError(f"{step.describe()}: dim {d} is out of range for a tensor of {ndim} dims")
    return d % ndim


def _group(step: _Step) -> du.AxisGroup:
    g = step.group
    assert g is not None, step.describe()
    return g


def _check_sizes(step: _Step, sizes: Sequence[int], n: int) -> None:
    """The checks of ``sizes=`` that read no tensor: the same verdict on every rank (each
    rank passes the same list), so ``_run`` makes them before any communication (a rank
    that raised later, at its own entry, would leave the others in the exchange)."""
    if len(sizes) != n:
        raise ValueError(f"{step.describe()}: sizes={list(sizes)} has {len(sizes)} entries, "
                         f"the axis has {n} ranks")
    if any(k < 0 for k in sizes):
        raise ValueError(f"{step.describe()}: sizes={list(sizes)} has a negative length; "
                         f"sizes= are the per-rank lengths of the shard dim, each >= 0")


def _every_rank(g: du.AxisGroup, values: list[int], device: torch.device) -> list[list[int]]:
    """Check mode: every rank's ``values`` (one small all_gather over the axis's group), by
    the rank's index on the axis."""
    with _checking.suspended():
        return du.exchange(values, g, device)


def _axis_name(g: du.AxisGroup) -> Any:
    return g.axes[0] if len(g.axes) == 1 else g.axes


# Check mode: before a collective that communicates forward (engine AGREEING_OPS, on more
# than one rank), the ranks of the axis exchange one fixed-length record of the call, the
# input's dtype and shape, and sizes= (one small all_gather of int64: the same length on
# every rank, whatever each calls), and each raises the engine's :func:`disagreement` when
# they differ: the same verdict on every rank, from the same rows, before any rank can wait
# in (or abort) the real collective.  Layout: op, src, dst, src dim, dst dim, reduce op,
# dtype, ndim, the first _RECORD_DIMS dims (-1 past ndim), a checksum of the dims past them
# (0: none), len(sizes) (-1: not given), sizes' first N entries (0 past them).
_RECORD_OPS = AGREEING_OPS + ("convert",)
_RECORD_FORMS = ("R", "I", "V", "P", "S")
_RECORD_REDUCE_OPS = ("sum", "avg", "max", "min")
_RECORD_DIMS = 8
_NO_DIM = -(1 << 40)
_RECORD_DTYPES = tuple(sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)},
                              key=str))
_DTYPE_INDEX = {d: k for k, d in enumerate(_RECORD_DTYPES)}


def _norm_dim(d: int | None, ndim: int) -> int:
    if d is None:
        return _NO_DIM
    return d % ndim if ndim and -ndim <= d < ndim else d


def _agree(g: du.AxisGroup, op: str, src: str, dst: str, src_dim: int | None,
           dst_dim: int | None, reduce_op: str, x: torch.Tensor,
           sizes: Sequence[int] | None) -> None:
    """Check mode: every rank of ``g`` makes this collective on a tensor of one dtype and shape
    (and sizes=) as the engine's :func:`free_dim` allows, else raise ValueError with the
    engine's message on every rank."""
    n = g.size
    shape = tuple(x.shape)
    ndim = len(shape)
    given = None if sizes is None else [int(k) for k in sizes]
    dims = list(shape[:_RECORD_DIMS]) + [-1] * (_RECORD_DIMS - min(ndim, _RECORD_DIMS))
    rest = 0
    if ndim > _RECORD_DIMS:  # the dims past the record's, in a checksum; a free dim there left out
        free = free_dim(op, src, dst, _norm_dim(src_dim, ndim), sizes is not None)
        past = [-1 if k == free else d for k, d in enumerate(shape) if k >= _RECORD_DIMS]
        rest = zlib.crc32(repr(past).encode())
    record = [_RECORD_OPS.index(op), _RECORD_FORMS.index(src), _RECORD_FORMS.index(dst),
              _norm_dim(src_dim, ndim), _norm_dim(dst_dim, ndim),
              _RECORD_REDUCE_OPS.index(reduce_op), _DTYPE_INDEX.get(x.dtype, -1), ndim,
              *dims, rest, -1 if given is None else len(given),
              *(given or [])[:n], *[0] * (n - min(n, len(given or [])))]
    rows = _every_rank(g, record, x.device)
    if any(row != rows[0] for row in rows):
        message = disagreement([_rank_call(row, g) for row in rows], g.ranks,
                               _axis_name(g), g.index)
        if message is not None:
            raise ValueError(message)


def _rank_call(row: list[int], g: du.AxisGroup) -> RankCall:
    """One rank's record, read back for the engine."""
    op, src, dst = _RECORD_OPS[row[0]], _RECORD_FORMS[row[1]], _RECORD_FORMS[row[2]]
    src_dim, dst_dim = (None if d == _NO_DIM else d for d in row[3:5])
    reduce_op = _RECORD_REDUCE_OPS[row[5]]
    dtype = str(_RECORD_DTYPES[row[6]]).removeprefix("torch.") if row[6] >= 0 else "?"
    ndim = row[7]
    shape = tuple(row[8:8 + min(ndim, _RECORD_DIMS)])
    at = 8 + _RECORD_DIMS
    more_dims, length = row[at], row[at + 1]
    n = g.size
    sizes = None if length < 0 else tuple(row[at + 2:at + 2 + min(length, n)])
    s = f"S({src_dim})" if src == "S" else src
    d = f"S({dst_dim})" if dst == "S" else dst
    shown_op = "" if reduce_op == "sum" else f", op={reduce_op!r}"
    call = f"{op}(x, {_axis_name(g)!r}, src={s}, dst={d}{shown_op})"
    return RankCall(call, op, src, dst, src_dim, dtype, shape, more_dims, sizes,
                    max(0, length - n))


def _agree_step(step: _Step, x: torch.Tensor, sizes: Sequence[int] | None,
                reduce_op: str = "sum") -> None:
    """:func:`_agree` for a step that communicates forward, and for a convert given sizes=
    (no comms, but the list must be the same on every rank); nothing for the others, nor on
    a one-rank axis, nor while torch.compile traces."""
    g = step.group
    if (g is None or g.size == 1 or torch.compiler.is_compiling()
            or (step.op not in AGREEING_OPS and (sizes is None or step.op != "convert"))):
        return
    _agree(g, step.op, step.src, step.dst, step.src_dim, step.dst_dim, reduce_op, x, sizes)


def _agree_plan(plan: _Plan, x: torch.Tensor, sizes: Sequence[int] | None) -> None:
    """:func:`_agree_step` for a public call's plan (its all_reduce(op="max" | "min") too)."""
    step = plan.step
    if step is not None:
        if not plan.passthrough:
            _agree_step(step, x, sizes, plan.reduce_op)
        return
    g = plan.group
    if (isinstance(plan.no_grad_op, du.dist.ReduceOp) and g is not None and g.size > 1
            and not torch.compiler.is_compiling()):
        _agree(g, "all_reduce", form(plan.src), form(plan.dst), plan.src.dim, plan.dst.dim,
               plan.reduce_op, x, sizes)


def _even(step: _Step, length: int, n: int, dim: int) -> int:
    if length % n:
        hint = ("" if step.op == "all_to_all" else
                "; pass sizes=[...] (the per-rank lengths) for uneven shards")
        raise ValueError(f"{step.describe()}: dim {dim} has size {length}, not a multiple of the "
                         f"axis size {n}{hint}")
    return length // n


def _with_dim(shape: torch.Size, i: int, size: int) -> list[int]:
    out = list(shape)
    out[i] = size
    return out


def _identity(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    if step.scale is not None:
        return x * step.scale
    return x.view_as(x)


def _scaled(impl: Impl) -> Impl:
    """``impl`` with its result multiplied by the step's scale (``_identity`` and
    ``_all_reduce_sum`` apply the scale themselves)."""
    def run(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
        return impl(step, x, sizes) * step.scale
    return run


def _all_reduce_sum(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    if g.size == 1 and step.in_backward and step.scale is None:
        return x  # a gradient on a one-rank axis (dp=1): no copy, as Megatron does
    y = du.all_reduce(x, g)
    if step.scale is not None:
        y.mul_(step.scale)
    return y


def _all_gather_stack(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    return du.all_gather(x.unsqueeze(0), g)  # [N, *x.shape]


def _all_gather_concat(step: _Step, x: torch.Tensor, sizes: tuple[int, ...] | None) -> torch.Tensor:
    g = _group(step)
    if sizes is None and step.src_dim == 0 and x.ndim:
        return du.all_gather(x, g)
    i = _dim(step, step.src_dim, x.ndim)  # type: ignore[arg-type]
    if sizes is None:
        if i == 0:
            return du.all_gather(x, g)
        stacked = du.all_gather(x.unsqueeze(0), g)  # [N, ..., s_i, ...]
        return stacked.movedim(0, i).flatten(i, i + 1)  # [..., N * s_i, ...]
    _check_sizes(step, sizes, g.size)
    if x.shape[i] != sizes[g.index]:
        raise ValueError(f"{step.describe()}: sizes[{g.index}] is {sizes[g.index]} but this "
                         f"rank's shard has {x.shape[i]} on dim {i}")
    longest = max(sizes)
    padded = x.new_zeros([1] + _with_dim(x.shape, i, longest))
    padded[0].narrow(i, 0, x.shape[i]).copy_(x)
    stacked = du.all_gather(padded, g)
    return torch.cat([stacked[k].narrow(i, 0, sizes[k]) for k in range(g.size)], dim=i)


def _reduce_scatter_unbind(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    if x.ndim == 0 or x.shape[0] != g.size:
        raise ValueError(f"{step.describe()} unbinds dim 0, which must have the axis size "
                         f"{g.size}; x has shape {tuple(x.shape)}")
    return du.reduce_scatter(x, g)[0]


def _reduce_scatter_chunk(step: _Step, x: torch.Tensor, sizes: tuple[int, ...] | None) -> torch.Tensor:
    g = step.group
    if sizes is None and step.dst_dim == 0 and g is not None and x.ndim and not x.shape[0] % g.size:
        return du.reduce_scatter(x, g)  # the common case, without the checks' calls
    g = _group(step)
    n = g.size
    i = _dim(step, step.dst_dim, x.ndim)  # type: ignore[arg-type]
    if sizes is None:
        c = _even(step, x.shape[i], n, i)
        if i == 0:
            return du.reduce_scatter(x, g)
        return du.reduce_scatter(x.unflatten(i, (n, c)).movedim(i, 0), g)[0]
    _check_sizes(step, sizes, n)
    if sum(sizes) != x.shape[i]:
        raise ValueError(f"{step.describe()}: sizes={list(sizes)} sum to {sum(sizes)}, dim {i} "
                         f"has {x.shape[i]}")
    longest = max(sizes)
    stacked = x.new_zeros([n] + _with_dim(x.shape, i, longest))
    for k, piece in enumerate(x.split(list(sizes), dim=i)):
        stacked[k].narrow(i, 0, sizes[k]).copy_(piece)
    mine = du.reduce_scatter(stacked, g)[0]
    return mine.narrow(i, 0, sizes[g.index]).contiguous()


def _all_to_all(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    n = g.size
    if step.src != "S" and step.dst != "S" and x.ndim and not x.shape[0] % n:
        return du.all_to_all(x, g)  # V -> V, the common case, without the checks' calls
    if x.ndim == 0:
        raise ValueError(f"{step.describe()} needs a tensor with at least one dim")
    split = _dim(step, step.dst_dim, x.ndim) if step.dst == "S" else 0  # type: ignore[arg-type]
    concat = _dim(step, step.src_dim, x.ndim) if step.src == "S" else 0  # type: ignore[arg-type]
    c = _even(step, x.shape[split], n, split)
    if split == 0:
        received = du.all_to_all(x, g)  # [N * c, ...]: block k from rank k
        if concat == 0:
            return received
        received = received.unflatten(0, (n, c))
    else:
        received = du.all_to_all(x.unflatten(split, (n, c)).movedim(split, 0), g)
    return received.movedim(0, concat).flatten(concat, concat + 1)


def _take_slot(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    if x.ndim == 0 or x.shape[0] != g.size:
        raise ValueError(f"{step.describe()} keeps this rank's slot of dim 0, which must have the "
                         f"axis size {g.size}; x has shape {tuple(x.shape)}")
    return x[g.index].clone(memory_format=torch.contiguous_format)


def _take_chunk(step: _Step, x: torch.Tensor, sizes: tuple[int, ...] | None) -> torch.Tensor:
    g = _group(step)
    i = _dim(step, step.dst_dim, x.ndim)  # type: ignore[arg-type]
    if sizes is None:
        length = _even(step, x.shape[i], g.size, i)
        start = g.index * length
    else:
        _check_sizes(step, sizes, g.size)
        if sum(sizes) != x.shape[i]:
            raise ValueError(f"{step.describe()}: sizes={list(sizes)} sum to {sum(sizes)}, dim {i} "
                             f"has {x.shape[i]}")
        start, length = sum(sizes[: g.index]), sizes[g.index]
    return x.narrow(i, start, length).clone(memory_format=torch.contiguous_format)


def _keep_on_first(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    if _group(step).index == 0:
        return x.clone()
    return torch.zeros_like(x)


def _pad_slot(step: _Step, x: torch.Tensor, sizes: Any) -> torch.Tensor:
    g = _group(step)
    y = x.new_zeros((g.size,) + tuple(x.shape))
    y[g.index] = x
    return y


def _pad_chunk(step: _Step, x: torch.Tensor, sizes: tuple[int, ...] | None) -> torch.Tensor:
    g = _group(step)
    i = _dim(step, step.src_dim, x.ndim)  # type: ignore[arg-type]
    length = x.shape[i]
    if sizes is None:
        full, start = g.size * length, g.index * length
    else:
        _check_sizes(step, sizes, g.size)
        if sizes[g.index] != length:
            raise ValueError(f"{step.describe()}: sizes[{g.index}] is {sizes[g.index]} but this "
                             f"rank's shard has {length} on dim {i}")
        full, start = sum(sizes), sum(sizes[: g.index])
    y = x.new_zeros(_with_dim(x.shape, i, full))
    y.narrow(i, start, length).copy_(x)
    return y


_IMPLS: dict[tuple[str, str, str], Impl] = {
    ("all_reduce", "P", "R"): _all_reduce_sum,
    ("all_reduce", "P", "I"): _all_reduce_sum,
    ("all_gather", "V", "R"): _all_gather_stack,
    ("all_gather", "V", "I"): _all_gather_stack,
    ("all_gather", "S", "R"): _all_gather_concat,
    ("all_gather", "S", "I"): _all_gather_concat,
    ("reduce_scatter", "P", "V"): _reduce_scatter_unbind,
    ("reduce_scatter", "P", "S"): _reduce_scatter_chunk,
    ("all_to_all", "V", "V"): _all_to_all,
    ("all_to_all", "V", "S"): _all_to_all,
    ("all_to_all", "S", "V"): _all_to_all,
    ("all_to_all", "S", "S"): _all_to_all,
    ("convert", "R", "V"): _take_slot,
    ("convert", "I", "V"): _take_slot,
    ("convert", "R", "S"): _take_chunk,
    ("convert", "I", "S"): _take_chunk,
    ("convert", "R", "P"): _keep_on_first,
    ("convert", "I", "P"): _keep_on_first,
    ("convert", "V", "P"): _pad_slot,
    ("convert", "S", "P"): _pad_chunk,
}
for _key in TRANSITIONS:
    if _key[0] == "reinterpret" or (_key[0] == "convert" and TRANSITIONS[_key].alias_of):
        _IMPLS[(TRANSITIONS[_key].forward.op, _key[1], _key[2])] = _identity
        _IMPLS[_key] = _identity
_NEEDS_DIM_0 = frozenset({_reduce_scatter_unbind, _all_to_all, _take_slot})
_missing = [k for k in TRANSITIONS if (TRANSITIONS[k].forward.op, k[1], k[2]) not in _IMPLS]
assert not _missing, f"transitions without a local effect: {_missing}"


# ------------------------------------------------------------------------------------
# Plans: one validated public call (op, axis, src, dst, ...), cached per mesh
# ------------------------------------------------------------------------------------

_KEEP_LOCAL = "keep-local"  # a _Plan's no_grad_op: the local data as it is (reinterpret(P,V))


class _Plan:
    __slots__ = ("op", "axes", "src", "dst", "expert_mode", "reduce_op", "step", "group",
                 "no_grad_op", "uses_sizes", "passthrough", "in_place", "owned_keeps", "direct",
                 "traced")

    def __init__(self, op: str, axes: tuple[str, ...], src: LocalType, dst: LocalType,
                 expert_mode: bool, reduce_op: str, step: _Step | None, group: du.AxisGroup,
                 no_grad_op: Any = None, in_place: Any = None) -> None:
        self.op, self.axes, self.src, self.dst = op, axes, src, dst
        self.expert_mode, self.reduce_op = expert_mode, reduce_op
        self.step, self.group, self.no_grad_op = step, group, no_grad_op
        # sizes= only means something to the ops that cut or join an S(i) dim
        self.uses_sizes = (step is not None and step.op != "all_to_all"
                           and "S" in (step.src, step.dst))
        self.passthrough = step is not None and _keeps_local_data(step)
        # A forward all-reduce: the same step reducing in place, for an input nobody but
        # the call holds (under autograd: _run proves it); ``owned_keeps``: on one rank
        # without a scale that input itself is the result (the data is kept, forward and
        # backward: nothing to record either).
        self.in_place = in_place
        self.traced = False  # made for torch.compile's tracing (see _traced_plan_name)
        self.owned_keeps = (in_place is not None and step is not None and step.scale is None
                            and group is not None and group.size == 1
                            and all(b.scale is None and b.impl in (_identity, _all_reduce_sum)
                                    for b in step.backward_steps()))
        # A group of several ranks numbered in logical order: all_to_all(V,V),
        # all_gather(S(0),R|I), reduce_scatter(P,S(0)) and all_reduce(P,R|I) over it are one
        # torch.distributed call on the input as is, which those ops issue themselves when
        # no autograd graph and no check mode are involved (see _FAST_PATHS)
        self.direct = (group if group is not None and group.size > 1
                       and group.logical is None and group.physical is None else None)


def _keeps_local_data(step: _Step) -> bool:
    """The step and its backward both keep the local data as is (reinterpret(V,P) and
    (R,V) everywhere, reinterpret(I,R) and (I,V) on a one-rank axis, ...): the view
    autograd records for ``x.view_as(x)`` is then the whole op, forward, backward and
    every higher derivative, with no Function to run."""
    if step.impl is not _identity or step.scale is not None:
        return False
    return all(b.scale is None and (b.impl is _identity or (
        b.impl is _all_reduce_sum and b.group is not None and b.group.size == 1))
        for b in step.backward_steps())


def _axes_for_message(axis: Any) -> tuple[str, ...]:
    if isinstance(axis, str):
        return (axis,)
    if isinstance(axis, tuple) and axis and all(isinstance(a, str) for a in axis):
        return axis
    return (f"<{type(axis).__name__}>",)


def _local(value: Any, what: str) -> LocalType | None:
    if value is None:
        return None
    try:
        return local_type_of(value)
    except TypeError:
        raise TypeError(f"{what}= takes one of R, I, V, P, S(i) (from spmd), not {value!r}") from None


def _make_plan(op: str, axis: Any, src: Any, dst: Any, expert_mode: bool, reduce_op: str) -> _Plan:
    src_lt, dst_lt = _local(src, "src"), _local(dst, "dst")
    result = check_collective(op, UNTYPED, _axes_for_message(axis), src_lt, dst_lt,
                              expert_mode=expert_mode, reduce_op=reduce_op, can_grad=False)
    if result.errors:
        raise SpmdCollectiveError(result.errors[0])
    assert src_lt is not None and dst_lt is not None
    group = _mesh.resolve_axis(axis)
    if op == "all_reduce" and reduce_op in ("max", "min"):
        return _Plan(op, group.axes, src_lt, dst_lt, expert_mode, reduce_op, None, group,
                     du.MAX if reduce_op == "max" else du.MIN)
    if (op, form(src_lt), form(dst_lt)) in NO_GRAD_TRANSITIONS:
        # reinterpret(P,V): the local data as it is, no gradient (checked in _run)
        return _Plan(op, group.axes, src_lt, dst_lt, expert_mode, reduce_op, None, group,
                     _KEEP_LOCAL)
    if op == "redistribute":
        routed = route(src_lt, dst_lt)
        if routed is not None and routed[0] == "all_to_all" and {src_lt.dim, dst_lt.dim} == {None, 0}:
            routed = None  # V and S(0) both concatenate on dim 0: nothing to move
        transition = TRANSITIONS[routed] if routed is not None else None
    else:
        transition = result.transition
    step = None
    if transition is not None:
        scale = 1.0 / group.size if reduce_op == "avg" else None
        step = _Step(transition, src_lt.dim, dst_lt.dim, group, scale)
        if step.impl is _all_reduce_sum:
            in_place = _Step(transition, src_lt.dim, dst_lt.dim, group, scale)
            in_place.dirties = True
            return _Plan(op, group.axes, src_lt, dst_lt, expert_mode, reduce_op, step, group,
                         in_place=in_place)
    return _Plan(op, group.axes, src_lt, dst_lt, expert_mode, reduce_op, step, group)


# torch.compile: Dynamo cannot hash the markers (their hash is C-level, for the eager
# lookup's speed) nor trace the plan's making (the rule engine).  So, while it traces,
# the plan is made eagerly (assume_constant_result: run at trace time on plain keys),
# stored as an attribute of _TRACED_PLANS, and its attribute name is the constant the
# traced code reads it by (Dynamo reads an object's attributes at trace time, and traces
# the plan's steps like any Python object).  The traced code reads the current mesh's
# serial number, so Dynamo guards on it: under another mesh the function is traced again.


class _TracedPlans:
    """Plans made for torch.compile's tracing, one attribute each."""

    names: dict[Any, str] = {}


_TRACED_PLANS = _TracedPlans()


def _assume_constant_result(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compiler.assume_constant_result`` without its ``import torch._dynamo``: that
    import is most of ``import spmd`` (~0.8 s of ~1.6 s on every rank at startup), and the
    decorator only marks the function, which Dynamo reads when it traces a call (torch
    marks its own ``justknobs_check`` the same way, in torch/_dynamo/decorators.py).
    tests/runtime/test_local.py checks the mark equals the decorator's."""
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


def _plain(t: Any) -> Any:
    if isinstance(t, _Marker):
        return t.kind.value
    if isinstance(t, S):
        return ("S", t.dim)
    return t


def _unplain(t: Any) -> Any:
    if isinstance(t, str) and t in _MARKERS:
        return _MARKERS[t]
    if isinstance(t, tuple) and len(t) == 2 and t[0] == "S":
        return S(t[1])
    return t


@_assume_constant_result
def _traced_plan_name(serial: int, op: str, axis: Any, src: Any, dst: Any, expert_mode: bool,
                      reduce_op: str) -> str:
    key = (serial, op, axis, src, dst, expert_mode, reduce_op)
    name = _TracedPlans.names.get(key)
    if name is None:
        plan = _make_plan(op, axis, _unplain(src), _unplain(dst), expert_mode, reduce_op)
        plan.traced, plan.in_place, plan.owned_keeps = True, None, False
        _mark_traced(plan.step)
        name = _TracedPlans.names[key] = f"plan{len(_TracedPlans.names)}"
        setattr(_TRACED_PLANS, name, plan)
    return name


def _mark_traced(step: _Step | None, depth: int = 3) -> None:
    """``step`` and its backward steps (and theirs: double backward) marked traced, made
    now (eager mode makes them lazily: a side effect Dynamo cannot trace)."""
    if step is None or depth == 0:
        return
    step.traced = True
    step.reduces_in_backward()
    for b in step.backward_steps():
        _mark_traced(b, depth - 1)


def _compiled_plan(op: str, axis: Any, src: Any, dst: Any, expert_mode: bool,
                   reduce_op: str) -> _Plan:
    binding = _mesh._current
    serial = binding.serial if binding is not None else 0
    name = _traced_plan_name(serial, op, axis, _plain(src), _plain(dst), expert_mode, reduce_op)
    return getattr(_TRACED_PLANS, name)


def _plan(op: str, axis: Any, src: Any, dst: Any, expert_mode: bool = False,
          reduce_op: str = "sum", x: Any = None) -> _Plan:
    if type(axis) is list:
        axis = tuple(axis)
    if _compiling():  # traced by torch.compile
        return _compiled_plan(op, axis, src, dst, expert_mode, reduce_op)
    binding = _mesh._current
    cache = binding.plans if binding is not None else _mesh._bare_plans
    key = (op, axis, src, dst, expert_mode, reduce_op)
    try:
        plan = cache.get(key)
    except TypeError:  # an unhashable src/dst/axis: no caching, the checks say what is wrong
        return _checked_plan(op, axis, src, dst, expert_mode, reduce_op, x)
    if plan is None:
        plan = cache[key] = _checked_plan(op, axis, src, dst, expert_mode, reduce_op, x)
        if plan.direct is not None:
            _mesh.direct_groups[axis] = plan.direct
    return plan


def _checked_plan(op: str, axis: Any, src: Any, dst: Any, expert_mode: bool, reduce_op: str,
                  x: Any) -> _Plan:
    """:func:`_make_plan`; in check mode, a src/dst the table rejects whose src is not the
    input's tracked type raises the src mismatch (its fix starts from the real type), as
    the static checker reports it, in place of the pair's error."""
    try:
        return _make_plan(op, axis, src, dst, expert_mode, reduce_op)
    except SpmdCollectiveError:
        if _checking.ACTIVE and x is not None:
            error = _checking.src_mismatch(op, x, axis, src, dst, expert_mode, reduce_op)
            if error is not None:
                raise SpmdCollectiveError(error) from None
        raise


def _run(plan: _Plan, x: torch.Tensor, sizes: Sequence[int] | None) -> torch.Tensor:
    if _checking.ACTIVE:  # a src the input is not: the type error, before any shape error
        _checking.before_collective(plan.op, x, plan.axes, plan.src, plan.dst, plan.expert_mode,
                                    plan.reduce_op)
        _agree_plan(plan, x, sizes)  # the ranks' dtypes, shapes, sizes=: before any comms
    if plan.reduce_op == "avg" and not (x.is_floating_point() or x.is_complex()):
        # torch would divide in float and fail to write it back (all_reduce) or return float32
        # (reduce_scatter, whose dtype is the input's: SPEC section 7); the same verdict on
        # every rank, before any communication
        axes = (f'"{plan.axes[0]}"' if len(plan.axes) == 1
                else "(" + ", ".join(f'"{a}"' for a in plan.axes) + ")")
        n = f" ({plan.group.size})" if plan.group is not None else ""
        rest = f"{axes}, src={plan.src}, dst={plan.dst}, op=\"avg\")"
        raise TypeError(f'{plan.op}(x, {rest} takes a floating or complex tensor, not {x.dtype} '
                        f'(a count?): the average of integer or bool values is not of their '
                        f'dtype; use op="sum" and divide the sum by the number of ranks on '
                        f'{axes}{n} in a floating dtype (or floor-divide it), or average a '
                        f'floating copy: {plan.op}(x.float(), {rest}')
    if sizes is not None:
        if not plan.uses_sizes:
            raise ValueError(f"{plan.op}(src={plan.src}, dst={plan.dst}) takes no sizes= (the "
                             f"per-rank lengths of an uneven S(i) shard that is gathered, "
                             f"scattered, cut or padded): it has no shard")
        sizes = tuple(int(s) for s in sizes)
        if plan.step is not None and plan.step.group is not None:
            _check_sizes(plan.step, sizes, plan.step.group.size)  # before any communication
    if plan.no_grad_op is not None:
        if x.requires_grad and torch.is_grad_enabled():
            errors = check_collective(plan.op, UNTYPED, plan.axes or ("<group>",), plan.src,
                                      plan.dst, reduce_op=plan.reduce_op, can_grad=True).errors
            raise SpmdCollectiveError(errors[0])
        if plan.no_grad_op is _KEEP_LOCAL:
            return x.view_as(x)  # a new tensor object: check mode stamps its type on it
        if _transforming():
            return _FuncReduce.apply(x, plan.group, plan.no_grad_op)
        return du.all_reduce(x, plan.group, plan.no_grad_op)
    step = plan.step
    if step is None:  # redistribute to the same type
        return x
    if plan.passthrough:
        return x.view_as(x)
    if x.requires_grad and torch.is_grad_enabled():
        if plan.traced:  # traced by torch.compile: the plain Function, never in place
            return _Collective.apply(x, step, sizes)
        if _transforming():  # torch.func: its Function, never in place
            return _FuncCollective.apply(x, step, sizes)
        in_place = plan.in_place
        if in_place is not None:
            # The forward all-reduce in place, as Megatron's, when nothing but this call
            # holds the input: its signature, taken here, is one _calibrate_inputs saw
            # only for such inputs (calibrated through _probe_op: the same frames).
            sig = _input_signature(x)
            if in_place is _RECORD:  # the calibration itself
                _PROBE_SEEN.append(sig)
                return x.detach().clone()
            if sig in _signatures(_OWNED_INPUTS, x):  # calibrates here, not inside a backward
                return x if plan.owned_keeps else _C_APPLY(_unwrap_if_dead(x), in_place, sizes)
        else:
            _signatures(_OWNED, x)  # calibrates here, not inside a backward
        return _C_APPLY(_unwrap_if_dead(x), step, sizes)
    if _transforming():
        # torch.func: a tensor vmap batches says requires_grad=False even when a grad
        # transform outside the vmap tracks it (grad(vmap(f))); the Function gives it
        # the table's backward (not the derivative of the local effect) and batches it
        return _FuncCollective.apply(x, step, sizes)
    return step.impl(step, x, sizes)


# The calibration's op (_probe_op): an all_reduce(P,R) whose _run records its input's
# signature where it takes it and returns a copy (no group, no communication).
_PROBE_SEEN: list = []
_RECORD = object()  # the probe plan's in_place: record the signature
_PROBE_PLAN = _Plan("all_reduce", (), PARTIAL, REPLICATE, False, "sum",
                    _Step(TRANSITIONS[("all_reduce", "P", "R")], None, None, None),
                    None, in_place=_RECORD)  # type: ignore[arg-type]


def _finish(plan: _Plan, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    result = _checking.on_collective(plan.op, x, plan.axes, plan.src, plan.dst, out,
                                     expert_mode=plan.expert_mode, reduce_op=plan.reduce_op)
    return out if result is None else result


# ------------------------------------------------------------------------------------
# The public ops
# ------------------------------------------------------------------------------------

# _FAST_PATHS: all_reduce(P,R|I), all_gather(S(0),R|I), reduce_scatter(P,S(0)) and
# all_to_all(V,V) on an input that needs no autograd graph, outside check mode, over a
# direct group (_Plan.direct: several ranks in logical order, found by the axis alone in
# _mesh.direct_groups, which _plan fills) issue the torch.distributed call themselves,
# without _plan, _run, the step's impl and their checks.  On gloo every Python step
# costs microseconds, the caches cold after the exchange (a dict lookup ~0.5 us hot, ~7 us
# after a 16 MB flush): all_gather(S(0),R) at 1 MB took ~20 us more of the calling
# thread than the raw call, ~15 us with this path (A/B on 2 gloo ranks, -5.6 us);
# reduce_scatter at 1 KB -8 us.  Markers and S(0) compared by identity (S(0) is one
# object): nothing to hash but the axis.  torch.compile traces this path too, so it has
# no torch.compiler.is_compiling() call (2-4 us at 1 MB, A/B); a traced _plan fills
# nothing.  The call itself is _dist_utils' direct form (the ProcessGroup's own call, without
# torch.distributed's Python wrapper; Dynamo traces its torch.distributed twin, named by
# _torchdynamo_inline): all_to_all(V,V) at 1 MB took 4.0-5.4 us more of the calling thread
# than the raw call before, 0.9-1.8 us less with it (bench/runtime_overhead.py --only
# all_to_all, --scale 4 and 16, 6 alternating A/B pairs on 2 gloo ranks, load 2.5-9; the
# fake backend: +0.9 -> -0.5 us); at --scale 4, 2 pairs, load 5-9: all_reduce +4.9/+6.5 ->
# -2.4/-3.8 us, reduce_scatter +10.7/+14.4 -> +2.6/+0.4, all_gather +9.8/+18.3 -> +8.7/+5.9.
_S0 = S(0)

def all_reduce(x: torch.Tensor, axis: Any, *, src: Any = P, dst: Any = None,
               op: str = "sum") -> torch.Tensor:
    """Sum a pending sum: ``P -> R`` or ``P -> I``.  Three ranks::

        +A
        +B  =>  A + B + C
        +C

    Spec: ``all_reduce_spec(x) = x`` (a P input arrives already summed).

    The result is a new tensor and ``x`` keeps its value.  Under autograd, when nothing
    but this call holds ``x`` (a temporary passed straight in, ``all_reduce(linear(...),
    ...)``, that autograd did not save and that is not a view), the sum is taken in
    ``x``'s buffer, as Megatron's forward all-reduce does: nobody can tell the difference
    but the copy saved.  A name bound to ``x`` (``y = ...; y = all_reduce(y, ...)``) holds
    it until the call returns, so that form copies.

    ``op="avg"``: the sum divided by the axis size; the backward is scaled the same way.
    ``op="max"`` / ``"min"``: the elementwise max/min of the ranks' values, ``src=V``
    (or S(i); P is refused) -> R | I; it has no gradient, so ``x`` must not require grad under grad
    mode (call it on ``x.detach()`` or under ``torch.no_grad()``).

    Backward (the table): ``all_reduce(P,R)`` <- ``all_reduce(P,R)``: the R output's
    gradient is P, summed::

        A + B + C  <=  +A
                       +B
                       +C

    ``all_reduce(P,I)`` <- ``reinterpret(I,R)``: the I gradient is every rank's gradient
    of the pending sum as is.
    """
    if (src is P and (dst is R or dst is I) and op == "sum" and not _checking.ACTIVE
            and not (x.requires_grad and torch.is_grad_enabled())
            and not _transforming()):
        try:  # the fast path (see _FAST_PATHS)
            g = _mesh.direct_groups.get(axis)
        except TypeError:  # an unhashable axis (a list): the general path
            g = None
        if g is not None:
            return du.all_reduce(x, g)
    plan = _plan("all_reduce", axis, src, dst, False, op, x)
    out = _run(plan, x, None)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def all_gather(x: torch.Tensor, axis: Any, *, src: Any = None, dst: Any = None,
               sizes: Sequence[int] | None = None) -> torch.Tensor:
    """Gather the ranks' values: ``V -> R | I`` stacks, ``S(i) -> R | I`` concatenates.

    ``src=V``: stack on a new dim 0 of the axis size (``out[k]`` is rank ``k``'s x)::

        [A]
        [B]  =>  [[A], [B], [C]]
        [C]

    ``src=S(i)``: concatenate on dim ``i`` (``i`` may be negative)::

        [A]
        [B]  =>  [A, B, C]
        [C]

    Uneven shards: ``sizes=[...]`` the length of dim ``i`` on each rank of the axis (the same
    list on every rank; the check mode verifies it).

    Backward: ``dst=R`` (gradient P) -> ``reduce_scatter(P,V)`` / ``reduce_scatter(P,S(i))``
    (sum, then each rank keeps its slot/chunk); ``dst=I`` (gradient I) ->
    ``convert(I,V)`` / ``convert(I,S(i))`` (each rank keeps its slot/chunk, no comms).
    """
    if (src is _S0 and (dst is R or dst is I) and sizes is None and not _checking.ACTIVE
            and not (x.requires_grad and torch.is_grad_enabled())
            and not _transforming()):
        try:  # the fast path (see _FAST_PATHS)
            g = _mesh.direct_groups.get(axis)
        except TypeError:  # an unhashable axis (a list): the general path
            g = None
        if g is not None and x.ndim:
            return du.all_gather(x, g)
    plan = _plan("all_gather", axis, src, dst, x=x)
    out = _run(plan, x, sizes)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def reduce_scatter(x: torch.Tensor, axis: Any, *, src: Any = P, dst: Any = None,
                   sizes: Sequence[int] | None = None, op: str = "sum") -> torch.Tensor:
    """Sum a pending sum and keep this rank's part: ``P -> V`` or ``P -> S(i)``.

    ``dst=V``: dim 0 has the axis size and rank ``k`` keeps slot ``k`` (unbind dim 0).
    ``dst=S(i)``: rank ``k`` keeps chunk ``k`` of dim ``i``; three ranks::

        +[A0, A1, A2]       [A0 + B0 + C0]
        +[B0, B1, B2]  =>   [A1 + B1 + C1]
        +[C0, C1, C2]       [A2 + B2 + C2]

    Uneven chunks: ``sizes=[...]``, the length of dim ``i`` each rank keeps (the same list on
    every rank; the check mode verifies it).

    ``op="avg"``: the sum divided by the axis size (data-parallel gradient averaging); the
    backward is scaled the same way.

    Backward: ``all_gather(V,R)`` / ``all_gather(S(i),R)`` (the gradient is V/S(i) in,
    R out: the gradient of a pending sum is the same on every rank).
    """
    if (src is P and dst is _S0 and op == "sum" and sizes is None and not _checking.ACTIVE
            and not (x.requires_grad and torch.is_grad_enabled())
            and not _transforming()):
        try:  # the fast path (see _FAST_PATHS)
            g = _mesh.direct_groups.get(axis)
        except TypeError:  # an unhashable axis (a list): the general path
            g = None
        if g is not None and x.ndim and not x.shape[0] % g.size:
            return du.reduce_scatter(x, g)
    plan = _plan("reduce_scatter", axis, src, dst, False, op, x)
    out = _run(plan, x, sizes)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def all_to_all(x: torch.Tensor, axis: Any, *, src: Any = None, dst: Any = None,
               sizes: Sequence[int] | None = None,
               out_sizes: Sequence[int] | None = None) -> torch.Tensor:
    """Transpose the mesh axis with a tensor dim: ``V | S(i) -> V | S(j)``.

    Exactly: the input is split into N equal blocks along the *split dim* (``j`` for
    ``dst=S(j)``, 0 for ``dst=V``), block ``k`` is sent to rank ``k``, and the N blocks
    received are concatenated in rank order along the *concat dim* (``i`` for
    ``src=S(i)``, 0 for ``src=V``).  The number of dims never changes::

        spec(xs)[r] = cat([xs[k].chunk(N, split)[r] for k in range(N)], concat)

    - ``S(i) -> S(j)``, ``i != j``: keeps the global tensor (concatenation of the
      locals on ``i`` before, on ``j`` after); ``V -> S(j)`` and ``S(i) -> V`` are the
      same with V meaning dim 0.
    - ``V -> V``: the block exchange on dim 0 (Megatron's ``all_to_all``, MoE token
      dispatch).  When dim 0 has the axis size it is V's stacking semantics: rank ``r``
      gets ``stack([xs[k][r] for k])``, the mesh axis transposed with dim 0::

            [A0, A1, A2]      [A0, B0, C0]
            [B0, B1, B2]  =>  [A1, B1, C1]
            [C0, C1, C2]      [A2, B2, C2]

      ``S(i) -> S(i)`` is the same block exchange on dim ``i``.

    Uneven blocks (``V -> V`` only: dropless MoE dispatch): ``sizes[k]`` rows of dim 0 go to
    rank ``k``, in order, and ``out_sizes[k]`` rows come from rank ``k`` (torch's
    ``input_split_sizes`` / ``output_split_sizes``).  Without ``out_sizes`` the ranks first
    exchange their ``sizes`` (one small all_to_all)::

        rank 0: [a0 a0 | a1]   sizes=[2, 1]       [a0 a0 | b0]
        rank 1: [b0 | b1 b1]   sizes=[1, 2]   =>  [a1 | b1 b1]

    Backward: the all_to_all with src and dst (so split and concat dims) swapped, its
    inverse (uneven: ``sizes`` and ``out_sizes`` swapped).
    """
    if sizes is not None or out_sizes is not None:
        return _all_to_all_uneven(x, axis, src, dst, sizes, out_sizes)
    if (src is V and dst is V and not _checking.ACTIVE
            and not (x.requires_grad and torch.is_grad_enabled())
            and not _transforming()):
        try:  # the fast path (see _FAST_PATHS)
            g = _mesh.direct_groups.get(axis)
        except TypeError:  # an unhashable axis (a list): the general path
            g = None
        if g is not None:
            shape = x.shape
            if shape and not shape[0] % g.size and x.dtype in du.WIRE_DTYPES:
                send = du.send_buffer(x)
                out = torch.empty_like(send)
                du.all_to_all_single(out, send, g.pg)
                return out
    plan = _plan("all_to_all", axis, src, dst, x=x)
    out = _run(plan, x, None)
    return _finish(plan, x, out) if _checking.ACTIVE else out


class _UnevenAllToAll(torch.autograd.Function):
    """all_to_all(V,V) with per-rank block sizes; its backward is itself with the sizes
    swapped (so double backward is the forward again)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: du.AxisGroup, sizes: tuple[int, ...],
                out_sizes: tuple[int, ...]) -> torch.Tensor:
        ctx.group, ctx.sizes, ctx.out_sizes = group, sizes, out_sizes
        return du.all_to_all_uneven(x, group, sizes, out_sizes)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if _legacy_batched_grad(grad):  # autograd.grad(..., is_grads_batched=True)
            return _legacy_batched(grad, lambda g: _UnevenAllToAll.apply(
                g, ctx.group, ctx.out_sizes, ctx.sizes)), None, None, None
        return _UnevenAllToAll.apply(grad, ctx.group, ctx.out_sizes, ctx.sizes), None, None, None


class _FuncUnevenAllToAll(torch.autograd.Function):
    """:class:`_UnevenAllToAll` in torch.func's form.  vmap: the batch dim moved last, the
    rows of dim 0 split and joined as for one example (every rank the same batch size)."""

    @staticmethod
    def forward(x: torch.Tensor, group: du.AxisGroup, sizes: tuple[int, ...],
                out_sizes: tuple[int, ...]) -> torch.Tensor:
        return du.all_to_all_uneven(x, group, sizes, out_sizes)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.group, ctx.sizes, ctx.out_sizes = inputs[1], inputs[2], inputs[3]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return (_FuncUnevenAllToAll.apply(grad, ctx.group, ctx.out_sizes, ctx.sizes),
                None, None, None)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, *_: Any) -> torch.Tensor:
        return _FuncUnevenAllToAll.apply(tangent, ctx.group, ctx.sizes, ctx.out_sizes)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, group: du.AxisGroup,
             sizes: tuple[int, ...], out_sizes: tuple[int, ...]) -> tuple[torch.Tensor, int | None]:
        bdim = in_dims[0]
        if bdim is None:
            return _FuncUnevenAllToAll.apply(x, group, sizes, out_sizes), None
        if x.ndim == 1:
            raise ValueError("all_to_all(..., sizes=) needs a tensor with at least one dim "
                             "(under torch.func.vmap: each example)")
        out = _FuncUnevenAllToAll.apply(x.movedim(bdim, -1), group, sizes, out_sizes)
        return out, out.ndim - 1


def _checked_out_sizes(g: du.AxisGroup, sizes: tuple[int, ...], out_sizes: tuple[int, ...] | None,
                       device: torch.device) -> tuple[int, ...]:
    """Check mode: ``out_sizes[k]`` on each rank that gives it is what rank ``k`` sends it,
    rank ``k``'s ``sizes[that rank]`` (one small all_gather of every rank's two lists, the same
    collective on every rank, so that every rank reaches the same verdict and raises, none left
    waiting; a rank without ``out_sizes=`` takes its counts from it).  A count that differs
    (``out_sizes=sizes`` where routing is uneven) makes the ranks disagree on the message
    sizes: gloo aborts the process ("Received data size doesn't match"), NCCL corrupts or
    hangs.  Returns this rank's out_sizes."""
    n = g.size
    rows = _every_rank(g, list(sizes) + (list(out_sizes) if out_sizes is not None else [-1] * n),
                       device)
    for r in range(n):
        if rows[r][n] < 0:
            continue  # no out_sizes= there: the counts are taken from the exchange
        for k in range(n):
            sent, expected = int(rows[k][r]), int(rows[r][n + k])
            if sent != expected:
                raise ValueError(
                    f"all_to_all(..., sizes=, out_sizes=) on axis {_axis_name(g)!r}: the rank of index "
                    f"{r} passed out_sizes[{k}]={expected}, but the rank of index {k} sends it "
                    f"{sent} rows (its sizes[{r}]); out_sizes[k] is what rank k sends to this "
                    f"rank (on index {r}: out_sizes={[int(rows[q][r]) for q in range(n)]}), or "
                    f"leave out_sizes out and the ranks exchange the counts")
    return tuple(int(rows[k][g.index]) for k in range(n))


def _all_to_all_uneven(x: torch.Tensor, axis: Any, src: Any, dst: Any,
                       sizes: Sequence[int] | None, out_sizes: Sequence[int] | None) -> torch.Tensor:
    plan = _plan("all_to_all", axis, src, dst, x=x)  # checks src/dst against the table
    step = plan.step
    if _checking.ACTIVE:  # a src the input is not: the type error, before the sizes' errors
        _checking.before_collective(plan.op, x, plan.axes, plan.src, plan.dst)
        if step is not None and step.src == "V" and step.dst == "V":  # (else the error below)
            _agree_step(step, x, sizes)  # dtypes, shapes but dim 0, sizes= given: before comms
    if step is None or step.src != "V" or step.dst != "V":
        raise ValueError(f"all_to_all(src={plan.src}, dst={plan.dst}) takes no sizes=: uneven "
                         f"blocks are for src=V, dst=V (dim 0 split by sizes=, joined by "
                         f"out_sizes=)")
    g = _group(step)
    n = g.size
    if sizes is None:
        raise ValueError("all_to_all(..., out_sizes=...) needs sizes= too: the rows of dim 0 "
                         "this rank sends to each rank")
    sizes = tuple(int(k) for k in sizes)
    if len(sizes) != n or any(k < 0 for k in sizes):
        raise ValueError(f"all_to_all sizes={list(sizes)}: one row count >= 0 per rank of the "
                         f"axis ({n} ranks)")
    if x.ndim == 0 or sum(sizes) != x.shape[0]:
        raise ValueError(f"all_to_all sizes={list(sizes)} sum to {sum(sizes)}, x has "
                         f"{x.shape[0] if x.ndim else 'no'} rows (dim 0)")
    if out_sizes is not None:
        out_sizes = tuple(int(k) for k in out_sizes)
        if len(out_sizes) != n or any(k < 0 for k in out_sizes):
            raise ValueError(f"all_to_all out_sizes={list(out_sizes)}: one row count >= 0 per "
                             f"rank of the axis ({n} ranks)")
    if _checking.ACTIVE and n > 1 and not torch.compiler.is_compiling():
        # one exchange on every rank, given out_sizes= or not (a rank without it takes its
        # counts from it; different collectives on different ranks would hang)
        out_sizes = _checked_out_sizes(g, sizes, out_sizes, x.device)
    elif out_sizes is None:  # what every rank sends here: one small exchange of the counts
        counts = du.all_to_all(torch.tensor(sizes, dtype=torch.int64, device=x.device), g)
        out_sizes = tuple(int(k) for k in counts.tolist())
    if _transforming():  # torch.func: its Function (batched by its vmap rule)
        out = _FuncUnevenAllToAll.apply(x, g, sizes, out_sizes)
    elif x.requires_grad and torch.is_grad_enabled():
        out = _UnevenAllToAll.apply(x, g, sizes, out_sizes)
    else:
        out = du.all_to_all_uneven(x, g, sizes, out_sizes)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def reinterpret(x: torch.Tensor, axis: Any, *, src: Any = None, dst: Any = None,
                expert_mode: bool = False) -> torch.Tensor:
    """Keep the local data, change its meaning (no comms forward; the backward may have some).

    The result is a view of ``x`` (as Megatron's mapping functions return their input):
    under autograd, clone it before modifying it in place.

    ======================  ============================================================
    ``R -> I``              backward ``convert(I,P)``: the gradient on rank 0, zeros elsewhere
    ``R -> V``              backward ``reinterpret(V,P)``: each rank's gradient as a pending sum
    ``R -> P`` (expert)     the value becomes N times itself; backward ``reinterpret(R,P)``
    ``I -> R``              backward ``all_reduce(P,I)`` (Megatron's copy-to-region)
    ``I -> V``              backward ``reinterpret(V,P)`` then ``all_reduce(P,I)``
    ``I -> P`` (expert)     backward ``reinterpret(R,P)`` then ``all_reduce(P,I)``
    ``V -> P``              the locals become a pending sum; backward ``reinterpret(R,V)``
    ``P -> V``              this rank's summand as its own value; no backward: only on a
                            value that carries no gradient (under ``torch.no_grad()``,
                            detached, a ``.grad``), else ``spmd-no-grad`` (a gradient
                            compressed before its exchange: quantized codes, top-k)
    ======================  ============================================================

    ``R -> P`` and ``I -> P`` multiply the value by the axis size (``[3.0]`` replicated
    on 4 ranks, as a pending sum, is ``[12.0]``): they need ``expert_mode=True``.
    """
    plan = _plan("reinterpret", axis, src, dst, expert_mode, x=x)
    out = _run(plan, x, None)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def convert(x: torch.Tensor, axis: Any, *, src: Any = None, dst: Any = None,
            expert_mode: bool = False, sizes: Sequence[int] | None = None) -> torch.Tensor:
    """Keep the meaning, change the local data (never any comms forward).

    V means a stack on dim 0 (the value of a V tensor is ``stack(xs)``)::

        R|I -> V      keep slot k of dim 0 (which has the axis size)      [A,B,C] => A | B | C
        R|I -> S(i)   keep chunk k of dim i (``sizes=`` for uneven chunks)
        R|I -> P      rank 0 keeps x, the others hold zeros               A => +A | +0 | +0
        V -> P        a new dim 0 of the axis size, slot k is x, zeros elsewhere
                        A | B | C  =>  +[A,0,0] | +[0,B,0] | +[0,0,C]
        S(i) -> P     dim i padded with zeros to the full length, x at chunk k
        I -> R, R -> I   the data as is (spellings of reinterpret)

    Backward (the table): ``convert(R,V)``/``convert(R,S)`` <- ``convert(V,P)``/``convert(S,P)``
    and the reverse; ``convert(R,P)`` <- ``convert(R,P)``; ``convert(I,V)``/``convert(I,S(i))``
    <- ``all_gather(V,I)``/``all_gather(S(i),I)``; ``convert(I,P)`` <- ``reinterpret(R,I)``.
    """
    plan = _plan("convert", axis, src, dst, expert_mode, x=x)
    out = _run(plan, x, sizes)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def redistribute(x: torch.Tensor, axis: Any = None, *, src: Any = None, dst: Any = None,
                 sizes: Sequence[int] | None = None) -> torch.Tensor:
    """Go from ``src`` to ``dst`` keeping the meaning, with the op the engine's ``route()`` picks.

    Without ``axis`` (global SPMD): ``src``/``dst`` are partition specs (``PS[...]`` or
    ``Tensor[PS[...], ...]``) and the engine's planner picks the collectives, flattening
    them over several axes where it can (see :mod:`._global`).

    ``P -> R|I`` all_reduce; ``P -> V|S`` reduce_scatter; ``V|S -> R|I`` all_gather;
    ``V|S -> V|S`` all_to_all; ``I <-> R`` reinterpret; anything else convert.  The same
    type is returned as is, and so is ``V <-> S(0)``: V read as a concatenation on dim 0
    (the seed's convention for V, and all_to_all's) is S(0).
    """
    if axis is None:
        if sizes is not None:
            raise ValueError("redistribute(x, src=PS[...], dst=PS[...]) takes no sizes= (even "
                             "shards only)")
        from ._global import redistribute_global
        return redistribute_global(x, src, dst)
    plan = _plan("redistribute", axis, src, dst, x=x)
    step = plan.step
    if step is not None and step.src == "S" and step.dst == "S" and _one_dim(step, x.ndim):
        out = x  # S(-1) and S(1) of a 2-d tensor: one layout, nothing moves
    else:
        out = _run(plan, x, sizes)
    return _finish(plan, x, out) if _checking.ACTIVE else out


def _one_dim(step: _Step, ndim: int) -> bool:
    """The step's src and dst dims, written differently (``S(-1)``, ``S(1)``), are one dim of a
    tensor of ``ndim`` dims: the all_to_all route() plans for the dims as written would
    reorder the blocks, not keep the meaning."""
    i, j = step.src_dim, step.dst_dim
    return (i is not None and j is not None and -ndim <= i < ndim and -ndim <= j < ndim
            and i % ndim == j % ndim)


def _declare_partial(y: torch.Tensor, axis: Any) -> torch.Tensor:
    """``reinterpret(y, axis, src=V, dst=P)`` for out_partial_axes (see :mod:`._einsum`).

    The local data is kept, and the table's backward, ``reinterpret(R,V)``, keeps the
    local gradient: nothing to record for autograd, so ``y`` itself is returned (and
    stays modifiable in place).
    """
    axes = _mesh.axis_names(axis)
    if _checking.ACTIVE:
        from spmd_mypy.engine.types import PARTIAL, VARYING
        result = _checking.on_collective("reinterpret", y, axes, VARYING, PARTIAL, y,
                                         expert_mode=False, reduce_op="sum")
        return y if result is None else result
    return y


__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "reinterpret", "convert",
           "redistribute"]

# Imported last: the check mode may import this module (no import cycle at load time).
from . import _checking  # noqa: E402
