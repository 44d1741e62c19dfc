"""Global SPMD: shard propagation over partition specs (SPEC section 6).

A global type is an :class:`~.types.SpmdType` whose ``spec`` is not None: one entry
per tensor dim, each the mesh axes sharding that dim, outermost first.  The spec
says how the locals of the Varying axes reassemble into the global tensor::

    f32[8, 16@tp]  =  Tensor[PS[None, "tp"]]            rank 0 holds [:, 0:8]
                                                        rank 1 holds [:, 8:16]
    f32[8@(dp,tp)] =  Tensor[PS[("dp", "tp"),]]         dp outer, tp inner:
                                                        (dp0,tp0) [0:2] (dp0,tp1) [2:4]
                                                        (dp1,tp0) [4:6] (dp1,tp1) [6:8]

Per mesh axis a global type is one of::

    in the spec (dim d)   V with shard dim d (S(d))      a global axis
    R / I / P             as in local SPMD (the same meaning in both modes)
    V, not in the spec    a *local* axis (inside ``spmd.local_map`` on that axis)

Shard propagation asks, for an op ``f`` and input specs, whether there is an
output spec with ``map(f, in_spec(x)) == out_spec(f(x))``: running ``f`` on the
locals computes the global result.  When there is none, the op needs
communication, and the error says which (``spmd.redistribute`` / ``all_gather``
/ ``out_partial_axes=`` + ``all_reduce``).  Partial never appears implicitly: a
contraction or sum over a sharded dim is an error unless the call names the axes
in ``out_partial_axes``.

The API (used by both adapters: the mypy plugin and the runtime check mode)
---------------------------------------------------------------------------
Every function takes the operands as :class:`~.ops.Operand` (``type`` an
``SpmdType``, ``None`` for a Python scalar; ``text`` the source text used in
messages) and the op's literal parameters as plain Python values, and returns an
:class:`~.ops.Result` (the result ``SpmdType`` with its spec, and a list of
:class:`~.errors.SpmdError`).  A parameter the adapter could not read as a literal
is passed as :data:`UNKNOWN`: in global mode that is an error asking for a literal,
never a guess.  Dims may be negative (torch's convention).

- :func:`propagate` ``(op, operands, **params)``: the dispatcher by torch name
  (``"add"``, ``"einsum"``, ``"sum"``, ``"permute"``, ``"__getitem__"``...). When
  no operand is global (no spec) it returns the local rule's result
  (:func:`.ops.propagate`) unchanged, so adapters may call it for every op.
- the per-family functions it dispatches to: :func:`einsum`, :func:`matmul`,
  :func:`linear`, :func:`elementwise`, :func:`reduction`, :func:`along_dim`
  (softmax, cumsum, normalize...; topk, sort, argsort, multinomial: SELECT_ALONG_DIM), :func:`permute`, :func:`transpose`,
  :func:`movedim`, :func:`reshape`, :func:`flatten`, :func:`unflatten`,
  :func:`squeeze`, :func:`unsqueeze`, :func:`cat`, :func:`stack`,
  :func:`index` (``x[...]``), :func:`select`, :func:`narrow`, :func:`split`
  (split/chunk/tensor_split/unbind: the type of each piece), :func:`expand`,
  :func:`expand_as`, :func:`reshape_as`, :func:`roll` (also flip, fliplr, flipud, rot90, diff),
  :func:`fourier` (torch.fft's transforms and shifts), :func:`class_loss` (cross_entropy/nll_loss),
  :func:`lookup` / :func:`embedding` (embedding, index_select; ``x[ids]`` through
  :class:`TensorIndex` ``spec``), :func:`keeps_spec` (triu/tril), :func:`repeat_interleave`, :func:`pad`,
  :func:`group_norm`, :func:`segment_sum` (bincount, index_add, index_put(accumulate=True);
  scatter_add / scatter_reduce(sum) through :func:`scatter_along`: sharded positions give P),
  :func:`layout_op` (convolutions, pools, interpolation, pixel_shuffle,
  batch/instance norms: views.LAYOUT_OPS, with ``training`` and ``groups``); an op without a
  rule gets :func:`no_rule_error`.
- :func:`is_global`, :func:`rank`, :func:`global_axes`.
- ``spmd.local_map`` helpers: :func:`localize` (a global type seen inside the
  body, local on some axes), :func:`check_local_map_boundary` (the body's local
  type against the declared global type, with the fix).
- :func:`redistribute_fix` (the text of the ``spmd.redistribute`` call that fixes
  a layout mismatch), :func:`local_shape` (a global shape's local shape on one
  rank, for the runtime's reshape/view arguments).

Parameters by op (all keyword): ``equation: str`` and ``out_partial_axes: str |
tuple[str, ...] | None`` (einsum/matmul/mm/bmm/linear/sum); ``dim: int | tuple[int,
...] | None`` and ``keepdim: bool`` (reductions; ``dim`` also for softmax, cat, stack,
squeeze, unsqueeze, select, narrow, cumsum); ``dims: tuple[int, ...]`` (permute);
``dim0, dim1`` (transpose); ``source, destination`` (movedim); ``shape`` (the target
shape of reshape/view/expand/broadcast_to as torch receives it, i.e. *local* sizes, one
may be -1; statically an entry may be :class:`SameDim` (``x.shape[i]``) or
:data:`ANY_SIZE` (an int the plugin cannot read)) with optional ``in_shape`` (the
input's local shape: the runtime knows it, the plugin does not); ``start_dim,
end_dim`` (flatten); ``sizes`` (unflatten, local sizes); ``dims`` (roll, flip, rot90); ``s`` (an n-d fft's sizes: their number);
``reduction`` (cross_entropy/nll_loss: "none", "mean", "sum"); ``normalized_ndim``
(layer_norm/rms_norm: how many trailing dims are normalized); ``index`` (a tuple of
index items: an ``int`` (value unused), a ``slice`` (full iff ``slice(None)``),
``None`` (new axis), ``Ellipsis``, or :class:`TensorIndex`); ``start, length``
(narrow: unused values; narrowing is a partial slice); ``pad`` (F.pad's literal pad
tuple); ``reduce`` (scatter_reduce's literal reduction) and ``accumulate`` (index_put); ``mesh_sizes: dict[str, int]``
(optional, unused by the rules since shapes are local); ``sizes_one:
tuple[bool, ...]`` per operand dims (optional; which dims are size 1, for
broadcasting: every dim's at runtime; statically those an operand's own expression makes
size 1) and ``sizes_exact`` (False from the static checker: the other dims' sizes unknown,
so a fix that shards an unsharded dim says a size-1 dim cannot be sharded).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from .contractions import DimError, equation_at, make_contraction, parse_equation
from .errors import SpmdError
from .redistribute import check_source, resolve
from .ops import (CAST_FORMAL, CAST_OPS, CLASS_LOSSES, OP_SPECS, RANDOM_LIKE, UNREAD_VALUE, Operand,
                  Reduction, Result, Role, call_spec, cast_is_integral, classify)
from .ops import SEGMENT_SUMS as _LOCAL_SEGMENT_SUMS
from .ops import propagate as local_propagate
from .views import (ALONG_FIXED, ALONG_OPS, ANY_SIZE, LAYOUT_OPS, SameDim, SamePrefix, _AnySize,
                    expand_target, is_literal_size, kept_prefix, layout_kept, reshape_runs,
                    resolve_sizes, run_shard_dim)
from .types import (
    Kind,
    LocalType,
    PARTIAL,
    SpmdType,
    bare,
    receiver,
    format_spec,
    format_type,
    at_stated_rank,
    shard,
    shard_dims_match,
    stated_rank,
)

Spec = tuple[tuple[str, ...], ...]
CODE = "spmd-global"


class _Unknown:
    """A parameter the adapter could not read as a literal."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class TensorIndex:
    """An advanced (tensor) index in ``x[...]``: its rank (its dims replace the
    indexed dim); ``sharded`` when the index tensor is itself sharded/varying; ``spec``
    the partition spec of a global integer index tensor (``w[ids]``: its dims take
    the result's place of the indexed dim with their sharding, as in an embedding
    lookup).  A sharded index without a spec (a local Varying one, or a boolean mask)
    is an error."""

    rank: int = 1
    sharded: bool = False
    spec: tuple[tuple[str, ...], ...] | None = None


# --------------------------------------------------------------------------------------
# small helpers


def is_global(t: SpmdType | None) -> bool:
    return t is not None and t.spec is not None


def rank(t: SpmdType) -> int | None:
    """The rank ``t``'s spec states (types.stated_rank of one type); None for a local type."""
    return stated_rank(t)


def global_axes(t: SpmdType) -> set[str]:
    return {a for entry in t.spec or () for a in entry}


def _axes_tuple(axes: str | Iterable[str] | None) -> tuple[str, ...]:
    if axes is None:
        return ()
    if isinstance(axes, str):
        return (axes,)
    return tuple(axes)


def _fmt_axes(axes: Sequence[str]) -> str:
    if len(axes) == 1:
        return f'"{axes[0]}"'
    return "(" + ", ".join(f'"{a}"' for a in axes) + ")"


def _fmt_entry(axes: Sequence[str]) -> str:
    return "None" if not axes else _fmt_axes(axes)


def _sharded(entry: Sequence[str]) -> str:
    return f"sharded on {_fmt_axes(tuple(entry))}" if entry else "unsharded"


def _desc(o: Operand, in_parens: bool = False) -> str:
    """``x: Tensor[...]``; ``in_parens``: the text already stands in parentheses, so an
    operand's own pair goes (``(x < 3: Tensor[...])``, not ``((x < 3): Tensor[...])``)."""
    text = bare(o.text) if in_parens else o.text
    return f"{text}: {format_type(o.type) if o.type is not None else 'scalar'}"


def _broadcast_fix(text: str, axis: str, where: str) -> str:
    """The fix of an operand ``text`` that varies on ``axis`` but is broadcast along
    ``where`` (a dim or label sharded on ``axis``), for the message after "blocks of one
    global tensor".  Its values must be one value on every rank of ``axis`` before the
    broadcast: a per-rank part of a sum is summed (the reinterpret names it a pending sum);
    values that belong to this rank's block get that dim.  all_gather(V, R) is no fix: it
    stacks the ranks' values on a new dim 0 (SPEC section 4), so the broadcast would
    pair the stack with the other operand's dims."""
    x = bare(text)
    ax = f'"{axis}"'
    return (f"; if {x} is this rank's part of a sum, make it Replicate on {ax} first: "
            f"all_reduce(reinterpret({x}, {ax}, src=V, dst=P), {ax}, src=P, dst=R); if its "
            f"values belong to this rank's block of {where}, give it that dim sharded on {ax} "
            f"too (Tensor[PS[...]] with the dim); all_gather({x}, {ax}, src=V, dst=R) is no "
            f"fix: it stacks the ranks' values on a new dim 0")


def _spec_type(spec: Spec) -> SpmdType:
    """The type ``PS[...]`` alone is (its axes Varying with their dims, as read from the
    annotation)."""
    return SpmdType.of({a: shard(d) for d, e in enumerate(spec) for a in e}, spec)


def redistribute_fix(x: Operand | str, src: Spec, dst: Spec) -> str:
    """``spmd.redistribute(x, src=PS[...], dst=PS[...])``.

    ``x`` is the operand (or its text alone).  A bare ``src=PS[...]`` leaves the other mesh
    axes unsaid, and an axis ``dst`` names is then taken as R (:func:`.redistribute.resolve`);
    where the operand is P or I there (``Tensor[PS[None, None], P["tp"]]`` to ``PS["tp",
    None]``) that src would not describe it, so the call checks the text before it offers
    it (:func:`.redistribute.check_source`, the rule the pasted call meets) and writes the
    operand's whole type as ``src`` instead."""
    text, have = (x, None) if isinstance(x, str) else (x.text, x.type)
    src_text = format_spec(src)
    if have is not None and have.spec == src:
        dst_t = _spec_type(dst)
        if check_source(have, _spec_type(src), dst=dst_t) and not resolve(have, dst_t)[2]:
            src_text = format_type(have)
    return f"spmd.redistribute({bare(text)}, src={src_text}, dst={format_spec(dst)})"


def _unshard(spec: Spec, dims: Iterable[int]) -> Spec:
    ds = set(dims)
    return tuple(() if i in ds else e for i, e in enumerate(spec))


def _norm_dim(d: int, r: int, what: str = "dim") -> int:
    if not -r <= d < r:
        raise DimError(f"{what} {d} is out of range for a tensor of rank {r}")
    return d % r


_LITERAL_EXAMPLES = {
    "equation": 'a string literal such as "ij,jk->ik"',
    "shape": "ints or the input's own sizes, such as (4, -1) or (x.shape[0], -1)",
    "sizes": "literal ints such as (4, -1)",
    "index": "literal indices such as x[:, 0] or x[..., 1:3]",
    "dims": "literal ints such as (1, 0)",
    "out_partial_axes": 'a literal axis name such as "tp"',
    "reduction": 'a string literal such as reduction="none"',
    "pad": "literal ints such as (1, 1) or (0, 0, 2, 0)",
}


def _nonliteral(op: str, param: str, o: Operand) -> SpmdError:
    example = _LITERAL_EXAMPLES.get(param, f"a literal int or a Final constant, e.g. {param}=1")
    return SpmdError(
        CODE,
        f"{op} on the global tensor {_desc(o)} needs a literal {param}: shard propagation "
        f"reads the layout change from the call ({example}), never a guess; or do it inside "
        f"spmd.local_map",
    )


