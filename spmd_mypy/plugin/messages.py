"""mypy's own messages with tensor types printed as users write them.

mypy prints the canonical class of a typed tensor (:mod:`.mypy_types`) in its own errors and
notes: an ``assert_type`` mismatch, a tuple returned where another tuple is declared, a
chained assignment, ``*args`` of the wrong type, an operand that may be None::

    Expression is of type "Tensor[V[Literal['dp']], R[Literal['tp']], Any]", not ...
      =>  Expression is of type Tensor[V["dp"], R["tp"]], not ...

:func:`user_form` reads each quoted type that holds such a tensor back (a small parser for
the types mypy prints: names, ``[...]`` arguments, ``Literal[...]``, ``None``, ``|``), turns
the canonical tensors into SPMD types with the reader the plugin uses everywhere
(:meth:`.mypy_types.TypeBuilder.read_slots`) and prints them as every SPMD message does,
unquoted.  A quoted type it cannot read completely is left exactly as mypy printed it.
``reveal_type`` keeps mypy's form (``spmd.reveal`` prints the user's).
"""

from __future__ import annotations

import re

from mypy.errors import ErrorInfo
from mypy.types import AnyType, Instance, LiteralType, NoneType, TupleType, Type, TypeOfAny

from ..engine.types import SpmdType, decode_by_rank
from ..engine.types import format_type as format_spmd_type
from .mypy_types import SLOT_CLASSES, TypeBuilder

_QUOTED = re.compile(r'"([^"]*)"')
_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][\w.]*|\.\.\.)|(?P<str>'[^']*')|(?P<int>-?\d+)|(?P<punct>[\[\],|]))")
_SLOT_PREFIX = "spmd._slots."


def user_form(message: str, types: TypeBuilder) -> str | None:
    """``message`` with every quoted type holding a canonical tensor printed as users write
    it (unquoted); None when there is nothing to change."""
    if "Tensor[" not in message or message.startswith("Revealed type is"):
        return None
    changed = False
    parts: list[str] = []
    last = 0
    printed: list[tuple[str, str]] = []  # (as mypy quoted it, as shown)
    for m in _QUOTED.finditer(message):
        text = m.group(1)
        if "Tensor[" not in text:
            continue
        shown = _show(text, types)
        if shown is None and text.startswith("def "):
            # a signature quoted in a note ("Layer.__call__" has type "def __call__(...)")
            signature = _unquoted_form(text, types)
            shown = f'"{signature}"' if signature is not None else None
        if shown is None:
            continue
        parts.append(message[last:m.start()])
        parts.append(shown)
        printed.append((text, shown))
        last = m.end()
        changed = True
    if not changed:
        return _unquoted_form(message, types) if message.lstrip().startswith("def ") else None
    parts.append(message[last:])
    return "".join(parts) + _alike(printed, types)


def _alike(printed: list[tuple[str, str]], types: TypeBuilder) -> str:
    """What tells apart two types of a message that print alike but differ in a layout the
    user's form does not show (a rank-dependent layout, a join of shard dims, prints V)::

        expected list[Tensor[V["tp"]]], got list[Tensor[V["tp"]]]
          + (printed alike, they differ in what is not printed: the first is V on "tp" with
             S(0) at rank >= 2, V at rank 1; the second is V as printed)

    "" when no two differ so (the message is clear as it is)."""
    for i, (text_i, shown_i) in enumerate(printed):
        for text_j, shown_j in printed[i + 1:]:
            if shown_i != shown_j or text_i == text_j:
                continue
            first, second = _hidden(text_i, types), _hidden(text_j, types)
            if first == second:
                continue
            return (f" (printed alike, they differ in what is not printed: the first is "
                    f"{'; '.join(first) or 'V as printed'}; the second is "
                    f"{'; '.join(second) or 'V as printed'})")
    return ""


def _hidden(text: str, types: TypeBuilder) -> list[str]:
    """The layouts of the canonical tensors in a quoted type that their printed form (V) does
    not show: a rank-dependent layout, a join of shard dims (``S[int]``), a join of V and
    S(i) (``V_S``); one description per tensor axis, in order."""
    try:
        tokens = _tokens(text.lstrip("*"))
        node, _ = _parse_union(tokens, 0)
    except _Unreadable:
        return []
    out: list[str] = []

    def walk(n: _Node) -> None:
        if _short(n.name) == "Tensor" and len(n.args) == len(types.mesh_axes) + 1:
            for slot in n.args[:-1]:
                said = _hidden_slot(slot)
                if said is not None and said not in out:
                    out.append(said)
            return
        for a in n.args:
            walk(a)

    walk(node)
    return out


def _hidden_slot(slot: _Node) -> str | None:
    name = _short(slot.name)
    axis = _literal(slot.args[-1]) if slot.args else None
    if not isinstance(axis, str):
        return None
    if name == "V_S":
        return f'V or S(i) on "{axis}" (a join of both)'
    if name != "S" or len(slot.args) != 2:
        return None
    dim = slot.args[0]
    if _short(dim.name) in ("int", "builtins.int") and not dim.args:
        return f'S(i) on "{axis}" for a shard dim i not known (a join of shard dims)'
    table = _literal(dim)
    lt = decode_by_rank(table) if isinstance(table, str) else None
    if lt is None:
        return None
    return f'V on "{axis}" with {lt.layouts()}'


