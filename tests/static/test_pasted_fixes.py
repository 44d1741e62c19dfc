"""A global layout error's fix, pasted as offered, is accepted: mypy is run on the program,
each ``spmd.redistribute(x, ...)`` a message offers replaces ``x`` on its line, and mypy is
run again.

The case that failed (session 33's second regression probe): an operand that is P or I on an
axis the fix shards it on.  A bare ``src=PS[...]`` leaves that axis unsaid, and an axis only
``dst`` names is taken as R on the src side (engine/redistribute.py: resolve), so the pasted
call was spmd-src-mismatch; the fix now writes the operand's whole type as ``src`` there
(engine/global_spmd.py: redistribute_fix), and keeps the bare spec where it describes it."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mypy_project import run_mypy, write_config  # noqa: E402

SOURCE = textwrap.dedent('''\
    import torch
    import spmd
    from spmd import Tensor, R, I, P, PS


    def partial_to_shard(a: Tensor[PS["tp", None]], w: Tensor[PS[None, None], P["tp"]]) -> None:
        torch.cat([a, w], 1)


    def invariant_to_shard(a: Tensor[PS["tp", None]], b: Tensor[PS[None, None], I["tp"], R["dp"]]) -> None:
        a + b


    def partial_with_another_axis(a: Tensor[PS["tp", None], R["dp"]], w: Tensor[PS[None, None], P["tp"], R["dp"]]) -> None:
        w * a


    def partial_elsewhere_kept_bare(x: Tensor[PS["tp", None], P["dp"]]) -> None:
        x.roll(1, 0)
''')

_FIX = re.compile(r"spmd\.redistribute\((\w+), [^()]*(?:\([^()]*\)[^()]*)*\)")


def _errors(out: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^main\.py:(\d+): error: (.*)$", out, re.M)]


def test_each_offered_redistribute_pastes(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "main.py").write_text(SOURCE)
    errors = _errors(run_mypy(tmp_path, "main.py"))
    lines = SOURCE.splitlines()
    fixes: dict[int, str] = {}
    for line, msg in errors:
        if msg.endswith("[spmd-global]"):
            m = _FIX.search(msg)
            assert m is not None, msg
            fixes[line] = m.group(0)
            lines[line - 1] = re.sub(rf"\b{m.group(1)}\b", lambda _: m.group(0), lines[line - 1], count=1)
    assert len(fixes) == 4, errors
    # the P/I operand's fix says what it is there; a P on an axis the fix leaves alone stays bare
    at = {s.strip(): n + 1 for n, s in enumerate(SOURCE.splitlines())}
    assert 'src=Tensor[PS[None, None], P["tp"]], dst=PS["tp", None]' in fixes[at["torch.cat([a, w], 1)"]]
    assert 'src=Tensor[PS[None, None], R["dp"], I["tp"]], dst=PS["tp", None]' in fixes[at["a + b"]]
    assert 'src=Tensor[PS[None, None], R["dp"], P["tp"]], dst=PS["tp", None]' in fixes[at["w * a"]]
    assert 'src=PS["tp", None], dst=PS[None, None]' in fixes[at["x.roll(1, 0)"]]
    (tmp_path / "main.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "main.py")
    assert out.startswith("Success"), "\n".join(lines) + "\n" + out


BROADCAST_SOURCE = textwrap.dedent('''\
    import torch
    import spmd
    from spmd import Tensor, R, V, P, PS, all_reduce, reinterpret


    def add(x: Tensor[PS["dp", None], R["tp"]], c: Tensor[PS[None], V["dp"], R["tp"]]) -> None:
        spmd.reveal(x + c)


    def where(x: Tensor[PS["dp", None], R["tp"]], c: Tensor[PS[None], V["dp"], R["tp"]]) -> None:
        spmd.reveal(torch.where(x > 0, x, c))


    def einsum(x: Tensor[PS["dp", None], R["tp"]], c: Tensor[PS[None], V["dp"], R["tp"]]) -> None:
        spmd.reveal(torch.einsum("bi,i->bi", x, c))
''')

_SUM_FIX = re.compile(r"all_reduce\(reinterpret\((\w+), [^()]*\), [^()]*\)")


def test_broadcast_operand_fix_pastes(tmp_path: Path) -> None:
    """An operand varying on an axis that shards a dim it is broadcast along: the first fix
    offered (the ranks' parts summed) pastes and types the result as the sharded operand.
    The fix it replaces, all_gather(c, "dp", src=V, dst=R), stacks the ranks' values on a
    new dim 0: pasted, it must not be typed as a broadcast of one value (it was, with a
    1-dim spec, and x + cg was accepted while it added the wrong rows)."""
    write_config(tmp_path)
    (tmp_path / "main.py").write_text(BROADCAST_SOURCE)
    errors = _errors(run_mypy(tmp_path, "main.py"))
    lines = BROADCAST_SOURCE.splitlines()
    fixes: dict[int, str] = {}
    for line, msg in errors:
        assert msg.endswith("[spmd-global]"), msg
        m = _SUM_FIX.search(msg)
        assert m is not None, msg
        assert 'all_gather(c, "dp", src=V, dst=R) is no fix' in msg, msg
        fixes[line] = m.group(0)
        lines[line - 1] = re.sub(r"\bc\b", lambda _: m.group(0), lines[line - 1])
    assert len(fixes) == 3, errors
    (tmp_path / "main.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "main.py")
    assert "error" not in out, "\n".join(lines) + "\n" + out
    assert out.count('Revealed type is Tensor[PS["dp", None], R["tp"]]') == 3, out
    # the gather the message used to offer: a new dim 0, so x + cg is no longer accepted
    gathered = BROADCAST_SOURCE.splitlines()
    at = next(n for n, s in enumerate(gathered) if "x + c" in s)
    gathered[at] = gathered[at].replace("x + c", 'x + spmd.all_gather(c, "dp", src=V, dst=R)')
    (tmp_path / "main.py").write_text("\n".join(gathered) + "\n")
    errs = [msg for line, msg in _errors(run_mypy(tmp_path, "main.py")) if line == at + 1]
    assert errs and "PS[None, None]" in errs[0], errs


INDEX_SOURCE = textwrap.dedent('''\
    import torch
    import spmd
    from spmd import Tensor, R, V, S


    def greedy(logits: Tensor[S[-1, "tp"], V["dp"]]) -> Tensor[R["tp"], V["dp"]]:
        return logits.argmax(-1)


    def top(logits: Tensor[S[-1, "tp"]]) -> Tensor[R["tp"]]:
        return logits.topk(4, dim=-1).indices


    def feed(logits: Tensor[S[-1, "tp"]]) -> None:
        tok = torch.argmax(logits, dim=-1)
        spmd.declare(tok, Tensor[R["tp"]])
''')

_GATHER_SOURCE = re.compile(r'all_gather\((\w+), "tp", src=S\(-1\), dst=R\) in place of (\w+) in the')


def test_index_fix_pastes(tmp_path: Path) -> None:
    """An index of this rank's shard (an argmax, topk indices) where R is needed: the message
    offered the indices gathered (stacked on a new dim 0) or summed, which pasted passed both
    checkers and decoded garbage (probe-infer b1).  The fix gathers the index op's input
    before it: pasted in place of that input, the program type-checks."""
    write_config(tmp_path)
    (tmp_path / "main.py").write_text(INDEX_SOURCE)
    errors = _errors(run_mypy(tmp_path, "main.py"))
    lines = INDEX_SOURCE.splitlines()
    fixed: set[int] = set()
    for line, msg in errors:
        assert "all_gather(logits.argmax" not in msg and "reinterpret(logits" not in msg, msg
        assert "to sum them" not in msg and "to stack the ranks' values" not in msg, msg
        m = _GATHER_SOURCE.search(msg)
        assert m is not None and m.group(1) == m.group(2) == "logits", msg
        # the line the index op is on: the returned value's, or the declared name's assignment
        at = line - 1 if "logits" in lines[line - 1] else line - 2
        lines[at] = re.sub(r"\blogits\b(?!:)", lambda _: "spmd." + m.group(0).split(" in place")[0],
                           lines[at], count=1)
        fixed.add(at)
    assert len(fixed) == 3, errors
    (tmp_path / "main.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "main.py")
    assert out.startswith("Success"), "\n".join(lines) + "\n" + out


OPERAND_SOURCE = textwrap.dedent('''\
    import torch
    import spmd
    from spmd import Tensor, R, P, all_reduce


    def subscripts(c: Tensor[P["tp"]], h: Tensor[P["tp"]], out: Tensor[P["tp"]], n: int) -> None:
        c[0].exp()
        h[:, :n].relu()
        out[..., 1:].sigmoid()


    def calls_with_arguments(mp: Tensor[P["tp"]], x: Tensor[P["tp"]], b: int, s: int) -> None:
        y: Tensor[R["tp"]] = mp.to(torch.float32)
        x.view(b, s, -1).exp()
        x.sum(dim=-1, keepdim=True).sigmoid()


    def list_items(xs: list[Tensor[P["tp"]]], r: Tensor[R["tp"]]) -> None:
        torch.cat(xs + [r])
''')

# (the operand as written on the line, the fix the message offers for it, pasted in its place)
_OPERAND_FIXES = [
    ("c[0]", 'all_reduce(c[0], "tp", src=P, dst=R)'),
    ("h[:, :n]", 'all_reduce(h[:, :n], "tp", src=P, dst=R)'),
    ("out[..., 1:]", 'all_reduce(out[..., 1:], "tp", src=P, dst=R)'),
    ("mp.to(torch.float32)", 'all_reduce(mp.to(torch.float32), "tp", src=P, dst=R)'),
    ("x.view(b, s, -1)", 'all_reduce(x.view(b, s, -1), "tp", src=P, dst=R)'),
    ("x.sum(dim=-1, keepdim=True)", 'all_reduce(x.sum(dim=-1, keepdim=True), "tp", src=P, dst=R)'),
    ("xs", '[all_reduce(t, "tp", src=P, dst=R) for t in xs]'),
]


def test_operand_fixes_paste(tmp_path: Path) -> None:
    """A fix quoting a subscript or a call with arguments pastes as offered: operands print as
    written (plugin texts.expr_text; they printed c[...] and mp.to(...), which pasted are
    the whole tensor and a call with Ellipsis), and a list operand of cat is reduced item by
    item (it offered all_reduce(xs, ...) on the list, which takes one tensor)."""
    write_config(tmp_path)
    (tmp_path / "main.py").write_text(OPERAND_SOURCE)
    errors = _errors(run_mypy(tmp_path, "main.py"))
    lines = OPERAND_SOURCE.splitlines()
    assert len(errors) == len(_OPERAND_FIXES), errors
    for (line, msg), (operand, fix) in zip(errors, _OPERAND_FIXES):
        assert fix in msg, msg
        assert operand in lines[line - 1], (operand, lines[line - 1])
        lines[line - 1] = lines[line - 1].replace(operand, fix, 1)
    (tmp_path / "main.py").write_text("\n".join(lines) + "\n")
    out = run_mypy(tmp_path, "main.py")
    assert out.startswith("Success"), "\n".join(lines) + "\n" + out
