"""Operand texts (plugin ``texts.expr_text``): as written where short, visibly cut where long.

A fix quotes the operand and users paste it, so the text must be the code (a subscript's
index, a call's arguments, the parentheses precedence needs) or not parse at all: ``<...>``
(the old ``c[...]`` / ``f(...)`` parsed: the whole tensor, a call with Ellipsis)."""

from __future__ import annotations

import ast

import pytest
from mypy.errors import Errors
from mypy.fastparse import parse
from mypy.nodes import ListExpr, StrExpr
from mypy.options import Options

from spmd_mypy.engine.types import each_item, is_subscript
from spmd_mypy.plugin.rewrite import _RAW_PREFIX
from spmd_mypy.plugin.texts import ELIDED, TEXT_LIMIT, expr_text


def _text(source: str) -> str:
    options = Options()
    tree = parse(f"y = {source}", "m.py", None, Errors(options), options)
    return expr_text(tree.defs[0].rvalue)  # type: ignore[attr-defined]


@pytest.mark.parametrize("source,text", [
    ("c[0]", "c[0]"), ("h[:, :n]", "h[:, :n]"), ("xs[i]", "xs[i]"), ("out[..., 1:]", "out[..., 1:]"),
    ("x[::-1]", "x[::-1]"), ("x[None, :, 1:-1:2]", "x[None, :, 1:-1:2]"), ("x[0,]", "x[0,]"),
    ('d["q"]', 'd["q"]'), ('acts[f"l{i}"]', 'acts[f"l{i}"]'), ("a[f'{k!r:>3}']", 'a[f"{k!r:>3}"]'),
    ("mp.to(torch.float32)", "mp.to(torch.float32)"), ("x.view(b, s, -1)", "x.view(b, s, -1)"),
    ("x.sum(dim=-1, keepdim=True)", "x.sum(dim=-1, keepdim=True)"), ("f(*a, **k)", "f(*a, **k)"),
    ("logits.max(-1)[0].detach()", "logits.max(-1)[0].detach()"),
    ("(a + b).float()", "(a + b).float()"), ("a + b * c", "(a + b * c)"),
    ("(a + b) * c", "((a + b) * c)"), ("a - (b - c)", "(a - (b - c))"), ("-x ** 2", "-x ** 2"),
    ("(-x) ** 2", "(-x) ** 2"), ("not p", "(not p)"), ("a < b < c", "(a < b < c)"),
    ("x if c else y", "(x if c else y)"), ("lambda t: t.float()", "(lambda t: t.float())"),
    ("[p * 2 for p in ps if p is not None]", "[p * 2 for p in ps if p is not None]"),
    ("(a,)", "(a,)"), ('{"a": b}', '{"a": b}'),
    ("torch.cat([a[0], b[1], c[2], d[3], e[4]], dim=-1)", "torch.cat(<...>)"),
    ("torch.cat(xs).view(batch_size, seq_len, -1).float()", "torch.cat(xs).view(<...>).float()"),
])
def test_operand_text(source: str, text: str) -> None:
    assert _text(source) == text
    if ELIDED not in text:  # the code itself: the same tree
        assert ast.dump(ast.parse(text)) == ast.dump(ast.parse(source))
    else:
        with pytest.raises(SyntaxError):
            compile(text, "<fix>", "eval")


def test_a_long_operand_is_cut_to_the_limit() -> None:
    text = _text("F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)")
    assert text == "F.scaled_dot_product_attention(<...>)" and len(text) <= TEXT_LIMIT


def test_rewritten_names_and_axes_print_as_written() -> None:
    """The pre-pass renames a redefinition h' and marks axis strings raw; neither shows."""
    options = Options()
    tree = parse('y = spmd.declare(h, Tensor[PS[None, ("dp", "tp")]])', "m.py", None,
                 Errors(options), options)
    e = call = tree.defs[0].rvalue  # type: ignore[attr-defined]
    call.args[0].name = "h'"
    spec = call.args[1].index.index
    pair = ListExpr([StrExpr(_RAW_PREFIX + "dp"), StrExpr(_RAW_PREFIX + "tp")])
    spec.items[1] = pair
    assert expr_text(e) == 'spmd.declare(h, Tensor[PS[None, ("dp", "tp")]])'


def test_engine_reads_the_texts() -> None:
    assert is_subscript("full[r * b:(r + 1) * b]") and is_subscript("acts[<...>]")
    assert is_subscript("[a, b][0]") and not is_subscript("[a, b]") and not is_subscript("f(x)")
    call = 'all_reduce({}, "tp", src=P, dst=R)'
    assert each_item("xs[k]", call) == '[all_reduce(t, "tp", src=P, dst=R) for t in xs] (in place of xs)'
    assert each_item("xs[0]", call) == 'all_reduce(xs[0], "tp", src=P, dst=R)'
