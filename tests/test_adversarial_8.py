"""The eighth adversarial corpus (corpora/adversarial_8.py: the newest layer-norm and group-norm
acceptances) through the sixth corpus's checks (`tests/test_adversarial_6.check`: no crash, the
input unchanged, the interface kept, checker-clean `--target onnx` output, runnable, the
original's numerics on the adversarial profiles and the case's own feeds or a repair nearer
float64, validation passed, the expected outcome) in `default`, `--target onnx` and
`--validate`. `python tests/test_adversarial_8.py` prints the runs that fail and the counts by
class."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import test_adversarial_6 as sixth
from adversarial_harness import case_config_params
from corpora.adversarial_6 import Case6
from corpora.adversarial_8 import CASES, FINDINGS
from test_adversarial_4 import RATIO

import normfuse

BY_NAME = {c.name: c for c in CASES}
# The sixth corpus's check finds a case's model and feeds by name in its own table.
assert not set(BY_NAME) & set(sixth.BY_NAME)
sixth.BY_NAME.update(BY_NAME)


def _f64_by_reference(c: Case6, config: str) -> list[str]:
    """The fourth corpus's float16 rule (fused no further than RATIO x the original from
    float64, at both ORT levels) against the case's own float64 reference, for a model whose
    float64 copy does not run (a model-local function)."""
    m, feeds, _ = sixth._original(c.name)
    fused = normfuse.optimize(m, **sixth._options(m, config)).model
    problems = []
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.log_severity_level = 3
        runs = [
            ort.InferenceSession(x.SerializeToString(), options, providers=["CPUExecutionProvider"])
            for x in (m, fused)
        ]
        worst = [0.0, 0.0]
        for _, f in feeds:
            refs = c.reference(m, f)
            for index, s in enumerate(runs):
                for o, r in zip(s.run(None, f), refs, strict=True):
                    d = np.abs(o.astype(np.float64) - r)
                    worst[index] = max(worst[index], float(d[np.isfinite(d)].max(initial=0.0)))
        if worst[1] > RATIO * worst[0] + 1e-7:
            problems.append(
                f"F64-RATIO at {level.name}: fused {worst[1]:.3g} vs original {worst[0]:.3g}"
            )
    return problems


def check(c: Case6, config: str) -> list[str]:
    """The sixth corpus's check; where it has no float64 copy to hold a float16 site to (a
    function), the case's own reference instead."""
    problems = sixth.check(c, config)
    if c.reference is None or not any(p.startswith("NO-F64") for p in problems):
        return problems
    return [p for p in problems if not p.startswith("NO-F64")] + _f64_by_reference(c, config)


@pytest.mark.parametrize(
    ("name", "config"), case_config_params(CASES, FINDINGS, "docs/limitations.md")
)
def test_adversarial_8_case(name: str, config: str) -> None:
    problems = check(BY_NAME[name], config)
    assert not problems, f"{name} [{BY_NAME[name].feature}] {config}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_case_is_a_valid_model(name: str) -> None:
    """Each case passes onnx.checker full_check and runs in ONNX Runtime on all its feeds."""
    import onnx

    m, feeds, _ = sixth._original(name)
    onnx.checker.check_model(m, full_check=True)
    assert feeds


def test_corpus_size_and_features() -> None:
    features = [c.feature for c in CASES]
    assert len(CASES) >= 40
    assert all(features.count(f) >= 8 for f in "123456")
    assert set(FINDINGS) <= set(BY_NAME)


def counts() -> dict[str, int]:
    """Runs by their worst problem class, each failing run printed with its finding id."""
    tally = dict.fromkeys([name for name, _ in sixth.CLASSES] + ["other", "pass"], 0)
    for c in CASES:
        for config in c.configs:
            problems = check(c, config)
            found = next(
                (n for n, marks in sixth.CLASSES if any(p.startswith(marks) for p in problems)),
                "other" if problems else "pass",
            )
            tally[found] += 1
            if problems:
                finding = FINDINGS.get(c.name, ("no finding", ()))[0]
                print(f"{finding:10s} {found:12s} {c.name}-{config}: {' | '.join(problems)[:400]}")
    return tally


if __name__ == "__main__":
    print(counts())
