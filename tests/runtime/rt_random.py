"""Random ops in the check mode (spmd-random): a random op whose result the rule types R or I on
an axis draws from a generator that must be in the same state on every rank of the axis (checks
run by test_random_world.py on gloo ranks).

The rng probe's mistakes, accepted before by both checkers with wrong numbers: hidden dropout on
an I activation drawn inside a Megatron-style RNG tracker's fork (a generator state per tp rank)
or after ``torch.manual_seed(base + rank)``; ``multinomial`` sampling of I logits with per-rank
seeds (tokens that differ across tp, typed I).  And what must pass: dropout on a V or S(i)
activation inside the fork (per-rank masks on purpose), equal seeds on R, eval mode and p=0 (no
draw), an axis of one rank.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

import spmd
from rt_checks import Ctx, named_checks
from spmd import I, P, R, S, Tensor, V
from spmd import _dist_utils
from spmd_mypy.engine.errors import SpmdTypeError

F64 = torch.float64


class Tracker:
    """Megatron's CudaRNGStatesTracker on the CPU default generator: ``fork()`` swaps in a
    state seeded per rank of the tensor-parallel axis, and back."""

    def __init__(self, seed: int) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.state = torch.get_rng_state()

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        orig = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(orig)


def _raises(fn: Callable[[], Any], *needles: str) -> str:
    try:
        fn()
    except SpmdTypeError as e:
        assert e.code == "spmd-random", e
        message = str(e)
    else:
        raise AssertionError("a random op on an R/I value with per-rank generator states passed")
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def _x(ctx: Ctx, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(3))


# ------------------------------------------------------------------------------------
# The probe's model: two tensor-parallel MLP blocks with Megatron-style dropout


class Block(nn.Module):
    w1: Tensor[S[0, "x"]]
    b1: Tensor[S[0, "x"]]
    w2: Tensor[S[1, "x"]]
    b2: Tensor[I["x"]]

    def __init__(self, ctx: Ctx, tracker: Tracker, hidden_forked: bool, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        n = ctx.world
        self.w1 = nn.Parameter(torch.randn(4 * n, 8, dtype=F64, generator=g).chunk(n, 0)[ctx.rank].clone())
        self.b1 = nn.Parameter(torch.randn(4 * n, dtype=F64, generator=g).chunk(n, 0)[ctx.rank].clone())
        self.w2 = nn.Parameter(torch.randn(8, 4 * n, dtype=F64, generator=g).chunk(n, 1)[ctx.rank].clone())
        self.b2 = nn.Parameter(torch.randn(8, dtype=F64, generator=g))
        self.tracker = tracker
        self.hidden_forked = hidden_forked

    def forward(self, x: Tensor[I["x"]]) -> Tensor[I["x"]]:
        x_r = spmd.reinterpret(x, "x", src=I, dst=R)
        h = F.gelu(F.linear(x_r, self.w1, self.b1))
        with self.tracker.fork():  # a sharded activation: per-rank masks, on purpose
            h = F.dropout(h, 0.3, self.training)
        part = spmd.reinterpret(F.linear(h, self.w2), "x", src=V, dst=P)
        out = spmd.all_reduce(part, "x", src=P, dst=I) + self.b2
        if self.hidden_forked:  # the mistake: a replicated activation, per-rank masks
            with self.tracker.fork():
                out = F.dropout(out, 0.3, self.training)
        else:  # hidden dropout on the shared default generator: the same mask on every rank
            out = F.dropout(out, 0.3, self.training)
        return x + out


def _mlp_step(ctx: Ctx, check: bool, hidden_forked: bool = False, default_seed: int = 1234,
              train: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(default_seed)                  # the default generator: shared on "x"
    tracker = Tracker(1234 + 2718 + ctx.rank)        # the tracker's: one per rank of "x"
    model = nn.Sequential(Block(ctx, tracker, hidden_forked, 1), Block(ctx, tracker, hidden_forked, 2))
    model.train(train)
    x, y = _x(ctx, 2, 3, 8), _x(ctx, 2, 3, 8) + 1
    block = spmd.typecheck() if check else contextlib.nullcontext()
    with block:
        if check:
            for m in model:
                spmd.declare_parameters(m)
            spmd.declare(x, Tensor[I["x"]])
            spmd.declare(y, Tensor[I["x"]])
        loss = F.mse_loss(model(x), y)
        loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def check_mlp_correct_passes_with_unchanged_numbers(ctx: Ctx, name: str) -> None:
    """Per-rank masks on the V activation inside the fork, the same mask on the I one: passes,
    and the loss and gradients are bitwise those of the plain run (the check draws nothing)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        for train in (True, False):
            loss0, grads0 = _mlp_step(ctx, check=False, train=train)
            with _counted() as calls:
                loss1, grads1 = _mlp_step(ctx, check=True, train=train)
            # one check per hidden dropout (I) in training, none on the V ones, none in eval
            assert calls[0] == (2 if train else 0), calls
            assert torch.equal(loss0, loss1), (loss0, loss1)
            for n in grads0:
                assert torch.equal(grads0[n], grads1[n]), n
            # b2 (I) has the same gradient on every rank: the hidden masks are shared
            g = _dist_utils.all_gather(grads1["0.b2"].reshape(1, -1), _group(ctx))
            assert all(torch.equal(g[k], g[0]) for k in range(ctx.world)), g


