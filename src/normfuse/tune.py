"""`normfuse.tune`, the public face of `normfuse.measure.tune`: try ONNX Runtime session settings
on a model and report the fastest (`tune`; docs/python-api.md)."""

from normfuse.measure.tune import tune

__all__ = ["tune"]
