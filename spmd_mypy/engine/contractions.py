"""Where a contraction (einsum, matmul, linear, attention) puts a Shard(i) operand's dim
(local SPMD).

Each op is an einsum: every dim of every operand has a label, and the result's dims are
the output labels.  A Varying operand sharded on dim d (at the rank it has) is sharded on
that dim's label; the result is sharded on that label's place in the output::

    x: S(1)              einsum("bsh,hd->bsd", x, w)       ->  S(1)    (s: dim 1 of the result)
    x: S(1)              einsum("bsh,hd", x, w)            ->  S(2)    (implicit output: the
                                                                        labels used once,
                                                                        sorted: "bds")
    x: S(-2)             einsum("...sh,hd->...sd", x, w)   ->  S(-2)
    x: S(2)              einsum("bsh,hd->bsd", x, w)       ->  V       (h contracted: a
                                                                        per-rank partial sum)
    x: S(0), y: S(1)     einsum("bi,jb->bij", x, y)        ->  S(0)    (both on b)
    x: S(0), y: S(1)     einsum("bi,bj->bij", x, y)        ->  error   (on b and on j: a
                                                                        diagonal block,
                                                                        diagonal_block)
    x: S(0), w: R        einsum("bi,bj->bij", x, w)        ->  V       (w holds a whole b of
                                                                        the local size)
    x: S(0)              einsum("ii->i", x)                ->  V       (a diagonal)
    a: S(0), b: R        a.mm(b)                           ->  S(0)    ("nk,km->nm"; a @ b
                                                                        too, in check mode,
                                                                        seeing both 2-d)
    a: R, b: S(1)        a.mm(b)                           ->  S(1)
    a, b: S(0)           torch.bmm(a, b)                   ->  S(0)    ("bnk,bkm->bnm")
    a: S(0), b: R        torch.bmm(a, b)                   ->  V       (b holds a whole batch)
    x: S(1)              F.linear(x, w)                    ->  S(1) at rank >= 3
                                                                (dim 1 of a 2-d x: in_features)
    x: R, w: S(0)        F.linear(x, w), w 2-d             ->  S(-1)   (column parallel)
    q, k, v: S(1)        F.scaled_dot_product_attention(q, k, v)
                                                           ->  S(1)    (the heads of
                                                                        [N, H, L, E])
    q: S(-2); k, v: R    F.scaled_dot_product_attention(q, k, v)
                                                           ->  S(-2)   (the queries; V with
                                                                        is_causal: its mask
                                                                        counts each rank's
                                                                        queries from 0, which
                                                                        the op rule reports:
                                                                        ops._causal_queries_error)
    q, k, v: S(-2)       F.scaled_dot_product_attention(q, k, v)
                                                           ->  V       (each rank attends to
                                                                        its own keys only)
    v: S(-1); q, k: R    F.scaled_dot_product_attention(q, k, v)  ->  S(-1)
    a: S(0), b: R        torch.inner(a, b)                 ->  S(0) in check mode at a 2-d a
                                                                (V statically: a 1-d a has its
                                                                only dim summed)
    a: S(0), b: R        torch.tensordot(a, b, dims=([1], [1]))
                                                           ->  S(0)
    a, b: S(-1)          torch.linalg.vecdot(a, b, dim=-2) ->  S(-1)
    a, b: S(0)           torch.dot(a, b)                   ->  V, a sum over the shard
                                                                (:func:`partial_sum`: an error)

S(j) says the locals, concatenated on dim j, are the op applied to the global operands.
Operands sharded on one axis on two different labels that both stay in the output (a
sequence-parallel ``x: S(1)`` in ``F.linear(x, w)`` of a column-parallel ``w: S(0)``; ring
attention's first ``q @ k.transpose(-2, -1)`` of ``q, k: S(-2)``) give each rank one diagonal
block of the result: an error in both checkers (:func:`diagonal_block`; V until session 41);
one operand declared a plain V (``spmd.declare(k, Tensor[V["cp"]])``) says the block is meant.
The result keeps the shard label when:

- every Varying operand has a known dim, and all their dims are the same label, which
  each of them has once (``"ii->i"`` of a shard is not a block of the diagonal);
- no other operand (R, I, an untyped tensor) has that label: an R operand of the local
  size on it has no global meaning (``cat(x_r @ y)`` needs y's whole dim), as for
  elementwise ops; R, I and P operands never decide the dim.  An untyped operand (which
  may vary) makes the result plain V;
- the label is in the output (a contracted label is a per-rank partial sum: V, or
  ``out_partial_axes``);
- for attention, the label is not the queries' (``l``) when ``is_causal`` may be True.

Ellipsis dims broadcast right-aligned (:func:`parse_equation`): an operand sharded on one of
them is on that broadcast label, so an R operand whose ellipsis reaches that dim has it.

Ranks.  The check mode knows every operand's rank: one answer.  The static checker does not:
it works the answer out for every rank each operand can have and keeps it only where all
agree, folded per result rank (:func:`.types.from_ranks`: S(j), V, or a rank-dependent
layout).  The ranks enumerated are the op's documented shapes (:data:`_FORMS`): matmul's 1-d
operands and broadcast batch dims make every shard dim ambiguous (``a: S(-2)`` with a 1-d
``b`` gives S(-1); ``a: S(0)`` with a 3-d ``b`` gives S(1)), so a static ``a @ b`` stays V
(``mm`` and ``bmm`` take fixed ranks); ``linear``'s weight is 2-d or 1-d (a 1-d weight drops
the last dim: a negative dim of x, or a sharded weight, is then ambiguous) and its bias 1-d or
0-d; attention's q, k and v are ``(N, ..., H, L, E)``, one rank, at least 4 (its documented
shapes; torch also runs 2-d and 3-d ones, where dim 1 is the sequence, not the heads), and a
mask any rank.  The check mode reads any shapes torch takes.  Of these only the attention
assumption is ever wrong, and then only too specific: an attention result is V or S at q's
own dim (or v's last) at every rank, so at a 3-d call the static S(j) may be a V (the
queries and keys sharded: no global result), never another dim; a claim on a V accepts any
S(j), so the S(j) can add an error, not hide one.

Known sizes (check mode): the Varying operands sharded on the label have the same size on
it (a size-1 dim broadcast against the others has no global meaning), except attention's
keys and values beside the queries on the heads (grouped-query attention: the query heads a
multiple of the key heads, on each rank and globally alike).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

from .types import RANKS, VARYING, Kind, LocalType, from_ranks
from .views import UNREAD  # what an adapter passes for a parameter it cannot read


class DimError(Exception):
    """A dim or an equation an op cannot take (the message says why)."""


# --------------------------------------------------------------------------------------
# Equations

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_EXTRA_LABELS = "".join(chr(c) for c in range(0x391, 0x3A9 + 1) if c != 0x3A2)  # Greek caps


def parse_equation(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Operand label strings and the output labels, ``...`` expanded (right-aligned,
    shared across operands) and an implicit output (``"ij,jk"``) made explicit (the labels
    used once, sorted, after the ellipsis), as torch reads them.  Raises :class:`DimError`."""
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->", 1)
        explicit = True
    else:
        lhs, out, explicit = eq, "", False
    ins = lhs.split(",")
    if len(ins) != len(ranks):
        raise DimError(f'einsum equation "{equation}" has {len(ins)} operands but {len(ranks)} were given')
    n_ell = 0
    for term, r in zip(ins, ranks):
        if "..." in term:
            n_ell = max(n_ell, r - (len(term) - 3))
    ell = _EXTRA_LABELS[:n_ell]
    expanded = []
    for term, r in zip(ins, ranks):
        if "..." in term:
            k = r - (len(term) - 3)
            if k < 0:
                raise DimError(f'einsum operand "{term}" has more labels than its rank {r}')
            term = term.replace("...", ell[n_ell - k:] if k else "")
        if len(term) != r:
            raise DimError(f'einsum operand "{term}" has {len(term)} labels but rank {r}')
        expanded.append(term)
    if explicit:
        out = out.replace("...", ell)
    else:
        counts: dict[str, int] = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return expanded, out


