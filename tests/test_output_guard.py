"""The one final check and the output guard's run: a site that cannot be emitted, or whose
rewrite does not load, run or keep its output's shape, is left decomposed with its reason while
every other site is kept; the model is never refused for one site.

Bad sites are planted by wrapping a real pass so that it returns a hand-built `Site` for one
chosen output. The guard's own tests bypass the final check (`final_check.problem` returns
None), so that the planted site reaches the output and only the guard's run can catch it."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from pathlib import Path

import normfuse.passes
import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts
from normfuse.passes.layer_norm import LayerNormPass
from onnx import helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import normfuse
from models.builders import GraphBuilder, LayerNormSpec, add_layer_norm, norm_model
from normfuse.driver import optimize as driver
from normfuse.match import final_check
from normfuse.match.records import FusedNode
from normfuse.prove import guard, inputs, sessions

ROOT = Path(__file__).resolve().parent.parent

FLOAT = onnx.TensorProto.FLOAT
MS = "com.microsoft"


class Planted:
    """`inner`, except that a site fusing `output` (a name or a set) is replaced by
    `plant(site)`."""

    def __init__(self, inner, output: str | set[str], plant) -> None:
        self.outputs = {output} if isinstance(output, str) else output
        self.inner, self.plant = inner, plant
        self.name, self.kind = inner.name, inner.kind
        self.patterns, self.shared_names = inner.patterns, inner.shared_names
        self.never_outputs = getattr(inner, "never_outputs", ())

    def site_key(self, match):
        return self.inner.site_key(match)

    def check(self, match, context):
        site = self.inner.check(match, context)
        if site is not None and site.output in self.outputs:
            return self.plant(site)
        return site


def with_inputs(site, *inputs):
    """`site` with its fused node reading `inputs` instead."""
    return dataclasses.replace(site, fused=dataclasses.replace(site.fused, inputs=inputs))


def plant(monkeypatch, output: str | set[str], change) -> None:
    """The layer-norm pass, with the site of `output` replaced by `change(site)`."""
    planted = (Planted(LayerNormPass(), output, change),)
    monkeypatch.setattr(normfuse.passes, "select", lambda names: planted)


def bypass_final_check(monkeypatch) -> None:
    monkeypatch.setattr(final_check, "problem", lambda site, found, context: None)


def sites_of(model: onnx.ModelProto, **options) -> list:
    return normfuse.optimize(model, **options).report.sites


def reasons(report) -> list[str]:
    return [miss.reason for miss in report.near_misses]


def assert_kept_all_but(result, original, outputs: list[str], planted: str) -> None:
    """Every site of `outputs` but `planted` fused, numerics the original's."""
    assert [site.output for site in result.report.sites] == [o for o in outputs if o != planted]
    assert op_counts(result.model)["LayerNormalization"] == len(outputs) - 1
    assert_same_numerics(original, result.model)


@pytest.fixture
def three_norms() -> onnx.ModelProto:
    return norm_model(LayerNormSpec(), shape=("batch", 7, 32), layers=3)


def test_final_check_refuses_a_wrong_rank_scale_and_keeps_the_others(monkeypatch, three_norms):
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[1]

    def wrong_rank(site):
        x, scale, bias = site.fused.inputs
        return with_inputs(site, x, scale.reshape(1, 32), bias)

    plant(monkeypatch, target, wrong_rank)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["gamma-shape"]
    assert_kept_all_but(result, three_norms, outputs, target)


def test_final_check_refuses_a_scale_of_another_dtype(monkeypatch, three_norms):
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[0]

    def float64_scale(site):
        x, scale, bias = site.fused.inputs
        return with_inputs(site, x, scale.astype(np.float64), bias)

    plant(monkeypatch, target, float64_scale)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["gamma-shape"]
    assert_kept_all_but(result, three_norms, outputs, target)


