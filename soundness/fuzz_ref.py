"""The numerical truth: the single-device program on the global values the types denote.

A global value is kept per mesh coordinate ``(dp, tp)``: ``{coord: tensor}``.  Along an
axis where the value is one tensor (R, I: the common value; P: the sum; S(i): the
concatenation on dim i) every coordinate holds the *same* tensor object; along an axis
where it is a list (V, and any axis the type does not name) each coordinate holds its
own entry.  Two ranks, axis "tp"::

    Tensor[P["tp"]]   locals  x0, x1        global  x0 + x1   (both coords: one object)
    Tensor[S[0,"tp"]] locals  [A], [B]      global  [A; B]
    Tensor[V["tp"]]   locals  x0, x1        global  [x0, x1]  (coord k: entry k)

The reference program runs the program's statements on these values: a local op maps
over the list entries (evaluated once per distinct operand objects, so a value that is
one tensor stays one tensor), a collective or conversion is replaced by what it means
on global values (its src/dst as written: ``all_reduce(P->R)`` is the identity,
``all_gather(V->R)`` stacks the list, ``reinterpret(V->P)`` sums it, ...).  Gradients:
torch autograd through that program, with the global loss ``sum <out, g>`` over the
output's distinct entries.

The local values that the ranks run on are made from the global ones by the input's
type (P: random summands, S(i): chunks), and a rank's results are read back by the
declared type (R/I: all ranks must agree; P: summed; S(i): concatenated; V: per rank),
the input gradients by the dual type (R <-> P, I, V, S(i) self-dual).
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch
import torch.nn.functional as F

from .fuzz_model import AXES, OPS, SIZES, Program, Stmt, Type

Coord = tuple[int, ...]
Val = dict[Coord, torch.Tensor]
COORDS: list[Coord] = list(itertools.product(*(range(SIZES[a]) for a in AXES)))


def rank_of(c: Coord) -> int:
    r = 0
    for a, k in zip(AXES, c):
        r = r * SIZES[a] + k
    return r


def group(c: Coord, axis: str) -> list[Coord]:
    """The coordinates that differ from ``c`` only on ``axis``, in axis order."""
    i = AXES.index(axis)
    return [c[:i] + (k,) + c[i + 1:] for k in range(SIZES[axis])]


class Mismatch(Exception):
    """The ranks' values are not what the type says about the global value."""


# --------------------------------------------------------------------------------------
# inputs


def make_global(t: Type, shape: tuple[int, ...], gen: torch.Generator, leaf: bool) -> Val:
    """One tensor per distinct coordinate of the list axes (V and unnamed axes)."""
    varying = [i for i, a in enumerate(AXES) if t.get(a, "V") == "V"]
    cache: dict[Coord, torch.Tensor] = {}
    out: Val = {}
    for c in COORDS:
        key = tuple(c[i] for i in varying)
        x = cache.get(key)
        if x is None:
            x = torch.randn(shape, generator=gen, dtype=torch.float64)
            if leaf:
                x.requires_grad_(True)
            cache[key] = x
        out[c] = x
    return out


def to_locals(g: Val, t: Type, gen: torch.Generator) -> Val:
    """The per-rank values that denote the global ``g`` under type ``t``."""
    loc = _per_coord(lambda x: x.detach().clone(), g)  # shared where g is one tensor
    for axis in AXES:
        form = t.get(axis, "V")
        n = SIZES[axis]
        done: set[Coord] = set()
        splits: dict[int, list[torch.Tensor]] = {}  # one split per base: R/I axes stay equal
        for c in COORDS:
            if c in done:
                continue
            grp = group(c, axis)
            done.update(grp)
            base = loc[grp[0]]
            if form.startswith("S"):
                dim = int(form[1:])
                for k, cc in enumerate(grp):
                    loc[cc] = torch.chunk(base, n, dim)[k].clone()
            elif form == "P":
                parts = splits.get(id(base))
                if parts is None:
                    parts = [torch.randn(base.shape, generator=gen, dtype=torch.float64)
                             for _ in range(n - 1)]
                    parts.append(base - sum(parts))
                    splits[id(base)] = parts
                for k, cc in enumerate(grp):
                    loc[cc] = parts[k]
    return loc


