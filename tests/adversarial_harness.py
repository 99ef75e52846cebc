"""Running and comparing models for the adversarial corpus and the differential fuzzer."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

TOLERANCES = {np.float16: (1e-2, 1e-2), np.float32: (1e-4, 1e-4), np.float64: (1e-6, 1e-6)}
FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}


def session(m: onnx.ModelProto) -> ort.InferenceSession:
    """CPU session, every graph optimisation disabled, warnings silenced."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])


def narrowest_float(m: onnx.ModelProto):
    """The narrowest float type of the model's graph inputs, outputs and initializers."""
    elems = [i.type.tensor_type.elem_type for i in [*m.graph.input, *m.graph.output]]
    elems += [t.data_type for t in m.graph.initializer]
    if TensorProto.FLOAT16 in elems:
        return np.float16
    if TensorProto.FLOAT in elems:
        return np.float32
    return np.float64


def _to_double_graph(graph: onnx.GraphProto) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        t = info.type.tensor_type
        if t.elem_type in FLOATS:
            t.elem_type = TensorProto.DOUBLE
    del graph.value_info[:]
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
            array = numpy_helper.to_array(tensor).astype(np.float64)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(array, tensor.name))
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i in FLOATS:
                attr.i = TensorProto.DOUBLE
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in FLOATS:
                attr.t.CopyFrom(
                    numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float64))
                )
            if attr.type == onnx.AttributeProto.GRAPH:
                _to_double_graph(attr.g)
        if (
            node.op_type == "Constant"
            and node.attribute
            and node.attribute[0].name
            in (
                "value_float",
                "value_floats",
            )
        ):
            attr = node.attribute[0]
            value = np.float64(attr.f) if attr.name == "value_float" else np.array(attr.floats)
            node.ClearField("attribute")
            node.attribute.append(
                onnx.helper.make_attribute("value", numpy_helper.from_array(value))
            )


def float64_model(m: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with every float tensor in float64 (None where it does not convert)."""
    if m.functions:
        return None
    out = copy.deepcopy(m)
    _to_double_graph(out.graph)
    try:
        session(out)
    except Exception:
        return None
    return out


@dataclass
class Comparison:
    ok: bool
    max_abs: float
    detail: str


def compare(originals, candidates, dtype, references=None, loosest: bool = False) -> Comparison:
    """Every output within atol + rtol*|original|, the tolerances of the output's own type (no
    looser than `dtype`'s, the model's narrowest float: a float32 output of a model that has
    float16 tensors gets float32's; with `loosest`, `dtype`'s for every output, for showing that
    two models differ). NaN/Inf are values: they must match, except where the original is not
    finite, the candidate is finite and a float64 reference says the candidate is right (a
    repair)."""
    worst, details = 0.0, []
    for index, (o, c) in enumerate(zip(originals, candidates, strict=True)):
        if o.shape != c.shape or o.dtype != c.dtype:
            return Comparison(
                False, float("inf"), f"output {index}: {c.dtype}{c.shape} vs {o.dtype}{o.shape}"
            )
        if not np.issubdtype(o.dtype, np.floating):
            if not np.array_equal(o, c):
                return Comparison(False, float("inf"), f"output {index}: integers differ")
            continue
        atol, rtol = TOLERANCES[dtype]
        if not loosest:
            atol, rtol = min((atol, rtol), TOLERANCES.get(o.dtype.type, (atol, rtol)))
        o64, c64 = o.astype(np.float64), c.astype(np.float64)
        same_special = (np.isnan(o64) & np.isnan(c64)) | (np.isinf(o64) & (o64 == c64))
        diff = np.abs(o64 - c64)
        close = (diff <= atol + rtol * np.abs(o64)) | same_special
        if references is not None:
            r64 = references[index].astype(np.float64)
            repaired = ~np.isfinite(o64) & np.isfinite(c64) & np.isfinite(r64)
            repaired &= np.abs(c64 - r64) <= 10 * (atol + rtol * np.abs(r64))
            close |= repaired
        if not close.all():
            finite = np.isfinite(diff)
            bad = ~close
            nan_mismatch = int((bad & ~finite).sum())
            value = float(diff[bad & finite].max()) if (bad & finite).any() else float("inf")
            worst = max(worst, value)
            details.append(
                f"output {index}: max abs diff {value:.3g}, {nan_mismatch} NaN/Inf mismatches"
            )
    return Comparison(not details, worst, "; ".join(details))


def case_config_params(cases, findings: dict, doc: str) -> list:
    """One pytest param per case and configuration of a corpus whose cases name their
    configurations (`case.configs`), strict xfail where `findings` (name -> (finding id,
    configurations)) says the case fails in that configuration (described in `doc`)."""
    params = []
    for case in cases:
        finding, failing = findings.get(case.name, ("", ()))
        for config in case.configs:
            marks = []
            if config in failing:
                marks.append(pytest.mark.xfail(strict=True, reason=f"{finding} ({doc})"))
            params.append(pytest.param(case.name, config, marks=marks, id=f"{case.name}-{config}"))
    return params
