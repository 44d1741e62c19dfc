"""Check mode's messages for the mistakes of LoRA fine-tuning on a tensor-parallel frozen base
(the peft probe), as the static checker words them (tests/plugin/cases/peft_fixes.test); the
fixes run on gloo in tests/runtime/rt_peft_fixes.py.

Single process, no process group: only local ops run.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

from check_values import mk, typed  # noqa: E402


def _message(fn) -> str:  # noqa: ANN001
    with pytest.raises(SpmdTypeError) as e:
        fn()
    return str(e.value)


def test_an_activation_beside_a_frozen_weight_gets_the_static_message() -> None:
    """No .detach() for an activation (it has a grad_fn: detaching it cuts the gradient of
    what it came from), and no "this rank's statistic" paragraph for a frozen weight (it
    carries no gradient, but is a parameter): the static message, word for word."""
    with spmd.typecheck():
        h_i = typed(mk(3, 4).requires_grad_(True), Tensor[I["tp"]]) * 1
        W1 = typed(nn.Parameter(mk(2, 4), requires_grad=False), Tensor[S[0, "tp"]])
        msg = _message(lambda: F.linear(h_i, W1))
    assert msg == (
        'Invariant on "tp" (h_i: Tensor[I["tp"]]) cannot mix with Shard(0) (W1: Tensor[S[0, '
        '"tp"]]) in linear: its gradient would need an all-reduce that linear never issues; '
        'reinterpret(h_i, "tp", src=I, dst=R) first, so the backward all-reduces its gradient'
        '  [spmd-invariant-mix]')
    # a V made under no_grad (no grad_fn, no parameter) may be this rank's statistic: it
    # keeps the paragraph
    with spmd.typecheck():
        lse_i = typed(mk(3).requires_grad_(True), Tensor[I["tp"]]) * 1
        with torch.no_grad():
            m = typed(mk(3, 4), Tensor[S[1, "tp"]]) * 1
        msg = _message(lambda: lse_i[:, None] + m)
    assert "if m is this rank's statistic" in msg, msg


def test_a_leaf_invariant_is_offered_a_detach_about_itself() -> None:
    with spmd.typecheck():
        emb = typed(nn.Parameter(mk(3, 4)), Tensor[I["tp"]])
        x = typed(mk(3, 4), Tensor[S[1, "tp"]])
        msg = _message(lambda: x * emb)
    assert msg.endswith('; or emb.detach() if emb itself needs no gradient (a frozen weight, a '
                        'count)  [spmd-invariant-mix]'), msg


def test_a_replicate_summand_is_converted_to_partial_first() -> None:
    with spmd.typecheck():
        base2 = typed(mk(2, 4), Tensor[P["tp"]])
        lora2 = typed(mk(2, 4), Tensor[R["tp"]])
        msg = _message(lambda: base2 + lora2)
        assert ('the other term would be summed once per rank; convert(lora2, "tp", src=R, '
                'dst=P) first, so the sum counts it once (one rank keeps it, the others add '
                'zeros); or all_reduce(base2, "tp", src=P, dst=R) first') in msg, msg
        # an in-place add into the R term: converting the target is no fix
        msg = _message(lambda: lora2.add_(base2))
        assert "convert(" not in msg, msg


@pytest.mark.parametrize("width, fix", [
    (8, 'reduce_scatter(d, "tp", src=P, dst=S(-1)) first, to shard it on dim -1 as base is'),
    (4, 'all_reduce(d, "tp", src=P, dst=R) first (the shapes agree)'),
])
def test_a_partial_beside_a_shard_is_scattered_on_that_dim(width: int, fix: str) -> None:
    """The column-parallel base's output [b, FF/tp] plus a partial LoRA delta [b, FF]: dst=V
    would split dim 0, an all_reduce keeps the whole width; with equal shapes the all_reduce
    fits."""
    with spmd.typecheck():
        base = typed(mk(3, 4), Tensor[S[-1, "tp"]])
        d = typed(mk(3, width), Tensor[P["tp"]])
        msg = _message(lambda: base + d)
    assert msg.endswith(f"no meaning; {fix}  [spmd-partial-varying]"), msg


def test_a_frozen_weight_outside_the_optimizer_is_zeroed_by_the_model() -> None:
    """A frozen weight left requires_grad=True and outside the optimizer, its gradient
    all-reduced: optimizer.zero_grad() leaves it, the next backward accumulates into it (the
    error says so); model.zero_grad() (the fix) clears it."""
    model = nn.Linear(4, 2, bias=False)
    lora = nn.Parameter(torch.randn(4))
    opt = torch.optim.SGD([lora], lr=0.1)
    with spmd.typecheck():
        typed(model.weight, Tensor[R["cp"]])
        typed(lora, Tensor[R["cp"]])
        x = typed(torch.randn(3, 4), Tensor[V["cp"]])

        def step(zero_model: bool) -> None:
            opt.zero_grad()
            if zero_model:
                model.zero_grad()
            model(x * lora).sum().backward(torch.tensor(1.0))
            model.weight.grad = typed(torch.randn(2, 4), Tensor[R["cp"]])  # all_reduce'd
            lora.grad = typed(torch.randn(4), Tensor[R["cp"]])
            opt.step()

        step(False)
        msg = _message(lambda: step(False))
        assert "model.weight.grad = None before the next backward (model.zero_grad()" in msg, msg
        assert "if model.weight is frozen, model.weight.requires_grad_(False)" in msg, msg
        model.weight.grad = None
        step(True)
        step(True)  # the fix: no accumulation
