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
layer norm as `x * g + (bias - mean * g)` with `g = scale * rsqrt(variance + epsilon)`. Fused only
when it is exactly layer normalisation: mean and variance reduce the same trailing axes (never the
first, batch axis) of the same tensor with divisor d, epsilon is a positive scalar inside the
square root, and scale and bias broadcast only along the normalised axes. Spellings that are close
but compute something else are matched too, so that the report can say why they were left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse import norm_checks as checks
from normfuse.pattern import AnyOf, Const, Match, Op, Var, match_first
from normfuse.rewrite import Context, Site

KIND = "layer-norm"
WIDE_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)

_x = AnyOf(Op("Cast", Var("x"), name="upcast"), Var("x"))
_mean = Op("ReduceMean", _x, name="mean", extra_inputs=True)
_centered = Op("Sub", _x, _mean, name="centered")
# PyTorch's float16 export casts `x - mean` up (to float64) for the variance and the division.
_deviation = AnyOf(Op("Cast", _centered, name="centered_cast"), _centered)
_square = AnyOf(
    Op("Pow", _deviation, Const("two", 2.0), name="square"),
    Op("Mul", _deviation, _deviation, name="square"),
)
_variance = AnyOf(
    Op("ReduceMean", _square, name="variance_reduce", extra_inputs=True),
    # Near-misses unless the divisor is d: sum / n, and mean * correction.
    Op(
        "Div",
        Op("ReduceSum", _square, name="variance_reduce", extra_inputs=True),
        Const("divisor"),
        name="variance",
    ),
    Op(
        "Mul",
        Op("ReduceMean", _square, name="variance_reduce", extra_inputs=True),
        Const("correction"),
        name="variance",
    ),
    # One pass: E[x^2] - E[x]^2.
    Op(
        "Sub",
        Op(
            "ReduceMean",
            AnyOf(Op("Pow", _x, Const("two", 2.0)), Op("Mul", _x, _x)),
            name="variance_reduce",
            extra_inputs=True,
        ),
        AnyOf(Op("Pow", _mean, Const("two", 2.0)), Op("Mul", _mean, _mean)),
        name="variance",
    ),
)
_shifted = Op("Add", _variance, Var("epsilon"), name="shifted")
_std = Op("Sqrt", _shifted, name="std")
_normed = AnyOf(
    Op("Div", _deviation, _std, name="normed"),
    Op("Mul", _deviation, Op("Reciprocal", _std), name="normed"),
    Op("Mul", _deviation, Op("Div", Const("one", 1.0), _std), name="normed"),
    Op("Mul", _deviation, Op("Pow", _shifted, Const("minus_half", -0.5)), name="normed"),
    # Near-miss: epsilon added after the square root.
    Op(
        "Div",
        _deviation,
        Op("Add", Op("Sqrt", _variance), Const("epsilon"), name="std_plus_epsilon"),
        name="normed",
    ),
)

# The statistics without affine, shared with the group-norm pass.
STATISTICS = _normed


def _downcast(pattern: Op | AnyOf) -> Op:
    return Op("Cast", pattern, name="downcast")


def _affine(normed: Op | AnyOf) -> tuple[Op, ...]:
    """`normed` with scale and bias, scale only, bias only."""
    scaled = Op("Mul", normed, Const("scale"), name="scaled")
    return (
        Op("Add", scaled, Const("bias"), name="y"),
        Op("Add", normed, Const("bias"), name="y"),
        scaled,
    )


# tf2onnx / Keras: x * (scale * rsqrt(variance + epsilon)) + (bias - mean * scale * rsqrt(...)).
# The gain appears twice; both occurrences must be one tensor (the name binds it), so each gain
# spelling is its own pattern: one side with the scale and the other without is not a layer norm.
_inv_std = AnyOf(
    Op("Reciprocal", _std, name="inv_std"),
    Op("Pow", _shifted, Const("minus_half", -0.5), name="inv_std"),
    Op("Div", Const("one", 1.0), _std, name="inv_std"),
)


