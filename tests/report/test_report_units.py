"""The report on small modules: every transition of the table, the options of the ops, when
no gradient flows, loops and branches, scopes, which files are reported, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
MakeReport = Callable[..., Any]

# The table as SPEC section 4 writes it (hand-copied, not read from the engine), with the
# engine's extra rows (reinterpret(I,V), reinterpret(I,P)) from the seeds' design:
# (op, src, dst) -> (forward steps, backward steps), S forms with their dims.
EXPECTED: dict[tuple[str, str, str], tuple[list[str], list[str]]] = {
    ("all_reduce", "P", "R"): (["all_reduce(P,R)"], ["all_reduce(P,R)"]),
    ("all_reduce", "P", "I"): (["all_reduce(P,I)"], ["reinterpret(I,R)"]),
    ("all_gather", "V", "R"): (["all_gather(V,R)"], ["reduce_scatter(P,V)"]),
    ("all_gather", "V", "I"): (["all_gather(V,I)"], ["convert(I,V)"]),
    ("all_gather", "S(1)", "R"): (["all_gather(S(1),R)"], ["reduce_scatter(P,S(1))"]),
    ("all_gather", "S(1)", "I"): (["all_gather(S(1),I)"], ["convert(I,S(1))"]),
    ("reduce_scatter", "P", "V"): (["reduce_scatter(P,V)"], ["all_gather(V,R)"]),
    ("reduce_scatter", "P", "S(1)"): (["reduce_scatter(P,S(1))"], ["all_gather(S(1),R)"]),
    ("all_to_all", "V", "V"): (["all_to_all(V,V)"], ["all_to_all(V,V)"]),
    ("all_to_all", "V", "S(1)"): (["all_to_all(V,S(1))"], ["all_to_all(S(1),V)"]),
    ("all_to_all", "S(0)", "V"): (["all_to_all(S(0),V)"], ["all_to_all(V,S(0))"]),
    ("all_to_all", "S(0)", "S(1)"): (["all_to_all(S(0),S(1))"], ["all_to_all(S(1),S(0))"]),
    ("reinterpret", "R", "I"): (["reinterpret(R,I)"], ["convert(I,P)"]),
    ("reinterpret", "R", "V"): (["reinterpret(R,V)"], ["reinterpret(V,P)"]),
    ("reinterpret", "R", "P"): (["reinterpret(R,P)"], ["reinterpret(R,P)"]),
    ("reinterpret", "I", "R"): (["reinterpret(I,R)"], ["all_reduce(P,I)"]),
    ("reinterpret", "I", "V"): (["reinterpret(I,V)"], ["reinterpret(V,P)", "all_reduce(P,I)"]),
    ("reinterpret", "I", "P"): (["reinterpret(I,P)"], ["reinterpret(R,P)", "all_reduce(P,I)"]),
    ("reinterpret", "V", "P"): (["reinterpret(V,P)"], ["reinterpret(R,V)"]),
    ("convert", "R", "V"): (["convert(R,V)"], ["convert(V,P)"]),
    ("convert", "R", "S(1)"): (["convert(R,S(1))"], ["convert(S(1),P)"]),
    ("convert", "R", "P"): (["convert(R,P)"], ["convert(R,P)"]),
    ("convert", "I", "V"): (["convert(I,V)"], ["all_gather(V,I)"]),
    ("convert", "I", "S(1)"): (["convert(I,S(1))"], ["all_gather(S(1),I)"]),
    ("convert", "I", "P"): (["convert(I,P)"], ["reinterpret(R,I)"]),
    ("convert", "V", "P"): (["convert(V,P)"], ["convert(R,V)"]),
    ("convert", "S(1)", "P"): (["convert(S(1),P)"], ["convert(R,S(1))"]),
    ("convert", "I", "R"): (["reinterpret(I,R)"], ["all_reduce(P,I)"]),  # a spelling
    ("convert", "R", "I"): (["reinterpret(R,I)"], ["convert(I,P)"]),  # a spelling
}
COMMS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

# The sources below write typed collectives as statements to have the report list them;
# spmd-discarded-result (a dropped result) is beside the point here.
# (in the test's modules only: a global disable_error_code would be part of torch's cache key)
CONFIG = """\
[mypy]
python_version = 3.11

