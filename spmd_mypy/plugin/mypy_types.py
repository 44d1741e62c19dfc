"""Translation between mypy's types and the engine's :class:`SpmdType`.

Canonical form.  ``Tensor[R["tp"], V["dp"]]`` with ``mesh_axes = ["dp", "tp"]``
becomes ``spmd._slots.Tensor[V[Literal["dp"]], R[Literal["tp"]]]``: one slot per mesh
axis, in mesh order, ``Any`` where the type says nothing.  So entry order does
not matter, ``assert_type`` sees equal types as equal, and an unknown axis is
compatible with anything (gradual).  ``S[0, "tp"]`` is ``S[Literal[0], Literal["tp"]]``.

The public ``spmd.Tensor`` of the stubs is a generic alias of ``torch.Tensor`` (so pyright and
other checkers see a plain tensor); the type-analyze hook on the alias's name runs before mypy
expands it and returns the canonical class ``spmd._slots.Tensor``, a subclass of torch.Tensor.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Final, Sequence, cast

from mypy.nodes import Expression, TypeInfo
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    NoneType,
    ProperType,
    RawExpressionType,
    TupleType,
    Type,
    TypeOfAny,
    TypeVarType,
    UnboundType,
    UnionType,
    UnpackType,
    get_proper_type,
)

from ..engine.types import UNTYPED, VARYING, Kind, LocalType, SpmdType, decode_by_rank, encode_by_rank
from .rewrite import axis_from_raw

TENSOR: Final = "spmd._slots.Tensor"  # the canonical class (a TypeInfo)
TENSOR_ALIAS: Final = "spmd.Tensor"  # what users write: the alias (and the runtime class)
MARKER_FULLNAMES: Final = {f"spmd.{k}": k for k in ("R", "I", "V", "P", "S", "Shard", "PS")}
MARKER_NAME_TO_FULLNAME: Final = {k: "spmd.S" if k == "Shard" else f"spmd.{k}" for k in MARKER_FULLNAMES.values()}
TORCH_TENSOR_BASES: Final = ("torch._tensor.Tensor", "torch._C.TensorBase")
KINDS: Final = ("R", "I", "V", "P")
# The sets of kinds mypy's joins produce on one axis (``_slots.R_P``: see _slots.pyi), by name
MIXED_KINDS: Final = {"_".join(c): c for n in range(2, len(KINDS) + 1) for c in itertools.combinations(KINDS, n)}
# Every class of spmd._slots a canonical Tensor's slot may hold (V_S: the join of S and V)
SLOT_CLASSES: Final = (*KINDS, "S", "PS", "V_S", *MIXED_KINDS)
MEMBERS_MAX: Final = 16  # a join with more combinations than this stays unknown on its mixed axes
# The trailing slot of a local tensor unknown on some axes after an error (SpmdType.failed):
# ``Literal["spmd-failed:dp,tp"]`` where a local tensor has Any, so the value still fits any
# declared tensor (whose trailing slot is Any) while mypy, and every cache keyed by the
# instance, tells it from an unannotated axis (all Any slots compare equal).
FAILED_PREFIX: Final = "spmd-failed:"
# mypy's Instance as a C static: the hooks ask from_type/members of every argument (see
# rewrite.py: a bare imported name is a dict lookup per use, isinstance walks the MRO)
_Instance: Final = Instance
_UnionType: Final = UnionType
_UNREAD: Final[list[Instance]] = []  # TypeBuilder.members: a join not read yet


class TypeBuilder:
    """Builds and reads canonical Tensor instances for one configuration."""

    def __init__(self, mesh_axes: Sequence[str], lookup: Callable[[str], TypeInfo | None]) -> None:
        self.mesh_axes = tuple(mesh_axes)
        self._lookup = lookup
        self._infos: dict[str, TypeInfo] | None = None
        self._to_cache: dict[SpmdType, Instance] = {}
        # the same, by identity first: the engine hands the same SpmdType objects again and
        # again (its verdict cache, from_type's), and hashing or comparing one by value runs
        # its interpreted __hash__/__eq__ (~9k instructions a lookup).  The type is kept in
        # the entry, so its id is not reused while it is there.
        self._to_cache_by_id: dict[int, tuple[SpmdType, Instance]] = {}
        self._tensor_classes: dict[TypeInfo, bool] = {}  # a subclass of torch.Tensor?
        self._newtype_bases: dict[TypeInfo, Instance] = {}  # a NewType of a typed tensor: its base
        self._by_value: dict[Instance, SpmdType] = {}  # canonical instances read
        self._members: dict[Instance, list[Instance] | None] = {}  # joins read (members)
        # the same, by identity first: the same instances recur (a name's declared type), and
        # the lookup by value hashes and compares an instance deep; the entry keeps its
        # instance, so its id is not reused while it is there
        self._members_by_id: dict[int, tuple[Instance, list[Instance] | None]] = {}
        # the last instance each of from_type / members read and its answer, by identity: a
        # hook hands the same type object to both several times in a row (union_cases, then
        # operands, typed_result), and a dict lookup by value compares an equal but distinct
        # key deep (~0.5-1k instructions).  Reset with the dict it stands in front of.
        self._last_read: Instance | None = None
        self._last_read_type: SpmdType | None = None
        self._last_members: Instance | None = None
        self._last_members_found: list[Instance] | None = None

    # -- TypeInfos ---------------------------------------------------------------------
    def infos(self) -> dict[str, TypeInfo] | None:
        infos = self._infos
        if infos is not None and self._lookup(TENSOR) is infos["Tensor"]:
            return infos
        found = {}
        for name in ("Tensor", *SLOT_CLASSES):
            info = self._lookup(TENSOR if name == "Tensor" else f"spmd._slots.{name}")
            if info is None:
                return None
            found[name] = info
        str_info = self._lookup("builtins.str")
        int_info = self._lookup("builtins.int")
        tuple_info = self._lookup("builtins.tuple")
        if str_info is None or int_info is None or tuple_info is None:
            return None
        found["str"], found["int"], found["tuple"] = str_info, int_info, tuple_info
        self._infos = found
        self._to_cache = {}
        self._to_cache_by_id = {}
        self._members = {}
        self._members_by_id = {}
        self._last_members = None
        self._last_members_found = None
        return found

    def is_tensor_info(self, info: TypeInfo) -> bool:
        return info.fullname == TENSOR

    # -- engine -> mypy ----------------------------------------------------------------
    def to_instance(self, t: SpmdType) -> Instance | None:
        same = self._to_cache_by_id.get(id(t))
        if same is not None and same[0] is t:
            return same[1]
        cached = self._to_cache.get(t)
        if cached is not None:
            self._remember(t, cached)
            return cached
        infos = self.infos()
        if infos is None:
            return None
        str_t = Instance(infos["str"], [])
        int_t = Instance(infos["int"], [])
        slots: list[Type] = []
        for axis in self.mesh_axes:
            lt = t.get(axis)
            if lt is None:
                slots.append(AnyType(TypeOfAny.special_form))
                continue
            lit = LiteralType(axis, str_t)
            if lt.dim is not None:
                slots.append(Instance(infos["S"], [LiteralType(lt.dim, int_t), lit]))
            elif lt.by_rank is not None:  # a rank-dependent layout: its table as a str literal
                slots.append(Instance(infos["S"], [LiteralType(encode_by_rank(lt.by_rank), str_t), lit]))
            else:
                slots.append(Instance(infos[lt.kind.value], [lit]))
        if t.failed and t.spec is None:
            slots.append(LiteralType(FAILED_PREFIX + ",".join(t.failed), str_t))
        else:
            slots.append(self._spec_slot(t.spec, infos, str_t))
        inst = Instance(infos["Tensor"], slots)
        self._to_cache[t] = inst
        self._remember(t, inst)
        return inst

    def _remember(self, t: SpmdType, inst: Instance) -> None:
        if len(self._to_cache_by_id) > 10_000:  # bound the memory of a long-lived daemon
            self._to_cache_by_id.clear()
        self._to_cache_by_id[id(t)] = (t, inst)

    @staticmethod
    def _spec_slot(spec: tuple[tuple[str, ...], ...] | None, infos: dict[str, TypeInfo],
                   str_t: Instance) -> Type:
        """The trailing slot: ``Any`` in local SPMD; ``_slots.PS[tuple[None, Literal["dp"],
        tuple[Literal["dp"], Literal["tp"]]]]`` for ``PS[None, "dp", ("dp", "tp")]``."""
        if spec is None:
            return AnyType(TypeOfAny.special_form)
        obj = Instance(infos["tuple"], [AnyType(TypeOfAny.special_form)])

        def entry(axes: tuple[str, ...]) -> Type:
            if not axes:
                return NoneType()
            if len(axes) == 1:
                return LiteralType(axes[0], str_t)
            return TupleType([LiteralType(a, str_t) for a in axes], obj)

        return Instance(infos["PS"], [TupleType([entry(e) for e in spec], obj)])

    # -- mypy -> engine ----------------------------------------------------------------
    def from_type(self, typ: Type | None) -> SpmdType | None:
        """The SPMD type of a tensor-typed value; UNTYPED for a plain torch.Tensor;
        None when the value is not (known to be) a tensor."""
        if typ is None:
            return None
        p = typ if type(typ) is _Instance else get_proper_type(typ)
        if type(p) is not _Instance:
            if type(p) is TypeVarType:  # ``x: TB``, TB bound to a typed tensor: at least that
                return self.from_type(cast(TypeVarType, p).upper_bound)
            return None
        if p is self._last_read:  # (a canonical tensor: told before reading its class)
            return self._last_read_type
        info = cast(Instance, p).type
        if info.fullname == TENSOR:
            # keyed by value: ~10 distinct canonical types stand behind thousands of objects
            # (mypy copies types); Instance caches its hash, and the same object compares
            # by identity first.  No entry per object: a hook allocates as little as it can
            # (each allocation brings mypy's next garbage collection closer)
            known = self._by_value.get(p)
            if known is None:
                known = self.read_slots(p.args)
                if len(self._by_value) > 10_000:  # bound the memory of a long-lived daemon
                    self._by_value.clear()
                self._by_value[p] = known
            self._last_read = cast(Instance, p)
            self._last_read_type = known
            return known
        tensor_class = self._tensor_classes.get(info)
        if tensor_class is None:
            tensor_class = info.fullname in TORCH_TENSOR_BASES or any(
                info.has_base(b) for b in TORCH_TENSOR_BASES)
            if len(self._tensor_classes) > 10_000:
                self._tensor_classes.clear()
                self._newtype_bases.clear()
            self._tensor_classes[info] = tensor_class
            if tensor_class and info.is_newtype and info.bases:
                # ``Grad = NewType("Grad", Tensor[P["tp"]])``: a Grad is its base's type
                self._newtype_bases[info] = info.bases[0]
        if not tensor_class:
            return None
        base = self._newtype_bases.get(info) if info.is_newtype else None
        return self.from_type(base) if base is not None else UNTYPED

    def members(self, typ: Type | None) -> list[Instance] | None:
        """The canonical tensors a join stands for; None for anything but a join.

        mypy types a display of differently typed tensors by the join of the items::

            [p, r]  ->  list[Tensor[R_P["tp"]]]   (p: Tensor[P["tp"]], r: Tensor[R["tp"]])

        whose item is "R or P on tp": here ``[Tensor[R["tp"]], Tensor[P["tp"]]]``, one per
        combination of the kinds of its mixed axes (None beyond MEMBERS_MAX: those axes stay
        unknown, as any unread slot)."""
        if typ is None:
            return None
        p = typ if type(typ) is _Instance else get_proper_type(typ)
        if p is self._last_members:  # (a canonical tensor: told before reading its class)
            return self._last_members_found
        if type(p) is not _Instance or cast(Instance, p).type.fullname != TENSOR:
            return None
        same = self._members_by_id.get(id(p))
        if same is not None and same[0] is p:
            self._last_members = same[0]
            self._last_members_found = same[1]
            return same[1]
        known = self._members.get(p, _UNREAD)  # one lookup (an Instance key hashes and compares deep)
        found = self._expand(p) if known is _UNREAD else known
        if known is _UNREAD:
            if len(self._members) > 10_000:  # bound the memory of a long-lived daemon
                self._members.clear()
            self._members[p] = found
        if len(self._members_by_id) > 10_000:
            self._members_by_id.clear()
        self._members_by_id[id(p)] = (cast(Instance, p), found)
        self._last_members = cast(Instance, p)
        self._last_members_found = found
        return found

    def has_alternatives(self, t: Type) -> bool:
        """A union, or a join of typed tensors: what :meth:`alternatives` expands (asked of
        every argument of every hooked call: a plain instance is told apart without a call
        into mypy)."""
        p = t if type(t) is _Instance else get_proper_type(t)
        return type(p) is _UnionType or self.members(p) is not None

    def alternatives(self, t: Type | None) -> list[Type] | None:
        """What a value of type ``t`` may be when it is one of several: the members of a
        union (a join among them expanded into its own members), or those of a join; None
        for anything else."""
        if t is None:
            return None
        p = get_proper_type(t)
        if isinstance(p, UnionType) and len(p.items) > 1:
            out: list[Type] = []
            for item in p.items:
                out.extend(self.members(item) or [item])
            return out
        members = self.members(p)
        return list(members) if members is not None else None

    def _expand(self, p: Instance) -> list[Instance] | None:
        flat = _flat_args(p.args)
        if flat is None:
            return None
        choices: list[list[Type]] = []
        mixed = False
        for slot in flat:
            s = get_proper_type(slot)
            kinds = MIXED_KINDS.get(s.type.name) if isinstance(s, Instance) else None
            if not isinstance(s, Instance) or kinds is None or not s.type.fullname.startswith("spmd._slots."):
                choices.append([slot])
                continue
            infos = self.infos()
            if infos is None:
                return None
            mixed = True
            choices.append([Instance(infos[k], s.args) for k in kinds])
        if not mixed:
            return None
        combos: list[list[Type]] = [[]]
        for options in choices:
            combos = [c + [o] for c in combos for o in options]
            if len(combos) > MEMBERS_MAX:
                return None
        return [Instance(p.type, c) for c in combos]

    def is_spec_join(self, typ: Type | None) -> bool:
        """The join mypy gives a list of global tensors with different partition specs
        (``[a, b]``, a: ``PS["dp", None]``, b: ``PS["dp", "tp"]``): a canonical tensor whose
        trailing slot is ``object``, read as plain (no layout can be read from it)."""
        p = get_proper_type(typ) if typ is not None else None
        if not isinstance(p, Instance) or p.type.fullname != TENSOR:
            return False
        flat = _flat_args(p.args)
        return flat is not None and self._joins_specs(flat)

    def _joins_specs(self, flat: list[Type]) -> bool:
        if len(flat) != len(self.mesh_axes) + 1:
            return False
        last = get_proper_type(flat[-1])
        return isinstance(last, Instance) and last.type.fullname == "builtins.object"

    def read_slots(self, args: Sequence[Type]) -> SpmdType:
        """The SPMD type of a canonical instance's arguments (also: printed ones read back,
        :mod:`.messages`)."""
        flat = _flat_args(args)
        if flat is None:
            return UNTYPED
        if self._joins_specs(flat):
            # the join of two global tensors with different partition specs: no layout
            # can be read (not a local tensor either), so the value is plain
            return UNTYPED
        out: dict[str, LocalType] = {}
        spec: tuple[tuple[str, ...], ...] | None = None
        failed: list[str] = []
        for slot in flat:
            s = get_proper_type(slot)
            if not isinstance(s, Instance) or not s.args:
                if (isinstance(s, LiteralType) and isinstance(s.value, str)
                        and s.value.startswith(FAILED_PREFIX)):
                    failed = [a for a in s.value[len(FAILED_PREFIX):].split(",") if a]
                continue
            name = s.type.name
            if name == "PS" and len(s.args) == 1:
                spec = _read_spec(s.args[0])
                continue
            values: list[object] = []
            for position, x in enumerate(s.args):
                px = get_proper_type(x)
                if not isinstance(px, LiteralType):
                    if name == "S" and len(s.args) == 2 and position == 0:
                        values.append(None)  # S[int, "tp"]: the join of S[0] and S[1], a V
                        continue
                    break
                values.append(px.value)
            else:
                if name == "S" and len(values) == 2:
                    dim, axis = values[0], values[1]
                    if isinstance(dim, int) and isinstance(axis, str):
                        out[axis] = LocalType(Kind.V, dim)
                    elif isinstance(dim, str) and isinstance(axis, str):  # a rank table
                        out[axis] = decode_by_rank(dim) or VARYING
                    elif dim is None and isinstance(axis, str):
                        out[axis] = VARYING
                elif name in KINDS or name == "V_S":  # V_S: the join of S and V
                    axis = values[0]
                    if isinstance(axis, str):
                        out[axis] = LocalType(Kind(name[0]))
        return SpmdType.of(out, spec, failed)


def lookup_type(api: Any, e: Expression) -> Type | None:
    """The type mypy gave expression ``e`` in the function being checked (a hook's
    ``ctx.api``); None where it has none (not checked yet, or not a checker)."""
    try:
        return api.lookup_type(e)
    except (KeyError, AttributeError):
        return None


def _flat_args(args: Sequence[Type]) -> list[Type] | None:
    """A canonical instance's slots (mypy may hand them packed in an unpacked tuple)."""
    flat: list[Type] = []
    for a in args:
        if isinstance(a, UnpackType):
            inner = get_proper_type(a.type)
            if isinstance(inner, TupleType):
                flat.extend(inner.items)
                continue
            return None
        flat.append(a)
    return flat


