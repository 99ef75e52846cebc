"""The `normfuse` command line: parse, call the API, print, and choose the exit code.

Exit codes: 0 success; 1 a check failed (numerics differ, `inspect --check` found unfused sites);
2 bad usage or an input that cannot be used. Expected errors print one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import onnxruntime as ort
from onnx_graphsurgeon.logger.logger import G_LOGGER
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import normfuse
from normfuse import outputs
from normfuse.bench import BenchModel, BenchOptions
from normfuse.bench import run as run_bench
from normfuse.errors import NormfuseError, debugging
from normfuse.inputs import parse_dims
from normfuse.model_io import LoadedModel, external_files, plan_save, stage_save
from normfuse.outputs import OutputPlan
from normfuse.plot import plot_latencies, require_matplotlib
from normfuse.sessions import parse_providers
from normfuse.tune import tune

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
MAX_RUNS, MAX_THREADS, MAX_SEED = 1_000_000, 1024, 2**63 - 1
_ORT_ERRORS = tuple(
    getattr(ort_state, name)
    for name in ("Fail", "InvalidArgument", "RuntimeException", "NotImplemented", "EPFail")
    if hasattr(ort_state, name)
)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"normfuse: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(prog="normfuse", description=normfuse.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"normfuse {normfuse.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_optimize(commands.add_parser("optimize", help="fuse norm subgraphs, write a new model"))
    _add_inspect(commands.add_parser("inspect", help="list fusable sites and near-misses"))
    _add_validate(commands.add_parser("validate", help="compare a candidate with the original"))
    _add_bench(commands.add_parser("bench", help="batch-one latency of models, side by side"))
    _add_tune(commands.add_parser("tune", help="fastest ORT session settings, by measurement"))
    return parser


def _add_model_options(sub: argparse.ArgumentParser) -> None:
    from normfuse.passes import DEFAULT_PASS_NAMES, PASS_NAMES

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


def _add_optimize(sub: argparse.ArgumentParser) -> None:
    _add_model_options(sub)
    sub.add_argument("-o", "--output", type=Path, help="where to write the optimised model")
    sub.add_argument("--in-place", action="store_true", help="replace MODEL itself")
    sub.add_argument("--report", type=Path, help="write the JSON report to this file")
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
        help="choose each site's form (Skip* or not, fused or not) by timing there",
    )
    _add_input_options(sub)
    _add_tolerance_options(sub)
    _add_bench_options(sub)


def _add_inspect(sub: argparse.ArgumentParser) -> None:
    _add_model_options(sub)
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_argument(
        "--check", action="store_true", help="exit 1 if any fusable site is left unfused in MODEL"
    )


def _add_validate(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("original", type=Path)
    sub.add_argument("candidate", type=Path)
    sub.add_argument("--report", type=Path, help="write the JSON result to this file")
    _add_input_options(sub)
    _add_tolerance_options(sub)


def _add_bench(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("models", type=Path, nargs="+", metavar="MODEL")
    _add_input_options(sub)
    _add_bench_options(sub)


def _add_tune(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("model", type=Path)
    _add_input_options(sub)
    _add_bench_options(sub, levels=False, plot=False)


def _add_input_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--providers", default="cpu", help="cpu, cuda or cpu,cuda (default cpu)")
    sub.add_argument(
        "--dims",
        action="append",
        metavar="NAME=N",
        help="symbolic dimension sizes; repeatable or comma-separated",
    )
    sub.add_argument("--inputs", type=Path, metavar="FILE.npz", help="input arrays by name")
    sub.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")


def _add_tolerance_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--atol", type=float, help="absolute tolerance (default: by output dtype)")
    sub.add_argument("--rtol", type=float, help="relative tolerance (default: by output dtype)")


def _add_bench_options(
    sub: argparse.ArgumentParser, levels: bool = True, plot: bool = True
) -> None:
    sub.add_argument("--warmup", type=int, default=20, help="untimed runs each (default 20)")
    sub.add_argument("--runs", type=int, default=200, help="timed runs each (default 200)")
    sub.add_argument("--threads", type=int, help="intra-op threads (default: ORT's default)")
    if levels:
        sub.add_argument(
            "--level",
            action="append",
            choices=["disable", "basic", "extended", "all"],
            help="ORT optimisation level; repeatable (default all)",
        )
    sub.add_argument(
        "--json", dest="timings_json", type=Path, metavar="FILE", help="timings as JSON"
    )
    if plot:
        sub.add_argument("--plot", type=Path, metavar="FILE.png", help="latency distributions")
    sub.add_argument("--quiet", action="store_true", help="no progress display")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code. Every error is one line on stderr; SIGINT
    and SIGTERM remove what was staged and exit 130 and 143 (see `normfuse.outputs`)."""
    args = build_parser().parse_args(argv)
    G_LOGGER.severity = G_LOGGER.ERROR  # onnx-graphsurgeon's warnings are not ours to print
    ort.set_default_logger_severity(4)  # ORT's errors arrive as exceptions: one line, ours
    with outputs.terminate_as_exception():
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
            text = " ".join(str(error).split())[:300]
            return _fail(f"ONNX Runtime failed ({text}); check --dims and --inputs", EXIT_USAGE)
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


