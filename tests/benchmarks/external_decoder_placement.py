"""ADV4-04 measurement: a merged KV decoder (models/kv_decoder.py, hidden 512, 4 layers) saved
with external data (size_threshold=1024), optimised from the file and written elsewhere: how
many external tensors stay external and how many bytes end up inline in If bodies.

Run from the repository root: `python tests/benchmarks/external_decoder_placement.py`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import normfuse
from models.kv_decoder import DecoderConfig, merged_decoder_model


def _initializers(graph: onnx.GraphProto, scope: str = "main"):
    for t in graph.initializer:
        yield scope, t
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(attr.g, f"{scope}/{node.output[0]}.{attr.name}")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.parent.iterdir() if f.is_file())


def main() -> None:
    for norm in ("rms", "layer"):
        with tempfile.TemporaryDirectory() as folder:
            src = Path(folder) / "in" / "decoder.onnx"
            src.parent.mkdir()
            config = DecoderConfig(hidden=512, layers=4, norm=norm)
            onnx.save(
                merged_decoder_model(config),
                src,
                save_as_external_data=True,
                location="decoder.onnx.data",
                size_threshold=1024,
            )
            out = Path(folder) / "out" / "fused.onnx"
            out.parent.mkdir()
            result = normfuse.optimize(str(src))
            normfuse.save(result, out)
            before = onnx.load(src, load_external_data=False)
            after = onnx.load(out, load_external_data=False)
            ext_in = {t.name for t in before.graph.initializer if t.data_location == 1}
            ext_out = {t.name for _, t in _initializers(after.graph) if t.data_location == 1}
            inline = sum(len(t.raw_data) for s, t in _initializers(after.graph) if s != "main")
            print(
                f"{norm}: {len(result.report.sites)} sites; files {_size(src)} -> {_size(out)} B; "
                f"external tensors {len(ext_in)} -> {len(ext_out)} "
                f"({len(ext_in - ext_out)} no longer external); {inline} B inline in bodies"
            )


if __name__ == "__main__":
    main()
