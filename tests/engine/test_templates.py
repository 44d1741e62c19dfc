"""The template rule (engine: ops.TEMPLATE_OPS, Role.TEMPLATE) against torch itself.

``x.type_as(y)``, ``x.to(y)``, ``x.view_as(y)``, ``x.reshape_as(y)``, ``x.expand_as(y)`` read
only y's dtype, device or shape, so y's SPMD type takes no part in the rule.  That holds
exactly when none of y's values reach the result and no gradient reaches y: checked here on
torch, with y's values changed and y requiring grad.  (The soundness suite cannot check it:
its reference applies an op to a Varying operand once per rank, as if the result depended
on it.)
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from spmd_mypy.engine.ops import TEMPLATE_OPS, Operand, Role, classify, propagate
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, SpmdType, shard

CALLS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "type_as": (lambda x, y: x.type_as(y), (2, 3)),
    "to": (lambda x, y: x.to(y), (2, 3)),
    "view_as": (lambda x, y: x.view_as(y), (3, 2)),
    "reshape_as": (lambda x, y: x.reshape_as(y), (6,)),
    "expand_as": (lambda x, y: x[:1].expand_as(y), (2, 3)),
}


def test_every_template_op_is_called_here() -> None:
    assert set(CALLS) == set(TEMPLATE_OPS)


@pytest.mark.parametrize("op", TEMPLATE_OPS)
def test_no_value_and_no_gradient_of_the_template_reaches_the_result(op: str) -> None:
    fn, y_shape = CALLS[op]
    torch.manual_seed(0)
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(*y_shape, dtype=torch.float32, requires_grad=True)
    out = fn(x, y)
    other = fn(x, torch.randn(*y_shape, dtype=torch.float32) * 100)
    assert torch.equal(out, other), "the result depends on the template's values"
    grads = torch.autograd.grad(out.sum(), [x, y], allow_unused=True)
    assert grads[0] is not None
    assert grads[1] is None, "a gradient reaches the template"


@pytest.mark.parametrize("op", TEMPLATE_OPS)
def test_the_template_takes_no_part_in_the_rule(op: str) -> None:
    spec = classify(op)
    assert spec.role(1) is Role.TEMPLATE
    kinds = (REPLICATE, INVARIANT, VARYING, PARTIAL, shard(0), shard(1))
    for kx in kinds[:-1]:
        x = SpmdType.of({"tp": kx})
        alone = propagate(spec, [Operand(x, "x")])
        for ky in kinds:
            y = SpmdType.of({"tp": ky})
            both = propagate(spec, [Operand(x, "x"), Operand(y, "y")])
            assert not both.errors and both.type == alone.type, (kx, ky, both)
