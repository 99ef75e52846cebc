"""The robustness battery: fast cases by default, every case with NORMFUSE_ROBUSTNESS=full; the
counts (cases, failures by kind) are printed at the end of the run."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TALLY: Counter = Counter()


def pytest_terminal_summary(terminalreporter) -> None:
    if not TALLY:
        return
    kinds = ["traceback", "hang", "changed", "stray", "escapes", "other"]
    terminalreporter.write_sep("-", "robustness battery")
    terminalreporter.write_line(
        f"{TALLY['cases']} cases run ({TALLY['skipped']} skipped), {TALLY['passed']} passed; "
        + ", ".join(f"{TALLY[kind]} {kind}" for kind in kinds)
    )
    classes = sorted(key[6:] for key in TALLY if key.startswith("class:"))
    terminalreporter.write_line(
        "by class: " + ", ".join(f"{name} {TALLY['class:' + name]}" for name in classes)
    )
