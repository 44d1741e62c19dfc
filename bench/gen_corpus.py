"""Generate a Megatron-style corpus for the static-overhead benchmark, in two variants.

``annotated``: SPMD-typed code (``from spmd import Tensor, R, I, V, P, S``; ``Tensor[...]``
annotations on parameters, activations, returns and class attributes; spmd collectives,
``spmd.linear``/``spmd.einsum`` with ``out_partial_axes``), checked with the plugin.

``plain``: the SAME code with every ``Tensor[...]`` annotation replaced by ``torch.Tensor`` and
``spmd`` replaced by a generated helper module ``spmd_plain`` whose functions have the
signatures of spmd's stubs (same parameters, ``torch.Tensor`` in and out) and return their
input: the call sites are textually identical.  Checked without the plugin.

Each module is one template (~360 lines) instantiated with its index: tensor-parallel linears
(column and row, sequence-parallel variants), RMSNorm/LayerNorm, attention with einsums and
matmuls, MLPs (gelu or SwiGLU), a vocab-parallel cross entropy, data-parallel gradient
reduction, a transformer layer and its stack, plus the untyped plumbing real code has (config
dataclasses, schedules, bookkeeping).  Modules import from two earlier ones, so the corpus has a
dependency graph rather than isolated files.

    python bench/gen_corpus.py OUT_DIR --lines 20000      # writes OUT_DIR/{annotated,plain}
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

PACKAGE = "corpus"

MODULE_TEMPLATE = '''\
"""Generated Megatron-style module @I@ (a transformer layer family, tensor x data parallel).

