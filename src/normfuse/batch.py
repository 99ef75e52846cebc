"""Several models in one `optimize` run: which files, where each one's output goes, one summary
table and one combined JSON record.

A folder given as input stands for the `*.onnx` files directly in it (not recursive), sorted by
name. Outputs go into one existing folder under each input's file name; two inputs with the same
name, or an output that is its own input (without `--in-place`), are refused before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from normfuse.columns import aligned, wrap
from normfuse.errors import NormfuseError
from normfuse.report import Report

STATUS_WORDS = {0: "ok", 1: "check failed", 2: "error"}


def expand_inputs(paths: list[Path]) -> list[Path]:
    """Each file as given and each folder as its `*.onnx` files, sorted; a folder without any is
    an error."""
    models: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(item for item in path.glob("*.onnx") if item.is_file())
            if not found:
                raise NormfuseError(f"{path}: not a regular file (a folder with no *.onnx file)")
            models.extend(found)
        else:
            models.append(path)
    return models


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

    def as_dict(self) -> dict:
        """The JSON form: the model's report (or its error) with its status."""
        return {
            "model": str(self.model),
            "output": None if self.output is None else str(self.output),
            "status": self.status,
            **({"error": self.error} if self.error else {}),
            **({"report": self.report.as_dict()} if self.report else {}),
            **self.extra,
        }


def worst_status(outcomes: list[Outcome]) -> int:
    """The highest exit status of all models (0 when there are none)."""
    return max((outcome.status for outcome in outcomes), default=0)


def combined_record(outcomes: list[Outcome], version: str) -> dict:
    """One JSON record for the whole batch."""
    return {
        "normfuse_version": version,
        "status": worst_status(outcomes),
        "models": [outcome.as_dict() for outcome in outcomes],
    }


def summary_table(outcomes: list[Outcome], wide: bool = False) -> str:
    """One row per model: status, fused sites per kind, near-misses, validation, node counts, and
    where it went; then each model's error (notes are in the JSON record). Within 100 columns
    unless `wide`: models by file name (`short_names`), where the outputs went said once below
    when every one went the same way, and errors wrapped."""
    written = _written_line(outcomes) if not wide else None
    paths = [str(outcome.model) for outcome in outcomes]
    names, folder = (paths, "") if wide else short_names([outcome.model for outcome in outcomes])
    header = ["model", "status", "sites", "near-misses", "validation", "nodes", "output"]
    rows = [header[:-1] if written else header]
    for name, outcome in zip(names, outcomes, strict=True):
        cells = [name, STATUS_WORDS[outcome.status], *_report_cells(outcome.report)]
        rows.append(cells if written else [*cells, _output_cell(outcome)])
    lines = [f"models in {folder}"] if folder else []
    lines += aligned(rows, wide=wide)
    lines += [wrap(_error_line(outcome), wide) for outcome in outcomes if outcome.error]
    lines += [written] if written else []
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


def _output_cell(outcome: Outcome) -> str:
    """Where the model was written, or `not written`."""
    return str(outcome.output) if outcome.status == 0 and outcome.output else "not written"


def _written_line(outcomes: list[Outcome]) -> str | None:
    """One line for where every written model went when they all went the same way (replaced
    in place, or into one folder under its own file name); None otherwise."""
    written = [o for o in outcomes if o.status == 0 and o.output is not None]
    if not written:
        return "nothing written"
    if all(o.output == o.model for o in written):
        return "written in place"
    folders = {str(o.output.parent) for o in written}
    if len(folders) == 1 and all(o.output.name == o.model.name for o in written):
        return wrap(f"written to {folders.pop()}, each under its model's file name")
    return None


def _error_line(outcome: Outcome) -> str:
    """The model's error, naming the model once (most errors already start with its path)."""
    error, name = outcome.error or "", str(outcome.model)
    return error if error.startswith(f"{name}:") else f"{name}: {error}"
