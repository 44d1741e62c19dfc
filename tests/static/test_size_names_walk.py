"""``global_calls.size_names`` skips its walrus walk where it cannot matter (no ``:=`` in the
body, too few expressions for one nested deeper than the walk follows): the facts are those
of the full walk, a walrus anywhere it looks is still a binding, and a body with an
expression nested too deep still gives up (nothing known), as before."""

from __future__ import annotations

import textwrap

from mypy.errors import Errors
from mypy.nodes import CallExpr, ExpressionStmt, FuncDef, NameExpr
from mypy.options import Options
from mypy.parse import parse

from spmd_mypy.plugin import global_calls
from spmd_mypy.plugin.statements import each_function


def _functions(source: str) -> list[FuncDef]:
    options = Options()
    tree = parse(textwrap.dedent(source), "m.py", "m", Errors(options), options, eager=True)
    out: list[FuncDef] = []
    each_function(tree.defs, out.append)
    return out


def _full_walk(func: FuncDef) -> global_calls.SizeNames:
    """The facts with the walrus walk always on (the walk as it was)."""
    facts = global_calls.SizeNames()
    for arg in func.arguments:
        facts.bindings[arg.variable.name] = 1
        facts.defined_at[arg.variable.name] = func.line
    try:
        global_calls._SizeWalk(facts, True).block(func.body.body)
        for name in global_calls.raw_collective_targets(func):
            facts.bindings[name] = facts.bindings.get(name, 0) + 1
    except Exception:  # noqa: BLE001
        facts = global_calls.SizeNames()
    return facts


def _same(a: global_calls.SizeNames, b: global_calls.SizeNames) -> None:
    assert a.sizes == b.sizes
    assert a.bindings == b.bindings
    assert a.defined_at == b.defined_at
    assert a.ranks == b.ranks
    assert a.values == b.values
    assert a.joint_loops == b.joint_loops


DEEP_SUM = " + ".join(["x"] * 70)

SOURCE = f'''
    def plain(x, w):
        b, s, h = x.shape
        n = x.size(0)
        y = x.view(b, s, -1)
        for p, g in zip(w, w):
            y = y + p
        return y.view(n, -1)

    def walrus_in_condition(x):
        n = x.shape[0]
        if (n := 3) > 2:
            pass
        return x.view(n, -1)

    def walrus_in_comprehension(x):
        n = x.shape[0]
        ys = [m for k in range(3) if (m := k)]
        return x.view(n, -1)

    def walrus_in_nested(x):
        n = x.shape[0]
        def inner():
            return (n := 2)
        return x.view(n, -1)

    def deep(x):
        n = x.shape[0]
        y = {DEEP_SUM}
        return x.view(n, -1)

    def raw(x, out):
        n = x.shape[0]
        all_reduce(out)
        return x.view(n, -1)
'''


def test_size_names_is_the_full_walk() -> None:
    funcs = _functions(SOURCE)
    assert len(funcs) == 6
    for func in funcs:
        _same(global_calls._size_names(func), _full_walk(func))


def test_walrus_is_a_binding() -> None:
    funcs = {f.name: f for f in _functions(SOURCE)}
    assert global_calls._size_names(funcs["walrus_in_condition"]).bindings["n"] == 2
    assert global_calls._size_names(funcs["walrus_in_comprehension"]).bindings["m"] == 1
    assert global_calls._size_names(funcs["walrus_in_nested"]).bindings["n"] == 2
    assert global_calls._size_names(funcs["plain"]).bindings["n"] == 1


def test_too_deep_knows_nothing() -> None:
    funcs = {f.name: f for f in _functions(SOURCE)}
    facts = global_calls._size_names(funcs["deep"])
    assert facts.bindings == {} and facts.sizes == {}


def test_raw_collective_target_is_a_binding() -> None:
    funcs = {f.name: f for f in _functions(SOURCE)}
    func = funcs["raw"]
    call = [st for st in func.body.body if isinstance(st, ExpressionStmt)][0].expr
    assert isinstance(call, CallExpr) and isinstance(call.callee, NameExpr)
    call.callee.fullname = "torch.distributed.all_reduce"  # as semantic analysis binds it
    facts = global_calls._size_names(func)
    assert facts.bindings["out"] == 2
    _same(facts, _full_walk(func))
