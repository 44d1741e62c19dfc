"""The rule soundness suite: every verdict of the engine's local rule, checked on real ranks.

For each op case (linear, multilinear per position, non-linear, reductions, views, and
the einsum rule: ``spmd.matmul/einsum/sum/linear`` with ``out_partial_axes`` in local
mode) and every combination of per-axis input types (R, I, V, P, S(0), S(1)) on one mesh
axis (2 and 4 ranks) and on two (a 2x2 mesh):

1. the verdict comes from the engine itself (:func:`spmd_mypy.engine.ops.propagate`,
   :func:`~spmd_mypy.engine.ops.classify`; for ``out_partial_axes``
   :func:`~spmd_mypy.engine.ops.partial_op`, as both adapters do);
2. every rank builds its local inputs with those types (float64, seeded), runs the op
   locally, and sends what it got to rank 0 (gloo);
3. rank 0 compares the denotation of the result (see :mod:`soundness.denote`) with the
   single-device op on the global values the input types denote, in the forward and, with a
   cotangent of the dual type, in the backward (the local input gradients, read with the
   inputs' dual types, against the single-device gradients).

An accepted combination must match with the engine's result type.  A rejected one is
checked against *every* candidate result type (R, I, V, P, S(d) per axis; on an
``out_partial_axes`` axis only the declared P): each must fail forward or backward, the
first failure being the counterexample.  A rejected combination some candidate computes
correctly is *conservative*: it must be listed in :data:`CONSERVATIVE` with the reason,
or the suite fails.

Why a rejected combination fails, in the seeds' notation (I mixed with R in ``add``)::

    forward:  [i] + [r]  on each rank  = i + r   fine for R, I or V results, but
    backward: the R operand's gradient is P (summed over ranks), the I operand's is I
              (the same on every rank): an R result's cotangent is P, [c0] [c1],
              so x0's gradient [c0] [c1] is not I; an I result's cotangent [c] [c]
              makes x1's gradient sum to 2c, not c.

Global SPMD (partition specs, issue 5) gets its own section once that rule exists:
:data:`SECTIONS` is the place to add it (an op case whose verdict function reads the spec).
"""

from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from spmd_mypy.engine.contractions import make_contraction
from spmd_mypy.engine.ops import (
    NORM_REDUCTIONS, NORMALISING, PENDING_REDUCTIONS, REDUCTIONS, SCANS, VARIANCE_REDUCTIONS,
    Operand, Reduction, classify, normalising_reduction, partial_op, propagate, reduced_partial_sum,
)
from spmd_mypy.engine.types import (
    INVARIANT, PARTIAL, REPLICATE, VARYING, Kind, LocalType, SpmdType, shard,
)
from spmd_mypy.engine.views import LAYOUT_OPS, make_move

from .denote import (
    Mesh, Mismatch, close, denote, dual_types, fmt, list_axes, project, reference_forward,
)

MESHES = {
    "a2": Mesh(("a",), (2,)),
    "a4": Mesh(("a",), (4,)),
    "a2xb2": Mesh(("a", "b"), (2, 2)),
}
# The worlds: one per rank count; a world runs the tasks of every mesh of its size.
WORLDS = {2: ("a2",), 4: ("a4", "a2xb2")}


def _fmt_lt(t: LocalType) -> str:
    return str(t)


@dataclass(frozen=True)
class OpCase:
    """One op as the suite runs it.

    ``engine``: the op's name in the engine's table; ``operands``: per engine operand the
    local shape of a tensor, or ``None`` for a Python scalar; ``fn`` takes the tensor
    operands (in order) and computes locally; ``ref`` (default ``fn``) is the single-device
    computation; ``positive``: tensor positions whose values must be positive (denominators).
    ``partial``: the op takes ``out_partial_axes`` (the einsum rule): ``fn(*xs, axes)``.
    ``dims``: the dims argument as the call states it (a reduction's ``dim``, softmax's
    ``dim``, layer_norm's ``normalized_shape``), passed to the engine as the adapters do.
    """

    name: str
    section: str
    engine: str
    operands: tuple[tuple[int, ...] | None, ...]
    fn: Callable[..., Any]
    ref: Callable[..., Any] | None = None
    positive: tuple[int, ...] = ()
    partial: bool = False
    dims: object = None
    no_grad: tuple[int, ...] = ()  # operand positions that carry no gradient (a where condition)
    zero: bool = False  # its Python scalar is 0 (the adapters mark a literal zero: Operand.zero)
    # a contraction's literal parameters as the call states them (einsum's ``equation``,
    # attention's ``is_causal``), passed to the engine as the adapters do (where a shard dim
    # goes: engine contractions); for an op on an (N, C, *spatial) input (engine
    # views.LAYOUT_OPS: the dims it keeps) its literal formals (pad's ``pad``, batch_norm's
    # ``training``)
    literals: tuple[tuple[str, object], ...] = ()

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [s for s in self.operands if s is not None]


def _spmd():
    import spmd  # the runtime (imported lazily: the engine side needs no torch)

    return spmd


