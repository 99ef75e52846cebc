"""Proofs that two tensors have the same shape at run time, symbolic dims included.

Residual fusion needs `input` and `skip` of one shape (ONNX Runtime's `Skip*` kernels return
`input`'s shape and index `skip` by offset). Two dims are proved equal when they are the same
static size or the same symbol: a `dim_param` a graph input declares (ONNX's convention: one name
is one size across a graph's inputs; ONNX Runtime 1.32 does not enforce it, a model fed against
its own declaration is outside the proof) or a symbol shape inference generated once and
propagated. Where inference gave the two sides different symbols, both shapes are derived again
from their producers (`Deriver`): then equal means the same derivation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx_graphsurgeon as gs

if TYPE_CHECKING:
    from normfuse.facts.constants import Constants
    from normfuse.facts.shapes import TensorType

Dim = int | str | None
# A derived dim: a static size, a named symbol (("sym", name)) or one fresh unknown (("new", n)).
Term = int | tuple[str, object]
# Standard-domain ops whose output 0 has input 0's shape (elementwise on one tensor, norms).
SAME_AS_INPUT = frozenset(
    {
        "Identity", "Cast", "Relu", "Gelu", "Erf", "Tanh", "Sigmoid", "Neg", "Sqrt", "Exp",
        "Reciprocal", "Softmax", "Dropout", "LayerNormalization", "SimplifiedLayerNormalization",
        "RMSNormalization", "IsNaN", "IsInf", "Not", "Abs", "Log", "Sin", "Cos", "Floor", "Ceil",
    }
)  # fmt: skip
BROADCAST = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Where",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Max",
        "Min",
    }
)
REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"})
MAX_DEPTH = 200


def format_shape(shape: tuple[Dim, ...] | None) -> str:
    """`[batch, sequence, 768]`; `?` for a dim nothing names; `unknown` for no shape."""
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"


def same_shape(
    first: gs.Tensor,
    second: gs.Tensor,
    types: dict[str, TensorType],
    reader: Constants,
) -> bool:
    """Whether `first` and `second` provably have one shape at run time (`types`: the derived
    types by name)."""
    a, b = (types.get(t.name, (None, None))[1] for t in (first, second))
    known = a is not None and b is not None and len(a) == len(b)
    if known and all(x is not None and x == y for x, y in zip(a, b, strict=True)):
        return True
    derived = Deriver(types, reader)
    try:
        left, right = derived.dims(first), derived.dims(second)
    except RecursionError:  # a derivation deeper than the interpreter allows: not proved
        return False
    return left is not None and left == right and not any(_fresh(t) for t in left)


def _elementwise(op: str, operands: list[tuple]) -> tuple | None:
    """`Mul`, `Equal` or `Where` over shape vectors (one-element ones broadcast). A dim is never
    negative, so a symbol equals no negative size; anything not decided is None."""
    length = max(len(operand) for operand in operands)
    if any(len(operand) not in (1, length) for operand in operands):
        return None
    rows = zip(
        *(operand * length if len(operand) == 1 else operand for operand in operands), strict=True
    )
    result = []
    for row in rows:
        if op == "Where":
            condition, yes, no = row
            if not (isinstance(condition, tuple) and condition[0] == "bool"):
                return None
            result.append(yes if condition[1] else no)
            continue
        a, b = row
        if any(isinstance(t, tuple) and t[0] == "bool" for t in (a, b)):
            return None
        if op == "Mul":
            if isinstance(a, int) and isinstance(b, int):
                result.append(a * b)
            elif 1 in (a, b):
                result.append(b if a == 1 else a)
            else:
                return None
        elif a == b:
            result.append(("bool", True))
        elif isinstance(a, int) and isinstance(b, int):
            result.append(("bool", False))
        elif any(isinstance(t, int) and t < 0 for t in (a, b)):
            result.append(("bool", False))  # a symbol against a negative size
        else:
            return None
    return tuple(result)


def _fresh(term: Term) -> bool:
    return isinstance(term, tuple) and term[0] == "new"


class Deriver:
    """Shapes as terms, derived through an allow-list of ops (`dims`), and the values of small
    integer shape vectors (`values`: `Shape`, `Gather`, `Unsqueeze`, `Concat`, constants). Any
    other producer gives its inferred shape, where a symbol stays a symbol and an unnamed dim
    is a fresh unknown, equal to nothing."""

    def __init__(self, types: dict[str, TensorType], reader: Constants) -> None:
        self.types = types
        self.reader = reader
        self._dims: dict[int, tuple[Term, ...] | None] = {}
        self._fresh = 0

    def new(self) -> Term:
        """A dim equal to nothing else."""
        self._fresh += 1
        return ("new", self._fresh)

    def dims(self, tensor: gs.Tensor, depth: int = 0) -> tuple[Term, ...] | None:
        """The shape of `tensor` as terms, or None when its rank is not known."""
        key = id(tensor)
        if key not in self._dims:
            self._dims[key] = self._derive(tensor, depth)
        return self._dims[key]

    def _inferred(self, tensor: gs.Tensor) -> tuple[Term, ...] | None:
        shape = self.types.get(tensor.name, (None, None))[1]
        if shape is None:
            return None
        terms: list[Term] = []
        for dim in shape:
            if isinstance(dim, int) and dim >= 0:
                terms.append(dim)
            elif isinstance(dim, str) and dim:
                terms.append(("sym", dim))
            else:
                terms.append(self.new())
        return tuple(terms)

    def _derive(self, tensor: gs.Tensor, depth: int) -> tuple[Term, ...] | None:
        if isinstance(tensor, gs.Constant):
            return tuple(int(d) for d in tensor.shape)
        node = tensor.inputs[0] if tensor.inputs else None
        if node is None or depth > MAX_DEPTH or node.domain not in (None, "", "ai.onnx"):
            return self._inferred(tensor)
        inputs = list(node.inputs)
        index = next(i for i, output in enumerate(node.outputs) if output is tensor)
        derived = None
        if node.op == "Split" and inputs:
            derived = self._split(self.dims(inputs[0], depth + 1), node, index)
        elif index != 0:
            derived = None
        elif node.op in SAME_AS_INPUT and inputs:
            derived = self.dims(inputs[0], depth + 1)
        elif node.op in BROADCAST and inputs:
            derived = self._broadcast([self.dims(t, depth + 1) for t in inputs])
        elif node.op == "MatMul" and len(inputs) == 2:
            derived = self._matmul(*(self.dims(t, depth + 1) for t in inputs))
        elif node.op == "Transpose" and inputs:
            derived = self._transpose(self.dims(inputs[0], depth + 1), node.attrs.get("perm"))
        elif node.op == "Range" and len(inputs) == 3:
            derived = self._range(*inputs, depth)
        elif node.op == "Flatten" and inputs:
            derived = self._flatten(self.dims(inputs[0], depth + 1), node.attrs.get("axis", 1))
        elif node.op == "ConstantOfShape" and inputs:
            derived = self.values(inputs[0], depth)
        elif node.op == "Unsqueeze" and inputs:
            derived = self._unsqueeze(self.dims(inputs[0], depth + 1), node)
        elif node.op == "Expand" and len(inputs) == 2:
            target = self.values(inputs[1], depth)
            derived = self._broadcast([self.dims(inputs[0], depth + 1), target])
        elif node.op == "Gemm" and len(inputs) >= 2:
            derived = self._gemm(*(self.dims(t, depth + 1) for t in inputs[:2]), node.attrs)
        elif node.op in REDUCE and inputs:
            derived = self._reduce(self.dims(inputs[0], depth + 1), node)
        elif node.op == "Gather" and len(inputs) == 2:
            derived = self._gather(*(self.dims(t, depth + 1) for t in inputs), node.attrs)
        elif node.op == "Reshape" and len(inputs) == 2 and not node.attrs.get("allowzero", 0):
            derived = self._reshape(self.dims(inputs[0], depth + 1), self.values(inputs[1], depth))
        return derived if derived is not None else self._inferred(tensor)

    def _broadcast(self, shapes: list[tuple[Term, ...] | None]) -> tuple[Term, ...] | None:
        if any(shape is None for shape in shapes):
            return None
        rank = max(len(shape) for shape in shapes)
        result: list[Term] = []
        for axis in range(rank):
            terms = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
            terms.discard(1)
            sizes = {t for t in terms if isinstance(t, int)}
            if len(terms) == 1:
                result.append(terms.pop())
            elif not terms:
                result.append(1)
            elif len(sizes) == 1:
                result.append(sizes.pop())  # a symbol broadcast with a size is that size
            else:
                result.append(self.new())
        return tuple(result)

    def _matmul(self, a, b) -> tuple[Term, ...] | None:
        if a is None or b is None or len(a) < 2 or len(b) < 2:
            return None
        batch = self._broadcast([a[:-2], b[:-2]])
        return None if batch is None else (*batch, a[-2], b[-1])

    def _gemm(self, a, b, attrs: dict) -> tuple[Term, ...] | None:
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return None
        rows = a[1] if attrs.get("transA", 0) else a[0]
        columns = b[0] if attrs.get("transB", 0) else b[1]
        return (rows, columns)

    def _axes(self, node: gs.Node, rank: int) -> list[int] | None:
        """A Reduce's or Split's constant axes, normalised; None when not constant."""
        if "axes" in node.attrs:
            axes = list(node.attrs["axes"])
        elif len(node.inputs) > 1 and self.reader.is_constant(node.inputs[1]):
            value = self.reader.value(node.inputs[1])
            axes = None if value is None else [int(v) for v in value.reshape(-1)]
        else:
            return None
        if axes is None or any(not -rank <= axis < rank for axis in axes):
            return None
        return sorted({axis % rank for axis in axes})

    def _reduce(self, shape, node: gs.Node) -> tuple[Term, ...] | None:
        if shape is None:
            return None
        axes = self._axes(node, len(shape))
        if not axes:  # no axes (or empty): reduce-all or no-op by attribute; not derived here
            return None
        if node.attrs.get("keepdims", 1):
            return tuple(1 if axis in axes else term for axis, term in enumerate(shape))
        return tuple(term for axis, term in enumerate(shape) if axis not in axes)

    def _range(self, start, limit, delta, depth: int) -> tuple[Term, ...] | None:
        """Range(0, n, 1) has n elements (n a dim, so not negative)."""
        bounds = self._constant_ints(start), self._constant_ints(delta)
        if bounds != ([0], [1]):
            return None
        count = self.values(limit, depth)
        return None if count is None or len(count) != 1 else count

    def _flatten(self, shape, axis: int) -> tuple[Term, ...] | None:
        if shape is None or not -len(shape) <= axis <= len(shape):
            return None
        axis = axis + len(shape) if axis < 0 else axis
        return (self._product(shape[:axis]), self._product(shape[axis:]))

    def _product(self, terms) -> Term:
        """A product of terms: their size if all are sizes, the one term that is not 1, or a
        fresh unknown."""
        rest = [term for term in terms if term != 1]
        if all(isinstance(term, int) for term in rest):
            product = 1
            for term in rest:
                product *= term
            return product
        return rest[0] if len(rest) == 1 else self.new()

    def _unsqueeze(self, shape, node: gs.Node) -> tuple[Term, ...] | None:
        if shape is None:
            return None
        if "axes" in node.attrs:
            count = len(node.attrs["axes"])
        elif len(node.inputs) > 1 and self._constant_ints(node.inputs[1]) is not None:
            count = len(self._constant_ints(node.inputs[1]))
        else:
            return None
        axes = self._axes(node, len(shape) + count)
        if axes is None or len(axes) != count:
            return None
        result = list(shape)
        for axis in axes:  # ascending output positions
            result.insert(axis, 1)
        return tuple(result)

    def _split(self, shape, node: gs.Node, index: int) -> tuple[Term, ...] | None:
        if shape is None:
            return None
        axis = node.attrs.get("axis", 0)
        if not -len(shape) <= axis < len(shape):
            return None
        axis %= len(shape)
        sizes = node.attrs.get("split")
        if sizes is None and len(node.inputs) > 1 and self.reader.is_constant(node.inputs[1]):
            value = self.reader.value(node.inputs[1])
            sizes = None if value is None else [int(v) for v in value.reshape(-1)]
        size = sizes[index] if sizes is not None and len(sizes) == len(node.outputs) else None
        return (*shape[:axis], self.new() if size is None else size, *shape[axis + 1 :])

    def _gather(self, data, indices, attrs: dict) -> tuple[Term, ...] | None:
        if data is None or indices is None:
            return None
        axis = attrs.get("axis", 0)
        axis = axis + len(data) if axis < 0 else axis
        if not 0 <= axis < len(data):
            return None
        return (*data[:axis], *indices, *data[axis + 1 :])

    def _transpose(self, shape, perm) -> tuple[Term, ...] | None:
        if shape is None:
            return None
        order = list(perm) if perm is not None else list(range(len(shape)))[::-1]
        if sorted(order) != list(range(len(shape))):
            return None
        return tuple(shape[i] for i in order)

    def _reshape(self, shape, target) -> tuple[Term, ...] | None:
        if shape is None or target is None:
            return None
        result: list[Term] = []
        for index, term in enumerate(target):
            if term == 0:
                if index >= len(shape):
                    return None
                result.append(shape[index])
            elif isinstance(term, int) and term < -1:
                return None
            else:
                result.append(term)
        if result.count(-1) == 1:
            result[result.index(-1)] = self._inferred_dim(shape, result)
        return None if -1 in result else tuple(result)

    def _inferred_dim(self, shape: tuple[Term, ...], target: list[Term]) -> Term:
        """Reshape's -1: the input's terms left when the target's other terms are cancelled
        (as a multiset, 1s ignored); a product of sizes, one term, or a fresh unknown."""
        left = [term for term in shape if term != 1]
        for term in target:
            if term in (1, -1):
                continue
            if term not in left:
                return self.new()
            left.remove(term)
        return self._product(left)

    def _constant_ints(self, tensor: gs.Tensor) -> list[int] | None:
        if not self.reader.is_constant(tensor):
            return None
        value = self.reader.value(tensor)
        if value is None or value.dtype.kind not in "iu":
            return None
        return [int(v) for v in value.reshape(-1)]

    def values(self, tensor: gs.Tensor, depth: int = 0) -> tuple[Term, ...] | None:
        """The elements of a 1-D (or scalar) int64 shape tensor as terms, when derivable."""
        value = self.reader.value(tensor) if self.reader.is_constant(tensor) else None
        if value is not None:
            if value.dtype.kind not in "iu" or value.ndim > 1:
                return None
            return tuple(int(v) for v in value.reshape(-1))
        node = tensor.inputs[0] if tensor.inputs else None
        if node is None or depth > MAX_DEPTH or node.domain not in (None, "", "ai.onnx"):
            return None
        inputs = list(node.inputs)
        if node.op == "Shape" and inputs:
            shape = self.dims(inputs[0], depth + 1)
            if shape is None:
                return None
            start, end = node.attrs.get("start", 0), node.attrs.get("end", len(shape))
            return tuple(shape[slice(start, end)])
        if node.op in ("Cast", "Identity") and inputs:
            return self.values(inputs[0], depth + 1)
        if node.op == "Gather" and len(inputs) == 2 and node.attrs.get("axis", 0) == 0:
            vector, index = self.values(inputs[0], depth + 1), self.values(inputs[1], depth + 1)
            if vector is None or index is None or not all(isinstance(i, int) for i in index):
                return None
            if any(not -len(vector) <= i < len(vector) for i in index):
                return None
            return tuple(vector[i] for i in index)
        if node.op in ("Unsqueeze", "Squeeze") and inputs:
            return self.values(inputs[0], depth + 1)  # a scalar <-> a one-element vector
        if node.op == "Slice" and len(inputs) >= 3:
            vector = self.values(inputs[0], depth + 1)
            bounds = [self._constant_ints(t) for t in inputs[1:]]
            if vector is None or any(b is None or len(b) != 1 for b in bounds):
                return None
            start, end, *rest = (b[0] for b in bounds)
            axis, step = (rest[0] if rest else 0), (rest[1] if len(rest) > 1 else 1)
            if axis not in (0, -1) or step != 1:
                return None
            return vector[start:end]  # ONNX clamps a step-1 slice as Python does
        if node.op == "Concat" and node.attrs.get("axis") == 0:
            parts = [self.values(t, depth + 1) for t in inputs]
            return None if any(p is None for p in parts) else tuple(t for p in parts for t in p)
        if node.op == "Reshape" and len(inputs) == 2:
            target = self._constant_ints(inputs[1])
            vector = self.values(inputs[0], depth + 1)
            ok = vector is not None and target in ([-1], [len(vector)])
            return vector if ok else None
        if node.op == "ConstantOfShape" and inputs:
            return self._filled(self.values(inputs[0], depth + 1), node.attrs.get("value"))
        if node.op in ("Mul", "Equal", "Where"):
            operands = [self.values(t, depth + 1) for t in inputs]
            return None if any(o is None for o in operands) else _elementwise(node.op, operands)
        return None

    def _filled(self, length, value) -> tuple[Term, ...] | None:
        """ConstantOfShape's 1-D integer output: `length` copies of its integer value."""
        if length is None or len(length) != 1 or not isinstance(length[0], int):
            return None
        array = np.zeros(1, np.float32) if value is None else np.asarray(value.values)
        if array.dtype.kind not in "iu" or array.size != 1:
            return None
        return (int(array.reshape(-1)[0]),) * length[0]
