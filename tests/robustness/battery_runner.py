"""Run one robustness case and judge it: exit code, one line on stderr and no traceback, every
file that existed before unchanged (sha256) unless the case lets it be written, no new file but
the ones a successful run may write (no temporary files, no partial outputs), nothing written
outside the case's folder (no escapes), and no hang."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


@dataclass
class Run:
    """What a case runs and what it expects.

    `argv`: normfuse's arguments (or `call`: a Python API call that must raise NormfuseError or
    return); `code`: the exit code (-1: 0 or 2, either is fine); `writes`: names (relative to
    the case folder) that a successful run may create or replace; `message`: text the error line
    must contain; `subprocess`: run `python -m normfuse`, with `signal` sent after `after`
    seconds or once a file matching `wait_for` exists, `stdout` "closed", "full" or "broken",
    `user` "root-without-dac" (root without CAP_DAC_*: file modes apply), `fsize` an
    RLIMIT_FSIZE; `umask`: the umask to run under; `check`: a function of the case folder
    asserting more; `skip`: a reason not to run here; `cleanup`: run afterwards whatever
    happened (for files a case puts outside its folder).
    """

    argv: list[str] = field(default_factory=list)
    code: int = 2
    writes: tuple[str, ...] = ()
    message: str = ""
    call: Callable[[], object] | None = None
    subprocess: bool = False
    signal: int | None = None
    after: float = 0.0
    wait_for: str | None = None
    stdout: str | None = None
    user: str | None = None
    fsize: int | None = None
    umask: int | None = None
    check: Callable[[Path], None] | None = None
    skip: str | None = None
    cleanup: Callable[[], None] | None = None


@dataclass
class Outcome:
    """What happened, and the problems found (empty when the case passed)."""

    code: int | None
    stderr: str
    problems: list[str]
    traceback: bool = False
    hang: bool = False
    changed: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    escapes: list[str] = field(default_factory=list)


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 (or the kind, for what is not a regular file) of everything under `folder`."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = f"link:{os.readlink(path)}"
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = "special"
    return found


def run_case(run: Run, case_dir: Path, outside: Path) -> Outcome:
    """Run `run` with `case_dir` holding its files; `outside` must stay as it is."""
    before, outside_before = snapshot(case_dir), snapshot(outside)
    try:
        if run.call is not None:
            code, stderr, traceback = _call(run)
        elif run.subprocess:
            code, stderr, traceback = _subprocess(run, case_dir)
        else:
            code, stderr, traceback = _in_process(run)
        return _outcome(run, case_dir, outside, before, outside_before, code, stderr, traceback)
    finally:
        if run.cleanup is not None:
            run.cleanup()


def _outcome(run, case_dir, outside, before, outside_before, code, stderr, traceback) -> Outcome:
    after = snapshot(case_dir)
    outcome = Outcome(code, stderr, [], traceback=traceback, hang=code is None)
    allowed = set(run.writes) if code == 0 else set()
    outcome.changed = sorted(
        name for name in before if name not in allowed and after.get(name) != before[name]
    )
    outcome.stray = sorted(name for name in after if name not in before and name not in allowed)
    outside_after = snapshot(outside)
    outcome.escapes = sorted(
        k
        for k in outside_before.keys() | outside_after.keys()
        if outside_before.get(k) != outside_after.get(k)
    )
    _judge(run, outcome)
    if run.check is not None and not outcome.problems:
        try:
            run.check(case_dir)
        except AssertionError as error:
            outcome.problems.append(f"check: {error}")
    return outcome


def _judge(run: Run, outcome: Outcome) -> None:
    problems = outcome.problems
    if outcome.hang:
        problems.append("hang")
    elif outcome.code != run.code and not (run.code == -1 and outcome.code in (0, 2)):
        problems.append(f"exit {outcome.code}, expected {run.code}: {outcome.stderr.strip()[:300]}")
    if "cannot process this input" in outcome.stderr:  # the CLI's last-resort guard
        problems.append(f"unexpected error: {outcome.stderr.strip()[:300]}")
    if outcome.traceback:
        problems.append(f"traceback: {outcome.stderr.strip()[-400:]}")
    lines = outcome.stderr.strip().splitlines()
    failed = outcome.code not in (0, None)
    if failed and run.call is None and len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr: {outcome.stderr.strip()[:400]}")
    if outcome.code == 0 and run.call is None and lines:
        problems.append(f"stderr on success: {outcome.stderr.strip()[:300]}")
    if run.message and run.message not in outcome.stderr:
        problems.append(f"message {run.message!r} not in {outcome.stderr.strip()[:300]!r}")
    for kind in ("changed", "stray", "escapes"):
        if getattr(outcome, kind):
            problems.append(f"{kind}: {getattr(outcome, kind)}")


def _call(run: Run) -> tuple[int, str, bool]:
    import normfuse

    try:
        assert run.call is not None
        run.call()
    except normfuse.NormfuseError as error:
        return 2, f"normfuse: error: {error}\n", False
    except Exception as error:
        return 3, f"Traceback: {type(error).__name__}: {error}", True
    return 0, "", False


def _in_process(run: Run) -> tuple[int, str, bool]:
    from normfuse.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    previous = os.umask(run.umask) if run.umask is not None else None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(run.argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 2
            except BaseException as error:  # anything escaping main is a traceback
                return 3, f"Traceback: {type(error).__name__}: {error}", True
    finally:
        if previous is not None:
            os.umask(previous)
    stderr = err.getvalue()
    return code, stderr, "Traceback" in stderr


def drop_dac_capabilities() -> None:
    """Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this process: root then meets file
    modes like any other user (what chmod alone cannot show when the tests run as root)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # out of the bounding set too, or exec as root restores them
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    dac = (1 << 1) | (1 << 2)
    for name in ("effective", "permitted", "inheritable"):
        setattr(data[0], name, getattr(data[0], name) & ~dac)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _wait(run: Run, case_dir: Path, process: subprocess.Popen) -> None:
    """Sleep `run.after` seconds, or until a file matching `run.wait_for` appears."""
    deadline = time.monotonic() + (run.after if run.wait_for is None else TIMEOUT_S / 2)
    while time.monotonic() < deadline and process.poll() is None:
        if run.wait_for is not None and next(case_dir.glob(run.wait_for), None) is not None:
            return
        time.sleep(0.05)


def _subprocess(run: Run, case_dir: Path) -> tuple[int | None, str, bool]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("NORMFUSE_DEBUG", None)

    def prepare() -> None:
        if run.umask is not None:
            os.umask(run.umask)
        if run.fsize is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (run.fsize, run.fsize))
        if run.stdout == "closed":
            os.close(1)
        if run.user == "root-without-dac":
            drop_dac_capabilities()

    stdout: object = subprocess.DEVNULL
    if run.stdout == "full":
        stdout = open("/dev/full", "w")  # noqa: SIM115
    elif run.stdout == "broken":
        stdout = subprocess.PIPE
    command = [sys.executable, "-m", "normfuse", *run.argv]
    process = subprocess.Popen(
        command,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        cwd=case_dir,
        preexec_fn=prepare,
        text=True,
    )
    if run.stdout == "broken":
        assert process.stdout is not None
        process.stdout.close()
    if run.signal is not None:
        _wait(run, case_dir, process)
        process.send_signal(run.signal)
    try:
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return None, "", False
    finally:
        if run.stdout == "full":
            stdout.close()  # type: ignore[union-attr]
    code = process.returncode
    if code < 0:  # killed by a signal it did not handle
        return -code + 128 if code != -signal.SIGKILL else None, stderr, False
    return code, stderr, "Traceback" in stderr
