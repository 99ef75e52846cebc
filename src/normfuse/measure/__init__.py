"""measure: time. Side-by-side latency with session sets and intervals over them (`bench`, its
defaults in `defaults`), ONNX Runtime session settings by measurement (`tune`), per-site form
choice by timing (`forms`, `--tune-for`), and the ratio chart (`plot`). Imports `prove` and
below."""
