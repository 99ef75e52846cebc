"""normfuse over ONNX's own backend test cases (the generators in the onnx wheel), in every
configuration of `backend_sweep.CONFIGS`.

For each case the original runs first in ONNX Runtime (CPU, ORT_DISABLE_ALL) on the case's inputs;
a case ORT cannot run is skipped with ORT's message. Then `optimize` must not raise anything but a
`NormfuseError` judged out of scope (`backend_sweep.OUT_OF_SCOPE`), must leave the input ModelProto
unchanged, keep the graph inputs and outputs, return the model unchanged when nothing was fused,
pass onnx.checker whenever the original does (unless ORT-only), and compute the original's outputs
(NaN where NaN; 1e-4 for float32, 1e-10 for float64, 1e-2 for float16, absolute and relative).

The default run takes every case whose ops include a reduction or a normalisation, every case
with a non-default domain or a non-tensor graph input or output, every 10th other one, and
ONNX's expanded layer norms with only the normalised output kept (the form a fuser should fuse);
NORMFUSE_BACKEND=full runs every case. The fused-site coverage is printed at the end of the run.
ONNX's expanded layer and RMS norms must fuse, and match the original on adversarial inputs.
`python tests/backend_sweep.py` runs the same sweep outside pytest and prints every failure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from backend_sweep import (
    CONFIGS,
    TALLY,
    Outcome,
    adversarial,
    cases,
    check_case,
    compare_outputs,
    downloaded_cases,
    feeds,
    full_run,
    is_expanded_norm,
    original_outputs,
    session,
)

import normfuse

CASES = {case.name: case for case in cases()}
CONSTRAINTS = Path(__file__).resolve().parent.parent / ".ci" / "constraints.txt"
ORIGINALS: dict[str, tuple] = {}


def _original(name: str) -> tuple:
    """The original's ORT outputs (or why it cannot run), computed once per case."""
    if name not in ORIGINALS:
        ORIGINALS[name] = original_outputs(CASES[name])
    return ORIGINALS[name]


def pinned_version(package: str) -> str | None:
    """The version `.ci/constraints.txt` pins for `package` (what CI tests against)."""
    for line in CONSTRAINTS.read_text().splitlines():
        name, _, version = line.partition("==")
        if version and name.strip().lower().replace("_", "-") == package:
            return version.strip()
    return None


def require_pinned_onnx(runtime: bool = False) -> None:
    """Skip, saying why, unless the installed onnx (and with `runtime`, onnxruntime) is the one
    CI pins: the wheel's backend cases (their number, and which ONNX Runtime can run) change
    with their versions."""
    installed = {"onnx": onnx.__version__}
    if runtime:
        installed["onnxruntime"] = ort.__version__
    for package, version in installed.items():
        pinned = pinned_version(package)
        if version != pinned:
            pytest.skip(
                f"exact case counts are those of {package} {pinned} (.ci/constraints.txt); "
                f"{package} {version} is installed"
            )


def test_the_sweep_collects_onnx_cases() -> None:
    """The wheel's generators are found: all of them in the full run, a subset by default;
    exactly as many as the pinned onnx has."""
    assert len(CASES) >= (1800 if full_run() else 350), len(CASES)
    assert sum(is_expanded_norm(name) for name in CASES) >= 60
    require_pinned_onnx()
    assert len(CASES) == (1948 if full_run() else 631)
    assert sum(is_expanded_norm(name) for name in CASES) == 99


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case(name: str) -> None:
    """The case in every configuration (CONFIGS), each checked by `check_case`; the failure names
    each configuration that fails. Skipped where ONNX Runtime cannot run the original, and where
    every configuration is out of scope; a configuration out of scope is counted in the sweep's
    summary, the others must pass."""
    expected, why = _original(name)
    if why and not why.startswith("the original is random"):
        for config in CONFIGS:
            TALLY.record(name, config, Outcome("skip", [why]))
        pytest.skip(why)
    failed, scoped = [], []
    for config in CONFIGS:
        try:
            outcome = check_case(CASES[name], config, expected)
        except Exception as error:  # reported with its configuration; the others still run
            outcome = Outcome("fail", [f"raised {type(error).__name__}: {error}"])
        TALLY.record(name, config, outcome)
        if outcome.status == "scoped":
            scoped.append(f"{config}: {outcome.problems[0]}")
        elif outcome.status != "ok":
            failed.append(f"[{config}] " + "; ".join(outcome.problems))
    assert not failed, "\n".join(failed)
    if len(scoped) == len(CONFIGS):
        pytest.skip(f"out of scope: {'; '.join(scoped)}")


