"""The facts of one scope (`ScopeFacts`), the one object every pass and check asks about a
tensor: its true-constant value (`value`, `is_constant`, `scalar`), its value as shape arithmetic
over static shapes (`static_value`), its derived shape and element type, and whether its declared
type contradicts the derived one (`conflicts`).

One per scope (the main graph and its bodies share one; each model-local function has its own,
with its opset and the types merged over its calls). Constant reads are memoised by the reader
(a constant stays one whatever is rewritten); static values are memoised while the graph does
not change (`forget`, which the driver calls before each scan)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.facts.constants import ConstantReader
from normfuse.facts.folding import Opset
from normfuse.facts.inference import TensorType
from normfuse.facts.static_values import MAX_DEPTH, Memo, static_value


class ScopeFacts:
    """What is known of one scope's tensors: constants, derived types, conflicts."""

    def __init__(
        self,
        reader: ConstantReader,
        types: dict[str, TensorType],
        conflicts: frozenset[str] = frozenset(),
        float16_rounded: Callable[[str, str], bool | None] | None = None,
    ) -> None:
        self.reader = reader
        self.types = types
        # Whether ONNX Runtime's CPU provider reads a float16 tensor rounded: (reader's first
        # output, tensor) -> bool, None where unknown (`float16_partition`); None: not read.
        self.float16_rounded = float16_rounded
        # Tensors whose declared type contradicts the derived one: sites touching them are left.
        self.conflicts = conflicts
        self._memo: Memo = {}

    @property
    def opset(self) -> Opset:
        """The scope's default-domain opset (the reader's)."""
        return self.reader.opset

    @property
    def max_elements(self) -> int:
        """The largest constant read, in elements."""
        return self.reader.max_elements

    def value(self, tensor: gs.Tensor) -> np.ndarray | None:
        """The value of `tensor` if it is a (small enough) true constant, else None."""
        return self.reader.value(tensor)

    def is_constant(self, tensor: gs.Tensor) -> bool:
        """True when `tensor` is a true constant, whatever its size."""
        return self.reader.is_constant(tensor)

    def scalar(self, tensor: gs.Tensor) -> float | None:
        """The value of a one-element numeric constant as a Python float, else None."""
        return self.reader.scalar(tensor)

    def static_value(self, tensor: gs.Tensor, depth: int = MAX_DEPTH) -> np.ndarray | None:
        """The value of `tensor` when it is a constant or shape arithmetic over static shapes
        (`static_values.static_value`), memoised until `forget`."""
        return static_value(tensor, self, depth, self._memo)

    def forget(self) -> None:
        """Drop the static values: the graph may have changed since they were derived."""
        self._memo.clear()

    def producer(self, tensor: gs.Tensor) -> gs.Node | None:
        """The one node computing `tensor`, or None."""
        return tensor.inputs[0] if len(tensor.inputs) == 1 else None

    def tensor_type(self, tensor: gs.Tensor) -> TensorType | None:
        """(element type, shape) of `tensor` when known: a constant's own, else the derived."""
        if isinstance(tensor, gs.Constant):
            dtype = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
            return dtype, tuple(tensor.shape)
        return self.types.get(tensor.name)

    def shape(self, tensor: gs.Tensor) -> tuple[int | str | None, ...] | None:
        """The shape of `tensor` (ints for static dims) when known."""
        known = self.tensor_type(tensor)
        return None if known is None else known[1]

    def elem_type(self, tensor: gs.Tensor) -> int | None:
        """The ONNX element type of `tensor` when known."""
        known = self.tensor_type(tensor)
        return None if known is None else known[0]
