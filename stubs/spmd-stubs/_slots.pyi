# The canonical per-axis slot types the plugin builds for Tensor[...]: one slot per
# mesh axis, in mesh order: R[Literal["tp"]], S[Literal[0], Literal["tp"]], or Any.
# Static only: nothing imports this at runtime.
from typing import Generic, TypeVar
from typing_extensions import TypeVarTuple, Unpack

import torch

_A = TypeVar("_A")
_D = TypeVar("_D")
_Ts = TypeVarTuple("_Ts")

class Tensor(torch.Tensor, Generic[Unpack[_Ts]]):
    """The canonical SPMD tensor type the plugin builds for `spmd.Tensor[...]`."""

class R(Generic[_A]): ...
class I(Generic[_A]): ...
class V(Generic[_A]): ...
class P(Generic[_A]): ...
class S(Generic[_D, _A]): ...

# The partition spec of a global SPMD type, the trailing slot of a canonical Tensor
# (Any in local SPMD): PS[tuple[None, Literal["dp"], tuple[Literal["dp"], Literal["tp"]]]].
class PS(Generic[_A]): ...
