"""The plugin under the mypy daemon (dmypy), the way editors use it.

One daemon over a temp project (mypy.ini with the plugin and ``mesh_axes = dp, tp``):

1. ``dmypy check m.py`` gives the same diagnostics as plain mypy (one spmd error);
2. after an edit (the error fixed, a different spmd error on another line) the next check shows
   exactly the new error;
3. a change to the plugin's config section (``dp`` renamed ``data``, so ``R["dp"]`` names an
   unknown axis) is NOT seen by ``dmypy check``: the daemon keeps the plugin instance (and its
   config) it started with, and mypy's checks of whether to restart do not look at a plugin's
   own config section.  ``dmypy restart`` is the step that picks it up; after it the
   diagnostics are plain mypy's under the new config.

Speed: the daemon and plain mypy start from a warm fine-grained cache of torch (see conftest);
``--use-fine-grained-cache`` makes a daemon start load it instead of analysing torch again.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editor_util import (  # noqa: E402
    SOURCE_V1,
    SOURCE_V2,
    V1_ERRORS,
    V2_ERRORS,
    Dmypy,
    add_cached_module,
    copy_cache,
    diagnostic_lines,
    errors,
    mypy,
    write_project,
)

pytestmark = pytest.mark.timeout(600)

# dmypy start/restart options, then (after "--") the mypy flags of the daemon
DAEMON_ARGS = ["--log-file", "dmypy.log", "--", "--use-fine-grained-cache"]


@pytest.fixture
def project(tmp_path: Path, warm_cache: Path) -> Path:
    if shutil.which("dmypy") is None and not (Path(sys.executable).parent / "dmypy").exists():
        pytest.skip("dmypy is not installed")
    copy_cache(warm_cache, tmp_path / "daemon-cache")
    copy_cache(warm_cache, tmp_path / "plain-cache")
    write_project(tmp_path, tmp_path / "daemon-cache", "dp, tp")
    add_cached_module(tmp_path)
    (tmp_path / "m.py").write_text(SOURCE_V1)
    return tmp_path


@pytest.fixture
def daemon(project: Path):
    d = Dmypy(project)
    yield d
    d.stop()
    assert not d.status_file.exists()


def plain(project: Path) -> str:
    """Plain (non-daemon) mypy on m.py, its own cache dir."""
    return mypy(project, "--cache-dir", str(project / "plain-cache"), "m.py").stdout


def check_across_an_edit(project: Path, daemon: Dmypy, before: tuple[str, set[tuple[int, str]]],
                         after: tuple[str, set[tuple[int, str]]], files: tuple[str, ...] = ("m.py",)) -> str:
    """Start the daemon on m.py = before's source, check ``files``, edit m.py to after's, check
    again: each check's (line, code) errors as given, the second like plain mypy's; its output."""
    (project / "m.py").write_text(before[0])
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    first = daemon("check", *files)
    assert errors(first.stdout) == before[1], first.stdout + daemon.log()
    (project / "m.py").write_text(after[0])
    second = daemon("check", *files)
    assert errors(second.stdout) == after[1], second.stdout + daemon.log()
    assert diagnostic_lines(second.stdout) == diagnostic_lines(plain(project))
    return second.stdout


def test_dmypy_matches_mypy_follows_edits_and_restart_picks_up_config(project: Path, daemon: Dmypy) -> None:
    # 1. first check == plain mypy
    started = daemon("start", *DAEMON_ARGS)
    assert started.returncode == 0, started.stdout + started.stderr
    first = daemon("check", "m.py")
    assert first.returncode == 1, first.stdout + first.stderr + daemon.log()
    assert errors(first.stdout) == V1_ERRORS, first.stdout
    assert diagnostic_lines(first.stdout) == diagnostic_lines(plain(project))

    # 2. an edit: the old error gone, the new one on its line
    (project / "m.py").write_text(SOURCE_V2)
    second = daemon("check", "m.py")
    assert errors(second.stdout) == V2_ERRORS, second.stdout
    assert diagnostic_lines(second.stdout) == diagnostic_lines(plain(project))

    # 3. a config change: `dmypy check` (and `recheck`) still answer with the old config...
    write_project(project, project / "daemon-cache", "data, tp")
    expected = plain(project)
    new_errors = errors(expected)
    assert (10, "spmd-annotation") in new_errors, expected
    assert 'unknown mesh axis "dp"' in expected, expected
    assert new_errors != V2_ERRORS
    stale = daemon("check", "m.py")
    assert errors(stale.stdout) == V2_ERRORS, (
        "dmypy check picked up a plugin config change without a restart: update docs/editor.md\n"
        + stale.stdout)
    (project / "m.py").write_text(SOURCE_V2 + "\n# touched\n")  # not even an edit of the file helps
    assert errors(daemon("check", "m.py").stdout) == V2_ERRORS

    # ... and `dmypy restart` is the step that picks it up
    restarted = daemon("restart", *DAEMON_ARGS)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    after = daemon("check", "m.py")
    assert errors(after.stdout) == new_errors, after.stdout + daemon.log()
    assert diagnostic_lines(after.stdout) == diagnostic_lines(plain(project))


def test_dmypy_run_restarts_by_itself_after_a_plugin_config_change(project: Path, daemon: Dmypy) -> None:
    """`dmypy run` (what pylsp-mypy uses) reloads the plugin to compare versions; the plugin folds
    its config into its version under the daemon, so a changed mesh_axes restarts the daemon."""
    first = daemon("run", *DAEMON_ARGS, "m.py")
    assert errors(first.stdout) == V1_ERRORS, first.stdout + first.stderr + daemon.log()
    again = daemon("run", *DAEMON_ARGS, "m.py")
    assert "Restarting" not in again.stdout + again.stderr, again.stdout  # no spurious restart
    assert errors(again.stdout) == V1_ERRORS, again.stdout
    write_project(project, project / "daemon-cache", "data, tp")
    expected = plain(project)
    after = daemon("run", *DAEMON_ARGS, "m.py")
    assert "Restarting: plugins changed" in after.stdout + after.stderr, after.stdout + after.stderr
    assert diagnostic_lines(after.stdout) == diagnostic_lines(expected), after.stdout
    assert 'unknown mesh axis "dp"' in after.stdout, after.stdout


BOUNDARY_V1 = '''\
from spmd import P, R, Tensor


def k(p: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
    return p
'''
BOUNDARY_V2 = '''\
from spmd import P, R, Tensor


def k(p: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
    y: Tensor[R["tp"]] = p
    return y
'''


def test_dmypy_boundary_errors_survive_edits(project: Path, daemon: Dmypy) -> None:
    """A return or assignment mismatch is spmd-mismatch on every daemon run: mypy's own
    [return-value]/[assignment] error is read back by an error watcher on mypy's error store
    (plugin/boundaries.py), which the daemon resets between runs."""
    (project / "m.py").write_text(BOUNDARY_V1)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    first = daemon("check", "m.py")
    assert errors(first.stdout) == {(5, "spmd-mismatch")}, first.stdout + daemon.log()
    assert "the return value p of k is" in first.stdout
    assert diagnostic_lines(first.stdout) == diagnostic_lines(plain(project))
    (project / "m.py").write_text(BOUNDARY_V2)
    second = daemon("check", "m.py")
    assert errors(second.stdout) == {(5, "spmd-mismatch")}, second.stdout + daemon.log()
    assert "the value p assigned to y is" in second.stdout
    assert diagnostic_lines(second.stdout) == diagnostic_lines(plain(project))
    again = daemon("check", "m.py")  # nothing changed: the daemon's stored errors
    assert errors(again.stdout) == {(5, "spmd-mismatch")}, again.stdout


NO_GRAD_V1 = '''\
import torch
from spmd import I, R, Tensor


def f(a: Tensor[I["tp"]], b: Tensor[R["tp"]]) -> None:
    with torch.no_grad():
        c = a + b
    d = a + b
'''
NO_GRAD_V2 = '''\
import torch
from spmd import I, R, Tensor


def f(a: Tensor[I["tp"]], b: Tensor[R["tp"]]) -> None:
    d = a + b
    with torch.no_grad():
        c = a + b
'''


def test_dmypy_gradient_free_regions_follow_edits(project: Path, daemon: Dmypy) -> None:
    """The lines of a torch.no_grad() block (where I mixes with R) are read again after an
    edit: the daemon merges a re-parsed file into the same tree object, so the plugin's
    per-file facts are keyed by the tree's statements too (plugin/memo.py)."""
    check_across_an_edit(project, daemon, (NO_GRAD_V1, {(8, "spmd-invariant-mix")}),
                         (NO_GRAD_V2, {(6, "spmd-invariant-mix")}))


