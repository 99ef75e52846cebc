"""measure: time. Side-by-side latency with session sets and bootstrap intervals (`bench`), ONNX
Runtime session settings by measurement (`tune`), per-site form choice by timing (`forms`,
`--tune-for`), and the ratio chart (`plot`). Imports `prove` and below."""
