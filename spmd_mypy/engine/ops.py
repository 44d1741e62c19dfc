"""Non-collective ops in local SPMD: the classification and the typing rule.

No comms ever happen in these ops, so per mesh axis the rule forbids every
combination whose backward would need comms::

    op(R..) -> R      op(I..) -> I      op(V..) -> V      op(R, V..) -> V
    I mixed with R, V or P: error
    P with V: error
    linear op:        all operands P -> P;  P with R or a scalar: error (affine), except
                      a scalar known to be 0 (p + 0, where(mask, p, 0.0))
    multilinear op:   exactly one P factor, the others R or scalars -> P
                      two P factors: error   (+[a] * +[b] != +[a * b])
    any other op:     P is an error (non-linear of a pending sum)

Why two Partial factors fail, on two ranks holding ``+[1]`` each::

    +[1]   *  +[1]    =>   +[1]     denotes 1 + 1 = 2,  but (1+1) * (1+1) = 4
    +[1]      +[1]         +[1]

Each operand of an op has a *role*: a ``SUMMAND`` enters the result
additively (``a + b``, ``cat``, a bias), a ``FACTOR`` multiplicatively
(``a * b``, ``a @ b``, a numerator), a ``NONLINEAR`` operand any other way (a
denominator, an exponent, a ``where`` condition).  An op the table does not
know is non-linear in every operand: the safe default.

Operands that cannot carry a gradient (under ``no_grad``, ``.detach()``, a
custom Function's forward) relax the I rule: an I operand of that kind mixes
with R or V as if it were R; R operands of that kind beside grad-carrying I
operands only act as I (``where(c_r, a_i, b_i)``, ``mse_loss(pred_i, target_r)``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from .contractions import (Contraction, contracted_layout, diagonal_block, equation_at, partial_sum,
                           summed_at_ranks)
from .errors import SpmdError, merge_axis_errors
from .einops_rule import Pattern, pattern_layout
from .views import MOVES, DimMove, SamePrefix, moved_dim, squeezed_dim
from .types import (
    INVARIANT, LIST_ITEM, RANKS, REPLICATE, SAME_VALUES, VARYING, Kind, LocalType, SpmdType,
    axis_words, bare, each_item,
    format_axes, format_spec, format_type, from_ranks, from_ranks_signed, receiver, shard_dims_differ,
)


class OpClass(enum.Enum):
    LINEAR = "linear"
    MULTILINEAR = "multilinear"
    NONLINEAR = "non-linear"


class Role(enum.Enum):
    SUMMAND = "summand"
    FACTOR = "factor"
    NONLINEAR = "non-linear"
    # An index, mask-free selector or id tensor (``x[idx]``, ``index_select``, embedding ids):
    # not differentiated, so its R or I type never matters; a Varying index makes the
    # selection differ per rank, so it counts as a Varying operand.
    INDEX = "index"
    # The destination of ``copy_``: overwritten, so only check_inplace looks at it.
    OVERWRITTEN = "overwritten"
    # A tensor that lends only its shape, dtype or device (``x.type_as(y)``,
    # ``x.view_as(y)``, ``x.expand_as(y)``, ``x.to(y)``): none of its values reach the
    # result and no gradient flows to it, so its type does not take part in the rule.
    TEMPLATE = "template"


# A value named, not computed: ``mask``, ``batch.target``, ``masks[i]`` (no operator, no call).
_NAMED = re.compile(r"[A-Za-z_][\w.]*(\[[\w.\-, :]*\])*")


@dataclass(frozen=True)
class OpSpec:
    """How an op treats its operands.

    ``roles`` gives the role of the operand at each position (by the adapter's
    operand order); positions past its end take ``default_role``.
    ``keeps_shard_dims``: an elementwise op keeps S(i) when every Varying
    operand agrees on i; every other op forgets the dim (still V), unless the call
    states where it goes: a reduction's dims, a view's or join's (:mod:`.views`), a
    contraction's labels (:mod:`.contractions`).
    """

    name: str
    op_class: OpClass
    roles: tuple[Role, ...] = ()
    keeps_shard_dims: bool = False
    # False for an op the table does not list (classify's default: checked as non-linear)
    known: bool = True
    # the role of the operands past ``roles`` where it is not the class's default
    rest: Role | None = None
    # a loss's reduction (call_spec; REDUCED_LOSSES): the name its pending rule reads
    # (LOSS_MEANS, LOSS_SUMS, CLASS_LOSSES_NONE), the spec's own name kept for messages
    reduced_as: str = ""

    @property
    def default_role(self) -> Role:
        if self.rest is not None:
            return self.rest
        return {
            OpClass.LINEAR: Role.SUMMAND,
            OpClass.MULTILINEAR: Role.FACTOR,
            OpClass.NONLINEAR: Role.NONLINEAR,
        }[self.op_class]

    def role(self, position: int) -> Role:
        return self.roles[position] if position < len(self.roles) else self.default_role


@dataclass(slots=True, unsafe_hash=True)
class Operand:
    """One operand as the rule sees it.

    ``type`` is ``None`` for a Python scalar; an untyped tensor is ``SpmdType()``
    (unknown on every axis).  ``text`` is the operand's source text for messages.

    A value: never changed once made (``dataclasses.replace`` for a changed copy).  Not
    ``frozen``: the static checker makes one per operand of every call it types, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__`` (3x the cost).
    """

    type: SpmdType | None
    text: str = "x"
    can_grad: bool = True
    role: Role | None = None  # overrides the spec's role for this position
    # The local shape, when the adapter knows it (the runtime check mode; the static
    # checker sees no shapes): it lets the S(i) layout rule check the sizes on dim i.
    shape: tuple[int, ...] | None = None
    # A Python scalar known to be 0 (a literal 0 / 0.0 in the source, or the value at
    # runtime): as a summand it adds nothing, so a Partial may take it: ``p + 0``,
    # ``torch.where(mask, p, 0.0)``, ``p.masked_fill(mask, 0)``, ``p[mask] = 0.0`` (each
    # rank's zeros sum to zero).
    zero: bool = False
    # A leaf by what it is, which may hold no gradient (a frozen weight, a buffer, a count):
    # statically a module's (an object's) attribute, in the check mode a tensor without a
    # grad_fn (or an nn.Parameter).  A computed activation never is: detaching it would cut
    # the gradient of everything it was made from, so a fix offers .detach() for a leaf only.
    leaf: bool = False
    # A rank-derived slice (rank_index_operand): the dim of the operand it cuts
    # (``w[:, r * k:(r + 1) * k]``: 1), where the adapter reads it
    cut: int | None = None
    # A local name's value as its one binding before the op writes it (``lse`` of ``lse =
    # torch.logsumexp(logits, dim=-1)``), where the adapter reads it: the invariant-mix rule's
    # fix of a V statistic reads the reduction there (static checker only; "" else)
    made: str = ""
    # ``made`` is the all_reduce the function ``made_in`` returns (``img = project(f, w)``,
    # ``project`` ending ``return spmd.all_reduce(..., dst=R)``): its dst=I fix is written
    # there, with the function's return type (static checker only; "" else)
    made_in: str = ""
    # Where the op's result goes, where the adapter reads it (static checker only, for a
    # fix): ``reduced``, the text of the all_reduce call whose argument the op is
    # (``all_reduce(partial + b, ...)``); ``meets``, (axis, what) for each axis on which the
    # op's result meets an Invariant value (the other side of the operator it feeds, or the
    # function's declared I result it is returned as)
    reduced: str = ""
    meets: tuple[tuple[str, str], ...] = ()
    # The operand's rank where the adapter knows it without its shape (the static checker:
    # 0 for a value evidently 0-d, a full reduction ``x.sum()`` / ``torch.dot(a, b)``, a
    # collective or elementwise op of such values, a local only ever bound to one); the
    # broadcast alignment of an elementwise op reads it (:func:`_known_rank`), as it reads
    # ``shape`` in the check mode.  None: unknown
    ndim: int | None = None

    @property
    def is_scalar(self) -> bool:
        return self.type is None


_TEXT_SLOT = Operand.__dict__["text"]  # the slot behind Operand.text


class _SourceOperand(Operand):
    """An :class:`Operand` whose ``text`` is rendered from its source node when first read
    (:func:`source_operand`).  The static checker makes one per operand of every call it
    types, and the text is read for a message only: most are never rendered.  Equal to,
    hashed and copied (``dataclasses.replace``) as the Operand with the rendered text."""

    __slots__ = ("_source", "_render")

    @property  # type: ignore[override]
    def text(self) -> str:
        render = self._render
        if render is not None:
            _TEXT_SLOT.__set__(self, render(self._source))
            self._render = None
            self._source = None
        return _TEXT_SLOT.__get__(self, Operand)  # type: ignore[no-any-return]

    @text.setter
    def text(self, value: str) -> None:  # the dataclass __init__ (a replace) sets it
        _TEXT_SLOT.__set__(self, value)
        self._render = None
        self._source = None

    def __eq__(self, other: object) -> bool:  # an Operand's too (its own returns NotImplemented)
        if not isinstance(other, Operand):
            return NotImplemented
        return ((self.type, self.text, self.can_grad, self.role, self.shape, self.zero, self.leaf,
                 self.cut, self.made, self.made_in, self.reduced, self.meets, self.ndim)
                == (other.type, other.text, other.can_grad, other.role, other.shape, other.zero,
                    other.leaf, other.cut, other.made, other.made_in, other.reduced, other.meets,
                    other.ndim))

    __hash__ = Operand.__hash__


def source_operand(type: SpmdType | None, source: object, render: Callable[[Any], str],
                   can_grad: bool = True, role: Role | None = None, zero: bool = False,
                   leaf: bool = False) -> Operand:
    """``Operand(type, render(source), can_grad, role, zero=zero, leaf=leaf)``, the text
    rendered only when read (``render`` a function of ``source``, a syntax node)."""
    o = _new_source_operand(_SourceOperand)
    o.type = type
    o.can_grad = can_grad
    o.role = role
    o.shape = None
    o.zero = zero
    o.leaf = leaf
    o.cut = None
    o.made = ""
    o.made_in = ""
    o.reduced = ""
    o.meets = ()
    o.ndim = None
    o._source = source
    o._render = render
    return o


_new_source_operand = object.__new__


# --------------------------------------------------------------------------------------
# The classification.  Names are torch's: functions of ``torch``, ``torch.nn.functional``,
# Tensor methods (operators map to their method: ``a + b`` is ``add``, ``b + a`` reflected is
# ``add`` with the operands swapped, ``a += b`` is ``add_``), and the builtins of
# ``torch.linalg`` / ``torch.special`` / ``torch.fft`` by their ``__name__``
# (``torch.linalg.vector_norm`` is ``linalg_vector_norm``, ``torch.fft.rfft`` is ``fft_rfft``:
# the Fourier transforms are linear maps, so a Partial passes through them).

_ELEMENTWISE_LINEAR = """
add sub subtract rsub neg negative positive clone contiguous detach detach_ real imag conj
resolve_conj resolve_neg to float double half bfloat16 type type_as cpu cuda
requires_grad_ zero_
""".split()

_LINEAR = """
sum nansum mean nanmean cumsum trace diff
cat concat concatenate stack hstack vstack dstack column_stack row_stack
view view_as reshape reshape_as flatten unflatten ravel squeeze unsqueeze
transpose t T mT permute movedim moveaxis swapaxes swapdims adjoint H mH
narrow narrow_copy select split split_with_sizes chunk tensor_split unbind
expand expand_as broadcast_to repeat tile repeat_interleave flip fliplr flipud roll rot90
diagonal diag diag_embed diagflat tril triu
gather index_select take take_along_dim masked_select __getitem__ __setitem__
index_add index_copy index_fill index_put scatter scatter_add
unfold as_strided pad constant_pad_nd view_as_real view_as_complex
fold atleast_1d atleast_2d atleast_3d broadcast_tensors
avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d
interpolate upsample upsample_nearest upsample_bilinear
pixel_shuffle pixel_unshuffle channel_shuffle native_channel_shuffle
max_unpool1d max_unpool2d max_unpool3d affine_grid
fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2
fft_rfftn fft_irfftn fft_hfft fft_ihfft fft_hfft2 fft_ihfft2 fft_hfftn fft_ihfftn
fft_fftshift fft_ifftshift
""".split()

_MULTILINEAR_FACTORS = """
mul multiply matmul mm bmm mv dot vdot inner outer ger einsum tensordot kron cross
chain_matmul multi_dot linalg_multi_dot
""".split()

_NONLINEAR = """
relu relu_ relu6 gelu silu mish elu selu celu leaky_relu prelu rrelu hardtanh hardswish
hardsigmoid sigmoid logsigmoid tanh tanhshrink softplus softsign softshrink hardshrink threshold
glu exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square pow float_power abs sign sgn
sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh erf erfc erfinv
softmax log_softmax softmin gumbel_softmax
layer_norm rms_norm group_norm batch_norm instance_norm local_response_norm normalize
dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout
max min amax amin argmax argmin maximum minimum fmax fmin clamp clip clamp_min clamp_max
norm linalg_norm linalg_vector_norm linalg_matrix_norm std var std_mean var_mean prod cumprod
logsumexp logcumsumexp
median nanmedian mode topk sort argsort kthvalue quantile nanquantile
eq ne lt le gt ge equal allclose isclose isnan isinf isfinite logical_and logical_or
logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not
bitwise_left_shift bitwise_right_shift
floor ceil round trunc frac fmod remainder reciprocal
long int short bool byte char
cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss kl_div
binary_cross_entropy binary_cross_entropy_with_logits soft_margin_loss poisson_nll_loss
gaussian_nll_loss multilabel_soft_margin_loss
one_hot
max_pool1d max_pool2d max_pool3d max_pool1d_with_indices max_pool2d_with_indices
max_pool3d_with_indices adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d
adaptive_max_pool1d_with_indices adaptive_max_pool2d_with_indices adaptive_max_pool3d_with_indices
fractional_max_pool2d fractional_max_pool3d lp_pool1d lp_pool2d lp_pool3d
lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
cosine_similarity pairwise_distance pdist cdist
any all count_nonzero nonzero unique bincount histc
""".split()

# Ops applied to each tensor argument by itself, one result per argument (a view of it)::
#
#     broadcast_tensors(p, r)  ->  (p', r')     p' = p expanded: still P; r' still R
#
# the rule runs once per operand (propagate_each), so P beside R is no mix: no output
# holds a sum of the two.
PER_OPERAND_OPS = frozenset("atleast_1d atleast_2d atleast_3d broadcast_tensors".split())


# torch's multi-tensor ops (``torch._foreach_add_(params, grads, alpha=-lr)``, what
# optimizers and ``clip_grad_norm_`` run by default): the op of their name without the
# prefix, once per list position (position i of every list argument; any other argument
# is the same operand at every position), so each position follows that op's rule
# (``_foreach_norm`` of a Partial gradient is the non-linear error, ``_foreach_add_`` of
# a Partial gradient into a Replicate parameter the affine one).
FOREACH_PREFIX = "_foreach_"
# the per-position op where it is not the name without the prefix
_FOREACH_OPS = {"powsum": "norm"}  # sum(|x|^p): a norm without the root, non-linear alike


# torch's fused optimizer steps (what Adam, AdamW, SGD and Adagrad run with fused=True:
# ``torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
# lr=...)``) are multi-tensor ops too: one step per list position, checked as a _foreach op is
# (the op below at each position over that position's parameter, gradient and states), the
# parameters written in place and the states at the listed argument positions as well.
# Adam's and Adagrad's steps are non-linear in the gradient (its square; OP_SPECS), SGD's is
# the sum add_ checks (p - lr * (g + wd * p), the momentum buffer a sum of gradients).
# (per-position op, the positions of the state lists it writes)
FUSED_OPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "_fused_adam_": ("_fused_adam_", (2, 3, 4)),
    "_fused_adamw_": ("_fused_adamw_", (2, 3, 4)),
    "_fused_adagrad_": ("_fused_adagrad_", (2,)),
    "_fused_sgd_": ("add_", (2,)),
}
# (A fused step's step counters, learning rate, loss scale and inf flag are hyperparameters,
# no operands: NON_OPERAND_NAMES.)
# The formal of a fused step that, True, says the step overwrites its states without reading
# them: SGD's first step copies the gradient into the momentum buffers (torch made them with
# empty_like), so they are no operands then (both adapters drop them when the value is True).
FUSED_FIRST_STEP: dict[str, str] = {"_fused_sgd_": "is_first_step"}


def foreach_op(name: str) -> str | None:
    """The per-position op of a ``torch._foreach_*`` op (``_foreach_add_`` -> ``add_``) or of
    a fused optimizer step (``_fused_sgd_`` -> ``add_``)."""
    fused = FUSED_OPS.get(name)
    if fused is not None:
        return fused[0]
    if not name.startswith(FOREACH_PREFIX) or len(name) == len(FOREACH_PREFIX):
        return None
    base = name[len(FOREACH_PREFIX):]
    return _FOREACH_OPS.get(base, base)


def foreach_writes(name: str) -> tuple[bool, tuple[int, ...]]:
    """Whether a multi-tensor op writes its first list in place, and the positions of the
    other lists it writes (a fused optimizer's states): ``_foreach_add_`` -> (True, ()),
    ``_foreach_add`` -> (False, ()), ``_fused_adam_`` -> (True, (2, 3, 4))."""
    fused = FUSED_OPS.get(name)
    if fused is not None:
        return True, fused[1]
    each = foreach_op(name) or name
    return each.endswith("_") and not each.startswith("_"), ()

# Ops whose second tensor is a template: only its shape, dtype or device is read.
TEMPLATE_OPS = ("type_as", "to", "view_as", "reshape_as", "expand_as")

# Which arguments of a call are operands, by torch's formal names (both adapters read
# them the same way: the plugin from torch's stubs, the check mode from the signatures).
# Never operands: dims, shapes, dtypes, flags, strings.  A tensor under any other name is
# an operand (``source`` of index_add, ``min``/``max`` of clamp); a Python scalar is one
# only under a SCALAR_OPERAND_NAMES formal (``x + 1``, ``where(c, x, 0.)``).
NON_OPERAND_NAMES = frozenset(
    """dim dims dim0 dim1 dimension size sizes shape dtype device layout memory_format
    requires_grad pin_memory non_blocking copy keepdim alpha beta eps momentum training
    inplace reduction ignore_index label_smoothing p approximate negative_slope start
    step chunks split_size split_size_or_sections sections indices_or_sections
    destination repeats diagonal offset lambd threshold generator correction unbiased
    normalized_shape num_classes padding_idx max_norm norm_type scale_grad_by_freq sparse
    mode value_or_none descending stable sorted largest k interpolation names
    equation rounding_mode reduce include_self accumulate pad
    state_steps lr grad_scale found_inf""".split()
)
SCALAR_OPERAND_NAMES = frozenset("other input self value exponent scalar tensor1 tensor2".split())
# Losses whose ``target`` is a value compared with the input, not the class indices of
# cross_entropy / nll_loss that both adapters read as an index: here it is an ordinary
# (non-linear) operand, so mse_loss(r, p) is a Partial through a square.  The static checker
# takes it as data without a gradient (an I prediction may meet an R target); the check mode
# reads requires_grad.
VALUE_TARGET_OPS = frozenset("""mse_loss l1_loss smooth_l1_loss huber_loss kl_div
binary_cross_entropy binary_cross_entropy_with_logits soft_margin_loss poisson_nll_loss
gaussian_nll_loss multilabel_soft_margin_loss""".split())


def is_value_target(op: str, formal: str) -> bool:
    """``target`` of a VALUE_TARGET_OPS loss: an operand, not an index (both adapters ask)."""
    return formal == "target" and op in VALUE_TARGET_OPS

# Factories: no tensor operands; their result is untyped until annotated (RANDOM_LIKE: typed
# from their template, below).
FACTORIES = frozenset(
    """
zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor
as_tensor from_numpy zeros_like ones_like empty_like full_like rand_like randn_like
randint_like new_zeros new_ones new_empty new_full new_tensor scalar_tensor new
empty_strided new_empty_strided range tril_indices triu_indices frombuffer asarray
hann_window hamming_window blackman_window bartlett_window kaiser_window
""".split()
)

# Random factories shaped like a template (``torch.randn_like(x)``: diffusion noise, a dropout
# mask drawn by hand): a new draw laid out as ``x``, none of x's values in it.  They are typed
# from the template (:func:`random_like_type`), not untyped as the other factories: on an axis
# where x is R or I the draw is R or I, which holds only if every rank of the axis draws the same
# numbers (RANDOM_OPS: the check mode compares the generator's state, as for dropout); V and
# S(i) stay (each rank's own draw, in the template's layout); on a P axis the draw is no
# pending sum: unknown there.  A global template's partition spec is kept.
RANDOM_LIKE = frozenset({"rand_like", "randn_like", "randint_like"})


def random_like_type(t: SpmdType) -> SpmdType:
    """The type of ``torch.randn_like(x)`` (RANDOM_LIKE) for a template ``x`` of type ``t``."""
    return SpmdType.of({a: lt for a, lt in t.axes if lt.kind is not Kind.P}, t.spec)


# Factories whose result is zero everywhere (``torch.zeros_like(p)``: an optimizer's fresh
# moments, a buffer to accumulate into), and those that fill with a value (zero where the
# value is 0: Adagrad's ``full_like(p, 0.0)``).  A zero is no term of any type: as a summand
# it adds nothing and as a factor it makes nothing (``Operand.zero``), so the check mode
# reads one made in its block as a zero where an op writes it while its values are all zero
# (the static checker sees no values: there such a buffer is untyped until annotated).
ZERO_FACTORIES = frozenset("zeros zeros_like new_zeros".split())
FILL_FACTORIES = frozenset("full full_like new_full".split())


# Formals that hold index tensors (``gather(x, dim, index)``, ``x[idx]``, cross_entropy's
# class ids): operands of role INDEX, never differentiated; R or I there never matters, a
# Varying index makes the selection vary, a Partial one is an error (its values are a
# pending sum).  A value loss's ``target`` is not one (is_value_target).
INDEX_NAMES = frozenset("index indices target labels idx offsets".split())
# Ops whose index argument has a generic name.
INDEX_FORMALS_BY_OP: dict[str, frozenset[str]] = {
    "embedding": frozenset({"input"}), "embedding_bag": frozenset({"input", "offsets"}),
    "one_hot": frozenset({"tensor", "input"}),
    # x.masked_select(mask) is x[mask]: linear in x, the mask an index (a P x stays P)
    "masked_select": frozenset({"mask"}),
}
# Ops whose result is an integer or bool tensor (indices, counts, masks, integer casts), which
# never carries a gradient whatever their operands: ``counts = torch.bincount(idx)`` then
# ``all_reduce(counts.max(), ..., op="max")`` needs no detach (read by the plugin's
# rewrite.is_gradient_free; the check mode reads requires_grad).
# ``bincount`` with ``weights`` (keyword or second positional) is a float sum of the
# weights, carrying their gradient: an integer only without them (WEIGHTED_RESULTS).
INTEGER_RESULTS = frozenset("""argmax argmin argsort argwhere nonzero bincount one_hot
searchsorted bucketize count_nonzero eq ne lt le gt ge isnan isinf isfinite isclose isin
logical_and logical_or logical_xor logical_not long int short bool byte randint randperm
multinomial""".split())
# Ops of INTEGER_RESULTS that are float with a weights argument: (its formal, its position).
WEIGHTED_RESULTS: dict[str, tuple[str, int]] = {"bincount": ("weights", 1)}
# Float results without a gradient (``torch.histc`` is a float histogram, never
# differentiated): gradient-free, not integer values.
GRADIENT_FREE_RESULTS = INTEGER_RESULTS | frozenset({"histc"})
# Integer and bool dtypes (``torch.long``, ``torch.int64``, ...): a cast to one (``x.to(torch.long)``,
# ``torch.zeros(n, dtype=torch.bool)``) is an integer value, which never carries a gradient:
# at a boundary its R and I agree (collectives.check_argument's gradient_free; the check mode
# reads the tensor's dtype).
INTEGER_DTYPES = frozenset("""bool uint8 uint16 uint32 uint64 int8 int16 int32 int64 long int short
byte""".split())
# Ops that keep an integer (or bool) operand integer: views, copies, selections, integer
# arithmetic and reductions that do not divide (``idx.view(-1)``, ``tok.squeeze(-1)``,
# ``counts.sum()``, ``idx.clamp(max=n - 1)``; not ``mean``, a float cast, ``softmax``).
INTEGER_KEEPING = frozenset("""view reshape expand expand_as view_as repeat repeat_interleave
contiguous clone detach cpu cuda squeeze unsqueeze flatten unflatten permute transpose t movedim
narrow select flip roll tril triu gather index_select masked_select take take_along_dim
sum cumsum prod cumprod amax amin max min clamp clamp_min clamp_max clip abs neg add sub mul
remainder fmod floor_divide bitwise_and bitwise_or bitwise_xor bitwise_not masked_fill
squeeze_ unsqueeze_ add_ sub_ mul_ clamp_ masked_fill_ remainder_ fill_ zero_ cat stack
concat concatenate hstack vstack chunk split unbind diag diagonal unique""".split())
# Random ops: each call draws from a generator, its ``generator`` argument or else the default
# one of its device (CPU: ``torch.default_generator``; CUDA: the device's, whose state
# Megatron's RNG tracker swaps inside its fork).  Their rule is their op's (dropout keeps its
# input's type, ``multinomial`` gives its input's type to the indices), which on an axis where
# the result is R or I holds only if every rank of the axis draws the same numbers: the
# generator in the same state on each.  No type says so and the static checker cannot see
# seeds; the check mode compares the generator's state across the axis before the op draws
# (``random_state_error`` names the mismatch).  By name: when a call draws nothing (no
# check), from the values of its arguments (a formal the call leaves out has its default).
@dataclass(frozen=True)
class RandomDraw:
    p: str | None = None           # the probability formal: 0 (or 1 for dropout) draws nothing
    p_default: float = 0.5
    train: tuple[str, ...] = ()    # the training flag's formals: False draws nothing
    train_default: bool = True


_DROPOUT = RandomDraw("p", 0.5, ("training", "train"), True)
_ALPHA_DROPOUT = RandomDraw("p", 0.5, ("training", "train"), False)  # F.alpha_dropout: training=False
_ALWAYS = RandomDraw()
RANDOM_OPS: dict[str, RandomDraw] = {
    **{n: _DROPOUT for n in """dropout dropout_ dropout1d dropout2d dropout3d feature_dropout
       feature_dropout_ native_dropout""".split()},
    **{n: _ALPHA_DROPOUT for n in """alpha_dropout alpha_dropout_ feature_alpha_dropout
       feature_alpha_dropout_""".split()},
    # a random negative slope in training only (F.rrelu: training=False)
    "rrelu": RandomDraw(None, 0.0, ("training",), False),
    "rrelu_": RandomDraw(None, 0.0, ("training",), False),
    # attention dropout: drawn whenever dropout_p > 0 (the caller passes 0 in eval)
    "scaled_dot_product_attention": RandomDraw("dropout_p", 0.0),
    **{n: _ALWAYS for n in """bernoulli bernoulli_ multinomial normal normal_ poisson binomial
       uniform_ exponential_ random_ cauchy_ log_normal_ geometric_ gumbel_softmax""".split()},
    **{n: _ALWAYS for n in RANDOM_LIKE},
}


def random_draws(name: str, values: dict[str, object]) -> bool:
    """Whether a call of ``name`` draws from a generator (False for an op that is not random),
    by its arguments' values: formal -> value, a formal left out taking its default."""
    draw = RANDOM_OPS.get(name)
    if draw is None:
        return False
    for formal in draw.train:
        if formal in values:
            if values[formal] is False:
                return False
            break
    else:
        if draw.train and not draw.train_default:
            return False
    if draw.p is not None:
        p = values.get(draw.p, draw.p_default)
        if isinstance(p, (int, float)) and not isinstance(p, bool) and (
                p == 0 or (p == 1 and draw.p != "dropout_p")):
            return False
    return True


_SLICED = re.compile(r"([A-Za-z_][\w.]*)(\[[^\[\]]*\])")


def _leading_slice(text: str) -> tuple[str, str] | None:
    """(the base, the slice) of an operand written as a slice of dim 0 of a name, maybe
    followed by a view (``lam[:hl].view(1, hl, 1, 1)``: ("lam", "lam[:hl]")); None else."""
    m = _SLICED.match(bare(text))
    if m is None:
        return None
    index = m.group(2)[1:-1]
    if ":" not in index or "," in index:
        return None
    rest = bare(text)[m.end():]
    if rest and not rest.startswith("."):
        return None  # ``lam[:k] * 2``: an operator after the slice
    return m.group(1), m.group(0)


def random_state_error(op: str, axis: str, text: str, t: SpmdType, generator: str,
                       ranks: tuple[int, int]) -> SpmdError:
    """The check mode's error for a random op whose result the rule types R or I on ``axis``
    while its generator's state differs between two ranks of the axis (global ``ranks``)."""
    lt = t.get(axis)
    kind = lt.kind.value if lt is not None else "R"
    word = "Invariant" if kind == "I" else "Replicate"
    x = bare(text)
    # the axes the value may differ on (S(i), V: a dp-sharded batch's noise) keep a seed of
    # their own rank: "not seed + rank" there would draw the same noise for every dp rank's
    # samples (probe-dit 7)
    vary = [a for a, l in t.axes if l.kind is Kind.V]
    same = [a for a, l in t.axes if l.kind is not Kind.V]
    if vary:
        plus = " + ".join(f'mesh.get_local_rank("{a}")' for a in vary)
        seed = (f"torch.manual_seed(seed + {plus}): the same on every rank of "
                f"{axis_words(same)}, where {x} is one value, and its own on "
                f"{axis_words(vary)}, where {x} differs (not seed + dist.get_rank(), the "
                f"rank over every axis)")
    else:
        seed = "torch.manual_seed(seed), not seed + rank"
    return SpmdError(
        "spmd-random",
        f'{op} on "{axis}" ({x}: {format_type(t)}) draws from {generator}, whose state differs '
        f"between the ranks of \"{axis}\" (global ranks {ranks[0]} and {ranks[1]}): each rank "
        f"draws a different mask or sample, so the result is no longer the same on every rank "
        f'of "{axis}" as {word} says, and a sum or all-reduce downstream silently mixes the '
        f"ranks' values. Seed that generator the same on every rank of \"{axis}\" (outside the "
        f"RNG tracker's per-rank fork; {seed}), or, if each "
        f'rank\'s draw is meant to be its own, shard first (convert({x}, "{axis}", src={kind}, '
        f'dst=S(i)), then {op} on the shard) or reinterpret({x}, "{axis}", src={kind}, dst=V) '
        f"first")


# Ops returning (values, indices): item 1 is the indices
WITH_INDICES = frozenset("topk sort max min kthvalue mode median nanmedian cummax cummin".split())

# Conditions and masks (bool tensors): never differentiated, so they carry no gradient (the
# no-gradient relaxation of the I rule applies), but they stay operands in their op's
# (non-linear) position.
GRADFREE_NAMES = frozenset("condition mask".split())


def is_index_formal(op: str, formal: str) -> bool:
    """Whether ``formal`` of ``op`` holds an index tensor (role INDEX), for both adapters."""
    return ((formal in INDEX_NAMES and not is_value_target(op, formal))
            or formal in INDEX_FORMALS_BY_OP.get(op, ()))


# Non-linear ops that keep the shape (elementwise, or normalising over the last
# dims): a Shard(i) operand stays Shard(i) in local SPMD.
_SHAPE_PRESERVING_NONLINEAR = frozenset("""
relu relu_ relu6 gelu silu mish elu selu celu leaky_relu prelu rrelu hardtanh hardswish
hardsigmoid sigmoid logsigmoid tanh tanhshrink softplus softsign softshrink hardshrink threshold
exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square pow float_power abs sign sgn
sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh erf erfc erfinv
softmax log_softmax softmin layer_norm rms_norm group_norm normalize
dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout
maximum minimum fmax fmin clamp clip clamp_min clamp_max
eq ne lt le gt ge isclose isnan isinf isfinite logical_and logical_or logical_not logical_xor
bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
floor ceil round trunc frac fmod remainder reciprocal
long int short bool byte char
""".split())


# Normalising ops: shape-preserving, but each output element depends on a whole slice
# of the input (softmax over ``dim``, layer_norm over the trailing ``normalized_shape``).
# A Shard(i) input keeps its layout only when the normalised dims are known and provably
# not i (see :func:`normalising_reduction`); every other operand (layer_norm's weight and
# bias) lies along the normalised dims.  By the formal that states the normalised dims:
# "dim" (one dim or a tuple), or "shape" (normalized_shape: its last len() dims).
NORMALISING: dict[str, tuple[str, str]] = {
    "softmax": ("dim", "dim"), "log_softmax": ("dim", "dim"), "softmin": ("dim", "dim"),
    "normalize": ("dim", "dim"),
    "layer_norm": ("normalized_shape", "shape"), "rms_norm": ("normalized_shape", "shape"),
}
# The normalised dims a call that leaves NORMALISING's formal out normalises over (its
# default): ``F.normalize(x)`` along dim 1.  Both adapters read it.
NORMALISING_DEFAULTS: dict[str, object] = {"normalize": 1}
# Normalising ops whose dims the rule does not read (group_norm normalises dim 1 and every
# spatial dim, local_response_norm a window of channels): a Shard input gives plain V.
_NORMALISING_OTHER = frozenset({"group_norm", "local_response_norm", "batch_norm",
                                "instance_norm", "gumbel_softmax"})


# Operators (Tensor dunders) -> (the op's name, operands swapped): ``a + b`` is ``add``,
# ``b + a`` reflected is ``add`` with the operands swapped, ``a += b`` is ``add_``.  Both
# adapters (the mypy plugin, the runtime checker) read operators through this table.
OPERATORS: dict[str, tuple[str, bool]] = {
    "__add__": ("add", False), "__radd__": ("add", True), "__iadd__": ("add_", False),
    "__sub__": ("sub", False), "__rsub__": ("sub", True), "__isub__": ("sub_", False),
    "__mul__": ("mul", False), "__rmul__": ("mul", True), "__imul__": ("mul_", False),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True), "__itruediv__": ("div_", False),
    "__div__": ("div", False), "__rdiv__": ("div", True), "__idiv__": ("div_", False),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
    "__ifloordiv__": ("floor_divide_", False),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__pow__": ("pow", False), "__rpow__": ("pow", True), "__ipow__": ("pow_", False),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True),
    "__imod__": ("remainder_", False),
    "__neg__": ("neg", False), "__pos__": ("positive", False), "__abs__": ("abs", False),
    "__invert__": ("bitwise_not", False),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True),
    "__iand__": ("bitwise_and_", False),
    "__or__": ("bitwise_or", False), "__ror__": ("bitwise_or", True),
    "__ior__": ("bitwise_or_", False),
    "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True),
    "__ixor__": ("bitwise_xor_", False),
    "__lshift__": ("bitwise_left_shift", False), "__rlshift__": ("bitwise_left_shift", True),
    "__rshift__": ("bitwise_right_shift", False), "__rrshift__": ("bitwise_right_shift", True),
    "__ilshift__": ("bitwise_left_shift_", False), "__irshift__": ("bitwise_right_shift_", False),
    "__eq__": ("eq", False), "__ne__": ("ne", False), "__lt__": ("lt", False),
    "__le__": ("le", False), "__gt__": ("gt", False), "__ge__": ("ge", False),
    "__getitem__": ("__getitem__", False), "__setitem__": ("__setitem__", False),
}


