"""The `normfuse` command line: parse, call the API, print, and choose the exit code.

Exit codes: 0 success; 1 a check failed (numerics differ, `inspect --check` found unfused sites);
2 bad usage or an input that cannot be used. Expected errors print one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import math
import os
import sys
import textwrap
from pathlib import Path

import onnxruntime as ort
from onnx_graphsurgeon.logger.logger import G_LOGGER
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import normfuse
from normfuse import batch, bench, outputs
from normfuse.bench import BenchModel, BenchOptions
from normfuse.bench import run as run_bench
from normfuse.columns import wrap
from normfuse.errors import NormfuseError, debugging, printable, runtime_message
from normfuse.inputs import check_inputs, input_hint, parse_dims, symbolic_dims
from normfuse.model_io import LoadedModel, external_files, plan_save, stage_save
from normfuse.outputs import STDOUT, OutputPlan
from normfuse.plot import plot_ratios, require_matplotlib
from normfuse.report import fused_norm_nodes
from normfuse.sessions import parse_providers
from normfuse.shapes import tensor_types
from normfuse.tune import tune

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
MAX_RUNS, MAX_THREADS, MAX_SEED = 1_000_000, 1024, 2**63 - 1
MAX_TIME_BUDGET = 86_400.0  # seconds: a day
COMMANDS = ("optimize", "inspect", "validate", "bench", "tune")
_ORT_ERRORS = tuple(
    getattr(ort_state, name)
    for name in ("Fail", "InvalidArgument", "RuntimeException", "NotImplemented", "EPFail")
    if hasattr(ort_state, name)
)
EXIT_CODES = (
    "exit codes: 0 success; 1 a check failed (numerics differ, inspect --check found unfused "
    "sites; for several models, the worst status of any); 2 bad usage or an input that cannot be "
    "used (one line on stderr, no output left behind); 130 interrupted (SIGINT), 143 terminated "
    "(SIGTERM), uncommitted outputs removed (once outputs are being committed, both signals are "
    "ignored and the command finishes)"
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
TIMING_OPTIONS = (
    "warmup",
    "runs",
    "threads",
    "sessions",
    "time_budget",
    "level",
    "plot",
    "quiet",
)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        text = printable(f"{message} (see {self.prog} --help)")
        print(f"normfuse: error: {text}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _epilog(*commands: str) -> str:
    lines = [textwrap.fill(EXIT_CODES, 88), "", "examples:"]
    lines += [f"  {line}" for command in commands for line in EXAMPLES[command]]
    return "\n".join([*lines, "", textwrap.fill(JSON_NOTE, 88)])


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(
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
        type=_pass_names,
        help=f"comma-separated, of {','.join(PASS_NAMES)} (default {','.join(DEFAULT_PASS_NAMES)})",
    )
    sub.add_argument(
        "--max-opset",
        type=int,
        metavar="N",
        help="never raise the model's opset above N (what the deployment runtime loads); a site "
        "that needs more is left (opset-too-low)",
    )


def _pass_names(text: str) -> str:
    """`--passes` as given, refused when it names no pass (an empty value ran nothing, rc 0)."""
    if not any(name.strip() for name in text.split(",")):
        raise argparse.ArgumentTypeError("names no pass")
    return text


def _add_output_options(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--report", metavar="FILE", help=f"write {what} as JSON to FILE (- for stdout)"
    )
    sub.add_argument(
        "--wide",
        action="store_true",
        help="print tables at full width: every column, names in full, no line wrapped "
        "(default: within 100 columns)",
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
    sub.add_argument(
        "--reference-input-data",
        action="store_true",
        help="let the output read MODEL's external-data file where it is instead of writing "
        "OUT.data (the output then breaks if that file is deleted; said in the report)",
    )
    _add_output_options(sub, "the report (several models: one combined record)")
    sub.add_argument(
        "--validate",
        action="store_true",
        help="check each site alone (rolling back failures) and the whole model",
    )
    sub.add_argument(
        "--refuse-repairs",
        action="store_true",
        help="leave decomposed every site whose output differs from the original's, even where "
        "it is nearer float64 (default: kept and reported as a repair)",
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
    sub.add_argument(
        "--verbose", action="store_true", help="list the nodes each site replaces (JSON has them)"
    )
    _add_output_options(sub, "the report")
    sub.add_argument(
        "--check", action="store_true", help="exit 1 if any fusable site is left unfused in MODEL"
    )


def _add_validate(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("original", type=Path, help="the reference model (e.g. before optimize)")
    sub.add_argument("candidate", type=Path, help="the model to check against it (e.g. after)")
    _add_output_options(sub, "the comparison")
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
    sub.add_argument(
        "--providers", default="cpu", help="cpu, cuda, openvino or a list like cpu,openvino"
    )
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
    sub.add_argument(
        "--warmup", type=int, help=f"untimed runs per session set (default {bench.WARMUP})"
    )
    sub.add_argument("--runs", type=int, help=f"timed runs each (default {bench.RUNS})")
    sub.add_argument("--threads", type=int, help="intra-op threads (default: ORT's default)")
    sub.add_argument(
        "--sessions",
        type=int,
        help=f"fresh sessions per model, runs split over them (default {bench.SESSION_SETS}; one "
        f"per {bench.MIN_RUNS_PER_SET} runs at most)",
    )
    sub.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="stop timing after the session set that would overrun SECONDS (all levels together;"
        " the first set always runs)",
    )
    if levels:
        sub.add_argument(
            "--level",
            action="append",
            choices=["disable", "basic", "extended", "all"],
            help="ORT optimisation level; repeatable (default all)",
        )
    if report:
        _add_output_options(sub, "the timings")
        sub.add_argument("--json", dest="report", metavar="FILE", help=argparse.SUPPRESS)
    if plot:
        sub.add_argument(
            "--plot", type=Path, metavar="FILE.png", help="ratio-to-first chart (needs matplotlib)"
        )
    sub.add_argument(
        "--quiet",
        action="store_true",
        help="no progress display (timing progress; optimize: also a batch's per-model lines)",
    )


def program() -> int:
    """The `normfuse` executable (and `python -m normfuse`): `main` for a process that exits
    with the returned status, so SIGINT and SIGTERM stay ignored after the commit, through the
    interpreter's shutdown."""
    return main(keep_signals_ignored=True)


