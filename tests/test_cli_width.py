"""Every command's default output fits in 100 columns; `--wide` prints the full-width form.

The commands run on committed fixture models copied into the test's folder (so the paths they
print are short, as a user's usually are); the checks are on line lengths and on what the lines
say, never on timings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from normfuse.cli.main import main
from normfuse.io import columns

REAL = Path(__file__).resolve().parent.parent / "models" / "real"
WIDTH = columns.WIDTH
TIMING = ["--runs", "20", "--warmup", "1", "--threads", "1"]


def widest(text: str) -> int:
    """The longest line of `text`."""
    return max((len(line) for line in text.splitlines()), default=0)


def flat(text: str) -> str:
    """`text` with every run of whitespace (line breaks and indents included) as one space."""
    return " ".join(text.split())


def test_wrap_breaks_between_words_and_indents_continuations() -> None:
    text = "near-miss " + " ".join(f"word{i}" for i in range(40))
    wrapped = columns.wrap(text)
    assert widest(wrapped) <= WIDTH and len(wrapped.splitlines()) > 1
    assert all(line.startswith("    ") for line in wrapped.splitlines()[1:])
    assert flat(wrapped) == text
    name = "n" * 150  # one word longer than a line stays whole
    assert name in columns.wrap(f"node {name} here").splitlines()[1]
    assert columns.wrap(text, wide=True) == text


def test_a_table_row_too_wide_continues_on_the_next_line() -> None:
    rows = [["a", "b", "c"], ["x" * 40, "y" * 40, "z" * 40]]
    narrow = columns.aligned(rows)
    assert widest("\n".join(narrow)) <= WIDTH
    assert narrow[1].splitlines() == ["x" * 40 + "  " + "y" * 40, "    " + "z" * 40]
    assert columns.aligned(rows, wide=True)[1] == "  ".join(rows[1])


def test_long_names_are_keyed_to_a_legend_and_short_ones_kept() -> None:
    assert columns.keyed_names(["a.onnx", "b.onnx"], 10) == (["a.onnx", "b.onnx"], [])
    names = ["long_model_name.onnx", "other.onnx", "long_model_name.onnx"]
    cells, legend = columns.keyed_names(names, 10)
    assert cells == ["#1", "#2", "#1"]
    assert legend == ["  #1  long_model_name.onnx", "  #2  other.onnx"]


def test_a_name_cut_in_the_middle_keeps_both_ends() -> None:
    assert columns.middle("abcdefghij", 7) == "abc~hij"
    assert columns.middle("short", 7) == "short"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding copies of three fixture models and normfuse's output of one."""
    path = tmp_path_factory.mktemp("width")
    for name in (
        "bert_opset14",
        "llama_opset18_dynamo_float32",
        "qwen3_opset17_torchscript_float16",
    ):
        shutil.copyfile(REAL / f"{name}.onnx", path / f"{name}.onnx")
    fused = path / "llama_fused.onnx"
    assert (
        main(["optimize", str(path / "llama_opset18_dynamo_float32.onnx"), "-o", str(fused)]) == 0
    )
    return path


COMMANDS = {
    "optimize --validate": [
        "optimize", "llama_opset18_dynamo_float32.onnx", "-o", "out.onnx", "--validate",
    ],
    "optimize near-misses": [
        "optimize", "bert_opset14.onnx", "-o", "out.onnx", "--target", "onnx", "--max-opset", "14",
    ],
    "optimize batch": [
        "optimize", "bert_opset14.onnx", "llama_opset18_dynamo_float32.onnx",
        "qwen3_opset17_torchscript_float16.onnx", "-o", "outputs",
    ],
    "inspect --verbose": ["inspect", "qwen3_opset17_torchscript_float16.onnx", "--verbose"],
    "inspect near-misses": [
        "inspect", "bert_opset14.onnx", "--target", "onnx", "--max-opset", "14",
    ],
    "validate": ["validate", "llama_opset18_dynamo_float32.onnx", "llama_fused.onnx"],
    "bench": [
        "bench", "llama_opset18_dynamo_float32.onnx", "llama_fused.onnx", "--level", "disable",
        "--level", "all", *TIMING,
    ],
    "tune": ["tune", "bert_opset14.onnx", "--dims", "sequence=16", *TIMING],
}  # fmt: skip


