"""Read constant values from a graph, whatever form they were written in.

A constant can be an initializer, the output of a `Constant` node (`value`, `value_float`,
`value_floats`, `value_int`, `value_ints`), or a tensor whose data lives in external data. Values
are read only for tensors of at most `max_elements` elements, so large weights stay on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

from normfuse.facts.folding import Opset, fold, resolved_attributes, schema

DEFAULT_MAX_ELEMENTS = 1 << 20
DEFAULT_DOMAINS = (None, "", "ai.onnx")
# The ops this reader folds (through `normfuse.facts.folding`, as their opset version specifies): a
# scale or epsilon written as `Cast(c)` or `1 + w` is a constant; `static_values` folds more.
_FOLDED = ("Cast", "Add", "Sub", "Mul", "Div")


class Constants(Protocol):
    """What reading a scope's true constants asks: a `ConstantReader`, or the scope's facts
    (`facts.ScopeFacts`), which read through one."""

    @property
    def opset(self) -> Opset:
        """The scope's default-domain opset."""

    @property
    def max_elements(self) -> int:
        """The largest constant read, in elements."""

    def value(self, tensor: gs.Tensor) -> np.ndarray | None:
        """The value of `tensor` if it is a (small enough) true constant, else None."""

    def is_constant(self, tensor: gs.Tensor) -> bool:
        """True when `tensor` is a true constant, whatever its size."""

    def scalar(self, tensor: gs.Tensor) -> float | None:
        """The value of a one-element numeric constant as a Python float, else None."""


