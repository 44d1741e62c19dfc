"""Calls that cannot be mapped exactly: left alone, one report line each."""
import torch.distributed as dist
from megatron.core.tensor_parallel import (
    all_to_all,
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
from myproject.parallel import scatter_to_tensor_model_parallel_region


class Layer:
    def forward(self, x, flag, sizes, args, kwargs):
        a = copy_to_tensor_model_parallel_region(x, group=self.tp_group)  # a group of unknown axis
        b = reduce_from_tensor_model_parallel_region(x, get_data_parallel_group())
        c = gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=flag)
        d = gather_from_sequence_parallel_region(x, output_split_sizes=sizes)
        e = gather_from_sequence_parallel_region(x, use_global_buffer=True)
        f = reduce_scatter_to_sequence_parallel_region(x, input_split_sizes=sizes)
        g = copy_to_tensor_model_parallel_region(*args)
        h = copy_to_tensor_model_parallel_region(x, **kwargs)
        i = copy_to_tensor_model_parallel_region(x, async_op=True)
        j = copy_to_tensor_model_parallel_region()
        k = all_to_all(self.ep_group, x)
        l = all_to_all(None, x)
        m = scatter_to_tensor_model_parallel_region(x)  # not Megatron's
        n = self.helper.copy_to_tensor_model_parallel_region(x)  # unknown origin
        o = reduce_from_tensor_model_parallel_region(
            x,
            group=(
                # a comment the typed call would drop
                None
            ),
        )
        # torch.distributed's all_to_all is not Megatron's: untouched and not reported.
        dist.all_to_all([x], [x])
        # One of these is fine and is migrated; the others are reported.
        p = reduce_from_tensor_model_parallel_region(x, group=None, )
        # Uneven sizes: the typed call takes them (sizes=, out_sizes=); the report gives it.
        q = all_to_all(get_tensor_model_parallel_group(), x, [1, 2], input_split_sizes=[2, 1])
        r = all_to_all(get_tensor_model_parallel_group(), x, output_split_sizes_=sizes)
        return a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r