def _cases() -> list[OpCase]:
    import torch
    import torch.nn.functional as F

    m23, m34, m13 = (2, 3), (3, 4), (1, 3)
    C = OpCase
    return [
        # linear (summands)
        C("add", "linear", "add", (m23, m23), lambda a, b: a + b),
        C("add bcast", "linear", "add", (m23, m13), lambda a, b: a + b),
        C("add scalar", "linear", "add", (m23, None), lambda a: a + 1.5),
        C("add zero", "linear", "add", (m23, None), lambda a: a + 0.0, zero=True),
        C("fill zero", "linear", "fill", (m23, None), lambda a: a.clone().fill_(0.0), zero=True),
        C("fill scalar", "linear", "fill", (m23, None), lambda a: a.clone().fill_(1.5)),
        C("sub", "linear", "sub", (m23, m23), lambda a, b: a - b),
        # the condition is an index operand: no gradient (as the check mode passes it); larger,
        # so that a random condition does not pick one branch everywhere by chance
        C("where", "linear", "where", ((4, 6), (4, 6), (4, 6)),
          lambda c, a, b: torch.where(c > 0, a, b), no_grad=(0,)),
        C("where zero", "linear", "where", ((4, 6), (4, 6), None),
          lambda c, a: torch.where(c > 0, a, 0.0), no_grad=(0,), zero=True),
        C("neg", "linear", "neg", (m23,), lambda a: -a),
        C("lerp", "linear", "lerp", (m23, m23, None), lambda a, b: torch.lerp(a, b, 0.25)),
        # index_add's source is a summand of the rows it is added to
        C("index_add", "linear", "index_add", (m23, m13),
          lambda a, s: a.index_add(0, torch.tensor([1]), s)),
        C("cat", "linear", "cat", (m23, m23), lambda a, b: torch.cat([a, b], 0)),
        # a Fourier transform is linear (its real and imaginary parts, as a real tensor)
        C("fft.fft(1)", "linear", "fft_fft", (m23,),
          lambda a: torch.view_as_real(torch.fft.fft(a, dim=1))),
        C("fft.rfft(0)", "linear", "fft_rfft", (m23,),
          lambda a: torch.view_as_real(torch.fft.rfft(a, dim=0))),
        # linear maps of the input: average pooling, interpolation
        C("avg_pool1d", "linear", "avg_pool1d", ((1, 2, 4),), lambda a: F.avg_pool1d(a, 2)),
        C("interpolate linear", "linear", "interpolate", ((1, 2, 3),),
          lambda a: F.interpolate(a, scale_factor=2.0, mode="linear")),
        # reductions
        C("sum", "reduction", "sum", (m23,), lambda a: a.sum()),
        C("sum(1)", "reduction", "sum", (m23,), lambda a: a.sum(1), dims=(1,)),
        C("mean(0)", "reduction", "mean", (m23,), lambda a: a.mean(0), dims=(0,)),
        C("cumsum(1)", "reduction", "cumsum", (m23,), lambda a: a.cumsum(1), dims=(1,)),
        # amax: 4 x 8, so that the argmaxes of two summands and of their sum coincide on every
        # row only by a negligible chance (on 2 x 3 they did: a P input looked correct)
        C("amax(1)", "reduction", "amax", ((4, 8),), lambda a: a.amax(1), dims=(1,)),
        C("sum(-1)", "reduction", "sum", (m23,), lambda a: a.sum(-1), dims=(-1,)),
        # torch.linalg's norms, by the name torch gives the builtin (plugin torch_namespaces)
        C("linalg.vector_norm", "reduction", "linalg_vector_norm", (m23,),
          lambda a: torch.linalg.vector_norm(a)),
        C("linalg.vector_norm(1)", "reduction", "linalg_vector_norm", (m23,),
          lambda a: torch.linalg.vector_norm(a, dim=1), dims=(1,)),
        # a variance over the shard dim: this rank's block's own (session 40)
        C("var(1)", "reduction", "var", (m23,), lambda a: a.var(1), dims=(1,)),
        C("std", "reduction", "std", (m23,), lambda a: a.std()),
        # views
        C("t", "view", "t", (m23,), lambda a: a.t()),
        C("reshape", "view", "reshape", (m23,), lambda a: a.reshape(3, 2)),
        C("getitem", "view", "__getitem__", (m23,), lambda a: a[0]),
        C("unsqueeze", "view", "unsqueeze", (m23,), lambda a: a.unsqueeze(0)),
        # per-operand views (engine PER_OPERAND_OPS): each output is its own argument's view,
        # the rule run on that argument alone; the other argument here is an untyped constant
        C("atleast_2d", "view", "atleast_2d", ((3,),), lambda a: torch.atleast_2d(a)),
        C("broadcast_tensors", "view", "broadcast_tensors", (m13,),
          lambda a: torch.broadcast_tensors(a, torch.zeros(2, 3, dtype=a.dtype))[0]),
        # multilinear: every position a factor, or a factor and a scalar / a denominator
        C("mul", "multilinear", "mul", (m23, m23), lambda a, b: a * b),
        C("mul bcast", "multilinear", "mul", (m23, m13), lambda a, b: a * b),
        C("mul scalar", "multilinear", "mul", (m23, None), lambda a: a * 2.5),
        C("matmul", "multilinear", "matmul", (m23, m34), lambda a, b: a @ b),
        C("einsum", "multilinear", "einsum", (m23, m34),
          lambda a, b: torch.einsum("ij,jk->ik", a, b), literals=(("equation", "ij,jk->ik"),)),
        C("div", "multilinear", "div", (m23, m23), lambda a, b: a / b, positive=(1,)),
        C("div scalar", "multilinear", "div", (m23, None), lambda a: a / 2.0),
        C("linear", "multilinear", "linear", (m23, (4, 3), (4,)),
          lambda x, w, b: F.linear(x, w, b)),
        # contractions move a shard dim to its label's place (engine contractions): batched
        # and 3-d / 4-d forms, so that S(0) and S(1) land on batch, sequence and head dims
        C("matmul batched", "multilinear", "matmul", ((2, 2, 3), m34), lambda a, b: a @ b),
        C("mm", "multilinear", "mm", (m23, m34), lambda a, b: torch.mm(a, b)),
        C("bmm", "multilinear", "bmm", ((2, 2, 3), (2, 3, 4)), lambda a, b: torch.bmm(a, b)),
        C("einsum bsh,hd", "multilinear", "einsum", ((2, 2, 3), m34),
          lambda a, b: torch.einsum("bsh,hd->bsd", a, b), literals=(("equation", "bsh,hd->bsd"),)),
        C("einsum bi,jb", "multilinear", "einsum", (m23, (4, 2)),
          lambda a, b: torch.einsum("bi,jb->bij", a, b), literals=(("equation", "bi,jb->bij"),)),
        C("linear 3d", "multilinear", "linear", ((2, 2, 3), (4, 3)), lambda x, w: F.linear(x, w)),
        C("attention", "non-linear", "scaled_dot_product_attention", ((2, 2, 3, 4),) * 3,
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        C("attention causal", "non-linear", "scaled_dot_product_attention", ((2, 2, 3, 4),) * 3,
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          literals=(("is_causal", True),)),
        C("addmm", "multilinear", "addmm", ((2, 4), m23, m34),
          lambda c, a, b: torch.addmm(c, a, b)),
        # bilinear / convolutions: factors and a bias summand, as linear
        C("bilinear", "multilinear", "bilinear", (m23, (2, 2), (2, 3, 2), (2,)),
          lambda x, y, w, b: F.bilinear(x, y, w, b)),
        C("conv1d", "multilinear", "conv1d", ((1, 2, 4), (2, 2, 3), (2,)),
          lambda x, w, b: F.conv1d(x, w, b)),
        # ops on an (N, C, *spatial) input keep the batch (a convolution contracts the
        # channels), the channels too where channel-wise (engine views.LAYOUT_OPS)
        C("conv2d", "multilinear", "conv2d", ((2, 2, 3, 3), (3, 2, 2, 2), (3,)),
          lambda x, w, b: F.conv2d(x, w, b)),
        C("adaptive_avg_pool2d", "linear", "adaptive_avg_pool2d", ((2, 2, 4, 4),),
          lambda a: F.adaptive_avg_pool2d(a, 2)),
        C("pixel_shuffle", "linear", "pixel_shuffle", ((2, 4, 2, 2),),
          lambda a: F.pixel_shuffle(a, 2)),
        C("pixel_unshuffle", "linear", "pixel_unshuffle", ((2, 2, 4, 4),),
          lambda a: F.pixel_unshuffle(a, 2)),
        C("pad", "linear", "pad", ((2, 2, 4),), lambda a: F.pad(a, (1, 2)),
          literals=(("pad", (1, 2)),)),
        C("pad reflect", "linear", "pad", ((2, 2, 4),), lambda a: F.pad(a, (2, 1), mode="reflect"),
          literals=(("pad", (2, 1)),)),
        # non-linear
        C("exp", "non-linear", "exp", (m23,), lambda a: a.exp()),
        C("tanh", "non-linear", "tanh", (m23,), lambda a: a.tanh()),
        C("pow 2", "non-linear", "pow", (m23, None), lambda a: a ** 2),
        C("softmax(-1)", "non-linear", "softmax", (m23,), lambda a: a.softmax(-1), dims=-1),
        C("softmax(0)", "non-linear", "softmax", (m23,), lambda a: a.softmax(0), dims=0),
        C("log_softmax(1)", "non-linear", "log_softmax", (m23,), lambda a: a.log_softmax(1),
          dims=1),
        C("layer_norm", "non-linear", "layer_norm", (m23,), lambda a: F.layer_norm(a, (3,)),
          dims=(3,)),
        C("layer_norm w b", "non-linear", "layer_norm", (m23, (3,), (3,)),
          lambda a, w, b: F.layer_norm(a, (3,), w, b), dims=(3,)),
        # (larger: each operand must win somewhere, or the gradient of one is zero everywhere)
        C("maximum", "non-linear", "maximum", ((4, 6), (4, 6)), lambda a, b: torch.maximum(a, b)),
        C("max_pool1d", "non-linear", "max_pool1d", ((2, 2, 8),), lambda a: F.max_pool1d(a, 2)),
        C("max_pool2d", "non-linear", "max_pool2d", ((2, 2, 4, 4),),
          lambda a: F.max_pool2d(a, 3, 1)),
        C("channel_shuffle", "linear", "channel_shuffle", ((2, 4, 3),),
          lambda a: F.channel_shuffle(a, 2)),
        C("local_response_norm", "non-linear", "local_response_norm", ((2, 4, 3),),
          lambda a: F.local_response_norm(a, 2)),
        C("group_norm", "non-linear", "group_norm", ((2, 4, 3),), lambda a: F.group_norm(a, 2)),
        C("instance_norm", "non-linear", "instance_norm", ((2, 2, 3),),
          lambda a: F.instance_norm(a)),
        # batch_norm in eval mode: an affine map per channel (the running statistics constants:
        # torch differentiates no running statistic); in training the statistics of the batch
        C("batch_norm eval", "non-linear", "batch_norm", ((2, 2, 3), (2,), (2,)),
          lambda x, w, b: F.batch_norm(x, torch.tensor([0.5, -1.0], dtype=x.dtype),
                                       torch.tensor([2.0, 0.5], dtype=x.dtype), w, b)),
        C("batch_norm train", "non-linear", "batch_norm", ((2, 2, 3),),
          lambda x: F.batch_norm(x, None, None, training=True), literals=(("training", True),)),
        # the einsum rule in local mode: the local op, declared Partial on out_partial_axes
        C("spmd.matmul", "einsum-local", "matmul", (m23, m34),
          lambda a, b, axes: _spmd().matmul(a, b, out_partial_axes=axes),
          ref=lambda a, b: a @ b, partial=True),
        C("spmd.einsum", "einsum-local", "einsum", (m23, m34),
          lambda a, b, axes: _spmd().einsum("ij,jk->ik", a, b, out_partial_axes=axes),
          ref=lambda a, b: torch.einsum("ij,jk->ik", a, b), partial=True,
          literals=(("equation", "ij,jk->ik"),)),
        C("spmd.sum", "einsum-local", "sum", (m23,),
          lambda a, axes: _spmd().sum(a, out_partial_axes=axes), ref=lambda a: a.sum(),
          partial=True),
        C("spmd.linear", "einsum-local", "linear", (m23, (4, 3)),
          lambda x, w, axes: _spmd().linear(x, w, out_partial_axes=axes),
          ref=lambda x, w: F.linear(x, w), partial=True),
    ]


SECTIONS = ("linear", "reduction", "view", "multilinear", "non-linear", "einsum-local")

# --------------------------------------------------------------------------------------
# Tasks and verdicts


@dataclass
class Task:
    mesh: str
    case: str
    in_types: tuple[tuple[LocalType, ...], ...]  # per tensor operand, per mesh axis
    partial_axes: tuple[int, ...] = ()
    accepted: bool = False
    out_types: tuple[LocalType, ...] | None = None
    errors: tuple[str, ...] = ()
    # the static checker's result type when it differs from the check mode's (it sees no
    # shapes and no rank); checked as a second claim
    static_out: tuple[LocalType, ...] | None = None

    def label(self) -> str:
        axes = MESHES[self.mesh].axes
        ins = ", ".join(_type_text(t, axes) for t in self.in_types)
        pa = ""
        if self.partial_axes:
            pa = ", out_partial_axes=" + ",".join(axes[i] for i in self.partial_axes)
        return f"[{self.mesh}] {self.case}({ins}{pa})"


def _type_text(types: Sequence[LocalType], axes: Sequence[str]) -> str:
    return "{" + ", ".join(f"{a}:{t}" for a, t in zip(axes, types)) + "}"


def local_options(ndim: int) -> list[LocalType]:
    return [REPLICATE, INVARIANT, VARYING, PARTIAL] + [shard(d) for d in range(min(ndim, 2))]


# the reductions the engine's rule over a shard dim concerns (ops.SHARD_SUMMING)
_SHARD_REDUCING = PENDING_REDUCTIONS | NORM_REDUCTIONS | VARIANCE_REDUCTIONS


def _reduction(case: OpCase, static: bool) -> Reduction | None:
    """The dims argument as the adapter gives it to the engine: the static checker without
    the rank (plugin/reductions.py), the check mode with it (runtime _torch_ops.py)."""
    ndim = None if static else len(case.shapes[0])
    if case.dims is None:
        # no dim: a full reduction, for the sums the pending rule reads (both adapters:
        # plugin reductions.read_reduction, runtime _torch_ops.reduction_of)
        if case.engine in _SHARD_REDUCING:
            return Reduction(None, False, ndim)
        return None
    if case.engine in NORMALISING:
        return normalising_reduction(case.engine, case.dims, ndim)
    if case.engine in REDUCTIONS or case.engine in SCANS:
        return Reduction(tuple(case.dims), False, ndim)  # type: ignore[arg-type]
    return None


# A fragment of engine ops.implicit_partial_error's message (build_tasks), and of
# ops.reduced_partial_error's (a sum or mean over the shard dim; a norm there)
_IMPLICIT_PARTIAL = "each rank's result is its part of a sum over the ranks (a Partial)"
_PENDING_SUM = "reduces the dim sharded on"
_BLOCK_NORM = "it is the norm of this rank's block only"
_DIAGONAL_BLOCK = "each rank holds one diagonal block"
# ... and of ops.scan_along_shard_error's (a cumsum, cumprod, ... along the shard dim)
_SCAN_ALONG = "scans the dim sharded on"
# ... and of ops.normalised_along_shard_error's (a softmax, normalize, layer_norm ... over it)
_NORM_ALONG = "normalises the dim sharded on"


def verdict(case: OpCase, mesh: Mesh, in_types: Sequence[Sequence[LocalType]],
            partial_axes: Sequence[int] = (), static: bool = False,
            ) -> tuple[bool, tuple[LocalType, ...] | None, tuple[str, ...]]:
    """The engine's verdict on one combination: accepted, the result's types, the errors.

    As the runtime check mode asks it (the operands' shapes and the rank known), or with
    ``static`` as the mypy plugin does (no shapes, no rank)."""
    it = iter(in_types)
    operands = []
    for i, shape in enumerate(case.operands):
        if shape is None:
            operands.append(Operand(None, "0.0", zero=True) if case.zero else Operand(None, "2.5"))
        else:
            t = next(it)
            operands.append(Operand(SpmdType.of(dict(zip(mesh.axes, t))), f"x{i}",
                                    can_grad=i not in case.no_grad,
                                    shape=None if static else tuple(shape)))
    move = make_contraction(case.engine, dict(case.literals))
    if move is None and case.engine in LAYOUT_OPS:
        move = make_move(case.engine, dict(case.literals), None if static else len(case.shapes[0]))
    if partial_axes:  # out_partial_axes: the local op, then P there (both adapters' rule)
        res = partial_op(case.engine, operands, [mesh.axes[k] for k in partial_axes],
                         reduction=_reduction(case, static), move=move)
    else:
        res = propagate(classify(case.engine), operands, reduction=_reduction(case, static),
                        move=move)
    errors = [f"{e.code}: {e.message}" for e in res.errors]
    t = res.type
    if errors:
        return False, None, tuple(errors)
    out = tuple(t.get(a) for a in mesh.axes)
    assert all(o is not None for o in out), (case.name, in_types, t)
    return True, out, ()  # type: ignore[return-value]


def build_tasks(mesh_name: str, sections: Sequence[str] | None = None,
                sample: int | None = None, seed: int = 0,
                cases: Sequence[str] | None = None) -> list[Task]:
    """Every combination (or ``sample`` of them per op case) for one mesh."""
    mesh = MESHES[mesh_name]
    rng = random.Random(f"{seed}:{mesh_name}")
    out: list[Task] = []
    for case in _cases():
        if sections and case.section not in sections:
            continue
        if cases and case.name not in cases:
            continue
        per_operand = [list(itertools.product(*[local_options(len(s))] * len(mesh.axes)))
                       for s in case.shapes]
        combos = list(itertools.product(*per_operand))
        partial_sets: list[tuple[int, ...]] = [()]
        if case.partial:
            partial_sets = [s for n in range(1, len(mesh.axes) + 1)
                            for s in itertools.combinations(range(len(mesh.axes)), n)]
        all_tasks = []
        for p in partial_sets:  # ``sample`` per set of out_partial_axes
            chosen = combos
            if sample is not None and len(combos) > sample:
                chosen = rng.sample(combos, sample)
            all_tasks += [(c, p) for c in chosen]
        for combo, pa in all_tasks:
            acc, ot, errs = verdict(case, mesh, combo, pa)
            sacc, sot, serrs = verdict(case, mesh, combo, pa, static=True)
            # The one rule whose static verdict may differ: a contraction summing over a dim
            # sharded in every Varying operand (engine contractions.partial_sum).  Without the
            # operands' ranks the static checker reads the dims at every rank the op takes, so
            # it may reject (a 2-d reading: F.linear(x: S(1), w: S(1)) contracts in-features)
            # what the check mode, at the real ranks, accepts (x 3-d: S(1) is the sequence).
            # The check mode raises its own verdict at the result's first use, not here
            # (runtime/spmd/_checking.py _PENDING); the task keeps the check mode's verdict.
            # A diagonal block too: statically F.linear(x: S(1), w: S(0)) skips the 2-d
            # reading (x's chunk of the in-features against w's whole rows, which no
            # consistent global program gives) and reports the block of the 3-d one; the
            # check mode, at sizes that happen to fit locally, runs the 2-d reading as a V.
            static_only_partial = (acc and not sacc and serrs
                                   and all(_IMPLICIT_PARTIAL in e or _DIAGONAL_BLOCK in e
                                           for e in serrs))
            # The other way round for a sum, mean or norm over the shard dim (engine
            # ops.reduced_partial_error): the static checker reports it only where the dim
            # reduced is the shard dim at every rank the op takes (x.sum(-1) of S(1) is the
            # sequence dim of a 3-d x); the check mode, at the real rank, reports it (its
            # pending sum) where the static checker keeps a V.  The task keeps the check
            # mode's verdict (the static claim, V, is each rank's own block's value).
            check_only_pending = (not acc and sacc and errs
                                  and all(_PENDING_SUM in e or _BLOCK_NORM in e for e in errs))
            # So for a scan along the shard dim (engine ops.scan_along_shard_error): cumsum(1)
            # of S(-1) is along the shard dim of a 2-d operand only
            check_only_pending = check_only_pending or (
                not acc and sacc and errs and all(_SCAN_ALONG in e for e in errs))
            # and for a normalisation over it (engine ops.normalised_along_shard_error):
            # softmax(-1) of S(1) normalises the shard dim of a 2-d operand only
            check_only_pending = check_only_pending or (
                not acc and sacc and errs and all(_NORM_ALONG in e for e in errs))
            # A diagonal block (engine ops.diagonal_block_error: two operands sharded on one
            # axis on two dims that both stay in the result): the check mode sees it at the
            # real ranks (x: S(0) @ w: S(1), both 2-d); the static checker only where every
            # rank the op takes shows it or is otherwise wrong (since session 42 an undeclared
            # partial sum counts as wrong: fi: S(0) @ ft.T: S(-1) read 1-d is a dot product;
            # x @ w of unknown ranks may still contract x's shard dim in a legal reading),
            # else a plain V.  No new conservative verdict: each reading it rejects is one
            # the check mode rejects at those ranks (a block, listed below, or an implicit
            # partial sum).  The task keeps the check mode's verdict.
            check_only_pending = check_only_pending or (
                not acc and sacc and errs and all(_DIAGONAL_BLOCK in e for e in errs))
            assert static_only_partial or check_only_pending or (
                sacc == acc and bool(serrs) == bool(errs)), (case.name, combo)
            out.append(Task(mesh_name, case.name, tuple(combo), pa, acc, ot, errs,
                            sot if sot != ot else None))
    return out


# --------------------------------------------------------------------------------------
# Values on the ranks


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def make_local(salt: object, types: Sequence[LocalType], coord: Sequence[int],
               shape: Sequence[int], positive: bool = False):
    """This rank's local value of a tensor of ``types``: it depends on the rank's
    coordinate on the V, S and P axes only (so it is common on R and I axes)."""
    import torch

    key = tuple(c if t.kind in (Kind.V, Kind.P) else 0 for c, t in zip(coord, types))
    g = torch.Generator().manual_seed(_seed(salt, key))
    if positive:
        return 0.5 + torch.rand(tuple(shape), generator=g, dtype=torch.float64)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64)


