"""Frozen module attributes: the weights a class makes gradient-free, read from the source.

A module's weight made with ``nn.Parameter(w, requires_grad=False)``, frozen in ``__init__``
(``self.w.requires_grad_(False)``, ``self.w.requires_grad = False``), or registered as a
buffer (``self.register_buffer("w", w)``) carries no gradient: an I one mixes with R, V
or S(i) (a frozen teacher's weight, a LoRA base), as the check mode, which reads
``requires_grad``, accepts.  mypy does not track ``requires_grad``, so the pre-pass
(rewrite.prepare_file) reads it: in each method of such a class, ``self.w`` is a
gradient-free name (``"self.w"`` in the method's lines, read by ``is_gradient_free``).

Sound against unfreezing, as far as the file shows: an attribute is not frozen when a method
other than ``__init__`` assigns it a value that may carry a gradient, when ``__init__``
assigns it a plain value after freezing it, or when any statement of the file unfreezes it
(``x.w.requires_grad_()``, ``x.w.requires_grad_(True)``, ``x.w.requires_grad = True``);
and no attribute of the file is when a statement unfreezes something else, which may be a
module holding it (``self.requires_grad_(True)``, ``teacher.requires_grad_()``, ``p`` in
``for p in model.parameters(): p.requires_grad_()``).  Not read: another file's
unfreezing, an attribute reached other than through a method's own first argument
(``teacher.w`` outside the class).
"""

from __future__ import annotations

from typing import Final, Callable, Optional

from mypy.nodes import (
    AssignmentStmt,
    CallExpr,
    ClassDef,
    Expression,
    ExpressionStmt,
    FuncDef,
    MemberExpr,
    MypyFile,
    NameExpr,
    Statement,
    StrExpr,
)

from .statements import functions_of, nested_statements, statement_blocks

_PARAMETER = "Parameter"
_INIT = "__init__"


def _is_false(e: Expression) -> bool:
    return isinstance(e, NameExpr) and e.name == "False"


def _requires_grad_arg(call: CallExpr) -> Optional[Expression]:
    """``requires_grad_(x)``'s argument (None: none given, which means True)."""
    for a, n in zip(call.args, call.arg_names):
        if n is None or n == "requires_grad":
            return a
    return None


def _frozen_value(e: Expression) -> bool:
    """``nn.Parameter(w, requires_grad=False)`` (or ``Parameter(w, False)``), or
    ``<value>.requires_grad_(False)``."""
    if not isinstance(e, CallExpr) or not isinstance(e.callee, (NameExpr, MemberExpr)):
        return False
    name = e.callee.name
    if name == _PARAMETER:
        for k, (arg, n) in enumerate(zip(e.args, e.arg_names)):
            if n == "requires_grad" or (n is None and k == 1):
                return _is_false(arg)
        return False
    if name == "requires_grad_" and isinstance(e.callee, MemberExpr):
        given = _requires_grad_arg(e)
        return given is not None and _is_false(given)
    return False


def _self_attribute(e: Expression, self_name: str) -> Optional[str]:
    if isinstance(e, MemberExpr) and isinstance(e.expr, NameExpr) and e.expr.name == self_name:
        return e.name
    return None


def _unfreezing(st: Statement) -> Optional[Expression]:
    """The receiver a statement turns gradients on for: ``r.requires_grad_()``,
    ``r.requires_grad_(True)``, ``r.requires_grad = True`` (any value but False)."""
    if isinstance(st, ExpressionStmt) and isinstance(st.expr, CallExpr):
        callee = st.expr.callee
        if isinstance(callee, MemberExpr) and callee.name == "requires_grad_":
            a = _requires_grad_arg(st.expr)
            return None if a is not None and _is_false(a) else callee.expr
    elif isinstance(st, AssignmentStmt):
        for lv in st.lvalues:
            if isinstance(lv, MemberExpr) and lv.name == "requires_grad" and not _is_false(st.rvalue):
                return lv.expr
    return None


def _all_statements(stmts: list[Statement], out: list[Statement]) -> None:
    """Every statement of ``stmts``, those of nested functions and classes included."""
    for st in stmts:
        out.append(st)
        for body in statement_blocks(st):
            _all_statements(body, out)
        for f in functions_of(st):
            _all_statements(f.body.body, out)
        if isinstance(st, ClassDef):
            _all_statements(st.defs.body, out)


