"""The constant folders against `onnx.reference.ReferenceEvaluator` and ONNX Runtime.

Each case is one node on constant inputs in a tiny model at one opset: the folders' answer
(`static_value`, which asks the `ConstantReader` first) must equal, bit for bit, what the
reference evaluator and ONNX Runtime (optimisations disabled; where it has the kernel) compute.
A case the folder must decline names why (`DECLINES`): an invalid node, a value ONNX leaves
undefined, or one on which the runtimes disagree. Every other case must fold.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from normfuse.facts.constants import ConstantReader, reduce_axes
from normfuse.facts.facts import ScopeFacts
from normfuse.facts.folding import FOLDED_OPS
from tests.helpers import assert_same_numerics, session

# Edge values (inf, NaN, overflow to inf) are the point: the reference warns about them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Why a case is declined (its `declined` field names one of these).
DECLINES = {
    "overflow": "integer overflow: ONNX Runtime wraps, the result is not the exact value",
    "zero-division": "integer division by zero is undefined",
    "legacy-broadcast": "before opset 7 only equal shapes (broadcast/axis attributes not read)",
    "float-to-int": "a float truncated outside the integer type's range: ONNX leaves it undefined",
    "inexact-int-to-float": "an integer the float type does not hold exactly",
    "double-rounding": "ONNX Runtime narrows float64 through float32; the reference directly",
    "invalid": "the node is invalid at its opset (an attribute/input/value it does not define)",
    "empty-squeeze-axes": "an empty axes input: the reference squeezes nothing, ORT everything",
    "inexact-reduction": "a float sum, product or mean whose rounding depends on the runtime's "
    "order (or an integer mean that does not divide)",
    "signed-zero": "a zero whose sign ONNX or the runtimes leave open (an all -0 sum, fmod(-0, y))",
    "nan-reduction": "a max or min over NaN: the reference propagates it, ONNX Runtime skips it",
    "empty-reduction": "a reduction over an empty set is undefined",
    "non-finite": "an infinite operand of Mod (NaN by the C rule; not folded)",
    "float-range": "a float Range accumulates rounding as the runtime does",
    "unsupported-version": "a version ONNX Runtime has no kernel for (Concat before opset 4)",
}


@dataclass(frozen=True)
class Case:
    """One node `op` at `opset` with `attrs` on constant `inputs` (None: omitted)."""

    op: str
    opset: int
    inputs: tuple
    attrs: dict = field(default_factory=dict)
    declined: str | None = None

    @property
    def id(self) -> str:
        shapes = ",".join("-" if v is None else f"{v.dtype}{list(v.shape)}" for v in self.inputs)
        attrs = ",".join(f"{k}={_shown(v)}" for k, v in sorted(self.attrs.items()))
        return f"{self.op}{self.opset}({shapes}){attrs}"


def _shown(value: object) -> str:
    if isinstance(value, onnx.TensorProto):
        array = numpy_helper.to_array(value)
        return f"{array.dtype}{list(array.shape)}:{array.reshape(-1).tolist()}"
    return str(value)


def _model(case: Case) -> onnx.ModelProto:
    names = ["" if v is None else f"in{i}" for i, v in enumerate(case.inputs)]
    initializers = [
        numpy_helper.from_array(v, n) for v, n in zip(case.inputs, names, strict=True) if n
    ]
    written = {k: v for k, v in case.attrs.items() if v != []}
    node = helper.make_node(case.op, names, ["y"], **written)
    node.attribute.extend(  # an empty list has no type helper.make_node can infer
        helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS)
        for k, v in case.attrs.items()
        if v == []
    )
    graph = helper.make_graph(
        [node], "case", [], [helper.make_empty_tensor_value_info("y")], initializers
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", case.opset)], ir_version=10
    )


def _folded(model: onnx.ModelProto, opset: int) -> np.ndarray | None:
    """The fold of `y` by both readers, which must agree: the shape-arithmetic reader
    (`static_value`) and the constant reader that epsilons and exponents are read through; each
    gives an array (a 0-d result included), never a numpy scalar."""
    graph = gs.import_onnx(model)
    reader = ConstantReader(None, opset=opset)
    ours = ScopeFacts(reader, {}).static_value(graph.tensors()["y"])
    constant = ConstantReader(None, opset=opset).value(gs.import_onnx(model).tensors()["y"])
    for value in (ours, constant):
        assert value is None or isinstance(value, np.ndarray), f"a {type(value)}, not an array"
    if ours is not None and constant is not None:
        assert _same(ours, constant), f"static_value {ours!r}, ConstantReader {constant!r}"
    return ours


def _reference(model: onnx.ModelProto) -> np.ndarray | None:
    try:
        return np.asarray(ReferenceEvaluator(model).run(None, {})[0])
    except Exception:  # the reference refuses the node: nothing to fold
        return None


def _runtime(model: onnx.ModelProto) -> np.ndarray | None:
    try:
        return np.asarray(session(model).run(None, {})[0])
    except Exception:  # no kernel for this type or version: the reference alone decides
        return None


def _same(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Same shape and bits (any NaN equals any NaN; ORT hands float8 back as raw bytes)."""
    if ours.shape != theirs.shape or ours.dtype.itemsize != theirs.dtype.itemsize:
        return False
    if ours.dtype.kind != "f" and ours.dtype not in _FLOAT8:
        return ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    bits = np.dtype(f"u{ours.dtype.itemsize}")
    theirs = theirs.view(ours.dtype) if theirs.dtype != ours.dtype else theirs
    nan = np.isnan(ours.astype(np.float32)) & np.isnan(theirs.astype(np.float32))
    return bool(np.all(nan | (ours.view(bits) == theirs.view(bits))))