@pytest.mark.parametrize("epsilon", [0.0, -1e-5, float("nan"), float("inf")])
def test_final_check_refuses_an_epsilon_that_is_not_positive(monkeypatch, three_norms, epsilon):
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[2]

    def bad_epsilon(site):
        fused = dataclasses.replace(site.fused, attrs={**site.fused.attrs, "epsilon": epsilon})
        return dataclasses.replace(site, fused=fused)

    plant(monkeypatch, target, bad_epsilon)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["epsilon-not-positive"]
    assert_kept_all_but(result, three_norms, outputs, target)


def test_final_check_refuses_an_output_of_another_type(monkeypatch, three_norms):
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[0]

    def cast_output(site):
        fused = dataclasses.replace(site.fused, output_cast=onnx.TensorProto.FLOAT16)
        return dataclasses.replace(site, fused=fused)

    plant(monkeypatch, target, cast_output)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["output-type"]
    assert_kept_all_but(result, three_norms, outputs, target)


def test_final_check_refuses_a_statistic_of_the_wrong_shape(monkeypatch, three_norms):
    """A hand-built InvStdDev output that is x itself ([batch, 7, 32], not [batch, 7, 1])."""
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[0]

    def x_as_statistic(site):
        fused = dataclasses.replace(site.fused, extra_outputs=((2, site.fused.inputs[0]),))
        return dataclasses.replace(site, fused=fused)

    plant(monkeypatch, target, x_as_statistic)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["output-shape"]
    assert_kept_all_but(result, three_norms, outputs, target)


def float64_residual_model() -> onnx.ModelProto:
    spec = LayerNormSpec(epsilon=float(np.float32(1e-5)))  # exactly a float32: fused in double
    return norm_model(spec, shape=(1, 7, 32), dtype=np.float64, layers=3)


def test_float64_skip_sites_are_left_and_the_norms_kept():
    model = float64_residual_model()
    result = normfuse.optimize(model, passes="layer-norm,skip-norm")
    skip_misses = [m for m in result.report.near_misses if m.kind == "skip-norm"]
    assert len(skip_misses) == 2
    assert {miss.reason for miss in skip_misses} == {"unsupported-dtype"}
    assert Counter(site.kind for site in result.report.sites) == {"layer-norm": 3}
    assert "SkipLayerNormalization" not in op_counts(result.model)
    assert_same_numerics(model, result.model)


def as_float64_skip(site):
    """A hand-built `SkipLayerNormalization` site (skip = x) in place of a layer norm."""
    x, gamma, beta = site.fused.inputs
    fused = FusedNode("SkipLayerNormalization", MS, {"epsilon": site.epsilon}, (x, x, gamma, beta))
    return dataclasses.replace(
        site, op=fused.op, domain=MS, fused=fused, ort_only=True, kind="skip-norm"
    )


@pytest.mark.parametrize("final", ["checked", "bypassed"])
def test_a_float64_skip_site_is_rolled_back_and_the_norms_kept(monkeypatch, final):
    """ONNX Runtime has no float64 Skip kernel: the final check refuses the site; past it, the
    output does not load and the guard rolls the site back. The other layer norms stay."""
    model = float64_residual_model()
    outputs = [site.output for site in sites_of(model)]
    target = outputs[1]
    if final == "bypassed":
        bypass_final_check(monkeypatch)
    plant(monkeypatch, target, as_float64_skip)
    result = normfuse.optimize(model)
    expected = {"checked": "unsupported-dtype", "bypassed": "output-does-not-load"}[final]
    assert reasons(result.report) == [expected]
    assert "SkipLayerNormalization" not in op_counts(result.model)
    assert_kept_all_but(result, model, outputs, target)


