"""`--manifest FILE`: the models of one `optimize`, `validate` or `bench` run, each with its own
settings, read from JSON (`.json`) or TOML (`.toml`, Python 3.11+) and checked whole before any
work.

The file holds one key, `models`: a list of tables, each naming a `model` (a path relative to
the manifest's folder) and any of `KEYS`. Every other key is the command-line option of that
name, for that model only: the command line gives the defaults, an entry's value replaces them
(`dims` is merged name by name, the entry's names winning). A command uses the keys it needs
and leaves the others (`passes` means nothing to `bench`, `candidate` nothing to `optimize`), so
one manifest serves a whole pipeline. Unknown keys, wrong types, missing files and duplicate
keys are each refused with one line naming the file, the entry and the key.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from normfuse.errors import NormfuseError
from normfuse.prove.inputs import MAX_DIM, MAX_SEED, parse_dims

MAX_MANIFEST_BYTES = 16 * 2**20
TARGETS = ("ort", "onnx")
# Each key an entry may have, and what it is (for errors and the docs).
KEYS = {
    "model": "a path to an ONNX model (required)",
    "candidate": "a path to the model validate or bench compares with `model`",
    "dims": "a table of symbolic dimension sizes (NAME = N)",
    "inputs": "a path to an .npz of input arrays",
    "seed": "an integer, the seed for generated inputs",
    "passes": "a list of pass names, or one comma-separated string",
    "target": "ort or onnx",
    "max_opset": "an integer, the highest opset the output may be raised to",
    "atol": "a number >= 0, the absolute tolerance",
    "rtol": "a number >= 0, the relative tolerance",
}
FILE_KEYS = ("model", "candidate", "inputs")


@dataclass(frozen=True)
class Entry:
    """One model of a manifest: its paths, dims and the options it sets (by argparse name)."""

    label: str
    model: Path
    candidate: Path | None = None
    dims: dict[str, int] = field(default_factory=dict)
    options: dict[str, object] = field(default_factory=dict)


def read(path: Path, pairs: bool = False) -> list[Entry]:
    """The entries of the manifest at `path`, every one checked (files included; each
    `candidate` only when the command compares `pairs`)."""
    where = f"--manifest {path}"
    data = _parse(path, where)
    if not isinstance(data, dict) or set(data) != {"models"}:
        found = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
        raise NormfuseError(f"{where}: give one key, models (a list of tables); found {found}")
    models = data["models"]
    if not isinstance(models, list) or not models:
        raise NormfuseError(f"{where}: models must be a non-empty list of tables")
    folder = path.parent
    return [
        _entry(item, folder, f"{where}: entry {number}", pairs)
        for number, item in enumerate(models, 1)
    ]


def apply(args: argparse.Namespace, entry: Entry, model_dims: set[str]) -> argparse.Namespace:
    """One model's options: the command line's, `--dims` cut to the names the model has (all of
    them for a model without symbolic dims, which notes that it ignores them), under the entry's
    settings (its `dims` merged name by name over those)."""
    given = parse_dims(args.dims)
    dims = {name: size for name, size in given.items() if name in model_dims or not model_dims}
    dims.update(entry.dims)
    listed = [f"{name}={size}" for name, size in dims.items()]
    return argparse.Namespace(**{**vars(args), **entry.options, "dims": listed or None})


def _parse(path: Path, where: str) -> object:
    """The manifest's content, by its suffix; any failure is one line."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise NormfuseError(f"{where}: give a .json or .toml file")
    if not path.is_file():
        raise NormfuseError(f"{where}: no such file")
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise NormfuseError(f"{where}: larger than {MAX_MANIFEST_BYTES // 2**20} MiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise NormfuseError(f"{where}: cannot read ({reason})") from None
    if suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as error:
            raise NormfuseError(f"{where}: not valid JSON ({error})") from None
        except ValueError as error:  # a duplicate key
            raise NormfuseError(f"{where}: {error}") from None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise NormfuseError(f"{where}: TOML needs Python 3.11 or later; give JSON") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise NormfuseError(f"{where}: not valid TOML ({error})") from None


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"key {twice[0]!r} given twice in one table")
    return dict(pairs)


def _entry(item: object, folder: Path, where: str, pairs: bool) -> Entry:
    if not isinstance(item, dict):
        raise NormfuseError(f"{where}: must be a table, got {type(item).__name__}")
    model = item.get("model")
    if isinstance(model, str) and model:
        where = f"{where} ({model})"
    unknown = sorted(set(item) - set(KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], KEYS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise NormfuseError(f"{where}: unknown key {unknown[0]!r}{hint} (keys: {', '.join(KEYS)})")
    if "model" not in item:
        raise NormfuseError(f"{where}: no model (the path of the model this entry is for)")
    options = {
        key: check(item[key], f"{where}: {key}") for key, check in _CHECKS.items() if key in item
    }
    files = {key: folder / str(options.pop(key)) for key in FILE_KEYS if key in options}
    for key, file in files.items():
        if (key != "candidate" or pairs) and not file.is_file():
            problem = "not a regular file" if file.exists() else "no such file"
            raise NormfuseError(f"{where}: {key} {file}: {problem}")
    if "inputs" in files:
        options["inputs"] = files["inputs"]
    dims = options.pop("dims", {})
    assert isinstance(dims, dict)
    return Entry(where, files["model"], files.get("candidate"), dims, options)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise NormfuseError(f"{where}: must be a non-empty string, got {value!r}")
    return value


def _integer(value: object, where: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise NormfuseError(f"{where}: must be an integer from {low} to {high}, got {value!r}")
    return value


def _tolerance(value: object, where: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise NormfuseError(f"{where}: must be a finite number >= 0, got {value!r}")
    return float(value)


def _dims(value: object, where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise NormfuseError(f"{where}: must be a table of NAME = N, got {value!r}")
    for name, size in value.items():
        if not name or name != name.strip() or "," in name or "=" in name:
            raise NormfuseError(f"{where}: {name!r} is not a dimension name")
        _integer(size, f"{where}: {name}", 0, MAX_DIM)
    return dict(value)


def _passes(value: object, where: str) -> str:
    from normfuse.passes import PASS_NAMES

    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise NormfuseError(f"{where}: must be a list of pass names, got {value!r}")
    names = [name.strip() for name in names if name.strip()]
    unknown = [name for name in names if name not in PASS_NAMES]
    if unknown or not names:
        raise NormfuseError(
            f"{where}: {'unknown pass ' + unknown[0] if unknown else 'names no pass'} "
            f"(passes: {', '.join(PASS_NAMES)})"
        )
    return ",".join(names)


def _target(value: object, where: str) -> str:
    if value not in TARGETS:
        raise NormfuseError(f"{where}: must be one of {', '.join(TARGETS)}, got {value!r}")
    return str(value)


_CHECKS: dict[str, Callable[[object, str], object]] = {
    "model": _text,
    "candidate": _text,
    "inputs": _text,
    "dims": _dims,
    "seed": lambda value, where: _integer(value, where, 0, MAX_SEED),
    "passes": _passes,
    "target": _target,
    "max_opset": lambda value, where: _integer(value, where, 1, MAX_DIM),
    "atol": _tolerance,
    "rtol": _tolerance,
}
