"""A written model never depends silently on a file the user may delete (issue 35): its external
weights go into its own `OUT.data` even beside the input (a copy-on-write clone where the
filesystem can make one, else a streamed copy), and the report says where they went. Reading the
input's file instead is asked for (`--reference-input-data`, `--in-place`) and said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import run_cli, session

import normfuse
from models.builders import LayerNormSpec, norm_model
from normfuse.io import model_io

HIDDEN = 256


def _export(folder: Path) -> Path:
    """A layer-norm model whose weights (over 1 KiB each) are in `m.onnx.data`."""
    folder.mkdir(exist_ok=True)
    path = folder / "m.onnx"
    model = norm_model(LayerNormSpec(), shape=(2, 8, HIDDEN), layers=2)
    onnx.save(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=512)
    stored = onnx.load(path, load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    return path


def _outputs(path: Path, feeds: dict) -> list[np.ndarray]:
    return session(onnx.load(path)).run(None, feeds)


def _feeds(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(0)
    return {
        info.name: rng.standard_normal(
            [d.dim_value for d in info.type.tensor_type.shape.dim]
        ).astype(np.float32)
        for info in model.graph.input
    }


def _delete_input(path: Path) -> None:
    path.unlink()
    (path.parent / "m.onnx.data").unlink()


def test_export_optimize_beside_it_delete_the_input_and_the_output_still_runs(
    tmp_path: Path, capfd
) -> None:
    source = _export(tmp_path / "ext")
    feeds = _feeds(source)
    expected = _outputs(source, feeds)
    out, report = source.parent / "fused.onnx", tmp_path / "report.json"
    run = run_cli(capfd, "optimize", str(source), "-o", str(out), "--report", str(report))
    assert run.returncode == 0, run.stderr
    assert (source.parent / "fused.onnx.data").is_file()
    notes = json.loads(report.read_text())["notes"]
    assert any(note.startswith(f"weights: {out}.data (") for note in notes), notes
    assert "weights:" in run.stdout
    _delete_input(source)
    for before, after in zip(expected, _outputs(out, feeds), strict=True):
        np.testing.assert_allclose(after, before, atol=1e-4, rtol=1e-4)


def test_a_clone_keeps_each_tensors_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the filesystem clones the source file, every tensor keeps its offset in it (here
    the clone is a plain copy: this machine's filesystem may not clone)."""

    def copy(source: Path, out) -> bool:
        with source.open("rb") as file:
            shutil.copyfileobj(file, out)
        return True

    monkeypatch.setattr(model_io, "_clone", copy)
    source = _export(tmp_path / "ext")
    feeds = _feeds(source)
    expected = _outputs(source, feeds)
    out = source.parent / "fused.onnx"
    said = normfuse.save(normfuse.optimize(source), out)
    assert said == f"weights: {out}.data (a copy-on-write clone of m.onnx.data, no byte copied)"
    assert (out.parent / "fused.onnx.data").read_bytes() == (
        source.parent / "m.onnx.data"
    ).read_bytes()
    _delete_input(source)
    for before, after in zip(expected, _outputs(out, feeds), strict=True):
        np.testing.assert_allclose(after, before, atol=1e-4, rtol=1e-4)