_FLOAT8 = {
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
}


def a(values, dtype) -> np.ndarray:
    return np.array(values, dtype=dtype)


I64 = np.int64


# --- the cases -----------------------------------------------------------------------------


def _arithmetic_cases() -> list[Case]:
    cases = []
    special = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-30, 3e38, 65504.0]
    for op, opset, dtype in itertools.product(
        ("Add", "Sub", "Mul", "Div"), (6, 7, 13, 14), (np.float16, np.float32, np.float64)
    ):
        left = a(special, dtype)
        right = a(special[::-1], dtype)
        cases.append(Case(op, opset, (left, right)))
        broadcast = (a([[1.0], [2.0]], dtype), a([3.0, 0.5, -1.0], dtype))
        cases.append(Case(op, opset, broadcast, declined="legacy-broadcast" if opset < 7 else None))
        if opset >= 7:  # 0-d floats: an epsilon written as Add(5e-6, 5e-6)
            cases.append(Case(op, opset, (a(5e-6, dtype), a(-2e-5, dtype))))
    for op, dtype in itertools.product(("Add", "Sub", "Mul", "Div"), (np.int32, np.int64, np.int8)):
        left, right = a([-7, 7, -8, 9, 0], dtype), a([2, -2, -3, 3, 5], dtype)
        cases.append(Case(op, 14, (left, right)))
        cases.append(Case(op, 13, (a([[6], [-6]], dtype), a([4, -5], dtype))))
        cases.append(Case(op, 14, (a(-9, dtype), a(4, dtype))))  # scalars (a dim, a count)
    cases += [
        Case("Div", 14, (a([7, 1], I64), a([0, 1], I64)), declined="zero-division"),
        Case("Add", 14, (a([100], np.int8), a([100], np.int8)), declined="overflow"),
        Case("Mul", 14, (a([2**62], I64), a([4], I64)), declined="overflow"),
        Case("Sub", 14, (a([1], np.uint8), a([2], np.uint8)), declined="overflow"),
        Case("Add", 14, (a([1.0], np.float32), a([1], I64)), declined="invalid"),
        Case("Add", 14, (a([2, 3], np.uint32), a([5, 6], np.uint32))),
    ]
    return cases


def _cast_cases() -> list[Case]:
    cases = []
    floats = [0.0, -0.0, 1.0 / 3, -2.5, 65519.0, 65520.0, 1e-8, 6e-8, np.inf, -np.inf, np.nan]
    for opset, source, target in itertools.product(
        (6, 13, 19, 21),
        (np.float16, np.float32, np.float64),
        (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE),
    ):
        cases.append(Case("Cast", opset, (a(floats, source),), {"to": target}))
    ints = [0, 1, -1, 127, -128, 200, 272, 65504, 2**24 + 1]
    for source, target in itertools.product(
        (np.int32, np.int64, np.uint8),
        (TensorProto.INT8, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8),
    ):
        # out of range, integers keep their low bits (two's complement): 272 -> 16 in uint8
        values = [v % 256 for v in ints] if source is np.uint8 else ints
        cases.append(Case("Cast", 13, (a(values, source),), {"to": target}))
        cases.append(Case("Cast", 13, (a([0, 5, 100], source),), {"to": target}))
    wide = a([2**40 + 5, -(2**63), 2**31, -1], I64)
    for target in (TensorProto.UINT32, TensorProto.INT16, TensorProto.UINT64, TensorProto.INT32):
        cases.append(Case("Cast", 21, (wide,), {"to": target}))
    cases.append(Case("Cast", 13, (a(272, I64),), {"to": TensorProto.UINT8}))  # 0-d
    cases += _float_to_int_cases()
    for target, exact in ((TensorProto.FLOAT, [0, -3, 2**24]), (TensorProto.FLOAT16, [7, 2048])):
        cases.append(Case("Cast", 13, (a(exact, I64),), {"to": target}))
        cases.append(
            Case(
                "Cast", 13, (a([2**24 + 1], I64),), {"to": target}, declined="inexact-int-to-float"
            )
        )
    cases.append(
        Case(
            "Cast",
            13,
            (a([1 + 2**-11 + 2**-40], np.float64),),
            {"to": TensorProto.FLOAT16},
            declined="double-rounding",
        )
    )
    eight = [0.0, -0.0, 1.0625, 0.3, 240.0, 448.0, 500.0, 6e4, 1e6, np.inf, -np.inf, np.nan, 1e-5]
    for target, saturate, source in itertools.product(
        (
            TensorProto.FLOAT8E4M3FN,
            TensorProto.FLOAT8E4M3FNUZ,
            TensorProto.FLOAT8E5M2,
            TensorProto.FLOAT8E5M2FNUZ,
        ),
        (0, 1),
        (np.float16, np.float32),
    ):
        cases.append(Case("Cast", 19, (a(eight, source),), {"to": target, "saturate": saturate}))
    for dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        values = a(
            [0.0, 1.0, -448.0 if dtype is ml_dtypes.float8_e4m3fn else -57344.0, np.nan], dtype
        )
        cases.append(Case("Cast", 19, (values,), {"to": TensorProto.FLOAT}))
    cases += [
        Case(
            "Cast",
            19,
            (a([1 + 2**-4 + 2**-40], np.float64),),
            {"to": TensorProto.FLOAT8E4M3FN},
            declined="double-rounding",
        ),
        Case(
            "Cast",
            19,
            (a([0.5, 3.0], np.float64),),
            {"to": TensorProto.FLOAT8E4M3FN, "saturate": 1},
        ),
        Case(
            "Cast",
            13,
            (a([1.0], np.float32),),
            {"to": TensorProto.FLOAT, "saturate": 1},
            declined="invalid",
        ),
    ]
    return cases


