"""The annotation markers at runtime: ``Tensor[R["tp"], V["dp"]]``, ``dst=R``, ``S(0)``.

Types are erasable: ``Tensor[...]`` evaluates once, at definition, to
``typing.Annotated[torch.Tensor, <SpmdType>]`` so that code runs unchanged and
the runtime check mode can still read the type.  ``R``/``I``/``V``/``P`` are
values (``dst=R``) that are subscriptable (``R["tp"]``); ``S(0)`` is a shard
value and ``S[0, "tp"]`` the annotation entry; ``PS[None, "tp"]`` a partition spec.
"""

from __future__ import annotations

import typing
from typing import Any

import torch

from spmd_mypy.engine.annotations import Entry, build
from spmd_mypy.engine.types import Kind, LocalType, SpmdType, format_type


class _Marker:
    """``R``, ``I``, ``V``, ``P``: a local type usable as a value and subscriptable."""

    __slots__ = ("kind",)

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def __getitem__(self, axes: Any) -> Entry:
        axes = axes if isinstance(axes, tuple) else (axes,)
        return Entry(self.kind.value, tuple(_axis_name(a) for a in axes))

    @property
    def local_type(self) -> LocalType:
        return LocalType(self.kind)

    def __repr__(self) -> str:
        return self.kind.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Marker) and other.kind is self.kind

    # One instance per kind (R, I, V, P below; copies and pickles are those instances), so
    # equal is identical and the identity hash is consistent with ==; a C-level hash
    # (the collectives key their plan cache on these, once per call).
    __hash__ = object.__hash__

    def __reduce__(self) -> str:
        return self.kind.value

    def __copy__(self) -> "_Marker":
        return self

    def __deepcopy__(self, memo: Any) -> "_Marker":
        return self


R = _Marker(Kind.R)
I = _Marker(Kind.I)  # noqa: E741
V = _Marker(Kind.V)
P = _Marker(Kind.P)


class _ShardMeta(type):
    def __getitem__(cls, item: Any) -> Entry:
        if not isinstance(item, tuple) or len(item) < 2 or not isinstance(item[0], int):
            raise TypeError('write S[dim, "axis", ...], e.g. S[0, "tp"]')
        return Entry("S", tuple(_axis_name(a) for a in item[1:]), dim=item[0])


_SHARDS: dict[int, "S"] = {}


class S(metaclass=_ShardMeta):
    """``S(i)``: Shard on tensor dim ``i`` (Varying, the locals concatenate on ``i``)."""

    __slots__ = ("dim",)
    dim: int

    def __new__(cls, dim: int) -> "S":
        # One instance per dim (S(0) is S(0), S(True) is S(1)): the collectives' plan
        # cache hashes and finds its key by identity, without a Python __hash__/__eq__
        # call (S(0) is written at every call).
        if type(dim) is int:
            s = _SHARDS.get(dim)
            if s is not None:
                return s
        elif not isinstance(dim, int):
            raise TypeError(f"S(dim) takes an int dim, not {dim!r}")
        d = int(dim)
        s = _SHARDS.get(d)
        if s is None:
            s = _SHARDS[d] = object.__new__(cls)
            s.dim = d
        return s

    def __reduce__(self) -> tuple:
        return (S, (self.dim,))

    def __getitem__(self, item: Any) -> Entry:
        axes = item if isinstance(item, tuple) else (item,)
        written = ", ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in axes)
        raise TypeError(f"S({self.dim})[{written}] is not an entry: write S[{self.dim}, {written}] "
                        f"(S({self.dim}) is the value for src=/dst=, S[dim, axis] the annotation "
                        f"entry)")

    @property
    def local_type(self) -> LocalType:
        return LocalType(Kind.V, self.dim)

    def __repr__(self) -> str:
        return f"S({self.dim})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S) and other.dim == self.dim

    __hash__ = object.__hash__  # consistent with ==: one instance per dim (__new__)

    def __copy__(self) -> "S":
        return self

    def __deepcopy__(self, memo: Any) -> "S":
        return self


Shard = S


class _PSMeta(type):
    def __getitem__(cls, item: Any) -> Entry:
        items = item if isinstance(item, tuple) else (item,)
        spec = []
        for it in items:
            if it is None:
                spec.append(())
            elif isinstance(it, tuple):
                spec.append(tuple(_axis_name(a) for a in it))
            else:
                spec.append((_axis_name(it),))
        return Entry("PS", spec=tuple(spec))


