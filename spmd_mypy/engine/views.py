"""Where a view or a join puts a Shard(i) operand's dim (local SPMD).

S(i) says the locals, concatenated on dim i, are the global tensor.  A view that only
moves dims (``transpose``, ``permute``, ``unsqueeze``, an integer index on another dim)
commutes with that concatenation, so the result is still a shard, on the dim where i
went; a view that cuts into dim i (a partial slice, an integer index, ``select`` on i)
does not, and the result is plain V::

    x: S(0)             x.transpose(0, 1)        ->  S(1)
    x: S(1)             x.unsqueeze(0)           ->  S(2)
    x: S(1)             x[0]                     ->  S(0)      (dim 0 removed: 1 -> 0)
    x: S(0)             x[:, 0], x[..., :k]      ->  S(0)
    x: S(0)             x[:5], x.narrow(0, ...)  ->  V         (a slice of each shard)
    x: S(0)             x.chunk(2, dim=1)        ->  (S(0), S(0))
    x, y: S(0)          cat([x, y], dim=1)       ->  S(0)
    x, y: S(0)          cat([x, y], dim=0)       ->  V         ([x0 y0] [x1 y1] is not
                                                                 [x0 x1 y0 y1])
    x, y: S(0)          stack([x, y], dim=0)     ->  S(1)
    x: S(0)             x.flatten(0, 1)          ->  S(0)      (the shard dim is the
                                                                 outer one of those merged)
    x: S(1)             x.flatten(0, 1)          ->  V         (merged under dim 0:
                                                                 interleaved)
    x: S(0)             x.unflatten(0, (h, d))   ->  S(0)      (the locals' sizes: the
                                                                 outer one is per rank)
    x: S(1)             view_as_complex(x)       ->  S(1)      (the trailing size-2 dim
                                                                 goes; S(-1) there: V)
    x: S(1)             view_as_real(x)          ->  S(1)      (a trailing dim of 2 added)
    x: S(-1)            x.view(*x.shape[:-1], h, d)  ->  S(-2)  (the split's outer factor)
    x: S(-2)            x.reshape(*x.shape[:-2], -1) ->  S(-1)  (merged: the outer one)
    x: S(-1)            x.reshape(*x.shape[:-2], -1) ->  V      (merged under dim -2)
    x: S(0)             x.view(-1), x.reshape(n, -1) ->  S(0)   (dim 0 leads every target)

A reshape/view keeps the shard where global SPMD's rule keeps a sharding (:func:`reshaped_dim`,
the run computation shared with :func:`.global_spmd.reshape`): from the local sizes in check
mode; statically when the dims before the shard dim are written as the input's own sizes
(``x.shape[i]``, ``*x.shape[:-k]``, names unpacked from ``x.shape``), which makes the shard dim
lead the rest; or as the sizes of a tensor ``x`` was made of by ops that keep its leading dims
(``F.linear(h, w).view(b, n, ...)`` with ``b, n, _ = h.shape``: the plugin reads which, and
marks a size that holds only before the input's last dim, :class:`SameDim` ``last_free``).  A
target that keeps every input dim and has a literal size above 1 after them fits no (non-empty)
input of that rank.  Sizes of another tensor, or not read, before it: V.

A contraction (einsum, matmul, linear, attention: :mod:`.contractions`) is read the same
way, by labels: the shard dim's label goes where the output has it, and a label summed
over (or held whole by an R operand) gives V::

    x: S(1)             einsum("bsh,hd->bsd", x, w)       ->  S(1)
    x: S(1)             einsum("bsh,hd", x, w)            ->  S(2)      (implicit "bds")
    x: S(2)             einsum("bsh,hd->bsd", x, w)       ->  V         (h summed over)
    a: S(0)             a.mm(w)                           ->  S(0)
    x: S(1)             F.linear(x, w)                    ->  S(1)      (rank >= 3)
    x: R, w: S(0)       F.linear(x, w)                    ->  S(-1)     (column parallel;
                                                                         check mode: w 2-d)
    q, k, v: S(1)       scaled_dot_product_attention(...) ->  S(1)      (the heads)
    q: S(-2); k, v: R   scaled_dot_product_attention(...) ->  S(-2)     (an error if is_causal)

The static checker does not know the rank, so :func:`moved_dim` answers for one rank
and the op rule (:func:`.ops.propagate`) folds the answers at every rank into S(j), V or
a rank-dependent layout, as for reductions.  A join (cat, stack) keeps the dim only when
every tensor operand is S(i) with the same i, like an elementwise op.

An op on an input laid out ``(N, C, *spatial)`` (convolutions, pools, interpolation, pad,
pixel shuffle, the batch / group / instance norms: the family ``"keep"``, :data:`LAYOUT_OPS`)
keeps the dims along which it treats each slice on its own, in place, and gives V on the
others::

    x: S(0)             F.conv2d(x, w)                    ->  S(0)      (the batch)
    x: S(1)             F.conv2d(x, w)                    ->  V         (channels contracted)
    x: S(1)             F.max_pool2d(x, 2)                ->  S(1)      (channel-wise)
    x: S(2)             F.max_pool2d(x, 2)                ->  V         (a window: a halo)
    x: S(0)             F.pad(x, (1, 1))                  ->  S(0)      (rank >= 2; V at 1)
    x: S(0)             F.batch_norm(x, m, v, training=True)  ->  V     (batch statistics)

An op that works along some dims and leaves every other in place, at the input's rank (the
family ``"along"``, :data:`ALONG_OPS`: torch.fft's transforms and shifts, ``roll``, ``flip``,
``fliplr``, ``flipud``, ``rot90``, ``diff``), keeps S(i) when i is not one of those dims: the
op on each shard is the shard of the op on the whole (a size change along the dims the op
works on, ``n=`` / ``s=``, rfft's halved last dim, diff's shorter one, changes no sharding).
Along the shard dim it gives V: the local fft of a shard is a new value per rank (the
transform of that block alone), not a block of the whole's fft, and a roll, flip or diff of
each block alone takes the wrong neighbours (a halo or an all_to_all first)::

    u: S(0)             torch.fft.fft(u, dim=1)           ->  S(0)
    u: S(0)             torch.fft.rfft2(u)                ->  S(0) at rank >= 3 (dims -2, -1)
    u: S(0)             torch.fft.fft(u, dim=0)           ->  V         (a block's own fft)
    u: S(0)             torch.fft.fftn(u), fftshift(u)    ->  V         (every dim)
    u: S(0)             torch.roll(u, 1, 1), u.flip(1)    ->  S(0)
    u: S(0)             torch.roll(u, 1, 0), u.diff(dim=0) ->  V        (wrong neighbours)
    u: S(0)             torch.roll(u, 1)                  ->  V         (the flattened tensor)
    u: S(2)             torch.rot90(u), u.fliplr()        ->  S(2)      (dims 0, 1 / dim 1)

Each adapter reads the call's literal dims into a :class:`DimMove` by the formal names
of :data:`MOVES` (the mypy plugin from the source text, the check mode from the values);
a dim it cannot read leaves no DimMove, and the result is V.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

from .types import RANKS

# Index items of ``x[...]`` as the rule reads them: an integer (removes its dim), a
# full slice ``:`` (keeps it), any other slice (cuts it), ``None`` (a new dim of size 1),
# ``...`` (as many full slices as the rank needs).
INT, FULL, SLICE, NEW, ELLIPSIS = "int", ":", "slice", "None", "..."
INDEX_ITEMS = frozenset({INT, FULL, SLICE, NEW, ELLIPSIS})

# op -> (family, the formals holding its dims, the defaults of those formals).
# Families: "swap" (two dims trade places), "t" (swap at rank 2), "reverse" (.T),
# "matrix" (the last two dims: .mT, .mH, adjoint), "permute", "movedim", "unsqueeze",
# "squeeze", "select" (removes a dim: also every piece of ``unbind``), "narrow" (cuts a
# dim: also every piece of ``split``, ``chunk``), "index" (``x[...]``),
# "cat" (joins on a dim), "stack" (joins on a new dim), "flatten" (merges start_dim..end_dim
# into one: also ``ravel``), "unflatten" (splits a dim in len(sizes); only the number of
# sizes is read, so an adapter may pass a tuple of Nones of that length), "keep" (an op on
# an (N, C, *spatial) input that keeps some of its dims in place: :data:`LAYOUT_OPS`),
# "along" (works along some dims, keeps the others in place: :data:`ALONG_OPS`).
MOVES: dict[str, tuple[str, tuple[str, ...], tuple[object, ...]]] = {
    "transpose": ("swap", ("dim0", "dim1"), ()),
    "swapdims": ("swap", ("dim0", "dim1"), ()),
    "swapaxes": ("swap", ("axis0", "axis1"), ()),
    "t": ("t", (), ()),
    "T": ("reverse", (), ()),
    "mT": ("matrix", (), ()), "mH": ("matrix", (), ()), "adjoint": ("matrix", (), ()),
    "H": ("t", (), ()),
    "permute": ("permute", ("dims",), ()),
    "movedim": ("movedim", ("source", "destination"), ()),
    "moveaxis": ("movedim", ("source", "destination"), ()),
    "unsqueeze": ("unsqueeze", ("dim",), ()),
    "squeeze": ("squeeze", ("dim",), (None,)),
    "select": ("select", ("dim",), ()),
    "unbind": ("select", ("dim",), (0,)),  # every piece: a select
    "narrow": ("narrow", ("dim",), ()), "narrow_copy": ("narrow", ("dim",), ()),
    "split": ("narrow", ("dim",), (0,)), "split_with_sizes": ("narrow", ("dim",), (0,)),
    "chunk": ("narrow", ("dim",), (0,)), "tensor_split": ("narrow", ("dim",), (0,)),
    "__getitem__": ("index", ("index",), ()),
    "cat": ("cat", ("dim",), (0,)), "concat": ("cat", ("dim",), (0,)),
    "concatenate": ("cat", ("dim",), (0,)),
    "stack": ("stack", ("dim",), (0,)),
    "flatten": ("flatten", ("start_dim", "end_dim"), (0, -1)),
    "ravel": ("flatten", (), ()),
    "unflatten": ("unflatten", ("dim", "sizes"), ()),
    # a target shape: literal sizes (-1 for one), SameDim / SamePrefix (the input's own
    # sizes), ANY_SIZE (an int the static checker cannot read); see reshaped_dim
    "view": ("reshape", ("shape",), ()), "reshape": ("reshape", ("shape",), ()),
    # complex views: view_as_complex drops the trailing dim of size 2 (the real and imaginary
    # parts), view_as_real appends one; every other dim stays in place
    "view_as_complex": ("complex", (), ()),
    "view_as_real": ("real", (), ()),
}
# The in-place views (x.transpose_(0, 1) makes x its transpose): the result's layout is read
# as the view's, and the in-place rule (ops.check_inplace) compares it with x's declared type.
INPLACE_VIEWS = frozenset(op + "_" for op in ("transpose", "swapdims", "swapaxes", "t",
                                              "unsqueeze", "squeeze"))
for _op in INPLACE_VIEWS:
    MOVES[_op] = MOVES[_op[:-1]]

# The family of the ops of LAYOUT_OPS.
KEEP = "keep"

# Ops on an input laid out (N, C, *spatial) whose result has the input's rank and keeps the
# dims along which the op treats each slice on its own: S(i) on such a dim is still S(i) (the
# op on each shard is the shard of the op on the whole), any other dim gives V.
#
#   op -> (the fewest and the most spatial dims (None: no limit), whether torch also takes an
#          unbatched (C, *spatial) input, the dims kept: "n" the batch dim, "c" the channel
#          dim, "s" every spatial dim)
#
# Convolutions keep the batch only: the channels are contracted (a per-rank partial sum) and a
# spatial shard would need its neighbours' rows (a halo).  Pools and interpolation keep the
# batch and the channels (channel-wise), not the spatial dims (windows, a halo again).  The
# norms keep the batch where their statistics are per sample (group_norm, instance_norm;
# batch_norm in eval mode, an affine map per channel, also every spatial dim), never the
# channels, along which the weight, bias and running statistics lie (an R one of the local size
# has no global meaning, as beside an elementwise op; a varying one is not followed);
# batch_norm in training computes its statistics over the batch and the spatial dims: nothing
# is kept.  pixel_shuffle moves blocks of r*r channels to r x r pixels and back: a shard of
# whole blocks on any dim (torch requires whole blocks) stays a shard there, so every dim is
# kept.  pad keeps every dim it leaves alone (see :func:`_layout_kept`).
#
# The static checker, which does not know the rank, takes an op's documented batched shape
# (F.conv2d's ``(minibatch, in_channels, iH, iW)``), as contractions take attention's: an
# unbatched ``(C, H, W)`` input, which the check mode reads at its rank, has its channels
# where the batch is assumed (for conv2d an S(0) there is contracted, V in check mode).  Claims
# on a V accept any S(i), so the static S(i) can add an error there, not hide one.
LAYOUT_OPS: dict[str, tuple[int, int | None, bool, str]] = {}
for _k in (1, 2, 3):
    for _op in (f"conv{_k}d", f"conv_transpose{_k}d"):
        LAYOUT_OPS[_op] = (_k, _k, True, "n")
    for _op in (f"avg_pool{_k}d", f"max_pool{_k}d", f"max_pool{_k}d_with_indices",
                f"adaptive_avg_pool{_k}d", f"adaptive_max_pool{_k}d",
                f"adaptive_max_pool{_k}d_with_indices", f"lp_pool{_k}d"):
        LAYOUT_OPS[_op] = (_k, _k, True, "nc")
for _k in (2, 3):
    # the random samples are drawn per sample and channel: like dropout's masks, a shard's
    # draws are a draw of the whole
    LAYOUT_OPS[f"fractional_max_pool{_k}d"] = (_k, _k, True, "nc")
    LAYOUT_OPS[f"fractional_max_pool{_k}d_with_indices"] = (_k, _k, True, "nc")
LAYOUT_OPS.update({
    "convolution": (1, None, False, "n"),
    "interpolate": (1, 3, False, "nc"), "upsample": (1, 3, False, "nc"),
    "upsample_nearest": (1, 3, False, "nc"), "upsample_bilinear": (2, 2, False, "nc"),
    "pixel_shuffle": (1, None, False, "ncs"), "pixel_unshuffle": (1, None, False, "ncs"),
    "channel_shuffle": (1, None, False, "ns"), "native_channel_shuffle": (1, None, False, "ns"),
    "local_response_norm": (1, None, False, "ns"),
    "group_norm": (0, None, False, "n"), "instance_norm": (1, None, False, "n"),
    "batch_norm": (0, None, False, "ns"),  # in eval mode; in training: "" (_layout_kept)
    "pad": (0, None, False, ""), "constant_pad_nd": (0, None, False, ""),  # _layout_kept
})
# the formals a LAYOUT_OPS op's kept dims depend on (a literal): pad's amounts, batch_norm's
# training (F.batch_norm's default: False)
_LAYOUT_FORMALS: dict[str, tuple[tuple[str, ...], tuple[object, ...]]] = {
    "pad": (("pad",), ()), "constant_pad_nd": (("pad",), ()), "batch_norm": (("training",), (False,)),
}
for _op in LAYOUT_OPS:
    MOVES[_op] = (KEEP, *_LAYOUT_FORMALS.get(_op, ((), ())))

# The family of the ops of ALONG_OPS.
ALONG = "along"

# Ops that work along some dims of their input, at its rank, and keep every other dim in place
# (:func:`along_dims`): op -> (the formals naming those dims, their defaults).  A dims value
# None is every dim (``fftn``, ``fftshift``; ``roll`` without dims rolls the flattened tensor),
# but for the n-d transforms given ``s`` without ``dim``: the last len(s) dims (torch's rule);
# ``s`` is read as its length only, so an adapter may pass a tuple of Nones of that length.
# fliplr and flipud take no dims: :data:`ALONG_FIXED`.
_FFT_1D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
ALONG_OPS: dict[str, tuple[tuple[str, ...], tuple[object, ...]]] = {}
for _f in _FFT_1D:
    ALONG_OPS[f"fft_{_f}"] = (("dim",), (-1,))
    ALONG_OPS[f"fft_{_f}2"] = (("dim",), ((-2, -1),))
    ALONG_OPS[f"fft_{_f}n"] = (("dim", "s"), (None, None))
ALONG_OPS.update({
    "fft_fftshift": (("dim",), (None,)), "fft_ifftshift": (("dim",), (None,)),
    "roll": (("dims",), (None,)), "flip": (("dims",), ()), "rot90": (("dims",), ((0, 1),)),
    "diff": (("dim",), (-1,)), "fliplr": ((), ()), "flipud": ((), ()),
})
ALONG_FIXED: dict[str, tuple[int, ...]] = {"fliplr": (1,), "flipud": (0,)}
for _op, (_formals, _defaults) in ALONG_OPS.items():
    MOVES[_op] = (ALONG, _formals, _defaults)

Dims = Union[int, tuple[int, ...], None]

# The names a formal of MOVES may go by in torch's signatures (``swapaxes(axis0, axis1)``,
# ``concatenate(tensors, axis)``, a testing override's ``permute(self, dim)``): both
# adapters look a dim up under each.
FORMAL_ALIASES: dict[str, tuple[str, ...]] = {
    "dim": ("dim", "axis"), "dim0": ("dim0", "axis0"), "dim1": ("dim1", "axis1"),
    "axis0": ("axis0", "dim0"), "axis1": ("axis1", "dim1"), "dims": ("dims", "dim"),
}



# -- reshape / view to a target shape --------------------------------------------------------
#
# The rule is global SPMD's (:func:`.global_spmd.reshape`), here for the local S(i): the
# locals, each laid out row-major, are for each index of the dims before i one contiguous run
# of the flattening of the dims from i on.  A reshape that keeps the dims before i and leaves
# dim i the outermost of the run of dims it reshapes into a run of target dims concatenates
# the same way on the first dim of that run: the result is a shard there.  Splitting a sharded
# dim thus puts the shard on the OUTER factor; merging keeps it only when the sharded dim is
# the outer one of those merged (an inner one interleaves: V).  The runs are computed from the
# local sizes (:func:`reshape_runs`) where they are known (the check mode); statically from the
# target's entries written as the input's own sizes (:class:`SameDim`, :class:`SamePrefix`).


class SameDim(int):
    """A target size written as the input's own ``x.shape[i]`` / ``x.size(i)`` (static
    reshape), or a local bound to it (``b, s, h = x.shape``; ``name``: that local, for
    messages): dim ``i`` is kept.  ``int`` so it passes for a size; ``dim`` is ``i``;
    ``rank``: the input's rank when the binding shows it (an unpack of the whole shape
    without a star), else None.  ``last_free``: the size is read from a tensor the input was
    made of by an op that keeps every dim but maybe the last (``F.linear(h, w).view(h.shape[0],
    ...)``): it is the input's dim ``i`` only at ranks where ``i`` comes before the input's last
    dim, and an unknown size at the others."""

    dim: int
    name: str | None
    rank: int | None
    last_free: bool

    def __new__(cls, dim: int, name: str | None = None, rank: int | None = None,
                last_free: bool = False) -> SameDim:
        v = super().__new__(cls, -2)
        v.dim = dim
        v.name = name
        v.rank = rank
        v.last_free = last_free
        return v

    def __repr__(self) -> str:
        return f"x.shape[{self.dim}]"

    # equal by what they state, not by the placeholder int (a DimMove is a cache key)
    def __eq__(self, other: object) -> bool:
        return isinstance(other, SameDim) and (self.dim, self.rank, self.last_free) == (
            other.dim, other.rank, other.last_free)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(("SameDim", self.dim, self.rank, self.last_free))


class SamePrefix(int):
    """Target sizes written as the input's own leading sizes, all but its last ``drop`` dims
    (``*x.shape[:-1]``, ``x.size()[:-2] + (...)``, ``*x.shape`` with drop 0): as many entries
    as the rank leaves, :func:`expand_target` makes them :class:`SameDim` at a known rank."""

    drop: int

    def __new__(cls, drop: int) -> SamePrefix:
        v = super().__new__(cls, -4)
        v.drop = drop
        return v

    def __repr__(self) -> str:
        return f"*x.shape[:-{self.drop}]" if self.drop else "*x.shape"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SamePrefix) and self.drop == other.drop

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(("SamePrefix", self.drop))


class _AnySize(int):
    """A target size that is an int expression the plugin cannot read."""

    def __repr__(self) -> str:
        return "n"


ANY_SIZE: object = int.__new__(_AnySize, -3)


def is_literal_size(v: object) -> bool:
    """A target entry that is a plain int (a literal, or a size the check mode read)."""
    return isinstance(v, int) and not isinstance(v, (bool, SameDim, SamePrefix, _AnySize))


def expand_target(shape: Sequence[int], rank: int) -> list[int] | None:
    """``shape`` for an input of ``rank``, each :class:`SamePrefix` written out as the
    :class:`SameDim` entries it stands for; None when the input has fewer dims than it drops."""
    out: list[int] = []
    for v in shape:
        if isinstance(v, SamePrefix):
            if v.drop > rank:
                return None
            out.extend(SameDim(i) for i in range(rank - v.drop))
        else:
            out.append(v)
    return out


def kept_prefix(shape: Sequence[int], rank: int) -> int:
    """How many leading dims of an input of ``rank`` the (expanded) target keeps in place:
    the leading entries written as the input's own size of the dim at their position."""
    keep = 0
    while keep < min(len(shape), rank) and isinstance(shape[keep], SameDim) \
            and shape[keep].dim % rank == keep:
        keep += 1
    return keep


