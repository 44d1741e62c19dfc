"""Gradual typing across modules: an unannotated module that calls an annotated one gets no
new errors.

A module without SPMD annotations that imports a typed module (here through a module of
aliases, ``c -> lib -> mytypes -> spmd``) receives typed values: ``list[Tensor[R["tp"]]]``
from a typed function, typed attributes, a typed module-level dict.  With plain
``torch.Tensor`` annotations in ``lib`` the same code type-checks; with SPMD types it used to
meet mypy's invariance and re-assignment errors (false errors in CALLER), because the
gradual promotion of plain tensors was on only in modules that import spmd themselves, and a
typed callee's result kept its SPMD type there (``h = column(x); h = row(h)``: V, then P, a
re-assignment error; ``gelu`` of the P value an SPMD error in code nobody annotated).  Each
run is its own mypy process: a cold one, then a warm one where ``lib`` and ``mytypes`` come
from the cache and only the caller is checked again.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

MYTYPES = '''
from spmd import R, Tensor
Act = Tensor[R["tp"]]
'''
LIB = '''
from typing import Optional
import torch
import spmd
from spmd import P, R, S, Tensor, V
from mytypes import Act

class Layer(torch.nn.Module):
    weight: Act
    cache: list[Act]
    def parts(self, x: Act) -> tuple[Act, Act]:
        return x, x

def one(a: Act) -> Act:
    return a

def maybe(a: Act) -> Optional[Act]:
    return a

def make_outs(a: Act) -> list[Act]:
    return [a, a]

def column(x: Act, w: Tensor[S[0, "tp"]]) -> Tensor[V["tp"]]:
    return x @ w.T

def row(h: Tensor[V["tp"]], w: Tensor[S[1, "tp"]]) -> Tensor[P["tp"]]:
    return spmd.convert(h @ w.T, "tp", src=V, dst=P)

def split(x: Act) -> tuple[Tensor[V["tp"]], Act]:
    return spmd.reinterpret(x, "tp", src=R, dst=V), x

def fresh() -> Act:
    raise NotImplementedError

STATE: dict[str, Act] = {}
'''
CALLER = '''
from typing import Optional
import torch
from torch.distributed.tensor import DTensor
from lib import STATE, Layer, column, fresh, make_outs, maybe, one, row, split

def total(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(xs)

def h(x: torch.Tensor, layer: Layer, t: torch.Tensor) -> torch.Tensor:
    y = one(x)
    y = x
    w = layer.weight
    w = x
    total(layer.cache)
    a, b = layer.parts(x)
    a = x
    m = maybe(x)
    m = x
    s: dict[str, torch.Tensor] = STATE
    o: Optional[torch.Tensor] = maybe(x)
    lst = [one(x)]
    lst.append(x)
    outs = make_outs(x)
    total(outs)
    torch.cat(make_outs(x))
    mixed = [one(x), x]
    total(mixed)
    if type(t) is DTensor:
        t.to_local()
    if isinstance(t, DTensor):
        t.to_local()
    h = column(x, x)
    h = row(h, x)
    h = torch.nn.functional.gelu(h)
    u, v = split(x)
    u = v
    f = fresh()
    f = column(f, x)
    reveal_type(layer.weight * 2)
    return y
'''

# A typed stub file (as megatron-core's stubs, which import spmd) does not make its importers
# count as typed: they keep mypy's usual join of a typed and a plain tensor (torch.Tensor;
# under the promotion it would be torch's TensorBase).
TYPED_STUB = '''
from spmd import P, R, Tensor
WEIGHT: Tensor[R["tp"]]
PENDING: Tensor[P["tp"]]
'''
STUB_CALLER = '''
import torch
import typedstub

def g(plain: torch.Tensor) -> None:
    plain = plain.abs()
    reveal_type([typedstub.WEIGHT, plain])
    reveal_type(typedstub.PENDING * 2)
    torch.relu(typedstub.PENDING)
    typedstub.WEIGHT.backward()
'''
FILES = ("caller.py", "lib.py", "mytypes.py", "typedstub.pyi", "stubcaller.py")
EXPECTED = [
    'stubcaller.py:7: note: Revealed type is "list[torch._tensor.Tensor]"',
    # no SPMD hook in a module that meets no SPMD types: mypy's own result, no SPMD rule
    'stubcaller.py:8: note: Revealed type is "torch._tensor.Tensor"',
    # one that does (it imports a typed module) has its ops typed
    'caller.py:40: note: Revealed type is "spmd._slots.Tensor[Any, spmd._slots.R[Literal[\'tp\']], Any]"',
]


def test_an_unannotated_caller_of_a_typed_module_gets_no_new_errors(tmp_path: Path) -> None:
    write_config(tmp_path)
    for name, text in (("mytypes.py", MYTYPES), ("lib.py", LIB), ("caller.py", CALLER),
                       ("typedstub.pyi", TYPED_STUB), ("stubcaller.py", STUB_CALLER)):
        (tmp_path / name).write_text(textwrap.dedent(text))
    cold = run_mypy(tmp_path, *FILES)
    assert cold.splitlines() == [*EXPECTED, "Success: no issues found in 5 source files"], cold
    for name in ("caller.py", "stubcaller.py"):  # only the callers are checked again
        with open(tmp_path / name, "a") as f:
            f.write("# edited\n")
    warm = run_mypy(tmp_path, *FILES)
    assert warm.splitlines() == [*EXPECTED, "Success: no issues found in 5 source files"], warm