class ConstantReader:
    """Reads constant tensor values of one scope; `base_dir` resolves external-data locations,
    `opset` is the scope's default-domain opset (the main graph's; a function's own, with its
    model's where they differ: a node is read only where it means the same at both), which
    decides what each folded op means (None: unknown, nothing is folded).

    A tensor is a constant only if it is an initializer that no caller can override (those are
    imported as graph inputs, not as constants), a `Constant` node without attribute references,
    or an exact fold of constants. Results are memoised per tensor, so repeated questions about
    a deep graph cost once (one reader serves one rewrite).
    """

    def __init__(
        self,
        base_dir: Path | None,
        max_elements: int = DEFAULT_MAX_ELEMENTS,
        opset: Opset = None,
        held: Mapping[int, np.ndarray | None] | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.opset = opset
        self.max_elements = max_elements
        # Tensors (by id; their graph outlives the reader) read as given, whatever computes
        # them: an array is a constant of that value with no producer, None no constant (the
        # skeleton types are derived on: `shapes.fold_reshape_targets`).
        self._held = held or {}
        self._values: dict[int, tuple[gs.Tensor, np.ndarray | None]] = {}
        self._constant: dict[int, tuple[gs.Tensor, bool]] = {}

    def value(self, tensor: gs.Tensor) -> np.ndarray | None:
        """The value of `tensor` if it is a (small enough) constant, else None.

        `Identity`, `Cast` and `Add`/`Sub`/`Mul`/`Div` of constants are folded (exporters
        deduplicate equal initializers through `Identity`; Gemma's scale is `1 + w`), each with
        ONNX's semantics or not at all.
        """
        return _memoised(self._values, self._through_identities(tensor), self._compute, None)

    def is_constant(self, tensor: gs.Tensor) -> bool:
        """True for initializers, `Constant` nodes without attribute references, and the
        foldable ops applied to them."""
        return _memoised(
            self._constant, self._through_identities(tensor), self._structurally_constant, False
        )

    def _through_identities(self, tensor: gs.Tensor) -> gs.Tensor:
        """The tensor an `Identity` chain forwards (iteratively: chains can be long), stopping
        at a held tensor."""
        seen = 0
        while seen < 1_000_000 and id(tensor) not in self._held:
            node = _producer(tensor)
            if node is None or node.op != "Identity" or len(node.inputs) != 1:
                return tensor
            tensor, seen = node.inputs[0], seen + 1
        return tensor

    def _structurally_constant(self, tensor: gs.Tensor) -> bool:
        if id(tensor) in self._held:
            return self._held[id(tensor)] is not None
        if isinstance(tensor, gs.Constant):
            return True
        node = _producer(tensor)
        if node is None:
            return False
        if node.op == "Constant":
            return not any(isinstance(v, gs.Node.AttributeRef) for v in node.attrs.values())
        if node.op in _FOLDED:
            return all(self.is_constant(tensor) for tensor in node.inputs)
        return False

    def _compute(self, tensor: gs.Tensor) -> np.ndarray | None:
        if id(tensor) in self._held:
            held = self._held[id(tensor)]
            return None if held is None or held.size > self.max_elements else held
        if isinstance(tensor, gs.Constant):
            return self._from_constant(tensor)
        node = _producer(tensor)
        if node is None:
            return None
        if node.op == "Constant":
            return self._from_constant_node(node)
        if node.op in _FOLDED:
            return self._fold(node)
        return None

    def _fold(self, node: gs.Node) -> np.ndarray | None:
        """`node` (Cast or arithmetic) folded by the one table, at this scope's opset."""
        if any(isinstance(v, gs.Node.AttributeRef) for v in node.attrs.values()):
            return None
        inputs = [self.value(tensor) if tensor.name else None for tensor in node.inputs]
        if any(value is None for value in inputs):
            return None
        return fold(node.op, self.opset, node.attrs, inputs, self.max_elements)

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


def reduce_axes(
    node: gs.Node,
    rank: int | None,
    reader: Constants,
    read: Callable[[gs.Tensor], np.ndarray | None] | None = None,
) -> tuple[int, ...] | None:
    """The axes a Reduce* node reduces, as sorted negative indices; None when not decidable.

    Axes come from where the op's version at the reader's opset defines them: the `axes`
    attribute (ReduceMean before opset 18) or the second input (opset 18, ReduceSum from 13),
    read by `read` (default: the reader's constants). No axes means all axes, unless
    `noop_with_empty_axes` (where the version defines it) makes the node the identity. An
    attribute or input the version does not define, or a repeated axis, is not decidable.
    """
    attrs = _attributes(node, reader)
    axes = written_axes(node, reader, read)
    if attrs is None or axes is None:
        return None
    if not axes:
        if attrs.get("noop_with_empty_axes", 0) or rank is None:
            return None
        return tuple(range(-rank, 0))
    if any(a >= 0 for a in axes) and rank is None:
        return None
    normalised = {a - rank if a >= 0 else a for a in axes}
    if len(normalised) != len(axes) or (rank is not None and any(a < -rank for a in normalised)):
        return None
    return tuple(sorted(normalised))


def _attributes(node: gs.Node, reader: Constants) -> dict | None:
    """`node`'s attributes with the schema's defaults at the reader's opset; None for attribute
    references or an attribute the version does not define."""
    if any(isinstance(value, gs.Node.AttributeRef) for value in node.attrs.values()):
        return None
    return resolved_attributes(node.op, reader.opset, node.attrs)


def written_axes(
    node: gs.Node,
    reader: Constants,
    read: Callable[[gs.Tensor], np.ndarray | None] | None = None,
) -> list[int] | None:
    """The axes written on a Reduce*, Squeeze or Unsqueeze node (empty: none given), from the
    attribute or the second input, whichever its version at the reader's opset defines (`read`
    reads the input; default: the reader's constants); None when unreadable or written where
    the version does not look."""
    attrs = _attributes(node, reader)
    if attrs is None:
        return None
    read = read or reader.value
    if len(schema(node.op, reader.opset).inputs) == 1:
        if len(node.inputs) > 1:
            return None
        written = attrs.get("axes", [])
        if not isinstance(written, list | tuple) or not all(isinstance(a, int) for a in written):
            return None  # a malformed attribute (not a list of ints): not decidable
        return list(written)
    if len(node.inputs) < 2 or not node.inputs[1].name:
        return []
    value = read(node.inputs[1])
    if value is None or not np.issubdtype(value.dtype, np.integer):
        return None
    return [int(a) for a in value.reshape(-1)]
