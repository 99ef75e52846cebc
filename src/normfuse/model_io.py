"""Load models safely and save them atomically.

Loading never reads external weights into memory: tensors stored in external data keep their
`external_data` entries, each entry's location is checked to stay inside the model's folder, and
the file must hold the declared bytes. Saving writes to a temporary file in the destination folder
and renames it into place. External data is referenced where it is when the output goes into the
source folder (nothing is rewritten); elsewhere it is streamed, in chunks, into one file beside the
output. Tensors normfuse creates (fused scales and biases) are small and stored inline.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from normfuse.errors import NormfuseError

_COPY_CHUNK = 16 * 1024 * 1024
_ALIGN = 4096


@dataclass(frozen=True)
class LoadedModel:
    """A model and the folder its external-data locations are relative to."""

    model: onnx.ModelProto
    base_dir: Path | None


def load(path: str | os.PathLike) -> LoadedModel:
    """Read an ONNX model from `path`, leaving external weights on disk (checked, not read)."""
    path = Path(path)
    if not path.exists():
        raise NormfuseError(f"{path}: no such file")
    if not path.is_file():
        raise NormfuseError(f"{path}: not a regular file")
    data = path.read_bytes()
    if not data:
        raise NormfuseError(f"{path}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise NormfuseError(f"{path}: not an ONNX model or truncated ({error})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise NormfuseError(f"{path}: not an ONNX model (no graph or no opset import)")
    base_dir = path.resolve().parent
    for tensor in external_tensors(model):
        check_external_location(tensor, base_dir)
    return LoadedModel(model, base_dir)


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor in the model (subgraphs included) whose data lives in an external file."""
    for tensor in _graph_tensors(model.graph):
        if uses_external_data(tensor):
            yield tensor


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                yield from _graph_tensors(subgraph)


def check_external_location(tensor: onnx.TensorProto, base_dir: Path) -> Path:
    """Return the file holding `tensor`'s data, refusing paths that leave `base_dir`."""
    info = ExternalDataInfo(tensor)
    location = info.location
    where = f"tensor {tensor.name!r}: external data location {location!r}"
    if not location or os.path.isabs(location) or Path(location).is_absolute():
        raise NormfuseError(f"{where} is absolute or empty; only paths inside the model's folder")
    if ".." in Path(location).parts:
        raise NormfuseError(f"{where} contains '..'; only paths inside the model's folder")
    file = base_dir / location
    if file.is_symlink() or not file.resolve().is_relative_to(base_dir.resolve()):
        raise NormfuseError(f"{where} leaves the model's folder through a symbolic link")
    if not file.is_file():
        raise NormfuseError(f"{where}: file {file} is missing")
    length = info.length if info.length else _nbytes(tensor)
    if length is not None and info.offset + length > file.stat().st_size:
        raise NormfuseError(f"{where}: file {file} is shorter than the declared data")
    return file


def _nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes a dense tensor of this type and shape occupies, or None when not fixed-size."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except KeyError:
        return None
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * itemsize


def save(
    model: onnx.ModelProto, path: str | os.PathLike, base_dir: str | os.PathLike | None = None
) -> None:
    """Write `model` to `path` atomically; external data (in `base_dir`) is referenced in place
    when `path` is in `base_dir`, else streamed into `<path>.data` beside it."""
    path = Path(path)
    folder = path.resolve().parent
    if not folder.is_dir():
        raise NormfuseError(f"{path}: output folder {folder} does not exist")
    model = _copy_without_mutating(model)
    tensors = list(external_tensors(model))
    data_name = path.name + ".data"
    data_tmp = None
    try:
        if tensors:
            if base_dir is None:
                raise NormfuseError("model uses external data but its source folder is unknown")
            if Path(base_dir).resolve() == folder:
                for tensor in tensors:  # same folder: reference the data in place, write none
                    check_external_location(tensor, folder)
            else:
                data_tmp = _write_external_data(tensors, Path(base_dir), folder, data_name)
        model_tmp = _write_temp(folder, path.name, model.SerializeToString())
        if data_tmp is not None:
            os.replace(data_tmp, folder / data_name)
            data_tmp = None
        os.replace(model_tmp, path)
    finally:
        if data_tmp is not None:
            data_tmp.unlink(missing_ok=True)


def _copy_without_mutating(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _write_temp(folder: Path, name: str, payload: bytes) -> Path:
    """Write `payload` to a new temporary file in `folder`; the caller renames it."""
    handle, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _write_external_data(
    tensors: list[onnx.TensorProto], base_dir: Path, folder: Path, data_name: str
) -> Path:
    """Stream each tensor's bytes into one temporary data file and repoint the tensors at it."""
    handle, tmp = tempfile.mkstemp(prefix=f".{data_name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            for tensor in tensors:
                source = check_external_location(tensor, base_dir)
                info = ExternalDataInfo(tensor)
                length = info.length if info.length else _nbytes(tensor) or 0
                out.seek((out.tell() + _ALIGN - 1) // _ALIGN * _ALIGN)
                offset = out.tell()
                _copy_range(source, info.offset, length, out)
                _set_external_data(tensor, data_name, offset, length)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _copy_range(source: Path, offset: int, length: int, out) -> None:
    with source.open("rb") as file:
        file.seek(offset)
        left = length
        while left:
            chunk = file.read(min(left, _COPY_CHUNK))
            if not chunk:
                raise NormfuseError(f"{source}: external data ended early")
            out.write(chunk)
            left -= len(chunk)


def _set_external_data(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = str(value)