def _float_to_int_cases() -> list[Case]:
    """Toward zero (-16.7 -> -16, 16.9 -> 16, -0.9 -> 0), each value in the target's range;
    NaN, infinities and truncations outside the range are undefined: declined."""
    signed = [-16.7, 16.9, -0.5, -0.9, 0.0, -0.0, 1.5, -1.5, 127.9, -128.9]
    unsigned = [0.0, -0.0, -0.9, 16.9, 255.9, 1.5]
    targets = [
        (TensorProto.INT8, signed),
        (TensorProto.INT32, signed),
        (TensorProto.INT64, signed),
        (TensorProto.UINT8, unsigned),
        (TensorProto.UINT16, unsigned),
    ]
    cases = []
    for opset, source, (target, values) in itertools.product(
        (6, 13, 19, 21), (np.float16, np.float32, np.float64), targets
    ):
        cases.append(Case("Cast", opset, (a(values, source),), {"to": target}))
    cases.append(Case("Cast", 18, (a(-16.7, np.float32),), {"to": TensorProto.INT64}))  # 0-d
    for values, source, target in [
        ([1.0, np.nan], np.float32, TensorProto.INT64),
        ([np.inf], np.float32, TensorProto.INT32),
        ([256.0], np.float32, TensorProto.UINT8),
        ([-1.0], np.float16, TensorProto.UINT8),
        ([128.0], np.float64, TensorProto.INT8),
        ([2.0**63], np.float64, TensorProto.INT64),
    ]:
        cases.append(Case("Cast", 13, (a(values, source),), {"to": target}, "float-to-int"))
    return cases


def _shape_cases() -> list[Case]:
    data = np.arange(24, dtype=I64).reshape(2, 3, 4)
    cases = [Case("Identity", opset, (data,)) for opset in (1, 13, 16, 21)]
    for opset, axis, indices in itertools.product(
        (1, 11, 13), (0, 1, -1), (a(1, I64), a([0, -1], I64), a([[2, 0]], np.int32), a([-2], I64))
    ):
        size = data.shape[axis]
        in_range = bool(np.all(indices < size) and np.all(indices >= -size))
        negative = bool(np.any(indices < 0))
        declined = "invalid" if (negative and opset < 11) or not in_range else None
        cases.append(Case("Gather", opset, (data, indices), {"axis": axis}, declined))
    cases.append(Case("Gather", 13, (data, a([4], I64)), {"axis": 2}, declined="invalid"))
    cases.append(Case("Gather", 13, (a([5, 6, 7], I64), a(-3, I64))))
    for opset, axis in itertools.product((1, 4, 11, 13), (None, 0, 1, -1)):
        attrs = {} if axis is None else {"axis": axis}
        invalid = axis is None or (axis == -1 and opset < 11)
        declined = "unsupported-version" if opset < 4 else "invalid" if invalid else None
        cases.append(Case("Concat", opset, (data, data), attrs, declined))
        unequal = (data, data[:, :1])  # only axis 1 is valid
        cases.append(Case("Concat", opset, unequal, attrs, "invalid" if axis != 1 else declined))
    cases.append(
        Case("Concat", 13, (a([1], I64), a([2], np.int32)), {"axis": 0}, declined="invalid")
    )
    cases += _squeeze_cases(data)
    for opset, axis in itertools.product((1, 9, 11, 13, 21), (0, 1, 3, -1, 4)):
        declined = "invalid" if (axis < 0 and opset < 11) or axis == 4 else None
        cases.append(Case("Flatten", opset, (data,), {"axis": axis}, declined))
    cases += _reshape_cases(data)
    cases += _range_cases()
    return cases


