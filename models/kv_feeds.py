"""Inputs for the exported KV-cache decoders in models/real/kv (optimum's and dynamo's names)."""

from __future__ import annotations

import numpy as np
import onnx

# Encoder positions a seq2seq decoder (Whisper, T5) attends to.
ENCODER_SEQUENCE = 8


def export_feeds(
    model: onnx.ModelProto, sequence: int, past: int, vocab: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Batch-one inputs for a decode step (`past` cached positions, `sequence` new tokens) or a
    prefill (`past` == 0): token ids below `vocab`, an all-ones mask over past and new tokens,
    positions after the past, past keys and values ~ N(0, 1) (a seq2seq decoder's encoder ones
    `ENCODER_SEQUENCE` long at a decode step, empty at a prefill, where it does not read them),
    encoder states ~ N(0, 1) under an all-ones encoder mask (T5), and `use_cache_branch` true
    exactly when there is a past."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in model.graph.input:
        name, tensor = info.name, info.type.tensor_type
        dims = [dim.dim_value for dim in tensor.shape.dim]
        elem = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if name == "input_ids":
            feeds[name] = rng.integers(0, vocab, (1, sequence)).astype(np.int64)
        elif name == "attention_mask":
            feeds[name] = np.ones((1, past + sequence), np.int64)
        elif name == "position_ids":
            feeds[name] = np.arange(past, past + sequence, dtype=np.int64)[None]
        elif name == "use_cache_branch":
            feeds[name] = np.array([past > 0])
        elif name == "encoder_attention_mask":  # T5's decoders
            feeds[name] = np.ones((1, ENCODER_SEQUENCE), np.int64)
        elif name == "encoder_hidden_states":
            feeds[name] = rng.normal(0, 1, (1, ENCODER_SEQUENCE, dims[2])).astype(elem)
        elif name.startswith("past_key_values."):
            length = (ENCODER_SEQUENCE if past else 0) if ".encoder." in name else past
            feeds[name] = rng.normal(0, 1, (1, dims[1], length, dims[3])).astype(elem)
        else:
            raise KeyError(f"no feed rule for input {name!r}")
    return feeds