def resolve_sizes(shape: Sequence[int], total: int | None) -> list[int] | None:
    """The target ``shape`` with its -1 worked out from the input's number of elements."""
    shape = list(shape)
    if -1 in shape:
        if total is None:
            return None
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = total // known if known else 0
    return shape


def reshape_runs(ins: Sequence[int], outs: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Runs of input dims whose product equals a run of output dims (row-major reshape)."""
    groups = []
    i = j = 0
    while i < len(ins) or j < len(outs):
        gi, gj = [i], [j]
        pi = ins[i] if i < len(ins) else 1
        pj = outs[j] if j < len(outs) else 1
        i += 1
        j += 1
        while pi != pj:
            if pi < pj and i < len(ins):
                pi *= ins[i]
                gi.append(i)
                i += 1
            elif j < len(outs):
                pj *= outs[j]
                gj.append(j)
                j += 1
            else:
                break
        groups.append(([d for d in gi if d < len(ins)], [d for d in gj if d < len(outs)]))
    return groups


def run_shard_dim(ins: Sequence[int], run: tuple[list[int], list[int]], d: int) -> int | None:
    """The output dim a reshape run (input dims, output dims) puts input dim ``d``'s shard
    on: the run's first output dim, when ``d`` is the outermost of the run's input dims that
    are not of size 1; None when it is an inner factor (the blocks interleave) or the run
    has no output dim."""
    gi, gj = run
    if any(ins[e] != 1 for e in gi if e < d) or not gj:
        return None
    return gj[0]


def reshaped_dim(target: Sequence[int], d: int, rank: int,
                 in_shape: Sequence[int] | None = None) -> tuple[int, int | None] | None:
    """An input of ``rank`` sharded on dim ``d`` (non-negative) reshaped to ``target``:
    (the result's rank, its shard dim or None).  With ``in_shape``, the input's local shape
    (the check mode), the runs come from the sizes; without it (statically) the dims before
    ``d`` must be kept as the input's own sizes, and ``d`` then leads the rest of the target.
    None when the target does not fit the input."""
    if in_shape is not None:
        ins = [int(s) for s in in_shape]
        if len(ins) != rank or not all(is_literal_size(v) for v in target):
            return None
        total = math.prod(ins)
        outs = resolve_sizes(target, total)
        if outs is None or math.prod(outs) != total or any(v < 0 for v in outs):
            return None
        run = next(r for r in reshape_runs(ins, outs) if d in r[0])
        return len(outs), run_shard_dim(ins, run, d)
    # a size of the tensor the input was made of (last_free): unknown where dim i is not
    # before the input's last dim
    target = [ANY_SIZE if isinstance(v, SameDim) and v.last_free  # type: ignore[misc]
              and not (-rank <= v.dim < rank and v.dim % rank < rank - 1) else v for v in target]
    if any(isinstance(v, SameDim) and (v.rank is not None and v.rank != rank
                                       or not -rank <= v.dim < rank) for v in target):
        return None  # x.shape[i] needs dim i; b, s, h = x.shape: x has 3 dims
    full = expand_target(target, rank)
    if full is None or not full:
        return None
    keep = kept_prefix(full, rank)
    if keep == rank and any(is_literal_size(v) and v > 1 for v in full[keep:]):
        # every dim kept, and more sizes after them: no (non-empty) input of this rank has
        # that many elements (x.view(x.shape[0], x.shape[1], -1, 3, hd) of a 2-d x)
        return None
    if d < keep:
        return len(full), d
    if d == keep and keep < len(full):
        return len(full), keep  # d leads the rest of the input, reshaped into the rest
    return len(full), None


@dataclass(frozen=True)
class DimMove:
    """A view's or join's literal dims as the call states them (``args`` in the order of
    ``MOVES[op][1]``: ints, tuples of ints, or for ``index`` the tuple of index items).
    ``ndim``: the first operand's rank, known at runtime only."""

    op: str
    args: tuple[object, ...]
    ndim: int | None = None

    @property
    def family(self) -> str:
        return MOVES[self.op][0]


# What an adapter passes for a dim it cannot read (a name, an expression).
UNREAD = object()


def make_move(op: str, values: Mapping[str, object], ndim: int | None = None) -> DimMove | None:
    """The DimMove of ``op`` from the values of its dims' formals as an adapter read them
    (``UNREAD`` for one it could not read; a formal left out takes its default); None when
    ``op`` moves no dims, or a dim is unread or not what the op takes."""
    entry = MOVES.get(op)
    if entry is None:
        return None
    family, formals, defaults = entry
    args: list[object] = []
    for k, formal in enumerate(formals):
        j = k - (len(formals) - len(defaults))
        a = values.get(formal, defaults[j] if j >= 0 else UNREAD)
        if family == "index":
            if not isinstance(a, tuple) or any(i not in INDEX_ITEMS for i in a):
                return None
        elif formal == "training":
            if not isinstance(a, bool):
                return None
        elif formal == "pad":
            if isinstance(a, list):
                a = tuple(a)
            if not _is_dims(a, True) or isinstance(a, int) or len(a) % 2:  # type: ignore[arg-type]
                return None
        elif formal == "shape":
            if not isinstance(a, tuple) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in a):
                return None
        elif formal == "sizes" or formal == "s":
            if formal == "s" and a is None:
                pass  # no sizes given: the default dims
            elif not isinstance(a, (tuple, list)) or not a:
                return None
            else:
                a = len(a)
        elif not (family in ("squeeze", ALONG) and a is None) and not _is_dims(
                a, family in ("permute", "movedim", "squeeze", ALONG)):
            return None
        args.append(a)
    return DimMove(op, tuple(args), ndim)


def _is_dims(a: object, tuples: bool) -> bool:
    if isinstance(a, int) and not isinstance(a, bool):
        return True
    return tuples and isinstance(a, tuple) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in a)


