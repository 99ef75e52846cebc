"""What the commands share: loading models, planning and committing outputs, input and timing
options, and one-line errors for a batch's models."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import normfuse
from normfuse.cli import manifest
from normfuse.cli.parser import EXIT_USAGE, MAX_RUNS, MAX_THREADS, MAX_TIME_BUDGET
from normfuse.errors import NormfuseError, runtime_message
from normfuse.io.model_io import LoadedModel, external_files
from normfuse.io.outputs import STDOUT, OutputPlan
from normfuse.measure import defaults
from normfuse.measure.bench import BenchOptions
from normfuse.measure.plot import require_matplotlib
from normfuse.prove.inputs import MAX_SEED, check_inputs, input_hint, parse_dims
from normfuse.prove.sessions import parse_providers

T = TypeVar("T")


ORT_ERRORS = tuple(
    getattr(ort_state, name)
    for name in ("Fail", "InvalidArgument", "RuntimeException", "NotImplemented", "EPFail")
    if hasattr(ort_state, name)
)


def input_hint_for(args: argparse.Namespace) -> str:
    """`inputs.input_hint` for the --dims and --inputs this command was given."""
    try:
        dims = parse_dims(getattr(args, "dims", None))
    except NormfuseError:
        dims = {}
    npz = getattr(args, "inputs", None)
    return input_hint(dims, None if npz is None else str(npz))


def validation_options(args: argparse.Namespace) -> normfuse.ValidationOptions:
    for name in ("atol", "rtol"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise NormfuseError(f"--{name} must be a finite number >= 0, got {value}")
    return normfuse.ValidationOptions(
        providers=tuple(parse_providers(args.providers)),
        dims=parse_dims(args.dims),
        seed=seed(args),
        npz=None if args.inputs is None else str(args.inputs),
        atol=args.atol,
        rtol=args.rtol,
    )


def seed(args: argparse.Namespace) -> int:
    if args.seed is None:
        return 0
    if not 0 <= args.seed <= MAX_SEED:
        raise NormfuseError(f"--seed must be between 0 and {MAX_SEED}, got {args.seed}")
    return args.seed


def load(path: Path) -> tuple[LoadedModel, set[Path]]:
    """A model and the files it was read from (never to be written)."""
    loaded = normfuse.io.model_io.load(path)
    return loaded, {path, *external_files(loaded.model, loaded.base_dir)}


def entry_load(entry: manifest.Entry, path: Path) -> tuple[LoadedModel, set[Path]]:
    """`load`, its error naming the manifest entry."""
    try:
        return load(path)
    except NormfuseError as error:
        raise NormfuseError(f"{entry.label}: {error}") from None


def attempt(own: argparse.Namespace, work: Callable[..., T], *arguments: object) -> T | str:
    """`work(*arguments)`, or the one-line error that stopped it (an ONNX Runtime failure with
    the hint for the inputs in `own`)."""
    try:
        return work(*arguments)
    except NormfuseError as error:
        return str(error)
    except ORT_ERRORS as error:
        return f"ONNX Runtime failed ({runtime_message(error)}); {input_hint_for(own)}"


def finish_batch(
    plan: OutputPlan, given: str | None, report_path: Path | None, record: dict
) -> None:
    """Print or stage the batch's record and commit, unless a model stopped with an error: then
    nothing is written (the record still goes to standard output with `--report -`) and the
    command fails with one line."""
    text = json.dumps(record, indent=2) + "\n"
    if record["status"] != EXIT_USAGE:
        stage_text(plan, given, report_path, text)
        commit(plan)
        return
    if report_path is None:
        stage_text(plan, given, None, text)
    noun = "models" if "models" in record else "pairs"
    failed = sum(outcome["status"] == EXIT_USAGE for outcome in record[noun])
    raise NormfuseError(
        f"{failed} of {len(record[noun])} {noun} stopped with an error; nothing written (a "
        "batch is written whole or not at all)"
    )


class Discard:
    """A stream that drops what is printed to it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def human_stream(args: argparse.Namespace):
    """stdout for tables, unless the JSON record goes there: then nothing else is printed (the
    record holds it all), so stdout is the JSON alone and stderr stays quiet."""
    return Discard() if getattr(args, "report", None) == STDOUT else sys.stdout


