"""`optimize --with ort-transformers`: ONNX Runtime's transformers optimizer as a stage whose output
is proved against the original by the output guard, with the fusion options that break it found
by bisection and turned off (and reported). No torch, no GPU; the optimizer needs sympy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts, run, run_cli
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("sympy", reason="ORT's transformers optimizer needs sympy")

import normfuse
from normfuse.stages import ort_transformers as ort_stage
from normfuse.stages.model_type import infer_model_type
from normfuse.stages.option_bisection import options_to_turn_off

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "models" / "real"
DIMS = {"batch": 1, "sequence": 16}
STAGE = "ort-transformers"


def stage_of(result: normfuse.OptimizeResult) -> dict:
    """The one stage record of a result, as JSON."""
    (stage,) = result.report.as_dict()["stages"]
    return stage


def lookalike(axis: int = 1) -> onnx.ModelProto:
    """A layer norm spelled as PyTorch exports it, but with its statistics over `axis` (the
    batch or sequence axis of [batch, sequence, hidden]), not the hidden axis: not a layer
    norm."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])
    weights = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gamma"),
        numpy_helper.from_array(np.linspace(-0.1, 0.1, 8).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[axis]),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["variance"], axes=[axis]),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        helper.make_node("Div", ["centred", "deviation"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "lookalike", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bert_opset14", "bert"),
        ("distilbert_opset16", "bert"),
        ("gpt2_opset16", "gpt2"),
        ("llama_opset17", "gpt2"),
        ("qwen3_opset18_dynamo_float32", "gpt2"),
        ("vit_opset16", "vit"),
        ("convnext_opset16", "vit"),
        ("unet_block_opset17", "unet"),
        ("vae_mid_block_opset17", "vae"),
        ("sd3_opset16", "mmdit"),
        ("flux_opset18_dynamo_float32", "mmdit"),
        ("kv/llama_optimum_with_past_opset17", "gpt2"),  # its KV cache is not an image
    ],
)
def test_model_type_is_inferred_from_the_graph(name: str, expected: str) -> None:
    model = onnx.load(REAL / f"{name}.onnx", load_external_data=False)
    assert infer_model_type(model)[0] == expected


def test_a_given_model_type_wins_and_an_unknown_one_is_refused() -> None:
    result = normfuse.optimize(REAL / "llama_opset17.onnx", with_stages=[f"{STAGE}:bert"])
    assert stage_of(result)["model_type"] == "bert"
    assert stage_of(result)["model_type_source"] == "given"
    with pytest.raises(normfuse.NormfuseError, match="unknown model type 'llama'"):
        normfuse.optimize(REAL / "llama_opset17.onnx", with_stages=[f"{STAGE}:llama"])
    with pytest.raises(normfuse.NormfuseError, match="unknown stage"):
        normfuse.optimize(REAL / "llama_opset17.onnx", with_stages=["olive"])
    with pytest.raises(normfuse.NormfuseError, match="needs --target ort"):
        normfuse.optimize(REAL / "llama_opset17.onnx", target="onnx", with_stages=[STAGE])


@pytest.mark.parametrize(
    ("name", "added"),
    [
        ("bert_opset14", {"SkipLayerNormalization": 4, "LayerNormalization": 1}),
        ("llama_opset17", {"SkipSimplifiedLayerNormalization": 4}),
    ],
)
def test_the_composed_output_matches_the_original(name: str, added: dict[str, int]) -> None:
    original = onnx.load(REAL / f"{name}.onnx")
    result = normfuse.optimize(original, with_stages=[STAGE])
    stage = stage_of(result)
    assert stage["status"] == "applied"
    assert stage["turned_off"] == []
    assert added.items() <= stage["ops_added"].items()
    assert added.items() <= op_counts(result.model).items()
    assert result.report.ort_only
    assert result.report.nodes_before == len(original.graph.node)
    assert_same_numerics(original, result.model, DIMS)
    validated = normfuse.optimize(
        original, with_stages=[STAGE], validation=normfuse.ValidationOptions(dims=DIMS)
    )
    assert validated.report.validation.passed  # against the original, not the stage's output


