"""`normfuse inspect`, `validate`, `bench` and `tune`: one model (or pair) or a batch of them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import normfuse
from normfuse.cli import batch, manifest, shared
from normfuse.cli.parser import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from normfuse.driver.report import fused_norm_nodes
from normfuse.errors import NormfuseError, printable
from normfuse.facts.shapes import tensor_types
from normfuse.io.columns import wrap
from normfuse.io.model_io import LoadedModel, external_files
from normfuse.io.outputs import STDOUT, OutputPlan
from normfuse.measure.bench import BenchModel
from normfuse.measure.bench import run as run_bench
from normfuse.measure.plot import plot_ratios
from normfuse.measure.tune import tune
from normfuse.prove.inputs import symbolic_dims


def tune_command(args: argparse.Namespace) -> int:
    loaded, inputs = shared.load(args.model)
    with OutputPlan(inputs | shared.files_read(args)) as plan:
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        model = BenchModel(str(args.model), loaded.model, loaded.base_dir)
        report = tune(model, shared.bench_options(args))
        print(report.text(str(args.model), args.wide), file=shared.human_stream(args))
        data = {"model": str(args.model), **report.as_dict(str(args.model))}
        shared.stage_text(plan, args.report, report_path, json.dumps(data, indent=2) + "\n")
        shared.commit(plan)
    return EXIT_OK


def bench_command(args: argparse.Namespace) -> int:
    if args.manifest is not None:
        if args.plot is not None:
            raise NormfuseError("--plot draws one bench's timings; not with --manifest")
        shared.bench_options(args)  # bad timing options fail before any work
        return _pairs(args, _bench_pair, {EXIT_OK: "ok", EXIT_USAGE: "error"})
    if not args.models:
        raise NormfuseError("give the MODELs to time, or --manifest FILE")
    loaded, inputs = [], set()
    for path in args.models:
        model, files = shared.load(path)
        loaded.append(model)
        inputs |= files
    models = [
        BenchModel(str(path), item.model, item.base_dir)
        for path, item in zip(args.models, loaded, strict=True)
    ]
    stream = shared.human_stream(args)
    with OutputPlan(inputs | shared.files_read(args)) as plan:
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        plot_path = shared.plan_plot(plan, args)
        report = run_bench(models, shared.bench_options(args))
        print(report.table(wide=args.wide), file=stream)
        shared.stage_text(
            plan, args.report, report_path, json.dumps(report.as_dict(), indent=2) + "\n"
        )
        if plot_path is not None:
            plot_ratios(report, plan.temp_path(plot_path))
        shared.commit(plan)
    if plot_path is not None:
        shared.said_after_commit(printable(f"wrote {args.plot}"), stream)
    return EXIT_OK


def validate_command(args: argparse.Namespace) -> int:
    if args.manifest is not None:
        shared.validation_options(args)  # bad tolerances fail before any work
        words = {EXIT_OK: "passed", EXIT_CHECK_FAILED: "FAILED", EXIT_USAGE: "error"}
        return _pairs(args, _validate_pair, words)
    if len(args.models) != 2:
        raise NormfuseError(
            f"validate takes ORIGINAL CANDIDATE (or --manifest FILE); got {len(args.models)} "
            "model(s)"
        )
    original, candidate = args.models
    inputs = shared.load(original)[1] | shared.load(candidate)[1]
    stream = shared.human_stream(args)
    with OutputPlan(inputs | shared.files_read(args)) as plan:
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        options = shared.validation_options(args)
        report = normfuse.validate(original, candidate, options)
        print(report.table(args.wide), file=stream)
        data = {"original": str(original), "candidate": str(candidate)}
        text = json.dumps({**data, **report.as_dict()}, indent=2) + "\n"
        shared.stage_text(plan, args.report, report_path, text)
        shared.commit(plan)
    shared.said_after_commit("validation passed" if report.passed else "validation FAILED", stream)
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _pairs(args: argparse.Namespace, run: shared.PairRun, words: dict[int, str]) -> int:
    """`validate` or `bench` over a manifest: each entry's model with its candidate (the entry's
    `candidate`, else the file of the model's name in the folder given), everything checked
    before any work; the record is written unless a pair stopped with an error."""
    entries = manifest.read(args.manifest, pairs=True)
    folder = _candidates_folder(args)
    jobs, inputs = [], set()
    for entry in entries:
        candidate = _candidate(entry, folder)
        model, model_files = shared.entry_load(entry, entry.model)
        other, other_files = shared.entry_load(entry, candidate)
        own = manifest.apply(args, entry, symbolic_dims(model.model))
        shared.check_entry_inputs(entry, model, own)
        jobs.append((own, entry.model, candidate, model, other))
        inputs |= model_files | other_files
    stream = shared.human_stream(args)
    with OutputPlan(inputs | shared.files_read(args, [job[0] for job in jobs])) as plan:
        report_path = shared.plan(plan, args.report, "--report", allow_stdout=True)
        outcomes = []
        for own, model_path, candidate, model, other in jobs:
            print(printable(f"== {model_path} vs {candidate} =="), file=stream)
            result = shared.attempt(own, run, own, model_path, candidate, model, other, stream)
            if isinstance(result, str):
                outcomes.append(batch.PairOutcome(model_path, candidate, EXIT_USAGE, error=result))
            else:
                outcomes.append(batch.PairOutcome(model_path, candidate, *result))
        print(batch.pairs_table(outcomes, words, args.wide), file=stream)
        record = batch.pairs_record(outcomes, normfuse.__version__)
        shared.finish_batch(plan, args.report, report_path, record)
    return record["status"]


def _candidates_folder(args: argparse.Namespace) -> Path | None:
    """The folder given after `--manifest` (None: none), holding candidates by model name."""
    if len(args.models) > 1 or (args.models and not args.models[0].is_dir()):
        raise NormfuseError(
            "with --manifest, give no MODEL, or one folder holding each candidate under its "
            "model's file name"
        )
    return args.models[0] if args.models else None


def _candidate(entry: manifest.Entry, folder: Path | None) -> Path:
    """An entry's candidate: its own, else its model's file name in `folder`."""
    if entry.candidate is not None:
        return entry.candidate
    if folder is None:
        raise NormfuseError(
            f"{entry.label}: no candidate; give candidate = PATH in the entry, or a folder of "
            "candidates after --manifest"
        )
    candidate = folder / entry.model.name
    if not candidate.is_file():
        raise NormfuseError(f"{entry.label}: candidate {candidate}: no such file")
    return candidate


def _validate_pair(
    own: argparse.Namespace,
    model_path: Path,
    candidate: Path,
    model: LoadedModel,
    other: LoadedModel,
    stream,
) -> tuple[int, dict]:
    report = normfuse.validate(model_path, candidate, shared.validation_options(own))
    print(report.table(own.wide), file=stream)
    print("validation passed" if report.passed else "validation FAILED", file=stream)
    return (EXIT_OK if report.passed else EXIT_CHECK_FAILED), report.as_dict()


def _bench_pair(
    own: argparse.Namespace,
    model_path: Path,
    candidate: Path,
    model: LoadedModel,
    other: LoadedModel,
    stream,
) -> tuple[int, dict]:
    models = [
        BenchModel(str(model_path), model.model, model.base_dir),
        BenchModel(str(candidate), other.model, other.base_dir),
    ]
    report = run_bench(models, shared.bench_options(own))
    print(report.table(wide=own.wide), file=stream)
    return EXIT_OK, report.as_dict()


def inspect_command(args: argparse.Namespace) -> int:
    if batch.is_batch(args.models):
        return _inspect_batch(args)
    model_path = args.models[0]
    loaded, inputs = shared.load(model_path)
    destination = STDOUT if args.json else args.report
    with OutputPlan(inputs | shared.files_read(args)) as plan:
        report_path = shared.plan(plan, destination, "--report", allow_stdout=True)
        report = _inspect_one(args, model_path, loaded, destination != STDOUT)
        shared.stage_text(plan, destination, report_path, report.to_json())
        shared.commit(plan)
    if args.check and report.sites:
        print(
            f"normfuse: check failed: {len(report.sites)} fusable site(s) left unfused",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK


def _inspect_one(
    args: argparse.Namespace, model_path: Path, loaded: LoadedModel, show: bool
) -> normfuse.Report:
    """One model's report, its table printed when `show`."""
    report = normfuse.inspect(
        loaded.model,
        target=args.target,
        passes=args.passes,
        base_dir=loaded.base_dir,
        max_opset=args.max_opset,
    )
    report.input = str(model_path)
    if show:
        types = tensor_types(loaded.model) if report.sites else {}
        existing = fused_norm_nodes(loaded.model)
        print(report.table(True, types, args.verbose, existing, args.wide))
    return report


