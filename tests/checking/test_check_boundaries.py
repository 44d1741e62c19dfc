"""Check mode: annotations read at a boundary (``declare_parameters``, ``spmd.checked``)
in the forms the static checker reads them: ``Optional[Tensor[...]]`` / ``Tensor[...] | None``
class attributes (Megatron's optional bias), the fields of a NamedTuple, dataclass or
TypedDict argument or result, ``*args`` / ``**kwargs`` annotated ``Tensor[...]``.

Single process, no process group.  This module has ``from __future__ import annotations``:
every annotation below is a string, evaluated by ``typing.get_type_hints``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, TypedDict, Union, Unpack

import contextlib
import pytest
import torch
import torch.nn as nn

import spmd
from spmd import I, P, R, S, Tensor, V
from spmd_mypy.engine.errors import SpmdTypeError
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, shard

from check_values import mk, ty, typed  # noqa: E402


# --------------------------------------------------------------------------------------
# declare_parameters: Optional class annotations


class _RowLinear(nn.Module):
    weight: Tensor[S[1, "tp"]]
    bias: Optional[Tensor[R["tp"]]]           # typing.Optional
    b2: Tensor[I["tp"]] | None                # PEP 604
    b3: Union[None, Tensor[S[0, "tp"]]]       # None first
    either: Tensor[R["tp"]] | Tensor[I["tp"]]  # two tensor types: neither is declared

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.bias = nn.Parameter(torch.randn(4))
        self.b2 = nn.Parameter(torch.randn(4))
        self.b3 = nn.Parameter(torch.randn(4))
        self.either = nn.Parameter(torch.randn(4))


def test_declare_parameters_reads_optional_annotations() -> None:
    m = _RowLinear()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        assert spmd.typeof(m.weight) == ty(tp=shard(1))
        assert spmd.typeof(m.bias) == ty(tp=REPLICATE)
        assert spmd.typeof(m.b2) == ty(tp=INVARIANT)
        assert spmd.typeof(m.b3) == ty(tp=shard(0))
        assert spmd.typeof(m.either) is None  # no error either: the static checker accepts both


class _InitAnnotated(nn.Module):
    """Parameters annotated where ``__init__`` assigns them (the static checker reads these
    as it reads the class body's): ``declare_parameters`` left them untyped."""

    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.weight: Tensor[S[0, "tp"]] = nn.Parameter(torch.randn(4, 3))
        self.bias: Optional[Tensor[S[0, "tp"]]] = nn.Parameter(torch.randn(4)) if bias else None
        self.scale: "Tensor[R['tp']]" = nn.Parameter(torch.ones(4))
        self.count: int = 0


class _InitAnnotatedChild(_InitAnnotated):
    def __init__(self) -> None:
        super().__init__()
        self.extra: Tensor[I["tp"]] = nn.Parameter(torch.randn(4))


def test_declare_parameters_reads_annotations_in_init() -> None:
    m = _InitAnnotatedChild()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        assert spmd.typeof(m.weight) == ty(tp=shard(0))
        assert spmd.typeof(m.bias) == ty(tp=shard(0))
        assert spmd.typeof(m.scale) == ty(tp=REPLICATE)
        assert spmd.typeof(m.extra) == ty(tp=INVARIANT)
        with pytest.raises(SpmdTypeError, match="spmd-invariant-mix"):
            m.extra + m.scale


def test_an_optional_bias_added_before_the_reduction_is_an_error() -> None:
    """The row-parallel linear's bias added to the pending sum (each rank adds it: the sum
    counts it tp times) passed the check mode while the Optional bias stayed untyped."""
    m = _RowLinear()
    with spmd.typecheck():
        spmd.declare_parameters(m)
        h = typed(mk(2, 4), Tensor[V["tp"]])
        partial = spmd.linear(h, m.weight, out_partial_axes="tp")
        assert spmd.typeof(partial) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError) as e:
            partial + m.bias
        assert "m.bias" in str(e.value) or "self.bias" in str(e.value), str(e.value)


# --------------------------------------------------------------------------------------
# spmd.checked: Optional results, NamedTuple / dataclass / TypedDict fields, *args, **kwargs


class _Out(NamedTuple):
    out: Tensor[S[1, "tp"]]
    loss: Tensor[P["tp"]]
    n: int = 0


@dataclass
class _Params:
    w: Tensor[I["tp"]]
    b: Optional[Tensor[I["tp"]]] = None


class _Batch(TypedDict):
    x: Tensor[V["tp"]]
    y: Tensor[V["tp"]]


@spmd.checked
def _forward(x: torch.Tensor, loss: torch.Tensor) -> _Out:
    return _Out(x, loss)


@spmd.checked
def _maybe(x: torch.Tensor) -> Optional[Tensor[R["tp"]]]:
    return x