# --------------------------------------------------------------------------------------
# The ops

# op -> (family, the formals holding its literal parameters, their defaults).  Both adapters
# read those formals as they read a view's dims (:mod:`.views`): einsum's ``equation`` (a
# string literal; torch.einsum's is its first positional argument), attention's ``is_causal``
# (a bool literal; anything else may be True).
CONTRACTIONS: dict[str, tuple[str, tuple[str, ...], tuple[object, ...]]] = {
    "einsum": ("einsum", ("equation",), ()),
    "matmul": ("matmul", (), ()), "mm": ("matmul", (), ()), "bmm": ("matmul", (), ()),
    "mv": ("matmul", (), ()), "outer": ("matmul", (), ()), "ger": ("matmul", (), ()),
    "linear": ("linear", (), ()),
    "scaled_dot_product_attention": ("attention", ("is_causal",), (False,)),
    # vector products: dot / vdot "k,k->" (vdot conjugates its first operand: the same dims);
    # inner over the last dim of each (a.shape[:-1] + b.shape[:-1]); tensordot over ``dims``
    # (an int n: a's last n dims with b's first n; or a pair of dim lists, literals);
    # linalg.vecdot over ``dim`` (a negative literal; batch dims broadcast)
    "dot": ("dot", (), ()), "vdot": ("dot", (), ()),
    "inner": ("inner", (), ()),
    "tensordot": ("tensordot", ("dims",), (2,)),
    "linalg_vecdot": ("vecdot", ("dim",), (-1,)),
}


@dataclass(frozen=True)
class Contraction:
    """A contraction as the call states it: ``equation`` for einsum (None: not a literal,
    then the adapters make no Contraction), ``causal`` for attention (None: not a literal,
    may be True)."""

    op: str
    equation: str | None = None
    causal: bool | None = False
    # the mesh axes on which the call's result is declared a partial sum: its
    # out_partial_axes (spmd.matmul/linear/einsum), or the axes of a
    # ``reinterpret(..., src=V, dst=P)`` the result is passed straight to ("*": any axis);
    # there a contracted sharded label is what the call means (:func:`partial_sum`)
    partial_axes: tuple[str, ...] = ()
    # the partial sum on partial_axes is typed P, pending (the static checker: a raw in-place
    # torch.distributed all_reduce / reduce_scatter_tensor reads the result, as Megatron's
    # dgrad does; the check mode's pending product, which that call resolves)
    pending: bool = False
    # tensordot's dims (an int, or a pair of tuples of dims), vecdot's dim (a negative int)
    dims: object = None
    # each tensor operand's rank where the call's text tells it (the static checker:
    # ``x.flatten()``, ``x.ravel()``, ``x.view(-1)``, ``x.reshape(-1)`` are 1-d), None where
    # it does not; () when none is known.  The static checker reads only the forms and rank
    # combinations that fit them (``r.flatten() @ p.flatten()`` is a dot product, "k,k->")
    ranks: tuple[int | None, ...] = ()

    @property
    def family(self) -> str:
        return CONTRACTIONS[self.op][0]


