"""Test setup: the repository root on sys.path so tests can import the builders in `models/`,
hypothesis made deterministic (derandomized, no example database) so CI cannot fail at random,
what each test module leaves alive frozen out of the garbage collector's reach, and every ONNX
Runtime session of the test process on one intra-op thread unless its options say otherwise."""

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import onnxruntime as ort
import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile("normfuse", derandomize=True, database=None)
settings.load_profile("normfuse")


class _OneThreadSessionOptions(ort.SessionOptions):
    """`ort.SessionOptions` whose intra-op thread count starts at 1, not ORT's one per core: the
    run's pytest-xdist workers already use every core, and the tests' models are small, so a
    pool per session only spawned, spun and joined threads (measured: a quarter of the CPU of
    the adversarial corpus's checks). Options that set a count (bench's --threads) keep it.
    Graph optimisation levels, providers and every check are unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.intra_op_num_threads = 1


ort.SessionOptions = _OneThreadSessionOptions


@pytest.fixture(autouse=True, scope="module")
def _freeze_survivors() -> Iterator[None]:
    """After each module, collect its garbage once, then freeze what survives (module caches of
    built models and sessions): a later `gc.collect()`, which bench runs between session sets,
    or an automatic full collection then scans only what the current module made, not every
    cache of the run (without this, a 0.6 s bench test took 9 s late in the default run)."""
    yield
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session) -> None:
    """In a pytest-xdist worker: hand the backend sweep's tally to the controller."""
    sweep = sys.modules.get("backend_sweep")
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and sweep is not None:
        workeroutput["backend_tally"] = sweep.TALLY.as_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In the pytest-xdist controller: add a finished worker's backend sweep tally."""
    tally = getattr(node, "workeroutput", {}).get("backend_tally")
    if tally is not None:
        import backend_sweep

        backend_sweep.TALLY.merge(tally)


def pytest_terminal_summary(terminalreporter) -> None:
    """The ONNX backend sweep's counts and fused-site coverage, when it ran (in any worker)."""
    sweep = sys.modules.get("backend_sweep")
    if sweep is None or not any(sweep.TALLY.counts.values()):
        return
    terminalreporter.write_sep("-", "ONNX backend sweep")
    for line in sweep.TALLY.lines():
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """No test (and no normfuse call in it) leaves SIGINT or SIGTERM blocked or with another
    handler: a library call that did would leave a user's Ctrl-C dead."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM}
    before = (
        {s: signal.getsignal(s) for s in held},
        held & signal.pthread_sigmask(signal.SIG_BLOCK, []),
    )
    yield
    after = (
        {s: signal.getsignal(s) for s in held},
        held & signal.pthread_sigmask(signal.SIG_BLOCK, []),
    )
    assert after == before, f"signal state changed: {before} -> {after}"
