"""cli: the `normfuse` command line. Parsing (`parser`, which imports no ONNX library so `--help`
starts fast), the entry point and its one-line errors and exit codes (`main`), each command, and
batches (`batch`, `manifest`: several models, written whole or not at all). Imports `driver` and
below."""
