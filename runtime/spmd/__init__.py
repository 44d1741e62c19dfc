"""spmd: the runtime of spmd-mypy.

Annotated code runs unchanged: the types are erased (``Tensor[...]`` evaluates
once to ``Annotated[torch.Tensor, ...]``); the collectives and conversions are
differentiable ops on torch.distributed whose backward is the table's.
"""

from ._types import I, P, PS, R, S, Shard, Tensor, V, grad_type

# collectives, conversions, mesh, einsum family
from ._collectives import (
    SpmdCollectiveError,
    all_gather,
    all_reduce,
    all_to_all,
    convert,
    redistribute,
    reduce_scatter,
    reinterpret,
)
from ._einsum import einsum, linear, matmul, sum
from ._mesh import get_mesh, set_mesh
from ._global import local_map

# the runtime check mode
from ._checking import checked, declare, declare_parameters, reveal, typecheck, typeof
from ._replicas import check_replicas

__all__ = ["Tensor", "R", "I", "V", "P", "S", "Shard", "PS", "grad_type",
           "set_mesh", "get_mesh", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "reinterpret", "convert", "redistribute", "SpmdCollectiveError",
           "einsum", "matmul", "linear", "sum", "local_map",
           "typecheck", "declare", "declare_parameters", "reveal", "typeof", "checked",
           "check_replicas"]
