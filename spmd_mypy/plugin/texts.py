"""An operand's source text for messages, as the user wrote it (:func:`expr_text`).

Messages quote operands in their fixes (``all_reduce(h[:, :n], "tp", src=P, dst=R)``), which
users paste: a subscript, a call's arguments, a keyword argument, an f-string key print as
written, with the parentheses Python's precedence needs (``(a + b).float()``; never
``a + b.float()``).  Only what would make a message long is cut: a call's arguments or a
subscript's index are shown while the operand's text stays within :data:`TEXT_LIMIT`
characters, else written :data:`ELIDED` (``torch.cat(<...>)``, ``acts[<...>]``), which is
visibly not code (``f(...)`` and ``c[...]`` are valid Python, ``c[...]`` the whole tensor).
The callee chain is always kept (the engine reads the calls a value went through from it:
``x.amax(<...>).float()``).

The AST is the plugin's, after the pre-pass (``rewrite``): a redefinition renamed ``h'`` prints
as ``h``, an axis string marked raw prints as written, a backward's rewritten read of
``ctx.saved_tensors`` as ``ctx.saved_tensors``.

The static checker names every operand of every typed call with it (an Operand's text is
made before the rule knows whether it fails), so it is cheap: atoms as they are, and the
budget ends the walk into arguments that cannot fit.
"""

from __future__ import annotations

from typing import Final, cast

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    ARG_NAMED_OPT,
    ARG_STAR,
    ARG_STAR2,
    AssignmentExpr,
    AwaitExpr,
    BytesExpr,
    CallExpr,
    CastExpr,
    ComparisonExpr,
    ComplexExpr,
    ConditionalExpr,
    DictExpr,
    DictionaryComprehension,
    EllipsisExpr,
    Expression,
    FloatExpr,
    GeneratorExpr,
    IndexExpr,
    IntExpr,
    LambdaExpr,
    ListComprehension,
    ListExpr,
    MemberExpr,
    NameExpr,
    OpExpr,
    SetComprehension,
    SetExpr,
    SliceExpr,
    StarExpr,
    StrExpr,
    SuperExpr,
    TupleExpr,
    UnaryExpr,
    YieldExpr,
)

from .rewrite import _RAW_PREFIX  # an axis string in R["tp"], PS[...] the pre-pass marked
# the exact node classes as C statics (rewrite.py): ``type(e) is _C`` is a pointer comparison,
# where ``isinstance`` on mypy's classes walks an MRO from this separately compiled module
from .rewrite import (_CallExpr, _ComparisonExpr, _ConditionalExpr, _IndexExpr, _IntExpr,
                      _LambdaExpr, _MemberExpr, _NameExpr, _OpExpr, _StrExpr, _UnaryExpr)

# An operand's text shows a call's arguments and a subscript's index while it stays within
# this many characters.  Fix texts quote the operand up to four times (the V-to-R fix:
# all_gather(x, ...), reinterpret(x, ...), "when x is a per-rank partial sum"), so 48
# characters keep such a message within ~200 added characters, and fit the forms users
# write for an operand in one expression (h[:, :n], x.view(b, s, -1), mp.to(torch.float32),
# logits.float().log_softmax(dim=-1), torch.max(logits, other)[1], a norm's
# torch.sqrt(g_w1.pow(2).sum() + g_ln.pow(2).sum())).
TEXT_LIMIT: Final = 48
ELIDED: Final = "<...>"  # what was cut: a syntax error if pasted, never a valid expression


# Python's precedence, loosest first
_LAMBDA: Final = 1
_COND: Final = 2
_OR: Final = 3
_AND: Final = 4
_NOT: Final = 5
_CMP: Final = 6
_UNARY: Final = 13
_POWER: Final = 14
_PRIMARY: Final = 16
_ATOM: Final = 17

_BINARY: Final = {
    "or": _OR, "and": _AND, "|": 7, "^": 8, "&": 9, "<<": 10, ">>": 10, "+": 11, "-": 11,
    "*": 12, "@": 12, "/": 12, "//": 12, "%": 12, "**": _POWER,
}


def expr_text(e: Expression | None) -> str:
    """The source text of operand ``e`` for messages (module doc).  An operator's text is
    parenthesized, ``(a + b)``, as messages put it in a sentence (engine ``bare`` strips
    the parentheses where a call or parenthesis already surrounds it)."""
    if e is None:
        return "x"
    if type(e) is _NameExpr:  # the common operand: a name
        return cast(NameExpr, e).name.rstrip("'")
    if _prec(e) < _UNARY:
        return "(" + _text(e, TEXT_LIMIT - 2) + ")"
    return _text(e, TEXT_LIMIT)




