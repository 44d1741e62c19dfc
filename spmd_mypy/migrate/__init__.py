"""``spmd-mypy migrate``: rewrite Megatron's tensor-parallel mapping calls to typed spmd calls.

- :mod:`.table`     the mapping table, as data (the one place it lives)
- :mod:`.bindings`  which names a file binds to Megatron's mapping functions
- :mod:`.rewrite`   the libcst transformer for the calls
- :mod:`.annotate`  ``--annotate``: parameter and return types fixed by the typed calls
- :mod:`.imports`   adding ``import spmd`` / ``from spmd import ...`` once
- :mod:`.locate`    line and column of reported calls (via ``ast``, libcst as the fallback)
- :mod:`.source`    one file: parse, rewrite, annotate, add imports
- :mod:`.cli`       the options, the file walk, ``--diff``, the report
"""

from __future__ import annotations

from .cli import build_parser, run
from .rewrite import Finding, Options
from .source import FileResult, migrate_source
from .table import MAPPINGS, Mapping

__all__ = ["main", "run", "build_parser", "migrate_source", "Options", "Finding", "FileResult", "MAPPINGS", "Mapping"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``spmd-mypy migrate ARGS`` (``argv`` without the ``migrate`` word)."""
    return run(argv)
