"""Choose between equivalent fused forms by timing each at a site's own shape.

For a residual `Add` followed by a norm, the forms are the norm op after the `Add` and ONNX
Runtime's `Skip*` op doing both; for any fused norm, the fused node and the decomposed subgraph
it replaced. A site is timed at the shape it has when the model runs with the caller's `dims`
(graph inputs fixed to those sizes, then shape inference; a dim still unknown is timed at its
`dims` size, else 1), and the record names both that shape and the model's. Each distinct
(family, shape, dtype, bias) is timed once on the target provider, side by side (see
`measure.bench`), with ORT's graph optimisations disabled so each form runs as written. A form
replaces the default only when it is faster beyond noise and by more than 1%
(`bench.EQUAL_WITHIN`). The `Skip*` form must also be no further from a float64 evaluation than
`Add` + norm on rows with a large offset (`OFFSET_ROWS`: where its one-pass variance loses
digits), on the same provider: faster and less accurate is refused (`less-accurate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from normfuse.facts.constants import Constants
from normfuse.facts.same_shape import Deriver, format_shape
from normfuse.facts.shapes import TensorType, tensor_types
from normfuse.io.skeleton import skeleton
from normfuse.match.records import Site
from normfuse.measure import bench
from normfuse.prove import sessions
from normfuse.prove.inputs import input_shapes
from normfuse.prove.site_inputs import IsolatedSite
from normfuse.prove.subgraph import extract

FORM_RUNS = 100
MS_DOMAIN = "com.microsoft"
# Rows of 1000 + 1e-3 * N(0, 1) (the sum's), where a norm's float order shows most.
OFFSET_ROWS = (1000.0, 1e-3)
EPSILON = 1e-5


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
    # Largest distance to a float64 evaluation on offset rows: (Add + norm, Skip form).
    errors: tuple[float, float] | None = None
    model_shape: str = ""
    provider: str = "cpu"

    def faster(self) -> bool:
        """Whether the Skip form timed faster beyond noise."""
        return bench.verdict(self.interval) == "faster"

    def reason(self) -> str:
        """Why the Skip form was not chosen: slower (or not faster), or less accurate."""
        return "less-accurate" if self.faster() else "measured-slower"

    def detail(self, skip_op: str, norm_op: str) -> str:
        """The near-miss text when the Skip form was not chosen."""
        low, high = self.interval
        timed = "[" + ", ".join(str(dim) for dim in self.shape) + "]"
        model = self.model_shape if self.model_shape not in (None, timed) else None
        where = "" if model is None else f" for the model's {model}"
        timing = (
            f"{skip_op} timed at {timed}{where} on {self.provider}: {self.ratio:.2f}x "
            f"Add + {norm_op} [{low:.2f}, {high:.2f}]"
        )
        if self.reason() == "less-accurate" and self.errors is not None:
            unfused, skip = self.errors
            return (
                f"{timing}, but {skip:.3g} from float64 on offset rows where Add + {norm_op} is "
                f"{unfused:.3g}; kept Add + {norm_op}"
            )
        return f"{timing}; kept Add + {norm_op}"

    def as_dict(self) -> dict:
        """The JSON form."""
        record = {
            "family": self.family,
            "shape": list(self.shape),
            "timed_shape": list(self.shape),
            "model_shape": self.model_shape or str(list(self.shape)),
            "dtype": self.dtype,
            "add_then_norm_ms": self.unfused_ms,
            "skip_ms": self.skip_ms,
            "skip_ratio": self.ratio,
            "skip_ratio_interval_95": list(self.interval),
            "choice": "skip" if self.use_skip else "add+norm",
        }
        accuracy = ""
        if self.errors is not None:
            record["offset_rows"] = f"{OFFSET_ROWS[0]:g} + {OFFSET_ROWS[1]:g} * N(0, 1)"
            record["add_then_norm_error"], record["skip_error"] = self.errors
            accuracy = f", offset-row error {self.errors[1]:.3g} vs {self.errors[0]:.3g} Add + norm"
        record["summary"] = (
            f"{self.family} at {list(self.shape)} (model {record['model_shape']}) {self.dtype}: "
            f"Skip form {self.ratio:.2f}x Add + norm [{self.interval[0]:.2f}, "
            f"{self.interval[1]:.2f}]{accuracy} -> {record['choice']}"
        )
        return record


@dataclass
class FormChooser:
    """Times forms on `provider` and remembers each decision (one chooser per optimize run)."""

    provider: str
    runs: int = FORM_RUNS
    dims: dict[str, int] = field(default_factory=dict)
    decisions: dict[tuple, FormChoice] = field(default_factory=dict)
    fusion_timings: dict[tuple, tuple[float, tuple[float, float]]] = field(default_factory=dict)
    fusion_records: list[dict] = field(default_factory=list)
    # The model being rewritten: its tensors' shapes with the graph inputs at `dims` sizes.
    model: onnx.ModelProto | None = None
    _runtime: dict[str, TensorType] | None = None

    def timed_shape(
        self, shape: tuple, tensors: tuple = (), reader: Constants | None = None
    ) -> tuple[int, ...]:
        """The shape a site of (possibly symbolic) `shape` is timed at: per axis, the size the
        first of `tensors` (all of that shape) has when the model runs with `dims` (types
        inferred with the graph inputs at those sizes, then derived as `same_shape.Deriver`
        does), else the symbol's `dims` size, else 1."""
        derived = []
        if self.model is not None and tensors and reader is not None:
            if self._runtime is None:
                self._runtime = runtime_types(self.model, self.dims)
            deriver = Deriver(self._runtime, reader)
            try:
                derived = [deriver.dims(tensor) for tensor in tensors]
            except RecursionError:  # too deep to derive: the fallback below
                derived = []
        timed = []
        for axis, dim in enumerate(shape):
            sizes = [d[axis] for d in derived if d is not None and len(d) == len(shape)]
            known = [size for size in sizes if isinstance(size, int)]
            if known:
                timed.append(known[0])
            else:
                timed.append(dim if isinstance(dim, int) else self.dims.get(str(dim), 1))
        return tuple(timed)

    def choose(
        self,
        family: str,
        shape: tuple,
        elem_type: int,
        bias: bool,
        tensors: tuple = (),
        reader: Constants | None = None,
    ) -> FormChoice:
        """Whether the `Skip*` form beats `Add` + norm for a site of `shape` (`tensors` have
        it), timed at its shape for `dims` (`timed_shape`; cached per timed shape)."""
        timed = self.timed_shape(shape, tensors, reader)
        key = (family, timed, elem_type, bias)
        if key not in self.decisions:
            choice = self._measure(family, timed, elem_type, bias)
            readable = format_shape(tuple(shape))
            self.decisions[key] = replace(choice, model_shape=readable, provider=self.provider)
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
        errors = offset_row_errors(family, shape, elem_type, bias, self.provider)
        return decide(
            family,
            shape,
            elem_type,
            (base.stats_ms()["median"], fused.stats_ms()["median"]),
            (fused.ratio, fused.ratio_interval),
            errors,
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
    ) -> dict[str, tuple[str, str]]:
        """Layer-, RMS- and group-norm sites whose fused node timed slower than the decomposed
        subgraph at the site's run-time shape (beyond noise and 1%): output -> (reason, detail).
        Each shape is timed once."""
        kinds = ("layer-norm", "rms-norm", "group-norm")
        norm_sites = [site for site in sites if site.kind in kinds]
        types = runtime_types(original, self.dims) if norm_sites else {}
        slower = {}
        for site in norm_sites:
            pair = timing_pair(site, original, candidate, types, base_dir)
            if pair is None:
                continue  # e.g. absorbed into a later Skip site: timed as that form
            key = (site.kind, pair.feeds[site.input_names()[0]].shape, types[site.output][0])
            if key not in self.fusion_timings:
                self.fusion_timings[key] = self._time_pair(pair, site.kind)
            ratio, (low, high) = self.fusion_timings[key]
            if bench.verdict((low, high)) == "slower":
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
        choice = "decomposed" if bench.verdict((low, high)) == "slower" else "fused"
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