ALIASES = '''\
from spmd import R, S, Tensor, V

Sharded = Tensor[S[0, "tp"]]
Varying = Tensor[V["tp"]]
Replicated = Tensor[R["tp"]]
'''
ALIAS_ONLY_V1 = '''\
from aliases import Replicated, Sharded, Varying


def f(x: Sharded) -> Varying:
    return x


def g(x: Replicated) -> Varying:
    return x
'''
ALIAS_ONLY_V2 = ALIAS_ONLY_V1.replace("def g(x", "def renamed(x")


def test_dmypy_alias_only_module_edits(project: Path, daemon: Dmypy) -> None:
    """A module whose annotations are all imported aliases and which calls nothing runs no
    hook of the plugin before its boundaries are checked: the watcher is put back on the
    daemon's error store when the edit is parsed (get_additional_deps), so S(0) where V is
    declared stays accepted and R where V is declared stays spmd-mismatch."""
    (project / "aliases.py").write_text(ALIASES)
    # aliases.py named before m.py: see the next test
    second = check_across_an_edit(project, daemon, (ALIAS_ONLY_V1, {(9, "spmd-mismatch")}),
                                  (ALIAS_ONLY_V2, {(9, "spmd-mismatch")}), ("aliases.py", "m.py"))
    assert "the return value x of renamed is" in second