Types on the mesh: activations vary on "dp" (each replica has its own micro-batch); on "tp"
they are whole between blocks (Invariant) and sharded inside the parallel regions.  Weights
are Replicate on "dp" (their gradients are Partial there and are summed after backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from spmd import I, P, R, S, Tensor, V
@IMPORTS@

HIDDEN_@I@ = @HIDDEN@
FFN_@I@ = 4 * HIDDEN_@I@
HEADS_@I@ = @HEADS@
HEAD_DIM_@I@ = HIDDEN_@I@ // HEADS_@I@
EPS_@I@ = 1e-@EPS@


@dataclass
class LayerConfig@I@:
    """Shapes and switches of one layer (untyped plumbing, as in real code)."""

    hidden: int = HIDDEN_@I@
    ffn: int = FFN_@I@
    heads: int = HEADS_@I@
    tp_size: int = 2
    dp_size: int = 2
    dropout: float = 0.@EPS@
    swiglu: bool = @SWIGLU@
    sequence_parallel: bool = @SP@
    names: list[str] = field(default_factory=list)

    @property
    def local_heads(self) -> int:
        return self.heads // self.tp_size

    @property
    def local_ffn(self) -> int:
        return self.ffn // self.tp_size

    def describe(self) -> str:
        parts = [f"hidden={self.hidden}", f"ffn={self.ffn}", f"heads={self.heads}"]
        if self.swiglu:
            parts.append("swiglu")
        if self.sequence_parallel:
            parts.append("sp")
        return " ".join(parts + self.names)


# ---- the mappings (Megatron's mappings.py, typed) ------------------------------------------


def copy_to_tp_@I@(x: Tensor[I["tp"], V["dp"]]) -> Tensor[R["tp"], V["dp"]]:
    """Enter a tensor-parallel region: the backward all-reduces the gradient."""
    return spmd.reinterpret(x, "tp", src=I, dst=R)


def reduce_from_tp_@I@(x: Tensor[P["tp"], V["dp"]]) -> Tensor[I["tp"], V["dp"]]:
    """Leave a row-parallel region: sum the partial outputs."""
    return spmd.all_reduce(x, "tp", src=P, dst=I)


def gather_from_tp_@I@(x: Tensor[S[2, "tp"], V["dp"]]) -> Tensor[R["tp"], V["dp"]]:
    """Gather the last dim of [batch, seq, hidden/tp] activations."""
    return spmd.all_gather(x, "tp", src=S(2), dst=R)


def scatter_to_sp_@I@(x: Tensor[I["tp"], V["dp"]]) -> Tensor[S[1, "tp"], V["dp"]]:
    """Enter the sequence-parallel region: keep this rank's chunk of the sequence."""
    return spmd.convert(x, "tp", src=I, dst=S(1))


def gather_from_sp_@I@(x: Tensor[S[1, "tp"], V["dp"]]) -> Tensor[R["tp"], V["dp"]]:
    """All-gather the sequence before a column-parallel linear."""
    return spmd.all_gather(x, "tp", src=S(1), dst=R)


def reduce_scatter_to_sp_@I@(x: Tensor[P["tp"], V["dp"]]) -> Tensor[S[1, "tp"], V["dp"]]:
    """Leave a row-parallel linear in sequence-parallel mode."""
    return spmd.reduce_scatter(x, "tp", src=P, dst=S(1))


# ---- layers --------------------------------------------------------------------------------


def rms_norm_@I@(x: Tensor[I["tp"], V["dp"]], weight: Tensor[I["tp"], R["dp"]]) -> Tensor[I["tp"], V["dp"]]:
    variance = x.pow(2).mean(-1, keepdim=True)
    normed = x * torch.rsqrt(variance + EPS_@I@)
    return normed * weight


def layer_norm_sp_@I@(x: Tensor[S[1, "tp"], V["dp"]], weight: Tensor[R["tp"], R["dp"]],
                     bias: Tensor[R["tp"], R["dp"]]) -> Tensor[S[1, "tp"], V["dp"]]:
    # F.layer_norm: in local mode the plugin drops the shard dim of a hand-written x.mean(...)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS_@I@)


def column_parallel_@I@(x: Tensor[R["tp"], V["dp"]], w: Tensor[S[0, "tp"], R["dp"]],
                       b: Tensor[S[0, "tp"], R["dp"]]) -> Tensor[V["tp"], V["dp"]]:
    """y = x w^T + b with the output features sharded: no comms forward."""
    return F.linear(x, w, b)


def row_parallel_@I@(h: Tensor[V["tp"], V["dp"]], w: Tensor[S[1, "tp"], R["dp"]]) -> Tensor[P["tp"], V["dp"]]:
    """y = h w^T with the input features sharded: each rank holds a partial sum."""
    return spmd.linear(h, w, out_partial_axes="tp")


def activation_@I@(h: Tensor[V["tp"], V["dp"]], gate: Optional[Tensor[V["tp"], V["dp"]]] = None) -> Tensor[V["tp"], V["dp"]]:
    if gate is None:
        return F.gelu(h)
    return F.silu(gate) * h


def dropout_@I@(x: Tensor[V["tp"], V["dp"]], p: float, training: bool) -> Tensor[V["tp"], V["dp"]]:
    if not training or p == 0.0:
        return x
    return F.dropout(x, p=p, training=True)


class ParallelMLP@I@(nn.Module):
    """Column-parallel fc1 (optionally gated), activation, row-parallel fc2."""

    w1: Tensor[S[0, "tp"], R["dp"]]
    b1: Tensor[S[0, "tp"], R["dp"]]
    w_gate: Tensor[S[0, "tp"], R["dp"]]
    w2: Tensor[S[1, "tp"], R["dp"]]
    b2: Tensor[I["tp"], R["dp"]]

    def __init__(self, cfg: LayerConfig@I@) -> None:
        super().__init__()
        self.cfg = cfg
        self.w1 = nn.Parameter(torch.empty(cfg.local_ffn, cfg.hidden))
        self.b1 = nn.Parameter(torch.zeros(cfg.local_ffn))
        self.w_gate = nn.Parameter(torch.empty(cfg.local_ffn, cfg.hidden))
        self.w2 = nn.Parameter(torch.empty(cfg.hidden, cfg.local_ffn))
        self.b2 = nn.Parameter(torch.zeros(cfg.hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.w1, self.w_gate, self.w2):
            nn.init.normal_(w, std=0.02 / math.sqrt(2.0))

    def forward(self, x: Tensor[I["tp"], V["dp"]]) -> Tensor[I["tp"], V["dp"]]:
        x_r = copy_to_tp_@I@(x)
        h = column_parallel_@I@(x_r, self.w1, self.b1)
        if self.cfg.swiglu:
            gate = F.linear(x_r, self.w_gate)
            h = activation_@I@(h, gate)
        else:
            h = activation_@I@(h)
        h = dropout_@I@(h, self.cfg.dropout, self.training)
        partial = row_parallel_@I@(h, self.w2)
        return reduce_from_tp_@I@(partial) + self.b2


class SequenceParallelMLP@I@(nn.Module):
    """The same MLP with the sequence sharded outside it (Megatron's sequence_parallel)."""

    ln_w: Tensor[R["tp"], R["dp"]]
    ln_b: Tensor[R["tp"], R["dp"]]
    w1: Tensor[S[0, "tp"], R["dp"]]
    b1: Tensor[S[0, "tp"], R["dp"]]
    w2: Tensor[S[1, "tp"], R["dp"]]
    b2: Tensor[R["tp"], R["dp"]]

    def __init__(self, cfg: LayerConfig@I@) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln_w = nn.Parameter(torch.ones(cfg.hidden))
        self.ln_b = nn.Parameter(torch.zeros(cfg.hidden))
        self.w1 = nn.Parameter(torch.empty(cfg.local_ffn, cfg.hidden))
        self.b1 = nn.Parameter(torch.zeros(cfg.local_ffn))
        self.w2 = nn.Parameter(torch.empty(cfg.hidden, cfg.local_ffn))
        self.b2 = nn.Parameter(torch.zeros(cfg.hidden))

    def forward(self, x: Tensor[S[1, "tp"], V["dp"]]) -> Tensor[S[1, "tp"], V["dp"]]:
        h = layer_norm_sp_@I@(x, self.ln_w, self.ln_b)
        h_full = gather_from_sp_@I@(h)
        a = F.gelu(F.linear(h_full, self.w1, self.b1))
        partial = spmd.linear(a, self.w2, out_partial_axes="tp")
        y = reduce_scatter_to_sp_@I@(partial) + self.b2
        return x + y

    def sequence_parallel_params(self) -> list[Tensor[R["tp"], R["dp"]]]:
        return [self.ln_w, self.ln_b, self.b2]


def attention_scores_@I@(q: Tensor[V["tp"], V["dp"]], k: Tensor[V["tp"], V["dp"]]) -> Tensor[V["tp"], V["dp"]]:
    """[batch, heads/tp, seq, head_dim] x2 -> [batch, heads/tp, seq, seq]."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(HEAD_DIM_@I@)
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf"))


def attention_context_@I@(probs: Tensor[V["tp"], V["dp"]], v: Tensor[V["tp"], V["dp"]]) -> Tensor[V["tp"], V["dp"]]:
    return torch.einsum("bhqk,bhkd->bhqd", probs, v)


class ParallelAttention@I@(nn.Module):
    """Fused QKV (column-parallel, heads sharded), softmax attention, row-parallel output."""

    norm_w: Tensor[I["tp"], R["dp"]]
    w_qkv: Tensor[S[0, "tp"], R["dp"]]
    b_qkv: Tensor[S[0, "tp"], R["dp"]]
    w_o: Tensor[S[1, "tp"], R["dp"]]
    b_o: Tensor[I["tp"], R["dp"]]

    def __init__(self, cfg: LayerConfig@I@) -> None:
        super().__init__()
        self.cfg = cfg
        local = cfg.local_heads * HEAD_DIM_@I@
        self.norm_w = nn.Parameter(torch.ones(cfg.hidden))
        self.w_qkv = nn.Parameter(torch.empty(3 * local, cfg.hidden))
        self.b_qkv = nn.Parameter(torch.zeros(3 * local))
        self.w_o = nn.Parameter(torch.empty(cfg.hidden, local))
        self.b_o = nn.Parameter(torch.zeros(cfg.hidden))

    def split_heads(self, qkv: Tensor[V["tp"], V["dp"]]) -> tuple[Tensor[V["tp"], V["dp"]], Tensor[V["tp"], V["dp"]], Tensor[V["tp"], V["dp"]]]:
        batch, seq, _ = qkv.shape
        heads = qkv.view(batch, seq, self.cfg.local_heads, 3, HEAD_DIM_@I@).permute(3, 0, 2, 1, 4)
        return heads[0], heads[1], heads[2]

    def forward(self, x: Tensor[I["tp"], V["dp"]]) -> Tensor[I["tp"], V["dp"]]:
        batch, seq, _ = x.shape
        h = rms_norm_@I@(x, self.norm_w)
        h_r = copy_to_tp_@I@(h)
        qkv = F.linear(h_r, self.w_qkv, self.b_qkv)
        q, k, v = self.split_heads(qkv)
        probs = torch.softmax(attention_scores_@I@(q, k), dim=-1)
        probs = dropout_@I@(probs, self.cfg.dropout, self.training)
        ctx = attention_context_@I@(probs, v)
        ctx = ctx.transpose(1, 2).reshape(batch, seq, -1)
        partial = spmd.linear(ctx, self.w_o, out_partial_axes="tp")
        return reduce_from_tp_@I@(partial) + self.b_o


def matmul_attention_@I@(q: Tensor[V["tp"], V["dp"]], k: Tensor[V["tp"], V["dp"]],
                        v: Tensor[V["tp"], V["dp"]], scale: float) -> Tensor[V["tp"], V["dp"]]:
    """The same attention with matmul instead of einsum (both spellings are common)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    probs = F.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


def vocab_parallel_cross_entropy_@I@(logits: Tensor[V["tp"], V["dp"]], target: torch.Tensor,
                                    vocab_start: int, vocab_end: int) -> Tensor[I["tp"], V["dp"]]:
    """Per-token cross entropy of [tokens, vocab/tp] logits sharded on the vocab."""
    with torch.no_grad():
        logits_max = spmd.all_reduce(torch.amax(logits, dim=-1), "tp", src=V, dst=R, op="max")
    shifted = logits - logits_max.unsqueeze(-1)
    local_sum_exp = spmd.reinterpret(shifted.exp().sum(dim=-1), "tp", src=V, dst=P)
    sum_exp = spmd.all_reduce(local_sum_exp, "tp", src=P, dst=I)
    outside = (target < vocab_start) | (target >= vocab_end)
    local_target = torch.where(outside, 0, target - vocab_start)
    picked = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    target_logit = spmd.all_reduce(spmd.reinterpret(picked, "tp", src=V, dst=P), "tp", src=P, dst=I)
    return torch.log(sum_exp) - target_logit


class TransformerLayer@I@(nn.Module):
    """Pre-norm residual block: x + attn(x), then + mlp(.)."""

    def __init__(self, cfg: LayerConfig@I@) -> None:
        super().__init__()
        self.cfg = cfg
        self.attention = ParallelAttention@I@(cfg)
        self.mlp = ParallelMLP@I@(cfg)
        self.sp_mlp = SequenceParallelMLP@I@(cfg)

    def forward(self, x: Tensor[I["tp"], V["dp"]]) -> Tensor[I["tp"], V["dp"]]:
        h: Tensor[I["tp"], V["dp"]] = x + self.attention(x)
        if self.cfg.sequence_parallel:
            h_sp = scatter_to_sp_@I@(h)
            out_sp = self.sp_mlp(h_sp)
            return spmd.all_gather(out_sp, "tp", src=S(1), dst=I)
        out: Tensor[I["tp"], V["dp"]] = h + self.mlp(h)
        return out


class TransformerStack@I@(nn.Module):
    def __init__(self, cfg: LayerConfig@I@, depth: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([TransformerLayer@I@(cfg) for _ in range(depth)])

    def __iter__(self) -> Iterator[nn.Module]:
        return iter(self.layers)

    def forward(self, x: Tensor[I["tp"], V["dp"]]) -> Tensor[I["tp"], V["dp"]]:
        h = x
        for layer in self.layers:
            h = layer(h)
        return h


class LMHead@I@(nn.Module):
    out_w: Tensor[S[0, "tp"], R["dp"]]

    def __init__(self, cfg: LayerConfig@I@, vocab: int) -> None:
        super().__init__()
        self.vocab_start = 0
        self.vocab_end = vocab // cfg.tp_size
        self.out_w = nn.Parameter(torch.empty(self.vocab_end, cfg.hidden))

    def forward(self, h: Tensor[I["tp"], V["dp"]], target: torch.Tensor) -> Tensor[I["tp"], V["dp"]]:
        logits = F.linear(copy_to_tp_@I@(h), self.out_w)
        per_token = vocab_parallel_cross_entropy_@I@(logits.flatten(0, 1), target.flatten(),
                                                     self.vocab_start, self.vocab_end)
        return per_token.mean()


# ---- data parallel -------------------------------------------------------------------------


def global_loss_@I@(share: Tensor[I["tp"], V["dp"]]) -> Tensor[I["tp"], P["dp"]]:
    """Each replica's share of the mean; their sum over "dp" is the global loss."""
    return spmd.reinterpret(share, "dp", src=V, dst=P)


def finalize_grads_@I@(params: Sequence[Tensor[R["dp"]]]) -> None:
    """Replicate weights have Partial gradients on "dp": sum them (DDP's all-reduce)."""
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        param.grad = spmd.all_reduce(grad, "dp", src=P, dst=R, op="avg")


def train_step_@I@(stack: TransformerStack@I@, head: LMHead@I@, x: Tensor[I["tp"], V["dp"]],
                  target: torch.Tensor, params: Sequence[Tensor[R["dp"]]]) -> Tensor[I["tp"], R["dp"]]:
    h = stack(x)
    share: Tensor[I["tp"], V["dp"]] = head(h, target) / target.numel()
    loss = global_loss_@I@(share)
    loss.backward()
    finalize_grads_@I@(params)
    return spmd.all_reduce(loss.detach(), "dp", src=P, dst=R)


@CROSS@

# ---- untyped bookkeeping -------------------------------------------------------------------


def lr_schedule_@I@(step: int, warmup: int = 100, total: int = 10000, peak: float = 3e-4) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def count_parameters_@I@(module: nn.Module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, param in module.named_parameters():
        prefix = name.split(".")[0]
        counts[prefix] = counts.get(prefix, 0) + param.numel()
    return counts


def shard_ranges_@I@(total: int, parts: int) -> list[tuple[int, int]]:
    base, extra = divmod(total, parts)
    ranges = []
    start = 0
    for rank in range(parts):
        size = base + (1 if rank < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def describe_layout_@I@(cfg: LayerConfig@I@) -> list[str]:
    lines = [cfg.describe()]
    for rank, (lo, hi) in enumerate(shard_ranges_@I@(cfg.ffn, cfg.tp_size)):
        lines.append(f"tp rank {rank}: ffn rows {lo}:{hi}")
    for rank, (lo, hi) in enumerate(shard_ranges_@I@(cfg.heads, cfg.tp_size)):
        lines.append(f"tp rank {rank}: heads {lo}:{hi}")
    return lines
'''

# Cross-module use: a block built from two earlier modules' pieces (typed across files).
CROSS_TEMPLATE = '''\
def mixed_block_@I@(x: Tensor[I["tp"], V["dp"]], w1: Tensor[S[0, "tp"], R["dp"]],
                   b1: Tensor[S[0, "tp"], R["dp"]], w2: Tensor[S[1, "tp"], R["dp"]]) -> Tensor[I["tp"], V["dp"]]:
    """An MLP assembled from modules @A@ and @B@."""
    h = column_parallel_@A@(copy_to_tp_@B@(x), w1, b1)
    return x + reduce_from_tp_@A@(row_parallel_@B@(activation_@A@(h), w2))'''

CROSS_NONE = '''\
def mixed_block_@I@(x: Tensor[I["tp"], V["dp"]], w1: Tensor[S[0, "tp"], R["dp"]],
                   b1: Tensor[S[0, "tp"], R["dp"]], w2: Tensor[S[1, "tp"], R["dp"]]) -> Tensor[I["tp"], V["dp"]]:
    """An MLP from this module's pieces (the first module has no earlier ones)."""
    h = column_parallel_@I@(copy_to_tp_@I@(x), w1, b1)
    return x + reduce_from_tp_@I@(row_parallel_@I@(activation_@I@(h), w2))'''

PLAIN_HELPERS = '''\
"""Identity stand-ins for the spmd API: the signatures of spmd's stubs, no SPMD types."""

from __future__ import annotations

from typing import Any, Literal, Sequence, TypeVar

import torch
import torch.distributed as dist

_T = TypeVar("_T", bound=torch.Tensor)


class R: ...
class I: ...
class V: ...
class P: ...


class S:
    def __init__(self, dim: int) -> None:
        self.dim = dim


_LocalType = type[R] | type[I] | type[V] | type[P] | S
_Axis = str | tuple[str, ...] | dist.ProcessGroup
_AxisNames = str | tuple[str, ...] | None


def all_reduce(x: torch.Tensor, axis: _Axis, *, src: _LocalType = P, dst: _LocalType,
               op: Literal["sum", "avg", "max", "min"] = "sum") -> torch.Tensor:
    return x


def all_gather(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType,
               sizes: Sequence[int] | None = None) -> torch.Tensor:
    return x


def reduce_scatter(x: torch.Tensor, axis: _Axis, *, src: _LocalType = P, dst: _LocalType,
                   sizes: Sequence[int] | None = None) -> torch.Tensor:
    return x


def all_to_all(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType) -> torch.Tensor:
    return x


def reinterpret(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType,
                expert_mode: bool = False) -> torch.Tensor:
    return x


def convert(x: torch.Tensor, axis: _Axis, *, src: _LocalType, dst: _LocalType,
            expert_mode: bool = False) -> torch.Tensor:
    return x


def einsum(equation: str, *operands: torch.Tensor, out_partial_axes: _AxisNames = None) -> torch.Tensor:
    return torch.einsum(equation, *operands)


def matmul(a: torch.Tensor, b: torch.Tensor, *, out_partial_axes: _AxisNames = None) -> torch.Tensor:
    return torch.matmul(a, b)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
           out_partial_axes: _AxisNames = None) -> torch.Tensor:
    return torch.nn.functional.linear(x, w, bias)


def reveal(x: _T) -> _T:
    return x


def declare(x: torch.Tensor, t: Any) -> torch.Tensor:
    return x
'''

_VARIANTS = [
    # (HIDDEN, HEADS, EPS, SWIGLU, SP)
    (1024, 16, 5, "False", "False"),
    (2048, 16, 6, "True", "False"),
    (4096, 32, 5, "True", "True"),
    (1536, 12, 6, "False", "True"),
    (3072, 24, 5, "True", "False"),
]


def module_source(i: int) -> str:
    hidden, heads, eps, swiglu, sp = _VARIANTS[i % len(_VARIANTS)]
    deps = sorted({j for j in (i - 1, i - 7) if j >= 0})
    if deps:
        a, b = deps[-1], deps[0]
        imports = "\n" + "\n".join(
            f"from {PACKAGE}.mod_{j:03d} import activation_{j}, column_parallel_{j}, "
            f"copy_to_tp_{j}, reduce_from_tp_{j}, row_parallel_{j}" for j in deps)
        cross = CROSS_TEMPLATE.replace("@A@", str(a)).replace("@B@", str(b))
    else:
        imports = ""
        cross = CROSS_NONE
    src = MODULE_TEMPLATE.replace("@IMPORTS@", imports).replace("@CROSS@", cross)
    for key, value in (("HIDDEN", hidden), ("HEADS", heads), ("EPS", eps), ("SWIGLU", swiglu),
                       ("SP", sp), ("I", i)):
        src = src.replace(f"@{key}@", str(value))
    return src


def _erase_types(src: str) -> str:
    """``Tensor[...]`` (brackets balanced) -> ``torch.Tensor``; spmd -> spmd_plain."""
    out = []
    pos = 0
    for m in re.finditer(r"\bTensor\[", src):
        if m.start() < pos:
            continue
        depth = 0
        j = m.end() - 1
        while True:
            ch = src[j]
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        out.append(src[pos:m.start()])
        out.append("torch.Tensor")
        pos = j + 1
    out.append(src[pos:])
    text = "".join(out)
    text = text.replace("import spmd\nfrom spmd import I, P, R, S, Tensor, V\n",
                        "import spmd_plain as spmd\nfrom spmd_plain import I, P, R, S, V\n")
    assert "Tensor[" not in text and "from spmd import" not in text
    return text


def plain_source(i: int) -> str:
    return _erase_types(module_source(i))


LINES_PER_MODULE = module_source(10).count("\n")


def modules_for(lines: int) -> int:
    return max(1, -(-lines // LINES_PER_MODULE))


def write_corpus(out: Path, n_modules: int) -> tuple[Path, Path, int]:
    """Write ``out/annotated/corpus`` and ``out/plain/corpus`` (+ ``spmd_plain.py``).

    Returns the two roots and the number of lines per variant."""
    roots = []
    total = 0
    for variant, make in (("annotated", module_source), ("plain", plain_source)):
        root = out / variant
        pkg = root / PACKAGE
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text("")
        total = 0
        for i in range(n_modules):
            text = make(i)
            total += text.count("\n")
            (pkg / f"mod_{i:03d}.py").write_text(text)
        if variant == "plain":
            (root / "spmd_plain.py").write_text(PLAIN_HELPERS)
        roots.append(root)
    return roots[0], roots[1], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--lines", type=int, default=20000)
    args = ap.parse_args()
    annotated, plain, total = write_corpus(args.out, modules_for(args.lines))
    print(f"{modules_for(args.lines)} modules, {total} lines per variant: {annotated} {plain}")


if __name__ == "__main__":
    main()
