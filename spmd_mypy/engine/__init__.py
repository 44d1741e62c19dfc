"""The rule engine: the SPMD type algebra, pure Python (no mypy, no torch).

- :mod:`.types`        per-axis local types, whole-tensor types, duality, printing
- :mod:`.annotations`  entries of an annotation -> a type, with validation
- :mod:`.ops`          the classification of torch ops and the local SPMD rule
- :mod:`.views`        where a view or join (transpose, indexing, cat, ...) puts a shard dim
- :mod:`.contractions` where einsum, matmul, linear and attention put a shard dim
- :mod:`.einops_rule`  einops' rearrange / repeat / reduce / einsum, read from the pattern
- :mod:`.collectives`  the collective/conversion table with each backward
- :mod:`.duality`      forward/backward duality: autograd Functions, gradients, hooks

The mypy plugin (:mod:`spmd_mypy.plugin`) and the runtime checker
(``spmd.checking``) are adapters over this package: a rule lives here once.
"""

from .errors import CODES, SpmdError, SpmdTypeError
from .types import (
    INVARIANT,
    PARTIAL,
    REPLICATE,
    UNTYPED,
    VARYING,
    Kind,
    LocalType,
    SpmdType,
    dual,
    format_type,
    grad_type,
    shard,
)

__all__ = [
    "CODES", "SpmdError", "SpmdTypeError", "INVARIANT", "PARTIAL", "REPLICATE", "UNTYPED",
    "VARYING", "Kind", "LocalType", "SpmdType", "dual", "format_type", "grad_type", "shard",
]
