"""What the proof's input profiles do on the corpora: for every case of the adversarial corpora
(1-4, 6, 8) and every committed real export, the sites `optimize` keeps, the sites the output
guard leaves decomposed on each profile (`output-differs`, `float16-rounding`), and the sites kept
as repairs per profile. Prints one table; exits 0.

Run on demand, from the repository root:

    python tests/benchmarks/profile_effect.py [--limit N]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import onnx  # noqa: E402
from corpora import adversarial, adversarial_4, adversarial_6, adversarial_8  # noqa: E402

import normfuse  # noqa: E402
from normfuse.prove.profiles import PROFILES  # noqa: E402

PROFILE_IN_DETAIL = re.compile(r"on the ([a-z0-9-]+) inputs")


def _models(limit: int | None):
    """(corpus, model) for every case, then every committed real export."""
    for corpus, module in (
        ("adversarial", adversarial),
        ("adversarial_4", adversarial_4),
        ("adversarial_6", adversarial_6),
        ("adversarial_8", adversarial_8),
    ):
        for case in module.CASES[:limit]:
            try:
                yield corpus, case.build()
            except Exception as error:  # a builder that needs what this machine lacks
                print(f"skipped {case.name}: {error}", file=sys.stderr)
    for path in sorted((ROOT / "models" / "real").glob("*.onnx"))[:limit]:
        yield "real", onnx.load(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="at most N cases of each corpus")
    args = parser.parse_args(argv)
    kept, cases = Counter(), Counter()
    rolled: Counter = Counter()
    repaired: Counter = Counter()
    errors = 0
    for corpus, model in _models(args.limit):
        cases[corpus] += 1
        try:
            report = normfuse.optimize(model).report
        except normfuse.NormfuseError:
            errors += 1
            continue
        kept[corpus] += len(report.sites)
        for miss in report.near_misses:
            if miss.reason in ("output-differs", "float16-rounding"):
                found = PROFILE_IN_DETAIL.search(miss.detail)
                profile = found.group(1) if found else "(read from ORT)"
                rolled[(corpus, miss.reason, profile)] += 1
        for site in report.sites:
            for profile in sorted({entry["profile"] for entry in site.repair}):
                repaired[(corpus, profile)] += 1
    print(f"{'corpus':<15}{'cases':>7}{'sites kept':>12}  per profile: repairs / rolled back")
    for corpus in cases:
        cells = []
        for profile in PROFILES:
            back = sum(n for (c, _, p), n in rolled.items() if c == corpus and p == profile)
            cells.append(f"{profile} {repaired[(corpus, profile)]}/{back}")
        ort = sum(n for (c, r, _), n in rolled.items() if c == corpus and r == "float16-rounding")
        cells.append(f"float16-rounding {ort}")
        print(f"{corpus:<15}{cases[corpus]:>7}{kept[corpus]:>12}  " + ", ".join(cells))
    print(f"models refused as a whole: {errors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
