"""An elementwise op of an S(i) tensor beside a tensor that does not vary (a bias, a rotary
table) when the shapes are known (the check mode): the result keeps a shard dim exactly where
concatenating the ranks' results on it gives the op of the global tensor (engine
``_broadcast_shard_dim``); without shapes (the static checker) it stays plain V."""

from __future__ import annotations

import itertools

import torch

from spmd_mypy.engine.ops import Operand, propagate
from spmd_mypy.engine.types import REPLICATE, Kind, LocalType, SpmdType, shard

RANKS = 2


def _one(lt) -> SpmdType:  # noqa: ANN001
    return SpmdType.of({"cp": lt})


def _other_shapes(x_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every shape that broadcasts against the local x: fewer, as many or one more dims,
    each 1 or x's size."""
    out: list[tuple[int, ...]] = []
    n = len(x_shape)
    for rank in range(0, n + 2):
        aligned = [1] * max(0, rank - n) + list(x_shape[max(0, n - rank):])
        for ones in itertools.product((False, True), repeat=rank):
            out.append(tuple(1 if one else (aligned[k] if k < len(aligned) else 1)
                             for k, one in enumerate(ones)))
    return sorted(set(out))


def test_kept_shard_dims_are_the_global_layout() -> None:
    torch.manual_seed(0)
    kept = checked = 0
    for n in (1, 2, 3):
        x_shape = tuple(range(2, 2 + n))
        for dim in range(-n, n):
            locals_ = [torch.randn(x_shape, dtype=torch.float64) for _ in range(RANKS)]
            global_x = torch.cat(locals_, dim=dim)
            for y_shape in _other_shapes(x_shape):
                y = torch.randn(y_shape, dtype=torch.float64)
                res = propagate("add", [Operand(_one(shard(dim)), "x", shape=x_shape),
                                        Operand(_one(REPLICATE), "b", shape=y_shape)])
                lt = res.type.get("cp")
                assert lt is not None and lt.kind is Kind.V and not res.errors
                checked += 1
                if lt.dim is None:
                    continue
                kept += 1
                joined = torch.cat([xl + y for xl in locals_], dim=lt.dim)
                assert torch.equal(joined, global_x + y), (x_shape, dim, y_shape, lt)
    assert checked > 100 and kept > 30, (checked, kept)


def test_named_cases() -> None:
    def result(x_shape, dim, y_shape):  # noqa: ANN001, ANN202
        return str(propagate("add", [Operand(_one(shard(dim)), "x", shape=x_shape),
                                     Operand(_one(REPLICATE), "b", shape=y_shape)]).type)
    assert result((2, 4, 8), 1, (8,)) == 'Tensor[S[1, "cp"]]'          # a bias
    assert result((2, 4, 2, 2), 1, (4, 1, 2)) == 'Tensor[V["cp"]]'     # a table of all positions
    assert result((2, 4, 2, 2), 1, (1, 1, 2)) == 'Tensor[S[1, "cp"]]'  # its slice on the rank
    assert result((4, 8), 0, (3, 1, 8)) == 'Tensor[S[1, "cp"]]'        # the other has more dims
    assert result((4, 8), -2, (3, 1, 8)) == 'Tensor[S[-2, "cp"]]'
    # no shapes (the static checker): plain V, as before
    assert str(propagate("add", [Operand(_one(shard(1)), "x"), Operand(_one(REPLICATE), "b")]).type) \
        == 'Tensor[V["cp"]]'


def test_two_sharded_operands_of_other_ranks() -> None:
    """Two S operands whose ranks differ (Megatron's 1-d column-parallel bias, S(0), added to
    the S(-1) activations): broadcasting aligns dims from the right, so S(0) of the 1-d
    bias is S(-1) of the 3-d activations; every dim the rule keeps is the global layout."""
    torch.manual_seed(0)
    kept = checked = 0
    shapes = [(4,), (3, 4), (2, 3, 4), (1, 4), (3, 1)]
    for x_shape, y_shape in itertools.product(shapes, repeat=2):
        for dx, dy in itertools.product(range(-len(x_shape), len(x_shape)),
                                        range(-len(y_shape), len(y_shape))):
            xs = [torch.randn(x_shape, dtype=torch.float64) for _ in range(RANKS)]
            ys = [torch.randn(y_shape, dtype=torch.float64) for _ in range(RANKS)]
            res = propagate("add", [Operand(_one(shard(dx)), "x", shape=x_shape),
                                    Operand(_one(shard(dy)), "b", shape=y_shape)])
            lt = res.type.get("cp")
            try:
                global_sum = torch.cat(xs, dim=dx) + torch.cat(ys, dim=dy)
            except RuntimeError:  # the globals do not broadcast: no layout to keep
                assert lt is not None and lt.dim is None, (x_shape, dx, y_shape, dy, lt)
                continue
            assert lt is not None and lt.kind is Kind.V and not res.errors
            checked += 1
            if lt.dim is None:
                continue
            kept += 1
            joined = torch.cat([a + b for a, b in zip(xs, ys)], dim=lt.dim)
            assert torch.equal(joined, global_sum), (x_shape, dx, y_shape, dy, lt)
    assert checked > 30 and kept > 10, (checked, kept)


def test_one_d_bias_beside_last_dim() -> None:
    def result(x_shape, dx, y_shape, dy):  # noqa: ANN001, ANN202
        return str(propagate("add", [Operand(_one(shard(dx)), "h", shape=x_shape),
                                     Operand(_one(shard(dy)), "bias", shape=y_shape)]).type)
    assert result((2, 3, 8), -1, (8,), 0) == 'Tensor[S[-1, "cp"]]'   # Megatron's h + bias
    assert result((2, 3, 8), 2, (8,), 0) == 'Tensor[S[2, "cp"]]'
    assert result((2, 3, 8), -1, (8,), -1) == 'Tensor[S[-1, "cp"]]'
    assert result((2, 8), 0, (8,), 0) == 'Tensor[V["cp"]]'           # dim 0 is not the bias's dim
    # no shapes (the static checker): S(-1) + S(0) is plain V (the ranks are unknown)
    assert str(propagate("add", [Operand(_one(shard(-1)), "h"),
                                 Operand(_one(shard(0)), "bias")]).type) == 'Tensor[V["cp"]]'


def test_a_known_rank_without_shapes() -> None:
    """The static checker knows no shapes, but a rank where the source makes it evident
    (``Operand.ndim``: 0 for ``alpha`` of a CG step, a full reduction all-reduced): an
    operand of no shard dim reaches no dim when 0-d, and none before its last k dims when
    of rank k; every dim the rule keeps is the global layout for any rank of the sharded
    operand (checked against torch).  A 0-d V (each rank's own number) stays V, and so does
    an R of unknown rank."""
    def result(dim: int, other, ndim: int | None) -> LocalType:  # noqa: ANN001
        res = propagate("mul", [Operand(_one(other), "a", ndim=ndim),
                                Operand(_one(shard(dim)), "p")])
        lt = res.type.get("cp")
        assert lt is not None and not res.errors
        return lt

    assert result(0, REPLICATE, 0) == shard(0)
    assert result(-1, REPLICATE, 0) == shard(-1)
    assert result(-2, REPLICATE, 1) == shard(-2)          # a bias of the last dim
    assert result(-1, REPLICATE, 1).dim is None           # the bias meets the shard dim
    assert result(0, REPLICATE, 1).dim is None            # rank of p unknown: dim 0 may be -1
    assert result(0, REPLICATE, None).dim is None         # rank unknown
    assert result(0, LocalType(Kind.V), 0).dim is None    # a per-rank scalar
    torch.manual_seed(0)
    for n in (1, 2, 3):
        x_shape = tuple(range(2, 2 + n))
        for dim in range(-n, n):
            locals_ = [torch.randn(x_shape, dtype=torch.float64) for _ in range(RANKS)]
            global_x = torch.cat(locals_, dim=dim)
            for k in range(0, n + 1):
                lt = result(dim, REPLICATE, k)
                if lt.dim is None:
                    continue
                y = torch.randn(x_shape[n - k:], dtype=torch.float64)
                joined = torch.cat([y * xl for xl in locals_], dim=lt.dim)
                assert torch.equal(joined, y * global_x), (x_shape, dim, k, lt)
    # per-rank scalars scale each block by their own number: no global tensor's block
    s = [torch.tensor(1.0), torch.tensor(2.0)]
    blocks = [torch.ones(2), torch.ones(2)]
    assert not any(torch.equal(torch.cat([s[r] * blocks[r] for r in range(RANKS)]), c * torch.ones(4))
                   for c in (1.0, 2.0))