_GLOBAL_INPUTS: dict[tuple, list[dict]] = {}  # task -> per input, its locals by coordinate
_REFS: dict[tuple, dict] = {}  # (task index, concat, list axes) -> the reference forward


def all_inputs(task: Task, index: int) -> list[dict]:
    """Every rank's local inputs of a task (regenerated from the seed: it is deterministic)."""
    key = _task_key(task, index)
    got = _GLOBAL_INPUTS.get(key)
    if got is None:
        coords = MESHES[task.mesh].coords()
        per = {c: task_inputs(task, index, c) for c in coords}
        got = [{c: per[c][j] for c in coords} for j in range(len(task.in_types))]
        _GLOBAL_INPUTS.clear() if len(_GLOBAL_INPUTS) > 64 else None
        _REFS.clear() if len(_REFS) > 256 else None
        _GLOBAL_INPUTS[key] = got
    return got


def _task_key(task: Task, index: int) -> tuple:
    return (index, task.mesh, task.case, task.in_types, task.partial_axes)


def task_inputs(task: Task, index: int, coord: Sequence[int]):
    case = CASES[task.case]
    return [make_local(("in", index, j), t, coord, shape, j in case.positive)
            for j, (t, shape) in enumerate(zip(task.in_types, case.shapes))]


def cotangent(index: int, cand: Sequence[LocalType], coord: Sequence[int], shape):
    return make_local(("cot", index, tuple(map(str, cand))), dual_types(cand), coord, shape)


