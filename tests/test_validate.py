"""Validation: wrong candidates are caught and named, failing sites are rolled back, inputs and
providers behave as documented."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import normfuse
from models.builders import LayerNormSpec, RmsNormSpec, norm_model
from normfuse.cli.main import main
from normfuse.match import norm_checks
from normfuse.prove import sessions
from normfuse.prove.compare import compare_output
from normfuse.prove.inputs import make_inputs, parse_dims
from normfuse.prove.validate import ValidationOptions, check_sites

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def fused_pair(
    spec: LayerNormSpec | None = None, layers: int = 2
) -> tuple[onnx.ModelProto, normfuse.OptimizeResult]:
    original = norm_model(spec or LayerNormSpec(), layers=layers)
    return original, normfuse.optimize(original)


def mutate(model: onnx.ModelProto, how: str, index: int = 0) -> onnx.ModelProto:
    """A copy of a fused model with its `index`-th fused node made wrong."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    fused = [n for n in wrong.graph.node if n.op_type.endswith("Normalization")][index]
    if how == "epsilon_x100":
        epsilon = next(a for a in fused.attribute if a.name == "epsilon")
        epsilon.f *= 100
    elif how == "gamma_permuted":
        scale = next(t for t in wrong.graph.initializer if t.name == fused.input[1])
        array = onnx.numpy_helper.to_array(scale)
        scale.CopyFrom(onnx.numpy_helper.from_array(array[..., ::-1].copy(), scale.name))
    elif how == "wrong_axis":
        axis = next(a for a in fused.attribute if a.name == "axis")
        axis.i = -2
        scale = next(t for t in wrong.graph.initializer if t.name == fused.input[1])
        array = onnx.numpy_helper.to_array(scale)
        scale.CopyFrom(
            onnx.numpy_helper.from_array(np.ones((7, 32), array.dtype) * array, scale.name)
        )
    return wrong


@pytest.mark.parametrize("how", ["epsilon_x100", "gamma_permuted", "wrong_axis"])
def test_whole_model_validation_catches_wrong_candidate(how: str) -> None:
    original, result = fused_pair(LayerNormSpec(bias=how != "wrong_axis"))
    assert normfuse.validate(original, result.model).passed
    report = normfuse.validate(original, mutate(result.model, how))
    assert not report.passed
    failing = [out for run in report.runs for out in run.outputs if not out.passed]
    assert failing and "exceeds" in failing[0].detail


@pytest.mark.parametrize("how", ["epsilon_x100", "gamma_permuted"])
def test_site_validation_names_the_wrong_site(how: str) -> None:
    original, result = fused_pair()
    wrong = mutate(result.model, how, index=1)
    checks = check_sites(original, wrong, result.report.sites, ValidationOptions())
    failed = [check.output for check in checks if not check.passed]
    assert failed == [result.report.sites[1].output]


def test_failing_site_is_rolled_back_and_the_rest_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    original = norm_model(RmsNormSpec(), layers=3)
    honest = normfuse.optimize(original)
    target = honest.report.sites[1].output
    real_epsilon = norm_checks.epsilon

    def wrong_for_one_site(match, context, *shape):
        value = real_epsilon(match, context, *shape)
        return value * 1e4 if match.root.name == target else value

    monkeypatch.setattr(norm_checks, "epsilon", wrong_for_one_site)
    # The output guard, which runs the model on the same profiles, finds the site first.
    guarded = normfuse.optimize(original)
    assert [site.output for site in guarded.report.sites] == [
        s.output for s in honest.report.sites if s.output != target
    ]
    assert [miss.reason for miss in guarded.report.near_misses] == ["output-differs"]
    # Where the guard does not run the model (too large), validation's per-site check does.
    monkeypatch.setattr(normfuse.prove.guard, "runnable", lambda model, base_dir=None: False)
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.output for site in result.report.sites] == [
        s.output for s in honest.report.sites if s.output != target
    ]
    assert [miss.reason for miss in result.report.near_misses] == ["failed-validation"]
    assert result.report.validation.rolled_back == [target]
    assert result.report.validation.passed
    assert normfuse.validate(original, result.model).passed