def _spec_table() -> dict[str, OpSpec]:
    table: dict[str, OpSpec] = {}
    for name in _LINEAR:
        table[name] = OpSpec(name, OpClass.LINEAR)
    for name in _ELEMENTWISE_LINEAR:
        table[name] = OpSpec(name, OpClass.LINEAR, keeps_shard_dims=True)
    for name in _MULTILINEAR_FACTORS:
        table[name] = OpSpec(name, OpClass.MULTILINEAR, keeps_shard_dims=name in ("mul", "multiply"))
    for name in _NONLINEAR:
        table[name] = OpSpec(name, OpClass.NONLINEAR,
                             keeps_shard_dims=name in _SHAPE_PRESERVING_NONLINEAR
                             and name not in NORMALISING and name not in _NORMALISING_OTHER)
    # ops whose operands play different roles
    s, f, n, x = Role.SUMMAND, Role.FACTOR, Role.NONLINEAR, Role.INDEX
    special = [
        OpSpec("div", OpClass.MULTILINEAR, (f, n), keeps_shard_dims=True),
        OpSpec("divide", OpClass.MULTILINEAR, (f, n), keeps_shard_dims=True),
        OpSpec("true_divide", OpClass.MULTILINEAR, (f, n), keeps_shard_dims=True),
        OpSpec("linear", OpClass.MULTILINEAR, (f, f, s)),
        # bilinear(x1, x2, w, b) = x1^T w x2 + b: multilinear in x1, x2, w; the bias a summand
        OpSpec("bilinear", OpClass.MULTILINEAR, (f, f, f, s)),
        # convolutions: linear in the input and in the weight (one P factor), the bias a summand
        *(OpSpec(c, OpClass.MULTILINEAR, (f, f, s)) for c in (
            "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
            "conv_transpose3d", "convolution")),
        # grid_sample(input, grid): for a fixed grid a linear map of the input (every mode and
        # padding mode); the grid picks the sampled points, a non-linear operand
        OpSpec("grid_sample", OpClass.LINEAR, (s, n)),
        # embedding(ids, table): a lookup, linear in the table (the ids are an index: INDEX
        # roles by their formal); with max_norm the rows are renormalised: VARIANTS
        OpSpec("embedding", OpClass.LINEAR),
        # embedding_bag(ids, table, offsets, ..., per_sample_weights) with mode "sum" or
        # "mean": sum_i psw_i * table[ids_i] (/ the bag's size), linear in the table and in the
        # per-sample weights, so bilinear in the two (a P table with P weights is P * P); with
        # mode "max" non-linear: VARIANTS
        OpSpec("embedding_bag", OpClass.MULTILINEAR),
        # scatter_reduce(self, dim, index, src, reduce) with reduce "sum" or "mean": each
        # output element a sum (or a mean over a count the index fixes) of self's and src's
        # elements; "prod", "amax", "amin" are non-linear: VARIANTS
        OpSpec("scatter_reduce", OpClass.LINEAR, (s, s)),
        OpSpec("addmm", OpClass.MULTILINEAR, (s, f, f)),
        OpSpec("addbmm", OpClass.MULTILINEAR, (s, f, f)),
        OpSpec("baddbmm", OpClass.MULTILINEAR, (s, f, f)),
        OpSpec("addmv", OpClass.MULTILINEAR, (s, f, f)),
        OpSpec("addr", OpClass.MULTILINEAR, (s, f, f)),
        # where(cond, a, b), masked_fill(x, mask, v), masked_scatter(x, mask, src): the
        # condition or mask picks elements, as an index does (never differentiated; R or I
        # there does not matter, V makes the result vary, P is an error), and an untyped one
        # (a causal mask from torch.ones(...).triu(1)) does not make an R result unknown
        OpSpec("where", OpClass.LINEAR, (x, s, s), keeps_shard_dims=True),
        OpSpec("masked_fill", OpClass.LINEAR, (s, x, s), keeps_shard_dims=True),
        OpSpec("index_add", OpClass.LINEAR, (s, s)),
        OpSpec("scatter_add", OpClass.LINEAR, (s, s)),
        OpSpec("scatter", OpClass.LINEAR, (s, s)),
        # fill(x, v): every element becomes v, a summand (a zero keeps P; the x it replaces
        # is a summand too, so filling changes no type an in-place op could not keep)
        OpSpec("fill", OpClass.LINEAR, (s, s), keeps_shard_dims=True),
        OpSpec("masked_scatter", OpClass.LINEAR, (s, x, s)),
        # lerp(a, b, w) = (1 - w) a + w b: a and b are summands, a tensor weight non-linear
        OpSpec("lerp", OpClass.LINEAR, (s, s, n), keeps_shard_dims=True),
        # scaled_dot_product_attention(q, k, v, mask) = softmax(q k^T / c + mask) v: linear
        # in the values alone (a P v beside q, k not P is a P result), non-linear in the rest
        OpSpec("scaled_dot_product_attention", OpClass.MULTILINEAR, (n, n, f, n)),
        # the fused optimizer steps at one list position (FUSED_OPS): elementwise, non-linear
        # in the gradient (Adam's second moment, Adagrad's sum of squares)
        *(OpSpec(name, OpClass.NONLINEAR, keeps_shard_dims=True)
          for name in ("_fused_adam_", "_fused_adamw_", "_fused_adagrad_")),
    ]
    for spec in special:
        table[spec.name] = spec
    for name in ("add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
                 "masked_fill", "index_add", "scatter_add", "scatter", "scatter_reduce", "clamp",
                 "pow", "relu",
                 "index_fill", "index_copy", "index_put", "masked_scatter", "lerp",
                 "zero", "neg", "exp", "log", "sqrt", "abs", "sigmoid", "tanh", "copy", "fill",
                 "cumsum", "cumprod",
                 "normal", "uniform", "transpose", "t", "unsqueeze", "squeeze", "clip",
                 "addmm", "baddbmm", "silu", "gelu", "bitwise_and", "bitwise_or", "bitwise_xor",
                 "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "logical_and",
                 "logical_or", "logical_xor", "logical_not"):
        base = table.get(name)
        if base is not None and name + "_" not in table:
            table[name + "_"] = OpSpec(name + "_", base.op_class, base.roles, base.keeps_shard_dims)
    # x.type_as(y), x.view_as(y), ...: y is a template (its shape, dtype or device)
    for name in TEMPLATE_OPS:
        base = table[name]
        table[name] = OpSpec(name, base.op_class, (s, Role.TEMPLATE), base.keeps_shard_dims)
    # torch._utils._flatten_dense_tensors(tensors) (torch._C._nn.flatten_dense_tensors): each
    # tensor flattened, then concatenated: a cat, linear.  _unflatten_dense_tensors(flat,
    # tensors): views of flat (linear in flat) shaped like the tensors, which only lend their
    # shapes (templates, however many)
    table["flatten_dense_tensors"] = OpSpec("flatten_dense_tensors", OpClass.LINEAR)
    table["unflatten_dense_tensors"] = OpSpec("unflatten_dense_tensors", OpClass.LINEAR, (s,),
                                              rest=Role.TEMPLATE)
    # in-place fills overwrite: the result is the filled value's type
    table["copy_"] = OpSpec("copy_", OpClass.LINEAR, (Role.OVERWRITTEN, Role.SUMMAND),
                            keeps_shard_dims=True)
    return table


OP_SPECS: dict[str, OpSpec] = _spec_table()

# Tensor methods that read a tensor's values out of the tensor world (a Python number, list,
# array, truth value), each as the message shows the read of ``x``.  No tensor result, so no
# op; but a Partial's local values are this rank's summand, not the value: check_value_read.
# Both adapters route these names there (the plugin: the methods, ``float(x)`` / ``int(x)`` /
# ``bool(x)`` / ``complex(x)``, ``v in x`` and a condition ``if x:`` / ``while x:`` /
# ``assert x``; the check mode: every call of them torch hands it, implicit ones included).
VALUE_READS: dict[str, str] = {
    "item": "{x}.item()", "tolist": "{x}.tolist()", "numpy": "{x}.numpy()",
    "__bool__": "the truth value of {x}", "__int__": "int({x})", "__float__": "float({x})",
    "__complex__": "complex({x})", "__index__": "{x} as an index",
    "__array__": "numpy's array of {x}", "__contains__": "a membership test in {x}",
}

# Methods/functions that are not ops on tensor values (metadata, no tensor result; the value
# reads among them are checked by check_value_read).
NOT_OPS = frozenset(
    """
size dim ndim numel nelement element_size shape dtype device is_contiguous is_floating_point
is_complex data_ptr stride storage_offset backward register_hook
retain_grad requires_grad get_device nbytes itemsize __len__
__repr__ __str__ __format__ __hash__ __iter__ __reduce_ex__
""".split()
) | frozenset(VALUE_READS)


def classify(name: str) -> OpSpec:
    """The spec of an op by torch's name; an unknown op is non-linear (the safe default),
    with ``known`` False (its messages say the checker has no rule for it)."""
    spec = OP_SPECS.get(name)
    if spec is None:
        spec = OpSpec(name, OpClass.NONLINEAR, known=False)
    return spec


# Ops whose rule depends on an argument that is no operand (a mode string, max_norm): the
# table's entry holds when every listed formal has one of its values (the formal's value
# when the call leaves it out comes second); any other value, one the adapter cannot read
# (not a literal: UNREAD), or a formal the call's signature does not name (a module's
# forward: the value is in its constructor) gives the op non-linear (the safe rule)::
#
#     F.embedding_bag(ids, w_p, offsets)               mode "mean" (the default): P
#     F.embedding_bag(ids, w_p, offsets, mode="max")   non-linear: an error
#     x_p.scatter_reduce(0, idx, src_p, reduce=r)      r not a literal: an error
#
# Both adapters read the formals by name (:func:`variant_formals`) and ask :func:`call_spec`.
UNREAD_VALUE = object()  # a value the adapter could not read (not a literal)
_ANY_VALUE = object()    # the formal's default when the op requires it (no default)
VARIANTS: dict[str, tuple[tuple[str, object, frozenset[object]], ...]] = {
    "embedding": (("max_norm", None, frozenset({None})),),
    "embedding_bag": (("mode", "mean", frozenset({"sum", "mean"})),
                      ("max_norm", None, frozenset({None}))),
    "scatter_reduce": (("reduce", _ANY_VALUE, frozenset({"sum", "mean"})),),
    "scatter_reduce_": (("reduce", _ANY_VALUE, frozenset({"sum", "mean"})),),
    # the deprecated reduce= of scatter: "add" sums, "multiply" multiplies (non-linear here)
    "scatter": (("reduce", None, frozenset({None, "add"})),),
    "scatter_": (("reduce", None, frozenset({None, "add"})),),
}


# Casts by a dtype argument: ``x.to(dtype)``, ``x.type(dtype)``, ``x.type_as(other)`` (the
# check mode passes the template's dtype under "dtype").  A cast to a floating or complex
# dtype is linear, as ``float()`` / ``half()`` are; a cast to an integer or bool dtype
# truncates (tests nonzero), which does not commute with the pending sum: non-linear, as
# ``long()`` / ``bool()`` are (0.6 + 0.6 truncated is 1, each rank's 0.6 truncated sums to 0)::
#
#     p.to(torch.float16), p.to("cpu"), p.type_as(r_float)    linear: P stays P
#     p.to(torch.int64), p.to(dtype=torch.bool), p.type(torch.LongTensor)   non-linear
#
# The adapters pass the dtype as text (:func:`cast_spec`): the plugin the full name of the
# argument's expression (``torch.int64``, ``torch.LongTensor``, ``builtins.bool``) or a
# string literal (``"torch.LongTensor"``), the check mode the real dtype's name.  A dtype the
# adapter cannot read (a variable, the static ``type_as`` template) keeps the linear rule, as
# before this rule: the static checker does not guess a dtype (the check mode always reads it).
CAST_OPS = frozenset({"to", "type", "type_as"})
CAST_FORMAL = "dtype"
_INTEGRAL_DTYPES = frozenset("""bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 uint1
uint2 uint3 uint4 uint5 uint6 uint7 int1 int2 int3 int4 int5 int6 int7 long int short char byte
qint8 quint8 qint32 quint4x2 quint2x4 bits8 bits16 bits1x8 bits2x4 bits4x2
BoolTensor ByteTensor CharTensor ShortTensor IntTensor LongTensor""".split())


