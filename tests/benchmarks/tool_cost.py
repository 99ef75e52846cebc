"""Tool cost: `normfuse.optimize` time on chains of decomposed layer norms, against the floor of
any tool that reads and writes the model (`onnx.load` + `onnx.shape_inference.infer_shapes` +
`onnx.save` of the same model, timed in the same run).

Prints, per chain size: nodes, sites fused, optimise seconds, floor seconds, their ratio, and the
growth of optimise time from the previous size; then the same in process CPU seconds (every
thread of this process, ONNX Runtime's included), which a shared, loaded machine disturbs less.
Targets (issue 25): 100k nodes at most 8x the floor; growth from 10k to 100k at most 11x. The
64-layer LLaMA graph with external data is `tests/benchmarks/scale.py --layers 64`.

    python tests/benchmarks/tool_cost.py [--nodes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import normfuse
from models import builders

NODES_PER_LAYER = 11  # one decomposed layer norm (9 nodes) + residual Add + its input Add


def _floor(model: onnx.ModelProto, folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds of load + infer_shapes + save."""
    path = folder / "floor.onnx"
    onnx.save(model, path)
    start, cpu = time.perf_counter(), time.process_time()
    loaded = onnx.load(path)
    onnx.shape_inference.infer_shapes(loaded)
    onnx.save(loaded, folder / "floor_out.onnx")
    return time.perf_counter() - start, time.process_time() - cpu


def _optimise(model: onnx.ModelProto, folder: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of optimize + save, and the number of sites fused."""
    path = folder / "model.onnx"
    onnx.save(model, path)
    start, cpu = time.perf_counter(), time.process_time()
    result = normfuse.optimize(str(path))
    normfuse.save(result, folder / "out.onnx")
    return time.perf_counter() - start, time.process_time() - cpu, len(result.report.sites)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,10000,100000")
    args = parser.parse_args()
    header = f"{'optimise s':>10} {'floor s':>8} {'ratio':>6} {'growth':>7}"
    print(f"{'nodes':>7} {'sites':>6} {header}   CPU: {header}")
    previous = None
    for target in (int(n) for n in args.nodes.split(",")):
        layers = max(1, target // NODES_PER_LAYER)
        model = builders.norm_model(builders.LayerNormSpec(), shape=(1, 16, 64), layers=layers)
        with tempfile.TemporaryDirectory() as folder:
            floor = _floor(model, Path(folder))
            *seconds, sites = _optimise(model, Path(folder))
        columns = []
        for index, (spent, least) in enumerate(zip(seconds, floor, strict=True)):
            growth = "" if previous is None else f"{spent / previous[index]:.1f}x"
            columns.append(f"{spent:>10.2f} {least:>8.2f} {spent / least:>6.1f} {growth:>7}")
        print(f"{len(model.graph.node):>7} {sites:>6} {'   CPU: '.join(columns)}")
        previous = seconds


if __name__ == "__main__":
    main()