def _inspect_batch(args: argparse.Namespace) -> int:
    """`inspect` of several models (a folder's): each one's table under its name, one combined
    record, `--check` failing when any model has a site left."""
    found, notes = batch.collect(args.models)
    inputs: set[Path] = set()
    for item in found:
        inputs |= {item.path, *external_files(item.loaded.model, item.loaded.base_dir)}
    destination = STDOUT if args.json else args.report
    show = destination != STDOUT
    with OutputPlan(inputs | shared.files_read(args)) as plan:
        report_path = shared.plan(plan, destination, "--report", allow_stdout=True)
        outcomes = []
        for item in found:
            if show:
                print(printable(f"== {item.path} =="))
            result = shared.attempt(args, _inspect_one, args, item.path, item.loaded, show)
            if isinstance(result, str):
                outcomes.append(batch.Outcome(item.path, None, EXIT_USAGE, error=result))
            else:
                status = EXIT_CHECK_FAILED if args.check and result.sites else EXIT_OK
                outcomes.append(batch.Outcome(item.path, None, status, result))
        if show:
            for outcome in outcomes:
                if outcome.error:
                    print(wrap(printable(batch.error_line(outcome)), args.wide))
            for note in notes:
                print(wrap(printable(f"note: {note}"), args.wide))
        record = batch.combined_record(outcomes, normfuse.__version__, None, notes)
        shared.finish_batch(plan, destination, report_path, record)
    left = [outcome for outcome in outcomes if outcome.status == EXIT_CHECK_FAILED]
    if left:
        sites = sum(len(outcome.report.sites) for outcome in left if outcome.report)
        print(
            f"normfuse: check failed: {sites} fusable site(s) left unfused in {len(left)} of "
            f"{len(outcomes)} models",
            file=sys.stderr,
        )
    return record["status"]