def cast_is_integral(dtype: object) -> bool:
    """Whether ``dtype`` (text as :data:`CAST_OPS` describes: ``torch.int64``, ``int64``,
    ``torch.cuda.LongTensor``, ``builtins.bool``) names an integer or bool dtype; False for
    a floating or complex one and for anything unread."""
    if not isinstance(dtype, str):
        return False
    return dtype.rsplit(".", 1)[-1] in _INTEGRAL_DTYPES


# A view by a dtype, ``x.view(torch.int32)`` (torch's ``view(dtype)`` overload; the shape
# overloads ``view(*size)`` / ``view(size)`` name no dtype), reinterprets the bits: no linear
# map of the values, whatever the two dtypes (the bits of a sum are not the sum of the bits;
# two fp16 summands packed in one float32 slot sum as a float32)::
#
#     p.view(torch.int32), p.flatten().view(torch.float32)    non-linear: a Partial's error
#     p.view(4, -1), p.view(-1)                               a shape view: linear
#
# The adapters pass ``dtype`` as for a cast (:func:`call_spec`): the plugin when mypy's
# chosen overload is the dtype one (the text of a ``torch.*`` name, else UNREAD_VALUE), the
# check mode when the argument is a torch.dtype.  ``view_as_real`` / ``view_as_complex`` stay
# linear (a complex number is the pair of its parts).
DTYPE_VIEW_OPS = frozenset({"view"})


# Elementwise losses: with ``reduction="none"`` each element of the result is the loss of
# the elements of its operands at the same place, as ``(a - b).pow(2)`` is, so an S(i)
# input keeps S(i) (every Varying operand S(i) alike); any other reduction (or one the
# adapter cannot read) reduces every dim: the rule of their name.
ELEMENTWISE_LOSSES = frozenset("""mse_loss l1_loss smooth_l1_loss huber_loss
binary_cross_entropy binary_cross_entropy_with_logits""".split())
LOSS_REDUCTION_FORMAL = "reduction"
# Class losses: ``input`` [N, C, d1...] against class ids [N, d1...]; with reduction="none"
# the class dim 1 is reduced and the batch dim kept (an S(0) input keeps S(0)); an input
# sharded on its class dim is vocab-parallel (not this rule's: it stays V).
CLASS_LOSSES = frozenset({"cross_entropy", "nll_loss"})
# The losses whose ``reduction`` chooses their rule: "none" keeps the batch shard (every dim
# for the elementwise ones and kl_div), "mean" (the default) is a pending MEAN over the shard
# dim, "sum" a pending SUM (:data:`MEAN_REDUCTIONS`, :data:`PENDING_REDUCTIONS`: a local SPMD
# loss of a dp-sharded batch made P by reinterpret(V->P) was dp-size times the loss, in both
# checkers, until session 42); kl_div's "batchmean" (the sum / the local batch size) is a mean.
REDUCED_LOSSES = ELEMENTWISE_LOSSES | CLASS_LOSSES | {"kl_div"}


def _loss_name(name: str, reduction: str) -> str:
    return f'{name} (reduction="{reduction}")'


# The spec names of the losses' pending reductions (call_spec gives them), by kind
LOSS_MEANS = frozenset([_loss_name(n, "mean") for n in REDUCED_LOSSES] + [_loss_name("kl_div", "batchmean")])
LOSS_SUMS = frozenset(_loss_name(n, "sum") for n in REDUCED_LOSSES)
# ... and of the class losses' reduction="none" (the batch dim kept, the class dim reduced)
CLASS_LOSSES_NONE = frozenset(_loss_name(n, "none") for n in CLASS_LOSSES)


def loss_of(name: str) -> tuple[str, str] | None:
    """(the loss, its reduction) of a loss spec name call_spec gives; None for another op."""
    if " (reduction=" not in name:
        return None
    loss, _, rest = name.partition(" (reduction=")
    return (loss, rest.strip('")')) if loss in REDUCED_LOSSES else None


def summing_name(spec: OpSpec) -> str:
    """The name the pending rule reads for a call of ``spec`` (:func:`reduced_partial_sum`,
    :func:`pending_kind`): a loss's reduction (LOSS_MEANS, LOSS_SUMS), else the op's name."""
    return spec.reduced_as or spec.name


# Segment sums whose every element is summed into some bin: ``torch.bincount(ids)`` of an
# S(0) index counts this rank's block only, its part of the counts over the ranks (a GNN's
# node degrees from an edge list sharded over the ranks: session 45's probe, 1.15 off on 2
# ranks with the local degree never summed, accepted by both checkers): a full reduction of
# the index for the pending rule (:func:`reduced_partial_error`), as a ``.sum()``'s
SEGMENT_SUMS = frozenset({"bincount"})


def loss_reduction(spec: OpSpec, ndim: int | None = None) -> Reduction | None:
    """The full reduction a loss spec of a pending reduction (LOSS_MEANS, LOSS_SUMS) or a
    segment sum (SEGMENT_SUMS) makes (``ndim``: its input's rank, in check mode), for the
    pending rule as a ``.mean()``'s or ``.sum()``'s; None for another op."""
    if spec.reduced_as in LOSS_MEANS or spec.reduced_as in LOSS_SUMS or spec.name in SEGMENT_SUMS:
        return Reduction(None, False, ndim)
    return None


def variant_formals(name: str) -> tuple[str, ...]:
    """The formals whose values choose ``name``'s rule (empty: the op has one rule)."""
    if name in CAST_OPS or name in DTYPE_VIEW_OPS:
        return (CAST_FORMAL,)
    if name in REDUCED_LOSSES:
        return (LOSS_REDUCTION_FORMAL,)
    return tuple(f for f, _, _ in VARIANTS.get(name, ()))


def call_spec(name: str, values: dict[str, object]) -> OpSpec:
    """The spec of a call of ``name`` given the values of its :func:`variant_formals`, as
    the adapter read them: a literal, :data:`UNREAD_VALUE`, or absent when the call leaves
    the formal out (its default then).  A formal the call's signature does not name must be
    given as UNREAD_VALUE."""
    spec = classify(name)
    if name in REDUCED_LOSSES:
        value = values.get(LOSS_REDUCTION_FORMAL, "mean")
        if value == "none":
            if name in CLASS_LOSSES:  # the batch dim kept (_class_loss_layout)
                return replace(spec, reduced_as=_loss_name(name, "none"))
            return replace(spec, keeps_shard_dims=True)  # each element's loss
        if value in ("mean", "sum") or (value == "batchmean" and name == "kl_div"):
            return replace(spec, reduced_as=_loss_name(name, value))  # type: ignore[arg-type]
        return spec  # a reduction the adapter cannot read: V, as before (gradual)
    if name in DTYPE_VIEW_OPS:
        dtype = values.get(CAST_FORMAL)
        if dtype is None:
            return spec  # a shape view: linear
        last = dtype.rsplit(".", 1)[-1] if isinstance(dtype, str) else None
        shown = f" (dtype=torch.{last})" if last else " (dtype)"
        return OpSpec(f"{name}{shown}", OpClass.NONLINEAR, (Role.NONLINEAR,))
    if name in CAST_OPS:
        dtype = values.get(CAST_FORMAL)
        if not cast_is_integral(dtype):
            return spec  # floating, complex, no dtype (``to("cpu")``) or unread: linear
        last = str(dtype).rsplit(".", 1)[-1]  # as users write it: torch.int64, bool
        shown = f"torch.{last}" if str(dtype).startswith("torch.") else last
        return OpSpec(f"{name} (dtype={shown})", OpClass.NONLINEAR,
                      (Role.NONLINEAR, *spec.roles[1:]), keeps_shard_dims=True)
    for formal, default, accepted in VARIANTS.get(name, ()):
        value = values.get(formal, default)
        if value is _ANY_VALUE or value is UNREAD_VALUE:
            shown = f"{formal} unknown"
        elif value in accepted:
            continue
        else:
            shown = f'{formal}="{value}"' if isinstance(value, str) else f"{formal}={value}"
        return OpSpec(f"{name} ({shown})", OpClass.NONLINEAR)
    return spec


def is_known(name: str) -> bool:
    return name in OP_SPECS


# --------------------------------------------------------------------------------------
# The rule


def _describe(op: Operand, lt: LocalType, axis: str) -> str:
    if op.text.endswith(RANK_DERIVED):
        return op.text
    return f"{bare(op.text)}: {format_type(op.type) if op.type is not None else 'scalar'}"


# add and sub (and their in-place forms): a Partial plus a Replicate term that convert
# makes Partial (one rank keeps it) is exact, whatever the sum is for
_ADD_SUB = frozenset({"add", "sub", "subtract", "rsub"})


def _fix_reduce(text: str, axis: str, dst: str = "R",
                operands: Sequence[tuple[Operand, object, LocalType]] = ()) -> str:
    """The reduction of P operand ``text``; of each item of a list operand ``xs[k]``
    (``[all_reduce(t, ...) for t in xs]``), unless ``operands`` (the op's, with their types
    on ``axis``) show that list holding items of another kind too: then of its Partial items
    where it is built (the reduction of each item would reduce the others too)."""
    call = 'all_reduce({}, "%s", src=P, dst=%s)' % (axis, dst)
    if text.endswith(LIST_ITEM) and any(o.text == text and lt.kind is not Kind.P
                                        for o, _, lt in operands):
        xs = bare(text[:-len(LIST_ITEM)])
        return (f"{call.format('p')} of each Partial item p where {xs} is built (it holds "
                f"items of other kinds too)")
    return each_item(text, call)


def _divided(text: str) -> str | None:
    """``a / n`` (one division at the outermost level, by a name or a number): ``a``. A term
    divided so is most often spread over the ranks by hand (PowerSGD's ``m - approx / n``):
    its convert to P is of the undivided term."""
    depth = 0
    at = -1
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch in "+-*/%@<>=&|^,":
            if ch == "/" and at < 0 and text[i - 1:i + 2] == " / ":
                at = i
            else:
                return None
    if at < 0:
        return None
    num, den = text[:at - 1].strip(), text[at + 2:].strip()
    if not num or not (den.replace("_", "").replace(".", "").isalnum()):
        return None
    return num


_KIND_WORD = {Kind.R: "Replicate", Kind.I: "Invariant", Kind.V: "Varying", Kind.P: "Partial"}


def _word(lt: LocalType) -> str:
    return f"Shard({lt.dim})" if lt.dim is not None else _KIND_WORD[lt.kind]


# Reductions remove the dims they reduce (or keep them as size 1 with keepdim); scans
# (cumsum, ...) keep every dim.  With the reduced dims known, a Shard(d) operand keeps its
# layout on the dims not reduced, renumbered as the dims before it disappear::
#
#     x: S(2), x.sum(dim=0)                ->  S(1)     (dim 0 removed: 2 -> 1)
#     x: S(2), x.sum(dim=0, keepdim=True)  ->  S(2)
#     x: S(0), x.sum(dim=-1)               ->  S(0)     (rank 1 leaves a scalar; see _result_layout)
#     x: S(0), x.sum(dim=-1, keepdim=True) ->  S(0) at rank >= 2 (V at rank 1)
#     x: S(1), x.sum(dim=1)                ->  V        (the shard dim itself is reduced)
REDUCTIONS = frozenset("""
sum nansum mean nanmean prod amax amin max min std var std_mean var_mean logsumexp norm
linalg_norm linalg_vector_norm argmax argmin all any count_nonzero median nanmedian
""".split())
# (the in-place cumsum_ and cumprod_ too: along the shard dim they are
# ops.scan_along_shard_error's, else they keep the target's layout, as their out-of-place forms)
SCANS = frozenset("cumsum cumprod logcumsumexp cummax cummin cumsum_ cumprod_".split())


@dataclass(frozen=True)
class Reduction:
    """The dims an op reduces, as written (``dims=None``: every dim, a full reduction).

    ``ndim``, the operand's rank, is known at runtime only; it resolves negative dims."""

    dims: tuple[int, ...] | None
    keepdim: bool = False
    ndim: int | None = None
    # the axes on which the code declares a sum's result a partial sum (reinterpret(V->P) or
    # spmd.sum's out_partial_axes; "*": every axis): see :func:`reduced_partial_sum`
    partial_axes: tuple[str, ...] = ()
    # the partial sum on partial_axes is typed P, pending: the result goes (alone, or added to
    # others) to a typed reduction of it (all_reduce / reduce_scatter with src=P), as a
    # Contraction's ``pending``
    pending: bool = False
    # the consumer the result goes to and that does not take it (collectives.pending_refusal):
    # "sum" (a reinterpret(V->P) or a summing reduction of a mean), "avg" (an averaging
    # reduction of a sum); its error says why
    refused: str = ""


def normalising_reduction(name: str, value: object, ndim: int | None = None) -> Reduction | None:
    """The dims normalising op ``name`` normalises over, from the value of its formal
    ``NORMALISING[name][0]`` as the call states it (a literal int or tuple; for
    ``normalized_shape`` only its length matters, so the items may be None), as a
    Reduction that keeps every dim; None when the op is not one or the value is unknown."""
    kind = NORMALISING.get(name)
    if kind is None or value is None or isinstance(value, bool):
        return None
    if kind[1] == "shape":
        k = 1 if isinstance(value, int) else len(value) if isinstance(value, (tuple, list)) else None
        if k is None or k < 1:
            return None
        return Reduction(tuple(range(-k, 0)), True, ndim)
    if isinstance(value, int):
        return Reduction((value,), True, ndim)
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return Reduction(tuple(value), True, ndim)
    return None


def shard_dim_after(name: str, d: int, r: Reduction) -> int | None:
    """Where a Shard(d) operand's dim is in the result of reduction (or scan, or
    normalising op) ``name``; None when the shard dim is reduced (normalised) or its place
    cannot be known (the result is V)."""
    if name in NORMALISING:
        r = Reduction(r.dims, True, r.ndim)  # keeps every dim, like a scan
    elif name not in REDUCTIONS and name not in SCANS:
        return None
    if r.dims is None or not r.dims:
        return None  # a full reduction (an empty dim tuple also reduces every dim)
    dims = r.dims
    if r.ndim is not None and r.ndim > 0:
        if not (-r.ndim <= d < r.ndim) or any(not (-r.ndim <= x < r.ndim) for x in dims):
            return None
        d_n = d % r.ndim
        dims_n = {x % r.ndim for x in dims}
        if d_n in dims_n:
            return None
        if r.keepdim or name in SCANS:
            return d
        new = d_n - sum(1 for x in dims_n if x < d_n)
        return new if d >= 0 else new - (r.ndim - len(dims_n))
    if all((x >= 0) == (d >= 0) for x in dims):
        if d in dims:
            return None
        if r.keepdim or name in SCANS:
            return d
        if d >= 0:
            return d - sum(1 for x in dims if x < d)
        return d + sum(1 for x in dims if x > d)
    return None  # dims of mixed signs without the rank: the place is unknown


@dataclass
class Result:
    """The outcome of typing one op: the result type and the violations."""

    type: SpmdType
    errors: list[SpmdError] = field(default_factory=list)


_ALL_REDUCE_CALL = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?all_reduce\((.*)\)$", re.DOTALL)


def _call_args(call: str) -> tuple[str, list[str]] | None:
    """(the callee text, the top-level argument texts) of an ``all_reduce(...)`` call's text;
    None for any other text."""
    from .collectives import _top_level_args  # imports this module

    m = _ALL_REDUCE_CALL.match(call.strip())
    if m is None:
        return None
    return call.strip()[:call.strip().index("(")], _top_level_args(m.group(1))


# the ops whose result carries its inputs' gradient by design: a detach of it would stop
# training what made it (a projector's all_reduce, a matmul chain)
_CALLEE = re.compile(r"([A-Za-z_][\w.]*)\(")
_GRADIENT_OPS: frozenset[str] = frozenset({
    "linear", "matmul", "mm", "bmm", "einsum", "conv1d", "conv2d", "all_reduce", "all_gather",
    "reduce_scatter", "all_to_all", "convert", "reinterpret", "redistribute"})


def _gradient_path(made: str) -> bool:
    """``made`` (a name's one binding) is a value whose gradient the code plainly wants: a
    function's or a module's result (``project(f, w)``, ``self.proj(x)``), a differentiable
    collective's or a matmul's (``x @ w``); a mask, a count, a ``.float()`` of one is not."""
    text = bare(made.strip())
    if not text:
        return False
    if " @ " in text:
        return True
    m = _CALLEE.match(text)
    if m is None or not text.endswith(")"):
        return False
    depth = 0
    for k in range(m.end() - 1, len(text)):
        depth += (text[k] in "([{") - (text[k] in ")]}")
        if depth == 0 and k != len(text) - 1:
            return False  # not one call (``f(a) + g(b)``, ``f(a)[0]``)
    callee = m.group(1)
    last = callee.rsplit(".", 1)[-1]
    return ("." not in callee and callee.isidentifier()) or callee.startswith("self.") or (
        last in _GRADIENT_OPS)


def _dst_i_reduce(o: Operand, axis: str) -> tuple[str, str] | None:
    """(the call with ``dst=I``, where it is) when the R operand ``o`` is an
    ``all_reduce(..., "axis", ..., dst=R)``: the call itself, or a local name bound to one
    (``Operand.made``).  Beside an I value (or returned as one) ``dst=I`` is the one-word fix:
    a reinterpret of the I operand to R, then of the sum back to I, adds an all-reduce of
    each to the backward."""
    text = bare(o.text)
    call, named = text, False
    if text.isidentifier() and o.made and "..." not in o.made:
        call, named = bare(o.made), True
    parts = _call_args(call)
    if parts is None:
        return None
    callee, args = parts
    if (args.count("dst=R") != 1
            or not any(a in (f'"{axis}"', f"'{axis}'") or a.replace(" ", "") in (
                f'axis="{axis}"', f"axis='{axis}'") for a in args[1:])):
        return None
    fixed = f"{callee}({', '.join('dst=I' if a == 'dst=R' else a for a in args)})"
    if o.made_in and o.type is not None:
        # the all_reduce a function returns: dst=I there, and I in its return type
        ret = format_type(SpmdType.of({**o.type.as_dict(), axis: INVARIANT}))
        return (f"return {fixed}",
                f"the all_reduce {o.made_in} returns (and declare {o.made_in} -> {ret})")
    return (f"{text} = {fixed}", f"the all_reduce that makes {text}") if named else (
        fixed, "the all_reduce")


def _after_reduction(call: str, p: str, inv: str, name: str) -> str | None:
    """``all_reduce(p, ...) + inv`` for the op ``p + inv`` (``-``: either order) that is the
    argument of the all_reduce ``call``; None when the argument is not written so."""
    parts = _call_args(call)
    sym = {"add": "+", "sub": "-", "subtract": "-"}.get(name.rstrip("_"))
    if parts is None or sym is None or not parts[1]:
        return None
    callee, args = parts
    arg = " ".join(args[0].split())
    reduced = f"{callee}({', '.join([p, *args[1:]])})"
    if arg == f"{p} {sym} {inv}":
        return f"{reduced} {sym} {inv}"
    if arg == f"{inv} {sym} {p}":
        return f"{inv} {sym} {reduced}"
    return None


