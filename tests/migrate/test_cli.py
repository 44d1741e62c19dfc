"""``spmd-mypy migrate`` as a command: files and directories, exit codes, --diff/--check, bytes kept."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

import spmd_mypy.migrate as migrate
from spmd_mypy.engine.collectives import lookup
from spmd_mypy.migrate.table import MAPPINGS, Role, markdown_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migrate.md"

MEGATRON_CALL = (
    "from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region\n"
    "\n"
    "y = copy_to_tensor_model_parallel_region(x)\n"
)
MIGRATED_CALL = (
    "from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region\n"
    "import spmd\n"
    "from spmd import I, R\n"
    "\n"
    'y = spmd.reinterpret(x, "tp", src=I, dst=R)\n'
)


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = migrate.run(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_main_is_the_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(MEGATRON_CALL)
    assert migrate.main([str(path)]) == 0
    assert path.read_text() == MIGRATED_CALL
    assert "1 calls rewritten" in capsys.readouterr().err


def test_directories_are_searched_for_python_files(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "a.py").write_text(MEGATRON_CALL)
    (tmp_path / "pkg" / "b.py").write_text(MEGATRON_CALL)
    (tmp_path / "pkg" / "notes.txt").write_text(MEGATRON_CALL)
    (tmp_path / "pkg" / ".hidden").mkdir()
    (tmp_path / "pkg" / ".hidden" / "c.py").write_text(MEGATRON_CALL)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "d.py").write_text(MEGATRON_CALL)
    code, _, err = run(str(tmp_path / "pkg"))
    assert code == 0
    assert (tmp_path / "pkg" / "sub" / "a.py").read_text() == MIGRATED_CALL
    assert (tmp_path / "pkg" / "b.py").read_text() == MIGRATED_CALL
    for untouched in ("notes.txt", ".hidden/c.py", "__pycache__/d.py"):
        assert (tmp_path / "pkg" / untouched).read_text() == MEGATRON_CALL
    assert "2 files scanned, 2 changed, 2 calls rewritten" in err


def test_parse_failure_is_reported_not_written_and_the_rest_goes_on(tmp_path: Path) -> None:
    broken = tmp_path / "a_broken.py"
    broken_source = "from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region\ndef f(:\n    copy_to_tensor_model_parallel_region(x)\n"
    broken.write_text(broken_source)
    good = tmp_path / "b_good.py"
    good.write_text(MEGATRON_CALL)
    code, _, err = run(str(tmp_path))
    assert code == 1
    assert broken.read_text() == broken_source
    assert good.read_text() == MIGRATED_CALL
    assert re.search(rf"^{re.escape(str(broken))}:\d+:\d+: error: cannot parse: ", err, re.M)
    assert "1 failed" in err


def test_undecodable_file_is_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    data = MEGATRON_CALL.encode() + b"# \xff\xfe not utf-8\n"
    path.write_bytes(data)
    code, _, err = run(str(path))
    assert code == 1 and path.read_bytes() == data
    assert "error: cannot decode" in err


def test_missing_path_fails(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path / "nope.py"))
    assert code == 1
    assert "no such file or directory" in err


def test_unmigrated_calls_do_not_fail_the_run(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    source = MEGATRON_CALL.replace("(x)", "(x, group=self.tp_group)")
    path.write_text(source)
    code, out, err = run(str(path))
    assert code == 0 and out == ""
    assert path.read_text() == source
    assert f"{path}:3:5: not migrated: copy_to_tensor_model_parallel_region: group self.tp_group" in err


def test_diff_and_check_write_nothing_and_check_fails_on_pending_changes(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(MEGATRON_CALL)
    code, out, err = run("--diff", str(path))
    assert code == 0
    assert path.read_text() == MEGATRON_CALL
    name = path.as_posix().lstrip("/")
    assert out.startswith(f"--- a/{name}\n+++ b/{name}\n@@ ")
    assert '+y = spmd.reinterpret(x, "tp", src=I, dst=R)\n' in out
    assert "1 would change" in err

    code, out, _ = run("--diff", "--check", str(path))
    assert code == 1 and out
    code, out, err = run("--check", str(path))  # a dry run too, without the diff
    assert code == 1 and out == "" and path.read_text() == MEGATRON_CALL
    assert f"{path}: would change\n" in err and "1 would change" in err
    code, _, _ = run(str(path))
    assert code == 0 and path.read_text() == MIGRATED_CALL
    code, out, _ = run("--diff", "--check", str(path))
    assert code == 0 and out == ""
    code, out, err = run("--check", str(path))
    assert code == 0 and out == "" and "0 would change" in err and "would change\n" not in err


def test_reported_lines_point_into_the_written_file(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "from megatron.core.tensor_parallel import (\n"
        "    copy_to_tensor_model_parallel_region as copy_to,\n"
        ")\n"
        "a = copy_to(\n"
        "    x\n"
        ")\n"
        "b = copy_to(x, group=g)\n"
    )
    code, _, err = run(str(path))
    assert code == 0
    lines = path.read_text().splitlines()
    match = re.search(r":(\d+):(\d+): not migrated", err)
    assert match
    line, column = int(match[1]), int(match[2])
    assert lines[line - 1][column - 1:].startswith("copy_to(x, group=g)")


def test_bytes_outside_the_calls_are_kept(tmp_path: Path) -> None:
    """A latin-1 cookie, a BOM and CRLF line ends survive the rewrite."""
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + MEGATRON_CALL.encode())
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + MEGATRON_CALL.encode())
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(MEGATRON_CALL.replace("\n", "\r\n").encode())
    code, _, _ = run(str(tmp_path))
    assert code == 0
    assert latin.read_bytes() == b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + MIGRATED_CALL.encode()
    assert bom.read_bytes() == b"\xef\xbb\xbf" + MIGRATED_CALL.encode()
    assert crlf.read_bytes() == MIGRATED_CALL.replace("\n", "\r\n").encode()


def test_files_without_mapping_names_are_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f(:\n")  # not even parsed: nothing in it to migrate
    code, out, err = run("--diff", str(path))
    assert code == 0 and out == ""
    assert "0 would change" in err


def test_group_options_parse_an_axis_after_the_last_equals_sign() -> None:
    args = migrate.build_parser().parse_args(
        ["--group-expr", "groups(kind=tp)", "--group-expr", "groups(kind=ep)=ep", "--group-getter", "g=cp", "x.py"]
    )
    options = migrate.cli.options_from_args(args)
    assert dict(options.group_exprs) == {"groups(kind=tp)": "tp", "groups(kind=ep)": "ep"}
    assert options.getter_axes() == {"get_tensor_model_parallel_group": "tp", "g": "cp"}


# --- the table ---------------------------------------------------------------------------------


def test_docs_embed_the_table_generated_from_the_data() -> None:
    assert markdown_table() in DOCS.read_text(), (
        "docs/migrate.md is out of date with spmd_mypy/migrate/table.py; paste in "
        "spmd_mypy.migrate.table.markdown_table()"
    )


BACKWARD_OPS = {
    "identity": "reinterpret",
    "all-reduce": "all_reduce",
    "all-gather": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "split": "convert",
    "all-to-all": "all_to_all",
}


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda m: m.megatron_name)
def test_each_typed_call_is_a_valid_transition_with_megatrons_backward(mapping: migrate.Mapping) -> None:
    """The rule engine accepts every typed call of the table, and its backward is Megatron's."""
    flag = mapping.param(Role.DST_FLAG)
    variants = [(v.dst, v.backward) for v in flag.variants] if flag else [(mapping.dst, mapping.backward)]
    for dst, megatron_backward in variants:
        transition = lookup(mapping.collective, mapping.src, dst)
        assert transition is not None, (mapping.collective, mapping.src, dst)
        assert not transition.expert
        expected_op = BACKWARD_OPS[megatron_backward.split(" ")[0].split(",")[0]]
        assert [step.op for step in transition.backward][-1] == expected_op