def decide(
    family: str,
    shape: tuple[int, ...],
    elem_type: int,
    medians: tuple[float, float],
    timing: tuple[float, tuple[float, float]],
    errors: tuple[float, float],
) -> FormChoice:
    """The Skip form only where it timed faster beyond noise (`bench.verdict`) and is no further
    from float64 on offset rows than `Add` + norm (`errors`: Add + norm's, the Skip form's)."""
    ratio, (low, high) = timing
    faster = bench.verdict((low, high)) == "faster"
    dtype = onnx.TensorProto.DataType.Name(elem_type).lower()
    return FormChoice(
        family,
        shape,
        dtype,
        medians[0],
        medians[1],
        ratio,
        (low, high),
        use_skip=faster and errors[1] <= errors[0],
        errors=errors,
    )


def offset_row_errors(
    family: str, shape: tuple[int, ...], elem_type: int, bias: bool, provider: str
) -> tuple[float, float]:
    """The largest distance to a float64 evaluation of `Add` + norm and of the Skip form, run on
    `provider` with optimisations disabled, on inputs whose sum has rows of `OFFSET_ROWS`."""
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    rng = np.random.default_rng(0)
    offset, spread = OFFSET_ROWS
    feeds = {
        "a": (offset + spread * rng.standard_normal(shape)).astype(dtype),
        "b": (spread * rng.standard_normal(shape)).astype(dtype),
    }
    total = feeds["a"].astype(np.float64) + feeds["b"].astype(np.float64)
    if family == "layer-norm":
        centred = total - total.mean(axis=-1, keepdims=True)
        reference = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + EPSILON)
    else:
        reference = total / np.sqrt((total * total).mean(axis=-1, keepdims=True) + EPSILON)
    errors = []
    for model in residual_norm_models(family, shape, elem_type, bias):
        (output,) = sessions.create(model, provider).run(None, feeds)
        errors.append(float(np.max(np.abs(output.astype(np.float64) - reference))))
    return errors[0], errors[1]


