"""Coverage table: how many normalisation sites each tool fuses on every zoo model, whether its
output still loads and computes the same thing, and each tool's whole-process time.

Each tool runs with its own defaults first, then with the setting a comparison may want; every
column names its settings and the installed version (`TOOLS`):

- normfuse: `normfuse.optimize(path)` (defaults: `--target ort`, every default pass).
- ONNX Runtime's transformers optimizer, `optimize_model(path, model_type=...)` at its defaults
  (`opt_level=None`: the model type's own level, 0, 1 or 2, whose ORT session passes run before
  the python fusions; `FusionOptions(model_type)`), and again with `opt_level=0` (python fusions
  only). `model_type` per architecture as in ort_optimizer.py (gpt2 for decoder LLMs).
- ONNX Runtime's session optimiser: the graph an `InferenceSession` saves at its default level
  (`ORT_ENABLE_ALL`) and at `ORT_ENABLE_EXTENDED`.
- onnxsim: `onnxsim.simplify(path)` at its defaults, and with `target_opset_version=23` (opset
  23 brings `RMSNormalization`).
- onnxscript: `onnxscript.rewriter.ort_fusions.optimize_for_ort(onnx_ir.load(path))`.

Every tool runs in a fresh process of its own (`--run`) under a timeout, so a crash or a hang is
one cell; that process's wall time (imports, load, rewrite, save) is the tool's time.

Counting. A site counts as fused when one norm node normalises it (computes the variance or
mean square and divides by it): `LayerNormalization`, `SimplifiedLayerNormalization`,
`RMSNormalization`, `Skip*`, `GroupNormalization`, `InstanceNormalization` or `GroupNorm` in the
output's main graph; nodes an exporter already wrote count for every tool that keeps them. A
layer norm in several standard nodes, `RMSNormalization` (or `SimplifiedLayerNormalization`) of
`x - mean(x)` with the mean a `ReduceMean` and a `Sub` and any bias an `Add` (onnxsim's form at
opset 23), counts as fused and is marked `†n`: n of the counted nodes are that form. A cell is
`norm nodes/expected`, expected being the manifest's norm calls counted in PyTorch (layer, RMS
and group norms). Marks: `✗` the output differs from the original beyond dtype tolerances
(`normfuse.validate`: ONNX Runtime with optimisations disabled and at its default level, against
a float64 evaluation); `⊘` the output does not load or run in ONNX Runtime; `?` it could not be
compared (`validate` refused it); `failed`/`timeout` the tool itself did not finish (its error on
stderr and in `--json`). A grouped row adds, per model, at most `expected` sites, and only from
outputs that load, run and match; it counts the marked models in brackets.

Run on demand, from the repository root (the compared versions: pyproject's `benchmarks` extra;
ONNX Runtime's transformers optimizer imports torch at an `opt_level` above 0, its default):

    pip install -e ".[benchmarks]" -c .ci/constraints.txt && pip install torch
    python tests/benchmarks/coverage.py --markdown coverage.md --json coverage.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from importlib import metadata, util
from pathlib import Path
from typing import Any

from ort_optimizer import model_type, ort_transformers_optimize

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
CENTRED = "†"
MARKS = {"mismatch": "✗", "does-not-run": "⊘", "not-compared": "?"}
EXPORTERS = {"torchscript": "TorchScript", "dynamo": "dynamo"}


def normfuse_tool(source: Path, out: Path) -> None:
    """normfuse at its defaults."""
    import normfuse

    normfuse.save(normfuse.optimize(source), out)


def ort_session_tool(source: Path, out: Path, level: str = "ORT_ENABLE_ALL") -> None:
    """The graph ONNX Runtime's CPU session saves after optimising at `level`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def onnxsim_tool(source: Path, out: Path, **settings: Any) -> None:
    """`onnxsim.simplify` with `settings` (none: its defaults)."""
    import onnx
    import onnxsim

    simplified, _ = onnxsim.simplify(str(source), **settings)
    onnx.save(simplified, out)


