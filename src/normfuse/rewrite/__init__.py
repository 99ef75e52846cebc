"""rewrite: applying the passes. The rounds (`rounds.run`: match everything, decide per site,
repeat until nothing fuses), writing proved sites into the graph (`emit`), and writing the graph
back into a model with the opset and domains it needs (`model_export`). Imports `match`, the
passes' protocol and below; never a pass itself."""
