"""Megatron's custom autograd Functions as Megatron writes them (tests/runtime/rt_megatron_fns.py,
run in the check mode on gloo ranks by rt_hooks.check_megatron_functions): statically only the
seeded mistake is reported.  Each was a false error: a name a raw collective wrote in place kept
its type (``g = g.clone(); dist.all_reduce(g); return g`` was P where I is due; the fused
cross entropy's loss V, whose suggested fix reduced it a second time), and an I returned where
R is due (and back) by a Function's forward or backward, which run without grad.  The file's
axis "x" (the gloo mesh's) is checked as "tp" (the seeded cache's mesh)."""

from __future__ import annotations

from pathlib import Path

from mypy_project import run_mypy, write_config

SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "rt_megatron_fns.py"


def test_megatron_functions_only_the_seeded_mistake(tmp_path: Path) -> None:
    write_config(tmp_path)
    text = SOURCE.read_text().replace('"x"', '"tp"')
    (tmp_path / "megatron_fns.py").write_text(text)
    out = run_mypy(tmp_path, "megatron_fns.py")
    seeded = next(i for i, line in enumerate(text.splitlines(), 1) if "# seeded: spmd-duality" in line)
    lines = [ln for ln in out.splitlines() if ": error:" in ln]
    assert len(lines) == 1, out
    assert lines[0].startswith(f"megatron_fns.py:{seeded}: error: CopyToRegionFuncForgot.backward "
                               'returns grad_output (Tensor[P["tp"]]) as the gradient of input '
                               'input_ (Tensor[I["tp"]])'), out
    assert lines[0].endswith("[spmd-duality]"), out
