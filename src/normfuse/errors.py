"""Errors that the command line reports as one line with exit code 2, and the guard that turns a
malformed model's unexpected failure inside the rewrite into one."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

DEBUG_VARIABLE = "NORMFUSE_DEBUG"


class NormfuseError(Exception):
    """An expected failure caused by the user's input (bad file, bad option)."""


def printable(text: str) -> str:
    """`text` on one line: every character that is not printable (a newline or carriage return
    in a file name, a terminal escape, a line separator) written as its Python escape."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def first_line(error: BaseException, width: int = 300) -> str:
    """The first line of an exception's message (its type's name when empty), at most `width`
    characters: what a one-line error shows of a library's multi-line message."""
    text = str(error).strip()
    return shorten(text.splitlines()[0], width) if text else type(error).__name__


def shorten(text: str, width: int) -> str:
    """`text` cut to at most `width` characters at a word boundary, ` ...` marking the cut."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width - 3)
    return text[: cut if cut > 0 else width - 4] + " ..."


def runtime_message(error: BaseException, width: int = 300) -> str:
    """ONNX Runtime's message on one line, without what precedes its status prefix
    (`[ONNXRuntimeError] : 1 : FAIL :`), the prefix itself, and the C++ source location it
    quotes, shortened at a word boundary."""
    text = " ".join(str(error).split())
    text = re.sub(r"^.*\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ", "", text)
    text = re.sub(r"/\S+\.(?:h|cc|cpp|cu):\d+ [\w:~]+\([^)]*\) ", "", text)
    return shorten(text, width) if text else type(error).__name__


def debugging() -> bool:
    """True when NORMFUSE_DEBUG=1: unexpected errors keep their traceback."""
    return os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def guard_rewrite() -> Iterator[None]:
    """Turn an unexpected exception raised while reading or rewriting a model (a malformed model
    the matcher trips over, a graph nested too deeply) into `NormfuseError`, so that nothing is
    fused and the caller gets the reason. With NORMFUSE_DEBUG=1 the exception passes unchanged."""
    try:
        yield
    except NormfuseError:
        raise
    except RecursionError:
        if debugging():
            raise
        raise NormfuseError(
            "the model nests too deeply to rewrite safely (a very long chain or recursion)"
        ) from None
    except Exception as error:
        if debugging():
            raise
        raise NormfuseError(
            f"the rewrite cannot handle this model safely ({type(error).__name__}: "
            f"{_one_line(error)}); set {DEBUG_VARIABLE}=1 for the traceback"
        ) from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."
