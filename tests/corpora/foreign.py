"""Other projects' norm-fusion test cases, rebuilt here as ONNX graphs (onnx.helper).

Each case names the project and the test it comes from, says what that project does with the
graph (`theirs`) and what normfuse must do (`expect`):

- `fuse`: the subgraph computes exactly a fused op; normfuse fuses it (sites per kind in `sites`);
- `keep`: it is not a normalisation (or not an exact one); nothing is fused and a near-miss with
  one of `reasons` is reported. Where the other project *does* fuse such a graph (an
  approximation, or a different op normfuse has no exact target for), `theirs` says so;
- `either`: the other project refuses for a reason of its own (a kernel's dtype or rank, a
  pattern it does not list) although the rewrite is exact; fusing is allowed where the numerics
  hold.

`gap` records where normfuse misses an exact fusion the other project makes (the tests mark it
xfail(strict=True)). The graphs are rebuilt from what the tests describe; where a test's graph
is not valid standard ONNX (ops of another runtime, mixed-type `Add`s that only type-check in the
other project), the nearest valid graph is built and `note` says what changed.

`python -m corpora.foreign` prints every case with what normfuse does with it.
"""

from __future__ import annotations

import argparse

from corpora import foreign_onnxruntime, foreign_onnxscript, foreign_openvino  # noqa: F401
from corpora.foreign_build import CASES, SKIP_PASSES, ForeignCase

__all__ = ["CASES", "SKIP_PASSES", "ForeignCase"]


def main(argv: list[str] | None = None) -> int:
    """Print every case and what normfuse does with it (default target and `--target onnx`)."""
    import normfuse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    for c in CASES.values():
        if args.names and c.name not in args.names:
            continue
        for target in ("ort", "onnx"):
            result = normfuse.optimize(c.build(), target=target, passes=c.passes)
            kinds = [f"{s.kind}:{s.op}" for s in result.report.sites]
            misses = sorted({m.reason for m in result.report.near_misses})
            print(f"{c.name:48s} {target:4s} {c.expect:6s} sites={kinds} misses={misses}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
