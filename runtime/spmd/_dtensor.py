"""The check mode at the boundary with torch DTensor: ``DTensor.to_local()`` results are typed
from the DTensor's placements, and ``DTensor.from_local(x, mesh, placements)`` checks a typed
``x`` against them (engine :mod:`spmd_mypy.engine.dtensor`: Replicate is I, Shard(d) is S(d),
Partial() is P, on the axes the mesh's dim names name).

``to_local``, ``full_tensor`` and ``from_local`` are Python methods of ``DTensor``, which the
torch function mode never sees: while a ``typecheck()`` block is open they are replaced on the
class (:func:`install`), and put back when the last block closes (:func:`uninstall`).  Only
the calls made by the user's code are typed and checked, and those made by torch's
``local_map`` (its ``in_placements``/``out_placements`` are its wrapped function's boundary);
the calls torch makes itself (a backward, FSDP's parameter handling) pass through untouched.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Sequence

import torch

from spmd_mypy.engine.dtensor import check_from_local, check_placements_for, placements_type
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import SpmdType

from . import _checking

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LOCAL_MAP_FILE = os.path.join(_TORCH_DIR, "distributed", "tensor", "experimental", "_func_map.py")
_STYLE_FILE = os.path.join(_TORCH_DIR, "distributed", "tensor", "parallel", "style.py")

_saved: dict[str, Any] = {}  # attribute name -> DTensor's own (from vars(DTensor)) while installed


def _placement_text(p: Any) -> str | None:
    """A torch placement as the engine reads it (``Replicate()``, ``Shard(0)``,
    ``Partial()``); None for one with no SPMD meaning (``Partial("avg")``, a strided shard)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    if type(p) is Replicate:
        return "Replicate()"
    if type(p) is Shard:
        return f"Shard({p.dim})"
    if type(p) is Partial and getattr(p, "reduce_op", None) == "sum":
        return "Partial()"
    return None


def _placement_texts(placements: Sequence[Any] | None) -> list[str | None] | None:
    return None if placements is None else [_placement_text(p) for p in placements]


def _shown(placements: Sequence[Any]) -> str:
    return "[" + ", ".join(_placement_text(p) or repr(p) for p in placements) + "]"


def _axes(mesh: Any) -> tuple[str | None, ...]:
    names = getattr(mesh, "mesh_dim_names", None)
    ndim = getattr(mesh, "ndim", 0)
    if names is None:
        return (None,) * ndim
    return tuple(n if isinstance(n, str) else None for n in names)


def _caller() -> tuple[str, Any] | None:
    """Who called the wrapped method: ("user", frame) for the user's code, ("local_map",
    frame of torch's local_map wrapper), ("style", frame) for a tensor parallel style's
    input or output preparation (parallelize_module's ColwiseParallel, SequenceParallel,
    PrepareModuleInput...: a module's boundary), or None for torch's own calls (a backward,
    FSDP: not checked)."""
    f: Any = sys._getframe(2)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_RUNTIME_DIR):
        f = f.f_back
    if f is None:
        return None
    fn = os.path.abspath(f.f_code.co_filename)
    if fn == _LOCAL_MAP_FILE and f.f_code.co_name == "_local_map_wrapped":
        return "local_map", f
    if fn == _STYLE_FILE and f.f_code.co_name.startswith("_prepare"):
        return "style", f
    if fn.startswith(_TORCH_DIR):
        return None
    return "user", f


def _active() -> bool:
    return _checking.ACTIVE and not _checking._PAUSED


def _local_type(dt: Any, grad_placements: Sequence[Any] | None) -> SpmdType:
    placements = tuple(dt.placements)
    grads = _placement_texts(grad_placements)
    with torch._C.DisableTorchFunction():
        ndim = dt.ndim
    texts = _placement_texts(placements) or []
    return placements_type(_axes(dt.device_mesh), texts, grads).at_ndim(ndim)


def _to_local(self: Any, *, grad_placements: Sequence[Any] | None = None) -> Any:
    caller = _caller() if _active() else None
    if caller is not None and caller[0] == "local_map":
        _check_local_map_argument(caller[1], self, grad_placements)
    result = _saved["to_local"](self, grad_placements=grad_placements)
    if caller is not None and isinstance(result, torch.Tensor):
        _checking._set(result, _local_type(self, grad_placements))
    return result