def code_text(e: Expression) -> str:
    """``e``'s whole text, nothing cut, without outer parentheses: a statement a fix tells
    users to paste (``full = spmd.all_gather(model.w1.detach(), "tp", src=S(0), dst=I)``)."""
    return _text(e, 1_000_000)


def _prec(e: Expression) -> int:
    cls = type(e)
    if cls is _NameExpr or cls is _StrExpr or cls is _IntExpr:
        return _ATOM
    if cls is _CallExpr or cls is _MemberExpr or cls is _IndexExpr:
        return _PRIMARY
    if cls is _OpExpr:
        return _BINARY.get(cast(OpExpr, e).op, _ATOM)
    if cls is _UnaryExpr:
        return _NOT if cast(UnaryExpr, e).op == "not" else _UNARY
    if cls is _ComparisonExpr:
        return _CMP
    if cls is _ConditionalExpr:
        return _COND
    if cls is _LambdaExpr:
        return _LAMBDA
    return _ATOM


def _sub(e: Expression, least: int, budget: int) -> str:
    """``e``'s text where the context binds at ``least``: parenthesized when ``e`` binds
    looser."""
    if type(e) is _NameExpr:  # the common operand: a name
        return cast(NameExpr, e).name.rstrip("'")
    if _prec(e) < least:
        return "(" + _text(e, budget - 2) + ")"
    return _text(e, budget)


def _text(e: Expression, budget: int) -> str:
    """``e``'s text, its arguments and indices cut where the text would pass ``budget``."""
    cls = type(e)
    if cls is _NameExpr:
        return cast(NameExpr, e).name.rstrip("'")  # a redefinition renamed h' (rewrite)
    if cls is _MemberExpr:
        m = cast(MemberExpr, e)
        return _sub(m.expr, _PRIMARY, budget - len(m.name) - 1) + "." + m.name
    if cls is _CallExpr:
        return _call(cast(CallExpr, e), budget)
    if isinstance(e, IndexExpr):
        base = _sub(e.base, _PRIMARY, budget)
        room = budget - len(base) - 2
        index = _index(e.index, room) if room >= 1 else None
        return f"{base}[{ELIDED if index is None else index}]"
    if isinstance(e, StrExpr):
        return _string(e.value)
    if isinstance(e, IntExpr):
        return str(e.value)
    if isinstance(e, (FloatExpr, ComplexExpr)):
        return repr(e.value)
    if isinstance(e, BytesExpr):
        return f'b"{e.value}"' if '"' not in e.value else f"b'{e.value}'"
    if isinstance(e, EllipsisExpr):
        return "..."
    if isinstance(e, OpExpr):
        p = _BINARY.get(e.op, _ATOM)
        left = _sub(e.left, p + 1 if p == _POWER else p, budget)
        right = _sub(e.right, _UNARY if p == _POWER else p + 1, budget - len(left) - len(e.op) - 2)
        return f"{left} {e.op} {right}"
    if isinstance(e, UnaryExpr):
        if e.op == "not":
            return "not " + _sub(e.expr, _NOT, budget - 4)
        return e.op + _sub(e.expr, _UNARY, budget - 1)
    if isinstance(e, ComparisonExpr):
        parts = [_sub(e.operands[0], _CMP + 1, budget)]
        for op, operand in zip(e.operators, e.operands[1:]):
            parts += [op, _sub(operand, _CMP + 1, budget - sum(len(t) + 1 for t in parts))]
        return " ".join(parts)
    if isinstance(e, ConditionalExpr):
        a = _sub(e.if_expr, _OR, budget)
        c = _sub(e.cond, _OR, budget - len(a) - 4)
        b = _sub(e.else_expr, _COND, budget - len(a) - len(c) - 10)
        return f"{a} if {c} else {b}"
    if isinstance(e, TupleExpr):
        items = _items(e.items, budget - 2)
        if items is None:
            return f"({ELIDED})"
        return f"({items},)" if len(e.items) == 1 else f"({items})"
    if isinstance(e, ListExpr):
        items = _items(e.items, budget - 2)
        if e.items and all(isinstance(i, StrExpr) and i.value.startswith(_RAW_PREFIX)
                           for i in e.items):
            # PS[("dp", "tp"), None]: a tuple of axes the pre-pass made a list (rewrite)
            return f"({ELIDED if items is None else items})"
        return f"[{ELIDED if items is None else items}]"
    if isinstance(e, SetExpr):
        items = _items(e.items, budget - 2)
        return f"{{{ELIDED if items is None else items}}}"
    if isinstance(e, DictExpr):
        return _dict(e, budget)
    if isinstance(e, StarExpr):
        return "*" + _sub(e.expr, 7, budget - 1)
    if isinstance(e, YieldExpr):  # the value sent into a generator
        return f"(yield {_text(e.expr, budget - 8)})" if e.expr is not None else "(yield)"
    if isinstance(e, AwaitExpr):
        return f"(await {_sub(e.expr, _PRIMARY, budget - 8)})"
    if isinstance(e, AssignmentExpr):  # (h := ...): the name it binds
        return _text(e.target, budget)
    if isinstance(e, LambdaExpr):
        return _lambda(e, budget)
    if isinstance(e, GeneratorExpr):
        body = _comprehension(e, budget - 2)
        return f"({ELIDED if body is None else body})"
    if isinstance(e, ListComprehension):
        body = _comprehension(e.generator, budget - 2)
        return f"[{ELIDED if body is None else body}]"
    if isinstance(e, SetComprehension):
        body = _comprehension(e.generator, budget - 2)
        return f"{{{ELIDED if body is None else body}}}"
    if isinstance(e, DictionaryComprehension):
        return f"{{{ELIDED}}}"
    if isinstance(e, SuperExpr):
        return f"super().{e.name}"
    if isinstance(e, CastExpr):
        return _text(e.expr, budget)
    return "<expression>"


