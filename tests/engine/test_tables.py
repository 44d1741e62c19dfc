"""The engine's tables checked against the type system's own laws."""

from __future__ import annotations

import itertools

import pytest

from spmd_mypy.engine import collectives as coll
from spmd_mypy.engine.annotations import Entry, build
from spmd_mypy.engine.ops import (
    OP_SPECS, UNREAD_VALUE, OpClass, Operand, call_spec, classify, propagate,
)
from spmd_mypy.engine.types import (
    INVARIANT, PARTIAL, REPLICATE, VARYING, Kind, LocalType, SpmdType, bare, dual, format_type,
    receiver, shard,
)

DUAL_FORM = {"R": "P", "P": "R", "I": "I", "V": "V", "S": "S"}


@pytest.mark.parametrize("key", sorted(coll.TRANSITIONS))
def test_backward_types_are_the_duals(key: tuple[str, str, str]) -> None:
    """A forward src -> dst has a backward dual(dst) -> dual(src), composed step by step."""
    t = coll.TRANSITIONS[key]
    steps = t.backward
    assert steps, key
    assert steps[0].src == DUAL_FORM[t.dst], (key, steps)
    assert steps[-1].dst == DUAL_FORM[t.src], (key, steps)
    for a, b in zip(steps, steps[1:]):
        assert a.dst == b.src, (key, steps)
    for s in steps:  # every backward step is itself a valid transition
        assert (s.op, s.src, s.dst) in coll.TRANSITIONS, (key, s)


@pytest.mark.parametrize("key", sorted(k for k, t in coll.TRANSITIONS.items() if len(t.backward) == 1))
def test_backward_of_backward_is_forward(key: tuple[str, str, str]) -> None:
    """(Composite backwards, e.g. reinterpret(I,V)'s, are checked step by step above.)"""
    t = coll.TRANSITIONS[key]
    (s,) = t.backward
    back = coll.TRANSITIONS[(s.op, s.src, s.dst)]
    if len(back.backward) == 1:
        (bb,) = back.backward
        assert (bb.src, bb.dst) == (t.src, t.dst), (key, s, bb)


def test_every_pair_has_a_route_and_the_route_is_in_the_table() -> None:
    types = [REPLICATE, INVARIANT, VARYING, PARTIAL, shard(0), shard(1)]
    for a, b in itertools.product(types, types):
        r = coll.route(a, b)
        if a == b:
            assert r is None
        else:
            assert r is not None and r in coll.TRANSITIONS, (a, b)


def test_seed_table_rows_are_all_present() -> None:
    """The 'Comms by state transition' table of the design, row by row."""
    rows = {
        ("R", "I"): ["reinterpret"], ("R", "V"): ["reinterpret", "convert"],
        ("R", "P"): ["reinterpret", "convert"], ("I", "R"): ["reinterpret"],
        ("I", "V"): ["reinterpret", "convert"], ("I", "P"): ["convert"],
        ("V", "R"): ["all_gather"], ("V", "I"): ["all_gather"], ("V", "V"): ["all_to_all"],
        ("V", "P"): ["reinterpret", "convert"], ("P", "R"): ["all_reduce"],
        ("P", "I"): ["all_reduce"], ("P", "V"): ["reduce_scatter"],
    }
    for (src, dst), ops in rows.items():
        for op in ops:
            assert (op, src, dst) in coll.TRANSITIONS, (op, src, dst)


@pytest.mark.parametrize("op,src,dst", [
    ("reinterpret", PARTIAL, REPLICATE), ("all_reduce", REPLICATE, INVARIANT),
    ("all_gather", PARTIAL, REPLICATE), ("reduce_scatter", VARYING, REPLICATE),
    ("convert", PARTIAL, REPLICATE), ("all_to_all", REPLICATE, VARYING),
])
def test_invalid_pairs_name_the_op_to_use(op: str, src: LocalType, dst: LocalType) -> None:
    x = SpmdType.of({"tp": src})
    res = coll.check_collective(op, x, ["tp"], src, dst)
    assert [e.code for e in res.errors] == ["spmd-collective"]
    route = coll.route(src, dst)
    assert route is not None and f"use {route[0]}(x, \"tp\"" in res.errors[0].message


