"""Known kernel hazards per execution provider, refused by construction: a fused op is not
emitted in a dtype whose kernel on a provider the output is for is known to compute something
else than the graph it replaces.

`RULES` is the table: provider -> op -> dtype -> the near-miss reason and why. The providers are
those asked for (`Policy.providers`: `optimize`'s `providers`, `--providers`, `--tune-for`),
never those a machine happens to have: the rule holds whether or not a GPU is present, and a
CUDA kernel is read here, not run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import onnx

from normfuse.match.records import Reject

# ONNX Runtime's CUDA Skip* kernels (contrib_ops/cuda/bert/skip_layer_norm_impl.cu, non-strict
# mode) sum `val / hidden * val` in T: for float16 that mean square passes 65504 once a row's RMS
# passes 256, and the output collapses to zeros with no error (onnxruntime issue 29034, reported
# on 1.24.2; its maintainers say PR 28682, float32 accumulation, fixes it from 1.27). Refused
# whatever the version: the output may be deployed on an older runtime, and the kernel is read
# here, not run.
_CUDA_FLOAT16_SUM = (
    "ONNX Runtime's CUDA {op} accumulates float16 rows' squares in float16 (onnxruntime issue "
    "29034): large rows overflow and normalise to zeros; kept Add + the norm for CUDA"
)


@dataclass(frozen=True)
class KernelRule:
    """One known hazard: `op` in dtype `elem_type` on `provider` is refused with `code`."""

    provider: str
    op: str
    elem_type: int
    code: str
    detail: str


RULES = tuple(
    KernelRule(
        "cuda",
        op,
        onnx.TensorProto.FLOAT16,
        "provider-kernel-hazard",
        _CUDA_FLOAT16_SUM.format(op=op),
    )
    for op in ("SkipSimplifiedLayerNormalization", "SkipLayerNormalization")
)


def refuse_hazards(providers: Iterable[str], op: str, elem_type: int | None) -> None:
    """Raise `Reject` with the first rule of `RULES` for `op` in `elem_type` on one of
    `providers`; nothing where none applies."""
    asked = set(providers)
    for rule in RULES:
        if rule.provider in asked and rule.op == op and rule.elem_type == elem_type:
            raise Reject(rule.code, rule.detail)
