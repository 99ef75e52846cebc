"""The `normfuse` command line: parse, call the API, print, and choose the exit code.

Exit codes: 0 success; 1 a check failed (numerics differ, `inspect --check` found unfused sites);
2 bad usage or an input that cannot be used. Expected errors print one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import textwrap
from pathlib import Path

from onnx_graphsurgeon.logger.logger import G_LOGGER

import normfuse
from normfuse import batch
from normfuse.bench import BenchModel, BenchOptions, BenchReport
from normfuse.bench import run as run_bench
from normfuse.errors import NormfuseError
from normfuse.inputs import graph_inputs, parse_dims
from normfuse.plot import plot_ratios, require_matplotlib
from normfuse.sessions import parse_providers
from normfuse.tune import tune

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
COMMANDS = ("optimize", "inspect", "validate", "bench", "tune")
STDOUT = "-"
EXIT_CODES = (
    "exit codes: 0 success; 1 a check failed (numerics differ, inspect --check found unfused "
    "sites; for several models, the worst status of any); 2 bad usage or an input that cannot be "
    "used (one line on stderr, no output left behind)"
)
JSON_NOTE = (
    "JSON: --report FILE writes the command's JSON record to FILE, or to stdout with "
    "--report - (then nothing else is printed); inspect --json is the same as --report -."
)
EXAMPLES = {
    "optimize": [
        "normfuse optimize model.onnx -o fused.onnx --validate --dims sequence=128",
        "normfuse optimize a.onnx b.onnx -o fused/ --report -    # several models",
        "normfuse optimize models/ -o fused/                     # every *.onnx in models/",
        "normfuse optimize model.onnx -o fused.onnx --tune-for cpu --dims sequence=128",
    ],
    "inspect": ["normfuse inspect model.onnx", "normfuse inspect fused.onnx --check"],
    "validate": ["normfuse validate model.onnx fused.onnx --dims sequence=128"],
    "bench": ["normfuse bench model.onnx fused.onnx --dims sequence=128 --plot bench.png"],
    "tune": ["normfuse tune fused.onnx --dims sequence=128"],
}
TIMING_OPTIONS = ("warmup", "runs", "threads", "level", "plot", "quiet")


def _epilog(*commands: str) -> str:
    lines = [textwrap.fill(EXIT_CODES, 88), "", "examples:"]
    lines += [f"  {line}" for command in commands for line in EXAMPLES[command]]
    return "\n".join([*lines, "", textwrap.fill(JSON_NOTE, 88)])


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="normfuse",
        description=normfuse.__doc__.splitlines()[0],
        epilog=_epilog(*COMMANDS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"normfuse {normfuse.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "optimize": "fuse norm subgraphs, write new model(s)",
        "inspect": "list fusable sites and near-misses",
        "validate": "compare a candidate with the original",
        "bench": "batch-one latency of models, side by side",
        "tune": "fastest ORT session settings, by measurement",
    }
    adders = {
        "optimize": _add_optimize,
        "inspect": _add_inspect,
        "validate": _add_validate,
        "bench": _add_bench,
        "tune": _add_tune,
    }
    for name in COMMANDS:
        adders[name](
            commands.add_parser(
                name,
                help=helps[name],
                description=helps[name],
                epilog=_epilog(name),
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser


def _add_model_options(sub: argparse.ArgumentParser, several: bool = False) -> None:
    from normfuse.passes import DEFAULT_PASS_NAMES, PASS_NAMES

    if several:
        sub.add_argument(
            "models",
            type=Path,
            nargs="+",
            metavar="MODEL",
            help="ONNX model(s) to read; a folder stands for the *.onnx files in it",
        )
    else:
        sub.add_argument("model", type=Path, help="the ONNX model to read")
    sub.add_argument(
        "--target",
        choices=["ort", "onnx"],
        default="ort",
        help="ort: ONNX Runtime operators allowed (default); onnx: standard only",
    )
    sub.add_argument(
        "--passes",
        default=None,
        help=f"comma-separated, of {','.join(PASS_NAMES)} (default {','.join(DEFAULT_PASS_NAMES)})",
    )


def _add_report_option(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--report", metavar="FILE", help=f"write {what} as JSON to FILE (- for stdout)"
    )


def _add_optimize(sub: argparse.ArgumentParser) -> None:
    _add_model_options(sub, several=True)
    destination = sub.add_mutually_exclusive_group(required=True)
    destination.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="OUT",
        help="where to write the optimised model (a folder, which must exist, for several models)",
    )
    destination.add_argument("--in-place", action="store_true", help="replace each MODEL itself")
    _add_report_option(sub, "the report (several models: one combined record)")
    sub.add_argument(
        "--validate",
        action="store_true",
        help="check each site alone (rolling back failures) and the whole model",
    )
    sub.add_argument(
        "--bench", action="store_true", help="time the original and the result side by side"
    )
    sub.add_argument(
        "--tune-for",
        choices=["cpu", "cuda"],
        help="choose each site's form (Skip* or not, fused or not) by timing there, at --dims",
    )
    _add_input_options(sub)
    _add_tolerance_options(sub)
    timing = sub.add_argument_group(
        "timing (need --bench; --warmup, --runs and --threads also apply to --tune-for's hint)"
    )
    _add_bench_options(timing, report=False)


def _add_inspect(sub: argparse.ArgumentParser) -> None:
    _add_model_options(sub)
    sub.add_argument("--json", action="store_true", help="print the report as JSON (= --report -)")
    _add_report_option(sub, "the report")
    sub.add_argument(
        "--check", action="store_true", help="exit 1 if any fusable site is left unfused in MODEL"
    )


def _add_validate(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("original", type=Path, help="the reference model (e.g. before optimize)")
    sub.add_argument("candidate", type=Path, help="the model to check against it (e.g. after)")
    _add_report_option(sub, "the comparison")
    _add_input_options(sub)
    _add_tolerance_options(sub)


def _add_bench(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "models",
        type=Path,
        nargs="+",
        metavar="MODEL",
        help="models with the same inputs; ratios are to the first",
    )
    _add_input_options(sub)
    _add_bench_options(sub)


def _add_tune(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("model", type=Path, help="the ONNX model to time")
    _add_input_options(sub)
    _add_bench_options(sub, levels=False, plot=False)


def _add_input_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--providers", default="cpu", help="cpu, cuda or cpu,cuda (default cpu)")
    sub.add_argument(
        "--dims",
        action="append",
        metavar="NAME=N",
        help="symbolic dimension sizes; repeatable or comma-separated (unknown names are an error)",
    )
    sub.add_argument("--inputs", type=Path, metavar="FILE.npz", help="input arrays by name")
    sub.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")


def _add_tolerance_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--atol", type=float, help="absolute tolerance (default: by output dtype)")
    sub.add_argument("--rtol", type=float, help="relative tolerance (default: by output dtype)")


def _add_bench_options(
    sub: argparse.ArgumentParser | argparse._ArgumentGroup,
    levels: bool = True,
    plot: bool = True,
    report: bool = True,
) -> None:
    sub.add_argument("--warmup", type=int, help="untimed runs each (default 20)")
    sub.add_argument("--runs", type=int, help="timed runs each (default 200)")
    sub.add_argument("--threads", type=int, help="intra-op threads (default: ORT's default)")
    if levels:
        sub.add_argument(
            "--level",
            action="append",
            choices=["disable", "basic", "extended", "all"],
            help="ORT optimisation level; repeatable (default all)",
        )
    if report:
        _add_report_option(sub, "the timings")
        sub.add_argument("--json", dest="report", metavar="FILE", help=argparse.SUPPRESS)
    if plot:
        sub.add_argument(
            "--plot", type=Path, metavar="FILE.png", help="ratio-to-first chart (needs matplotlib)"
        )
    sub.add_argument("--quiet", action="store_true", help="no progress display")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    mistyped = _mistyped_command(argv)
    if mistyped:
        print(f"normfuse: error: {mistyped}", file=sys.stderr)
        return EXIT_USAGE
    args = build_parser().parse_args(argv)
    G_LOGGER.severity = G_LOGGER.ERROR  # onnx-graphsurgeon's warnings are not ours to print
    try:
        if args.command == "optimize":
            return _optimize(args)
        if args.command == "validate":
            return _validate(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "tune":
            return _tune(args)
        return _inspect(args)
    except NormfuseError as error:
        print(f"normfuse: error: {error}", file=sys.stderr)
        return EXIT_USAGE


def _mistyped_command(argv: list[str]) -> str | None:
    """For `normfuse valdate ...` or `normfuse --validate ...`: a line naming the command meant."""
    if not argv or argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version"):
        return None
    word = argv[0].lstrip("-")
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown command {argv[0]!r}{hint} (commands: {', '.join(COMMANDS)})"


def _validation_options(args: argparse.Namespace) -> normfuse.ValidationOptions:
    return normfuse.ValidationOptions(
        providers=tuple(parse_providers(args.providers)),
        dims=parse_dims(args.dims),
        seed=args.seed,
        npz=None if args.inputs is None else str(args.inputs),
        atol=args.atol,
        rtol=args.rtol,
    )


def _optimize(args: argparse.Namespace) -> int:
    _check_optimize_options(args)
    models = batch.expand_inputs(args.models)
    if not batch.is_batch(args.models):
        output = _output_path(args, models[0])
        outcome = _optimize_one(args, models[0], output, _human_stream(args))
        if args.report:
            record = outcome.report.as_dict() if outcome.report else {}
            _write_report(args.report, json.dumps({**record, **outcome.extra}, indent=2) + "\n")
        return outcome.status
    outputs = batch.output_paths(models, args.output, args.in_place)
    dims = parse_dims(args.dims)
    check_dims_across(models, dims)
    stream = _human_stream(args)
    outcomes = []
    for model, output in zip(models, outputs, strict=True):
        if stream is sys.stdout:  # progress, kept off stdout's table
            print(f"{model} ...", file=sys.stderr)
        own = argparse.Namespace(**{**vars(args), "dims": _own_dims(dims, model)})
        try:
            outcomes.append(_optimize_one(own, model, output, None))
        except NormfuseError as error:
            outcomes.append(batch.Outcome(model, output, EXIT_USAGE, error=str(error)))
    print(batch.summary_table(outcomes), file=stream)
    if args.report:
        record = batch.combined_record(outcomes, normfuse.__version__)
        _write_report(args.report, json.dumps(record, indent=2) + "\n")
    return batch.worst_status(outcomes)


def _check_optimize_options(args: argparse.Namespace) -> None:
    if args.output is not None and str(args.output) == STDOUT:
        raise NormfuseError("-o -: a model is not written to stdout; give a file or a folder")
    given = [name for name in TIMING_OPTIONS if getattr(args, name, None) not in (None, False)]
    allowed = set(TIMING_OPTIONS) if args.bench else set()
    if args.tune_for:
        allowed |= {"warmup", "runs", "threads", "quiet"}
    refused = [name for name in given if name not in allowed]
    if refused:
        names = ", ".join(f"--{name}" for name in refused)
        raise NormfuseError(f"{names}: timing options need --bench")
    if args.plot is not None and batch.is_batch(args.models):
        raise NormfuseError("--plot draws one model's timings; give one model")


def check_dims_across(models: list[Path], dims: dict[str, int]) -> None:
    """Refuse `--dims` names that no model of a batch has (each model gets the ones it has)."""
    known: set[str] = set()
    for model in models:
        known |= _symbolic_dims(model)
    unknown = sorted(set(dims) - known)
    if unknown:
        raise NormfuseError(
            f"--dims {', '.join(unknown)}: no input of any model has such a dimension; "
            f"their symbolic dims are: {', '.join(sorted(known)) or '(none)'}"
        )


def _symbolic_dims(path: Path) -> set[str]:
    try:
        model = normfuse.model_io.load(path).model
    except NormfuseError:
        return set()  # reported when the model itself is processed
    return {
        dim.dim_param
        for info in graph_inputs(model)
        for dim in info.type.tensor_type.shape.dim
        if dim.dim_param and not dim.HasField("dim_value")
    }


def _own_dims(dims: dict[str, int], model: Path) -> list[str]:
    """The `--dims` items a model of a batch has."""
    own = _symbolic_dims(model)
    return [f"{name}={size}" for name, size in dims.items() if name in own]


class _Discard:
    """A stream that drops what is printed to it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def _human_stream(args: argparse.Namespace):
    """stdout for tables, unless the JSON record goes there: then nothing else is printed (the
    record holds it all), so stdout is the JSON alone and stderr stays quiet."""
    return _Discard() if getattr(args, "report", None) == STDOUT else sys.stdout