def test_optimize_validate_cli_writes_report_with_validation(tmp_path: Path) -> None:
    out, report = tmp_path / "fused.onnx", tmp_path / "report.json"
    args = [
        "optimize",
        str(MODELS_DIR / "real/bert_opset16.onnx"),
        "-o",
        str(out),
        "--validate",
        "--dims",
        "sequence=16",
        "--report",
        str(report),
    ]
    assert main(args) == 0
    data = json.loads(report.read_text())
    assert data["validation"]["passed"]
    assert {run["level"] for run in data["validation"]["runs"]} == {"disable", "all"}
    assert len(data["validation"]["sites"]) == 5


def test_validate_cli_exit_codes(tmp_path: Path, capsys) -> None:
    original, result = fused_pair()
    paths = {name: tmp_path / f"{name}.onnx" for name in ("original", "good", "bad")}
    onnx.save(original, paths["original"])
    onnx.save(result.model, paths["good"])
    onnx.save(mutate(result.model, "epsilon_x100"), paths["bad"])
    assert main(["validate", str(paths["original"]), str(paths["good"])]) == 0
    assert (
        main(
            [
                "validate",
                str(paths["original"]),
                str(paths["bad"]),
                "--report",
                str(tmp_path / "v.json"),
            ]
        )
        == 1
    )
    assert "validation FAILED" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["passed"] is False


def test_compare_output_rules() -> None:
    base = np.array([1.0, 2.0, 3.0], np.float32)
    assert compare_output("y", base, base + 1e-6).passed
    assert not compare_output("y", base, base + 1e-2).passed
    assert compare_output("y", base, base + 1e-2, atol=0.1).passed
    with_nan = base.copy()
    with_nan[1] = np.nan
    result = compare_output("y", base, with_nan)
    assert not result.passed and "NaN/Inf" in result.detail
    assert compare_output("y", with_nan, with_nan).passed
    ints = np.array([1, 2, 3])
    assert compare_output("i", ints, ints.copy()).passed
    assert not compare_output("i", ints, ints + np.array([0, 0, 1])).passed
    half = base.astype(np.float16)
    assert compare_output("h", half, half + np.float16(5e-3)).passed


def test_inputs_from_signature_dims_and_tables() -> None:
    model = onnx.load(MODELS_DIR / "real/gpt2_opset14.onnx")
    feeds, notes = make_inputs(model, parse_dims(["sequence=16"]), seed=3)
    assert feeds["input_ids"].shape == (1, 16)
    assert feeds["input_ids"].max() < 512 and feeds["input_ids"].min() >= 0
    assert feeds["position_ids"].max() < 64
    assert np.all(feeds["attention_mask"] == 1)
    assert any("batch" in note for note in notes)
    with pytest.raises(normfuse.NormfuseError, match="--dims sequence=N"):
        make_inputs(model, {}, seed=3)


@pytest.mark.parametrize(
    ("name", "dims", "batch"),
    [
        ("llama_opset17", {"batch": 2, "sequence": 16}, 2),
        ("llama_opset18_dynamo_float32", {}, 1),  # static [1, 16]
        ("gpt2_opset16", {"batch": 2, "sequence": 16}, 2),
    ],
)
def test_position_ids_count_along_the_sequence_and_masks_are_ones(name, dims, batch) -> None:
    model = onnx.load(MODELS_DIR / f"real/{name}.onnx")
    feeds, notes = make_inputs(model, dims, seed=0)
    assert np.array_equal(feeds["position_ids"], np.tile(np.arange(16), (batch, 1)))
    assert np.all(feeds["attention_mask"] == 1)
    assert not any("filled with zeros" in note for note in notes)


def test_unknown_dims_name_is_an_error_naming_the_known_ones() -> None:
    model = onnx.load(MODELS_DIR / "real/bert_opset14.onnx")
    with pytest.raises(normfuse.NormfuseError) as raised:
        make_inputs(model, {"btach": 4, "sequence": 16})
    assert str(raised.value) == (
        "--dims btach: no input has such a dimension; the model's symbolic dims are: "
        "batch, sequence"
    )


