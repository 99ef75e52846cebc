"""The norms of 2024-26 models (issue 26): for each committed export of models/recent.py's
architectures and of Gemma 3 (sandwich norms, already in the zoo), the norms PyTorch calls, those
the exporter already wrote as LayerNormalization, and the norm nodes in the output of normfuse,
ONNX Runtime's transformers optimizer (python fusions, `model_type` gpt2 for decoders, mmdit for
DiT/SD3/Flux) and onnxscript's rewriter (`optimize_for_ort`). A tool cell is
`norm nodes / sites`, with ✗ where its output's numerics differ from the original's
(`normfuse.validate`, both ORT levels). Run from the repository root:

    pip install -e ".[benchmarks]" && python tests/benchmarks/new_norms.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import onnx
from coverage import fused_count, normfuse_tool, numerics_ok, onnxscript_tool
from ort_optimizer import ort_transformers_optimize

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from models.recent import RECENT  # noqa: E402

TABLE = (*RECENT, "gemma3")
TOOLS = {
    "normfuse": lambda source, out, architecture: normfuse_tool(source, out),
    "ORT transformers optimizer": ort_transformers_optimize,
    "onnxscript rewriter": lambda source, out, architecture: onnxscript_tool(source, out),
}


def cell(tool, entry: dict, original: onnx.ModelProto, folder: Path) -> tuple[int, str]:
    """(norm nodes in the tool's output, the table cell)."""
    sites = entry["layer_norm_sites"] + entry["rms_norm_sites"]
    out = folder / "out.onnx"
    try:
        tool(ROOT / "models" / entry["file"], out, entry["architecture"])
        candidate = onnx.load(out)
        fused, ok = fused_count(candidate), numerics_ok(original, candidate, entry["dims"])
    except Exception as error:  # a tool that fails on a model is a result too
        print(f"failed on {entry['file']}: {error}", file=sys.stderr)
        return 0, f"failed/{sites}"
    return fused, f"{fused}/{sites}" + ("" if ok else " ✗")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    manifest = json.loads((ROOT / "models" / "manifest.json").read_text())["models"]
    header = ["model", "exporter", "dtype", "sites", "in export", *TOOLS]
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join([' --- '] * 3 + [' ---: '] * 5)}|"]
    totals: Counter = Counter()
    for entry in (e for e in manifest if e["architecture"] in TABLE):
        row = [entry["architecture"], entry["exporter"], entry["dtype"]]
        sites = entry["layer_norm_sites"] + entry["rms_norm_sites"]
        if "export_error" in entry:
            error = entry["export_error"].split(":")[0]
            lines.append(f"| {' | '.join(row)} | {sites} | export failed ({error}) | | | |")
            continue
        original = onnx.load(ROOT / "models" / entry["file"])
        exported = Counter(node.op_type for node in original.graph.node)["LayerNormalization"]
        cells = []
        with tempfile.TemporaryDirectory() as folder:
            for name, tool in TOOLS.items():
                fused, text = cell(tool, entry, original, Path(folder))
                totals[name] += min(fused, sites)
                cells.append(text)
        totals["sites"] += sites
        totals["in export"] += exported
        lines.append(f"| {' | '.join(row)} | {sites} | {exported} | {' | '.join(cells)} |")
        print(f"done {entry['file']}", file=sys.stderr)
    total = [f"{totals[name]}/{totals['sites']}" for name in TOOLS]
    lines.append(
        f"| **total** | | | {totals['sites']} | {totals['in export']} | {' | '.join(total)} |"
    )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
