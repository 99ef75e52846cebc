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
OPSETS = (14, 16)
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


MODELS = {"bert": bert, "gpt2": gpt2}


class _FirstOutput(torch.nn.Module):
    """Wraps a transformers model so the export has one plain tensor output."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args, strict=True)), return_dict=False)[0]


def randomise_layer_norms(model: torch.nn.Module) -> None:
    """Give every LayerNorm a non-trivial scale and bias (freshly built ones are all 1 and 0, which
    would hide a fusion that drops or misplaces them)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.5)


def export(name: str, opset: int) -> dict:
    """Export one model at one opset; returns its manifest entry."""
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    randomise_layer_norms(model)
    expected = sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    path = OUT_DIR / f"{name}_opset{opset}.onnx"
    entry = {
        "file": str(path.relative_to(HERE)),
        "architecture": name,
        "exporter": "torchscript",
        "opset": opset,
        "dtype": "float32",
        "layer_norm_sites": expected,
        "rms_norm_sites": 0,
        "inputs": {key: list(value.shape) for key, value in inputs.items()},
        "int_input_high": SEQUENCE,
    }
    try:
        torch.onnx.export(
            _FirstOutput(model, list(inputs)),
            tuple(inputs.values()),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=list(inputs),
            output_names=["last_hidden_state"],
            dynamic_axes={key: {0: "batch", 1: "sequence"} for key in inputs}
            | {"last_hidden_state": {0: "batch", 1: "sequence"}},
            do_constant_folding=True,
        )
    except Exception as error:
        traceback.print_exc()
        entry["export_error"] = f"{type(error).__name__}: {error}"
    return entry


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    entries = [export(name, opset) for name in MODELS for opset in OPSETS]
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
