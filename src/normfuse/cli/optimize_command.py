"""`normfuse optimize`: one model or a batch (several models, a folder, a manifest), each
optimised, optionally validated, timed and tuned, and written whole or not at all."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import onnx

import normfuse
from normfuse.cli import batch, manifest, shared
from normfuse.cli.parser import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, TIMING_OPTIONS
from normfuse.driver.report import fused_norm_nodes
from normfuse.errors import NormfuseError, printable
from normfuse.io.columns import wrap
from normfuse.io.model_io import LoadedModel, external_files, plan_save, stage_save
from normfuse.io.outputs import STDOUT, OutputPlan
from normfuse.measure.bench import BenchModel
from normfuse.measure.bench import run as run_bench
from normfuse.measure.plot import plot_ratios
from normfuse.measure.tune import tune
from normfuse.prove.inputs import check_inputs, parse_dims, symbolic_dims
from normfuse.prove.sessions import parse_providers
from normfuse.stages import ort_transformers as ort_stage


def optimize(args: argparse.Namespace) -> int:
    _check_optimize_options(args)
    if args.manifest is None and not batch.is_batch(args.models):
        return _optimize_single(args, args.models[0])
    return _optimize_batch(args)


def _optimize_single(args: argparse.Namespace, model: Path) -> int:
    destination = _output_path(args, model)
    loaded, files = shared.load(model)
    # MODEL itself may be replaced with --in-place, its external data never
    protected = external_files(loaded.model, loaded.base_dir) if args.in_place else files
    stream = shared.human_stream(args)
    with OutputPlan(protected | shared.files_read(args)) as plan:
        planned = plan_save(
            plan,
            destination,
            loaded.model,
            loaded.base_dir,
            "--in-place" if args.in_place else "-o",
            args.in_place,
            reference=args.reference_input_data,
        )
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        plot_path = shared.plan_plot(plan, args) if args.bench else None
        if args.bench or args.tune_for:
            shared.bench_options(args)  # bad timing options fail before any work
        outcome = _optimize_one(args, model, loaded, planned, plan, stream, plot_path)
        record = outcome.report.as_dict() if outcome.report else {}
        text = json.dumps({**record, **outcome.extra}, indent=2) + "\n"
        shared.stage_text(plan, args.report, report_path, text)
        shared.commit(plan)
    if outcome.status == EXIT_OK:
        shared.said_after_commit(printable(f"wrote {planned}"), stream)
    return outcome.status


def _optimize_batch(args: argparse.Namespace) -> int:
    """Several models (or a manifest's): everything is checked before any work, every model is
    processed, and the outputs are committed only when every model succeeded (the report also
    when a check failed, as for one model)."""
    found, notes = _batch_models(args)
    destinations = batch.output_paths(
        [entry.model for entry, _ in found], args.output, args.in_place
    )
    owns = _model_args(args, found, runs=bool(args.validate or args.bench or args.tune_for))
    protected: set[Path] = set()
    for entry, loaded in found:
        files = external_files(loaded.model, loaded.base_dir)
        protected |= files if args.in_place else {entry.model, *files}
    stream = shared.human_stream(args)
    with OutputPlan(protected | shared.files_read(args, owns)) as plan:
        label = "--in-place" if args.in_place else "-o"
        planned = [
            plan_save(
                plan,
                output,
                loaded.model,
                loaded.base_dir,
                label,
                args.in_place,
                reference=args.reference_input_data,
            )
            for (_, loaded), output in zip(found, destinations, strict=True)
        ]
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        if args.bench or args.tune_for:
            shared.bench_options(args)  # bad timing options fail before any work
        outcomes = []
        for (entry, loaded), own, destination in zip(found, owns, planned, strict=True):
            if stream is sys.stdout and not args.quiet:  # progress, kept off stdout's table
                print(printable(f"{entry.model} ..."), file=sys.stderr)
            result = shared.attempt(
                own, _optimize_one, own, entry.model, loaded, destination, plan, None, None
            )
            if isinstance(result, str):
                result = batch.Outcome(entry.model, destination, EXIT_USAGE, error=result)
            outcomes.append(result)
        status = batch.worst_status(outcomes)
        written = status == EXIT_OK
        if not written:  # a batch is written whole or not at all
            plan.discard()
            for outcome in outcomes:
                if outcome.report is not None:
                    outcome.report.output = None
        print(batch.summary_table(outcomes, written, notes, args.wide), file=stream)
        record = batch.combined_record(outcomes, normfuse.__version__, written, notes)
        shared.finish_batch(plan, args.report, report_path, record)
    failed = sum(outcome.status != EXIT_OK for outcome in outcomes)
    if status == EXIT_CHECK_FAILED:
        print(
            f"normfuse: validation failed for {failed} of {len(outcomes)} models; no model "
            "written (a batch is written whole or not at all)",
            file=sys.stderr,
        )
    return status


def _batch_models(
    args: argparse.Namespace,
) -> tuple[list[tuple[manifest.Entry, LoadedModel]], list[str]]:
    """The models of a batch, loaded, each as a manifest entry (one with no settings of its own
    when they come from the command line), and notes on folder files skipped."""
    if args.manifest is None:
        found, notes = batch.collect(args.models)
        return [(manifest.Entry(str(item.path), item.path), item.loaded) for item in found], notes
    if args.models:
        raise NormfuseError("--manifest lists the models; give no MODEL as well")
    entries = manifest.read(args.manifest)
    return [(entry, shared.entry_load(entry, entry.model)[0]) for entry in entries], []


def _model_args(
    args: argparse.Namespace,
    found: list[tuple[manifest.Entry, LoadedModel]],
    runs: bool,
) -> list[argparse.Namespace]:
    """Each model's options (the command line's, under its manifest entry's), checked before any
    work: `--dims` names some model has and, where the command `runs` the models, each model's
    dims and inputs against it."""
    check_dims_across([loaded.model for _, loaded in found], parse_dims(args.dims))
    owns = [manifest.apply(args, entry, symbolic_dims(loaded.model)) for entry, loaded in found]
    if runs:
        for (entry, loaded), own in zip(found, owns, strict=True):
            shared.check_entry_inputs(entry, loaded, own)
    return owns


def _check_optimize_options(args: argparse.Namespace) -> None:
    if args.output is not None and str(args.output) == STDOUT:
        raise NormfuseError("-o -: a model is not written to stdout; give a file or a folder")
    if not args.models and args.manifest is None:
        raise NormfuseError("give a MODEL, a folder of models, or --manifest FILE")
    given = [name for name in TIMING_OPTIONS if getattr(args, name, None) not in (None, False)]
    allowed = set(TIMING_OPTIONS) if args.bench else {"quiet"}
    if args.tune_for:
        allowed |= {"warmup", "runs", "threads", "quiet"}
    refused = [name for name in given if name not in allowed]
    if refused:
        names = ", ".join(f"--{name.replace('_', '-')}" for name in refused)
        raise NormfuseError(f"{names}: timing options need --bench")
    unused = [
        name
        for name, uses in _RUN_OPTIONS.items()
        if getattr(args, name) is not None and not any(getattr(args, use) for use in uses)
    ]
    if unused:
        names = ", ".join(f"--{name}" for name in unused)
        uses = [f"--{use.replace('_', '-')}" for use in _RUN_OPTIONS[unused[0]]]
        needs = " or ".join([", ".join(uses[:-1]), uses[-1]] if len(uses) > 1 else uses)
        raise NormfuseError(f"{names}: used only with {needs}, for the runs they make")
    if args.plot is not None and (args.manifest is not None or batch.is_batch(args.models)):
        raise NormfuseError("--plot draws one model's timings; give one model")
    for stage in args.with_stages or ():
        ort_stage.parse_stage(stage)  # a typo is refused before any work


# optimize's options for running models, and what runs them.
_RUN_OPTIONS = {
    "dims": ("validate", "bench", "tune_for"),
    "inputs": ("validate", "bench", "tune_for"),
    "seed": ("validate", "bench", "tune_for"),
    "providers": ("validate", "bench"),
    "atol": ("validate",),
    "rtol": ("validate",),
}


def check_dims_across(models: list[onnx.ModelProto], dims: dict[str, int]) -> None:
    """Refuse `--dims` names that no model of a batch has, where some model has symbolic dims
    (each model gets the ones it has; one with none gets all, and a note)."""
    known: set[str] = set()
    for model in models:
        known |= symbolic_dims(model)
    unknown = sorted(set(dims) - known)
    if unknown and known:
        raise NormfuseError(
            f"--dims {', '.join(unknown)}: no input of any model has such a dimension; "
            f"their symbolic dims are: {', '.join(sorted(known)) or '(none)'}"
        )


def _optimize_one(
    args: argparse.Namespace,
    model_path: Path,
    loaded: LoadedModel,
    destination: Path,
    plan: OutputPlan,
    stream,
    plot_path: Path | None,
) -> batch.Outcome:
    """Optimise one model and stage it in `plan`; everything that can fail (validation, timing)
    runs first. `stream`: where tables go (None: print nothing)."""

    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream)

    options = shared.validation_options(args) if args.validate else None
    if args.bench:  # the timed inputs are checked before any work, as validation's are
        check_inputs(loaded.model, parse_dims(args.dims), args.inputs)
    result = normfuse.optimize(
        loaded.model,
        target=args.target,
        passes=args.passes,
        base_dir=loaded.base_dir,
        validation=options,
        tune_for=args.tune_for,
        dims=parse_dims(args.dims),
        refuse_repairs=args.refuse_repairs,
        max_opset=args.max_opset,
        with_stages=args.with_stages or (),
        stage_providers=parse_providers(args.providers),
    )
    report = result.report
    report.input = str(model_path)
    if report.validation is not None and not report.validation.passed:
        say(report.table(wide=args.wide))
        message = printable(f"validation failed; {destination} not written")
        print(f"normfuse: {message}", file=sys.stderr)
        return batch.Outcome(model_path, destination, EXIT_CHECK_FAILED, report)
    extra, later = {}, []
    if args.bench:
        models = [
            BenchModel("original", loaded.model, loaded.base_dir),
            BenchModel("normfuse", result.model, result.base_dir),
        ]
        timings = run_bench(models, shared.bench_options(args))
        extra["bench"] = timings.as_dict()
        said = {*report.notes, *(report.validation.notes if report.validation else [])}
        timings.notes = [note for note in timings.notes if note not in said]  # each note once
        later.append(timings.table(wide=args.wide))
        if plot_path is not None:
            plot_ratios(timings, plan.temp_path(plot_path))
    if args.tune_for:
        hint = _session_hint(BenchModel(str(destination), result.model, result.base_dir), args)
        if hint:
            extra["session_hint"] = hint
            later.append(wrap(hint, args.wide))
    report.output = str(destination)
    reference = args.reference_input_data or args.in_place
    weights = stage_save(plan, result.model, destination, result.base_dir, reference=reference)
    if weights is not None:
        report.notes.append(weights)
    say(report.table(existing=fused_norm_nodes(loaded.model), wide=args.wide))
    for text in later:
        say(text)
    return batch.Outcome(model_path, destination, EXIT_OK, report, extra=extra)


def _session_hint(model: BenchModel, args: argparse.Namespace) -> str | None:
    """One line when ORT session settings beat ORT's default on the result beyond noise."""
    options = dataclasses.replace(shared.bench_options(args), providers=(args.tune_for,))
    result = tune(model, options).results[0]
    if not result.beats_default:
        return None
    timing = result.timings[result.configs.index(result.best)]
    low, high = timing.ratio_interval
    return (
        f"hint: on {args.tune_for}, ORT session settings '{result.best.label}' ran the result "
        f"in {timing.ratio:.2f}x the time of ORT's default [{low:.2f}, {high:.2f}]; "
        f"`normfuse tune {model.name}` prints the code"
    )


def _output_path(args: argparse.Namespace, model: Path) -> Path:
    if args.in_place:
        return model
    if os.path.exists(args.output) and args.output.resolve() == model.resolve():
        raise NormfuseError("-o is the input model; use --in-place to replace it")
    return args.output
