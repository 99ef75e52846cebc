"""Export tiny random-weight KV-cache decoders (the forms LLMs are deployed in) for the zoo.

Two steps, each in the environment it needs (the tests only read the committed files):

    PYTHONHASHSEED=0 .venv-optimum/bin/python -m models.export_kv optimum  # optimum-onnx
    .venv/bin/python -m models.export_kv dynamo  # torch.onnx dynamo, transformers 5.x

optimum-onnx 0.1.0 (the newest) needs transformers < 4.58, so that step runs in a second venv
(the `kv-export` extra): `python -m venv .venv-optimum && .venv-optimum/bin/pip install -e
".[kv-export]" torch==2.13.0 onnx==1.23.2 onnxruntime==1.32.0` (measured with the wheels named,
optimum-onnx 0.1.0: transformers 4.57.6, optimum 2.1.0; each entry records its versions).
PYTHONHASHSEED=0: `merge_decoders` names the shared initializers in set order, so the merged
files are byte-reproducible only with a fixed hash seed.

`optimum`: optimum's decoder with past (`task=...-with-past`) and its decoder without past, merged
by optimum's own `merge_decoders` into the merged decoder (an `If` on `use_cache_branch`).
optimum-onnx 0.1.0 no longer writes a merged decoder for decoder-only models (its with-past export
is one `model.onnx`), so the no-past half is exported with optimum's own config at
`use_past_in_inputs=False` (presents out, no past in), as optimum did before; Whisper's and T5's
seq2seq exports still write `decoder_model.onnx` and `decoder_with_past_model.onnx`, merged the
same way (T5, Flan-T5: optimum's `text2text-generation` task, from a config with no network).
`dynamo`: the model wrapped so that its past keys and values are flat graph inputs, exported with
`torch.onnx.export(dynamo=True)` at batch 1 (static) with sequence, past and mask length dynamic
(`Dim.AUTO`); the exporter's per-node metadata (stack traces) is dropped. Norm sites are counted
from PyTorch forward hooks as in models/export.py: one decode-step forward for a with-past graph,
plus one prefill forward for a merged decoder (its two branches). Entries go to manifest.json's
`kv_decoders`.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "real" / "kv"
PAST, SEQUENCE, VOCAB = 32, 8, 64
_SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)


def _config(family: str):
    """The tiny config of one family (random weights are drawn from it)."""
    if family == "llama":
        return transformers.LlamaConfig(**_SIZES)
    if family == "qwen3":
        return transformers.Qwen3Config(**_SIZES, head_dim=8)
    if family == "phi3":
        return transformers.Phi3Config(**_SIZES, pad_token_id=0)
    if family == "gemma2":
        return transformers.Gemma2Config(**_SIZES, head_dim=8, sliding_window=64)
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64
        )
    if family == "whisper":
        return transformers.WhisperConfig(
            vocab_size=VOCAB,
            d_model=32,
            encoder_layers=1,
            encoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_layers=2,
            decoder_attention_heads=4,
            decoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=1500,  # optimum feeds 3000 mel frames
            max_target_positions=64,
            pad_token_id=0,
            decoder_start_token_id=1,
        )
    if family in T5_FAMILIES:
        # T5 (v1.0: ReLU feed-forward, tied embeddings), Flan-T5 and mT5 (v1.1: gated GELU,
        # untied lm_head; mT5 its own model class). Hidden 16 and one decoder layer keep the
        # six files within the KV fixtures' budget; the encoder is not part of the decoder graphs.
        v1_1 = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
        config_class = transformers.MT5Config if family == "mt5" else transformers.T5Config
        return config_class(
            vocab_size=VOCAB,
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_decoder_layers=T5_DECODER_LAYERS,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
            decoder_start_token_id=0,
            pad_token_id=0,
            **({} if family == "t5" else v1_1),
        )
    raise KeyError(family)


T5_FAMILIES = ("t5", "flan_t5", "mt5")
T5_DECODER_LAYERS = 1
# Encoder-decoder families: optimum writes decoder_model.onnx (presents, no past) and
# decoder_with_past_model.onnx; the norms counted are the decoder's.
SEQ2SEQ = ("whisper", *T5_FAMILIES)


# family: (optimum task, opset). Opset 16 for the layer-norm families, so that their norms are
# decomposed (from 17 the exporters write LayerNormalization themselves).
OPTIMUM = {
    "llama": ("text-generation", 17),
    "qwen3": ("text-generation", 17),
    "phi3": ("text-generation", 17),
    "gemma2": ("text-generation", 17),
    "gpt2": ("text-generation", 16),
    "whisper": ("automatic-speech-recognition", 16),
    # T5's norms are RMS norms (T5LayerNorm): no exporter writes them as one op at any opset;
    # 18 is optimum's recommended minimum for T5.
    "t5": ("text2text-generation", 18),
    "flan_t5": ("text2text-generation", 18),
}
# Families exported only when named (`... optimum mt5`), not committed: mT5's decoder graphs are
# Flan-T5's (the T5 v1.1 code under MT5 class names; measured: its with-past file is byte-identical
# to Flan-T5's), and the KV fixtures' budget (4 MiB in all) has no room for them.
OPTIMUM_ON_REQUEST = {"mt5": ("text2text-generation", 18)}
# The forms committed of each optimum family (default: both); Flan-T5's merged decoder is left
# out for the same budget (the v1.0 T5 has both).
OPTIMUM_FORMS = {"flan_t5": ("with_past",)}
# (family, dtype) of the dynamo exports.
DYNAMO = [
    *((family, "float32") for family in ("llama", "qwen3", "phi3", "gemma2", "gpt2")),
    ("llama", "float16"),
    ("whisper", "float32"),
]


def _model(family: str) -> torch.nn.Module:
    """The family's model with random weights (seed 0) and randomised norm affines."""
    from models.export import randomise_norms

    torch.manual_seed(0)
    config = _config(family)
    if family == "whisper":
        model = transformers.WhisperForConditionalGeneration(config)
    elif family == "mt5":
        model = transformers.MT5ForConditionalGeneration(config)
    elif family in T5_FAMILIES:
        model = transformers.T5ForConditionalGeneration(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config)
    randomise_norms(model)
    return model.eval()


