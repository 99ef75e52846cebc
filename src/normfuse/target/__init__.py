"""target: which fused operator each target runtime accepts at which opset (`--target ort` or
`onnx`, `--max-opset`), and when a model's opset may be raised to it (every surviving node means
the same there). Imports `facts` and below."""