def _fail(message: str, code: int) -> int:
    """Print `normfuse: error: message` and return `code`; standard output, if it failed, is
    pointed at /dev/null so that the interpreter's exit flush stays silent."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        _silence_stdout()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"normfuse: error: {message}", file=sys.stderr)
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
    output = _output_path(args)
    loaded, inputs = _load(args.model)
    if args.in_place:  # MODEL itself may be replaced, its external data never
        inputs = external_files(loaded.model, loaded.base_dir)
    with OutputPlan(inputs) as plan:
        label = "--in-place" if args.in_place else "-o"
        output = plan_save(plan, output, loaded.model, loaded.base_dir, label, args.in_place)
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        bench_outputs = _plan_bench_outputs(plan, args) if args.bench else (None, None)
        options = _validation_options(args) if args.validate else None
        bench_options = _bench_options(args) if args.bench or args.tune_for else None
        result = normfuse.optimize(
            loaded.model,
            target=args.target,
            passes=args.passes,
            base_dir=loaded.base_dir,
            validation=options,
            tune_for=args.tune_for,
        )
        report = result.report
        report.input = str(args.model)
        if report.validation is not None and not report.validation.passed:
            print(report.table())
            _stage_text(plan, args.report, report_path, report.to_json())
            _commit(plan)
            print(f"normfuse: validation failed; {output} not written", file=sys.stderr)
            return EXIT_CHECK_FAILED
        report.output = str(output)
        stage_save(plan, result.model, output, result.base_dir)
        _stage_text(plan, args.report, report_path, report.to_json())
        print(report.table())
        if args.bench:
            original = BenchModel("original", loaded.model, loaded.base_dir)
            fused = BenchModel("normfuse", result.model, result.base_dir)
            _run_bench([original, fused], args, plan, *bench_outputs)
        if args.tune_for:
            bench_model = BenchModel(str(output), result.model, result.base_dir)
            _print_session_hint(bench_model, args, bench_options)
        _commit(plan)
    print(f"wrote {output}")
    return EXIT_OK


def _plan(
    plan: OutputPlan, path: Path | None, label: str, allow_stdout: bool = False
) -> Path | None:
    return None if path is None else plan.add(path, label, allow_stdout)


def _plan_bench_outputs(
    plan: OutputPlan, args: argparse.Namespace
) -> tuple[Path | None, Path | None]:
    """The `--json` and `--plot` destinations, checked (matplotlib and the image format too)."""
    timings = _plan(plan, args.timings_json, "--json")
    plot = getattr(args, "plot", None)
    if plot is None:
        return timings, None
    require_matplotlib()
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if plot.suffix.lstrip(".").lower() not in formats:
        raise NormfuseError(
            f"--plot {plot}: give a file name ending in one of .{', .'.join(sorted(formats))}"
        )
    return timings, plan.add(plot, "--plot")


def _stage_text(plan: OutputPlan, given: Path | None, path: Path | None, text: str) -> None:
    """Stage `text` for `path`, or print it when the user gave `-` (standard output)."""
    if path is not None:
        plan.stage_bytes(path, text.encode())
    elif given is not None:
        print(text, end="" if text.endswith("\n") else "\n")


def _commit(plan: OutputPlan) -> None:
    """Write everything staged, once standard output has taken what was printed."""
    sys.stdout.flush()
    plan.commit()


def _print_session_hint(
    model: BenchModel, args: argparse.Namespace, bench_options: BenchOptions | None
) -> None:
    """One line when ORT session settings beat ORT's default on the result beyond noise."""
    assert bench_options is not None
    options = dataclasses.replace(bench_options, providers=(args.tune_for,))
    result = tune(model, options).results[0]
    if result.beats_default:
        timing = result.timings[result.configs.index(result.best)]
        low, high = timing.ratio_interval
        print(
            f"hint: on {args.tune_for}, ORT session settings '{result.best.label}' ran the result "
            f"in {timing.ratio:.2f}x the time of ORT's default [{low:.2f}, {high:.2f}]; "
            f"`normfuse tune {model.name}` prints the code"
        )


