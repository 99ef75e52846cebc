"""How long normfuse.optimize takes on a chain of decomposed layer norms with residual Adds
(`h = h + LN(h)`, [1,128,768] float32), per depth. Prints seconds per depth; a depth that runs
past --timeout is printed as such (each depth runs in its own process).

    python tests/benchmarks/residual_chain_depth.py [--depths 8,16,24,48] [--timeout 120]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPE = (1, 128, 768)


def chain(depth: int, shape=SHAPE):
    """The chain model: `depth` TorchScript-style layer norms, each followed by a residual Add."""
    from corpora.adversarial_build import F, G, ln, model

    g = G(seed=0)
    h = "x"
    for index in range(depth):
        out = "y" if index == depth - 1 else None
        normed = ln(g, h, shape=shape, gamma=g.random(shape[-1:]), beta=g.random(shape[-1:]))
        h = g.op("Add", [h, normed], out)
    return model(g, [("x", F, shape)], [("y", F, shape)])


def _time_one(depth: int, queue) -> None:
    import normfuse

    m = chain(depth)
    start = time.perf_counter()
    result = normfuse.optimize(m)
    queue.put((time.perf_counter() - start, len(result.report.sites), len(m.graph.node)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="8,16,24,48")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    print(f"{'depth':>5} {'nodes':>6} {'sites':>5} {'seconds':>10}")
    for depth in [int(d) for d in args.depths.split(",")]:
        queue = multiprocessing.Queue()
        process = multiprocessing.Process(target=_time_one, args=(depth, queue))
        process.start()
        process.join(args.timeout)
        if process.is_alive():
            process.kill()
            process.join()
            print(f"{depth:>5} {'':>6} {'':>5} >{args.timeout:.0f} s (timed out)")
            continue
        seconds, sites, nodes = queue.get()
        print(f"{depth:>5} {nodes:>6} {sites:>5} {seconds:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
