"""`optimize --with ort-transformers` on zoo models: the optimizer alone, normfuse alone and the
composed step, each judged against the original by the output guard (loads, runs, matches) and
timed with `normfuse bench` (CPU, batch one, one intra-op thread, ORT level `all`).

"optimizer alone" is `optimize_model` as the stage calls it with nothing turned off (the
`model_type` the stage infers, opt_level 0, raw attention mask, no GELU approximation): what a
user who runs the optimizer unchecked gets. Run on demand from the repository root (needs sympy):

    python tests/benchmarks/ort_stage_table.py [--models bert_opset14,llama_opset17] [--runs 200]

It prints one Markdown table (docs/pipelines.md, "The optimizer as a proved stage").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import onnx
import onnxruntime as ort

import normfuse
from normfuse.errors import NormfuseError
from normfuse.prove import sessions
from normfuse.prove.guard import OutputGuard
from normfuse.prove.inputs import SMALL_PROBE, WIDE_PROBE, symbolic_dims
from normfuse.stages import ort_transformers as ort_stage
from normfuse.stages.model_type import infer_model_type

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "models" / "manifest.json"
MODELS = (
    "bert_opset14",
    "distilbert_opset16",
    "deberta_v2_opset16_torchscript_float16",
    "gpt2_opset16",
    "llama_opset17",
    "llama_opset17_torchscript_float16",
    "llama_opset18_dynamo_float32",
    "qwen3_opset18_dynamo_float32",
    "phi3_opset16_torchscript_float16",
    "t5_encoder_opset17",
    "vit_opset16",
    "convnext_opset16",
    "sd3_opset16_torchscript_float16",
    "unet_block_opset17",
    "vae_mid_block_opset17",
    "whisper_encoder_opset16",
)
PIPELINES = ("optimizer", "normfuse", "composed")
NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(")


def verdict(original: onnx.ModelProto, candidate: onnx.ModelProto | None, why: str = "") -> str:
    """loads / runs / matches against the original, by the output guard's checks (at the small
    sizes and at batch 2 with padded masks, as the stage proves its output)."""
    if candidate is None:
        return f"crashed ({why})"
    try:
        sessions.create(candidate, "cpu", "disable")
    except NormfuseError as error:
        missing = NO_KERNEL.search(str(error))
        return f"does not load ({f'no CPU kernel for {missing[1]}' if missing else error})"
    guards = [OutputGuard(original, probe=probe) for probe in (SMALL_PROBE, WIDE_PROBE)]
    failure = next(
        (found for guard in guards if (found := guard.failure(candidate, ort_only=True))), None
    )
    if failure is None:
        repaired = guards[0].repair_failure(candidate, ort_only=True)
        return "matches (repair)" if repaired else "matches"
    if failure.reason == "output-does-not-run":
        return f"does not run ({failure.detail[:90]})"
    return f"differs: {failure.reason} ({failure.detail[:140]})"


def outputs(name: str, folder: Path) -> tuple[dict[str, Path], dict[str, str], str]:
    """Each pipeline's output saved in `folder`, its verdict, and the composed step's stage
    line (what was turned off)."""
    source = ROOT / "models" / "real" / f"{name}.onnx"
    original = onnx.load(source)
    model_type, _ = infer_model_type(original)
    paths, verdicts = {"original": source}, {}
    attempt = ort_stage.run_optimizer(original, model_type, frozenset())
    why = attempt.failure.detail if attempt.failure else ""
    verdicts["optimizer"] = verdict(original, attempt.model, why)
    if attempt.model is not None:
        paths["optimizer"] = folder / f"{name}.optimizer.onnx"
        onnx.save(attempt.model, paths["optimizer"])
    alone = normfuse.optimize(original)
    composed = normfuse.optimize(original, with_stages=[ort_stage.NAME])
    for label, result in (("normfuse", alone), ("composed", composed)):
        verdicts[label] = verdict(original, result.model)
        paths[label] = folder / f"{name}.{label}.onnx"
        normfuse.save(result, paths[label])
    (stage,) = composed.report.stages
    off = ", ".join(f"{o['option']} ({o['reason']})" for o in stage.turned_off)
    summary = stage.detail if stage.status != "applied" else (off or "none")
    return paths, verdicts, f"{model_type}; {stage.status}; turned off: {summary}"


def bench(name: str, paths: dict[str, Path], runs: int, folder: Path) -> dict[str, str]:
    """`normfuse bench` of the loadable outputs against the original: ratio [interval]."""
    loadable = {label: path for label, path in paths.items() if _loads(path)}
    original = onnx.load(paths["original"], load_external_data=False)
    dims = _manifest_dims(name)
    given = {k: v for k, v in dims.items() if k in symbolic_dims(original)}
    report = folder / f"{name}.bench.json"
    command = [sys.executable, "-m", "normfuse", "bench", *map(str, loadable.values())]
    command += ["--threads", "1", "--level", "all", "--runs", str(runs), "--quiet"]
    command += ["--report", str(report)]
    if given:
        command += ["--dims", ",".join(f"{k}={v}" for k, v in given.items())]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        line = (done.stderr.strip().splitlines() or ["?"])[-1][:160]
        return {"original ms": "-", **dict.fromkeys(PIPELINES, f"bench failed: {line}")}
    timings = json.loads(report.read_text())["timings"]
    cells = {"original ms": f"{timings[0]['median_ms']:.3f}"}
    for label, timing in zip(loadable, timings, strict=True):
        if label == "original":
            continue
        low, high = timing["ratio_interval_95"]
        mark = {"faster": "↓", "slower": "↑"}.get(timing["verdict"] or "", "")
        cells[label] = f"{timing['ratio_to_first']:.3f} [{low:.3f}, {high:.3f}]{mark}"
    return cells


def _loads(path: Path) -> bool:
    try:
        sessions.create(onnx.load(path), "cpu", "disable")
    except NormfuseError:
        return False
    return True


def _manifest_dims(name: str) -> dict[str, int]:
    for entry in json.loads(MANIFEST.read_text())["models"]:
        if entry["file"] == f"real/{name}.onnx":
            return entry.get("dims", {})
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo stems (default: a fixed set)")
    parser.add_argument("--runs", type=int, default=200, help="bench rounds (default 200)")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else list(MODELS)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"Measured {when}, onnxruntime {ort.__version__}, CPU, 1 thread, level all\n")
    header = ["model", "stage (model_type; status; turned off)"]
    header += [f"{p}: verdict" for p in PIPELINES]
    header += ["original ms", *(f"{p} / original" for p in PIPELINES)]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for name in names:
            paths, verdicts, stage = outputs(name, folder)
            times = bench(name, paths, args.runs, folder)
            row = [name, stage, *(verdicts[p] for p in PIPELINES), times["original ms"]]
            row += [times.get(p, "not timed (does not load)") for p in PIPELINES]
            print("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
