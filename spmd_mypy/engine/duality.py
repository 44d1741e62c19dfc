"""Forward and backward: the duality rule (SPEC section 5).

The gradient of a value of type ``T`` has type ``dual(T)`` on every axis (R <-> P, I <-> I,
V <-> V, S(i) <-> S(i)).  So a custom ``torch.autograd.Function`` whose ``forward`` maps inputs
``x1..xn`` to outputs ``y1..ym`` has a ``backward`` that

- takes the gradients of ``y1..ym`` (after ``ctx``): their types are the duals of the outputs';
- returns the gradients of ``x1..xn``: the duals of the inputs' types, or ``None`` for an input
  that is not a tensor or needs no gradient.

Megatron's mappings are written this way, and their bugs hide in the backward: a backward that
"forgets the all-reduce" returns the incoming P gradient where an I one is due.

A Function's ``forward`` always runs without grad, and its ``backward`` too unless the caller
asks for ``create_graph=True``: what they return carries no gradient of its own, so there an R
stands for an I and back (``types.SAME_VALUES``, as everywhere no gradient flows).  Megatron's
``_CopyToModelParallelRegion.forward`` returns its I input as the declared R,
``_ReduceFromModelParallelRegion.backward`` its I gradient where R is due.  The static
checker always accepts them (a ``create_graph=True`` double backward through such a
Function differentiates the returned value itself: declare the kind it has there); the check
mode only while grad is off inside the backward.

The same rule types ``.grad``, ``torch.autograd.grad`` and the argument of a gradient hook
(``x.register_hook(fn)``).  This module is pure: the mypy plugin reads the annotations and the
inferred types into :class:`Slot` values, and reports what these functions return.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .collectives import MadeBy, check_argument, lookup, route, same_dim_at_one_rank, suggest
from .errors import SpmdError
from .types import (PARTIAL, SAME_VALUES, Kind, LocalType, SpmdType, UNTYPED, bare,
                    format_axis, format_type, is_subscript, mismatched_axes, same_values,
                    shard_dims_match, trailing_group_start)

# What a position of a signature holds.
TENSOR = "tensor"  # a tensor (typed, or a plain tensor: UNTYPED)
NONE = "none"  # the value None (a backward's "no gradient")
OTHER = "other"  # known not to be a tensor (int, bool, a process group, a list...)
UNKNOWN = "unknown"  # Any, unannotated, or not readable


@dataclass(frozen=True)
class Slot:
    """One position: a parameter of forward or backward, an output, a returned value.

    ``name`` is how messages name it: the parameter's name, or the source text of a returned
    expression (what a fix is written on).
    """

    name: str
    kind: str = UNKNOWN
    type: SpmdType = UNTYPED  # the tensor's type (UNTYPED for a plain tensor); tensors only
    default: bool = False  # a parameter with a default (a call may leave it out)
    # A returned value made by an spmd collective or conversion: (op, axes, src or None for
    # the op's default, the text of its input); the fix then names the dst to pass.
    made_by: tuple[str, tuple[str, ...], LocalType | None, str] | None = None
    # A declared result (backward's) whose one returned expression is known: that
    # expression's own type (the fix of a declaration the expression already meets is the
    # declaration alone, no conversion).
    actual: SpmdType | None = None

    @staticmethod
    def tensor(name: str, t: SpmdType) -> Slot:
        return Slot(name, TENSOR, t)

    @property
    def typed(self) -> bool:
        return self.kind == TENSOR and bool(self.type)


@dataclass(frozen=True)
class FunctionTypes:
    """The annotated signatures of a custom autograd Function, ``ctx`` left out.

    ``None`` for a part that is not known (``*args``, an unannotated or ``Any`` result).
    """

    name: str  # the Function's class name, as messages print it
    inputs: tuple[Slot, ...] | None  # forward's parameters
    outputs: tuple[Slot, ...] | None  # forward's result: one slot, or a tuple's items
    grads: tuple[Slot, ...] | None  # backward's parameters
    returns: tuple[Slot, ...] | None  # backward's declared result: one slot, or a tuple's items

    @property
    def typed(self) -> bool:
        """Whether any tensor of forward's signature has an SPMD type (else nothing to check)."""
        return any(s.typed for part in (self.inputs, self.outputs) for s in part or ())