[mypy-transitions,cases,helper,broken,syntax,unannotated,meg,fns]
disable_error_code = spmd-discarded-result

[spmd_mypy]
mesh_axes = dp, tp
"""


def _ann(form: str) -> str:
    if form.startswith("S("):
        return f'Tensor[S[{form[2:-1]}, "tp"]]'
    return f'Tensor[{form}["tp"]]'


def _arg(form: str) -> str:
    return form  # S(1) is written S(1) in a call


def _transitions_module() -> str:
    out = ["import spmd", "from spmd import I, P, R, S, Tensor, V", ""]
    for i, (op, src, dst) in enumerate(EXPECTED):
        expert = ", expert_mode=True" if (op, src, dst) in (("reinterpret", "R", "P"),
                                                           ("reinterpret", "I", "P")) else ""
        out += [f"def t{i}(x: {_ann(src)}) -> None:",
                f'    spmd.{op}(x, "tp", src={_arg(src)}, dst={_arg(dst)}{expert})', ""]
    return "\n".join(out)


CASES = '''\
from typing import Any, Final, cast

import torch
import torch.distributed as dist

import helper
import spmd
from spmd import I, P, R, S, Tensor, V

AXIS: Final = "tp"
TOP = cast(Tensor[P["tp"]], torch.zeros(2))
TOP_R = spmd.all_reduce(TOP, "tp", src=P, dst=R)


def avg(p: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
    return spmd.all_reduce(p, "tp", src=P, dst=R, op="avg")


def max_no_grad(v: Tensor[V["tp"]]) -> Tensor[R["tp"]]:
    with torch.no_grad():
        m = spmd.all_reduce(v, "tp", src=V, dst=R, op="max")
    return m


def summand_no_grad(p: Tensor[P["tp"]]) -> None:
    with torch.no_grad():
        spmd.reinterpret(p, "tp", src=P, dst=V)
    spmd.reinterpret(p.detach(), "tp", src=P, dst=V)


def flattened(p: Tensor[P["dp", "tp"]]) -> Tensor[R["dp", "tp"]]:
    return spmd.all_reduce(p, ("dp", "tp"), src=P, dst=R)


def final_axis(p: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
    return spmd.all_reduce(p, AXIS, src=P, dst=I)


def default_src(p: Tensor[P["tp"]]) -> Tensor[S[0, "tp"]]:
    return spmd.reduce_scatter(p, "tp", dst=S(0))


def scatter_avg(p: Tensor[P["tp"]]) -> Tensor[S[0, "tp"]]:
    return spmd.reduce_scatter(p, "tp", dst=S(0), op="avg")


def routes(p: Tensor[P["tp"]], s: Tensor[S[0, "tp"]], v: Tensor[V["tp"]], i: Tensor[I["tp"]]) -> None:
    spmd.redistribute(p, "tp", src=P, dst=R)
    spmd.redistribute(s, "tp", src=S(0), dst=S(1))
    spmd.redistribute(v, "tp", src=V, dst=S(0))
    spmd.redistribute(i, "tp", src=I, dst=R)
    spmd.redistribute(i, "tp", src=I, dst=I)


def partial_ops(a: Tensor[V["tp"]], b: Tensor[V["tp"]], r: Tensor[R["tp"]]) -> None:
    spmd.einsum("ij,jk->ik", a, b, out_partial_axes="tp")
    spmd.matmul(a, b, out_partial_axes=("tp",))
    spmd.sum(a, 0, out_partial_axes="tp")
    spmd.linear(r, a)
    spmd.linear(r, a, out_partial_axes=None)


def no_gradient(p: Tensor[P["tp"]], w: Tensor[R["tp"]]) -> None:
    spmd.all_reduce(p.detach(), "tp", src=P, dst=R)
    d = p.detach()
    spmd.all_reduce(d, "tp", src=P, dst=R)
    spmd.reinterpret(spmd.all_reduce(d, "tp", src=P, dst=R), "tp", src=R, dst=V)
    with torch.no_grad():
        spmd.all_reduce(p, "tp", src=P, dst=R)
    g = w.grad
    assert g is not None
    spmd.all_reduce(g, "tp", src=P, dst=R)
    assert w.grad is not None
    spmd.all_reduce(w.grad, "tp", src=P, dst=R)
    spmd.all_reduce(p, "tp", src=P, dst=R)


def control(ps: list[Tensor[P["tp"]]], flag: bool, p: Tensor[P["tp"]]) -> None:
    for q in ps:
        spmd.all_reduce(q, "tp", src=P, dst=R)
    else:
        spmd.all_reduce(p, "tp", src=P, dst=R)
    if flag:
        spmd.all_reduce(p, "tp", src=P, dst=R)
    [spmd.all_reduce(q, "tp", src=P, dst=R) for q in ps]
    while flag:
        spmd.all_reduce(p, "tp", src=P, dst=R)
        flag = False
    spmd.all_reduce(p, "tp", src=P, dst=R) if flag else None

    def inner(t: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
        return spmd.all_reduce(t, "tp", src=P, dst=R)

    for q in ps:
        inner(q)


def scopes() -> None:
    class Local:
        def method(self, t: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
            return spmd.all_reduce(t, "tp", src=P, dst=I)

    f = lambda t: spmd.all_reduce(t, "tp", src=P, dst=R)  # noqa: E731


class Model:
    def forward(self, s: Tensor[S[0, "tp"]]) -> Tensor[R["tp"]]:
        return spmd.all_gather(s, "tp", src=S(0), dst=R)

    @staticmethod
    def decorated(v: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        return spmd.all_to_all(v, "tp", src=V, dst=V)


def typed_only(x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
    return x * 2


def untyped_local() -> None:
    y: Tensor[I["tp"]] = torch.zeros(2)
    del y


def untyped_nothing(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def via_helper(p: Tensor[P["tp"]]) -> None:
    helper.reduce(p)


def raw(t: torch.Tensor, mesh: Any) -> None:
    dist.all_reduce(t, group=mesh.get_group("dp"))
    dist.all_reduce(t)
    dist.all_gather_into_tensor(t, t, group=mesh.get_group(mesh_dim="tp"))
    g = mesh.get_group("tp")
    dist.broadcast(t, 0, group=g)
    dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1)])
'''

HELPER = '''\
import spmd
from spmd import P, R, Tensor


def reduce(p: Tensor[P["tp"]]) -> Tensor[R["tp"]]:
    return spmd.all_reduce(p, "tp", src=P, dst=R)
'''

BROKEN = '''\
import spmd
from spmd import P, R, Tensor


def name() -> str:
    return "tp"


def unreadable(p: Tensor[P["tp"]], q: Tensor[R["tp"]]) -> None:
    spmd.all_reduce(p, name(), src=P, dst=R)
    spmd.all_reduce(q, "tp", src=R, dst=R)
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("project")
    (d / "mypy.ini").write_text(CONFIG)
    (d / "transitions.py").write_text(_transitions_module())
    (d / "cases.py").write_text(CASES)
    (d / "helper.py").write_text(HELPER)
    (d / "broken.py").write_text(BROKEN)
    (d / "syntax.py").write_text("def f(:\n    pass\n")
    return d


@pytest.fixture(scope="module")
def report(make_report: MakeReport, project: Path) -> dict[str, Any]:
    r = make_report(["transitions.py", "cases.py"], config_file=project / "mypy.ini", cwd=project)
    assert r.errors == [], r.errors
    return r.as_json()


def _functions(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in report["functions"]}


def _steps(steps: list[dict[str, Any]]) -> list[str]:
    return [s["op"] + (f"({s['src']},{s['dst']})" if s["src"] else "")
            + (f" {s['note']}" if s["note"] else "") for s in steps]


def test_every_transition_matches_the_table(report: dict[str, Any]) -> None:
    fns = _functions(report)
    for i, ((op, src, dst), (forward, backward)) in enumerate(EXPECTED.items()):
        f = fns[f"transitions.t{i}"]
        [site] = f["sites"]
        assert (site["call"], site["src"], site["dst"], site["axes"]) == (f"spmd.{op}", src, dst, ["tp"])
        assert _steps(site["forward"]) == forward, (op, src, dst)
        assert _steps(site["backward"]) == backward, (op, src, dst)
        assert site["gradient"] and site["problem"] is None
        for s in site["forward"] + site["backward"]:
            assert s["comms"] == (s["op"] in COMMS) and s["axes"] == ["tp"]
        fwd = [s for s in forward if s.split("(")[0] in COMMS]
        bwd = [s for s in backward if s.split("(")[0] in COMMS]
        assert [(t["op"], t["count"]) for t in f["totals"]["forward"]] == \
            [(s.split("(")[0], 1) for s in fwd]
        assert sorted((t["op"], t["count"]) for t in f["totals"]["backward"]) == \
            sorted((s.split("(")[0], 1) for s in bwd)


def test_the_briefs_three_examples(report: dict[str, Any]) -> None:
    """reinterpret(I,R): nothing forward, all_reduce backward; all_gather(S(0),R): all_gather
    forward, reduce_scatter backward; linear with out_partial_axes: nothing either way."""
    fns = _functions(report)
    i_r = list(EXPECTED).index(("reinterpret", "I", "R"))
    assert fns[f"transitions.t{i_r}"]["totals"] == {
        "forward": [], "backward": [{"op": "all_reduce", "axes": ["tp"], "count": 1}]}
    assert fns["cases.Model.forward"]["totals"] == {
        "forward": [{"op": "all_gather", "axes": ["tp"], "count": 1}],
        "backward": [{"op": "reduce_scatter", "axes": ["tp"], "count": 1}]}
    [site] = fns["cases.Model.forward"]["sites"]
    assert _steps(site["backward"]) == ["reduce_scatter(P,S(0))"]
    assert fns["cases.partial_ops"]["totals"] == {"forward": [], "backward": []}


def test_reduce_ops_axes_and_defaults(report: dict[str, Any]) -> None:
    fns = _functions(report)
    [avg] = fns["cases.avg"]["sites"]
    assert (_steps(avg["forward"]), _steps(avg["backward"])) == (["all_reduce(P,R) avg"],
                                                                 ["all_reduce(P,R) avg"])
    assert avg["reduce_op"] == "avg"
    [mx] = fns["cases.max_no_grad"]["sites"]
    assert _steps(mx["forward"]) == ["all_reduce(V,R) max"] and mx["backward"] == []
    assert (mx["gradient"], mx["no_gradient"]) == (False, 'op="max"')
    # reinterpret(P,V): no comms, no backward, on a value that carries no gradient
    summands = fns["cases.summand_no_grad"]["sites"]
    assert [(s["transition"], s["forward"], s["backward"], s["gradient"], s["no_gradient"])
            for s in summands] == [("reinterpret(P,V)", [], [], False, "no_grad"),
                                   ("reinterpret(P,V)", [], [], False, "detached")]
    [flat] = fns["cases.flattened"]["sites"]
    assert flat["axes"] == ["dp", "tp"] and flat["forward"][0]["axes"] == ["dp", "tp"]
    assert fns["cases.flattened"]["totals"]["forward"] == [
        {"op": "all_reduce", "axes": ["dp", "tp"], "count": 1}]
    [final] = fns["cases.final_axis"]["sites"]
    assert final["axes"] == ["tp"] and _steps(final["forward"]) == ["all_reduce(P,I)"]
    [rs] = fns["cases.default_src"]["sites"]
    assert (rs["src"], rs["dst"], _steps(rs["backward"])) == ("P", "S(0)", ["all_gather(S(0),R)"])
    [rs_avg] = fns["cases.scatter_avg"]["sites"]
    assert (_steps(rs_avg["forward"]), _steps(rs_avg["backward"]), rs_avg["reduce_op"]) == (
        ["reduce_scatter(P,S(0)) avg"], ["all_gather(S(0),R) avg"], "avg")


def test_redistribute_routes(report: dict[str, Any]) -> None:
    sites = _functions(report)["cases.routes"]["sites"]
    assert [(s["transition"], _steps(s["forward"]), _steps(s["backward"])) for s in sites] == [
        ("all_reduce(P,R)", ["all_reduce(P,R)"], ["all_reduce(P,R)"]),
        ("all_to_all(S(0),S(1))", ["all_to_all(S(0),S(1))"], ["all_to_all(S(1),S(0))"]),
        (None, [], []),  # V -> S(0): the same layout; the runtime moves nothing
        ("reinterpret(I,R)", ["reinterpret(I,R)"], ["all_reduce(P,I)"]),
        (None, [], []),  # the identity
    ]


def test_partial_ops(report: dict[str, Any]) -> None:
    sites = _functions(report)["cases.partial_ops"]["sites"]
    assert [s["call"] for s in sites] == ["spmd.einsum", "spmd.matmul", "spmd.sum"]
    for s in sites:
        assert (s["transition"], _steps(s["forward"]), _steps(s["backward"]), s["axes"]) == (
            "reinterpret(V,P)", ["reinterpret(V,P)"], ["reinterpret(R,V)"], ["tp"])


def test_no_gradient(report: dict[str, Any]) -> None:
    sites = _functions(report)["cases.no_gradient"]["sites"]
    assert [(s["gradient"], s["no_gradient"]) for s in sites] == [
        (False, "detached"), (False, "detached"), (False, "detached"), (False, "detached"),
        (False, "no_grad"), (False, ".grad"), (False, ".grad"), (True, None)]
    assert _functions(report)["cases.no_gradient"]["totals"]["backward"] == [
        {"op": "all_reduce", "axes": ["tp"], "count": 1}]


def test_loops_and_branches(report: dict[str, Any]) -> None:
    fns = _functions(report)
    sites = fns["cases.control"]["sites"]
    assert [(s["in_loop"], s["in_branch"]) for s in sites] == [
        (True, False),  # for body
        (False, True),  # for ... else
        (False, True),  # if
        (True, False),  # list comprehension
        (True, False),  # while
        (False, True),  # conditional expression
    ]
    # a def inside a loop is not looped: its call is
    [inner] = fns["cases.control.<locals>.inner"]["sites"]
    assert (inner["in_loop"], inner["in_branch"]) == (False, False)


def test_scopes_are_python_qualnames(report: dict[str, Any]) -> None:
    fns = _functions(report)
    assert "cases.scopes.<locals>.Local.method" in fns
    assert "cases.scopes.<locals>.<lambda>" in fns
    assert "cases.Model.decorated" in fns
    top = fns["cases.<module>"]
    top_line = CASES.splitlines().index('TOP_R = spmd.all_reduce(TOP, "tp", src=P, dst=R)') + 1
    assert [s["line"] for s in top["sites"]] == [top_line] and top["line"] == 1
    # listed: typed signatures or typed locals, with or without collectives; not the rest
    assert fns["cases.typed_only"]["sites"] == [] and fns["cases.typed_only"]["typed"]
    assert fns["cases.untyped_local"]["typed"]
    assert "cases.untyped_nothing" not in fns
    # functions in file order; each site under its own function only (no helper expansion)
    lines = [f["line"] for f in report["functions"] if f["path"] == "cases.py"]
    assert lines == sorted(lines)
    assert fns["cases.via_helper"]["sites"] == []


def test_raw_collectives(report: dict[str, Any]) -> None:
    f = _functions(report)["cases.raw"]
    assert not f["typed"]  # listed for its collectives
    assert [(s["call"], s["axes"], _steps(s["forward"]), s["backward"], s["no_gradient"])
            for s in f["sites"]] == [
        ("torch.distributed.all_reduce", ["dp"], ["all_reduce"], [], "raw collective"),
        ("torch.distributed.all_reduce", ["world"], ["all_reduce"], [], "raw collective"),
        ("torch.distributed.all_gather_into_tensor", ["tp"], ["all_gather"], [],
         "raw collective"),
        ("torch.distributed.broadcast", None, ["broadcast"], [], "raw collective"),
        ("torch.distributed.batch_isend_irecv", ["world"], ["send/recv"], [], "raw collective"),
    ]
    assert f["totals"]["forward"] == [
        {"op": "all_gather", "axes": ["tp"], "count": 1},
        {"op": "all_reduce", "axes": ["dp"], "count": 1},
        {"op": "all_reduce", "axes": ["world"], "count": 1},
        {"op": "broadcast", "axes": ["?"], "count": 1},
        {"op": "send/recv", "axes": ["world"], "count": 1}]


def test_only_the_given_files(report: dict[str, Any]) -> None:
    assert report["paths"] == ["transitions.py", "cases.py"]
    assert {f["path"] for f in report["functions"]} == {"transitions.py", "cases.py"}
    assert not any(f["module"] == "helper" for f in report["functions"])


def test_every_hook_fires_on_a_warm_cache(make_report: MakeReport, project: Path,
                                          report: dict[str, Any]) -> None:
    again = make_report(["transitions.py", "cases.py"], config_file=project / "mypy.ini",
                        cwd=project).as_json()
    assert again == report
    helper = make_report(["helper.py"], config_file=project / "mypy.ini", cwd=project).as_json()
    assert [f["name"] for f in helper["functions"]] == ["helper.reduce"]
    assert len(helper["functions"][0]["sites"]) == 1


def test_json_schema(report: dict[str, Any]) -> None:
    assert set(report) == {"version", "paths", "functions", "totals", "errors"}
    assert report["version"] == 1
    assert set(report["totals"]) == {"functions", "sites", "forward", "backward"}
    for f in report["functions"]:
        assert set(f) == {"name", "module", "qualname", "path", "line", "typed", "sites", "totals"}
        for s in f["sites"]:
            assert set(s) == {"line", "column", "source", "call", "axes", "src", "dst",
                              "reduce_op", "transition", "forward", "backward", "gradient",
                              "no_gradient", "in_loop", "in_branch", "problem"}
            for step in s["forward"] + s["backward"]:
                assert set(step) == {"op", "src", "dst", "axes", "note", "comms"}


def _cli(project: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spmd_mypy.cli", "report", *args,
                           "--config-file", "mypy.ini", "--cache-dir", str(cache)],
                          capture_output=True, text=True, cwd=project, timeout=120)


def test_cli_plain_json_and_errors(make_report: MakeReport, project: Path,
                                   report_cache: Path) -> None:
    expected = make_report(["broken.py"], config_file=project / "mypy.ini", cwd=project)
    assert expected.errors  # mypy's messages for the file: unreadable axis, src mismatch
    [f] = [f for f in expected.functions if f.qualname == "unreadable"]
    first, second = f.sites
    assert first.problem == "axis not readable statically" and first.forward == []
    assert second.transition is None and second.problem is not None  # R -> R all_reduce

    proc = _cli(project, report_cache, "broken.py", "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data == json.loads(expected.to_json())
    assert "spmd-axis" in proc.stderr
    plain = _cli(project, report_cache, "broken.py")
    assert plain.returncode == 1
    assert plain.stdout == expected.format_table()
    assert "mypy reported" in plain.stdout

    bad = _cli(project, report_cache, "syntax.py")
    assert bad.returncode == 2 and "syntax" in bad.stderr.lower() and bad.stdout == ""


def test_plain_table_is_aligned(make_report: MakeReport, project: Path) -> None:
    text = make_report(["cases.py"], config_file=project / "mypy.ini", cwd=project).format_table()
    blocks = [b for b in text.split("\n\n") if "  line  op" in b]
    assert blocks
    header = blocks[0].splitlines()[1]
    cols = [header.index(c) for c in ("op", "forward", "backward", "source")]
    for b in blocks:
        rows = b.splitlines()[1:-1]
        for row in rows:
            assert row.startswith("  ")
            for c in cols:  # every column starts after a gap of two spaces
                assert row[c - 2:c] == "  " and row[c] != " ", (row, c)
    assert "line* in a loop" in text
    assert textwrap.dedent(text) == text  # no stray indentation of the function headers


def test_global_redistribute_plan_steps() -> None:
    """A partition-spec redistribute: the planner's steps forward, their backward reversed."""
    from spmd_mypy.engine.types import PARTIAL, SpmdType, shard
    from spmd_mypy.report import PLAN, read_global_redistribute

    src = SpmdType.of({"dp": shard(0), "tp": shard(0)}, (("dp", "tp"),))
    dst = SpmdType.of({"dp": shard(0), "tp": shard(0)}, (("tp", "dp"),))
    call = read_global_redistribute(None, src, dst, ("dp", "tp"))
    assert call.problem is None and call.transition == PLAN
    assert [s.text() for s in call.forward] == ["all_gather(S(0),I) on (dp, tp)",
                                                "convert(I,S(0)) on (tp, dp)"]
    assert [s.text() for s in call.backward] == ["all_gather(S(0),I) on (tp, dp)",
                                                 "convert(I,S(0)) on (dp, tp)"]
    assert call.src_text == 'PS[("dp", "tp"),]' and call.dst_text == 'PS[("tp", "dp"),]'
    # x's type fills the axes src leaves unsaid; an impossible plan is a problem, not a crash
    x = SpmdType.of({"dp": PARTIAL}, ((),))
    call = read_global_redistribute(x, SpmdType.of({}, ((),)),
                                    SpmdType.of({"dp": shard(0)}, (("dp",),)), ("dp", "tp"))
    assert [s.text() for s in call.forward] == ["reduce_scatter(P,S(0)) on dp"]
    bad = read_global_redistribute(None, SpmdType.of({}, ((),)), SpmdType.of({}, ((), ())),
                                   ("dp", "tp"))
    assert bad.problem is not None and "rank" in bad.problem