def _string(value: str) -> str:
    if value.startswith(_RAW_PREFIX):
        value = value[len(_RAW_PREFIX):]
    if '"' in value or "\\" in value or not value.isprintable():
        return repr(value)
    return f'"{value}"'


def _call(e: CallExpr, budget: int) -> str:
    if is_saved_read(e):
        return _text(e.args[0], budget)
    fstring = _fstring(e)
    if fstring is not None:
        return fstring
    callee = _sub(e.callee, _PRIMARY, budget)
    if not e.args:
        return callee + "()"
    room = budget - len(callee) - 2
    args = _arguments(e, room) if room >= 1 else None
    return f"{callee}({ELIDED if args is None else args})"


def _arguments(e: CallExpr, room: int) -> str | None:
    """A call's argument text when it fits in ``room`` characters, else None."""
    parts: list[str] = []
    used = 0
    for arg, kind, name in zip(e.args, e.arg_kinds, e.arg_names):
        if kind == ARG_STAR:
            prefix = "*"
        elif kind == ARG_STAR2:
            prefix = "**"
        elif (kind == ARG_NAMED or kind == ARG_NAMED_OPT) and name is not None:
            prefix = name + "="
        else:
            prefix = ""
        left = room - used - len(prefix) - (2 if parts else 0)
        if left < 1:
            return None
        part = prefix + _sub(arg, _LAMBDA if not prefix.startswith("*") else 7, left)
        used += len(part) + (2 if parts else 0)
        if used > room or ELIDED in part:
            return None
        parts.append(part)
    return ", ".join(parts)


def _items(items: list[Expression], room: int) -> str | None:
    """Comma-separated items when they fit in ``room`` characters, else None."""
    parts: list[str] = []
    used = 0
    for item in items:
        left = room - used - (2 if parts else 0)
        if left < 1:
            return None
        part = _sub(item, _LAMBDA, left)
        used += len(part) + (2 if parts else 0)
        if used > room or ELIDED in part:
            return None
        parts.append(part)
    return ", ".join(parts)


def _index(index: Expression, room: int) -> str | None:
    """A subscript's index as written (``0``, ``:, :n``, ``..., 1:``), None past ``room``."""
    if isinstance(index, TupleExpr) and index.items:
        parts: list[str] = []
        used = 0
        for item in index.items:
            left = room - used - (2 if parts else 0)
            if left < 1:
                return None
            part = _slice(item, left) if isinstance(item, SliceExpr) else _sub(item, _LAMBDA, left)
            used += len(part) + (2 if parts else 0)
            if used > room or ELIDED in part:
                return None
            parts.append(part)
        return ", ".join(parts) + ("," if len(parts) == 1 else "")
    text = _slice(index, room) if isinstance(index, SliceExpr) else _sub(index, _LAMBDA, room)
    return text if len(text) <= room and ELIDED not in text else None


def _slice(s: SliceExpr, room: int) -> str:
    parts = [_sub(p, _COND + 1, room) if p is not None else ""
             for p in (s.begin_index, s.end_index)]
    if s.stride is not None:
        parts.append(_sub(s.stride, _COND + 1, room))
    return ":".join(parts)


