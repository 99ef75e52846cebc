"""The adversarial corpus (corpora/adversarial.py) through normfuse.optimize in every
configuration: no crash, the original's interface, runnable at ORT_DISABLE_ALL with exactly the
original's feeds (overridden initializers included), the original's numerics on adversarial
inputs, and the expected outcome."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import adversarial_outcomes as pins
import numpy as np
import onnx
import pytest
from adversarial_harness import compare, float64_model, narrowest_float, session
from corpora.adversarial import CASES, Case
from corpora.adversarial_2 import FINDINGS as FINDINGS_2
from corpora.adversarial_3 import FINDINGS as FINDINGS_3
from normfuse.passes import DEFAULT_PASS_NAMES

import normfuse

CONFIGS = {
    "default": {},
    "onnx": {"target": "onnx"},
    "skip": {"passes": [*DEFAULT_PASS_NAMES, "skip-norm"]},
    "validate": {"validation": "auto"},
}
BY_NAME = {c.name: c for c in CASES}
FINDINGS = {**FINDINGS_2, **FINDINGS_3}
PINNED = pins.load()


def _marks(name: str, config: str) -> list:
    """slow, and xfail(strict) where a finding of the second or third corpus
    (corpora/adversarial_2.py, corpora/adversarial_3.py: FINDINGS) is known to fail this case in
    this configuration."""
    marks = [pytest.mark.slow] if BY_NAME[name].slow else []
    reason = _finding(name, config)
    if reason is not None:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return marks


def _params(cases, config: str = ""):
    return [pytest.param(c.name, marks=_marks(c.name, config)) for c in cases]


def _finding(name: str, config: str) -> str | None:
    """The finding (with its document) known to fail `name` in `config`, or None."""
    finding, configs = FINDINGS.get(name, ("", ()))
    if config not in configs:
        return None
    return f"{finding} (docs/limitations.md)"


@functools.cache
def _original(name: str):
    """The case's model, its feed sets and the original's outputs on each (built once)."""
    case = BY_NAME[name]
    m = case.build()
    s = session(m)
    feeds = case.feeds(m)
    return m, feeds, [s.run(None, f) for _, f in feeds]


@functools.cache
def _reference_session(name: str):
    m64 = float64_model(_original(name)[0])
    return session(m64) if m64 is not None else None


def _reference(name: str, feeds: dict):
    s = _reference_session(name)
    if s is None:
        return None
    cast = {
        k: v.astype(np.float64) if v.dtype in (np.float16, np.float32) else v
        for k, v in feeds.items()
    }
    return s.run(None, cast)


def _symbolic_dims(m: onnx.ModelProto) -> dict[str, int]:
    """Symbolic dims of the inputs a caller must feed (an overridable initializer's own dims are
    not --dims: it is never generated)."""
    initializers = {t.name for t in m.graph.initializer}
    return {
        d.dim_param: 2
        for i in m.graph.input
        if i.name not in initializers
        for d in i.type.tensor_type.shape.dim
        if d.HasField("dim_param")
    }


def _needs_inputs(case: Case, m: onnx.ModelProto) -> bool:
    """Inputs random generation cannot get right: integer inputs (shapes, ids) or symbolic dims
    whose size a case's data fixes."""
    integer = any(
        np.issubdtype(np.asarray(v).dtype, np.integer)
        for variant in case.fixed
        for v in variant.values()
    )
    return integer or (bool(_symbolic_dims(m)) and any(case.fixed[0]))


def _options(case: Case, config: str, m: onnx.ModelProto, feeds: dict, folder) -> dict:
    """The optimize() arguments of `config`; validation gets the case's own inputs (as --inputs
    would, written in `folder`) where generated ones cannot run the original."""
    options = dict(CONFIGS[config])
    if options.get("validation") == "auto":
        npz = None
        if _needs_inputs(case, m):
            npz = str(folder / "inputs.npz")
            np.savez(npz, **feeds)
        options["validation"] = normfuse.ValidationOptions(dims=_symbolic_dims(m), npz=npz)
    return options


def _needs_folder(case: Case, config: str, m: onnx.ModelProto) -> bool:
    """True where `_options` writes the case's inputs to a file."""
    return CONFIGS[config].get("validation") == "auto" and _needs_inputs(case, m)


def _opset(m: onnx.ModelProto) -> int:
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


def _may_be_unemittable(kind: str, config: str, m: onnx.ModelProto) -> bool:
    """Under --target onnx a kind whose standard op needs a newer opset (LayerNormalization 17,
    RMSNormalization 23) either fuses after a raise or is left with `opset-too-low`."""
    needs = {"layer-norm": 17, "rms-norm": 23}
    return config == "onnx" and _opset(m) < needs.get(kind, 0)


def _interface(info) -> list:
    return [(i.name, i.type.SerializeToString()) for i in info]