@pytest.mark.parametrize("op,src,dst", [
    ("all_reduce", VARYING, REPLICATE), ("all_gather", PARTIAL, REPLICATE),
    ("reinterpret", REPLICATE, PARTIAL), ("reduce_scatter", REPLICATE, VARYING),
])
def test_a_src_the_input_is_not_is_one_mismatch_from_the_real_type(
        op: str, src: LocalType, dst: LocalType) -> None:
    """The pair's error (or expert_mode's) would advise from the wrong src ("V to R is a gather:
    use all_gather" for a P input): only the mismatch is reported, its fix from the input's
    real type; with the type unknown on the axis the pair's error stands."""
    have = {VARYING: PARTIAL, PARTIAL: VARYING, REPLICATE: VARYING}[src]
    res = coll.check_collective(op, SpmdType.of({"tp": have}), ["tp"], src, dst)
    assert [e.code for e in res.errors] == ["spmd-src-mismatch"]
    assert f"but x is {have} on" in res.errors[0].message and f"src={src}, ...)" in res.errors[0].message
    unknown = coll.check_collective(op, SpmdType.of({"dp": have}), ["tp"], src, dst)
    assert [e.code for e in unknown.errors] == [
        "spmd-expert-mode" if op == "reinterpret" else "spmd-collective"]


@pytest.mark.parametrize("text,sums", [
    ("x", True), ("loss", True), ("F.cross_entropy(...)", True), ("g.pow(...).sum()", True),
    ("(torch.sqrt(...) + b)", True), ("x[...]", True),
    ("torch.sqrt(...)", False), ("(g * g).sum().sqrt()", False), ("g.norm()", False),
    ("torch.linalg.vector_norm(...)", False), ("x.exp()", False), ("(torch.exp(...))", False),
])
def test_the_summing_fix_is_offered_only_where_a_sum_can_be_meant(text: str, sums: bool) -> None:
    """all_gather(V) stacks; the alternative sum is offered for a value that may be a per-rank
    partial sum, not for the result of sqrt/norm/exp/... (their ranks' values do not add up)."""
    fix = coll.suggest(VARYING, INVARIANT, text, "tp")
    assert "to stack the ranks' values on a new dim 0" in fix
    assert ("to sum them (right only when" in fix) is sums
    assert ("to sum over the ranks, all-reduce the per-rank (V)" in fix) is not sums
    assert "concatenate the ranks' values on dim 1" in coll.suggest(shard(1), REPLICATE, "x", "tp")


def test_a_sum_or_mean_where_r_is_declared_is_summed_over_the_ranks_not_gathered() -> None:
    """A V sum or mean (its text's outermost call): the reduction over the ranks with
    spmd.sum(..., out_partial_axes=) and the declared dst, no all_gather (probe-vision)."""
    fix = coll.suggest(VARYING, REPLICATE, "(g * g).sum()", "tp")
    assert 'spmd.all_reduce(spmd.sum(g * g, out_partial_axes="tp"), "tp", src=P, dst=R)' in fix
    assert "all_gather" not in fix
    fix = coll.suggest(VARYING, REPLICATE, "x.mean((2, 3))", "sp")
    assert ('spmd.all_reduce(spmd.sum(x, (2, 3), out_partial_axes="sp"), "sp", src=P, dst=R) / n'
            in fix) and "all_gather" not in fix and "dst=I" not in fix


def test_the_ops_after_a_sum_are_non_linear_in_the_op_table() -> None:
    for name in coll._AFTER_THE_SUM:
        if name in OP_SPECS:
            assert OP_SPECS[name].op_class is OpClass.NONLINEAR, name


