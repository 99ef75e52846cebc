"""Fold shape arithmetic to constants where every dim it reads is static.

Exporters write a normalisation's divisor or axes from the input's shape: `Cast(Gather(Shape(x),
-1))` for d, `Range(axis, Size(Shape(x)))` for the axes (ONNX's own function bodies). Where the
shapes those nodes read are known and static, the value is a constant in fact. This folds a small,
exact set of operators over integers and the casts between them; anything else is None (unknown).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.rewrite import Context

MAX_DEPTH = 16
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


Memo = dict[int, tuple[int, "np.ndarray | None"]]


def static_value(
    tensor: gs.Tensor, context: Context, depth: int = MAX_DEPTH, memo: Memo | None = None
) -> np.ndarray | None:
    """The value of `tensor` when it is a constant or shape arithmetic over static shapes.
    `memo` (by tensor id: the depth asked and the answer) spares a caller that asks about many
    tensors of one graph the same sub-expressions again (`Shape(x)` feeds many of them)."""
    memo = {} if memo is None else memo
    known = memo.get(id(tensor))
    if known is not None and (known[1] is not None or known[0] >= depth):
        return known[1]
    value = _static_value(tensor, context, depth, memo)
    memo[id(tensor)] = (depth, value)
    return value


def _static_value(tensor: gs.Tensor, context: Context, depth: int, memo: Memo) -> np.ndarray | None:
    value = context.reader.value(tensor)
    if value is not None or depth == 0:
        return value
    if len(tensor.inputs) != 1 or tensor.inputs[0].domain not in (None, "", "ai.onnx"):
        return None
    node = tensor.inputs[0]
    if node.outputs[0] is not tensor:
        return None
    if node.op == "Shape":
        return _shape(node, context)
    if node.op == "Gather" and node.attrs.get("axis", 0) == 0:
        partial = _gather_shape(node, context, depth, memo)
        if partial is not None:
            return partial
    if node.op == "Size":
        shape = _static_shape(node.inputs[0], context)
        return None if shape is None else np.array(int(np.prod(shape)), np.int64)
    inputs = [
        None if not t.name else static_value(t, context, depth - 1, memo) for t in node.inputs
    ]
    if any(value is None for value in inputs):
        return None
    return _fold(node, inputs)


def _static_shape(tensor: gs.Tensor, context: Context) -> tuple[int, ...] | None:
    shape = context.shape(tensor)
    if shape is None or not all(isinstance(dim, int) for dim in shape):
        return None
    return tuple(shape)


def _shape_dims(node: gs.Node, context: Context) -> tuple | None:
    """The dims a `Shape` node outputs (ints where static), honouring `start` and `end`."""
    shape = context.shape(node.inputs[0])
    if shape is None:
        return None
    start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
    return tuple(shape[start:end])


def _shape(node: gs.Node, context: Context) -> np.ndarray | None:
    dims = _shape_dims(node, context)
    if dims is None or not all(isinstance(dim, int) for dim in dims):
        return None
    return np.array(dims, np.int64)


def _gather_shape(node: gs.Node, context: Context, depth: int, memo: Memo) -> np.ndarray | None:
    """`Gather(Shape(t), i)` where the gathered dims are static, whatever the others are."""
    source = node.inputs[0]
    if len(source.inputs) != 1 or source.inputs[0].op != "Shape":
        return None
    dims = _shape_dims(source.inputs[0], context)
    indices = static_value(node.inputs[1], context, depth - 1, memo)
    if dims is None or indices is None or not np.issubdtype(indices.dtype, np.integer):
        return None
    if indices.ndim > 1 or np.any(indices < -len(dims)) or np.any(indices >= len(dims)):
        return None
    picked = [dims[int(i)] for i in indices.reshape(-1)]
    if not all(isinstance(dim, int) for dim in picked):
        return None
    return np.array(picked, np.int64).reshape(indices.shape)


def _fold(node: gs.Node, inputs: list[np.ndarray | None]) -> np.ndarray | None:
    """One exact step over known `inputs`; None where the op or its inputs are not handled."""
    op, attrs = node.op, node.attrs
    first = inputs[0]
    if op == "Identity":
        return first
    if op == "Cast":
        try:
            return first.astype(onnx.helper.tensor_dtype_to_np_dtype(attrs["to"]))
        except (KeyError, TypeError, ValueError):
            return None
    reshaped = _reshape(op, attrs, inputs)
    if reshaped is not None:
        return reshaped
    if not np.issubdtype(first.dtype, np.integer):
        return None  # integer arithmetic only: exact
    if op in _BINARY and inputs[1].dtype == first.dtype:
        return _BINARY[op](first, inputs[1])
    if op == "Div" and inputs[1].dtype == first.dtype:
        return _exact_division(first, inputs[1])
    if op == "Gather" and attrs.get("axis", 0) == 0 and first.ndim == 1 and inputs[1].ndim <= 1:
        return _gather(first, inputs[1])
    if op == "ReduceProd" and len(inputs) == 1 and not attrs.get("axes") and first.ndim == 1:
        return np.array(np.prod(first), first.dtype).reshape((1,) * attrs.get("keepdims", 1))
    if op == "Concat" and all(v.ndim == 1 and v.dtype == first.dtype for v in inputs):
        return np.concatenate(inputs)
    axes = list(attrs.get("axes", [])) or [int(a) for a in np.ravel(inputs[1:2])]
    if op == "Unsqueeze" and first.ndim == 0 and axes in ([0], [-1]):
        return first.reshape((1,))
    if op == "Squeeze" and first.shape == (1,) and axes in ([], [0], [-1]):
        return first.reshape(())
    if op == "Range" and all(v is not None and v.size == 1 for v in inputs):
        start, limit, delta = (int(v.reshape(())) for v in inputs)
        return None if delta == 0 else np.arange(start, limit, delta, dtype=first.dtype)
    return None


def _exact_division(dividend: np.ndarray, divisor: np.ndarray) -> np.ndarray | None:
    """Integer `Div` of non-negative values by positive ones where every quotient is exact (C / G
    of a group norm); None otherwise, so no rounding convention is ever assumed."""
    if np.any(dividend < 0) or np.any(divisor <= 0):
        return None
    try:
        if np.any(dividend % divisor):
            return None
    except ValueError:  # shapes that do not broadcast
        return None
    return dividend // divisor


def _reshape(op: str, attrs: dict, inputs: list[np.ndarray]) -> np.ndarray | None:
    """Flatten, and Reshape to a constant shape without 0s: the same values, any dtype."""
    first = inputs[0]
    if op == "Flatten" and len(inputs) == 1:
        axis = attrs.get("axis", 1)
        axis = axis + first.ndim if axis < 0 else axis
        if not 0 <= axis <= first.ndim:
            return None
        return first.reshape(int(np.prod(first.shape[:axis])), int(np.prod(first.shape[axis:])))
    if op == "Reshape" and len(inputs) == 2 and np.issubdtype(inputs[1].dtype, np.integer):
        shape = [int(dim) for dim in inputs[1].reshape(-1)]
        if 0 in shape or shape.count(-1) > 1 or any(dim < -1 for dim in shape):
            return None
        try:
            return first.reshape(shape)
        except ValueError:
            return None
    return None


def _gather(data: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    if np.any(indices < -data.size) or np.any(indices >= data.size):
        return None
    return data[indices]
