"""OpenVINO (CPU) on a few zoo models: the original against its `--target onnx` output, numerics
(largest absolute difference to ONNX Runtime CPU with optimisations off, on the same inputs) and
latency side by side (normfuse's bench, OpenVINO at f32), with the normalisation operations
OpenVINO's own transformations leave in each compiled graph. Then whether OpenVINO also loads the
ONNX Runtime-only forms of `--target ort` (SimplifiedLayerNormalization, LayerNormalization below
opset 17, com.microsoft Skip*LayerNormalization from `skip-norm`).

Run on demand, from the repository root (needs the `openvino` extra):

    python tests/benchmarks/openvino_targets.py [--runs N] [MODEL.onnx ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
from helpers import random_inputs, run  # noqa: E402

import normfuse  # noqa: E402
from models.builders import LayerNormSpec, RmsNormSpec, norm_model  # noqa: E402
from normfuse.measure import bench  # noqa: E402
from normfuse.prove import sessions  # noqa: E402

DEFAULT = [
    "bert_opset14.onnx",
    "gpt2_opset16.onnx",
    "vit_opset16.onnx",
    "llama_opset17.onnx",
    "qwen3_opset17.onnx",
    "t5_encoder_opset17.onnx",
    "llama_opset17_torchscript_float16.onnx",
]


def max_error(expected: np.ndarray, actual: np.ndarray) -> float:
    return float(np.max(np.abs(expected.astype(np.float64) - actual.astype(np.float64))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    entries = {
        Path(e["file"]).name: e
        for e in json.loads((ROOT / "models/manifest.json").read_text())["models"]
    }
    print(
        "| model | fused sites | max abs vs ORT: original on OV | --target onnx on OV "
        "| OV norm ops: original / standard | OV median ms: original / standard (ratio [95%]) |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.models:
        entry = entries[name]
        original = onnx.load(ROOT / "models/real" / name)
        result = normfuse.optimize(original, target="onnx")
        feeds = random_inputs(original, entry["dims"], seed=7, int_high=entry["int_input_high"])
        reference = run(original, feeds)[0]
        errors = [
            max_error(reference, sessions.create(model, "openvino").run(None, feeds)[0])
            for model in (original, result.model)
        ]
        models = [
            bench.BenchModel("original", original),
            bench.BenchModel("standard", result.model),
        ]
        options = bench.BenchOptions(
            providers=("openvino",), warmup=10, runs=args.runs, threads=1, dims=entry["dims"]
        )
        timings = bench.run(models, options).timings
        ops = " / ".join(
            ", ".join(f"{k} {v}" for k, v in t.norm_ops_after_ort.items()) or "none"
            for t in timings
        )
        medians = [t.stats_ms()["median"] for t in timings]
        low, high = timings[1].ratio_interval
        ratio = f"{timings[1].ratio:.3f} [{low:.3f}, {high:.3f}]"
        print(
            f"| {name} | {len(result.report.sites)} | {errors[0]:.2g} | {errors[1]:.2g} | {ops} "
            f"| {medians[0]:.3f} / {medians[1]:.3f} ({ratio}) |",
            flush=True,
        )
    print("\n| --target ort output | fused ops | on OpenVINO |\n|---|---|---|")
    ort_forms(entries)


def ort_forms(entries: dict) -> None:
    """`--target ort` output on OpenVINO: loads or not, and the largest difference to ORT."""
    cases = [
        (name, onnx.load(ROOT / "models/real" / name), None, entries[name])
        for name in ("llama_opset17.onnx", "bert_opset14.onnx")
    ]
    for spec, passes in (
        (LayerNormSpec(), "layer-norm,skip-norm"),
        (RmsNormSpec(), "rms-norm,skip-norm"),
    ):
        model = norm_model(spec, shape=(2, 7, 32), layers=3)
        cases.append(
            (f"3-block builder, {passes}", model, passes, {"dims": {}, "int_input_high": 16})
        )
    for name, original, passes, entry in cases:
        fused = normfuse.optimize(original, target="ort", passes=passes).model
        ops = sorted(
            {
                f"{n.domain or 'ai.onnx'}.{n.op_type}"
                for n in fused.graph.node
                if "Norm" in n.op_type
            }
        )
        feeds = random_inputs(original, entry["dims"], seed=7, int_high=entry["int_input_high"])
        try:
            actual = sessions.create(fused, "openvino").run(None, feeds)[0]
            outcome = f"loads, max abs {max_error(run(original, feeds)[0], actual):.2g}"
        except normfuse.NormfuseError as error:
            outcome = f"refused: {error}"
        print(f"| {name} | {', '.join(ops)} | {outcome} |", flush=True)


if __name__ == "__main__":
    main()
