"""stages: other tools run before normfuse's passes (`--with`), their output treated as untrusted:
ONNX Runtime's transformers optimizer (`ort_transformers`), its model type read from the graph
(`model_type`), and the fusion options found responsible for a failure by bisection
(`option_bisection`). Imports `measure` and below."""
