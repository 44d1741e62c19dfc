"""einops in the check mode: ``rearrange``, ``repeat``, ``reduce`` (and the
``einops.layers.torch`` modules ``Rearrange`` and ``Reduce``) typed by their pattern, by the
engine's rule (:mod:`spmd_mypy.engine.einops_rule`), as the static checker types them.

einops runs a pattern as torch's reshape / permute / reduction / expand, which the mode would
otherwise type one by one: a reshape knows no dims, so each gave V, and a V result is accepted
where any S(i) is claimed (a head split claimed at the old dim passed).  While a
``typecheck`` block is open (and einops is importable) the function all three run through,
``einops.einops._apply_recipe``, and the layers' ``forward`` are wrapped: the result is typed
by the pattern (a rule error is raised before the call), and the ops inside run unchecked.
``einops.einsum`` needs no wrapper: it calls ``torch.einsum`` with the axis names as letters,
which the mode types by the contraction rule (the static checker translates the same way).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch

from spmd_mypy.engine.einops_rule import propagate_einops
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.ops import Operand

from . import _checking, _global_check

_saved: dict[str, Any] = {}
_REDUCE_CODE: Any = None


def _typed(run: Callable[[], Any], tensor: Any, pattern: object, reduction_type: object) -> Any:
    """``run()`` (einops on ``tensor``) with its result typed by the pattern rule."""
    if not _checking._STACK or _checking._PAUSED or not isinstance(tensor, torch.Tensor):
        return run()
    t = _checking._get(tensor)
    if not t or _global_check.is_global([t]):
        return run()  # untyped (gradual) or global SPMD: einops' own ops, as before
    op = reduction_type if reduction_type in ("rearrange", "repeat") else "reduce"
    reduction = reduction_type if op == "reduce" else None
    can_grad = torch.is_grad_enabled() and bool(tensor.requires_grad)
    strict = _checking._STACK[-1].strict

    def rule(text: str) -> Any:
        return propagate_einops(op, [Operand(t, text, can_grad, shape=tuple(tensor.shape))],
                                pattern if isinstance(pattern, str) else None, reduction,
                                strict=strict)

    res = rule("x")
    if res.errors:
        res = rule(_checking._texts([tensor], ["x"])[0])
        raise SpmdTypeError(res.errors[0])
    with _checking.suspended():
        out = run()
    if isinstance(out, torch.Tensor):
        _checking._set(out, res.type)
    return out


def _checked_apply_recipe(backend: Any, recipe: Any, tensor: Any, reduction_type: Any,
                          axes_lengths: Any) -> Any:
    original = _saved["_apply_recipe"]
    caller = sys._getframe(1)
    # einops.reduce (rearrange and repeat call it) holds the pattern; a caller of its own (a
    # later einops) leaves the layout unknown: V
    pattern = caller.f_locals.get("pattern") if caller.f_code is _REDUCE_CODE else None
    return _typed(lambda: original(backend, recipe, tensor, reduction_type, axes_lengths),
                  tensor, pattern, reduction_type)


def _checked_rearrange_forward(self: Any, input: Any) -> Any:  # noqa: A002 - einops' name
    original = _saved["Rearrange.forward"]
    return _typed(lambda: original(self, input), input, getattr(self, "pattern", None),
                  "rearrange")


def _checked_reduce_forward(self: Any, input: Any) -> Any:  # noqa: A002
    original = _saved["Reduce.forward"]
    return _typed(lambda: original(self, input), input, getattr(self, "pattern", None),
                  getattr(self, "reduction", None))


def install() -> None:
    """Wrap einops' functions (when einops is importable) while a block is open."""
    global _REDUCE_CODE
    if _saved:
        return
    try:
        import einops.einops as core
    except Exception:  # noqa: BLE001 - einops not installed (or broken): nothing to wrap
        return
    if not callable(getattr(core, "_apply_recipe", None)) or not callable(getattr(core, "reduce", None)):
        return  # another einops than the one this wraps (0.8's internals)
    _REDUCE_CODE = core.reduce.__code__
    _saved["_apply_recipe"] = core._apply_recipe
    core._apply_recipe = _checked_apply_recipe
    # the frames of einops' own functions are not the user's (the names in messages)
    einops_dir = os.path.dirname(os.path.abspath(core.__file__)) + os.sep
    if einops_dir not in _checking._SKIP_DIRS:
        _checking._SKIP_DIRS = (*_checking._SKIP_DIRS, einops_dir)
    layers = sys.modules.get("einops.layers.torch")
    if layers is None and "torch" in sys.modules:
        try:
            import einops.layers.torch as layers
        except Exception:  # noqa: BLE001
            layers = None
    for cls_name, wrapper in (("Rearrange", _checked_rearrange_forward),
                              ("Reduce", _checked_reduce_forward)):
        cls = getattr(layers, cls_name, None)
        if cls is not None and "forward" in vars(cls):
            _saved[f"{cls_name}.forward"] = vars(cls)["forward"]
            cls.forward = wrapper


def uninstall() -> None:
    if not _saved:
        return
    import einops.einops as core
    core._apply_recipe = _saved.pop("_apply_recipe")
    layers = sys.modules.get("einops.layers.torch")
    for cls_name in ("Rearrange", "Reduce"):
        original = _saved.pop(f"{cls_name}.forward", None)
        if original is not None and layers is not None:
            setattr(getattr(layers, cls_name), "forward", original)
    _saved.clear()
