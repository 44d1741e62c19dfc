"""The per-axis local SPMD types and their algebra.

Per mesh axis a tensor has one local SPMD type::

    type          forward meaning                                   gradient type
    R Replicate   same value on every rank; each rank's use separate   P
    I Invariant   same value; one logical computation (parameters)     I
    V Varying     a different value per rank                           V
    P Partial     the value is the pending sum over the axis' ranks    R
    S(i) Shard    V, and the global tensor concatenates dim i          S(i)

A whole tensor type (:class:`SpmdType`) maps mesh axis names to local types;
an axis the type does not mention is unknown (unchecked).

This module is pure: no mypy, no torch.  The mypy plugin and the runtime
checker both translate their own representation to and from these classes.
"""

from __future__ import annotations

import re

import enum
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence


class Kind(enum.Enum):
    """The four local SPMD types (Shard is V with a known dim)."""

    R = "R"
    I = "I"  # noqa: E741 - the name is the type system's
    V = "V"
    P = "P"

    def __repr__(self) -> str:
        return self.value


_KIND_ORDER = {Kind.R: 0, Kind.I: 1, Kind.V: 2, Kind.P: 3}

# R and I hold the same values on every rank; only the backward tells them apart (I's
# gradient is I, R's is P).  Where no gradient flows one stands for the other: an in-place
# op's target under no_grad (ops.check_inplace), a collective's src (collectives), what a
# custom autograd Function's forward and backward return (duality: they run without grad).
SAME_VALUES = frozenset({Kind.R, Kind.I})


def same_values(have: LocalType, want: LocalType) -> bool:
    """``have`` and ``want`` hold the same values (R and I): interchangeable without grad."""
    return have.kind is not want.kind and {have.kind, want.kind} <= SAME_VALUES


# The static checker does not know a tensor's rank.  Where a layout depends on it, it is
# worked out for every rank from 1 to RANKS (a rank above RANKS behaves as RANKS does,
# which holds while the dims written stay within -RANKS/2..RANKS/2).
RANKS = 8

ByRank = tuple[tuple[int, "int | None"], ...]


