"""Test setup: the repository root on sys.path so tests can import the builders in `models/`, and
hypothesis made deterministic (derandomized, no example database) so CI cannot fail at random."""

import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile("normfuse", derandomize=True, database=None)
settings.load_profile("normfuse")


def pytest_terminal_summary(terminalreporter) -> None:
    """The ONNX backend sweep's counts and fused-site coverage, when it ran."""
    sweep = sys.modules.get("backend_sweep")
    if sweep is None or not any(sweep.TALLY.counts.values()):
        return
    terminalreporter.write_sep("-", "ONNX backend sweep")
    for line in sweep.TALLY.lines():
        terminalreporter.write_line(line)
