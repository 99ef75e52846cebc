"""Tiny KV-cache decoders built by hand (no torch), in the two forms LLMs are deployed in.

`merged_decoder_model` mirrors optimum's merged decoder: every weight is one main-graph
initializer, and an `If` on `use_cache_branch` holds the decoder twice, the then-branch reading
`past_key_values.*` (a decode step) and the else-branch ignoring them (a prefill); both branches
read the same outer weights. `with_past_decoder_model` is the then-branch alone as the graph.
Each layer is pre-norm attention (past keys/values concatenated on the sequence axis) and a ReLU
MLP, a final norm and an LM head; the attention has no causal mask (the decode step needs none).
An embedding layer norm sits in the main graph, as in BLOOM, so that every scope has a norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from models.builders import (
    FLOAT_TYPES,
    GraphBuilder,
    LayerNormSpec,
    RmsNormSpec,
    add_layer_norm,
    add_rms_norm,
)


@dataclass(frozen=True)
class DecoderConfig:
    """The size and spelling of a tiny decoder."""

    vocab: int = 512
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    norm: str = "rms"  # rms (LLaMA's casts in float16) | layer
    dtype: type = np.float32
    opset: int = 17
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _norm(b: GraphBuilder, x: str, config: DecoderConfig, rng) -> str:
    shape = ("batch", "sequence", config.hidden)
    if config.norm == "layer":
        return add_layer_norm(b, x, shape, LayerNormSpec(), rng)
    casts = "llama" if config.dtype != np.float32 else "none"
    return add_rms_norm(b, x, shape, RmsNormSpec(casts=casts), rng)


def _weight(b: GraphBuilder, rows: int, columns: int, rng, stem: str) -> str:
    return b.const(rng.normal(0, 1 / np.sqrt(rows), (rows, columns)), stem)


def _heads(b: GraphBuilder, x: str, split: str) -> str:
    """[batch, sequence, hidden] to [batch, heads, sequence, head_dim]."""
    return b.op("Transpose", [b.op("Reshape", [x, split])], perm=[0, 2, 1, 3])


def _decoder(b: GraphBuilder, h: str, past: bool, config: DecoderConfig, weights: dict) -> list:
    """Append the decoder layers on `h` to `b.nodes`; returns [logits, present key, value, ...].
    `weights` holds the weight names (made once, shared by both branches); the norms' constants
    are made per call (each scope has its own norms)."""
    rng = np.random.default_rng(config.seed + (1 if past else 2))
    split = b.const(np.array([0, 0, config.heads, config.head_dim]), "split", np.int64)
    merge = b.const(np.array([0, 0, config.hidden]), "merge", np.int64)
    scale = b.const(1 / np.sqrt(config.head_dim), "attention_scale")
    presents = []
    for layer in range(config.layers):
        w = weights[layer]
        normed = _norm(b, h, config, rng)
        q, k, v = (_heads(b, b.op("MatMul", [normed, w[n]]), split) for n in ("q", "k", "v"))
        if past:
            k = b.op("Concat", [f"past_key_values.{layer}.key", k], axis=2)
            v = b.op("Concat", [f"past_key_values.{layer}.value", v], axis=2)
        presents += [k, v]
        scores = b.op(
            "Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), scale]
        )
        context = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        context = b.op("Reshape", [b.op("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        h = b.op("Add", [h, b.op("MatMul", [context, w["o"]])])
        up = b.op("Relu", [b.op("MatMul", [_norm(b, h, config, rng), w["up"]])])
        h = b.op("Add", [h, b.op("MatMul", [up, w["down"]])])
    logits = b.op("MatMul", [_norm(b, h, config, rng), weights["lm_head"]])
    return [logits, *presents]


def _weights(b: GraphBuilder, config: DecoderConfig, rng) -> dict:
    hidden = config.hidden
    weights: dict = {"lm_head": _weight(b, hidden, config.vocab, rng, "lm_head")}
    for layer in range(config.layers):
        weights[layer] = {n: _weight(b, hidden, hidden, rng, n) for n in ("q", "k", "v", "o")}
        weights[layer]["up"] = _weight(b, hidden, 4 * hidden, rng, "up")
        weights[layer]["down"] = _weight(b, 4 * hidden, hidden, rng, "down")
    return weights


def _io(config: DecoderConfig) -> tuple[list, list]:
    """Graph inputs (ids, past, optionally the cache flag) and outputs (logits, presents)."""
    elem = FLOAT_TYPES[config.dtype]
    past_shape = ["batch", config.heads, "past_sequence", config.head_dim]
    inputs = [
        helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, ["batch", "sequence"])
    ]
    outputs = [helper.make_tensor_value_info("logits", elem, ["batch", "sequence", config.vocab])]
    for layer in range(config.layers):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(f"past_key_values.{layer}.{kind}", elem, past_shape)
            )
            present_shape = ["batch", config.heads, "total_sequence", config.head_dim]
            outputs.append(
                helper.make_tensor_value_info(f"present.{layer}.{kind}", elem, present_shape)
            )
    return inputs, outputs


def _embedded(b: GraphBuilder, config: DecoderConfig, rng) -> str:
    """The main graph's start: the embedding Gather and its layer norm."""
    embedding = b.const(rng.normal(0, 1, (config.vocab, config.hidden)), "embed_tokens")
    gathered = b.op("Gather", [embedding, "input_ids"], axis=0)
    shape = ("batch", "sequence", config.hidden)
    return add_layer_norm(b, gathered, shape, LayerNormSpec(), rng)


