"""Names in comments and strings are not calls: copy_to_tensor_model_parallel_region(x)."""
# reduce_from_tensor_model_parallel_region(x) is what Megatron would call here.
NAME = "gather_from_tensor_model_parallel_region"


def copy_to_tensor_model_parallel_region(x):
    """A project-local function of the same name (not Megatron's): reported, not migrated."""
    return x


y = copy_to_tensor_model_parallel_region(1)