def make_contraction(op: str, values: Mapping[str, object]) -> Contraction | None:
    """The Contraction of ``op`` from the values of its formals as an adapter read them
    (``UNREAD`` for one it could not read; a formal left out takes its default); None when
    ``op`` is no contraction or einsum's equation is not a string."""
    entry = CONTRACTIONS.get(op)
    if entry is None:
        return None
    family = entry[0]
    if family == "einsum":
        eq = values.get("equation", UNREAD)
        return Contraction(op, equation=eq) if isinstance(eq, str) else None
    if family == "attention":
        causal = values.get("is_causal", False)
        return Contraction(op, causal=causal if isinstance(causal, bool) else None)
    if family == "tensordot":
        dims = _tensordot_dims(values.get("dims", 2))
        return Contraction(op, dims=dims) if dims is not None else None
    if family == "vecdot":
        dim = values.get("dim", -1)
        if isinstance(dim, int) and not isinstance(dim, bool) and dim < 0:
            return Contraction(op, dims=dim)
        return None  # not a literal, or counted from the front of the broadcast shape
    return Contraction(op)


def _tensordot_dims(v: object) -> int | tuple[tuple[int, ...], tuple[int, ...]] | None:
    """tensordot's ``dims`` as the rule reads it: an int n >= 0, or a pair of equally long
    dim lists; None for anything else (a tensor, a value no adapter could read)."""
    def ints(x: object) -> tuple[int, ...] | None:
        if isinstance(x, int) and not isinstance(x, bool):
            return (x,)
        if isinstance(x, (tuple, list)) and all(isinstance(i, int) and not isinstance(i, bool)
                                                for i in x):
            return tuple(x)
        return None

    if isinstance(v, int) and not isinstance(v, bool):
        return v if 0 <= v <= RANKS else None
    if isinstance(v, (tuple, list)) and len(v) == 2:
        a, b = ints(v[0]), ints(v[1])
        if a is not None and b is not None and len(a) == len(b) <= RANKS:
            return a, b
    return None


@dataclass(frozen=True)
class _Form:
    """One way the op's operands can be shaped: a term per tensor operand (``...`` for
    broadcast dims), the output (None: einsum's implicit output), whether the static checker
    enumerates it (the op's documented shapes) and the operands that have the same batch
    dims there (attention's q, k, v)."""

    terms: tuple[str, ...]
    out: str | None
    static: bool = True
    tied: tuple[int, ...] = ()
    tied_min: int = 0  # the fewest broadcast dims of the tied operands (statically)

    @property
    def equation(self) -> str:
        return ",".join(self.terms) + ("" if self.out is None else "->" + self.out)


def _f(terms: str, out: str, static: bool = True, tied: tuple[int, ...] = (),
       tied_min: int = 0) -> _Form:
    return _Form(tuple(terms.split(",")), out, static, tied, tied_min)


def _attention(terms: str) -> _Form:
    """attention's documented shapes: q (N, ..., Hq, L, E), k (N, ..., H, S, E), v (N, ...,
    H, S, Ev): one rank for the three, at least 4 (see the module docstring)."""
    return _f(terms, "...lv", tied=(0, 1, 2), tied_min=2)


# by (family or op, number of tensor operands)
_FORMS: dict[tuple[str, int], tuple[_Form, ...]] = {
    # torch.matmul: 1-d operands, and batch dims broadcast
    ("matmul", 2): (_f("k,k", ""), _f("k,...km", "...m"), _f("...nk,k", "...n"),
                    _f("...nk,...km", "...nm")),
    ("mm", 2): (_f("nk,km", "nm"),),
    ("bmm", 2): (_f("bnk,bkm", "bnm"),),
    ("mv", 2): (_f("nk,k", "n"),),
    ("outer", 2): (_f("i,j", "ij"),), ("ger", 2): (_f("i,j", "ij"),),
    ("dot", 2): (_f("k,k", ""),),  # dot, vdot: 1-d only
    # F.linear: weight (out, in) or (in); bias (out) or (); other biases torch broadcasts
    # (the check mode only)
    ("linear", 2): (_f("...i,oi", "...o"), _f("...i,i", "...")),
    ("linear", 3): (_f("...i,oi,o", "...o"), _f("...i,oi,", "...o"), _f("...i,i,", "..."),
                    _f("...i,oi,...o", "...o", static=False),
                    _f("...i,i,...", "...", static=False)),
    # F.scaled_dot_product_attention(q [..., L, E], k [..., S, E], v [..., S, Ev], mask
    # broadcast to [..., L, S])
    ("attention", 3): (_attention("...le,...se,...sv"),),
    ("attention", 4): (_attention("...le,...se,...sv,...ls"), _attention("...le,...se,...sv,s"),
                       _attention("...le,...se,...sv,")),
}


def _forms(c: Contraction, n: int) -> tuple[_Form, ...]:
    if c.family == "einsum":
        eq = (c.equation or "").replace(" ", "")
        lhs, arrow, out = eq.partition("->")
        terms = tuple(lhs.split(","))
        if len(terms) != n or any(t.count("...") > 1 or any(ch not in _LETTERS for ch in
                                                             t.replace("...", ""))
                                  for t in (*terms, out)):
            return ()  # torch refuses it
        return (_Form(terms, out if arrow else None),)
    if c.family in ("inner", "tensordot", "vecdot"):
        forms = _generated_forms(c) if n == 2 else ()
    else:
        forms = _FORMS.get((c.op, n)) or _FORMS.get((c.family, n), ())
    if c.ranks:
        forms = tuple(f for f in forms if _fits(f, c.ranks))
    return forms