def _rule_on_axis(
    spec: OpSpec, axis: str, typed: list[tuple[Operand, Role, LocalType]], scalar_roles: set[Role]
) -> tuple[LocalType | None, SpmdError | None]:
    name = spec.name
    if not typed:  # only R or I index tensors on this axis (F.embedding(ids, w_plain)): unknown
        return None, None
    # An I operand that cannot carry a gradient needs no backward comms: beside
    # grad-carrying R/V/P operands it acts as R; otherwise it stays I.
    grad_kinds = {lt.kind for o, _, lt in typed if o.can_grad or lt.kind is not Kind.I}
    relax = bool(grad_kinds - {Kind.I})
    eff = [(o, r, REPLICATE if (relax and lt.kind is Kind.I and not o.can_grad) else lt)
           for o, r, lt in typed]
    kinds = {lt.kind for _, _, lt in eff}
    if kinds == {Kind.I, Kind.R} and not any(o.can_grad for o, _, lt in eff if lt.kind is Kind.R):
        # and the other way: R operands none of which carries a gradient (a where condition,
        # a loss's data target, a detached R) beside grad-carrying I operands only need no
        # backward comms either: the result is I (the same values on every rank, and the only
        # gradients are the I operands' own)
        eff = [(o, r, INVARIANT if lt.kind is Kind.R else lt) for o, r, lt in eff]
        kinds = {Kind.I}

    if Kind.I in kinds and len(kinds) > 1:
        inv, inv_role = next((o, r) for o, r, lt in eff if lt.kind is Kind.I)
        # name the operand that makes the mix an error: one that carries a gradient, or is V or
        # P, before an R that carries none (which beside I alone would be fine)
        others = [(o, r, lt) for o, r, lt in eff if lt.kind is not Kind.I]
        other_o, other_role, other = next(
            (x for x in others if x[0].can_grad or x[2].kind is not Kind.R), others[0])
        if other.kind is Kind.P and spec.op_class is OpClass.LINEAR:
            b = bare(inv.text)
            convert = f'convert({b}, "{axis}", src=I, dst=P) to add it into the pending sum'
            reduced = other_o.reduced or inv.reduced
            after = (_after_reduction(reduced, bare(other_o.text), b, name)
                     if reduced else None)
            if reduced:
                # the op is the all_reduce's argument: the reduction "first", pasted in
                # place, would be reduced twice (probe-paste F5)
                fix = (f"add {b} after the reduction: "
                       + (after if after is not None else
                          f"{_fix_reduce(other_o.text, axis, 'I', eff)}, then {b}")
                       + f" in place of {bare(reduced)}; or {convert}")
            else:
                fix = (f'{_fix_reduce(other_o.text, axis, "I", eff)} first, or add it after '
                       f"the reduction, or {convert}")
        elif other.kind is Kind.P and spec.op_class is OpClass.MULTILINEAR:
            fix = (f'reinterpret({bare(inv.text)}, "{axis}", src=I, dst=R) first (R times P is P, and '
                   f'the backward all-reduces its gradient), or {_fix_reduce(other_o.text, axis, "I", eff)}')
        elif other.kind is Kind.P:
            fix = f'{_fix_reduce(other_o.text, axis, "I", eff)} first'
        else:
            fix = (f'reinterpret({bare(inv.text)}, "{axis}", src=I, dst=R) first, so the backward '
                   f"all-reduces its gradient")
            dst_i = _dst_i_reduce(other_o, axis) if other.kind is Kind.R else None
            if dst_i is not None:
                # the R operand is an all_reduce(..., dst=R): dst=I is the one-word fix (the
                # reinterpret, then the result's back to I, adds two backward all-reduces)
                fix = (f"pass dst=I to {dst_i[1]}: {dst_i[0]} (its sum is then I, as "
                       f"{bare(inv.text)} is: no conversion, no all-reduce added to the "
                       f"backward); or {fix}")
            if other_role is Role.INDEX and other_o.cut is not None and other.kind is Kind.V:
                # this rank's part of the whole cut by hand (``full[r * k:(r + 1) * k]``): the
                # shard is convert's (its backward gathers the gradient), which the check mode
                # also types (it sees a plain int: the reinterpret's R cut stays R there)
                x = bare(inv.text)
                fix = (f'convert({x}, "{axis}", src=I, dst=S({other_o.cut})) in place of the cut '
                       f"if it takes this rank's equal part of dim {other_o.cut} in rank order "
                       f"(the shard; its backward gathers the gradient); else {fix} (the "
                       f"check mode, which sees a plain int, types that cut as the whole)")
            if inv.leaf:  # (a computed activation's detach would cut its inputs' gradients)
                fix += (f"; or {receiver(inv.text)}.detach() if {bare(inv.text)} itself needs no "
                        f"gradient (a frozen weight, a count)")
            if other.kind is Kind.V and other_role is not Role.INDEX:
                # the V operand may be the mistake: a statistic of this rank's shard (a max
                # shift, a logsumexp) where the whole's was meant, beside correct I values
                from .collectives import varying_statistic_fix  # imports this module's neighbours

                first = varying_statistic_fix(other_o.text, other, axis, other_o.can_grad,
                                              other_o.leaf, other_o.made)
                cut = _leading_slice(inv.text)
                if cut is not None:
                    # an I slice beside a V (a per-head lambda ``lam[:hl]`` of differential
                    # attention beside this rank's heads): the same rows on every rank, where
                    # each rank's own were meant, most often; a statistic's fix follows
                    # (probe-heads 2: its softmax recipe led, over the key dim, unsharded)
                    base, piece = cut
                    fix = (f"if {base} holds a value per index of a dim sharded on \"{axis}\" (a "
                           f"per-head weight beside this rank's heads), {piece} takes the same "
                           f"rows on every rank: declare {base} S(0) on \"{axis}\" with that dim "
                           f"(each rank holds its own chunk) and use it whole in place of "
                           f"{piece}, or slice it by the {axis} rank after "
                           f'reinterpret({base}, "{axis}", src=I, dst=R) '
                           f'(r = mesh.get_local_rank("{axis}"): '
                           f'reinterpret({base}, "{axis}", src=I, dst=R)[r * k:(r + 1) * k]); '
                           f"else {fix}") + (f"; or, {first}" if first is not None else "")
                elif first is not None:
                    fix = f"{first}; else {fix}"
            if (other.kind is Kind.R and not other_o.text.startswith("self.")
                    and _NAMED.fullmatch(bare(other_o.text)) and dst_i is None
                    and not _gradient_path(other_o.made)):
                # an R that carries no gradient mixes with I (a data mask, a target): detaching
                # it keeps the I operand's gradient, where detaching that one loses it (not
                # offered for a module's attribute: a weight, as a rule; nor for a computed
                # value, ``scale * delta``, whose detach would cut its inputs' gradients)
                fix += (f"; or {receiver(other_o.text)}.detach() if {bare(other_o.text)} needs "
                        f"none (a mask, a target: an R without a gradient mixes with I)")
            factors_v = [o for o, r, lt in eff if r is Role.FACTOR and lt.kind is Kind.V]
            if inv_role is Role.SUMMAND and len(factors_v) > 1 and spec.op_class is OpClass.MULTILINEAR:
                # a bias beside two Varying factors (x sharded on in_features, the weight too:
                # row parallel): each rank's product is a partial sum, and a bias added to
                # each would be summed once per rank by the reduction that must follow
                a, b = factors_v[0].text, factors_v[1].text
                spmd_op = "linear" if name == "linear" else "matmul"
                fix += (f'; if {bare(a)} and {bare(b)} are sharded on the dim {name} sums over '
                        f'(row parallel), add it after the reduction instead: '
                        f'spmd.{spmd_op}({bare(a)}, {bare(b)}, out_partial_axes="{axis}") is '
                        f"the partial sum to all_reduce")
        return None, SpmdError(
            "spmd-invariant-mix",
            f'Invariant on "{axis}" ({_describe(inv, INVARIANT, axis)}) cannot mix with '
            f"{_word(other)} ({_describe(other_o, other, axis)}) in {name}: its gradient would "
            f"need an all-reduce that {name} never issues; {fix}",
        )

    if Kind.P in kinds:
        p_ops = [(o, r) for o, r, lt in eff if lt.kind is Kind.P]
        p0 = p_ops[0][0]
        p_index = next((o for o, r in p_ops if r is Role.INDEX), None)
        if p_index is not None:
            return None, SpmdError(
                "spmd-partial-nonlinear",
                f'Partial on "{axis}" ({_describe(p_index, VARYING, axis)}) cannot be an index of '
                f"{name} (its values are a pending sum, not indices); "
                f"{_fix_reduce(p_index.text, axis, operands=eff)} first",
            )
        nonlin = [o for o, r in p_ops if r is Role.NONLINEAR]
        if spec.op_class is OpClass.NONLINEAR or nonlin:
            who = (nonlin or [p0])[0]
            if not spec.known:
                why = (f"{name} (the checker has no linearity rule for {name}, so it is checked "
                       f"as a non-linear op of a pending sum)")
            else:
                where = "" if spec.op_class is OpClass.NONLINEAR else " in a non-linear position"
                why = f"{name}{where} (a non-linear op of a pending sum)"
            fix = f"{_fix_reduce(who.text, axis, operands=eff)} first"
            meets = next((w for a, w in who.meets if a == axis), None)
            if meets is not None:
                # the result meets an I value (a vocab-parallel loss: log(sum_exp) minus the
                # I target logit): reduced to R, it would need a reinterpret of that I next
                # (probe-paste F4)
                fix = (f"{_fix_reduce(who.text, axis, 'I', eff)} first (the result of {name} "
                       f'meets {meets}, Invariant on "{axis}": dst=I keeps it Invariant)')
            return None, SpmdError(
                "spmd-partial-nonlinear",
                f'Partial on "{axis}" ({_describe(who, VARYING, axis)}) cannot go through '
                f"{why}; {fix}",
            )
        if Kind.V in kinds:
            v_o, v_role, v_lt = next((o, r, lt) for o, r, lt in eff if lt.kind is Kind.V)
            fix = (f"{_fix_reduce(p0.text, axis, operands=eff)} or "
                   f'reduce_scatter({bare(p0.text)}, "{axis}", src=P, dst=V) first')
            if spec.keeps_shard_dims:
                fix = _scatter_like(p0, v_o, v_lt, axis) or fix
            if v_role is Role.NONLINEAR and v_lt.dim is None and v_lt.by_rank is None:
                # a pending sum divided by a per-rank divisor: most often the divisor is this
                # rank's part of a count or a sum never all-reduced (the tokens of the global
                # batch); reducing the numerator instead types as V and divides the global
                # sum by this rank's count
                v = bare(v_o.text)
                fix = (f'all_reduce(reinterpret({v}, "{axis}", src=V, dst=P), "{axis}", src=P, '
                       f"dst=R) first if {v} is this rank's part of a count or a sum (the "
                       f"tokens of a global batch), so the divisor is the whole; else " + fix)
            elif (name in ("mul", "multiply") and v_role is Role.FACTOR and v_lt.dim is None
                  and v_lt.by_rank is None and any(r is Role.FACTOR for _, r in p_ops)):
                # the factor may be a statistic of the global batch made from this rank's
                # counts (a MoE router's f_i = counts / tokens): reducing the pending sum then
                # types as V and multiplies it by this rank's statistic
                v = bare(v_o.text)
                fix += (f"; or, if {v} is meant to be the same on every rank (made from this "
                        f"rank's counts or sums, as a global-batch statistic), all-reduce those "
                        f"where {v} is made")
            return None, SpmdError(
                "spmd-partial-varying",
                f'Partial on "{axis}" ({_describe(p0, VARYING, axis)}) cannot mix with '
                f"{_word(v_lt)} ({_describe(v_o, v_lt, axis)}) in {name}: a pending sum combined "
                f"with per-rank values has no meaning; {fix}",
            )
        factors_p = [o for o, r in p_ops if r is Role.FACTOR]
        if len(factors_p) > 1:
            a, b = factors_p[0], factors_p[1]
            return None, SpmdError(
                "spmd-partial-product",
                f'Partial * Partial on "{axis}" in {name} ({_describe(a, VARYING, axis)}, '
                f"{_describe(b, VARYING, axis)}): the product of two pending sums is not the sum "
                f"of the products; all_reduce one operand first: {_fix_reduce(a.text, axis, operands=eff)}",
            )
        # Additive terms: every summand, plus the product of the factors if there are any.
        product_is_p = bool(factors_p)
        has_factor_terms = any(r is Role.FACTOR for _, r, _ in eff) or Role.FACTOR in scalar_roles
        # (description, is_partial, what it is: an I without a gradient acts as R here)
        terms: list[tuple[str, bool, str]] = []
        if has_factor_terms:
            desc = "the product" if not product_is_p else factors_p[0].text
            terms.append((desc, product_is_p, "a Replicate value"))
        # the first non-P summand operand of an add or sub (not an in-place op's target) and
        # its own kind: converting it to P counts it once in the sum (one rank keeps it)
        summand: tuple[Operand, Kind] | None = None
        for k, ((o, r, lt), (_, _, own)) in enumerate(zip(eff, typed)):
            if r is Role.SUMMAND:
                word = ("an Invariant value without a gradient" if own.kind is Kind.I
                        else "a Replicate value")
                terms.append((_describe(o, lt, axis), lt.kind is Kind.P, word))
                if (lt.kind is not Kind.P and summand is None and name.rstrip("_") in _ADD_SUB
                        and not (k == 0 and name.endswith("_"))):
                    summand = (o, own.kind)
        if Role.SUMMAND in scalar_roles:
            terms.append(("a scalar", False, "a scalar"))
        non_p = [(d, word) for d, is_p, word in terms if not is_p]
        if non_p:
            p_text = p0.text
            other_desc, word = non_p[0]
            what = "a scalar" if other_desc == "a scalar" else f"{word} ({other_desc})"
            # beside an Invariant term the reduction's result is I too (I + I: an R result would
            # meet the I-to-R reinterpret of the next layer's input)
            dst = "I" if word.startswith("an Invariant") else "R"
            fix = f"{_fix_reduce(p_text, axis, dst, eff)} first, or add it after the reduction"
            if summand is not None and not has_factor_terms and len(non_p) == 1:
                # exact for any add or sub, and the sum stays pending (the reduction the code
                # makes of it later still applies, no collective added); the reduction first
                # is exact too, but only where the term is meant to join after it
                o, kind = summand
                num = _divided(bare(o.text))
                spread = ("" if num is None else
                          f"; if the division spreads {num} over the ranks, "
                          f'convert({num}, "{axis}", src={kind.name}, dst=P) in its place')
                fix = (f'convert({bare(o.text)}, "{axis}", src={kind.name}, dst=P) first, so '
                       f"the sum counts it once (one rank keeps it, the others add zeros)"
                       f"{spread}; or {fix}")
            return None, SpmdError(
                "spmd-partial-affine",
                f'Partial on "{axis}" ({_describe(p0, VARYING, axis)}) added to {what} in {name}: '
                f"the other term would be summed once per rank; {fix}",
            )
        return LocalType(Kind.P), None

    if kinds == {Kind.I}:
        return INVARIANT, None
    if kinds == {Kind.R}:
        return REPLICATE, None
    # V, or R with V
    # A shape-preserving op keeps S(i) when every Varying operand is S(i); a Varying
    # operand whose dim is not known makes the result plain V (its layout is unknown).
    dims = {lt.dim for _, _, lt in eff if lt.kind is Kind.V}
    if spec.keeps_shard_dims and len(dims) == 1 and None not in dims:
        (d,) = dims
        return LocalType(Kind.V, d), None
    return VARYING, None


def _scatter_like(p: Operand, v: Operand, v_lt: LocalType, axis: str) -> str | None:
    """The fix of a pending sum ``p`` beside a Varying ``v`` in an elementwise op when the
    dim ``v`` is sharded on is known (its S(d) type, or the check mode's shapes: the one dim
    where ``p`` is a whole multiple of ``v``): reduce_scatter to S(d), as ``v`` is (dst=V
    splits dim 0); or the all_reduce where the shapes agree already (each rank adds its
    own values to the whole); None when neither is known."""
    d = v_lt.dim
    same: bool | None = None
    ps, vs = p.shape, v.shape
    if ps is not None and vs is not None and len(ps) == len(vs):
        diff = [k for k in range(len(ps)) if ps[k] != vs[k] and ps[k] != 1 and vs[k] != 1]
        if not diff:
            same = True
        elif d is None and len(diff) == 1 and vs[diff[0]] > 0 and ps[diff[0]] % vs[diff[0]] == 0:
            d = diff[0]
        elif d is not None:
            same = False
    if same:
        return f"{_fix_reduce(p.text, axis, operands=[(v, None, v_lt)])} first (the shapes agree)"
    if d is None:
        return None
    scatter = (f'reduce_scatter({bare(p.text)}, "{axis}", src=P, dst=S({d})) first, to shard '
               f"it on dim {d} as {bare(v.text)} is")
    return scatter if same is not None or ps is not None else (
        f"{scatter}, or {_fix_reduce(p.text, axis, operands=[(v, None, v_lt)])} first if their shapes agree already")


def _same_size_on(dim: int, ops: Sequence[Operand]) -> bool:
    """Whether the operands' known shapes agree on ``dim`` (and in rank); True when a
    shape is unknown (the static checker: see :func:`_layout`)."""
    shapes = [o.shape for o in ops]
    if any(sh is None for sh in shapes):
        return True
    ndims = {len(sh) for sh in shapes}  # type: ignore[arg-type]
    if len(ndims) != 1:
        return False
    (n,) = ndims
    if not -n <= dim < n:
        return False
    return len({sh[dim] for sh in shapes}) == 1  # type: ignore[index]


def _broadcast_shard_dim(dim: int, sharded: Sequence[Operand], others: Sequence[Operand]) -> int | None:
    """The shard dim of an elementwise result whose S(dim) operands meet operands that do
    not vary (R, I, untyped), when the check mode knows every shape: kept where each other
    operand, right-aligned by broadcasting, does not reach the shard dim or has size 1 there
    (``cat(x_r + b) == cat(x_r) + b`` then), moved right when one of them has more dims::

        x: S(1) [2, 4, 8] + bias [8]          -> S(1)   (the bias does not reach dim 1)
        q: S(1) [2, 4, 2, 2] * cos [4, 1, 2]  -> V      (cos has size 4 on q's dim 1)
        x: S(0) [4, 8] + y [3, 1, 8]          -> S(1)   (x's dim 0 is the result's dim 1)

    None (plain V) when a shape is unknown (the static checker: types carry no shapes)."""
    if not sharded or not _same_size_on(dim, sharded):
        return None
    shapes = [o.shape for o in others]
    rank = sharded[0].shape
    if rank is None or any(sh is None for sh in shapes):
        return None
    n = len(rank)
    if not -n <= dim < n:
        return None
    pos = dim % n
    widest = n
    for sh in shapes:
        assert sh is not None
        at = pos + len(sh) - n  # the other operand's dim aligned with the shard dim
        if at >= 0 and sh[at] != 1:
            return None
        widest = max(widest, len(sh))
    return dim + widest - n if dim >= 0 else dim


def _known_rank(o: Operand) -> int | None:
    """The operand's rank: its shape's (the check mode), or the rank the adapter knows
    without it (``Operand.ndim``: the static checker's 0-d values); None when unknown."""
    return len(o.shape) if o.shape is not None else o.ndim


def _short_of(dim: int, o: Operand) -> bool:
    """Whether broadcasting provably keeps the operand ``o`` (of no shard dim: R, I,
    untyped) off the shard dim ``dim`` of the others, whatever their rank, by its rank
    alone: broadcasting aligns dims from the right, so a 0-d operand reaches no dim, and
    one of rank k no dim before the last k (``dim`` counted from the back below -k)::

        p: S(0) * alpha: R, 0-d              -> S(0)   (``cat(alpha * p_r) == alpha * cat(p_r)``)
        h: S(-2) + bias: R, rank 1          -> S(-2)
        p: S(0) * w: R, rank unknown        -> V      (w may have the size of p's dim 0)

    A per-rank 0-d value (V) is no such operand: ``cat(a_r * p_r)`` scales each block by
    its own rank's number, which is no global tensor's block (V)."""
    k = _known_rank(o)
    return k is not None and (k == 0 or (dim < 0 and k < -dim))


def _aligned_shard_dim(axis: str, ops: Sequence[Operand]) -> int | None:
    """The shard dim of an elementwise result when every operand's shape is known (the check
    mode): broadcasting aligns the operands' dims from the right, so the Varying operands
    must be sharded on one dim counted from the back, with one size there (a broadcast S(i)
    operand of size 1 has no global meaning), and every other operand must have size 1 there
    or not reach it (:func:`_broadcast_shard_dim`)::

        h: S(-1) [2, 3, 8] + bias: S(0) [8]     -> S(-1)  (a 1-d bias's dim 0 is its dim -1)
        h: S(2)  [2, 3, 8] + bias: S(-1) [8]    -> S(2)
        x: S(0)  [4, 8]    + y: S(0) [3, 4, 8]  -> V      (x's dim 0 is y's dim 1)

    The result names its dim as the widest Varying operand does (from the front or the back).
    None (plain V) where they do not align."""
    widest = max(len(o.shape) for o in ops)  # type: ignore[arg-type]
    back: int | None = None  # the shard dim counted from the back
    size: int | None = None
    declared: tuple[int, int] | None = None  # (ndim, dim as written) of the widest sharded
    others: list[tuple[int, ...]] = []
    for o in ops:
        sh = o.shape
        assert sh is not None
        t = o.type.get(axis)  # type: ignore[union-attr]
        if t is None or t.kind is not Kind.V:
            others.append(sh)
            continue
        n = len(sh)
        ok, d = t.at_rank(n) if n > 0 else (False, None)
        if not ok or d is None or not -n <= d < n:
            return None
        b = d % n - n
        if (back is not None and b != back) or (size is not None and sh[b] != size):
            return None
        back, size = b, sh[b]
        if declared is None or n > declared[0]:
            declared = (n, d)
    if back is None or declared is None:
        return None
    for sh in others:
        if len(sh) + back >= 0 and sh[back] != 1:
            return None
    return back if declared[1] < 0 else back + widest


def _layout(spec: OpSpec, axis: str, tensor_ops: Sequence[tuple[Operand, Role]],
            dim: int | None, reduction: Reduction | None) -> int | None:
    """The shard dim of a Varying result on ``axis`` (None: plain V, the layout unknown).

    S(i) means the concatenation of the locals on dim i is the global tensor, so a result
    keeps a dim only where the op commutes with that concatenation:

    - an elementwise op (``keeps_shard_dims``) when *every* Varying operand is S(i) on the
      axis with the same i: beside an R, I or untyped tensor ``y``,
      ``cat(x_r + y) == cat(x_r) + y`` only if ``y`` has size 1 on dim i or does not reach
      it; types carry no shapes, so statically the result is plain V (which a declared S(i)
      still accepts), and the check mode reads the shapes (:func:`_broadcast_shard_dim`).  When the
      adapter knows the shapes (check mode), the operands must also agree in rank and in
      size on dim i (a broadcast S(i) operand of size 1 there has no global meaning);
      the static checker assumes it (the only case where the operands' globals fit);
    - a normalising op (``NORMALISING``: softmax, layer_norm, ...) on an S(i) input when
      the call states the normalised dims and they provably exclude i
      (:func:`shard_dim_after`: a literal dim of the same sign as i, or any dim once the
      rank is known); its other operands (weight, bias) lie along the normalised dims and
      must not vary on the axis;
    - a reduction or scan on an S(i) operand when the call states its dims
      (:func:`shard_dim_after`).
    """
    ops = [o for o, _ in tensor_ops]
    if spec.name in NORMALISING:
        if not ops or reduction is None:
            return None
        first = ops[0].type.get(axis)  # type: ignore[union-attr]
        if first is None or first.kind is not Kind.V or first.dim is None:
            return None
        for o in ops[1:]:
            t = o.type.get(axis)  # type: ignore[union-attr]
            if t is not None and t.kind is Kind.V:
                return None
        r = reduction if ops[0].shape is None else Reduction(
            reduction.dims, reduction.keepdim, len(ops[0].shape))
        return shard_dim_after(spec.name, first.dim, r)
    if (spec.keeps_shard_dims and reduction is None and ops
            and all(o.shape is not None for o in ops)):
        return _aligned_shard_dim(axis, ops)  # the check mode: the shapes say how they align
    if dim is not None:  # an elementwise op: every Varying operand S(dim)
        if not spec.keeps_shard_dims:
            return None
        sharded: list[Operand] = []
        others: list[Operand] = []
        for o in ops:
            t = o.type.get(axis)  # type: ignore[union-attr]
            if t is not None and t.kind is Kind.V:
                if t.dim != dim:
                    return None
                sharded.append(o)
            else:
                others.append(o)
        # beside R, I or untyped tensors: where their shapes say so; one of a known rank
        # that does not reach the shard dim (a 0-d value: ``alpha * p``) is left out
        others = [o for o in others if not _short_of(dim, o)]
        if others:
            return _broadcast_shard_dim(dim, sharded, others)
        return dim if _same_size_on(dim, sharded) else None
    if reduction is not None:
        dims = {t.dim for o in ops if (t := o.type.get(axis)) is not None  # type: ignore[union-attr]
                and t.kind is Kind.V}
        if len(dims) == 1 and None not in dims:
            return shard_dim_after(spec.name, dims.pop(), reduction)  # type: ignore[arg-type]
    return None


def _result_layout(spec: OpSpec, axis: str, tensor_ops: Sequence[tuple[Operand, Role]],
                   dim: int | None, reduction: Reduction | None) -> LocalType:
    """The Varying result's layout on ``axis``: :func:`_layout` where the operands' rank is
    known (check mode) or no operand has a layout to keep; else (the static checker) the
    layout at every rank the operands can have, all of the same rank (types carry no
    shapes)::

        x: S(0); softmax(x, dim=-1)        rank 1: V; rank >= 2: S(0)
        x: S(1); x.sum(dim=0)              rank 1 impossible; rank r >= 2: S(0) at rank r - 1

    which :func:`.types.from_ranks` folds into S(i), V, or a rank-dependent layout."""
    placed = any((t := o.type.get(axis)) is not None  # type: ignore[union-attr]
                 and (t.dim is not None or t.by_rank is not None) for o, _ in tensor_ops)
    if not placed or any(o.shape is not None for o, _ in tensor_ops):
        return LocalType(Kind.V, _layout(spec, axis, tensor_ops, dim, reduction))
    layouts: dict[int, int | None] = {}
    for rank in range(1, RANKS + 1):
        if reduction is not None and reduction.dims is not None and any(
                not -rank <= x < rank for x in reduction.dims):
            continue
        ops_at: list[tuple[Operand, Role]] = []
        dims_at: set[int | None] = set()
        possible = True
        for o, role in tensor_ops:
            t = o.type.get(axis)  # type: ignore[union-attr]
            if t is not None and t.kind is Kind.V:
                possible, d = t.at_rank(rank)
                if not possible:
                    break
                dims_at.add(d)
                if t.by_rank is not None:
                    o = replace(o, type=o.type.replace(axis, LocalType(Kind.V, d)))  # type: ignore[union-attr]
            ops_at.append((o, role))
        if not possible:
            continue
        dim_at = next(iter(dims_at)) if spec.keeps_shard_dims and len(dims_at) == 1 else None
        red_at = None if reduction is None else Reduction(reduction.dims, reduction.keepdim, rank)
        out_rank = rank
        if (red_at is not None and spec.name in REDUCTIONS and not red_at.keepdim
                and spec.name not in NORMALISING):
            out_rank = 0 if not red_at.dims else rank - len({x % rank for x in red_at.dims})
        if out_rank >= 1:
            layouts[out_rank] = _layout(spec, axis, ops_at, dim_at, red_at)
    return from_ranks(layouts)