def _read_spec(t: Type) -> tuple[tuple[str, ...], ...] | None:
    """The partition spec from the trailing slot's tuple (see TypeBuilder._spec_slot)."""
    p = get_proper_type(t)
    if not isinstance(p, TupleType):
        return None
    spec: list[tuple[str, ...]] = []
    for item in p.items:
        e = get_proper_type(item)
        if isinstance(e, NoneType):
            spec.append(())
        elif isinstance(e, LiteralType) and isinstance(e.value, str):
            spec.append((e.value,))
        elif isinstance(e, TupleType):
            names: list[str] = []
            for i in e.items:
                n = get_proper_type(i)
                if not (isinstance(n, LiteralType) and isinstance(n.value, str)):
                    return None
                names.append(n.value)
            spec.append(tuple(names))
        else:
            return None
    return tuple(spec)


# -- reading annotations (unanalyzed types) -------------------------------------------


class AnnotationError(Exception):
    pass


def read_axis(t: Type) -> str:
    """``"tp"`` in any of the forms mypy hands us: a raw literal (rewritten), a forward
    reference, ``Literal["tp"]``."""
    if isinstance(t, RawExpressionType):
        v = axis_from_raw(t.literal_value)
        if t.base_type_name == "builtins.bytes":
            raise AnnotationError(f"a mesh axis is a string literal such as \"tp\", not the bytes b{v!r}")
        if isinstance(v, str):
            return v
        raise AnnotationError(f"a mesh axis is a string literal such as \"tp\", not {t.literal_value!r}")
    if isinstance(t, UnboundType):
        if t.original_str_expr is not None and not t.args:
            return t.original_str_expr
        if t.name.rsplit(".", 1)[-1] == "Literal" and len(t.args) == 1:
            return read_axis(t.args[0])
        bound = " (an annotation takes the literal itself, not a name bound to it)" if not t.args and t.name not in ("None", "True", "False") else ""
        raise AnnotationError(f"a mesh axis is a string literal such as \"tp\", not {t.name}{bound}")
    if isinstance(t, LiteralType) and isinstance(t.value, str):
        return t.value
    raise AnnotationError("a mesh axis is a string literal such as \"tp\"")


