"""Global SPMD in the runtime check mode, one process: rejections raise the engine's error.

(The accepted propagations are checked against single-device results on gloo worlds in
tests/runtime/test_global_world.py.)  Without a mesh the sharded dims' global lengths
are unknown, which the rules below do not need.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import spmd
from spmd import PS, P, R, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError

H3 = Tensor[PS[None, "dp", "tp"]]
W2 = Tensor[PS["tp", None], R["dp"]]


def _declared(*pairs):
    out = []
    for shape, ann in pairs:
        t = torch.randn(*shape)
        spmd.declare(t, ann)
        out.append(t)
    return out


REJECTED = [
    ("einsum sharded contraction", [((4, 4, 6), H3), ((6, 8), W2)],
     lambda h, w: torch.einsum("sbi,ih->sbh", h, w), 'out_partial_axes="tp"'),
    ("matmul sharded contraction", [((4, 4, 6), H3), ((6, 8), W2)], lambda h, w: h @ w,
     'spmd.matmul(h, w, out_partial_axes="tp")'),
    ("sum over sharded dim", [((4, 4, 6), H3)], lambda h: h.sum(-1), "out_partial_axes"),
    ("softmax over sharded dim", [((4, 4, 6), H3)], lambda h: h.softmax(-1), "spmd.redistribute(h"),
    ("slice a sharded dim", [((4, 4, 6), H3)], lambda h: h[..., :2], "spmd.redistribute(h"),
    ("int index a sharded dim", [((4, 4, 6), H3)], lambda h: h[:, 0], "spmd.redistribute(h"),
    ("cat along a sharded dim", [((4, 4, 6), H3)], lambda h: torch.cat([h, h], 2), "redistribute"),
    ("flatten, sharded inner factor", [((4, 4, 6), H3)], lambda h: h.flatten(1, 2), "outermost"),
    ("reshape merging a sharded inner dim", [((4, 4, 6), H3)], lambda h: h.reshape(4, -1),
     "outermost"),
    ("chunk along a sharded dim", [((4, 4, 6), H3)], lambda h: h.chunk(2, 1), "spmd.redistribute(h"),
    ("topk along a sharded dim", [((4, 4, 6), H3)], lambda h: h.topk(2),
     "it needs the whole dim on each rank"),
    ("sort along a sharded dim", [((4, 4, 6), H3)], lambda h: h.sort(1),
     "it needs the whole dim on each rank"),
    ("kthvalue along a sharded dim", [((4, 4, 6), H3)], lambda h: h.kthvalue(2),
     "each rank would reduce only its shard"),
    ("repeat_interleave by a tensor along a sharded dim", [((4, 4, 6), H3)],
     lambda h: h.repeat_interleave(torch.ones(6, dtype=torch.long), dim=2), "whole on each rank"),
    ("scatter along a sharded dim", [((4, 4, 6), H3)],
     lambda h: h.scatter(2, torch.zeros(4, 4, 6, dtype=torch.long), 1.0), "write into"),
    ("scatter with its index sharded along dim", [((8,), Tensor[PS["tp"]])],
     lambda a: torch.zeros(3).scatter(0, (a.detach().abs() * 7).long() % 3, a),
     "each rank writes only its own positions"),
    ("index_add of sharded positions into an R accumulator",
     [((8,), Tensor[PS["tp"]]), ((3,), Tensor[PS[None], R["tp"]])],
     lambda a, acc: acc.index_add(0, (a.detach().abs() * 7).long() % 3, a),
     "accumulate into torch.zeros_like(acc)"),
    ("roll along a sharded dim", [((4, 4, 6), H3)], lambda h: h.roll(1, -1), "spmd.redistribute(h"),
    ("flip along a sharded dim", [((4, 4, 6), H3)], lambda h: h.flip(-1), "spmd.redistribute(h"),
    ("fft along a sharded dim", [((4, 4, 6), H3)], lambda h: torch.fft.fft(h, dim=2),
     'move the shard to a dim not transformed first (an all_to_all, as a slab FFT does): '
     'spmd.redistribute(h, src=PS[None, "dp", "tp"], dst=PS["tp", "dp", None])'),
    ("rfft2 over a sharded dim", [((4, 4, 6), H3)], lambda h: torch.fft.rfft2(h),
     'gather the dim first: spmd.redistribute(h, src=PS[None, "dp", "tp"], dst=PS[None, None, None])'),
    ("fftn with s over the last sharded dims", [((4, 4, 6), H3)],
     lambda h: torch.fft.fftn(h, s=(6,)), "fft_fftn along dim 2"),
    ("diff along a sharded dim", [((4, 4, 6), H3)], lambda h: h.diff(dim=1), "diff along dim 1"),
    ("rot90 of a sharded dim", [((4, 4, 6), H3)], lambda h: h.rot90(1, (0, 1)), "rot90 along dim 1"),
    ("gather along a sharded dim", [((4, 4, 6), H3)],
     lambda h: torch.gather(h, 2, torch.zeros(4, 4, 6, dtype=torch.long)), "gathered dim 2"),
    ("cross_entropy mean over a sharded batch",
     [((4, 6), Tensor[PS["dp", None], R["tp"]]), ((4, 6), Tensor[PS["dp", None], R["tp"]])],
     lambda a, b: F.cross_entropy(a, b.softmax(1)), 'out_partial_axes="dp"'),
    ("add, different layouts", [((4, 6), Tensor[PS["dp", None], R["tp"]]),
                                ((4, 6), Tensor[PS[None, "dp"], R["tp"]])],
     lambda a, b: a + b, "spmd.redistribute("),
    # the vector products (session 41): the fix is the einsum at the operands' ranks
    ("dot of sharded vectors", [((8,), Tensor[PS["tp"]]), ((8,), Tensor[PS["tp"]])],
     lambda a, b: torch.dot(a, b), 'spmd.matmul(a, b, out_partial_axes="tp")'),
    ("vdot of sharded vectors", [((8,), Tensor[PS["tp"]]), ((8,), Tensor[PS["tp"]])],
     lambda a, b: torch.vdot(a, b), 'spmd.matmul(a.conj(), b, out_partial_axes="tp")'),
    ("inner over a sharded last dim", [((4, 6), Tensor[PS[None, "tp"]]), ((3, 6), Tensor[PS[None, "tp"]])],
     lambda a, b: torch.inner(a, b), 'spmd.einsum("ai,qi->aq", a, b, out_partial_axes="tp")'),
    ("tensordot over a sharded dim", [((4, 6), Tensor[PS["tp", None]]), ((4, 6), Tensor[PS["tp", None]])],
     lambda a, b: torch.tensordot(a, b, dims=2), 'spmd.einsum("ij,ij->", a, b, out_partial_axes="tp")'),
    ("tensordot with dim lists", [((4, 6), Tensor[PS["tp", None]]), ((4, 3), Tensor[PS["tp", None]])],
     lambda a, b: torch.tensordot(a, b, dims=([0], [0])), 'spmd.einsum("ia,iq->aq", a, b'),
    ("vecdot over a sharded last dim", [((4, 6), Tensor[PS[None, "tp"]]), ((4, 6), Tensor[PS[None, "tp"]])],
     lambda a, b: torch.linalg.vecdot(a, b), 'spmd.einsum("...i,...i->...", a.conj(), b'),
]


@pytest.mark.parametrize("case,inputs,fn,needle", REJECTED, ids=[c[0] for c in REJECTED])
def test_rejected(case, inputs, fn, needle):
    with spmd.typecheck():
        xs = _declared(*inputs)
        h = w = a = b = None  # noqa: F841 - names the messages use
        if len(xs) == 1:
            h = a = xs[0]
        else:
            h, w = a, b = xs
        with pytest.raises(SpmdTypeError) as info:
            fn(*xs)
    assert info.value.code in ("spmd-global", "spmd-mismatch"), info.value
    assert needle in str(info.value), str(info.value)


def test_fft_along_unsharded_dims_keeps_the_spec():
    """torch.fft, fftshift, flip, diff along unsharded dims: the spec kept, the local result
    (rfft's halved last dim, n=) of each rank's whole lines."""
    with spmd.typecheck():
        (u,) = _declared(((4, 6), Tensor[PS["tp", None], R["dp"]]))
        for y in (torch.fft.fft(u, dim=1), torch.fft.rfft(u), torch.fft.irfft(u, n=8),
                  torch.fft.fftshift(u, dim=-1), torch.fft.fftn(u, dim=(1,)), u.fliplr(), u.diff()):
            assert str(spmd.typeof(y)) == 'Tensor[PS["tp", None], R["dp"]]', (y.shape, spmd.typeof(y))


def test_vector_products_keep_an_uncontracted_shard():
    """inner / tensordot / vecdot read at the operands' ranks (inner was read as a broadcast
    "...i,...i->...": inner(a, w) of a row-sharded a and a replicated w was an error)."""
    with spmd.typecheck():
        a, w = _declared(((4, 6), Tensor[PS["tp", None]]), ((3, 6), Tensor[PS[None, None]]))
        assert str(spmd.typeof(torch.inner(a, w))) == 'Tensor[PS["tp", None]]'
        assert str(spmd.typeof(torch.tensordot(a, w, dims=([1], [1])))) == 'Tensor[PS["tp", None]]'
        m, n = _declared(((4, 6), Tensor[PS[None, "tp"]]), ((4, 6), Tensor[PS[None, "tp"]]))
        assert str(spmd.typeof(torch.linalg.vecdot(m, n, dim=0))) == 'Tensor[PS["tp"]]'


def test_out_partial_axes_gives_partial_in_global_mode():
    with spmd.typecheck():
        h, w = _declared(((4, 4, 6), H3), ((6, 8), W2))
        y = spmd.einsum("sbi,ih->sbh", h, w, out_partial_axes="tp")
        assert str(spmd.typeof(y)) == 'Tensor[PS[None, "dp", None], P["tp"]]'
        z = spmd.linear(h, w.T, out_partial_axes="tp")
        assert str(spmd.typeof(z)) == 'Tensor[PS[None, "dp", None], P["tp"]]'


def test_local_mode_still_reinterprets():
    with spmd.typecheck():
        (h,) = _declared(((4, 6), Tensor[V["tp"]]))
        (w,) = _declared(((6, 8), Tensor[V["tp"]]))
        y = spmd.matmul(h, w, out_partial_axes="tp")
        assert spmd.typeof(y).get("tp") == P.local_type


def test_local_map_switches_types_in_check_mode():
    seen = {}

    @spmd.local_map(in_types=Tensor[PS[None, "tp"]], out_types=Tensor[PS[None, "tp"]],
                    axes=("tp",))
    def body(h):
        seen["inside"] = spmd.typeof(h)
        return F.gelu(h)

    with spmd.typecheck():
        (h,) = _declared(((4, 6), Tensor[PS[None, "tp"]]))
        y = body(h)
        assert str(seen["inside"]) == 'Tensor[PS[None, None], S[1, "tp"]]' or \
            seen["inside"].get("tp").dim == 1, seen["inside"]
        assert spmd.typeof(y).spec == ((), ("tp",))
        assert spmd.typeof(h).spec == ((), ("tp",))
        # a wrong layout on entry names the redistribute that fixes it
        (g,) = _declared(((4, 6), Tensor[PS["tp", None]]))
        with pytest.raises(SpmdTypeError, match="redistribute") as e:
            body(g)
        # the fix names the argument as written (it said x)
        assert 'spmd.redistribute(g, src=PS["tp", None], dst=PS[None, "tp"])' in str(e.value)
    # outside check mode: the identity on values
    x = torch.randn(3)
    assert torch.equal(body(x), F.gelu(x))


def test_reshape_to_one_size_given_alone():
    """``x.reshape(-1)``, ``x.view(6)``: torch's varargs bind the one size alone (an int, not
    a tuple); read as the shape it is, as the static checker reads it (a probe: the check
    mode said the shape was not literal)."""
    with spmd.typecheck():
        (x,) = _declared(((2, 3), Tensor[PS["dp", None], R["tp"]]))
        for y in (x.reshape(-1), x.view(-1), x.reshape(6), x.view(6), x.reshape((-1,))):
            assert spmd.typeof(y).spec == (("dp",),)
        (v,) = _declared(((3,), Tensor[PS[None], R["dp", "tp"]]))
        assert spmd.typeof(v.expand(3)).spec == ((),)


def test_reshape_reads_literal_sizes_as_local_sizes():
    """``x.reshape(2, 2, 4)`` on a local ``[2, 8]`` block: the sizes are the local ones
    torch receives (the same code runs unchanged under torchrun), so the result is the
    global ``[2 * shards, 2, 4]`` with dim 0 sharded, whatever the mesh."""
    with spmd.typecheck():
        (x,) = _declared(((2, 8), Tensor[PS["dp", None], R["tp"]]))
        y = x.reshape(2, 2, 4)
        assert spmd.typeof(y).spec == (("dp",), (), ())
        h = torch.randn(4, 3, 8)
        spmd.declare(h, Tensor[PS[None, "tp", None], R["dp"]])
        assert spmd.typeof(h.view(4, 3, 2, 4)).spec == ((), ("tp",), (), ())
        assert spmd.typeof(h.unflatten(1, (3, 1))).spec == ((), ("tp",), (), ())


def test_declare_compares_the_spec_with_the_rank():
    """A partition spec has one entry per dim: JAX's PS[("dp", "tp")] for a 1-d tensor is
    PS["dp", "tp"] in Python (two dims); the check mode said nothing and a later collective
    failed on a dim out of range."""
    with spmd.typecheck():
        with pytest.raises(SpmdTypeError, match=r'is PS\["dp", "tp"\] in Python'):
            spmd.declare(torch.ones(4), Tensor[PS[("dp", "tp")]])
        with pytest.raises(SpmdTypeError, match="has 3 dims and the partition spec 2 entries"):
            spmd.declare(torch.ones(2, 2, 2), Tensor[PS["dp", None]])
        assert spmd.typeof(spmd.declare(torch.ones(4), Tensor[PS[("dp", "tp"),]])).spec == (("dp", "tp"),)


def test_declaring_a_local_type_on_a_global_value_makes_it_local():
    """Local code called with a global value (the static checker reads the parameter's local
    annotation): ``spmd.declare(h, Tensor[S[0, "dp"], R["tp"]])`` makes it local in the
    check mode too, each sharded axis its S(i), so a local weight beside it is no error."""
    from spmd import S
    with spmd.typecheck():
        (h,) = _declared(((4, 6), Tensor[PS["dp", None], R["tp"]]))
        (w,) = _declared(((6, 8), Tensor[S[1, "tp"], R["dp"]]))
        with pytest.raises(SpmdTypeError, match="no partition spec"):
            h @ w
        spmd.declare(h, Tensor[S[0, "dp"], R["tp"]])
        assert spmd.typeof(h).spec is None and spmd.typeof(h).get("dp") == S(0).local_type
        y = h @ w
        assert str(spmd.typeof(y)) == 'Tensor[S[0, "dp"], S[1, "tp"]]', spmd.typeof(y)
        # a declaration still states a fact: the dim sharded on dp is dim 0, not dim 1
        (g,) = _declared(((4, 6), Tensor[PS["dp", None], R["tp"]]))
        with pytest.raises(SpmdTypeError, match="cannot change one"):
            spmd.declare(g, Tensor[S[1, "dp"], R["tp"]])


# -- torch.optim on parameters declared global: the in-place ops of their steps -------------

_OPTIMIZERS = [
    ("AdamW foreach", lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.01, foreach=True)),
    ("AdamW single-tensor", lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.01,
                                                         foreach=False)),
    ("Adam foreach amsgrad", lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True, foreach=True)),
    ("Adam single-tensor amsgrad", lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True,
                                                               foreach=False)),
    ("SGD momentum foreach", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                        weight_decay=0.01, foreach=True)),
    ("SGD momentum single-tensor", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                              foreach=False)),
]


@pytest.mark.parametrize("name,make", _OPTIMIZERS, ids=[o[0] for o in _OPTIMIZERS])
@pytest.mark.parametrize("ann", [Tensor[PS["tp", None], R["dp"]], Tensor[PS["dp", "tp"]]],
                         ids=["row", "2d"])
def test_torch_optimizers_step_global_parameters(name, make, ann) -> None:
    """Adam, AdamW and SGD with momentum (foreach and single-tensor: addcmul_, addcdiv_,
    lerp_, mul_, add_, sqrt, maximum(out=), their _foreach forms) on parameters declared with
    a partition spec: no false error, the parameters and states keep their types, and the
    values are the unchecked optimizer's.  (Their values on real shards against the unsharded
    optimizer: tests/runtime/rt_global.py, check_torch_optimizers.)"""
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(4, 6, generator=g)
    grads = [torch.randn(4, 6, generator=g) for _ in range(3)]
    want = torch.nn.Parameter(w0.clone())
    ref = make([want])
    p = torch.nn.Parameter(w0.clone())
    opt = make([p])
    with spmd.typecheck():
        spmd.declare(p, ann)
        for gr in grads:
            want.grad = gr.clone()
            ref.step()
            p.grad = spmd.declare(gr.clone(), ann)
            opt.step()
        assert spmd.typeof(p) == spmd.typeof(spmd.declare(torch.zeros(4, 6), ann))
        for state in opt.state[p].values():
            if isinstance(state, torch.Tensor) and state.ndim == 2:
                assert spmd.typeof(state).spec == spmd.typeof(p).spec, (state, spmd.typeof(state))
    torch.testing.assert_close(p.detach(), want.detach())


def test_inplace_fix_redistributes_the_operand_never_self() -> None:
    """The probe's Adam line with a replicated state and a sharded gradient: the fix moves the
    gradient to the state's layout (pasted, the state is still updated in place), never the
    temporary ``v.mul_(...)`` (redistributing it updates a copy: the state never changes)."""
    with spmd.typecheck():
        v = spmd.declare(torch.zeros(4, 6), Tensor[PS[None, None], R["tp"]])
        gr = spmd.declare(torch.randn(4, 6), Tensor[PS["tp", None]])
        with torch.no_grad(), pytest.raises(SpmdTypeError) as info:
            v.mul_(0.99).addcmul_(gr, gr, value=0.01)
    msg = str(info.value)
    assert "spmd.redistribute(gr, src=PS[\"tp\", None], dst=PS[None, None])" in msg, msg
    assert "redistribute(v" not in msg and "writes into it in place" in msg, msg
    with spmd.typecheck():
        p = spmd.declare(torch.randn(4, 6), Tensor[PS["tp", None]])
        with torch.no_grad(), pytest.raises(SpmdTypeError) as info:
            p.renorm_(2, 0, 1.0)
    assert "spmd.redistribute" not in str(info.value) and "local_map" in str(info.value)


def test_copy_into_a_global_tensor_from_an_untyped_or_broadcast_source() -> None:
    """copy_'s result is read from the source: an untyped one (a checkpoint's tensor, so
    ``load_state_dict``), ``zeros_like``, a broadcast bias row or a scalar leave each rank's
    block as the tensor's own and keep its type (the in-place spec check of b7f1e24 called
    them a layout change: resuming from a checkpoint raised in check mode); a source laid out
    otherwise is still the global rule's error."""
    with spmd.typecheck():
        x = spmd.declare(torch.randn(4, 6), Tensor[PS["tp", None]])
        row = spmd.declare(torch.randn(6), Tensor[PS[None]])
        with torch.no_grad():
            for src in (torch.ones(4, 6), torch.zeros_like(x), row, torch.tensor(1.0)):
                x.copy_(src)
                assert spmd.typeof(x) == spmd.typeof(spmd.declare(torch.zeros(4, 6),
                                                                  Tensor[PS["tp", None]]))
            torch._foreach_copy_([x], [torch.ones(4, 6)])
            full = spmd.declare(torch.randn(4, 6), Tensor[PS[None, None], R["tp"]])
            with pytest.raises(SpmdTypeError):
                x.copy_(full)


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("ann", [Tensor[PS[None]], Tensor[PS[None], R["dp"]]],
                         ids=["ps", "ps-r"])
