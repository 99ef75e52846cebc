"""Repairs are said, never silent (issue 34): a site after which an output differs from the
original's beyond tolerance on an input profile, but no further from a float64 evaluation, is
kept with a `repair` record (profile, output, both distances) in the report and a table line;
`refuse_repairs` leaves it decomposed (`repair-refused`); further from float64, it is rolled
back (`output-differs`)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, session
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.prove.compare import TYPICAL_ALLOWANCE, no_further
from normfuse.prove.profiles import OFFSETS


def _layer_norm(width: int, rows: int = 8) -> onnx.ModelProto:
    """A float32 layer norm over rows of `width`, straight from the graph input."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centred", "std"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    io = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])
    graph = helper.make_graph(nodes, "layer_norm", [io], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _float64_layer_norm(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    centred = wide - wide.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("width", [2, 4, 16])
def test_a_float32_layer_norm_on_offset_rows_is_a_repair_and_said(width: int) -> None:
    original = _layer_norm(width)
    result = normfuse.optimize(original)
    (site,) = result.report.sites
    profiles = {entry["profile"] for entry in site.repair}
    assert "offset" in profiles
    entry = next(e for e in site.repair if e["profile"] == "offset")
    assert entry["output"] == "y"
    assert entry["rewrite_to_float64"] <= entry["original_to_float64"] * TYPICAL_ALLOWANCE + 1e-2
    record = json.loads(result.report.to_json())["sites"][0]
    assert record["repair"][0]["profile"] in profiles
    assert "repair layer-norm at 'y'" in result.report.table()
    # The numbers are what an independent float64 evaluation says, on rows like the profile's.
    rng = np.random.default_rng(1)
    mean, spread = OFFSETS[1]
    x = (mean + spread * rng.standard_normal((8, width))).astype(np.float32)
    reference = _float64_layer_norm(x)
    before = session(original).run(None, {"x": x})[0]
    assert np.abs(before - reference).max() > 1e-4  # float32 itself cannot hold these rows
    assert_same_numerics(original, result.model)


def test_refused_repairs_leave_the_site_decomposed() -> None:
    original = _layer_norm(16)
    result = normfuse.optimize(original, refuse_repairs=True)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["repair-refused"]
    assert "from float64 against the original's" in result.report.near_misses[0].detail
    assert result.model.SerializeToString() == original.SerializeToString()


def test_no_further_allows_a_coin_toss_not_a_worse_kernel() -> None:
    """Two float32 evaluations of ill-conditioned rows are each ~1e-3 from float64: the one
    whose worst element is further by less than the tolerance, or whose typical distance is
    within the allowance, is no further; a systematically worse one is."""
    reference = np.zeros(1000)
    original = np.full(1000, 1e-3)
    assert no_further(original * 1.2, original, reference, 1e-4, 1e-4)
    assert not no_further(original * 2.0, original, reference, 1e-4, 1e-4)
    assert not no_further(np.where(reference == 0, np.inf, 0), original, reference, 1e-4, 1e-4)


def test_a_group_normalization_21_rewrite_is_a_repair_of_its_one_pass_body() -> None:
    """GroupNormalization-21, inlined by ONNX Runtime as E[x^2] - E[x]^2, is ~1 off float64 on
    offset rows; the two-pass rewrite is not: kept, and said."""
    rng = np.random.default_rng(0)
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=4)
    inits = [
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, 8).astype(np.float32), "bias"),
    ]
    io = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 3, 3])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 3, 3])
    graph = helper.make_graph([node], "gn21", [io], [out], inits)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    result = normfuse.optimize(original)
    (site,) = result.report.sites
    offset = next(e for e in site.repair if e["profile"] == "offset")
    # null: the original gives NaN where float64 is finite (a negative one-pass variance)
    assert offset["original_to_float64"] is None or offset["original_to_float64"] > 0.1
    assert offset["rewrite_to_float64"] < 0.01
    assert json.dumps(site.repair, allow_nan=False)  # strict JSON: no Infinity