@pytest.mark.parametrize("name,x,expected", [
    ("all_reduce", {"dp": PARTIAL}, 'spmd.all_reduce(g, "dp", src=P, dst=R), which returns'),
    ("all_reduce", {"dp": PARTIAL, "tp": PARTIAL},
     'spmd.all_reduce on g over the mesh axis its process group spans (g is P on "dp" and "tp")'),
    # no pending sum: a V summed by the raw call is each rank's part of one sum, which
    # reinterpret(V,P) states (all_reduce takes no src=V)
    ("all_reduce", {"dp": VARYING},
     'spmd.all_reduce(spmd.reinterpret(g, "dp", src=V, dst=P), "dp", src=P, dst=R) where its '
     'ranks\' values on "dp" are the parts of one sum'),
    ("all_reduce", {"dp": VARYING, "tp": VARYING},
     'spmd.all_reduce(spmd.reinterpret(g, axis, src=V, dst=P), axis, src=P, dst=R) over the '
     'mesh axis its process group spans (g is V on "dp" and "tp")'),
    ("all_reduce", {"dp": shard(0)}, "spmd.all_reduce on g over the mesh axis its process group"),
    ("all_gather", {"tp": VARYING}, 'spmd.all_gather(g, "tp", src=V, dst=R)'),
    ("all_gather_into_tensor", {"tp": VARYING}, 'spmd.all_gather(g, "tp", src=S(0), dst=R)'),
    ("all_gather_into_tensor", {"tp": shard(2)}, 'spmd.all_gather(g, "tp", src=S(2), dst=R)'),
    ("reduce_scatter_tensor", {"tp": PARTIAL}, 'spmd.reduce_scatter(g, "tp", src=P, dst=S(0))'),
    ("all_to_all_single", {"tp": VARYING}, "spmd.all_to_all on g over the mesh axis"),
])
def test_a_raw_collective_names_the_typed_call_its_type_determines(
        name: str, x: dict, expected: str) -> None:
    message = coll.raw_collective_error("torch.distributed", name, "g", SpmdType.of(x)).message
    assert expected in message
    assert "<axis>" not in message and "src=..." not in message


def test_a_repeated_axis_is_named_with_the_fix() -> None:
    from spmd_mypy.engine.types import repeated_axis_message

    assert repeated_axis_message(("dp", "dp")) == 'the axes ("dp", "dp") name "dp" twice; name each axis once'
    assert repeated_axis_message(("tp", "dp", "tp", "tp")) == (
        'the axes ("tp", "dp", "tp", "tp") name "tp" 3 times; name each axis once')
    assert repeated_axis_message(("dp", "tp")) is None


def test_expert_mode_gate() -> None:
    x = SpmdType.of({"tp": REPLICATE})
    assert [e.code for e in coll.check_collective("reinterpret", x, ["tp"], REPLICATE, PARTIAL).errors] == [
        "spmd-expert-mode"]
    assert not coll.check_collective("reinterpret", x, ["tp"], REPLICATE, PARTIAL, expert_mode=True).errors


def test_shard_dims_are_carried_and_checked() -> None:
    x = SpmdType.of({"tp": shard(0)})
    assert coll.check_collective("all_gather", x, ["tp"], shard(1), REPLICATE).errors[0].code == "spmd-src-mismatch"
    ok = coll.check_collective("all_gather", x, ["tp"], shard(0), REPLICATE)
    assert not ok.errors and ok.type.get("tp") == REPLICATE
    assert ok.transition is not None and ok.transition.backward[0].dst == "S"


KINDS = [REPLICATE, INVARIANT, VARYING, PARTIAL]


def _expected(op_class: OpClass, a: LocalType, b: LocalType | None) -> str | LocalType:
    kinds = {a.kind} | ({b.kind} if b else set())
    if Kind.I in kinds and len(kinds) > 1:
        return "spmd-invariant-mix"
    if Kind.P in kinds:
        if op_class is OpClass.NONLINEAR:
            return "spmd-partial-nonlinear"
        if Kind.V in kinds:
            return "spmd-partial-varying"
        if op_class is OpClass.MULTILINEAR:
            if b is not None and a.kind is Kind.P and b.kind is Kind.P:
                return "spmd-partial-product"
            return PARTIAL
        if kinds != {Kind.P}:
            return "spmd-partial-affine"
        return PARTIAL
    if kinds == {Kind.R}:
        return REPLICATE
    if kinds == {Kind.I}:
        return INVARIANT
    return VARYING


