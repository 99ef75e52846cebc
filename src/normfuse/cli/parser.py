"""The `normfuse` command line's arguments: every command, its options, help and examples, and
the exit codes. Imports no ONNX library, so `normfuse --help` starts fast."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import normfuse
from normfuse.errors import printable
from normfuse.match.pass_names import DEFAULT_PASS_NAMES, PASS_NAMES
from normfuse.measure import defaults

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2


EXIT_SIGINT, EXIT_SIGTERM = 130, 143


MAX_RUNS, MAX_THREADS = 1_000_000, 1024


MAX_TIME_BUDGET = 86_400.0  # seconds: a day


COMMANDS = ("optimize", "inspect", "validate", "bench", "tune")


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
        "normfuse optimize model.onnx -o fused.onnx --with ort-transformers",
        "normfuse optimize --manifest models.toml -o fused/ --validate  # dims per model",
    ],
    "inspect": [
        "normfuse inspect model.onnx",
        "normfuse inspect fused.onnx --check",
        "normfuse inspect models/                               # every *.onnx in models/",
    ],
    "validate": [
        "normfuse validate model.onnx fused.onnx --dims sequence=128",
        "normfuse validate --manifest models.toml fused/        # each with fused/<its name>",
    ],
    "bench": [
        "normfuse bench model.onnx fused.onnx --dims sequence=128 --plot bench.png",
        "normfuse bench --manifest models.toml fused/ --threads 1",
    ],
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


def _add_model_options(sub: argparse.ArgumentParser, manifest: bool = False) -> None:
    sub.add_argument(
        "models",
        type=Path,
        nargs="*" if manifest else "+",
        metavar="MODEL",
        help="ONNX model(s) to read; a folder stands for the *.onnx files in it"
        + (" (none with --manifest)" if manifest else ""),
    )
    if manifest:
        _add_manifest_option(sub)
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


def _add_manifest_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--manifest",
        type=Path,
        metavar="FILE",
        help="a .json or .toml list of models, each with its own settings (dims, inputs, seed, "
        "passes, ...); options given here are the defaults an entry overrides",
    )


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
    _add_model_options(sub, manifest=True)
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
        "--with",
        dest="with_stages",
        action="append",
        metavar="STAGE",
        help="run a tool before the passes, its output proved against MODEL and its failing "
        "options turned off (reported): ort-transformers[:MODEL_TYPE], ONNX Runtime's "
        "transformers optimizer (model type inferred unless given; loads on --providers; "
        "needs sympy)",
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
    sub.add_argument(
        "models",
        type=Path,
        nargs="*",
        metavar="MODEL",
        help="ORIGINAL CANDIDATE: the reference model (e.g. before optimize) and the model to "
        "check against it; with --manifest, none, or a folder holding each candidate under its "
        "model's file name",
    )
    _add_manifest_option(sub)
    _add_output_options(sub, "the comparison")
    _add_input_options(sub)
    _add_tolerance_options(sub)


def _add_bench(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "models",
        type=Path,
        nargs="*",
        metavar="MODEL",
        help="models with the same inputs; ratios are to the first; with --manifest, none, or a "
        "folder holding each candidate under its model's file name",
    )
    _add_manifest_option(sub)
    _add_input_options(sub)
    _add_bench_options(sub)


def _add_tune(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("model", type=Path, help="the ONNX model to time")
    _add_input_options(sub)
    _add_bench_options(sub, levels=False, plot=False)


def _add_input_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--providers", help="cpu, cuda, openvino or a list like cpu,openvino (default cpu)"
    )
    sub.add_argument(
        "--dims",
        action="append",
        metavar="NAME=N",
        help="symbolic dimension sizes; repeatable or comma-separated (unknown names are an error)",
    )
    sub.add_argument("--inputs", type=Path, metavar="FILE.npz", help="input arrays by name")
    sub.add_argument("--seed", type=int, help="seed for generated inputs (default 0)")


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
        "--warmup", type=int, help=f"untimed runs per session set (default {defaults.WARMUP})"
    )
    sub.add_argument("--runs", type=int, help=f"timed runs each (default {defaults.RUNS})")
    sub.add_argument("--threads", type=int, help="intra-op threads (default: ORT's default)")
    sub.add_argument(
        "--sessions",
        type=int,
        help=f"fresh sessions per model, runs split over them (default {defaults.SESSION_SETS}; "
        f"one per {defaults.MIN_RUNS_PER_SET} runs at most)",
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