@spmd.checked
def _step(o: _Out, p: _Params, b: _Batch) -> None:
    pass


@spmd.checked
def _star(*args: Tensor[P["tp"]], **kw: Tensor[V["tp"]]) -> None:
    pass


@spmd.checked
def _unpacked(**kw: Unpack[_Batch]) -> None:
    pass


@spmd.checked
def _either(x: Tensor[R["tp"]] | Tensor[P["tp"]]) -> Tensor[R["tp"]] | Tensor[P["tp"]]:
    return x


def test_checked_checks_a_namedtuple_results_fields() -> None:
    with spmd.typecheck():
        x, loss = mk(), mk(())
        out = _forward(x, loss)  # untyped fields are given their annotations
        assert spmd.typeof(out.out) == ty(tp=shard(1))
        assert spmd.typeof(out.loss) == ty(tp=PARTIAL)
        with pytest.raises(SpmdTypeError) as e:
            _forward(typed(mk(), Tensor[R["tp"]]), loss)
        assert e.value.code == "spmd-annotation"
        assert str(e.value).startswith(
            'field _Out.out of the result of _forward is annotated Tensor[S[1, "tp"]] but '
            '_forward(<...>).out is R on "tp"'), str(e.value)
        with pytest.raises(SpmdTypeError, match="field _Out.loss of the result of _forward"):
            _forward(mk(), typed(mk(()), Tensor[R["tp"]]))


def test_checked_checks_an_optional_result_not_a_union_of_two_tensor_types() -> None:
    with spmd.typecheck():
        assert _maybe(None) is None
        assert spmd.typeof(_maybe(mk())) == ty(tp=REPLICATE)
        with pytest.raises(SpmdTypeError, match="the result of _maybe is annotated"):
            _maybe(typed(mk(), Tensor[P["tp"]]))
        # either type passes (the static checker accepts both); an untyped value stays so
        for t in (Tensor[R["tp"]], Tensor[P["tp"]]):
            x = typed(mk(), t)
            assert _either(x) is x
        assert spmd.typeof(_either(mk())) is None


def test_checked_checks_record_arguments_fields() -> None:
    with spmd.typecheck():
        o = _Out(typed(mk(), Tensor[S[1, "tp"]]), typed(mk(()), Tensor[P["tp"]]))
        p = _Params(mk())
        b: _Batch = {"x": mk(), "y": typed(mk(), Tensor[S[0, "tp"]])}
        _step(o, p, b)
        assert spmd.typeof(p.w) == ty(tp=INVARIANT)  # untyped: given the field's type
        assert spmd.typeof(b["x"]) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            _step(o._replace(loss=typed(mk(()), Tensor[R["tp"]])), p, b)
        assert e.value.code == "spmd-annotation"
        assert str(e.value).startswith(
            "field _Out.loss of argument 'o' of _step is annotated Tensor[P[\"tp\"]] but "
            'o.loss is R on "tp"'), str(e.value)
        with pytest.raises(SpmdTypeError,
                           match=r"field _Params.b of argument 'p' of _step is annotated"):
            _step(o, _Params(p.w, typed(mk(), Tensor[V["tp"]])), b)
        with pytest.raises(SpmdTypeError) as e:
            _step(o, p, {"x": typed(mk(), Tensor[P["tp"]]), "y": b["y"]})
        assert str(e.value).startswith(
            'item _Batch["x"] of argument \'b\' of _step is annotated Tensor[V["tp"]] but '
            'b["x"] is P on "tp"'), str(e.value)


def test_checked_checks_star_args_and_kwargs() -> None:
    with spmd.typecheck():
        u, v = mk(), mk()
        _star(typed(mk(), Tensor[P["tp"]]), u, z=v)
        assert spmd.typeof(u) == ty(tp=PARTIAL) and spmd.typeof(v) == ty(tp=VARYING)
        with pytest.raises(SpmdTypeError) as e:
            _star(u, typed(mk(), Tensor[R["tp"]]))
        assert e.value.code == "spmd-annotation"
        assert "item 1 of argument '*args' of _star is annotated" in str(e.value), str(e.value)
        with pytest.raises(SpmdTypeError) as e:
            _star(z=typed(mk(), Tensor[I["tp"]]))
        assert "argument 'z' (in '**kw') of _star is annotated" in str(e.value), str(e.value)
        with pytest.raises(SpmdTypeError, match=r'item _Batch\["y"\] of argument \'kw\' of _unpacked'):
            _unpacked(x=mk(), y=typed(mk(), Tensor[P["tp"]]))



# --------------------------------------------------------------------------------------
# `type` aliases (PEP 695, Python 3.12: a typing.TypeAliasType; typing_extensions'
# TypeAliasType is the same object on 3.11): get_type_hints leaves them as they are, so
# the check mode read no type through them (a missing all_reduce passed it, wrong
# gradients; the static checker reads them)

