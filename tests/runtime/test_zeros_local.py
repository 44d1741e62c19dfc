"""The check mode's factory zeros (``torch.zeros_like(p)``: read as no term by the op that
writes them) stop being zeros when torch.distributed writes them: a broadcast or a recv into a
zeros buffer moves no version counter.  One process, torch's fake backend."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import spmd
from spmd import R, Tensor
from spmd_mypy.engine.errors import SpmdTypeError


@pytest.mark.parametrize("write", ["broadcast", "all_reduce", "recv", "scatter"])
def test_a_zeros_buffer_written_by_torch_distributed_is_untyped(write: str) -> None:
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group(backend="fake", rank=0, world_size=2, store=FakeStore())
    try:
        r = torch.randn(4)
        with spmd.typecheck(strict=True):
            spmd.declare(r, Tensor[R["dp"]])
            z = torch.zeros(4)
            v = z._version
            if write == "broadcast":
                dist.broadcast(z, src=0)
            elif write == "all_reduce":
                dist.all_reduce(z)
            elif write == "recv":
                dist.irecv(z, src=1)
            else:
                dist.scatter(z, [torch.ones(4), torch.ones(4)], src=0)
            assert z._version == v or write == "scatter"  # (no version moved: why it matters)
            with pytest.raises(SpmdTypeError, match="spmd-untyped"):
                z.add_(r)
            fresh = torch.zeros(4)
            fresh.add_(r)  # no torch.distributed call: a zero
    finally:
        dist.destroy_process_group()
