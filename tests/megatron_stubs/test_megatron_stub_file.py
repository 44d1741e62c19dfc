"""The committed stub of megatron.core.tensor_parallel.mappings: generated from the mapping
table, and faithful to the real module of megatron-core 0.19.2 (read from the wheel), so that
every unchanged import and call still resolves.  No mypy run here (see test_megatron_stubs.py).
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_stub_env as stub_env  # noqa: E402

from spmd_mypy.migrate import stubgen  # noqa: E402
from spmd_mypy.migrate.table import MAPPINGS, Role  # noqa: E402

megatron_wheel = stub_env.load_megatron_core_test_module().megatron_wheel

STUB = stub_env.REPO / "stubs" / stubgen.STUB_RELATIVE_PATH
PACKAGE = stub_env.REPO / "stubs" / "megatron-stubs"
DOC = stub_env.REPO / "docs" / "megatron.md"
DOC_MARKER = "<!-- generated from spmd_mypy/migrate/stubgen.py: signature_table() -->"


@pytest.fixture(scope="module")
def real_module(megatron_wheel: Path) -> ast.Module:
    with zipfile.ZipFile(megatron_wheel) as wheel:
        return ast.parse(wheel.read("megatron/core/tensor_parallel/mappings.py"))


@pytest.fixture(scope="module")
def stub_module() -> ast.Module:
    return ast.parse(STUB.read_text())


def _params(node: ast.FunctionDef) -> list[tuple[str, str, str | None]]:
    """(name, kind, default source) of each parameter."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, "positional-only" if p in a.posonlyargs else "positional", ast.unparse(d) if d else None)
           for p, d in zip(positional, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, "*args", None))
    out += [(p.arg, "keyword-only", ast.unparse(d) if d else None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**kwargs", None))
    return out


def _functions(module: ast.Module) -> dict[str, list[ast.FunctionDef]]:
    found: dict[str, list[ast.FunctionDef]] = {}
    for node in module.body:
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, []).append(node)
    return found


def _top_level_names(module: ast.Module) -> set[str]:
    """The names a module defines at its top level (through if/try blocks, not into functions)."""
    names: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)

    visit(module.body)
    return names


def test_committed_stubs_are_the_generated_ones() -> None:
    for relative, text in stubgen.files().items():
        assert (stub_env.REPO / "stubs" / relative).read_text() == text, (
            f"{relative} is stale: run python -m spmd_mypy.migrate.stubgen")
    assert stubgen.main(["--check", "--output", str(stub_env.REPO / "stubs")]) == 0


def test_package_is_partial_and_holds_only_the_generated_files() -> None:
    assert (PACKAGE / "py.typed").read_bytes() == b"partial\n"
    on_disk = sorted(p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    assert on_disk == sorted([*(p.as_posix() for p in stubgen.files()), "megatron-stubs/py.typed"])
    # `megatron` is a namespace package: its stub defines nothing.
    assert ast.parse((PACKAGE / "__init__.pyi").read_text()).body == []


def _imported(module: ast.Module, package: str) -> dict[str, str]:
    """Name -> the qualified name it is imported from (``import a.b.c`` binds ``c`` as a
    submodule of ``package`` when a.b is the package, as the real __init__ files use it)."""
    found: dict[str, str] = {}
    for node in module.body:
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base) if node.level else node.module
            for alias in node.names:
                found[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parent, _, last = alias.name.rpartition(".")
                if parent == package:
                    found[last] = alias.name
    return found


def _all(module: ast.Module) -> list[str]:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _aliases(module: ast.Module) -> set[str]:
    """``mpu = parallel_state``: a module-level name bound to another name."""
    return {ast.unparse(n) for n in module.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
            and all(isinstance(t, ast.Name) for t in n.targets)}


@pytest.mark.parametrize("package", sorted(stubgen.PACKAGE_INITS))
def test_package_inits_mirror_the_real_ones(megatron_wheel: Path, package: str) -> None:
    real_path = "/".join(package.split(".")) + "/__init__.py"
    with zipfile.ZipFile(megatron_wheel) as wheel:
        real = ast.parse(wheel.read(real_path))
    stub = ast.parse((stub_env.REPO / "stubs" / stubgen.init_path(package)).read_text())
    real_imports = {k: v for k, v in _imported(real, package).items() if k != "torch"}
    assert _imported(stub, package) == real_imports
    assert _all(stub) == _all(real)
    assert _aliases(stub) == _aliases(real)
    # Nothing else: the real file defines no function or class.
    assert not [n for n in real.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def test_stub_declares_every_name_of_the_real_module(real_module: ast.Module, stub_module: ast.Module) -> None:
    # `import torch` is not an attribute anyone imports from mappings.
    real = _top_level_names(real_module) - {"torch"}
    missing = real - _top_level_names(stub_module)
    assert not missing, f"names of mappings.py the stub does not declare: {sorted(missing)}"
    real_classes = {n.name: n for n in real_module.body if isinstance(n, ast.ClassDef)}
    stub_classes = {n.name: n for n in stub_module.body if isinstance(n, ast.ClassDef)}
    for name, real_class in real_classes.items():
        real_methods = {m.name: _params(m) for m in real_class.body if isinstance(m, ast.FunctionDef)}
        stub_methods = {m.name: _params(m) for m in stub_classes[name].body if isinstance(m, ast.FunctionDef)}
        assert stub_methods == real_methods, name


def test_every_function_keeps_its_real_parameters(real_module: ast.Module, stub_module: ast.Module) -> None:
    real, stub = _functions(real_module), _functions(stub_module)
    flags = {m.megatron_name: m.param(Role.DST_FLAG) for m in MAPPINGS}
    for name, (real_def,) in real.items():
        expected = _params(real_def)
        assert name in stub, f"the stub does not define {name}"
        for i, stub_def in enumerate(stub[name]):
            got = _params(stub_def)
            flag = flags.get(name)
            if flag is not None and len(stub[name]) > 1:
                # An overload for a non-default literal (or any bool) drops only the flag's default.
                got = [(n, k, flag.default if n == flag.name and d is None else d) for n, k, d in got]
            assert got == expected, f"{name} (definition {i + 1})"


def test_table_records_the_real_signatures(real_module: ast.Module) -> None:
    real = _functions(real_module)
    for m in MAPPINGS:
        (real_def,) = real[m.megatron_name]
        assert [(p.name, p.default) for p in m.params] == [(n, d) for n, _, d in _params(real_def)]


def test_doc_embeds_the_generated_signature_table() -> None:
    text = DOC.read_text()
    assert DOC_MARKER in text
    after = text.split(DOC_MARKER, 1)[1].lstrip("\n")
    assert after.startswith(stubgen.signature_table() + "\n"), (
        "docs/megatron.md is stale: paste the output of "
        'python -c "from spmd_mypy.migrate.stubgen import signature_table; print(signature_table())"')
