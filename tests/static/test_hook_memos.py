"""The check-time hooks' cheap tests and memos answer as the walks they stand in front of.

``global_calls.plain_value`` (read by ``claims.claimed_partial_errors`` before
``value_bound_once``'s walk of the whole function) is what ``size_names`` records for a name
whenever that walk succeeds, and is computed again for a body the daemon replaced."""

from __future__ import annotations

import textwrap

from mypy.errors import Errors
from mypy.nodes import FuncDef
from mypy.options import Options
from mypy.parse import parse

from spmd_mypy.plugin import global_calls

SOURCE = textwrap.dedent('''
    def f(x, w, b):
        h = x @ w
        a, c = h, x
        if b:
            h = h + b
            for i in range(3):
                g = torch.nn.functional.linear(x, w, b)
        else:
            with ctx() as k:
                m = k - 1
        def inner():
            h = 0
            q = x + 1
        class C:
            r = x - 1
        while a:
            n = x.addmm(w, w)
        try:
            t = x
        except E as e:
            t = x + 2
        return h
''')

OTHER = textwrap.dedent('''
    def f(x, w, b):
        h = x + w
        return h
''')


def _function(source: str) -> FuncDef:
    options = Options()
    tree = parse(source, "m.py", "m", Errors(options), options, eager=True)
    func = tree.defs[0]
    assert isinstance(func, FuncDef)
    return func


def test_plain_value_is_what_size_names_records() -> None:
    func = _function(SOURCE)
    facts = global_calls.size_names(func)
    names = set(facts.bindings) | {"q", "r", "nothing"}
    for name in names:
        assert global_calls.plain_value(func, name) is facts.values.get(name), name
    # the last plain assignment of the function's own body; not a nested definition's
    assert global_calls.plain_value(func, "h") is facts.values["h"]
    assert global_calls.plain_value(func, "q") is None
    assert global_calls.plain_value(func, "r") is None
    assert global_calls.plain_value(func, "x") is None  # a parameter


def test_plain_value_of_a_replaced_body_is_computed_again() -> None:
    func = _function(SOURCE)
    before = global_calls.plain_value(func, "h")
    assert before is not None
    func.body = _function(OTHER).body  # the daemon merges a re-parsed function in place
    after = global_calls.plain_value(func, "h")
    assert after is not before
    assert after is global_calls.size_names(func).values["h"]


def _expr(source: str):  # noqa: ANN202 - an expression node as mypy parses it
    options = Options()
    tree = parse(f"x = {source}\n", "m.py", "m", Errors(options), options, eager=True)
    return tree.defs[0].rvalue  # type: ignore[attr-defined]


def test_read_local_type_gives_one_shard_type_per_dim() -> None:
    """S(i) read from a collective's src=/dst= is one object per dim (the collective hooks
    remember answers by the identity of src and dst), equal to the LocalType it stands for."""
    from mypy.nodes import RefExpr

    from spmd_mypy.engine.types import Kind, LocalType
    from spmd_mypy.plugin.calls import read_local_type

    def shard(source: str) -> object:
        e = _expr(source)
        e.callee.fullname = "spmd.S"  # (as semantic analysis resolves it)
        assert isinstance(e.callee, RefExpr)
        return read_local_type(e)

    a, b, c, d = shard("S(1)"), shard("S(1)"), shard("S(0)"), shard("S(-1)")
    assert a is b and a == LocalType(Kind.V, 1)
    assert c is not a and c == LocalType(Kind.V, 0)
    assert d == LocalType(Kind.V, -1) and d is shard("S(-1)")