@dataclass(frozen=True)
class LocalType:
    """The type of a tensor on one mesh axis: R, I, V, P, or S(dim) (= V on dim).

    ``by_rank``: a Varying whose layout depends on the tensor's rank, which the static
    checker does not know: ``((rank, shard dim or None), ...)`` for the ranks the tensor
    can have, increasing, the last entry standing for every higher rank.  Only the
    static checker makes one (the check mode sees the rank)::

        x: S(0); softmax(x, dim=-1)     rank 1: dim -1 is the shard dim   ->  V
                                        rank 2 and up: dim 0 untouched    ->  S(0)
        = LocalType(V, by_rank=((1, None), (2, 0)))

    It acts as V in every rule; a claim ``S(j)`` on it is checked at the ranks ``S(j)``
    allows (:func:`shard_dims_match`), so declaring the result ``S(1)`` is an error.
    """

    kind: Kind
    dim: int | None = None  # the shard dim; only with Kind.V
    by_rank: ByRank | None = None

    def __post_init__(self) -> None:
        if (self.dim is not None or self.by_rank is not None) and self.kind is not Kind.V:
            raise ValueError("only a Varying type can carry a shard dim")
        if self.dim is not None and self.by_rank is not None:
            raise ValueError("a rank-dependent layout has no single shard dim")

    @property
    def is_shard(self) -> bool:
        return self.dim is not None

    def forget_dim(self) -> LocalType:
        return VARYING if (self.dim is not None or self.by_rank is not None) else self

    def at_rank(self, rank: int) -> tuple[bool, int | None]:
        """(whether a tensor of this type can have ``rank``, its shard dim there)."""
        if self.by_rank is not None:
            for r, d in self.by_rank:
                if r == rank:
                    return True, d
            last_r, last_d = self.by_rank[-1]
            return (True, last_d) if rank > last_r else (False, None)
        if self.dim is not None:
            return -rank <= self.dim < rank, self.dim
        return True, None

    def at_ndim(self, ndim: int) -> LocalType:
        """The layout of a tensor of ``ndim`` dims: a negative shard dim counted from the
        front (``S(-1)`` of a 3-d tensor is ``S(2)``, the same layout); a rank-dependent
        layout resolved.  For the check mode, which sees ranks."""
        if self.by_rank is not None:
            ok, d = self.at_rank(ndim)
            return (VARYING if d is None else LocalType(Kind.V, d)).at_ndim(ndim) if ok else self
        if self.dim is not None and -ndim <= self.dim < 0:
            return LocalType(Kind.V, self.dim + ndim)
        return self

    def at_high_ranks(self) -> LocalType:
        """The layout at the highest ranks (a rank-dependent layout's last entry): what a
        fix names as ``src=``."""
        if self.by_rank is None:
            return self
        d = self.by_rank[-1][1]
        return VARYING if d is None else LocalType(Kind.V, d)

    def describe(self) -> str:
        """How messages name the type: ``S(0)``; a rank-dependent layout
        ``V (S(0) at rank >= 2, V at rank 1)``."""
        return str(self) if self.by_rank is None else f"V ({self.layouts()})"

    def layouts(self) -> str:
        """A rank-dependent layout in words: ``S(0) at rank >= 2, V at rank 1``."""
        if self.by_rank is None:
            return str(self)
        parts: dict[int | None, list[int]] = {}
        for r, d in self.by_rank:
            parts.setdefault(d, []).append(r)
        last = self.by_rank[-1][0]

        def ranks(rs: list[int]) -> str:
            if rs[-1] == last:
                return f"rank >= {rs[0]}" if len(rs) == last - rs[0] + 1 else \
                    "rank " + ", ".join(map(str, rs[:-1])) + f" or >= {last}"
            return "rank " + ", ".join(map(str, rs))

        order = sorted(parts.items(), key=lambda kv: -kv[1][-1])
        return ", ".join(f"{'V' if d is None else f'S({d})'} at {ranks(rs)}" for d, rs in order)

    def __str__(self) -> str:
        return f"S({self.dim})" if self.dim is not None else self.kind.value

    __repr__ = __str__


REPLICATE = LocalType(Kind.R)
INVARIANT = LocalType(Kind.I)
VARYING = LocalType(Kind.V)
PARTIAL = LocalType(Kind.P)


def shard(dim: int) -> LocalType:
    """``S(dim)``: Varying, and the locals concatenate on ``dim``."""
    return LocalType(Kind.V, dim)


def dual(t: LocalType) -> LocalType:
    """The gradient's type: R <-> P, I <-> I, V <-> V, S(i) <-> S(i)."""
    if t.kind is Kind.R:
        return PARTIAL
    if t.kind is Kind.P:
        return REPLICATE
    return t


def shard_dims_match(a: LocalType, b: LocalType, ndim: int | None = None) -> bool:
    """Whether a tensor of type ``a`` may be used where ``b`` is claimed (``src=b``, a
    declared argument, return or variable type).  ``ndim``: the tensor's rank, where the
    adapter knows it (the check mode): both compared at that rank (:meth:`LocalType.at_ndim`:
    ``S(-1)`` and ``S(0)`` of a 1-d tensor are one layout).

    V and S(i) are both Varying: a V of unknown dim may be claimed as S(i)
    (the user tells which dim), an S(i) may be claimed as V, but S(i) is not S(j).
    A rank-dependent layout (``a.by_rank``) takes the claim S(j) when at some rank that
    both allow it is V or S(j)::

        a = S(0) at rank >= 2 (V at rank 1)     claim S(0): yes    claim V: yes
                                                claim S(1): no (S(1) needs rank >= 2)
    """
    if a.kind is not b.kind:
        return False
    if ndim is not None:
        a, b = a.at_ndim(ndim), b.at_ndim(ndim)
    if a.by_rank is not None and b.dim is not None:
        top = max(a.by_rank[-1][0], b.dim + 1, -b.dim)
        for rank in range(1, top + 1):
            possible, d = a.at_rank(rank)
            if possible and -rank <= b.dim < rank and (d is None or d == b.dim):
                return True
        return False
    if a.dim is None or b.dim is None:
        return True
    return a.dim == b.dim