def _squeeze_cases(data: np.ndarray) -> list[Case]:
    cases = []
    ones = data.reshape(1, 2, 1, 12)
    for opset, axes in itertools.product((1, 11, 13, 21), (None, [0], [-2], [0, 2], [0, 0], [1])):
        declined = None
        if axes is not None and ((min(axes) < 0 and opset < 11) or axes in ([0, 0], [1])):
            declined = "invalid"
        cases.append(Case("Squeeze", opset, *_axes_form(ones, axes, opset), declined))
        unsqueeze_axes = axes or [0]
        unsqueeze_declined = "invalid" if (min(unsqueeze_axes) < 0 and opset < 11) else None
        if unsqueeze_axes == [0, 0]:
            unsqueeze_declined = "invalid"
        cases.append(
            Case("Unsqueeze", opset, *_axes_form(data, unsqueeze_axes, opset), unsqueeze_declined)
        )
    cases.append(Case("Unsqueeze", 13, (a(5, I64), a([-1], I64))))
    cases.append(Case("Squeeze", 13, (ones, a([], I64)), declined="empty-squeeze-axes"))
    cases.append(Case("Unsqueeze", 13, (data,), {"axes": [0]}, declined="invalid"))
    cases.append(Case("Squeeze", 11, (ones, a([0], I64)), declined="invalid"))
    return cases


def _axes_form(data: np.ndarray, axes: list[int] | None, opset: int) -> tuple[tuple, dict]:
    if axes is None:
        return (data,), {}
    if opset >= 13:
        return (data, a(axes, I64)), {}
    return (data,), {"axes": axes}


def _reshape_cases(data: np.ndarray) -> list[Case]:
    cases = []
    for opset, target in itertools.product(
        (5, 13, 14, 19, 21), ([6, 4], [0, -1], [-1], [2, 0, 2, 2], [3, -1, -1], [4, 0, 2, 3])
    ):
        declined = "invalid" if target in ([3, -1, -1], [4, 0, 2, 3]) else None
        cases.append(Case("Reshape", opset, (data, a(target, I64)), {}, declined))
    empty = np.zeros((0, 3), np.float32)
    cases += [
        Case("Reshape", 14, (empty, a([3, 0], I64)), {"allowzero": 1}),
        Case("Reshape", 14, (empty, a([0, 3], I64)), {"allowzero": 0}),
        Case("Reshape", 14, (data, a([0, -1], I64)), {"allowzero": 1}, declined="invalid"),
        Case("Reshape", 13, (data, a([0, -1], I64)), {"allowzero": 1}, declined="invalid"),
        Case("Reshape", 14, (data, a([4, 6], np.int32)), declined="invalid"),
    ]
    return cases


def _range_cases() -> list[Case]:
    cases = []
    for dtype, (start, limit, delta) in itertools.product(
        (np.int16, np.int32, np.int64), ((0, 5, 1), (3, 9, 3), (10, 4, -2), (5, 5, 1), (5, 0, 2))
    ):
        cases.append(Case("Range", 11, (a(start, dtype), a(limit, dtype), a(delta, dtype))))
    cases += [
        Case(
            "Range",
            11,
            (a(1.0, np.float32), a(2.0, np.float32), a(0.25, np.float32)),
            declined="float-range",
        ),
        Case("Range", 11, (a(0, I64), a(3, I64), a(0, I64)), declined="invalid"),
        Case("Range", 11, (a(0, I64), a(3, np.int32), a(1, I64)), declined="invalid"),
    ]
    return cases


def _reduce_prod_cases() -> list[Case]:
    data = a([[1, 2, 3], [4, 5, -6]], I64)
    cases = []
    for opset, axes, keepdims in itertools.product(
        (1, 11, 13, 18), (None, [0], [-1], [0, 1], []), (0, 1)
    ):
        attrs = {"keepdims": keepdims}
        declined = "invalid" if axes and min(axes) < 0 and opset < 11 else None
        if axes is None:
            inputs = (data,)
        elif opset >= 18:
            inputs = (data, a(axes, I64))
        else:
            inputs, attrs = (data,), {**attrs, "axes": axes}
        cases.append(Case("ReduceProd", opset, inputs, attrs, declined))
        if opset >= 18:
            for noop in (0, 1):
                cases.append(
                    Case(
                        "ReduceProd",
                        opset,
                        inputs,
                        {**attrs, "noop_with_empty_axes": noop},
                        declined,
                    )
                )
    cases += [
        Case("ReduceProd", 18, (data, None), {"noop_with_empty_axes": 1}),
        Case("ReduceProd", 13, (data,), {"noop_with_empty_axes": 1}, declined="invalid"),
        Case("ReduceProd", 13, (data, a([0], I64)), declined="invalid"),
        Case("ReduceProd", 18, (data,), {"axes": [0]}, declined="invalid"),
        Case("ReduceProd", 18, (a([2**40, 2**40], I64),), declined="overflow"),
        Case("ReduceProd", 18, (a([[1.1, 1.3, 1.7]], np.float32),), declined="inexact-reduction"),
        Case("ReduceProd", 18, (data, a([0, 0], I64)), declined="invalid"),
    ]
    return cases


# Every Reduce* the folder folds: where its version takes axes as an input (and defines
# noop_with_empty_axes).
REDUCTIONS = {
    "ReduceSum": 13,
    "ReduceMean": 18,
    "ReduceMax": 18,
    "ReduceMin": 18,
    "ReduceSumSquare": 18,
    "ReduceProd": 18,
}
# [2, 4] values whose sums, squares, products and means (over 2, 4 or 8) are exact in any order
REDUCED = {
    np.float32: [[1.5, -2.25, 2.0, 3.0], [0.5, 4.0, -1.0, 0.75]],
    np.float16: [[1.5, -2.25, 2.0, 3.0], [0.5, 4.0, -1.0, 0.75]],
    np.float64: [[1.5, -2.25, 2.0, 3.0], [0.5, 4.0, -1.0, 0.75]],
    np.int32: [[2, 6, -4, 8], [6, -2, 4, 4]],
    np.int64: [[2, 6, -4, 8], [6, -2, 4, 4]],
}


