"""Collectives and conversions: the valid src/dst pairs and the backward of each.

Forward and backward by state transition (the gradient's type is the dual of
the forward's: R <-> P, I <-> I, V <-> V, S(i) <-> S(i))::

    forward  op                           backward  op
    R -> I   reinterpret(R,I)             I -> P    convert(I,P)
    R -> V   reinterpret(R,V)|convert     V -> P    reinterpret(V,P)|convert
    R -> P   reinterpret(R,P)|convert     R -> P    the same op (self-dual)
    I -> R   reinterpret(I,R)             P -> I    all_reduce(P,I)
    I -> V   convert(I,V)                 V -> I    all_gather(V,I)
    I -> P   convert(I,P)                 R -> I    reinterpret(R,I)
    V -> R   all_gather(V,R)              P -> V    reduce_scatter(P,V)
    V -> I   all_gather(V,I)              I -> V    convert(I,V)
    V -> V   all_to_all(V,V)              V -> V    all_to_all, dims swapped
    V -> P   reinterpret(V,P)|convert     R -> V    reinterpret(R,V)|convert
    P -> R   all_reduce(P,R)              P -> R    all_reduce(P,R) (self-dual)
    P -> I   all_reduce(P,I)              I -> R    reinterpret(I,R)
    P -> V   reduce_scatter(P,V)          V -> R    all_gather(V,R)

S(i) stands wherever V does in ``convert`` and the collectives, the dim carried
through (``all_gather(S(i),R)`` concatenates on dim i; its backward is
``reduce_scatter(P,S(i))``).  ``reinterpret`` takes only R, I, V, P.  An
all-gather on three ranks, in the seeds' notation::

    [A]
    [B]  =>  [A, B, C]          (S(0) -> R: concatenate on dim 0)
    [C]

The table is data (:data:`TRANSITIONS`); the mypy plugin, the runtime
collectives, the runtime checker and the report all read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .errors import SpmdError
from .types import (
    SAME_VALUES, Kind, LocalType, SpmdType, axis_words, bare, format_axes, format_axis,
    format_type, is_subscript, mismatched_axes, receiver, shard_dims_match, stated_rank,
    trailing_group_start,
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
CONVERSIONS = ("reinterpret", "convert")
OPS = COLLECTIVES + CONVERSIONS + ("redistribute",)

# A "form" is a local type with the shard dim abstracted: R, I, V, S (V with a dim), P.
Form = str


def form(t: LocalType) -> Form:
    return "S" if t.dim is not None else t.kind.value


@dataclass(frozen=True)
class Step:
    """One op of a forward or backward: ``all_reduce(P,I)``; ``S`` forms carry the dim."""

    op: str
    src: Form
    dst: Form
    note: str = ""

    @property
    def communicates(self) -> bool:
        return self.op in COLLECTIVES

    def render_key(self) -> tuple[str, Form, Form]:
        return (self.op, self.src, self.dst)

    def render(self, src_dim: int | None = None, dst_dim: int | None = None) -> str:
        s = f"S({src_dim})" if self.src == "S" and src_dim is not None else self.src
        d = f"S({dst_dim})" if self.dst == "S" and dst_dim is not None else self.dst
        return f"{self.op}({s},{d})" + (f" {self.note}" if self.note else "")


@dataclass(frozen=True)
class Transition:
    op: str
    src: Form
    dst: Form
    backward: tuple[Step, ...]
    expert: bool = False  # needs expert_mode=True
    alias_of: str | None = None  # convert(I,R) is a spelling of reinterpret(I,R)
    swaps_dims: bool = False  # the backward's src/dst dims are the forward's dst/src

    @property
    def forward(self) -> Step:
        return Step(self.alias_of or self.op, self.src, self.dst)


def _t(op: str, src: Form, dst: Form, *backward: Step, **kw: object) -> Transition:
    return Transition(op, src, dst, tuple(backward), **kw)  # type: ignore[arg-type]


S_ = Step
TRANSITIONS: dict[tuple[str, Form, Form], Transition] = {
    (t.op, t.src, t.dst): t
    for t in [
        # all_reduce: P -> R | I
        _t("all_reduce", "P", "R", S_("all_reduce", "P", "R")),
        _t("all_reduce", "P", "I", S_("reinterpret", "I", "R")),
        # all_gather: V -> R | I (stack, new dim 0); S(i) -> R | I (concat on i)
        _t("all_gather", "V", "R", S_("reduce_scatter", "P", "V")),
        _t("all_gather", "V", "I", S_("convert", "I", "V")),
        _t("all_gather", "S", "R", S_("reduce_scatter", "P", "S")),
        _t("all_gather", "S", "I", S_("convert", "I", "S")),
        # reduce_scatter: P -> V (unbind dim 0) | S(i) (chunk dim i)
        _t("reduce_scatter", "P", "V", S_("all_gather", "V", "R")),
        _t("reduce_scatter", "P", "S", S_("all_gather", "S", "R")),
        # all_to_all: V | S(i) -> V | S(j); backward swaps the dims
        _t("all_to_all", "V", "V", S_("all_to_all", "V", "V"), swaps_dims=True),
        _t("all_to_all", "V", "S", S_("all_to_all", "S", "V"), swaps_dims=True),
        _t("all_to_all", "S", "V", S_("all_to_all", "V", "S"), swaps_dims=True),
        _t("all_to_all", "S", "S", S_("all_to_all", "S", "S"), swaps_dims=True),
        # reinterpret: local data kept, meaning may change
        _t("reinterpret", "R", "I", S_("convert", "I", "P")),
        _t("reinterpret", "R", "V", S_("reinterpret", "V", "P")),
        _t("reinterpret", "R", "P", S_("reinterpret", "R", "P"), expert=True),
        _t("reinterpret", "I", "R", S_("all_reduce", "P", "I")),
        _t("reinterpret", "I", "V", S_("reinterpret", "V", "P"), S_("all_reduce", "P", "I")),
        _t("reinterpret", "I", "P", S_("reinterpret", "R", "P"), S_("all_reduce", "P", "I"),
           expert=True),
        _t("reinterpret", "V", "P", S_("reinterpret", "R", "V")),
        # convert: meaning kept, local data may change
        _t("convert", "R", "V", S_("convert", "V", "P")),
        _t("convert", "R", "S", S_("convert", "S", "P")),
        _t("convert", "R", "P", S_("convert", "R", "P")),
        _t("convert", "I", "V", S_("all_gather", "V", "I")),
        _t("convert", "I", "S", S_("all_gather", "S", "I")),
        _t("convert", "I", "P", S_("reinterpret", "R", "I")),
        _t("convert", "V", "P", S_("convert", "R", "V")),
        _t("convert", "S", "P", S_("convert", "R", "S")),
        _t("convert", "I", "R", S_("all_reduce", "P", "I"), alias_of="reinterpret"),
        _t("convert", "R", "I", S_("convert", "I", "P"), alias_of="reinterpret"),
    ]
}

# all_reduce with op="max"/"min": V -> R | I, no gradient.
NO_GRAD_REDUCE_OPS = ("max", "min")
# Transitions with no backward, allowed only on a value that carries no gradient (as the
# max/min all_reduce): reinterpret(P,V) reads a pending sum's local tensor, this rank's
# summand, as its own per-rank value.  Its dual would be reinterpret(V,R), which no valid op
# is (the ranks' gradients differ); without a gradient it is the local data as it is: a
# communication hook's compression of a gradient (quantize or top-k this rank's summand,
# exchange the codes).  Not in TRANSITIONS: every entry there has a backward.
NO_GRAD_TRANSITIONS: frozenset[tuple[str, Form, Form]] = frozenset({("reinterpret", "P", "V")})
REDUCE_OPS = ("sum", "avg") + NO_GRAD_REDUCE_OPS
# reduce_scatter reduces a pending sum: the sum, or the sum divided by the axis size
SCATTER_REDUCE_OPS = ("sum", "avg")


# The typed collectives that take a pending partial sum (a contraction's, or a sum's over a
# shard dim: each rank's value is its part of a sum over the ranks, typed V until the code says
# so) as what it is, read by both adapters (the plugin's declared_partials, the check mode's
# _check_pending): reinterpret(V->P) declares it; an all_reduce or reduce_scatter with src=P
# (Megatron's reduce_from_tensor_model_parallel_region and
# reduce_scatter_to_sequence_parallel_region are these) reduces it, its numbers being exactly
# the per-rank parts src=P describes.  Any other use of a pending value stays an error.
PENDING_TAKERS = ("reinterpret", "all_reduce", "reduce_scatter")
# What each kind of pending value (ops.pending_kind) lets a src=P reduction do with it:
# a contraction's product ("product"): op "sum" or "avg" (the scale may sit in its operands:
# a gradient x.T @ dy whose dy carries this rank's 1 / batch, DDP's average); a sum over the
# shard dim ("sum"): op "sum" only (an average of the ranks' parts is the sum / the axis size,
# neither the sum nor a mean of the whole); a mean over it ("mean": each rank's block mean, no
# part of a sum): op "avg" only (the mean of equal blocks' means is the whole's mean; their
# sum is the axis size times it), and never reinterpret(V->P); a sum and a mean added
# ("mixed"): nothing.
PENDING_REDUCE_OPS: dict[str, tuple[str, ...]] = {
    "product": ("sum", "avg"), "sum": ("sum",), "mean": ("avg",), "mixed": ()}


def takes_pending(op: str, src: LocalType | None, dst: LocalType | None,
                  reduce_op: str = "sum", kind: str = "product") -> bool:
    """``op(x, ..., src=src, dst=dst, op=reduce_op)`` takes a pending value ``x`` of
    ``kind`` (:data:`PENDING_REDUCE_OPS`; ``src`` None: the op's default, P for the
    reductions)."""
    if op == "reinterpret":
        return (src is not None and src.kind is Kind.V and src.dim is None
                and dst is not None and dst.kind is Kind.P and kind in ("product", "sum"))
    if op in ("all_reduce", "reduce_scatter"):
        return (src is None or src.kind is Kind.P) and reduce_op in PENDING_REDUCE_OPS.get(kind, ())
    return False


def pending_refusal(op: str, src: LocalType | None, dst: LocalType | None,
                    reduce_op: str = "sum", kind: str = "product") -> str:
    """Why a collective that takes some pending value does not take one of ``kind``: "sum"
    (a reinterpret(V->P) or a summing reduction of a mean: the ranks' block means summed),
    "avg" (an averaging reduction of a sum: the sum / the axis size); "" when it takes it,
    or takes no pending value at all."""
    if not takes_pending(op, src, dst, reduce_op) or takes_pending(op, src, dst, reduce_op, kind):
        return ""
    return "avg" if op != "reinterpret" and reduce_op == "avg" else "sum"


def pending_left(op: str, on: Sequence[str], src: LocalType | None, dst: LocalType | None,
                 pending: Sequence[str], reduce_op: str = "sum", kind: str = "product"
                 ) -> tuple[str, ...] | None:
    """The axes of ``pending`` (where a value of ``kind`` is pending) that the collective
    ``op`` over ``on`` leaves pending: () when it takes the whole pending value; None when
    the collective takes no such value at all (:func:`takes_pending`)."""
    if not takes_pending(op, src, dst, reduce_op, kind):
        return None
    return tuple(a for a in pending if a not in on)


def pending_left_note(call: str, on: Sequence[str], left: Sequence[str]) -> str:
    """The words an error on a pending sum left on ``left`` adds when its value goes to a
    reduction over ``on`` (:func:`pending_left`): which axes the call misses, and the call
    over them all."""
    every = tuple(dict.fromkeys((*on, *left)))
    return (f"; the {call} it goes to takes the parts over {axis_words(list(on))} only, "
            f"leaving {axis_words(list(left))} a per-rank part: reduce over "
            f"{format_axis(every if len(every) > 1 else every[0])} in that call")


def route(src: LocalType, dst: LocalType) -> tuple[str, Form, Form] | None:
    """Which op implements ``src -> dst`` keeping the meaning (what redistribute runs).

    Returns ``None`` for the identity (same type).
    """
    s, d = form(src), form(dst)
    if src == dst:
        return None
    if s == "P":
        op = "all_reduce" if d in ("R", "I") else "reduce_scatter"
    elif s in ("V", "S"):
        if d in ("R", "I"):
            op = "all_gather"
        elif d in ("V", "S"):
            op = "all_to_all"
        else:
            op = "convert"
    elif (s, d) in (("I", "R"), ("R", "I")):
        op = "reinterpret"
    else:
        op = "convert"
    return (op, s, d) if (op, s, d) in TRANSITIONS else None


_PURPOSE = {
    "all_reduce": "a reduction",
    "all_gather": "a gather",
    "reduce_scatter": "a reduce-scatter",
    "all_to_all": "an all-to-all",
    "convert": "a local conversion",
    "reinterpret": "a reinterpretation",
}


def _arg(t: LocalType) -> str:
    return str(t)


@dataclass(frozen=True)
class RankMax:
    """A V value is computed from a name bound to this rank's max (or min), which the
    value's own text does not show (the adapter reads the name's assignment: ``amax =
    w.detach().abs().amax()`` then ``scale = 448.0 / amax.clamp(min=1e-12)``, by
    :func:`max_reduction`).  Its ranks' values sum to no max: the fix takes the max of
    ``name`` over the ranks where it is made, not the sum of the value."""

    name: str
    op: str        # "max" or "min"
    source: str    # the name's assigned expression, as written
    detached: bool  # the source carries no gradient (a detach, a max over the ranks)
    # the name whose assignment holds the max as a part (``name`` is then the max's own
    # text: ``scale = 127 / w.detach().abs().amax()``), or "" (``name`` is assigned the max)
    within: str = ""


@dataclass(frozen=True)
class RankEvery:
    """A value computed from a rank query over every mesh axis (``dist.get_rank()``, a
    group-less query) where the code around it varies on some axes only (``meant``: an
    operand there is S(i) or V, the data is split there) and on ``axes`` not at all: it then
    varies on ``axes`` only because the query counts their ranks too (a CLIP loss offsetting
    its labels by the global rank on a dp x tp mesh), and no collective or reinterpret of
    the result is the fix: the rank on the meant axes is (the adapter finds the query on
    the error path: the static checker's rank_index)."""

    text: str               # the rank-derived value as written (``labels``)
    query: str | None       # the query as written (``dist.get_rank()``), None: not found
    axes: tuple[str, ...]   # where it varies only because of the query
    meant: tuple[str, ...]  # where the operands vary

    def hint(self) -> str:
        q = self.query or "the rank query it is computed from"
        if len(self.meant) == 1:
            m = self.meant[0]
            use = f'mesh.get_local_rank("{m}") (or dist.get_rank(group) of the {m} group)'
        else:
            use = (" and ".join(f'mesh.get_local_rank("{m}")' for m in self.meant)
                   + f" (the ranks on {axis_words(self.meant)})")
        return (f"{bare(self.text)} varies on {axis_words(self.axes)} because {q} is the rank "
                f"over every mesh axis; use {use} in its place")

    def covers(self, axis: str | Sequence[str]) -> bool:
        axes = (axis,) if isinstance(axis, str) else axis
        return bool(axes) and all(a in self.axes for a in axes)

    def prefixed(self, errors: Sequence[SpmdError]) -> list[SpmdError]:
        """An op's errors that name one of ``axes`` (those the query's V there caused), the
        hint first: the suggested collective or reinterpret would make the program pass
        with the wrong rank."""
        out = []
        for e in errors:
            if any(f'"{a}"' in e.message for a in self.axes):
                e = SpmdError(e.code, f"{self.hint()}; if the rank over every axis is meant: "
                                      f"{e.message}")
            out.append(e)
        return out


@dataclass(frozen=True)
class SliceIndex:
    """What the adapter knows of the index of a subscript ``full[...]`` passed R (or I)
    where S(i) (or V) is needed on an axis: ``axes``, the mesh axes of the rank query the
    index is computed from (``self.dp_rank = mesh.get_local_rank("dp")``), or () when the
    index holds no rank at all (literals, sizes, locals and ``self`` attributes bound in
    ``__init__`` from no rank query: ``slopes[:self.hl]``); ``query``: the rank-derived
    name or call as written.  Unknown (a parameter, an attribute set outside ``__init__``):
    no SliceIndex.  A slice that is no rank's part takes the same rows on every rank of the
    axis: neither its reinterpret to V nor its convert is this rank's part (probe-heads 1:
    both, pasted, passed both checkers with wrong losses)."""

    axes: tuple[str, ...] = ()
    query: str = ""


def subscript_base(x_text: str) -> str | None:
    """``slopes`` of ``slopes[:hl]`` (a slice, a ``:`` in the index at its top level);
    None for any other text (``xs[0]`` drops a dim: its base is no stand-in for it)."""
    text = bare(x_text)
    if not is_subscript(text):
        return None
    i = trailing_group_start(text)
    index = text[i + 1:-1]
    depth = 0
    for ch in index:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            return None  # a slice of another dim too: not one dim's chunk
    if ":" not in index:
        return None
    base = text[:i]
    return base if base else None


def _slice_fix(src: LocalType, dst: LocalType, x: str, ax: str, axis: str | tuple[str, ...],
               sl: SliceIndex | None) -> str:
    """The fix of a slice ``x`` passed R or I where S(i) or V (``dst``) is needed on ``axis``
    (``ax`` as written), by what the adapter knows of its index (``sl``)."""
    d = dst.dim if dst.dim is not None else 0
    base = subscript_base(x) if d == 0 else None  # (the slice is of dim 0)
    tag = f"{_arg(src)} to {_arg(dst)}"
    whole = (f"convert({base}, {ax}, src={_arg(src)}, dst=S({d})) in place of {x} (this "
             f"rank's chunk of dim {d} of the whole {base}; a convert of the slice would chunk "
             f"the slice)" if base is not None else
             f"convert({x}, {ax}, src={_arg(src)}, dst={_arg(dst)}) (a convert of this "
             f"rank's slice would chunk it again)")
    words = axis if isinstance(axis, str) else "_".join(axis)
    rank = f'mesh.get_local_rank({ax})' if isinstance(axis, str) else "this rank's index on " + ax
    by_rank = (f"slice {base if base is not None else 'it'} by the {words} rank ({rank}) "
               f"in its place")
    if sl is not None and not sl.axes:
        return (f"{tag}: {x} takes the same slice on every rank of {ax} (its index holds no "
                f"rank), which is no rank's part: to keep this rank's chunk of the whole, "
                f"{whole}, or {by_rank}")
    if sl is not None:
        other = axis_words(sl.axes)
        names = " and ".join(f"the {a} rank" for a in sl.axes)
        q = f" ({sl.query})" if sl.query else ""
        return (f"{tag}: its index is {names}{q}, which varies on {other}, not on {ax}: "
                f"{by_rank}, or {whole}")
    return (f"{tag}: if the slice is this rank's part (its index from "
            f"a rank the checker does not see, such as a parameter or an attribute set outside "
            f"__init__), {x} is V: use "
            f"reinterpret({x}, {ax}, src={_arg(src)}, dst=V)"
            + (f", which S({dst.dim}) may be claimed from" if dst.dim is not None else
               " (the local data unchanged)")
            + f"; otherwise, to keep this rank's chunk of the whole, {whole}")


# Ops whose result is a position in a dim of their input (an argmax, a top-k's indices, a
# sample): a V one is an index into this rank's shard of that input, and neither the ranks'
# indices stacked (all_gather) nor summed is the index over the whole.  ARGMAX_OPS: those
# whose index over the whole is also had from the max over the ranks and an index fix-up.
INDEX_OPS = frozenset("""argmax argmin argsort topk sort max min kthvalue mode median nanmedian
cummax cummin multinomial""".split())
ARGMAX_OPS = {"argmax": "max", "argmin": "min", "max": "max", "min": "min"}
COMPARE = "compare"


@dataclass(frozen=True)
class IndexValue:
    """A V value that holds indices or integer/bool values, passed where R (or I) is needed:
    the gather and the sum :func:`suggest` offers for a V stack or add the ranks' indices.
    ``op``: what made it, an op of :data:`INDEX_OPS` (``logits.argmax(-1)``, ``x.topk(k)
    .indices``), :data:`COMPARE` (a bool mask: a comparison), or "" (integer values of an
    origin not seen: the check mode reads only the dtype, the plugin an integer cast).
    ``source``: that op's input as written (``logits``), "" when not seen; ``source_type``:
    its type, where known (its shard dim names the gather's src)."""

    op: str = ""
    source: str = ""
    source_type: SpmdType | None = None
    # the op normalizing over a dim between ``source`` and the index op (``softmax`` of
    # ``torch.multinomial(logits.softmax(-1), 1)``: source ``logits``), or "": each rank's
    # softmax is over its own shard, so the fix gathers its input, then the softmax
    normalized: str = ""


def _max_fixup(m: str, source: str, ax: str, d: str) -> str:
    """The argmax (argmin) over the ranks from the max over the ranks and an index fix-up."""
    return (f"or take the {m} over the ranks and fix up the index: m, i = {source}.{m}(dim); "
            f'gm = all_reduce(m, {ax}, src=V, dst={d}, op="{m}"); '
            f"all_reduce(torch.where(m == gm, i + offset, n), {ax}, src=V, dst={d}, "
            'op="min") ' + f"(offset: the first index of this rank's shard, n: the whole dim's "
            f"size; the smallest index of the {m}, as arg{m} takes; under torch.no_grad())")


def _index_fix(ix: IndexValue, src: LocalType, dst: LocalType, x: str,
               axis: str | tuple[str, ...]) -> str:
    """The fix of an index (or integer, or bool) V value where ``dst`` is needed: reduce or
    gather its source before the index op, not its indices (:class:`IndexValue`)."""
    ax = format_axis(axis)
    d = _arg(dst)
    st = ix.source_type.get(axis) if ix.source_type is not None and isinstance(axis, str) else None
    sd = st.at_high_ranks().dim if st is not None and st.kind is Kind.V else None
    shard = f"S({sd})" if sd is not None else "S(d)"
    head = f"{_arg(src)} to {d} is a gather, but "
    not_fix = ("the ranks' values stacked (all_gather: a new dim 0) or summed (all_reduce of a "
               "reinterpret to P) are not ")
    s = ix.source or "logits"
    where_d = "" if sd is not None else f", d its dim sharded on {ax}"
    gather = f"all_gather({s}, {ax}, src={shard}, dst={d})"

    if ix.op in INDEX_OPS and ix.source:
        if ix.normalized:
            n, s = ix.normalized, bare(s)
            gather = f"all_gather({s}, {ax}, src={shard}, dst={d})"
            text = (f"{head}{x} is an index ({ix.op} of the {n} of this rank's shard of {s}): "
                    f"{not_fix}the {ix.op} over the whole, and the {n} of a shard is over that "
                    f"shard alone (gathered, the shards' are not the {n} of the whole); "
                    f"gather {s} before the {n}: the {ix.op} of the {n} of {gather}{where_d} "
                    f"(an index over the whole dim then: without the offset of this rank's "
                    f"shard)")
        else:
            text = (f"{head}{x} is an index ({ix.op} of this rank's shard of {s}): {not_fix}the "
                    f"{ix.op} over the whole; gather {s} before the {ix.op}: {gather} in place of "
                    f"{s} in the {ix.op}{where_d} (an index over the whole dim then: without the "
                    f"offset of this rank's shard)")
        if ix.op == "multinomial":
            text += (f", drawn with a generator in the same state on every rank of {ax} (seeded "
                     f"the same)")
        m = ARGMAX_OPS.get(ix.op)
        return text + (f", {_max_fixup(m, s, ax, d)}" if m is not None else "")
    if ix.op == COMPARE:
        of = f"from {ix.source}" if ix.source else "from this rank's values"
        return (f"{head}{x} is a mask (a comparison) computed {of}: {not_fix}one mask of the "
                f"whole; compare values that are the same on every rank of {ax} (reduce or "
                f"gather {ix.source or 'the operands'} first), or all_reduce({receiver(x)}.int(), "
                f'{ax}, src=V, dst={d}, op="max") ' + "if any rank's is meant "
                '(op="min": every ' + "rank's)")
    return (f"{head}{x} holds integer values made on each rank: if they index a dim sharded on "
            f"{ax} (an argmax or topk of this rank's shard of the logits, say logits), {not_fix}the index over "
            f"the whole; gather or reduce {s} before the index op, {gather} then the argmax"
            f"{where_d}, {_max_fixup('max', s, ax, d)}; if they count this rank's part, all_reduce("
            f"reinterpret({x}, {ax}, src=V, dst=P), {ax}, src=P, dst={d}) sums them")


def suggest(src: LocalType, dst: LocalType, x_text: str, axis: str | tuple[str, ...],
            rank_max: RankMax | None = None, index: IndexValue | None = None,
            norm: LocalNorm | None = None, slice_index: SliceIndex | None = None) -> str:
    """'P to R is a reduction: use all_reduce(x, "tp", src=P, dst=R)'.  ``norm``: the value
    is computed from a softmax along a dim that may be sharded on ``axis``
    (:class:`LocalNorm`): its fix leads the sum over the ranks.  ``slice_index``: what the
    adapter knows of a subscript's index (:class:`SliceIndex`)."""
    # (an index's fix gathers the softmax's input already: _index_fix)
    hint = norm.hint(axis) if norm is not None and index is None else None
    if (norm is not None and hint is not None and src.kind is Kind.V and src.dim is None
            and dst.dim is None):
        rest = suggest(src, dst, x_text, axis, rank_max, index)
        if isinstance(axis, str) and axis in norm.sharded:
            # the dim normalised is the one sharded: the normaliser is the mistake
            head, _, tail = rest.partition(": ")
            return f"{head}: {hint}; then, {tail}"
        if _summed_dim(x_text) == norm.dim:
            # a dim not known to be sharded, summed after the normalisation along it (an
            # entropy, a KL): the sum's fix first, then the normaliser's on that condition
            return f"{rest}; {hint}"
    r = route(src, dst)
    if r is None:
        return f"{_arg(src)} to {_arg(dst)} needs no op"
    op = r[0]
    if (index is not None and op == "all_gather" and src.kind is Kind.V and src.dim is None
            and dst.dim is None):
        # an index (an argmax of this rank's vocab shard), a mask, integer values: the
        # ranks' indices stacked or summed are no index of the whole
        return _index_fix(index, src, dst, bare(x_text), axis)
    if op == "all_gather" and src.kind is Kind.V and src.dim is None:
        # a sum or mean (of a dim sharded on the axis, as a rule): its per-rank values are
        # parts of a sum, and stacking them is not the value; the reduction is the fix
        summed = _summed_reduction(x_text, axis, dst)
        if summed is not None:
            return f"{_arg(src)} to {_arg(dst)}: {summed}"
    text = (f"{_arg(src)} to {_arg(dst)} is {_PURPOSE[op]}: use "
            f"{op}({bare(x_text)}, {format_axis(axis)}, src={_arg(src)}, dst={_arg(dst)})")
    if (op == "convert" and src.kind in (Kind.R, Kind.I) and dst.kind is Kind.V
            and dst.dim is None and is_subscript(x_text)
            and (slice_index is not None or subscript_base(x_text) is not None)):
        # a slice (full[:k], full[r * k:(r + 1) * k]): by what the adapter knows of its index
        return _slice_fix(src, dst, bare(x_text), format_axis(axis), axis, slice_index)
    if (op == "convert" and src.kind in (Kind.R, Kind.I) and dst.kind is Kind.V
            and dst.dim is None and is_subscript(x_text)):
        # the same for V: the slice kept by a rank the checker does not see is V as it is
        x, ax = bare(x_text), format_axis(axis)
        return (f"{_arg(src)} to V: if the slice is this rank's part (its index from a rank "
                f"the checker does not see, such as a parameter or an attribute set outside "
                f"__init__), use reinterpret({x}, {ax}, "
                f"src={_arg(src)}, dst=V) (the local data unchanged); otherwise "
                f"convert({x}, {ax}, src={_arg(src)}, dst=V) keeps each rank's slice of its "
                f"dim 0 (a convert of this rank's slice would slice it again)")
    if (op == "convert" and src.kind in (Kind.R, Kind.I) and dst.dim is not None
            and is_subscript(x_text)):
        # a subscript that may already take this rank's part (full[r * b:(r + 1) * b] with a
        # rank the checker does not see: a parameter): converting it would slice it again, so
        # the reinterpret of the slice leads (probe vision 5: the convert, pasted, re-chunked a
        # window kept by a rank the checker did not read)
        x, ax = bare(x_text), format_axis(axis)
        chunk = chunk_item(x)
        if chunk is not None and chunk[1] == dst.dim:
            # this rank's chunk by hand (torch.split(w, k)[r], w.chunk(n)[r]: an item of a
            # tuple, which no checker sees the rank of): the shard is convert's of the whole
            return (f"{_arg(src)} to {_arg(dst)} is {_PURPOSE[op]}: if {chunk[2]} is this rank's "
                    f"index on {ax} and the chunks are the axis's equal parts, use "
                    f"convert({chunk[0]}, {ax}, src={_arg(src)}, dst={_arg(dst)}) in place of "
                    f"{x} (the same chunk; its backward gathers the gradient: convert of {x} "
                    f"would cut the chunk again); else convert({x}, {ax}, src={_arg(src)}, "
                    f"dst={_arg(dst)})")
        if slice_index is not None or (subscript_base(x) is not None and dst.dim == 0):
            return _slice_fix(src, dst, x, ax, axis, slice_index)
        return (f"{_arg(src)} to {_arg(dst)}: if the slice is this rank's part (its index from "
                f"a rank the checker does not see, such as a parameter or an attribute set outside "
                f"__init__), {x} is V: use "
                f"reinterpret({x}, {ax}, src={_arg(src)}, dst=V), which S({dst.dim}) may be "
                f"claimed from; otherwise, to keep this rank's chunk of the whole, "
                f"convert({x}, {ax}, src={_arg(src)}, dst={_arg(dst)}) (a convert of this "
                f"rank's slice would chunk it again)")
    if (op == "convert" and src.kind in (Kind.R, Kind.I) and dst.kind is Kind.V
            and dst.dim is None):
        # convert to V keeps each rank's slot of dim 0 (S(0): its chunk).  A replicated value meant as
        # each rank's own (KV heads replicated for grouped-query attention, a broadcast
        # weight) is a reinterpret: the local data unchanged.  Each is right in its case (a
        # gathered K/V passed to a helper that computes on the whole value: reinterpret;
        # convert there would cut dim 0, the batch), so the message says when
        text += (f" if each rank should keep only its slice of dim 0 (x[rank], dim 0 of the "
                 f"axis size; dst=S(0) keeps its chunk of dim 0 instead, the rows of a batch), "
                 f"or reinterpret({bare(x_text)}, {format_axis(axis)}, src={_arg(src)}, dst=V) "
                 f"if the whole value is this rank's own input (unchanged)")
    elif op == "convert" and src.kind is Kind.V and src.dim is None and dst.kind is Kind.P:
        # a per-rank loss or gradient is most often meant as the sum of the ranks' values
        text += (f" to keep each rank's values apart, or reinterpret({bare(x_text)}, "
                 f"{format_axis(axis)}, src={_arg(src)}, dst=P) to mean their sum (a loss or a gradient)")
    elif op == "all_gather" and src.kind is Kind.V and src.dim is None:
        # all_gather(V, ...) stacks the ranks' values on a new dim 0 (SPEC section 4); a V
        # with no shard dim may also be each rank's part of a sum (a local loss, a sum of
        # squares), where gathering would stack the parts and their sum is meant
        text += " to stack the ranks' values on a new dim 0 (src=S(i) concatenates them on dim i)"
        after = _nonlinear_result(x_text)
        over_ranks = None if after is not None else _reduced_result(x_text, axis, dst)
        if over_ranks is not None:
            # a max, a mean, a logsumexp (or a non-linear op of one): the ranks' values do
            # not add up to the value over the ranks, so "sum them" is not offered
            text += over_ranks if over_ranks.startswith(",") else f"; {over_ranks}"
        elif after is None and rank_max is not None:
            # computed from this rank's max (a scale from an amax): its max over the ranks,
            # where it is made, not the sum of the value
            text += _rank_max_fix(rank_max, bare(x_text), format_axis(axis), _arg(dst))
        elif (after is None and src.by_rank is not None and any(d is None for _, d in src.by_rank)
              and call_chain(x_text) == []):
            # a name whose layout shows its shard dim reduced (V at some rank): the reduction
            # is not in the text, and only a sum's per-rank values are summed
            ax = format_axis(axis)
            x = bare(x_text)
            text += (f"; {x} comes from a reduction of the dim sharded on {ax} where its layout "
                     f"is V: if by a sum, "
                     f"all_reduce(reinterpret({x}, {ax}, src=V, dst=P), {ax}, src=P, "
                     f'dst={_arg(dst)}) sums the ranks\' parts; if by a max, all_reduce({x}, {ax}, '
                     f'src=V, dst={_arg(dst)}, op="max"); a logsumexp, mean or norm is computed '
                     f"from those (the max, the all-reduced sums), not summed")
        elif after is None:
            ax = format_axis(axis)
            text += (f", or all_reduce(reinterpret({bare(x_text)}, {ax}, src=V, dst=P), {ax}, "
                     f"src=P, dst={_arg(dst)}) to sum them ({parts_caveat(bare(x_text), ax)})")
        else:
            # the ranks' values of sqrt(...) (norm(...), exp(...)) do not add up to the value
            # of their sum: what sums over the ranks is the partial sum inside
            text += f"; to sum over the ranks, {after}"
    elif op == "all_gather" and src.dim is not None:
        text += f" to concatenate the ranks' values on dim {src.dim}"
    return text


_CHUNKS = frozenset(("split", "chunk", "tensor_split", "split_with_sizes"))


def _top_level_args(args: str) -> list[str]:
    """A call's argument text split at its top-level commas."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(args[start:i].strip())
            start = i + 1
    last = args[start:].strip()
    return out + [last] if last else out


def chunk_item(x_text: str) -> tuple[str, int, str] | None:
    """(the whole, the dim, the index) of an item of a split: ``torch.split(w, k)[r]``,
    ``w.chunk(n, dim=1)[r]``, ``torch.chunk(w, n, 1)[r]`` (the dim a literal int, 0 when not
    given); None for any other text."""
    text = bare(x_text)
    if not (text.endswith("]") and is_subscript(text)):
        return None
    i = trailing_group_start(text)
    call, index = text[:i], text[i + 1:-1].strip()
    if not call.endswith(")") or not index or any(c in index for c in ":,") or index.isdigit():
        return None
    j = trailing_group_start(call)
    if j < 0:
        return None
    head, args = call[:j], _top_level_args(call[j + 1:-1])
    name = head.rsplit(".", 1)[-1]
    prefix = head.rsplit(".", 1)[0] if "." in head else ""
    if name not in _CHUNKS or not prefix:
        return None
    if prefix == "torch":  # torch.split(w, k, dim)
        if not args:
            return None
        whole, rest = args[0], args[1:]
    else:  # w.split(k, dim)
        whole, rest = prefix, args
    if not rest or "=" in rest[0]:
        return None
    dims = [a.split("=", 1)[1].strip() for a in rest[1:] if a.replace(" ", "").startswith("dim=")]
    positional = [a for a in rest[1:] if "=" not in a]
    dim_text = dims[0] if dims else positional[0] if positional else "0"
    try:
        dim = int(dim_text)
    except ValueError:
        return None
    return whole, dim, index


# Ops whose result summed over the ranks is not the op of the ranks' sum, and which users
# apply last to a partial sum (a gradient norm, a softmax denominator): a V result of one
# of these is not summed by reinterpret(V,P) + all_reduce; its argument is.
_NORMS = frozenset("norm linalg_norm linalg_vector_norm linalg_matrix_norm vector_norm".split())
_AFTER_THE_SUM = frozenset("""sqrt rsqrt exp exp2 expm1 log log2 log10 log1p reciprocal
logsumexp std var softmax log_softmax sigmoid tanh""".split()) | _NORMS


def _nonlinear_result(x_text: str) -> str | None:
    """For ``torch.sqrt(...)``, ``g.norm()``: what to all-reduce instead of the result of
    a non-linear op that does not distribute over a sum; None for any other text."""
    chain = call_chain(x_text) if bare(x_text).endswith(")") else None
    if not chain or chain[-1] not in _AFTER_THE_SUM:  # the outermost call
        return None
    if chain[-1] in _NORMS:
        return "all-reduce the per-rank (V) sums of squares, then take the sqrt, not the norms"
    return f"all-reduce the per-rank (V) partial sums before the {chain[-1]}, not its result"


# Reductions whose per-rank results do not sum to the result over the ranks (a max, a mean,
# a logsumexp), and the ops that keep a value's meaning (a cast, a view, a scaling by a
# constant): the text of a V value is read through those to the last reduction it applies.
SUM_REDUCTIONS = frozenset(("sum", "nansum"))
MAX_REDUCTIONS = {"amax": "max", "max": "max", "amin": "min", "min": "min"}
_OTHER_REDUCTIONS = frozenset("""mean nanmean logsumexp std var prod median nanmedian softmax
log_softmax""".split()) | _NORMS
_KEEPS_MEANING = frozenset("""float double half bfloat16 to type type_as detach clone contiguous
view reshape flatten squeeze unsqueeze expand t transpose permute mul div neg values""".split())
_MODULES = frozenset("torch F torch.nn.functional nn.functional torch.linalg torch.special math".split())


def call_chain(x_text: str) -> list[str] | None:
    """The calls one expression applies, innermost first: ``torch.logsumexp(...).square()``
    -> ["logsumexp", "square"], ``x.amax(dim=-1)`` -> ["amax"], a name -> []; a function of
    ``torch`` (``F``, ``torch.linalg``) reads its first argument's calls first.  None for a
    text with an operator outside brackets (not one chain)."""
    text = bare(x_text).strip()
    names: list[str] = []
    depth = 0
    start = 0  # where the current dotted segment starts
    open_at = -1
    first_call = True
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in "([{":
            if depth == 0:
                open_at = i
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0 and ch == ")" and open_at == 0:
                names.extend(call_chain(text[1:i]) or [])  # (x.sum(-1)).float()
            elif depth == 0 and ch == ")":
                head = text[start:open_at].lstrip(".")
                name = head.rsplit(".", 1)[-1]
                if name.isidentifier():
                    prefix = head.rsplit(".", 1)[0] if "." in head else ""
                    if first_call and (prefix in _MODULES or not prefix):
                        # torch.f(arg, ...): the argument's calls come first
                        inner = _first_argument(text[open_at + 1:i])
                        sub = call_chain(inner) if inner else None
                        names.extend(sub or [])
                    names.append(name)
                first_call = False
            if depth == 0:
                start = i + 1
        elif depth == 0:
            if not (ch.isalnum() or ch in "._"):
                return None
        i += 1
    return names if depth == 0 else None


def _first_argument(args: str) -> str:
    """The first positional argument's text in a call's argument text ("" if none)."""
    parts = _top_level_args(args)
    args = parts[0] if parts else ""
    # "<...>": arguments the text elides (the plugin's texts.ELIDED); "...": an older text's
    return "" if "=" in args.split("(", 1)[0] or args in ("...", "<...>") else args


def _rank_max_fix(m: RankMax, x: str, ax: str, dst: str) -> str:
    """The fix of a V value computed from this rank's max ``m`` (:class:`RankMax`)."""
    arg = m.name if m.detached else f"{receiver(m.name)}.detach()"
    call = f'all_reduce({arg}, {ax}, src=V, dst={dst}, op="{m.op}")'
    if m.within:
        return (f"; {x} is computed from {m.within}, which holds {m.name}, this rank's {m.op}: "
                f"take its {m.op} over the ranks there, {call} in place of {m.name}, then "
                f"compute {x} from it (summing {x} over the ranks is not its value from the "
                f"{m.op})")
    if m.name == x:
        return (f", or {call} to take the {m.op} over the ranks ({x} = {m.source} is this "
                f"rank's {m.op}); their sum is not their {m.op}")
    return (f"; {x} is computed from {m.name} = {m.source}, this rank's {m.op}: take its "
            f"{m.op} over the ranks where it is made, {m.name} = {call}, then compute {x} from "
            f"it (summing {x} over the ranks is not its value from the {m.op})")


def max_reduction(x_text: str) -> str | None:
    """"max" or "min" when ``x_text`` ends in a max or min reduction (``w.detach().abs().amax()``,
    ``torch.amax(x, 1).float()``: read through the ops that keep a value's meaning), else
    None."""
    chain = call_chain(x_text)
    if not chain:
        return None
    last = max((k for k, c in enumerate(chain) if c in SUM_REDUCTIONS or c in MAX_REDUCTIONS
                or c in _OTHER_REDUCTIONS), default=-1)
    if last < 0 or chain[last] not in MAX_REDUCTIONS:
        return None
    if any(c not in _KEEPS_MEANING for c in chain[last + 1:]):
        return None
    return MAX_REDUCTIONS[chain[last]]


def _reduction_call(text: str, red: str) -> tuple[str, str] | None:
    """``x.sum((2, 3))`` / ``torch.mean(x, 1)`` -> (``x``, ``(2, 3)`` / ``1``): the input and
    the arguments of the outermost call ``red`` of ``text``; None for another text."""
    if not text.endswith(")"):
        return None
    open_at = trailing_group_start(text)
    if open_at <= 0:
        return None
    head, inner = text[:open_at], text[open_at + 1:-1].strip()
    if not head.endswith("." + red):
        return None
    x = head[:-len(red) - 1]
    if x in _MODULES:  # torch.sum(x, 1)
        x = _first_argument(inner)
        if not x:
            return None
        inner = inner[len(x):].lstrip().removeprefix(",").strip()
    if not x or "dtype" in inner or "out=" in inner:
        return None
    return bare(x), inner


def _summed_reduction(x_text: str, axis: str | tuple[str, ...], dst: LocalType) -> str | None:
    """For a V value that is a sum or a mean (``x.mean((2, 3))``, its text's outermost call):
    the reduction over the ranks, with ``spmd.sum(..., out_partial_axes=)`` (which checks the
    dim it reduces is sharded) and ``dst``; None for any other text."""
    text = bare(x_text)
    if "..." in text:
        return None
    chain = call_chain(text)
    if not chain or chain[-1] not in ("sum", "nansum", "mean", "nanmean"):
        return None
    red = chain[-1]
    parsed = _reduction_call(text, red)
    if parsed is None:
        return None
    x, args = parsed
    ax = format_axis(axis)
    total = (f"spmd.all_reduce(spmd.sum({x}{', ' + args if args else ''}, out_partial_axes="
             f"{ax}), {ax}, src=P, dst={_arg(dst)})")
    # the caveat of every sum over the ranks (parts_caveat), and what spmd.sum can check: the
    # reduced dim against its operand's shard dim, which a V operand (a softmax's result,
    # say: its dim is lost) does not carry
    checks = (f"spmd.sum checks that a reduced dim is sharded on {ax} only where {x} is S(i) "
              f"there: a V one (a softmax's result, say) it takes on trust")
    if red in SUM_REDUCTIONS:
        return (f"if {text} reduces a dim sharded on {ax}, each rank holds its part of the sum: "
                f"{total} sums the parts ({parts_caveat(x, ax)}; {checks})")
    return (f"if {text} reduces a dim sharded on {ax}, each rank's {red} covers its shard only, "
            f"and the ranks' {red}s do not sum to the whole's: {total} / n, n the count over "
            f"all the ranks (the product of the reduced dims' global sizes; "
            f"{parts_caveat(x, ax)}; {checks})")


def _summed_dim(x_text: str) -> str | None:
    """The dim of the sum ``x_text`` ends in, as written (``(p * lp).sum(-1)``,
    ``-(p * lp).sum(dim=-1)``: "-1"); None for another text or a sum over every dim."""
    text = bare(x_text)
    parsed = _reduction_call(text, "sum") if text.endswith(")") else None
    if parsed is None or not parsed[1]:
        return None
    first = _top_level_args(parsed[1])[0]
    return first.split("=", 1)[1].strip() if first.startswith("dim") and "=" in first else first


def parts_caveat(x: str, ax: str) -> str:
    """When summing the ranks' values of ``x`` over ``ax`` is right, and when not: the
    caveat of every fix that sums per-rank parts (a reinterpret to P and an all_reduce, a
    ``spmd.sum(..., out_partial_axes=)``)."""
    return (f"right only when {x} is a per-rank part of a sum, such as a loss summed over this "
            f"rank's own rows or a sum of squares before its sqrt; not a non-linear function (a "
            f"loss, a softmax, a norm) of such parts, e.g. of logits from a matmul over a dim "
            f"sharded on {ax}: all-reduce those parts first, "
            f"spmd.matmul/linear/einsum(..., out_partial_axes={ax}) makes them P")


_NORMALISERS = frozenset(("softmax", "log_softmax", "logsumexp"))


@dataclass(frozen=True)
class LocalNorm:
    """A V value computed from a softmax, log_softmax or logsumexp along a dim (``lp`` of
    ``lp = F.log_softmax(logits, -1)``; the adapter reads the name's binding or the
    value's text): along a dim sharded on an axis, each rank normalises its own block of it,
    and a sum of the ranks' values (``spmd.sum(lp.exp() * (lp - lr), -1,
    out_partial_axes=)``) is not the value over the whole dim.  ``sharded``: the axes on which
    ``input`` is S(``dim``) (known); ``varying``: those on which it is V (a dim not known)."""

    name: str      # the normalised value as written (a name, or the call itself)
    source: str    # the normalising call as written
    op: str        # softmax, log_softmax or logsumexp
    input: str     # its input as written
    dim: str       # its dim as written
    sharded: tuple[str, ...] = ()
    varying: tuple[str, ...] = ()

    def hint(self, axis: str | tuple[str, ...]) -> str | None:
        """What the fix of a sum of its ranks' values says first on ``axis``, or None."""
        if not isinstance(axis, str) or axis not in self.sharded + self.varying:
            return None
        ax, x, d = format_axis(axis), self.input, self.dim
        m = f'm = spmd.all_reduce({receiver(x)}.detach().amax({d}), {ax}, src=V, dst=R, op="max")'
        z = (f"s = {x} - m.unsqueeze({d}); z = spmd.all_reduce(spmd.reinterpret("
             f"s.exp().sum({d}), {ax}, src=V, dst=P), {ax}, src=P, dst=R)")
        whole = {"log_softmax": f"s - z.log().unsqueeze({d})",
                 "softmax": f"s.exp() / z.unsqueeze({d})",
                 "logsumexp": f"z.log() + m"}[self.op]
        of = "" if self.name == self.source else f" ({self.name} = {self.source})"
        block = (f"{self.name} is normalised per rank's block of dim {d}{of}" if axis in self.sharded
                 else f"if dim {d} of {x} is sharded on {ax}, {self.name} is normalised per "
                      f"rank's block of it{of}")
        return (f"{block}: all_reduce the normaliser first (the vocab-parallel {self.op}: the "
                f"max must be taken over the ranks before shifting, {m}; {z}; then {whole} in "
                f"place of {self.source})")


def normalised_parts_error(norm: LocalNorm, axis: str, call: str, x_text: str) -> SpmdError | None:
    """``call`` ("sum": ``spmd.sum(x, ..., out_partial_axes=axis)``; "reinterpret":
    ``reinterpret(x, axis, src=V, dst=P)``; "matmul", "einsum", "linear": that contraction
    with ``x`` an operand and ``out_partial_axes=axis``) claims each rank's value of ``x`` is its part of a sum over ``axis``; ``x`` is
    computed from ``norm``, a softmax, log_softmax or logsumexp along a dim its input holds
    sharded on ``axis`` (S(dim) there), with no collective on the way (the adapter's walk):
    each rank normalised its own block of the dim, so the ranks' values are no parts of the
    whole's (a distillation KL over vocab-parallel logits with F.log_softmax of the local
    blocks: off by the missing global normaliser).  None on another axis."""
    if axis not in norm.sharded:
        return None
    hint = norm.hint(axis)
    if hint is None:
        return None
    x, ax = bare(x_text), format_axis(axis)
    if call in ("matmul", "einsum", "linear"):
        # a contraction with an operand normalised per block (split-KV attention:
        # spmd.matmul(torch.softmax(s, -1), v, out_partial_axes="tp") of keys sharded on tp)
        return SpmdError(
            "spmd-partial-nonlinear",
            f"spmd.{call}(..., out_partial_axes={ax}) takes each rank's product with {x} as "
            f"its part of a sum over {ax}, but {hint}; the ranks' products with per-block "
            f"normalised values do not sum to the product with the value over the whole dim "
            f"(or merge the blocks' outputs with the all-reduced logsumexp, as ring attention "
            f"does)")
    written = (f"spmd.sum({x}, ..., out_partial_axes={ax})" if call == "sum"
               else f"spmd.reinterpret({x}, {ax}, src=V, dst=P)")
    return SpmdError(
        "spmd-partial-nonlinear",
        f"{written} takes each rank's value as its part of a sum over {ax}, but {hint}; "
        f"the ranks' per-block normalised values do not sum to the value over the whole dim")


def _reduced_result(x_text: str, axis: str | tuple[str, ...], dst: LocalType) -> str | None:
    """For a V value whose text ends in a max, a mean, a logsumexp (or a non-linear op
    applied to one): how to reduce it over the ranks, which "sum them" does not; None when
    the text shows no such reduction (a name, a sum, a sum of squares)."""
    chain = call_chain(x_text)
    if not chain:
        return None
    last = max((k for k, c in enumerate(chain) if c in SUM_REDUCTIONS or c in MAX_REDUCTIONS
                or c in _OTHER_REDUCTIONS), default=-1)
    if last < 0:
        return None
    red = chain[last]
    after = [c for c in chain[last + 1:] if c not in _KEEPS_MEANING]
    ax = format_axis(axis)
    x = bare(x_text)
    if red in SUM_REDUCTIONS:
        if not after:
            return None  # a sum: the per-rank partial sums do add up
        return (f"the ranks' values of {after[0]}(...) do not add up to the {after[0]} of their "
                f"sum: all-reduce the per-rank (V) partial sums (reinterpret(..., {ax}, src=V, "
                f"dst=P), then all_reduce) before the {after[0]}, not its result")
    op = max_reduction(x_text)
    if op is not None:
        return (f', or all_reduce({x}, {ax}, src=V, dst={_arg(dst)}, op="{op}") to take the {op} '
                f"over the ranks (no gradient: on {receiver(x_text)}.detach() or under "
                f"torch.no_grad()); their sum is not their {op}")
    then = f", then take the {after[0]}" if after else ""
    return (f"if the {red} reduces a dim sharded on {ax}, {x} covers this rank's shard only, "
            f"and the ranks' values do not sum to the whole's: {_over_ranks(red, ax)}{then}")


def varying_statistic_fix(x_text: str, lt: LocalType, axis: str, can_grad: bool,
                          leaf: bool = False, made: str = "") -> str | None:
    """The collective that makes a V operand I when it is this rank's statistic of a dim
    sharded on ``axis`` (a max shift or a logsumexp not all-reduced, beside the I values of
    the whole): its text ends in a reduction, its layout shows the shard dim reduced
    (``lt.by_rank``: V at some rank), or it carries no gradient (a statistic made under
    no_grad, not a ``leaf``: a frozen weight carries none either); None for any other V,
    whose mix is the I operand's to fix."""
    x = bare(x_text)
    # a name bound once (``lse = torch.logsumexp(logits, dim=-1)``): its binding shows the
    # reduction (``made``, read by the adapter)
    named = bool(made) and x.isidentifier() and "..." not in made
    chain = call_chain(made if named else x_text) or []
    reds = [c for c in chain if c in SUM_REDUCTIONS or c in MAX_REDUCTIONS or c in _OTHER_REDUCTIONS]
    reduced = lt.by_rank is not None and any(d is None for _, d in lt.by_rank)
    picked = named and not reds and any(c in ("gather", "take_along_dim") for c in chain)
    if not reds and not reduced and not picked and (can_grad or leaf):
        return None
    ax = format_axis(axis)
    detached = f"{receiver(x_text)}.detach()" if can_grad and ".detach()" not in x else x
    # a name is made I where it is made, so that every use sees the whole's (a max shift
    # used before this op too: the exp of the shifted logits)
    make = (f"make it I where it is made, before its first use ({x} = the collective): "
            if x.isidentifier() else "make it I first: ")
    the_sum = f"all_reduce(reinterpret({x}, {ax}, src=V, dst=P), {ax}, src=P, dst=I)"
    if reds and chain[-1] == reds[-1] and reds[-1] in MAX_REDUCTIONS:
        op = MAX_REDUCTIONS[reds[-1]]
        return (f"if {x} is this rank's {op} over a dim sharded on {ax}, {make}"
                f'all_reduce({detached}, {ax}, src=V, dst=I, op="{op}")')
    if reds and chain[-1] == reds[-1] and reds[-1] in SUM_REDUCTIONS:
        return f"if {x} is this rank's part of a sum over a dim sharded on {ax}, {make}{the_sum}"
    if picked:
        # the entries of this rank's block picked out (a vocab-parallel log-prob's logit of
        # the target token, zero where another rank's block holds it): a part of a sum
        pick = next(c for c in chain if c in ("gather", "take_along_dim"))
        return (f"if {x} holds this rank's entries of a dim sharded on {ax} (picked by the "
                f"{pick} in its binding; zeros where another rank's block holds them), it is "
                f"this rank's part of a sum: {make}{the_sum}")
    if reds and named and chain[-1] == reds[-1]:
        parsed = _reduction_call(bare(made), reds[-1])
        inp, args = parsed if parsed is not None else ("x", "d")
        d = _top_level_args(args)[0].split("=", 1)[-1].strip() if args else "d"
        return (f"if {x} = {bare(made)} reduces a dim sharded on {ax}, {x} covers this rank's "
                f"shard only: {_over_ranks(reds[-1], ax, inp, d)} first, in place of "
                f"{bare(made)}")
    if reds:
        return (f"if the {reds[-1]} in {x} reduces a dim sharded on {ax}, {x} covers this "
                f"rank's shard only: {_over_ranks(reds[-1], ax)} first")
    return (f"if {x} is this rank's statistic over a dim sharded on {ax} (a max shift, a "
            f"logsumexp, a count), {make}all_reduce({detached}, {ax}, src=V, dst=I, "
            f'op="max") for a max, {the_sum} for a sum; a logsumexp, mean or norm from those '
            f"(the max, then the all-reduced sum of exp(x - max), before the log)")


def _over_ranks(red: str, ax: str, x: str = "x", d: str = "d") -> str:
    """How reduction ``red`` of ``x`` over dim ``d`` sharded on ``ax`` is computed over the
    ranks (for a message: x and d stand for its input and dim, unless given)."""
    the_max = f'm = all_reduce({receiver(x)}.detach().amax({d}), {ax}, src=V, dst=I, op="max")'
    the_sum = f"all_reduce(reinterpret({receiver(x)}.sum({d}), {ax}, src=V, dst=P), {ax}, src=P, dst=I)"
    its = " (x and d its input and dim)" if (x, d) == ("x", "d") else ""
    rx = receiver(x)
    if red in MAX_REDUCTIONS:
        op = MAX_REDUCTIONS[red]
        return (f'take the {op} over the ranks first, all_reduce({rx}.detach().a{op}({d}), {ax}, '
                f'src=V, dst=I, op="{op}")')
    if red in ("logsumexp", "softmax", "log_softmax"):
        return (f"compute the logsumexp over the ranks, {the_max}, then "
                f"all_reduce(reinterpret(({x} - m.unsqueeze({d})).exp().sum({d}), {ax}, src=V, "
                f"dst=P), {ax}, src=P, dst=I).log() + m{its}"
                + (f", and the {red} from it" if red != "logsumexp" else ""))
    if red in ("mean", "nanmean"):
        return (f"divide the sum over the ranks, {the_sum}, by the count over the ranks{its}")
    if red in _NORMS:
        return (f"take the sqrt of the sum of squares over the ranks, "
                f"all_reduce(reinterpret({rx}.square().sum({d}), {ax}, src=V, dst=P), {ax}, src=P, "
                f"dst=I).sqrt(){its}")
    return (f"compute the {red} over the ranks from all-reduced sums ({the_sum}) or maxima "
            f'(op="max"){", " + its[2:-1] if its else ""}')


@dataclass
class CollectiveResult:
    type: SpmdType
    errors: list[SpmdError] = field(default_factory=list)
    transition: Transition | None = None


def lookup(op: str, src: LocalType, dst: LocalType) -> Transition | None:
    if op == "redistribute":
        r = route(src, dst)
        return TRANSITIONS.get(r) if r else None
    return TRANSITIONS.get((op, form(src), form(dst)))


def _default_src(op: str) -> LocalType | None:
    return LocalType(Kind.P) if op in ("all_reduce", "reduce_scatter") else None


def check_collective(
    op: str,
    x: SpmdType,
    axes: Sequence[str],
    src: LocalType | None,
    dst: LocalType | None,
    *,
    expert_mode: bool = False,
    reduce_op: str = "sum",
    x_text: str = "x",
    can_grad: bool = True,
) -> CollectiveResult:
    """Type ``op(x, axes, src=src, dst=dst)``: the result type and every violation.

    ``src`` must match ``x`` on each axis (an unknown axis is taken on trust);
    the result is ``x`` with each axis replaced by ``dst``.
    """
    axis_arg: str | tuple[str, ...] = axes[0] if len(axes) == 1 else tuple(axes)
    call = f"{op}({bare(x_text)}, {format_axis(axis_arg)}"
    errors: list[SpmdError] = []
    if src is None:
        src = _default_src(op)
    if src is None or dst is None:
        missing = "src" if src is None else "dst"
        return CollectiveResult(x, [SpmdError(
            "spmd-collective",
            f"{call}, ...) needs {missing}= (one of R, I, V, P, S(i)): the backward depends on it",
        )])
    if op == "reinterpret" and (src.dim is not None or dst.dim is not None):
        return CollectiveResult(x, [SpmdError(
            "spmd-collective",
            f"reinterpret cannot claim a shard dim ({call}, src={src}, dst={dst})); use V, or "
            f"convert(..., dst=S(i)) to take this rank's chunk",
        )])
    known = [(a, t) for a in axes if (t := x.get(a)) is not None]
    # where no gradient flows an R stands for an I and back (types.SAME_VALUES): a forward
    # shared by training and generation keeps its reinterpret(h, "tp", src=I, dst=R) under
    # no_grad, where the rule makes an I beside a gradient-free R an R
    relaxed = {a for a, t in known if not can_grad and {t.kind, src.kind} <= SAME_VALUES}
    # a max/min all_reduce (no gradient) over an axis where the value is already R or I: the
    # max of equal values is that value, so src=V there claims no more than V's "each rank
    # its own value" (FP8 amax scaling reduces an amax R on "tp", V on "dp" over both axes)
    if op == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS and src.kind is Kind.V and src.dim is None:
        relaxed |= {a for a, t in known if t.kind in SAME_VALUES}
    mismatched = [a for a, t in known if not shard_dims_match(t, src) and a not in relaxed]
    rest = tuple(a for a in axes if a not in mismatched)
    # src names a kind the input does not have, on every axis whose type is known: the
    # pair's own problems are those of a src the input is not, so the src-mismatch error
    # below, whose fix starts from the input's real type, is the one reported
    src_is_wrong = bool(known) and all(t.kind is not src.kind and a not in relaxed for a, t in known)
    transition: Transition | None
    if op == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS:
        transition = None
        if form(src) not in ("V", "S") or form(dst) not in ("R", "I"):
            errors.append(SpmdError(
                "spmd-collective",
                f'all_reduce with op="{reduce_op}" takes src=V and gives R or I, not '
                f"src={src}, dst={dst}",
            ))
        elif can_grad:
            errors.append(no_grad_error(
                f'all_reduce({bare(x_text)}, {format_axis(axis_arg)}, op="{reduce_op}")', x_text))
        errors.extend(_extreme_of_summands(x, axes, axis_arg, reduce_op, x_text))
    elif (op, form(src), form(dst)) in NO_GRAD_TRANSITIONS:
        transition = None
        if can_grad and not src_is_wrong:
            xb = bare(x_text)
            ax = format_axis(axis_arg)
            errors.append(no_grad_error(
                f"{call}, src={src}, dst={dst})", x_text,
                f" (this rank's summand of a pending sum read as its own value: the gradient of "
                f"a per-rank value cannot flow back into a sum)",
                f"; to keep the gradient, all_reduce({xb}, {ax}, src=P, dst=R) or "
                f"reduce_scatter({xb}, {ax}, src=P, dst=V) first"))
    elif op == "all_reduce" and reduce_op not in REDUCE_OPS:
        return CollectiveResult(x, [SpmdError(
            "spmd-collective", f'all_reduce op="{reduce_op}" is not one of {", ".join(REDUCE_OPS)}')])
    elif op == "reduce_scatter" and reduce_op not in SCATTER_REDUCE_OPS:
        return CollectiveResult(x, [SpmdError(
            "spmd-collective", f'reduce_scatter op="{reduce_op}" is not one of '
                               f'{", ".join(SCATTER_REDUCE_OPS)} (it reduces a pending sum)')])
    else:
        transition = lookup(op, src, dst)
        if transition is None:
            if (src == dst and op == "redistribute") or src_is_wrong:
                pass  # identity; or reported as the src mismatch
            else:
                errors.append(SpmdError(
                    "spmd-collective",
                    f"{op}(src={src}, dst={dst}) is not a valid transition; "
                    + suggest(src, dst, x_text, axis_arg),
                ))
        elif transition.expert and not expert_mode and not src_is_wrong:
            errors.append(SpmdError(
                "spmd-expert-mode",
                f"{call}, src={src}, dst={dst}) multiplies the value by the size of "
                f"{format_axis(axis_arg)}; pass expert_mode=True if that is meant, or "
                f"convert({x_text}, {format_axis(axis_arg)}, src={src}, dst={dst}) to keep the value",
            ))
    if op == "reinterpret" and form(src) == "V" and form(dst) == "P":
        errors.extend(_block_claimed_partial(x, [a for a in axes if a not in mismatched], x_text))
    pair_ok = not any(e.code == "spmd-collective" for e in errors)
    # one error per mistake: the axes on which the value has one type src is not are named
    # together (in the order the call lists them), with one fix over them all
    by_have: dict[LocalType, list[str]] = {}
    for axis in mismatched:
        have = x.get(axis)
        assert have is not None
        by_have.setdefault(have, []).append(axis)
    for have, wrong in by_have.items():
        ax: str | tuple[str, ...] = wrong[0] if len(wrong) == 1 else tuple(wrong)
        fix = _mismatch_fix(have, src, dst, x_text, ax, op, reduce_op)
        if rest and have.kind is not src.kind and pair_ok and _adds_no_error(
                op, x, rest, src, dst, reduce_op, x_text, axis_arg, errors):
            # a flattened collective over an axis the value does not have src on (an expert's
            # gradient, V on "ep", all-reduced over ("dp", "ep")): most often the axis is extra
            reduce_arg = f', op="{reduce_op}"' if reduce_op != "sum" else ""
            drop = (f"; drop {axis_words(wrong)} from the axes ({op}({bare(x_text)}, "
                    f"{format_axes(rest)}, src={src}, dst={dst}{reduce_arg})) if {x_text} is meant "
                    f"to stay {have.describe()} there")
            # "it is already R: drop the call" is wrong here: the call is still needed on the
            # other axes, where x is src (a gradient norm's sum, R on "dp" and P on "tp")
            fix = drop if fix.startswith(_ALREADY) else drop + ", or" + fix[1:]
        errors.append(SpmdError(
            "spmd-src-mismatch",
            f"{call}, src={src}, ...) but {x_text} is {have.describe()} on {axis_words(wrong)} "
            f"({x_text}: {format_type(x)})" + fix + _other_axis_hint(x, axes, src, x_text),
        ))
    out = x
    for axis in axes:
        out = out.replace(axis, dst)
    if x.spec is not None:
        if not errors:
            # a global x: the axis moves in the partition spec (innermost axis only)
            from .global_spmd import collective as global_collective

            lead = _LEADING_DIM.get(transition.forward.render_key(), 0) if transition else 0
            out, global_errors = global_collective(op, x, out, axes, src, dst, x_text=x_text,
                                                   new_dim0=lead > 0)
            errors.extend(global_errors)
    elif transition is not None:
        out = _shift_other_shards(out, axes, _LEADING_DIM.get(transition.forward.render_key(), 0))
    return CollectiveResult(out, errors, transition)


def _adds_no_error(op: str, x: SpmdType, kept: Sequence[str], src: LocalType, dst: LocalType,
                   reduce_op: str, x_text: str, axis_arg: str | tuple[str, ...],
                   errors: Sequence[SpmdError]) -> bool:
    """The call over ``kept`` (the flattened call's axes where ``x`` is ``src``) reports
    nothing the whole call's ``errors`` do not report already, so dropping the other axes is
    a fix to offer.  Its gates (no gradient, expert_mode) are left out: they do not depend
    on the axes.  A max all_reduce of a value P on a dropped axis is such a new error (the
    max of summands, :func:`_extreme_of_summands`)::

        x: Tensor[R["dp"], P["ep"]]
        all_reduce(x, ("dp", "ep"), src=V, dst=R, op="max")
        all_reduce(x, "dp", src=V, dst=R, op="max")     <- no fix: P on "ep" through a max
    """
    whole = {str(e) for e in errors}
    xb = bare(x_text)
    as_kept, as_whole = f"{xb}, {format_axes(kept)}", f"{xb}, {format_axis(axis_arg)}"
    result = check_collective(op, x, kept, src, dst, expert_mode=True, reduce_op=reduce_op,
                              x_text=x_text, can_grad=False)
    return all(str(e).replace(as_kept, as_whole) in whole for e in result.errors)


def _extreme_of_summands(x: SpmdType, axes: Sequence[str], axis_arg: str | tuple[str, ...],
                         reduce_op: str, x_text: str) -> list[SpmdError]:
    """An all_reduce with op="max"/"min" over ``axes`` of a value Partial on another axis:
    each rank takes the max of its own summands, and the sum over the other axis of those
    maxes is not the max of the sum (a max is not linear), so the result is no pending sum
    there, nor any value of the types'::

        x: Tensor[V["tp"], P["dp"]]        rank (dp, tp) holds x_dp,tp; the value is
                                           [sum over dp of x_dp,tp for each tp]
        all_reduce(x, "tp", op="max")      max over tp of x_dp,tp: summing it over dp
                                           is not max over tp of the sums

    One error per such axis, as a Partial into a non-linear op (``ops``)."""
    errors: list[SpmdError] = []
    for a in _partial_elsewhere(x, axes):
        xb, ax = bare(x_text), format_axis(a)
        errors.append(SpmdError(
            "spmd-partial-nonlinear",
            f"Partial on {ax} ({x_text}: {format_type(x)}) cannot go through "
            f'all_reduce({xb}, {format_axis(axis_arg)}, op="{reduce_op}"): each rank takes '
            f"the {reduce_op} of its own summand, and the sum of those over {ax} is not the "
            f"{reduce_op} of the sum (a non-linear op of a pending sum); "
            f"all_reduce({xb}, {ax}, src=P, dst=R) first"))
    return errors


def _partial_elsewhere(x: SpmdType, axes: Sequence[str]) -> list[str]:
    """The axes outside ``axes`` on which ``x`` is Partial: a max/min all_reduce over
    ``axes`` needs their sums first (:func:`_extreme_of_summands`, and the typed call a raw
    max names)."""
    return [a for a, t in x.axes if t.kind is Kind.P and a not in axes]


def _block_claimed_partial(x: SpmdType, axes: Sequence[str], x_text: str) -> list[SpmdError]:
    """``reinterpret(s, ax, src=V, dst=P)`` where ``s`` is S(i) on ``ax`` with its dim known
    (``s = x.sum(3)`` of an S(2) ``x``): each rank holds another block of dim i, not a
    partial sum of one value, so the claim adds different blocks together; the rule of
    ``spmd.sum/matmul(..., out_partial_axes=ax)`` (:func:`.ops.partial_op`) on a reinterpret."""
    errors: list[SpmdError] = []
    for a in axes:
        lt = x.get(a)
        if lt is None or lt.kind is not Kind.V or lt.dim is None or lt.by_rank is not None:
            continue
        s, ax, d = bare(x_text), format_axis(a), lt.dim
        errors.append(SpmdError(
            "spmd-collective",
            f"reinterpret({s}, {ax}, src=V, dst=P): {x_text} is S({d}) on {ax} (each rank "
            f"holds another block of its dim {d}, not a partial sum of one value), so the "
            f"reduction after it would add different blocks together; reduce the sharded dim "
            f"{d} too where {s} is made (spmd.sum(..., out_partial_axes={ax}) checks it), or "
            f"all_gather({s}, {ax}, src=S({d}), dst=R) to assemble the blocks; "
            f"convert({s}, {ax}, src=S({d}), dst=P) if a zero-padded block of the whole is meant"))
    return errors


# Transitions that add or remove the tensor's dim 0 (the others keep every dim):
# all_gather(V,R|I) stacks on a new dim 0, convert(V,P) pads a new dim 0 with this
# rank's slot; reduce_scatter(P,V) and convert(R|I,V) keep this rank's slot of dim 0.
_LEADING_DIM: dict[tuple[str, Form, Form], int] = {
    ("all_gather", "V", "R"): 1, ("all_gather", "V", "I"): 1, ("convert", "V", "P"): 1,
    ("reduce_scatter", "P", "V"): -1, ("convert", "R", "V"): -1, ("convert", "I", "V"): -1,
}


def _shift_other_shards(t: SpmdType, axes: Sequence[str], delta: int) -> SpmdType:
    """The S(i) of the axes the op is not on, when the op adds (+1) or removes (-1) dim 0.

    ``x: Tensor[V["tp"], S[0, "dp"]]``; ``all_gather(x, "tp", src=V, dst=R)`` stacks the
    "tp" ranks' pieces on a new dim 0, so the "dp" shards are now on dim 1:
    ``Tensor[R["tp"], S[1, "dp"]]``.  Removing dim 0 when another axis shards it leaves
    that axis V (its pieces no longer concatenate on any dim).  Negative dims count
    from the end and do not move.  A partition spec (per dim) is dropped.
    """
    if delta == 0:
        return t
    d = dict(t.axes)
    changed = False
    for axis, lt in t.axes:
        if axis in axes or lt.dim is None or lt.dim < 0:
            continue
        changed = True
        new_dim = lt.dim + delta
        d[axis] = LocalType(lt.kind, new_dim) if new_dim >= 0 else LocalType(lt.kind)
    if not changed and t.spec is None:
        return t
    return SpmdType.of(d, None)


def _other_axis_hint(x: SpmdType, axes: Sequence[str], src: LocalType, x_text: str) -> str:
    """A collective on the wrong axis: the axes outside the call on which ``x`` is what
    ``src`` says (``all_gather(k, "dp", src=S(2), ...)`` of ``k: Tensor[S[0, "dp"], S[2,
    "cp"]]``: ``; or did you mean axis "cp"? (k is S(2) on "cp")``), else "".  The axes
    where ``x`` is ``src`` exactly, if any (an S(2) claim passes over a V, whose dim is not
    known), else those where ``src`` may stand."""
    others = [(a, t) for a, t in x.axes if a not in axes and shard_dims_match(t, src)]
    exact = [(a, t) for a, t in others if t == src]
    by_type: dict[LocalType, list[str]] = {}
    for a, t in exact or others:
        by_type.setdefault(t, []).append(a)
    if not by_type:
        return ""
    names = [a for group in by_type.values() for a in group]
    which = " or ".join(format_axis(a) for a in names)
    what = ", ".join(f"{t.describe()} on {axis_words(group)}" for t, group in by_type.items())
    return f"; or did you mean axis {which}? ({x_text} is {what})"


_ALREADY = "; it is already "


def _mismatch_fix(have: LocalType, src: LocalType, dst: LocalType, x_text: str,
                  axis: str | tuple[str, ...], op: str = "", reduce_op: str = "sum") -> str:
    if (op == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS and have.kind is Kind.V
            and have.kind is not src.kind):
        # all_reduce(a, src=P, op="max") of a V value: the op says what is meant, a max over
        # the ranks, which takes src=V (the gather or the sum suggest() offers would drop it)
        out = dst if dst.kind in (Kind.R, Kind.I) and dst.dim is None else LocalType(Kind.R)
        return (f'; pass src=V: all_reduce({bare(x_text)}, {format_axis(axis)}, src=V, '
                f'dst={_arg(out)}, op="{reduce_op}")')
    if have.kind is src.kind:  # shard dims differ
        # src=S(1) of a transposed S(0) (S(-1)) is right at rank 2 only: say why it is refused
        fix = f"; pass src={have.at_high_ranks()}{same_dim_at_one_rank(have, src)}"
        h = have.at_high_ranks().dim
        if op == "all_to_all" and h is not None and src.dim is not None and (h < 0) == (src.dim < 0):
            # Ulysses: the heads dim moved back next to the sequence before the exchange
            x = x_text if x_text.replace(".", "").replace("_", "").isalnum() else f"({bare(x_text)})"
            fix += f", or move dim {h} to {src.dim} first: {x}.movedim({h}, {src.dim}) is S({src.dim})"
        return fix
    s = suggest(have, dst, x_text, axis)
    if "needs no op" in s:
        fix = f"{_ALREADY}{dst}: drop the call"
        if have.kind in (Kind.R, Kind.I) and src.kind is Kind.V and op in ("all_gather", "all_to_all"):
            # a value that differs per rank by construction (ZeRO-1's fulls[dp_rank]: each rank
            # works on its own item) is typed R: no checker sees a rank in an index, and
            # dropping the gather leaves each rank with only its own result
            x = bare(x_text)
            fix += (f" if {x} is the same on every rank; if it differs per rank by construction "
                    f"(computed from a rank index: items[rank], which no checker sees), "
                    f"reinterpret({x}, {format_axis(axis)}, src={_arg(have)}, dst=V) "
                    f"before the {op}")
        return fix
    if (op == "reduce_scatter" and src.kind is Kind.P and have.kind is Kind.V and have.dim is None
            and have.by_rank is None and dst.kind is not Kind.P):
        # a per-rank partial sum typed V (row-wise embedding pooling: each rank's rows' part of
        # every bag) most often wants the reinterpret the all_reduce(V->R) fix offers too; the
        # all-to-all would exchange the parts unsummed
        x, ax = bare(x_text), format_axis(axis)
        return (f"; if {x} is a per-rank partial sum (each rank's part of the whole), "
                f"reinterpret it first: reduce_scatter(reinterpret({x}, {ax}, src=V, dst=P), {ax}, "
                f"src=P, dst={_arg(dst)}); if it is each rank's own values, {s}")
    if op == "all_reduce" and src.kind is Kind.P and have.dim is not None:
        # an expert's gradient sharded on "etp" like its weight, all-reduced like a
        # data-parallel one: the gather is not what is missing, nothing is
        s += (f", or drop the call if {bare(x_text)} is the gradient of a weight sharded on "
              f"{format_axis(axis)}: each rank's is already the whole gradient of its shard")
    return "; " + s


def no_grad_error(call: str, x_text: str, why: str = "", more: str = "") -> SpmdError:
    """``call`` has no gradient (``all_reduce(..., op="max")``, ``reinterpret(..., src=P,
    dst=V)``) but ``x`` can carry one: the spmd-no-grad error, one wording for both."""
    return SpmdError(
        "spmd-no-grad",
        f"{call} has no gradient{why} but {bare(x_text)} can carry one; call it on "
        f"{receiver(x_text)}.detach() or under torch.no_grad(){more}",
    )


def forward_comms(op: str, axes: Sequence[str], src: LocalType, dst: LocalType,
                  reduce_op: str = "sum") -> list[str]:
    """The collectives the forward issues (for the report)."""
    t = lookup(op, src, dst)
    if op == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS:
        return [f"all_reduce({reduce_op}) on {format_axis(tuple(axes) if len(axes) > 1 else axes[0])}"]
    if t is None:
        return []
    step = t.forward
    ax = format_axis(tuple(axes) if len(axes) > 1 else axes[0])
    return [f"{step.op} on {ax}"] if step.communicates else []


def backward_steps(op: str, src: LocalType, dst: LocalType) -> tuple[Step, ...]:
    t = lookup(op, src, dst)
    return t.backward if t else ()


def backward_comms(op: str, axes: Sequence[str], src: LocalType, dst: LocalType) -> list[str]:
    """The collectives the backward issues (for the report)."""
    ax = format_axis(tuple(axes) if len(axes) > 1 else axes[0])
    return [f"{s.op} on {ax}" for s in backward_steps(op, src, dst) if s.communicates]


@dataclass(frozen=True)
class MadeBy:
    """The value is a collective's result written in place (``spmd.all_reduce(x, "tp", src=P,
    dst=R)`` returned where I is declared): a mismatch on its axis is fixed by its own ``dst``
    (or another collective in its place), not by one more op after it."""

    op: str
    axes: tuple[str, ...]
    src: LocalType | None  # None: the op's default
    x_text: str = "..."  # its input as written
    # the local name the result is bound to once (``aux = spmd.all_reduce(...)``, then ``aux``
    # returned): only the dropped all_reduce's fix is read through it ("" : written in place)
    bound: str = ""
    # the V value the sum is taken of, where the input is ``reinterpret(part, ax, src=V,
    # dst=P)`` (read by the adapter: x_text may be cut short); "" else
    part: str = ""

    def _dropped_sum(self, axes: tuple[str, ...], want: LocalType) -> str | None:
        """A src=P all_reduce's result where V (this rank's share) is declared (an aux loss
        summed over "dp" to log it, returned as this rank's share): the value before the sum
        is this rank's part, and the sum, reinterpreted as V, is counted once per rank when
        the caller sums the ranks' shares (probe-dsv3 f2: the aux loss dp times)."""
        src = self.src or _default_src(self.op)
        if (self.op != "all_reduce" or src is None or src.kind is not Kind.P
                or want.kind is not Kind.V or want.dim is not None):
            return None
        ax = format_axes(self.axes)
        x = bare(self.x_text)
        args = _top_level_args(x[x.index("(") + 1:-1]) if x.endswith(")") and "(" in x else []
        callee = x[:x.index("(")] if args else ""
        norm = [a.replace(" ", "") for a in args]
        part: str | None = self.part or None
        if part is None and (callee.rsplit(".", 1)[-1] == "reinterpret" and len(args) >= 2
                and "src=V" in norm and "dst=P" in norm):
            part = args[0]  # reinterpret(aux_local, "dp", src=V, dst=P): aux_local is V
        result = self.bound or "the all_reduce's result"
        why = (f"the sum, returned as this rank's share, is counted once per rank where the "
               f"ranks' shares are summed; to log the sum, all_reduce a detached copy")
        if part is not None:
            what = (f"{bare(part)} (V on {ax})" if "<...>" not in part else
                    f"the input of its reinterpret(..., src=V, dst=P) (V on {ax})")
            return (f"drop the all_reduce: the value before it is this rank's part: {what} "
                    f"in place of {result} ({why})")
        return (f"drop the all_reduce if the caller sums the ranks' shares: the value before it, "
                f"{x}, is this rank's part (P on {ax}: declare it P where V is declared; {why})")

    def fix(self, axis: str | tuple[str, ...], want: LocalType) -> str | None:
        """The fix on ``axis`` (one axis, or the axes of one mismatch merged): only where
        they are the collective's own axes."""
        axes = (axis,) if isinstance(axis, str) else axis
        if sorted(self.axes) != sorted(axes):
            return None
        dropped = self._dropped_sum(axes, want)
        if dropped is not None or self.bound:
            if dropped is not None and not self.bound and not dropped.startswith(
                    "drop the all_reduce:"):
                # a P of no known V part: the reduce-scatter in its place stays an option
                rest = self._own_fix(axes, want)
                return f"{dropped}; else {rest}" if rest is not None else dropped
            return dropped
        return self._own_fix(axes, want)

    def _own_fix(self, axes: tuple[str, ...], want: LocalType) -> str | None:
        """The collective's own dst, or another collective in its place."""
        src = self.src or _default_src(self.op)
        if src is None:
            return None
        if src.kind is want.kind and shard_dims_match(src, want):
            # reinterpret(y, src=V, dst=P) returned where y's own V is declared: the fix is
            # no op at all (another collective in its place would move data for nothing)
            return (f"the {self.op}'s input {bare(self.x_text)} (src={_arg(src)}) fits as it "
                    f"is: drop the {self.op}")
        ax = format_axes(self.axes)
        t = lookup(self.op, src, want)
        if t is not None and not t.expert:
            return (f"pass dst={_arg(want)} to the {self.op}: {self.op}({bare(self.x_text)}, "
                    f"{ax}, src={_arg(src)}, dst={_arg(want)})")
        r = route(src, want)
        if r is None or r[0] == self.op or TRANSITIONS[r].expert:
            return None
        return (f"{_arg(src)} to {_arg(want)} is {_PURPOSE[r[0]]}: use {r[0]}({bare(self.x_text)}, "
                f"{ax}, src={_arg(src)}, dst={_arg(want)}) in place of the {self.op}")


def check_argument(actual: SpmdType, expected: SpmdType, *, x_text: str, where: str,
                   made_by: MadeBy | None = None, gradient_free: bool = False,
                   ndim: int | None = None, rank_max: RankMax | None = None,
                   index: IndexValue | None = None,
                   rank_every: RankEvery | None = None,
                   norm: LocalNorm | None = None, no_grad: bool = False,
                   slice_index: SliceIndex | None = None) -> list[SpmdError]:
    """A value of type ``actual`` passed where ``expected`` is declared (a call's argument).

    Per axis both types know: the kinds must agree; S(i) may stand where V is expected and
    a V (dim not known) where S(i) is (the declaration says which dim); S(i) is not S(j).
    The message names the conversion or collective that makes the value fit (for a
    collective's result written in place, ``made_by``: its own ``dst`` where that fits).
    Both global (a partition spec on each side): the layouts must be equal, and the fix
    is the ``spmd.redistribute`` call (:func:`.global_spmd.check_argument`).
    ``rank_max``: the value is computed from this rank's max (:class:`RankMax`).
    ``rank_every``: the value is computed from a rank query over every mesh axis where only
    some are meant (:class:`RankEvery`): its V on the others is named first, with the rank to
    use in its place.
    ``index``: the value holds indices or integer/bool values (:class:`IndexValue`).
    ``gradient_free``: no gradient flows through the value, so an R stands for an I and back
    (R and I differ only in what the gradient does): a custom Function's forward result
    (:func:`.duality.check_forward_result`), and an integer or bool value at any boundary
    (an argument, a return, an assignment, ``spmd.declare``), which never carries a gradient:
    a token id from ``argmax`` / ``multinomial`` / ``topk(...).indices``, a comparison's mask,
    a ``.long()`` (:data:`.ops.INTEGER_RESULTS`; the check mode reads the dtype).  A float
    value keeps the rule, even one computed without gradients (under ``torch.no_grad()``,
    ``.detach()``): its declared R or I says what its gradient does once one flows again
    (a result returned to a caller that differentiates, a ``requires_grad_()``).
    ``norm``: the value is computed from a softmax along a dim that may be sharded
    (:class:`LocalNorm`): the normaliser's all-reduce leads the fix.
    ``no_grad``: the value is computed where no gradient is recorded: an R where I is needed
    there names a mask or token ids declared R as the likely cause.
    ``slice_index``: what the adapter knows of the index of a subscript passed R where S(i)
    is needed (:class:`SliceIndex`): no reinterpret is offered for a slice that is no rank's.
    ``ndim``: the value's rank, where the adapter knows it (the check mode, which compares
    ``S(-1)`` and ``S(2)`` of a 3-d value as one layout and passes the types as written):
    two shard dims that differ are then different dims, whatever their signs.  Where one
    side is global and the other local, the spec's length is the rank.
    """
    if actual.spec is not None and expected.spec is not None:  # else the global check is None
        from .global_spmd import check_argument as check_global_argument

        global_errors = check_global_argument(actual, expected, x_text=x_text, where=where)
        if global_errors is not None:
            return global_errors
    stated = None
    if ndim is None and (actual.spec is None) != (expected.spec is None):
        # one side global: its spec states the rank (a local S(-1) where PS[None, "tp"] is
        # declared is S(1)), so the dims compare at it, as the check mode compares at its
        # tensor's rank
        ndim = stated = stated_rank(actual, expected)
    mismatches = mismatched_axes(actual, expected, gradient_free, stated)
    if not mismatches:
        return []
    # one error per value: the axes with one mistake named together, fixed by one flattened
    # collective where their order does not matter (an all_reduce, a reinterpret) or where
    # the flattened op has the layout the type reads as (an S(i) gather, scatter or slice,
    # _FLAT_SHARD_OPS: its axes in the order SpmdType keeps them), else each axis with its
    # fix and the ops nested in one expression
    groups: dict[tuple[LocalType, LocalType], list[str]] = {}
    for axis, have, want in mismatches:
        groups.setdefault((have, want), []).append(axis)
    what: list[str] = []
    units: list[tuple[str | tuple[str, ...], LocalType, LocalType]] = []  # one fix each
    for (have, want), axes in groups.items():
        what.append(f"{have.describe()} on {axis_words(axes)} where {want} is needed")
        r = route(have, want) if have.kind is not want.kind and have.by_rank is None else None
        if len(axes) > 1 and r is not None and (r[0] in _UNORDERED_OPS or (
                r[0] in _FLAT_SHARD_OPS and "S" in r[1:])):
            units.append((tuple(sorted(axes)), have, want))
        else:
            units.extend((a, have, want) for a in axes)
    fixes: list[str] = []
    nested: str | None = x_text
    for ax, have, want in units:
        if have.kind is want.kind:
            op = "redistribute"
            fix = (f"the shard dims differ; redistribute({x_text}, {format_axis(ax)}, "
                   f"src={have.at_high_ranks()}, dst={want})") + (
                       dims_in_another_order(have, want, x_text, ndim) if ndim is not None else
                       same_dim_at_one_rank(have, want) or dims_in_another_order(have, want, x_text))
        else:
            r = route(have, want)
            op = r[0] if r is not None else ""
            fix = (made_by.fix(ax, want) if made_by is not None else None) or suggest(
                have, want, x_text, ax, rank_max, index, norm, slice_index)
            if made_by is not None and made_by.bound and fix.startswith("drop the all_reduce"):
                # a name bound to the sum: the dropped all_reduce leads, the conversions after
                fix += f"; if not, {suggest(have, want, x_text, ax, rank_max, index, norm)}"
            if no_grad and have.kind is Kind.R and want.kind is Kind.I:
                # under no_grad an I beside an R without a gradient is R (SAME_VALUES): most
                # often a bool or integer tensor declared R, a mask or token ids, which the
                # static checker cannot tell from a float by its type (the check mode can)
                axw = format_axis(ax)
                fix += (f"; if {bare(x_text)} is R because of a bool or integer tensor in it "
                        f"declared R on {axw} (a mask, token ids, data loaded whole), declare "
                        f"that tensor I on {axw} instead: it carries no gradient, and beside I "
                        f"values it keeps them I")
            if rank_every is not None and have.kind is Kind.V and rank_every.covers(ax):
                fix = f"{rank_every.hint()}; if the rank over every axis is meant: {fix}"
        on = axis_words((ax,) if isinstance(ax, str) else ax)
        fixes.append(fix if len(units) == 1 else f"on {on}: {fix}")
        src = have.at_high_ranks() if have.kind is want.kind else _arg(have)
        nested = (f"{op}({bare(nested)}, {format_axis(ax)}, src={src}, dst={want})"
                  if op and nested is not None else None)
    together = f"; together: {nested}" if len(units) > 1 and nested is not None else ""
    return [SpmdError(
        "spmd-mismatch",
        f"{where} is {format_type(actual)} but {format_type(expected, like=actual)} is expected: it is "
        f"{', and '.join(what)}; {'; '.join(fixes)}{together}",
    )]


def same_dim_at_one_rank(have: LocalType, want: LocalType) -> str:
    """S(-1) and S(1) name one dim of a 2-dim tensor, and the static checker does not know the
    rank (``F.linear``'s output is S(-1)): the clause that says when the redistribute is a no-op.
    A rank-dependent layout (``torch.flip(x.t(), [0])`` of an S(0) x: ``V (S(-1) at rank >= 2,
    V at rank 1)``) by its layout at the highest ranks, where that is its layout at that rank."""
    a, b = have.at_high_ranks().dim, want.dim
    if a is None or b is None or (a < 0) == (b < 0):
        return ""
    rank = max(a, b) - min(a, b)  # the non-negative dim minus the negative one
    if have.by_rank is not None and have.at_ndim(rank) != want.at_ndim(rank):
        return ""
    return (f" (S({a}) and S({b}) are the same dim only of a {rank}-dim tensor: if the value "
            f"always has {rank} dim{'s' if rank != 1 else ''}, write S({a}) where S({b}) is "
            f"written instead)")


def mixed_shard_dims_hint(axis: str, operands: Sequence[tuple[str, LocalType]]) -> str:
    """An elementwise op of an S(-k) operand and an S(j) one (Megatron's S(-1) activations plus
    a 1-d column-parallel bias declared S(0)): broadcasting aligns dims from the back, so they
    are one dim only where the S(j) operand has j + k dims, which the static checker cannot
    see (types carry no ranks; the result is V).  The clause that says so and what to
    declare; "" unless exactly such a pair is there."""
    neg = [(t, lt.dim) for t, lt in operands if lt.kind is Kind.V and lt.dim is not None and lt.dim < 0]
    pos = [(t, lt.dim) for t, lt in operands if lt.kind is Kind.V and lt.dim is not None and lt.dim >= 0]
    if len(neg) != 1 or len(pos) != 1:
        return ""
    (a_text, a), (b_text, b) = neg[0], pos[0]
    rank = b - a
    b_name = bare(b_text)
    return (f" (S({a}) of {bare(a_text)} and S({b}) of {b_name} are the same dim only if "
            f"{b_name} has {rank} dim{'s' if rank != 1 else ''} (broadcasting aligns dims from "
            f"the back): if it always does, declare it S[{a}, {format_axis(axis)}] where "
            f"S[{b}, {format_axis(axis)}] is written)")


def mapping_group_error(call: str, group_axis: str, axis: str, typed: str | None) -> SpmdError:
    """A Megatron mapping function (typed by megatron-stubs for the tensor-model-parallel
    group, ``axis``) called with the group of another mesh axis (``reduce_from_..._region(y,
    group=mesh.get_group("dp"))``): its result would be typed as the ``axis`` collective's
    while the call runs over ``group_axis``.  ``typed``: the spmd call doing the mapping's
    collective over ``group_axis`` (migrate's table), if any."""
    ax, other = format_axis(axis), format_axis(group_axis)
    over = f"; or, if it is meant to run over {other}, use {typed}" if typed else ""
    return SpmdError(
        "spmd-axis",
        f"{call} runs on the group of {other}, but the mapping's types "
        f"are those of its collective over {ax} (the tensor-model-parallel group the Megatron "
        f"stubs assume), so its result would be typed as if it had run over {ax}: pass the "
        f"group of {ax} (group=mesh.get_group({ax}), or leave group= out){over}")


def dims_in_another_order(have: LocalType, want: LocalType, x_text: str,
                          ndim: int | None = None) -> str:
    """S(a) where S(b) is needed (a, b of one sign): the redistribute keeps the global tensor
    and moves its shard; a value whose dims are in another order (Megatron's ``[s, b, h]``
    where ``[b, s, h]`` is meant) needs ``transpose(a, b)`` instead, which moves the shard
    dim with the data::

        [s/N, b, h] S(0)  --transpose(0, 1)-->  [b, s/N, h] S(1)
    """
    a, b = have.dim, want.dim
    if a is None or b is None or a == b:
        return ""
    # the rank known (``ndim``), S(0) and S(-1) of a 3-d value are two dims: transpose(0, -1)
    if ndim is not None:
        if not (-ndim <= a < ndim and -ndim <= b < ndim) or a % ndim == b % ndim:
            return ""
    elif (a < 0) != (b < 0):
        return ""
    return (f" to shard the same global tensor on dim {b}, or {bare(x_text)}.transpose({a}, {b}) "
            f"if its dims are in another order (a [s, b, h] value where [b, s, h] is meant)")


def declaration_error(have: SpmdType, want: SpmdType, *, x_text: str, what: str,
                      order: Sequence[str] = (), may_be_cut: bool | None = None,
                      index: IndexValue | None = None,
                      gradient_free: bool = False) -> SpmdError | None:
    """``spmd.declare(x, want)`` where ``x`` is known to be ``have``: a declaration states a
    type, it never changes one (``reinterpret``/``convert`` do), so the types must agree on
    every axis both name (V may be declared S(i); S(-1) and S(1) compared at the rank the
    caller gives them).  ``what`` is the call as written, ``spmd.declare(x, Tensor[...])``::

        out: P["tp"];  spmd.declare(out, Tensor[I["tp"]])  ->  error: P to I is a reduction

    ``may_be_cut``: whether ``x`` may be a part cut from a replicated whole by hand, which
    the message then explains (None: judged from ``x_text``, an index or a split).
    ``index``: ``x`` holds indices or integer/bool values (:class:`IndexValue`).
    """
    bad = declaration_conflict(have, want, gradient_free)
    if bad is None:
        return None
    axis, old, new = bad
    hand_cut = ""
    if may_be_cut is None:
        may_be_cut = any(c in x_text for c in ("[", "split(", "chunk(", "narrow("))
    if old.kind in (Kind.R, Kind.I) and new.kind is Kind.V and may_be_cut:
        # Megatron's init: this rank's rows cut from the whole weight by hand; the checkers
        # see no rank in the indices and keep the whole's type, and the convert above,
        # applied to the cut, would cut it again
        dst = f"S({new.dim})" if new.dim is not None else "V"
        hand_cut = (f"; if {bare(x_text)} is this rank's part cut from the whole by hand "
                    f"(whole[r * k:(r + 1) * k], torch.split(whole, k, dim)[r]), which this checker "
                    f'does not see, cut it with convert(whole, "{axis}", src={old}, dst={dst}) instead')
    return SpmdError(
        "spmd-annotation",
        f'{what} but {x_text} is {old} on "{axis}", not {new} '
        f"({x_text}: {format_type(have, order)}): a declaration states a type, it "
        f"cannot change one; {suggest(old, new, x_text, axis, index=index)}{hand_cut}",
    )


def declaration_conflict(have: SpmdType, want: SpmdType, gradient_free: bool = False
                         ) -> tuple[str, LocalType, LocalType] | None:
    """The first axis where a declared ``want`` disagrees with the known ``have``
    (``gradient_free``: an integer or bool value, whose R and I agree: :func:`check_argument`)."""
    bad = mismatched_axes(have, want, gradient_free)
    return bad[0] if bad else None


def may_be_none(errors: list[SpmdError], x_text: str) -> list[SpmdError]:
    """The errors of a value that may also be None (``o: Tensor[V["tp"]] | None``): the
    collective of the fix takes a tensor, so it goes where the value is one."""
    note = f" ({bare(x_text)} may be None: apply the fix where it is not None)"
    return [SpmdError(e.code, e.message + note) for e in errors]


# ops whose flattened axes may be listed in any order (a gather, a scatter, a conversion
# that keeps one rank's slice orders its blocks by the axes' order)
_UNORDERED_OPS = ("all_reduce", "reinterpret")
# ops that, with an S(i) on one side, make one flattened call of a fix over several axes: the
# blocks of dim i in the order of the axes written (row-major, the first axis outermost).
# A local type does not keep that order (SpmdType sorts its axes by name, and the plugin
# stores one slot per mesh axis), so the fix lists the axes sorted by name: the order the
# message prints the declared type in (S[0, "col", "row"]: reduce_scatter(g, ("col", "row"),
# ...)).  A V (no dim) is not flattened: nested gathers of V stack on a new dim each.
_FLAT_SHARD_OPS = ("all_gather", "reduce_scatter", "convert")


def check_argument_any(actual: SpmdType, wanted: Sequence[SpmdType], *, x_text: str,
                       where: str, made_by: MadeBy | None = None,
                       rank_max: RankMax | None = None,
                       index: IndexValue | None = None,
                       gradient_free: bool = False,
                       rank_every: RankEvery | None = None,
                       norm: LocalNorm | None = None, no_grad: bool = False) -> list[SpmdError]:
    """A value passed where one of several types is declared (a union parameter,
    ``Tensor[R["tp"]] | Tensor[V["tp"]]``): no error if it fits one; else the first
    type's errors, with its fix, naming the others the parameter takes."""
    first: list[SpmdError] = []
    for k, expected in enumerate(wanted):
        errors = check_argument(actual, expected, x_text=x_text, where=where, made_by=made_by,
                                rank_max=rank_max, index=index, gradient_free=gradient_free,
                                rank_every=rank_every, norm=norm, no_grad=no_grad)
        if not errors:
            return []
        if k == 0:
            first = errors
    if len(wanted) > 1:
        also = " or ".join(format_type(t) for t in wanted[1:])
        first = [SpmdError(e.code, f"{e.message} (the parameter also takes {also})") for e in first]
    return first


# --------------------------------------------------------------------------------------
# Raw torch.distributed collectives on typed tensors (spmd-raw-collective): the mypy plugin
# reports them from the source, the check mode from the call (both outside a custom
# autograd Function's forward/backward, where users implement their own collectives).

RAW_COLLECTIVES = frozenset(
    """all_reduce all_gather all_gather_into_tensor reduce_scatter reduce_scatter_tensor
    all_to_all all_to_all_single broadcast reduce all_reduce_coalesced all_gather_single
    reduce_scatter_single""".split()
)  # torch 2.13: all_gather_into_tensor/reduce_scatter_tensor call the *_single ones
# Collectives of torch.distributed.nn.functional (differentiable, with a fixed backward) and of
# torch.distributed._functional_collectives (functional, some with an autograd variant).
RAW_NN_COLLECTIVES = frozenset(
    """all_reduce all_gather _all_gather_base reduce_scatter all_to_all all_to_all_single
    broadcast reduce gather scatter""".split()
)
RAW_FUNCTIONAL_COLLECTIVES = frozenset(
    """all_reduce all_reduce_inplace all_reduce_coalesced all_gather_tensor
    all_gather_tensor_autograd all_gather_tensor_inplace all_gather_into_tensor_coalesced
    all_gather_single all_gather_single_autograd all_gather_inplace reduce_scatter_tensor
    reduce_scatter_tensor_autograd reduce_scatter_tensor_inplace reduce_scatter_tensor_coalesced
    reduce_scatter_single reduce_scatter_single_autograd all_to_all_single
    all_to_all_single_autograd all_to_all_inplace broadcast permute_tensor""".split()
)
# The parameters a raw torch.distributed collective writes in place, when passed by name: its
# first argument is the tensor it writes (all_reduce's, broadcast's, reduce's tensor; the output of
# all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single; the output list of
# all_gather, all_to_all).  Inside a custom Function's forward/backward what it wrote is untyped.
RAW_OUTPUT_KWARGS = ("tensor", "output", "output_tensor", "tensor_list", "output_tensor_list",
                     "tensors")
# Where a raw collective's module is reached from (the message names it as users import it).
# Every raw collective's module is under this one (RAW_MODULES' too): a name outside it is none
RAW_ROOT = "torch.distributed."
RAW_MODULES = {
    "torch.distributed.nn.functional.": ("torch.distributed.nn.functional", RAW_NN_COLLECTIVES),
    "torch.distributed._functional_collectives.": ("torch.distributed._functional_collectives",
                                                   RAW_FUNCTIONAL_COLLECTIVES),
}
# The typed spmd collective standing for a raw one.
_TYPED_COLLECTIVE = {
    "all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all", "_all_gather_base": "all_gather",
    "all_reduce_inplace": "all_reduce", "all_reduce_coalesced": "all_reduce",
}


def raw_collective(fullname: str) -> tuple[str, str] | None:
    """(the module as users name it, the collective) for a raw torch collective, else None."""
    for prefix, (module, names) in RAW_MODULES.items():
        if fullname.startswith(prefix):
            name = fullname[len(prefix):]
            return (module, name) if name in names else None
    if fullname.startswith(RAW_ROOT):
        name = fullname.rsplit(".", 1)[-1]
        if name in RAW_COLLECTIVES:
            return "torch.distributed", name
    return None


def raw_writes_in_place(module: str, name: str) -> bool:
    """Whether a raw collective writes its first argument in place (torch.distributed's; the
    functional ``*_inplace`` ones): the tensor of all_reduce, broadcast, reduce; the output of
    all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single; the output list of
    all_gather, all_to_all (``RAW_OUTPUT_KWARGS`` by name).  What such a call wrote is
    untyped after it, in both checkers: inside a custom autograd Function's forward or
    backward (the Function's annotations type the result), and after a typed tensor's raw
    call outside one, whose spmd-raw-collective error is then the only one: the type its
    reads would see (the type before the call, or a guess at the typed fix's result over an
    axis its group may not be) would make a second error of the same mistake (AMP's
    ``dist.all_reduce(found_inf, op=MAX)`` then ``if found_inf.item() > 0: continue``:
    spmd-divergent-collective on a found_inf still read V).  Untyped is gradual: no error."""
    return module == "torch.distributed" or name.endswith("_inplace")


def typed_collective(name: str) -> str | None:
    """The spmd collective doing what a raw one does (all_gather_tensor_autograd -> all_gather)."""
    if name in _TYPED_COLLECTIVE:
        return _TYPED_COLLECTIVE[name]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        if name.startswith(op):
            return op
    return None


# Raw all-gathers that hand back each rank's tensor apart (a list: typed, they stack on a
# new dim 0, src=V) and those that concatenate them on dim 0 (typed: src=S(0)).
_RAW_GATHER_LISTS = frozenset({"torch.distributed.all_gather",
                               "torch.distributed.nn.functional.all_gather"})
_RAW_GATHER_DIM0 = frozenset({"torch.distributed.all_gather_into_tensor",
                              "torch.distributed.all_gather_single",
                              "torch.distributed.nn.functional._all_gather_base"})


# The reduce ops the raw collectives state: torch.distributed.ReduceOp's members (op=
# ReduceOp.AVG) and the functional collectives' strings (reduceOp="avg"), lower-cased.
RAW_REDUCE_OPS = frozenset({"sum", "avg", "product", "min", "max", "band", "bor", "bxor",
                            "premul_sum"})
# The parameters a raw collective states its reduce op in (by name; async_op its asynchrony).
RAW_OP_PARAMS = ("op", "reduceOp")
_FUNCTIONAL = "torch.distributed._functional_collectives"


def raw_reduce_op(text: str) -> str | None:
    """The reduce op a raw collective's op argument names (``ReduceOp.AVG``,
    ``dist.ReduceOp.RedOpType.AVG``, ``"avg"``: avg), None for one not read."""
    name = text.strip().strip("'\"").rsplit(".", 1)[-1].lower()
    return name if name in RAW_REDUCE_OPS else None


_OP_TYPED = ("all_reduce", "reduce_scatter")  # the typed collectives that take op=


def _raw_typed_op(typed_name: str, reduce_op: str | None) -> tuple[str, str]:
    """How the typed collective states a raw call's reduce op: (the op= argument, or "" for
    the default sum; the reason no typed call does it, or "")."""
    if typed_name not in _OP_TYPED or reduce_op == "sum":
        return "", ""
    if reduce_op is None:
        return ", op= the raw call's reduce op", ""
    takes = REDUCE_OPS if typed_name == "all_reduce" else SCATTER_REDUCE_OPS
    if reduce_op not in takes:
        return "", f'spmd.{typed_name} takes op= {", ".join(takes)}, not "{reduce_op}"'
    return f', op="{reduce_op}"', ""


_RAW_SCATTER_DIM0 = frozenset({"torch.distributed.reduce_scatter_tensor",
                               "torch.distributed.reduce_scatter_single"})


def _raw_replacement(module: str, name: str, typed_name: str, x_text: str,
                     x_type: SpmdType, reduce_op: str | None = "sum",
                     assign_to: str | None = None, gathered_into: str | None = None) -> str:
    """The typed call for a raw one: concrete where the tensor's type says the axis and src
    (one P axis for an all-reduce or torch's reduce_scatter_tensor, one V axis for an
    all-reduce with op="max"/"min", one V or S(i) axis for an all-gather whose layout the raw
    op fixes), else in words; with the raw call's reduce op (op="avg": the typed call
    without it sums, a result n times too large).  ``assign_to``: the raw call is a statement
    of its own writing this tensor in place: the fix assigns the typed call's result to it
    (the typed call as a statement would discard it, spmd-discarded-result).
    ``gathered_into``: the list a raw all_gather fills, as written (the static checker)."""
    x = bare(x_text)
    op_arg, cannot = _raw_typed_op(typed_name, reduce_op)
    if cannot:
        return (f"the raw call inside a custom autograd Function whose annotations type its "
                f"result ({cannot})")
    if typed_name == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS:
        want: tuple[Kind, ...] = (Kind.V,)
    elif typed_name in ("all_reduce", "reduce_scatter"):
        want = (Kind.P,)
    else:
        want = (Kind.V,)
    axes = [(a, t) for a, t in x_type.axes if t.kind in want]
    src: LocalType | None = None
    if len(axes) == 1 and typed_name == "all_reduce":
        src = axes[0][1]
    elif len(axes) == 1 and typed_name == "all_gather":
        t = axes[0][1]
        if t.dim is not None and t.by_rank is None:
            src = t
        elif t.dim is None and f"{module}.{name}" in _RAW_GATHER_LISTS:
            src = t
        elif t.dim is None and f"{module}.{name}" in _RAW_GATHER_DIM0:
            src = LocalType(Kind.V, 0)
    dst = "R"
    if len(axes) == 1 and f"{module}.{name}" in _RAW_SCATTER_DIM0:
        src, dst = axes[0][1], "S(0)"  # the sum, chunked on dim 0
    in_place = raw_writes_in_place(module, name)
    if (src is not None and src.dim is not None and typed_name == "all_gather"
            and f"{module}.{name}" in _RAW_GATHER_LISTS):
        # a list of the ranks' tensors (open_clip's gather_features: filled by the raw op,
        # this rank's own put back for its gradient, then torch.cat): the typed gather is
        # that concatenation already and carries the gradient, so the list, the re-insertion
        # and the cat all go (the typed call pasted over the raw one alone broke the lines
        # after it: spmd-inplace at the re-insertion, arg-type at the cat; probe-contrast 4)
        call = f"spmd.{typed_name}({x}, {format_axis(axes[0][0])}, src={src}, dst={dst})"
        res = f"all_{x}" if x.isidentifier() else "gathered"
        lst = gathered_into if gathered_into is not None and gathered_into.isidentifier() else None
        if lst is not None:
            parts = (f"the list {lst}, the re-insertion {lst}[rank] = {x} and the "
                     f"torch.cat({lst}, dim={src.dim}) together: use {res} in place of "
                     f"torch.cat({lst}, ...)")
        else:
            parts = (f"the list, any re-insertion of {x} into it and the torch.cat of it "
                     f"together: use {res} in place of the torch.cat")
        return (f"{res} = {call}: it returns the ranks' tensors already concatenated on dim "
                f"{src.dim} (one tensor, not a list) and its backward hands each rank the "
                f"gradient of its own {x}, so it replaces {parts}")
    if src is not None and (reduce_op is not None or typed_name not in _OP_TYPED):
        operand = x
        if typed_name == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS:
            # a max/min of a value Partial on other axes: those sums first
            # (_extreme_of_summands)
            for a in _partial_elsewhere(x_type, (axes[0][0],)):
                operand = f"spmd.all_reduce({operand}, {format_axis(a)}, src=P, dst=R)"
        call = (f"spmd.{typed_name}({operand}, {format_axis(axes[0][0])}, src={src}, "
                f"dst={dst}{op_arg})")
        if in_place and assign_to:
            return (f"{assign_to} = {call} (the typed call returns the result, which the raw "
                    f"op wrote into {assign_to}; as a statement of its own it would be dropped)")
        return call + (", which returns the result (the raw op writes it into a tensor passed "
                       "to it)" if in_place else "")
    if not axes and typed_name == "all_reduce" and want == (Kind.P,):
        # no pending sum: a V value summed by the raw call is each rank's part of a sum (a
        # local loss, a sum of squares), which reinterpret(V,P) states before the reduction;
        # an all_reduce with src=V is no transition
        parts = [a for a, t in x_type.axes if t.kind is Kind.V and t.dim is None and t.by_rank is None]
        if parts:
            ax = format_axis(parts[0]) if len(parts) == 1 else "axis"
            over = ("" if len(parts) == 1 else
                    f" over the mesh axis its process group spans ({x} is V on "
                    + " and ".join(format_axis(a) for a in parts) + ")")
            assign = f"{assign_to} = " if in_place and assign_to else ""
            return (f"{assign}spmd.all_reduce(spmd.reinterpret({x}, {ax}, src=V, dst=P), {ax}, "
                    f"src=P, dst=R{op_arg}){over} where its ranks' values "
                    f"{'on ' + ax if len(parts) == 1 else 'there'} are the parts of one "
                    f"sum (a local loss, a sum of squares), which returns the result")
    where = ""
    if len(axes) > 1:
        where = (f" ({x} is {want[0].value} on "
                 + " and ".join(format_axis(a) for a, _ in axes) + ")")
    assign = (f", assigning its result to {assign_to} (the typed call returns it; the raw op "
              f"wrote it into {assign_to})" if in_place and assign_to else "")
    return (f"spmd.{typed_name} on {x} over the mesh axis its process group spans{where}, "
            f"with src= {x}'s type on that axis and dst= the type wanted{op_arg}{assign}")


# Where a raw collective's group= is no mesh axis's group (the first and last pipeline stages'
# tied-embedding group): the README section that says what to do there.
NO_AXIS_GROUP_README = 'README "Pipeline parallelism" (a group that is no mesh axis)'


def raw_collective_error(module: str, name: str, x_text: str, x_type: SpmdType, *,
                         reduce_op: str | None = "sum", async_op: bool = False,
                         group: str | None = None, group_is_axis: bool | None = None,
                         assign_to: str | None = None,
                         gathered_into: str | None = None) -> SpmdError:
    """``torch.distributed.all_reduce(x)`` with a typed ``x``: not differentiable (or with
    a fixed backward), and its result's type is unknown.  ``reduce_op`` is the reduce op the
    call states (lower-cased: "sum", its default; "avg"; None: an expression not read), which
    the suggested typed call carries; ``async_op`` a call with async_op=True.  The typed
    collectives are synchronous: the message says so for an asynchronous raw call (and for a
    functional collective, whose result is waited on first use), the overlap the fix drops.
    ``group``: the text of a group= the call passes that the caller could not identify as a
    mesh axis's group (``group_is_axis`` None) or knows is none (False): the typed call over an
    axis would then take other ranks (a pipeline's tied-embedding group, ranks 0 and 3 of
    pp=4: the pasted fix hangs).  ``assign_to``: the raw call is a statement of its own
    (the static checker sees it; the check mode does not) and writes this tensor in place:
    the typed fix assigns its result there, ``g = spmd.all_reduce(g, ...)`` (the typed call
    pasted as the statement would drop it).  ``gathered_into``: the list a raw
    ``dist.all_gather(tensor_list, x)`` fills, as written: the fix names it."""
    typed_name = typed_collective(name)
    replacement = (_raw_replacement(module, name, typed_name, x_text, x_type, reduce_op,
                                    assign_to, gathered_into)
                   if typed_name in OPS and typed_name is not None else "a typed spmd collective")
    if f"{module}.{name}" in RAW_BROADCASTS:
        # spmd has no typed broadcast: the raw one in place is accepted where it changes no
        # type (raw_broadcast_error), which the checker sees with the group of a mesh axis
        x = _undetached(bare(x_text))
        replacement = (f"group=mesh.get_group(axis) (the group of a mesh axis, so the checkers "
                       f"see the axis): a broadcast of {receiver(x)}.data, or under "
                       f"torch.no_grad(), is accepted where {x} is R or I on the axes "
                       f"the group spans (it changes no type there)")
    sync = ""
    if typed_name in OPS and typed_name is not None:
        if async_op:
            sync = (f"; spmd.{typed_name} is synchronous: it returns the result, not a work "
                    f"handle, so the communication no longer overlaps the code before the wait")
        elif module == _FUNCTIONAL and not name.endswith("_inplace"):
            sync = (f"; spmd.{typed_name} is synchronous: the functional collective's result "
                    f"is waited on first use, the typed call waits before it returns")
    return SpmdError(
        "spmd-raw-collective",
        f"{module}.{name} on the typed tensor {x_text} ({format_type(x_type)}): a raw "
        f"collective is not differentiable (or has a fixed backward) and its result's type is "
        f"unknown; {_group_fix(replacement, group, group_is_axis)}{sync}",
    )


def discarded_result_error(call: str, x_text: str | None, x_type: SpmdType | None,
                           target: str | None, *, mapping: bool = False) -> SpmdError:
    """A typed collective (``spmd.all_reduce``, ..., ``spmd.redistribute``; ``mapping``: a
    Megatron mapping function the stubs type as one) as a statement of its own: its result
    is dropped.  The spmd collectives are out of place (they return a new tensor and leave
    their input as it was), so the statement changes nothing (a probe pasted
    ``spmd.all_reduce(g, "dp", src=P, dst=R)`` over ``dist.all_reduce(g)``, ``g`` stayed
    each rank's summand and the step was 0.245 off; a conversion returns a view typed anew,
    the statement leaves the input's type as it was).  A Megatron mapping may write its input
    in place (``reduce_from_...``'s all-reduce), but its input keeps its type: only the
    result is typed.  ``call``: the call's text; ``x_text`` / ``x_type``: its input's text
    and type (None: untyped, gradual code: a dropped result is a mistake all the same);
    ``target``: the input's text where it can be assigned (a name, an attribute, an item),
    the fix's target; else the fix binds a new name.  The static checker only: the check
    mode cannot see that a result is dropped."""
    x = bare(x_text) if x_text is not None else None
    held = f" ({format_type(x_type)})" if x_type else ""
    if mapping:
        why = (f"the checkers type the tensor it returns, and {x}{held} keeps its type "
               f"whatever the call did to it" if target else
               "the checkers type the tensor it returns")
    else:
        why = ("spmd's collectives and conversions are out of place: they return the result "
               f"and leave {x if target else 'their input'}{held if target else ''} as it was "
               "(its values and its type), so this statement changes nothing")
    fix = (f"assign the result: {target} = {call}" if target else
           f"assign the result and use it: y = {call}")
    return SpmdError("spmd-discarded-result", f"{call} discards its result: {why}; {fix}")


# ``torch.distributed.broadcast(x, src, group)`` in place: every rank of the group gets rank
# src's x.  On a value R (or I) on every axis the group spans it changes no type (how
# replicas are made truly equal: Megatron's and torchtitan's init sync of the parameters
# over "dp"), and is accepted when no gradient flows through it (on ``p.data``, a detached
# value, under torch.no_grad()).  On a value V, S(i) or P on such an axis it makes the
# value R in place, which an in-place op may not do (spmd-inplace).  spmd has no typed
# broadcast: the typed way to hand every rank one rank's value is an all_gather indexed.
RAW_BROADCASTS = frozenset({"torch.distributed.broadcast"})


def _undetached(x: str) -> str:
    """``p.data`` / ``p.detach()`` -> ``p``."""
    for tail in (".data", ".detach()"):
        if x.endswith(tail) and len(x) > len(tail):
            return x[:-len(tail)]
    return x


def raw_broadcast_error(x_text: str, x_type: SpmdType, group_axes: Sequence[str] | None,
                        detached: bool, *, src_index: int | None = None) -> SpmdError | None:
    """``torch.distributed.broadcast(x, src, group=g)`` on a typed ``x`` (the caller checked
    ``g`` is the group of a mesh axis or of several, or the world): None when accepted.
    ``group_axes``: the axes ``g`` spans (None: the world, or a group the caller cannot read:
    every axis ``x``'s type names); ``detached``: no gradient flows through ``x`` (``.data``,
    ``.detach()``, torch.no_grad()); ``src_index``: rank src's index on those axes, if known."""
    x = bare(x_text)
    axes = list(group_axes) if group_axes is not None else [a for a, _ in x_type.axes]
    bad = [(a, t) for a in axes if (t := x_type.get(a)) is not None and t.kind not in (Kind.R, Kind.I)]
    where = (format_axes(axes) if axes else "the group")
    if bad:
        a, t = bad[0]
        # the typed call on the value itself (x.data / x.detach() broadcast in place: x)
        v = _undetached(x)
        over = [b for b, _ in bad]  # R/I elsewhere: rank src's value is that of its index here
        k = str(src_index) if src_index is not None and over == axes else "k"
        pick = (f"spmd.all_gather({v}, {format_axes(over)}, src=V, dst=R)[{k}]"
                + ("" if k != "k" else f" (k: rank src's index on {axis_words(over)})"))
        if t.kind is Kind.P:
            held = "a summand of a pending sum"
            fix = (f"spmd.all_reduce({v}, {format_axis(a)}, src=P, dst=R), which returns the "
                   f"sum (a broadcast would keep rank src's summand alone)")
        else:
            held = ("its block of the value sharded on dim " + str(t.dim) if t.dim is not None
                    else "its own value")
            whole = (f"; spmd.all_gather({v}, {format_axis(a)}, src={t}, dst=R) for the whole "
                     f"value" if t.dim is not None and len(over) == 1 else "")
            fix = f"{pick}, which returns rank src's value typed R{whole}"
        return SpmdError(
            "spmd-inplace",
            f"torch.distributed.broadcast over {where} overwrites every rank's {x} with rank "
            f"src's, but {x} is {format_type(x_type)}: {t} on {format_axis(a)}, each rank "
            f"holding {held}; the broadcast would make it R there in place, and an in-place "
            f"op may not change a tensor's type; use {fix}",
        )
    if not detached:
        return SpmdError(
            "spmd-no-grad",
            f"torch.distributed.broadcast writes {x} ({format_type(x_type)}) in place where "
            f"autograd does not see it; broadcast {receiver(x)}.data or a detached value, or "
            f"call it under torch.no_grad() (making the replicas of a value R on {where} equal, "
            f"as at init, changes no type)",
        )
    return None


def mesh_moved_error(x_text: str, x_type: SpmdType, axis: str, ranks_then: Sequence[int],
                     ranks_now: Sequence[int], mesh_then: Sequence[str], mesh_now: Sequence[str],
                     op: str | None = None) -> SpmdError:
    """A value typed under one mesh used under another whose axis ``axis`` has the same name
    but spans other ranks (``ranks_then`` / ``ranks_now``, this rank's groups; the check mode
    only: the static checker sees names, not meshes).  Two meshes naming their axes alike
    (tp=2 and tp=4 resharded in one program, the model class annotating "tp"): the type
    would be read as a layout over the new mesh's ranks."""
    x = bare(x_text)
    lt = x_type.get(axis)
    ax = format_axis(axis)
    where = "here" if op is None else f"at spmd.{op}"
    if lt is not None and lt.kind is Kind.P:
        full = f"spmd.all_reduce({x}, {ax}, src=P, dst=R)"
    elif lt is not None and lt.kind is Kind.V:
        full = f"spmd.all_gather({x}, {ax}, src={lt}, dst=R)"
    else:
        full = None
    through = (f"under the mesh it was typed on (with spmd.set_mesh(<that mesh>):) make it the "
               f"full value, {full}, then use that here (R or I on every axis of a mesh means "
               f"the same on any other); or, " if full is not None else "")
    # an op (no collective): local work on that mesh's values (an optimizer step after the
    # forward and backward ran under it) runs right under that mesh
    local = ("if this is local work on values of that mesh (an optimizer step, an update), "
             "run it under that mesh: with spmd.set_mesh(<that mesh>): around it; or, "
             if op is None else "")
    return SpmdError(
        "spmd-mesh",
        f"{x} ({format_type(x_type)}) was typed under the mesh with axes "
        f"{axis_words(mesh_then)}, where {ax} spans ranks {list(ranks_then)}, but under the "
        f"current mesh (axes {axis_words(mesh_now)}) {ax} spans ranks {list(ranks_now)}; a "
        f"type names an axis, not its ranks, so {x}'s {lt if lt is not None else 'type'} on "
        f"{ax} would be read {where} as a layout over the other ranks; "
        f"{local}{through}if {x} holds what its type says on this mesh's axes, state it: "
        f"spmd.declare({x}, {format_type(x_type)})",
    )


# ------------------------------------------------------------------------------------
# Duplicated data across meshes (the check mode: "parallel folding")
# ------------------------------------------------------------------------------------
#
# Two meshes over the same ranks (dense dp x tp = 2 x 2, experts on an "ep" spanning the 4
# ranks): a value R or I on the dense "tp" is the same on both ranks of a tp group, and "ep"'s
# group holds both.  A collective over "ep" takes each rank's data as its own contribution:
# an all_to_all sends every token twice (each expert sees it twice, its gradient doubles), a
# sum counts each summand twice, a gather holds each block twice.  The check mode knows both
# meshes' rank layouts; the static checker sees axis names only (docs/meshes.md).


def duplicates_harmless(op: str, reduce_op: str = "sum") -> bool:
    """Whether ``op`` over an axis whose group holds several ranks with one value is right
    on such duplicates: a conversion (no communication: each rank keeps or cuts its own
    data) and an idempotent reduction (max, min)."""
    return op in CONVERSIONS or (op == "all_reduce" and reduce_op in NO_GRAD_REDUCE_OPS)


def duplicated_operand_error(op: str, x_text: str, x_type: SpmdType, axes: Sequence[str],
                             same: Sequence[str], holders: Sequence[int], group: Sequence[int],
                             mesh_then: Sequence[str], mesh_now: Sequence[str],
                             reduce_op: str = "sum") -> SpmdError:
    """``op`` over ``axes`` (of the current mesh, axes ``mesh_now``), whose group here is the
    ranks ``group``, on ``x`` that is R or I on ``same`` (axes of the mesh with axes
    ``mesh_then``, where the ranks ``holders`` hold one value): the group holds two or more
    of them, so the collective sends, sums or gathers the same data more than once."""
    x = bare(x_text)
    ax = format_axis(axes[0] if len(axes) == 1 else tuple(axes))
    on = axis_words(same)
    kinds = [x_type.get(a) for a in same]
    shared = [r for r in group if r in set(holders)]
    what = {"all_to_all": "sends every value of it once per such rank (each receiver gets it "
                          "that many times: an expert sees every token twice and its gradients "
                          "double)",
            "all_gather": "gathers each block of it once per such rank (the result holds "
                          "every block that many times)",
            "reduce_scatter": "sums it once per such rank (the result is that many times the "
                              "sum)"}.get(op, "sums it once per such rank (the result is that "
                                              "many times the sum)" if reduce_op != "avg" else
                              "averages it with each value counted once per such rank")
    b = same[0]
    src = kinds[0] if kinds[0] is not None else "I"
    split = (f"{x} = spmd.convert({x}, {format_axis(b)}, src={src}, dst=S(0)) (or dst=V) under "
             f"the mesh with axes {axis_words(mesh_then)}, so that each rank holds its own part, "
             f"and all_gather the result over {format_axis(b)} after")
    sums = op == "all_reduce" or op == "reduce_scatter"
    other = (f"; or, if the summands are one per group of {on}, reduce over an axis whose group "
             f"holds one rank of each such group (an axis of the mesh with axes "
             f"{axis_words(mesh_then)}, not {ax})" if sums else "")
    return SpmdError(
        "spmd-mesh",
        f"{op} over {ax} on duplicated data: {x} ({format_type(x_type)}) is "
        f"{'/'.join(str(k) for k in kinds)} on {on} of the mesh with axes "
        f"{axis_words(mesh_then)}: ranks {list(holders)} hold the same value; but {ax}'s group "
        f"here (the mesh with axes {axis_words(mesh_now)}), ranks {list(group)}, holds ranks "
        f"{shared} of them, so the {op} {what}; split {x} over {on} first: {split}{other}",
    )


def sums_blocks(op: str, reduce_op: str = "sum") -> bool:
    """Whether ``op`` adds the ranks' data (a sum or an average over the axis)."""
    return op in ("all_reduce", "reduce_scatter") and reduce_op in SCATTER_REDUCE_OPS


def summed_blocks_error(op: str, x_text: str, x_type: SpmdType, axes: Sequence[str],
                        sharded: Sequence[str], holders: Sequence[int], group: Sequence[int],
                        mesh_then: Sequence[str], mesh_now: Sequence[str]) -> SpmdError:
    """A sum over ``axes`` (of the current mesh, axes ``mesh_now``; its group here is the
    ranks ``group``) of ``x``, S(i) on ``sharded`` (axes of the mesh with axes ``mesh_then``,
    over the ranks ``holders``): the group holds two or more of those ranks, which hold
    different blocks of one value; the sum adds them (an expert gradient, S on the expert
    mesh's "ep", all-reduced over the dense "dp": each rank's experts get the others')."""
    x = bare(x_text)
    ax = format_axis(axes[0] if len(axes) == 1 else tuple(axes))
    on = axis_words(sharded)
    kinds = [x_type.get(a) for a in sharded]
    shared = [r for r in group if r in set(holders)]
    rest = [a for a in mesh_then if a not in sharded]
    if rest:
        fix = (f"reduce it where its type says it is partial: under the mesh with axes "
               f"{axis_words(mesh_then)} (with spmd.set_mesh(<that mesh>):), over "
               f"{axis_words(rest)} if the ranks there hold summands of one block (an expert "
               f"gradient: over the expert data-parallel axis, where it is P)")
    else:
        fix = (f"that mesh has no other axis, so each block is on one rank and whole: it needs "
               f"no reduction (an expert gradient on an \"ep\" spanning every rank)")
    return SpmdError(
        "spmd-mesh",
        f"{op} over {ax} sums different blocks: {x} ({format_type(x_type)}) is "
        f"{'/'.join(str(k) for k in kinds)} on {on} of the mesh with axes "
        f"{axis_words(mesh_then)}: ranks {list(holders)} hold different blocks of it; but "
        f"{ax}'s group here (the mesh with axes {axis_words(mesh_now)}), ranks {list(group)}, "
        f"holds ranks {shared} of them, so the {op} adds different blocks (an expert gradient "
        f"reduced over the dense data-parallel axis adds other experts' gradients); {fix}",
    )


def _group_fix(replacement: str, group: str | None, group_is_axis: bool | None) -> str:
    """The fix of a raw collective, given what is known of its group= (see
    :func:`raw_collective_error`)."""
    if group is None or group_is_axis:
        return f"use {replacement}"
    if group_is_axis is False:
        return (f"{group} is the group of no mesh axis, so no typed collective over an axis "
                f"does this: see {NO_AXIS_GROUP_README}")
    cond = (f"the ranks {group} are those of a mesh axis" if group[:1] in "[("
            else f"{group} is the group of a mesh axis")  # funcol's group=[0, 1]
    return f"if {cond}, use {replacement}; otherwise see {NO_AXIS_GROUP_README}"


# ------------------------------------------------------------------------------------
# What the ranks of an axis must agree on at a collective (the runtime check mode)
# ------------------------------------------------------------------------------------
#
# A collective exchanges raw buffers: every rank of the axis must make the same call on a
# tensor of the same dtype and shape, except where the call says how they differ (the
# shard dim of an uneven all_gather, given by sizes=; dim 0 of an uneven all_to_all).  A
# mismatch is garbage (fp16 on one rank, bf16 on another), an abort of every gloo rank
# (element sizes or message sizes that differ) or a wait until the timeout, far from the
# call.  The check mode exchanges each rank's :class:`RankCall` before the collective and
# raises :func:`disagreement`'s message on every rank (the same rows, the same verdict).

# The ops that communicate forward (convert and reinterpret never do).
AGREEING_OPS = COLLECTIVES


@dataclass(frozen=True)
class RankCall:
    """One rank's side of a collective that communicates, as the check mode exchanges it.

    ``call``: the collective as that rank made it (``all_gather(x, 'tp', src=S(0), dst=R)``);
    ``op``/``src``/``dst``/``src_dim``: the same, as data; ``dtype``: the input's dtype
    name; ``shape``: its shape (the first dims of one with many, ``more_dims`` a checksum of
    the rest, 0 for none); ``sizes``: ``sizes=`` as given (None: not given; its first
    entries when it has more than the axis has ranks, ``sizes_more`` the count of the rest)."""

    call: str
    op: str
    src: Form
    dst: Form
    src_dim: int | None
    dtype: str
    shape: tuple[int, ...]
    more_dims: int = 0
    sizes: tuple[int, ...] | None = None
    sizes_more: int = 0

    def held(self) -> str:
        dims = ", ".join(str(d) for d in self.shape) + (", ..." if self.more_dims else "")
        return f"{self.dtype}[{dims}]"

    def sizes_text(self) -> str:
        if self.sizes is None:
            return "no sizes="
        more = f" and {self.sizes_more} more entries" if self.sizes_more else ""
        return f"sizes={list(self.sizes)}{more}"


def free_dim(op: str, src: Form, dst: Form, src_dim: int | None, uneven: bool) -> int | None:
    """The one dim of the input whose length may differ from rank to rank at ``op`` (None:
    every dim agrees): the gathered dim of ``all_gather(S(i), ...)`` given ``sizes=`` (and the
    padded dim of ``convert(S(i), P)``, whose ``sizes=`` the ranks compare), dim 0
    of ``all_to_all(V, V)`` given ``sizes=`` (each rank sends its own rows).  A pending sum
    (all_reduce, reduce_scatter) has its full shape on every rank, and an even gather or
    all_to_all cuts and joins equal blocks."""
    if not uneven:
        return None
    if (op == "all_gather" or op == "convert") and src == "S":
        return src_dim  # (convert(S(i), P) pads the uneven shard: no comms, the list agrees)
    if op == "all_to_all" and src == "V" and dst == "V":
        return 0
    return None


def _rank_words(ks: Sequence[int], ranks: Sequence[int]) -> str:
    """``rank 0``, ``ranks 1 and 3``: global ranks, with the index on the axis where it differs."""
    words = [str(ranks[k]) if ranks[k] == k else f"{ranks[k]} (index {k} on the axis)" for k in ks]
    if len(words) == 1:
        return f"rank {words[0]}"
    return "ranks " + ", ".join(words[:-1]) + " and " + words[-1]


def _per_value(values: Sequence[object], ranks: Sequence[int], verb: str,
               shown: Sequence[str] | None = None) -> str:
    """``rank 0 holds float16[4], rank 1 holds bfloat16[4]``: the ranks grouped by value,
    in the order of the first rank of each value."""
    groups: dict[object, list[int]] = {}
    for k, v in enumerate(values):
        groups.setdefault(v, []).append(k)
    texts = shown if shown is not None else [str(v) for v in values]
    parts = []
    for ks in groups.values():
        many = len(ks) > 1
        parts.append(f"{_rank_words(ks, ranks)} {verb if not many else _plural(verb)} {texts[ks[0]]}")
    return ", ".join(parts)


def _plural(verb: str) -> str:
    return {"holds": "hold", "calls": "call", "passes": "pass"}[verb]


def _most_common(values: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda v: (counts[v], -values.index(v)))


def disagreement(calls: Sequence[RankCall], ranks: Sequence[int], axis: str,
                 me: int) -> str | None:
    """The check mode's message when the ranks of ``axis`` (``calls[k]``: the rank of index
    ``k``, global rank ``ranks[k]``; this rank is index ``me``) disagree on a collective; None
    when they agree.  Every rank computes it from the same rows, so every rank raises (the
    same message but for the sizes= list, which names this rank's and another's).  The first
    field that differs is named: the call, the dtype, whether ``sizes=`` is given, the shape
    (outside :func:`free_dim`), the ``sizes=`` list (all_gather, reduce_scatter: one list
    for every rank; all_to_all's are each rank's own), a shard against its ``sizes=`` entry."""
    first = calls[0]
    where = f"{first.call}: the ranks of axis {axis!r}"
    same = "every rank of the axis must"
    if any(c.call != first.call for c in calls):
        return (f"the ranks of axis {axis!r} make different collective calls here: "
                f"{_per_value([c.call for c in calls], ranks, 'calls')}; {same} make the same "
                f"call at the same point of the program (a branch on the rank, or on a value "
                f"that differs by rank, took another path), else the ranks exchange mismatched "
                f"buffers: garbage, an abort of every gloo rank, or a wait until the timeout")
    dtypes = [c.dtype for c in calls]
    if any(d != dtypes[0] for d in dtypes):
        common = _most_common(dtypes)
        return (f"{where} disagree on the dtype: "
                f"{_per_value(dtypes, ranks, 'holds', [c.held() for c in calls])}; {same} pass "
                f"the same dtype (the collective moves raw elements: mixed dtypes give garbage, "
                f"and gloo aborts every rank when their element sizes differ); cast to one "
                f"dtype first on every rank (x.to(torch.{common}))")
    given = [c.sizes is not None for c in calls]
    if any(g != given[0] for g in given):
        return (f"{where} disagree on sizes=: "
                f"{_per_value(given, ranks, 'passes', ['sizes=' if g else 'none' for g in given])}"
                f"; {same} pass sizes= or none (the message sizes then differ: gloo aborts every "
                f"rank, NCCL hangs or corrupts)")
    free = free_dim(first.op, first.src, first.dst, first.src_dim, given[0])
    shapes = [(c.shape, c.more_dims) for c in calls]
    ndims = {len(s) for s, _ in shapes}
    if free is not None and len(ndims) == 1 and free < len(first.shape):
        keyed: list[object] = [(s[:free] + s[free + 1:], m) for s, m in shapes]
    else:
        keyed = list(shapes)
        free = None
    if any(k != keyed[0] for k in keyed):
        except_dim = (f" except on dim {free}, the uneven dim of sizes=" if free is not None
                      else "")
        return (f"{where} disagree on the shape: "
                f"{_per_value([c.held() for c in calls], ranks, 'holds')}; {same} pass the same "
                f"shape{except_dim} (the ranks cut and join equal blocks: gloo aborts every rank "
                f"when the message sizes differ, and equal sizes of different shapes give "
                f"garbage), or a rank skipped a collective the others issued (e.g. a parameter "
                f"without a gradient on one rank, its all_reduce skipped by `if p.grad is not "
                f"None`), and this call pairs different tensors: every rank must issue the same "
                f"collectives in the same order{_uneven_fix(first, calls)}")
    if given[0] and first.op != "all_to_all":
        lists = [(c.sizes, c.sizes_more) for c in calls]
        other = next((k for k in range(len(calls)) if lists[k] != lists[me]), None)
        if other is not None:
            return (f"{first.call}: sizes= differs from rank to rank on axis {axis!r}: this rank "
                    f"(index {me} on the axis, global rank {ranks[me]}) passed "
                    f"{calls[me].sizes_text()}, index {other} (global rank {ranks[other]}) passed "
                    f"{calls[other].sizes_text()}; sizes= is the same list on every rank of the "
                    f"axis (entry k the length of dim i on the rank of index k), else the ranks "
                    f"cut and join the blocks at different offsets (wrong shards, no error "
                    f"outside the check mode)")
        sizes = first.sizes or ()
        if free is not None and len(sizes) == len(calls) and not first.sizes_more:
            for k, c in enumerate(calls):
                if c.shape[free] != sizes[k]:
                    return (f"{first.call}: on axis {axis!r}, sizes={list(sizes)} gives the "
                            f"rank of index {k} {sizes[k]} on dim {free}, but "
                            f"{_rank_words([k], ranks)} holds {c.held()} ({c.shape[free]} on dim "
                            f"{free}); entry k of sizes= is the length of dim {free} on the "
                            f"rank of index k")
    return None


def _uneven_fix(first: RankCall, calls: Sequence[RankCall]) -> str:
    """The fix of shapes that differ only on the dim an uneven call lets differ."""
    shapes = [c.shape for c in calls]
    if first.sizes is not None or len({len(s) for s in shapes}) != 1 or any(
            c.more_dims != first.more_dims for c in calls):
        return ""
    free = free_dim(first.op, first.src, first.dst, first.src_dim, True)
    if free is None or free >= len(first.shape):
        return ""
    if any(s[:free] + s[free + 1:] != first.shape[:free] + first.shape[free + 1:] for s in shapes):
        return ""
    if first.op == "all_gather":
        return (f"; for uneven shards pass sizes={[s[free] for s in shapes]} (each rank's "
                f"length of dim {free}, the same list on every rank)")
    return ("; for uneven blocks pass sizes= (the rows of dim 0 this rank sends to each rank "
            "of the axis; the rows it receives are exchanged, or given as out_sizes=)")


# --------------------------------------------------------------------------------------
# Collectives under a rank-dependent condition (spmd-divergent-collective): ``if
# dist.get_rank() == 0: full = spmd.all_gather(w, "tp", ...)`` runs on rank 0 only; the other
# ranks of "tp" never join, and the job hangs (or gloo aborts).  The plugin reads the source
# (which axes a condition varies on, the rank queries it derives from: its rank_index); the
# rule here decides from axes and texts alone.

# torch.distributed collectives that take no typed tensor (or only lists / objects): the rule
# covers them besides RAW_COLLECTIVES (point-to-point send/recv are rank-conditional by nature)
DIVERGENCE_ONLY_COLLECTIVES = frozenset(
    """barrier monitored_barrier gather scatter all_gather_object gather_object
    broadcast_object_list scatter_object_list""".split()
)
# Megatron's parallel-state getters (``parallel_state.get_tensor_model_parallel_rank()``,
# ``mpu.get_data_parallel_group()``, ``..._world_size()``): the part of the name between
# ``get_`` and ``_rank`` / ``_group`` / ``_world_size``, and the mesh axis the project names it
# (docs/megatron.md: the tensor-parallel axis is "tp"; spmd-mypy migrate's default)
MEGATRON_PARALLEL_AXES: dict[str, str] = {
    "tensor_model_parallel": "tp",
    "data_parallel": "dp",
    "pipeline_model_parallel": "pp",
    "context_parallel": "cp",
    "expert_model_parallel": "ep",
}
# how the fix names a hoisted collective's result when the code does not name it
_RESULT_NAMES = {"all_reduce": "reduced", "all_gather": "gathered", "reduce_scatter": "scattered",
                 "all_to_all": "exchanged", "redistribute": "redistributed"}


def hoist_name(op: str, bound: str | None) -> str:
    """The name the fix binds a hoisted collective's result to: the code's own (``full =
    spmd.all_gather(...)``), else one for the op (``gathered``)."""
    return bound or _RESULT_NAMES.get(op, "out")


def communicates(op: str, src: LocalType | None, dst: LocalType | None) -> bool:
    """Whether the typed ``op`` (``src`` -> ``dst``) issues a collective forward: the four
    collectives always, ``redistribute`` when its route is one of them (``R -> S(0)`` is a
    local chunk), ``convert`` and ``reinterpret`` never."""
    if op in COLLECTIVES:
        return True
    if op == "redistribute" and src is not None and dst is not None:
        r = route(src, dst)
        return r is not None and r[0] in COLLECTIVES
    return False


@dataclass(frozen=True)
class RankCondition:
    """A condition a collective runs under, as the plugin read it from the source.

    ``axes``: the mesh axes its value differs on (every mesh axis for ``dist.get_rank()``);
    ``written``: the condition as written in its statement (``if dist.get_rank() == 0:``,
    ``if r != 0: return``, ``... if r == 0 else ...``); ``line``: its line; ``before``: the
    line the fix puts after the hoisted collective (the statement it goes before, as written:
    ``if dist.get_rank() == 0:``)."""

    axes: tuple[str, ...]
    written: str
    line: int
    before: str
    # a condition that reads a tensor's value (``if r.abs().max() < tol: break``): the axes
    # ``axes`` has from that value (not from a rank query), the operand read as written and
    # its type as users write it (``r.abs().max()``, ``Tensor[V["tp"]]``), its local type on
    # each of those axes as a ``src=`` (``(("tp", "V"),)``), and the condition's statement as
    # code (``if r.abs().max() < tol: break``), which the fix rewrites
    value_axes: tuple[str, ...] = ()
    reads: tuple[str, str] | None = None
    reads_src: tuple[tuple[str, str], ...] = ()
    code: str = ""
    # an exit of a loop the collective runs in (``if c: break`` after it in the body): the
    # ranks that take it leave, the others run the collective again
    loop: bool = False
    # the value read may carry a gradient (not under torch.no_grad(), not detached): the
    # fix's max all_reduce, which has none, takes it ``.detach()``ed (spmd-no-grad)
    detach: bool = False


def agreed_condition(code: str, operand: str, axes: Sequence[str],
                     srcs: Sequence[tuple[str, str]], detach: bool = False) -> str | None:
    """``code`` (a condition's statement) with ``operand`` (a value differing between the
    ranks of ``axes``) replaced by its maximum over them, the same on every rank
    (``spmd.all_reduce(x, "tp", src=V, dst=R, op="max")``); None when ``code`` does not show
    ``operand`` as written."""
    if not operand or operand not in code:
        return None
    return code.replace(operand, agreed_value(operand, axes, srcs, detach), 1)


def agreed_value(operand: str, axes: Sequence[str], srcs: Sequence[tuple[str, str]],
                 detach: bool = False) -> str:
    """``operand``'s maximum over ``axes``: ``spmd.all_reduce(x, "tp", src=V, dst=R,
    op="max")`` (``src``: its local type there, V where the axes differ); ``detach``: the
    value may carry a gradient, which a max all-reduce has none of (``x.detach()``: the
    condition needs none; spmd-no-grad otherwise)."""
    kinds = {src for a, src in srcs if a in axes}
    src = kinds.pop() if len(kinds) == 1 else "V"
    x = f"{receiver(operand)}.detach()" if detach else operand
    return f'spmd.all_reduce({x}, {format_axes(list(axes))}, src={src}, dst=R, op="max")'



def divergent_collective_error(call: str, op: str, axes: Sequence[str],
                               conditions: Sequence[RankCondition], *, over: str | None = None,
                               result: str | None = None, returns: bool = True,
                               inner: tuple[str, int] | None = None) -> SpmdError | None:
    """The collective ``call`` (``op``: its typed or raw name) over the mesh ``axes`` runs
    under ``conditions`` (outermost first): an error when one of them differs between the
    ranks of one of ``axes`` (the first such), None when each varies only on other axes (``if
    pp_rank == last: all_reduce(loss, "tp", ...)``: every tp rank of that stage agrees).
    ``over``: how the message names the ranks (default: the axes); ``result``: the name the
    code binds the result to (None: the fix names it); ``returns``: whether the result is a
    value to use (a barrier's or an in-place raw collective's is not).  ``inner``: the
    collective as written and its line when ``call`` is a call of a function of the module
    whose body runs it (``sync_stats(x)`` under ``if rank == 0:``): the fix hoists ``call``.
    A condition that varies on an axis by the value it reads (``c.reads``: ``if
    r.abs().max() < tol: break``, r V on "tp") gets the fix that makes that value the same
    on every rank (:func:`agreed_condition`); a loop's exit after the collective (``c.loop``)
    says the ranks that stayed run it again."""
    for c in conditions:
        shared = [a for a in axes if a in c.axes]
        if not shared:
            continue
        where = over or f"over {axis_words(axes)}"
        name = hoist_name(op, result)
        hoisted = f"{name} = {call}" if returns and result != "" else call
        use = (f", and use {name} in its place inside the branch"
               if returns and result is None and c.before.find(f"{name} if ") != 0 else "")
        what, run = f"{call} ({where})", "collective"
        if inner is not None:
            what, run = f"{call}, whose body runs {inner[0]} (line {inner[1]}, {where}),", "call"
        if c.loop:
            runs = (f"{what} runs again in the loop's next iteration only on the ranks where "
                    f"{c.written} (line {c.line}) did not leave the loop")
        else:
            runs = f"{what} runs only on the ranks where {c.written} (line {c.line}) lets it run"
        if c.reads is not None and all(a in c.value_axes for a in shared):
            text, typ = c.reads
            fixed = agreed_condition(c.code, text, shared, c.reads_src, c.detach)
            fix = (f"`{fixed}`" if fixed is not None else
                   f"compute {text} as `{agreed_value(text, shared, c.reads_src, c.detach)}`")
            fix += f" (or test a value all-reduced over {axis_words(shared)}, such as a norm)"
            return SpmdError(
                "spmd-divergent-collective",
                f"{runs}, and that condition reads {text} ({typ}), whose value differs between "
                f"the ranks of {axis_words(shared)}: the other ranks never reach the "
                f"collective, so they never join it and the job hangs (gloo aborts or the "
                f"timeout fires). Make the condition's value the same on every rank of "
                f"{axis_words(shared)} first: {fix}",
            )
        if c.loop:
            return SpmdError(
                "spmd-divergent-collective",
                f"{runs}, and that condition differs between the ranks of {axis_words(shared)}: "
                f"the ranks that left never join it again and the job hangs (gloo aborts or "
                f"the timeout fires). Leave the loop on every rank of {axis_words(shared)} at "
                f"the same iteration: decide `{c.code}` from a value they all agree on",
            )
        return SpmdError(
            "spmd-divergent-collective",
            f"{what} runs only on the ranks where {c.written} (line {c.line}) lets "
            f"it run, and that condition differs between the ranks of {axis_words(shared)}: "
            f"the other ranks never reach the collective, so they never join it and the job "
            f"hangs (gloo aborts or the timeout fires). Run the {run} on every rank "
            f"before the branch and keep only the rank-dependent use inside it: `{hoisted}` "
            f"then `{c.before}`{use}",
        )
    return None