def onnxscript_tool(source: Path, out: Path) -> None:
    """onnxscript's ONNX Runtime fusions (`optimize_for_ort`)."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(source))
    optimized, _ = optimize_for_ort(model)
    ir.save(optimized, str(out))


@dataclass(frozen=True)
class Tool:
    """A compared tool at one setting: its column header, the distribution whose version it
    reports, the exact call (the legend) and how to run it (source, out, architecture)."""

    column: str
    package: str
    call: str
    run: Callable[[Path, Path, str], object]


TOOLS = {
    "normfuse": Tool(
        "normfuse", "normfuse", "normfuse.optimize(path)", lambda s, o, a: normfuse_tool(s, o)
    ),
    "ort-optimizer": Tool(
        "ORT optimizer, defaults",
        "onnxruntime",
        "optimize_model(path, model_type=T) (opt_level=None, use_gpu=False, FusionOptions(T))",
        lambda s, o, a: ort_transformers_optimize(s, o, a, opt_level=None),
    ),
    "ort-optimizer-0": Tool(
        "ORT optimizer, opt_level 0",
        "onnxruntime",
        "optimize_model(path, model_type=T, opt_level=0): python fusions only",
        lambda s, o, a: ort_transformers_optimize(s, o, a, opt_level=0),
    ),
    "ort-session": Tool(
        "ORT session, all (default)",
        "onnxruntime",
        "InferenceSession(path, SessionOptions(optimized_model_filepath=out)), CPU, "
        "level ORT_ENABLE_ALL (the default)",
        lambda s, o, a: ort_session_tool(s, o),
    ),
    "ort-session-extended": Tool(
        "ORT session, extended",
        "onnxruntime",
        "the same at graph_optimization_level=ORT_ENABLE_EXTENDED",
        lambda s, o, a: ort_session_tool(s, o, "ORT_ENABLE_EXTENDED"),
    ),
    "onnxsim": Tool(
        "onnxsim, defaults",
        "onnxsim",
        "onnxsim.simplify(path)",
        lambda s, o, a: onnxsim_tool(s, o),
    ),
    "onnxsim-23": Tool(
        "onnxsim, opset 23",
        "onnxsim",
        "onnxsim.simplify(path, target_opset_version=23)",
        lambda s, o, a: onnxsim_tool(s, o, target_opset_version=23),
    ),
    "onnxscript": Tool(
        "onnxscript",
        "onnxscript",
        "onnxscript.rewriter.ort_fusions.optimize_for_ort(onnx_ir.load(path)), onnx_ir.save",
        lambda s, o, a: onnxscript_tool(s, o),
    ),
}
# The import each tool needs; a tool whose module is missing is left out of the table.
MODULES = {"onnxruntime": "onnxruntime", "onnxsim": "onnxsim", "onnxscript": "onnxscript"}
VERSIONS = ("normfuse", "onnxruntime", "onnxsim", "onnxscript", "onnx_ir", "onnx", "sympy", "torch")


def installed_versions() -> dict[str, str]:
    """The installed version of every package the table depends on ('absent' where missing)."""
    versions = {}
    for package in VERSIONS:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "absent"
    return versions


def available_tools() -> list[str]:
    """The tools whose package can be imported here."""
    return [
        key
        for key, tool in TOOLS.items()
        if tool.package not in MODULES or util.find_spec(MODULES[tool.package]) is not None
    ]


def norm_nodes(model: Any) -> tuple[int, int]:
    """(norm nodes in the main graph, how many of them are `RMSNormalization` or
    `SimplifiedLayerNormalization` of `x - ReduceMean(x)`, through Transposes and Casts: a layer
    norm whose mean is computed outside the norm node)."""
    from normfuse.measure.bench import NORM_OPS

    producer = {name: node for node in model.graph.node for name in node.output}
    norms = [node for node in model.graph.node if node.op_type in NORM_OPS]
    centred = 0
    for node in norms:
        if node.op_type not in ("RMSNormalization", "SimplifiedLayerNormalization"):
            continue
        sub = producer.get(node.input[0])
        while sub is not None and sub.op_type in ("Transpose", "Cast"):
            sub = producer.get(sub.input[0])
        if sub is None or sub.op_type != "Sub" or len(sub.input) != 2:
            continue
        mean = producer.get(sub.input[1])
        centred += (
            mean is not None and mean.op_type == "ReduceMean" and mean.input[0] == sub.input[0]
        )
    return len(norms), centred


def fused_count(model: Any) -> int:
    """Norm nodes in the model's main graph (see `norm_nodes`)."""
    return norm_nodes(model)[0]


def check(original: Any, candidate: Any, dims: dict) -> tuple[str, str]:
    """(status, detail) of `candidate` against `original` under `normfuse.validate`: ok,
    mismatch, does-not-run or not-compared."""
    import normfuse

    try:
        report = normfuse.validate(original, candidate, normfuse.ValidationOptions(dims=dims))
    except normfuse.NormfuseError as error:
        return "not-compared", str(error).splitlines()[0]
    failed = [
        output.detail
        for run in report.runs
        for output in run.outputs
        if output.detail.startswith("the candidate failed to run")
    ]
    if failed:
        return "does-not-run", failed[0]
    return ("ok", "") if report.passed else ("mismatch", "outputs differ beyond tolerance")