_ANNOTATIONS: dict[Any, tuple[list[str], dict[str, SpmdType], Any] | None] = {}


def _parameters(func: Any) -> tuple[list[str], dict[str, SpmdType], Any] | None:
    """The positional parameters of the function under local_map (through ``spmd.checked``'s
    wrapper), their ``Tensor[...]`` annotations and the result's; None when it has none."""
    try:
        return _ANNOTATIONS[func]
    except (KeyError, TypeError):
        pass
    out: tuple[list[str], dict[str, SpmdType], Any] | None = None
    try:
        target = inspect.unwrap(func)
        params, rets = _checking._annotated_types(target)
        if params or rets is not None:
            ps = inspect.signature(target).parameters.values()
            names = [p.name for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            out = (names, params, rets)
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate: not checked
        out = None
    try:
        _ANNOTATIONS[func] = out
    except TypeError:
        pass
    return out


def _check_local_map_argument(frame: Any, dt: Any, grad_placements: Any) -> None:
    """torch's local_map hands its function the local value of the ``idx``-th argument, of
    its ``in_placements`` entry: checked against the function's annotation of that
    parameter (a flat argument list only: ``idx`` counts pytree leaves)."""
    loc = frame.f_locals
    func, idx, args, flat = loc.get("func"), loc.get("idx"), loc.get("args"), loc.get("flat_args")
    if not isinstance(idx, int) or not isinstance(args, tuple) or flat is None or len(flat) != len(args):
        return
    info = _parameters(func)
    if info is None or idx >= len(info[0]):
        return
    names, params, _ = info
    want = params.get(names[idx])
    if not want:
        return
    placements = list(dt.placements)
    errors = check_placements_for(
        want, _axes(dt.device_mesh), _placement_texts(placements) or [],
        _placement_texts(grad_placements),
        where=f"parameter {names[idx]!r} of {getattr(func, '__name__', 'the function')} under "
              f"local_map", placements_arg=f"in_placements[{idx}]")
    if errors:
        raise SpmdTypeError(errors[0])


def _full_tensor(self: Any, *, grad_placements: Sequence[Any] | None = None) -> Any:
    result = _saved["full_tensor"](self, grad_placements=grad_placements)
    if _active() and isinstance(result, torch.Tensor) and _caller() is not None:
        from torch.distributed.tensor import Replicate

        replicated = [Replicate()] * len(self.placements)
        grads = _placement_texts(grad_placements)
        _checking._set(result, placements_type(
            _axes(self.device_mesh), _placement_texts(replicated) or [], grads))
    return result


def _local_map_names(frame: Any) -> tuple[str, str]:
    """(the function under local_map as messages name it, its result's text)."""
    func = frame.f_locals.get("func")
    name = getattr(func, "__name__", None) or "the function"
    return name, f"{name}(<...>)"


def _from_local(local_tensor: Any, device_mesh: Any = None, placements: Any = None,
                **kwargs: Any) -> Any:
    if _active() and isinstance(local_tensor, torch.Tensor):
        have = _checking._get(local_tensor)
        caller = _caller()
        if have and caller is not None:
            _check_from_local(local_tensor, have, device_mesh, placements,
                              kwargs.get("grad_placements"), caller)
        elif caller is not None and caller[0] == "local_map" and placements is not None:
            _check_local_map_result(caller[1], device_mesh, placements)
    return _saved["from_local"].__func__(local_tensor, device_mesh, placements, **kwargs)


def _check_local_map_result(frame: Any, mesh: Any, placements: Any) -> None:
    """An untyped result of the function under local_map (its body computed it untyped):
    its annotation, when it has one, against ``out_placements``."""
    func, flat_out = frame.f_locals.get("func"), frame.f_locals.get("flat_out")
    info = _parameters(func)
    if info is None or not isinstance(info[2], SpmdType) or flat_out is None or len(flat_out) != 1:
        return
    placements = list(placements)
    errors = check_placements_for(
        info[2], _axes(mesh), _placement_texts(placements) or [], None,
        where=f"the result of {getattr(func, '__name__', 'the function')} under local_map",
        placements_arg="out_placements")
    if errors:
        raise SpmdTypeError(errors[0])


def _check_from_local(x: torch.Tensor, have: SpmdType, mesh: Any, placements: Any,
                      grad_placements: Any, caller: tuple[str, Any]) -> None:
    if mesh is None:
        try:
            from torch.distributed.device_mesh import _mesh_resources
            mesh = _mesh_resources.get_current_mesh()
        except Exception:  # noqa: BLE001 - no mesh: torch reports the call
            return
    axes = _axes(mesh)
    if placements is None:
        from torch.distributed.tensor import Replicate
        placements = [Replicate()] * len(axes)
    placements = list(placements)
    with torch._C.DisableTorchFunction():
        ndim = x.ndim
        # R and I are one where no gradient flows (a detached value wrapped for a checkpoint)
        can_grad = torch.is_grad_enabled() and x.requires_grad
    have = have.at_ndim(ndim)
    texts = [_placement_text(p) for p in placements]
    # a negative shard dim counted from the front, as from_local normalises it
    texts = [f"Shard({int(t[6:-1]) + ndim})" if t and t.startswith("Shard(-") else t
             for t in texts]
    grads = _placement_texts(grad_placements)
    kind, frame = caller
    one = False
    arg: str | None
    if kind == "local_map":
        name, x_text = _local_map_names(frame)
        where = f"the result of {name} under local_map (out_placements={_shown(placements)})"
        arg = "out_placements"
    elif kind == "style":
        style = getattr(frame.f_code, "co_qualname", frame.f_code.co_name).split(".")[0]
        out = "out" in frame.f_code.co_name
        x_text = _checking._texts([x], ["x"])[0]
        where = (f"{x_text} {'returned through' if out else 'passed to'} {style} "
                 f"(which wraps it as {_shown(placements)})")
        arg = None if style == "SequenceParallel" else (
            "output_layouts" if out else "input_layouts")
        one = True
    else:
        x_text = _checking._texts([x], [""])[0] or _first_argument(frame) or "x"
        where = f"{x_text} passed to DTensor.from_local with placements {_shown(placements)}"
        arg = "placements"
    errors = check_from_local(have, axes, texts, grads, x_text="x", where="x",
                              placements_arg=arg, one=one, can_grad=can_grad)
    if errors:
        errors = check_from_local(have, axes, texts, grads, x_text=x_text, where=where,
                                  placements_arg=arg, one=one, can_grad=can_grad)
        raise SpmdTypeError(errors[0])


def _first_argument(frame: Any) -> str | None:
    """The source text of the first argument of the call ``frame`` is running
    (``DTensor.from_local(h_dt.to_local(), mesh, [Replicate()])``: ``h_dt.to_local()``), for a
    value no variable holds; None where it cannot be read."""
    import ast

    try:
        source = _checking._source_at(frame.f_code, frame.f_lasti, frame.f_globals)
        if source is None:
            return None
        source = source.strip()
        node = ast.parse(source, mode="eval").body
        if isinstance(node, ast.Call) and node.args:
            text = ast.get_source_segment(source, node.args[0])
            return text if text and "\n" not in text else None
    except (SyntaxError, ValueError, IndexError, TypeError, UnicodeDecodeError):
        return None
    return None


def install() -> None:
    try:
        from torch.distributed.tensor import DTensor
    except Exception:  # noqa: BLE001 - torch without distributed: nothing to wrap
        return
    if _saved:
        return
    own = vars(DTensor)
    for name, wrapper in (("to_local", _to_local), ("full_tensor", _full_tensor),
                          ("from_local", staticmethod(_from_local))):
        if name in own:
            _saved[name] = own[name]
            setattr(DTensor, name, wrapper)


def uninstall() -> None:
    if not _saved:
        return
    from torch.distributed.tensor import DTensor

    for name, original in _saved.items():
        setattr(DTensor, name, original)
    _saved.clear()