def _moved_layout(axis: str, tensor_ops: Sequence[tuple[Operand, Role]], move: DimMove) -> LocalType:
    """The Varying result's layout on ``axis`` of a view or join (:mod:`.views`): at each
    rank the operands can have (the one rank their shape gives in check mode), the dim
    :func:`.views.moved_dim` moves the shard dim to, when the operand it moves is S(i)
    there (for a join: every tensor operand, S(i) with the same i), and no other operand
    varies.  Written counted from the front or the back, whichever stays the same across
    more ranks (the operand's own way on a tie)::

        x: S(-1); x.transpose(0, 1)     rank 2: dim 0 (= -2); rank >= 3: dim -1
        ->  V (S(-2) at rank 2, S(-1) at rank >= 3)
    """
    ops = [o for o, _ in tensor_ops]
    if not ops:
        return VARYING
    joined = ops if move.family in ("cat", "stack") else ops[:1]
    if any((t := o.type.get(axis)) is not None and t.kind is Kind.V  # type: ignore[union-attr]
           for o in ops[len(joined):]):
        return VARYING  # a varying index, or the start of a narrow
    shape = ops[0].shape
    first = ops[0].type.get(axis)  # type: ignore[union-attr]
    if first is None or first.kind is not Kind.V:
        return VARYING
    if move.family == "squeeze":
        d = first.dim if shape is None else first.at_rank(len(shape))[1]
        return VARYING if d is None else LocalType(Kind.V, squeezed_dim(move, d, shape))
    ranks = range(1, RANKS + 1) if shape is None else (len(shape),)
    layouts: dict[int, int | None] = {}
    negative = (first.at_high_ranks().dim or 0) < 0
    if shape is None and move.family == "reshape" and not any(
            isinstance(v, SamePrefix) for v in move.args[0]):  # type: ignore[attr-defined]
        # x.view(b, s, -1, hd): the target's length is the result's rank, so the dim counted
        # from the front holds at every rank the operand can have, and the positive dims the
        # code goes on with (transpose(1, 2)) stay rank-free (the check mode knows the rank:
        # the operand's own way, as every view)
        negative = False
    for rank in ranks:
        shape_of = moved_dim(move, 0, rank, shape)
        if shape_of is None or shape_of[0] < 1:
            continue  # the op takes no operand of this rank, or leaves a scalar
        dims: set[int | None] = set()
        for o in joined:
            t = o.type.get(axis)  # type: ignore[union-attr]
            if t is None or t.kind is not Kind.V:
                dims.add(None)
                continue
            possible, d = t.at_rank(rank)
            if not possible:
                break
            dims.add(d)
        else:
            d = dims.pop() if len(dims) == 1 else None
            at = moved_dim(move, d, rank, shape) if d is not None else None
            j = None if at is None else at[1]
            if shape_of[0] in layouts and layouts[shape_of[0]] != j:
                j = None  # operands of two ranks give this result rank (a reshape): either way
            layouts[shape_of[0]] = j
    return from_ranks_signed(layouts, negative)


# propagate's verdicts that had no error, by what the rule reads (the operands' types,
# can_grad, roles and known shapes, never their texts): the checker types the same few combinations at
# thousands of call sites.  A verdict with an error is never stored (its messages name the
# operands), so a hit returns exactly what the rule would.
_VERDICTS: dict[tuple, SpmdType] = {}
_VERDICTS_MAX = 50_000


def propagate(spec: OpSpec | str, operands: Sequence[Operand], *, strict: bool = False,
              reduction: Reduction | None = None,
              move: DimMove | Contraction | Pattern | None = None) -> Result:
    """Type one op: the result's type per axis, and every violation.

    Axes an operand does not mention are skipped for that operand (gradual); an
    axis no operand mentions is unknown in the result.  On an axis with an error
    the result is unknown there, and stays so through later ops (``SpmdType.failed``),
    so one mistake is reported once.  ``reduction``: the
    dims a reduction or scan reduces, when the call states them (see REDUCTIONS);
    ``move``: the dims a view or join moves (:mod:`.views`), or the contraction an einsum,
    matmul, linear or attention call states (:mod:`.contractions`).
    """
    if isinstance(spec, str):
        spec = classify(spec)
    if spec.name in RANDOM_LIKE:  # a new draw shaped like its template
        t = operands[0].type if operands else None
        return Result(random_like_type(t) if t is not None else SpmdType())
    # a registered spec is keyed by its name (hashing the dataclass costs more)
    key = (spec.name if OP_SPECS.get(spec.name) is spec else spec, strict, reduction, move,
           tuple((o.type, o.can_grad, o.role, o.shape, o.zero, o.ndim) for o in operands))
    hit = _VERDICTS.get(key)
    if hit is not None:
        return Result(hit)
    result = _propagate(spec, operands, strict, reduction, move)
    if not result.errors:
        if len(_VERDICTS) >= _VERDICTS_MAX:
            _VERDICTS.clear()
        _VERDICTS[key] = result.type
    else:
        result.errors = merge_axis_errors(result.errors)
    return result


def propagate_each(spec: OpSpec | str, operands: Sequence[Operand], *,
                   strict: bool = False) -> list[Result]:
    """A :data:`PER_OPERAND_OPS` op: one result per tensor operand, each typed by the op's
    rule on that operand alone (Python scalars, which these ops turn into tensors, are
    untyped results)."""
    return [propagate(spec, [o], strict=strict) if o.type is not None else Result(SpmdType())
            for o in operands]


def _propagate(spec: OpSpec, operands: Sequence[Operand], strict: bool,
               reduction: Reduction | None, move: DimMove | Contraction | Pattern | None) -> Result:
    errors: list[SpmdError] = []
    axes: dict[str, None] = {}
    scalar_roles: set[Role] = set()
    tensor_ops: list[tuple[Operand, Role]] = []
    failed: set[str] = set()
    for i, o in enumerate(operands):
        role = o.role or spec.role(i)
        if role is Role.OVERWRITTEN or role is Role.TEMPLATE:
            continue
        if o.type is None:
            if role is not Role.INDEX and not (o.zero and role is Role.SUMMAND):
                scalar_roles.add(role)
            continue
        tensor_ops.append((o, role))
        for a, _ in o.type.axes:
            axes[a] = None
        failed.update(o.type.failed)
    if strict and axes:
        for o, role in tensor_ops:
            if not o.type and not o.type.failed and role is not Role.INDEX:  # type: ignore[union-attr]
                errors.append(SpmdError(
                    "spmd-untyped",
                    f"untyped tensor {o.text} in {spec.name} with typed operands (strict mode); "
                    f"annotate it or spmd.declare({bare(o.text)}, Tensor[...])",
                ))
                break
    out: dict[str, LocalType] = {}
    summing = summing_name(spec)
    if reduction is None:
        reduction = loss_reduction(spec)  # a loss's own mean or sum, as a .mean()'s
    for axis in sorted(axes):
        if axis in failed:  # unknown after an earlier error: no second error here
            continue
        typed = [(o, r, lt) for o, r in tensor_ops
                 if (lt := o.type.get(axis)) is not None  # type: ignore[union-attr]
                 and (r is not Role.INDEX or lt.kind is Kind.V or lt.kind is Kind.P)]
        lt, err = _rule_on_axis(spec, axis, typed, scalar_roles)
        if (err is None and lt is not None and lt.kind is Kind.V and reduction is not None
                and summing in SHARD_SUMMING and tensor_ops):
            err = reduced_partial_error(summing, tensor_ops[0][0], axis, reduction)
            if err is not None and reduction.pending:
                err = pending_left_error(err, reduction.partial_axes, axis)
        if (err is None and lt is not None and lt.kind is Kind.V and reduction is not None
                and summing in SCANS and tensor_ops):
            err = scan_along_shard_error(summing, tensor_ops[0][0], axis, reduction)
        if (err is None and lt is not None and lt.kind is Kind.V and reduction is not None
                and spec.name in NORMALISING and tensor_ops):
            err = normalised_along_shard_error(spec.name, tensor_ops[0][0], axis, reduction)
        if err is None and lt is not None and lt.kind is Kind.V and isinstance(move, Contraction):
            err = _causal_queries_error(spec.name, move, axis, tensor_ops)
            if err is None:
                declared = axis in move.partial_axes or "*" in move.partial_axes
                at_axis = [(o.type.get(axis), o.shape) for o, _ in tensor_ops]  # type: ignore[union-attr]
                block = diagonal_block(move, at_axis, partial_ok=declared)
                if block is not None:
                    err = _rank_free_error(spec.name, move, axis, tensor_ops, block, at_axis,
                                           declared)
            if err is None and axis not in move.partial_axes and "*" not in move.partial_axes \
                    and partial_sum(move, [(o.type.get(axis), o.shape)  # type: ignore[union-attr]
                                           for o, _ in tensor_ops]):
                err = implicit_partial_error(spec.name, move, axis, tensor_ops, own=not move.pending)
                if move.pending:
                    err = pending_left_error(err, move.partial_axes, axis)
        if lt is not None and lt.kind is Kind.V:
            if (isinstance(move, Contraction) and move.pending and axis in move.partial_axes
                    and err is None and partial_sum(move, [(o.type.get(axis), o.shape)  # type: ignore[union-attr]
                                                           for o, _ in tensor_ops])):
                lt = LocalType(Kind.P)  # the pending partial sum a reduction reads
            elif (reduction is not None and reduction.pending and axis in reduction.partial_axes
                  and err is None and tensor_ops and summing in SHARD_SUMMING
                  and reduced_partial_sum(summing, tensor_ops[0][0].type.get(axis), axis,  # type: ignore[union-attr]
                                          replace(reduction, partial_axes=()), tensor_ops[0][0].shape)):
                lt = LocalType(Kind.P)  # the pending sum a typed reduction reads
            elif isinstance(move, Contraction):
                lt = contracted_layout(move, [(o.type.get(axis), o.shape)  # type: ignore[union-attr]
                                              for o, _ in tensor_ops])
            elif isinstance(move, Pattern):  # an einops call (einops_rule)
                lt = pattern_layout(move, [(o.type.get(axis), o.shape)  # type: ignore[union-attr]
                                           for o, _ in tensor_ops])
            elif move is not None:
                lt = _moved_layout(axis, tensor_ops, move)
            elif spec.reduced_as in CLASS_LOSSES_NONE:
                lt = _class_loss_layout(axis, tensor_ops)
            else:
                lt = _result_layout(spec, axis, tensor_ops, lt.dim, reduction)
        if err is not None:
            errors.append(err)
            failed.add(axis)
        elif lt is not None and not (_same_values_kind(lt, typed) and _untyped_on(axis, tensor_ops)):
            out[axis] = lt
    return Result(SpmdType.of(out, failed=failed), errors)



def _causal_queries_error(name: str, c: Contraction, axis: str,
                          tensor_ops: Sequence[tuple[Operand, Role]]) -> SpmdError | None:
    """``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` with q sharded on its
    query dim L (dim -2) on ``axis`` and the keys whole there (k R or I): torch builds the
    causal mask from the local query positions (each rank's first query is position 0), the
    global positions only on the axis's first rank: wrong numbers on the others.  An
    ``is_causal`` that is not a literal may be True.  The same rule as global SPMD's
    (:func:`.global_spmd.attention`).

    Not an error: q a V of unknown layout (a data-parallel batch is V, and its mask is
    right; gradual), keys sharded too (each rank's own queries against its own keys: the
    diagonal block of ring attention, where the local mask is the right one), untyped keys.
    The static checker, which sees no ranks, reads q at attention's documented 4-d
    ``[N, H, L, E]`` (so ``S(2)`` is the query dim there; ``S(-2)`` at every rank); the
    check mode at q's rank."""
    if c.family != "attention" or c.causal is False or len(tensor_ops) < 2:
        return None
    q, k = tensor_ops[0][0], tensor_ops[1][0]
    qt, kt = q.type.get(axis), k.type.get(axis)  # type: ignore[union-attr]
    if qt is None or kt is None or qt.kind is not Kind.V or kt.kind not in (Kind.R, Kind.I):
        return None
    rank = len(q.shape) if q.shape is not None else 4
    if rank < 2:
        return None
    possible, d = qt.at_rank(rank)
    if not possible or d is None or d % rank != rank - 2:
        return None
    qd = qt.dim if qt.dim is not None else d
    given = "is_causal=True" if c.causal is True else "an is_causal that may be True"
    qx, kx = bare(q.text), bare(k.text)
    gather = f'all_gather({qx}, "{axis}", src=S({qd}), dst=R)'
    return SpmdError(
        "spmd-global",
        f'{name} with {given}: {q.text} is sharded on its query dim {qd} on "{axis}" '
        f"({_describe(q, qt, axis)}) and {k.text} holds every key ({_describe(k, kt, axis)}); "
        f"torch builds the causal mask from the local query positions, the global ones only on "
        f"the first rank: pass attn_mask=q_pos[:, None] >= torch.arange({kx}.size(-2)) instead, "
        f"q_pos = r * {qx}.size(-2) + torch.arange({qx}.size(-2)) (this rank's global query "
        f'positions, r its index on "{axis}"), or gather the queries first: {gather}',
    )


def diagonal_block_error(name: str, c: Contraction, axis: str,
                         tensor_ops: Sequence[tuple[Operand, Role]],
                         block: tuple[tuple[int, int], tuple[int, int]]) -> SpmdError:
    """A contraction whose operands are sharded on ``axis`` on two different dims that both
    stay in the result (:func:`.contractions.diagonal_block`): each rank holds one diagonal
    block (its own rows of one operand against its own of the other), no shard of the whole;
    typed V it passed both checkers with wrong numbers (a cross-attention K projection of the
    sequence-parallel encoder output, ``F.linear(enc_s: S(1), wk: S(0))``, the all_gather
    forgotten; the LM head alike).  Global SPMD says the same (a mesh axis shards one dim).

    The fix gathers the activation, not the weight: ``F.linear``'s input, else the operand
    that is no leaf (a module's attribute, a parameter) when the other is one, else the one of
    more dims (an activation has batch dims a weight lacks; einsum's terms say it statically),
    else the first.  Gathering it
    keeps the weight sharded (the tensor-parallel layout: each rank its own features for
    every position, Megatron's sequence-parallel all_gather before a column-parallel linear);
    gathering the weight would copy it whole to every rank.  A block on purpose (ring
    attention's first ``q @ k.transpose(-2, -1)`` with q and k both sharded on the sequence,
    before the keys rotate) widens one operand to a plain V first: ``spmd.declare(k, ...V)``
    (both checkers type the result a plain V, as they do a V of unknown layout)."""
    (i, di), (j, dj) = block
    a, b = tensor_ops[i][0], tensor_ops[j][0]
    ax = f'"{axis}"'

    terms = (c.equation or "").replace(" ", "").split("->")[0].split(",")

    def rank_of(k: int) -> int:  # the shape's, else einsum's term's (``...`` as one dim)
        o = tensor_ops[k][0]
        if o.shape is not None:
            return len(o.shape)
        if c.family == "einsum" and k < len(terms):
            return len(terms[k].replace("...", "."))
        return -1

    if c.family == "linear":
        g = i if i == 0 else (j if j == 0 else i)
    elif a.leaf != b.leaf:
        g = j if a.leaf else i
    elif rank_of(i) != rank_of(j) and min(rank_of(i), rank_of(j)) >= 0:
        g = i if rank_of(i) > rank_of(j) else j
    else:
        g = i
    o, d = (a, di) if g == i else (b, dj)
    other = b if g == i else a
    lta, ltb = a.type.get(axis), b.type.get(axis)  # type: ignore[union-attr]
    assert lta is not None and ltb is not None  # diagonal_block: both Varying there
    texts = ", ".join(x.text for x, _ in tensor_ops)
    if c.family == "einsum":
        texts = repr(c.equation).replace("'", '"') + ", " + texts
    gx, ox = bare(o.text), bare(other.text)
    return SpmdError(
        "spmd-global",
        f"{name}({texts}): mesh axis {ax} shards dim {di} of {a.text} "
        f"({_describe(a, lta, axis)}) and dim {dj} of {b.text} ({_describe(b, ltb, axis)}), "
        f"two dims that both stay in the result: each rank holds one diagonal block (its own "
        f"part of each), no shard of the whole result nor anything a later op can use as one; "
        f'gather {gx} first: all_gather({gx}, {ax}, src=S({d}), dst=R) ({ox} stays sharded: each '
        f"rank computes its own part of {ox} against all of {gx}, the tensor-parallel layout; "
        f"gather the activation, not a weight, which would be copied whole to every rank); a "
        f"block meant (ring attention's q @ k.transpose(-2, -1) before the keys rotate): pass "
        f"spmd.declare({ox}, Tensor[V[{ax}]]) in its place (a plain V: no layout to mix)",
    )


def _rank_free_error(name: str, c: Contraction, axis: str,
                     tensor_ops: Sequence[tuple[Operand, Role]],
                     block: tuple[tuple[int, int], tuple[int, int]],
                     at_axis: Sequence[tuple[LocalType | None, tuple[int, ...] | None]],
                     declared: bool) -> SpmdError:
    """The error of a contraction :func:`.contractions.diagonal_block` finds a block in.
    Statically a ``matmul`` (``a @ b``) of unknown ranks may be a block read 2-d or batched
    and an undeclared dot product read 1-d, every reading wrong (``fi: S(0) @ ft.T: S(-1)``,
    CLIP's logits with the gather forgotten): the message says what the 1-d reading would
    be, and how to declare it if it is meant."""
    err = diagonal_block_error(name, c, axis, tensor_ops, block)
    if c.op != "matmul" or declared or any(shape is not None for _, shape in at_axis):
        return err
    ax = f'"{axis}"'
    if summed_at_ranks(c, at_axis, [1] * len(at_axis)):
        texts = ", ".join(bare(o.text) for o, _ in tensor_ops)
        err = SpmdError(err.code, err.message + (
            f" (the operands' ranks are not known here: read 1-d, {name}({texts}) is a dot "
            f"product over the dim sharded on {ax}, a partial sum; if that is meant, pass its "
            f"result straight to spmd.reinterpret(..., {ax}, src=V, dst=P))"))
    return err


# The contraction ops' spmd counterparts that take out_partial_axes (SPEC section 6)
_PARTIAL_COUNTERPARTS = {"linear": "linear", "einsum": "einsum"}


def pending_left_error(err: SpmdError, reduced: Sequence[str], axis: str) -> SpmdError:
    """``err`` (a pending partial sum on ``axis``, :func:`implicit_partial_error` or
    :func:`reduced_partial_error`) for a value whose reduction (a typed all_reduce or
    reduce_scatter with src=P, a raw in-place sum all-reduce) takes the parts over
    ``reduced`` but not ``axis``: it says which axis the reduction misses."""
    from .collectives import pending_left_note

    on = [a for a in reduced if a != "*"]
    if not on or axis in on:
        return err
    return SpmdError(err.code, err.message + pending_left_note("reduction", on, [axis]))


def implicit_partial_error(name: str, c: Contraction, axis: str,
                           tensor_ops: Sequence[tuple[Operand, Role]], own: bool = True) -> SpmdError:
    """A contraction summing over a dim sharded on ``axis`` in every Varying operand
    (:func:`.contractions.partial_sum`): each rank's result is its part of a sum over the
    ranks, a Partial, which local SPMD, as global SPMD (SPEC section 6), never makes
    implicitly: typed V, a loss or a softmax of it passed both checkers with wrong numbers
    (CLIP's ``q @ k.t()`` over a tp-sharded embedding dim).  The fix names the call that
    says so: ``spmd.matmul/linear/einsum(..., out_partial_axes=axis)``, then an all_reduce
    where the whole value is needed; ``own`` (not where the result goes to a typed reduction,
    which means the sum): last, the operand declared V for this rank's own block's value."""
    ax = f'"{axis}"'
    texts = [bare(o.text) for o, _ in tensor_ops]
    described = ", ".join(
        f"{o.text}: {lt.describe()}" for o, _ in tensor_ops
        if (lt := o.type.get(axis)) is not None and lt.kind is Kind.V)  # type: ignore[union-attr]
    spmd_op = _PARTIAL_COUNTERPARTS.get(c.family, "matmul")
    bias = ""
    if c.family == "linear" and len(texts) > 2:
        bias = f" (then add the bias {texts[2]} after the all_reduce)"
        texts = texts[:2]
    if c.op in ("vdot", "linalg_vecdot") and texts:
        texts[0] = receiver(texts[0]) + ".conj()"  # their first operand conjugated
    equation = c.equation
    if c.family in ("inner", "tensordot", "vecdot"):
        # spmd.einsum at the operands' ranks, where known (the check mode; a static 1-d
        # x.flatten()); elsewhere the reinterpret of the call's result
        equation = equation_at(c, [len(o.shape) if o.shape is not None
                                   else (c.ranks[i] if i < len(c.ranks) else None)
                                   for i, (o, _) in enumerate(tensor_ops)])
        spmd_op = "einsum"
    elif c.family == "dot":
        # 1-d operands only: "k,k->", which the static checker reads 0-d whatever the
        # operands (spmd.matmul(r, p, ...) is 0-d only where both are seen 1-d: an all-reduced
        # p @ Ap of CG beside an S(0) r then stayed V, and r's reassignment an [assignment])
        equation, spmd_op = "k,k->", "einsum"
    if spmd_op == "einsum" and equation is not None:
        args = ", ".join([repr(equation).replace("'", '"'), *texts])
    else:
        args = ", ".join(texts)
    what = {"einsum": "the contraction", "inner": "the contraction", "dot": "the dot product",
            "tensordot": "the contraction", "vecdot": "the contraction"}.get(c.family, "the matmul")
    head = ", ".join(o.text for o, _ in tensor_ops)
    if c.family == "einsum":
        head = repr(c.equation).replace("'", '"') + ", " + head
    reinterpret = f"spmd.reinterpret(..., {ax}, src=V, dst=P)"
    if spmd_op == "einsum" and equation is None:
        fix = f"pass {what}'s result straight to {reinterpret}, which is P on {ax}"
        alternative = (f"or spmd.einsum(<its equation at the operands' ranks>, {', '.join(texts)}, "
                       f"out_partial_axes={ax})")
    else:
        fix = f"spmd.{spmd_op}({args}, out_partial_axes={ax}), which is P on {ax}{bias}"
        alternative = f"or pass {what}'s result straight to {reinterpret}"
    return SpmdError(
        "spmd-global",
        f"{name}({head}) sums over a dim sharded on {ax} in "
        f"every operand that varies there ({described}): each rank's result is its part of a "
        f"sum over the ranks (a Partial), not a value of its own (V), so a loss, a softmax or a "
        f"norm of it would be wrong; say so: {fix}, then "
        f"all_reduce(..., {ax}, src=P, dst=R) where the whole value is needed ({alternative})"
        f"{_own_contraction(what, axis, tensor_ops) if own else ''}",
    )


def _own_contraction(what: str, axis: str, tensor_ops: Sequence[tuple[Operand, Role]]) -> str:
    """:func:`implicit_partial_error`'s last alternative: this rank's own block's contraction
    meant (a chunked linear attention's per-rank state, passed to the later ranks by an
    exclusive scan of the ranks' totals: session 45's probe, where the all_reduce fix pasted
    would give every rank the whole's state), an operand declared plain V first, the widening
    the pending-sum rule offers too; "" when no operand has a known shard layout there."""
    for o, _ in tensor_ops:
        lt = o.type.get(axis) if o.type is not None else None
        if lt is not None and lt.kind is Kind.V and (lt.dim is not None or lt.by_rank is not None):
            return (f"; if this rank's own {what.partition(' ')[2]} is meant (a per-rank state "
                    f"or total, as a chunked scan passes to the later ranks), declare an operand "
                    f'V first: spmd.declare({bare(o.text)}, Tensor[V["{axis}"]])')
    return ""


