"""torch.library.custom_op operators in the check mode, the cases of
tests/plugin/cases/custom_ops.test: both checkers type a custom op's call by the op rule under
its registered name (the generic rule, a non-linear op, for a name the classification does not
know), its own parameters' roles (a dim is no operand), and the same errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

from check_values import mk, typed


@torch.library.custom_op("spmdcheck::bias_gelu", mutates_args=())
def bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + b)


@bias_gelu.register_fake
def _bias_gelu_fake(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("spmdcheck::split_two", mutates_args=())
def split_two(x: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    return x * alpha, x.clone()


@torch.library.custom_op("spmdcheck::reduce_last", mutates_args=())
def reduce_last(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.amax(dim)


@torch.library.custom_op("spmdcheck::relu", mutates_args=())
def my_relu_op(x: torch.Tensor) -> torch.Tensor:
    return x.relu()


def _raises(code: str, fn) -> str:  # noqa: ANN001
    with pytest.raises(SpmdTypeError) as info:
        fn()
    assert info.value.code == code
    return str(info.value)


def test_custom_op_varying_typed() -> None:
    with spmd.typecheck():
        v, b = typed(mk(4), Tensor[V["tp"]]), typed(mk(4), Tensor[R["tp"]])
        assert str(spmd.typeof(bias_gelu(v, b))) == 'Tensor[V["tp"]]'


def test_custom_op_partial_rejected() -> None:
    with spmd.typecheck():
        p, b = typed(mk(4), Tensor[P["tp"]]), typed(mk(4), Tensor[R["tp"]])
        msg = _raises("spmd-partial-nonlinear", lambda: bias_gelu(p, b))
        assert "cannot go through bias_gelu" in msg


def test_custom_op_invariant_mix_rejected() -> None:
    with spmd.typecheck():
        v, w = typed(mk(4), Tensor[V["tp"]]), typed(mk(4), Tensor[I["tp"]])
        msg = _raises("spmd-invariant-mix", lambda: bias_gelu(v, b=w))
        assert "in bias_gelu" in msg


def test_custom_op_tuple_result_typed() -> None:
    with spmd.typecheck():
        r = typed(mk(4), Tensor[R["tp"]])
        a, c = split_two(r, 2.0)
        assert str(spmd.typeof(a)) == str(spmd.typeof(c)) == 'Tensor[R["tp"]]'


def test_custom_op_dim_is_no_operand() -> None:
    with spmd.typecheck():
        s = typed(mk(4, 4), Tensor[S[0, "tp"]])
        assert str(spmd.typeof(reduce_last(s, -1))) == 'Tensor[V["tp"]]'
        assert str(spmd.typeof(reduce_last(s, dim=0))) == 'Tensor[V["tp"]]'


def test_custom_op_registered_name_classifies() -> None:
    with spmd.typecheck():
        p = typed(mk(4), Tensor[P["tp"]])
        msg = _raises("spmd-partial-nonlinear", lambda: my_relu_op(p))
        assert "cannot go through relu" in msg