def local_shape(shape: Sequence[int], spec: Spec, mesh_sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The local shape on one rank of a global ``shape`` laid out as ``spec``."""
    out = []
    for size, entry in zip(shape, spec):
        k = math.prod(mesh_sizes[a] for a in entry)
        out.append(size // k if size >= 0 else size)
    return tuple(out)


# --------------------------------------------------------------------------------------
# combining the local rule (kinds per axis) with the spec rule


def _finish(
    op: str,
    operands: Sequence[Operand],
    out_spec: Spec | None,
    errors: list[SpmdError],
    partial_axes: Sequence[str] = (),
    base: Result | None = None,
) -> Result:
    """The result type: the local rule's kinds (R/I/P/local V) with the spec rule's
    layout on the global axes; an axis with an error is dropped (unknown)."""
    if base is None:
        base = local_propagate(op, operands)
    errs = list(base.errors) + errors
    if errors:
        # a layout error: the result is unknown (gradual), so one mistake is reported once
        return Result(SpmdType(), errs)
    in_global: set[str] = set()
    for o in operands:
        if o.type is not None:
            in_global |= global_axes(o.type)
    out: dict[str, LocalType] = dict(base.type.axes)
    placed: dict[str, int] = {}
    if out_spec is not None:
        for d, entry in enumerate(out_spec):
            for a in entry:
                placed[a] = d
    bad = set(in_global) - set(placed) - set(partial_axes)
    # axes that errored in the local rule stay dropped
    for a in list(out):
        if a in partial_axes:
            out[a] = PARTIAL
        elif a in placed:
            out[a] = shard(placed[a])
        elif a in bad:
            del out[a]
    for a in partial_axes:
        if a not in out and a in in_global and not base.errors:
            out[a] = PARTIAL
    if out_spec is not None:
        out_spec = tuple(tuple(a for a in e if a in out and out[a].kind is Kind.V) for e in out_spec)
        for a, d in placed.items():
            if a not in out:
                continue
    return Result(SpmdType.of(out, out_spec), errs)


def _dim_errors(rule: Callable[..., Result]) -> Callable[..., Result]:
    """A rule whose dims do not fit the operand (``DimError``: out of range, repeated, ...)
    gives that error, ``op: <reason>``, and an unknown result.  The operands reported are the
    rule's own: ``operands``, or ``x`` with its ``extra`` operands."""

    @functools.wraps(rule)
    def run(*args: Any, **kwargs: Any) -> Result:
        try:
            return rule(*args, **kwargs)
        except DimError as e:
            import inspect  # only on an error: importing it costs mypy's runs ~5 ms

            bound = inspect.signature(rule).bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            operands = a["operands"] if "operands" in a else [a["x"], *a.get("extra", ())]
            return _finish(a["op"], operands, None, [SpmdError(CODE, f"{a['op']}: {e}")])

    return run


def _all_local(op: str, operands: Sequence[Operand]) -> bool:
    return not any(is_global(o.type) for o in operands)


def _mixing_errors(op: str, operands: Sequence[Operand]) -> list[SpmdError]:
    """A global axis on which a spec-less (local) operand varies: no meaning."""
    gaxes: dict[str, Operand] = {}
    for o in operands:
        if o.type is not None:
            for a in global_axes(o.type):
                gaxes.setdefault(a, o)
    errs = []
    for o in operands:
        if o.type is None or is_global(o.type):
            continue
        for a, lt in o.type.axes:
            if a in gaxes and lt.kind is Kind.V:
                g = gaxes[a]
                errs.append(SpmdError(
                    CODE,
                    f'{op} mixes the global tensor {_desc(g)}, sharded on "{a}", with {_desc(o)}, '
                    f'which varies on "{a}" without a partition spec (a local value): declare its '
                    f"layout with spmd.declare({o.text}, Tensor[PS[...], ...]) or do the op "
                    f"inside spmd.local_map",
                ))
    return errs


def _enter(op: str, operands: Sequence[Operand], *, mixing: bool = False,
           **params: Any) -> Result | None:
    """The common start of a global rule: the local rule when no operand is global, the
    error for a non-literal parameter, with ``mixing`` the local kinds' mixing errors
    (:func:`_mixing_errors`), else None (the rule goes on)."""
    if _all_local(op, operands):
        return local_propagate(op, operands)
    early = _guard(op, operands, **params)
    if early is None and mixing:
        mix = _mixing_errors(op, operands)
        if mix:
            return _finish(op, operands, None, mix)
    return early


def _guard(op: str, operands: Sequence[Operand], **params: Any) -> Result | None:
    """Errors for non-literal parameters (global mode only)."""
    g = next((o for o in operands if is_global(o.type)), None)
    if g is None:
        return None
    for k, v in params.items():
        if v is UNKNOWN or (isinstance(v, (tuple, list)) and any(x is UNKNOWN for x in v)):
            err = _nonliteral(op, k, g)
            return _finish(op, operands, None, [err])
    return None


# --------------------------------------------------------------------------------------
# einsum family


def _label(op: str, c: str, labels: Sequence[str], operands: Sequence[Operand]) -> str:
    """``label "j"`` for an einsum; ``dim 1 of h`` for matmul/linear (their labels are ours)."""
    if op == "einsum":
        return f'label "{c}"'
    for lab, o in zip(labels, operands):
        if c in lab:
            return f"dim {lab.index(c)} of {o.text}"
    return f'label "{c}"'


def _align_fix(a: Operand, a_sp: Spec, a_dim: int, b: Operand, b_sp: Spec, b_dim: int) -> str:
    """Two operands shard one (aligned) dim differently: the redistribute that makes them
    agree.  First choice: ``b`` takes ``a``'s entry there (or, where ``a`` leaves the dim
    unsharded, ``a`` takes ``b``'s); where that would put a mesh axis on two dims of the
    operand (``x @ w`` with x's batch and w's rows both on "dp": gather w's rows, not shard
    x's features), the other way round; else gather the dim in both."""
    ea, eb = a_sp[a_dim], b_sp[b_dim]
    ways = [(b, b_sp, b_dim, ea), (a, a_sp, a_dim, eb)]
    for o, sp, d, to in (ways if ea else ways[::-1]):
        dst = tuple(to if i == d else e for i, e in enumerate(sp))
        if _axes_once(dst):
            return redistribute_fix(o, sp, dst)
    return " and ".join(redistribute_fix(o, sp, _unshard(sp, [d])) for o, sp, d, _ in ways)


def _axes_once(spec: Spec) -> bool:
    """No mesh axis shards two dims (a valid partition spec)."""
    axes = [a for entry in spec for a in entry]
    return len(axes) == len(set(axes))


def _partial_fix(call: str, axes: Sequence[str]) -> str:
    return call[:-1] + f", out_partial_axes={_fmt_axes(tuple(axes))})"


def _einsum_core(
    op: str,
    labels: list[str],
    out_labels: str,
    operands: Sequence[Operand],
    out_partial_axes: tuple[str, ...],
    call: str,
) -> tuple[Spec | None, list[SpmdError]]:
    errors: list[SpmdError] = []
    specs = [o.type.spec if o.type is not None else None for o in operands]
    # label -> (axes, operand index) of the first operand that has it with a spec
    label_axes: dict[str, tuple[tuple[str, ...], int]] = {}
    for i, (lab, sp) in enumerate(zip(labels, specs)):
        if sp is None:
            continue
        for c, entry in zip(lab, sp):
            if c not in label_axes:
                label_axes[c] = (entry, i)
                continue
            first, j = label_axes[c]
            if first != entry:
                a, b = operands[j], operands[i]
                if first and entry:
                    why = f"on {_fmt_entry(first)} in {a.text} and on {_fmt_entry(entry)} in {b.text}"
                else:
                    why = (f"on {_fmt_entry(first or entry)} in {(a if first else b).text} "
                           f"but not in {(b if first else a).text}")
                a_sp = specs[j] or ()
                fix = _align_fix(a, a_sp, labels[j].index(c), b, sp, lab.index(c))
                errors.append(SpmdError(
                    CODE,
                    f'{op}: {_label(op, c, labels, operands)} is sharded {why} ({_desc(a, True)}, {_desc(b, True)}); the locals do '
                    f"not line up: shard both the same way, e.g. {fix}",
                ))
                label_axes[c] = (first or entry, j)
    if errors:
        return None, errors
    # a mesh axis on two labels of one result/operand
    axis_label: dict[str, str] = {}
    for c, (entry, i) in label_axes.items():
        for a in entry:
            if a in axis_label and axis_label[a] != c:
                errors.append(SpmdError(
                    CODE,
                    f'{op}: mesh axis "{a}" shards both {_label(op, axis_label[a], labels, operands)} '
                    f'and {_label(op, c, labels, operands)}; '
                    f"a mesh axis may shard one dim: redistribute one operand so that "
                    f'"{a}" shards a single label',
                ))
            axis_label.setdefault(a, c)
    if errors:
        return None, errors
    # the broadcast case: an operand lacking a label sharded on an axis must not vary on it
    for i, (o, lab) in enumerate(zip(operands, labels)):
        if o.type is None:
            continue
        for c, (entry, j) in label_axes.items():
            if c in lab:
                continue
            for a in entry:
                lt = o.type.get(a)
                if lt is not None and lt.kind is Kind.V:
                    errors.append(SpmdError(
                        CODE,
                        f'{op}: {operands[j].text} shards {_label(op, c, labels, operands)} on "{a}", '
                        f'which {o.text} lacks, '
                        f'but {_desc(o)} varies on "{a}": it would be broadcast along a sharded dim '
                        f"with different values per rank"
                        + _broadcast_fix(o.text, a, _label(op, c, labels, operands)),
                    ))
    if errors:
        return None, errors
    contracted = [c for c in label_axes if c not in out_labels and label_axes[c][0]]
    needed: list[str] = []
    for c in contracted:
        for a in label_axes[c][0]:
            if a not in needed:
                needed.append(a)
    missing = [a for a in needed if a not in out_partial_axes]
    if missing:
        c = next(c for c in contracted if any(a in missing for a in label_axes[c][0]))
        src_i = label_axes[c][1]
        errors.append(SpmdError(
            CODE,
            f'{op} contracts {_label(op, c, labels, operands)}, sharded on {_fmt_axes(tuple(missing))} '
            f"({_desc(operands[src_i], True)}): each rank computes only a partial sum over "
            f"{_fmt_axes(tuple(missing))}; global SPMD never makes Partial implicitly: say so with "
            f"{_partial_fix(call, tuple(dict.fromkeys(tuple(out_partial_axes) + tuple(missing))))} "
            f"(then all_reduce(..., {_fmt_axes(tuple(missing))}, src=P, dst=R) when the full value "
            f"is needed), or all_gather the contracted dim first",
        ))
        return None, errors
    extra = [a for a in out_partial_axes if a not in needed]
    for a in extra:
        errors.append(SpmdError(
            CODE,
            f'{op}: out_partial_axes names "{a}", but no contracted label is sharded on "{a}": '
            f"the result would not be a partial sum there; drop \"{a}\" from out_partial_axes",
        ))
    if errors:
        return None, errors
    out_spec = tuple(label_axes.get(c, ((), 0))[0] for c in out_labels)
    return out_spec, errors


def _texts(operands: Sequence[Operand]) -> str:
    return ", ".join(o.text for o in operands)


def einsum(
    equation: str,
    operands: Sequence[Operand],
    *,
    out_partial_axes: str | Sequence[str] | None = None,
    op: str = "einsum",
    call: str | None = None,
) -> Result:
    """The einsum rule (SPEC section 6)::

        1. a contracted label may be sharded only on axes named in out_partial_axes
           (then the result is P there): Partial never appears implicitly;
        2. a sharded label is sharded the same way (same axes, same order) in every
           operand that has it; an operand lacking it must not vary on that axis;
        3. no mesh axis shards two labels.

        einsum("ij,jk->ik", a: PS["dp", None], w: PS[None, "tp"])  ->  PS["dp", "tp"]
        einsum("ij,jk->ik", h: PS[None, "tp"], w: PS["tp", None],
               out_partial_axes="tp")                               ->  PS[None, None], P["tp"]
    """
    early = _enter(op, operands, equation=equation, out_partial_axes=out_partial_axes)
    if early is not None:
        return early
    opa = _axes_tuple(out_partial_axes)
    call = call or f'spmd.einsum("{equation}", {_texts(operands)})'
    mix = _mixing_errors(op, operands)
    if mix:
        return _finish(op, operands, None, mix)
    if any(o.type is not None and not o.type and o.type.spec is None for o in operands):
        # an untyped operand (gradual): its layout is unknown, so is the result's
        return Result(SpmdType(), [])
    if any(o.type is not None and o.type.spec is None and o.type for o in operands):
        # a typed local operand without rank: cannot place its labels
        lo = next(o for o in operands if o.type is not None and o.type.spec is None and o.type)
        err = SpmdError(CODE, f"{op}: {_desc(lo)} has no partition spec (so no rank) beside global "
                              f"operands: declare its layout with Tensor[PS[...], ...]")
        return _finish(op, operands, None, [err])
    ranks = [len(o.type.spec) if o.type is not None and o.type.spec is not None else -1 for o in operands]
    try:
        if any(r < 0 for r in ranks):
            raise DimError(f"{op}: an operand of unknown rank (untyped) beside global operands: "
                            f"annotate it with Tensor[PS[...]]")
        labels, out_labels = parse_equation(equation, ranks)
    except DimError as e:
        return _finish(op, operands, None, [SpmdError(CODE, str(e))])
    out_spec, errors = _einsum_core(op, labels, out_labels, operands, opa, call)
    return _finish(op, operands, out_spec, errors, partial_axes=opa if out_spec is not None else ())


def _vector_product_equation(op: str, operands: Sequence[Operand], p: Mapping[str, Any]) -> str | None:
    """inner / tensordot / linalg.vecdot as an einsum at the operands' ranks (their specs);
    None where a rank or the dims are unknown (then the op has no rule here)."""
    ranks = [rank(o.type) if o.type is not None else None for o in operands]
    if None in ranks:
        return None
    values: dict[str, object] = {}
    if op == "tensordot":
        values["dims"] = p.get("dims", 2)
    elif op == "linalg_vecdot":
        dim = p.get("dim", -1)
        if isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
            dim -= max(ranks)  # type: ignore[type-var]  # counted from the broadcast front
        values["dim"] = dim
    c = make_contraction(op, values)
    return equation_at(c, ranks) if c is not None else None


def _matmul_equation(ra: int, rb: int) -> str:
    if ra == 0 or rb == 0:
        raise DimError("matmul needs operands of rank >= 1")
    if ra == 1 and rb == 1:
        return "k,k->"
    if ra == 1:
        return "k,...km->...m"
    if rb == 1:
        return "...nk,k->...n"
    return "...nk,...km->...nm"


def matmul(
    a: Operand,
    b: Operand,
    *,
    out_partial_axes: str | Sequence[str] | None = None,
    op: str = "matmul",
) -> Result:
    """``a @ b`` / torch.matmul / mm / bmm / mv / dot as an einsum (batch dims broadcast)."""
    operands = [a, b]
    if _all_local(op, operands):
        return local_propagate(op, operands)
    ra, rb = (rank(o.type) if o.type is not None else None for o in operands)
    if ra is None or rb is None:
        return einsum("?", operands, out_partial_axes=out_partial_axes, op=op)
    try:
        eq = _matmul_equation(ra, rb)
    except DimError as e:
        return _finish(op, operands, None, [SpmdError(CODE, str(e))])
    fix = {"matmul": "spmd.matmul", "mm": "spmd.matmul", "bmm": "spmd.matmul",
           "mv": "spmd.matmul", "dot": "spmd.matmul"}.get(op, "spmd.matmul")
    first = receiver(a.text) + ".conj()" if op == "vdot" else a.text  # vdot conjugates a
    return einsum(eq, operands, out_partial_axes=out_partial_axes, op=op,
                  call=f"{fix}({first}, {b.text})")


def linear(
    x: Operand,
    w: Operand,
    bias: Operand | None = None,
    *,
    out_partial_axes: str | Sequence[str] | None = None,
) -> Result:
    """``linear(x, w, bias)`` = ``einsum("...i,oi->...o", x, w) + bias``; with
    ``out_partial_axes`` the bias must itself be P on those axes."""
    operands = [x, w] + ([bias] if bias is not None else [])
    if _all_local("linear", operands):
        return local_propagate("linear", operands)
    rx = rank(x.type) if x.type is not None else None
    call = f"spmd.linear({x.text}, {w.text})"
    r = einsum("...i,oi->...o" if rx else "?", [x, w], out_partial_axes=out_partial_axes,
               op="linear", call=call)
    if bias is None or r.errors:
        if bias is not None and r.errors:
            r = Result(SpmdType(), r.errors)
        return r
    mm = Operand(r.type, f"linear({x.text}, {w.text})")
    r2 = elementwise("add", [mm, bias])
    errors = list(r.errors)
    for e in r2.errors:
        if e.code == "spmd-partial-affine":
            e = SpmdError(e.code, f"linear: the bias {_desc(bias)} is added to a result that is "
                                  f"Partial on {_fmt_axes(_axes_tuple(out_partial_axes))}: an R bias "
                                  f"would be summed once per rank; add it after the reduction, or "
                                  f"give a bias that is P there")
        errors.append(e)
    return Result(r2.type, errors)


ATTENTION = frozenset({"scaled_dot_product_attention"})


def attention(q: Operand, k: Operand, v: Operand, mask: Operand | None = None, *,
              is_causal: bool = False, op: str = "scaled_dot_product_attention") -> Result:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=...)`` as the einsums
    it is (q ``[..., L, E]``, k ``[..., S, E]``, v ``[..., S, Ev]``)::

        scores = einsum("...le,...se->...ls", q, k)     E contracted: must be whole
        p = softmax(scores + attn_mask, dim=-1)          S: must be whole (every key)
        out = einsum("...ls,...sv->...lv", p, v)         S contracted again

        q: PS["dp", "tp", None, None] (heads on tp), k, v alike  ->  PS["dp", "tp", None, None]
        q: PS[None, None, "cp", None] (queries on cp), k, v whole  ->  PS[None, None, "cp", None]

    The batch dims (batch, heads) are sharded the same way in q, k and v; the query dim L
    may be sharded (each rank attends its own queries to every key) unless ``is_causal``
    (or an ``is_causal`` the caller cannot read, :data:`UNKNOWN`: it may be True):
    the causal mask counts positions from each rank's first query, which is the global
    position only on the first rank (pass an ``attn_mask`` sharded like the queries
    instead); v's Ev may be sharded (the output is sharded there).  Sharded keys (ring
    attention) need communication: gather them first."""
    operands = [q, k, v] + ([mask] if mask is not None else [])
    if _all_local(op, operands):
        return local_propagate(op, operands)
    mix = _mixing_errors(op, operands)
    if mix:
        return _finish(op, operands, None, mix)
    if any(o.type is not None and o.type.spec is None for o in (q, k, v)):
        # an untyped or spec-less operand: what einsum makes of it over all three (the
        # layout unknown, or the error asking for its spec)
        return einsum("...le,...se,...sv->...lv", [q, k, v], op=op)
    for o, d, what in ((q, -1, "the head dim E of the queries, contracted with the keys"),
                       (k, -1, "the head dim E of the keys, contracted with the queries"),
                       (k, -2, "the key sequence dim S (the softmax runs over every key)"),
                       (v, -2, "the key sequence dim S of the values (contracted with the "
                               "attention weights)")):
        sp = o.type.spec  # type: ignore[union-attr]
        if len(sp) < 2:
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: {_desc(o)} has rank {len(sp)}; attention takes [..., L or S, E] tensors")])
        dd = len(sp) + d
        if sp[dd]:
            return _finish(op, operands, None, [SpmdError(
                CODE,
                f"{op} needs {what} whole on each rank, but dim {dd} of {o.text} is "
                f"{_sharded(sp[dd])} ({_desc(o, True)}); gather it first: "
                f"{redistribute_fix(o, sp, _unshard(sp, [dd]))} (attention over sharded "
                f"keys, ring attention, is explicit communication: write it in spmd.local_map)",
            )])
    call = f"{op}({_texts([q, k, v])})"
    scores = einsum("...le,...se->...ls", [q, k], op=op, call=call)
    if scores.errors:
        return _finish(op, operands, None, list(scores.errors))
    s_op = Operand(scores.type, f"{q.text} @ {k.text}.mT")
    if mask is not None and mask.type is not None:
        masked = elementwise(op, [s_op, mask])
        if masked.errors:
            return _finish(op, operands, None, list(masked.errors))
        s_op = Operand(masked.type, s_op.text)
    sp_scores = s_op.type.spec  # type: ignore[union-attr]
    assert sp_scores is not None
    ql = len(q.type.spec) - 2  # type: ignore[union-attr]
    if is_causal is not False and q.type.spec[ql]:  # type: ignore[union-attr]
        qsp = q.type.spec  # type: ignore[union-attr]
        given = "is_causal=True" if is_causal is True else "an is_causal that may be True"
        return _finish(op, operands, None, [SpmdError(
            CODE,
            f"{op} with {given}: the query dim {ql} of {q.text} is {_sharded(qsp[ql])} "
            f"({_desc(q, True)}), and the causal mask counts positions from each rank's first query, "
            f"which is the global position only on the first rank; pass an attn_mask sharded "
            f"like the queries instead, or gather the queries first "
            f"({redistribute_fix(q, qsp, _unshard(qsp, [ql]))})",
        )])
    out = einsum("...ls,...sv->...lv", [s_op, v], op=op, call=call)
    if out.errors:
        return _finish(op, operands, None, list(out.errors))
    return _finish(op, operands, out.type.spec, [])


# --------------------------------------------------------------------------------------
# elementwise with broadcasting


def elementwise(op: str, operands: Sequence[Operand], *, sizes_one: Sequence[Sequence[bool]] | None = None,
                sizes_exact: bool = True) -> Result:
    """Elementwise ops (``+``, ``*``, ``where``, ``relu``...) with broadcasting.

    Dims are aligned from the right; every operand that has a dim (and whose dim is
    not of size 1, when the adapter knows sizes) shards it the same way::

        a: PS["dp", None] + b: PS[None]      ->  PS["dp", None]   (b broadcasts over dim 0;
                                                                    b is R on "dp")
        a: PS["dp", None] + b: PS[None, None] ->  error: redistribute b to PS["dp", None]

    Operands laid out differently get one error naming every dim that differs, whose fix
    moves operands to one operand's layout (:func:`_layout_error`).
    """
    if _all_local(op, operands):
        return local_propagate(op, operands)
    mix = _mixing_errors(op, operands)
    if mix:
        return _finish(op, operands, None, mix)
    specs = [(i, o) for i, o in enumerate(operands) if o.type is not None and o.type.spec is not None]
    r = max(len(o.type.spec) for _, o in specs)  # type: ignore[union-attr]
    out: list[tuple[str, ...] | None] = [None] * r
    owner: list[int] = [-1] * r
    says = {i: _elementwise_dims(o, r, sizes_one[i] if sizes_one is not None and i < len(sizes_one) else ())
            for i, o in specs}
    conflicts: list[tuple[int, int, int]] = []  # (result dim, first operand, other operand)
    for i, _ in specs:
        for od, entry in says[i].items():
            if out[od] is None:
                out[od], owner[od] = entry, i
            elif out[od] != entry:
                conflicts.append((od, owner[od], i))
    if conflicts:
        return _finish(op, operands, None, [_layout_error(op, operands, specs, says, conflicts, r,
                                                          sizes_known=sizes_exact)])
    spec = tuple(e or () for e in out)
    errors = _broadcast_errors(op, operands, spec, owner, sizes_one) or _partial_into_blocks(
        op, operands, spec)
    if errors:
        return _finish(op, operands, None, errors)
    seen: dict[str, int] = {}
    for d, e in enumerate(spec):
        for a in e:
            if a in seen:
                return _finish(op, operands, None, [SpmdError(
                    CODE, f'{op}: mesh axis "{a}" would shard dims {seen[a]} and {d} of the result')])
            seen[a] = d
    return _finish(op, operands, spec, [])


def _partial_into_blocks(op: str, operands: Sequence[Operand], spec: Spec) -> list[SpmdError]:
    """A Partial operand on an axis that shards the result: each rank's summand would land in
    its own block.  The local rule rejects Partial beside the Varying operand that shards it,
    but an overwritten one (``x.copy_(p)``) is not among its operands."""
    placed = {a: d for d, e in enumerate(spec) for a in e}
    roles = classify(op)
    for i, o in enumerate(operands):
        if o.type is None or (o.role or roles.role(i)) is Role.OVERWRITTEN:
            continue
        for a, lt in o.type.axes:
            if lt.kind is Kind.P and a in placed:
                return [SpmdError(
                    CODE,
                    f'{op}: {_desc(o)} is Partial on "{a}", which shards dim {placed[a]} of the '
                    f"result: each rank would write its summand into its own block; reduce it "
                    f'first (all_reduce({bare(o.text)}, "{a}", src=P, dst=R))',
                )]
    return []


def _elementwise_dims(o: Operand, r: int, ones: Sequence[bool]) -> dict[int, tuple[str, ...]]:
    """The result dims (of rank ``r``) whose layout the operand decides, with its entry there:
    its dims aligned from the right, except a dim of size 1 it does not shard (broadcast)."""
    sp = o.type.spec  # type: ignore[union-attr]
    off = r - len(sp)
    return {off + d: e for d, e in enumerate(sp) if not (d < len(ones) and ones[d] and not e)}


def _layout_error(op: str, operands: Sequence[Operand], specs: Sequence[tuple[int, Operand]],
                  says: Mapping[int, Mapping[int, tuple[str, ...]]],
                  conflicts: Sequence[tuple[int, int, int]], r: int, *,
                  sizes_known: bool = True) -> SpmdError:
    """Operands of an elementwise op laid out differently: one error naming every dim that
    differs, and the fix that gives them one layout.  Each operand's layout is tried as the
    common one (the dims it lacks taken from the others); the fix redistributes the other
    operands to it.  The cheapest wins: fewest axes gathered (sharding an unsharded dim is a
    local slice), then fewest operands moved, then the earliest operand's layout (so of two
    operands laid out alike in cost, the second moves to the first's layout)."""
    by_dim: dict[int, tuple[int, dict[tuple[str, ...], list[str]]]] = {}
    for od, j, i in sorted(conflicts):
        by_dim.setdefault(od, (j, {}))[1].setdefault(says[i][od], []).append(operands[i].text)
    clauses = []
    for n, (od, (j, others)) in enumerate(by_dim.items()):
        what = f"dim {od} of the result" if n == 0 else f"dim {od}"
        theirs = " and ".join(f"{_sharded(e)} in {' and '.join(texts)}" for e, texts in others.items())
        clauses.append(f"{what} is {_sharded(says[j][od])} in {operands[j].text} but {theirs}")
    why = clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + ", and " + clauses[-1]
    involved = sorted({k for _, j, i in conflicts for k in (j, i)})
    descs = ", ".join(_desc(operands[k], True) for k in involved)

    def moves(layout: Sequence[tuple[str, ...]]) -> list[tuple[Operand, Spec, Spec]]:
        out = []
        for i, o in specs:
            sp = o.type.spec  # type: ignore[union-attr]
            off = r - len(sp)
            dst = tuple(layout[off + d] if off + d in says[i] else e for d, e in enumerate(sp))
            if dst != sp:
                out.append((o, sp, dst))
        return out

    def gathers(ms: Sequence[tuple[Operand, Spec, Spec]]) -> int:
        return sum(1 for _, sp, dst in ms for d, e in enumerate(sp) for a in e if a not in dst[d])

    best: tuple[tuple[int, int, int], list[tuple[Operand, Spec, Spec]]] | None = None
    # an in-place op (x.addcmul_(a, b)) writes into x: the others take x's layout, never x
    # the others' (a redistributed x is a new tensor, which would take the update instead)
    kept = 0 if is_inplace(op) and specs and specs[0][0] == 0 else None
    if kept is not None:
        layout = [says[0].get(od, ()) for od in range(r)]
        best = ((0, 0, 0), moves(layout))
    for n, (k, _) in enumerate(specs):
        if kept is not None:
            break
        layout: list[tuple[str, ...]] = [()] * r
        for od in range(r):
            first = next((says[i][od] for i, _ in specs if od in says[i]), ())
            layout[od] = says[k].get(od, first)
        if not _axes_once(tuple(layout)):
            continue
        ms = moves(layout)
        key = (gathers(ms), len(ms), n)
        if best is None or key < best[0]:
            best = (key, ms)
    if best is None:
        # no operand's layout fits the others (a mesh axis would shard two dims): gather
        # every dim the operands do not agree on
        agreed = [set(says[i][od] for i, _ in specs if od in says[i]) for od in range(r)]
        layout = [next(iter(s)) if len(s) == 1 else () for s in agreed]
        if not _axes_once(tuple(layout)):
            layout = [()] * r
        best = ((0, 0, 0), moves(layout))
    # one call per operand as written (x.addcmul_(g, g): g once)
    fix = " and ".join(dict.fromkeys(redistribute_fix(o, sp, dst) for o, sp, dst in best[1]))
    sharded_here = next(((o, d) for o, sp, dst in best[1] for d, e in enumerate(sp)
                         if not e and dst[d]), None)
    if sharded_here is not None and not sizes_known:
        # statically the sizes are unknown: a broadcast (size-1) dim looks unsharded, and
        # sharding a size-1 dim fails at run time
        o, d = sharded_here
        fix += (f" (if dim {d} of {o.text} has size 1, show it instead: unsqueeze({d}) or None "
                f"indexing in the operand broadcasts it; a size-1 dim cannot be sharded)")
    if kept is not None:
        return SpmdError(CODE, f"{op}: {why} ({descs}); elementwise ops need the same layout, "
                               f"here {bare(operands[0].text)}'s ({op} writes into it in place: redistribute "
                               f"the other operands, not it): {fix}")
    return SpmdError(CODE, f"{op}: {why} ({descs}); elementwise ops need the same layout: {fix}")


