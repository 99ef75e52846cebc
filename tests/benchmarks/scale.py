"""Scale benchmark: normfuse on LLaMA-shaped graphs whose weights are in external data.

Each model has N layers of (RMS norm -> attention-sized MatMul -> residual Add -> RMS norm -> MLP
MatMuls -> residual Add), hidden size 4096, MLP 11008, decomposed RMS norms, and all weights in one
external-data file created sparse (zero-filled, never materialised; 32 layers declare ~26 GB).
For each size, a fresh process loads the graph (`onnx.load`, weights left on disk) and, separately,
runs `normfuse.optimize` + `normfuse.save` into the same folder; the script prints wall time, peak
resident memory, and normfuse's time as a multiple of `onnx.load`'s.

Run on demand (not part of the test suite):  python tests/benchmarks/scale.py [--layers 8,16,32,64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

HIDDEN, MLP = 4096, 11008
FLOAT = onnx.TensorProto.FLOAT


class ExternalWeights:
    """Declares tensors at increasing offsets of one data file, without writing their bytes."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.offset = 0
        self.tensors: list[onnx.TensorProto] = []

    def add(self, name: str, dims: tuple[int, ...]) -> str:
        tensor = onnx.TensorProto(name=name, data_type=FLOAT, dims=dims)
        length = int(np.prod(dims)) * 4
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (
            ("location", self.location),
            ("offset", self.offset),
            ("length", length),
        ):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self.offset += length
        self.tensors.append(tensor)
        return name


def rms_norm(nodes: list, weights: ExternalWeights, x: str, prefix: str) -> str:
    """Decomposed RMS norm (the dynamo exporter's spelling) of `x`; returns the output name."""

    def node(op, inputs, suffix, **attrs):
        nodes.append(
            helper.make_node(op, inputs, [f"{prefix}/{suffix}"], name=f"{prefix}/{suffix}", **attrs)
        )
        return f"{prefix}/{suffix}"

    square = node("Pow", [x, "two"], "pow")
    mean = node("ReduceMean", [square, "last_axis"], "mean")
    shifted = node("Add", [mean, "epsilon"], "add")
    inv = node("Reciprocal", [node("Sqrt", [shifted], "sqrt")], "rsqrt")
    normed = node("Mul", [x, inv], "normed")
    return node("Mul", [weights.add(f"{prefix}.weight", (HIDDEN,)), normed], "scaled")


def build(layers: int, folder: Path) -> Path:
    """Write `model.onnx` and a sparse `weights.bin` for `layers` layers into `folder`."""
    weights = ExternalWeights("weights.bin")
    nodes: list = []
    h = "x"
    for index in range(layers):
        p = f"layers.{index}"
        normed = rms_norm(nodes, weights, h, f"{p}/input_norm")
        attn = weights.add(f"{p}.attn.weight", (HIDDEN, HIDDEN))
        nodes.append(helper.make_node("MatMul", [normed, attn], [f"{p}/attn"], name=f"{p}/attn"))
        nodes.append(helper.make_node("Add", [h, f"{p}/attn"], [f"{p}/res1"], name=f"{p}/res1"))
        normed = rms_norm(nodes, weights, f"{p}/res1", f"{p}/post_norm")
        up, down = weights.add(f"{p}.up", (HIDDEN, MLP)), weights.add(f"{p}.down", (MLP, HIDDEN))
        nodes.append(helper.make_node("MatMul", [normed, up], [f"{p}/up"], name=f"{p}/up"))
        nodes.append(helper.make_node("MatMul", [f"{p}/up", down], [f"{p}/down"], name=f"{p}/down"))
        nodes.append(
            helper.make_node("Add", [f"{p}/res1", f"{p}/down"], [f"{p}/res2"], name=f"{p}/res2")
        )
        h = f"{p}/res2"
    small = [
        onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        onnx.numpy_helper.from_array(np.array([-1], np.int64), "last_axis"),
        onnx.numpy_helper.from_array(np.array(1e-6, np.float32), "epsilon"),
    ]
    graph = helper.make_graph(
        nodes,
        "llama_shaped",
        [helper.make_tensor_value_info("x", FLOAT, [1, "sequence", HIDDEN])],
        [helper.make_tensor_value_info(h, FLOAT, [1, "sequence", HIDDEN])],
        small + weights.tensors,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with (folder / "weights.bin").open("wb") as data:
        data.truncate(weights.offset)  # sparse: declared size, no bytes written
    return path


# (imports, timed work) per measurement; imports are not timed.
_CHILD = {
    "load": ("import onnx", "onnx.load(sys.argv[1], load_external_data=False)"),
    "normfuse": (
        "import normfuse, normfuse.driver.optimize",  # the API's modules (loaded on first use)
        "r = normfuse.optimize(sys.argv[1]); "
        "normfuse.save(r, sys.argv[1].replace('model.onnx', 'fused.onnx')); "
        "assert len(r.report.sites) == int(sys.argv[2]), len(r.report.sites)",
    ),
}


def measure(kind: str, path: Path, sites: int) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one fresh process doing `kind` on `path`."""
    imports, work = _CHILD[kind]
    code = (
        f"import resource, sys, time; {imports}; t = time.perf_counter(); {work}; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(sites)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, peak = done.stdout.split()
    return float(seconds), float(peak)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="8,16,32,64")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    rows = []
    print(
        f"{'layers':>6} {'nodes':>6} {'weights GB':>10} {'load s':>8} {'load MiB':>9} "
        f"{'normfuse s':>10} {'normfuse MiB':>12} {'time ratio':>10}"
    )
    for layers in (int(n) for n in args.layers.split(",")):
        with tempfile.TemporaryDirectory() as folder:
            path = build(layers, Path(folder))
            model = onnx.load(path, load_external_data=False)
            declared = (Path(folder) / "weights.bin").stat().st_size / 1e9
            load_s, load_mib = min(measure("load", path, 0) for _ in range(3))
            fuse_s, fuse_mib = min(measure("normfuse", path, 2 * layers) for _ in range(3))
            row = dict(
                layers=layers,
                nodes=len(model.graph.node),
                weights_gb=round(declared, 1),
                load_s=load_s,
                load_mib=load_mib,
                normfuse_s=fuse_s,
                normfuse_mib=fuse_mib,
                ratio=fuse_s / load_s,
            )
            rows.append(row)
            print(
                f"{layers:>6} {row['nodes']:>6} {declared:>10.1f} {load_s:>8.3f} {load_mib:>9.0f} "
                f"{fuse_s:>10.3f} {fuse_mib:>12.0f} {row['ratio']:>10.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
