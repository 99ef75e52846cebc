"""The bench's defaults, in a module that imports nothing: the command line's help reads them
without loading ONNX Runtime."""

RUNS = 200  # timed rounds per model
SESSION_SETS = 10  # session sets of fresh sessions the rounds are split over
WARMUP = 10  # untimed rounds in each session set
MIN_RUNS_PER_SET = 10  # fewest timed rounds in a set: its median must mean something
