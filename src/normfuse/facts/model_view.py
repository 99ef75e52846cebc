"""One view of a model, built once per `optimize` call, that every rewrite and check asks.

It owns the facts a fusion relies on, each read the way ONNX Runtime will execute the model:
names are unique across scopes (so a fact keyed by name is a fact of one tensor), types are the
ones shape inference derives (declared ones only where inference agrees), and initializers that a
caller may override are graph inputs, never constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from normfuse.errors import NormfuseError
from normfuse.facts.constants import ConstantReader
from normfuse.facts.facts import ScopeFacts
from normfuse.facts.float16_partition import Float16Reads, has_float16, read_float16
from normfuse.facts.folding import Opset, default_opset
from normfuse.facts.shapes import TensorType, TypeFacts, derive_types
from normfuse.ir.graph_import import scopes, with_inputs
from normfuse.ir.scopes import (
    all_graphs,
    body_overridable,
    overridable,
    shadowing_initializers,
    unique_names,
)


@dataclass(frozen=True)
class ModelView:
    """A model with names unique across scopes, and the facts derived from it."""

    model: onnx.ModelProto
    base_dir: Path | None
    facts: TypeFacts
    function_types: dict[tuple[str, str], dict[str, TensorType]]
    overridable: frozenset[str]
    # Why no scope may be rewritten (a construct whose run-time binding is unclear); None: fine.
    unsupported: str | None = None
    # The graph imported to derive the facts, unchanged, until the first `import_graph` takes it.
    imported: list[gs.Graph] = field(default_factory=list)
    # ONNX Runtime's float16 reads of the model, read on first use (`float16_reads`).
    _float16: dict[str, Float16Reads | None] = field(default_factory=dict)

    @property
    def types(self) -> dict[str, TensorType]:
        """Derived types by (unique) name, main graph and nested bodies."""
        return self.facts.types

    def import_graph(self) -> gs.Graph:
        """The model as an onnx-graphsurgeon graph in which overridable initializers are graph
        inputs (variables), so that no matcher can read them as constants: the one `build`
        imported first (each rewrite changes its graph, so a later rewrite imports again)."""
        if self.imported:
            return self.imported.pop()
        try:
            graph = gs.import_onnx(self.model)
        except Exception as error:
            raise NormfuseError(f"cannot read the model's graph: {error}") from None
        return with_inputs(graph, self.model, self.overridable)

    def float16_reads(self) -> Float16Reads | None:
        """Which float16 reads ONNX Runtime's CPU provider rounds in the model (read once, and
        only for a model with float16 values); None where there are none or it cannot tell."""
        if "reads" not in self._float16:
            found = read_float16(self.model) if has_float16(self.model) else None
            self._float16["reads"] = found
        return self._float16["reads"]

    def scope_facts(self) -> tuple[ScopeFacts, dict[tuple[str, str], ScopeFacts]]:
        """The facts of every scope, built fresh for one rewrite: the main graph's (one constant
        reader at the model's opset, its folds memoised; the derived types, their conflicts and
        ONNX Runtime's float16 rounding) and each model-local function's by (domain, name) (its
        body read at the function's opset, the types merged over its calls)."""
        model_opset = default_opset(self.model) or None
        reads = self.float16_reads()
        main = ScopeFacts(
            ConstantReader(self.base_dir, opset=model_opset),
            self.types,
            self.facts.conflicts,
            None if reads is None else reads.is_rounded,
        )
        functions = {
            (function.domain, function.name): ScopeFacts(
                ConstantReader(self.base_dir, opset=_function_opset(function, model_opset)),
                self.function_types[(function.domain, function.name)],
            )
            for function in self.model.functions
        }
        return main, functions

    def overridable_initializers(self) -> list[onnx.TensorProto]:
        """The initializers that are also graph inputs, as the model has them (their defaults)."""
        return [t for t in self.model.graph.initializer if t.name in self.overridable]


def _function_opset(function: onnx.FunctionProto, model_opset: int | None) -> Opset:
    """The default-domain opset a function body is read at: its own import, and the model's
    where that differs (ONNX Runtime inlines the body at the model's opset, the spec reads it at
    the function's: a node is folded or matched only where both mean the same)."""
    own = next((e.version for e in function.opset_import if e.domain in ("", "ai.onnx")), None)
    if own is None or model_opset is None or own == model_opset:
        return own or model_opset
    return (own, model_opset)


def build(model: onnx.ModelProto, base_dir: Path | None) -> ModelView:
    """The view of `model` (not changed; a renamed copy is made only where bodies shadow).
    The graph is imported once here: the type folding reads it, and the first rewrite takes it
    (a model gs cannot read is refused when a rewrite asks for it, as before)."""
    unique = unique_names(model)
    overridable_names = frozenset(overridable(unique.graph))
    try:
        imported = [gs.import_onnx(unique)]
    except Exception:  # refused by `import_graph`, after the facts are derived
        imported = []
    imported = [with_inputs(graph, unique, overridable_names) for graph in imported]
    facts = derive_types(unique, imported[0] if imported else None)
    nested = body_overridable(unique)
    shadowing = shadowing_initializers(model)
    unsupported = None
    if shadowing:
        unsupported = (
            f"a nested body's initializer {sorted(shadowing)[0]!r} is named like an outer value; "
            "which one it means is runtime-defined, so the model is left as it is"
        )
    elif nested:
        unsupported = (
            f"a nested body lists its initializer {sorted(nested)[0]!r} as a body input too"
        )
    elif any(graph.sparse_initializer for graph in all_graphs(unique.graph)):
        unsupported = "the model has sparse initializers, which the graph rewriter cannot keep"
    return ModelView(
        unique, base_dir, facts, facts.function_types, overridable_names, unsupported, imported
    )


def detach_from_caller(graph: gs.Graph) -> None:
    """Give every constant whose export would write into the caller's model its own copy.

    gs keeps each constant as a lazy view of the model's own TensorProto and, on export, sets that
    proto's `name` to the constant's: an unnamed `Constant` node value gains a present (empty)
    name, a renamed constant renames the caller's tensor. Those few are copied first (initializers
    that keep their name are left as views, so no weight is copied)."""
    for scope, _ in scopes(graph):
        constants = [t for t in scope.tensors().values() if isinstance(t, gs.Constant)]
        for node in scope.nodes:
            constants += [v for v in node.attrs.values() if isinstance(v, gs.Constant)]
        for constant in constants:
            values = constant._values
            if not isinstance(values, LazyValues) or not isinstance(
                values.tensor, onnx.TensorProto
            ):
                continue
            proto = values.tensor
            if not proto.HasField("name") or proto.name != constant.name:
                copy = onnx.TensorProto()
                copy.CopyFrom(proto)
                constant._values = LazyValues(copy)
