"""Values the check-mode tests build: a tensor that accepts in-place ops, a declared one, a type."""

from __future__ import annotations

import torch

import spmd
from spmd_mypy.engine.types import SpmdType


def mk(*shape: int) -> torch.Tensor:
    """A tensor that carries a gradient and accepts in-place ops (a non-leaf)."""
    return torch.randn(*(shape or (4, 4)), requires_grad=True).clone()


def typed(t: torch.Tensor, annotation) -> torch.Tensor:  # noqa: ANN001
    return spmd.declare(t, annotation)


def ty(**axes: object) -> SpmdType:
    return SpmdType.of(axes)  # type: ignore[arg-type]