def _decoder_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose norms the decoder graphs hold (Whisper, T5: the decoder, not the
    encoder; Whisper's sits in `model.model`, T5's in the model itself)."""
    inner = getattr(model, "model", model)
    return inner.decoder if hasattr(inner, "decoder") else model


def _norm_calls(model: torch.nn.Module, forward) -> dict:
    """Norm-module calls during `forward()`, hooked on the decoder's modules (as export.py)."""
    from models.export import norm_calls

    return norm_calls(_decoder_module(model), forward)


def _forwards(model: torch.nn.Module, family: str) -> tuple:
    """(prefill, decode step) forwards of the PyTorch model, for counting norm calls."""
    ids = torch.randint(0, VOCAB, (1, SEQUENCE))
    extra = {}
    if family in SEQ2SEQ:
        extra["encoder_outputs"] = (torch.randn(1, 8, model.config.d_model),)

    def prefill():
        keyword = "decoder_input_ids" if family in SEQ2SEQ else "input_ids"
        return model(**{keyword: ids}, use_cache=True, **extra)

    def decode():
        cache = prefill().past_key_values
        keyword = "decoder_input_ids" if family in SEQ2SEQ else "input_ids"
        return model(**{keyword: ids[:, :1]}, past_key_values=cache, use_cache=True, **extra)

    return prefill, decode


def _sites(model: torch.nn.Module, family: str, merged: bool) -> dict:
    """Norm sites of a with-past graph (one decode-step forward) or a merged decoder (plus one
    prefill forward: its no-cache branch)."""
    prefill, decode = _forwards(model, family)
    before = _norm_calls(model, prefill)  # the decode forward runs a prefill first: subtract it
    both = _norm_calls(model, decode)
    step = {key: both[key] - before[key] for key in both}
    return {key: step[key] + (before[key] if merged else 0) for key in step}


