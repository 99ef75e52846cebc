"""KV-cache decoders (models/kv_decoder.py): every norm fused in every scope, numerics equal at a
decode step (sequence 1, past 32) and a prefill on both branches of a merged decoder, and weights
stay where they were (one main-graph initializer read by both branches, external data external)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, run

import normfuse
from models.kv_decoder import (
    DecoderConfig,
    decoder_feeds,
    merged_decoder_model,
    with_past_decoder_model,
)
from normfuse.ir.placement import graphs_by_scope, initializer_scopes

CONFIGS = {
    "rms": DecoderConfig(),
    "layer": DecoderConfig(norm="layer", layers=1),
    "rms_float16": DecoderConfig(dtype=np.float16, layers=1),
}
# (sequence, past): a prefill (the merged decoder's no-cache branch) and a decode step.
STEPS = {"prefill": (8, 0), "decode": (1, 32)}


def _norms(config: DecoderConfig) -> int:
    """Norm sites per decoder body: two per layer and the final one."""
    return 2 * config.layers + 1


def _assert_close(original: onnx.ModelProto, fused: onnx.ModelProto, feeds: dict, rtol: float):
    for expected, actual in zip(run(original, feeds), run(fused, feeds), strict=True):
        expected, actual = expected.astype(np.float64), actual.astype(np.float64)
        assert expected.shape == actual.shape
        error = float(np.max(np.abs(expected - actual), initial=0.0))
        assert error <= rtol * max(1.0, float(np.max(np.abs(expected)))), error


@pytest.mark.parametrize("name", CONFIGS)
def test_merged_decoder_fuses_every_scope_and_keeps_weights_outside(name: str) -> None:
    config = CONFIGS[name]
    original = merged_decoder_model(config)
    result = normfuse.optimize(original)
    assert not result.report.near_misses
    assert len(result.report.sites) == 1 + 2 * _norms(config)  # main graph and both branches
    fused = result.model
    # Initializers: each one in the scope the original had it in, the only ones gone are the
    # removed subgraphs' epsilons and exponents, and none added (scales and biases are reused).
    # In float16 the float32 kernels add their float32 parameters: unit scales where the float16
    # weight follows the Cast (LLaMA's casts), the float16 affine widened where there is no Cast.
    before, after = initializer_scopes(original.graph), initializer_scopes(fused.graph)
    assert {t: s for t, s in after.items() if t in before} == {
        t: s for t, s in before.items() if t in after
    }
    gone = set(before) - set(after)
    removable = (
        ("epsilon", "two") if config.dtype == np.float32 else ("epsilon", "two", "scale_", "bias_")
    )
    assert gone and all(tensor.startswith(removable) for tensor in gone)
    added = {t.name: t for _, g in graphs_by_scope(fused.graph) for t in g.initializer}
    added = {name: added[name] for name in set(after) - set(before)}
    assert not added if config.dtype == np.float32 else added
    for tensor in added.values():
        assert tensor.data_type == onnx.TensorProto.FLOAT and list(tensor.dims) == [config.hidden]
    # The file grows by at most what the fused nodes add (their nodes and parameters).
    names = {n.name for _, g in graphs_by_scope(original.graph) for n in g.node}
    new_nodes = [n for _, g in graphs_by_scope(fused.graph) for n in g.node if n.name not in names]
    growth = sum(n.ByteSize() for n in new_nodes) + sum(t.ByteSize() for t in added.values())
    assert fused.ByteSize() <= original.ByteSize() + growth
    rtol = FLOAT32_ATOL if config.dtype == np.float32 else 1e-2
    for sequence, past in STEPS.values():
        _assert_close(original, fused, decoder_feeds(original, sequence, past, batch=2), rtol)


def test_with_past_decoder_fuses_every_norm() -> None:
    original = with_past_decoder_model()
    result = normfuse.optimize(original)
    assert len(result.report.sites) == 1 + _norms(DecoderConfig())
    assert (
        initializer_scopes(result.model.graph).keys() <= initializer_scopes(original.graph).keys()
    )
    for sequence, past in STEPS.values():
        feeds = decoder_feeds(original, sequence, past)
        _assert_close(original, result.model, feeds, FLOAT32_ATOL)


def test_merged_decoder_external_weights_stay_external_and_outside(tmp_path: Path) -> None:
    """Weights in external data stay there, in the main graph, whether the output goes into the
    source folder (referenced in place) or elsewhere (streamed into OUT.data)."""
    source = tmp_path / "source"
    source.mkdir()
    path = source / "decoder.onnx"
    onnx.save(
        merged_decoder_model(),
        path,
        save_as_external_data=True,
        location="decoder.onnx.data",
        size_threshold=1024,
    )
    stored = onnx.load(path, load_external_data=False)
    external = {
        t.name for t in stored.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
    }
    assert len(external) >= 10
    for folder in (source, tmp_path / "elsewhere"):
        folder.mkdir(exist_ok=True)
        out = folder / "fused.onnx"
        normfuse.save(normfuse.optimize(path), out)
        written = onnx.load(out, load_external_data=False)
        main = {t.name: t for t in written.graph.initializer}
        assert all(main[name].data_location == onnx.TensorProto.EXTERNAL for name in external)
        for scope, graph in graphs_by_scope(written.graph):
            if scope is not None:
                assert not external & {t.name for t in graph.initializer}
        assert out.stat().st_size <= path.stat().st_size
        feeds = decoder_feeds(stored, 1, 32)
        reloaded, fused = onnx.load(path), onnx.load(out)
        _assert_close(reloaded, fused, feeds, FLOAT32_ATOL)


def _loop_in_if_model() -> onnx.ModelProto:
    """An If on `c` whose then-branch runs a one-trip Loop; the Loop body layer-norms its carried
    value and multiplies it by the main graph's weight `w`, as does the else-branch."""
    from onnx import helper, numpy_helper

    from models.builders import GraphBuilder, LayerNormSpec, add_layer_norm

    f32, shape = onnx.TensorProto.FLOAT, ("batch", 5, 16)
    rng = np.random.default_rng(3)
    b = GraphBuilder(17)
    normed = add_layer_norm(b, "carried", shape, LayerNormSpec(), rng)
    b.nodes += [
        helper.make_node("MatMul", [normed, "w"], ["loop_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    loop_body = helper.make_graph(
        b.nodes,
        "loop_body",
        [
            helper.make_tensor_value_info("iteration", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried", f32, list(shape)),
        ],
        [
            helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            helper.make_tensor_value_info("loop_out", f32, list(shape)),
        ],
        b.initializers,
    )
    then_branch = helper.make_graph(
        [helper.make_node("Loop", ["trips", "true"], ["then_y"], body=loop_body)],
        "then",
        [],
        [helper.make_tensor_value_info("then_y", f32, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["else_y"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", f32, None)],
    )
    then_branch.node[0].input.append("x")  # the Loop's carried value starts as x
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "loop_in_if",
        [
            helper.make_tensor_value_info("x", f32, list(shape)),
            helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", f32, list(shape))],
        [
            numpy_helper.from_array(rng.normal(0, 0.2, (16, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(1, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "true"),
        ],
    )
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weight_read_in_a_loop_inside_an_if_stays_in_the_main_graph() -> None:
    original = _loop_in_if_model()
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    before, after = initializer_scopes(original.graph), initializer_scopes(result.model.graph)
    assert after["w"] is None and after["trips"] is None
    assert {t: s for t, s in after.items() if t in before} == {
        t: s for t, s in before.items() if t in after
    }
    rng = np.random.default_rng(0)
    x = rng.normal(1, 2, (2, 5, 16)).astype(np.float32)
    for c in (True, False):
        _assert_close(original, result.model, {"x": x, "c": np.array(c)}, FLOAT32_ATOL)


def _branch_norms_with_row_shaped_weights() -> onnx.ModelProto:
    """Both branches of If(c) layer-normalise x [2, 512] with the outer gamma and beta, stored
    [1, 512] (the fused node needs [512]: the same elements in another shape)."""
    from onnx import TensorProto, helper, numpy_helper

    hidden, rng = 512, np.random.default_rng(12)

    def branch(name: str) -> onnx.GraphProto:
        p = f"{name}_"
        nodes = [
            helper.make_node("ReduceMean", ["x", "axes"], [p + "mean"]),
            helper.make_node("Sub", ["x", p + "mean"], [p + "d"]),
            helper.make_node("Mul", [p + "d", p + "d"], [p + "d2"]),
            helper.make_node("ReduceMean", [p + "d2", "axes"], [p + "var"]),
            helper.make_node("Add", [p + "var", "eps"], [p + "shifted"]),
            helper.make_node("Sqrt", [p + "shifted"], [p + "std"]),
            helper.make_node("Div", [p + "d", p + "std"], [p + "normed"]),
            helper.make_node("Mul", [p + "normed", "gamma"], [p + "scaled"]),
            helper.make_node("Add", [p + "scaled", "beta"], [p + "y"]),
        ]
        out = helper.make_tensor_value_info(p + "y", TensorProto.FLOAT, [2, hidden])
        return helper.make_graph(nodes, name, [], [out])

    axes = numpy_helper.from_array(np.array([-1], np.int64))
    nodes = [
        helper.make_node("Constant", [], ["axes"], value=axes),
        helper.make_node(
            "If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else")
        ),
    ]
    initializers = [
        numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, hidden)).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.normal(0, 0.5, (1, hidden)).astype(np.float32), "beta"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])
    graph = helper.make_graph(nodes, "row_weights", inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_row_shaped_external_weights_are_reshaped_not_copied(tmp_path: Path) -> None:
    """A [1, H] gamma/beta in external data: each branch's fused node reads it through a Reshape;
    nothing is copied inline or into a branch, and both branches compute what they did."""
    source, target = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    target.mkdir()
    original = _branch_norms_with_row_shaped_weights()
    stored = _branch_norms_with_row_shaped_weights()  # onnx.save moves its weights out
    onnx.save(stored, source / "m.onnx", save_as_external_data=True, size_threshold=0)
    result = normfuse.optimize(str(source / "m.onnx"))
    assert [site.kind for site in result.report.sites] == ["layer-norm"] * 2
    normfuse.save(result, target / "m.onnx")
    saved = onnx.load(target / "m.onnx", load_external_data=False)
    for _, scope in graphs_by_scope(saved.graph):
        for tensor in scope.initializer:  # inline only the Reshape targets and epsilon
            external = tensor.data_location == onnx.TensorProto.EXTERNAL
            assert external or len(tensor.raw_data) <= 8, tensor.name
    assert initializer_scopes(saved.graph)["gamma"] is None  # still the main graph's
    fused = onnx.load(target / "m.onnx")
    rng = np.random.default_rng(13)
    for c in (True, False):
        for x in (rng.normal(0, 1, (2, 512)), 1000 + 1e-3 * rng.normal(0, 1, (2, 512))):
            feeds = {"x": x.astype(np.float32), "c": np.array(c)}
            expected, actual = run(original, feeds)[0], run(fused, feeds)[0]
            scale = max(1.0, float(np.abs(expected).max()))
            limit = FLOAT32_ATOL if abs(x.mean()) < 10 else 3e-2  # offset rows: the LN kernel
            assert np.abs(expected - actual).max() <= limit * scale
