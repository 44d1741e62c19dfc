# Layout is kept: line breaks, trailing commas, parentheses, comments.
from megatron.core import parallel_state
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,  # the SP all-gather
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
import spmd
from spmd import I, P, R, S


def layouts(x, y):
    # one argument, own line, no trailing comma
    a = spmd.all_reduce(
        x,
        "tp",
        src=P,
        dst=I
    )
    # one argument, own line, trailing comma
    b = spmd.all_reduce(
        x,
        "tp",
        src=P,
        dst=I,
    )
    # one argument per line, comments on the lines
    c = spmd.all_gather(
        x,  # the local shard
        "tp",  # the next op is TP
        src=S(0),
        dst=R,
    )
    # keyword input, group first
    d = spmd.reduce_scatter(x, "tp", src=P, dst=S(0))
    # parenthesized and computed input
    e = spmd.reinterpret((x + y) * 2, "tp", src=I, dst=R)
    f = spmd.reinterpret(
        (
            x  # still x
        ),
        "tp",
        src=I,
        dst=R
    )
    # nested calls are both rewritten
    g = spmd.reinterpret(spmd.all_reduce(x, "tp", src=P, dst=I), "tp", src=I, dst=R)
    # odd spacing is kept around the call
    h = spmd.reinterpret (  x, "tp", src=I, dst=R  )
    return a, b, c, d, e, f, g, h


def line_comments(x, w):
    # a comment on the last argument's line stays on the line of the argument in its place
    a = spmd.all_reduce(
        x @ w,  # local partial sum of the row-parallel matmul
        "tp",
        src=P,
        dst=I
        # a closing remark stays last
    )
    b = spmd.all_reduce(
        x @ w,  # with a trailing comma
        "tp",
        src=P,
        dst=I,
    )
    c = spmd.all_reduce(
        x,
        "tp",  # the group's line becomes the axis line
        src=P,
        dst=I,
    )
    d = spmd.all_reduce(x, "tp", src=P, dst=I  # all on one line: stays on it
    )
    return a, b, c, d


def in_expressions(x):
    return [spmd.reinterpret(t, "tp", src=I, dst=R) for t in x], {
        "out": spmd.all_reduce(x[0], "tp", src=P, dst=I),
    }