def gradient_type(t: SpmdType) -> SpmdType:
    """The type of the gradient of a tensor of type ``t``: the dual on every axis."""
    return t.dual()


def batched_type(t: SpmdType) -> SpmdType:
    """The type of a batch of tensors of type ``t`` stacked on a new dim 0 (the gradients of
    ``torch.autograd.grad(..., is_grads_batched=True)``: dim 0 of each ``grad_outputs`` tensor
    and of each result is the batch): each non-negative shard dim one later (a negative one
    counts from the end and stays); a partition spec gets an unsharded dim 0."""
    axes = []
    changed = False
    for a, lt in t.axes:
        if lt.by_rank is not None:
            lt = LocalType(Kind.V, by_rank=tuple(
                (r + 1, d + 1 if d is not None and d >= 0 else d) for r, d in lt.by_rank))
            changed = True
        elif lt.dim is not None and lt.dim >= 0:
            lt = LocalType(Kind.V, lt.dim + 1)
            changed = True
        axes.append((a, lt))
    if not changed and t.spec is None:
        return t
    spec = None if t.spec is None else ((), *t.spec)
    return SpmdType(tuple(axes), spec, t.failed)


def mismatches(have: SpmdType, want: SpmdType, gradient_free: bool = False,
               ndim: int | None = None) -> list[tuple[str, LocalType, LocalType]]:
    """(axis, have, want) for every axis both types know on which they disagree
    (``gradient_free``: R and I agree, see the module's docstring; ``ndim``: the value's
    rank where the adapter knows it, the shard dims compared at it)."""
    return mismatched_axes(have, want, gradient_free, ndim)


def check_forward_result(actual: SpmdType, declared: SpmdType, *, x_text: str, where: str,
                         made_by: MadeBy | None = None, ndim: int | None = None) -> list[SpmdError]:
    """What a custom Function's ``forward`` returns against its declared result: a value
    passed where a type is declared (:func:`.collectives.check_argument`), without grad
    (forward runs without it: an I returned as the declared R, Megatron's
    ``_CopyToModelParallelRegion``)."""
    return check_argument(actual, declared, x_text=x_text, where=where, made_by=made_by,
                          gradient_free=True, ndim=ndim)


def _where(bad: list[tuple[str, LocalType, LocalType]]) -> str:
    return ", ".join(f'{h} on "{a}" where {w} is needed' for a, h, w in bad)


# An identifier that names a rank (``rank``, ``ctx.rank``, ``self.tp_rank``, ``local_rank``)
_RANK_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.)*\w*rank\w*$", re.IGNORECASE)


def _rank_row(ret: Slot) -> tuple[str, str] | None:
    """(base, index) when the returned value is this rank's row of a value, ``g[ctx.rank]``:
    a subscript by one index that names a rank (the check mode sees a plain int; a local
    computed from the rank is the static checker's spmd-partial-varying before, whose fix
    is the same reduce-scatter)."""
    text = bare(ret.name)
    if not is_subscript(text):
        return None
    start = max(trailing_group_start(text), 0)
    base, index = text[:start], text[start + 1:-1].strip()
    if not base or any(c in index for c in ":,[("):
        return None
    return (base, index) if _RANK_NAME.match(index) else None


