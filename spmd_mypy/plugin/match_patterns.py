"""What a ``match`` case's value patterns compare (rewrite section 3).

``case 0:`` is ``subject == 0``, whose truth value Python reads when it tries the case: a
Partial subject reads this rank's summand, as ``if p == 0:`` does.  Nested in a sequence, a
mapping or a class pattern the comparison is of the subject's item, value or attribute::

    match (p, k):   case (0, 1):      p == 0, k == 1
    match d:        case {"a": 0}:    d["a"] == 0
    match c:        case Cfg(x=0):    c.x == 0

:func:`value_comparisons` follows the patterns through the subject's type (mypy runs no hook
in a pattern): each value pattern with the type it is compared with and that value's text.
A capture, a wildcard, ``None``/``True``/``False`` (an ``is`` test), a mapping key (a lookup)
and a class pattern's type test compare no value.  Where the walk cannot tell the type (an
unknown class, ``Any``, a variadic tuple) it gives nothing: gradual.
"""

from __future__ import annotations

from typing import Callable, Final

from mypy.maptype import map_instance_to_supertype
from mypy.nodes import (
    Expression,
    ListExpr,
    RefExpr,
    StarExpr,
    StrExpr,
    TupleExpr,
    TypeAlias,
    TypeInfo,
    Var,
)
from mypy.patterns import (
    AsPattern,
    ClassPattern,
    MappingPattern,
    OrPattern,
    Pattern,
    SequencePattern,
    StarredPattern,
    ValuePattern,
)
from mypy.subtypes import find_member
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    TupleType,
    Type,
    TypedDictType,
    TypeOfAny,
    UnionType,
    UnpackType,
    get_proper_type,
)

# Classes a class pattern's single positional matches as the subject itself (``int(0)``),
# as Python's and mypy's pattern matching do
_SELF_MATCH: Final = frozenset({
    "builtins.bool", "builtins.bytearray", "builtins.bytes", "builtins.dict", "builtins.float",
    "builtins.frozenset", "builtins.int", "builtins.list", "builtins.set", "builtins.str",
    "builtins.tuple"})
# Sequences that never match a sequence pattern
_NOT_SEQUENCES: Final = frozenset({"builtins.str", "builtins.bytes", "builtins.bytearray"})
# A pattern nested deeper than this is not followed (no real code nests so deep)
_MAX_DEPTH: Final = 32


def value_comparisons(subject: Type, text: str, expr: Expression | None, p: Pattern,
                      name: Callable[[Expression], str]) -> list[tuple[Type, str, ValuePattern]]:
    """Each value pattern in ``p`` with the type of the value it is compared with (the part
    of ``subject`` it stands at) and that value's text (``text`` names the subject, ``expr``
    is its expression where it has one: ``match (p, k)`` names ``p`` and ``k``; ``name``
    gives an expression's text)."""
    w = _Walk(name)
    w.walk(subject, text, expr, p, 0)
    return w.out