def _class_frozen(c: ClassDef, gradient_free: Callable[[Expression], bool]
                  ) -> tuple[set[str], list[tuple[FuncDef, str]]]:
    """The attributes ``c`` freezes (before the file's unfreezing is read), and its methods
    with their first argument's name."""
    methods: list[tuple[FuncDef, str]] = []
    for st in c.defs.body:
        for f in functions_of(st):
            if f.arguments and not f.is_static:
                methods.append((f, f.arguments[0].variable.name))
    frozen: set[str] = set()
    thawed: set[str] = set()
    for f, s in methods:
        init = f.name == _INIT
        last: dict[str, tuple[int, bool]] = {}  # __init__: the last freeze or plain assignment
        for st in nested_statements(f.body.body):
            if isinstance(st, AssignmentStmt):
                for lv in st.lvalues:
                    x = _self_attribute(lv, s)
                    if x is not None:
                        if _frozen_value(st.rvalue):
                            last[x] = (st.line, True)
                        elif init:
                            last[x] = (st.line, False)
                        elif not gradient_free(st.rvalue):  # a buffer updated: x.detach()
                            thawed.add(x)
                    elif (init and isinstance(lv, MemberExpr) and lv.name == "requires_grad"
                          and _is_false(st.rvalue)):
                        x = _self_attribute(lv.expr, s)
                        if x is not None:
                            last[x] = (st.line, True)
            elif isinstance(st, ExpressionStmt) and isinstance(st.expr, CallExpr):
                call = st.expr
                callee = call.callee
                if not isinstance(callee, MemberExpr):
                    continue
                if callee.name == "register_buffer" and _self_attribute(callee, s) is not None:
                    if call.args and isinstance(call.args[0], StrExpr):
                        frozen.add(call.args[0].value)
                elif init and callee.name == "requires_grad_":
                    a = _requires_grad_arg(call)
                    x = _self_attribute(callee.expr, s)
                    if x is not None and a is not None and _is_false(a):
                        last[x] = (st.line, True)
        for x, (_, is_frozen) in last.items():
            (frozen if is_frozen else thawed).add(x)
    return frozen - thawed, methods


def _thawed(stmts: list[Statement], names: set[str]) -> Optional[set[str]]:
    """The attributes of ``names`` that ``stmts`` unfreeze; None: maybe all of them."""
    thawed: set[str] = set()
    for st in stmts:
        r = _unfreezing(st)
        if r is None or isinstance(r, CallExpr):  # torch.randn(3).requires_grad_(): a new tensor
            continue
        if isinstance(r, MemberExpr) and r.name in names:
            thawed.add(r.name)
        else:  # a module, a parameter of a loop over them, self: any attribute may be in it
            return None
    return thawed


# Words every freezing form writes (``requires_grad=False``, ``requires_grad_(False)``,
# ``.requires_grad = False``, ``register_buffer(...)``, ``nn.Parameter(w, False)``): a file
# whose source has none of them freezes nothing, and the walk over every statement of every
# class (~2 M instructions per 400-line file, measured) is skipped.  A file that cannot be
# read is walked.  A freezing form missed here leaves the weight gradient-carrying: the rule
# as it was before frozen weights were read (more errors, never fewer).
_FREEZING_WORDS: Final = (b"requires_grad", b"register_buffer", b", False)", b",False)")


def _may_freeze(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except (OSError, ValueError):
        return True
    # (one search for b"False)" where two would look for ", False)" and ",False)")
    return b"requires_grad" in source or b"register_buffer" in source or (
        b"False)" in source and any(word in source for word in _FREEZING_WORDS[2:]))


def frozen_attributes(file: MypyFile, gradient_free: Callable[[Expression], bool]
                      ) -> list[tuple[int, int, str]]:
    """The frozen attributes of the file's classes, as gradient-free names over each method's
    lines: ``(first line, last line, "self.w")``.  ``gradient_free``: whether an assigned value
    carries no gradient (rewrite.is_gradient_free).  A class at the top level may be unfrozen
    anywhere in the file; one defined in a function (or another class) only there."""
    if not _may_freeze(file.path):
        return []
    every: list[Statement] = []
    scopes: list[list[Statement]] = []  # each top-level statement's, itself first
    for d in file.defs:
        stmts: list[Statement] = []
        _all_statements([d], stmts)
        every.extend(stmts)
        scopes.append(stmts)
    out: list[tuple[int, int, str]] = []
    for stmts in scopes:
        for k, c in enumerate(stmts):
            if not isinstance(c, ClassDef):
                continue
            frozen, methods = _class_frozen(c, gradient_free)
            if not frozen:
                continue
            thawed = _thawed(every if k == 0 else stmts, frozen)
            if thawed is None:
                continue
            names = sorted(frozen - thawed)
            for f, s in methods:
                out.extend((f.line, f.end_line or f.line, f"{s}.{x}") for x in names)
    return out


__all__ = ["frozen_attributes"]