def _fixes(bad: list[tuple[str, LocalType, LocalType]], text: str, like: str,
           made_by: tuple[str, tuple[str, ...], LocalType | None, str] | None = None,
           rank_row: tuple[str, str] | None = None, backward: bool = False) -> str:
    """How to turn a value of the wrong type into the gradient, axis by axis.  ``rank_row``:
    the value is this rank's row ``base[index]`` of a Partial ``base`` (a gather's backward):
    P to V is the reduce-scatter of ``base`` itself (which sums the ranks' ``base`` and keeps
    this rank's row; of the row, it would cut the row's dim 0).  ``backward``: the value is
    what a backward returns, where a V due as P is each rank's part of the gradient's sum
    (Megatron's column-parallel dgrad, ``g @ w``): the reinterpret leads."""
    parts = []
    for axis, h, w in bad:
        if (backward and h.kind is Kind.V and h.dim is None and h.by_rank is None
                and w.kind is Kind.P):
            x, ax = bare(text), format_axis(axis)
            parts.append(f"V to P: use reinterpret({x}, {ax}, src=V, dst=P) to mean the sum "
                         f"of the ranks' values (a gradient: each rank's {x} is its part of "
                         f"the sum), or convert({x}, {ax}, src=V, dst=P) to keep each rank's "
                         f"values apart")
            continue
        r = route(h, w) if rank_row is not None else None
        if (rank_row is not None and h.kind is Kind.P and w.kind is Kind.V and w.dim is None
                and r is not None and r[0] == "reduce_scatter"):
            base, index = rank_row
            parts.append(f"P to V is a reduce-scatter: use reduce_scatter({base}, "
                         f"{format_axis(axis)}, src=P, dst=V) in place of {text} (it sums the "
                         f"ranks' {base} and keeps this rank's row; of {text} it would cut "
                         f"the row's own dim 0)")
            continue
        if made_by is not None and axis in made_by[1]:
            op, axes, src, x = made_by
            if (op in ("reinterpret", "convert") and len(axes) == 1 and src is not None
                    and src.kind is w.kind and (w.dim is None or src.dim == w.dim)):
                # the returned value is a reinterpret / convert of a value that already has
                # the gradient's type: the conversion is the mistake (a ring shift's gradient,
                # V, reinterpreted as P); a reduction around it would sum the ranks' values
                parts.append(f'remove the {op}: its input {x} is already {src} on "{axis}" '
                             f"(its src=), the gradient's type there, so return {x}; only if "
                             f"the ranks' values are partial sums of the gradient: "
                             f"{suggest(h, w, text, axis)}")
                continue
            actual_src = src or (PARTIAL if op in ("all_reduce", "reduce_scatter") else None)
            if actual_src is not None and lookup(op, actual_src, w) is not None:
                src_arg = f", src={src}" if src is not None else ""
                parts.append(f"pass dst={w} to {op}: {op}({x}, "
                             f"{format_axis(axes[0] if len(axes) == 1 else axes)}{src_arg}, dst={w})")
                continue
        if h.kind is w.kind:  # shard dims differ: the gradient is sharded like the value
            parts.append(f"shard the gradient on dim {w.dim} like {like}"
                         f"{same_dim_at_one_rank(h, w)}")
        else:
            parts.append(suggest(h, w, text, axis))
    return "; ".join(parts)


def _output_desc(i: int, n: int) -> str:
    return "forward's output" if n == 1 else f"forward's output {i + 1}"


def _input_desc(slot: Slot, i: int) -> str:
    return f"input {slot.name}" if slot.name else f"input {i + 1}"


def _names(slots: Sequence[Slot]) -> str:
    return ", ".join(s.name or f"#{i + 1}" for i, s in enumerate(slots))