# the labels of the generated forms: a's own dims, the summed ones, b's own (RANKS each)
_OWN_A, _SUMMED, _OWN_B = "abcdefgh", "ijklmnop", "qrstuvwx"
_GENERATED: dict[tuple[str, object], tuple[_Form, ...]] = {}


def _generated_forms(c: Contraction) -> tuple[_Form, ...]:
    """The forms of the ops whose dims depend on the operands' ranks, one per rank pair up
    to RANKS: inner (the last dims summed; a 0-d operand scales the other), tensordot (its
    dims; each a's own dims, then b's), and vecdot's one broadcast form (its negative dim)."""
    key = (c.family, c.dims)
    hit = _GENERATED.get(key)
    if hit is not None:
        return hit
    forms: list[_Form] = []
    if c.family == "vecdot":
        k = -c.dims  # type: ignore[operator]
        rest = _OWN_A[:k - 1]
        forms.append(_f(f"...{_SUMMED[0]}{rest},...{_SUMMED[0]}{rest}", "..." + rest))
    # every rank pair whose result has at most RANKS dims (the static checker folds per
    # result rank: a pair left out, that result rank would read fewer pairs than it has)
    if c.family == "inner":
        pairs: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((-1,), (-1,))]
    elif c.family == "tensordot" and isinstance(c.dims, int):
        pairs = [(tuple(range(-c.dims, 0)), tuple(range(c.dims)))]
    elif c.family == "tensordot":
        pairs = [c.dims]  # type: ignore[list-item]
    else:
        pairs = []
    for da, db in pairs:
        n = len(da)
        for ra, rb in itertools.product(range(RANKS + n + 1), repeat=2):
            if c.family == "inner" and (ra == 0 or rb == 0):
                if ra + rb <= RANKS:  # a 0-d operand scales the other
                    forms.append(_f(f"{_OWN_A[:ra]},{_OWN_B[:rb]}", _OWN_A[:ra] + _OWN_B[:rb]))
                continue
            if ra + rb - 2 * n > RANKS or any(not -ra <= d < ra for d in da) \
                    or any(not -rb <= d < rb for d in db):
                continue
            ia, ib = [d % ra for d in da], [d % rb for d in db]
            if len(set(ia)) != n or len(set(ib)) != n:
                continue  # torch refuses a dim summed twice
            own_a, own_b = iter(_OWN_A), iter(_OWN_B)
            ta = [_SUMMED[ia.index(i)] if i in ia else next(own_a) for i in range(ra)]
            tb = [_SUMMED[ib.index(i)] if i in ib else next(own_b) for i in range(rb)]
            out = "".join(ch for ch in ta + tb if ch not in _SUMMED)
            forms.append(_f(f"{''.join(ta)},{''.join(tb)}", out))
    _GENERATED[key] = found = tuple(forms)
    return found


def equation_at(c: Contraction, ranks: Sequence[int | None]) -> str | None:
    """The einsum equation of contraction ``c`` with its operands at ``ranks`` (a fix's
    ``spmd.einsum(...)``), where one form of the op fits them; None where a rank is unknown
    and more than one would."""
    fits = [f for f in _forms(c, len(ranks)) if _fits(f, ranks)]
    if len(fits) != 1 or fits[0].out is None:
        return None
    return fits[0].equation


# --------------------------------------------------------------------------------------
# The rule

# At most this many rank combinations are worked out for one call (the static checker:
# einsum with many broadcast operands); beyond it the result is V.
_MAX_COMBINATIONS = 4096


Ops = Sequence[tuple[LocalType | None, tuple[int, ...] | None]]


def contracted_layout(c: Contraction, operands: Ops) -> LocalType:
    """The layout of a Varying result of contraction ``c`` on one mesh axis.

    ``operands``: the call's tensor operands in order, each as (its type on the axis, None
    when unknown there; its shape, None when unknown: the static checker).

    With every shape known (check mode) the answer is the one at those ranks, written as the
    static checker writes it where it states one (the same sign: ``S(1)``, not ``S(-3)``);
    elsewhere as the operand's dim is written when the dim keeps its place (``q: S(2)`` ->
    ``S(2)``), else counted from the back for an output label after the output's ``...``
    (linear's out features: ``S(-1)``), from the front for one before it, else in the sign
    of the operand's own dim."""
    if not operands:
        return VARYING
    for lt, _ in operands:
        if lt is None or (lt.kind is Kind.V and lt.dim is None and lt.by_rank is None):
            return VARYING  # an untyped operand (it may vary), or a V of unknown layout
    first = next((lt for lt, _ in operands if lt is not None and lt.kind is Kind.V), None)
    if first is None:
        return VARYING
    negative = (first.at_high_ranks().dim or 0) < 0
    static = _static_layout(c, operands, negative)
    if any(shape is None for _, shape in operands):
        return static
    ranks = [len(shape) for _, shape in operands]  # type: ignore[arg-type]
    answers = {_at_ranks(c, form, operands, ranks) for form in _forms(c, len(operands))
               if _fits(form, ranks)}
    answers.discard(None)
    if len(answers) != 1:
        return VARYING  # no form takes these ranks (torch refuses them), or two disagree
    out_rank, d, prefer_negative = answers.pop()  # type: ignore[misc]
    if out_rank < 1 or d is None:
        return VARYING
    possible, written = static.at_rank(out_rank)
    if possible and written is not None and written % out_rank == d:
        return LocalType(Kind.V, written)
    neg = negative if prefer_negative is None else prefer_negative
    return LocalType(Kind.V, d - out_rank if neg else d)


