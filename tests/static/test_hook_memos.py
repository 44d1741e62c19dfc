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


def _pure_call_typer():  # noqa: ANN202
    """An empty CallTyper whose fields a test sets (the pure plugin: a compiled class takes no
    stand-ins for its typed fields)."""
    import pytest

    from spmd_mypy.plugin.calls import CallTyper

    if not isinstance(CallTyper.__dict__.get("typed_result"), type(_pure_call_typer)):
        pytest.skip("the compiled plugin: its fields take no stand-ins")
    return object.__new__(CallTyper)


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


class _Builder:
    """A TypeBuilder's two answers typed_result reads, counting the questions."""

    def __init__(self, tensor: object, inst: object) -> None:
        self.tensor = tensor
        self.inst = inst
        self.asked = 0

    def to_instance(self, t: object) -> object:
        self.asked += 1
        return self.inst

    def from_type(self, typ: object) -> object:
        return "typed" if typ is self.tensor else None


def test_typed_result_is_kept_by_the_identity_of_its_arguments() -> None:
    """CallTyper.typed_result answers a repeat (the same default type and SPMD type objects)
    from its memo, and only where its answer is one of them: an equal but new default is
    asked again, and a container's result is made fresh each time (never kept)."""
    from mypy.nodes import Block, ClassDef, SymbolTable, TypeInfo
    from mypy.types import Instance

    from spmd_mypy.engine.types import Kind, LocalType, SpmdType

    def info(fullname: str) -> TypeInfo:
        name = fullname.rsplit(".", 1)[-1]
        i = TypeInfo(SymbolTable(), ClassDef(name, Block([])), fullname.rsplit(".", 1)[0])
        i._fullname = fullname
        return i

    tensor_info, list_info = info("torch._tensor.Tensor"), info("builtins.list")
    default = Instance(tensor_info, [])
    inst = Instance(tensor_info, [])
    typer = _pure_call_typer()
    builder = _Builder(default, inst)
    typer._types = builder  # type: ignore[assignment]
    typer._typed_results = {}
    t = SpmdType((("tp", LocalType(Kind.V)),))
    assert typer.typed_result(default, t) is inst and builder.asked == 1
    assert typer.typed_result(default, t) is inst and builder.asked == 1  # kept
    other = SpmdType((("tp", LocalType(Kind.V)),))  # equal, another object: asked again
    assert typer.typed_result(default, other) is inst and builder.asked == 2
    fresh = Instance(tensor_info, [])  # an equal but new default: asked again
    builder.tensor = fresh
    assert typer.typed_result(fresh, t) is inst and builder.asked == 3
    plain = Instance(list_info, [])  # not a tensor, no tensor items: the default itself
    assert typer.typed_result(plain, t) is plain and builder.asked == 4
    assert typer.typed_result(plain, t) is plain and builder.asked == 4
    items = Instance(list_info, [fresh])  # list[Tensor]: a new list type each time
    first = typer.typed_result(items, t)
    second = typer.typed_result(items, t)
    assert first is not items and first is not second and first == second
    assert builder.asked == 6


def test_relax_keeps_an_instance_answer_by_identity() -> None:
    """CallTyper._relax answers a parameter type object it relaxed before from its memo (a
    generic callee's new signature at each call keeps its declared parameter types), so the
    wanted types are one tuple; a union is relaxed afresh (the daemon may repoint it)."""
    from mypy.nodes import Block, ClassDef, SymbolTable, TypeInfo
    from mypy.types import Instance, UnionType

    from spmd_mypy.engine.types import Kind, LocalType, SpmdType
    from spmd_mypy.plugin.mypy_types import TENSOR

    def info(fullname: str) -> TypeInfo:
        name = fullname.rsplit(".", 1)[-1]
        i = TypeInfo(SymbolTable(), ClassDef(name, Block([])), fullname.rsplit(".", 1)[0])
        i._fullname = fullname
        return i

    tensor_info = info(TENSOR)
    base = Instance(info("torch._tensor.Tensor"), [])
    tensor_info.bases = [base]
    st = SpmdType((("tp", LocalType(Kind.R)),))

    class Builder:
        asked = 0

        def from_type(self, typ: object) -> object:
            Builder.asked += 1
            return st

    typer = _pure_call_typer()
    typer._types = Builder()  # type: ignore[assignment]
    typer._relaxed_types = {}
    declared = Instance(tensor_info, [])
    first = typer._relax(declared)
    assert first == (base, (st,)) and Builder.asked == 1
    assert typer._relax(declared) is first and Builder.asked == 1  # kept
    other = Instance(tensor_info, [])  # an equal but new type: relaxed again
    assert typer._relax(other) == first and Builder.asked == 2
    union = UnionType([declared, Instance(info("builtins.int"), [])])
    a, b = typer._relax(union), typer._relax(union)
    assert a is not None and b is not None and a is not b and a[1] == b[1] == (st,)