def check_signature(fn: FunctionTypes, gradient_free: bool = True) -> list[SpmdError]:
    """The declared signatures: backward's parameters are the duals of forward's outputs, and
    its declared results the duals of forward's inputs (None allowed; ``gradient_free``: R for
    I and back, backward running without grad).  Reported on backward."""
    if not fn.typed:
        return []
    errors: list[SpmdError] = []
    name = fn.name
    outs, grads, ins, rets = fn.outputs, fn.grads, fn.inputs, fn.returns
    if outs is not None and grads is not None:
        required = sum(1 for g in grads if not g.default)
        if not required <= len(outs) <= len(grads):
            errors.append(SpmdError(
                "spmd-duality",
                f"{name}.backward takes {len(grads)} gradient{'s' if len(grads) != 1 else ''} "
                f"after ctx but forward returns {len(outs)} output{'s' if len(outs) != 1 else ''}: "
                f"backward takes one gradient per output of forward",
            ))
        for i, (out, g) in enumerate(zip(outs, grads)):
            if not (out.typed and g.typed):
                continue
            want = gradient_type(out.type)
            bad = mismatches(g.type, want)
            if bad:
                rule = ", ".join(f"the gradient of {out.type.get(a)} is {w}" for a, _, w in bad)
                errors.append(SpmdError(
                    "spmd-duality",
                    f"{name}.backward takes {g.name} as the gradient of {_output_desc(i, len(outs))} "
                    f"({format_type(out.type)}), which is {format_type(want)}, not "
                    f"{format_type(g.type)} ({_where(bad)}: {rule}); annotate "
                    f"{g.name}: {format_type(want)}",
                ))
    if ins is not None and rets is not None:
        # torch wants one gradient per argument of apply(); parameters with defaults may be left out
        required_ins = [s for s in ins if not s.default]
        if len(rets) < len(required_ins) and any(r.kind != UNKNOWN for r in rets):
            errors.append(SpmdError(
                "spmd-duality",
                f"{name}.backward returns {len(rets)} value{'s' if len(rets) != 1 else ''} but "
                f"forward takes {len(required_ins)} input{'s' if len(required_ins) != 1 else ''} after ctx "
                f"({_names(required_ins)}): return one gradient per input, None for an input that is "
                f"not a tensor or needs no gradient",
            ))
        for i, (inp, ret) in enumerate(zip(ins, rets)):
            errors.extend(_check_gradient_of_input(name, i, inp, ret, body=False,
                                                   gradient_free=gradient_free))
    return errors


def _check_gradient_of_input(fn: str, i: int, inp: Slot, ret: Slot, *, body: bool,
                             gradient_free: bool) -> list[SpmdError]:
    if not ret.typed:
        return []
    returned = f"{ret.name} ({format_type(ret.type)})" if body else format_type(ret.type)
    if inp.kind in (OTHER, NONE):
        return [SpmdError(
            "spmd-duality",
            f"{fn}.backward returns a gradient {returned} for {_input_desc(inp, i)}, which is not "
            f"a tensor; return None in its place",
        )]
    if not inp.typed:
        return []
    want = gradient_type(inp.type)
    bad = mismatches(ret.type, want, gradient_free)
    if not bad:
        return []
    fix = _fixes(bad, ret.name or "grad", inp.name or "the input", ret.made_by,
                 _rank_row(ret), backward=True)
    if body:
        return [SpmdError(
            "spmd-duality",
            f"{fn}.backward returns {returned} as the gradient of {_input_desc(inp, i)} "
            f"({format_type(inp.type)}), which is {format_type(want)} ({_where(bad)}); {fix}",
        )]
    if ret.actual and ret.name and not mismatches(ret.actual, want, gradient_free):
        # the returned expression has the gradient's type already (a recomputation's x.grad,
        # P): the declaration alone is wrong, a conversion of it would be refused
        fix = (f"{ret.name} is {format_type(ret.actual)} already, the gradient's type: "
               f"declare the result {format_type(want)} and return {bare(ret.name)} as it is "
               f"(no conversion)")
        return [SpmdError(
            "spmd-duality",
            f"{fn}.backward returns {returned} for {_input_desc(inp, i)} "
            f"({format_type(inp.type)}), whose gradient is {format_type(want)} "
            f"({_where(bad)}); {fix}",
        )]
    if ret.actual and ret.name and ret.actual != ret.type:
        # the returned expression has a type of its own (g @ w, V, declared R): the fix is
        # written on the expression, from its type (from the declared one, its src= would be
        # refused: spmd-src-mismatch)
        have = mismatches(ret.actual, want, gradient_free)
        fix = (f"{bare(ret.name)} is {format_type(ret.actual)} ({_where(have)}): "
               + _fixes(have, ret.name, inp.name or "the input", ret.made_by, _rank_row(ret),
                        backward=True))
    return [SpmdError(
        "spmd-duality",
        f"{fn}.backward returns {returned} for {_input_desc(inp, i)} ({format_type(inp.type)}), "
        f"whose gradient is {format_type(want)} ({_where(bad)}); {fix}, and declare the result "
        f"{format_type(want)}",
    )]