def _optimize_one(
    args: argparse.Namespace, model_path: Path, output: Path, stream
) -> batch.Outcome:
    """Optimise one model and write it; everything that can fail (validation, timing) runs
    before the output is written. `stream`: where tables go (None: print nothing)."""

    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream)

    options = _validation_options(args) if args.validate else None
    dims = parse_dims(args.dims)
    result = normfuse.optimize(
        model_path,
        target=args.target,
        passes=args.passes,
        validation=options,
        tune_for=args.tune_for,
        dims=dims,
    )
    report = result.report
    if report.validation is not None and not report.validation.passed:
        say(report.table())
        print(f"normfuse: validation failed; {output} not written", file=sys.stderr)
        return batch.Outcome(model_path, output, EXIT_CHECK_FAILED, report)
    extra, later = {}, []
    if args.bench:
        original = normfuse.model_io.load(model_path)
        models = [
            BenchModel("original", original.model, original.base_dir),
            BenchModel("normfuse", result.model, result.base_dir),
        ]
        timings = _time(models, args)
        extra["bench"] = timings.as_dict()
        later.append(timings.table())
    if args.tune_for:
        hint = _session_hint(BenchModel(str(output), result.model, result.base_dir), args)
        if hint:
            extra["session_hint"] = hint
            later.append(hint)
    report.output = str(output)
    normfuse.save(result, output)
    say(report.table())
    say(f"wrote {output}")
    for text in later:
        say(text)
    if args.bench and args.plot is not None:
        plot_ratios(timings, args.plot)
        say(f"wrote {args.plot}")
    return batch.Outcome(model_path, output, EXIT_OK, report, extra=extra)


