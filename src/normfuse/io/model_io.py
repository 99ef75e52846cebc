"""Load models safely and save them atomically.

Loading never reads external weights into memory: tensors stored in external data keep their
`external_data` entries, each entry's location is checked to stay inside the model's folder, and
the file must hold the declared bytes; a file over protobuf's 2 GiB is refused before it is read.
Saving plans the model's destinations in an `outputs.OutputPlan` (`plan_save`, before any work),
stages them beside each destination (`stage_save`) and renames them into place on commit.
An output is self-contained: its external data goes into `<output>.data` beside it, wherever the
output goes (a model written beside its input must survive the input's deletion), as a
copy-on-write clone of the source file where the filesystem can make one (a reflink: no byte
copied, and neither file can change the other), else streamed in chunks. Never a hard link: a
later in-place write to either name would change both. The input's own file is referenced
instead only when asked (`reference=True`: `--in-place`, whose output is the input, or
`--reference-input-data`). Tensors normfuse creates (fused scales and biases) are small and
stored inline.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import uses_external_data

from normfuse.errors import NormfuseError
from normfuse.io.outputs import OutputPlan

MAX_PROTOBUF_BYTES = 2**31 - 1
_COPY_CHUNK = 16 * 1024 * 1024
_ALIGN = 4096
_FICLONE = 0x40049409  # Linux: ioctl(dest, FICLONE, source)


@dataclass(frozen=True)
class LoadedModel:
    """A model and the folder its external-data locations are relative to."""

    model: onnx.ModelProto
    base_dir: Path | None


def load(path: str | os.PathLike) -> LoadedModel:
    """Read an ONNX model from `path`, leaving external weights on disk (checked, not read)."""
    path = Path(path)
    data = _read_model_bytes(path)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise NormfuseError(f"{path}: not an ONNX model or truncated ({error})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise NormfuseError(f"{path}: not an ONNX model (no graph or no opset import)")
    base_dir = path.resolve().parent
    check_external_data(model, base_dir)
    return LoadedModel(model, base_dir)


def _read_model_bytes(path: Path) -> bytes:
    """The file's bytes, refusing what is not a regular file or larger than protobuf allows
    before reading anything."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise NormfuseError(f"{path}: no such file") from None
    except OSError as error:
        raise NormfuseError(f"{path}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise NormfuseError(f"{path}: not a regular file")
    if info.st_size == 0:
        raise NormfuseError(f"{path}: empty file, not an ONNX model")
    if info.st_size > MAX_PROTOBUF_BYTES:
        raise NormfuseError(
            f"{path}: {info.st_size} bytes; an ONNX protobuf file cannot exceed 2 GiB (larger "
            "models keep their weights in external data)"
        )
    try:
        with path.open("rb") as file:
            return file.read(MAX_PROTOBUF_BYTES + 1)
    except OSError as error:
        raise NormfuseError(f"{path}: cannot read ({error.strerror or error})") from None


def check_external_data(model: onnx.ModelProto, base_dir: Path | None) -> None:
    """Check every external-data entry of `model` against `base_dir` (see
    `check_external_location`); a model with external data needs a `base_dir`."""
    tensors = list(external_tensors(model))
    if tensors and base_dir is None:
        raise NormfuseError(
            f"tensor {tensors[0].name!r} is in external data; pass the folder it is in (base_dir)"
        )
    checked: CheckedFiles = {}
    for tensor in tensors:
        check_external_location(tensor, Path(base_dir), checked)


def external_files(model: onnx.ModelProto, base_dir: Path | None) -> set[Path]:
    """The files (resolved) holding `model`'s external data."""
    if base_dir is None:
        return set()
    checked: CheckedFiles = {}
    files = {check_external_location(t, base_dir, checked) for t in external_tensors(model)}
    return {file.resolve() for file in files}


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


# The keys of an external-data entry ONNX Runtime accepts (any other, even onnx's own `basepath`,
# makes it refuse the model: "model format error").
EXTERNAL_DATA_KEYS = ("location", "offset", "length", "checksum")


@dataclass(frozen=True)
class ExternalEntry:
    """One tensor's external-data entry, parsed and checked for form (not yet against files)."""

    location: str
    offset: int
    length: int | None


def external_entry(tensor: onnx.TensorProto) -> ExternalEntry:
    """Parse `tensor`'s external-data entry: only the keys ONNX Runtime reads, a text location
    without NUL, and offset and length, when given, as non-negative decimal integers."""
    values: dict[str, object] = {entry.key: entry.value for entry in tensor.external_data}
    name = tensor.name if isinstance(tensor.name, str) else repr(tensor.name)
    unknown = sorted(str(key) for key in values if key not in EXTERNAL_DATA_KEYS)
    if unknown:
        raise NormfuseError(
            f"tensor {name!r}: external data key {unknown[0]!r} is not one ONNX Runtime reads "
            f"({', '.join(EXTERNAL_DATA_KEYS)}); it refuses the model"
        )
    location = values.get("location", "")
    if not isinstance(location, str) or "\0" in location:
        raise NormfuseError(
            f"tensor {name!r}: external data location {location!r} is not a valid file name"
        )
    numbers: dict[str, int | None] = {}
    for key in ("offset", "length"):
        text = values.get(key)
        if text is None:
            numbers[key] = None
        elif isinstance(text, str) and text.isascii() and text.isdigit() and len(text) < 20:
            numbers[key] = int(text)
        else:
            raise NormfuseError(
                f"tensor {name!r}: external data {key} {text!r} is not a non-negative integer"
            )
    return ExternalEntry(location, numbers["offset"] or 0, numbers["length"])


# Files already checked in one pass over a model's tensors: (location, folder) -> (file, size).
CheckedFiles = dict[tuple[str, Path], tuple[Path, int]]


def check_external_location(
    tensor: onnx.TensorProto, base_dir: Path, checked: CheckedFiles | None = None
) -> Path:
    """Return the file holding `tensor`'s data, refusing paths that leave `base_dir` and data
    past the file's end; `checked` remembers the files a loop over tensors has checked."""
    entry = external_entry(tensor)
    location = entry.location
    where = f"tensor {tensor.name!r}: external data location {location!r}"
    key = (location, base_dir)
    if checked is None or key not in checked:
        file, size = _checked_file(location, base_dir, where)
        if checked is not None:
            checked[key] = (file, size)
    else:
        file, size = checked[key]
    length = entry.length if entry.length else _nbytes(tensor)
    if length is not None and entry.offset + length > size:
        raise NormfuseError(f"{where}: file {file} is shorter than the declared data")
    return file


def _checked_file(location: str, base_dir: Path, where: str) -> tuple[Path, int]:
    """The file at `location` in `base_dir` and its size, refused where the path is absolute,
    leaves the folder (`..`, a symbolic link), or the file is missing or unreadable."""
    if not location or os.path.isabs(location) or Path(location).is_absolute():
        raise NormfuseError(f"{where} is absolute or empty; only paths inside the model's folder")
    if ".." in Path(location).parts:
        raise NormfuseError(f"{where} contains '..'; only paths inside the model's folder")
    file = base_dir / location
    try:
        inside = file.resolve().is_relative_to(base_dir.resolve())
        if not inside:
            raise NormfuseError(f"{where} leaves the model's folder through a symbolic link")
        if any(
            prefix.is_symlink()
            for prefix in [file, *file.parents]
            if prefix != base_dir and prefix.is_relative_to(base_dir)
        ):
            raise NormfuseError(f"{where} passes through a symbolic link (ONNX refuses those)")
        if not file.is_file():
            raise NormfuseError(f"{where}: file {file} is missing")
        size = file.stat().st_size
        os.close(os.open(file, os.O_RDONLY))  # readable by this user
    except PermissionError:
        raise NormfuseError(f"{where}: cannot read {file} (permission denied)") from None
    except (OSError, RuntimeError) as error:
        raise NormfuseError(f"{where}: {getattr(error, 'strerror', None) or error}") from None
    return file, size


def external_length(tensor: onnx.TensorProto) -> int:
    """The bytes an external tensor occupies in its file: its declared `length`, else its
    dense size (0 where its type has no fixed size)."""
    entry = external_entry(tensor)
    return entry.length if entry.length else _nbytes(tensor) or 0


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
    model: onnx.ModelProto,
    path: str | os.PathLike,
    base_dir: str | os.PathLike | None = None,
    reference: bool = False,
) -> str | None:
    """Write `model` to `path` atomically; external data (in `base_dir`) goes into
    `<path>.data` (or, with `reference`, is read from where it is). The model's own
    external-data files are never overwritten (see `normfuse.io.outputs`). Returns where the
    weights went (`stage_save`)."""
    folder = None if base_dir is None else Path(base_dir).resolve()
    with OutputPlan(external_files(model, folder)) as plan:
        destination = plan_save(plan, Path(path), model, folder, reference=reference)
        weights = stage_save(plan, model, destination, folder, reference=reference)
        plan.commit()
    return weights


