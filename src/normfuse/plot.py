"""One chart of a benchmark: each model's median latency as a ratio to the first model's, with its
95% interval, one row per model, provider and level in the table's order, on one shared axis
(needs matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

from normfuse.bench import EQUAL_WITHIN, BenchReport, display_names, format_seconds
from normfuse.errors import NormfuseError

COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "": "#57606a"}


def require_matplotlib() -> None:
    """Fail early, with the install command, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NormfuseError('--plot needs matplotlib: pip install "normfuse[plot]"') from None


def plot_ratios(report: BenchReport, path: Path) -> None:
    """Write the chart to `path` (PNG): the first model of each provider and level is the
    reference (a square at 1); the others are dots with their interval, green where faster beyond
    noise and 1%, red where slower, grey where equal; each row is labelled with its median."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timings = report.timings
    groups = list(dict.fromkeys((t.provider, t.level) for t in timings))
    first = [t for t in timings if (t.provider, t.level) == groups[0]]
    names, folder = display_names([t.model for t in first])
    rows = len(timings)
    figure, axis = plt.subplots(figsize=(8, 1.4 + 0.42 * rows))
    labels = []
    for row, timing in enumerate(timings):
        name = names[row % len(first)]
        reference = row % len(first) == 0
        y = rows - 1 - row
        labels.append((y, f"{name}  ({timing.provider}, {timing.level})"))
        median = format_seconds(float(sorted(timing.samples)[len(timing.samples) // 2]))
        if reference:
            axis.plot([1.0], [y], "s", color="black", markersize=7)
            axis.annotate(
                f"reference, median {median}",
                (1.0, y),
                xytext=(8, 6),
                textcoords="offset points",
                fontsize=8,
            )
            continue
        low, high = timing.ratio_interval
        colour = COLOURS[timing.verdict()]
        axis.errorbar(
            [timing.ratio],
            [y],
            xerr=[[timing.ratio - low], [high - timing.ratio]],
            fmt="o",
            color=colour,
            capsize=4,
        )
        axis.annotate(
            f"{timing.ratio:.3f} [{low:.3f}, {high:.3f}], median {median}",
            (timing.ratio, y),
            xytext=(8, 6),
            textcoords="offset points",
            fontsize=8,
            color=colour,
        )
    axis.axvspan(1 - EQUAL_WITHIN, 1 + EQUAL_WITHIN, color="#d0d7de", alpha=0.5, lw=0)
    axis.axvline(1.0, color="black", lw=0.8)
    for index in range(1, len(groups)):
        axis.axhline(rows - index * len(first) - 0.5, color="#d0d7de", lw=0.8)
    axis.set_yticks([y for y, _ in labels], [label for _, label in labels])
    axis.set_ylim(-0.7, rows - 0.3)
    lows = [t.ratio_interval[0] for t in timings] + [1 - 2 * EQUAL_WITHIN]
    highs = [t.ratio_interval[1] for t in timings] + [1 + 2 * EQUAL_WITHIN]
    span = max(highs) - min(lows)
    axis.set_xlim(min(lows) - 0.05 * span, max(highs) + 0.45 * span)
    axis.set_xlabel(
        "median latency / the first model's (95% interval); grey band: within "
        f"{EQUAL_WITHIN:.0%}, read as equal"
    )
    title = f"batch-one latency, intra-op threads: {report.threads}"
    axis.set_title(title + (f"\nmodels in {folder}" if folder else ""), fontsize=10)
    axis.grid(axis="x", color="#eaeef2")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