def mismatched_axes(have: SpmdType, want: SpmdType, gradient_free: bool = False,
                    ndim: int | None = None) -> list[tuple[str, LocalType, LocalType]]:
    """(axis, have's, want's) for every axis both types know on which a value of type
    ``have`` may not stand where ``want`` is declared (:func:`shard_dims_match`, at the
    value's rank ``ndim`` where known; ``gradient_free``: no gradient flows through the
    value, so R and I agree, :func:`same_values`)."""
    out = []
    for axis, w in want.axes:
        h = have.get(axis)
        if h is not None and not shard_dims_match(h, w, ndim) and not (
                gradient_free and same_values(h, w)):
            out.append((axis, h, w))
    return out


def shard_dims_differ(a: LocalType, b: LocalType, rank: int | None = None) -> bool:
    """Whether a tensor laid out ``a`` is sharded on another dim than ``b`` says at every
    rank a tensor of both can have (``rank``: the one rank it has, where the adapter knows
    it).  A V of unknown dim differs from nothing; ``S(-1)`` and ``S(1)`` are one dim at
    rank 2, so statically they do not differ::

        S(1) vs S(0)                              differ
        S(-2) vs S(-1)                            differ
        S(1) vs S(-1)                             no (rank 2);  with rank 3: differ
        V (S(-2) at rank 2, S(-1) at rank >= 3) vs S(-1)     no (rank >= 3)
    """
    if a.kind is not Kind.V or b.kind is not Kind.V or (a.dim is None and a.by_rank is None) \
            or (b.dim is None and b.by_rank is None):
        return False
    if rank is None:
        top = RANKS + 1
        for t in (a, b):
            top = max(top, abs(t.dim) + 1 if t.dim is not None else 0,
                      t.by_rank[-1][0] + 1 if t.by_rank is not None else 0)
        ranks: Iterable[int] = range(1, top + 1)
    else:
        ranks = (rank,)
    seen = False
    for r in ranks:
        pa, da = a.at_rank(r)
        pb, db = b.at_rank(r)
        if not (pa and pb):
            continue
        if da is None or db is None or da % r == db % r:
            return False
        seen = True
    return seen


def from_ranks(layouts: Mapping[int, int | None]) -> LocalType:
    """The Varying type whose shard dim at each possible rank is ``layouts[rank]`` (the
    ranks not listed are impossible; the highest listed stands for every higher rank):
    S(d) when every rank agrees on d, V when none has a dim, else rank-dependent."""
    if not layouts:
        return VARYING
    dims = set(layouts.values())
    if len(dims) == 1:
        (d,) = dims
        return LocalType(Kind.V, d)
    table = sorted(layouts.items())
    while len(table) > 1 and table[-2][1] == table[-1][1]:
        table.pop()  # the last entry stands for every higher rank
    return LocalType(Kind.V, by_rank=tuple(table))


def from_ranks_signed(layouts: Mapping[int, int | None], negative: bool) -> LocalType:
    """:func:`from_ranks` with each dim written counted from the front or the back,
    whichever stays the same across more ranks (counted from the back on a tie when
    ``negative``: the operand's own way)."""
    neg = {r: (None if d is None else d - r) for r, d in layouts.items()}
    n_pos = len(set(layouts.values()) - {None})
    n_neg = len(set(neg.values()) - {None})
    return from_ranks(neg if n_neg < n_pos or (n_neg == n_pos and negative) else layouts)


def encode_by_rank(by_rank: ByRank) -> str:
    """The table as text, for a checker that stores types as literals: ``"1:-,2:0"``."""
    return ",".join(f"{r}:{'-' if d is None else d}" for r, d in by_rank)