def _group(ctx: Ctx) -> Any:
    from spmd import _mesh
    return _mesh.resolve_axis("x")


def check_mlp_hidden_dropout_in_the_fork_raises(ctx: Ctx, name: str) -> None:
    """The probe's mistake 1: the hidden dropout on the I activation inside the tracker's fork
    (loss off by ~1, gradients by ~8 before, unreported)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        # the plain run: the b2 replicas' gradients differ (the silent mistake)
        _, grads = _mlp_step(ctx, check=False, hidden_forked=True)
        g = _dist_utils.all_gather(grads["0.b2"].reshape(1, -1), _group(ctx))
        assert not torch.equal(g[0], g[1]), "the mistake did not show in the numbers"
        _raises(lambda: _mlp_step(ctx, check=True, hidden_forked=True),
                'dropout on "x" (out: Tensor[I["x"]]) draws from the default CPU generator',
                f"whose state differs between the ranks of \"x\" (global ranks 0 and ",
                "each rank draws a different mask or sample",
                "a sum or all-reduce downstream silently mixes",
                "torch.manual_seed(seed), not seed + rank",
                'convert(out, "x", src=I, dst=S(i))', 'reinterpret(out, "x", src=I, dst=V)')
        # eval: no draw, no check
        _mlp_step(ctx, check=True, hidden_forked=True, train=False)


def check_mlp_default_seed_per_rank_raises(ctx: Ctx, name: str) -> None:
    """The probe's mistake 2: ``torch.manual_seed(base + rank)`` (the hidden dropout's mask
    differs per rank)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        _raises(lambda: _mlp_step(ctx, check=True, default_seed=1234 + ctx.rank),
                'dropout on "x" (out: Tensor[I["x"]])')


# ------------------------------------------------------------------------------------
# Each random op


def _ops(x_r: torch.Tensor, x_i: torch.Tensor) -> dict[str, Callable[[], Any]]:
    q = x_r.reshape(1, 3, 4)
    return {
        "dropout": lambda: F.dropout(x_i, 0.1),
        "nn.Dropout": lambda: nn.Dropout(0.1)(x_r),
        "dropout2d": lambda: F.dropout2d(x_r.reshape(1, 3, 2, 2), 0.1, True),
        "alpha_dropout": lambda: F.alpha_dropout(x_i, 0.1, True),
        "feature_alpha_dropout": lambda: F.feature_alpha_dropout(x_r.reshape(1, 3, 2, 2), 0.1, True),
        "bernoulli": lambda: torch.bernoulli(torch.sigmoid(x_r)),
        "bernoulli_": lambda: x_i.detach().clone().bernoulli_(0.5),
        "normal_": lambda: x_i.detach().clone().normal_(),
        "uniform_": lambda: x_r.detach().clone().uniform_(),
        "exponential_": lambda: x_r.detach().clone().exponential_(),
        "random_": lambda: x_r.detach().clone().random_(0, 10),
        "normal": lambda: torch.normal(x_i, 1.0),
        "poisson": lambda: torch.poisson(x_i.abs()),
        "multinomial": lambda: torch.multinomial(F.softmax(x_i, -1).reshape(-1, 4), 1),
        "rrelu": lambda: F.rrelu(x_i, training=True),
        "gumbel_softmax": lambda: F.gumbel_softmax(x_i, tau=1.0, hard=True),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5),
        # typed from their template (diffusion noise): checked as the other draws
        "randn_like": lambda: torch.randn_like(x_i),
        "rand_like": lambda: torch.rand_like(x_r),
        "randint_like": lambda: torch.randint_like(x_i, 10),
    }