def run_forward(task: Task, index: int, coord: Sequence[int]):
    import torch

    case = CASES[task.case]
    xs = [x.requires_grad_() for x in task_inputs(task, index, coord)]
    axes = MESHES[task.mesh].axes
    if case.partial:
        pa = tuple(axes[k] for k in task.partial_axes)
        y = case.fn(*xs, pa[0] if len(pa) == 1 else pa)
    else:
        y = case.fn(*xs)
    assert isinstance(y, torch.Tensor)
    return xs, y


def run_backward(xs, y, index: int, cand: Sequence[LocalType], coord: Sequence[int]):
    import torch

    cot = cotangent(index, cand, coord, y.shape)
    grads = torch.autograd.grad(y, xs, cot, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(xs, grads)]


# --------------------------------------------------------------------------------------
# Rank 0: the comparisons


def _reference(case: OpCase):
    ref = case.ref or case.fn

    def call(*args):
        try:
            return ref(*args)
        except RuntimeError as e:  # shapes of the global values that do not fit
            raise Mismatch("the global values have no single-device computation: "
                           + str(e).splitlines()[0]) from None

    return call


def _compare(expected: dict, got: dict, got_types, concat: frozenset[int], what: str) -> None:
    for key, e in expected.items():
        g = got[project(key, got_types, concat)]
        if not close(g, e):
            where = "" if all(k is None for k in key) else f" at list coordinate {key}"
            raise Mismatch(f"{what}{where}: single-device {fmt(e)}, ranks give {fmt(g)}")


