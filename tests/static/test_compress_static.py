"""A Partial gradient compressed before its exchange (tests/runtime/rt_compress_fns.py, run on
gloo ranks by rt_compress.py): no error statically.  Each was a false error (a non-linear op of
a pending sum, "all_reduce first", which defeats the compression) before reinterpret(P,V) was
accepted on a value that carries no gradient.  The file's axis "x" (the gloo mesh's) is checked
as "tp" (the seeded cache's mesh)."""

from __future__ import annotations

from pathlib import Path

from mypy_project import run_mypy, write_config

SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "rt_compress_fns.py"


def test_compression_hooks_check_clean(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "compress_fns.py").write_text(SOURCE.read_text().replace('"x"', '"tp"'))
    out = run_mypy(tmp_path, "compress_fns.py")
    assert "error:" not in out, out
    assert "Success: no issues found" in out, out
