"""The partial stub package torch-stubs is what stubs/gen_torch_stubs.py writes from the
pinned torch (regenerate with ``python stubs/gen_torch_stubs.py`` after a torch upgrade)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_torch_stubs", ROOT / "stubs" / "gen_torch_stubs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_stubs_are_up_to_date() -> None:
    for path, text in _generator().files().items():
        assert path.read_text() == text, f"{path} is stale: run python stubs/gen_torch_stubs.py"


def test_every_public_function_has_a_signature() -> None:
    """Each function torch.linalg / special / fft binds from an extension module got a real
    signature (its docstring's first line parsed), not the catch-all."""
    gen = _generator()
    for public, c_module in gen.MODULES:
        text = gen.render(public, c_module)
        import inspect

        import torch

        bound = {c for _, m, c in gen._BIND.findall(inspect.getsource(getattr(torch, public)))
                 if m == c_module[1:]}
        catch_all = {ln.split("(")[0][4:] for ln in text.splitlines() if "(*args: Any" in ln}
        assert not bound & catch_all, (public, sorted(bound & catch_all))
        assert len(bound) > 15, (public, len(bound))