def optimize_case(case: Case, config: str):
    """`normfuse.optimize` of the case's model under `config`: the result, or the
    NormfuseError it raised (any other exception propagates)."""
    m, feed_sets, _ = _original(case.name)
    if not _needs_folder(case, config, m):
        return _optimize(m, _options(case, config, m, feed_sets[0][1], None))
    with tempfile.TemporaryDirectory() as folder:
        return _optimize(m, _options(case, config, m, feed_sets[0][1], Path(folder)))


def _optimize(m: onnx.ModelProto, options: dict):
    """`normfuse.optimize(m, **options)`, or the NormfuseError it raised."""
    try:
        return normfuse.optimize(m, **options)
    except normfuse.NormfuseError as error:
        return error


def check_case(case: Case, config: str) -> list[str]:
    """Every problem of `case` under `config`, each starting with its category."""
    m, feed_sets, expected = _original(case.name)
    before = m.SerializeToString()
    try:
        result = optimize_case(case, config)
    except Exception as error:
        return [
            f"CRASH {type(error).__name__}: {str(error).splitlines()[-1] if str(error) else ''}"
        ]
    if isinstance(result, normfuse.NormfuseError):
        refused = [] if case.refusal_ok else [f"REFUSED NormfuseError: {result}"]
        return refused + _check_pin(case.name, config, None)
    return _check_result(case, config, m, feed_sets, expected, before, result)


def _check_pin(name: str, config: str, report) -> list[str]:
    """The outcome must be the one pinned in tests/corpora/adversarial_outcomes.json."""
    if BY_NAME[name].slow or config in FINDINGS.get(name, ("", ()))[1]:
        return []  # slow (not in the default run), or a known finding (strict xfail): unpinned
    actual = pins.REFUSED if report is None else pins.outcome(report)
    pinned = PINNED.get(name, {}).get(config)
    if pinned == actual:
        return []
    again = "if intended, re-pin: python tests/adversarial_outcomes.py, and review the diff"
    if pinned is None:
        return [f"UNPINNED outcome {actual} ({again})"]
    return [f"PINNED-OUTCOME changed: pinned {pinned}, got {actual} ({again})"]


def _check_result(case, config, m, feed_sets, expected, before, result) -> list[str]:
    problems = []
    if m.SerializeToString() != before:
        problems.append("INPUT-MODIFIED the input ModelProto was changed")
    out = result.model
    if _interface(out.graph.input) != _interface(m.graph.input):
        problems.append(
            "INTERFACE inputs differ: "
            f"{[i.name for i in m.graph.input]} -> {[i.name for i in out.graph.input]}"
        )
    if _interface(out.graph.output) != _interface(m.graph.output):
        problems.append(
            "INTERFACE outputs differ: "
            f"{[i.name for i in m.graph.output]} -> {[i.name for i in out.graph.output]}"
        )
    try:
        candidate = session(out)
    except Exception as error:
        return [*problems, f"UNRUNNABLE {str(error).splitlines()[0][:300]}"]
    dtype = narrowest_float(m)
    for (label, feeds), originals in zip(feed_sets, expected, strict=True):
        try:
            outputs = candidate.run(None, feeds)
        except Exception as error:
            problems.append(f"UNRUNNABLE on {label}: {str(error).splitlines()[0][:300]}")
            break
        verdict = compare(originals, outputs, dtype)
        if not verdict.ok:
            verdict = compare(originals, outputs, dtype, _reference(case.name, feeds))
        if not verdict.ok:
            problems.append(f"WRONG-NUMERICS on {label}: {verdict.detail}")
    report = result.report
    validation = report.validation
    if validation is not None and not validation.passed:
        problems.append("VALIDATION-FAILED report.validation.passed is False")
    problems += _check_expectation(case, config, m, report)
    problems += _check_pin(case.name, config, report)
    return problems


def _check_expectation(case: Case, config: str, m: onnx.ModelProto, report) -> list[str]:
    fused = [s.kind for s in report.sites]
    reasons = sorted({n.reason for n in report.near_misses})
    expect = case.expect
    if expect.outcome == "fuse":
        problems = [
            f"EXPECT-FUSE {kind}: {fused.count(kind)} sites, expected >= {count} "
            f"(near-misses {reasons})"
            for kind, count in expect.sites.items()
            if fused.count(kind) < count
            and not (_may_be_unemittable(kind, config, m) and "opset-too-low" in reasons)
        ]
        if expect.max_sites is not None and len(fused) > expect.max_sites:
            problems.append(
                f"EXPECT-KEEP {len(fused)} sites fused, at most {expect.max_sites}: {fused}"
            )
        return problems
    if expect.outcome == "keep":
        problems = []
        norm_sites = [k for k in fused if k != "skip-norm"]
        if len(norm_sites) > (expect.max_sites or 0):
            problems.append(f"EXPECT-KEEP fused {fused} (near-misses {reasons})")
        elif expect.reasons and not _acceptable(expect.reasons, config, m) & set(reasons):
            problems.append(f"EXPECT-REASON wanted one of {sorted(expect.reasons)}, got {reasons}")
        return problems
    return []


