"""The pipelines of pipelines.py at real model sizes, with the bound of removing every norm.

Builds on demand (never committed) from transformers configs with random weights, float32, batch 1:
a BERT-base encoder (hidden 768, 12 layers, 12 heads, MLP 3072, vocabulary 30522) and a
LLaMA-style decoder slice (TinyLlama-shaped layers: hidden 2048, 4 layers, 32 heads, 4 key-value
heads, MLP 5632; vocabulary cut to 4096, which changes the embedding table's size, not the work),
each exported with TorchScript (BERT at opset 16, where `nn.LayerNorm` is still decomposed; LLaMA
at opset 17) and dynamo (opset 18), with a dynamic sequence axis. Each export is timed at
sequence 128 and at sequence 1 (one token without a KV cache: the per-token share of norms and
MatMuls, not attention over a cache). "no norms" is the same model exported with every norm
module replaced by `nn.Identity`: its ratio is the most that any norm rewrite could save.

Run on demand, from the repository root, with the `benchmarks` and `models` extras:

    python tests/benchmarks/real_sizes.py [--models bert,llama] [--exporters torchscript,dynamo]
        [--sequences 128,1] [--quick] [--cache DIR] [--markdown FILE]

Exports go to `--cache DIR` (reused when present) or a temporary folder removed at exit.

Memory (the LLaMA slice's float32 weights are 0.7 GB; all nine models at once were killed at 24
GB): each model and exporter runs in a child process of its own; every pipeline's output is
re-saved with external data and loaded without its weights, so the script holds none and each
ORT session reads its own from disk; 30 rounds in 3 session sets with 2 warm-up rounds each.
Nine sessions of the LLaMA slice still peak near 12 GB: `--pipelines` times fewer.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pipelines
import torch
import transformers

from normfuse.measure import bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from models.export import is_rms_norm, randomise_norms  # noqa: E402

NO_NORMS = "no norms"
OPSETS = {("bert", "torchscript"): 16, ("llama", "torchscript"): 17}
DYNAMO_OPSET = 18


def bert() -> tuple[torch.nn.Module, list[str]]:
    """BERT-base with random weights (no pooler)."""
    model = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)
    return model, ["input_ids", "attention_mask"]


def llama() -> tuple[torch.nn.Module, list[str]]:
    """Four TinyLlama-shaped decoder layers with random weights."""
    config = transformers.LlamaConfig(
        vocab_size=4096,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=4,
        num_attention_heads=32,
        num_key_value_heads=4,
        use_cache=False,
    )
    return transformers.LlamaModel(config), ["input_ids", "attention_mask", "position_ids"]


BUILDERS = {"bert": bert, "llama": llama}


class _Positional(torch.nn.Module):
    """Positional inputs in, the last hidden state out."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args, strict=True)), return_dict=False)[0]


def remove_norms(model: torch.nn.Module) -> int:
    """Replace every layer-norm and RMS-norm module by `nn.Identity`; returns how many."""
    found = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, torch.nn.LayerNorm) or is_rms_norm(child)
    ]
    for parent, name in found:
        setattr(parent, name, torch.nn.Identity())
    return len(found)


def export(architecture: str, exporter: str, norms: bool, path: Path) -> None:
    """Export one model (random weights from seed 0) with a dynamic sequence axis."""
    torch.manual_seed(0)
    model, names = BUILDERS[architecture]()
    randomise_norms(model)
    if not norms:
        remove_norms(model)
    model.eval()
    length = 8
    inputs = {
        "input_ids": torch.randint(0, 1000, (1, length)),
        "attention_mask": torch.ones(1, length, dtype=torch.int64),
        "position_ids": torch.arange(length).unsqueeze(0),
    }
    args = tuple(inputs[name] for name in names)
    dynamo = exporter == "dynamo"
    if dynamo:  # one entry, for `forward(*args)`, holding each positional input's axes
        sequence = torch.export.Dim("sequence", min=1, max=512)
        axes = {"dynamic_shapes": (tuple({1: sequence} for _ in names),)}
    else:
        axes = {"dynamic_axes": {name: {1: "sequence"} for name in [*names, "last_hidden_state"]}}
    with torch.no_grad():
        torch.onnx.export(
            _Positional(model, names),
            args,
            str(path),
            dynamo=dynamo,
            opset_version=DYNAMO_OPSET if dynamo else OPSETS[(architecture, exporter)],
            input_names=names,
            output_names=["last_hidden_state"],
            **axes,
            **({"external_data": False} if dynamo else {"do_constant_folding": True}),
        )


def cached_export(architecture: str, exporter: str, norms: bool, cache: Path) -> Path:
    suffix = "" if norms else "_no_norms"
    path = cache / f"{architecture}_{exporter}{suffix}.onnx"
    if not path.exists():
        partial = path.with_suffix(".partial.onnx")
        try:
            export(architecture, exporter, norms, partial)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(path)
        print(f"exported {path.name}", file=sys.stderr, flush=True)
    return path


