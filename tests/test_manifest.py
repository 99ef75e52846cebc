"""`--manifest FILE`: per-model settings for optimize, validate and bench (JSON and TOML), its
strict checks before any work, and the dims a KV-cache decoder declares as expressions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from models.kv_feeds import export_feeds
from normfuse.cli.main import main
from normfuse.errors import NormfuseError
from normfuse.prove import dim_expressions
from normfuse.prove.inputs import input_shapes

REAL = Path(__file__).resolve().parent.parent / "models" / "real"
BERT, GPT2 = REAL / "bert_opset14.onnx", REAL / "gpt2_opset16.onnx"
WITH_PAST = REAL / "kv" / "llama_optimum_with_past_opset17.onnx"  # mask: past + sequence
DYNAMO = REAL / "kv" / "llama_dynamo_with_past_opset18_float32.onnx"  # s70, s53, s15, s89, s81
MERGED = REAL / "kv" / "llama_optimum_merged_opset17.onnx"
DYNAMO_DIMS = {"s70": 2, "s15": 0, "s89": 0, "s81": 0, "s53": 2}  # a prefill


def copy(models: list[Path], folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    for model in models:
        (folder / model.name).write_bytes(model.read_bytes())
    return folder


def write_json(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps({"models": entries}))
    return path


def test_one_call_validates_a_decode_step_and_a_prefill(tmp_path: Path, capsys) -> None:
    """A with-past decoder at a decode step (its mask's dim derived from past + sequence) and a
    dynamo decoder at a prefill, each with its own dims, command-line --dims the default; then
    validate and bench pair each model with its output in the folder."""
    copy([WITH_PAST, DYNAMO], tmp_path / "kv")
    manifest = write_json(
        tmp_path / "m.json",
        [
            {"model": f"kv/{WITH_PAST.name}", "dims": {"past_sequence_length": 4}},
            {"model": f"kv/{DYNAMO.name}", "dims": DYNAMO_DIMS},
        ],
    )
    out = tmp_path / "out"
    out.mkdir()
    common = ["--manifest", str(manifest), "--dims", "sequence_length=1"]
    assert main(["optimize", *common, "-o", str(out), "--validate", "--report", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["written"] is True
    assert [item["report"]["validation"]["passed"] for item in data["models"]] == [True, True]
    assert sorted(path.name for path in out.iterdir()) == sorted([WITH_PAST.name, DYNAMO.name])
    assert main(["validate", *common, str(out), "--report", "-"]) == 0
    pairs = json.loads(capsys.readouterr().out)["pairs"]
    assert [Path(pair["candidate"]) for pair in pairs] == [out / WITH_PAST.name, out / DYNAMO.name]
    assert all(pair["passed"] for pair in pairs)
    timing = ["--runs", "2", "--warmup", "0", "--sessions", "1"]
    assert main(["bench", *common, str(out), *timing, "--report", "-"]) == 0
    pairs = json.loads(capsys.readouterr().out)["pairs"]
    timed = [[timing["model"] for timing in pair["timings"]] for pair in pairs]
    assert timed == [[pair["model"], pair["candidate"]] for pair in pairs]


def test_toml_entries_override_the_command_line_per_model(tmp_path: Path, capsys) -> None:
    """`passes` in an entry replaces --passes for that model only; a TOML manifest's paths are
    relative to its own folder, wherever the command runs."""
    pytest.importorskip("tomllib")
    copy([BERT, GPT2], tmp_path / "in")
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        f'[[models]]\nmodel = "in/{BERT.name}"\npasses = ["rms-norm"]\n\n'
        f'[[models]]\nmodel = "in/{GPT2.name}"\n'
    )
    out = tmp_path / "out"
    out.mkdir()
    argv = ["optimize", "--manifest", str(manifest), "-o", str(out), "--passes", "layer-norm"]
    assert main([*argv, "--report", "-"]) == 0
    counts = [item["report"]["counts"] for item in json.loads(capsys.readouterr().out)["models"]]
    assert "layer-norm" not in counts[0] and counts[1]["layer-norm"] == 5


def test_validate_pairs_an_entry_with_its_candidate_and_inputs(tmp_path: Path, capsys) -> None:
    """`candidate` names the second model; `inputs` feeds a merged decoder a decode step that
    --dims cannot express (its ids and mask share one symbol); the same model may appear twice.
    A pair that stops with an error writes no report."""
    feeds = export_feeds(onnx.load(MERGED), sequence=1, past=4, vocab=64)
    np.savez(tmp_path / "decode.npz", **feeds)
    prefill = {"sequence_length": 3, "past_sequence_length": 0}
    entries = [
        {"model": str(MERGED), "candidate": str(MERGED), "inputs": "decode.npz"},
        {"model": str(MERGED), "candidate": str(MERGED), "dims": prefill},
    ]
    manifest, report = write_json(tmp_path / "m.json", entries), tmp_path / "r.json"
    assert main(["validate", "--manifest", str(manifest), "--report", str(report)]) == 0
    pairs = json.loads(report.read_text())["pairs"]
    assert [pair["passed"] for pair in pairs] == [True, True]
    bad = [{"model": str(BERT), "candidate": str(BERT), "dims": {"sequence": 0}}, *entries[1:]]
    report.unlink()
    argv = ["validate", "--manifest", str(write_json(manifest, bad)), "--report", str(report)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "check --dims sequence=0" in " ".join(captured.out.split())  # the error, wrapped
    assert captured.err.splitlines() == [
        "normfuse: error: 1 of 2 pairs stopped with an error; nothing written (a batch is "
        "written whole or not at all)"
    ]
    assert not report.exists()


BAD_MANIFESTS = {
    "unknown-key": ({"model": "bert.onnx", "dim": {"sequence": 8}}, "unknown key 'dim'; did you"),
    "no-model-key": ({"dims": {"sequence": 8}}, "entry 2: no model"),
    "missing-model": ({"model": "nowhere.onnx"}, "nowhere.onnx: no such file"),
    "missing-inputs": ({"model": "bert.onnx", "inputs": "x.npz"}, "x.npz: no such file"),
    "dims-string": ({"model": "bert.onnx", "dims": {"sequence": "8"}}, "sequence: must be an int"),
    "dims-float": ({"model": "bert.onnx", "dims": {"sequence": 1.5}}, "sequence: must be an int"),
    "dims-bool": ({"model": "bert.onnx", "dims": {"sequence": True}}, "sequence: must be an int"),
    "dims-list": ({"model": "bert.onnx", "dims": ["sequence=8"]}, "dims: must be a table"),
    "unknown-pass": ({"model": "bert.onnx", "passes": "layer-nrom"}, "unknown pass layer-nrom"),
    "no-pass": ({"model": "bert.onnx", "passes": []}, "passes: names no pass"),
    "bad-target": ({"model": "bert.onnx", "target": "tpu"}, "target: must be one of ort, onnx"),
    "bad-atol": ({"model": "bert.onnx", "atol": -1}, "atol: must be a finite number >= 0"),
    "model-number": ({"model": 3}, "model: must be a non-empty string"),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS, ids=list(BAD_MANIFESTS))
def test_a_bad_entry_is_one_line_before_any_work(tmp_path: Path, capsys, case: str) -> None:
    entry, message = BAD_MANIFESTS[case]
    copy([BERT], tmp_path).joinpath(BERT.name).rename(tmp_path / "bert.onnx")
    good = {"model": "bert.onnx"}
    manifest = write_json(tmp_path / "m.json", [good, entry])
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["optimize", "-o", str(out)], ["validate"], ["bench"]):
        assert main([*argv, "--manifest", str(manifest)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.splitlines()) == 1
        assert captured.err.startswith(f"normfuse: error: --manifest {manifest}: entry ")
        assert message in captured.err, captured.err
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("m.json", '{"models": [}', "not valid JSON"),
        ("m.json", '{"models": [{"model": "a", "model": "b"}]}', "key 'model' given twice"),
        ("m.json", '{"model": "bert.onnx"}', "give one key, models"),
        ("m.json", '{"models": []}', "models must be a non-empty list"),
        ("m.json", '{"models": ["bert.onnx"]}', "entry 1: must be a table, got str"),
        ("m.yaml", "models: []", "give a .json or .toml file"),
        ("m.toml", "[[models]]\nmodel = ", "not valid TOML"),
    ],
)
def test_a_bad_manifest_file_is_one_line(tmp_path: Path, capsys, name, text, message) -> None:
    if name.endswith(".toml"):
        pytest.importorskip("tomllib")
    (tmp_path / name).write_text(text)
    assert main(["optimize", "--manifest", str(tmp_path / name), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err
    assert main(["optimize", "--manifest", str(tmp_path / "none.json"), "-o", str(tmp_path)]) == 2
    assert "none.json: no such file" in capsys.readouterr().err


def test_each_model_is_checked_against_its_dims_before_any_work(tmp_path: Path, capsys) -> None:
    """A dims name the entry's model lacks, or a dim it leaves unknown, stops the run before
    the first model is processed (no progress line), naming the entry, the dim and where it
    is; the dynamo mask's dim gets a hint from the model's own output shapes."""
    out = tmp_path / "out"
    out.mkdir()
    missing = {key: size for key, size in DYNAMO_DIMS.items() if key != "s53"}
    cases = [
        ({"model": str(DYNAMO), "dims": {**DYNAMO_DIMS, "sequence": 1}}, "--dims sequence: no"),
        (
            {"model": str(DYNAMO), "dims": missing},
            "dimension 's53' is not known; set it with --dims s53=N (s53: attention_mask[1]); "
            "hint: s53 sizes a mask; in a KV-cache decoder it usually spans the past and new "
            "tokens, which output present.0.key[2] declares as 's15 + s70', 2 with s15=0, s70=2",
        ),
    ]
    for entry, message in cases:
        manifest = write_json(tmp_path / "m.json", [{"model": str(BERT)}, entry])
        argv = ["optimize", "--manifest", str(manifest), "-o", str(out), "--validate"]
        assert main([*argv, "--dims", "sequence=4"]) == 2
        err = capsys.readouterr().err  # one line: no "MODEL ..." progress line before it
        start = f"normfuse: error: --manifest {manifest}: entry 2 ({DYNAMO}): {message}"
        assert len(err.splitlines()) == 1 and err.startswith(start), err
    assert list(out.iterdir()) == []


def test_pairs_need_a_candidate_and_models_come_from_one_place(tmp_path: Path, capsys) -> None:
    manifest = write_json(tmp_path / "m.json", [{"model": str(BERT)}])
    assert main(["validate", "--manifest", str(manifest)]) == 2
    assert f"entry 1 ({BERT}): no candidate" in capsys.readouterr().err
    assert main(["validate", "--manifest", str(manifest), str(tmp_path)]) == 2
    assert f"candidate {tmp_path / BERT.name}: no such file" in capsys.readouterr().err
    paired = write_json(tmp_path / "m.json", [{"model": str(BERT), "candidate": str(BERT)}])
    assert main(["bench", "--manifest", str(paired), str(BERT)]) == 2  # not silently ignored
    assert "give no MODEL, or one folder" in capsys.readouterr().err
    assert main(["optimize", "--manifest", str(manifest), str(BERT), "-o", str(tmp_path)]) == 2
    assert "give no MODEL as well" in capsys.readouterr().err
    assert main(["validate", str(BERT)]) == 2
    assert "validate takes ORIGINAL CANDIDATE" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [manifest]


# --- dims a model declares as expressions -------------------------------------------------------


def test_a_with_past_mask_is_sized_from_past_and_sequence() -> None:
    model = onnx.load(WITH_PAST, load_external_data=False)
    shapes, _ = input_shapes(model, {"sequence_length": 1, "past_sequence_length": 32})
    assert shapes["attention_mask"] == [1, 33] and shapes["input_ids"] == [1, 1]
    given = {"sequence_length": 1, "past_sequence_length": 32}
    shapes, _ = input_shapes(model, {**given, "past_sequence_length + sequence_length": 33})
    assert shapes["attention_mask"] == [1, 33]  # the old spelling, when it agrees
    with pytest.raises(NormfuseError, match=r"contradicts the model: .* is 33 with"):
        input_shapes(model, {**given, "past_sequence_length + sequence_length": 34})
    with pytest.raises(NormfuseError) as error:
        input_shapes(model, {"sequence_length": 1})
    assert str(error.value) == (
        "dimension 'past_sequence_length' is not known; set it with --dims "
        "past_sequence_length=N (past_sequence_length: past_key_values.0.key[2], "
        "past_key_values.0.value[2] and 2 more); attention_mask[1] is "
        "'past_sequence_length + sequence_length' and follows from them"
    )


def test_only_arithmetic_over_the_models_own_dims_is_an_expression() -> None:
    dims = {"a", "b", "seq"}
    assert dim_expressions.parse("a + b", dims).value({"a": 3, "b": 4}) == 7
    assert dim_expressions.parse("2 * (a - b)", dims).value({"a": 5, "b": 1}) == 8
    assert dim_expressions.parse("seq-len", dims) is None  # 'len' is no dim: a plain name
    for text in ("a", "a / b", "a ** b", "-a", "a + 1.5", "a + True", "f(a)", "a.b + 1", "a +"):
        assert dim_expressions.parse(text, dims) is None, text
    assert dim_expressions.parse("+".join(["a"] * 200), dims) is None  # too long to read


def test_no_report_or_output_replaces_a_file_the_command_reads(tmp_path: Path, capsys) -> None:
    """The manifest and every --inputs archive (the command line's or an entry's) are read-only:
    a --report or an output naming one is refused before any work, the file unchanged."""
    folder = copy([BERT, GPT2], tmp_path / "models")
    model = folder / BERT.name
    from normfuse.prove.inputs import make_inputs

    arrays, _ = make_inputs(onnx.load(model), {"sequence": 4})
    npz = tmp_path / "in.npz"
    np.savez(npz, **arrays)
    manifest = write_json(
        tmp_path / "m.json",
        [{"model": f"models/{BERT.name}", "inputs": str(npz)}, {"model": f"models/{GPT2.name}"}],
    )
    kept = {path: path.read_bytes() for path in (npz, manifest)}
    out = tmp_path / "out"
    out.mkdir()
    runs = [
        ["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--validate", "--inputs", str(npz),
         "--report", str(npz)],
        ["optimize", "--manifest", str(manifest), "-o", str(out), "--report", str(manifest)],
        ["optimize", "--manifest", str(manifest), "-o", str(out), "--validate", "--report",
         str(npz)],
        ["validate", "--manifest", str(manifest), str(folder), "--report", str(manifest)],
        ["bench", str(model), str(model), "--inputs", str(npz), "--report", str(npz)],
    ]  # fmt: skip
    for argv in runs:
        assert main(argv) == 2, argv
        assert "normfuse: error:" in capsys.readouterr().err
        assert {path: path.read_bytes() for path in kept} == kept
    assert list(out.iterdir()) == []
