"""Raising the opset: judged on the nodes that survive the rewrite, exact adapters for operators
whose signature moved (in the graph, bodies and local functions), and refusals that name the
operator, its versions and what changes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from helpers import assert_same_numerics, run
from onnx import TensorProto, helper

import normfuse
from models.builders import (
    GraphBuilder,
    LayerNormSpec,
    RmsNormSpec,
    add_layer_norm,
    add_rms_norm,
    norm_model,
)
from normfuse.target import opset_raise, targets

FLOAT = TensorProto.FLOAT


def _with_kept(model: onnx.ModelProto, node: onnx.NodeProto, *outputs: str) -> onnx.ModelProto:
    """`model` with `node` added and its `outputs` made graph outputs (so it survives)."""
    model.graph.node.append(node)
    model.graph.output.extend(helper.make_tensor_value_info(o, FLOAT, None) for o in outputs)
    return model


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each graph output's type as shape inference finds it (the checker wants a
    shape on every output)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {info.name: info for info in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in model.graph.output:
        if output.name in known:
            output.type.CopyFrom(known[output.name].type)
    return model


def _checked(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def test_every_operator_version_up_to_23_is_classified() -> None:
    """Each default-domain operator version from 14 to 23 that follows an older one is kept,
    adapted or refused: none is raised past unreviewed."""
    missing = [
        (schema.name, schema.since_version)
        for schema in onnx.defs.get_all_schemas_with_history()
        if schema.domain == ""
        and 14 <= schema.since_version <= 23
        and _has_older(schema.name, schema.since_version)
        and not opset_raise.classified(schema.name, schema.since_version)
    ]
    assert missing == []


def _has_older(op: str, version: int) -> bool:
    try:
        onnx.defs.get_schema(op, version - 1, "")
    except onnx.defs.SchemaError:
        return False
    return True


def test_the_raise_is_judged_on_the_nodes_that_survive(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ReduceMean-18 made meaning-changing, a norm's own ReduceMean (removed by the fusion)
    does not block the raise to 23; a ReduceMean that survives does, and the near-miss names it."""
    monkeypatch.setitem(opset_raise._MEANING, ("ReduceMean", 18), lambda node: "test change")
    result = normfuse.optimize(norm_model(RmsNormSpec(), opset=17), target="onnx")
    assert [site.op for site in result.report.sites] == ["RMSNormalization"]
    assert targets.default_opset(result.model) == 23
    kept = helper.make_node("ReduceMean", ["x"], ["kept"], axes=[-1])
    original = _with_kept(norm_model(RmsNormSpec(), opset=17), kept, "kept")
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    [miss] = result.report.near_misses
    assert miss.reason == "opset-too-low"
    assert "ReduceMean-13 -> 18 test change" in miss.detail


def _group_norm_18() -> onnx.NodeProto:
    return helper.make_node(
        "GroupNormalization", ["x", "g_scale", "g_bias"], ["kept"], num_groups=7
    )


def _pool(op: str) -> onnx.NodeProto:
    return helper.make_node(op, ["x"], ["kept"], kernel_shape=[3], pads=[1, 1], ceil_mode=1)


@pytest.mark.parametrize(
    ("opset", "kept", "expected"),
    [
        (18, _group_norm_18(), "GroupNormalization-18 -> 21 takes scale and bias per channel"),
        (17, _pool("MaxPool"), "MaxPool-12 -> 22 drops ceil_mode windows"),
        (17, _pool("AveragePool"), "AveragePool-11 -> 22 drops ceil_mode windows"),
    ],
)
def test_a_surviving_meaning_change_refuses_the_raise(
    opset: int, kept: onnx.NodeProto, expected: str
) -> None:
    original = _with_kept(norm_model(RmsNormSpec(), opset=opset), kept, "kept")
    for name in ("g_scale", "g_bias"):
        original.graph.initializer.append(helper.make_tensor(name, FLOAT, [7], [1.0] * 7))
        # A graph input as well (overridable, so not constant): GroupNormalization-18 with
        # constant scale and bias is rewritten by the group-norm pass and would not survive.
        original.graph.input.append(helper.make_tensor_value_info(name, FLOAT, [7]))
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    misses = result.report.near_misses
    [miss] = [m for m in misses if m.reason == "opset-too-low"]
    assert expected in miss.detail
    # The kept GroupNormalization-18 itself: its run-time affine is refused (ADV6-02).
    assert [m.reason for m in misses if m is not miss] == (
        ["gamma-shape"] if kept.op_type == "GroupNormalization" else []
    )
    assert [s.op for s in normfuse.optimize(original, target="ort").report.sites] == [
        "SimplifiedLayerNormalization"
    ]


def test_refused_at_23_the_rewrite_is_redone_with_layer_norm_at_17() -> None:
    """A model at 16 with a layer norm, an RMS norm and a MaxPool(ceil_mode=1) that survives:
    the raise to 23 is refused (MaxPool-22), so the rewrite is redone raising only to 17, where
    MaxPool means the same: the layer norm is fused, the RMS norm's near-miss names MaxPool."""
    b = GraphBuilder(16)
    rng = np.random.default_rng(0)
    shape = (2, 7, 32)
    layer = add_layer_norm(b, "x", shape, LayerNormSpec(), rng)
    rms = add_rms_norm(b, "x", shape, RmsNormSpec(), rng)
    b.nodes.append(_pool("MaxPool"))
    outputs = [(layer, list(shape)), (rms, list(shape)), ("kept", None)]
    graph = helper.make_graph(
        b.nodes,
        "two_norms",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info(name, FLOAT, dims) for name, dims in outputs],
        b.initializers,
    )
    original = _typed_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]))
    result = normfuse.optimize(original, target="onnx")
    assert [site.op for site in result.report.sites] == ["LayerNormalization"]
    assert targets.default_opset(result.model) == 17
    [miss] = result.report.near_misses
    assert (miss.kind, miss.reason) == ("rms-norm", "opset-too-low")
    assert "MaxPool-12 -> 22 drops ceil_mode windows" in miss.detail
    _checked(result.model)
    assert_same_numerics(original, result.model, seed=38)


