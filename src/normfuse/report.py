"""The record of one run, as JSON (DESIGN.md's report) and as a short terminal table."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from normfuse.rewrite import NearMiss, Site
from normfuse.validate import ValidationReport


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
        }

    def to_json(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def table(self, sites: bool = False) -> str:
        """A short human-readable summary; with `sites`, one line per fused site too."""
        lines = [f"{'kind':<16}{'op':<28}{'sites':>6}"]
        for (kind, op), count in sorted(Counter((s.kind, s.op) for s in self.sites).items()):
            lines.append(f"{kind:<16}{op:<28}{count:>6}")
        if not self.sites:
            lines.append("(nothing fused)")
        if sites:
            for site in self.sites:
                lines.append(
                    f"site {site.kind} -> {site.op} for {site.output!r} (axis {site.axis}, "
                    f"epsilon {site.epsilon:g}) replaces {', '.join(site.removed_nodes)}"
                )
        lines.append(f"nodes: {self.nodes_before} -> {self.nodes_after}")
        if self.opset_after != self.opset_before:
            lines.append(f"opset: {self.opset_before} -> {self.opset_after}")
        if self.ort_only:
            lines.append("output uses operators only ONNX Runtime accepts (not standard ONNX)")
        for miss in self.near_misses:
            lines.append(f"near-miss {miss.kind} at {miss.node!r}: {miss.reason}: {miss.detail}")
        lines.extend(self.notes)
        lines.extend(f"tuned: {choice['summary']}" for choice in self.tuning)
        if self.validation is not None:
            verdict = "passed" if self.validation.passed else "FAILED"
            lines.extend(["", f"validation {verdict}:", self.validation.table()])
        return "\n".join(lines)
