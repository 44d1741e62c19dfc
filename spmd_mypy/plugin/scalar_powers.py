"""A float for the powers typeshed leaves ``Any``, in modules that use SPMD types.

typeshed types ``int ** float``, ``float ** float`` and ``int ** int`` (a non-literal
exponent) as ``Any`` (the result may be complex, or int).  mypy then types every operator
with such a value as ``Any`` before any plugin hook runs (``check_op_reversible``), and calls
no hook for a method of an ``Any``: the attention idiom ::

    self.scale = head_dim ** -0.5          # Any
    attn = (q @ k.mT) * self.scale         # Any
    attn = attn.softmax(dim=-1)            # unchecked: a softmax of a Partial passed

lost every check downstream of the scale.  Where mypy's result is typeshed's explicit ``Any``
and the exponent is a float (``n ** -0.5``, ``x ** self.p`` with ``p: float``) or a negative
int literal (``n ** -25``), the result is ``float`` (a complex result, a negative base to a
fractional power, is a scalar too: the SPMD type of ``attn * scale`` is the same).  A type mypy
already gives is never changed, and ``int ** k`` with ``k: int`` stays ``Any`` (an int when
``k >= 0``).  Only in modules that use SPMD types (they import spmd or annotate with
``Tensor[...]``; ``dispatch.get_method_hook``): a float where mypy said ``Any`` may add plain
mypy errors (``range(n ** 0.5)``, ``-> int``), so modules that do not use spmd see none.
"""

from __future__ import annotations

from typing import Final

from mypy.nodes import IntExpr, UnaryExpr
from mypy.plugin import MethodContext
from mypy.types import AnyType, Instance, LiteralType, Type, TypeOfAny, get_proper_type

# the operator methods whose typeshed overloads answer Any (mypy 2.4.1's builtins.pyi); the
# exponent is the argument of __pow__ (base ** exponent) and the receiver of __rpow__ (mypy
# tries float.__rpow__(base) for int ** float: int.__pow__ takes no float)
POWERS: Final = frozenset(("builtins.int.__pow__", "builtins.float.__pow__"))
REFLECTED_POWERS: Final = frozenset(("builtins.float.__rpow__",))


def power_hook(ctx: MethodContext) -> Type:
    """``base ** exponent`` (the receiver is the base)."""
    return _power(ctx, False)


def reflected_power_hook(ctx: MethodContext) -> Type:
    """``base ** exponent`` checked as ``exponent.__rpow__(base)``."""
    return _power(ctx, True)


def _power(ctx: MethodContext, reflected: bool) -> Type:
    """``float`` where typeshed's overload answers ``Any`` and the exponent is a float or a
    negative int literal (see the module docstring); else mypy's type."""
    default = ctx.default_return_type
    proper = get_proper_type(default)
    if not isinstance(proper, AnyType) or proper.type_of_any != TypeOfAny.explicit:
        return default
    args = ctx.args
    if not args or len(args[0]) != 1 or any(args[1:]):
        return default  # base.__pow__(exponent, mod), or another call shape
    t = ctx.type if reflected else ctx.arg_types[0][0]
    exponent = get_proper_type(t)
    if isinstance(exponent, LiteralType):
        exponent = exponent.fallback
    if not isinstance(exponent, Instance):
        return default
    name = exponent.type.fullname
    if name == "builtins.float" or name == "builtins.int" and not reflected and _negative_int(args[0][0]):
        return ctx.api.named_generic_type("builtins.float", [])
    return default


def _negative_int(e: object) -> bool:
    """``-25``: an int literal below typeshed's ``_NegativeInteger`` (down to -20)."""
    return (isinstance(e, UnaryExpr) and e.op == "-" and isinstance(e.expr, IntExpr)
            and e.expr.value > 0)