def test_guard_rolls_back_two_failing_sites_and_keeps_the_rest(monkeypatch):
    """Two float64 Skip sites among five norms, past the final check: bisection finds both."""
    bypass_final_check(monkeypatch)
    spec = LayerNormSpec(epsilon=float(np.float32(1e-5)))
    model = norm_model(spec, shape=(1, 7, 32), dtype=np.float64, layers=5)
    outputs = [site.output for site in sites_of(model)]
    planted = {outputs[1], outputs[4]}
    plant(monkeypatch, planted, as_float64_skip)
    result = normfuse.optimize(model)
    assert reasons(result.report) == ["output-does-not-load"] * 2
    assert {miss.node for miss in result.report.near_misses} == planted
    assert [site.output for site in result.report.sites] == [o for o in outputs if o not in planted]
    assert op_counts(result.model)["LayerNormalization"] == 3
    assert_same_numerics(model, result.model)


def test_guard_rolls_back_a_site_that_does_not_run(monkeypatch, three_norms):
    """A scale of half the hidden size loads (ONNX Runtime checks it at run time) and fails at
    the first run: only the guard's run sees it."""
    bypass_final_check(monkeypatch)
    outputs = [site.output for site in sites_of(three_norms)]
    target = outputs[1]

    def short_scale(site):
        x, scale, bias = site.fused.inputs
        return with_inputs(site, x, scale[:16], bias[:16])

    plant(monkeypatch, target, short_scale)
    result = normfuse.optimize(three_norms)
    assert reasons(result.report) == ["output-does-not-run"]
    detail = next(m.detail for m in result.report.near_misses if m.node == target)
    assert detail.startswith("ONNX Runtime: ") and "\n" not in detail
    assert_kept_all_but(result, three_norms, outputs, target)


def unshaped_outputs_model(count: int = 3) -> onnx.ModelProto:
    """`count` affine-free layer norms of x [batch, 7, 32], each a graph output declared without
    a shape (so only running the model shows what shape it gives)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder(17)
    spec = LayerNormSpec(scale=False, bias=False)
    outputs = [add_layer_norm(b, "x", ("batch", 7, 32), spec, rng) for _ in range(count)]
    graph = helper.make_graph(
        b.nodes,
        "unshaped",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", 7, 32])],
        [helper.make_tensor_value_info(name, FLOAT, None) for name in outputs],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_guard_rolls_back_a_site_whose_output_shape_differs(monkeypatch):
    """A planted layout transposes the output: the model loads and runs, but one output is
    [1, 32, 7] where the original's is [1, 7, 32]."""
    bypass_final_check(monkeypatch)
    model = unshaped_outputs_model()
    outputs = [site.output for site in sites_of(model)]
    target = outputs[2]

    def transposed(site):
        ones = np.ones(7, np.float32)
        fused = dataclasses.replace(
            site.fused, inputs=(site.fused.inputs[0], ones), layout=((0, 2, 1), (0, 1, 2))
        )
        return dataclasses.replace(site, fused=fused)

    plant(monkeypatch, target, transposed)
    result = normfuse.optimize(model)
    assert reasons(result.report) == ["output-shape-changed"]
    assert_kept_all_but(result, model, outputs, target)


def test_an_early_run_of_the_original_gives_the_same_verdicts(monkeypatch):
    """With the guard's runs on a worker thread (`EARLY_NODES` lowered so that a small model
    qualifies), the guard rolls back the same site for the same reason, the report and the model
    are the ones of the runs in line, and no thread outlives the call."""
    bypass_final_check(monkeypatch)
    model = unshaped_outputs_model()
    outputs = [site.output for site in sites_of(model)]

    def transposed(site):
        ones = np.ones(7, np.float32)
        fused = dataclasses.replace(
            site.fused, inputs=(site.fused.inputs[0], ones), layout=((0, 2, 1), (0, 1, 2))
        )
        return dataclasses.replace(site, fused=fused)

    plant(monkeypatch, outputs[2], transposed)
    in_line = normfuse.optimize(model)
    workers = Counter()
    worker = guard._Worker

    def counted(compute):
        workers["started"] += 1
        return worker(compute)

    monkeypatch.setattr(guard, "EARLY_NODES", 0)
    monkeypatch.setattr(guard, "_Worker", counted)
    result = normfuse.optimize(model)
    assert workers["started"] >= 2  # the original's run, and the rewrite's beside its checks
    assert reasons(result.report) == reasons(in_line.report) == ["output-shape-changed"]
    assert result.report.as_dict() == in_line.report.as_dict()
    assert result.model.SerializeToString() == in_line.model.SerializeToString()
    assert not [t for t in threading.enumerate() if t.name == guard.THREAD_NAME]
    assert_kept_all_but(result, model, outputs, outputs[2])


