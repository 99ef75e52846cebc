"""Fingerprint of every output: for each case of the corpora and each committed fixture, in three
configurations (default; `--target onnx`; the default passes without skip-norm), the SHA-256 of
the optimised model's bytes and of its JSON report (sites, near-misses, notes, repairs; not the
version).

A refactoring that must not change behaviour is checked by fingerprinting before and after and
comparing: `--compare BEFORE.json AFTER.json` prints every case whose model or report differs and
exits 1 if any does.

Run on demand, from the repository root:

    python tests/benchmarks/fingerprint.py --out before.json [--jobs 2] [--limit N]
    python tests/benchmarks/fingerprint.py --compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import onnx  # noqa: E402

CONFIGS: dict[str, dict] = {
    "default": {},
    "target-onnx": {"target": "onnx"},
    "no-skip-norm": {"passes": ["group-norm", "layer-norm", "rms-norm"]},
}


def _corpora() -> dict[str, dict[str, Callable[[], onnx.ModelProto]]]:
    """Every corpus's cases by name: the builder that makes each one."""
    try:
        from corpora import adversarial, adversarial_4, adversarial_6, adversarial_8, foreign
    except ImportError:  # a tree from before the corpora moved under tests/
        from models import adversarial, adversarial_4, adversarial_6, adversarial_8, foreign

    corpora = {
        "adversarial": {c.name: c.build for c in adversarial.CASES},
        "adversarial_4": {c.name: c.build for c in adversarial_4.CASES},
        "adversarial_6": {c.name: c.build for c in adversarial_6.CASES},
        "adversarial_8": {c.name: c.build for c in adversarial_8.CASES},
        "foreign": {name: c.build for name, c in foreign.CASES.items()},
    }
    real = ROOT / "models" / "real"
    corpora["real"] = {
        str(path.relative_to(real)): (lambda p=path: onnx.load(p))
        for path in sorted(real.rglob("*.onnx"))
    }
    return corpora


def _keys(limit: int | None) -> Iterator[tuple[str, str, str]]:
    for corpus, cases in _corpora().items():
        for name in list(cases)[:limit]:
            for config in CONFIGS:
                yield corpus, name, config


_CACHE: dict = {}


def _fingerprint(key: tuple[str, str, str]) -> tuple[str, dict]:
    """(key text, {model, report} digests) for one case in one configuration."""
    import normfuse

    corpus, name, config = key
    if not _CACHE:
        _CACHE.update(_corpora())
    label = f"{corpus}/{name}/{config}"
    try:
        model = _CACHE[corpus][name]()
    except Exception as error:  # a builder that needs what this machine lacks
        return label, {"skipped": type(error).__name__}
    try:
        result = normfuse.optimize(model, **CONFIGS[config])
    except normfuse.NormfuseError as error:
        return label, {"error": str(error)}
    record = result.report.as_dict()
    record.pop("normfuse_version")  # a version bump is not a change of behaviour
    report = json.dumps(record, sort_keys=True)
    return label, {
        "model": hashlib.sha256(result.model.SerializeToString(deterministic=True)).hexdigest(),
        "report": hashlib.sha256(report.encode()).hexdigest(),
        "sites": len(result.report.sites),
        "near_misses": len(result.report.near_misses),
    }


def compare(before: Path, after: Path) -> int:
    """Print every case whose fingerprint differs between two runs; 1 if any does."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    differing = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    for key in differing:
        print(f"{key}: {old.get(key)} -> {new.get(key)}")
    print(f"{len(old)} / {len(new)} fingerprints, {len(differing)} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--limit", type=int, help="at most N cases of each corpus")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give --out FILE or --compare BEFORE AFTER")
    keys = list(_keys(args.limit))
    with Pool(args.jobs) as pool:
        prints = dict(pool.imap_unordered(_fingerprint, keys, chunksize=8))
    args.out.write_text(json.dumps(dict(sorted(prints.items())), indent=1) + "\n")
    print(f"{len(prints)} fingerprints written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
