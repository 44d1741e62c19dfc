"""The einops rule (engine: einops_rule) against einops itself.

S(j) on a result claims: the locals, concatenated on dim j, are the op applied to the
global tensor.  For each pattern below and each shard dim d of the operand, a global
tensor is cut into W shards on d, einops runs on each shard, and wherever the rule answers
a dim j (in check mode, with the shape; and statically, without it) the concatenation on j
must equal einops on the global tensor.  Where the cases name the answer, the rule must give
it (so it is not V everywhere), and a V the cases name must be needed: no dim of the
concatenated locals gives the global result.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

einops = pytest.importorskip("einops")

from spmd_mypy.engine.einops_rule import (  # noqa: E402
    einsum_contraction,
    einsum_equation, parse_pattern, PatternError, propagate_einops, propagate_einsum,
)
from spmd_mypy.engine.ops import Operand  # noqa: E402
from spmd_mypy.engine.types import Kind, LocalType, SpmdType  # noqa: E402

W = 2


def _t(kind: Kind, dim: int | None = None) -> SpmdType:
    return SpmdType.of({"tp": LocalType(kind, dim)})


def _run(op: str, x: object, pattern: str, reduction: str | None, sizes: dict) -> torch.Tensor:
    if op == "reduce":
        return einops.reduce(x, pattern, reduction, **sizes)
    return getattr(einops, op)(x, pattern, **sizes)


# (op, pattern, reduction, axis sizes per rank, global shape, {shard dim: the answer:
# an int j for S(j), "V", or None: not named}); the sizes are per rank (einops runs on the
# locals), so a split group's named size is the local one
CASES = [
    # the rule reads no sizes (a split's outer member keeps the shard whichever size is
    # named); the global call needs the inner one here
    ("rearrange", "b s (h d) -> b h s d", None, {"d": 3}, (2, 3 * W, 2 * W * 3),
     {2: 1, 0: 0, 1: 2}),
    ("rearrange", "b h s d -> b s (h d)", None, {}, (2, 2 * W, 3, 4), {1: 2, 0: 0, 2: 1, 3: "V"}),
    ("rearrange", "b h s d -> b h (s d)", None, {}, (2, 2, 3 * W, 4), {2: 2, 3: "V"}),
    ("rearrange", "a b -> b a", None, {}, (2 * W, 3 * W), {0: 1, 1: 0}),
    ("rearrange", "(a b) c -> b a c", None, {"b": 2}, (4 * W, 3), {0: 1, 1: 2}),
    ("rearrange", "b ... d -> d b ...", None, {}, (2 * W, 3, 2, 4), {0: 1, 1: 2, 3: 0}),
    ("rearrange", "b ... d -> d b ...", None, {}, (2 * W, 3), {0: 1, 1: 0}),
    ("rearrange", "b ... -> b (...)", None, {}, (2, 2 * W, 3, 4), {0: 0, 1: 1, 2: "V", 3: "V"}),
    ("rearrange", "a 1 b -> a b", None, {}, (2 * W, 1, 3), {0: 0, 2: 1}),
    ("rearrange", "a b -> a () b 1", None, {}, (2 * W, 3 * W), {0: 0, 1: 2}),
    ("repeat", "s d -> b s d", None, {"b": 3}, (2 * W, 3), {0: 1, 1: 2}),
    ("repeat", "s d -> (s r) d", None, {"r": 2}, (2 * W, 3), {0: 0, 1: 1}),
    ("repeat", "s d -> (r s) d", None, {"r": 2}, (2 * W, 3), {0: "V", 1: 1}),
    ("repeat", "s d -> (s 2) d", None, {}, (2 * W, 3), {0: 0}),
    ("repeat", "s d -> (2 s) d", None, {}, (2 * W, 3), {0: "V"}),
    ("repeat", "a b -> c b a", None, {"c": 2}, (2 * W, 3 * W), {0: 2, 1: 1}),
    ("repeat", "s d -> s (d r)", None, {"r": 2}, (2, 3 * W), {1: 1}),
    ("repeat", "s d -> s (r d)", None, {"r": 2}, (2, 3 * W), {1: "V"}),
    ("reduce", "b s d -> b s", "mean", {}, (2, 3 * W, 4), {1: 1, 0: 0, 2: "V"}),
    ("reduce", "b s d -> b d", "mean", {}, (2, 3 * W, 4), {1: "V", 2: 1}),
    ("reduce", "b s d -> b d", "sum", {}, (2, 3 * W, 4), {1: "V", 0: 0}),
    ("reduce", "b s d -> d b", "max", {}, (2 * W, 3, 4), {0: 1, 2: 0}),
    ("reduce", "b (s k) -> b s", "max", {"k": 2}, (2, 4 * W), {1: 1, 0: 0}),
    ("reduce", "b (k s) -> b s", "max", {"k": 2}, (2, 4 * W), {1: "V"}),
    ("reduce", "b c h w -> b c 1 1", "mean", {}, (2 * W, 3 * W, 2, 2), {0: 0, 1: 1}),
    ("reduce", "b c h w -> 1 c 1 1", "min", {}, (2 * W, 3, 2, 2), {0: "V"}),
    ("reduce", "b ... -> b", "prod", {}, (2 * W, 3, 2), {0: 0}),
]


def _shards(g: torch.Tensor, d: int) -> list[torch.Tensor]:
    return list(g.chunk(W, d))


def _concat_matches(locals_: list[torch.Tensor], whole: torch.Tensor) -> list[int]:
    return [j for j in range(whole.dim())
            if locals_[0].dim() == whole.dim() and torch.equal(torch.cat(locals_, j), whole)]


@pytest.mark.parametrize("op,pattern,reduction,sizes,shape,expected", CASES,
                         ids=[f"{c[0]}:{c[1]}:{c[2]}" for c in CASES])
def test_pattern_against_einops(op, pattern, reduction, sizes, shape, expected):
    numel = torch.Size(shape).numel()
    # fixed numbers: by chance, the local results concatenated can equal the whole one where
    # they must not (reduce "b (k s) -> b s" max of a (2, 8) permutation: 19 in 20000 did)
    gen = torch.Generator().manual_seed(0)
    g = torch.randperm(numel, generator=gen).reshape(shape).to(torch.float64)
    for d in range(len(shape)):
        if shape[d] % W:
            continue
        locals_ = [_run(op, x, pattern, reduction, sizes) for x in _shards(g, d)]
        whole = _run(op, g, pattern, reduction, sizes)
        for dd in (d, d - len(shape)):
            for shape_known in (True, False):
                local_shape = tuple(_shards(g, d)[0].shape)
                operand = Operand(_t(Kind.V, dd), "x", shape=local_shape if shape_known else None)
                res = propagate_einops(op, [operand], pattern, reduction)
                assert not res.errors
                lt = res.type.get("tp")
                assert lt is not None and lt.kind is Kind.V
                # the static answer read at the result's rank (a rank-dependent layout)
                j = lt.at_rank(whole.dim())[1]
                if j is not None:
                    assert torch.equal(torch.cat(locals_, j), whole), (op, pattern, d, j)
                want = expected.get(d)
                if want is None:
                    continue
                if want == "V":
                    assert j is None, (op, pattern, d, dd, shape_known, lt)
                    assert _concat_matches(locals_, whole) == [], (op, pattern, d)
                elif shape_known or dd >= 0:
                    assert j is not None and j % whole.dim() == want, (
                        op, pattern, d, dd, shape_known, lt)


def test_stacked_list():
    """A list is stacked on a new dim 0 first (einops' torch.stack): S(i) items give S(i + 1)
    before the pattern."""
    g = torch.randperm(2 * 4 * W * 3).reshape(2, 4 * W, 3).to(torch.float64)
    locals_ = [einops.rearrange(list(x), "n a b -> a n b") for x in g.chunk(W, 1)]
    whole = einops.rearrange(list(g), "n a b -> a n b")
    ops = [Operand(_t(Kind.V, 0), "s"), Operand(_t(Kind.V, 0), "s")]
    lt = propagate_einops("rearrange", ops, "n a b -> a n b", stacked=True).type.get("tp")
    assert lt == LocalType(Kind.V, 0)
    assert torch.equal(torch.cat(locals_, 0), whole)
    mixed = [Operand(_t(Kind.V, 0), "s"), Operand(_t(Kind.V, 1), "t")]
    assert propagate_einops("rearrange", mixed, "n a b -> a n b", stacked=True).type.get(
        "tp") == LocalType(Kind.V)


def test_kinds_follow_the_op_rule():
    p, r, i = _t(Kind.P), _t(Kind.R), _t(Kind.I)
    assert propagate_einops("rearrange", [Operand(p, "p")], "a b -> b a").type == p
    assert propagate_einops("repeat", [Operand(p, "p")], "a b -> a b 3").type == p
    assert propagate_einops("reduce", [Operand(p, "p")], "a b -> a", "sum").type == p
    assert propagate_einops("reduce", [Operand(p, "p")], "a b -> a", "mean").type == p
    for red in ("max", "min", "prod", "any", "all"):
        res = propagate_einops("reduce", [Operand(p, "p")], "a b -> a", red)
        assert [e.code for e in res.errors] == ["spmd-partial-nonlinear"], red
        assert f'reduce(..., "{red}")' in res.errors[0].message
    assert propagate_einops("reduce", [Operand(r, "r")], "a b -> a", "max").type == r
    assert propagate_einops("rearrange", [Operand(i, "i")], "a b -> b a").type == i
    # a callable reduction: no rule for it, a Partial is refused
    res = propagate_einops("reduce", [Operand(p, "p")], "a b -> a", object())
    assert [e.code for e in res.errors] == ["spmd-partial-nonlinear"]


def test_not_a_literal_or_refused_falls_back_to_v():
    s = _t(Kind.V, 0)
    for pattern in (None, "a b", "a b -> b a c", "a a -> a", "(a (b)) -> a b", "a ... -> a",
                    "(...) c -> c"):
        res = propagate_einops("rearrange", [Operand(s, "x")], pattern)
        assert res.type.get("tp") == LocalType(Kind.V) and not res.errors, pattern
    with pytest.raises(PatternError):
        parse_pattern("rearrange", "a b -> b a c")


def test_einsum_translation_and_rule():
    assert einsum_equation("b s h, h o -> b s o") == "abc,cd->abd"
    assert einsum_equation("... h, h o -> ... o") == "...a,ab->...b"
    assert einsum_equation("a b -> (a b)") is None
    x = torch.randn(2, 3, 4 * W, dtype=torch.float64)
    w = torch.randn(4 * W, 5, dtype=torch.float64)
    whole = einops.einsum(x, w, "b s h, h o -> b s o")
    parts = [einops.einsum(a, b, "b s h, h o -> b s o") for a, b in zip(x.chunk(W, 2), w.chunk(W, 0))]
    assert torch.allclose(sum(parts), whole)  # a per-rank partial sum: never S, never V
    ops = [Operand(_t(Kind.V, 2), "x"), Operand(_t(Kind.V, 0), "w")]
    res = propagate_einsum(ops, "b s h, h o -> b s o")
    assert [e.code for e in res.errors] == ["spmd-global"]  # no implicit Partial
    assert 'spmd.einsum("abc,cd->abd", x, w, out_partial_axes="tp")' in res.errors[0].message
    declared = replace(einsum_contraction("b s h, h o -> b s o"), partial_axes=("tp",))
    res = propagate_einsum(ops, "b s h, h o -> b s o", move=declared)  # reinterpret(V->P) next
    assert not res.errors and res.type.get("tp") == LocalType(Kind.V)
    res = propagate_einsum([Operand(_t(Kind.V, 0), "x"), Operand(_t(Kind.R), "w")],
                           "b s h, h o -> b s o")
    assert res.type.get("tp") == LocalType(Kind.V, 0)
    res = propagate_einsum([Operand(_t(Kind.P), "p"), Operand(_t(Kind.P), "q")], "a b, b c -> a c")
    assert [e.code for e in res.errors] == ["spmd-partial-product"]
    res = propagate_einsum([Operand(_t(Kind.P), "p"), Operand(_t(Kind.I), "i")], "a b, b c -> a c")
    assert [e.code for e in res.errors] == ["spmd-invariant-mix"]
    assert propagate_einsum([Operand(_t(Kind.P), "p"), Operand(_t(Kind.R), "r")],
                            "a b, b c -> a c").type == _t(Kind.P)


def _random_pattern(rng, rank: int) -> tuple[str, str, str | None, dict, tuple[int, ...]]:
    """A random einops call einops takes: the input's axes (some split into two), the output's
    in a random order, some merged, some reduced (reduce) or new ones added (repeat)."""
    import random  # noqa: F401 - rng is a random.Random
    names = [f"a{k}" for k in range(rank)]
    shape, left, sizes = [], [], {}
    axes: list[str] = []
    for n in names:
        if rng.random() < 0.3:
            left.append(f"({n}x {n}y)")
            axes += [f"{n}x", f"{n}y"]
            sizes[f"{n}y"] = 2
            shape.append(2 * W * 2)
        else:
            left.append(n)
            axes.append(n)
            shape.append(2 * W)
    op = rng.choice(["rearrange", "repeat", "reduce"])
    kept = list(axes)
    reduction = None
    if op == "reduce":
        reduction = rng.choice(["sum", "mean", "max", "min", "prod"])
        kept = [a for a in axes if rng.random() < 0.7]
    if op == "repeat":
        for k in range(rng.randint(1, 2)):
            kept.append(f"n{k}")
            sizes[f"n{k}"] = 2
    rng.shuffle(kept)
    right, k = [], 0
    while k < len(kept):
        n = rng.choice([1, 1, 2, 3])
        group = kept[k:k + n]
        right.append(group[0] if len(group) == 1 else "(" + " ".join(group) + ")")
        k += n
    return op, " ".join(left) + " -> " + " ".join(right), reduction, sizes, tuple(shape)


def test_random_patterns_against_einops():
    """Every S(j) the rule gives for a random pattern holds on real shards (and the rule never
    raises): the soundness of the chain, beyond the cases listed."""
    import random
    rng = random.Random(7)
    claimed = 0
    for _ in range(300):
        op, pattern, reduction, sizes, shape = _random_pattern(rng, rng.randint(1, 4))
        g = torch.randperm(torch.Size(shape).numel()).reshape(shape).to(torch.float64)
        whole = _run(op, g, pattern, reduction, sizes)
        for d in range(len(shape)):
            locals_ = [_run(op, x, pattern, reduction, sizes) for x in _shards(g, d)]
            for shape_known in (True, False):
                operand = Operand(_t(Kind.V, d), "x",
                                  shape=tuple(_shards(g, d)[0].shape) if shape_known else None)
                lt = propagate_einops(op, [operand], pattern, reduction).type.get("tp")
                assert lt is not None and lt.kind is Kind.V
                if whole.dim() == 0:
                    continue
                j = lt.at_rank(whole.dim())[1]
                if j is not None:
                    claimed += 1
                    assert torch.equal(torch.cat(locals_, j), whole), (op, pattern, d, j, shape_known)
    assert claimed > 200  # the rule keeps dims, not V everywhere
