"""`graph_export.write_graph` writes exactly what onnx-graphsurgeon's own export does (the same
bytes), on every committed real export and on graphs with what a real export rarely has: If
bodies, a model-local function, unnamed nodes, an empty domain, tensor attributes and a sparse
initializer."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
import pytest
from helpers import odd_scopes_model

from normfuse.ir import graph_export
from normfuse.ir.graph_import import import_graph

REAL = sorted((Path(__file__).resolve().parent.parent / "models" / "real").glob("*.onnx"))


@pytest.mark.parametrize("path", REAL, ids=[path.stem for path in REAL])
def test_a_real_export_is_written_as_gs_writes_it(path: Path) -> None:
    _assert_same(onnx.load(path))


def test_bodies_functions_sparse_and_unnamed_nodes_are_written_as_gs_writes_them() -> None:
    _assert_same(odd_scopes_model())


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


def _empty_axes_beside_rms(in_body: bool) -> onnx.ModelProto:
    """ReduceMean-13 with `axes=[]` (reduce everything) beside an RMS norm; the ReduceMean in an
    If branch with `in_body`."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    everything = helper.make_node("ReduceMean", ["x"], ["all"], keepdims=1)
    everything.attribute.append(
        helper.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS)
    )
    rms = [
        helper.make_node("Mul", ["x", "x"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["mean_square"], axes=[-1]),
        helper.make_node("Add", ["mean_square", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "gain"], ["y"]),
    ]
    all_info = helper.make_tensor_value_info("all", TensorProto.FLOAT, [1, 1])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])]
    if in_body:
        branch = helper.make_graph([everything], "branch", [], [all_info])
        nodes = [helper.make_node("If", ["flag"], ["all"], then_branch=branch, else_branch=branch)]
        inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    else:
        nodes = [everything]
    graph = helper.make_graph(
        [*nodes, *rms],
        "empty_axes",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]), all_info],
        [
            numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
            numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gain"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("in_body", [False, True], ids=["main", "if-body"])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_an_empty_list_attribute_is_written_with_its_type(target: str, in_body: bool) -> None:
    """issue 34: `--target onnx` lost the whole model ("Could not infer attribute `axes` type
    from empty iterator") for one ReduceMean-13 with `axes=[]`; now typed from its schema."""
    from helpers import assert_same_numerics

    import normfuse

    model = _empty_axes_beside_rms(in_body)
    result = normfuse.optimize(model, target=target)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    assert_same_numerics(model, result.model)
