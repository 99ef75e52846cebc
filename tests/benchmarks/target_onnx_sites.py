"""Sites fused by `--target onnx` on every model in models/real, with the near-miss reasons and
the normalisation nodes the exporter already wrote as standard operators.

Run on demand, from the repository root: python tests/benchmarks/target_onnx_sites.py
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx

import normfuse
from normfuse.target import targets

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    for path in sorted((ROOT / "models/real").glob("*.onnx")):
        model = onnx.load(path)
        report = normfuse.optimize(path, target="onnx").report
        reasons = dict(Counter(miss.reason for miss in report.near_misses))
        ops = Counter(node.op_type for node in model.graph.node)
        standard = ops["LayerNormalization"] + ops["RMSNormalization"]
        opset = targets.default_opset(model)
        print(f"{path.name} {opset} {len(report.sites)} {reasons} already-standard {standard}")


if __name__ == "__main__":
    main()
