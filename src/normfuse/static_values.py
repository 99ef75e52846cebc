"""Fold shape arithmetic to constants where every dim it reads is static.

Exporters write a normalisation's divisor or axes from the input's shape: `Cast(Gather(Shape(x),
-1))` for d, `Range(axis, Size(Shape(x)))` for the axes (ONNX's own function bodies). Where the
shapes those nodes read are known and static, the value is a constant in fact. Each step is folded
by `normfuse.folding` (one exact implementation per op and opset version); anything else is None
(unknown).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx_graphsurgeon as gs

from normfuse.constants import Constants
from normfuse.folding import fold

MAX_DEPTH = 16

# By tensor id: the tensor (held, so that its id is never reused), the depth asked, the answer.
Memo = dict[int, tuple[gs.Tensor, int, "np.ndarray | None"]]


class ShapeFacts(Constants, Protocol):
    """What folding shape arithmetic asks of a scope (`facts.ScopeFacts`): its true constants
    and the derived shape of a tensor."""

    def shape(self, tensor: gs.Tensor) -> tuple[int | str | None, ...] | None:
        """The derived shape of `tensor` (ints for static dims) when known."""

    def producer(self, tensor: gs.Tensor) -> gs.Node | None:
        """The one node computing `tensor`; None where there is none (or it is held as given)."""


def static_value(
    tensor: gs.Tensor, facts: ShapeFacts, depth: int = MAX_DEPTH, memo: Memo | None = None
) -> np.ndarray | None:
    """The value of `tensor` when it is a constant or shape arithmetic over static shapes.
    `memo` spares a caller that asks about many tensors of one unchanged graph the same
    sub-expressions again (`Shape(x)` feeds many of them)."""
    memo = {} if memo is None else memo
    known = memo.get(id(tensor))
    if known is not None and known[0] is tensor and (known[2] is not None or known[1] >= depth):
        return known[2]
    value = _static_value(tensor, facts, depth, memo)
    memo[id(tensor)] = (tensor, depth, value)
    return value


def _static_value(
    tensor: gs.Tensor, facts: ShapeFacts, depth: int, memo: Memo
) -> np.ndarray | None:
    value = facts.value(tensor)
    if value is not None or depth == 0:
        return value
    node = facts.producer(tensor)
    if node is None or node.domain not in (None, "", "ai.onnx") or node.outputs[0] is not tensor:
        return None
    if node.op == "Shape":
        return _shape(node, facts)
    if node.op == "Gather":
        partial = _gather_shape(node, facts, depth, memo)
        if partial is not None:
            return partial
    if node.op == "Size":
        shape = _static_shape(node.inputs[0], facts)
        return None if shape is None else np.array(int(np.prod(shape)), np.int64)
    written = list(node.inputs)
    while written and not written[-1].name:  # omitted trailing optional inputs
        written.pop()
    inputs = [None if not t.name else static_value(t, facts, depth - 1, memo) for t in written]
    if not inputs or any(value is None for value in inputs):
        return None
    return _fold(node, inputs, facts)


def _static_shape(tensor: gs.Tensor, facts: ShapeFacts) -> tuple[int, ...] | None:
    shape = facts.shape(tensor)
    if shape is None or not all(isinstance(dim, int) for dim in shape):
        return None
    return tuple(shape)


def _shape_dims(node: gs.Node, facts: ShapeFacts) -> tuple | None:
    """The dims a `Shape` node outputs (ints where static), honouring `start` and `end`."""
    shape = facts.shape(node.inputs[0])
    if shape is None:
        return None
    start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
    return tuple(shape[start:end])


def _shape(node: gs.Node, facts: ShapeFacts) -> np.ndarray | None:
    dims = _shape_dims(node, facts)
    if dims is None or not all(isinstance(dim, int) for dim in dims):
        return None
    return np.array(dims, np.int64)


def _gather_shape(node: gs.Node, facts: ShapeFacts, depth: int, memo: Memo) -> np.ndarray | None:
    """`Gather(Shape(t), i)` where the gathered dims are static, whatever the others are."""
    shape_node = facts.producer(node.inputs[0])
    if shape_node is None or shape_node.op != "Shape":
        return None
    dims = _shape_dims(shape_node, facts)
    indices = static_value(node.inputs[1], facts, depth - 1, memo)
    if dims is None or indices is None:
        return None
    picked = _fold(node, [np.array(dims, dtype=object), indices], facts)
    if picked is None or not all(isinstance(dim, int) for dim in picked.flat):
        return None
    return picked.astype(np.int64)


def _fold(node: gs.Node, inputs: list[np.ndarray], facts: ShapeFacts) -> np.ndarray | None:
    """One step over known `inputs`, by the one folding table at the scope's opset."""
    if any(isinstance(value, gs.Node.AttributeRef) for value in node.attrs.values()):
        return None
    return fold(node.op, facts.opset, node.attrs, inputs, facts.max_elements)
