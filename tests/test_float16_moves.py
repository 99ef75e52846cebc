"""A float16 norm computed in float16 throughout, whose input is moved (Reshape, Transpose, ...)
from an op ONNX Runtime's CPU provider runs in float32: the fused node's input Cast is taken
above the moves (`fused_sites.float16_input_moves`), so the value is never rounded to float16
where the original's is not (adversary 6, ADV6-07: Mamba2's gated norm overflowed to inf)."""

from __future__ import annotations

import numpy as np
import onnx
from helpers import assert_same_numerics, op_types, session
from onnx import TensorProto, helper

import normfuse

F16 = TensorProto.FLOAT16
GROUPS, WIDTH = 4, 8


def gated_rms(mover: str = "Reshape") -> onnx.ModelProto:
    """y = Reshape(RMS_group(Reshape(x * z))) in float16 throughout (x, z [2, 3, 32])."""
    value = lambda name, v: helper.make_tensor(name, F16, [len(v)] if np.ndim(v) else [], v)  # noqa: E731
    grouped = helper.make_tensor("grouped", TensorProto.INT64, [4], [2, 3, GROUPS, WIDTH])
    back = helper.make_tensor("back", TensorProto.INT64, [3], [2, 3, GROUPS * WIDTH])
    nodes = [helper.make_node("Mul", ["x", "z"], ["gated"])]
    if mover == "Reshape":
        nodes.append(helper.make_node("Reshape", ["gated", "grouped"], ["g"]))
    elif mover == "Concat":  # the gate joined to itself (alone between float32 ops): no copy
        nodes.append(helper.make_node("Concat", ["gated", "gated"], ["g"], axis=2))
    else:  # grouped, then joined along the group axis: two moves, float16 in ONNX Runtime
        nodes += [
            helper.make_node("Reshape", ["gated", "grouped"], ["half"]),
            helper.make_node("Concat", ["half", "half"], ["g"], axis=2),
        ]
    nodes += [
        helper.make_node("Pow", ["g", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["g", "rms"], ["normed"]),
    ]
    groups = GROUPS if mover == "Reshape" else 2 * GROUPS
    back = helper.make_tensor("back", TensorProto.INT64, [3], [2, 3, groups * WIDTH])
    nodes.append(helper.make_node("Reshape", ["normed", "back"], ["y"]))
    inits = [
        grouped,
        back,
        value("two", 2.0),
        value("eps", 1e-5),
        helper.make_tensor("axes", TensorProto.INT64, [1], [-1]),
    ]
    io = [helper.make_tensor_value_info(n, F16, [2, 3, GROUPS * WIDTH]) for n in ("x", "z")]
    out = [helper.make_tensor_value_info("y", F16, [2, 3, groups * WIDTH])]
    graph = helper.make_graph(nodes, "gated", io, out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_the_input_cast_goes_above_the_move_and_overflow_stays_out() -> None:
    original = gated_rms()
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    model = result.model
    cast = next(
        node
        for node in model.graph.node
        if node.op_type == "Cast" and node.attribute[0].i == TensorProto.FLOAT
    )
    producer = {out: node for node in model.graph.node for out in node.output}[cast.input[0]]
    assert producer.op_type == "Mul"  # the Cast reads the gate product, not its Reshape
    assert op_types(model).count("Reshape") == 2  # the grouping copied in float32, and the back
    # x * z of 1e3 * 1e3 is past float16's range; ONNX Runtime's CPU provider keeps it in
    # float32 in the original, and so must the fused model.
    big = {name: np.full((2, 3, GROUPS * WIDTH), 1e3, np.float16) for name in ("x", "z")}
    big["x"][..., ::3] = -5e2
    expected, actual = (session(m).run(None, big)[0] for m in (original, model))
    assert np.all(np.isfinite(expected))
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), atol=2e-3)
    assert_same_numerics(original, model, seed=3, rtol=4e-3)


def test_a_move_that_cannot_be_copied_is_refused() -> None:
    """ONNX Runtime runs a Concat alone between float32 ops in float32: the Cast cannot go
    above it, and at its output it would round where the original does not."""
    result = normfuse.optimize(gated_rms("Concat"))
    assert result.report.sites == []
    reasons = {miss.reason for miss in result.report.near_misses}
    assert "float16-rounding" in reasons, reasons


def test_moves_onnx_runtime_keeps_in_float16_keep_the_cast_at_the_norm() -> None:
    """Reshape then Concat: ONNX Runtime keeps the two moves in float16 (it rounds the gate), so
    the fused node's Cast reads the moved value, rounded as in the original."""
    original = gated_rms("ReshapeConcat")
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    cast = next(
        node
        for node in result.model.graph.node
        if node.op_type == "Cast" and node.attribute[0].i == TensorProto.FLOAT
    )
    assert cast.input[0] == "g"
    offset = {name: np.full((2, 3, GROUPS * WIDTH), 30.0, np.float16) for name in ("x", "z")}
    offset["x"] += np.random.default_rng(0).normal(0, 0.01, offset["x"].shape).astype(np.float16)
    expected, actual = (session(m).run(None, offset)[0] for m in (original, result.model))
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), atol=2e-3)
    assert_same_numerics(original, result.model, seed=5, rtol=4e-3)


def test_a_graph_input_moved_needs_no_lift() -> None:
    """x moved from a graph input is float16 in the original too: the Cast reads the move."""
    original = gated_rms()
    graph = original.graph
    graph.node[0].op_type = "Identity"  # x moved by Identity then Reshape: no computing op
    del graph.node[0].input[1]
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    assert_same_numerics(original, result.model, seed=4, rtol=4e-3)


def test_the_output_cast_goes_below_the_moves_that_alone_read_the_result() -> None:
    """The fused result is moved back (the grouping Reshape undone) in float32, and cast to
    float16 where the moves end: ORT's CPU provider keeps the original's value in float32 there
    too (ADV6-07/08: one more rounding cost 1.3-1.8x the original's distance to float64)."""
    original = gated_rms()
    model = normfuse.optimize(original).model
    producer = {out: node for node in model.graph.node for out in node.output}
    last = producer["y"]
    assert last.op_type == "Cast" and last.attribute[0].i == F16
    moved = producer[last.input[0]]
    assert moved.op_type == "Reshape"
    assert producer[moved.input[0]].op_type == "SimplifiedLayerNormalization"
    assert_same_numerics(original, model, seed=5, rtol=4e-3)
