"""The README's performance table: every committed real model, original vs normfuse vs ONNX
Runtime's transformers optimizer (python fusions only), at ORT levels disable and all, CPU, batch 1.

Run on demand (not part of the test suite), from the repository root:

    python tests/benchmarks/performance.py [--runs 200] [--threads 1] [--markdown FILE]

Each cell is the ratio of medians to the original at the same ORT level with its 95% bootstrap
interval (interleaved rounds, see `normfuse.bench`); "ops" lists the normalisation ops in the graph
ORT's session optimiser produced, i.e. what ran. `normfuse s` is normfuse's own wall time
(optimize + save).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import onnx
import onnxruntime as ort
from ort_optimizer import ort_transformers_optimize

import normfuse
from normfuse import bench

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "models" / "manifest.json"


def one_model(entry: dict, options: bench.BenchOptions, folder: Path) -> list[dict]:
    path = ROOT / "models" / entry["file"]
    start = time.perf_counter()
    result = normfuse.optimize(path)
    normfuse.save(result, folder / "normfuse.onnx")
    normfuse_seconds = time.perf_counter() - start
    ort_transformers_optimize(path, folder / "ort.onnx", entry["architecture"])
    ort_model = onnx.load(folder / "ort.onnx")
    models = [
        bench.BenchModel("original", onnx.load(path)),
        bench.BenchModel("normfuse", result.model),
        bench.BenchModel("ort-optimizer", ort_model),
    ]
    report = bench.run(models, dataclasses.replace(options, dims=entry["dims"]))
    rows = []
    for level in options.levels:
        timings = {t.model: t for t in report.timings if t.level == level}
        rows.append(
            {
                "model": Path(entry["file"]).stem,
                "sites": len(result.report.sites),
                "normfuse_seconds": normfuse_seconds,
                "level": level,
                "original_ms": timings["original"].stats_ms()["median"],
                **{
                    name: {"ratio": timings[name].ratio, "interval": timings[name].ratio_interval}
                    for name in ("normfuse", "ort-optimizer")
                },
                "ops": {name: t.norm_ops_after_ort for name, t in timings.items()},
            }
        )
    return rows


def cell(result: dict) -> str:
    low, high = result["interval"]
    return f"{result['ratio']:.3f} [{low:.3f}, {high:.3f}]"


def ops(counts: dict) -> str:
    short = {
        "LayerNormalization": "LN",
        "SimplifiedLayerNormalization": "SLN",
        "SkipLayerNormalization": "SkipLN",
        "SkipSimplifiedLayerNormalization": "SkipSLN",
        "RMSNormalization": "RMS",
    }
    return " ".join(f"{short[op]}{n}" for op, n in counts.items()) or "-"


def markdown(rows: list[dict], options: bench.BenchOptions) -> str:
    lines = [
        f"Measured {date.today()} on {platform.machine()} ({platform.processor() or 'cpu'}), "
        f"onnxruntime {ort.__version__}, CPU provider, {options.threads} intra-op thread(s), "
        f"batch 1, {options.runs} interleaved runs after {options.warmup} warm-up.",
        "",
        "| model | sites | normfuse s | ORT level | original ms | normfuse / original | "
        "ORT optimizer / original | norm ops run (original; normfuse; ORT optimizer) |",
        "| --- | ---: | ---: | --- | ---: | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['sites']} | {row['normfuse_seconds']:.2f} | {row['level']} | "
            f"{row['original_ms']:.3f} | {cell(row['normfuse'])} | {cell(row['ort-optimizer'])} | "
            f"{ops(row['ops']['original'])}; {ops(row['ops']['normfuse'])}; "
            f"{ops(row['ops']['ort-optimizer'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", help="comma-separated model file stems")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    options = bench.BenchOptions(
        levels=("disable", "all"), warmup=args.warmup, runs=args.runs, threads=args.threads
    )
    entries = [e for e in json.loads(MANIFEST.read_text())["models"] if "export_error" not in e]
    if args.only:
        entries = [e for e in entries if Path(e["file"]).stem in args.only.split(",")]
    rows = []
    for entry in entries:
        with tempfile.TemporaryDirectory() as folder:
            rows.extend(one_model(entry, options, Path(folder)))
        print(f"done {entry['file']}", file=sys.stderr)
    table = markdown(rows, options)
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
