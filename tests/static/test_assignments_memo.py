"""``statements.assignments_by_name`` is computed once per function body (the hooks of one
function ask for it again and again), and again when the daemon re-analyses the function in
place: its locals are then bound to new nodes, which the kept result would not find."""

from __future__ import annotations

import textwrap

from mypy.errors import Errors
from mypy.nodes import FuncDef, NameExpr, Var
from mypy.options import Options
from mypy.parse import parse

from spmd_mypy.plugin import statements
from spmd_mypy.plugin.calls import _plain_bindings

SOURCE = textwrap.dedent('''
    def f(x):
        h = x * 2
        a, b = h, x
        h = h + a
        return h
''')


def _function() -> FuncDef:
    options = Options()
    tree = parse(SOURCE, "m.py", "m", Errors(options), options, eager=True)
    func = tree.defs[0]
    assert isinstance(func, FuncDef)
    return func


def _bind_locals(func: FuncDef) -> dict[str, Var]:
    """What semantic analysis does to the assignment targets: each local name one new node."""
    nodes: dict[str, Var] = {}
    for st in statements.nested_statements(func.body.body):
        for lv in getattr(st, "lvalues", []):
            for target in getattr(lv, "items", [lv]):
                if isinstance(target, NameExpr):
                    target.node = nodes.setdefault(target.name, Var(target.name))
    return nodes


def test_the_assignments_of_a_function_are_computed_once() -> None:
    func = _function()
    nodes = _bind_locals(func)
    first = statements.assignments_by_name(func)
    assert [line for line, _, _ in first[nodes["h"]]] == [3, 5]
    assert [k for _, _, k in first[nodes["a"]]] == [0]
    assert statements.assignments_by_name(func) is first
    assert _plain_bindings(func) is _plain_bindings(func)


def test_a_function_analysed_again_is_computed_again() -> None:
    func = _function()
    _bind_locals(func)
    before = statements.assignments_by_name(func)
    plain_before = _plain_bindings(func)
    nodes = _bind_locals(func)  # the daemon's re-analysis: the same tree, new nodes
    after = statements.assignments_by_name(func)
    assert after is not before
    assert [line for line, _, _ in after[nodes["h"]]] == [3, 5]
    plain = _plain_bindings(func)
    assert plain is not plain_before
    assert [line for line, _ in plain[nodes["h"]]] == [3, 5]