UNANNOTATED = '''\
import spmd
from spmd import R, P, I, Tensor


def forward(self, input_):
    out = spmd.all_reduce(input_, "tp", src=P, dst=I)
    bad = 1 + "a"  # mypy checks no unannotated body by default: not an error here
    return spmd.reinterpret(out, "tp", src=I, dst=R)


class Layer:
    def forward(self, x):
        def inner(t: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
            worse = 1 + "b"  # an annotated function: checked
            return spmd.all_reduce(t, "tp", src=P, dst=I)
        return inner(spmd.reinterpret(x, "tp", src=V, dst=P))


def typed(x: Tensor[P["tp"]]) -> int:
    return "c"
'''


def test_unannotated_functions_are_reported(make_report: MakeReport, project: Path) -> None:
    """Call sites in unannotated functions (``def forward(self, input_):``) were left out
    ("0 functions, 0 call sites"): mypy does not check those bodies by default, so no hook
    fired.  They are listed; mypy's errors stay the ones it reports under the user's config."""
    (project / "unannotated.py").write_text(UNANNOTATED)
    r = make_report(["unannotated.py"], config_file=project / "mypy.ini", cwd=project)
    sites = {f.qualname: [(s.line, s.op_text) for s in f.sites] for f in r.functions}
    assert sites == {
        "forward": [(6, "all_reduce(P,I) on tp"), (8, "reinterpret(I,R) on tp")],
        "Layer.forward": [(16, "reinterpret(?) on tp")],  # V is not defined
        "Layer.forward.<locals>.inner": [(15, "all_reduce(P,I) on tp")],
        "typed": [],
    }, sites
    lines = sorted(int(m.split(":")[1]) for m in r.errors)
    # what mypy reports under this config: not 7 (1 + "a") nor 16 (V is not defined), in
    # unannotated bodies
    assert lines == [14, 20], r.errors
    # a global flag: torch is analysed again under it, in a cache of its own (the shared one
    # stays as the other tests need it)
    checked = make_report(["unannotated.py"], config_file=project / "mypy.ini", cwd=project,
                          mypy_args=["--check-untyped-defs", "--cache-dir",
                                     str(project / ".cache-check-untyped-defs")])
    assert sorted(int(m.split(":")[1]) for m in checked.errors) == [7, 14, 16, 20], checked.errors
    assert [f.qualname for f in checked.functions] == [f.qualname for f in r.functions]


