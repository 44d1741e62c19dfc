"""A vocab-parallel embedding and a vocab-parallel cross entropy (Megatron's
``VocabParallelEmbedding`` and ``vocab_parallel_cross_entropy``).

Both tables are sharded on the vocabulary (``S(0)`` on "tp": rank r holds the
rows ``[r * VOCAB/tp, (r+1) * VOCAB/tp)``).

Embedding: ids out of this rank's range are looked up as row 0 and zeroed, so
each rank holds its part of the sum; ``reinterpret(V,P)`` says so and
``all_reduce(P,I)`` sums (Megatron's ``reduce_from_tensor_model_parallel_region``).

Cross entropy on logits Varying on "tp" (this rank's vocab columns)::

    max      all_reduce(op="max") under no_grad      V -> R  (no gradient, only a shift)
    sum exp  reinterpret(V,P), all_reduce(P,I)       V -> I
    target   gather where the target is local, zero elsewhere, reinterpret(V,P), all_reduce(P,I)
    loss     log(sum exp) - target logit             I

The backward of ``all_reduce(P,I)`` is ``reinterpret(I,R)`` and that of
``reinterpret(V,P)`` is ``reinterpret(R,V)``: no comms, and each rank gets the
gradient of its own logits (softmax minus one-hot on its columns), as Megatron's
hand-written backward does.

Token ids are typed R on "tp" where they enter the model (every rank of "tp" looks up the same
tokens): a local argmax of this rank's vocab shard fed back as the next token is V there, and
is caught at that annotation only (``greedy_tokens`` below is the idiom that is R: the max
over the ranks, then the smallest global index that reaches it).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import spmd
from spmd import I, P, R, S, Tensor, V

VOCAB, HIDDEN, BATCH, SEQ = 16, 8, 2, 4

DATA_PARALLEL = False

SHARDING: dict[str, dict[str, int]] = {
    "embedding.weight": {"tp": 0}, "w_h": {}, "b_h": {}, "out_w": {"tp": 0},
}


class VocabParallelEmbedding(nn.Module):
    weight: Tensor[S[0, "tp"]]  # [VOCAB/tp, HIDDEN]

    def __init__(self, weight: Tensor[S[0, "tp"]], vocab_start: int, vocab_end: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.vocab_start = vocab_start
        self.vocab_end = vocab_end

    def forward(self, ids: Tensor[R["tp"]]) -> Tensor[I["tp"]]:
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local_ids = torch.where(outside, 0, ids - self.vocab_start)
        emb = F.embedding(local_ids, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        parts = spmd.reinterpret(emb, "tp", src=V, dst=P)  # the embedding is the sum of the parts
        return spmd.all_reduce(parts, "tp", src=P, dst=I)


def vocab_parallel_cross_entropy(logits: Tensor[V["tp"]], target: torch.Tensor,
                                 vocab_start: int, vocab_end: int) -> Tensor[I["tp"]]:
    """The per-token cross entropy of logits ``[tokens, VOCAB/tp]`` sharded on the vocab."""
    with torch.no_grad():
        logits_max = spmd.all_reduce(torch.amax(logits, dim=-1), "tp", src=V, dst=R, op="max")
    shifted = logits - logits_max.unsqueeze(-1)  # the shift cancels: no gradient needed

    local_sum_exp = spmd.reinterpret(shifted.exp().sum(dim=-1), "tp", src=V, dst=P)
    sum_exp = spmd.all_reduce(local_sum_exp, "tp", src=P, dst=I)

    outside = (target < vocab_start) | (target >= vocab_end)
    local_target = torch.where(outside, 0, target - vocab_start)
    picked = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    local_target_logit = spmd.reinterpret(picked, "tp", src=V, dst=P)  # one rank holds it
    target_logit = spmd.all_reduce(local_target_logit, "tp", src=P, dst=I)
    return torch.log(sum_exp) - target_logit


class VocabParallelLM(nn.Module):
    """embedding -> tanh(linear) -> output projection on the sharded vocab -> cross entropy."""

    w_h: Tensor[I["tp"]]  # [HIDDEN, HIDDEN], whole on every rank
    b_h: Tensor[I["tp"]]
    out_w: Tensor[S[0, "tp"]]  # [VOCAB/tp, HIDDEN], untied from the embedding

    def __init__(self, embedding: VocabParallelEmbedding, w_h: Tensor[I["tp"]],
                 b_h: Tensor[I["tp"]], out_w: Tensor[S[0, "tp"]]) -> None:
        super().__init__()
        self.embedding = embedding
        self.w_h = nn.Parameter(w_h)
        self.b_h = nn.Parameter(b_h)
        self.out_w = nn.Parameter(out_w)

    def forward(self, ids: Tensor[R["tp"]], target: torch.Tensor) -> Tensor[I["tp"]]:
        emb: Tensor[I["tp"]] = self.embedding(ids)
        h = torch.tanh(F.linear(emb, self.w_h, self.b_h))
        logits = F.linear(spmd.reinterpret(h, "tp", src=I, dst=R), self.out_w)
        per_token = vocab_parallel_cross_entropy(
            logits.flatten(0, 1), target.flatten(), self.embedding.vocab_start,
            self.embedding.vocab_end)
        return per_token.mean()


def train_step(model: VocabParallelLM, ids: Tensor[R["tp"]], target: torch.Tensor) -> torch.Tensor:
    loss: Tensor[I["tp"]] = model(ids, target)
    loss.backward()
    return loss.detach()


@torch.no_grad()
def greedy_tokens(logits: Tensor[V["tp"]], vocab_start: int) -> Tensor[R["tp"]]:
    """The argmax over the whole vocab of logits ``[tokens, VOCAB/tp]`` sharded on it: the max
    over the ranks, then the smallest global index where a rank's max reaches it (argmax's
    choice on ties).  ``logits.argmax(-1)`` alone is an index into this rank's shard (V);
    ``spmd.all_gather(logits, "tp", src=S(-1), dst=R).argmax(-1)`` is the other idiom (it
    moves the whole logits).  Sampling draws from the gathered logits with a generator seeded
    the same on every rank of "tp"."""
    local_max, local_idx = logits.max(dim=-1)
    global_max = spmd.all_reduce(local_max, "tp", src=V, dst=R, op="max")
    candidate = torch.where(local_max == global_max, local_idx + vocab_start, VOCAB)
    return spmd.all_reduce(candidate, "tp", src=V, dst=R, op="min")


# ---- construction, and the single-process reference ---------------------------------------


def full_weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    return {
        "embedding.weight": torch.randn(VOCAB, HIDDEN, generator=g, dtype=f64),
        "w_h": torch.randn(HIDDEN, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5,
        "b_h": 0.1 * torch.randn(HIDDEN, generator=g, dtype=f64),
        "out_w": torch.randn(VOCAB, HIDDEN, generator=g, dtype=f64) / HIDDEN**0.5,
    }


def make_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "ids": torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),
        "target": torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),
    }


def build(weights: dict[str, torch.Tensor], mesh: DeviceMesh) -> VocabParallelLM:
    tp_rank, tp_size = mesh.get_local_rank("tp"), mesh["tp"].size()
    per_rank = VOCAB // tp_size
    emb_w: Tensor[I["tp"]] = weights["embedding.weight"]
    w_h: Tensor[I["tp"]] = weights["w_h"]
    b_h: Tensor[I["tp"]] = weights["b_h"]
    out_w: Tensor[I["tp"]] = weights["out_w"]
    embedding = VocabParallelEmbedding(
        spmd.convert(emb_w, "tp", src=I, dst=S(0)).clone(),
        tp_rank * per_rank, (tp_rank + 1) * per_rank)
    return VocabParallelLM(
        embedding, w_h.clone(), b_h.clone(),
        spmd.convert(out_w, "tp", src=I, dst=S(0)).clone())


def step(model: VocabParallelLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return train_step(model, batch["ids"], batch["target"])


def reference(w: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    h = torch.tanh(F.linear(F.embedding(batch["ids"], w["embedding.weight"]), w["w_h"], w["b_h"]))
    logits = F.linear(h, w["out_w"])
    return F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten())
