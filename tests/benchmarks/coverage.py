"""Coverage table: how many normalisation sites each tool fuses on every zoo model, and whether its
output still computes the same thing; and each tool's whole-process time.

Tools: normfuse; ONNX Runtime's transformers optimizer (`optimize_model`, python fusions only,
`model_type` bert/gpt2/t5, gpt2 for decoder LLMs and vit for vision models); ONNX Runtime's own
session optimiser (the graph it saves at level `extended`); onnxscript's rewriter fusions
(`optimize_for_ort`) where onnxscript is installed. A cell is `fused/expected`, where fused is the
number of normalisation nodes in the tool's output (`LayerNormalization`,
`SimplifiedLayerNormalization`, `RMSNormalization`, `Skip*`) and expected the manifest's true count;
`✗` marks a numerical mismatch with the original (ORT, optimisations disabled, dtype tolerances).

Run on demand, from the repository root:

    pip install -e ".[benchmarks]" && python tests/benchmarks/coverage.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

import onnx
from ort_optimizer import model_type, ort_transformers_optimize

import normfuse
from normfuse.measure.bench import NORM_OPS

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def normfuse_tool(source: Path, out: Path) -> None:
    normfuse.save(normfuse.optimize(source), out)


def ort_session_tool(source: Path, out: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def onnxscript_tool(source: Path, out: Path) -> None:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(source))
    optimized, _ = optimize_for_ort(model)
    ir.save(optimized, str(out))


def available_tools() -> dict:
    tools = {
        "normfuse": lambda s, o, a: normfuse_tool(s, o),
        "ORT transformers optimizer": ort_transformers_optimize,
        "ORT session optimizer (extended)": lambda s, o, a: ort_session_tool(s, o),
    }
    try:
        import onnxscript.rewriter.ort_fusions  # noqa: F401

        tools["onnxscript rewriter"] = lambda s, o, a: onnxscript_tool(s, o)
    except ImportError:
        pass
    return tools


def fused_count(model: onnx.ModelProto) -> int:
    return sum(
        count
        for op, count in Counter(n.op_type for n in model.graph.node).items()
        if op in NORM_OPS
    )


def numerics_ok(original: onnx.ModelProto, candidate: onnx.ModelProto, dims: dict) -> bool:
    """`normfuse.validate` of the tool's output against the original (both ORT levels)."""
    try:
        return normfuse.validate(original, candidate, normfuse.ValidationOptions(dims=dims)).passed
    except normfuse.NormfuseError as error:
        print(f"validation error: {error}", file=sys.stderr)
        return False


_PROCESS = {
    "normfuse": "import normfuse; normfuse.save(normfuse.optimize(sys.argv[1]), sys.argv[2])",
    "ORT transformers optimizer": (
        "from onnxruntime.transformers.optimizer import optimize_model; "
        "optimize_model(sys.argv[1], model_type=sys.argv[3], opt_level=0, use_gpu=False, "
        "only_onnxruntime=False).save_model_to_file(sys.argv[2])"
    ),
}


def process_seconds(
    tool: str, source: Path, out: Path, architecture: str, repeats: int = 3
) -> float:
    """Median wall time of a fresh process that loads, rewrites and saves (imports included)."""
    code = "import sys, logging; logging.disable(logging.WARNING); " + _PROCESS[tool]
    args = [
        sys.executable,
        "-c",
        code,
        str(source),
        str(out),
        model_type(architecture),
    ]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    tools = available_tools()
    entries = [
        e
        for e in json.loads((MODELS / "manifest.json").read_text())["models"]
        if "export_error" not in e
    ]
    header = ["model", "expected", *tools]
    timing_header = ["normfuse s", "ORT optimizer s"] if not args.no_timing else []
    lines = [
        f"| {' | '.join(header + timing_header)} |",
        f"|{'|'.join([' --- '] + [' ---: '] * (len(header) + len(timing_header) - 1))}|",
    ]
    totals = Counter()
    for entry in entries:
        source = MODELS / entry["file"]
        original = onnx.load(source)
        expected = entry["layer_norm_sites"] + entry["rms_norm_sites"]
        totals["expected"] += expected
        cells = []
        with tempfile.TemporaryDirectory() as folder:
            for name, tool in tools.items():
                out = Path(folder) / f"{len(cells)}.onnx"
                try:
                    tool(source, out, entry["architecture"])
                    candidate = onnx.load(out)
                    fused, ok = (
                        fused_count(candidate),
                        numerics_ok(original, candidate, entry["dims"]),
                    )
                except Exception as error:  # a tool that fails on a model is a result too
                    print(f"{name} failed on {entry['file']}: {error}", file=sys.stderr)
                    fused, ok = 0, False
                totals[name] += min(fused, expected)
                cells.append(f"{fused}/{expected}" + ("" if ok else " ✗"))
            if not args.no_timing:
                scratch = Path(folder) / "timed.onnx"
                cells += [
                    f"{process_seconds(tool, source, scratch, entry['architecture']):.2f}"
                    for tool in _PROCESS
                ]
        lines.append(f"| {Path(entry['file']).stem} | {expected} | {' | '.join(cells)} |")
        print(f"done {entry['file']}", file=sys.stderr)
    total_cells = [f"{totals[name]}/{totals['expected']}" for name in tools]
    lines.append(
        f"| **total** | {totals['expected']} | {' | '.join(total_cells)} |"
        + (" | |" if not args.no_timing else "")
    )
    table = (
        f"Measured {date.today()}; cells: norm nodes in the tool's output / true count; "
        "✗: outputs differ from the original.\n\n" + "\n".join(lines) + "\n"
    )
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
