# Stubs mypy reads for the runtime package `spmd` (PEP 561).  With the plugin
# (`plugins = spmd_mypy.plugin`) `Tensor[...]` is a precise SPMD type; without it
# (pyright, other checkers) `Tensor[...]` is `torch.Tensor` with no false errors.
from typing import Any, Callable, Final, Generic, Literal, Sequence, TypeVar, overload
from typing_extensions import TypeAliasType, TypeVarTuple, Unpack

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from spmd import _slots as _slots

_Ts = TypeVarTuple("_Ts")
_T = TypeVar("_T", bound=torch.Tensor)
_F = TypeVar("_F", bound=Callable[..., Any])
_G = TypeVar("_G")

MYPY = False

# For every checker `Tensor[...]` is `torch.Tensor`; the plugin replaces it with the
# canonical type (spmd._slots.Tensor) before mypy expands the alias.
Tensor = TypeAliasType("Tensor", torch.Tensor, type_params=(_Ts,))

# Per-axis local types.  As values they are src/dst arguments (dst=R); as types
# they are entries of Tensor[...] that the plugin reads.  They are deliberately
# not generic (an alias `Act = Tensor[V["tp"]]` would otherwise be analysed as a
# type application of V to "tp"); the canonical types use the generic twins in
# spmd._slots.
class R:
    def __class_getitem__(cls, axes: Any) -> Any: ...
class I:
    def __class_getitem__(cls, axes: Any) -> Any: ...
class V:
    def __class_getitem__(cls, axes: Any) -> Any: ...
class P:
    def __class_getitem__(cls, axes: Any) -> Any: ...

class S:
    """S(i): Shard on tensor dim i (Varying; the locals concatenate on i)."""
    def __init__(self, dim: int) -> None: ...
    def __class_getitem__(cls, item: Any) -> Any: ...

Shard = S

class _PSMeta(type):
    # PS[...] as a value (spmd.redistribute(x, src=PS["dp", None], dst=...)); the plugin
    # reads the literal spec from the expression.
    def __getitem__(cls, item: Any) -> Any: ...

class PS(metaclass=_PSMeta):
    """A partition spec entry: PS[None, "tp"]."""
    def __class_getitem__(cls, item: Any) -> Any: ...

_LocalType = type[R] | type[I] | type[V] | type[P] | S
# The collectives take and return torch.Tensor: the plugin gives the result its type.
# (A TypeVar here would be solved from the expected return type in `return all_reduce(...)`
# and then reject a correctly typed argument.)
_Axis = str | tuple[str, ...] | dist.ProcessGroup
_AxisNames = str | tuple[str, ...] | None

def all_reduce(x: torch.Tensor, axis: _Axis, *, src: _LocalType = ..., dst: _LocalType, op: Literal["sum", "avg", "max", "min"] = "sum") -> torch.Tensor: ...
def all_gather(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType, sizes: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor: ...
def reduce_scatter(x: torch.Tensor, axis: _Axis, *, src: _LocalType = ..., dst: _LocalType, sizes: Sequence[int] | torch.Tensor | None = None, op: Literal["sum", "avg"] = "sum") -> torch.Tensor: ...
def all_to_all(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType,
               sizes: Sequence[int] | torch.Tensor | None = None, out_sizes: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor: ...
def reinterpret(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType, expert_mode: bool = False) -> torch.Tensor: ...
def convert(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType, expert_mode: bool = False, sizes: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor: ...
def redistribute(x: torch.Tensor, axis: _Axis = ..., *, src: Any, dst: Any, sizes: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
    """With ``axis``: one mesh axis, src/dst local types (``S(0)``, ``R``...).  Without it: the
    partition-spec form, src/dst a bare ``PS[...]`` (an axis leaving the spec becomes R, the
    other axes keep x's type) or a global type ``Tensor[PS[...], P["tp"]]`` (to change R/I/P
    axes too); the result has the dst type, the collectives are planned (and flattened over
    several axes where possible).  A rank-1 spec over two axes is ``PS[("dp", "tp"),]``."""

def einsum(equation: str, *operands: torch.Tensor, out_partial_axes: _AxisNames = None) -> torch.Tensor: ...
def matmul(a: torch.Tensor, b: torch.Tensor, *, out_partial_axes: _AxisNames = None) -> torch.Tensor: ...
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, out_partial_axes: _AxisNames = None) -> torch.Tensor: ...
def sum(x: torch.Tensor, dim: int | Sequence[int] | None = None, *, keepdim: bool = False, out_partial_axes: _AxisNames = None) -> torch.Tensor: ...

def reveal(x: _G) -> _G: ...  # any value: None or "not a tensor" for the rest
def declare(x: torch.Tensor, t: Any) -> torch.Tensor: ...
_Module = TypeVar("_Module")
def declare_parameters(module: _Module) -> _Module: ...
def check_replicas(module: torch.nn.Module, *, prefix: str = "model",
                   untyped_replicated_on: Sequence[str] = ()) -> list[str]: ...
def typeof(x: torch.Tensor) -> Any: ...
def checked(fn: _F) -> _F: ...
class grad_type(Generic[_G]):
    """The gradient's type (the dual on every axis): `grad_type[Tensor[R["tp"]]]` in
    annotations is `Tensor[P["tp"]]`; `grad_type(T)` as a value (the plugin types both)."""
    def __new__(cls, t: Any) -> Any: ...

class typecheck:
    def __init__(self, *, strict: bool = False) -> None: ...
    def __enter__(self) -> typecheck: ...
    def __exit__(self, *exc: object) -> None: ...

_Mesh = TypeVar("_Mesh", bound=DeviceMesh | None)

class set_mesh(Generic[_Mesh]):
    """Make ``mesh`` (a DeviceMesh with dim names) the current mesh at once; ``None`` unsets it.
    As a context manager the previous mesh comes back on exit."""
    def __init__(self, mesh: _Mesh) -> None: ...
    def __enter__(self) -> _Mesh: ...
    def __exit__(self, *exc: object) -> None: ...

def get_mesh() -> DeviceMesh | None:
    """The current DeviceMesh, or None."""

def local_map(*, in_types: Any, out_types: Any, axes: tuple[str, ...] | None = None) -> Callable[[_F], _F]:
    """Local SPMD on ``axes`` (default: all) inside the decorated function.  ``in_types``: one
    global type per positional parameter (None for a non-tensor); ``out_types``: a global type,
    or a tuple of them for a tuple result.  The plugin checks the body's own annotations against
    their local view and gives the function the global signature."""