def test_unknown_dims_name_is_exit_2_on_one_line(tmp_path: Path, capsys) -> None:
    path = MODELS_DIR / "real/bert_opset14.onnx"
    for command in (["validate", str(path), str(path)], ["bench", str(path), "--runs", "2"]):
        assert main([*command, "--dims", "btach=4,sequence=16"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "btach" in err and "batch, sequence" in err


def test_bert_float64_reference_comes_from_onnx_reference() -> None:
    """Erf has no float64 kernel in ONNX Runtime: BERT is evaluated by onnx.reference instead,
    and lands within float32 rounding of the model's own run."""
    from normfuse.prove.float64_reference import float64_runner
    from normfuse.prove.validate import _float64_reference

    model = onnx.load(MODELS_DIR / "real/bert_opset14.onnx")
    feeds, _ = make_inputs(model, {"sequence": 4})
    reference, note = _float64_reference(*float64_runner(model), feeds)
    assert note == "float64 reference: onnx.reference"
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for own, wide in zip(expected, reference, strict=True):
        assert wide.dtype == np.float64
        np.testing.assert_allclose(wide, own, atol=1e-5)


def test_missing_float64_reference_note_is_whole_words() -> None:
    """An op neither ONNX Runtime (no double kernel) nor onnx.reference (another domain) runs
    in float64: the note names both, without ORT's bracketed prefix."""
    from normfuse.prove.float64_reference import float64_runner
    from normfuse.prove.validate import _float64_reference

    node = onnx.helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")
    graph = onnx.helper.make_graph(
        [node],
        "bias_gelu",
        [
            onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4]),
            onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [4]),
        ],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
    )
    opsets = [onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)]
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    feeds = {"x": np.ones((2, 4), np.float32), "b": np.ones(4, np.float32)}
    reference, note = _float64_reference(*float64_runner(model), feeds)
    assert reference is None
    assert note.startswith("no float64 reference: ONNX Runtime cannot run it in float64 ("), note
    assert "nor onnx.reference (" in note, note
    assert "[ONNXRuntimeError]" not in note


def test_parse_dims_forms_and_errors() -> None:
    assert parse_dims(["batch=1", "sequence=128,past=0"]) == {
        "batch": 1,
        "sequence": 128,
        "past": 0,
    }
    for bad in ("batch", "batch=x", "=3", "batch=-1"):
        with pytest.raises(normfuse.NormfuseError, match="NAME=N"):
            parse_dims([bad])
    # ADV10-01: one name, two values, is refused (in one value or across --dims flags); the
    # same value twice is one.
    assert parse_dims(["batch=2,batch=2"]) == {"batch": 2}
    for twice in (["batch=2,batch=3"], ["batch=2", "batch=3"]):
        with pytest.raises(normfuse.NormfuseError, match="--dims batch is given twice, as 2 and 3"):
            parse_dims(twice)


def test_npz_overrides_are_checked(tmp_path: Path) -> None:
    model = norm_model(LayerNormSpec())
    good = tmp_path / "good.npz"
    np.savez(good, x=np.full((2, 7, 32), 3.0, np.float32))
    feeds, _ = make_inputs(model, {}, npz=good)
    assert np.all(feeds["x"] == 3.0)
    cases = {
        "unknown": ({"y": np.zeros((2, 7, 32), np.float32)}, "unknown inputs"),
        "dtype": ({"x": np.zeros((2, 7, 32), np.float64)}, "float64"),
        "shape": ({"x": np.zeros((2, 7, 16), np.float32)}, "shape"),
    }
    for name, (arrays, message) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **arrays)
        with pytest.raises(normfuse.NormfuseError, match=message):
            make_inputs(model, {}, npz=path)


def test_npz_may_override_an_initializer_that_is_a_graph_input(tmp_path: Path) -> None:
    """An initializer listed as a graph input is a default a caller may feed: --inputs takes it,
    checked like any input, and validation then compares both models under that value."""
    model = norm_model(LayerNormSpec(), shape=(2, 7, 32))
    weight = next(t for t in model.graph.initializer if t.name.startswith("weight"))
    model.graph.input.append(
        onnx.helper.make_tensor_value_info(weight.name, weight.data_type, list(weight.dims))
    )
    given = np.full(tuple(weight.dims), 0.25, np.float32)
    path = tmp_path / "weight.npz"
    np.savez(path, **{weight.name: given})
    feeds, _ = make_inputs(model, {}, npz=path)
    assert np.array_equal(feeds[weight.name], given)
    feeds, _ = make_inputs(model, {})
    assert weight.name not in feeds  # not given: the default is used
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{weight.name: np.zeros((3,), np.float32)})
    with pytest.raises(normfuse.NormfuseError, match="shape"):
        make_inputs(model, {}, npz=bad)
    fused = normfuse.optimize(model).model
    report = normfuse.validate(model, fused, ValidationOptions(npz=path))
    assert report.passed


