"""Inputs for running a model: from its signature, `--dims`, and an optional `.npz` of overrides.

Symbolic dimensions take their value from `dims`; one the model declares as arithmetic over its
other input dims (optimum's `past_sequence_length + sequence_length`) is computed from them; a
batch-like one (named like `batch`, or the unnamed first axis) defaults to 1 and the default is
reported; any other undecided dimension is an error that names it and the inputs it sizes, and so
is a `dims` name no input has. Float inputs are drawn from a seeded
normal distribution; position ids (an integer input named like `position_ids`) count 0, 1, ... along
their last axis in every row, as a model sees them (rotary embeddings are exercised); other integer
inputs that index a `Gather` (token and token-type ids) are drawn inside the indexed table; masks
are all ones; booleans are true. `.npz` arrays replace generated ones, checked for name, dtype and
shape from each member's header before its data is inflated (pickles are never loaded). Inputs
are refused before allocation when they would take more than MAX_INPUT_BYTES.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from normfuse.errors import NormfuseError
from normfuse.ir.scopes import overridable
from normfuse.prove import dim_expressions

MAX_DIM = 2**31 - 1
MAX_SEED = 2**63 - 1
# The size of a symbolic dim that is not batch-like in a run that only proves a model runs.
PROBE_DIM = 3
# Generated and loaded inputs together may take this many bytes (checked before allocating).
MAX_INPUT_BYTES = 4 * 2**30
_BATCH_LIKE = re.compile(r"batch|^n$|^b$|^N$", re.IGNORECASE)
_POSITIONS = re.compile(r"position", re.IGNORECASE)
# Ops an index may pass through on its way to a Gather.
_INDEX_PASSTHROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}


def parse_dims(values: Iterable[str] | None) -> dict[str, int]:
    """`["batch=1", "sequence=128,past=0"]` -> `{"batch": 1, "sequence": 128, "past": 0}`; a
    name given twice with two values is refused (the same value twice is one)."""
    dims: dict[str, int] = {}
    for value in values or []:
        for item in value.split(","):
            name, sep, number = item.strip().partition("=")
            number = number.strip()
            if not sep or not name or not (number.isascii() and number.isdigit()):
                raise NormfuseError(f"--dims takes NAME=N (N >= 0), got {item.strip()!r}")
            if len(number) > 12 or int(number) > MAX_DIM:
                raise NormfuseError(f"--dims {name.strip()}: {number} is larger than {MAX_DIM}")
            name = name.strip()
            if name in dims and dims[name] != int(number):
                raise NormfuseError(
                    f"--dims {name} is given twice, as {dims[name]} and {int(number)}: give it once"
                )
            dims[name] = int(number)
    return dims


def input_hint(dims: dict[str, int], npz: str | None) -> str:
    """What to check when a model does not run on its inputs, naming what was given."""
    given = ",".join(f"{name}={size}" for name, size in dims.items())
    if given and npz:
        return f"check --dims {given} and --inputs {npz}"
    if npz:
        return f"check --inputs {npz}"
    if given:
        return f"check --dims {given}, or give --inputs FILE.npz"
    return "give --dims or --inputs"


@dataclass(frozen=True)
class ProbeSizes:
    """The sizes the output guard runs a model at: `batch` for a batch-like symbolic dim,
    `other` for any other; with `padded_masks`, integer and bool inputs named like a mask get
    padding (`padded_masks`)."""

    batch: int = 1
    other: int = PROBE_DIM
    padded_masks: bool = False


# The output guard's sizes: small (every rewrite); and wider, with padded masks, for a stage's
# output (a tool's fusion may mix batch rows or ignore a mask's padding: batch 1 and a mask of
# ones cannot show it).
SMALL_PROBE = ProbeSizes()
WIDE_PROBE = ProbeSizes(batch=2, other=5, padded_masks=True)


def probe_dims(model: onnx.ModelProto, probe: ProbeSizes = SMALL_PROBE) -> dict[str, int]:
    """Small sizes for the named symbolic dims of `model`'s inputs: `probe.batch` for a
    batch-like one, `probe.other` for any other, and a dim the model declares as arithmetic over
    the others (`past_sequence_length + sequence_length`) computed from theirs (the output
    guard's runs)."""
    sizes = {
        dim.dim_param: probe.batch if _BATCH_LIKE.search(dim.dim_param) else probe.other
        for info in graph_inputs(model)
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param and not dim.HasField("dim_value")
    }
    expressions = _expressions(model)
    plain = {name: size for name, size in sizes.items() if name not in expressions}
    derived = {
        name: expression.value(plain)
        for name, expression in expressions.items()
        if set(expression.names) <= set(plain)
    }
    return {**sizes, **{name: size for name, size in derived.items() if size > 0}}


def probe_dim_choices(
    model: onnx.ModelProto, probe: ProbeSizes = SMALL_PROBE
) -> list[dict[str, int]]:
    """The sizes the output guard tries, in order, until the original runs: `probe_dims`, then,
    where the model's outputs declare dims as arithmetic over its input dims (a with-past
    decoder's `s15 + s70` present length), the same with every input dim that no output names
    set to that declared size (the attention mask's own `s53`). A choice is a guess; only the
    original's run on it makes it inputs the model accepts."""
    first = probe_dims(model, probe)
    names = set(first)
    declared = {
        dim.dim_param
        for info in model.graph.output
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param
    }
    used = declared & names
    values = set()
    for text in sorted(declared - names):
        expression = dim_expressions.parse(text, names)
        if expression is not None:
            used |= set(expression.names)
            values.add(expression.value(first))
    free = {name for name in names if name not in used and not _BATCH_LIKE.search(name)}
    free -= set(_expressions(model))
    return [first] + [
        {**first, **dict.fromkeys(sorted(free), value)} for value in sorted(values) if free
    ]


def padded_masks(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`feeds` with every integer or bool input named like a mask (rank 2 or more) padded along
    its last axis: a third of each row's positions zero, at the end of even rows (right padding)
    and the start of odd ones (left padding), the rest one."""
    padded = dict(feeds)
    for name, array in feeds.items():
        if "mask" not in name.lower() or array.ndim < 2 or array.dtype.kind not in "biu":
            continue
        length = array.shape[-1]
        pad = length // 3 if length > 2 else 0
        rows = np.ones(array.shape, array.dtype).reshape(-1, length)
        for index in range(rows.shape[0]):
            zeros = slice(length - pad, length) if index % 2 == 0 else slice(0, pad)
            rows[index, zeros] = 0
        padded[name] = rows.reshape(array.shape)
    return padded


def make_inputs(
    model: onnx.ModelProto,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    npz: str | os.PathLike | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Feeds for every graph input of `model`, and notes on the defaults taken."""
    rng = np.random.default_rng(seed)
    plan = _plan_inputs(model, dims or {}, npz, read=True)
    tables = _gather_table_sizes(model)
    feeds = {
        name: _generate(name, plan.dtypes[name], shape, tables.get(name), rng, plan.notes)
        for name, shape in plan.shapes.items()
    }
    feeds.update(plan.overrides)
    return feeds, plan.notes


def check_inputs(
    model: onnx.ModelProto,
    dims: dict[str, int] | None = None,
    npz: str | os.PathLike | None = None,
) -> list[str]:
    """Every check `make_inputs` makes on `dims` and `npz` (names, dtypes, shapes from the
    members' headers, sizes), without generating or inflating an array: cheap enough to run
    before any work. Returns the notes."""
    return _plan_inputs(model, dims or {}, npz, read=False).notes


@dataclass
class _InputPlan:
    """The inputs to generate (shapes and dtypes), the `.npz` arrays read, and the notes."""

    shapes: dict[str, list[int]]
    dtypes: dict[str, np.dtype]
    overrides: dict[str, np.ndarray]
    notes: list[str]


def _plan_inputs(
    model: onnx.ModelProto, dims: dict[str, int], npz: str | os.PathLike | None, read: bool
) -> _InputPlan:
    """Check `dims` and `npz` against `model`; with `read`, the `.npz` arrays are read too."""
    notes = check_dims(model, dims)
    dims = _derived_dims(model, dims)
    signature = graph_inputs(model)
    dtypes = {info.name: _input_dtype(info) for info in signature}
    overrides: dict[str, np.ndarray] = {}
    given: dict[str, int] = {}  # the `.npz` members' sizes in bytes
    if npz:
        # Initializers that are also graph inputs are inputs too: a caller may feed them.
        names = overridable(model.graph)
        defaults = [
            info
            for info in model.graph.input
            if info.name in names and info.type.HasField("tensor_type")
        ]
        dtypes.update({info.name: _input_dtype(info) for info in defaults})
        overrides, given = _load_npz(npz, [*signature, *defaults], dtypes, dims, notes, read)
    _require_named_dims(model, [info for info in signature if info.name not in given], dims)
    shapes = {
        info.name: _concrete_shape(info, dims, notes)
        for info in signature
        if info.name not in given
    }
    _check_allocation(shapes, dtypes, sum(given.values()))
    return _InputPlan(shapes, dtypes, overrides, notes)


def _input_dtype(info: onnx.ValueInfoProto) -> np.dtype:
    if not info.type.HasField("tensor_type"):
        raise NormfuseError(f"input {info.name!r} is not a tensor; normfuse feeds tensors only")
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        raise NormfuseError(
            f"input {info.name!r} has an element type normfuse cannot feed"
        ) from None


def _check_allocation(
    shapes: dict[str, list[int]], dtypes: dict[str, np.dtype], loaded: int
) -> None:
    """Refuse, before allocating, inputs that would take more than MAX_INPUT_BYTES."""
    total = loaded
    for name, shape in shapes.items():
        total += math.prod(shape) * dtypes[name].itemsize
        if total > MAX_INPUT_BYTES:
            raise NormfuseError(
                f"input {name!r} of shape {shape}: the inputs would take more than "
                f"{MAX_INPUT_BYTES // 2**30} GiB; set smaller --dims"
            )


def input_shapes(
    model: onnx.ModelProto, dims: dict[str, int] | None = None
) -> tuple[dict[str, list[int]], list[str]]:
    """The concrete shape of every graph input for `dims` (as `make_inputs` feeds them), and notes
    on the defaults taken."""
    notes = check_dims(model, dims or {})
    dims = _derived_dims(model, dims or {})
    _require_named_dims(model, graph_inputs(model), dims)
    shapes = {info.name: _concrete_shape(info, dims, notes) for info in graph_inputs(model)}
    return shapes, notes


def _derived_dims(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, int]:
    """`dims` and every input dim `model` declares as an expression over its other input dims,
    computed where each of those is given (a batch-like one not given counts 1, as it is fed);
    a given value that disagrees with the model's own expression is refused."""
    sizes = dict(dims)
    for name, expression in _expressions(model).items():
        parts = {
            part: dims.get(part, 1 if _BATCH_LIKE.search(part) else None)
            for part in expression.names
        }
        if None in parts.values():
            continue  # `_require_named_dims` names what is missing
        value = expression.value(parts)
        given = ", ".join(f"{part}={size}" for part, size in parts.items())
        if not 0 <= value <= MAX_DIM:
            raise NormfuseError(f"dimension {name!r} would be {value} with {given}")
        if name in dims and dims[name] != value:
            raise NormfuseError(
                f"--dims {name}={dims[name]} contradicts the model: {name!r} is {value} with "
                f"{given}"
            )
        sizes[name] = value
    return sizes


def _expressions(model: onnx.ModelProto) -> dict[str, dim_expressions.Expression]:
    """The input dims of `model` that are expressions over its other input dims."""
    names = symbolic_dims(model)
    parsed = {name: dim_expressions.parse(name, names) for name in sorted(names)}
    return {name: expression for name, expression in parsed.items() if expression is not None}


def _require_named_dims(
    model: onnx.ModelProto, infos: list[onnx.ValueInfoProto], dims: dict[str, int]
) -> None:
    """Refuse, in one message, every named symbolic dim of `infos` that `dims` does not give and
    that is not batch-like (which defaults to 1), so that one run says all that is missing, with
    the inputs each one sizes; an expression dim asks for the dims it is computed from."""
    expressions = _expressions(model)
    places: dict[str, list[str]] = {}
    derived: dict[str, list[str]] = {}  # what an expression dim needs, and where it is
    follows: list[str] = []
    for info in infos:
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            name = dim.dim_param
            if not name or dim.HasField("dim_value") or name in dims:
                continue
            place = f"{info.name}[{axis}]"
            if name in expressions:
                follows.append(f"{place} is {name!r} and follows from them")
                for part in expressions[name].names:
                    derived.setdefault(part, []).append(place)
            elif not _BATCH_LIKE.search(name):
                places.setdefault(name, []).append(place)
    for part, found in derived.items():  # a part sized by no input but through an expression
        if part not in dims and part not in places and not _BATCH_LIKE.search(part):
            places[part] = found
    if not places:
        return
    where = "; ".join(f"{name}: {_first_places(found)}" for name, found in places.items())
    assign = ",".join(f"{name}=N" for name in places)
    if len(places) == 1:
        message = f"dimension {next(iter(places))!r} is not known; set it with --dims {assign}"
    else:
        quoted = ", ".join(repr(name) for name in places)
        message = f"dimensions {quoted} are not known; set them with --dims {assign}"
    hint = _mask_hint(model, places, dims)
    raise NormfuseError("; ".join([f"{message} ({where})", *dict.fromkeys(follows), *hint]))


def _first_places(places: list[str], shown: int = 2) -> str:
    more = len(places) - shown
    return ", ".join(places[:shown]) + (f" and {more} more" if more > 0 else "")


def _mask_hint(
    model: onnx.ModelProto, missing: dict[str, list[str]], dims: dict[str, int]
) -> list[str]:
    """A hint, from names only, for a missing dim that sizes nothing but attention masks, where
    the model's outputs declare a length over its input dims (a KV-cache decoder's presents):
    the mask usually spans that length (its value too, where `dims` gives its parts)."""
    masks = [name for name, places in missing.items() if all("mask" in p.lower() for p in places)]
    if not masks:
        return []
    names = symbolic_dims(model)
    for info in model.graph.output:
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            expression = dim_expressions.parse(dim.dim_param, names) if dim.dim_param else None
            if expression is None:
                continue
            value = ""
            if set(expression.names) <= set(dims):
                given = ", ".join(f"{part}={dims[part]}" for part in expression.names)
                value = f", {expression.value(dims)} with {given}"
            return [
                f"hint: {', '.join(masks)} sizes a mask; in a KV-cache decoder it usually spans "
                f"the past and new tokens, which output {info.name}[{axis}] declares as "
                f"{dim.dim_param!r}{value}"
            ]
    return []


def check_dims(model: onnx.ModelProto, dims: dict[str, int]) -> list[str]:
    """Refuse `dims` names that no graph input has where the model has symbolic dims (a typo
    would otherwise be ignored); a model with none gets a note instead, so that scripts can pass
    one --dims to many models. Returns the notes."""
    known = sorted(symbolic_dims(model))
    unknown = sorted(set(dims) - set(known))
    if unknown and not known:
        given = ",".join(f"{name}={dims[name]}" for name in unknown)
        return [f"--dims {given} ignored: the model's input shapes are all static"]
    if unknown:
        raise NormfuseError(
            f"--dims {', '.join(unknown)}: no input has such a dimension; "
            f"the model's symbolic dims are: {', '.join(known)}"
        )
    return []


def symbolic_dims(model: onnx.ModelProto) -> set[str]:
    """The names of the graph inputs' symbolic dimensions."""
    return {
        dim.dim_param
        for info in graph_inputs(model)
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param and not dim.HasField("dim_value")
    }


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are not initializers (what a caller must feed)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [info for info in model.graph.input if info.name not in initializers]


def _load_npz(
    path: str | os.PathLike,
    signature: list[onnx.ValueInfoProto],
    dtypes: dict[str, np.dtype],
    dims: dict[str, int],
    notes: list[str],
    read: bool = True,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The arrays of an `.npz` file (none unless `read`) and each member's size in bytes, each
    member's name, dtype, shape and size checked against the model (from its header) before its
    data is inflated, a dim that `dims` sizes otherwise noted in `notes`; pickles are never
    loaded."""
    if not Path(path).is_file():
        raise NormfuseError(f"--inputs {path}: no such file")
    infos = {info.name: info for info in signature}
    arrays, sizes = {}, {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {_member_name(member.filename): member for member in archive.infolist()}
            unknown = sorted(set(members) - set(infos))
            if unknown:
                raise NormfuseError(f"--inputs has arrays for unknown inputs: {', '.join(unknown)}")
            total = 0
            for name, member in members.items():
                with archive.open(member) as file:
                    shape, fortran, dtype = _npy_header(file)
                    _checked_override(infos[name], dtypes[name], dtype, shape, dims, notes)
                    size = math.prod(shape) * dtype.itemsize
                    total += size
                    if total > MAX_INPUT_BYTES or member.file_size > size + 2**16:
                        raise NormfuseError(f"--inputs {path}: member {name!r} is too large")
                    sizes[name] = size
                    if read:
                        arrays[name] = _read_data(file, shape, fortran, dtype, size)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise NormfuseError(f"--inputs {path}: not a readable .npz file ({error})") from None
    return arrays, sizes


def _member_name(filename: str) -> str:
    return filename[: -len(".npy")] if filename.endswith(".npy") else filename


def _npy_header(file) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(file)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(file)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    if dtype.hasobject:
        raise ValueError("object arrays (pickles) are not loaded")
    return shape, fortran, dtype


def _read_data(file, shape, fortran: bool, dtype: np.dtype, size: int) -> np.ndarray:
    data = file.read(size)
    if len(data) != size:
        raise ValueError("array data is truncated")
    return np.frombuffer(bytearray(data), dtype).reshape(shape, order="F" if fortran else "C")


def _checked_override(
    info: onnx.ValueInfoProto,
    dtype: np.dtype,
    found: np.dtype,
    shape: tuple[int, ...],
    dims: dict[str, int],
    notes: list[str],
) -> None:
    """An `.npz` array for `info`: its dtype, rank and static dims the model's. A symbolic dim
    that `--dims` sizes otherwise is noted (ADV10-02), not refused: ONNX Runtime does not hold
    one name to one size across inputs, and the array is fed as it is."""
    if found != dtype:
        raise NormfuseError(f"--inputs {info.name!r} is {found}, the model expects {dtype}")
    declared = info.type.tensor_type.shape.dim
    if len(declared) != len(shape) or any(
        dim.HasField("dim_value") and dim.dim_value != size
        for dim, size in zip(declared, shape, strict=True)
    ):
        expected = [
            dim.dim_value if dim.HasField("dim_value") else dim.dim_param or "?" for dim in declared
        ]
        raise NormfuseError(f"--inputs {info.name!r} has shape {list(shape)}, expected {expected}")
    for axis, (dim, size) in enumerate(zip(declared, shape, strict=True)):
        named = not dim.HasField("dim_value") and dim.dim_param in dims
        if named and dims[dim.dim_param] != size:
            notes.append(
                f"--inputs {info.name!r} has {dim.dim_param}={size} (axis {axis}) where --dims "
                f"gives {dim.dim_param}={dims[dim.dim_param]}: the array is fed as it is"
            )


def _concrete_shape(info: onnx.ValueInfoProto, dims: dict[str, int], notes: list[str]) -> list[int]:
    shape = []
    for axis, dim in enumerate(info.type.tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value)
        elif dim.dim_param in dims:
            shape.append(dims[dim.dim_param])
        elif _BATCH_LIKE.search(dim.dim_param or "") or (not dim.dim_param and axis == 0):
            label = dim.dim_param or f"axis 0 of {info.name!r}"
            note = f"{label} defaulted to 1 (set it with --dims)"
            if note not in notes:
                notes.append(note)
            shape.append(1)
        else:  # a named one is refused earlier, with every other (`_require_named_dims`)
            raise NormfuseError(
                f"input {info.name!r}: dimension unnamed axis {axis} is not known; set it with "
                "--dims NAME=N"
            )
    return shape


def _generate(name, dtype, shape, table: int | None, rng, notes: list[str]) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.normal(0.0, 1.0, shape).astype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype)
    if "mask" in name.lower():
        return np.ones(shape, dtype)
    if _POSITIONS.search(name) and shape:
        positions = np.arange(shape[-1]) % (table or max(shape[-1], 1))
        return np.broadcast_to(positions, shape).astype(dtype)
    if table is not None:
        return rng.integers(0, table, shape).astype(dtype)
    notes.append(f"{name!r}: integer input indexes no table; filled with zeros (use --inputs)")
    return np.zeros(shape, dtype)


def _gather_table_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """For graph inputs used (through casts and reshapes) as Gather indices: the table's size
    along the gathered axis, when the table is an initializer."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    sizes = {}
    for info in graph_inputs(model):
        size = _table_size(info.name, consumers, initializers, depth=4)
        if size is not None:
            sizes[info.name] = size
    return sizes


def _table_size(name: str, consumers, initializers, depth: int) -> int | None:
    found = []
    for node in consumers.get(name, []):
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
            table = initializers.get(node.input[0])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if table is not None:
                found.append(table.dims[axis])
        elif node.op_type in _INDEX_PASSTHROUGH and depth > 0 and node.input[0] == name:
            size = _table_size(node.output[0], consumers, initializers, depth - 1)
            if size is not None:
                found.append(size)
    return min(found) if found else None
