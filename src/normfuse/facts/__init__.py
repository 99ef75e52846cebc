"""facts: what is known of every tensor, as ONNX Runtime will execute the model. Constant values
(exact folds per op and opset: `folding`), types and shapes derived and agreed with ONNX
Runtime's own inference (`shapes`, `agreed_types`, `shape_rules`, `inference`), symbolic equality
of shapes (`same_shape`), static values of shape arithmetic, where ONNX Runtime rounds float16
(`float16_partition`), and the one place that builds them all: `model_view.build` and
`ModelView.scope_facts` (every scope's `ScopeFacts`). Imports `ir`, `io`, `errors`."""
