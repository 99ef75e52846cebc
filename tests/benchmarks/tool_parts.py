"""Where `normfuse.optimize` spends its time on one chain of decomposed layer norms: the parts no
rewrite that proves its output can skip (reading and writing the model, onnx-graphsurgeon's
import and export, onnx's inference and checker, ONNX Runtime's sessions and runs of the
original and of the rewrite), each timed alone in this process, beside the whole call and each
of its scans (pass, sites, seconds).

    python tests/benchmarks/tool_parts.py [--nodes 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import normfuse
from models import builders
from normfuse.io.skeleton import skeleton
from normfuse.prove import inputs, sessions
from normfuse.rewrite import rounds as rewrite

NODES_PER_LAYER = 11  # as in tool_cost.py


def _timed(label: str, work, rows: list[tuple[str, float]]):
    start = time.perf_counter()
    value = work()
    rows.append((label, time.perf_counter() - start))
    return value


def _ort_run(model: onnx.ModelProto) -> None:
    feeds, _ = inputs.make_inputs(model, inputs.probe_dims(model))
    sessions.create(model, "cpu", "disable").run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    layers = max(1, args.nodes // NODES_PER_LAYER)
    model = builders.norm_model(builders.LayerNormSpec(), shape=(1, 16, 64), layers=layers)
    scans: list[tuple[str, int, float]] = []
    original_find = rewrite.find_sites

    def timed_find(graph, fusion_pass, context, shared=None):
        start = time.perf_counter()
        found = original_find(graph, fusion_pass, context, shared)
        scans.append((fusion_pass.name, len(found[0]), time.perf_counter() - start))
        return found

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, path)
        whole = time.perf_counter()
        rewrite.find_sites = timed_find
        try:
            result = normfuse.optimize(str(path))
        finally:
            rewrite.find_sites = original_find
        normfuse.save(result, Path(folder) / "out.onnx")
        whole = time.perf_counter() - whole
        rows: list[tuple[str, float]] = []
        loaded = _timed("onnx.load", lambda: onnx.load(path), rows)
        _timed(
            "onnx.shape_inference.infer_shapes",
            lambda: onnx.shape_inference.infer_shapes(loaded),
            rows,
        )
        _timed("onnx.save", lambda: onnx.save(loaded, Path(folder) / "again.onnx"), rows)
        graph = _timed("gs.import_onnx", lambda: gs.import_onnx(loaded), rows)
        _timed("gs.export_onnx", lambda: gs.export_onnx(graph), rows)
        _timed("ORT session + run, original", lambda: _ort_run(loaded), rows)
        fused = skeleton(result.model)
        _timed("ORT session + run, rewrite", lambda: _ort_run(result.model), rows)
        _timed("onnx.checker, rewrite", lambda: onnx.checker.check_model(fused), rows)
        _timed(
            "strict inference, rewrite",
            lambda: onnx.shape_inference.infer_shapes(fused, check_type=True, strict_mode=True),
            rows,
        )
    print(f"{len(model.graph.node)} nodes, {len(result.report.sites)} sites")
    print(f"{'optimize + save (one call)':<40} {whole:7.2f} s")
    for label, seconds in rows:
        print(f"  {label:<38} {seconds:7.2f} s")
    print(f"  {'sum of the parts':<38} {sum(s for _, s in rows):7.2f} s")
    print("scans in the call (pass, sites, seconds):")
    for name, sites, seconds in scans:
        print(f"  {name:<12} {sites:>6} {seconds:7.2f}")


if __name__ == "__main__":
    main()