def externalised(path: Path, folder: Path, name: str) -> bench.BenchModel:
    """`path` re-saved into `folder` with its weights in external data, and loaded back without
    them: the script then holds no weights, each ORT session reads its own from disk."""
    folder.mkdir(parents=True)
    model = onnx.load(path)
    target = folder / "model.onnx"
    onnx.save_model(
        model, target, save_as_external_data=True, location="model.onnx.data", size_threshold=1024
    )
    del model
    return bench.BenchModel(name, onnx.load(target, load_external_data=False), base_dir=folder)


def run_all(args: argparse.Namespace, cache: Path, failures: list[str]) -> list[dict]:
    """Time every requested model, exporter and sequence; failed exports go to `failures`."""
    options = options_from(args)
    chosen = {pipelines.ORIGINAL, *args.pipelines.split(",")}
    threading = bench.configure_threads(options.threads)
    rows = []
    for architecture in args.models.split(","):
        for exporter in args.exporters.split(","):
            try:
                source = cached_export(architecture, exporter, True, cache)
                bound = cached_export(architecture, exporter, False, cache)
            except Exception as error:  # reported, the other exports still run
                message = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(error).__name__}: {error}")
                failures.append(f"{architecture} {exporter}: {message}"[:300])
                print(f"export failed: {failures[-1]}", file=sys.stderr, flush=True)
                continue
            subject = pipelines.Subject(f"{architecture} {exporter}", source, architecture)
            with tempfile.TemporaryDirectory(dir=cache) as folder:
                work = Path(folder)
                (work / "built").mkdir()
                built = pipelines.build_pipelines(subject, work / "built")
                paths = {name: item.path for name, item in built.items() if name in chosen}
                models = {
                    name: externalised(path, work / str(index), name)
                    for index, (name, path) in enumerate({**paths, NO_NORMS: bound}.items())
                }
                models = pipelines.with_control(models)
                for sequence in (int(n) for n in args.sequences.split(",")):
                    name = f"{architecture} {exporter} seq {sequence}"
                    dims = {"sequence": sequence}
                    rows.extend(pipelines.time_rows(name, models, built, dims, options, threading))
                    print(f"done {name}", file=sys.stderr, flush=True)
                    report(args, rows, failures)  # so far: a later crash keeps these
    return rows


def options_from(args: argparse.Namespace) -> bench.BenchOptions:
    """30 rounds (quick 12) in 3 session sets with 2 warm-up rounds each: a BERT-base run at
    sequence 128 takes about half a second on one thread here."""
    return pipelines.options_from(args, runs=30, quick_runs=12, warmup=2, sessions=3)


def report(args: argparse.Namespace, rows: list[dict], failures: list[str]) -> None:
    """Print the tables (a child: hand its rows so far to the parent)."""
    if args.child_json is not None:
        args.child_json.write_text(json.dumps({"rows": rows, "failures": failures}))
        return
    options = options_from(args)
    names = [n for n in pipelines.PIPELINES if rows and n in rows[0]["ratios"]]
    text = "\n\n".join(
        [
            pipelines.header(options, str(options.threads)),
            pipelines.latency_table(rows, (*names, NO_NORMS, pipelines.CONTROL)),
            pipelines.fusion_table(rows),
            *(f"export failed: {failure}" for failure in failures),
        ]
    )
    pipelines.write(args, text + "\n", rows)


def child_arguments(args: argparse.Namespace) -> list[str]:
    """The options a child takes from this run (the parent writes the tables)."""
    argv = ["--sequences", args.sequences, "--pipelines", args.pipelines]
    argv += ["--threads", str(args.threads)] + (["--quick"] if args.quick else [])
    for flag in ("cache", "runs", "warmup", "sessions"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    return argv


def in_children(args: argparse.Namespace, argv: list[str], failures: list[str]) -> list[dict]:
    """Each model and exporter in a child process of this script (one at a time), so that the
    memory one leaves behind (allocator fragmentation, ORT arenas) never adds to the next's."""
    rows = []
    for architecture in args.models.split(","):
        for exporter in args.exporters.split(","):
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "rows.json"
                command = [sys.executable, __file__, *argv, "--models", architecture]
                command += ["--exporters", exporter, "--child-json", str(out)]
                done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
                if out.exists():
                    child = json.loads(out.read_text())
                    rows.extend(child["rows"])
                    failures.extend(child["failures"])
                if done.returncode != 0:
                    failures.append(f"{architecture} {exporter}: exit {done.returncode}")
            report(args, rows, failures)  # so far: a later failure keeps these
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama")
    parser.add_argument("--exporters", default="torchscript,dynamo")
    parser.add_argument("--sequences", default="128,1")
    parser.add_argument(
        "--pipelines",
        default=",".join(pipelines.PIPELINES[1:]),
        help="comma-separated pipelines to time besides the original (fewer: less memory)",
    )
    parser.add_argument("--cache", type=Path, help="keep exports here (reused when present)")
    parser.add_argument("--child-json", type=Path, help=argparse.SUPPRESS)
    pipelines.parse_common(parser)
    args = parser.parse_args()
    failures: list[str] = []
    if args.child_json is None:
        report(args, in_children(args, child_arguments(args), failures), failures)
        return 0
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
        rows = run_all(args, args.cache, failures)
    else:
        with tempfile.TemporaryDirectory() as folder:
            rows = run_all(args, Path(folder), failures)
    report(args, rows, failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