def _branch(reduce: str, stem: str) -> onnx.GraphProto:
    """A body reducing x [2, 7, 32] over axis 1 with an axes attribute, then splitting evenly
    without `split`: its output [2, 16]."""
    nodes = [
        helper.make_node(reduce, ["x"], [f"{stem}_r"], axes=[1], keepdims=0),
        helper.make_node("Split", [f"{stem}_r"], [f"{stem}0", f"{stem}1"], axis=1),
    ]
    output = helper.make_tensor_value_info(f"{stem}0", FLOAT, [2, 16])
    return helper.make_graph(nodes, stem, [], [output])


def _with_if_body(model: onnx.ModelProto) -> None:
    model.graph.initializer.append(helper.make_tensor("cond", TensorProto.BOOL, [], [True]))
    then, otherwise = _branch("ReduceMax", "t"), _branch("ReduceL2", "e")
    model.graph.node.append(
        helper.make_node("If", ["cond"], ["kept"], then_branch=then, else_branch=otherwise)
    )


def _with_local_function(model: onnx.ModelProto) -> None:
    body = [helper.make_node("ReduceSumSquare", ["a"], ["b"], axes=[-1])]
    model.functions.append(
        helper.make_function("local", "Squares", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    )
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.graph.node.append(helper.make_node("Squares", ["x"], ["kept"], domain="local"))


# (One model cannot hold both: onnx-graphsurgeon's toposort recurses forever on a graph with
# both subgraphs and local functions.)
@pytest.mark.parametrize("add", [_with_if_body, _with_local_function])
def test_adapters_reach_bodies_and_local_functions(add) -> None:
    """Reduce* with attribute axes and an even Split without `split`, in an If body and in a
    local function: respelled for opset 23, checked, and computing the same."""
    model = norm_model(RmsNormSpec(), shape=(2, 7, 32), opset=17)
    add(model)
    model.graph.output.append(helper.make_tensor_value_info("kept", FLOAT, None))
    result = normfuse.optimize(_typed_outputs(model), target="onnx")
    assert [site.op for site in result.report.sites] == ["RMSNormalization"]
    assert targets.default_opset(result.model) == 23
    assert all(e.version == 23 for f in result.model.functions for e in f.opset_import)
    _checked(result.model)
    assert_same_numerics(model, result.model, seed=36)


def _single(node: onnx.NodeProto, inputs: list, opset: int, extra=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        [*extra, node],
        "single",
        [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in inputs],
        [helper.make_tensor_value_info(o, FLOAT, None) for o in node.output],
    )
    return _typed_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


ROIS = [("x", FLOAT, [1, 2, 6, 6]), ("rois", FLOAT, [2, 4]), ("index", TensorProto.INT64, [2])]
GRID = [("x", FLOAT, [1, 2, 4, 4]), ("grid", FLOAT, [1, 3, 3, 2])]
ADAPTED = {
    "reduce-all-axes": (
        _single(helper.make_node("ReduceProd", ["x"], ["y"]), [("x", FLOAT, [2, 3])], 13),
        23,
    ),
    "split-even": (
        _single(helper.make_node("Split", ["x"], ["y", "z"], axis=1), [("x", FLOAT, [2, 6])], 13),
        18,
    ),
    "roi-align-default-mode": (
        _single(helper.make_node("RoiAlign", ["x", "rois", "index"], ["y"]), ROIS, 15),
        16,
    ),
    "grid-sample-bicubic": (
        _single(helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bicubic"), GRID, 16),
        20,
    ),
    "grid-sample-default": (
        _single(helper.make_node("GridSample", ["x", "grid"], ["y"]), GRID, 16),
        20,
    ),
    "dft-axis": (
        _single(helper.make_node("DFT", ["x"], ["y"], axis=2), [("x", FLOAT, [1, 4, 8, 1])], 17),
        20,
    ),
}


@pytest.mark.parametrize("case", sorted(ADAPTED))
def test_each_adapter_computes_the_same_at_the_new_opset(case: str) -> None:
    original, new_opset = ADAPTED[case]
    assert targets.can_raise_opset(original, new_opset)
    raised = onnx.ModelProto()
    raised.CopyFrom(original)
    targets.raise_opset(raised, new_opset)
    assert targets.default_opset(raised) == new_opset
    _checked(raised)
    rng = np.random.default_rng(37)
    feeds = {
        "x": rng.normal(
            0.5, 1.0, [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
        ).astype(np.float32)
    }
    if case.startswith("roi"):
        feeds |= {
            "rois": np.array([[0, 0, 3, 3], [1, 1, 5, 4]], np.float32),
            "index": np.zeros(2, np.int64),
        }
    if case.startswith("grid"):
        feeds["grid"] = rng.uniform(-1, 1, [1, 3, 3, 2]).astype(np.float32)
    for before, after in zip(run(original, feeds), run(raised, feeds), strict=True):
        np.testing.assert_array_equal(before, after)


def test_a_node_unknown_at_the_old_opset_blocks_the_raise() -> None:
    model = _single(helper.make_node("Gelu", ["x"], ["y"]), [("x", FLOAT, [2])], 17)
    assert targets.raise_blockers(model, 23) == ["Gelu-17 -> 23 is not an operator at opset 17"]