def _dict(e: DictExpr, budget: int) -> str:
    parts: list[str] = []
    used = 0
    for k, v in e.items:
        part = (f"**{_sub(v, 7, budget)}" if k is None
                else f"{_sub(k, _COND, budget)}: {_sub(v, _COND, budget)}")
        used += len(part) + (2 if parts else 0)
        if used > budget - 2 or ELIDED in part:
            return f"{{{ELIDED}}}"
        parts.append(part)
    return "{" + ", ".join(parts) + "}"


def _lambda(e: LambdaExpr, budget: int) -> str:
    """``lambda t: t.float()``; its parameters with defaults or kinds are cut."""
    names = []
    for a in e.arguments:
        if a.initializer is not None or a.kind != ARG_POS:
            return f"lambda {ELIDED}"
        names.append(a.variable.name.rstrip("'"))
    head = "lambda " + ", ".join(names) + ": " if names else "lambda: "
    body = _sub(e.expr(), _LAMBDA, budget - len(head))
    if len(head) + len(body) > budget or ELIDED in body:
        return f"lambda {ELIDED}"
    return head + body


def _comprehension(g: GeneratorExpr, room: int) -> str | None:
    """``elt for x in xs if c`` when it fits in ``room`` characters, else None."""
    parts = [_sub(g.left_expr, _COND, room)]
    used = len(parts[0])
    for k, (target, seq, conds) in enumerate(zip(g.indices, g.sequences, g.condlists)):
        if used > room:
            return None  # cut: the rest is not rendered
        target_text = (_items(target.items, room) if isinstance(target, TupleExpr)
                       else _text(target, room))
        if target_text is None:
            return None
        is_async = g.is_async[k] if k < len(g.is_async) else False
        part = (("async for " if is_async else "for ") + target_text + " in "
                + _sub(seq, _OR, room - used))
        parts.append(part)
        used += len(part) + 1
        for c in conds:
            if used > room:
                return None
            part = "if " + _sub(c, _OR, room - used)
            parts.append(part)
            used += len(part) + 1
    text = " ".join(parts)
    return text if len(text) <= room and ELIDED not in text else None


def _fstring(e: CallExpr) -> str | None:
    """An f-string, which mypy parses as ``"".join([...])`` of literals and
    ``"{:{}}".format(x, spec)`` fields (or one such field alone): as written, ``f"l{i}"``;
    None for any other call (or an f-string it cannot write back)."""
    callee = e.callee
    if not isinstance(callee, MemberExpr) or not isinstance(callee.expr, StrExpr):
        return None
    if callee.name == "join" and callee.expr.value == "" and len(e.args) == 1 \
            and isinstance(e.args[0], ListExpr):
        pieces = e.args[0].items
    elif callee.name == "format":
        pieces = [e]
    else:
        return None
    out: list[str] = []
    used = 0
    for p in pieces:
        if used > TEXT_LIMIT:
            return None  # too long to write back: the call's arguments are cut
        if isinstance(p, StrExpr):
            out.append(p.value.replace("{", "{{").replace("}", "}}"))
        else:
            field = _format_field(p)
            if field is None:
                return None
            out.append(field)
        used += len(out[-1])
    text = "".join(out)
    if '"' in text or "\\" in text or "\n" in text:
        return None
    return f'f"{text}"'


_CONVERSIONS: Final = {"{:{}}": "", "{!r:{}}": "!r", "{!s:{}}": "!s", "{!a:{}}": "!a"}


def _format_field(p: Expression) -> str | None:
    """``"{!r:{}}".format(x, ">3")`` -> ``{x!r:>3}``; None for anything else."""
    if not (isinstance(p, CallExpr) and isinstance(p.callee, MemberExpr)
            and p.callee.name == "format" and isinstance(p.callee.expr, StrExpr)
            and len(p.args) == 2 and isinstance(p.args[1], StrExpr)):
        return None
    conversion = _CONVERSIONS.get(p.callee.expr.value)
    if conversion is None:
        return None
    spec = p.args[1].value
    value = _text(p.args[0], TEXT_LIMIT)
    if ELIDED in value:
        return None
    return "{" + value + conversion + (":" + spec if spec else "") + "}"


def is_saved_read(e: CallExpr) -> bool:
    """``isinstance(ctx.saved_tensors, object)``: how the plugin rewrites a read of
    ``ctx.saved_tensors`` in a custom Function's backward (autograd.py); named as written."""
    callee = e.callee
    return (isinstance(callee, NameExpr) and callee.name == "isinstance" and len(e.args) == 2
            and isinstance(e.args[0], MemberExpr) and e.args[0].name == "saved_tensors"
            and isinstance(e.args[1], NameExpr) and e.args[1].name == "object")
