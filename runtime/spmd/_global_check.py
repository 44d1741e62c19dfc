"""The check mode's global SPMD: shard propagation on live tensors.

When an operand of an op carries a partition spec (a global type), the check mode
(:mod:`._checking`) types the op with the engine's global rule
(:func:`spmd_mypy.engine.global_spmd.propagate`) instead of the local one, reading
the op's parameters (dims, shapes, the einsum equation, index items) from the call
the way the plugin reads literals from the source.  At runtime every parameter is
a value, so nothing is ever UNKNOWN.  Shapes given to reshape/view/unflatten/expand
are what torch receives on this rank, the local ones (the same code runs unchanged
under torchrun); the rule gets the local input shape too.  Broadcasting reads global
sizes (``sizes_one``: a sharded dim's local length times its number of shards).

``out_partial_axes`` of ``spmd.einsum/matmul/linear/sum`` reaches the rule through
:func:`out_partial`, a context the einsum family opens around its torch call: in
global mode the rule itself makes the result P (Partial is never implicit), in local
mode the einsum family reinterprets V as P afterwards, as before.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import torch

from spmd_mypy.engine import global_spmd
from spmd_mypy.engine.ops import CAST_OPS
from spmd_mypy.engine.types import SpmdType

class OutPartial:
    """The innermost ``spmd.einsum/...`` call's ``out_partial_axes`` (as the user gave
    them), and whether the check mode typed its op with the local rule
    (:func:`spmd_mypy.engine.ops.partial_op`, which makes the result P there)."""

    __slots__ = ("axes", "handled")

    def __init__(self, axes: Any) -> None:
        self.axes = axes
        self.handled = False


_OUT_PARTIAL: list[OutPartial] = []

EINSUM_FAMILY = frozenset({"einsum", "matmul", "mm", "bmm", "linear", "sum", "mv", "dot"})


@contextlib.contextmanager
def out_partial(axes: Any) -> Iterator[OutPartial]:
    rec = OutPartial(axes)
    _OUT_PARTIAL.append(rec)
    try:
        yield rec
    finally:
        _OUT_PARTIAL.pop()


def local_out_partial(name: str) -> OutPartial | None:
    """The pending ``out_partial_axes`` record for a local op named ``name`` (the einsum
    family's torch call), or None; marks it handled (once: only the family's own op)."""
    if name not in EINSUM_FAMILY or not _OUT_PARTIAL:
        return None
    rec = _OUT_PARTIAL[-1]
    if rec.axes is None or rec.handled:
        return None
    rec.handled = True
    return rec


def is_global(types: Sequence[SpmdType | None]) -> bool:
    return any(t is not None and t.spec is not None for t in types)


def _mesh_sizes() -> dict[str, int] | None:
    from . import _mesh

    b = _mesh._current
    if b is None:
        return None
    return dict(zip(b.names, (int(s) for s in b.mesh.mesh.shape)))


def global_shape(x: torch.Tensor, t: SpmdType | None, sizes: dict[str, int] | None
                 ) -> tuple[int | None, ...]:
    """``x``'s global shape under ``t``; a sharded dim is None without a mesh."""
    shape: list[int | None] = list(x.shape)
    if t is None or t.spec is None or len(t.spec) != x.ndim:
        return tuple(shape)
    for d, entry in enumerate(t.spec):
        if entry:
            if sizes is None or any(a not in sizes for a in entry):
                shape[d] = None
            else:
                shape[d] = x.shape[d] * math.prod(sizes[a] for a in entry)
    return tuple(shape)


# torch's testing overrides give some ops a one-parameter signature (``lambda input: -1``):
# their real formal names, so that ``x.argmax(1)`` reads ``dim=1``
_FULL_PARAMS = {"argmax": ("input", "dim", "keepdim"), "argmin": ("input", "dim", "keepdim"),
                "repeat_interleave": ("input", "repeats", "dim", "output_size")}


def _view_dtype(args: tuple, kwargs: dict) -> str | None:
    from ._torch_ops import view_dtype
    return view_dtype(args, kwargs)


