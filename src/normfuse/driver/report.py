"""The record of one run, as JSON (DESIGN.md's report) and as a short terminal table."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx

from normfuse.facts.shapes import TensorType
from normfuse.io.columns import aligned, op_legend, short_op, wrap
from normfuse.match.records import FUSED_NORM_OPS, NearMiss, Site
from normfuse.prove.float16_hazards import hazard_line
from normfuse.prove.validate import ValidationReport

if TYPE_CHECKING:
    from normfuse.stages.ort_transformers import StageRecord


@dataclass
class Report:
    """What a run fused, what it declined and why, and how the graph changed."""

    normfuse_version: str
    input: str | None
    output: str | None
    target: str
    sites: list[Site]
    near_misses: list[NearMiss]
    nodes_before: int
    nodes_after: int
    opset_before: int
    opset_after: int
    ort_only: bool
    notes: list[str] = field(default_factory=list)
    validation: ValidationReport | None = None
    tuning: list[dict] = field(default_factory=list)
    # Sites already in their best exact form (`records.KEPT_AS_IS_REASONS`): counted, not listed
    # as near-misses.
    kept: list[NearMiss] = field(default_factory=list)
    # Tools run before the passes (`--with`), each with what it did and what was turned off.
    stages: list[StageRecord] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Nodes before and after, and fused sites per kind."""
        per_kind = Counter(site.kind for site in self.sites)
        return {"nodes_before": self.nodes_before, "nodes_after": self.nodes_after, **per_kind}

    def as_dict(self) -> dict:
        """The JSON form of DESIGN.md's report."""
        return {
            "normfuse_version": self.normfuse_version,
            "input": self.input,
            "output": self.output,
            "target": self.target,
            "sites": [site.as_dict() for site in self.sites],
            "near_misses": [miss.as_dict() for miss in self.near_misses],
            "counts": self.counts(),
            "opset": {"before": self.opset_before, "after": self.opset_after},
            "ort_only": self.ort_only,
            "notes": list(self.notes),
            **({"validation": self.validation.as_dict()} if self.validation else {}),
            **({"tuning": list(self.tuning)} if self.tuning else {}),
            **({"kept_as_is": self.kept_counts()} if self.kept else {}),
            **({"stages": [stage.as_dict() for stage in self.stages]} if self.stages else {}),
        }

    def kept_counts(self) -> dict[str, int]:
        """How many sites were left in their best exact form, per kind."""
        return dict(sorted(Counter(miss.kind for miss in self.kept).items()))

    def to_json(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def table(
        self,
        sites: bool = False,
        types: dict[str, TensorType] | None = None,
        verbose: bool = False,
        existing: Counter | None = None,
        wide: bool = False,
    ) -> str:
        """A short human-readable summary, within 100 columns unless `wide` (long lines wrap
        onto indented continuation lines; op names in the site list abbreviated). With `sites`,
        one line per fused site (kind, op, the tensor it computes, its shape from `types`), and
        with `verbose` the nodes it replaces; `existing`: the fused norm nodes the model already
        had (said when nothing is left)."""
        lines = [wrap(line, wide) for stage in self.stages for line in stage.lines()]
        lines += [f"{'kind':<16}{'op':<28}{'sites':>6}"] if self.sites else []
        for (kind, op), count in sorted(Counter((s.kind, s.op) for s in self.sites).items()):
            lines.append(f"{kind:<16}{op:<28}{count:>6}")
        if not self.sites and existing:
            ops = ", ".join(f"{op} {n}" for op, n in sorted(existing.items()))
            lines.append(
                wrap(f"already fused: {sum(existing.values())} fused norm nodes ({ops})", wide)
            )
        elif not self.sites:
            lines.append("(nothing fused)")
        if sites and self.sites:
            lines.append("")
            lines.extend(site_lines(self.sites, types or {}, verbose, wide))
            lines.append("")
        lines.append(f"nodes: {self.nodes_before} -> {self.nodes_after}")
        if self.opset_after != self.opset_before:
            lines.append(f"opset: {self.opset_before} -> {self.opset_after}")
        if self.ort_only:
            lines.append("output uses operators only ONNX Runtime accepts (not standard ONNX)")
        said = [
            f"near-miss {m.kind} at {m.node!r}: {m.reason}: {m.detail}" for m in self.near_misses
        ]
        said += [
            f"kept as is: {count} {kind} site(s) already in their fastest exact form"
            for kind, count in self.kept_counts().items()
        ]
        said += repair_lines(self.sites)
        said += [hazard_line(site) for site in self.sites if site.float16_hazard]
        said += self.notes
        said += [f"tuned: {choice['summary']}" for choice in self.tuning]
        lines.extend(wrap(line, wide) for line in said)
        if self.validation is not None:
            verdict = "passed" if self.validation.passed else "FAILED"
            lines.extend(["", f"validation {verdict}:", self.validation.table(wide)])
        return "\n".join(lines)


def repair_lines(sites: list[Site]) -> list[str]:
    """The table's lines for sites kept as repairs: one per site its repair was attributed to,
    and one for each group of sites it was not attributed within (`among_sites`)."""
    lines: list[str] = []
    for site in sites:
        if not site.repair:
            continue
        among = site.repair[0].get("among_sites")
        if among is None:
            lines.append(repair_line(site, f"{site.kind} at {site.output!r}"))
            continue
        line = repair_line(site, f"in one of {among} sites (not attributed further)")
        if line not in lines:  # every site of a group carries the group's evidence
            lines.append(line)
    return lines


def repair_line(site: Site, where: str) -> str:
    """The table's line for a repair `where` (a site, or a group): its first evidence, and how
    many more."""
    first = site.repair[0]
    more = f" (and {len(site.repair) - 1} more)" if len(site.repair) > 1 else ""
    return (
        f"repair {where}: output {first['output']!r} differs from the "
        f"original on the {first['profile']} inputs, {_distance(first['rewrite_to_float64'])} "
        f"from float64 against the original's {_distance(first['original_to_float64'])}{more}"
    )


def _distance(value: float | None) -> str:
    return "inf (NaN or Inf)" if value is None else f"{value:.3g}"


def site_lines(
    sites: list[Site], types: dict[str, TensorType], verbose: bool, wide: bool = False
) -> list[str]:
    """One aligned line per site: kind, op (abbreviated unless `wide`, with a legend), the
    tensor it computes and its shape; with `verbose`, the epsilon, the axis and the nodes it
    replaces below each (wrapped unless `wide`)."""
    rows = [["site", "op", "output", "shape"]]
    for site in sites:
        where = site.output if site.function is None else f"{site.output} (in {site.function[1]})"
        rows.append(
            [site.kind, short_op(site.op, wide), where, _shape_text(types.get(site.output))]
        )
    lines = []
    for number, line in enumerate(aligned(rows, wide=wide)):
        lines.append(line)
        if verbose and number:
            site = sites[number - 1]
            text = (
                f"    axis {site.axis}, epsilon {site.epsilon:g}; replaces "
                f"{len(site.removed_nodes)} nodes: {', '.join(site.removed_nodes)}"
            )
            lines.append(wrap(text, wide, indent="      "))
    legend = "" if wide else op_legend([site.op for site in sites])
    return [*lines, *([f"ops: {legend}"] if legend else [])]


def _shape_text(tensor_type: TensorType | None) -> str:
    """`[1, sequence, 64]`, `?` for a dim shape inference named itself (`unk__7`) or left out,
    and `?` for the whole where the rank is not known."""
    if tensor_type is None or tensor_type[1] is None:
        return "?"
    dims = [
        "?" if dim is None or str(dim).startswith("unk__") else str(dim) for dim in tensor_type[1]
    ]
    return "[" + ", ".join(dims) + "]"


def fused_norm_nodes(model: onnx.ModelProto) -> Counter:
    """The fused normalisation nodes in `model`'s main graph and local functions, by op."""
    nodes = [*model.graph.node, *(node for f in model.functions for node in f.node)]
    return Counter(node.op_type for node in nodes if node.op_type in FUSED_NORM_OPS)
