"""ONNX Runtime sessions on named execution providers, with no silent fallback.

`cpu` and `cuda` name the CPU and CUDA execution providers; `openvino` names OpenVINO's CPU
runtime itself (openvino_runtime.py, the optional extra `normfuse[openvino]`), which has one
level. A provider that is not installed is an error that says how to get it, and a session that
ONNX Runtime quietly moved to another provider is an error too: a CUDA measurement that ran on the
CPU is worse than none.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort

from normfuse.errors import NormfuseError, first_line
from normfuse.prove import openvino_runtime

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def parse_providers(text: str | list[str] | None) -> list[str]:
    """Provider short names from `cpu,cuda` (default: cpu), checked against what is installed."""
    names = text if isinstance(text, list) else (text or "cpu").split(",")
    names = [name.strip().lower() for name in names if name.strip()]
    unknown = [n for n in names if n not in PROVIDERS and n != openvino_runtime.NAME]
    if unknown or not names:
        raise NormfuseError(
            f"unknown provider {', '.join(unknown) or '(none)'}; use cpu, cuda and/or openvino"
        )
    available = ort.get_available_providers()
    for name in names:
        if name == openvino_runtime.NAME:
            if not openvino_runtime.available():
                raise NormfuseError(f"openvino is not installed ({openvino_runtime.INSTALL})")
        elif PROVIDERS[name] not in available:
            raise NormfuseError(
                f"{PROVIDERS[name]} is not available in this onnxruntime ({ort.__version__}); "
                "for CUDA install onnxruntime-gpu instead of onnxruntime "
                "(pip uninstall -y onnxruntime && pip install --force-reinstall onnxruntime-gpu)"
            )
    return list(dict.fromkeys(names))


def levels_for(provider: str, levels: tuple[str, ...]) -> tuple[str, ...]:
    """The levels of `levels` that `provider` runs at: OpenVINO has only its own (`all`)."""
    return (openvino_runtime.LEVEL,) if provider == openvino_runtime.NAME else levels


def create(
    model: onnx.ModelProto | str | Path,
    provider: str,
    level: str = "disable",
    base_dir: Path | None = None,
) -> ort.InferenceSession:
    """A session for `model` on `provider` (short name) at optimisation `level`.

    A `ModelProto` whose weights are in external data reads them from `base_dir`. On `openvino`
    the session is OpenVINO's (with the same `run(None, feeds)`), at its one level.
    """
    if provider == openvino_runtime.NAME:
        return openvino_runtime.create(model, base_dir)
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.log_severity_level = 4  # errors come back as exceptions; none printed
    if base_dir is not None:
        options.add_session_config_entry(EXTERNAL_FOLDER_KEY, str(base_dir))
    return create_with_options(model, provider, options)


def create_with_options(
    model: onnx.ModelProto | str | Path,
    provider: str,
    options: ort.SessionOptions,
    disabled_optimizers: tuple[str, ...] = (),
) -> ort.InferenceSession:
    """A session on `provider` with `options`; refuses a session ORT moved to another provider."""
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        session = ort.InferenceSession(
            source,
            options,
            providers=[PROVIDERS[provider]],
            disabled_optimizers=list(disabled_optimizers) or None,
        )
    except Exception as error:  # ORT raises its own exception types
        raise NormfuseError(f"ONNX Runtime cannot load the model: {first_line(error)}") from None
    actual = session.get_providers()[0]
    if actual != PROVIDERS[provider]:
        raise NormfuseError(
            f"ONNX Runtime put the session on {actual}, not {PROVIDERS[provider]} (it could not "
            "create that provider: for CUDA, the machine's driver, CUDA and cuDNN must match "
            "onnxruntime-gpu's; ONNX Runtime's own log says which, with NORMFUSE_DEBUG=1)"
        )
    return session
