"""normfuse over ONNX's own backend test cases (the generators in the onnx wheel), in every
configuration of `backend_sweep.CONFIGS`.

For each case the original runs first in ONNX Runtime (CPU, ORT_DISABLE_ALL) on the case's inputs;
a case ORT cannot run is skipped with ORT's message. Then `optimize` must not raise anything but a
`NormfuseError` judged out of scope (`backend_sweep.OUT_OF_SCOPE`), must leave the input ModelProto
unchanged, keep the graph inputs and outputs, return the model unchanged when nothing was fused,
pass onnx.checker whenever the original does (unless ORT-only), and compute the original's outputs
(NaN where NaN; 1e-4 for float32/float64, 1e-2 for float16, absolute and relative).

The default run takes every case whose ops include a reduction or a normalisation, every case
with a non-default domain or a non-tensor graph input or output, every 10th other one, and
ONNX's expanded layer norms with only the normalised output kept (the form a fuser should fuse);
NORMFUSE_BACKEND=full runs every case. The fused-site coverage is printed at the end of the run.
ONNX's expanded layer and RMS norms must fuse, and match the original on adversarial inputs.
`python tests/backend_sweep.py` runs the same sweep outside pytest and prints every failure.
"""

from __future__ import annotations

import numpy as np
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
ORIGINALS: dict[str, tuple] = {}


def _original(name: str) -> tuple:
    """The original's ORT outputs (or why it cannot run), computed once per case."""
    if name not in ORIGINALS:
        ORIGINALS[name] = original_outputs(CASES[name])
    return ORIGINALS[name]


def test_the_sweep_collects_onnx_cases() -> None:
    """The wheel's generators are found: all of them in the full run, a subset by default."""
    assert len(CASES) >= (1800 if full_run() else 350), len(CASES)
    assert sum(is_expanded_norm(name) for name in CASES) >= 60


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case(name: str, config: str) -> None:
    expected, why = _original(name)
    if why and not why.startswith("the original is random"):
        TALLY.record(name, config, Outcome("skip", [why]))
        pytest.skip(why)
    outcome = check_case(CASES[name], config, expected)
    TALLY.record(name, config, outcome)
    if outcome.status == "scoped":
        pytest.skip(f"out of scope: {outcome.problems[0]}")
    assert outcome.status == "ok", "; ".join(outcome.problems)


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
    assert (kinds.count("layer-norm"), kinds.count("rms-norm")) == (76, 19)


@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_expanded_norm_is_fused(name: str) -> None:
    """ONNX's own LayerNormalization / RMSNormalization function body is one fused site."""
    result = normfuse.optimize(CASES[name].model)
    assert [site.kind for site in result.report.sites] == [FUSIBLE[name]], [
        miss.reason for miss in result.report.near_misses
    ]


ADVERSARIAL = list(adversarial(np.ones(2, np.float32)))
FUSED: dict[tuple[str, str], object] = {}


@pytest.mark.parametrize("variant", ADVERSARIAL)
@pytest.mark.parametrize("config", ["default", "onnx"])
@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_expanded_norm_on_adversarial_inputs(name: str, config: str, variant: str) -> None:
    """The fused expanded norms match the original on hard inputs too (NaN where NaN)."""
    case = CASES[name]
    if (name, config) not in FUSED:
        FUSED[name, config] = normfuse.optimize(case.model, **CONFIGS[config]).model
    inputs = feeds(case)
    x_name = case.model.graph.input[0].name
    inputs[x_name] = adversarial(inputs[x_name])[variant]
    with np.errstate(all="ignore"):
        expected = session(case.model).run(None, inputs)
        actual = session(FUSED[name, config]).run(None, inputs)
    mismatch = compare_outputs(expected, actual)
    assert mismatch is None, mismatch


@pytest.mark.parametrize("name", sorted(name for name in CASES if is_expanded_norm(name)))
def test_unfused_expanded_norm_has_a_reason(name: str) -> None:
    """An expanded norm case that is not fused says why (a near-miss)."""
    report = normfuse.optimize(CASES[name].model).report
    assert report.sites or report.near_misses
