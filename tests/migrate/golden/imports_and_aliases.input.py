"""Every way the mapping functions are reached: aliases, modules, full paths."""
import megatron.core.tensor_parallel
import megatron.core.tensor_parallel as tp
from megatron.core import tensor_parallel
from megatron.core.tensor_parallel import mappings
from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region as reduce_from
from megatron.core.tensor_parallel.mappings import copy_to_tensor_model_parallel_region as copy_to


def aliases(x):
    return copy_to(reduce_from(x))


def modules(x):
    a = tensor_parallel.copy_to_tensor_model_parallel_region(x)
    b = mappings.gather_from_tensor_model_parallel_region(a)
    c = tp.scatter_to_sequence_parallel_region(b)
    d = megatron.core.tensor_parallel.reduce_scatter_to_sequence_parallel_region(c)
    return tensor_parallel.mappings.reduce_from_tensor_model_parallel_region(d)


def unrelated(x):
    # Not a mapping call: the names are not Megatron's mapping functions.
    return tensor_parallel.get_cuda_rng_tracker(), tp.VocabParallelEmbedding
