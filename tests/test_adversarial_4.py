"""The fourth adversarial corpus (corpora/adversarial_4.py) through normfuse.optimize, default and
`--target onnx`: no crash or whole-model refusal, the original's interface, runnable at
ORT_DISABLE_ALL, the original's numerics on adversarial inputs, the expected outcome, and this
round's promises: `onnx.checker` full_check on standard output, every initializer kept in its
scope (none lost, renamed or copied into a body), the file not grown beyond what the fused nodes
add, and float16 norms no further from float64 than the original (x1.10, both ORT levels)."""

from __future__ import annotations

import copy
import functools
import tempfile
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from adversarial_harness import (
    case_config_params,
    compare,
    float64_model,
    narrowest_float,
    session,
)
from corpora.adversarial import feed_sets
from corpora.adversarial_4 import CASES, CONFIGS, FINDINGS, Case4
from onnx import numpy_helper
from test_adversarial import _check_expectation, _interface

import normfuse

BY_NAME = {c.name: c for c in CASES}
# What the fused nodes may add: a float32 ones-scale or a widened float16 parameter per site.
GROWTH_BYTES = 2048
RATIO = 1.10


@functools.cache
def _original(name: str):
    case = BY_NAME[name]
    m = case.build()
    feeds = feed_sets(m, (case.fixed,), case.overrides, name)
    s = session(m)
    return m, feeds, [s.run(None, f) for _, f in feeds]


def _value_key(t: onnx.TensorProto) -> tuple:
    """What a tensor holds, whatever its name or storage."""
    return t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()


def _scopes(graph: onnx.GraphProto, path: str = "main", out: dict | None = None) -> dict:
    """scope path -> {initializer name: bytes}, for the graph and every nested body."""
    out = {} if out is None else out
    out[path] = {t.name: _value_key(t) for t in graph.initializer}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _scopes(attr.g, f"{path}/{node.output[0] if node.output else ''}.{attr.name}", out)
    return out


def _allowance(m: onnx.ModelProto, sites: int) -> int:
    """What fused nodes may add: GROWTH_BYTES, a float32 ones-scale per site (as wide as the
    widest last axis of a graph input), and a float32 copy of each float16 vector initializer
    (a scale or bias widened for the float32 kernel between Casts)."""
    widest = max(
        (
            i.type.tensor_type.shape.dim[-1].dim_value
            for i in m.graph.input
            if i.type.tensor_type.shape.dim
        ),
        default=0,
    )
    widened = sum(
        4 * int(np.prod(t.dims))
        for _, names in _scopes_tensors(m.graph)
        for t in names
        if t.data_type == onnx.TensorProto.FLOAT16 and len(t.dims) <= 1
    )
    return GROWTH_BYTES + 4 * widest * sites + widened


def _scopes_tensors(graph: onnx.GraphProto):
    yield graph, list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _scopes_tensors(attr.g)


def _placement_problems(original: onnx.ModelProto, fused: onnx.ModelProto) -> list[str]:
    before, after = _scopes(original.graph), _scopes(fused.graph)
    where = {name: scope for scope, names in before.items() for name in names}
    problems = []
    for scope, names in after.items():
        for name, data in names.items():
            if name in where and where[name] != scope:
                problems.append(f"MOVED {name}: {where[name]} -> {scope}")
            elif name not in where:
                copies = [n for s in before.values() for n, d in s.items() if d == data]
                if copies and scope != "main":
                    problems.append(f"COPIED {copies[0]} into {scope} as {name}")
    overridable = {i.name for i in original.graph.input} & set(before["main"])
    kept = {i.name for i in fused.graph.input} & set(after["main"])
    if overridable - kept:
        problems.append(f"LOST-OVERRIDABLE {sorted(overridable - kept)}")
    return problems


CPU = ["CPUExecutionProvider"]


def _loads(m: onnx.ModelProto, options: ort.SessionOptions) -> bool:
    try:
        ort.InferenceSession(m.SerializeToString(), options, providers=CPU)
    except Exception:
        return False
    return True


def _no_further_from_f64(m, feeds, originals, outputs) -> bool:
    """A difference from the original is no error where the candidate is no further from a
    float64 evaluation of the original than the original is (constant rows: the fused kernel's
    exact zero against the decomposed form's cancellation noise)."""
    m64 = float64_model(m)
    if m64 is None:
        return False
    f64 = {
        k: v.astype(np.float64) if v.dtype in (np.float16, np.float32) else v
        for k, v in feeds.items()
    }
    refs = session(m64).run(None, f64)
    floats = [
        (o, c, r)
        for o, c, r in zip(originals, outputs, refs, strict=True)
        if np.issubdtype(o.dtype, np.floating)
    ]
    return all(_distance(c, r) <= _distance(o, r) for o, c, r in floats)


def _distance(a: np.ndarray, ref: np.ndarray) -> float:
    """Max abs distance to `ref`; a NaN or inf `ref` does not share counts as infinitely far."""
    a = a.astype(np.float64)
    same = (np.isnan(a) & np.isnan(ref)) | (np.isinf(a) & (a == ref))
    d = np.where(same, 0.0, np.abs(a - ref))
    return float(np.nan_to_num(d, nan=np.inf).max(initial=0.0))