# Sum-like reductions (:func:`reduced_partial_sum`): over a dim sharded on an axis, each rank's
# result is its part of a sum over the ranks (mean: of a sum of the ranks' means); a norm's is
# no part of anything (the norm of this rank's block)
PENDING_REDUCTIONS = frozenset("sum nansum mean nanmean".split()) | LOSS_MEANS | LOSS_SUMS | SEGMENT_SUMS
# ... of which the means: each rank's block mean is no part of a sum (the ranks' means sum to
# the axis size times the whole's mean, blocks of one size): a reinterpret(V->P) or a summing
# reduction of one is an error, an averaging one (op="avg") its resolution
MEAN_REDUCTIONS = frozenset("mean nanmean".split()) | LOSS_MEANS


def pending_kind(names: Sequence[str]) -> str:
    """The kind of a pending value made of the pending reductions ``names`` (one, or those
    added, stacked, scaled into it), as ``collectives.PENDING_REDUCE_OPS`` reads it: "mean"
    (means only), "sum" (no mean), "mixed" (both)."""
    means = sum(1 for n in names if n in MEAN_REDUCTIONS)
    return "sum" if not means else "mean" if means == len(names) else "mixed"
# The ops through which a pending sum (:func:`reduced_partial_sum`) stays one, read by both
# adapters (the plugin's declared_partials, the check mode's _carried_pending): each rank's
# result is then its part of the same kind of sum over the ranks.  + and - of pending sums
# (a V term added: the reinterpret(V->P) claims it as part of the sum), in place too;
PENDING_ADD = frozenset("add sub __add__ __radd__ __sub__ __rsub__ __iadd__ __isub__ add_ sub_".split())
# a Python number's * or / (a tensor factor: no), in place too, and negation;
PENDING_SCALE = frozenset("mul div true_divide multiply divide neg negative positive __mul__ __rmul__ "
                          "__truediv__ __neg__ __pos__ __imul__ __itruediv__ mul_ div_ neg_".split())
# ... and a tensor's * or / when that tensor is the same on every rank of the pending axes
# (:func:`scales_pending`): (sum_r x_r) / c = sum_r (x_r / c), the global-token mean of
# torchtitan and Megatron, ``(per * mask).sum() / n_tok`` with ``n_tok`` all-reduced
PENDING_TENSOR_SCALE = frozenset("mul div true_divide multiply divide __mul__ __rmul__ __truediv__ "
                                 "__imul__ __itruediv__ mul_ div_".split())
_PENDING_DIVIDES = frozenset("div true_divide divide __truediv__ __itruediv__ div_".split())


def scales_pending(name: str, pending_left: bool, factor: Sequence[LocalType | None]) -> bool:
    """Whether op ``name`` (``PENDING_TENSOR_SCALE``, in the engine's operand order) of a
    pending sum and a tensor ``c`` keeps the sum pending: ``s * c``, ``c * s``, ``s / c``
    (``pending_left``: the sum is the left operand; ``c / s`` is no linear map of it), in
    place too, with ``factor`` ``c``'s type on each of the pending axes R or I (the same
    on every rank), or unknown there (None: an untyped ``c``, the gradual rule: no error
    from what is not known).  V or P there: no (each rank's ``x_r / c_r`` is no part of
    the sum, or a product of two sums)."""
    if name not in PENDING_TENSOR_SCALE or (not pending_left and name in _PENDING_DIVIDES):
        return False
    return all(lt is None or lt.kind in (Kind.R, Kind.I) for lt in factor)
# a stack or cat whose tensor items are all pending on the same axes (or V items, as + allows:
# Megatron's ``torch.stack([(losses * mask).sum(), mask.sum()])``);
PENDING_JOIN = frozenset("stack cat concat concatenate hstack vstack".split())
# the methods that keep each element's value: views, copies, dtype changes, an index.
PENDING_KEEP = frozenset("detach float double half bfloat16 clone contiguous to unsqueeze squeeze "
                         "reshape view flatten ravel __getitem__".split())
# ... except a cast to an integer or bool dtype (no linear map: it truncates each summand) and
# a view by a dtype (it reinterprets the bits): ``to``'s or ``view``'s dtype argument
PENDING_FLOAT_DTYPES = frozenset("float float16 float32 float64 half double bfloat16".split())


def keeps_pending_dtype(method: str, dtype: str) -> bool:
    """Whether ``method`` (``to`` or ``view``) with the dtype argument named ``dtype``
    (``torch.float64``: "float64") keeps a pending sum one."""
    return method != "view" and dtype in PENDING_FLOAT_DTYPES
NORM_REDUCTIONS = frozenset("norm linalg_norm linalg_vector_norm".split())
# A variance or standard deviation (alone or with the mean) over a dim sharded on an axis is
# this rank's block's own (its own mean, its own count), no part of anything, as a norm's:
# always an error (:func:`reduced_partial_error`; a manual RMSNorm's ``x.var(-1)`` of a
# tp-sharded hidden dim was typed V by both checkers until session 40)
VARIANCE_REDUCTIONS = frozenset("var std var_mean std_mean".split())
SHARD_SUMMING = PENDING_REDUCTIONS | NORM_REDUCTIONS | VARIANCE_REDUCTIONS


def removes_shard_dim(lt: LocalType | None, reduction: Reduction, shape: Sequence[int] | None = None) -> bool:
    """Whether ``reduction`` reduces the dim ``lt`` (a Varying type with a known layout) is
    sharded on: a full reduction always; else at the operand's rank (check mode: ``shape``
    or ``reduction.ndim``), or, the rank unknown (the static checker), at every rank the
    operand can have (``x.sum(-1)`` of ``S(-1)``: yes; ``x.sum(1)`` of ``S(-1)``: only at rank
    2, so no)."""
    if lt is None or lt.kind is not Kind.V or (lt.dim is None and lt.by_rank is None):
        return False
    if not reduction.dims:
        return True  # every dim (an empty tuple too)
    ndim = reduction.ndim if reduction.ndim is not None else (len(shape) if shape is not None else None)
    ranks = range(1, RANKS + 1) if ndim is None else (ndim,)
    verdicts: set[bool] = set()
    for rank in ranks:
        if rank < 1 or any(not -rank <= x < rank for x in reduction.dims):
            continue
        possible, d = lt.at_rank(rank)
        if not possible:
            continue
        verdicts.add(d is not None and d % rank in {x % rank for x in reduction.dims})
    return verdicts == {True}


def reduced_partial_sum(name: str, lt: LocalType | None, axis: str, reduction: Reduction,
                        shape: Sequence[int] | None = None) -> bool:
    """Whether sum-like reduction ``name`` (``SHARD_SUMMING``) of an operand of type ``lt``
    on ``axis`` reduces its shard dim there and the code does not declare the result a
    partial sum (``reduction.partial_axes``; a norm, a variance never can be one)."""
    if name not in SHARD_SUMMING or not removes_shard_dim(lt, reduction, shape):
        return False
    loss = loss_of(name)
    if loss is not None and loss[0] in CLASS_LOSSES and not _batch_sharded(lt, shape):
        return False  # the class dim sharded: vocab-parallel, not this rule's
    if name in NORM_REDUCTIONS or name in VARIANCE_REDUCTIONS:
        return True
    return axis not in reduction.partial_axes and "*" not in reduction.partial_axes


def _batch_sharded(lt: LocalType | None, shape: Sequence[int] | None) -> bool:
    """A class loss's input sharded on its batch dim 0 (a batched input: rank >= 2).  The
    rank unknown (the static checker), at every rank >= 2 the input can have: S(0), and a
    rank-dependent layout that is S(0) there, ``F.log_softmax(x, -1)`` of an S(0) ``x`` (V at
    rank 1, where dim -1 is the shard dim: the unbatched form, whose one dim is the class
    dim, no batch to shard, as an S(0) input's rank 1 is not read either)."""
    if lt is None or lt.kind is not Kind.V:
        return False
    if shape is not None:
        return len(shape) >= 2 and lt.at_rank(len(shape)) == (True, 0)
    if lt.by_rank is None:
        return lt.dim == 0
    top = max(RANKS, lt.by_rank[-1][0])
    for rank in range(2, top + 1):
        possible, d = lt.at_rank(rank)
        if possible and d != 0:
            return False
    return True


def _class_loss_layout(axis: str, tensor_ops: Sequence[tuple[Operand, Role]]) -> LocalType:
    """``F.cross_entropy(x, t, reduction="none")`` (CLASS_LOSSES_NONE): the per-sample loss
    keeps the input's batch shard (x S(0), batched; the targets S(0) or not varying), the
    class dim reduced; else plain V."""
    if not tensor_ops:
        return VARYING
    x = tensor_ops[0][0]
    if not _batch_sharded(x.type.get(axis), x.shape):  # type: ignore[union-attr]
        return VARYING
    for o, _ in tensor_ops[1:]:
        t = o.type.get(axis)  # type: ignore[union-attr]
        if t is not None and t.kind is Kind.V and t.dim != 0:
            return VARYING
    return LocalType(Kind.V, 0)


def _loss_mean_error(loss: str, red: str, head: str, x: Operand, ax: str, refused: str) -> SpmdError:
    """:func:`reduced_partial_error`'s text for a loss's own reduction (LOSS_MEANS, LOSS_SUMS)."""
    xt = bare(x.text)
    # DDP/FSDP average the gradients over the ranks: there this rank's mean is the loss to
    # backward, and the sum-over-the-global-count fix, pasted, would give 1/size gradients
    own = (f"; if this rank's own loss is meant (a per-rank loss; DDP and FSDP, which average "
           f"the gradients over the ranks, want this rank's mean), declare the input V first: "
           f"spmd.declare({xt}, Tensor[V[{ax}]])")
    call = f"F.{loss}({xt}, ...)"
    summed = f'F.{loss}({xt}, ..., reduction="sum")'
    if red == "sum":
        total = f"spmd.all_reduce(spmd.reinterpret({summed}, {ax}, src=V, dst=P), {ax}, src=P, dst=R)"
        if refused == "avg":
            why = (f'the op="avg" reduction it goes to divides the ranks\' sums by {ax}\'s size: '
                   f"neither the whole sum nor a mean of the whole")
        else:
            why = ("each rank's sum is its part of a sum over the ranks (a Partial), not a value "
                   "of its own (V), so a division or a non-linear function of it would be wrong")
        return SpmdError("spmd-global", (
            f"{head}: {why}; say so: spmd.reinterpret({summed}, {ax}, src=V, dst=P) (divided "
            f"by the global count n for the whole's mean), or {total} where the whole sum is "
            f"needed{own}"))
    count = {"batchmean": "this rank's batch size"}.get(red, (
        "this rank's count of targets other than ignore_index (weighted by weight= when given)"
        if loss in CLASS_LOSSES else "this rank's element count"))
    why = ("the ranks' means sum to no mean of the whole" if refused != "sum" else
           f"the reinterpret(..., src=V, dst=P) or summing reduction it goes to adds the "
           f"ranks' block means: {ax}'s size times the whole's mean (blocks of one size)")
    avg = f'spmd.all_reduce({call}, {ax}, src=P, dst=R, op="avg")'
    return SpmdError("spmd-global", (
        f"{head}: each rank's mean divides by {count} ({why}); the whole's mean is "
        f"spmd.reinterpret({summed} / n, {ax}, src=V, dst=P), n the global count (the "
        f"batch over all the ranks: a reinterpret(V->P) sums the ranks' parts), or {avg} "
        f"only when every rank's count is the same (the mean of equal blocks' means; a "
        f"padded or ignore_index target makes them unequal){own}"))


def _dims_text(reduction: Reduction) -> str:
    dims = reduction.dims
    if not dims:
        return ""
    text = str(dims[0]) if len(dims) == 1 else "(" + ", ".join(str(d) for d in dims) + ")"
    return ", " + text + (", keepdim=True" if reduction.keepdim else "")


def reduced_partial_error(name: str, x: Operand, axis: str, reduction: Reduction) -> SpmdError | None:
    """A sum, mean, norm or variance (``SHARD_SUMMING``) that reduces the dim ``x`` is sharded on
    ``axis``: as a contraction over a sharded dim (:func:`implicit_partial_error`), each
    rank's sum is its part of a sum over the ranks, a Partial, which local SPMD never makes
    implicitly: typed V, a sqrt or a division of it passed both checkers with wrong numbers
    (SAM's gradient norm ``sqrt((g1 * g1).sum() + (g2 * g2).sum())`` of tp-sharded
    gradients, DP-SGD's per-sample norms).  Accepted when the code says so: ``spmd.sum(x,
    ..., out_partial_axes=axis)``, or the result passed straight (or through + and -) to
    ``reinterpret(..., axis, src=V, dst=P)`` (``reduction.partial_axes``).  A norm's local
    value is no part of a sum: always an error, with the norm over the ranks as the fix; so
    is a variance's or standard deviation's (``var``, ``std``, ``var_mean``, ``std_mean``:
    this rank's own mean and count), with the one over the ranks from the all-reduced sums
    of x and x * x as the fix.  The shard dim kept (``x.sum(0)`` of ``S(1)``), a plain V of unknown layout, scans and
    max/min/logsumexp are not concerned.  None when it is not such a reduction."""
    t = x.type.get(axis) if x.type is not None else None
    if not reduced_partial_sum(name, t, axis, reduction, x.shape):
        return None
    assert t is not None
    ax = f'"{axis}"'
    loss = loss_of(name)
    if loss is not None:
        return _loss_mean_error(loss[0], loss[1], (
            f'{loss[0]} with reduction="{loss[1]}" of {x.text} ({t.describe()} on {ax}) '
            f"reduces the {'batch ' if loss[0] in CLASS_LOSSES else ''}dim sharded on {ax}"),
            x, ax, reduction.refused)
    xt = bare(x.text)
    if name in SEGMENT_SUMS:
        counted = f"torch.{name}({xt}, minlength=n)"
        return SpmdError("spmd-global", (
            f"{name} of {x.text} ({t.describe()} on {ax}) counts this rank's block of the "
            f"dim sharded on {ax} only: each rank's counts are its part of the counts over "
            f"the ranks (a Partial), not a value of its own (V), so a division by them, a "
            f"rsqrt or a clamp (a degree normalisation) would be wrong; the whole's counts are "
            f"spmd.all_reduce(spmd.reinterpret({counted}, {ax}, src=V, dst=P), {ax}, src=P, "
            f"dst=R) (n the number of bins; .to(dtype) may stand between; or pass the "
            f"{name} straight to spmd.reinterpret(..., {ax}, src=V, dst=P)); if this rank's "
            f"own counts are meant (a per-rank load, such as a MoE rank's tokens per expert "
            f"for its all_to_all splits), declare the operand V first: "
            f"spmd.declare({xt}, Tensor[V[{ax}]])"))
    dims = _dims_text(reduction)
    which = "every dim" if not reduction.dims else (
        f"dim {reduction.dims[0]}" if len(reduction.dims) == 1 else f"dims {reduction.dims}")
    head = (f"{name} over {which} of {x.text} ({t.describe()} on {ax}) reduces the dim sharded "
            f"on {ax}")
    summed = f"spmd.sum({xt}{dims}, out_partial_axes={ax})"
    total = f"spmd.all_reduce({summed}, {ax}, src=P, dst=R)"
    if name in NORM_REDUCTIONS:
        sq = f"{xt} * {xt}" if xt.isidentifier() else f"({xt}) ** 2"
        norm = f"torch.sqrt(spmd.all_reduce(spmd.sum({sq}{dims}, out_partial_axes={ax}), {ax}, src=P, dst=R))"
        return SpmdError(
            "spmd-global",
            f"{head}: it is the norm of this rank's block only, and the ranks' norms neither "
            f"are the whole's nor sum to it; the 2-norm over the ranks is {norm} (dst=I where "
            f"the gradient must flow back to every rank's block; for another p, spmd.sum of "
            f"{xt}.abs() ** p, then ** (1 / p); for p=inf, all_reduce({xt}.abs().amax(), {ax}, "
            f'src=V, dst=R, op="max"))',
        )
    # the operand's own block meant (a per-rank BatchNorm under DDP, a per-rank aux loss):
    # V declared first, the one widening both checkers read (the check mode drops the dim)
    own = (f"; if this rank's own {name} is meant (a per-rank statistic), declare the operand "
           f"V first: spmd.declare({xt}, Tensor[V[{ax}]])")
    if name in VARIANCE_REDUCTIONS:
        return SpmdError("spmd-global", _variance_message(name, head, xt, dims, ax) + own)
    if name in MEAN_REDUCTIONS:
        # a per-sample loss's mean under DDP/FSDP (they average the gradients over the ranks):
        # this rank's mean is the loss to backward there, as for a loss's own reduction
        own = (f"; if this rank's own {name} is meant (a per-rank statistic, or a per-rank "
               f"loss: DDP and FSDP, which average the gradients over the ranks, want this "
               f"rank's mean), declare the operand V first: spmd.declare({xt}, Tensor[V[{ax}]])")
        avg = f'spmd.all_reduce(torch.{name}({xt}{dims}), {ax}, src=P, dst=R, op="avg")'
        why = ("the ranks' means sum to no mean of the whole" if reduction.refused != "sum" else
               f"the reinterpret(..., src=V, dst=P) or summing reduction it goes to adds the "
               f"ranks' block means, {ax}'s size times the whole's {name} (blocks of one size), "
               f"no mean of the whole")
        return SpmdError("spmd-global", (
            f"{head}: each rank's {name} covers its block only ({why}); the whole's {name} "
            f"is {total} / n, n the count over all the ranks (the reduced dims' global sizes "
            f"multiplied), or {avg} when every rank's block has the same size (the mean of "
            f"equal blocks' means){own}"))
    if reduction.refused == "avg":
        return SpmdError("spmd-global", (
            f"{head}: each rank's result is its part of a sum over the ranks, and the "
            f'op="avg" reduction it goes to divides their sum by {ax}\'s size: neither the '
            f'whole sum nor a mean of the whole; the whole sum is {total} (op="sum"); the '
            f"whole's mean is {total} / n, n the count over all the ranks, or "
            f'spmd.all_reduce(torch.mean({xt}{dims}), {ax}, src=P, dst=R, op="avg") when '
            f"every rank's block has the same size{own}"))
    return SpmdError("spmd-global", (
        f"{head}: each rank's result is its part of a sum over the ranks (a Partial), not a "
        f"value of its own (V), so a sqrt, a division or a norm of it would be wrong; the "
        f"whole sum is {total} (dst=I where it is differentiated: a loss, an HVP's dot "
        f"product; {summed} alone is P on {ax}: the form that says so; or pass "
        f"the {name} straight to spmd.reinterpret(..., {ax}, src=V, dst=P), alone or added to "
        f"others){own}"))


def _shard_dim_taken(applies: bool, x: Operand, axis: str, reduction: Reduction) -> LocalType | None:
    """``x``'s type on ``axis`` where the op (``applies``: a scan, a normalising op) takes in,
    along ``reduction``'s dims, the dim ``x`` is sharded on there at every rank it can have
    (:func:`removes_shard_dim`); None otherwise."""
    if not applies or not reduction.dims:
        return None
    t = x.type.get(axis) if x.type is not None else None
    return t if t is not None and removes_shard_dim(t, reduction, x.shape) else None


# What a scan along the shard dim misses, per scan: the carry from the ranks before this one
# (their blocks' totals combined, an exclusive scan over the axis) and how it joins the local scan
_SCAN_CARRY = {
    "cumsum": ("prefix sum", "the sum of the earlier ranks' totals, added"),
    "cumprod": ("prefix product", "the product of the earlier ranks' totals, multiplied in"),
    "logcumsumexp": ("log-cumulative-sum-exp",
                     "the logsumexp of the earlier ranks' totals, joined by torch.logaddexp"),
    "cummax": ("running max", "the max of the earlier ranks' maxima, joined by torch.maximum"),
    "cummin": ("running min", "the min of the earlier ranks' minima, joined by torch.minimum"),
}


def scan_along_shard_error(name: str, x: Operand, axis: str, reduction: Reduction) -> SpmdError | None:
    """A scan (``SCANS``: cumsum, cumprod, logcumsumexp, cummax, cummin) along the dim ``x``
    is sharded on ``axis`` (an S(i) operand, the dim it scans the shard dim at every rank it can
    have, as :func:`removes_shard_dim` reads a reduction's): each rank scans its own block, so
    its result lacks the carry from the ranks before it (a sequence-parallel cumsum of an S(1)
    sequence shard is no prefix sum of the sequence).  Typed V, the local scan was claimed
    S(i) again (a V may be) and passed both checkers with wrong numbers (session 45's scans
    probe: 1.8 off the float64 prefix sum on 2 ranks).  Accepted where the code says the
    per-rank scan is meant (the first step of a chunked scan, its carry combined after): the
    operand declared V first, ``spmd.declare(x, Tensor[V[axis]])``, the widening the
    reductions' rule (:func:`reduced_partial_error`) reads too.  None when it is not such a
    scan."""
    t = _shard_dim_taken(name in SCANS, x, axis, reduction)
    if t is None:
        return None
    ax = f'"{axis}"'
    xt = bare(x.text)
    d = reduction.dims[0]
    what, carry = _SCAN_CARRY[name.rstrip("_")]
    local = f"spmd.declare({xt}, Tensor[V[{ax}]]).{name}({d})" + (
        ".values" if name in ("cummax", "cummin") else "")
    return SpmdError("spmd-global", (
        f"{name} along dim {d} of {x.text} ({t.describe()} on {ax}) scans the dim sharded on "
        f"{ax}: each rank scans its own block only, so the result lacks the ranks before it "
        f"and is no {what} of the whole; the whole's joins a carry to this rank's scan "
        f"({carry}): local = {local}, then spmd.all_gather of the blocks' totals (local's "
        f"last item along dim {d}) over {ax} with src=V, dst=R, those of the ranks before "
        f"this one (below mesh.get_local_rank({ax})) combined and joined to local; where this "
        f"rank's own scan is meant (a chunked scan's first step), declare the operand V "
        f"first, as local does"))


# What a normalising op (NORMALISING) computes over the dims it normalises: the per-rank
# statistics a shard of those dims gives, and the whole's name
_NORMALISED_STATS = {
    "softmax": ("max and sum of exponentials", "softmax"),
    "log_softmax": ("max and sum of exponentials", "log_softmax"),
    "softmin": ("min and sum of exponentials", "softmin"),
    "normalize": ("norm", "normalization"),
    "layer_norm": ("mean and variance", "layer norm"),
    "rms_norm": ("root mean square", "RMS norm"),
}