def check_returned(fn: FunctionTypes, returned: Sequence[Slot],
                   gradient_free: bool = True) -> list[SpmdError]:
    """One ``return`` of backward's body: each returned value against the dual of its input
    (``gradient_free``: backward runs without grad, so R for I and back; the check mode passes
    whether grad is off in the backward, False under ``create_graph=True``).

    A position whose declared result is a typed tensor that itself disagrees with the dual is
    skipped (:func:`check_signature` reports it on the ``def``)."""
    if not fn.typed or fn.inputs is None:
        return []
    errors: list[SpmdError] = []
    for i, (inp, ret) in enumerate(zip(fn.inputs, returned)):
        if fn.returns is not None and i < len(fn.returns):
            declared = fn.returns[i]
            if declared.typed and inp.typed and mismatches(declared.type, gradient_type(inp.type),
                                                           gradient_free):
                continue
            if declared.typed and inp.kind in (OTHER, NONE):
                continue
        errors.extend(_check_gradient_of_input(fn.name, i, inp, ret, body=True,
                                               gradient_free=gradient_free))
    return errors


def check_hook(x_text: str, x: SpmdType, hook: str, param: Slot | None,
               result: Slot | None) -> list[SpmdError]:
    """``x.register_hook(hook)``: the hook receives the gradient of ``x`` (the dual of its type)
    and may return a replacement of the same type."""
    if not x:
        return []
    want = gradient_type(x)
    errors = []
    if param is not None and param.typed:
        bad = mismatches(param.type, want)
        if bad:
            errors.append(SpmdError(
                "spmd-duality",
                f"the hook {hook} registered on {x_text} ({format_type(x)}) receives the gradient "
                f"of {x_text}, which is {format_type(want)}, but its parameter {param.name} is "
                f"{format_type(param.type)} ({_where(bad)}); annotate {param.name}: "
                f"{format_type(want)}",
            ))
    if result is not None and result.typed:
        bad = mismatches(result.type, want)
        if bad:
            errors.append(SpmdError(
                "spmd-duality",
                f"the hook {hook} registered on {x_text} ({format_type(x)}) returns "
                f"{format_type(result.type)} in place of the gradient of {x_text}, which is "
                f"{format_type(want)} ({_where(bad)}); return {format_type(want)} or None",
            ))
    return errors