def _broadcast_errors(op: str, operands: Sequence[Operand], spec: Spec, owner: Sequence[int],
                      sizes_one: Sequence[Sequence[bool]] | None) -> list[SpmdError]:
    """An operand broadcast along a sharded dim of the result (it lacks the dim, or has
    size 1 there) must not vary on the axes sharding it: each rank would broadcast its
    own values, so the locals would not be blocks of one global tensor."""
    r = len(spec)
    errors: list[SpmdError] = []
    for i, o in enumerate(operands):
        if o.type is None or o.type.spec is None:
            continue
        sp = o.type.spec
        off = r - len(sp)
        ones = sizes_one[i] if sizes_one is not None and i < len(sizes_one) else ()
        for od, entry in enumerate(spec):
            if not entry:
                continue
            d = od - off
            if d >= 0 and not (d < len(ones) and ones[d] and not sp[d]):
                continue  # o has this dim (its layout was compared above)
            how = "lacks" if d < 0 else f"has size 1 on (its dim {d})"
            for a in entry:
                lt = o.type.get(a)
                if lt is None or lt.kind is not Kind.V:
                    continue
                src = operands[owner[od]] if 0 <= owner[od] < len(operands) else o
                errors.append(SpmdError(
                    CODE,
                    f'{op}: {src.text} shards dim {od} of the result on "{a}", which {o.text} '
                    f'{how} and is broadcast along, but {_desc(o)} varies on "{a}": each rank '
                    f"would broadcast its own values along a sharded dim, so the locals are not "
                    f"blocks of one global tensor" + _broadcast_fix(o.text, a, f"dim {od}"),
                ))
                return errors
    return errors


# --------------------------------------------------------------------------------------
# reductions and ops along a dim

LINEAR_REDUCTIONS = frozenset({"sum", "nansum"})
REDUCTIONS = frozenset("""
sum nansum mean nanmean amax amin max min prod logsumexp std var norm linalg_norm linalg_vector_norm
argmax argmin
all any count_nonzero median nanmedian kthvalue mode
""".split())
ALONG_DIM = frozenset("softmax log_softmax softmin cumsum cumprod logcumsumexp normalize".split())
# Ops that pick or order values along one dim (the dim whole on each rank, the others keep
# their sharding), each with torch's default dim; ``multinomial`` samples along the last.
# Their index results index the unsharded dim, so they carry the same spec::
#
#     x.topk(k, dim=-1):  PS["dp", None] -> (PS["dp", None], PS["dp", None])
#     x.topk(k, dim=-1):  PS["dp", "tp"] -> error: gather dim 1 first
SELECT_ALONG_DIM: dict[str, int | None] = {
    "topk": -1, "sort": -1, "argsort": -1, "msort": 0, "cummax": None, "cummin": None,
    "multinomial": -1,
}
# the default dim of the reductions whose ``dim=None`` is not "all dims"
REDUCTION_DEFAULT_DIM = {"kthvalue": -1, "mode": -1}
NORMALIZE_TRAILING = frozenset("layer_norm rms_norm".split())


def _one(operands: Sequence[Operand]) -> Operand:
    return next(o for o in operands if o.type is not None)


@_dim_errors
def reduction(
    op: str,
    x: Operand,
    *,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    out_partial_axes: str | Sequence[str] | None = None,
    extra: Sequence[Operand] = (),
) -> Result:
    """``sum/mean/amax/...`` over literal dims (``dim=None``: all dims).

    A reduced dim must be unsharded, except for ``spmd.sum`` with the dim's axes in
    ``out_partial_axes`` (the result is P there)::

        spmd.sum(x: PS[None, "tp"], 1, out_partial_axes="tp")  ->  PS[None], P["tp"]
        x.sum(1)                                                ->  error, with that fix
    """
    operands = [x, *extra]
    early = _enter(op, operands, dim=dim, out_partial_axes=out_partial_axes)
    if early is not None:
        return early
    opa = _axes_tuple(out_partial_axes)
    assert x.type is not None and x.type.spec is not None
    sp = x.type.spec
    r = len(sp)
    dims = list(range(r)) if dim is None else [_norm_dim(d, r) for d in _dims_tuple(dim)]
    sharded = [(d, sp[d]) for d in dims if sp[d]]
    dim_text = "" if dim is None else f", {dim if isinstance(dim, int) else tuple(dim)}"
    keep_text = ", keepdim=True" if keepdim else ""
    errors: list[SpmdError] = []
    needed = tuple(dict.fromkeys(a for _, e in sharded for a in e))
    if sharded and op in LINEAR_REDUCTIONS:
        missing = [a for a in needed if a not in opa]
        if missing:
            bad = [(d, e) for d, e in sharded if any(a in missing for a in e)]
            call = f"spmd.sum({x.text}{dim_text}{keep_text}, out_partial_axes={_fmt_axes(needed)})"
            errors.append(SpmdError(
                CODE,
                f"{op} over {_dims_text(bad)}, sharded on {_fmt_axes(tuple(missing))} ({_desc(x, True)}): "
                f"each rank sums only its shard; global SPMD never makes Partial implicitly: write "
                f"{call} (then all_reduce(..., {_fmt_axes(tuple(missing))}, src=P, dst=R) for the "
                f"full value), or gather {_these(bad)} first: "
                f"{redistribute_fix(x, sp, _unshard(sp, [d for d, _ in bad]))}",
            ))
    elif sharded:
        if op in ("mean", "nanmean"):
            how = (f"use spmd.sum({x.text}{dim_text}{keep_text}, out_partial_axes={_fmt_axes(needed)}) "
                   f"divided by the global size, or gather {_these(sharded)} first: ")
        else:
            how = f"gather {_these(sharded)} first: "
        errors.append(SpmdError(
            CODE,
            f"{op} over {_dims_text(sharded)}, sharded on {_fmt_axes(needed)} ({_desc(x, True)}): each "
            f"rank would reduce only its shard; "
            f"{how}{redistribute_fix(x, sp, _unshard(sp, [d for d, _ in sharded]))}",
        ))
    if not errors:
        extra_axes = [a for a in opa if a not in needed]
        if extra_axes and op in LINEAR_REDUCTIONS:
            errors.append(SpmdError(
                CODE,
                f'{op}: out_partial_axes names "{extra_axes[0]}", but no reduced dim is sharded on '
                f'"{extra_axes[0]}"; drop it from out_partial_axes',
            ))
        elif opa and op not in LINEAR_REDUCTIONS:
            errors.append(SpmdError(CODE, f"{op}: out_partial_axes is only meaningful for sum"))
    if errors:
        return _finish(op, operands, None, errors)
    if keepdim:
        out_spec = _unshard(sp, dims)
    else:
        out_spec = tuple(e for d, e in enumerate(sp) if d not in dims)
    return _finish(op, operands, out_spec, [], partial_axes=needed)


def _dims_tuple(dim: int | Sequence[int]) -> tuple[int, ...]:
    return (dim,) if isinstance(dim, int) else tuple(dim)


@_dim_errors
def along_dim(op: str, x: Operand, *, dim: int | None = None, normalized_ndim: int | None = None,
              extra: Sequence[Operand] = ()) -> Result:
    """softmax/log_softmax/cumsum/normalize along ``dim``, layer_norm/rms_norm over the
    last ``normalized_ndim`` dims: those dims must be unsharded; the spec is kept."""
    operands = [x, *extra]
    if _all_local(op, operands):
        return local_propagate(op, operands)
    if op == "normalize" and dim is None:
        dim = 1
    guard = _guard(op, operands, dim=dim, normalized_ndim=normalized_ndim)
    if guard is not None:
        return guard
    assert x.type is not None and x.type.spec is not None
    sp = x.type.spec
    r = len(sp)
    if op in NORMALIZE_TRAILING:
        n = normalized_ndim if normalized_ndim is not None else 1
        dims = list(range(max(0, r - n), r))
    else:
        if dim is None:
            return _finish(op, operands, None, [_nonliteral(op, "dim", x)])
        dims = [_norm_dim(dim, r)]
    bad = [d for d in dims if sp[d]]
    if bad:
        d = bad[0]
        return _finish(op, operands, None, [SpmdError(
            CODE,
            f"{op} along dim {d}, sharded on {_fmt_entry(sp[d])} ({_desc(x, True)}): it needs the whole "
            f"dim on each rank; gather it first: {redistribute_fix(x, sp, _unshard(sp, bad))}",
        )])
    # the extra operands (weights of layer_norm) are elementwise over the trailing dims
    if extra:
        r2 = elementwise(op, operands)
        return r2
    return _finish(op, operands, sp, [])


# --------------------------------------------------------------------------------------
# dim permutations


@_dim_errors
def permute(x: Operand, dims: Sequence[int], *, op: str = "permute") -> Result:
    """``permute(x, dims)``: the spec's entries move with their dims."""
    early = _enter(op, [x], dims=dims)
    if early is not None:
        return early
    assert x.type is not None and x.type.spec is not None
    sp = x.type.spec
    r = len(sp)
    nd = [_norm_dim(d, r) for d in dims]
    if sorted(nd) != list(range(r)):
        return _finish(op, [x], None, [SpmdError(
            CODE, f"{op}: {tuple(dims)} is not a permutation of the {r} dims of {_desc(x)}")])
    return _finish(op, [x], tuple(sp[d] for d in nd), [])


@_dim_errors
def transpose(x: Operand, dim0: int, dim1: int, *, op: str = "transpose") -> Result:
    early = _enter(op, [x], dim0=dim0, dim1=dim1)
    if early is not None:
        return early
    r = rank(x.type)  # type: ignore[arg-type]
    assert r is not None
    a, b = _norm_dim(dim0, r), _norm_dim(dim1, r)
    order = list(range(r))
    order[a], order[b] = order[b], order[a]
    return permute(x, order, op=op)


def reverse_dims(x: Operand, *, op: str = "T") -> Result:
    """``x.T`` (all dims reversed), ``x.t()`` (rank <= 2)."""
    if _all_local(op, [x]):
        return local_propagate(op, [x])
    r = rank(x.type)  # type: ignore[arg-type]
    assert r is not None
    return permute(x, list(reversed(range(r))), op=op)


