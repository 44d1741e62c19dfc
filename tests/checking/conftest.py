"""The check-mode tests run without a current mesh unless they bind one (the shared cases'
``mesh`` fixture): a mesh left current by a test run before in the same worker would make a
declaration on an axis it lacks an error (spmd.declare checks a declared axis against the
current mesh's since session 35)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_mesh_unless_asked(request: pytest.FixtureRequest) -> Iterator[None]:
    if "mesh" in request.fixturenames or request.module.__name__.endswith("test_check_shared_cases"):
        yield  # the shared cases bind their fake 2 x 2 mesh (a module fixture) themselves
        return
    from spmd import _mesh

    previous = _mesh._current
    _mesh._make_current(None)
    try:
        yield
    finally:
        _mesh._make_current(previous)
