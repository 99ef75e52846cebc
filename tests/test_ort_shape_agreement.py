"""The allow-list of shape rules (normfuse.facts.shape_rules) against ONNX Runtime.

For each listed operator, tiny models over its attribute space are run in ONNX Runtime with graph
optimisations disabled, and the output shapes it produces are compared with onnx's inferred
shapes (with data propagation, as normfuse infers) on the dims the rule trusts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from normfuse.facts.shape_rules import FULL, RULES, trusted_dims

F = TensorProto.FLOAT


@dataclass
class Case:
    """One node (or a short chain ending in `op`) over inputs given by shape (fed) or value."""

    op: str
    inputs: list  # a shape tuple (a float input) or an ndarray (an initializer)
    attrs: dict = field(default_factory=dict)
    outputs: int = 1
    opset: int = 18
    chain: list = field(default_factory=list)  # nodes before `op`, reading the names i0, i1, ...

    def model(self) -> onnx.ModelProto:
        inputs, initializers, names = [], [], []
        for index, item in enumerate(self.inputs):
            name = f"i{index}"
            names.append(name if item is not None else "")
            if isinstance(item, np.ndarray):
                initializers.append(numpy_helper.from_array(item, name))
            elif item is not None:
                inputs.append(helper.make_tensor_value_info(name, F, list(item)))
        outs = [f"o{k}" for k in range(self.outputs)]
        node = helper.make_node(self.op, self.chain_inputs(names), outs, **self.attrs)
        graph = helper.make_graph(
            [*self.chain, node],
            "sweep",
            inputs,
            [helper.make_empty_tensor_value_info(name) for name in outs],
            initializers,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])

    def chain_inputs(self, names: list[str]) -> list[str]:
        if not self.chain:
            return names
        return list(self.chain[-1].output) + names[len(self.chain[0].input) :]


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def f32(*shape: int) -> np.ndarray:
    return np.linspace(0.5, 1.5, int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _pool_cases() -> list[Case]:
    cases = []
    for op, length, kernel, stride, pad, ceil, dilation in itertools.product(
        ("MaxPool", "AveragePool"), (5, 6, 7), (1, 2, 3), (1, 2, 3), (0, 1), (0, 1), (1, 2)
    ):
        if pad >= kernel or (op == "AveragePool" and dilation != 1):
            continue
        attrs = {"kernel_shape": [kernel], "strides": [stride], "pads": [pad, pad]}
        attrs |= {"ceil_mode": ceil} | ({"dilations": [dilation]} if dilation != 1 else {})
        cases.append(Case(op, [(2, 3, length)], attrs))
    for op, auto_pad, stride in itertools.product(
        ("MaxPool", "AveragePool"), ("SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2, 3)
    ):
        attrs = {"kernel_shape": [2, 3], "strides": [stride, stride], "auto_pad": auto_pad}
        cases.append(Case(op, [(1, 2, 5, 7)], attrs))
    # SAME_* with dilations: onnx sizes the output as if undilated (ADV3-14: [2,4,8], k=2, s=2,
    # dilations 2, SAME_UPPER: onnx 4, ORT 3); AveragePool has dilations from opset 19.
    for op, auto_pad, length, stride in itertools.product(
        ("MaxPool", "AveragePool"), ("SAME_UPPER", "SAME_LOWER"), (7, 8, 9), (1, 2)
    ):
        attrs = {"kernel_shape": [2], "strides": [stride], "auto_pad": auto_pad, "dilations": [2]}
        cases.append(Case(op, [(2, 4, length)], attrs, opset=19))
    for length, kernel, stride, pad, ceil in itertools.product(
        (5, 6, 7), (2, 3), (1, 2), (0, 1), (0, 1)
    ):
        attrs = {"kernel_shape": [kernel], "strides": [stride], "pads": [pad, pad], "p": 2}
        cases.append(Case("LpPool", [(2, 3, length)], attrs | {"ceil_mode": ceil}, opset=18))
    cases += [Case(op, [(2, 3, 5, 4)]) for op in ("GlobalAveragePool", "GlobalMaxPool")]
    return cases


def _conv_cases() -> list[Case]:
    cases = []
    for length, kernel, stride, pad, dilation, group in itertools.product(
        (5, 8), (1, 3), (1, 2), (0, 1), (1, 2), (1, 2)
    ):
        weight = f32(4, 4 // group, kernel)
        attrs = {"strides": [stride], "pads": [pad, pad], "dilations": [dilation], "group": group}
        cases.append(Case("Conv", [(2, 4, length), weight], attrs))
    for auto_pad, stride, dilation in itertools.product(
        ("SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2, 3), (1, 2)
    ):
        if dilation != 1 and auto_pad != "VALID":
            continue  # ONNX Runtime refuses dilations with SAME_* padding
        attrs = {"strides": [stride], "dilations": [dilation], "auto_pad": auto_pad}
        cases.append(Case("Conv", [(1, 2, 7), f32(3, 2, 3)], attrs))
    for length, stride, pad, out_pad, auto_pad in itertools.product(
        (4, 5), (1, 2, 3), (0, 1), (0, 1), ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
    ):
        if out_pad >= stride:
            continue
        attrs = {"strides": [stride], "output_padding": [out_pad], "auto_pad": auto_pad}
        if auto_pad == "NOTSET":
            attrs["pads"] = [pad, pad]
        cases.append(Case("ConvTranspose", [(1, 2, length), f32(2, 3, 3)], attrs))
    return cases


def _elementwise_cases() -> list[Case]:
    cases = []
    for op, extra in _UNARY_EXTRA_ARGS.items():
        cases.append(Case(op, [(2, 3, 4), *extra]))
    unary = sorted(set(_unary_ops()) - set(_UNARY_EXTRA_ARGS))
    for op, shape in itertools.product(unary, ((2, 3, 4), (), (0, 5))):
        if shape == () and op in ("Softmax", "LogSoftmax"):
            continue  # rank 0 is invalid for them
        attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        cases.append(Case(op, [shape], attrs, opset=20 if op == "Gelu" else 18))
    cases.append(Case("Dropout", [(2, 5)], outputs=2))
    pairs = (((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (5,)), ((0, 3), (1, 3)))
    for op, (a, b) in itertools.product(sorted(_binary_ops()), pairs):
        cases.append(Case(op, [a, b], {"fmod": 1} if op == "Mod" else {}))
    cast = [helper.make_node("Cast", ["i0"], ["cond"], to=TensorProto.BOOL)]
    for shapes in (((2, 1), (1, 3), (2, 3)), ((4,), (2, 1, 4), ())):
        cases.append(Case("Where", list(shapes), chain=cast))
    return cases


def _unary_ops() -> list[str]:
    from normfuse.facts.shape_rules import SAME_SHAPE

    return sorted(SAME_SHAPE - {"Not", "Dropout"})


def _binary_ops() -> list[str]:
    from normfuse.facts.shape_rules import BROADCAST

    return sorted(BROADCAST - {"And", "Or", "Xor", "Where"})


_UNARY_EXTRA_ARGS = {
    "Clip": [np.array(-1.0, np.float32), np.array(1.0, np.float32)],
}


def _logic_cases() -> list[Case]:
    cases = []
    for op, (a, b) in itertools.product(
        ("And", "Or", "Xor"), (((2, 3), (3,)), ((2, 1, 3), (4, 1)))
    ):
        chain = [
            helper.make_node("Cast", ["i0"], ["a"], to=9),
            helper.make_node("Cast", ["i1"], ["b"], to=9),
        ]
        case = Case(op, [a, b], chain=chain)
        case.chain_inputs = lambda names, chain=chain: ["a", "b"]  # type: ignore[method-assign]
        cases.append(case)
    chain = [helper.make_node("Cast", ["i0"], ["a"], to=9)]
    cases.append(Case("Not", [(2, 3)], chain=chain))
    return cases


def _linear_cases() -> list[Case]:
    cases = []
    for a, b in (
        ((2, 3), (3, 4)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((5, 2, 3), (3, 4)),
        ((5, 1, 2, 3), (4, 3, 2)),
        ((3,), (3,)),
        ((0, 3), (3, 2)),
    ):
        cases.append(Case("MatMul", [a, b]))
    for ta, tb, bias in itertools.product((0, 1), (0, 1), ((), (4,), (2, 1), (2, 4), None)):
        a, b = ((3, 2) if ta else (2, 3)), ((4, 3) if tb else (3, 4))
        cases.append(
            Case("Gemm", [a, b] + ([] if bias is None else [bias]), {"transA": ta, "transB": tb})
        )
    return cases


def _shape_cases() -> list[Case]:
    x = (2, 3, 4)
    cases = [
        *(
            Case("Reshape", [x, i64(*t)], {"allowzero": z})
            for t, z in (
                ((6, 4), 0),
                ((-1,), 0),
                ((0, -1), 0),
                ((2, 0, 2, 2), 0),
                ((2, 3, 4), 1),
                ((-1, 2, 2), 0),
                ((0, 0, 4), 0),
                ((24,), 1),
            )
        ),
        Case("Reshape", [(0, 4), i64(0, 2, 2)], {"allowzero": 1}),
        *(Case("Transpose", [x], {"perm": p}) for p in ([2, 0, 1], [0, 2, 1], [1, 0, 2])),
        Case("Transpose", [x]),
        *(Case("Unsqueeze", [x, i64(*a)]) for a in ((0,), (-1,), (1, 3), (-4, 4))),
        Case("Unsqueeze", [x], {"axes": [0, -1]}, opset=11),
        *(Case("Squeeze", [(1, 3, 1, 4), *a]) for a in ((), (i64(0),), (i64(-2),), (i64(0, 2),))),
        Case("Squeeze", [(1, 3, 1)], {"axes": [-1]}, opset=11),
        *(Case("Concat", [x, (2, k, 4)], {"axis": a}) for k, a in ((1, 1), (5, -2), (0, 1))),
        Case("Concat", [(3,), (0,), (2,)], {"axis": 0}),
        *(
            Case("Gather", [x, i64(*i).reshape(s)], {"axis": a})
            for i, s, a in (
                ((1,), (1,), 0),
                ((0, 2), (2,), 1),
                ((-1,), (), 2),
                ((0, 1, 1, 0), (2, 2), -1),
            )
        ),
        *(
            Case("GatherND", [x, np.zeros(s, np.int64)], {"batch_dims": b})
            for s, b in (
                ((2,), 0),
                ((5, 1), 0),
                ((2, 2, 3), 0),
                ((2, 1), 1),
                ((2, 4, 2), 1),
            )
        ),
        Case("GatherElements", [x, np.zeros((2, 3, 2), np.int64)], {"axis": 2}),
        *(
            Case("Slice", [x, i64(*s), i64(*e), *r])
            for s, e, r in (
                ((1,), (3,), [i64(1)]),
                ((0,), (-1,), [i64(2)]),
                ((-1,), (-100,), [i64(2), i64(-1)]),
                ((0, 0), (100, 2), [i64(0, 1), i64(2, 1)]),
                ((3,), (1,), [i64(1)]),
                ((-5,), (5,), [i64(-1), i64(3)]),
            )
        ),
        *(Case("Flatten", [x], {"axis": a}) for a in (0, 1, -1, 3)),
        *(Case("Expand", [(3, 1), i64(*s)]) for s in ((2, 3, 4), (1, 1), (3, 1, 1))),
        *(Case("Tile", [x, i64(*r)]) for r in ((1, 2, 3), (0, 1, 1))),
        *(Case("ConstantOfShape", [i64(*s)]) for s in ((2, 3), (0,), ())),
        *(
            Case("Pad", [x, i64(*p), *rest], {"mode": m}, opset=o)
            for p, rest, m, o in (
                ((0, 0, 0, 0, 1, 1), [], "constant", 18),
                ((0, 1, 0, 1, 0, 1), [np.array(0.5, np.float32)], "constant", 18),
                ((1, 0, 2, 0, 0, 3), [], "edge", 18),
                ((0, 1, 1, 0, 1, 1), [], "reflect", 18),
                ((0, 0, -1, 0, 1, -2), [], "constant", 18),
                ((2, 2, 2, 2, 2, 2), [], "wrap", 19),
                ((1, 2), [None, i64(-1)], "constant", 18),
                ((0, 1, 1, 0), [None, i64(0, 2)], "reflect", 18),
                ((0, 1, 0, 1, 0, 1), [], "constant", 13),
            )
        ),
        *(
            Case("Range", [np.array(a, np.float32) for a in r])
            for r in (
                (0, 5, 1),
                (5, 0, -2),
                (0, 1, 0.3),
            )
        ),
        Case("Split", [x, i64(1, 3)], {"axis": 2}, outputs=2),
        Case("Split", [x], {"axis": 1, "num_outputs": 2}, outputs=2),
        Case("Split", [(2, 7)], {"axis": 1, "num_outputs": 3}, outputs=3),
        *(
            Case("SpaceToDepth", [s], {"blocksize": b}, opset=o)
            for s, b, o in (((1, 4, 4, 4), 2, 18), ((2, 3, 6, 9), 3, 18), ((1, 2, 2, 4), 1, 13))
        ),
        *(
            Case("DepthToSpace", [s], {"blocksize": b} | m, opset=o)
            for s, b, m, o in (
                ((1, 16, 2, 2), 2, {}, 18),
                ((2, 18, 2, 3), 3, {"mode": "CRD"}, 18),
                ((1, 8, 3, 1), 2, {"mode": "DCR"}, 13),
                ((1, 4, 2, 2), 1, {}, 11),
            )
        ),
        Case("Shape", [x]),
        *(Case("Shape", [x], {"start": s, "end": e}) for s, e in ((1, 10), (-2, -1), (2, 1))),
        Case("Size", [x]),
        Case("Constant", [], {"value": numpy_helper.from_array(f32(2, 3))}),
    ]
    # Shape arithmetic feeding a Reshape (the targets exporters write), read by data propagation.
    chain = [
        helper.make_node("Shape", ["i0"], ["s"]),
        helper.make_node("Slice", ["s", "i1", "i2"], ["head"]),
        helper.make_node("Concat", ["head", "i3"], ["target"], axis=0),
    ]
    case = Case("Reshape", [x, i64(0), i64(2), i64(2, 2)], chain=chain)
    case.chain_inputs = lambda names: ["i0", "target"]  # type: ignore[method-assign]
    cases.append(case)
    gather = [
        helper.make_node("Shape", ["i0"], ["s"]),
        helper.make_node("Gather", ["s", "i1"], ["d"], axis=0),
        helper.make_node("Unsqueeze", ["d", "i2"], ["du"]),
        helper.make_node("Mul", ["du", "i3"], ["dd"]),
        helper.make_node("Concat", ["dd", "i4"], ["target"], axis=0),
    ]
    case = Case("Reshape", [x, np.array(-1), i64(0), i64(2), i64(-1)], chain=gather)
    case.chain_inputs = lambda names: ["i0", "target"]  # type: ignore[method-assign]
    cases.append(case)
    return cases


def _reduce_cases() -> list[Case]:
    from normfuse.facts.shape_rules import REDUCE

    cases = []
    for op, axes, keepdims, noop in itertools.product(
        sorted(REDUCE), (None, (-1,), (0, 2), ()), (0, 1), (0, 1)
    ):
        inputs = [(2, 3, 4)] + ([] if axes is None else [i64(*axes)])
        attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
        cases.append(Case(op, inputs, attrs))
    cases.append(Case("ReduceMean", [(2, 3, 4)], {"axes": [1], "keepdims": 0}, opset=13))
    return cases


def _norm_cases() -> list[Case]:
    cases = []
    for axis, shape in ((-1, (2, 3, 4)), (1, (2, 3, 4)), (0, (3, 4))):
        scale = f32(*shape[axis:]) if axis >= 0 else f32(shape[-1])
        cases.append(Case("LayerNormalization", [shape, scale, scale], {"axis": axis}, outputs=3))
    cases.append(Case("InstanceNormalization", [(2, 3, 5), f32(3), f32(3)]))
    cases.append(Case("BatchNormalization", [(2, 3, 5), f32(3), f32(3), f32(3), f32(3)]))
    cases.append(Case("Softmax", [(2, 3)], {"axis": 0}))
    cases.append(Case("LogSoftmax", [(2, 3)], {"axis": -1}))
    return cases


def _resize_cases() -> list[Case]:
    """Resize (diffusion upsamplers: nearest, scale 2) by scales and by sizes, at opsets 13 and
    18, over modes and coordinate transformations; and the configurations the rule trusts only
    the rank, batch and channels of (tf_crop_and_resize, keep_aspect_ratio_policy, axes)."""
    cases = []
    modes = ("nearest", "linear")
    transforms = ("asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel")
    factors = (2.0, 1.5, 0.5, 0.7, 3.0, 1 / 3, 0.29)
    # (1, 2, 10, 100): 10 * 0.7 and 100 * 0.29 are whole numbers in float32, just below in
    # float64: onnx infers 6 and 28 where ONNX Runtime computes 7 and 29 (issue 34).
    for opset, mode, transform, factor, shape in itertools.product(
        (13, 18), modes, transforms, factors, ((1, 2, 5, 7), (2, 3, 8, 3), (1, 2, 10, 100))
    ):
        attrs = {"mode": mode, "coordinate_transformation_mode": transform}
        scales = np.array([1, 1, factor, factor], np.float32)
        cases.append(Case("Resize", [shape, None, scales], attrs, opset=opset))
    for opset, sizes in itertools.product((13, 18), ((1, 2, 10, 3), (1, 2, 1, 14))):
        cases.append(Case("Resize", [(1, 2, 5, 7), None, None, i64(*sizes)], opset=opset))
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8], np.float32)
    crop = {"coordinate_transformation_mode": "tf_crop_and_resize", "mode": "linear"}
    cases.append(Case("Resize", [(1, 2, 5, 7), roi, np.array([1, 1, 2, 2], np.float32)], crop))
    for policy in ("not_larger", "not_smaller"):
        attrs = {"keep_aspect_ratio_policy": policy, "axes": [2, 3]}
        cases.append(Case("Resize", [(1, 2, 5, 7), None, None, i64(9, 11)], attrs))
    return cases


ALL_CASES = [
    *_pool_cases(),
    *_resize_cases(),
    *_conv_cases(),
    *_elementwise_cases(),
    *_logic_cases(),
    *_linear_cases(),
    *_shape_cases(),
    *_reduce_cases(),
    *_norm_cases(),
]


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for info in model.graph.input:
        shape = [dim.dim_value for dim in info.type.tensor_type.shape.dim]
        feeds[info.name] = np.linspace(-2.0, 2.0, int(np.prod(shape)), dtype=np.float32).reshape(
            shape
        )
    return feeds


def _shapes(case: Case) -> tuple[list, list]:
    """onnx's inferred output shapes (None where unknown) and ONNX Runtime's."""
    model = case.model()
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    declared = {}
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        if info.type.tensor_type.HasField("shape"):
            declared[info.name] = tuple(
                dim.dim_value if dim.HasField("dim_value") else None
                for dim in info.type.tensor_type.shape.dim
            )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    actual = session.run(None, _feeds(model))
    names = [info.name for info in model.graph.output]
    return [declared.get(name) for name in names], [np.asarray(a).shape for a in actual]


def _disagreements(case: Case) -> list[str]:
    """The outputs whose trusted dims onnx infers differently from ONNX Runtime."""
    model = case.model()
    node = model.graph.node[-1]
    values = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    trusted = trusted_dims(node, values)
    assert trusted is not None, f"{case.op} is not on the allow-list"
    inferred, actual = _shapes(case)
    found = []
    for name, (claim, real) in enumerate(zip(inferred, actual, strict=True)):
        if claim is None:
            continue  # nothing inferred: nothing trusted
        kept = len(claim) if trusted == FULL else min(trusted, len(claim))
        if len(claim) != len(real) or any(
            c is not None and c != r for c, r in zip(claim[:kept], real[:kept], strict=True)
        ):
            found.append(f"o{name}: onnx {claim}, ORT {real}")
    return found


def test_every_listed_operator_has_a_sweep() -> None:
    """No entry on the allow-list without cases."""
    swept = {case.op for case in ALL_CASES}
    assert {*RULES, "Resize"} - swept == set()


def test_inferred_shapes_agree_with_onnx_runtime_on_trusted_dims() -> None:
    """Every case of every listed operator: onnx's inferred shape and ONNX Runtime's output
    shape agree on rank and on every dim the rule trusts."""
    failures = {}
    for case in ALL_CASES:
        found = _disagreements(case)
        if found:
            failures[f"{case.op} {case.attrs} {case.inputs}"] = found
    assert failures == {}


@pytest.mark.parametrize(
    ("op", "attrs", "length", "kernel"),
    [
        ("MaxPool", {"ceil_mode": 1, "strides": [2], "pads": [1, 1]}, 5, 2),
        ("ConvTranspose", {"auto_pad": "SAME_UPPER", "strides": [2], "output_padding": [1]}, 5, 3),
    ],
)
def test_known_disagreements_are_real_and_masked(op, attrs, length, kernel) -> None:
    """The sweep can fail: for the documented disagreements onnx's full shape differs from ONNX
    Runtime's, and the rule keeps only the dims they share."""
    inputs = [(2, 3, length)] if op == "MaxPool" else [(1, 2, length), f32(2, 3, kernel)]
    if op == "MaxPool":
        attrs = attrs | {"kernel_shape": [kernel]}
    case = Case(op, inputs, attrs)
    inferred, actual = _shapes(case)
    assert inferred[0] != actual[0]
    assert trusted_dims(case.model().graph.node[-1]) == 2
    assert _disagreements(case) == []


