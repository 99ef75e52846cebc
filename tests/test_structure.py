"""The structural gate (`normfuse.ir.structure.check_structure`): a graph whose nodes are listed out
of order is accepted, and every cycle (a node reading its own output, two nodes reading each
other, a cycle behind nodes in order) is refused with its message."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from normfuse.errors import NormfuseError
from normfuse.ir.structure import check_structure


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _relu(source: str, target: str, name: str) -> onnx.NodeProto:
    return helper.make_node("Relu", [source], [target], name=name)


def test_nodes_out_of_order_are_accepted() -> None:
    check_structure(
        _model([_relu("b", "y", "last"), _relu("a", "b", "mid"), _relu("x", "a", "first")])
    )


@pytest.mark.parametrize(
    "nodes",
    [
        [helper.make_node("Add", ["x", "y"], ["y"], name="self")],
        [
            _relu("b", "a", "one"),
            _relu("a", "b", "two"),
            helper.make_node("Add", ["a", "x"], ["y"]),
        ],
        [
            _relu("x", "p", "ok"),
            _relu("c", "d", "one"),
            _relu("d", "c", "two"),
            _relu("p", "y", "end"),
        ],
    ],
    ids=["self-loop", "two-cycle", "cycle-after-ordered-nodes"],
)
def test_every_cycle_is_refused(nodes: list[onnx.NodeProto]) -> None:
    with pytest.raises(NormfuseError, match="the graph has a cycle through node"):
        check_structure(_model(nodes))
