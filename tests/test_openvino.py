"""OpenVINO (CPU) as a second runtime: `--providers openvino` for validate, optimize --validate and
bench, comparing original and candidate there as on ONNX Runtime. Skipped without the extra
(`normfuse[openvino]`), except the error that says how to install it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import random_inputs, run

import normfuse
from models.builders import LayerNormSpec, RmsNormSpec, norm_model
from normfuse.cli.main import main
from normfuse.errors import NormfuseError
from normfuse.measure import bench
from normfuse.prove import openvino_runtime, sessions

OPENVINO = ("openvino",)
needs_openvino = pytest.mark.skipif(
    not openvino_runtime.available(), reason="openvino is not installed (normfuse[openvino])"
)


def test_openvino_missing_is_an_error_that_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(openvino_runtime, "available", lambda: False)
    with pytest.raises(NormfuseError, match=r"normfuse\[openvino\]"):
        sessions.parse_providers("cpu,openvino")


def _standard(spec, opset: int) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    original = norm_model(spec, opset=opset, layers=2)
    return original, normfuse.optimize(original, target="onnx").model


@needs_openvino
@pytest.mark.parametrize(("spec", "opset"), [(LayerNormSpec(), 17), (RmsNormSpec(), 17)])
def test_openvino_runs_the_standard_output_as_the_original(spec, opset: int) -> None:
    original, fused = _standard(spec, opset)
    feeds = random_inputs(original, {"batch": 3}, seed=40)
    expected = run(original, feeds)[0]  # ONNX Runtime CPU, optimisations off
    actual = sessions.create(fused, "openvino").run(None, feeds)[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
    report = normfuse.validate(original, fused, normfuse.ValidationOptions(providers=OPENVINO))
    assert report.passed
    assert [(r.provider, r.level) for r in report.runs] == [("openvino", "all")]


@needs_openvino
def test_openvino_validation_fails_a_changed_model() -> None:
    """A candidate whose norm scale was altered fails on OpenVINO: the comparison can fail."""
    original, fused = _standard(LayerNormSpec(), 17)
    scale = next(n for n in fused.graph.node if n.op_type == "LayerNormalization").input[1]
    for tensor in fused.graph.initializer:
        if tensor.name == scale:
            values = onnx.numpy_helper.to_array(tensor) * 1.01
            tensor.CopyFrom(onnx.numpy_helper.from_array(values, scale))
    report = normfuse.validate(original, fused, normfuse.ValidationOptions(providers=OPENVINO))
    assert not report.passed


@needs_openvino
def test_optimize_validate_on_openvino() -> None:
    original = norm_model(RmsNormSpec(), opset=17, layers=2)
    options = normfuse.ValidationOptions(providers=OPENVINO, dims={"batch": 2})
    result = normfuse.optimize(original, target="onnx", validation=options)
    assert [site.op for site in result.report.sites] == ["RMSNormalization"] * 2
    assert result.report.validation.passed
    assert {check.provider for check in result.report.validation.sites} == {"openvino"}


@needs_openvino
def test_bench_on_openvino_reports_what_openvino_fused() -> None:
    """OpenVINO re-fuses the decomposed norm itself: both models show its RMS operation."""
    original, fused = _standard(RmsNormSpec(), 17)
    models = [bench.BenchModel("original", original), bench.BenchModel("fused", fused)]
    options = bench.BenchOptions(providers=OPENVINO, levels=("disable", "all"), warmup=1, runs=10)
    report = bench.run(models, options)
    assert [(t.model, t.provider, t.level) for t in report.timings] == [
        ("original", "openvino", "all"),
        ("fused", "openvino", "all"),
    ]
    assert all(t.samples.shape == (10,) and np.all(t.samples > 0) for t in report.timings)
    assert [t.norm_ops_after_ort for t in report.timings] == [{"RMS": 2}, {"RMS": 2}]


@needs_openvino
def test_validate_cli_accepts_openvino(tmp_path: Path, capsys) -> None:
    original, fused = _standard(LayerNormSpec(), 17)
    paths = [tmp_path / "original.onnx", tmp_path / "fused.onnx"]
    for model, path in zip((original, fused), paths, strict=True):
        onnx.save(model, path)
    args = ["validate", *map(str, paths), "--providers", "openvino", "--dims", "batch=2"]
    assert main([*args, "--report", "-"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["provider"], r["level"]) for r in runs] == [("openvino", "all")]


@needs_openvino
def test_tune_refuses_openvino(tmp_path: Path, capsys) -> None:
    """tune chooses ONNX Runtime session settings: OpenVINO has none, so it is refused."""
    path = tmp_path / "m.onnx"
    onnx.save(norm_model(LayerNormSpec()), path)
    args = ["tune", str(path), "--providers", "openvino", "--runs", "2"]
    assert main(args) != 0
    assert "use cpu or cuda" in capsys.readouterr().err