def decode_by_rank(text: str) -> LocalType | None:
    """The inverse of :func:`encode_by_rank`; None for a text it did not write."""
    try:
        table = tuple((int(r), None if d == "-" else int(d))
                      for r, d in (item.split(":") for item in text.split(",")))
    except ValueError:
        return None
    if not table or any(r < 1 for r, _ in table) or list(table) != sorted(set(table)):
        return None
    return LocalType(Kind.V, by_rank=table)


@dataclass(frozen=True)
class SpmdType:
    """A tensor's type: a local type per mesh axis (axes not listed are unknown).

    ``axes`` is kept sorted by axis name so that equal types compare and hash
    equal whatever order the annotation listed them in.
    """

    axes: tuple[tuple[str, LocalType], ...] = ()
    # Global SPMD: the partition spec, one entry per tensor dim, each the mesh axes
    # sharding that dim outermost first (``PS[("dp", "tp"), None]``); None in local SPMD.
    spec: tuple[tuple[str, ...], ...] | None = None
    # Axes left unknown by an error (sorted; never listed in ``axes``): an op on such a
    # value is unknown there too, whatever its other operands are, so one mistake is
    # reported once.  An axis merely not annotated is skipped by the rule instead (gradual),
    # so after ``y = gelu(p)`` (an error) ``y + r`` would be R again and a later
    # ``all_reduce(y + r, src=P, ...)`` a second, follow-on error.
    failed: tuple[str, ...] = ()

    def __hash__(self) -> int:
        # The dataclass hash of the same fields, computed once: types key the checker's
        # caches, and hashing LocalType/Kind runs Python code on every lookup.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.axes, self.spec, self.failed))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, object]:
        # never carry the cached hash into another process (str hashes differ there)
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @staticmethod
    def of(
        mapping: Mapping[str, LocalType] | Iterable[tuple[str, LocalType]],
        spec: tuple[tuple[str, ...], ...] | None = None,
        failed: Iterable[str] = (),
    ) -> SpmdType:
        items = dict(mapping.items() if isinstance(mapping, Mapping) else mapping)
        return SpmdType(tuple(sorted(items.items())), spec,
                        tuple(sorted({a for a in failed if a not in items})) if failed else ())

    def get(self, axis: str) -> LocalType | None:
        for name, t in self.axes:
            if name == axis:
                return t
        return None

    def replace(self, axis: str, t: LocalType | None) -> SpmdType:
        d = dict(self.axes)
        if t is None:
            d.pop(axis, None)
        else:
            d[axis] = t
        spec = self.spec
        if spec is not None and (t is None or t.kind is not Kind.V):
            spec = tuple(tuple(a for a in entry if a != axis) for entry in spec)
        return SpmdType.of(d, spec, self.failed)

    def at_ndim(self, ndim: int) -> SpmdType:
        """Each axis's layout for a tensor of ``ndim`` dims (:meth:`LocalType.at_ndim`)."""
        if all(t.dim is None and t.by_rank is None for _, t in self.axes):
            return self
        return SpmdType(tuple((a, t.at_ndim(ndim)) for a, t in self.axes), self.spec, self.failed)

    def written_as(self, declared: SpmdType, ndim: int) -> SpmdType:
        """The type at rank ``ndim`` (:meth:`at_ndim`), each shard dim that is ``declared``'s
        on its axis written as ``declared`` writes it (``S(2)`` of a 3-d tensor declared
        ``S(-1)`` is ``S(-1)``): the check mode compares at the rank, but its messages print
        a declared layout as the user wrote it, as the static checker does."""
        out = []
        for a, t in self.at_ndim(ndim).axes:
            want = declared.get(a)
            if (want is not None and want.dim is not None and t.dim is not None
                    and t.dim != want.dim and t.dim == want.at_ndim(ndim).dim):
                t = LocalType(Kind.V, want.dim)
            out.append((a, t))
        return SpmdType(tuple(out), self.spec, self.failed)

    def forget_dims(self) -> SpmdType:
        """The same type with every shard dim forgotten (S(i) -> V): where a value's blocks lie
        in a tensor of another rank is not known."""
        if all(t.dim is None and t.by_rank is None for _, t in self.axes):
            return self
        return SpmdType(tuple((a, t.forget_dim()) for a, t in self.axes), self.spec, self.failed)

    def as_printed(self) -> SpmdType:
        """The same type with each rank-dependent layout forgotten (it prints as V, and no
        annotation can write it): the type as users read it."""
        if all(t.by_rank is None for _, t in self.axes):
            return self
        return SpmdType(tuple((a, t.forget_dim() if t.by_rank is not None else t)
                              for a, t in self.axes), self.spec, self.failed)

    def local(self) -> SpmdType:
        """The same type with the partition spec forgotten (local SPMD)."""
        return SpmdType(self.axes, None, self.failed) if self.spec is not None else self

    def as_dict(self) -> dict[str, LocalType]:
        return dict(self.axes)

    def mutated_by(self, result: SpmdType) -> SpmdType:
        """The type of a tensor an in-place op (or ``out=``) wrote ``result`` into, once the
        op is allowed (``ops.check_inplace``): the tensor keeps its own type (``x += b`` on
        an S(0) ``x`` stays S(0); an I gradient scaled by an R under no_grad stays I); the
        axes it leaves unknown take the result's."""
        if not result:
            return self
        if not self:
            return result
        d = result.as_dict()
        d.update(self.as_dict())
        return SpmdType.of(d, self.spec)

    def __iter__(self) -> Iterator[tuple[str, LocalType]]:
        return iter(self.axes)

    def __bool__(self) -> bool:
        return bool(self.axes)

    def dual(self) -> SpmdType:
        return SpmdType(tuple((a, dual(t)) for a, t in self.axes), self.spec, self.failed)

    def format(self, axis_order: Iterable[str] | None = None) -> str:
        return format_type(self, axis_order)

    def __str__(self) -> str:
        return format_type(self)