def check_forward(task: Task, index: int, cand: Sequence[LocalType], outs: dict) -> str | None:
    """None if the locals ``outs`` (by coordinate) have the meaning ``cand`` claims."""
    case = CASES[task.case]
    mesh = MESHES[task.mesh]
    ref = _reference(case)
    ins = all_inputs(task, index)
    concat: frozenset[int] = frozenset()
    modes = [frozenset()] + [frozenset({k}) for k, t in enumerate(cand) if t.dim is not None]
    pending = _pending_axes(task) if not task.accepted else []
    if pending and all(cand[k].kind is Kind.P for k in pending):
        # a sum over the shard dim claimed P there (the pending sum's model): the sum over
        # the ranks of their results against the op on the concatenated input
        modes = [frozenset(pending)]
    try:
        for concat in modes:
            for j, t in enumerate(task.in_types):
                for k in concat:
                    if t[k].kind is Kind.V and t[k].dim is None:
                        raise Mismatch(f"the result claims S on axis {mesh.axes[k]} but x{j} is a "
                                       f"plain V there (no concatenation to compare with)")
            out_den = denote(outs, cand, concat, what="the result", names=mesh.axes)
            mode = "" if not concat else f" (read as the concatenation on {mesh.axes[min(concat)]})"
            la = list_axes(cand, concat)
            rkey = (_task_key(task, index), concat, frozenset(la))
            if rkey not in _REFS:
                try:
                    dens = [(denote(ins[j], t, concat), t) for j, t in enumerate(task.in_types)]
                    _REFS[rkey] = _sum_partial_axes(
                        task, reference_forward(ref, dens, mesh, la, concat))
                except Mismatch as e:
                    _REFS[rkey] = {"error": str(e)}  # type: ignore[dict-item]
            expected = _REFS[rkey]
            if "error" in expected:
                raise Mismatch(expected["error"])
            _compare(expected, out_den, cand, concat, "forward" + mode)
    except Mismatch as e:
        return (S_LAYOUT if concat else "") + str(e)
    return None


def _sum_partial_axes(task: Task, per_key: dict) -> dict:
    """The einsum rule's meaning: on an ``out_partial_axes`` axis the global result is the
    sum over the ranks of the local op on each rank's operands (the V operands' list
    elements): ``reinterpret(V,P)`` of the local result."""
    if not task.partial_axes:
        return per_key
    out: dict = {}
    for key, v in per_key.items():
        k2 = tuple(None if i in task.partial_axes else c for i, c in enumerate(key))
        out[k2] = out[k2] + v if k2 in out else v
    return out


def check_backward(task: Task, index: int, cand: Sequence[LocalType], grads: dict,
                   out_shape) -> str | None:
    """None if the local input gradients (by coordinate, for a cotangent of the dual of
    ``cand``) read with the inputs' dual types equal the single-device gradients."""
    import torch

    case = CASES[task.case]
    mesh = MESHES[task.mesh]
    coords = mesh.coords()
    ref = _reference(case)
    none: frozenset[int] = frozenset()
    try:
        ins = all_inputs(task, index)
        leaves = []
        for j, t in enumerate(task.in_types):
            den = denote(ins[j], t)
            leaves.append({k: v.clone().requires_grad_() for k, v in den.items()})
        cot_t = dual_types(cand)
        cot = denote({c: cotangent(index, cand, c, out_shape) for c in coords}, cot_t)
        axes = list_axes(cand, none)
        for t in task.in_types:
            axes |= list_axes(t, none)
        from .denote import full_keys

        loss = torch.zeros((), dtype=torch.float64)
        ys = {key: ref(*[leaves[j][project(key, t, none)] for j, t in enumerate(task.in_types)])
              for key in full_keys(mesh, axes)}
        for key, y in _sum_partial_axes(task, ys).items():
            loss = loss + (cot[project(key, cot_t, none)] * y).sum()
        flat = [v for lv in leaves for v in lv.values()]
        gs = torch.autograd.grad(loss, flat, allow_unused=True) if loss.requires_grad else [None] * len(flat)
        it = iter(gs)
        for j, t in enumerate(task.in_types):
            expected = {}
            for k, v in leaves[j].items():
                g = next(it)
                expected[k] = torch.zeros_like(v) if g is None else g
            got = denote({c: grads[c][j] for c in coords}, dual_types(t), none,
                         what=f"the gradient of x{j} (dual type {_type_text(dual_types(t), mesh.axes)})",
                         names=mesh.axes)
            _compare(expected, got, dual_types(t), none, f"backward: gradient of x{j}")
    except Mismatch as e:
        return str(e)
    return None


def candidates(task: Task, out_ndim: int) -> list[tuple[LocalType, ...]]:
    mesh = MESHES[task.mesh]
    per_axis = [[PARTIAL] if k in task.partial_axes else local_options(out_ndim)
                for k in range(len(mesh.axes))]
    return list(itertools.product(*per_axis))


# --------------------------------------------------------------------------------------
# Conservative rejections: the combinations the rule rejects although some result type
# computes them correctly without comms, each with why the rejection is deliberate.


REDUNDANT_PARTIAL = (
    "out_partial_axes names an axis where an operand is already Partial: the local result is "
    "P there without the declaration (so P is correct), but the checker asks to drop the axis: "
    "declaring reinterpret(V,P) of a value that is not V is what the table forbids, and a "
    "redundant declaration usually means the user expected a contraction that is not there")


FREE_SHARD_PARTIAL = (
    "out_partial_axes names an axis where the local result is S(i) (an output label sharded: a "
    "column-parallel weight): the declared P is the sum of the ranks' different blocks, which "
    "the runtime computes as declared, but it is no contraction of the global operands (their "
    "einsum concatenates the blocks): the checker asks to drop the axis")


