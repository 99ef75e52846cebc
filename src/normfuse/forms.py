"""Choose between equivalent fused forms by timing each at a site's own shape.

For a residual `Add` followed by a norm, the forms are the norm op after the `Add` and ONNX
Runtime's `Skip*` op doing both; for any fused norm, the fused node and the decomposed subgraph
it replaced. Each distinct (family, shape, dtype, bias) is timed once on the
target provider, side by side (see `normfuse.bench`), with ORT's graph optimisations disabled so
each form runs as written. The `Skip*` form is chosen only when it is faster beyond noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from normfuse import bench
from normfuse.rewrite import Site
from normfuse.shapes import TensorType, tensor_types
from normfuse.site_inputs import IsolatedSite, isolate

FORM_RUNS = 100
MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class FormChoice:
    """The outcome of timing two forms at one site's shape."""

    family: str
    shape: tuple[int, ...]
    dtype: str
    unfused_ms: float
    skip_ms: float
    ratio: float
    interval: tuple[float, float]
    use_skip: bool

    def as_dict(self) -> dict:
        """The JSON form."""
        return {
            "family": self.family,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "add_then_norm_ms": self.unfused_ms,
            "skip_ms": self.skip_ms,
            "skip_ratio": self.ratio,
            "skip_ratio_interval_95": list(self.interval),
            "choice": "skip" if self.use_skip else "add+norm",
            "summary": (
                f"{self.family} at {list(self.shape)} {self.dtype}: Skip form {self.ratio:.2f}x "
                f"Add + norm [{self.interval[0]:.2f}, {self.interval[1]:.2f}] -> "
                f"{'skip' if self.use_skip else 'add+norm'}"
            ),
        }


@dataclass
class FormChooser:
    """Times forms on `provider` and remembers each decision (one chooser per optimize run)."""

    provider: str
    runs: int = FORM_RUNS
    decisions: dict[tuple, FormChoice] = field(default_factory=dict)
    fusion_timings: dict[tuple, tuple[float, tuple[float, float]]] = field(default_factory=dict)
    fusion_records: list[dict] = field(default_factory=list)

    def choose(self, family: str, shape: tuple[int, ...], elem_type: int, bias: bool) -> FormChoice:
        """Whether the `Skip*` form beats `Add` + norm at this shape (cached per key)."""
        key = (family, tuple(shape), elem_type, bias)
        if key not in self.decisions:
            self.decisions[key] = self._measure(family, tuple(shape), elem_type, bias)
        return self.decisions[key]

    def _measure(
        self, family: str, shape: tuple[int, ...], elem_type: int, bias: bool
    ) -> FormChoice:
        add_then_norm, skip = residual_norm_models(family, shape, elem_type, bias)
        options = bench.BenchOptions(
            providers=(self.provider,), levels=("disable",), warmup=10, runs=self.runs, threads=1
        )
        report = bench.run(
            [bench.BenchModel("add+norm", add_then_norm), bench.BenchModel("skip", skip)], options
        )
        base, fused = report.timings
        low, high = fused.ratio_interval
        dtype = onnx.TensorProto.DataType.Name(elem_type).lower()
        return FormChoice(
            family,
            shape,
            dtype,
            base.stats_ms()["median"],
            fused.stats_ms()["median"],
            fused.ratio,
            (low, high),
            use_skip=high < 1.0,
        )

    def records(self) -> list[dict]:
        """Every decision, for the report."""
        return [choice.as_dict() for choice in self.decisions.values()] + list(self.fusion_records)

    def slower_fusions(
        self,
        original: onnx.ModelProto,
        candidate: onnx.ModelProto,
        sites: list[Site],
        base_dir: Path | None,
        types: dict[str, TensorType] | None = None,
    ) -> dict[str, tuple[str, str]]:
        """Layer-, RMS- and group-norm sites whose fused node timed slower than the decomposed
        subgraph at the site's shape (beyond noise): output -> (reason, detail). Each shape is
        timed once."""
        types = tensor_types(original) if types is None else types
        slower = {}
        for site in sites:
            if site.kind not in ("layer-norm", "rms-norm", "group-norm"):
                continue
            pair = isolate(site, original, candidate, types, {}, 0, base_dir)
            if isinstance(pair, str):
                continue  # e.g. absorbed into a later Skip site: timed as that form
            key = (site.kind, pair.feeds[site.input_names()[0]].shape, types[site.output][0])
            if key not in self.fusion_timings:
                self.fusion_timings[key] = self._time_pair(pair, site.kind)
            ratio, (low, high) = self.fusion_timings[key]
            if low > 1.0:
                slower[site.output] = (
                    "measured-slower",
                    f"fused {site.op} took {ratio:.2f}x the decomposed subgraph "
                    f"[{low:.2f}, {high:.2f}] on {self.provider}; left decomposed",
                )
        return slower

    def _time_pair(self, pair: IsolatedSite, kind: str) -> tuple[float, tuple[float, float]]:
        feeds = pair.feeds
        options = bench.BenchOptions(
            providers=(self.provider,),
            levels=("disable",),
            warmup=10,
            runs=self.runs,
            threads=1,
            npz=None,
        )
        report = bench.run_with_feeds(
            [bench.BenchModel("decomposed", pair.before), bench.BenchModel("fused", pair.after)],
            options,
            feeds,
        )
        timing = report.timings[1]
        low, high = timing.ratio_interval
        shape = list(next(iter(feeds.values())).shape)
        choice = "decomposed" if low > 1.0 else "fused"
        summary = f"{kind} at {shape}: fused {timing.ratio:.2f}x decomposed [{low:.2f}, {high:.2f}]"
        self.fusion_records.append(
            {
                "family": kind,
                "shape": shape,
                "decomposed_ms": report.timings[0].stats_ms()["median"],
                "fused_ms": timing.stats_ms()["median"],
                "fused_ratio": timing.ratio,
                "fused_ratio_interval_95": [low, high],
                "choice": choice,
                "summary": f"{summary} -> {choice}",
            }
        )
        return timing.ratio, (low, high)


def residual_norm_models(
    family: str, shape: tuple[int, ...], elem_type: int, bias: bool
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """`Add` then the norm, and the `Skip*` op, as two one-site models of the same function."""
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    hidden = shape[-1]
    params = [numpy_helper.from_array(np.ones(hidden, dtype), "scale")]
    if bias:
        params.append(numpy_helper.from_array(np.zeros(hidden, dtype), "bias"))
    names = [p.name for p in params]
    if family == "layer-norm":
        norm = helper.make_node("LayerNormalization", ["sum", *names], ["y"], axis=-1, epsilon=1e-5)
        skip = helper.make_node(
            "SkipLayerNormalization", ["a", "b", *names], ["y"], epsilon=1e-5, domain=MS_DOMAIN
        )
    else:
        norm = helper.make_node(
            "SimplifiedLayerNormalization", ["sum", *names], ["y"], axis=-1, epsilon=1e-5
        )
        skip = helper.make_node(
            "SkipSimplifiedLayerNormalization",
            ["a", "b", *names],
            ["y"],
            epsilon=1e-5,
            domain=MS_DOMAIN,
        )
    add = helper.make_node("Add", ["a", "b"], ["sum"])
    return _model([add, norm], shape, elem_type, params), _model([skip], shape, elem_type, params)


def _model(nodes, shape, elem_type, params) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(name, elem_type, list(shape)) for name in ("a", "b")]
    graph = helper.make_graph(
        nodes,
        "residual_norm",
        inputs,
        [helper.make_tensor_value_info("y", elem_type, list(shape))],
        params,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)]
    )
    model.ir_version = 8
    return model