UNTYPED = SpmdType()


def stated_rank(*types: SpmdType) -> int | None:
    """The rank the first global type of ``types`` states (its spec's length); None where
    none is global.  A local value met at a global type is read at that rank::

        S[-1, "tp"]   where PS[None, "tp"] is stated      S(1)  (rank 2)
        S[-1, "tp"]   where PS[None, None, "tp"]          S(2)  (rank 3)
    """
    for t in types:
        if t.spec is not None:
            return len(t.spec)
    return None


def at_stated_rank(have: LocalType, rank: int | None, stater: str = "the spec") -> str:
    """`` (S(1) at the rank 2 the spec states)``: a layout written from the back or
    rank-dependent, read at the rank ``stater`` (a global type's spec, a ``src``) states;
    `` (beyond the rank 2 the spec states)`` for a dim no tensor of that rank has; "" where
    the layout reads as written."""
    if rank is None or (have.dim is None and have.by_rank is None):
        return ""
    possible, d = have.at_rank(rank)
    if not possible:
        return f" (beyond the rank {rank} {stater} states)"
    if have.dim is not None and have.dim >= 0:
        return ""
    return f" ({'V' if d is None else f'S({d % rank})'} at the rank {rank} {stater} states)"


def _quote(axis: str) -> str:
    return '"' + axis + '"'


def format_entries(t: SpmdType, axis_order: Iterable[str] | None = None,
                   like: SpmdType | None = None) -> list[str]:
    """The entries of a type as users write them, grouped by local type.

    ``{tp: R, dp: V}`` prints ``R["tp"], V["dp"]``; ``{dp: R, cp: R}`` prints
    ``R["dp", "cp"]`` (axes in mesh order when ``axis_order`` is given).  ``like``: the
    entries in the order ``like``'s axes print in (a type printed beside it).
    """
    if like is not None and like.axes and like.spec is None and t.spec is None:
        seen = [a for e in format_entries(like, axis_order) for a in _entry_axes(e)]
        at = {a: i for i, a in enumerate(seen)}
        plain = format_entries(t, axis_order)
        return sorted(plain, key=lambda e: min((at.get(a, len(at)) for a in _entry_axes(e)),
                                               default=len(at)))
    order = {a: i for i, a in enumerate(axis_order or ())}
    groups: dict[LocalType, list[str]] = {}
    in_spec = {a for entry in t.spec or () for a in entry}
    for axis, lt in t.axes:
        if axis not in in_spec:
            groups.setdefault(lt if lt.by_rank is None else VARYING, []).append(axis)

    def key(lt: LocalType) -> tuple[int, int]:
        return (_KIND_ORDER[lt.kind] + (1 if lt.dim is not None else 0) * 4, lt.dim or 0)

    out = []
    if t.spec is not None:
        out.append(format_spec(t.spec))
    for lt in sorted(groups, key=key):
        axes = sorted(groups[lt], key=lambda a: (order.get(a, len(order)), a))
        names = ", ".join(_quote(a) for a in axes)
        if lt.dim is not None:
            out.append(f"S[{lt.dim}, {names}]")
        else:
            out.append(f"{lt.kind.value}[{names}]")
    return out


