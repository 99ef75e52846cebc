"""docs/benchmarks.md's table: every committed real model, original vs normfuse (default and
`--tune-for cpu`) vs ONNX Runtime's transformers optimizer (python fusions only: all of them, and
its norm fusions alone), at ORT levels disable and all, CPU, batch 1.

Run on demand (not part of the test suite), from the repository root:

    python tests/benchmarks/performance.py [--runs 200] [--threads 1] [--markdown FILE]

Each cell is the ratio of medians to the original at the same ORT level with its 95% bootstrap
interval (interleaved rounds, see `measure.bench`); "ops" lists the normalisation ops in the graph
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
from normfuse.measure import bench

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "models" / "manifest.json"


VARIANTS = ("normfuse", "normfuse tuned", "ORT optimizer", "ORT optimizer norms only")


def one_model(entry: dict, options: bench.BenchOptions, folder: Path) -> list[dict]:
    path = ROOT / "models" / entry["file"]
    start = time.perf_counter()
    result = normfuse.optimize(path)
    normfuse.save(result, folder / "normfuse.onnx")
    normfuse_seconds = time.perf_counter() - start
    tuned = normfuse.optimize(path, tune_for="cpu")
    for norms_only, name in ((False, "ort.onnx"), (True, "ort_norms.onnx")):
        ort_transformers_optimize(path, folder / name, entry["architecture"], norms_only)
    models = [
        bench.BenchModel("original", onnx.load(path)),
        bench.BenchModel("normfuse", result.model),
        bench.BenchModel("normfuse tuned", tuned.model),
        bench.BenchModel("ORT optimizer", onnx.load(folder / "ort.onnx")),
        bench.BenchModel("ORT optimizer norms only", onnx.load(folder / "ort_norms.onnx")),
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
                    for name in VARIANTS
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
        f"Measured {date.today()} on {platform.machine()}, onnxruntime {ort.__version__}, CPU "
        f"provider, {options.threads} intra-op thread(s), batch 1, {options.runs} interleaved "
        f"runs after {options.warmup} warm-up. Cells: median / original's median [95% interval].",
        "",
        "| model | sites | normfuse s | ORT level | original ms | "
        + " | ".join(VARIANTS)
        + " | norm ops run (original; normfuse; tuned; ORT opt.; ORT opt. norms) |",
        "| --- | ---: | ---: | --- | ---: |" + " --- |" * (len(VARIANTS) + 1),
    ]
    for row in rows:
        ran = "; ".join(ops(row["ops"][name]) for name in ("original", *VARIANTS))
        lines.append(
            f"| {row['model']} | {row['sites']} | {row['normfuse_seconds']:.2f} | {row['level']} "
            f"| {row['original_ms']:.3f} | "
            + " | ".join(cell(row[name]) for name in VARIANTS)
            + f" | {ran} |"
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
