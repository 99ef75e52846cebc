"""Fold shape arithmetic to constants where every dim it reads is static.

Exporters write a normalisation's divisor or axes from the input's shape: `Cast(Gather(Shape(x),
-1))` for d, `Range(axis, Size(Shape(x)))` for the axes (ONNX's own function bodies). Where the
shapes those nodes read are known and static, the value is a constant in fact. Each step is folded
by `folding` (one exact implementation per op and opset version); anything else is None
(unknown). Where the dims are not static, a shape tensor can still be read as entries: ints and
"dim k of tensor t" (`shape_entries`), for the Reshape targets exporters compute from `Shape`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx_graphsurgeon as gs

from normfuse.facts.constants import DEFAULT_DOMAINS, Constants, written_axes
from normfuse.facts.folding import Opset, fold, resolved_attributes

MAX_DEPTH = 16

# By tensor id: the tensor (held, so that its id is never reused), the depth asked, the answer.
Memo = dict[int, tuple[gs.Tensor, int, "np.ndarray | None"]]

# One entry of a shape tensor: an int, or (t, k) for "dim k of tensor t".
ShapeEntry = int | tuple[gs.Tensor, int]


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


def shape_entries(
    tensor: gs.Tensor, facts: ShapeFacts, rank: int | None = None
) -> list[ShapeEntry] | None:
    """A 1-D shape tensor as entries: ints, or (t, k) for "dim k of tensor t" (`Shape(t)`, or
    TorchScript's `Concat(Unsqueeze(Gather(Shape(t), k)), ...)`); None when not decidable."""
    value = facts.value(tensor)
    if value is not None:
        return [int(entry) for entry in value.reshape(-1).tolist()] if value.ndim == 1 else None
    node = facts.producer(tensor)
    if node is None:
        return None
    if _is(node, "Shape"):
        source_shape = facts.shape(node.inputs[0])
        count = len(source_shape) if source_shape is not None else rank
        window = shape_window(node, count, facts.opset)
        if window is None or window[1] is None:
            return None
        return [(node.inputs[0], axis) for axis in range(window[0], window[1])]
    if _is(node, "Concat") and node.attrs.get("axis") == 0:
        parts = [shape_entries(part, facts) for part in node.inputs]
        return None if any(part is None for part in parts) else [e for p in parts for e in p]
    if _is(node, "Unsqueeze") and _unsqueezes_axis_0(node, facts):
        entry = _scalar_entry(node.inputs[0], facts)
        return None if entry is None else [entry]
    if _is(node, "Slice"):
        return _sliced_entries(node, facts)
    return None


def _sliced_entries(node: gs.Node, facts: ShapeFacts) -> list[ShapeEntry] | None:
    """`Slice(entries, [start], [end])` of a 1-D shape tensor with step 1 (`x.shape[:1]`), per
    Slice-10 on: a negative bound counts from the end, both clamped to [0, len] (the rule of a
    Python slice with step 1). None for the attribute form (Slice-1), other axes or steps, or
    bounds that are not constants."""
    if node.attrs or len(node.inputs) < 3:
        return None
    entries = shape_entries(node.inputs[0], facts)
    bounds = [facts.value(tensor) for tensor in node.inputs[1:3]]
    if entries is None or any(b is None or b.shape != (1,) for b in bounds):
        return None
    # axes (one, of a 1-D tensor: 0 or -1) and steps (1), where given.
    for tensor, allowed in zip(node.inputs[3:5], (([0], [-1]), ([1],)), strict=False):
        value = facts.value(tensor) if tensor.name else None
        if tensor.name and (value is None or value.tolist() not in allowed):
            return None
    start, end = (int(bound[0]) for bound in bounds)
    return entries[start:end]


def _unsqueezes_axis_0(node: gs.Node, facts: ShapeFacts) -> bool:
    return written_axes(node, facts) == [0]


def _scalar_entry(tensor: gs.Tensor, facts: ShapeFacts) -> ShapeEntry | None:
    """A scalar constant, or `Gather(Shape(t), k)` (dim k of t)."""
    value = facts.value(tensor)
    if value is not None:
        return int(value) if value.size == 1 and value.ndim == 0 else None
    node = facts.producer(tensor)
    if node is None or not _is(node, "Gather") or node.attrs.get("axis", 0) != 0:
        return None
    shape_node = facts.producer(node.inputs[0])
    index = facts.value(node.inputs[1])
    if shape_node is None or not _is(shape_node, "Shape"):
        return None
    source_shape = facts.shape(shape_node.inputs[0])
    rank = None if source_shape is None else len(source_shape)
    window = shape_window(shape_node, rank, facts.opset)
    if window is None or index is None or index.ndim != 0 or int(index) < 0:
        return None
    start, end = window
    axis = start + int(index)
    return (shape_node.inputs[0], axis) if end is None or axis < end else None


def shape_window(node: gs.Node, rank: int | None, opset: Opset) -> tuple[int, int | None] | None:
    """The dims [start, end) of its input that a `Shape` node gives, per Shape-15: `start` 0
    and `end` the rank by default, a negative one counted from the end, both clamped to
    [0, rank] (an empty window where start >= end). Without the rank only the default window
    is known, (0, None); None where the window is not known or an attribute is not one the
    node's version at `opset` defines (Shape-1/13 have none)."""
    attrs = node.attrs
    if attrs and resolved_attributes("Shape", opset, attrs) is None:
        return None
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    if rank is None:
        return (0, None) if start == 0 and end is None else None

    def clamp(value: int) -> int:
        return min(max(value + rank if value < 0 else value, 0), rank)

    first = clamp(start)
    return first, max(first, rank if end is None else clamp(int(end)))


def _is(node: gs.Node, op: str) -> bool:
    return node.op == op and node.domain in DEFAULT_DOMAINS