def _entry_axes(entry: str) -> list[str]:
    """The axis names of one printed entry (``R["dp", "cp"]``: dp, cp)."""
    return re.findall(r'"([^"]*)"', entry)


def format_spec(spec: tuple[tuple[str, ...], ...]) -> str:
    """``PS[None, "tp"]``, ``PS[("dp", "tp"), None]``."""

    def entry(axes: tuple[str, ...]) -> str:
        if not axes:
            return "None"
        if len(axes) == 1:
            return _quote(axes[0])
        return "(" + ", ".join(_quote(a) for a in axes) + ")"

    if len(spec) == 1 and len(spec[0]) > 1:
        # PS[("dp", "tp")] is PS["dp", "tp"] to Python (a subscript of a tuple): the comma
        # keeps a rank-1 spec sharded by several axes rank 1
        return "PS[" + entry(spec[0]) + ",]"
    return "PS[" + ", ".join(entry(e) for e in spec) + "]" if spec else "PS[()]"


def format_type(t: SpmdType, axis_order: Iterable[str] | None = None,
                like: SpmdType | None = None) -> str:
    """``Tensor[R["tp"], V["dp"]]``; an untyped tensor prints ``Tensor``.  ``like``: a type
    printed beside this one (``Tensor[R["dp"], I["tp"]] -> Tensor[V["dp"], I["tp"]]``): the
    entries follow the order its axes print in, so that both read in one order."""
    entries = format_entries(t, axis_order, like)
    return f"Tensor[{', '.join(entries)}]" if entries else "Tensor"


def format_types(a: SpmdType, b: SpmdType) -> tuple[str, str]:
    """Two types printed side by side, ``b``'s entries in the order ``a``'s axes print in."""
    return format_type(a), format_type(b, like=a)


def refines(have: SpmdType, want: SpmdType) -> bool:
    """Every value of type ``have`` is a value of type ``want``: the same local type on every
    axis, or a shard dim forgotten (``S(i)`` is V with a known dim)::

        S(0) -> V   yes (the dim forgotten)      V -> S(0)   no (a claim)
    """
    if have.spec is not None or want.spec is not None or have.failed or want.failed:
        return have == want
    if len(have.axes) != len(want.axes):
        return False
    for (a, h), (b, w) in zip(have.axes, want.axes):
        if a != b or not (h == w or (w == VARYING and h.kind is Kind.V)):
            return False
    return True


def refines_as_printed(have: SpmdType, want: SpmdType) -> bool:
    """``have`` refines ``want`` read as users see it (:meth:`SpmdType.as_printed`), where
    ``want`` has a rank-dependent layout :func:`refines` alone would not forget: a V value (of
    any layout) into a variable that prints V, its layout known by rank only::

        V -> V (S(1) at rank >= 2, V at rank 1)   yes     V -> S(1)   no (a claim)
    """
    printed = want.as_printed()
    return printed is not want and refines(have, printed)


def grad_type(t: SpmdType) -> SpmdType:
    """``spmd.grad_type(T)``: the gradient's type, the dual on every axis."""
    return t.dual()


