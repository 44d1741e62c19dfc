"""docs/dtensor.md's placement table is the engine's (spmd_mypy.engine.dtensor.placement_type)."""

from __future__ import annotations

import re
from pathlib import Path

from spmd_mypy.engine.dtensor import placement_type

DOC = Path(__file__).resolve().parents[2] / "docs" / "dtensor.md"


def test_placement_table_is_the_engines():
    rows = [line for line in DOC.read_text().splitlines()
            if line.startswith("| `") and line.count("|") >= 5]
    assert len(rows) == 4, rows
    for row in rows:
        placement, grad, local = (re.search(r"`([^`]*)`", c).group(1)  # type: ignore[union-attr]
                                  for c in row.split("|")[1:4])
        if placement.startswith("Shard("):
            placement, grad, local = "Shard(2)", "Shard(2)", "S(2)"
        assert str(placement_type(placement, grad)) == local, row
        if "(the default)" in row:
            assert str(placement_type(placement)) == local, row
