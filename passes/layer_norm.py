"""Layer normalisation: y = scale * (x - mean) / sqrt(variance + epsilon) + bias.

The subgraph PyTorch's TorchScript exporter writes for `nn.LayerNorm`, and the spellings it varies
by (any Add/Mul operand order; scale and bias optional)::

    x ──> ReduceMean ──> mean
    x, mean ──> Sub ──> centered ──┬──> Pow(., 2) | Mul(., .) ──> ReduceMean ──> variance
                                   │    variance ──> Add(epsilon) ──> Sqrt ──> std
                                   └──> Div(., std) | Mul(., Reciprocal(std)) ──> normed
    (Reciprocal(std) may also be written Div(1, std) or Pow(variance + epsilon, -0.5))
    normed ──> Mul(scale) ──> Add(bias) ──> y

`centered` may be computed once or twice; the variance may be one-pass, E[x^2] - E[x]^2; mixed-
precision exports wrap the statistics in `Cast(x -> float32) ... Cast(back)`. tf2onnx writes Keras'
layer norm as `x * g + (bias - mean * g)` with `g = scale * rsqrt(variance + epsilon)`. A scale
over the normalised axes that also varies along others (Cohere's QK-norm weight [H, Dh] on
[N, S, H, Dh]) stays a Mul after the fused node, which normalises with a unit scale; a Cast of x
to its own type before the statistics (TorchScript's float16 adaLN) stays outside. Fused only
when it is exactly layer normalisation: mean and variance reduce the same trailing axes (never the
first, batch axis) of the same tensor with divisor d, epsilon is a positive scalar inside the
square root, and scale and bias broadcast only along the normalised axes. Spellings that are close
but compute something else are matched too, so that the report can say why they were left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.facts.constants import reduce_axes
from normfuse.match import fused_sites
from normfuse.match import norm_checks as checks
from normfuse.match.context import Context
from normfuse.match.pattern import AnyOf, Const, Match, Op, Var, match_first
from normfuse.match.records import Site

KIND = "layer-norm"
WIDE_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)

_x = AnyOf(Op("Cast", Var("x"), name="upcast"), Var("x"))


def _reduced(op: str, pattern, name: str) -> AnyOf:
    """`op` over `pattern` (bound to `name`), or with keepdims=0 and an `Unsqueeze` back."""
    reduce = Op(op, pattern, name=name, extra_inputs=True)
    return AnyOf(reduce, Op("Unsqueeze", reduce, name=f"{name}_unsqueezed", extra_inputs=True))


_mean = _reduced("ReduceMean", _x, "mean")


def _deviation(sub: Op) -> AnyOf:
    # PyTorch's float16 export casts `x - mean` up (to float64) for the variance and the division.
    return AnyOf(Op("Cast", sub, name="centered_cast"), sub)


_centered = _deviation(Op("Sub", _x, _mean, name="centered"))
# `mean - x`: squared, the same; as the numerator, exact with the scale negated.
_negated = _deviation(Op("Sub", _mean, _x, name="negated"))
_negated_numerator = _deviation(Op("Sub", _mean, _x, name="negated_numerator"))
_square = AnyOf(
    *(Op("Pow", dev, Const("two", 2.0), name="square") for dev in (_centered, _negated)),
    # Any other constant exponent: checked to be all exactly 2 (`check_square_exponent`).
    *(Op("Pow", dev, Const("square_exponent"), name="square") for dev in (_centered, _negated)),
    *(Op("Mul", dev, dev, name="square") for dev in (_centered, _negated)),
)
_variance = AnyOf(
    _reduced("ReduceMean", _square, "variance_reduce"),
    # Near-misses unless the divisor is d: sum / n, sum * (1/n), and mean * correction.
    Op("Div", _reduced("ReduceSum", _square, "variance_reduce"), Var("divisor"), name="variance"),
    Op(
        "Mul",
        _reduced("ReduceSum", _square, "variance_reduce"),
        Const("reciprocal_divisor"),
        name="variance",
    ),
    Op(
        "Mul",
        _reduced("ReduceMean", _square, "variance_reduce"),
        Const("correction"),
        name="variance",
    ),
    # One pass: E[x^2] - E[x]^2.
    Op(
        "Sub",
        _reduced(
            "ReduceMean",
            AnyOf(Op("Pow", _x, Const("two", 2.0)), Op("Mul", _x, _x)),
            "variance_reduce",
        ),
        AnyOf(Op("Pow", _mean, Const("two", 2.0)), Op("Mul", _mean, _mean)),
        name="variance",
    ),
)
_shifted = Op("Add", _variance, Var("epsilon"), name="shifted")
# Sqrt, or Pow(., e) with e checked to be exactly 0.5.
_std = AnyOf(Op("Sqrt", _shifted, name="std"), Op("Pow", _shifted, Const("half"), name="std"))
# 1 / std: Reciprocal, Div(1, .), Pow(., e) with e checked to be exactly -1, or Pow(shifted, -0.5).
_inv_std = AnyOf(
    Op("Reciprocal", _std, name="inv_std"),
    Op("Pow", _std, Const("minus_one"), name="inv_std"),
    Op("Div", Const("one", 1.0), _std, name="inv_std"),
    Op("Pow", _shifted, Const("minus_half", -0.5), name="inv_std"),
)
_std_plus_epsilon = AnyOf(
    Op("Add", Op("Sqrt", _variance), Const("epsilon"), name="std_plus_epsilon"),
    Op("Add", Op("Pow", _variance, Const("half")), Const("epsilon"), name="std_plus_epsilon"),
)
_normed = AnyOf(
    *(Op("Div", dev, _std, name="normed") for dev in (_centered, _negated_numerator)),
    *(Op("Mul", dev, _inv_std, name="normed") for dev in (_centered, _negated_numerator)),
    # Near-miss: epsilon added after the square root (Sqrt or Pow(., 0.5)), divided by or
    # multiplied with its reciprocal.
    *(Op("Div", dev, _std_plus_epsilon, name="normed") for dev in (_centered, _negated_numerator)),
    *(
        Op("Mul", dev, reciprocal, name="normed")
        for dev in (_centered, _negated_numerator)
        for reciprocal in (
            Op("Reciprocal", _std_plus_epsilon),
            Op("Pow", _std_plus_epsilon, Const("minus_one")),
            Op("Div", Const("one", 1.0), _std_plus_epsilon),
        )
    ),
)


def _downcast(pattern: Op | AnyOf) -> Op:
    return Op("Cast", pattern, name="downcast")


# The statistics without affine (and cast back), shared with the group-norm pass: the very
# objects, so the driver matches each once for both passes (`rewrite.SharedMatches`).
STATISTICS = _normed
DOWNCAST_STATISTICS = _downcast(_normed)


def _parameter(name: str) -> AnyOf:
    """A constant scale or bias, or (ONNX's function body) a Flatten of one."""
    return AnyOf(Const(name), Op("Flatten", Const(f"{name}_source"), name=name))


def _affine(normed: Op | AnyOf) -> tuple[Op, ...]:
    """`normed` with scale and bias, scale only, bias only."""
    scaled = Op("Mul", normed, _parameter("scale"), name="scaled")
    return (
        Op("Add", scaled, _parameter("bias"), name="y"),
        Op("Add", normed, _parameter("bias"), name="y"),
        scaled,
    )


# tf2onnx / Keras: x * (scale * rsqrt(variance + epsilon)) + (bias - mean * scale * rsqrt(...)).
# The gain appears twice; both occurrences must be one tensor (the name binds it), so each gain
# spelling is its own pattern: one side with the scale and the other without is not a layer norm.
def _keras(gain: Op | AnyOf) -> tuple[Op, ...]:
    x_gained = Op("Mul", _x, gain)
    mean_gained = Op("Mul", _mean, gain)
    return (
        Op("Add", x_gained, Op("Sub", Const("bias"), mean_gained), name="y"),
        Op("Add", x_gained, Op("Neg", mean_gained), name="y"),
        Op("Sub", x_gained, mean_gained, name="y"),
    )


_KERAS = (*_keras(Op("Mul", _inv_std, Const("scale"), name="gain")), *_keras(_inv_std))

# Last resort, so that no look-alike is refused silently: `x - mean(x)` (either sign) that none
# of the spellings above turns into a layer norm is reported as such (it is the smallest
# candidate of its site, so a real layer norm's larger match always comes first).
_LOOKALIKE = (
    Op("Sub", _x, _mean, name="lookalike"),
    Op("Sub", _mean, _x, name="lookalike"),
)

PATTERNS = (
    *_affine(AnyOf(_downcast(_normed), _normed)),
    *(_downcast(pattern) for pattern in _affine(_normed)),
    DOWNCAST_STATISTICS,
    STATISTICS,
    *_KERAS,
    *_LOOKALIKE,
)


class LayerNormPass:
    """Fuses decomposed layer normalisation into `LayerNormalization`."""

    name = "layer-norm"
    kind = KIND
    patterns = PATTERNS
    # Statistics that may also be used outside: checked by `norm_fused_sites.statistics_outputs`.
    shared_names = ("upcast", "mean", "inv_std", "std")
    # Shared bindings that may not be graph outputs themselves (the fused node provides only
    # what a Reciprocal of the std computes, never the std): checked by the driver.
    never_outputs = ("std",)

    def site_key(self, match: Match) -> gs.Node:
        """The mean's ReduceMean identifies one layer norm."""
        return match.node("mean")

    def check(self, match: Match, context: Context) -> Site:
        """A `Site` if `match` is exactly layer normalisation; raises `Reject` with the reason."""
        return _check(match, context)


_RESHAPED = Op("Reshape", Var("ungrouped"), Var("groups"))


# Bindings whose presence alone refuses the site, checked first, in this order.
_REFUSALS = (
    checks.Refusal(
        "lookalike",
        "not-layer-norm",
        "x - mean(x) is computed here, but what follows is no spelling of layer "
        "normalisation that normfuse can prove exact; left alone",
    ),
    checks.Refusal(
        "std_plus_epsilon", "epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it"
    ),
)


def _check(match: Match, context: Context) -> Site:
    checks.refuse_bindings(match, _REFUSALS)
    checks.check_exponents(match, context)
    _reject_group_norm(match, context)
    if "centered_cast" in match and match.node("centered_cast").attrs.get("to") not in WIDE_TYPES:
        raise checks.Reject("cast-types", "x - mean is cast to a narrower type")
    io = checks.fused_io(match, context)
    shape = checks.known_shape(match["x"], context)
    rank = len(shape)
    names = ("mean", "variance_reduce")
    reducers = [match.node(name) for name in names]
    unsqueezed = checks.unsqueezed_reducers(match, names)
    axes = checks.reduction_axes(reducers, rank, context, True, unsqueezed)
    if checks.is_channel_first(axes, rank):
        return _channel_first_site(match, context, io, shape)
    dims = checks.normalised_shape(shape, axes)
    checks.check_divisor(match, context, int(np.prod(dims)))
    checks.check_square_exponent(match, context, shape)
    eps = checks.epsilon(match, context, checks.reduced_shape(shape, axes))
    # A per-head scale (Cohere's QK-norm, [H, Dh]) stays a Mul after the fused node.
    kept = checks.scale_kept_after(match, context, shape, dims)
    scale = None if kept is not None else checks.affine(match, "scale", context, dims, rank)
    bias = checks.affine(match, "bias", context, dims, rank)
    scale = np.ones(dims, io.dtype) if scale is None else scale
    if "negated_numerator" in match:  # (mean - x) / std * scale == (x - mean) / std * -scale
        scale = -scale
    extra = fused_sites.statistics_outputs(match, context, io, None, shape, axes)
    return fused_sites.fused_site(
        KIND, match, context, io, axes[0], eps, (scale, bias), extra_outputs=extra, scale_after=kept
    )


def _channel_first_site(match: Match, context: Context, io: checks.FusedIO, shape: tuple) -> Site:
    """Statistics over axis 1 of NCHW-like data (ConvNeXt): Transpose the channels last, fuse,
    Transpose back. Measured faster than the decomposed form on CPU
    (docs/spellings-and-reasons.md)."""
    rank, channels = len(shape), shape[1]
    if not isinstance(channels, int):
        raise checks.Reject("unknown-shape", f"the channel dim {channels!r} is not static")
    checks.check_divisor(match, context, channels)
    eps = checks.epsilon(match, context)
    scale = checks.channel_affine(match, "scale", context, channels, rank)
    bias = checks.channel_affine(match, "bias", context, channels, rank)
    scale = np.ones(channels, io.dtype) if scale is None else scale
    if "negated_numerator" in match:
        scale = -scale
    bias = bias
    fused_sites.statistics_outputs(match, context, io, "channel-first", shape, None)
    to_last = (0, *range(2, rank), 1)
    back = (0, rank - 1, *range(1, rank - 1))
    return fused_sites.fused_site(KIND, match, context, io, -1, eps, (scale, bias), (to_last, back))


def _reject_group_norm(match: Match, context: Context) -> None:
    """Group norm reshapes channels into groups, normalises each group, and reshapes back: the
    statistics are not per-token. Conservatively, any norm sandwiched between Reshapes is left,
    unless the first Reshape keeps the last axis and the statistics reduce it alone: each row
    normalised is then a row of the Reshape's input, a layer norm of it (ADV7-01)."""
    users = match.root.outputs
    reshaped_back = bool(users) and all(user.op == "Reshape" for user in users)
    found = match_first(_RESHAPED, match["x"], context.facts) if reshaped_back else None
    if found is not None and not _keeps_last_axis(match, found["ungrouped"], context):
        raise checks.Reject(
            "group-norm", "statistics over a Reshape of the input, reshaped back: group norm"
        )


def _keeps_last_axis(match: Match, ungrouped: gs.Tensor, context: Context) -> bool:
    """Whether the statistics reduce the last axis of `match`'s x alone and x's last dim is
    static and equal to the last dim of `ungrouped`, the tensor x reshapes (rows stay rows)."""
    before, after = context.facts.shape(ungrouped), context.facts.shape(match["x"])
    if not before or not after or not isinstance(after[-1], int) or before[-1] != after[-1]:
        return False
    reducers = [match.node(name) for name in ("mean", "variance_reduce")]
    return all(reduce_axes(node, len(after), context.facts) == (-1,) for node in reducers)
