"""The runtime's own one-time work, run outside the user's context.

Some work is done once, lazily, on the first call that needs it: the calibration of
:mod:`._collectives` (small autograd graphs of its own) and the resolution of a mesh
axis (:mod:`._mesh`: ops on the mesh's rank tensor).  That first call may be anywhere
in the user's program: inside ``torch.utils.checkpoint`` (whose saved-tensor hooks
would pack the runtime's tensors as the function's, so the recomputation, which does
no such work, saves fewer), under ``save_on_cpu``, autocast, ``no_grad``,
``inference_mode``, a TorchFunctionMode or TorchDispatchMode of the user's (which
would see the runtime's ops, or give it fake tensors).  These context managers put
the thread in the state a script starts in for the duration of that work, so that the
first call behaves like every later one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

_top_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_pop_saved_hooks = torch._C._autograd._pop_saved_tensors_default_hooks
_push_saved_hooks = torch._C._autograd._push_saved_tensors_default_hooks
_saved_hooks_disabled_message = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message


def _disable_dispatch_modes() -> Any:
    if torch._C._len_torch_dispatch_stack() == 0:
        return contextlib.nullcontext()
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


@contextlib.contextmanager
def without_user_modes() -> Iterator[None]:
    """No TorchFunctionMode (nor ``__torch_function__``) and no TorchDispatchMode: the
    user's modes do not see the runtime's own ops (plain tensors only)."""
    with torch._C.DisableTorchFunction(), _disable_dispatch_modes():
        yield


@contextlib.contextmanager
def own_autograd_context() -> Iterator[None]:
    """:func:`without_user_modes`, and autograd as a script starts: no saved-tensor hooks
    (taken off their stack and pushed back after: ``disable_saved_tensors_hooks`` refuses
    to run while any are on it), grad mode on, inference mode and autocast off."""
    hooks = []
    if _saved_hooks_disabled_message() is None:  # (disabled: the stack is empty)
        while (top := _top_saved_hooks(True)) is not None:
            hooks.append(top)
            _pop_saved_hooks()
    try:
        # (modes first: entering the others is a torch function a mode would see)
        with without_user_modes(), torch.inference_mode(False), torch.enable_grad(), \
                torch._C._DisableAutocast():
            yield
    finally:
        for pack, unpack in reversed(hooks):
            _push_saved_hooks(pack, unpack)
