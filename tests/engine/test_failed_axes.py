"""An axis left unknown by an error stays unknown through later ops (``SpmdType.failed``).

An axis a value was never annotated on is skipped by the rule (gradual), so the other
operands decide it: after ``y = gelu(p)`` (an error on "tp") the old result, simply unknown
on "tp", made ``y + r`` R there and ``all_reduce(y + r, src=P, ...)`` a second, follow-on
error.  A failed axis absorbs instead: no operand decides it and no second error is raised.
"""

from __future__ import annotations

from spmd_mypy.engine.collectives import check_collective
from spmd_mypy.engine.ops import Operand, check_backward, propagate
from spmd_mypy.engine.types import INVARIANT, PARTIAL, REPLICATE, VARYING, SpmdType


def _t(failed: tuple[str, ...] = (), **axes: object) -> SpmdType:
    return SpmdType.of(axes, failed=failed)  # type: ignore[arg-type]


def test_error_marks_the_axis_failed_and_keeps_the_others() -> None:
    res = propagate("gelu", [Operand(_t(tp=PARTIAL, dp=VARYING), "p")])
    assert [e.code for e in res.errors] == ["spmd-partial-nonlinear"]
    assert res.type == _t(("tp",), dp=VARYING)
    assert res.type.get("tp") is None and res.type.failed == ("tp",)


def test_failed_axis_absorbs_without_a_second_error() -> None:
    y = _t(("tp",), dp=VARYING)
    for op, other in (("add", REPLICATE), ("mul", PARTIAL), ("add", INVARIANT), ("gelu", None)):
        operands = [Operand(y, "y")] + ([Operand(_t(tp=other, dp=VARYING), "o")] if other else [])
        res = propagate(op, operands)
        assert res.errors == [], (op, other)
        assert res.type == _t(("tp",), dp=VARYING), (op, other)


def test_other_axes_are_still_checked() -> None:
    y = _t(("tp",), dp=VARYING)
    res = propagate("add", [Operand(y, "y"), Operand(_t(tp=REPLICATE, dp=INVARIANT), "w")])
    assert [e.code for e in res.errors] == ["spmd-invariant-mix"]
    assert res.type.failed == ("dp", "tp")


def test_a_failed_only_value_is_not_untyped_in_strict_mode() -> None:
    res = propagate("add", [Operand(_t(("tp",)), "y"), Operand(_t(tp=REPLICATE), "r")], strict=True)
    assert res.errors == [] and res.type == _t(("tp",))
    res = propagate("add", [Operand(SpmdType(), "u"), Operand(_t(tp=REPLICATE), "r")], strict=True)
    assert [e.code for e in res.errors] == ["spmd-untyped"]


def test_a_collective_states_the_axis_again() -> None:
    z = _t(("tp",), dp=VARYING)
    res = check_collective("all_reduce", z, ("tp",), PARTIAL, REPLICATE)
    assert res.errors == []
    assert res.type == _t(tp=REPLICATE, dp=VARYING) and res.type.failed == ()
    res = check_collective("all_gather", z, ("dp",), VARYING, REPLICATE)
    assert res.errors == [] and res.type == _t(("tp",), dp=REPLICATE)


def test_backward_takes_a_failed_axis_on_trust() -> None:
    assert check_backward(Operand(_t(("tp",), dp=PARTIAL), "loss")) == []


def test_a_known_axis_is_never_also_failed() -> None:
    t = SpmdType.of({"tp": REPLICATE}, failed=("tp", "dp"))
    assert t.failed == ("dp",)
    assert t.replace("dp", VARYING).failed == ()
    assert t.replace("tp", None).failed == ("dp",)
    assert t != SpmdType.of({"tp": REPLICATE})
