"""The sixth adversarial corpus (corpora/adversarial_6.py: the norms of 2024-26 models and the
group-norm forms) through normfuse.optimize in `default`, `--target onnx`, `--validate` and, for
cases with residual sums, `skip-norm` too: no crash or refusal, the input unchanged, the
original's interface, `onnx.checker` full_check on the `--target onnx` output, runnable at
ORT_DISABLE_ALL, the original's numerics on the corpus's adversarial profiles and on the case's
own feeds (rows of 1e3 + N(0, 0.01), constant groups, overridden initializers; a difference is
no error where the candidate is no further from a float64 evaluation than the original: a
repair), validation passed, initializers kept in their scopes, the file not grown beyond what
fused nodes add, float16 models no further from float64 than the original (x1.10, both ORT
levels; the fourth corpus's checks), and the expected outcome. `python tests/test_adversarial_6.py`
prints the runs that fail and the counts by class."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from adversarial_harness import (
    case_config_params,
    compare,
    float64_model,
    narrowest_float,
    session,
)
from corpora.adversarial import feed_sets
from corpora.adversarial_6 import CASES, CONFIGS, FINDINGS, Case6, extra_feeds, symbolic_inputs
from normfuse.passes import DEFAULT_PASS_NAMES
from test_adversarial import _interface
from test_adversarial_4 import (
    _allowance,
    _distance,
    _f64_problems,
    _no_further_from_f64,
    _placement_problems,
)

import normfuse

BY_NAME = {c.name: c for c in CASES}


@functools.cache
def _original(name: str):
    """The case's model, its feed sets (corpus profiles, then its own) and the original's
    outputs on each."""
    c = BY_NAME[name]
    m = c.build()
    feeds = feed_sets(m, ({},), c.overrides, name) + extra_feeds(m, c, seed=len(name))
    s = session(m)
    return m, feeds, [s.run(None, f) for _, f in feeds]


@functools.cache
def _reference_session(name: str):
    m64 = float64_model(_original(name)[0])
    return None if m64 is None else session(m64)


def _reference(name: str, feeds: dict):
    s = _reference_session(name)
    if s is None:
        return None
    return s.run(
        None,
        {
            k: v.astype(np.float64) if v.dtype in (np.float16, np.float32) else v
            for k, v in feeds.items()
        },
    )


def _expectation(c: Case6, report) -> list[str]:
    """The declared outcome: `fuse` at least the sites of each kind; `keep` no norm site and,
    where reasons are named, one of them; `or` either of the two."""
    fused = [s.kind for s in report.sites]
    reasons = sorted({n.reason for n in [*report.near_misses, *report.kept]})
    e = c.expect
    enough = all(fused.count(k) >= n for k, n in e.sites.items())
    if e.outcome == "fuse" and not enough:
        return [f"EXPECT-FUSE {e.sites}, fused {fused} (near-misses {reasons})"]
    if e.outcome == "keep":
        if fused:
            return [f"EXPECT-KEEP fused {fused} (near-misses {reasons})"]
        if e.reasons and not e.reasons & set(reasons):
            return [f"EXPECT-REASON wanted one of {sorted(e.reasons)}, got {reasons}"]
    if e.outcome == "or" and not enough:
        if fused:
            return [f"EXPECT-OR fused {fused}, not {e.sites} (near-misses {reasons})"]
        if not e.reasons & set(reasons):
            return [f"EXPECT-REASON not fused; wanted one of {sorted(e.reasons)}, got {reasons}"]
    return []


def _repaired(c: Case6, m, feeds: dict, originals, outputs) -> bool:
    """A difference from the original is no error where the candidate is no further from a
    float64 evaluation than the original is, and within 5e-3 * (1 + |reference|) of it at every
    element (float32 statistics of rows at 1e3 + N(0, 0.01) carry ~4e-3 of rounding); the case's
    own reference where it has one."""
    if c.reference is None:
        return _no_further_from_f64(m, feeds, originals, outputs)
    for o, out, ref in zip(originals, outputs, c.reference(m, feeds), strict=True):
        off = np.abs(out.astype(np.float64) - ref)
        if _distance(out, ref) > _distance(o, ref) or not np.all(off <= 5e-3 * (1 + np.abs(ref))):
            return False
    return True


def _options(m: onnx.ModelProto, config: str) -> dict:
    """optimize()'s arguments in `config` (validation with every symbolic dim at 2)."""
    options = dict(CONFIGS[config])
    if options.pop("skip", False):
        options["passes"] = [*DEFAULT_PASS_NAMES, "skip-norm"]
    if options.get("validation") == "auto":
        dims = {
            d.dim_param: 2
            for i in m.graph.input
            for d in i.type.tensor_type.shape.dim
            if d.HasField("dim_param")
        }
        options["validation"] = normfuse.ValidationOptions(dims=dims)
    return options


