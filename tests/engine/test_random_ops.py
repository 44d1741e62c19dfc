"""The engine's random ops (RANDOM_OPS): which calls draw from a generator (the check mode
compares the generator's state across an axis before those, spmd-random), and the message."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.ops import RANDOM_OPS, random_draws, random_state_error
from spmd_mypy.engine.types import INVARIANT, REPLICATE, Kind, LocalType, SpmdType


@pytest.mark.parametrize("name, values, draws", [
    ("dropout", {}, True),                                  # F.dropout: training=True, p=0.5
    ("dropout", {"training": False}, False),                # eval (nn.Dropout.eval())
    ("dropout", {"p": 0.0}, False),
    ("dropout", {"p": 0}, False),
    ("dropout", {"p": 1.0}, False),                         # all zeros: nothing drawn
    ("dropout", {"p": 0.1, "training": True}, True),
    ("dropout", {"train": False}, False),                   # torch.dropout(input, p, train)
    ("dropout2d", {"p": 0.2}, True),
    ("alpha_dropout", {}, False),                           # F.alpha_dropout: training=False
    ("alpha_dropout", {"training": True}, True),
    ("feature_alpha_dropout", {"training": True, "p": 0.0}, False),
    ("rrelu", {}, False),                                   # F.rrelu: training=False
    ("rrelu", {"training": True}, True),
    ("scaled_dot_product_attention", {}, False),            # dropout_p=0.0
    ("scaled_dot_product_attention", {"dropout_p": 0.1}, True),
    ("scaled_dot_product_attention", {"dropout_p": 1.0}, True),
    ("multinomial", {}, True),
    ("bernoulli_", {"p": 0.0}, True),                       # bernoulli's p is no drop rate
    ("normal_", {}, True),
    ("relu", {}, False),                                    # not random
    ("randn", {}, False),                                   # factories: no typed operand
    ("randn_like", {}, True),                               # typed from its template
    ("randint_like", {}, True),
])
def test_which_calls_draw(name: str, values: dict, draws: bool) -> None:
    assert random_draws(name, values) is draws


def test_random_ops_named() -> None:
    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout", "bernoulli", "bernoulli_", "multinomial", "rrelu",
                 "normal", "normal_", "poisson", "uniform_", "exponential_", "random_",
                 "scaled_dot_product_attention", "gumbel_softmax", "rand_like", "randn_like",
                 "randint_like"):
        assert name in RANDOM_OPS, name


def test_message() -> None:
    t = SpmdType((("dp", REPLICATE), ("tp", INVARIANT)))
    e = random_state_error("dropout", "tp", "(h + b)", t, "the default CPU generator", (0, 3))
    assert e.code == "spmd-random"
    text = str(e)
    assert text.startswith('dropout on "tp" (h + b: Tensor[R["dp"], I["tp"]]) draws from the '
                           'default CPU generator, whose state differs between the ranks of '
                           '"tp" (global ranks 0 and 3)'), text
    for part in ("as Invariant says", "silently mixes", "torch.manual_seed(seed), not seed + rank",
                 'convert(h + b, "tp", src=I, dst=S(i)), then dropout on the shard',
                 'reinterpret(h + b, "tp", src=I, dst=V) first  [spmd-random]'):
        assert part in text, (part, text)


def test_message_names_the_axes_the_seed_may_vary_on() -> None:
    # probe-dit 7: noise for a dp-sharded batch on a dp x sp mesh, seeded with the global
    # rank: the fix must keep a per-dp-rank seed (seed + the dp rank), the same on sp and tp
    t = SpmdType((("dp", LocalType(Kind.V, 0)), ("sp", REPLICATE), ("tp", INVARIANT)))
    e = random_state_error("randn_like", "sp", "randn_like(x0)", t, "the default CPU generator",
                           (0, 1))
    text = str(e)
    assert ('torch.manual_seed(seed + mesh.get_local_rank("dp")): the same on every rank of '
            '"sp" and "tp", where randn_like(x0) is one value, and its own on "dp"') in text, text
    assert "not seed + rank)" not in text, text
