"""spmd-mypy: static SPMD types for PyTorch distributed code.

- :mod:`spmd_mypy.engine`  the pure rule engine (no mypy, no torch)
- :mod:`spmd_mypy.plugin`  the mypy plugin (``plugins = spmd_mypy.plugin``)
- :mod:`spmd_mypy.cli`     ``spmd-mypy check | report | migrate``
"""

__version__ = "0.1.0"