def test_cuda_request_without_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(normfuse.NormfuseError, match="onnxruntime-gpu"):
        sessions.parse_providers("cpu,cuda")
    with pytest.raises(normfuse.NormfuseError, match="unknown provider"):
        sessions.parse_providers("tpu")


def test_provider_selection_accepts_cuda_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert sessions.parse_providers("CPU, cuda,cpu") == ["cpu", "cuda"]


def test_silent_fallback_to_cpu_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class FallbackSession:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]

    monkeypatch.setattr(ort, "InferenceSession", FallbackSession)
    with pytest.raises(normfuse.NormfuseError, match="not CUDAExecutionProvider"):
        sessions.create(norm_model(LayerNormSpec()), "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="CUDAExecutionProvider not available (install onnxruntime-gpu on a CUDA machine)",
)
def test_validates_on_cuda() -> None:
    original, result = fused_pair()
    report = normfuse.validate(original, result.model, ValidationOptions(providers=("cpu", "cuda")))
    assert report.passed
    assert {run.provider for run in report.runs} == {"cpu", "cuda"}


def test_float32_output_of_a_float16_model_gets_float16_tolerance() -> None:
    from normfuse.prove.validate import narrowest_float_type

    model = onnx.load(MODELS_DIR / "real/gemma_opset17_torchscript_float16.onnx")
    assert narrowest_float_type(model) == "float16"
    assert narrowest_float_type(norm_model(LayerNormSpec())) == "float32"
    base = np.array([3.0], np.float32)
    assert not compare_output("y", base, base + 5e-4).passed
    assert compare_output("y", base, base + 5e-4, compute_dtype="float16").passed


def test_table_names_a_site_that_could_not_be_run_alone() -> None:
    """A site whose check never ran (no comparison) is listed with the reason it could not run,
    not a crash while printing (the CLI prints this table after --validate)."""
    from normfuse.prove.validate import SiteCheck, ValidationReport

    site = SiteCheck("y", "layer-norm", "cpu", None, note="the site could not be run alone: X")
    report = ValidationReport([], [site], rolled_back=["y"])
    table = report.table()
    assert "site 'y' (layer-norm) on cpu: rolled back: the site could not be run alone: X" in table
    assert "sites checked alone: 0 of 1" in table


def test_validate_table_shows_the_tolerance_and_each_models_float64_error(
    tmp_path: Path, capsys
) -> None:
    """Through the CLI: the tolerance each output was held to, and both models' distance from the
    float64 run of the original, computed here independently."""
    original, result = fused_pair()
    paths = {name: tmp_path / f"{name}.onnx" for name in ("original", "fused")}
    onnx.save(original, paths["original"])
    onnx.save(result.model, paths["fused"])
    assert main(["validate", str(paths["original"]), str(paths["fused"]), "--wide"]) == 0
    table = capsys.readouterr().out
    header, *rows = table.splitlines()
    assert header.split()[8:11] == ["atol/rtol", "orig-f64", "cand-f64"]
    report = normfuse.validate(original, result.model)
    disable = next(run for run in report.runs if run.level == "disable").outputs[0]
    feeds, _ = make_inputs(original, {}, 0)
    wide = normfuse.prove.subgraph.as_float64(original)
    wide_feeds = {name: value.astype(np.float64) for name, value in feeds.items()}
    reference = ort.InferenceSession(wide.SerializeToString()).run(None, wide_feeds)[0]
    expected = ort.InferenceSession(original.SerializeToString()).run(None, feeds)[0]
    assert disable.reference_error_original == pytest.approx(np.abs(expected - reference).max())
    cells = rows[0].split()
    assert cells[:4] == ["cpu", "disable", "normal", disable.output]
    assert cells[6] == "1e-4/1e-4"
    assert float(cells[7]) == pytest.approx(disable.reference_error_original, rel=1e-2)
    assert float(cells[8]) == pytest.approx(disable.reference_error_candidate, rel=1e-2)
    assert "an element passes when |cand - orig| <= atol + rtol * |orig|" in table


