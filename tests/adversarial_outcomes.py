"""Pinned outcomes of the adversarial corpus: for every case and configuration of
tests/test_adversarial.py, the fused sites (kinds, with repeats) and the near-miss reasons, or
that optimize refused the model. `corpora/adversarial_outcomes.json` holds them; the corpus test
asserts each outcome equals its pin, so any change of what is fused or why shows up as a failing
case and a reviewable diff of that file (the corpus's own `Expect` states what must hold; the pin
is what does hold).

Slow cases (not in the default run) and (case, configuration) pairs a known finding fails (strict
xfail) are not pinned.

Re-pin after an intended change, then review the diff:  python tests/adversarial_outcomes.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "tests" / "corpora" / "adversarial_outcomes.json"


def outcome(report) -> dict:
    """The pinned form of a report: fused kinds in order, sorted distinct reasons."""
    return {
        "sites": sorted(site.kind for site in report.sites),
        "reasons": sorted({miss.reason for miss in report.near_misses}),
    }


REFUSED = {"refused": True}


def load() -> dict[str, dict[str, dict]]:
    """Every pin, by case name then configuration."""
    return json.loads(PINS.read_text()) if PINS.exists() else {}


def dumps(pins: dict[str, dict[str, dict]]) -> str:
    """JSON with one case a line, so that a diff names the cases whose outcome changed."""
    lines = [f"{json.dumps(n)}: {json.dumps(pins[n], sort_keys=True)}" for n in sorted(pins)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import test_adversarial as corpus

    import normfuse

    pins: dict[str, dict[str, dict]] = {}
    for case in corpus.CASES:
        if case.slow:
            continue
        for config in corpus.CONFIGS:
            if config in corpus.FINDINGS.get(case.name, ("", ()))[1]:
                continue
            result = corpus.optimize_case(case, config)
            pins.setdefault(case.name, {})[config] = (
                REFUSED if isinstance(result, normfuse.NormfuseError) else outcome(result.report)
            )
    PINS.write_text(dumps(pins))
    print(f"pinned {sum(len(v) for v in pins.values())} outcomes of {len(pins)} cases to {PINS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
