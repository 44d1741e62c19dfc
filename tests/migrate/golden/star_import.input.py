from megatron.core.tensor_parallel.mappings import *


def forward(x):
    return reduce_from_tensor_model_parallel_region(copy_to_tensor_model_parallel_region(x))