class _Walk:
    def __init__(self, name: Callable[[Expression], str]) -> None:
        self.name = name
        self.out: list[tuple[Type, str, ValuePattern]] = []

    def walk(self, subject: Type, text: str, expr: Expression | None, p: Pattern,
             depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if isinstance(p, ValuePattern):
            self.out.append((subject, text, p))
        elif isinstance(p, AsPattern):
            if p.pattern is not None:
                self.walk(subject, text, expr, p.pattern, depth + 1)
        elif isinstance(p, OrPattern):
            for q in p.patterns:
                self.walk(subject, text, expr, q, depth + 1)
        elif isinstance(p, SequencePattern):
            self.sequence(subject, text, expr, p, depth)
        elif isinstance(p, MappingPattern):
            for key, value in zip(p.keys, p.values):
                item_text = f"{text}[{self.name(key)}]"
                for m in _members(subject):
                    t = _mapping_value(m, key)
                    if t is not None:
                        self.walk(t, item_text, None, value, depth + 1)
        elif isinstance(p, ClassPattern):
            self.class_pattern(subject, text, expr, p, depth)

    def sequence(self, subject: Type, text: str, expr: Expression | None,
                 p: SequencePattern, depth: int) -> None:
        items = p.patterns
        star = next((i for i, q in enumerate(items) if isinstance(q, StarredPattern)), None)
        shown: list[Expression] | None = None  # ``match (p, k)``: the display's own items
        if isinstance(expr, (TupleExpr, ListExpr)) and not any(
                isinstance(e, StarExpr) for e in expr.items):
            shown = expr.items
            if (len(shown) != len(items)) if star is None else (len(shown) < len(items) - 1):
                return  # Python tests the length first: no item is compared
        for m in _members(subject):
            if isinstance(m, TupleType):
                if any(isinstance(i, UnpackType) for i in m.items):
                    continue  # a variadic tuple: the positions are not known
                n = len(m.items)
                if (n != len(items)) if star is None else (n < len(items) - 1):
                    continue  # a tuple of another length never matches
                for i, q in enumerate(items):
                    if i == star:
                        continue
                    from_end = star is not None and i > star
                    at = n - (len(items) - i) if from_end else i
                    if shown is not None and len(shown) == n:
                        self.walk(m.items[at], self.name(shown[at]), shown[at], q, depth + 1)
                    else:
                        shown_at = at - n if from_end else at
                        self.walk(m.items[at], f"{text}[{shown_at}]", None, q, depth + 1)
            elif isinstance(m, Instance) and m.type.fullname not in _NOT_SEQUENCES:
                base = _base(m.type, "typing.Sequence")
                if base is None:
                    continue
                mapped = map_instance_to_supertype(m, base)
                if not mapped.args:
                    continue
                for i, q in enumerate(items):
                    if i == star:
                        continue
                    at = i - len(items) if star is not None and i > star else i
                    if shown is not None:
                        self.walk(mapped.args[0], self.name(shown[at]), shown[at], q, depth + 1)
                    else:
                        self.walk(mapped.args[0], f"{text}[{at}]", None, q, depth + 1)

    def class_pattern(self, subject: Type, text: str, expr: Expression | None,
                      p: ClassPattern, depth: int) -> None:
        if not p.positionals and not p.keyword_values:
            return  # a type test compares no value
        info = _class_info(p.class_ref)
        if info is None:
            return
        own = Instance(info, [AnyType(TypeOfAny.special_form)] * len(info.defn.type_vars))
        for m in _members(subject):
            if isinstance(m, TupleType):  # a named tuple: its class
                m = m.partial_fallback
            if isinstance(m, Instance) and m.type.has_base(info.fullname):
                inst = m  # the subject's own (sub)class: its attributes as it types them
            elif isinstance(m, Instance) and info.has_base(m.type.fullname):
                inst = own  # a base of the class (object): the class's attributes
            else:  # never an instance of the class, or Any (gradual)
                continue
            if p.positionals:
                if info.fullname in _SELF_MATCH:
                    if len(p.positionals) == 1:
                        self.walk(inst, text, expr, p.positionals[0], depth + 1)
                else:
                    for attr, q in zip(_match_args(info), p.positionals):
                        self.attribute(inst, attr, text, q, depth)
            for attr, q in zip(p.keyword_keys, p.keyword_values):
                self.attribute(inst, attr, text, q, depth)

    def attribute(self, inst: Instance, attr: str, text: str, q: Pattern, depth: int) -> None:
        t = find_member(attr, inst, inst)
        if t is not None:
            self.walk(t, f"{text}.{attr}", None, q, depth + 1)


def _members(t: Type) -> list[Type]:
    p = get_proper_type(t)
    if isinstance(p, UnionType):
        return [m for item in p.items for m in _members(item)]
    return [p]


def _mapping_value(m: Type, key: Expression) -> Type | None:
    if isinstance(m, TypedDictType):
        if isinstance(key, StrExpr):
            return m.items.get(key.value)
        return None
    if isinstance(m, Instance):
        base = _base(m.type, "typing.Mapping")
        if base is not None:
            mapped = map_instance_to_supertype(m, base)
            if len(mapped.args) == 2:
                return mapped.args[1]
    return None


def _class_info(ref: RefExpr) -> TypeInfo | None:
    node = ref.node
    if isinstance(node, TypeAlias):
        target = get_proper_type(node.target)
        return target.type if isinstance(target, Instance) else None
    return node if isinstance(node, TypeInfo) else None


def _match_args(info: TypeInfo) -> list[str]:
    """The class's ``__match_args__`` as mypy types it (a tuple of literal strings)."""
    sym = info.get("__match_args__")
    node = sym.node if sym is not None else None
    if not isinstance(node, Var) or node.type is None:
        return []
    t = get_proper_type(node.type)
    if not isinstance(t, TupleType):
        return []
    names: list[str] = []
    for item in t.items:
        i = get_proper_type(item)
        if isinstance(i, Instance) and i.last_known_value is not None:
            i = i.last_known_value
        if not isinstance(i, LiteralType) or not isinstance(i.value, str):
            return names
        names.append(i.value)
    return names


def _base(info: TypeInfo, fullname: str) -> TypeInfo | None:
    for b in info.mro:
        if b.fullname == fullname:
            return b
    return None


