"""normfuse: fuse decomposed normalisation subgraphs in ONNX models.

The public API: `optimize` rewrites a model and returns it with its report, `inspect` reports what
would be fused without changing anything, `validate` compares two models, and `save` writes a
model atomically; `normfuse.bench` (`run`, `BenchModel`, `BenchOptions`) times models side by
side and `normfuse.tune` (`tune`) tries ONNX Runtime session settings. docs/python-api.md
describes each. Everything is imported on first use, so `import normfuse` (and the command
line's `--help`) loads no ONNX library.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("normfuse")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

# Each public name and the module that defines it, imported on first use.
_PUBLIC = {
    "NormfuseError": "normfuse.errors",
    "OptimizeResult": "normfuse.driver.optimize",
    "Report": "normfuse.driver.report",
    "ValidationOptions": "normfuse.prove.validate",
    "inspect": "normfuse.driver.optimize",
    "optimize": "normfuse.driver.optimize",
    "save": "normfuse.driver.optimize",
    "validate": "normfuse.driver.optimize",
}
# Submodules of the public API, imported on first use.
_SUBMODULES = ("bench", "tune")

__all__ = [*sorted(_PUBLIC, key=str.lower), "__version__"]


def __getattr__(name: str) -> object:
    """The public API's names (`_PUBLIC`) and `normfuse.bench` / `normfuse.tune`, each imported
    on first use."""
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"normfuse.{name}")
    raise AttributeError(f"module 'normfuse' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API's names (what `__all__` lists, and the lazy submodules)."""
    return sorted({*__all__, *_SUBMODULES})