def comparison(name: str, original_error: float | None, candidate_error: float | None):
    from normfuse.prove.compare import OutputComparison

    return OutputComparison(
        name, "float16", 1e-3, 1e-2, 1e-4, 1e-2, 1e-2, True, "", original_error, candidate_error
    )


def test_table_says_when_the_candidate_is_further_from_float64() -> None:
    from normfuse.prove.validate import RunComparison, ValidationReport

    outputs = (
        comparison("further", 1.57e-3, 2.29e-3),
        comparison("closer", 2.0e-3, 1.0e-3),
        comparison("no_reference", None, None),
    )
    table = ValidationReport([RunComparison("cpu", "disable", outputs)]).table(wide=True)
    rows = {line.split()[3]: line for line in table.splitlines()[1:4]}
    assert rows["further"].split()[6:9] == ["0.01/0.01", "0.00157", "0.00229"]
    assert rows["further"].endswith("  ok, further from float64")
    assert rows["closer"].endswith("  ok")
    assert rows["no_reference"].split()[-3:] == ["-", "-", "ok"]
    assert (
        "note: the candidate is further from float64 than the original on 1 output run(s); "
        "worst 'further': 0.00229 vs 0.00157"
    ) in table


def test_table_without_a_worse_candidate_has_no_such_note() -> None:
    from normfuse.prove.validate import RunComparison, ValidationReport

    outputs = (comparison("y", 2.0e-3, 2.0e-3),)
    table = ValidationReport([RunComparison("cpu", "all", outputs)]).table()
    assert "further" not in table