def numerics_ok(original: Any, candidate: Any, dims: dict) -> bool:
    """True when `candidate` loads, runs and matches `original` (see `check`)."""
    status, detail = check(original, candidate, dims)
    if status != "ok":
        print(f"{status}: {detail}", file=sys.stderr)
    return status == "ok"


def run_tool(key: str, entry: dict, out: Path, timeout: float) -> dict:
    """Run one tool on one model in a fresh process; then count and check its output."""
    import onnx

    source = MODELS / entry["file"]
    command = [sys.executable, __file__, "--run", key, str(source), str(out), entry["architecture"]]
    out.unlink(missing_ok=True)  # never read the previous model's output
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"over {timeout:.0f} s"}
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        return {"status": "failed", "detail": lines[-1], "seconds": seconds}
    try:
        candidate = onnx.load(out)
    except Exception as error:  # an output that does not parse is a result too
        return {"status": "does-not-run", "detail": f"onnx.load: {error}", "seconds": seconds}
    fused, centred = norm_nodes(candidate)
    status, detail = check(onnx.load(source), candidate, entry["dims"])
    return {
        "status": status,
        "detail": detail,
        "seconds": seconds,
        "fused": fused,
        "centred": centred,
    }


def expected_sites(entry: dict) -> int:
    """The norm calls counted in PyTorch: layer, RMS and group norms."""
    return entry["layer_norm_sites"] + entry["rms_norm_sites"] + entry.get("group_norm_sites", 0)


