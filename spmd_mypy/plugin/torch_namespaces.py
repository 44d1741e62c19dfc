"""``torch.linalg``, ``torch.special`` and ``torch.fft``: torch binds these functions from C
extension modules that ship no stub, so mypy types every one of them as ``Any``::

    vector_norm = _add_docstr(_linalg.linalg_vector_norm, r'''
    linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None) -> Tensor
    ...''')

and ``torch.linalg.vector_norm(g)`` of a Partial gradient passed unchecked (the check mode,
which sees the real call, rejects it).  While mypy checks those torch modules (with the plugin
loaded, before it caches them), the hook on ``_add_docstr`` gives such a function the
signature its docstring's first line states, every parameter optional and of type ``Any``,
with ``*args`` and ``**kwargs`` besides, so no call is rejected that was accepted before::

    def (x: Any = ..., ord: Any = ..., dim: Any = ..., keepdim: Any = ..., *args: Any,
         dtype: Any = ..., out: Any = ..., **kwargs: Any) -> torch.Tensor

The names are what the op hooks read (``dim``, ``keepdim``, ``out``); the result is
``torch.Tensor`` where the docstring says ``-> Tensor``, else ``Any``.  A call of one of them is
the op torch names it (its ``__name__``, what the check mode classifies): ``linalg_vector_norm``,
``fft_fft``, ``special_expit`` (:func:`op_name`).  In a module that meets no SPMD type, and for
a call with no typed operand, the result stays ``Any`` as it was (gradual: no new errors).
"""

from __future__ import annotations

import re

from mypy.nodes import (
    ARG_NAMED_OPT,
    ARG_OPT,
    ARG_STAR,
    ARG_STAR2,
    ArgKind,
    CallExpr,
    Expression,
    MemberExpr,
    OpExpr,
    StrExpr,
    TypeInfo,
)
from mypy.plugin import FunctionContext
from mypy.types import AnyType, CallableType, Instance, Type, TypeOfAny, get_proper_type

