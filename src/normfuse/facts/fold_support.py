"""What every constant fold shares: the value types folded, and attributes and axes read
exactly as an operator's version defines them (a wrong type or an axis out of range raises)."""

from __future__ import annotations

import numpy as np

Inputs = list[np.ndarray | None]  # None: an omitted optional input

FLOAT_DTYPES = (np.float16, np.float32, np.float64)
INT_DTYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def int_attr(attrs: dict, name: str) -> int:
    """Integer attribute `name` (TypeError for another type)."""
    value = attrs[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(name)
    return value


def ints_attr(attrs: dict, name: str) -> list[int] | None:
    """Integer-list attribute `name`, None when absent (TypeError for another type)."""
    if name not in attrs:
        return None
    value = attrs[name]
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(name)
    return list(value)


def ints_input(value: np.ndarray | None) -> list[int] | None:
    """A 1-D int64 input as a list, None when omitted (TypeError otherwise)."""
    if value is None:
        return None
    if value.ndim != 1 or value.dtype != np.int64:
        raise TypeError("axes")
    return [int(v) for v in value]


def normal_axis(axis: int, rank: int, negative: bool) -> int:
    """`axis` in [0, rank); negative ones only where the version allows them."""
    if axis < 0 and not negative:
        raise ValueError(axis)
    if not -rank <= axis < rank:
        raise ValueError(axis)
    return axis % rank


def fits(values: np.ndarray, dtype: np.dtype) -> bool:
    """Whether every integer of `values` is representable in integer type `dtype`."""
    info = np.iinfo(dtype)
    return all(info.min <= int(v) <= info.max for v in np.asarray(values).flat)


def axes_of(version: int, attrs: dict, inputs: Inputs, since_input: int) -> list[int] | None:
    """Axes from the attribute (before `since_input`) or the second input (from it); None when
    not given. An axes input where the version has the attribute is invalid (ValueError)."""
    if version >= since_input:
        return ints_input(inputs[1] if len(inputs) > 1 else None)
    if len(inputs) > 1:
        raise ValueError("axes is an attribute at this version")
    return ints_attr(attrs, "axes")
