"""Run with --tp-axis model --group-getter get_expert_model_parallel_group=ep
--group-expr self.tp_group --group-expr 'self.pg.cp = cp'."""
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import (
    all_to_all,
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
)
import spmd
from spmd import I, R, S, V


class Block:
    def forward(self, x):
        a = spmd.reinterpret(x, "model", src=I, dst=R)
        b = spmd.reinterpret(x, "model", src=I, dst=R)
        c = spmd.reinterpret(x, "model", src=I, dst=R)
        d = spmd.all_to_all(x, "ep", src=V, dst=V)
        e = spmd.all_gather(x, "cp", src=S(0), dst=R)
        f = copy_to_tensor_model_parallel_region(x, group=self.dp_group)
        return a, b, c, d, e, f