def _norm(d: int, rank: int) -> int | None:
    return d % rank if -rank <= d < rank else None


def moved_dim(move: DimMove, d: int, rank: int,
              shape: Sequence[int] | None = None) -> tuple[int, int | None] | None:
    """For an operand of ``rank`` sharded on dim ``d``: (the result's rank, the result's
    shard dim, non-negative, or None when the op cuts into dim d); None when the op
    cannot take an operand of that rank (or d is not one of its dims).  ``shape``: the
    operand's local shape where known (the check mode; read by reshape/view only)."""
    dn = _norm(d, rank)
    if dn is None:
        return None
    f, args = move.family, move.args
    if f in ("swap", "t", "matrix", "reverse", "permute", "movedim"):
        order = _permutation(f, args, rank)
        return None if order is None else (rank, order.index(dn))
    if f in ("unsqueeze", "stack"):
        at = _norm(args[0], rank + 1)  # type: ignore[arg-type]
        return None if at is None else (rank + 1, dn + 1 if dn >= at else dn)
    if f in ("select", "narrow", "cat"):
        at = _norm(args[0], rank)  # type: ignore[arg-type]
        if at is None:
            return None
        if at == dn:
            return rank - (f == "select"), None
        if f == "select":
            return rank - 1, dn - 1 if at < dn else dn
        return rank, dn
    if f == KEEP:
        kept = _layout_kept(move, rank)
        return None if kept is None else (rank, dn if dn in kept else None)
    if f == ALONG:
        along = along_dims(move, rank)
        return None if along is None else (rank, None if dn in along else dn)
    if f == "index":
        return _index(args[0], dn, rank)  # type: ignore[arg-type]
    if f == "reshape":
        return reshaped_dim(args[0], dn, rank, shape)  # type: ignore[arg-type]
    if f == "complex":  # x: S(d) -> S(d), but the trailing (re, im) dim is cut apart
        return rank - 1, None if dn == rank - 1 else dn
    if f == "real":
        return rank + 1, dn
    if f == "flatten":
        start, end = args if args else (0, -1)
        sn, en = _norm(start, rank), _norm(end, rank)  # type: ignore[arg-type]
        if sn is None or en is None or sn > en:
            return None
        merged = en - sn
        if sn < dn <= en:
            return rank - merged, None  # an inner dim of the merged ones: interleaved
        return rank - merged, dn if dn <= sn else dn - merged
    if f == "unflatten":
        at = _norm(args[0], rank)  # type: ignore[arg-type]
        n: int = args[1]  # type: ignore[assignment]
        if at is None:
            return None
        return rank + n - 1, dn if dn <= at else dn + n - 1
    return None  # squeeze: see squeezed_dim