_DIM_FIRST: Final = 'S[dim, "axis"] takes an int dim first, e.g. S[0, "tp"]'


def read_int(t: Type) -> int:
    if isinstance(t, RawExpressionType) and isinstance(t.literal_value, int) and not isinstance(t.literal_value, bool):
        return t.literal_value
    if isinstance(t, UnboundType) and t.name.rsplit(".", 1)[-1] == "Literal" and len(t.args) == 1:
        return read_int(t.args[0])
    raise AnnotationError(_DIM_FIRST)


def _swapped_shard(args: Sequence[Type]) -> str | None:
    """``S["tp", 0]``: the message with the user's own dim and axis in order, else None."""
    if len(args) != 2:
        return None
    try:
        axis, dim = read_axis(args[0]), read_int(args[1])
    except AnnotationError:
        return None
    return f'S[dim, "axis"] takes an int dim first, e.g. S[{dim}, "{axis}"]'


def read_spec_item(t: Type) -> tuple[str, ...]:
    if isinstance(t, UnboundType) and t.name in ("None", "builtins.None") and not t.args:
        return ()
    p = t
    items = getattr(p, "items", None)
    if items is not None and not isinstance(p, (RawExpressionType,)):  # TypeList / tuple
        return tuple(read_axis(i) for i in items)
    if isinstance(p, UnboundType) and p.name in ("tuple", "builtins.tuple", "Tuple", "typing.Tuple"):
        return tuple(read_axis(i) for i in p.args)
    cls = type(p).__name__
    if cls == "NoneType":
        return ()
    return (read_axis(p),)