def check_grad_outputs(outputs: Sequence[Slot], grad_outputs: Sequence[Slot],
                       what: str = "torch.autograd.grad", batched: bool = False,
                       ndim: int | None = None) -> list[SpmdError]:
    """``torch.autograd.grad(outputs, inputs, grad_outputs)`` (also ``torch.autograd.backward``
    and ``y.backward(gradient)``): each given gradient of an output is the dual of that output's
    type.  ``batched`` (``is_grads_batched=True``): each is a batch of such gradients on a new
    dim 0 (:func:`batched_type`).  ``ndim``: the gradients' rank, where the adapter knows it
    (the check mode, one gradient at a time): shard dims compared at it, so ``S(0)`` given
    for a 1-d ``S(-1)`` output is its gradient."""
    errors = []
    for out, g in zip(outputs, grad_outputs):
        if not (out.typed and g.typed):
            continue
        want = gradient_type(out.type)
        if batched:
            want = batched_type(want)
        bad = mismatches(g.type, want, ndim=ndim)
        if bad:
            fix = _fixes(bad, g.name, out.name if not batched else
                         f"{out.name}, one dim later: with is_grads_batched=True dim 0 of "
                         f"{g.name} is the batch")
            shares = [a for a, h, w in bad if h.kind is Kind.R and w.kind is Kind.P]
            if shares and re.fullmatch(r"[A-Za-z_][\w.]*", g.name):  # a value held, not a
                # call made here (torch.ones_like(y): the whole gradient, convert is right)
                # an R gradient where P is needed is most often a gradient received from the
                # next stage (or written by a backward) declared with the value's type: each
                # rank holds its share, and convert(R->P) keeps one rank's only (a probe:
                # the pasted convert passed both checkers, a weight's gradient off by 21.7)
                where = " and ".join(format_axis(a) for a in shares)
                fix = (f"if {g.name} holds this rank's share of the gradient (received from "
                       f"another stage, or computed by a backward), its declared type is wrong: "
                       f"declare it {format_type(want)} (spmd.grad_type of {out.name}'s type"
                       f"{', its shard dims one later for the batch dim' if want != gradient_type(out.type) else ''}) "
                       f"where it is made; if {g.name} is the whole gradient on every rank of "
                       f"{where}, {fix}")
            errors.append(SpmdError(
                "spmd-duality",
                f"{what}: the gradient {g.name} ({format_type(g.type)}) given for "
                f"{out.name} ({format_type(out.type)}) must be {format_type(want)} ({_where(bad)}); "
                + fix,
            ))
    return errors


def saved_slot(own: Slot, output: int | None = None,
               outputs: Sequence[Slot] | None = None) -> Slot:
    """What ``ctx.saved_tensors`` hands backward at one position, for the value
    ``ctx.save_for_backward`` got there (``own``: its type where it was saved).

    - ``None`` saved is None;
    - one of forward's outputs (``output``: its position) has forward's declared type there,
      the type ``Fn.apply`` gives the result (torch hands backward a new tensor for a saved
      output, not the object forward made); unknown when that output is not declared;
    - any other tensor keeps its own type (a parameter its declared one, a local what it was
      computed as); a plain tensor, or anything else (torch saves tensors and None only), is
      unknown: never a guess."""
    if output is not None:
        declared = outputs[output] if outputs is not None and 0 <= output < len(outputs) else None
        if declared is not None and declared.typed:
            return Slot.tensor(own.name, declared.type)
        return Slot(own.name, UNKNOWN)
    if own.typed or own.kind == NONE:
        return own
    return Slot(own.name, UNKNOWN)


def join_saved(saves: Sequence[Sequence[Slot] | None]) -> tuple[Slot, ...] | None:
    """``ctx.saved_tensors`` after several ``save_for_backward`` calls (in branches; the last
    one run wins): a position keeps its slot where every call agrees on it, and is unknown
    where they differ.  None (nothing known) when there is no call, one whose values are not
    known, or calls that save different numbers of values."""
    if not saves or any(s is None for s in saves):
        return None
    first = saves[0]
    assert first is not None
    if any(len(s) != len(first) for s in saves if s is not None):
        return None
    out = []
    for i, slot in enumerate(first):
        same = all(s is not None and s[i].kind == slot.kind and s[i].type == slot.type
                   for s in saves)
        out.append(slot if same else Slot(slot.name, UNKNOWN))
    return tuple(out)


__all__ = [
    "TENSOR", "NONE", "OTHER", "UNKNOWN", "Slot", "FunctionTypes", "gradient_type", "mismatches",
    "check_forward_result", "check_signature", "check_returned", "check_hook", "check_grad_outputs",
    "batched_type",
    "saved_slot", "join_saved",
]