def along_dims(move: DimMove, rank: int) -> frozenset[int] | None:
    """The dims (non-negative) an :data:`ALONG_OPS` op works along on an input of ``rank``
    (every other dim keeps its place); None when the op takes no input of that rank."""
    fixed = ALONG_FIXED.get(move.op)
    if fixed is not None:
        listed: tuple[int, ...] = fixed
    else:
        dims = move.args[0]
        if dims is None:
            n = move.args[1] if len(move.args) > 1 else None
            if n is None:
                return frozenset(range(rank))
            assert isinstance(n, int)
            return frozenset(range(rank - n, rank)) if n <= rank else None
        listed = dims if isinstance(dims, tuple) else (dims,)  # type: ignore[assignment]
        if not listed:
            return frozenset(range(rank))  # roll(x, s, dims=()): the flattened tensor
    ns = [_norm(x, rank) for x in listed]
    if None in ns:
        return None
    return frozenset(ns)  # type: ignore[arg-type]


def _layout_kept(move: DimMove, rank: int) -> frozenset[int] | None:
    """The dims (non-negative) a :data:`LAYOUT_OPS` op keeps on an input of ``rank``; None
    when the op takes no input of that rank (statically, ``move.ndim`` None: its batched
    shape only; see LAYOUT_OPS)."""
    least, most, unbatched, kept = LAYOUT_OPS[move.op]
    if move.op in ("pad", "constant_pad_nd"):
        (amounts,) = move.args
        assert isinstance(amounts, tuple)
        m = len(amounts) // 2  # the last m dims, the last one first: (left, right, top, ...)
        if m > rank:
            return None
        padded = {rank - 1 - j for j in range(m) if amounts[2 * j] or amounts[2 * j + 1]}
        return frozenset(range(rank)) - padded
    if move.op == "batch_norm" and move.args[0] is True:
        kept = ""  # training: statistics over the batch and the spatial dims
    spatial = rank - 2
    if spatial >= least and (most is None or spatial <= most):
        return _kept_dims(kept, rank, batched=True)
    if unbatched and move.ndim == rank and rank - 1 == most:  # (C, *spatial), rank known
        return _kept_dims(kept, rank, batched=False)
    return None


