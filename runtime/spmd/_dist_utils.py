"""The communication primitives under the typed collectives, on raw torch.distributed.

Every primitive works on dim 0 split into ``N`` (the axis size) equal blocks, block
``k`` belonging to (or coming from) the rank of logical index ``k`` on the axis.
The typed collectives in :mod:`._collectives` bring other layouts (concatenation
on dim ``i``, chunks of dim ``i``, stacking on a new dim 0) to this form, with no
copy for dim 0.

Logical vs physical order.  The logical index of a rank on an axis is its mesh
coordinate (for a tuple of axes, the row-major index over those mesh dims in the
order given).  torch.distributed numbers the ranks of a group in increasing
global rank, which is usually, not always, the same order (a transposed mesh,
or a tuple of axes not in mesh order).  :class:`AxisGroup` keeps both and the
primitives permute the slots when they differ, so that the typed collectives
always speak in logical order.

Every primitive keeps the dtype and the device of its input: buffers are made
with ``new_empty``/``empty_like`` and the same code runs on gloo (CPU) and NCCL
(CUDA).  Inputs are made contiguous and flattened, the form both backends accept.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# torch >= 2.12 names the single-tensor forms all_gather_single / reduce_scatter_single
# and deprecates the *_into_tensor / *_tensor spellings; older torch has only those.
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

SUM = dist.ReduceOp.SUM
MAX = dist.ReduceOp.MAX
MIN = dist.ReduceOp.MIN


# The collectives of the no-grad fast paths without torch.distributed's Python wrappers: the
# ProcessGroup's own call, as dist.all_to_all_single / all_reduce / all_gather_single /
# reduce_scatter_single make it.  Those wrappers (torch 2.13), under their _exception_logger
# decorator: hand a tensor with __torch_function__, or any tensor under an active
# TorchFunctionMode, to torch's handling; test the group's membership, the arguments' types
# (and dtypes); build the options (asyncOp=False: synchronous); take a complex tensor as its
# real view; queue the op instead when the group is in a coalescing context
# (_coalescing_manager; not all_to_all_single); then call the group and wait on the work.  Here
# the group is a mesh axis's, which holds this rank, and the outputs are made from the input
# (its dtype): left to do are the __torch_function__ test (a C call; when it says yes, the
# torch.distributed call itself), the coalescing test, the complex view, the call and the wait.
# Saved per call (the fake backend, bench/runtime_overhead.py part 3, typed op over the raw
# call, two A/B pairs): all_reduce(P,R) +0.5 -> -0.7 us, all_gather(S(0),R) +1.1 -> +0.2,
# reduce_scatter(P,S(0)) +1.2 -> +0.1, all_to_all(V,V) +0.9 -> -0.5.  The options objects are
# made once with the values the wrappers set (a ProcessGroup reads them through a const
# reference).
#
# Dynamo cannot trace a ProcessGroup method, and torch.compile traces the fast paths; so each
# function carries _torchdynamo_inline, a twin making the torch.distributed call: Dynamo's
# VariableBuilder traces the attribute in place of any function that has one (torch 2.13,
# builder.py), and remaps that call to a functional collective, as before.  Setting the
# attribute imports nothing of Dynamo.
_has_torch_function = torch._C._has_torch_function
_view_as_real = torch.view_as_real
_COALESCING = c10d._world.pg_coalesce_state  # (a dict, cleared in place, never replaced)


def _options(cls: type, **fields: object) -> Any:
    opts = cls()
    opts.asyncOp = False
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


_A2A_OPTS = _options(c10d.AllToAllOptions)
_AG_OPTS = _options(c10d.AllgatherOptions)
_AR_SUM_OPTS = _options(c10d.AllreduceOptions, reduceOp=SUM)
_RS_SUM_OPTS = _options(c10d.ReduceScatterOptions, reduceOp=SUM)


def _traced(twin: Callable[..., None]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        fn._torchdynamo_inline = twin  # type: ignore[attr-defined]
        return fn
    return mark


def _all_to_all_dist(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    dist.all_to_all_single(out, send, group=pg)


@_traced(_all_to_all_dist)
def all_to_all_single(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    """``dist.all_to_all_single(out, send, group=pg)`` (equal blocks) by the ProcessGroup's
    own call; ``pg`` holds this rank, ``out`` has ``send``'s dtype."""
    if _has_torch_function((send,)):
        return _all_to_all_dist(out, send, pg)
    if send.is_complex():
        send, out = _view_as_real(send), _view_as_real(out)
    work = pg.all_to_all_single(out, send, [], [], _A2A_OPTS)
    if work is not None:
        work.wait()