@pytest.mark.parametrize("axis", [0, 1], ids=["batch-axis", "sequence-axis"])
def test_a_wrong_fusion_is_turned_off_with_its_numbers(axis: int) -> None:
    model = lookalike(axis)
    from onnxruntime.transformers.optimizer import optimize_model

    unproved = optimize_model(lookalike(axis), model_type="bert", opt_level=0).model
    assert op_counts(unproved)["LayerNormalization"] == 1  # the optimizer fuses it blindly
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)}
    assert np.abs(run(unproved, feeds)[0] - run(model, feeds)[0]).max() > 0.1

    result = normfuse.optimize(model, with_stages=[STAGE])
    stage = stage_of(result)
    assert stage["status"] == "applied"
    assert [off["option"] for off in stage["turned_off"]] == ["enable_layer_norm"]
    (off,) = stage["turned_off"]
    assert off["reason"] == "output-differs"
    assert "from float64 against the original's" in off["detail"]
    assert "LayerNormalization" not in op_counts(result.model)
    assert np.array_equal(run(result.model, feeds)[0], run(model, feeds)[0])
    assert "turned off enable_layer_norm: output-differs" in result.report.table()


def test_a_crashing_optimizer_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime.transformers.optimizer as optimizer

    def crash(*args, **kwargs):
        raise RuntimeError("boom inside the optimizer")

    monkeypatch.setattr(optimizer, "optimize_model", crash)
    result = normfuse.optimize(REAL / "gpt2_opset16.onnx", with_stages=[STAGE])
    stage = stage_of(result)
    assert stage["status"] == "skipped"
    assert "optimizer-crashed" in stage["detail"]
    assert "boom inside the optimizer" in stage["detail"]
    assert len(result.report.sites) == 5  # normfuse's passes still ran, on the original


def test_a_fusion_that_crashes_the_optimizer_is_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import onnxruntime.transformers.optimizer as optimizer

    real = optimizer.optimize_model

    def crash_on_gelu(model, **kwargs):
        if kwargs["optimization_options"].enable_gelu:
            raise ValueError("gelu fusion crashed")
        return real(model, **kwargs)

    monkeypatch.setattr(optimizer, "optimize_model", crash_on_gelu)
    result = normfuse.optimize(REAL / "gpt2_opset16.onnx", with_stages=[STAGE])
    stage = stage_of(result)
    assert stage["status"] == "applied"
    assert [(o["option"], o["reason"]) for o in stage["turned_off"]] == [
        ("enable_gelu", "optimizer-crashed")
    ]
    assert "gelu fusion crashed" in stage["turned_off"][0]["detail"]
    assert "enable_gelu" not in stage["options_kept"]
    assert stage["ops_added"]["SkipLayerNormalization"] == 4


def test_an_op_without_a_cpu_kernel_turns_its_fusion_off() -> None:
    original = onnx.load(REAL / "unet_block_opset18_dynamo_float32.onnx")
    result = normfuse.optimize(original, with_stages=[STAGE])
    stage = stage_of(result)
    assert stage["model_type"] == "unet"
    off = {entry["option"]: entry for entry in stage["turned_off"]}
    assert "enable_nhwc_conv" in off
    assert "NhwcConv" in off["enable_nhwc_conv"]["detail"]
    assert "NhwcConv" not in op_counts(result.model)
    assert_same_numerics(original, result.model)


def test_a_model_the_guard_cannot_run_is_left_to_normfuse_with_the_reason() -> None:
    result = normfuse.optimize(
        REAL / "kv" / "gpt2_optimum_merged_opset16.onnx", with_stages=[STAGE]
    )
    stage = stage_of(result)
    assert stage["status"] == "skipped"
    assert "cannot run it on generated inputs" in stage["detail"]
    assert result.report.sites  # normfuse's own passes ran on the original
    assert "skipped: the output guard cannot run it" in result.report.table()


