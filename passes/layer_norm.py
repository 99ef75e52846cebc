"""Layer normalisation: y = scale * (x - mean) / sqrt(variance + epsilon) + bias.

The subgraph PyTorch's TorchScript exporter writes for `nn.LayerNorm`, and the spellings it varies
by (any Add/Mul operand order; scale and bias optional)::

    x ──> ReduceMean ──> mean
    x, mean ──> Sub ──> centered ──┬──> Pow(., 2) | Mul(., .) ──> ReduceMean ──> variance
                                   │    variance ──> Add(epsilon) ──> Sqrt ──> std
                                   └──> Div(., std) | Mul(., Reciprocal(std)) ──> normed
    normed ──> Mul(scale) ──> Add(bias) ──> y

`centered` may be computed once or twice. Fused only when it is exactly layer normalisation: mean
and variance reduce the same trailing axes (never the first, batch axis) of the same tensor with
divisor d, epsilon is a positive scalar inside the square root, and scale and bias broadcast only
along the normalised axes. Spellings that are close but compute something else are matched too,
so that the report can say why they were left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.constants import reduce_axes
from normfuse.pattern import AnyOf, Const, Match, Op, Var
from normfuse.rewrite import Context, FusedNode, NearMiss, Site

KIND = "layer-norm"
SUPPORTED_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}

_x = Var("x")
_mean = Op("ReduceMean", _x, name="mean", extra_inputs=True)
_centered = Op("Sub", _x, _mean, name="centered")
_square = AnyOf(
    Op("Pow", _centered, Const("two", 2.0), name="square"),
    Op("Mul", _centered, _centered, name="square"),
)
_variance = AnyOf(
    Op("ReduceMean", _square, name="variance", extra_inputs=True),
    # Near-misses unless the divisor is d: sum / n, and mean * correction.
    Op(
        "Div",
        Op("ReduceSum", _square, name="sum_of_squares", extra_inputs=True),
        Const("divisor"),
        name="variance",
    ),
    Op(
        "Mul",
        Op("ReduceMean", _square, name="mean_of_squares", extra_inputs=True),
        Const("correction"),
        name="variance",
    ),
)
_shifted = Op("Add", _variance, Const("epsilon"), name="shifted")
_std = Op("Sqrt", _shifted, name="std")
_normed = AnyOf(
    Op("Div", _centered, _std, name="normed"),
    Op("Mul", _centered, Op("Reciprocal", _std, name="inv_std"), name="normed"),
    Op(
        "Mul",
        _centered,
        Op("Pow", _shifted, Const("minus_half", -0.5), name="inv_std"),
        name="normed",
    ),
    # Near-miss: epsilon added after the square root.
    Op(
        "Div",
        _centered,
        Op("Add", Op("Sqrt", _variance, name="std"), Const("epsilon"), name="std_plus_epsilon"),
        name="normed",
    ),
)
_scaled = Op("Mul", _normed, Const("scale"), name="scaled")

PATTERNS = (
    Op("Add", _scaled, Const("bias"), name="y"),
    Op("Add", _normed, Const("bias"), name="y"),
    _scaled,
    _normed,
)


class LayerNormPass:
    """Fuses decomposed layer normalisation into `LayerNormalization`."""

    name = "layer-norm"
    kind = KIND
    patterns = PATTERNS

    def site_key(self, match: Match) -> gs.Node:
        """The mean's ReduceMean identifies one layer norm."""
        return match.node("mean")

    def check(self, match: Match, context: Context) -> Site | NearMiss:
        """A `Site` if `match` is exactly layer normalisation, else a `NearMiss` with the reason."""
        anchor = match.node("mean").name

        def miss(reason: str, detail: str) -> NearMiss:
            return NearMiss(KIND, anchor, reason, detail)

        if "std_plus_epsilon" in match:
            return miss("epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it")
        x = match["x"]
        shape = context.shape(x)
        if shape is None:
            return miss("unknown-rank", f"the rank of {x.name!r} is not known")
        elem_type = context.elem_type(x)
        if elem_type not in SUPPORTED_TYPES:
            name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "unknown"
            return miss("unsupported-dtype", f"{x.name!r} is {name}; fused for float32/float16")
        axes_or_miss = _reduction_axes(match, context, len(shape), miss)
        if isinstance(axes_or_miss, NearMiss):
            return axes_or_miss
        axes = axes_or_miss
        normalised_shape = shape[len(shape) + axes[0] :]
        if not all(isinstance(dim, int) for dim in normalised_shape):
            return miss("unknown-shape", f"normalised dims {normalised_shape} are not all static")
        count = int(np.prod(normalised_shape))
        problem = _divisor_problem(match, context, count)
        if problem is not None:
            return miss(*problem)
        dtype = SUPPORTED_TYPES[elem_type]
        return _site_or_miss(match, context, axes[0], normalised_shape, len(shape), dtype, miss)


