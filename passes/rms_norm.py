"""RMS normalisation: y = scale * x / sqrt(mean(x^2) + epsilon), no mean subtraction, no bias.

What LLaMA, Mistral, Qwen2, Gemma and T5 exports write, with the variations exporters add::

    x ──> [Cast(float32)] ──> Pow(., 2) | Mul(., .) ──> ReduceMean ──> Add(epsilon) ──> Sqrt ──> rms
    x' ──> Div(., rms) | Mul(., Reciprocal(rms) | Div(1, rms) | Pow(ms + eps, -0.5)) ──> normed
    normed ──> [Cast(back)] ──> Mul(scale) ──> y        (or Mul(scale) before the Cast back)

Gemma's scale `1 + w` is folded as a constant. Fused only when it is exactly RMS normalisation:
the mean of squares over trailing axes (never the first, batch axis), epsilon a positive scalar
inside the square root, scale varying only along the normalised axes. Close spellings that compute
something else (mean of |x|, sum without division, epsilon after the square root) are matched so
that the report can say why they were left alone. An input of the form `a - ReduceMean(a)` is a
layer norm the layer-norm pass declined: it is not fused as RMS either, and not reported twice.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from normfuse import norm_checks as checks
from normfuse.pattern import AnyOf, Const, Match, Op, Var, match_first
from normfuse.rewrite import Context, Site

KIND = "rms-norm"

_x = AnyOf(Op("Cast", Var("x"), name="upcast"), Var("x"))
_square = AnyOf(
    Op("Pow", _x, Const("two", 2.0), name="square"),
    Op("Mul", _x, _x, name="square"),
    Op("Abs", _x, name="absolute"),  # near-miss: mean of |x|
)
_mean_square = AnyOf(
    Op("ReduceMean", _square, name="reduce", extra_inputs=True),
    Op("Div", Op("ReduceSum", _square, name="reduce", extra_inputs=True), Const("divisor")),
    Op("ReduceSum", _square, name="reduce", extra_inputs=True),  # near-miss: sum, not mean
)
_shifted = Op("Add", _mean_square, Var("epsilon"), name="shifted")
_rms = Op("Sqrt", _shifted)
_normed = AnyOf(
    Op("Div", _x, _rms, name="normed"),
    Op("Mul", _x, Op("Reciprocal", _rms), name="normed"),
    Op("Mul", _x, Op("Div", Const("one", 1.0), _rms), name="normed"),  # TorchScript's rsqrt
    Op("Mul", _x, Op("Pow", _shifted, Const("minus_half", -0.5)), name="normed"),
    # Near-miss: epsilon added after the square root.
    Op(
        "Div",
        _x,
        Op("Add", Op("Sqrt", _mean_square), Const("epsilon"), name="rms_plus_epsilon"),
        name="normed",
    ),
)


def _downcast(pattern: Op | AnyOf) -> Op:
    return Op("Cast", pattern, name="downcast")


# `a - ReduceMean(a)`: an input that makes the match a layer norm, not an RMS norm.
_CENTERED = Op("Sub", Var("a"), Op("ReduceMean", Var("a"), extra_inputs=True))

_ROOTS = (
    Op("Mul", AnyOf(_downcast(_normed), _normed), Const("scale"), name="y"),
    _downcast(Op("Mul", _normed, Const("scale"), name="y")),
    _downcast(_normed),
    _normed,
)
# Near-misses: a bias after the RMS norm (layer norm without its mean?), and L2 normalisation.
_WITH_BIAS = tuple(Op("Add", root, Const("bias"), name="biased") for root in _ROOTS[:2])
_l2 = Op("ReduceL2", _x, name="reduce", extra_inputs=True)
_L2_NORMALISED = Op(
    "Div",
    _x,
    AnyOf(Op("Add", _l2, Const("epsilon")), Op("Max", _l2, Const("epsilon")), _l2),
    name="normed",
)
PATTERNS = (*_WITH_BIAS, *_ROOTS, _L2_NORMALISED)


class RmsNormPass:
    """Fuses decomposed RMS normalisation (`SimplifiedLayerNormalization` or `RMSNormalization`)."""

    name = "rms-norm"
    kind = KIND
    patterns = PATTERNS
    shared_names = ("upcast",)

    def site_key(self, match: Match) -> gs.Node:
        """The reduction of the squares identifies one RMS norm."""
        return match.node("reduce")

    def check(self, match: Match, context: Context) -> Site | None:
        """A `Site` if `match` is exactly RMS normalisation; raises `Reject` with the reason.

        None for `a - ReduceMean(a)` inputs: a layer norm, which the layer-norm pass reports.
        """
        if match_first(_CENTERED, match["x"], context.reader) is not None:
            return None
        return _check(match, context)


def _check(match: Match, context: Context) -> Site:
    if "rms_plus_epsilon" in match:
        raise checks.Reject("epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it")
    if "absolute" in match:
        raise checks.Reject("mean-abs-not-square", "the statistic is the mean of |x|, not of x^2")
    reduce = match.node("reduce")
    if reduce.op == "ReduceL2":
        raise checks.Reject("l2-norm", "x / ||x||_2 is L2 normalisation: no mean, no sqrt(d)")
    if "biased" in match:
        raise checks.Reject(
            "rms-with-bias",
            "an RMS norm followed by a bias: a layer norm without its mean subtraction? left alone",
        )
    if reduce.op == "ReduceSum" and "divisor" not in match:
        raise checks.Reject("sum-not-mean", "the squares are summed, not averaged")
    io = checks.fused_io(match, context)
    shape = checks.known_shape(match["x"], context)
    rank = len(shape)
    axes = checks.reduction_axes([reduce], rank, context)
    dims = checks.normalised_shape(shape, axes)
    checks.check_divisor(match, context, int(np.prod(dims)))
    eps = checks.epsilon(match, context)
    scale = checks.affine(match, "scale", context, dims, rank)
    scale = np.ones(dims, io.dtype) if scale is None else scale.astype(io.dtype)
    return checks.fused_site(KIND, match, context, io, axes[0], eps, (scale,))