AFFINE_NORM_PARAMS = (
    "layer_norm(x, shape, w, b) (batch_norm(x, m, v, w, b) alike) is w * normalized(x) + b: "
    "affine in the weight and bias, so "
    "with x not Partial a P weight and bias give a correct P result; the engine treats every "
    "operand of a non-linear op as non-linear (P is an error), the safe default")


FILL_CONSTANT = (
    "fill(x, c) with c a non-zero scalar is the constant c on every rank, a correct R whatever "
    "x was; the engine keeps x as a summand so that fill_ (in place, where x's type must stay) "
    "rejects a P x: the out-of-place fill of a P x is rejected too (write torch.full_like)")


SCAN_ALONG_SHARD = (
    "a scan along the dim its operand is sharded on gives each rank the scan of its own block: V "
    "describes that (a value of its own), but not the shard of the whole's scan the S(i) claim "
    "would make of it (the carry from the earlier ranks is missing; session 45: a "
    "sequence-parallel cumsum, 1.8 off, typed V and claimed S(1) by both checkers); rejected by "
    "design (engine ops.scan_along_shard_error), a per-rank scan meant passes the operand "
    "declared plain V")


NORMALISED_ALONG_SHARD = (
    "a softmax, log_softmax, softmin, normalize, layer_norm or rms_norm over the dim its operand "
    "is sharded on gives each rank its own block normalised by that block's statistics: V "
    "describes that (a value of its own), but not the shard of the whole's the S(i) claim would "
    "make of it (session 45: a softmax over a sequence- or vocab-sharded dim, typed V and "
    "claimed S(i) by both checkers); rejected by design (engine "
    "ops.normalised_along_shard_error), a per-rank op meant (ring attention's block softmax) "
    "passes the operand declared plain V")


IMPLICIT_PARTIAL = (
    "a contraction summing over a dim sharded on an axis in every Varying operand gives each "
    "rank its part of a sum: V describes that (each rank holds a value of its own), but local "
    "SPMD, like global (SPEC section 6), makes no Partial implicitly: the call says "
    "out_partial_axes (or passes the product straight to reinterpret(V->P)), so that a loss, "
    "a softmax or a norm of partial products is caught (session 37: a CLIP loss of partial "
    "logits, 2.2 off)")


DIAGONAL_BLOCK = (
    "a contraction whose operands are sharded on one axis on two dims that both stay in the "
    "result gives each rank one diagonal block: V describes that (a value of its own), and P "
    "its sum, but no later op can use it as a shard of the whole (session 41: cross-attention "
    "K/V from a sequence-sharded encoder output with a column-parallel weight, loss 6.531 vs "
    "6.410, typed V by both checkers); rejected by design (engine ops.diagonal_block_error), "
    "a block meant passes one operand declared plain V")


def _pending_axes(task: Task) -> list[int]:
    """The mesh axes (indices) on which the task's sum, mean or norm reduces its operand's
    shard dim (engine ``reduced_partial_sum`` at the operand's rank, as the check mode asks)."""
    case = CASES[task.case]
    if task.partial_axes or not task.in_types:
        return []
    if case.engine not in _SHARD_REDUCING:
        return _implicit_partial_axes(task)
    red = _reduction(case, static=False)
    if red is None:
        return []
    mesh = MESHES[task.mesh]
    return [k for k, lt in enumerate(task.in_types[0])
            if reduced_partial_sum(case.engine, lt, mesh.axes[k], red, case.shapes[0])]


def _implicit_partial_axes(task: Task) -> list[int]:
    """The mesh axes (indices) on which a rejected contraction's result is an implicit partial
    sum (its only errors spmd-global's implicit partial, naming the axes): what a typed
    reduction with src=P takes as P (:func:`_taken_model`).  Not with out_partial_axes (its
    P there is declared; the forward reads the undeclared axes as lists)."""
    if task.accepted or task.partial_axes or not task.errors or not all(
            e.startswith("spmd-global") and _IMPLICIT_PARTIAL in e for e in task.errors):
        return []
    return [k for k, a in enumerate(MESHES[task.mesh].axes)
            if any(f'sharded on "{a}"' in e for e in task.errors)]


def _pending_model(task: Task, passing: list[tuple[LocalType, ...]]) -> tuple[str, str] | None:
    """The numerical model of a rejected sum, mean or norm over the shard dim (engine
    ``ops.reduced_partial_error``), checked against what the ranks computed (None: not such
    a task).  The local result is this rank's block's value (V, the list reading, passes),
    and:

    - a sum (``sum``, ``nansum``): the rank's part of the global sum: read as P on the
      pending axes it IS the global sum (the type ``spmd.sum(..., out_partial_axes=)``
      gives, the engine's ``partial_op``, must pass forward and backward); the rule keeps it
      pending because nothing in the call says which of the two the code means;
    - a mean: the ranks' means sum to no mean of the whole (the axis size times it, blocks
      of one size): read as P it must fail (a "sum of means" that passed would make the
      rule's message wrong);
    - a norm: the norm of this rank's block, no part of anything: P must fail too; so must
      a variance's or standard deviation's (this rank's own mean and count).

    ("pending-sum", what was checked) when the model holds, ("pending-sum-MISMATCH", why)
    when it does not (a failure, as an accepted mismatch is)."""
    pending = _pending_axes(task)
    if not pending or not task.errors or not all(
            _PENDING_SUM in e or _BLOCK_NORM in e for e in task.errors):
        return None
    case = CASES[task.case]
    mesh = MESHES[task.mesh]
    names = ", ".join(mesh.axes[k] for k in pending)
    own = [c for c in passing if all(c[k].kind is Kind.V for k in pending)]
    if not own:
        return ("pending-sum-MISMATCH",
                f"no V reading on {names} passes: the local result is not each rank's own "
                f"block's {case.engine}")
    if case.engine in PENDING_REDUCTIONS and case.engine in ("sum", "nansum"):
        ok, declared, errs = verdict(case, mesh, task.in_types, tuple(pending))
        if not ok or declared is None:
            return ("pending-sum-MISMATCH", f"spmd.sum(..., out_partial_axes={names}) is "
                                            f"rejected: {errs[:1]}")
        if declared not in passing:
            return ("pending-sum-MISMATCH",
                    f"read as {_type_text(declared, mesh.axes)} (spmd.sum(..., "
                    f"out_partial_axes={names})) the local sums are not the global sum")
        return ("pending-sum", f"the local sum read as {_type_text(declared, mesh.axes)} is "
                               f"the global sum (its V reading passes too)")
    summed = [c for c in passing if all(c[k].kind is Kind.P for k in pending)]
    if summed:
        return ("pending-sum-MISMATCH",
                f"read as {_type_text(summed[0], mesh.axes)} the local {case.engine}s are the "
                f"global one: the rule's message (no sum over the ranks) is wrong here")
    return ("pending-sum", f"each rank's {case.engine} is its block's (V); read as P on "
                           f"{names} it is no {case.engine} of the whole")


