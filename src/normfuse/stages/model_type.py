"""The `model_type` ONNX Runtime's transformers optimizer is run with, read from the graph.

The optimizer picks its fusion patterns by `model_type`; the graph says which family a model
is from its inputs and ops (an explicit type given by the user always wins):

- a decoder (`position_ids`, a past or cache input, a `present` or `logits` output, a `Trilu`
  causal mask): `gpt2`, the optimizer's decoder type (LLaMA, Qwen, Mistral have none of
  their own);
- a float image input (rank 4) with group or instance norms: `unet` where it has other inputs
  (a timestep, an embedding), `vae` where it is the only one;
- a float latent input (rank 3 or 4) beside a `timestep`: `mmdit` (DiT, SD3, Flux);
- another float image input: `vit` (ViT, ConvNeXt);
- anything else: `bert` (encoders, and the optimizer's own default).
"""

from __future__ import annotations

import onnx

from normfuse.ir.scopes import all_graphs

GROUP_NORM_OPS = frozenset({"GroupNormalization", "InstanceNormalization"})
DECODER_INPUT_WORDS = ("position_ids", "past", "cache")
DECODER_OUTPUT_WORDS = ("present", "logits")


def infer_model_type(model: onnx.ModelProto) -> tuple[str, str]:
    """The optimizer's `model_type` for `model`, and the evidence it was chosen on."""
    inputs = _feeds(model)
    ops = {node.op_type for graph in all_graphs(model.graph) for node in graph.node}
    names = [info.name.lower() for info in inputs]
    words = [w for w in DECODER_INPUT_WORDS if any(w in name for name in names)]
    outputs = [info.name.lower() for info in model.graph.output]
    words += [w for w in DECODER_OUTPUT_WORDS if any(w in name for name in outputs)]
    if "Trilu" in ops:
        words.append("Trilu")
    if words:  # first: a KV cache is a float input of rank 4 too
        return "gpt2", f"a decoder ({', '.join(words)})"
    image = next((info for info in inputs if _is_float(info) and _rank(info) == 4), None)
    timestep = any("timestep" in name for name in names)
    if image is not None and ops & GROUP_NORM_OPS:
        if len(inputs) > 1:
            return "unet", f"image input {image.name!r} with group norms and other inputs"
        return "vae", f"image input {image.name!r} with group norms, the only input"
    if timestep and any(_is_float(info) and _rank(info) in (3, 4) for info in inputs):
        return "mmdit", "a float latent input beside a timestep input"
    if image is not None:
        return "vit", f"image input {image.name!r}"
    return "bert", "an encoder (no decoder, image or diffusion input)"


def _feeds(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are not initializers (what the caller feeds)."""
    weights = {tensor.name for tensor in model.graph.initializer}
    return [info for info in model.graph.input if info.name not in weights]


def _is_float(info: onnx.ValueInfoProto) -> bool:
    return info.type.tensor_type.elem_type in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
        onnx.TensorProto.DOUBLE,
    )


def _rank(info: onnx.ValueInfoProto) -> int | None:
    tensor = info.type.tensor_type
    return len(tensor.shape.dim) if tensor.HasField("shape") else None