def _reduction_axes(match: Match, context: Context, rank: int, miss) -> tuple[int, ...] | NearMiss:
    """The shared trailing axes of the mean and the variance, or the reason they are not."""
    mean_node = match.node("mean")
    variance_node = next(
        match.node(name)
        for name in ("sum_of_squares", "mean_of_squares", "variance")
        if name in match and match.node(name).op in ("ReduceMean", "ReduceSum")
    )
    for node in (mean_node, variance_node):
        if not node.attrs.get("keepdims", 1):
            return miss("keepdims", f"{node.name!r} drops the reduced axes (keepdims=0)")
    mean_axes = reduce_axes(mean_node, rank, context.reader)
    variance_axes = reduce_axes(variance_node, rank, context.reader)
    if mean_axes is None or variance_axes is None:
        return miss("unknown-axes", "reduction axes are not constant")
    if mean_axes != variance_axes:
        return miss("mismatched-axes", f"mean over {mean_axes}, variance over {variance_axes}")
    if -rank in mean_axes:
        return miss(
            "batch-axis", f"axes {mean_axes} of a rank-{rank} tensor include the first axis"
        )
    if mean_axes != tuple(range(-len(mean_axes), 0)):
        return miss("non-trailing-axes", f"axes {mean_axes} are not the trailing axes")
    return mean_axes


def _divisor_problem(match: Match, context: Context, count: int) -> tuple[str, str] | None:
    """Why the variance's divisor is not the number of normalised elements `count`, if it is not."""
    if "divisor" in match:
        divisor = context.reader.scalar(match["divisor"])
        effective = divisor
    elif "correction" in match:
        correction = context.reader.scalar(match["correction"])
        effective = None if not correction else count / correction
    else:
        return None
    if effective is not None and np.isclose(effective, count, rtol=1e-6):
        return None
    if effective is not None and count > 1 and np.isclose(effective, count - 1, rtol=1e-6):
        return "unbiased-variance", f"variance divides by d-1 = {count - 1}, not d = {count}"
    return "variance-divisor", f"variance divides by {effective}, not d = {count}"


def _site_or_miss(
    match: Match, context: Context, axis: int, normalised_shape, rank: int, dtype, miss
) -> Site | NearMiss:
    """The fused site once epsilon, scale and bias are proven to be layer norm's."""
    epsilon = context.reader.scalar(match["epsilon"])
    if epsilon is None:
        return miss("epsilon-not-scalar", "epsilon is not a one-element constant")
    if not epsilon > 0:
        return miss("epsilon-not-positive", f"epsilon is {epsilon}")
    params = {}
    for name, default in (("scale", 1.0), ("bias", 0.0)):
        if name not in match:
            params[name] = None if name == "bias" else np.full(normalised_shape, default, dtype)
            continue
        value = context.reader.value(match[name])
        shaped = None if value is None else affine_parameter(value, normalised_shape, rank)
        if shaped is None:
            shape = None if value is None else value.shape
            return miss(
                f"{'gamma' if name == 'scale' else 'beta'}-shape",
                f"{name} of shape {shape} does not broadcast along the normalised axes only",
            )
        params[name] = shaped.astype(dtype)
    emission = context.layer_norm
    if emission is None:
        return miss("opset-too-low", "LayerNormalization needs opset 17 for --target onnx")
    fused = FusedNode(
        emission.op,
        emission.domain,
        {"axis": axis, "epsilon": epsilon, "stash_type": 1},
        (match["x"], params["scale"], params["bias"]),
    )
    return Site(
        KIND,
        emission.op,
        emission.domain,
        axis,
        epsilon,
        match["x"].name,
        match.root.name,
        tuple(node.name for node in match.nodes),
        fused,
    )


def affine_parameter(value: np.ndarray, normalised_shape, input_rank: int) -> np.ndarray | None:
    """`value` expanded to `normalised_shape` if it varies only along the normalised axes.

    Leading dims before the normalised axes must be 1, and `value` may not have more dims than the
    input (the product would then broadcast to a larger shape than the input's).
    """
    count = len(normalised_shape)
    if value.ndim > input_rank or any(
        dim != 1 for dim in value.shape[: max(value.ndim - count, 0)]
    ):
        return None
    trailing = (1,) * max(count - value.ndim, 0) + tuple(value.shape[-count:] if value.ndim else ())
    if any(dim not in (1, full) for dim, full in zip(trailing, normalised_shape, strict=True)):
        return None
    return np.broadcast_to(value.reshape(trailing), normalised_shape).copy()