def _body(nodes, inputs, outputs) -> onnx.GraphProto:
    return helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )


def _control_flow_models() -> dict[str, onnx.ModelProto]:
    """If, Loop and Scan, each with an output whose shape the walk decides."""
    b, i = TensorProto.BOOL, TensorProto.INT64
    same = helper.make_node(
        "If",
        ["c"],
        ["y"],
        then_branch=_body([helper.make_node("Identity", ["x"], ["t"])], [], [("t", F, None)]),
        else_branch=_body([helper.make_node("Relu", ["x"], ["e"])], [], [("e", F, None)]),
    )
    wider = helper.make_node(
        "If",
        ["c"],
        ["y"],
        then_branch=_body([helper.make_node("Identity", ["x"], ["t"])], [], [("t", F, None)]),
        else_branch=_body(
            [helper.make_node("Concat", ["x", "x"], ["e"], axis=1)], [], [("e", F, None)]
        ),
    )
    step = [helper.make_node("Identity", ["cond"], ["cond_out"])]
    kept = helper.make_node(
        "Loop",
        ["trip", "", "x"],
        ["y"],
        body=_body(
            [*step, helper.make_node("Relu", ["s"], ["s_out"])],
            [("n", i, []), ("cond", b, []), ("s", F, [2, 3])],
            [("cond_out", b, []), ("s_out", F, None)],
        ),
    )
    grown = helper.make_node(
        "Loop",
        ["trip", "", "x"],
        ["y"],
        body=_body(
            [*step, helper.make_node("Concat", ["s", "s"], ["s_out"], axis=0)],
            [("n", i, []), ("cond", b, []), ("s", F, [None, 3])],
            [("cond_out", b, []), ("s_out", F, None)],
        ),
    )
    scan = helper.make_node(
        "Scan",
        ["x", "x"],
        ["y", "rows"],
        num_scan_inputs=1,
        body=_body(
            [
                helper.make_node("Add", ["state", "row"], ["state_out"]),
                helper.make_node("Identity", ["row"], ["row_out"]),
            ],
            [("state", F, None), ("row", F, None)],
            [("state_out", F, None), ("row_out", F, None)],
        ),
    )
    models = {}
    for name, node, shape in (
        ("if_same", same, [2, 3]),
        ("if_wider", wider, [2, 3]),
        ("loop_kept", kept, [2, 3]),
        ("loop_grown", grown, [2, 3]),
        ("scan", scan, [3, 3]),
    ):
        outputs = [helper.make_empty_tensor_value_info(out) for out in node.output]
        graph = helper.make_graph(
            [node],
            name,
            [
                helper.make_tensor_value_info("x", F, shape),
                helper.make_tensor_value_info("c", b, []),
            ],
            outputs,
            [numpy_helper.from_array(np.array(3, np.int64), "trip")],
        )
        models[name] = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return models


