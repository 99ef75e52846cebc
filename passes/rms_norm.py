"""RMS normalisation: y = scale * x / sqrt(mean(x^2) + epsilon), no mean subtraction, no bias.

What LLaMA, Mistral, Qwen2, Gemma and T5 exports write, with the variations exporters add::

    x ──> [Cast(float32)] ──> Pow(., 2) | Mul(., .) ──> ReduceMean ──> Add(epsilon) ──> Sqrt ──> rms
    x' ──> Div(., rms) | Mul(., Reciprocal(rms) | Div(1, rms) | Pow(ms + eps, -0.5)) ──> normed
    normed ──> [Cast(back)] ──> Mul(scale) ──> y        (or Mul(scale) before the Cast back)

Gemma's scale `1 + w` is folded as a constant. The gated RMS norm of Mamba2 and NemotronH,
`w * RMS_group(x * silu(z))`, is this pattern over the grouped tensor's last axis: the node
replaces the statistics with a unit scale, and the gate, both Reshapes and the per-channel
weight stay as the model has them (exact whatever the grouping).
Fused only when it is exactly RMS normalisation:
the mean of squares over trailing axes (never the first, batch axis), epsilon a positive scalar
inside the square root, scale varying only along the normalised axes. Close spellings that compute
something else (mean of |x|, sum without division, epsilon after the square root) are matched so
that the report can say why they were left alone. An input of the form `a - ReduceMean(a)` is a
layer norm the layer-norm pass declined: it is not fused as RMS either, and not reported twice.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from normfuse.match import fused_sites
from normfuse.match import norm_checks as checks
from normfuse.match.context import Context
from normfuse.match.pattern import AnyOf, Const, Match, Op, Var, match_first
from normfuse.match.records import Site

KIND = "rms-norm"

_x = AnyOf(Op("Cast", Var("x"), name="upcast"), Var("x"))


def _reduced(op: str, pattern) -> AnyOf:
    """`op` over `pattern` (bound to "reduce"), or with keepdims=0 and an `Unsqueeze` back."""
    reduce = Op(op, pattern, name="reduce", extra_inputs=True)
    return AnyOf(reduce, Op("Unsqueeze", reduce, name="reduce_unsqueezed", extra_inputs=True))


_square = AnyOf(
    Op("Pow", _x, Const("two", 2.0), name="square"),
    # Any other constant exponent: checked to be all exactly 2 (`check_square_exponent`).
    Op("Pow", _x, Const("square_exponent"), name="square"),
    Op("Mul", _x, _x, name="square"),
    Op("Abs", _x, name="absolute"),  # near-miss: mean of |x|
)
_l2 = _reduced("ReduceL2", _x)
# sum(x^2): ReduceSum of the squares, ReduceSumSquare, or ReduceL2 squared.
_sum_squares = AnyOf(
    _reduced("ReduceSum", _square),
    _reduced("ReduceSumSquare", _x),
    Op("Pow", _l2, Const("two", 2.0)),
    Op("Mul", _l2, _l2),
)
_mean_square = AnyOf(
    _reduced("ReduceMean", _square),
    Op("Div", _sum_squares, Var("divisor")),
    Op("Mul", _sum_squares, Const("reciprocal_divisor")),
    _sum_squares,  # near-miss: sum, not mean
)
_shifted = AnyOf(
    Op("Add", _mean_square, Var("epsilon"), name="shifted"),
    # (sum(x^2) + epsilon) / d: epsilon / d inside the mean.
    Op("Div", Op("Add", _sum_squares, Var("epsilon"), name="epsilon_in_sum"), Var("divisor")),
)
_rms = AnyOf(Op("Sqrt", _shifted), Op("Pow", _shifted, Const("half")))
_normed = AnyOf(
    Op("Div", _x, _rms, name="normed"),
    Op("Mul", _x, Op("Reciprocal", _rms), name="normed"),
    Op("Mul", _x, Op("Pow", _rms, Const("minus_one")), name="normed"),
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


# `a - ReduceMean(a)` or `ReduceMean(a) - a` (the mean possibly unsqueezed back): an input that
# makes the match a layer norm, which the layer-norm pass fuses or reports.
_mean_of_a = Op("ReduceMean", Var("a"), extra_inputs=True)
_mean_of_a_kept = AnyOf(_mean_of_a, Op("Unsqueeze", _mean_of_a, extra_inputs=True))
_CENTERED = AnyOf(Op("Sub", Var("a"), _mean_of_a_kept), Op("Sub", _mean_of_a_kept, Var("a")))

# A bias after the scale is not part of the match: the RMS norm fuses and the Add stays.
_ROOTS = (
    Op("Mul", AnyOf(_downcast(_normed), _normed), Const("scale"), name="y"),
    _downcast(Op("Mul", _normed, Const("scale"), name="y")),
    _downcast(_normed),
    _normed,
)
# Near-miss: L2 normalisation.
_L2_NORMALISED = Op(
    "Div",
    _x,
    AnyOf(Op("Add", _l2, Const("epsilon")), Op("Max", _l2, Const("epsilon")), _l2),
    name="l2_normalised",
)
# Last resort, so that no look-alike is refused silently: a mean of squares (or of any power),
# a sum of squares or an L2 norm that none of the spellings above turns into an RMS norm (the
# smallest candidate of its site).
_LOOKALIKES = (
    Op(
        "ReduceMean",
        AnyOf(Op("Pow", _x, Var("lookalike_exponent")), Op("Mul", _x, _x)),
        name="reduce",
        extra_inputs=True,
    ),
    Op("ReduceSumSquare", _x, name="reduce", extra_inputs=True),
    Op("ReduceL2", _x, name="reduce", extra_inputs=True),
)
PATTERNS = (*_ROOTS, _L2_NORMALISED, *_LOOKALIKES)
_LOOKALIKE_STATISTICS = {
    "ReduceMean": "a mean of squares (or of another power)",
    "ReduceSumSquare": "a sum of squares",
    "ReduceL2": "an L2 norm",
}


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
        if match_first(_CENTERED, match["x"], context.facts) is not None:
            return None
        squared = [match[name] for name in ("x", "upcast") if name in match]
        if match.root is match["reduce"] and _also_averaged(squared, match.node("reduce")):
            return None  # E[x^2] beside E[x]: a one-pass variance, the layer-norm pass's
        return _check(match, context)


def _also_averaged(tensors: list[gs.Tensor], reduce: gs.Node) -> bool:
    """True when a squared tensor also feeds another ReduceMean (its mean is taken too)."""
    return any(
        user.op == "ReduceMean" and user is not reduce for x in tensors for user in x.outputs
    )


# Bindings whose presence alone refuses the site, checked in this order after the lookalikes.
_REFUSALS = (
    checks.Refusal(
        "rms_plus_epsilon", "epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it"
    ),
    checks.Refusal(
        "absolute", "mean-abs-not-square", "the statistic is the mean of |x|, not of x^2"
    ),
    checks.Refusal(
        "l2_normalised", "l2-norm", "x / ||x||_2 is L2 normalisation: no mean, no sqrt(d)"
    ),
)


def _check(match: Match, context: Context) -> Site:
    if match.root is match["reduce"]:  # the last-resort pattern: nothing larger matched
        statistic = _LOOKALIKE_STATISTICS[match.node("reduce").op]
        raise checks.Reject(
            "not-rms-norm",
            f"{statistic} is computed here, but what follows is no spelling of RMS "
            "normalisation that normfuse can prove exact; left alone",
        )
    checks.refuse_bindings(match, _REFUSALS)
    checks.check_exponents(match, context)
    reduce = match.node("reduce")
    if reduce.op != "ReduceMean" and not {"divisor", "reciprocal_divisor"} & match.tensors.keys():
        raise checks.Reject("sum-not-mean", "the squares are summed, not averaged")
    io = checks.fused_io(match, context)
    shape = checks.known_shape(match["x"], context)
    rank = len(shape)
    unsqueezed = checks.unsqueezed_reducers(match, ("reduce",))
    axes = checks.reduction_axes([reduce], rank, context, unsqueezed=unsqueezed)
    dims = checks.normalised_shape(shape, axes)
    count = int(np.prod(dims))
    checks.check_divisor(match, context, count)
    checks.check_square_exponent(match, context, shape)
    eps = checks.epsilon(match, context, checks.reduced_shape(shape, axes))
    if "epsilon_in_sum" in match:  # sqrt((s + e) / d) == sqrt(s / d + e / d)
        eps = eps / count  # in double, fused_site requires e / d to be exactly a float32
    scale = checks.affine(match, "scale", context, dims, rank)
    scale = np.ones(dims, io.dtype) if scale is None else scale
    return fused_sites.fused_site(KIND, match, context, io, axes[0], eps, (scale,))
