"""The runtime check mode: ``spmd.typecheck``, ``declare``, ``reveal``, ``typeof``, ``checked``.

Single process, no process group: outside the collectives, types are stamps.
The op x type grid lives in tests/cases/shared_cases.py (run by
test_check_shared_cases.py); these tests cover the machinery around it.
"""

from __future__ import annotations

import contextlib
import gc
import io
import re
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd import _checking
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, SpmdType, shard

from check_values import mk, ty, typed  # noqa: E402


# --------------------------------------------------------------------------------------
# declare / typeof / reveal


def test_outside_check_mode_nothing_is_tracked() -> None:
    x = mk()
    assert spmd.declare(x, Tensor[R["tp"]]) is x
    assert spmd.typeof(x) is None
    assert not _checking.ACTIVE
    assert not torch._C._is_torch_function_mode_enabled()


def test_declare_stamps_and_types_survive_the_block() -> None:
    x = mk()
    with spmd.typecheck():
        assert _checking.ACTIVE
        assert spmd.declare(x, Tensor[R["tp"], V["dp"]]) is x
        y = x * 2
    assert not _checking.ACTIVE
    assert not torch._C._is_torch_function_mode_enabled()
    assert spmd.typeof(x) == ty(tp=REPLICATE, dp=VARYING)
    assert spmd.typeof(y) == ty(tp=REPLICATE, dp=VARYING)
    with spmd.typecheck():  # a later block sees them
        assert spmd.typeof(y + x) == ty(tp=REPLICATE, dp=VARYING)


def test_typeof_untracked_and_non_tensors() -> None:
    with spmd.typecheck():
        assert spmd.typeof(torch.zeros(3)) is None
        assert spmd.typeof(3.0) is None
        assert spmd.typeof("x") is None


def test_declare_accepts_spmd_type_and_rejects_other_annotations() -> None:
    with spmd.typecheck():
        x = spmd.declare(mk(), ty(tp=PARTIAL))
        assert spmd.typeof(x) == ty(tp=PARTIAL)
        with pytest.raises(TypeError, match="spmd.declare takes"):
            spmd.declare(mk(), int)


def test_declare_conflict_is_an_error() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            spmd.declare(x, Tensor[R["tp"]])
        assert e.value.code == "spmd-annotation"
        assert str(e.value).startswith(
            'spmd.declare(x, Tensor[R["tp"]]) but x is P on "tp", not R (x: Tensor[P["tp"]]): '
            "a declaration states a type, it cannot change one; P to R is a reduction: use "
            'all_reduce(x, "tp", src=P, dst=R)'), str(e.value)
        assert spmd.typeof(x) == ty(tp=PARTIAL)  # unchanged


def test_declare_refines_and_keeps_what_it_knew() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[V["tp"], R["dp"]])
        spmd.declare(x, Tensor[S[0, "tp"]])  # V may be declared S(0)
        assert spmd.typeof(x) == ty(tp=shard(0), dp=REPLICATE)
        spmd.declare(x, Tensor[V["tp"], I["ep"]])  # S(0) stays S(0); a new axis is added
        assert spmd.typeof(x) == ty(tp=shard(0), dp=REPLICATE, ep=INVARIANT)
        with pytest.raises(SpmdTypeError):
            spmd.declare(x, Tensor[S[1, "tp"]])


def test_reveal_prints_the_live_type_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    x = mk()
    assert spmd.reveal(x) is x  # outside: silent
    assert capsys.readouterr().err == ""
    with spmd.typecheck():
        spmd.declare(x, Tensor[V["dp"], R["tp"]])
        assert spmd.reveal(x) is x
        spmd.reveal(torch.zeros(2))
        spmd.reveal(3)
        spmd.reveal(x.chunk(2, dim=1))  # a tuple item by item (the docs probe: "(tuple)")
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r'.*test_check_mode\.py:\d+: spmd\.reveal: Tensor\[R\["tp"\], V\["dp"\]\]',
                        err[0]), err[0]
    assert err[1].endswith("spmd.reveal: Tensor")
    assert err[2].endswith("spmd.reveal: not a tensor (int)")
    assert err[3].endswith('spmd.reveal: tuple[Tensor[R["tp"], V["dp"]], Tensor[R["tp"], V["dp"]]]'), err[3]


def test_reveal_says_a_sum_is_pending_and_leaves_it_pending(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``spmd.reveal(local_sum)`` of a sum over a shard dim: the type and its pending state
    (the reinterpret(V->P) that follows still takes it; probe-dit f5); reveal is no read of
    its value: the next op's error is still the one without the reveal."""
    with spmd.typecheck():
        err = typed(mk(), Tensor[S[1, "tp"]])
        local_sum = (err ** 2).sum()
        assert spmd.reveal(local_sum) is local_sum
        with pytest.raises(SpmdTypeError) as e:
            local_sum.sqrt()
        assert e.value.code == "spmd-global", e.value
    shown = capsys.readouterr().err.splitlines()[0]
    assert shown.endswith(
        'spmd.reveal: Tensor[V["tp"]] (pending: this rank\'s part of a sum over "tp", until '
        'spmd.reinterpret(..., "tp", src=V, dst=P) or a reduction with src=P takes it)'), shown


def test_types_do_not_pollute_checkpoints() -> None:
    with spmd.typecheck():
        p = typed(nn.Parameter(torch.randn(3)), Tensor[I["tp"]])
    buf = io.BytesIO()
    torch.save({"p": p}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)  # would fail if the type were in p.__dict__
    assert torch.equal(loaded["p"], p)
    assert "_spmd" not in " ".join(vars(p))


def test_side_table_forgets_dead_tensors() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[R["tp"]])
        y = x + x
        key = id(y)
        assert key in _checking._TYPES
        del y
        gc.collect()
        assert key not in _checking._TYPES or _checking._TYPES[key][0]() is not None


# --------------------------------------------------------------------------------------
# ops: results, errors, messages


