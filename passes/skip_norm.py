"""Residual fusion (ONNX Runtime only): `Add(input, skip)` feeding a fused norm becomes ONNX
Runtime's `SkipLayerNormalization` / `SkipSimplifiedLayerNormalization` (`com.microsoft`)::

    input[ + b], skip ──> Add ──> sum ──> LayerNormalization(scale[, bias]) ──> y
        =>  input, skip ──> SkipLayerNormalization(scale[, bias][, b]) ──> y  [, sum]

When `sum` is also used downstream (the pre-norm residual stream), it becomes the op's fourth
output. A constant bias added to `input` first (a projection's bias) goes into the op's bias
input. Runs after the layer-norm and RMS-norm passes, on their output and on norms exporters wrote
themselves. Only for `--target ort`, and not by default: ONNX Runtime's CPU `Skip*` kernels
were measured slower than `Add` + norm (see README), so the form is either asked for by name
(`--passes ...,skip-norm`) or chosen per site by timing (`optimize --tune-for`).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from normfuse import norm_checks as checks
from normfuse.pattern import Const, Match, Op, Var
from normfuse.rewrite import Context, FusedNode, Site, node_label
from normfuse.targets import Target

KIND = "skip-norm"
MS_DOMAIN = "com.microsoft"
SKIP_OPS = {
    "LayerNormalization": "SkipLayerNormalization",
    "SimplifiedLayerNormalization": "SkipSimplifiedLayerNormalization",
    # Standard RMS normalisation (opset 23): the same statistics over the axes from `axis`.
    "RMSNormalization": "SkipSimplifiedLayerNormalization",
}

_sum = Op("Add", Var("input"), Var("skip"), name="sum")
# A projection's bias added before the residual: folded into the op's bias input.
_biased_sum = Op(
    "Add", Op("Add", Var("input"), Const("skip_bias"), name="biased"), Var("skip"), name="sum"
)
# The same bias added after the residual sum: (input + skip) + b, the kernel's own order.
_sum_biased = Op(
    "Add", Op("Add", Var("input"), Var("skip"), name="residual"), Const("skip_bias"), name="sum"
)
PATTERNS = tuple(
    pattern
    for summed in (_biased_sum, _sum_biased, _sum)
    for pattern in (
        Op("LayerNormalization", summed, Var("scale"), Var("bias"), name="y"),
        Op("LayerNormalization", summed, Var("scale"), name="y"),
        Op("SimplifiedLayerNormalization", summed, Var("scale"), name="y"),
        Op("RMSNormalization", summed, Var("scale"), name="y"),
    )
)


class SkipNormPass:
    """Fuses a residual `Add` into the norm after it, where that form is wanted."""

    name = "skip-norm"
    kind = KIND
    patterns = PATTERNS
    shared_names = ("sum",)

    def site_key(self, match: Match) -> gs.Node:
        """The norm node identifies the site."""
        return match.node("y")

    def check(self, match: Match, context: Context) -> Site | None:
        """A `Site` when the residual form applies and is wanted; raises `Reject` otherwise."""
        return _check(match, context)


def _check(match: Match, context: Context) -> Site:
    if context.target is not Target.ORT:
        raise checks.Reject("ort-only-form", "Skip* ops exist only in ONNX Runtime (--target ort)")
    norm = match.node("y")
    first, second = match["input"], match["skip"]
    if context.reader.is_constant(first) or context.reader.is_constant(second):
        raise checks.Reject("not-residual", "one operand of the Add is a constant (a bias)")
    shapes = {context.shape(first), context.shape(second)}
    shape = shapes.pop() if len(shapes) == 1 else None
    if shape is None or len(shape) != 3 or not all(isinstance(d, int) for d in shape):
        raise checks.Reject("skip-shape", f"input and skip need one static 3-D shape, got {shapes}")
    if norm.attrs.get("axis", -1) not in (-1, 2) or norm.attrs.get("stash_type", 1) != 1:
        raise checks.Reject("skip-axis", "Skip* ops normalise the last axis in float32 only")
    elem_type = context.elem_type(first)
    if elem_type not in checks.FLOAT_TYPES:
        raise checks.Reject("unsupported-dtype", "Skip* fused for float32/float16 only")
    if "skip_bias" in match:
        _per_feature(match, "skip_bias", context, shape[-1])
    for name in ("scale", "bias"):
        if _given(match, name):
            _per_feature(match, name, context, shape[-1])
    family = "layer-norm" if norm.op == "LayerNormalization" else "rms-norm"
    chooser = context.form_chooser
    if chooser is not None:
        choice = chooser.choose(family, shape, elem_type, _given(match, "bias"))
        if not choice.use_skip:
            low, high = choice.interval
            raise checks.Reject(
                "measured-slower",
                f"{SKIP_OPS[norm.op]} at {list(shape)} on {chooser.provider}: {choice.ratio:.2f}x "
                f"Add + {norm.op} [{low:.2f}, {high:.2f}]; kept Add + {norm.op}",
            )
    return _site(match, norm, context)


def _given(match: Match, name: str) -> bool:
    """`name` is bound to a present input (an empty input name means the input is omitted)."""
    return name in match and bool(match[name].name)


def _per_feature(
    match: Match, name: str, context: Context, hidden: int, dtype=None
) -> np.ndarray | gs.Tensor:
    """The kernel's contract: gamma and beta are 1-D, one value per feature. A constant shaped
    [1, ..., 1, hidden] is that vector (as `dtype`); a tensor computed or fed at run time must be
    declared 1-D [hidden] of x's type (ONNX Runtime enforces static input dims), and is passed
    as it is; anything else stays."""
    tensor = match[name]
    reason = {"scale": "gamma-shape", "bias": "beta-shape"}.get(name, "bias-shape")
    if not context.reader.is_constant(tensor):
        shape, elem_type = context.shape(tensor), context.elem_type(tensor)
        if shape != (hidden,) or elem_type != context.elem_type(match["input"]):
            raise checks.Reject(
                reason, f"{name} of shape {shape}: Skip* ops need 1-D [{hidden}] of x's type"
            )
        return tensor
    value = context.reader.value(tensor)
    if value is None or value.size != hidden or any(dim != 1 for dim in value.shape[:-1]):
        shape = None if value is None else value.shape
        raise checks.Reject(reason, f"{name} of shape {shape}: Skip* ops need 1-D [{hidden}]")
    value = value.reshape(-1)
    return value if dtype is None else value.astype(dtype)


def _site(match: Match, norm: gs.Node, context: Context) -> Site:
    dtype = checks.FLOAT_TYPES[context.elem_type(match["input"])]
    hidden = context.shape(match["input"])[-1]
    gamma = _per_feature(match, "scale", context, hidden, dtype)
    beta = [_per_feature(match, "bias", context, hidden, dtype)] if _given(match, "bias") else []
    if "skip_bias" in match:
        folded = _per_feature(match, "skip_bias", context, hidden, dtype)
        beta = beta or ([None] if norm.op == "LayerNormalization" else [])
        params = [gamma, *beta, folded]
    else:
        params = [gamma, *beta]
    inputs = (match["input"], match["skip"], *params)
    extra = ((3, match["sum"]),)  # kept by the driver only where the sum is used downstream
    epsilon = float(norm.attrs.get("epsilon", 1e-5))
    op = SKIP_OPS[norm.op]
    fused = FusedNode(op, MS_DOMAIN, {"epsilon": epsilon}, inputs, extra_outputs=extra)
    removed = tuple(node_label(node) for node in match.nodes)
    return Site(
        KIND,
        op,
        MS_DOMAIN,
        -1,
        epsilon,
        match["input"].name,
        match.root.name,
        removed,
        fused,
        0,
        ort_only=True,
        node_ids=frozenset(id(node) for node in match.nodes),
    )