def matrix_transpose(x: Operand, *, op: str = "mT") -> Result:
    """``x.mT``: the last two dims swapped."""
    if _all_local(op, [x]):
        return local_propagate(op, [x])
    r = rank(x.type)  # type: ignore[arg-type]
    assert r is not None
    if r < 2:
        return _finish(op, [x], None, [SpmdError(CODE, f"{op} needs rank >= 2 ({_desc(x, True)})")])
    return transpose(x, -2, -1, op=op)


@_dim_errors
def movedim(x: Operand, source: int | Sequence[int], destination: int | Sequence[int], *,
            op: str = "movedim") -> Result:
    early = _enter(op, [x], source=source, destination=destination)
    if early is not None:
        return early
    r = rank(x.type)  # type: ignore[arg-type]
    assert r is not None
    src, dst = _dims_tuple(source), _dims_tuple(destination)
    src = tuple(_norm_dim(d, r) for d in src)
    dst = tuple(_norm_dim(d, r) for d in dst)
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise DimError(f"source {source} and destination {destination} do not match")
    order: list[int | None] = [None] * r
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(r) if d not in src)
    full = [o if o is not None else next(rest) for o in order]
    return permute(x, full, op=op)


# --------------------------------------------------------------------------------------
# reshapes


def _group_error(op: str, x: Operand, d: int, entry: tuple[str, ...], what: str) -> SpmdError:
    sp = x.type.spec  # type: ignore[union-attr]
    return SpmdError(
        CODE,
        f"{op} {what} dim {d}, sharded on {_fmt_entry(entry)} ({_desc(x, True)}), but it is not the "
        f"outermost factor: the locals would not be contiguous blocks of the result; gather it "
        f"first ({redistribute_fix(x, sp, _unshard(sp, [d]))}) or move it outermost",
    )


@_dim_errors
def flatten(x: Operand, *, start_dim: int = 0, end_dim: int = -1, op: str = "flatten") -> Result:
    """Merging dims start..end: only the outermost of them may be sharded; the merged
    dim takes its sharding (``[8@dp, 4] -> [32@dp]``)."""
    early = _enter(op, [x], start_dim=start_dim, end_dim=end_dim)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    r = len(sp)
    if r == 0:
        return _finish(op, [x], ((),), [])
    s, e = _norm_dim(start_dim, r), _norm_dim(end_dim, r)
    if s > e:
        return _finish(op, [x], None, [SpmdError(CODE, f"{op}: start_dim {start_dim} is after end_dim {end_dim}")])
    for d in range(s + 1, e + 1):
        if sp[d]:
            return _finish(op, [x], None, [_group_error(op, x, d, sp[d], "merges")])
    return _finish(op, [x], sp[:s] + (sp[s],) + sp[e + 1:], [])


@_dim_errors
def unflatten(x: Operand, *, dim: int, sizes: Sequence[int],
              mesh_sizes: Mapping[str, int] | None = None, op: str = "unflatten") -> Result:
    """Splitting dim into ``sizes``: a sharding goes to the outermost new dim.  The
    sizes are the local ones (what torch receives on each rank, see :func:`reshape`), so
    ``[8@dp] -> unflatten(0, (2, 2))`` on 2 ranks is ``[4@dp, 2]`` globally."""
    early = _enter(op, [x], dim=dim, sizes=sizes)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    d = _norm_dim(dim, len(sp))
    entry = sp[d]
    new = (entry,) + ((),) * (len(sizes) - 1)
    return _finish(op, [x], sp[:d] + new + sp[d + 1:], [])


def _shape_text(shape: Sequence[Any], text: str) -> str:
    return ", ".join((v.name or f"{text}.shape[{v.dim}]") if isinstance(v, SameDim) else
                     "n" if isinstance(v, _AnySize) else str(v) for v in shape)


def reshape(x: Operand, *, shape: Sequence[int], in_shape: Sequence[int | None] | None = None,
            mesh_sizes: Mapping[str, int] | None = None, op: str = "reshape") -> Result:
    """``reshape/view`` to a literal shape.

    The sizes are the ones torch receives on each rank: the *local* shape (so the same
    code runs unchanged under torchrun, where every tensor is local); the global shape
    of the result is the local one with each sharded dim times its number of shards.

    Each rank's block of a tensor sharded on dim ``d`` is, for each index of the dims
    before ``d``, one contiguous run of the row-major flattening of the dims from ``d``
    on.  A reshape keeps that when it keeps the dims before ``d`` and the sharded dim is
    the outermost of the run it reshapes; its sharding goes to the run's first output
    dim::

        [8@dp, 4, 6] -> (16, 6)                      [16@dp, 6]  (dp stays outermost)
        [8, 4@tp, 6] -> (x.shape[0], -1)             [8, 24@tp]  (dim 0 kept)
        [8, 4@tp]    -> (-1,)                        error: tp is an inner factor

    With ``in_shape`` (the local input shape: the runtime knows it) the runs are
    computed from the sizes.  Without it (statically) the runs are known when only dim 0
    is sharded (every target shape keeps it outermost), when the sharded dims lie in a
    prefix the target keeps (written as the input's own ``x.shape[i]``/``x.size(i)``,
    :class:`SameDim`), optionally plus the first dim after it; any other shape of a
    tensor sharded beyond dim 0 is an error naming ``flatten``/``unflatten`` or the
    prefix form.  Sizes the plugin cannot read are :data:`ANY_SIZE` (fine where the
    rule needs no value); a target it cannot read at all is :data:`UNKNOWN`.
    """
    if _all_local(op, [x]):
        return local_propagate(op, [x])
    if shape is UNKNOWN or (not isinstance(shape, (tuple, list))):
        return _finish(op, [x], None, [_nonliteral(op, "shape", x)])
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    expanded = expand_target(shape, len(sp))
    if expanded is None:
        return _finish(op, [x], None, [SpmdError(
            CODE, f"{op}: the target drops more dims than {_desc(x)} has")])
    shape = expanded
    if not any(sp):
        return _finish(op, [x], ((),) * len(shape), [])
    sharded = [d for d, e in enumerate(sp) if e]
    if in_shape is not None and all(isinstance(s, int) for s in in_shape) and all(
            is_literal_size(v) for v in shape):
        return _reshape_known(op, x, [int(s) for s in in_shape], shape)  # type: ignore[arg-type]
    if not shape:
        return _finish(op, [x], None, [SpmdError(
            CODE, f"{op}() of {_desc(x)} to a scalar: the tensor is sharded on "
                  f"{_fmt_entry(sp[sharded[0]])}, so it has more than one element; gather it "
                  f"first ({redistribute_fix(x, sp, _unshard(sp, sharded))})")])
    # statically: the kept prefix (x.shape[i] at position i)
    keep = kept_prefix(shape, len(sp))
    inner = [d for d in sharded if d > keep]
    if not inner:
        if keep == len(sp):  # every dim kept: the rest of the target is size-1 dims
            return _finish(op, [x], tuple(sp) + ((),) * (len(shape) - keep), [])
        if keep < len(shape):  # the rest of the input (led by dim keep) -> the rest of the target
            return _finish(op, [x], tuple(sp[:keep]) + (sp[keep],) + ((),) * (len(shape) - keep - 1), [])
        if not sp[keep]:  # the rest of the input has one element
            return _finish(op, [x], tuple(sp[:keep]), [])
        inner = [keep]
    d = inner[0]
    t = x.text
    keep_text = ", ".join(f"{t}.shape[{i}]" for i in range(d))
    return _finish(op, [x], None, [SpmdError(
        CODE,
        f"{op}({_shape_text(shape, x.text)}) of {_desc(x)}: dim {d} is sharded on {_fmt_entry(sp[d])}, "
        f"and without the input's shape the dims this shape merges and splits are unknown "
        f"(the sharded dim must stay the outermost of what it is reshaped with); name them: "
        f"keep the dims before it as {t}.{op}({keep_text}, ...) (then dim {d} leads the "
        f"reshaped rest), or write flatten(start_dim, end_dim) / unflatten(dim, sizes); "
        f"or gather the dim first ({redistribute_fix(x, sp, _unshard(sp, [d]))}). The sizes "
        f"are the local ones torch receives: for the split of a sharded dim write -1 or the "
        f"global size divided by the mesh axis size, not the global size",
    )])


def _reshape_known(op: str, x: Operand, ins: list[int], shape: list[int]) -> Result:
    """``reshape`` with the local input shape known (the runtime)."""
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    if len(ins) != len(sp):
        return _finish(op, [x], None, [SpmdError(CODE, f"{op}: the input has {len(ins)} dims, its type {len(sp)}")])
    total = math.prod(ins)
    outs = resolve_sizes(shape, total)
    assert outs is not None
    if math.prod(outs) != total:
        return _finish(op, [x], None, [SpmdError(CODE, f"{op}: shape {tuple(shape)} does not fit {tuple(ins)}")])
    out_spec: list[tuple[str, ...]] = [()] * len(outs)
    for gi, gj in reshape_runs(ins, outs):
        sharded = [d for d in gi if sp[d]]
        if not sharded:
            continue
        d = sharded[0]
        to = run_shard_dim(ins, (gi, gj), d)
        if len(sharded) > 1 or (to is None and gj):
            bad = sharded[1] if len(sharded) > 1 else d
            what = "merges" if len(gi) > 1 else "splits"
            return _finish(op, [x], None, [_group_error(op, x, bad, sp[bad], what)])
        if to is None:
            return _finish(op, [x], None, [_group_error(op, x, d, sp[d], "drops")])
        out_spec[to] = sp[d]
    return _finish(op, [x], tuple(out_spec), [])


@_dim_errors
def squeeze(x: Operand, *, dim: int | Sequence[int] | None = None, op: str = "squeeze") -> Result:
    if _all_local(op, [x]):
        return local_propagate(op, [x])
    if dim is None:
        return _finish(op, [x], None, [_nonliteral(op, "dim", x)])
    guard = _guard(op, [x], dim=dim)
    if guard is not None:
        return guard
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    dims = {_norm_dim(d, len(sp)) for d in _dims_tuple(dim)}
    bad = [d for d in dims if sp[d]]
    if bad:
        return _finish(op, [x], None, [SpmdError(
            CODE, f"{op} of dim {bad[0]}, sharded on {_fmt_entry(sp[bad[0]])} ({_desc(x, True)}): a "
                  f"sharded dim is not of size 1; squeeze an unsharded dim")])
    return _finish(op, [x], tuple(e for d, e in enumerate(sp) if d not in dims), [])


@_dim_errors
def unsqueeze(x: Operand, *, dim: int, op: str = "unsqueeze") -> Result:
    early = _enter(op, [x], dim=dim)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    d = _norm_dim(dim, len(sp) + 1)
    return _finish(op, [x], sp[:d] + ((),) + sp[d:], [])


# --------------------------------------------------------------------------------------
# cat / stack


def _same_layout(op: str, operands: Sequence[Operand]) -> tuple[Spec | None, list[SpmdError]]:
    mix = _mixing_errors(op, operands)
    if mix:
        return None, mix
    specs = [o for o in operands if o.type is not None and o.type.spec is not None]
    first = specs[0]
    sp0 = first.type.spec  # type: ignore[union-attr]
    for o in specs[1:]:
        sp = o.type.spec  # type: ignore[union-attr]
        if sp != sp0:
            fix = redistribute_fix(o, sp, sp0) if len(sp) == len(sp0) else "make the ranks equal"  # type: ignore[arg-type]
            return None, [SpmdError(
                CODE,
                f"{op}: {_desc(o)} has a different layout than {_desc(first)}; {op} needs the "
                f"same partition spec on every tensor: {fix}",
            )]
    return sp0, []


@_dim_errors
def cat(operands: Sequence[Operand], *, dim: int = 0, op: str = "cat") -> Result:
    """``cat(xs, dim)``: the same spec on every tensor, and ``dim`` unsharded (the local
    cats of shards would interleave the blocks)."""
    early = _enter(op, operands, dim=dim)
    if early is not None:
        return early
    sp, errors = _same_layout(op, operands)
    if sp is None:
        return _finish(op, operands, None, errors)
    d = _norm_dim(dim, len(sp))
    if sp[d]:
        x = next(o for o in operands if is_global(o.type))
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op} along dim {d}, sharded on {_fmt_entry(sp[d])}: the locals would concatenate "
                  f"as interleaved blocks, not the global result; gather the dim first "
                  f"({redistribute_fix(x, sp, _unshard(sp, [d]))} for each), or cat along "
                  f"another dim")])
    return _finish(op, operands, sp, [])


@_dim_errors
def stack(operands: Sequence[Operand], *, dim: int = 0, op: str = "stack") -> Result:
    """``stack(xs, dim)``: the same spec on every tensor; the new dim is unsharded."""
    early = _enter(op, operands, dim=dim)
    if early is not None:
        return early
    sp, errors = _same_layout(op, operands)
    if sp is None:
        return _finish(op, operands, None, errors)
    d = _norm_dim(dim, len(sp) + 1)
    return _finish(op, operands, sp[:d] + ((),) + sp[d:], [])


# --------------------------------------------------------------------------------------
# split / chunk / unbind, expand / broadcast_to, roll

SPLITS = frozenset("split split_with_sizes chunk tensor_split unbind hsplit vsplit".split())


@_dim_errors
def split(x: Operand, *, dim: int = 0, op: str = "split") -> Result:
    """``split/chunk/tensor_split/split_with_sizes`` along an unsharded ``dim``: every
    piece keeps the spec (the adapters give this type to each tensor of the tuple);
    ``unbind`` drops the dim.  Along a sharded dim each rank would split only its
    shard: an error naming the redistribute that unshards the dim::

        x: PS["dp", None].chunk(2, dim=1)  ->  (PS["dp", None], PS["dp", None])
        x: PS["dp", None].chunk(2, dim=0)  ->  error: redistribute(x, ..., dst=PS[None, None])
    """
    if op == "hsplit":
        r0 = rank(x.type) if x.type is not None else None
        dim = 0 if r0 == 1 else 1
    elif op == "vsplit":
        dim = 0
    early = _enter(op, [x], dim=dim)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    d = _norm_dim(dim, len(sp))
    if sp[d]:
        return _finish(op, [x], None, [SpmdError(
            CODE,
            f"{op} along dim {d}, sharded on {_fmt_entry(sp[d])} ({_desc(x, True)}): each rank would "
            f"split only its own shard, so the pieces are not the global pieces; gather the dim "
            f"first ({redistribute_fix(x, sp, _unshard(sp, [d]))}), or split another dim",
        )])
    if op == "unbind":
        return _finish(op, [x], sp[:d] + sp[d + 1:], [])
    return _finish(op, [x], sp, [])


def expand(x: Operand, *, shape: Sequence[int], op: str = "expand") -> Result:
    """``expand/broadcast_to(x, shape)``: new leading dims are unsharded; an existing
    dim keeps its sharding, and a sharded dim must be given as ``-1`` (a literal size
    there is a local size the rule cannot check; expanding a size-1 shard would repeat
    each rank's row, not the global one)."""
    early = _enter(op, [x], shape=shape)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    shape = tuple(shape)
    if len(shape) < len(sp):
        return _finish(op, [x], None, [SpmdError(
            CODE, f"{op}: {len(shape)} sizes for {_desc(x)} of rank {len(sp)}")])
    new = len(shape) - len(sp)
    for d, entry in enumerate(sp):
        size = shape[new + d]
        if entry and size != -1:
            sizes = ", ".join(str(-1 if i == new + d else v) for i, v in enumerate(shape))
            return _finish(op, [x], None, [SpmdError(
                CODE,
                f"{op}({', '.join(str(v) for v in shape)}) of {_desc(x)}: dim {d} is sharded on "
                f"{_fmt_entry(entry)}, so it must keep its size: write -1 there "
                f"({x.text}.{'expand' if op == 'expand' else op}({sizes})); expanding a size-1 "
                f"sharded dim would repeat each rank's own values, not the global ones: gather it "
                f"first ({redistribute_fix(x, sp, _unshard(sp, [d]))})",
            )])
    return _finish(op, [x], ((),) * new + sp, [], base=local_propagate(op, [x]))


def expand_as(x: Operand, other: Operand, *, op: str = "expand_as") -> Result:
    """``x.expand_as(other)``: x broadcast to other's (local) shape, so the result has
    the broadcast layout of the two (the elementwise rule: x must not vary on an axis
    sharding a dim it is broadcast along); only x's values (and kinds) are used."""
    if _all_local(op, [x, other]):
        return local_propagate(op, [x, other])  # local SPMD: other is a template
    if other.type is None or other.type.spec is None:
        # other's rank (so the result's) is unknown: the result is unknown (gradual)
        return Result(SpmdType(), _mixing_errors(op, [x, replace(other, role=Role.SUMMAND)]))
    # other lends its shape, and with it the layout of the dims it shards: on the axes of
    # its spec it takes part as an elementwise operand would; its other axes' kinds are
    # not the result's business (x: P["tp"] expanded as an R["tp"] tensor stays P)
    sharding = {a for e in other.type.spec for a in e}
    other = replace(other, role=Role.SUMMAND, type=SpmdType(
        tuple((a, lt) for a, lt in other.type.axes if a in sharding), other.type.spec))
    r = elementwise(op, [x, other])
    if r.errors or r.type.spec is None:
        return r
    return _finish(op, [x, other], r.type.spec, [], base=local_propagate("expand", [x]))


