"""One exact implementation of each operator the constant folders fold, per opset version.

`fold(op, opset, attrs, inputs)` computes a node's output from known input values exactly as the
operator's version at `opset` specifies and ONNX Runtime executes it, or returns None (not
folded). The schema of that version decides which attributes exist and their defaults: an
attribute the version does not define, a version this table does not implement, or a value
outside what the version specifies is declined, never guessed. Where ONNX Runtime and the
reference semantics differ (a float64 value rounded to float16 through float32), only the
values on which both agree are folded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper

from normfuse.facts.fold_reductions import reduction
from normfuse.facts.fold_support import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Inputs,
    axes_of,
    fits,
    int_attr,
    ints_attr,
    normal_axis,
)

MAX_COMPUTED = 1 << 20  # elements a fold may allocate before its result is size-checked
FLOAT8_TYPES = {
    onnx.TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
FLOAT8_DTYPES = {np.dtype(dtype) for dtype in FLOAT8_TYPES.values()}
_NUMERIC_TYPES = {
    onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)): np.dtype(dtype)
    for dtype in FLOAT_DTYPES + INT_DTYPES
}


# The default-domain opset a scope is read at: one version, or several the scope's nodes must
# mean the same at (a function importing another opset than its model's: ONNX Runtime inlines
# the body at the model's); None: unknown.
Opset = int | tuple[int, ...] | None


def default_opset(model: onnx.ModelProto) -> int:
    """The model's opset for the default ONNX domain; 0 when it imports none (an ai.onnx.ml-only
    model: nothing to fuse, and nothing can be emitted)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 0


def schema(op: str, opset: Opset) -> onnx.defs.OpSchema | None:
    """The default-domain schema of `op` in force at `opset` (the same version at each of its
    opsets), or None: an unknown op or opset, or versions that differ."""
    opsets = (opset,) if isinstance(opset, int) else opset or ()
    found = [_schema(op, version) for version in opsets]
    if not found or any(f is None for f in found):
        return None
    if len({f.since_version for f in found}) != 1:
        return None
    return found[0]


@lru_cache(maxsize=512)
def _schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def resolved_attributes(op: str, opset: Opset, attrs: dict) -> dict | None:
    """`attrs` with the schema's defaults filled in, or None when `opset` is unknown or an
    attribute is not defined by the op's version at `opset` (the model is not valid)."""
    found = schema(op, opset)
    if found is None or any(name not in found.attributes for name in attrs):
        return None
    resolved = dict(attrs)
    for name, attribute in found.attributes.items():
        if name not in resolved and attribute.default_value.type:
            resolved[name] = onnx.helper.get_attribute_value(attribute.default_value)
    return resolved


def fold(
    op: str, opset: Opset, attrs: dict, inputs: Inputs, max_elements: int
) -> np.ndarray | None:
    """The output of `op` (default domain, version in force at `opset`) on `inputs`, exactly, or
    None. Results above `max_elements` elements are not computed."""
    entry = _TABLE.get(op)
    resolved = resolved_attributes(op, opset, attrs)
    if entry is None or resolved is None or not inputs or inputs[0] is None:
        return None
    versions, implementation = entry
    version = schema(op, opset).since_version
    if version not in versions:
        return None
    try:
        result = implementation(version, resolved, inputs)
    except (KeyError, ValueError, TypeError, IndexError, OverflowError):
        return None
    if not isinstance(result, np.ndarray) or result.size > max_elements:
        return None
    return result


# --- elementwise arithmetic -------------------------------------------------------------------

_ARITHMETIC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


