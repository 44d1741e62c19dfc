"""The fuzzer's programs as data: typed inputs, statements, an ending; rendered to source.

A program is one function over typed inputs on the ("dp", "tp") mesh (2 x 2)::

    def prog(a0: Tensor[P["tp"], V["dp"]], a1: Tensor[R["tp"], R["dp"]]) -> Tensor[R["tp"], V["dp"]]:
        t0 = torch.add(a0, a1)                                  # an op from OPS
        t1 = spmd.all_reduce(t0, "tp", src=P, dst=R)            # a collective/conversion
        return t1                                               # ending "return" (declared type)

or it ends with ``t2.backward()`` (ending "backward", the function returns None).

The same statement is used three ways: rendered to source (the mypy plugin checks it,
the runtime runs it on every rank, under check mode or not), and evaluated on global
values by the reference (``soundness.fuzz_ref``): an op's template is evaluated with
``{0}, {1}, ...`` bound to the operands, so the op has one spelling for all three.

Types are dicts ``{axis: form}`` with forms ``R I V P S0 S1``; an axis not in the dict is
unknown (untyped).  One-axis programs type only "tp".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

AXES = ("dp", "tp")  # mesh order; rank = dp * 2 + tp
SIZES = {"dp": 2, "tp": 2}
FORMS = ("R", "I", "V", "P", "S0", "S1")
DUAL = {"R": "P", "P": "R", "I": "I", "V": "V", "S0": "S0", "S1": "S1"}

Type = dict[str, str]


@dataclass(frozen=True)
class OpSpec:
    name: str
    template: str  # Python expression over {0}, {1}, {2}
    arity: int
    klass: str  # linear / affine / multilinear / nonlinear / reduction / scan / view / nograd


OPS: dict[str, OpSpec] = {o.name: o for o in [
    # unary
    OpSpec("neg", "torch.neg({0})", 1, "linear"),
    OpSpec("scale", "{0} * 2", 1, "linear"),
    OpSpec("half", "{0} / 2", 1, "linear"),
    OpSpec("add1", "{0} + 1.0", 1, "affine"),
    OpSpec("rsub1", "1 - {0}", 1, "affine"),
    OpSpec("relu", "torch.relu({0})", 1, "nonlinear"),
    OpSpec("tanh", "torch.tanh({0})", 1, "nonlinear"),
    OpSpec("square", "{0} ** 2", 1, "nonlinear"),
    OpSpec("softmax", "F.softmax({0}, dim=-1)", 1, "nonlinear"),
    OpSpec("sum0", "{0}.sum(0)", 1, "reduction"),
    OpSpec("sum_last", "{0}.sum(-1)", 1, "reduction"),
    OpSpec("sum_all", "{0}.sum()", 1, "reduction"),
    OpSpec("mean0", "{0}.mean(0)", 1, "reduction"),
    OpSpec("amax", "{0}.amax()", 1, "reduction"),
    OpSpec("transpose", "{0}.transpose(0, 1)", 1, "view"),
    OpSpec("flatten", "{0}.reshape(-1)", 1, "view"),
    OpSpec("row0", "{0}[0]", 1, "view"),
    OpSpec("detach", "{0}.detach()", 1, "nograd"),
    # (session 51) more of a training step's ops: activations, reductions along the last
    # dim, scans, normalisations along dim 0, views that move or reorder a dim
    OpSpec("exp", "torch.exp({0})", 1, "nonlinear"),
    OpSpec("gelu", "F.gelu({0})", 1, "nonlinear"),
    OpSpec("abs", "{0}.abs()", 1, "nonlinear"),
    OpSpec("clone", "{0}.clone()", 1, "linear"),
    OpSpec("mean_last", "{0}.mean(-1)", 1, "reduction"),
    OpSpec("sum_keep", "{0}.sum(-1, keepdim=True)", 1, "reduction"),
    OpSpec("amax0", "{0}.amax(0)", 1, "reduction"),
    OpSpec("logsumexp", "torch.logsumexp({0}, dim=-1)", 1, "reduction"),
    OpSpec("cumsum0", "torch.cumsum({0}, dim=0)", 1, "scan"),
    OpSpec("cumsum_last", "{0}.cumsum(-1)", 1, "scan"),
    OpSpec("softmax0", "F.softmax({0}, dim=0)", 1, "nonlinear"),
    OpSpec("unsqueeze0", "{0}.unsqueeze(0)", 1, "view"),
    OpSpec("t", "{0}.t()", 1, "view"),
    OpSpec("chunk0", "{0}.chunk(2)[0]", 1, "view"),
    OpSpec("cols", "{0}[:, :2]", 1, "view"),
    OpSpec("flip0", "torch.flip({0}, [0])", 1, "view"),
    OpSpec("roll0", "torch.roll({0}, 1, 0)", 1, "view"),
    # (session 53) a transformer block's other ops: gates and norms over the last dim,
    # reductions that keep a dim or return values and indices, views that pick, permute,
    # repeat or expand, and ops that read positions (tril, index_select)
    OpSpec("sigmoid", "torch.sigmoid({0})", 1, "nonlinear"),
    OpSpec("silu", "F.silu({0})", 1, "nonlinear"),
    OpSpec("log_softmax", "F.log_softmax({0}, dim=-1)", 1, "nonlinear"),
    OpSpec("layer_norm", "F.layer_norm({0}, {0}.shape[-1:])", 1, "nonlinear"),
    OpSpec("rms_norm", "{0} * torch.rsqrt({0}.pow(2).mean(-1, keepdim=True) + 1e-6)", 1,
           "nonlinear"),
    OpSpec("clamp", "{0}.clamp(min=0.0)", 1, "nonlinear"),
    OpSpec("pow3", "{0}.pow(3)", 1, "nonlinear"),
    OpSpec("masked_fill", "{0}.masked_fill({0} < 0, 0.0)", 1, "nonlinear"),
    OpSpec("var_last", "{0}.var(-1)", 1, "reduction"),
    OpSpec("norm", "{0}.norm()", 1, "reduction"),
    OpSpec("max_last", "{0}.max(dim=-1).values", 1, "reduction"),
    OpSpec("min0", "{0}.min(0)[0]", 1, "reduction"),
    OpSpec("mean_all", "{0}.mean()", 1, "reduction"),
    OpSpec("permute", "{0}.permute(1, 0)", 1, "view"),
    OpSpec("narrow_last", "{0}.narrow(-1, 1, 2)", 1, "view"),
    OpSpec("repeat0", "{0}.repeat(2, 1)", 1, "view"),
    OpSpec("expand", "{0}.unsqueeze(0).expand(2, -1, -1)", 1, "view"),
    OpSpec("flip_last", "{0}.flip(-1)", 1, "view"),
    OpSpec("tril", "torch.tril({0})", 1, "view"),
    OpSpec("index_select0", "{0}.index_select(0, torch.tensor([1, 0]))", 1, "view"),
    # binary
    OpSpec("add", "torch.add({0}, {1})", 2, "linear"),
    OpSpec("sub", "{0} - {1}", 2, "linear"),
    OpSpec("mul", "{0} * {1}", 2, "multilinear"),
    OpSpec("maximum", "torch.maximum({0}, {1})", 2, "nonlinear"),
    OpSpec("matmul", "{0} @ {1}", 2, "multilinear"),
    OpSpec("einsum", 'torch.einsum("ij,jk->ik", {0}, {1})', 2, "multilinear"),
    OpSpec("cat0", "torch.cat([{0}, {1}], dim=0)", 2, "view"),
    OpSpec("stack", "torch.stack([{0}, {1}])", 2, "view"),
    OpSpec("div", "{0} / {1}", 2, "nonlinear"),
    OpSpec("linear", "F.linear({0}, {1})", 2, "multilinear"),
    # the target detached: the static checker reads a value-target loss's target as data
    # without a gradient (engine ops.VALUE_TARGET_OPS), the check mode its requires_grad
    # (seed 5104 of session 51: an I input against an R target that carries a gradient)
    OpSpec("mse", "F.mse_loss({0}, {1}.detach())", 2, "reduction"),
    OpSpec("cat1", "torch.cat([{0}, {1}], dim=1)", 2, "view"),
    # in place, on a copy (an in-place op may not change its target's type)
    OpSpec("add_", "{0}.clone().add_({1})", 2, "linear"),
    OpSpec("mul_", "{0}.clone().mul_({1})", 2, "multilinear"),
    # (session 53) contractions a backward or an attention writes, and more binary ops
    OpSpec("minimum", "torch.minimum({0}, {1})", 2, "nonlinear"),
    OpSpec("matmul_t", "{0} @ {1}.t()", 2, "multilinear"),
    OpSpec("einsum_wgrad", 'torch.einsum("ij,ik->jk", {0}, {1})', 2, "multilinear"),
    OpSpec("einsum_rowdot", 'torch.einsum("ij,ij->i", {0}, {1})', 2, "multilinear"),
    OpSpec("bmm", "torch.bmm({0}.unsqueeze(0), {1}.unsqueeze(0))", 2, "multilinear"),
    OpSpec("mul_colsum", "{0} * {1}.sum(0)", 2, "multilinear"),
    OpSpec("lerp", "torch.lerp({0}, {1}, 0.25)", 2, "linear"),
    OpSpec("cat_last", "torch.cat([{0}, {1}], dim=-1)", 2, "view"),
    OpSpec("sub_", "{0}.clone().sub_({1})", 2, "linear"),
    OpSpec("soft_ce", "F.cross_entropy({0}, {1}.detach().softmax(-1))", 2, "reduction"),
    # ternary
    OpSpec("where", "torch.where({0} > 0, {1}, {2})", 3, "nonlinear"),
    OpSpec("addmm", "torch.addmm({2}, {0}, {1})", 3, "multilinear"),
    OpSpec("lerp_w", "torch.lerp({0}, {1}, {2})", 3, "nonlinear"),
]}

# collective ops and the src/dst forms the generator draws from (valid and invalid pairs)
COLLECTIVES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "all_reduce": (("P", "V", "R"), ("R", "I", "V")),
    "all_gather": (("V", "S0", "S1", "P"), ("R", "I")),
    "reduce_scatter": (("P", "R"), ("V", "S0", "S1")),
    "all_to_all": (("V", "S0", "S1"), ("V", "S0", "S1")),
    "reinterpret": (("R", "I", "V", "P"), ("R", "I", "V", "P")),
    "convert": (("R", "I", "V", "S0", "S1", "P"), ("R", "I", "V", "S0", "S1", "P")),
}


def collective_extras(name: str, src: str) -> tuple[str, ...]:
    """What a collective of :data:`COLLECTIVES` may take besides its axis, src and dst (a
    Stmt's ``extra``): op="avg" for a sum, op="max" for a per-rank value, expert_mode."""
    if name == "all_reduce":
        return ("avg",) if src == "P" else ("max",) if src in ("V", "R") else ()
    return ("expert",) if name == "reinterpret" else ()


@dataclass(frozen=True)
class Stmt:
    target: str
    kind: str  # "op" | "coll"
    name: str  # OPS key or collective name
    args: tuple[str, ...]
    axis: str = ""  # collectives
    src: str = ""
    dst: str = ""
    extra: str = ""  # collectives: "avg" | "max" | "expert" | ""

    def render(self) -> str:
        if self.kind == "op":
            return f"{self.target} = {OPS[self.name].template.format(*self.args)}"
        kw = f"src={_form_src(self.src)}, dst={_form_src(self.dst)}"
        if self.extra in ("avg", "max"):
            kw += f', op="{self.extra}"'
        elif self.extra == "expert":
            kw += ", expert_mode=True"
        x = self.args[0] + (".detach()" if self.extra == "max" else "")
        return f'{self.target} = spmd.{self.name}({x}, "{self.axis}", {kw})'

    def all_to_all_dims(self) -> tuple[int, int]:
        """An all_to_all's (split, concat) dims, as runtime/spmd/_collectives.py documents:
        split on the dst's dim, concatenate on the src's, V meaning dim 0."""
        return (int(self.dst[1:]) if self.dst.startswith("S") else 0,
                int(self.src[1:]) if self.src.startswith("S") else 0)


def _form_src(form: str) -> str:
    return f"S({form[1:]})" if form.startswith("S") else form


def render_type(t: Type | None) -> str:
    if t is None:
        return "torch.Tensor"
    entries = []
    for axis in sorted(t, key=lambda a: AXES.index(a), reverse=True):  # "tp" first
        form = t[axis]
        if form.startswith("S"):
            entries.append(f'S[{form[1:]}, "{axis}"]')
        else:
            entries.append(f'{form}["{axis}"]')
    return "Tensor[" + ", ".join(entries) + "]" if entries else "torch.Tensor"


def dual(t: Type) -> Type:
    """S(d) is its own dual for every d: a type the check mode infers may carry a dim the
    generator's FORMS do not (stack of an S1 is S2)."""
    return {a: f if f.startswith("S") else DUAL[f] for a, f in t.items()}


@dataclass
class Program:
    """``inputs``: (name, type, global shape); ``ending``: ("return", var) or ("backward", var);
    ``out_type``: the declared return type (ending "return")."""

    axes: tuple[str, ...]
    inputs: list[tuple[str, Type, tuple[int, ...]]]
    stmts: list[Stmt] = field(default_factory=list)
    ending: tuple[str, str] = ("return", "")
    out_type: Type | None = None

    # -- rendering -------------------------------------------------------------------
    def render(self, name: str = "prog", returns: bool = True) -> str:
        """The function's source; statement ``i`` is on line ``2 + i`` of it (1-based)."""
        params = ", ".join(f"{n}: {render_type(t)}" for n, t, _ in self.inputs)
        if self.ending[0] == "return" and returns:
            ret = render_type(self.out_type)
        else:
            ret = "None"
        lines = [f"def {name}({params}) -> {ret}:"]
        lines += [f"    {s.render()}" for s in self.stmts]
        if self.ending[0] == "return":
            lines.append(f"    return {self.ending[1]}")
        else:
            lines.append(f"    {self.ending[1]}.backward()")
        return "\n".join(lines) + "\n"

    def ending_line(self) -> int:
        return 2 + len(self.stmts)

    def variables(self) -> list[str]:
        return [n for n, _, _ in self.inputs] + [s.target for s in self.stmts]

    # -- serialization (regression files) --------------------------------------------
    def to_json(self) -> str:
        return json.dumps({
            "axes": list(self.axes),
            "inputs": [[n, t, list(s)] for n, t, s in self.inputs],
            "stmts": [[s.target, s.kind, s.name, list(s.args), s.axis, s.src, s.dst, s.extra]
                      for s in self.stmts],
            "ending": list(self.ending),
            "out_type": self.out_type,
        }, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Program:
        d: dict[str, Any] = json.loads(text)
        return Program(
            axes=tuple(d["axes"]),
            inputs=[(n, dict(t), tuple(s)) for n, t, s in d["inputs"]],
            stmts=[Stmt(s[0], s[1], s[2], tuple(s[3]), s[4], s[5], s[6], s[7]) for s in d["stmts"]],
            ending=(d["ending"][0], d["ending"][1]),
            out_type=d["out_type"],
        )


PRELUDE = (
    "import torch\n"
    "import torch.nn.functional as F\n"
    "import spmd\n"
    "from spmd import Tensor, R, I, V, P, S\n"
)
PRELUDE_LINES = PRELUDE.count("\n")