def reshape_as(x: Operand, other: Operand, *, op: str = "view_as") -> Result:
    """``x.view_as(other)`` / ``x.reshape_as(other)``: x's values in other's (local) shape.
    Each rank's block of a tensor sharded on dim 0 is one contiguous run of its row-major
    flattening, so when both shard dim 0 on the same axes (and no other dim), the local
    reshape is the global one, sharded on dim 0 like other::

        x: [b*s @dp, h]   other: [b @dp, s, h]   ->   x.view_as(other): [b @dp, s, h]

    Unsharded on both: other's spec.  Any other sharding depends on sizes the checker
    does not see (an error naming the alternatives).  Only x's values (and kinds) are used."""
    if _all_local(op, [x, other]):
        return local_propagate(op, [x, other])  # local SPMD: other is a template
    if other.type is None or other.type.spec is None or x.type is None or x.type.spec is None:
        # a side's layout is unknown (or local beside a global one): the result is unknown
        return Result(SpmdType(), _mixing_errors(op, [x, replace(other, role=Role.SUMMAND)]))
    sx, so = x.type.spec, other.type.spec
    sharded_x = [d for d, e in enumerate(sx) if e]
    sharded_o = [d for d, e in enumerate(so) if e]
    if (not sharded_x and not sharded_o) or (
            sharded_x == [0] and sharded_o == [0] and sx[0] == so[0]):
        return _finish(op, [x], so, [], base=local_propagate("view", [x]))
    return _finish(op, [x], None, [SpmdError(
        CODE,
        f"{op} of {_desc(x)} to the layout of {_desc(other)}: a local reshape is the global "
        f"one only when both shard dim 0 alone, on the same axes, or neither is sharded; "
        f"reshape {x.text} with literal sizes ({x.text}.reshape(...), see docs/global.md) or "
        f"flatten/unflatten, redistribute one side first, or do it in spmd.local_map",
    )])


@_dim_errors
def roll(x: Operand, *, dims: int | Sequence[int] | None = None, op: str = "roll") -> Result:
    """``roll(x, shifts, dims)`` (and ``flip(x, dims)``, ``fliplr``, ``flipud``,
    ``rot90(x, k, dims)``, ``diff(x, n, dim)``) along unsharded dims keeps the spec; along a
    sharded dim (or ``dims=None``, which rolls the flattened tensor) the elements cross shard
    boundaries: an error naming the redistribute that unshards the dims."""
    if op in ALONG_FIXED:
        dims = ALONG_FIXED[op]
    early = _enter(op, [x], dims=dims)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    ds = list(range(len(sp))) if dims is None or dims == () else [
        _norm_dim(d, len(sp)) for d in _dims_tuple(dims)]
    bad = [d for d in ds if sp[d]]
    if bad:
        what = "without dims (the flattened tensor)" if dims is None else f"along dim {bad[0]}"
        return _finish(op, [x], None, [SpmdError(
            CODE,
            f"{op} {what}, sharded on {_fmt_entry(sp[bad[0]])} ({_desc(x, True)}): elements would "
            f"cross shard boundaries (rank to rank communication); gather the dim first "
            f"({redistribute_fix(x, sp, _unshard(sp, bad))}), or {op} unsharded dims",
        )])
    return _finish(op, [x], sp, [])


# torch.fft's transforms and shifts (views.ALONG_OPS): fft_fft, fft_rfft2, fft_fftn, fft_fftshift...
FOURIER = frozenset(op for op in ALONG_OPS if op.startswith("fft_"))


@_dim_errors
def fourier(op: str, x: Operand, *, dim: Any = None, s: Any = None) -> Result:
    """A transform of ``torch.fft`` (``fft_fft``, ``fft_rfft2``, ``fft_fftn``, ...,
    ``fft_fftshift``) along unsharded dims keeps the spec: each rank transforms whole lines
    of its block (a size change along them, ``n=`` / ``s=``, rfft's halved last dim, is the
    same on every rank).  ``dim`` as the call states it (None: the op's default, every dim for
    the n-d ones and the shifts, the last len(s) given ``s``); ``s``: the sizes of an n-d
    transform, read for their number only.  Along a sharded dim each rank would transform only
    its block (a Fourier transform mixes the whole dim): an error whose fix moves the shard
    to a dim not transformed first (an all_to_all, as a slab FFT does), or gathers it::

        u: PS["tp", None]   torch.fft.fft(u, dim=1)     ->  PS["tp", None]
        u: PS["tp", None]   torch.fft.fft(u, dim=0)     ->  error: spmd.redistribute(u,
                                                            src=PS["tp", None], dst=PS[None, "tp"])
    """
    early = _enter(op, [x], dim=dim, s=s)
    if early is not None:
        return early
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    r = len(sp)
    formals, defaults = ALONG_OPS[op]
    if dim is None and formals == ("dim",):
        dim = defaults[0]
    if dim is None:
        n = r if s is None else (s if isinstance(s, int) else len(s))
        if n > r:
            raise DimError(f"s has {n} sizes for a tensor of rank {r}")
        ds = list(range(r - n, r))
    else:
        ds = [_norm_dim(d, r) for d in _dims_tuple(dim)]
    bad = [d for d in ds if sp[d]]
    if not bad:
        return _finish(op, [x], sp, [])
    free = [d for d in range(r) if d not in ds and not sp[d]]
    gather = redistribute_fix(x, sp, _unshard(sp, bad))
    if len(free) >= len(bad):
        moved = list(_unshard(sp, bad))
        for d, f in zip(bad, free):
            moved[f] = sp[d]
        fix = (f"move the shard to a dim not transformed first (an all_to_all, as a slab FFT "
               f"does): {redistribute_fix(x, sp, tuple(moved))}, or gather the dim: {gather}")
    else:
        fix = f"gather the dim first: {gather}"
        if len(ds) > len(bad) and op not in ("fft_fftshift", "fft_ifftshift"):
            fix += (" (or, as a slab FFT does, transform the unsharded dims first, move the shard "
                    "to one of them with spmd.redistribute, an all_to_all, then transform the rest)")
    what = ("shift only its block (elements would cross shard boundaries)"
            if op in ("fft_fftshift", "fft_ifftshift")
            else "transform only its block (a Fourier transform mixes the whole dim)")
    return _finish(op, [x], None, [SpmdError(
        CODE,
        f"{op} along dim {bad[0]}, sharded on {_fmt_entry(sp[bad[0]])} ({_desc(x, True)}): each "
        f"rank would {what}; {fix}",
    )])


# --------------------------------------------------------------------------------------
# losses over class scores

# CLASS_LOSSES (cross_entropy, nll_loss): the one set local SPMD's loss rule reads too
# (ops.CLASS_LOSSES, imported above)


def class_loss(op: str, operands: Sequence[Operand], *, reduction: str = "mean") -> Result:
    """``F.cross_entropy/nll_loss(input, target, weight=None, ..., reduction=...)``.

    ``input`` is ``[N, C, d1...]`` (or ``[C]``): the class dim (1, or 0 unbatched) must
    be unsharded (the softmax needs every class: a vocab-parallel loss is a local_map
    with its own collectives).  ``target`` (class indices ``[N, d1...]``, or
    probabilities shaped like ``input``) is sharded like ``input``'s other dims, and a
    class ``weight`` is unsharded.  ``reduction="none"`` keeps the other dims' spec.
    ``"sum"``/``"mean"`` over a sharded dim is an error: each rank reduces only its
    shard, the global sum is the Partial sum of the local ones (never implicit), and the
    global mean is not the mean of local means (ignore_index and class weights make the
    counts differ per rank); the fix writes the reduction with ``spmd.sum``::

        F.cross_entropy(logits: PS["dp", None], t: PS["dp"], reduction="none") -> PS["dp"]
        F.cross_entropy(logits: PS["dp", None], t: PS["dp"])                    -> error
    """
    early = _enter(op, operands, reduction=reduction, mixing=True)
    if early is not None:
        return early
    x = operands[0]
    if x.type is None or x.type.spec is None:
        g = next(o for o in operands if is_global(o.type))
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op}: the input {_desc(x)} has no partition spec beside the global {_desc(g)}: "
                  f"declare its layout with Tensor[PS[...], ...]")])
    # an untyped target or weight (labels straight from a data loader) is gradual: it is
    # taken to be laid out as the input needs, as in elementwise ops; the rules on the
    # input (class dim, reduction over sharded dims) still apply
    sp = x.type.spec
    if reduction not in ("none", "mean", "sum"):
        return _finish(op, operands, None, [SpmdError(
            CODE, f'{op}: reduction={reduction!r} is not one of "none", "mean", "sum"')])
    if len(sp) == 0:
        return _finish(op, operands, None, [SpmdError(CODE, f"{op}: the input has rank 0")])
    cd = 1 if len(sp) >= 2 else 0
    if sp[cd]:
        return _finish(op, operands, None, [SpmdError(
            CODE,
            f"{op} over the class dim {cd}, sharded on {_fmt_entry(sp[cd])} ({_desc(x, True)}): the "
            f"softmax over the classes needs every class on each rank; gather it first "
            f"({redistribute_fix(x, sp, _unshard(sp, [cd]))}), or write a vocab-parallel "
            f"loss in spmd.local_map (max/sum over the classes all_reduced)",
        )])
    rest = sp[:cd] + sp[cd + 1:]
    errors: list[SpmdError] = []
    for i, o in enumerate(operands[1:], 1):
        if o.type is None or o.type.spec is None:
            continue
        osp = o.type.spec
        if i == 1:
            want = sp if len(osp) == len(sp) else rest
            what = "probabilities" if len(osp) == len(sp) else "class indices"
        else:
            want = ((),) * len(osp)
            what = "class weights"
        if osp != want:
            fix = (redistribute_fix(o, osp, want) if len(osp) == len(want)
                   else f"give it rank {len(want)}")
            errors.append(SpmdError(
                CODE,
                f"{op}: {_desc(o)} ({what}) is laid out as {format_spec(osp)} but the input "
                f"{_desc(x)} needs {format_spec(want)} there: the locals would pair other "
                f"samples; {fix}",
            ))
            break
    if errors:
        return _finish(op, operands, None, errors)
    if reduction == "none":
        return _finish(op, operands, rest, [])
    sharded = [(d, e) for d, e in enumerate(rest) if e]
    if sharded:
        d, e = sharded[0]
        axes = tuple(dict.fromkeys(a for _, e2 in sharded for a in e2))
        dims = tuple(dd for dd, _ in sharded)
        dim_text = str(dims[0]) if len(dims) == 1 else str(dims)
        args = ", ".join(o.text for o in operands[:2])
        if reduction == "sum":
            total = (f"loss = spmd.sum(losses, {dim_text}, out_partial_axes={_fmt_axes(axes)}) "
                     f"(P on {_fmt_axes(axes)})")
            why = "each rank sums only its shard, so the result would be a partial sum"
        else:
            total = (f"loss = spmd.sum(losses, {dim_text}, out_partial_axes={_fmt_axes(axes)}) / n "
                     f"with n the global number of counted targets (P on {_fmt_axes(axes)})")
            why = ("each rank averages only its shard, and the global mean is not the mean of "
                   "the local means (ignore_index and class weights make the counts differ per "
                   "rank)")
        return _finish(op, operands, None, [SpmdError(
            CODE,
            f'{op}(..., reduction="{reduction}") over dim {d + (1 if d >= cd else 0)} of the input, sharded '
            f"on {_fmt_entry(e)} ({_desc(x, True)}): {why}; global SPMD never makes Partial "
            f'implicitly: write losses = F.{op}({args}, reduction="none"), then {total}, '
            f'then all_reduce(loss, {_fmt_axes(axes)}, src=P, dst=R) for the full value',
        )])
    return _finish(op, operands, (), [])


# --------------------------------------------------------------------------------------
# indexing


def _dims_text(dims: list[tuple[int, tuple[str, ...]]]) -> str:
    """``dim 2`` or ``dims (0, 2)``: the sharded dims a reduction runs over."""
    if len(dims) == 1:
        return f"dim {dims[0][0]}"
    return "dims (" + ", ".join(str(d) for d, _ in dims) + ")"


def _these(dims: list[tuple[int, tuple[str, ...]]]) -> str:
    return "the dim" if len(dims) == 1 else "these dims"


def _index_error(op: str, x: Operand, d: int, what: str) -> SpmdError:
    sp = x.type.spec  # type: ignore[union-attr]
    return SpmdError(
        CODE,
        f"{op}: {what} dim {d}, sharded on {_fmt_entry(sp[d])} ({_desc(x, True)}): each rank holds "
        f"another block, so the local index does not mean the global one; gather the dim first "
        f"({redistribute_fix(x, sp, _unshard(sp, [d]))}), or index an unsharded dim",
    )


def index(x: Operand, items: Sequence[Any], *, op: str = "__getitem__",
          extra: Sequence[Operand] = ()) -> Result:
    """``x[...]`` on unsharded dims: an ``int`` drops the dim, a full ``slice(None)``
    keeps it (sharded or not), a partial slice keeps it (unsharded only), ``None``
    inserts an unsharded dim, ``...`` spans the rest, a :class:`TensorIndex` replaces
    the dim by the index's dims (unsharded, and only on an unsharded dim)."""
    operands = [x, *extra]
    if _all_local(op, operands) or not is_global(x.type):
        return local_propagate(op, operands)
    if items is UNKNOWN:
        return _finish(op, operands, None, [_nonliteral(op, "index", x)])
    items = list(items) if isinstance(items, (tuple, list)) else [items]
    if any(i is UNKNOWN for i in items):
        return _finish(op, operands, None, [_nonliteral(op, "index", x)])
    sp = x.type.spec  # type: ignore[union-attr]
    assert sp is not None
    n_consume = sum(1 for i in items if i is not None and i is not Ellipsis)
    if n_consume > len(sp):
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op}: {n_consume} indices for {_desc(x)} of rank {len(sp)}")])
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + [slice(None)] * (len(sp) - n_consume) + items[k + 1:]
    else:
        items = items + [slice(None)] * (len(sp) - n_consume)
    # advanced indices (tensors, and ints beside a tensor) broadcast together into one
    # block of dims: where they stand when adjacent, else first (torch's placement)
    tensors = [it for it in items if isinstance(it, TensorIndex)]
    advanced = [i for i, it in enumerate(items)
                if isinstance(it, TensorIndex) or (tensors and isinstance(it, int))]
    out: list[tuple[str, ...]] = []
    block_at: int | None = None
    d = 0
    for i, it in enumerate(items):
        if it is None:
            out.append(())
            continue
        entry = sp[d]
        if i in advanced and block_at is None:
            block_at = len(out)
        if isinstance(it, slice):
            if entry and it != slice(None):
                return _finish(op, operands, None, [_index_error(op, x, d, "slicing")])
            out.append(entry)
        elif isinstance(it, TensorIndex):
            if entry:
                return _finish(op, operands, None, [_lookup_error(op, x, d)])
            if (it.sharded and it.spec is None) or (len(tensors) > 1 and it.spec and any(it.spec)):
                return _finish(op, operands, None, [SpmdError(
                    CODE, f"{op}: a sharded index tensor on dim {d} of {_desc(x)}"
                          + (" beside other tensor indices (they broadcast together)"
                             if len(tensors) > 1 else " without a partition spec")
                          + ": gather the index first (spmd.redistribute it to an unsharded spec)")])
        else:  # an int
            if entry:
                return _finish(op, operands, None, [_index_error(op, x, d, "an integer index on")])
        d += 1
    if tensors:
        if len(tensors) == 1 and tensors[0].spec is not None:
            block: Spec = tuple(tensors[0].spec)
        else:
            block = ((),) * max(t.rank for t in tensors)
        at = block_at if advanced == list(range(advanced[0], advanced[-1] + 1)) else 0
        out[at:at] = list(block)  # type: ignore[index]
    return _lookup_finish(op, operands, tuple(out))


def _lookup_error(op: str, x: Operand, d: int) -> SpmdError:
    """A lookup (embedding, index_select, ``x[ids]``) along a sharded dim of the table."""
    sp = x.type.spec  # type: ignore[union-attr]
    axes = _fmt_entry(sp[d])
    what = "the vocabulary dim" if op == "embedding" else "the gathered dim"
    return SpmdError(
        CODE,
        f"{op}: {what} {d} of {x.text} is sharded on {axes} ({_desc(x, True)}): each rank holds "
        f"another block of rows, so a local lookup of the global indices reads the wrong rows "
        f"(the vocab-parallel lookup is communication); gather that dim first "
        f"({redistribute_fix(x, sp, _unshard(sp, [d]))}), or write the masked lookup in "
        f"spmd.local_map (zero the rows of indices outside the local block, then "
        f"all_reduce(..., {axes}, src=P, dst=R))",
    )


def _lookup_finish(op: str, operands: Sequence[Operand], out: Spec) -> Result:
    """The result of a lookup with the index's dims placed: no mesh axis on two dims, and
    no operand varying on an axis that shards a dim it does not give (a local axis)."""
    seen: dict[str, int] = {}
    for d, e in enumerate(out):
        for a in e:
            if a in seen:
                return _finish(op, operands, None, [SpmdError(
                    CODE,
                    f'{op}: mesh axis "{a}" would shard dims {seen[a]} and {d} of the result (the '
                    f"indices and the table are both sharded on it; {_texts(operands)}); a mesh "
                    f'axis shards one dim: redistribute one of them so that "{a}" shards one only')])
            seen[a] = d
    return _finish(op, operands, out, [])


LOOKUPS = frozenset({"embedding", "index_select"})


def _gathered_dim(op: str, x: Operand, dim: int, operands: Sequence[Operand]) -> tuple[int, Result | None]:
    """The table's gathered dim, normalised (0 for an untyped table), or the error: a dim
    out of range, or a sharded one (:func:`_lookup_error`)."""
    xs = x.type.spec if x.type is not None else None
    if xs is None:
        return 0, None
    try:
        d = _norm_dim(dim, len(xs))
    except DimError as e:
        return 0, _finish(op, operands, None, [SpmdError(CODE, f"{op}: {e}")])
    if xs[d] and op in SCATTERS:
        return d, _finish(op, operands, None, [SpmdError(
            CODE, f"{op} along dim {d}, sharded on {_fmt_entry(xs[d])} ({_desc(x, True)}): each rank "
                  f"holds only its block of the dim the global indices write into; gather it first: "
                  f"{redistribute_fix(x, xs, _unshard(xs, [d]))}, or write the scatter in "
                  f"spmd.local_map")])
    if xs[d]:
        return d, _finish(op, operands, None, [_lookup_error(op, x, d)])
    return d, None


