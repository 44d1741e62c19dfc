"""An example for the harness test that matches its reference but fails the runtime check
mode: under ``spmd.typecheck()`` its step puts a pending sum through ``exp`` (the check
mode's SpmdTypeError, deliberately not a TypeError).  The run must report that as this
example's typecheck failure, print the table and go on with the next example."""

import torch
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import P, Tensor

DATA_PARALLEL = False
SHARDING: dict[str, dict[str, int]] = {"w": {}}


class Model(torch.nn.Module):
    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w)


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    return {"w": torch.ones(2, dtype=torch.float64)}


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    return {}


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> Model:
    return Model(weights["w"].clone())


def step(model: Model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    pending = spmd.declare(torch.ones(2, dtype=torch.float64), Tensor[P["tp"]])
    pending.exp()  # a non-linear op of a pending sum: an error under spmd.typecheck() only
    loss = model.w.sum()
    loss.backward()
    return loss.detach()


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return w["w"].sum()
