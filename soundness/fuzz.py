"""Differential fuzzer (docs/soundness.md): random small typed programs, three verdicts.

Each program (``soundness.fuzz_model``: typed inputs on the 2 x 2 ("dp", "tp") mesh, a
few torch ops, collectives and conversions, then ``return`` with a declared type or a
``loss.backward()``) is judged three ways:

1. the mypy plugin: mypy (in process, warm cache) on the program's source;
2. the runtime check mode: ``with spmd.typecheck():`` on a fake single-process world
   (``backend="fake"``, world 4, 2 x 2: enough to trace types; the values are garbage);
3. the numerical truth: the program on a real 4-rank gloo world (``fuzz_pool``, float64)
   against the single-device program on the global values the types denote
   (``fuzz_ref``), forward and, with a cotangent of the dual type, backward.

Agreement, precisely:

- the plugin's verdict equals the check mode's: both accept, or both reject with the
  first error on the same line and the check mode's code among the plugin's codes on
  that line (a boundary mismatch at ``return`` is ``[spmd-mismatch]`` in mypy (``[return-value]`` when the value is not a tensor) and a type
  difference in check mode: both count as code "return");
- accepted (by both) => numerically correct: the ranks' output, read by the declared
  type, equals the reference, and so do the input gradients read by the dual types.

A rejected program that computes the right values on this draw is not a disagreement
(the rule may be conservative, or the draw lucky): it is counted as "rejected,
numerically equal on this draw".  A rejected program whose claim (the declared output
type, or a collective's src/dst) is numerically wrong is "rejected with counterexample".

Any disagreement is shrunk by hypothesis to a minimal program and saved as a regression
test under ``tests/soundness/regressions/`` (replayed by the default test run).

    python -m soundness.fuzz --seconds 180 --seed 1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .fuzz_model import (AXES, COLLECTIVES, FORMS, OPS, PRELUDE, PRELUDE_LINES, Program, Stmt,
                         Type, collective_extras, dual, render_type)

ROOT = Path(__file__).resolve().parents[1]
REGRESSIONS = ROOT / "tests" / "soundness" / "regressions"


# ======================================================================================
# Verdicts


@dataclass(frozen=True)
class Verdict:
    """``line`` is 1-based in the function (the ``def`` is line 1); None when accepted."""

    line: int | None = None
    codes: tuple[str, ...] = ()
    note: str = ""

    @property
    def accepted(self) -> bool:
        return self.line is None

    def __str__(self) -> str:
        if self.accepted:
            return "accepted"
        return f"line {self.line}: {', '.join(self.codes)}" + (f" ({self.note[:200]})" if self.note else "")


# --------------------------------------------------------------------------------------
# (1) the mypy plugin


class MypyRunner:
    """mypy in this process on one module; the cache in ``workdir`` keeps torch warm."""

    ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<msg>.*?)(  \[(?P<code>[a-z-]+)\])?$")

    def __init__(self, workdir: str | None = None) -> None:
        # one work directory per user and checkout: its cache keeps torch's stubs analysed
        # between runs (a cold cache costs ~10 s); each program's own files are removed
        # and per version of the plugin (a hash of its and the engine's sources): mypy's cache
        # does not notice a change in the plugin's modules, and a stale cache gave a replay
        # the old plugin's verdict
        from spmd_mypy.plugin import __version__ as plugin_version

        default = Path(tempfile.gettempdir()) / (
            f"spmd-fuzz-mypy-{os.getuid()}-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"
            f"-{plugin_version[:8]}")
        self.dir = Path(workdir) if workdir else default
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "mypy.ini").write_text(
            "[mypy]\nplugins = spmd_mypy.plugin\nfollow_imports = silent\n"
            "[spmd_mypy]\nmesh_axes = dp, tp\n")
        self.crashes = 0
        self.count = 0
        from .fuzz_mypy import MypyWorker

        self.worker = MypyWorker()

    def _forget(self, module: Path) -> None:
        module.unlink(missing_ok=True)
        for f in (self.dir / ".cache").glob(f"*/{module.stem}.*"):
            f.unlink(missing_ok=True)

    def close(self) -> None:
        self.worker.close()

    def verdict(self, prog: Program) -> tuple[Verdict, list[str]]:
        self.count += 1
        # a module name per program text: mypy's cache never takes one program for another
        # (same size, same coarse mtime), and a replay is checked like the first run
        text = PRELUDE + prog.render()
        module = self.dir / f"fuzz_{hashlib.sha256(text.encode()).hexdigest()[:16]}.py"
        module.write_text(text)
        stdout, stderr, status = self.worker.run(
            ["--config-file", str(self.dir / "mypy.ini"), "--cache-dir", str(self.dir / ".cache"),
             "--no-error-summary", "--no-pretty", "--hide-error-context", str(module)])
        text = stdout + stderr
        if "INTERNAL ERROR" in text or "Traceback" in text or "[spmd-internal]" in text or status == 2:
            self.crashes += 1
            self._forget(module)
            return Verdict(0, ("mypy-crash",), text[-2000:]), text.splitlines()
        self._forget(module)
        errors: dict[int, list[str]] = {}
        notes: dict[int, str] = {}  # the first message on each line (agree's pending sums)
        for line in stdout.splitlines():
            m = self.ERROR.match(line)
            if not m:
                continue
            ln = int(m.group("line")) - PRELUDE_LINES
            code = m.group("code") or "misc"
            if (code in ("spmd-mismatch", "return-value") and ln == prog.ending_line()
                    and prog.ending[0] == "return"):
                code = "return"
            errors.setdefault(ln, []).append(code)
            notes.setdefault(ln, m.group("msg"))  # whole: a hint may end it (agree)
        if not errors:
            return Verdict(), stdout.splitlines()
        first = min(errors)
        return Verdict(first, tuple(sorted(set(errors[first]))),
                       notes.get(first, "")), stdout.splitlines()


# --------------------------------------------------------------------------------------
# (2) the runtime check mode, on a fake single-process world


_FAKE: dict[str, Any] = {}


def fake_world() -> None:
    """A fake 4-rank process group and a 2 x 2 ("dp", "tp") mesh in this process (once)."""
    if _FAKE:
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import spmd

    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=4, store=FakeStore())
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=AXES)
    spmd.set_mesh(mesh)
    _FAKE["mesh"] = mesh


def _namespace() -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    import spmd

    return {"torch": torch, "F": F, "spmd": spmd, "Tensor": spmd.Tensor, "R": spmd.R,
            "I": spmd.I, "V": spmd.V, "P": spmd.P, "S": spmd.S}


def _type_dict(st: Any) -> Type | None:
    if st is None:
        return None
    out: Type = {}
    for axis, lt in st:
        out[axis] = ("S" + str(lt.dim)) if lt.dim is not None else lt.kind.value
    return out


def _local(form: str) -> Any:
    from spmd_mypy.engine.types import Kind, LocalType

    return LocalType(Kind.V, int(form[1:])) if form.startswith("S") else LocalType(Kind(form))


def _fits(got: Type, declared: Type) -> bool:
    """Whether the check mode's ``spmd.checked`` accepts a result of type ``got`` where
    ``declared`` is annotated: per axis the engine's ``shard_dims_match`` (a V of unknown
    dim may be declared S(i), as for arguments)."""
    from spmd_mypy.engine.types import shard_dims_match

    return all(a in got and shard_dims_match(_local(got[a]), _local(f))
               for a, f in declared.items()) and set(got) <= set(declared)


@dataclass
class Probe:
    """The check mode's view of a program: a verdict, or the types and rank-0 shapes."""

    verdict: Verdict
    runtime_error: str | None = None  # a non-type exception (shapes, ...)
    types: dict[str, Type | None] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _probe_inputs(prog: Program) -> list[Any]:
    import torch

    from .fuzz_ref import make_global, to_locals

    gen = torch.Generator().manual_seed(0)
    out = []
    for _, t, shape in prog.inputs:
        g = make_global(t, shape, gen, leaf=False)
        out.append(to_locals(g, t, gen)[(0, 0)])
    return out