def _acceptable(reasons: frozenset, config: str, m: onnx.ModelProto) -> frozenset:
    """Under --target onnx a site whose op cannot be emitted at this opset may say so instead."""
    if config == "onnx" and _opset(m) < 23:
        return reasons | {"opset-too-low"}
    return reasons


def _problems(name: str, config: str) -> list[str]:
    """check_case's problems, an exception it raised as one more."""
    try:
        return check_case(BY_NAME[name], config)
    except Exception as error:  # reported with its configuration; the others still run
        return [f"RAISED {type(error).__name__}: {error}"]


@pytest.mark.parametrize("name", _params(CASES))
def test_adversarial_case(name: str) -> None:
    """The case in every configuration (CONFIGS), each checked as `check_case` says. A
    configuration a known finding fails (FINDINGS) must still fail (as a strict xfail would);
    then, the others passing, the test is reported xfailed with the finding."""
    wrong, known = [], []
    for config in CONFIGS:
        problems, finding = _problems(name, config), _finding(name, config)
        if finding is not None:
            known.append(finding)
            if not problems:
                wrong.append(f"{config}: passes, but {finding} is expected to fail it (XPASS)")
        elif problems:
            wrong.append(f"{config}:\n" + "\n".join(problems))
    assert not wrong, f"{name} [{BY_NAME[name].cls}] " + "\n".join(wrong)
    if known:
        pytest.xfail("; ".join(sorted(set(known))))


@pytest.mark.parametrize("name", _params(CASES))
def test_case_is_a_valid_model(name: str) -> None:
    """Each case passes onnx.checker and runs in ONNX Runtime on all its feeds."""
    m, feed_sets, _ = _original(name)
    onnx.checker.check_model(m)
    assert feed_sets


@pytest.mark.parametrize("name", _params([c for c in CASES if c.name.startswith("a3_")]))
def test_third_corpus_passes_the_full_check(name: str) -> None:
    """Each case of the third corpus passes onnx.checker with full_check (strict shape
    inference), as issue 21 requires."""
    onnx.checker.check_model(_original(name)[0], full_check=True)


@pytest.mark.parametrize("name", _params([c for c in CASES if c.evidence is not None]))
def test_evidence_differs_from_nearest_fused_op(name: str) -> None:
    """A look-alike really computes something else: the nearest fused op, run in ONNX Runtime,
    differs from it on at least one of the case's inputs (a secretly exact case fails here)."""
    case = BY_NAME[name]
    m, feed_sets, expected = _original(name)
    near = session(case.evidence(m))
    dtype = narrowest_float(m)
    differs = [
        label
        for (label, feeds), originals in zip(feed_sets, expected, strict=True)
        if not compare(originals, near.run(None, feeds), dtype, loosest=True).ok
    ]
    assert differs, f"{name}: the nearest fused op matches on every input"


def test_corpus_covers_every_class() -> None:
    classes = {c.cls for c in CASES}
    assert classes >= {str(n) for n in range(1, 10)} | {"hazard", "exact-odd"}
    assert len(CASES) >= 150
    for c in CASES:
        if c.expect.outcome == "keep" and c.cls in ("hazard", "4", "5") and c.evidence is None:
            assert c.name.startswith(("hz_family_", "ln_exponent_f64", "rms_exponent_f64")), c.name


@pytest.mark.parametrize(
    "name", ["ln_claimed_rank3_actual_rank4_axis2", "ln_gamma_dynamic_input_rank1"]
)
def test_validation_without_usable_inputs_is_a_normfuse_error(name: str) -> None:
    """Validation with generated inputs the original itself cannot run on (a Reshape's shape
    input, a symbolic dim that must be 16) fails as a NormfuseError, never another exception."""
    m = _original(name)[0]
    with pytest.raises(normfuse.NormfuseError, match="the original does not run on the validation"):
        normfuse.optimize(m, validation=normfuse.ValidationOptions(dims=_symbolic_dims(m)))


@pytest.mark.parametrize(
    "name",
    _params(
        [c for c in CASES if c.expect.outcome == "keep" and c.evidence is not None], "near-miss"
    ),
)
def test_lookalike_reports_a_near_miss(name: str) -> None:
    """Issue 12: every look-alike is left unfused (beyond its allowance) and gets a near-miss,
    with its expected reason where the case names one (never a silent refusal)."""
    expect = BY_NAME[name].expect
    report = normfuse.optimize(_original(name)[0]).report
    norm_sites = [site.kind for site in report.sites if site.kind != "skip-norm"]
    reasons = {miss.reason for miss in report.near_misses}
    assert len(norm_sites) <= (expect.max_sites or 0), f"{name}: fused {norm_sites}"
    assert reasons, f"{name}: not fused and no near-miss"
    if expect.reasons:
        assert expect.reasons & reasons, f"{name}: {sorted(reasons)}, not {sorted(expect.reasons)}"
