"""Form choices timed for real: the decisions `--tune-for` makes on this machine.

Times the Skip form against Add + norm at one shape, and a fused RMS norm against its decomposed
subgraph, on the CPU, and checks that each decision follows the rule (faster, or slower, beyond
noise and by more than 1%: `bench.verdict`) for the interval it measured. The default test run
checks the rule on a scripted clock instead (tests/test_skip_norm.py, tests/test_group_norm.py):
no assertion there depends on a timing.

Run on demand (not part of the test suite):  python tests/benchmarks/form_choice.py [--runs 100]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import normfuse  # noqa: E402
from models.builders import RmsNormSpec, norm_model  # noqa: E402
from normfuse.measure import bench  # noqa: E402
from normfuse.measure.forms import FormChooser  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    failures = 0
    choice = FormChooser("cpu", runs=args.runs).choose("layer-norm", (1, 4, 32), 1, bias=True)
    low, high = choice.interval
    ok = low <= choice.ratio <= high and choice.use_skip == (bench.verdict((low, high)) == "faster")
    failures += not ok
    print(f"skip form: {choice.as_dict()['summary']}  {'ok' if ok else 'RULE BROKEN'}")
    model = norm_model(RmsNormSpec(divide="reciprocal"), shape=(2, 7, 32), layers=2)
    result = normfuse.optimize(model, tune_for="cpu")
    for record in result.report.tuning:
        if "fused_ratio" not in record:
            continue
        low, high = record["fused_ratio_interval_95"]
        slower = bench.verdict((low, high)) == "slower"
        ok = low <= record["fused_ratio"] <= high and record["choice"] == (
            "decomposed" if slower else "fused"
        )
        failures += not ok
        print(f"fused form: {record['summary']}  {'ok' if ok else 'RULE BROKEN'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
