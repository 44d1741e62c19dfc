"""A mapping name that is also bound another way in the file: which one a call means is unclear."""
from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region, reduce_from_tensor_model_parallel_region
import spmd
from spmd import I, P


def forward(x):
    y = copy_to_tensor_model_parallel_region(x)  # ambiguous: not migrated
    return spmd.all_reduce(y, "tp", src=P, dst=I)  # fine: migrated


def elsewhere():
    copy_to_tensor_model_parallel_region = lambda t: t  # shadows the import here
    return copy_to_tensor_model_parallel_region