def _arithmetic(op: str) -> Callable[[int, dict, Inputs], np.ndarray | None]:
    def implementation(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
        """IEEE arithmetic on floats (inf and NaN included); integers exactly, declined on
        overflow or division by zero, division truncating toward zero. Before opset 7
        (`broadcast`/`axis` attributes) only equal shapes."""
        left, right = inputs
        if right is None or left.dtype != right.dtype:
            return None
        if version < 7 and left.shape != right.shape:
            return None
        shape = np.broadcast_shapes(left.shape, right.shape)
        if left.dtype.type in FLOAT_DTYPES:
            function = np.divide if op == "Div" else _ARITHMETIC[op]
            with np.errstate(all="ignore"):
                return np.asarray(function(left, right), dtype=left.dtype)  # 0-d stays an array
        if left.dtype.type not in INT_DTYPES:
            return None
        a, b = np.broadcast_arrays(left.astype(object), right.astype(object))
        if op == "Div":
            if np.any(b == 0):
                return None
            quotients = [_truncating_div(x, y) for x, y in zip(a.flat, b.flat, strict=True)]
            result = np.array(quotients, dtype=object).reshape(shape)
        else:
            result = np.asarray(_ARITHMETIC[op](a, b), dtype=object)  # 0-d gives a scalar
        return result.astype(left.dtype) if fits(result, left.dtype) else None

    return implementation


def _truncating_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _neg(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """-x: floats exactly (the sign bit); signed integers, declined where -x overflows."""
    (value,) = inputs
    if value.dtype.type in FLOAT_DTYPES:
        return np.asarray(np.negative(value))  # 0-d stays an array
    if not np.issubdtype(value.dtype, np.signedinteger):
        return None  # unsigned types are not in Neg's type constraint
    if np.any(value == np.iinfo(value.dtype).min):
        return None  # ONNX Runtime wraps
    return np.asarray(np.negative(value))


def _abs(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """|x|: floats exactly; integers, declined where |x| overflows (the type's minimum)."""
    (value,) = inputs
    if value.dtype.type not in FLOAT_DTYPES + INT_DTYPES:
        return None
    if np.issubdtype(value.dtype, np.signedinteger) and np.any(value == np.iinfo(value.dtype).min):
        return None
    return np.asarray(np.abs(value))


def _mod(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """The remainder, broadcast: `fmod=0` (integers only) takes the divisor's sign (Python's
    `%`), `fmod=1` the dividend's (C's fmod, exact for floats too). A zero divisor, a
    non-finite operand or a float with `fmod=0` (invalid before opset 28) is declined."""
    left, right = inputs
    if right is None or left.dtype != right.dtype:
        return None
    fmod = int_attr(attrs, "fmod")
    if fmod not in (0, 1) or np.any(right == 0):
        return None
    if left.dtype.type in FLOAT_DTYPES:
        if not fmod or not (np.all(np.isfinite(left)) and np.all(np.isfinite(right))):
            return None
        if np.any(np.signbit(left) & (left == 0)):  # fmod(-0, y): either zero, says ONNX
            return None
        return np.asarray(np.fmod(left, right), dtype=left.dtype)
    if left.dtype.type not in INT_DTYPES:
        return None
    a, b = np.broadcast_arrays(left.astype(object), right.astype(object))
    remainders = [_remainder(x, y, fmod) for x, y in zip(a.flat, b.flat, strict=True)]
    return np.array(remainders, dtype=object).reshape(a.shape).astype(left.dtype)


def _remainder(a: int, b: int, fmod: int) -> int:
    if not fmod:
        return a % b
    remainder = abs(a) % abs(b)
    return remainder if a >= 0 else -remainder


def _equal(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Elementwise IEEE equality, broadcast, of two tensors of one type (bool, int32 and int64
    only before opset 11)."""
    left, right = inputs
    if right is None or left.dtype != right.dtype:
        return None
    allowed = (
        FLOAT_DTYPES + INT_DTYPES + (np.bool_,) if version >= 11 else (np.bool_, np.int32, np.int64)
    )
    if left.dtype.type not in allowed:
        return None
    return np.asarray(np.equal(left, right))


# --- Cast --------------------------------------------------------------------------------------


def _cast(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Between IEEE floats, from integers to a type holding each value exactly, between integers
    (out of range: the low bits, reinterpreted in two's complement, as ONNX specifies), from
    floats to integers toward zero where the truncated value is in range (outside it ONNX leaves
    the result undefined: declined), and to or from float8 (`saturate`). A float64 value is
    narrowed only where rounding it directly and through float32 (as ONNX Runtime does) agree."""
    (value,) = inputs
    to = int_attr(attrs, "to")
    if to in FLOAT8_TYPES or value.dtype in FLOAT8_DTYPES:
        return _cast_float8(value, to, int_attr(attrs, "saturate")) if version >= 19 else None
    target = _NUMERIC_TYPES.get(to)
    if target is None or value.dtype.type not in FLOAT_DTYPES + INT_DTYPES:
        return None
    if np.issubdtype(target, np.integer):
        if np.issubdtype(value.dtype, np.integer):
            return _wrapped(value, target)
        if not np.all(np.isfinite(value)):
            return None
        truncated = np.trunc(value.astype(np.float64))
        return np.asarray(truncated, dtype=target) if fits(truncated, target) else None
    if np.issubdtype(value.dtype, np.integer):
        with np.errstate(all="ignore"):
            cast = value.astype(target)
        if not np.all(np.isfinite(cast)):
            return None
        exact = [int(c) for c in cast.flat] == [int(v) for v in value.flat]
        return cast if exact else None
    return _narrow(value, target)


def _wrapped(value: np.ndarray, target: np.dtype) -> np.ndarray:
    """Integers to integer `target` keeping the low bits (two's complement for signed types)."""
    bits = 8 * target.itemsize
    low = [int(v) % (1 << bits) for v in value.flat]
    if np.issubdtype(target, np.signedinteger):
        low = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in low]
    return np.array(low, dtype=target).reshape(value.shape)


def _narrow(value: np.ndarray, target: np.dtype) -> np.ndarray | None:
    with np.errstate(all="ignore"):
        direct = value.astype(target)
        if value.dtype != np.float64 or target.itemsize >= 4:
            return direct
        stepped = value.astype(np.float32).astype(target)
    return direct if _same_bits(direct, stepped) else None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, any NaN equal to any NaN."""
    bits = np.dtype(f"u{a.itemsize}")
    both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return bool(np.all(both_nan | (a.view(bits) == b.view(bits))))


def _cast_float8(value: np.ndarray, to: int, saturate: int) -> np.ndarray | None:
    """To or from float8 as ONNX defines it: round to nearest even; with `saturate` out-of-range
    values and infinities clamp to the largest finite value, without it they become Inf (e5m2)
    or NaN (types without Inf). Float8 to float is exact."""
    if value.dtype in FLOAT8_DTYPES:
        target = _NUMERIC_TYPES.get(to)
        if target is None or not np.issubdtype(target, np.floating):
            return None
        return value.astype(np.float32).astype(target)
    if value.dtype.type not in FLOAT_DTYPES:
        return None
    dtype = np.dtype(FLOAT8_TYPES[to])
    results = []
    sources = [value] if value.dtype != np.float64 else [value, value.astype(np.float32)]
    for source in sources:
        wide = source.astype(np.float64)
        if saturate:
            largest = float(ml_dtypes.finfo(dtype).max)
            wide = np.where(np.isnan(wide), wide, np.clip(wide, -largest, largest))
        with np.errstate(all="ignore"):
            results.append(wide.astype(dtype))
    return results[0] if _same_bits(results[0], results[-1]) else None


# --- shape and index operators ----------------------------------------------------------------


def _identity(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    return inputs[0]


def _gather(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """`np.take` along `axis`; negative indices from opset 11; out-of-range indices declined."""
    data, indices = inputs
    if indices is None or indices.dtype not in (np.int32, np.int64) or data.ndim == 0:
        return None
    axis = normal_axis(int_attr(attrs, "axis"), data.ndim, negative=True)
    size = data.shape[axis]
    if np.any(indices >= size) or np.any(indices < (-size if version >= 11 else 0)):
        return None
    picked = np.take(data, indices.astype(np.int64) % max(size, 1), axis=axis)
    return np.asarray(picked, dtype=data.dtype)


def _concat(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Same dtype and rank along the required `axis` (negative from opset 11). Concat-1, whose
    axis defaults to 1, is not folded: ONNX Runtime registers Concat from opset 4."""
    if any(v is None or v.dtype != inputs[0].dtype or v.ndim != inputs[0].ndim for v in inputs):
        return None
    if inputs[0].ndim == 0:
        return None
    axis = normal_axis(int_attr(attrs, "axis"), inputs[0].ndim, negative=version >= 11)
    return np.concatenate(inputs, axis=axis)


def _unsqueeze(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Insert size-1 dims at `axes` (of the output); negative axes from opset 11."""
    data = inputs[0]
    axes = axes_of(version, attrs, inputs, since_input=13)
    if not axes:
        return None
    rank = data.ndim + len(axes)
    normalised = sorted(normal_axis(a, rank, negative=version >= 11) for a in axes)
    if len(set(normalised)) != len(normalised):
        return None
    return np.expand_dims(data, tuple(normalised))


def _squeeze(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Remove the size-1 dims at `axes` (every size-1 dim without axes); an axis of another size
    is an error, and an empty axes input (read differently by runtimes) is declined."""
    data = inputs[0]
    axes = axes_of(version, attrs, inputs, since_input=13)
    if axes is None:
        return data.reshape([dim for dim in data.shape if dim != 1])
    if not axes:
        return None
    normalised = {normal_axis(a, data.ndim, negative=version >= 11) for a in axes}
    if len(normalised) != len(axes) or any(data.shape[a] != 1 for a in normalised):
        return None
    return np.squeeze(data, axis=tuple(normalised))


def _range(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Integer scalars only: `start + i·delta` for i < max(ceil((limit - start)/delta), 0)."""
    if len(inputs) != 3 or any(v is None or v.ndim != 0 for v in inputs):
        return None
    dtype = inputs[0].dtype
    if dtype not in (np.int16, np.int32, np.int64) or any(v.dtype != dtype for v in inputs):
        return None
    start, limit, delta = (int(v) for v in inputs)
    if delta == 0:
        return None
    count = max(-((start - limit) // delta), 0)
    if count > MAX_COMPUTED:
        return None
    return np.array([start + i * delta for i in range(count)], dtype=dtype)


def _flatten(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """To 2-D at `axis` in [0, rank] (negative from opset 11)."""
    data = inputs[0]
    axis = int_attr(attrs, "axis")
    if axis < 0 and version >= 11:
        axis += data.ndim
    if not 0 <= axis <= data.ndim:
        return None
    outer = int(np.prod(data.shape[:axis], dtype=np.int64))
    return data.reshape(outer, int(np.prod(data.shape[axis:], dtype=np.int64)))


def _reshape(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """To the shape input: 0 copies the input's dim (a literal 0 with `allowzero`, opset 14),
    one -1 takes what remains."""
    data, target = inputs
    if target is None or target.ndim != 1 or target.dtype != np.int64:
        return None
    shape = [int(dim) for dim in target]
    allowzero = version >= 14 and int_attr(attrs, "allowzero") == 1
    if allowzero and 0 in shape and -1 in shape:
        return None
    if not allowzero:
        if any(dim == 0 and index >= data.ndim for index, dim in enumerate(shape)):
            return None
        shape = [data.shape[i] if dim == 0 else dim for i, dim in enumerate(shape)]
    if shape.count(-1) > 1 or any(dim < -1 for dim in shape):
        return None
    return data.reshape(shape)


def _index_input(value: np.ndarray | None) -> np.ndarray | None:
    if value is not None and (value.ndim != 1 or value.dtype not in (np.int32, np.int64)):
        raise TypeError("Slice indices")
    return value


def _slice(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Per axis, start and end (negative ones counted from the back) clamped as the spec says
    for the step's sign; `starts`/`ends`/`axes` attributes before opset 10, inputs (with `steps`)
    from 10; negative axes from 11; a step of 0 or a repeated axis declined."""
    data = inputs[0]
    if version < 10:
        if len(inputs) > 1:
            return None
        given = [ints_attr(attrs, name) for name in ("starts", "ends", "axes")] + [None]
    else:
        indices = [_index_input(v) for v in [*inputs[1:], None, None, None, None][:4]]
        if len({v.dtype for v in indices if v is not None}) > 1:
            return None  # one index type for all (Tind)
        given = [None if v is None else [int(i) for i in v] for v in indices]
    starts, ends, axes, steps = given
    if starts is None or ends is None or len(starts) != len(ends) or data.ndim == 0:
        return None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if len(axes) != len(starts) or len(steps) != len(starts) or 0 in steps:
        return None
    normalised = [normal_axis(axis, data.ndim, negative=version >= 11) for axis in axes]
    if len(set(normalised)) != len(normalised):
        return None
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(normalised, starts, ends, steps, strict=True):
        index[axis] = _clamped(start, end, step, data.shape[axis])
    return data[tuple(index)]


def _clamped(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice selecting what ONNX's clamped start/end/step select along `dim`."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if dim == 0:
        return slice(0, 0)
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _where(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Elementwise choice by a bool condition, the three broadcast together."""
    if len(inputs) != 3 or any(v is None for v in inputs):
        return None
    condition, x, y = inputs
    if condition.dtype != np.bool_ or x.dtype != y.dtype:
        return None
    return np.where(condition, x, y).astype(x.dtype)


def _expand(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """Broadcast `input` against the int64 `shape` (both ways: a 1 in `shape` keeps the dim)."""
    data, shape = inputs
    if shape is None or shape.ndim != 1 or shape.dtype != np.int64 or np.any(shape < 0):
        return None
    target = np.broadcast_shapes(data.shape, tuple(int(dim) for dim in shape))
    if int(np.prod(target, dtype=object)) > MAX_COMPUTED:
        return None
    return np.broadcast_to(data, target).copy()


_PLAIN_TYPES = frozenset(
    np.dtype(t)
    for t in (
        *(np.bool_, np.float16, np.float32, np.float64),
        *(np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64),
    )
)


def _constant_of_shape(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """A tensor of the int64 `shape` (non-negative dims; empty: a scalar) filled with the
    one-element `value` (float32 0 when absent), of its type; types numpy holds plainly only."""
    (shape,) = inputs
    if shape.ndim != 1 or shape.dtype != np.int64 or np.any(shape < 0):
        return None
    value = attrs.get("value")
    if value is None:
        fill = np.zeros(1, np.float32)
    elif isinstance(value, onnx.TensorProto):
        fill = onnx.numpy_helper.to_array(value)
    else:
        fill = np.asarray(getattr(value, "values", value))
    if fill.size != 1 or fill.dtype not in _PLAIN_TYPES:
        return None
    dims = tuple(int(dim) for dim in shape)
    if int(np.prod(dims, dtype=object)) > MAX_COMPUTED:
        return None
    return np.full(dims, fill.reshape(()), fill.dtype)


def _transpose(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
    """The dims permuted by `perm` (reversed when absent), which must permute all of them."""
    (data,) = inputs
    perm = ints_attr(attrs, "perm")
    perm = list(range(data.ndim))[::-1] if perm is None else perm
    if sorted(perm) != list(range(data.ndim)):
        return None
    return np.transpose(data, perm).copy()


_TABLE: dict[str, tuple[frozenset[int], Callable[[int, dict, Inputs], np.ndarray | None]]] = {
    **{op: (frozenset({1, 6, 7, 13, 14}), _arithmetic(op)) for op in ("Add", "Sub", "Mul", "Div")},
    "Cast": (frozenset({6, 9, 13, 19, 21, 23, 24, 25}), _cast),
    "Identity": (frozenset({1, 13, 14, 16, 19, 21, 23, 24, 25}), _identity),
    "Gather": (frozenset({1, 11, 13}), _gather),
    "Concat": (frozenset({4, 11, 13}), _concat),
    "Unsqueeze": (frozenset({1, 11, 13, 21, 23, 24, 25}), _unsqueeze),
    "Squeeze": (frozenset({1, 11, 13, 21, 23, 24, 25}), _squeeze),
    "Range": (frozenset({11, 27}), _range),
    "Flatten": (frozenset({1, 9, 11, 13, 21, 23, 24, 25}), _flatten),
    "Reshape": (frozenset({5, 13, 14, 19, 21, 23, 24, 25}), _reshape),
    "ReduceProd": (frozenset({1, 11, 13, 18}), reduction("ReduceProd")),
    "ReduceSum": (frozenset({1, 11, 13}), reduction("ReduceSum")),
    "ReduceMean": (frozenset({1, 11, 13, 18}), reduction("ReduceMean")),
    "ReduceSumSquare": (frozenset({1, 11, 13, 18}), reduction("ReduceSumSquare")),
    "ReduceMax": (frozenset({1, 11, 12, 13, 18, 20}), reduction("ReduceMax")),
    "ReduceMin": (frozenset({1, 11, 12, 13, 18, 20}), reduction("ReduceMin")),
    "Neg": (frozenset({6, 13}), _neg),
    "Abs": (frozenset({6, 13}), _abs),
    "Mod": (frozenset({10, 13}), _mod),
    "Equal": (frozenset({7, 11, 13, 19}), _equal),
    "Slice": (frozenset({1, 10, 11, 13}), _slice),
    "Where": (frozenset({9, 16}), _where),
    "Expand": (frozenset({8, 13}), _expand),
    "ConstantOfShape": (frozenset({9, 20, 21, 23, 24, 25}), _constant_of_shape),
    "Transpose": (frozenset({1, 13, 21, 23, 24, 25}), _transpose),
}
FOLDED_OPS = frozenset(_TABLE)