# The typed reductions that take a pending partial sum as P (engine collectives.takes_pending):
# spmd.all_reduce / reduce_scatter with src=P, and Megatron's mappings that are those
# (reduce_from_tensor_model_parallel_region, reduce_scatter_to_sequence_parallel_region).
def _takers() -> list[tuple[str, str, LocalType | None, LocalType | None]]:
    from spmd_mypy.engine.collectives import takes_pending
    from spmd_mypy.engine.megatron import TYPED_MAPPINGS

    out: list[tuple[str, str, LocalType | None, LocalType | None]] = [
        ("spmd.all_reduce", "all_reduce", PARTIAL, REPLICATE),
        ("spmd.reduce_scatter", "reduce_scatter", PARTIAL, shard(0))]
    out += [(name, m.collective, m.src, m.dst) for name, m in sorted(TYPED_MAPPINGS.items())
            if takes_pending(m.collective, m.src, m.dst)]
    return out


def _taken_model(task: Task, passing: list[tuple[LocalType, ...]]) -> tuple[str, str] | None:
    """A contraction's implicit partial sum (rejected, spmd-global: the call does not say P)
    passed to a typed reduction with src=P (:func:`_takers`): the engine's rule for that
    (collectives ``pending_left``; ops ``claimed_partial_error``, an R or I term of an affine
    op, ``F.linear(h, w, b)``'s bias, summed once per rank) checked against the ranks: when a
    reduction takes it, the local results read as P on the pending axes must be the sum
    (a candidate with P there passes forward and backward); when the rule rejects it, no
    such candidate may pass (session 40: an R bias was taken, 1.34 off on 2 ranks).
    ("taken", what was checked) when the model holds, ("pending-sum-MISMATCH", why) when
    not; None for other tasks."""
    from spmd_mypy.engine.collectives import pending_left
    from spmd_mypy.engine.ops import claimed_partial_error

    case = CASES[task.case]
    mesh = MESHES[task.mesh]
    pending = _implicit_partial_axes(task)
    if not pending or case.engine in _SHARD_REDUCING or any(s is None for s in case.operands):
        return None
    names = tuple(mesh.axes[k] for k in pending)
    operands = [Operand(SpmdType.of(dict(zip(mesh.axes, t))), f"x{j}")
                for j, t in enumerate(task.in_types)]
    verdicts: dict[str, list[str]] = {}
    for call, op, src, dst in _takers():
        if pending_left(op, names, src, dst, names) != ():
            return ("pending-sum-MISMATCH", f"{call} over {', '.join(names)} does not take it")
        errs = [e.code for a in names if (e := claimed_partial_error(
            case.engine, operands, a, "x0", None, (f"{call}(", ")"), dst)) is not None]
        verdicts.setdefault(",".join(errs) or "takes", []).append(call)
    if len(verdicts) != 1:
        return ("pending-sum-MISMATCH", f"the reductions disagree: {verdicts}")
    (verdict_, calls), = verdicts.items()
    summed = [c for c in passing if all(c[k].kind is Kind.P for k in pending)]
    where = f"P on {', '.join(names)}"
    if verdict_ == "takes" and not summed:
        return ("pending-sum-MISMATCH",
                f"{', '.join(calls)} take it, but the local results read as {where} are not "
                f"the sum")
    if verdict_ != "takes" and summed:
        return ("pending-sum-MISMATCH",
                f"{', '.join(calls)} reject it ({verdict_}), but read as "
                f"{_type_text(summed[0], mesh.axes)} the local results are the sum")
    if verdict_ == "takes":
        return ("taken", f"{', '.join(calls)} take it: read as {where} it is the sum")
    return ("taken", f"{', '.join(calls)} reject it ({verdict_}): read as {where} it is "
                     f"not the sum")


def _conservative_reason(task: Task, passing: list[tuple[LocalType, ...]]) -> str | None:
    """Why a rejection that some result type would survive is deliberate (None: not listed)."""
    if task.errors and all(e.startswith("spmd-global") and _IMPLICIT_PARTIAL in e
                           for e in task.errors):
        return IMPLICIT_PARTIAL
    # (beside it, an operand already P on an axis in out_partial_axes, or a local result
    # S(i) there: the redundant declaration's own listed errors (REDUNDANT_PARTIAL,
    # FREE_SHARD_PARTIAL); spmd.matmul({a:P, b:S(0)}, {a:R, b:S(1)}, out_partial_axes=a,b),
    # unlisted in the quick run until session 45; spmd.einsum / spmd.linear({a:R, b:S(0)},
    # {a:S(1) / S(0), b:S(1) / S(0)}, out_partial_axes=a), 12 unlisted in session 46's full
    # run, the first to finish since session 29)
    if task.errors and all((e.startswith("spmd-global") and (_DIAGONAL_BLOCK in e
                                                             or _IMPLICIT_PARTIAL in e))
                           or (task.partial_axes and e.startswith("spmd-collective")
                               and ("already P on" in e or "another block of its dim" in e))
                           for e in task.errors) and any(_DIAGONAL_BLOCK in e for e in task.errors):
        return DIAGONAL_BLOCK
    # (beside it, a sum over a dim sharded on another axis not in out_partial_axes: that
    # axis's pending sum, or a contraction's implicit partial sum, whose V reading the
    # passing type has: spmd.sum(x: {a:P, b:S(0)}, out_partial_axes=a), spmd.linear(x: {a:R,
    # b:S(1)}, w: {a:P, b:S(1)}, out_partial_axes=a); 24 unlisted in a full run until
    # session 39, outside the CI slice's sample)
    if task.partial_axes and all(
            (e.startswith("spmd-collective") and "already P on" in e) or _PENDING_SUM in e
            or (e.startswith("spmd-global") and _IMPLICIT_PARTIAL in e)
            for e in task.errors) and any("already P on" in e for e in task.errors):
        return REDUNDANT_PARTIAL
    if task.partial_axes and all((e.startswith("spmd-collective") and (
            "already P on" in e or "another block of its dim" in e)) or _PENDING_SUM in e
            or (e.startswith("spmd-global") and _IMPLICIT_PARTIAL in e)
            for e in task.errors) and any("another block of its dim" in e for e in task.errors):
        return FREE_SHARD_PARTIAL
    case = CASES[task.case]
    for marker, listed in ((_SCAN_ALONG, SCAN_ALONG_SHARD), (_NORM_ALONG, NORMALISED_ALONG_SHARD)):
        if task.errors and all(e.startswith("spmd-global") and marker in e for e in task.errors):
            # its model (a scan's, a normalising op's): this rank's own op on its block (V)
            # passes, and no reading of it as the operand's shard of the whole's (S(i), the
            # claim the rule refuses) does
            n = len(case.shapes[0])
            axes = MESHES[task.mesh].axes
            flagged = [k for k, a in enumerate(axes) if any(f'sharded on "{a}"' in e for e in task.errors)]
            ins = task.in_types[0]
            if flagged and not any(
                    all(c[k].kind is Kind.V and c[k].dim is not None and ins[k].dim is not None
                        and c[k].dim % n == ins[k].dim % n for k in flagged) for c in passing):
                return listed
            return None
    if case.engine == "fill" and all(e.startswith("spmd-partial-affine") for e in task.errors):
        return FILL_CONSTANT
    if case.name in ("layer_norm w b", "batch_norm eval") and all(e.startswith("spmd-partial-nonlinear")
                                             for e in task.errors):
        if all(t.kind is not Kind.P for t in task.in_types[0]):
            return AFFINE_NORM_PARAMS
    return None


