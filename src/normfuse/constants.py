"""Read constant values from a graph, whatever form they were written in.

A constant can be an initializer, the output of a `Constant` node (`value`, `value_float`,
`value_floats`, `value_int`, `value_ints`), or a tensor whose data lives in external data. Values
are read only for tensors of at most `max_elements` elements, so large weights stay on disk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

DEFAULT_MAX_ELEMENTS = 1 << 20
DEFAULT_DOMAINS = (None, "", "ai.onnx")
_FOLDABLE_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


class ConstantReader:
    """Reads constant tensor values; `base_dir` resolves external-data locations."""

    def __init__(self, base_dir: Path | None, max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
        self.base_dir = base_dir
        self.max_elements = max_elements

    def value(self, tensor: gs.Tensor) -> np.ndarray | None:
        """The value of `tensor` if it is a (small enough) constant, else None.

        `Identity`, `Cast` and `Add`/`Sub`/`Mul`/`Div` of constants are folded (exporters
        deduplicate equal initializers through `Identity`; Gemma's scale is `1 + w`).
        """
        if isinstance(tensor, gs.Constant):
            return self._from_constant(tensor)
        node = _producer(tensor)
        if node is None:
            return None
        if node.op == "Constant":
            return self._from_constant_node(node)
        if node.op == "Identity":
            return self.value(node.inputs[0])
        if node.op in _FOLDABLE_BINARY:
            return self._fold_binary(node)
        if node.op == "Cast":
            value = self.value(node.inputs[0])
            try:
                to = onnx.helper.tensor_dtype_to_np_dtype(node.attrs.get("to"))
            except (KeyError, TypeError, ValueError):
                return None
            return None if value is None else value.astype(to)
        return None

    @staticmethod
    def is_constant(tensor: gs.Tensor) -> bool:
        """True for initializers, `Constant` node outputs, and the foldable ops applied to them."""
        if isinstance(tensor, gs.Constant):
            return True
        node = _producer(tensor)
        if node is None:
            return False
        if node.op in ("Cast", "Identity", *_FOLDABLE_BINARY):
            return all(ConstantReader.is_constant(tensor) for tensor in node.inputs)
        return node.op == "Constant"

    def _fold_binary(self, node: gs.Node) -> np.ndarray | None:
        """Add/Sub/Mul/Div of two constants (Gemma writes its scale as `1 + w`)."""
        left, right = (self.value(tensor) for tensor in node.inputs)
        if left is None or right is None or left.dtype != right.dtype:
            return None
        if node.op == "Div" and not np.issubdtype(left.dtype, np.floating):
            return None
        result = _FOLDABLE_BINARY[node.op](left, right)
        return None if result.size > self.max_elements else result.astype(left.dtype)

    def _from_constant(self, constant: gs.Constant) -> np.ndarray | None:
        if int(np.prod(constant.shape, dtype=np.int64)) > self.max_elements:
            return None
        values = constant._values
        if isinstance(values, gs.ir.tensor.LazyValues):
            return self._from_proto(values.tensor)
        return np.asarray(values)

    def _from_proto(self, proto: onnx.TensorProto) -> np.ndarray | None:
        if uses_external_data(proto):
            if self.base_dir is None:
                return None
            copy = onnx.TensorProto()
            copy.CopyFrom(proto)
            load_external_data_for_tensor(copy, str(self.base_dir))
            del copy.external_data[:]
            copy.data_location = onnx.TensorProto.DEFAULT
            return _to_array(copy)
        return _to_array(proto)

    def _from_constant_node(self, node: gs.Node) -> np.ndarray | None:
        attrs = node.attrs
        if "value" in attrs and isinstance(attrs["value"], gs.Constant):
            return self._from_constant(attrs["value"])
        if "value_float" in attrs:
            return np.array(attrs["value_float"], dtype=np.float32)
        if "value_floats" in attrs:
            return np.array(attrs["value_floats"], dtype=np.float32)
        if "value_int" in attrs:
            return np.array(attrs["value_int"], dtype=np.int64)
        if "value_ints" in attrs:
            return np.array(attrs["value_ints"], dtype=np.int64)
        return None

    def scalar(self, tensor: gs.Tensor) -> float | None:
        """The value of a one-element constant as a Python float, else None."""
        value = self.value(tensor)
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.number):
            return None
        return float(value.reshape(()))


def _to_array(proto: onnx.TensorProto) -> np.ndarray | None:
    """The tensor's values, or None when its data does not match its type and shape."""
    try:
        return onnx.numpy_helper.to_array(proto)
    except (ValueError, TypeError, KeyError):
        return None


def _producer(tensor: gs.Tensor) -> gs.Node | None:
    """The default-domain node computing `tensor`, if there is exactly one."""
    if len(tensor.inputs) != 1 or tensor.inputs[0].domain not in DEFAULT_DOMAINS:
        return None
    return tensor.inputs[0]


def reduce_axes(node: gs.Node, rank: int | None, reader: ConstantReader) -> tuple[int, ...] | None:
    """The axes a Reduce* node reduces, as sorted negative indices; None when not decidable.

    Axes come from the `axes` attribute (ReduceMean before opset 18) or the second input (opset 18,
    and ReduceSum from 13). No axes means all axes, unless `noop_with_empty_axes` is set.
    """
    if "axes" in node.attrs:
        axes = list(node.attrs["axes"])
    elif len(node.inputs) > 1 and node.inputs[1].name:
        value = reader.value(node.inputs[1])
        if value is None:
            return None
        axes = [int(a) for a in value.reshape(-1)]
    else:
        axes = []
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0) or rank is None:
            return None
        return tuple(range(-rank, 0))
    if any(a >= 0 for a in axes) and rank is None:
        return None
    normalised = {a - rank if a >= 0 else a for a in axes}
    if rank is not None and any(a < -rank for a in normalised):
        return None
    return tuple(sorted(normalised))