def normalised_along_shard_error(name: str, x: Operand, axis: str,
                                 reduction: Reduction) -> SpmdError | None:
    """A normalising op (``NORMALISING``: softmax, log_softmax, softmin, normalize along its
    ``dim``; layer_norm, rms_norm over the trailing ``normalized_shape``) whose normalised dims
    take in the dim ``x`` is sharded on ``axis`` (an S(i) operand, the dim the shard dim at every
    rank it can have, as :func:`removes_shard_dim` reads a reduction's): each rank computes the
    statistics (a softmax's max and sum of exponentials, a layer norm's mean and variance) over
    its own block only, so its result is no block of the whole's (softmax over a vocab- or
    sequence-sharded last dim).  Typed V, the local result was claimed S(i) again (a V may be)
    and passed both checkers.  Accepted where the code says a per-rank op is meant (ring
    attention's local block softmax, merged by its logsumexp after): the operand declared V
    first, ``spmd.declare(x, Tensor[V[axis]])``, the widening the scans' and the reductions'
    rules read too.  Normalising another dim (the hidden dim of a sequence-parallel S(0)
    activation, Megatron's LayerNorm) is not concerned.  None when it is not such an op."""
    t = _shard_dim_taken(name in NORMALISING, x, axis, reduction)
    if t is None:
        return None
    ax = f'"{axis}"'
    xt = bare(x.text)
    stats, whole = _NORMALISED_STATS[name]
    if NORMALISING[name][1] == "shape":
        over = f"over the last {len(reduction.dims)} dim{'s' if len(reduction.dims) > 1 else ''}"
    else:
        over = f"along dim {', '.join(str(d) for d in reduction.dims)}"
    sd = t.dim if t.dim is not None else t.at_high_ranks().dim
    src = f"S({sd})" if sd is not None else "V"
    kept = ""
    if name in ("softmax", "log_softmax") and len(reduction.dims) == 1:
        # the vocab-parallel form keeps the dim sharded: the statistics all-reduced
        d = reduction.dims[0]
        then = f"s.exp() / z.unsqueeze({d})" if name == "softmax" else f"s - z.log().unsqueeze({d})"
        kept = (f"; or keep it sharded and all-reduce the statistics (the vocab-parallel "
                f"{name}): m = spmd.all_reduce({receiver(x.text)}.detach().amax({d}), {ax}, "
                f'src=V, dst=R, op="max"); s = {x.text} - m.unsqueeze({d}); z = spmd.all_reduce('
                f"spmd.reinterpret(s.exp().sum({d}), {ax}, src=V, dst=P), {ax}, src=P, dst=R); "
                f"then {then}")
    return SpmdError("spmd-global", (
        f"{name} {over} of {x.text} ({format_type(x.type)}) normalises the dim sharded on "
        f"{ax}: each rank computes the {stats} over its own block only (per-rank statistics), "
        f"so the result is no {whole} of the whole, nor a shard of it; gather the dim first: "
        f"the {name} of spmd.all_gather({xt}, {ax}, src={src}, dst=R) (or of "
        f"spmd.all_to_all({xt}, {ax}, src={src}, dst=S(j)), sharding a dim j it does not "
        f"normalise instead, as Ulysses moves the sequence shard to the heads){kept}; where "
        f"this rank's own {name} is meant (ring attention's local block softmax, merged by "
        f"its logsumexp after), declare the operand V first: spmd.declare({xt}, Tensor[V[{ax}]])"))


_VARIANCE_WORDS = {"var": "variance", "std": "standard deviation",
                   "var_mean": "variance and mean", "std_mean": "standard deviation and mean"}


def _variance_message(name: str, head: str, xt: str, dims: str, ax: str) -> str:
    """:func:`reduced_partial_error`'s text for a variance or standard deviation
    (``VARIANCE_REDUCTIONS``): the whole's from the all-reduced sums of x and of x * x (one
    all-reduce each, the statements pasted on one line), n the global count."""
    sq = f"{xt} * {xt}" if xt.isidentifier() else f"({xt}) ** 2"
    s1 = f"s1 = spmd.all_reduce(spmd.sum({xt}{dims}, out_partial_axes={ax}), {ax}, src=P, dst=R)"
    s2 = f"s2 = spmd.all_reduce(spmd.sum({sq}{dims}, out_partial_axes={ax}), {ax}, src=P, dst=R)"
    var = "(s2 - s1 * s1 / n) / (n - 1)"
    value = {"var": f"var = {var}", "std": f"std = ({var}).sqrt()",
             "var_mean": f"var, mean = {var}, s1 / n",
             "std_mean": f"std, mean = ({var}).sqrt(), s1 / n"}[name]
    return (f"{head}: each rank's {name} is its own block's {_VARIANCE_WORDS[name]} (its own "
            f"mean, its own count), and the ranks' results neither are the whole's nor sum to it; the "
            f"whole's is {s1}; {s2}; {value}, n the count over all the ranks (the reduced dims' "
            f"global sizes multiplied; / n, not / (n - 1), for correction=0 or unbiased=False; "
            f"dst=I where it is differentiated)")


def _same_values_kind(lt: LocalType, typed: Sequence[tuple[Operand, Role, LocalType]]) -> bool:
    """A result an untyped operand beside it makes unknown (see :func:`_untyped_on`): R, and
    I when no operand on the axis carries a gradient.  A gradient-free I needs no backward
    comms, so it mixes with V as R does (``rotate_half(x) * sin.detach()`` with an
    unannotated ``rotate_half`` may well be V); an I that carries one keeps I, the only
    result beside it that is not an error."""
    if lt.kind is Kind.R:
        return True
    return lt.kind is Kind.I and not any(o.can_grad for o, _, _ in typed)


def _untyped_on(axis: str, tensor_ops: Sequence[tuple[Operand, Role]]) -> bool:
    """Whether a tensor operand is unknown on ``axis`` (untyped, or a type that does not
    mention it).  Beside R operands it makes the result unknown there, not R (gradual):
    the untyped tensor may be Varying (an unannotated sharded weight: ``F.linear(x_r, w)``
    is V) or Partial (``x_r * p`` is P), and an R claimed for it would make correct code
    fail later (a declared V result, ``out_partial_axes``, a collective's ``src``); so does
    a gradient-free I.  Beside V, P or a gradient-carrying I the only results that are not
    errors are V, P and I: those stay.
    An untyped index (ids, labels, a mask: data loaded whole, as a rule) is not counted."""
    for o, role in tensor_ops:
        t = o.type
        if (role is not Role.INDEX and t is not None and t.get(axis) is None
                and axis not in t.failed):
            return True
    return False


def check_inplace(name: str, target: Operand, result: SpmdType,
                  gradient_free: bool = False, others: Sequence[Operand] = (),
                  whole_store: bool = False) -> SpmdError | None:
    """An in-place op (or ``out=``) may not change the mutated tensor's type.

    ``gradient_free``: no operand can carry a gradient (``torch.no_grad()``, ``.grad``
    tensors): I and R hold the same values on every rank and differ only in the backward,
    so an Invariant target may take a Replicate result and keep its type (gradient
    clipping: ``g_i.mul_(clip_coef_r)`` under no_grad).  The target keeps its own type
    (:meth:`SpmdType.mutated_by`).

    ``others``: the op's other operands; the message names the one that brings the new
    kind (``g.mul_(coef)`` with a Varying ``coef``), and for ``copy_`` the op that gives
    the value the target's kind (the missing ``all_gather`` of a ZeRO shard).

    The kinds compared, the shard dims too (:func:`shard_dim_conflict`): an elementwise op
    (``copy_``, ``add_``, ...; ``whole_store``: ``x[...] = v``, ``x[:] = v``) that writes an
    ``S(j)`` operand into an ``S(i)`` target, ``i != j``, stores each rank's block of dim
    ``j`` where the target keeps its block of dim ``i``: the kind is V either way, but the
    values are misplaced (a square weight loaded from a checkpoint's transposed one)."""
    assert target.type is not None
    changed = []
    moved = []  # V on both sides, laid out differently: compared by _inplace_layout_error
    for axis, lt in target.type.axes:
        new = result.get(axis)
        if new is None or new == lt:
            continue
        if new.forget_dim() != lt.forget_dim():
            if gradient_free and {lt.kind, new.kind} <= SAME_VALUES:
                continue
            changed.append((axis, lt, new))
        elif new.forget_dim() is not new and lt.forget_dim() is not lt:
            moved.append((axis, lt, new))
    if not changed:
        return (_inplace_shard_error(name, target, result, others, whole_store)
                or (_inplace_layout_error(name, target, result, moved) if moved else None)
                or _inplace_spec_error(name, target, result))
    axis, old, new = changed[0]
    culprit = next((o for o in others if o is not target and o.type is not None
                    and (k := o.type.get(axis)) is not None and k.kind is new.kind), None)
    brings = ""
    if culprit is not None and culprit.type is not None:
        brings = (f"; {culprit.text} ({format_type(culprit.type)}) is {_word(new)} on "
                  f'"{axis}"')
    stored = name in _STORES  # x[idx] = value: a part of x takes the value
    part = stored or name in _PART_WRITES  # x.index_copy_(d, idx, v): so does an indexed write
    what = (f"the assignment {target.text}[...] = {culprit.text if culprit is not None else '<value>'}"
            if stored and name != "index_put_" else name)
    if name.rstrip("_") == "copy" or part:  # the value's type, written into (a part of) x
        if part or not _is_dotted_name(target.text):
            # a part, or a view (cache.narrow(...).copy_(k)): the tensor keeps its declared type
            whole = _viewed_tensor(target.text)
            fix = (f"give {whole} the type {format_type(result)} where it is declared, "
                   f"if that is what it holds")
        else:
            fix = (f"assign the value instead ({target.text} = <value>: the name then holds a "
                   f"tensor of the value's type)")
        if culprit is not None and culprit.type is not None:
            from .collectives import suggest  # collectives imports this module's neighbours

            have = culprit.type.get(axis)
            assert have is not None
            fix = f"{suggest(have, old, culprit.text, axis)} first, or {fix}"
    else:
        fix = "use the out-of-place op and a new name"
    return SpmdError(
        "spmd-inplace",
        f'{what} would change {target.text} on "{axis}" from {_word(old)} to {_word(new)} '
        f"({format_type(target.type)} -> {format_type(result, like=target.type)}){brings}; an in-place op cannot "
        f"change a type: {fix}",
    )


def shard_dim_conflict(target: Operand, values: Sequence[Operand], same_rank: bool,
                       result: SpmdType | None = None
                       ) -> tuple[str, LocalType, Operand, LocalType] | None:
    """The first axis on which a value written elementwise into ``target`` is sharded on
    another dim than ``target``: (the axis, the target's S(i), the value, its S(j)).

    Only a known dim on both sides counts (V, an untyped value, R or I: no conflict; an
    INDEX or TEMPLATE operand lends no values).  Where the adapter knows both shapes (the
    check mode) the value's dim is placed in the target's dims as broadcasting does (from
    the back), a broadcast size-1 dim skipped.  The static checker sees no ranks: dims of
    one sign are compared from their end (``S(-1)`` vs ``S(-2)``); non-negative dims
    differ for sure when the value's is the larger (broadcasting only moves a value's dims
    right), and otherwise when ``same_rank`` (``copy_`` of a checkpoint weight, ``x.data
    = v``, ``x[...] = v``: the value has the target's rank); ``S(-1)`` beside ``S(1)`` may be
    one dim: no conflict.  ``result``: the op's result; an axis it does not give V (an error
    there already, or unknown) is not compared."""
    assert target.type is not None
    if target.type.spec is not None:
        return None  # global SPMD: the partition specs are the layout (global_spmd)
    for axis, want in target.type.axes:
        if want.kind is not Kind.V or (want.dim is None and want.by_rank is None):
            continue
        if result is not None:
            new = result.get(axis)
            if new is None or new.kind is not Kind.V:
                continue
        for o in values:
            if o is target or o.type is None or o.type.spec is not None or o.role in (
                    Role.INDEX, Role.TEMPLATE, Role.OVERWRITTEN):
                continue
            have = o.type.get(axis)
            if (have is not None and have.kind is Kind.V
                    and _dims_conflict(have, o.shape, want, target.shape, same_rank)):
                return axis, want, o, have
    return None


def _dims_conflict(have: LocalType, have_shape: tuple[int, ...] | None, want: LocalType,
                   want_shape: tuple[int, ...] | None, same_rank: bool) -> bool:
    """Whether a value sharded ``have`` lands on another dim of the target than ``want``
    (:func:`shard_dim_conflict`)."""
    if have_shape is not None and want_shape is not None:
        rt, rv = len(want_shape), len(have_shape)
        i, j = want.at_ndim(rt).dim, have.at_ndim(rv).dim
        if i is None or j is None or rv > rt or not (0 <= i < rt and 0 <= j < rv):
            return False
        mapped = j + rt - rv
        if have_shape[j] == 1 and want_shape[mapped] != 1:
            return False  # broadcast along the dim: no block of it to misplace
        return mapped != i
    i, j = want.dim, have.dim
    if i is None or j is None or (i < 0) != (j < 0):
        return False
    if i < 0:
        return i != j
    return i < j or (same_rank and i != j)


def _inplace_shard_error(name: str, target: Operand, result: SpmdType,
                         others: Sequence[Operand], whole_store: bool) -> SpmdError | None:
    """check_inplace's shard-dim comparison (:func:`shard_dim_conflict`)."""
    if not others or name in _PART_WRITES or (name in _STORES and not whole_store):
        return None
    base = name.partition("(")[0]  # "add(..., out=)": the op add
    if name not in _STORES and not classify(base).keeps_shard_dims:
        return None
    same_rank = base.rstrip("_") == "copy" or name in _STORES
    found = shard_dim_conflict(target, others, same_rank, result)
    if found is None:
        return None
    axis, want, value, have = found
    if name in _STORES:
        return shard_dim_error("the assignment", f"{target.text}[...]", target, axis, want,
                               value, have)
    return shard_dim_error(name, target.text, target, axis, want, value, have)


def _inplace_layout_error(name: str, target: Operand, result: SpmdType,
                          moved: Sequence[tuple[str, LocalType, LocalType]]) -> SpmdError | None:
    """check_inplace's comparison of the result's shard dim with the target's: an op that
    moves dims (an in-place view, ``x.transpose_(0, 1)`` on an S(0) ``x``; a contraction,
    join or reduction written via ``out=``) leaves each rank's block along another dim than
    the tensor's type names (:func:`.types.shard_dims_differ`), while the kind stays V.
    A result of unknown dim (``as_strided_``, ``resize_``, dims that are not literals) is
    not compared: a V may be claimed as any S(i).  The rank is the target's where its shape
    is known (check mode), but for the views that change it (``squeeze_``, ``unsqueeze_``,
    whose result keeps the target's sign)."""
    assert target.type is not None
    if target.type.spec is not None or name in _STORES or name in _PART_WRITES:
        return None
    rank = None
    view = MOVES.get(name)
    if (target.shape is not None and 0 not in target.shape
            and (view is None or view[0] not in ("squeeze", "unsqueeze"))):
        rank = len(target.shape)
    for axis, want, new in moved:
        if not shard_dims_differ(new, want, rank):
            continue
        base = name.partition("(")[0].rstrip("_")
        if name.endswith("(..., out=)"):
            fix = (f"drop out= and give the result a new name, or give {target.text} the type "
                   f"{format_type(result)} where it is declared, if that is what it holds")
        else:
            fix = f"use the out-of-place {base} and a new name (its type is {format_type(result)})"
        return SpmdError(
            "spmd-inplace",
            f'{name} would change {target.text} on "{axis}" from {_layout_word(want)} to '
            f"{_layout_word(new)} ({format_type(target.type)} -> {format_type(result, like=target.type)}): its "
            f"type would still name {_layout_dim(want)} where each rank's block lies along "
            f"{_layout_dim(new)}, and every later op would read the wrong dim; an in-place op "
            f"cannot change a type: {fix}",
        )
    return None


def _inplace_spec_error(name: str, target: Operand, result: SpmdType) -> SpmdError | None:
    """A global target (partition spec) whose in-place op (or ``out=``) gives a result of
    another spec, the kinds unchanged (``x.transpose_(0, 1)`` on a ``PS["tp", None]`` x; axes
    sharding one dim in another order): the type would still name the old layout.  Not for
    ``copy_``: its result is read from the source, which may be untyped or broadcast (a
    checkpoint's tensor, ``zeros_like``, a bias row: each rank's block takes it as it is);
    the global rule of the copy judges a source laid out otherwise."""
    assert target.type is not None
    old, new = target.type.spec, result.spec
    if (old is None or new is None or old == new or name in _STORES or name in _PART_WRITES
            or name.partition("(")[0].rstrip("_") == "copy"):
        return None
    base = name.partition("(")[0]
    if name.endswith("(..., out=)"):
        fix = "drop out= and give the result a new name"
    else:
        fix = f"use the out-of-place {base.rstrip('_')} and a new name"
    return SpmdError(
        "spmd-inplace",
        f"{name} would change the layout of {target.text} from {format_spec(old)} to "
        f"{format_spec(new)} ({format_type(target.type)} -> {format_type(result, like=target.type)}); an in-place "
        f"op cannot change a type: {fix}",
    )


def _layout_word(lt: LocalType) -> str:
    """``Shard(0)``; a rank-dependent layout in words (``V (S(1) at rank >= 2, ...)``)."""
    return lt.describe() if lt.by_rank is not None else _word(lt)


def _layout_dim(lt: LocalType) -> str:
    """``dim 0``; for a rank-dependent layout, the dims it has at each rank."""
    return f"dim {lt.dim}" if lt.dim is not None else f"the dims {lt.layouts()}"


_CONVERT_CALL = re.compile(r"(?:spmd\.)?convert\(")


def shard_dim_error(what: str, into: str, target: Operand, axis: str, want: LocalType,
                    value: Operand, have: LocalType) -> SpmdError:
    """The spmd-inplace error of a value sharded on another dim than the tensor it is
    written into (``what``: the op, or "the assignment"; ``into``: the target as written)."""
    from .collectives import dims_in_another_order  # collectives imports this module's neighbours

    assert target.type is not None and value.type is not None
    src, dst = have.at_high_ranks(), want.at_high_ranks()
    v = bare(value.text)
    if _CONVERT_CALL.match(value.text):
        fix = f"pass dst={dst} to that convert (it then keeps this rank's block of dim {dst.dim})"
    else:
        fix = (f'redistribute({v}, "{axis}", src={src}, dst={dst}) first (or dst={dst} in the '
               f"convert that made it, if one did)")
    if dims_in_another_order(src, dst, value.text):
        fix += (f", or {v}.transpose({src.dim}, {dst.dim}) if its dims are in another order "
                f"(a weight stored [in, out] where [out, in] is meant)")
    lands = f"dim {src.dim}"
    if (value.shape is not None and target.shape is not None
            and len(value.shape) < len(target.shape) and src.dim is not None):
        # broadcast from the back: the value's dim j is the target's dim j + (rank difference)
        j = src.dim % len(value.shape) + len(target.shape) - len(value.shape)
        lands = f"dim {src.dim} (broadcast: {into}'s dim {j})"
        from .collectives import suggest

        fix = (f"{suggest(have, REPLICATE, value.text, axis)} first: it runs along {into}'s "
               f'dim {j}, which {into} does not shard on "{axis}"')
    return SpmdError(
        "spmd-inplace",
        f'{what} would write {value.text} ({format_type(value.type)}), {_word(have)} on '
        f'"{axis}", into {into} ({format_type(target.type)}), {_word(want)} there: each '
        f"rank's block of {lands} would be stored as its block of dim {dst.dim}, which no "
        f"shape check catches when the two dims have one size (a square weight); an in-place "
        f"op cannot change a type: {fix}",
    )


def optimizer_state_error(what: str, state: Operand, param: Operand) -> SpmdError | None:
    """An optimizer's in-place update (``what``: Adam's ``exp_avg.lerp_(grad, ...)``) of a
    state tensor of parameter ``param`` whose own type is not its parameter's (a moment laid
    out S(1) for an S(0) weight): the state is what is wrong (a checkpoint's moments paired
    with the parameters in another order, or made with another layout), not the gradient
    written into it, so no collective on the gradient is offered.  The check mode finds the
    pairing (``optimizer.state[p]``); the static checker does not see torch's optimizer code.
    None when the state's type agrees with the parameter's (R and I alike: no gradient
    flows through a state)."""
    from .types import mismatched_axes

    if not state.type or not param.type:
        return None
    ndim = len(state.shape) if state.shape is not None else None
    s_t, p_t = state.type, param.type
    if ndim is not None and param.shape is not None and len(param.shape) == ndim:
        s_t, p_t = s_t.at_ndim(ndim), p_t.at_ndim(ndim)
    bad = mismatched_axes(s_t, p_t, gradient_free=True)
    if not bad:
        return None
    axis, have, want = bad[0]
    return SpmdError(
        "spmd-inplace",
        f"{what} would update {state.text} ({format_type(state.type)}), an optimizer state of "
        f"{param.text} ({format_type(param.type)}), but the state is {have} on \"{axis}\" where "
        f"its parameter is {want}: a state tensor of another parameter's layout (a "
        f"checkpoint's state given to another parameter, or made with another layout), "
        f"which no shape check catches when the shapes agree; the gradient is not what is "
        f"wrong: give {param.text} its own state, laid out {want} on \"{axis}\" as the "
        f"parameter is, where the state is made or loaded",
    )


def check_data_assignment(target: Operand, value: Operand) -> SpmdError | None:
    """``x.data = v`` (``target``: ``x.data``): the tensor keeps its declared type and takes
    ``v``'s values, so a ``v`` sharded on another dim than ``x`` misplaces every rank's block
    (:func:`shard_dim_conflict`, the ranks equal).  Any other change of kind stays unchecked
    (swapping a parameter's storage, ZeRO/FSDP style, is what ``.data =`` is for)."""
    if target.type is None or value.type is None:
        return None
    found = shard_dim_conflict(target, [value], same_rank=True)
    if found is None:
        return None
    axis, want, v, have = found
    return shard_dim_error("the assignment", target.text, target, axis, want, v, have)


# An indexed store into a tensor (x[idx] = value), by the names both adapters give it
_STORES = frozenset(("__setitem__", "setitem", "index_put_"))
# In-place ops that write values into some of the target's elements (a KV cache filled by
# index_copy_): the value's type is the one to fix, or the target's declaration
_PART_WRITES = frozenset(("index_copy_", "scatter_", "masked_scatter_", "index_add_",
                          "scatter_add_", "scatter_reduce_", "index_reduce_", "index_fill_",
                          "masked_fill_"))
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _is_dotted_name(text: str) -> bool:
    return _DOTTED_NAME.fullmatch(text) is not None


def _viewed_tensor(text: str) -> str:
    """The tensor a target's text writes into: ``cache`` for ``cache[...]`` and for
    ``cache.narrow(...)`` (a view method's receiver), the text itself otherwise."""
    if text.endswith("[...]"):
        text = text[:-5]
    if _is_dotted_name(text):
        return text
    m = _DOTTED_NAME.match(text)
    if m is not None and text[m.end():].startswith("(") and "." in m.group():
        return m.group().rpartition(".")[0]  # cache.narrow(...): the receiver, cache
    if m is not None and text[m.end():].startswith("["):
        return m.group()
    return text


# The R of a loss comes of the collective that made it (an all_reduce of the sum, or an
# all_gather of the prediction before the loss, xDiT's gather-then-unpatchify): dst=I there
# (probe-dit 8: "all_reduce to I" was named where the code had an all_gather(..., dst=R))
_dst_i_instead = ("pass dst=I instead of dst=R to the collective that makes it R where the "
                  "loss is computed (the all_reduce of a sum, or the all_gather of a prediction "
                  "before the loss: all_gather(..., src=S(i), dst=I))")


