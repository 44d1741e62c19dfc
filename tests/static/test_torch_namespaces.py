"""The signatures the plugin reads from torch.linalg / torch.special / torch.fft docstrings
(spmd_mypy/plugin/torch_namespaces.py), against torch itself: every builtin torch binds
there gets a signature, and the dims the op hooks read (``dim``, ``keepdim``) stand where the
check mode reads them (torch's own formal names, from its testing overrides)."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest
import torch

from spmd_mypy.plugin import torch_namespaces as tn

_NAMESPACES = {"linalg": torch.linalg, "special": torch.special, "fft": torch.fft}


def test_parse_signature_forms() -> None:
    assert tn.parse_signature(
        "\nlinalg.matrix_norm(A, ord='fro', dim=(-2, -1), keepdim=False, *, dtype=None, out=None) -> Tensor\n"
    ) == (["A", "ord", "dim", "keepdim"], ["dtype", "out"], "Tensor")
    assert tn.parse_signature("softmax(input, dim, *, dtype=None) -> Tensor") == (
        ["input", "dim"], ["dtype"], "Tensor")
    assert tn.parse_signature("linalg.svd(A, full_matrices=True, *, driver=None, out=None) -> (Tensor, Tensor, Tensor)") == (
        ["A", "full_matrices"], ["driver", "out"], "(Tensor, Tensor, Tensor)")
    assert tn.parse_signature("linalg.multi_dot(tensors, *, out=None)") == (["tensors"], ["out"], None)
    # not a signature line, or one the parser cannot trust: None (the callable then takes
    # *args and **kwargs only)
    assert tn.parse_signature("Computes the norm of a vector.") is None
    assert tn.parse_signature("f(a, a) -> Tensor") is None
    assert tn.parse_signature("f(a, (b) -> Tensor") is None
    assert tn.parse_signature("f(a='x, b) -> Tensor") is None
    assert tn.parse_signature("") is None


def test_op_name_is_torchs_name_for_the_builtin() -> None:
    assert tn.op_name("torch.linalg.vector_norm") == torch.linalg.vector_norm.__name__
    assert tn.op_name("torch.fft.rfft") == torch.fft.rfft.__name__
    assert tn.op_name("torch.special.expit") == torch.special.expit.__name__
    assert tn.op_name("torch.nn.functional.relu") is None


def _bound_builtins(sub: str) -> list[tuple[str, ast.expr]]:
    """(name, docstring argument) of every ``name = _add_docstr(...)`` in torch.<sub>."""
    path = pathlib.Path(inspect.getfile(_NAMESPACES[sub]))
    out = []
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "_add_docstr"):
            out.append((node.targets[0].id, node.value.args[1]))  # type: ignore[attr-defined]
    return out


def _leftmost_literal(e: ast.expr) -> str | None:
    while True:  # the same walk as docstring_of, over Python's ast
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return e.value
        if isinstance(e, ast.BinOp):
            e = e.left
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "format":
            e = e.func.value
        else:
            return None


@pytest.mark.parametrize("sub", sorted(_NAMESPACES))
def test_every_bound_builtin_gets_a_signature(sub: str) -> None:
    overrides = torch.overrides.get_testing_overrides()
    found = _bound_builtins(sub)
    assert len(found) >= 20, found  # torch binds dozens in each
    checked = 0
    for name, doc_arg in found:
        if name.startswith("_"):
            continue
        doc = _leftmost_literal(doc_arg)
        assert doc is not None, name
        parsed = tn.parse_signature(doc)
        assert parsed is not None, (sub, name, doc.strip().splitlines()[0])
        positional, keyword, _ = parsed
        func = getattr(_NAMESPACES[sub], name)
        assert tn.op_name(f"torch.{sub}.{name}") == func.__name__
        override = overrides.get(func)
        if override is None:
            continue
        params = [p.name for p in inspect.signature(override).parameters.values()]
        for formal in ("dim", "keepdim"):
            if formal in params:
                # the check mode reads it by position from torch's formals, the plugin by
                # the docstring's: the two must agree where a positional argument lands
                assert formal in positional + keyword, (name, formal)
                if formal in positional:
                    assert positional.index(formal) == params.index(formal), (name, formal)
        checked += 1
    assert checked >= 10


def test_decomposition_tuples_match_torch() -> None:
    """Each typed decomposition (tn.DECOMPOSITIONS) gives torch's number of results, and the
    named tuple it is typed as has the fields, in order, of the one torch returns."""
    import re


    stub = (pathlib.Path(torch.__file__).parent / "return_types.pyi").read_text()
    a = torch.randn(4, 4, dtype=torch.float64)
    spd = a @ a.T + 4 * torch.eye(4, dtype=torch.float64)
    for op, (n, cls) in tn.DECOMPOSITIONS.items():
        func = getattr(torch.linalg, op[len("linalg_"):])
        result = func(spd)
        assert len(result) == n, op
        body = re.search(rf"^class {re.escape(cls.rsplit('.', 1)[1])}\(tuple\[.*?n_fields", stub,
                         re.S | re.M)
        assert body is not None, cls
        fields = tuple(re.findall(r"def (\w+)\(self\) ->", body.group(0)))
        assert fields == type(result).__match_args__, (op, fields)
