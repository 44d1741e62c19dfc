"""The compiled memos in front of the engine's rules (plugin/verdicts.py) answer as the rules
do: keyed by every argument an answer depends on, the types by identity (kept alive), the
other engine values by value (a fresh but equal Reduction hits; a different one does not)."""

from __future__ import annotations

from spmd_mypy.engine import collectives as coll
from spmd_mypy.engine.contractions import Contraction, may_sum
from spmd_mypy.engine.ops import Operand, Reduction, classify, partial_op, propagate
from spmd_mypy.engine.types import Kind, LocalType, SpmdType
from spmd_mypy.plugin import verdicts

V = SpmdType((("tp", LocalType(Kind.V)),))
S0 = SpmdType((("tp", LocalType(Kind.V, 0)),))
R = SpmdType((("tp", LocalType(Kind.R)),))
P = SpmdType((("tp", LocalType(Kind.P)),))
I = SpmdType((("tp", LocalType(Kind.I)),))


def _same(a, b) -> None:  # noqa: ANN001
    assert a.type == b.type
    assert [(e.code, e.message) for e in a.errors] == [(e.code, e.message) for e in b.errors]


def test_propagate_memo_keys_every_argument() -> None:
    cases = [
        ("add", [Operand(V, "a"), Operand(R, "b")], None),
        ("add", [Operand(P, "a"), Operand(R, "b")], None),  # an error: never kept
        ("add", [Operand(P, "a"), Operand(None, "0", zero=True)], None),
        ("add", [Operand(P, "a"), Operand(None, "1")], None),
        ("sum", [Operand(S0, "x")], Reduction((0,))),
        ("sum", [Operand(S0, "x")], Reduction((1,))),
        ("sum", [Operand(S0, "x")], Reduction((0,), keepdim=True)),
        ("mul", [Operand(I, "a"), Operand(R, "b")], None),
        ("mul", [Operand(I, "a", can_grad=False), Operand(R, "b")], None),
        ("tanh", [Operand(P, "a")], None),
    ]
    for _ in range(2):  # the second round answers from the memo
        for op, ops, red in cases:
            spec = classify(op)
            for strict in (False, True):
                got = verdicts.propagate_memo(spec, ops, strict, red, None)
                _same(got, propagate(spec, ops, strict=strict, reduction=red))
    # an equal but fresh Reduction hits; the answer is the engine's
    a = verdicts.propagate_memo(classify("sum"), [Operand(S0)], False, Reduction((1,)), None)
    b = verdicts.propagate_memo(classify("sum"), [Operand(S0)], False, Reduction((1,)), None)
    assert not a.errors and a.type is b.type
    assert verdicts.value_key(Reduction((0,))) == verdicts.value_key(Reduction((0,)))
    assert verdicts.value_key(Reduction((0,))) != verdicts.value_key(Reduction((0,), keepdim=True))
    assert verdicts.value_key(Reduction((0,))) != verdicts.value_key(Contraction("matmul"))


def test_propagate_memo_keys_types_by_identity() -> None:
    spec = classify("add")
    first = verdicts.propagate_memo(spec, [Operand(V), Operand(V)], False, None, None)
    other = SpmdType((("tp", LocalType(Kind.R)),))  # a new object: its own entry
    second = verdicts.propagate_memo(spec, [Operand(other), Operand(other)], False, None, None)
    assert first.type == V and second.type == R


def test_check_argument_memo_keys_every_argument() -> None:
    for _ in range(2):
        for have, wanted, free in [(V, [V], False), (R, [I], False), (R, [I], True),
                                   (I, [R], False), (R, [V, R], False), (P, [R, V], False)]:
            got = verdicts.check_argument_memo(have, wanted, x_text="x", where="argument x",
                                               gradient_free=free)
            want = coll.check_argument_any(have, wanted, x_text="x", where="argument x",
                                           gradient_free=free)
            assert [e.message for e in got] == [e.message for e in want]
            # a fit, once found, is known (the hook then builds no texts); a misfit never is
            assert verdicts.known_fit(have, wanted) == (not want and not free)
    fresh = SpmdType((("tp", LocalType(Kind.V)),))  # equal to V, another object: not yet known
    assert not verdicts.known_fit(fresh, [fresh])


