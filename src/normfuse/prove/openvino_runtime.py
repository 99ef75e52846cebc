"""OpenVINO (CPU) as a second runtime for `validate`, `optimize --validate` and `bench`.

`--providers openvino` runs a model with the `openvino` package (the optional extra
`normfuse[openvino]`) instead of ONNX Runtime. OpenVINO has no switch to turn its graph
transformations off (it re-fuses decomposed norms itself), so it has one level, `all`; inference
precision is pinned to f32 (its CPU plugin would otherwise pick bf16 where the processor has it),
so that numerics compare what the model computes, not a precision the runtime chose.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from normfuse.errors import NormfuseError, first_line
from normfuse.io.model_io import external_tensors

NAME = "openvino"
LEVEL = "all"
INSTALL = 'pip install "normfuse[openvino]"'
# OpenVINO's own normalisation operations in a compiled model's runtime graph.
NORM_OPS = frozenset({"MVN", "RMS", "NormalizeL2", "LayerNorm", "GroupNormalization"})


def available() -> bool:
    """True if the `openvino` package can be imported."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


class Session:
    """A compiled OpenVINO model with ONNX Runtime's `run(None, feeds)` call."""

    def __init__(self, compiled, output_names: list[str]) -> None:
        self.compiled = compiled
        self._request = compiled.create_infer_request()
        self._outputs = [compiled.output(name) for name in output_names]

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list:
        """Every output (`output_names` must be None), in the ONNX graph's order."""
        if output_names is not None:
            raise NormfuseError("the OpenVINO session runs every output (pass None)")
        results = self._request.infer(feeds)
        return [np.array(results[output], copy=True) for output in self._outputs]

    def norm_ops(self) -> dict[str, int]:
        """OpenVINO's normalisation operations in the compiled graph (what it fused)."""
        graph = self.compiled.get_runtime_model()
        types = Counter(op.get_rt_info()["layerType"].astype(str) for op in graph.get_ops())
        return {name: count for name, count in sorted(types.items()) if name in NORM_OPS}


def create(
    model: onnx.ModelProto | str | Path, base_dir: Path | None = None, threads: int | None = None
) -> Session:
    """`model` compiled for OpenVINO's CPU plugin at f32 precision (`threads`: its
    inference threads; None: OpenVINO's default). Weights in external data are read from
    `base_dir`."""
    try:
        import openvino as ov
    except ImportError:
        raise NormfuseError(f"the openvino package is not installed ({INSTALL})") from None
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    if base_dir is not None and any(True for _ in external_tensors(proto)):
        loaded = onnx.ModelProto()
        loaded.CopyFrom(proto)
        onnx.external_data_helper.load_external_data_for_model(loaded, str(base_dir))
        proto = loaded
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        try:
            compiled = ov.Core().compile_model(str(path), "CPU", config)
        except Exception as error:  # OpenVINO raises its own exception types
            raise NormfuseError(f"OpenVINO cannot load the model: {first_line(error)}") from None
    return Session(compiled, [info.name for info in proto.graph.output])
