"""The `normfuse` command line: parse, call the API, print, and choose the exit code.

Exit codes: 0 success; 1 a check failed (`inspect --check` found unfused sites); 2 bad usage or an
input that cannot be used. Expected errors print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import normfuse
from normfuse.errors import NormfuseError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    from normfuse.passes import PASS_NAMES

    parser = argparse.ArgumentParser(prog="normfuse", description=normfuse.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"normfuse {normfuse.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
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
            help=f"comma-separated passes to run (default: all of {','.join(PASS_NAMES)})",
        )

    optimize = commands.add_parser(
        "optimize", help="fuse normalisation subgraphs, write a new model"
    )
    common(optimize)
    optimize.add_argument("-o", "--output", type=Path, help="where to write the optimised model")
    optimize.add_argument("--in-place", action="store_true", help="replace MODEL itself")
    optimize.add_argument("--report", type=Path, help="write the JSON report to this file")

    inspect = commands.add_parser(
        "inspect", help="list fusable sites and near-misses; write nothing"
    )
    common(inspect)
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument(
        "--check", action="store_true", help="exit 1 if any fusable site is left unfused in MODEL"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "optimize":
            return _optimize(args)
        return _inspect(args)
    except NormfuseError as error:
        print(f"normfuse: error: {error}", file=sys.stderr)
        return EXIT_USAGE


def _optimize(args: argparse.Namespace) -> int:
    output = _output_path(args)
    result = normfuse.optimize(args.model, target=args.target, passes=args.passes)
    result.report.output = str(output)
    normfuse.save(result, output)
    if args.report:
        _write_report(args.report, result.report.to_json())
    print(result.report.table())
    print(f"wrote {output}")
    return EXIT_OK


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
        print(report.table())
    if args.check and report.sites:
        print(
            f"normfuse: check failed: {len(report.sites)} fusable site(s) left unfused",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
