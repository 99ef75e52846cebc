"""The command line: outputs, the JSON report, exit codes, and one-line errors on bad input."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from helpers import op_counts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.builders import LAYER_NORM_NEGATIVES, LayerNormSpec, norm_model
from normfuse.cli import main

BERT = Path(__file__).resolve().parent.parent / "models" / "real" / "bert_opset14.onnx"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def test_optimize_writes_model_and_report(tmp_path: Path, capsys) -> None:
    before = digest(BERT)
    out, report = tmp_path / "fused.onnx", tmp_path / "report.json"
    assert main(["optimize", str(BERT), "-o", str(out), "--report", str(report)]) == 0
    assert digest(BERT) == before
    assert op_counts(onnx.load(out))["LayerNormalization"] == 5
    data = json.loads(report.read_text())
    assert {
        "normfuse_version",
        "input",
        "output",
        "target",
        "sites",
        "near_misses",
        "counts",
    } <= set(data)
    assert data["counts"]["layer-norm"] == 5
    assert data["counts"]["nodes_after"] == len(onnx.load(out).graph.node)
    assert data["counts"]["nodes_after"] < data["counts"]["nodes_before"]
    site = data["sites"][0]
    assert set(site) == {
        "kind",
        "op",
        "domain",
        "axis",
        "epsilon",
        "input",
        "output",
        "removed_nodes",
    }
    assert site["op"] == "LayerNormalization" and site["axis"] == -1
    printed = capsys.readouterr().out
    assert "layer-norm" in printed and "nodes:" in printed


def test_python_dash_m_is_the_same_program(tmp_path: Path) -> None:
    out = tmp_path / "fused.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "normfuse", "optimize", str(BERT), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert op_counts(onnx.load(out))["LayerNormalization"] == 5


def test_inspect_lists_sites_and_near_misses_as_json(tmp_path: Path, capsys) -> None:
    spec, reason = LAYER_NORM_NEGATIVES["unbiased_variance"]
    model = write(norm_model(spec), tmp_path / "m.onnx")
    before = digest(model)
    assert main(["inspect", str(model), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sites"] == []
    assert [miss["reason"] for miss in data["near_misses"]] == [reason]
    assert digest(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_inspect_check_fails_when_a_site_is_left(tmp_path: Path, capsys) -> None:
    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")
    assert main(["inspect", str(model), "--check"]) == 1
    assert "fusable site" in capsys.readouterr().err
    fused = tmp_path / "fused.onnx"
    assert main(["optimize", str(model), "-o", str(fused)]) == 0
    assert main(["inspect", str(fused), "--check"]) == 0


def test_in_place_replaces_the_model(tmp_path: Path) -> None:
    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")
    assert main(["optimize", str(model), "--in-place"]) == 0
    assert op_counts(onnx.load(model))["LayerNormalization"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_refuses_to_overwrite_the_input_without_in_place(tmp_path: Path, capsys) -> None:
    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")
    before = digest(model)
    assert main(["optimize", str(model), "-o", str(model)]) == 2
    assert "--in-place" in capsys.readouterr().err
    assert digest(model) == before


def bad_inputs(tmp_path: Path) -> dict[str, Path]:
    valid = norm_model(LayerNormSpec()).SerializeToString()
    files = {
        "empty": b"",
        "random_bytes": bytes(range(256)) * 8,
        "truncated": valid[: len(valid) // 2],
        "not_a_model": onnx.helper.make_tensor(
            "t", onnx.TensorProto.FLOAT, [1], [1.0]
        ).SerializeToString(),
    }
    paths = {name: tmp_path / f"{name}.onnx" for name in files}
    for name, payload in files.items():
        paths[name].write_bytes(payload)
    paths["missing"] = tmp_path / "missing.onnx"
    paths["directory"] = tmp_path
    return paths


@pytest.mark.parametrize(
    "case", ["empty", "random_bytes", "truncated", "not_a_model", "missing", "directory"]
)
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    source = bad_inputs(tmp_path)[case]
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "normfuse", "optimize", str(source), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("normfuse: error:")
    assert list(out.parent.iterdir()) == []


def test_missing_output_folder_is_exit_2(tmp_path: Path, capsys) -> None:
    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")
    assert main(["optimize", str(model), "-o", str(tmp_path / "nowhere" / "f.onnx")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bad_usage_is_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # the relative -o, were it ever written
    with pytest.raises(SystemExit) as raised:
        main(["optimize"])
    assert raised.value.code == 2
    assert main(["optimize", str(BERT), "-o", "x.onnx", "--passes", "nope"]) == 2
    assert "unknown pass" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def malformed_models() -> dict[str, onnx.ModelProto]:
    """Models that parse but cannot be rewritten safely, keyed by the problem."""
    from onnx import helper

    def model(nodes, opset=17, outputs=("y",)):
        graph = helper.make_graph(
            nodes,
            "bad",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2]) for name in outputs],
        )
        built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        built.ir_version = 8
        return built

    relu = helper.make_node
    return {
        "cycle": model(
            [
                relu("Relu", ["b"], ["a"], name="n1"),
                relu("Relu", ["a"], ["b"], name="n2"),
                relu("Relu", ["b"], ["y"], name="n3"),
            ]
        ),
        "unproduced": model([relu("Add", ["x", "ghost"], ["y"], name="add")]),
        "duplicate_output": model(
            [relu("Relu", ["x"], ["y"], name="a"), relu("Relu", ["x"], ["y"], name="b")]
        ),
        "unknown_domain": model([relu("Fancy", ["x"], ["y"], name="f", domain="com.example")]),
        "opset_too_new": model([relu("Relu", ["x"], ["y"], name="r")], opset=999),
    }


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("cycle", "cycle"),
        ("unproduced", "nothing produces"),
        ("duplicate_output", "produced twice"),
        ("unknown_domain", "not imported"),
        ("opset_too_new", "upgrade onnx"),
    ],
)
def test_malformed_graph_is_one_line_and_exit_2(case: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(malformed_models()[case].SerializeToString())
    done = subprocess.run(
        [sys.executable, "-m", "normfuse", "optimize", str(path), "-o", str(tmp_path / "o.onnx")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o.onnx").exists()


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_corrupted_models_never_raise_unexpected_errors(data, tmp_path_factory) -> None:
    """Random byte corruption of a valid model: exit 0, 1 or 2, never a traceback."""
    valid = norm_model(LayerNormSpec(), layers=2).SerializeToString()
    corrupted = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 8))):
        corrupted[data.draw(st.integers(0, len(valid) - 1))] = data.draw(st.integers(0, 255))
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "m.onnx"
    path.write_bytes(bytes(corrupted))
    assert main(["optimize", str(path), "-o", str(folder / "out.onnx")]) in (0, 2)


@pytest.mark.parametrize("corruption", ["float_axes", "string_axes_input"])
def test_malformed_reduce_axes_are_not_fused_and_do_not_raise(corruption: str) -> None:
    """Found by the corruption test: a ReduceMean whose `axes` is not a list of ints."""
    import normfuse

    model = norm_model(LayerNormSpec())
    reduce = next(node for node in model.graph.node if node.op_type == "ReduceMean")
    if corruption == "float_axes":
        axes = next(a for a in reduce.attribute if a.name == "axes")
        axes.type, axes.f = onnx.AttributeProto.FLOAT, 1.0
        del axes.ints[:]
    else:
        del reduce.attribute[:]
        axes = onnx.helper.make_tensor("ax", onnx.TensorProto.STRING, [1], [b"x"])
        model.graph.initializer.append(axes)
        reduce.input.append("ax")
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["unknown-axes"]
    assert result.model.SerializeToString() == model.SerializeToString()


def test_inspect_lists_each_site_with_its_nodes(capsys) -> None:
    assert main(["inspect", str(BERT)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("site ")]
    assert len(lines) == 5
    assert all("LayerNormalization" in line and "ReduceMean" in line for line in lines)


def test_unnamed_nodes_are_labelled_in_the_report(tmp_path: Path, capsys) -> None:
    model = norm_model(LayerNormSpec())
    for node in model.graph.node:
        node.name = ""
    path = write(model, tmp_path / "m.onnx")
    report = tmp_path / "r.json"
    assert (
        main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--report", str(report)]) == 0
    )
    removed = json.loads(report.read_text())["sites"][0]["removed_nodes"]
    assert removed and all(removed) and all("->" in label for label in removed)
    assert main(["inspect", str(path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("site "))
    assert ", ," not in line and "ReduceMean->" in line


@pytest.mark.parametrize("command", ["optimize", "inspect", "validate", "bench", "tune"])
def test_help_has_exit_codes_and_examples(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        main([command, "--help"])
    assert raised.value.code == 0
    text = capsys.readouterr().out
    assert "exit codes: 0 success; 1 a check failed" in text
    assert f"examples:\n  normfuse {command} " in text
    assert "--report FILE" in text


def test_help_marks_required_output_bench_options_and_positionals(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    text = capsys.readouterr().out
    assert "(-o OUT | --in-place)" in text  # required: not shown as [-o OUT]
    assert "timing (need --bench;" in text
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    text = capsys.readouterr().out
    assert "the reference model" in text and "the model to check against it" in text
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "exit codes:" in text and "examples:" in text and "inspect --json" in text


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("valdate", "validate"),
        ("--valdate", "validate"),
        ("--inspect", "inspect"),
        ("optimise", "optimize"),
    ],
)
def test_mistyped_command_suggests_the_right_one(typed: str, meant: str, capsys) -> None:
    assert main([typed, str(BERT)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"normfuse: error: unknown command '{typed}'; did you mean '{meant}'?")


def test_output_to_stdout_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", str(BERT), "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not written to stdout" in err
    assert list(tmp_path.iterdir()) == []


def test_report_to_stdout_is_json_alone(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "fused.onnx"
    assert main(["optimize", str(BERT), "-o", str(out), "--report", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["counts"]["layer-norm"] == 5
    assert captured.err == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fused.onnx"]
    assert main(["validate", str(BERT), str(out), "--dims", "sequence=8", "--report", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert main(["inspect", str(BERT), "--report", "-"]) == 0
    assert len(json.loads(capsys.readouterr().out)["sites"]) == 5


def test_timing_options_without_bench_are_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # the relative --plot, were it ever written
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(BERT), "-o", str(out), "--runs", "5", "--plot", "p.png"]) == 2
    assert "--runs, --plot: timing options need --bench" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def zoo_folder(tmp_path: Path, broken: bool = False) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("gpt2_opset16.onnx", "bert_opset14.onnx"):
        (folder / name).write_bytes((BERT.parent / name).read_bytes())
    (folder / "notes.txt").write_text("not a model")
    if broken:
        (folder / "broken.onnx").write_bytes(b"not onnx")
    return folder


def test_batch_optimizes_a_folder_into_a_folder(tmp_path: Path, capsys) -> None:
    folder, out = zoo_folder(tmp_path), tmp_path / "out"
    out.mkdir()
    report = tmp_path / "all.json"
    assert main(["optimize", str(folder), "-o", str(out), "--report", str(report)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bert_opset14.onnx", "gpt2_opset16.onnx"]
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(str(folder))]
    assert len(rows) == 2 and all(" ok " in row and "layer-norm 5" in row for row in rows)
    assert "2 model(s): 2 ok" in printed
    data = json.loads(report.read_text())
    assert data["status"] == 0
    assert [Path(item["model"]).name for item in data["models"]] == [
        "bert_opset14.onnx",
        "gpt2_opset16.onnx",
    ]
    assert all(item["report"]["counts"]["layer-norm"] == 5 for item in data["models"])


def test_batch_goes_on_after_a_bad_model_and_exits_with_the_worst(tmp_path: Path, capsys) -> None:
    folder, out = zoo_folder(tmp_path, broken=True), tmp_path / "out"
    out.mkdir()
    models = [str(folder / "gpt2_opset16.onnx"), str(folder / "broken.onnx")]
    assert main(["optimize", *models, "-o", str(out), "--report", "-"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [item["status"] for item in data["models"]] == [0, 2] and data["status"] == 2
    assert "not an ONNX model" in data["models"][1]["error"]
    assert captured.err == ""
    assert sorted(p.name for p in out.iterdir()) == ["gpt2_opset16.onnx"]


def test_batch_refuses_colliding_names_and_a_missing_folder(tmp_path: Path, capsys) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "bert_opset14.onnx").write_bytes(BERT.read_bytes())
    out = tmp_path / "out"
    assert main(["optimize", str(BERT), str(other / "bert_opset14.onnx"), "-o", str(out)]) == 2
    assert "existing output folder" in capsys.readouterr().err
    out.mkdir()
    assert main(["optimize", str(BERT), str(other / "bert_opset14.onnx"), "-o", str(out)]) == 2
    assert "same name" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    dims = ["--dims", "sequence=16,btach=2"]
    assert (
        main(["optimize", str(BERT), str(BERT.parent / "vit_opset16.onnx"), "-o", str(out), *dims])
        == 2
    )
    assert "btach" in capsys.readouterr().err