def plan_save(
    plan: OutputPlan,
    path: Path,
    model: onnx.ModelProto,
    base_dir: Path | None,
    label: str = "-o",
    in_place: bool = False,
    reference: bool = False,
) -> Path:
    """Reserve `path` in `plan` for `model` (and `<path>.data` when its external data goes
    there); returns the destination to pass to `stage_save`."""
    destination = plan.add_in_place(path, label) if in_place else plan.add(path, label)
    assert destination is not None
    data = _data_destination(model, destination, reference or in_place)
    if data is not None:
        plan.add(data, f"{label} data")  # its own checks first: the input's files, kinds
        _check_data_is_ours(destination, data, label)
    return destination


def _check_data_is_ours(destination: Path, data: Path, label: str) -> None:
    """Refuse to replace an existing `<OUT>.data` that `OUT` does not read itself (another
    model's weights, or an unrelated file): replacing it would silently change whatever reads
    it. A previous output of the same path (OUT reading OUT.data) is replaced with it."""
    if not os.path.lexists(data):
        return
    try:
        previous = onnx.load(str(destination), load_external_data=False)
        ours = any(
            external_entry(tensor).location == data.name for tensor in external_tensors(previous)
        )
    except Exception:  # no model at OUT, or not one that reads OUT.data
        ours = False
    if not ours:
        raise NormfuseError(
            f"{label} {destination}: {data.name} already exists and is not {destination.name}'s "
            "own weights (another model may read it); remove it or choose another output"
        )


