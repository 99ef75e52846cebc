"""Function bodies are typed from every call in every scope, transitively (issue 21, item 2): a
body is fused only where all its calls agree, and a function reached only through another
function is typed from that call."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts, random_inputs, run
from onnx import TensorProto, helper, numpy_helper

import normfuse

F = TensorProto.FLOAT
DOMAIN = "local"
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]


def _norm_function() -> onnx.FunctionProto:
    """LN(x): an affine-free layer norm over the last axis (the fused node's ones-scale is sized
    from the body's normalised dim)."""
    eps = numpy_helper.from_array(np.array(1e-5, np.float32))
    nodes = [
        helper.make_node("Constant", [], ["eps"], value=eps),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["cent"]),
        helper.make_node("Mul", ["cent", "cent"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", ["cent", "std"], ["y"]),
    ]
    return helper.make_function(DOMAIN, "LN", ["x"], ["y"], nodes, OPSETS[:1])


def _outer_function(name: str = "Outer", inner: str = "LN") -> onnx.FunctionProto:
    """Outer(z) = LN(Relu(z)): a function whose body calls another one."""
    nodes = [
        helper.make_node("Relu", ["z"], ["r"]),
        helper.make_node(inner, ["r"], ["out"], domain=DOMAIN),
    ]
    return helper.make_function(DOMAIN, name, ["z"], ["out"], nodes, OPSETS)


def _model(calls: list[tuple[str, int]], functions: list[onnx.FunctionProto]) -> onnx.ModelProto:
    """The graph calls each (function, width) on its own input of shape [2, width]."""
    nodes, inputs, outputs = [], [], []
    for index, (function, width) in enumerate(calls):
        nodes.append(helper.make_node(function, [f"x{index}"], [f"y{index}"], domain=DOMAIN))
        inputs.append(helper.make_tensor_value_info(f"x{index}", F, [2, width]))
        outputs.append(helper.make_tensor_value_info(f"y{index}", F, [2, width]))
    graph = helper.make_graph(nodes, "calls", inputs, outputs)
    model = helper.make_model(graph, opset_imports=OPSETS, functions=functions)
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _misses(result: normfuse.OptimizeResult) -> set[str]:
    return {miss.reason for miss in result.report.near_misses}


def test_calls_that_disagree_leave_the_body() -> None:
    """LN is called from the graph at width 8 and from Outer (called at width 16): the body's
    normalised dim differs between calls, so nothing is fused (`unknown-shape`); the earlier
    code fused it for width 8, and the call at 16 failed."""
    model = _model([("LN", 8), ("Outer", 16)], [_norm_function(), _outer_function()])
    run(model, random_inputs(model))
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert _misses(result) == {"unknown-shape"}
    assert [f.SerializeToString() for f in result.model.functions] == [
        f.SerializeToString() for f in model.functions
    ]


@pytest.mark.parametrize(
    "calls",
    [[("Outer", 8)], [("LN", 8), ("Outer", 8)], [("Outer", 8), ("Outer", 8)]],
    ids=["only-through-outer", "graph-and-outer-agree", "outer-twice"],
)
def test_calls_that_agree_fuse_the_body(calls: list[tuple[str, int]]) -> None:
    """A function reached only through another function is typed from that call (not
    `unknown-dtype`), and calls that agree let the body fuse; numerics match the original."""
    model = _model(calls, [_norm_function(), _outer_function()])
    result = normfuse.optimize(model)
    assert [(site.kind, site.function) for site in result.report.sites] == [
        ("layer-norm", (DOMAIN, "LN"))
    ]
    assert "unknown-dtype" not in _misses(result)
    body = next(f for f in result.model.functions if f.name == "LN")
    assert [node.op_type for node in body.node if node.op_type != "Constant"] == [
        "LayerNormalization"
    ]
    assert_same_numerics(model, result.model)


def test_disagreement_two_calls_deep_is_seen() -> None:
    """LN reached at width 8 through Outer and at width 16 through Outer2 (Outer2 calls
    Outer): the call two levels down still counts, so nothing is fused."""
    functions = [_norm_function(), _outer_function(), _outer_function("Outer2", "Outer")]
    model = _model([("Outer", 8), ("Outer2", 16)], functions)
    run(model, random_inputs(model))
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert _misses(result) == {"unknown-shape"}
    assert op_counts(result.model) == op_counts(model)
