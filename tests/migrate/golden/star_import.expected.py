from megatron.core.tensor_parallel.mappings import *
import spmd


def forward(x):
    return spmd.all_reduce(spmd.reinterpret(x, "tp", src=spmd.I, dst=spmd.R), "tp", src=spmd.P, dst=spmd.I)
