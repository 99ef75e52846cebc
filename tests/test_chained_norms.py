"""Norms chained one into the next with nothing between (ADV11-01): the rewrite appends each
fused node at the end of the node list, and onnx-graphsurgeon's recursive sort then needed one
Python frame per fused node behind a node kept ahead of them; 600 such norms were refused as
"nests too deeply". They fuse, the output is in topological order, and it computes what the
original does."""

from __future__ import annotations

import numpy as np
import onnx
from helpers import assert_same_numerics
from onnx import TensorProto, helper

import normfuse
from models.builders import GraphBuilder, LayerNormSpec, add_layer_norm

NORMS = 600
SHAPE = (2, 3, 8)


def _chain() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    b = GraphBuilder(17)
    h = "x"
    for _ in range(NORMS):
        h = add_layer_norm(b, h, SHAPE, LayerNormSpec(), rng)
    h = b.op("Identity", [h])  # kept in place: the sort starts from it, ahead of the fused nodes
    graph = helper.make_graph(
        b.nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, list(SHAPE))],
        b.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_hundreds_of_directly_chained_norms_fuse_in_order() -> None:
    original = _chain()
    result = normfuse.optimize(original)
    assert len(result.report.sites) == NORMS
    assert [n.op_type for n in result.model.graph.node] == ["LayerNormalization"] * NORMS + [
        "Identity"
    ]
    made = {"x"} | {t.name for t in result.model.graph.initializer}
    for node in result.model.graph.node:  # every input made before it is read
        assert all(name in made for name in node.input if name)
        made.update(node.output)
    assert_same_numerics(original, result.model)
