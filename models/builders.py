"""Builders (onnx.helper) for decomposed layer-norm and RMS-norm graphs: the positives normfuse must
fuse and the negatives it must leave alone. Each option changes one thing about the canonical
export: ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add for layer norm,
Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul for RMS norm.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

FLOAT_TYPES = {
    np.float32: onnx.TensorProto.FLOAT,
    np.float16: onnx.TensorProto.FLOAT16,
    np.float64: onnx.TensorProto.DOUBLE,
}
FLOAT = onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class LayerNormSpec:
    """One way of writing layer normalisation (or something close to it) in ONNX."""

    axes: tuple[int, ...] = (-1,)
    variance_axes: tuple[int, ...] | None = None  # None: same as axes
    square: str = "pow"  # pow | mul
    # div | reciprocal | one_over | pow_half | pow_minus_one (Pow(std, -1))
    divide: str = "div"
    # mean | sum_over_d | sum_over_d_minus_1 | one_pass | sum_times_reciprocal (sum * (1/d)) |
    # sum_times_reciprocal_d_minus_1 | sum_over_shape_d (sum / Cast(Gather(Shape(x), -1))) |
    # sum_over_shape_dim_1 | sum_over_shape_batch (the wrong dim from Shape(x))
    variance: str = "mean"
    root: str = "sqrt"  # sqrt | pow (Pow(., root_exponent))
    root_exponent: float = 0.5
    reciprocal_exponent: float = -1.0  # the exponent of divide="pow_minus_one"
    # x_minus_mean | mean_minus_x (everywhere) | numerator_negated (only the numerator)
    centered: str = "x_minus_mean"
    unsqueeze_axes: tuple[int, ...] | None = None  # keepdims=0, then Unsqueeze(these axes)
    # A tensor exponent / epsilon of this shape, every value equal (with `*_uneven`, one value
    # one float32 step off).
    exponent_shape: tuple[int, ...] | None = None
    exponent_uneven: bool = False
    epsilon_shape: tuple[int, ...] | None = None
    epsilon_uneven: bool = False
    epsilon: float = 1e-5
    epsilon_form: str = "initializer"  # initializer | value_float | value | one_element
    epsilon_outside_sqrt: bool = False
    scale: bool = True
    bias: bool = True
    scale_first: bool = False  # Mul(scale, normed) instead of Mul(normed, scale)
    bias_first: bool = False  # Add(bias, scaled)
    scale_shape: tuple[int, ...] | None = None  # None: the normalised shape
    shared_centered: bool = True  # False: x - mean computed twice
    keepdims: int = 1
    casts: str = "none"  # none | around (Cast to float32 ... Cast back, then scale and bias)
    form: str = "torch"  # torch | keras (tf2onnx: x * g + (bias - mean * g), g = scale * rsqrt)
    affine_as_constant_nodes: bool = False  # scale and bias from Constant nodes


@dataclass(frozen=True)
class RmsNormSpec:
    """One way of writing RMS normalisation (or something close to it) in ONNX."""

    axes: tuple[int, ...] = (-1,)
    square: str = "pow"  # pow | mul | abs
    divide: str = "div"  # div | reciprocal | one_over | pow_half | pow_minus_one
    # mean | sum_over_d | sum | sum_square | sum_times_reciprocal |
    # sum_square_over_d (ReduceSumSquare / d) |
    # l2_squared_over_d (ReduceL2^2 / d) | epsilon_in_sum ((ReduceSumSquare + eps) / d)
    mean: str = "mean"
    root: str = "sqrt"  # sqrt | pow
    root_exponent: float = 0.5
    reciprocal_exponent: float = -1.0
    count_offset: int = 0  # the divisor of the sum forms is d + count_offset
    unsqueeze_axes: tuple[int, ...] | None = None  # keepdims=0, then Unsqueeze(these axes)
    # A tensor exponent / epsilon of this shape, every value equal (with `*_uneven`, one value
    # one float32 step off).
    exponent_shape: tuple[int, ...] | None = None
    exponent_uneven: bool = False
    epsilon_shape: tuple[int, ...] | None = None
    epsilon_uneven: bool = False
    keepdims: int = 1
    epsilon: float = 1e-6
    epsilon_form: str = "initializer"
    epsilon_outside_sqrt: bool = False
    scale: str = "plain"  # plain | none | gemma (1 + w)
    scale_first: bool = False
    scale_shape: tuple[int, ...] | None = None
    # none | llama: Cast(f32) -> norm -> Cast(back) -> Mul(scale) | scale_before_cast: the Mul
    # in float32, then Cast(back) | t5: like llama with x cast to float32 twice
    casts: str = "none"
    bias: bool = False  # a bias Add after the scale (fused: the RMS norm, the Add stays)


@dataclass
class GraphBuilder:
    """Collects nodes and initializers with short deterministic names."""

    opset: int
    dtype: type = np.float32
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    count: int = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        output = self.fresh(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, inputs, [output], name=f"{op_type}_{self.count}", **attrs)
        )
        return output

    def const(self, value, stem: str = "const", dtype=None) -> str:
        name = self.fresh(stem)
        array = np.asarray(value, dtype=dtype or self.dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def reduce(self, op_type: str, x: str, axes: tuple[int, ...], keepdims: int = 1) -> str:
        """ReduceMean/ReduceSum with axes as attribute or input, as the opset requires."""
        axes_in_input = (op_type == "ReduceSum" and self.opset >= 13) or self.opset >= 18
        if axes_in_input:
            axes_name = self.const(np.array(axes, dtype=np.int64), "axes", dtype=np.int64)
            return self.op(op_type, [x, axes_name], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def mean(self, x: str, axes: tuple[int, ...], spec) -> str:
        """ReduceMean over `axes`, or (with `spec.unsqueeze_axes`) keepdims=0 and an Unsqueeze."""
        if spec.unsqueeze_axes is None:
            return self.reduce("ReduceMean", x, axes, spec.keepdims)
        dropped = self.reduce("ReduceMean", x, axes, keepdims=0)
        if self.opset >= 13:
            axes_name = self.const(np.array(spec.unsqueeze_axes, np.int64), "axes", np.int64)
            return self.op("Unsqueeze", [dropped, axes_name])
        return self.op("Unsqueeze", [dropped], axes=list(spec.unsqueeze_axes))

    def constant_node(self, value, stem: str) -> str:
        """A `Constant` node holding `value` (in the builder's dtype); returns its output."""
        output = self.fresh(stem)
        tensor = numpy_helper.from_array(np.asarray(value, dtype=self.dtype), output + "_value")
        self.nodes.append(helper.make_node("Constant", [], [output], value=tensor))
        return output

    def epsilon(self, value: float, form: str) -> str:
        if form == "initializer":
            return self.const(value, "epsilon")
        if form == "one_element":
            return self.const([value], "epsilon")
        output = self.fresh("epsilon")
        if form == "value_float":
            node = helper.make_node("Constant", [], [output], value_float=value)
            if self.dtype != np.float32:
                self.nodes.append(node)
                return self.op("Cast", [output], to=FLOAT_TYPES[self.dtype])
        else:
            tensor = numpy_helper.from_array(np.array(value, dtype=self.dtype), output + "_value")
            node = helper.make_node("Constant", [], [output], value=tensor)
        self.nodes.append(node)
        return output


def add_layer_norm(b: GraphBuilder, x: str, shape: tuple, spec: LayerNormSpec, rng) -> str:
    """Append one decomposed layer norm of `x` (of `shape`) to `b`; returns the output name."""
    if spec.form == "keras":
        return _add_keras_layer_norm(b, x, shape, spec, rng)
    low = b.dtype != np.float32 and spec.casts == "around"
    wide_dtype = np.float32 if low else None
    x_in = b.op("Cast", [x], to=FLOAT) if low else x
    mean = b.mean(x_in, spec.axes, spec)
    deviation = [mean, x_in] if spec.centered == "mean_minus_x" else [x_in, mean]
    centered = b.op("Sub", deviation)
    variance_axes = spec.variance_axes or spec.axes
    if spec.variance == "one_pass":
        two = b.const(2.0, "two", wide_dtype)
        mean_of_squares = b.reduce("ReduceMean", b.op("Pow", [x_in, two]), variance_axes)
        variance = b.op("Sub", [mean_of_squares, b.op("Mul", [mean, mean])])
    else:
        if spec.square == "pow":
            square = b.op("Pow", [centered, _filled(b, 2.0, "two", spec, "exponent", wide_dtype)])
        else:
            square = b.op("Mul", [centered, centered])
        variance = _variance(b, square, shape, variance_axes, spec, wide_dtype, x_in)
    if spec.centered == "numerator_negated":
        normed_input = b.op("Sub", [mean, x_in])
    else:
        normed_input = centered if spec.shared_centered else b.op("Sub", deviation)
    epsilon = (
        b.const(spec.epsilon, "epsilon", wide_dtype)
        if low
        else _filled(b, spec.epsilon, "epsilon", spec, "epsilon")
        if spec.epsilon_shape
        else b.epsilon(spec.epsilon, spec.epsilon_form)
    )
    if spec.epsilon_outside_sqrt:  # the root (Sqrt or Pow) of the variance, then + epsilon
        std = b.op("Add", [_root(b, variance, spec, wide_dtype), epsilon])
        normed = _divide(b, normed_input, std, spec, wide_dtype)
    else:
        shifted = b.op("Add", [variance, epsilon])
        normed = _normalise(b, normed_input, shifted, spec, wide_dtype)
    if low:
        normed = b.op("Cast", [normed], to=FLOAT_TYPES[b.dtype])
    first_axis = spec.axes[0] if spec.axes[0] < 0 else spec.axes[0] - len(shape)
    normalised_shape = tuple(shape[first_axis:])
    out = normed
    constant = b.constant_node if spec.affine_as_constant_nodes else b.const
    if spec.scale:
        scale = constant(rng.uniform(0.5, 1.5, spec.scale_shape or normalised_shape), "scale")
        out = b.op("Mul", [scale, out] if spec.scale_first else [out, scale])
    if spec.bias:
        bias = constant(rng.normal(0, 0.5, normalised_shape), "bias")
        out = b.op("Add", [bias, out] if spec.bias_first else [out, bias])
    return out


def _add_keras_layer_norm(b: GraphBuilder, x: str, shape: tuple, spec: LayerNormSpec, rng) -> str:
    """tf2onnx's spelling of Keras' LayerNormalization (via tf.nn.batch_normalization)."""
    mean = b.mean(x, spec.axes, spec)
    centered = b.op("Sub", [mean, x] if spec.centered == "mean_minus_x" else [x, mean])
    variance = b.reduce("ReduceMean", b.op("Mul", [centered, centered]), spec.axes)
    shifted = b.op("Add", [variance, b.const(spec.epsilon, "epsilon")])
    if spec.divide == "pow_half":
        inv = b.op("Pow", [shifted, b.const(-0.5, "minus_half")])
    elif spec.divide == "pow_minus_one":
        minus_one = b.const(spec.reciprocal_exponent, "minus_one")
        inv = b.op("Pow", [_root(b, shifted, spec), minus_one])
    else:
        inv = b.op("Reciprocal", [_root(b, shifted, spec)])
    dims = tuple(shape[len(shape) + spec.axes[0] :])
    gain = b.op("Mul", [inv, b.const(rng.uniform(0.5, 1.5, dims), "scale")]) if spec.scale else inv
    x_gained = b.op("Mul", [x, gain])
    mean_gained = b.op("Mul", [mean, gain])
    if not spec.bias:
        return b.op("Add", [x_gained, b.op("Neg", [mean_gained])])
    bias = b.const(rng.normal(0, 0.5, dims), "bias")
    return b.op("Add", [x_gained, b.op("Sub", [bias, mean_gained])])


def _variance(
    b: GraphBuilder, square: str, shape: tuple, axes, spec: LayerNormSpec, dtype, x: str
) -> str:
    if spec.variance == "mean":
        return b.mean(square, axes, spec)
    count = int(np.prod([shape[a] for a in axes]))
    total = b.reduce("ReduceSum", square, axes, spec.keepdims)
    return _divide_by_count(b, total, count, spec.variance, dtype, x, tuple(axes))


def _divide_by_count(
    b: GraphBuilder, total: str, count: int, how: str, dtype, x: str, axes=(-1,)
) -> str:
    """`total / count` as `how` spells it (the count possibly taken from Shape(x) at `axes`)."""
    if how.startswith("sum_times_reciprocal"):
        count = count - 1 if how.endswith("d_minus_1") else count
        return b.op("Mul", [total, b.const(1.0 / count, "reciprocal", dtype)])
    if how.startswith("sum_over_shape"):
        index = {"sum_over_shape_dim_1": 1, "sum_over_shape_batch": 0}.get(how, axes)
        dim = b.op("Gather", [b.op("Shape", [x]), b.const(index, "dim", np.int64)], axis=0)
        if how == "sum_over_shape_d":
            dim = b.op("ReduceProd", [dim], keepdims=1)
        return b.op("Div", [total, b.op("Cast", [dim], to=FLOAT_TYPES[dtype or b.dtype])])
    divisor = count - 1 if how == "sum_over_d_minus_1" else count
    return b.op("Div", [total, b.const(float(divisor), "divisor", dtype)])


def _filled(b: GraphBuilder, value: float, stem: str, spec, which: str, dtype=None) -> str:
    """A constant `value`: a scalar, or a tensor of `spec.<which>_shape` (optionally uneven)."""
    shape = getattr(spec, f"{which}_shape")
    if shape is None:
        return b.const(value, stem, dtype)
    array = np.full(shape, value, dtype or b.dtype)
    if getattr(spec, f"{which}_uneven"):
        array.flat[-1] = np.nextafter(array.flat[-1], np.inf)
    return b.const(array, stem, dtype)


def _root(b: GraphBuilder, shifted: str, spec, dtype=None) -> str:
    """sqrt(shifted): `Sqrt`, or `Pow(., spec.root_exponent)`."""
    if spec.root == "pow":
        return b.op("Pow", [shifted, b.const(spec.root_exponent, "half", dtype)])
    return b.op("Sqrt", [shifted])


def _normalise(b: GraphBuilder, centered: str, shifted: str, spec, dtype=None) -> str:
    divide = spec.divide
    if divide == "pow_half":
        return b.op("Mul", [centered, b.op("Pow", [shifted, b.const(-0.5, "minus_half", dtype)])])
    return _divide(b, centered, _root(b, shifted, spec, dtype), spec, dtype)


def _divide(b: GraphBuilder, centered: str, std: str, spec, dtype=None) -> str:
    """`centered / std` as `spec.divide` spells it (`pow_half` has no std: a plain Div)."""
    divide = spec.divide
    if divide in ("div", "pow_half"):
        return b.op("Div", [centered, std])
    if divide == "reciprocal":
        return b.op("Mul", [centered, b.op("Reciprocal", [std])])
    if divide == "pow_minus_one":
        minus_one = b.const(spec.reciprocal_exponent, "minus_one", dtype)
        return b.op("Mul", [centered, b.op("Pow", [std, minus_one])])
    one = b.const(1.0, "one", dtype)
    return b.op("Mul", [centered, b.op("Div", [one, std])])


def add_rms_norm(b: GraphBuilder, x: str, shape: tuple, spec: RmsNormSpec, rng) -> str:
    """Append one decomposed RMS norm of `x` (of `shape`) to `b`; returns the output name."""
    low = b.dtype != np.float32 and spec.casts != "none"
    wide = b.op("Cast", [x], to=FLOAT) if low else x
    if spec.square == "pow":
        two = _filled(b, 2.0, "two", spec, "exponent", np.float32 if low else None)
        square = b.op("Pow", [wide, two])
    elif spec.square == "mul":
        square = b.op("Mul", [wide, wide])
    else:
        square = b.op("Abs", [wide])
    wide_dtype = np.float32 if low else b.dtype
    count = int(np.prod(shape[len(shape) + spec.axes[0] :]))
    epsilon = _filled(b, spec.epsilon, "epsilon", spec, "epsilon", wide_dtype)
    if spec.mean == "epsilon_in_sum":  # (sum(x^2) + eps) / d
        total = b.reduce("ReduceSumSquare", wide, spec.axes)
        divisor = b.const(count + spec.count_offset, "count", wide_dtype)
        shifted = b.op("Div", [b.op("Add", [total, epsilon]), divisor])
        return _rms_scale(b, _normalise(b, wide, shifted, spec, wide_dtype), shape, spec, rng, low)
    mean_square = _mean_square(b, wide, square, count, spec, wide_dtype)
    if spec.epsilon_outside_sqrt:
        rms = b.op("Add", [b.op("Sqrt", [mean_square]), epsilon])
        normed = b.op("Div", [wide, rms])
    else:
        shifted = b.op("Add", [mean_square, epsilon])
        wide_again = b.op("Cast", [x], to=FLOAT) if spec.casts == "t5" and low else wide
        normed = _normalise(b, wide_again, shifted, spec, wide_dtype)
    return _rms_scale(b, normed, shape, spec, rng, low)


def _mean_square(b: GraphBuilder, x: str, square: str, count: int, spec, dtype) -> str:
    """mean(x^2) over `spec.axes` as `spec.mean` spells it."""
    if spec.mean == "mean":
        return b.mean(square, spec.axes, spec)
    if spec.mean in ("sum_square_over_d", "sum_square"):
        total = b.reduce("ReduceSumSquare", x, spec.axes)
    elif spec.mean == "l2_squared_over_d":
        l2 = b.reduce("ReduceL2", x, spec.axes)
        total = b.op("Pow", [l2, b.const(2.0, "two", dtype)])
    else:
        total = b.reduce("ReduceSum", square, spec.axes)
    if spec.mean in ("sum", "sum_square"):
        return total
    how = "sum_times_reciprocal" if spec.mean == "sum_times_reciprocal" else "sum_over_d"
    return _divide_by_count(b, total, count + spec.count_offset, how, dtype, x, spec.axes)


def _rms_scale(
    b: GraphBuilder, normed: str, shape: tuple, spec: RmsNormSpec, rng, low: bool
) -> str:
    first_axis = spec.axes[0] if spec.axes[0] < 0 else spec.axes[0] - len(shape)
    dims = spec.scale_shape or tuple(shape[first_axis:])
    before = spec.casts == "scale_before_cast"
    dtype = np.float32 if before else None
    if low and not before:
        normed = b.op("Cast", [normed], to=FLOAT_TYPES[b.dtype])
    if spec.scale == "none":
        out = normed
    else:
        if spec.scale == "gemma":
            w = b.const(rng.normal(0, 0.3, dims), "w", dtype)
            scale = b.op("Add", [w, b.const(1.0, "one", dtype)])
        else:
            scale = b.const(rng.uniform(0.5, 1.5, dims), "scale", dtype)
        out = b.op("Mul", [scale, normed] if spec.scale_first else [normed, scale])
    if low and before:
        out = b.op("Cast", [out], to=FLOAT_TYPES[b.dtype])
    if spec.bias:
        out = b.op("Add", [out, b.const(rng.normal(0, 0.5, dims), "bias")])
    return out


def norm_model(
    spec: LayerNormSpec | RmsNormSpec = LayerNormSpec(),
    shape: tuple = ("batch", 7, 32),
    opset: int = 17,
    dtype: type = np.float32,
    layers: int = 1,
    expose: str | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """A model of `layers` residual blocks `h = h + norm(h) @ W`, so the norms sit in a real graph.

    `expose` names a node type in the first norm (e.g. "Sqrt") whose output also becomes a graph
    output, making that intermediate used elsewhere.
    """
    rng = np.random.default_rng(seed)
    b = GraphBuilder(opset, dtype)
    add_norm = add_layer_norm if isinstance(spec, LayerNormSpec) else add_rms_norm
    hidden = shape[-1]
    h = "x"
    exposed = None
    for _ in range(layers):
        start = len(b.nodes)
        normed = add_norm(b, h, shape, spec, rng)
        if expose and exposed is None:
            exposed = next(n.output[0] for n in b.nodes[start:] if n.op_type == expose)
        weight = b.const(rng.normal(0, 0.2, (hidden, hidden)), "weight")
        h = b.op("Add", [h, b.op("MatMul", [normed, weight])])
    elem = FLOAT_TYPES[dtype]
    outputs = [helper.make_tensor_value_info(h, elem, list(shape))]
    if exposed:
        outputs.append(helper.make_tensor_value_info(exposed, elem, [None] * len(shape)))
    graph = helper.make_graph(
        b.nodes,
        "norm_test",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        outputs,
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 18 else 10
    model.doc_string = "normfuse test model"
    helper.set_model_props(model, {"source": "models/builders.py"})
    return model


LAYER_NORM_POSITIVES = {
    "torchscript": LayerNormSpec(),
    "mul_square": LayerNormSpec(square="mul"),
    "reciprocal": LayerNormSpec(divide="reciprocal"),
    "one_over_std": LayerNormSpec(divide="one_over"),
    "pow_minus_half": LayerNormSpec(divide="pow_half"),
    "commuted_operands": LayerNormSpec(scale_first=True, bias_first=True),
    "no_affine": LayerNormSpec(scale=False, bias=False),
    "scale_only": LayerNormSpec(bias=False),
    "bias_only": LayerNormSpec(scale=False),
    "centered_twice": LayerNormSpec(shared_centered=False),
    "epsilon_value_float": LayerNormSpec(epsilon_form="value_float"),
    "epsilon_constant_node": LayerNormSpec(epsilon_form="value"),
    "epsilon_one_element": LayerNormSpec(epsilon_form="one_element"),
    "last_two_axes": LayerNormSpec(axes=(-2, -1)),
    "positive_axes": LayerNormSpec(axes=(2,)),
    "population_sum_over_d": LayerNormSpec(variance="sum_over_d"),
    "scalar_scale": LayerNormSpec(scale_shape=(1,)),
    "large_epsilon": LayerNormSpec(epsilon=1e-2),
    "one_pass_variance": LayerNormSpec(variance="one_pass"),
    "affine_constant_nodes": LayerNormSpec(affine_as_constant_nodes=True),
    "keras_tf2onnx": LayerNormSpec(form="keras"),
    "keras_pow_minus_half": LayerNormSpec(form="keras", divide="pow_half"),
    "keras_no_scale": LayerNormSpec(form="keras", scale=False),
    "keras_no_center": LayerNormSpec(form="keras", bias=False),
    "sqrt_as_pow": LayerNormSpec(root="pow"),
    "reciprocal_as_pow": LayerNormSpec(divide="pow_minus_one"),
    "sqrt_and_reciprocal_as_pow": LayerNormSpec(root="pow", divide="pow_minus_one"),
    "keras_sqrt_as_pow": LayerNormSpec(form="keras", root="pow"),
    "keras_reciprocal_as_pow": LayerNormSpec(form="keras", root="pow", divide="pow_minus_one"),
    "mean_minus_x": LayerNormSpec(centered="mean_minus_x"),
    "mean_minus_x_no_scale": LayerNormSpec(centered="mean_minus_x", scale=False),
    "mean_minus_x_no_affine": LayerNormSpec(centered="mean_minus_x", scale=False, bias=False),
    "mean_minus_x_numerator_only": LayerNormSpec(centered="numerator_negated"),
    "keras_mean_minus_x": LayerNormSpec(form="keras", centered="mean_minus_x"),
    "keepdims_0_unsqueeze": LayerNormSpec(unsqueeze_axes=(-1,)),
    "keepdims_0_unsqueeze_positive_axes": LayerNormSpec(axes=(1, 2), unsqueeze_axes=(1, 2)),
    "variance_sum_times_reciprocal": LayerNormSpec(variance="sum_times_reciprocal"),
    "variance_sum_over_shape_d": LayerNormSpec(variance="sum_over_shape_d"),
    "exponent_tensor_of_twos": LayerNormSpec(exponent_shape=(32,)),
    "epsilon_tensor_all_equal": LayerNormSpec(epsilon_shape=(7, 1)),
}

LAYER_NORM_NEGATIVES = {
    # Statistics over the batch and sequence axes but not the hidden one: batch-norm-like.
    "batch_axis": (LayerNormSpec(axes=(0, 1), scale=False, bias=False), "batch-axis"),
    "unbiased_variance": (LayerNormSpec(variance="sum_over_d_minus_1"), "unbiased-variance"),
    "epsilon_outside_sqrt": (LayerNormSpec(epsilon_outside_sqrt=True), "epsilon-outside-sqrt"),
    # OpenVINO's MVN tests: epsilon after a Pow(., 0.5) root, then a reciprocal.
    "epsilon_outside_pow_root_reciprocal": (
        LayerNormSpec(epsilon_outside_sqrt=True, root="pow", divide="reciprocal"),
        "epsilon-outside-sqrt",
    ),
    "epsilon_outside_sqrt_pow_minus_one": (
        LayerNormSpec(epsilon_outside_sqrt=True, divide="pow_minus_one"),
        "epsilon-outside-sqrt",
    ),
    "per_token_gamma": (LayerNormSpec(scale_shape=(7, 32)), "gamma-shape"),
    "non_trailing_axis": (LayerNormSpec(axes=(1,)), "non-trailing-axes"),
    "mismatched_axes": (LayerNormSpec(axes=(-1,), variance_axes=(-2, -1)), "mismatched-axes"),
    "zero_epsilon": (LayerNormSpec(epsilon=0.0), "epsilon-not-positive"),
    "root_exponent_not_half": (LayerNormSpec(root="pow", root_exponent=0.25), "root-exponent"),
    "reciprocal_exponent_not_minus_one": (
        LayerNormSpec(divide="pow_minus_one", reciprocal_exponent=-2.0),
        "reciprocal-exponent",
    ),
    "keras_root_exponent_not_half": (
        LayerNormSpec(form="keras", root="pow", root_exponent=0.4),
        "root-exponent",
    ),
    "variance_times_reciprocal_of_d_minus_1": (
        LayerNormSpec(variance="sum_times_reciprocal_d_minus_1"),
        "unbiased-variance",
    ),
    "variance_over_another_dim_from_shape": (
        LayerNormSpec(variance="sum_over_shape_dim_1"),
        "variance-divisor",
    ),
    "exponent_tensor_one_value_off": (
        LayerNormSpec(exponent_shape=(32,), exponent_uneven=True),
        "square-exponent",
    ),
    "epsilon_tensor_uneven": (
        LayerNormSpec(epsilon_shape=(7, 1), epsilon_uneven=True),
        "epsilon-not-scalar",
    ),
    # All equal, but shaped [32]: it broadcasts the statistics to [batch, 7, 32].
    "epsilon_tensor_widening_the_statistics": (
        LayerNormSpec(epsilon_shape=(32,)),
        "epsilon-not-scalar",
    ),
    "variance_over_dynamic_dim_from_shape": (
        LayerNormSpec(variance="sum_over_shape_batch"),
        "variance-divisor",
    ),
}


RMS_NORM_POSITIVES = {
    "llama_float32": RmsNormSpec(),
    "mul_square": RmsNormSpec(square="mul"),
    "reciprocal": RmsNormSpec(divide="reciprocal"),
    "torchscript_one_over_rms": RmsNormSpec(divide="one_over"),
    "pow_minus_half": RmsNormSpec(divide="pow_half"),
    "scale_first": RmsNormSpec(scale_first=True),
    "no_scale": RmsNormSpec(scale="none"),
    "gemma_one_plus_w": RmsNormSpec(scale="gemma"),
    "sum_over_d": RmsNormSpec(mean="sum_over_d"),
    "last_two_axes": RmsNormSpec(axes=(-2, -1)),
    "epsilon_one_element": RmsNormSpec(epsilon_form="one_element"),
    "sqrt_as_pow": RmsNormSpec(root="pow"),
    "reciprocal_as_pow": RmsNormSpec(root="pow", divide="pow_minus_one"),
    "sum_times_reciprocal": RmsNormSpec(mean="sum_times_reciprocal"),
    "sum_square_over_d": RmsNormSpec(mean="sum_square_over_d"),
    "l2_squared_over_d": RmsNormSpec(mean="l2_squared_over_d"),
    "epsilon_in_sum": RmsNormSpec(mean="epsilon_in_sum"),
    "keepdims_0_unsqueeze": RmsNormSpec(unsqueeze_axes=(-1,)),
    "exponent_tensor_of_twos": RmsNormSpec(exponent_shape=(7, 32)),
    "epsilon_tensor_all_equal": RmsNormSpec(epsilon_shape=(1, 7, 1)),
}

# Mixed-precision spellings, built in float16.
RMS_NORM_FLOAT16_POSITIVES = {
    "llama_float16": RmsNormSpec(casts="llama", divide="reciprocal"),
    "scale_before_cast": RmsNormSpec(casts="scale_before_cast"),
    "t5_float16": RmsNormSpec(casts="t5", divide="reciprocal"),
    "gemma_float16": RmsNormSpec(casts="scale_before_cast", scale="gemma"),
    "plain_float16": RmsNormSpec(),
}

RMS_NORM_NEGATIVES = {
    "mean_of_abs": (RmsNormSpec(square="abs"), "mean-abs-not-square"),
    "epsilon_outside_sqrt": (RmsNormSpec(epsilon_outside_sqrt=True), "epsilon-outside-sqrt"),
    "non_trailing_axis": (RmsNormSpec(axes=(1,)), "non-trailing-axes"),
    "sum_not_mean": (RmsNormSpec(mean="sum"), "sum-not-mean"),
    "per_token_gamma": (RmsNormSpec(scale_shape=(7, 32)), "gamma-shape"),
    "batch_axis": (RmsNormSpec(axes=(0, 1), scale="none"), "batch-axis"),
    "root_exponent_not_half": (RmsNormSpec(root="pow", root_exponent=0.25), "root-exponent"),
    "reciprocal_exponent_not_minus_one": (
        RmsNormSpec(divide="pow_minus_one", reciprocal_exponent=-2.0),
        "reciprocal-exponent",
    ),
    "sum_square_not_mean": (RmsNormSpec(mean="sum_square"), "sum-not-mean"),
    "sum_square_over_d_minus_1": (
        RmsNormSpec(mean="sum_square_over_d", count_offset=-1),
        "unbiased-variance",
    ),
    "l2_squared_over_d_plus_1": (
        RmsNormSpec(mean="l2_squared_over_d", count_offset=1),
        "variance-divisor",
    ),
    "exponent_tensor_one_value_off": (
        RmsNormSpec(exponent_shape=(7, 32), exponent_uneven=True),
        "square-exponent",
    ),
    "epsilon_tensor_uneven": (
        RmsNormSpec(epsilon_shape=(1, 7, 1), epsilon_uneven=True),
        "epsilon-not-scalar",
    ),
    "epsilon_in_sum_over_d_plus_1": (
        RmsNormSpec(mean="epsilon_in_sum", count_offset=1),
        "variance-divisor",
    ),
}


def _single_op_model(b: GraphBuilder, output: str, shape: tuple, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        b.nodes,
        name,
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info(output, FLOAT, list(shape))],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    return model


def group_norm_model(groups: int = 4, shape: tuple = ("batch", 8, 5, 5)) -> onnx.ModelProto:
    """GroupNorm as exporters write it: Reshape [N, G, -1], layer-norm-like statistics over the
    last axis, Reshape back, per-channel scale and bias."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(0)
    grouped = b.op("Reshape", ["x", b.const([0, groups, -1], "groups", np.int64)])
    normed = add_layer_norm(
        b, grouped, (None, groups, None), LayerNormSpec(scale=False, bias=False), rng
    )
    back = b.op("Reshape", [normed, b.op("Shape", ["x"])])
    channels = shape[1]
    scaled = b.op("Mul", [back, b.const(rng.uniform(0.5, 1.5, (channels, 1, 1)), "scale")])
    out = b.op("Add", [scaled, b.const(rng.normal(0, 0.5, (channels, 1, 1)), "bias")])
    return _single_op_model(b, out, shape, "group_norm")


def instance_norm_model(shape: tuple = ("batch", 4, 6, 6)) -> onnx.ModelProto:
    """InstanceNorm2d(affine=True): statistics over the spatial axes of NCHW, per-channel affine."""
    b = GraphBuilder(17)
    spec = LayerNormSpec(axes=(-2, -1), scale_shape=(shape[1], 1, 1), bias=False)
    out = add_layer_norm(b, "x", shape, spec, np.random.default_rng(0))
    return _single_op_model(b, out, shape, "instance_norm")


def l2_norm_model(shape: tuple = ("batch", 7, 32)) -> onnx.ModelProto:
    """F.normalize: x / max(||x||_2, eps) over the last axis."""
    b = GraphBuilder(17)
    norm = b.reduce("ReduceL2", "x", (-1,))
    out = b.op("Div", ["x", b.op("Max", [norm, b.const(1e-12, "epsilon")])])
    return _single_op_model(b, out, shape, "l2_norm")


# Group norm and instance norm with a per-channel affine, as the layer-norm pass reports them
# (the group-norm pass, on by default, fuses both).
LAYER_NORM_PASS_FAMILIES = {
    "group_norm": (group_norm_model, "group-norm"),
    "instance_norm_affine": (instance_norm_model, "gamma-shape"),
}

# Models of other normalisation families (issue: negative corpus), with the reason expected.
OTHER_FAMILIES = {
    "l2_normalize": (l2_norm_model, "l2-norm"),
}


# Where each tested spelling comes from, for docs/spellings-and-reasons.md (tests keep it in sync).
SPELLING_SOURCES = {
    ("layer-norm", "torchscript"): "PyTorch TorchScript (`nn.LayerNorm`)",
    ("layer-norm", "one_over_std"): "PyTorch TorchScript (`rsqrt` as `Div(1, .)`)",
    ("layer-norm", "centered_twice"): "older PyTorch exports",
    ("layer-norm", "epsilon_value_float"): "PyTorch TorchScript (`Constant` nodes)",
    ("layer-norm", "affine_constant_nodes"): "hand-written / onnx.helper",
    ("layer-norm", "keras_tf2onnx"): "tf2onnx / Keras",
    ("layer-norm", "keras_pow_minus_half"): "tf2onnx / Keras",
    ("layer-norm", "keras_no_scale"): "tf2onnx / Keras (`scale=False`)",
    ("layer-norm", "keras_no_center"): "tf2onnx / Keras (`center=False`)",
    ("layer-norm", "one_pass_variance"): "hand-written (E[x^2] - E[x]^2)",
    ("layer-norm", "pow_minus_half"): "hand-written / JAX-style `rsqrt`",
    ("layer-norm", "population_sum_over_d"): "hand-written (`sum / d`)",
    ("layer-norm", "sqrt_as_pow"): "OpenVINO MVN tests (`Pow(., 0.5)` for `Sqrt`)",
    ("layer-norm", "reciprocal_as_pow"): "OpenVINO MVN tests (`Pow(., -1)` for `Reciprocal`)",
    ("layer-norm", "keras_reciprocal_as_pow"): "tf2onnx / Keras with `Pow` roots",
    ("layer-norm", "mean_minus_x"): "hand-written (`mean - x`, scale negated: scale' = -scale)",
    ("layer-norm", "mean_minus_x_no_scale"): "hand-written (`mean - x`, no scale: scale' = -1)",
    ("layer-norm", "mean_minus_x_numerator_only"): "hand-written (`mean - x` in the numerator)",
    ("layer-norm", "keepdims_0_unsqueeze"): "older exporters (`keepdims=0` + `Unsqueeze`)",
    ("layer-norm", "variance_sum_times_reciprocal"): "hand-written (`sum * (1/d)`)",
    ("layer-norm", "variance_sum_over_shape_d"): "exporters dividing by `Shape(x)[-1]`",
    ("layer-norm", "onnx_function_body"): "ONNX's own `LayerNormalization` function body "
    "(Flatten, one-pass variance, Reshape back; Mean and InvStdDev used)",
    ("layer-norm", "onnx_function_body_input_affine"): "ONNX's backend tests (the function "
    "body, scale and bias graph inputs: kept)",
    ("layer-norm", "shared_mean"): "two norms of one x sharing its mean",
    ("layer-norm", "shared_centered"): "two norms of one x sharing `x - mean`",
    ("rms-norm", "llama_float32"): "PyTorch dynamo (LLaMA, Qwen2, Mistral)",
    ("rms-norm", "reciprocal"): "PyTorch dynamo (`rsqrt` as `Reciprocal`)",
    ("rms-norm", "torchscript_one_over_rms"): "PyTorch TorchScript (`rsqrt` as `Div(1, .)`)",
    ("rms-norm", "gemma_one_plus_w"): "Gemma (`x * (1 + w)`)",
    ("rms-norm", "llama_float16"): "PyTorch, float16 LLaMA (casts around the statistics)",
    ("rms-norm", "t5_float16"): "PyTorch, float16 T5 (statistics in float32)",
    ("rms-norm", "scale_before_cast"): "mixed-precision tools (scale before the cast back)",
    ("rms-norm", "pow_minus_half"): "hand-written / JAX-style `rsqrt`",
    ("rms-norm", "sqrt_as_pow"): "OpenVINO RMS tests (`Pow(., 0.5)` for `Sqrt`)",
    ("rms-norm", "reciprocal_as_pow"): "OpenVINO RMS tests (`Pow(., -1)` for `Reciprocal`)",
    ("rms-norm", "sum_square_over_d"): "hand-written (`ReduceSumSquare / d`)",
    ("rms-norm", "l2_squared_over_d"): "hand-written (`ReduceL2^2 / d`)",
    ("rms-norm", "epsilon_in_sum"): "hand-written (`(sum + eps) / d`: eps/d inside the mean)",
    ("rms-norm", "sum_times_reciprocal"): "hand-written (`sum * (1/d)`)",
    ("rms-norm", "keepdims_0_unsqueeze"): "older exporters (`keepdims=0` + `Unsqueeze`)",
    ("group-norm", "decomposed"): "hand-written `nn.GroupNorm` (statistics spelled out)",
    ("group-norm", "decomposed_silu"): "hand-written, then SiLU `x * Sigmoid(x)` (kept)",
    (
        "group-norm",
        "decomposed_static_reshape",
    ): "static-shape exports (Reshape back to a constant)",
    ("group-norm", "dynamo_hand_written"): "PyTorch dynamo, hand-written group norm (`torch.var`)",
    (
        "group-norm",
        "dynamo_hand_written_rsqrt",
    ): "PyTorch dynamo, hand-written (`torch.var`, `* torch.rsqrt(var + eps)`)",
    ("group-norm", "instance_norm_affine"): "instance norm with a per-channel affine (G = C)",
}


# Whole models whose structure is the point (shared or exposed statistics), by builder: each
# fuses every norm it holds (test_layer_norm.py).
LAYER_NORM_STRUCTURES = {
    "onnx_function_body": lambda: onnx_layer_norm_function_model(),
    "onnx_function_body_input_affine": lambda: onnx_layer_norm_function_model(parameters="inputs"),
    "shared_mean": lambda: shared_mean_model(),
    "shared_centered": lambda: shared_centered_model(),
}


def spelling_table() -> str:
    """The Markdown table of recognised spellings in docs/spellings-and-reasons.md."""
    registries = {
        "layer-norm": {**LAYER_NORM_POSITIVES, **LAYER_NORM_STRUCTURES},
        "rms-norm": {**RMS_NORM_POSITIVES, **RMS_NORM_FLOAT16_POSITIVES},
        "group-norm": GROUP_NORM_POSITIVES,
    }
    lines = ["| family | spelling (builder) | typical source |", "| --- | --- | --- |"]
    for (family, name), source in SPELLING_SOURCES.items():
        assert name in registries[family], name
        lines.append(f"| {family} | `{name}` | {source} |")
    return "\n".join(lines) + "\n"


def channel_first_layer_norm_model(
    shape: tuple = ("batch", 16, 6, 6), affine: bool = True, seed: int = 0
) -> onnx.ModelProto:
    """ConvNeXt's channels-first layer norm written out: statistics over axis 1 of NCHW,
    scale and bias shaped [C, 1, 1]."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(seed)
    channels = shape[1]
    mean = b.reduce("ReduceMean", "x", (1,))
    centered = b.op("Sub", ["x", mean])
    variance = b.reduce("ReduceMean", b.op("Pow", [centered, b.const(2.0, "two")]), (1,))
    std = b.op("Sqrt", [b.op("Add", [variance, b.const(1e-6, "epsilon")])])
    out = b.op("Div", [centered, std])
    if affine:
        out = b.op("Mul", [b.const(rng.uniform(0.5, 1.5, (channels, 1, 1)), "scale"), out])
        out = b.op("Add", [out, b.const(rng.normal(0, 0.5, (channels, 1, 1)), "bias")])
    return _single_op_model(b, out, shape, "channel_first_layer_norm")


def local_function_model(
    sequences: tuple[int, ...] = (7,), hidden: int = 32, opset: int = 17
) -> onnx.ModelProto:
    """A decomposed layer norm inside a model-local function, called once per entry of
    `sequences` on inputs [2, sequence, hidden]; outputs one result per call."""
    b = GraphBuilder(opset)
    out = add_layer_norm(b, "x", (2, 7, hidden), LayerNormSpec(), np.random.default_rng(0))
    constants = [helper.make_node("Constant", [], [t.name], value=t) for t in b.initializers]
    function = helper.make_function(
        "local",
        "DecomposedLayerNorm",
        ["x"],
        [out],
        constants + b.nodes,
        [helper.make_opsetid("", opset)],
    )
    calls, inputs, outputs = [], [], []
    for index, sequence in enumerate(sequences):
        inputs.append(helper.make_tensor_value_info(f"in{index}", FLOAT, [2, sequence, hidden]))
        outputs.append(helper.make_tensor_value_info(f"out{index}", FLOAT, [2, sequence, hidden]))
        calls.append(
            helper.make_node(
                "DecomposedLayerNorm",
                [f"in{index}"],
                [f"out{index}"],
                domain="local",
                name=f"call{index}",
            )
        )
    graph = helper.make_graph(calls, "with_function", inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
        functions=[function],
    )
    model.ir_version = 8
    return model


@dataclass(frozen=True)
class GroupNormSpec:
    """One way of writing group normalisation of an NCHW tensor (or something close to it).

    The group norm reshapes x [N, C, H, W] to [N, G, -1], normalises each group, reshapes back and
    applies a per-channel scale and bias ([C, 1, 1]); an optional SiLU `y * Sigmoid(y)` follows.
    """

    groups: int = 4
    # instance_norm: InstanceNormalization(ones[G], zeros[G]) between the Reshapes (TorchScript,
    # dynamo at opset 18) | decomposed: layer-norm-style statistics between them (`stats`) |
    # instance_affine: no Reshapes, statistics over H, W, per-channel affine (the G = C case) |
    # dynamo_var: dynamo's torch.var (own mean, ReduceMean without keepdims, Reshape [N, G, 1])
    spelling: str = "instance_norm"
    variance_shape: tuple[int, ...] | None = None  # dynamo_var: None is [N, G, 1]
    variance_axes: tuple[int, ...] = (-1,)  # dynamo_var: axes the variance reduces
    stats: LayerNormSpec = LayerNormSpec(scale=False, bias=False)
    grouped_shape: tuple[int, ...] | None = None  # None: (0, G, -1)
    # constant: `grouped_shape` | torchscript: Concat(Unsqueeze(Gather(Shape(x), 0)), [G], [-1])
    grouping: str = "constant"
    # shape_of_x (TorchScript) | static (dynamo) | minus_one ([0, C, -1, W]) | flat
    reshape_back: str = "shape_of_x"
    epsilon: float = 1e-5
    scale: bool = True
    bias: bool = True
    scale_shape: tuple[int, ...] | None = None  # None: (C, 1, 1)
    group_affine: bool = False  # a per-group scale and bias before the Reshape back
    silu: bool = False


def add_group_norm(b: GraphBuilder, x: str, shape: tuple, spec: GroupNormSpec, rng) -> str:
    """Append one group norm of `x` (NCHW of `shape`, or [N, C, *S] of any rank from 3) to `b`;
    returns the output name."""
    channels = shape[1]
    per_channel = (channels, *(1,) * (len(shape) - 2))  # [C, 1, 1] for NCHW
    if spec.spelling == "instance_affine":
        stats = dataclasses.replace(spec.stats, axes=(-2, -1), epsilon=spec.epsilon)
        out = add_layer_norm(b, x, shape, stats, rng)
    else:
        grouped_shape = spec.grouped_shape or (0, spec.groups, -1)
        grouped = b.op("Reshape", [x, _grouped_target(b, x, grouped_shape, spec.grouping)])
        groups = grouped_shape[1] if grouped_shape[1] > 0 else spec.groups
        if spec.spelling == "instance_norm":
            if spec.group_affine:  # inside the instance norm
                scale, bias = rng.uniform(0.5, 1.5, groups), rng.normal(0, 0.5, groups)
            else:
                scale, bias = np.ones(groups), np.zeros(groups)
            normed = b.op(
                "InstanceNormalization",
                [grouped, b.const(scale, "ones"), b.const(bias, "zeros")],
                epsilon=spec.epsilon,
            )
        elif spec.spelling == "dynamo_var":
            normed = _dynamo_variance_norm(b, grouped, shape, groups, spec)
        else:
            stats = dataclasses.replace(spec.stats, epsilon=spec.epsilon)
            dims = shape[1:]
            inner = int(np.prod(dims)) // groups if all(isinstance(d, int) for d in dims) else None
            normed = add_layer_norm(b, grouped, (None, groups, inner), stats, rng)
            if spec.group_affine:
                normed = b.op("Mul", [normed, b.const(rng.uniform(0.5, 1.5, (groups, 1)), "gamma")])
                normed = b.op("Add", [normed, b.const(rng.normal(0, 0.5, (groups, 1)), "beta")])
        if spec.reshape_back == "shape_of_x":
            back_shape = b.op("Shape", [x])
        elif spec.reshape_back == "static":
            back_shape = b.const([d if isinstance(d, int) else 0 for d in shape], "shape", np.int64)
        elif spec.reshape_back == "minus_one":
            back_shape = b.const([0, channels, -1, shape[-1]], "shape", np.int64)
        else:
            back_shape = b.const([0, channels, -1], "shape", np.int64)
        out = b.op("Reshape", [normed, back_shape])
    if spec.scale:
        scale_shape = spec.scale_shape or per_channel
        out = b.op("Mul", [out, b.const(rng.uniform(0.5, 1.5, scale_shape), "gamma")])
    if spec.bias:
        out = b.op("Add", [out, b.const(rng.normal(0, 0.5, per_channel), "beta")])
    if spec.silu:
        out = b.op("Mul", [out, b.op("Sigmoid", [out])])
    return out


def _grouped_target(b: GraphBuilder, x: str, grouped_shape: tuple, grouping: str) -> str:
    """The grouping Reshape's target: a constant, or TorchScript's batch read from Shape(x)."""
    if grouping == "constant":
        return b.const(grouped_shape, "groups", np.int64)
    batch = b.op("Gather", [b.op("Shape", [x]), b.const(0, "zero", np.int64)], axis=0)
    parts = [b.op("Unsqueeze", [batch, b.const([0], "axes", np.int64)])]
    parts += [b.const([dim], "dim", np.int64) for dim in grouped_shape[1:]]
    return b.op("Concat", parts, axis=0)


def _dynamo_variance_norm(
    b: GraphBuilder, grouped: str, shape: tuple, groups: int, spec: GroupNormSpec
) -> str:
    """(g - mean) / sqrt(var + eps) with var as PyTorch dynamo writes torch.var(unbiased=False)."""
    mean = b.reduce("ReduceMean", grouped, (-1,))
    deviation = b.op("Sub", [grouped, b.reduce("ReduceMean", grouped, (2,))])
    variance = b.reduce("ReduceMean", b.op("Mul", [deviation, deviation]), spec.variance_axes, 0)
    kept = spec.variance_shape or (shape[0], groups, 1)
    variance = b.op("Reshape", [variance, b.const(kept, "variance_shape", np.int64)])
    std = b.op("Sqrt", [b.op("Add", [variance, b.const(spec.epsilon, "epsilon")])])
    return _divide(b, b.op("Sub", [grouped, mean]), std, spec.stats)


def group_norm_block_model(
    spec: GroupNormSpec = GroupNormSpec(),
    shape: tuple = ("batch", 8, 5, 5),
    opset: int = 17,
    layers: int = 1,
    seed: int = 0,
) -> onnx.ModelProto:
    """`layers` residual blocks `h = h + group_norm(h) @ W` (W mixes the last axis), NCHW."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(opset)
    width = shape[-1]
    h = "x"
    for _ in range(layers):
        normed = add_group_norm(b, h, shape, spec, rng)
        weight = b.const(rng.normal(0, 0.3, (width, width)), "weight")
        h = b.op("Add", [h, b.op("MatMul", [normed, weight])])
    graph = helper.make_graph(
        b.nodes,
        "group_norm_test",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info(h, FLOAT, list(shape))],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 18 else 10
    return model


_DECOMPOSED = GroupNormSpec(spelling="decomposed")
GROUP_NORM_POSITIVES = {
    "decomposed": _DECOMPOSED,
    "decomposed_reciprocal": dataclasses.replace(
        _DECOMPOSED, stats=LayerNormSpec(scale=False, bias=False, divide="reciprocal")
    ),
    "decomposed_pow_minus_half": dataclasses.replace(
        _DECOMPOSED, stats=LayerNormSpec(scale=False, bias=False, divide="pow_half")
    ),
    "decomposed_silu": dataclasses.replace(_DECOMPOSED, silu=True),
    "decomposed_static_reshape": dataclasses.replace(_DECOMPOSED, reshape_back="static"),
    "dynamo_hand_written": GroupNormSpec(spelling="dynamo_var", reshape_back="static"),
    # `(x - mean) * torch.rsqrt(var + eps)`: dynamo writes rsqrt as Reciprocal(Sqrt(.)).
    "dynamo_hand_written_rsqrt": GroupNormSpec(
        spelling="dynamo_var",
        reshape_back="static",
        stats=LayerNormSpec(scale=False, bias=False, divide="reciprocal"),
    ),
    "dynamo_hand_written_one_over_sqrt": GroupNormSpec(
        spelling="dynamo_var",
        reshape_back="static",
        stats=LayerNormSpec(scale=False, bias=False, divide="one_over"),
    ),
    "decomposed_no_affine": dataclasses.replace(_DECOMPOSED, scale=False, bias=False),
    "decomposed_bias_only": dataclasses.replace(_DECOMPOSED, scale=False),
    "decomposed_one_group": dataclasses.replace(_DECOMPOSED, groups=1),
    "decomposed_group_per_channel": dataclasses.replace(_DECOMPOSED, groups=8),
    "instance_norm_affine": GroupNormSpec(spelling="instance_affine"),
    "instance_norm_affine_silu": GroupNormSpec(spelling="instance_affine", silu=True),
    "instance_norm_scale_only": GroupNormSpec(spelling="instance_affine", bias=False),
}

# What exporters write: recognised, checked, and left as they are (`no-faster-form`).
GROUP_NORM_KEPT = {
    "torchscript": GroupNormSpec(),
    "torchscript_silu": GroupNormSpec(silu=True),
    "dynamo_opset18": GroupNormSpec(reshape_back="static"),
    "instance_norm_no_affine": GroupNormSpec(scale=False, bias=False),
}


def _both(spec: GroupNormSpec) -> dict[str, GroupNormSpec]:
    return {"instance_norm": spec, "decomposed": dataclasses.replace(spec, spelling="decomposed")}


def _stats(**changes) -> GroupNormSpec:
    return dataclasses.replace(_DECOMPOSED, stats=LayerNormSpec(scale=False, bias=False, **changes))


# name -> (spec, shape or None for the default, reason): each changes one thing that makes the
# graph something other than group norm; both spellings where the hazard applies to both.
GROUP_NORM_NEGATIVES = {
    **{
        f"{spelling}_{name}": (variant, shape, reason)
        for name, spec, shape, reason in (
            (
                "groups_do_not_divide",
                GroupNormSpec(),
                ("batch", 6, "height", 4),
                "groups-do-not-divide",
            ),
            (
                "reshape_not_restored",
                GroupNormSpec(reshape_back="flat"),
                None,
                "reshape-not-restored",
            ),
            (
                "channels_not_split",
                GroupNormSpec(grouped_shape=(0, -1, 4)),
                None,
                "not-channel-groups",
            ),
            ("per_group_affine", GroupNormSpec(group_affine=True), None, "per-group-affine"),
            ("per_position_gamma", GroupNormSpec(scale_shape=(8, 5, 5)), None, "gamma-shape"),
            ("zero_epsilon", GroupNormSpec(epsilon=0.0), None, "epsilon-not-positive"),
        )
        for spelling, variant in _both(spec).items()
    },
    "epsilon_outside_sqrt": (_stats(epsilon_outside_sqrt=True), None, "epsilon-outside-sqrt"),
    "statistics_over_groups": (_stats(axes=(1,)), None, "non-trailing-axes"),
    "statistics_over_whole_sample": (_stats(axes=(-2, -1)), None, "group-statistics-axes"),
    "unbiased_variance": (_stats(variance="sum_over_d_minus_1"), None, "unbiased-variance"),
    "dynamo_variance_over_other_axes": (
        GroupNormSpec(spelling="dynamo_var", reshape_back="static", variance_axes=(1,)),
        (1, 8, 5, 5),
        "mismatched-axes",
    ),
    "dynamo_variance_reshaped_wrongly": (
        GroupNormSpec(spelling="dynamo_var", reshape_back="static", variance_shape=(1, 1, 4)),
        (1, 8, 5, 5),
        "reshape-not-restored",
    ),
    "dynamo_rsqrt_variance_over_other_axes": (
        dataclasses.replace(GROUP_NORM_POSITIVES["dynamo_hand_written_rsqrt"], variance_axes=(1,)),
        (1, 8, 5, 5),
        "mismatched-axes",
    ),
    "dynamo_rsqrt_zero_epsilon": (
        dataclasses.replace(GROUP_NORM_POSITIVES["dynamo_hand_written_rsqrt"], epsilon=0.0),
        (1, 8, 5, 5),
        "epsilon-not-positive",
    ),
}


def with_batch_norm(model: onnx.ModelProto, training_outputs: bool) -> onnx.ModelProto:
    """`model` (opset 9-13) plus a BatchNormalization of its input as an extra output; with
    `training_outputs`, in BatchNormalization-9's five-output training form, which opset 14
    removed (raising the opset would change its meaning)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    x = copy.graph.input[0]
    channels = x.type.tensor_type.shape.dim[1].dim_value
    names = ["bn_scale", "bn_bias", "bn_mean", "bn_var"]
    values = [np.ones(channels), np.zeros(channels), np.zeros(channels), np.ones(channels)]
    copy.graph.initializer.extend(
        numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip(names, values, strict=True)
    )
    outputs = ["bn_y", "bn_running_mean", "bn_running_var", "bn_saved_mean", "bn_saved_var"]
    outputs = outputs if training_outputs else outputs[:1]
    copy.graph.node.append(
        helper.make_node("BatchNormalization", [x.name, *names], outputs, name="bn")
    )
    copy.graph.output.append(helper.make_tensor_value_info("bn_y", FLOAT, None))
    return copy


# Near-misses of ONNX's LayerNormalization function body (each changes one thing), with the
# reason expected.
FUNCTION_BODY_NEGATIVES = {
    # InvStdDev = 1 / sqrt(Var + another epsilon): the variance is used outside the norm.
    "inv_std_other_epsilon": "intermediate-used-elsewhere",
    # InvStdDev = Reciprocal of a second Sqrt of the same Var + epsilon: not the norm's std.
    "reciprocal_of_other_std": "intermediate-used-elsewhere",
    # The std also feeds another node (a graph output Relu) besides the Reciprocal.
    "std_used_by_another_node": "intermediate-used-elsewhere",
    # The statistics reduce axis 0 of the flattened tensor, not the axis it was flattened at.
    "reduction_over_flattened_batch": "batch-axis",
}


def onnx_layer_norm_function_model(
    shape: tuple = (3, 7, 32),
    axis: int = -1,
    seed: int = 0,
    parameters: str = "constants",
    variant: str | None = None,
) -> onnx.ModelProto:
    """ONNX's own function body for LayerNormalization-17 (Flatten to 2-D, one-pass variance,
    Reshape back), generated by the installed onnx, as a graph with Mean and InvStdDev outputs.
    `parameters`: "constants" (initializers) or "inputs" (graph inputs, as in ONNX's backend
    tests); `variant`: a key of FUNCTION_BODY_NEGATIVES, or "reshape_mean_elsewhere" (Mean
    reshaped to the reduced shape with its two leading dims swapped)."""
    schema = onnx.defs.get_schema("LayerNormalization", 17)
    node = helper.make_node(
        "LayerNormalization", ["X", "Scale", "B"], ["Y", "Mean", "InvStdDev"], axis=axis
    )
    first = axis % len(shape)
    dims = shape[first:]
    types = [helper.make_tensor_type_proto(FLOAT, list(s)) for s in (shape, dims, dims)]
    body = onnx.FunctionProto()
    body.ParseFromString(
        schema.get_context_dependent_function(
            node.SerializeToString(), [t.SerializeToString() for t in types]
        )
    )
    nodes = [_function_variant(n, variant) for n in body.node]
    outputs = ["Y", "Mean", "InvStdDev"]
    nodes += _function_variant_extra(variant, outputs)
    rng = np.random.default_rng(seed)
    parameters_values = {
        "Scale": rng.uniform(0.5, 1.5, dims).astype(np.float32),
        "B": rng.normal(0, 0.5, dims).astype(np.float32),
    }
    reduced = [*shape[:first], *([1] * len(dims))]
    if variant == "reshape_mean_elsewhere":
        reduced_elsewhere = [reduced[1], reduced[0], *reduced[2:]]
        target = numpy_helper.from_array(np.array(reduced_elsewhere, np.int64), "elsewhere")
        nodes.append(helper.make_node("Constant", [], ["elsewhere_shape"], value=target))
        mean = next(n for n in nodes if list(n.output) == ["Mean"])
        mean.input[1] = "elsewhere_shape"
    inputs = [helper.make_tensor_value_info("X", FLOAT, list(shape))]
    initializers = []
    for name, value in parameters_values.items():
        if parameters == "inputs":
            inputs.append(helper.make_tensor_value_info(name, FLOAT, list(dims)))
        else:
            initializers.append(numpy_helper.from_array(value, name))
    mean_shape = reduced_elsewhere if variant == "reshape_mean_elsewhere" else reduced
    infos = [
        helper.make_tensor_value_info("Y", FLOAT, list(shape)),
        helper.make_tensor_value_info("Mean", FLOAT, mean_shape),
        helper.make_tensor_value_info("InvStdDev", FLOAT, reduced),
    ]
    infos += [helper.make_tensor_value_info(name, FLOAT, None) for name in outputs[3:]]
    graph = helper.make_graph(nodes, "onnx_layer_norm_function", inputs, infos, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _function_variant(node: onnx.NodeProto, variant: str | None) -> onnx.NodeProto:
    """`node` of ONNX's function body, changed as `variant` says."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    if copy.op_type == "Reciprocal" and variant == "inv_std_other_epsilon":
        copy.input[0] = "OtherStdDev"
    if copy.op_type == "Reciprocal" and variant == "reciprocal_of_other_std":
        copy.input[0] = "SecondStdDev"
    if copy.op_type == "ReduceMean" and variant == "reduction_over_flattened_batch":
        next(a for a in copy.attribute if a.name == "axes").ints[:] = [0]
    return copy


def _function_variant_extra(variant: str | None, outputs: list[str]) -> list[onnx.NodeProto]:
    """The nodes `variant` adds to ONNX's function body (extra graph outputs go to `outputs`)."""
    if variant == "inv_std_other_epsilon":
        other = numpy_helper.from_array(np.array(1e-3, np.float32), "other_epsilon")
        return [
            helper.make_node("Constant", [], ["OtherEpsilon"], value=other),
            helper.make_node("Add", ["Var", "OtherEpsilon"], ["OtherVarPlusEpsilon"]),
            helper.make_node("Sqrt", ["OtherVarPlusEpsilon"], ["OtherStdDev"]),
        ]
    if variant == "reciprocal_of_other_std":
        return [helper.make_node("Sqrt", ["VarPlusEpsilon"], ["SecondStdDev"])]
    if variant == "std_used_by_another_node":
        outputs.append("StdRelu")
        return [helper.make_node("Relu", ["StdDev"], ["StdRelu"])]
    return []


def shared_mean_model(shape: tuple = ("batch", 7, 32), seed: int = 0) -> onnx.ModelProto:
    """Two layer norms of one x with different epsilons and affines, sharing one ReduceMean (each
    centres with it); outputs their sum."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(seed)
    mean = b.reduce("ReduceMean", "x", (-1,))
    outputs = []
    for epsilon in (1e-5, 1e-3):
        centered = b.op("Sub", ["x", mean])
        outputs.append(_norm_of_centered(b, centered, epsilon, shape, rng))
    return _single_op_model(b, b.op("Add", outputs), shape, "shared_mean")


def _norm_of_centered(
    b: GraphBuilder, centered: str, epsilon: float, shape: tuple, rng, divisor: int | None = None
) -> str:
    """scale * centered / sqrt(mean(centered^2) + epsilon) + bias, with its own scale and bias
    (with `divisor`, the variance is sum / divisor instead)."""
    square = b.op("Pow", [centered, b.const(2.0, "two")])
    if divisor is None:
        variance = b.reduce("ReduceMean", square, (-1,))
    else:
        total = b.reduce("ReduceSum", square, (-1,))
        variance = b.op("Div", [total, b.const(float(divisor), "divisor")])
    std = b.op("Sqrt", [b.op("Add", [variance, b.const(epsilon, "epsilon")])])
    normed = b.op("Div", [centered, std])
    scaled = b.op("Mul", [normed, b.const(rng.uniform(0.5, 1.5, shape[-1]), "scale")])
    return b.op("Add", [scaled, b.const(rng.normal(0, 0.5, shape[-1]), "bias")])


# Near-misses of two norms sharing one x - mean, with the reason expected.
SHARED_CENTERED_NEGATIVES = {
    # x - mean also feeds a Relu outside both norms.
    "third_consumer": "intermediate-used-elsewhere",
    # The second "norm" divides the sum of squares by d - 1: not a layer norm, so no partner
    # (its own reason is the one reported: both norms share the mean, the site's key).
    "second_not_a_norm": "unbiased-variance",
}


def shared_centered_model(
    shape: tuple = ("batch", 7, 32), seed: int = 0, variant: str | None = None
) -> onnx.ModelProto:
    """Two layer norms of one x with different epsilons and affines, sharing one ReduceMean and
    one x - mean (each with its own variance); outputs their sum. `variant`: a key of
    SHARED_CENTERED_NEGATIVES."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(seed)
    centered = b.op("Sub", ["x", b.reduce("ReduceMean", "x", (-1,))])
    first = _norm_of_centered(b, centered, 1e-5, shape, rng)
    divisor = shape[-1] - 1 if variant == "second_not_a_norm" else None
    second = _norm_of_centered(b, centered, 1e-3, shape, rng, divisor)
    out = b.op("Add", [first, second])
    if variant == "third_consumer":
        out = b.op("Add", [out, b.op("Relu", [centered])])
    return _single_op_model(b, out, shape, "shared_centered")


def range_axes_model(shape: tuple = ("batch", 7, 32), axis: int = -1) -> onnx.ModelProto:
    """RMS norm whose ReduceMean axes are `Range(axis, Size(Shape(x)))` (as in ONNX's
    RMSNormalization function body), at opset 18."""
    b = GraphBuilder(18)
    rank = b.op("Size", [b.op("Shape", ["x"])])
    start = b.const(axis % len(shape), "axis", np.int64)
    axes = b.op("Range", [start, rank, b.const(1, "delta", np.int64)])
    mean_square = b.op("ReduceMean", [b.op("Pow", ["x", b.const(2.0, "two")]), axes])
    rms = b.op("Sqrt", [b.op("Add", [mean_square, b.const(1e-6, "epsilon")])])
    dims = shape[axis % len(shape) :]
    out = b.op("Mul", [b.op("Div", ["x", rms]), b.const(np.linspace(0.5, 1.5, dims[-1]), "scale")])
    model = _single_op_model(b, out, shape, "range_axes")
    model.ir_version = 10
    return model


def onnx_group_norm_function_model(
    shape: tuple = (2, 8, 5, 5),
    groups: int = 4,
    epsilon: float = 1e-5,
    affine_as_inputs: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """`GroupNormalization`-21 replaced by ONNX's own function body for it, expanded by onnx's
    backend-test helper (as in its `test_group_normalization_*_expanded` cases): Reshape to
    [N, G, C/G, *S] with C/G computed by `Div`, then [N, G, -1], one-pass variance, Reshape back,
    per-channel affine. Scale and bias are initializers, or graph inputs."""
    from onnx.backend.test.case.node import function_expand_helper

    rng = np.random.default_rng(seed)
    channels = shape[1]
    node = helper.make_node(
        "GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=epsilon
    )
    schema = onnx.defs.get_schema("GroupNormalization", 21)
    types = [
        helper.make_tensor_type_proto(FLOAT, list(dims)) for dims in (shape, [channels], [channels])
    ]
    body = onnx.FunctionProto()
    body.ParseFromString(
        schema.get_context_dependent_function_with_opset_version(
            21, node.SerializeToString(), [t.SerializeToString() for t in types]
        )
    )
    for name, attribute in schema.attributes.items():
        if name not in {a.name for a in node.attribute} and attribute.default_value:
            node.attribute.append(attribute.default_value)
    nodes = function_expand_helper(node, body, "group_norm_body")
    scale = helper.make_tensor("scale", FLOAT, [channels], rng.uniform(0.5, 1.5, channels))
    bias = helper.make_tensor("bias", FLOAT, [channels], rng.normal(0, 0.5, channels))
    inputs = [helper.make_tensor_value_info("x", FLOAT, list(shape))]
    if affine_as_inputs:
        inputs += [helper.make_tensor_value_info(n, FLOAT, [channels]) for n in ("scale", "bias")]
    graph = helper.make_graph(
        nodes,
        "onnx_group_norm_body",
        inputs,
        [helper.make_tensor_value_info("y", FLOAT, list(shape))],
        [] if affine_as_inputs else [scale, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def group_normalization_model(
    shape: tuple = ("batch", 8, 5, 5),
    groups: int = 4,
    epsilon: float = 1e-5,
    seed: int = 0,
    opset: int = 21,
) -> onnx.ModelProto:
    """One `GroupNormalization`-21 node (dynamo's `nn.GroupNorm` at opset 21), per-channel scale
    and bias as initializers; at `opset` 18-20 GroupNormalization-18, scale and bias per group."""
    rng = np.random.default_rng(seed)
    channels = shape[1] if opset >= 21 else groups
    node = helper.make_node(
        "GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=epsilon
    )
    parameters = [
        helper.make_tensor("scale", FLOAT, [channels], rng.uniform(0.5, 1.5, channels)),
        helper.make_tensor("bias", FLOAT, [channels], rng.normal(0, 0.5, channels)),
    ]
    graph = helper.make_graph(
        [node],
        "group_normalization",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", FLOAT, list(shape))],
        parameters,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def ort_inlined_group_norm_model(
    shape: tuple = ("batch", 8, 5, 5),
    groups: int = 4,
    shape_attrs: dict | None = None,
    first_back: str = "shape",
) -> onnx.ModelProto:
    """`GroupNormalization`-21 as ONNX Runtime inlines it on its CPU provider (the graph its
    session saves with optimisations disabled): the Reshapes back read `Shape(x', start=0)`.
    `shape_attrs` replaces that Shape node's attributes (another spelling of a window);
    `first_back`: shape (as ORT writes it) | leading_dims_and_w (`Concat(Shape(x', end=3), [W])`)
    | nc_minus_one (`Concat(Shape(x', end=2), [-1])`: [N, C, -1], not x's rank)."""
    import tempfile
    from pathlib import Path

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = str(Path(folder) / "inlined.onnx")
        model = group_normalization_model(shape, groups).SerializeToString()
        ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        inlined = onnx.load(options.optimized_model_filepath)
    graph = inlined.graph
    shape_node = next(n for n in graph.node if n.output[0].endswith("_XShape"))
    if shape_attrs is not None:
        del shape_node.attribute[:]
        shape_node.attribute.extend(helper.make_attribute(k, v) for k, v in shape_attrs.items())
    if first_back != "shape":
        end, tail = (3, shape[-1]) if first_back == "leading_dims_and_w" else (2, -1)
        leading = helper.make_node("Shape", [shape_node.input[0]], ["back_leading"], end=end)
        graph.initializer.append(numpy_helper.from_array(np.array([tail], np.int64), "back_tail"))
        concat = helper.make_node("Concat", ["back_leading", "back_tail"], ["back_shape"], axis=0)
        first = next(n for n in graph.node if n.input[1:] == shape_node.output[:1])
        first.input[1] = "back_shape"
        position = list(graph.node).index(first)
        graph.node.insert(position, concat)
        graph.node.insert(position, leading)
    return inlined


def padded_group_norm_model(
    shape: tuple = ("batch", 8, 9, 9),
    pads: tuple = (0, 1, 0, 1),
    mode: str = "constant",
    unfoldable: bool = False,
    grouping: str = "torchscript",
) -> onnx.ModelProto:
    """diffusers' Downsample2D as TorchScript exports it, then a group norm: `F.pad(x, pads)`
    becomes a Pad whose pads come from a constant-only chain (Shape of the constant, Sub, Mul,
    ConstantOfShape, Concat, Reshape, a reversing Slice, Transpose, Reshape, Cast) that shape
    inference does not fold; then Conv(3x3, stride 2) and a decomposed group norm. With
    `unfoldable`, the chain's length goes through `Max`, which the folding table lacks;
    `grouping`: the group norm's grouping Reshape target (`GroupNormSpec.grouping`; with
    `constant`, the Reshape back is static too: no Reshape target reads a Shape)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder(17)
    rank, channels = len(shape), shape[1]
    pad = b.const(list(pads), "pad", np.int64)
    pad_length = b.op("Gather", [b.op("Shape", [pad]), b.const([0], "zero", np.int64)], axis=0)
    twice_rank = b.op("Mul", [b.const(rank, "rank", np.int64), b.const(2, "two", np.int64)])
    if unfoldable:
        pad_length = b.op("Max", [pad_length, pad_length])
    extension = b.op("Sub", [twice_rank, pad_length])
    zero = numpy_helper.from_array(np.zeros(1, np.int64))
    padding = b.op(
        "Concat",
        [
            b.op("Cast", [pad], to=onnx.TensorProto.INT64),
            b.op("ConstantOfShape", [extension], value=zero),
        ],
        axis=0,
    )
    pairs = b.op("Reshape", [padding, b.const([-1, 2], "pairs", np.int64)])
    flipped = b.op(
        "Slice",
        [pairs]
        + [
            b.const([v], n, np.int64)
            for v, n in ((-1, "start"), (-(2**63) + 1, "end"), (0, "axis"))
        ]
        + [b.const([-1], "step", np.int64)],
    )
    columns = b.op("Transpose", [flipped], perm=[1, 0])
    flat = b.op("Cast", [b.op("Reshape", [columns, b.const([-1], "flat", np.int64)])], to=7)
    padded = b.op("Pad", ["x", flat, b.const(0.0, "pad_value")], mode=mode)
    weight = b.const(rng.normal(0, 0.2, (channels, channels, 3, 3)), "conv_weight")
    conv = b.op("Conv", [padded, weight], kernel_shape=[3, 3], strides=[2, 2])
    added = (pads[2] + pads[3], pads[0] + pads[1])  # F.pad lists the last dim first
    height, width = ((dim + p - 3) // 2 + 1 for dim, p in zip(shape[2:], added, strict=True))
    back = "shape_of_x" if grouping == "torchscript" else "static"
    spec = GroupNormSpec(spelling="decomposed", grouping=grouping, reshape_back=back)
    out_shape = (shape[0], channels, height, width)
    out = add_group_norm(b, conv, out_shape, spec, rng)
    graph = helper.make_graph(
        b.nodes,
        "padded_group_norm",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info(out, FLOAT, list(out_shape))],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