MEGATRON = '''\
import torch

import megatron.core.tensor_parallel.mappings as mappings
import spmd
from megatron.core.tensor_parallel import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    reduce_from_tensor_model_parallel_region,
)
from spmd import I, S, Tensor


def row_parallel(h: Tensor[S[-1, "tp"]], w: Tensor[S[1, "tp"]]) -> Tensor[I["tp"]]:
    out = spmd.linear(h, w, out_partial_axes="tp")
    return reduce_from_tensor_model_parallel_region(out)


def col_input(x: Tensor[I["tp"]]) -> torch.Tensor:
    return copy_to_tensor_model_parallel_region(x)


def sequence(x: Tensor[S[0, "tp"]], flag: bool) -> None:
    gather_from_sequence_parallel_region(x)
    mappings.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False)
    gather_from_sequence_parallel_region(x, flag)


def untyped(x):
    return reduce_from_tensor_model_parallel_region(x)
'''


def test_megatron_mapping_calls(make_report: MakeReport, project: Path) -> None:
    """Megatron's mapping functions typed by the stub are listed as the table's collective
    (engine.megatron) on tp, forward and backward: the report left them out (a row-parallel
    forward reducing with reduce_from_... showed "total forward: -", copy_to_... "(no
    collectives)"; the probe of session 39, f3).  tensor_parallel_output_grad picks the dst;
    a flag known only at run time is "?"."""
    (project / "meg.py").write_text(MEGATRON)
    r = make_report(["meg.py"], config_file=project / "mypy.ini", cwd=project)
    assert r.errors == [], r.errors
    fns = {f.qualname: f for f in r.functions}
    sites = {q: [(s.line, s.op_text, [x.text() for x in s.forward_comms()],
                  [x.text() for x in s.backward_comms()], s.problem) for s in f.sites]
             for q, f in fns.items()}
    base = "megatron.core.tensor_parallel.mappings."
    assert sites["row_parallel"][1] == (
        15, "all_reduce(P,I) on tp (megatron)", ["all_reduce(P,I) on tp"], [], None)
    assert sites["col_input"] == [
        (19, "reinterpret(I,R) on tp (megatron)", [], ["all_reduce(P,I) on tp"], None)]
    assert sites["sequence"] == [
        (23, "all_gather(S(0),R) on tp (megatron)", ["all_gather(S(0),R) on tp"],
         ["reduce_scatter(P,S(0)) on tp"], None),
        (24, "all_gather(S(0),I) on tp (megatron)", ["all_gather(S(0),I) on tp"], [], None),
        (25, "all_gather(S(0),?) on tp (megatron)", [], [], "src/dst not readable statically"),
    ], sites["sequence"]
    # an unannotated function's call is listed too (its input is untyped; it communicates)
    assert [s[1] for s in sites["untyped"]] == ["all_reduce(P,I) on tp (megatron)"]
    assert {s.call for f in r.functions for s in f.sites} >= {
        base + "reduce_from_tensor_model_parallel_region",
        base + "copy_to_tensor_model_parallel_region"}
    text = r.format_table()
    assert "meg.col_input  meg.py:18\n" in text, text  # no longer "(no collectives)"