def _entry(path: Path, family: str, form: str, exporter: str, opset: int, dtype: str) -> dict:
    """The manifest entry of an exported file (norm sites are added by the caller)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    inputs = {
        info.name: [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
        for info in model.graph.input
    }
    return {
        "file": str(path.relative_to(HERE)),
        "architecture": family,
        "form": form,
        "exporter": exporter,
        "opset": opset,
        "dtype": dtype,
        "inputs": inputs,
        "dims": {"batch": 1, "decode": {"sequence": 1, "past": PAST}, "prefill": SEQUENCE},
        "int_input_high": VOCAB,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def _no_past_configs(model: torch.nn.Module, task: str) -> dict:
    """optimum's export config of a decoder that outputs presents but reads no past (the
    no-cache half of a merged decoder), keyed by the submodel names optimum exports."""
    from optimum.exporters.tasks import TasksManager

    constructor = TasksManager.get_exporter_config_constructor(
        "onnx", model=model, task=f"{task}-with-past", library_name="transformers"
    )
    config = constructor(model.config, task=task, use_past=True, use_past_in_inputs=False)
    return {"model": config}


def export_optimum(family: str) -> list[dict]:
    """optimum's with-past decoder and merged decoder of one family (float32)."""
    from importlib.metadata import version

    import onnx
    from optimum.exporters.onnx import main_export
    from optimum.onnx import merge_decoders

    task, opset = {**OPTIMUM, **OPTIMUM_ON_REQUEST}[family]
    model = _model(family)
    entries = []
    with tempfile.TemporaryDirectory() as folder:
        source, plain, past = Path(folder, "hf"), Path(folder, "plain"), Path(folder, "past")
        model.save_pretrained(source)
        # Whisper, T5: one seq2seq export writes decoder_model (presents, no past) and
        # decoder_with_past_model; a decoder-only model is exported twice, its no-past half with
        # optimum's config at use_past_in_inputs=False.
        runs = {past: None}
        if family not in SEQ2SEQ:
            runs = {plain: _no_past_configs(model, task), **runs}
        for out, configs in runs.items():
            main_export(
                str(source),
                out,
                task=f"{task}-with-past",
                opset=opset,
                do_validation=False,
                no_post_process=True,
                library_name="transformers",
                custom_onnx_configs=configs,
            )
        if family in SEQ2SEQ:
            no_past, with_past = past / "decoder_model.onnx", past / "decoder_with_past_model.onnx"
        else:
            no_past, with_past = plain / "model.onnx", past / "model.onnx"
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for form in OPTIMUM_FORMS.get(family, ("with_past", "merged")):
            path = OUT_DIR / f"{family}_optimum_{form}_opset{opset}.onnx"
            if form == "merged":
                # A seq2seq no-past decoder also outputs the encoder presents: optimum's own
                # seq2seq post-processing merges it with strict=False, as here.
                merge_decoders(no_past, with_past, save_path=path, strict=family not in SEQ2SEQ)
            else:
                onnx.save(onnx.load(with_past), path)
            entry = _entry(path, family, form, "optimum", opset, "float32")
            entry |= _sites(model, family, form == "merged")
            entry["optimum"] = {name: version(name) for name in ("optimum", "optimum-onnx")}
            entries.append(entry)
    return entries


class _FlatPast(torch.nn.Module):
    """A causal LM whose past keys and values are flat inputs and whose presents are outputs:
    (input_ids, attention_mask, position_ids, past.0.key, past.0.value, ...) ->
    (logits, present.0.key, present.0.value, ...)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = transformers.DynamicCache(config=self.model.config)
        for layer in range(len(past) // 2):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        presents = []
        for layer in out.past_key_values.layers:
            presents += [layer.keys, layer.values]
        return (out.logits, *presents)


class _FlatPastSeq2Seq(torch.nn.Module):
    """Whisper's decoder with its self-attention past as flat inputs:
    (input_ids, encoder_hidden_states, past.0.decoder.key, past.0.decoder.value, ...) ->
    (logits, present.0.decoder.key, ...). The cross-attention keys and values are computed from
    encoder_hidden_states at every step (no encoder past)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, encoder_hidden_states, *past):
        decoder = transformers.DynamicCache(config=self.model.config)
        for layer in range(len(past) // 2):
            decoder.update(past[2 * layer], past[2 * layer + 1], layer)
        cache = transformers.EncoderDecoderCache(decoder, transformers.DynamicCache())
        out = self.model(
            decoder_input_ids=input_ids,
            encoder_outputs=(encoder_hidden_states,),
            past_key_values=cache,
            use_cache=True,
        )
        presents = []
        for layer in out.past_key_values.self_attention_cache.layers:
            presents += [layer.keys, layer.values]
        return (out.logits, *presents)


def _strip_node_metadata(path: Path) -> None:
    """Drop the exporter's per-node metadata (PyTorch stack traces: three quarters of a tiny
    model's file); the graph is unchanged."""
    import onnx

    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, path)