def _all_reduce_dist(t: torch.Tensor, pg: dist.ProcessGroup) -> None:
    dist.all_reduce(t, group=pg)


@_traced(_all_reduce_dist)
def all_reduce_sum(t: torch.Tensor, pg: dist.ProcessGroup) -> None:
    """``dist.all_reduce(t, group=pg)`` (the sum, in place) by the ProcessGroup's own call;
    ``pg`` holds this rank."""
    if _has_torch_function((t,)) or pg in _COALESCING:
        return _all_reduce_dist(t, pg)
    work = pg.allreduce([_view_as_real(t) if t.is_complex() else t], _AR_SUM_OPTS)
    if work is not None:
        work.wait()


def _all_gather_dist(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    _all_gather_flat(out, send, group=pg)


@_traced(_all_gather_dist)
def all_gather_single(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    """``dist.all_gather_single(out, send, group=pg)`` by the ProcessGroup's own call; ``pg``
    holds this rank, ``out`` has ``send``'s dtype."""
    if _has_torch_function((send,)) or pg in _COALESCING:
        return _all_gather_dist(out, send, pg)
    if send.is_complex():
        send, out = _view_as_real(send), _view_as_real(out)
    work = pg.all_gather_single(out, send, _AG_OPTS)
    if work is not None:
        work.wait()


def _reduce_scatter_dist(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    _reduce_scatter_flat(out, send, op=SUM, group=pg)


@_traced(_reduce_scatter_dist)
def reduce_scatter_sum(out: torch.Tensor, send: torch.Tensor, pg: dist.ProcessGroup) -> None:
    """``dist.reduce_scatter_single(out, send, group=pg)`` (the sum) by the ProcessGroup's own
    call; ``pg`` holds this rank, ``out`` has ``send``'s dtype (torch's wrapper takes no real
    view of a complex tensor here: neither does this)."""
    if _has_torch_function((send,)) or pg in _COALESCING:
        return _reduce_scatter_dist(out, send, pg)
    work = pg.reduce_scatter_single(out, send, _RS_SUM_OPTS)
    if work is not None:
        work.wait()


if not hasattr(dist.ProcessGroup, "all_gather_single"):  # torch < 2.12: the wrappers
    all_gather_single, reduce_scatter_sum = _all_gather_dist, _reduce_scatter_dist


class AxisGroup:
    """A mesh axis (or a tuple of axes, flattened) resolved to a process group.

    ``size``        number of ranks on the axis
    ``index``       this rank's logical index on the axis (its mesh coordinate)
    ``axes``        the mesh axis names (``()`` for a bare ProcessGroup off any mesh)
    ``ranks``       global ranks in logical order
    ``physical``    ``None`` when the group's rank order is the logical order; else
                    ``physical[k]`` is the group rank of logical index ``k``
    """

    __slots__ = ("pg", "size", "index", "axes", "ranks", "physical", "logical", "_perm_cache")

    def __init__(self, pg: dist.ProcessGroup, axes: tuple[str, ...], ranks: Sequence[int]) -> None:
        self.pg = pg
        self.axes = axes
        self.ranks = tuple(int(r) for r in ranks)
        self.size = len(self.ranks)
        me = dist.get_rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not in the group of {axes or 'the ProcessGroup'} "
                             f"(ranks {list(self.ranks)})")
        self.index = self.ranks.index(me)
        group_ranks = list(dist.get_process_group_ranks(pg))
        if sorted(group_ranks) != sorted(self.ranks):
            raise ValueError(f"the process group of {axes} has ranks {group_ranks}, "
                             f"the mesh says {list(self.ranks)}")
        physical = [group_ranks.index(r) for r in self.ranks]
        if physical == list(range(self.size)):
            self.physical = self.logical = None
        else:
            self.physical = physical
            self.logical = [0] * self.size
            for k, p in enumerate(physical):
                self.logical[p] = k
        self._perm_cache: dict[tuple[str, torch.device], torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"AxisGroup(axes={self.axes}, size={self.size}, index={self.index})"

    # -- permutations between logical and physical block order ------------------------
    def _perm(self, which: str, device: torch.device) -> torch.Tensor:
        """``physical``: block k of the result is physical block physical[k] (after
        receiving); ``logical``: block p of the result is logical block logical[p]
        (before sending)."""
        key = (which, device)
        t = self._perm_cache.get(key)
        if t is None:
            order = self.physical if which == "physical" else self.logical
            t = torch.tensor(order, dtype=torch.long, device=device)
            self._perm_cache[key] = t
        return t


# The dtypes gloo (the CPU backend) takes, measured on torch 2.13 (every collective over every
# dtype torch can make): int16, uint16/32/64 and the float8 formats fail with a bare "Invalid
# scalar type".  The collectives that only move bytes (all_gather, all_to_all) send those as
# their bytes (a uint8 view: lossless); the reductions raise naming the dtype and the backend.
# CUDA tensors (NCCL) go as they are: NCCL takes the float8 formats, and where it does not its
# own error stands.
WIRE_DTYPES = frozenset({
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32,
    torch.complex64, torch.complex128, torch.int8, torch.uint8, torch.int32, torch.int64,
    torch.bool,
})


def _as_bytes(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` (contiguous, resolved) as a flat uint8 tensor when gloo cannot take its dtype;
    None when it can (or ``x`` is not on the CPU)."""
    if x.dtype in WIRE_DTYPES or x.device.type != "cpu":
        return None
    return send_buffer(x).view(-1).view(torch.uint8)


def _no_reduction(x: torch.Tensor, what: str) -> None:
    """A reduction gloo cannot do on ``x``'s dtype: a clear error (the same on every rank,
    before any communication) in place of its bare "Invalid scalar type"."""
    if x.dtype not in WIRE_DTYPES and x.device.type == "cpu":
        raise TypeError(f"{what} of a {x.dtype} tensor on the CPU: gloo cannot reduce {x.dtype} "
                        f"(it reduces float16/bfloat16/float32/float64, int8/uint8/int32/int64 "
                        f"and bool); reduce a copy in one of those (x.to(torch.int32), x.float()) "
                        f"and cast the result back")


def send_buffer(x: torch.Tensor) -> torch.Tensor:
    """``x`` as torch.distributed can send it: contiguous, its conjugate and negative bits
    resolved (``c.conj()``, or the gradient autograd hands when a loss reads ``y.conj()``, is a
    lazy view torch.distributed refuses: "view_as_real doesn't work on unresolved conjugated
    tensors"); ``x`` itself when it is already so (no copy)."""
    # (resolve_conj / resolve_neg return x itself when the bit is not set; unlike is_conj()
    # they trace under torch.compile)
    return x.resolve_conj().resolve_neg().contiguous()


def all_reduce(x: torch.Tensor, group: AxisGroup, op: dist.ReduceOp = SUM) -> torch.Tensor:
    """A new tensor: the elementwise reduction of ``x`` over the axis."""
    # (clone() keeps a contiguous layout and is cheaper per call than the memory_format= form;
    # both resolve the conjugate and negative bits)
    if x.dtype not in WIRE_DTYPES and group.size > 1:
        _no_reduction(x, "all_reduce")
    y = x.clone() if x.is_contiguous() else x.contiguous()
    if group.size > 1:
        if op is SUM:
            all_reduce_sum(y, group.pg)
        else:
            dist.all_reduce(y, op=op, group=group.pg)
    return y


def all_reduce_(x: torch.Tensor, group: AxisGroup, op: dist.ReduceOp = SUM) -> torch.Tensor:
    """``x`` itself (contiguous), reduced in place over the axis.

    Only for a buffer nobody else can see (a gradient autograd owns alone, see
    ``_collectives._signatures``): Megatron's backward all-reduce, without the copy.
    """
    if x.dtype not in WIRE_DTYPES and group.size > 1:
        _no_reduction(x, "all_reduce")
    x = x.resolve_conj().resolve_neg()  # a lazy view: its resolved copy is reduced (returned)
    if group.size > 1:
        if op is SUM:
            all_reduce_sum(x, group.pg)
        else:
            dist.all_reduce(x, op=op, group=group.pg)
    return x


# The three below work on dim 0 split into N equal blocks, block k belonging to logical
# rank k: a concatenation on dim 0 (``[N * s0, ...]``) or a stack (``[N, ...]``) alike.

def _blocks(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.view((n, t.shape[0] // n) + tuple(t.shape[1:]))


def all_gather(x: torch.Tensor, group: AxisGroup) -> torch.Tensor:
    """``cat(every rank's x, dim 0)`` in logical order, ``[N * x.shape[0], ...]`` (x.ndim >= 1)."""
    n = group.size
    shape = x.shape
    # (one int is what new_empty parses fastest: 1-D buffers are the common case)
    out = x.new_empty(n * shape[0]) if x.ndim == 1 else x.new_empty(n * shape[0], *shape[1:])
    if n == 1:
        out.copy_(x)
        return out
    if x.dtype not in WIRE_DTYPES:
        b = _as_bytes(x)
        if b is not None:  # gloo cannot take the dtype: its bytes, block k still rank k's
            return all_gather(b, group).view(x.dtype).view(out.shape)
    all_gather_single(out, send_buffer(x), group.pg)
    if group.physical is not None:
        out = _blocks(out, n).index_select(0, group._perm("physical", out.device)).view(out.shape)
    return out


def exchange(values: Sequence[int], group: AxisGroup, device: torch.device) -> list[list[int]]:
    """Every rank's ``values`` (the same count on each), by logical index: the check mode's
    small records (its agreement of the ranks, the lists of ``sizes=``), one all_gather of
    int64 made here and not through :func:`all_gather`, so that what counts the program's
    collectives does not count them."""
    t = torch.tensor(list(values), dtype=torch.int64, device=device)
    n = group.size
    if n == 1:
        return [t.tolist()]
    out = t.new_empty(n * t.numel())
    _all_gather_flat(out, t, group=group.pg)
    rows = out.view(n, t.numel()).tolist()
    return rows if group.physical is None else [rows[p] for p in group.physical]


def _in_logical_block_order(x: torch.Tensor, group: AxisGroup) -> torch.Tensor:
    """``x`` contiguous, its dim-0 blocks reordered so block ``k`` goes to logical rank ``k``."""
    send = send_buffer(x)
    if group.logical is not None:
        send = _blocks(send, group.size).index_select(0, group._perm("logical", x.device)).view(x.shape)
    return send


def reduce_scatter(x: torch.Tensor, group: AxisGroup) -> torch.Tensor:
    """Block ``index`` of dim 0 (``x.shape[0] // N`` long) summed over the ranks."""
    n = group.size
    if n == 1:
        return x.clone(memory_format=torch.contiguous_format)
    if x.dtype not in WIRE_DTYPES:
        _no_reduction(x, "reduce_scatter")
    send = send_buffer(x) if group.logical is None else _in_logical_block_order(x, group)
    shape = x.shape
    out = x.new_empty(shape[0] // n) if x.ndim == 1 else x.new_empty(shape[0] // n, *shape[1:])
    reduce_scatter_sum(out, send, group.pg)
    return out


def all_to_all_uneven(x: torch.Tensor, group: AxisGroup, sizes: Sequence[int],
                      out_sizes: Sequence[int]) -> torch.Tensor:
    """Rows ``sizes[k]`` of dim 0 (in order) go to logical rank ``k``; ``out_sizes[k]`` rows
    come from logical rank ``k``, joined in logical order.  The splits are given to torch
    in the group's rank order (``physical``/``logical``: a flattened group may order its
    ranks otherwise)."""
    n = group.size
    send = send_buffer(x)
    if n == 1:
        return send.clone()
    if x.dtype not in WIRE_DTYPES:
        b = _as_bytes(x)
        if b is not None:  # gloo cannot take the dtype: its bytes, each row its row's bytes
            row = torch.Size(x.shape[1:]).numel() * x.element_size()
            out = all_to_all_uneven(b, group, [k * row for k in sizes],
                                    [k * row for k in out_sizes])
            return out.view(x.dtype).view((sum(out_sizes), *x.shape[1:]))
    in_s, out_s = list(sizes), list(out_sizes)
    if group.logical is not None:
        blocks = send.split(in_s, 0)
        send = torch.cat([blocks[group.logical[p]] for p in range(n)])
        in_s = [sizes[group.logical[p]] for p in range(n)]
        out_s = [out_sizes[group.logical[p]] for p in range(n)]
    out = send.new_empty((sum(out_s), *x.shape[1:]))
    dist.all_to_all_single(out, send, output_split_sizes=out_s, input_split_sizes=in_s,
                           group=group.pg)
    if group.physical is not None:
        blocks = out.split(out_s, 0)
        out = torch.cat([blocks[group.physical[k]] for k in range(n)])
    return out


def all_to_all(x: torch.Tensor, group: AxisGroup) -> torch.Tensor:
    """Block ``k`` of dim 0 goes to logical rank ``k``; block ``k`` of the result came from it."""
    n = group.size
    if n == 1:
        return x.clone(memory_format=torch.contiguous_format)
    if x.dtype not in WIRE_DTYPES:
        b = _as_bytes(x)
        if b is not None:  # gloo cannot take the dtype: its bytes, in N equal blocks alike
            return all_to_all(b, group).view(x.dtype).view(x.shape)
    send = send_buffer(x) if group.logical is None else _in_logical_block_order(x, group)
    out = torch.empty_like(send)
    all_to_all_single(out, send, group.pg)
    if group.physical is not None:
        out = _blocks(out, n).index_select(0, group._perm("physical", out.device)).view(out.shape)
    return out