def _session_hint(model: BenchModel, args: argparse.Namespace) -> str | None:
    """One line when ORT session settings beat ORT's default on the result beyond noise."""
    options = dataclasses.replace(_bench_options(args), providers=(args.tune_for,))
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


def _tune(args: argparse.Namespace) -> int:
    loaded = normfuse.model_io.load(args.model)
    model = BenchModel(str(args.model), loaded.model, loaded.base_dir)
    report = tune(model, _bench_options(args))
    print(report.text(str(args.model)), file=_human_stream(args))
    if args.report:
        data = {"model": str(args.model), **report.as_dict(str(args.model))}
        _write_report(args.report, json.dumps(data, indent=2) + "\n")
    return EXIT_OK


def _bench_options(args: argparse.Namespace) -> BenchOptions:
    warmup = 20 if args.warmup is None else args.warmup
    runs = 200 if args.runs is None else args.runs
    if warmup < 0 or runs < 2:
        raise NormfuseError("--warmup must be >= 0 and --runs >= 2")
    return BenchOptions(
        providers=tuple(parse_providers(args.providers)),
        levels=tuple(dict.fromkeys(getattr(args, "level", None) or ["all"])),
        warmup=warmup,
        runs=runs,
        threads=args.threads,
        dims=parse_dims(args.dims),
        seed=args.seed,
        npz=None if args.inputs is None else str(args.inputs),
        progress=sys.stderr.isatty() and not args.quiet,
    )


