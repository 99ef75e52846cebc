"""SIGINT and SIGTERM around the commit (ADV9-03): before it, every staged file is removed and the
command exits 130 / 143; once the commit has started the command has succeeded, so a signal is
ignored and the command exits with its own status. Each signal is raised at an exact point by a
hook (`signal.raise_signal`, in this thread), never by timing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from helpers import run_cli

from models.builders import LayerNormSpec, norm_model
from normfuse.cli import shared as cli
from normfuse.io import outputs

SIGNALS = [
    (signal.SIGINT, 130, "interrupted (SIGINT)"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
]
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def handlers_kept():
    """The test process's SIGINT and SIGTERM handlers are the same after the command."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    assert {signum: signal.getsignal(signum) for signum in before} == before


def _workspace(tmp_path: Path) -> tuple[Path, Path, Path, bytes]:
    """A model, an existing `-o` file (its old content returned) and a `--report` path."""
    model = tmp_path / "m.onnx"
    onnx.save(norm_model(LayerNormSpec()), model)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old content")
    return model, out, tmp_path / "rep.json", b"old content"


def _after(function: Callable, signum: int) -> Callable:
    """`function`, then `signum` raised in this thread."""

    def wrapped(*args, **kwargs):
        result = function(*args, **kwargs)
        signal.raise_signal(signum)
        return result

    return wrapped


def _assert_committed(tmp_path: Path, out: Path, report: Path) -> None:
    fused = onnx.load(out)
    onnx.checker.check_model(fused, full_check=True)
    assert any(node.op_type == "LayerNormalization" for node in fused.graph.node)
    assert json.loads(report.read_text())["sites"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx", "rep.json"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_commit_is_ignored(
    tmp_path: Path, capfd, monkeypatch, handlers_kept, signum: int
) -> None:
    """Raised after the renames, inside the commit (where it was held back and then reported as
    'uncommitted outputs removed'): the command succeeds, every output whole."""
    model, out, report, _ = _workspace(tmp_path)
    monkeypatch.setattr(outputs, "_fsync_folder", _after(outputs._fsync_folder, signum))
    done = run_cli(capfd, "optimize", str(model), "-o", str(out), "--report", str(report))
    assert (done.returncode, done.stderr) == (0, "")
    assert f"wrote {out}" in done.stdout
    _assert_committed(tmp_path, out, report)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_after_the_commit_is_ignored(
    tmp_path: Path, capfd, monkeypatch, handlers_kept, signum: int
) -> None:
    """Raised as the commit returns, before the command prints and exits: it succeeds."""
    model, out, report, _ = _workspace(tmp_path)
    monkeypatch.setattr(cli, "commit", _after(cli.commit, signum))
    done = run_cli(capfd, "optimize", str(model), "-o", str(out), "--report", str(report))
    assert (done.returncode, done.stderr) == (0, "")
    assert f"wrote {out}" in done.stdout
    _assert_committed(tmp_path, out, report)


@pytest.mark.parametrize(("signum", "code", "text"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_a_signal_before_the_commit_removes_every_staged_file(
    tmp_path: Path, capfd, monkeypatch, handlers_kept, signum: int, code: int, text: str
) -> None:
    """Raised once the model and the report are staged, just before the commit: 130 / 143, the
    old `-o` unchanged, no report, no temporary file. Python's own SIGINT handler is installed
    for the run: in a full parallel run, a SIGINT raised in a worker once came back without
    KeyboardInterrupt (its handler at the OS level was not Python's; cause not found)."""
    model, out, report, old = _workspace(tmp_path)
    monkeypatch.setattr(cli, "stage_text", _after(cli.stage_text, signum))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        done = run_cli(capfd, "optimize", str(model), "-o", str(out), "--report", str(report))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.returncode == code
    assert done.stderr == f"normfuse: error: {text}; uncommitted outputs removed\n"
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_the_program_ignores_sigterm_during_its_shutdown(tmp_path: Path) -> None:
    """`python -m normfuse`: a SIGTERM sent to itself at interpreter exit (an atexit hook, after
    the commit) neither kills it (-15) nor changes its status."""
    model, out, report, _ = _workspace(tmp_path)
    script = (
        "import atexit, os, runpy, signal, sys\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        f"sys.argv = ['normfuse', 'optimize', {str(model)!r}, '-o', {str(out)!r},"
        f" '--report', {str(report)!r}]\n"
        "runpy.run_module('normfuse', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    _assert_committed(tmp_path, out, report)