def _keras(gain: Op | AnyOf) -> tuple[Op, ...]:
    x_gained = Op("Mul", _x, gain)
    mean_gained = Op("Mul", _mean, gain)
    return (
        Op("Add", x_gained, Op("Sub", Const("bias"), mean_gained), name="y"),
        Op("Add", x_gained, Op("Neg", mean_gained), name="y"),
        Op("Sub", x_gained, mean_gained, name="y"),
    )


_KERAS = (*_keras(Op("Mul", _inv_std, Const("scale"), name="gain")), *_keras(_inv_std))

PATTERNS = (
    *_affine(AnyOf(_downcast(_normed), _normed)),
    *(_downcast(pattern) for pattern in _affine(_normed)),
    _downcast(_normed),
    _normed,
    *_KERAS,
)


class LayerNormPass:
    """Fuses decomposed layer normalisation into `LayerNormalization`."""

    name = "layer-norm"
    kind = KIND
    patterns = PATTERNS
    shared_names = ("upcast",)

    def site_key(self, match: Match) -> gs.Node:
        """The mean's ReduceMean identifies one layer norm."""
        return match.node("mean")

    def check(self, match: Match, context: Context) -> Site:
        """A `Site` if `match` is exactly layer normalisation; raises `Reject` with the reason."""
        return _check(match, context)


_RESHAPED = Op("Reshape", Var("ungrouped"), Var("groups"))


def _check(match: Match, context: Context) -> Site:
    if "std_plus_epsilon" in match:
        raise checks.Reject("epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it")
    _reject_group_norm(match, context)
    if "centered_cast" in match and match.node("centered_cast").attrs.get("to") not in WIDE_TYPES:
        raise checks.Reject("cast-types", "x - mean is cast to a narrower type")
    io = checks.fused_io(match, context)
    shape = checks.known_shape(match["x"], context)
    rank = len(shape)
    reducers = [match.node("mean"), match.node("variance_reduce")]
    axes = checks.reduction_axes(reducers, rank, context, channel_first=True)
    if checks.is_channel_first(axes, rank):
        return _channel_first_site(match, context, io, shape)
    dims = checks.normalised_shape(shape, axes)
    checks.check_divisor(match, context, int(np.prod(dims)))
    eps = checks.epsilon(match, context)
    scale = checks.affine(match, "scale", context, dims, rank)
    bias = checks.affine(match, "bias", context, dims, rank)
    scale = np.ones(dims, io.dtype) if scale is None else scale.astype(io.dtype)
    bias = None if bias is None else bias.astype(io.dtype)
    return checks.fused_site(KIND, match, context, io, axes[0], eps, (scale, bias))


def _channel_first_site(match: Match, context: Context, io: checks.FusedIO, shape: tuple) -> Site:
    """Statistics over axis 1 of NCHW-like data (ConvNeXt): Transpose the channels last, fuse,
    Transpose back. Measured faster than the decomposed form on CPU (see README)."""
    rank, channels = len(shape), shape[1]
    if not isinstance(channels, int):
        raise checks.Reject("unknown-shape", f"the channel dim {channels!r} is not static")
    checks.check_divisor(match, context, channels)
    eps = checks.epsilon(match, context)
    scale = checks.channel_affine(match, "scale", context, channels, rank)
    bias = checks.channel_affine(match, "bias", context, channels, rank)
    scale = np.ones(channels, io.dtype) if scale is None else scale.astype(io.dtype)
    bias = None if bias is None else bias.astype(io.dtype)
    to_last = (0, *range(2, rank), 1)
    back = (0, rank - 1, *range(1, rank - 1))
    return checks.fused_site(KIND, match, context, io, -1, eps, (scale, bias), (to_last, back))


def _reject_group_norm(match: Match, context: Context) -> None:
    """Group norm reshapes channels into groups, normalises each group, and reshapes back: the
    statistics are not per-token. Conservatively, any norm sandwiched between Reshapes is left."""
    users = match.root.outputs
    reshaped_back = bool(users) and all(user.op == "Reshape" for user in users)
    if reshaped_back and match_first(_RESHAPED, match["x"], context.reader) is not None:
        raise checks.Reject(
            "group-norm", "statistics over a Reshape of the input, reshaped back: group norm"
        )