def _literal(n: _Node) -> object:
    """The value of a printed ``Literal['tp']`` (None for anything else)."""
    if _short(n.name) == "Literal" and len(n.args) == 1 and n.args[0].is_literal_value:
        return n.args[0].value
    return None


_UNQUOTED_TENSOR = re.compile(r"(?<![\w.])(?:spmd\._slots\.)?Tensor\[")


def _after_brackets(message: str, at: int) -> int:
    """The index after the ``]`` that closes the ``[`` at ``at`` (-1: never closed)."""
    depth = 0
    for k in range(at, len(message)):
        if message[k] == "[":
            depth += 1
        elif message[k] == "]":
            depth -= 1
            if depth == 0:
                return k + 1
    return -1


def _unquoted_form(message: str, types: TypeBuilder) -> str | None:
    """A signature mypy prints unquoted (an overload variant's note, ``def f(x: ...) -> ...``)
    with each canonical tensor in the user's form."""
    parts: list[str] = []
    last = 0
    for m in _UNQUOTED_TENSOR.finditer(message):
        if m.start() < last:
            continue  # inside a tensor already shown
        end = _after_brackets(message, m.end() - 1)
        if end < 0:
            return None
        shown = _show(message[m.start():end], types)
        if shown is None:
            continue
        parts.append(message[last:m.start()])
        parts.append(shown)
        last = end
    if not parts:
        return None
    parts.append(message[last:])
    return "".join(parts)


class _Unreadable(Exception):
    pass


class _Node:
    """A printed type: ``name[args]``, a literal value, or a union of nodes (name "|")."""

    def __init__(self, name: str, args: list[_Node], value: object = None, is_literal_value: bool = False) -> None:
        self.name = name
        self.args = args
        self.value = value
        self.is_literal_value = is_literal_value


def _show(text: str, types: TypeBuilder) -> str | None:
    stars = len(text) - len(text.lstrip("*"))  # "*list[...]": the type of a *args argument
    try:
        tokens = _tokens(text[stars:])
        node, end = _parse_union(tokens, 0)
        if end != len(tokens):
            raise _Unreadable(text)
        return "*" * stars + _print(node, types)
    except _Unreadable:
        return None


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    n = len(text)
    while pos < n:
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _Unreadable(text)
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _parse_union(tokens: list[tuple[str, str]], i: int) -> tuple[_Node, int]:
    first, i = _parse_one(tokens, i)
    items = [first]
    while i < len(tokens) and tokens[i] == ("punct", "|"):
        item, i = _parse_one(tokens, i + 1)
        items.append(item)
    return (first, i) if len(items) == 1 else (_Node("|", items), i)


def _parse_one(tokens: list[tuple[str, str]], i: int) -> tuple[_Node, int]:
    if i >= len(tokens):
        raise _Unreadable("end")
    kind, tok = tokens[i]
    if (kind, tok) == ("punct", "["):  # Callable[[A, B], C]: the parameter list
        items: list[_Node] = []
        i += 1
        while i < len(tokens) and tokens[i] != ("punct", "]"):
            item, i = _parse_union(tokens, i)
            items.append(item)
            if i < len(tokens) and tokens[i] == ("punct", ","):
                i += 1
        if i >= len(tokens):
            raise _Unreadable("[")
        return _Node("[]", items), i + 1
    if kind == "str":
        return _Node("", [], tok[1:-1], True), i + 1
    if kind == "int":
        return _Node("", [], int(tok), True), i + 1
    if kind != "name":
        raise _Unreadable(tok)
    i += 1
    args: list[_Node] = []
    if i < len(tokens) and tokens[i] == ("punct", "["):
        i += 1
        if i < len(tokens) and tokens[i] == ("punct", "]"):
            return _Node(tok, []), i + 1
        while True:
            arg, i = _parse_union(tokens, i)
            args.append(arg)
            if i < len(tokens) and tokens[i] == ("punct", ","):
                i += 1
                continue
            if i < len(tokens) and tokens[i] == ("punct", "]"):
                i += 1
                break
            raise _Unreadable("]")
    return _Node(tok, args), i


def _print(node: _Node, types: TypeBuilder) -> str:
    """The type as users write it: canonical tensors in SPMD form, the rest as mypy wrote it."""
    if node.is_literal_value:
        return repr(node.value) if isinstance(node.value, str) else str(node.value)
    if node.name == "|":
        return " | ".join(_print(a, types) for a in node.args)
    if node.name == "[]":
        return "[" + ", ".join(_print(a, types) for a in node.args) + "]"
    if _short(node.name) == "Tensor" and node.args:
        sts = _tensor(node, types)
        if sts is None:
            raise _Unreadable(node.name)
        return " | ".join(dict.fromkeys(format_spmd_type(st) for st in sts))
    if not node.args:
        return node.name
    return f"{node.name}[{', '.join(_print(a, types) for a in node.args)}]"


