"""spmd: the runtime of spmd-mypy.

Annotated code runs unchanged: the types are erased (``Tensor[...]`` evaluates
once to ``Annotated[torch.Tensor, ...]``); the collectives and conversions are
differentiable ops on torch.distributed whose backward is the table's.
"""

from ._types import I, P, PS, R, S, Shard, Tensor, V, grad_type

__all__ = ["Tensor", "R", "I", "V", "P", "S", "Shard", "PS", "grad_type"]
