"""Reduce* folds that are exact in every order of evaluation: integers without overflow, float
sums, squares and products only where every partial result is representable."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from normfuse.facts.fold_support import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Inputs,
    axes_of,
    fits,
    int_attr,
    normal_axis,
)

# The significand bits of each float type: integers of up to this many bits are exact.
_PRECISION = {np.dtype(np.float16): 11, np.dtype(np.float32): 24, np.dtype(np.float64): 53}
# Reduce* versions from which `axes` is an input (and `noop_with_empty_axes` exists).
_AXES_INPUT = {"ReduceSum": 13}


def reduction(op: str) -> Callable[[int, dict, Inputs], np.ndarray | None]:
    """The fold of Reduce* operator `op`."""

    def implementation(version: int, attrs: dict, inputs: Inputs) -> np.ndarray | None:
        """`op` over `axes` (attribute before the version taking them as an input), all axes
        when none are given (an empty axes input included) unless `noop_with_empty_axes`
        makes it the identity (for ReduceSumSquare: the squares); `keepdims`. Only results
        that are exact in every order of evaluation are folded (see `_reduce`)."""
        data = inputs[0]
        if data.size == 0 or data.dtype.type not in FLOAT_DTYPES + INT_DTYPES:
            return None  # a reduction over an empty set is undefined
        axes = axes_of(version, attrs, inputs, since_input=_AXES_INPUT.get(op, 18))
        if not axes:
            axes = [] if attrs.get("noop_with_empty_axes") else list(range(data.ndim))
        normalised = {normal_axis(a, data.ndim, negative=version >= 11) for a in axes}
        if len(normalised) != len(axes):
            return None
        if not normalised:  # the identity: each element its own row
            rows, shape = data.reshape(-1, 1), list(data.shape)
        else:
            moved = np.moveaxis(data, sorted(normalised), range(-len(normalised), 0))
            rows = moved.reshape(-1, int(np.prod(moved.shape[data.ndim - len(normalised) :])))
            keepdims = int_attr(attrs, "keepdims")
            shape = [
                1 if i in normalised else dim
                for i, dim in enumerate(data.shape)
                if keepdims or i not in normalised
            ]
        results = [_reduce(op, row) for row in rows]
        if any(result is None for result in results):
            return None
        return np.array(results, dtype=data.dtype).reshape(shape)

    return implementation


def _reduce(op: str, row: np.ndarray):
    """One reduced value of `row`, exactly, or None. Integers: exact, declined on overflow (and
    a mean that does not divide). Floats: max and min of rows without NaN or -0 (where
    runtimes differ); sums, squares and products only where every partial result of any order
    is exactly representable (so any order gives the exact value); a mean only where the exact
    mean is representable and equals the sum times the rounded 1/n."""
    if op in ("ReduceMax", "ReduceMin"):
        if row.dtype.type in FLOAT_DTYPES and (
            np.any(np.isnan(row)) or np.any(np.signbit(row) & (row == 0))
        ):
            return None
        return row.max() if op == "ReduceMax" else row.min()
    if row.dtype.type in INT_DTYPES:
        return _reduce_integers(op, [int(v) for v in row], row.dtype)
    if not np.all(np.isfinite(row)):
        return None
    if op == "ReduceProd":
        return _exact_product(row)
    if op == "ReduceSumSquare":
        squares = np.square(row)
        if any(
            Fraction(float(s)) != Fraction(float(v)) ** 2 for s, v in zip(squares, row, strict=True)
        ):
            return None
        row = squares
    elif np.any(np.signbit(row) & (row == 0)):
        return None  # an all -0 sum is +0 from the reference, -0 from ONNX Runtime
    total = _exact_sum(row)
    if total is None or op != "ReduceMean":
        return total
    mean = Fraction(float(total)) / row.size
    rounded = row.dtype.type(float(mean))
    with np.errstate(all="ignore"):
        stepped = total * row.dtype.type(1.0 / row.size)
    return rounded if Fraction(float(rounded)) == mean and stepped == rounded else None


def _reduce_integers(op: str, values: list[int], dtype: np.dtype):
    if op == "ReduceProd":
        result = 1
        for value in values:
            result *= value
    elif op == "ReduceSumSquare":
        result = sum(value * value for value in values)
    else:
        result = sum(values)
        if op == "ReduceMean":
            if result % len(values):
                return None
            result //= len(values)
    return dtype.type(result) if fits([result], dtype) else None


def _dyadic(value: float) -> tuple[int, int]:
    """(m, e) with value = m·2^e and m odd (0: (0, 0))."""
    numerator, denominator = float(value).as_integer_ratio()
    exponent = -(denominator.bit_length() - 1)
    while numerator and numerator % 2 == 0:
        numerator, exponent = numerator // 2, exponent + 1
    return numerator, exponent


def _exact_sum(row: np.ndarray):
    """The sum of finite `row` where every partial sum of any subset is exact: all values are
    multiples of the smallest one's last bit, with the magnitudes summing to at most 2^p of
    those units (p the type's precision) and to a finite value."""
    parts = [_dyadic(v) for v in row if v != 0]
    if not parts:
        return row.dtype.type(0.0)
    unit = min(exponent for _, exponent in parts)
    units = sum(abs(m) << (exponent - unit) for m, exponent in parts)
    if units > 1 << _PRECISION[row.dtype] or Fraction(units) * Fraction(2) ** unit > Fraction(
        float(np.finfo(row.dtype).max)
    ):
        return None
    return row.dtype.type(float(sum(Fraction(float(v)) for v in row)))


def _exact_product(row: np.ndarray):
    """The product of finite `row` where every partial product of any subset is exact: the odd
    significands multiply to at most 2^p, the smallest subset's exponent reaches no lower than
    the smallest subnormal and the largest subset stays finite. A zero gives a signed zero."""
    finfo = np.finfo(row.dtype)
    parts = [_dyadic(v) for v in row if v != 0]
    significand = 1
    for m, _ in parts:
        significand *= abs(m)
    lowest = sum(min(exponent, 0) for _, exponent in parts)
    highest = sum(max(exponent, 0) for _, exponent in parts)
    smallest = Fraction(float(finfo.smallest_subnormal))
    if significand > 1 << _PRECISION[row.dtype] or Fraction(2) ** lowest < smallest:
        return None
    if significand * Fraction(2) ** highest > Fraction(float(finfo.max)):
        return None
    exact = Fraction(1)
    for value in row:
        exact *= Fraction(float(value))
    negative = bool(np.sum(np.signbit(row)) % 2)
    magnitude = row.dtype.type(float(abs(exact)))
    return -magnitude if negative else magnitude
