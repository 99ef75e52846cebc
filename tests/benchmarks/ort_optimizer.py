"""ONNX Runtime's transformers optimizer as the benchmark scripts run it: python fusions only."""

from __future__ import annotations

import logging
from pathlib import Path

# `model_type` per zoo architecture; decoder LLMs have no type of their own, gpt2 is the closest.
ORT_MODEL_TYPES = {
    "bert": "bert",
    "distilbert": "bert",
    "gpt2": "gpt2",
    "t5_encoder": "t5",
    "vit": "vit",
    "convnext": "vit",
    "gpt_neox": "gpt_neox",
    "whisper_encoder": "bert",
    "qwen3": "qwen3",
    # the RoBERTa family (issue 34): BERT encoders
    "roberta": "bert",
    "xlm_roberta": "bert",
    "camembert": "bert",
    "electra": "bert",
    "deberta_v2": "bert",
    "whisper": "bart",  # the KV zoo's Whisper decoder
    "unet_block": "unet",
    "vae_mid_block": "vae",
    "vae_mid_block_hand_written": "vae",
    # diffusers' transformers (adaLN, q/k RMS norms): the optimizer's MMDiT model (SD3, Flux)
    "dit": "mmdit",
    "sd3": "mmdit",
    "flux": "mmdit",
}


def model_type(architecture: str) -> str:
    """The optimizer's `model_type` for a zoo architecture."""
    return ORT_MODEL_TYPES.get(architecture, "gpt2")


def ort_transformers_optimize(
    source: Path,
    out: Path,
    architecture: str,
    norms_only: bool = False,
    *,
    opt_level: int | None = 0,
) -> dict[str, int]:
    """Run `optimize_model` and save: `opt_level` 0 (the default here) runs its python fusions
    only, None the model type's own level (ORT session passes first, the optimizer's default);
    `norms_only` keeps just its layer-norm and skip-layer-norm fusions (no attention, GELU,
    embedding or rotary fusions), for a like-for-like comparison with normfuse. Returns the
    optimizer's own fusion statistics (`get_fused_operator_statistics`, zero counts dropped)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    options = FusionOptions(model_type(architecture))
    if norms_only:
        for name in vars(options):
            if name.startswith("enable_") and name not in NORM_FUSION_OPTIONS:
                setattr(options, name, False)
    optimized = optimize_model(
        str(source),
        model_type=model_type(architecture),
        opt_level=opt_level,
        use_gpu=False,
        only_onnxruntime=False,
        optimization_options=options,
    )
    optimized.save_model_to_file(str(out))
    return {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}


NORM_FUSION_OPTIONS = {
    "enable_layer_norm",
    "enable_skip_layer_norm",
    "enable_bias_skip_layer_norm",
    "enable_shape_inference",
}
