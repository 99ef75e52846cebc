"""Export small real transformers (random weights from configs) to ONNX for normfuse's tests.

Needs the `models` extra (torch, transformers, diffusers); the tests only read the committed
`.onnx` files and `manifest.json`. Run from the repository root:

    pip install -e ".[models]" && python models/export.py [ARCHITECTURE ...]

Each model: hidden size <= 128, 1-2 layers, exported with PyTorch's TorchScript exporter
(`dynamo=False`) and its dynamo exporter at the opsets in EXPORTS, float32 and float16. The
expected number of norm sites is counted from the PyTorch modules (forward hooks on every
`nn.LayerNorm`, RMS-norm and group-norm module), not from the exported graph. An export that
fails, or that ONNX Runtime cannot run, is recorded in the manifest with its error instead of
being dropped. The exporter's per-node metadata is stripped (the fixtures' size budget).
The KV-cache decoders (optimum's merged and with-past decoders, dynamo exports with past inputs)
come from models/export_kv.py into the manifest's `kv_decoders`, which this script keeps.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
import traceback
from pathlib import Path

import onnx
import torch
import transformers
from transformers.models.whisper.modeling_whisper import WhisperEncoder

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
    return transformers.BertModel(config).eval(), _encoder_inputs()


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
    return transformers.GPT2Model(config).eval(), _decoder_inputs()


def _encoder_inputs() -> dict:
    return {
        "input_ids": torch.randint(0, 512, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
    }


def _decoder_inputs() -> dict:
    return {**_encoder_inputs(), "position_ids": torch.arange(SEQUENCE).unsqueeze(0)}


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


def qwen3() -> tuple[torch.nn.Module, dict]:
    """Qwen3: RMS norms on the hidden state and QK-norm (an RMS norm over head_dim per head)."""
    config = transformers.Qwen3Config(**_DECODER_SIZES, head_dim=16)
    return transformers.Qwen3Model(config), _decoder_inputs()


def gemma3() -> tuple[torch.nn.Module, dict]:
    """Gemma 3's text model: `x * (1 + w)` RMS norms, four per layer, and QK-norm."""
    config = transformers.Gemma3TextConfig(**_DECODER_SIZES, head_dim=16, sliding_window=16)
    return transformers.Gemma3TextModel(config), _decoder_inputs()


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
    return transformers.T5EncoderModel(config), _encoder_inputs()


def mistral() -> tuple[torch.nn.Module, dict]:
    return transformers.MistralModel(
        transformers.MistralConfig(**_DECODER_SIZES)
    ), _decoder_inputs()


def gpt_neox() -> tuple[torch.nn.Module, dict]:
    config = transformers.GPTNeoXConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        use_cache=False,
    )
    return transformers.GPTNeoXModel(config), _decoder_inputs()


def distilbert() -> tuple[torch.nn.Module, dict]:
    config = transformers.DistilBertConfig(
        vocab_size=512,
        dim=64,
        n_layers=2,
        n_heads=4,
        hidden_dim=128,
        max_position_embeddings=64,
    )
    return transformers.DistilBertModel(config), _encoder_inputs()


def vit() -> tuple[torch.nn.Module, dict]:
    config = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_channels=3,
    )
    return transformers.ViTModel(config, add_pooling_layer=False), {
        "pixel_values": torch.randn(1, 3, 32, 32),
    }


def whisper_encoder() -> tuple[torch.nn.Module, dict]:
    config = transformers.WhisperConfig(
        vocab_size=512,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        num_mel_bins=16,
        max_source_positions=16,
        max_target_positions=16,
        pad_token_id=0,
    )
    return WhisperEncoder(config), {
        "input_features": torch.randn(1, 16, 32),
    }


def convnext() -> tuple[torch.nn.Module, dict]:
    config = transformers.ConvNextConfig(
        num_channels=3,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_stages=2,
    )
    return transformers.ConvNextModel(config), {"pixel_values": torch.randn(1, 3, 32, 32)}