def main(argv: list[str] | None = None, keep_signals_ignored: bool = False) -> int:
    """Run the command line; returns the exit code. Every error is one line on stderr; SIGINT
    and SIGTERM before the commit remove what was staged and exit 130 and 143; from the commit on
    they are ignored and the command exits with its own status (see `normfuse.outputs`). The
    signal handlers are restored on return unless `keep_signals_ignored` and a commit ran."""
    argv = sys.argv[1:] if argv is None else list(argv)
    mistyped = _mistyped_command(argv)
    if mistyped:
        return _fail(mistyped, EXIT_USAGE)
    args = build_parser().parse_args(argv)
    G_LOGGER.severity = G_LOGGER.ERROR  # onnx-graphsurgeon's warnings are not ours to print
    ort.set_default_logger_severity(4)  # ORT's errors arrive as exceptions: one line, ours
    with outputs.command_signals(keep_after_commit=keep_signals_ignored):
        try:
            _check_standard_streams()
            code = _run(args)
            sys.stdout.flush()
            return code
        except NormfuseError as error:
            return _fail(str(error), EXIT_USAGE)
        except KeyboardInterrupt:
            return _fail("interrupted (SIGINT); uncommitted outputs removed", EXIT_SIGINT)
        except outputs.Terminated:
            return _fail("terminated (SIGTERM); uncommitted outputs removed", EXIT_SIGTERM)
        except _ORT_ERRORS as error:  # the model cannot run on these inputs (dims, dtypes)
            hint = _input_hint(args)
            return _fail(f"ONNX Runtime failed ({runtime_message(error)}); {hint}", EXIT_USAGE)
        except OSError as error:  # standard output closed or full, a broken pipe
            where = error.filename or "cannot write output"
            return _fail(f"{where}: {error.strerror or error}", EXIT_USAGE)
        except Exception as error:  # last resort: one line, the traceback with NORMFUSE_DEBUG=1
            if debugging():
                raise
            text = " ".join(str(error).split())[:200]
            return _fail(
                f"cannot process this input ({type(error).__name__}: {text}); set "
                "NORMFUSE_DEBUG=1 for the traceback",
                EXIT_USAGE,
            )