class _Router(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("e_bias", torch.zeros(4))


@torch.no_grad()
def _update_bias(moe: _Router, counts: torch.Tensor) -> None:
    moe.e_bias.add_(0.1 * torch.sign(counts.mean() - counts))


def _update_bias_with(moe: _Router, counts: torch.Tensor) -> None:
    with torch.no_grad():
        moe.e_bias.add_(0.1 * torch.sign(counts.mean() - counts))


def test_inplace_on_a_module_buffer_names_it_as_written() -> None:
    # probe-dsv3 f3: a buffer of a module the caller holds (moe.e_bias) was named "x", and the
    # value added "value"; the static checker names both as written
    with spmd.typecheck():
        moe = _Router()
        spmd.declare(moe.e_bias, Tensor[R["dp"]])
        counts = typed(torch.arange(4.0), Tensor[V["dp"]])
        for update in (_update_bias, _update_bias_with):
            with pytest.raises(SpmdTypeError) as e:
                update(moe, counts)
            assert str(e.value).startswith(
                'add_ would change moe.e_bias on "dp" from Replicate to Varying (Tensor[R["dp"]] '
                '-> Tensor[V["dp"]]); 0.1 * torch.sign(counts.mean() - counts) (Tensor[V["dp"]]) '
                'is Varying on "dp"'), str(e.value)


def _shared_in_the_sum(shared: torch.Tensor, routed: torch.Tensor) -> torch.Tensor:
    return spmd.all_reduce(shared + routed, "tp", src=P, dst=I)


def test_invariant_mix_inside_an_all_reduce_gets_the_static_fix() -> None:
    # probe-dsv3 f4: "all_reduce(shared, ...) first", pasted inside the all_reduce, reduces
    # twice; the check mode gives the static checker's rewrite of the whole call
    with spmd.typecheck():
        shared, routed = typed(mk(), Tensor[P["tp"]]), typed(mk(), Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _shared_in_the_sum(shared, routed)
        assert e.value.code == "spmd-invariant-mix"
        assert str(e.value).endswith(
            'add routed after the reduction: spmd.all_reduce(shared, "tp", src=P, dst=I) + '
            'routed in place of spmd.all_reduce(shared + routed, "tp", src=P, dst=I); or '
            'convert(routed, "tp", src=I, dst=P) to add it into the pending sum  '
            '[spmd-invariant-mix]'), str(e.value)


def test_error_is_raised_before_the_op_runs_and_names_the_operands() -> None:
    with spmd.typecheck():
        hidden = typed(mk(), Tensor[R["tp"]])
        delta = typed(mk(), Tensor[V["tp"]])
        before = hidden.detach().clone()
        with pytest.raises(SpmdTypeError) as e:
            hidden.add_(delta)
        assert e.value.code == "spmd-inplace"
        assert "add_ would change hidden" in str(e.value)
        assert torch.equal(hidden.detach(), before)  # not mutated
        with pytest.raises(SpmdTypeError) as e:  # no variable holds it: the expression
            torch.relu(typed(mk(), Tensor[P["tp"]]))
        assert 'all_reduce(typed(mk(), Tensor[P["tp"]]), "tp", src=P, dst=R)' in str(e.value)
        with pytest.raises(SpmdTypeError) as e:  # no source to read: a default name
            eval('torch.relu(typed(mk(), Tensor[P["tp"]]))')
        assert 'all_reduce(x, "tp", src=P, dst=R)' in str(e.value)


def test_operands_no_variable_holds_are_named_by_their_expression() -> None:
    """The check mode reads the running expression's operands from the source (Python 3.11
    positions), as the static checker prints them; only where the pairing is certain."""
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        r = typed(mk(), Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError, match=re.escape("(p * 2: Tensor[P")):
            F.gelu(p * 2)
        with pytest.raises(SpmdTypeError, match=re.escape("all_reduce(p * 2, ")):
            (p * 2).exp()
        with pytest.raises(SpmdTypeError, match=re.escape("(p.sum(0, keepdim=True): Tensor[P")):
            torch.cat([r, torch.tanh(p.sum(0, keepdim=True))])
        with pytest.raises(SpmdTypeError, match=re.escape("(p[0]: Tensor[P")):
            torch.sigmoid(p[0])

        class Block(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = torch.nn.Linear(4, 4, bias=False)

            def forward(self, h: torch.Tensor) -> torch.Tensor:
                return F.gelu(self.fc(h * 1.0))

        block = Block()
        spmd.declare(block.fc.weight, Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError) as e:  # gelu's operand is the module call's result
            block(p)
        assert "(self.fc(h * 1.0): Tensor[P" in str(e.value)

        class Mixed(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = torch.nn.Linear(4, 4, bias=False)

            def forward(self, h: torch.Tensor) -> torch.Tensor:
                return self.fc(h * 1.0)

        mixed = Mixed()
        spmd.declare(mixed.fc.weight, Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            mixed(typed(mk(), Tensor[V["tp"]]))
        # linear(h * 1.0, weight) is not what `self.fc(h * 1.0)` lists (self.fc, h * 1.0):
        # not paired by position, so the input is not called "self.fc"
        assert "self.fc.weight" in str(e.value) and "(self.fc:" not in str(e.value)


def test_a_matmul_names_its_transposed_operand_as_written() -> None:
    """``scale * fi @ ft.T`` (probe-contrast, session 42): ``ft.T`` is a new view at every
    read, no variable holds it, so the pairing of the source's operands with the values
    failed and the message named the matmul's internal arguments (``matmul(x, y)``, a fix
    ``spmd.declare(y, ...)`` naming nothing in the code).  ``.T``, ``.mT`` of a named tensor
    now pair with the view they make."""
    with spmd.typecheck():
        fi = typed(torch.randn(4, 3), Tensor[S[0, "tp"]])
        ft = typed(torch.randn(4, 3), Tensor[S[0, "tp"]])
        scale = typed(torch.tensor(2.0), Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError, match="diagonal block") as e:
            scale * fi @ ft.T
        assert str(e.value).startswith("matmul(scale * fi, ft.T): ")
        assert 'spmd.declare(ft.T, Tensor[V["tp"]])' in str(e.value)
        with pytest.raises(SpmdTypeError, match="diagonal block") as e:
            fi @ ft.mT
        assert str(e.value).startswith("matmul(fi, ft.mT): ")
        with pytest.raises(SpmdTypeError, match="diagonal block") as e:
            torch.mm(fi, ft.T)
        assert str(e.value).startswith("mm(fi, ft.T): ")


def test_every_output_is_typed() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[P["tp"]])
        for part in (*x.split(2), *x.chunk(2, dim=1), *x.unbind(0), *x.tensor_split(2)):
            assert spmd.typeof(part) == ty(tp=PARTIAL)
        assert [spmd.typeof(row) for row in x] == [ty(tp=PARTIAL)] * 4  # iteration
        v = typed(mk(), Tensor[V["tp"]])
        values, indices = v.max(dim=0)
        assert spmd.typeof(values) == spmd.typeof(indices) == ty(tp=VARYING)


def test_reductions_keep_the_shard_dim_they_do_not_reduce() -> None:
    """The engine's rule (ops.shard_dim_after), as the static checker applies it."""
    with spmd.typecheck():
        x = typed(torch.randn(2, 3, 4), Tensor[S[2, "tp"], R["dp"]])
        assert spmd.typeof(x.sum(0)) == ty(tp=shard(1), dp=REPLICATE)
        assert spmd.typeof(x.sum(dim=0, keepdim=True)) == ty(tp=shard(2), dp=REPLICATE)
        assert spmd.typeof(torch.sum(x, 1)) == ty(tp=shard(1), dp=REPLICATE)
        assert spmd.typeof(x.sum(dim=(0, 1))) == ty(tp=shard(0), dp=REPLICATE)
        assert spmd.typeof(x.mean(-3)) == ty(tp=shard(1), dp=REPLICATE)  # the rank is known here
        assert spmd.typeof(x.amax(1)) == ty(tp=shard(1), dp=REPLICATE)
        assert spmd.typeof(x.cumsum(0)) == ty(tp=shard(2), dp=REPLICATE)
        # the shard dim itself reduced, or every dim: V
        assert spmd.typeof(x.sum(2)) == ty(tp=VARYING, dp=REPLICATE)
        assert spmd.typeof(x.sum(-1)) == ty(tp=VARYING, dp=REPLICATE)
        assert spmd.typeof(x.sum()) == ty(tp=VARYING, dp=REPLICATE)
        # a scan along the shard dim: an error (ops.scan_along_shard_error); declared V, this rank's
        assert spmd.typeof(spmd.declare(x, Tensor[V["tp"], R["dp"]]).cumsum(2)) == ty(tp=VARYING, dp=REPLICATE)
        with pytest.raises(SpmdTypeError, match="scans the dim sharded"):
            x.cumsum(2)
        # std(dim, unbiased): the third positional argument is not keepdim
        assert spmd.typeof(x.std(0, True)) == ty(tp=shard(1), dp=REPLICATE)
        assert spmd.typeof(x.std(0, keepdim=True)) == ty(tp=shard(2), dp=REPLICATE)


def test_normalising_the_shard_dim_is_an_error() -> None:
    """ops.normalised_along_shard_error in the check mode: a softmax, normalize, layer_norm or
    rms_norm (functional, method or module) over the dim sharded on an axis computes per-rank
    statistics; declared V first it is this rank's own; over another dim the layout is kept."""
    with spmd.typecheck():
        x = typed(torch.randn(2, 3, 4), Tensor[S[2, "tp"], R["dp"]])
        for call in (lambda: F.softmax(x, -1), lambda: x.softmax(2), lambda: torch.log_softmax(x, 2),
                     lambda: F.normalize(x, dim=-1), lambda: F.layer_norm(x, (4,)),
                     lambda: F.rms_norm(x, [4]), lambda: nn.LayerNorm(4)(x),
                     lambda: nn.Softmax(dim=-1)(x)):
            with pytest.raises(SpmdTypeError, match='normalises the dim sharded on "tp"'):
                call()
        h = typed(torch.randn(3, 4), Tensor[S[1, "tp"]])
        with pytest.raises(SpmdTypeError, match="per-rank statistics"):
            F.normalize(h)  # its default dim=1
        assert spmd.typeof(spmd.declare(x, Tensor[V["tp"], R["dp"]]).softmax(-1)) == ty(tp=VARYING, dp=REPLICATE)
        assert spmd.typeof(F.softmax(x, 1)) == ty(tp=shard(2), dp=REPLICATE)
        # Megatron's LayerNorm over the hidden dim of a sequence-parallel S(0) activation
        s0 = typed(torch.randn(3, 2, 4), Tensor[S[0, "tp"], R["dp"]])
        assert spmd.typeof(F.layer_norm(s0, (4,))) == ty(tp=shard(0), dp=REPLICATE)
        assert spmd.typeof(nn.LayerNorm(4)(s0)).get("tp") == shard(0)  # (its weight untyped)


def test_views_and_joins_move_the_shard_dim() -> None:
    """The engine's rule (views.moved_dim), as the static checker applies it; the rank (and
    for squeeze the sizes of 1) is known here."""
    with spmd.typecheck():
        x = typed(torch.randn(2, 3, 4), Tensor[S[1, "tp"], R["dp"]])
        y = typed(torch.randn(2, 3, 4), Tensor[S[1, "tp"], R["dp"]])

        def tp(t: torch.Tensor) -> object:
            return spmd.typeof(t).get("tp")  # type: ignore[union-attr]

        assert spmd.typeof(x.transpose(0, 1)) == ty(tp=shard(0), dp=REPLICATE)
        assert tp(x.permute(2, 0, 1)) == tp(x.permute((2, 0, 1))) == shard(2)
        assert tp(torch.movedim(x, 1, -1)) == shard(2)
        assert tp(x[0].T) == shard(1) and tp(x.mT) == shard(2)
        assert tp(x.unsqueeze(0)) == shard(2) and tp(x[None]) == shard(2)
        assert tp(x[0]) == shard(0) and tp(x[:, :, 1]) == shard(1) and tp(x[..., 0]) == shard(1)
        assert tp(x.select(2, 0)) == shard(1) and tp(x.narrow(0, 0, 1)) == shard(1)
        assert tp(torch.cat([x, y], dim=2)) == shard(1)
        assert tp(torch.stack([x, y], dim=1)) == shard(2)
        z = typed(torch.randn(1, 3, 1), Tensor[S[1, "tp"]])
        assert tp(z.squeeze()) == shard(0) and tp(z.squeeze(-1)) == shard(1)
        # a reshape from the local sizes (views.reshaped_dim): dim 1 leads the merged (3, 4)
        assert tp(x.reshape(2, 12)) == shard(1) and tp(x.view(2, 3, 2, 2)) == shard(1)
        # cutting into the shard dim, merging it under another (6 = 2 x 3), or a dim not known: V
        for cut in (x[:, 0], x[:, :2], x.select(1, 0), x.narrow(1, 0, 2),
                    torch.cat([x, y], dim=1), x[:, torch.tensor([0, 1])], x.reshape(6, 4)):
            assert tp(cut) == VARYING
        # beside a tensor that is not S(1): V
        r = typed(torch.randn(2, 3, 4), Tensor[R["tp"]])
        assert tp(torch.cat([x, r], dim=2)) == VARYING


def test_contractions_carry_the_shard_dim_at_the_ranks_seen() -> None:
    """The engine's contraction rule (contractions.contracted_layout) with the ranks known:
    where the static checker, not seeing them, says V (torch.matmul / @, linear's negative
    dims and column-parallel weight: tests/plugin/cases/contractions.test), the check mode
    keeps the dim."""
    with spmd.typecheck():
        def tp(t: torch.Tensor) -> object:
            return spmd.typeof(t).get("tp")  # type: ignore[union-attr]

        x = typed(torch.randn(2, 3, 4), Tensor[S[1, "tp"]])
        xs = typed(torch.randn(2, 3, 4), Tensor[S[-2, "tp"]])
        a = typed(torch.randn(3, 4), Tensor[S[0, "tp"]])
        w = typed(torch.randn(4, 5), Tensor[R["tp"]])
        b3 = typed(torch.randn(2, 4, 5), Tensor[R["tp"]])
        v1 = typed(torch.randn(4), Tensor[R["tp"]])
        assert tp(x @ w) == tp(torch.matmul(x, w)) == tp(x.matmul(w)) == shard(1)
        assert tp(xs @ w) == shard(-2)
        assert tp(a @ b3) == shard(-2)  # [3/tp, 4] @ [2, 4, 5] -> [2, 3/tp, 5]: dim 1
        assert tp(xs @ v1) == shard(-1)  # [2, 3/tp, 4] @ [4] -> [2, 3/tp]
        # two labels that stay in the result (x's rows, b's batch): each rank holds one
        # diagonal block, an error since session 41 (V before; contractions.diagonal_block)
        with pytest.raises(SpmdTypeError, match="diagonal block"):
            x @ typed(torch.randn(2, 4, 5), Tensor[S[0, "tp"]])
        # linear: x's dims but the last keep their place; a weight sharded on its out
        # features (column parallel) gives the last dim
        wl = typed(torch.randn(5, 4), Tensor[R["tp"]])
        assert tp(F.linear(x, wl)) == shard(1) and tp(F.linear(xs, wl)) == shard(-2)
        xr = typed(torch.randn(2, 3, 4), Tensor[R["tp"]])
        wc = typed(torch.randn(5, 4), Tensor[S[0, "tp"]])
        bc = typed(torch.randn(5), Tensor[S[0, "tp"]])
        assert tp(F.linear(xr, wc)) == tp(F.linear(xr, wc, bc)) == shard(-1)
        assert tp(F.linear(xr, wc, typed(torch.randn(5), Tensor[R["tp"]]))) == VARYING
        # nn.Linear: its weight untyped (it may vary): V
        assert tp(nn.Linear(4, 5)(x)) == VARYING
        # einsum: the equation read from the call, list or varargs
        assert tp(torch.einsum("bsh,hd->bsd", x, w)) == shard(1)
        assert tp(torch.einsum("bsh,hd", [x, w])) == shard(2)
        assert tp(spmd.einsum("bsh,hd->bsd", x, w)) == shard(1)
        # attention: heads sharded with grouped-query key/value heads; an untyped mask: V
        q = typed(torch.randn(2, 4, 3, 8), Tensor[S[1, "tp"]])
        kv = typed(torch.randn(2, 2, 5, 8), Tensor[S[1, "tp"]])
        assert tp(F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)) == shard(1)
        mask = torch.ones(3, 5, dtype=torch.bool)
        assert tp(F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, enable_gqa=True)) == VARYING
        # a 3-d attention: dim 1 is the sequence; the keys sharded too: V (the static
        # checker, taking q, k and v as (N, ..., H, L, E), says S(1))
        q3 = typed(torch.randn(4, 3, 8), Tensor[S[1, "tp"]])
        assert tp(F.scaled_dot_product_attention(q3, q3, q3)) == VARYING


def test_factories_are_untyped() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[R["tp"]])
        for t in (torch.zeros(2), torch.randn(2), torch.zeros_like(x), x.new_zeros(2),
                  torch.full_like(x, 2.0), torch.arange(3), torch.tensor([1.0])):
            assert spmd.typeof(t) is None


def test_untyped_only_ops_stay_untyped() -> None:
    with spmd.typecheck():
        a, b = torch.randn(3), torch.randn(3)
        assert spmd.typeof(torch.relu(a + b)) is None


def test_unknown_op_is_nonlinear() -> None:
    with spmd.typecheck():
        assert spmd.typeof(torch.lgamma(typed(mk(), Tensor[R["tp"]]))) == ty(tp=REPLICATE)
        with pytest.raises(SpmdTypeError) as e:
            torch.lgamma(typed(mk(), Tensor[P["tp"]]))
        assert e.value.code == "spmd-partial-nonlinear"


def test_properties_data_T_and_grad() -> None:
    with spmd.typecheck():
        x = typed(torch.randn(4, 4, requires_grad=True), Tensor[P["tp"], I["dp"]])
        assert spmd.typeof(x.T) == spmd.typeof(x.mT) == spmd.typeof(x.data) == spmd.typeof(x)
        assert x.shape == (4, 4)  # metadata passes through
        x.sum().backward()
        assert spmd.typeof(x.grad) == ty(tp=REPLICATE, dp=INVARIANT)  # the dual


def test_an_assigned_grad_keeps_its_type_and_the_optimizer_steps() -> None:
    """``w.grad = all_reduce(w.grad, ...)``: the assigned tensor keeps its type (R) at later
    reads, so clipping and the optimizer's step run in check mode; it was re-stamped with the
    dual (P) at every read and Adam's ``addcmul_(grad, grad)`` raised.  Autograd's own
    gradient still reads as the dual, also after accumulating into the same tensor."""
    w = nn.Parameter(torch.randn(4, 4))
    opt = torch.optim.AdamW([w], lr=1e-3)
    with spmd.typecheck():
        for _ in range(2):
            wt = typed(w, Tensor[R["dp"]])
            x = typed(torch.randn(2, 4), Tensor[P["dp"]])  # a pending sum (no mesh here)
            loss = (x @ wt).sum()
            loss.backward()
            assert spmd.typeof(w.grad) == ty(dp=PARTIAL)  # autograd's gradient: the dual
            with pytest.raises(SpmdTypeError):
                torch.addcmul(w.grad, w.grad, w.grad)  # a P gradient squared: rejected
            w.grad = typed(torch.randn(4, 4), Tensor[R["dp"]])  # as all_reduce(w.grad, ...) gives
            assert spmd.typeof(w.grad) == ty(dp=REPLICATE)
            nn.utils.clip_grad_norm_([w], 1.0)
            opt.step()
            opt.zero_grad()
        # an autograd gradient accumulated in place into a tensor typed by the dual stamp
        wt = typed(w, Tensor[R["dp"]])
        x = typed(torch.randn(2, 4), Tensor[P["dp"]])
        (x @ wt).sum().backward()
        g = w.grad
        (x @ wt).sum().backward()
        assert w.grad is g and spmd.typeof(w.grad) == ty(dp=PARTIAL)


def test_an_assigned_grad_is_compared_at_the_parameters_rank() -> None:
    """``p.grad = all_reduce(g, "dp", src=P, dst=R)`` of a 1-d bias declared ``S[-1, "tp"]``
    (examples/sequence_parallel.py's b1): the runtime's collectives count a negative shard
    dim from the front, so the reduced gradient is S(0), the same layout as S(-1) at rank 1.
    It raised a false spmd-duality "S(0) on tp where S(-1) is needed", as did such a
    gradient given to ``y.backward(g)``.  On a 2-d tensor S(0) and S(-1) are two dims: still
    an error."""
    b = nn.Parameter(torch.randn(4))
    w = nn.Parameter(torch.randn(4, 4))
    with spmd.typecheck():
        typed(b, Tensor[S[-1, "tp"], R["dp"]])
        b.grad = typed(torch.randn(4), Tensor[S[0, "tp"], R["dp"]])  # as all_reduce returns it
        assert spmd.typeof(b.grad) == ty(tp=shard(0), dp=REPLICATE)
        typed(w, Tensor[S[-1, "tp"], R["dp"]])
        w.grad = typed(torch.randn(4, 4), Tensor[S[1, "tp"], R["dp"]])  # dim 1 is dim -1
        with pytest.raises(SpmdTypeError) as e:
            w.grad = typed(torch.randn(4, 4), Tensor[S[0, "tp"], R["dp"]])
        assert e.value.code == "spmd-duality", e.value
        assert 'S(0) on "tp" where S(-1) is needed' in str(e.value), e.value
        # the gradient given to a backward: the same comparison at the rank
        y = typed(mk(4), Tensor[S[-1, "tp"], R["dp"]]) * 2
        y.backward(typed(torch.ones(4), Tensor[S[0, "tp"], P["dp"]]))
        y = typed(mk(4, 4), Tensor[S[-1, "tp"], R["dp"]]) * 2
        with pytest.raises(SpmdTypeError) as e:
            y.backward(typed(torch.ones(4, 4), Tensor[S[0, "tp"], P["dp"]]))
        assert e.value.code == "spmd-duality", e.value


def test_an_untyped_assigned_grad_stays_untyped_until_autograd_accumulates_into_it() -> None:
    """``p.grad = torch.zeros_like(p)`` (priming Adam's state before loading an optimizer
    checkpoint): an untyped value put in ``.grad`` stays untyped (gradual) at later reads,
    so the step runs; it was read as the dual (P) and Adam's ``addcmul_`` raised a false
    spmd-partial-nonlinear.  Declared, it has the declared type.  A backward that
    accumulates into it leaves autograd's gradient in it: the dual again (at a read after
    the backward, and in a post-accumulate hook during it), so a forgotten reduction is
    still caught by the step."""
    w, u, v = (nn.Parameter(torch.randn(4)) for _ in range(3))
    opt = torch.optim.Adam([w, u, v], lr=0.0)
    seen: list[Any] = []
    with spmd.typecheck():
        for p in (w, u, v):
            typed(p, Tensor[R["dp"]])
            p.grad = torch.zeros_like(p)
        assert all(spmd.typeof(p.grad) is None for p in (w, u, v))
        opt.step()  # raised spmd-partial-nonlinear in addcmul_
        u.grad = torch.zeros_like(u)
        assert spmd.typeof(spmd.declare(u.grad, Tensor[R["dp"]])) == ty(dp=REPLICATE)
        assert spmd.typeof(u.grad) == ty(dp=REPLICATE)  # declared: kept
        opt.step()
        g = w.grad
        v.register_post_accumulate_grad_hook(lambda p: seen.append(spmd.typeof(p.grad)))
        x = typed(torch.randn(4), Tensor[V["dp"]])
        ((x * w).sum() + (x * v).sum()).backward(torch.tensor(1.0))  # into the assigned ones
        assert w.grad is g and spmd.typeof(w.grad) == ty(dp=PARTIAL)
        assert seen == [ty(dp=PARTIAL)] and spmd.typeof(v.grad) == ty(dp=PARTIAL)
        assert spmd.typeof(u.grad) == ty(dp=REPLICATE)  # untouched by the backward
        del g
        with pytest.raises(SpmdTypeError) as e:
            opt.step()
        assert e.value.code == "spmd-partial-nonlinear", e.value


def test_an_untyped_bucket_view_assigned_as_grad_reads_as_autograds_gradient() -> None:
    """``p.grad = flat[a:b].view_as(p)`` after the gradients were copied into an untyped flat
    bucket (DDP/ZeRO style): the view holds autograd's gradient, read as the dual (P), so a
    forgotten all-reduce of the bucket is caught at the step (the regression probe: left
    untyped like a fresh ``zeros_like``, it passed with the replicas off by 0.076)."""
    w = nn.Parameter(torch.randn(4))
    opt = torch.optim.SGD([w], lr=0.1)
    with spmd.typecheck():
        typed(w, Tensor[R["dp"]])
        x = typed(torch.randn(4), Tensor[V["dp"]])
        (x * w).sum().backward(torch.tensor(1.0))
        flat = torch.zeros(8)
        flat[:4].copy_(w.grad.view(-1))  # (the all-reduce of flat forgotten)
        w.grad = flat[:4].view_as(w)
        assert spmd.typeof(w.grad) == ty(dp=PARTIAL)
        with pytest.raises(SpmdTypeError) as e:
            opt.step()
        assert e.value.code == "spmd-partial-affine", e.value


def _two_replicated_parameters() -> tuple[nn.Parameter, nn.Parameter, torch.optim.SGD]:
    """Two parameters and their SGD optimizer, for the gradient-assignment tests below."""
    w = nn.Parameter(torch.randn(4))
    u = nn.Parameter(torch.randn(4))
    return w, u, torch.optim.SGD([w, u], lr=0.1)


def _first_backward(w: nn.Parameter, u: nn.Parameter) -> torch.Tensor:
    """Under spmd.typecheck(): w and u typed R on "cp", one backward of a V input through
    both (their .grad autograd's, P); the input returned for the next backward."""
    typed(w, Tensor[R["cp"]])
    typed(u, Tensor[R["cp"]])
    x = typed(torch.randn(2, 4), Tensor[V["cp"]])
    ((x * w).sum() + (x * u).sum()).backward(torch.tensor(1.0))
    return x


@pytest.mark.parametrize("zero", ["zero_", "zero_grad(set_to_none=False)"])
def test_an_assigned_grad_accumulated_into_reads_as_autograds_gradient_again(zero: str) -> None:
    """``w.grad = all_reduce(w.grad, ...)`` one step, the tensor zeroed in place (not set to
    None), the next backward accumulates into it: it holds autograd's gradient (the dual, P)
    again, so a forgotten reduction that step is caught by the optimizer's step (the R it
    was assigned with was read back: the replicas diverged silently).  A gradient this
    backward did not touch keeps its assigned type; in-place ops before it (clipping) too."""
    w, u, opt = _two_replicated_parameters()  # u: not in the second backward
    with spmd.typecheck():
        x = _first_backward(w, u)
        w.grad = typed(torch.randn(4), Tensor[R["cp"]])  # as all_reduce(w.grad, ...) gives
        u.grad = typed(torch.randn(4), Tensor[R["cp"]])
        nn.utils.clip_grad_norm_([w, u], 1.0)  # in place on both: their types kept
        opt.step()
        if zero == "zero_":
            w.grad.zero_()
            u.grad.zero_()
        else:
            opt.zero_grad(set_to_none=False)
        g = w.grad
        assert spmd.typeof(g) == ty(cp=REPLICATE)  # zeroed in place: still the assigned tensor
        (x * w).sum().backward(torch.tensor(1.0))  # accumulates into g; the reduction forgotten
        assert w.grad is g
        assert spmd.typeof(w.grad) == ty(cp=PARTIAL)
        assert spmd.typeof(u.grad) == ty(cp=REPLICATE)  # untouched by this backward
        del g  # (the error names a tensor by a name the caller holds it by)
        with pytest.raises(SpmdTypeError) as e:
            opt.step()
        assert e.value.code == "spmd-partial-affine", e.value
        assert "w.grad" in str(e.value)


@pytest.mark.parametrize("zero", ["zero_", "fill_(0)", "fill_(0.0)", "zero_grad(set_to_none=False)",
                                  "none", "fill_(1)"])
def test_gradients_that_are_views_of_one_reduced_bucket_zeroed_in_place(zero: str) -> None:
    """DDP-style: one flat bucket all-reduced, each ``p.grad`` a view of it (the views share
    one version counter: zeroing ``u.grad`` moves ``w.grad``'s version too).  Zeroed in place
    before the next backward, each holds autograd's gradient again (accepted, P); not zeroed
    (or filled with a nonzero value), the next backward still raises spmd-partial-affine."""
    w, u, opt = _two_replicated_parameters()
    with spmd.typecheck():
        x = _first_backward(w, u)
        flat = typed(torch.randn(8), Tensor[R["cp"]])  # as all_reduce(cat(grads), ...) gives
        w.grad = flat[:4].view_as(w)
        u.grad = flat[4:].view_as(u)
        assert spmd.typeof(w.grad) == ty(cp=REPLICATE)
        opt.step()
        if zero == "zero_grad(set_to_none=False)":
            opt.zero_grad(set_to_none=False)
        elif zero != "none":
            for g in (w.grad, u.grad):
                if zero == "zero_":
                    g.zero_()
                else:
                    g.fill_(float(zero[6:-1]) if "." in zero else int(zero[6:-1]))
        if zero in ("none", "fill_(1)"):
            with pytest.raises(SpmdTypeError) as e:
                ((x * w).sum() + (x * u).sum()).backward(torch.tensor(1.0))
            assert e.value.code == "spmd-partial-affine", e.value
            return
        ((x * w).sum() + (x * u).sum()).backward(torch.tensor(1.0))
        assert spmd.typeof(w.grad) == ty(cp=PARTIAL)
        assert spmd.typeof(u.grad) == ty(cp=PARTIAL)


@pytest.mark.parametrize("call", ["backward", "autograd.backward"])
def test_a_gradient_reduced_every_micro_batch_without_zeroing_is_caught_at_the_backward(
        call: str) -> None:
    """``w.grad = all_reduce(w.grad, ...)`` after each micro-batch, never zeroed: the next
    backward accumulates a Partial summand into the R tensor (the earlier micro-batches then
    counted once per reduction): spmd-partial-affine at that backward, the add_ rule's message
    naming ``w.grad`` (it passed: the sum was read back as P, and the next reduction typed
    it R).  An I parameter's assigned I gradient plus autograd's I: I."""
    w = nn.Parameter(torch.randn(4))
    with spmd.typecheck():
        typed(w, Tensor[R["cp"]])
        x = typed(torch.randn(2, 4), Tensor[V["cp"]])

        def backward() -> None:
            loss = (x * w).sum()
            if call == "backward":
                loss.backward(torch.tensor(1.0))
            else:
                torch.autograd.backward([loss], [torch.tensor(1.0)])
        backward()
        w.grad = typed(torch.randn(4), Tensor[R["cp"]])  # as all_reduce(w.grad, ...) gives
        with pytest.raises(SpmdTypeError) as e:
            backward()
        assert e.value.code == "spmd-partial-affine", e.value
        assert str(e.value) == (
            'Partial on "cp" (autograd\'s new gradient: Tensor[P["cp"]]) added to a Replicate '
            'value (w.grad: Tensor[R["cp"]]) as this backward accumulates into w.grad: the '
            'all-reduce the sum needs would count what w.grad held once per rank; reduce w.grad '
            'once, after the last micro-batch\'s backward, or set w.grad = None before the next '
            'backward (model.zero_grad() for all of a model\'s parameters; optimizer.zero_grad() '
            'only for those it updates); if w is frozen, w.requires_grad_(False) (no gradient at '
            'all)  [spmd-partial-affine]'), e.value
        assert spmd.typeof(w.grad) == ty(cp=PARTIAL)  # no stale R after the error
        # create_graph=True: autograd accumulates out of place (a new tensor in w.grad)
        w.grad = typed(torch.randn(4), Tensor[R["cp"]])
        with pytest.raises(SpmdTypeError) as e:
            (x * w).sum().backward(torch.tensor(1.0), create_graph=True)
        assert e.value.code == "spmd-partial-affine" and "(w.grad: " in str(e.value), e.value
        w.grad = None
        # an I parameter: I + I
        u = typed(nn.Parameter(torch.randn(4)), Tensor[I["cp"]])
        (u * 2).sum().backward()
        u.grad = typed(torch.randn(4), Tensor[I["cp"]])
        g = u.grad
        (u * 2).sum().backward()
        assert u.grad is g and spmd.typeof(u.grad) == ty(cp=INVARIANT)
        (u * 2).sum().backward(create_graph=True)
        assert u.grad is not g and spmd.typeof(u.grad) == ty(cp=INVARIANT)
        u.grad = None  # (create_graph's reference cycle)


@pytest.mark.parametrize("foreach", [False, True])
def test_an_in_place_op_on_an_assigned_grad_during_a_backward_is_no_accumulation(
        foreach: bool) -> None:
    """A hook scaling another parameter's assigned R gradient in place during a backward that
    does not reach that parameter: the version moved by the check mode's own op, not by
    autograd; the gradient stays R (no false accumulation error)."""
    w = nn.Parameter(torch.randn(4))
    v = nn.Parameter(torch.randn(4))
    with spmd.typecheck():
        typed(w, Tensor[R["cp"]])
        typed(v, Tensor[R["cp"]])
        x = typed(torch.randn(2, 4), Tensor[V["cp"]])
        (x * v).sum().backward(torch.tensor(1.0))
        v.grad = typed(torch.randn(4), Tensor[R["cp"]])

        def hook(_: torch.Tensor) -> None:
            with torch.no_grad():
                if foreach:
                    torch._foreach_mul_([v.grad], 0.5)
                else:
                    v.grad.mul_(0.5)
        w.register_post_accumulate_grad_hook(hook)
        (x * w).sum().backward(torch.tensor(1.0))
        assert spmd.typeof(v.grad) == ty(cp=REPLICATE)
        assert spmd.typeof(w.grad) == ty(cp=PARTIAL)


@pytest.mark.parametrize("reset", ["none", "zero_", "zero_grad", "set_to_none", "accumulator",
                                   "no_sync"])
def test_gradient_accumulation_patterns_that_reduce_once_pass(reset: str) -> None:
    """The correct micro-batch patterns: the gradient set to None or zeroed before the next
    backward (each reduction then adds to a separate accumulator), or accumulated unreduced
    (no_sync) and reduced once after the last micro-batch: no error, and the step passes."""
    w = nn.Parameter(torch.randn(4))
    opt = torch.optim.SGD([w], lr=0.1)
    with spmd.typecheck():
        typed(w, Tensor[R["cp"]])
        x = typed(torch.randn(2, 4), Tensor[V["cp"]])
        acc = None
        for _ in range(3):
            (x * w).sum().backward(torch.tensor(1.0))
            if reset == "no_sync":
                assert spmd.typeof(w.grad) == ty(cp=PARTIAL)
                continue
            reduced = typed(torch.randn(4), Tensor[R["cp"]])  # as all_reduce(w.grad, ...) gives
            acc = reduced if acc is None else acc + reduced
            if reset == "accumulator":  # autograd's gradient zeroed, the reduction kept apart
                w.grad.zero_()
                continue
            w.grad = reduced
            if reset == "none":
                w.grad = None
            elif reset == "zero_":
                w.grad.zero_()
            elif reset == "zero_grad":
                opt.zero_grad(set_to_none=False)
            elif reset == "set_to_none":
                opt.zero_grad()
        w.grad = typed(torch.randn(4), Tensor[R["cp"]]) if acc is None else acc
        assert spmd.typeof(w.grad) == ty(cp=REPLICATE)
        opt.step()


_OPTIMIZERS = {"SGD": ("SGD", {}), "SGD-momentum": ("SGD", {"momentum": 0.9}),
               "Adam-amsgrad": ("Adam", {"amsgrad": True}), "AdamW": ("AdamW", {}),
               "Adagrad": ("Adagrad", {})}
_IMPLS = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


@pytest.mark.parametrize("opt_name", list(_OPTIMIZERS))
@pytest.mark.parametrize("impl", list(_IMPLS))
def test_a_forgotten_gradient_all_reduce_is_caught_by_the_optimizer_step(
        opt_name: str, impl: str) -> None:
    """A Replicate weight used on this rank's sequence chunk (cp) has a Partial gradient;
    stepping without all-reducing it is the affine (SGD) or non-linear (Adam) error, also
    through the multi-tensor ``torch._foreach_*`` ops the optimizers run with foreach=True
    (the default on GPUs) and the fused steps (``torch._fused_adam_`` & co., fused=True), which
    were untyped; the operand is named ``w.grad``."""
    cls, kw = _OPTIMIZERS[opt_name]
    kw = {**kw, **_IMPLS[impl]}

    def make() -> torch.optim.Optimizer:
        return getattr(torch.optim, cls)([w], lr=0.1, **kw)
    w = nn.Parameter(torch.randn(4))
    opt = make()
    with spmd.typecheck():
        typed(w, Tensor[R["cp"]])
        x = typed(torch.randn(2, 4), Tensor[V["cp"]])
        (x * w).sum().backward(torch.tensor(1.0))  # autograd's gradient: the dual, P
        assert spmd.typeof(w.grad) == ty(cp=PARTIAL)
        with pytest.raises(SpmdTypeError) as e:
            opt.step()
        assert e.value.code == ("spmd-partial-affine" if cls == "SGD"
                                else "spmd-partial-nonlinear")
        if opt_name != "SGD-momentum" or impl == "fused":  # (else the error is at the
            # momentum buffer, a clone of w.grad no caller expression names)
            assert '(w.grad: Tensor[P["cp"]])' in str(e.value)
            assert 'all_reduce(w.grad, "cp", src=P, dst=R)' in str(e.value)
        # all-reduced (the type all_reduce(w.grad, "cp", src=P, dst=R) gives): steps (a new
        # optimizer: the failed step left Adam's moments Partial); the weight stays R, the
        # states R or unknown (what the step's untyped inputs leave them)
        w.grad = typed(torch.randn(4), Tensor[R["cp"]])
        opt = make()
        opt.step()
        opt.step()
        assert spmd.typeof(w) == ty(cp=REPLICATE)
        states = [v for v in opt.state[w].values() if isinstance(v, torch.Tensor)]
        assert bool(states) == (opt_name != "SGD")
        assert all(spmd.typeof(v) in (None, ty(cp=REPLICATE)) for v in states), states
        if opt_name == "SGD-momentum":  # the buffer: a sum of R gradients (the first fused
            # step overwrites torch's empty_like buffer, then adds into it)
            assert [spmd.typeof(v) for v in states] == [ty(cp=REPLICATE)]
        assert spmd.typeof(w.grad) == ty(cp=REPLICATE)


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_norm_of_a_partial_gradient_is_caught(foreach: bool) -> None:
    """clip_grad_norm_ before the all-reduce: the norm of a pending sum (``_foreach_norm``
    by default, which passed untyped)."""
    w = nn.Parameter(torch.randn(4))
    with spmd.typecheck():
        typed(w, Tensor[R["cp"]])
        (typed(torch.randn(2, 4), Tensor[V["cp"]]) * w).sum().backward(torch.tensor(1.0))
        with pytest.raises(SpmdTypeError) as e:
            nn.utils.clip_grad_norm_([w], 1.0, foreach=foreach)
        assert e.value.code == "spmd-partial-nonlinear"
        assert "(w.grad: " in str(e.value)


def test_messages_name_gradients_module_parameters_and_dict_entries() -> None:
    """The operands of an optimizer's step are named from the caller: ``model.fc.weight``
    and its ``.grad``, ``params["w"].grad`` (they were the placeholders x and y)."""
    model = nn.Sequential()
    model.fc = nn.Linear(4, 4, bias=False)
    params = {"w": nn.Parameter(torch.randn(4))}
    x = torch.randn(4)
    for name in ("model.fc.weight", 'params["w"]'):
        opt = torch.optim.SGD(model.parameters() if name.startswith("model") else params.values(),
                              lr=0.1)
        with spmd.typecheck():
            typed(eval(name), Tensor[R["cp"]])
            (typed(x, Tensor[V["cp"]]) * eval(name)).sum().backward(torch.tensor(1.0))
            with pytest.raises(SpmdTypeError) as e:
                opt.step()
        assert (f'Partial on "cp" ({name}.grad: Tensor[P["cp"]]) added to a Replicate value '
                f'({name}: ') in str(e.value)


def test_foreach_ops_follow_the_op_rule_per_position() -> None:
    """``torch._foreach_X`` is X at each list position: results typed by position, the
    mutated list's types kept or the in-place error, scalars and single tensors shared."""
    with spmd.typecheck():
        r = typed(mk(4), Tensor[R["tp"]])
        v = typed(mk(4), Tensor[V["tp"]])
        p = typed(mk(4), Tensor[P["tp"]])
        out = torch._foreach_mul([r, v], 2.0)
        assert [spmd.typeof(t) for t in out] == [ty(tp=REPLICATE), ty(tp=VARYING)]
        out = torch._foreach_add([r, p], [v, p])
        assert [spmd.typeof(t) for t in out] == [ty(tp=VARYING), ty(tp=PARTIAL)]
        with pytest.raises(SpmdTypeError) as e:
            torch._foreach_exp([r, p])
        assert e.value.code == "spmd-partial-nonlinear"
        with torch.no_grad():
            with pytest.raises(SpmdTypeError) as e:
                torch._foreach_add_([r], [v])  # would make r vary
            assert e.value.code == "spmd-inplace"
            torch._foreach_add_([v, p], [r, p])
        assert [spmd.typeof(t) for t in (v, p)] == [ty(tp=VARYING), ty(tp=PARTIAL)]


def test_autograd_grad_gives_duals_and_checks_the_loss() -> None:
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        r = typed(mk(), Tensor[R["tp"]])
        gp, gr = torch.autograd.grad((p * r).sum(), [p, r])
        assert spmd.typeof(gp) == ty(tp=REPLICATE)
        assert spmd.typeof(gr) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad((r * r).sum(), [r])
        assert e.value.code == "spmd-backward"
        with pytest.raises(SpmdTypeError):
            torch.autograd.backward([(r * 2).sum()])
        torch.autograd.backward([(r * 2).sum()], [torch.tensor(1.0)])  # explicit gradient


def test_autograd_grad_loss_message_names_the_call() -> None:
    """The check mode's spmd-backward for ``torch.autograd.grad`` (and
    ``torch.autograd.backward``) without gradients names the call, as the static checker does,
    not ``loss.backward()`` (a probe's message named a ``loss`` its code had not): the output's
    name when the caller holds it, else ``(...)`` and "the output"."""
    with spmd.typecheck():
        v = typed(torch.randn(3, requires_grad=True), Tensor[V["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(torch.tanh(v).sum(), v)
        msg = str(e.value)
        assert msg.startswith('torch.autograd.grad(...) without grad_outputs needs the loss '
                              'Invariant or Partial on "tp"'), msg
        assert "reinterpret(the output, \"tp\", src=V, dst=P)" in msg, msg
        assert "loss.backward()" not in msg and "reinterpret(loss" not in msg, msg
        score = torch.tanh(v).sum()
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(score, v)
        assert str(e.value).startswith("torch.autograd.grad(score, ...) without grad_outputs "
                                       "needs the loss"), str(e.value)
        assert "reinterpret(score, " in str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.backward([score])
        assert str(e.value).startswith("torch.autograd.backward(score, ...) without "
                                       "grad_tensors needs the loss"), str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            score.backward()
        assert str(e.value).startswith("score.backward() needs the loss"), str(e.value)


def test_grads_batched_shift_the_shard_dims() -> None:
    """``is_grads_batched=True``: dim 0 of each grad_outputs tensor and result is the batch
    (the shared cases autograd-grad-batched-*); also given positionally."""
    with spmd.typecheck():
        w = typed(torch.randn(4, 3, requires_grad=True), Tensor[S[0, "tp"]])
        out = w * 2.0
        vs = typed(torch.randn(5, 4, 3), Tensor[S[1, "tp"]])
        (g,) = torch.autograd.grad(out, w, vs, True, False, True, None, True)
        assert spmd.typeof(g) == ty(tp=shard(1))
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(out, w, typed(torch.randn(5, 4, 3), Tensor[S[0, "tp"]]),
                                is_grads_batched=True)
        assert "with is_grads_batched=True dim 0 of" in str(e.value), str(e.value)


def test_an_explicit_gradient_must_be_the_dual_of_its_output() -> None:
    """``out.backward(g)``, ``torch.autograd.backward(outs, gs)``, ``torch.autograd.grad(outs,
    xs, grad_outputs=gs)``: a typed gradient must be the dual of its output on every axis
    (engine ``duality.check_grad_outputs``, the static checker's spmd-duality with its
    message); a Partial gradient given for an I output passed (the I parameter's gradient
    then differs per rank).  An untyped gradient or output stays gradual; each output of a
    list is paired with its own gradient."""
    with spmd.typecheck():
        w = typed(torch.randn(3, requires_grad=True), Tensor[I["tp"]])
        out = w * 3.0
        g = typed(torch.ones(3), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            out.backward(g)
        assert str(e.value) == (
            'out.backward: the gradient g (Tensor[P["tp"]]) given for out (Tensor[I["tp"]]) '
            'must be Tensor[I["tp"]] (P on "tp" where I is needed); P to I is a reduction: '
            'use all_reduce(g, "tp", src=P, dst=I)  [spmd-duality]')
        assert w.grad is None  # raised before the backward ran
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(out, [w], grad_outputs=g)
        assert str(e.value).startswith("torch.autograd.grad: the gradient g ")
        r = typed(torch.randn(3, requires_grad=True), Tensor[R["tp"]])
        o1, o2 = w * 2.0, r * 2.0
        gi = typed(torch.ones(3), Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.backward([o1, o2], [gi, gi])  # o2 is R: its gradient is P
        assert e.value.code == "spmd-duality"
        assert "given for o2 (Tensor[R[\"tp\"]]) must be Tensor[P[\"tp\"]]" in str(e.value)
        torch.autograd.backward([o1, o2], [gi, g])
        assert spmd.typeof(w.grad) == ty(tp=INVARIANT) and spmd.typeof(r.grad) == ty(tp=PARTIAL)
        (w * 3.0).backward(torch.ones(3))  # untyped: gradual
        (torch.randn(3, requires_grad=True) * 2).backward(g)  # untyped output: gradual
        two = typed(torch.randn(3, requires_grad=True), Tensor[I["dp"], R["tp"]])
        (two * 2).backward(typed(torch.ones(3), Tensor[I["dp"], P["tp"]]))
        with pytest.raises(SpmdTypeError) as e:
            (two * 2).backward(typed(torch.ones(3), Tensor[P["dp", "tp"]]))
        assert 'P on "dp" where I is needed' in str(e.value)


def test_backward_message() -> None:
    with spmd.typecheck():
        r = typed(mk(), Tensor[R["tp"]])
        loss = r.sum()
        with pytest.raises(SpmdTypeError) as e:
            loss.backward()
        assert str(e.value).startswith('loss.backward() needs the loss Invariant or Partial on "tp"')


def test_backward_message_two_axes_one_error() -> None:
    # the static checker's one error (engine check_backward): the axes merged, the fix nested
    with spmd.typecheck():
        loss = typed(mk(), Tensor[R["tp"], V["dp"]]).sum()
        with pytest.raises(SpmdTypeError) as e:
            loss.backward()
        assert 'on "dp" and "tp", but it is Varying on "dp" and Replicate on "tp"' in str(e.value)
        assert 'reinterpret(reinterpret(loss, "dp", src=V, dst=P), "tp", src=R, dst=I)' in str(e.value)


def test_backward_of_a_varying_loss_with_dims_offers_the_sum() -> None:
    # a per-token loss typed V (its shard dim lost by a mean over the last dim): its
    # reinterpret V->P is no scalar either, and torch refuses to seed it; spmd.sum is the fix
    with spmd.typecheck():
        w = typed(torch.randn(4, 4, requires_grad=True), Tensor[R["tp"]])
        loss = (typed(mk(), Tensor[V["tp"]]) * w).mean(-1)
        assert loss.dim() == 1
        with pytest.raises(SpmdTypeError) as e:
            loss.backward()
        assert 'spmd.sum(loss, out_partial_axes="tp") to mean the sum of every rank\'s elements' in str(e.value)
        assert "src=V, dst=P" not in str(e.value)
        spmd.sum(loss, out_partial_axes="tp").backward()
        assert w.grad is not None
        scalar = (typed(mk(), Tensor[V["tp"]]) * w).mean()
        with pytest.raises(SpmdTypeError) as e:
            scalar.backward()
        assert 'reinterpret(scalar, "tp", src=V, dst=P)' in str(e.value)


def test_nn_modules_and_functional() -> None:
    lin = nn.Linear(4, 4)
    with spmd.typecheck():
        spmd.declare(lin.weight, Tensor[R["tp"]])
        spmd.declare(lin.bias, Tensor[R["tp"]])
        assert spmd.typeof(lin(typed(mk(), Tensor[V["tp"]]))) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            lin(typed(mk(), Tensor[P["tp"]]))  # the R bias is added to a P product
        assert e.value.code == "spmd-partial-affine"
        v = typed(mk(), Tensor[V["tp"]])
        assert spmd.typeof(F.cross_entropy(v, torch.tensor([0, 1, 2, 3]))) == ty(tp=VARYING)
        assert spmd.typeof(F.dropout(v, 0.1)) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError):
            F.relu(typed(mk(), Tensor[P["tp"]]), inplace=True)


def test_aten_overloads_are_typed() -> None:
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        assert spmd.typeof(torch.ops.aten.add.Tensor(p, p)) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError):
            torch.ops.aten.add.Tensor(p, typed(mk(), Tensor[R["tp"]]))


def test_inplace_error_names_the_operand_that_changes_the_type() -> None:
    """A ZeRO shard copied into a parameter without its all_gather, and a clip coefficient
    that varies: the message names the value and, for copy_, the collective that fits it."""
    with spmd.typecheck():
        param = typed(mk(), Tensor[R["dp"]])
        shard = typed(mk(), Tensor[V["dp"]])
        coef = typed(mk(), Tensor[V["tp"]])
        grad = typed(mk(), Tensor[R["tp"]])
        with torch.no_grad():
            with pytest.raises(SpmdTypeError) as e:
                param.copy_(shard)
            assert "shard (Tensor[V[\"dp\"]]) is Varying on \"dp\"" in str(e.value)
            assert 'use all_gather(shard, "dp", src=V, dst=R)' in str(e.value)
            with pytest.raises(SpmdTypeError) as e:
                grad.mul_(coef)
            assert "coef (Tensor[V[\"tp\"]]) is Varying on \"tp\"" in str(e.value)


def test_inplace_shard_dims_compared_where_the_shapes_place_them() -> None:
    """A value sharded on another dim than the tensor written into (engine
    shard_dim_conflict): the check mode places the value's dim by its shape (broadcast from the
    back), where the static checker sees no ranks.  A lower-rank bias S(0) added into an S(1)
    output is its dim 1: accepted; the same bias into an S(0) tensor runs along the unsharded
    dim 1: an error naming the dim it lands on; a size-1 dim broadcast: no block misplaced."""
    with spmd.typecheck():
        out = typed(mk(3, 4), Tensor[S[1, "tp"]])
        bias = typed(mk(4), Tensor[S[0, "tp"]])
        out.add_(bias)
        assert spmd.typeof(out) == ty(tp=shard(1))
        rows = typed(mk(4, 4), Tensor[S[0, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            rows.add_(bias)
        assert e.value.error.code == "spmd-inplace"
        assert "each rank's block of dim 0 (broadcast: rows's dim 1)" in str(e.value)
        assert 'all_gather(bias, "tp", src=S(0), dst=R)' in str(e.value)
        rows.add_(typed(mk(4, 1), Tensor[S[1, "tp"]]))
        # S(-1) is S(1) at rank 2: the same dim
        last = typed(mk(4, 4), Tensor[S[-1, "tp"]])
        with torch.no_grad():
            last.copy_(typed(mk(4, 4), Tensor[S[1, "tp"]]))
            with pytest.raises(SpmdTypeError) as e:
                last.copy_(typed(mk(4, 4), Tensor[S[0, "tp"]]))
        assert "Shard(0) on \"tp\", into last" in str(e.value)


def test_inplace_result_dims_compared_at_the_rank_seen() -> None:
    """An in-place view or an out= whose result is sharded on another dim than the tensor's
    type (engine check_inplace -> shard_dims_differ): the check mode compares at the rank it
    sees, where the static checker accepts a dim some rank would keep (a 2-d S(-1) transposed,
    a matmul whose operand may be a vector, a squeeze_ of a dim that may have size 1)."""
    with spmd.typecheck(), torch.no_grad():
        last = typed(mk(4, 4), Tensor[S[-1, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            last.transpose_(0, 1)
        assert e.value.error.code == "spmd-inplace"
        assert 'from Shard(-1) to Shard(-2)' in str(e.value)
        assert "use the out-of-place transpose and a new name" in str(e.value)
        typed(mk(2, 4, 4), Tensor[S[-1, "tp"]]).transpose_(0, 1)  # dim -1 stays
        typed(mk(4), Tensor[S[0, "tp"]]).t_()  # a 1-d t_ moves nothing
        cols = typed(mk(1, 4), Tensor[S[1, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            cols.squeeze_(0)  # dim 0 has size 1: the shard dim becomes 0
        assert "from Shard(1) to Shard(0)" in str(e.value)
        typed(mk(4, 4), Tensor[S[1, "tp"]]).squeeze_(0)  # size 4: nothing squeezed
        typed(mk(4, 1), Tensor[S[0, "tp"]]).squeeze_()
        r = typed(mk(4, 4), Tensor[R["tp"]])
        b = typed(mk(4, 4), Tensor[S[1, "tp"]])
        o = typed(mk(4, 4), Tensor[S[0, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.matmul(r, b, out=o)
        assert "matmul(..., out=) would change o" in str(e.value)
        assert "give o the type Tensor[S[1, \"tp\"]] where it is declared" in str(e.value)
        torch.matmul(r, b, out=typed(mk(4, 4), Tensor[S[-1, "tp"]]))  # dim 1 at rank 2
        rows = typed(mk(4, 4), Tensor[S[0, "tp"]])
        torch.mm(rows, r, out=typed(mk(4, 4), Tensor[S[-2, "tp"]]))
        with pytest.raises(SpmdTypeError):
            torch.mm(rows, r, out=typed(mk(4, 4), Tensor[S[-1, "tp"]]))
        assert spmd.typeof(rows) == ty(tp=shard(0))


def test_inplace_on_untyped_target_learns_the_type() -> None:
    with spmd.typecheck():
        buf = torch.zeros(4, 4)
        buf += typed(mk(), Tensor[V["tp"]]).detach()
        assert spmd.typeof(buf) == ty(tp=VARYING)
        o = torch.empty(4, 4)
        with torch.no_grad():
            torch.add(typed(mk(), Tensor[R["dp"]]), 1.0, out=o)
        assert spmd.typeof(o) == ty(dp=REPLICATE)
        # a typed target keeps what it knew and learns new axes
        t = typed(torch.zeros(4, 4), Tensor[V["tp"]])
        t.add_(typed(torch.ones(4, 4), Tensor[V["tp"], V["dp"]]))
        assert spmd.typeof(t) == ty(tp=VARYING, dp=VARYING)


def test_strict_mode() -> None:
    with spmd.typecheck(strict=True):
        p = typed(mk(), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.add(torch.zeros(4, 4), p)
        assert e.value.code == "spmd-untyped"
        assert spmd.typeof(torch.zeros(2) * 2) is None  # untyped alone: fine
    with spmd.typecheck():  # not strict: gradual
        assert spmd.typeof(torch.add(torch.zeros(4, 4), p)) == ty(tp=PARTIAL)


def test_nested_blocks_and_decorator() -> None:
    p = mk()

    @spmd.typecheck(strict=True)
    def inner() -> None:
        with pytest.raises(SpmdTypeError):
            torch.add(torch.ones(4, 4), p)

    with spmd.typecheck():
        spmd.declare(p, Tensor[P["tp"]])
        inner()
        assert _checking.ACTIVE
        torch.add(torch.ones(4, 4), p)  # the outer block is not strict
    assert not _checking.ACTIVE
    inner()  # as a decorator, it opens its own block
    assert not _checking.ACTIVE


def test_block_exits_cleanly_on_error() -> None:
    with pytest.raises(SpmdTypeError):
        with spmd.typecheck():
            torch.relu(typed(mk(), Tensor[P["tp"]]))
    assert not _checking.ACTIVE
    assert not torch._C._is_torch_function_mode_enabled()


# --------------------------------------------------------------------------------------
# the no-gradient relaxation


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, r):  # noqa: ANN001, ANN205
        return w * r  # I with R: fine here, no gradient flows through forward's body

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        return g, g


def test_relaxation_cases() -> None:
    with spmd.typecheck():
        w = typed(mk(), Tensor[I["tp"]])
        r = typed(mk(), Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError):
            torch.mul(w, r)
        with torch.no_grad():
            assert spmd.typeof(torch.mul(w, r)) == ty(tp=REPLICATE)
        with torch.inference_mode():
            assert spmd.typeof(torch.mul(w, r)) == ty(tp=REPLICATE)
        assert spmd.typeof(torch.mul(w.detach(), r)) == ty(tp=REPLICATE)
        assert spmd.typeof(torch.mul(w.data, r)) == ty(tp=REPLICATE)
        assert spmd.typeof(_Scale.apply(w, r)) == ty(tp=REPLICATE)
        # a tensor that does not require grad (a buffer, a frozen weight) cannot carry one
        frozen = typed(torch.randn(4, 4), Tensor[I["tp"]])
        assert spmd.typeof(torch.mul(frozen, r)) == ty(tp=REPLICATE)
        # the cache keeps grad and no-grad verdicts apart
        with pytest.raises(SpmdTypeError):
            torch.mul(w, r)


# --------------------------------------------------------------------------------------
# operators raise the engine's error (torch's operator wrappers turn a TypeError into
# NotImplemented, so SpmdTypeError must not be one)


def test_spmd_type_error_is_not_a_type_error() -> None:
    assert not issubclass(SpmdTypeError, TypeError)


def test_binary_operator_raises_spmd_type_error() -> None:
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError):
            p + 1


def test_inplace_operator_raises_spmd_type_error() -> None:
    with spmd.typecheck():
        r = typed(mk(), Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError):
            r += typed(mk(), Tensor[V["tp"]])


def test_operators_type_their_results() -> None:
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        r = typed(mk(), Tensor[R["tp"]])
        assert spmd.typeof(p + p) == spmd.typeof(p - p) == spmd.typeof(-p) == ty(tp=PARTIAL)
        assert spmd.typeof(2 * p) == spmd.typeof(p / 2) == spmd.typeof(r @ p) == ty(tp=PARTIAL)
        assert spmd.typeof(1 - r) == spmd.typeof(2 / r) == spmd.typeof(2 ** r) == ty(tp=REPLICATE)
        assert spmd.typeof(p[1:, None]) == ty(tp=PARTIAL)
        p2 = p.clone()
        p2 *= 3
        p2[0] = p[1]
        assert spmd.typeof(p2) == ty(tp=PARTIAL)


# --------------------------------------------------------------------------------------
# collectives: on_collective directly (the fake-process-group runs are in the table)


def test_reduce_scatter_of_a_varying_value_offers_the_reinterpret_first() -> None:
    # a per-rank partial sum typed V (probe recsys b7): the fix names reinterpret(V->P) first,
    # as the static checker does (engine collectives._mismatch_fix); the all-to-all alone crashed
    with spmd.typecheck():
        part = typed(mk(), Tensor[V["dp"]])
        with pytest.raises(SpmdTypeError) as e:
            _checking.on_collective("reduce_scatter", part, ("dp",), P, S(0), torch.empty(2, 4))
    msg = str(e.value)
    assert e.value.code == "spmd-src-mismatch"
    assert ('reinterpret it first: reduce_scatter(reinterpret(part, "dp", src=V, dst=P), "dp", '
            'src=P, dst=S(0))') in msg
    assert msg.index("reinterpret it first") < msg.index("all_to_all(part")


def test_on_collective_checks_src_and_stamps_dst() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[P["tp"], V["dp"]])
        out = torch.empty(4, 4)
        assert _checking.on_collective("all_reduce", x, ("tp",), P, R, out) is out
        assert spmd.typeof(out) == ty(tp=REPLICATE, dp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            _checking.on_collective("all_gather", x, ("tp",), V, R, torch.empty(2))
        assert e.value.code == "spmd-src-mismatch"
        assert "x is P on \"tp\"" in str(e.value)
        # engine LocalTypes are accepted too, and tuple outputs are stamped
        outs = (torch.empty(2), torch.empty(2))
        _checking.on_collective("reduce_scatter", x, ("tp",), PARTIAL, shard(0), outs)
        assert all(spmd.typeof(o) == ty(tp=shard(0), dp=VARYING) for o in outs)
        # a flattened axis
        y = typed(mk(), Tensor[P["tp", "dp"]])
        o2 = torch.empty(2)
        _checking.on_collective("all_reduce", y, ("dp", "tp"), P, I, o2)
        assert spmd.typeof(o2) == ty(tp=INVARIANT, dp=INVARIANT)
        # an untyped input takes the result type (a stamp)
        o3 = torch.empty(2)
        _checking.on_collective("all_reduce", torch.zeros(2), ("tp",), None, R, o3)
        assert spmd.typeof(o3) == ty(tp=REPLICATE)


def test_a_negative_shard_dim_is_the_same_layout_at_the_tensors_rank() -> None:
    """The check mode sees ranks: S(-1) and S(2) of a 3-d tensor are one layout (a probe's
    vocab-parallel decode typed F.linear's logits S(-1) and failed at all_gather(src=S(2))
    and at declare(S(2)), whose suggestion was an all_to_all from S(-1) to S(2)).  A dim
    that is another one at this rank stays an error."""
    with spmd.typecheck():
        logits = typed(torch.randn(2, 1, 3), Tensor[S[-1, "tp"]])
        out = torch.empty(2, 1, 6)
        _checking.on_collective("all_gather", logits, ("tp",), S(2), R, out)
        assert spmd.typeof(out) == ty(tp=REPLICATE)
        assert _checking.src_mismatch("all_gather", logits, ("tp",), S(2), R) is None
        x = typed(torch.randn(2, 1, 3), Tensor[S[2, "tp"]])
        _checking.on_collective("all_gather", x, ("tp",), S(-1), R, torch.empty(2, 1, 6))
        assert spmd.declare(logits, Tensor[S[2, "tp"]]) is logits
        spmd.declare(x, Tensor[S[-1, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _checking.on_collective("all_gather", logits, ("tp",), S(-2), R, torch.empty(2, 2, 3))
        assert e.value.code == "spmd-src-mismatch", e.value
        with pytest.raises(SpmdTypeError):
            spmd.declare(x, Tensor[S[-2, "tp"]])


def test_on_collective_rules() -> None:
    with spmd.typecheck():
        r = typed(mk(), Tensor[R["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _checking.on_collective("reinterpret", r, ("tp",), R, P, torch.empty(1))
        assert e.value.code == "spmd-expert-mode"
        _checking.on_collective("reinterpret", r, ("tp",), R, P, torch.empty(1), expert_mode=True)
        v = typed(mk(), Tensor[V["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _checking.on_collective("all_reduce", v, ("tp",), V, R, torch.empty(1), reduce_op="max")
        assert e.value.code == "spmd-no-grad"
        with torch.no_grad():
            _checking.on_collective("all_reduce", v, ("tp",), V, R, torch.empty(1), reduce_op="max")


def test_on_collective_with_an_unnamed_group_leaves_the_result_untyped() -> None:
    with spmd.typecheck():
        x = typed(mk(), Tensor[P["tp"]])
        out = torch.empty(1)
        _checking.on_collective("all_reduce", x, object(), P, R, out)
        assert spmd.typeof(out) is None


# --------------------------------------------------------------------------------------
# @spmd.checked


@spmd.checked
def _row_parallel(h: Tensor[V["tp"]], w: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
    return h @ w


@spmd.checked
def _bad_return(h: Tensor[V["tp"]]) -> Tensor[R["tp"]]:
    return h * 2


def test_checked_decorator() -> None:
    h, w = mk(), mk()
    assert spmd.typeof(_row_parallel(h, w)) is None  # outside: a plain call
    with spmd.typecheck():
        out = _row_parallel(h, w)  # untyped arguments get the annotations
        assert spmd.typeof(h) == spmd.typeof(out) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            _row_parallel(typed(mk(), Tensor[P["tp"]]), w)
        assert e.value.code == "spmd-annotation"
        assert "argument 'h' of _row_parallel" in str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            _bad_return(h)
        assert "the result of _bad_return" in str(e.value)
        # the return value is named as returned, as the static checker names it (it was "x",
        # or the caller's argument text; then "the return value", which a pasted fix cannot
        # hold; then the call, _bad_return(<...>), which cannot be pasted either)
        assert str(e.value).startswith(
            'the result of _bad_return is annotated Tensor[R["tp"]] but (h * 2) is V '
            'on "tp", not R ((h * 2): Tensor[V["tp"]])'), str(e.value)
        assert 'all_gather(h * 2, "tp"' in str(e.value), str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            _bad_return(typed(torch.randn(2), Tensor[V["tp"]]))
        assert "but (h * 2) is V" in str(e.value) and "randn" not in str(e.value)


@spmd.checked
def _aux_returned(h: Tensor[V["dp"]], total: Tensor[R["dp"]], many: bool = False
                  ) -> tuple[Tensor[V["dp"]], Tensor[V["dp"]]]:
    aux = total * 2
    if many:
        return h, aux + 1
    return h * 2, aux


@spmd.checked
def _aux_one_return(h: Tensor[V["dp"]], total: Tensor[R["dp"]]
                    ) -> tuple[Tensor[V["dp"]], Tensor[V["dp"]]]:
    aux = total * 2

    def inner() -> int:
        return 3

    return h * inner(), aux


@spmd.checked
def _own_block(x: Tensor[S[0, "tp"]], y: Tensor[V["tp"]], *more: Tensor[V["tp"]],
               **named: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
    seen = [spmd.typeof(y)] + [spmd.typeof(t) for t in more] + [spmd.typeof(t) for t in named.values()]
    assert all(t == ty(tp=VARYING) for t in seen), seen
    return x @ y.T


@spmd.checked
def _touch_grad(p: Tensor[V["tp"]]) -> None:
    assert spmd.typeof(p) == ty(tp=shard(0))  # a parameter: passed as is
    p.grad = None


def test_checked_widens_an_s_argument_to_a_declared_plain_v() -> None:
    """A parameter declared plain V takes an S(i) argument as V inside the function, as the
    static checker types it (SigLIP's ``_loss(fi, ft: Tensor[V["dp"]])`` given this rank's
    S(0) text features: the diagonal block raised spmd-global in check mode, probe-contrast
    f5); the caller's tensor keeps its S(0) (the function gets a view of it: the gradient
    flows back, the SigLIP probe's matched to 1e-16 on 2 gloo ranks); *args and **kwargs
    items too.  A leaf that requires grad (a parameter) is passed as is."""
    with spmd.typecheck():
        q, k = typed(mk(), Tensor[S[0, "tp"]]), typed(mk(), Tensor[S[0, "tp"]])
        out = _own_block(q, k, k, z=k)
        assert spmd.typeof(out) == ty(tp=VARYING)
        assert spmd.typeof(k) == ty(tp=shard(0))
        with pytest.raises(SpmdTypeError) as e:
            q @ k.T  # the caller's k is still S(0): its diagonal block is the error
        assert e.value.code == "spmd-global"
        w = nn.Parameter(torch.randn(4, 4))
        typed(w, Tensor[S[0, "tp"]])
        _touch_grad(w)


def test_checked_names_the_returned_item_as_written() -> None:
    # probe-dsv3 f2: a tuple's item was named forward(<...>)[1] (unpasteable), and its fix
    # spoke of "the slice": the returned expression names it, as the static checker does
    with spmd.typecheck():
        h, total = typed(mk(), Tensor[V["dp"]]), typed(mk(), Tensor[R["dp"]])
        with pytest.raises(SpmdTypeError) as e:
            _aux_one_return(h, total)
        m = str(e.value)
        assert m.startswith('the result of _aux_one_return is annotated Tensor[V["dp"]] but aux '
                            'is R on "dp", not V (aux: Tensor[R["dp"]])'), m
        assert "(<...>)" not in m and "the slice" not in m, m
        # two returns writing the item differently: the call names it, as before
        with pytest.raises(SpmdTypeError) as e:
            _aux_returned(h, total)
        assert "but _aux_returned(<...>)[1] is R" in str(e.value), str(e.value)


@spmd.checked
def _sum_squares(sharded: list[Tensor[V["tp"]]], replicated: tuple[Tensor[I["tp"]], ...],
                 pairs: tuple[Tensor[V["tp"]], int]) -> Tensor[V["tp"]]:
    # (a sum of squares over each item's own dims, not over a sharded one: that would be a
    # pending partial sum, ops.reduced_partial_error)
    return torch.stack([g.pow(2) for g in sharded]).sum(0)


def test_checked_declares_each_item_of_a_list_argument() -> None:
    # list[Tensor[...]] / tuple[Tensor[...], ...] parameters: each item is declared (the static
    # checker judges each item of a display passed there); a fixed tuple is not a sequence
    with spmd.typecheck():
        a, b, i = typed(mk(), Tensor[S[0, "tp"]]), mk(), typed(mk(), Tensor[I["tp"]])
        _sum_squares([a, b], (i,), (mk(), 3))
        assert spmd.typeof(b) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            _sum_squares([a, i], (), (a, 3))
        assert e.value.code == "spmd-annotation"
        assert "item 1 of argument 'sharded' of _sum_squares" in str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            _sum_squares([], (a,), (a, 3))
        assert "item 0 of argument 'replicated'" in str(e.value)


# --------------------------------------------------------------------------------------
# custom autograd Functions: Fn.apply has forward's declared types (SPEC section 5)


class _Untyped2Typed(torch.autograd.Function):
    """An annotated forward computing with ops the check mode cannot type (a detour through
    numpy stands for a raw torch.distributed collective): untyped results inside."""

    @staticmethod
    def forward(ctx, x: Tensor[V["ep"]], splits: list[int]) -> Tensor[V["ep"]]:
        return torch.from_numpy(x.detach().numpy() * 2)

    @staticmethod
    def backward(ctx, g: Tensor[V["ep"]]) -> tuple[Tensor[V["ep"]], None]:
        return g * 2, None


class _TwoOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[I["tp"]], scale: float = 1.0
                ) -> tuple[Tensor[R["tp"]], Tensor[S[0, "tp"]], int]:
        # (both untyped inside, as raw collectives leave them: the declared types given)
        return (torch.from_numpy(x.detach().numpy()),
                torch.from_numpy(x.detach().numpy() * scale), 3)

    @staticmethod
    def backward(ctx, a: Tensor[P["tp"]], b: Tensor[S[0, "tp"]], c: Any) -> tuple[Tensor[I["tp"]], None]:
        # (backward runs in the check mode: ``a + b`` mixes P with S(0); the detour through
        # numpy stands for the collectives a real backward would run.  Only b's values: a's
        # are this rank's summand, and reading them (.numpy()) is the value-read error; a
        # real backward's raw all-reduce of a would untype it first)
        return torch.from_numpy(b.detach().numpy() * 2), None


class _Plain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.detach().numpy() * 2)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def test_function_apply_has_forwards_declared_type() -> None:
    torch_apply = torch.autograd.Function.__dict__["apply"]
    node_apply = torch.autograd.function.BackwardCFunction.__dict__["apply"]
    with spmd.typecheck():
        x = typed(mk(), Tensor[V["ep"]])
        y = _Untyped2Typed.apply(x, [2, 2])
        assert spmd.typeof(y) == ty(ep=VARYING)
        assert spmd.typeof(y * 2) == ty(ep=VARYING)  # checks downstream see it
        u = mk()  # an untyped argument gets the declaration (like spmd.checked)
        assert spmd.typeof(_Untyped2Typed.apply(u, [4])) == ty(ep=VARYING)
        assert spmd.typeof(u) == ty(ep=VARYING)
        a, b, n = _TwoOut.apply(typed(mk(), Tensor[I["tp"]]), 2.0)  # tuple results
        assert spmd.typeof(a) == ty(tp=REPLICATE)
        assert spmd.typeof(b) == SpmdType.of({"tp": shard(0)})
        assert n == 3
        (a.sum() + b.sum(1)).backward(torch.ones(b.shape[0]))  # autograd unchanged (b.sum()
        # would be a pending partial sum: ops.reduced_partial_error)
        z = _Plain.apply(typed(mk(), Tensor[R["tp"]]))  # no annotations: as before
        assert spmd.typeof(z) is None
        with spmd.typecheck():  # nested blocks: still installed after the inner one
            pass
        assert spmd.typeof(_Untyped2Typed.apply(x, [4])) == ty(ep=VARYING)
    # erasure: torch's own apply outside the block (backward's too); nothing typed
    assert torch.autograd.Function.__dict__["apply"] is torch_apply
    assert torch.autograd.function.BackwardCFunction.__dict__["apply"] is node_apply
    assert spmd.typeof(_Untyped2Typed.apply(mk(), [4])) is None


def test_function_apply_argument_mismatch_is_the_static_error() -> None:
    with spmd.typecheck():
        r = typed(mk(), Tensor[R["ep"]])
        with pytest.raises(SpmdTypeError) as e:
            _Untyped2Typed.apply(r, [4])
        assert e.value.code == "spmd-mismatch"
        # the static checker's message (tests/plugin/cases/duality.test)
        assert str(e.value).startswith(
            'argument r (parameter "x" of _Untyped2Typed.apply) is Tensor[R["ep"]] but '
            'Tensor[V["ep"]] is expected: it is R on "ep" where V is needed; '), str(e.value)
        s0 = typed(mk(), Tensor[S[0, "ep"]])  # S(i) fits V; it keeps its shard dim
        _Untyped2Typed.apply(s0, [4])
        assert spmd.typeof(s0) == SpmdType.of({"ep": shard(0)})


class _Times2S1(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: Tensor[S[1, "tp"]]) -> Tensor[S[1, "tp"]]:
        return y * 2

    @staticmethod
    def backward(ctx, g: Tensor[S[1, "tp"]]) -> Tensor[S[1, "tp"]]:
        return g * 2


def test_function_apply_reads_S_minus_1_as_S1_at_rank_2() -> None:
    """F.linear's column-parallel output is S(-1): dim 1 of a 2-d tensor, as spmd.checked and
    declare read it (a shared case until session 40, when the static checker, which sees no
    rank, typed that output S(-1) too: an S(-1) where S(1) is declared is its spmd-mismatch,
    tests/plugin/cases/contractions.test)."""
    with spmd.typecheck():
        x = typed(mk(), Tensor[R["tp"]])
        w = typed(mk(), Tensor[S[0, "tp"]])
        y = F.linear(x, w)
        assert spmd.typeof(y) == SpmdType.of({"tp": shard(-1)})
        out = _Times2S1.apply(y)
        assert spmd.typeof(out) == SpmdType.of({"tp": shard(1)})


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's _ReduceFromModelParallelRegion: its backward returns the I gradient as is,
    where R (the dual of the P input) is due (its forward's raw all-reduce stood for by an
    untyped copy: apply's result has the declared type)."""

    @staticmethod
    def forward(ctx, x: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        with _checking.suspended():
            return x.clone()

    @staticmethod
    def backward(ctx, g: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return g


class _ReduceFromTPScaled(torch.autograd.Function):
    """A backward returning a P gradient where R is due: not the same values."""

    @staticmethod
    def forward(ctx, x: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        ctx.x = x
        with _checking.suspended():
            return x.clone()

    @staticmethod
    def backward(ctx, g: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return ctx.x.detach() * 2


def test_function_backward_may_return_i_for_r_without_grad() -> None:
    """R and I hold the same values: a backward run without grad (no create_graph) may return
    one where the other is due (engine duality.check_returned, gradient_free), as the static
    checker accepts it; with create_graph=True the returned gradient is differentiated again
    and must be of its kind; a P where R is due stays an error."""
    with spmd.typecheck():
        x = typed(mk(3), Tensor[P["tp"]])
        _ReduceFromTP.apply(x).sum().backward()
        x = typed(mk(3), Tensor[P["tp"]])
        y = _ReduceFromTP.apply(x).sum()
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(y, x, create_graph=True)
        assert str(e.value).startswith(
            '_ReduceFromTP.backward returns g (Tensor[I["tp"]]) as the gradient of input x '
            '(Tensor[P["tp"]]), which is Tensor[R["tp"]] (I on "tp" where R is needed)'), str(e.value)
        x = typed(mk(3), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _ReduceFromTPScaled.apply(x).sum().backward()
        assert e.value.code == "spmd-duality"
        assert "(P on \"tp\" where R is needed)" in str(e.value), str(e.value)


class _ScaleP(torch.autograd.Function):
    """A linear op of a Partial value in torch.func's form (setup_context)."""

    @staticmethod
    def forward(x: Tensor[P["tp"]]) -> Tensor[P["tp"]]:
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.x = inputs[0]

    @staticmethod
    def backward(ctx, g: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
        return g * 2


class _ScalePWrong(_ScaleP):
    @staticmethod
    def backward(ctx, g: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
        return ctx.x.detach() * 2  # the Partial input where its R gradient is due


def test_function_under_torch_func_checks_its_backward() -> None:
    """torch.func.grad and vjp apply a setup_context Function through torch's
    custom_function_call (which the check mode lets through: Fn.apply checks the arguments and
    types the result; a Partial argument was a false spmd-partial-nonlinear there) and run its
    backward through a class they generate: its results are checked by the duality rule as in
    eager (they came back unchecked)."""
    with spmd.typecheck():
        x = typed(torch.ones(3), Tensor[P["tp"]])
        g = torch.func.grad(lambda t: _ScaleP.apply(t).sum())(x)
        assert torch.equal(g, torch.full((3,), 2.0))
        for run in (lambda: torch.func.grad(lambda t: _ScalePWrong.apply(t).sum())(x),
                    lambda: torch.func.vjp(_ScalePWrong.apply, x)[1](
                        typed(torch.ones(3), Tensor[R["tp"]]))):
            with pytest.raises(SpmdTypeError) as e:
                run()
            assert str(e.value).startswith(
                '_ScalePWrong.backward returns (ctx.x.detach() * 2) (Tensor[P["tp"]]) as the '
                'gradient of input x (Tensor[P["tp"]]), which is Tensor[R["tp"]]'), str(e.value)


class _SavesEverything(torch.autograd.Function):
    """Saves its inputs, a local, None and both of its outputs (the second by position)."""

    seen: list = []

    @staticmethod
    def forward(ctx, x: Tensor[I["tp"]], w: Tensor[V["tp"]]) -> tuple[Tensor[V["tp"]], Tensor[P["tp"]]]:
        h = x * w
        with _checking.suspended():  # an untyped result (as a raw all-reduce leaves it): the
            z = h * 3                # declared P is not contradicted
        y = h * 2
        ctx.save_for_backward(x, w, h, None, z, y)
        return y, z

    @staticmethod
    def backward(ctx, gy: Tensor[V["tp"]], gz: Tensor[R["tp"]]) -> tuple[None, None]:
        _SavesEverything.seen.append([spmd.typeof(t) if t is not None else "None"
                                      for t in ctx.saved_tensors])
        return None, None


def test_function_saved_tensors_have_the_static_types() -> None:
    """ctx.saved_tensors in backward: the objects forward saved keep their types (inputs the
    declared ones, a local what it was computed as); an output, which torch hands back as a new
    tensor, has forward's declared type at its position (engine duality.saved_slot, as
    statically: tests/plugin/cases/saved_tensors.test).  Outside the block torch's own
    saved_tensors is in place."""
    _SavesEverything.seen.clear()
    with spmd.typecheck():
        x = typed(mk(), Tensor[I["tp"]])
        w = typed(mk(), Tensor[V["tp"]])
        y, z = _SavesEverything.apply(x, w)
        y.backward(typed(torch.ones_like(y), Tensor[V["tp"]]), retain_graph=True)
    assert _SavesEverything.seen == [[ty(tp=INVARIANT), ty(tp=VARYING), ty(tp=VARYING), "None",
                                      ty(tp=PARTIAL), ty(tp=VARYING)]]
    assert "saved_tensors" not in torch.autograd.function.BackwardCFunction.__dict__
    _SavesEverything.seen.clear()
    y.backward(torch.ones_like(y))  # unchecked: the saved output is torch's new tensor, untyped
    assert _SavesEverything.seen[0][5] is None and _SavesEverything.seen[0][4] is None


class _ForgotReduce(torch.autograd.Function):
    """A forward that forgot its all-reduce: the Partial value returned where I is declared."""

    @staticmethod
    def forward(ctx, x: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        return x * 2

    @staticmethod
    def backward(ctx, g: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return g * 2


class _Copy(torch.autograd.Function):
    """Megatron's _CopyToModelParallelRegion: its I input returned as the declared R."""

    @staticmethod
    def forward(ctx, x: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return x

    @staticmethod
    def backward(ctx, g: Tensor[P["tp"]]) -> None:
        return None


class _Pair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[V["tp"]], w: Tensor[I["tp"]]
                ) -> tuple[Tensor[V["tp"]], Tensor[V["tp"]]]:
        if x.shape[0] > 100:
            return x, x
        return x * 2, w * 2


def test_function_forward_result_is_checked_at_apply() -> None:
    """What forward returns is checked against its declared result at Fn.apply, by the static
    checker's rule (engine duality.check_forward_result) and with its message (the shared
    case function-forward-returns-P-for-I): the check mode gave the result the declared type
    whatever it was (a forward that forgot a reduction gave wrong numbers, silently).  Without
    grad an I stands for the declared R; an untyped result gets the declared type."""
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _ForgotReduce.apply(p)
        assert e.value.code == "spmd-mismatch"
        assert str(e.value).startswith(
            'the return value (x * 2) of _ForgotReduce.forward is Tensor[P["tp"]] but '
            'Tensor[I["tp"]] is expected: it is P on "tp" where I is needed; P to I is a '
            'reduction: use all_reduce(x * 2, "tp", src=P, dst=I)'), str(e.value)
        assert spmd.typeof(_Copy.apply(typed(mk(), Tensor[I["tp"]]))) == ty(tp=REPLICATE)
        assert spmd.typeof(_Untyped2Typed.apply(mk(), [4])) == ty(ep=VARYING)
        # a tuple result: the wrong item, named by position where forward has two returns
        with pytest.raises(SpmdTypeError) as e:
            _Pair.apply(typed(mk(), Tensor[V["tp"]]), typed(mk(), Tensor[I["tp"]]))
        assert str(e.value).startswith(
            'the return value result[1] of _Pair.forward is Tensor[I["tp"]] but Tensor[V["tp"]] '
            'is expected'), str(e.value)


class _AuxScalerBad(torch.autograd.Function):
    """MoE's aux-loss scaler with the aux gradient declared per rank (V) where R is due (the
    probe's alt.py AuxLossAutoScalerBad): the values returned are right, the declaration is
    not."""

    @staticmethod
    def forward(ctx, o: Tensor[P["tp"]], aux: Tensor[P["tp"]]) -> Tensor[P["tp"]]:
        return o + aux

    @staticmethod
    def backward(ctx, g: Tensor[R["tp"]]) -> tuple[Tensor[R["tp"]], Tensor[V["tp"]]]:
        return g, torch.ones_like(g)


class _GradDeclaredP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        return x * 2

    @staticmethod
    def backward(ctx, g: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        return torch.ones_like(g.detach())


def test_function_backward_declared_signature_is_checked() -> None:
    """Backward's declared signature against the duals of forward's (engine
    duality.check_signature, as the static checker reports it on ``def backward``), when the
    backward runs: the check mode only checked the values it returned."""
    with spmd.typecheck():
        a, b = typed(mk(), Tensor[P["tp"]]), typed(mk(), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _AuxScalerBad.apply(a, b).sum().backward()
        assert e.value.code == "spmd-duality"
        assert str(e.value).startswith(
            '_AuxScalerBad.backward returns Tensor[V["tp"]] for input aux (Tensor[P["tp"]]), whose '
            'gradient is Tensor[R["tp"]] (V on "tp" where R is needed); V to R is a gather: use '
            'all_gather(torch.ones_like(g), "tp", src=V, dst=R)'), str(e.value)
        assert 'and declare the result Tensor[R["tp"]]' in str(e.value)
        x = typed(mk(), Tensor[I["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _GradDeclaredP.apply(x).sum().backward()
        assert str(e.value).startswith(
            '_GradDeclaredP.backward takes g as the gradient of forward\'s output '
            '(Tensor[I["tp"]]), which is Tensor[I["tp"]], not Tensor[P["tp"]]'), str(e.value)


class _ShardedCols(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: Tensor[S[1, "tp"]], x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]
                ) -> Tensor[S[1, "tp"]]:
        ctx.x, ctx.w = x, w
        return y * 2

    @staticmethod
    def backward(ctx, g: Tensor[S[1, "tp"]]) -> tuple[Tensor[S[1, "tp"]], None, None]:
        # F.linear's S(-1): dim 1 of the 2-d input y
        return F.linear(ctx.x.detach(), ctx.w.detach()) * 2, None, None


def test_function_types_are_compared_at_the_tensors_rank() -> None:
    """An S(-1) value (F.linear's output) for a parameter declared S(1): one layout of a 2-d
    tensor, accepted at Fn.apply as spmd.checked and spmd.declare accept it (it was an
    spmd-mismatch), and so is the S(-1) gradient backward returns for it; of a 3-d tensor
    S(-1) is S(2), still an error."""
    with spmd.typecheck():
        x, w = typed(mk(), Tensor[R["tp"]]), typed(mk(4, 4), Tensor[S[0, "tp"]])
        y = F.linear(x, w)
        assert spmd.typeof(y) == ty(tp=shard(-1))
        out = _ShardedCols.apply(y, x, w)
        assert spmd.typeof(out) == ty(tp=shard(1))
        out.backward(typed(torch.ones(4, 4), Tensor[S[1, "tp"]]))
        y3 = typed(torch.randn(2, 4, 4), Tensor[S[-1, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _ShardedCols.apply(y3, x, w)
        assert e.value.code == "spmd-mismatch"


class _GatherLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[S[-1, "tp"]]) -> Tensor[I["tp"]]:
        return torch.zeros(2, 3, 8)  # untyped (a raw gather): the declared I

    @staticmethod
    def backward(ctx, g: Tensor[I["tp"]]) -> Tensor[S[-1, "tp"]]:
        return g  # the convert(g, src=I, dst=S(-1)) forgotten


class _KeepLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[S[-1, "tp"]]) -> Tensor[S[-1, "tp"]]:
        return x.transpose(0, 2)  # S(0): the shard moved

    @staticmethod
    def backward(ctx, g: Tensor[S[-1, "tp"]]) -> Tensor[S[-1, "tp"]]:
        return g


class _KeepLastBadReturn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor[S[-1, "tp"]]) -> Tensor[S[-1, "tp"]]:
        return x * 2

    @staticmethod
    def backward(ctx, g: Tensor[S[-1, "tp"]]) -> Tensor[S[-1, "tp"]]:
        return g.transpose(0, 2).contiguous()


def test_function_messages_print_the_declared_layout() -> None:
    """The check mode compares a Function's types at the tensor's rank (S(-1) of a 3-d tensor
    is S(2)) but names a declared S[-1] as declared, as the static checker does
    (duality.test: megatron_gather_last_dim_backward_forgets_the_convert): the argument, the
    forward result and backward's returned gradient."""
    with spmd.typecheck():
        x = typed(torch.randn(2, 3, 4, requires_grad=True), Tensor[S[-1, "tp"]])
        y = _GatherLast.apply(x)
        with pytest.raises(SpmdTypeError) as e:
            y.sum().backward()
        assert str(e.value) == (
            '_GatherLast.backward returns g (Tensor[I["tp"]]) as the gradient of input x '
            '(Tensor[S[-1, "tp"]]), which is Tensor[S[-1, "tp"]] (I on "tp" where S(-1) is '
            'needed); I to S(-1) is a local conversion: use convert(g, "tp", src=I, dst=S(-1))'
            '  [spmd-duality]')
        x0 = typed(torch.randn(2, 3, 4), Tensor[S[0, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            _GatherLast.apply(x0)
        # the rank known: S(0) and S(-1) are two dims, and the fix is written as declared
        assert str(e.value) == (
            'argument x0 (parameter "x" of _GatherLast.apply) is Tensor[S[0, "tp"]] but '
            'Tensor[S[-1, "tp"]] is expected: it is S(0) on "tp" where S(-1) is needed; the '
            'shard dims differ; redistribute(x0, "tp", src=S(0), dst=S(-1)) to shard the same '
            'global tensor on dim -1, or x0.transpose(0, -1) if its dims are in another order '
            '(a [s, b, h] value where [b, s, h] is meant)  [spmd-mismatch]')
        with pytest.raises(SpmdTypeError) as e:
            _KeepLast.apply(x)
        assert str(e.value).startswith(
            'the return value x.transpose(0, 2) of _KeepLast.forward is Tensor[S[0, "tp"]] but '
            'Tensor[S[-1, "tp"]] is expected'), str(e.value)
        assert "dst=S(-1)" in str(e.value) and "S(2)" not in str(e.value)
        out = _KeepLastBadReturn.apply(x)
        with pytest.raises(SpmdTypeError) as e:
            out.backward(typed(torch.ones(2, 3, 4), Tensor[S[-1, "tp"]]))
        assert "as the gradient of input x (Tensor[S[-1, \"tp\"]]), which is Tensor[S[-1, \"tp\"]] " \
               "(S(0) on \"tp\" where S(-1) is needed); shard the gradient on dim -1 like x" \
            in str(e.value), str(e.value)


class _GatherLayerRow(torch.autograd.Function):
    """A GatherLayer whose backward returns its row of the Partial gradient unreduced."""

    @staticmethod
    def forward(ctx, x: Tensor[V["dp"]]) -> Tensor[R["dp"]]:
        ctx.rank = 0
        with _checking.suspended():
            return torch.stack([x, x])  # a raw all_gather of 2 ranks' rows

    @staticmethod
    def backward(ctx, g: Tensor[P["dp"]]) -> Tensor[V["dp"]]:
        return g[ctx.rank]


def test_a_gather_layers_row_is_reduce_scattered_whole() -> None:
    """The fix of a backward returning g[ctx.rank] (P) where V is due is the reduce-scatter of g
    itself, as the static checker says (duality.test:
    gather_layer_backward_returns_its_row_unreduced); of g[ctx.rank] it unbinds the row's dim 0
    (the pasted fix raised at run time)."""
    with spmd.typecheck():
        x = typed(mk(4, 4), Tensor[V["dp"]])
        y = _GatherLayerRow.apply(x)
        with pytest.raises(SpmdTypeError) as e:
            y.backward(typed(torch.ones(2, 4, 4), Tensor[P["dp"]]))
    assert e.value.code == "spmd-duality"
    assert ('P to V is a reduce-scatter: use reduce_scatter(g, "dp", src=P, dst=V) in place of '
            "g[ctx.rank] (it sums the ranks' g and keeps this rank's row") in str(e.value), \
        str(e.value)


# --------------------------------------------------------------------------------------
# messages name module attributes; suspended()


class _Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.matmul(h, self.weight)


def test_message_names_module_parameters() -> None:
    m = _Proj()
    with spmd.typecheck():
        spmd.declare(m.weight, Tensor[I["tp"]])
        h = typed(mk(), Tensor[V["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            m(h)
    assert str(e.value).startswith(
        'Invariant on "tp" (self.weight: Tensor[I["tp"]]) cannot mix with Varying '
        '(h: Tensor[V["tp"]]) in matmul'), str(e.value)
    assert 'reinterpret(self.weight, "tp", src=I, dst=R)' in str(e.value)


def test_suspended_pauses_checking() -> None:
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["tp"]])
        with _checking.suspended():
            y = torch.relu(p)  # no check, no tracking
        assert spmd.typeof(y) is None
        with pytest.raises(SpmdTypeError):
            torch.relu(p)


# --------------------------------------------------------------------------------------
# raw torch.distributed collectives (spmd-raw-collective, as the plugin reports them)


def test_a_raw_collective_on_a_typed_tensor_is_an_error() -> None:
    """``dist.all_reduce(loss)`` on a typed tensor raises before any communication (the
    plugin's spmd-raw-collective; the check mode let it through, so the tensor kept a type
    its new value does not have).  An untyped tensor, and one inside a custom autograd
    Function's forward or backward (where users write their own collectives), reach
    torch (which here, with no process group, refuses).  The raw collectives hand their
    tensors to the check mode's TorchFunctionMode (torch's function protocol)."""
    import torch.distributed as dist
    import torch.distributed.nn.functional as dnf

    class Reduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            dist.all_reduce(x)
            return x

    with spmd.typecheck():
        loss = typed(mk(1), Tensor[V["dp"]])
        with pytest.raises(SpmdTypeError) as e:
            dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        assert e.value.code == "spmd-raw-collective"
        assert str(e.value).startswith(
            'torch.distributed.all_reduce on the typed tensor loss.detach() (Tensor[V["dp"]]): a raw '
            'collective is not differentiable')
        reported = loss.detach().clone()
        with pytest.raises(SpmdTypeError, match=r"all_gather on the typed tensor reported "
                                                r"\(Tensor\[V\[\"dp\"\]\]\).*spmd\.all_gather\(reported"):
            dist.all_gather([torch.empty(1), torch.empty(1)], reported)
        with pytest.raises(SpmdTypeError, match=r"torch\.distributed\.nn\.functional\.all_reduce"):
            dnf.all_reduce(loss)
        for call in (lambda: dist.all_reduce(torch.ones(1)), lambda: Reduce.apply(loss)):
            with pytest.raises(Exception) as other:
                call()
            assert not isinstance(other.value, SpmdTypeError)


def test_a_raw_list_gather_fix_replaces_the_list_and_the_cat() -> None:
    """open_clip's gather_features (probe-contrast 4): the typed gather pasted over
    ``dist.all_gather(gathered, f)`` alone broke the re-insertion and the torch.cat after it;
    the fix says the typed gather is the concatenation and carries the gradient."""
    import torch.distributed as dist

    with spmd.typecheck():
        feats = typed(mk(2, 3), Tensor[S[0, "dp"]])
        with pytest.raises(SpmdTypeError) as e:
            dist.all_gather([torch.empty(2, 3), torch.empty(2, 3)], feats)
        assert ('use all_feats = spmd.all_gather(feats, "dp", src=S(0), dst=R): it returns the '
                "ranks' tensors already concatenated on dim 0 (one tensor, not a list) and its "
                "backward hands each rank the gradient of its own feats, so it replaces the "
                "list, any re-insertion of feats into it and the torch.cat of it together"
                ) in str(e.value), str(e.value)


def test_a_raw_collective_names_the_typed_call_of_its_type() -> None:
    """The fix is the concrete typed call where the tensor's type says the axis and src (one
    P axis for an all-reduce), as the plugin prints it: no "<axis>" placeholder."""
    import torch.distributed as dist

    with spmd.typecheck():
        grad = typed(mk(1), Tensor[P["dp"], R["tp"]]).detach()
        with pytest.raises(SpmdTypeError) as e:
            dist.all_reduce(grad)
        assert str(e.value).endswith(
            'use spmd.all_reduce(grad, "dp", src=P, dst=R), which returns the result (the raw op '
            'writes it into a tensor passed to it)  [spmd-raw-collective]')


def test_a_raw_collective_fix_carries_the_reduce_op_and_says_the_typed_call_is_synchronous() -> None:
    """The raw call's reduce op goes into the typed call it suggests (ReduceOp.AVG: op="avg";
    without it the pasted fix sums, a gradient n times too large), an op no typed collective
    takes is said so, and an async_op=True call is told the typed call is synchronous: as
    the plugin reads them from the source (the same engine text)."""
    import torch.distributed as dist

    with spmd.typecheck():
        grad = typed(mk(1), Tensor[P["dp"]]).detach()
        v = typed(mk(1), Tensor[V["dp"]]).detach()
        cases = [
            (lambda: dist.all_reduce(grad, op=dist.ReduceOp.AVG),
             'use spmd.all_reduce(grad, "dp", src=P, dst=R, op="avg"), which returns'),
            (lambda: dist.all_reduce(grad, dist.ReduceOp.AVG, None, True),
             'op="avg"), which returns the result (the raw op writes it into a tensor passed '
             'to it); spmd.all_reduce is synchronous: it returns the result, not a work handle'),
            (lambda: dist.reduce_scatter_tensor(torch.empty(1), grad, op=dist.ReduceOp.AVG),
             'use spmd.reduce_scatter(grad, "dp", src=P, dst=S(0), op="avg")'),
            (lambda: dist.all_reduce(v, op=dist.ReduceOp.MAX),
             'use spmd.all_reduce(v, "dp", src=V, dst=R, op="max")'),
            (lambda: dist.all_reduce(grad, op=dist.ReduceOp.PRODUCT),
             '(spmd.all_reduce takes op= sum, avg, max, min, not "product")'),
        ]
        for call, fix in cases:
            with pytest.raises(SpmdTypeError) as e:
                call()
            assert fix in str(e.value), str(e.value)


def test_one_mistake_on_two_axes_is_one_error_with_the_tuple_axis_fix() -> None:
    """The engine merges the per-axis errors (errors.merge_axis_errors): the check mode raises
    the merged one, as the static checker reports it."""
    with spmd.typecheck():
        p = typed(mk(), Tensor[P["dp"], P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            F.gelu(p)
        assert str(e.value) == (
            'Partial on "dp" and "tp" (p: Tensor[P["dp", "tp"]]) cannot go through gelu (a '
            'non-linear op of a pending sum); all_reduce(p, ("dp", "tp"), src=P, dst=R) first  '
            '[spmd-partial-nonlinear]')


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recomputation_is_checked(reentrant: bool) -> None:
    """torch.utils.checkpoint recomputes the region in the backward; a recomputation that
    differs from the forward (here: a Partial through relu only when recomputing) is checked
    like the forward.  The non-reentrant form recomputes inside a saved tensor's unpack hook,
    where the mode stack is empty: it passed unchecked (a probe: a collective skipped only on
    recompute, gradients off by 0.18)."""
    from torch.utils.checkpoint import checkpoint
    calls = []

    def region(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        calls.append(1)  # h * w saves both: the backward needs the region recomputed
        return h.relu() * w if len(calls) > 1 else h * w

    with spmd.typecheck():
        x = typed(mk(4), Tensor[P["tp"]]).requires_grad_(True)
        w = typed(mk(4), Tensor[R["tp"]]).requires_grad_(True)
        y = checkpoint(region, x * 1.0, w, use_reentrant=reentrant)
        assert len(calls) == 1 and spmd.typeof(y) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError, match="relu"):
            y.sum().backward()
        assert len(calls) == 2
    import torch.utils.checkpoint as checkpoint_module
    # leaving the mode gives torch its own function back
    assert checkpoint_module._checkpoint_without_reentrant_generator.__module__ == \
        "torch.utils.checkpoint"


class _Holder:
    pass


def test_messages_name_tensors_held_by_plain_objects() -> None:
    """An optimizer's master copy on a plain object (``master.ln1.add_(...)``) is named as
    written, and so is the operand beside it (the message said ``x`` and ``value``)."""
    master = _Holder()
    with spmd.typecheck():
        master.ln1 = typed(mk(4), Tensor[I["tp"]])  # type: ignore[attr-defined]
        g_ln1 = typed(mk(4), Tensor[V["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            master.ln1.add_(g_ln1 * 2.0)  # type: ignore[attr-defined]
        assert "(master.ln1: Tensor[" in str(e.value), str(e.value)
        assert "(g_ln1 * 2.0: Tensor[" in str(e.value), str(e.value)
        w = master.ln1  # type: ignore[attr-defined]
        with pytest.raises(SpmdTypeError) as e:
            w.add_(g_ln1)
        assert "(w: Tensor[" in str(e.value), str(e.value)  # a plain name first


class _Sharded(nn.Module):
    w: Tensor[S[0, "tp"]]

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))


def test_deepcopy_keeps_the_type() -> None:
    """``copy.deepcopy`` of a typed tensor or of a module with typed parameters (a master
    or EMA copy: ``copy.deepcopy(model).float()``) holds the same values, so it keeps the
    types (the copies were untyped: every check on them was skipped)."""
    import copy
    m = _Sharded()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        t = typed(torch.randn(3), Tensor[V["tp"]])
        assert spmd.typeof(copy.deepcopy(t)) == ty(tp=VARYING)
        master = copy.deepcopy(m).double()
        assert spmd.typeof(master.w) == ty(tp=shard(0))
        with pytest.raises(SpmdTypeError, match="spmd-partial-varying"):  # checked as typed
            master.w * typed(torch.randn(4).double(), Tensor[P["tp"]])
    assert "__deepcopy__" in vars(nn.Parameter)
    assert vars(nn.Parameter)["__deepcopy__"].__module__ == "torch.nn.parameter"


def test_a_parameter_keeps_its_datas_type_and_declare_parameters_checks_it() -> None:
    """``nn.Parameter(x)`` is ``x``'s data: it keeps ``x``'s type (it was untyped, so
    ``declare_parameters`` stamped the annotation over it: an I-annotated parameter made of
    a V value, or an S(0) parameter made of an I one, passed), and ``declare_parameters``
    then reports the annotation that contradicts it, as ``spmd.declare`` does.  So does
    ``load_state_dict(sd, assign=True)``, which wraps each value as a Parameter.  Outside
    the block ``Parameter.__new__`` is torch's own again."""
    own = vars(nn.Parameter)["__new__"]
    m = _Sharded()
    with spmd.typecheck():
        v = typed(torch.randn(4), Tensor[V["tp"]])
        p = nn.Parameter(v.clone())
        assert spmd.typeof(p) == ty(tp=VARYING) and p.requires_grad and p.is_leaf
        m.w = nn.Parameter(typed(torch.randn(4), Tensor[I["tp"]]))
        with pytest.raises(SpmdTypeError) as e:
            spmd.declare_parameters(m)
        assert e.value.code == "spmd-annotation", e.value
        assert 'spmd.declare(_Sharded.w, Tensor[S[0, "tp"]]) but m.w is I on "tp"' in str(e.value)
        # a parameter may be this rank's rows cut by hand from the whole (Megatron's init):
        # the convert of the fix goes on the whole, not on the cut (the ckpt probe's F8)
        assert ('if m.w is this rank\'s part cut from the whole by hand (whole[r * k:(r + 1) * k], '
                'torch.split(whole, k, dim)[r]), which this checker does not see, cut it with '
                'convert(whole, "tp", src=I, dst=S(0)) instead') in str(e.value), e.value
        m.w = nn.Parameter(v.clone())  # V declared S(0): the declaration names the dim
        assert spmd.typeof(spmd.declare_parameters(m).w) == ty(tp=shard(0))
        assert spmd.typeof(nn.Parameter(torch.randn(4))) is None  # untyped data: untyped
        sd = {"w": typed(torch.randn(4), Tensor[P["tp"]])}
        m.load_state_dict(sd, assign=True)
        assert isinstance(m.w, nn.Parameter) and spmd.typeof(m.w) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError, match="spmd-annotation"):
            spmd.declare_parameters(m)
    assert vars(nn.Parameter)["__new__"] is own


class _NoDict:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @property
    def __dict__(self) -> dict:  # type: ignore[override]
        raise RuntimeError("no dict")


def test_naming_never_replaces_the_error() -> None:
    """An object in the caller whose attributes raise (a proxy) never turns the type error
    into its own exception while the message names the operands."""
    with spmd.typecheck():
        p = typed(torch.randn(3), Tensor[P["tp"]])
        proxy = _NoDict(p)  # noqa: F841 - in the caller's frame
        with pytest.raises(SpmdTypeError, match="cannot go through relu"):
            torch.relu(p)


def test_out_partial_axes_of_an_invariant_result_names_the_untyped_operand() -> None:
    """An untyped weight (FSDP's unsharded parameter, a plain tensor) does not count in the
    rule: the I result comes from the typed operands only, and the message says which
    operand was untyped (the probe: the fix "drop tp" was wrong there, the weight sharded)."""
    with spmd.typecheck():
        h = typed(mk(2, 8), Tensor[I["tp"]])
        w2 = mk(4, 8)
        with pytest.raises(SpmdTypeError) as e:
            spmd.linear(h, w2, out_partial_axes="tp")
    assert e.value.code == "spmd-expert-mode"
    assert ('as far as the typed operands tell: w2 is untyped on "tp"; if it is sharded there, '
            'declare it, e.g. spmd.declare(w2, Tensor[V["tp"]])') in str(e.value), str(e.value)


def test_partial_plus_a_gradient_free_invariant_suggests_reducing_to_invariant() -> None:
    """A forgotten row-parallel all_reduce before a residual whose input has no gradient (a
    first layer's data): the fix reduces to I, so the sum stays I for the next layer's
    reinterpret(I, R) (the zero3 probe pasted dst=R and the next layer failed)."""
    with spmd.typecheck():
        x = typed(torch.randn(4, 4), Tensor[I["tp"]])
        pout = typed(mk(4, 4), Tensor[P["tp"]])
        with pytest.raises(SpmdTypeError) as e:
            x + pout
    assert e.value.code == "spmd-partial-affine"
    assert 'all_reduce(pout, "tp", src=P, dst=I) first' in str(e.value), str(e.value)


@pytest.mark.parametrize("opt_cls,kwargs", [
    (torch.optim.Adam, {}), (torch.optim.Adam, {"foreach": True}),
    (torch.optim.Adam, {"amsgrad": True}), (torch.optim.AdamW, {"fused": True}),
    (torch.optim.Adagrad, {}), (torch.optim.RMSprop, {}),
])
def test_a_strict_block_runs_an_optimizer_whose_states_start_as_zeros(opt_cls, kwargs) -> None:
    """An optimizer's states made in the block (``torch.zeros_like(p)``, Adagrad's
    ``full_like(p, 0)``) are zero everywhere: no term of any type, so no untyped operand in a
    strict block; the first step's in-place write gives them the gradient's type.  (Before,
    ``strict=True`` failed spmd-untyped at every Adam step: the step needed a non-strict block.)"""
    w = nn.Parameter(torch.randn(4))
    with spmd.typecheck(strict=True):
        opt = opt_cls([w], lr=0.1, **kwargs)  # (Adagrad makes its state here)
        typed(w, Tensor[R["dp"]])
        for _ in range(2):
            w.grad = typed(torch.randn(4), Tensor[R["dp"]])
            opt.step()
        assert spmd.typeof(w) == ty(dp=REPLICATE)
        states = [v for v in opt.state[w].values() if isinstance(v, torch.Tensor) and v.dim()]
        assert states and all(spmd.typeof(v) == ty(dp=REPLICATE) for v in states), [
            spmd.typeof(v) for v in states]


def test_a_zero_written_by_anything_else_is_untyped_again() -> None:
    """Only a zero is no term: a zeros tensor written in place by an untyped value (through a
    view, ``.data``, numpy, DLPack too: writes that move no version counter), a ``ones_like``,
    a fill with 2, zeros that require a gradient (a parameter to be) are untyped targets, an
    error in a strict block; zeros kept zero by a scaling are still zeros."""
    r = torch.randn(4)
    with spmd.typecheck(strict=True):
        typed(r, Tensor[R["dp"]])
        z = torch.zeros_like(r)
        z.mul_(0.9)  # still zero
        z.add_(r)
        assert spmd.typeof(z) == ty(dp=REPLICATE)
        z = torch.zeros_like(r)
        z.add_(1)
        buf = torch.zeros(4)
        buf[1:3].copy_(torch.randn(2))  # written through a view
        with torch.no_grad():
            leaf = torch.zeros(4, requires_grad=True)
        for t in (z, buf, torch.ones_like(r), torch.full_like(r, 2.0), leaf):
            with pytest.raises(SpmdTypeError, match="spmd-untyped"), torch.no_grad():
                t.add_(r)
        untouched = torch.zeros(4)
        with pytest.raises(SpmdTypeError, match="spmd-untyped"):
            r + untouched  # read, not written: an untyped operand as before
        # writes that move no version counter (the regression probe: a stale zero let a
        # strict block accumulate a Partial into ones and sum them once per rank)
        for write in (lambda t: setattr(t, "data", torch.ones(4)),
                      lambda t: t.data.add_(1),
                      lambda t: t.numpy().__setitem__(slice(None), 1.0),
                      lambda t: torch.from_dlpack(t).add_(1),
                      lambda t: t.mul_(float("inf")).mul_(0)):  # NaN
            stale = torch.zeros(4)
            write(stale)
            with pytest.raises(SpmdTypeError, match="spmd-untyped"), torch.no_grad():
                stale.add_(r)


def test_a_zero_takes_the_type_written_into_it() -> None:
    """``out = torch.zeros_like(h); out[keep] = p`` (a pad-back of a Partial): the zeros take
    the Partial's type, so the forgotten all_reduce shows at the next non-linear op; a
    Partial accumulated into zeros is no affine term."""
    p = torch.randn(4)
    with spmd.typecheck(strict=True):
        spmd.declare(p, Tensor[P["tp"]])
        acc = torch.zeros(4)
        acc.add_(p)
        acc.add_(p)
        assert spmd.typeof(acc) == ty(tp=PARTIAL)
        out = torch.zeros_like(p)
        out[1:3] = p[1:3]
        assert spmd.typeof(out) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError, match="spmd-partial-nonlinear"):
            torch.relu(out)
    g = torch.randn(6)
    with spmd.typecheck():
        spmd.declare(g, Tensor[S[0, "tp"]])
        for target in (torch.zeros(4, 6), torch.zeros(3, 4, 6), torch.empty(3, 4, 6)):
            # g broadcast from the back: its blocks lie along the target's last dim, not dim 0
            # (the regression probe: typed S(0), a pasted all_gather(src=S(0)) gathered (8, 6)
            # where (4, 12) was right)
            target.copy_(g) if target.dim() == 3 else target.add_(g)
            assert spmd.typeof(target) == ty(tp=VARYING), spmd.typeof(target)
        same_rank = torch.zeros(6)
        same_rank.add_(g)
        assert spmd.typeof(same_rank) == ty(tp=shard(0))


def test_torchs_own_inplace_views_retype_the_tensor() -> None:
    """An in-place view torch's own code makes (unpad_sequence's ``transpose_`` of a [T, B, F]
    batch; Adamax(differentiable=True)'s ``unsqueeze_`` of a temporary) moves the shard dim of
    the object: the type follows the object (no error the user could act on; the regression
    probe's false errors); the same view in the user's code stays spmd-inplace, as the static
    checker reports it."""
    from torch.nn.utils.rnn import unpad_sequence

    x = torch.randn(5, 4, 3)
    with spmd.typecheck():
        spmd.declare(x, Tensor[S[1, "dp"]])
        rows = unpad_sequence(x.clone(), torch.tensor([5, 3, 2, 4]), batch_first=False)
        assert len(rows) == 4
        y = x.clone()
        with pytest.raises(SpmdTypeError, match="spmd-inplace"):
            y.transpose_(0, 1)


def test_nested_blocks_the_innermost_decides() -> None:
    """Blocks nest and the innermost one's ``strict`` applies: torch hands an op the inner
    mode ran on to the outer modes, which checked it again under their own strictness (a
    non-strict block for the optimizer's step inside a strict training loop still raised
    spmd-untyped on Adam's untyped moments)."""
    r = torch.randn(4)
    with spmd.typecheck(strict=True):
        typed(r, Tensor[R["dp"]])
        with spmd.typecheck():
            r + torch.randn(4)  # untyped beside typed: allowed here
        with pytest.raises(SpmdTypeError, match="spmd-untyped"):
            r + torch.randn(4)
    with spmd.typecheck():
        typed(r, Tensor[R["dp"]])
        with spmd.typecheck(strict=True):
            with pytest.raises(SpmdTypeError, match="spmd-untyped"):
                r + torch.randn(4)
    w = nn.Parameter(torch.randn(4))
    opt = torch.optim.Adam([w], lr=0.1)
    w.grad = torch.randn(4)
    opt.step()  # Adam's moments made and written outside the check mode: untyped
    with spmd.typecheck(strict=True):
        typed(w, Tensor[R["dp"]])
        w.grad = typed(torch.randn(4), Tensor[R["dp"]])
        with pytest.raises(SpmdTypeError, match="spmd-untyped"):
            opt.step()
        with spmd.typecheck():
            opt.step()
        assert spmd.typeof(w) == ty(dp=REPLICATE)



# --------------------------------------------------------------------------------------
# torch.utils.swap_tensors (set_swap_module_params_on_conversion(True)): conversions of typed
# parameters


class _RowsNet(nn.Module):
    w: Tensor[S[0, "dp"]]

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))


class _Doubled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


def _remove_parametrization(m: nn.Module) -> None:
    from torch.nn.utils import parametrize
    parametrize.register_parametrization(m, "w", _Doubled())
    parametrize.remove_parametrizations(m, "w", leave_parametrized=True)


_CONVERSIONS = {
    "double": lambda m: m.double(),
    "to": lambda m: m.to(torch.float64),
    "to_empty": lambda m: m.to_empty(device="cpu"),
    "share_memory": lambda m: m.share_memory(),
    "load_state_dict": lambda m: m.load_state_dict({"w": torch.zeros(4, 3)}),
    "load_state_dict_assign": lambda m: m.load_state_dict({"w": torch.zeros(4, 3)}, assign=True),
    "remove_parametrizations": _remove_parametrization,
}


@pytest.fixture
def swap_on_conversion():
    old = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(old)


@pytest.mark.parametrize("in_block", [False, True])
@pytest.mark.parametrize("how", sorted(_CONVERSIONS))
def test_swapped_parameters_keep_their_types(swap_on_conversion, how: str, in_block: bool) -> None:
    """torch swaps the parameters (torch.utils.swap_tensors) in these paths under the flag:
    a typed parameter raised "Cannot swap t1 because it has weakref associated with it" (the
    side table's weak reference), inside a block and after it.  The parameter keeps its
    identity and its declared type; an assigned (typed) gradient keeps its type, the
    optimizer-facing tables follow the object."""
    m = _RowsNet()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        # an assigned gradient: its own type (V, claimed S(0) by the assignment: not the dual;
        # an R one is no gradient of an S(0) parameter, rejected since p.grad = value is checked)
        m.w.grad = typed(torch.ones(4, 3), Tensor[V["dp"]])
    w = m.w
    with spmd.typecheck() if in_block else contextlib.nullcontext():
        _CONVERSIONS[how](m)
    assert m.w is w
    assert spmd.typeof(m.w) == ty(dp=shard(0))
    if how.startswith(("double", "to", "share")):
        assert spmd.typeof(m.w.grad) == ty(dp=VARYING)
    if how.startswith(("double", "to")) and how != "to_empty":
        assert m.w.dtype == torch.float64
    with spmd.typecheck():  # the next block sees the type
        with pytest.raises(SpmdTypeError, match="spmd-"):
            m.w.detach() + typed(torch.ones(4, 3), Tensor[P["dp"]])


def test_zeros_made_in_a_block_can_be_swapped() -> None:
    """Zeros made in a block (the check mode holds a weak reference to a factory's zeros)
    swapped by torch.utils.swap_tensors: swapped, and no zeros any more (they hold the other
    tensor's values now)."""
    r = torch.randn(4)
    with spmd.typecheck(strict=True):
        z, ones = torch.zeros(4), torch.ones(4)
        torch.utils.swap_tensors(z, ones)
        typed(r, Tensor[R["dp"]])
        with pytest.raises(SpmdTypeError, match="spmd-untyped"):
            z.add_(r)
        with pytest.raises(SpmdTypeError, match="spmd-untyped"):
            ones.add_(r)  # (the zeros' values, but another tensor's object: untyped)
    assert torch.equal(z, torch.ones(4))


def test_swap_of_a_value_sharded_on_another_dim_is_checked() -> None:
    """In a block a swap is checked as ``p.data = v`` is: an S(1) value swapped into an S(0)
    parameter misplaces every rank's block (spmd-inplace, before anything is swapped)."""
    w = nn.Parameter(torch.randn(4, 4))
    with spmd.typecheck():
        typed(w, Tensor[S[0, "dp"]])
        v = nn.Parameter(typed(torch.zeros(4, 4), Tensor[S[1, "dp"]]))
        with pytest.raises(SpmdTypeError, match="spmd-inplace"):
            torch.utils.swap_tensors(w, v)
        assert spmd.typeof(w) == ty(dp=shard(0)) and spmd.typeof(v) == ty(dp=shard(1))
        ok = nn.Parameter(typed(torch.zeros(4, 4), Tensor[S[0, "dp"]]))
        torch.utils.swap_tensors(w, ok)
    assert torch.equal(w, torch.zeros(4, 4)) and spmd.typeof(w) == ty(dp=shard(0))



@pytest.mark.parametrize("assign", [False, True])
def test_swapping_load_state_dict_checks_the_loaded_value(swap_on_conversion, assign: bool) -> None:
    """Under the flag load_state_dict swaps in ``param.module_load(value)`` where the default
    path runs ``param.copy_(value)``: checked as that copy (an S(1) value loaded into an S(0)
    parameter raised nothing, module_load's result was typed V); a value of the parameter's
    type loads."""
    m = _RowsNet()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        v = typed(torch.zeros(4, 3), Tensor[S[1, "dp"]])
        with pytest.raises(RuntimeError, match=r"copy_ would write v .*\[spmd-inplace\]"):
            m.load_state_dict({"w": v}, assign=assign)
        m.load_state_dict({"w": typed(torch.ones(4, 3), Tensor[S[0, "dp"]])}, assign=assign)
    assert torch.equal(m.w.detach(), torch.ones(4, 3)) and spmd.typeof(m.w) == ty(dp=shard(0))


# --------------------------------------------------------------------------------------
# sums over a sharded dim are pending partial sums (engine ops.reduced_partial_error)


def test_a_sum_over_the_shard_dim_is_pending_until_reinterpreted() -> None:
    with spmd.typecheck():
        g1, g2 = typed(mk(), Tensor[S[0, "tp"]]), typed(mk(), Tensor[S[1, "tp"]])
        with pytest.raises(SpmdTypeError) as e:
            torch.sqrt((g1 * g1).sum() + (g2 * g2).sum())  # SAM's local gradient norm
        assert e.value.code == "spmd-global"
        assert 'spmd.sum(g1 * g1, out_partial_axes="tp")' in str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            g1.norm()  # the norm of this rank's block: at the norm itself
        assert "norm of this rank's block" in str(e.value)
        assert spmd.typeof(g1.sum(1)) == SpmdType.of({"tp": shard(0)})  # the shard dim kept


def test_autograd_grad_of_a_varying_loss_offers_the_replica_copy() -> None:
    with spmd.typecheck():
        w1 = typed(torch.randn(3, 3).requires_grad_(), Tensor[R["dp"]])
        x = typed(torch.randn(2, 3), Tensor[V["dp"]])
        inner = (x @ w1).pow(2).mean()
        with pytest.raises(SpmdTypeError) as e:
            torch.autograd.grad(inner, (w1,), create_graph=True)
        assert 'w1_v = spmd.reinterpret(w1, "dp", src=R, dst=V)' in str(e.value)


def test_a_1d_bias_declared_s0_beside_s_minus1_activations_keeps_s_minus1() -> None:
    # Megatron's column-parallel ``h + bias``: the 1-d bias's dim 0 is, by broadcasting, the
    # activations' last dim (engine ops._aligned_shard_dim; the static checker, which sees no
    # ranks, types it V and says to declare the bias S(-1))
    with spmd.typecheck():
        h = typed(mk(2, 3, 4), Tensor[S[-1, "tp"]])
        b0 = typed(mk(4), Tensor[S[0, "tp"]])
        b1 = typed(mk(4), Tensor[S[-1, "tp"]])
        assert spmd.typeof(h + b0) == ty(tp=shard(-1))
        assert spmd.typeof(h + b1) == ty(tp=shard(-1))
        rows = typed(mk(4, 4), Tensor[S[0, "tp"]])
        assert spmd.typeof(rows + b0) == ty(tp=VARYING)  # dim 0 of rows is not the bias's dim