def test_an_in_place_op_on_an_assigned_global_grad_during_a_backward_is_no_accumulation(
        foreach: bool, ann: object) -> None:
    """The global twin of test_check_mode's local test: a hook scaling another parameter's
    assigned gradient (declared with a partition spec) in place during a backward that does
    not reach that parameter moves its version by the check mode's own op, not by autograd:
    no false accumulation error (R["dp"] + autograd's P["dp"]), the type stays."""
    w = torch.nn.Parameter(torch.randn(4))
    v = torch.nn.Parameter(torch.randn(4))
    with spmd.typecheck():
        spmd.declare(w, ann)
        spmd.declare(v, ann)
        x = spmd.declare(torch.randn(2, 4), Tensor[PS[None, None]])
        (x * v).sum().backward()
        v.grad = spmd.declare(torch.randn(4), ann)

        def hook(_: torch.Tensor) -> None:
            with torch.no_grad():
                if foreach:
                    torch._foreach_mul_([v.grad], 0.5)
                else:
                    v.grad.mul_(0.5)
        w.register_post_accumulate_grad_hook(hook)
        (x * w).sum().backward()
        assert spmd.typeof(v.grad) == spmd.typeof(spmd.declare(torch.zeros(4), ann))


def test_setitem_into_a_global_tensor_is_a_copy_into_the_view() -> None:
    """``x[index] = value`` writes value into the view ``x[index]`` as copy_ writes it, the
    static checker's rule (engine setitem): an untyped, zeros or broadcast value, or a scalar,
    keeps x's type (it said "__setitem__ has no shard propagation rule"); a value laid out
    otherwise is the layout error, whose fix redistributes the value, never x; an index of a
    sharded dim has no rule (local_map)."""
    with spmd.typecheck():
        x = spmd.declare(torch.randn(4, 6), Tensor[PS["tp", None]])
        want = spmd.typeof(x)
        row = spmd.declare(torch.randn(6), Tensor[PS[None]])
        with torch.no_grad():
            x[:] = torch.ones(4, 6)
            x[...] = torch.zeros_like(x)
            x[:, 1] = torch.ones(4)
            x[:, 2:4] = 0.0
            x[:] = row
            assert spmd.typeof(x) == want
            full = spmd.declare(torch.randn(4, 6), Tensor[PS[None, None], R["tp"]])
            with pytest.raises(SpmdTypeError) as info:
                x[:] = full
            assert "spmd.redistribute(full" in str(info.value), str(info.value)
            assert "spmd.redistribute(x" not in str(info.value)
            with pytest.raises(SpmdTypeError) as info:
                x[0] = torch.ones(6)
            assert "local_map" in str(info.value) and "spmd.redistribute" not in str(info.value)
