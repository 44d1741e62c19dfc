"""The result of a module's own ``@torch.no_grad()`` function carries no gradient (SPEC
section 3: a value computed where gradients are off), so an Invariant result mixes with
Varying as R does, as the check mode sees at runtime (its ``requires_grad`` is False).  A
helper's GQA probe: a rotary table built in a no_grad helper and typed I was a false
spmd-invariant-mix where it met V query heads.

Covered: a direct call, a local assigned the call, a slice and a cast of it, inference_mode;
a helper that keeps gradients stays an error.  A helper imported from another module is not
known to be no_grad (mypy's cache keeps no decorators, so a warm run could not tell what a
cold run saw): it stays an error, the same on a first run and a warm run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy_project import first_and_warm_runs

HELPERS = textwrap.dedent('''
    import torch
    from spmd import I, Tensor

    @torch.no_grad()
    def imported_cos(seq: int, dim: int) -> Tensor[I["tp"]]:
        cos: Tensor[I["tp"]] = torch.ones(seq, dim)
        return cos
''')

USER = textwrap.dedent('''
    import torch
    from spmd import I, V, Tensor
    from a import imported_cos

    @torch.no_grad()
    def rope_cos(seq: int, dim: int) -> Tensor[I["tp"]]:
        pos = torch.arange(seq, dtype=torch.float64)
        cos: Tensor[I["tp"]] = torch.outer(pos, torch.arange(dim, dtype=torch.float64)).cos()
        return cos

    @torch.inference_mode()
    def table(n: int) -> Tensor[I["tp"]]:
        t: Tensor[I["tp"]] = torch.ones(n)
        return t

    def with_grad(x: Tensor[I["tp"]]) -> Tensor[I["tp"]]:
        return x * 2

    def direct(q: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        return q * rope_cos(q.shape[-2], q.shape[-1])

    def via_local(q: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        c = rope_cos(q.shape[-2], q.shape[-1])
        c2 = c[..., : q.shape[-1]].to(q.dtype)
        return q * c2 + table(q.shape[-1])

    def keeps_gradients(q: Tensor[V["tp"]], i: Tensor[I["tp"]]) -> Tensor[V["tp"]]:
        k = with_grad(i)
        return q * k

    def imported(q: Tensor[V["tp"]]) -> Tensor[V["tp"]]:
        return q * imported_cos(q.shape[-2], q.shape[-1])
''')


def test_results_of_the_modules_no_grad_functions_have_no_gradient(tmp_path: Path) -> None:
    outputs = first_and_warm_runs(tmp_path, HELPERS, USER)
    assert outputs[0] == outputs[1]
    lines = outputs[0].splitlines()
    assert [line.split(": error: ")[0] for line in lines[:-1]] == ["b.py:30", "b.py:33"], outputs[0]
    assert lines[0].startswith('b.py:30: error: Invariant on "tp" (k: Tensor[I["tp"]])'), lines[0]
    assert lines[1].startswith('b.py:33: error: Invariant on "tp" (imported_cos(q.shape[-2], q.shape[-1]): '), lines[1]
    assert all(line.endswith("[spmd-invariant-mix]") for line in lines[:-1]), outputs[0]
    assert lines[-1] == "Found 2 errors in 1 file (checked 2 source files)", outputs[0]
