"""Strict float16 evaluation of a small model: every op computed exactly and its result rounded to
its own type, as a GPU runtime's float16 kernels round it. ONNX Runtime's CPU provider runs most
float16 ops in float32, so it cannot show what a float16 kernel overflows.

Each node runs on onnx's reference evaluator with its float inputs widened to float64, and each
float result is rounded to the node's type: a Cast's target, else its first float input's. A
reduction thus sums in float64 and rounds once, the best a float16 kernel with a float32
accumulator does (ONNX Runtime's CUDA reductions, PyTorch's), so an overflow found here happens
on every float16 kernel. onnx's reference is not used as it is: its ReduceMean on float16 rounds
the sum to float16 before dividing (64 values of 2000: inf, not 2000), and its
LayerNormalization ignores `stash_type` (float16 rows of ±300: 0, not ±1). The fused norm ops
(`LayerNormalization`, ONNX Runtime's `SimplifiedLayerNormalization`, `RMSNormalization`) are
evaluated here as the standard's function body writes them: statistics in `stash_type` (float32
by default), the normalised value rounded to the input's type, the affine in that type.

With `exact`, nothing is rounded and every float is float64: the reference errors are measured
against."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

Values = dict[str, np.ndarray]
# Fused norm ops evaluated here -> whether they centre the rows (subtract the mean).
NORM_OPS = {
    "LayerNormalization": True,
    "SimplifiedLayerNormalization": False,
    "RMSNormalization": False,
}
_CASTS = ("Cast", "CastLike")


class Program:
    """A model's nodes, each with its reference kernel built once, to run on many inputs."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        opsets = {entry.domain: entry.version for entry in model.opset_import}
        self._kernels = {
            id(node): ReferenceEvaluator(node, opsets=opsets)
            for node in model.graph.node
            if node.op_type not in NORM_OPS and node.op_type not in _CASTS
        }

    def run(self, feeds: Values, exact: bool = False) -> Values:
        """Every tensor the model holds or computes, by name, on `feeds` (rounded per op, or
        with `exact` in float64 throughout)."""
        values = {
            tensor.name: _widened(numpy_helper.to_array(tensor), exact)
            for tensor in self.model.graph.initializer
        }
        values |= {name: _widened(value, exact) for name, value in feeds.items()}
        with warnings.catch_warnings(), np.errstate(all="ignore"):  # inf is a value here
            warnings.simplefilter("ignore", RuntimeWarning)
            for node in self.model.graph.node:
                inputs = [values[name] if name else None for name in node.input]
                outputs = self._node(node, inputs, exact)
                values |= dict(zip(node.output[: len(outputs)], outputs, strict=True))
        return values

    def _node(self, node: onnx.NodeProto, inputs: list, exact: bool) -> list[np.ndarray]:
        """One node's outputs: computed in float64, each float one rounded to the node's type."""
        if node.op_type in NORM_OPS:
            return [_normalise(node, inputs, exact)]
        result_type = None if exact else _result_type(node, inputs)
        if node.op_type in _CASTS:
            results = [_cast(inputs[0], _result_type(node, inputs))]
        else:
            wide = {
                name: _widened(value, True)
                for name, value in zip(node.input, inputs, strict=True)
                if name
            }
            results = self._kernels[id(node)].run(None, wide)
        return [_rounded(np.asarray(result), result_type) for result in results]


def _widened(value: np.ndarray, exact: bool) -> np.ndarray:
    """`value` as float64 where it is a float and `exact`; as it is otherwise."""
    return value.astype(np.float64) if exact and _is_float(value) else value


def _is_float(value: np.ndarray | None) -> bool:
    return value is not None and np.issubdtype(value.dtype, np.floating)


def _result_type(node: onnx.NodeProto, inputs: list) -> np.dtype | None:
    """The type a node's float results have: a Cast's target, a CastLike's second input's, else
    its first float input's (every op of a norm subgraph computes in its inputs' type)."""
    if node.op_type == "Cast":
        target = next(a.i for a in node.attribute if a.name == "to")
        return np.dtype(helper.tensor_dtype_to_np_dtype(target))
    if node.op_type == "CastLike":
        return inputs[1].dtype
    return next((value.dtype for value in inputs if _is_float(value)), None)


def _cast(value: np.ndarray, target: np.dtype) -> np.ndarray:
    """A Cast computed exactly: a float target keeps the float64 value (rounded afterwards)."""
    return value.astype(np.float64 if np.issubdtype(target, np.floating) else target)


def _rounded(value: np.ndarray, result_type: np.dtype | None) -> np.ndarray:
    """A float result rounded to `result_type` (None: float64, the exact evaluation); anything
    else as it is."""
    if not _is_float(value):
        return value
    return value.astype(np.float64 if result_type is None else result_type)


def _normalise(node: onnx.NodeProto, inputs: list, exact: bool) -> np.ndarray:
    """A fused norm's output: statistics over the axes from `axis` on in `stash_type`, the
    normalised value rounded to the input's type, then the scale and bias in that type."""
    x, scale, bias = (*inputs, None, None)[:3]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    stash = helper.tensor_dtype_to_np_dtype(attrs.get("stash_type", onnx.TensorProto.FLOAT))
    stash = np.float64 if exact else stash
    result_type = np.float64 if exact else x.dtype
    axes = tuple(range(attrs.get("axis", -1) % x.ndim, x.ndim))
    wide = x.astype(stash)
    if NORM_OPS[node.op_type]:
        wide = wide - wide.mean(axis=axes, keepdims=True)
    variance = (wide * wide).mean(axis=axes, keepdims=True)
    epsilon = np.asarray(attrs.get("epsilon", 1e-5), dtype=stash)
    inverse = np.reciprocal(np.sqrt(variance + epsilon))
    normalised = (wide * inverse).astype(result_type)
    y = (normalised * scale.astype(result_type)).astype(result_type)
    return y if bias is None else (y + bias.astype(result_type)).astype(result_type)
