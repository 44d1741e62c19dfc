"""CI slice of the robustness runs (issue 7 item 3; the full run is ``python -m soundness``).

Fuzzed annotation strings (hypothesis) in Tensor[...], R[...], S[...], PS[...] and collective
arguments, in many positions, one mypy run: never an internal error.  (torch.distributed is
covered by tests/robustness/test_unannotated.py; megatron-core and torch.nn by the full run.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from soundness import robustness

pytestmark = pytest.mark.timeout(600)

CACHE = Path(os.environ.get("SPMD_MYPY_TEST_CACHE", Path.home() / ".cache" / "spmd-mypy-tests"))


def test_crash_detection() -> None:
    ok = robustness.MypyRun(1, "a.py:1: error: x  [misc]\n", 1.0, False)
    assert not ok.crashed and ok.diagnostics() == {"a.py:1: error: x  [misc]"}
    assert robustness.MypyRun(2, "a.py: error: INTERNAL ERROR -- x\nTraceback (most recent call last):",
                              1.0, False).crashed
    assert robustness.MypyRun(-1, "", 1.0, True).crashed


def test_fuzzed_annotations_never_crash_mypy() -> None:
    pytest.importorskip("hypothesis")
    rec = robustness.fuzz_annotations(n=160, seed=11, per_run=160,
                                      cache=CACHE / "mypy-cache-fuzzed-annotations")
    assert rec["crashes"] == 0, rec["counterexamples"]
    assert rec["checked"] >= 120, rec  # the strings that make a parseable module


MEGATRON_BRANCH_JOIN = '''\
import torch
from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region


def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
    if flag:
        y = reduce_from_tensor_model_parallel_region(x)
    else:
        y = x * 2
    return y
'''


def test_megatron_stubs_add_no_error_to_unannotated_code(tmp_path: Path) -> None:
    """Found by the robustness run over megatron-core (moe_utils.py:280, token_dispatcher.py:592,
    shared_experts.py:557, transformer_engine.py:1639): a variable first assigned from a mapping
    function got its precise spmd type, and the other branch's plain tensor was then an
    [assignment] error in a module that has no SPMD annotation at all.  In such a module the
    mapping calls' results are untyped now."""
    (tmp_path / "m.py").write_text(MEGATRON_BRANCH_JOIN)
    cfg = textwrap.dedent(f"""\
        [mypy]
        plugins = spmd_mypy.plugin
        cache_dir = {CACHE / 'mypy-cache-megatron-join'}

        [spmd_mypy]
        mesh_axes = dp, tp
        """)
    run = robustness.mypy(tmp_path, cfg, ["m.py"], timeout=300, stubs="all")
    assert not run.crashed, run.output
    assert not run.diagnostics(), run.output


INSTALLED_STUBS_PROBE = """\
import megatron
import spmd

reveal_type(megatron.installed_marker)
reveal_type(spmd.installed_marker)
"""

RUN_IN_ENV = """\
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from soundness import robustness
cwd, cfg = Path(sys.argv[2]), Path(sys.argv[3]).read_text()
out = {}
for stubs in ("none", "spmd", "all"):
    run = robustness.mypy(cwd, cfg, ["probe.py"], timeout=240, stubs=stubs)
    out[stubs] = {"crashed": run.crashed, "output": run.output,
                  "diagnostics": sorted(run.diagnostics())}
print(json.dumps(out))
"""


def test_runs_do_not_see_the_installed_stub_packages(tmp_path: Path) -> None:
    """With spmd-mypy pip-installed, ``megatron-stubs`` and ``spmd-stubs`` sit in
    site-packages, and the "plain" run (stubs="none") saw them: on megatron-core the plain
    baseline was mypy with the megatron stubs (``-p megatron.core`` then checks the stub
    package and what it imports: 2516 diagnostics instead of 4849), and the comparison with
    the plugin's run reported 1 added / 2 removed diagnostics (moe_utils.py:281,
    token_dispatcher.py:576) that were the stubs', not the plugin's.  Every run now
    resolves the checked code against site-packages without the project's stub packages;
    the stubs a mode asks for come from this checkout only (``"spmd"``: its spmd stubs,
    ``"all"``: its megatron stubs too).

    The installation is simulated whatever this machine has: a virtual environment (with the
    system site-packages, for mypy) whose own site-packages holds a stub package of each name
    declaring ``installed_marker``; the harness runs from that environment's Python.
    """
    env = tmp_path / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=False,
                    symlinks=os.name != "nt").create(env)
    python = env / ("Scripts" if os.name == "nt" else "bin") / "python"
    site_dir = Path(subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True, text=True, check=True).stdout.strip())
    for name in ("megatron-stubs", "spmd-stubs"):
        (site_dir / name).mkdir()
        (site_dir / name / "__init__.pyi").write_text("installed_marker: int\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "probe.py").write_text(INSTALLED_STUBS_PROBE)
    # the runtime package (stubs="none" finds spmd in runtime/) and torch unanalysed: fast,
    # and a stub package is followed whatever follow_imports says
    (work / "probe.ini").write_text(
        f"[mypy]\ncache_dir = {tmp_path / 'cache'}\n\n"
        "[mypy-spmd.*]\nfollow_imports = skip\n\n[mypy-torch.*]\nfollow_imports = skip\n")
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", RUN_IN_ENV, str(robustness.ROOT), str(work),
                           str(work / "probe.ini")],
                          env=env_vars, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout)
    for stubs, run in runs.items():
        assert not run["crashed"], (stubs, run["output"])
        revealed = [d for d in run["diagnostics"] if "Revealed type" in d]
        # the installed stub packages are not seen: their marker's int is not revealed
        assert len(revealed) == 2 and not any('"int"' in d for d in revealed), \
            (stubs, run["output"])
        # no megatron stubs are on the path but with "all" (megatron-core has no py.typed)
        assert (stubs != "all") == any(
            "megatron" in d and ("[import-not-found]" in d or "[import-untyped]" in d)
            for d in run["diagnostics"]), (stubs, run["output"])
        # "spmd" and "all": this checkout's spmd stubs, which have no marker
        assert (stubs != "none") == any(
            d.startswith("probe.py:5: error: Module has no attribute")
            for d in run["diagnostics"]), (stubs, run["output"])
