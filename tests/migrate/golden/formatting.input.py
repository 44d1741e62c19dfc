# Layout is kept: line breaks, trailing commas, parentheses, comments.
from megatron.core import parallel_state
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,  # the SP all-gather
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)


def layouts(x, y):
    # one argument, own line, no trailing comma
    a = reduce_from_tensor_model_parallel_region(
        x
    )
    # one argument, own line, trailing comma
    b = reduce_from_tensor_model_parallel_region(
        x,
    )
    # one argument per line, comments on the lines
    c = gather_from_sequence_parallel_region(
        x,  # the local shard
        tensor_parallel_output_grad=True,  # the next op is TP
        group=parallel_state.get_tensor_model_parallel_group(),
    )
    # keyword input, group first
    d = reduce_scatter_to_sequence_parallel_region(group=None, input_=x)
    # parenthesized and computed input
    e = copy_to_tensor_model_parallel_region((x + y) * 2)
    f = copy_to_tensor_model_parallel_region(
        (
            x  # still x
        )
    )
    # nested calls are both rewritten
    g = copy_to_tensor_model_parallel_region(reduce_from_tensor_model_parallel_region(x))
    # odd spacing is kept around the call
    h = copy_to_tensor_model_parallel_region (  x  )
    return a, b, c, d, e, f, g, h


def line_comments(x, w):
    # a comment on the last argument's line stays on the line of the argument in its place
    a = reduce_from_tensor_model_parallel_region(
        x @ w  # local partial sum of the row-parallel matmul
        # a closing remark stays last
    )
    b = reduce_from_tensor_model_parallel_region(
        x @ w,  # with a trailing comma
    )
    c = reduce_from_tensor_model_parallel_region(
        x,
        group=None,  # the group's line becomes the axis line
    )
    d = reduce_from_tensor_model_parallel_region(x, None  # all on one line: stays on it
    )
    return a, b, c, d


def in_expressions(x):
    return [copy_to_tensor_model_parallel_region(t) for t in x], {
        "out": reduce_from_tensor_model_parallel_region(x[0]),
    }
