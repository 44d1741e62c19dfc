"""engine.dtensor: DTensor placements as local SPMD types, and the from_local / local_map
boundary checks (measured on gloo ranks in tests/runtime/rt_dtensor.py)."""

from __future__ import annotations

import pytest

from spmd_mypy.engine.dtensor import (check_from_local, check_placements_for, placement_type,
                                      placements_type)
from spmd_mypy.engine.types import (INVARIANT, PARTIAL, REPLICATE, VARYING, SpmdType,
                                    format_type, shard)


@pytest.mark.parametrize("placement,grad,want", [
    ("Replicate()", None, INVARIANT),
    ("Replicate()", "Replicate()", INVARIANT),
    ("Replicate()", "Partial()", REPLICATE),
    ("Shard(1)", None, shard(1)),
    ("Partial()", None, PARTIAL),
    ("Partial()", "Replicate()", PARTIAL),
    ("Partial()", "Partial()", None),      # a pending sum whose gradient is one too: no type
    ("Shard(0)", "Replicate()", None),
    ("Replicate()", "Shard(0)", None),
    (None, None, None),                    # Partial("avg"), a strided shard: no meaning
])
def test_placement_type(placement, grad, want):
    assert placement_type(placement, grad) == want


def test_placements_type_names_only_the_mesh_axes():
    t = placements_type(("dp", None, "tp"), ["Shard(0)", "Replicate()", None])
    assert format_type(t) == 'Tensor[S[0, "dp"]]'


def _msg(have, placements, grads=None, axes=("tp",), can_grad=True):
    errors = check_from_local(SpmdType.of(have), axes, placements, grads, x_text="h",
                              where="h passed to DTensor.from_local", can_grad=can_grad)
    return errors[0].message if errors else None


def test_from_local_fixes():
    m = _msg({"tp": PARTIAL}, ["Replicate()"])
    assert 'use all_reduce(h, "tp", src=P, dst=I)' in m and "placements=[Partial()]" in m
    m = _msg({"tp": REPLICATE}, ["Replicate()"])
    assert 'use reinterpret(h, "tp", src=R, dst=I)' in m and "grad_placements" not in m
    m = _msg({"tp": INVARIANT}, ["Partial()"])
    assert "placements=[Replicate()]" in m
    m = _msg({"tp": shard(1)}, ["Shard(0)"])
    assert "placements=[Shard(1)]" in m


def test_from_local_accepts():
    assert _msg({"tp": INVARIANT, "dp": shard(0)}, ["Replicate()"]) is None
    assert _msg({"tp": VARYING}, ["Shard(0)"]) is None        # the placement names the dim
    assert _msg({"tp": REPLICATE}, ["Replicate()"], ["Partial()"]) is None
    assert _msg({"tp": PARTIAL}, [None]) is None  # no meaning: unchecked
    assert _msg({"dp": PARTIAL}, ["Replicate()"]) is None     # an axis not on the mesh


def test_from_local_gradient_free_r_is_i():
    """Where no gradient flows (no_grad, a detached value) R and I hold the same values:
    either fits Replicate() with or without grad_placements=[Partial()]; other kinds and
    shard dims are still checked, and with a gradient R is not I."""
    assert _msg({"tp": REPLICATE}, ["Replicate()"], can_grad=False) is None
    assert _msg({"tp": INVARIANT}, ["Replicate()"], ["Partial()"], can_grad=False) is None
    assert _msg({"tp": REPLICATE, "dp": shard(0)}, ["Shard(0)", "Replicate()"],
                axes=("dp", "tp"), can_grad=False) is None
    assert _msg({"tp": REPLICATE}, ["Replicate()"]) is not None
    assert "src=P, dst=I" in _msg({"tp": PARTIAL}, ["Replicate()"], can_grad=False)
    assert "placements=[Replicate()]" in _msg({"tp": INVARIANT}, ["Partial()"], can_grad=False)
    m = _msg({"tp": REPLICATE, "dp": shard(1)}, ["Shard(0)", "Replicate()"], axes=("dp", "tp"),
             can_grad=False)
    assert m is not None and 'it is S(1) on "dp" where S(0) is needed;' in m
    assert "reinterpret" not in m and "placements=[Shard(1), Replicate()]" in m


def test_local_map_in_placements():
    want = SpmdType.of({"tp": shard(0)})
    errors = check_placements_for(want, ("tp",), ["Shard(1)"], None, where="parameter 'w'",
                                  placements_arg="in_placements[1]")
    assert "write in_placements[1] as [Shard(0)]" in errors[0].message
    assert check_placements_for(want, ("tp",), ["Shard(0)"], None, where="w",
                                placements_arg="in_placements[1]") == []
    r = SpmdType.of({"tp": REPLICATE})
    errors = check_placements_for(r, ("tp",), ["Replicate()"], None, where="w",
                                  placements_arg="in_placements[0]")
    assert "in_grad_placements entry as [Partial()]" in errors[0].message