@pytest.mark.parametrize("op", ["add", "mul", "relu"])
@pytest.mark.parametrize("a,b", list(itertools.product(KINDS, KINDS + [None])))
def test_op_rule_table(op: str, a: LocalType, b: LocalType | None) -> None:
    spec = classify(op)
    if spec.op_class is OpClass.NONLINEAR and b is not None and op == "relu":
        pass
    ops = [Operand(SpmdType.of({"tp": a}), "a")]
    if b is not None:
        ops.append(Operand(SpmdType.of({"tp": b}), "b"))
    res = propagate(spec, ops)
    want = _expected(spec.op_class, a, b)
    if isinstance(want, str):
        assert [e.code for e in res.errors] == [want]
        assert res.type.get("tp") is None
    else:
        assert not res.errors
        assert res.type.get("tp") == want


def test_scalars_in_linear_and_multilinear_ops() -> None:
    p = SpmdType.of({"tp": PARTIAL})
    assert propagate("add", [Operand(p, "x"), Operand(None, "1")]).errors[0].code == "spmd-partial-affine"
    assert not propagate("mul", [Operand(p, "x"), Operand(None, "2")]).errors
    assert not propagate("div", [Operand(p, "x"), Operand(None, "2")]).errors
    assert propagate("div", [Operand(None, "2"), Operand(p, "x")]).errors[0].code == "spmd-partial-nonlinear"


def test_no_grad_invariant_relaxes_only_beside_other_kinds() -> None:
    i = SpmdType.of({"tp": INVARIANT})
    v = SpmdType.of({"tp": VARYING})
    assert not propagate("mul", [Operand(i, "w", can_grad=False), Operand(v, "x")]).errors
    assert propagate("mul", [Operand(i, "w"), Operand(v, "x")]).errors[0].code == "spmd-invariant-mix"
    both = propagate("mse_loss", [Operand(i, "out"), Operand(i, "y", can_grad=False)])
    assert not both.errors and both.type.get("tp") == INVARIANT


def test_unknown_op_is_nonlinear_and_every_class_is_listed() -> None:
    assert classify("frobnicate").op_class is OpClass.NONLINEAR
    assert {s.op_class for s in OP_SPECS.values()} == set(OpClass)


def test_an_op_without_a_rule_says_so_a_known_non_linear_op_says_non_linear() -> None:
    """An op the table does not list is checked as non-linear, and the message says the
    checker has no rule for it (it may well be linear); a listed non-linear op keeps its
    message."""
    p = SpmdType.of({"tp": PARTIAL})
    unknown = propagate("frobnicate", [Operand(p, "x")]).errors[0]
    assert unknown.code == "spmd-partial-nonlinear"
    assert ("cannot go through frobnicate (the checker has no linearity rule for frobnicate, "
            "so it is checked as a non-linear op of a pending sum)") in unknown.message
    known = propagate("max_pool2d", [Operand(p, "x")]).errors[0]
    assert "cannot go through max_pool2d (a non-linear op of a pending sum)" in known.message