def export_dynamo(family: str, dtype: str) -> dict:
    """A dynamo export of one family with flat past_key_values inputs (opset 18)."""
    model = _model(family).to(getattr(torch, dtype))
    config = model.config
    seq2seq = family == "whisper"
    if seq2seq:
        heads, layers = config.decoder_attention_heads, config.decoder_layers
        head_dim = config.d_model // heads
    else:
        query_heads = config.num_attention_heads
        heads = getattr(config, "num_key_value_heads", None) or query_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // query_heads
        layers = config.num_hidden_layers
    batch, sequence, past = 1, 2, PAST  # sequence not 1: torch.export specialises a 1
    ids = torch.randint(0, VOCAB, (batch, sequence))
    mask = torch.ones(batch, past + sequence, dtype=torch.int64)
    positions = torch.arange(past, past + sequence).unsqueeze(0)
    pasts = [
        torch.randn(batch, heads, past, head_dim, dtype=getattr(torch, dtype))
        for _ in range(2 * layers)
    ]
    part = ".decoder" if seq2seq else ""
    names = [
        f"past_key_values.{i // 2}{part}.{'key' if i % 2 == 0 else 'value'}"
        for i in range(2 * layers)
    ]
    outputs = ["logits", *(n.replace("past_key_values", "present") for n in names)]
    # AUTO: torch.export finds the relations itself (the mask is past + sequence long).
    s = p = t = torch.export.Dim.AUTO
    varargs = tuple({2: p} for _ in pasts)  # the varargs, as one tuple
    shapes = ({1: s}, {1: t}, {1: s}, varargs)
    wrapper, args = _FlatPast(model), (ids, mask, positions, *pasts)
    input_names = ["input_ids", "attention_mask", "position_ids", *names]
    if seq2seq:
        states = torch.randn(batch, 8, config.d_model, dtype=getattr(torch, dtype))
        shapes = ({1: s}, {1: t}, varargs)
        wrapper, args = _FlatPastSeq2Seq(model), (ids, states, *pasts)
        input_names = ["input_ids", "encoder_hidden_states", *names]
    path = OUT_DIR / f"{family}_dynamo_with_past_opset18_{dtype}.onnx"
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    entry = {}
    try:
        torch.onnx.export(
            wrapper.eval(),
            args,
            str(path),
            dynamo=True,
            opset_version=18,
            input_names=input_names,
            output_names=outputs,
            dynamic_shapes=shapes,
            external_data=False,
        )
        _strip_node_metadata(path)
        entry = _entry(path, family, "with_past", "dynamo", 18, dtype)
    except Exception as error:  # recorded in the manifest, not dropped
        traceback.print_exc()
        path.unlink(missing_ok=True)
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
        entry = {
            "file": str(path.relative_to(HERE)),
            "architecture": family,
            "form": "with_past",
            "exporter": "dynamo",
            "export_error": f"{type(error).__name__}: {message[:500]}",
        }
    entry |= _sites(model.float(), family, merged=False)
    return entry


def main(step: str, families: list[str]) -> int:
    """Run one step (`optimum` or `dynamo`) and merge its entries into manifest.json."""
    if step == "optimum":
        chosen = [f for f in OPTIMUM if not families or f in families]
        chosen += [f for f in OPTIMUM_ON_REQUEST if f in families]
        entries = [e for f in chosen for e in export_optimum(f)]
    else:
        entries = [export_dynamo(f, d) for f, d in DYNAMO if not families or f in families]
    manifest = json.loads((HERE / "manifest.json").read_text())
    written = {entry["file"] for entry in entries}
    kept = [e for e in manifest.get("kv_decoders", []) if e["file"] not in written]
    manifest["kv_decoders"] = sorted(kept + entries, key=lambda e: e["file"])
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    failed = [entry["file"] for entry in entries if "export_error" in entry]
    print(f"exported {len(entries) - len(failed)} of {len(entries)}; failed: {failed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
