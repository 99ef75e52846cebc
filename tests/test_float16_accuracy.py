"""Every float16 model of the zoo: on ONNX Runtime's CPU provider, at both validation levels, the
fused model is no further from a float64 evaluation than 1.10x the original is, per output.

The float64 evaluation is built here, independently of normfuse: every float16/float32 type,
initializer, constant and Cast target of the original becomes float64, run by ONNX Runtime, or by
ONNX's reference evaluator where ONNX Runtime has no float64 kernel (ViT's Conv)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import normfuse
from normfuse.prove.float64_reference import float64_runner
from normfuse.prove.inputs import make_inputs

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
ENTRIES = [
    entry
    for entry in json.loads((MODELS_DIR / "manifest.json").read_text())["models"]
    if entry.get("dtype") == "float16" and "export_error" not in entry
]
NARROW = {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT}
LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
RATIO = 1.10


def _wide_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float64), tensor.name)


def float64_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every float16/float32 value made float64 (main graph only: the zoo's float16
    exports have no nested bodies, which this asserts)."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    graph = wide.graph
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type in NARROW:
            graph.initializer[index].CopyFrom(_wide_tensor(tensor))
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.tensor_type.elem_type in NARROW:
            info.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    for node in graph.node:
        for attribute in node.attribute:
            assert attribute.type != onnx.AttributeProto.GRAPH, node.name
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i in NARROW:
                attribute.i = onnx.TensorProto.DOUBLE
            if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in NARROW:
                attribute.t.CopyFrom(_wide_tensor(attribute.t))
            if node.op_type == "Constant" and attribute.name in ("value_float", "value_floats"):
                value = np.asarray(onnx.helper.get_attribute_value(attribute), np.float64)
                attribute.CopyFrom(
                    onnx.helper.make_attribute("value", numpy_helper.from_array(value))
                )
    return wide


def float64_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The float64 evaluation of `model` on `feeds` (ONNX Runtime in double, or onnx.reference
    with exact kernels where it has no double kernel: `float64_reference`, itself checked
    against the models' own runs in tests/test_validate.py)."""
    run, how = float64_runner(model)
    assert run is not None, how
    return list(run(feeds))


def _run(model: onnx.ModelProto, level: str, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _distance(output: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(output.astype(np.float64) - reference)))


def test_zoo_has_float16_models() -> None:
    assert len(ENTRIES) >= 10


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_fused_float16_is_as_close_to_float64_as_the_original(entry: dict) -> None:
    """At both targets (ort, onnx; the original's float64 evaluation and runs are shared). At
    target onnx the opset-17 exports are not fused (RMSNormalization needs 23: nothing to check
    there); every other case has fused sites."""
    path = MODELS_DIR / entry["file"]
    original = onnx.load(path)
    symbolic = {
        dim.dim_param
        for info in original.graph.input
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param
    }
    dims = {name: size for name, size in entry["dims"].items() if name in symbolic}
    feeds, _ = make_inputs(original, dims, 0, None)  # the validation inputs
    reference, before = None, {}
    for target in ("ort", "onnx"):
        result = normfuse.optimize(path, target=target)
        if not result.report.sites:
            kept = Counter(node.op_type for node in original.graph.node)
            if entry["layer_norm_sites"] + entry["rms_norm_sites"] == kept["LayerNormalization"]:
                # Nothing to fuse: every norm exported as LayerNormalization (or none, as DyT).
                assert result.report.near_misses == [], target
                continue
            assert target == "onnx"
            assert {miss.reason for miss in result.report.near_misses} == {"opset-too-low"}
            continue
        if reference is None:
            reference = float64_outputs(original, feeds)
            before = {level: _run(original, level, feeds) for level in LEVELS}
        for level in LEVELS:
            after = _run(result.model, level, feeds)
            for index, expected in enumerate(reference):
                original_distance = _distance(before[level][index], expected)
                fused_distance = _distance(after[index], expected)
                assert original_distance > 0, (target, level, index)  # a float16 model rounds
                assert fused_distance <= RATIO * original_distance, (target, level, index)
