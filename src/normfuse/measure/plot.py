"""One chart of a benchmark: each model's median latency as a ratio to the first model's, with its
95% interval, one row per model, provider and level in the table's order, on one shared axis
(needs matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from normfuse.errors import NormfuseError
from normfuse.io.columns import display_names
from normfuse.measure.bench import (
    EQUAL_WITHIN,
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    BenchReport,
    format_seconds,
    run_keys,
)

COLOURS = {FASTER: "#1a7f37", SLOWER: "#cf222e", SAME: "#57606a", INCONCLUSIVE: "#9a6700"}


def require_matplotlib() -> None:
    """Fail early, with the install command, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NormfuseError('--plot needs matplotlib: pip install "normfuse[plot]"') from None


def plot_ratios(report: BenchReport, path: Path) -> None:
    """Write the chart to `path` (PNG): the first model of each side-by-side run is the
    reference (a square at 1); the others are dots with their interval, labelled with the table's
    words (`bench.verdict`) and their median: green faster, red slower, grey the same, amber
    inconclusive."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    timings = report.timings
    names, folder = display_names([t.model for t in timings], run_keys(timings))
    if not folder and len({Path(name).name for name in names}) == len(names):
        names = [Path(name).name for name in names]  # distinct file names: the chart's labels
    rows = len(timings)
    figure, axis = plt.subplots(figsize=(9, 1.3 + 0.45 * rows))
    right = blended_transform_factory(axis.transAxes, axis.transData)
    labels = []
    for row, timing in enumerate(timings):
        reference = timing.reference
        y = rows - 1 - row
        labels.append((y, f"{names[row]}  ({timing.provider}, {timing.level})"))
        if reference and row:
            axis.axhline(y + 0.5, color="#8c959f", lw=0.8)  # a new side-by-side run begins
        median = format_seconds(float(np.median(timing.samples)))
        low, high = timing.ratio_interval
        if reference:
            axis.plot([1.0], [y], "s", color="black", markersize=7)
            text, colour = f"reference (first model), median {median}", "black"
        else:
            colour = COLOURS[timing.verdict()]
            axis.errorbar(
                [timing.ratio],
                [y],
                xerr=[[timing.ratio - low], [high - timing.ratio]],
                fmt="o",
                color=colour,
                capsize=4,
            )
            text = f"{timing.ratio:.3f} [{low:.3f}, {high:.3f}] {timing.verdict()}, median {median}"
        axis.text(1.02, y, text, transform=right, va="center", fontsize=9, color=colour)
    axis.axvspan(1 - EQUAL_WITHIN, 1 + EQUAL_WITHIN, color="#d0d7de", alpha=0.5, lw=0)
    axis.axvline(1.0, color="black", lw=0.8)
    axis.set_yticks([y for y, _ in labels], [label for _, label in labels])
    axis.set_ylim(-0.7, rows - 0.3)
    lows = [t.ratio_interval[0] for t in timings] + [1 - 2 * EQUAL_WITHIN]
    highs = [t.ratio_interval[1] for t in timings] + [1 + 2 * EQUAL_WITHIN]
    margin = 0.08 * (max(highs) - min(lows))
    axis.set_xlim(min(lows) - margin, max(highs) + margin)
    axis.set_xlabel(
        "median latency / the first model's, with 95% interval (grey band: 1 ± "
        f"{EQUAL_WITHIN:.0%}, the same)"
    )
    where = f", models in {folder}" if folder else ""
    axis.set_title(f"batch-one latency, intra-op threads: {report.threads}{where}", fontsize=10)
    axis.grid(axis="x", color="#eaeef2")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
