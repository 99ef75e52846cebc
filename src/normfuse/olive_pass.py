"""normfuse as an Olive pass (`olive-ai`, the `olive` extra); only Olive imports this module.

Olive finds passes through a package config, a JSON file mapping a pass type to its module path
(`olive run --config RUN.json --package-config PACKAGE.json`, or `olive.workflows.run(config,
package_config=...)`). That file replaces Olive's own list, so write one holding Olive's passes
and this one with:

    python -m normfuse.olive_pass PACKAGE.json

and name the pass `"type": "Normfuse"` in a workflow (docs/olive/ has an example). The output
model's `model_attributes["normfuse_report"]` is normfuse's report (`Report.as_dict()`), which
Olive writes with the output model's config.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from olive.hardware.accelerator import AcceleratorSpec
from olive.model import ONNXModelHandler
from olive.model.utils import resolve_onnx_path
from olive.package_config import OlivePackageConfig
from olive.passes import Pass
from olive.passes.pass_config import BasePassConfig, PassConfigParam

import normfuse

PASS_TYPE = "Normfuse"
PASS_ENTRY = {
    "module_path": "normfuse.olive_pass.Normfuse",
    "supported_providers": ["*"],
    "supported_accelerators": ["*"],
    "supported_precisions": ["*"],
}
REPORT_KEY = "normfuse_report"


class Normfuse(Pass):
    """Fuse decomposed normalisation subgraphs with normfuse (`normfuse.optimize`)."""

    @classmethod
    def _default_config(cls, accelerator_spec: AcceleratorSpec) -> dict[str, PassConfigParam]:
        return {
            "target": PassConfigParam(
                type_=str,
                default_value="ort",
                description='"ort" (ONNX Runtime contrib forms allowed) or "onnx" (standard ops).',
            ),
            "passes": PassConfigParam(
                type_=list[str] | None,
                default_value=None,
                description="normfuse passes to run (default: layer-norm, rms-norm).",
            ),
            "tune_for": PassConfigParam(
                type_=str | None,
                default_value=None,
                description='"cpu" or "cuda": choose each site\'s form by timing it there.',
            ),
            "validation": PassConfigParam(
                type_=bool,
                default_value=False,
                description="Check each fused site against its original; failures stay unfused.",
            ),
        }

    def _run_for_config(
        self, model: ONNXModelHandler, config: type[BasePassConfig], output_model_path: str
    ) -> ONNXModelHandler:
        output = Path(resolve_onnx_path(output_model_path, Path(model.model_path).name))
        result = normfuse.optimize(
            model.model_path,
            target=config.target,
            passes=config.passes,
            validation=normfuse.ValidationOptions() if config.validation else None,
            tune_for=config.tune_for,
        )
        normfuse.save(result, output)
        attributes = {**(model.model_attributes or {}), REPORT_KEY: result.report.as_dict()}
        return ONNXModelHandler(
            model_path=str(output.parent),
            onnx_file_name=output.name,
            inference_settings=model.inference_settings,
            model_attributes=attributes,
        )


def package_config() -> dict:
    """Olive's default package config with the Normfuse pass added."""
    config = json.loads(Path(OlivePackageConfig.get_default_config_path()).read_text())
    config["passes"][PASS_TYPE] = PASS_ENTRY
    return config


def main(argv: list[str]) -> int:
    """Write `package_config()` to the path given (atomically)."""
    if len(argv) != 1:
        print("usage: python -m normfuse.olive_pass PACKAGE_CONFIG.json", file=sys.stderr)
        return 2
    target = Path(argv[0])
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as out:
        json.dump(package_config(), out, indent=2)
        out.write("\n")
    os.replace(out.name, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