ADD_DOCSTR = "torch._C._add_docstr"
# the public namespaces whose functions torch binds with _add_docstr, and the prefix torch
# gives their builtins' names (torch.linalg.vector_norm.__name__ == "linalg_vector_norm")
NAMESPACES = {"torch.linalg.": "linalg_", "torch.special.": "special_", "torch.fft.": "fft_"}
_CALLEE = re.compile(r"^[\w.]+\(")
_RESULT = re.compile(r"^\s*(?:->\s*(?P<result>.+?))?\s*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


# The decompositions among them: their docstrings give a tuple, ``-> (Tensor, Tensor)``, which
# the signature leaves ``Any``.  A call with a typed operand gives the tuple of its results,
# each typed by the op's rule for one result (the op torch names it: none of them is linear,
# so a Partial is the non-linear error and R/I/V pass), as torch's own ``torch.qr`` /
# ``Tensor.svd`` (``-> torch.return_types.qr``) are typed.  The tuple's class is torch's
# named tuple of the same fields where ``torch/return_types.pyi`` has one (``Q``/``R``); the
# others stay ``Any`` (a plain tuple would reject ``lstsq(A, B).solution``)::
#
#     p_, _ = torch.linalg.qr(p_r)      p_: Tensor[R["dp"]], as torch.qr(p_r)[0]
DECOMPOSITIONS: dict[str, tuple[int, str]] = {
    "linalg_qr": (2, "torch.return_types.qr"),                    # Q, R
    "linalg_eigh": (2, "torch.return_types._linalg_eigh"),        # eigenvalues, eigenvectors
    "linalg_eig": (2, "torch.return_types._linalg_eigh"),
    "linalg_svd": (3, "torch.return_types._linalg_svd"),          # U, S, Vh
    "linalg_slogdet": (2, "torch.return_types.slogdet"),          # sign, logabsdet
    "linalg_lu": (3, "torch.return_types.lu_unpack"),             # P, L, U
    "linalg_lu_factor_ex": (3, "torch.return_types._lu_with_info"),  # LU, pivots, info
}


def namespace_prefix(fullname: str) -> str | None:
    """``linalg_`` for ``torch.linalg.vector_norm``; None outside those namespaces."""
    for namespace, prefix in NAMESPACES.items():
        if fullname.startswith(namespace):
            return prefix
    return None


def op_name(fullname: str) -> str | None:
    """The op a call of ``fullname`` is, as torch names the builtin (``linalg_vector_norm``)."""
    prefix = namespace_prefix(fullname)
    if prefix is None:
        return None
    name = fullname.rsplit(".", 1)[-1]
    return prefix + name if name and not name.startswith("__") else None


def docstring_of(e: Expression) -> str | None:
    """The literal a docstring argument starts with: ``r'''...'''``, ``r'''...'''.format(...)``,
    ``r'''...''' + f'''...'''``."""
    while True:
        if isinstance(e, StrExpr):
            return e.value
        if isinstance(e, OpExpr) and e.op == "+":
            e = e.left
        elif isinstance(e, CallExpr) and isinstance(e.callee, MemberExpr) and e.callee.name == "format":
            e = e.callee.expr
        else:
            return None


def split_params(text: str) -> tuple[list[str], str] | None:
    """The comma-separated parameters up to the parenthesis that closes the list (defaults may
    hold brackets and strings: ``dim=(-2, -1)``, ``ord='fro'``), and the text after it."""
    parts: list[str] = []
    depth = 0
    quote = ""
    current = ""
    for at, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:  # the list's own closing parenthesis
                if current.strip():
                    parts.append(current.strip())
                return parts, text[at + 1:]
        elif ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    return None


def parse_signature(doc: str) -> tuple[list[str], list[str], str | None] | None:
    """(positional names, keyword-only names, the stated result) of the docstring's first
    line, ``linalg.norm(A, ord=None, dim=None, keepdim=False, *, out=None, dtype=None) ->
    Tensor``; None when that line is no signature."""
    line = next((s.strip() for s in doc.splitlines() if s.strip()), "")
    callee = _CALLEE.match(line)
    split = split_params(line[callee.end():]) if callee is not None else None
    m = _RESULT.match(split[1]) if split is not None else None
    if split is None or m is None:
        return None
    params = split[0]
    positional: list[str] = []
    keyword: list[str] = []
    seen_star = False
    for p in params:
        if p == "*":
            seen_star = True
            continue
        words = p.split("=", 1)[0].split()  # "bool pivot=True": a C++ type may come first
        name = words[-1] if words else ""
        if not _IDENTIFIER.match(name) or name in positional or name in keyword:
            return None
        (keyword if seen_star else positional).append(name)
    return positional, keyword, m.group("result")


def bound_builtin_hook(ctx: FunctionContext) -> Type:
    """``_add_docstr(obj, doc)`` where ``obj`` is ``Any`` (a builtin of a module without a
    stub): the callable the docstring states (module docstring).  Elsewhere mypy's result."""
    default = ctx.default_return_type
    if len(ctx.args) < 2 or not ctx.args[0] or not ctx.args[1]:
        return default
    obj = get_proper_type(ctx.arg_types[0][0])
    if not isinstance(obj, AnyType):
        return default
    doc = docstring_of(ctx.args[1][0])
    parsed = parse_signature(doc) if doc is not None else None
    any_t = AnyType(TypeOfAny.from_another_any, source_any=obj)
    positional, keyword, result = parsed if parsed is not None else ([], [], None)
    names: list[str | None] = [*positional, "args", *keyword, "kwargs"]
    kinds: list[ArgKind] = [ARG_OPT] * len(positional) + [ARG_STAR] + [ARG_NAMED_OPT] * len(keyword) + [ARG_STAR2]
    ret: Type = any_t
    if result == "Tensor":
        ret = _tensor(ctx) or any_t
    try:
        fallback = ctx.api.named_generic_type("builtins.function", [])
    except Exception:  # noqa: BLE001 - builtins not at hand: keep mypy's result
        return default
    name = None
    e = ctx.args[0][0]
    if isinstance(e, MemberExpr):
        name = e.name
    return CallableType([any_t] * len(names), kinds, names, ret, fallback, name=name)


def _tensor(ctx: FunctionContext) -> Instance | None:
    """``torch.Tensor`` (by its module: ``torch`` binds no name ``_tensor`` to look it up by)."""
    modules = getattr(ctx.api, "modules", None)
    module = modules.get("torch._tensor") if isinstance(modules, dict) else None
    sym = module.names.get("Tensor") if module is not None else None
    return Instance(sym.node, []) if sym is not None and isinstance(sym.node, TypeInfo) else None