def from_locals(loc: Val, t: Type) -> Val:
    """The global value the ranks' ``loc`` denote under ``t`` (raises Mismatch)."""
    val = dict(loc)
    for axis in reversed(AXES):
        form = t.get(axis, "V")
        if form == "V":
            continue
        done: set[Coord] = set()
        for c in COORDS:
            if c in done:
                continue
            grp = group(c, axis)
            done.update(grp)
            xs = [val[cc] for cc in grp]
            if form in ("R", "I"):
                for x in xs[1:]:
                    if not close(x, xs[0]):
                        raise Mismatch(f"declared {form} on {axis!r} but the ranks disagree")
                y = xs[0]
            elif form == "P":
                if any(x.shape != xs[0].shape for x in xs):
                    raise Mismatch(f"P on {axis!r}: the ranks' shapes differ")
                y = sum(xs[1:], xs[0])
            else:
                try:
                    y = torch.cat(xs, dim=int(form[1:]))
                except (RuntimeError, IndexError) as e:
                    raise Mismatch(f"{form} on {axis!r}: cannot concatenate: {e}") from None
            for cc in grp:
                val[cc] = y
    return val


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    scale = 1.0 + float(b.detach().abs().max()) if b.numel() else 1.0
    return bool(torch.allclose(a.detach(), b.detach(), rtol=1e-7, atol=1e-9 * scale))


def compare(got: Val, want: Val, what: str) -> None:
    for c in COORDS:
        if not close(got[c], want[c]):
            g, w = got[c], want[c]
            detail = (f"shape {tuple(g.shape)} != {tuple(w.shape)}" if g.shape != w.shape else
                      f"max |diff| {float((g.detach() - w.detach()).abs().max()):.3g}")
            raise Mismatch(f"{what} at mesh coordinate (dp, tp) = {c}: {detail}")


# --------------------------------------------------------------------------------------
# the reference program


class RefError(Exception):
    """The single-device program itself fails (shapes that only fit the local pieces)."""


def _per_coord(fn: Callable[..., torch.Tensor], *xs: Val) -> Val:
    memo: dict[tuple[int, ...], torch.Tensor] = {}
    out: Val = {}
    for c in COORDS:
        key = tuple(id(x[c]) for x in xs)
        y = memo.get(key)
        if y is None:
            y = memo[key] = fn(*(x[c] for x in xs))
        out[c] = y
    return out


def _per_group(x: Val, axis: str, fn: Callable[[list[torch.Tensor]], torch.Tensor]) -> Val:
    memo: dict[tuple[int, ...], torch.Tensor] = {}
    out: Val = {}
    for c in COORDS:
        xs = [x[cc] for cc in group(c, axis)]
        key = tuple(map(id, xs))
        y = memo.get(key)
        if y is None:
            y = memo[key] = fn(xs)
        out[c] = y
    return out


def _per_entry(x: Val, axis: str, fn: Callable[[list[torch.Tensor], int], torch.Tensor]) -> Val:
    """``out[c] = fn(list over axis, c's index on axis)``."""
    i = AXES.index(axis)
    memo: dict[tuple, torch.Tensor] = {}
    out: Val = {}
    for c in COORDS:
        xs = [x[cc] for cc in group(c, axis)]
        key = (tuple(map(id, xs)), c[i])
        y = memo.get(key)
        if y is None:
            y = memo[key] = fn(xs, c[i])
        out[c] = y
    return out


def _form(f: str) -> str:
    return "S" if f.startswith("S") else f


def collective_meaning(s: Stmt, x: Val) -> Val:
    """What ``spmd.<op>(x, axis, src, dst)`` does to the global value (src/dst as written)."""
    a, n = s.axis, SIZES[s.axis]
    key = (s.name, _form(s.src), _form(s.dst))
    if s.name == "all_reduce" and s.extra == "max":
        return _per_group(x, a, lambda xs: torch.stack([t.detach() for t in xs]).amax(0))
    if key == ("all_reduce", "P", "R") or key == ("all_reduce", "P", "I"):
        if s.extra == "avg":
            return _per_coord(lambda t: t / n, x)
        return x
    if key in (("all_gather", "V", "R"), ("all_gather", "V", "I"), ("convert", "V", "P")):
        return _per_group(x, a, torch.stack)
    if key in (("reduce_scatter", "P", "V"), ("convert", "R", "V"), ("convert", "I", "V")):
        return _per_entry(x, a, lambda xs, k: xs[k][k])
    if s.name == "all_to_all" and key in (("all_to_all", f, g) for f in "VS" for g in "VS"):
        return _all_to_all_meaning(s, x)
    if key == ("reinterpret", "V", "P"):
        return _per_group(x, a, lambda xs: sum(xs[1:], xs[0]))
    if key in (("reinterpret", "R", "P"), ("reinterpret", "I", "P")):
        return _per_coord(lambda t: t * n, x)
    if key in (("all_gather", "S", "R"), ("all_gather", "S", "I"), ("reduce_scatter", "P", "S"),
               ("reinterpret", "R", "I"), ("reinterpret", "R", "V"),
               ("reinterpret", "I", "R"), ("reinterpret", "I", "V"), ("convert", "R", "S"),
               ("convert", "I", "S"), ("convert", "R", "P"), ("convert", "I", "P"),
               ("convert", "S", "P"), ("convert", "I", "R"), ("convert", "R", "I")):
        return x
    raise RefError(f"no global meaning for {s.name}({s.src} -> {s.dst})")


