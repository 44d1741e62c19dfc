"""Run with --tp-axis model --group-getter get_expert_model_parallel_group=ep
--group-expr self.tp_group --group-expr 'self.pg.cp = cp'."""
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import (
    all_to_all,
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
)


class Block:
    def forward(self, x):
        a = copy_to_tensor_model_parallel_region(x)
        b = copy_to_tensor_model_parallel_region(x, group=self.tp_group)
        c = copy_to_tensor_model_parallel_region(x, group=self . tp_group)
        d = all_to_all(ps.get_expert_model_parallel_group(), x)
        e = gather_from_sequence_parallel_region(x, group=self.pg.cp)
        f = copy_to_tensor_model_parallel_region(x, group=self.dp_group)
        return a, b, c, d, e, f