def test_no_early_run_for_a_small_model(monkeypatch, three_norms):
    """Below `EARLY_NODES` the guard runs both models in line (the original only once a site
    was fused)."""
    started = Counter()
    monkeypatch.setattr(guard, "_Worker", lambda compute: started.update(["worker"]))
    assert len(three_norms.graph.node) < guard.EARLY_NODES
    assert len(sites_of(three_norms)) == 3
    assert not started


def pooled_norms_model() -> onnx.ModelProto:
    """Issue 21, class 1: x [2, 3, 5] through MaxPool (k 2, s 2, pads [1, 1], ceil_mode 1),
    which onnx infers as length 4 and ONNX Runtime computes as 3, then an affine-free layer
    norm; beside it a layer norm of x itself."""
    rng = np.random.default_rng(0)
    b = GraphBuilder(17)
    pooled = b.op("MaxPool", ["x"], kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)
    spec = LayerNormSpec(scale=False, bias=False)
    of_pooled = add_layer_norm(b, pooled, (2, 3, 4), spec, rng)
    of_x = add_layer_norm(b, "x", (2, 3, 5), LayerNormSpec(), rng)
    graph = helper.make_graph(
        b.nodes,
        "pooled",
        [helper.make_tensor_value_info("x", FLOAT, [2, 3, 5])],
        [
            helper.make_tensor_value_info(of_pooled, FLOAT, [2, 3, None]),
            helper.make_tensor_value_info(of_x, FLOAT, [2, 3, 5]),
        ],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_norm_sized_from_a_wrong_inferred_dim_never_reaches_the_output():
    """Without the guard's run the pooled norm was fused with a ones-scale of 4 elements and the
    output failed at its first run. It is left (by the guard, or by a pass that no longer trusts
    the inferred dim), and the norm of x is kept."""
    model = pooled_norms_model()
    result = normfuse.optimize(model)
    [miss] = result.report.near_misses
    assert miss.reason == "unknown-shape"  # the pooled dim is not one ORT agrees with
    assert [site.input for site in result.report.sites] == ["x"]
    assert op_counts(result.model)["LayerNormalization"] == 1
    assert_same_numerics(model, result.model)


def rank_raising_residual_model(hidden: int = 8) -> onnx.ModelProto:
    """Issue 21, class 5: `(a + b) + s` with a constant b [1, 1, 1, H] and a, s [2, 4, H], so the
    sum and the norm's output are [1, 2, 4, H]; a Skip op would return [2, 4, H]."""
    rng = np.random.default_rng(0)
    arrays = {
        "b": rng.normal(size=(1, 1, 1, hidden)),
        "g": rng.uniform(0.5, 1.5, hidden),
        "beta": rng.normal(size=hidden),
    }
    initializers = [
        onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()
    ]
    nodes = [
        helper.make_node("Add", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["ab", "s"], ["sum"]),
        helper.make_node("LayerNormalization", ["sum", "g", "beta"], ["y"], epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes,
        "rank_raising",
        [helper.make_tensor_value_info(name, FLOAT, [2, 4, hidden]) for name in ("a", "s")],
        [helper.make_tensor_value_info("y", FLOAT, [1, 2, 4, hidden])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_residual_fusion_that_would_lower_the_rank_is_refused():
    model = rank_raising_residual_model()
    result = normfuse.optimize(model, passes="skip-norm")
    assert result.report.sites == []
    # The pass refuses it first (input and skip are not proved one shape); the final check's
    # `output-shape` is the backstop, tested on planted sites above.
    assert reasons(result.report) == ["skip-shape"]
    assert "SkipLayerNormalization" not in op_counts(result.model)
    assert_same_numerics(model, result.model)


def test_bisection_rebuilds_logarithmically(monkeypatch):
    """One failing site among 16: the rollback rebuilds the model at most 2·log2(16) + 2 times
    (the first build, the bisection, the final build), not once per site."""
    bypass_final_check(monkeypatch)
    model = unshaped_outputs_model(16)
    outputs = [site.output for site in sites_of(model)]
    target = outputs[11]

    def short_scale(site):
        return with_inputs(site, site.fused.inputs[0], np.ones(16, np.float32))

    plant(monkeypatch, target, short_scale)
    # Every layer norm here is a repair on offset rows; finding their sites is another search.
    monkeypatch.setattr(normfuse.prove.rollback, "repaired_sites", lambda *args: {})
    builds = []
    rewrite = driver._optimize
    monkeypatch.setattr(driver, "_optimize", lambda *a, **k: builds.append(1) or rewrite(*a, **k))
    result = normfuse.optimize(model)
    assert reasons(result.report) == ["output-does-not-run"]
    assert len(result.report.sites) == 15
    assert len(builds) <= 2 * 4 + 2
    assert_same_numerics(model, result.model)


def test_original_that_does_not_run_on_generated_inputs_gets_the_weightless_checks():
    """x [batch, seq, 32] reshaped to [1, 7, 32]: at the guard's seq = 3 the original fails, so
    the guard does not run either model, and the norm fuses as before."""
    rng = np.random.default_rng(0)
    b = GraphBuilder(17)
    shaped = b.op("Reshape", ["x", b.const(np.array([1, 7, 32]), "shape", np.int64)])
    y = add_layer_norm(b, shaped, (1, 7, 32), LayerNormSpec(), rng)
    graph = helper.make_graph(
        b.nodes,
        "reshaped",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", "seq", 32])],
        [helper.make_tensor_value_info(y, FLOAT, [1, 7, 32])],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert op_counts(result.model)["LayerNormalization"] == 1
    assert_same_numerics(model, result.model, dims={"batch": 1, "seq": 7})


def test_run_size_limit(three_norms):
    assert guard.runnable(three_norms)
    external = onnx.ModelProto()
    external.CopyFrom(three_norms)
    tensor = external.graph.initializer[0]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="weights.bin")
    assert not guard.runnable(external)  # its weights' folder unknown
    assert guard.runnable(external, Path("."))  # read from there, within the size limit
    big = onnx.ModelProto()
    big.CopyFrom(three_norms)
    big.graph.initializer.append(
        onnx.numpy_helper.from_array(np.zeros(guard.MAX_RUN_BYTES // 4 + 1, np.float32), "big")
    )
    assert not guard.runnable(big)


def test_probe_dims_are_small():
    model = unshaped_outputs_model(1)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    assert inputs.probe_dims(model) == {"batch": 1, "sequence": inputs.PROBE_DIM}


def test_a_worker_gives_its_value_or_raises_its_error():
    """What the guard computes on a worker thread is never lost: an error raised there is
    raised where the value is asked for (never read as "no failure")."""
    assert guard._Worker(lambda: 42).wait() == 42
    with pytest.raises(ZeroDivisionError):
        guard._Worker(lambda: 1 / 0).wait()


DYNAMO_WITH_PAST = ROOT / "models" / "real" / "kv" / "llama_dynamo_with_past_opset18_float32.onnx"


def test_a_declared_present_length_sizes_the_mask_the_outputs_do_not_name():
    """A dynamo with-past decoder names its mask length `s53` and declares its present length
    `s15 + s70`: the guard's second choice gives the mask that sum, and the original runs on it
    (on the first, all 3, it does not)."""
    model = onnx.load(DYNAMO_WITH_PAST)
    first, second = inputs.probe_dim_choices(model)
    assert first == dict.fromkeys(["s15", "s53", "s70", "s81", "s89"], inputs.PROBE_DIM)
    assert second == {**first, "s53": 2 * inputs.PROBE_DIM}
    session = sessions.create(model, "cpu", "disable", None)
    with pytest.raises(InvalidArgument):
        session.run(None, inputs.make_inputs(model, first)[0])
    feeds, outputs = guard._first_run(session, model)
    assert feeds["attention_mask"].shape == (1, 2 * inputs.PROBE_DIM)
    assert outputs[0].shape == (1, inputs.PROBE_DIM, 64)


def test_the_guard_catches_a_wrong_site_in_a_with_past_decoder(monkeypatch) -> None:
    """Before the guard could run a with-past decoder (its mask sized apart from past +
    sequence), a wrong epsilon in one of its norms was kept; now it is rolled back."""
    from normfuse.match import norm_checks

    honest = normfuse.optimize(str(DYNAMO_WITH_PAST))
    target = honest.report.sites[2].output
    real_epsilon = norm_checks.epsilon

    def wrong_for_one_site(match, context, *shape):
        value = real_epsilon(match, context, *shape)
        return value * 1e5 if match.root.name == target else value

    monkeypatch.setattr(norm_checks, "epsilon", wrong_for_one_site)
    guarded = normfuse.optimize(str(DYNAMO_WITH_PAST))
    assert [site.output for site in guarded.report.sites] == [
        site.output for site in honest.report.sites if site.output != target
    ]
    assert [miss.reason for miss in guarded.report.near_misses] == ["output-differs"]


def test_the_wide_probe_pads_masks_left_and_right() -> None:
    """A stage's second guard runs at batch 2 with padded masks: row 0 padded on the right,
    row 1 on the left, other inputs untouched (adversary 15: an attention fusion that ignored
    the mask's layout passed on a mask of ones)."""
    feeds = {
        "attention_mask": np.ones((2, 6), np.int64),
        "x": np.ones((2, 6), np.float32),
        "mask_flags": np.ones((2, 1, 6), bool),
    }
    padded = inputs.padded_masks(feeds)
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert padded["mask_flags"][:, 0].tolist() == [
        [True] * 4 + [False] * 2,
        [False] * 2 + [True] * 4,
    ]
    assert padded["x"] is feeds["x"]
    assert inputs.WIDE_PROBE.batch == 2 and inputs.WIDE_PROBE.padded_masks


def test_an_input_dim_an_output_names_keeps_its_probe_size() -> None:
    """Only input dims that no output names take a declared sum: a mask `length` that an
    output also has keeps its own size, not `past + seq`."""
    infos = [
        helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1, dim])
        for name, dim in (("p", "past"), ("x", "seq"), ("mask", "length"))
    ]
    outputs = [
        helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, "past + seq"]),
        helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, "length"]),
    ]
    nodes = [
        helper.make_node("Concat", ["p", "x"], ["y"], axis=1),
        helper.make_node("Identity", ["mask"], ["z"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", infos, outputs))
    assert inputs.probe_dim_choices(model) == [
        dict.fromkeys(["past", "seq", "length"], inputs.PROBE_DIM)
    ]
    del model.graph.output[1]  # now no output names `length`: it may take the declared sum
    assert inputs.probe_dim_choices(model)[1]["length"] == 2 * inputs.PROBE_DIM


def test_a_model_the_guard_cannot_run_says_so() -> None:
    """A merged decoder's generated inputs do not run it: its sites rest on the weightless
    checks, and the report says so (no repair could be seen); a model it runs has no such note."""
    from normfuse.driver.optimize import NOT_RUN_NOTE

    merged = normfuse.optimize(
        str(ROOT / "models" / "real" / "kv" / "llama_optimum_merged_opset17.onnx")
    )
    assert merged.report.sites and NOT_RUN_NOTE in merged.report.notes
    ran = normfuse.optimize(str(DYNAMO_WITH_PAST))
    assert ran.report.sites and NOT_RUN_NOTE not in ran.report.notes
