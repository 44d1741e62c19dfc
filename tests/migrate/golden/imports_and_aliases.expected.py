"""Every way the mapping functions are reached: aliases, modules, full paths."""
import megatron.core.tensor_parallel
import megatron.core.tensor_parallel as tp
from megatron.core import tensor_parallel
from megatron.core.tensor_parallel import mappings
from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region as reduce_from
from megatron.core.tensor_parallel.mappings import copy_to_tensor_model_parallel_region as copy_to
import spmd
from spmd import I, P, R, S


def aliases(x):
    return spmd.reinterpret(spmd.all_reduce(x, "tp", src=P, dst=I), "tp", src=I, dst=R)


def modules(x):
    a = spmd.reinterpret(x, "tp", src=I, dst=R)
    b = spmd.all_gather(a, "tp", src=S(-1), dst=I)
    c = spmd.convert(b, "tp", src=I, dst=S(0))
    d = spmd.reduce_scatter(c, "tp", src=P, dst=S(0))
    return spmd.all_reduce(d, "tp", src=P, dst=I)


def unrelated(x):
    # Not a mapping call: the names are not Megatron's mapping functions.
    return tensor_parallel.get_cuda_rng_tracker(), tp.VocabParallelEmbedding
