"""Other projects' norm-fusion test cases (corpora/foreign.py), run through normfuse.

For each case: the rebuilt graph is valid (onnx.checker, full check) and runs in ONNX Runtime;
normfuse's output computes what the original does on random and adversarial inputs (ORT at
ORT_DISABLE_ALL; float tolerances of the narrowest float type, NaN/Inf as values, a candidate
closer to a float64 run of the original where the original is not finite counts as a repair);
the caller's model is unchanged; and the case's expectation holds at the target its project's
fusion corresponds to: `fuse` fuses (sites per kind, the exact epsilon), `keep` fuses nothing,
returns the model unchanged and reports one of the expected reasons. At the other target only
safety is checked (numerics; `keep` still fuses nothing). A gap (an exact fusion normfuse misses)
is xfail(strict=True), so the suite stays green and the gap fails the day it closes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from adversarial_harness import TOLERANCES, compare, float64_model, narrowest_float, session
from corpora.foreign import CASES, ForeignCase
from corpora.foreign_onnxruntime import _shared_input
from helpers import adversarial_inputs

import normfuse

PROJECTS = ("onnxruntime", "onnxscript", "openvino")


def _params(primary: bool):
    params = []
    for name, c in CASES.items():
        marks = [pytest.mark.xfail(strict=True, reason=c.gap)] if primary and c.gap else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _optimize(c: ForeignCase, target: str) -> normfuse.OptimizeResult:
    original = c.build()
    onnx.checker.check_model(original, full_check=True)
    before = original.SerializeToString()
    result = normfuse.optimize(original, target=target, passes=c.passes)
    assert original.SerializeToString() == before, "the caller's model was changed"
    _assert_same_numerics(original, result.model, c.dims)
    return result


def _assert_same_numerics(original: onnx.ModelProto, fused: onnx.ModelProto, dims: dict) -> None:
    reference = float64_model(original)
    dtype = narrowest_float(original)
    original_session, fused_session = session(original), session(fused)
    for profile, feeds in adversarial_inputs(original, dims or None, seed=7).items():
        expected = original_session.run(None, feeds)
        actual = fused_session.run(None, feeds)
        references = None
        if reference is not None:
            wide = {
                k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
                for k, v in feeds.items()
            }
            references = session(reference).run(None, wide)
        outcome = compare(expected, actual, dtype, references)
        if not outcome.ok and references is not None:
            outcome = _repaired(expected, actual, references, dtype) or outcome
        assert outcome.ok, f"WRONG FUSION on {profile} inputs: {outcome.detail}"


def _repaired(expected, actual, references, dtype):
    """An outcome where every element the original disagrees on is one the fused model gets
    within tolerance of the float64 evaluation and no further from it than the original (the
    original's own rounding, e.g. a constant row's mean that is not the row's value, amplified by
    a tiny epsilon); None otherwise."""
    atol, rtol = TOLERANCES[dtype]
    for o, c, r in zip(expected, actual, references, strict=True):
        o64, c64, r64 = (a.astype(np.float64) for a in (o, c, r))
        with np.errstate(invalid="ignore"):
            agree = np.abs(o64 - c64) <= atol + rtol * np.abs(o64)
            fused_error, original_error = np.abs(c64 - r64), np.abs(o64 - r64)
            repaired = (fused_error <= atol + rtol * np.abs(r64)) & (fused_error <= original_error)
        if not (agree | repaired | (np.isnan(o64) & np.isnan(c64))).all():
            return None
    return compare(references, references, dtype)


def _check_expectation(c: ForeignCase, result: normfuse.OptimizeResult, original) -> None:
    kinds = Counter(site.kind for site in result.report.sites)
    reasons = {miss.reason for miss in result.report.near_misses}
    if c.expect == "fuse":
        for kind, count in c.sites.items():
            assert kinds[kind] >= count, f"{kind}: {kinds[kind]} sites, near-misses {reasons}"
        if c.epsilon is not None:
            assert {site.epsilon for site in result.report.sites} == {c.epsilon}
    elif c.expect == "keep":
        assert not result.report.sites, f"fused {kinds}"
        assert result.model.SerializeToString() == original.SerializeToString()
        if c.reasons:
            assert reasons & c.reasons, f"near-misses {reasons}, expected one of {c.reasons}"


@pytest.mark.parametrize("name", _params(primary=True))
def test_case_at_its_projects_target(name: str) -> None:
    c = CASES[name]
    result = _optimize(c, c.target)
    _check_expectation(c, result, c.build())


@pytest.mark.parametrize("name", _params(primary=False))
def test_case_at_the_other_target_is_safe(name: str) -> None:
    c = CASES[name]
    result = _optimize(c, "onnx" if c.target == "ort" else "ort")
    if c.expect == "keep":
        assert not result.report.sites


def test_registry_covers_each_project_and_names_its_source() -> None:
    counts = Counter(c.project for c in CASES.values())
    assert set(counts) == set(PROJECTS)
    for c in CASES.values():
        assert c.expect in ("fuse", "keep", "either"), c.name
        assert c.test and c.theirs, c.name
        assert c.target in ("ort", "onnx"), c.name
        assert (c.expect == "fuse") == bool(c.sites) or c.expect == "either", c.name
        assert not c.gap or (c.gap.startswith("gap:") and c.expect == "fuse"), c.name


def test_epsilon_zero_fusion_is_not_exact() -> None:
    """Why `epsilon-not-positive` holds where ONNX Runtime fuses epsilon 0
    (TwoLayerNormShareSameInput and LayerNormWithCastFusionTest_2/_3): on near-constant rows the
    fused op returns inf where the decomposed graph is finite."""
    original = _shared_input(0.0)
    fused = onnx.helper.make_model(
        onnx.helper.make_graph(
            [
                onnx.helper.make_node(
                    "LayerNormalization",
                    ["A", "gamma", "gamma"],
                    [out.name],
                    axis=-1,
                    epsilon=0.0,
                )
                for out in original.graph.output
            ],
            "fused",
            list(original.graph.input),
            list(original.graph.output),
            [onnx.numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "gamma")],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    rng = np.random.default_rng(0)
    feeds = {"A": (1e4 + rng.normal(0.0, 1e-3, (16, 32, 4))).astype(np.float32)}
    expected = session(original).run(None, feeds)[0]
    actual = session(fused).run(None, feeds)[0]
    assert np.isfinite(expected).sum() > np.isfinite(actual).sum()
    assert (np.isinf(actual) & np.isfinite(expected)).any()


def test_epsilon_outside_the_root_is_not_layer_norm() -> None:
    """Why OpenVINO's OUTSIDE_SQRT MVN graphs are left alone: the nearest fused op,
    LayerNormalization with the same epsilon, differs from them (here on small-magnitude rows),
    and the numerics check above catches it."""
    original = CASES["ov_mvn_Outside"].build()
    nearest = onnx.helper.make_model(
        onnx.helper.make_graph(
            [
                onnx.helper.make_node(
                    "LayerNormalization",
                    ["input", "one"],
                    [original.graph.output[0].name],
                    axis=1,
                    epsilon=1e-9,
                )
            ],
            "nearest",
            list(original.graph.input),
            list(original.graph.output),
            [onnx.numpy_helper.from_array(np.ones((3, 224, 224), np.float32), "one")],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    with pytest.raises(AssertionError, match="WRONG FUSION on tiny inputs"):
        _assert_same_numerics(original, nearest, {})