def test_axis_names_keeps_a_read_without_error() -> None:
    """CallTyper._axis_names answers axis names read before without an error from its memo
    (for the same config); an unknown or repeated axis is reported at every call."""
    from types import SimpleNamespace

    from mypy.nodes import StrExpr, TupleExpr


    reported: list[str] = []
    typer = _pure_call_typer()
    config = SimpleNamespace(mesh_axes=("dp", "tp"), aliases={}, axes_setting="mesh_axes")
    typer.plugin = SimpleNamespace(config=config)  # type: ignore[assignment]
    typer.report = lambda ctx, errors, context=None: reported.extend(  # type: ignore[method-assign]
        e.code for e in errors)
    typer._axis_tuples = {}
    both = TupleExpr([StrExpr("dp"), StrExpr("tp")])
    first = typer._axis_names(None, both, None, "all_reduce")  # type: ignore[arg-type]
    assert first == ("dp", "tp") and typer._axis_tuples[("dp", "tp")] == (config, first)
    assert typer._axis_names(None, both, None, "all_reduce") is first  # type: ignore[arg-type]
    for bad in (StrExpr("ep"), TupleExpr([StrExpr("tp"), StrExpr("tp")])):
        for _ in range(2):
            assert typer._axis_names(None, bad, None, "all_reduce") is None  # type: ignore[arg-type]
    assert reported == ["spmd-axis"] * 4 and len(typer._axis_tuples) == 1
    typer.plugin = SimpleNamespace(config=SimpleNamespace(  # type: ignore[assignment]
        mesh_axes=("tp",), aliases={}, axes_setting="mesh_axes"))  # another config: read again
    assert typer._axis_names(None, both, None, "all_reduce") is None  # type: ignore[arg-type]


def test_strict_is_kept_for_the_checker_and_options_asked_last() -> None:
    """CallTyper.strict keeps its answer for the last (checker, Options) pair asked: another
    module's checker, or the same checker with other Options, is asked again."""
    from types import SimpleNamespace

    from spmd_mypy.plugin.calls import _UNTYPED_CODE

    typer = _pure_call_typer()
    typer.plugin = SimpleNamespace(config=SimpleNamespace(  # type: ignore[assignment]
        overrides=[], strict=False))
    typer._last_strict = None
    plain = SimpleNamespace(enabled_error_codes=set())
    enabled = SimpleNamespace(enabled_error_codes={_UNTYPED_CODE})
    a = SimpleNamespace(options=plain, tree=None)
    b = SimpleNamespace(options=enabled, tree=None)
    assert typer.strict(SimpleNamespace(api=a)) is False  # type: ignore[arg-type]
    assert typer._last_strict == (a, plain, False)
    assert typer.strict(SimpleNamespace(api=b)) is True  # type: ignore[arg-type]
    assert typer.strict(SimpleNamespace(api=a)) is False  # type: ignore[arg-type]
    a.options = enabled  # (the same checker with other Options)
    assert typer.strict(SimpleNamespace(api=a)) is True  # type: ignore[arg-type]



# -- the boundary watcher's and the promotion's shortcuts ----------------------------------

BOUNDARIES = textwrap.dedent('''
    from typing import Optional, Tuple

    import torch
    import spmd
    from spmd import I, P, R, S, V, Tensor


    def shard_for_v(x: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
        return x


    def v_for_shard(x: Tensor[V["tp"]]) -> Tensor[S[1, "tp"]]:
        return x


    def p_for_r(x: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
        return x


    def shards_differ(x: Tensor[S[0, "tp"]]) -> Tensor[S[1, "tp"]]:
        return x


    def two_axes(x: Tensor[S[0, "tp"], R["dp"]]) -> Tensor[V["tp"], I["dp"]]:
        return x


    def pair(x: Tensor[S[0, "tp"]], y: Tensor[P["tp"]]) -> Tuple[Tensor[V["tp"]], Tensor[R["tp"]]]:
        return x, y


    def maybe(x: Optional[Tensor[S[0, "tp"]]]) -> Tensor[V["tp"]]:
        assert x is not None
        y: Tensor[V["tp"]] = x
        return y


    def assigned(x: Tensor[S[0, "tp"]], p: Tensor[P["tp"]]) -> None:
        a: Tensor[V["tp"]] = x
        b: Tensor[R["tp"]] = p
        c: Tensor[V["tp"]] = 3  # not a tensor: mypy's error stands
''')