def _all_to_all_meaning(s: Stmt, x: Val) -> Val:
    """all_to_all as documented (runtime/spmd/_collectives.py): the pieces the src reading
    gives (V: the list entries; S(i): the global's chunks on i), block-exchanged (split
    on the dst dim, V = 0; concatenated in rank order on the src dim, V = 0), read by dst
    (V: a list; S(j): concatenated on j).  S(i) -> S(j), i != j, keeps the global tensor;
    on one dim (V <-> S(0), S(i) -> S(i), V -> V) the blocks are permuted."""
    a, n = s.axis, SIZES[s.axis]
    split, concat = s.all_to_all_dims()

    def pieces(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        if s.src.startswith("S"):  # one global tensor (each entry, if misused on a list)
            return [torch.chunk(t, n, concat)[k] for k, t in enumerate(xs)]
        return xs

    def exchanged(xs: list[torch.Tensor], r: int) -> torch.Tensor:
        return torch.cat([torch.chunk(p, n, split)[r] for p in pieces(xs)], concat)

    if s.dst.startswith("S"):
        return _per_group(x, a, lambda xs: torch.cat([exchanged(xs, r) for r in range(n)], split))
    return _per_entry(x, a, exchanged)


def as_list(x: Val, axis: str, dim: int) -> Val:
    """An S(dim) value (one global tensor along ``axis``) read as V: its chunks."""
    return _per_entry(x, axis, lambda xs, k: torch.chunk(xs[k], SIZES[axis], dim)[k])


def as_global(x: Val, axis: str, dim: int) -> Val:
    """A V value (a list along ``axis``) claimed as S(dim): the concatenation on dim."""
    return _per_group(x, axis, lambda xs: torch.cat(xs, dim))


def read_as(x: Val, axis: str, have: str | None, claim: str) -> Val:
    """S(i) is a V whose pieces concatenate on i: claiming one as the other (both checkers
    allow it) changes how the global value is held here, not the ranks' data."""
    if have is None:
        return x
    if have.startswith("S") and claim == "V":
        return as_list(x, axis, int(have[1:]))
    if have == "V" and claim.startswith("S"):
        return as_global(x, axis, int(claim[1:]))
    return x


def run_reference(prog: Program, globals_: dict[str, Val],
                  types: dict[str, Type | None] | None = None) -> dict[str, Val]:
    """``types``: the checker's types of the variables (to read a value claimed as V
    where it is S(i), or the other way round: see :func:`read_as`)."""
    env: dict[str, Val] = dict(globals_)
    ns = {"torch": torch, "F": F}
    types = types or {}
    for s in prog.stmts:
        try:
            if s.kind == "op":
                code = OPS[s.name].template.format(*(f"_a{i}" for i in range(len(s.args))))
                fn = _op_fn(code, ns)
                env[s.target] = _per_coord(fn, *(env[a] for a in s.args))
            else:
                x = env[s.args[0]]
                have = (types.get(s.args[0]) or {}).get(s.axis)
                env[s.target] = collective_meaning(s, read_as(x, s.axis, have, s.src))
        except (RuntimeError, IndexError, ValueError) as e:
            raise RefError(f"{s.render()}: {e}") from None
    return env


_FNS: dict[str, Callable[..., torch.Tensor]] = {}


def _op_fn(code: str, ns: dict) -> Callable[..., torch.Tensor]:
    fn = _FNS.get(code)
    if fn is None:
        fn = _FNS[code] = eval(f"lambda _a0=None, _a1=None, _a2=None: {code}", ns)  # noqa: S307
    return fn


def distinct_pairs(out: Val, cot: Val) -> list[tuple[torch.Tensor, torch.Tensor]]:
    seen: set[tuple[int, int]] = set()
    pairs = []
    for c in COORDS:
        k = (id(out[c]), id(cot[c]))
        if k not in seen:
            seen.add(k)
            pairs.append((out[c], cot[c]))
    return pairs


def distinct(v: Val) -> list[torch.Tensor]:
    seen: set[int] = set()
    xs = []
    for c in COORDS:
        if id(v[c]) not in seen:
            seen.add(id(v[c]))
            xs.append(v[c])
    return xs
