"""Every fuzzer op over every input form on one axis, judged as the fuzzer judges a program.

The fuzzer (``soundness.fuzz``) draws its programs at random; this sweep is its systematic
complement for one statement.  Each op of ``fuzz_model.OPS`` (or those named) is applied to
every combination of input forms on "tp" (R, I, V, P, S(0), S(1); global shape 4 x 4)::

    def prog(x0: Tensor[S[1, "tp"]]) -> Tensor[V["tp"]]:     # the check mode's type
        t0 = x0.var(-1)
        return t0

and, where the check mode accepts the statement, summed and backpropagated (``t1 =
t0.sum(); t1.backward()``).  The generator's exclusions apply (``fuzz.outside_the_model``:
values the reference cannot denote), and a statement whose shapes do not fit is skipped.
A new op's pairs the checkers differ on by design show here first (session 53's 32 new
ops: 888 programs, two such pairs).

    python -m soundness.op_sweep [--ops var_last,mul_colsum]      # default: every op
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .fuzz_model import FORMS, OPS, Program, Stmt

AXES = ("tp",)
SHAPE = (4, 4)


@dataclass
class SweepResult:
    programs: int = 0
    outside_the_model: int = 0  # statements the generator keeps out of
    disagreements: list[Any] = field(default_factory=list)  # fuzz.Outcome


def one_statement_programs(name: str) -> list[tuple[Program, Stmt]]:
    """The op over every combination of input forms (an input per operand), one statement."""
    op = OPS[name]
    out = []
    for forms in itertools.product(FORMS, repeat=op.arity):
        inputs = [(f"x{i}", {"tp": form}, SHAPE) for i, form in enumerate(forms)]
        stmt = Stmt("t0", "op", name, tuple(f"x{i}" for i in range(op.arity)))
        out.append((Program(AXES, inputs, [stmt], ("return", "t0")), stmt))
    return out


def sweep(names: list[str], fuzzer: Any, verbose: bool = False) -> SweepResult:
    """Judge each op's programs with ``fuzzer`` (a ``fuzz.Fuzzer``)."""
    from .fuzz import check_mode, outside_the_model

    result = SweepResult()
    for name in names:
        for base, stmt in one_statement_programs(name):
            after = check_mode(base, all_vars=True)
            if after.runtime_error is not None:
                continue
            if after.verdict.accepted and outside_the_model(
                    check_mode(Program(AXES, base.inputs), all_vars=True), after, stmt):
                result.outside_the_model += 1
                continue
            progs = [Program(AXES, base.inputs, base.stmts, base.ending, after.types.get("t0"))]
            if after.verdict.accepted:  # the generator ends a program at its first error
                progs.append(Program(AXES, base.inputs,
                                     [stmt, Stmt("t1", "op", "sum_all", ("t0",))], ("backward", "t1")))
            for prog in progs:
                outcome = fuzzer.judge(prog)
                result.programs += 1
                if outcome.disagreement is not None:
                    result.disagreements.append(outcome)
                    if verbose:
                        print(outcome.report(), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soundness.op_sweep", description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated fuzz_model.OPS names (default: all)")
    args = ap.parse_args(argv)
    names = [n for n in args.ops.split(",") if n] or sorted(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        ap.error(f"unknown ops: {', '.join(unknown)} (known: {', '.join(sorted(OPS))})")
    from .fuzz_replay import shared_fuzzer

    start = time.monotonic()
    result = sweep(names, shared_fuzzer(), verbose=True)
    print(f"op sweep: {len(names)} ops, {result.programs} programs, {result.outside_the_model} "
          f"statements outside the model, {len(result.disagreements)} disagreements, "
          f"{time.monotonic() - start:.0f} s", flush=True)
    return 1 if result.disagreements else 0


if __name__ == "__main__":
    from soundness import run_from_checkout

    run_from_checkout("soundness.op_sweep")
    sys.exit(main())
