"""`graph_export.write_graph` writes exactly what onnx-graphsurgeon's own export does (the same
bytes), on every committed real export and on graphs with what a real export rarely has: If
bodies, a model-local function, unnamed nodes, an empty domain, tensor attributes and a sparse
initializer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from normfuse import graph_export
from normfuse.graph_import import import_graph

REAL = sorted((Path(__file__).resolve().parent.parent / "models" / "real").glob("*.onnx"))


def _odd_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Neg", ["b"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
    )
    value = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], dtype=np.float32), "s"),
        numpy_helper.from_array(np.array([4], dtype=np.int64), "s_i"),
        [2, 3],
    )
    nodes = [
        helper.make_node("Constant", [], ["k"], value=value),
        helper.make_node("Add", ["x", "k"], ["a"], name="", domain=""),
        helper.make_node("Add", ["a", "s"], ["a2"], name="sparse_add"),
        helper.make_node("ReduceSum", ["a2"], ["r"], keepdims=1),
        helper.make_node("Cast", ["r"], ["flag"], to=TensorProto.BOOL),
        helper.make_node("Squeeze", ["flag"], ["cond"]),
        helper.make_node("If", ["cond"], ["i"], then_branch=branch, else_branch=branch),
        helper.make_node("Twice", ["i"], ["y"], domain="local"),
    ]
    body = [helper.make_node("Add", ["t", "t"], ["u"], name="twice_add")]
    function = helper.make_function(
        "local", "Twice", ["t"], ["u"], body, [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(nodes, "odd", [x], [y], sparse_initializer=[sparse], doc_string="d")
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[function])


@pytest.mark.parametrize("path", REAL, ids=[path.stem for path in REAL])
def test_a_real_export_is_written_as_gs_writes_it(path: Path) -> None:
    _assert_same(onnx.load(path))


def test_bodies_functions_sparse_and_unnamed_nodes_are_written_as_gs_writes_them() -> None:
    _assert_same(_odd_model())


def _assert_same(model: onnx.ModelProto) -> None:
    expected = gs.export_onnx(import_graph(model), do_type_check=False)
    graph = import_graph(model)
    written = onnx.GraphProto()
    graph_export.write_graph(graph, written)
    assert written.SerializeToString(deterministic=True) == expected.graph.SerializeToString(
        deterministic=True
    )
    bodies = [f.SerializeToString(deterministic=True) for f in graph_export.functions(graph)]
    assert bodies == [f.SerializeToString(deterministic=True) for f in expected.functions]
    assert len(written.node) == len(model.graph.node)