# Whether a call's operands contract a dim sharded in every one of them, by (the contraction,
# the operands' types and shapes): the static checker asks at thousands of call sites.
_PARTIAL: dict[tuple, bool] = {}


def partial_sum(c: Contraction, operands: Ops) -> bool:
    """Whether contraction ``c`` sums over a label that every Varying operand is sharded on
    and no R or I operand holds whole (on one mesh axis; ``operands`` as for
    :func:`contracted_layout`): each rank's result is
    then its part of a sum over the ranks, a Partial, which local SPMD never makes implicitly
    (SPEC section 6, as in global SPMD): the call must say so with ``out_partial_axes`` (or
    pass the result straight to ``reinterpret(..., src=V, dst=P)``).  ::

        q, k: S(1)     q @ k.t()                   ->  True  ("nk,km": k summed)
        h: S(-1), w: S(1)   F.linear(h, w)         ->  True  (Megatron's row-parallel matmul)
        x: S(0), w: R  x @ w                       ->  False (S(0): the rows)
        x: S(1), w: R  x @ w                       ->  False (w holds the whole k of the
                                                              local size: no global meaning,
                                                              but no part of a sum either)
        x: V           x @ w                       ->  False (no known dim: plain V, gradual)

    Only when every operand is typed and every Varying one has a known dim (the cheap test
    first).  Attention is left out (its softmax over keys split across the ranks is no sum).
    The check mode knows the ranks: at those.  The static checker, which does not, says True
    when at every rank combination where the Varying operands share one sharded label, that
    label is contracted; it leaves out the 1-d forms of an op that has others (matmul's
    vectors, linear's 1-d weight) and operands with different counts of broadcast dims (``q:
    S(1)`` at 4-d against a 3-d ``k.t(): S(0)`` would share a batch dim).  Heads-sharded
    attention scores, ``q @ k.transpose(-2, -1)`` with ``q, k: S(1)``, contract the sharded
    dim only read 2-d: no error."""
    if c.family == "attention" or not operands:
        return False
    any_v = False
    for lt, _ in operands:
        if lt is None:
            return False  # an untyped operand may vary
        if lt.kind is Kind.V:
            if lt.dim is None and lt.by_rank is None:
                return False  # plain V: no known dim
            any_v = True
    if not any_v:
        return False
    key = (c, tuple(operands))
    hit = _PARTIAL.get(key)
    if hit is not None:
        return hit
    if any(shape is None for _, shape in operands):
        # the static checker: the op's documented shapes at every rank combination whose
        # operands have as many broadcast dims each (``q @ k.t()`` read 4-d against 3-d would
        # share a batch dim), but not the forms with a 1-d operand where the op has others
        # (matmul's vectors, linear's 1-d weight: F.linear(x, w) of a column-parallel w: S(0)
        # is not a dot product); where every Varying operand is sharded on one label, each
        # such combination must contract it (heads-sharded q @ k.transpose(-2, -1) contracts
        # a sharded dim only read 2-d: no error)
        forms = [f for f in _forms(c, len(operands)) if f.static]
        matrix = [f for f in forms if not any(len(t) == 1 for t in f.terms[:2])]
        verdicts: set[bool] = set()
        for form in matrix or forms:
            ells = [(i, len(t) - 3) for i, t in enumerate(form.terms) if "..." in t]
            for ranks in _rank_combinations(form, c.ranks) or ():
                if len({ranks[i] - n for i, n in ells}) > 1:
                    continue  # broadcast dims of different counts
                at = _contracted_at(form, operands, ranks)
                if at is not None and at[2] is not None:
                    verdicts.add(at[1])
        found = verdicts == {True}
    else:
        ranks = [len(shape) for _, shape in operands]  # type: ignore[arg-type]
        verdicts = {at[1] for form in _forms(c, len(operands)) if _fits(form, ranks)
                    for at in (_contracted_at(form, operands, ranks),)
                    if at is not None and at[2] is not None}
        found = verdicts == {True}
    if len(_PARTIAL) > 10_000:
        _PARTIAL.clear()
    _PARTIAL[key] = found
    return found


def _placed_count(operands: Ops) -> int:
    """How many operands are Varying with a known shard dim (S(i), or a rank-dependent one);
    0 where an operand is untyped or a plain V (no dim known: nothing to compare)."""
    n_dims = 0
    for lt, _ in operands:
        if lt is None:
            return 0
        if lt.kind is Kind.V:
            if lt.dim is None and lt.by_rank is None:
                return 0  # plain V: no known dim
            n_dims += 1
    return n_dims


# Whether a call's operands are sharded on two different kept labels, by (the contraction, the
# operands' types and shapes): the static checker asks at every contraction call site.
_BLOCKS: dict[tuple, tuple[tuple[int, int], tuple[int, int]] | None] = {}