def _bind(plan: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by formal name; extra positionals (``x.permute(1, 0)``,
    ``x.view(2, 3)``) join the last formal as a tuple."""
    if plan.canon is not None:
        args, kwargs = plan.canon(args, kwargs)
    if plan.swap and len(args) >= 2:
        args = (args[1], args[0]) + tuple(args[2:])
    names = plan.params or ()
    if plan.name in _FULL_PARAMS and len(names) < len(_FULL_PARAMS[plan.name]):
        names = _FULL_PARAMS[plan.name]
    bound: dict[str, Any] = {}
    if names and len(args) > len(names):
        head = len(names) - 1
        for n, a in zip(names[:head], args[:head]):
            bound[n] = a
        bound[names[head]] = tuple(args[head:])
    else:
        for n, a in zip(names, args):
            bound[n] = a
        if not names and args:
            bound["*"] = args
    bound.update(kwargs)
    return bound


def _dims(v: Any) -> Any:
    if isinstance(v, torch.Size):
        return tuple(int(i) for i in v)
    if isinstance(v, (tuple, list)):
        if len(v) == 1 and isinstance(v[0], (tuple, list, torch.Size)):
            return tuple(int(i) for i in v[0])
        return tuple(int(i) if not isinstance(i, torch.Tensor) else int(i) for i in v)
    return v


def _shape(v: Any) -> Any:
    """A shape argument: one int is a shape of one dim (``x.reshape(-1)``, ``x.view(6)``:
    torch's varargs, which bind the one size alone)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    return _dims(v)


def _index_items(idx: Any, types_of: Any) -> tuple[Any, ...]:
    items = idx if isinstance(idx, tuple) else (idx,)
    out: list[Any] = []
    for it in items:
        if isinstance(it, torch.Tensor):
            if it.dtype == torch.bool:
                out.append(global_spmd.TensorIndex(rank=1, sharded=_varies(types_of(it))))
                # a boolean mask consumes as many dims as it has
                out.extend([None] * 0)
            elif it.ndim == 0:
                out.append(0)
            else:
                t = types_of(it)
                out.append(global_spmd.TensorIndex(rank=it.ndim, sharded=_varies(t),
                                                   spec=t.spec if t is not None else None))
        elif isinstance(it, (list,)):
            out.append(global_spmd.TensorIndex(rank=1))
        elif isinstance(it, bool):
            out.append(None)
        else:
            out.append(it)
    return tuple(out)


def _varies(t: SpmdType | None) -> bool:
    return t is not None and any(lt.kind.value == "V" for _, lt in t.axes)


def params_for(plan: Any, args: tuple, kwargs: dict, tensors: Sequence[tuple[Any, SpmdType | None]],
               types_of: Any) -> dict[str, Any]:
    """The engine's literal parameters of this call (see global_spmd's docstring).

    ``tensors``: the operands in engine order, each (value, tracked type)."""
    name = plan.name
    b = _bind(plan, args, kwargs)
    sizes = _mesh_sizes()
    p: dict[str, Any] = {}
    if sizes is not None:
        p["mesh_sizes"] = sizes
    if name in EINSUM_FAMILY and _OUT_PARTIAL and _OUT_PARTIAL[-1].axes is not None:
        p["out_partial_axes"] = _OUT_PARTIAL[-1].axes
    if name in CAST_OPS:  # a cast's dtype (an integer one is non-linear)
        from ._torch_ops import _cast_dtype
        p["dtype"] = _cast_dtype(args, kwargs)
    if name == "einsum":
        eq = b.get("equation")
        if eq is None:
            star = b.get("*") or b.get("args") or ()
            eq = star[0] if star and isinstance(star[0], str) else None
        p["equation"] = eq
    elif name == "tensordot":  # an int, or a pair of dim lists
        d = b.get("dims", 2)
        p["dims"] = (tuple(_dims(x) if isinstance(x, (tuple, list)) else x for x in d)
                     if isinstance(d, (tuple, list)) else d)
    elif name == "permute":
        p["dims"] = _dims(b.get("dims", b.get("dim")))
    elif name in ("transpose", "swapaxes", "swapdims", "transpose_"):
        p["dim0"], p["dim1"] = b.get("dim0"), b.get("dim1")
    elif name in ("movedim", "moveaxis"):
        p["source"], p["destination"] = _dims(b.get("source")), _dims(b.get("destination"))
    elif name == "view" and _view_dtype(args, kwargs) is not None:
        # x.view(dtype): the bits reinterpreted (engine DTYPE_VIEW_OPS), as the static one reads
        p["dtype_view"], p["dtype"] = True, _view_dtype(args, kwargs)
    elif name in ("reshape", "view"):
        p["shape"] = _shape(b.get("shape"))
        if tensors and isinstance(tensors[0][0], torch.Tensor):
            # the literal shape is the local one torch receives; so is the input's
            p["in_shape"] = tuple(int(v) for v in tensors[0][0].shape)
    elif name in ("flatten", "ravel"):
        p["start_dim"] = b.get("start_dim", 0)
        p["end_dim"] = b.get("end_dim", -1)
    elif name == "unflatten":
        p["dim"], p["sizes"] = b.get("dim"), _dims(b.get("sizes"))
    elif name in ("__getitem__", "__setitem__"):  # x[index], x[index] = value
        p["index"] = _index_items(b.get("indices", b.get("idx")), types_of)
    elif name in ("expand", "broadcast_to"):
        shape = b.get("size", b.get("shape", b.get("*")))
        p["shape"] = _shape(shape)
    elif name in ("roll", "flip", "rot90"):
        d = b.get("dims")
        p["dims"] = _dims(d) if isinstance(d, (tuple, list, torch.Size)) else d
    elif name in global_spmd.FOURIER:
        d = b.get("dim")
        p["dim"] = _dims(d) if isinstance(d, (tuple, list, torch.Size)) else d
        sizes = b.get("s")
        if sizes is not None:  # an n-d transform's sizes: only how many
            p["s"] = len(sizes) if isinstance(sizes, (tuple, list, torch.Size)) else global_spmd.UNKNOWN
    elif name == "pad":
        p["pad"] = _dims(b.get("pad"))
    elif name == "repeat_interleave":
        p["dim"] = b.get("dim")
        p["int_repeats"] = not isinstance(b.get("repeats"), torch.Tensor)
    elif name in global_spmd.LAYOUT_OPS:
        if name == "batch_norm":
            p["training"] = b.get("training", False)
        p["groups"] = b.get("groups", 1)
    elif name in global_spmd.ATTENTION:
        p["is_causal"] = bool(b.get("is_causal", False))
    elif name in global_spmd.CLASS_LOSSES:
        p["reduction"] = b.get("reduction", "mean")
    elif name in ("layer_norm", "rms_norm"):
        ns = b.get("normalized_shape")
        p["normalized_ndim"] = 1 if isinstance(ns, int) else len(ns) if ns is not None else None
    else:
        if "dim" in b:
            d = b.get("dim")
            p["dim"] = _dims(d) if isinstance(d, (tuple, list, torch.Size)) else d
        elif name in global_spmd.REDUCTIONS:
            p["dim"] = None
        if "keepdim" in b:
            p["keepdim"] = bool(b["keepdim"])
        if name.startswith("scatter_reduce"):
            p["reduce"] = b.get("reduce")
        if name.startswith("index_put"):
            p["accumulate"] = bool(b.get("accumulate", False))
    if global_spmd.is_elementwise(name) or name in ("max", "min"):
        p["sizes_one"] = tuple(
            tuple(s == 1 for s in global_shape(x, t, sizes)) if isinstance(x, torch.Tensor) else ()
            for x, t in tensors)
    return p


def params_key(p: Any) -> Any:
    """A hashable form of the parameters (the check mode's result cache key)."""
    if isinstance(p, dict):
        return tuple(sorted((k, params_key(v)) for k, v in p.items()))
    if isinstance(p, (tuple, list)):
        return tuple(params_key(v) for v in p)
    if isinstance(p, slice):
        return ("slice", p.start, p.stop, p.step)
    return p


__all__ = ["out_partial", "local_out_partial", "OutPartial", "params_key", "is_global", "params_for", "global_shape", "EINSUM_FAMILY"]
