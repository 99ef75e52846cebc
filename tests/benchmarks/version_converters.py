"""What the available version converters get right on the zoo: each model below opset 23 is
converted to 23 by onnx's `version_converter.convert_version` and, where installed, onnxscript's
`version_converter.convert_version` (no fallback to onnx's), and the result is checked with
`onnx.checker` (full_check), strict shape inference, and ONNX Runtime CPU numerics against the
original (optimisations disabled, the zoo's dtype tolerances).

Run on demand, from the repository root: python tests/benchmarks/version_converters.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

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


if __name__ == "__main__":
    main()