def test_a_daemon_started_from_the_cache_misses_a_new_module_imported_by_another(project: Path,
                                                                                daemon: Dmypy) -> None:
    """mypy's behaviour, documented in docs/editor.md (section 6): in a daemon's first check
    from a fine-grained cache, a module the cache lacks that only another such module imports
    sees the names it imports from cached modules as Any (mypy's update processes it as
    "newly imported" without loading those modules' trees), so its errors are missed, here
    the alias-only module's spmd-mismatch, which the previous test sees when both files are
    named.  Plain mypy and a daemon without the cache report it (the test before)."""
    (project / "aliases.py").write_text(ALIASES)
    (project / "m.py").write_text(ALIAS_ONLY_V1)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    missed = daemon("check", "m.py")
    assert (9, "spmd-mismatch") in errors(plain(project))
    assert errors(missed.stdout) == set(), (
        "mypy now reports a module a new module imports in a daemon started from the cache: "
        "update docs/editor.md, section 6\n" + missed.stdout)


def test_a_daemon_loads_the_cache_plain_mypy_wrote(project: Path) -> None:
    """The plugin's version under dmypy is plain mypy's for the config the daemon started with
    (plugin/__init__.py, _daemon_version): mypy keys every cached module on it, so a daemon's
    first check loads torch from the cache instead of analysing it ("Metadata abandoned for
    ...: plugins differ" was logged for every module before)."""
    d = Dmypy(project)
    try:
        assert d("start", "--", "--use-fine-grained-cache", "-v").returncode == 0
        first = d("check", "m.py")
        assert errors(first.stdout) == V1_ERRORS, first.stdout
    finally:
        d.stop()
    log = first.stderr  # the daemon sends a command's log to its client
    assert "plugins differ" not in log, log[-3000:]
    assert "Redoing load_graph without cache" not in log, log[-3000:]
    assert "Metadata fresh for torch:" in log, log[-3000:]


UNTYPED_V1 = '''\
import torch


def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a + b)
'''
TYPED_V2 = '''\
import torch
from spmd import P, Tensor


def f(a: Tensor[P["tp"]], b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a + b)
'''


def test_dmypy_module_that_starts_using_spmd_types(project: Path, daemon: Dmypy) -> None:
    """A module that meets no SPMD types gets no hook on its torch calls; an edit that makes
    it import spmd is checked with the hooks on (the plugin's view of the module is dropped
    when the daemon parses it again), and the edit back turns them off again."""
    check_across_an_edit(project, daemon, (UNTYPED_V1, set()), (TYPED_V2, {(6, "spmd-partial-nonlinear")}))
    (project / "m.py").write_text(UNTYPED_V1)
    third = daemon("check", "m.py")
    assert errors(third.stdout) == set(), third.stdout + daemon.log()


ROW_V1 = '''\
import torch
import spmd
from spmd import I, V, Tensor


class Row(torch.nn.Module):
    def forward(self, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        return x
'''
ROW_V2 = ROW_V1.replace('-> Tensor[I["tp"]]:', '-> Tensor[V["tp"]]:').replace(
    "return x", 'return spmd.reinterpret(x, "tp", src=I, dst=V)')
ROW_USER = '''\
import torch
from spmd import I, Tensor
from lin import Row


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.row = Row()

    def forward(self, x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        return self.row(x)
'''


def test_dmypy_rechecks_the_callers_of_a_module_whose_forward_changed(project: Path, daemon: Dmypy) -> None:
    """``self.row(x)`` is typed by Row.forward, but the daemon's dependencies record Module's
    ``__call__``: a changed forward must still re-check its callers (plugin dependency
    forward -> __call__, modules.ModuleCallTyper.class_mro_hook)."""
    (project / "lin.py").write_text(ROW_V1)
    (project / "m.py").write_text(ROW_USER)
    assert daemon("start", *DAEMON_ARGS).returncode == 0
    first = daemon("check", "lin.py", "m.py")
    assert errors(first.stdout) == set(), first.stdout + daemon.log()
    (project / "lin.py").write_text(ROW_V2)
    second = daemon("check", "lin.py", "m.py")
    assert errors(second.stdout) == {(12, "spmd-mismatch")}, second.stdout + daemon.log()
    expected = mypy(project, "--cache-dir", str(project / "plain-cache"), "lin.py", "m.py").stdout
    assert diagnostic_lines(second.stdout) == diagnostic_lines(expected)