@pytest.mark.parametrize("name", downloaded_cases())
def test_downloaded_model_case(name: str) -> None:
    pytest.skip("ONNX downloads this model from the model zoo; the tests use no network")


# ONNX's own function bodies a fuser should fuse: layer norms as shipped (their Mean and
# InvStdDev outputs become the fused node's) and with only Y kept, and RMS norms.
FUSIBLE = {
    **{
        name: "layer-norm"
        for name in CASES
        if name.startswith("test_layer_norm") and is_expanded_norm(name)
    },
    **{
        name: "rms-norm"
        for name in CASES
        if name.startswith("test_rms_norm") and is_expanded_norm(name)
    },
}


def test_every_fusible_expanded_case_is_collected() -> None:
    """76 layer norms (19 cases, each at opset 17 and 18, as shipped and with only Y kept) and
    19 RMS norms."""
    kinds = list(FUSIBLE.values())
    assert kinds.count("layer-norm") >= 60 and kinds.count("rms-norm") >= 1
    require_pinned_onnx()
    assert (kinds.count("layer-norm"), kinds.count("rms-norm")) == (76, 19)


@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_expanded_norm_is_fused(name: str) -> None:
    """ONNX's own LayerNormalization / RMSNormalization function body is one fused site."""
    result = normfuse.optimize(CASES[name].model)
    reasons = [miss.reason for miss in result.report.near_misses]
    assert [site.kind for site in result.report.sites] == [FUSIBLE[name]], reasons
    assert reasons == []


ADVERSARIAL = list(adversarial(np.ones(2, np.float32)))


@pytest.mark.parametrize("config", ["default", "onnx"])
@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_expanded_norm_on_adversarial_inputs(name: str, config: str) -> None:
    """The fused expanded norms match the original on hard inputs too (NaN where NaN), every
    variant of the input on one pair of sessions."""
    case = CASES[name]
    fused = normfuse.optimize(case.model, **CONFIGS[config]).model
    assert fused.SerializeToString() != case.model.SerializeToString()
    original_session, fused_session = session(case.model), session(fused)
    x_name = case.model.graph.input[0].name
    base = feeds(case)
    variants = adversarial(base[x_name])
    assert list(variants) == ADVERSARIAL
    for variant, x in variants.items():
        inputs = {**base, x_name: x}
        with np.errstate(all="ignore"):
            expected = original_session.run(None, inputs)
            actual = fused_session.run(None, inputs)
        mismatch = compare_outputs(expected, actual)
        assert mismatch is None, f"{variant}: {mismatch}"


# ONNX's expanded normalisation cases that are no layer or RMS norm, and their outcome: MVN
# adds epsilon after the square root; GroupNormalization's body is group-norm statistics.
OTHER_EXPANDED = {
    "test_group_normalization_epsilon_expanded": (["group-norm"], []),
    "test_group_normalization_example_expanded": (["group-norm"], []),
    "test_mvn_expanded": ([], ["epsilon-outside-sqrt"]),
    "test_mvn_expanded_ver18": ([], ["epsilon-outside-sqrt"]),
}


def test_every_expanded_norm_case_has_a_pinned_outcome() -> None:
    expanded = {name for name in CASES if is_expanded_norm(name)}
    assert expanded == set(FUSIBLE) | set(OTHER_EXPANDED)


@pytest.mark.parametrize("name", sorted(OTHER_EXPANDED))
def test_other_expanded_norm_outcome(name: str) -> None:
    """Fused as its own family, or left with its reason."""
    report = normfuse.optimize(CASES[name].model).report
    sites, reasons = OTHER_EXPANDED[name]
    assert [site.kind for site in report.sites] == sites
    assert [miss.reason for miss in report.near_misses] == reasons


def test_only_cases_onnx_runtime_cannot_run_are_skipped() -> None:
    """A case whose original ONNX Runtime cannot run is skipped in every configuration, never
    checked: none of them is a normalisation, and under the pinned onnx and onnxruntime there
    are exactly 64 (64 skipped tests, each counted in 4 configurations) by default, 342 in the
    full run."""
    unrunnable = [
        name
        for name in CASES
        if (why := _original(name)[1]) and not why.startswith("the original is random")
    ]
    assert not [n for n in unrunnable if is_expanded_norm(n) or "normalization" in n]
    require_pinned_onnx(runtime=True)
    assert len(unrunnable) == (342 if full_run() else 64)