def layout_kept(op: str, rank: int, training: object = False) -> frozenset[int] | None:
    """The dims a :data:`LAYOUT_OPS` op keeps on a batched ``(N, C, *spatial)`` input of
    ``rank`` (global SPMD's rule reads this table too); ``training``: batch_norm's mode (not a
    bool: unread, taken as training, which keeps nothing).  None when the op takes no input of
    that rank."""
    args: tuple[object, ...] = ()
    if op == "batch_norm":
        args = (training if isinstance(training, bool) else True,)
    elif op in ("pad", "constant_pad_nd"):
        return None  # by its amounts: global_spmd.pad
    return _layout_kept(DimMove(op, args), rank)


def _kept_dims(kept: str, rank: int, batched: bool) -> frozenset[int]:
    """The dims ``kept`` names ("n" the batch, "c" the channels, "s" every spatial dim) of
    an ``(N, C, *spatial)`` input of ``rank``, or of an unbatched ``(C, *spatial)`` one."""
    channels = 1 if batched else 0
    dims = set(range(channels + 1, rank)) if "s" in kept else set()
    if "c" in kept:
        dims.add(channels)
    if batched and "n" in kept:
        dims.add(0)
    return frozenset(dims)


def _permutation(f: str, args: tuple[object, ...], rank: int) -> list[int] | None:
    """The result's dims as positions of the operand's (``result dim k = operand dim
    order[k]``)."""
    order = list(range(rank))
    if f == "reverse":
        return order[::-1]
    if f == "t":
        return order[::-1] if rank <= 2 else None
    if f in ("swap", "matrix"):
        a, b = (-2, -1) if f == "matrix" else args
        an, bn = _norm(a, rank), _norm(b, rank)  # type: ignore[arg-type]
        if an is None or bn is None:
            return None
        order[an], order[bn] = order[bn], order[an]
        return order
    if f == "permute":
        dims = args[0] if isinstance(args[0], tuple) else (args[0],)
        ns = [_norm(x, rank) for x in dims]  # type: ignore[arg-type]
        if len(ns) != rank or None in ns or len(set(ns)) != rank:
            return None
        return ns  # type: ignore[return-value]
    src, dst = (a if isinstance(a, tuple) else (a,) for a in args)
    sn = [_norm(x, rank) for x in src]  # type: ignore[arg-type]
    dn = [_norm(x, rank) for x in dst]  # type: ignore[arg-type]
    if len(sn) != len(dn) or None in sn or None in dn or len(set(sn)) != len(sn) \
            or len(set(dn)) != len(dn):
        return None
    out: list[int | None] = [None] * rank
    for s, t in zip(sn, dn):
        out[t] = s  # type: ignore[index]
    rest = iter(x for x in range(rank) if x not in sn)
    return [x if x is not None else next(rest) for x in out]