def test_referencing_the_input_data_is_asked_for_and_said(tmp_path: Path, capfd) -> None:
    source = _export(tmp_path / "ext")
    out, report = source.parent / "fused.onnx", tmp_path / "report.json"
    run = run_cli(
        capfd,
        "optimize",
        str(source),
        "-o",
        str(out),
        "--reference-input-data",
        "--report",
        str(report),
    )
    assert run.returncode == 0, run.stderr
    assert not (source.parent / "fused.onnx.data").exists()
    notes = json.loads(report.read_text())["notes"]
    data = source.parent / "m.onnx.data"
    assert f"weights: read from the input's {data} (not copied)" in notes
    stored = onnx.load(out, load_external_data=False)
    locations = {
        entry.value
        for tensor in stored.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    assert locations == {"m.onnx.data"}


def test_referencing_the_input_data_from_another_folder_is_refused(tmp_path: Path, capfd) -> None:
    source = _export(tmp_path / "ext")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "fused.onnx"
    run = run_cli(capfd, "optimize", str(source), "-o", str(out), "--reference-input-data")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "are in another folder" in run.stderr
    assert not out.exists() and list(elsewhere.iterdir()) == []


def test_a_model_with_external_data_has_a_float64_reference(tmp_path: Path) -> None:
    """issue 34: the float64 reference was '-' for every model with external data; its weights
    are now read into the float64 copy (up to 512 MiB)."""
    source = _export(tmp_path / "ext")
    out = source.parent / "fused.onnx"
    normfuse.save(normfuse.optimize(source), out)
    report = normfuse.validate(source, out)
    assert "float64 reference: ONNX Runtime" in report.notes
    first = report.runs[0].outputs[0]
    assert first.reference_error_original is not None
    assert first.reference_error_candidate is not None


def test_refused_repairs_apply_to_a_model_with_external_data(tmp_path: Path) -> None:
    """issue 35 walkthrough: with weights in external data the output guard did not run the
    model, so no repair was seen and `--refuse-repairs` kept a site that `--validate` called a
    repair; the guard now reads the weights from the model's folder."""
    source = _export(tmp_path / "ext")
    kept = normfuse.optimize(source)
    repaired = [site.output for site in kept.report.sites if site.repair]
    assert repaired  # the first norm reads the offset rows themselves
    refused = normfuse.optimize(source, refuse_repairs=True)
    assert not {site.output for site in refused.report.sites} & set(repaired)
    assert "repair-refused" in {miss.reason for miss in refused.report.near_misses}


def test_validation_fails_a_repair_the_guard_did_not_see_when_repairs_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation's own inputs (other dims, other draws) may show a repair the guard's did not:
    with repairs refused, that fails the validation (nothing written by the CLI), and the table
    says why; allowed, the row says `repair`."""
    from normfuse.prove import guard
    from normfuse.prove.validate import ValidationOptions

    monkeypatch.setattr(guard, "runnable", lambda model, base_dir=None: False)  # guard blind
    source = _export(tmp_path / "ext")
    allowed = normfuse.optimize(source, validation=ValidationOptions())
    assert allowed.report.validation.passed
    assert allowed.report.validation.repaired
    assert "repair: " in allowed.report.validation.table()
    refused = normfuse.optimize(source, validation=ValidationOptions(), refuse_repairs=True)
    assert not refused.report.validation.passed
    assert "repairs are refused (--refuse-repairs)" in refused.report.validation.table(wide=True)


def test_an_existing_data_file_the_output_does_not_own_is_never_replaced(
    tmp_path: Path, capfd
) -> None:
    """adversary 14: another model in the folder kept its weights in `out.onnx.data`; writing
    `-o out.onnx` replaced that file and the other model gave wrong answers (7.5 apart). Now
    refused (exit 2, nothing written); a previous output of the same path is replaced."""
    source = _export(tmp_path / "ext")
    out = source.parent / "out.onnx"
    other = source.parent / "out.onnx.data"
    other.write_bytes(b"another model's weights")
    run = run_cli(capfd, "optimize", str(source), "-o", str(out))
    assert run.returncode == 2
    assert "out.onnx.data already exists and is not out.onnx's own weights" in run.stderr
    assert other.read_bytes() == b"another model's weights" and not out.exists()
    other.unlink()
    assert run_cli(capfd, "optimize", str(source), "-o", str(out)).returncode == 0
    assert run_cli(capfd, "optimize", str(source), "-o", str(out)).returncode == 0  # again
    feeds = _feeds(source)
    for before, after in zip(_outputs(source, feeds), _outputs(out, feeds), strict=True):
        np.testing.assert_allclose(after, before, atol=1e-4, rtol=1e-4)


def test_a_sparse_source_is_copied_without_its_holes(tmp_path: Path) -> None:
    """Weights copied tensor by tensor (no clone) carry their data ranges only: a source whose
    tensors sit in a sparse file (holes read as zeros) gives an output of the same bytes, its
    holes kept where the filesystem keeps them, and a tensor that ends in a hole still ends the
    file at its size."""
    folder = tmp_path / "sparse"
    folder.mkdir()
    size = 1 << 20
    weights = [
        np.zeros(size, np.float32),
        np.arange(1024, dtype=np.float32),
        np.zeros(size, np.float32),
    ]
    data = folder / "w.bin"
    tensors, offset = [], 0
    with data.open("wb") as file:
        for index, array in enumerate(weights):
            offset = (offset + 4095) // 4096 * 4096
            if array.any():
                file.seek(offset)
                file.write(array.tobytes())
            tensor = onnx.TensorProto(name=f"w{index}", data_type=onnx.TensorProto.FLOAT)
            tensor.dims.extend(array.shape)
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", "w.bin"), ("offset", offset), ("length", array.nbytes)):
                tensor.external_data.add(key=key, value=str(value))
            tensors.append(tensor)
            offset += array.nbytes
        file.truncate(offset)
    out = tmp_path / "out.data"
    with out.open("wb") as stream:
        model_io._write_external_data(tensors, folder, stream, "out.data")
    written = out.read_bytes()
    for tensor, array in zip(tensors, weights, strict=True):
        entry = {
            item.key: int(item.value) for item in tensor.external_data if item.key != "location"
        }
        chunk = written[entry["offset"] : entry["offset"] + entry["length"]]
        assert np.array_equal(np.frombuffer(chunk, np.float32), array)
    assert out.stat().st_size == entry["offset"] + entry["length"]
    if data.stat().st_blocks * 512 < data.stat().st_size // 2:  # this filesystem keeps holes
        assert out.stat().st_blocks * 512 < out.stat().st_size // 2