# (what, reason), for the report
CONSERVATIVE: list[tuple[str, str]] = [
    ("spmd.matmul/einsum/linear/sum(..., out_partial_axes=a) with an operand P on a",
     REDUNDANT_PARTIAL),
    ("spmd.einsum/sum(..., out_partial_axes=a) with the result sharded on an output dim on a",
     FREE_SHARD_PARTIAL),
    ("layer_norm(x, shape, w, b), batch_norm(x, m, v, w, b) with x not P and a P weight and bias",
     AFFINE_NORM_PARAMS),
    ("fill(x, c) of a P x with a non-zero scalar c", FILL_CONSTANT),
    ("cumsum/cumprod/logcumsumexp/cummax/cummin along the dim the operand is sharded on",
     SCAN_ALONG_SHARD),
    ("softmax/log_softmax/softmin/normalize along, layer_norm/rms_norm over, the dim the "
     "operand is sharded on", NORMALISED_ALONG_SHARD),
    ("matmul/mm/bmm/linear/einsum summing over a dim sharded in every Varying operand, "
     "without out_partial_axes on that axis", IMPLICIT_PARTIAL),
    ("matmul/bmm/linear/einsum/attention sharding two dims that stay in the result on one axis "
     "(with or without out_partial_axes)", DIAGONAL_BLOCK),
]

# A mismatch found in the S(i) reading only (the concatenation), the V reading being
# correct: marks a failure of the S(i) layout in counterexamples.
S_LAYOUT = "[S-layout] "
# The reference forward of inputs whose S(i) globals do not fit together (a broadcast S(i)
# operand of size 1 on dim i beside a full one: the single-device op raises).
NO_GLOBAL_PROGRAM = "the global values have no single-device computation"
STATIC_NOTE = (
    "the static checker sees no shapes: it keeps S(i) for an elementwise op whose operands "
    "are all S(i), assuming they agree in size on dim i; where they do not (a broadcast S(i) "
    "operand), the inputs' S(i) types denote global values that no single-device op "
    "combines, so the S(i) claim is about a program that does not exist (the check mode, "
    "which sees the shapes, types it V)")


# --------------------------------------------------------------------------------------
# The job each rank runs


def job(rank: int, world_size: int, arg: dict) -> dict | None:
    """Each rank's part of the task protocol (:func:`soundness.protocol.run_tasks`)."""
    from .protocol import Suite, run_tasks

    suite = Suite(
        mesh=MESHES.__getitem__,
        forward=run_forward,
        candidates=lambda task, i, out: (
            [task.out_types] + ([task.static_out] if task.static_out else [])
            if task.accepted else candidates(task, out.ndim)),
        check_forward=check_forward,
        backward=lambda task, i, xs, y, cand, coord: run_backward(xs, y, i, cand, coord),
        check_backward=lambda task, i, cand, grads, out: check_backward(
            task, i, cand, grads, out.shape),
        evaluate=evaluate)
    return run_tasks(rank, world_size, arg["tasks"], suite)


def evaluate(task: Task, index: int, fwd: dict, bwd: dict) -> dict:
    """The outcome of one task: accepted-match, accepted-MISMATCH, rejected-counterexample,
    conservative, or unlisted-conservative (a failure)."""
    axes = MESHES[task.mesh].axes
    rec: dict[str, Any] = {"task": task.label(), "section": CASES[task.case].section,
                           "case": task.case, "mesh": task.mesh}
    if task.accepted:
        cand = task.out_types
        msg = fwd[cand] or bwd.get(cand)
        rec["engine"] = _type_text(cand, axes)  # type: ignore[arg-type]
        rec["status"] = "accepted-match" if msg is None else "accepted-MISMATCH"
        if task.static_out is not None:  # the static checker's claim, when it differs
            st = task.static_out
            smsg = fwd[st] or bwd.get(st)
            rec["static"] = _type_text(st, axes)
            if smsg is None:
                rec["static_status"] = "match"
            elif NO_GLOBAL_PROGRAM in smsg and (fwd[st] or "").startswith(S_LAYOUT):
                rec["static_status"] = "no-global-program"
            else:
                rec["static_status"] = "MISMATCH"
                rec["status"] = "accepted-MISMATCH"
                msg = msg or f"static claim {rec['static']}: {smsg}"
        if msg:
            rec["counterexample"] = msg
            rec["inputs"] = _inputs_text(task, index)
        return rec
    rec["errors"] = list(task.errors)
    passing = [c for c in fwd if fwd[c] is None and bwd.get(c) is None]
    if not passing:
        rec["status"] = "rejected-counterexample"
        # the most telling: a candidate that passes forward and fails backward, else forward
        notes = []
        for c, m in bwd.items():
            if m is not None:
                notes.append(f"as {_type_text(c, axes)}: {m}")
        for c, m in fwd.items():
            if m is not None and len(notes) < 3:
                notes.append(f"as {_type_text(c, axes)}: {m}")
        rec["counterexample"] = (f"no result type is correct ({len(fwd)} tried; "
                                 f"{sum(m is None for m in fwd.values())} pass the forward); "
                                 + " | ".join(notes[:3]))
        rec["inputs"] = _inputs_text(task, index)
        return rec
    model = _pending_model(task, passing)
    if model is not None:  # a sum, mean or norm over the shard dim: its model, checked
        rec["passing"] = [_type_text(c, axes) for c in passing]
        status, note = model
        rec["status"] = status
        rec["model"] = note
        if status != "pending-sum":
            rec["counterexample"] = note
            rec["inputs"] = _inputs_text(task, index)
        return rec
    rec["passing"] = [_type_text(c, axes) for c in passing]
    taken = _taken_model(task, passing)
    if taken is not None:  # an implicit partial sum: what the typed reductions make of it
        status, note = taken
        rec["taken"] = note
        if status != "taken":
            rec["status"] = status
            rec["counterexample"] = note
            rec["inputs"] = _inputs_text(task, index)
            return rec
    reason = _conservative_reason(task, passing)
    rec["status"] = "conservative" if reason else "UNLISTED-conservative"
    if reason:
        rec["reason"] = reason
    return rec


def _inputs_text(task: Task, index: int) -> str:
    mesh = MESHES[task.mesh]
    parts = []
    for j, t in enumerate(task.in_types):
        vals = ", ".join(f"{c}: {fmt(task_inputs(task, index, c)[j])}" for c in mesh.coords())
        parts.append(f"x{j} {_type_text(t, mesh.axes)} on ranks {vals}")
    return "; ".join(parts)


class _Lazy(dict):
    def __missing__(self, key):  # noqa: ANN001
        _load_cases_into(self)
        return dict.__getitem__(self, key)


def _load_cases_into(d: dict) -> None:
    for c in _cases():
        dict.__setitem__(d, c.name, c)


CASES: dict[str, OpCase] = _Lazy()  # filled on first use (imports torch)


def run(world_sizes: Sequence[int] = (2, 4), sample: int | None = None, seed: int = 0,
        sections: Sequence[str] | None = None, cases: Sequence[str] | None = None,
        timeout: float = 1800.0) -> list[dict]:
    """Build the tasks of every mesh, run each world, return every task's outcome."""
    from .world import run_world

    results: list[dict] = []
    for n in world_sizes:
        tasks = [t for m in WORLDS[n] for t in build_tasks(m, sections, sample, seed, cases)]
        if not tasks:
            continue
        out = run_world(n, "soundness.rules:job", {"tasks": tasks}, timeout)
        results += out["results"]  # type: ignore[index]
    return results