def _reduction_cases() -> list[Case]:
    """Each Reduce* over every axes form of each version (absent, an attribute or an input,
    empty, negative, repeated), keepdims 0/1 and noop_with_empty_axes 0/1, on exact values of
    each type; then the values whose result the runtimes may compute otherwise."""
    cases = []
    for op, since in REDUCTIONS.items():
        for opset, dtype, axes, keepdims in itertools.product(
            (1, 11, 13, 18), REDUCED, (None, [], [0], [-1], [0, 1], [1, 1]), (0, 1)
        ):
            if op == "ReduceSumSquare" and dtype is np.int32:
                continue  # the reference evaluator returns int64 for int32 (ORT: int32)
            data = a(REDUCED[dtype], dtype)
            attrs = {"keepdims": keepdims}
            repeated = axes is not None and len(set(axes)) != len(axes)
            early_negative = axes is not None and axes and min(axes) < 0 and opset < 11
            declined = "invalid" if repeated or early_negative else None
            if opset < since:
                attrs = attrs if axes is None else {**attrs, "axes": axes}
                cases.append(Case(op, opset, (data,), attrs, declined))
                continue
            inputs = (data,) if axes is None else (data, a(axes, I64))
            for noop in (None, 0, 1):
                noop_attrs = attrs if noop is None else {**attrs, "noop_with_empty_axes": noop}
                cases.append(Case(op, opset, inputs, noop_attrs, declined))
    small = {np.uint8: [[2, 6, 4, 8], [6, 2, 4, 255]], np.int8: [[2, -6, 4, 8], [-128, 2, 4, 127]]}
    for op, opset, dtype, axes in itertools.product(
        ("ReduceMax", "ReduceMin"), (12, 13, 18, 20), small, (None, [0], [-1])
    ):  # uint8 and int8 from opset 12
        data = a(small[dtype], dtype)
        if axes is None:
            cases.append(Case(op, opset, (data,), {"keepdims": 0}))
        elif opset >= 18:
            cases.append(Case(op, opset, (data, a(axes, I64))))
        else:
            cases.append(Case(op, opset, (data,), {"axes": axes}))
    data = a(REDUCED[np.float32], np.float32)
    cases += [
        Case("ReduceMax", 20, (a([[1, 5, 3]], np.uint8), a([-1], I64))),
        Case("ReduceMin", 12, (a([[1, 5, 3]], np.int8),), {"axes": [1], "keepdims": 0}),
        Case("ReduceMean", 18, (a([[1, 1, 2]], np.int64),), declined="inexact-reduction"),
        Case("ReduceMean", 18, (a([[1.0, 1.0, 2.0]], np.float32),), declined="inexact-reduction"),
        Case("ReduceSum", 13, (a([1e8, 1.0, -1e8], np.float32),), declined="inexact-reduction"),
        Case("ReduceSum", 13, (a([[0.1, 0.2, 0.3]], np.float32),), declined="inexact-reduction"),
        Case("ReduceSumSquare", 18, (a([0.1, 1.0], np.float32),), declined="inexact-reduction"),
        Case("ReduceSum", 13, (a([-0.0, -0.0], np.float32),), declined="signed-zero"),
        Case("ReduceMax", 18, (a([-0.0, 0.0], np.float32),), declined="signed-zero"),
        Case("ReduceMax", 18, (a([1.0, np.nan], np.float32),), declined="nan-reduction"),
        Case("ReduceMin", 18, (a([np.nan, 1.0], np.float16),), declined="nan-reduction"),
        Case("ReduceSum", 13, (a([2**62, 2**62], I64),), declined="overflow"),
        Case("ReduceSumSquare", 18, (a([2**16], np.int32),), declined="overflow"),
        Case(
            "ReduceSum", 13, (np.zeros((0, 3), np.float32), a([0], I64)), declined="empty-reduction"
        ),
        Case("ReduceSum", 11, (data, a([0], I64)), declined="invalid"),
        Case("ReduceMax", 18, (data,), {"axes": [0]}, declined="invalid"),
        Case("ReduceSum", 11, (data,), {"noop_with_empty_axes": 1}, declined="invalid"),
    ]
    return cases