def _short(name: str) -> str:
    return name[len(_SLOT_PREFIX):] if name.startswith(_SLOT_PREFIX) else name


def _tensor(node: _Node, types: TypeBuilder) -> list[SpmdType] | None:
    """A printed canonical tensor read back: one slot per mesh axis and the spec slot; a join
    (``Tensor[R_P[Literal['tp']], ...]``) as the tensors it stands for."""
    if len(node.args) != len(types.mesh_axes) + 1:
        return None
    infos = types.infos()
    if infos is None:
        return None
    str_t = Instance(infos["str"], [])
    int_t = Instance(infos["int"], [])
    obj = Instance(infos["tuple"], [AnyType(TypeOfAny.special_form)])

    def build(n: _Node) -> Type:
        if n.is_literal_value:
            raise _Unreadable("a bare literal")
        name = _short(n.name)
        if name == "Any" and not n.args:
            return AnyType(TypeOfAny.special_form)
        if name == "None" and not n.args:
            return NoneType()
        if name == "Literal" and len(n.args) == 1 and n.args[0].is_literal_value:
            v = n.args[0].value
            if isinstance(v, str):
                return LiteralType(v, str_t)
            if isinstance(v, int):
                return LiteralType(v, int_t)
            raise _Unreadable("Literal")
        if name == "tuple":
            return TupleType([build(a) for a in n.args], obj)
        if name in ("int", "builtins.int") and not n.args:  # S[int, ...]: a join of S dims
            return int_t
        if name in SLOT_CLASSES and n.args:
            return Instance(infos[name], [build(a) for a in n.args])
        raise _Unreadable(name)

    slots = [build(a) for a in node.args]
    if not node.name.startswith(_SLOT_PREFIX) and all(isinstance(t, AnyType) for t in slots):
        return None  # "Tensor[Any, Any, Any]" could be anyone's class: only ours says more
    for axis, slot in zip(types.mesh_axes, slots):
        # each slot names its own axis (a user's class called Tensor would not)
        if isinstance(slot, Instance):
            last = slot.args[-1] if slot.args else None
            if not (isinstance(last, LiteralType) and last.value == axis):
                return None
        elif not isinstance(slot, AnyType):
            return None
    members = types.members(Instance(infos["Tensor"], slots))
    return [types.read_slots(m.args) for m in members] if members else [types.read_slots(slots)]


def fold_into_earlier(infos: list[ErrorInfo] | None, line: int, column: int, code: str, message: str) -> bool:
    """One error per mistake over a union's members: when an earlier error at the same
    position with the same code says the same but for the operand types it prints (mypy
    checks an operand that is a union member by member, or the plugin does), fold this one
    into it, naming each member's type; True: folded (do not report it)::

        for p in [w1, w2, b]: p.add_(g)
        ... (p: Tensor[R["dp", "tp"]]) ...  +  ... (p: Tensor[R["dp"], V["tp"]]) ...
          =>  ... (p: Tensor[R["dp", "tp"]] | Tensor[R["dp"], V["tp"]]) ...

    Only the last few errors are looked at (a union's members are checked one after another)."""
    if not infos:
        return False
    texts, types = split_operand_types(message)
    if not types:
        return False
    for k in range(len(infos) - 1, max(-1, len(infos) - 1 - _FOLD_WINDOW), -1):
        info = infos[k]
        if (info.line != line or info.column != column or info.severity != "error"
                or info.code is None or info.code.code != code):
            continue
        earlier_texts, earlier_types = split_operand_types(info.message)
        if earlier_texts != texts:
            continue
        parts = [texts[0]]
        for before, now, text in zip(earlier_types, types, texts[1:]):
            shown = before.split(" | ")
            if now not in shown:
                shown.append(now)
            parts.append(" | ".join(shown))
            parts.append(text)
        info.message = "".join(parts)
        return True
    return False


_FOLD_WINDOW = 8


def split_operand_types(message: str) -> tuple[list[str], list[str]]:
    """``message`` around the operand types it prints (``(g: Tensor[...])``, brackets
    balanced, a folded ``A | B`` whole): the texts between them (one more than the types) and
    the types.  A type anywhere else (a fix's ``spmd.declare(g, Tensor[R["dp"]])``) stays in
    the text."""
    texts: list[str] = []
    types: list[str] = []
    last = 0
    i = message.find(": Tensor[")
    while i >= 0:
        start = i + 2
        j = start
        while True:  # one type, then `` | Tensor[...]`` for each one folded in
            j = _after_brackets(message, j + len("Tensor"))
            if j < 0:
                return texts + [message[last:]], types
            if not message.startswith(" | Tensor[", j):
                break
            j += 3
        texts.append(message[last:start])
        types.append(message[start:j])
        last = j
        i = message.find(": Tensor[", last)
    texts.append(message[last:])
    return texts, types