@pytest.mark.parametrize("op,values,op_class", [
    ("embedding_bag", {}, OpClass.MULTILINEAR),  # mode "mean", the default
    ("embedding_bag", {"mode": "sum"}, OpClass.MULTILINEAR),
    ("embedding_bag", {"mode": "max"}, OpClass.NONLINEAR),
    ("embedding_bag", {"mode": UNREAD_VALUE}, OpClass.NONLINEAR),
    ("embedding_bag", {"mode": "sum", "max_norm": 1.0}, OpClass.NONLINEAR),
    ("embedding", {}, OpClass.LINEAR),
    ("embedding", {"max_norm": None}, OpClass.LINEAR),
    ("embedding", {"max_norm": 2.0}, OpClass.NONLINEAR),
    ("scatter_reduce", {"reduce": "sum"}, OpClass.LINEAR),
    ("scatter_reduce", {"reduce": "mean"}, OpClass.LINEAR),
    ("scatter_reduce_", {"reduce": "sum"}, OpClass.LINEAR),
    ("scatter_reduce", {"reduce": "prod"}, OpClass.NONLINEAR),
    ("scatter_reduce", {}, OpClass.NONLINEAR),  # required: left out only where unread
    ("scatter", {}, OpClass.LINEAR),
    ("scatter", {"reduce": "add"}, OpClass.LINEAR),
    ("scatter_", {"reduce": "multiply"}, OpClass.NONLINEAR),
    ("add", {}, OpClass.LINEAR),  # no variants: the table's entry
])
def test_a_mode_argument_chooses_the_rule(op: str, values: dict, op_class: OpClass) -> None:
    """call_spec (asked by both adapters): the table's entry when every variant formal has
    one of its values, else non-linear, named with the value in messages."""
    spec = call_spec(op, values)
    assert spec.op_class is op_class
    if op_class is OpClass.NONLINEAR:
        p = SpmdType.of({"tp": PARTIAL})
        msg = propagate(spec, [Operand(p, "w")]).errors[0].message
        assert f"cannot go through {op} (" in msg and "no linearity rule" not in msg


def test_bilinear_and_convolutions_take_a_bias_summand() -> None:
    """bilinear(x1, x2, w, b) and conv*(x, w, b): factors and a summand, as linear(x, w, b):
    a Partial factor beside a Replicate bias is affine."""
    p, r = SpmdType.of({"tp": PARTIAL}), SpmdType.of({"tp": REPLICATE})
    for op, factors in (("bilinear", 3), ("conv2d", 2), ("conv_transpose1d", 2), ("linear", 2)):
        ops = [Operand(p, "x")] + [Operand(r, f"w{i}") for i in range(factors - 1)]
        assert propagate(op, ops).type.get("tp") == PARTIAL, op
        assert propagate(op, [*ops, Operand(r, "b")]).errors[0].code == "spmd-partial-affine", op
        assert propagate(op, [*ops, Operand(p, "b")]).type.get("tp") == PARTIAL, op


def test_annotation_build_and_format() -> None:
    t, errors = build([Entry("V", ("dp",)), Entry("R", ("tp", "cp"))], ["dp", "cp", "tp"])
    assert not errors
    assert format_type(t, ["dp", "cp", "tp"]) == 'Tensor[R["cp", "tp"], V["dp"]]'
    assert t == build([Entry("R", ("cp", "tp")), Entry("V", ("dp",))], ["dp", "cp", "tp"])[0]
    _, errors = build([Entry("R", ("tq",))], ["dp", "tp"])
    assert 'did you mean "tp"' in errors[0].message
    assert dual(REPLICATE) == PARTIAL and dual(shard(2)) == shard(2)


def test_an_unknown_axis_names_every_equally_close_axis() -> None:
    # an axis renamed in the code but not in the config: "tp" with the axes dp and mp
    _, errors = build([Entry("R", ("tp",))], ["dp", "mp"])
    assert 'did you mean "dp" or "mp"?' in errors[0].message, errors[0].message
    _, errors = build([Entry("R", ("tq",))], ["dp", "tp"])
    assert '(did you mean "tp"?)' in errors[0].message, errors[0].message


def test_the_closest_axis_ignores_case() -> None:
    _, errors = build([Entry("R", ("TP",))], ["dp", "tp"])
    assert '(did you mean "tp"?)' in errors[0].message, errors[0].message


