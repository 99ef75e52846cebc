"""The rewritten graph written back into a model: the original's model-level fields, graph I/O,
overridable initializers and initializer scopes kept, and the opset and domains the fused nodes
need set (or, where the nodes that survive forbid that opset, the reason)."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from normfuse.errors import NormfuseError
from normfuse.facts import model_view
from normfuse.ir import graph_export, placement
from normfuse.match import records
from normfuse.target import targets


def finalise(
    original: onnx.ModelProto,
    view: model_view.ModelView,
    graph: gs.Graph,
    sites: list[records.Site],
) -> tuple[onnx.ModelProto | None, tuple[int, str] | None]:
    """The rewritten model (the original itself, copied, when nothing was fused), with the opset
    and domains its new nodes need (the output guard then proves it: `rollback.guarded`); or,
    when the nodes that survive forbid the opset the sites need, None and (that opset, why)."""
    if not sites:
        return copy_model(original), None
    optimised = export_model(original, view, graph)
    opset_needed = max(site.opset for site in sites)
    if opset_needed > targets.default_opset(original):
        fused_ops = frozenset(site.op for site in sites if site.domain in ("", "ai.onnx"))
        blockers = targets.raise_blockers(optimised, opset_needed, fused_ops)
        if blockers:
            return None, (opset_needed, "; ".join(blockers[:3]))
        targets.raise_opset(optimised, opset_needed, fused_ops)
    for domain in sorted({site.domain for site in sites} - {"ai.onnx"}):
        version = targets.default_opset(optimised) if domain == "" else 1
        targets.import_domain(optimised, domain, version)
    return optimised, None


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy of `model`."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _copy_without_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every model-level field of `model` but its graph (whose weights need not be copied)."""
    copy = onnx.ModelProto()
    for descriptor, value in model.ListFields():
        if descriptor.name == "graph":
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(copy, descriptor.name).extend(value)
        elif descriptor.message_type is not None:
            getattr(copy, descriptor.name).CopyFrom(value)
        else:
            setattr(copy, descriptor.name, value)
    return copy


def export_model(
    original: onnx.ModelProto, view: model_view.ModelView, graph: gs.Graph
) -> onnx.ModelProto:
    """The original model with its graph and local functions replaced; model-level fields, graph
    I/O, overridable initializers (defaults of graph inputs) and every initializer's scope kept."""
    model_view.detach_from_caller(graph)
    optimised = _copy_without_graph(original)
    try:
        graph_export.write_graph(graph, optimised.graph)
        bodies = graph_export.functions(graph) if original.functions else []
    except (UnicodeDecodeError, ValueError, TypeError) as error:  # malformed attributes, names
        raise NormfuseError(f"cannot write the rewritten graph: {error}") from None
    placement.restore_placement(view.model.graph, optimised.graph)
    if original.functions:
        rewritten = {(f.domain, f.name): f for f in bodies}
        for function in optimised.functions:
            body = rewritten.get((function.domain, function.name))
            if body is not None:
                del function.node[:]
                function.node.extend(body.node)
    for field in ("input", "output", "metadata_props"):
        del getattr(optimised.graph, field)[:]
        getattr(optimised.graph, field).extend(getattr(original.graph, field))
    present = {tensor.name for tensor in optimised.graph.initializer}
    optimised.graph.initializer.extend(
        t for t in view.overridable_initializers() if t.name not in present
    )
    optimised.graph.name = original.graph.name
    optimised.graph.doc_string = original.graph.doc_string
    return optimised
