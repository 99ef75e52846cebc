"""Known kernel hazards per provider are refused by construction (`match.kernel_hazards`): with
CUDA among the providers the output is for, no float16 Skip* op is emitted (ONNX Runtime's CUDA
Skip* kernels sum float16 squares in float16: onnxruntime issue 29034). The rule follows the
providers asked for, never the hardware: these tests need no GPU and run nothing on CUDA."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.errors import NormfuseError
from normfuse.match import kernel_hazards, reasons
from normfuse.match.context import Policy
from normfuse.match.records import Reject
from normfuse.target.targets import Target

HIDDEN = 32
F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
SKIP_OPS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}


def residual_rms(elem_type: int) -> onnx.ModelProto:
    """`SimplifiedLayerNormalization(a + s)` in `elem_type`, the sum also an output."""
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    shape = ["batch", 4, HIDDEN]
    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, HIDDEN).astype(dtype), "gamma")
    nodes = [
        helper.make_node("Add", ["a", "s"], ["sum"]),
        helper.make_node("SimplifiedLayerNormalization", ["sum", "gamma"], ["y"], epsilon=1e-6),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info(name, elem_type, shape) for name in ("a", "s")],
        [helper.make_tensor_value_info(name, elem_type, shape) for name in ("y", "sum")],
        [gamma],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _skip_ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node if node.op_type in SKIP_OPS]


def _reasons(result: normfuse.OptimizeResult) -> list[str]:
    return [miss.reason for miss in result.report.near_misses]


def test_float16_skip_form_is_refused_for_cuda() -> None:
    result = normfuse.optimize(residual_rms(F16), passes="skip-norm", providers=["cuda"])
    assert _skip_ops(result.model) == []
    assert _reasons(result) == ["provider-kernel-hazard"]
    (miss,) = result.report.near_misses
    assert "29034" in miss.detail and "SkipSimplifiedLayerNormalization" in miss.detail


def test_the_command_lines_providers_reach_the_rule() -> None:
    """`optimize --providers cuda` passes its providers as `stage_providers` (and validation's):
    the rule reads them without a stage, and without running anything on CUDA."""
    result = normfuse.optimize(residual_rms(F16), passes="skip-norm", stage_providers=["cuda"])
    assert _reasons(result) == ["provider-kernel-hazard"]


def test_cpu_alone_keeps_its_own_reason() -> None:
    """The CPU contract refuses float16 sums for another reason, unchanged."""
    result = normfuse.optimize(residual_rms(F16), passes="skip-norm")
    assert _reasons(result) == ["skip-float16-sum"]
    report = normfuse.inspect(residual_rms(F16), passes="skip-norm", providers=["CUDA"])
    assert [miss.reason for miss in report.near_misses] == ["provider-kernel-hazard"]


def test_float32_skip_form_still_fuses_for_cuda() -> None:
    """The rule is for float16 only: a float32 residual fuses with CUDA asked for, on a machine
    without a GPU (nothing is run on CUDA to decide)."""
    result = normfuse.optimize(residual_rms(F32), passes="skip-norm", providers=["cpu", "cuda"])
    assert _skip_ops(result.model) == ["SkipSimplifiedLayerNormalization"]
    assert result.report.near_misses == []
    assert_same_numerics(residual_rms(F32), result.model)


@pytest.mark.parametrize("op", sorted(SKIP_OPS))
def test_rule_table(op: str) -> None:
    with pytest.raises(Reject) as refused:
        kernel_hazards.refuse_hazards(("cpu", "cuda"), op, F16)
    assert refused.value.reason == "provider-kernel-hazard"
    kernel_hazards.refuse_hazards(("cpu", "openvino"), op, F16)  # no rule: nothing raised
    kernel_hazards.refuse_hazards(("cuda",), op, F32)
    kernel_hazards.refuse_hazards(("cuda",), "LayerNormalization", F16)


def test_every_rule_is_a_registered_reason_and_cpu_is_the_default() -> None:
    assert {rule.code for rule in kernel_hazards.RULES} <= reasons.codes()
    assert {(rule.provider, rule.elem_type) for rule in kernel_hazards.RULES} == {("cuda", F16)}
    assert Policy(Target.ORT, {}).providers == ("cpu",)


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(NormfuseError, match="unknown provider cdua"):
        normfuse.optimize(residual_rms(F16), passes="skip-norm", providers=["cdua"])