@pytest.mark.parametrize("name", sorted(_control_flow_models()))
def test_control_flow_shapes_normfuse_trusts_agree_with_onnx_runtime(name: str) -> None:
    """The dims normfuse derives and keeps (`derive_types`) for If, Loop and Scan outputs agree
    with the shapes ONNX Runtime produces; a Loop state that grows is not trusted at all."""
    from normfuse.facts.shapes import derive_types

    model = _control_flow_models()[name]
    types = derive_types(model).types
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {"x": np.ones([3, 3] if name == "scan" else [2, 3], np.float32)}
    for condition in (True, False):
        feeds["c"] = np.array(condition)
        actual = session.run(None, {k: v for k, v in feeds.items() if k in _inputs(session)})
        for info, value in zip(model.graph.output, actual, strict=True):
            derived = types.get(info.name, (0, None))[1]
            if derived is not None:
                assert len(derived) == value.ndim
                pairs = zip(derived, value.shape, strict=True)
                assert all(not isinstance(d, int) or d == r for d, r in pairs)
    expected_known = {"if_same": True, "if_wider": True, "loop_kept": True, "loop_grown": False}
    if name in expected_known:
        assert (types.get("y", (0, None))[1] is not None) == expected_known[name]


def _inputs(session: ort.InferenceSession) -> set[str]:
    return {info.name for info in session.get_inputs()}


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape", [(2, 6, 7), (1, 4, 3, 5), (2, 6, 2, 3, 2)])
def test_group_normalization_output_is_typed_as_onnx_runtime_produces_it(
    opset: int, shape: tuple
) -> None:
    """onnx infers no type for a GroupNormalization output; normfuse derives its input's type
    and shape (`shapes.TYPED_AS_INPUT`), which is what ONNX Runtime's run produces."""
    from normfuse.facts.shapes import derive_types

    groups = 2
    count = groups if opset == 18 else shape[1]
    case = Case(
        "GroupNormalization",
        [shape, f32(count), f32(count)],
        {"num_groups": groups},
        opset=opset,
    )
    model = case.model()
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert not inferred.graph.output[0].type.HasField("tensor_type")  # onnx: nothing
    _, actual = _shapes(case)
    derived = derive_types(model).types["o0"]
    assert derived == (F, actual[0]) == (F, shape)