FUNCTIONS = '''\
from typing import Any

import torch
import torch.distributed as dist

import spmd
from spmd import I, P, R, Tensor


class CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return x

    @staticmethod
    def backward(ctx: Any, g: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        return spmd.all_reduce(g, "tp", src=P, dst=I)


class ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor[P["tp"]]) -> Tensor[I["tp"]]:
        out = x.clone()
        dist.all_reduce(out, group=ctx.mesh.get_group("tp"))
        return out

    @staticmethod
    def backward(ctx: Any, g: Tensor[I["tp"]]) -> Tensor[R["tp"]]:
        return g


def use(x: Tensor[I["tp"]], p: Tensor[P["tp"]]) -> None:
    CopyTo.apply(x)
    ReduceFrom.apply(p)
'''


def test_custom_function_backward_and_apply(make_report: MakeReport, project: Path) -> None:
    """A custom Function's backward issues its collectives in the backward pass: they are in
    the backward column of backward()'s rows (they were listed forward).  An ``Fn.apply`` site
    lists Fn.forward's collectives forward and Fn.backward's backward (nothing was listed
    there); they are counted in those methods' totals, not again in the caller's."""
    (project / "fns.py").write_text(FUNCTIONS)
    r = make_report(["fns.py"], config_file=project / "mypy.ini", cwd=project)
    assert r.errors == [], r.errors
    fns = {f.qualname: f for f in r.functions}
    [bwd] = fns["CopyTo.backward"].sites
    assert ([s.text() for s in bwd.forward_comms()], [s.text() for s in bwd.backward_comms()]) == (
        [], ["all_reduce(P,I) on tp"])
    assert fns["CopyTo.backward"].backward_totals() == {("all_reduce", ("tp",)): 1}
    [raw] = fns["ReduceFrom.forward"].sites
    assert [s.text() for s in raw.forward_comms()] == ["all_reduce on tp"]
    sites = [(s.line, s.op_text, [x.text() for x in s.forward_comms()],
              [x.text() for x in s.backward_comms()]) for s in fns["use"].sites]
    assert sites == [
        (33, "CopyTo.apply", [], ["all_reduce(P,I) on tp"]),
        (34, "ReduceFrom.apply", ["all_reduce on tp"], []),
    ], sites
    assert not fns["use"].forward_totals() and not fns["use"].backward_totals()
    assert r.forward_totals() == {("all_reduce", ("tp",)): 1}
    assert r.backward_totals() == {("all_reduce", ("tp",)): 1}
