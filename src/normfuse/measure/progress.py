"""The bench's progress line on a terminal: measured runs (warm-up separately), time elapsed and
an estimate of the time left, for this level and the whole run."""

from __future__ import annotations

import sys
import time


class Progress:
    """One stderr line, rewritten in place: warm-up rounds, then measured rounds with the time
    elapsed since measuring began and an estimate of the time left."""

    def __init__(
        self,
        label: str,
        runs: int,
        enabled: bool,
        later: int = 0,
        budget: float | None = None,
    ) -> None:
        self.label, self.runs, self.enabled = label, runs, enabled
        self.later, self.budget = later, budget
        self.started: float | None = None
        self.shown = 0.0
        self.width = 0

    def update(self, done: int, warmup: tuple[int, int] | None = None) -> None:
        """Called after each round: `done` measured rounds so far, and (round, of) while a session
        set warms up."""
        now = time.monotonic()
        if self.started is None and (done or (warmup and warmup[0] == warmup[1])):
            self.started = now
        if not self.enabled or (now - self.shown < 0.2 and done < self.runs):
            return
        self.shown = now
        if warmup is not None:
            text = progress_text(self.label, done, self.runs, 0.0, warmup)
        else:
            elapsed = now - (self.started if self.started is not None else now)
            text = progress_text(
                self.label, done, self.runs, elapsed, later=self.later, budget=self.budget
            )
        self.width = max(self.width, len(text))
        print("\r" + text.ljust(self.width), end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Erase the line."""
        if self.enabled and self.width:
            print("\r" + " " * self.width + "\r", end="", file=sys.stderr, flush=True)


def progress_text(
    label: str,
    done: int,
    runs: int,
    elapsed: float,
    warmup: tuple[int, int] | None = None,
    later: int = 0,
    budget: float | None = None,
) -> str:
    """`cpu/all: warm-up 3/20` or `cpu/all: run 50/200, 1.2 s elapsed, about 3.6 s left`, then,
    when `later` provider/level groups follow, the estimate for all of them (each taking as long
    as this one), and the budget per group when one is set."""
    if warmup is not None:
        return f"{label}: warm-up {warmup[0]}/{warmup[1]}"
    left = elapsed / done * (runs - done) if done else 0.0
    if budget is not None:
        left = min(left, max(budget - elapsed, 0.0))
    text = (
        f"{label}: run {done}/{runs}, {format_seconds(elapsed)} elapsed, "
        f"about {format_seconds(left)} left"
    )
    if later:
        total = left + later * (elapsed + left)
        text += f" here, about {format_seconds(total)} in all ({later} more level/provider)"
    if budget is not None:
        text += f"; budget {format_seconds(budget)} each"
    return text


def format_seconds(seconds: float) -> str:
    """`850 ns`, `12.3 us`, `4.56 ms`, `1.23 s`: three or four significant digits and a unit."""
    scales = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
    unit, scale = next(((u, f) for u, f in scales if abs(seconds) >= f), scales[-1])
    value = seconds / scale
    digits = 1 if value >= 100 else 2 if value >= 10 else 3
    return f"{value:.{digits}f} {unit}"