def test_models_with_other_inputs_are_named_plainly(tmp_path: Path, capsys) -> None:
    """Two models with other graph inputs: one line naming each side's inputs, no list repr."""
    first = norm_model(LayerNormSpec(), shape=(1, 4, 16))
    second = onnx.ModelProto()
    second.CopyFrom(first)
    second.graph.input[0].name = "renamed"
    for node in second.graph.node:
        node.input[:] = [
            "renamed" if name == first.graph.input[0].name else name for name in node.input
        ]
    paths = [tmp_path / "a.onnx", tmp_path / "b.onnx"]
    onnx.save(first, paths[0])
    onnx.save(second, paths[1])
    assert main(["validate", str(paths[0]), str(paths[1])]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "[" not in error
    assert f"{first.graph.input[0].name} in the original, renamed in the candidate" in error


def _assert_checked_alone_and_kept(model: onnx.ModelProto, kind: str) -> None:
    """--validate fuses `model`'s one `kind` site, compares it alone (a comparison ran, and
    passed), reports no near-miss, and the whole model passes."""
    result = normfuse.optimize(model, validation=normfuse.ValidationOptions())
    assert [site.kind for site in result.report.sites] == [kind]
    assert result.report.near_misses == []
    checks = result.report.validation.sites
    assert checks and all(check.comparison is not None and check.passed for check in checks)
    assert result.report.validation.passed


def test_a_group_normalization_in_a_function_is_checked_alone() -> None:
    """ADV6-05: a GroupNormalization-21 node in a model-local function is typed in the body as
    in a graph (its output as its input), so --validate runs the rewritten site alone against
    the node, and keeps it."""
    from corpora.adversarial_6 import CASES as SIXTH

    case = next(case for case in SIXTH if case.name == "a6_gn21_in_function")
    model = case.build()
    _assert_checked_alone_and_kept(model, "group-norm")


def _float16_moved_norm(tail: str) -> onnx.ModelProto:
    """A float16 layer norm of x [1, 6, 16] whose result is moved by `tail`: `expand_shape`
    Expand(., Shape(z)) (adversary 7's `a7_expand_runtime_out`: z read for its shape only);
    `expand_values` Expand(., s) with s an int64 graph input; `gather_values` Gather(., i, axis
    1) with i an int64 graph input (both read for their values)."""
    from corpora.adversarial_6 import F16, _f16_case, _n16

    def body(g) -> None:
        normed = _n16(g, "x", "ln", (1, 6, 16))
        if tail == "expand_shape":
            g.op("Expand", [normed, g.op("Shape", ["z"])], "y")
        elif tail == "expand_values":
            g.op("Expand", [normed, "s"], "y")
        else:
            g.op("Gather", [normed, "i"], "y", axis=1)

    x = ("x", F16, (1, 6, 16))
    inputs = {
        "expand_shape": [x, ("z", F16, (2, 6, 16))],
        "expand_values": [x, ("s", onnx.TensorProto.INT64, (3,))],
        "gather_values": [x, ("i", onnx.TensorProto.INT64, (3,))],
    }[tail]
    out = (1, 3, 16) if tail == "gather_values" else (2, 6, 16)
    return _f16_case(body, inputs, [("y", F16, out)])()


def test_a_site_moved_to_another_tensors_shape_is_checked_alone() -> None:
    """ADV7-04: a float16 norm's result moved by Expand to Shape(z) (z read only through
    Shape) is cut out with z fed as zeros of its shape: the site is compared alone, passes and
    is kept."""
    model = _float16_moved_norm("expand_shape")
    _assert_checked_alone_and_kept(model, "layer-norm")


@pytest.mark.parametrize("tail", ["expand_values", "gather_values"])
def test_a_site_moved_by_another_tensors_values_is_not_checked_alone(tail: str, tmp_path) -> None:
    """The same site moved by a graph input's values (an Expand shape, Gather indices): no
    zeros stand in for values, the site is not isolated and is left (`failed-validation`,
    "could not check the site alone"); without --validate it fuses."""
    model = _float16_moved_norm(tail)
    assert [site.kind for site in normfuse.optimize(model).report.sites] == ["layer-norm"]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(0, 1, (1, 6, 16)).astype(np.float16)}
    index = {"s": np.array([2, 6, 16])} if tail == "expand_values" else {"i": np.array([5, 0, 2])}
    feeds |= index
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    options = normfuse.ValidationOptions(npz=str(npz))
    result = normfuse.optimize(model, validation=options)
    misses = [miss for miss in result.report.near_misses if miss.reason == "failed-validation"]
    assert result.report.sites == [] and len(misses) == 1
    assert "could not check the site alone" in misses[0].detail
    assert "differed" not in misses[0].detail  # not checked, not found to differ (ADV6-05)


def test_shape_only_sources_never_stand_in_for_the_output() -> None:
    """A site output produced in a body the scope's node list does not hold (an If branch in a
    function) is not a tensor read for its shape: no zeros stand in for it (a site compared as
    its own zero input would pass unchecked: the a3_fn_nested_if cases)."""
    from onnx import helper

    from normfuse.prove.subgraph import shape_only_sources

    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["z"], ["s"]),
            helper.make_node("Expand", ["x", "s"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 4])],
    )
    model = helper.make_model(graph)
    assert shape_only_sources(model, {"x"}, "y") == ["z"]
    assert shape_only_sources(model, {"z"}, "y") is None  # x is read for its values
    assert shape_only_sources(model, {"x"}, "unknown_output") is None


def test_dims_that_contradict_the_npz_arrays_are_noted(tmp_path: Path) -> None:
    """ADV10-02: an `--inputs` array that sizes a symbolic dim otherwise than `--dims` is fed as
    it is, and a note says so (not refused: ONNX Runtime holds no name to one size across
    inputs); where they agree, there is no note."""
    model = norm_model(LayerNormSpec())  # x: [batch, 7, 32]
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.full((2, 7, 32), 3.0, np.float32))
    feeds, notes = make_inputs(model, {"batch": 2}, npz=npz)
    assert feeds["x"].shape == (2, 7, 32) and notes == []
    feeds, notes = make_inputs(model, {"batch": 4}, npz=npz)
    assert feeds["x"].shape == (2, 7, 32)
    assert notes == [
        "--inputs 'x' has batch=2 (axis 0) where --dims gives batch=4: the array is fed as it is"
    ]