def test_usage_errors_return_2_and_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate.main([]) == 2
    assert migrate.main(["--no-such-option", "x.py"]) == 2
    assert migrate.main(["--help"]) == 0
    assert "--group-expr" in capsys.readouterr().out


def test_diff_applies_with_patch(tmp_path: Path) -> None:
    """The --diff output is a patch: applied to the original it gives the migrated file."""
    import shutil
    import subprocess

    if shutil.which("patch") is None:
        pytest.skip("no patch command")
    for name, source in [("a.py", MEGATRON_CALL), ("no_newline.py", MEGATRON_CALL.rstrip("\n"))]:
        path = tmp_path / name
        path.write_text(source)
        code, diff, _ = run("--diff", str(path))
        assert code == 0 and diff
        copy = tmp_path / f"copy_{name}"
        copy.write_text(source)
        subprocess.run(["patch", "-s", str(copy)], input=diff, text=True, check=True)
        run(str(path))
        assert copy.read_text() == path.read_text()


def test_python_3_12_syntax_is_migrated(tmp_path: Path) -> None:
    """PEP 695 aliases and generics, PEP 696 defaults, ``match``: libcst parses them from 1.4
    (the floor in pyproject.toml; 1.0, the old floor, reported "cannot parse")."""
    head = "type Pair[T] = tuple[T, T]\n\n\nclass Blk[T = int]:\n    def f[U](self, x):\n"
    body = ("        match x.dim():\n            case 2:\n                pass\n"
            "        return {call}\n")
    path = tmp_path / "m.py"
    path.write_text("from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region\n\n"
                    + head + body.format(call="copy_to_tensor_model_parallel_region(x)"))
    code, _, err = run(str(path))
    assert code == 0, err
    assert path.read_text().endswith(
        head + body.format(call='spmd.reinterpret(x, "tp", src=I, dst=R)')), path.read_text()