def _elementwise_cases() -> list[Case]:
    """Neg, Abs, Mod (fmod 0 and 1, negative operands, broadcast) and Equal on each type."""
    cases = []
    specials = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 65504.0]
    for op, opset, dtype in itertools.product(
        ("Neg", "Abs"), (6, 13), (np.float16, np.float32, np.float64, np.int8, np.int32, I64)
    ):
        values = specials if dtype in (np.float16, np.float32, np.float64) else [-7, 0, 7, 127]
        cases.append(Case(op, opset, (a(values, dtype),)))
    for op, dtype in itertools.product(("Neg", "Abs"), (np.float32, I64)):
        cases.append(Case(op, 13, (a(-16, dtype),)))  # 0-d: a divisor, a dim
    cases += [
        Case("Abs", 13, (a([0, 7, 255], np.uint8),)),
        Case("Neg", 13, (a([1, 3], np.uint8),), declined="invalid"),
        Case("Neg", 13, (a([-(2**63), 3], I64),), declined="overflow"),
        Case("Abs", 13, (a([-128, 3], np.int8),), declined="overflow"),
    ]
    left, right = [-33, 33, -1, 7, -7, 0, -34], [17, -17, 17, -3, 3, 5, 17]
    for opset, dtype, fmod in itertools.product(
        (10, 13), (np.int8, np.int32, I64, np.float16, np.float32, np.float64), (0, 1)
    ):
        floating = dtype in (np.float16, np.float32, np.float64)
        declined = "invalid" if floating and not fmod else None
        pairs = [(a(left, dtype), a(right, dtype)), (a([[-7], [7]], dtype), a([3, -3], dtype))]
        for inputs in pairs:
            cases.append(Case("Mod", opset, inputs, {"fmod": fmod}, declined))
    cases += [
        Case("Mod", 13, (a(-33, I64), a(17, I64))),
        Case("Mod", 13, (a(-33.0, np.float32), a(17.0, np.float32)), {"fmod": 1}),
        Case("Mod", 13, (a([250, 7], np.uint8), a([17, 3], np.uint8))),
        Case("Mod", 13, (a([-33.5, 2.75], np.float32), a([2.0, -0.5], np.float32)), {"fmod": 1}),
        Case("Mod", 13, (a([7, 1], I64), a([0, 1], I64)), declined="zero-division"),
        Case("Mod", 13, (a([7.0], np.float32), a([0.0], np.float32)), {"fmod": 1}, "zero-division"),
        Case("Mod", 13, (a([np.inf], np.float32), a([2.0], np.float32)), {"fmod": 1}, "non-finite"),
        Case("Mod", 13, (a([-0.0], np.float32), a([2.0], np.float32)), {"fmod": 1}, "signed-zero"),
        Case("Mod", 13, (a([7], I64), a([2], np.int32)), declined="invalid"),
    ]
    floats = [1.0, np.nan, -0.0, 0.0, 2.0]
    for opset, dtype in itertools.product(
        (7, 11, 13, 19), (np.bool_, np.int32, I64, np.uint8, np.float16, np.float32)
    ):
        early = opset < 11 and dtype not in (np.bool_, np.int32, I64)
        if dtype is np.bool_:
            pair = (a([True, False, True], dtype), a([[True], [False]], dtype))
        elif dtype in (np.float16, np.float32):
            pair = (a(floats, dtype), a([1.0, np.nan, 0.0, -0.0, 3.0], dtype))
        else:
            pair = (a([[16], [5]], dtype), a([16, 5, 2], dtype))
        cases.append(Case("Equal", opset, pair, declined="invalid" if early else None))
    cases.append(Case("Equal", 13, (a(16, I64), a(16, I64))))
    cases.append(Case("Equal", 13, (a([16], I64), a([16.0], np.float32)), declined="invalid"))
    return cases


def _slice_cases() -> list[Case]:
    data = np.arange(24, dtype=I64).reshape(2, 3, 4)
    big, small = 2**63 - 1, -(2**63)
    spans = [  # (starts, ends, axes, steps)
        ([0], [1], None, None),
        ([1, 0], [2, 3], [0, 1], [1, 2]),
        ([-1], [big], [-1], None),
        ([-1], [small], [2], [-1]),
        ([3], [0], [2], [-2]),
        ([0], [-1], [1], None),
        ([10], [20], [2], None),
        ([-10], [10], [0], None),
        ([2], [1], [1], None),
        ([0, 0], [1, 1], [1, 1], None),
        ([0], [1], [0], [0]),
    ]
    cases = []
    for opset, (starts, ends, axes, steps) in itertools.product((1, 10, 11, 13), spans):
        repeated = axes is not None and len(set(axes)) != len(axes)
        early_negative = axes is not None and min(axes) < 0 and opset < 11
        declined = "invalid" if repeated or steps == [0] or early_negative else None
        if opset < 10:
            if steps is not None:
                continue
            attrs = {"starts": starts, "ends": ends, **({} if axes is None else {"axes": axes})}
            cases.append(Case("Slice", opset, (data,), attrs, declined))
            continue
        given = [a(starts, I64), a(ends, I64)]
        if axes is not None or steps is not None:
            given.append(None if axes is None else a(axes, I64))
        if steps is not None:
            given.append(a(steps, I64))
        cases.append(Case("Slice", opset, (data, *given), {}, declined))
    shape = a([2, 3, 4], I64)
    cases += [
        Case("Slice", 13, (shape, a([-1], np.int32), a([big], I64)), declined="invalid"),
        Case("Slice", 13, (shape, a([-2], np.int32), a([3], np.int32))),
        Case("Slice", 13, (np.zeros((0, 2), np.float32), a([0], I64), a([1], I64))),
        Case("Slice", 10, (shape, a([0], I64), a([2], I64), a([-1], I64)), declined="invalid"),
    ]
    return cases


