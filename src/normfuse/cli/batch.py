"""Several models in one run: which files, where each one's output goes, one summary table and
one combined JSON record.

A folder given as input stands for the `*.onnx` files directly in it (not recursive), sorted by
name, but for a file another model of the folder reads as its external data (skipped, with a
note); every other file must load as an ONNX model. Outputs go into one existing folder under
each input's file name; two inputs with the same name, or an output that is its own input
(without `--in-place`), are refused before any work. A batch is written whole or not at all: its
outputs are committed only when every model succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from normfuse.driver.report import Report
from normfuse.errors import NormfuseError
from normfuse.io.columns import aligned, wrap
from normfuse.io.model_io import LoadedModel, external_files, load

STATUS_WORDS = {0: "ok", 1: "check failed", 2: "error"}


@dataclass(frozen=True)
class Found:
    """A model of a batch, loaded."""

    path: Path
    loaded: LoadedModel


def collect(paths: list[Path]) -> tuple[list[Found], list[str]]:
    """Each file as given and each folder as its `*.onnx` files, sorted, loaded; and a note for
    each folder file skipped as another model's external data. A file that does not load is an
    error, and so is a folder without any model."""
    found: list[Found] = []
    notes: list[str] = []
    for path in paths:
        if not path.is_dir():
            found.append(Found(path, load(path)))
            continue
        models, skipped = _folder_models(path)
        if not models:
            raise NormfuseError(f"{path}: not a regular file (a folder with no *.onnx model)")
        found.extend(models)
        notes.extend(skipped)
    return found, notes


def _folder_models(folder: Path) -> tuple[list[Found], list[str]]:
    """The models among a folder's `*.onnx` files, and a note for each file one of them reads as
    external data (such a file is not loaded as a model, whatever it holds)."""
    files = sorted(item for item in folder.glob("*.onnx") if item.is_file())
    results: dict[Path, LoadedModel | NormfuseError] = {}
    for file in files:
        try:
            results[file] = load(file)
        except NormfuseError as error:
            results[file] = error
    readers: dict[Path, Path] = {}
    for file, result in results.items():
        if isinstance(result, LoadedModel):
            for data in external_files(result.model, result.base_dir):
                readers.setdefault(data, file)
    models, notes = [], []
    for file, result in results.items():
        reader = readers.get(file.resolve())
        if reader is not None:
            notes.append(f"{file} skipped: it is the external data of {reader}")
        elif isinstance(result, NormfuseError):
            raise result
        else:
            models.append(Found(file, result))
    return models, notes


def is_batch(paths: list[Path]) -> bool:
    """Several models, or a folder of them: outputs go into a folder."""
    return len(paths) > 1 or any(path.is_dir() for path in paths)


def output_paths(models: list[Path], out_dir: Path | None, in_place: bool) -> list[Path]:
    """Where each model's result goes: the model itself with `in_place`, else `out_dir/NAME`."""
    if in_place:
        if out_dir is not None:
            raise NormfuseError("--in-place replaces each model; do not also give -o")
        return list(models)
    if out_dir is None:
        raise NormfuseError("several models: give -o OUTDIR (an existing folder) or --in-place")
    if not out_dir.is_dir():
        raise NormfuseError(f"-o {out_dir}: several models need an existing output folder")
    names: dict[str, Path] = {}
    for model in models:
        if model.name in names:
            raise NormfuseError(
                f"{names[model.name]} and {model} have the same name; their outputs would collide"
            )
        names[model.name] = model
    outputs = [out_dir / model.name for model in models]
    for model, output in zip(models, outputs, strict=True):
        if output.exists() and output.resolve() == model.resolve():
            raise NormfuseError(
                f"-o {out_dir} would overwrite {model}; use --in-place to replace it"
            )
    return outputs


@dataclass
class Outcome:
    """One model's result in a batch: its exit status and report, or the error that stopped it."""

    model: Path
    output: Path | None
    status: int
    report: Report | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self, written: bool | None = True) -> dict:
        """The JSON form: the model's report (or its error) with its status; `output` is null
        when nothing was written, and absent for a command that writes no model (None)."""
        output = None if self.output is None or not written else str(self.output)
        return {
            "model": str(self.model),
            **({} if written is None else {"output": output}),
            "status": self.status,
            **({"error": self.error} if self.error else {}),
            **({"report": self.report.as_dict()} if self.report else {}),
            **self.extra,
        }


@dataclass
class PairOutcome:
    """One manifest entry of `validate` or `bench`: its two models, and the command's record for
    them or the error that stopped it."""

    model: Path
    candidate: Path
    status: int
    record: dict | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        """The JSON form: the two models, the status, and the record or the error."""
        return {
            "model": str(self.model),
            "candidate": str(self.candidate),
            "status": self.status,
            **({"error": self.error} if self.error else {}),
            **(self.record or {}),
        }


def pairs_record(outcomes: list[PairOutcome], version: str) -> dict:
    """One JSON record for every pair of a manifest."""
    return {
        "normfuse_version": version,
        "status": worst_status(outcomes),
        "pairs": [outcome.as_dict() for outcome in outcomes],
    }


