"""The hook dispatch's cheap answers to mypy's questions are the tests they stand for:
``_unchecked_callee`` is ``startswith(NO_SIGNATURE_CHECK)``; the attribute kinds are the
attribute sets'."""

from __future__ import annotations

from spmd_mypy.plugin import dispatch


def test_unchecked_callee_is_the_prefix_test() -> None:
    assert all(p.endswith(".") and p.count(".") == 1 for p in dispatch.NO_SIGNATURE_CHECK)
    names = ["torch.nn.functional.linear", "torch", "torchvision.ops.nms", "spmd.all_reduce",
             "", ".", "builtins.", "os.path.join", "mod.f", "typing_extensions.Self",
             "x.torch.y", ".torch", "torch..x", "mathx.f", "math.sqrt", "m"]
    names += [p + "f" for p in dispatch.NO_SIGNATURE_CHECK] + [p[:-1] for p in dispatch.NO_SIGNATURE_CHECK]
    for n in names:
        assert dispatch._unchecked_callee(n) == n.startswith(dispatch.NO_SIGNATURE_CHECK), n


def test_attribute_kinds_are_the_sets() -> None:
    kinds = dispatch._ATTRIBUTE_KINDS
    for names, kind in ((dispatch._GRAD_ATTRS, dispatch._GRAD),
                        (dispatch._TRANSPOSE_ATTRS, dispatch._TRANSPOSE),
                        (dispatch._DATA_ATTRS, dispatch._DATA),
                        (dispatch._COMPLEX_PART_ATTRS, dispatch._COMPLEX_PART)):
        assert names and all(kinds[n] == kind for n in names)
    assert len(kinds) == (len(dispatch._GRAD_ATTRS) + len(dispatch._TRANSPOSE_ATTRS)
                          + len(dispatch._DATA_ATTRS) + len(dispatch._COMPLEX_PART_ATTRS))
    assert not any(n.startswith("torch.return_types.") for n in kinds)
    assert dispatch._NOT_HOOKED not in kinds.values()
