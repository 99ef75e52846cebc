"""Builders (onnx.helper) for decomposed layer-norm graphs: the positives normfuse must fuse and the
negatives it must leave alone. Each option changes one thing about the canonical TorchScript
export: ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

FLOAT_TYPES = {np.float32: onnx.TensorProto.FLOAT, np.float16: onnx.TensorProto.FLOAT16}


@dataclass(frozen=True)
class LayerNormSpec:
    """One way of writing layer normalisation (or something close to it) in ONNX."""

    axes: tuple[int, ...] = (-1,)
    variance_axes: tuple[int, ...] | None = None  # None: same as axes
    square: str = "pow"  # pow | mul
    divide: str = "div"  # div | reciprocal | pow_half
    variance: str = "mean"  # mean | sum_over_d | sum_over_d_minus_1
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
    mean = b.reduce("ReduceMean", x, spec.axes, spec.keepdims)
    centered = b.op("Sub", [x, mean])
    variance_axes = spec.variance_axes or spec.axes
    if spec.square == "pow":
        square = b.op("Pow", [centered, b.const(2.0, "two")])
    else:
        square = b.op("Mul", [centered, centered])
    variance = _variance(b, square, shape, variance_axes, spec)
    normed_input = centered if spec.shared_centered else b.op("Sub", [x, mean])
    epsilon = b.epsilon(spec.epsilon, spec.epsilon_form)
    if spec.epsilon_outside_sqrt:
        std = b.op("Add", [b.op("Sqrt", [variance]), epsilon])
        normed = b.op("Div", [normed_input, std])
    else:
        shifted = b.op("Add", [variance, epsilon])
        normed = _normalise(b, normed_input, shifted, spec.divide)
    first_axis = spec.axes[0] if spec.axes[0] < 0 else spec.axes[0] - len(shape)
    normalised_shape = tuple(shape[first_axis:])
    out = normed
    if spec.scale:
        scale = b.const(rng.uniform(0.5, 1.5, spec.scale_shape or normalised_shape), "scale")
        out = b.op("Mul", [scale, out] if spec.scale_first else [out, scale])
    if spec.bias:
        bias = b.const(rng.normal(0, 0.5, normalised_shape), "bias")
        out = b.op("Add", [bias, out] if spec.bias_first else [out, bias])
    return out


def _variance(b: GraphBuilder, square: str, shape: tuple, axes, spec: LayerNormSpec) -> str:
    if spec.variance == "mean":
        return b.reduce("ReduceMean", square, axes, spec.keepdims)
    count = int(np.prod([shape[a] for a in axes]))
    divisor = count if spec.variance == "sum_over_d" else count - 1
    total = b.reduce("ReduceSum", square, axes, spec.keepdims)
    return b.op("Div", [total, b.const(float(divisor), "divisor")])


def _normalise(b: GraphBuilder, centered: str, shifted: str, divide: str) -> str:
    if divide == "div":
        return b.op("Div", [centered, b.op("Sqrt", [shifted])])
    if divide == "reciprocal":
        return b.op("Mul", [centered, b.op("Reciprocal", [b.op("Sqrt", [shifted])])])
    return b.op("Mul", [centered, b.op("Pow", [shifted, b.const(-0.5, "minus_half")])])


def layer_norm_model(
    spec: LayerNormSpec = LayerNormSpec(),
    shape: tuple = ("batch", 7, 32),
    opset: int = 17,
    dtype: type = np.float32,
    layers: int = 1,
    expose: str | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """A model of `layers` residual blocks, each `h = h + LN(h) @ W`-like: a layer norm of the
    running tensor followed by a MatMul and a residual Add, so the norms sit in a real graph.

    `expose` names a node type in the first norm (e.g. "Sqrt") whose output also becomes a graph
    output, making that intermediate used elsewhere.
    """
    rng = np.random.default_rng(seed)
    b = GraphBuilder(opset, dtype)
    hidden = shape[-1]
    h = "x"
    exposed = None
    for _ in range(layers):
        start = len(b.nodes)
        normed = add_layer_norm(b, h, shape, spec, rng)
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
        "layer_norm_test",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        outputs,
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 18 else 9
    model.doc_string = "normfuse test model"
    helper.set_model_props(model, {"source": "models/builders.py"})
    return model


POSITIVES = {
    "torchscript": LayerNormSpec(),
    "mul_square": LayerNormSpec(square="mul"),
    "reciprocal": LayerNormSpec(divide="reciprocal"),
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
}

NEGATIVES = {
    "batch_axis": (LayerNormSpec(axes=(0, 1, 2), scale=False, bias=False), "batch-axis"),
    "unbiased_variance": (LayerNormSpec(variance="sum_over_d_minus_1"), "unbiased-variance"),
    "epsilon_outside_sqrt": (LayerNormSpec(epsilon_outside_sqrt=True), "epsilon-outside-sqrt"),
    "per_token_gamma": (LayerNormSpec(scale_shape=(7, 32)), "gamma-shape"),
    "non_trailing_axis": (LayerNormSpec(axes=(1,)), "non-trailing-axes"),
    "mismatched_axes": (LayerNormSpec(axes=(-1,), variance_axes=(-2, -1)), "mismatched-axes"),
    "zero_epsilon": (LayerNormSpec(epsilon=0.0), "epsilon-not-positive"),
}


def variant(name: str, **changes) -> LayerNormSpec:
    """A named positive spec with some fields changed."""
    return replace(POSITIVES[name], **changes)
