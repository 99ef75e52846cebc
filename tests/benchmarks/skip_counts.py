"""Residual (`Skip*LayerNormalization`) fusion on the zoo's dynamic exports (issue 23): per
committed export whose graph inputs have symbolic dims, the Skip* nodes in normfuse's output
(`--passes group-norm,layer-norm,rms-norm,skip-norm`), the residual near-misses it reports (by
reason), and the Skip* nodes in ONNX Runtime's transformers optimizer's output (python fusions,
`model_type` per architecture as in ort_optimizer.py), each output checked with
`normfuse.validate` (both ORT levels; ✗ where it fails or does not run). Run from the repository
root:

    pip install -e ".[benchmarks]" && python tests/benchmarks/skip_counts.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import onnx
from coverage import numerics_ok
from normfuse.passes import DEFAULT_PASS_NAMES
from ort_optimizer import ort_transformers_optimize

import normfuse

ROOT = Path(__file__).resolve().parents[2]
SKIP_OPS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
PASSES = [*DEFAULT_PASS_NAMES, "skip-norm"]


def skip_nodes(model: onnx.ModelProto) -> int:
    """Skip* nodes in `model`'s main graph."""
    return sum(node.op_type in SKIP_OPS for node in model.graph.node)


def is_dynamic(model: onnx.ModelProto) -> bool:
    """Whether a graph input has a symbolic (or unknown) dim."""
    return any(
        not dim.HasField("dim_value")
        for value in model.graph.input
        for dim in value.type.tensor_type.shape.dim
    )


def row(entry: dict, folder: Path) -> tuple[list[str], Counter]:
    """The table row for one export, and its totals."""
    source = ROOT / "models" / entry["file"]
    original = onnx.load(source)
    result = normfuse.optimize(source, passes=PASSES)
    ours = skip_nodes(result.model)
    misses = Counter(miss.reason for miss in result.report.near_misses if miss.kind == "skip-norm")
    ok = numerics_ok(original, result.model, entry["dims"])
    out = folder / "ort.onnx"
    try:
        ort_transformers_optimize(source, out, entry["architecture"])
        candidate = onnx.load(out)
        theirs, their_ok = skip_nodes(candidate), numerics_ok(original, candidate, entry["dims"])
        their_cell = f"{theirs}" + ("" if their_ok else " ✗")
    except Exception as error:  # a tool that fails on a model is a result too
        print(f"ORT optimizer failed on {entry['file']}: {error}", file=sys.stderr)
        theirs, their_cell = 0, "failed"
    reasons = ", ".join(f"{reason} {n}" for reason, n in misses.most_common()) or "-"
    cells = [entry["file"].removeprefix("real/"), f"{ours}" + ("" if ok else " ✗"), reasons]
    return [*cells, their_cell], Counter(normfuse=ours, ort=theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    manifest = json.loads((ROOT / "models" / "manifest.json").read_text())["models"]
    header = ["export", "normfuse Skip*", "normfuse residual near-misses", "ORT optimizer Skip*"]
    lines = [f"| {' | '.join(header)} |", "| --- | ---: | --- | ---: |"]
    totals: Counter = Counter()
    with tempfile.TemporaryDirectory() as folder:
        for entry in manifest:
            if "export_error" in entry:
                continue
            if not is_dynamic(onnx.load(ROOT / "models" / entry["file"], load_external_data=False)):
                continue
            cells, counts = row(entry, Path(folder))
            totals += counts
            lines.append(f"| {' | '.join(cells)} |")
            print(f"done {entry['file']}", file=sys.stderr)
    lines.append(f"| **total** | {totals['normfuse']} | | {totals['ort']} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
