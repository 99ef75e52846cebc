"""Models that mix a main-graph site with control flow and local functions (ADV9-01): gs 0.6.1
recursed without end sorting such a graph's function list, so they were refused as nesting too
deeply. They fuse now; a model that is truly too deep is still refused with that message."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, random_inputs
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.errors import NormfuseError
from normfuse.rewrite import rounds as rewrite

F = TensorProto.FLOAT
H = 8
SHAPE = [2, 3, H]
DOMAIN = "local"
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]


def _layer_norm(x: str, prefix: str) -> tuple[list[onnx.NodeProto], str]:
    """A decomposed, affine-free layer norm of `x` over the last axis, reading `eps`."""
    p = prefix
    nodes = [
        helper.make_node("ReduceMean", [x], [f"{p}mean"], axes=[-1]),
        helper.make_node("Sub", [x, f"{p}mean"], [f"{p}cent"]),
        helper.make_node("Mul", [f"{p}cent", f"{p}cent"], [f"{p}sq"]),
        helper.make_node("ReduceMean", [f"{p}sq"], [f"{p}var"], axes=[-1]),
        helper.make_node("Add", [f"{p}var", "eps"], [f"{p}shifted"]),
        helper.make_node("Sqrt", [f"{p}shifted"], [f"{p}std"]),
        helper.make_node("Div", [f"{p}cent", f"{p}std"], [f"{p}y"]),
    ]
    return nodes, f"{p}y"


def _function(with_site: bool) -> onnx.FunctionProto:
    """F1(X): Relu(X), or the layer norm of Relu(X) when `with_site`."""
    nodes = [helper.make_node("Relu", ["X"], ["r"])]
    if with_site:
        eps = numpy_helper.from_array(np.array(1e-5, np.float32))
        nodes.append(helper.make_node("Constant", [], ["eps"], value=eps))
        norm, out = _layer_norm("r", "f_")
        nodes += [*norm, helper.make_node("Identity", [out], ["Y"])]
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["Y"]))
    return helper.make_function(DOMAIN, "F1", ["X"], ["Y"], nodes, OPSETS[:1])


def _branch(name: str, op: str, with_site: bool) -> onnx.GraphProto:
    """A branch computing `op(x)` of the outer `x`, or its layer norm when `with_site`."""
    nodes = [helper.make_node(op, ["x"], [f"{name}_v"])]
    out = f"{name}_v"
    if with_site:
        norm, out = _layer_norm(out, f"{name}_")
        nodes += norm
    nodes.append(helper.make_node("Identity", [out], [f"{name}_out"]))
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", F, SHAPE)]
    )


def _mixed_model(nested_sites: bool) -> onnx.ModelProto:
    """A main-graph layer norm beside an `If` and a call of the local function F1; with
    `nested_sites`, the then-branch and F1's body hold a layer norm each too."""
    main_norm, main_out = _layer_norm("x", "m_")
    nodes = [
        helper.make_node(
            "If",
            ["c"],
            ["y_if"],
            then_branch=_branch("t", "Neg", nested_sites),
            else_branch=_branch("e", "Abs", False),
        ),
        helper.make_node("F1", ["x"], ["y_fn"], domain=DOMAIN),
        *main_norm,
    ]
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("x", F, SHAPE),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info(name, F, SHAPE) for name in ("y_if", "y_fn", main_out)],
        [eps],
    )
    model = helper.make_model(graph, opset_imports=OPSETS, functions=[_function(nested_sites)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _attribute_graph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(attribute.g for attribute in node.attribute if attribute.name == name)


@pytest.mark.parametrize("target", ["ort", "onnx"])
@pytest.mark.parametrize("nested_sites", [False, True], ids=["main-only", "main-branch-function"])
def test_main_site_beside_if_and_function_call_fuses(nested_sites: bool, target: str) -> None:
    """The main-graph site fuses (and the nested ones where present); the If, its branches and
    the function survive, and every output matches on both branches."""
    original = _mixed_model(nested_sites)
    result = normfuse.optimize(original, target=target)
    assert len(result.report.sites) == (3 if nested_sites else 1)
    assert [miss.reason for miss in result.report.near_misses] == []
    fused = result.model
    onnx.checker.check_model(fused, full_check=True)
    assert [node.op_type for node in fused.graph.node] == ["If", "F1", "LayerNormalization"]
    if_node = fused.graph.node[0]
    then_ops = [node.op_type for node in _attribute_graph(if_node, "then_branch").node]
    assert then_ops == (
        ["Neg", "LayerNormalization", "Identity"] if nested_sites else ["Neg", "Identity"]
    )
    else_nodes = _attribute_graph(if_node, "else_branch").node
    assert list(else_nodes) == list(_attribute_graph(original.graph.node[0], "else_branch").node)
    (function,) = fused.functions
    assert (function.domain, function.name) == (DOMAIN, "F1")
    body_ops = [node.op_type for node in function.node]
    if nested_sites:
        assert "LayerNormalization" in body_ops and "ReduceMean" not in body_ops
    else:
        assert function == original.functions[0]
    for condition in (True, False):
        base = {**random_inputs(original, seed=3), "c": np.array(condition)}
        assert_same_numerics(original, fused, base=base)


def test_branch_site_beside_an_inner_if_and_a_function_fuses() -> None:
    """The same recursion hit a branch holding a site and an inner `If` when the model has a local
    function (gs sorted the shared function list from the branch): it fuses now."""
    inner = helper.make_node(
        "If",
        ["c"],
        ["inner_y"],
        then_branch=_branch("it", "Neg", False),
        else_branch=_branch("ie", "Abs", False),
    )
    norm, out = _layer_norm("x", "b_")
    then_branch = helper.make_graph(
        [inner, *norm, helper.make_node("Add", [out, "inner_y"], ["t_out"])],
        "t",
        [],
        [helper.make_tensor_value_info("t_out", F, SHAPE)],
    )
    nodes = [
        helper.make_node(
            "If", ["c"], ["y_if"], then_branch=then_branch, else_branch=_branch("e", "Abs", False)
        ),
        helper.make_node("F1", ["x"], ["y_fn"], domain=DOMAIN),
    ]
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    graph = helper.make_graph(
        nodes,
        "nested",
        [
            helper.make_tensor_value_info("x", F, SHAPE),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info(name, F, SHAPE) for name in ("y_if", "y_fn")],
        [eps],
    )
    original = helper.make_model(graph, opset_imports=OPSETS, functions=[_function(False)])
    original.ir_version = 8
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert [site.output for site in result.report.sites] == ["b_y"]
    assert [miss.reason for miss in result.report.near_misses] == []
    fused = result.model
    onnx.checker.check_model(fused, full_check=True)
    then_ops = [node.op_type for node in _attribute_graph(fused.graph.node[0], "then_branch").node]
    assert then_ops == ["If", "LayerNormalization", "Add"]
    assert list(fused.functions) == list(original.functions)
    for condition in (True, False):
        base = {**random_inputs(original, seed=5), "c": np.array(condition)}
        assert_same_numerics(original, fused, base=base)


def _chain_against_its_flow(length: int) -> onnx.ModelProto:
    """A layer norm of `x`, and a chain of `length` Relus of `z` listed last node first: gs's
    own sort recursed once per link (ONNX Runtime sorts it and runs it)."""
    norm, out = _layer_norm("x", "m_")
    chain = [helper.make_node("Relu", [f"z{i}"], [f"z{i + 1}"]) for i in range(length)]
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    graph = helper.make_graph(
        norm + chain[::-1],
        "deep",
        [
            helper.make_tensor_value_info("x", F, SHAPE),
            helper.make_tensor_value_info("z0", F, SHAPE),
        ],
        [
            helper.make_tensor_value_info(out, F, SHAPE),
            helper.make_tensor_value_info(f"z{length}", F, SHAPE),
        ],
        [eps],
    )
    model = helper.make_model(graph, opset_imports=OPSETS[:1])
    model.ir_version = 8
    return model


def test_a_deep_chain_listed_against_its_flow_is_fused_and_sorted() -> None:
    """A 20,000-link chain listed last link first (once refused as "nests too deeply": gs's
    sort recursed through it) is fused, written in topological order, and computes what the
    original does. Python's default recursion limit holds here, whatever another test set."""
    original = _chain_against_its_flow(20000)
    before = original.SerializeToString()
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        result = normfuse.optimize(original)
    finally:
        sys.setrecursionlimit(previous)
    assert original.SerializeToString() == before
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    made = {"x", "z0"} | {tensor.name for tensor in result.model.graph.initializer}
    for node in result.model.graph.node:
        assert all(name in made for name in node.input)
        made.update(node.output)
    assert_same_numerics(original, result.model)


def test_a_recursion_error_in_the_rewrite_is_the_one_line_refusal(monkeypatch) -> None:
    """What no model known here reaches any more, still mapped: a RecursionError anywhere in the
    rewrite is the one-line "nests too deeply" refusal, not a traceback."""
    original = _chain_against_its_flow(3)

    def too_deep(*_args, **_kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(rewrite, "run", too_deep)
    with pytest.raises(NormfuseError, match="the model nests too deeply to rewrite safely"):
        normfuse.optimize(original)


def test_a_loop_listed_before_the_outer_value_its_body_reads_is_sorted_after_it() -> None:
    """ADV12-01: a Loop listed first whose body reads an outer value made by a later node (ORT
    sorts and runs it; gs's import leaves the body's copy of that value unlinked). After a norm
    of the main graph is fused, every node of the output, the Loop included, comes after what it
    and its body read, and the output computes what the original does."""
    norm, normed = _layer_norm("x", "m_")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    body = helper.make_graph(
        [
            helper.make_node("Add", ["carry", "outer"], ["carry_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("carry", F, SHAPE),
        ],
        [
            helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("carry_out", F, SHAPE),
        ],
    )
    loop = helper.make_node("Loop", ["trip", "", "x"], ["looped"], body=body)
    nodes = [
        loop,
        *norm,
        helper.make_node("Mul", [normed, "half"], ["outer"]),
        helper.make_node("Add", ["looped", "outer"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "loop_first",
        [
            helper.make_tensor_value_info("x", F, SHAPE),
            helper.make_tensor_value_info("trip", onnx.TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", F, SHAPE)],
        [half, eps],
    )
    original = helper.make_model(graph, opset_imports=OPSETS[:1])
    original.ir_version = 8
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    made = {"x", "trip", ""} | {tensor.name for tensor in result.model.graph.initializer}
    for node in result.model.graph.node:
        reads = set(node.input)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                reads |= {"outer"} & {name for n in attribute.g.node for name in n.input}
        assert reads <= made, node.op_type
        made.update(node.output)
    base = {**random_inputs(original, seed=4), "trip": np.array(3, np.int64)}
    assert_same_numerics(original, result.model, base=base)