def check_grad_assignment(owner: SpmdType, value: SpmdType, *, target: str,
                          value_text: str, narrowed: str | None = None,
                          ndim: int | None = None) -> list[SpmdError]:
    """``p.grad = value`` (``target``: ``p.grad``): ``value`` stands for ``p``'s gradient at
    every later read (the optimizer's step, the next backward accumulating into it), so it
    must be a gradient of ``p``: per axis the dual of ``p``'s type (:func:`gradient_type`),
    or its reduced form where the dual is P (R or I: ``all_reduce(p.grad, "dp", src=P,
    dst=R)``, a DDP-style reduction).  R and I stand for each other (a finished gradient
    carries no gradient of its own); a V of unknown dim may be claimed as ``p``'s S(i)
    (a view of a flat buffer).  Untyped values are gradual: nothing to check.

    A V where R, I or P is due is what a view of a flat gradient bucket is (the bucket
    concatenates the gradients of parameters of different layouts: V on their axes); no
    declaration or conversion makes a V one of those (the declaration of a typed value must
    agree with its type): the fix buckets the gradients by layout, or reduces the
    parameter's own gradient alone: of ``narrowed``, the local the code narrowed ``p.grad``
    into (``g = p.grad; assert g is not None``), else of ``p.grad`` after an assert (it is
    Optional: ``spmd.all_reduce(p.grad, ...)`` alone fails mypy's arg-type).  Any other mismatch is fixed by the collective
    :func:`.collectives.suggest` names.

    ``ndim``: the parameter's rank, where the adapter knows it (the check mode): shard dims
    are compared at that rank, so ``S(-1)`` and ``S(0)`` of a 1-d bias are one layout (the
    runtime's collectives return a negative shard dim counted from the front)."""
    if not owner or not value or owner.spec is not None or value.spec is not None:
        return []
    want = gradient_type(owner)
    bad: list[tuple[str, LocalType, LocalType]] = []
    for axis, w in want.axes:
        h = value.get(axis)
        if h is None or shard_dims_match(h, w, ndim) or same_values(h, w) or (
                w.kind is Kind.P and h.kind in SAME_VALUES):
            continue
        bad.append((axis, h, w))
    if not bad:
        return []
    text = bare(value_text)
    reduced = [a for a, w in want.axes if w.kind is Kind.P]
    also = (f", or R/I on {' and '.join(format_axis(a) for a in reduced)} once all-reduced"
            if reduced else "")
    param = target[:-len(".grad")] if target.endswith(".grad") else "the parameter"
    parts = []
    varying = [(a, w) for a, h, w in bad if h.kind is Kind.V and w.kind is not Kind.V]
    if varying:
        # a view of a flat bucket that concatenates gradients of several layouts: V where
        # they differ, and no declaration or conversion turns a V into an R/I/P
        axes = " and ".join(format_axis(a) for a, _ in varying)
        kinds = "/".join(dict.fromkeys(str(w) for _, w in varying))
        fix = (f"{text} is V on {axes} (as a view of a flat gradient bucket that also holds "
               f"gradients sharded there is), and no declaration makes a V {kinds}: put "
               f"{param}'s gradient in a bucket of gradients that are {kinds} on {axes} only "
               f"(one bucket per layout: their torch.cat and its views keep the type)")
        if reduced and len(varying) == len(bad):
            axis_arg = format_axis(reduced[0] if len(reduced) == 1 else tuple(reduced))
            if narrowed:
                fix += (f", or reduce it alone: {target} = spmd.all_reduce({narrowed}, "
                        f"{axis_arg}, src=P, dst=R)")
            else:
                fix += (f", or reduce it alone: assert {target} is not None; {target} = "
                        f"spmd.all_reduce({target}, {axis_arg}, src=P, dst=R)")
        parts.append(fix)
    else:
        for axis, h, w in bad:
            if h.kind is w.kind:  # shard dims differ
                parts.append(f"assign a gradient sharded on dim {w.dim} like {param} (this "
                             f"one is laid out as another parameter is)")
            else:
                parts.append(suggest(h, w, text, axis))
    return [SpmdError(
        "spmd-duality",
        f"{target} = {text} assigns {format_type(value)} as the gradient of {param} "
        f"({format_type(owner)}), which is {format_type(want)}{also} ({_where(bad)}): the "
        f"optimizer's step and the next backward read {target} as that; " + "; ".join(parts),
    )]
