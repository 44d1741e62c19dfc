"""The parts under the command: locating nodes, adding imports, resolving names."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from spmd_mypy.migrate.bindings import BindingCollector, megatron_mapping
from spmd_mypy.migrate.imports import add_spmd_imports
from spmd_mypy.migrate import locate
from spmd_mypy.migrate.locate import Locator
from spmd_mypy.migrate.table import MAPPINGS_BY_NAME

GOLDEN = Path(__file__).parent / "golden"

TRICKY_POSITIONS = '''\
import os, sys
from a import (b,
    c)
@decorate(copy(x))
def f(café="é", *args):
    """é"""
    s = "ééé"; copy(x)(copy(y)); copy(
        z)
    return [copy(t) for t in copy(u)], f"{copy(v)}"
class K(copy(w)):
    import json
'''


@pytest.mark.parametrize(
    "source",
    [TRICKY_POSITIONS, *(p.read_text() for p in sorted(GOLDEN.glob("*.input.py")))],
    ids=["tricky", *(p.name for p in sorted(GOLDEN.glob("*.input.py")))],
)
def test_locator_agrees_with_libcst_positions(source: str) -> None:
    module = cst.parse_module(source)
    locator = Locator(module, source)
    collector = BindingCollector(Path("/x/m.py"), locator)
    module.visit(collector)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)

    class Every(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.checked = 0

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Call, cst.Import, cst.ImportFrom)):
                start = expected[node].start
                assert locator.position(node) == (start.line, start.column + 1), cst.Module([]).code_for_node(node)
                self.checked += 1
            return True

    every = Every()
    module.visit(every)
    assert every.checked > 0


@pytest.mark.parametrize("ast_positions", [None, {"call:copy": [(1, 0)]}], ids=["no-ast", "ast-disagrees"])
def test_locator_falls_back_to_libcst(monkeypatch: pytest.MonkeyPatch, ast_positions: object) -> None:
    """When ast cannot parse the file (syntax newer than this Python) or counts other nodes."""
    monkeypatch.setattr(locate, "_ast_positions", lambda code: ast_positions)
    source = "from m import copy\n\ny = copy(x) + copy(z)\n"
    module = cst.parse_module(source)
    locator = Locator(module, source)
    module.visit(BindingCollector(Path("/x/m.py"), locator))
    second = module.body[1].body[0].value.right
    assert locator.position(second) == (3, 15)


def added(source: str, *, need_module: bool = True, names: set[str] = frozenset({"I", "R"})) -> str:  # type: ignore[assignment]
    return add_spmd_imports(cst.parse_module(source), need_module=need_module, names=set(names)).code


def test_imports_go_after_the_leading_imports() -> None:
    source = '"""Doc."""\nfrom __future__ import annotations\n\nimport os\n\ntry:\n    import x\nexcept ImportError:\n    x = None\n'
    assert added(source) == (
        '"""Doc."""\nfrom __future__ import annotations\n\nimport os\nimport spmd\nfrom spmd import I, R\n\n'
        "try:\n    import x\nexcept ImportError:\n    x = None\n"
    )


def test_imports_without_other_imports_go_after_the_docstring_or_first() -> None:
    assert added('"""Doc."""\n\nX = 1\n') == '"""Doc."""\n\nimport spmd\nfrom spmd import I, R\n\nX = 1\n'
    assert added("# header\nX = 1\n") == "# header\nimport spmd\nfrom spmd import I, R\n\nX = 1\n"
    assert added("") == "import spmd\nfrom spmd import I, R\n"


def test_imports_are_not_repeated_and_names_are_merged() -> None:
    assert added("import spmd\nfrom spmd import I, R\n") == "import spmd\nfrom spmd import I, R\n"
    assert added("import spmd\nfrom spmd import P, Tensor\n") == "import spmd\nfrom spmd import I, P, R, Tensor\n"
    assert added("from spmd import Tensor as T\n", need_module=False) == "from spmd import Tensor as T, I, R\n"
    assert added("from spmd import (\n    P,\n    Tensor,\n)\n", need_module=False) == (
        "from spmd import (\n    I,\n    P,\n    R,\n    Tensor,\n)\n"
    )
    # spmd imported inside a function only does not count.
    assert added("def f():\n    import spmd\n", names=set()) == "import spmd\n\ndef f():\n    import spmd\n"


def resolve(source: str, call: str, path: str = "/x/pkg/m.py"):
    module = cst.parse_module(source + f"\n{call}\n")
    locator = Locator(module, module.code)
    collector = BindingCollector(Path(path), locator)
    module.visit(collector)
    func = module.body[-1].body[0].value.func
    return megatron_mapping(collector.bindings, func)


@pytest.mark.parametrize(
    "source, call",
    [
        ("from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region", "copy_to_tensor_model_parallel_region(x)"),
        ("from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region as c", "c(x)"),
        ("import megatron.core.tensor_parallel as tp", "tp.copy_to_tensor_model_parallel_region(x)"),
        ("import megatron.core", "megatron.core.tensor_parallel.mappings.copy_to_tensor_model_parallel_region(x)"),
        ("from megatron.core import tensor_parallel", "tensor_parallel.mappings.copy_to_tensor_model_parallel_region(x)"),
        ("from megatron import mpu", "mpu.copy_to_tensor_model_parallel_region(x)"),
        ("from megatron.core.tensor_parallel.mappings import *", "copy_to_tensor_model_parallel_region(x)"),
    ],
)
def test_megatron_functions_are_recognised(source: str, call: str) -> None:
    mapping, why_not = resolve(source, call)
    assert mapping is not None and mapping.megatron_name == "copy_to_tensor_model_parallel_region", why_not


def test_relative_imports_resolve_against_the_directories() -> None:
    source = "from .mappings import copy_to_tensor_model_parallel_region"
    call = "copy_to_tensor_model_parallel_region(x)"
    mapping, _ = resolve(source, call, "/src/megatron/core/tensor_parallel/layers.py")
    assert mapping is not None
    mapping, why_not = resolve(source, call, "/src/myproject/layers.py")
    assert mapping is None and "`.mappings.copy_to_tensor_model_parallel_region`" in why_not
    mapping, _ = resolve("from ..tensor_parallel import mappings", "mappings.all_to_all(g, x)",
                         "/src/megatron/core/transformer/moe.py")
    # ".." from megatron/core/transformer/ is megatron/core
    assert mapping is not None and mapping.megatron_name == "all_to_all"


@pytest.mark.parametrize(
    "source, call, reason",
    [
        ("import torch.distributed as dist", "dist.all_to_all(out, inp)", ""),  # torch's: silently left
        ("", "all_to_all(out, inp)", ""),
        ("from myproject import copy_to_tensor_model_parallel_region", "copy_to_tensor_model_parallel_region(x)", "not Megatron's"),
        ("", "self.copy_to_tensor_model_parallel_region(x)", "cannot tell where"),
    ],
)
def test_other_functions_of_the_same_names_are_not_migrated(source: str, call: str, reason: str) -> None:
    mapping, why_not = resolve(source, call)
    assert mapping is None
    assert reason in why_not


# Megatron's split sizes and the typed call's keyword taking each: torch's input_split_sizes
# are the rows sent to each rank (sizes=), output_split_sizes the rows received (out_sizes=);
# the sequence-parallel gather/scatter sizes are each rank's length of dim 0 (sizes=).
UNEVEN = {
    "gather_from_sequence_parallel_region": {"output_split_sizes": "sizes"},
    "reduce_scatter_to_sequence_parallel_region": {"input_split_sizes": "sizes"},
    "all_to_all": {"output_split_sizes_": "out_sizes", "input_split_sizes": "sizes"},
}


@pytest.mark.parametrize("name", sorted(UNEVEN))
def test_uneven_sizes_report_a_typed_call_that_takes_them(name: str) -> None:
    """Megatron's uneven split sizes were reported as "not expressible in the typed call";
    the typed calls take them (sizes=, out_sizes=): the report gives the call to write, and
    its keywords are the runtime's and the stubs' own."""
    import ast
    import inspect
    import re

    import spmd
    from spmd_mypy.migrate.rewrite import Options, plan_call

    mapping = MAPPINGS_BY_NAME[name]
    sizes = {param: f"[{i + 1}, {i + 2}]" for i, param in enumerate(UNEVEN[name])}
    group = ["get_tensor_model_parallel_group()"] if name == "all_to_all" else []
    call = cst.parse_expression(f"f({', '.join([*group, 'input_=x', *(f'{k}={v}' for k, v in sizes.items())])})")
    assert isinstance(call, cst.Call)
    reason = plan_call(mapping, call.args, Options())
    assert isinstance(reason, str) and "not expressible" not in reason, reason
    written = re.fullmatch(r".*: write (spmd\..*) by hand", reason)
    assert written, reason
    typed = ast.parse(written.group(1), mode="eval").body
    assert isinstance(typed, ast.Call) and ast.unparse(typed.func) == f"spmd.{mapping.collective}"
    keywords = {k.arg: ast.unparse(k.value) for k in typed.keywords}
    assert {UNEVEN[name][k]: v for k, v in sizes.items()}.items() <= keywords.items()
    assert keywords["src"] == str(mapping.src) and keywords["dst"] == str(mapping.dst)
    runtime = inspect.signature(getattr(spmd, mapping.collective)).parameters
    # the repository's stubs (an installed spmd lives in site-packages, without them)
    stubs = (Path(__file__).resolve().parents[2] / "stubs" / "spmd-stubs" / "__init__.pyi").read_text()
    [stub] = re.findall(rf"def {mapping.collective}\((.*?)\) ->", stubs, re.S)
    for keyword in keywords:
        assert keyword in runtime and f"{keyword}:" in stub, keyword