def _mistyped_command(argv: list[str]) -> str | None:
    """For `normfuse valdate ...` or `normfuse --validate ...`: a line naming the command meant."""
    if not argv or argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version"):
        return None
    word = argv[0].lstrip("-")
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown command {argv[0]!r}{hint} (commands: {', '.join(COMMANDS)})"


def _run(args: argparse.Namespace) -> int:
    if args.command == "optimize":
        return _optimize(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "tune":
        return _tune(args)
    return _inspect(args)


def _input_hint(args: argparse.Namespace) -> str:
    """`inputs.input_hint` for the --dims and --inputs this command was given."""
    try:
        dims = parse_dims(getattr(args, "dims", None))
    except NormfuseError:
        dims = {}
    npz = getattr(args, "inputs", None)
    return input_hint(dims, None if npz is None else str(npz))


def _fail(message: str, code: int) -> int:
    """Print `normfuse: error: message` and return `code`; standard output, if it failed, is
    pointed at /dev/null so that the interpreter's exit flush stays silent."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        _silence_stdout()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"normfuse: error: {printable(message)}", file=sys.stderr)
    return code


def _check_standard_streams() -> None:
    """Descriptors 0-2 are kept open (on /dev/null) so that no output file can take their
    number; a closed standard output is an error."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if 1 in closed or sys.stdout is None:
        raise NormfuseError("standard output is closed")


def _silence_stdout() -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        return


def _validation_options(args: argparse.Namespace) -> normfuse.ValidationOptions:
    for name in ("atol", "rtol"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise NormfuseError(f"--{name} must be a finite number >= 0, got {value}")
    return normfuse.ValidationOptions(
        providers=tuple(parse_providers(args.providers)),
        dims=parse_dims(args.dims),
        seed=_seed(args),
        npz=None if args.inputs is None else str(args.inputs),
        atol=args.atol,
        rtol=args.rtol,
    )


def _seed(args: argparse.Namespace) -> int:
    if not 0 <= args.seed <= MAX_SEED:
        raise NormfuseError(f"--seed must be between 0 and {MAX_SEED}, got {args.seed}")
    return args.seed


def _load(path: Path) -> tuple[LoadedModel, set[Path]]:
    """A model and the files it was read from (never to be written)."""
    loaded = normfuse.model_io.load(path)
    return loaded, {path, *external_files(loaded.model, loaded.base_dir)}


def _optimize(args: argparse.Namespace) -> int:
    _check_optimize_options(args)
    models = batch.expand_inputs(args.models)
    several = batch.is_batch(args.models)
    if several:
        destinations = batch.output_paths(models, args.output, args.in_place)
        check_dims_across(models, parse_dims(args.dims))
    else:
        destinations = [_output_path(args, models[0])]
    loaded: list[LoadedModel | NormfuseError] = []
    protected: set[Path] = set()
    for model in models:
        try:
            item, files = _load(model)
        except NormfuseError as error:
            if not several:
                raise
            loaded.append(error)
            continue
        loaded.append(item)
        # MODEL itself may be replaced with --in-place, its external data never
        protected |= external_files(item.model, item.base_dir) if args.in_place else files
    stream = _human_stream(args)
    with OutputPlan(protected) as plan:
        label = "--in-place" if args.in_place else "-o"
        planned = [
            None
            if isinstance(item, NormfuseError)
            else plan_save(
                plan,
                output,
                item.model,
                item.base_dir,
                label,
                args.in_place,
                reference=args.reference_input_data,
            )
            for item, output in zip(loaded, destinations, strict=True)
        ]
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        plot_path = _plan_plot(plan, args) if args.bench else None
        if args.bench or args.tune_for:
            _bench_options(args)  # bad timing options fail before any work
        if not several:
            outcome = _optimize_one(args, models[0], loaded[0], planned[0], plan, stream, plot_path)
            record = outcome.report.as_dict() if outcome.report else {}
            text = json.dumps({**record, **outcome.extra}, indent=2) + "\n"
            _stage_text(plan, args.report, report_path, text)
            _commit(plan)
            if outcome.status == EXIT_OK:
                _said_after_commit(printable(f"wrote {planned[0]}"), stream)
            return outcome.status
        dims = parse_dims(args.dims)
        outcomes = []
        for model, item, destination in zip(models, loaded, planned, strict=True):
            if isinstance(item, NormfuseError):
                outcomes.append(batch.Outcome(model, destination, EXIT_USAGE, error=str(item)))
                continue
            if stream is sys.stdout and not args.quiet:  # progress, kept off stdout's table
                print(printable(f"{model} ..."), file=sys.stderr)
            own = argparse.Namespace(**{**vars(args), "dims": _own_dims(dims, model)})
            try:
                outcomes.append(_optimize_one(own, model, item, destination, plan, None, None))
            except NormfuseError as error:
                outcomes.append(batch.Outcome(model, destination, EXIT_USAGE, error=str(error)))
        print(batch.summary_table(outcomes, args.wide), file=stream)
        record = batch.combined_record(outcomes, normfuse.__version__)
        _stage_text(plan, args.report, report_path, json.dumps(record, indent=2) + "\n")
        _commit(plan)
    return batch.worst_status(outcomes)


def _check_optimize_options(args: argparse.Namespace) -> None:
    if args.output is not None and str(args.output) == STDOUT:
        raise NormfuseError("-o -: a model is not written to stdout; give a file or a folder")
    given = [name for name in TIMING_OPTIONS if getattr(args, name, None) not in (None, False)]
    allowed = set(TIMING_OPTIONS) if args.bench else {"quiet"}
    if args.tune_for:
        allowed |= {"warmup", "runs", "threads", "quiet"}
    refused = [name for name in given if name not in allowed]
    if refused:
        names = ", ".join(f"--{name.replace('_', '-')}" for name in refused)
        raise NormfuseError(f"{names}: timing options need --bench")
    if args.plot is not None and batch.is_batch(args.models):
        raise NormfuseError("--plot draws one model's timings; give one model")


def check_dims_across(models: list[Path], dims: dict[str, int]) -> None:
    """Refuse `--dims` names that no model of a batch has, where some model has symbolic dims
    (each model gets the ones it has; one with none gets all, and a note)."""
    known: set[str] = set()
    for model in models:
        known |= _symbolic_dims(model)
    unknown = sorted(set(dims) - known)
    if unknown and known:
        raise NormfuseError(
            f"--dims {', '.join(unknown)}: no input of any model has such a dimension; "
            f"their symbolic dims are: {', '.join(sorted(known)) or '(none)'}"
        )


def _symbolic_dims(path: Path) -> set[str]:
    try:
        model = normfuse.model_io.load(path).model
    except NormfuseError:
        return set()  # reported when the model itself is processed
    return symbolic_dims(model)


def _own_dims(dims: dict[str, int], model: Path) -> list[str]:
    """The `--dims` items a model of a batch has; all of them for a model without symbolic dims
    (which notes that it ignores them)."""
    own = _symbolic_dims(model)
    return [f"{name}={size}" for name, size in dims.items() if name in own or not own]


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


def _plan(
    plan: OutputPlan, path: str | Path | None, label: str, allow_stdout: bool = False
) -> Path | None:
    return None if path is None else plan.add(path, label, allow_stdout)


def _plan_plot(plan: OutputPlan, args: argparse.Namespace) -> Path | None:
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


def _stage_text(plan: OutputPlan, given: str | None, path: Path | None, text: str) -> None:
    """Stage `text` for `path`, or print it when the user gave `-` (standard output)."""
    if path is not None:
        plan.stage_bytes(path, text.encode())
    elif given is not None:
        print(text, end="" if text.endswith("\n") else "\n")


def _commit(plan: OutputPlan) -> list[Path]:
    """Write everything staged, once standard output has taken what was printed."""
    sys.stdout.flush()
    return plan.commit()


def _said_after_commit(text: str, stream) -> None:
    """Print a line after the commit: the work is done and written, so a reader that has gone
    (`| head`) changes nothing; the rest of what would go to standard output is dropped."""
    try:
        print(text, file=stream)
        stream.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


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

    options = _validation_options(args) if args.validate else None
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
        timings = run_bench(models, _bench_options(args))
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
    loaded, inputs = _load(args.model)
    with OutputPlan(inputs) as plan:
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        model = BenchModel(str(args.model), loaded.model, loaded.base_dir)
        report = tune(model, _bench_options(args))
        print(report.text(str(args.model), args.wide), file=_human_stream(args))
        data = {"model": str(args.model), **report.as_dict(str(args.model))}
        _stage_text(plan, args.report, report_path, json.dumps(data, indent=2) + "\n")
        _commit(plan)
    return EXIT_OK


def _bench_options(args: argparse.Namespace) -> BenchOptions:
    warmup = bench.WARMUP if args.warmup is None else args.warmup
    runs = bench.RUNS if args.runs is None else args.runs
    if not (0 <= warmup <= MAX_RUNS and 2 <= runs <= MAX_RUNS):
        raise NormfuseError(f"--warmup must be 0 to {MAX_RUNS} and --runs 2 to {MAX_RUNS}")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise NormfuseError(f"--threads must be 1 to {MAX_THREADS}, got {args.threads}")
    sessions = min(bench.SESSION_SETS, runs) if args.sessions is None else args.sessions
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
        seed=_seed(args),
        npz=None if args.inputs is None else str(args.inputs),
        progress=sys.stderr.isatty() and not args.quiet,
        sessions=sessions,
        time_budget=budget,
    )


def _bench(args: argparse.Namespace) -> int:
    loaded, inputs = [], set()
    for path in args.models:
        model, files = _load(path)
        loaded.append(model)
        inputs |= files
    models = [
        BenchModel(str(path), item.model, item.base_dir)
        for path, item in zip(args.models, loaded, strict=True)
    ]
    stream = _human_stream(args)
    with OutputPlan(inputs) as plan:
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        plot_path = _plan_plot(plan, args)
        report = run_bench(models, _bench_options(args))
        print(report.table(wide=args.wide), file=stream)
        _stage_text(plan, args.report, report_path, json.dumps(report.as_dict(), indent=2) + "\n")
        if plot_path is not None:
            plot_ratios(report, plan.temp_path(plot_path))
        _commit(plan)
    if plot_path is not None:
        _said_after_commit(printable(f"wrote {args.plot}"), stream)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    inputs = _load(args.original)[1] | _load(args.candidate)[1]
    stream = _human_stream(args)
    with OutputPlan(inputs) as plan:
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        options = _validation_options(args)
        report = normfuse.validate(args.original, args.candidate, options)
        print(report.table(args.wide), file=stream)
        data = {"original": str(args.original), "candidate": str(args.candidate)}
        text = json.dumps({**data, **report.as_dict()}, indent=2) + "\n"
        _stage_text(plan, args.report, report_path, text)
        _commit(plan)
    _said_after_commit("validation passed" if report.passed else "validation FAILED", stream)
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _output_path(args: argparse.Namespace, model: Path) -> Path:
    if args.in_place:
        return model
    if os.path.exists(args.output) and args.output.resolve() == model.resolve():
        raise NormfuseError("-o is the input model; use --in-place to replace it")
    return args.output


def _inspect(args: argparse.Namespace) -> int:
    loaded, inputs = _load(args.model)
    destination = STDOUT if args.json else args.report
    with OutputPlan(inputs) as plan:
        report_path = _plan(plan, destination, "--report", allow_stdout=True)
        report = normfuse.inspect(
            loaded.model,
            target=args.target,
            passes=args.passes,
            base_dir=loaded.base_dir,
            max_opset=args.max_opset,
        )
        report.input = str(args.model)
        if destination != STDOUT:
            types = tensor_types(loaded.model) if report.sites else {}
            existing = fused_norm_nodes(loaded.model)
            print(report.table(True, types, args.verbose, existing, args.wide))
        _stage_text(plan, destination, report_path, report.to_json())
        _commit(plan)
    if args.check and report.sites:
        print(
            f"normfuse: check failed: {len(report.sites)} fusable site(s) left unfused",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