def test_an_annotation_error_leaves_the_bad_part_unknown() -> None:
    """Not a guess that later checks would report again: an unknown axis in a partition
    spec leaves the layout unknown (not that dim unsharded), an axis typed two ways is
    unknown; what the error does not touch is kept."""
    axes = ["dp", "tp"]
    t, errors = build([Entry("PS", spec=((), ("dpp",)))], axes)
    assert len(errors) == 1 and t.spec is None and not t, (t, errors)
    t, errors = build([Entry("PS", spec=((("dp", "tpp")), ())), Entry("R", ("tp",))], axes)
    assert len(errors) == 1 and t == SpmdType.of({"tp": REPLICATE}), (t, errors)
    t, errors = build([Entry("PS", spec=(("tp",), ("tp",)))], axes)
    assert len(errors) == 1 and t.spec is None and not t, (t, errors)
    t, errors = build([Entry("PS", spec=(("tp",), ())), Entry("R", ("tp",))], axes)
    assert len(errors) == 1 and t.spec is None and not t, (t, errors)
    # V on an axis of the spec says no more than the spec: the spec stands
    t, errors = build([Entry("PS", spec=(("tp",), ())), Entry("V", ("tp",))], axes)
    assert len(errors) == 1 and t == SpmdType.of({"tp": shard(0)}, (("tp",), ())), (t, errors)
    t, errors = build([Entry("R", ("dpp", "tp"))], axes)
    assert len(errors) == 1 and t == SpmdType.of({"tp": REPLICATE}), (t, errors)
    t, errors = build([Entry("R", ("tp",)), Entry("V", ("tp", "dp"))], axes)
    assert [e.message for e in errors] == [
        'mesh axis "tp" appears twice (R["tp"] and V["tp", "dp"]); give each axis one type']
    assert t == SpmdType.of({"dp": VARYING}), t
    t, errors = build([Entry("R", ("dp", "dp"))], axes)
    assert [e.message for e in errors] == [
        'mesh axis "dp" appears twice in R["dp", "dp"]; name it once: R["dp"]']
    assert t == SpmdType.of({"dp": REPLICATE}), t


@pytest.mark.parametrize("text, shown", [
    ("(p * lr)", "p * lr"),  # the plugin's text of a binary operand
    ("((a + b) * c)", "(a + b) * c"),
    ("(a + b) * (c + d)", "(a + b) * (c + d)"),  # the first pair closes before the end
    ("(a, b)", "(a, b)"),  # a tuple keeps its parentheses
    ("(yield x)", "(yield x)"),  # an argument needs them
    ("f(...)", "f(...)"),
    ("x", "x"),
])
def test_operand_text_is_shown_without_doubled_parentheses(text: str, shown: str) -> None:
    assert bare(text) == shown
    p = SpmdType.of({"tp": PARTIAL})
    errors = propagate("relu", [Operand(p, text)]).errors
    assert [e.message for e in errors] == [
        f'Partial on "tp" ({shown}: Tensor[P["tp"]]) cannot go through relu (a non-linear op of a '
        f'pending sum); all_reduce({shown}, "tp", src=P, dst=R) first']


@pytest.mark.parametrize("text, shown", [
    ("x", "x"),
    ("h.float()", "h.float()"),
    ("w[0, :]", "w[0, :]"),  # a comma or colon inside brackets is the subscript's
    ('x.sum("tp")', 'x.sum("tp")'),
    ("(a + b)", "(a + b)"),  # the plugin's text of a binary operand keeps one pair
    ("a + b", "(a + b)"),
    ("-a", "(-a)"),
    ("a if c else b", "(a if c else b)"),
    ("(a, b)", "(a, b)"),  # already one primary
    ("'a b'", "'a b'"),
])
def test_a_suggested_method_call_binds_to_the_whole_operand(text: str, shown: str) -> None:
    """``(a + bd).detach()``: ``a + bd.detach()`` would detach ``bd`` only."""
    assert receiver(text) == shown
    i, v = SpmdType.of({"tp": INVARIANT}), SpmdType.of({"tp": VARYING})
    [error] = propagate("mul", [Operand(i, text, can_grad=True, leaf=True), Operand(v, "v")]).errors
    assert f"or {shown}.detach() if {bare(text)} itself needs no gradient" in error.message, error.message
    x = SpmdType.of({"tp": VARYING})
    result = coll.check_collective("all_reduce", x, ["tp"], VARYING, REPLICATE, x_text=text,
                                   reduce_op="max", can_grad=True)
    assert [e.message.rsplit("; ", 1)[1] for e in result.errors] == [
        f"call it on {shown}.detach() or under torch.no_grad()"]


