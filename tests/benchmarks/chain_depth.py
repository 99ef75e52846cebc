"""How optimise time grows with depth: chains of decomposed layer norms with residual Adds.

Prints seconds per `normfuse.optimize` call for chains of 8, 16, 24 and 48 norms over a
[1, 128, 768] float32 tensor (the constant folder and matcher must stay linear in graph size).

    python tests/benchmarks/chain_depth.py [--depths 8,16,24,48] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import normfuse
from models import builders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="8,16,24,48")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'norms':>6} {'nodes':>6} {'fused':>6} {'best s':>8} {'s/norm':>8}")
    for depth in (int(d) for d in args.depths.split(",")):
        model = builders.norm_model(builders.LayerNormSpec(), shape=(1, 128, 768), layers=depth)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = normfuse.optimize(model)
            times.append(time.perf_counter() - start)
        best = min(times)
        fused = len(result.report.sites)
        print(f"{depth:>6} {len(model.graph.node):>6} {fused:>6} {best:>8.3f} {best / depth:>8.4f}")


if __name__ == "__main__":
    main()
