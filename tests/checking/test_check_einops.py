"""einops in the check mode: rearrange / repeat / reduce (and einops.layers.torch's
Rearrange / Reduce) typed by their pattern (engine einops_rule), as the static checker types
them (tests/plugin/cases/einops.test: the same programs, the same verdicts); einops.einsum
through torch.einsum's rule.  Before, einops' reshape was typed V, which every S(i) claim
accepts.  Single process: outside the collectives, types are stamps.
"""

from __future__ import annotations

import pytest
import torch

einops = pytest.importorskip("einops")
from einops import einsum, rearrange, reduce, repeat  # noqa: E402
from einops.layers.torch import Rearrange, Reduce  # noqa: E402

import spmd  # noqa: E402
from spmd import I, P, R, S, Tensor  # noqa: E402
from spmd_mypy.engine.errors import SpmdTypeError  # noqa: E402
from spmd_mypy.engine.types import PARTIAL, VARYING, shard  # noqa: E402

from check_values import mk, ty  # noqa: E402


def _s(d: int, *shape: int) -> torch.Tensor:
    return spmd.declare(mk(*shape), Tensor[S[d, "tp"]])


def test_rearrange_heads_split_and_merge() -> None:
    with spmd.typecheck():
        q = _s(2, 2, 3, 8)
        qh = rearrange(q, "b s (h d) -> b h s d", h=2)
        assert spmd.typeof(qh) == ty(tp=shard(1))
        om = rearrange(_s(1, 2, 2, 3, 4), "b h s d -> b s (h d)")
        assert spmd.typeof(om) == ty(tp=shard(2))
        assert spmd.typeof(rearrange(_s(3, 2, 2, 3, 4), "b h s d -> b h (s d)")) == ty(tp=VARYING)
        assert spmd.typeof(rearrange(_s(0, 4, 3), "a b -> (b a)")) == ty(tp=VARYING)
        assert spmd.typeof(rearrange(_s(0, 4, 3), "a b -> (a b)")) == ty(tp=shard(0))


def test_heads_split_claimed_at_the_old_dim_raises() -> None:
    """The probe's mistake: the heads split moves the shard dim from 2 to 1."""
    with spmd.typecheck():
        qh = rearrange(_s(2, 2, 3, 8), "b s (h d) -> b h s d", h=2)
        with pytest.raises(SpmdTypeError) as e:
            spmd.declare(qh, Tensor[S[2, "tp"]])
        assert "S(1)" in str(e.value)


def test_ellipsis_unit_axes_repeat_and_layers() -> None:
    with spmd.typecheck():
        assert spmd.typeof(rearrange(_s(0, 4, 3, 2), "b ... d -> d b ...")) == ty(tp=shard(1))
        assert spmd.typeof(rearrange(_s(-1, 4, 3, 2), "b ... d -> d b ...")) == ty(tp=shard(0))
        assert spmd.typeof(rearrange(_s(0, 4, 3), "a b -> a () b 1")) == ty(tp=shard(0))
        assert spmd.typeof(repeat(_s(0, 4, 3), "s d -> b s d", b=3)) == ty(tp=shard(1))
        assert spmd.typeof(repeat(_s(0, 4, 3), "s d -> (s r) d", r=2)) == ty(tp=shard(0))
        assert spmd.typeof(repeat(_s(0, 4, 3), "s d -> (r s) d", r=2)) == ty(tp=VARYING)
        assert spmd.typeof(Rearrange("a b -> b a")(_s(0, 4, 3))) == ty(tp=shard(1))
        assert spmd.typeof(Reduce("b s d -> b s", "mean")(_s(1, 2, 4, 3))) == ty(tp=shard(1))


def test_reduce_by_its_reduction() -> None:
    with spmd.typecheck():
        x = _s(1, 2, 4, 3)
        assert spmd.typeof(reduce(x, "b s d -> b s", "mean")) == ty(tp=shard(1))
        assert spmd.typeof(reduce(x, "b s d -> b d", "mean")) == ty(tp=VARYING)
        p = spmd.declare(mk(4, 3), Tensor[P["tp"]])
        assert spmd.typeof(reduce(p, "a b -> a", "sum")) == ty(tp=PARTIAL)
        assert spmd.typeof(reduce(_s(0, 4, 3), "a b -> a", reduction="max")) == ty(tp=shard(0))
        with pytest.raises(SpmdTypeError) as e:
            reduce(p, "a b -> a", "max")
        assert e.value.code == "spmd-partial-nonlinear"
        assert 'reduce(..., "max")' in str(e.value) and "(p: " in str(e.value)
        with pytest.raises(SpmdTypeError):
            Reduce("a b -> a", "max")(p)


def test_einsum_and_lists() -> None:
    with spmd.typecheck():
        x, w = _s(2, 2, 3, 4), _s(0, 4, 5)
        assert spmd.typeof(einsum(x, w, "b s h, h o -> b s o")) == ty(tp=VARYING)
        r = spmd.declare(mk(3, 5), Tensor[R["tp"]])
        assert spmd.typeof(einsum(_s(0, 4, 3), r, "a b, b c -> a c")) == ty(tp=shard(0))
        p, p2 = (spmd.declare(mk(4, 4), Tensor[P["tp"]]) for _ in range(2))
        with pytest.raises(SpmdTypeError) as e:
            einsum(p, p2, "a b, b c -> a c")
        assert e.value.code == "spmd-partial-product"
        i = spmd.declare(mk(4, 4), Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            einsum(p, i, "a b, b c -> a c")
        assert e.value.code == "spmd-invariant-mix"
        s = _s(0, 4, 3)
        assert spmd.typeof(rearrange([s, s], "n a b -> a n b")) == ty(tp=shard(0))
        assert spmd.typeof(rearrange([s, s], "n a b -> n a b")) == ty(tp=shard(1))


def test_untyped_operands_and_outside_the_block() -> None:
    import einops.einops as core
    original = core._apply_recipe
    with spmd.typecheck():
        assert core._apply_recipe is not original  # wrapped while a block is open
        assert spmd.typeof(rearrange(torch.randn(4, 3), "a b -> b a")) is None
        y = rearrange(_s(0, 4, 3), "a b -> b a")
    assert core._apply_recipe is original
    assert spmd.typeof(y) == ty(tp=shard(1))
    assert rearrange(torch.arange(6).reshape(2, 3), "a b -> b a").shape == (3, 2)
