"""Export small real transformers (random weights from configs) to ONNX for normfuse's tests.

Needs the `models` extra (torch, transformers); the tests only read the committed `.onnx` files and
`manifest.json`. Run from the repository root:

    pip install -e ".[models]" && python models/export.py

Each model: hidden size <= 128, 2 layers, exported with PyTorch's TorchScript exporter
(`dynamo=False`) at each opset in OPSETS. The expected number of layer-norm sites is counted from
the PyTorch modules (every `nn.LayerNorm`), not from the exported graph. An export that fails is
recorded in the manifest with its error instead of being dropped.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "real"
SEQUENCE = 16


def bert() -> tuple[torch.nn.Module, dict]:
    config = transformers.BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config).eval(), {
        "input_ids": torch.randint(0, 512, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
    }


def gpt2() -> tuple[torch.nn.Module, dict]:
    config = transformers.GPT2Config(
        vocab_size=512,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        use_cache=False,
    )
    # attention_mask and position_ids given explicitly: without them transformers' packed-sequence
    # detection uses aten::diff, which the TorchScript exporter cannot export.
    return transformers.GPT2Model(config).eval(), {
        "input_ids": torch.randint(0, 512, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
        "position_ids": torch.arange(SEQUENCE).unsqueeze(0),
    }


def _decoder_inputs() -> dict:
    return {
        "input_ids": torch.randint(0, 512, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
        "position_ids": torch.arange(SEQUENCE).unsqueeze(0),
    }


_DECODER_SIZES = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    use_cache=False,
)


def llama() -> tuple[torch.nn.Module, dict]:
    return transformers.LlamaModel(transformers.LlamaConfig(**_DECODER_SIZES)), _decoder_inputs()


def qwen2() -> tuple[torch.nn.Module, dict]:
    return transformers.Qwen2Model(transformers.Qwen2Config(**_DECODER_SIZES)), _decoder_inputs()


def gemma() -> tuple[torch.nn.Module, dict]:
    config = transformers.GemmaConfig(**_DECODER_SIZES, head_dim=16)
    return transformers.GemmaModel(config), _decoder_inputs()


def t5_encoder() -> tuple[torch.nn.Module, dict]:
    config = transformers.T5Config(
        vocab_size=512,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        use_cache=False,
    )
    return transformers.T5EncoderModel(config), {
        "input_ids": torch.randint(0, 512, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
    }


MODELS = {
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "qwen2": qwen2,
    "gemma": gemma,
    "t5_encoder": t5_encoder,
}
# (architecture, exporter, opset, dtype) of every committed export.
EXPORTS = [
    *((name, "torchscript", opset, "float32") for name in ("bert", "gpt2") for opset in (14, 16)),
    *(
        (name, exporter, opset, dtype)
        for name in ("llama", "qwen2", "gemma", "t5_encoder")
        for exporter, opset in (("torchscript", 17), ("dynamo", 18))
        for dtype in ("float32", "float16")
    ),
]


class _FirstOutput(torch.nn.Module):
    """Wraps a transformers model so the export has one plain tensor output."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args, strict=True)), return_dict=False)[0]


def is_rms_norm(module: torch.nn.Module) -> bool:
    """transformers' RMS-norm modules: LlamaRMSNorm, Qwen2RMSNorm, GemmaRMSNorm, T5LayerNorm, ..."""
    name = type(module).__name__
    return name.endswith("RMSNorm") or name == "T5LayerNorm"


def randomise_norms(model: torch.nn.Module) -> None:
    """Give every norm a non-trivial scale (and bias): fresh ones are all 1 (or 0) and 0, which
    would hide a fusion that drops or misplaces them."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.5)
            elif is_rms_norm(module):
                module.weight.uniform_(0.5, 1.5)


def export(name: str, exporter: str, opset: int, dtype: str) -> dict:
    """Export one model; returns its manifest entry (with `export_error` if the export failed)."""
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    randomise_norms(model)
    model = model.eval().to(getattr(torch, dtype))
    suffix = "" if (exporter, dtype) == ("torchscript", "float32") else f"_{exporter}_{dtype}"
    path = OUT_DIR / f"{name}_opset{opset}{suffix}.onnx"
    entry = {
        "file": str(path.relative_to(HERE)),
        "architecture": name,
        "exporter": exporter,
        "opset": opset,
        "dtype": dtype,
        "layer_norm_sites": sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules()),
        "rms_norm_sites": sum(is_rms_norm(m) for m in model.modules()),
        "inputs": {key: list(value.shape) for key, value in inputs.items()},
        "int_input_high": SEQUENCE,
    }
    wrapped, args, names = _FirstOutput(model, list(inputs)), tuple(inputs.values()), list(inputs)
    try:
        if exporter == "torchscript":
            axes = {key: {0: "batch", 1: "sequence"} for key in [*names, "last_hidden_state"]}
            torch.onnx.export(
                wrapped,
                args,
                str(path),
                dynamo=False,
                opset_version=opset,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                do_constant_folding=True,
            )
        else:
            torch.onnx.export(
                wrapped,
                args,
                str(path),
                dynamo=True,
                opset_version=opset,
                input_names=names,
                output_names=["last_hidden_state"],
                external_data=False,
            )
    except Exception as error:  # recorded in the manifest, not dropped
        traceback.print_exc()
        path.unlink(missing_ok=True)
        entry["export_error"] = f"{type(error).__name__}: {str(error)[:500]}"
    return entry


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    entries = [export(*spec) for spec in EXPORTS]
    manifest = {
        "generator": "models/export.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": entries,
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    failed = [entry["file"] for entry in entries if "export_error" in entry]
    print(f"exported {len(entries) - len(failed)} of {len(entries)}; failed: {failed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