def _declared(ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
    x_r = spmd.declare(_x(ctx, 3, 4), Tensor[R["x"]])
    x_i = spmd.declare(_x(ctx, 3, 4), Tensor[I["x"]])
    return x_r, x_i


def check_each_random_op_with_per_rank_seeds_raises(ctx: Ctx, name: str) -> None:
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        torch.manual_seed(100 + ctx.rank)
        x_r, x_i = _declared(ctx)
        for op, fn in _ops(x_r, x_i).items():
            message = _raises(fn, 'on "x" (')
            assert ("Tensor[R[\"x\"]]" in message) or ("Tensor[I[\"x\"]]" in message), (op, message)


def check_each_random_op_with_equal_seeds_passes(ctx: Ctx, name: str) -> None:
    """The same ops, the default generator seeded alike on every rank: each result is the same
    on every rank and keeps its type; the numbers are those of the plain run."""
    with spmd.set_mesh(ctx.mesh("1d")):
        plain: dict[str, Any] = {}
        torch.manual_seed(7)
        x_r, x_i = _x(ctx, 3, 4), _x(ctx, 3, 4)
        for op, fn in _ops(x_r, x_i).items():
            plain[op] = fn()
        with _counted() as calls, spmd.typecheck():
            torch.manual_seed(7)
            x_r, x_i = _declared(ctx)
            for op, fn in _ops(x_r, x_i).items():
                out = fn()
                assert torch.equal(out, plain[op]), op
                t = str(spmd.typeof(out))
                assert t in ('Tensor[R["x"]]', 'Tensor[I["x"]]'), (op, t)
                g = _dist_utils.all_gather(out.detach().reshape(1, -1).to(F64), _group(ctx))
                assert all(torch.equal(g[k], g[0]) for k in range(ctx.world)), op
            assert calls[0] == len(plain), calls  # each op checked once


def check_no_draw_no_check(ctx: Ctx, name: str) -> None:
    """Eval mode, p=0, F.alpha_dropout's and F.rrelu's default training=False, SDPA without
    dropout_p: nothing is drawn, so per-rank seeds are no error (and no collective runs)."""
    with _counted() as calls, spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        torch.manual_seed(100 + ctx.rank)
        x_r, x_i = _declared(ctx)
        q = x_r.reshape(2, 3, 2)
        drop = nn.Dropout(0.5)
        drop.eval()
        drop(x_r)
        rrelu = nn.RReLU()
        rrelu.eval()
        rrelu(x_i)
        F.dropout(x_i, 0.0)
        F.dropout(x_i, 0.5, training=False)
        F.dropout(x_i, 0.5, False)
        F.alpha_dropout(x_i, 0.5)
        F.feature_alpha_dropout(x_i.reshape(3, 2, 2), 0.5)
        F.rrelu(x_i)
        F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
        assert calls[0] == 0, calls
        torch.manual_seed(100)  # one draw, on equal states: one check, no error
        F.dropout(x_i, 0.5)
        assert calls[0] == 1, calls


@contextlib.contextmanager
def _counted() -> Iterator[list[int]]:
    """Counts the check's gathers (the check mode's all_gather, wrapped inside the block)."""
    from spmd import _checking

    calls = [0]
    real = _dist_utils.all_gather

    class Counting:
        @staticmethod
        def all_gather(x: torch.Tensor, group: Any) -> torch.Tensor:
            calls[0] += 1
            return real(x, group)

    _checking._dist_utils = Counting  # type: ignore[assignment]
    try:
        yield calls
    finally:
        _checking._dist_utils = _dist_utils


def check_varying_inside_the_fork_passes(ctx: Ctx, name: str) -> None:
    """Per-rank masks on purpose: dropout on a V or S(i) value inside the fork, or after a
    per-rank seed, draws without a check (no collective); so does the fix of the row-parallel
    input (convert R -> S(i) first, then the dropout on the shard)."""
    tracker = Tracker(50 + ctx.rank)
    with _counted() as calls, spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        torch.manual_seed(100 + ctx.rank)
        x_v = spmd.declare(_x(ctx, 3, 4) + ctx.rank, Tensor[V["x"]])
        x_s = spmd.declare(_x(ctx, 3, 4) + ctx.rank, Tensor[S[1, "x"]])
        x_r = spmd.declare(_x(ctx, 3, 4 * ctx.world), Tensor[R["x"]])
        with tracker.fork():
            assert str(spmd.typeof(F.dropout(x_v, 0.3))) == 'Tensor[V["x"]]'
            assert str(spmd.typeof(F.dropout(x_s, 0.3))) == 'Tensor[S[1, "x"]]'
            shard = spmd.convert(x_r, "x", src=R, dst=S(1))
            F.dropout(shard, 0.3)
            x_v.detach().clone().bernoulli_(0.5)
        torch.multinomial(F.softmax(x_v, -1), 1)
        assert calls[0] == 0, calls
        torch.manual_seed(100)  # R on the shared seed: checked (one gather), passes
        F.dropout(x_r, 0.3)
        assert calls[0] == 1, calls


def check_generator_argument(ctx: Ctx, name: str) -> None:
    """``generator=`` is the generator compared: one seeded per rank raises whatever the default
    generator's state; one seeded alike passes though the default one differs per rank."""
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        torch.manual_seed(100 + ctx.rank)
        x_r, x_i = _declared(ctx)
        probs = torch.sigmoid(x_r)
        g = torch.Generator().manual_seed(5)
        out = torch.bernoulli(probs, generator=g)
        assert str(spmd.typeof(out)) == 'Tensor[R["x"]]'
        torch.multinomial(F.softmax(x_i, -1), 1, generator=g)
        x_i.detach().clone().normal_(generator=g)
        g_rank = torch.Generator().manual_seed(5 + ctx.rank)
        _raises(lambda: torch.bernoulli(probs, generator=g_rank),
                "draws from its generator= argument (cpu), whose state differs")
        torch.manual_seed(5)
        _raises(lambda: torch.multinomial(F.softmax(x_i, -1), 1, generator=g_rank),
                'multinomial on "x" (')


def sample_next(logits: Tensor[I["x"]], temperature: float) -> Tensor[I["x"]]:
    """Generation: the next token sampled from tp-gathered logits (the probe's rng_data)."""
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1)


