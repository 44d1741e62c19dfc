"""``python -m spmd_mypy``: the ``spmd-mypy`` command (check, report, migrate, codes)."""

import sys

from spmd_mypy.cli import main

sys.exit(main())