def measure(tools: list[str], only: str | None, timeout: float) -> dict:
    """Every tool on every exported zoo model (file names containing `only`, if given)."""
    from onnxruntime.transformers.optimizer import MODEL_TYPES

    manifest = json.loads((MODELS / "manifest.json").read_text())["models"]
    entries = [e for e in manifest if "export_error" not in e and (only or "") in e["file"]]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for entry in entries:
            cells = {}
            for key in tools:
                cells[key] = run_tool(key, entry, Path(folder) / f"{key}.onnx", timeout)
                if cells[key]["status"] in ("failed", "timeout"):
                    print(
                        f"{key} {cells[key]['status']} on {entry['file']}: {cells[key]['detail']}",
                        file=sys.stderr,
                    )
            rows.append(
                {
                    "file": entry["file"],
                    "exporter": entry["exporter"],
                    "dtype": entry["dtype"],
                    "model_type": model_type(entry["architecture"]),
                    "expected": expected_sites(entry),
                    "tools": cells,
                }
            )
            print(f"done {entry['file']}", file=sys.stderr)
    used = sorted({row["model_type"] for row in rows})
    return {
        "date": str(date.today()),
        "command": " ".join(["python", "tests/benchmarks/coverage.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "versions": installed_versions(),
        "ort_default_opt_level": {t: MODEL_TYPES[t][2] for t in used},
        "tools": tools,
        "rows": rows,
    }


def cell(result: dict, expected: int) -> str:
    """One model's cell: `fused/expected`, `†n`, and a mark."""
    if result["status"] in ("failed", "timeout"):
        return result["status"]
    text = f"{result['fused']}/{expected}"
    if result["centred"]:
        text += f" {CENTRED}{result['centred']}"
    return text + (f" {MARKS[result['status']]}" if result["status"] in MARKS else "")


def total_cell(rows: list[dict], key: str) -> str:
    """A group's cell: sites fused (at most `expected` per model) in the outputs that load, run
    and match the original, `†n` among them, and how many models' outputs are marked (and not
    counted)."""
    good = [r for r in rows if r["tools"][key]["status"] == "ok"]
    fused = sum(min(r["tools"][key]["fused"], r["expected"]) for r in good)
    centred = sum(r["tools"][key]["centred"] for r in good)
    text = f"{fused}" + (f" {CENTRED}{centred}" if centred else "")
    marks = Counter(r["tools"][key]["status"] for r in rows)
    notes = [
        f"{count} {MARKS.get(status, status)}"
        for status, count in sorted(marks.items())
        if status != "ok"
    ]
    return text + (f" ({', '.join(notes)})" if notes else "")


def legend(results: dict) -> str:
    """Date, versions, the command and every column's exact settings."""
    versions = results["versions"]
    levels: dict[int, list[str]] = {}
    for model, level in results["ort_default_opt_level"].items():
        levels.setdefault(level, []).append(model)
    resolved = "; ".join(f"{level} for {', '.join(m)}" for level, m in sorted(levels.items()))
    lines = [
        f"Measured {results['date']} with `{results['command']}` (Python {results['python']}; "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + ").",
        "",
        "| column | version | exact call |",
        "| --- | --- | --- |",
        *(
            f"| {TOOLS[key].column} | {TOOLS[key].package} {versions[TOOLS[key].package]} | "
            f"`{TOOLS[key].call}` |"
            for key in results["tools"]
        ),
        "",
        f"`T`: the model type per architecture (tests/benchmarks/ort_optimizer.py); "
        f"`opt_level=None` resolved to {resolved}.",
        "",
        "Per model: norm nodes in the output / norm calls in PyTorch (one fused node per site: "
        "`LayerNormalization`, `SimplifiedLayerNormalization`, `RMSNormalization`, `Skip*`, "
        "`GroupNormalization`, `InstanceNormalization`, `GroupNorm`). "
        f"{CENTRED}n: n of those nodes are `RMSNormalization` or `SimplifiedLayerNormalization` "
        "of `x - mean(x)`: a layer norm in several nodes (the mean a `ReduceMean` and a `Sub`, "
        "any bias an `Add`), counted as fused. "
        "✗: the output differs from the original beyond dtype tolerances; ⊘: it does not load "
        "or run in ONNX Runtime (CPU, at a level `normfuse validate` checks: disabled or all); "
        "?: `validate` could not compare it; failed/timeout: the tool did not finish. Grouped "
        "rows add the sites (at most the expected count per model) of the outputs that load, "
        "run and match; the marked models are counted in brackets, their nodes not added.",
    ]
    return "\n".join(lines) + "\n"


def per_model_table(results: dict) -> str:
    """One row per model."""
    keys = results["tools"]
    lines = [
        f"| model | expected | {' | '.join(TOOLS[k].column for k in keys)} |",
        f"|{'|'.join([' --- '] + [' ---: '] * (len(keys) + 1))}|",
    ]
    for row in results["rows"]:
        cells = [cell(row["tools"][k], row["expected"]) for k in keys]
        lines.append(f"| {Path(row['file']).stem} | {row['expected']} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def summary_table(results: dict) -> str:
    """Models grouped by exporter and dtype, then a total row."""
    keys, rows = results["tools"], results["rows"]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(f"{EXPORTERS[row['exporter']]}, {row['dtype']}", []).append(row)
    headers = " | ".join(TOOLS[k].column for k in keys)
    lines = [
        f"| exports | models | norm calls | {headers} |",
        f"|{'|'.join([' --- '] + [' ---: '] * (len(keys) + 2))}|",
    ]
    for name, group in [*groups.items(), ("**total**", rows)]:
        cells = [total_cell(group, k) for k in keys]
        expected = sum(r["expected"] for r in group)
        lines.append(f"| {name} | {len(group)} | {expected} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def timing_table(results: dict) -> str:
    """Each tool's whole-process seconds over the models it finished: median, min, max."""
    lines = ["| tool | median s | min s | max s |", "| --- | ---: | ---: | ---: |"]
    for key in results["tools"]:
        times = [
            r["tools"][key]["seconds"] for r in results["rows"] if "seconds" in r["tools"][key]
        ]
        if times:
            lines.append(
                f"| {TOOLS[key].column} | {statistics.median(times):.2f} | "
                f"{min(times):.2f} | {max(times):.2f} |"
            )
    return "\n".join(lines) + "\n"


def render(results: dict) -> str:
    """The legend, the grouped table, the per-model table and the times."""
    return "\n".join(
        [
            legend(results),
            summary_table(results),
            per_model_table(results),
            "Whole-process time per tool call (one run each, shared 2-core machine):\n",
            timing_table(results),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--from-json", type=Path, help="render a --json file instead of running")
    parser.add_argument("--only", help="models whose file name contains this")
    parser.add_argument("--tools", nargs="+", choices=list(TOOLS), help="default: every tool")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per tool call")
    parser.add_argument(
        "--run", nargs=4, metavar=("TOOL", "SOURCE", "OUT", "ARCH"), help="internal"
    )
    args = parser.parse_args()
    if args.run:
        key, source, out, architecture = args.run
        TOOLS[key].run(Path(source), Path(out), architecture)
        return 0
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        results = measure(args.tools or available_tools(), args.only, args.timeout)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    text = render(results)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
