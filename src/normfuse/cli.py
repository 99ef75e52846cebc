"""The `normfuse` command line: parse, call the API, print, and choose the exit code.

Exit codes: 0 success; 1 a check failed (numerics differ, `inspect --check` found unfused sites);
2 bad usage or an input that cannot be used. Expected errors print one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from onnx_graphsurgeon.logger.logger import G_LOGGER

import normfuse
from normfuse.bench import BenchModel, BenchOptions
from normfuse.bench import run as run_bench
from normfuse.errors import NormfuseError
from normfuse.inputs import parse_dims
from normfuse.plot import plot_latencies, require_matplotlib
from normfuse.sessions import parse_providers
from normfuse.tune import tune

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="normfuse", description=normfuse.__doc__.splitlines()[0])
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
    """Run the command line; returns the exit code."""
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
    output = _output_path(args)
    options = _validation_options(args) if args.validate else None
    result = normfuse.optimize(
        args.model,
        target=args.target,
        passes=args.passes,
        validation=options,
        tune_for=args.tune_for,
    )
    report = result.report
    if report.validation is not None and not report.validation.passed:
        print(report.table())
        print(f"normfuse: validation failed; {output} not written", file=sys.stderr)
        if args.report:
            _write_report(args.report, report.to_json())
        return EXIT_CHECK_FAILED
    report.output = str(output)
    normfuse.save(result, output)
    if args.report:
        _write_report(args.report, report.to_json())
    print(report.table())
    print(f"wrote {output}")
    if args.bench:
        original = normfuse.model_io.load(args.model)
        models = [
            BenchModel("original", original.model, original.base_dir),
            BenchModel("normfuse", result.model, result.base_dir),
        ]
        _run_bench(models, args)
    if args.tune_for:
        _print_session_hint(BenchModel(str(output), result.model, result.base_dir), args)
    return EXIT_OK


def _print_session_hint(model: BenchModel, args: argparse.Namespace) -> None:
    """One line when ORT session settings beat ORT's default on the result beyond noise."""
    options = dataclasses.replace(_bench_options(args), providers=(args.tune_for,))
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
    loaded = normfuse.model_io.load(args.model)
    model = BenchModel(str(args.model), loaded.model, loaded.base_dir)
    report = tune(model, _bench_options(args))
    print(report.text(str(args.model)))
    if args.timings_json:
        data = {"model": str(args.model), **report.as_dict(str(args.model))}
        _write_report(args.timings_json, json.dumps(data, indent=2) + "\n")
    return EXIT_OK


def _bench_options(args: argparse.Namespace) -> BenchOptions:
    if args.warmup < 0 or args.runs < 2:
        raise NormfuseError("--warmup must be >= 0 and --runs >= 2")
    return BenchOptions(
        providers=tuple(parse_providers(args.providers)),
        levels=tuple(dict.fromkeys(getattr(args, "level", None) or ["all"])),
        warmup=args.warmup,
        runs=args.runs,
        threads=args.threads,
        dims=parse_dims(args.dims),
        seed=args.seed,
        npz=None if args.inputs is None else str(args.inputs),
        progress=sys.stderr.isatty() and not args.quiet,
    )


def _run_bench(models: list[BenchModel], args: argparse.Namespace) -> None:
    options = _bench_options(args)
    if args.plot is not None:
        require_matplotlib()
    report = run_bench(models, options)
    print(report.table())
    if args.timings_json:
        _write_report(args.timings_json, json.dumps(report.as_dict(), indent=2) + "\n")
    if args.plot is not None:
        plot_latencies(report, args.plot)
        print(f"wrote {args.plot}")


def _bench(args: argparse.Namespace) -> int:
    loaded = [normfuse.model_io.load(path) for path in args.models]
    names = [str(path) for path in args.models]
    models = [
        BenchModel(name, item.model, item.base_dir)
        for name, item in zip(names, loaded, strict=True)
    ]
    _run_bench(models, args)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    report = normfuse.validate(args.original, args.candidate, _validation_options(args))
    print(report.table())
    if args.report:
        data = {
            "original": str(args.original),
            "candidate": str(args.candidate),
            **report.as_dict(),
        }
        _write_report(args.report, json.dumps(data, indent=2) + "\n")
    print("validation passed" if report.passed else "validation FAILED")
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _output_path(args: argparse.Namespace) -> Path:
    if args.in_place:
        if args.output is not None and args.output.resolve() != args.model.resolve():
            raise NormfuseError("--in-place writes MODEL itself; do not also give -o elsewhere")
        return args.model
    if args.output is None:
        raise NormfuseError("give -o OUT (or --in-place to replace MODEL)")
    if args.output.exists() and args.output.resolve() == args.model.resolve():
        raise NormfuseError("-o is the input model; use --in-place to replace it")
    return args.output


def _write_report(path: Path, text: str) -> None:
    if not path.resolve().parent.is_dir():
        raise NormfuseError(f"{path}: report folder does not exist")
    path.write_text(text)


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