def check_sampling_with_per_rank_seeds_raises(ctx: Ctx, name: str) -> None:
    """The probe's mistake 3: tokens sampled from I logits with a per-rank seed differ across
    the axis while typed I (an early stop on one rank only is a hang)."""
    with spmd.set_mesh(ctx.mesh("1d")):
        logits = _x(ctx, 4, 16)
        torch.manual_seed(100 + ctx.rank)
        tokens = sample_next(logits, 1.0)
        g = _dist_utils.all_gather(tokens.reshape(1, -1), _group(ctx))
        assert not torch.equal(g[0], g[1]), "the tokens did not differ: the mistake is not shown"
        with spmd.typecheck():
            torch.manual_seed(100 + ctx.rank)
            spmd.declare(logits, Tensor[I["x"]])
            _raises(lambda: sample_next(logits, 1.0),
                    'multinomial on "x" (probs: Tensor[I["x"]])')
            torch.manual_seed(100)
            tokens = sample_next(logits, 1.0)
            assert str(spmd.typeof(tokens)) == 'Tensor[I["x"]]'


def check_axis_of_one_rank_unchecked(ctx: Ctx, name: str) -> None:
    """An axis of one rank (dp=1) is never compared: no collective, no error."""
    with _counted() as calls, spmd.set_mesh(ctx.mesh("1xN")), spmd.typecheck():
        torch.manual_seed(100 + ctx.rank)
        x = spmd.declare(_x(ctx, 3, 4), Tensor[R["one"], V["x"]])
        F.dropout(x, 0.3)
        x.detach().clone().bernoulli_(0.5)
        assert calls[0] == 0, calls
        y = spmd.declare(_x(ctx, 3, 4), Tensor[R["one"], I["x"]])
        _raises(lambda: F.dropout(y, 0.3), 'dropout on "x" (')  # "x" compared, "one" not
        assert calls[0] == 1, calls


