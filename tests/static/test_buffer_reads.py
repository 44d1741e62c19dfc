"""A read of a local looks up the zero-buffer stores recorded before it first, and asks for
the function's zero buffers (``buffers.zero_buffers``: a walk of the whole body, once per
function) only when one was recorded: most reads follow no store, and then the answer is the
read's own type either way.  The buffers of a function whose locals are read but never
stored into in place are therefore never computed, and the checks are unchanged
(``tests/plugin/cases/zero_buffers.test`` holds the buffer rules)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import write_config  # noqa: E402

SOURCE = textwrap.dedent('''
    import torch
    from spmd import Tensor, I, R

    def no_store(x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
        b = torch.zeros(4)
        return x * b

    def stored(x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        b = torch.zeros(4)
        b += x
        return b
''')

# mypy run in the driver's own process, so the plugin's per-function records can be read
_DRIVER = textwrap.dedent('''
    import sys
    from mypy import api
    out, err, status = api.run(["m.py"])
    print(out, end="")
    from spmd_mypy.plugin import buffers
    print("buffers of:", sorted(f.name for f, _, _ in buffers._BUFFERS.values()))
''')


def test_buffers_are_computed_only_for_a_function_with_a_store(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "m.py").write_text(SOURCE)
    proc = subprocess.run([sys.executable, "-c", _DRIVER], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert "INTERNAL ERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Success"), proc.stdout
    assert lines[-1] == "buffers of: ['stored']", proc.stdout