def _time(models: list[BenchModel], args: argparse.Namespace) -> BenchReport:
    options = _bench_options(args)
    if args.plot is not None:
        require_matplotlib()
    return run_bench(models, options)


def _bench(args: argparse.Namespace) -> int:
    loaded = [normfuse.model_io.load(path) for path in args.models]
    models = [
        BenchModel(str(path), item.model, item.base_dir)
        for path, item in zip(args.models, loaded, strict=True)
    ]
    report = _time(models, args)
    stream = _human_stream(args)
    print(report.table(), file=stream)
    if args.report:
        _write_report(args.report, json.dumps(report.as_dict(), indent=2) + "\n")
    if args.plot is not None:
        plot_ratios(report, args.plot)
        print(f"wrote {args.plot}", file=stream)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    report = normfuse.validate(args.original, args.candidate, _validation_options(args))
    stream = _human_stream(args)
    print(report.table(), file=stream)
    if args.report:
        data = {
            "original": str(args.original),
            "candidate": str(args.candidate),
            **report.as_dict(),
        }
        _write_report(args.report, json.dumps(data, indent=2) + "\n")
    print("validation passed" if report.passed else "validation FAILED", file=stream)
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _output_path(args: argparse.Namespace, model: Path) -> Path:
    if args.in_place:
        return model
    if args.output.exists() and args.output.resolve() == model.resolve():
        raise NormfuseError("-o is the input model; use --in-place to replace it")
    return args.output


def _write_report(path: str, text: str) -> None:
    """The JSON record to `path`, or to stdout for `-`."""
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path)
    if not target.resolve().parent.is_dir():
        raise NormfuseError(f"{target}: report folder does not exist")
    target.write_text(text)


def _inspect(args: argparse.Namespace) -> int:
    report = normfuse.inspect(args.model, target=args.target, passes=args.passes)
    destination = STDOUT if args.json else args.report
    if destination != STDOUT:
        print(report.table(sites=True))
    if destination:
        _write_report(destination, report.to_json())
    if args.check and report.sites:
        print(
            f"normfuse: check failed: {len(report.sites)} fusable site(s) left unfused",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
