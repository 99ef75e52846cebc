"""Fault injection: plant one fault at a time and check that the default suite catches it.

Each mutant is a text substitution in one product file that must match exactly once (so a
refactor that moves the code is reported as `stale`, never silently skipped). The repository is
copied to a temporary folder once; for each mutant the file is changed there, the tests of the
pass it touches run with `-x` against the copy (imported through PYTHONPATH, ahead of the
editable install), and the file is restored. A mutant is `killed` when those tests fail,
`survived` when they pass. The unmutated copy must pass the same tests first.

Run on demand (not part of the default test run):
    python tests/mutation/run.py            # every mutant
    python tests/mutation/run.py --list     # names and what each plants
    python tests/mutation/run.py eps-x10-layer-norm eps-x10-skip-norm
    python tests/mutation/run.py eps-x10-skip-norm --tests tests/test_skip_norm.py::test_x
Exit status 0 when every mutant is killed, 1 otherwise (a stale mutant counts as not killed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutants import MUTANTS, Mutant  # noqa: E402

IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", ".hypothesis"
)


def copy_repo(target: Path) -> None:
    """The working tree (no VCS data, no environment) under `target`, with `src/normfuse/passes`
    linking to `passes/` so that `PYTHONPATH=target/src` imports normfuse and normfuse.passes
    from the copy."""
    for name in ("src", "passes", "tests", "models", "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=IGNORED)
        else:
            shutil.copy2(source, target / name)
    (target / "src" / "normfuse" / "passes").symlink_to(target / "passes")


def environment(copy: Path) -> dict[str, str]:
    """The process environment with the copy's sources first on the import path."""
    return {**os.environ, "PYTHONPATH": str(copy / "src"), "PYTHONDONTWRITEBYTECODE": "1"}


def check_imports(copy: Path) -> None:
    """Refuse to run when normfuse would not be imported from the copy."""
    code = "import normfuse, normfuse.passes; print(normfuse.__file__, normfuse.passes.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        env=environment(copy),
        capture_output=True,
        text=True,
        check=True,
    )
    paths = result.stdout.split()
    if not all(Path(path).resolve().is_relative_to(copy.resolve()) for path in paths):
        raise SystemExit(f"normfuse is not imported from the copy: {paths}")


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[bool, str]:
    """Whether `tests` pass in the copy, and the last line of pytest's output."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(
        command, cwd=copy, env=environment(copy), capture_output=True, text=True, timeout=900
    )
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return result.returncode == 0, lines[-1] if lines else result.stderr.strip()[-200:]


def apply(copy: Path, mutant: Mutant) -> str | None:
    """Plant `mutant` in the copy; the original text, or None when the substitution does not
    match exactly once (stale)."""
    path = copy / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return None
    path.write_text(text.replace(mutant.old, mutant.new))
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--tests", nargs="+", help="run these pytest selections instead of each mutant's own"
    )
    args = parser.parse_args()
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:32} {mutant.path}: {mutant.fault}")
        return 0
    unknown = set(args.names) - {mutant.name for mutant in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.tests:
        chosen = [dataclasses.replace(m, tests=tuple(args.tests)) for m in chosen]
    outcomes: dict[str, list[str]] = {"killed": [], "survived": [], "stale": []}
    with tempfile.TemporaryDirectory(prefix="normfuse-mutation-") as folder:
        copy = Path(folder)
        copy_repo(copy)
        check_imports(copy)
        baseline = tuple(sorted({test for mutant in chosen for test in mutant.tests}))
        passed, summary = run_tests(copy, baseline)
        if not passed:
            print(f"the unmutated tests fail: {summary}")
            return 1
        for mutant in chosen:
            start = time.monotonic()
            original = apply(copy, mutant)
            if original is None:
                outcome, summary = "stale", "the substitution does not match exactly once"
            else:
                try:
                    passed, summary = run_tests(copy, mutant.tests)
                finally:
                    (copy / mutant.path).write_text(original)
                outcome = "survived" if passed else "killed"
            outcomes[outcome].append(mutant.name)
            took = time.monotonic() - start
            print(f"{outcome:8} {mutant.name:32} {took:5.1f} s  {summary}", flush=True)
    killed, total = len(outcomes["killed"]), len(chosen)
    print(f"mutation score: {killed}/{total} killed ({100 * killed / total:.0f}%)")
    for outcome in ("survived", "stale"):
        if outcomes[outcome]:
            print(f"{outcome}: {', '.join(outcomes[outcome])}")
    return 0 if killed == total else 1


if __name__ == "__main__":
    sys.exit(main())