def diagonal_block(c: Contraction, operands: Ops, partial_ok: bool = True
                   ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Two Varying operands sharded on one mesh axis on two DIFFERENT labels that both stay in
    the output, as ((operand index, its shard dim as written at its rank), (the other's)); None
    when no such pair is certain (``operands`` as for :func:`contracted_layout`).  Each rank's
    result is then one diagonal block of the global result (its own rows of one operand
    against its own of the other: ``F.linear(x, w)`` of a sequence-sharded ``x: S(1)`` and a
    column-parallel ``w: S(0)`` holds this rank's positions times this rank's features), not
    its shard of the whole nor anything a later op can use as one: local SPMD, as global SPMD
    (a mesh axis shards one dim), reports it (:func:`.ops.diagonal_block_error`).  ::

        x: S(1), w: S(0)     F.linear(x, w)                    ->  (0, 1), (1, 0)
        x: S(0), y: S(1)     einsum("bi,bj->bij", x, y)        ->  (0, 0), (1, 1)
        q, k: S(-2)          q @ k.transpose(-2, -1)           ->  (0, -2), (1, -1)
        x: S(0), y: S(1)     einsum("bi,jb->bij", x, y)        ->  None (both on b)
        q, k, v: S(-2)       F.scaled_dot_product_attention(q, k, v)
                                                               ->  None (k's and v's keys
                                                                         are summed over)

    Only when every operand is typed and every Varying one has a known dim.  The check mode
    knows the ranks: at those (every form that fits them must say so).  The static checker
    asks every rank combination of the op's documented shapes (linear's sharded weight read
    2-d, as :func:`_static_layout` reads it): each must show the pair, except one torch refuses whatever the sizes, where a contracted label (a letter, not a
    broadcast dim) is sharded in one Varying operand and whole in another sharded elsewhere
    (their local sizes differ: ``F.linear(x: S(1), w: S(0))`` read with a 2-d x contracts x's
    in-features chunk with w's whole rows).  So ``F.linear(x: S(1), w: S(0))`` (x at rank >= 3
    in every combination torch takes) and ``q: S(-2) @ k.transpose(-2, -1): S(-1)`` are
    reported, heads-sharded scores ``q: S(1) @ k.transpose(-2, -1): S(1)`` (one label at
    equal ranks) are not.

    ``partial_ok`` False (the call does not declare its result a partial sum on the axis:
    no ``out_partial_axes``, no ``reinterpret(..., src=V, dst=P)`` around it): statically a
    reading that sums over the shard label of every Varying operand (:func:`partial_sum` at
    those ranks) is wrong too, an implicit partial sum, so it does not clear the block.
    ``fi: S(0) @ ft.T: S(-1)`` of unknown ranks (CLIP's logits, the gather forgotten) is
    then a block: read 2-d or batched both keep their shard dims, one side 1-d contracts a
    chunk against a whole dim (torch refuses), both 1-d is a dot product over the shard
    (probe-contrast, session 42: V before, 0.915 off on 2 ranks).  Declared, the dot reading
    is what the call means: no block (V, as before)."""
    if not operands or _placed_count(operands) < 2:
        return None
    key = (c, tuple(operands), partial_ok)
    if key in _BLOCKS:
        return _BLOCKS[key]
    found: list[tuple[tuple[int, int], tuple[int, int]] | None] = []
    if any(shape is None for _, shape in operands):
        forms = [f for f in _forms(c, len(operands)) if f.static]
        if c.family == "linear":  # a sharded weight is read 2-d (see _static_layout)
            forms = [f for f in forms if len(f.terms[1]) != 1] or forms
        for form in forms:
            combos = _rank_combinations(form)
            if combos is None:
                return None
            for ranks in combos:
                at = _block_at(form, operands, ranks, static=True)
                if at is None and not partial_ok and _summed_at(form, operands, ranks):
                    continue  # an implicit partial sum at these ranks: wrong too
                if at is not False:
                    found.append(at)
    else:
        ranks = [len(shape) for _, shape in operands]  # type: ignore[arg-type]
        for form in _forms(c, len(operands)):
            if _fits(form, ranks):
                at = _block_at(form, operands, ranks)
                if at is not False:
                    found.append(at)
    pair = found[0] if found and all(p is not None for p in found) else None
    if len(_BLOCKS) > 10_000:
        _BLOCKS.clear()
    _BLOCKS[key] = pair
    return pair


def _block_at(form: _Form, operands: Ops, ranks: Sequence[int], static: bool = False
              ) -> tuple[tuple[int, int], tuple[int, int]] | None | bool:
    """:func:`diagonal_block` with the operands at ``ranks``: the pair, None when there is
    none, False when an operand's type cannot have its rank or torch takes no such ranks
    (``static``: nor operands of the sizes their types give, see :func:`diagonal_block`)."""
    dims = _varying_dims(operands, ranks)
    if dims is None:
        return False
    try:
        labels, out = parse_equation(form.equation, ranks)
    except DimError:
        return False
    kept: dict[str, tuple[int, int]] = {}  # a kept sharded label -> (operand, written dim)
    varying: list[tuple[str, str]] = []  # each Varying operand's (labels, sharded label)
    for i, ((lt, _), lab, d, r) in enumerate(zip(operands, labels, dims, ranks)):
        if lt is None or lt.kind is not Kind.V:
            continue
        if d is None:
            return None
        here = lab[d % r]
        varying.append((lab, here))
        if here in out and here not in kept:
            kept[here] = (i, lt.dim if lt.dim is not None else d)
    if len(kept) < 2:
        if static and any(here not in out and here in _LETTERS and here in lab and on != here
                          for _, here in varying for lab, on in varying):
            return False  # a chunk of a contracted dim against the whole dim: torch refuses
        return None
    first, second = list(kept.values())[:2]
    return first, second


# Whether some static reading of a call sums over its operands' shard label, by (the
# contraction, the operands' types): asked where partial_sum says no, for two sharded operands.
_SUMMED_SOMEWHERE: dict[tuple, bool] = {}


def may_sum(c: Contraction, operands: Ops) -> bool:
    """:func:`partial_sum`, or, statically (a shape unknown), whether at SOME rank
    combination of the op's documented shapes two or more Varying operands are all sharded
    on one label the op sums over: ``a: S(0) @ b: S(-1)`` read 1-d is a dot product.  The
    adapters look up a partial sum the code declares around the call (``out_partial_axes``,
    ``reinterpret(..., src=V, dst=P)``) where this holds: declared, that reading is what the
    call means and :func:`diagonal_block` does not count it wrong."""
    if partial_sum(c, operands):
        return True
    if c.family == "attention" or all(shape is not None for _, shape in operands):
        return False
    if _placed_count(operands) < 2:
        return False
    key = (c, tuple(operands))
    hit = _SUMMED_SOMEWHERE.get(key)
    if hit is not None:
        return hit
    found = False
    for form in _forms(c, len(operands)):
        if not form.static:
            continue
        for ranks in _rank_combinations(form, c.ranks) or ():
            if _summed_at(form, operands, ranks):
                found = True
                break
        if found:
            break
    if len(_SUMMED_SOMEWHERE) > 10_000:
        _SUMMED_SOMEWHERE.clear()
    _SUMMED_SOMEWHERE[key] = found
    return found


def summed_at_ranks(c: Contraction, operands: Ops, ranks: Sequence[int]) -> bool:
    """Whether contraction ``c`` with its operands at ``ranks`` (their shapes ignored) sums
    over the one label every Varying operand is sharded on (:func:`partial_sum`'s reading
    there): a static message's reading of a ``matmul`` of unknown ranks (``x: S(1) @ w:
    S(0)`` read 2-d is Megatron's row-parallel matmul, a partial sum; ``a @ b`` read 1-d a
    dot product)."""
    fits = [f for f in _forms(c, len(operands)) if _fits(f, ranks)]
    return bool(fits) and all(_summed_at(f, operands, ranks) for f in fits)


def _summed_at(form: _Form, operands: Ops, ranks: Sequence[int]) -> bool:
    """Whether every Varying operand is sharded on one label that the form at ``ranks``
    sums over, none held whole by an R / I operand (:func:`partial_sum`'s reading)."""
    at = _contracted_at(form, operands, ranks)
    return at is not None and at[1] and at[2] is not None


def _varying_dims(operands: Ops, ranks: Sequence[int]) -> list[int | None] | None:
    """Each Varying operand's shard dim at its rank in ``ranks`` as its type writes it (None
    for a plain V and for the other operands); None when a type cannot have that rank."""
    dims: list[int | None] = []
    for (lt, _), r in zip(operands, ranks):
        if lt is not None and lt.kind is Kind.V:
            possible, d = lt.at_rank(r)
            if not possible:
                return None
            dims.append(d)
        else:
            dims.append(None)
    return dims


def _contracted_at(form: _Form, operands: Ops,
                   ranks: Sequence[int]) -> tuple[int, bool, str | None] | None:
    """(the result's rank, whether the label is contracted, the one label every Varying
    operand is sharded on, once; None when they are not) with the operands at ``ranks``;
    None when an operand's type cannot have its rank or torch takes no operands of these
    ranks."""
    dims = _varying_dims(operands, ranks)
    if dims is None:
        return None
    try:
        labels, out = parse_equation(form.equation, ranks)
    except DimError:
        return None
    label: str | None = None
    for (lt, _), lab, d, r in zip(operands, labels, dims, ranks):
        if lt is None or lt.kind is not Kind.V:
            continue
        if d is None:
            return len(out), False, None
        here = lab[d % r]
        if lab.count(here) != 1 or (label is not None and here != label):
            return len(out), False, None
        label = here
    if label is not None and any(lt is not None and lt.kind is not Kind.V and label in lab
                                 for (lt, _), lab in zip(operands, labels)):
        return len(out), False, None  # an R / I operand holds the whole label: no sum's part
    return len(out), label is not None and label not in out, label


def _static_layout(c: Contraction, operands: Ops, negative: bool) -> LocalType:
    """The layout at every rank combination the op's documented shapes allow (the operands'
    shapes ignored), folded per result rank: a rank where two combinations disagree is V."""
    layouts: dict[int, int | None] = {}
    prefer: set[bool | None] = set()
    untyped_shapes = [(lt, None) for lt, _ in operands]
    forms = [f for f in _forms(c, len(operands)) if f.static]
    w = operands[1][0] if c.family == "linear" and len(operands) > 1 else None
    if w is not None and w.kind is Kind.V and (w.dim is not None or w.by_rank is not None):
        # a sharded weight of linear is read 2-d (its 1-d form ``...i,i`` left out, as in
        # :func:`partial_sum`): a 1-d one's only dim is the contracted one, no layout a
        # tensor-parallel weight has; read beside the 2-d weight it made F.linear(x_r, w) of
        # a column-parallel w: S(0) V without a bias (S(-1) with one, where a 1-d weight
        # needs a 0-d bias).  The check mode reads the weight's real rank.
        forms = [f for f in forms if len(f.terms[1]) != 1] or forms
    for form in forms:
        combos = _rank_combinations(form, c.ranks)
        if combos is None:
            return VARYING
        for ranks in combos:
            at = _at_ranks(c, form, untyped_shapes, ranks)
            if at is None:
                continue  # the operands cannot have these ranks (their types, or torch)
            out_rank, d, pref = at
            if out_rank < 1 or out_rank > RANKS:
                continue  # a scalar has no layout; above RANKS: as RANKS
            if d is not None:
                prefer.add(pref)
            if out_rank in layouts and layouts[out_rank] != d:
                layouts[out_rank] = None  # two rank combinations disagree: unknown
            else:
                layouts[out_rank] = d
    if not layouts:
        return VARYING
    if len(prefer) == 1 and None not in prefer:
        negative = prefer.pop()  # type: ignore[assignment]
    neg = {r: (None if d is None else d - r) for r, d in layouts.items()}
    n_pos = len(set(layouts.values()) - {None})
    n_neg = len(set(neg.values()) - {None})
    return from_ranks(neg if n_neg < n_pos or (n_neg == n_pos and negative) else layouts)


def _fits(form: _Form, ranks: Sequence[int | None]) -> bool:
    for term, r in zip(form.terms, ranks):
        if r is None:
            continue  # not known (Contraction.ranks)
        if "..." in term:
            if r < len(term) - 3:
                return False
        elif r != len(term):
            return False
    return True


def _rank_combinations(form: _Form, known: Sequence[int | None] = ()) -> list[list[int]] | None:
    """Every rank combination of the form's operands the static checker considers: a term
    without ``...`` has its length; one with it every count of broadcast dims from 0 to
    RANKS (the tied operands one count, from ``tied_min``); those where an operand's rank is
    ``known`` (:attr:`Contraction.ranks`) only at it."""
    free: list[int] = []  # operands with a count of their own
    for i, term in enumerate(form.terms):
        if "..." not in term:
            continue
        if i in form.tied and i != form.tied[0]:
            continue
        free.append(i)
    counts = [range(form.tied_min if i in form.tied else 0, RANKS + 1) for i in free]
    total = 1
    for c in counts:
        total *= len(c)
    if total > _MAX_COMBINATIONS:
        return None
    out = []
    for pick in itertools.product(*counts):
        ells = dict(zip(free, pick))
        ranks = []
        for i, term in enumerate(form.terms):
            if "..." not in term:
                ranks.append(len(term))
                continue
            e = ells[form.tied[0]] if i in form.tied else ells[i]
            ranks.append(len(term) - 3 + e)
        if not known or all(k is None or k == r for k, r in zip(known, ranks)):
            out.append(ranks)
    return out


def _at_ranks(c: Contraction, form: _Form, operands: Ops,
              ranks: Sequence[int]) -> tuple[int, int | None, bool | None] | None:
    """(the result's rank, its shard dim or None, whether to write it counted from the back:
    None for the operand's own way) with the operands at ``ranks``; None when an operand's
    type cannot have its rank or torch takes no operands of these ranks."""
    assert all(lt is not None for lt, _ in operands)
    written = _varying_dims(operands, ranks)
    if written is None:
        return None
    kept = {d for d in written if d is not None}  # the sharded operands' dims as written
    dims = [None if d is None else d % r for d, r in zip(written, ranks)]
    try:
        labels, out = parse_equation(form.equation, ranks)
    except DimError:
        return None
    out_rank = len(out)
    label: str | None = None
    for (lt, _), lab, d in zip(operands, labels, dims):
        if lt is not None and lt.kind is Kind.V:
            if d is None:
                return out_rank, None, None
            if label is None:
                label = lab[d]
            elif lab[d] != label:
                return out_rank, None, None  # sharded on two labels
    if label is None or label not in out:
        return out_rank, None, None  # contracted: a per-rank partial sum
    sizes: list[tuple[int, int]] = []  # (operand index, size on the label), shapes known
    for i, ((lt, shape), lab) in enumerate(zip(operands, labels)):
        if lt is not None and lt.kind is Kind.V:
            if lab.count(label) != 1:
                return out_rank, None, None  # a diagonal ("ii->i") of a shard
            if shape is not None:
                sizes.append((i, shape[lab.index(label)]))
        elif label in lab:
            return out_rank, None, None  # an R / I operand holds the whole label
    if c.family == "attention" and label == "l" and c.causal is not False:
        return out_rank, None, None  # the causal mask counts each rank's queries from 0
    heads = c.family == "attention" and len(labels[0]) >= 3 and label == labels[0][-3]
    if not _sizes_fit(sizes, heads):
        return out_rank, None, None
    j = out.index(label)
    if j in kept or j - out_rank in kept:
        return out_rank, j, j not in kept  # the dim stays where it was, as written
    return out_rank, j, _counted_from_back(form, out, j)


def _counted_from_back(form: _Form, out: str, j: int) -> bool | None:
    """Whether output dim ``j`` (of the expanded output ``out``) is written from the back:
    after the output's ``...`` yes, before it no, inside it (or with no ``...``) None: the
    operand's own way."""
    if form.out is None:  # implicit: the broadcast dims first, then the letters
        if not any("..." in t for t in form.terms):
            return None
        before, after = 0, sum(1 for ch in out if ch in _LETTERS)
    elif "..." not in form.out:
        return None
    else:
        before = form.out.index("...")
        after = len(form.out) - before - 3
    if j < before:
        return False
    if j >= len(out) - after:
        return True
    return None


def _sizes_fit(sizes: Sequence[tuple[int, int]], heads: bool) -> bool:
    """The Varying operands' local sizes on the shard label agree; on attention's heads
    (``heads``) the keys' and values' agree and divide the queries' (and the mask's)."""
    if len(sizes) < 2:
        return True
    if not heads:
        return len({s for _, s in sizes}) == 1
    q = {s for i, s in sizes if i not in (1, 2)}
    kv = {s for i, s in sizes if i in (1, 2)}
    if len(q) > 1 or len(kv) > 1:
        return False
    if q and kv:
        (nq,), (nkv,) = q, kv
        return nkv > 0 and nq % nkv == 0
    return True


__all__ = ["CONTRACTIONS", "Contraction", "DimError", "UNREAD", "contracted_layout",
           "diagonal_block", "equation_at", "make_contraction", "parse_equation", "partial_sum",
           "may_sum", "summed_at_ranks"]
