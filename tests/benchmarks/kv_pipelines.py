"""KV-cache decoders (models/real/kv) through four pipelines: the original, normfuse alone, ONNX
Runtime's transformers optimizer alone, and the optimizer then normfuse.

For each model and pipeline it reports: the norm sites left (the manifest's PyTorch count minus the
fused norm nodes in every scope: LayerNormalization, SimplifiedLayerNormalization,
RMSNormalization, Skip*), whether the output loads and runs at ORT levels disable and all on a
decode step and a prefill (the error is printed, never dropped), the largest absolute difference
from the original at level disable over both steps, and the batch-one decode-step latency
(sequence 1, past 32) at ORT's default level (all), one intra-op thread: every runnable output
timed side by side in interleaved rounds (measure.bench), median over the original's median with
a 95% interval over session sets, and the optimizer-then-normfuse median over the optimizer's. No
assertion rests on a time. Not a test; run on demand from the repository root with the
`benchmarks` extra:

    python tests/benchmarks/kv_pipelines.py [--models llama,gpt2] [--runs 60] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from ort_optimizer import model_type, ort_transformers_optimize

import normfuse
from normfuse.ir.placement import graphs_by_scope
from normfuse.measure import bench, intervals
from normfuse.prove import sessions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from models.kv_feeds import export_feeds  # noqa: E402

MANIFEST = ROOT / "models" / "manifest.json"
ORIGINAL, NF, OPT, OPT_NF = "original", "normfuse", "optimizer", "optimizer>normfuse"
PIPELINES = (ORIGINAL, NF, OPT, OPT_NF)
STEPS = {"decode": (1, 32), "prefill": (8, 0)}
NORM_OPS = (
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
)


@dataclass
class Output:
    """One pipeline's output model (None when the pipeline itself failed, with why)."""

    model: onnx.ModelProto | None
    error: str = ""


def _short(error: Exception) -> str:
    """The error's type and the end of its message (ONNX Runtime puts the reason last)."""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {'...' if len(message) > 110 else ''}{message[-110:]}"


def build(path: Path, architecture: str, folder: Path) -> dict[str, Output]:
    """Every pipeline's output for one model file."""
    outputs = {ORIGINAL: Output(onnx.load(path)), NF: Output(normfuse.optimize(path).model)}
    try:
        ort_transformers_optimize(path, folder / "opt.onnx", architecture)
        outputs[OPT] = Output(onnx.load(folder / "opt.onnx"))
    except Exception as error:  # said in the table, not hidden
        outputs[OPT] = outputs[OPT_NF] = Output(None, f"optimizer failed: {_short(error)}")
        return outputs
    try:
        outputs[OPT_NF] = Output(normfuse.optimize(folder / "opt.onnx").model)
    except Exception as error:
        outputs[OPT_NF] = Output(None, f"normfuse failed: {_short(error)}")
    return outputs


def fused_norms(model: onnx.ModelProto) -> int:
    """Fused norm nodes in the main graph and every body."""
    ops = Counter(n.op_type for _, g in graphs_by_scope(model.graph) for n in g.node)
    return sum(ops[op] for op in NORM_OPS)


def run_all(model: onnx.ModelProto, feeds: dict) -> tuple[dict, str]:
    """Outputs at levels disable and all per step, or the first error (level and step named)."""
    results = {}
    for level in ("disable", "all"):
        try:
            session = sessions.create(model, "cpu", level, None)
        except Exception as error:
            return results, f"does not load at level {level}: {_short(error)}"
        for step, step_feeds in feeds.items():
            try:
                results[level, step] = session.run(None, step_feeds)
            except Exception as error:
                return results, f"does not run ({step}, level {level}): {_short(error)}"
    return results, ""


def largest_difference(expected: dict, actual: dict) -> float:
    """Largest |difference| over every output of both steps at level disable."""
    worst = 0.0
    for step in STEPS:
        for a, b in zip(expected["disable", step], actual["disable", step], strict=True):
            if a.size:
                worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    return worst


