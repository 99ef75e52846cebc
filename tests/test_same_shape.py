"""`normfuse.facts.same_shape`: every op of the derivation allow-list, swept against the shapes ONNX
Runtime produces (graph inputs symbolic, run at several concrete sizes): a derived dim that is a
size or a symbol must be what ONNX Runtime's output has; a fresh unknown claims nothing."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from helpers import session
from onnx import TensorProto, helper, numpy_helper

from normfuse.facts.constants import ConstantReader
from normfuse.facts.same_shape import Deriver, format_shape
from normfuse.facts.shapes import tensor_types

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
SIZES = ({"B": 1, "S": 1, "H": 1}, {"B": 3, "S": 5, "H": 1}, {"B": 2, "S": 7, "H": 8})


def ints(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def floats(name: str, shape) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def x(name: str = "x", shape=("B", "S", 8), elem_type: int = F32):
    return helper.make_tensor_value_info(name, elem_type, list(shape))


# name -> (nodes, graph inputs, initializers, opset); the node outputs are checked.
CASES = {
    "add-broadcast": ([helper.make_node("Add", ["x", "y"], ["o"])], [x(), x("y", ("S", 8))], []),
    "add-symbol-against-size": (
        [helper.make_node("Add", ["x", "y"], ["o"])],
        [x(), x("y", ("B", "S", "H"))],
        [],
    ),
    "mul-ones": ([helper.make_node("Mul", ["x", "y"], ["o"])], [x(), x("y", (1, "S", 1))], []),
    "where": (
        [
            helper.make_node("Greater", ["x", "y"], ["c"]),
            helper.make_node("Where", ["c", "x", "y"], ["o"]),
        ],
        [x(), x("y", ("B", 1, 8))],
        [],
    ),
    "matmul": ([helper.make_node("MatMul", ["x", "w"], ["o"])], [x()], [floats("w", (8, 4))]),
    "matmul-batched": (
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["x", "t"], ["o"]),
        ],
        [x()],
        [],
    ),
    "gemm-transb": (
        [
            helper.make_node("Reshape", ["x", "flat"], ["f"]),
            helper.make_node("Gemm", ["f", "w"], ["o"], transB=1),
        ],
        [x()],
        [ints("flat", [-1, 8]), floats("w", (6, 8))],
    ),
    "gather-embedding": (
        [helper.make_node("Gather", ["table", "ids"], ["o"])],
        [x("ids", ("B", "S"), I64)],
        [floats("table", (16, 8))],
    ),
    "gather-axis1": (
        [helper.make_node("Gather", ["x", "idx"], ["o"], axis=1)],
        [x()],
        [ints("idx", [[0, 0, 0]])],
    ),
    "split-sizes": (
        [helper.make_node("Split", ["x", "sizes"], ["o1", "o2"], axis=2)],
        [x()],
        [ints("sizes", [3, 5])],
    ),
    "reduce-keepdims": (
        [helper.make_node("ReduceMean", ["x"], ["o"], axes=[-1])],
        [x()],
        [],
        13,
    ),
    "reduce-axes-input": (
        [helper.make_node("ReduceSum", ["x", "axes"], ["o"], keepdims=0)],
        [x()],
        [ints("axes", [1])],
    ),
    "expand": (
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Expand", ["y", "s"], ["o"]),
        ],
        [x(), x("y", (1, 1, 8))],
        [],
    ),
    "reshape-zero-and-shape": (
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
            helper.make_node("Concat", ["lead", "two_four"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["o"]),
            helper.make_node("Reshape", ["o", "zeros"], ["p"]),
        ],
        [x()],
        [ints("zero", [0]), ints("two", [2]), ints("two_four", [2, 4]), ints("zeros", [0, 0, 8])],
    ),
    "reshape-minus-one": (
        [
            helper.make_node("Reshape", ["x", "flat"], ["f"]),
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["seq"]),
            helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
            helper.make_node("Concat", ["minus", "seq1", "eight"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["o"]),
            helper.make_node("Reshape", ["x", "last"], ["p"]),
        ],
        [x()],
        [
            ints("flat", [-1, 8]),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            ints("axis0", [0]),
            ints("minus", [-1]),
            ints("eight", [8]),
            ints("last", [0, 0, -1]),
        ],
    ),
    "shape-start-end": (
        [
            helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
            helper.make_node("Concat", ["s", "s"], ["target"], axis=0),
            helper.make_node("ConstantOfShape", ["target"], ["c"]),
            helper.make_node("Cast", ["c"], ["cf"], to=F32),
            helper.make_node("Reshape", ["cf", "target"], ["o"]),
        ],
        [x()],
        [],
    ),
    "range-unsqueeze-flatten": (
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["seq"]),
            helper.make_node("Range", ["zero", "seq", "step"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
            helper.make_node("LessOrEqual", ["u", "r"], ["le"]),
            helper.make_node("Flatten", ["x"], ["o"], axis=2),
            helper.make_node("Flatten", ["x"], ["p"], axis=-1),
            helper.make_node("Flatten", ["x"], ["q"], axis=0),
        ],
        [x()],
        [
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array(1, np.int64), "step"),
            ints("axes", [1]),
        ],
    ),
    "expand-torch-target": (
        # torch's expand(-1, ...): Where(target == -1, ones, target), from ConstantOfShape and Mul
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Reshape", ["s", "minus"], ["target"]),
            helper.make_node("Shape", ["target"], ["n"]),
            helper.make_node(
                "ConstantOfShape",
                ["n"],
                ["ones"],
                value=numpy_helper.from_array(np.ones(1, np.int64)),
            ),
            helper.make_node("Mul", ["ones", "minus"], ["minus_ones"]),
            helper.make_node("Equal", ["target", "minus_ones"], ["is_minus"]),
            helper.make_node("Where", ["is_minus", "ones", "target"], ["fixed"]),
            helper.make_node("Expand", ["y", "fixed"], ["o"]),
        ],
        [x(), x("y", (1, "S", 1))],
        [ints("minus", [-1])],
    ),
    "unary-and-norm": (
        [
            helper.make_node("Softmax", ["x"], ["sm"], axis=1),
            helper.make_node("Cast", ["sm"], ["c"], to=F32),
            helper.make_node("LayerNormalization", ["c", "g"], ["o"], axis=-1),
        ],
        [x()],
        [floats("g", (8,))],
    ),
}


def _case(name: str) -> tuple[onnx.ModelProto, list[str]]:
    nodes, inputs, initializers, *opset = CASES[name]
    outputs = [out for node in nodes for out in node.output]
    opsets = [helper.make_opsetid("", (opset or [18])[0])]
    bare = helper.make_model(helper.make_graph(nodes, name, inputs, [], initializers))
    inferred = onnx.shape_inference.infer_shapes(bare)
    infos = {info.name: info for info in inferred.graph.value_info}
    declared = [infos[out] for out in outputs]  # claims only: normfuse derives without them
    model = helper.make_model(
        helper.make_graph(nodes, name, inputs, declared, initializers), opset_imports=opsets
    )
    model.ir_version = 8
    return model, outputs


def _feeds(model: onnx.ModelProto, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    feeds = {}
    for info in model.graph.input:
        shape = [d.dim_value or sizes[d.dim_param] for d in info.type.tensor_type.shape.dim]
        if info.type.tensor_type.elem_type == I64:
            feeds[info.name] = np.zeros(shape, np.int64)
        else:
            feeds[info.name] = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", sorted(CASES))
def test_derived_shapes_agree_with_onnx_runtime(name: str) -> None:
    model, outputs = _case(name)
    onnx.checker.check_model(model, full_check=True)
    graph = gs.import_onnx(model)
    tensors = graph.tensors()
    deriver = Deriver(tensor_types(model), ConstantReader(None))
    derived = {out: deriver.dims(tensors[out]) for out in outputs}
    claimed = 0
    for sizes in SIZES:
        results = session(model).run(outputs, _feeds(model, sizes))
        for out, value in zip(outputs, results, strict=True):
            terms = derived[out]
            assert terms is not None and len(terms) == value.ndim, (out, terms, value.shape)
            for term, size in zip(terms, value.shape, strict=True):
                if isinstance(term, int):
                    expected = term
                elif term[0] == "sym":
                    expected = sizes.get(term[1])
                    if expected is None:  # a symbol inference generated: not a size to check
                        continue
                else:
                    continue  # a fresh unknown claims nothing
                claimed += 1
                assert size == expected, (out, format_shape(terms), value.shape, sizes)
    assert claimed > 0


def test_the_derivations_that_matter_are_symbolic_not_fresh() -> None:
    """The sweep above could pass with everything fresh: these outputs are fully named."""
    expected = {
        "matmul": "o",
        "gather-embedding": "o",
        "split-sizes": "o2",
        "expand": "o",
        "reshape-zero-and-shape": "p",
        "reshape-minus-one": "o",
        "unary-and-norm": "o",
        "range-unsqueeze-flatten": "le",
        "expand-torch-target": "o",
    }
    for name, out in expected.items():
        model, _ = _case(name)
        graph = gs.import_onnx(model)
        terms = Deriver(tensor_types(model), ConstantReader(None)).dims(graph.tensors()[out])
        assert terms is not None and not any(
            isinstance(t, tuple) and t[0] == "new" for t in terms
        ), (name, terms)
