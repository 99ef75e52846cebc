"""Latency distributions drawn side by side (needs matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

from normfuse.bench import BenchReport
from normfuse.errors import NormfuseError


def require_matplotlib() -> None:
    """Fail early, with the install command, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NormfuseError('--plot needs matplotlib: pip install "normfuse[plot]"') from None


def plot_latencies(report: BenchReport, path: Path) -> None:
    """One box per model, grouped by provider and level, latencies in milliseconds."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(t.provider, t.level) for t in report.timings})
    figure, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for axis, (provider, level) in zip(axes[0], groups, strict=True):
        timings = [t for t in report.timings if (t.provider, t.level) == (provider, level)]
        axis.boxplot([t.samples * 1e3 for t in timings], showfliers=False)
        axis.set_xticks(
            range(1, len(timings) + 1), [Path(t.model).name[:20] for t in timings], rotation=20
        )
        axis.set_title(f"{provider}, ORT level {level}")
        axis.set_ylabel("latency (ms), batch 1")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