def test_the_cli_writes_the_stage_into_the_report(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    done = run_cli(
        capfd,
        "optimize",
        str(REAL / "bert_opset14.onnx"),
        "-o",
        str(out),
        "--with",
        STAGE,
        "--report",
        str(report),
    )
    assert done.returncode == 0, done.stderr
    assert "stage ort-transformers (model_type bert, inferred" in done.stdout
    (stage,) = json.loads(report.read_text())["stages"]
    assert stage["ops_added"]["SkipLayerNormalization"] == 4
    assert op_counts(onnx.load(out))["SkipLayerNormalization"] == 4


def test_the_cli_refuses_a_stage_typo_before_any_work(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out.onnx"
    done = run_cli(
        capfd, "optimize", str(REAL / "bert_opset14.onnx"), "-o", str(out), "--with", "ort"
    )
    assert done.returncode == 2
    assert done.stderr.startswith("normfuse: error: unknown stage 'ort'")
    assert not out.exists()


def test_bisection_turns_off_each_breaking_option_and_nothing_else() -> None:
    options = ["a", "b", "c", "d", "e", "f"]

    def check(off: frozenset[str]) -> str | None:
        on = set(options) - off
        if "b" in on:
            return "b breaks"
        if {"c", "e"} <= on:  # only together
            return "c and e break together"
        return None

    found = options_to_turn_off(options, check)
    assert found == {"b": "b breaks", "e": "c and e break together"}


def test_fusion_flags_leave_the_approximation_and_shape_inference_alone() -> None:
    flags = ort_stage.fusion_flags("unet")
    assert "enable_nhwc_conv" in flags and "enable_group_norm" in flags
    assert "enable_gelu_approximation" not in flags
    assert "enable_shape_inference" not in flags


def _batch_and_hidden_lookalike() -> onnx.ModelProto:
    """Statistics over the batch and hidden axes of x [batch, 4, 8], the batch symbolic: at
    batch 1 it equals a layer norm over the hidden axis, at batch 2 it does not."""
    model = lookalike(0)
    for node in model.graph.node:
        if node.op_type == "ReduceMean":
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("axes", [0, 2]))
    for info in (*model.graph.input, *model.graph.output):
        info.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def test_a_fusion_right_only_at_batch_one_is_turned_off() -> None:
    """A tool's output is also run at batch 2 (adversary 15: at batch 1 alone the optimizer's
    layer norm over the hidden axis matched a norm whose statistics include the batch)."""
    model = _batch_and_hidden_lookalike()
    result = normfuse.optimize(model, with_stages=[STAGE])
    (off,) = stage_of(result)["turned_off"]
    assert (off["option"], off["reason"]) == ("enable_layer_norm", "output-differs")
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)}
    assert_same_numerics(model, result.model, feeds)


def test_a_change_inside_an_if_branch_is_turned_off() -> None:
    """Generated inputs take one branch of an If: a tool's change inside a branch is refused
    (`stage-changed-body`), never left unproved; the record counts ops inside bodies."""
    body = lookalike(2)
    branch = helper.make_graph(
        list(body.graph.node),
        "else",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])],
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["doubled"])],
        "then",
        [],
        [helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [2, 4, 8])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=other, else_branch=branch)],
        "branches",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 8])],
        list(body.graph.initializer),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    result = normfuse.optimize(model, with_stages=[STAGE])
    stage = stage_of(result)
    assert [(off["option"], off["reason"]) for off in stage["turned_off"]] == [
        ("enable_layer_norm", "stage-changed-body")
    ]
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    for cond in (True, False):
        assert_same_numerics(model, result.model, {"cond": np.array(cond), "x": x})
