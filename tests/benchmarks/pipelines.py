"""normfuse inside the pipelines users already run: ONNX Runtime's transformers optimizer
(`optimize_model`) and onnxslim, on every committed zoo model, at ORT levels disable and all, CPU,
batch 1.

Pipelines: the original; the optimizer alone; normfuse alone; normfuse then the optimizer; the
optimizer then normfuse; onnxslim alone (the baseline for the next); onnxslim then normfuse.
For each it prints the ratio of medians to the original at the same ORT level with a 95%
interval over session sets (fresh sessions in several session sets, interleaved rotated rounds, see
`measure.bench`), the normalisation ops ORT
actually ran, the optimizer's own fusion statistics (`get_fused_operator_statistics`: attention,
Skip*LayerNormalization, GELU) in each order, how many sites normfuse fused in each order, and
the largest output difference from the original (ORT level disable). "best / optimizer" is the
faster of the two normfuse+optimizer orders against the optimizer alone, from the same paired
rounds. The last column times the original again (an A/A control): it should read 1 within its
interval; its distance from 1 is this row's leftover noise.

Run on demand (not part of the test suite), from the repository root, with the `benchmarks` extra:

    python tests/benchmarks/pipelines.py [--models bert,llama_opset17] [--quick] [--markdown FILE]

`--models` keeps model file stems containing any of the comma-separated words.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from ort_optimizer import ort_transformers_optimize

import normfuse
from normfuse.measure import bench, intervals
from normfuse.prove import sessions
from normfuse.prove.inputs import graph_inputs, make_inputs

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "models" / "manifest.json"

ORIGINAL, OPT, NF, NF_OPT, OPT_NF, SLIM, SLIM_NF = (
    "original",
    "optimizer",
    "normfuse",
    "normfuse>optimizer",
    "optimizer>normfuse",
    "onnxslim",
    "onnxslim>normfuse",
)
PIPELINES = (ORIGINAL, OPT, NF, NF_OPT, OPT_NF, SLIM, SLIM_NF)
# The original again, in sessions of its own: an A/A control. Before session sets
# (measure.bench), byte-identical models timed side by side here differed by up to ~15%, the one
# created first the slowest; each row shows its own.
CONTROL = "original again (A/A)"
FUSED_GROUPS = {
    "attn": ("Attention", "MultiHeadAttention", "GroupQueryAttention"),
    "skip": ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"),
    "gelu": ("Gelu", "FastGelu", "BiasGelu", "GemmFastGelu"),
}
SHORT_OPS = {
    "LayerNormalization": "LN",
    "SimplifiedLayerNormalization": "SLN",
    "SkipLayerNormalization": "SkipLN",
    "SkipSimplifiedLayerNormalization": "SkipSLN",
    "RMSNormalization": "RMS",
}


@dataclass
class Built:
    """One pipeline's output: the model file, the optimizer's statistics (None when it did not
    run), normfuse's fused-site count (None when it did not run), and its build seconds."""

    path: Path
    optimizer_stats: dict[str, int] | None = None
    normfuse_sites: int | None = None
    seconds: float = 0.0


@dataclass
class Subject:
    """A model to run the pipelines on: a name, its file, its family, and bench dims."""

    name: str
    path: Path
    architecture: str
    dims: dict[str, int] = field(default_factory=dict)


def _normfuse(source: Path, out: Path) -> int:
    result = normfuse.optimize(source)
    normfuse.save(result, out)
    return len(result.report.sites)


def _slim(source: Path, out: Path) -> None:
    import onnxslim

    slimmed = onnxslim.slim(onnx.load(source))
    onnx.save(slimmed, out)


def _timed(step: Callable[[], Built]) -> Built:
    start = time.perf_counter()
    built = step()
    built.seconds = time.perf_counter() - start
    return built


def build_pipelines(subject: Subject, folder: Path) -> dict[str, Built]:
    """Write every pipeline's output for `subject` into `folder`."""
    src, arch = subject.path, subject.architecture
    out = {name: folder / f"{index}.onnx" for index, name in enumerate(PIPELINES)}

    def opt() -> Built:
        return Built(out[OPT], optimizer_stats=ort_transformers_optimize(src, out[OPT], arch))

    def nf() -> Built:
        return Built(out[NF], normfuse_sites=_normfuse(src, out[NF]))

    def nf_opt() -> Built:
        sites = _normfuse(src, folder / "nf_first.onnx")
        stats = ort_transformers_optimize(folder / "nf_first.onnx", out[NF_OPT], arch)
        return Built(out[NF_OPT], stats, sites)

    def opt_nf() -> Built:
        stats = ort_transformers_optimize(src, folder / "opt_first.onnx", arch)
        return Built(out[OPT_NF], stats, _normfuse(folder / "opt_first.onnx", out[OPT_NF]))

    def slim() -> Built:
        _slim(src, out[SLIM])
        return Built(out[SLIM])

    def slim_nf() -> Built:
        return Built(out[SLIM_NF], normfuse_sites=_normfuse(out[SLIM], out[SLIM_NF]))

    steps = {ORIGINAL: lambda: Built(src), OPT: opt, NF: nf, NF_OPT: nf_opt, OPT_NF: opt_nf}
    steps |= {SLIM: slim, SLIM_NF: slim_nf}
    return {name: _timed(step) for name, step in steps.items()}