def check(c: Case6, config: str) -> list[str]:
    """Every problem of case `c` under `config`, each starting with its class."""
    m, feeds, expected = _original(c.name)
    before = m.SerializeToString()
    try:
        result = normfuse.optimize(m, **_options(m, config))
    except normfuse.NormfuseError as error:
        return [f"REFUSED {error}"]
    except Exception as error:
        return [f"CRASH {type(error).__name__}: {str(error).splitlines()[-1][:300]}"]
    out, problems = result.model, []
    if m.SerializeToString() != before:
        problems.append("INPUT-MODIFIED")
    for what in ("input", "output"):
        if _interface(getattr(out.graph, what)) != _interface(getattr(m.graph, what)):
            problems.append(f"INTERFACE {what}s differ")
    if config == "onnx":
        try:
            onnx.checker.check_model(out, full_check=True)
        except Exception as error:
            problems.append(f"CHECKER {str(error).splitlines()[0][:300]}")
    try:
        candidate = session(out)
    except Exception as error:
        return [*problems, f"UNRUNNABLE {str(error).splitlines()[0][:300]}"]
    dtype = narrowest_float(m)
    for (label, f), originals in zip(feeds, expected, strict=True):
        try:
            outputs = candidate.run(None, f)
        except Exception as error:
            return [*problems, f"UNRUNNABLE on {label}: {str(error).splitlines()[0][:300]}"]
        verdict = compare(originals, outputs, dtype)
        if not verdict.ok:
            verdict = compare(originals, outputs, dtype, _reference(c.name, f))
        if not verdict.ok and not _repaired(c, m, f, originals, outputs):
            problems.append(f"WRONG-NUMERICS on {label}: {verdict.detail}")
    if result.report.validation is not None and not result.report.validation.passed:
        problems.append("VALIDATION-FAILED report.validation.passed is False")
    if result.report.sites:
        problems += _placement_problems(m, out)
        if out.ByteSize() > m.ByteSize() + _allowance(m, len(result.report.sites)):
            problems.append(f"GROWN {m.ByteSize()} -> {out.ByteSize()} bytes")
    if dtype == np.float16 and result.report.sites:
        problems += _f64_problems(m, out, feeds)
    return problems + _expectation(c, result.report)


@pytest.mark.parametrize(
    ("name", "config"), case_config_params(CASES, FINDINGS, "docs/limitations.md")
)
def test_adversarial_6_case(name: str, config: str) -> None:
    problems = check(BY_NAME[name], config)
    assert not problems, f"{name} [{BY_NAME[name].feature}] {config}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_case_is_a_valid_model(name: str) -> None:
    """Each case passes onnx.checker full_check and runs in ONNX Runtime (optimisations
    disabled) on all its feeds, its own adversarial ones included."""
    m, feeds, _ = _original(name)
    onnx.checker.check_model(m, full_check=True)
    c = BY_NAME[name]
    own = int(c.offset) + int(bool(c.groups)) + 2 * symbolic_inputs(m)
    assert len(feeds) == 6 + 2 * bool(c.overrides) + own


def test_corpus_size_and_features() -> None:
    features = [c.feature for c in CASES]
    assert len(CASES) >= 120
    assert {f: features.count(f) >= 8 for f in "123456"} == dict.fromkeys("123456", True)
    assert set(FINDINGS) <= set(BY_NAME)
    assert {c.expect.outcome for c in CASES} <= {"fuse", "keep", "or"}


def test_extra_feeds_are_adversarial() -> None:
    """The case's own feeds hold what they claim: rows of 1e3 + N(0, 0.01), and x constant within
    each of its groups (so a one-pass variance cancels)."""
    c = BY_NAME["a6_gn21_g4"]
    feeds = _original(c.name)[1]
    by_label = dict(feeds)
    x = by_label["offset1e3"]["x"]
    assert abs(float(x.mean()) - 1e3) < 0.01 and float(x.std()) < 0.05
    grouped = by_label["constant-groups"]["x"].reshape(2, c.groups, -1)
    assert np.all(grouped == grouped[..., :1]) and np.unique(grouped[..., 0]).size == 2 * c.groups


CLASSES = (
    ("wrong", ("WRONG-NUMERICS", "INPUT-MODIFIED", "INTERFACE", "VALIDATION-FAILED", "F64-RATIO")),
    ("unrunnable", ("UNRUNNABLE", "CHECKER")),
    ("crash", ("CRASH", "REFUSED")),
    ("wrong reason", ("EXPECT-REASON",)),
    ("missed", ("EXPECT-FUSE", "EXPECT-OR")),
)


def counts() -> dict[str, int]:
    """Case-configuration runs by their worst problem class (the order of CLASSES; `other`: a
    look-alike fused without a numeric difference, a grown file, a moved weight), or pass; each
    run that is not a pass is printed with its finding id."""
    tally = dict.fromkeys([name for name, _ in CLASSES] + ["other", "pass"], 0)
    for c in CASES:
        for config in c.configs:
            problems = check(c, config)
            found = next(
                (name for name, marks in CLASSES if any(p.startswith(marks) for p in problems)),
                "other" if problems else "pass",
            )
            tally[found] += 1
            if problems:
                finding = FINDINGS.get(c.name, ("no finding", ()))[0]
                print(f"{finding:10s} {found:12s} {c.name}-{config}: {problems[0][:120]}")
    return tally


if __name__ == "__main__":
    print(counts())