from typing_extensions import TypeAliasType, TypeVar  # noqa: E402

_T = TypeVar("_T")
_Act = TypeAliasType("_Act", Tensor[I["tp"]])
_Part = TypeAliasType("_Part", Tensor[P["tp"]])
_PartAgain = TypeAliasType("_PartAgain", _Part)              # an alias of an alias
_RowW = TypeAliasType("_RowW", Tensor[S[1, "tp"]])
_Pair = TypeAliasType("_Pair", tuple[_T, _T], type_params=(_T,))  # generic
_MaybeAct = TypeAliasType("_MaybeAct", Optional[_Act])


class _AliasedRow(nn.Module):
    weight: _RowW
    bias: _MaybeAct

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.bias = nn.Parameter(torch.randn(4))


@spmd.checked
def _to_act(x: _Part) -> _Act:
    return x


@spmd.checked
def _pair(x: torch.Tensor) -> _Pair[_PartAgain]:
    return x, x


def test_type_aliases_are_read_at_every_boundary() -> None:
    with spmd.typecheck():
        m = _AliasedRow()
        spmd.declare_parameters(m)
        assert spmd.typeof(m.weight) == ty(tp=shard(1))
        assert spmd.typeof(m.bias) == ty(tp=INVARIANT)
        x = mk()
        with pytest.raises(SpmdTypeError, match="the result of _to_act is annotated"):
            _to_act(x)  # P returned for I: the all_reduce is missing
        assert spmd.typeof(x) == ty(tp=PARTIAL)  # the argument's alias declared it
        a, b = _pair(mk())
        assert spmd.typeof(a) == ty(tp=PARTIAL) and spmd.typeof(b) == ty(tp=PARTIAL)
        assert spmd.typeof(spmd.declare(mk(), _PartAgain)) == ty(tp=PARTIAL)
    assert spmd.grad_type[_Act] == spmd.grad_type[Tensor[I["tp"]]]


# --------------------------------------------------------------------------------------
# declare_parameters on an object that is no module: an optimizer's state in annotated
# attributes (it raised AttributeError: named_modules; the state then took whatever was
# written into it: Adafactor's factored moment lerp'd with a shard-local mean, wrong numbers)


class _FactoredState:
    col: Tensor[R["tp"]]
    rows: list[Tensor[I["tp"]]]
    exp_avg: dict[str, Tensor[S[0, "tp"]]]
    pair: tuple[Tensor[I["tp"]], Tensor[V["tp"]]]

    def __init__(self) -> None:
        self.col = torch.zeros(4)
        self.rows = [torch.zeros(4), torch.zeros(4)]
        self.exp_avg = {"w1": torch.zeros(4, 4)}
        self.pair = (torch.zeros(4), torch.zeros(4))
        self.step = 0


def test_declare_parameters_declares_an_objects_annotated_tensors() -> None:
    st = _FactoredState()
    with spmd.typecheck():
        assert spmd.declare_parameters(st) is st
        assert spmd.typeof(st.col) == ty(tp=REPLICATE)
        assert all(spmd.typeof(r) == ty(tp=INVARIANT) for r in st.rows)
        assert spmd.typeof(st.exp_avg["w1"]) == ty(tp=shard(0))
        assert [spmd.typeof(t) for t in st.pair] == [ty(tp=INVARIANT), ty(tp=VARYING)]
        shard_mean = typed(mk(4, 4), Tensor[S[0, "tp"]]).mean(0)  # V: a mean over the shard
        with pytest.raises(SpmdTypeError):
            st.col.lerp_(shard_mean, 0.1)


class _Untyped:
    def __init__(self) -> None:
        self.w = torch.zeros(4)  # a tensor, but no annotation: nothing to declare


@pytest.mark.parametrize("checking", [True, False])
def test_declare_parameters_of_something_that_declares_nothing_is_a_type_error(
        checking: bool) -> None:
    """``declare_parameters(3)``, of None, of a list of modules, of an object whose class
    annotates no typed tensor: a TypeError that says what it takes (it did nothing without a
    word, and every parameter stayed untyped in check mode), in check mode and outside."""
    with spmd.typecheck() if checking else contextlib.nullcontext():
        for bad, name in ((3, "int"), (None, "NoneType"), ([torch.nn.Linear(2, 2)], "list"),
                          (_Untyped(), "_Untyped")):
            with pytest.raises(TypeError) as e:
                spmd.declare_parameters(bad)
            assert f"not {name}: nothing would be declared" in str(e.value)
            assert "pass the model (each module of a list)" in str(e.value)
        st = _FactoredState()
        assert spmd.declare_parameters(st) is st  # annotated: fine
        lin = torch.nn.Linear(2, 2)
        assert spmd.declare_parameters(lin) is lin  # a module: fine, annotated or not
