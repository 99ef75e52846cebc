"""`normfuse.bench`, the public face of `normfuse.measure.bench`: time models side by side on the
same inputs (`run`, with `BenchModel` and `BenchOptions`; docs/python-api.md)."""

from normfuse.measure.bench import BenchModel, BenchOptions, BenchReport, run

__all__ = ["BenchModel", "BenchOptions", "BenchReport", "run"]
