"""Do bench verdicts hold across runs? The same `normfuse bench` many times over.

A/A (`--against copy`, the default): a model against a byte-identical copy of itself in a file
of its own. Every bench should read no difference (`same`, or `inconclusive` where the interval
is too wide to tell): a `faster` or `slower` here is a claim that the next run would not repeat.
A/B (`--against fused`): the model against `normfuse optimize`'s output, where fusion changes
the time (the LLaMA dynamo export at ORT's level all runs in about 0.88x): the verdict should
say so every time. `--chain LAYERS` times a weight-heavy model instead (LAYERS blocks of two
1024x4096 MatMuls, 33M parameters for 4, one token: memory-bound, where session-to-session
differences are largest). `--load N` keeps N busy-loop processes running throughout (a loaded
machine). Every bench goes through the command line (`normfuse.cli.main`, `--report FILE`).
Prints one line per bench and the count of each word. Not a test; run on demand:

    python tests/benchmarks/aa_bench.py [--model models/real/bert_opset14.onnx]
        [--dims sequence=16] [--chain LAYERS] [--count 20] [--load 2] [--against copy|fused]
        [-- any other `normfuse bench` options]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from normfuse.cli.main import main
from normfuse.measure import bench

ROOT = Path(__file__).resolve().parents[2]


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    """This script's options, and the rest for `normfuse bench`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models/real/bert_opset14.onnx")
    parser.add_argument("--dims", default="sequence=16", help="--dims for the model ('' for none)")
    parser.add_argument("--chain", type=int, help="time a MatMul chain of this many blocks")
    parser.add_argument("--count", type=int, default=20, help="benches to run")
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes to run alongside")
    parser.add_argument("--against", choices=["copy", "fused"], default="copy")
    parser.add_argument("--threads", type=int, default=1, help="bench --threads")
    return parser.parse_known_args()


def matmul_chain(layers: int, path: Path) -> Path:
    """A model of `layers` blocks x -> Relu(x W1) W2 + x (1024 -> 4096 -> 1024, float32) on one
    token, written to `path`."""
    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for index in range(layers):
        up, down = f"up{index}", f"down{index}"
        weights += [
            numpy_helper.from_array(rng.normal(0, 0.02, (1024, 4096)).astype(np.float32), up),
            numpy_helper.from_array(rng.normal(0, 0.02, (4096, 1024)).astype(np.float32), down),
        ]
        nodes += [
            helper.make_node("MatMul", [x, up], [f"h{index}"]),
            helper.make_node("Relu", [f"h{index}"], [f"r{index}"]),
            helper.make_node("MatMul", [f"r{index}", down], [f"d{index}"]),
            helper.make_node("Add", [x, f"d{index}"], [f"y{index}"]),
        ]
        x = f"y{index}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 1024])],
        [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, 1, 1024])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def second_model(model: Path, against: str, folder: Path) -> Path:
    """The model to time against `model`: a copy of its file, or normfuse's output."""
    other = folder / f"{against}_{model.name}"
    if against == "copy":
        shutil.copyfile(model, other)
    elif main(["optimize", str(model), "-o", str(other), "--quiet"]) != 0:
        raise SystemExit(f"normfuse optimize {model} failed")
    return other


def start_load(processes: int) -> list[subprocess.Popen]:
    """`processes` Python processes spinning on the CPU."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]


def stop_load(loaders: list[subprocess.Popen]) -> None:
    """End the processes `start_load` started."""
    for process in loaders:
        process.terminate()
        process.wait()


def one_bench(command: list[str], report: Path) -> dict:
    """Run `normfuse bench` once (its table left unprinted); the compared model's timing record."""
    with contextlib.redirect_stdout(io.StringIO()):
        status = main([*command, "--report", str(report), "--quiet"])
    if status != 0:
        raise SystemExit("normfuse bench failed: " + " ".join(command))
    return json.loads(report.read_text())["timings"][1]


def summary(records: list[dict], seconds: list[float]) -> list[str]:
    """The count of each word, the range of ratios and interval widths, and the time taken."""
    words = Counter(record["verdict"] for record in records)
    claims = words[bench.FASTER] + words[bench.SLOWER]
    ratios = [record["ratio_to_first"] for record in records]
    widths = [high - low for low, high in (record["ratio_interval_95"] for record in records)]
    counted = ", ".join(f"{word} {n}" for word, n in sorted(words.items()))
    return [
        f"{len(records)} benches: {counted}",
        f"no difference claimed (same or inconclusive): {len(records) - claims} of {len(records)}",
        f"ratios {min(ratios):.3f} to {max(ratios):.3f}; interval widths {min(widths):.3f} to "
        f"{max(widths):.3f}; {sum(seconds) / len(seconds):.1f} s per bench",
    ]


def run() -> None:
    args, rest = parse_args()
    loaders = start_load(args.load)
    try:
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            model = matmul_chain(args.chain, folder / "chain.onnx") if args.chain else args.model
            other = second_model(model, args.against, folder)
            command = ["bench", str(model), str(other), "--threads", str(args.threads)]
            command += ["--dims", args.dims] if args.dims and not args.chain else []
            command += rest
            print(f"normfuse {' '.join(command)}  (x{args.count}, load {args.load})")
            records, seconds = [], []
            for number in range(args.count):
                start = time.perf_counter()
                record = one_bench(command, folder / "report.json")
                seconds.append(time.perf_counter() - start)
                records.append(record)
                low, high = record["ratio_interval_95"]
                print(
                    f"{number + 1:3d}  {record['ratio_to_first']:.3f} [{low:.3f}, {high:.3f}]  "
                    f"{record['verdict']}  ({record['sessions']} session sets)",
                    flush=True,
                )
            print("\n".join(summary(records, seconds)))
    finally:
        stop_load(loaders)


if __name__ == "__main__":
    run()