def runtime_types(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, TensorType]:
    """Tensor types with every graph input at the shape it is fed for `dims` (see
    `normfuse.prove.inputs`), as shape inference derives them: shapes as the model runs."""
    shapes, _ = input_shapes(model, dims)
    fixed = skeleton(model)  # no weight copied
    for info in fixed.graph.input:
        if info.name in shapes:
            shape = info.type.tensor_type.shape
            shape.Clear()
            for size in shapes[info.name]:
                shape.dim.add().dim_value = size
    return tensor_types(fixed)


def timing_pair(
    site: Site,
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    types: dict[str, TensorType],
    base_dir: Path | None,
) -> IsolatedSite | None:
    """The site cut out of both models at its run-time shape (unknown dims as 1), with random
    inputs; None when it cannot be cut out."""
    names = site.input_names()
    output_type = types.get(site.output, (None,))[0]
    if output_type is None or any(name not in types or types[name][1] is None for name in names):
        return None
    rng = np.random.default_rng(0)
    inputs, feeds = {}, {}
    for name in names:
        elem_type, shape = types[name]
        concrete = [dim if isinstance(dim, int) else 1 for dim in shape]
        inputs[name] = (elem_type, concrete)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
        feeds[name] = rng.normal(0.0, 1.0, concrete).astype(dtype)
    before = extract(original, inputs, site.output, output_type, base_dir)
    after = extract(candidate, inputs, site.output, output_type, base_dir)
    if before is None or after is None:
        return None
    return IsolatedSite(before, after, feeds)


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
        norm = helper.make_node(
            "LayerNormalization", ["sum", *names], ["y"], axis=-1, epsilon=EPSILON
        )
        skip = helper.make_node(
            "SkipLayerNormalization", ["a", "b", *names], ["y"], epsilon=EPSILON, domain=MS_DOMAIN
        )
    else:
        norm = helper.make_node(
            "SimplifiedLayerNormalization", ["sum", *names], ["y"], axis=-1, epsilon=EPSILON
        )
        skip = helper.make_node(
            "SkipSimplifiedLayerNormalization",
            ["a", "b", *names],
            ["y"],
            epsilon=EPSILON,
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