class PS(metaclass=_PSMeta):
    """A partition spec: one entry per tensor dim, the mesh axes sharding it outermost first."""


def _axis_name(a: Any) -> str:
    # R[Literal["tp"]] evaluates to a Literal form; accept it as the string.
    args = typing.get_args(a)
    if args and typing.get_origin(a) is typing.Literal:
        a = args[0]
    if not isinstance(a, str):
        raise TypeError(f"a mesh axis is a string, not {a!r}")
    return a


def local_type_of(value: Any) -> LocalType:
    """``R`` / ``I`` / ``V`` / ``P`` / ``S(i)`` -> the engine's LocalType."""
    lt = getattr(value, "local_type", None)
    if not isinstance(lt, LocalType):
        raise TypeError(f"expected one of R, I, V, P, S(i), not {value!r}")
    return lt


class Tensor(torch.Tensor):
    """``Tensor[R["tp"], V["dp"]]``: a torch.Tensor with an SPMD type (erased at runtime)."""

    def __class_getitem__(cls, entries: Any) -> Any:  # type: ignore[override]
        return typing.Annotated[torch.Tensor, spmd_type_of_entries(entries)]


def spmd_type_of_entries(entries: Any) -> SpmdType:
    entries = entries if isinstance(entries, tuple) else (entries,)
    for e in entries:
        if not isinstance(e, Entry):
            raise TypeError(f'Tensor[...] takes entries like R["tp"], not {e!r}')
    t, errors = build(entries, None)
    if errors:
        raise TypeError("; ".join(err.message for err in errors))
    return t


def _is_type_alias(value: Any) -> bool:
    # typing.TypeAliasType (a ``type X = ...`` statement, 3.12+) or typing_extensions' own
    return type(value).__name__ == "TypeAliasType" and hasattr(value, "__value__")


def unalias(annotation: Any) -> Any:
    """What a ``type`` alias stands for (``type ColOut = Tensor[V["tp"]]``, a
    ``TypeAliasType``), followed through chains; a subscripted generic alias with its
    arguments substituted (``type Pair[T] = tuple[T, T]``: ``Pair[X]`` is ``tuple[X, X]``).
    Anything else as it is.  (``get_type_hints`` leaves such aliases unevaluated: the value
    lives in ``__value__``, evaluated when first read.)"""
    for _ in range(64):  # a chain of aliases (a cycle ends here, unresolved)
        origin = typing.get_origin(annotation)
        alias = origin if origin is not None and _is_type_alias(origin) else annotation
        if not _is_type_alias(alias):
            return annotation
        try:
            value = alias.__value__
        except Exception:  # noqa: BLE001 - a name in the alias that does not evaluate
            return annotation
        if alias is not annotation:  # Pair[X]: the alias's parameters -> the arguments
            value = _substitute(value, tuple(getattr(alias, "__type_params__", ())),
                                typing.get_args(annotation))
        annotation = value
    return annotation


def _substitute(value: Any, params: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
    if len(params) != len(args):
        return value
    if any(p is value for p in params):
        return args[params.index(value)]
    used = getattr(value, "__parameters__", ())
    if not used or not all(p in params for p in used):
        return value
    try:
        return value[tuple(args[params.index(p)] for p in used)]
    except Exception:  # noqa: BLE001 - a form that does not substitute: left unread
        return value


def spmd_type_of_annotation(annotation: Any) -> SpmdType | None:
    """The SpmdType carried by ``Tensor[...]`` (or a ``type`` alias of one), or None for
    anything else."""
    for meta in getattr(unalias(annotation), "__metadata__", ()):
        if isinstance(meta, SpmdType):
            return meta
    return None


def _dual_annotation(annotation: Any) -> Any:
    t = spmd_type_of_annotation(annotation)
    if t is None:
        return annotation
    return typing.Annotated[torch.Tensor, t.dual()]


class grad_type:
    """The gradient's type, the dual on every axis: ``spmd.grad_type[Tensor[R["tp"]]]`` is
    ``Tensor[P["tp"]]`` (the subscript form works in annotations; ``grad_type(T)`` as a value)."""

    def __new__(cls, annotation: Any) -> Any:  # type: ignore[misc]
        return _dual_annotation(annotation)

    def __class_getitem__(cls, annotation: Any) -> Any:
        return _dual_annotation(annotation)


__all__ = ["R", "I", "V", "P", "S", "Shard", "PS", "Tensor", "grad_type", "local_type_of",
           "format_type", "spmd_type_of_annotation", "unalias"]
