"""A few of megatron-core 0.16.1's mapping functions, written as its mappings.py writes them
(autograd Functions whose forward and backward call torch.distributed directly; the wrapper
resolves ``group=None`` to the tensor-model-parallel group, here :data:`TP_GROUP`)."""

import torch

TP_GROUP = None  # parallel_state's tensor-model-parallel group (set by the test)


def get_tensor_model_parallel_group_if_none(group):
    return TP_GROUP if group is None else group


def _reduce(input_, group):
    if group.size() == 1:
        return input_
    torch.distributed.all_reduce(input_.contiguous(), group=group)
    return input_


def _split_along_last_dim(input_, group):
    world_size = group.size()
    if world_size == 1:
        return input_
    return torch.chunk(input_, world_size, dim=-1)[group.rank()].contiguous()


def _gather_along_last_dim(input_, group):
    world_size = group.size()
    if world_size == 1:
        return input_
    dim_size = list(input_.size())
    dim_size[0] = dim_size[0] * world_size
    output = torch.empty(dim_size, dtype=input_.dtype)
    torch.distributed.all_gather_into_tensor(output, input_.contiguous(), group=group)
    return torch.cat(output.chunk(world_size, dim=0), dim=-1).contiguous()


def _split_along_first_dim(input_, group):
    world_size = group.size()
    if world_size == 1:
        return input_
    local = input_.size()[0] // world_size
    return input_[group.rank() * local:(group.rank() + 1) * local].contiguous()


def _gather_along_first_dim(input_, group, output_split_sizes=None, use_global_buffer=False):
    world_size = group.size()
    if world_size == 1:
        return input_
    dim_size = list(input_.size())
    dim_size[0] = dim_size[0] * world_size
    output = torch.empty(dim_size, dtype=input_.dtype)
    torch.distributed.all_gather_into_tensor(output, input_.contiguous(), group=group)
    return output


def _reduce_scatter_along_first_dim(input_, group, input_split_sizes=None, use_global_buffer=False):
    world_size = group.size()
    if world_size == 1:
        return input_
    dim_size = list(input_.size())
    dim_size[0] = dim_size[0] // world_size
    output = torch.empty(dim_size, dtype=input_.dtype)
    torch.distributed.reduce_scatter_tensor(output, input_.contiguous(), group=group)
    return output


class _CopyToModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return input_

    @staticmethod
    def backward(ctx, grad_output):
        return _reduce(grad_output, ctx.group), None


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group):
        return _reduce(input_, group)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class _ScatterToModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return _split_along_last_dim(input_, group)

    @staticmethod
    def backward(ctx, grad_output):
        return _gather_along_last_dim(grad_output, ctx.group), None


class _GatherFromSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, tensor_parallel_output_grad=True, output_split_sizes=None,
                use_global_buffer=False):
        ctx.tensor_parallel_output_grad = tensor_parallel_output_grad
        ctx.group = group
        return _gather_along_first_dim(input_, group, output_split_sizes, use_global_buffer)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.tensor_parallel_output_grad:
            return _reduce_scatter_along_first_dim(grad_output, ctx.group), None, None, None, None
        return _split_along_first_dim(grad_output, ctx.group), None, None, None, None


class _ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, group, input_split_sizes=None, use_global_buffer=False):
        ctx.group = group
        return _reduce_scatter_along_first_dim(input_, group, input_split_sizes, use_global_buffer)

    @staticmethod
    def backward(ctx, grad_output):
        return _gather_along_first_dim(grad_output, ctx.group), None, None, None


def copy_to_tensor_model_parallel_region(input_, group=None):
    group = get_tensor_model_parallel_group_if_none(group)
    return _CopyToModelParallelRegion.apply(input_, group)


def reduce_from_tensor_model_parallel_region(input_, group=None):
    group = get_tensor_model_parallel_group_if_none(group)
    return _ReduceFromModelParallelRegion.apply(input_, group)


def scatter_to_tensor_model_parallel_region(input_, group=None):
    group = get_tensor_model_parallel_group_if_none(group)
    return _ScatterToModelParallelRegion.apply(input_, group)


def gather_from_sequence_parallel_region(input_, tensor_parallel_output_grad=True, group=None,
                                         output_split_sizes=None, use_global_buffer=False):
    group = get_tensor_model_parallel_group_if_none(group)
    return _GatherFromSequenceParallelRegion.apply(
        input_, group, tensor_parallel_output_grad, output_split_sizes, use_global_buffer
    )


def reduce_scatter_to_sequence_parallel_region(input_, group=None, input_split_sizes=None,
                                               use_global_buffer=False):
    group = get_tensor_model_parallel_group_if_none(group)
    return _ReduceScatterToSequenceParallelRegion.apply(
        input_, group, input_split_sizes, use_global_buffer
    )
