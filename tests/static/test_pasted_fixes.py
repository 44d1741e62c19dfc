"""A global layout error's fix, pasted as offered, is accepted: mypy is run on the program,
each ``spmd.redistribute(x, ...)`` a message offers replaces ``x`` on its line, and mypy is
run again.

The case that failed (session 33's second regression probe): an operand that is P or I on an
axis the fix shards it on.  A bare ``src=PS[...]`` leaves that axis unsaid, and an axis only
``dst`` names is taken as R on the src side (engine/redistribute.py: resolve), so the pasted
call was spmd-src-mismatch; the fix now writes the operand's whole type as ``src`` there
(engine/global_spmd.py: redistribute_fix), and keeps the bare spec where it describes it."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

SOURCE = textwrap.dedent('''\
    import torch
    import spmd
    from spmd import Tensor, R, I, P, PS


    def partial_to_shard(a: Tensor[PS["tp", None]], w: Tensor[PS[None, None], P["tp"]]) -> None:
        torch.cat([a, w], 1)


    def invariant_to_shard(a: Tensor[PS["tp", None]], b: Tensor[PS[None, None], I["tp"], R["dp"]]) -> None:
        a + b


    def partial_with_another_axis(a: Tensor[PS["tp", None], R["dp"]], w: Tensor[PS[None, None], P["tp"], R["dp"]]) -> None:
        w * a


    def partial_elsewhere_kept_bare(x: Tensor[PS["tp", None], P["dp"]]) -> None:
        x.roll(1, 0)
''')

_FIX = re.compile(r"spmd\.redistribute\((\w+), [^()]*(?:\([^()]*\)[^()]*)*\)")


def _errors(out: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^main\.py:(\d+): error: (.*)$", out, re.M)]


def test_each_offered_redistribute_pastes(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "main.py").write_text(SOURCE)
    errors = _errors(run_mypy(tmp_path, "main.py"))
    lines = SOURCE.splitlines()
    fixes: dict[int, str] = {}
    for line, msg in errors:
        if msg.endswith("[spmd-global]"):
            m = _FIX.search(msg)
            assert m is not None, msg
            fixes[line] = m.group(0)
            lines[line - 1] = re.sub(rf"\b{m.group(1)}\b", lambda _: m.group(0), lines[line - 1], count=1)
    assert len(fixes) == 4, errors
    # the P/I operand's fix says what it is there; a P on an axis the fix leaves alone stays bare
    at = {s.strip(): n + 1 for n, s in enumerate(SOURCE.splitlines())}
    assert 'src=Tensor[PS[None, None], P["tp"]], dst=PS["tp", None]' in fixes[at["torch.cat([a, w], 1)"]]
    assert 'src=Tensor[PS[None, None], R["dp"], I["tp"]], dst=PS["tp", None]' in fixes[at["a + b"]]
    assert 'src=Tensor[PS[None, None], R["dp"], P["tp"]], dst=PS["tp", None]' in fixes[at["w * a"]]
    assert 'src=PS["tp", None], dst=PS[None, None]' in fixes[at["x.roll(1, 0)"]]
    (tmp_path / "main.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "main.py")
    assert out.startswith("Success"), "\n".join(lines) + "\n" + out