def max_differences(models: dict[str, bench.BenchModel], dims: dict[str, int]) -> dict[str, float]:
    """Largest absolute difference of every output from the original's (ORT level disable)."""
    feeds, _ = make_inputs(models[ORIGINAL].model, dims, 0)
    outputs = {}
    for name, item in models.items():
        session = sessions.create(item.model, "cpu", "disable", item.base_dir)
        wanted = {info.name for info in session.get_inputs()}
        outputs[name] = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
        del session  # one session at a time (real sizes: memory)
    reference = outputs[ORIGINAL]
    return {
        name: max(
            float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(reference, values, strict=True)
        )
        for name, values in outputs.items()
    }


def prepare(subject: Subject) -> tuple[dict[str, bench.BenchModel], dict[str, Built]]:
    """Every pipeline's output model for `subject` (held in memory), and how each was built."""
    with tempfile.TemporaryDirectory() as folder:
        built = build_pipelines(subject, Path(folder))
        models = {
            name: bench.BenchModel(name, onnx.load(item.path)) for name, item in built.items()
        }
    return models, built


def with_control(models: dict[str, bench.BenchModel]) -> dict[str, bench.BenchModel]:
    """`models` with a copy of the original appended (the A/A control: its own sessions)."""
    control = onnx.ModelProto()
    control.CopyFrom(models[ORIGINAL].model)
    copy = dataclasses.replace(models[ORIGINAL], name=CONTROL, model=control)
    return {**models, CONTROL: copy}


def time_rows(
    name: str,
    models: dict[str, bench.BenchModel],
    built: dict[str, Built],
    dims: dict[str, int],
    options: bench.BenchOptions,
    threading: bench.Threading,
) -> list[dict]:
    """Time `models` side by side at `dims` (the pipelines' outputs first, then any others);
    one row per ORT level."""
    differences = max_differences({n: models[n] for n in PIPELINES if n in models}, dims)
    report = bench.run(list(models.values()), dataclasses.replace(options, dims=dims), threading)
    rows = []
    for level in options.levels:
        timings = {t.model: t for t in report.timings if t.level == level}
        orders = [n for n in (NF_OPT, OPT_NF) if n in timings]
        best = min(orders, key=lambda n: float(np.median(timings[n].samples)))
        best_ratio, best_interval = intervals.ratio_with_interval(
            timings[OPT].samples, timings[best].samples, timings[OPT].blocks
        )
        rows.append(
            {
                "model": name,
                "level": level,
                "original_ms": timings[ORIGINAL].stats_ms()["median"],
                "ratios": {n: [t.ratio, list(t.ratio_interval)] for n, t in timings.items()},
                "best": best,
                "best_vs_optimizer": [best_ratio, list(best_interval)],
                "ops": {n: t.norm_ops_after_ort for n, t in timings.items()},
                "optimizer_stats": {n: b.optimizer_stats for n, b in built.items()},
                "normfuse_sites": {n: b.normfuse_sites for n, b in built.items()},
                "build_seconds": {n: b.seconds for n, b in built.items()},
                "max_abs_difference": differences,
            }
        )
    return rows


def measure(
    subject: Subject, options: bench.BenchOptions, threading: bench.Threading
) -> list[dict]:
    """Build and time every pipeline for `subject`; one row per ORT level."""
    models, built = prepare(subject)
    dims = symbolic_dims(models[ORIGINAL].model, subject.dims)
    return time_rows(subject.name, with_control(models), built, dims, options, threading)


def symbolic_dims(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, int]:
    """The entries of `dims` that name a symbolic dimension of `model`'s inputs (the manifest
    gives batch and sequence for every model; the dynamo exports have static shapes)."""
    known = {
        dim.dim_param
        for info in graph_inputs(model)
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param
    }
    return {name: size for name, size in dims.items() if name in known}


def cell(pair: list) -> str:
    ratio, (low, high) = pair
    mark = "" if low <= 1.0 <= high else ("↓" if high < 1.0 else "↑")
    return f"{ratio:.3f} [{low:.3f}, {high:.3f}]{mark}"


def ops(counts: dict) -> str:
    return " ".join(f"{SHORT_OPS[op]}{n}" for op, n in counts.items()) or "-"