def test_partial_op_memo_and_first_summed_axis() -> None:
    for _ in range(2):
        for ops, bias in [([Operand(S0, "h"), Operand(V, "w")], None),
                          ([Operand(R, "h"), Operand(R, "w")], None),
                          ([Operand(V, "h"), Operand(V, "w")], P),
                          ([Operand(V, "h"), Operand(V, "w")], R)]:
            got = verdicts.partial_op_memo("matmul", ops, ("tp",), bias, "b", False, None,
                                           Contraction("matmul"))
            want = partial_op("matmul", ops, ("tp",),
                              bias=Operand(bias, "b") if bias is not None else None,
                              move=Contraction("matmul"))
            _same(got, want)
        for ops in ([Operand(S0), Operand(S0)], [Operand(V), Operand(R)], [Operand(R), Operand(R)]):
            c = Contraction("matmul")
            expected = next((a for a, _ in ops[0].type.axes if may_sum(
                c, [(o.type.get(a), o.shape) for o in ops])), None)
            assert verdicts.first_summed_axis(c, ops) == expected


def test_made_move_and_contraction_tell_true_from_one() -> None:
    from spmd_mypy.engine.contractions import make_contraction
    from spmd_mypy.engine.views import UNREAD, make_move
    from spmd_mypy.plugin import reductions

    moves = [("view", {"shape": (1, 2)}), ("view", {"shape": (True, 2)}),
             ("transpose", {"dim0": 0, "dim1": 1}), ("transpose", {"dim0": False, "dim1": 1}),
             ("transpose", {"dim0": UNREAD, "dim1": 1}), ("squeeze", {"dim": None})]
    for _ in range(2):
        for op, values in moves:
            assert reductions._made_move(op, dict(values)) == make_move(op, values), (op, values)
    contractions = [("tensordot", {"dims": ((1,), (0,))}), ("tensordot", {"dims": ((True,), (0,))}),
                    ("tensordot", {"dims": 1}), ("tensordot", {"dims": True}),
                    ("einsum", {"equation": "ij,jk->ik"}), ("einsum", {"equation": UNREAD})]
    for _ in range(2):
        for op, values in contractions:
            c, _ranked = reductions._made_contraction(op, dict(values))
            assert c == make_contraction(op, values), (op, values)


def test_made_reductions_tell_their_values_apart() -> None:
    from spmd_mypy.engine.ops import normalising_reduction
    from spmd_mypy.plugin import reductions

    for _ in range(2):
        for dims, keepdim in [((1,), False), ((1,), True), ((True,), False), (None, False),
                              ((0, 1), False)]:
            assert reductions._reduction("sum", dims, keepdim, False) == Reduction(dims, keepdim)
        for op, value in [("softmax", 1), ("softmax", -1), ("softmax", True), ("layer_norm", (None,)),
                          ("layer_norm", (None, None)), ("softmax", None)]:
            got = reductions._reduction(op, value, False, True)
            assert got == normalising_reduction(op, value), (op, value)
            assert type(got) is type(normalising_reduction(op, value))


def test_known_fit_tells_the_same_objects_by_identity() -> None:
    """known_fit's yes for the very objects asked before (a relaxed signature's tuple of
    wanted types) is kept by identity; a list is never kept (it may change), an error never
    becomes a fit."""
    have = SpmdType((("tp", LocalType(Kind.R)),))
    wanted = (SpmdType((("tp", LocalType(Kind.R)),)),)
    assert not verdicts.known_fit(have, wanted)  # never checked: not known
    assert verdicts.check_argument_memo(have, wanted, x_text="x", where="w") == []
    assert verdicts.known_fit(have, wanted)
    assert verdicts._FIT_BY_ID[id(have) * 31 + id(wanted)] == (have, wanted)
    assert verdicts.known_fit(have, wanted)  # (from the identity memo)
    as_list = list(wanted)
    assert verdicts.known_fit(have, as_list) and id(have) * 31 + id(as_list) not in verdicts._FIT_BY_ID
    partial = SpmdType((("tp", LocalType(Kind.P)),))
    assert verdicts.check_argument_memo(partial, wanted, x_text="x", where="w")
    assert not verdicts.known_fit(partial, wanted)
    assert id(partial) * 31 + id(wanted) not in verdicts._FIT_BY_ID


def test_propagate_memo_hands_one_result_without_errors_to_repeats() -> None:
    """A repeat gets the Result made the first time (without errors, read only): the same
    object, its type the engine's; one with errors is made afresh at every call."""
    spec = classify("add")
    a, b = SpmdType((("tp", LocalType(Kind.V)),)), SpmdType((("tp", LocalType(Kind.R)),))
    first = verdicts.propagate_memo(spec, [Operand(a), Operand(b)], False, None, None)
    again = verdicts.propagate_memo(spec, [Operand(a, "y"), Operand(b, "z")], False, None, None)
    assert again is first and first.errors == [] and first.type == V
    p = SpmdType((("tp", LocalType(Kind.P)),))
    bad = verdicts.propagate_memo(classify("tanh"), [Operand(p)], False, None, None)
    worse = verdicts.propagate_memo(classify("tanh"), [Operand(p)], False, None, None)
    assert bad.errors and worse.errors and bad is not worse
