"""The session-wide runner of the plugin's expected-output cases (see mypy_cases.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from run_once import locked, seed_mypy_cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mypy_cases  # noqa: E402


class CaseResults:
    """Runs each configuration group once, the first time one of its cases asks."""

    def __init__(self, workdir: Path, cache_root: Path) -> None:
        self.workdir = workdir
        self.cache_root = cache_root
        self.groups = mypy_cases.group_cases(mypy_cases.load_cases())
        self.results: dict[mypy_cases.Config, mypy_cases.GroupResult] = {}

    def group_dir(self, config: mypy_cases.Config) -> Path:
        index = list(self.groups).index(config)
        return self.workdir / f"group{index}"

    def result(self, config: mypy_cases.Config) -> mypy_cases.GroupResult:
        if config not in self.results:
            self.results[config] = mypy_cases.run_group(
                config, self.groups[config], self.group_dir(config), self.cache_root)
        return self.results[config]


def _cache_root(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # mypy's incremental cache (torch's analysis is the costly part) is kept across sessions
    # in pytest's cache dir; mypy itself invalidates it when mypy, torch or the plugin change.
    # The cache of the groups without global flags starts from the run's seed (run_once).
    root: Path | None = None
    cache = getattr(config, "cache", None)
    if cache is not None:
        try:
            root = Path(cache.mkdir("spmd-mypy-plugin-cases"))
        except OSError:
            root = None
    if root is None:
        root = tmp_path_factory.mktemp("mypy-cache")
    with locked(root / ".seed.lock"):  # the xdist workers share pytest's cache dir
        seed_mypy_cache(root / "default")
    return root


@pytest.fixture(scope="session")
def case_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CaseResults:
    return CaseResults(tmp_path_factory.mktemp("plugin-cases"), _cache_root(request.config, tmp_path_factory))