def _f64_problems(m, fused, feeds) -> list[str]:
    """Max abs distance to a float64 evaluation, fused / original, at both ORT levels."""
    m64 = float64_model(m)
    if m64 is None:
        return ["NO-F64 the float64 copy of the original does not run"]
    ref = session(m64)
    problems = []
    levels = ort.GraphOptimizationLevel
    for level in (levels.ORT_DISABLE_ALL, levels.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.log_severity_level = 3
        try:
            runs = [
                ort.InferenceSession(x.SerializeToString(), options, providers=CPU)
                for x in (m, fused)
            ]
        except Exception as error:
            if _loads(m, options):
                problems.append(f"UNRUNNABLE at {level.name}: {str(error).splitlines()[0][:200]}")
            continue  # ORT's own fusions reject the original at this level: nothing to compare
        worst = [0.0, 0.0]
        for _, f in feeds:
            f64 = {
                k: v.astype(np.float64) if v.dtype in (np.float16, np.float32) else v
                for k, v in f.items()
            }
            r = ref.run(None, f64)
            for index, s in enumerate(runs):
                for o, ro in zip(s.run(None, f), r, strict=True):
                    d = np.abs(o.astype(np.float64) - ro)
                    worst[index] = max(worst[index], float(d[np.isfinite(d)].max(initial=0.0)))
        if worst[1] > RATIO * worst[0] + 1e-7:
            problems.append(
                f"F64-RATIO at {level.name}: fused {worst[1]:.3g} vs original {worst[0]:.3g}"
            )
    return problems


def _optimize(case: Case4, m: onnx.ModelProto, config: str, folder: Path):
    """optimize() in `config`; an external-data case goes through files (weights external)."""
    if not case.external:
        return normfuse.optimize(m, **CONFIGS[config]), m
    src = folder / "in" / "model.onnx"
    src.parent.mkdir()
    onnx.save(
        copy.deepcopy(m), src, save_as_external_data=True, location="m.data", size_threshold=1024
    )
    result = normfuse.optimize(str(src), **CONFIGS[config])
    dst = folder / "out" / "model.onnx"
    dst.parent.mkdir()
    normfuse.save(result, dst)
    return result, (onnx.load(dst), _inlined(src, dst))


def _inlined(src: Path, dst: Path) -> list[str]:
    """Each external weight of the input whose value the output holds inline (under any name,
    in any scope)."""
    before, full = onnx.load(src, load_external_data=False), onnx.load(src)
    external = {t.name for t in before.graph.initializer if t.data_location == 1}
    values = {_value_key(t): t.name for t in full.graph.initializer if t.name in external}
    stored, loaded = onnx.load(dst, load_external_data=False), onnx.load(dst)
    pairs = zip(_all_initializers(stored.graph), _all_initializers(loaded.graph), strict=True)
    return [
        f"INLINED external {values[_value_key(t)]} held inline as {t.name} in {scope}"
        for (scope, kept), (_, t) in pairs
        if kept.data_location != 1 and _value_key(t) in values
    ]


def _all_initializers(graph: onnx.GraphProto, path: str = "main"):
    for t in graph.initializer:
        yield path, t
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_initializers(attr.g, f"{path}/{node.output[0]}.{attr.name}")


def check(case: Case4, config: str) -> list[str]:
    m, feeds, expected = _original(case.name)
    before = m.SerializeToString()
    with tempfile.TemporaryDirectory() if case.external else nullcontext("") as folder:
        try:
            result, extra = _optimize(case, m, config, Path(folder))
        except normfuse.NormfuseError as error:
            return [f"REFUSED {error}"]
        except Exception as error:
            return [f"CRASH {type(error).__name__}: {str(error).splitlines()[-1][:300]}"]
    problems = []
    out = result.model
    if case.external:
        out, problems = extra
    if m.SerializeToString() != before:
        problems.append("INPUT-MODIFIED")
    if _interface(out.graph.input) != _interface(m.graph.input):
        problems.append("INTERFACE inputs differ")
    if _interface(out.graph.output) != _interface(m.graph.output):
        problems.append("INTERFACE outputs differ")
    if config == "onnx":
        try:
            onnx.checker.check_model(out, full_check=True)
        except Exception as error:
            problems.append(f"CHECKER {str(error).splitlines()[0][:300]}")
    try:
        candidate = session(out)
    except Exception as error:
        return [*problems, f"UNRUNNABLE {str(error).splitlines()[0][:300]}"]
    dtype = narrowest_float(m)
    for (label, f), originals in zip(feeds, expected, strict=True):
        try:
            outputs = candidate.run(None, f)
        except Exception as error:
            problems.append(f"UNRUNNABLE on {label}: {str(error).splitlines()[0][:300]}")
            return problems
        verdict = compare(originals, outputs, dtype)
        if not verdict.ok and not _no_further_from_f64(m, f, originals, outputs):
            problems.append(f"WRONG-NUMERICS on {label}: {verdict.detail}")
    if result.report.sites:
        problems += _placement_problems(m, out)
        if out.ByteSize() > m.ByteSize() + _allowance(m, len(result.report.sites)):
            problems.append(f"GROWN {m.ByteSize()} -> {out.ByteSize()} bytes")
    if case.f64_ratio and result.report.sites:
        problems += _f64_problems(m, out, feeds)
    # "default": under --target onnx too, opset-too-low is no excuse for an expected fusion.
    problems += _check_expectation(case, "default", m, result.report)
    return problems


@pytest.mark.parametrize(
    ("name", "config"), case_config_params(CASES, FINDINGS, "docs/limitations.md")
)
def test_adversarial_4_case(name: str, config: str) -> None:
    problems = check(BY_NAME[name], config)
    assert not problems, f"{name} [{BY_NAME[name].feature}] {config}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_case_is_a_valid_model(name: str) -> None:
    """Each case passes onnx.checker full_check and runs in ONNX Runtime on all its feeds."""
    m, feeds, _ = _original(name)
    onnx.checker.check_model(m, full_check=True)
    assert feeds


def test_corpus_size_and_features() -> None:
    features = [c.feature for c in CASES]
    assert len(CASES) >= 60
    assert {f: features.count(f) >= 4 for f in "1234"} == dict.fromkeys("1234", True)
    assert set(FINDINGS) <= set(BY_NAME)
