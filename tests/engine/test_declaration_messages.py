"""``collectives.declaration_error``: a replicated value declared V or S(i) may be a part cut
from the whole by hand (Megatron's init: ``whole[r * k:(r + 1) * k]``), which neither checker
sees; the message then says to cut the whole with convert, not to convert the cut again."""

from __future__ import annotations

from spmd_mypy.engine.collectives import declaration_error
from spmd_mypy.engine.types import VARYING, Kind, LocalType, SpmdType, shard

HINT = "cut from the whole by hand"


def _msg(have: LocalType, want: LocalType, x_text: str, may_be_cut: bool | None = None) -> str:
    err = declaration_error(SpmdType.of({"tp": have}), SpmdType.of({"tp": want}), x_text=x_text,
                            what=f"spmd.declare({x_text}, ...)", may_be_cut=may_be_cut)
    assert err is not None and err.code == "spmd-annotation"
    return err.message


def test_a_cut_replicated_value_declared_sharded_gets_the_whole_convert():
    for have in (LocalType(Kind.I), LocalType(Kind.R)):
        m = _msg(have, shard(1), "full[r * k:(r + 1) * k]")
        assert (f'{HINT} (whole[r * k:(r + 1) * k], torch.split(whole, k, dim)[r]), which this '
                f'checker does not see, cut it with convert(whole, "tp", src={have}, dst=S(1)) instead') in m, m
        assert f"cut it with convert(whole, \"tp\", src={have}, dst=V)" in _msg(have, VARYING, "w.chunk(2)[r]")


def test_no_hint_where_no_cut_is_possible():
    assert HINT not in _msg(LocalType(Kind.I), shard(0), "full")          # a whole name
    assert HINT in _msg(LocalType(Kind.I), shard(0), "full", may_be_cut=True)  # told so
    assert HINT not in _msg(LocalType(Kind.P), shard(0), "x[0]")         # not replicated
    assert HINT not in _msg(shard(0), LocalType(Kind.I), "x[0]")         # the other way
