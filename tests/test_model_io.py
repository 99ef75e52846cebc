"""Model I/O: external data stays on disk on load, is written beside the output on save, unsafe
locations are refused, and inputs are never modified."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import onnx
import pytest
from helpers import assert_same_numerics, op_counts
from onnx.external_data_helper import uses_external_data

import normfuse
from models.builders import LayerNormSpec, norm_model
from normfuse.io import model_io


def save_external(folder: Path, name: str = "m.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save(
        norm_model(LayerNormSpec(), layers=2),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_load_leaves_external_weights_on_disk(tmp_path: Path) -> None:
    loaded = model_io.load(save_external(tmp_path))
    tensors = list(model_io.external_tensors(loaded.model))
    assert tensors and all(not tensor.raw_data for tensor in tensors)


def test_external_data_is_written_beside_the_output(tmp_path: Path) -> None:
    source = save_external(tmp_path / "in")
    before = digests(source.parent)
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    result = normfuse.optimize(source)
    normfuse.save(result, out)
    assert digests(source.parent) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["fused.onnx", "fused.onnx.data"]
    fused = onnx.load(out)
    assert op_counts(fused)["LayerNormalization"] == 2
    original = onnx.load(source)
    assert_same_numerics(original, fused, seed=6)


def test_saved_model_keeps_large_weights_external(tmp_path: Path) -> None:
    out = tmp_path / "fused.onnx"
    normfuse.save(normfuse.optimize(save_external(tmp_path / "in")), out)
    initializers = onnx.load(out, load_external_data=False).graph.initializer
    weights = [t for t in initializers if t.name.startswith("weight")]
    assert len(weights) == 2
    assert all(uses_external_data(t) for t in weights)


def set_location(path: Path, location: str) -> None:
    model = onnx.load(path, load_external_data=False)
    for tensor in model_io.external_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, path)


@pytest.mark.parametrize("location", ["/etc/passwd", "../outside.bin", "sub/../../outside.bin"])
def test_refuses_locations_outside_the_model_folder(tmp_path: Path, location: str) -> None:
    path = save_external(tmp_path / "in")
    (tmp_path / "outside.bin").write_bytes(b"\0" * 100000)
    set_location(path, location)
    with pytest.raises(normfuse.NormfuseError, match="external data location"):
        normfuse.optimize(path)


def test_refuses_symlink_out_of_the_model_folder(tmp_path: Path) -> None:
    path = save_external(tmp_path / "in")
    secret = tmp_path / "secret.bin"
    os.replace(path.parent / "weights.bin", secret)
    (path.parent / "weights.bin").symlink_to(secret)
    with pytest.raises(normfuse.NormfuseError, match="symbolic link"):
        normfuse.optimize(path)


def test_missing_and_short_external_data_are_clear_errors(tmp_path: Path) -> None:
    path = save_external(tmp_path / "in")
    weights = path.parent / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(normfuse.NormfuseError, match="shorter than the declared data"):
        normfuse.optimize(path)
    weights.unlink()
    with pytest.raises(normfuse.NormfuseError, match="is missing"):
        normfuse.optimize(path)


def test_failed_save_leaves_existing_output_and_no_temp_files(tmp_path: Path) -> None:
    out = tmp_path / "fused.onnx"
    out.write_bytes(b"previous")
    result = normfuse.optimize(save_external(tmp_path / "in"))
    (tmp_path / "in" / "weights.bin").unlink()
    with pytest.raises(normfuse.NormfuseError):
        normfuse.save(result, out)
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fused.onnx", "in"]


@pytest.mark.parametrize("reference", [False, True], ids=["own-data", "referenced"])
def test_output_in_the_source_folder(tmp_path: Path, reference: bool) -> None:
    """Beside the input, the output gets its own OUT.data (issue 35: deleting the input must not
    break it), or, asked, reads the input's file; the input's file is unchanged either way."""
    source = save_external(tmp_path)
    weights = tmp_path / "weights.bin"
    before = (weights.stat().st_mtime_ns, hashlib.sha256(weights.read_bytes()).hexdigest())
    out = tmp_path / "fused.onnx"
    said = normfuse.save(normfuse.optimize(source), out, reference_input_data=reference)
    data = "weights.bin" if reference else "fused.onnx.data"
    if reference:
        assert said == f"weights: read from the input's {weights} (not copied)"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted({"fused.onnx", data, "m.onnx", "weights.bin"})
    assert (weights.stat().st_mtime_ns, hashlib.sha256(weights.read_bytes()).hexdigest()) == before
    locations = {
        entry.value
        for tensor in model_io.external_tensors(onnx.load(out, load_external_data=False))
        for entry in tensor.external_data
        if entry.key == "location"
    }
    assert locations == {data}
    original = onnx.load(source)
    assert_same_numerics(original, onnx.load(out), seed=7)


def test_in_place_with_external_data_keeps_the_data_file(tmp_path: Path) -> None:
    from normfuse.cli.main import main

    source = save_external(tmp_path)
    assert main(["optimize", str(source), "--in-place"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "weights.bin"]
    assert op_counts(onnx.load(source))["LayerNormalization"] == 2
