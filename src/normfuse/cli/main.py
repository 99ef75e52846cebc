"""The `normfuse` entry point: parse, run the command, and turn every error into one line on
stderr and an exit code (0 success; 1 a check failed; 2 bad usage or an input that cannot be
used; 130/143 interrupted). The ONNX libraries are imported only once the arguments parse."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys

from normfuse.cli.parser import COMMANDS, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, build_parser
from normfuse.errors import NormfuseError, debugging, printable, runtime_message
from normfuse.io import outputs


def program() -> int:
    """The `normfuse` executable (and `python -m normfuse`): `main` for a process that exits
    with the returned status, so SIGINT and SIGTERM stay ignored after the commit, through the
    interpreter's shutdown."""
    return main(keep_signals_ignored=True)


def main(argv: list[str] | None = None, keep_signals_ignored: bool = False) -> int:
    """Run the command line; returns the exit code. Every error is one line on stderr; SIGINT
    and SIGTERM before the commit remove what was staged and exit 130 and 143; from the commit on
    they are ignored and the command exits with its own status (see `normfuse.io.outputs`). The
    signal handlers are restored on return unless `keep_signals_ignored` and a commit ran."""
    argv = sys.argv[1:] if argv is None else list(argv)
    mistyped = _mistyped_command(argv)
    if mistyped:
        return _fail(mistyped, EXIT_USAGE)
    args = build_parser().parse_args(argv)
    try:  # the ONNX libraries, now that the command needs them (a second or two)
        import onnxruntime as ort
        from onnx_graphsurgeon.logger.logger import G_LOGGER

        from normfuse.cli import shared
    except KeyboardInterrupt:  # nothing is staged yet
        return _fail("interrupted (SIGINT) while starting; nothing written", EXIT_SIGINT)
    G_LOGGER.severity = G_LOGGER.ERROR  # onnx-graphsurgeon's warnings are not ours to print
    ort.set_default_logger_severity(2 if debugging() else 4)  # errors arrive as exceptions
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
        except shared.ORT_ERRORS as error:  # the model cannot run on these inputs (dims, dtypes)
            hint = shared.input_hint_for(args)
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
    """The command's module, imported now that the arguments parse, run on `args`."""
    if args.command == "optimize":
        from normfuse.cli.optimize_command import optimize

        return optimize(args)
    from normfuse.cli import commands

    run = {
        "validate": commands.validate_command,
        "bench": commands.bench_command,
        "tune": commands.tune_command,
        "inspect": commands.inspect_command,
    }
    return run[args.command](args)


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