def check_compiled_under_typecheck(ctx: Ctx, name: str) -> None:
    """A torch.compile'd function under the check mode (which runs it eagerly) is checked too."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x * 2, 0.3, True)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager")
    with spmd.set_mesh(ctx.mesh("1d")), spmd.typecheck():
        x_r, _ = _declared(ctx)
        torch.manual_seed(100 + ctx.rank)
        _raises(lambda: compiled(x_r), 'dropout on "x" (')
        torch.manual_seed(100)
        out = compiled(x_r)
        assert str(spmd.typeof(out)) == 'Tensor[R["x"]]'
    torch._dynamo.reset()


def check_activation_checkpointing_recomputes_alike(ctx: Ctx, name: str) -> None:
    """torch.utils.checkpoint restores the generator's state for the recompute: the dropout on
    an I value is checked in the forward and again in the backward's recompute, and passes;
    the gradients are those of the plain run."""
    from torch.utils.checkpoint import checkpoint

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.tanh(x * w), 0.3)

    grads = []
    with spmd.set_mesh(ctx.mesh("1d")):
        for check in (False, True):
            torch.manual_seed(11)
            x, w = _x(ctx, 3, 4), _x(ctx, 3, 4).requires_grad_(True)
            with _counted() as calls, (spmd.typecheck() if check else contextlib.nullcontext()):
                if check:
                    spmd.declare(x, Tensor[I["x"]])
                    spmd.declare(w, Tensor[I["x"]])
                out = checkpoint(block, x, w, use_reentrant=False)
                F.mse_loss(out, torch.zeros_like(out)).backward()
            grads.append(w.grad)
            assert calls[0] == (2 if check else 0), calls
    assert torch.equal(grads[0], grads[1])


def check_two_axes_each_compared(ctx: Ctx, name: str) -> None:
    """On a 2 x 2 mesh with the default seed per dp rank and shared on tp: dropout on a value
    sharded on dp and I on tp passes (only tp is compared); typed R on dp too, it raises naming
    "dp"."""
    mesh = ctx.mesh("2x2")
    dp_rank = mesh.get_local_rank("dp")
    with spmd.set_mesh(mesh), spmd.typecheck():
        torch.manual_seed(100 + dp_rank)
        x = spmd.declare(_x(ctx, 4, 4), Tensor[S[0, "dp"], I["tp"]])
        F.dropout(x, 0.3)
        y = spmd.declare(_x(ctx, 4, 4), Tensor[R["dp"], I["tp"]])
        _raises(lambda: F.dropout(y, 0.3), 'dropout on "dp" (', "Replicate says")


def suite(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    checks: list[Callable[..., None]] = [
        check_mlp_correct_passes_with_unchanged_numbers, check_mlp_hidden_dropout_in_the_fork_raises,
        check_mlp_default_seed_per_rank_raises, check_each_random_op_with_per_rank_seeds_raises,
        check_each_random_op_with_equal_seeds_passes, check_no_draw_no_check,
        check_varying_inside_the_fork_passes, check_generator_argument,
        check_sampling_with_per_rank_seeds_raises, check_axis_of_one_rank_unchecked,
        check_compiled_under_typecheck, check_activation_checkpointing_recomputes_alike]
    if world == 4:
        checks = [check_two_axes_each_compared, check_mlp_correct_passes_with_unchanged_numbers,
                  check_mlp_hidden_dropout_in_the_fork_raises]
    return named_checks(world, "random", checks)
