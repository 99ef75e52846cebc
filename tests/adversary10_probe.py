# ruff: noqa
# An adversary's standalone probe, kept as it wrote it (never collected by pytest).
"""ADV10 probe: --dims/--inputs pre-checks. Standalone; prints PASS/FAIL per case."""

import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

NF = os.path.join(os.path.dirname(sys.executable), "normfuse")
D = tempfile.mkdtemp(prefix="adv10_")


def ln_graph(
    inp_type=T.FLOAT,
    shape=("batch", "seq", 8),
    extra_inputs=(),
    extra_inits=(),
    extra_nodes=(),
    extra_outputs=(),
):
    x = h.make_tensor_value_info("x", T.FLOAT, list(shape))
    nodes = [
        h.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        h.make_node("Sub", ["x", "m"], ["d"]),
        h.make_node("Mul", ["d", "d"], ["s"]),
        h.make_node("ReduceMean", ["s"], ["v"], axes=[-1]),
        h.make_node("Add", ["v", "eps"], ["ve"]),
        h.make_node("Sqrt", ["ve"], ["sd"]),
        h.make_node("Div", ["d", "sd"], ["n"]),
        h.make_node("Mul", ["n", "g"], ["ng"]),
        h.make_node("Add", ["ng", "b"], ["y"]),
    ] + list(extra_nodes)
    inits = [
        nh.from_array(np.array(1e-5, np.float32), "eps"),
        nh.from_array(np.ones(8, np.float32) * 1.5, "g"),
        nh.from_array(np.full(8, 0.25, np.float32), "b"),
    ] + list(extra_inits)
    g = h.make_graph(
        nodes,
        "g",
        [x] + list(extra_inputs),
        [h.make_tensor_value_info("y", T.FLOAT, list(shape))] + list(extra_outputs),
        inits,
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def run(args):
    p = subprocess.run([NF] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, (p.stdout + p.stderr)


def case(name, model, extra, expect_ok, npz=None):
    f = os.path.join(D, name + ".onnx")
    onnx.save(model, f)
    out = os.path.join(D, name + ".out.onnx")
    args = ["optimize", f, "-o", out, "--validate"] + extra
    if npz is not None:
        nf = os.path.join(D, name + ".npz")
        np.savez(nf, **npz)
        args += ["--inputs", nf]
    rc, txt = run(args)
    tb = "Traceback" in txt
    if expect_ok:
        ok = rc == 0 and not tb
    else:
        errl = [l for l in txt.splitlines() if l.startswith("normfuse: error:")]
        ok = rc == 2 and not tb and len(errl) == 1 and not os.path.exists(out)
    last = txt.strip().splitlines()[-1][:200] if txt.strip() else ""
    print(
        f"{'PASS' if ok else 'FAIL'} {name}: rc={rc} tb={tb} expect_ok={expect_ok} | {last}",
        flush=True,
    )
    return ok


def main():
    r = np.random.default_rng(0)
    X = lambda *s: r.standard_normal(s).astype(np.float32)
    # VALID
    case("dims_plain", ln_graph(), ["--dims", "batch=2,seq=3"], True)
    # initializer that is also a graph input, overridden in npz
    gi = h.make_tensor_value_info("g", T.FLOAT, [8])
    m = ln_graph(extra_inputs=[gi])
    case("init_input_override", m, ["--dims", "batch=2,seq=3"], True, {"x": X(2, 3, 8), "g": X(8)})
    case("init_input_default", m, ["--dims", "batch=2,seq=3"], True, {"x": X(2, 3, 8)})
    # shared symbolic dim between two inputs, npz consistent
    z = h.make_tensor_value_info("z", T.FLOAT, ["batch", "seq", 8])
    m = ln_graph(
        extra_inputs=[z],
        extra_nodes=[h.make_node("Add", ["y", "z"], ["yz"])],
        extra_outputs=[h.make_tensor_value_info("yz", T.FLOAT, ["batch", "seq", 8])],
    )
    case("shared_sym_ok", m, [], True, {"x": X(2, 3, 8), "z": X(2, 3, 8)})
    case(
        "shared_sym_dims_and_npz", m, ["--dims", "seq=3"], True, {"x": X(2, 3, 8), "z": X(2, 3, 8)}
    )
    # INVALID: shared symbolic dim inconsistent across npz inputs
    case("shared_sym_mismatch", m, [], False, {"x": X(2, 3, 8), "z": X(2, 4, 8)})
    # INVALID: npz contradicts --dims
    # ADV10-02 resolved as a note (the array is fed as it is), not a refusal: expect exit 0.
    case("npz_vs_dims", m, ["--dims", "seq=5"], True, {"x": X(2, 3, 8), "z": X(2, 3, 8)})
    # zero-size dim
    case("zero_seq", ln_graph(), ["--dims", "batch=1,seq=0"], True)
    case("zero_seq_npz", ln_graph(), [], True, {"x": np.zeros((1, 0, 8), np.float32)})
    # bool / int / fp16 extra inputs
    bi = h.make_tensor_value_info("flag", T.BOOL, [])
    ii = h.make_tensor_value_info("ids", T.INT64, ["batch", "seq"])
    hi = h.make_tensor_value_info("hf", T.FLOAT16, ["batch", 8])
    nodes = [
        h.make_node("Cast", ["flag"], ["fc"], to=T.FLOAT),
        h.make_node("Cast", ["ids"], ["ic"], to=T.FLOAT),
        h.make_node("Cast", ["hf"], ["hc"], to=T.FLOAT),
        h.make_node("Mul", ["y", "fc"], ["y2"]),
        h.make_node("Unsqueeze", ["ic", "ax"], ["icu"]),
        h.make_node("Add", ["y2", "icu"], ["y3"]),
        h.make_node("Unsqueeze", ["hc", "ax1"], ["hcu"]),
        h.make_node("Add", ["y3", "hcu"], ["y4"]),
    ]
    m = ln_graph(
        extra_inputs=[bi, ii, hi],
        extra_nodes=nodes,
        extra_inits=[
            nh.from_array(np.array([-1], np.int64), "ax"),
            nh.from_array(np.array([1], np.int64), "ax1"),
        ],
        extra_outputs=[h.make_tensor_value_info("y4", T.FLOAT, ["batch", "seq", 8])],
    )
    good = {
        "x": X(2, 3, 8),
        "flag": np.array(True),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "hf": X(2, 8).astype(np.float16),
    }
    case("types_ok", m, [], True, good)
    case("types_ok_dims", m, ["--dims", "batch=2,seq=3"], True)
    bad = dict(good)
    bad["hf"] = good["hf"].astype(np.float32)
    case("types_fp16_as_fp32", m, [], False, bad)
    bad = dict(good)
    bad["flag"] = np.array(1, np.int64)
    case("types_bool_as_int", m, [], False, bad)
    bad = dict(good)
    bad["flag"] = np.array([True])
    case("types_scalar_as_1d", m, [], False, bad)
    bad = dict(good)
    bad["ids"] = good["ids"].astype(np.int32)
    case("types_int64_as_int32", m, [], False, bad)
    # extra keys in npz
    e = dict(good)
    e["not_an_input"] = X(1)
    case("npz_extra_key", m, [], False, e)  # docs: checked for name -> expect refusal
    # missing required input but its dim given via --dims -> should run (generated)
    p = dict(good)
    del p["hf"]
    case("npz_partial", m, [], True, p)
    # dim used only by output
    m2 = ln_graph()
    m2.graph.output[0].type.tensor_type.shape.dim[1].dim_param = "outonly"
    case("dim_only_output", m2, ["--dims", "batch=2,seq=3,outonly=3"], True)
    # typo
    case("dims_typo", ln_graph(), ["--dims", "btach=2,seq=3"], False)
    case("dims_neg", ln_graph(), ["--dims", "batch=-1,seq=3"], False)
    case("dims_nonint", ln_graph(), ["--dims", "batch=x,seq=3"], False)
    case("dims_empty", ln_graph(), ["--dims", "batch="], False)
    case("dims_noeq", ln_graph(), ["--dims", "batch"], False)
    case("dims_dup_conflict", ln_graph(), ["--dims", "batch=2,batch=3,seq=3"], False)
    case("dims_huge", ln_graph(), ["--dims", "batch=100000000000,seq=100000000000"], False)
    case("dims_static_name", ln_graph(shape=(2, 3, 8)), ["--dims", "batch=2"], True)
    # npz wrong static dim
    case("npz_wrong_static", ln_graph(), [], False, {"x": X(2, 3, 9)})
    case("npz_wrong_rank", ln_graph(), [], False, {"x": X(2, 3)})
    case("npz_obj", ln_graph(), [], False, {"x": np.array(["a"], dtype=object)})
    # corrupt npz
    f = os.path.join(D, "bad.npz")
    open(f, "wb").write(b"PK\x03\x04garbage")
    fm = os.path.join(D, "cor.onnx")
    onnx.save(ln_graph(), fm)
    rc, txt = run(
        ["optimize", fm, "-o", os.path.join(D, "cor.out.onnx"), "--validate", "--inputs", f]
    )
    print(
        f"{'PASS' if rc == 2 and 'Traceback' not in txt else 'FAIL'} npz_corrupt: rc={rc} | {txt.strip().splitlines()[-1][:200] if txt.strip() else ''}"
    )
    rc, txt = run(
        [
            "optimize",
            fm,
            "-o",
            os.path.join(D, "cor2.out.onnx"),
            "--validate",
            "--inputs",
            os.path.join(D, "nope.npz"),
        ]
    )
    print(
        f"{'PASS' if rc == 2 and 'Traceback' not in txt else 'FAIL'} npz_missing: rc={rc} | {txt.strip().splitlines()[-1][:200] if txt.strip() else ''}"
    )
    # pickled npz (allow_pickle)
    f = os.path.join(D, "pk.npz")
    np.savez(f, x=np.array([{"a": 1}], dtype=object))
    rc, txt = run(
        ["optimize", fm, "-o", os.path.join(D, "pk.out.onnx"), "--validate", "--inputs", f]
    )
    print(
        f"{'PASS' if rc == 2 and 'Traceback' not in txt else 'FAIL'} npz_pickle: rc={rc} | {txt.strip().splitlines()[-1][:200] if txt.strip() else ''}"
    )
    # --bench variants
    rc, txt = run(
        [
            "optimize",
            fm,
            "-o",
            os.path.join(D, "b.out.onnx"),
            "--bench",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--dims",
            "btach=2",
        ]
    )
    print(
        f"{'PASS' if rc == 2 and 'Traceback' not in txt else 'FAIL'} bench_dims_typo: rc={rc} | {txt.strip().splitlines()[-1][:200] if txt.strip() else ''}"
    )
    rc, txt = run(
        [
            "optimize",
            fm,
            "-o",
            os.path.join(D, "b2.out.onnx"),
            "--bench",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--dims",
            "batch=0,seq=3",
        ]
    )
    print(
        f"{'PASS' if rc in (0,) and 'Traceback' not in txt else 'FAIL'} bench_zero_batch: rc={rc} | {txt.strip().splitlines()[-1][:200] if txt.strip() else ''}"
    )


if __name__ == "__main__":
    main()