def lookup(op: str, x: Operand, ids: Operand, *, dim: int = 0,
           operands: Sequence[Operand] | None = None) -> Result:
    """A lookup of rows of the table ``x`` along ``dim`` by integer indices ``ids``:
    ``F.embedding(ids, x)`` (dim 0), ``torch.index_select(x, dim, ids)``.  The indices
    are no value of the result (role INDEX: not differentiated).  The gathered dim must
    be unsharded (each rank holds every row); the result is the table's dims with
    ``dim`` replaced by the indices' dims, each with its sharding::

        embedding(ids: PS["dp", None], w: PS[None, None])   ->  PS["dp", None, None]
        embedding(ids: PS["dp", None], w: PS[None, "tp"])   ->  PS["dp", None, "tp"]
        embedding(ids: PS["dp", None], w: PS["tp", None])   ->  error: the vocab-parallel
            lookup (gather w's dim 0, or the masked lookup + all_reduce in spmd.local_map)

    An untyped table (nn.Embedding's own weight) or untyped indices: the layout is
    unknown (gradual), the table's sharded gathered dim is still an error."""
    operands = list(operands) if operands is not None else [x, ids]
    early = _enter(op, operands, dim=dim, mixing=True)
    if early is not None:
        return early
    xs = x.type.spec if x.type is not None else None
    d, err = _gathered_dim(op, x, dim, operands)
    if err is not None:
        return err
    for o in (x, ids):
        if o.type is not None and o.type.spec is None and o.type:
            # a typed local operand without rank beside a global one
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: {_desc(o)} has no partition spec (so no rank) beside global "
                      f"operands: declare its layout with Tensor[PS[...], ...]")])
    if xs is None or ids.type is None or ids.type.spec is None:
        # an untyped table or untyped indices: the layout is unknown (gradual); the
        # kinds are still checked (a Partial index)
        return Result(SpmdType(), list(local_propagate(op, operands).errors))
    return _lookup_finish(op, operands, xs[:d] + ids.type.spec + xs[d + 1:])


GATHERS = frozenset({"gather", "take_along_dim"})


def _sharded(e: tuple[str, ...]) -> str:
    return f"sharded on {_fmt_entry(e)}" if e else "unsharded"


def gather_along(op: str, x: Operand, index: Operand, *, dim: int | None,
                 operands: Sequence[Operand] | None = None) -> Result:
    """``torch.gather(x, dim, index)`` / ``torch.take_along_dim(x, index, dim)``: the result
    has the index's shape; position ``p`` reads ``x`` at ``index[p]`` along ``dim`` and at
    ``p`` along the others.  So ``dim`` must be unsharded in ``x`` (each rank holds the whole
    dim) and every other dim sharded alike in both; the result takes the index's spec::

        gather(z: PS["dp", None, None], 2, i: PS["dp", None, None])  ->  PS["dp", None, None]
        gather(z: PS["dp", None, "tp"], 2, i: ...)                   ->  error: dim 2 on "tp"
        gather(z: PS["dp", None, None], 2, i: PS[None, None, None])  ->  error: dim 0 differs"""
    operands = list(operands) if operands is not None else [x, index]
    early = _enter(op, operands, dim=dim, mixing=True)
    if early is not None:
        return early
    xs = x.type.spec if x.type is not None else None
    ixs = index.type.spec if index.type is not None else None
    if dim is None:
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op} without dim reads the flattened tensor ({_desc(x, True)}): give the dim")])
    d, err = _gathered_dim(op, x, dim, operands)  # an error whatever the index, as for lookup
    if err is not None:
        return err
    if xs is None or ixs is None:  # an untyped operand: the layout is unknown (gradual)
        return Result(SpmdType(), list(local_propagate(op, operands).errors))
    if len(xs) != len(ixs):
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op}: the index has {len(ixs)} dims and {x.text} {len(xs)} ({_desc(x, True)}, "
                  f"{_desc(index, True)})")])
    for k in range(len(xs)):
        if k != d and xs[k] != ixs[k]:
            return _finish(op, operands, None, [SpmdError(
                CODE,
                f"{op} along dim {d}: dim {k} is {_sharded(xs[k])} in {x.text} but {_sharded(ixs[k])} in "
                f"{index.text} ({_desc(x, True)}, {_desc(index, True)}): position p reads "
                f"{x.text} at p on that dim, so both must hold the same block; redistribute one "
                f"of them to the other's spec")])
    return _lookup_finish(op, operands, ixs)


SCATTERS = frozenset({"scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
                      "scatter_reduce_"})


def scatter_along(op: str, x: Operand, index: Operand, src: Operand | None, *,
                  dim: int | None, reduce: Any = None) -> Result:
    """``x.scatter(dim, index, src)`` (scatter_add, scatter_reduce): position ``p`` of
    ``index`` writes ``src[p]`` into ``x`` at ``index[p]`` along ``dim`` and at ``p`` along the
    others: gather's conditions (``dim`` whole in ``x``, the other dims sharded alike in ``x``
    and ``index``), ``src`` laid out as ``index``; the result keeps ``x``'s spec (a dense gate
    from top-k indices)::

        zeros(p: PS["dp", None, None]).scatter(-1, i: PS["dp", None, None], v)  ->  PS["dp", None, None]"""
    operands = [x, index] + ([src] if src is not None else [])
    ixs = index.type.spec if index.type is not None else None
    if (isinstance(dim, int) and ixs is not None and (x.type is None or x.type.spec is None)
            and -len(ixs) <= dim < len(ixs) and ixs[dim]):
        # an untyped accumulator (torch.zeros(n)) and positions sharded along dim
        if _enter(op, operands, dim=dim, mixing=True) is None:
            d = _norm_dim(dim, len(ixs))
            return _segment_finish(op, operands, x, ixs[d], _unshard(ixs, (d,)), d, reduce=reduce)
    checked = gather_along(op, x, index, dim=dim, operands=operands)
    if checked.errors or x.type is None or x.type.spec is None:
        return checked
    if src is not None and src.type is not None and index.type is not None and (
            src.type.spec != index.type.spec):
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op}: {src.text} is laid out unlike the index {index.text} ({_desc(src, True)}, "
                  f"{_desc(index, True)}): position p writes {src.text} at p; redistribute "
                  f"{src.text} to the index's spec")])
    d = _norm_dim(dim, len(x.type.spec)) if isinstance(dim, int) else 0
    if ixs is not None and d < len(ixs) and ixs[d]:
        return _segment_finish(op, operands, x, ixs[d], x.type.spec, d, reduce=reduce)
    return _finish(op, operands, x.type.spec, [])


SEGMENT_SUMS = frozenset({"index_add", "index_add_", "bincount", "index_put", "index_put_"})


def _segment_finish(op: str, operands: Sequence[Operand], x: Operand | None, axes: tuple[str, ...],
                    out_spec: Spec, d: int, *, reduce: Any = "sum") -> Result:
    """A segment sum (index_add, scatter_add, scatter_reduce(sum), bincount, index_put with
    accumulate=True) whose positions (the index and the source along the summed dim) are
    sharded on ``axes``: each rank adds only its own positions into the segments, so the
    result is P on ``axes`` (a per-rank part of each segment's sum: ``all_reduce(...,
    src=P, dst=R)`` completes it).  An accumulator ``x`` that is R or I on such an axis
    would be counted once per rank in that sum: an error (accumulate into zeros, add ``x``
    after the all_reduce).  A reduction other than a sum (scatter's overwrite,
    scatter_reduce's prod/amax/mean) has no such part: an error."""
    ax = _fmt_axes(axes)
    if reduce is UNKNOWN:
        return _finish(op, operands, None, [_nonliteral(op, "reduce", operands[0])])
    if reduce != "sum":
        how = (f'reduce="{reduce}"' if isinstance(reduce, str) else "an overwrite")
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op} along dim {d} with an index sharded on {ax} ({_texts(operands)}): each "
                  f"rank writes only its own positions, and {how} of the ranks' results is not "
                  f"a sum of parts; gather the index and the source first, or do it in local "
                  f"SPMD (spmd.local_map)")])
    if x is not None and x.type is not None and x.type.spec is not None:
        if out_spec[d]:
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: dim {d} of {x.text} is sharded on {_fmt_entry(out_spec[d])} "
                      f"({_desc(x, True)}) and the index on {ax}: each rank's positions may land "
                      f"in another rank's rows; redistribute {x.text} to hold dim {d} whole")])
        held = [a for a in axes if a in dict(x.type.axes) and dict(x.type.axes)[a].kind is not Kind.P]
        if held:
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op} with an index sharded on {ax}: each rank adds only its own positions, "
                      f"so the result is a per-rank part (P on {ax}), but {x.text} is "
                      f"{_desc(x, True)}, which every rank would add once: accumulate into "
                      f"torch.zeros_like({bare(x.text)}) and add {bare(x.text)} after the "
                      f"all_reduce(..., {ax}, src=P, dst=R)")])
    if x is not None and (x.type is None or (not x.type.axes and x.type.spec is None)):
        # an untyped accumulator (torch.zeros(n)): a constant, as a Python scalar is, so
        # the result's kinds on the other axes are the index's and the source's
        base = local_propagate(op, [replace(x, type=None) if o is x else o for o in operands])
    elif op.rstrip("_") in _LOCAL_SEGMENT_SUMS:
        # the local pending rule (ops.reduced_partial_error: a local bincount of an S(0) index
        # counts this rank's block) reads the partial sum declared on these axes: P here
        base = local_propagate(op, operands, reduction=Reduction(None, partial_axes=tuple(axes)))
    else:
        base = local_propagate(op, operands)
    return _finish(op, operands, out_spec, [], partial_axes=axes, base=base)


def segment_sum(op: str, operands: Sequence[Operand], *, dim: Any = 0, reduce: Any = "sum",
                accumulate: Any = False) -> Result:
    """Segment sums over a sharded dim (``torch.bincount(ids)``, ``x.index_add(dim, ids,
    src)``, ``x.index_put_((ids,), src, accumulate=True)``): the ids pick a segment for each
    position of the sharded dim; each rank adds its own positions, so the result is P on
    the dim's axes (:func:`_segment_finish`)::

        torch.bincount(ids: PS["tp"])                         ->  PS[None], P["tp"]
        zeros(n).index_add(0, ids: PS["tp"], v: PS["tp"])     ->  PS[None], P["tp"]
        zeros(n).index_add(0, ids: PS[None], v: PS[None, "dp"]) -> PS[None, "dp"]

    Unsharded positions: shard propagation as usual (the other dims of the source keep
    their sharding in the result, the accumulator's dims alike)."""
    early = _enter(op, operands, dim=dim, mixing=True)
    if early is not None:
        return early
    base_op = op.rstrip("_")
    if base_op == "bincount":
        ids, weights = operands[0], (operands[1] if len(operands) > 1 else None)
        sp = ids.type.spec if ids.type is not None else None
        if sp is None or (weights is not None and weights.type is not None and weights.type.spec is None):
            return Result(SpmdType(), list(local_propagate(op, operands).errors))
        if weights is not None and weights.type is not None and weights.type.spec != sp:
            return _finish(op, operands, None, [SpmdError(
                CODE, f"bincount: the weights {weights.text} are laid out unlike the ids {ids.text} "
                      f"({_desc(weights, True)}, {_desc(ids, True)}); redistribute the weights "
                      f"to the ids' spec")])
        axes = sp[0] if sp else ()
        if not axes:
            return _finish(op, operands, ((),), [])
        return _segment_finish(op, operands, None, axes, ((),), 0)
    if base_op == "index_put":
        if accumulate is not True:
            return _finish(op, operands, None, [no_rule_error(op, operands)])
        dim = 0
    x, index = operands[0], operands[1]
    src = operands[2] if len(operands) > 2 and operands[2].type is not None else None
    ixs = index.type.spec if index.type is not None else None
    ss = src.type.spec if src is not None and src.type is not None else None
    xs = x.type.spec if x.type is not None else None
    if ixs is None or (src is not None and ss is None):
        return Result(SpmdType(), list(local_propagate(op, operands).errors))
    r = len(ss) if ss is not None else (len(xs) if xs is not None else 1)
    if not isinstance(dim, int):
        return _finish(op, operands, None, [_nonliteral(op, "dim", index)])
    d = _norm_dim(dim, r)
    if len(ixs) != 1:
        return _finish(op, operands, None, [no_rule_error(op, operands)])
    axes = ixs[0]
    if ss is not None and ss[d] != axes:
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op} along dim {d}: the index {index.text} is {_sharded(axes)} but dim {d} of "
                  f"{src.text if src is not None else ''} is {_sharded(ss[d])} ({_desc(index, True)}, "
                  f"{_desc(src, True) if src is not None else ''}): position p of the index "
                  f"picks the segment of that dim's position p, so both must hold the same "
                  f"block; redistribute one of them to the other's spec")])
    others = _unshard(ss, (d,)) if ss is not None else None
    if xs is not None and others is not None:
        for k in range(min(len(xs), len(others))):
            if k != d and xs[k] != others[k]:
                return _finish(op, operands, None, [SpmdError(
                    CODE, f"{op} along dim {d}: dim {k} is {_sharded(xs[k])} in {x.text} but "
                          f"{_sharded(others[k])} in {src.text if src is not None else ''} "
                          f"({_desc(x, True)}): the source adds into the same block of that dim; "
                          f"redistribute one of them to the other's spec")])
    out = xs if xs is not None else others if others is not None else ((),)
    if not axes:
        if xs is not None and xs[d]:
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: dim {d} of {x.text} is sharded on {_fmt_entry(xs[d])} "
                      f"({_desc(x, True)}): the index picks rows of the whole dim; redistribute "
                      f"{x.text} to hold dim {d} whole")])
        return _finish(op, operands, out, [])
    return _segment_finish(op, operands, x, axes, out, d)


def embedding(ids: Operand, table: Operand | None, *, op: str = "embedding") -> Result:
    """``F.embedding(ids, table)``: :func:`lookup` along dim 0 of the table.  Without a
    table operand (``nn.Embedding``'s own, untyped, weight) the layout is unknown."""
    if table is None:
        if _all_local(op, [ids]):
            return local_propagate(op, [ids])
        return Result(SpmdType(), list(local_propagate(op, [ids]).errors))
    return lookup(op, table, ids, dim=0, operands=[ids, table])


@_dim_errors
def repeat_interleave(x: Operand, *, dim: int | None, int_repeats: bool,
                      extra: Sequence[Operand] = (), op: str = "repeat_interleave") -> Result:
    """``x.repeat_interleave(r, dim)``: each element repeated ``r`` times in place along
    ``dim``.  With an int ``r`` every block of a sharded dim stays its rank's block, so the
    spec is kept (GQA's kv heads on tp)::

        [k0 k1 | k2 k3]  -> repeat_interleave(2) ->  [k0 k0 k1 k1 | k2 k2 k3 k3]

    Per-element repeats (a tensor ``r``) need ``dim`` whole on each rank; ``dim=None``
    repeats the flattened tensor (flatten's rule, then as above)."""
    if dim is UNKNOWN:
        return _finish(op, [x, *extra], None, [_nonliteral(op, "dim", x)])
    if dim is None:
        flat = flatten(x, start_dim=0, end_dim=-1, op=op)
        if flat.errors or int_repeats or flat.type.spec is None or not any(flat.type.spec):
            return flat
        return keeps_spec(op, Operand(flat.type, x.text), dims=(0,), extra=extra)
    if int_repeats:
        return keeps_spec(op, x, dims=(), extra=extra)
    return keeps_spec(op, x, dims=(dim,), extra=extra)


def keeps_spec(op: str, x: Operand, *, dims: Sequence[int], extra: Sequence[Operand] = ()) -> Result:
    """An op computed per position that needs ``dims`` whole (triu/tril: the last two,
    F.pad: the padded ones): those dims unsharded, the spec kept."""
    operands = [x, *extra]
    early = _enter(op, operands, dims=dims, mixing=True)
    if early is not None:
        return early
    if x.type is None or x.type.spec is None:
        return Result(SpmdType(), list(local_propagate(op, operands).errors))
    sp = x.type.spec
    ds = sorted({_norm_dim(d, len(sp)) for d in dims})
    bad = [d for d in ds if sp[d]]
    if bad:
        return _finish(op, operands, None, [SpmdError(
            CODE,
            f"{op} needs {_dims_text([(d, sp[d]) for d in ds])} whole on each rank, but dim "
            f"{bad[0]} is sharded on {_fmt_entry(sp[bad[0]])} ({_desc(x, True)}); gather it first: "
            f"{redistribute_fix(x, sp, _unshard(sp, bad))}",
        )])
    for o in extra:  # a tensor fill value (pad's value is a Python scalar)
        if o.type is not None and o.type.spec is not None and any(o.type.spec):
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: {_desc(o)} is sharded; give an unsharded value")])
    return _finish(op, operands, sp, [])


def pad(x: Operand, *, pad: Sequence[int], extra: Sequence[Operand] = (), op: str = "pad") -> Result:
    """``F.pad(x, pad)``: ``pad`` holds (left, right) pairs for the last dims, innermost
    first; a dim padded (or cropped) by a non-zero amount must be unsharded."""
    if _all_local(op, [x, *extra]):
        return local_propagate(op, [x, *extra])
    if pad is UNKNOWN or not isinstance(pad, (tuple, list)) or any(
            v is UNKNOWN or not isinstance(v, int) for v in pad):
        return _finish(op, [x, *extra], None, [_nonliteral(op, "pad", x)])
    r = rank(x.type) if x.type is not None else None
    if r is None:
        return Result(SpmdType(), list(local_propagate(op, [x, *extra]).errors))
    pairs = [tuple(pad[i:i + 2]) for i in range(0, len(pad), 2)]
    if len(pad) % 2 or len(pairs) > r:
        return _finish(op, [x, *extra], None, [SpmdError(
            CODE, f"{op}: pad={tuple(pad)} does not fit {_desc(x)} of rank {r}")])
    dims = [r - 1 - i for i, pr in enumerate(pairs) if any(pr)]
    return keeps_spec(op, x, dims=dims, extra=extra)