def _where_expand_cases() -> list[Case]:
    cases = []
    condition = a([[True], [False]], np.bool_)
    for opset, dtype in itertools.product((9, 16), (np.float32, np.float16, I64, np.int32)):
        x, y = a([1, 2, 3], dtype), a([[-1, -2, -3]], dtype)
        cases.append(Case("Where", opset, (condition, x, y)))
    cases += [
        Case("Where", 16, (a([1, 0], I64), a([1, 2], I64), a([3, 4], I64)), declined="invalid"),
        Case("Where", 16, (condition, a([1.0], np.float32), a([1], I64)), declined="invalid"),
    ]
    for opset, (data, shape) in itertools.product(
        (8, 13),
        [
            (a([[1], [2]], np.float32), [2, 3]),
            (a([1, 2, 3], I64), [2, 1, 1]),
            (a([[1], [2]], np.float16), [3, 1, 4]),
            (a([5], I64), [0]),
            (a([5.0], np.float32), []),
        ],
    ):
        cases.append(Case("Expand", opset, (data, a(shape, I64))))
    cases += [
        Case("Expand", 13, (a([1, 2], I64), a([3], I64)), declined="invalid"),
        Case("Expand", 13, (a([1], I64), a([-1], I64)), declined="invalid"),
        Case("Expand", 13, (a([1], I64), a([2], np.int32)), declined="invalid"),
    ]
    return cases


def _constant_of_shape_transpose_cases() -> list[Case]:
    cases = []
    fills = [None, *(a([v], t) for v, t in ((1.5, np.float32), (-3, I64), (2, np.float16)))]
    fills.append(a([True], np.bool_))
    for opset, shape, fill in itertools.product((9, 20, 21, 23), ([2, 3], [0], []), fills):
        attrs = {} if fill is None else {"value": numpy_helper.from_array(fill)}
        cases.append(Case("ConstantOfShape", opset, (a(shape, I64),), attrs))
    cases += [
        Case("ConstantOfShape", 21, (a([2, -1], I64),), declined="invalid"),
        Case("ConstantOfShape", 21, (a([2], np.int32),), declined="invalid"),
        Case(
            "ConstantOfShape",
            21,
            (a([2], I64),),
            {"value": numpy_helper.from_array(a([1, 2], I64))},
            declined="invalid",
        ),
    ]
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for opset, perm in itertools.product((1, 13, 21), (None, [0, 2, 1], [2, 0, 1], [1, 0, 2])):
        attrs = {} if perm is None else {"perm": perm}
        cases.append(Case("Transpose", opset, (data,), attrs))
    cases += [
        Case("Transpose", 13, (a([[0, 1], [2, 3], [4, 5]], I64),), {"perm": [1, 0]}),
        Case("Transpose", 13, (a([1, 2], I64),)),
        Case("Transpose", 13, (data,), {"perm": [0, 0, 1]}, declined="invalid"),
        Case("Transpose", 13, (data,), {"perm": [0, 1]}, declined="invalid"),
    ]
    return cases


CASES = (
    _arithmetic_cases()
    + _cast_cases()
    + _shape_cases()
    + _reduce_prod_cases()
    + _reduction_cases()
    + _elementwise_cases()
    + _slice_cases()
    + _where_expand_cases()
    + _constant_of_shape_transpose_cases()
)


def test_every_folded_op_has_cases() -> None:
    assert {case.op for case in CASES} == FOLDED_OPS
    assert all(case.declined in (None, *DECLINES) for case in CASES)


# The cases by op and opset: one test each (per case, pytest's own cost exceeded the check's).
GROUPS: dict[str, list[Case]] = {}
for _case in CASES:
    GROUPS.setdefault(f"{_case.op}{_case.opset}", []).append(_case)


@pytest.mark.parametrize("group", list(GROUPS))
def test_folder_agrees_with_reference_and_runtime(group: str) -> None:
    """Every case of one op at one opset is checked; the failure names each failing case (its id
    and index in the group) with why."""
    problems = []
    for index, case in enumerate(GROUPS[group]):
        try:
            _check_fold(case)
        except Exception as error:  # an assertion or a crash: this case fails, the rest still run
            problems.append(f"{case.id} [#{index}] {type(error).__name__}: {error}")
    assert not problems, f"{len(problems)} of {len(GROUPS[group])} cases:\n" + "\n".join(problems)


def _check_fold(case: Case) -> None:
    """The folders' answer for `case` is the reference's and ONNX Runtime's, or declined."""
    model = _model(case)
    ours = _folded(model, case.opset)
    if case.declined is not None:
        assert ours is None, f"folded although {DECLINES[case.declined]}"
        return
    assert ours is not None, "a valid, exactly defined case was not folded"
    reference = _reference(model)
    assert reference is not None, "folded a node the reference evaluator refuses"
    assert _same(ours, reference), f"reference {reference!r}, folded {ours!r}"
    runtime = _runtime(model)
    if runtime is not None:
        assert _same(ours, runtime), f"ONNX Runtime {runtime!r}, folded {ours!r}"


# --- ReduceProd-18 with noop_with_empty_axes=1 is the identity (issue 21, item 3) ------------


