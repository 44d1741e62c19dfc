"""Every error code users can see has a line in README's code list ("### Error codes"): what
it means and an example fix.  The engine's CODES and the plugin's registry are the source;
a code added to either without a README line fails here (as spmd-backward,
spmd-partial-product and spmd-partial-varying once were in neither README nor docs/)."""

from __future__ import annotations

import re
from pathlib import Path

from spmd_mypy.engine.errors import CODES

README = Path(__file__).resolve().parents[2] / "README.md"


def _listed() -> dict[str, str]:
    text = README.read_text()
    start = text.index("\n### Error codes\n")
    end = text.index("\n#", start + 1)
    entries: dict[str, str] = {}
    for item in re.split(r"\n- ", text[start:end])[1:]:
        m = re.match(r"`(spmd-[a-z-]+)`: (.*)", item, re.S)
        assert m, item[:80]
        assert m.group(1) not in entries, f"{m.group(1)} listed twice"
        entries[m.group(1)] = " ".join(m.group(2).split())
    return entries


def test_every_engine_code_has_a_readme_line() -> None:
    listed = _listed()
    missing = sorted(set(CODES) - set(listed))
    assert not missing, f"codes missing from README's code list: {missing}"
    unknown = sorted(set(listed) - set(CODES))
    assert not unknown, f"README lists codes the engine does not have: {unknown}"


def test_every_registered_mypy_code_has_a_readme_line() -> None:
    from spmd_mypy.plugin.codes import ERROR_CODES

    missing = sorted(set(ERROR_CODES) - set(_listed()))
    assert not missing, f"registered codes missing from README's code list: {missing}"


def test_every_readme_line_says_a_fix() -> None:
    for code, line in _listed().items():
        assert "Fix:" in line, f"{code}: no example fix in its README line"
        assert len(line.split("Fix:", 1)[0]) > 20, f"{code}: no meaning in its README line"