def group_norm(x: Operand, extra: Sequence[Operand] = (), *, op: str = "group_norm") -> Result:
    """``F.group_norm(x, num_groups, weight, bias)`` on ``[N, C, *]``: each sample is
    normalised over its channels and spatial dims, so every dim but the batch dim 0 must
    be unsharded; weight and bias (``[C]``) unsharded; the spec is kept."""
    operands = [x, *extra]
    if _all_local(op, operands):
        return local_propagate(op, operands)
    r = rank(x.type) if x.type is not None else None
    if r is None:
        mix = _mixing_errors(op, operands)
        return Result(SpmdType(), mix + list(local_propagate(op, operands).errors))
    return keeps_spec(op, x, dims=list(range(1, r)), extra=extra)


def _is_conv(op: str) -> bool:
    return op.startswith("conv") or op == "convolution"


def layout_op(op: str, operands: Sequence[Operand], *, training: Any = False,
              groups: Any = 1) -> Result:
    """An op on an ``(N, C, *spatial)`` input (:data:`.views.LAYOUT_OPS`: convolutions, pools,
    interpolation, pixel_shuffle, the norms), by the local rule's table: a dim the op keeps
    keeps its sharding (the batch always: a data-parallel CNN stays ``PS["dp", ...]``; the
    channels of pools and interpolation; every dim of pixel_shuffle), any other sharded dim is
    an error with the communication it needs: a convolution contracts the channels (a per-rank
    partial sum), a window along a spatial dim needs the neighbours' rows (a halo), a norm's
    statistics need the whole dims (batch_norm in training, or a mode the checker cannot read:
    the batch and the spatial dims; ``training=False`` uses the running statistics).  A
    convolution's weight may shard its out-channels (column parallel, ``groups=1``): the
    result's channels are sharded alike, and so must the bias be.  Any other tensor operand
    (weight, bias, running statistics) must be unsharded."""
    early = _enter(op, operands, mixing=True)
    if early is not None:
        return early
    x = operands[0]
    if x.type is None or x.type.spec is None:
        return _finish(op, operands, None, [no_rule_error(op, operands)])
    sp = x.type.spec
    r = len(sp)
    least, most, _, _ = LAYOUT_OPS[op]
    batched = r - 2 >= least and (most is None or r - 2 <= most)
    kept = layout_kept(op, r, training)
    if kept is None or not batched and r - 1 != most:
        return _finish(op, operands, None, [SpmdError(
            CODE, f"{op}: {_desc(x)} has {r} dims, not the (N, C, *spatial) input {op} takes")])
    c = 1 if batched else 0
    dims = range(r)
    bad = [d for d in dims if sp[d] and d not in kept]
    x_text = bare(x.text)
    w_op = operands[1] if _is_conv(op) and len(operands) > 1 else None
    w_spec = w_op.type.spec if w_op is not None and w_op.type is not None else None
    transpose = "transpose" in op
    if (c in bad and groups != 1 and op.startswith("conv")
            and w_spec and w_spec[0] == sp[c]):
        # a grouped convolution (depthwise: groups=C) whose input channels and weight
        # out-channels are sharded alike: each rank holds whole groups, the input channels
        # and the filters of the same groups; groups is the local count (as a literal size
        # is local), which torch checks against the local shapes.  A transposed one's weight
        # is [in, out/groups, *k]: its dim 0 is the in-channels, sharded like the input's,
        # and each rank's result holds the out-channels of its own groups
        bad.remove(c)
    if bad:
        d = bad[0]
        fix = redistribute_fix(x, sp, _unshard(sp, [b for b in bad if (b == c) == (d == c)]))
        on = _fmt_entry(sp[d])
        if op == "batch_norm":
            mode = ("in training mode" if training is True else
                    "in a mode the checker cannot read (taken as training: a module's "
                    "self.training is not read; F.batch_norm(..., training=False) uses the "
                    "running statistics)")
            stats = "(" + ", ".join(str(k) for k in dims if k != c) + ")"
            msg = (f"batch_norm {mode} computes each channel's mean and variance over dims {stats}, "
                   f"but dim {d} is sharded on {on} ({_desc(x, True)}): each rank would normalise "
                   f"with its own block's statistics; the statistics need a reduction over {on} "
                   f"(SyncBatchNorm's all_reduce of the sums): use the running statistics "
                   f"(training=False), compute the statistics in spmd.local_map with an "
                   f"all_reduce over {on}, or gather the dim first: {fix}")
            if d == c:
                msg = (f"batch_norm needs the channels (dim {c}) whole on each rank, but they are "
                       f"sharded on {on} ({_desc(x, True)}): its weight, bias and running "
                       f"statistics lie along them; gather them first: {fix}")
        elif d == c and _is_conv(op) and groups != 1:
            wfix = (f"shard the weight's out-channels alike "
                    f"({redistribute_fix(w_op, w_spec, (sp[c],) + tuple(w_spec[1:]))}: "
                    f"each rank then holds whole groups and passes its local count of them as "
                    f"groups, which torch checks), or "
                    if w_op is not None and w_spec and op.startswith("conv")
                    and not transpose else
                    f"shard the weight's in-channels (dim 0) alike "
                    f"({redistribute_fix(w_op, w_spec, (sp[c],) + tuple(w_spec[1:]))}: "
                    f"each rank then holds whole groups and passes its local count of them as "
                    f"groups, which torch checks), or "
                    if w_op is not None and w_spec and op.startswith("conv") else "")
            grouped = ("each group of channels is convolved with its own filters (no sum across "
                       "groups), but the weight's filters are not sharded alike, so each rank "
                       "would convolve its own channels with the filters of other groups")
            if groups is UNKNOWN:
                msg = (f"{op} with groups not a literal, on {x_text}'s channels (dim {c}) sharded "
                       f"on {on} ({_desc(x, True)}): with groups=1 each rank would sum only its "
                       f"own channels' terms (a per-rank partial sum); with more, {grouped}; "
                       f"{wfix}gather the channels first ({fix})")
            else:
                msg = (f"{op} with groups={groups!r} on {x_text}'s channels (dim {c}) sharded on "
                       f"{on} ({_desc(x, True)}): {grouped}; {wfix}gather the channels first ({fix})")
        elif d == c and _is_conv(op):
            msg = (f"{op} contracts the channels of {x_text} (dim {c}, sharded on {on}; "
                   f"{_desc(x)}): each rank would sum only its own channels' terms, a per-rank "
                   f"partial sum, and {op} takes no out_partial_axes; gather the channels first "
                   f"({fix}), or convolve in spmd.local_map (the weight's in-channels sharded "
                   f"alike) and all_reduce(..., {on}, src=P, dst=R) the partial result")
        elif d == c:
            what = ("its weight, bias and statistics lie along them" if op.endswith("_norm")
                    else "it moves channels between groups")
            msg = (f"{op} needs the channels (dim {c}) whole on each rank, but they are sharded on "
                   f"{on} ({_desc(x, True)}): {what}; gather them first: {fix}")
        elif op.endswith("_norm"):
            msg = (f"{op} computes its statistics over dim {d}, sharded on {on} ({_desc(x, True)}): "
                   f"each rank would normalise with its own block's statistics, which need a "
                   f"reduction over {on}; gather the dim first: {fix}")
        else:
            msg = (f"{op} reads a window of neighbouring positions along dim {d}, sharded on {on} "
                   f"({_desc(x, True)}): the positions at each block's edge need the neighbouring "
                   f"ranks' rows (a halo), which shard propagation does not exchange; gather the "
                   f"dim first: {fix}, or exchange the halo in spmd.local_map")
        return _finish(op, operands, None, [SpmdError(CODE, msg)])
    out = list(sp)
    extras = [o for o in operands[1:] if o.type is not None and o.type.spec is not None]
    if _is_conv(op) and len(operands) > 1 and operands[1].type is not None:
        w = operands[1]
        bias = operands[2] if len(operands) > 2 and operands[2].type is not None else None
        extras = [o for o in extras if o is not w and o is not bias]
        ws = w.type.spec if w.type is not None else None
        out_d = None if op == "convolution" else 1 if "transpose" in op else 0
        axes: tuple[str, ...] = ()
        # a grouped conv_transpose with the weight's in-channels (dim 0) sharded like the
        # input's channels: each rank holds whole groups (see above)
        t_alike = (transpose and groups != 1 and c < len(sp) and bool(sp[c]) and ws is not None
                   and len(ws) > 1 and tuple(ws[0]) == tuple(sp[c]))
        if ws is not None:
            wbad = [d for d, e in enumerate(ws) if e and d != out_d and not (t_alike and d == 0)]
            if wbad:
                return _finish(op, operands, None, [SpmdError(
                    CODE, f"{op}: the weight {_desc(w)} is sharded on dim {wbad[0]}: only its "
                          f"out-channels (dim {out_d}) may be sharded (column parallel), its "
                          f"in-channels and kernel dims must be whole on each rank; gather them "
                          f"first: {redistribute_fix(w, ws, _unshard(ws, wbad))}")])
            axes = ws[out_d] if out_d is not None and out_d < len(ws) else ()
        used = {a for e in sp for a in e}
        alike = groups != 1 and c < len(sp) and sp[c] and tuple(axes) == tuple(sp[c]) \
            and op.startswith("conv") and "transpose" not in op
        if t_alike and not axes:  # its out-channels per group whole: the result's alike
            axes, alike = tuple(sp[c]), True
        if axes and not alike and (groups != 1 or used & set(axes)):
            why = (f"groups={groups!r}: each rank's filters would meet the wrong channel groups "
                   f"(a grouped convolution takes them with {x_text}'s channels sharded alike: "
                   f"each rank then holds whole groups)"
                   if groups != 1 else f"{_fmt_axes(tuple(sorted(used & set(axes))))} already "
                   f"shards {x_text}")
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: the weight {_desc(w)} shards its out-channels (dim {out_d}) on "
                      f"{_fmt_axes(axes)}, which needs groups=1 (a literal) and an axis not "
                      f"sharding the input; here {why}; gather the weight first: "
                      f"{redistribute_fix(w, ws or (), _unshard(ws or (), [out_d or 0]))}")])
        out[c] = axes
        if bias is not None and bias.type is not None and bias.type.spec is not None \
                and tuple(bias.type.spec) != (axes,):
            bs = bias.type.spec
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: the bias {_desc(bias)} must be laid out like the result's channels, "
                      f"{format_spec((axes,))} (the weight's out-channels); "
                      f"{redistribute_fix(bias, bs, (axes,))}")])
    for o in extras:
        os_ = o.type.spec  # type: ignore[union-attr]
        if os_ is not None and any(os_):
            return _finish(op, operands, None, [SpmdError(
                CODE, f"{op}: {_desc(o)} is sharded, but its per-channel values must be whole on "
                      f"each rank; gather it first: {redistribute_fix(o, os_, _unshard(os_, range(len(os_))))}")])
    return _finish(op, operands, tuple(out), [])


def select(x: Operand, *, dim: int, op: str = "select") -> Result:
    """``x.select(dim, i)``: an integer index on ``dim``."""
    return _index_on_dim(x, dim, 0, op)


def narrow(x: Operand, *, dim: int, op: str = "narrow") -> Result:
    """``x.narrow(dim, start, length)``: a partial slice on ``dim``."""
    return _index_on_dim(x, dim, slice(0, 1), op)


@_dim_errors
def _index_on_dim(x: Operand, dim: int, key: int | slice, op: str) -> Result:
    """``x[:, ..., key]`` with ``key`` on ``dim``: the indexing rule on one dim."""
    early = _enter(op, [x], dim=dim)
    if early is not None:
        return early
    r = rank(x.type)  # type: ignore[arg-type]
    assert r is not None
    d = _norm_dim(dim, r)
    return index(x, [slice(None)] * d + [key], op=op)


# --------------------------------------------------------------------------------------
# the dispatcher

ELEMENTWISE = frozenset(
    name for name, spec in OP_SPECS.items() if spec.keeps_shard_dims
) - ALONG_DIM - NORMALIZE_TRAILING - {"group_norm"}
# elementwise ops the table does not list as shape-keeping (where(c, a, b), masked_fill,
# addcmul, addcdiv and lerp: ternary, each output element from the same elements)
_ELEMENTWISE_MORE = frozenset({"where", "masked_fill", "addcmul", "addcdiv", "lerp"})


def is_inplace(op: str) -> bool:
    """``x.add_(y)``, ``x.addcmul_(a, b)``: torch's trailing underscore (``_foreach_*`` and
    other private names, dunders: no), and ``x[...] = v`` (``__setitem__``), which writes
    into ``x`` too."""
    return (op.endswith("_") and not op.startswith("_")) or op == "__setitem__"


def inplace_base(op: str) -> str:
    """The out-of-place op whose rule an in-place op follows: ``addcmul_`` -> ``addcmul``,
    ``sign_`` -> ``sign``; ``op`` itself when it is not in place or its out-of-place op has
    no elementwise rule.  The in-place op's result is the out-of-place op's, written into
    ``self``: the result's spec must be ``self``'s (else the in-place error,
    ``ops.check_inplace``, which both adapters ask for the mutated tensor)."""
    if is_inplace(op):
        base = op[:-1]
        if base in ELEMENTWISE or base in _ELEMENTWISE_MORE:
            return base
    return op


def is_elementwise(op: str) -> bool:
    """Whether ``op`` has the elementwise rule (:func:`elementwise`, with broadcasting),
    in place or not: both adapters ask it to read the dims of size 1."""
    return op in ELEMENTWISE or op in _ELEMENTWISE_MORE or inplace_base(op) != op
EINSUM_LIKE = frozenset("matmul mm bmm mv dot inner outer".split())
_OUTER = {"outer": "i,j->ij", "ger": "i,j->ij"}
# the vector products whose equation depends on the operands' ranks (engine
# contractions.equation_at): inner, tensordot (its dims), linalg.vecdot (its dim)
_VECTOR_PRODUCTS = frozenset({"inner", "tensordot", "linalg_vecdot"})


