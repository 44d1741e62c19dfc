"""source_operand: an Operand whose text is rendered from its source node only when read.

The static checker makes one per operand of every call it types; the text is for messages,
so a call that passes its rule never renders one.  Everything else about it is the Operand's
with the rendered text: the rule's answer, its messages, equality, hashing, replace()."""

from __future__ import annotations

from dataclasses import fields, replace

from spmd_mypy.engine.ops import Operand, Role, propagate, source_operand
from spmd_mypy.engine.types import LocalType, Kind, SpmdType

P_TP = SpmdType.of({"tp": LocalType(Kind.P)})
R_TP = SpmdType.of({"tp": LocalType(Kind.R)})


class _Render:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def __call__(self, source: object) -> str:
        self.calls.append(source)
        return f"<{source}>"


def test_a_passing_rule_renders_no_text() -> None:
    render = _Render()
    res = propagate("add", [source_operand(R_TP, "a", render), source_operand(R_TP, "b", render)])
    assert not res.errors
    assert render.calls == []


def test_an_error_renders_the_texts_it_names_once_as_the_operand_would() -> None:
    render = _Render()
    lazy = [source_operand(P_TP, "p", render), source_operand(R_TP, "r", render)]
    plain = [Operand(P_TP, "<p>"), Operand(R_TP, "<r>")]
    got, want = propagate("add", lazy), propagate("add", plain)
    assert want.errors and got == want
    assert [o.text for o in lazy] == ["<p>", "<r>"]
    assert sorted(render.calls) == ["p", "r"]  # each rendered once, kept


def test_equal_hashed_and_copied_as_the_operand() -> None:
    render = _Render()
    lazy = source_operand(R_TP, "x", render, False, Role.INDEX, zero=True, leaf=True)
    plain = Operand(R_TP, "<x>", False, Role.INDEX, None, True, True)
    assert lazy == plain and plain == lazy and hash(lazy) == hash(plain)
    assert lazy != Operand(R_TP, "<y>", False, Role.INDEX, None, True, True)
    moved = replace(lazy, shape=(2, 3))
    assert moved == replace(plain, shape=(2, 3)) and moved.text == "<x>"
    assert render.calls == ["x"]


def test_every_field_of_the_operand_is_set_and_compared() -> None:
    """A field added to Operand must be set by source_operand and compared by its __eq__
    (it lists the fields by hand, for speed): a missing one raised AttributeError in the
    plugin (session 37's merge of ``cut``)."""
    lazy = source_operand(R_TP, "x", _Render())
    plain = Operand(R_TP, "<x>")
    for f in fields(Operand):
        assert getattr(lazy, f.name) == getattr(plain, f.name), f.name
        assert lazy != replace(plain, **{f.name: object()}), f.name
