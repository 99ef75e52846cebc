"""What the available version converters get right on the zoo: each model below opset 23 is
converted to 23 by onnx's `version_converter.convert_version` and, where installed, onnxscript's
`version_converter.convert_version` (no fallback to onnx's), and the result is checked with
`onnx.checker` (full_check), strict shape inference, and ONNX Runtime CPU numerics against the
original (optimisations disabled, the zoo's dtype tolerances).

Then two cases the zoo does not hold, converted by onnx's converter: a local function whose
`ReduceMean`-17 has an `axes` attribute (raised to 23), and a `GroupNormalization`-18 with
per-group scale and bias (raised to 21).

Run on demand, from the repository root: python tests/benchmarks/version_converters.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import FLOAT32_ATOL, random_inputs, run  # noqa: E402

TARGET = 23


def onnx_converter(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.version_converter.convert_version(model, TARGET)


def onnxscript_converter(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx_ir
    from onnxscript import version_converter

    ir_model = onnx_ir.serde.deserialize_model(model)
    version_converter.convert_version(ir_model, TARGET, fallback=False)
    return onnx_ir.serde.serialize_model(ir_model)


def check(entry: dict, convert: Callable[[onnx.ModelProto], onnx.ModelProto]) -> str:
    """`ok`, or the first check the converted model fails."""
    original = onnx.load(ROOT / "models" / entry["file"])
    try:
        converted = convert(original)
    except Exception as error:  # each converter raises its own types
        return f"convert: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    opset = next(e.version for e in converted.opset_import if e.domain in ("", "ai.onnx"))
    if opset != TARGET:
        return f"left at opset {opset}"
    for name, step in (
        ("checker", lambda: onnx.checker.check_model(converted, full_check=True)),
        (
            "strict inference",
            lambda: onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True),
        ),
    ):
        try:
            step()
        except Exception as error:
            return f"{name}: {str(error).splitlines()[0][:80]}"
    feeds = random_inputs(original, entry["dims"], seed=5, int_high=entry["int_input_high"])
    try:
        expected, actual = run(original, feeds), run(converted, feeds)
    except Exception as error:
        return f"ort: {str(error).splitlines()[0][:80]}"
    for x, y in zip(expected, actual, strict=True):
        error = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
        limit = FLOAT32_ATOL if x.dtype == np.float32 else 1e-2 * float(np.max(np.abs(x)))
        if not error <= limit:
            return f"numerics: max error {error:.3g}"
    return "ok"


def main() -> None:
    manifest = json.loads((ROOT / "models" / "manifest.json").read_text())
    converters = {"onnx": onnx_converter}
    try:
        import onnxscript.version_converter  # noqa: F401

        converters["onnxscript"] = onnxscript_converter
    except ImportError:
        print("onnxscript not installed: its column is left out")
    print("| model | " + " | ".join(converters) + " |")
    print("|---" * (len(converters) + 1) + "|")
    for entry in manifest["models"]:
        if "export_error" in entry or entry["opset"] >= TARGET:
            continue
        cells = [check(entry, convert) for convert in converters.values()]
        print(f"| {Path(entry['file']).name} | " + " | ".join(cells) + " |", flush=True)
    hand_built_cases()


def hand_built_cases() -> None:
    """What onnx's converter does with a local function and with GroupNormalization-18."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])
    body = [helper.make_node("ReduceMean", ["a"], ["b"], axes=[-1])]
    function = helper.make_function("local", "F", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g", [x], [y])
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, opset_imports=imports, functions=[function])
    converted = onnx.version_converter.convert_version(model, TARGET)
    print(f"local function: {len(model.functions)} before, {len(converted.functions)} after")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3])
    weights = [
        helper.make_tensor("s", TensorProto.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("b", TensorProto.FLOAT, [2], [0.0, 1.0]),
    ]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    graph = helper.make_graph([node], "g", [x], [y], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    converted = onnx.version_converter.convert_version(model, 21)
    onnx.checker.check_model(converted, full_check=True)
    print("GroupNormalization-18 -> 21:", [n.op_type for n in converted.graph.node], "checker ok")
    feeds = {"x": np.random.default_rng(0).normal(size=(1, 4, 3)).astype(np.float32)}
    try:
        ort.InferenceSession(converted.SerializeToString()).run(None, feeds)
        print("  ORT runs it")
    except Exception as error:  # ORT raises its own exception types
        print("  ORT refuses it:", str(error).splitlines()[0][:100])


if __name__ == "__main__":
    main()