def _tune(args: argparse.Namespace) -> int:
    loaded, inputs = _load(args.model)
    with OutputPlan(inputs) as plan:
        timings_path = _plan(plan, args.timings_json, "--json")
        model = BenchModel(str(args.model), loaded.model, loaded.base_dir)
        report = tune(model, _bench_options(args))
        print(report.text(str(args.model)))
        if timings_path is not None:
            data = {"model": str(args.model), **report.as_dict(str(args.model))}
            plan.stage_bytes(timings_path, (json.dumps(data, indent=2) + "\n").encode())
        _commit(plan)
    return EXIT_OK


def _bench_options(args: argparse.Namespace) -> BenchOptions:
    if not (0 <= args.warmup <= MAX_RUNS and 2 <= args.runs <= MAX_RUNS):
        raise NormfuseError(f"--warmup must be 0 to {MAX_RUNS} and --runs 2 to {MAX_RUNS}")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise NormfuseError(f"--threads must be 1 to {MAX_THREADS}, got {args.threads}")
    return BenchOptions(
        providers=tuple(parse_providers(args.providers)),
        levels=tuple(dict.fromkeys(getattr(args, "level", None) or ["all"])),
        warmup=args.warmup,
        runs=args.runs,
        threads=args.threads,
        dims=parse_dims(args.dims),
        seed=_seed(args),
        npz=None if args.inputs is None else str(args.inputs),
        progress=sys.stderr.isatty() and not args.quiet,
    )


def _run_bench(
    models: list[BenchModel],
    args: argparse.Namespace,
    plan: OutputPlan,
    timings_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Time `models`, print the table and stage `--json` and `--plot` (the caller commits)."""
    report = run_bench(models, _bench_options(args))
    print(report.table())
    if timings_path is not None:
        text = json.dumps(report.as_dict(), indent=2) + "\n"
        plan.stage_bytes(timings_path, text.encode())
    if plot_path is not None:
        plot_latencies(report, plan.temp_path(plot_path))


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
    with OutputPlan(inputs) as plan:
        timings_path, plot_path = _plan_bench_outputs(plan, args)
        _run_bench(models, args, plan, timings_path, plot_path)
        _commit(plan)
    if plot_path is not None:
        print(f"wrote {args.plot}")
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    inputs = _load(args.original)[1] | _load(args.candidate)[1]
    with OutputPlan(inputs) as plan:
        report_path = _plan(plan, args.report, "--report", allow_stdout=True)
        options = _validation_options(args)
        report = normfuse.validate(args.original, args.candidate, options)
        print(report.table())
        data = {"original": str(args.original), "candidate": str(args.candidate)}
        text = json.dumps({**data, **report.as_dict()}, indent=2) + "\n"
        _stage_text(plan, args.report, report_path, text)
        _commit(plan)
    print("validation passed" if report.passed else "validation FAILED")
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _output_path(args: argparse.Namespace) -> Path:
    if args.in_place:
        if args.output is not None and args.output.resolve() != args.model.resolve():
            raise NormfuseError("--in-place writes MODEL itself; do not also give -o elsewhere")
        return args.model
    if args.output is None:
        raise NormfuseError("give -o OUT (or --in-place to replace MODEL)")
    if os.path.exists(args.output) and args.output.resolve() == args.model.resolve():
        raise NormfuseError("-o is the input model; use --in-place to replace it")
    return args.output


def _inspect(args: argparse.Namespace) -> int:
    report = normfuse.inspect(args.model, target=args.target, passes=args.passes)
    if args.json:
        print(report.to_json(), end="")
    else:
        print(report.table(sites=True))
    if args.check and report.sites:
        print(
            f"normfuse: check failed: {len(report.sites)} fusable site(s) left unfused",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