def check_mode(prog: Program, *, all_vars: bool = False) -> Probe:
    """Run ``prog`` under ``spmd.typecheck()`` on the fake world.

    ``all_vars``: return every variable instead of the ending (the generator's view of a
    prefix); otherwise the ending runs as written and a declared return type is compared
    with the result's type exactly (as mypy compares it).
    """
    import spmd
    from spmd._types import spmd_type_of_annotation
    from spmd_mypy.engine.errors import SpmdTypeError

    fake_world()
    ns = _namespace()
    if all_vars:
        names = prog.variables()
        body = Program(prog.axes, prog.inputs, prog.stmts, ("return", "(" + ", ".join(names) + ",)"))
        src = PRELUDE + body.render(returns=False)
    else:
        src = PRELUDE + prog.render(returns=False)
    filename = "<fuzz-check>"
    exec(compile(src, filename, "exec"), ns)  # noqa: S102
    fn = ns["prog"]
    xs = [x.detach().clone().requires_grad_(True) for x in _probe_inputs(prog)]
    result: Any = None
    try:
        with spmd.typecheck():
            for x, (_, t, _) in zip(xs, prog.inputs):
                ann = eval(render_type(t), ns)  # noqa: S307
                if spmd_type_of_annotation(ann) is not None:
                    spmd.declare(x, ann)
            result = fn(*xs)
            typed = (result if isinstance(result, tuple) else (result,))
            types = [_type_dict(spmd.typeof(r)) for r in typed]
    except SpmdTypeError as e:
        return Probe(Verdict(_error_line(e, filename), (e.code,), str(e).splitlines()[0]))
    except Exception as e:  # noqa: BLE001
        return Probe(Verdict(), runtime_error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
    probe = Probe(Verdict())
    if all_vars:
        for name, r, t in zip(prog.variables(), result, types):
            probe.types[name] = t
            probe.shapes[name] = tuple(r.shape)
        return probe
    if prog.ending[0] == "return" and prog.out_type is not None:
        got = types[0]
        probe.types[RESULT] = got
        if got is not None and not _fits(got, prog.out_type):
            probe.verdict = Verdict(prog.ending_line(), ("return",),
                                    f"result is {render_type(got)}")
    return probe


def _error_line(exc: BaseException, filename: str) -> int:
    tb = exc.__traceback__
    line = 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line - PRELUDE_LINES


# --------------------------------------------------------------------------------------
# (3) the numerical truth on gloo


@dataclass
class Numerics:
    status: str  # "equal" | "mismatch" | "n/a"
    detail: str = ""


def _checker_types(prog: Program) -> dict[str, Type | None]:
    """The check mode's types of the variables (of the longest prefix it accepts)."""
    for n in (len(prog.stmts), len(prog.stmts) - 1):
        if n < 0:
            break
        probe = check_mode(Program(prog.axes, prog.inputs, prog.stmts[:n]), all_vars=True)
        if probe.verdict.accepted and probe.runtime_error is None:
            return probe.types
    return {}


def numerics(prog: Program, pool: Any, seed: int = 0) -> Numerics:
    import torch

    from . import fuzz_ref as fr

    if prog.ending[0] == "return" and prog.out_type is None:
        return Numerics("n/a", "no claimed output type")
    gen = torch.Generator().manual_seed(seed)
    globals_: dict[str, fr.Val] = {}
    locals_: dict[str, fr.Val] = {}
    for name, t, shape in prog.inputs:
        g = fr.make_global(t, shape, gen, leaf=True)
        globals_[name] = g
        locals_[name] = fr.to_locals(g, t, gen)
    types = _checker_types(prog)
    try:
        env = fr.run_reference(prog, globals_, types)
    except fr.RefError as e:
        return Numerics("n/a", f"the single-device program fails: {e}")
    var = prog.ending[1]
    ref_out = env[var]
    if prog.ending[0] == "return" and prog.out_type is not None:
        try:
            for axis, claim in prog.out_type.items():
                ref_out = fr.read_as(ref_out, axis, (types.get(var) or {}).get(axis), claim)
        except (RuntimeError, IndexError) as e:
            return Numerics("mismatch", f"the output cannot have the declared type: {e}")
    cot_locals: fr.Val | None = None
    if prog.ending[0] == "return":
        assert prog.out_type is not None
        d = dual(prog.out_type)
        shapes = {tuple(ref_out[c].shape) for c in fr.COORDS}
        if len(shapes) != 1:
            return Numerics("n/a", "the reference output's shape differs between entries")
        cot = fr.make_global(d, shapes.pop(), gen, leaf=False)
        try:
            cot_locals = fr.to_locals(cot, d, gen)
        except (RuntimeError, IndexError) as e:
            return Numerics("mismatch", f"the output cannot have the declared type: {e}")
        terms = [(o * g).sum() for o, g in fr.distinct_pairs(ref_out, cot)]
    else:
        terms = [o.sum() for o in fr.distinct(ref_out)]
    loss = sum(terms[1:], terms[0])
    leaves = [x for name, _, _ in prog.inputs for x in fr.distinct(globals_[name])]
    ref_grads: dict[int, Any] = {}
    if loss.requires_grad:
        gs = torch.autograd.grad(loss, leaves, allow_unused=True)
        ref_grads = {id(x): g for x, g in zip(leaves, gs)}

    src = PRELUDE + prog.render()
    jobs = []
    for c in fr.COORDS:
        jobs.append({"src": src, "fn": "prog",
                     "inputs": [locals_[name][c] for name, _, _ in prog.inputs],
                     "cot": None if cot_locals is None else cot_locals[c]})
    by_rank = pool.run(jobs)
    replies = {c: by_rank[fr.rank_of(c)] for c in fr.COORDS}
    failed = [r for r in replies.values() if not r["ok"]]
    if failed:
        return Numerics("n/a", "the program fails on the ranks: " + failed[0]["error"][:300])
    try:
        if prog.ending[0] == "return":
            assert prog.out_type is not None
            outs = {c: replies[c]["out"] for c in fr.COORDS}
            if any(o is None for o in outs.values()):
                return Numerics("mismatch", "the program returned no tensor")
            fr.compare(fr.from_locals(outs, prog.out_type), ref_out, "the output")
            bwd = [r["bwd_error"] for r in replies.values() if r["bwd_error"]]
            if bwd:
                return Numerics("mismatch", f"backward with a cotangent of the dual type fails: "
                                            f"{bwd[0][:300]}")
        for i, (name, t, _) in enumerate(prog.inputs):
            local_g = {}
            for c in fr.COORDS:
                g = replies[c]["grads"][i]
                local_g[c] = g if g is not None else torch.zeros_like(locals_[name][c])
            want = {}
            for c in fr.COORDS:
                g = ref_grads.get(id(globals_[name][c]))
                want[c] = g if g is not None else torch.zeros_like(globals_[name][c])
            fr.compare(fr.from_locals(local_g, dual(t)), want, f"the gradient of {name}")
    except fr.Mismatch as e:
        return Numerics("mismatch", str(e))
    return Numerics("equal")


# ======================================================================================
# The generator (hypothesis)


def _claim_of(prev: Type | None, s: Stmt) -> Type | None:
    """What a collective claims its result is: the input's type with the axis set to dst."""
    if prev is None:
        return None
    out = dict(prev)
    out[s.axis] = s.dst
    return out


def programs(max_stmts: int = 5):  # noqa: ANN201 - a hypothesis strategy
    """A hypothesis strategy of programs, built statement by statement with the check
    mode's types of the prefix (so collectives mostly name their input's real src, and
    statements whose shapes do not fit are redrawn)."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: Any) -> Program:
        t0 = time.perf_counter()
        try:
            return _build(draw, draw(st.sampled_from([1, 2])))
        finally:
            TIMES["generate"] += time.perf_counter() - t0

    def _build(draw: Any, naxes: int) -> Program:
        axes = ("tp",) if naxes == 1 else AXES
        ninputs = draw(st.integers(1, 3))
        inputs = []
        for i in range(ninputs):
            t: Type = {}
            for a in axes:
                form = draw(st.sampled_from(FORMS))
                if form.startswith("S") and form in t.values():
                    form = "V"  # no two axes sharding the same dim
                t[a] = form
            shape = draw(st.sampled_from([(4, 4), (2, 4)]))
            inputs.append((f"x{i}", t, shape))
        prog = Program(axes, inputs)
        probe = check_mode(prog, all_vars=True)
        nstmts = draw(st.integers(1, max_stmts))
        error_stmt: Stmt | None = None
        for k in range(nstmts):
            placed = False
            for _attempt in range(4):
                s = _draw_stmt(draw, st, prog, probe, k)
                trial = Program(axes, inputs, prog.stmts + [s])
                p2 = check_mode(trial, all_vars=True)
                if p2.runtime_error is not None:
                    continue
                if not p2.verdict.accepted:
                    # end the program on this error, or (2 times in 3) draw another
                    # statement: most programs then run a few statements before an error
                    if draw(st.integers(0, 2)) == 0:
                        prog, error_stmt, placed = trial, s, True
                        break
                    continue
                if outside_the_model(probe, p2, s):
                    continue
                prog, probe, placed = trial, p2, True
                break
            if error_stmt is not None or not placed:
                break
        if not prog.stmts:
            s = Stmt("t0", "op", "neg", (inputs[0][0],))
            prog = Program(axes, inputs, [s])
            probe = check_mode(prog, all_vars=True)
        last = prog.stmts[-1]
        if error_stmt is not None:
            claim = _claim_of(probe.types.get(last.args[0]), last) if last.kind == "coll" else None
            return Program(axes, inputs, prog.stmts, ("return", last.target), claim)
        ending = draw(st.sampled_from(["return", "return", "backward"]))
        if ending == "backward":
            var = last.target
            if probe.shapes.get(var) != ():
                s = Stmt(f"t{len(prog.stmts)}", "op", "sum_all", (var,))
                prog = Program(axes, inputs, prog.stmts + [s])
                var = s.target
            return Program(axes, inputs, prog.stmts, ("backward", var))
        inferred = probe.types.get(last.target)
        if inferred is not None and draw(st.integers(0, 4)) > 0:
            out_type = inferred
        else:
            out_type = {a: draw(st.sampled_from(FORMS)) for a in axes}
        return Program(axes, inputs, prog.stmts, ("return", last.target), out_type)

    return build()


def _draw_stmt(draw: Any, st: Any, prog: Program, probe: Probe, k: int) -> Stmt:
    names = list(reversed(prog.variables()))  # the most recent first (shrinks toward it)
    target = f"t{len(prog.stmts)}"
    if draw(st.integers(0, 9)) < 6:
        op = OPS[draw(st.sampled_from(sorted(OPS)))]
        args = tuple(draw(st.sampled_from(names)) for _ in range(op.arity))
        return Stmt(target, "op", op.name, args)
    name = draw(st.sampled_from(sorted(COLLECTIVES)))
    srcs, dsts = COLLECTIVES[name]
    axis = draw(st.sampled_from(list(reversed(prog.axes))))
    x = draw(st.sampled_from(names))
    have = (probe.types.get(x) or {}).get(axis)
    if have is not None and have in srcs and draw(st.integers(0, 3)) > 0:
        src = have
    else:
        src = draw(st.sampled_from(srcs))
    dst = draw(st.sampled_from(dsts))
    extras = collective_extras(name, src)
    extra = draw(st.sampled_from(extras)) if extras and draw(st.integers(0, 2)) == 0 else ""
    return Stmt(target, "coll", name, (x,), axis, src, dst, extra)


def outside_the_model(before: Probe, after: Probe, s: Stmt) -> bool:
    """A statement whose result the reference cannot denote (the three tests below): the
    generator keeps out of it, and so does the collective sweep (tests/soundness)."""
    return (_forgets_shard(before, after, s) or _same_dim_twice(after, s)
            or _collective_on_a_dim_another_axis_shards(before, s))


def _forgets_shard(before: Probe, after: Probe, s: Stmt) -> bool:
    """An op whose result is V on an axis where an operand was S(i): the fuzzer keeps out
    of that (the global reading of V, a list, and of S(i), one tensor, differ; that S(i)
    decays to V is a known imprecision, not a soundness question)."""
    res = after.types.get(s.target) or {}
    for a in s.args:
        for axis, form in (before.types.get(a) or {}).items():
            if form.startswith("S") and res.get(axis) == "V":
                return True
    return False


def _collective_on_a_dim_another_axis_shards(before: Probe, s: Stmt) -> bool:
    """A collective that splits, concatenates or gathers a dim another axis of its operand
    shards.  An all_to_all whose split or concat dim (V: dim 0, S(i): dim i) is one
    (``all_to_all(x, "tp", src=S(1), dst=V)`` on ``x: Tensor[S[0, "dp"], S[1, "tp"]]``
    splits dim 0 inside each dp shard): the result is two axes on one dim as
    in :func:`_same_dim_twice`, with the second hidden by V.  Its global value is not defined
    either: the reference exchanges blocks of the dp-global tensor, the ranks of each dp
    shard's, so the rows come out in another order (seed 5011 of session 50).  So does any
    collective from S(i) (an all_gather: ``all_gather(x, "tp", src=S(0), dst=R)`` of ``x:
    Tensor[V["tp"], S[0, "dp"]]`` concatenates the tp blocks inside each dp shard, dp-major,
    where the reference concatenates the tp ranks' dp-global tensors; seed 5208 of session
    52)."""
    if s.kind != "coll":
        return False
    if s.name == "all_to_all":
        dims = set(s.all_to_all_dims())
    elif s.src.startswith("S"):
        dims = {int(s.src[1:])}
    else:
        return False
    others = before.types.get(s.args[0]) or {}
    return any(axis != s.axis and form.startswith("S") and int(form[1:]) in dims
               for axis, form in others.items())


def _same_dim_twice(after: Probe, s: Stmt) -> bool:
    """A result sharded on one dim by two axes (``all_to_all(x, "dp", src=V, dst=S(0))``
    on ``x: Tensor[S[0, "tp"], V["dp"]]``): without a partition spec the local types do
    not say which axis is major on that dim, so its global value is not defined; the
    fuzzer does not build such values (issue 5's partition specs would)."""
    forms = [f for f in (after.types.get(s.target) or {}).values() if f.startswith("S")]
    return len(forms) != len(set(forms))


# ======================================================================================
# One program, judged


@dataclass
class Outcome:
    prog: Program
    mypy: Verdict
    check: Verdict
    check_error: str | None
    num: Numerics
    category: str  # see CATEGORIES
    disagreement: str | None = None

    def report(self) -> str:
        shapes = ", ".join(f"{n}: {list(sh)}" for n, _, sh in self.prog.inputs)
        return (f"{self.prog.render()}  global input shapes: {shapes}\n"
                f"  mypy plugin : {self.mypy}\n  check mode  : {self.check}"
                f"{' (runtime error: ' + self.check_error + ')' if self.check_error else ''}\n"
                f"  numerics    : {self.num.status} {self.num.detail}\n"
                f"  category    : {self.category}"
                + (f"\n  DISAGREEMENT: {self.disagreement}" if self.disagreement else ""))


CATEGORIES = ("accepted-equal", "accepted-no-reference", "accepted-shard-claim",
              "rejected-counterexample", "rejected-equal", "rejected-no-claim", "disagreement")
RESULT = "<result>"  # Probe.types: the returned value's type (the check mode's)


def shard_claim(got: Type | None, declared: Type | None) -> bool:
    """The returned value is V where the declared type says S(d): local SPMD takes that claim
    on trust in both checkers (README "Along a shard dim, local SPMD types only this rank's
    part": a V may be claimed S(i)), so a program whose claim is false (the reduce_scatter's
    1-d V returned as S(1)) is accepted by design.  Counted as its own category, not as a
    disagreement."""
    if got is None or declared is None:
        return False
    return any(f.startswith("S") and got.get(a) == "V" for a, f in declared.items())


def agree(m: Verdict, c: Verdict) -> bool:
    if not c.accepted and along_shard_at_rank(c) and (m.accepted or m.line == c.line):
        # an error the plugin cannot make (it reads no rank): the plugin accepts, or reports
        # another error of the same statement (softmax(-1) of x: Tensor[P["tp"], S[1, "dp"]]:
        # a Partial into a non-linear op; seed 5014 of session 50)
        return True
    if same_dim_at_one_rank(m) and (c.accepted or (m.codes != ("return",) and c.line > m.line)):
        return True
    if m.accepted and written_below_at_one_rank(c):
        return True
    if m.accepted or c.accepted:
        return m.accepted and c.accepted
    return ((m.line == c.line and bool(set(c.codes) & set(m.codes))) or pending_sum_pair(m, c)
            or pending_sum_used_in_its_statement(m, c) or varying_loss_pair(m, c))


_REDUCES = " reduces the dim sharded on "
# engine ops' reduction messages: "var over dim -1 of x0 (S(1) on "tp") reduces the dim ..."
_REDUCED_DIM = re.compile(r" over dim (?P<dim>-?\d+) of .*?\(S\((?P<shard>-?\d+)\) on ")
# The scans and normalisations along a shard dim (engine ops.scan_along_shard_error,
# normalised_along_shard_error): their messages' verbs
_ALONG_SHARD = (" scans the dim sharded on ", " normalises the dim sharded on ")


def along_shard_at_rank(c: Verdict) -> bool:
    """The check mode's rejection the plugin cannot make by design: a scan or normalisation
    along a negative dim (``F.softmax(x, dim=-1)`` of an S(1) x) is along the shard dim only
    at some ranks (2-d here; a 4-d S(1) is head-parallel attention's scores, whose softmax
    over the keys is right), and the plugin reads no rank, so it keeps V; the check mode,
    at the real rank, rejects it (the rules suite's check-only verdicts alike).  So is a
    matmul's diagonal block (below; seed 5101 of session 51), and a reduction along a dim
    counted from the other end (:func:`reduced_at_one_rank`)."""
    if c.codes != ("spmd-global",):
        return False
    return any(v in c.note for v in _ALONG_SHARD) or (
        c.note.startswith("matmul(") and _BOTH_STAY in c.note) or reduced_at_one_rank(c)


def reduced_at_one_rank(c: Verdict) -> bool:
    """A reduction along a dim counted from the other end than the shard dim (``x.var(-1)``
    or ``x.pow(2).mean(-1)`` under an rsqrt, of an S(1) x) reduces the shard dim only at
    one rank (2 here): the plugin reads no rank and keeps each rank's own block's value, V
    (``V (S(1) at rank >= 2, V at rank 1)``: README, "Pending sums" in docs/soundness.md),
    where the check mode, at the real rank, rejects the variance at once and a pending mean
    or sum at its first non-linear use (session 53's one-statement sweep of its new ops)."""
    if _REDUCES not in c.note:
        return False
    found = _REDUCED_DIM.search(c.note)
    return found is not None and (int(found["dim"]) < 0) != (int(found["shard"]) < 0)


# The diagonal block (engine ops.diagonal_block_error): ``x @ w`` of an S(0) x and an S(1) w
# on one axis keeps both sharded dims in the result when both are 2-d; at other ranks the
# same types are a batch-sharded matmul (a 3-d x against a 4-d w: one batch dim) or shapes
# that do not fit.  The plugin reads no rank, so it types the result V (the rules suite's
# check-only diagonal block alike); an einsum states its ranks and is reported by both.
_BOTH_STAY = " two dims that both stay in the result"


def same_dim_at_one_rank(m: Verdict) -> bool:
    """The plugin's conservative rejection by design: a shard dim counted from the back
    where one counted from the front is declared (or the other way round) is the same layout
    at one rank only: ``x.t()`` of an S(0) x is ``S(-1)`` (S(0) at rank 1, S(1) at rank 2),
    returned as ``S(1)`` (seed 5103 of session 51) or gathered with ``src=S(1)`` (seed 5302
    of session 53).  The plugin cannot read the rank, so it rejects the return or the
    collective and says to write ``S(-1)`` if the value always has 2 dims; the check mode,
    at the real rank, accepts that line: the program, or its first error is a later line's
    (docs/soundness.md, "Conservative")."""
    return (m.codes in (("return",), ("spmd-src-mismatch",))
            and _SAME_DIM_AT_ONE_RANK.search(m.note) is not None)


# engine collectives' mismatch hint (``S(-1) and S(1) are the same dim only of a 2-dim tensor``)
_SAME_DIM_AT_ONE_RANK = re.compile(r"S\(-?\d+\) and S\(-?\d+\) are the same dim only of a \d+-dim")


def written_below_at_one_rank(c: Verdict) -> bool:
    """The plugin's acceptance by design: an elementwise in-place op whose value is sharded
    on a lower dim than the target (``b.add_(x)`` of an S(1) b and an S(0) x) may be a
    lower-rank value broadcast from the back (a bias row, whose dim 0 is b's dim 1: the
    same block), and the plugin reads no rank, so it accepts
    (tests/plugin/cases/inplace_shard_dims.test); the check mode, with the shapes, rejects
    the write of a same-rank value, whose block of dim 0 would be stored as the block of
    dim 1 (seed 5203 of session 52)."""
    if c.codes != ("spmd-inplace",):
        return False
    found = _STORED_AS.search(c.note)
    return found is not None and int(found["value"]) < int(found["target"])


# engine ops.shard_dim_error's reason, a same-rank value (a broadcast one names its dim after)
_STORED_AS = re.compile(r"each rank's block of dim (?P<value>\d+) would be stored as its block "
                        r"of dim (?P<target>\d+)")


def pending_sum_pair(m: Verdict, c: Verdict) -> bool:
    """The one pair reported at different lines by design: a sum or mean over the shard dim
    (engine ops.reduced_partial_error) the plugin reports at the sum, and the check mode at
    the first use of its result (a pending partial sum: at the sum it cannot know whether a
    reinterpret(V->P) comes next, which would make the sum right).  The same code, the same
    sum (the message's head: the reduction and the operand's type; the operand's text may
    differ, the check mode reading no source of an exec'd program), the check mode's line
    after the plugin's."""
    if "spmd-global" not in m.codes or c.codes != ("spmd-global",):
        return False
    if m.line is None or c.line is None or c.line <= m.line:
        return False
    if _REDUCES not in m.note or _REDUCES not in c.note:
        return False
    (m_sum, m_form, m_axis), (c_sum, c_form, c_axis) = (
        _sum_head(v.note.split(_REDUCES)[0]) for v in (m, c))
    return m_sum == c_sum and m_axis == c_axis and _one_layout(m_form, c_form)


def pending_sum_used_in_its_statement(m: Verdict, c: Verdict) -> bool:
    """A sum over the shard dim used in its own statement (``x0 * x1.sum(0)`` of an I x0 and
    an S(0) x1): the plugin reports the sum and types its result unknown after the error, so
    it reports nothing more there; the check mode, which reports a pending sum at its first
    use, reports this use by the use's own rule where that comes first (an I beside the
    pending sum, a V to it: spmd-invariant-mix).  One line, the plugin's pending sum on an
    axis the check mode's message finds a V on (session 53's one-statement sweep of its new
    ops, ``mul_colsum``)."""
    if m.line is None or m.line != c.line or m.codes != ("spmd-global",):
        return False
    if _REDUCES not in m.note or _REDUCES in c.note:
        return False
    _, _, axis = _sum_head(m.note.split(_REDUCES)[0])
    return bool(axis) and f"V[{axis}]" in c.note


def _one_layout(m_form: str, c_form: str) -> bool:
    """Whether the plugin's layout of an operand may be the check mode's at the real rank:
    the same, one of its rank alternatives (``V (S(0) at rank >= 2, V at rank 1)`` for
    ``S(0)``), or a dim counted from the other end (``S(-1)`` of ``x.t()`` for ``S(1)``: one
    dim at rank 2; session 51's seed 5105), or any shard dim where the plugin's layout is V
    at rank 2."""
    if m_form == c_form or (bool(c_form) and f"{c_form} at rank" in m_form):
        return True
    a, b = (_SHARD.fullmatch(f) for f in (m_form, c_form))
    if b is not None and _V_AT_RANK_2.search(m_form):
        # a V alternative at rank 2 (the fuzzer's inputs' rank) stands for a shard dim the
        # plugin cannot place there: ``x0 @ x1`` of an R x0 and an S(1) x1 is ``V (V at rank
        # >= 2, S(0) at rank 1)`` (a 1-d x0 moves the dim), the check mode's S(1) at rank 2
        # (session 53's op sweep)
        return True
    return a is not None and b is not None and (int(a[1]) < 0) != (int(b[1]) < 0)


_SHARD = re.compile(r"S\((-?\d+)\)")
_V_AT_RANK_2 = re.compile(r"(\(|, )V at rank (>= [12]|2)\b")


def varying_loss_pair(m: Verdict, c: Verdict) -> bool:
    """One mistake, two rules, one line: a loss summed over a dim an axis shards, then
    backpropagated.  The check mode, at the real ranks, has the summed value S(i) and
    reports the pending partial sum at its first use, the backward.  The plugin reads no
    rank: where an S(i) meets an operand of another rank it cannot align the two (the
    broadcast ``torch.add(torch.stack([x, x]), x)`` of an S(0) x), so it decays the value to
    V, the safe side; the sum of a V is V, and it reports the backward of a Varying loss on
    the same axis (seed 5014 of session 50).  Both name the axis; the check mode's operand
    is sharded (S(i)), the plugin's loss Varying."""
    if m.line is None or m.line != c.line or c.codes != ("spmd-global",):
        return False
    if "spmd-backward" not in m.codes or _REDUCES not in c.note:
        return False
    _, c_form, c_axis = _sum_head(c.note.split(_REDUCES)[0])
    varying = _VARYING_LOSS.search(m.note)
    if varying is None or not c_form.startswith("S(") or not c_axis:
        return False
    return c_axis in re.findall(r'"[^"]*"', varying["varying"] or varying["wrong"])


# engine ops.check_backward's head: the wrong axes, then the Varying ones where some
# are Replicate too (``but it is Varying on "tp" and Replicate on "dp" (...)``)
_VARYING_LOSS = re.compile(r'needs the loss Invariant or Partial on (?P<wrong>.+?), but it is '
                           r'Varying(?: on (?P<varying>.+?) and Replicate on .+?)? \(')


def _sum_head(head: str) -> tuple[str, str, str]:
    """(the reduction, the operand's layout, its axis) of a reduced-partial message's head
    ``sum over every dim of t1 (S(0) on "tp")``.  The plugin, reading no tensor rank, may
    write a layout that depends on it (``V (S(0) at rank >= 2, V at rank 1)``: a softmax
    along dim -1 of an S(0) value), the check mode the one at the real rank (``S(0)``):
    the same operand (seed 5012 of session 50)."""
    if not head.endswith(")"):
        return head.split(" of ")[0], "", ""
    depth, start = 0, 0
    for i in range(len(head) - 1, -1, -1):  # the parenthesised group that ends the head
        depth += {")": 1, "(": -1}.get(head[i], 0)
        if depth == 0:
            start = i
            break
    form, _, axis = head[start + 1:-1].rpartition(" on ")
    return head[:start].split(" of ")[0], form, axis


def judge(prog: Program, mypy: MypyRunner, pool: Any, seed: int = 0) -> Outcome:
    t0 = time.perf_counter()
    mv, _ = mypy.verdict(prog)
    t1 = time.perf_counter()
    probe = check_mode(prog)
    cv = probe.verdict
    t2 = time.perf_counter()
    num = numerics(prog, pool, seed)
    t3 = time.perf_counter()
    TIMES["mypy"] += t1 - t0
    TIMES["check"] += t2 - t1
    TIMES["numerics"] += t3 - t2
    dis = None
    if "mypy-crash" in mv.codes:
        dis = "mypy crashed"
    elif probe.runtime_error is not None and num.status != "n/a":
        dis = f"check mode raised {probe.runtime_error} on a program that runs"
    elif probe.runtime_error is None and not agree(mv, cv):
        dis = f"plugin says {mv}, check mode says {cv}"
    elif mv.accepted and cv.accepted and probe.runtime_error is None and num.status == "mismatch":
        dis = f"accepted but numerically wrong: {num.detail}"
    claimed = (dis is not None and dis.startswith("accepted but numerically wrong")
               and shard_claim(probe.types.get(RESULT), prog.out_type))
    if claimed:
        cat = "accepted-shard-claim"
        dis = None
    elif dis is not None:
        cat = "disagreement"
    elif mv.accepted:
        cat = "accepted-equal" if num.status == "equal" else "accepted-no-reference"
    else:
        cat = {"mismatch": "rejected-counterexample", "equal": "rejected-equal"}.get(
            num.status, "rejected-no-claim")
    return Outcome(prog, mv, cv, probe.runtime_error, num, cat, dis)


TIMES = {"mypy": 0.0, "check": 0.0, "numerics": 0.0, "generate": 0.0}


def value_seed(prog: Program) -> int:
    return int(hashlib.sha256(prog.to_json().encode()).hexdigest()[:8], 16)


# ======================================================================================
# Driving: a bounded run


class Fuzzer:
    def __init__(self, mypy_dir: str | None = None, verbose: bool = True) -> None:
        from .fuzz_pool import Pool

        self.pool = Pool()
        self.mypy = MypyRunner(mypy_dir)
        self.verbose = verbose
        self.counts = {c: 0 for c in CATEGORIES}
        self.programs = 0
        self.failures: list[Outcome] = []
        self.shrink_seconds = 120.0  # per disagreement

    def __enter__(self) -> Fuzzer:
        fake_world()
        self.pool.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.close()
        self.mypy.close()

    def judge(self, prog: Program) -> Outcome:
        out = judge(prog, self.mypy, self.pool, value_seed(prog))
        return out

    def run_chunk(self, seed: int, examples: int, deadline: float) -> Outcome | None:
        """``examples`` programs from hypothesis seed ``seed``; a disagreement is shrunk
        and returned (minimal)."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hseed

        last_bad: list[Outcome] = []
        shrink_until = [0.0]

        @hseed(seed)
        @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck),
                  phases=(Phase.generate, Phase.shrink), print_blob=False)
        @given(programs())
        def prop(prog: Program) -> None:
            if time.monotonic() > deadline and not last_bad:
                return
            if last_bad and time.monotonic() > shrink_until[0]:
                return  # out of shrinking time: the smallest failure so far is the result
            out = self.judge(prog)
            if not last_bad:  # count the generated programs, not the shrinking steps
                self.programs += 1
                self.counts[out.category] += 1
            if out.disagreement:
                if not last_bad:
                    shrink_until[0] = time.monotonic() + self.shrink_seconds
                last_bad.append(out)  # each later failure is a smaller one (shrinking)
                raise AssertionError(out.disagreement)

        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mypy raises the recursion limit; hypothesis warns
            try:
                prop()
            except Exception:  # noqa: BLE001 - AssertionError, or hypothesis' FlakyFailure
                if not last_bad:
                    raise
        return last_bad[-1] if last_bad else None

    def run(self, budget_seconds: float, seed: int | None, chunk: int = 25,
            save: bool = True, max_programs: int | None = None) -> dict[str, Any]:
        seed = seed if seed is not None else int(time.time()) % 100000
        start = time.monotonic()
        deadline = start + budget_seconds
        k = 0
        first = self.programs
        while time.monotonic() < deadline:
            n = chunk
            if max_programs is not None:
                n = min(chunk, max_programs - (self.programs - first))
                if n <= 0:
                    break
            bad = self.run_chunk(seed * 1000 + k, n, deadline)
            k += 1
            if bad is not None:
                self.failures.append(bad)
                if self.verbose:
                    print("fuzz: disagreement (shrunk):\n" + bad.report(), flush=True)
                if save:
                    path = save_regression(bad)
                    if self.verbose:
                        print(f"fuzz: saved {path}", flush=True)
            if self.verbose:
                print(f"fuzz: {self.programs} programs, {time.monotonic() - start:.0f} s, "
                      f"{len(self.failures)} disagreements", flush=True)
        elapsed = time.monotonic() - start
        return {
            "programs": self.programs,
            "disagreements": len(self.failures),
            "crashes": self.mypy.crashes,
            "seconds": round(elapsed, 1),
            "programs_per_minute": round(60 * self.programs / elapsed, 1) if elapsed else 0.0,
            "seed": seed,
            **{k.replace("-", "_"): v for k, v in self.counts.items()},
            "world_restarts": self.pool.restarts,
            "seconds_in": {k: round(v, 1) for k, v in TIMES.items()},
        }


def run(budget_seconds: float, seed: int | None = None, *, save: bool = True,
        verbose: bool = True) -> dict[str, Any]:
    """A bounded fuzz run; the figures (programs, disagreements, crashes, categories)."""
    with Fuzzer(verbose=verbose) as fz:
        result = fz.run(budget_seconds, seed, save=save)
    if verbose:
        print("fuzz: " + ", ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    return result


# ======================================================================================
# Regressions


def save_regression(out: Outcome, directory: Path = REGRESSIONS, xfail: str | None = None) -> Path:
    """Write the shrunk program as a test that replays it (all three verdicts must agree).

    ``xfail``: the reason, for a bug that is not fixed (the test is a strict xfail).
    """
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(out.prog.to_json().encode()).hexdigest()[:10]
    path = directory / f"test_fuzz_{digest}.py"
    found = "\n".join(("    " + line).rstrip() for line in out.report().splitlines())
    mark = ""
    imports = "from soundness.fuzz_replay import replay\n"
    if xfail:
        imports = "import pytest\n\n" + imports
        mark = f"@pytest.mark.xfail(strict=True, reason={xfail!r})\n"
    path.write_text(
        '"""A differential-fuzzer disagreement, shrunk (soundness/fuzz.py); replayed here.\n\n'
        "Found as::\n\n" + found.replace("\\", "\\\\") + '\n"""\n\n' + imports + "\n"
        f"PROGRAM = {out.prog.to_json()!r}\n\n\n"
        + mark + "def test_replay() -> None:\n"
        "    replay(PROGRAM)\n")
    return path


# ======================================================================================
# CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soundness.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="time budget (default 180)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: time)")
    ap.add_argument("--no-save", action="store_true", help="do not write regression files")
    args = ap.parse_args(argv)
    try:
        result = run(args.seconds, args.seed, save=not args.no_save)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 2
    return 1 if result["disagreements"] or result["crashes"] else 0


if __name__ == "__main__":
    from soundness import run_from_checkout

    run_from_checkout("soundness.fuzz")
    sys.exit(main())