def stage_save(
    plan: OutputPlan,
    model: onnx.ModelProto,
    destination: Path,
    base_dir: Path | None,
    reference: bool = False,
) -> str | None:
    """Stage `model` (reserved with `plan_save`) and its external data; `plan.commit()` writes.
    Returns one line saying where the weights went (None: the model holds them all)."""
    model = _copy_without_mutating(model)
    tensors = list(external_tensors(model))
    data = _data_destination(model, destination, reference)
    if tensors and base_dir is None:
        raise NormfuseError("model uses external data but its source folder is unknown")
    said = None
    if tensors and data is None:
        checked: CheckedFiles = {}
        sources = sorted({str(check_external_location(t, base_dir, checked)) for t in tensors})
        if base_dir.resolve() != destination.parent.resolve():
            raise NormfuseError(
                f"{destination}: the weights it would read ({', '.join(sources)}) are in "
                "another folder; write the output beside the input to reference them"
            )
        for tensor in tensors:  # the same folder: reference the data in place, write none
            check_external_location(tensor, destination.parent, checked)
        said = f"weights: read from the input's {', '.join(sources)} (not copied)"
    elif data is not None:
        assert base_dir is not None
        how: list[str] = []
        plan.stage(
            data, lambda out: how.append(_write_external_data(tensors, base_dir, out, data.name))
        )
        said = f"weights: {data}"
    try:
        payload = model.SerializeToString()
    except ValueError as error:  # over protobuf's 2 GiB
        raise NormfuseError(f"cannot write {destination}: {error}") from None
    plan.stage_bytes(destination, payload)
    if data is not None and how:
        said = f"{said} ({how[0]})"
    return said


