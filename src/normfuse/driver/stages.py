"""Other tools run as stages before normfuse's passes (`--with`): each named stage checked before
any work, run in turn with its output proved against the original, and recorded in the report."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from normfuse.driver.report import Report
from normfuse.errors import NormfuseError
from normfuse.io import model_io
from normfuse.prove import guard, inputs
from normfuse.stages import ort_transformers as ort_stage
from normfuse.target import targets


def stage_specs(names: Sequence[str], target: str) -> list[ort_stage.StageSpec]:
    """The stages named, checked before any work (each at most once; ORT's optimizer writes
    contrib ops, so only for `--target ort`)."""
    specs = [ort_stage.parse_stage(name) for name in names]
    if len({spec.name for spec in specs}) < len(specs):
        raise NormfuseError("each stage may be given once")
    if specs and target != "ort":
        raise NormfuseError(
            f"--with {specs[0].name} writes ONNX Runtime contrib ops: it needs --target ort"
        )
    return specs


def run_stages(
    loaded: model_io.LoadedModel,
    specs: list[ort_stage.StageSpec],
    refuse_repairs: bool,
    providers: Sequence[str],
) -> tuple[model_io.LoadedModel, list[ort_stage.StageRecord]]:
    """Each stage in turn, every output proved against the original `loaded`."""
    records, current = [], loaded.model
    for spec in specs:
        guards = [  # small sizes, and batch 2 with padded masks: a tool's fusion is untrusted
            guard.OutputGuard(loaded.model, refuse_repairs, loaded.base_dir, probe)
            for probe in (inputs.SMALL_PROBE, inputs.WIDE_PROBE)
        ]
        try:
            current, record = ort_stage.run_stage(current, spec, guards, providers)
        finally:
            for stage_guard in guards:
                stage_guard.close()
        records.append(record)
    return model_io.LoadedModel(current, loaded.base_dir), records


def with_stages(
    report: Report,
    original: onnx.ModelProto,
    staged: onnx.ModelProto,
    stages: list[ort_stage.StageRecord],
) -> None:
    """`report` (of the passes run on `staged`) as the record of the whole pipeline: the
    stages, the original's node count and opset, ORT-only where a stage wrote contrib ops."""
    report.stages = stages
    report.nodes_before = len(original.graph.node)
    report.opset_before = targets.default_opset(original)
    report.ort_only = report.ort_only or ort_stage.uses_contrib_ops(staged)