def check_backward(loss: Operand, scalar: bool = True,
                   inputs: Sequence[Operand] = ()) -> list[SpmdError]:
    """``loss.backward()`` seeds a gradient of 1: the loss must be I or P on every axis.
    One error per loss: the axes of one kind merged (one flattened reinterpret fixes them),
    R axes and V axes each with their reason and the two reinterprets nested in the fix.
    ``scalar``: False when the loss is known to have dims (the check mode sees ``dim() > 0``):
    a V loss then is summed with ``spmd.sum(..., out_partial_axes=)`` as an S(d) one is, since
    its reinterpret V->P is still no scalar for backward() to seed.

    ``inputs``: ``torch.autograd.grad``'s inputs.  A plain Varying loss differentiated with
    respect to inputs Replicate on its V axes is most often each rank's own loss of its own
    copy (MAML's inner loop over dp replicas, each adapting the shared weights on its own
    task): the fix then leads with making the copy Varying before the loss is computed,
    ``reinterpret(w, ax, src=R, dst=V)``; the sum of the per-rank losses (reinterpret(V->P))
    gives each rank the gradient of every rank's loss, and its P gradient all-reduced into a
    per-replica update is a wrong meta-gradient (a probe: 0.043 off)."""
    assert loss.type is not None
    by_kind: dict[Kind, list[str]] = {}
    words: dict[Kind, set[str]] = {}  # Varying, Shard(0): how the axes' types are named
    for axis, lt in loss.type.axes:
        if lt.kind is Kind.R or lt.kind is Kind.V:
            by_kind.setdefault(lt.kind, []).append(axis)
            words.setdefault(lt.kind, set()).add(_word(lt))
    if not by_kind:
        return []
    x = bare(loss.text)
    wrong = [a for a, _ in loss.type.axes if any(a in g for g in by_kind.values())]
    needs = f"{loss.text}.backward() needs the loss Invariant or Partial on {axis_words(wrong)}"
    replicate, varying = by_kind.get(Kind.R), by_kind.get(Kind.V)
    v_word = next(iter(words[Kind.V])) if len(words.get(Kind.V, ())) == 1 else "Varying"
    r_why = "every rank would seed its own gradient of 1, so the gradient is counted once per rank"
    v_why = "each rank holds a different loss, so there is no single value to differentiate"
    # a per-rank loss is most often a mean over this rank's tokens (cross_entropy's default):
    # the sum of N such means is N times the mean over every rank's tokens (a probe pasted
    # the reinterpret and trained on cp x the loss)
    means = ("; per-rank means summed are the axis size times the mean over all ranks when "
             "every rank has as many tokens: divide by the axis size first where the loss is "
             "such a mean, else sum this rank's token losses and divide by the all-reduced "
             "token count; where one rank holds the whole loss and the others none (a "
             "pipeline's last stage), reinterpret it as it is")
    # a Shard(d) loss has a dim: not the scalar backward() seeds, and each rank's block of
    # its elements is no partial sum (reinterpret(V->P) of a known shard is rejected); the
    # sum of every rank's elements is spmd.sum(..., out_partial_axes=)
    shard_dim = varying is not None and any(
        lt.dim is not None for a, lt in loss.type.axes if a in varying)
    sharded = varying is not None and (shard_dim or not scalar)
    if sharded:
        assert varying is not None
        v_why = ("each rank holds its block of the loss's elements, not a scalar loss (and "
                 "not a partial sum of one)" if shard_dim else
                 "each rank holds its own elements of a loss that is not a scalar (backward() "
                 "seeds a scalar; the reinterpret to P would leave it one per element)")
        v_sum = f"spmd.sum({x}, out_partial_axes={format_axes(varying)})"
        means = ("; for a mean, divide by the all-reduced element count")
    else:
        v_sum = f"reinterpret({x}, {format_axes(varying or [])}, src=V, dst=P)"
    if replicate is not None and varying is not None:
        rax = format_axes(replicate)
        return [SpmdError(
            "spmd-backward",
            f"{needs}, but it is {v_word} on {axis_words(varying)} and Replicate on "
            f"{axis_words(replicate)} ({format_type(loss.type)}): on {axis_words(varying)} "
            f"{v_why}, and on {axis_words(replicate)} {r_why}; "
            f"reinterpret({v_sum}, {rax}, src=R, dst=I): the sum "
            f"of {'every rank' + chr(39) + 's elements' if sharded else 'the per-rank losses'} on "
            f"{axis_words(varying)}{'' if sharded else ' (or all_gather it there first)'}, one "
            f"seed on {axis_words(replicate)} (or {_dst_i_instead})"
            f"{means}",
        )]
    if replicate is not None:
        lt_word, why = "Replicate", r_why
        fix = (f"{_dst_i_instead}, or "
               f"reinterpret({x}, {format_axes(replicate)}, src=R, dst=I)")
    else:
        assert varying is not None
        lt_word, why = v_word, v_why
        what = "every rank's elements" if sharded else "the per-rank losses"
        fix = f"{v_sum} to mean the sum of {what}{'' if sharded else ', or all_gather it first'}{means}"
        own = [i for i in inputs if i.type is not None and any(
            (lt := i.type.get(a)) is not None and lt.kind is Kind.R for a in varying)]
        if own and not sharded:
            axes_r = [a for a in varying if any(
                (lt := i.type.get(a)) is not None and lt.kind is Kind.R  # type: ignore[union-attr]
                for i in own)]
            ax = format_axes(axes_r)
            names = [bare(i.text) for i in own[:3]]
            copies = "; ".join(f"{_copy_name(n)} = spmd.reinterpret({n}, {ax}, src=R, dst=V)"
                               for n in names)
            fix = (f"if each rank differentiates its own loss with respect to its own copy of "
                   f"{' and '.join(i.text for i in own[:3])} (a per-replica inner step, as in "
                   f"MAML), make the copy Varying on {axis_words(axes_r)} before the loss is "
                   f"computed: {copies}; use {' and '.join(_copy_name(n) for n in names)} in "
                   f"the loss, in autograd.grad's inputs and in the update, and differentiate "
                   f"{v_sum} (the sum of the per-rank losses: its gradient with respect to this "
                   f"rank's copy is this rank's own loss's, V; with {names[0]} itself, R, it "
                   f"would be every rank's, P, and an update from it a wrong meta-gradient); "
                   f"otherwise {fix}")
    return [SpmdError("spmd-backward",
                      f"{needs}, but it is {lt_word} ({format_type(loss.type)}): {why}; {fix}")]


def _copy_name(text: str) -> str:
    """A new name for a copy of ``text`` (``w1`` -> ``w1_v``, ``self.w`` -> ``w_v``)."""
    last = text.rsplit(".", 1)[-1]
    return f"{last}_v" if last.isidentifier() else "copy_v"


def check_value_read(read: str, x: Operand) -> SpmdError | None:
    """``x.item()``, ``float(x)``, ``if x:``, ... (``read`` a key of VALUE_READS): the value
    leaves the tensor world, where no collective can complete a pending sum, so a Partial
    gives this rank's summand, not the value.  One error naming every Partial axis (one
    flattened all_reduce fixes them).  Any other kind reads a value that means something
    (a Varying local loss, a Replicate or Invariant value), and metadata (``x.size()``,
    ``x.dtype``) reads no value::

        loss: P["tp"]   loss.item()   error: this rank's summand
        loss: V["dp"]   loss.item()   fine: this rank's local loss
    """
    t = x.type
    if t is None:
        return None
    partial = [a for a, lt in t.axes if lt.kind is Kind.P]
    if not partial:
        return None
    template = VALUE_READS.get(read, "{x}." + read + "()")
    form = template.format(x=receiver(x.text) if template.startswith("{x}.") else bare(x.text))
    return SpmdError(
        "spmd-partial-nonlinear",
        f"Partial on {axis_words(partial)} ({_describe(x, LocalType(Kind.P), partial[0])}) cannot "
        f"be read out as a value: {form} reads this rank's summand, not the sum; "
        f"all_reduce({bare(x.text)}, {format_axes(partial)}, src=P, dst=R) first (dst=I for a "
        f"value that is also differentiated) where every rank of {axis_words(partial)} runs this "
        f"line (a collective only some ranks run, such as a pipeline's last stage, hangs); where this rank's summand is the value wanted (this stage's own loss, "
        f"the other ranks' summands zero), read {_summand(x.text, partial)} instead, "
        f"with no communication",
    )


# Point-to-point sends (torch.distributed.send, isend, a P2POp of isend given to
# batch_isend_irecv), by the name check_send takes: how the message writes the call.
SENDS: dict[str, str] = {
    "send": "torch.distributed.send({x})", "isend": "torch.distributed.isend({x})",
    "P2POp": "torch.distributed.P2POp(torch.distributed.isend, {x}, ...)",
}
_SEND_MODULES = ("torch.distributed.", "torch.distributed.distributed_c10d.")


def send_call(fullname: str) -> str | None:
    """The key of SENDS for a send's full name (``torch.distributed.distributed_c10d.isend``:
    isend; ``torch.distributed.P2POp``: P2POp, a send when its op is isend), else None."""
    for m in _SEND_MODULES:
        if fullname.startswith(m) and fullname[len(m):] in SENDS:
            return fullname[len(m):]
    return None


# What a sent expression usually ends with (a send needs a contiguous buffer with no graph):
# the fix reduces the value before them.
_SEND_SUFFIXES = (".detach()", ".contiguous()", ".clone()", ".data")


def check_send(call: str, x: Operand, gradient: bool = False) -> SpmdError | None:
    """``dist.send(x, dst)``, ``dist.isend(x, dst)``, ``dist.P2POp(dist.isend, x, peer)``
    (``call`` a key of SENDS): the raw buffer goes to another rank, which declares what it
    receives; a Partial sends this rank's summand, not the value (a read, as ``x.item()``).
    Only the send side: what a recv writes is untyped until declared.  Inside a custom
    autograd Function's forward/backward the adapters do not ask (the Function's annotations
    type what it sends, as for the raw collectives)::

        out: P["tp"]   dist.send(out.detach(), 1)   error: all_reduce(out, "tp", src=P, dst=R) first
        out: I["tp"]   dist.send(out.detach(), 1)   fine
        a: R["tp"]     dist.send(a.grad, 0)         fine: a gradient (``gradient``)

    ``gradient``: the adapters know ``x`` is a gradient (``a.grad``, a ``torch.autograd.grad``
    result, a value declared ``spmd.grad_type[...]``), sent back a stage in a pipeline's
    backward: the gradient of an R activation is P by design and the receiver declares it so
    (``spmd.grad_type[Act]``), continuing the sum in its ``backward``; reduced first, every
    rank's share would be counted tp times.  Not an error.
    """
    t = x.type
    if t is None or gradient:
        return None
    partial = [a for a, lt in t.axes if lt.kind is Kind.P]
    if not partial:
        return None
    value = bare(x.text)
    while value.endswith(_SEND_SUFFIXES):
        value = next(value[: -len(s)] for s in _SEND_SUFFIXES if value.endswith(s))
    form = SENDS.get(call, "torch.distributed." + call + "({x})").format(x=bare(x.text))
    return SpmdError(
        "spmd-partial-nonlinear",
        f"Partial on {axis_words(partial)} ({_describe(x, LocalType(Kind.P), partial[0])}) cannot "
        f"be sent as a value: {form} sends this rank's summand, not the sum; all_reduce({value}, {format_axes(partial)}, src=P, dst=R) "
        f"before the send (dst=I where the receiver declares it I)",
    )


def _summand(text: str, axes: Sequence[str]) -> str:
    """This rank's summand of a Partial ``text`` as a value without gradient (README: "A
    Partial value's summand, without a gradient")."""
    x = bare(text)
    detached = x if x.endswith(".detach()") else f"{receiver(text)}.detach()"
    return f"reinterpret({detached}, {format_axes(axes)}, src=P, dst=V)"


def _shards_without_ranks(op: str, operands: Sequence[Operand], reduction: Reduction | None,
                          move: Contraction | None, t: SpmdType) -> SpmdType:
    """The result's layout as the call alone states it (no operand's rank or shape): where the
    check mode knows shapes, the static checker may know less (``linear``'s weight may be
    1-d, and then its S(0) is the contracted dim); a rule both checkers apply alike reads
    this one."""
    if all(o.shape is None for o in operands) and (reduction is None or reduction.ndim is None):
        return t
    return propagate(op, [replace(o, shape=None) for o in operands],
                     reduction=replace(reduction, ndim=None) if reduction is not None else None,
                     move=move).type


def partial_op(op: str, operands: Sequence[Operand], axes: Sequence[str], *,
               bias: Operand | None = None, strict: bool = False,
               reduction: Reduction | None = None, move: Contraction | None = None) -> Result:
    """``spmd.einsum / matmul / linear / sum(..., out_partial_axes=axes)`` in local SPMD
    (SPEC section 6): the local op, then ``reinterpret(V, P)`` on ``axes``; a bias is added
    after, and must itself be P there.

    ``operands``: the op's tensor operands without the bias (``op`` is the torch op's
    name: einsum, matmul, linear, sum).  On each named axis the local result must be V
    (or unknown): an R or I result is the same on every rank (declaring it Partial would
    count it once per rank), a P result is already a pending sum.  The result is P on
    every named axis even after an error there, so one mistake is reported once.  Errors
    come in order: the local op's, then each axis's, then the bias's.

        h: V["tp"], w: V["tp"]   spmd.matmul(h, w, out_partial_axes="tp")  ->  P["tp"]
        + bias b: P["tp"]        spmd.linear(h, w, b, out_partial_axes="tp") -> P["tp"]
        + bias b: R["tp"]        error (spmd-partial-affine): b would be summed once per rank
    """
    if move is not None:  # what the call says: no implicit Partial on those axes
        move = replace(move, partial_axes=tuple(axes))
    if reduction is not None:
        reduction = replace(reduction, partial_axes=tuple(axes))
    res = propagate(op, operands, strict=strict, reduction=reduction, move=move)
    errors = list(res.errors)
    t = res.type
    # rank-free even after an error in the local op: a second error must not come from
    # what only the ranks tell (the check mode's diagonal block on one axis made the other
    # axis's S(1) a redundant-partial error the static checker, reading no ranks, never gives)
    shards = _shards_without_ranks(op, operands, reduction, move, t)
    for a in axes:
        lt = t.get(a)
        sl = shards.get(a)
        if lt is not None and sl is not None and sl.kind is Kind.V and sl.dim is not None:
            # a free label's shard (a column-parallel weight's output features): each rank
            # holds another block of the result, not a partial sum of one value
            errors.append(SpmdError(
                "spmd-collective",
                f'spmd.{op}(..., out_partial_axes="{a}"): the local result is {sl} on "{a}" '
                f"(each rank holds another block of its dim {sl.dim}, not a partial sum of one "
                f'value); drop "{a}" from out_partial_axes (all_gather(..., "{a}", src={sl}, '
                f"dst=R) assembles the blocks), or shard the contracted dim instead"))
        elif lt is not None and lt.kind is not Kind.V:
            if lt.kind is Kind.P:
                errors.append(SpmdError(
                    "spmd-collective",
                    f'spmd.{op}(..., out_partial_axes="{a}"): the local result is already P on '
                    f'"{a}" (an operand is Partial); drop "{a}" from out_partial_axes'))
            else:
                # an operand untyped on the axis (a plain weight, gradual) did not count: the
                # R/I comes from the typed ones, and the untyped one may be the sharded one
                untyped = [o.text for o in operands if not o.type or o.type.get(a) is None]
                unsure = ""
                if untyped:
                    names = " and ".join(untyped)
                    one = len(untyped) == 1
                    unsure = (f", as far as the typed operands tell: {names} "
                              f"{'is' if one else 'are'} untyped on \"{a}\"; if "
                              f"{'it is' if one else 'one is'} sharded there, declare it, e.g. "
                              f'spmd.declare({untyped[0]}, Tensor[V["{a}"]])')
                errors.append(SpmdError(
                    "spmd-expert-mode",
                    f'spmd.{op}(..., out_partial_axes="{a}"): the local result is {lt} on "{a}" '
                    f"(the same on every rank{unsure}), so declaring it Partial would count it "
                    f'once per rank; make an operand Varying on "{a}" (sharded), or drop "{a}" '
                    f"from out_partial_axes"))
        t = t.replace(a, LocalType(Kind.P))
    if bias is not None and bias.type:
        bias_rest = bias.type
        for a in axes:
            lt = bias.type.get(a)
            if lt is not None and lt.kind is not Kind.P:
                errors.append(SpmdError(
                    "spmd-partial-affine",
                    f'the bias of spmd.{op}(..., out_partial_axes="{a}") is {lt} on '
                    f'"{a}" ({bias.text}: {format_type(bias.type)}), so it would be '
                    f"summed once per rank; add an R bias after the reduction, or pass a "
                    f'bias that is P on "{a}"'))
                bias_rest = bias_rest.replace(a, None)
        added = propagate("add", [Operand(t, f"spmd.{op}(...)"),
                                  Operand(bias_rest, bias.text, bias.can_grad, shape=bias.shape)])
        errors.extend(added.errors)
        t = added.type if not added.errors else t
    return Result(t, merge_axis_errors(errors))



# The ops whose result adds one operand whole (a bias, addmm's input) to a product of the
# others, with that operand's position and formal name: under a claim that the result is a
# per-rank partial sum (reinterpret(..., src=V, dst=P)) that term must itself be one.
AFFINE_TERMS: dict[str, tuple[int, str]] = {
    **{c: (2, "bias") for c in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                "conv_transpose2d", "conv_transpose3d")},
    "bilinear": (3, "bias"),
    **{m: (0, "input") for m in ("addmm", "addbmm", "baddbmm", "addmv", "addr")},
}
_ADDITIVE = ("add", "sub", "subtract")


def claimed_partial_error(op: str, operands: Sequence[Operand], axis: str, arg: str,
                          rest: str | None = None,
                          taken_by: tuple[str, str] | None = None,
                          taken_dst: LocalType | None = None) -> SpmdError | None:
    """``reinterpret(arg, axis, src=V, dst=P)`` with ``arg`` an ``op(...)``: the call claims
    each rank's result is a partial sum; a term of ``op`` that is R or I on ``axis`` (a bias,
    an added constant) beside a Varying one is the same on every rank, so the reduction after
    the claim counts it once per rank (``F.conv2d(x, w, b)`` with the input channels sharded:
    (n - 1) * b too much); ``spmd.linear(..., out_partial_axes=)`` rejects an R bias alike
    (:func:`partial_op`).

    ``operands``: ``op``'s tensor operands in its positional order (add/sub: the two sides;
    :data:`AFFINE_TERMS`: the term at its position, the others around it).  ``arg``: the
    reinterpret's argument text (the expression, or the name bound to it); ``rest``: ``op``'s
    text without the term, for the fix (the adapter renders it; add/sub: the other side).
    None when no such term is there.

    ``taken_by``: the claim is a typed reduction's instead, ``all_reduce(arg, axis, src=P,
    ...)`` (reduce_scatter, Megatron's reduce_from_/reduce_scatter_to_ mappings) of a pending
    partial sum (:func:`~spmd_mypy.engine.collectives.takes_pending`): the text before and
    after ``arg`` in that call; the numbers are the same (the term summed once per rank),
    the fix adds the term after that call (``taken_dst``: the call's dst; I: its result
    reinterpreted R before an R term is added)."""
    if op in AFFINE_TERMS:
        pos = AFFINE_TERMS[op][0]
        terms = [pos] if pos < len(operands) else []
    elif op in _ADDITIVE and len(operands) == 2:
        terms = [0, 1]
    else:
        return None

    def kind(o: Operand) -> Kind | None:
        lt = o.type.get(axis) if o.type is not None else None
        return lt.kind if lt is not None else None

    for k in terms:
        term = operands[k]
        others = [o for j, o in enumerate(operands) if j != k]
        tk = kind(term)
        if tk not in (Kind.R, Kind.I) or not any(kind(o) is Kind.V for o in others):
            continue
        if tk is Kind.I and term.can_grad:
            continue  # the op itself reports an I beside a V (spmd-invariant-mix)
        assert term.type is not None and tk is not None
        b, ax, x = bare(term.text), f'"{axis}"', bare(arg)
        if op in _ADDITIVE:
            rest = bare(others[0].text)
        what = f"its {AFFINE_TERMS[op][1]}" if op in AFFINE_TERMS else "its term"
        fix = "add it after the reduction"
        if taken_by is not None:
            call = f"{taken_by[0]}{arg}{taken_by[1]}"
            if tk is Kind.R and taken_dst is not None and taken_dst.kind is Kind.I:
                # an I result beside an R term mixes: the result as R first (its backward
                # all-reduces nothing the I did not)
                taken_by = (f"spmd.reinterpret({taken_by[0]}", f"{taken_by[1]}, {ax}, src=I, dst=R)")
            if rest is not None:
                fix = f"add it after the reduction, {_added_after(op, k, taken_by, rest, b)}"
                counterpart = _PARTIAL_COUNTERPARTS.get(op)
                if counterpart is not None and op in AFFINE_TERMS and rest.endswith(")") \
                        and "(" in rest:
                    inner = rest[rest.index("(") + 1:-1]
                    declared = f"spmd.{counterpart}({inner}, out_partial_axes={ax})"
                    fix += (f" (or, declared, "
                            f"{_added_after(op, k, taken_by, declared, b)})")
            return SpmdError(
                "spmd-partial-affine",
                f"{call} takes each rank's {x} as a partial sum (src=P), but {what} {b} is "
                f"{tk.name} on {ax} ({term.text}: {format_type(term.type)}), the same on every "
                f"rank, so it would be summed once per rank; {fix}")
        if rest is not None:
            reduced = (f"all_reduce(reinterpret({rest}, {ax}, src=V, dst=P), {ax}, src=P, "
                       f"dst={tk.name})")
            pending = f"reinterpret({rest}, {ax}, src=V, dst=P)"
            conv = f"convert({b}, {ax}, src={tk.name}, dst=P)"
            if op in _ADDITIVE and op != "add" and k == 0:
                after, kept = f"{b} - {reduced}", f"{conv} - {pending}"
            else:
                sign = "-" if op in _ADDITIVE and op != "add" else "+"
                after, kept = f"{reduced} {sign} {b}", f"{pending} {sign} {conv}"
            fix = (f"add it after the reduction, {after}; or keep the sum pending, {kept} "
                   f"(one rank keeps {b}, the others add zeros)")
        return SpmdError(
            "spmd-partial-affine",
            f"reinterpret({x}, {ax}, src=V, dst=P) claims each rank's {x} is a partial sum, "
            f"but {what} {b} is {tk.name} on {ax} ({term.text}: {format_type(term.type)}), the "
            f"same on every rank, so it would be summed once per rank; {fix}")
    return None


def _added_after(op: str, k: int, taken_by: tuple[str, str], rest: str, term: str) -> str:
    """The reduction ``taken_by`` of ``rest`` with ``term`` added after it (subtracted for a
    sub, on its side)."""
    reduced = f"{taken_by[0]}{rest}{taken_by[1]}"
    if op in _ADDITIVE and op != "add" and k == 0:
        return f"{term} - {reduced}"
    return f"{reduced} {'-' if op in _ADDITIVE and op != 'add' else '+'} {term}"


# An int computed from a rank query (``r = dist.get_rank()``, ``start = r * rows``: the
# static checker's pre-pass finds them): as an index, slice bound, mask bound or scalar
# operand it makes the op take something else on each rank, so it is an INDEX operand
# Varying on the axes the query runs over, and the rule is a Varying index's: an R result
# becomes V (its backward zero-pads each rank's gradient, a per-rank partial, as
# ``convert(R->S(i))``'s backward does: V is claimable as S(i)), an I or P one an error.
RANK_DERIVED = ", computed from the rank"


def rank_index_operand(axes: Sequence[str], text: str, cut: int | None = None) -> Operand:
    """The rank-derived int ``text`` varying on ``axes``, as an operand; ``cut``: the dim a
    rank-derived slice cuts (``full[r * k:(r + 1) * k]``: 0), when the adapter reads it."""
    return Operand(SpmdType.of({a: VARYING for a in axes}), text + RANK_DERIVED, can_grad=False,
                   role=Role.INDEX, cut=cut)