def _model(graph: onnx.GraphProto, config: DecoderConfig, name: str) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", config.opset)])
    model.ir_version = 8 if config.opset < 18 else 10
    helper.set_model_props(model, {"source": "models/kv_decoder.py", "form": name})
    return model


def _body(b: GraphBuilder, h: str, past: bool, config: DecoderConfig, weights: dict, outputs):
    """One If branch: its own nodes, its reshape shapes as branch initializers, outputs renamed
    to the graph's output names by Identity nodes."""
    nodes, local = b.nodes, len(b.initializers)
    b.nodes = []
    results = _decoder(b, h, past, config, weights)
    body_initializers = [t for t in b.initializers[local:] if t.name.startswith(("split", "merge"))]
    b.initializers[local:] = [t for t in b.initializers[local:] if t not in body_initializers]
    suffix = "with_past" if past else "no_past"
    body_outputs = []
    for result, info in zip(results, outputs, strict=True):
        name = f"{info.name}_{suffix}"
        b.nodes.append(helper.make_node("Identity", [result], [name]))
        rank = len(info.type.tensor_type.shape.dim)
        body_outputs.append(
            helper.make_tensor_value_info(name, info.type.tensor_type.elem_type, [None] * rank)
        )
    body_nodes, b.nodes = b.nodes, nodes
    return helper.make_graph(body_nodes, suffix, [], body_outputs, body_initializers)


def merged_decoder_model(config: DecoderConfig = DecoderConfig()) -> onnx.ModelProto:
    """optimum's merged decoder: an If on `use_cache_branch` whose branches (decode step with past,
    prefill without) read the same main-graph weights."""
    rng = np.random.default_rng(config.seed)
    b = GraphBuilder(config.opset, config.dtype)
    h = _embedded(b, config, rng)
    weights = _weights(b, config, rng)
    inputs, outputs = _io(config)
    inputs.append(helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1]))
    then_branch = _body(b, h, True, config, weights, outputs)
    else_branch = _body(b, h, False, config, weights, outputs)
    b.nodes.append(
        helper.make_node(
            "If",
            ["use_cache_branch"],
            [info.name for info in outputs],
            name="optimum::if",
            then_branch=then_branch,
            else_branch=else_branch,
        )
    )
    graph = helper.make_graph(b.nodes, "merged_decoder", inputs, outputs, b.initializers)
    return _model(graph, config, "merged")


def with_past_decoder_model(config: DecoderConfig = DecoderConfig()) -> onnx.ModelProto:
    """optimum's decoder with past: the merged decoder's then-branch as the graph itself."""
    rng = np.random.default_rng(config.seed)
    b = GraphBuilder(config.opset, config.dtype)
    h = _embedded(b, config, rng)
    weights = _weights(b, config, rng)
    inputs, outputs = _io(config)
    results = _decoder(b, h, True, config, weights)
    for result, info in zip(results, outputs, strict=True):
        b.nodes.append(helper.make_node("Identity", [result], [info.name]))
    graph = helper.make_graph(b.nodes, "with_past_decoder", inputs, outputs, b.initializers)
    return _model(graph, config, "with_past")


def decoder_feeds(
    model: onnx.ModelProto, sequence: int, past: int, batch: int = 1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for a decode step (`past` > 0: `sequence` new tokens after `past` cached ones) or a
    prefill (`past` == 0; a merged decoder then takes its no-cache branch and is fed an empty
    past, which that branch does not read)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in model.graph.input:
        dims = info.type.tensor_type.shape.dim
        elem = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        if info.name == "input_ids":
            vocab = _vocab(model)
            feeds[info.name] = rng.integers(0, vocab, (batch, sequence)).astype(np.int64)
        elif info.name == "use_cache_branch":
            feeds[info.name] = np.array([past > 0])
        else:
            shape = [batch, dims[1].dim_value, past, dims[3].dim_value]
            feeds[info.name] = rng.normal(0, 1, shape).astype(elem)
    return feeds


def _vocab(model: onnx.ModelProto) -> int:
    logits = model.graph.output[0].type.tensor_type.shape.dim
    return logits[-1].dim_value
