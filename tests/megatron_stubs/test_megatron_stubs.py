"""Issue 6 item 3: with megatron-core installed, its mapping functions, called unchanged, are
typed by the mapping table (the partial stub package ``stubs/megatron-stubs``).

megatron-core 0.19.2 (the wheel tests/migrate caches) and spmd-mypy's own wheel, built from this
checkout, are installed with pip into one directory that mypy searches like site-packages
(megatron_stub_env.py says how); mypy then resolves megatron as it does for a user who did
``pip install spmd-mypy megatron-core``.  Skipped only when the megatron-core wheel cannot be
downloaded (no network).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_stub_env as stub_env  # noqa: E402
from run_once import seed_mypy_cache  # noqa: E402

from spmd_mypy.migrate.stubgen import UNTYPED_MAPPINGS, files as stubgen_files  # noqa: E402
from spmd_mypy.migrate.table import MAPPINGS, Role, entry_code, typed_call_code  # noqa: E402
from spmd_mypy.migrate.table import P as P_, R as R_, S as S_  # noqa: E402

megatron_wheel = stub_env.load_megatron_core_test_module().megatron_wheel

MESH = "dp, tp"
TP = '"tp"'  # the axis as the migrated call writes it
PLUGIN_FILES = ["typed_calls.py", "bugs.py", "plain_annotated.py", "known_false_positives.py", "unannotated.py",
                "resolution.py"]
NO_PLUGIN_FILES = ["plain_annotated.py", "known_false_positives.py", "unannotated.py"]


# --------------------------------------------------------------------------------------
# Every mapping function, called unchanged in each way its signature allows


# For each source type of the table, an argument type that does not fit it.
WRONG = {"P": R_, "I": P_, "S(0)": S_(-1), "S(-1)": S_(0)}


def _tensor(t) -> str:  # noqa: ANN001
    return f"Tensor[{entry_code(t, 'tp')}]"


def typed_calls_source() -> str:
    """A module calling each mapping function (from the package and from the mappings module,
    positionally and with every parameter by keyword) with the revealed type the table gives,
    next to the migrated typed call, which must reveal the same type."""
    names = [m.megatron_name for m in MAPPINGS]
    lines = [
        "import numpy as np",
        "import torch",
        "import spmd",
        "from spmd import Tensor, I, P, R, S, V",
        "from megatron.core import tensor_parallel",
        "from megatron.core.tensor_parallel import mappings",
        "from megatron.core.tensor_parallel import (",
        *(f"    {n}," for n in names),
        ")",
        "",
        "# The rest of the package is read from the installed megatron-core: typed by its source.",
        "reveal_type(tensor_parallel.split_tensor_along_last_dim)  # N: Revealed type is "
        '"def (tensor: torch._tensor.Tensor, num_partitions: int, contiguous_split_chunks: '
        'bool =) -> list[torch._tensor.Tensor]"',
        "",
    ]
    for m in MAPPINGS:
        name = m.megatron_name
        untyped = name in UNTYPED_MAPPINGS
        src = "torch.Tensor" if untyped else _tensor(m.src)
        lines += ["", f"def check_{name}(x: {src}, g: torch.distributed.ProcessGroup, flag: bool) -> None:"]
        flag = m.param(Role.DST_FLAG)

        def args(keyword_flag: str | None = None, all_keywords: bool = False) -> str:
            out = []
            for p in m.params:
                value = "x" if p.role is Role.INPUT else "g" if (p.role is Role.GROUP and p.default is None) else None
                if p.role is Role.DST_FLAG and keyword_flag is not None:
                    out.append(f"{p.name}={keyword_flag}")
                elif value is not None:
                    out.append(value if not all_keywords or p.role is Role.GROUP else f"{p.name}={value}")
                elif all_keywords:
                    out.append(f"{p.name}={p.default}")
            return ", ".join(out)

        def note(t: str) -> str:
            return f"  # N: Revealed type is {t}"

        if flag is None:
            result = "Tensor" if untyped else _tensor(m.dst)
            lines.append(f"    spmd.reveal({name}({args()})){note(result)}")
            lines.append(f"    spmd.reveal(mappings.{name}({args(all_keywords=True)})){note(result)}")
            lines.append(f"    spmd.reveal(tensor_parallel.{name}({args()})){note(result)}")
            if not untyped:
                lines.append(f"    spmd.reveal({typed_call_code(m, TP)}){note(result)}")
            continue
        for variant in flag.variants:
            result = _tensor(variant.dst)
            if variant.value == flag.default:
                lines.append(f"    spmd.reveal({name}(x)){note(result)}")
                lines.append(f"    spmd.reveal(mappings.{name}({args(all_keywords=True)})){note(result)}")
            lines.append(f"    spmd.reveal({name}(x, {variant.value})){note(result)}")
            lines.append(f"    spmd.reveal(tensor_parallel.{name}({args(keyword_flag=variant.value)})){note(result)}")
            lines.append(f"    spmd.reveal({typed_call_code(m, TP, variant.dst)}){note(result)}")
        lines.append(f"    spmd.reveal({name}({args(keyword_flag='flag')})){note('Tensor')}")
    # A tensor of another type on tp is a mismatch, reported at the call.
    for m in MAPPINGS:
        if m.megatron_name in UNTYPED_MAPPINGS:
            continue
        wrong = WRONG[str(m.src)]
        lines += ["", f"def wrong_{m.megatron_name}(x: {_tensor(wrong)}) -> None:",
                  f"    {m.megatron_name}(x)  # E: [spmd-mismatch] it is {wrong} on \"tp\" where {m.src} is needed"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# The runs (one environment, several mypy runs, in parallel where they share no cache)


@pytest.fixture(scope="module")
def env(megatron_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> stub_env.StubEnv:
    started = time.monotonic()
    made = stub_env.make_env(tmp_path_factory.mktemp("megatron-stubs-env"), megatron_wheel)
    print(f"\ntest environment (project wheel built, both installed): {time.monotonic() - started:.1f} s")
    return made


@pytest.fixture(scope="module")
def runs(env: stub_env.StubEnv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, stub_env.Run]:
    project = tmp_path_factory.mktemp("megatron-stubs-user")
    for case in stub_env.CASES.glob("*.py"):
        (project / case.name).write_text(case.read_text())
    (project / "typed_calls.py").write_text(typed_calls_source())
    plugin_cache = project / ".cache-plugin"
    # torch's analysis under the plugin from the run's seed (what a user's later runs have;
    # the spmd and megatron stubs are found in the test's directory, new to that cache); the
    # no-plugin run analyses torch cold
    for cache in (plugin_cache, project / ".cache-no-tp"):
        seed_mypy_cache(cache)
    started = time.monotonic()
    first = {
        "plugin": stub_env.start_mypy(env, project, PLUGIN_FILES, MESH, plugin_cache),
        "no-plugin": stub_env.start_mypy(env, project, NO_PLUGIN_FILES, None, project / ".cache-no-plugin",
                                         "no-plugin.ini"),
        "no-tp": stub_env.start_mypy(env, project, ["no_tp_axis.py"], "dp, cp", project / ".cache-no-tp",
                                     "no-tp.ini"),
    }
    out = {name: stub_env.finish(proc) for name, proc in first.items()}
    cold = time.monotonic() - started
    # A changed interface of spmd's stubs makes mypy re-parse the megatron stub that imports
    # them, without the plugin's pre-analysis hook (see NOTES.md, incremental mode).
    spmd_stub = env.site_dir / "spmd-stubs" / "__init__.pyi"
    spmd_stub.write_text(spmd_stub.read_text() + "\ndef _changed_for_the_test() -> None: ...\n")
    started = time.monotonic()
    out["incremental"] = stub_env.finish(stub_env.start_mypy(env, project, PLUGIN_FILES, MESH, plugin_cache))
    warm = time.monotonic() - started
    # The mesh axes edited, the cache kept.
    out["no-tp-after-edit"] = stub_env.finish(
        stub_env.start_mypy(env, project, ["no_tp_axis.py"], "dp, cp", plugin_cache))
    # spmd-mypy installed without megatron-core (a per-module option: torch's cache stays valid).
    bare = stub_env.make_env(project / "no-megatron", None, env.project_wheel)
    out["no-megatron"] = stub_env.finish(stub_env.start_mypy(
        bare, project, ["no_megatron.py"], MESH, plugin_cache, "no-megatron.ini",
        extra=("[mypy-megatron.*]", "ignore_missing_imports = True")))
    print(f"mypy: first runs {cold:.1f} s (3 in parallel, 2 seeded), incremental {warm:.1f} s, "
          f"all {time.monotonic() - started + cold:.1f} s")
    return out


def check_file(run: stub_env.Run, filename: str, source: str, keep=lambda e: True) -> None:  # noqa: ANN001
    expected = [e for e in stub_env.expectations(source) if keep(e)]
    problems = stub_env.compare(run.lines_for(filename), expected)
    assert not problems, f"{filename}:\n" + "\n".join(problems) + f"\n\nmypy said:\n{run.stdout}{run.stderr}"


def case_source(name: str) -> str:
    return (stub_env.CASES / name).read_text()


def without_spmd_codes(e: stub_env.Expectation) -> bool:
    """Without the plugin: no spmd error and no SPMD reveal."""
    return e.severity == "error" and not (e.code or "").startswith("spmd-")


def without_the_plugin(e: stub_env.Expectation) -> bool:
    """Without the plugin ``Tensor[...]`` is ``torch.Tensor`` (the stubs' public ``spmd.Tensor``
    is an alias of it): no spmd error, and no ``[assignment]`` error between SPMD types."""
    return without_spmd_codes(e) and e.code != "assignment"


# --------------------------------------------------------------------------------------
# Tests


def test_project_wheel_ships_the_partial_stub_package(env: stub_env.StubEnv) -> None:
    files = stub_env.wheel_files(env.project_wheel)
    shipped = sorted(n for n in files if n.startswith("megatron-stubs/"))
    generated = {path.as_posix(): text for path, text in stubgen_files().items()}
    assert shipped == sorted([*generated, "megatron-stubs/py.typed"])
    assert files["megatron-stubs/py.typed"] == b"partial\n"
    for name, text in generated.items():
        assert files[name].decode() == text, name
        assert (env.site_dir / name).read_text() == text, name
    assert (env.site_dir / "megatron" / "core" / "tensor_parallel" / "mappings.py").is_file()


def test_every_mapping_call_has_the_table_type(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["plugin"], "typed_calls.py", typed_calls_source())


def test_megatron_modules_resolve_to_stub_or_installed_source(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["plugin"], "resolution.py", case_source("resolution.py"))


def test_classic_bugs_are_spmd_errors_at_their_line(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["plugin"], "bugs.py", case_source("bugs.py"))


@pytest.mark.parametrize("run", ["plugin", "no-plugin"])
def test_unannotated_megatron_code_gets_no_error(runs: dict[str, stub_env.Run], run: str) -> None:
    assert stub_env.expectations(case_source("unannotated.py")) == []
    check_file(runs[run], "unannotated.py", case_source("unannotated.py"))


@pytest.mark.parametrize("run", ["plugin", "no-plugin"])
def test_plain_annotated_megatron_code_gets_no_error(runs: dict[str, stub_env.Run], run: str) -> None:
    assert stub_env.expectations(case_source("plain_annotated.py")) == []
    check_file(runs[run], "plain_annotated.py", case_source("plain_annotated.py"))


def test_known_false_positives_are_exactly_these(runs: dict[str, stub_env.Run]) -> None:
    # With the plugin, a module without SPMD types sees the mapping calls' results untyped: none.
    check_file(runs["plugin"], "known_false_positives.py", case_source("known_false_positives.py"),
               keep=lambda e: False)
    # Without the plugin (the stub is installed for every mypy run of the environment): the
    # results are plain torch.Tensor, so only torch's own stubs' error is left.
    check_file(runs["no-plugin"], "known_false_positives.py", case_source("known_false_positives.py"),
               keep=without_the_plugin)


def test_stub_reparsed_after_a_dependency_change_keeps_its_types(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["incremental"], "typed_calls.py", typed_calls_source())
    check_file(runs["incremental"], "bugs.py", case_source("bugs.py"))


def test_without_a_tp_axis_the_mapping_functions_are_untyped(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["no-tp"], "no_tp_axis.py", case_source("no_tp_axis.py"))


def test_editing_mesh_axes_reanalyses_the_installed_stub(runs: dict[str, stub_env.Run]) -> None:
    check_file(runs["no-tp-after-edit"], "no_tp_axis.py", case_source("no_tp_axis.py"))


def test_without_megatron_core_installed_no_blocking_error(runs: dict[str, stub_env.Run]) -> None:
    assert "Cannot read file" not in runs["no-megatron"].stdout
    check_file(runs["no-megatron"], "no_megatron.py", case_source("no_megatron.py"))


def test_every_run_exit_code(runs: dict[str, stub_env.Run]) -> None:
    assert runs["plugin"].returncode == 1 and runs["incremental"].returncode == 1  # the expected errors
    assert runs["no-plugin"].returncode == 1  # known_false_positives.py
    assert runs["no-tp"].returncode == 0, runs["no-tp"].stdout
    assert runs["no-tp-after-edit"].returncode == 0, runs["no-tp-after-edit"].stdout
