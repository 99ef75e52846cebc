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


def test_bad_usage_is_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["optimize"])
    assert raised.value.code == 2
    assert main(["optimize", str(BERT), "-o", "x.onnx", "--passes", "nope"]) == 2
    assert "unknown pass" in capsys.readouterr().err


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
    assert op_counts(result.model)["LayerNormalization"] == 0


def test_inspect_lists_each_site_with_its_nodes(capsys) -> None:
    assert main(["inspect", str(BERT)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("site ")]
    assert len(lines) == 5
    assert all("LayerNormalization" in line and "ReduceMean" in line for line in lines)
