"""A typed call returned by its function is settled against the declared return type before
mypy compares the two (``BoundaryChecker.settled_return``): where the rule accepts the value
without an error (``return F.linear(x, w)``, an ``S(-1)`` result where ``V`` is declared),
mypy reports nothing, where it used to report an [return-value] error (types formatted, the
statement found) that the boundary watcher then dropped (~50 us each; bench/static_overhead's
corpus had three a module).  What users see does not change: a value the rule rejects keeps
its spmd error, a returned name (no hook) goes through the watcher as before, a custom
Function's backward keeps the types its duality check reads.

Observed with a second watcher on mypy's error store, above the plugin's: it sees every error
mypy reports before the plugin's watcher drops it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

# a plugin that records every [return-value] error mypy reports (before any watcher drops it)
RECORDING_PLUGIN = '''
from mypy.checker_state import checker_state
from mypy.errors import ErrorWatcher

from spmd_mypy.plugin import SpmdPlugin

LOG = {log!r}
_stores = set()


def _record(file, info):
    if info.code is not None and info.code.code == "return-value" and file.endswith("m.py"):
        with open(LOG, "a") as f:
            f.write(f"{{info.line}}\\n")
    return False  # kept: the plugin's own watcher (below this one) decides


class Recording(SpmdPlugin):
    def _watch(self):
        # just above the plugin's watcher (the bottom of the stack), below mypy's own, which
        # it pushes and pops (an overload attempt's): those see an error first, as the
        # plugin's watcher does
        chk = checker_state.type_checker
        store = getattr(getattr(chk, "msg", None), "errors", None)
        if store is not None and id(store) not in _stores:
            _stores.add(id(store))
            store._watchers.insert(1 if store._watchers else 0,
                                   ErrorWatcher(store, filter_errors=_record))

    def get_function_hook(self, fullname):
        hook = super().get_function_hook(fullname)
        self._watch()
        return hook

    def get_method_hook(self, fullname):
        hook = super().get_method_hook(fullname)
        self._watch()
        return hook


def plugin(version):
    return Recording
'''

SOURCE = '''
import torch
import torch.nn.functional as F
import spmd
from spmd import I, R, S, Tensor, V

def settled(x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
    return F.linear(x, w)  # S(-1) where V is declared: accepted, settled at the hook

def operator(a: Tensor[V["tp"]], b: Tensor[V["tp"]]) -> Tensor[S[1, "tp"]]:
    return a + b  # V where S(1) is declared (the declaration says which dim): accepted

def named(x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
    h = F.linear(x, w)
    return h  # a name: no hook, mypy's error dropped by the watcher as before

def rejected(x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[R["tp"]]:
    return F.linear(x, w)  # V where R is declared: the spmd error

def inner(x: Tensor[R["tp"]], w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
    return torch.relu(F.linear(x, w))  # the outer call is the value: settled at its hook
'''


def _run(tmp_path: Path) -> tuple[str, list[int]]:
    log = tmp_path / "return_errors.log"
    (tmp_path / "recording.py").write_text(RECORDING_PLUGIN.format(log=str(log)))
    write_config(tmp_path)
    config = (tmp_path / "mypy.ini").read_text().replace(
        "plugins = spmd_mypy.plugin", f"plugins = {tmp_path / 'recording.py'}")
    (tmp_path / "mypy.ini").write_text(config)
    (tmp_path / "m.py").write_text(textwrap.dedent(SOURCE).lstrip())
    out = run_mypy(tmp_path, "--no-error-summary", "m.py")
    lines = sorted(int(x) for x in log.read_text().split()) if log.exists() else []
    return out, lines


def test_accepted_returned_calls_reach_mypy_settled(tmp_path: Path) -> None:
    out, lines = _run(tmp_path)
    # the diagnostics users see: only the rejected value's spmd error
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("m.py:17:") and "[spmd-mismatch]" in errors[0], out
    # mypy reported [return-value] only where no hook settles the value: the returned name
    # (dropped by the watcher) and the rejected call (replaced by its spmd error)
    assert lines == [14, 17], (lines, out)
