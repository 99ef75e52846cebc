"""The post-norm residual chain from docs/benchmarks.md's "fastest settings" section, tuned.

48 blocks of `h = LayerNormalization(h + h * c_i)` over a [1, 128, 768] float32 tensor (post-norm
residual stream; the `Add` feeding each norm is what ORT's SkipLayerNormFusion fuses). Runs
`normfuse tune` on it and prints the table, the verdict and the ratio.

Run on demand (not part of the test suite):  python tests/benchmarks/post_norm.py [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from normfuse.measure import bench, tune

BLOCKS, SHAPE = 48, (1, 128, 768)


def post_norm_chain(blocks: int = BLOCKS) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, initializers = [], []
    h = "x"
    for index in range(blocks):
        names = [f"c{index}", f"gamma{index}", f"beta{index}"]
        initializers += [
            numpy_helper.from_array(rng.uniform(0.5, 1.5, SHAPE[-1]).astype(np.float32), names[0]),
            numpy_helper.from_array(rng.uniform(0.5, 1.5, SHAPE[-1]).astype(np.float32), names[1]),
            numpy_helper.from_array(rng.normal(0, 0.5, SHAPE[-1]).astype(np.float32), names[2]),
        ]
        nodes += [
            helper.make_node("Mul", [h, names[0]], [f"branch{index}"]),
            helper.make_node("Add", [h, f"branch{index}"], [f"sum{index}"]),
            helper.make_node(
                "LayerNormalization",
                [f"sum{index}", names[1], names[2]],
                [f"h{index}"],
                axis=-1,
                epsilon=1e-5,
            ),
        ]
        h = f"h{index}"
    float_type = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "post_norm_chain",
        [helper.make_tensor_value_info("x", float_type, list(SHAPE))],
        [helper.make_tensor_value_info(h, float_type, list(SHAPE))],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "post_norm_chain.onnx"
        onnx.save(post_norm_chain(), path)
        options = bench.BenchOptions(threads=args.threads, runs=args.runs, warmup=10)
        report = tune.tune(bench.BenchModel("post_norm_chain.onnx", onnx.load(path)), options)
    print(report.text("post_norm_chain.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
