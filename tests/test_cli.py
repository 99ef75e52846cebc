"""The command line: outputs, the JSON report, exit codes, and one-line errors on bad input."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import CliRun, op_counts, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.builders import LAYER_NORM_NEGATIVES, LayerNormSpec, norm_model
from normfuse.cli.main import main

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
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path, capfd) -> None:
    source = bad_inputs(tmp_path)[case]
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    done = run_cli(capfd, "optimize", str(source), "-o", str(out))
    assert_bad_input_refused(done, out)


def test_bad_input_through_python_dash_m_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The same in a fresh interpreter: the real exit status and stderr stream."""
    source = bad_inputs(tmp_path)["truncated"]
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    done = _run_subprocess("optimize", str(source), "-o", str(out))
    assert_bad_input_refused(done, out)


def assert_bad_input_refused(done: CliRun | subprocess.CompletedProcess, out: Path) -> None:
    """Exit 2, one line on stderr and no traceback, nothing written."""
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
def test_malformed_graph_is_one_line_and_exit_2(
    case: str, message: str, tmp_path: Path, capfd
) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(malformed_models()[case].SerializeToString())
    done = run_cli(capfd, "optimize", str(path), "-o", str(tmp_path / "o.onnx"))
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


def test_inspect_verbose_lists_each_site_with_its_nodes(capsys) -> None:
    assert main(["inspect", str(BERT), "--verbose", "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    sites = [line for line in lines if line.startswith("layer-norm  LayerNormalization  ")]
    nodes = [line for line in lines if line.startswith("    axis -1")]
    assert len(sites) == 5 and len(nodes) == 5
    assert all("ReduceMean" in line for line in nodes)


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
    assert main(["inspect", str(path), "--verbose", "--wide"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "replaces" in x)
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


@pytest.mark.parametrize(
    ("options", "refused", "needs"),
    [
        (["--dims", "sequence=8"], "--dims", "--validate, --bench or --tune-for"),
        (
            ["--seed", "3", "--inputs", "x.npz"],
            "--inputs, --seed",
            "--validate, --bench or --tune-for",
        ),
        (["--providers", "cpu", "--tune-for", "cpu"], "--providers", "--validate or --bench"),
        (["--atol", "1e-3", "--bench"], "--atol", "--validate"),
    ],
)
def test_options_for_a_run_are_refused_where_optimize_runs_no_model(
    tmp_path: Path, capsys, options: list[str], refused: str, needs: str
) -> None:
    """`--dims` (and the other input and tolerance options) mean nothing to an optimize that
    runs no model: a usage error naming what would use them, before any work."""
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(BERT), "-o", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert err == f"normfuse: error: {refused}: used only with {needs}, for the runs they make\n"
    assert list(tmp_path.iterdir()) == []


def test_inspect_takes_a_folder_like_the_other_commands(tmp_path: Path, capsys) -> None:
    """Each *.onnx file of the folder, under its name; one combined JSON record; --check fails
    when any model has a site left, counting sites and models."""
    folder = zoo_folder(tmp_path)
    assert main(["inspect", str(folder)]) == 0
    printed = capsys.readouterr().out
    headers = [line for line in printed.splitlines() if line.startswith("== ")]
    assert headers == [
        f"== {folder / 'bert_opset14.onnx'} ==",
        f"== {folder / 'gpt2_opset16.onnx'} ==",
    ]
    assert printed.count("layer-norm  LN  ") == 10  # LN: LayerNormalization (a legend says)
    assert main(["inspect", str(folder), "--json", "--check"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["status"] == 1 and [len(item["report"]["sites"]) for item in data["models"]] == [
        5,
        5,
    ]
    assert "output" not in data["models"][0] and "written" not in data
    assert captured.err == (
        "normfuse: check failed: 10 fusable site(s) left unfused in 2 of 2 models\n"
    )


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
    assert f"models in {folder}" in printed
    rows = [line for line in printed.splitlines() if line.startswith(("bert_", "gpt2_"))]
    assert len(rows) == 2 and all(" ok " in row and "layer-norm 5" in row for row in rows)
    assert "2 model(s): 2 ok" in printed
    data = json.loads(report.read_text())
    assert data["status"] == 0
    assert [Path(item["model"]).name for item in data["models"]] == [
        "bert_opset14.onnx",
        "gpt2_opset16.onnx",
    ]
    assert all(item["report"]["counts"]["layer-norm"] == 5 for item in data["models"])


def test_a_file_that_is_no_model_stops_a_batch_before_any_work(tmp_path: Path, capsys) -> None:
    """Loading is checked for every model first: a broken file is one error line (naming it),
    exit 2, and no other model is processed or written, given by name or in a folder."""
    folder, out = zoo_folder(tmp_path, broken=True), tmp_path / "out"
    out.mkdir()
    models = [str(folder / "gpt2_opset16.onnx"), str(folder / "broken.onnx")]
    for argv in ([*models, "--report", "-"], [str(folder)]):
        assert main(["optimize", *argv, "-o", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert f"{folder / 'broken.onnx'}: not an ONNX model" in captured.err
        assert list(out.iterdir()) == []


def test_a_batch_is_written_whole_or_not_at_all(tmp_path: Path, capsys) -> None:
    """A model that stops with an error (here ONNX Runtime refusing sequence=0 on BERT) is
    listed with the others, which all still run, but nothing is written: no output, no report,
    no model replaced with --in-place; one error line says so, and `--report -` still prints
    the record, with no output claimed."""
    out, report = tmp_path / "out", tmp_path / "all.json"
    out.mkdir()
    models = [str(STATIC), str(BERT)]
    args = ["optimize", *models, "-o", str(out), "--validate", "--dims", "sequence=0", "--quiet"]
    assert main([*args, "--report", str(report)]) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == f"models in {BERT.parent}"  # then each by its file name
    rows = {line.split()[0]: line.split() for line in lines[2:4]}
    assert rows[STATIC.name][1] == "ok" and rows[BERT.name][1] == "error"
    assert "nothing written (a batch is written whole or not at all)" in lines
    assert captured.err.splitlines() == [
        "normfuse: error: 1 of 2 models stopped with an error; nothing written (a batch is "
        "written whole or not at all)"
    ]
    assert list(out.iterdir()) == [] and not report.exists()
    assert main([*args, "--report", "-"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["written"] is False and [item["status"] for item in data["models"]] == [0, 2]
    assert [item["output"] for item in data["models"]] == [None, None]
    assert data["models"][0]["report"]["output"] is None
    copies = tmp_path / "in"
    copies.mkdir()
    for model in models:
        (copies / Path(model).name).write_bytes(Path(model).read_bytes())
    before = {path.name: digest(path) for path in copies.iterdir()}
    assert main(["optimize", str(copies), "--in-place", "--validate", "--dims", "sequence=0"]) == 2
    assert {path.name: digest(path) for path in copies.iterdir()} == before


def test_a_batch_with_a_failed_check_writes_its_report_and_no_model(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A model whose check fails (exit 1) withholds the whole batch's models, even those
    already staged; the report is written, as for one model."""
    from normfuse.cli import optimize_command as cli

    real = cli._optimize_one

    def failing_bert(args, model_path, *rest):
        outcome = real(args, model_path, *rest)  # staged
        return dataclasses.replace(outcome, status=1) if model_path == BERT else outcome

    monkeypatch.setattr(cli, "_optimize_one", failing_bert)
    out, report = tmp_path / "out", tmp_path / "all.json"
    out.mkdir()
    argv = ["optimize", str(STATIC), str(BERT), "-o", str(out), "--report", str(report)]
    assert main(argv) == 1
    assert list(out.iterdir()) == [] and json.loads(report.read_text())["written"] is False
    assert "no model written (a batch is written whole or not at all)" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["all.json", "out"]  # no .tmp


def test_a_folder_skips_external_data_files_named_like_models(tmp_path: Path, capsys) -> None:
    """A folder's `weights.onnx` that another model there reads as external data is no model:
    optimize and inspect skip it with a note; another *.onnx that is no model is an error."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir(), out.mkdir()
    (folder / "bert.onnx").write_bytes(BERT.read_bytes())
    model = norm_model(LayerNormSpec())
    onnx.save(
        model,
        folder / "small.onnx",
        save_as_external_data=True,
        location="weights.onnx",
        size_threshold=0,
    )
    assert (folder / "weights.onnx").is_file()
    assert (
        main(["optimize", str(folder), "-o", str(out), "--report", str(tmp_path / "r.json")]) == 0
    )
    assert sorted(path.name for path in out.iterdir()) == [
        "bert.onnx",
        "small.onnx",
        "small.onnx.data",
    ]
    note = f"{folder / 'weights.onnx'} skipped: it is the external data of {folder / 'small.onnx'}"
    assert f"note: {note}" in " ".join(capsys.readouterr().out.split())  # wrapped at 100
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["notes"] == [note] and len(data["models"]) == 2
    assert main(["inspect", str(folder), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert [Path(item["model"]).name for item in inspected["models"]] == ["bert.onnx", "small.onnx"]
    (folder / "zz.onnx").write_bytes(b"\x00" * 64)
    assert main(["optimize", str(folder), "-o", str(tmp_path)]) == 2
    assert "zz.onnx: not an ONNX model" in capsys.readouterr().err


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
    dims = ["--validate", "--dims", "sequence=16,btach=2"]
    assert (
        main(["optimize", str(BERT), str(BERT.parent / "vit_opset16.onnx"), "-o", str(out), *dims])
        == 2
    )
    assert "btach" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "dims"),
    [("optimize", "sequence=0"), ("validate", "sequence=600"), ("bench", "sequence=600")],
)
def test_a_model_that_does_not_run_names_the_dims_given(
    tmp_path: Path, capsys, command: str, dims: str
) -> None:
    """The hint names the --dims that were given instead of asking for them, and ONNX Runtime's
    message arrives whole: no status prefix, no C++ source location, no word cut in two."""
    args = {
        "optimize": ["optimize", str(BERT), "-o", str(tmp_path / "o.onnx"), "--validate"],
        "validate": ["validate", str(BERT), str(BERT)],
        "bench": ["bench", str(BERT), "--runs", "2", "--warmup", "1"],
    }[command]
    assert main([*args, "--dims", dims]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    error = captured.err.strip()
    assert f"check --dims {dims}, or give --inputs FILE.npz" in error
    assert "give --dims or --inputs" not in error
    assert "[ONNXRuntimeError]" not in error and "onnxruntime_src" not in error
    ort_says = {"sequence=0": "requested shape:{1,0,-1,16}", "sequence=600": "invalid expand shape"}
    assert ort_says[dims] in error


def test_long_library_messages_are_cut_between_words() -> None:
    from normfuse.errors import first_line, runtime_message

    words = " ".join(f"word{i}" for i in range(100))
    cut = first_line(ValueError(words), width=60)
    assert len(cut) <= 60 and cut.endswith(" ...")
    assert all(part.startswith("word") and part[4:].isdigit() for part in cut[:-4].split())
    ort_text = (
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape "
        "node. Status Message: /onnxruntime_src/core/reshape_helper.h:84 onnxruntime::Reshape"
        "Helper::ReshapeHelper(const onnxruntime::TensorShape&, bool) size != 0 was false.\n"
    )
    assert runtime_message(RuntimeError(ort_text)) == (
        "Non-zero status code returned while running Reshape node. Status Message: "
        "size != 0 was false."
    )


STATIC = BERT.parent / "llama_opset18_dynamo_float32.onnx"  # every input shape static


def test_dims_for_a_model_without_symbolic_dims_is_a_note(tmp_path: Path, capsys) -> None:
    """Scripts pass one --dims to many models: a model with none notes it and runs (issue 24)."""
    assert not onnx.load(STATIC).graph.input[0].type.tensor_type.shape.dim[0].dim_param
    out = tmp_path / "fused.onnx"
    args = ["optimize", str(STATIC), "-o", str(out), "--validate", "--dims", "batch=1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "note: --dims batch=1 ignored: the model's input shapes are all static" in printed
    assert "validation passed" in printed
    assert main(["validate", str(STATIC), str(out), "--dims", "batch=1"]) == 0
    assert "--dims batch=1 ignored" in capsys.readouterr().out


def test_every_missing_dim_is_named_in_one_error(tmp_path: Path, capsys) -> None:
    """A KV-cache decoder has several symbolic dims: one run names all that --dims must give
    (batch-like ones default to 1), not one per run."""
    model = BERT.parent / "kv" / "llama_optimum_merged_opset17.onnx"
    args = ["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--validate"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "'sequence_length', 'past_sequence_length' are not known" in err, err
    assert "--dims sequence_length=N,past_sequence_length=N" in err
    assert not (tmp_path / "o.onnx").exists()
    assert main([*args, "--dims", "sequence_length=1"]) == 2
    err = capsys.readouterr().err
    assert "dimension 'past_sequence_length' is not known" in err, err


def test_dims_typo_stays_an_error_where_the_model_has_symbolic_dims(tmp_path: Path, capsys) -> None:
    args = ["optimize", str(BERT), "-o", str(tmp_path / "o.onnx"), "--validate"]
    assert main([*args, "--dims", "sequence=8,btach=1"]) == 2
    err = capsys.readouterr().err
    assert "--dims btach: no input has such a dimension" in err and "batch, sequence" in err
    assert not (tmp_path / "o.onnx").exists()


def test_batch_of_static_models_accepts_dims(tmp_path: Path, capsys) -> None:
    vit = BERT.parent / "vit_opset18_dynamo_float32.onnx"
    args = ["optimize", str(STATIC), str(vit), "-o", str(tmp_path), "--validate"]
    assert main([*args, "--dims", "batch=1"]) == 0
    assert (tmp_path / STATIC.name).exists() and (tmp_path / vit.name).exists()
    assert main([*args, "--dims", "btach=1"]) == 0  # no model has symbolic dims: no typo guard
    argv = ["optimize", str(STATIC), str(BERT), "-o", str(tmp_path), "--validate"]
    assert main([*argv, "--dims", "btach=1"]) == 2
    assert "no input of any model has such a dimension" in capsys.readouterr().err


def unrunnable_model() -> onnx.ModelProto:
    """x [batch, 4] reshaped to [3]: a valid model that ONNX Runtime cannot run."""
    helper = onnx.helper
    shape = onnx.numpy_helper.from_array(np.array([3], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "unrunnable",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
        [shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batch_summary_shows_near_misses_and_validation_per_model(tmp_path: Path, capsys) -> None:
    """Each row says how many near-misses the model has and whether it validated; a model's
    error names it once; --quiet (no --bench) drops the per-model progress lines."""
    spec, _ = LAYER_NORM_NEGATIVES["unbiased_variance"]
    negative = write(norm_model(spec), tmp_path / "negative.onnx")
    broken = write(unrunnable_model(), tmp_path / "zbad.onnx")
    out = tmp_path / "out"
    out.mkdir()
    models = [str(BERT), str(negative), str(broken)]
    args = ["optimize", *models, "-o", str(out), "--validate", "--dims", "sequence=8", "--quiet"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("normfuse: error: 1 of 3 models")  # no "MODEL ..." lines
    header, *rows = captured.out.splitlines()
    assert header.split()[:5] == ["model", "status", "sites", "near-misses", "validation"]
    cells = {row.split()[0]: row.split() for row in rows[:3]}  # by file name: no two alike
    assert cells[BERT.name][1:6] == ["ok", "layer-norm", "5", "0", "passed"]
    assert cells[negative.name][1:5] == ["ok", "none", "1", "passed"]
    assert cells[broken.name][1:5] == ["error", "-", "-", "-"]
    errors = " ".join(" ".join(rows[3:]).split())  # the error, wrapped onto lines of 100
    assert errors.count("does not run on the validation inputs") == 1
    assert errors.count(str(broken)) == 1
    assert main(["optimize", str(BERT), str(negative), "-o", str(out)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    at = header.index("validation")
    assert [row[at:].split()[0] for row in rows[:2]] == ["-", "-"]  # validation not run


def test_a_note_shared_by_validation_and_bench_is_printed_once(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o.onnx"
    args = ["optimize", str(BERT), "-o", str(out), "--validate", "--bench", "--dims", "sequence=8"]
    assert main([*args, "--runs", "10", "--warmup", "1", "--threads", "1"]) == 0
    assert capsys.readouterr().out.count("note: batch defaulted to 1") == 1


def test_inspect_is_one_short_line_per_site_and_lists_nodes_with_verbose(
    tmp_path: Path, capsys
) -> None:
    assert main(["inspect", str(BERT)]) == 0
    printed = capsys.readouterr().out
    rows = [line.split() for line in printed.splitlines() if line.startswith("layer-norm  ")]
    rows = [row for row in rows if row[2] != "5"]  # the per-kind count above the site lines
    assert len(rows) == 5 and all(row[1] == "LN" for row in rows)  # ops: LN LayerNormalization
    assert rows[-1][2:] == ["last_hidden_state", "[?,", "?,", "64]"]
    assert "ops: LN LayerNormalization" in printed
    assert "replaces" not in printed and max(len(line) for line in printed.splitlines()) <= 100
    assert main(["inspect", str(BERT), "--verbose"]) == 0
    verbose = capsys.readouterr().out
    details = [line for line in verbose.splitlines() if line.startswith("    axis -1, epsilon")]
    assert len(details) == 5 and all("replaces 9 nodes:" in line for line in details)
    assert main(["inspect", str(BERT), "--json"]) == 0
    sites = json.loads(capsys.readouterr().out)["sites"]
    assert [len(site["removed_nodes"]) for site in sites] == [9] * 5


def test_inspect_of_a_fused_model_says_it_is_already_fused(tmp_path: Path, capsys) -> None:
    fused = tmp_path / "fused.onnx"
    assert main(["optimize", str(BERT), "-o", str(fused)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(fused)]) == 0
    printed = capsys.readouterr().out
    assert "already fused: 5 fused norm nodes (LayerNormalization 5)" in printed
    assert "(nothing fused)" not in printed
    assert "sites" not in printed.splitlines()[0]  # no table header without rows
    spec, _ = LAYER_NORM_NEGATIVES["unbiased_variance"]
    assert main(["inspect", str(write(norm_model(spec), tmp_path / "neg.onnx"))]) == 0
    assert "(nothing fused)" in capsys.readouterr().out


def test_tune_heads_its_first_column_configuration(tmp_path: Path, capsys) -> None:
    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")
    assert main(["tune", str(model), "--runs", "10", "--warmup", "1", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "level" in line and "median" in line)
    assert header.split()[0] == "configuration"
    assert lines[lines.index(header) + 1].split()[0] == "all"  # ORT's default, the reference


def _run_subprocess(*args: str) -> subprocess.CompletedProcess:
    """`python -m normfuse ARGS` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "normfuse", *args], capture_output=True, text=True, check=False
    )


def _assert_one_line_error(done: CliRun | subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("normfuse: error:")
    assert words in done.stderr


@pytest.mark.parametrize("command", ["optimize", "inspect"])
def test_a_path_holding_a_newline_is_escaped_on_one_line(
    command: str, tmp_path: Path, capfd
) -> None:
    missing = tmp_path / "two\nlines.onnx"
    extra = ["-o", str(tmp_path / "o.onnx")] if command == "optimize" else []
    done = run_cli(capfd, command, str(missing), *extra)
    _assert_one_line_error(done, "two\\nlines.onnx")


@pytest.mark.parametrize("key", ["bogus", "basepath"])
def test_external_data_key_onnx_runtime_refuses_is_one_line_without_warnings(
    key: str, tmp_path: Path, capfd
) -> None:
    """ONNX Runtime refuses an entry with a key other than location/offset/length/checksum
    ("model format error"); onnx ignores it with a UserWarning. Both become one line."""
    path = _with_external_data_key(tmp_path, key)
    for args in (["optimize", str(path), "-o", str(tmp_path / "o.onnx")], ["inspect", str(path)]):
        done = run_cli(capfd, *args)
        _assert_one_line_error(done, f"external data key {key!r}")
        assert "Warning" not in done.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_external_data_key_through_python_dash_m_prints_no_warning(tmp_path: Path) -> None:
    """The same in a fresh interpreter, whose default warning filters print onnx's UserWarning."""
    path = _with_external_data_key(tmp_path, "bogus")
    done = _run_subprocess("optimize", str(path), "-o", str(tmp_path / "o.onnx"))
    _assert_one_line_error(done, "external data key 'bogus'")
    assert "Warning" not in done.stderr
    assert not (tmp_path / "o.onnx").exists()


def _with_external_data_key(tmp_path: Path, key: str) -> Path:
    """A model saved with external data whose every entry also has `key` (value "1")."""
    path = tmp_path / "m.onnx"
    onnx.save(
        norm_model(LayerNormSpec()),
        path,
        save_as_external_data=True,
        location="m.bin",
        size_threshold=0,
    )
    model = onnx.load(path, load_external_data=False)
    for tensor in model.graph.initializer:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, "1"
    path.write_bytes(model.SerializeToString())
    return path


DIMS_TYPO = "--dims nosuch: no input has such a dimension; the model's symbolic dims are: batch"
SHAPE_ERROR = "--inputs 'x' has shape [4, 3, 5], expected ['batch', 7, 32]"
TIMED = ["--bench", "--runs", "2", "--warmup", "0"]
EARLY_INPUT_ERRORS = {  # options ("NPZ": the wrong-shaped file), the error line
    "validate-dims-typo": (["--validate", "--dims", "nosuch=3"], DIMS_TYPO),
    "validate-npz-shape": (["--validate", "--inputs", "NPZ"], SHAPE_ERROR),
    "bench-dims-typo": ([*TIMED, "--dims", "nosuch=3"], DIMS_TYPO),
    "bench-npz-shape": ([*TIMED, "--inputs", "NPZ"], SHAPE_ERROR),
}


@pytest.mark.parametrize("case", EARLY_INPUT_ERRORS)
def test_dims_and_inputs_errors_come_before_any_work(
    tmp_path: Path, capfd, monkeypatch, case: str
) -> None:
    """ADV9-04: a `--dims` typo or an `--inputs` array of the wrong shape is refused right after
    the model is loaded: exit 2, the same one line, nothing written, and neither the model view,
    the output guard's run nor the rewrite started."""
    import numpy as np

    import normfuse

    model = write(norm_model(LayerNormSpec()), tmp_path / "m.onnx")  # x: [batch, 7, 32]
    npz = tmp_path / "bad.npz"
    np.savez(npz, x=np.zeros((4, 3, 5), np.float32))
    started: list[str] = []
    for owner, name in [
        (normfuse.facts.model_view, "build"),
        (normfuse.rewrite.rounds, "run"),
        (normfuse.prove.guard.OutputGuard, "start"),
    ]:
        monkeypatch.setattr(owner, name, lambda *a, _name=name, **k: started.append(_name))
    options, line = EARLY_INPUT_ERRORS[case]
    options = [str(npz) if option == "NPZ" else option for option in options]
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    done = run_cli(capfd, "optimize", str(model), "-o", str(out), "--report", str(report), *options)
    assert (done.returncode, done.stderr) == (2, f"normfuse: error: {line}\n")
    assert started == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "m.onnx"]


def test_max_opset_caps_the_raise_and_says_which_sites_it_left(tmp_path: Path, capfd) -> None:
    """issue 35: `--target onnx` raised to opset 23 with no way to cap it at what the deployment
    runtime loads; with `--max-opset 22` the RMS norms (RMSNormalization needs 23) are left,
    naming the cap, and the output stays at the model's opset."""
    model = Path(__file__).resolve().parent.parent / "models" / "real" / "llama_opset17.onnx"
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    args = ["optimize", str(model), "-o", str(out), "--target", "onnx", "--report", str(report)]
    run = run_cli(capfd, *args, "--max-opset", "22")
    assert run.returncode == 0, run.stderr
    record = json.loads(report.read_text())
    assert record["sites"] == []
    assert {miss["reason"] for miss in record["near_misses"]} == {"opset-too-low"}
    assert all("--max-opset 22" in miss["detail"] for miss in record["near_misses"])
    assert onnx.load(out).opset_import[0].version == 17
    assert all("--target ort fuses it" in miss["detail"] for miss in record["near_misses"])
    below = run_cli(capfd, *args, "--max-opset", "16")
    assert below.returncode == 2
    assert "--max-opset 16 is below the model's own opset 17" in below.stderr
    above = run_cli(capfd, *args, "--max-opset", "99")
    assert above.returncode == 2
    assert "--max-opset 99 is above the newest opset" in above.stderr


def test_a_reader_gone_after_the_commit_does_not_fail_a_written_model() -> None:
    """issue 35 walkthrough: `normfuse optimize ... | head -1` wrote the model and exited 2
    ("cannot write output: Broken pipe") on the closing `wrote` line. A line said after the
    commit to a pipe nobody reads is dropped, and so is the rest of that stream's output."""
    import os

    from normfuse.cli.shared import said_after_commit

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone
    with os.fdopen(write_end, "w") as stream:
        said_after_commit("wrote o.onnx", stream)  # no BrokenPipeError
        print("more", file=stream)  # now goes nowhere
        stream.flush()


def test_an_empty_passes_value_is_refused(tmp_path: Path, capfd) -> None:
    """issue 35 walkthrough: `--passes ""` fused nothing and exited 0."""
    model = Path(__file__).resolve().parent.parent / "models" / "real" / "bert_opset14.onnx"
    out = tmp_path / "o.onnx"
    run = run_cli(capfd, "optimize", str(model), "-o", str(out), "--passes", " , ")
    assert run.returncode == 2
    assert "--passes: names no pass" in run.stderr
    assert not out.exists()
