"""The stub package (what mypy reads for ``import spmd``) declares every public function of
the runtime with the same parameters: a keyword the runtime takes and the stub lacks is a
false ``[call-arg]`` error on correct code (``spmd.convert(..., sizes=[...])`` was one)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import spmd

STUB = Path(__file__).resolve().parents[2] / "stubs" / "spmd-stubs" / "__init__.pyi"


def _stub_functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(STUB.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def _params(f: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) in order, as inspect names the kinds."""
    a = f.args
    out: list[tuple[str, str, bool]] = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, p in enumerate(positional):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((p.arg, kind, i >= first_default))
    if a.vararg is not None:
        out.append((a.vararg.arg, "VAR_POSITIONAL", False))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "KEYWORD_ONLY", d is not None))
    if a.kwarg is not None:
        out.append((a.kwarg.arg, "VAR_KEYWORD", False))
    return out


FUNCTIONS = sorted(_stub_functions())


def test_the_stub_declares_functions():
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "convert",
            "reinterpret", "redistribute", "einsum", "declare"} <= set(FUNCTIONS)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_stub_and_runtime_take_the_same_parameters(name: str) -> None:
    runtime = getattr(spmd, name)
    sig = inspect.signature(runtime)
    have = [(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
            for p in sig.parameters.values()]
    stub = _params(_stub_functions()[name])
    # names and kinds agree; a parameter the stub makes required (``dst``) may have a
    # runtime default that only raises a clearer error
    assert [(n, k) for n, k, _ in stub] == [(n, k) for n, k, _ in have], name
    for (n, _, stub_default), (_, _, rt_default) in zip(stub, have):
        assert rt_default or not stub_default, f"{name}({n}=...): the stub has a default the runtime lacks"
