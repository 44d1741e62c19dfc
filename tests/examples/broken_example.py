"""A deliberately broken example for the harness test: rank 1 raises before a collective
that its tp peer (rank 0) is waiting in.  The run must fail with rank 1's traceback, not hang."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

DATA_PARALLEL = False
SHARDING: dict[str, dict[str, int]] = {"w": {}}


class Model(torch.nn.Module):
    def __init__(self, w: torch.Tensor, mesh: DeviceMesh) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w)
        self.mesh = mesh


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    return {"w": torch.ones(2, dtype=torch.float64)}


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    return {}


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> Model:
    return Model(weights["w"].clone(), mesh)


def step(model: Model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    if dist.get_rank() == 1:
        raise RuntimeError("deliberate failure on rank 1")
    t = torch.ones(1)
    dist.all_reduce(t, group=model.mesh.get_group("tp"))  # rank 0 waits here for rank 1
    loss = model.w.sum()
    loss.backward()
    return loss.detach()


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return w["w"].sum()