def _data_destination(model: onnx.ModelProto, destination: Path, reference: bool) -> Path | None:
    """Where `model`'s external data goes, or None when it is referenced where it is (asked
    for) or there is none."""
    if reference or next(external_tensors(model), None) is None:
        return None
    return destination.with_name(destination.name + ".data")


def _copy_without_mutating(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _write_external_data(
    tensors: list[onnx.TensorProto], base_dir: Path, out: BinaryIO, data_name: str
) -> str:
    """Write each tensor's bytes into `out` and repoint the tensors at `data_name`: a clone of
    the one source file where they all come from one and the filesystem can clone it, else
    streamed. Returns how ("cloned from ...", "N bytes copied")."""
    checked: CheckedFiles = {}
    sources = {check_external_location(tensor, base_dir, checked) for tensor in tensors}
    if len(sources) == 1:
        source = sources.pop()
        if _clone(source, out):
            for tensor in tensors:
                offset = external_entry(tensor).offset
                _set_external_data(tensor, data_name, offset, external_length(tensor))
            return f"a copy-on-write clone of {source.name}, no byte copied"
    for tensor in tensors:
        source = check_external_location(tensor, base_dir, checked)
        entry = external_entry(tensor)
        length = external_length(tensor)
        out.seek((out.tell() + _ALIGN - 1) // _ALIGN * _ALIGN)
        offset = out.tell()
        _copy_range(source, entry.offset, length, out)
        _set_external_data(tensor, data_name, offset, length)
    out.truncate()  # the file ends at its last tensor, even where that ends in a hole
    return f"{out.tell()} bytes copied"


def _clone(source: Path, out: BinaryIO) -> bool:
    """Make `out` a copy-on-write clone of `source` (Linux FICLONE: btrfs, XFS, overlay on
    them); False where the filesystem cannot, and `out` is left as it was (empty)."""
    try:
        import fcntl

        with source.open("rb") as file:
            fcntl.ioctl(out.fileno(), _FICLONE, file.fileno())
    except (OSError, ImportError, ValueError, io.UnsupportedOperation):
        return False
    out.seek(0, os.SEEK_END)
    return True


def _copy_range(source: Path, offset: int, length: int, out: BinaryIO) -> None:
    """Copy `length` bytes of `source` from `offset` to `out`'s position: in the kernel
    (`copy_file_range`, which clones where the filesystem can), only the ranges that hold data
    (`SEEK_DATA`/`SEEK_HOLE`: a sparse file's holes stay holes, and read as zeros)."""
    out.flush()
    start = out.tell()
    with source.open("rb") as file:  # its size was checked (`check_external_location`)
        for begin, end in _data_ranges(file.fileno(), offset, offset + length):
            _copy_bytes(file, begin, out, start + begin - offset, end - begin)
    out.seek(start + length)


def _data_ranges(fd: int, begin: int, end: int) -> Iterator[tuple[int, int]]:
    """The ranges of [begin, end) of file `fd` that hold data (all of it where the filesystem
    cannot tell holes)."""
    position = begin
    while position < end:
        try:
            data = os.lseek(fd, position, os.SEEK_DATA)
            hole = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError as error:
            if error.errno == errno.ENXIO:  # only a hole from here on
                return
            yield position, end  # holes unknown here: copy everything
            return
        if data >= end:
            return
        yield data, min(hole, end)
        position = hole


def _copy_bytes(source: BinaryIO, begin: int, out: BinaryIO, at: int, length: int) -> None:
    """`length` bytes of `source` at `begin` written to `out` at `at`: in the kernel where it
    can, else (another filesystem, no such call) read and written."""
    done, kernel = 0, hasattr(os, "copy_file_range")
    while done < length:
        count = 0
        if kernel:
            try:
                count = os.copy_file_range(
                    source.fileno(), out.fileno(), length - done, begin + done, at + done
                )
            except OSError:
                kernel = False
        if not kernel:
            source.seek(begin + done)
            out.seek(at + done)
            count = out.write(source.read(min(length - done, _COPY_CHUNK)))
            out.flush()
        if count == 0:
            raise NormfuseError(f"{source.name}: external data ended early")
        done += count


def _set_external_data(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = str(value)
