"""mypy never crashes because of the plugin: a hook that raises becomes an error at the line.

A bug in the plugin or the rule engine (an input nobody foresaw) would otherwise be mypy's
``INTERNAL ERROR`` and the end of the run: no diagnostics at all for the user.  Every hook
mypy gets runs under a guard instead; an exception reports ``spmd-internal`` on the expression
being checked (with the exception, to paste into a bug report) and the hook answers what mypy
would have without the plugin (the default type, signature or an ``Any`` for an annotation),
so the rest of the file is checked as usual.  ``# type: ignore[spmd-internal]`` silences it.
"""

from __future__ import annotations

from typing import Any, Callable, Final

from mypy.errors import CompileError
from mypy.types import AnyType, Type, TypeOfAny

from .codes import ERROR_CODES

# What a failed hook answers (the context's own default; None for a hook that returns nothing)
RESULT: Final = 0       # function, method and attribute hooks (Synced): the default type
SIGNATURE: Final = 1    # signature hooks: ctx.default_signature
ANNOTATION: Final = 2   # type-analyze hooks: Any (the annotation is unknown)
NOTHING: Final = 3      # class hooks


def report_internal(api: object, context: object, error: Exception) -> None:
    """The ``spmd-internal`` error on ``context``."""
    message = (f"spmd-mypy failed to check this ({type(error).__name__}: {error}); its SPMD "
               f"types are unknown here. This is a bug in spmd-mypy: please report it with "
               f"this line")
    try:
        api.fail(message, context, code=ERROR_CODES["spmd-internal"])  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - reporting must not crash either
        pass


def fallback(ctx: Any, kind: int) -> Any:
    """What mypy would have had without the hook."""
    if kind == RESULT:  # an attribute hook's context has default_attr_type instead
        return getattr(ctx, "default_return_type", None) or getattr(ctx, "default_attr_type", None)
    if kind == SIGNATURE:
        return ctx.default_signature
    if kind == ANNOTATION:
        return AnyType(TypeOfAny.from_error)
    return None


def recover(ctx: Any, kind: int, error: Exception) -> Any:
    """Report ``error`` (raised by a hook given ``ctx``) and answer the fallback."""
    if isinstance(error, CompileError):  # mypy's own blocking errors pass through
        raise error
    report_internal(ctx.api, ctx.context, error)
    return fallback(ctx, kind)


class Guarded:
    """``hook`` run under the guard (see the module docstring)."""

    def __init__(self, hook: Callable[[Any], Any], kind: int) -> None:
        self.hook = hook
        self.kind = kind

    def __call__(self, ctx: Any) -> Any:
        try:
            return self.hook(ctx)
        except Exception as e:  # noqa: BLE001 - never crash mypy
            return recover(ctx, self.kind, e)