def propagate(op: str, operands: Sequence[Operand], **params: Any) -> Result:
    """Type one op in global SPMD (see the module docstring for ``params``).

    With no global operand this is the local rule.  An op with no shard
    propagation rule on a global operand is an error (never a guess)."""
    if _all_local(op, operands):
        return local_propagate(op, operands)
    if op in CAST_OPS and cast_is_integral(params.get("dtype")):
        # a cast to an integer or bool dtype (``dtype``: as ops.call_spec reads it) is
        # non-linear: a Partial axis is its error; the layout is kept as by any cast
        cast = local_propagate(call_spec(op, {CAST_FORMAL: params["dtype"]}), operands[:1])
        if cast.errors and operands[0].type is not None:
            return _finish(op, operands[:1], operands[0].type.spec, [], base=cast)
    if op in ("type_as", "to") and len(operands) > 1:
        # x.type_as(y), x.to(y): y lends its dtype and device, the values and layout are x's
        return propagate(op, operands[:1], **params)
    if op in RANDOM_LIKE:  # torch.randn_like(x): a draw in x's layout
        return local_propagate(op, operands[:1])
    tensors = [o for o in operands if o.type is not None]
    x = operands[0]
    p = params
    opa = p.get("out_partial_axes")
    if op == "einsum":
        return einsum(p.get("equation", UNKNOWN), operands, out_partial_axes=opa)
    if op in ("matmul", "mm", "bmm", "mv", "dot", "vdot"):
        return matmul(operands[0], operands[1], out_partial_axes=opa, op=op)
    if op in _OUTER:
        return einsum(_OUTER[op], operands, out_partial_axes=opa, op=op,
                      call=f"spmd.einsum(\"{_OUTER[op]}\", {_texts(operands)})")
    if op in _VECTOR_PRODUCTS and len(operands) == 2:
        eq = _vector_product_equation(op, operands, p)
        if eq is not None:
            a = receiver(operands[0].text) + ".conj()" if op == "linalg_vecdot" else operands[0].text
            return einsum(eq, operands, out_partial_axes=opa, op=op,
                          call=f"spmd.einsum(\"{eq}\", {a}, {operands[1].text})")
    if op == "linear":
        return linear(operands[0], operands[1], operands[2] if len(operands) > 2 else None,
                      out_partial_axes=opa)
    if op in ("max", "min") and (len(tensors) >= 2 or p.get("binary")):
        return elementwise(op, operands, sizes_one=p.get("sizes_one"),
                           sizes_exact=p.get("sizes_exact", True))
    if op in REDUCTIONS:
        dim = p.get("dim")
        return reduction(op, x, dim=REDUCTION_DEFAULT_DIM.get(op) if dim is None else dim,
                         keepdim=p.get("keepdim", False), out_partial_axes=opa,
                         extra=operands[1:])
    if op in SELECT_ALONG_DIM:
        dim = -1 if op == "multinomial" else p.get("dim")
        return along_dim(op, x, dim=SELECT_ALONG_DIM[op] if dim is None else dim,
                         extra=operands[1:])
    if op in ALONG_DIM or op in NORMALIZE_TRAILING:
        return along_dim(op, x, dim=p.get("dim"), normalized_ndim=p.get("normalized_ndim"),
                         extra=operands[1:])
    if is_elementwise(op):
        if opa:
            return _finish(op, operands, None, [SpmdError(CODE, f"{op}: out_partial_axes applies to "
                                                              f"einsum, matmul, linear and sum only")])
        return elementwise(op, operands, sizes_one=p.get("sizes_one"),
                           sizes_exact=p.get("sizes_exact", True))
    if op in SPLITS:
        return split(x, dim=p.get("dim", 0), op=op)
    if op in ("expand", "broadcast_to"):
        return expand(x, shape=p.get("shape", UNKNOWN), op=op)
    if op == "expand_as" and len(operands) >= 2:
        return expand_as(operands[0], operands[1], op=op)
    if op in ("view_as", "reshape_as") and len(operands) >= 2:
        return reshape_as(operands[0], operands[1], op=op)
    if op in ("roll", "flip", "fliplr", "flipud", "rot90"):
        dims = p.get("dims")
        if dims is None:  # not stated: flip has no default, rot90 turns dims 0 and 1
            dims = UNKNOWN if op == "flip" else (0, 1) if op == "rot90" else None
        return roll(x, dims=dims, op=op)
    if op == "diff" and not any(o.type is not None for o in operands[1:]):
        return roll(x, dims=-1 if p.get("dim") is None else p["dim"], op=op)
    if op in FOURIER:
        return fourier(op, x, dim=p.get("dim"), s=p.get("s"))
    if op in CLASS_LOSSES:
        return class_loss(op, operands, reduction=p.get("reduction", "mean"))
    if op in ATTENTION:
        if len(tensors) < 3 or any(o.type is None for o in operands[:3]):
            # a query, key or value missing or not a tensor: the caller's own error (mypy's
            # arg-type or call-arg); the result is unknown
            return Result(SpmdType(), [])
        mask = operands[3] if len(operands) > 3 and operands[3].type is not None else None
        return attention(operands[0], operands[1], operands[2], mask,
                         is_causal=p.get("is_causal", False), op=op)
    if op == "permute":
        return permute(x, p.get("dims", UNKNOWN), op=op)
    if op in ("transpose", "swapaxes", "swapdims", "transpose_"):
        return transpose(x, p.get("dim0", UNKNOWN), p.get("dim1", UNKNOWN), op=op)
    if op in ("T", "t", "t_"):
        return reverse_dims(x, op=op)
    if op in ("mT", "mH", "adjoint"):
        return matrix_transpose(x, op=op)
    if op in ("movedim", "moveaxis"):
        return movedim(x, p.get("source", UNKNOWN), p.get("destination", UNKNOWN), op=op)
    if op in ("reshape", "view") and p.get("dtype_view"):
        # x.view(dtype): the bits reinterpreted, only the last dim's size may change; no
        # linear map (ops.DTYPE_VIEW_OPS): a Partial axis is its error, as for an integer cast
        viewed = along_dim(op, x, dim=-1)
        bits = local_propagate(call_spec("view", {CAST_FORMAL: p.get("dtype", UNREAD_VALUE)}), [x])
        if bits.errors and not viewed.errors and x.type is not None:
            return _finish(op, [x], viewed.type.spec, [], base=bits)
        return viewed
    if op in ("reshape", "view"):
        return reshape(x, shape=p.get("shape", UNKNOWN), in_shape=p.get("in_shape"),
                       mesh_sizes=p.get("mesh_sizes"), op=op)
    if op in ("flatten", "ravel"):
        return flatten(x, start_dim=p.get("start_dim", 0), end_dim=p.get("end_dim", -1), op=op)
    if op == "unflatten":
        return unflatten(x, dim=p.get("dim", UNKNOWN), sizes=p.get("sizes", UNKNOWN),
                         mesh_sizes=p.get("mesh_sizes"), op=op)
    if op in ("squeeze", "squeeze_"):
        return squeeze(x, dim=p.get("dim"), op=op)
    if op in ("unsqueeze", "unsqueeze_"):
        return unsqueeze(x, dim=p.get("dim", UNKNOWN), op=op)
    if op in ("cat", "concat", "concatenate"):
        return cat(operands, dim=p.get("dim", 0), op=op)
    if op == "stack":
        return stack(operands, dim=p.get("dim", 0), op=op)
    if op == "__getitem__":
        return index(x, p.get("index", UNKNOWN), op=op, extra=operands[1:])
    if op == "__setitem__":
        return setitem(x, p.get("index", UNKNOWN), operands)
    if op == "select":
        return select(x, dim=p.get("dim", UNKNOWN), op=op)
    if op == "narrow":
        return narrow(x, dim=p.get("dim", UNKNOWN), op=op)
    if op == "embedding":
        return embedding(operands[0], operands[1] if len(operands) > 1 else None, op=op)
    if op in SCATTERS and len(operands) >= 2:
        src = operands[2] if len(operands) > 2 and operands[2].type is not None else None
        reduce = ("sum" if op.startswith("scatter_add") else p.get("reduce", UNKNOWN)
                  if op.startswith("scatter_reduce") else None)
        return scatter_along(op, operands[0], operands[1], src, dim=p.get("dim", UNKNOWN),
                             reduce=reduce)
    if op in SEGMENT_SUMS and operands:
        return segment_sum(op, operands, dim=p.get("dim", 0), accumulate=p.get("accumulate", False))
    if op in GATHERS and len(operands) >= 2:
        return gather_along(op, operands[0], operands[1], dim=p.get("dim", UNKNOWN))
    if op == "index_select" and len(operands) >= 2:
        return lookup(op, operands[0], operands[1], dim=p.get("dim", UNKNOWN))
    if op in ("triu", "tril", "triu_", "tril_"):
        return keeps_spec(op, x, dims=(-2, -1))
    if op == "repeat_interleave" and x.type is not None:
        return repeat_interleave(x, dim=p.get("dim"), int_repeats=p.get("int_repeats", False),
                                 extra=[o for o in operands[1:] if o.type is not None], op=op)
    if op == "pad":
        return pad(x, pad=p.get("pad", UNKNOWN), extra=operands[1:], op=op)
    if op == "group_norm":
        return group_norm(x, operands[1:], op=op)
    if op in LAYOUT_OPS and op != "constant_pad_nd":
        return layout_op(op, operands, training=p.get("training", False), groups=p.get("groups", 1))
    if op in ("view_as_real", "view_as_complex"):
        return complex_view(x, op=op)
    return _finish(op, operands, None, [no_rule_error(op, operands)])


def setitem(x: Operand, items: Any, operands: Sequence[Operand]) -> Result:
    """``x[index] = value`` on a global ``x`` (``operands``: ``x``, the index's tensors,
    ``value``): the value is written into the view ``x[index]`` as ``copy_`` writes it into
    a tensor.  The view's layout is the index rule's (:func:`index`); the write is the
    elementwise rule with the view kept (``value`` broadcast into it: an untyped, scalar or
    broadcast value lands in each rank's block as it is, a value laid out otherwise is the
    layout error whose fix redistributes the value, never ``x``).  An index the index rule
    rejects (an int or a partial slice of a sharded dim: each rank would write into its own
    shard) has no rule: local_map.  The result has ``x``'s layout; the adapters then check
    the write as any store (``ops.check_inplace``)."""
    op = "__setitem__"
    if len(operands) < 2:
        return _finish(op, operands, None, [no_rule_error(op, operands)])
    if items is UNKNOWN or (isinstance(items, (tuple, list)) and any(i is UNKNOWN for i in items)):
        return _finish(op, operands, None, [_nonliteral(op, "index", x)])
    view = index(x, items, extra=operands[1:-1])
    if view.errors or view.type.spec is None:
        return _finish(op, operands, None, [no_rule_error(op, operands)])
    write = elementwise(op, [replace(x, type=view.type), operands[-1]])
    if write.errors:
        return Result(SpmdType(), list(write.errors))
    return _finish(op, operands, x.type.spec if x.type is not None else None, [])


def complex_view(x: Operand, *, op: str) -> Result:
    """``torch.view_as_real(x)`` appends an unsharded dim of size 2 (the real and imaginary
    parts); ``torch.view_as_complex(x)`` drops that trailing dim, which must be whole on each
    rank (keeps_spec's error otherwise); every other dim keeps its sharding."""
    if op == "view_as_complex":
        kept = keeps_spec(op, x, dims=(-1,))
        if kept.errors or x.type is None or x.type.spec is None or not x.type.spec:
            return kept
        return _finish(op, [x], x.type.spec[:-1], [])
    early = _enter(op, [x])
    if early is not None:
        return early
    if x.type is None or x.type.spec is None:
        return Result(SpmdType(), list(local_propagate(op, [x]).errors))
    return _finish(op, [x], x.type.spec + ((),), [])


def no_rule_error(op: str, operands: Sequence[Operand]) -> SpmdError:
    """An op without a shard propagation rule on a global operand.  The fix redistributes
    a *sharded* operand to the unsharded spec; when every global operand is already
    unsharded no redistribute helps (a suggestion is never a no-op): local_map only.  An
    in-place op's ``self`` is never the one redistributed (the copy would take the update)."""
    globals_ = [o for o in operands if is_global(o.type)]
    g = globals_[0]
    sharded = next((o for o in globals_ if any(o.type.spec or ())), None)  # type: ignore[union-attr]
    if is_inplace(op) and operands and sharded is operands[0]:
        # x.op_(...) writes into x: spmd.redistribute(x, ...) is a new tensor, which would
        # take the update while x keeps its old values (an optimizer state never updated)
        how = (f"wrap the code in spmd.local_map ({op} writes into {bare(sharded.text)} in "
               f"place, so redistributing it would update a copy: no redistribute helps)")
    elif sharded is not None:
        sp = sharded.type.spec  # type: ignore[union-attr]
        assert sp is not None
        how = (f"wrap the code in spmd.local_map, or redistribute {sharded.text} to an unsharded "
               f"spec ({redistribute_fix(sharded, sp, _unshard(sp, range(len(sp))))}) first")
    else:
        how = ("wrap the code in spmd.local_map (the global operands are already unsharded, so "
               "no redistribute helps)")
    return SpmdError(
        CODE, f"{op} has no shard propagation rule in global SPMD ({_desc(g, True)}); do it in local "
              f"SPMD: {how}")


# --------------------------------------------------------------------------------------
# local_map


def localize(t: SpmdType, axes: Iterable[str] | None,
             mesh_axes: Iterable[str] | None = None) -> SpmdType:
    """The local type inside ``spmd.local_map(axes=...)`` of a value of global type ``t``:
    each axis in ``axes`` (None: all) leaves the spec and becomes ``S(d)`` (V with its
    dim) if it sharded dim d, else keeps its R/I/P type.  When no global axis is left
    (``axes=None``, or ``axes`` names every axis of the mesh, ``mesh_axes``, when the
    caller knows it) the spec is dropped: the value is fully local, and the local rules
    apply to it (a spec of unsharded dims would keep it global)."""
    if t.spec is None:
        return t
    if axes is None:
        return SpmdType(t.axes)
    ax = set(axes)
    if mesh_axes is not None and set(mesh_axes) <= ax:
        return SpmdType(t.axes)
    spec = tuple(tuple(a for a in e if a not in ax) for e in t.spec)
    return SpmdType(t.axes, spec)


def globalize(t: SpmdType, declared: SpmdType) -> SpmdType:
    """The global type a local result takes on exiting ``local_map``: ``declared``."""
    return declared


def check_local_map_boundary(local: SpmdType, declared: SpmdType, axes: Iterable[str] | None,
                             *, what: str = "the result", where: str = "out_types") -> list[SpmdError]:
    """The body's local type ``local`` against the declared global type ``declared``
    (an ``out_types`` or ``in_types`` entry) seen locally on ``axes``.

    Per axis: the same R/I/P; an axis the spec shards on dim d is V (or S(d)) locally,
    the dims compared at the rank the spec states (``S(-1)`` is ``S(1)`` where ``PS[None,
    "tp"]`` is declared).  An axis either side does not mention is unchecked (gradual)."""
    want = localize(declared, axes)
    rank = stated_rank(declared)
    errors = []
    for a, lt in want.axes:
        got = local.get(a)
        if got is None:
            continue
        ok = shard_dims_match(got, lt, rank)
        if not ok:
            if lt.kind is Kind.V:
                need = f"V (it shards dim {lt.dim} in {format_spec(declared.spec or ())})"
            else:
                need = lt.kind.value
            fix = at_stated_rank(got, rank) if lt.kind is Kind.V else ""
            if got.kind is Kind.V and lt.kind is Kind.P:
                fix = f'; reinterpret(..., "{a}", src=V, dst=P) if the locals are summands'
            elif got.kind is Kind.P and lt.kind is Kind.R:
                fix = f'; all_reduce(..., "{a}", src=P, dst=R) before returning'
            elif got.kind is Kind.P and lt.kind is Kind.V:
                fix = f'; reduce_scatter(..., "{a}", src=P, dst=V) before returning'
            elif got.kind is Kind.V and lt.kind is Kind.R:
                fix = f'; all_gather(..., "{a}", src=V, dst=R) before returning, or declare it sharded'
            errors.append(SpmdError(
                "spmd-mismatch",
                f'local_map: {what} is {got} on "{a}" ({format_type(local)}) but {where} declares '
                f"{format_type(declared)}, which is {need} on \"{a}\" inside the local region{fix}",
            ))
    return errors


__all__ = [
    "UNKNOWN", "TensorIndex", "propagate", "einsum", "matmul", "linear", "elementwise",
    "reduction", "along_dim", "permute", "transpose", "reverse_dims", "matrix_transpose",
    "movedim", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "cat", "stack",
    "index", "select", "narrow", "lookup", "embedding", "LOOKUPS", "GATHERS", "gather_along", "keeps_spec", "pad",
    "group_norm", "layout_op", "no_rule_error", "split", "expand", "expand_as", "reshape_as", "roll", "fourier", "FOURIER", "class_loss", "attention", "ATTENTION", "is_global", "rank", "global_axes", "localize", "globalize",
    "check_local_map_boundary", "redistribute_fix", "local_shape", "parse_equation", "SameDim", "SamePrefix", "ANY_SIZE",
    "ELEMENTWISE", "REDUCTIONS", "ALONG_DIM", "LINEAR_REDUCTIONS", "check_argument",
    "is_inplace", "inplace_base", "is_elementwise",
]


def check_argument(have: SpmdType, want: SpmdType, *, x_text: str = "x",
                   where: str = "the argument") -> list[SpmdError] | None:
    """A global argument passed where a global type is declared: the same partition spec
    and the same R/I/P on the axes both name, else one error whose fix is the
    ``spmd.redistribute`` call.  None when either side is not global (the per-axis
    check applies)."""
    if have.spec is None or want.spec is None:
        return None
    same = have.spec == want.spec and all(
        have.get(a) is None or have.get(a).kind is lt.kind for a, lt in want.axes)  # type: ignore[union-attr]
    if same:
        return []
    if len(have.spec) != len(want.spec):
        fix = f"the ranks differ ({len(have.spec)} and {len(want.spec)}): reshape it first"
    else:
        fix = f"use spmd.redistribute({x_text}, src={format_type(have)}, dst={format_type(want)})"
    return [SpmdError(
        "spmd-mismatch",
        f"{where} is {format_type(have)} but {format_type(want)} is expected; {fix}",
    )]


def collective(
    op: str,
    x: SpmdType,
    result: SpmdType,
    axes: Sequence[str],
    src: LocalType | None,
    dst: LocalType | None,
    *,
    x_text: str = "x",
    new_dim0: bool = False,
) -> tuple[SpmdType, list[SpmdError]]:
    """The partition spec of a per-axis collective's result on a global ``x`` (SPEC
    section 6: a collective on a global axis acts on the innermost axis sharding a dim).

    ``result`` is the local rule's result (:func:`.collectives.check_collective`); this
    moves the axes in the spec::

        all_gather(x: PS[("dp", "tp"), None], "tp", src=S(0), dst=R)  ->  PS["dp", None]
        all_gather(x: PS[("dp", "tp"), None], "dp", ...)              ->  error: dp is not
                                                                         the innermost axis
        reduce_scatter(p: PS[None, None] P:tp, "tp", src=P, dst=S(0)) ->  PS["tp", None]
        all_to_all(x: PS[None, "tp"], "tp", src=S(1), dst=S(0))        ->  PS["tp", None]

    ``new_dim0``: the op's local effect adds a dim 0 (``all_gather(V, R|I)`` stacks the
    ranks' values on it, ``convert(V, P)`` pads one with this rank's slot; SPEC section 4):
    the spec gets a new unsharded dim 0, and the dims after it move up one::

        all_gather(c: PS[None] V:dp, "dp", src=V, dst=R)        ->  PS[None, None]
        all_gather(x: PS["dp", None], "dp", src=V, dst=R)       ->  PS[None, None, None]

    A ``V`` destination (no dim) has no global layout: an error asking for ``S(i)``.
    A local ``x`` (no spec) is returned unchanged."""
    if x.spec is None:
        return result, []
    spec = [list(e) for e in x.spec]
    moving = [a for a in axes if any(a in e for e in spec)]
    call = f"{op}({x_text}, {_fmt_axes(tuple(axes))}, src={src}, dst={dst})"
    if moving:
        d = next(i for i, e in enumerate(spec) if moving[0] in e)
        entry = spec[d]
        if any(a not in entry for a in moving):
            return SpmdType(), [SpmdError(
                CODE, f"{call}: the axes shard different dims of {x_text} "
                      f"({format_type(x)}); one collective acts on one dim")]
        k = len(moving)
        if tuple(entry[-k:]) != tuple(moving):
            inner = _fmt_axes(tuple(entry[-k:]))
            return SpmdType(), [SpmdError(
                CODE,
                f"{call}: {_fmt_axes(tuple(moving))} is not the innermost axis sharding dim {d} "
                f"of {x_text} ({format_type(x)}, innermost {inner}); a per-axis collective acts "
                f"on the innermost axis: move {inner} first, or plan the whole change with "
                f"spmd.redistribute({x_text}, src={format_spec(x.spec)}, dst=PS[...])",
            )]
        del entry[-k:]
    if dst is not None and dst.kind is Kind.V:
        if dst.dim is None:
            return SpmdType(), [SpmdError(
                CODE,
                f"{call}: dst=V has no global layout on the global tensor {x_text} "
                f"({format_type(x)}); name the dim with dst=S(i), or do this inside spmd.local_map",
            )]
        if not 0 <= dst.dim < len(spec):
            return SpmdType(), [SpmdError(CODE, f"{call}: dim {dst.dim} is out of range for rank {len(spec)}")]
        spec[dst.dim].extend(a for a in axes if a not in spec[dst.dim])
    if new_dim0:
        spec.insert(0, [])
    new_spec = tuple(tuple(e) for e in spec)
    out = dict(result.axes)
    for d2, e in enumerate(new_spec):
        for a in e:
            out[a] = shard(d2)
    return SpmdType.of(out, new_spec), []