def plan(
    plan: OutputPlan, path: str | Path | None, label: str, allow_stdout: bool = False
) -> Path | None:
    return None if path is None else plan.add(path, label, allow_stdout)


def plan_plot(plan: OutputPlan, args: argparse.Namespace) -> Path | None:
    """The `--plot` destination, checked (matplotlib and the image format too)."""
    plot = getattr(args, "plot", None)
    if plot is None:
        return None
    require_matplotlib()
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if plot.suffix.lstrip(".").lower() not in formats:
        raise NormfuseError(
            f"--plot {plot}: give a file name ending in one of .{', .'.join(sorted(formats))}"
        )
    return plan.add(plot, "--plot")


def stage_text(plan: OutputPlan, given: str | None, path: Path | None, text: str) -> None:
    """Stage `text` for `path`, or print it when the user gave `-` (standard output)."""
    if path is not None:
        plan.stage_bytes(path, text.encode())
    elif given is not None:
        print(text, end="" if text.endswith("\n") else "\n")


def commit(plan: OutputPlan) -> list[Path]:
    """Write everything staged, once standard output has taken what was printed."""
    sys.stdout.flush()
    return plan.commit()


def said_after_commit(text: str, stream) -> None:
    """Print a line after the commit: the work is done and written, so a reader that has gone
    (`| head`) changes nothing; the rest of what would go to standard output is dropped."""
    try:
        print(text, file=stream)
        stream.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def bench_options(args: argparse.Namespace) -> BenchOptions:
    warmup = defaults.WARMUP if args.warmup is None else args.warmup
    runs = defaults.RUNS if args.runs is None else args.runs
    if not (0 <= warmup <= MAX_RUNS and 2 <= runs <= MAX_RUNS):
        raise NormfuseError(f"--warmup must be 0 to {MAX_RUNS} and --runs 2 to {MAX_RUNS}")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise NormfuseError(f"--threads must be 1 to {MAX_THREADS}, got {args.threads}")
    sessions = min(defaults.SESSION_SETS, runs) if args.sessions is None else args.sessions
    if not 1 <= sessions <= runs:
        raise NormfuseError(f"--sessions must be 1 to --runs ({runs}), got {sessions}")
    budget = getattr(args, "time_budget", None)
    if budget is not None and not 0 < budget <= MAX_TIME_BUDGET:
        raise NormfuseError(
            f"--time-budget must be more than 0 and at most {MAX_TIME_BUDGET:g} seconds, "
            f"got {budget:g}"
        )
    return BenchOptions(
        providers=tuple(parse_providers(args.providers)),
        levels=tuple(dict.fromkeys(getattr(args, "level", None) or ["all"])),
        warmup=warmup,
        runs=runs,
        threads=args.threads,
        dims=parse_dims(args.dims),
        seed=seed(args),
        npz=None if args.inputs is None else str(args.inputs),
        progress=sys.stderr.isatty() and not args.quiet,
        sessions=sessions,
        time_budget=budget,
    )


# One pair of a manifest: (options, model, candidate, their loaded forms, stream) -> (status,
# the record for the pair).
PairRun = Callable[
    [argparse.Namespace, Path, Path, LoadedModel, LoadedModel, object], tuple[int, dict]
]


def check_entry_inputs(entry: manifest.Entry, loaded: LoadedModel, own: argparse.Namespace) -> None:
    """A model's dims and inputs checked against it (no array made), the error naming its
    entry."""
    try:
        check_inputs(loaded.model, parse_dims(own.dims), own.inputs)
    except NormfuseError as error:
        raise NormfuseError(f"{entry.label}: {error}") from None


def files_read(args: argparse.Namespace, owns: Iterable[argparse.Namespace] = ()) -> set[Path]:
    """The files a command reads besides its models, never to be written: the manifest and
    every `--inputs` archive (the command line's and each model's own, `owns`)."""
    found = [getattr(args, "manifest", None), getattr(args, "inputs", None)]
    found += [getattr(own, "inputs", None) for own in owns]
    return {Path(path) for path in found if path is not None}