def format_local(lt: LocalType) -> str:
    """How a src/dst argument is written: ``R``, ``I``, ``V``, ``P`` or ``S(0)``."""
    return str(lt)


def bare(text: str) -> str:
    """An operand's text where parentheses or a call already surround it: ``(p * lr)``
    becomes ``p * lr`` in ``(p * lr: Tensor[P["tp"]])`` and ``all_reduce(p * lr, ...)``.
    A tuple ``(a, b)`` and ``(yield x)`` keep their parentheses."""
    if not (text.startswith("(") and text.endswith(")")) or text.startswith("(yield"):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and i < len(text) - 1:
            return text  # (a) + (b): the first pair closes before the end
        if depth == 1 and ch == ",":
            return text
    return text[1:-1]


# How an adapter names each item of a list operand (``torch.cat(xs)``, a _foreach op's
# list): ``xs[k]``, k not a name of the code
LIST_ITEM = "[k]"


def each_item(text: str, call: str) -> str:
    """``call`` (a fix, ``all_reduce({}, "tp", src=P, dst=R)``) applied to the operand
    ``text``; to each item of a list operand ``xs[k]`` as the list's replacement,
    ``[all_reduce(t, "tp", src=P, dst=R) for t in xs]`` (a collective takes one tensor)."""
    if text.endswith(LIST_ITEM) and len(text) > len(LIST_ITEM):
        xs = bare(text[:-len(LIST_ITEM)])
        return f"[{call.format('t')} for t in {xs}] (in place of {xs})"
    return call.format(bare(text))


def trailing_group_start(text: str) -> int:
    """The index of the bracket opening the bracketed group ``text`` ends with (``x.f(a)[i]``:
    the ``[``; ``f(g(a))``: the first ``(``), -1 when the brackets do not balance."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            depth -= 1
            if depth == 0:
                return i
    return -1


def is_subscript(text: str) -> bool:
    """Whether an operand's text is a subscript, ``full[r * b:(r + 1) * b]``, ``xs[0]``,
    ``acts[<...>]`` (not a list display ``[a, b]``)."""
    text = bare(text)
    return text.endswith("]") and trailing_group_start(text) > 0


def receiver(text: str) -> str:
    """An operand's text before a method call: ``x``, ``h.float()``, ``w[0]`` as they are,
    an operator's ``a + b`` parenthesized (``(a + b).detach()``, never ``a + b.detach()``,
    which detaches ``b`` only)."""
    text = bare(text)
    depth = 0
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch in _OUTSIDE_A_PRIMARY:
            return f"({text})"
    return text


# Characters that, outside brackets, mean the text is not one primary (``a.b(c)[d]``): an
# operator, a keyword expression's space, a tuple's comma
_OUTSIDE_A_PRIMARY = frozenset(" +-*/%@<>=!&|^~,:")


def axis_words(axes: Iterable[str]) -> str:
    """Axes in a message's words: ``"dp"``, ``"dp" and "tp"``, ``"a", "b" and "c"``."""
    quoted = [_quote(a) for a in axes]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" and {quoted[-1]}"


def format_axis(axis: str | tuple[str, ...]) -> str:
    if isinstance(axis, tuple):
        return "(" + ", ".join(_quote(a) for a in axis) + ("," if len(axis) == 1 else "") + ")"
    return _quote(axis)


def format_axes(axes: Sequence[str]) -> str:
    """Axes as a collective's argument: ``"tp"`` for one, ``("dp", "tp")`` for several."""
    return format_axis(axes[0] if len(axes) == 1 else tuple(axes))


def repeated_axis_message(axes: tuple[str, ...]) -> str | None:
    """``the axes ("dp", "dp") name "dp" twice; name each axis once``, or None when no
    axis repeats (the static checker's spmd-axis error, the runtime's ValueError)."""
    seen: set[str] = set()
    for a in axes:
        if a in seen:
            n = axes.count(a)
            times = "twice" if n == 2 else f"{n} times"
            return f"the axes {format_axis(axes)} name {_quote(a)} {times}; name each axis once"
        seen.add(a)
    return None