def _index(items: tuple[str, ...], dn: int, rank: int) -> tuple[int, int | None] | None:
    consumed = sum(1 for i in items if i in (INT, FULL, SLICE))
    if consumed > rank or items.count(ELLIPSIS) > 1:
        return None
    fill = [FULL] * (rank - consumed)
    if ELLIPSIS in items:
        k = items.index(ELLIPSIS)
        full = list(items[:k]) + fill + list(items[k + 1:])
    else:
        full = list(items) + fill
    src = out = 0
    new: int | None = None
    for item in full:
        if item == NEW:
            out += 1
            continue
        if src == dn:
            if item != FULL:
                return _out_rank(full), None
            new = out
        if item != INT:
            out += 1
        src += 1
    return out, new


def _out_rank(items: list[str]) -> int:
    return sum(1 for i in items if i != INT)


def squeezed_dim(move: DimMove, d: int, shape: Sequence[int] | None) -> int | None:
    """``squeeze``: the result's shard dim, in d's sign, or None.  With the operand's
    ``shape`` (check mode) the dims of size 1 among the listed ones go; without it the
    listed dims may or may not go, so the result is S(j) only for a j that names the shard
    dim at every rank and whichever of them go::

        x: S(0); x.squeeze(-1)     the last dim goes or not: dim 0 stays dim 0  ->  S(0)
        x: S(-1); x.squeeze(0)     dim -1 stays dim -1                          ->  S(-1)
        x: S(1); x.squeeze(0)      dim 1 becomes 0 or stays 1                   ->  V

    Squeezing every dim of size 1 (no dim given) is read with the shape only."""
    (dims,) = move.args
    if shape is not None:
        rank = len(shape)
        dn = _norm(d, rank)
        if dn is None:
            return None
        listed = range(rank) if dims is None else [
            _norm(x, rank) for x in (dims if isinstance(dims, tuple) else (dims,))]
        if None in listed:
            return None
        gone = {x for x in listed if shape[x] == 1}  # type: ignore[index]
        if dn in gone:
            return None
        new = dn - sum(1 for x in gone if x < dn)  # type: ignore[operator]
        return new if d >= 0 else new - (rank - len(gone))
    if dims is None:
        return None
    listed = list(dims) if isinstance(dims, tuple) else [dims]
    common: set[int] | None = None
    for rank in range(1, RANKS + 1):
        dn = _norm(d, rank)
        ls = [_norm(x, rank) for x in listed]
        if dn is None or None in ls:
            continue  # no operand of this rank
        # d keeps its place counted from the front if no listed dim is before it, from the
        # back if none is after it; the shard dim itself listed: it goes if its size is 1,
        # which at rank 1 leaves a scalar (no layout to claim), else V
        if dn in ls and rank > 1:
            return None
        ways = set()
        if all(x >= dn for x in ls):  # type: ignore[operator]
            ways.add(dn)
        if all(x <= dn for x in ls):  # type: ignore[operator]
            ways.add(dn - rank)
        common = ways if common is None else common & ways
    if not common:
        return None
    return d if d in common else common.pop()