def test_boundary_fits_only_where_the_rule_finds_no_error(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """BoundaryChecker._fits (a boundary's verdict without the texts of its messages) says
    yes only where _compare, asked with any texts, finds no error."""
    import sys

    import pytest
    from mypy import api

    from spmd_mypy.plugin import boundaries

    if not isinstance(boundaries.BoundaryChecker.__dict__.get("_fits"), type(_function)):
        pytest.skip("the compiled plugin: its methods cannot be wrapped")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from mypy_project import write_config

    write_config(tmp_path)
    (tmp_path / "m.py").write_text(BOUNDARIES)
    original = boundaries.BoundaryChecker._fits
    answers: list[bool] = []

    def checked(self, actual, declared):  # noqa: ANN001, ANN202
        fits = original(self, actual, declared)
        try:
            errors = self._compare(actual, declared, None, "x", lambda s: f"the value {s}")
        except boundaries._Unjudged:
            errors = None
        assert not fits or errors == [], (actual, declared, errors)
        answers.append(fits)
        return fits

    monkeypatch.setattr(boundaries.BoundaryChecker, "_fits", checked)
    monkeypatch.chdir(tmp_path)
    out, err, _ = api.run(["--config-file", "mypy.ini", "m.py"])
    assert "INTERNAL ERROR" not in out + err, out + err
    assert True in answers and False in answers, answers
    lines = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    source = BOUNDARIES.splitlines()
    flagged = {source[n - 1].strip() for n in lines}
    # the rule's rejections (and mypy's own error for a value that is no tensor) stand; the
    # values the rule accepts have none
    assert {"return x", "b: Tensor[R[\"tp\"]] = p", "c: Tensor[V[\"tp\"]] = 3  # not a tensor: mypy's error stands",
            "return x, y"} <= flagged, out
    assert "a: Tensor[V[\"tp\"]] = x" not in flagged and "y: Tensor[V[\"tp\"]] = x" not in flagged, out
    assert len([n for n in lines if source[n - 1].strip() == "return x"]) == 3, out  # p_for_r, shards_differ, two_axes


def test_promotion_reads_the_module_once_a_checker() -> None:
    """Promotion.sync reads the module of a checker it did not sync last (as it read it at
    every sync before), and again after forget (a file parsed again)."""
    from types import SimpleNamespace

    from spmd_mypy.plugin.mypy_types import TypeBuilder
    from spmd_mypy.plugin.promotion import Promotion

    options = Options()

    def tree(name: str, source: str) -> object:
        t = parse(source, f"{name}.py", name, Errors(options), options, eager=True)
        t._fullname = name
        return t

    told: list[object] = []
    a = SimpleNamespace(tree=tree("a", "import spmd\nx = 1\n"), msg=SimpleNamespace(errors="ea"))
    b = SimpleNamespace(tree=tree("b", "import os\nx = 1\n"), msg=SimpleNamespace(errors="eb"))
    p = Promotion(TypeBuilder(("tp",), lambda name: None), lambda name: None, told.append,
                  lambda: {})
    for api, module, wanted, new in [(a, "a", True, True), (a, "a", True, False),
                                     (b, "b", False, True), (b, "b", False, False),
                                     (a, "a", True, True), (a, "a", True, False)]:
        before = len(told)
        p.sync(api)
        assert (p.module, p.wanted, len(told) - before) == (module, wanted, int(new))
        fresh = Promotion(TypeBuilder(("tp",), lambda name: None), lambda name: None,
                          lambda errors: None, lambda: {})
        fresh.sync(api)
        assert (fresh.module, fresh.wanted, fresh.promoted) == (p.module, p.wanted, p.promoted)
    p.forget()
    assert p.module is None
    p.sync(a)
    assert told[-1] == "ea" and p.module == "a" and len(told) == 4
    # a checker without a module (no tree): read again at each sync, nothing changes
    p.sync(SimpleNamespace())
    assert p.module == "a" and len(told) == 4