def measure(entry: dict, options: bench.BenchOptions, threading: bench.Threading) -> dict:
    """One table row: per pipeline, sites left, runs or why not, difference, latency ratio."""
    path = ROOT / "models" / entry["file"]
    expected_sites = entry["layer_norm_sites"] + entry["rms_norm_sites"]
    with tempfile.TemporaryDirectory() as folder:
        outputs = build(path, entry["architecture"], Path(folder))
    original = outputs[ORIGINAL].model
    feeds = {s: export_feeds(original, *STEPS[s], entry["int_input_high"]) for s in STEPS}
    row: dict = {"model": path.stem, "model_type": model_type(entry["architecture"])}
    results, runnable = {}, []
    for name, output in outputs.items():
        cell = {"left": None, "runs": output.error or "", "difference": None}
        if output.model is not None:
            cell["left"] = expected_sites - fused_norms(output.model)
            results[name], cell["runs"] = run_all(output.model, feeds)
            if not output.model.graph.node:  # the optimizer's merged decoders: said plainly
                cell["runs"] = f"empty graph (no node); {cell['runs'] or 'runs'}"
                cell["left"] = None
            if not cell["runs"]:
                cell["runs"] = "yes"
                runnable.append(name)
        row[name] = cell
    if ORIGINAL not in runnable:
        raise RuntimeError(f"the original does not run: {row[ORIGINAL]['runs']}")
    for name in runnable:
        row[name]["difference"] = largest_difference(results[ORIGINAL], results[name])
    models = [bench.BenchModel(name, outputs[name].model) for name in runnable]
    report = bench.run_with_feeds(models, options, feeds["decode"], threading)
    timings = {t.model: t for t in report.timings}
    row["original_ms"] = timings[ORIGINAL].stats_ms()["median"]
    for name in runnable:
        row[name]["ratio"] = [timings[name].ratio, list(timings[name].ratio_interval)]
    if OPT in timings and OPT_NF in timings:
        opt = timings[OPT]
        ratio = intervals.ratio_with_interval(opt.samples, timings[OPT_NF].samples, opt.blocks)
        row["opt_nf_vs_opt"] = [ratio[0], list(ratio[1])]
    row["recommended"] = recommend(row)
    return row


def recommend(row: dict) -> str:
    """Normfuse after the optimizer where that output runs; normfuse alone where it does not."""
    if row[OPT_NF]["runs"] == "yes":
        nothing_left = row[OPT]["left"] == 0
        return "optimizer, then normfuse" + (" (nothing left for it)" if nothing_left else "")
    if row[ORIGINAL]["left"] == 0:
        return "as exported (no norm to fuse; the optimizer fails or its output does not run)"
    return "normfuse alone (the optimizer fails or its output does not run)"


def ratio_cell(pair: list | None) -> str:
    if pair is None:
        return "-"
    ratio, (low, high) = pair
    mark = "" if low <= 1.0 <= high else ("↓" if high < 1.0 else "↑")
    return f"{ratio:.3f} [{low:.3f}, {high:.3f}]{mark}"


def tables(rows: list[dict], options: bench.BenchOptions, failures: list[str]) -> str:
    """The markdown: a header line, the sites/numerics table, the latency table, notes."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        f"Measured {stamp} on {platform.machine()}, onnxruntime {ort.__version__}, CPU, one "
        f"intra-op thread, batch 1, decode step (sequence 1, past 32) at ORT level all, "
        f"{options.runs} interleaved rounds in {options.sessions} session sets "
        f"({options.warmup} warm-up rounds each). Ratio cells: median / original's median "
        "[95% interval over session sets]; ↓ faster, ↑ slower beyond the interval."
    )
    lines = [
        head,
        "",
        "| model | optimizer type | sites left (original; normfuse; optimizer; optimizer>nf) "
        "| runs | max abs diff vs original (normfuse; optimizer; optimizer>nf) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        left = "; ".join("-" if row[n]["left"] is None else str(row[n]["left"]) for n in PIPELINES)
        runs = "; ".join(f"{n}: {row[n]['runs']}" for n in (OPT, OPT_NF) if row[n]["runs"] != "yes")
        diffs = "; ".join(
            "-" if row[n]["difference"] is None else f"{row[n]['difference']:.1e}"
            for n in (NF, OPT, OPT_NF)
        )
        lines.append(
            f"| {row['model']} | {row['model_type']} | {left} | {runs or 'all'} | {diffs} |"
        )
    lines += [
        "",
        "| model | original ms | normfuse | optimizer | optimizer>normfuse "
        "| optimizer>normfuse / optimizer | recommended |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = [ratio_cell(row[n].get("ratio")) for n in (NF, OPT, OPT_NF)]
        lines.append(
            f"| {row['model']} | {row['original_ms']:.3f} | {' | '.join(cells)} | "
            f"{ratio_cell(row.get('opt_nf_vs_opt'))} | {row['recommended']} |"
        )
    lines += [f"\nnot measured: {failure}" for failure in failures]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated words; keep file stems containing one")
    parser.add_argument("--runs", type=int, default=60, help="timed rounds (default 60)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=3, help="session sets")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    options = bench.BenchOptions(
        levels=("all",), runs=args.runs, warmup=args.warmup, threads=1, sessions=args.sessions
    )
    threading = bench.configure_threads(1)
    words = args.models.split(",") if args.models else []
    entries = json.loads(MANIFEST.read_text())["kv_decoders"]
    entries = [entry for entry in entries if "export_error" not in entry]
    rows, failures = [], []
    for entry in entries:
        if words and not any(word in Path(entry["file"]).stem for word in words):
            continue
        try:
            rows.append(measure(entry, options, threading))
        except Exception as error:  # said, not hidden
            failures.append(f"{Path(entry['file']).stem}: {_short(error)}")
        print(f"done {Path(entry['file']).stem}", file=sys.stderr, flush=True)
    text = tables(rows, options, failures)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