class HandWrittenGroupNorm(torch.nn.Module):
    """nn.GroupNorm written out (as codebases do to control the statistics' precision): both
    exporters then write the statistics as elementary ops between the two Reshapes."""

    def __init__(self, groups: int, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = torch.nn.Parameter(torch.ones(channels))
        self.bias = torch.nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        grouped = x.reshape(batch, self.groups, -1)
        mean = grouped.mean(-1, keepdim=True)
        variance = grouped.var(-1, keepdim=True, unbiased=False)
        grouped = (grouped - mean) / torch.sqrt(variance + self.eps)
        normed = grouped.reshape(batch, channels, height, width)
        return normed * self.weight[:, None, None] + self.bias[:, None, None]


class ResnetBlock(torch.nn.Module):
    """A diffusion ResNet block: GroupNorm + SiLU -> Conv3x3, twice, optional time embedding added
    in between, residual sum (the structure of diffusers' ResnetBlock2D)."""

    def __init__(
        self, channels: int, temb_channels: int | None, groups: int = 32, norm=torch.nn.GroupNorm
    ) -> None:
        super().__init__()
        self.norm1 = norm(groups, channels, eps=1e-6)
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.time_emb_proj = temb_channels and torch.nn.Linear(temb_channels, channels)
        self.norm2 = norm(groups, channels, eps=1e-6)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        if temb is not None:
            h = h + self.time_emb_proj(torch.nn.functional.silu(temb))[:, :, None, None]
        h = self.conv2(torch.nn.functional.silu(self.norm2(h)))
        return x + h


class AttentionBlock(torch.nn.Module):
    """A VAE/UNet mid-block attention: GroupNorm, single-head self-attention over the positions,
    output projection, residual sum."""

    def __init__(self, channels: int, groups: int = 32) -> None:
        super().__init__()
        self.group_norm = torch.nn.GroupNorm(groups, channels, eps=1e-6)
        self.to_q = torch.nn.Linear(channels, channels)
        self.to_k = torch.nn.Linear(channels, channels)
        self.to_v = torch.nn.Linear(channels, channels)
        self.to_out = torch.nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        h = self.group_norm(x).flatten(2).transpose(1, 2)
        q, k, v = self.to_q(h), self.to_k(h), self.to_v(h)
        weights = torch.softmax(q @ k.transpose(1, 2) / channels**0.5, dim=-1)
        h = self.to_out(weights @ v).transpose(1, 2).reshape(batch, channels, height, width)
        return x + h


class UnetBlock(torch.nn.Module):
    """A UNet down/mid block: a ResNet block with a time embedding, then attention."""

    def __init__(self, channels: int = 64, temb_channels: int = 128) -> None:
        super().__init__()
        self.resnet = ResnetBlock(channels, temb_channels)
        self.attention = AttentionBlock(channels)

    def forward(self, sample: torch.Tensor, temb: torch.Tensor, return_dict: bool = False):
        return (self.attention(self.resnet(sample, temb)),)


class VaeMidBlock(torch.nn.Module):
    """A VAE mid block: ResNet block, attention, ResNet block (no time embedding)."""

    def __init__(self, channels: int = 64, norm=torch.nn.GroupNorm) -> None:
        super().__init__()
        self.resnets = torch.nn.ModuleList(
            [ResnetBlock(channels, None, norm=norm) for _ in range(2)]
        )
        self.attention = AttentionBlock(channels)

    def forward(self, sample: torch.Tensor, return_dict: bool = False):
        return (self.resnets[1](self.attention(self.resnets[0](sample))),)


def unet_block() -> tuple[torch.nn.Module, dict]:
    return UnetBlock(), {"sample": torch.randn(1, 64, 16, 16), "temb": torch.randn(1, 128)}


def vae_mid_block() -> tuple[torch.nn.Module, dict]:
    return VaeMidBlock(), {"sample": torch.randn(1, 64, 16, 16)}


def vae_mid_block_hand_written() -> tuple[torch.nn.Module, dict]:
    """The VAE mid block with its ResNet blocks' group norms written out (attention keeps
    nn.GroupNorm)."""
    return VaeMidBlock(norm=HandWrittenGroupNorm), {"sample": torch.randn(1, 64, 16, 16)}


# The norms of 2024-26 models (issue 26): smaller sizes (hidden 32, vocabulary 128, one layer) keep
# the four exports of each under the fixtures' budget (300 KB each).
_RECENT_SIZES = dict(
    _DECODER_SIZES,
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=1,
    intermediate_size=64,
    num_attention_heads=2,
    num_key_value_heads=1,
)


def _small_decoder_inputs() -> dict:
    return {
        "input_ids": torch.randint(0, 128, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
        "position_ids": torch.arange(SEQUENCE).unsqueeze(0),
    }


def cohere() -> tuple[torch.nn.Module, dict]:
    """Cohere: layer norms without bias (statistics in float32), QK-norm with weight [H, Dh]."""
    # As many key-value heads as heads: with fewer, TorchScript's export reshapes v to q's head
    # count (the exported model does not run).
    sizes = dict(_RECENT_SIZES, num_key_value_heads=2)
    config = transformers.CohereConfig(**sizes, use_qk_norm=True)
    return transformers.CohereModel(config), _small_decoder_inputs()


def olmo2() -> tuple[torch.nn.Module, dict]:
    """OLMo 2: post-norms, and QK-norm over the full H * Dh, the weight before the cast back."""
    config = transformers.Olmo2Config(**_RECENT_SIZES)
    return transformers.Olmo2Model(config), _small_decoder_inputs()


def phi3() -> tuple[torch.nn.Module, dict]:
    config = transformers.Phi3Config(**_RECENT_SIZES, pad_token_id=0)
    return transformers.Phi3Model(config), _small_decoder_inputs()


class GatedNormBlock(torch.nn.Module):
    """The gated RMS norm of a Mamba2 / NemotronH mixer, `w * RMS_group(x * silu(z))` over groups
    of 16 of 64 channels, between the mixer's projections (the SSM scan itself left out)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNormGated

        self.in_proj = torch.nn.Linear(32, 128)
        self.norm = NemotronHRMSNormGated(64, group_size=16, eps=1e-5)
        self.out_proj = torch.nn.Linear(64, 32)

    def forward(self, hidden_states: torch.Tensor, return_dict: bool = False):
        x, gate = self.in_proj(hidden_states).chunk(2, dim=-1)
        return (self.out_proj(self.norm(x, gate)),)


def nemotron_h_gated_norm() -> tuple[torch.nn.Module, dict]:
    return GatedNormBlock(), {"hidden_states": torch.randn(1, SEQUENCE, 32)}


class DyT(torch.nn.Module):
    """Dynamic Tanh (`gamma * tanh(alpha * x) + beta`), the norm-free replacement of LayerNorm:
    no statistics, never a norm."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.full((1,), 0.5))
        self.weight = torch.nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias


class DyTBlock(torch.nn.Module):
    """A pre-norm MLP block with DyT in the norm's place."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.norm = DyT(channels)
        self.up = torch.nn.Linear(channels, 2 * channels)
        self.down = torch.nn.Linear(2 * channels, channels)

    def forward(self, x: torch.Tensor, return_dict: bool = False):
        return (x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)))),)


def dyt() -> tuple[torch.nn.Module, dict]:
    return DyTBlock(), {"x": torch.randn(1, SEQUENCE, 32)}


def dit() -> tuple[torch.nn.Module, dict]:
    """DiT (diffusers): adaLN-Zero, layer norms without affine then `x * (1 + s) + b` per sample."""
    import diffusers

    model = diffusers.DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        num_layers=1,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=16,
    )
    inputs = {
        "hidden_states": torch.randn(1, 4, 8, 8),
        "timestep": torch.tensor([3]),
        "class_labels": torch.tensor([1]),
    }
    return model, inputs


def sd3() -> tuple[torch.nn.Module, dict]:
    """SD3 (diffusers MMDiT): adaLN-Zero on both streams, RMS q/k norms."""
    import diffusers

    model = diffusers.SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,  # hidden 16, as Flux: the fixtures' budget
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
        pos_embed_max_size=8,
        qk_norm="rms_norm",
    )
    inputs = {
        "hidden_states": torch.randn(1, 4, 8, 8),
        "encoder_hidden_states": torch.randn(1, 8, 32),
        "pooled_projections": torch.randn(1, 16),
        "timestep": torch.tensor([3.0]),
    }
    return model, inputs


class FluxWithIds(torch.nn.Module):
    """Flux with its image and text position ids held as buffers (their first dim is not the
    batch, so they are not graph inputs)."""

    def __init__(self, model: torch.nn.Module, image: int, text: int) -> None:
        super().__init__()
        self.model = model
        ids = torch.zeros(image, 3)
        ids[:, 1] = torch.arange(image) // 4
        ids[:, 2] = torch.arange(image) % 4
        self.register_buffer("img_ids", ids)
        self.register_buffer("txt_ids", torch.zeros(text, 3))

    def forward(self, hidden_states, encoder_hidden_states, pooled_projections, timestep, **_):
        return self.model(
            hidden_states=hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            pooled_projections=pooled_projections,
            timestep=timestep,
            img_ids=self.img_ids.to(hidden_states.dtype),
            txt_ids=self.txt_ids.to(hidden_states.dtype),
            return_dict=False,
        )


def flux() -> tuple[torch.nn.Module, dict]:
    """Flux (diffusers): adaLN-Zero (double and single blocks), RMS q/k norms."""
    import diffusers

    model = diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,  # hidden 16: at 32 the float32 export alone is 325 KB
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=16,
        axes_dims_rope=(2, 2, 4),
    )
    inputs = {
        "hidden_states": torch.randn(1, 16, 16),
        "encoder_hidden_states": torch.randn(1, 8, 32),
        "pooled_projections": torch.randn(1, 16),
        "timestep": torch.tensor([0.5]),
    }
    return FluxWithIds(model, 16, 8), inputs


# The RoBERTa family and its relatives (issue 34): BERT-style encoders at the recent models' sizes
# (hidden 32, vocabulary 128) so that their exports stay within the fixtures' budget. Each keeps its
# own forward: RoBERTa's position ids come from input_ids (Equal/Not/Cast/CumSum/Mul/Add), and
# the token types from the registered buffer (Expand/Where/GatherElements).
_ENCODER_SIZES = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


def _small_encoder_inputs() -> dict:
    return {
        "input_ids": torch.randint(0, 128, (1, SEQUENCE)),
        "attention_mask": torch.ones(1, SEQUENCE, dtype=torch.int64),
    }


def roberta() -> tuple[torch.nn.Module, dict]:
    config = transformers.RobertaConfig(**_ENCODER_SIZES, pad_token_id=1)
    return transformers.RobertaModel(config, add_pooling_layer=False), _small_encoder_inputs()


def xlm_roberta() -> tuple[torch.nn.Module, dict]:
    config = transformers.XLMRobertaConfig(**_ENCODER_SIZES, pad_token_id=1)
    model = transformers.XLMRobertaModel(config, add_pooling_layer=False)
    return model, _small_encoder_inputs()


def camembert() -> tuple[torch.nn.Module, dict]:
    config = transformers.CamembertConfig(**_ENCODER_SIZES, pad_token_id=1)
    model = transformers.CamembertModel(config, add_pooling_layer=False)
    return model, _small_encoder_inputs()


def electra() -> tuple[torch.nn.Module, dict]:
    """ELECTRA's discriminator body: BERT's embeddings (absolute positions from a buffer) with
    the embedding size apart from the hidden size (an embeddings_project between)."""
    config = transformers.ElectraConfig(**_ENCODER_SIZES, embedding_size=16)
    return transformers.ElectraModel(config), _small_encoder_inputs()


def deberta_v2() -> tuple[torch.nn.Module, dict]:
    """DeBERTa-v2/v3: disentangled relative attention, with the relative-position embeddings'
    own layer norm (`norm_rel_ebd`), as DeBERTa-v3's configs set it."""
    config = transformers.DebertaV2Config(
        **_ENCODER_SIZES,
        relative_attention=True,
        position_buckets=32,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm",
        position_biased_input=False,
        share_att_key=True,
        type_vocab_size=0,
    )
    return transformers.DebertaV2Model(config), _small_encoder_inputs()


MODELS = {
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "qwen2": qwen2,
    "gemma": gemma,
    "qwen3": qwen3,
    "gemma3": gemma3,
    "t5_encoder": t5_encoder,
    "mistral": mistral,
    "gpt_neox": gpt_neox,
    "distilbert": distilbert,
    "vit": vit,
    "whisper_encoder": whisper_encoder,
    "convnext": convnext,
    "unet_block": unet_block,
    "vae_mid_block": vae_mid_block,
    "vae_mid_block_hand_written": vae_mid_block_hand_written,
    "cohere": cohere,
    "olmo2": olmo2,
    "phi3": phi3,
    "nemotron_h_gated_norm": nemotron_h_gated_norm,
    "dit": dit,
    "sd3": sd3,
    "flux": flux,
    "dyt": dyt,
    "roberta": roberta,
    "xlm_roberta": xlm_roberta,
    "camembert": camembert,
    "electra": electra,
    "deberta_v2": deberta_v2,
}
RECENT = ("cohere", "olmo2", "phi3", "nemotron_h_gated_norm", "dit", "sd3", "flux", "dyt")
# (models/recent.py lists the same names for the tests, which cannot import this torch module)
# (architecture, exporter, opset, dtype) of every committed export.
EXPORTS = [
    *((name, "torchscript", opset, "float32") for name in ("bert", "gpt2") for opset in (14, 16)),
    *(
        (name, exporter, opset, dtype)
        for name in ("llama", "qwen2", "gemma", "qwen3", "gemma3", "t5_encoder")
        for exporter, opset in (("torchscript", 17), ("dynamo", 18))
        for dtype in ("float32", "float16")
    ),
    *(
        (name, exporter, opset, "float32")
        for name in ("mistral",)
        for exporter, opset in (("torchscript", 17), ("dynamo", 18))
    ),
    # Layer-norm models: TorchScript below opset 17 decomposes nn.LayerNorm; at 17+ both exporters
    # write LayerNormalization themselves (nothing left to fuse, still counted).
    *(
        (name, exporter, opset, "float32")
        for name in ("gpt_neox", "distilbert", "vit", "whisper_encoder", "convnext")
        for exporter, opset in (("torchscript", 16), ("dynamo", 18))
    ),
    ("vit", "torchscript", 16, "float16"),
    # Group-norm blocks (diffusion UNet and VAE), written here in PyTorch: both exporters write
    # Reshape -> InstanceNormalization -> Reshape -> Mul -> Add for nn.GroupNorm, elementary
    # statistics for a hand-written one.
    *(
        (name, exporter, opset, "float32")
        for name in ("unet_block", "vae_mid_block", "vae_mid_block_hand_written")
        for exporter, opset in (("torchscript", 17), ("dynamo", 18))
    ),
    # The norms of 2024-26 models: TorchScript at opset 16, below LayerNormalization, so the
    # layer norms it writes are left to fuse.
    *(
        (name, exporter, opset, dtype)
        for name in RECENT
        for exporter, opset in (("torchscript", 16), ("dynamo", 18))
        for dtype in ("float32", "float16")
    ),
    # The RoBERTa family (issue 34): TorchScript at opset 16, float32 and float16 (layer norms
    # decomposed, left to fuse behind RoBERTa's position ids and token types), and dynamo at 18,
    # float32 (LayerNormalization written: nothing to fuse, still counted). Dynamo's float16 is
    # left out (the fixtures' budget). XLM-RoBERTa and CamemBERT run RoBERTa's code: their
    # exports are byte-identical to RoBERTa's, so only the TorchScript float32 one is committed.
    *(
        (name, exporter, opset, dtype)
        for name in ("roberta", "electra", "deberta_v2")
        for exporter, opset, dtype in (
            ("torchscript", 16, "float32"),
            ("torchscript", 16, "float16"),
            ("dynamo", 18, "float32"),
        )
    ),
    *((name, "torchscript", 16, "float32") for name in ("xlm_roberta", "camembert")),
]


class _TensorOutputs(torch.nn.Module):
    """Wraps a transformers model: positional inputs, and every tensor it returns as an output
    (so norms on secondary outputs, like ConvNeXt's pooler norm, are part of the export)."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args):
        outputs = self.model(**dict(zip(self.names, args, strict=True)), return_dict=False)
        return tuple(output for output in outputs if isinstance(output, torch.Tensor))


def is_rms_norm(module: torch.nn.Module) -> bool:
    """transformers' RMS-norm modules: LlamaRMSNorm, Qwen2RMSNorm, GemmaRMSNorm, T5LayerNorm
    (MT5LayerNorm too), ..., the gated ones of Mamba2 / NemotronH, and diffusers' RMSNorm."""
    name = type(module).__name__
    return name.endswith(("RMSNorm", "RMSNormGated")) or name in ("T5LayerNorm", "MT5LayerNorm")


def is_layer_norm(module: torch.nn.Module) -> bool:
    """`nn.LayerNorm` (diffusers' adaLN norms too: no affine) and Cohere's bias-free one."""
    return isinstance(module, torch.nn.LayerNorm) or type(module).__name__ == "CohereLayerNorm"


def randomise_norms(model: torch.nn.Module) -> None:
    """Give every norm a non-trivial scale (and bias): fresh ones are all 1 (or 0) and 0, which
    would hide a fusion that drops or misplaces them."""
    with torch.no_grad():
        for module in model.modules():
            if is_layer_norm(module) or is_rms_norm(module):
                if getattr(module, "weight", None) is not None:  # adaLN norms have no affine
                    module.weight.uniform_(0.5, 1.5)
                if getattr(module, "bias", None) is not None:
                    module.bias.normal_(0.0, 0.5)
            elif isinstance(module, torch.nn.GroupNorm | HandWrittenGroupNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.5)


def count_norm_calls(wrapped: torch.nn.Module, inputs: dict) -> dict:
    """How many times the forward pass calls a layer-norm, an RMS-norm and a group-norm module
    (norms whose result does not reach the exported output, like ConvNeXt's pooler norm, still
    count if called; the wrapper returns only the first output, so the pooler is not)."""
    return norm_calls(wrapped, lambda: wrapped(*inputs.values()))


def norm_calls(root: torch.nn.Module, forward) -> dict:
    """How many times `forward()` calls each kind of norm module among `root`'s modules."""
    calls = {"layer_norm_sites": 0, "rms_norm_sites": 0, "group_norm_sites": 0}
    # Norms with no scale of their own (diffusers' adaLN: the modulation follows): fused with a
    # unit scale, which the tests otherwise take for a lost one.
    calls["unweighted_norm_sites"] = 0

    def key(module: torch.nn.Module) -> str | None:
        if is_layer_norm(module):
            return "layer_norm_sites"
        if isinstance(module, torch.nn.GroupNorm | HandWrittenGroupNorm):
            return "group_norm_sites"
        return "rms_norm_sites" if is_rms_norm(module) else None

    def hook(module, *_):
        calls[key(module)] += 1
        calls["unweighted_norm_sites"] += getattr(module, "weight", None) is None

    handles = [module.register_forward_hook(hook) for module in root.modules() if key(module)]
    with torch.no_grad():
        forward()
    for handle in handles:
        handle.remove()
    return calls


def export(name: str, exporter: str, opset: int, dtype: str) -> dict:
    """Export one model; returns its manifest entry (with `export_error` if the export failed)."""
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    randomise_norms(model)
    model = model.eval().to(getattr(torch, dtype))
    inputs = {
        key: value.to(getattr(torch, dtype)) if value.is_floating_point() else value
        for key, value in inputs.items()
    }
    text = "input_ids" in inputs
    suffix = "" if (exporter, dtype) == ("torchscript", "float32") else f"_{exporter}_{dtype}"
    path = OUT_DIR / f"{name}_opset{opset}{suffix}.onnx"
    entry = {
        "file": str(path.relative_to(HERE)),
        "architecture": name,
        "exporter": exporter,
        "opset": opset,
        "dtype": dtype,
        **count_norm_calls(_TensorOutputs(model, list(inputs)), inputs),
        "inputs": {key: list(value.shape) for key, value in inputs.items()},
        "dims": {"batch": 1, "sequence": SEQUENCE} if text else {"batch": 1},
        "int_input_high": SEQUENCE,
    }
    wrapped, args, names = _TensorOutputs(model, list(inputs)), tuple(inputs.values()), list(inputs)
    with torch.no_grad():
        count = len(wrapped(*args))
    output_names = ["last_hidden_state", *(f"output_{index}" for index in range(1, count))]
    try:
        if exporter == "torchscript":
            dynamic = {0: "batch", 1: "sequence"} if text else {0: "batch"}
            axes = {key: dynamic for key in [*names, output_names[0]]}
            axes |= {key: {0: "batch"} for key in output_names[1:]}
            torch.onnx.export(
                wrapped,
                args,
                str(path),
                dynamo=False,
                opset_version=opset,
                input_names=names,
                output_names=output_names,
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
                output_names=output_names,
                external_data=False,
            )
        _strip_metadata(path)
        _check_runs(path, inputs)
    except Exception as error:  # recorded in the manifest, not dropped
        traceback.print_exc()
        path.unlink(missing_ok=True)
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
        entry["export_error"] = f"{type(error).__name__}: {message[:500]}"
    return entry


def _check_runs(path: Path, inputs: dict) -> None:
    """ONNX Runtime runs the export on the inputs it was traced with (TorchScript's Cohere export
    does not: its rotary embedding broadcasts 8 by 16)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [info.name for info in session.get_inputs()]
    try:
        session.run(None, {name: value.numpy() for name, value in inputs.items() if name in names})
    except Exception as error:
        raise RuntimeError(f"the exported model does not run in ONNX Runtime: {error}") from None


def _strip_metadata(path: Path) -> None:
    """Drop the exporter's per-node and per-value metadata (dynamo's stack traces and module
    paths: most of a tiny export's bytes); the graph is unchanged."""
    model = onnx.load(path)
    values = [*model.graph.value_info, *model.graph.input, *model.graph.output]
    for item in [*model.graph.node, *values, *model.graph.initializer]:
        del item.metadata_props[:]
        item.doc_string = ""
    onnx.save(model, path)


def main(names: list[str]) -> int:
    """Export every model, or (with architecture names) only those, replacing their entries in
    the existing manifest."""
    OUT_DIR.mkdir(exist_ok=True)
    chosen = [spec for spec in EXPORTS if not names or spec[0] in names]
    entries = [export(*spec) for spec in chosen]
    path = HERE / "manifest.json"
    existing = json.loads(path.read_text()) if path.exists() else {}
    if names:
        kept = existing["models"]
        entries = [entry for entry in kept if entry["architecture"] not in names] + entries
    manifest = {
        "generator": "models/export.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "diffusers": importlib.metadata.version("diffusers"),
        "models": entries,
    }
    # The KV-cache decoders' entries (models/export_kv.py, versions per entry) are kept.
    if "kv_decoders" in existing:
        manifest["kv_decoders"] = existing["kv_decoders"]
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    failed = [entry["file"] for entry in entries if "export_error" in entry]
    print(f"exported {len(entries) - len(failed)} of {len(entries)}; failed: {failed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