# An entry as plain data, (marker, axes, dim, spec): the fields of an engine ``Entry``.  The
# annotation hook keys its cache by these (a tuple of strings hashes and compares in C; the
# engine's dataclass is built only on a miss, ~7k instructions each in an interpreted __init__)
EntryFields = tuple[str, tuple[str, ...], "int | None", "tuple[tuple[str, ...], ...] | None"]


def read_entry_fields(marker: str, t: UnboundType) -> EntryFields:
    """One ``R["tp", "dp"]`` / ``S[0, "tp"]`` / ``PS[None, "tp"]`` entry, as the fields of
    an engine ``Entry``."""
    args = t.args
    if marker == "PS":
        return ("PS", (), None, tuple([read_spec_item(a) for a in args]))
    if not args:
        example = 'S[0, "tp"]' if marker in ("S", "Shard") else f'{marker}["tp"]'
        raise AnnotationError(f"{marker} needs the mesh axes it applies to: write {example}")
    if marker == "S" or marker == "Shard":
        if len(args) < 2:
            raise AnnotationError("S[dim, \"axis\"] takes a dim and at least one axis: S[0, \"tp\"]")
        try:
            dim = read_int(args[0])
        except AnnotationError:
            raise AnnotationError(_swapped_shard(args) or _DIM_FIRST) from None
        return ("S", tuple([read_axis(a) for a in args[1:]]), dim, None)
    return (marker, tuple([read_axis(a) for a in args]), None, None)


def is_proper_tensor(p: ProperType) -> bool:
    return isinstance(p, Instance) and (
        p.type.fullname == TENSOR or any(p.type.has_base(b) for b in TORCH_TENSOR_BASES)
    )


def show_unanalyzed(t: Type) -> str:
    """An unanalysed type as the user wrote it: ``R["tp"] | V["dp"]``."""
    if isinstance(t, UnboundType):
        name = t.name.rsplit(".", 1)[-1]
        if t.original_str_expr is not None and not t.args:
            return f'"{t.original_str_expr}"'
        return name + ("[" + ", ".join(show_unanalyzed(a) for a in t.args) + "]" if t.args else "")
    if isinstance(t, RawExpressionType):
        v = axis_from_raw(t.literal_value)
        return f'"{v}"' if isinstance(v, str) else repr(v)
    items = getattr(t, "items", None)
    if type(t).__name__ == "UnionType" and items is not None:
        return " | ".join(show_unanalyzed(i) for i in items)
    return str(t)