def fused(stats: dict[str, int] | None) -> str:
    """attention/skip/gelu counts from the optimizer's statistics ("-" when it did not run)."""
    if stats is None:
        return "-"
    return "/".join(str(sum(stats.get(op, 0) for op in group)) for group in FUSED_GROUPS.values())


def header(options: bench.BenchOptions, threads: str) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Measured {now} on {platform.machine()} ({platform.processor() or 'cpu'}), "
        f"onnxruntime {ort.__version__}, CPU provider, intra-op threads {threads}, batch 1, "
        f"{options.runs} interleaved rounds in {options.sessions} session sets (fresh sessions, "
        f"{options.warmup} warm-up rounds each). Cells: median / original's median at the same "
        "ORT level [95% interval over session sets]; ↓ faster, ↑ slower "
        "beyond the interval, none: noise."
    )


def latency_table(rows: list[dict], names: tuple[str, ...]) -> str:
    timed = names[1:]
    lines = [
        "| model | ORT level | original ms | "
        + " | ".join(timed)
        + " | best / optimizer | norm ops run ("
        + "; ".join(names)
        + ") |",
        "| --- | --- | ---: |" + " --- |" * (len(timed) + 2),
    ]
    for row in rows:
        ran = "; ".join(ops(row["ops"][name]) for name in names)
        best = f"{cell(row['best_vs_optimizer'])} ({row['best']})"
        lines.append(
            f"| {row['model']} | {row['level']} | {row['original_ms']:.3f} | "
            + " | ".join(cell(row["ratios"][name]) for name in timed)
            + f" | {best} | {ran} |"
        )
    return "\n".join(lines)


def fusion_table(rows: list[dict]) -> str:
    lines = [
        "| model | normfuse sites (alone; after optimizer; after onnxslim) "
        "| optimizer attn/skip/gelu (alone; after normfuse) | max abs diff from original "
        "(optimizer; normfuse; normfuse>opt; opt>normfuse; onnxslim; onnxslim>normfuse) |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        if row["level"] != rows[0]["level"]:  # the same for every level
            continue
        sites = row["normfuse_sites"]
        stats = row["optimizer_stats"]
        diff = row["max_abs_difference"]
        lines.append(
            f"| {row['model']} | {sites[NF]}; {sites[OPT_NF]}; {sites[SLIM_NF]} | "
            f"{fused(stats[OPT])}; {fused(stats[NF_OPT])} | "
            + "; ".join(f"{diff[name]:.1e}" if name in diff else "-" for name in PIPELINES[1:])
            + " |"
        )
    return "\n".join(lines)


def subjects(filters: list[str]) -> list[Subject]:
    entries = [e for e in json.loads(MANIFEST.read_text())["models"] if "export_error" not in e]
    found = [
        Subject(Path(e["file"]).stem, ROOT / "models" / e["file"], e["architecture"], e["dims"])
        for e in entries
    ]
    return [s for s in found if not filters or any(word in s.name for word in filters)]


def parse_common(parser: argparse.ArgumentParser) -> None:
    """Options shared with real_sizes.py."""
    parser.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    parser.add_argument("--runs", type=int, help="timed rounds (default 200, quick 60)")
    parser.add_argument("--warmup", type=int, help="warm-up rounds per session set")
    parser.add_argument("--sessions", type=int, help="session sets (see normfuse.measure.bench)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")


def options_from(
    args: argparse.Namespace, runs: int, quick_runs: int, warmup: int = 20, sessions: int = 6
) -> bench.BenchOptions:
    """Bench options from the shared flags; `warmup` and `sessions` are this script's defaults
    (quick: half the warm-up)."""
    return bench.BenchOptions(
        levels=("disable", "all"),
        runs=args.runs or (quick_runs if args.quick else runs),
        warmup=args.warmup or (max(1, warmup // 2) if args.quick else warmup),
        threads=args.threads,
        sessions=args.sessions or sessions,
    )


def write(args: argparse.Namespace, text: str, rows: list[dict]) -> None:
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated words; keep stems containing one")
    parse_common(parser)
    args = parser.parse_args()
    options = options_from(args, runs=200, quick_runs=60)
    threading = bench.configure_threads(options.threads)
    rows, failures = [], []
    for subject in subjects(args.models.split(",") if args.models else []):
        try:
            rows.extend(measure(subject, options, threading))
        except Exception as error:  # e.g. a pipeline's output that CPU sessions cannot run
            failures.append(f"{subject.name}: {type(error).__name__}: {error}"[:300])
            print(f"failed {failures[-1]}", file=sys.stderr, flush=True)
            continue
        print(f"done {subject.name}", file=sys.stderr, flush=True)
    text = "\n\n".join(
        [
            header(options, threading.label),
            latency_table(rows, (*PIPELINES, CONTROL)),
            fusion_table(rows),
            *(f"not timed: {failure}" for failure in failures),
        ]
    )
    write(args, text + "\n", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
