"""Which of a tool's options to turn off so that its output passes a check, found by bisection.

Options are tried in their given order. With every option off the output must pass (the caller
checks that first); with the options still on it fails. A binary search over prefixes finds the
first option whose turning on, on top of a passing prefix, makes the output fail: that option
is turned off, with the failure it caused, and the search repeats on the options left until the
output passes. Each option turned off was seen to break a passing output; about log2(n) runs
find each one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

F = TypeVar("F")
Check = Callable[[frozenset[str]], F | None]


def options_to_turn_off(options: Sequence[str], check: Check) -> dict[str, F]:
    """The options (of `options`) to turn off, each with the failure that convicted it, so that
    `check(off)` (the failure with the options `off` turned off, or None) passes. `check` of
    every option off must pass."""
    off: dict[str, F] = {}
    while True:
        left = [option for option in options if option not in off]
        failure = check(frozenset(off))
        if failure is None:
            return off
        culprit, why = _first_breaking(left, off, failure, check)
        off[culprit] = why


def _first_breaking(left: list[str], off: dict[str, F], failure: F, check: Check) -> tuple[str, F]:
    """The option of `left` whose turning on (after those before it) first makes `check`
    fail, and that failure; with all of `left` on it fails with `failure`, with none it
    passes."""
    passing, failing, why = 0, len(left), failure  # prefixes on: `passing` passes, `failing` not
    while failing - passing > 1:
        middle = (passing + failing) // 2
        found = check(frozenset(off) | frozenset(left[middle:]))
        if found is None:
            passing = middle
        else:
            failing, why = middle, found
    return left[failing - 1], why