def run(folder: Path, args: list[str], capsys, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the command line in `folder`; what it printed on standard output."""
    monkeypatch.chdir(folder)
    (folder / "outputs").mkdir(exist_ok=True)
    capsys.readouterr()
    assert main(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_default_output_fits_in_100_columns_and_wide_is_full_width(
    command: str, folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, these printed lines of 113 to 425 characters."""
    narrow = run(folder, COMMANDS[command], capsys, monkeypatch)
    wide = run(folder, [*COMMANDS[command], "--wide"], capsys, monkeypatch)
    assert widest(narrow) <= WIDTH, max(narrow.splitlines(), key=len)
    if command in ("bench", "tune", "inspect --verbose", "optimize near-misses"):
        assert widest(wide) > WIDTH


def test_wide_near_misses_are_one_line_each_and_wrapped_ones_say_the_same(
    folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*COMMANDS["inspect near-misses"], "--report", "report.json"]
    narrow = run(folder, args, capsys, monkeypatch)
    record = json.loads((folder / "report.json").read_text())
    wide = run(folder, [*args, "--wide"], capsys, monkeypatch)
    assert json.loads((folder / "report.json").read_text()) == record  # the JSON is unchanged
    assert len(record["near_misses"]) == 5
    for miss in record["near_misses"]:
        line = f"near-miss {miss['kind']} at {miss['node']!r}: {miss['reason']}: {miss['detail']}"
        assert line in wide.splitlines()
        assert line in flat(narrow)


def test_wide_inspect_lists_each_site_with_its_full_op_and_nodes_on_one_line(
    folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*COMMANDS["inspect --verbose"], "--report", "report.json"]
    narrow = run(folder, args, capsys, monkeypatch)
    wide = run(folder, [*args, "--wide"], capsys, monkeypatch)
    sites = json.loads((folder / "report.json").read_text())["sites"]
    for site in sites:
        nodes = ", ".join(site["removed_nodes"])
        assert any(line.endswith(nodes) for line in wide.splitlines())
        assert nodes in flat(narrow)
        assert any(site["output"] in line and site["op"] in line for line in wide.splitlines())
    assert "ops: SLN SimplifiedLayerNormalization" in narrow


def test_wide_validate_names_outputs_in_full_with_their_tolerance(
    folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*COMMANDS["validate"], "--report", "report.json"]
    narrow = run(folder, args, capsys, monkeypatch)
    wide = run(folder, [*args, "--wide"], capsys, monkeypatch)
    header = wide.splitlines()[0].split()
    assert header[:3] == ["provider", "level", "inputs"] and "atol/rtol" in header
    assert "tolerance (atol/rtol): 1e-4/1e-4 for every output" in narrow
    for run_record in json.loads((folder / "report.json").read_text())["runs"]:
        for output in run_record["outputs"]:
            assert f"{run_record['provider']:<8}  {run_record['level']}" in wide
            assert output["output"] in wide


def test_wide_bench_and_tune_keep_every_statistic_and_full_names(
    folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrow = run(folder, COMMANDS["bench"], capsys, monkeypatch)
    wide = run(folder, [*COMMANDS["bench"], "--wide"], capsys, monkeypatch)
    header = wide.splitlines()[1].split()
    assert header[0] == "model" and {"p90", "min", "std", "session"} <= set(header)
    rows = wide.splitlines()[2:6]
    assert [row.split()[0] for row in rows] == [
        "llama_opset18_dynamo_float32.onnx",
        "llama_fused.onnx",
    ] * 2
    assert "SimplifiedLayerNormalization 5" in rows[1]
    assert "  #1  llama_opset18_dynamo_float32.onnx" in narrow.splitlines()
    assert "norm ops after ORT: SLN SimplifiedLayerNormalization" in narrow
    tuned = run(folder, [*COMMANDS["tune"], "--wide"], capsys, monkeypatch)
    configurations = [line.split("  ")[0] for line in tuned.splitlines()[2:]]
    assert "all" in configurations and "extended" in configurations


def test_wide_batch_names_each_output(
    folder: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrow = run(folder, COMMANDS["optimize batch"], capsys, monkeypatch)
    wide = run(folder, [*COMMANDS["optimize batch"], "--wide"], capsys, monkeypatch)
    written = f"written to {folder / 'outputs'}, each under its model's file name"
    assert written in flat(narrow)
    for name in ("bert_opset14", "llama_opset18_dynamo_float32"):
        assert any(
            line.startswith(f"{name}.onnx ") and line.endswith(f"outputs/{name}.onnx")
            for line in wide.splitlines()
        )
