"""Read constant values from a graph, whatever form they were written in.

A constant can be an initializer, the output of a `Constant` node (`value`, `value_float`,
`value_floats`, `value_int`, `value_ints`), or a tensor whose data lives in external data. Values
are read only for tensors of at most `max_elements` elements, so large weights stay on disk.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

DEFAULT_MAX_ELEMENTS = 1 << 20
DEFAULT_DOMAINS = (None, "", "ai.onnx")
_ARITHMETIC = ("Add", "Sub", "Mul", "Div")
# Element types the folder computes with exactly as ONNX does (IEEE floats; integers checked for
# overflow). Everything else (float8 with `saturate`, bfloat16, bool, strings) is not folded.
_FLOAT_DTYPES = (np.float16, np.float32, np.float64)
_INT_DTYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
_FOLDABLE_TYPES = {
    onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) for dtype in _FLOAT_DTYPES + _INT_DTYPES
}


class ConstantReader:
    """Reads constant tensor values; `base_dir` resolves external-data locations.

    A tensor is a constant only if it is an initializer that no caller can override (those are
    imported as graph inputs, not as constants), a `Constant` node without attribute references,
    or an exact fold of constants. Results are memoised per tensor, so repeated questions about
    a deep graph cost once (one reader serves one rewrite).
    """

    def __init__(self, base_dir: Path | None, max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
        self.base_dir = base_dir
        self.max_elements = max_elements
        self._values: dict[int, tuple[gs.Tensor, np.ndarray | None]] = {}
        self._constant: dict[int, tuple[gs.Tensor, bool]] = {}

    def value(self, tensor: gs.Tensor) -> np.ndarray | None:
        """The value of `tensor` if it is a (small enough) constant, else None.

        `Identity`, `Cast` and `Add`/`Sub`/`Mul`/`Div` of constants are folded (exporters
        deduplicate equal initializers through `Identity`; Gemma's scale is `1 + w`), each with
        ONNX's semantics or not at all.
        """
        return _memoised(self._values, _through_identities(tensor), self._compute, None)

    def is_constant(self, tensor: gs.Tensor) -> bool:
        """True for initializers, `Constant` nodes without attribute references, and the
        foldable ops applied to them."""
        return _memoised(
            self._constant, _through_identities(tensor), self._structurally_constant, False
        )

    def _structurally_constant(self, tensor: gs.Tensor) -> bool:
        if isinstance(tensor, gs.Constant):
            return True
        node = _producer(tensor)
        if node is None:
            return False
        if node.op == "Constant":
            return not any(isinstance(v, gs.Node.AttributeRef) for v in node.attrs.values())
        if node.op in ("Cast", *_ARITHMETIC):
            return all(self.is_constant(tensor) for tensor in node.inputs)
        return False

    def _compute(self, tensor: gs.Tensor) -> np.ndarray | None:
        if isinstance(tensor, gs.Constant):
            return self._from_constant(tensor)
        node = _producer(tensor)
        if node is None:
            return None
        if node.op == "Constant":
            return self._from_constant_node(node)
        if node.op in _ARITHMETIC and len(node.inputs) == 2:
            return self._fold_arithmetic(node)
        if node.op == "Cast" and len(node.inputs) == 1:
            return self._fold_cast(node)
        return None

    def _fold_cast(self, node: gs.Node) -> np.ndarray | None:
        """A Cast between float types, int to float, or int to int without overflow (float to
        int truncation and out-of-range values are left to the runtime)."""
        to = node.attrs.get("to")
        value = self.value(node.inputs[0])
        if value is None or not isinstance(to, int):
            return None
        if to in _FLOAT8_TYPES or value.dtype in _FLOAT8_DTYPES:
            return _cast_float8(value, to, node.attrs.get("saturate", 1))
        if to not in _FOLDABLE_TYPES:
            return None
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
        if np.issubdtype(target, np.integer) and (
            not np.issubdtype(value.dtype, np.integer) or not _fits(value, target)
        ):
            return None
        with np.errstate(all="ignore"):
            return value.astype(target)

    def _fold_arithmetic(self, node: gs.Node) -> np.ndarray | None:
        """Add/Sub/Mul/Div of two constants of one type: IEEE arithmetic for floats (inf and NaN
        as ONNX Runtime computes them); integers exactly, declined on overflow or division by
        zero, division truncating toward zero."""
        left, right = (self.value(tensor) for tensor in node.inputs)
        if left is None or right is None or left.dtype != right.dtype:
            return None
        try:
            shape = np.broadcast_shapes(left.shape, right.shape)
        except ValueError:
            return None
        if int(np.prod(shape, dtype=np.int64)) > self.max_elements:
            return None
        if left.dtype.type in _FLOAT_DTYPES:
            with np.errstate(all="ignore"):
                return _FLOAT_OPS[node.op](left, right).astype(left.dtype)
        if left.dtype.type not in _INT_DTYPES:
            return None
        a, b = np.broadcast_arrays(left.astype(object), right.astype(object))
        if node.op == "Div":
            if np.any(b == 0):
                return None
            exact = [_truncating_div(x, y) for x, y in zip(a.flat, b.flat, strict=True)]
            result = np.array(exact, dtype=object).reshape(shape)
        else:
            result = _FLOAT_OPS[node.op](a, b)
        return result.astype(left.dtype) if _fits(result, left.dtype) else None

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
            try:
                load_external_data_for_tensor(copy, str(self.base_dir))
            except (OSError, ValueError):
                return None
            del copy.external_data[:]
            copy.data_location = onnx.TensorProto.DEFAULT
            return _to_array(copy)
        return _to_array(proto)

    def _from_constant_node(self, node: gs.Node) -> np.ndarray | None:
        attrs = node.attrs
        if len(attrs) != 1 or any(isinstance(v, gs.Node.AttributeRef) for v in attrs.values()):
            return None
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
        """The value of a one-element numeric constant as a Python float, else None."""
        value = self.value(tensor)
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.number):
            return None
        return float(value.reshape(()))


_FLOAT8_TYPES = {
    onnx.TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
_FLOAT8_DTYPES = {np.dtype(dtype) for dtype in _FLOAT8_TYPES.values()}


def _cast_float8(value: np.ndarray, to: int, saturate) -> np.ndarray | None:
    """Cast to or from a float8 type as ONNX defines it: round to nearest even; with `saturate`
    (the default) out-of-range values and infinities clamp to the largest finite value, without
    it they become Inf (e5m2) or NaN (types without Inf). Float8 to float is exact."""
    if value.dtype in _FLOAT8_DTYPES:  # widening: exact
        target = onnx.helper.tensor_dtype_to_np_dtype(to) if to in _FOLDABLE_TYPES else None
        if target is None or not np.issubdtype(np.dtype(target), np.floating):
            return None
        return value.astype(np.float32).astype(target)
    if value.dtype.type not in _FLOAT_DTYPES or not isinstance(saturate, int):
        return None
    dtype = _FLOAT8_TYPES[to]
    wide = value.astype(np.float64)
    if saturate:
        largest = float(ml_dtypes.finfo(dtype).max)
        wide = np.where(np.isnan(wide), wide, np.clip(wide, -largest, largest))
    with np.errstate(all="ignore"):
        return wide.astype(dtype)


_FLOAT_OPS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _fits(values: np.ndarray, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return all(info.min <= int(v) <= info.max for v in np.asarray(values).flat)


def _truncating_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _memoised(table: dict, tensor: gs.Tensor, compute, fallback):
    """`compute(tensor)`, once per tensor (keyed by identity; the tensor is held so its id is
    never reused); `fallback` for an expression deeper than Python's stack (not folded)."""
    cached = table.get(id(tensor))
    if cached is not None and cached[0] is tensor:
        return cached[1]
    try:
        result = compute(tensor)
    except RecursionError:
        result = fallback
    table[id(tensor)] = (tensor, result)
    return result


def _through_identities(tensor: gs.Tensor) -> gs.Tensor:
    """The tensor an `Identity` chain forwards (iteratively: chains can be long)."""
    seen = 0
    while seen < 1_000_000:
        node = _producer(tensor)
        if node is None or node.op != "Identity" or len(node.inputs) != 1:
            return tensor
        tensor, seen = node.inputs[0], seen + 1
    return tensor


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
    if any(isinstance(value, gs.Node.AttributeRef) for value in node.attrs.values()):
        return None
    if "axes" in node.attrs:
        written = node.attrs["axes"]
        if not isinstance(written, list | tuple) or not all(isinstance(a, int) for a in written):
            return None  # a malformed attribute (not a list of ints): not decidable
        axes = list(written)
    elif len(node.inputs) > 1 and node.inputs[1].name:
        value = reader.value(node.inputs[1])
        if value is None or not np.issubdtype(value.dtype, np.integer):
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