def pairs_table(outcomes: list[PairOutcome], words: dict[int, str], wide: bool = False) -> str:
    """One row per pair (model, candidate, the status in `words`), then each pair's error;
    within 100 columns unless `wide` (a long row continues on the next line, errors wrap)."""
    rows = [["model", "candidate", "result"]]
    rows += [[str(o.model), str(o.candidate), words[o.status]] for o in outcomes]
    errors = [f"{o.model} vs {o.candidate}: {o.error}" for o in outcomes if o.error]
    return "\n".join([*aligned(rows, wide=wide), *(wrap(line, wide) for line in errors)])


def worst_status(outcomes: list[Outcome] | list[PairOutcome]) -> int:
    """The highest exit status of all models (0 when there are none)."""
    return max((outcome.status for outcome in outcomes), default=0)


def combined_record(
    outcomes: list[Outcome],
    version: str,
    written: bool | None = True,
    notes: list[str] | None = None,
) -> dict:
    """One JSON record for the whole batch: whether its outputs were `written` (None: a command
    that writes no model, such as inspect), the folder files skipped (`notes`), and each model's
    record."""
    return {
        "normfuse_version": version,
        "status": worst_status(outcomes),
        **({} if written is None else {"written": written}),
        "notes": list(notes or []),
        "models": [outcome.as_dict(written) for outcome in outcomes],
    }


def summary_table(
    outcomes: list[Outcome],
    written: bool = True,
    notes: list[str] | None = None,
    wide: bool = False,
) -> str:
    """One row per model: status, fused sites per kind, near-misses, validation, node counts, and
    where it went (`not written` for every model unless the batch was `written`); then each
    model's error and the `notes` (each model's own notes are in the JSON record). Within 100
    columns unless `wide`: models by file name (`short_names`), where the outputs went said once
    below when every one went the same way, errors and notes wrapped."""
    went = None if wide else _written_line(outcomes, written)
    paths = [str(outcome.model) for outcome in outcomes]
    names, folder = (paths, "") if wide else short_names([outcome.model for outcome in outcomes])
    header = ["model", "status", "sites", "near-misses", "validation", "nodes", "output"]
    rows = [header[:-1] if went else header]
    for name, outcome in zip(names, outcomes, strict=True):
        cells = [name, STATUS_WORDS[outcome.status], *_report_cells(outcome.report)]
        rows.append(cells if went else [*cells, _output_cell(outcome, written)])
    lines = [f"models in {folder}"] if folder else []
    lines += aligned(rows, wide=wide)
    lines += [wrap(error_line(outcome), wide) for outcome in outcomes if outcome.error]
    lines += [went] if went else []
    lines += [wrap(f"note: {note}", wide) for note in notes or []]
    totals = {word: sum(o.status == code for o in outcomes) for code, word in STATUS_WORDS.items()}
    lines.append(
        f"{len(outcomes)} model(s): " + ", ".join(f"{n} {word}" for word, n in totals.items() if n)
    )
    return "\n".join(lines)


def short_names(models: list[Path]) -> tuple[list[str], str]:
    """The models' file names where no two are alike (else their paths as given), and the
    folder they all share, if one."""
    names = [model.name for model in models]
    if len(set(names)) < len(names):
        return [str(model) for model in models], ""
    folders = {str(model.parent) for model in models} - {"."}
    return names, folders.pop() if len(folders) == 1 else ""


def _report_cells(report: Report | None) -> list[str]:
    """Sites per kind, near-misses, validation and node counts (`-` without a report)."""
    if report is None:
        return ["-", "-", "-", "-"]
    validation = "-"
    if report.validation is not None:
        validation = "passed" if report.validation.passed else "FAILED"
    counts = {kind: n for kind, n in report.counts().items() if not kind.startswith("nodes")}
    sites = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none"
    nodes = f"{report.nodes_before} -> {report.nodes_after}"
    return [sites, str(len(report.near_misses)), validation, nodes]


def _output_cell(outcome: Outcome, written: bool) -> str:
    """Where the model was written, or `not written`."""
    went = written and outcome.status == 0 and outcome.output is not None
    return str(outcome.output) if went else "not written"


def _written_line(outcomes: list[Outcome], written: bool) -> str | None:
    """One line for where the models went when they all went the same way (nowhere, replaced
    in place, or into one folder under their own file names); None otherwise."""
    if not written:
        return "nothing written (a batch is written whole or not at all)"
    if all(o.output == o.model for o in outcomes):
        return "written in place"
    folders = {str(o.output.parent) for o in outcomes if o.output is not None}
    if len(folders) == 1 and all(
        o.output is not None and o.output.name == o.model.name for o in outcomes
    ):
        return wrap(f"written to {folders.pop()}, each under its model's file name")
    return None


def error_line(outcome: Outcome) -> str:
    """The model's error, naming the model once (most errors already start with its path)."""
    error, name = outcome.error or "", str(outcome.model)
    return error if error.startswith(f"{name}:") else f"{name}: {error}"