def _norm_over_last(
    x: str, divisor: str, prefix: list[onnx.NodeProto], inits, shape: list[int]
) -> onnx.ModelProto:
    """A layer norm of `x` (from input x of `shape`) over its last axis whose variance is
    ReduceSum(centered²) / divisor, flattened (the only declared type is the flat output's)."""
    nodes = [
        *prefix,
        helper.make_node("ReduceMean", [x, "axes"], ["mean"]),
        helper.make_node("Sub", [x, "mean"], ["centered"]),
        helper.make_node("Mul", ["centered", "centered"], ["squared"]),
        helper.make_node("ReduceSum", ["squared", "axes"], ["sum"]),
        helper.make_node("Div", ["sum", divisor], ["variance"]),
        helper.make_node("Add", ["variance", "epsilon"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", ["centered", "std"], ["y"]),
        helper.make_node("Flatten", ["y"], ["z"], axis=0),  # z is declared, not y
    ]
    constants = [
        numpy_helper.from_array(a([-1], I64), "axes"),
        numpy_helper.from_array(a(1e-5, np.float32), "epsilon"),
        *inits,
    ]
    graph = helper.make_graph(
        nodes,
        "noop_reduce_prod",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, int(np.prod(shape))])],
        constants,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _noop_prod(source: str, output: str) -> onnx.NodeProto:
    return helper.make_node("ReduceProd", [source], [output], noop_with_empty_axes=1)


def test_noop_reduce_prod_divisor_is_not_read_as_a_product() -> None:
    """Divisor Cast(ReduceProd([1, 2], noop)) is [1, 2] (each column its own divisor), not 2."""
    prefix = [
        _noop_prod("dims", "kept"),
        helper.make_node("Cast", ["kept"], ["divisor"], to=TensorProto.FLOAT),
    ]
    dims = [numpy_helper.from_array(a([1, 2], I64), "dims")]
    model = _norm_over_last("x", "divisor", prefix, dims, [2, 4, 2])
    _assert_left_and_same(model, "variance-divisor")


def test_noop_reduce_prod_reshape_target_is_not_read_as_a_product() -> None:
    """Reshape(x, ReduceProd([2, 4, 6], noop)) keeps [2, 4, 6]: the norm is over 6 elements, so a
    variance divided by 48 is not a mean (read as a product the target flattens x to [48])."""
    prefix = [_noop_prod("dims", "target"), helper.make_node("Reshape", ["x", "target"], ["r"])]
    inits = [
        numpy_helper.from_array(a([2, 4, 6], I64), "dims"),
        numpy_helper.from_array(a(48.0, np.float32), "d"),
    ]
    model = _norm_over_last("r", "d", prefix, inits, [2, 4, 6])
    _assert_left_and_same(model, "variance-divisor")


def _assert_left_and_same(model: onnx.ModelProto, reason: str) -> None:
    import normfuse

    onnx.checker.check_model(model, full_check=True)
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert reason in [miss.reason for miss in result.report.near_misses]
    assert_same_numerics(model, result.model)


# --- the axes a Reduce* node reduces (`reduce_axes`), against the reference's output shape ----


def _reduce_cases() -> list[Case]:
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4) + 1
    cases = []
    for op, opset in [(op, v) for op in ("ReduceMean", "ReduceSum") for v in (1, 11, 13, 18)]:
        axes_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
        noop_values = (None, 0, 1) if axes_input else (None,)
        for axes, noop in itertools.product((None, [], [0], [-1], [0, 2], [1, 1]), noop_values):
            attrs = {} if noop is None else {"noop_with_empty_axes": noop}
            if axes is None:
                inputs = (data,)
            elif axes_input:
                inputs = (data, a(axes, I64))
            else:
                inputs, attrs = (data,), {**attrs, "axes": axes}
            # Negative axes before opset 11 (undefined by the spec): the reference and ONNX
            # Runtime both count them from the back, so the matcher reads them so too.
            repeated = axes is not None and len(set(axes)) != len(axes)
            declined = "invalid" if repeated else None
            cases.append(Case(op, opset, inputs, attrs, declined))
    cases += [
        Case("ReduceMean", 13, (data, a([0], I64)), declined="invalid"),  # an input at 13
        Case("ReduceMean", 18, (data,), {"axes": [0]}, declined="invalid"),  # an attribute at 18
        Case("ReduceMean", 13, (data,), {"noop_with_empty_axes": 1}, declined="invalid"),
    ]
    return cases


REDUCE_CASES = _reduce_cases()


@pytest.mark.parametrize("case", REDUCE_CASES, ids=[case.id for case in REDUCE_CASES])
def test_reduce_axes_agree_with_the_reference(case: Case) -> None:
    """The axes reduced are those the reference's keepdims output has at 1 (every input dim is
    above 1); a no-op reduction (the identity) and an invalid node have no axes (None)."""
    model = _model(case)
    graph = gs.import_onnx(model)
    node = graph.nodes[0]
    found = reduce_axes(node, 3, ConstantReader(None, opset=case.opset))
    if case.declined is not None:
        assert found is None
        return
    output = _reference(model)
    assert output is not None
    reduced = tuple(axis - 3 for axis in range(3) if output.shape[axis] == 1)
    identity = output.shape == case.inputs[0].shape
    assert found == (None if identity else reduced)