def test_every_torch_dtype_casts_by_its_kind() -> None:
    """A cast by a dtype argument (engine CAST_OPS: ``to``, ``type``, ``type_as``) is
    non-linear exactly when torch's dtype is neither floating nor complex, for every dtype
    torch defines (as the check mode passes it, ``str(dtype)``; as the plugin reads it, the
    name's last part) and the tensor types of ``x.type(torch.LongTensor)``."""
    import torch

    from spmd_mypy.engine.ops import CAST_FORMAL, cast_is_integral

    dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert len(dtypes) > 20
    for dt in dtypes:
        integral = not (dt.is_floating_point or dt.is_complex)
        for text in (str(dt), "torch._C." + str(dt).split(".")[-1]):
            assert cast_is_integral(text) is integral, text
            spec = call_spec("to", {CAST_FORMAL: text})
            assert (spec.op_class is OpClass.NONLINEAR) is integral, text
    for cls in ("LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"):
        assert cast_is_integral(f"torch.{cls}") and cast_is_integral(f"torch.cuda.{cls}")
    for cls in ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor"):
        assert not cast_is_integral(f"torch.{cls}")
    assert cast_is_integral("builtins.bool") and cast_is_integral("builtins.int")
    assert not cast_is_integral("builtins.float")


@pytest.mark.parametrize("op,values,op_class", [
    ("to", {"dtype": "torch.int64"}, OpClass.NONLINEAR),
    ("to", {"dtype": "torch.bool"}, OpClass.NONLINEAR),
    ("type", {"dtype": "torch.LongTensor"}, OpClass.NONLINEAR),
    ("type_as", {"dtype": "torch.int32"}, OpClass.NONLINEAR),
    ("to", {"dtype": "torch.float16"}, OpClass.LINEAR),
    ("to", {"dtype": "torch.complex64"}, OpClass.LINEAR),
    ("to", {}, OpClass.LINEAR),  # to("cpu"): no dtype
    ("to", {"dtype": UNREAD_VALUE}, OpClass.LINEAR),  # a dtype not read: the rule before casts
    ("type_as", {}, OpClass.LINEAR),  # the static template: its dtype unknown
])
def test_a_cast_to_an_integer_dtype_is_nonlinear(op: str, values: dict, op_class: OpClass) -> None:
    """p.to(torch.int64) truncates each rank's summand: the sum of the truncations is not the
    truncation of the sum (0.6 + 0.6), as p.long(); a floating cast stays linear (P kept).
    The layout is kept either way, and a template keeps its role."""
    spec = call_spec(op, values)
    assert spec.op_class is op_class
    p = SpmdType.of({"tp": PARTIAL})
    ops = [Operand(p, "p")] + ([Operand(SpmdType.of({"tp": VARYING}), "y")] if op == "type_as" else [])
    res = propagate(spec, ops)
    if op_class is OpClass.NONLINEAR:
        assert res.errors[0].code == "spmd-partial-nonlinear"
        assert f"cannot go through {op} (dtype=" in res.errors[0].message
        assert spec.keeps_shard_dims
        v = SpmdType.of({"tp": LocalType(Kind.V, 1)})
        shard = propagate(spec, [Operand(v, "x")] + ops[1:])
        assert not shard.errors and shard.type.get("tp") == LocalType(Kind.V, 1)
    else:
        assert not res.errors and res.type.get("tp") == PARTIAL