def test_a_layer_norm_the_profiles_cannot_reach_carries_the_class_note() -> None:
    """ADV13-03: ids -> Gather(a table of ill-conditioned rows) -> layer norm: no float profile
    reaches the rows, so no repair is seen; the report still says what such rows do."""
    rng = np.random.default_rng(6)
    table = (1000 + 0.01 * rng.standard_normal((50, 16))).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["x"]),
        *_layer_norm(16).graph.node,
    ]
    graph = helper.make_graph(
        nodes,
        "embedded",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 16])],
        [numpy_helper.from_array(table, "table"), *_layer_norm(16).graph.initializer],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    noted = any(note.startswith("note: fused layer norms") for note in result.report.notes)
    assert noted or result.report.sites[0].repair  # told either way, never silent
    rms = normfuse.optimize(
        helper.make_model(
            helper.make_graph(
                [
                    helper.make_node("Mul", ["x", "x"], ["sq"]),
                    helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
                    helper.make_node("Add", ["ms", "eps"], ["mse"]),
                    helper.make_node("Sqrt", ["mse"], ["r"]),
                    helper.make_node("Div", ["x", "r"], ["y"]),
                ],
                "rms",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
                [numpy_helper.from_array(np.array(1e-5, np.float32), "eps")],
            ),
            opset_imports=[helper.make_opsetid("", 13)],
        )
    )
    assert rms.report.sites and not rms.report.notes  # RMS norms do not centre: no such note


def test_a_repair_kept_by_its_typical_distance_says_so() -> None:
    """Where the rewrite is further from float64 at its worst element but not typically (the
    RMS rule), the record and its line give both distances (adversary 15: the line showed only
    the worst elements, the rewrite's twice the original's, under a rule saying 'no further')."""
    from normfuse.prove.compare import nearness
    from normfuse.prove.guard import Repair

    reference = np.zeros(100)
    original = np.full(100, 1e-3)
    spiky = np.zeros(100)
    spiky[0] = 2e-3
    assert nearness(original * 0.5, original, reference, 0.0, 0.0) == "largest"
    assert nearness(spiky, original, reference, 0.0, 0.0) == "typical"
    assert nearness(original * 2, original, reference, 0.0, 0.0) is None
    line = Repair("offset", "y", 0.00203, 0.00391, (1.0e-4, 1.2e-4)).sentence()
    assert "typical (RMS) 0.00012 from float64 against the original's 0.0001" in line
    assert "(largest 0.00391 against 0.00203)" in line
    assert Repair("offset", "y", 0.00203, 0.00391, (1e-4, 1.2e-4)).as_dict()["typical_to_float64"]


def test_the_repair_search_is_bounded_and_says_where_it_stopped() -> None:
    """Finding the sites behind a repair rebuilds the model about 2·log2(n) times per site; past
    `MAX_REPAIR_BUILDS` a group is named whole, each of its sites' records saying among how many
    sites (a 200-layer chain took 108 s in the search alone before the bound)."""
    from normfuse.prove import rollback
    from normfuse.prove.guard import Failure

    outputs = [f"s{index}" for index in range(64)]
    guilty = {"s3", "s40", "s41", "s60"}
    builds = []

    def build(excluded):
        builds.append(1)
        return [output for output in outputs if output not in excluded]

    def check(kept) -> Failure | None:
        hits = guilty & set(kept)
        return Failure("repair", "r", ({"output": "y"},)) if hits else None

    evidence = Failure("repair", "r", ({"output": "y"},))
    found = rollback.culprits(build, {}, outputs, evidence, check, max_builds=8)
    assert len(builds) <= 8
    assert guilty <= set(found)
    grouped = [failure for failure in found.values() if "not attributed further" in failure.detail]
    assert grouped and all(failure.evidence[0]["among_sites"] > 1 for failure in grouped)
    unbounded = rollback.culprits(lambda e: build(e), {}, outputs, evidence, check)
    assert set(unbounded) == guilty


def test_a_rewrite_of_many_sites_names_its_repair_among_them_without_rebuilds() -> None:
    """Past `MAX_ATTRIBUTED_SITES` sites the repair is not searched (each rebuild is a whole
    rewrite): every site carries the evidence with `among_sites`, the table says it once."""
    from models.builders import LayerNormSpec, norm_model
    from normfuse.prove import rollback

    layers = rollback.MAX_ATTRIBUTED_SITES + 1
    result = normfuse.optimize(norm_model(LayerNormSpec(), shape=(1, 16, 64), layers=layers))
    assert len(result.report.sites) == layers
    assert all(site.repair[0]["among_sites"] == layers for site in result.report.sites)
    lines = [line for line in result.report.table().splitlines() if line.startswith("repair")]
    assert lines == [lines[0]] and f"in one of {layers} sites" in lines[0]
