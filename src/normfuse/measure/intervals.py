"""The statistics behind a bench verdict: each session set's ratio of medians (paired rounds as
units), an interval over the sets' log ratios (Student's t, counting a repeat's error too) widened
to hold each half of the sets, and the t quantiles it needs without SciPy."""

from __future__ import annotations

import functools
import math

import numpy as np


def ratio_with_interval(
    base: np.ndarray, other: np.ndarray, blocks: np.ndarray | None = None
) -> tuple[float, tuple[float, float]]:
    """median(other) / median(base), and a 95% interval for the ratio a repeat of this bench
    would measure (`blocks`: the session set of each sample; None: one set): Student's t on the
    spread of the units' log ratios (`unit_log_ratios`), the standard error counted for this
    bench and for the repeat (a factor of √2), centred on the ratio, then widened where needed
    to hold the ratio of each half of the units (`half_of_each`). It holds the true ratio with
    about 99% confidence; a ratio it places beyond the band is one a repeat would also see."""
    ratio = float(np.median(other) / np.median(base))
    if base is other or np.array_equal(base, other):
        return 1.0, (1.0, 1.0)
    if base.size < 2:  # one round: no spread to measure (and no word: one set)
        return ratio, (ratio, ratio)
    units = sample_units(np.zeros(base.size, int) if blocks is None else blocks)
    logs = unit_log_ratios(base, other, units)
    spread = t_quantile(0.975, logs.size - 1) * logs.std(ddof=1) * math.sqrt(2 / logs.size)
    low, high = ratio * math.exp(-spread), ratio * math.exp(spread)
    halves = half_of_each(logs.size)[units]
    for half in (0, 1):
        chosen = halves == half
        half_ratio = float(np.median(other[chosen]) / np.median(base[chosen]))
        low, high = min(low, half_ratio), max(high, half_ratio)
    return ratio, (low, high)


def sample_units(blocks: np.ndarray) -> np.ndarray:
    """The unit (0, 1, ...) each sample belongs to: its session set, or its own round where all
    samples come from one set (the interval then covers rounds only)."""
    values = np.unique(blocks)
    return np.arange(blocks.size) if values.size == 1 else np.searchsorted(values, blocks)


def unit_log_ratios(base: np.ndarray, other: np.ndarray, units: np.ndarray) -> np.ndarray:
    """log(median(other) / median(base)) within each unit (0, 1, ...), in unit order."""
    order = np.argsort(units, kind="stable")
    bounds = np.flatnonzero(np.diff(units[order])) + 1
    if bounds.size == units.size - 1:  # a unit per round
        return np.log(other[order] / base[order])
    groups = np.split(order, bounds)
    return np.log([np.median(other[group]) / np.median(base[group]) for group in groups])


def half_of_each(count: int) -> np.ndarray:
    """The half (0 or 1) of each of `count` units in time order: consecutive pairs alternate
    between halves (a set and the next, which reverses its creation order, stay together so the
    order's drift cancels within each half, and each half spans the whole run); with fewer than
    four units, the units alternate."""
    index = np.arange(count)
    return (index // 2) % 2 if count >= 4 else index % 2


@functools.lru_cache
def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile with `df` degrees of freedom, from its density integrated on a fine
    grid (within about 1e-4; no SciPy)."""
    grid = np.linspace(0.0, 64.0, 256_001)
    log_scale = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_scale - (df + 1) / 2 * np.log1p(grid**2 / df))
    steps = (density[1:] + density[:-1]) / 2 * np.diff(grid)
    cumulative = 0.5 + np.concatenate([[0.0], np.cumsum(steps)])
    return float(np.interp(probability, cumulative, grid))
