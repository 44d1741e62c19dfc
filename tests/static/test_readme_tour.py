"""The README's tour quotes the error the checker prints for its example: the quoted text is
what mypy prints (a message that changed made the quote stale: the docs probe of session 35
found the tour without its first fix, ``convert(b, "tp", src=R, dst=P)``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def _tour() -> tuple[str, int, str]:
    """The tour's code (comments cut, lines kept), the line of its error, the quoted message."""
    text = README.read_text()
    block = text.split("\n## A tour\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    code, quoted, line, quoting = [], [], 0, False
    for n, row in enumerate(block.splitlines(), 1):
        source, _, comment = row.partition("#")
        code.append(source.rstrip())
        if "error:" in comment:
            line, quoting = n, True
            quoted.append(comment.split("error:", 1)[1].strip())
        elif quoting and not source.strip() and comment.strip():
            quoted.append(comment.strip())
        else:
            quoting = False
    return "\n".join(code) + "\n", line, " ".join(quoted)


def test_the_tour_quotes_the_printed_error(tmp_path: Path) -> None:
    code, line, quoted = _tour()
    assert line and quoted, "README.md's tour lost its quoted error"
    write_config(tmp_path)
    (tmp_path / "tour.py").write_text(code)
    out = run_mypy(tmp_path, "tour.py")
    printed = re.findall(rf"^tour\.py:{line}: error: (.*)$", out, re.M)
    assert len(printed) == 1, out
    assert re.sub(r"\s+", " ", quoted) == re.sub(r"\s+", " ", printed[0]), (
        f"README.md's tour quotes\n  {quoted}\nbut the checker prints\n  {printed[0]}")
